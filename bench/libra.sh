#!/usr/bin/env bash
# libra.sh: the Libra benchmark at equal hardware: a CTR model trained data-parallel on the
# emulated cluster, all-PS against hot/cold with the same number of aggregation hosts, the
# bytes of every aggregation host's link measured against the model that predicts them
# (ina-ctr-gen --plan), and a training run to convergence. Root only (network namespaces).
# Not part of `make test`. Run it under the team's lock: flock /work/locks/bench.lock
# bash bench/libra.sh. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF2'
Usage: bench/libra.sh [options]

Builds an emulated cluster (scripts/netns.sh, prefix "l"): N worker namespaces and A
aggregation hosts (host 0 = namespace lsw, hosts 1..A-1 = ls0..), every link shaped alike
with tbf. Every setup compared in the headline aggregates on the same A hosts:
  ps        all-PS: an ina-ps shard on each of the A hosts (keys split by hash)
  hotcold   hot/cold: ina-switch (--multicast) and shard 0 on host 0, shards 1..A-1 on the
            others; the cold keys split by weight so that every host's link carries the
            same bytes (the weights from ina-ctr-gen --plan)
and, for contrast, with fewer hosts:
  ps1       all-PS on one ina-ps host (host 0)
Before the runs, ina-ctr-gen --plan predicts every host's bytes per step and picks H (the
hot keys) and the weights; each run counts what its timed steps put on every host's link
(tc's byte counters, in a pause before and after them: ina-ctr --mark-dir) and the report
sets both side by side. Then, with --converge T, ps and hotcold train T steps more (fresh
samples, the hot set refreshed every --reprofile steps) and report their held-out log-loss
against the planted model's (the Bayes floor).

Options:
  --workers N      workers (default 4)
  --hosts A        aggregation hosts (default 2)
  --rate RATE      tbf rate of every link (default 100mbit)
  --keys K         feature keys (default 400000)
  --alpha A        Zipf exponent (default 1.1)
  --batch B        samples per worker per step (default 1024)
  --steps T        timed steps (default 20), after --profile + 3 steps (not timed)
  --hot H          hot keys (default: the plan's best of 32000,48000,64000,80000)
  --profile P      steps every rank samples before the first hot set (default 16)
  --modes LIST     default "ps1 ps hotcold"
  --repeat R       runs of each mode, interleaved (default 3)
  --converge T     then train ps and hotcold T steps each (default 0: no)
  --reprofile E    a new hot set every E steps in the convergence runs (default 250)
  --out FILE       also write the report there (default bench/results/libra.md)
  --help           this text
Environment: INA_BUILD_DIR (default build), INA_KV_SAMPLE (the profile's 1 in R).
EOF2
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
N=4 A=2 RATE=100mbit KEYS=400000 ALPHA=1.1 BATCH=1024 STEPS=20 HOT= PROFILE=16 REPEAT=3
CONVERGE=0 REPROFILE=250 MODES="ps1 ps hotcold" OUT=$ROOT/bench/results/libra.md
while [ $# -gt 0 ]; do
    case $1 in
        --workers) N=$2; shift 2 ;;
        --hosts) A=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --keys) KEYS=$2; shift 2 ;;
        --alpha) ALPHA=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --hot) HOT=$2; shift 2 ;;
        --profile) PROFILE=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --converge) CONVERGE=$2; shift 2 ;;
        --reprofile) REPROFILE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "libra.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: libra.sh needs root for network namespaces" >&2
    exit 77
fi
if [ "$A" -lt 1 ] || [ "$A" -gt 9 ]; then
    echo "libra.sh: --hosts must be 1..9" >&2
    exit 2
fi
BIN=$BUILD_DIR/bin
for b in ina-ps ina-switch ina-ctr ina-ctr-gen; do
    [ -x "$BIN/$b" ] || { echo "libra.sh: $BIN/$b missing: build first (make SKIP_DEPS=1)" >&2; exit 1; }
done
log() { echo "libra.sh: $*" >&2; }

# ---- The model: every host's bytes per step, H and the weights -------------------------

WARMUP=$((PROFILE + 3))
PLAN=$(mktemp /tmp/libra-plan.XXXXXX)
"$BIN/ina-ctr-gen" --plan --keys "$KEYS" --alpha "$ALPHA" --workers "$N" --batch "$BATCH" \
    --hosts "$A" --hot "${HOT:-32000,48000,64000,80000}" --profile "$PROFILE" --steps 4 \
    --rate "$RATE" ${INA_KV_SAMPLE:+--sample "$INA_KV_SAMPLE"} >"$PLAN" || { log "the plan failed"; exit 1; }
