#!/usr/bin/env bash
# test_tools.sh: the command-line tools and examples/allreduce.c behave as documented.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch BENCH=$B/bin/ina-bench EX=$B/examples/allreduce
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"

# --help on every tool, exit 0, and mentions its main options
check "ina-switch --help" bash -c "$SW --help | grep -q -- --listen"
check "ina-bench --help" bash -c "$BENCH --help | grep -q -- --local"
check "ina-switch --version" bash -c "$SW --version | grep -q 'ina-switch'"
check "ina-ctl --version" bash -c "$B/bin/ina-ctl --version | grep -q '^ina-ctl [0-9]'"
check "ina-switch --help: sums go back to every worker (multicast is opt-in)" \
    bash -c "$SW --help | grep -q 'one copy per worker; --multicast: one per job'"
# bad arguments: exit 2 with a message, never a crash
"$SW" --slots banana >/dev/null 2>"$tmp/err"; rc=$?
check "ina-switch bad --slots exits 2" test "$rc" -eq 2
check "ina-switch bad --slots says why" grep -q "bad number" "$tmp/err"
"$SW" --listen nonsense:99999 >/dev/null 2>&1; check "ina-switch bad --listen exits 2" test $? -eq 2
"$BENCH" --local 2 --dtype float8 >/dev/null 2>&1; check "ina-bench bad --dtype exits 2" test $? -eq 2
"$BENCH" --local 2 --op prod >/dev/null 2>&1; check "ina-bench bad --op exits 2" test $? -eq 2
"$BENCH" --local 2 --dtype float64 --op max >/dev/null 2>&1
check "ina-bench --op max on float64 exits 2" test $? -eq 2
check "ina-bench --help names the dtypes and ops" bash -c "$BENCH --help | grep -q -- 'bfloat16 or float64' && $BENCH --help | grep -q -- '--op OP'"
"$BENCH" >/dev/null 2>&1; check "ina-bench without a mode exits 2" test $? -eq 2

# ina-bench --local --json: one object per size, required keys, ok true
"$BENCH" --local 3 --sizes 4K,1001,256K --iters 3 --warmup 1 --json >"$tmp/json" 2>"$tmp/bench.err"
check "ina-bench --json exits 0" test $? -eq 0
check "ina-bench --json prints 3 lines" test "$(wc -l <"$tmp/json")" -eq 3
for key in workers bytes dtype iters time_s algbw_gbps busbw_gbps ate_per_s max_abs_err \
    max_rel_err retransmits ok; do
    check "json key $key on every line" test "$(grep -c "\"$key\":" "$tmp/json")" -eq 3
done
check "json ok true on every line" test "$(grep -c '"ok": *true' "$tmp/json")" -eq 3
"$BENCH" --local 2 --sizes 64K --dtype int32 --iters 2 --warmup 0 --json >"$tmp/json2" 2>/dev/null
check "ina-bench int32 ok" grep -q '"ok": *true' "$tmp/json2"
# every other dtype and op, verified (small: the e2e tests cover the matrix)
for dt_op in float16:avg bfloat16:sum float64:avg int32:max int32:min int32:avg float32:max \
    float16:min bfloat16:max; do
    "$BENCH" --local 2 --sizes 4K,1001 --dtype "${dt_op%%:*}" --op "${dt_op##*:}" --iters 2 \
        --warmup 0 --json >"$tmp/json3" 2>/dev/null
    check "ina-bench $dt_op ok" test "$(grep -c '"ok": *true' "$tmp/json3")" -eq 2
done

# floats added as floats by the switch: verified against that mode's bound, and reported
for dt_op in float32:sum bfloat16:avg; do
    "$BENCH" --local 3 --sizes 4K,1M --dtype "${dt_op%%:*}" --op "${dt_op##*:}" --iters 2 \
        --warmup 0 --float-add switch --json >"$tmp/json4" 2>/dev/null
    check "ina-bench --float-add switch $dt_op ok" \
        test "$(grep -c '"ok": *true' "$tmp/json4")" -eq 2
    check "ina-bench --float-add switch $dt_op reports it" grep -q '"float_add":"switch"' "$tmp/json4"
done
"$BENCH" --local 2 --float-add floats >/dev/null 2>&1
check "ina-bench bad --float-add exits 2" test $? -eq 2
"$BENCH" --local 2 --inflight 65 >/dev/null 2>&1
check "ina-bench --inflight 65 exits 2" test $? -eq 2

