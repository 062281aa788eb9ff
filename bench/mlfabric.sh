#!/usr/bin/env bash
# mlfabric.sh: the MLfabric benchmark on the emulated cluster: bounded-staleness training with
# ina-sched against three baselines (FIFO with the bound, unbounded asynchronous, synchronous),
# per model, number of workers and bound D; optionally in a dynamic cluster (link rates that
# change, a worker killed and one added mid-run), with a straggler, with opportunistic
# aggregation, and the primary's NIC bytes of MLfabric's replication against chain replication.
# Root only (network namespaces). Not part of `make test`. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF2'
Usage: bench/mlfabric.sh [options]

Builds an emulated cluster (scripts/netns.sh, prefix "m"): a namespace per worker (and one
for a worker that joins), one for the primary ina-ps, one for its replica, and ina-sched on
the "sw" host; every link shaped alike with tbf, both ways. Then, for each model, number of
workers N and bound D, trains ina-mlf (docs/MLFABRIC.md) to its target loss in each mode:
  sched   ina-sched: grants keep every update's delay within D, shortest predicted transfer
          first, stragglers yield (fetch mode: a worker asks before it pulls, so neither a
          pull nor an update is wasted)
  fifo    FIFO with the bound: no scheduler; the server applies updates in arrival order and
          refuses those that lag more than D (after the transfer)
  async   unbounded asynchronous: no scheduler, no bound (ina-mlf --max-delay unbounded):
          every update applied, however stale (does not depend on D: run once per N)
  sync    synchronous: a barrier per version (ina-mlf --sync, ina-ps's SYNC mode): every
          rank's gradient of version v summed and applied before any rank pulls v + 1; the
          server's learning rate on that sum: --sync-lr (does not depend on D)
  agg     (with --aggregate K) ina-sched with opportunistic aggregation: fetch requests that
          wait together are granted as one group; the members sum their updates in an
          ina-switch on the scheduler's host and one of them sends the sum (PROTOCOL.md §15.7)
Every run stops once its ranks see the target (ina-mlf --stop-at-target), or at --updates.
It prints, per run: versions and gradients (updates computed into the model) until the first
rank sees the target, the time from the first rank's start, the updates the server refused,
and the loss at the end (a run that misses the target says where it got to: "diverged" when
above its initial loss); then medians per case, and per model, N and D the time of each
baseline over sched's (> 1: sched faster) and the best baseline's.

With --dynamic (the same changes, at the same times from the workers' start, in every run;
T = --dyn-period, by default per model):
  - worker 1's link drops to a quarter of the rate, both ways, from 0.2 T to 0.6 T of every
    period T, then recovers;
  - worker 2's link oscillates: a quarter of the rate and back every 0.1 T;
  - worker 3 is killed (SIGKILL) at 0.3 T: ina-sched's lease (--lease-ms) voids its stamp at
    the servers (ina-ps --sched), and the world shrinks; without a scheduler it just stops;
  - a new worker (rank N, on a host of its own) joins at 0.5 T (ina-mlf --start-ranks N,
    --world N + 1): it pulls the current model and trains from then on.
  sync runs get the rate changes only: a barrier needs every rank (a dead one stalls it; an
  ina-ps SYNC job takes no late joins), so sync is shown without the kill and the join.

Options:
  --models "M ..."  ina-mlf's models: lsq, mlp, ctr (default lsq); --model M: one
  --workers "N ..." numbers of workers (default 8)
  --delays "D ..."  staleness bounds for sched, fifo and agg (default 2)
  --modes "M ..."   modes to run (default "sched fifo async sync"; agg is added by
                    --aggregate)
  --dynamic         the dynamic cluster above
  --dyn-period MS   its period T in ms (default per model: lsq 2500, mlp 400, ctr 2500)
  --lease-ms MS     ina-sched --grant-timeout in --dynamic runs (default 250: no live
                    worker's grant outlived it in pilot runs; the dead worker's stamp holds
                    the job about that long)
  --straggler S     off (default), on (the last worker at half the rate the whole run) or
                    both (each case twice)
  --rate RATE       tbf rate of every link (default 100mbit)
  --server-rate R   the links of the primary's and the replica's hosts (default: --rate)
  --keys K          lsq, ctr: model keys of 64 floats (default lsq 120: 31 KB per update;
                    ctr 240: 62 KB)
  --window W        ina-sched's grants outstanding at most (default: ina-sched's, D + 1)
  --sched-mode M    ina-mlf's --sched-mode: fetch (default) or update
  --updates U       model versions a run trains at most (default: lsq 2500, mlp 1200,
                    ctr 2500)
  --sync-lr L       sync's learning rate on the sum of the N gradients, as a factor of the
                    model's: sum (1: N steps' worth a version), sqrt (1/sqrt(N)), mean (1/N),
                    a number F, or F/N (default: lsq sum, mlp sum, ctr 2/N: the fastest
                    of those tried in pilot runs at N = 8; on ctr the sum diverges)
  --aggregate K     add the agg case with groups of at most K (default 0: none)
  --agg-reduce R    what a group's leader sends (ina-mlf --agg-reduce): sum or mean (default:
                    lsq and mlp sum, ctr mean: with the sum, ctr's lr of 1 per update
                    diverges)
  --agg-pull P      how a group's members get the model (ina-mlf --agg-pull): server (default:
                    each pulls it) or switch (the leader pulls it, the switch shares it)
  --agg-hold-ms MS  ina-sched --agg-hold-ms (default: ina-sched's, 10)
  --switch-rate R   the link of the switch's host (the scheduler's): a tbf rate (default:
                    --rate, a host like the others) or line (unshaped: the network's switch
                    at line rate, as in-network aggregation assumes)
  --compute-ms MS   emulated extra compute per gradient on every worker (default 0)
  --replication     two more scheduled runs with the replica (no straggler): the workers
                    replicating (MLfabric's scheme) and chain replication; the primary's NIC
                    bytes of each
  --repeat R        runs of each case, interleaved (default 1)
  --out FILE        also write the report there (default: none; it is printed, and kept
                    with the raw logs in /tmp/mlfabric-bench.*; bench/results/mlfabric.md
                    collects the runs the docs quote, newest first)
  --help            this text
Environment: INA_BUILD_DIR (default build).
EOF2
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
MODELS=lsq NS=8 DELAYS=2 MODES="sched fifo async sync" DYNAMIC=0 DYN_PERIOD= LEASE=250
STRAGGLER=off RATE=100mbit SRATE= KEYS_OPT= WINDOW= SMODE=fetch UPDATES_OPT= SYNC_LR=
AGG=0 AGG_REDUCE_OPT= AGG_PULL=server AGG_HOLD= SWRATE= COMPUTE=0 REPLICATION=0 REPEAT=1
OUT=
while [ $# -gt 0 ]; do
    case $1 in
        --models | --model) MODELS=$2; shift 2 ;;
        --workers) NS=$2; shift 2 ;;
        --delays | --delay) DELAYS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --dynamic) DYNAMIC=1; shift ;;
        --dyn-period) DYN_PERIOD=$2; shift 2 ;;
        --lease-ms) LEASE=$2; shift 2 ;;
        --straggler) STRAGGLER=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --server-rate) SRATE=$2; shift 2 ;;
        --keys) KEYS_OPT=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --sched-mode) SMODE=$2; shift 2 ;;
        --updates) UPDATES_OPT=$2; shift 2 ;;
        --sync-lr) SYNC_LR=$2; shift 2 ;;
        --aggregate) AGG=$2; shift 2 ;;
        --agg-reduce) AGG_REDUCE_OPT=$2; shift 2 ;;
        --agg-pull) AGG_PULL=$2; shift 2 ;;
        --agg-hold-ms) AGG_HOLD=$2; shift 2 ;;
        --switch-rate) SWRATE=$2; shift 2 ;;
        --compute-ms) COMPUTE=$2; shift 2 ;;
        --replication) REPLICATION=1; shift ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "mlfabric.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