HOT=$(sed -n 's/^PLAN_BEST H=\([0-9]*\) .*/\1/p' "$PLAN")
WEIGHTS=$(sed -n 's/^PLAN_BEST .* weights=\([0-9,]*\) .*/\1/p' "$PLAN")
[ -n "$HOT" ] && [ -n "$WEIGHTS" ] || { log "no PLAN_BEST in the plan"; cat "$PLAN" >&2; exit 1; }
planned() { # SETUP HOST DIR -> bytes per step the model predicts
    awk -v s="$1" -v h="$2" -v d="$3" '$1 == "PLAN_HOST" && $2 == "setup=" s && $3 == "host=" h {
        split($(d == "in" ? 4 : 5), kv, "="); print kv[2] }' "$PLAN"
}
plan_ms() { awk -v s="$1" '$1 == "PLAN" && $2 == "setup=" s { split($5, kv, "="); print kv[2] }' "$PLAN"; }

# ---- The cluster ---------------------------------------------------------------------

CL=l
# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
RUN=$(mktemp -d /tmp/libra-bench.XXXXXX)
mv "$PLAN" "$RUN/plan.txt"
PLAN=$RUN/plan.txt
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ina_ns_teardown "$CL" >/dev/null 2>&1
}
trap cleanup EXIT
ina_ns_reap_stale "$CL" 2>/dev/null
export INA_NS_SHAPE_SWITCH=1 INA_NS_LATENCY=${INA_NS_LATENCY:-100ms} INA_NS_SHARDS=$((A - 1))
ina_ns_setup "$CL" "$N" "$RATE" || exit 1
HOSTNS=("${CL}sw") HOSTIP=("$(ina_ns_ip "$CL" sw)")
for ((h = 1; h < A; h++)); do
    HOSTNS+=("${CL}s$((h - 1))")
    HOSTIP+=("$(ina_ns_ip "$CL" "s$((h - 1))")")
done
PSPORT=21300 SWPORT=21301

report() { tee -a "$RUN/report.md"; }

# A link's bytes so far: "IN OUT" of host h (toward it: the bridge's port; from it: its eth0).
link_bytes() {
    local ns=$1 in out
    in=$(tc -n "${CL}br" -s qdisc show dev "$ns" | sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p' | head -1)
    out=$(tc -n "$ns" -s qdisc show dev eth0 | sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p' | head -1)
    echo "${in:-0} ${out:-0}"
}
# Every aggregation host's and worker's counters into FILE.
snapshot() {
    local f=$1 h r
    : >"$f"
    for ((h = 0; h < A; h++)); do echo "host$h $(link_bytes "${HOSTNS[$h]}")" >>"$f"; done
    for ((r = 0; r < N; r++)); do echo "w$r $(link_bytes "${CL}w$r")" >>"$f"; done
}
# Take the snapshots when rank 0 marks the pauses before and after the timed steps.
watch_marks() {
    local d=$1 what
    for what in start end; do
        while [ ! -e "$d/marks/$what" ]; do
            [ -e "$d/done" ] && return
            sleep 0.02
        done
        snapshot "$d/bytes.$what"
    done
}

ps_addrs() { # MODE -> the shard list
    local mode=$1 h out=
    case $mode in
        ps1) echo "${HOSTIP[0]}:$PSPORT" ;;
        ps) for ((h = 0; h < A; h++)); do out+="${out:+,}${HOSTIP[$h]}:$PSPORT"; done; echo "$out" ;;
        hotcold)
            IFS=, read -r -a w <<<"$WEIGHTS"
            for ((h = 0; h < A; h++)); do out+="${out:+,}${HOSTIP[$h]}:$PSPORT@${w[$h]}"; done
            echo "$out" ;;
    esac
}

