#!/usr/bin/env bash
# mpi_route.sh: the MPI interposer's routing (docs/MPI.md#routing) against plain Open MPI.
# bench/mpi_allreduce (int32 SUM, every result checked exactly on every rank) at NP ranks,
# every size from 4 B to 4 MiB (powers of 2), in two settings:
#   onehost  all ranks on this host: Open MPI over shared memory (btl vader,self); ina-switch
#            on 127.0.0.1 with --shm (the ranks reach it through shared-memory rings)
#   cluster  each rank in a network namespace of an emulated cluster (scripts/netns.sh, every
#            worker link shaped to RATE, MTU 9000): Open MPI over TCP, ina-switch in its own
#            namespace, INA_ELEMS=2048 (as bench/compare.sh)
# Every run is paired (mpi_allreduce --pair): each iteration times MPI_Allreduce (through
# the interposer, if preloaded) and PMPI_Allreduce (MPI's own) in the same process, one after
# the other; a run's ratio is the median over iterations of the first's time over the
# second's, so that the load of the machine (heavy and changing on a shared 2-core VM) weighs
# on both alike. Phase 1 (RUNS rounds): plain Open MPI and the interposer forced to ina
# (INA_MPI_ROUTE=ina); the forced runs give the route table (one line per size: placement NP
# bytes mpi_us ina_us, mpi_us the median of PMPI_Allreduce's time, ina_us that times the
# median ratio), written to TABLE. Phase 2 (RUNS rounds): plain Open MPI again, the
# interposer routed by that table (INA_MPI_ROUTE=table) and, unless --no-calibrate, routed
# by its own calibration at MPI_Init (INA_MPI_ROUTE=calibrate). Each round runs every variant
# once, one after the other. Reported: medians over rounds of rank 0's per-size median time
# and of the paired ratios; plain Open MPI's own ratio (two calls of MPI's code) is the
# method's noise floor. Writes OUT/mpi_route.{md,jsonl} and OUT/mpi_route_table.txt
# (OUT: bench/results), each run's files under OUT/runs/mpi_route-<time>/, and, unless
# --no-docs, the tables into docs/MPI.md between its bench:mpi-route markers.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF'
Usage: bench/mpi_route.sh [options]

Plain Open MPI against LD_PRELOAD=libina-mpi.so forced to ina, routed by a table this script
measures (written where the interposer looks), and routed by the interposer's calibration.
int32 SUM, all results checked. Each run times MPI_Allreduce and PMPI_Allreduce call by call
in the same processes (mpi_allreduce --pair). Medians of RUNS rounds.

Options:
  --np N             ranks (default 4)
  --settings LIST    onehost,cluster (default both; cluster needs root, ip and tc)
  --sizes LIST       bytes per rank, suffix K/M (default 4 B to 4 MiB, every power of 2)
  --runs R           rounds per phase (default 5)
  --quick            --runs 2 and sizes 4,64,1K,16K,64K,256K,1M,4M
  --rate RATE        tbf rate of each worker link in the cluster (default 1gbit)
  --table PATH       the route table to write (default: where the interposer reads it:
                     $INA_MPI_ROUTE_FILE, else ${XDG_CACHE_HOME:-~/.cache}/ina/mpi-route.txt);
                     its lines for other placements or rank counts are kept
  --no-calibrate     skip the calibrated variant
  --no-docs          do not rewrite docs/MPI.md's table (default: rewrite it, except --quick)
  --help             this text
Environment: INA_BUILD_DIR (default build), BENCH_OUT (default bench/results),
INA_BENCH_NS (the cluster's namespace prefix letter, default r: cluster rc<NP>).
EOF
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
OUT=${BENCH_OUT:-$ROOT/bench/results}
BB=$ROOT/bench/build
PY=${INA_PYTHON:-/usr/bin/python3}
NP=4 SETTINGS=onehost,cluster RUNS=5 RATE=1gbit MTU=9000 ELEMS=2048 CALIBRATE=1 DOCS=1
SIZES=4,8,16,32,64,128,256,512,1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M
TABLE=
while [ $# -gt 0 ]; do
    case $1 in
        --np) NP=${2:?}; shift ;;
        --settings) SETTINGS=${2:?}; shift ;;
        --sizes) SIZES=${2:?}; shift ;;
        --runs) RUNS=${2:?}; shift ;;
        --quick) RUNS=2; SIZES=4,64,1K,16K,64K,256K,1M,4M; DOCS=0 ;;
        --rate) RATE=${2:?}; shift ;;
        --table) TABLE=${2:?}; shift ;;
        --no-calibrate) CALIBRATE=0 ;;
        --no-docs) DOCS=0 ;;
        --help | -h) usage; exit 0 ;;
        *) echo "mpi_route: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$TABLE" ]; then
    if [ -n "${INA_MPI_ROUTE_FILE:-}" ]; then TABLE=$INA_MPI_ROUTE_FILE
    elif [ -n "${XDG_CACHE_HOME:-}" ]; then TABLE=$XDG_CACHE_HOME/ina/mpi-route.txt
    else TABLE=$HOME/.cache/ina/mpi-route.txt; fi
