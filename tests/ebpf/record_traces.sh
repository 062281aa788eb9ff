#!/usr/bin/env bash
# record_traces.sh: record the switch traces that tests/ebpf/test_ebpf_diff.c replays through
# both dataplanes (tests/ebpf/traces/*.inatrace), from real libina workers (ina-bench) against
# ina-switch --record on loopback. Run it again only to refresh them (their content is random:
# nonces, sessions, data); the test replays whatever is there.
#   int-ops     N=3, int32 SUM, MAX, MIN, 4 B..16 KiB
#   float       N=3, float32 SUM (one round, op 3, and two rounds), float16 AVG, float32 MAX
#   faults      N=4, int32 and float32 with 3% of datagrams dropped, 5% duplicated and 5%
#               reordered each way (--fault-rx/--fault-tx): retransmissions, duplicates of
#               pending and complete rounds, stale copies
# k = 64 elements (264-byte datagrams), W = 8: many rounds per slot, small files.
# Usage: bash tests/ebpf/record_traces.sh [BUILD_DIR] (default build); port 47510 on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
OUT=tests/ebpf/traces
PORT=${INA_TRACE_PORT:-47510}
mkdir -p "$OUT"

record() { # NAME WORLD SWITCH_ARGS -- BENCH_RUNS (each a quoted ina-bench argument string)
    local name=$1 world=$2 swargs=$3
    shift 3
    "$B/bin/ina-switch" --listen "127.0.0.1:$PORT" --max-elems 64 --slots 64 --quiet \
        --record "$OUT/$name.inatrace" $swargs 2>/dev/null &
    local sw=$!
    sleep 0.3
    local run
    for run in "$@"; do
        # shellcheck disable=SC2086 # the runs are word lists on purpose
        timeout 60 "$B/bin/ina-bench" --local "$world" --switch "127.0.0.1:$PORT" --elems 64 \
            --window 8 --warmup 0 --json $run >/dev/null
    done
    kill -TERM "$sw"
    wait "$sw" || true
    echo "$name: $(stat -c %s "$OUT/$name.inatrace") bytes"
}

record int-ops 3 "" "--dtype int32 --sizes 4,1K,16K --iters 2" \
    "--dtype int32 --op max --sizes 4,4K --iters 2" "--dtype int32 --op min --sizes 100,4K --iters 2"
record float 3 "" "--dtype float32 --sizes 256,1K,8K --iters 2" \
    "--dtype float16 --op avg --sizes 2K --iters 2" "--dtype float32 --op max --sizes 1K --iters 2"
record faults 4 "--fault-rx drop=0.03,dup=0.05,reorder=0.05,seed=7 --fault-tx drop=0.03,dup=0.05,seed=8" \
    "--dtype int32 --sizes 4K,8K --iters 2 --timeout-ms 20000" \
    "--dtype float32 --sizes 2K,4K --iters 2 --timeout-ms 20000"
