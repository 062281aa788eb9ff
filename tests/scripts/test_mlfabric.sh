#!/usr/bin/env bash
# test_mlfabric.sh: MLfabric end to end (docs/MLFABRIC.md), 4 ina-mlf workers on loopback:
#  1. scheduled, with a replica, and the primary killed mid-training: the workers fail over,
#     training completes on the replica, every update the workers saw applied was applied
#     once there, no delay above D;
#  2. the scheduler killed mid-training: the workers warn, send unscheduled, and finish;
#  3. 5% loss, duplication and reordering both ways at the primary and the replica: no update
#     lost or doubled, and both servers took the same updates with the same delays.
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
pids=()
cleanup_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; cleanup; }
trap cleanup_all EXIT

# start NAME CMD...: a daemon on a free port (its --port-file); sets $pid and $port.
start() {
    local name=$1
    shift
    rm -f "$tmp/$name.port"
    "$@" --listen 127.0.0.1:0 --port-file "$tmp/$name.port" 2>"$tmp/$name.log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 200); do [ -s "$tmp/$name.port" ] && break; sleep 0.05; done
    port=$(cat "$tmp/$name.port" 2>/dev/null)
}
# workers CASE ARGS...: start W workers in the background; their pids in $wpids.
workers() {
    local c=$1 r
    shift
    wpids=()
    for r in $(seq 0 $((W - 1))); do
        "$MLF" --rank "$r" --world $W --max-delay $D --job "$c" "$@" >"$tmp/$c.$r" 2>"$tmp/$c.$r.err" &
        wpids+=($!)
    done
}
wait_workers() { local rc=0 p; for p in "${wpids[@]}"; do wait "$p" || rc=1; done; return $rc; }
# until_version CASE V: wait (at most 60 s) until rank 0 reports a model version >= V.
until_version() {
    for _ in $(seq 1200); do
        awk -v v="$2" '/^mlf: version/ && $3 >= v { f = 1 } END { exit !f }' "$tmp/$1.0" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
sum_field() { cat "$tmp/$1".[0-9] | sed -n "s/.* $2 \([0-9]*\).*/\1/p" | awk '{ s += $1 } END { print s + 0 }'; }
counter() { sed -n "s/^  $2 *\([0-9]*\)$/\1/p" "$tmp/$1.log"; }
stop() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# ---- 1. primary killed ----------------------------------------------------------------------
start p1 "$PS" --quiet; p1=$pid p1port=$port
start r1 "$PS" --quiet; r1=$pid r1port=$port
start s1 "$SCHED" --job fail --world $W --max-delay $D --log-level warn; s1=$pid s1port=$port
workers fail --ps 127.0.0.1:$p1port --replica 127.0.0.1:$r1port --sched 127.0.0.1:$s1port \
    --updates 1500 --failover-ms 500
check "training reached version 300 on the primary" until_version fail 300
kill -9 "$p1"; wait "$p1" 2>/dev/null
if wait_workers; then ok "the workers finished on the replica"; else
    bad "the workers finished on the replica"; tail -n 4 "$tmp"/fail.*.err; fi
stop "$r1"
stop "$s1"
cat "$tmp/fail.0"
check "the workers failed over" awk -v n="$(sum_field fail failovers)" 'BEGIN { exit !(n >= 1) }'
applied=$(sum_field fail applied)
check "the replica applied every update the workers saw applied, once ($applied)" \
    [ "$(counter r1 updates_applied)" = "$applied" ]
check "no delay above D at the replica" [ "$(counter r1 delay_violations)" = 0 ]
check "the loss reached its target" grep -q "target .* reached at" "$tmp/fail.0"
check "no scheduler fallback" [ "$(sum_field fail fallbacks)" = 0 ]

# ---- 2. scheduler killed --------------------------------------------------------------------
start p2 "$PS" --quiet; p2=$pid p2port=$port
start s2 "$SCHED" --job nosched --world $W --max-delay $D --log-level warn; s2=$pid s2port=$port
workers nosched --ps 127.0.0.1:$p2port --sched 127.0.0.1:$s2port --updates 1500 \
    --sched-timeout-ms 300
check "training reached version 300 with the scheduler" until_version nosched 300
kill -9 "$s2"; wait "$s2" 2>/dev/null
check "the workers finished unscheduled" wait_workers
stop "$p2"
check "every worker fell back, with a warning" \
    [ "$(grep -l 'sending unscheduled' "$tmp"/nosched.*.err | wc -l)" = $W ]
applied=$(sum_field nosched applied)
check "the server applied each update once ($applied)" [ "$(counter p2 updates_applied)" = "$applied" ]
check "no delay above D (scheduler killed)" [ "$(counter p2 delay_violations)" = 0 ]

# ---- 3. loss, duplication, reordering -------------------------------------------------------
f=drop=0.05,dup=0.05,reorder=0.05
start p3 "$PS" --quiet --fault-rx $f,seed=1 --fault-tx $f,seed=2; p3=$pid p3port=$port
start r3 "$PS" --quiet --fault-rx $f,seed=3 --fault-tx $f,seed=4; r3=$pid r3port=$port
start s3 "$SCHED" --job lossy --world $W --max-delay $D --log-level warn; s3=$pid s3port=$port
workers lossy --ps 127.0.0.1:$p3port --replica 127.0.0.1:$r3port --sched 127.0.0.1:$s3port \
    --updates 600
check "the workers finished under loss" wait_workers
stop "$p3"
stop "$r3"
stop "$s3"
applied=$(sum_field lossy applied)
check "the primary applied each update once ($applied)" [ "$(counter p3 updates_applied)" = "$applied" ]
check "the replica applied the same updates" [ "$(counter r3 updates_applied)" = "$applied" ]
check "with the same delays" [ "$(grep '^  delay_' "$tmp/p3.log")" = "$(grep '^  delay_' "$tmp/r3.log")" ]
check "copies were answered, not applied again" awk -v n="$(counter p3 update_dups)" 'BEGIN { exit !(n > 0) }'
check "no delay above D under loss" [ "$(counter p3 delay_violations)$(counter r3 delay_violations)" = 00 ]
# ---- 4. the MLP classifier, asynchronously, with a replica -----------------------------------
start p4 "$PS" --quiet; p4=$pid p4port=$port
start r4 "$PS" --quiet; r4=$pid r4port=$port
start s4 "$SCHED" --job mlp --world $W --max-delay $D --log-level warn; s4=$pid s4port=$port
workers mlp --model mlp --ps 127.0.0.1:$p4port --replica 127.0.0.1:$r4port \
    --sched 127.0.0.1:$s4port --updates 600
check "the MLP workers finished" wait_workers
stop "$p4"
stop "$r4"
stop "$s4"
cat "$tmp/mlp.0" | tail -n 2
check "the MLP's loss reached its target (0.42 x the initial cross-entropy)" \
    grep -q "target .* reached at" "$tmp/mlp.0"
acc=$(sed -n 's/.*held-out accuracy \([0-9.]*\).*/\1/p' "$tmp/mlp.0")
check "the MLP learned: held-out accuracy ${acc:-?} > 0.5 (chance 0.1)" \
    awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }'
