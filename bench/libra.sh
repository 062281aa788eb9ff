#!/usr/bin/env bash
# libra.sh: the Libra benchmark: a CTR model trained data-parallel on the emulated cluster, all-PS
# (ina-ps alone) against hot/cold (hot keys in ina-switch, the rest at ina-ps) and dense
# all-reduce of the whole gradient (ina and OpenMPI), in one run; plus the update-coverage
# curve of the hot set. Root only (network namespaces). Not part of `make test`. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF2'
Usage: bench/libra.sh [options]

Builds an emulated cluster (scripts/netns.sh, prefix "l"): N worker namespaces, one for
ina-ps and one for ina-switch, every link shaped alike with tbf (INA_NS_SHAPE_SWITCH=1; the
PS host is a node like a worker), and trains ina-ctr in each mode for the same steps:
  ps         all-PS: every key pushed to and pulled from ina-ps
  hotcold    hot keys summed in ina-switch's hot table, cold keys at ina-ps
  dense-ina  the whole gradient (K+1 floats) all-reduced through ina-switch
  dense-mpi  the same with OpenMPI (TCP), launched across the namespaces
and prints the coverage curve (ina-ctr-gen --coverage), then per mode: median time per
step, bytes at the PS per step (every rank's datagrams to and from ina-ps), the link-bound
ideal (bytes on the busiest link / rate), the ratio to all-PS, and the held-out log-loss.

Options:
  --workers N      workers (default 4)
  --rate RATE      tbf rate of every link (default 100mbit)
  --keys K         feature keys (default 1000000)
  --alpha A        Zipf exponent (default 1.0)
  --batch B        samples per worker per step (default 1024)
  --steps T        timed steps of ps and hotcold (default 20)
  --dense-steps T  timed steps of the dense modes (default 5, after 1 warm-up step: each
                   moves the whole gradient, 4(K+1) bytes a worker)
  --hot H          hot keys (default 32000)
  --profile P      steps rank 0 profiles before the hot set is installed (default 16); they
                   are warm-up, with 3 more (not timed)
  --modes LIST     default "ps hotcold dense-ina dense-mpi"
  --repeat R       runs of each mode, interleaved (default 1)
  --out FILE       also write the report there (default bench/results/libra.md)
  --help           this text
Environment: INA_BUILD_DIR (default build).
EOF2
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
N=4 RATE=100mbit KEYS=1000000 ALPHA=1.0 BATCH=1024 STEPS=20 HOT=32000 PROFILE=16 REPEAT=1 DENSE_STEPS=5
MODES="ps hotcold dense-ina dense-mpi" OUT=$ROOT/bench/results/libra.md
while [ $# -gt 0 ]; do
    case $1 in
        --workers) N=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --keys) KEYS=$2; shift 2 ;;
        --alpha) ALPHA=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --dense-steps) DENSE_STEPS=$2; shift 2 ;;
        --hot) HOT=$2; shift 2 ;;
        --profile) PROFILE=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "libra.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: libra.sh needs root for network namespaces" >&2
    exit 77
fi
BIN=$BUILD_DIR/bin
for b in ina-ps ina-switch ina-ctr ina-ctr-gen; do
    [ -x "$BIN/$b" ] || { echo "libra.sh: $BIN/$b missing: build first (make SKIP_DEPS=1)" >&2; exit 1; }
done
CL=l
# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
RUN=$(mktemp -d /tmp/libra-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ina_ns_teardown "$CL" >/dev/null 2>&1
}
trap cleanup EXIT
ina_ns_reap_stale "$CL" 2>/dev/null
export INA_NS_SHAPE_SWITCH=1 INA_NS_LATENCY=${INA_NS_LATENCY:-100ms}
ina_ns_setup "$CL" $((N + 1)) "$RATE" || exit 1
ina_ns_host_link "$CL" || exit 1
PSNS=${CL}w$N SWNS=${CL}sw
PSIP=$(ina_ns_ip "$CL" "w$N") SWIP=$(ina_ns_ip "$CL" sw)
PSPORT=21300 SWPORT=21301
log() { echo "libra.sh: $*" >&2; }

