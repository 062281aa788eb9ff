#!/usr/bin/env bash
# mlfabric.sh: the MLfabric benchmark on the emulated cluster: bounded-staleness training with
# ina-sched against FIFO (unscheduled, the seed paper's baseline), with and without a straggler
# at half bandwidth; and the primary's NIC bytes with MLfabric's replication against chain
# replication, both run. Root only (network namespaces). Not part of `make test`. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF2'
Usage: bench/mlfabric.sh [options]

Builds an emulated cluster (scripts/netns.sh, prefix "m"): N worker namespaces, one for the
primary ina-ps, one for its replica, and ina-sched on the "sw" host; every link shaped alike
with tbf (the servers' hosts are nodes like a worker's). Then, for each straggler setting
(none, and the last worker's link at half the rate both ways), trains ina-mlf (--model: dense
least squares, or the MLP classifier) asynchronously with staleness bound D:
  fifo    no scheduler: every worker sends its update when it is ready; the server applies
          them in arrival order and refuses those that lag more than D (after the transfer)
  sched   ina-sched: grants keep the delay within D, shortest predicted transfer first,
          stragglers yield. In fetch mode (the default) a worker asks before it pulls the
          model, so neither a pull nor an update is wasted; in update mode it asks after
          computing, and requests that cannot fit are refused before any byte is sent
  agg     ina-sched with opportunistic aggregation (--aggregate K): fetch requests that
          wait together are granted as one group; the members sum their updates in an
          ina-switch on the scheduler's host (its link shaped like the others) and one of
          them sends the sum: one update, one version (PROTOCOL.md §15.7)
and prints, per run: model versions (updates applied) and wall time until rank 0 sees the
target loss, updates refused, the bytes into the primary, the ratios FIFO/sched and
sched/agg, and the straggler penalty (time with a straggler / time without - 1) beside
MLfabric's reported +35% (in iterations).
Two last scheduled runs with the replica (no straggler) compare replication schemes:
  send    each worker sends every stamped update to the primary and to the replica
          (ina-mlf --replication send, MLfabric's scheme)
  chain   the workers send to the primary only; it forwards every stamped update it takes
          to the replica and answers once the replica has it (ina-ps --chain-to and
          --chain-from, ina-mlf --replication chain; PROTOCOL.md §15.8)
and print, for each, the primary's NIC bytes (rx + tx, from its counters) and time to
target, the ratio chain/send of the bytes, and whether the replica applied exactly the
updates the primary applied.

Options:
  --workers N     workers (default 8; the straggler is the last one)
  --rate RATE     tbf rate of every link (default 100mbit)
  --server-rate R the links of the primary's and the replica's hosts (default: --rate): a
                  server with a faster NIC than its workers, where a worker's own link, and
                  so a straggler's, can set the pace
  --model M       ina-mlf's model: lsq (default), mlp (44 keys) or ctr, each with its own
                  lr, batch and target (ina-mlf --help)
  --keys K        lsq, ctr: model keys of 64 floats (default lsq 120: 31 KB per update;
                  ctr 240: 62 KB)
  --delay D       staleness bound (default 2)
  --window W      ina-sched's grants outstanding at most (default: ina-sched's, D + 1)
  --sched-mode M  ina-mlf's --sched-mode: fetch (default) or update
  --updates U     model versions each run trains (default 2500)
  --aggregate K   group size at most of the agg case (default 3; 0 = no agg case)
  --agg-reduce R  what a group's leader sends (ina-mlf --agg-reduce): sum (default) or
                  mean (for a model whose learning rate suits one update per version)
  --compute-ms MS emulated extra compute per gradient on every worker (default 0: the
                  gradient's own time); with a heavy model the workers' computation, not
                  the server's link, limits the job
  --repeat R      runs of each case, interleaved (default 1)
  --out FILE      also write the report there (default bench/results/mlfabric.md)
  --help          this text
Environment: INA_BUILD_DIR (default build).
EOF2
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
N=8 RATE=100mbit SRATE= KEYS= D=2 WINDOW= SMODE=fetch UPDATES=2500 REPEAT=1 OUT=$ROOT/bench/results/mlfabric.md
MODEL=lsq AGG=3 COMPUTE=0 AGG_REDUCE=sum
while [ $# -gt 0 ]; do
    case $1 in
        --workers) N=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --server-rate) SRATE=$2; shift 2 ;;
        --keys) KEYS=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --delay) D=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --sched-mode) SMODE=$2; shift 2 ;;
        --updates) UPDATES=$2; shift 2 ;;
        --aggregate) AGG=$2; shift 2 ;;
        --compute-ms) COMPUTE=$2; shift 2 ;;
        --agg-reduce) AGG_REDUCE=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "mlfabric.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: mlfabric.sh needs root for network namespaces" >&2
    exit 77