# shared-memory rings with a local switch --shm (skipped where there is no /dev/shm)
shm_free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "${shm_free_kb:-0}" -ge 65536 ]; then
    "$BENCH" --local 3 --switch-shm --sizes 4K,1M --iters 2 --warmup 0 --float-add switch --json \
        >"$tmp/json5" 2>/dev/null
    check "ina-bench --switch-shm ok" test "$(grep -c '"ok": *true' "$tmp/json5")" -eq 2
    check "ina-bench --switch-shm uses the rings" grep -q '"transport":"shm"' "$tmp/json5"
    INA_SHM=0 "$BENCH" --local 2 --switch-shm --sizes 4K --iters 2 --warmup 0 --json \
        >"$tmp/json6" 2>/dev/null
    check "INA_SHM=0 keeps ina-bench on UDP" grep -q '"transport":"udp"' "$tmp/json6"
    # several operations in flight over the rings, each verified (issue 18's wrong sums)
    "$BENCH" --local 2 --switch-shm --inflight 4 --dtype int32 --sizes 4K,1M --iters 3 \
        --warmup 0 --json >"$tmp/json7" 2>/dev/null
    check "ina-bench --inflight 4 over rings ok" test "$(grep -c '"ok": *true' "$tmp/json7")" -eq 2
    check "ina-bench --inflight reports it" grep -q '"inflight":4' "$tmp/json7"
else
    echo "skip: no writable /dev/shm with 64 MiB free: ina-bench --switch-shm not checked"
fi

# examples/allreduce.c, 3 ranks, configured only through the environment
# (rank 2 through torchrun's RANK/WORLD_SIZE fallback).
start_switch "$tmp/sw.err"
export INA_JOB=example
INA_RANK=0 INA_WORLD_SIZE=3 "$EX" >"$tmp/ex0" 2>&1 &
p0=$!
INA_RANK=1 INA_WORLD_SIZE=3 "$EX" >"$tmp/ex1" 2>&1 &
p1=$!
RANK=2 WORLD_SIZE=3 "$EX" >"$tmp/ex2" 2>&1
r2=$?
wait $p0; r0=$?
wait $p1; r1=$?
check "example: every rank exits 0" test "$r0$r1$r2" = 000
check "example: rank 0 got the sum" grep -q "rank 0 of 3: grad\[0\] = 3 (want 3): ok" "$tmp/ex0"
check "example: rank 2 (RANK fallback) got the sum" grep -q "rank 2 of 3: .*: ok" "$tmp/ex2"
# Two benchmarks at once on that one switch (--local N --switch ADDR --job NAME).
"$BENCH" --local 2 --switch "127.0.0.1:$port" --job share-a --sizes 64K --iters 3 --warmup 0 \
    --json >"$tmp/share-a" 2>&1 &
pa=$!
"$BENCH" --local 3 --switch "127.0.0.1:$port" --job share-b --sizes 64K --dtype int32 \
    --iters 3 --warmup 0 --json >"$tmp/share-b" 2>&1
rb=$?
wait $pa; ra=$?
check "two ina-bench --local --switch runs share a switch" test "$ra$rb" = 00
check "shared switch: both verified" bash -c "grep -q '\"ok\": *true' '$tmp/share-a' && grep -q '\"ok\": *true' '$tmp/share-b'"
"$BENCH" --local 2 --switch "127.0.0.1:$port" --loss 0.01 >/dev/null 2>&1
check "ina-bench --local --switch with --loss exits 2" test $? -eq 2

# ina-bench --local N tells its workers that they share this host (LOCAL_WORLD_SIZE=N, unless
# set), which the library cannot tell for a switch on a non-loopback address: a namespace whose
# lo also has 10.255.0.1 (root only).
if [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
    local_of() { # [ENV...]: "local_workers" of rank 0's JSON, 3 workers, switch on 10.255.0.1
        unshare --net env "$@" sh -c "ip link set lo up && ip addr add 10.255.0.1/32 dev lo || exit 1
            timeout 60 '$SW' --listen 10.255.0.1:0 --port-file '$tmp/lport' --quiet 2>/dev/null &
            sw=\$!
            for i in \$(seq 100); do [ -s '$tmp/lport' ] && break; sleep 0.05; done
            timeout 60 '$BENCH' --local 3 --switch 10.255.0.1:\$(cat '$tmp/lport') --sizes 4K \
                --iters 2 --warmup 0 --json 2>/dev/null
            kill \$sw; wait \$sw" |
            sed -n 's/.*"local_workers":\([0-9]*\).*/\1/p'
        rm -f "$tmp/lport"
    }
    check "ina-bench --local 3: its workers count 3 to this host" test "$(local_of X_UNUSED=1)" = 3
    check "ina-bench --local 3 keeps a LOCAL_WORLD_SIZE already set" \
        test "$(local_of LOCAL_WORLD_SIZE=5)" = 5
fi
# The switch prints its counters on SIGTERM and exits 0
stop_switch; rc=$?
check "ina-switch exits 0 on SIGTERM" test "$rc" -eq 0
check "ina-switch prints counters" grep -q "completions  *[1-9]" "$tmp/sw.err"
check "ina-switch jobs ended cleanly" grep -q "jobs_ended  *3" "$tmp/sw.err"

finish test_tools