# run_mode MODE REP STEPS WARMUP [EXTRA...]: one training run in $RUN/MODE.REP.
run_mode() {
    local mode=$1 rep=$2 steps=$3 warmup=$4 d=$RUN/$1.$2 r h ns job=ctr$rep kvmode=ps
    shift 4
    mkdir -p "$d/marks"
    local shards=$A
    [ "$mode" = ps1 ] && shards=1
    [ "$mode" = hotcold ] && kvmode=hotcold
    for ((h = 0; h < shards; h++)); do
        ip netns exec "${HOSTNS[$h]}" "$BIN/ina-ps" --listen "${HOSTIP[$h]}:$PSPORT" \
            --shard "$h/$shards" --max-memory 2G --quiet 2>"$d/ps$h.err" &
        PIDS+=($!)
    done
    if [ "$mode" = hotcold ]; then
        ip netns exec "${HOSTNS[0]}" "$BIN/ina-switch" --listen "${HOSTIP[0]}:$SWPORT" \
            --multicast --hot-keys "$((HOT > 65536 ? HOT : 65536))" --quiet 2>"$d/sw.err" &
        PIDS+=($!)
    fi
    sleep 0.5
    watch_marks "$d" &
    local watcher=$! wp=()
    for ((r = 0; r < N; r++)); do
        ip netns exec "${CL}w$r" timeout -k 5 1800 "$BIN/ina-ctr" --mode "$kvmode" --world "$N" \
            --rank "$r" --keys "$KEYS" --alpha "$ALPHA" --batch "$BATCH" --steps "$steps" \
            --warmup "$warmup" --hot-keys "$HOT" --profile "$PROFILE" --job "$job" \
            --ps "$(ps_addrs "$mode")" --switch "${HOSTIP[0]}:$SWPORT" --eval 20000 --quiet \
            "$@" >"$d/r$r.out" 2>"$d/r$r.err" &
        wp+=($!)
    done
    wait "${wp[@]}"
    touch "$d/done"
    wait "$watcher"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    PIDS=()
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# Bytes per timed step of link NAME in DIR (in or out), from the two snapshots.
per_step() {
    local d=$1 name=$2 dir=$3 col=2
    [ "$dir" = out ] && col=3
    [ -s "$d/bytes.start" ] && [ -s "$d/bytes.end" ] || { echo nan; return; }
    awk -v n="$name" -v c="$col" -v s="$STEPS" 'FNR == 1 { f++ } $1 == n { v[f] = $c }
        END { printf "%.0f\n", (v[2] - v[1]) / s }' "$d/bytes.start" "$d/bytes.end"
}

# ---- The report ------------------------------------------------------------------------

{
    echo "# Libra benchmark: CTR training at equal hardware, N=$N, $A aggregation hosts, K=$KEYS, alpha=$ALPHA"
    echo
    echo "$(nproc)-core VM, $(date -u +%Y-%m-%d), load before: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Emulated cluster: every link (N workers, the $A aggregation hosts) shaped to $RATE with"
    echo "tbf each way, MTU 1500. **all-PS and hot/cold aggregate on the same $A hosts**: all-PS"
    echo "runs an ina-ps shard on each; hot/cold runs ina-switch (--multicast) beside shard 0 on"
    echo "host 0 and a shard on each other host, the cold keys split by the weights $WEIGHTS"
    echo "(PROTOCOL.md §14.1), H = $HOT hot keys from every rank's sample (1 in ${INA_KV_SAMPLE:-2}"
    echo "entries over $PROFILE steps). The 1-shard all-PS row has 1 aggregation host: contrast only."
    echo "$STEPS timed steps after $WARMUP (batches drawn before the first step: --predraw);"
    echo "batch $BATCH per worker, Adagrad (lr 0.2, eps 0.001)."
    echo
    echo "The model (\`ina-ctr-gen --plan\`, bytes per step on every link):"
    echo
    echo '```'
    cat "$PLAN"
    echo '```'
    echo
} | report

declare -A MED LOSS HS STATUS
for ((rep = 0; rep < REPEAT; rep++)); do
    for mode in $MODES; do
        log "run $((rep + 1))/$REPEAT: $mode ..."
        run_mode "$mode" "$rep" "$STEPS" "$WARMUP" --predraw --mark-dir "$RUN/$mode.$rep/marks"
        d=$RUN/$mode.$rep
        res=$(grep -h RESULT "$d"/r0.out 2>/dev/null | head -1)
        if [ -z "$res" ] || [ "$(field status <<<"$res")" != ok ]; then
            log "$mode failed: $(tail -2 "$d"/*.err 2>/dev/null | tr '\n' ' ')"
            STATUS[$mode]=failed
            continue
        fi
        STATUS[$mode]=ok
        MED[$mode]+="$(field step_ms_median <<<"$res") "
        LOSS[$mode]=$(field eval_logloss <<<"$res")
        HS[$mode]=$(grep -h RANKSTAT "$d"/r*.out | field hot_share | awk '{ s += $1; n++ } END { printf "%.3f", n ? s / n : 0 }')
        log "$mode: step ms $(field step_ms_median <<<"$res")"
    done
done

base=$(median <<<"${MED[ps]:-}")
label() {
    case $1 in
        ps1) echo "all-PS, 1 shard (contrast: 1 aggregation host)" ;;
        ps) echo "all-PS, $A shards" ;;
        hotcold) echo "hot/cold, switch + $A shards" ;;
    esac
}
{
    echo "| setup | aggregation hosts | step ms (median of $REPEAT runs) | runs | vs all-PS ($A shards) | model ms | hot share | held-out log-loss |"
    echo "|---|---|---|---|---|---|---|---|"
    for mode in $MODES; do
        hosts=$A setup=$mode
        [ "$mode" = ps1 ] && hosts=1 setup=allps1
        [ "$mode" = ps ] && setup=allps
        if [ "${STATUS[$mode]:-failed}" != ok ]; then
            echo "| $(label "$mode") | $hosts | failed | | | | | |"
            continue
        fi
        m=$(median <<<"${MED[$mode]}")
        ratio=$(awk -v b="$base" -v m="$m" 'BEGIN { if (b > 0 && m > 0) printf "%.2fx", b / m; else print "-" }')
        echo "| $(label "$mode") | $hosts | $m | ${MED[$mode]% } | $ratio | $(plan_ms "$setup") | ${HS[$mode]:-0} | ${LOSS[$mode]} |"
    done
    echo
    echo "Bytes per timed step on each link (first run of each setup; measured: tc's counters"
    echo "in the pause before and after the timed steps; model: ina-ctr-gen --plan):"
    echo
    echo "| setup | link | in, measured | in, model | out, measured | out, model |"
    echo "|---|---|---|---|---|---|"
    for mode in $MODES; do
        [ "${STATUS[$mode]:-failed}" = ok ] || continue
        d=$RUN/$mode.0 setup=$mode hosts=$A
        [ "$mode" = ps1 ] && setup=allps1 hosts=1
        [ "$mode" = ps ] && setup=allps
        for ((h = 0; h < hosts; h++)); do
            echo "| $(label "$mode") | host $h | $(per_step "$d" "host$h" in) | $(planned "$setup" "$h" in) | $(per_step "$d" "host$h" out) | $(planned "$setup" "$h" out) |"
        done
        wi=0 wo=0
        for ((r = 0; r < N; r++)); do
            x=$(per_step "$d" "w$r" in) y=$(per_step "$d" "w$r" out)
            wi=$(awk -v a="$wi" -v b="$x" 'BEGIN { print (b > a ? b : a) }')
            wo=$(awk -v a="$wo" -v b="$y" 'BEGIN { print (b > a ? b : a) }')
        done
        echo "| $(label "$mode") | busiest worker | $wi | $(planned "$setup" worker in) | $wo | $(planned "$setup" worker out) |"
    done
    echo
    echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
} | report

