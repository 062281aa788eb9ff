#!/usr/bin/env bash
# test_ebpf_e2e.sh: ina-switch --dataplane ebpf end to end, with real libina workers.
#  1. What it refuses, and how: no --iface, an interface that is not there, options the program
#     does not implement (--shm, --threads, --fault-rx, --parent), --multicast on lo, not root
#     (setpriv), a child switch's TREE_JOIN.
#  2. A representative subset of the e2e suite (tests/e2e/), each test in a network namespace of
#     its own with INA_TEST_DATAPLANE=ebpf: every switch it starts runs the program on that
#     namespace's lo (harness.h). allreduce (N = 1..8 and 64, k = 64..2048, int32 and float32,
#     one and two rounds), types (every dtype x op, float adds not offered), nonfinite, hostile
#     (forged and malformed datagrams), multitenant (jobs side by side, admission), failures
#     (switch killed, worker killed, restart, disagreeing ranks: MISMATCH through the program's
#     event ring), lifecycle, inflight (the paths without rings, threads or float adds), lanes
#     (1-4 lanes a worker, each lane a job of the program's; a lane's failure ends the rest),
#     evict (operator eviction: the program's bound), idle (its DATA keeps the job's idle timer).
#     (The ASan build: allreduce, types, hostile and failures only.)
#     Left out: join, secret (control plane only: nothing there changes), shm,
#     faults (switch-side injection acts on the socket; loss is item 4's).
#  3. The interface: on a veth pair with UDP GSO on in the workers' namespace, every datagram
#     reaches the program (the pass-through XDP makes the peer split GSO trains: passed_up 0);
#     with --multicast, each finished sum leaves the program once, to the job's group, and the
#     workers get it there (tx_packets = completions + results_resent, few resent);
#     a switch killed with SIGKILL leaves no program on the interface (TCX), so a userspace
#     switch on the same port serves the next job.
#  4. The loss suite (test_netns_loss.sh: 4 workers, bridge, 1% loss both ways) against it,
#     smaller (4 sizes x 40 iterations), by unicast and with --multicast (lost multicast sums
#     come back by unicast), in the gcc build only (CI time; the ASan build would only re-run
#     the same kernel program with slower workers).
# Needs root (namespaces, BPF); without it, or where the kernel will not load the program, or in
# an ina-switch built without the eBPF dataplane: SKIP, exit 77.
# Environment: INA_BUILD_DIR (default build), INA_SANITIZE (ON: the smaller e2e subset, item 4
# skipped).
set -uo pipefail
exec </dev/null
cd "${INA_SOURCE_DIR:-$(dirname "$0")/../..}" || exit 1
source tests/scripts/harness.sh

B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch BENCH=$B/bin/ina-bench
skip() {
    echo "SKIP: test_ebpf_e2e: $1"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, BPF programs)"
unshare --net true 2>/dev/null || skip "cannot create a network namespace here"
[ -x "$SW" ] && [ -x "$BENCH" ] || { echo "FAIL: build first ($SW, $BENCH)"; exit 1; }

# Can this switch load its program here at all? (Built without it, or a kernel without BPF.)
probe=$(unshare --net sh -c "ip link set lo up; timeout 20 '$SW' --dataplane ebpf --iface lo \
    --listen 127.0.0.1:0 --port-file '$tmp/probe' --quiet & p=\$!; \
    for i in \$(seq 100); do [ -s '$tmp/probe' ] && break; kill -0 \$p 2>/dev/null || break; \
    sleep 0.05; done; kill -TERM \$p 2>/dev/null; wait \$p" 2>&1)
if [ ! -s "$tmp/probe" ]; then
    case $probe in
    *"built without the eBPF dataplane"* | *"not permitted"* | *"Operation not permitted"* | \
        *"Function not implemented"*)
        skip "the eBPF dataplane cannot run here: $(echo "$probe" | tail -1)" ;;
    esac
    bad "ina-switch --dataplane ebpf does not start: $probe"
    finish test_ebpf_e2e
    exit 1
fi
t_start=$SECONDS

# ---- 1. Refusals ------------------------------------------------------------------------------
refuses() { # WHAT STATUS PATTERN ARGS...
    local what=$1 want=$2 pat=$3 out rc
    shift 3
    out=$(unshare --net timeout 20 "$SW" --listen 127.0.0.1:0 "$@" 2>&1)
    rc=$?
    if [ "$rc" = "$want" ] && grep -q -- "$pat" <<<"$out"; then ok "$what"
    else bad "$what: status $rc, output: $out"; fi
}
refuses "no --iface: status 2, says so" 2 "needs --iface" --dataplane ebpf
refuses "no such interface: status 1, says so" 1 "no network interface 'nosuch0'" \
    --dataplane ebpf --iface nosuch0
refuses "--shm: refused" 2 "takes DATA from the interface, not from rings" --dataplane ebpf --iface lo --shm
refuses "--threads: refused" 2 "spreads packets over the cores" --dataplane ebpf --iface lo --threads 2
out=$(unshare --net sh -c "ip link set lo up; exec timeout 20 '$SW' --listen 127.0.0.1:0 \
    --dataplane ebpf --iface lo --multicast" 2>&1)