fi
BIN=$BUILD_DIR/bin
for b in ina-ps ina-sched ina-mlf; do
    [ -x "$BIN/$b" ] || { echo "mlfabric.sh: $BIN/$b missing: build first (make SKIP_DEPS=1)" >&2; exit 1; }
done
CL=m
# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
RUN=$(mktemp -d /tmp/mlfabric-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ina_ns_teardown "$CL" >/dev/null 2>&1
}
trap cleanup EXIT
ina_ns_reap_stale "$CL" 2>/dev/null
export INA_NS_SHAPE_SWITCH=1 INA_NS_LATENCY=${INA_NS_LATENCY:-100ms}
ina_ns_setup "$CL" $((N + 2)) "$RATE" || exit 1
PNS=${CL}w$N RNS=${CL}w$((N + 1)) SNS=${CL}sw
SRATE=${SRATE:-$RATE}
if [ "$SRATE" != "$RATE" ]; then # the servers' hosts get their own NIC rate, both ways
    for h in "w$N" "w$((N + 1))"; do
        tc -n "${CL}$h" qdisc replace dev eth0 root tbf rate "$SRATE" burst 256kb latency "$INA_NS_LATENCY" &&
            tc -n "${CL}br" qdisc replace dev "${CL}$h" root tbf rate "$SRATE" burst 256kb \
                latency "$INA_NS_LATENCY" || exit 1
    done
fi
PIP=$(ina_ns_ip "$CL" "w$N") RIP=$(ina_ns_ip "$CL" "w$((N + 1))") SIP=$(ina_ns_ip "$CL" sw)
PORT=27100
SLOW=$((N - 1))
log() { echo "mlfabric.sh: $*" >&2; }
report() { tee -a "$RUN/report.md"; }
half_rate() { # RATE like 100mbit -> 50mbit
    local n=${RATE%%[a-z]*} u=${RATE##*[0-9]}
    echo "$((n / 2))$u"
}
rate_bytes() { # a rate like 100mbit (default: the servers' links) -> bytes per second
    local r=${1:-$SRATE}
    local n=${r%%[a-z]*} u=${r##*[0-9]}
    case $u in kbit) echo $((n * 125)) ;; mbit) echo $((n * 125000)) ;; gbit) echo $((n * 125000000)) ;; *) echo 0 ;; esac
}
# The link-bound ideal of a run that reached the target at version V: every version is one
# update into the server and one model out of it, each over the server's link (SRATE)
# (IP fragment headers not counted); nothing sent is wasted.
case $MODEL in
lsq) KEYS=${KEYS:-120}
     MODEL_ARGS=(--keys "$KEYS" --batch 32 --lr 16)
     MODEL_TEXT="dense least squares, batch 32, SGD lr 16 at the server" ;;
mlp) KEYS=44 # ina-mlf --model mlp: 2,762 parameters in 44 keys of 64 floats
     MODEL_ARGS=(--model mlp --batch 32)
     MODEL_TEXT="the MLP classifier (32-64-10, ReLU, cross-entropy), batch 32, SGD lr 0.1 at the server" ;;
ctr) KEYS=${KEYS:-240} # fewer weights: the hashed model barely reaches its target
     MODEL_ARGS=(--model ctr --keys "$KEYS")
     MODEL_TEXT="the CTR click logs, logistic regression over features hashed into $((KEYS * 64)) weights, batch 64, SGD lr 1 at the server" ;;
*) echo "mlfabric.sh: --model is lsq, mlp or ctr, not '$MODEL'" >&2; exit 2 ;;
esac
UPDATE_BYTES=$((32 + 8 + KEYS * (8 + 4 * 64))) MODEL_BYTES=$((32 + KEYS * 64 * 4))
# ideal_s V [U]: with U workers' updates per version (a group's members, each pulling the
# model once), each version is one update in and U models out.
ideal_s() {
    awk -v v="$1" -v u="${2:-1}" -v b="$UPDATE_BYTES" -v m="$MODEL_BYTES" -v r="$(rate_bytes)" \
        'BEGIN { if (v == "NA" || u == "NA" || r == 0) print "NA"; else printf "%.3f", v * (b > u * m ? b : u * m) / r }'
}
straggle() { # on|off: the last worker's link at half the rate, both ways
    local r=$RATE
    [ "$1" = on ] && r=$(half_rate)
    tc -n "${CL}w$SLOW" qdisc replace dev eth0 root tbf rate "$r" burst 128kb latency "$INA_NS_LATENCY"
    tc -n "${CL}br" qdisc replace dev "${CL}w$SLOW" root tbf rate "$r" burst 128kb latency "$INA_NS_LATENCY"
}

