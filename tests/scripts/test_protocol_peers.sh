#!/usr/bin/env bash
# test_protocol_peers.sh: docs/PROTOCOL.md is enough to write a compatible peer. Each script in
# tests/protocol/ was written from PROTOCOL.md alone (no source of this project read), and speaks
# its part of the wire protocol against this build's daemons (tests/protocol/README.md lists
# them): a worker, admission and the job life-cycle, the float dtypes, shared-memory rings,
# shards and trees, the eBPF dataplane, block-sparse ops, ina-ps and the hot table, MLfabric.
# Each starts its own daemons on loopback, has a deadline, prints "ok - ..." or "FAIL - ..."
# per check, and exits 0 only if every check passed. A change to the code that breaks the
# written protocol fails here; a change to the protocol must change PROTOCOL.md and the peer.
# In an ASan build the mixed jobs' libina rank (a child Python) gets the shared ASan runtime
# in LD_PRELOAD (INA_PEER_PRELOAD), and the daemons run as built.
set -uo pipefail
exec </dev/null
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${INA_PYTHON:-/usr/bin/python3}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, cleanup, ok/bad/check

for need in "$B/bin/ina-switch" "$B/bin/ina-ps" "$B/bin/ina-sched" "$B/lib/libina.so"; do
    [ -e "$need" ] || { echo "FAIL: $need missing (build first)"; exit 1; }
done
if ! "$PY" -c 'import numpy' 2>"$tmp/import.err"; then
    # make test installs it (scripts/deps.sh --test); the mixed jobs' libina rank needs it.
    echo "FAIL: $PY cannot import numpy (scripts/deps.sh --test):"
    cat "$tmp/import.err"
    exit 1
fi
export PYTHONDONTWRITEBYTECODE=1 INA_QUIET=1
unset INA_SWITCH INA_FAULT INA_ONE_ROUND INA_FLOAT_ADD INA_SPARSE INA_FIXED_POINT INA_SECRET_FILE
if ! rt=$(asan_runtime "$B"); then
    echo "SKIP (ASan build): no shared ASan runtime from its compiler for the libina ranks"
    exit 77
fi
if [ -n "$rt" ]; then
    export INA_PEER_PRELOAD=$rt
    echo "ASan build: the libina ranks run with LD_PRELOAD=$rt"
fi

for script in "$SRC"/tests/protocol/peer_*.py; do
    peer=$(basename "$script" .py)
    peer=${peer#peer_}
    log=$tmp/$peer.log
    timeout -k 5 120 "$PY" "$script" --bindir "$B/bin" \
        --libdir "$B/lib" --pythondir "$SRC/python" >"$log" 2>&1
    rc=$?
    cat "$log"
    n=$(grep -c '^ok - ' "$log")
    nf=$(grep -c '^FAIL - ' "$log")
    if [ "$rc" -eq 77 ] && [ "$nf" -eq 0 ]; then
        # A peer that needs what this host lacks (peer_ebpf: root and a build with the eBPF
        # dataplane) says why and exits 77; CI, as root with every package, runs it.
        echo "skip: peer_$peer.py: $(tail -1 "$log")"
    elif [ "$rc" -eq 0 ] && [ "$n" -gt 0 ] && [ "$nf" -eq 0 ]; then
        ok "peer_$peer.py: $n checks of its part of PROTOCOL.md"
    else
        bad "peer_$peer.py: exit status $rc, $n ok, $nf failed"
    fi
done
finish test_protocol_peers