fail() { echo "mlfabric.sh: $*" >&2; exit 2; }
for m in $MODELS; do case $m in lsq | mlp | ctr) ;; *) fail "--models: lsq, mlp or ctr, not '$m'" ;; esac; done
for n in $NS; do [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 4 ] && [ "$n" -le 64 ] || fail "--workers: 4..64, not '$n'"; done
for d in $DELAYS; do [[ $d =~ ^[0-9]+$ ]] && [ "$d" -le 254 ] || fail "--delays: 0..254, not '$d'"; done
for m in $MODES; do case $m in sched | fifo | async | sync | agg) ;; *) fail "--modes: sched, fifo, async, sync or agg, not '$m'" ;; esac; done
case $STRAGGLER in off | on | both) ;; *) fail "--straggler: off, on or both" ;; esac
[[ ${SYNC_LR:-sum} =~ ^(sum|sqrt|mean|[0-9]*\.?[0-9]+(/N)?)$ ]] || fail "--sync-lr: sum, sqrt, mean, a factor F or F/N"
[[ $AGG =~ ^[0-9]+$ ]] || fail "--aggregate: a number"
[ "$AGG" -ge 2 ] && ! [[ " $MODES " == *" agg "* ]] && MODES="$MODES agg"
[[ $REPEAT =~ ^[0-9]+$ ]] && [ "$REPEAT" -ge 1 ] || fail "--repeat: 1 or more"
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: mlfabric.sh needs root for network namespaces" >&2
    exit 77
fi
BIN=$BUILD_DIR/bin
for b in ina-ps ina-sched ina-mlf ina-switch; do
    [ -x "$BIN/$b" ] || { echo "mlfabric.sh: $BIN/$b missing: build first (make SKIP_DEPS=1)" >&2; exit 1; }
