#!/usr/bin/env bash
# test_docs.sh: the documentation agrees with the code. tests/docs/check_docs.py compiles
# every C block of README.md, docs/**/*.md and the man pages' examples (and runs those with
# main() as one-rank jobs), runs the shell blocks marked `sh run` as written, compares sample
# outputs, and checks the tools' options, paths, make targets, INA_* names, links and the
# switch's log events that the documents name. The conventions are in docs/README.md.
# Runs in private network and PID namespaces (root, or an unprivileged user namespace); where
# neither can be made, everything but the run blocks is checked and the test skips (77).
set -uo pipefail
exec </dev/null
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, removed on exit

for need in "$B/bin/ina-switch" "$B/lib/libina.so"; do
    [ -e "$need" ] || { echo "FAIL: $need missing (build first)"; exit 1; }
done
timeout -k 10 300 /usr/bin/python3 "$SRC/tests/docs/check_docs.py" --src "$SRC" --build "$B" \
    --scratch "$tmp/scratch"
