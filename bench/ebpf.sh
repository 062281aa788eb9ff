#!/usr/bin/env bash
# ebpf.sh: ina-switch's two dataplanes side by side: --dataplane ebpf (the slot rules as a TC
# program) against the userspace one, in one run, on a veth pair and on the emulated cluster.
#
# Settings (SETTINGS, default "veth cluster"):
#   veth     two namespaces joined by one veth pair: the switch on one end, the 4 workers
#            (ina-bench --local 4 --switch) on the other; the peers (OpenMPI over TCP and over
#            shared memory) run their 4 ranks in the workers' namespace.
#   cluster  scripts/netns.sh's emulated cluster: the switch and each worker in a namespace of
#            its own, on one bridge; every link, the switch's too, shaped to RATE (10gbit).
# Dataplanes (DPS, default "userspace ebpf userspace-mc ebpf-mc"): the two, each by unicast (a
# copy of every finished sum per rank) and with --multicast (one copy, to the job's group; the
# veth or the bridge makes the others).
# For REPS rounds (default 3), interleaved, each dataplane gets two fresh switches:
#   throughput  4 workers all-reduce TPUT_SIZE (4M) of int32, TPUT_ITERS (20) times, ELEMS (256)
#               elements per packet. Switch CPU = the switch process's CPU time (all threads,
#               /proc/PID/task/*/schedstat) over the workers' run, plus, for ebpf, the
#               program's own run time (kernel.bpf_stats_enabled=1 for the run; the switch's
#               exit report, ebpf_prog_ns): the cost of the packets it handles in softirq. Aggregated packets = the switch's
#               `contributions` counter (every DATA added into a slot). Printed: switch CPU per
#               aggregated packet, aggregated packets per second per switch core (its inverse),
#               aggregated packets per second of wall time.
#   latency     4 workers all-reduce 256 B of float32, LAT_ITERS (500) times: rank 0's median;
#               again with busy polling (INA_BUSY_POLL_US=BUSY_US, default 200, in the workers;
#               --busy-poll BUSY_US in a userspace switch; the program needs none: it never
#               sleeps); then 1 worker alone, sleeping: no rank waits for another, so what is
#               left is the worker's round trip through the switch, the switch's wake-up with it.
#               The workers share this host's cores, and are told so (LOCAL_WORLD_SIZE=4: one
#               lane each on two cores; before 2026-11-27 each took two, and a thread handoff
#               per operation).
# Not counted for either dataplane: the kernel's receive path up to the TC hook (the same
# for both), which runs in the sender's softirq on a veth; nor, for the userspace switch, the
# socket delivery after it. So a last row divides the whole machine's busy CPU time
# (/proc/stat: workers, softirqs and whatever else runs on this shared VM) by the packets.
# Then the medians over the rounds; the ratios ebpf / userspace and ebpf-mc / userspace (the
# default switch) against the targets of issue 16 (>= 2x packets per core, 256 B p50 <= 0.6x),
# and ebpf-mc / userspace-mc (both multicasting); the peers' 256 B p50 (veth setting). Every
# result is verified (ina-bench and mpi_allreduce check their sums: "ok").
# First, the floor (bench/ebpf_floor.c, where clang and libbpf are there): what a BPF program
# pays per ELEMS-element packet to copy it in and add it into a slot under the lock, timed by
# BPF_PROG_TEST_RUN, beside the userspace switch's AVX2 add of the same payload.
#
# Environment: INA_SOURCE_DIR (the sources, default this script's), INA_BUILD_DIR (default
# build), SETTINGS, DPS, REPS, TPUT_SIZE, TPUT_ITERS, ELEMS, BUSY_US,
# LAT_ITERS, RATE (cluster links, default 10gbit), PEERS (1: OpenMPI rows; 0: none), OUT
# (raw results, default a new /tmp/ina-ebpf-bench.XXXXXX), PORT (22100). Needs root (namespaces,
# BPF) and an ina-switch built with the eBPF dataplane; namespaces are named e<pid>...
# Run it under the bench lock: flock /work/locks/bench.lock bash bench/ebpf.sh
# Usage: bash bench/ebpf.sh [--help]
set -uo pipefail
exec </dev/null

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,49p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
root=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
here=$root/bench
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
SW=$build/bin/ina-switch BENCH=$build/bin/ina-bench
SETTINGS=${SETTINGS:-"veth cluster"} REPS=${REPS:-3} TPUT_SIZE=${TPUT_SIZE:-4M}
TPUT_ITERS=${TPUT_ITERS:-20} ELEMS=${ELEMS:-256} LAT_ITERS=${LAT_ITERS:-500}
RATE=${RATE:-10gbit} PEERS=${PEERS:-1} PORT=${PORT:-22100}
DPS=${DPS:-"userspace ebpf userspace-mc ebpf-mc"} BUSY_US=${BUSY_US:-200}
WENV=(X_INA_UNUSED=1) # more environment for the workers (measure sets it)
OUT=${OUT:-$(mktemp -d /tmp/ina-ebpf-bench.XXXXXX)}
mkdir -p "$OUT"
die() { echo "ebpf.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, BPF programs)"
[ -x "$SW" ] && [ -x "$BENCH" ] || die "$SW or $BENCH missing: build first (make)"
source "$root/scripts/netns.sh"

P=e$(($$ % 100000))
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
    sysctl -q -w kernel.bpf_stats_enabled="$stats_was" >/dev/null
    ip netns del "${P}s" 2>/dev/null
    ip netns del "${P}w" 2>/dev/null
    ina_ns_teardown "$P" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# The floor of the program's per-packet work (ebpf_floor.c), where it builds; before the run
# statistics are on (they add two clock reads to every run of every program).
arch_inc=/usr/include/$(gcc -print-multiarch 2>/dev/null)
if command -v clang >/dev/null &&
    clang -O2 -g -target bpf -Wall -I"$arch_inc" -I"$root/src" -DFLOOR_ELEMS="$ELEMS" -c "$here/ebpf_floor.bpf.c" \
        -o "$OUT/ebpf_floor.bpf.o" 2>"$OUT/floor-build.err" &&
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$root/src" -I"$root/include" -o "$OUT/ebpf_floor" \
        "$here/ebpf_floor.c" "$root/src/common/be32.c" -lbpf 2>>"$OUT/floor-build.err"; then
    floor=$("$OUT/ebpf_floor" "$OUT/ebpf_floor.bpf.o" "$ELEMS" 7 2>&1)
else
    floor="floor: not built (clang or libbpf missing: $OUT/floor-build.err)"
fi

sysctl -q -w kernel.bpf_stats_enabled=1 >/dev/null || die "cannot enable kernel.bpf_stats_enabled"

# ---- the two settings --------------------------------------------------------------------------
# Each defines: SW_NS, SW_IP, SW_IF, and run_workers JOB ARGS... (the 4 workers, rank 0's JSON
# on stdout).
setup_veth() {
    ip netns add "${P}s" && ip netns add "${P}w" &&
        ip link add "${P}a" netns "${P}s" type veth peer name "${P}b" netns "${P}w" &&
        ip -n "${P}s" addr add 10.99.8.1/24 dev "${P}a" &&
        ip -n "${P}w" addr add 10.99.8.2/24 dev "${P}b" &&
        ip -n "${P}s" link set "${P}a" up && ip -n "${P}w" link set "${P}b" up &&
        ip -n "${P}s" link set lo up && ip -n "${P}w" link set lo up || return 1
    SW_NS=${P}s SW_IP=10.99.8.1 SW_IF=${P}a
}
workers_veth() {
    local job=$1
    shift
    ip netns exec "${P}w" env "${WENV[@]}" timeout 300 "$BENCH" --local "${NW:-4}" --switch "$SW_IP:$PORT" --job "$job" \
        --json "$@"
}
setup_cluster() {
    ina_ns_reap_stale e >/dev/null 2>&1
    INA_NS_SHAPE_SWITCH=1 ina_ns_setup "$P" 4 "$RATE" || return 1
    SW_NS=${P}sw SW_IP=$(ina_ns_ip "$P" sw) SW_IF=eth0
}
workers_cluster() {
    local job=$1 r pids=()
    shift
    # The workers share this host's cores (LOCAL_WORLD_SIZE: their automatic lanes count so,
    # as ina-bench --local tells its own workers).
    for r in $(seq 1 $((${NW:-4} - 1))); do
        ip netns exec "${P}w$r" env LOCAL_WORLD_SIZE="${NW:-4}" "${WENV[@]}" timeout 300 "$BENCH" --switch "$SW_IP:$PORT" --rank "$r" \
            --world "${NW:-4}" --job "$job" --json "$@" >/dev/null 2>>"$OUT/workers.err" &
        pids+=($!)
    done
    ip netns exec "${P}w0" env LOCAL_WORLD_SIZE="${NW:-4}" "${WENV[@]}" timeout 300 "$BENCH" --switch "$SW_IP:$PORT" --rank 0 --world "${NW:-4}" \
        --job "$job" --json "$@"
    local rc=$? p
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

# ---- one measurement ---------------------------------------------------------------------------
busy_ns() { # the whole machine's non-idle CPU time, ns (every process, softirqs included)
    awk '$1 == "cpu" { printf "%.0f\n", ($2 + $3 + $4 + $7 + $8) * 1e9 / '"$(getconf CLK_TCK)"' }' /proc/stat
}
task_cpu_ns() { # PID: CPU time of all its threads, ns
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'
}
counter() { awk -v k="$2" '$1 == k { v = $2 } END { print v + 0 }' "$1"; }

# measure SETTING DP REP KIND: prints "cpu_ns prog_ns contributions wall_s p50_s ok machine_ns"
measure() {
    local setting=$1 dp=$2 rep=$3 kind=$4 tag=$1-$2-$3-$4 dpargs=() swpid c0 c1 m0 m1 t0 t1
    case $dp in ebpf*) dpargs=(--dataplane ebpf --iface "$SW_IF") ;; esac
    case $dp in *-mc) dpargs+=(--multicast) ;; esac
    local wenv=(X_INA_UNUSED=1)
    if [ "$kind" = latbp ]; then # busy polling: the workers, and a userspace switch
        wenv=(INA_BUSY_POLL_US="$BUSY_US")
        case $dp in userspace*) dpargs+=(--busy-poll "$BUSY_US") ;; esac
    fi
    ip netns exec "$SW_NS" "$SW" --listen "$SW_IP:$PORT" --port-file "$OUT/$tag.port" \
        --quiet "${dpargs[@]}" 2>"$OUT/$tag.switch" &
    swpid=$!
    for _ in $(seq 100); do [ -s "$OUT/$tag.port" ] && break; sleep 0.05; done
    [ -s "$OUT/$tag.port" ] || { echo "0 0 0 0 0 switch-failed"; cat "$OUT/$tag.switch" >&2; return; }
    local args
    if [ "$kind" = tput ]; then
        args=(--sizes "$TPUT_SIZE" --dtype int32 --iters "$TPUT_ITERS" --warmup 1 --elems "$ELEMS")
    else
        args=(--sizes 256 --dtype float32 --iters "$LAT_ITERS" --warmup 20)
    fi
    c0=$(task_cpu_ns "$swpid") m0=$(busy_ns) t0=$(date +%s.%N)
    WENV=("${wenv[@]}")
    "workers_$setting" "eb-$tag" "${args[@]}" >"$OUT/$tag.json" 2>"$OUT/$tag.err"
    WENV=(X_INA_UNUSED=1)
    t1=$(date +%s.%N) c1=$(task_cpu_ns "$swpid") m1=$(busy_ns)
    kill -TERM "$swpid"
    wait "$swpid"
    local ok=bad
    grep -q '"ok":true' "$OUT/$tag.json" && ok=ok
    local p50
    p50=$(grep -o '"time_s":[0-9.e+-]*' "$OUT/$tag.json" | head -1 | cut -d: -f2)
    # The program's run time: the switch's exit report (its whole life; the joins are a few
    # packets).
    echo "$((c1 - c0)) $(counter "$OUT/$tag.switch" ebpf_prog_ns || true) $(counter "$OUT/$tag.switch" contributions) \
$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') ${p50:-0} $ok $((m1 - m0))"
}