done
NMAX=0
for n in $NS; do [ "$n" -gt "$NMAX" ] && NMAX=$n; done
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
# Workers w0..w(NMAX-1), the joiner of the largest N on w(NMAX) (a smaller N's on wN), the
# primary on w(NMAX+1), the replica on w(NMAX+2); the scheduler and the switch on sw.
export INA_NS_SHAPE_SWITCH=1 INA_NS_LATENCY=${INA_NS_LATENCY:-100ms}
ina_ns_setup "$CL" $((NMAX + 3)) "$RATE" || exit 1
PNS=${CL}w$((NMAX + 1)) RNS=${CL}w$((NMAX + 2)) SNS=${CL}sw
SRATE=${SRATE:-$RATE}
shape() { # HOST RATE: both ways
    tc -n "${CL}$1" qdisc replace dev eth0 root tbf rate "$2" burst 128kb latency "$INA_NS_LATENCY" &&
        tc -n "${CL}br" qdisc replace dev "${CL}$1" root tbf rate "$2" burst 128kb latency "$INA_NS_LATENCY"
}
if [ "$SRATE" != "$RATE" ]; then # the servers' hosts get their own NIC rate, both ways
    for h in "w$((NMAX + 1))" "w$((NMAX + 2))"; do shape "$h" "$SRATE" || exit 1; done
fi
SWRATE=${SWRATE:-$RATE}
if [ "$SWRATE" = line ]; then # the switch's port at line rate: no shaping
    tc -n "${CL}sw" qdisc del dev eth0 root 2>/dev/null
    tc -n "${CL}br" qdisc del dev "${CL}sw" root 2>/dev/null
elif [ "$SWRATE" != "$RATE" ]; then
    shape sw "$SWRATE" || exit 1
fi
PIP=$(ina_ns_ip "$CL" "w$((NMAX + 1))") RIP=$(ina_ns_ip "$CL" "w$((NMAX + 2))") SIP=$(ina_ns_ip "$CL" sw)
PORT=27100
log() { echo "mlfabric.sh: $*" >&2; }
report() { tee -a "$RUN/report.md"; }
rate_div() { # K: RATE / K (100mbit, 4: 25mbit; in kbit when mbit does not divide)
    local n=${RATE%%[a-z]*} u=${RATE##*[0-9]}
    if [ $((n % $1)) = 0 ]; then echo "$((n / $1))$u"
    elif [ "$u" = mbit ]; then echo "$((n * 1000 / $1))kbit"
    else echo "$((n / $1))$u"; fi
}
rate_bytes() { # a rate like 100mbit (default: the servers' links) -> bytes per second
    local r=${1:-$SRATE}
    local n=${r%%[a-z]*} u=${r##*[0-9]}
    case $u in kbit) echo $((n * 125)) ;; mbit) echo $((n * 125000)) ;; gbit) echo $((n * 125000000)) ;; *) echo 0 ;; esac
}

