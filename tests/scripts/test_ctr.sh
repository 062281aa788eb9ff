#!/usr/bin/env bash
# test_ctr.sh: the CTR application (apps/ctr) end to end, kept short (20000 keys): all-PS and
# hot/cold train the same model to the same held-out log-loss (within 1e-4, relative), the
# model learns (AUC well above chance), ina-ps serves /metrics, and the tools answer --help.
set -uo pipefail
exec </dev/null
BUILD=${INA_BUILD_DIR:-build}
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"
SW=$BUILD/bin/ina-switch
PS=$BUILD/bin/ina-ps
CTR=$BUILD/bin/ina-ctr
GEN=$BUILD/bin/ina-ctr-gen
for b in "$SW" "$PS" "$CTR" "$GEN"; do
    [ -x "$b" ] || { echo "SKIP: $b not built"; exit 77; }
done

pspid=
cleanup_ps() { [ -n "$pspid" ] && kill -9 "$pspid" 2>/dev/null; cleanup; }
trap cleanup_ps EXIT

rm -f "$tmp/psport" "$tmp/mport"
"$PS" --listen 127.0.0.1:0 --port-file "$tmp/psport" --metrics 127.0.0.1:0 \
    --metrics-port-file "$tmp/mport" 2>"$tmp/ps.log" &
pspid=$!
start_switch "$tmp/sw.log"
for _ in $(seq 200); do [ -s "$tmp/psport" ] && [ -s "$tmp/mport" ] && break; sleep 0.05; done
psport=$(cat "$tmp/psport")

args=(--world 2 --keys 20000 --batch 256 --warmup 2 --steps 18 --eval 4000 --quiet
    --ps "127.0.0.1:$psport" --switch "$INA_SWITCH" --hot-keys 1500 --profile 4 --reprofile 6)
run() { # MODE: two ranks; rank 0's RESULT line into $tmp/MODE
    local mode=$1 r pids=()
    for r in 0 1; do
        "$CTR" --mode "$mode" --rank "$r" --job "t$mode" "${args[@]}" >"$tmp/$mode.$r" \
            2>"$tmp/$mode.$r.err" &
        pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    grep RESULT "$tmp/$mode.0" >"$tmp/$mode"
    return $rc
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }

check "all-PS run" run ps
check "hot/cold run" run hotcold
check "both ok" grep -q 'status=ok' "$tmp/ps"
check "hot/cold ok" grep -q 'status=ok' "$tmp/hotcold"
a=$(field eval_logloss "$tmp/ps") b=$(field eval_logloss "$tmp/hotcold")
auc=$(field eval_auc "$tmp/ps") bayes=$(field bayes_logloss "$tmp/ps")
echo "eval log-loss: all-PS $a, hot/cold $b (Bayes $bayes); AUC $auc"
check "same log-loss within 1e-4 relative" awk -v a="$a" -v b="$b" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * a) }'
check "the model learned (AUC > 0.6)" awk -v x="$auc" 'BEGIN { exit !(x > 0.6) }'
hs=$(sed -n 's/.* hot_share=\([^ ]*\).*/\1/p' "$tmp/hotcold.0")
check "hot keys went to the switch (hot share $hs)" awk -v x="$hs" 'BEGIN { exit !(x > 0.2) }'

mport=$(cat "$tmp/mport")
metrics() {
    exec 3<>"/dev/tcp/127.0.0.1/$mport" || return 1
    printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
    cat <&3
    exec 3<&-
}
# The operator view is a snapshot ina-ps publishes every 100 ms (src/ps/metrics.h): the last
# steps may need one more publication, so ask again for up to 3 s.
for _ in $(seq 30); do
    metrics /metrics >"$tmp/metrics"
    grep -Eq '^ina_ps_steps_applied_total [1-9]' "$tmp/metrics" && break
    sleep 0.1
done
check "/metrics counts the applied steps" grep -Eq '^ina_ps_steps_applied_total [1-9]' "$tmp/metrics"
check "/metrics has drops by cause" grep -q 'ina_ps_drops_total{cause="SOURCE"}' "$tmp/metrics"
metrics /counters >"$tmp/counters"
check "/counters is JSON" grep -q '"counters":{"rx_packets":' "$tmp/counters"
check "unknown path is 404" bash -c "$(declare -f metrics); mport=$mport; metrics /nope | head -1 | grep -q 404"

check "ina-ps --help" sh -c "'$PS' --help | grep -q -- --max-memory"
check "ina-ctr --help" sh -c "'$CTR' --help | grep -q -- hotcold"
check "ina-ctr-gen --help" sh -c "'$GEN' --help | grep -q -- --coverage"
check "ina-ps refuses a bad --shard" sh -c "! '$PS' --shard 2/2 2>/dev/null"
check "coverage curve grows with H" sh -c "'$GEN' --coverage --keys 20000 --batch 256 \
    --workers 2 --profile 2 --steps 2 --hot 0,500,5000 | awk 'NR > 3 { v[NR] = \$2 + 0 }
    END { exit !(v[4] == 0 && v[5] > 0 && v[6] > v[5]) }'"
kill -TERM "$pspid"
wait "$pspid"
check "ina-ps exits 0 and prints its counters" grep -q 'steps_applied' "$tmp/ps.log"
pspid=
check "switch stops cleanly" stop_switch
check "switch installed hot tables" grep -Eq 'hot_installs +[1-9]' "$tmp/sw.log"
finish test_ctr