# ---- the peers (veth: the workers' namespace) --------------------------------------------------
peer_p50() { # BTL: rank 0's median for 256 B float32 over OpenMPI with that BTL, or "-"
    local btl=$1 out
    out=$(ip netns exec "${P}w" timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
        --mca btl "$btl" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        "$OUT/mpi_allreduce" --sizes 256 --dtype float32 --iters "$LAT_ITERS" --warmup 20 \
        --system "openmpi-$btl" 2>>"$OUT/mpi.err")
    grep -q '"ok":true' <<<"$out" || { echo -; return; }
    grep -o '"time_s":[0-9.e+-]*' <<<"$out" | head -1 | cut -d: -f2
}
have_mpi=0
if [ "$PEERS" = 1 ] && command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
    mpicc -O2 -o "$OUT/mpi_allreduce" "$here/mpi_allreduce.c" "$here/benchdata.c" -lm \
        2>"$OUT/mpi-build.err"; then
    have_mpi=1
fi

med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit } print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

echo "# ebpf.sh: the 2-core VM, $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg); REPS $REPS;" \
    "throughput $TPUT_SIZE int32 x $TPUT_ITERS, $ELEMS elems/packet; latency 256 B float32 x" \
    "$LAT_ITERS; N=4; raw results in $OUT"