report() { tee -a "$RUN/report.md"; }

{
    echo "# Libra benchmark: CTR training, N=$N, K=$KEYS, alpha=$ALPHA, batch $BATCH per worker"
    echo
    echo "On the 2-core VM, $(date -u +%Y-%m-%d), load before: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Emulated cluster: every link (N workers, the ina-ps host, the ina-switch host) shaped"
    echo "to $RATE with tbf; MTU 1500. ps and hotcold: $STEPS timed steps after $((PROFILE + 3)) warm-up"
    echo "steps (the first $PROFILE are rank 0's profile, all-PS, in both: they train the same steps);"
    echo "dense modes: $DENSE_STEPS timed steps after 1 (their log-loss is after those steps only)."
    echo
    echo '```'
    "$BIN/ina-ctr-gen" --coverage --keys "$KEYS" --alpha "$ALPHA" --workers "$N" --batch "$BATCH" \
        --profile "$PROFILE" --steps 8 --hot "$(printf '%s\n' 0 1000 4000 16000 32000 "$HOT" 64000 \
            128000 256000 | sort -un | paste -sd,)"
    echo '```'
    echo
} | report

# run_mode MODE REP: one training run; leaves $RUN/MODE.REP/{r*.out,ps.err,sw.err}.
run_mode() {
    local mode=$1 rep=$2 d=$RUN/$1.$2 r job=ctr$rep steps=$STEPS warmup=$((PROFILE + 3))
    mkdir -p "$d"
    case $mode in dense-*) steps=$DENSE_STEPS warmup=1 ;; esac
    local common=(--mode "$mode" --world "$N" --keys "$KEYS" --alpha "$ALPHA" --batch "$BATCH"
        --steps "$steps" --warmup "$warmup" --hot-keys "$HOT" --profile "$PROFILE" --job "$job"
        --ps "$PSIP:$PSPORT" --switch "$SWIP:$SWPORT" --eval 20000 --quiet)
    if [ "$mode" = ps ] || [ "$mode" = hotcold ]; then
        ip netns exec "$PSNS" "$BIN/ina-ps" --listen "$PSIP:$PSPORT" --quiet 2>"$d/ps.err" &
        PIDS+=($!)
    fi
    if [ "$mode" = hotcold ] || [ "$mode" = dense-ina ]; then
        ip netns exec "$SWNS" "$BIN/ina-switch" --listen "$SWIP:$SWPORT" --hot-keys "$HOT" \
            --quiet 2>"$d/sw.err" &
        PIDS+=($!)
    fi
    sleep 0.5
    if [ "$mode" = dense-mpi ]; then
        local cmd=(timeout -k 5 600 mpirun --allow-run-as-root --oversubscribe --bind-to none
            --mca btl tcp,self --mca btl_tcp_if_include "$(ina_ns_subnet "$CL").0/24"
            --mca oob_tcp_if_include "${CL}h")
        for ((r = 0; r < N; r++)); do
            [ "$r" -gt 0 ] && cmd+=(:)
            cmd+=(-np 1 ip netns exec "${CL}w$r" "$BIN/ina-ctr" "${common[@]}")
        done
        env PMIX_MCA_ptl_tcp_if_include="${CL}h" PMIX_MCA_ptl_tcp_remote_connections=1 \
            "${cmd[@]}" >"$d/all.out" 2>"$d/err"
        grep -h RESULT "$d/all.out" >"$d/r0.out"
        grep -h RANKSTAT "$d/all.out" >>"$d/r0.out"
    else
        local wp=()
        for ((r = 0; r < N; r++)); do
            ip netns exec "${CL}w$r" env INA_CTR_TRACE=1 timeout -k 5 600 "$BIN/ina-ctr" "${common[@]}" --rank "$r" \
                >"$d/r$r.out" 2>"$d/r$r.err" &
            wp+=($!)
        done
        wait "${wp[@]}"
    fi
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    PIDS=()
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }

