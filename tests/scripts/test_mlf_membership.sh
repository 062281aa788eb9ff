#!/usr/bin/env bash
# test_mlf_membership.sh: MLfabric's membership and failures (PROTOCOL.md §15.9,
# docs/MLFABRIC.md). 4 ina-mlf workers on loopback with 30 ms of compute per gradient (issue
# 33's reproduction), a primary and a replica (ina-ps --sched), ina-sched --ps/--replica, and
# 1% of the datagrams dropped both ways at both servers and at the scheduler
# (--fault-rx/--fault-tx). Each case, 1.5 s into training:
#  1. rank 3 killed (SIGKILL): its lease expires, its stamp is voided at both servers, the
#     scheduler shrinks its world and tells the servers it departed;
#  2. the primary killed: the workers and the scheduler fail over to the replica;
#  3. the same with chain replication (ina-ps --chain-to/--chain-from);
#  4. ina-sched killed, restarted 1 s later on the same address: the workers send nothing
#     unscheduled, wait and reattach; it rebuilds its state from the servers;
#  5. a fifth worker joins the running job (world 5, --start-ranks 4) and is scheduled;
# and in every case: training reaches the target loss; no update is lost or applied twice
# (each rank's updates applied at the server equal the updates its worker was told were
# applied; the killed worker's, printed as they came with --trace, may lack the one in flight
# when it died); the replica is bit-identical to the primary (the same version, stamp, model
# digest and per-rank counts when the job ended, and the scheduler found the same digest
# at every stamp it saw both at); no delay above D. Recovery times are printed.
set -uo pipefail
exec </dev/null
BUILD=${INA_BUILD_DIR:-build}
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"
PS=$BUILD/bin/ina-ps
SCHED=$BUILD/bin/ina-sched
MLF=$BUILD/bin/ina-mlf
for b in "$PS" "$SCHED" "$MLF"; do
    [ -x "$b" ] || { echo "SKIP: $b not built"; exit 77; }
done
W=4 D=2
# shellcheck source=tests/scripts/mlf_harness.sh
source "$(dirname "$0")/mlf_harness.sh"