echo "## the floor: a BPF program's copy and locked adds per packet, against the userspace add"
echo "$floor" | sed 's/^/    /'
echo
fails=0
failed() { # WHAT STATUS: a run of $setting $dp round $rep whose results were not all verified
    echo "FAIL: $setting $dp round $rep: $1 ($2, see $OUT)"
    fails=$((fails + 1))
}
p50_us() { # KIND: rank 0's 256 B median in us; else the run's status, and status 1
    local p50 ok
    read -r _ _ _ _ p50 ok _ < <(measure "$setting" "$dp" "$rep" "$1")
    [ "$ok" = ok ] || { echo "$ok"; return 1; }
    awk -v t="$p50" 'BEGIN { printf "%.1f", t * 1e6 }'
}
for setting in $SETTINGS; do
    case $setting in
    veth) setup_veth || die "cannot build the veth pair" ;;
    cluster) setup_cluster || die "cannot build the emulated cluster" ;;
    *) die "unknown setting '$setting' (veth or cluster)" ;;
    esac
    declare -A cpp=() rate=() wrate=() lat=() lat1=() latbp=() mcpp=()
    for rep in $(seq "$REPS"); do
        for dp in $DPS; do
            read -r cpu prog contrib wall _ ok mach < <(measure "$setting" "$dp" "$rep" tput)
            [ "$ok" = ok ] && [ "${contrib:-0}" -gt 0 ] || { failed "throughput run" "$ok"; continue; }
            c=$(awk -v c="$cpu" -v p="$prog" -v n="$contrib" 'BEGIN { printf "%.4f", (c + p) / n / 1000 }')
            cpp[$dp]+=" $c"
            rate[$dp]+=" $(awk -v c="$c" 'BEGIN { printf "%.0f", 1e6 / c }')"
            mcpp[$dp]+=" $(awk -v c="$mach" -v n="$contrib" 'BEGIN { printf "%.3f", c / n / 1000 }')"
            wrate[$dp]+=" $(awk -v w="$wall" -v n="$contrib" 'BEGIN { printf "%.0f", n / w }')"
            v=$(p50_us lat) || { failed "latency run" "$v"; continue; }
            lat[$dp]+=" $v"
            v=$(NW=1 p50_us lat1) || { failed "latency run, N=1" "$v"; continue; }
            lat1[$dp]+=" $v"
            v=$(p50_us latbp) || { failed "latency run, busy polling" "$v"; continue; }
            latbp[$dp]+=" $v"
            printf '%-8s round %d %-12s  switch CPU %s us/packet (process %d ms, program %d ms, %d packets; machine %s us/packet), %s packets/s wall; 256 B p50 %s us (busy polling %s us, N=1: %s us)\n' \
                "$setting" "$rep" "$dp" "$c" $((cpu / 1000000)) $((prog / 1000000)) "$contrib" \
                "${mcpp[$dp]##* }" "${wrate[$dp]##* }" "${lat[$dp]##* }" "${latbp[$dp]##* }" "${lat1[$dp]##* }"
        done
    done
    echo
    echo "## $setting: medians of $REPS rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
    # Columns: each dataplane's median, then the ratios (a dataplane not in DPS: "-").
    printf '| %-28s |' metric
    for dp in $DPS; do printf ' %12s |' "$dp"; done
    printf ' %8s | %8s | %8s | %s |\n' "ebpf/us" "ebpf-mc/us" "mc: e/u" "target (issue 16)"
    printf '|%s|' "$(printf -- '-%.0s' {1..30})"
    for dp in $DPS; do printf '%s|' --------------; done
    printf '%s|%s|%s|%s|\n' ---------- ---------- ---------- ------------------
    row() { # NAME KEY-ARRAY TARGET
        local dp v
        declare -A m=()
        printf '| %-28s |' "$1"
        for dp in $DPS; do
            v=$(eval "echo \${$2[$dp]:-}" | med)
            m[$dp]=$v
            printf ' %12s |' "$v"
        done
        ratio() { awk -v u="${m[$1]:-}" -v e="${m[$2]:-}" 'BEGIN { if (u + 0 > 0 && e + 0 > 0) printf "%.2fx", e / u; else print "-" }'; }
        printf ' %8s | %8s | %8s | %s |\n' "$(ratio userspace ebpf)" "$(ratio userspace ebpf-mc)" \
            "$(ratio userspace-mc ebpf-mc)" "$3"
    }
    row "switch CPU us/agg packet" cpp "(the probe: ~0.85 us for eBPF)"
    row "agg packets/s per core" rate ">= 2x"
    row "agg packets/s (wall)" wrate "(workers-bound)"
    row "machine CPU us/agg packet" mcpp "(workers, softirqs, neighbours too)"
    row "256 B p50 us, N=4" lat "<= 0.6x"
    row "256 B p50 us, N=4, busy poll" latbp "<= 0.6x (workers spin; a userspace switch too)"
    row "256 B p50 us, N=1" lat1 "(the switch's part alone)"
    if [ "$setting" = veth ] && [ "$have_mpi" = 1 ]; then
        for btl in tcp,self vader,self; do
            ps=()
            for rep in $(seq "$REPS"); do ps+=("$(peer_p50 "$btl")"); done
            p=$(printf '%s\n' "${ps[@]}" | grep -v '^-$' | awk '{ printf "%.1f\n", $1 * 1e6 }' | tr '\n' ' ' | med)
            echo "peer OpenMPI ($btl), same namespace, 256 B float32 N=4: p50 $p us (rounds: ${ps[*]} s); ina ebpf / it: $(awk -v e="$(echo "${lat[ebpf]:-}" | med)" -v p="$p" 'BEGIN { if (p + 0 > 0) printf "%.2fx", e / p; else print "-" }'), ina ebpf-mc / it: $(awk -v e="$(echo "${lat[ebpf-mc]:-}" | med)" -v p="$p" 'BEGIN { if (p + 0 > 0) printf "%.2fx", e / p; else print "-" }')"
        done
    elif [ "$setting" = veth ]; then
        echo "peers: skipped (PEERS=0, or no mpicc/mpirun: bench/deps.sh)"
    fi
    echo "ideal: the issue's targets above; per packet, a hardware switch spends no host CPU at all"
    echo
    unset cpp rate wrate lat lat1 latbp mcpp
    case $setting in
    veth) ip netns del "${P}s"; ip netns del "${P}w" ;;
    cluster) ina_ns_teardown "$P" ;;
    esac
done
[ "$fails" = 0 ] || { echo "ebpf.sh: $fails runs failed (see $OUT)"; exit 1; }
