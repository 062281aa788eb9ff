#!/usr/bin/env bash
# test_opview_slowloris.sh: the operator view (ina-switch and ina-ps --metrics) answers promptly while 20, then 200, slow clients hold connections open, and counts the ones it drops.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch PS=$B/bin/ina-ps CTL=$B/bin/ina-ctl
# shellcheck source=harness.sh
. "$(dirname "$0")/harness.sh"

# slowloris.py HOST PORT N READY_FILE: keep N connections open to HOST:PORT, each sending
# the start of a request and then one more header byte every second, never the blank line
# that ends it. A connection the server closes is opened again (what a real attacker does).
# READY_FILE is written once all N have connected and sent their first bytes.
cat >"$tmp/slowloris.py" <<'PY'
import os, socket, sys, time
host, port, n, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fresh, started = set(), set()  # connected, nothing sent yet / request begun
def open_one():
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass  # completes later; a send before then fails and the socket is opened again
    fresh.add(s)
def close_one(s):
    fresh.discard(s)
    started.discard(s)
    s.close()
for _ in range(n):
    open_one()
wrote_ready = False
while True:
    for s in list(fresh) + list(started):
        try:
            if s in started and s.recv(4096) == b"":
                close_one(s)  # the server dropped it
                continue
        except BlockingIOError:
            pass
        except OSError:
            close_one(s)
            continue
        try:
            if s in fresh:
                s.send(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
                fresh.discard(s)
                started.add(s)
            else:
                s.send(b"a")
        except BlockingIOError:
            pass
        except OSError:
            close_one(s)
    while len(fresh) + len(started) < n:
        open_one()
    if not wrote_ready:
        with open(ready + ".tmp", "w") as f:
            f.write("%d\n" % len(started))
        os.rename(ready + ".tmp", ready)
        wrote_ready = True
    time.sleep(1)
PY

# ask_ps PORT: GET /counters from ina-ps's view, 5 s deadline; prints its JSON.
ask_ps() {
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/counters" % sys.argv[1], timeout=5).read().decode())' "$1"
}

start_switch "$tmp/sw.err" --metrics 127.0.0.1:0 --metrics-port-file "$tmp/mport"
"$PS" --listen 127.0.0.1:0 --port-file "$tmp/psport" --metrics 127.0.0.1:0 \
    --metrics-port-file "$tmp/psmport" 2>"$tmp/ps.err" &
pspid=$!
bg_pids+=("$pspid")
for _ in $(seq 200); do [ -s "$tmp/mport" ] && [ -s "$tmp/psmport" ] && break; sleep 0.05; done
mport=$(cat "$tmp/mport") psmport=$(cat "$tmp/psmport")
check "switch and ina-ps views up" test -n "$mport" -a -n "$psmport"

# attack N: N slow connections to each view, then the operator's requests, each of which must
# be answered within ina-ctl's deadline (5 s; the server's own per-connection deadline is 2 s,
# so one slow client at a time ahead of it is enough to miss it).
attack() {
    local n=$1 lp=() i
    rm -f "$tmp/ready_sw" "$tmp/ready_ps"
    python3 "$tmp/slowloris.py" 127.0.0.1 "$mport" "$n" "$tmp/ready_sw" & lp+=($!)
    python3 "$tmp/slowloris.py" 127.0.0.1 "$psmport" "$n" "$tmp/ready_ps" & lp+=($!)
    bg_pids+=("${lp[@]}")
    for _ in $(seq 300); do [ -s "$tmp/ready_sw" ] && [ -s "$tmp/ready_ps" ] && break; sleep 0.1; done
    check "$n slow clients connected" test -s "$tmp/ready_sw" -a -s "$tmp/ready_ps"
    sleep 2 # let them trickle: each has sent a few bytes and been dropped or is still open
    for i in 1 2 3; do
        "$CTL" --metrics 127.0.0.1:$mport --timeout 5 counters >"$tmp/ctl.$n.$i" 2>&1
        check "$n slow clients: ina-ctl counters answered ($i of 3)" \
            grep -Eq '^rx_packets +[0-9]+$' "$tmp/ctl.$n.$i"
        grep -Eq '^rx_packets +[0-9]+$' "$tmp/ctl.$n.$i" || head -3 "$tmp/ctl.$n.$i"
        ask_ps "$psmport" >"$tmp/ps.$n.$i" 2>&1
        check "$n slow clients: ina-ps GET /counters answered ($i of 3)" \
            python3 -c "import json,sys; json.load(open(sys.argv[1]))['counters']" "$tmp/ps.$n.$i"
        sleep 1
    done
    kill "${lp[@]}" 2>/dev/null
    wait "${lp[@]}" 2>/dev/null
}
attack 20
attack 200

# The view counts what it did to them: every slow client hit the deadline or was dropped to
# make room for a newer one (200 is more than the view serves at once).
"$CTL" --metrics 127.0.0.1:$mport counters >"$tmp/ctl.final" 2>&1
cat "$tmp/ctl.final" | grep '^http_'
check "switch view: slow clients timed out" grep -Eq '^http_timeouts +[1-9][0-9]*$' "$tmp/ctl.final"
check "switch view: clients dropped for room" grep -Eq '^http_dropped +[1-9][0-9]*$' "$tmp/ctl.final"
ask_ps "$psmport" >"$tmp/ps.final"
check "ina-ps view: timeouts and drops counted" python3 -c "import json,sys
h = json.load(open(sys.argv[1]))['http']
assert h['timeouts'] > 0 and h['dropped'] > 0, h" "$tmp/ps.final"

# One slow client that never stops sending is closed at the request's deadline (2 s from
# connecting), not kept while it trickles: bounded by 10 s here, whatever the load.
python3 - "$mport" >"$tmp/trickle" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.setblocking(False)
t0 = time.monotonic()
s.sendall(b"GET /metrics HTTP/1.0\r\n")
closed = False
while time.monotonic() - t0 < 10:
    try:
        s.sendall(b"X-Slow: a\r\n")
        if s.recv(1, socket.MSG_DONTWAIT) == b"":
            closed = True
            break
    except BlockingIOError:
        pass
    except OSError:
        closed = True
        break
    time.sleep(0.2)
print("closed" if closed else "open", round(time.monotonic() - t0, 1))
PY
cat "$tmp/trickle"
check "a trickling client is closed at its deadline" grep -q '^closed' "$tmp/trickle"
check "still serving after the attacks" bash -c "$CTL --metrics 127.0.0.1:$mport counters >/dev/null"

check "ina-switch exits 0 on SIGTERM" stop_switch
kill -TERM "$pspid"; wait "$pspid"; rc=$?
check "ina-ps exits 0 on SIGTERM" test $rc -eq 0
finish test_opview_slowloris