seed=100
# fault: 1% loss both ways, a new seed each time.
fault() {
    seed=$((seed + 2))
    echo "--fault-rx drop=0.01,seed=$seed --fault-tx drop=0.01,seed=$((seed + 1))"
}
# start_at NAME PORT CMD...: a daemon on 127.0.0.1:PORT (stderr NAME.log); sets $pid.
# Status 1 if it did not stay up (the port was taken).
start_at() {
    local name=$1 port=$2
    shift 2
    "$@" --listen "127.0.0.1:$port" 2>"$tmp/$name.log" &
    pid=$!
    pids+=("$pid")
    sleep 0.2
    kill -0 "$pid" 2>/dev/null
}
# scheduler CASE WORLD: ina-sched on $sport for the servers on $pport and $rport.
scheduler() {
    # shellcheck disable=SC2046
    start_at "$1.s" "$sport" "$SCHED" --job "$1" --world "$2" --max-delay $D --ps "127.0.0.1:$pport" \
        --replica "127.0.0.1:$rport" --grant-timeout 1000 --failover-ms 500 $(fault)
}
# setup CASE MODE WORLD: a primary and a replica that take PS_SYNC from a scheduler port picked
# here (MODE chain: chain replication between them), then ina-sched there. Sets pp, rp, sp (pids),
# pport, rport, sport.
setup() {
    local c=$1 mode=$2 world=$3 try
    for try in 1 2 3 4 5; do
        sport=$((20000 + RANDOM % 30000))
        if [ "$mode" = chain ]; then
            # shellcheck disable=SC2046
            start_chain "$c" --log-level info --sched "127.0.0.1:$sport" $(fault) || return 1
            eval "pp=\$${c}p rp=\$${c}r pport=\$${c}pport rport=\$${c}rport"
        else
            # shellcheck disable=SC2046
            start "${c}p" "$PS" --log-level info --sched "127.0.0.1:$sport" $(fault)
            pp=$pid pport=$port
            # shellcheck disable=SC2046
            start "${c}r" "$PS" --log-level info --sched "127.0.0.1:$sport" $(fault)
            rp=$pid rport=$port
        fi
        if scheduler "$c" "$world"; then sp=$pid; return 0; fi
        stop "$pp"
        stop "$rp"
    done
    return 1
}
# worker CASE RANK ARGS...: one ina-mlf of CASE (its own deadlines end it); its pid in wpids.
worker() {
    local c=$1 r=$2
    shift 2
    "$MLF" --rank "$r" --max-delay $D --job "$c" --ps "127.0.0.1:$pport" \
        --replica "127.0.0.1:$rport" --sched "127.0.0.1:$sport" --compute-ms 30 --updates 500 \
        --failover-ms 500 --sched-timeout-ms 300 --trace "$@" >"$tmp/$c.$r" 2>"$tmp/$c.$r.err" &
    wpids+=($!)
    pids+=($!)
}
# start4 CASE ARGS...: ranks 0..3 of world 4.
start4() {
    local c=$1 r
    shift
    wpids=()
    for r in 0 1 2 3; do worker "$c" "$r" --world 4 "$@"; done
}
# summary LOG NAME: "version stamp digest applied-list" of job NAME at LOG's server: from its
# stale_job_ended event, or its exit report if the job was still running.
summary() {
    sed -n -e "s/.*event=stale_job_ended .*name=$2 version=\([0-9]*\) stamp=\([0-9]*\) digest=\([0-9a-f]*\) applied=\([0-9:,]*\).*/\1 \2 \3 \4/p" \
        -e "s/^  job $2 version \([0-9]*\) stamp \([0-9]*\) digest \([0-9a-f]*\) applied \([0-9:,]*\)$/\1 \2 \3 \4/p" \
        "$tmp/$1.log" | tail -n 1
}
# counts_agree CASE "SUMMARY" [KILLED]: every rank's updates applied at the server = what its
# worker was told was applied; the killed rank's = its traced ones, or one more (in flight);
# and they add up to the server's updates_applied.
counts_agree() {
    local c=$1 list=${2##* } killed=${3:--1} item rank n w sum=0
    for item in ${list//,/ }; do
        rank=${item%%:*} n=${item##*:}
        sum=$((sum + n))
        if [ "$rank" = "$killed" ]; then
            w=$(grep -c ': applied version' "$tmp/$c.$rank.err")
            if [ "$n" -lt "$w" ] || [ "$n" -gt $((w + 1)) ]; then
                echo "rank $rank (killed): $n applied at the server, $w seen applied"
                return 1
            fi
        else
            w=$(sed -n 's/^mlf rank .* applied \([0-9]*\) stale .*/\1/p' "$tmp/$c.$rank")
            if [ "$n" != "$w" ]; then
                echo "rank $rank: $n applied at the server, ${w:-?} seen applied"
                return 1
            fi
        fi
    done
    echo "per rank: $list (sum $sum)"
    [ "$sum" = "$4" ]
}
# log_ms LOG EVENT: the unix time in ms of EVENT's first line in LOG.
log_ms() {
    local ts
    ts=$(grep -m 1 "event=$2" "$tmp/$1.log" | sed -n 's/^\([0-9T:.-]*Z\) .*/\1/p')
    [ -n "$ts" ] && echo $(($(date -d "$ts" +%s%N) / 1000000))
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# common CASE PRIMARY-LOG REPLICA-LOG [KILLED]: the checks every case makes.
common() {
    local c=$1 pl=$2 rl=$3 killed=${4:--1} ps rs
    check "$c: training reached the target loss" grep -q "target .* reached at" "$tmp/$c.0"
    rs=$(summary "$rl" "$c")
    check "$c: no update lost or applied twice at the replica" \
        counts_agree "$c" "$rs" "$killed" "$(counter "$rl" updates_applied)"
    if [ -n "$pl" ]; then
        ps=$(summary "$pl" "$c")
        echo "$c: primary ${ps% *}, replica ${rs% *} (version stamp digest)"
        check "$c: the replica is bit-identical to the primary (version, stamp, digest, counts)" \
            [ -n "$ps" -a "$ps" = "$rs" ]
        check "$c: no delay above D at the primary" [ "$(counter "$pl" delay_violations)" = 0 ]
    fi
    check "$c: no delay above D at the replica" [ "$(counter "$rl" delay_violations)" = 0 ]
    check "$c: the scheduler saw the replica in step ($(counter "$c.s" replica_checks) checks)" \
        [ "$(counter "$c.s" replica_checks)" -gt 0 -a "$(counter "$c.s" replica_mismatch)$(counter "$c.s" replica_diverged)" = 00 ]
    check "$c: no grant beyond the bound" [ "$(counter "$c.s" bound_violations)" = 0 ]
    check "$c: nothing sent unscheduled" [ "$(sum_field "$c" fallbacks)" = 0 ]
}
# wait_all CASE: every worker of wpids exits 0 (else their last lines).
wait_all() {
    if wait_workers; then ok "$1: every worker finished"; else
        bad "$1: every worker finished"
        tail -n 3 "$tmp/$1".*.err
    fi
}

# ---- 1. a worker killed -----------------------------------------------------------------------
setup kill send 4 || { bad "kill: could not start the servers and the scheduler"; finish test_mlf_membership; exit 1; }
start4 kill
sleep 1.5
kill -9 "${wpids[3]}"
t_kill=$(now_ms)
unset 'wpids[3]'
wait_all kill
stop "$pp"
stop "$rp"
stop "$sp"
tail -n 1 "$tmp/kill.0"
t_void=$(log_ms kill.s stamp_voided)
echo "kill: the dead worker's stamp voided $((${t_void:-0} - t_kill)) ms after the kill (lease 1000 ms)"
common kill killp killr 3
check "kill: its stamp voided at both servers" \
    [ "$(counter killp stamps_voided)" -ge 1 -a "$(counter killr stamps_voided)" -ge 1 ]
check "kill: the scheduler voided it and shrank its world" \
    [ "$(counter kill.s stamps_voided)" -ge 1 -a "$(counter kill.s ranks_departed)" -ge 1 ]
check "kill: the servers were told rank 3 departed" \
    [ "$(counter killp ranks_departed)$(counter killr ranks_departed)" = 11 ]

# ---- 2. the primary killed (the workers replicate) ---------------------------------------------
setup prim send 4 || { bad "prim: could not start"; finish test_mlf_membership; exit 1; }
start4 prim
sleep 1.5
kill -9 "$pp"
wait "$pp" 2>/dev/null
t_kill=$(now_ms)
wait_all prim
stop "$rp"
stop "$sp"
tail -n 1 "$tmp/prim.0"
t_fo=$(log_ms prim.s server_failover)
echo "prim: the scheduler followed the replica $((${t_fo:-0} - t_kill)) ms after the kill (--failover-ms 500)"
common prim "" primr
check "prim: every worker failed over" [ "$(sum_field prim failovers)" -ge 4 ]
check "prim: the scheduler failed over" [ "$(counter prim.s server_failovers)" = 1 ]

# ---- 3. the primary killed, chain replication ----------------------------------------------------
setup chain chain 4 || { bad "chain: could not start"; finish test_mlf_membership; exit 1; }
start4 chain --replication chain
sleep 1.5
kill -9 "$pp"
wait "$pp" 2>/dev/null
wait_all chain
stop "$rp"
stop "$sp"
tail -n 1 "$tmp/chain.0"
common chain "" chainr
check "chain: the replica was fed by the primary's forwards until it died ($(counter chainr chain_fwd_received))" \
    [ "$(counter chainr chain_fwd_received)" -gt 0 ]
check "chain: every worker and the scheduler failed over" \
    [ "$(sum_field chain failovers)" -ge 4 -a "$(counter chain.s server_failovers)" = 1 ]

# ---- 4. the scheduler killed and restarted --------------------------------------------------------
setup sched send 4 || { bad "sched: could not start"; finish test_mlf_membership; exit 1; }
start4 sched
sleep 1.5
kill -9 "$sp"
wait "$sp" 2>/dev/null
mv "$tmp/sched.s.log" "$tmp/sched.s0.log"
sleep 1
t_restart=$(now_ms)
if scheduler sched 4; then sp=$pid; else bad "sched: the scheduler restarts on its address"; fi
wait_all sched
stop "$pp"
stop "$rp"
stop "$sp"
tail -n 1 "$tmp/sched.0"
t_rec=$(log_ms sched.s recovered)
waits=$(sed -n 's/.*answers again after \([0-9]*\) ms.*/\1/p' "$tmp"/sched.*.err | sort -n | tail -n 1)
echo "sched: rebuilt from the servers $((${t_rec:-0} - t_restart)) ms after the restart; the workers waited at most ${waits:-?} ms (1 s without a scheduler)"
grep -h 'event=recover' "$tmp/sched.s.log"
common sched schedp schedr
check "sched: the restarted scheduler rebuilt its state from the servers" \
    [ "$(counter sched.s recoveries)" = 1 ]
# (A worker whose update was held at the servers through the outage waits there instead.)
check "sched: the workers waited for it ($(sum_field sched sched_waits)), sending nothing unscheduled, and every one that waited reattached" \
    [ "$(sum_field sched sched_waits)" -ge 1 -a "$(sum_field sched reattaches)" = "$(sum_field sched sched_waits)" ]

# ---- 5. a worker joins ----------------------------------------------------------------------------
setup join send 5 || { bad "join: could not start"; finish test_mlf_membership; exit 1; }
wpids=()
for r in 0 1 2 3; do worker join "$r" --world 5 --start-ranks 4; done
sleep 1.5
worker join 4 --world 5 --start-ranks 4
wait_all join
stop "$pp"
stop "$rp"
stop "$sp"
tail -n 1 "$tmp/join.0"
common join joinp joinr
n4=$(sed -n 's/^mlf rank 4: ok .* applied \([0-9]*\) stale .*/\1/p' "$tmp/join.4")
check "join: rank 4 joined the running job at both servers" \
    [ "$(counter joinp ranks_joined_late)$(counter joinr ranks_joined_late)" = 11 ]
check "join: rank 4 was scheduled and had ${n4:-0} updates applied" [ "${n4:-0}" -gt 0 ]
check "join: rank 4 pulled a model already trained (its first version > 0)" \
    awk -v v="$(sed -n 's/.*update 1 stamp [0-9]* base \([0-9]*\):.*/\1/p' "$tmp/join.4.err")" 'BEGIN { exit !(v > 0) }'

check "ina-mlf refuses --start-ranks above --world" \
    bash -c "'$MLF' --start-ranks 5 --world 4 --rank 0 --ps 127.0.0.1:1 2>/dev/null; [ \$? = 2 ]"
check "ina-sched refuses --replica without --ps" \
    bash -c "'$SCHED' --job x --world 2 --replica 127.0.0.1:1 2>/dev/null; [ \$? = 2 ]"
check "ina-ps refuses a --sched without a port" bash -c "'$PS' --sched 127.0.0.1 2>/dev/null; [ \$? = 2 ]"
finish test_mlf_membership
