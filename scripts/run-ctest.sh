#!/usr/bin/env bash
# run-ctest.sh BUILD_DIR: run a build's tests serially and insist on ctest's summary line.
# The e2e tests use the network and the machine has 2 cores, so tests run one at a time (-j1).
# The full output is kept in BUILD_DIR/ctest.log. Exits non-zero if any test failed, if no
# tests were found, or if ctest stopped without printing its "N% tests passed" summary.
set -uo pipefail
exec </dev/null

dir=${1:?usage: run-ctest.sh BUILD_DIR [extra ctest args]}
shift
log="$dir/ctest.log"

echo "==> ctest in $dir"
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j1 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

if ! grep -Eq '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log"; then
    echo "run-ctest: no ctest summary line in $log (no tests, or ctest was interrupted)" >&2
    [ "$rc" -ne 0 ] || rc=1
fi
if [ "$rc" -ne 0 ]; then
    echo "run-ctest: FAILED in $dir (ctest exit status $rc)" >&2
else
    echo "run-ctest: all tests passed in $dir"
fi
exit "$rc"
