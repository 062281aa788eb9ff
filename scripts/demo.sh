#!/usr/bin/env bash
# demo.sh: a short local all-reduce benchmark (4 local workers through ina-switch), float32 then int32.
set -euo pipefail
exec </dev/null

cd "$(dirname "$0")/.."
build_dir=${INA_BUILD_DIR:-build}
bench="$build_dir/bin/ina-bench"

if [ ! -x "$bench" ]; then
    echo "demo: $bench not found; run 'make' first" >&2
    exit 1
fi

status=0
for dtype in float32 int32; do
    echo
    echo "=== demo: ina-bench, 4 local workers, $dtype, sizes 4K,1M,16M, 5 iterations (+1 warmup) ==="
    if "$bench" --local 4 --sizes 4K,1M,16M --dtype "$dtype" --iters 5 --warmup 1; then
        echo "=== demo: $dtype OK ==="
    else
        rc=$?
        echo "=== demo: $dtype FAILED (exit status $rc) ===" >&2
        status=1
    fi
done

echo
if [ "$status" -eq 0 ]; then
    echo "demo: both runs succeeded"
else
    echo "demo: at least one run failed" >&2
fi
exit "$status"
