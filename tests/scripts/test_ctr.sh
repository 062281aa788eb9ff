#!/usr/bin/env bash
# test_ctr.sh: the CTR application (apps/ctr) end to end, kept short (20000 keys): all-PS and
# hot/cold train the same model to the same held-out log-loss (within 1e-4, relative), the
# model learns (AUC well above chance), ina-ps serves /metrics, and the tools answer --help.
# Issue 34: a weighted split puts the keys on the shards by weight; the hot set comes from
# every rank's sample (a rank whose keys rank 0 never sees gets its hot keys too) and is
# refreshed online (a drifting Zipf: coverage falls at the drift and is back within the
# refresh period); the Criteo and Avazu readers train on files in those formats (the loss
# falls toward the planted model's) and refuse broken lines by number; ina-ctr-gen --plan.
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
check "switch took bitmap hot blocks" grep -Eq 'hot_bitmap +[1-9]' "$tmp/sw.log"
check "switch summed every rank's sample" grep -Eq 'hot_samples +[1-9]' "$tmp/sw.log"

# ---- Issue 34 ------------------------------------------------------------------------
start_switch "$tmp/sw2.log"
start_ps() { # I S: shard I of S on a free port; its port in $tmp/ps.I.S.port
    rm -f "$tmp/ps.$1.$2.port"
    "$PS" --listen 127.0.0.1:0 --shard "$1/$2" --port-file "$tmp/ps.$1.$2.port" \
        2>"$tmp/ps.$1.$2.log" &
    bg_pids+=($!)
    wait_for 10 test -s "$tmp/ps.$1.$2.port"
}
start_ps 0 1 && start_ps 0 2 && start_ps 1 2
p1=$(cat "$tmp/ps.0.1.port") p20=$(cat "$tmp/ps.0.2.port") p21=$(cat "$tmp/ps.1.2.port")
ctr() { # JOB MODE RANKS OUTPREFIX ARGS...: run ranks 0..RANKS-1, rank r's stdout in PREFIX.r
    local job=$1 mode=$2 n=$3 out=$4 r pids=() rc=0
    shift 4
    for ((r = 0; r < n; r++)); do
        "$CTR" --mode "$mode" --rank "$r" --world "$n" --job "$job" --quiet "$@" \
            >"$out.$r" 2>"$out.$r.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
small=(--keys 20000 --batch 256 --eval 2000 --switch "$INA_SWITCH" --hot-keys 1500)

# A weighted split: shard 1 of 2 holds 3 times the hashes of shard 0, and the model is the
# one an unweighted job computes.
check "weighted split: hot/cold over shards @1,@3" ctr tw hotcold 2 "$tmp/w" "${small[@]}" \
    --warmup 2 --steps 6 --profile 2 --ps "127.0.0.1:$p20@1,127.0.0.1:$p21@3"
check "unweighted: the same job over one shard" ctr tu hotcold 2 "$tmp/u" "${small[@]}" \
    --warmup 2 --steps 6 --profile 2 --ps "127.0.0.1:$p1"
a=$(grep RESULT "$tmp/w.0" | field eval_logloss /dev/stdin) b=$(grep RESULT "$tmp/u.0" | field eval_logloss /dev/stdin)
check "weighted split: the same held-out log-loss ($a, $b)" awk -v a="$a" -v b="$b" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * a) }'
kill -TERM "${bg_pids[1]}" "${bg_pids[2]}"
wait "${bg_pids[1]}" "${bg_pids[2]}"
e0=$(sed -n 's/^ *push_entries *\([0-9]*\)/\1/p' "$tmp/ps.0.2.log")
e1=$(sed -n 's/^ *push_entries *\([0-9]*\)/\1/p' "$tmp/ps.1.2.log")
check "weighted split: shard 1 took about 3x shard 0's entries ($e1 vs $e0)" awk -v a="$e0" \
    -v b="$e1" 'BEGIN { exit !(a > 0 && b > 2.4 * a && b < 3.6 * a) }'

# Every rank's traffic: the last 13 fields are each rank's own keys, which rank 0's pushes
# never hold; rank 1's share of hot entries must match rank 0's.
check "ranks with keys of their own" ctr trf hotcold 2 "$tmp/rf" "${small[@]}" --warmup 4 \
    --steps 6 --profile 3 --rank-fields 13 --ps "127.0.0.1:$p1"
h0=$(grep RANKSTAT "$tmp/rf.0" | field hot_share /dev/stdin) h1=$(grep RANKSTAT "$tmp/rf.1" | field hot_share /dev/stdin)
check "every rank's sample: rank 1's hot share $h1 is rank 0's $h0 (not half)" awk -v a="$h0" \
    -v b="$h1" 'BEGIN { exit !(a > 0.1 && b > 0.8 * a) }'

# A drifting Zipf: from step 10 the field values map to other keys. Hot sets at steps 3, 9,
# 15, 21 (P = 3, E = 6): the one at 15 is the first sampled after the drift, within E.
share() { # FILE FIRST LAST: rank 0's mean hot share over steps FIRST..LAST
    awk -v a="$2" -v b="$3" '$1 == "STEP" { split($3, s, "="); split($5, h, "=")
        if (s[2] >= a && s[2] <= b) { t += h[2]; n++ } } END { printf "%.4f", n ? t / n : 0 }' "$1"
}
check "drift run (refresh every 6 steps)" ctr tdr hotcold 2 "$tmp/dr" "${small[@]}" --warmup 0 \
    --steps 22 --profile 3 --reprofile 6 --drift 10 --steplog --ps "127.0.0.1:$p1"
