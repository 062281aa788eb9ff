#!/usr/bin/env bash
# test_metrics.sh: ina-switch --metrics serves valid Prometheus text and JSON; ina-ctl lists, shows and aborts a running job.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch BENCH=$B/bin/ina-bench CTL=$B/bin/ina-ctl
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds or the deadline passes
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}
fetch() { # fetch PATH -> stdout (python3 urllib, 5 s deadline)
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")' \
        "http://127.0.0.1:$mport$1"
}

check "ina-ctl --help" bash -c "$CTL --help | grep -q -- --metrics"
"$CTL" bogus >/dev/null 2>&1; check "ina-ctl bad command exits 2" test $? -eq 2
# Nothing listens on this port (bound then closed by the kernel's choice): a clear error, no hang.
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$SECONDS
"$CTL" --metrics 127.0.0.1:$dead --timeout 2 jobs >/dev/null 2>"$tmp/ctl.err"; rc=$?
check "ina-ctl: unreachable switch exits 1" test $rc -eq 1
check "ina-ctl: unreachable switch says so" grep -q "cannot reach the switch" "$tmp/ctl.err"
check "ina-ctl: unreachable switch within the deadline" test $((SECONDS - start)) -le 4
"$SW" --metrics-port-file "$tmp/x" >/dev/null 2>&1; check "--metrics-port-file alone exits 2" test $? -eq 2
"$SW" --secret-file /nonexistent/ina-secret >/dev/null 2>&1; check "unreadable --secret-file exits 2" test $? -eq 2
"$SW" --log-level loud >/dev/null 2>&1; check "bad --log-level exits 2" test $? -eq 2

"$SW" --listen 127.0.0.1:0 --port-file "$tmp/port" --metrics 127.0.0.1:0 \
    --metrics-port-file "$tmp/mport" --log-format json 2>"$tmp/sw.err" &
swpid=$!; pids+=("$swpid")
check "switch and metrics ports written" wait_for 10 test -s "$tmp/port" -a -s "$tmp/mport"
port=$(cat "$tmp/port") mport=$(cat "$tmp/mport")

# A short run, to completion, so the totals count something.
for r in 0 1; do
    timeout 60 "$BENCH" --switch 127.0.0.1:$port --rank $r --world 2 --job short --sizes 64K \
        --iters 3 --warmup 0 >"$tmp/short$r" 2>&1 &
    pids+=($!)
done
wait "${pids[-1]}" "${pids[-2]}"; rc=$?
check "short bench ran" test $rc -eq 0
# The totals are published every 100 ms: wait for the finished job to show.
check "metrics: job ended is published" wait_for 10 bash -c \
    "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:$mport/metrics\", timeout=5).read().decode())' | grep -q '^ina_switch_jobs_ended_total 1$'"
fetch /metrics >"$tmp/metrics"
check "metrics: fetched" test -s "$tmp/metrics"

# A small parser of the Prometheus text format 0.0.4: every sample line is
# name{labels} value, every family has HELP and TYPE before its samples, and
# each family's samples are contiguous.
cat >"$tmp/promcheck.py" <<'PY'
import re, sys
name_re = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
label_re = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
sample_re = re.compile(r'^(' + name_re + r')(\{(' + label_re + r'(,' + label_re + r')*)?\})? '
                       r'(-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$')
helps, types, seen, closed, last, errors, samples = {}, {}, set(), set(), None, [], 0
for n, line in enumerate(open(sys.argv[1]).read().split('\n'), 1):
    if line == '':
        continue
    m = re.match(r'^# (HELP|TYPE) (' + name_re + r') (.+)$', line)
    if m:
        kind, name, rest = m.groups()
        d = helps if kind == 'HELP' else types
        if name in d: errors.append(f'{n}: second {kind} for {name}')
        if kind == 'TYPE' and rest not in ('counter', 'gauge', 'histogram', 'summary', 'untyped'):
            errors.append(f'{n}: bad type {rest}')
        if name in seen: errors.append(f'{n}: {kind} after samples of {name}')
        d[name] = rest
        continue
    if line.startswith('#'):
        continue
    m = sample_re.match(line)
    if not m:
        errors.append(f'{n}: not a sample line: {line!r}'); continue
    samples += 1
    name = m.group(1)
    if name not in types or name not in helps: errors.append(f'{n}: {name} without HELP/TYPE')
    if name != last:
        if name in closed: errors.append(f'{n}: samples of {name} not contiguous')
        if last: closed.add(last)
        last = name
    seen.add(name)
    if types.get(name) == 'counter' and float(m.group(5)) < 0: errors.append(f'{n}: negative counter')
for e in errors[:20]: print(e)
print(f'{samples} samples, {len(types)} families, {len(errors)} errors')
sys.exit(1 if errors or samples == 0 else 0)
PY
check "metrics: valid Prometheus text format" python3 "$tmp/promcheck.py" "$tmp/metrics"
check "metrics: rx counted" grep -Eq '^ina_switch_rx_packets_total [1-9]' "$tmp/metrics"
check "metrics: completions counted" grep -Eq '^ina_switch_completions_total [1-9]' "$tmp/metrics"
check "metrics: drops by cause (AUTH listed)" grep -q '^ina_switch_drops_total{cause="AUTH"} 0$' "$tmp/metrics"
check "counters JSON parses" bash -c "python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"counters\"][\"jobs_started\"] == 1' <<<\"\$(python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:$mport/counters\", timeout=5).read().decode())')\""
"$CTL" --metrics 127.0.0.1:$mport counters >"$tmp/ctl.counters" 2>&1
check "ina-ctl counters" grep -Eq '^jobs_ended +1$' "$tmp/ctl.counters"