# Per model: ina-mlf's arguments, update and model bytes, the run's cap, T of --dynamic, and
# sync's learning rate factor: the fastest of those tried in single pilot runs (2026-11-28,
# N = 8, static): lsq and mlp the sum (mlp: sum 0.27 s, sqrt 0.59 s, mean 2.04 s); ctr 2/N
# (5.1 s; sum and 4/N diverge or oscillate, 52 s; sqrt 13.8 s, mean 9.2 s, 0.5/N 15.9 s).
model_setup() {
    MODEL=$1
    case $MODEL in
    lsq) KEYS=${KEYS_OPT:-120} LR=16 UPDATES=${UPDATES_OPT:-2500} PERIOD=${DYN_PERIOD:-2500}
         SCALE=${SYNC_LR:-sum} AGG_REDUCE=${AGG_REDUCE_OPT:-sum}
         MODEL_ARGS=(--keys "$KEYS" --batch 32)
         MODEL_TEXT="dense least squares, $KEYS keys, batch 32, SGD lr 16 at the server; target 0.05 x the initial loss (exact), every rank checks every model it pulls" ;;
    mlp) KEYS=44 LR=0.1 UPDATES=${UPDATES_OPT:-1200} PERIOD=${DYN_PERIOD:-400}
         SCALE=${SYNC_LR:-sum} AGG_REDUCE=${AGG_REDUCE_OPT:-sum}
         MODEL_ARGS=(--model mlp --batch 32)
         MODEL_TEXT="the MLP classifier (32-64-10, ReLU, cross-entropy; 44 keys), batch 32, SGD lr 0.1 at the server; target 0.42 x the initial cross-entropy on 512 held-out samples, each rank checks every 4th model (sync: every one)" ;;
    ctr) KEYS=${KEYS_OPT:-240} LR=1 UPDATES=${UPDATES_OPT:-2500} PERIOD=${DYN_PERIOD:-2500}
         SCALE=${SYNC_LR:-2/N} AGG_REDUCE=${AGG_REDUCE_OPT:-mean}
         MODEL_ARGS=(--model ctr --keys "$KEYS")
         MODEL_TEXT="the CTR click logs, logistic regression over features hashed into $((KEYS * 64)) weights, batch 64, SGD lr 1 at the server; target: held-out log-loss 45% of the way from the planted model's (0.448) to the initial 0.693, each rank checks every 4th model (sync: every one)" ;;
    esac
    UPDATE_BYTES=$((32 + 8 + KEYS * (8 + 4 * 64))) MODEL_BYTES=$((32 + KEYS * 64 * 4))
}
sync_lr() { # N: sync's learning rate on the sum of N gradients
    awk -v lr="$LR" -v n="$1" -v s="$SCALE" 'BEGIN { f = s == "sum" ? 1 : s == "sqrt" ? 1 / sqrt(n) : s == "mean" ? 1 / n : s ~ /\/N$/ ? substr(s, 1, length(s) - 2) / n : s
        printf "%.6g", lr * f }'
}
# ideal_s G: G gradients, each one pull out of the server and one update into it over its link
# (SRATE, full duplex): the link-bound time when nothing is wasted (fragment headers not
# counted).
ideal_s() {
    awk -v g="$1" -v b="$UPDATE_BYTES" -v m="$MODEL_BYTES" -v r="$(rate_bytes)" \
        'BEGIN { if (g == "NA" || r == 0) print "NA"; else printf "%.3f", g * (b > m ? b : m) / r }'
}
straggle() { # N on|off: worker N-1's link at half the rate, both ways
    local r=$RATE
    [ "$2" = on ] && r=$(rate_div 2)
    shape "w$(($1 - 1))" "$r"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# dyn_rates N T_MS: the rate changes of --dynamic, from now until killed (run in the
# background): worker 1 at a quarter from 0.2 T to 0.6 T of every period, worker 2 toggling
# every 0.1 T.
dyn_rates() {
    local t=$2 t0 q at host what n=0 late=0 ev=$3.events
    q=$(rate_div 4) t0=$(now_ms)
    awk -v t="$t" 'BEGIN { for (p = 0; p < 100; p++) {
            printf "%d w1 q\n%d w1 f\n", p * t + 0.2 * t, p * t + 0.6 * t
            for (j = 1; j <= 10; j++) printf "%d w2 %s\n", p * t + j * 0.1 * t, j % 2 ? "q" : "f" } }' |
        sort -n >"$ev"
    # One process (no pipeline), stopped by dyn_stop between two changes.
    while read -r at host what; do
        sleep_ms $((t0 + at - $(now_ms)))
        [ $(($(now_ms) - t0 - at)) -gt 20 ] && late=$((late + 1))
        shape "$host" "$([ "$what" = q ] && echo "$q" || echo "$RATE")" || echo "tc failed" >&2
        n=$((n + 1))
        echo "$n $late" >"$3"
    done <"$ev"
}
# dyn_stop PID: end dyn_rates (its pending sleep too, so that no change of this run comes
# after the next run's reset).
dyn_stop() {
    local c
    kill "$1" 2>/dev/null
    for c in $(pgrep -P "$1"); do kill "$c" 2>/dev/null; done
    wait "$1" 2>/dev/null
}
cpu_s() { # FILE (the output of `times`): user + system seconds of the waited-for children
    awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } print s }' "$1"
}
sleep_ms() { sleep "$(awk -v m="$1" 'BEGIN { printf "%.3f", (m > 0 ? m : 0) / 1000 }')"; }

