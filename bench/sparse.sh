#!/usr/bin/env bash
# sparse.sh: block-sparse ina against dense ina and OpenMPI (dense MPI_Allreduce) on one tensor
# size over a sweep of densities, every result verified, in two settings:
#   cluster   switch and workers in their own network namespaces on one bridge, EVERY link
#             shaped with tbf to RATE both ways (the switch's too: a software aggregator has one
#             NIC, like a worker; scripts/netns.sh INA_NS_SHAPE_SWITCH=1), MTU 9000
#   loopback  everything on 127.0.0.1 (CPU-bound)
# Writes bench/results/sparse.{md,jsonl} (a copy of each run under bench/results/runs/).
# Run as root on Debian (the cluster needs namespaces; a missing peer is skipped with a
# message). Never reads stdin. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF'
Usage: bench/sparse.sh [options]

Times one all-reduce size (default 100M bytes per rank = 26,214,400 float32, OmniReduce's
micro-benchmark) at each density of non-zero blocks, for:
  ina sparse   ina-bench --sparse on     (block-sparse, PROTOCOL.md §17)
  ina auto     ina-bench --sparse auto   (measures the density, picks sparse or dense)
  ina dense    ina-bench --sparse off
  OpenMPI      MPI_Allreduce (TCP, ring), dense: it has no sparse all-reduce
All systems sum the same tensors (tools/bench_data.h: blocks of --block elements kept with
the density's probability, by --pattern); every result is verified on every rank.

Options:
  --size S             bytes per rank, suffix K/M/G (default 100M)
  --densities LIST     default 1,0.5,0.1,0.01,0.001,0
  --pattern P          random (default: each rank its own blocks), overlap (the same blocks
                       on every rank) or disjoint (no block on two ranks)
  --block B            elements per block, 32..256 (default 256)
  --workers N          ranks (default 4)
  --settings LIST      cluster,loopback (default both)
  --systems LIST       sparse,auto,dense,openmpi (default all)
  --rate RATE          tbf rate of every link of the cluster (default 1gbit)
  --mtu MTU            MTU of the cluster (default 9000)
  --elems K            ina elements per packet on the cluster (default 2048)
  --iters N            timed iterations per cell (default 3)
  --warmup N           untimed iterations before them (default 1)
  --no-shm             loopback: ina over UDP (default: ina-switch --shm, as compare.sh)
  --update-readme      also copy the tables into README.md (between its bench:sparse markers)
  --help               this text
Environment: INA_BUILD_DIR (default build), BENCH_OUT (default bench/results),
INA_SPARSE_BENCH_PREFIX (namespace prefix, default fs; or INA_BENCH_NS, one letter, as
compare.sh: that letter followed by s).
EOF
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
OUT_DIR=${BENCH_OUT:-$ROOT/bench/results}
BB=$ROOT/bench/build

SIZE=100M
DENSITIES=1,0.5,0.1,0.01,0.001,0
PATTERN=random
BLOCK=256
N=4
SETTINGS=cluster,loopback
SYSTEMS=sparse,auto,dense,openmpi
RATE=1gbit
MTU=9000
ELEMS=2048
ITERS=3
WARMUP=1
LO_SHM=1
UPDATE_README=0
PREFIX=${INA_SPARSE_BENCH_PREFIX:-${INA_BENCH_NS:-f}s}

while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=${2:?}; shift ;;
        --densities) DENSITIES=${2:?}; shift ;;
        --pattern) PATTERN=${2:?}; shift ;;
        --block) BLOCK=${2:?}; shift ;;
        --workers) N=${2:?}; shift ;;
        --settings) SETTINGS=${2:?}; shift ;;
        --systems) SYSTEMS=${2:?}; shift ;;
        --rate) RATE=${2:?}; shift ;;
        --mtu) MTU=${2:?}; shift ;;
        --elems) ELEMS=${2:?}; shift ;;
        --iters) ITERS=${2:?}; shift ;;
        --warmup) WARMUP=${2:?}; shift ;;
        --no-shm) LO_SHM=0 ;;
        --update-readme) UPDATE_README=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "sparse: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

