#!/usr/bin/env bash
# compare.sh: ina against OpenMPI (MPI_Allreduce) and Gloo (torch.distributed) on the same
# worker count, sizes and dtype, every result verified, in two settings:
#   cluster   switch and workers in their own network namespaces on one bridge, each worker's
#             link shaped with tbf to RATE both ways (default 1gbit), MTU 9000; OpenMPI and
#             Gloo ranks run in the same worker namespaces over the same links
#   loopback  everything on 127.0.0.1 (CPU-bound); OpenMPI also with shared memory (vader)
# Writes bench/results/latest.{md,png,jsonl} (and a copy of each run under
# bench/results/runs/), and, unless --quick, the tables into docs/BENCHMARKS.md and the
# headline figures into README.md (bench/report.py; --docs, --no-docs decide). Run as root on Debian; bench/deps.sh installs the peers (a peer that
# cannot be installed is skipped with a message). Never reads stdin. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF'
Usage: bench/compare.sh [--quick | --full] [options]

Compares ina (ina-switch + ina-bench) with OpenMPI's MPI_Allreduce and Gloo's all-reduce
(torch.distributed, backend gloo) on the same N, sizes and dtype; every result of every
system is verified on every rank. Medians of rank 0's per-iteration times are reported.

Modes (default: sizes 4K,64K,1M,16M,64M, cluster N=4,8, loopback N=4):
  --quick              sizes 4K,1M,16M, N=4 only
  --full               default sizes, cluster and loopback N=4,8, twice the iterations
Options:
  --sizes LIST         bytes per rank, suffix K/M/G (e.g. 4K,1M,64M)
  --workers LIST       worker counts of the emulated cluster (e.g. 4,8)
  --loop-workers LIST  worker counts on loopback (default 4)
  --dtype LIST         float32 (default), bfloat16, float16, int32 (fp32, bf16, fp16 for
                       short), or a comma list of them (e.g. fp32,bf16,fp16): every
                       measurement runs once per dtype. The first is the tables' dtype; the
                       others are compared with it in the section "By dtype" (each time
                       beside its ideal, bytes / link rate, and the ratios: dtype against
                       the first, ina against OpenMPI and Gloo on the same bytes). Peers:
                       OpenMPI sums half types as MPI_SHORT with a user-defined op (or
                       MPIX_C_FLOAT16 where MPI has it); Gloo in the type, or, if this
                       torch's Gloo has no bfloat16, is skipped for it (its float16 ring,
                       the same bytes, is the row to compare with)
  --elements LIST      sizes as elements per rank instead of bytes (e.g. 8M): each dtype
                       then moves count x its element size (fp32 against bf16 at the same
                       count); overrides --sizes, and the scale cases use them all
  --rate RATE          tbf rate of each worker link, both ways (default 1gbit)
  --mtu MTU            MTU of the emulated cluster (default 9000)
  --elems K            ina elements per packet on the cluster (default 2048)
  --float-add MODES    how ina adds floats: quantized (SwitchML's block floating
                       point, the library default; row "ina"), switch (the switch
                       adds float32 values as floats, INA_FLOAT_ADD_SWITCH in ina.h;
                       row "ina (float add)"), or quantized,switch (default: both)
  --no-shm             loopback: ina over UDP; by default the loopback switch runs with
                       --shm and the workers use shared-memory rings (PROTOCOL.md §5.9)
  --no-integrity       loopback: skip the row "ina (integrity)" (by default ina runs a
                       second time there, quantized, against a switch started with
                       --secret-file and --integrity: every DATA and result tagged,
                       PROTOCOL.md §4.6)
  --settings LIST      cluster,loopback (default both)
  --agg-link LIST      the cluster's aggregator hosts: "none" (their links unshaped: the model
                       of a hardware switch, row "ina"), or K (every aggregator link shaped to
                       K x RATE, like a host's NIC; K = a number or N) for the cases of
                       --cases (default none,1)
  --cases LIST         ina past one aggregator host (docs/SCALE.md), cluster only: one (one
                       switch), dedicated (N shard hosts), dedicated-mc (the same, each shard
                       multicasting its results: ina-switch --multicast), colocated (a shard
                       in each worker's namespace), tree (nodes of 2 ranks with a child switch
                       each and a parent tier of N/2 hosts), tree-peers (OpenMPI and Gloo on
                       those nodes); default one,dedicated,dedicated-mc,colocated,tree,
                       tree-peers; "none" for none
  --scale-sizes LIST   the sizes of those cases (default 16M,64M; "all" = --sizes)
  --systems LIST       ina,openmpi,gloo (default all; openmpi includes the shared-memory
                       row on loopback)
  --merge              keep the other systems' rows from results/latest.jsonl (for example
                       `--systems ina --merge` reruns only ina after a rebuild)
  --no-latency         skip the 256 B latency row (loopback, N=4)
  --no-install         do not run bench/deps.sh (peers that are missing are skipped)
  --no-docs            do not copy the tables into docs/BENCHMARKS.md and the headline
                       figures into README.md (by default both are rewritten between their
                       bench:latest and bench:headline markers, except with --quick)
  --docs               rewrite them even with --quick
  --iters-scale X      multiply the iteration counts (default 1; --full: 2)
  --help               this text