# run_case MODE N D STRAGGLER REP [replica|chain]: one training run of the current model, in
# $RUN/MODEL.N.D.MODE.STRAGGLER.REP[.replica|.chain]/.
run_case() {
    local mode=$1 n=$2 d=$3 st=$4 rep=$5 repl=${6-} r job=m$RANDOM
    local dir=$RUN/$MODEL.$n.$d.$mode.$st.$rep${6:+.$6}
    mkdir -p "$dir"
    for ((r = 0; r < n; r++)); do shape "w$r" "$RATE"; done # undo the last run's changes
    straggle "$n" "$st"
    local dyn=$DYNAMIC world=$n start=() pdyn=() sdyn=()
    if [ "$dyn" = 1 ] && [ "$mode" != sync ]; then
        world=$((n + 1)) start=(--start-ranks "$n")
        [ "$mode" = sched ] || [ "$mode" = agg ] &&
            pdyn=(--sched "$SIP:$PORT") sdyn=(--ps "$PIP:$PORT" --grant-timeout "$LEASE")
    fi
    local pchain=() rchain=()
    if [ "$repl" = chain ]; then
        pchain=(--chain-to "$RIP:$PORT" --chain-timeout-ms 20000) # as the workers' failover
        rchain=(--chain-from "$PIP:$PORT")
    fi
    ip netns exec "$PNS" "$BIN/ina-ps" --listen "$PIP:$PORT" "${pchain[@]}" "${pdyn[@]}" \
        --quiet 2>"$dir/p.err" &
    local pp=$! rp= sp= swp=
    PIDS+=($pp)
    local extra=() dl=$d lr=$LR
    case $mode in
    async) dl=unbounded ;;
    sync) extra+=(--sync) lr=$(sync_lr "$n") dl=0 ;;
    esac
    if [ -n "$repl" ]; then
        ip netns exec "$RNS" "$BIN/ina-ps" --listen "$RIP:$PORT" "${rchain[@]}" --quiet 2>"$dir/r.err" &
        rp=$!
        PIDS+=($rp)
        extra+=(--replica "$RIP:$PORT")
        [ "$repl" = chain ] && extra+=(--replication chain)
    fi
    if [ "$mode" = agg ]; then # the switch that sums the groups, on the scheduler's host
        ip netns exec "$SNS" "$BIN/ina-switch" --listen "$SIP:$((PORT + 1))" --no-shm \
            2>"$dir/sw.err" &
        swp=$!
        PIDS+=($swp)
        extra+=(--switch "$SIP:$((PORT + 1))" --agg-reduce "$AGG_REDUCE" --agg-pull "$AGG_PULL")
    fi
    if [ "$mode" = sched ] || [ "$mode" = agg ]; then
        local agg=()
        [ "$mode" = agg ] && agg=(--aggregate "$AGG" ${AGG_HOLD:+--agg-hold-ms "$AGG_HOLD"})
        ip netns exec "$SNS" "$BIN/ina-sched" --job "$job" --world "$world" --max-delay "$d" \
            ${WINDOW:+--window "$WINDOW"} "${agg[@]}" "${sdyn[@]}" --listen "$SIP:$PORT" \
            --log-level warn 2>"$dir/s.err" &
        sp=$!
        PIDS+=($sp)
        extra+=(--sched "$SIP:$PORT" --sched-mode "$SMODE")
    fi
    sleep 0.5
    times >"$dir/times0" # in this shell: a subshell's children are not this shell's
    local wp=() args=(--ps "$PIP:$PORT" "${extra[@]}" --world "$world" "${start[@]}" --job "$job"
        --max-delay "$dl" "${MODEL_ARGS[@]}" --lr "$lr" --updates "$UPDATES" --rto-ms 40
        --failover-ms 20000 --compute-ms "$COMPUTE" --sched-timeout-ms 20000 --stop-at-target)
    for ((r = 0; r < n; r++)); do
        ip netns exec "${CL}w$r" timeout -k 5 300 "$BIN/ina-mlf" --rank "$r" "${args[@]}" \
            >"$dir/w$r.out" 2>"$dir/w$r.err" &
        wp+=($!)
    done
    local t0 dp= victim=
    t0=$(now_ms)
    if [ "$DYNAMIC" = 1 ]; then
        dyn_rates "$n" "$PERIOD" "$dir/rates" &
        dp=$!
        if [ "$mode" != sync ]; then # worker 3 killed at 0.3 T, rank N joins at 0.5 T
            victim=${wp[3]}
            sleep_ms $((t0 + 3 * PERIOD / 10 - $(now_ms)))
            local c
            for c in $(pgrep -P "$victim"); do kill -KILL "$c" 2>/dev/null; done
            echo "kill $(($(now_ms) - t0)) ms" >"$dir/events"
            sleep_ms $((t0 + PERIOD / 2 - $(now_ms)))
            if kill -0 "${wp[0]}" 2>/dev/null; then # the job still runs
                ip netns exec "${CL}w$n" timeout -k 5 300 "$BIN/ina-mlf" --rank "$n" "${args[@]}" \
                    --join-timeout-ms 3000 >"$dir/w$n.out" 2>"$dir/w$n.err" &
                wp+=($!)
                echo "join $(($(now_ms) - t0)) ms" >>"$dir/events"
            fi
        fi
    fi
    local rc=0 p
    for p in "${wp[@]}"; do
        wait "$p" || { [ "$p" = "$victim" ] || rc=1; }
    done
    [ -n "$dp" ] && dyn_stop "$dp"
    for p in $pp $rp $sp $swp; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    # CPU seconds of the run's processes (the workers, servers, scheduler, switch: children
    # this shell waited for), and the wall time of the workers, against the 2 cores' worth
    times >"$dir/times1"
    awk -v a="$(cpu_s "$dir/times0")" -v b="$(cpu_s "$dir/times1")" -v w="$(($(now_ms) - t0))" -v c="$(nproc)" \
        'BEGIN { printf "%.1f s of CPU in %.1f s (%.0f%% of %d cores)\n", b - a, w / 1000, 100 * (b - a) / (w / 1000) / c, c }' >"$dir/cpu"
    [ $rc = 0 ] || log "a worker of $MODEL/$mode N=$n D=$d failed: see $dir"
    return $rc
}
counter() { sed -n "s/^  $1 *\([0-9]*\)$/\1/p" "$2"; }
# result DIR: "versions seconds gradients refused_server end_loss initial_loss"
# The target is timed by the first rank to pull a model at the target loss, from the moment
# the first rank started (one clock: one kernel). Gradients to the target: its version times
# the gradients per applied version (sync: every rank's; agg: the groups' members; else 1).
result() {
    local dir=$1 v t upv a g m loss l0
    read -r v t < <(cat "$dir"/w*.out | awk '/^mlf rank/ {
            for (i = 1; i < NF; i++) { if ($i == "target_version") tv = $(i + 1);
                if ($i == "target_unix_ms") tm = $(i + 1); if ($i == "start_unix_ms") sm = $(i + 1) }
            if (sm > 0 && (s0 == "" || sm < s0)) s0 = sm
            if (tm > 0 && (best == "" || tm < best)) { best = tm; bv = tv } }
        END { if (best == "") print "NA NA"; else printf "%d %.3f\n", bv, (best - s0) / 1000 }')
    a=$(counter updates_applied "$dir/p.err") g=$(counter updates_aggregated "$dir/p.err")
    m=$(counter aggregated_members "$dir/p.err")
    if [ -n "$(counter steps_applied "$dir/p.err")" ] && [ "$(counter steps_applied "$dir/p.err")" != 0 ]; then
        upv=$(cat "$dir"/w*.out | grep -c '^mlf rank') # sync: every rank's gradient a version
    else
        upv=$(awk -v a="${a:-0}" -v g="${g:-0}" -v m="${m:-0}" 'BEGIN { if (a > 0) printf "%.3f", (a - g + m) / a; else print 1 }')
    fi
    read -r loss l0 < <(sed -n 's/^mlf: final version [0-9]* loss \([0-9.e+-]*\) (initial \([0-9.e+-]*\)).*/\1 \2/p' "$dir/w0.out")
    echo "${v:-NA} ${t:-NA} $(awk -v v="${v:-NA}" -v u="$upv" 'BEGIN { if (v == "NA") print "NA"; else printf "%.0f", v * u }') $(counter updates_stale "$dir/p.err" | head -1) ${loss:-NA} ${l0:-NA}"
}
# ratio A B: A / B to two decimals, NA when either is NA (a run that missed its target) or B is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b + 0 <= 0) print "NA"; else printf "%.2f", a / b }'; }
change() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b + 0 <= 0) print "NA"; else printf "%+.0f%%", 100 * (a / b - 1) }'; }
# median of the lines on stdin; NA lines (runs that missed the target) count as +infinity,
# so a case most of whose runs missed it has the median NA.
median() { sed 's/^NA$/1e300/' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) { print "NA"; exit }
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        if (m >= 1e299) print "NA"; else print m }'; }
d_modes() { # the modes that depend on D, and those that do not, in $MODES's order
    local m
    for m in $MODES; do case $m in async | sync) ;; *) echo "$m" ;; esac; done
}
case_dirs() { # MODEL N D MODE ST: the run directories of one case (async, sync: their D "-")
    local d=$3
    case $4 in async | sync) d=- ;; esac
    ls -d "$RUN/$1.$2.$d.$4.$5".[0-9]* 2>/dev/null | grep -v '\.\(replica\|chain\)$'
}
STS=$STRAGGLER
[ "$STRAGGLER" = both ] && STS="off on"