# run_case MODE STRAGGLER REP [replica|chain]: one training run, results in
# $RUN/MODE.STRAGGLER.REP[.replica|.chain]/. replica: the workers send to both servers;
# chain: to the primary, which forwards to the replica (PROTOCOL.md §15.8).
run_case() {
    local mode=$1 st=$2 rep=$3 repl=${4-} d=$RUN/$1.$2.$3${4:+.$4} r job=m$RANDOM
    mkdir -p "$d"
    straggle "$st"
    local pchain=() rchain=()
    if [ "$repl" = chain ]; then
        pchain=(--chain-to "$RIP:$PORT" --chain-timeout-ms 20000) # as the workers' failover
        rchain=(--chain-from "$PIP:$PORT")
    fi
    ip netns exec "$PNS" "$BIN/ina-ps" --listen "$PIP:$PORT" "${pchain[@]}" --quiet 2>"$d/p.err" &
    local pp=$! rp= sp=
    PIDS+=($pp)
    local extra=()
    if [ -n "$repl" ]; then
        ip netns exec "$RNS" "$BIN/ina-ps" --listen "$RIP:$PORT" "${rchain[@]}" --quiet 2>"$d/r.err" &
        rp=$!
        PIDS+=($rp)
        extra+=(--replica "$RIP:$PORT")
        [ "$repl" = chain ] && extra+=(--replication chain)
    fi
    local swp=
    if [ "$mode" = agg ]; then # the switch that sums the groups, on the scheduler's host
        ip netns exec "$SNS" "$BIN/ina-switch" --listen "$SIP:$((PORT + 1))" --no-shm \
            2>"$d/sw.err" &
        swp=$!
        PIDS+=($swp)
        extra+=(--switch "$SIP:$((PORT + 1))" --agg-reduce "$AGG_REDUCE")
    fi
    if [ "$mode" != fifo ]; then
        local agg=()
        [ "$mode" = agg ] && agg=(--aggregate "$AGG")
        ip netns exec "$SNS" "$BIN/ina-sched" --job "$job" --world "$N" --max-delay "$D" \
            ${WINDOW:+--window "$WINDOW"} "${agg[@]}" --listen "$SIP:$PORT" --log-level warn \
            2>"$d/s.err" &
        sp=$!
        PIDS+=($sp)
        extra+=(--sched "$SIP:$PORT" --sched-mode "$SMODE")
    fi
    sleep 0.5
    local wp=()
    for ((r = 0; r < N; r++)); do
        ip netns exec "${CL}w$r" timeout -k 5 300 "$BIN/ina-mlf" --ps "$PIP:$PORT" "${extra[@]}" \
            --rank "$r" --world "$N" --job "$job" --max-delay "$D" "${MODEL_ARGS[@]}" \
            --updates "$UPDATES" --rto-ms 40 --failover-ms 20000 --compute-ms "$COMPUTE" \
            --sched-timeout-ms 20000 >"$d/w$r.out" 2>"$d/w$r.err" &
        wp+=($!)
    done
    local rc=0
    for p in "${wp[@]}"; do wait "$p" || rc=1; done
    for p in $pp $rp $sp $swp; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    [ $rc = 0 ] || log "a worker of $mode/$st failed: see $d"
    return $rc
}
field() { sed -n "s/.*$1 \([0-9.e+-]*\).*/\1/p" "$2" | head -1; }
counter() { sed -n "s/^  $1 *\([0-9]*\)$/\1/p" "$2"; }
# result DIR: "versions seconds refused_server refused_sched"
# The target is timed by the first rank to pull a model at the target loss (every rank checks
# each model it pulls), from the moment the first rank started (one clock: one kernel).
result() {
    local d=$1 v t
    read -r v t < <(cat "$d"/w*.out | awk '/^mlf rank/ {
            for (i = 1; i < NF; i++) { if ($i == "target_version") tv = $(i + 1);
                if ($i == "target_unix_ms") tm = $(i + 1); if ($i == "start_unix_ms") sm = $(i + 1) }
            if (sm > 0 && (s0 == "" || sm < s0)) s0 = sm
            if (tm > 0 && (best == "" || tm < best)) { best = tm; bv = tv } }
        END { if (best == "") print "NA NA"; else printf "%d %.3f\n", bv, (best - s0) / 1000 }')
    echo "${v:-NA} ${t:-NA} $(counter updates_stale "$d/p.err") $(cat "$d"/w*.out | sed -n 's/.* sched_refused \([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')"
}
# ratio A B: A / B to two decimals, NA when either is NA (a run that missed its target) or B is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b + 0 <= 0) print "NA"; else printf "%.2f", a / b }'; }
# change A B: (A / B - 1) in percent, signed, or NA.
change() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b + 0 <= 0) print "NA"; else printf "%+.0f%%", 100 * (a / b - 1) }'; }
median() { sort -g | awk '{a[NR] = $1} END { if (NR == 0) print "NA"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

{
    echo "# MLfabric benchmark: N=$N workers, $KEYS keys x 64 floats ($((KEYS * 264 / 1024)) KiB per update), D=$D, ina-sched window ${WINDOW:-D+1}, --sched-mode $SMODE"
    echo
    echo "On the 2-core VM, $(date -u +%Y-%m-%d), load before: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Emulated cluster: every link (N workers, the primary and the replica hosts, the"
    echo "scheduler host) shaped to $RATE with tbf; the straggler (worker $SLOW) at $(half_rate)."
    [ "$SRATE" != "$RATE" ] && echo "The primary's and the replica's hosts: $SRATE (a server NIC faster than the workers')."
    [ "$COMPUTE" != 0 ] && echo "Every worker adds $COMPUTE ms of emulated compute to each gradient (ina-mlf --compute-ms)."
    [ "$AGG" -ge 2 ] && echo "agg: ina-sched --aggregate $AGG, and an ina-switch on the scheduler's host (its link shaped like the others) sums the groups; the leader sends their $AGG_REDUCE."
    echo "ina-mlf: $MODEL_TEXT, $UPDATES model versions per run;"
    if [ "$MODEL" = mlp ]; then
        echo "the target loss is 0.42 x the initial cross-entropy on 512 held-out samples, timed by"
        echo "the first rank to pull and check a model that reaches it (each rank checks every 4th)."
    elif [ "$MODEL" = ctr ]; then
        echo "the target is the log-loss on 2000 held-out samples 45% of the way from the planted"
        echo "model's to the initial one, timed by the first rank to pull and check a model that"
        echo "reaches it (each rank checks every 4th)."
    else
        echo "the target loss is 0.05 x the initial loss (exact: |w - w*|^2 / 2p), timed by the"
        echo "first rank to pull a model that reaches it, from the first rank's start."
    fi
    echo
} | report

MODES="fifo sched"
[ "$AGG" -ge 2 ] && MODES="fifo sched agg"
for ((rep = 0; rep < REPEAT; rep++)); do
    for st in off on; do
        for mode in $MODES; do
            log "run $rep: $mode, straggler $st"
            run_case "$mode" "$st" "$rep"
        done
    done
done
log "run: sched with the replica, the workers replicating"
run_case sched off 0 replica
log "run: sched with the replica, chain replication"
run_case sched off 0 chain

{
    echo "| case | versions to target | seconds to target | ideal s (link-bound) | refused by the server | refused by ina-sched | KB into the primary per gradient applied | gradients per version |"
    echo "|---|---|---|---|---|---|---|---|"
    for st in off on; do
        for mode in $MODES; do
            for ((rep = 0; rep < REPEAT; rep++)); do
                d=$RUN/$mode.$st.$rep
                read -r v t rs rq <<<"$(result "$d")"
                echo "$v" >>"$RUN/v.$mode.$st"
                echo "$t" >>"$RUN/t.$mode.$st"
                # Workers' gradients per applied version: 1, or more where groups were summed;
                # and the bytes into the primary (updates in, every pull's request, refused
                # updates too) per gradient it applied.
                read -r upv kbg < <(awk -v a="$(counter updates_applied "$d/p.err")" \
                    -v g="$(counter updates_aggregated "$d/p.err")" -v m="$(counter aggregated_members "$d/p.err")" \
                    -v rx="$(counter rx_bytes "$d/p.err")" \
                    'BEGIN { n = a - g + m; if (a > 0) printf "%.2f %.1f\n", n / a, rx / n / 1000; else print "NA NA" }')
                echo "$kbg" >>"$RUN/kbg.$mode.$st"
                echo "| $mode, straggler $st, run $rep | $v | $t | $(ideal_s "$v" "$upv") | $rs | $rq | $kbg | $upv |"
            done
        done
    done
    echo
    for st in off on; do
        tf=$(median <"$RUN/t.fifo.$st") ts=$(median <"$RUN/t.sched.$st")
        vf=$(median <"$RUN/v.fifo.$st") vs=$(median <"$RUN/v.sched.$st")
        echo "Straggler $st: time to target FIFO/sched = $(ratio "$tf" "$ts")x (medians $tf s, $ts s); versions FIFO/sched = $(ratio "$vf" "$vs")x ($vf, $vs); ideal for sched's versions $(ideal_s "$vs") s. Target: >= 1.3x."
    done
    if [ "$AGG" -ge 2 ]; then
        for st in off on; do
            ts=$(median <"$RUN/t.sched.$st") ta=$(median <"$RUN/t.agg.$st")
            vs=$(median <"$RUN/v.sched.$st") va=$(median <"$RUN/v.agg.$st")
            ks=$(median <"$RUN/kbg.sched.$st") ka=$(median <"$RUN/kbg.agg.$st")
            echo "Straggler $st, opportunistic aggregation (K = $AGG): time to target sched/agg = $(ratio "$ts" "$ta")x (medians $ts s, $ta s); versions $vs, $va; bytes into the primary per gradient applied, sched/agg = $(ratio "$ks" "$ka")x ($ks KB, $ka KB)."
        done
    fi
    for mode in $MODES; do
        t0=$(median <"$RUN/t.$mode.off") t1=$(median <"$RUN/t.$mode.on")
        v0=$(median <"$RUN/v.$mode.off") v1=$(median <"$RUN/v.$mode.on")
        echo "Straggler penalty, $mode: time $(change "$t1" "$t0"), versions $(change "$v1" "$v0") (MLfabric's talk: +35% iterations for 10% of workers at half bandwidth)."
    done
    echo
    echo "Replication (scheduled, no straggler; the primary's NIC: rx + tx bytes from its counters):"
    echo
    echo "| scheme | primary NIC bytes | rx | tx | update bytes workers sent to the primary / the replica | versions to target | seconds to target | primary / replica updates_applied | forwarded (resent) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for repl in replica chain; do
        d=$RUN/sched.off.0.$repl
        rx=$(counter rx_bytes "$d/p.err") tx=$(counter tx_bytes "$d/p.err")
        up=$(cat "$d"/w*.out | sed -n 's/.* bytes_primary \([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
        ur=$(cat "$d"/w*.out | sed -n 's/.* bytes_replica \([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
        pa=$(counter updates_applied "$d/p.err") ra=$(counter updates_applied "$d/r.err")
        read -r v t _ _ <<<"$(result "$d")"
        echo "$((${rx:-0} + ${tx:-0}))" >"$RUN/nic.$repl"
        [ "$repl" = replica ] && name="send (workers to both)" || name="chain (primary forwards)"
        echo "| $name | $((${rx:-0} + ${tx:-0})) | $rx | $tx | $up / $ur | $v | $t | $pa / $ra $([ -n "$pa" ] && [ "$pa" = "$ra" ] && echo equal || echo DIFFER) | $(counter chain_forwarded "$d/p.err") ($(counter chain_fwd_retransmits "$d/p.err")) |"
    done
    echo
    echo "Chain/send, the primary's NIC bytes: $(awk -v a="$(cat "$RUN/nic.chain")" -v b="$(cat "$RUN/nic.replica")" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "NA" }')x. Chain: $(counter chain_acks "$RUN/sched.off.0.chain/p.err") forwards acknowledged, $(counter chain_broken "$RUN/sched.off.0.chain/p.err") chains broken, $(counter chain_mismatch "$RUN/sched.off.0.chain/p.err") mismatches; the replica took $(counter chain_fwd_received "$RUN/sched.off.0.chain/r.err") forwards."
    echo
    echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg). Raw logs: $RUN"
} | report
mkdir -p "$(dirname "$OUT")"
cp "$RUN/report.md" "$OUT"
