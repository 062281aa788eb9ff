#!/usr/bin/env bash
# test_netns_tree.sh: a two-level tree of switches over an emulated cluster with loss and
# duplication: N=8 ranks over 3 switches. Two node namespaces (the cluster's w0 and w1) each
# run a child switch (ina-switch --parent) and 4 ranks (ina-bench) that join it; the parent
# runs in the switch namespace (scripts/netns.sh). The bridge drops 1% of the IPv4 frames it
# forwards, both ways (nftables), so the children's partial sums and the parent's results are
# lost too; every switch duplicates 1% of what it receives (--fault-rx dup) and every worker
# 1% of its DATA (INA_FAULT), so duplicates reach both levels. int32 (exact) and float32
# (within the bound for N=8) at 5 sizes, 4 B to 256 KiB, every result verified on every rank.
# Passes only if every rank exits 0, rank 0 prints "ok": true for every size with 2 levels,
# the bridge really dropped packets, the children sent partial sums, the parent saw the
# duplicates (answered or dropped), and every switch exits 0. Measured on the 2-core build
# machine: about 6 s with the gcc build. Needs root, `ip netns`, tc and nft; without them it
# prints SKIP and exits 77. Environment: INA_BUILD_DIR (default build), INA_NETNS_LOSS
# (percent, default 1), INA_NETNS_DEADLINE_S (default 200).
set -uo pipefail
exec </dev/null
cd "${INA_SOURCE_DIR:-$(dirname "$0")/../..}" || exit 1

