#!/usr/bin/env bash
# test_systemd.sh: scripts/systemd/ina-switch.service.in, the unit `make install` installs:
#   1. systemd-analyze verify accepts it (its ExecStart pointing at this build's ina-switch);
#   2. its command line, as systemd would run it (the unit's default INA_SWITCH_ARGS, here
#      with a free port), starts a switch that serves a job of 2 workers, verified;
#   3. its KillSignal stops the switch within TimeoutStopSec with exit status 0 (not a
#      failure for Restart=on-failure), its counters on stderr (the journal).
# No systemd-analyze: part 1 SKIPs the whole test with the reason (scripts/deps.sh --test
# installs systemd).
set -uo pipefail
exec </dev/null
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, cleanup, ok/bad/check
IN=$SRC/scripts/systemd/ina-switch.service.in
[ -x "$B/bin/ina-switch" ] || { echo "FAIL: $B/bin/ina-switch missing (build first)"; exit 1; }
command -v systemd-analyze >/dev/null 2>&1 ||
    { echo "SKIP: no systemd-analyze (scripts/deps.sh --test installs systemd)"; exit 77; }

unit=$tmp/ina-switch.service
sed "s|@INA_BINDIR@|$B/bin|g" "$IN" >"$unit"
check "no @...@ left in the configured unit" bash -c "! grep -q '@[A-Z_]*@' '$unit'"
SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$unit" >"$tmp/verify" 2>&1
rc=$?
cat "$tmp/verify"
check "systemd-analyze verify accepts the unit (exit $rc)" [ $rc -eq 0 ]
check "systemd-analyze verify has nothing to say about it" bash -c "! grep -q 'ina-switch.service' '$tmp/verify'"

# The unit's keys, as systemd reads them.
key() { sed -n "s/^$1=//p" "$unit"; }
check "journal logging (StandardError=journal)" [ "$(key StandardError)" = journal ]
check "KillSignal=SIGTERM" [ "$(key KillSignal)" = SIGTERM ]
check "ExecReload sends SIGHUP" [ "$(key ExecReload)" = '/bin/kill -HUP $MAINPID' ]
stop_s=$(key TimeoutStopSec)
default_args=$(key Environment | sed -n 's/^"INA_SWITCH_ARGS=\(.*\)"$/\1/p')
check "default INA_SWITCH_ARGS listen on loopback only ($default_args)" \
    [ "$default_args" = "--listen 127.0.0.1:48864" ]

# 2. ExecStart with the default arguments, the port made free (others may hold 48864).
exec_start=$(key ExecStart)
args=${default_args/127.0.0.1:48864/127.0.0.1:0}
cmdline=${exec_start/\$INA_SWITCH_ARGS/$args --port-file $tmp/port}
echo "ExecStart: $cmdline"
# shellcheck disable=SC2086 # split as systemd splits ExecStart
$cmdline 2>"$tmp/journal" &
swpid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
check "the switch listens" test -s "$tmp/port"
port=$(cat "$tmp/port")
for r in 0 1; do
    timeout 60 "$B/bin/ina-bench" --switch "127.0.0.1:$port" --rank $r --world 2 --job unit \
        --sizes 4K,64K --iters 2 >"$tmp/bench.$r" 2>&1 &
    pids[r]=$!
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
cat "$tmp/bench.0"
check "a job of 2 workers is served and verified" \
    bash -c "[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q '^# all results verified on all ranks' '$tmp/bench.0'"

# 3. systemctl stop: KillSignal, then at most TimeoutStopSec.
t0=$(date +%s)
kill -TERM "$swpid"
for _ in $(seq $((stop_s * 10))); do kill -0 "$swpid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$swpid" 2>/dev/null; then
    bad "the switch did not stop within TimeoutStopSec=$stop_s s"
else
    wait "$swpid"
    rc=$?
    swpid=
    check "SIGTERM: exit status 0 in $(($(date +%s) - t0)) s (got $rc)" [ $rc -eq 0 ]
fi
check "its counters reach the journal (stderr)" grep -q "rx_packets\|drop_" "$tmp/journal"
finish test_systemd
