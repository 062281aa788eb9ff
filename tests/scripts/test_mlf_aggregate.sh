#!/usr/bin/env bash
# test_mlf_aggregate.sh: MLfabric's opportunistic aggregation end to end (PROTOCOL.md §15.7,
# docs/MLFABRIC.md), 8 ina-mlf workers on loopback with ina-sched --aggregate, an ina-switch,
# a primary and a replica:
#  1. groups form; each group's updates are summed in the switch and reach both servers as
#     one update; the counters of workers, scheduler and servers agree member for member;
#  2. the switch killed mid-training: groups fail within --agg-timeout-ms, leaders send
#     alone, every rank stops asking to be grouped after 3 failures, training completes,
#     and the replica stays in step;
#  3. 2% loss, duplication and reordering both ways at the switch, the leaders sending the
#     groups' mean (--agg-reduce mean): training completes with the servers in step and
#     nothing refused;
#  4. with chain replication (the primary forwards each group's update): the replica, fed by
#     forwards only, counts the same groups;
#  5. groups that share one pull (--agg-pull switch: the leader pulls, the switch gives the
#     model to the others), held for one more member (ina-sched --agg-hold-ms): every other
#     member of a summed group got its model through the switch; then the switch killed:
#     members pull for themselves again, training completes, the replica in step.
set -uo pipefail
exec </dev/null
BUILD=${INA_BUILD_DIR:-build}
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"
SW=$BUILD/bin/ina-switch
PS=$BUILD/bin/ina-ps
SCHED=$BUILD/bin/ina-sched
MLF=$BUILD/bin/ina-mlf
for b in "$SW" "$PS" "$SCHED" "$MLF"; do
    [ -x "$b" ] || { echo "SKIP: $b not built"; exit 77; }
done
W=8 D=2 K=3
# shellcheck source=tests/scripts/mlf_harness.sh
source "$(dirname "$0")/mlf_harness.sh"

# setup CASE [switch options]: a switch, a primary, a replica and a scheduler for CASE. The
# switch offers shared-memory rings unless told --no-shm: on one host, every group's job
# attaches them (case 1); the cases that inject faults or kill the switch use UDP.
setup() {
    local c=$1
    shift
    start "$c.sw" "$SW" "$@"; swp=$pid swport=$port
    start "$c.p" "$PS" --quiet; pp=$pid pport=$port
    start "$c.r" "$PS" --quiet; rp=$pid rport=$port
    start "$c.s" "$SCHED" --job "$c" --world $W --max-delay $D --aggregate $K --log-level warn
    sp=$pid sport=$port
}
# agg_workers CASE ARGS...: W workers of CASE on its servers, scheduler and switch.
agg_workers() {
    local c=$1
    shift
    workers "$c" --ps 127.0.0.1:$pport --replica 127.0.0.1:$rport --sched 127.0.0.1:$sport \
        --switch 127.0.0.1:$swport --compute-ms 2 "$@"
}
stop_all() { stop "$swp"; stop "$pp"; stop "$rp"; stop "$sp"; }
gt0() { awk -v n="$1" 'BEGIN { exit !(n > 0) }'; }

# ---- 1. groups summed in the switch ------------------------------------------------------------
setup agg
agg_workers agg --updates 400
check "the workers finished" wait_workers
stop_all
tail -n 2 "$tmp/agg.0"
groups=$(counter agg.p updates_aggregated)
check "groups were summed and applied as one update each ($groups)" gt0 "${groups:-0}"
check "the scheduler granted those groups (one stamp each)" \
    [ "$(counter agg.s groups)" -ge "${groups:-1}" ]
check "every group's sum was sent once, by its leader" [ "$(sum_field agg groups_led)" = "$groups" ]
check "the server's members = the leaders' and the members' parts summed" \
    [ "$(counter agg.p aggregated_members)" = "$(($(sum_field agg groups_led) + $(sum_field agg aggregated)))" ]
check "no group failed" [ "$(sum_field agg agg_failures)$(counter agg.s member_failed)" = 00 ]
check "the primary applied each update the leaders saw applied, once" \
    [ "$(counter agg.p updates_applied)" = "$(sum_field agg applied)" ]
check "the replica is in step (same updates, groups and delays)" same_servers agg.p agg.r
check "no delay above D" [ "$(counter agg.p delay_violations)$(counter agg.s bound_violations)" = 00 ]
check "nothing refused" [ "$(counter agg.p updates_stale)" = 0 ]
check "the loss reached its target" grep -q "target .* reached at" "$tmp/agg.0"
check "the switch saw the groups' jobs" gt0 "$(sed -n 's/^ *jobs_started *\([0-9]*\).*/\1/p' "$tmp/agg.sw.log" | head -1)"