{
    echo "# MLfabric benchmark: models $MODELS, N = $NS, D = $DELAYS, modes $MODES${DYNAMIC:+$([ "$DYNAMIC" = 1 ] && echo ", dynamic cluster")}"
    echo
    echo "On $(nproc)-core $(uname -n), $(date -u +%Y-%m-%d), load before: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Emulated cluster: every link (the workers, the primary and the replica hosts, the"
    echo "scheduler's host) shaped to $RATE both ways with tbf; ina-sched window ${WINDOW:-D+1}, --sched-mode $SMODE."
    [ "$SRATE" != "$RATE" ] && echo "The primary's and the replica's hosts: $SRATE."
    [ "$STRAGGLER" != off ] && echo "Straggler on: the last worker at $(rate_div 2) the whole run."
    [ "$COMPUTE" != 0 ] && echo "Every worker adds $COMPUTE ms of emulated compute to each gradient (ina-mlf --compute-ms)."
    [ "$AGG" -ge 2 ] && echo "agg: ina-sched --aggregate $AGG --agg-hold-ms ${AGG_HOLD:-10}, an ina-switch on the scheduler's host (its link: $([ "$SWRATE" = line ] && echo "unshaped, line rate" || echo "$SWRATE")) sums the groups; the leader sends their ${AGG_REDUCE_OPT:-sum (ctr: mean)}; the members get the model from $([ "$AGG_PULL" = switch ] && echo "the switch (the leader's pull)" || echo "the server, each")."
    if [ "$DYNAMIC" = 1 ]; then
        echo "Dynamic cluster (T per model below): worker 1 at $(rate_div 4) from 0.2 T to 0.6 T of every period T;"
        echo "worker 2 toggling between $RATE and $(rate_div 4) every 0.1 T; worker 3 killed at 0.3 T (ina-sched's"
        echo "lease $LEASE ms); rank N joins at 0.5 T. sync: the rate changes only (a barrier stalls on a dead rank)."
    fi
    for m in $MODELS; do
        model_setup "$m"
        echo "- $m: $MODEL_TEXT; at most $UPDATES versions a run; sync's lr on the sum of N gradients: $SCALE$([ "$DYNAMIC" = 1 ] && echo "; T = $PERIOD ms")."
    done
    echo
} | report

for ((rep = 0; rep < REPEAT; rep++)); do
    for m in $MODELS; do
        model_setup "$m"
        for n in $NS; do
            for st in $STS; do
                first=1
                for d in $DELAYS; do
                    for mode in $MODES; do
                        case $mode in async | sync) [ $first = 1 ] || continue; dd=- ;; *) dd=$d ;; esac
                        log "run $rep: $MODEL N=$n D=$dd $mode straggler $st"
                        run_case "$mode" "$n" "$dd" "$st" "$rep"
                    done
                    first=0
                done
            done
        done
    done
