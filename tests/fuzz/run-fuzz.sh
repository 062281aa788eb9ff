#!/usr/bin/env bash
# run-fuzz.sh BINARY SURFACE SECONDS BUILD_DIR SOURCE_DIR: run one fuzz target for a bounded time.
#
# SURFACE is switch or reply. Replays tests/fuzz/regressions/SURFACE (inputs that once crashed)
# and tests/fuzz/corpus/SURFACE (the seeds), then fuzzes for SECONDS. Both committed directories
# are only read: new inputs go to BUILD_DIR/fuzz-corpus/SURFACE, which persists between runs of
# that build tree. Exits non-zero on a crash, leak, hang, sanitizer report or broken harness
# invariant; the input that did it is then in BUILD_DIR/fuzz-artifacts/SURFACE/.
# Used by ctest (label fuzz) and by `make fuzz`.
set -uo pipefail
exec </dev/null

if [ $# -ne 5 ]; then
    echo "usage: run-fuzz.sh BINARY SURFACE SECONDS BUILD_DIR SOURCE_DIR" >&2
    exit 2
fi
bin=$1 name=$2 secs=$3 build=$4 src=$5

work="$build/fuzz-corpus/$name"
art="$build/fuzz-artifacts/$name"
mkdir -p "$work" "$art" || exit 1
dirs=("$work" "$src/tests/fuzz/corpus/$name")
if [ -d "$src/tests/fuzz/regressions/$name" ]; then
    dirs+=("$src/tests/fuzz/regressions/$name")
fi

# INA_FUZZ_SEED: libFuzzer's -seed. ctest sets a fixed one, so a CI run replays the same
# mutations every time and fails only on a change to the code; `make fuzz` leaves it unset
# (a new random seed each run) to look for new findings.
seed=()
if [ -n "${INA_FUZZ_SEED:-}" ] && [ "${INA_FUZZ_SEED}" != 0 ]; then
    seed=(-seed="$INA_FUZZ_SEED")
fi

# -timeout: one input (a few hundred datagrams) takes milliseconds; seconds mean a hang, on an
# idle host. INA_FUZZ_UNIT_TIMEOUT (ctest sets 60) allows for a host so loaded that an input
# waits seconds for a CPU.
# -max_len: room for records that fill the switch's job table (64 JOINs of 100 bytes).
echo "run-fuzz: $name for ${secs}s over ${dirs[*]}"
"$bin" "${seed[@]}" -max_total_time="$secs" -timeout="${INA_FUZZ_UNIT_TIMEOUT:-10}" \
    -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dirs[@]}"
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "run-fuzz: $name FAILED (exit status $rc). Inputs that did it:" >&2
    ls -l "$art" >&2
    echo "run-fuzz: reproduce with: $bin <input>" >&2
    echo "run-fuzz: once fixed, keep the input as tests/fuzz/regressions/$name/<bug-name>" >&2
fi
exit "$rc"