Iterations per size (timed + warmup): <=64K 50+5, <=1M 20+2, <=16M 10+1, larger 5+1.
Environment: INA_BUILD_DIR (default build), BENCH_OUT (default bench/results),
INA_BENCH_NS (the clusters' namespace prefix letter, default b: clusters bcN and btN).
EOF
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
OUT_DIR=${BENCH_OUT:-$ROOT/bench/results}
BB=$ROOT/bench/build

SIZES=4K,64K,1M,16M,64M
CL_WORKERS=4,8
LO_WORKERS=4
DTYPE=float32
ELEMENTS=
RATE=1gbit
MTU=9000
ELEMS=2048
FLOAT_ADD=quantized,switch
LO_SHM=1
LO_INTEGRITY=1
SETTINGS=cluster,loopback
SYSTEMS=ina,openmpi,gloo
AGG_LINKS=none,1
SCALE_CASES=one,dedicated,dedicated-mc,colocated,tree,tree-peers
SCALE_SIZES=16M,64M
MERGE=0
LATENCY=1
INSTALL=1
UPDATE_DOCS=auto
ITERS_SCALE=1
MODE=default

while [ $# -gt 0 ]; do
    case $1 in
        --quick) MODE=quick; SIZES=4K,1M,16M; CL_WORKERS=4; LO_WORKERS=4 ;;
        --full) MODE=full; SIZES=4K,64K,1M,16M,64M; CL_WORKERS=4,8; LO_WORKERS=4,8; ITERS_SCALE=2 ;;
        --sizes) SIZES=${2:?}; shift ;;
        --workers) CL_WORKERS=${2:?}; shift ;;
        --loop-workers) LO_WORKERS=${2:?}; shift ;;
        --dtype) DTYPE=${2:?}; shift ;;
        --elements) ELEMENTS=${2:?}; shift ;;
        --rate) RATE=${2:?}; shift ;;
        --mtu) MTU=${2:?}; shift ;;
        --elems) ELEMS=${2:?}; shift ;;
        --float-add) FLOAT_ADD=${2:?}; shift ;;
        --no-shm) LO_SHM=0 ;;
        --no-integrity) LO_INTEGRITY=0 ;;
        --settings) SETTINGS=${2:?}; shift ;;
        --agg-link) AGG_LINKS=${2:?}; shift ;;
        --cases) SCALE_CASES=${2:?}; shift ;;
        --scale-sizes) SCALE_SIZES=${2:?}; shift ;;
        --systems) SYSTEMS=${2:?}; shift ;;
        --merge) MERGE=1 ;;
        --no-latency) LATENCY=0 ;;
        --no-install) INSTALL=0 ;;
        --no-docs) UPDATE_DOCS=0 ;;
        --docs) UPDATE_DOCS=1 ;;
        --iters-scale) ITERS_SCALE=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "compare: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

DTYPES=()
for d in ${DTYPE//,/ }; do
    case $d in
        fp32 | float32) DTYPES+=(float32) ;;
        bf16 | bfloat16) DTYPES+=(bfloat16) ;;
        fp16 | float16) DTYPES+=(float16) ;;
        int32) DTYPES+=(int32) ;;
        *) echo "compare: bad --dtype '$d' (float32, bfloat16, float16, int32)" >&2; exit 2 ;;
    esac
done
[ ${#DTYPES[@]} -gt 0 ] || { echo "compare: empty --dtype" >&2; exit 2; }
DTYPE=${DTYPES[0]} # the tables' dtype; use_dtype switches it for each measurement
[ -z "$ELEMENTS" ] || [[ $ELEMENTS =~ ^[0-9]+[kKmMgG]?(,[0-9]+[kKmMgG]?)*$ ]] ||
    { echo "compare: bad --elements '$ELEMENTS'" >&2; exit 2; }
[[ $AGG_LINKS =~ ^(none|N|[0-9]+)(,(none|N|[0-9]+))*$ ]] ||
    { echo "compare: bad --agg-link '$AGG_LINKS' (want none, N or numbers)" >&2; exit 2; }
[[ ,$SCALE_CASES, =~ ^(,(one|dedicated|dedicated-mc|colocated|tree|tree-peers|none))+,$ ]] ||
    { echo "compare: bad --cases '$SCALE_CASES'" >&2; exit 2; }
case $FLOAT_ADD in quantized | switch | quantized,switch | switch,quantized) ;; *) echo "compare: bad --float-add '$FLOAT_ADD' (want quantized, switch or quantized,switch)" >&2; exit 2 ;; esac
[[ $ITERS_SCALE =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "compare: bad --iters-scale" >&2; exit 2; }

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
has() { [[ ,$1, == *,$2,* ]]; }

# ---- size arithmetic ------------------------------------------------------------------------

size_bytes() { # 4K -> 4096
    local s=$1 n
    case $s in
        *[kK]) n=$((${s%?} * 1024)) ;;
        *[mM]) n=$((${s%?} * 1024 * 1024)) ;;
        *[gG]) n=$((${s%?} * 1024 * 1024 * 1024)) ;;
        *) n=$s ;;
    esac
    echo "$n"
}

# "ITERS WARMUP" for a size in bytes, scaled by ITERS_SCALE.
iters_for() {
    local b=$1 it wu
    if [ "$b" -le 65536 ]; then it=50 wu=5
    elif [ "$b" -le 1048576 ]; then it=20 wu=2
    elif [ "$b" -le 16777216 ]; then it=10 wu=1
    else it=5 wu=1; fi
    awk -v i="$it" -v w="$wu" -v s="$ITERS_SCALE" 'BEGIN { i = int(i * s + 0.5); if (i < 1) i = 1; print i, w }'
}