fi
log() { printf '[mpi_route %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
has() { [[ ",$1," == *",$2,"* ]]; }

LIB=$B/lib/libina-mpi.so SW=$B/bin/ina-switch
for need in "$LIB" "$SW"; do
    [ -e "$need" ] || { echo "mpi_route: $need missing (build first; the interposer needs libopenmpi-dev)" >&2; exit 1; }
done
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "mpi_route: mpicc/mpirun missing (apt-get install openmpi-bin libopenmpi-dev)" >&2
    exit 1
fi
mkdir -p "$BB" "$OUT"
mpicc -O2 -Wall -o "$BB/mpi_allreduce" bench/mpi_allreduce.c bench/benchdata.c -lm ||
    { echo "mpi_route: mpicc failed" >&2; exit 1; }

# Iterations (timed, warmup) per size: many where a call takes microseconds.
iters_for() { # SIZES -> "ITERS WARMUP" comma lists
    local it=() wu=() s b
    for s in ${1//,/ }; do
        b=${s%[KkMm]}
        case $s in *[Kk]) b=$((b << 10)) ;; *[Mm]) b=$((b << 20)) ;; esac
        if [ "$b" -le 65536 ]; then it+=(200); wu+=(10)
        elif [ "$b" -le 1048576 ]; then it+=(50); wu+=(5)
        else it+=(20); wu+=(2); fi
    done
    local IFS=,
    echo "${it[*]} ${wu[*]}"
}
read -r ITERS WARMUP < <(iters_for "$SIZES")

RUN=$OUT/runs/mpi_route-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
RAW=$RUN/raw.jsonl
: >"$RAW"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset INA_MPI_ROUTE INA_MPI_MIN_BYTES INA_MPI_FLOAT INA_JOB

# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
NS_PREFIX=${INA_BENCH_NS:-r}
CLUSTER='' SW_PID=
cleanup() {
    [ -n "$SW_PID" ] && kill -TERM "$SW_PID" 2>/dev/null && wait "$SW_PID" 2>/dev/null
    [ -n "$CLUSTER" ] && ina_ns_teardown "$CLUSTER"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

start_switch() { # SETTING
    local pf=$RUN/sw.port
    rm -f "$pf"
    if [ "$1" = cluster ]; then
        ip netns exec "${CLUSTER}sw" "$SW" --listen "$(ina_ns_ip "$CLUSTER" sw):0" \
            --port-file "$pf" 2>"$RUN/sw-$1.err" &
    else
        "$SW" --listen 127.0.0.1:0 --shm --port-file "$pf" 2>"$RUN/sw-$1.err" &
    fi
    SW_PID=$!
    for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
    [ -s "$pf" ] || { log "ina-switch did not start ($RUN/sw-$1.err)"; return 1; }
    if [ "$1" = cluster ]; then SW_ADDR=$(ina_ns_ip "$CLUSTER" sw):$(cat "$pf")
    else SW_ADDR=127.0.0.1:$(cat "$pf"); fi
}
stop_switch() {
    kill -TERM "$SW_PID" 2>/dev/null
    wait "$SW_PID" 2>/dev/null
    SW_PID=
}

# run SETTING VARIANT PHASE ROUND: one mpirun of every size; VARIANT plain, ina, table,
# calibrate.
run() {
    local setting=$1 variant=$2 phase=$3 round=$4 r d=$RUN/$1-$2-p$3-$4
    local mca=(--mca pml ob1) envs=() cmd
    # "tcp,self" is one MCA value, not two array elements.
    # shellcheck disable=SC2054
    if [ "$setting" = cluster ]; then
        mca+=(--mca btl tcp,self --mca btl_tcp_if_include "$(ina_ns_subnet "$CLUSTER").0/24"
            --mca oob_tcp_if_include "${CLUSTER}h")
    else
        mca+=(--mca btl vader,self)
    fi
    if [ "$variant" != plain ]; then
        envs=(LD_PRELOAD="$LIB" INA_SWITCH="$SW_ADDR" INA_MPI_ROUTE="$variant"
            INA_MPI_ROUTE_FILE="$TABLE" INA_MPI_VERBOSE=1)
        [ "$setting" = cluster ] && envs+=(INA_ELEMS="$ELEMS")
    fi
    cmd=(timeout -k 5 600 mpirun --oversubscribe --bind-to none "${mca[@]}")
    for ((r = 0; r < NP; r++)); do
        [ "$r" -gt 0 ] && cmd+=(:)
        cmd+=(-np 1)
        [ "$setting" = cluster ] && cmd+=(ip netns exec "${CLUSTER}w$r")
        [ ${#envs[@]} -gt 0 ] && cmd+=(env "${envs[@]}")
        cmd+=("$BB/mpi_allreduce" --sizes "$SIZES" --dtype int32 --iters "$ITERS"
            --warmup "$WARMUP" --system "$variant" --pair)
    done
    local penv=()
    [ "$setting" = cluster ] && penv=(PMIX_MCA_ptl_tcp_if_include="${CLUSTER}h"
        PMIX_MCA_ptl_tcp_remote_connections=1)
    printf '%q ' env "${penv[@]}" "${cmd[@]}" >"$d.cmd"
    env "${penv[@]}" "${cmd[@]}" >"$d.out" 2>"$d.err"
    local rc=$?
    if [ "$rc" -ne 0 ] || grep -q '"ok":false' "$d.out"; then
        log "FAILED: $setting $variant round $round (exit $rc): $d.err"
        return 1
    fi
    awk -v s="$setting" -v v="$variant" -v p="$phase" -v r="$round" -v np="$NP" '/^\{/ {
        sub(/^\{/, "{\"setting\":\"" s "\",\"variant\":\"" v "\",\"phase\":" p ",\"round\":" r ",\"np\":" np ",")
        print }' "$d.out" >>"$RAW"
    # The interposer's route, as rank 0 of MPI_COMM_WORLD logged it.
    if [ "$variant" != plain ]; then
        sed -n "s/^ina-mpi: job '[^']*' (communicator of $NP, \([a-z ]*\)): route \(.*\)/\1|\2/p" \
            "$d.err" | head -1 | "$PY" -c 'import json, sys
place, _, route = sys.stdin.read().strip().partition("|")
print(json.dumps({"setting": sys.argv[1], "variant": sys.argv[2], "round": int(sys.argv[3]),
                  "kind": "route", "placement": place, "route": route}))' \
            "$setting" "$variant" "$round" >>"$RAW"
    fi
}

bench_setting() { # SETTING
    local setting=$1 k v placement
    placement=onehost
    [ "$setting" = cluster ] && placement=hosts
    start_switch "$setting" || return 1
    log "$setting: np $NP, $RUNS rounds, sizes $SIZES; load $(cut -d' ' -f1-3 /proc/loadavg)"
    for ((k = 1; k <= RUNS; k++)); do
        for v in plain ina; do run "$setting" "$v" 1 "$k"; done
    done
    "$PY" bench/mpi_route_report.py table --raw "$RAW" --setting "$setting" \
        --placement "$placement" --np "$NP" --table "$TABLE" || return 1
    log "$setting: route table written to $TABLE"
    local variants=(plain table)
    [ "$CALIBRATE" = 1 ] && variants+=(calibrate)
    for ((k = 1; k <= RUNS; k++)); do
        for v in "${variants[@]}"; do run "$setting" "$v" 2 "$k"; done
    done
    stop_switch
}

mkdir -p "$(dirname "$TABLE")"
if has "$SETTINGS" onehost; then
    bench_setting onehost
fi
if has "$SETTINGS" cluster; then
    if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null; then
        log "SKIP cluster: network namespaces need root and iproute2"
    else
        ina_ns_reap_stale "$NS_PREFIX"
        CLUSTER=${NS_PREFIX}c$NP
        ina_ns_teardown "$CLUSTER" 2>/dev/null
        if INA_NS_SHARDS=0 ina_ns_setup "$CLUSTER" "$NP" "$RATE" "$MTU" && ina_ns_host_link "$CLUSTER"; then
            log "cluster: namespaces $CLUSTER*, tbf $RATE per worker link, MTU $MTU"
            bench_setting cluster
        else
            log "cluster setup failed: skipped"
        fi
        ina_ns_teardown "$CLUSTER"
        CLUSTER=
    fi
fi
cp "$RAW" "$OUT/mpi_route.jsonl"
cp "$TABLE" "$OUT/mpi_route_table.txt" 2>/dev/null
doc=()
[ "$DOCS" = 1 ] && doc=(--docs "$ROOT/docs/MPI.md")
"$PY" bench/mpi_route_report.py report --raw "$RAW" --np "$NP" --runs "$RUNS" \
    --load "$(cut -d' ' -f1-3 /proc/loadavg)" --out "$OUT/mpi_route.md" "${doc[@]}" || exit 1
cat "$OUT/mpi_route.md"