skip() {
    echo "SKIP: test_netns_tree needs root, ip netns, tc and nft ($1)"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"
{ command -v ip >/dev/null && ip netns list >/dev/null 2>&1; } || skip "ip netns unavailable"
command -v nft >/dev/null || skip "nft not installed"
command -v tc >/dev/null || skip "tc not installed"
unshare --net sh -c 'ip link add name inaprobe type bridge && nft add table bridge inaprobe' >/dev/null 2>&1 ||
    skip "cannot create a network namespace with a bridge and an nft bridge table here"

B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch BENCH=$B/bin/ina-bench
for f in "$SW" "$BENCH"; do
    [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }
done
LOSS=${INA_NETNS_LOSS:-1}
DEADLINE_S=${INA_NETNS_DEADLINE_S:-200}
SIZES=4,1K,16K,64K,256K
ITERS=12
NODES=2 PER_NODE=4
N=$((NODES * PER_NODE))

source scripts/netns.sh
P=ait$(($$ % 100000))          # unique per run: gcc and ASan runs may overlap
tmp=$(mktemp -d)
pids=() wpids=()
t_start=$SECONDS

cleanup() {
    local pid
    trap - EXIT
    trap "" INT TERM HUP
    for pid in "${wpids[@]}" "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    for pid in "${wpids[@]}" "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    ina_ns_teardown "$P"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "test_netns_tree: interrupted, cleaning up" >&2; cleanup; exit 130' INT
trap 'echo "test_netns_tree: terminated, cleaning up" >&2; cleanup; exit 143' TERM HUP

left() { echo $((DEADLINE_S - (SECONDS - t_start))); }
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

ina_ns_reap_stale ait
if ! ina_ns_setup "$P" "$NODES"; then
    echo "FAIL: could not build the emulated cluster"
    exit 1
fi
swip=$(ina_ns_ip "$P" sw)

# start NAME NS ADDR [ina-switch args]: a switch in namespace NS listening on ADDR:48864.
start() {
    local name=$1 ns=$2 addr=$3
    shift 3
    ip netns exec "$ns" timeout -k 10 $((DEADLINE_S + 30)) "$SW" --listen "$addr:48864" \
        --port-file "$tmp/$name.port" --quiet "$@" 2>"$tmp/$name.err" &
    pids+=($!)
    for _ in $(seq 200); do [ -s "$tmp/$name.port" ] && return 0; sleep 0.05; done
    bad "ina-switch $name did not start in namespace $ns"
    cat "$tmp/$name.err"
    exit 1
}
# --no-gso: one datagram per frame between the children and the parent, so that the bridge's
# 1% is 1% of the datagrams (a GSO train crosses the bridge as one frame: fewer, larger losses).
start parent "${P}sw" "$swip" --no-gso --fault-rx dup=0.01,seed=1
for ((c = 0; c < NODES; c++)); do
    start "child$c" "${P}w$c" "$(ina_ns_ip "$P" "w$c")" --parent "$swip:48864" --no-gso \
        --fault-rx "dup=0.01,seed=$((c + 2))"
done
echo "cluster $P: parent $swip, children $(ina_ns_ip "$P" w0) and $(ina_ns_ip "$P" w1)," \
    "$PER_NODE ranks each; loss $LOSS%; duplication 1%; sizes $SIZES x $ITERS"
ina_ns_loss "$P" "$LOSS" || { bad "could not install the loss rule"; exit 1; }

total_drops=0
for dtype in int32 float32; do
    read -r _ drop0 < <(ina_ns_loss_stats "$P")
    budget=$(left)
    [ "$budget" -ge 20 ] || { bad "$dtype: no time left"; break; }
    t0=$SECONDS
    wpids=()
    for ((r = N - 1; r >= 0; r--)); do
        node=$((r / PER_NODE))
        ip netns exec "${P}w$node" env INA_FAULT=dup=0.01 timeout -k 5 "$budget" "$BENCH" \
            --switch "$(ina_ns_ip "$P" "w$node"):48864" --rank "$r" --world "$N" \
            --job "tree-$dtype" --sizes "$SIZES" --iters "$ITERS" --warmup 0 --dtype "$dtype" \
            --json --timeout-ms 20000 --deadline-s $((budget - 10)) \
            >"$tmp/$dtype.$r.out" 2>"$tmp/$dtype.$r.err" &
        wpids[r]=$!
    done
    rcs=
    for ((r = 0; r < N; r++)); do
        wait "${wpids[r]}"
        rcs+=" $?"
    done
    wpids=()
    read -r _ drop1 < <(ina_ns_loss_stats "$P")
    total_drops=$((total_drops + drop1 - drop0))
    out=$tmp/$dtype.0.out
    echo "$dtype: $((SECONDS - t0)) s, exit statuses:$rcs; the bridge dropped $((drop1 - drop0))"
    grep -o '"bytes": *[0-9]*\|"time_s": *[0-9.e-]*\|"retransmits": *[0-9]*\|"ok": *[a-z]*' \
        "$out" | paste -d' ' - - - - | sed 's/^/  /'
    if [ "$rcs" = "$(printf ' 0%.0s' $(seq $N))" ]; then
        ok "$dtype: all $N ranks exit 0"
    else
        bad "$dtype: exit statuses$rcs"
        for ((r = 0; r < N; r++)); do
            [ -s "$tmp/$dtype.$r.err" ] && { echo "--- rank $r:"; tail -5 "$tmp/$dtype.$r.err"; }
        done
    fi
    nsizes=$(awk -F, '{ print NF }' <<<"$SIZES")
    if [ "$(grep -c '"ok": *true' "$out")" -eq "$nsizes" ]; then ok "$dtype: every size verified"
    else bad "$dtype: $(grep -c '"ok": *true' "$out") of $nsizes sizes verified"; fi
    if [ "$(grep -c '"levels":2' "$out")" -eq "$nsizes" ]; then ok "$dtype: rank 0 reports 2 levels"
    else bad "$dtype: rank 0 does not report 2 levels"; fi
done

if [ "$total_drops" -gt 0 ]; then ok "the bridge dropped $total_drops packets (loss was real)"
else bad "the bridge dropped nothing"; fi

i=0
for name in parent child0 child1; do
    kill -TERM "${pids[i]}" 2>/dev/null
    wait "${pids[i]}"
    st=$?
    if [ "$st" -eq 0 ]; then ok "$name exits 0"; else bad "$name exit status $st"; fi
    i=$((i + 1))
done
pids=()
counter() { awk -v k="$2" '$1 == k { print $2 }' "$tmp/$1.err"; }
for c in 0 1; do
    up=$(counter "child$c" up_packets) again=$(counter "child$c" up_resent)
    echo "child$c: $up partial sums sent, $again sent again; $(counter "child$c" up_results) results passed down"
    if [ "${up:-0}" -gt 0 ]; then ok "child$c sent partial sums"; else bad "child$c sent none"; fi
done
dups=$(( $(counter parent drop_DUP_PENDING) + $(counter parent results_resent) ))
echo "parent: $(counter parent tree_joins) TREE_JOINs, $dups duplicates dropped or answered," \
    "$(counter parent drop_MISMATCH) mismatches"
if [ "$dups" -gt 0 ]; then ok "duplicates reached the parent"; else bad "no duplicate reached the parent"; fi
if [ "$(counter parent drop_MISMATCH)" = 0 ]; then ok "no mismatch at the parent"; else bad "mismatches at the parent"; fi

echo "test_netns_tree: $pass passed, $fail failed, $((SECONDS - t_start)) s"
[ "$fail" -eq 0 ]