check "drift run without a refresh" ctr tdn hotcold 2 "$tmp/dn" "${small[@]}" --warmup 0 \
    --steps 22 --profile 3 --drift 10 --steplog --ps "127.0.0.1:$p1"
before=$(share "$tmp/dr.0" 4 9) after=$(share "$tmp/dr.0" 10 14) back=$(share "$tmp/dr.0" 15 21)
stuck=$(share "$tmp/dn.0" 15 21)
echo "drift: hot share $before before, $after right after, $back after the refresh ($stuck without)"
check "drift: coverage before the drift ($before)" awk -v x="$before" 'BEGIN { exit !(x > 0.15) }'
check "drift: coverage falls right after ($after)" awk -v a="$before" -v x="$after" \
    'BEGIN { exit !(x < 0.5 * a) }'
check "drift: coverage back within the refresh period ($back)" awk -v a="$before" -v x="$back" \
    'BEGIN { exit !(x > 0.85 * a) }'
check "drift: without a refresh it stays low ($stuck)" awk -v a="$before" -v x="$stuck" \
    'BEGIN { exit !(x < 0.5 * a) }'

# Files of the public formats, written by the generator with a planted model: training on
# them brings the held-out log-loss down toward the planted model's.
for fmt in criteo avazu; do
    "$GEN" --format "$fmt" --samples 40000 --keys 20000 --alpha 1.1 --out "$tmp/f.$fmt" \
        2>"$tmp/f.$fmt.log"
    floor=$(sed -n 's/.*log-loss on them: \([0-9.]*\)/\1/p' "$tmp/f.$fmt.log")
    check "$fmt: a file of 40000 lines" test "$(wc -l <"$tmp/f.$fmt")" -ge 40000
    check "$fmt: train 1 step" ctr "t${fmt}1" ps 2 "$tmp/$fmt.1" --keys 20000 --batch 256 \
        --warmup 0 --steps 1 --eval 4000 --data "$tmp/f.$fmt" --format "$fmt" --ps "127.0.0.1:$p1"
    check "$fmt: train 60 steps" ctr "t${fmt}60" ps 2 "$tmp/$fmt.60" --keys 20000 --batch 256 \
        --warmup 0 --steps 60 --eval 4000 --data "$tmp/f.$fmt" --format "$fmt" --ps "127.0.0.1:$p1"
    l1=$(grep RESULT "$tmp/$fmt.1.0" | field eval_logloss /dev/stdin)
    l60=$(grep RESULT "$tmp/$fmt.60.0" | field eval_logloss /dev/stdin)
    auc=$(grep RESULT "$tmp/$fmt.60.0" | field eval_auc /dev/stdin)
    echo "$fmt: held-out log-loss $l1 after 1 step, $l60 after 60 (AUC $auc); planted model $floor"
    check "$fmt: the loss falls toward the planted model's" awk -v a="$l1" -v b="$l60" -v f="$floor" \
        'BEGIN { exit !(f > 0 && b < a && b < 0.6 && b < 1.2 * f) }'
    check "$fmt: AUC $auc > 0.7" awk -v x="$auc" 'BEGIN { exit !(x > 0.7) }'
done
# Broken lines are refused with their number and what is wrong.
{ head -3 "$tmp/f.criteo"; head -4 "$tmp/f.criteo" | tail -1 | cut -f1-39; } >"$tmp/bad1.tsv"
{ head -3 "$tmp/f.criteo"; head -4 "$tmp/f.criteo" | tail -1 | sed 's/\t[0-9a-f]\{8\}\t/\tzz\t/'; } >"$tmp/bad2.tsv"
{ head -3 "$tmp/f.criteo"; head -4 "$tmp/f.criteo" | tail -1 | sed 's/^./7/'; } >"$tmp/bad3.tsv"
tail -n +2 "$tmp/f.avazu" | head -5 >"$tmp/bad4.csv"
bad_file() { # FILE FORMAT MESSAGE
    ! "$CTR" --mode ps --job tbad --keys 20000 --batch 2 --warmup 0 --steps 3 --eval 2 \
        --data "$1" --format "$2" --ps "127.0.0.1:$p1" >/dev/null 2>"$tmp/bad.err" &&
        grep -q "$3" "$tmp/bad.err"
}
check "criteo: a line of 39 fields is refused by number" bad_file "$tmp/bad1.tsv" criteo \
    "line 4: 39 tab-separated fields"
check "criteo: a hash that is not 8 hex digits is refused" bad_file "$tmp/bad2.tsv" criteo \
    "line 4: C[0-9]* 'zz' is not 8 hexadecimal digits"
check "criteo: a label other than 0 or 1 is refused" bad_file "$tmp/bad3.tsv" criteo \
    "line 4: label '7' is not 0 or 1"
check "avazu: a file without its header is refused" bad_file "$tmp/bad4.csv" avazu \
    "no Avazu header"

# The model of the benchmark: per-host bytes, the weights, all-PS against hot/cold.
"$GEN" --plan --keys 20000 --batch 256 --workers 2 --hosts 2 --hot 500,1500 --profile 3 \
    --steps 2 >"$tmp/plan" 2>&1
check "plan: weights and a hot/cold setup faster than all-PS at equal hosts" awk '
    $1 == "PLAN_BEST" { best = 1 } $1 == "PLAN_RATIO" { split($2, r, "="); ratio = r[2] }
    END { exit !(best && ratio > 1) }' "$tmp/plan"
check "ina-ctr-gen --help names --plan" sh -c "'$GEN' --help | grep -q -- --plan"
check "switch 2 stops cleanly" stop_switch
finish test_ctr
