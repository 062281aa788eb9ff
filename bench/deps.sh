#!/usr/bin/env bash
# deps.sh: install (as root, Debian) the packages bench/compare.sh needs for its peers:
# OpenMPI, Gloo (python3-torch), matplotlib and numpy for the plot, GNU time for peak RSS.
# Prints one line per group: "ok", "installed" or "missing (why)". Never reads stdin.
# Exit status 0 even when a peer could not be installed: compare.sh skips that peer and says so.
# BENCH_SKIP_INSTALL=1 only checks.
set -uo pipefail
exec </dev/null

# group name -> packages
declare -A GROUPS_PKGS=(
    [openmpi]="openmpi-bin libopenmpi-dev"
    [gloo]="python3-torch python3-numpy"
    [plot]="python3-matplotlib python3-numpy"
    [time]="time"
)
ORDER=(time openmpi gloo plot)

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "bench-deps: not a Debian system (no dpkg-query); not installing anything"
    exit 0
fi

missing=()
for g in "${ORDER[@]}"; do
    for p in ${GROUPS_PKGS[$g]}; do
        installed "$p" || missing+=("$p")
    done
done
# De-duplicate.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk 'NF && !seen[$0]++')

if [ ${#missing[@]} -gt 0 ]; then
    if [ "${BENCH_SKIP_INSTALL:-0}" = 1 ]; then
        echo "bench-deps: BENCH_SKIP_INSTALL=1: not installing ${missing[*]}"
    elif [ "$(id -u)" -ne 0 ]; then
        echo "bench-deps: missing ${missing[*]}; as root run:" >&2
        echo "    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${missing[*]}" >&2
    else
        echo "bench-deps: installing ${missing[*]} (python3-torch is large: this can take minutes)"
        timeout 600 apt-get update -q >/dev/null 2>&1 ||
            echo "bench-deps: apt-get update failed; trying the install anyway" >&2
        # All at once first; if that fails (one package unavailable), group by group, so one
        # missing peer does not take the others with it.
        if ! DEBIAN_FRONTEND=noninteractive timeout 1800 apt-get install -y -q "${missing[@]}" \
            >/tmp/bench-deps-apt.log 2>&1; then
            echo "bench-deps: apt-get install of all failed (log /tmp/bench-deps-apt.log); trying group by group" >&2
            for g in "${ORDER[@]}"; do
                # shellcheck disable=SC2086  # a list of package names
                DEBIAN_FRONTEND=noninteractive timeout 1800 apt-get install -y -q ${GROUPS_PKGS[$g]} \
                    >>/tmp/bench-deps-apt.log 2>&1 ||
                    echo "bench-deps: could not install $g (${GROUPS_PKGS[$g]})" >&2
            done
        fi
    fi
fi

for g in "${ORDER[@]}"; do
    miss=()
    for p in ${GROUPS_PKGS[$g]}; do installed "$p" || miss+=("$p"); done
    if [ ${#miss[@]} -eq 0 ]; then
        echo "bench-deps: $g: ok"
    else
        echo "bench-deps: $g: missing (${miss[*]})"
    fi
done
exit 0