case $PATTERN in random | overlap | disjoint) ;; *) echo "sparse: bad --pattern '$PATTERN'" >&2; exit 2 ;; esac
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 64 ] || { echo "sparse: bad --workers" >&2; exit 2; }
[[ $ITERS =~ ^[0-9]+$ ]] && [ "$ITERS" -ge 1 ] || { echo "sparse: bad --iters" >&2; exit 2; }
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "sparse: bad --warmup" >&2; exit 2; }
[[ $BLOCK =~ ^[0-9]+$ ]] && [ "$BLOCK" -ge 32 ] && [ "$BLOCK" -le 256 ] || { echo "sparse: bad --block" >&2; exit 2; }
for d in ${DENSITIES//,/ }; do
    [[ $d =~ ^(0|1|0?\.[0-9]+)$ ]] || { echo "sparse: bad density '$d'" >&2; exit 2; }
done

log() { printf '[sparse %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
has() { [[ ,$1, == *,$2,* ]]; }

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

if [ ! -x "$BUILD_DIR/bin/ina-bench" ] || [ ! -x "$BUILD_DIR/bin/ina-switch" ]; then
    log "$BUILD_DIR/bin/ina-bench missing: running make"
    timeout 1800 make -C "$ROOT" BUILD_DIR="$BUILD_DIR" >&2 || { log "make failed"; exit 1; }
fi
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
INA_BENCH=$BUILD_DIR/bin/ina-bench
INA_SWITCH=$BUILD_DIR/bin/ina-switch

mkdir -p "$BB" "$OUT_DIR/runs" || exit 1
RUN=$OUT_DIR/runs/sparse-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN" || exit 1
RAW=$RUN/raw.jsonl
: >"$RAW"
log "run directory: $RUN"

HAVE_MPI=0
if has "$SYSTEMS" openmpi; then
    if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
        if mpicc -O2 -Wall -o "$BB/mpi_allreduce" "$ROOT/bench/mpi_allreduce.c" \
            "$ROOT/bench/benchdata.c" -lm 2>"$RUN/build-mpi.log"; then
            HAVE_MPI=1
        else
            log "SKIP OpenMPI: mpicc failed (see $RUN/build-mpi.log)"
        fi
    else
        log "SKIP OpenMPI: mpicc/mpirun not found (bench/deps.sh installs openmpi-bin libopenmpi-dev)"
    fi
fi

# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
# shellcheck source=bench/ranks.sh
source "$ROOT/bench/ranks.sh"
CLUSTER=
SW_PID=
BG_PIDS=()

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    [ -n "$SW_PID" ] && kill -TERM "$SW_PID" 2>/dev/null
    if [ -n "$CLUSTER" ]; then ina_ns_teardown "$CLUSTER"; CLUSTER=; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# A generous deadline (s) for one launch: every iteration of a dense 100M tensor through a
# 1 Gbit/s switch link at N=4 takes ~3.5 s, plus generating and verifying the data.
TIMEOUT=$((120 + (ITERS + WARMUP) * 30 * N / 4))

# start_switch SETTING: sets SW_PID and SW_ADDR.
start_switch() {
    local setting=$1 pf=$RUN/$1-switch.port i
    rm -f "$pf"
    if [ "$setting" = cluster ]; then
        ip netns exec "${CLUSTER}sw" "$INA_SWITCH" --listen "$(ina_ns_ip "$CLUSTER" sw):0" \
            --port-file "$pf" >"$RUN/$setting-switch.out" 2>"$RUN/$setting-switch.err" &
    else
        local shm=()
        [ "$LO_SHM" = 1 ] && shm=(--shm)
        "$INA_SWITCH" --listen 127.0.0.1:0 --port-file "$pf" "${shm[@]}" \
            >"$RUN/$setting-switch.out" 2>"$RUN/$setting-switch.err" &
    fi
    SW_PID=$!
    for ((i = 0; i < 100; i++)); do
        [ -s "$pf" ] && break
        kill -0 "$SW_PID" 2>/dev/null || break
        sleep 0.05
    done
    [ -s "$pf" ] || { log "ina-switch did not start (see $RUN/$setting-switch.err)"; return 1; }
    if [ "$setting" = cluster ]; then SW_ADDR=$(ina_ns_ip "$CLUSTER" sw):$(cat "$pf")
    else SW_ADDR=127.0.0.1:$(cat "$pf"); fi
}

stop_switch() {
    [ -n "$SW_PID" ] || return 0
    kill -TERM "$SW_PID" 2>/dev/null
    timeout 10 tail --pid="$SW_PID" -f /dev/null 2>/dev/null
    wait "$SW_PID" 2>/dev/null
    SW_PID=
}

# Records: each JSON line of rank 0 gets "setting" and "system" in front.
tag_json() { # SETTING SYSTEM < json lines
    sed -n "s/^{/{\"setting\":\"$1\",\"system\":\"$2\",/p"
}

# run_ina SETTING MODE DENSITY: one launch of N ranks against the running switch.
run_ina() {
    local setting=$1 mode=$2 d=$3 r rc=0 dir
    dir=$RUN/$setting-ina-$mode-$d
    mkdir -p "$dir"
    : >"$dir/cmd"
    local extra=()
    [ "$setting" = cluster ] && extra=(--elems "$ELEMS")
    for ((r = 0; r < N; r++)); do
        local cmd=(timeout -k 5 "$TIMEOUT")
        [ "$setting" = cluster ] && cmd=(ip netns exec "${CLUSTER}w$r" "${cmd[@]}")
        cmd+=("$INA_BENCH" --switch "$SW_ADDR" --rank "$r" --world "$N" --job "sp-$mode-$d-$$"
            --json --sizes "$SIZE" --iters "$ITERS" --warmup "$WARMUP" --sparse "$mode"
            --density "$d" --pattern "$PATTERN" --sparse-block "$BLOCK" --deadline-s "$TIMEOUT"
            "${extra[@]}")
        start_rank "$dir" "$r" "${cmd[@]}"
    done
    wait_ranks
    tag_json "$setting" "ina-$mode" <"$dir/out.0" >>"$RAW"
    if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$dir/out.0"; then
        log "FAILED: ina $mode ($setting, density $d): exit $rc; see $dir"
        printf '{"setting":"%s","system":"ina-%s","density":%s,"ok":false,"failed":true}\n' \
            "$setting" "$mode" "$d" >>"$RAW"
        return 1
    fi
    log "ina $mode ($setting, density $d): $(sed -n 's/.*"time_s":\([^,]*\),.*/\1/p' "$dir/out.0") s"
}

# run_mpi SETTING DENSITY
run_mpi() {
    local setting=$1 d=$2 r dir rc
    dir=$RUN/$setting-openmpi-$d
    mkdir -p "$dir"
    local mca=(--mca pml ob1)
    # shellcheck disable=SC2054 # "tcp,self" is one MCA value
    if [ "$setting" = cluster ]; then
        mca+=(--mca btl tcp,self --mca btl_tcp_if_include "$(ina_ns_subnet "$CLUSTER").0/24"
            --mca oob_tcp_if_include "${CLUSTER}h")
    else
        mca+=(--mca btl tcp,self --mca btl_tcp_if_include lo)
    fi
    local cmd=(timeout -k 5 "$TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none
        "${mca[@]}")
    for ((r = 0; r < N; r++)); do
        [ "$r" -gt 0 ] && cmd+=(:)
        cmd+=(-np 1)
        [ "$setting" = cluster ] && cmd+=(ip netns exec "${CLUSTER}w$r")
        cmd+=("$BB/mpi_allreduce" --sizes "$SIZE" --iters "$ITERS" --warmup "$WARMUP"
            --density "$d" --pattern "$PATTERN" --sparse-block "$BLOCK" --system openmpi)
    done
    local envs=()
    [ "$setting" = cluster ] && envs=(PMIX_MCA_ptl_tcp_if_include="${CLUSTER}h"
        PMIX_MCA_ptl_tcp_remote_connections=1)
    printf '%q ' env "${envs[@]}" "${cmd[@]}" >"$dir/cmd"
    env "${envs[@]}" "${cmd[@]}" >"$dir/out" 2>"$dir/err"
    rc=$?
    tag_json "$setting" openmpi <"$dir/out" >>"$RAW"
    if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$dir/out"; then
        log "FAILED: OpenMPI ($setting, density $d): exit $rc; see $dir"
        printf '{"setting":"%s","system":"openmpi","density":%s,"ok":false,"failed":true}\n' \
            "$setting" "$d" >>"$RAW"
        return 1
    fi
    log "OpenMPI ($setting, density $d): $(sed -n 's/.*"time_s":\([^,]*\),.*/\1/p' "$dir/out") s"
}

run_setting() {
    local setting=$1 d mode
    if has "$SYSTEMS" sparse || has "$SYSTEMS" auto || has "$SYSTEMS" dense; then
        start_switch "$setting" || return 1
        for d in ${DENSITIES//,/ }; do
            for mode in sparse auto dense; do
                has "$SYSTEMS" "$mode" || continue
                case $mode in
                    sparse) run_ina "$setting" on "$d" ;;
                    dense) run_ina "$setting" off "$d" ;;
                    *) run_ina "$setting" auto "$d" ;;
                esac
            done
        done
        stop_switch
        log "ina-switch ($setting): non-zero counters: $(awk 'NF == 2 && $2 ~ /^[0-9]+$/ && $2 > 0 { printf "%s=%s ", $1, $2 }' "$RUN/$setting-switch.err")"
    fi
    if [ "$HAVE_MPI" = 1 ]; then
        for d in ${DENSITIES//,/ }; do run_mpi "$setting" "$d"; done
    fi
}

T0=$(date +%s)
printf '{"kind":"config","size":"%s","densities":"%s","pattern":"%s","block":%d,"workers":%d,"rate":"%s","mtu":%d,"elems":%d,"iters":%d,"warmup":%d,"lo_shm":%d,"git":"%s","date":"%s","ncores":%d,"loadavg_start":"%s"}\n' \
    "$SIZE" "$DENSITIES" "$PATTERN" "$BLOCK" "$N" "$RATE" "$MTU" "$ELEMS" "$ITERS" "$WARMUP" "$LO_SHM" \
    "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"

if has "$SETTINGS" cluster; then
    if [ "$IS_ROOT" != 1 ]; then
        log "SKIP cluster: network namespaces need root"
    elif ! command -v tc >/dev/null || ! command -v ip >/dev/null; then
        log "SKIP cluster: ip/tc (iproute2) missing"
    else
        ina_ns_reap_stale "$PREFIX"
        CLUSTER=$PREFIX
        ina_ns_teardown "$CLUSTER" 2>/dev/null
        log "cluster: namespaces $CLUSTER*, tbf $RATE both ways on every link (the switch's too), MTU $MTU"
        if INA_NS_SHAPE_SWITCH=1 ina_ns_setup "$CLUSTER" "$N" "$RATE" "$MTU" && ina_ns_host_link "$CLUSTER"; then
            run_setting cluster
        else
            log "cluster setup failed: skipping the cluster"
        fi
        ina_ns_teardown "$CLUSTER"
        CLUSTER=
    fi
fi
if has "$SETTINGS" loopback; then
    log "loopback"
    run_setting loopback
fi
printf '{"kind":"end","elapsed_s":%d,"loadavg_end":"%s"}\n' "$(($(date +%s) - T0))" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"

REPORT=(--raw "$RAW" --out "$OUT_DIR" --rate "$RATE")
[ "$UPDATE_README" = 1 ] && REPORT+=(--readme "$ROOT/README.md" --doc "$ROOT/docs/SPARSE.md")
if ! timeout 120 /usr/bin/python3 "$ROOT/bench/sparse_report.py" "${REPORT[@]}"; then
    log "sparse_report.py failed; raw results in $RAW"
    exit 1
fi
cp "$OUT_DIR/sparse.md" "$RUN/"
cat "$OUT_DIR/sparse.md"
grep -q '"ok":false' "$RAW" && { log "some runs failed or did not verify"; exit 3; }
exit 0