# ---- Convergence ------------------------------------------------------------------------

if [ "$CONVERGE" -gt 0 ]; then
    declare -A CL_LOSS CL_BAYES CL_SEC CL_MS
    for mode in ps hotcold; do
        log "converge: $mode, $CONVERGE steps ..."
        t0=$(date +%s.%N)
        run_mode "$mode" conv "$CONVERGE" 0 --reprofile "$REPROFILE"
        t1=$(date +%s.%N)
        res=$(grep -h RESULT "$RUN/$mode.conv/r0.out" 2>/dev/null | head -1)
        CL_LOSS[$mode]=$(field eval_logloss <<<"$res")
        CL_BAYES[$mode]=$(field bayes_logloss <<<"$res")
        CL_MS[$mode]=$(field step_ms_mean <<<"$res")
        CL_SEC[$mode]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
        log "converge: $mode: log-loss ${CL_LOSS[$mode]:-?} (Bayes ${CL_BAYES[$mode]:-?})"
    done
    {
        echo "Convergence: ps and hotcold trained $CONVERGE steps each ($((CONVERGE * N * BATCH)) fresh samples;"
        echo "hot/cold refreshes its hot set every $REPROFILE steps), then rank 0 evaluates 20000"
        echo "held-out samples:"
        echo
        echo "| setup | held-out log-loss | planted model's (Bayes) | above the floor | mean step ms | wall s |"
        echo "|---|---|---|---|---|---|"
        for mode in ps hotcold; do
            echo "| $(label "$mode") | ${CL_LOSS[$mode]:-failed} | ${CL_BAYES[$mode]:-} | $(awk -v l="${CL_LOSS[$mode]:-0}" -v b="${CL_BAYES[$mode]:-0}" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * (l / b - 1) }') | ${CL_MS[$mode]:-} | ${CL_SEC[$mode]:-} |"
        done
        echo
    } | report
fi
mkdir -p "$(dirname "$OUT")"
cp "$RUN/report.md" "$OUT"
log "report: $OUT (raw outputs in $RUN)"