# A long run in the background: ina-ctl sees it, then aborts it.
for r in 0 1; do
    timeout 120 "$BENCH" --switch 127.0.0.1:$port --rank $r --world 2 --job longrun \
        --sizes 64K --iters 1000000 --warmup 0 >"$tmp/long$r" 2>&1 &
    pids+=($!)
done
l0=${pids[-2]} l1=${pids[-1]}
check "ina-ctl jobs shows the running job" wait_for 15 bash -c \
    "$CTL --metrics 127.0.0.1:$mport jobs | grep -Eq '^ +[0-9]+  longrun +0 +2 +2 +[0-9]+ active'"
"$CTL" --metrics 127.0.0.1:$mport jobs >"$tmp/jobs" 2>&1
cat "$tmp/jobs"
id=$(awk '$2 == "longrun" { print $1 }' "$tmp/jobs")
check "job id found" test -n "$id"
check "ina-ctl job ID: packets flow" wait_for 10 bash -c \
    "$CTL --metrics 127.0.0.1:$mport job $id | grep -Eq '^  rx_packets +[1-9]'"
"$CTL" --metrics 127.0.0.1:$mport job "$id" >"$tmp/job" 2>&1
cat "$tmp/job"
check "ina-ctl job ID: per-worker rows" grep -Eq '^ +1 +yes +[0-9]+ +[0-9]+$' "$tmp/job"
check "ina-ctl job ID: retransmits line" grep -q 'retransmits' "$tmp/job"
"$CTL" --json --metrics 127.0.0.1:$mport jobs >"$tmp/jobs.json"
check "ina-ctl --json jobs is JSON with the job" python3 -c "import json; d=json.load(open('$tmp/jobs.json')); assert any(j['name']=='longrun' and len(j['workers'])==2 for j in d['jobs'])"
"$CTL" --metrics 127.0.0.1:$mport job 999 >/dev/null 2>&1; check "ina-ctl job: unknown id exits 1" test $? -eq 1
"$CTL" --metrics 127.0.0.1:$mport abort 999 >/dev/null 2>&1; check "ina-ctl abort: unknown id exits 1" test $? -eq 1
"$CTL" --metrics 127.0.0.1:$mport abort "$id" >"$tmp/abort" 2>&1
check "ina-ctl abort ID exits 0" test $? -eq 0
wait "$l0"; r0=$?
wait "$l1"; r1=$?
check "aborted workers exit nonzero" test $r0 -ne 0 -a $r1 -ne 0 -a $r0 -ne 124 -a $r1 -ne 124
check "aborted workers say INA_ERR_ABORTED" grep -q INA_ERR_ABORTED "$tmp/long0"
check "aborted workers (rank 1) say INA_ERR_ABORTED" grep -q INA_ERR_ABORTED "$tmp/long1"
check "metrics: abort counted" wait_for 10 bash -c \
    "$CTL --metrics 127.0.0.1:$mport counters | grep -Eq '^jobs_aborted +1$'"

# Malformed and oversized requests are answered or dropped; the switch keeps serving.
python3 - "$mport" >"$tmp/bad" <<'PY'
import socket, sys
def ask(data):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(data)
    try:
        r = s.recv(200).decode(errors="replace").split("\r\n")[0]
    except socket.timeout:
        r = "timeout"
    s.close()
    return r
print(ask(b"GET /nope HTTP/1.0\r\n\r\n"))
print(ask(b"DELETE /metrics HTTP/1.0\r\n\r\n"))
print(ask(b"GET /" + b"a" * 8000 + b" HTTP/1.0\r\n\r\n"))
PY
check "HTTP: unknown path 404" grep -q "^HTTP/1.0 404" "$tmp/bad"
check "HTTP: wrong method 405" grep -q "^HTTP/1.0 405" "$tmp/bad"
check "HTTP: oversized request 431" grep -q "^HTTP/1.0 431" "$tmp/bad"
check "still serving after bad requests" bash -c "$CTL --metrics 127.0.0.1:$mport counters >/dev/null"

kill -TERM "$swpid"; wait "$swpid"; rc=$?
check "ina-switch exits 0 on SIGTERM" test $rc -eq 0
check "json log lines" grep -q '^{"ts":"[0-9T:.-]*Z","level":"info","event":"job_started","job":[0-9]*,"name":"longrun"' "$tmp/sw.err"
check "log: operator abort logged" grep -q '"event":"operator_abort"' "$tmp/sw.err"
check "log: the aborted job says why: operator_abort, not rank_aborted" \
    grep -q '"event":"job_aborted".*"reason":"operator_abort"' "$tmp/sw.err"

echo "test_metrics: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