# ---- 2. the switch killed -------------------------------------------------------------------
setup dead --no-shm
agg_workers dead --updates 1200 --agg-timeout-ms 300
check "training reached version 200 with the switch" until_version dead 200
kill -9 "$swp"; wait "$swp" 2>/dev/null
check "the workers finished without the switch" wait_workers
stop "$pp"; stop "$rp"; stop "$sp"
tail -n 2 "$tmp/dead.0"
check "groups failed, with a warning" gt0 "$(sum_field dead agg_failures)"
check "ranks stopped asking to be grouped" grep -q "no more aggregation" "$tmp"/dead.*.err
check "the failed members were counted by the scheduler" gt0 "$(counter dead.s member_failed)"
check "the replica stayed in step" same_servers dead.p dead.r
check "no delay above D (switch killed)" [ "$(counter dead.p delay_violations)" = 0 ]
check "the model reached version 1200" grep -q "final version 1[2-9][0-9][0-9]" "$tmp/dead.0"

# ---- 3. loss, duplication and reordering at the switch -------------------------------------------
f=drop=0.02,dup=0.02,reorder=0.02
setup lossy --no-shm --fault-rx $f,seed=5 --fault-tx $f,seed=6
agg_workers lossy --updates 300 --agg-timeout-ms 5000 --agg-reduce mean
check "the workers finished under loss at the switch" wait_workers
stop_all
tail -n 2 "$tmp/lossy.0"
check "groups were summed under loss ($(counter lossy.p updates_aggregated))" \
    gt0 "$(counter lossy.p updates_aggregated)"
check "no group failed under loss" [ "$(sum_field lossy agg_failures)" = 0 ]
check "the replica is in step under loss" same_servers lossy.p lossy.r
check "no delay above D, nothing refused under loss" \
    [ "$(counter lossy.p delay_violations)$(counter lossy.p updates_stale)" = 00 ]

# ---- 4. aggregation with chain replication ----------------------------------------------------
# The leader's one UPDATE reaches the replica only as the primary's forward (§15.8), which
# carries its members word: the replica counts the same groups.
start_chain ch
start ch.sw "$SW" --no-shm; swp=$pid swport=$port
start ch.s "$SCHED" --job chain --world $W --max-delay $D --aggregate $K --log-level warn
sp=$pid sport=$port
pport=$chpport rport=$chrport
agg_workers chain --updates 300 --replication chain
check "the workers finished (chain replication)" wait_workers
stop "$swp"; stop "$chp"; stop "$chr"; stop "$sp"
check "groups were summed (chain replication: $(counter chp updates_aggregated))" \
    gt0 "$(counter chp updates_aggregated)"
check "the workers sent the replica nothing" [ "$(sum_field chain bytes_replica)" = 0 ]
check "the primary applied each update the workers saw applied, once" \
    [ "$(counter chp updates_applied)" = "$(sum_field chain applied)" ]
check "the replica, fed by forwards only, is in step (same updates, groups and delays)" same_servers chp chr
check "no chain mismatch, no broken chain, no delay above D" \
    [ "$(counter chp chain_mismatch)$(counter chp chain_broken)$(counter chp delay_violations)" = 000 ]

# ---- 5. one pull per group, through the switch; then the switch killed ---------------------------
setup shared --no-shm
agg_workers shared --updates 1000 --agg-pull switch --agg-timeout-ms 300
check "training reached version 150 with shared pulls" until_version shared 150
sleep 0.3
kill -9 "$swp"; wait "$swp" 2>/dev/null
check "the workers finished (shared pulls, then no switch)" wait_workers
stop "$pp"; stop "$rp"; stop "$sp"
tail -n 2 "$tmp/shared.0"
shared=$(sum_field shared shared_pulls)
check "members got the model through the switch ($shared)" gt0 "$shared"
summed=$(sum_field shared aggregated) failed=$(sum_field shared agg_failures)
check "each shared pull ($shared) ended in a part summed ($summed) or a failed group ($failed)" \
    [ "$shared" -le $((summed + failed)) ]
check "the scheduler held groups for more members ($(counter shared.s holds) holds, $(counter shared.s holds_joined) joined)" \
    gt0 "$(counter shared.s holds_joined)"
check "after the switch died, groups failed and members pulled for themselves" \
    grep -q "did not share the model" "$tmp"/shared.*.err
check "the replica stayed in step (shared pulls)" same_servers shared.p shared.r
check "no delay above D, nothing refused (shared pulls)" \
    [ "$(counter shared.p delay_violations)$(counter shared.p updates_stale)" = 00 ]
check "the model reached version 1000" grep -q "final version 1[0-9][0-9][0-9]" "$tmp/shared.0"

check "ina-mlf refuses an unknown --agg-pull" \
    bash -c "'$MLF' --ps 127.0.0.1:1 --rank 0 --world 1 --agg-pull leader 2>/dev/null; [ \$? = 2 ]"
check "ina-sched refuses --aggregate above --world" \
    bash -c "'$SCHED' --job x --world 2 --aggregate 3 2>/dev/null; [ \$? = 2 ]"
check "ina-mlf refuses an unknown --agg-reduce" \
    bash -c "'$MLF' --ps 127.0.0.1:1 --rank 0 --world 1 --agg-reduce max 2>/dev/null; [ \$? = 2 ]"
check "ina-mlf refuses --agg-timeout-ms 0" \
    bash -c "'$MLF' --ps 127.0.0.1:1 --rank 0 --world 1 --agg-timeout-ms 0 2>/dev/null; [ \$? = 2 ]"
finish test_mlf_aggregate