done
if [ "$REPLICATION" = 1 ]; then
    model_setup "${MODELS%% *}"
    n=${NS%% *} d=${DELAYS%% *}
    log "run: sched with the replica, the workers replicating"
    run_case sched "$n" "$d" off 0 replica
    log "run: sched with the replica, chain replication"
    run_case sched "$n" "$d" off 0 chain
fi

{
    echo "Every run (versions and gradients until the first rank saw the target; NA: not reached):"
    echo
    echo "| model | N | D | mode | straggler | run | versions | gradients | seconds to target | refused by the server | loss at the end (initial) | events (from the workers' start); CPU of the run |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for m in $MODELS; do
        for n in $NS; do
            for st in $STS; do
                for d in $DELAYS -; do
                    for mode in $MODES; do
                        for dir in $(case_dirs "$m" "$n" "$d" "$mode" "$st"); do
                            [ "$d" = - ] || case $mode in async | sync) continue ;; esac
                            read -r v t g rs loss l0 <<<"$(result "$dir")"
                            key=$m.$n.$d.$mode.$st
                            echo "$t" >>"$RUN/t.$key"
                            echo "$v" >>"$RUN/v.$key"
                            echo "$g" >>"$RUN/g.$key"
                            rx=$(counter rx_bytes "$dir/p.err") tx=$(counter tx_bytes "$dir/p.err")
                            echo $((${rx:-0} > ${tx:-0} ? ${rx:-0} : ${tx:-0})) >>"$RUN/b.$key"
                            if [ "$mode" = agg ]; then
                                for c in holds holds_joined hold_us hold_predicted_us groups group_members; do
                                    echo "$(counter $c "$dir/s.err")" >>"$RUN/$c.$key"
                                done
                            fi
                            note=
                            awk -v a="$loss" -v b="$l0" 'BEGIN { exit !(a != "NA" && b != "NA" && a + 0 > b + 0) }' && note=", diverged"
                            ev=$([ -f "$dir/events" ] && tr '\n' ' ' <"$dir/events")
                            [ -s "$dir/rates" ] && ev+="$(awk '{ printf "%d rate changes (%d over 20 ms late); ", $1, $2 }' "$dir/rates")"
                            ev+=$(cat "$dir/cpu" 2>/dev/null)
                            echo "| $m | $n | $d | $mode | $st | ${dir##*.} | $v | $g | $t | ${rs:-0} | $loss ($l0)$note | ${ev:--} |"
                        done
                    done
                done
            done
        done
    done
    echo
    echo "Medians (time to target in s, versions, gradients) and each baseline's time over sched's"
    echo "(> 1: sched faster; NA: the baseline missed the target in most runs), and sched's time"
    echo "over the best baseline's (<= 0.70: the issue's target met):"
    echo
    hdr="| model | N | D | straggler | sched s (versions, gradients)"
    for mode in fifo async sync agg; do [[ " $MODES " == *" $mode "* ]] && hdr+=" | $mode s (gradients) | $mode/sched"; done
    echo "$hdr | sched / best baseline |"
    echo "$hdr |" | sed -e 's/[^|]\+/---/g'
    for m in $MODELS; do
        for n in $NS; do
            for st in $STS; do
                for d in $DELAYS; do
                    ts=$(median <"$RUN/t.$m.$n.$d.sched.$st" 2>/dev/null)
                    line="| $m | $n | $d | $st | ${ts:-NA} ($(median <"$RUN/v.$m.$n.$d.sched.$st" 2>/dev/null), $(median <"$RUN/g.$m.$n.$d.sched.$st" 2>/dev/null))"
                    best=NA
                    for mode in fifo async sync agg; do
                        [[ " $MODES " == *" $mode "* ]] || continue
                        dd=$d
                        case $mode in async | sync) dd=- ;; esac
                        tb=$(median <"$RUN/t.$m.$n.$dd.$mode.$st" 2>/dev/null)
                        line+=" | ${tb:-NA} ($(median <"$RUN/g.$m.$n.$dd.$mode.$st" 2>/dev/null)) | $(ratio "${tb:-NA}" "${ts:-NA}")"
                        [ "$mode" = agg ] && continue
                        best=$(awk -v a="$best" -v b="${tb:-NA}" 'BEGIN { if (b != "NA" && (a == "NA" || b + 0 < a + 0)) print b; else print a }')
                    done
                    echo "$line | $(ratio "${ts:-NA}" "$best") |"
                done
            done
        done
    done
    echo
    for m in $MODELS; do
        model_setup "$m"
        for n in $NS; do
            for d in $DELAYS; do
                g=$(median <"$RUN/g.$m.$n.$d.sched.off" 2>/dev/null)
                [ -n "$g" ] && echo "Link-bound ideal of sched's gradients ($m, N = $n, D = $d): $(ideal_s "$g") s (one pull out of and one update into the server per gradient, at $SRATE)."
            done
        done
    done
    if [[ " $MODES " == *" agg "* ]]; then
        echo
        echo "Aggregation, predicted from the server's bytes beside the measurement: if the"
        echo "primary's link is the bottleneck, agg's time = sched's x the bytes on the primary's"
        echo "busier direction (rx or tx, from its counters) in agg's runs / in sched's (medians)."
        echo "ina-sched's holds (--agg-hold-ms): groups held for one more member, those that got one,"
        echo "and the wait measured against the wait predicted when each hold began (medians of the runs' sums)."
        echo
        echo "| model | N | D | straggler | sched s | agg s measured | agg s predicted | agg/sched measured | predicted | server MB, busier way: sched, agg | members per group | holds (joined) | hold ms measured / predicted |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for m in $MODELS; do for n in $NS; do for st in $STS; do for d in $DELAYS; do
            k=$m.$n.$d
            ts=$(median <"$RUN/t.$k.sched.$st" 2>/dev/null) ta=$(median <"$RUN/t.$k.agg.$st" 2>/dev/null)
            bs=$(median <"$RUN/b.$k.sched.$st" 2>/dev/null) ba=$(median <"$RUN/b.$k.agg.$st" 2>/dev/null)
            tp=$(awk -v t="${ts:-NA}" -v a="${ba:-0}" -v b="${bs:-0}" 'BEGIN { if (t == "NA" || b <= 0) print "NA"; else printf "%.3f", t * a / b }')
            mpg=$(awk -v g="$(median <"$RUN/groups.$k.agg.$st")" -v m="$(median <"$RUN/group_members.$k.agg.$st")" 'BEGIN { if (g > 0) printf "%.2f", m / g; else print "NA" }')
            echo "| $m | $n | $d | $st | ${ts:-NA} | ${ta:-NA} | $tp | $(ratio "${ta:-NA}" "${ts:-NA}") | $(ratio "$tp" "${ts:-NA}") | $(awk -v a="${bs:-0}" -v b="${ba:-0}" 'BEGIN { printf "%.1f, %.1f", a / 1e6, b / 1e6 }') | $mpg | $(median <"$RUN/holds.$k.agg.$st") ($(median <"$RUN/holds_joined.$k.agg.$st")) | $(awk -v a="$(median <"$RUN/hold_us.$k.agg.$st")" -v b="$(median <"$RUN/hold_predicted_us.$k.agg.$st")" 'BEGIN { printf "%.0f / %.0f", a / 1000, b / 1000 }') |"
        done; done; done; done
    fi
    if [ "$STRAGGLER" = both ]; then
        for m in $MODELS; do for n in $NS; do for d in $DELAYS; do for mode in $(d_modes); do
            t0=$(median <"$RUN/t.$m.$n.$d.$mode.off") t1=$(median <"$RUN/t.$m.$n.$d.$mode.on")
            echo "Straggler penalty, $m N = $n D = $d $mode: time $(change "$t1" "$t0") (MLfabric's talk: +35% iterations for 10% of workers at half bandwidth)."
        done; done; done; done
    fi
    if [ "$REPLICATION" = 1 ]; then
        echo
        echo "Replication (scheduled, no straggler; the primary's NIC: rx + tx bytes from its counters):"
        echo
        echo "| scheme | primary NIC bytes | rx | tx | update bytes workers sent to the primary / the replica | versions to target | seconds to target | primary / replica updates_applied | forwarded (resent) |"
        echo "|---|---|---|---|---|---|---|---|---|"
        for repl in replica chain; do
            dir=$(ls -d "$RUN"/*."$repl" | head -1)
            rx=$(counter rx_bytes "$dir/p.err") tx=$(counter tx_bytes "$dir/p.err")
            up=$(cat "$dir"/w*.out | sed -n 's/.* bytes_primary \([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
            ur=$(cat "$dir"/w*.out | sed -n 's/.* bytes_replica \([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
            pa=$(counter updates_applied "$dir/p.err") ra=$(counter updates_applied "$dir/r.err")
            read -r v t _ <<<"$(result "$dir")"
            echo "$((${rx:-0} + ${tx:-0}))" >"$RUN/nic.$repl"
            [ "$repl" = replica ] && name="send (workers to both)" || name="chain (primary forwards)"
            echo "| $name | $((${rx:-0} + ${tx:-0})) | $rx | $tx | $up / $ur | $v | $t | $pa / $ra $([ -n "$pa" ] && [ "$pa" = "$ra" ] && echo equal || echo DIFFER) | $(counter chain_forwarded "$dir/p.err") ($(counter chain_fwd_retransmits "$dir/p.err")) |"
        done
        echo
        echo "Chain/send, the primary's NIC bytes: $(ratio "$(cat "$RUN/nic.chain")" "$(cat "$RUN/nic.replica")")x."
    fi
    echo
    echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg). Raw logs: $RUN"
} | report
if [ -n "$OUT" ]; then
    mkdir -p "$(dirname "$OUT")"
    cp "$RUN/report.md" "$OUT"
fi