declare -A MED BYTES PSIN PSOUT SWB LOSS AUC BAYES HOTSH STATUS
for ((rep = 0; rep < REPEAT; rep++)); do
    for mode in $MODES; do
        log "run $((rep + 1))/$REPEAT: $mode ..."
        run_mode "$mode" "$rep"
        d=$RUN/$mode.$rep
        res=$(cat "$d"/r*.out 2>/dev/null | grep RESULT | head -1)
        if [ -z "$res" ]; then
            log "$mode failed: $(tail -3 "$d"/*.err 2>/dev/null | tr '\n' ' ')"
            STATUS[$mode]=failed
            continue
        fi
        MED[$mode]+="$(field step_ms_median <<<"$res") "
        LOSS[$mode]=$(field eval_logloss <<<"$res")
        AUC[$mode]=$(field eval_auc <<<"$res")
        BAYES[$mode]=$(field bayes_logloss <<<"$res")
        STATUS[$mode]=$(field status <<<"$res")
        # bytes at the PS per step: every rank's datagrams to it and from it
        read -r pin pout swb hs < <(cat "$d"/r*.out | grep RANKSTAT | awk '
            { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
              pin += v["ps_bytes_sent_per_step"]; pout += v["ps_bytes_recv_per_step"];
              sw += v["switch_bytes_per_step"]; hs += v["hot_share"]; n++ }
            END { printf "%.0f %.0f %.0f %.3f\n", pin, pout, sw, n ? hs / n : 0 }')
        PSIN[$mode]=$pin PSOUT[$mode]=$pout SWB[$mode]=$swb HOTSH[$mode]=$hs
        log "$mode: step ms ${MED[$mode]}, PS in/out $pin/$pout B/step, switch in $swb B/step"
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
rate_bps=$(awk -v r="$RATE" 'BEGIN { n = r + 0; u = substr(r, length(n "") + 1);
    m = u ~ /^g/ ? 1e9 : u ~ /^m/ ? 1e6 : u ~ /^k/ ? 1e3 : 1; print n * m }')
base=$(median <<<"${MED[ps]:-}")
{
    echo "| mode | step ms (median) | vs all-PS | bytes at PS per step (in + out) | switch in per step | ideal ms (busiest link / rate) | hot share of updates | eval log-loss | AUC |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for mode in $MODES; do
        [ "${STATUS[$mode]:-failed}" = ok ] || { echo "| $mode | failed | | | | | | | |"; continue; }
        m=$(median <<<"${MED[$mode]}")
        ratio=$(awk -v b="$base" -v m="$m" 'BEGIN { if (b > 0 && m > 0) printf "%.2fx", b / m; else print "-" }')
        pin=${PSIN[$mode]} pout=${PSOUT[$mode]} swb=${SWB[$mode]}
        # Busiest link: the PS's (in or out), the switch's (in ~ what ranks send; out ~ the same
        # again, the sums back to each rank), or a worker's for MPI's ring (2(N-1)/N of 4(K+1) B).
        ideal=$(awk -v m="$mode" -v pin="$pin" -v pout="$pout" -v sw="$swb" -v N="$N" -v K="$KEYS" -v R="$rate_bps" '
            BEGIN { b = pin > pout ? pin : pout; if (sw > b) b = sw;
                    if (m == "dense-mpi") b = 2 * (N - 1) / N * 4 * (K + 1);
                    printf "%.1f", 1e3 * 8 * b / R }')
        printf "| %s | %s | %s | %.0f KB | %.0f KB | %s | %s | %s | %s |\n" "$mode" "$m" "$ratio" \
            "$(awk -v a="$pin" -v b="$pout" 'BEGIN { print (a + b) / 1000 }')" \
            "$(awk -v a="$swb" 'BEGIN { print a / 1000 }')" "$ideal" "${HOTSH[$mode]}" \
            "${LOSS[$mode]}" "${AUC[$mode]}"
    done
    echo
    echo "Step times are rank 0's, median of the timed steps (medians of $REPEAT interleaved runs);"
    echo "the planted model's log-loss on the same held-out samples is ${BAYES[ps]:-${BAYES[hotcold]:-?}}."
    echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
} | report
mkdir -p "$(dirname "$OUT")"
cp "$RUN/report.md" "$OUT"
log "report: $OUT (raw outputs in $RUN)"
