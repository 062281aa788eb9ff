#!/usr/bin/env bash
# test_opview_auth.sh: with --secret-file, the operator view hands out no job details and takes no abort or evict without proof of the secret; ina-ctl --secret-file (INA_SECRET_FILE) gives it; a signed act plays once; SIGHUP's new secret applies; without a secret nothing changes.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch BENCH=$B/bin/ina-bench CTL=$B/bin/ina-ctl
# shellcheck source=harness.sh
. "$(dirname "$0")/harness.sh"
unset INA_SECRET_FILE

# req METHOD PATH [AUTHORIZATION]: one request to the view; prints "STATUS BODY".
cat >"$tmp/req.py" <<'PY'
import sys, urllib.error, urllib.request
port, method, path = sys.argv[1:4]
r = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), method=method,
                           data=b"" if method == "POST" else None)
if len(sys.argv) > 4:
    r.add_header("Authorization", sys.argv[4])
try:
    with urllib.request.urlopen(r, timeout=5) as a:
        print(a.status, a.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
req() { python3 "$tmp/req.py" "$mport" "$@"; }

printf 's3cret\n' >"$tmp/secret"
printf 'not the secret\n' >"$tmp/wrong"
start_switch "$tmp/sw.err" --secret-file "$tmp/secret" --metrics 127.0.0.1:0 \
    --metrics-port-file "$tmp/mport"
for _ in $(seq 200); do [ -s "$tmp/mport" ] && break; sleep 0.05; done
mport=$(cat "$tmp/mport")
check "switch with a secret and its view up" test -n "$mport"

# A job that knows the secret runs in the background.
for r in 0 1; do
    INA_SECRET_FILE=$tmp/secret timeout 120 "$BENCH" --switch "$INA_SWITCH" --rank $r --world 2 \
        --job guarded --sizes 64K --iters 1000000 --warmup 0 >"$tmp/bench$r" 2>&1 &
    bg_pids+=($!)
done
b0=${bg_pids[-2]} b1=${bg_pids[-1]}
check "ina-ctl --secret-file jobs lists the running job" wait_for 15 bash -c \
    "$CTL --metrics 127.0.0.1:$mport --secret-file $tmp/secret jobs | grep -Eq '^ +[0-9]+  guarded +0 +2 +2 +[0-9]+ active'"
INA_SECRET_FILE=$tmp/secret "$CTL" --metrics 127.0.0.1:$mport jobs >"$tmp/jobs" 2>&1
check "INA_SECRET_FILE does the same" grep -q guarded "$tmp/jobs"
id=$(awk '$2 == "guarded" { print $1 }' "$tmp/jobs")
check "job id found" test -n "$id"

# Without proof: no job id, name, session, address or window.
"$CTL" --metrics 127.0.0.1:$mport jobs >"$tmp/nojobs" 2>&1; rc=$?
check "ina-ctl jobs without the secret exits 1" test $rc -eq 1
check "... and says to pass --secret-file" grep -q -- "--secret-file" "$tmp/nojobs"
check "... and shows no job" bash -c "! grep -q guarded '$tmp/nojobs'"
"$CTL" --metrics 127.0.0.1:$mport job "$id" >/dev/null 2>&1
check "ina-ctl job ID without the secret exits 1" test $? -eq 1
"$CTL" --metrics 127.0.0.1:$mport --json jobs >"$tmp/nojobs.json" 2>/dev/null
check "ina-ctl --json jobs without the secret exits 1" test $? -eq 1
req GET /jobs >"$tmp/get_jobs"
check "GET /jobs without proof: 401" grep -q '^401 ' "$tmp/get_jobs"
check "... hides the job" bash -c "! grep -Eq 'guarded|session|workers' '$tmp/get_jobs'"
req GET /jobs "Bearer 0000000000000000000000000000000000000000000000000000000000000000" \
    >"$tmp/get_jobs_bad"
check "GET /jobs with a wrong token: 401" grep -q '^401 .*wrong proof' "$tmp/get_jobs_bad"
req GET /metrics >"$tmp/metrics_open"
check "GET /metrics without proof: 200, totals" grep -q '^ina_switch_rx_packets_total [1-9]' "$tmp/metrics_open"
check "... says the details are withheld" grep -q '^ina_switch_view_details 0$' "$tmp/metrics_open"
check "... and has no per-job or per-rank series" bash -c "! grep -Eq '^ina_(job|worker)_|guarded' '$tmp/metrics_open'"
check "GET /counters without proof: 200" grep -q '^200 .*"jobs_started":1' <(req GET /counters)

# The read token reads (what a Prometheus scraper sends), and only reads.
token=$("$CTL" --secret-file "$tmp/secret" read-token)
check "ina-ctl read-token prints 64 hex digits" bash -c "[[ '$token' =~ ^[0-9a-f]{64}$ ]]"
# Its documented recipe (docs/TOOLS.md), from the secret alone:
k=$(printf 'ina operator v1' | openssl dgst -sha256 -mac HMAC -macopt key:s3cret | awk '{print $NF}')
want=$(printf 'read' | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$k" | awk '{print $NF}')
check "the read token is HMAC(HMAC(secret, 'ina operator v1'), 'read')" test "$token" = "$want"
req GET /metrics "Bearer $token" >"$tmp/metrics_read"
check "GET /metrics with the read token: per-job series" grep -q "^ina_job_members{id=\"$id\",job=\"guarded\"" "$tmp/metrics_read"
check "GET /jobs with the read token: 200 and the job" grep -q '^200 .*"name":"guarded"' <(req GET /jobs "Bearer $token")
req POST "/jobs/$id/abort" "Bearer $token" >"$tmp/abort_bearer"
check "POST abort with the read token: 401" grep -q '^401 .*only reads' "$tmp/abort_bearer"

# Acts without proof, or with the wrong secret, are refused and change nothing.
"$CTL" --metrics 127.0.0.1:$mport abort "$id" >"$tmp/abort_none" 2>&1; rc=$?
check "ina-ctl abort without the secret exits 1" test $rc -eq 1
check "... HTTP 401" grep -q "HTTP 401" "$tmp/abort_none"
"$CTL" --metrics 127.0.0.1:$mport evict "$id" >"$tmp/evict_none" 2>&1; rc=$?
check "ina-ctl evict without the secret exits 1 (401)" bash -c "[ $rc -eq 1 ] && grep -q 'HTTP 401' '$tmp/evict_none'"
"$CTL" --metrics 127.0.0.1:$mport --secret-file "$tmp/wrong" evict "$id" >"$tmp/evict_wrong" 2>&1
check "ina-ctl evict with another secret exits 1" test $? -eq 1
check "... says so" grep -q "another secret" "$tmp/evict_wrong"
req POST "/jobs/$id/evict" >"$tmp/evict_raw"
check "POST evict without proof: 401" grep -q '^401 ' "$tmp/evict_raw"
sleep 0.5 # a request the view had taken would act within 100 ms
"$CTL" --metrics 127.0.0.1:$mport --secret-file "$tmp/secret" job "$id" >"$tmp/still" 2>&1
check "the job still runs, on the switch" grep -Eq '^job [0-9]+ "guarded" lane 0: active' "$tmp/still"
check "refused acts are logged" grep -Eq 'event=operator_refused path=/jobs/[0-9]+/(abort|evict) reason=(none|read) peer=127.0.0.1:' "$tmp/sw.err"

# A signed act, written from the description in docs/TOOLS.md: it acts once; the same
# request played again is refused (a job id that does not exist, so nothing is ended).
cat >"$tmp/signed.py" <<'PY'
import hashlib, hmac, json, sys, urllib.error, urllib.request
port, secret, path = sys.argv[1], open(sys.argv[2], "rb").read().rstrip(b"\r\n"), sys.argv[3]
base = "http://127.0.0.1:%s" % port
k = hmac.new(secret, b"ina operator v1", hashlib.sha256).digest()
c = json.load(urllib.request.urlopen(base + "/challenge", timeout=5))["challenge"]
mac = hmac.new(k, ("INA-HMAC-SHA256\nPOST\n%s\n%s" % (path, c)).encode(), hashlib.sha256).hexdigest()
auth = "INA-HMAC-SHA256 c=%s,mac=%s" % (c, mac)
for attempt in ("first", "replayed"):
    r = urllib.request.Request(base + path, method="POST", data=b"")
    r.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(r, timeout=5) as a:
            print(attempt, a.status, a.read().decode().strip())
    except urllib.error.HTTPError as e:
        print(attempt, e.code, e.read().decode().strip())
PY
python3 "$tmp/signed.py" "$mport" "$tmp/secret" /jobs/999/abort >"$tmp/signed"
cat "$tmp/signed"
check "a signed act is taken (no such job: 404)" grep -q '^first 404 ' "$tmp/signed"
check "the same signed act played again: 401" grep -q '^replayed 401 .*used already' "$tmp/signed"

# With the secret, ina-ctl acts.
"$CTL" --metrics 127.0.0.1:$mport --secret-file "$tmp/secret" abort "$id" >"$tmp/abort" 2>&1
check "ina-ctl --secret-file abort exits 0" test $? -eq 0
wait "$b0"; r0=$?
wait "$b1"; r1=$?
check "aborted workers exit nonzero" test $r0 -ne 0 -a $r1 -ne 0 -a $r0 -ne 124 -a $r1 -ne 124
check "aborted workers say INA_ERR_ABORTED" grep -q INA_ERR_ABORTED "$tmp/bench0"
check "accepted acts are logged with their peer" grep -q 'event=abort_requested .*peer=127.0.0.1:' "$tmp/sw.err"

# SIGHUP: the new secret is the view's too (within a publish period).
printf 'new secret\n' >"$tmp/secret2"
cp "$tmp/secret" "$tmp/secret1"
cp "$tmp/secret2" "$tmp/secret" # the switch's --secret-file
kill -HUP "$swpid"
check "after SIGHUP the new secret reads" wait_for 10 "$CTL" --metrics 127.0.0.1:$mport \
    --secret-file "$tmp/secret2" jobs
"$CTL" --metrics 127.0.0.1:$mport --secret-file "$tmp/secret1" jobs >/dev/null 2>&1
check "... and the old one no longer does" test $? -eq 1
"$CTL" --metrics 127.0.0.1:$mport counters >"$tmp/counters" 2>&1
check "ina-ctl counters needs no secret" grep -Eq '^jobs_aborted +1$' "$tmp/counters"
check "refusals counted" grep -Eq '^http_unauthorized +[1-9][0-9]*$' "$tmp/counters"
check "ina-switch exits 0 on SIGTERM" stop_switch

# Without a secret nothing changes: everything is open to whoever reaches the view, and an
# ina-ctl that has a secret works all the same.
start_switch "$tmp/sw2.err" --metrics 127.0.0.1:0 --metrics-port-file "$tmp/mport2"
for _ in $(seq 200); do [ -s "$tmp/mport2" ] && break; sleep 0.05; done
mport=$(cat "$tmp/mport2")
check "no secret: GET /jobs 200" grep -q '^200 {"jobs":' <(req GET /jobs)
check "no secret: /metrics says details are in" grep -q '^ina_switch_view_details 1$' <(req GET /metrics)
check "no secret: ina-ctl jobs" "$CTL" --metrics 127.0.0.1:$mport jobs
check "no secret: ina-ctl --secret-file jobs" "$CTL" --metrics 127.0.0.1:$mport --secret-file "$tmp/secret" jobs
"$CTL" --metrics 127.0.0.1:$mport abort 999 >"$tmp/abort999" 2>&1
check "no secret: abort of an unknown job is 404, not 401" grep -q 'HTTP 404' "$tmp/abort999"
check "ina-ctl read-token without a secret: usage error" bash -c "$CTL read-token; [ \$? -eq 2 ]"
check "ina-ctl: unreadable --secret-file exits 2" bash -c "$CTL --secret-file /nonexistent counters; [ \$? -eq 2 ]"
check "ina-switch exits 0 on SIGTERM" stop_switch

finish test_opview_auth