rc=$?
if [ "$rc" = 1 ] && grep -q "kernel drops multicast from a loopback address" <<<"$out"
then ok "--multicast on lo: status 1, says why (a loopback source)"
else bad "--multicast on lo: status $rc, output: $out"; fi
refuses "--fault-rx: refused" 2 "act on the socket" --dataplane ebpf --iface lo --fault-rx drop=0.1
refuses "--parent: refused" 2 "sends no partial sums upstream" --dataplane ebpf --iface lo \
    --listen 127.0.0.1:0 --parent 127.0.0.1:9
refuses "--iface without --dataplane ebpf: refused" 2 "is for --dataplane ebpf" --iface lo
refuses "a bad --dataplane: refused" 2 "want userspace or ebpf" --dataplane xdp
out=$(unshare --net setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
    "$SW" --listen 127.0.0.1:0 --dataplane ebpf --iface lo 2>&1)
rc=$?
if [ "$rc" = 1 ] && grep -q "needs root" <<<"$out"; then ok "not root: status 1, says it needs root"
else bad "not root: status $rc, output: $out"; fi

# A child switch (userspace, --parent) cannot join a job at an eBPF root: the program counts
# every member as one rank. The root refuses its TREE_JOIN; the child's workers hear REJECTED.
out=$(unshare --net sh -c "ip link set lo up
    '$SW' --dataplane ebpf --iface lo --listen 127.0.0.1:0 --port-file '$tmp/root' 2>'$tmp/root.log' &
    r=\$!
    for i in \$(seq 100); do [ -s '$tmp/root' ] && break; sleep 0.05; done
    '$SW' --listen 127.0.0.1:0 --port-file '$tmp/child' --parent 127.0.0.1:\$(cat '$tmp/root') \
        --quiet 2>/dev/null &
    c=\$!
    for i in \$(seq 100); do [ -s '$tmp/child' ] && break; sleep 0.05; done
    timeout 30 '$BENCH' --local 2 --switch 127.0.0.1:\$(cat '$tmp/child') --sizes 4K --iters 1 \
        --json --join-timeout-ms 10000 2>&1
    kill -TERM \$c \$r; wait" 2>&1)
if grep -q "join_refused.*tree_not_in_this_dataplane" "$tmp/root.log" && ! grep -q '"ok":true' <<<"$out"
then ok "a child switch's TREE_JOIN: refused (join_refused tree_not_in_this_dataplane)"
else bad "a child switch's TREE_JOIN at an eBPF root: $(tail -3 <<<"$out"; grep -m2 -E 'join|drop_JOIN' "$tmp/root.log")"; fi

# ---- 2. The e2e subset ------------------------------------------------------------------------
e2e_tests="allreduce types nonfinite hostile multitenant failures lifecycle inflight lanes evict idle async"
# The ASan build runs the same kernel program: there, only the tests whose workers parse the
# program's results in the most ways (CI time).
[ "${INA_SANITIZE:-OFF}" = ON ] && e2e_tests="allreduce types hostile failures"
for t in $e2e_tests; do
    bin=$B/tests/e2e/e2e_test_$t
    [ -x "$bin" ] || { bad "$bin missing"; continue; }
    t0=$SECONDS
    out=$(unshare --net sh -c "ip link set lo up && INA_TEST_DATAPLANE=ebpf exec timeout 240 '$bin'" 2>&1)
    rc=$?
    if [ "$rc" = 0 ]; then ok "e2e $t against the eBPF dataplane ($((SECONDS - t0)) s): $(tail -1 <<<"$out")"
    else bad "e2e $t against the eBPF dataplane: status $rc"; tail -30 <<<"$out"; fi
done

# ---- 3. The interface ------------------------------------------------------------------------
# veth pair: the switch in ${P}s, three workers in ${P}w (GSO on, the default).
P=e2e$(($$ % 10000))
cleanup_ns() { ip netns del "${P}s" 2>/dev/null; ip netns del "${P}w" 2>/dev/null; }
trap 'cleanup_ns; cleanup' EXIT
if ip netns add "${P}s" && ip netns add "${P}w" &&
    ip link add "${P}a" netns "${P}s" type veth peer name "${P}b" netns "${P}w" &&
    ip -n "${P}s" addr add 10.99.7.1/24 dev "${P}a" && ip -n "${P}w" addr add 10.99.7.2/24 dev "${P}b" &&
    ip -n "${P}s" link set "${P}a" up && ip -n "${P}w" link set "${P}b" up &&
    ip -n "${P}s" link set lo up && ip -n "${P}w" link set lo up; then
    ip netns exec "${P}s" timeout 60 "$SW" --dataplane ebpf --iface "${P}a" --listen 10.99.7.1:47520 \
        --quiet 2>"$tmp/veth.err" &
    vpid=$!
    sleep 0.5
    ip netns exec "${P}w" timeout 60 "$BENCH" --local 3 --switch 10.99.7.1:47520 --sizes 4K,256K \
        --dtype float32 --iters 10 --elems 256 --json >"$tmp/veth.out" 2>&1
    kill -TERM "$vpid"
    wait "$vpid"
    check "veth: 3 workers (GSO on) get right sums" [ "$(grep -c '"ok":true' "$tmp/veth.out")" = 2 ]
    passed=$(awk '$1 == "ebpf_passed_up" { print $2 }' "$tmp/veth.err")
    contrib=$(awk '$1 == "contributions" { print $2 }' "$tmp/veth.err")
    check "veth: every DATA reached the program, none the socket (passed_up ${passed:-?}, contributions ${contrib:-?})" \
        [ "${passed:-1}" = 0 -a "${contrib:-0}" -gt 3000 ]

    # --multicast: one frame per finished sum, to the group (not a clone per rank), and the
    # workers take it from there: a few results resent at most, where a group the workers
    # never hear would make every rank ask again for every round.
    ip netns exec "${P}s" timeout 60 "$SW" --dataplane ebpf --iface "${P}a" --listen 10.99.7.1:47522 \
        --multicast --quiet 2>"$tmp/mcast.err" &
    mpid=$!
    sleep 0.5
    ip netns exec "${P}w" timeout 60 "$BENCH" --local 3 --switch 10.99.7.1:47522 --sizes 256,4K,64K \
        --dtype int32 --iters 20 --elems 256 --json >"$tmp/mcast.out" 2>&1
    kill -TERM "$mpid"
    wait "$mpid"
    c() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/mcast.err"; }
    tx=$(c tx_packets) done_=$(c completions) resent=$(c results_resent)
    check "veth --multicast: 3 workers, 3 sizes, every sum verified" [ "$(grep -c '"ok":true' "$tmp/mcast.out")" = 3 ]
    ctl=$((${tx:-0} - ${done_:-0} - ${resent:-0})) # the control plane's: JOIN_ACKs and the like
    check "veth --multicast: one frame per finished sum (tx_packets ${tx:-?} = completions ${done_:-?} + resent ${resent:-?} + $ctl control), resent <= completions / 10" \
        [ "${done_:-0}" -gt 300 -a "$ctl" -ge 0 -a "$ctl" -le 20 -a "$((${resent:-0} * 10))" -le "${done_:-0}" ]

    # SIGKILL: nothing stays attached. A userspace switch on the same address then gets the DATA.
    ip netns exec "${P}s" "$SW" --dataplane ebpf --iface "${P}a" --listen 10.99.7.1:47521 --quiet 2>/dev/null &
    kpid=$!
    sleep 0.5
    kill -KILL "$kpid"
    wait "$kpid" 2>/dev/null
    ip netns exec "${P}s" timeout 60 "$SW" --listen 10.99.7.1:47521 --quiet 2>/dev/null &
    upid=$!
    sleep 0.3
    ip netns exec "${P}w" timeout 30 "$BENCH" --local 2 --switch 10.99.7.1:47521 --sizes 4K \
        --iters 3 --json --timeout-ms 5000 >"$tmp/kill.out" 2>&1
    kill -TERM "$upid"
    wait "$upid"
    check "after a SIGKILL, no program is left: a userspace switch on the same port works" \
        grep -q '"ok":true' "$tmp/kill.out"
else
    bad "cannot build the veth pair"
fi
cleanup_ns

# ---- 4. Loss --------------------------------------------------------------------------------------
if [ "${INA_SANITIZE:-OFF}" = ON ]; then
    echo "note: the loss suite against the eBPF dataplane runs in the gcc build only"
elif out=$(INA_NETNS_DATAPLANE=ebpf INA_NETNS_PREFIX=el INA_NETNS_SIZES=4,1K,16K,64K \
    INA_NETNS_ITERS=40 INA_NETNS_DEADLINE_S=120 bash tests/scripts/test_netns_loss.sh 2>&1); then
    if grep -q "^SKIP" <<<"$out"; then echo "note: loss suite skipped: $(grep -m1 SKIP <<<"$out")"
    else ok "loss suite (1%, 4 workers, bridge) against the eBPF dataplane: $(tail -1 <<<"$out")"; fi
else
    bad "loss suite against the eBPF dataplane"
    tail -40 <<<"$out"
fi
if [ "${INA_SANITIZE:-OFF}" != ON ]; then
    if out=$(INA_NETNS_DATAPLANE=ebpf INA_NETNS_SWITCH_ARGS=--multicast INA_NETNS_PREFIX=em \
        INA_NETNS_SIZES=4,1K,16K,64K INA_NETNS_ITERS=40 INA_NETNS_DEADLINE_S=120 \
        bash tests/scripts/test_netns_loss.sh 2>&1); then
        if grep -q "^SKIP" <<<"$out"; then echo "note: loss suite skipped: $(grep -m1 SKIP <<<"$out")"
        else ok "loss suite (1%, 4 workers, bridge) against the eBPF dataplane with --multicast: $(tail -1 <<<"$out")"; fi
    else
        bad "loss suite against the eBPF dataplane with --multicast"
        tail -40 <<<"$out"
    fi
fi

echo "test_ebpf_e2e: $((SECONDS - t_start)) s"
finish test_ebpf_e2e