applied=$(sum_field mlp applied)
check "the MLP's primary applied each update once ($applied)" [ "$(counter p4 updates_applied)" = "$applied" ]
check "the MLP's replica applied the same updates" [ "$(counter r4 updates_applied)" = "$applied" ]
check "no delay above D (MLP)" [ "$(counter p4 delay_violations)$(counter r4 delay_violations)" = 00 ]
# ---- 5. the CTR model (hashed logistic regression on the click logs), asynchronously --------
start p5 "$PS" --quiet; p5=$pid p5port=$port
start s5 "$SCHED" --job ctr --world $W --max-delay $D --log-level warn; s5=$pid s5port=$port
workers ctr --model ctr --ps 127.0.0.1:$p5port --sched 127.0.0.1:$s5port --updates 800
check "the CTR workers finished" wait_workers
stop "$p5"
stop "$s5"
cat "$tmp/ctr.0" | tail -n 2
check "the CTR model's log-loss reached its target" grep -q "target .* reached at" "$tmp/ctr.0"
auc=$(sed -n 's/.*held-out AUC \([0-9.]*\).*/\1/p' "$tmp/ctr.0")
check "the CTR model ranks clicks: held-out AUC ${auc:-?} > 0.7 (chance 0.5)" \
    awk -v a="${auc:-0}" 'BEGIN { exit !(a > 0.7) }'
applied=$(sum_field ctr applied)
check "the CTR server applied each update once ($applied)" [ "$(counter p5 updates_applied)" = "$applied" ]
check "no delay above D (CTR)" [ "$(counter p5 delay_violations)" = 0 ]
check "ina-mlf refuses an unknown --model" bash -c "! '$MLF' --model cnn --ps 127.0.0.1:1 --rank 0 --world 1 2>/dev/null"
check "ina-mlf refuses --keys with --model mlp" \
    bash -c "'$MLF' --model mlp --keys 8 --ps 127.0.0.1:1 --rank 0 --world 1 2>/dev/null; [ \$? = 2 ]"

check "ina-sched and ina-mlf answer --help" bash -c "'$SCHED' --help >/dev/null && '$MLF' --help >/dev/null"
check "ina-sched refuses a missing --job" bash -c "! '$SCHED' --world 2 2>/dev/null"
finish test_mlfabric