# Groups of sizes that share an iteration count: lines "ITERS WARMUP MAXBYTES SIZE,SIZE,...".
make_groups() {
    local s b key
    declare -A g_sizes=() g_max=()
    local order=()
    for s in ${SIZES//,/ }; do
        b=$(size_bytes "$s") || return 1
        if [[ ! $b =~ ^[0-9]+$ ]] || [ "$b" -lt 4 ]; then
            echo "compare: bad size '$s'" >&2
            return 1
        fi
        key=$(iters_for "$b")
        if [ -z "${g_sizes[$key]+x}" ]; then order+=("$key"); g_sizes[$key]=$s; g_max[$key]=$b
        else g_sizes[$key]+=",$s"; [ "$b" -gt "${g_max[$key]}" ] && g_max[$key]=$b; fi
    done
    for key in "${order[@]}"; do echo "$key ${g_max[$key]} ${g_sizes[$key]}"; done
}

# Timeout (s) of one invocation: generous, from the largest size, the iterations and N.
group_timeout() { # ITERS WARMUP MAXBYTES N
    awk -v i="$1" -v w="$2" -v b="$3" -v n="$4" \
        'BEGIN { printf "%d\n", 90 + (i + w) * (b / 1048576) * 0.15 * n + (i + w) * 0.05 * n }'
}

# ---- preparation ---------------------------------------------------------------------------

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

if [ "$INSTALL" = 1 ]; then
    log "checking/installing peer packages (bench/deps.sh)"
    timeout 2400 bash "$ROOT/bench/deps.sh" >&2 || log "bench/deps.sh failed; missing peers will be skipped"
fi

if [ ! -x "$BUILD_DIR/bin/ina-bench" ] || [ ! -x "$BUILD_DIR/bin/ina-switch" ]; then
    log "$BUILD_DIR/bin/ina-bench missing: running make"
    timeout 1800 make -C "$ROOT" BUILD_DIR="$BUILD_DIR" >&2 || { log "make failed"; exit 1; }
fi
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
INA_BENCH=$BUILD_DIR/bin/ina-bench
INA_SWITCH=$BUILD_DIR/bin/ina-switch
[ -x "$INA_BENCH" ] || { log "no $INA_BENCH"; exit 1; }

mkdir -p "$BB" "$OUT_DIR/runs" || exit 1
STAMP=$(date +%Y%m%d-%H%M%S)
RUN=$OUT_DIR/runs/$STAMP
mkdir -p "$RUN" || exit 1
RAW=$RUN/raw.jsonl
: >"$RAW"
log "run directory: $RUN"

CC=${CC:-cc}
if ! $CC -O2 -Wall -I"$ROOT/src" -o "$BB/memcpy_rate" "$ROOT/bench/memcpy_rate.c" 2>"$RUN/build-memcpy.log"; then
    log "cannot build bench/memcpy_rate.c (see $RUN/build-memcpy.log)"
fi
if ! $CC -O2 -Wall -shared -fPIC -o "$BB/libbenchdata.so" "$ROOT/bench/benchdata.c" -lm \
    2>"$RUN/build-benchdata.log"; then
    log "cannot build bench/benchdata.c (see $RUN/build-benchdata.log)"
fi

TIME_BIN=
if [ -x /usr/bin/time ]; then TIME_BIN=/usr/bin/time
else log "GNU time (/usr/bin/time) missing: no worker peak RSS"; fi

PY=${INA_PYTHON:-/usr/bin/python3}
HAVE_MPI=0 HAVE_GLOO=0 HAVE_PLOT=0
if has "$SYSTEMS" openmpi; then
    if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
        if mpicc -O2 -Wall -o "$BB/mpi_allreduce" "$ROOT/bench/mpi_allreduce.c" \
            "$ROOT/bench/benchdata.c" -lm 2>"$RUN/build-mpi.log"; then
            HAVE_MPI=1
        else
            log "SKIP OpenMPI: mpicc failed (see $RUN/build-mpi.log)"
        fi
    else
        log "SKIP OpenMPI: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    fi
fi
if has "$SYSTEMS" gloo; then
    if [ ! -f "$BB/libbenchdata.so" ]; then
        log "SKIP Gloo: libbenchdata.so was not built"
    elif timeout 120 "$PY" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' \
        2>"$RUN/gloo-import.log"; then
        HAVE_GLOO=1
    else
        log "SKIP Gloo: $PY cannot import torch with Gloo (apt-get install python3-torch; see $RUN/gloo-import.log)"
    fi
fi
if timeout 120 "$PY" -c 'import matplotlib, numpy' 2>/dev/null; then HAVE_PLOT=1
else log "no matplotlib for $PY: no PNG (apt-get install python3-matplotlib)"; fi

# use_dtype DTYPE: measure DTYPE from now on: its sizes (--elements x its element size, or
# --sizes), iteration groups, and DSUF, the suffix of its run directories ("" for the first).
SIZES_BYTES=$SIZES
use_dtype() {
    local s es=4 out=
    DTYPE=$1
    case $DTYPE in bfloat16 | float16) es=2 ;; esac
    DSUF=
    [ "$DTYPE" != "${DTYPES[0]}" ] && DSUF=-$DTYPE
    if [ -n "$ELEMENTS" ]; then
        for s in ${ELEMENTS//,/ }; do out+=${out:+,}$(($(size_bytes "$s") * es)); done
        SIZES=$out
        SCALE_SIZES=all
    else
        SIZES=$SIZES_BYTES
    fi
    GROUPS_TXT=$(make_groups) || exit 2
    mapfile -t GROUPS_ARR <<<"$GROUPS_TXT"
}
use_dtype "${DTYPES[0]}"

# ---- cleanup ------------------------------------------------------------------------------

# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
# shellcheck source=bench/ranks.sh
source "$ROOT/bench/ranks.sh"
# shellcheck source=bench/scale.sh
source "$ROOT/bench/scale.sh"
NS_PREFIX=${INA_BENCH_NS:-b}
[[ $NS_PREFIX =~ ^[a-z]$ ]] || { echo "compare: INA_BENCH_NS must be one letter a-z" >&2; exit 2; }
RANKS_PER_NS=1 # ranks per worker namespace for the peers (2 on the tree's nodes)
PEER_SUFFIX=   # and their label's suffix
CLUSTER=          # prefix of the cluster that is up
LO_SWITCH_PID=    # loopback switch
BG_PIDS=()        # worker launches of the current step

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local p
    for p in "${BG_PIDS[@]}" "${SCALE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    if [ -n "$LO_SWITCH_PID" ]; then kill -TERM "$LO_SWITCH_PID" 2>/dev/null; fi
    if [ -n "$CLUSTER" ]; then ina_ns_teardown "$CLUSTER"; CLUSTER=; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Records: each JSON line gets "setting", "label" and "part" in front; PARTS is one part for
# all lines or a comma list with one per line (main = the tables, latency = the latency row).
tag_json() { # SETTING LABEL PARTS < json lines
    awk -v s="$1" -v l="$2" -v p="$3" 'BEGIN { np = split(p, pa, ",") }
        /^\{/ { i++; part = (np == 1 ? pa[1] : pa[i])
                sub(/^\{/, "{\"setting\":\"" s "\",\"label\":\"" l "\",\"part\":\"" part "\",")
                print }'
}

# A failure record with the command and the tail of its output (JSON via python).
record_failure() { # SETTING LABEL N RC CMDFILE LOG...
    local setting=$1 label=$2 n=$3 rc=$4 cmdf=$5
    shift 5
    log "FAILED: $label ($setting, N=$n), exit status $rc; command in $cmdf, output in $*"
    "$PY" - "$setting" "$label" "$n" "$rc" "$cmdf" "$@" >>"$RAW" <<'PYEOF'
import json, sys
setting, label, n, rc, cmdf = sys.argv[1:6]
tails = {}
for f in sys.argv[6:]:
    try:
        with open(f, errors="replace") as fh:
            lines = fh.read().splitlines()
        tails[f] = "\n".join(lines[-15:])
    except OSError:
        pass
try:
    cmd = open(cmdf).read().strip()
except OSError:
    cmd = "?"
print(json.dumps({"kind": "failure", "setting": setting, "label": label, "workers": int(n),
                  "rc": int(rc), "cmd": cmd, "output_tail": tails}))
PYEOF
}

# Peak RSS (KiB) of the files /usr/bin/time wrote, as "max min" over ranks.
rss_of() {
    cat "$@" 2>/dev/null | awk '/^[0-9]+$/ { if (!n || $1 > mx) mx = $1; if (!n || $1 < mn) mn = $1; n++ }
                                END { if (n) print mx, mn }'
}

# Gloo rendezvous ports: a fresh one per launch (no TIME_WAIT collisions), from the PID.
PORT_BASE=$((20000 + $$ % 20000))

# ---- ina ----------------------------------------------------------------------------------

# start_switch SETTING LISTEN LOGPREFIX: sets SW_PID and SW_ADDR (HOST:PORT). The switch also
# gets the options in the array SW_EXTRA (the integrity row's).
SW_EXTRA=()
start_switch() {
    local setting=$1 listen=$2 lp=$3 pf=$3.port i host=${2%:*}
    rm -f "$pf"
    if [ "$setting" = cluster ]; then
        ip netns exec "${CLUSTER}sw" "$INA_SWITCH" --listen "$listen" --port-file "$pf" \
            >"$lp.out" 2>"$lp.err" &
    else
        local shm=()
        [ "$LO_SHM" = 1 ] && shm=(--shm) # one host: the workers use shared-memory rings
        "$INA_SWITCH" --listen "$listen" --port-file "$pf" "${shm[@]}" "${SW_EXTRA[@]}" \
            >"$lp.out" 2>"$lp.err" &
    fi
    SW_PID=$!
    [ "$setting" = loopback ] && LO_SWITCH_PID=$SW_PID
    for ((i = 0; i < 100; i++)); do
        [ -s "$pf" ] && break
        kill -0 "$SW_PID" 2>/dev/null || break
        sleep 0.05
    done
    if [ ! -s "$pf" ]; then
        log "ina-switch did not start (see $lp.err)"
        kill -TERM "$SW_PID" 2>/dev/null
        SW_PID=
        return 1
    fi
    SW_ADDR=$host:$(cat "$pf")
}

# stop_switch SETTING N LOGPREFIX: VmHWM just before SIGTERM; a "mem" record.
stop_switch() {
    local setting=$1 n=$2 lp=$3 hwm rss
    [ -n "$SW_PID" ] || return 0
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SW_PID/status" 2>/dev/null)
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SW_PID/status" 2>/dev/null)
    kill -TERM "$SW_PID" 2>/dev/null
    timeout 10 tail --pid="$SW_PID" -f /dev/null 2>/dev/null
    kill -KILL "$SW_PID" 2>/dev/null
    wait "$SW_PID" 2>/dev/null
    [ "$setting" = loopback ] && LO_SWITCH_PID=
    SW_PID=
    printf '{"kind":"mem","setting":"%s","label":"ina-switch","workers":%d,"vmhwm_kib":%s,"vmrss_kib":%s}\n' \
        "$setting" "$n" "${hwm:-null}" "${rss:-null}" >>"$RAW"
    log "ina-switch ($setting, N=$n): VmHWM ${hwm:-?} KiB; non-zero counters: $(awk 'NF == 2 && $2 ~ /^[0-9]+$/ && $2 > 0 { printf "%s=%s ", $1, $2 }' "$lp.err")"
}

# run_ina SETTING N PART ITERS WARMUP SIZES TIMEOUT: N workers against the running switch, one
# ina-bench launch per iteration group (its --iters is one count for all sizes).
# run_ina SETTING N PART ITERS WARMUP SIZES TIMEOUT MODE: MODE quantized (label ina),
# switch (label ina-f32: the switch adds the floats) or integrity (label ina-mac: quantized,
# every DATA and result tagged; the switch must run with --secret-file $SECRET --integrity).
run_ina() {
    local setting=$1 n=$2 part=$3 it=$4 wu=$5 sizes=$6 to=$7 mode=$8 r d rc=0 job mx mn label=ina
    [ "$mode" = switch ] && label=ina-f32
    [ "$mode" = integrity ] && label=ina-mac
    d=$RUN/$setting-n$n-$label$DSUF-$part-i$it
    mkdir -p "$d"
    job=b$part$it-$n-$$-$mode$DSUF
    job=${job:0:31}
    local extra=()
    [ "$setting" = cluster ] && extra=(--elems "$ELEMS")
    local envs=()
    if [ "$mode" = integrity ]; then
        extra+=(--float-add quantized)
        envs=(env "INA_SECRET_FILE=$SECRET" INA_INTEGRITY=1)
    else
        extra+=(--float-add "$mode")
    fi
    : >"$d/cmd"
    for ((r = 0; r < n; r++)); do
        local cmd=(timeout -k 5 "$to" "${envs[@]}")
        [ "$setting" = cluster ] && cmd=(ip netns exec "${CLUSTER}w$r" "${cmd[@]}")
        [ -n "$TIME_BIN" ] && cmd+=("$TIME_BIN" -f %M -o "$d/rss.$r")
        cmd+=("$INA_BENCH" --switch "$SW_ADDR" --rank "$r" --world "$n" --job "$job" --json
            --sizes "$sizes" --dtype "$DTYPE" --iters "$it" --warmup "$wu" "${extra[@]}"
            --deadline-s "$to")
        start_rank "$d" "$r" "${cmd[@]}"
    done
    wait_ranks
    tag_json "$setting" "$label" "$part" <"$d/out.0" >>"$RAW"
    if [ -n "$TIME_BIN" ] && [ "$label" = ina ]; then
        read -r mx mn < <(rss_of "$d"/rss.*) && printf '{"kind":"mem","setting":"%s","label":"ina-worker","part":"%s","workers":%d,"sizes":"%s","maxrss_kib_max":%s,"maxrss_kib_min":%s}\n' \
            "$setting" "$part" "$n" "$sizes" "$mx" "$mn" >>"$RAW"
    fi
    if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$d/out.0"; then
        record_failure "$setting" "$label" "$n" "$rc" "$d/cmd" "$d"/err.* "$SW_LOG.err"
        return 1
    fi
    log "$label ($setting, N=$n, $sizes): $(summarize "$d/out.0")"
}

summarize() { # one "size: ms" per JSON line
    sed -n 's/.*"bytes":\([0-9]*\).*"time_s":\([^,]*\),.*"ok":\([a-z]*\).*/\1 \2 \3/p' "$1" |
        awk '{ printf "%s B %.3f ms%s; ", $1, $2 * 1e3, ($3 == "true" ? "" : " FAIL") }'
}

# ---- OpenMPI ------------------------------------------------------------------------------

# run_mpi SETTING N PARTS ITERS WARMUP SIZES TIMEOUT BTL: one mpirun for all sizes (ITERS and
# WARMUP: comma lists, one per size).
run_mpi() {
    local setting=$1 n=$2 part=$3 it=$4 wu=$5 sizes=$6 to=$7 btl=$8 r d rc label mx mn
    label=openmpi-$btl$PEER_SUFFIX
    d=$RUN/$setting-n$n-$label$DSUF
    mkdir -p "$d"
    local mca=(--mca pml ob1)
    # "tcp,self" is one MCA value, not two array elements.
    # shellcheck disable=SC2054
    if [ "$btl" = shm ]; then
        mca+=(--mca btl vader,self)
    elif [ "$setting" = cluster ]; then
        mca+=(--mca btl tcp,self --mca btl_tcp_if_include "$(ina_ns_subnet "$CLUSTER").0/24"
            --mca oob_tcp_if_include "${CLUSTER}h")
    else
        mca+=(--mca btl tcp,self --mca btl_tcp_if_include lo)
    fi
    local cmd=(timeout -k 5 "$to" mpirun --allow-run-as-root --oversubscribe --bind-to none
        "${mca[@]}")
    for ((r = 0; r < n; r++)); do
        [ "$r" -gt 0 ] && cmd+=(:)
        cmd+=(-np 1)
        [ "$setting" = cluster ] && cmd+=(ip netns exec "${CLUSTER}w$((r / RANKS_PER_NS))")
        [ -n "$TIME_BIN" ] && cmd+=("$TIME_BIN" -f %M -o "$d/rss.$r")
        cmd+=("$BB/mpi_allreduce" --sizes "$sizes" --dtype "$DTYPE" --iters "$it"
            --warmup "$wu" --system "$label")
    done
    local envs=()
    [ "$setting" = cluster ] && envs=(PMIX_MCA_ptl_tcp_if_include="${CLUSTER}h"
        PMIX_MCA_ptl_tcp_remote_connections=1)
    { [ ${#envs[@]} -gt 0 ] && printf '%q ' env "${envs[@]}"; printf '%q ' "${cmd[@]}"; echo; } >"$d/cmd"
    env "${envs[@]}" "${cmd[@]}" >"$d/out" 2>"$d/err"
    rc=$?
    tag_json "$setting" "$label" "$part" <"$d/out" >>"$RAW"
    if [ -n "$TIME_BIN" ]; then
        read -r mx mn < <(rss_of "$d"/rss.*) && printf '{"kind":"mem","setting":"%s","label":"%s-rank","part":"%s","workers":%d,"sizes":"%s","maxrss_kib_max":%s,"maxrss_kib_min":%s}\n' \
            "$setting" "$label" all "$n" "$sizes" "$mx" "$mn" >>"$RAW"
    fi
    if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$d/out"; then
        record_failure "$setting" "$label" "$n" "$rc" "$d/cmd" "$d/err"
        return 1
    fi
    log "$label ($setting, N=$n, $sizes): $(summarize "$d/out")"
}

# ---- Gloo ---------------------------------------------------------------------------------

# run_gloo SETTING N PARTS ITERS WARMUP SIZES TIMEOUT: one launch of N ranks for all sizes.
run_gloo() {
    local setting=$1 n=$2 part=$3 it=$4 wu=$5 sizes=$6 to=$7 r d rc=0 master ifname port
    local mx mn
    d=$RUN/$setting-n$n-gloo$PEER_SUFFIX$DSUF
    mkdir -p "$d"
    PORT_BASE=$((PORT_BASE + 1))
    port=$PORT_BASE
    if [ "$setting" = cluster ]; then
        master=$(ina_ns_ip "$CLUSTER" w0):$port
        ifname=eth0
    else
        master=127.0.0.1:$port
        ifname=lo
    fi
    : >"$d/cmd"
    for ((r = 0; r < n; r++)); do
        local cmd=(timeout -k 5 "$to")
        [ "$setting" = cluster ] && cmd=(ip netns exec "${CLUSTER}w$((r / RANKS_PER_NS))" "${cmd[@]}")
        cmd+=(env "GLOO_SOCKET_IFNAME=$ifname" OMP_NUM_THREADS=1)
        [ -n "$TIME_BIN" ] && cmd+=("$TIME_BIN" -f %M -o "$d/rss.$r")
        cmd+=("$PY" "$ROOT/bench/gloo_allreduce.py" --rank "$r" --world "$n" --master "$master"
            --lib "$BB/libbenchdata.so" --sizes "$sizes" --dtype "$DTYPE" --iters "$it"
            --warmup "$wu" --timeout-s "$to")
        start_rank "$d" "$r" "${cmd[@]}"
    done
    wait_ranks
    if [ "$rc" -eq 4 ] && grep -q '"skip"' "$d/out.0"; then
        log "SKIP gloo $DTYPE ($setting, N=$n): $(sed -n 's/.*"skip": *"\([^"]*\)".*/\1/p' "$d/out.0")"
        return 0
    fi
    tag_json "$setting" "gloo$PEER_SUFFIX" "$part" <"$d/out.0" >>"$RAW"
    if [ -n "$TIME_BIN" ]; then
        read -r mx mn < <(rss_of "$d"/rss.*) && printf '{"kind":"mem","setting":"%s","label":"gloo%s-rank","part":"%s","workers":%d,"sizes":"%s","maxrss_kib_max":%s,"maxrss_kib_min":%s}\n' \
            "$setting" "$PEER_SUFFIX" all "$n" "$sizes" "$mx" "$mn" >>"$RAW"
    fi
    if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$d/out.0"; then
        record_failure "$setting" "gloo$PEER_SUFFIX" "$n" "$rc" "$d/cmd" "$d"/err.*
        return 1
    fi
    log "gloo$PEER_SUFFIX ($setting, N=$n, $sizes): $(summarize "$d/out.0")"
}

# ---- one setting, one N -------------------------------------------------------------------

# run_all SETTING N: every system over every size (and the latency part on loopback N=4).
run_all() {
    local setting=$1 n=$2 g it wu mx sizes to btl s part mode
    local parts=() p_sizes='' p_iters='' p_warm='' p_parts='' p_to=0
    for g in "${GROUPS_ARR[@]}"; do parts+=("$g main"); done
    if [ "$setting" = loopback ] && [ "$LATENCY" = 1 ] && [ "$n" = 4 ]; then
        read -r it wu < <(iters_for 256)
        parts+=("$((it * 4)) $((wu * 4)) 256 256 latency")
    fi
    # The peers' single launch: all sizes, iteration counts per size.
    for g in "${parts[@]}"; do
        read -r it wu mx sizes part <<<"$g"
        for s in ${sizes//,/ }; do
            p_sizes+=${p_sizes:+,}$s p_iters+=${p_iters:+,}$it p_warm+=${p_warm:+,}$wu
            p_parts+=${p_parts:+,}$part
        done
        p_to=$((p_to + $(group_timeout "$it" "$wu" "$mx" "$n")))
    done
    if has "$SYSTEMS" ina; then
        local listen=127.0.0.1:0
        [ "$setting" = cluster ] && listen=$(ina_ns_ip "$CLUSTER" sw):48864
        SW_LOG=$RUN/$setting-n$n-switch
        if start_switch "$setting" "$listen" "$SW_LOG"; then
            for mode in ${FLOAT_ADD//,/ }; do
                [ "$mode" = switch ] && [ "$DTYPE" = int32 ] && continue # floats only
                for g in "${parts[@]}"; do
                    read -r it wu mx sizes part <<<"$g"
                    to=$(group_timeout "$it" "$wu" "$mx" "$n")
                    run_ina "$setting" "$n" "$part" "$it" "$wu" "$sizes" "$to" "$mode"
                done
            done
            stop_switch "$setting" "$n" "$SW_LOG"
        else
            echo "$INA_SWITCH --listen $listen --port-file $SW_LOG.port" >"$SW_LOG.cmd"
            record_failure "$setting" ina "$n" 1 "$SW_LOG.cmd" "$SW_LOG.err"
        fi
    fi
    # The same on loopback with per-packet integrity: its cost against the row "ina".
    if has "$SYSTEMS" ina && [ "$setting" = loopback ] && [ "$LO_INTEGRITY" = 1 ]; then
        SECRET=$RUN/secret
        printf 'compare.sh %s %s\n' "$STAMP" "$$" >"$SECRET"
        SW_LOG=$RUN/$setting-n$n-switch-mac
        SW_EXTRA=(--secret-file "$SECRET" --integrity)
        if start_switch "$setting" 127.0.0.1:0 "$SW_LOG"; then
            for g in "${parts[@]}"; do
                read -r it wu mx sizes part <<<"$g"
                to=$(group_timeout "$it" "$wu" "$mx" "$n")
                run_ina "$setting" "$n" "$part" "$it" "$wu" "$sizes" "$to" integrity
            done
            stop_switch "$setting" "$n" "$SW_LOG"
        else
            echo "$INA_SWITCH --listen 127.0.0.1:0 --port-file $SW_LOG.port ${SW_EXTRA[*]}" >"$SW_LOG.cmd"
            record_failure "$setting" ina-mac "$n" 1 "$SW_LOG.cmd" "$SW_LOG.err"
        fi
        SW_EXTRA=()
    fi
    if [ "$HAVE_MPI" = 1 ]; then
        local btls=tcp
        [ "$setting" = loopback ] && btls="tcp shm"
        for btl in $btls; do
            run_mpi "$setting" "$n" "$p_parts" "$p_iters" "$p_warm" "$p_sizes" "$p_to" "$btl"
        done
    fi
    if [ "$HAVE_GLOO" = 1 ]; then
        run_gloo "$setting" "$n" "$p_parts" "$p_iters" "$p_warm" "$p_sizes" "$p_to"
    fi
}

# ---- main ---------------------------------------------------------------------------------

T_START=$(date +%s)
MEMCPY_JSON=
if [ -x "$BB/memcpy_rate" ] && has "$SETTINGS" loopback; then
    MEMCPY_JSON=$(timeout 60 "$BB/memcpy_rate" 64 2)
    log "memcpy (one core): $MEMCPY_JSON"
fi
NCORES=$(nproc)
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_DIRTY=
if git -C "$ROOT" status --porcelain -- src include tools 2>/dev/null | grep -q .; then
    GIT_DIRTY=+uncommitted
fi
printf '{"kind":"config","mode":"%s","sizes":"%s","cluster_workers":"%s","loopback_workers":"%s","dtype":"%s","dtypes":"%s","elements":"%s","rate":"%s","mtu":%d,"elems":%d,"float_add":"%s","lo_shm":%d,"systems":"%s","settings":"%s","ncores":%d,"git":"%s%s","date":"%s","kernel":"%s","iters_scale":"%s","loadavg_start":"%s","tbf_burst":"%s","agg_links":"%s","scale_cases":"%s","scale_sizes":"%s","memcpy":%s}\n' \
    "$MODE" "$SIZES" "$CL_WORKERS" "$LO_WORKERS" "$DTYPE" "$(IFS=,; echo "${DTYPES[*]}")" "$ELEMENTS" "$RATE" "$MTU" "$ELEMS" "$FLOAT_ADD" "$LO_SHM" "$SYSTEMS" \
    "$SETTINGS" "$NCORES" "$GIT_REV" "$GIT_DIRTY" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -r)" \
    "$ITERS_SCALE" "$(cut -d' ' -f1-3 /proc/loadavg)" "${INA_NS_BURST:-128kb}" \
    "$AGG_LINKS" "$SCALE_CASES" "$SCALE_SIZES" \
    "${MEMCPY_JSON:-null}" >>"$RAW"

if has "$SETTINGS" cluster; then
    if [ "$IS_ROOT" != 1 ]; then
        log "SKIP cluster setting: network namespaces need root"
    elif ! command -v tc >/dev/null || ! command -v ip >/dev/null; then
        log "SKIP cluster setting: ip/tc (iproute2) missing"
    else
        ina_ns_reap_stale "$NS_PREFIX"
        for n in ${CL_WORKERS//,/ }; do
            CLUSTER=${NS_PREFIX}c$n
            ina_ns_teardown "$CLUSTER" 2>/dev/null
            # The emulated hosts (N workers, up to N aggregator hosts, the switch) share this
            # machine's cores: each gets its share for ina's automatic defaults (lanes, switch
            # threads), as a real host of the cluster would count its own. Without this, on a
            # 16-core machine every namespace took 4 lanes and 8 switch threads for itself, and
            # 8 shards of 8 threads and 32 lanes oversubscribed the cores and overran the tbf
            # queues (1637 ms and 159,381 retransmissions at N=8, 64 MiB).
            export INA_AUTO_CORES=$((NCORES / (2 * n + 1) > 0 ? NCORES / (2 * n + 1) : 1))
            log "cluster N=$n: namespaces $CLUSTER*, tbf $RATE both ways per worker, MTU $MTU; each emulated host counts $INA_AUTO_CORES core(s) (INA_AUTO_CORES)"
            # Dedicated shard hosts for the scale cases (netns.sh has 8 at most).
            shards=0
            if has "$SYSTEMS" ina && { has "$SCALE_CASES" dedicated || has "$SCALE_CASES" dedicated-mc; } &&
                [ "$n" -le 8 ]; then
                shards=$n
            fi
            if ! INA_NS_SHARDS=$shards ina_ns_setup "$CLUSTER" "$n" "$RATE" "$MTU" ||
                ! ina_ns_host_link "$CLUSTER"; then
                log "cluster setup failed: skipping cluster N=$n"
                ina_ns_teardown "$CLUSTER"
                CLUSTER=
                continue
            fi
            for dt in "${DTYPES[@]}"; do
                use_dtype "$dt"
                if has "$AGG_LINKS" none || ! has "$SYSTEMS" ina; then
                    run_all cluster "$n"
                else
                    SYSTEMS=${SYSTEMS/ina/} run_all cluster "$n" # the peers only
                fi
                has "$SYSTEMS" ina && scale_flat "$n"
            done
            ina_ns_teardown "$CLUSTER"
            CLUSTER=
            for dt in "${DTYPES[@]}"; do
                use_dtype "$dt"
                if has "$SYSTEMS" ina && { has "$SCALE_CASES" tree || has "$SCALE_CASES" tree-peers; }; then
                    scale_tree "$n"
                fi
            done
        done
        unset INA_AUTO_CORES
    fi
fi

if has "$SETTINGS" loopback; then
    for n in ${LO_WORKERS//,/ }; do
        for dt in "${DTYPES[@]}"; do
            use_dtype "$dt"
            log "loopback N=$n, $DTYPE"
            run_all loopback "$n"
        done
    done
fi
log "measurements took $(($(date +%s) - T_START)) s"
printf '{"kind":"end","elapsed_s":%d,"loadavg_end":"%s"}\n' "$(($(date +%s) - T_START))" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"

# ---- report -------------------------------------------------------------------------------

REPORT_ARGS=(--raw "$RAW" --out "$OUT_DIR" --rate "$RATE")
[ "$MERGE" = 1 ] && [ -f "$OUT_DIR/latest.jsonl" ] && REPORT_ARGS+=(--merge "$OUT_DIR/latest.jsonl")
[ "$HAVE_PLOT" = 1 ] || REPORT_ARGS+=(--no-plot)
[ "$UPDATE_DOCS" = auto ] && { [ "$MODE" = quick ] && UPDATE_DOCS=0 || UPDATE_DOCS=1; }
[ "$UPDATE_DOCS" = 1 ] && REPORT_ARGS+=(--benchmarks "$ROOT/docs/BENCHMARKS.md" --readme "$ROOT/README.md")
if ! timeout 300 "$PY" "$ROOT/bench/report.py" "${REPORT_ARGS[@]}"; then
    log "report.py failed; raw results in $RAW"
    exit 1
fi
if [ ${#DTYPES[@]} -gt 1 ] || [ -n "$ELEMENTS" ]; then
    timeout 120 "$PY" "$ROOT/bench/dtype_report.py" --raw "$RAW" --rate "$RATE" \
        --dtypes "$(IFS=,; echo "${DTYPES[*]}")" >>"$OUT_DIR/latest.md" ||
        log "dtype_report.py failed; raw results in $RAW"
fi
cp "$OUT_DIR/latest.md" "$RUN/" 2>/dev/null
[ -f "$OUT_DIR/latest.png" ] && cp "$OUT_DIR/latest.png" "$RUN/"
cat "$OUT_DIR/latest.md"
if grep -q '"kind": *"failure"' "$OUT_DIR/latest.jsonl" 2>/dev/null || grep -q '"ok":false' "$RAW"; then
    log "some runs failed or did not verify: see the Failures section above"
    exit 3
fi
exit 0
