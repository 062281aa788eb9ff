#!/usr/bin/env bash
# test_mlfabric.sh: MLfabric end to end (docs/MLFABRIC.md), 4 ina-mlf workers on loopback:
#  1. scheduled, with a replica, and the primary killed mid-training: the workers fail over,
#     training completes on the replica, every update the workers saw applied was applied
#     once there, no delay above D;
#  2. the scheduler killed mid-training, the workers told to fall back at once
#     (--sched-fallback-ms 0; by default they wait for a restarted one, test_mlf_membership.sh):
#     they warn, send unscheduled, and finish;
#  3. 5% loss, duplication and reordering both ways at the primary and the replica: no update
#     lost or doubled, and both servers took the same updates with the same delays;
#  6. chain replication (ina-ps --chain-to/--chain-from, ina-mlf --replication chain): the
#     workers send to the primary alone, the replica takes every stamp from its forwards under
#     5% loss, duplication and reordering; then the primary killed: failover loses nothing;
#  7. the baselines of bench/mlfabric.sh: unbounded asynchronous training (--max-delay
#     unbounded: every update applied, none refused) and synchronous training (--sync: a
#     barrier per version, every rank's gradient in each), each stopping at its target.
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
    --sched-timeout-ms 300 --sched-fallback-ms 0
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
check "the replica is in step (same updates and delays)" same_servers p3 r3
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

# ---- 6. chain replication ---------------------------------------------------------------------
# Under 5% loss both ways a forward can stay unanswered a while on a loaded host: a deadline
# well above the retries (the default 1000 ms broke the chain once in about 25 runs).
start_chain c6 --fault-rx $f,seed=5 --fault-tx $f,seed=6 --chain-timeout-ms 5000
start s6 "$SCHED" --job chain --world $W --max-delay $D --log-level warn; s6=$pid s6port=$port
workers chain --ps 127.0.0.1:$c6pport --replica 127.0.0.1:$c6rport --sched 127.0.0.1:$s6port \
    --replication chain --updates 600
check "the chain workers finished under loss" wait_workers
stop "$c6p"
stop "$c6r"
stop "$s6"
applied=$(sum_field chain applied)
check "chain: the primary applied each update once ($applied)" [ "$(counter c6p updates_applied)" = "$applied" ]
check "chain: the replica, fed by forwards only, is in step (same updates and delays)" \
    same_servers c6p c6r
check "chain: the workers sent nothing to the replica" [ "$(sum_field chain bytes_replica)" = 0 ]
taken=$(($(counter c6p updates_applied) + $(counter c6p updates_stale)))
check "chain: every stamped update taken was forwarded ($taken)" [ "$(counter c6p chain_forwarded)" = "$taken" ]
check "chain: every outcome waited for the replica" [ "$(counter c6p chain_released)" = "$taken" ]
check "chain: lost forwards were sent again" awk -v n="$(counter c6p chain_fwd_retransmits)" 'BEGIN { exit !(n > 0) }'
check "chain: no mismatch, no broken chain, no delay above D" \
    [ "$(counter c6p chain_mismatch)$(counter c6p chain_broken)$(counter c6p delay_violations)$(counter c6r delay_violations)" = 0000 ]
# The primary killed: the workers fail over to the replica, which has every stamp they heard.
start_chain c7
start s7 "$SCHED" --job chainfail --world $W --max-delay $D --log-level warn; s7=$pid s7port=$port
workers chainfail --ps 127.0.0.1:$c7pport --replica 127.0.0.1:$c7rport --sched 127.0.0.1:$s7port \
    --replication chain --updates 1500 --failover-ms 500
check "chain: training reached version 300 on the primary" until_version chainfail 300
kill -9 "$c7p"; wait "$c7p" 2>/dev/null
if wait_workers; then ok "chain: the workers finished on the replica"; else
    bad "chain: the workers finished on the replica"; tail -n 4 "$tmp"/chainfail.*.err; fi
stop "$c7r"
stop "$s7"
applied=$(sum_field chainfail applied)
check "chain: the workers failed over" awk -v n="$(sum_field chainfail failovers)" 'BEGIN { exit !(n >= 1) }'
check "chain: the replica applied every update the workers saw applied, once ($applied)" \
    [ "$(counter c7r updates_applied)" = "$applied" ]
check "chain: no delay above D at the replica" [ "$(counter c7r delay_violations)" = 0 ]
check "ina-mlf refuses an unknown --replication" \
    bash -c "'$MLF' --replication star --ps 127.0.0.1:1 --rank 0 --world 1 2>/dev/null; [ \$? = 2 ]"
check "ina-ps refuses --chain-to with --chain-from" \
    bash -c "'$PS' --chain-to 127.0.0.1:1 --chain-from 127.0.0.1:2 2>/dev/null; [ \$? = 2 ]"

# ---- 7. unbounded asynchronous and synchronous training --------------------------------------
start p8 "$PS" --quiet; p8=$pid p8port=$port
workers unbounded --ps 127.0.0.1:$p8port --max-delay unbounded --updates 2000 --stop-at-target \
    --compute-ms 1
check "unbounded: the workers finished" wait_workers
stop "$p8"
tail -n 1 "$tmp/unbounded.0"
check "unbounded: the target was reached, and the workers stopped there" \
    grep -q "target .* reached at version [0-9]* " "$tmp/unbounded.0"
applied=$(sum_field unbounded applied)
check "unbounded: every update applied ($applied), none refused" \
    [ "$(counter p8 updates_applied):$(counter p8 updates_stale):$(sum_field unbounded stale)" = "$applied:0:0" ]
check "unbounded: stopped well before --updates" awk -v n="$applied" 'BEGIN { exit !(n < 1500) }'
start p9 "$PS" --quiet; p9=$pid p9port=$port
workers sync --ps 127.0.0.1:$p9port --sync --updates 500 --stop-at-target
check "sync: the workers finished" wait_workers
stop "$p9"
tail -n 1 "$tmp/sync.0"
check "sync: the target was reached" grep -q "target .* reached at" "$tmp/sync.0"
steps=$(counter p9 steps_applied)
check "sync: each of the $steps steps (versions) took every rank's gradient" \
    [ "$(sum_field sync applied)" = $((W * steps)) ]
check "sync: every rank stopped at the same version" \
    [ "$(grep -ho 'iterations [0-9]*' "$tmp"/sync.[0-9] | sort -u | wc -l)" = 1 ]
check "sync: no UPDATE (the STALE kind) was sent" [ "$(counter p9 updates_applied)" = 0 ]
check "ina-mlf refuses --sync with --sched" \
    bash -c "'$MLF' --sync --sched 127.0.0.1:1 --ps 127.0.0.1:1 --rank 0 --world 1 2>/dev/null; [ \$? = 2 ]"

check "ina-sched and ina-mlf answer --help" bash -c "'$SCHED' --help >/dev/null && '$MLF' --help >/dev/null"
check "ina-sched refuses a missing --job" bash -c "! '$SCHED' --world 2 2>/dev/null"
finish test_mlfabric
