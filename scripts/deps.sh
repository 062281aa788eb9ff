#!/usr/bin/env bash
# deps.sh: make sure the Debian packages needed to build ina (and with --test, to test it) are
# installed. All present: prints one line naming what was checked, exits 0. Missing as root:
# installs them (apt-get). Missing and not root: prints the list and the command to run, exits
# 1. Without --test, test-only packages that are missing are named too (`make deps-test`
# installs them), but nothing waits on them. Never reads stdin.
set -euo pipefail
exec </dev/null

# libclang-rt-14-dev holds clang 14's sanitizer runtimes (libclang_rt.asan etc.).
PACKAGES=(cmake clang libclang-rt-14-dev pkg-config iproute2 nftables python3)
# `deps.sh --test` adds what only the test suite needs: the PyTorch/DDP and MPI integrations
# are tested against Debian's torch, numpy, scikit-learn (the digits dataset) and OpenMPI.
TEST_PACKAGES=(python3-torch python3-numpy python3-sklearn openmpi-bin libopenmpi-dev)
WHAT="build"
if [ "${1:-}" = --test ]; then
    PACKAGES+=("${TEST_PACKAGES[@]}")
    WHAT="build and test"
fi

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    # Not Debian: fall back to checking for the commands themselves.
    missing_cmds=()
    for c in gcc make cmake clang pkg-config ip nft python3; do
        command -v "$c" >/dev/null 2>&1 || missing_cmds+=("$c")
    done
    if [ ${#missing_cmds[@]} -eq 0 ]; then
        echo "deps: not a Debian system (no dpkg-query); all needed commands found"
        exit 0
    fi
    echo "deps: not a Debian system (no dpkg-query); missing commands: ${missing_cmds[*]}" >&2
    exit 1
fi

missing=()
# build-essential, or at least gcc + make.
if ! installed build-essential && ! { installed gcc && installed make; }; then
    missing+=(build-essential)
fi
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done

# What is present, in words. Without --test, the test-only packages are looked at too, so that
# "present" never suggests that `make test` (or the Python and MPI parts) will work when they
# are missing.
report_present() {
    local absent=()
    if [ "$WHAT" = build ]; then
        for p in "${TEST_PACKAGES[@]}"; do
            installed "$p" || absent+=("$p")
        done
    fi
    if [ ${#absent[@]} -eq 0 ]; then
        echo "deps: all build and test packages present"
    else
        echo "deps: all build packages present; not installed, needed only by make test and the Python and MPI integrations: ${absent[*]} (make deps-test installs them)"
    fi
}

if [ ${#missing[@]} -eq 0 ]; then
    report_present
    exit 0
fi

install_cmd="DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${missing[*]}"

if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing packages: ${missing[*]}" >&2
    echo "deps: install them as root with:" >&2
    echo "    apt-get update && $install_cmd" >&2
    exit 1
fi

echo "deps: installing missing packages: ${missing[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

still=()
for p in "${missing[@]}"; do
    installed "$p" || still+=("$p")
done
if [ ${#still[@]} -ne 0 ]; then
    echo "deps: still missing after apt-get install: ${still[*]}" >&2
    exit 1
fi
echo "deps: installed ${missing[*]}"
report_present
