# shellcheck shell=bash
# harness.sh: sourced by the script tests (tests/scripts/test_*.sh); not a test itself.
# Gives: $tmp, a temporary directory removed on exit, with any switch started by
# start_switch and any process in bg_pids killed; ok/bad/check, which count passes and
# failures; wait_for; finish NAME.
tmp=$(mktemp -d)
# The switch's threads and the workers' lanes default to counts chosen from the host's cores
# (INA_AUTO_CORES replaces the count); the script tests count jobs as on a 2-core host.
export INA_AUTO_CORES=${INA_AUTO_CORES:-2}
swpid=
bg_pids=() # other processes a test starts in the background: killed on exit too
cleanup() {
    local p
    for p in "$swpid" "${bg_pids[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

# start_switch LOG [ina-switch options]: run $SW on a free loopback port (at most 10 s to
# come up), its stderr to LOG. Sets swpid and port, and exports INA_SWITCH=127.0.0.1:port.
start_switch() {
    local log=$1
    shift
    rm -f "$tmp/port"
    "$SW" --listen 127.0.0.1:0 --port-file "$tmp/port" "$@" 2>"$log" &
    swpid=$!
    for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
    port=$(cat "$tmp/port")
    export INA_SWITCH=127.0.0.1:$port
}

# stop_switch: SIGTERM (the switch prints its counters and exits 0); returns its status.
stop_switch() {
    kill -TERM "$swpid"
    wait "$swpid"
    local rc=$?
    swpid=
    return $rc
}

# wait_for SECONDS CMD...: run CMD every 0.1 s until it succeeds or the deadline passes.
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}

# finish NAME: the summary line; exit status 0 only if nothing failed.
finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

# asan_runtime BUILD: for an ASan build (INA_SANITIZE=ON in BUILD/CMakeCache.txt), print the
# shared ASan runtime of its compiler, which a Python process needs in LD_PRELOAD to load that
# build's libina.so. Prints nothing for other builds. Status 1: an ASan build whose compiler
# names no shared runtime.
asan_runtime() {
    grep -q '^INA_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null || return 0
    local cc rt
    cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt")
    rt=$("${cc:-clang}" -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)
    [ -n "$rt" ] && [ -f "$rt" ] || return 1
    echo "$rt"
}
