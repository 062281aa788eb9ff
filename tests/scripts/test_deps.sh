#!/usr/bin/env bash
# test_deps.sh: scripts/deps.sh says what it checked. With stand-ins for dpkg-query (which
# packages are "installed"), id (not root, so nothing is installed) and apt-get (must not run)
# first on the PATH, it must: report all present only when build and test packages are; name
# missing test packages without failing `make` and `make demo` (no --test); fail with the list
# and the command to run when a needed package is missing.
set -uo pipefail
exec </dev/null
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, ok/bad/check

mkdir -p "$tmp/bin"
# dpkg-query -W -f='${Status}' PKG: installed unless PKG is in $FAKE_MISSING.
cat >"$tmp/bin/dpkg-query" <<'EOF'
#!/bin/sh
for p; do :; done
case " $FAKE_MISSING " in *" $p "*) exit 1 ;; esac
printf 'install ok installed'
EOF
printf '#!/bin/sh\necho 1000\n' >"$tmp/bin/id"
printf '#!/bin/sh\necho "apt-get must not run" >&2\nexit 99\n' >"$tmp/bin/apt-get"
chmod +x "$tmp/bin/"*

deps() { # deps MISSING [ARGS]: run deps.sh; output in $tmp/out, status in $rc
    local missing=$1
    shift
    FAKE_MISSING=$missing PATH="$tmp/bin:$PATH" bash "$SRC/scripts/deps.sh" "$@" >"$tmp/out" 2>&1
    rc=$?
    sed 's/^/    /' "$tmp/out"
}

deps ""
check "all present: exit 0" test "$rc" -eq 0
check "all present: says build and test packages" grep -q "all build and test packages present" "$tmp/out"

deps "python3-torch python3-sklearn"
check "make demo without torch: exit 0 (nothing needs it)" test "$rc" -eq 0
check "make demo without torch: does not claim all packages present" \
    bash -c "! grep -q 'all build and test packages present' '$tmp/out'"
check "make demo without torch: names the missing test packages" \
    grep -q "not installed.*python3-torch python3-sklearn.*make deps-test" "$tmp/out"

deps "python3-torch" --test
check "make test without torch, not root: exit 1" test "$rc" -eq 1
check "make test without torch: names it and the command" \
    bash -c "grep -q 'missing packages: python3-torch' '$tmp/out' && grep -q 'apt-get install.*python3-torch' '$tmp/out'"

deps "cmake"
check "make without cmake, not root: exit 1" test "$rc" -eq 1
check "make without cmake: names it" grep -q "missing packages: cmake" "$tmp/out"
check "apt-get never ran" bash -c "! grep -q 'must not run' '$tmp/out'"

finish test_deps
