#!/usr/bin/env bash
# device.sh: the figures that need a bigger host than the 2-core VM (issues 10, 11 and 14), in one
# time-boxed pass, for a 16-core host with a GPU that is lent for a few minutes. The parts run
# in the order of what is still to be measured (bench/results/device.md has the last pass).
#
# Builds a Release tree with every core, then runs each part below under its own time limit,
# never past the whole run's deadline, and writes everything to OUTDIR as it goes (a part cut
# short leaves what it printed). Parts, in order:
#   env       cores, load, compilers, OpenMPI, python and torch, the GPU
#   build     cmake Release, -j all cores (the eBPF dataplane off: it is not measured here)
#   glmscale  bench/glm.sh scale at N = 1, 2, 4, 8 on the compute-bound shape 2,048 x 200,000
#             with 16,000 nonzeros a row: B = 16 in micro-batches of 8 (P4SGD's smallest batch),
#             B = 256 in micro-batches of 8 and of 64; ina, ina busy-polling, OpenMPI over
#             shared memory; issue 34's target: speedup >= 0.8 N
#   onehost   bench/latency.sh at N = 2, 4, 8, 16, 32 B: ina's defaults (busy polling auto,
#             rings) beside OpenMPI TCP, OpenMPI vader and Gloo, p50 and p99 (issue 35)
#   latency   bench/glm.sh latency at N = 2, 4, 8, 16: defaults, fixed point, without busy
#             polling, OpenMPI TCP and vader, Gloo (issues 11, 35)
#   train     bench/glm.sh train at N = 1, 2, 4, 8 (issue 11), busy polling included; ina
#             against MPI over shared memory at N = 4 (issue 35)
#   gpucheck  bench/gpu_ddp.py, a small model, 5 steps: the CUDA hook path runs and its
#             gradients equal Gloo's (issue 14)
#   gpu       bench/gpu_ddp.py: DDP on cuda:0, N=4, 1.6M and 18.9M parameters, ina's hook and
#             the backend "ina" against Gloo (issue 14's target: ina's step <= Gloo's)
#   cluster   bench/compare.sh, emulated cluster (namespaces, tc), N=8, 64 MiB, M=8 dedicated
#             shards (results unicast, then multicast) against OpenMPI's ring and Gloo (issue 10);
#             needs root, ip and tc
#   defaults  bench/defaults.sh, N=4, 64 MiB: no tuning flag against a hand-tuned grid (lanes
#             2,4 x threads 4,8 x rings/UDP: the last pass's best was lanes 4, threads 8), Gloo
#             and OpenMPI (issue 14's targets: within 10% of the best, <= 0.5x Gloo)
#   pytest    tests/scripts/test_python.sh under this host's torch (the backend on torch 2.x)
#   defaults8 bench/defaults.sh at N=8 (fewer settings, one repetition), if time is left
#
# Usage: bench/device.sh [--out DIR] [--parts "env build ..."] [--deadline S] [--quick]
#   --out DIR       where the logs go (default $OUT if set, else bench/results/device)
#   --parts LIST    the parts to run, in the order above (default all)
#   --deadline S    seconds for the whole run (default 540); a part that would start with
#                   less than its minimum left is skipped and says so
#   --quick         tiny sizes and counts, to check the script itself on a small host
# Environment: INA_PYTHON, the python with torch (default: python3 if it imports torch, else
# /usr/bin/python3). OpenMPI's root guard is lifted (the device runs commands as root).
set -uo pipefail
exec </dev/null
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

usage() { sed -n '2,/^set -uo/p' "$ROOT/bench/device.sh" | sed '$d' | sed 's/^# \{0,1\}//'; }

OUTDIR=${OUT:-$ROOT/bench/results/device}
PARTS="env build onehost glmscale latency train gpucheck gpu cluster defaults pytest defaults8"
DEADLINE=540 QUICK=0
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUTDIR=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --help | -h) usage; exit 0 ;;
    *) echo "device.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUTDIR"
T0=$(date +%s)
LOG=$OUTDIR/device.log
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export INA_BUILD_DIR=$ROOT/build
CORES=$(nproc)

if [ -z "${INA_PYTHON:-}" ]; then
    if python3 -c 'import torch' 2>/dev/null; then INA_PYTHON=$(command -v python3)
    else INA_PYTHON=/usr/bin/python3; fi
fi
export INA_PYTHON
# A host without iproute2 (the device image has none): the copy carried in .dev/, if any.
if ! command -v tc >/dev/null && [ -x "$ROOT/.dev/iproute/bin/tc" ]; then
    export PATH=$PATH:$ROOT/.dev/iproute/bin
fi

say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((T0 + DEADLINE - $(date +%s))); }

# part NAME CAP MIN command...: run under min(CAP, time left), its output to OUTDIR/NAME.log
# and, from its first line, to the main log as it comes.
part() {
    local name=$1 cap=$2 min=$3
    shift 3
    case " $PARTS " in *" $name "*) ;; *) return 0 ;; esac
    local l
    l=$(left)
    if [ "$l" -lt "$min" ]; then
        say "### $name: SKIPPED, ${l}s left of the deadline (needs ${min}s)"
        return 0
    fi
    [ "$cap" -gt "$l" ] && cap=$l
    say "### $name: start at +$(($(date +%s) - T0))s, limit ${cap}s, load $(cut -d' ' -f1-3 /proc/loadavg)"
    local t=$(date +%s) rc
    # A shell function of this script runs in a child bash (it is exported below).
    [ "$(type -t "$1")" = function ] && set -- bash -c "$1"
    timeout -k 5 "$cap" "$@" 2>&1 | tee "$OUTDIR/$name.log" >>"$LOG"
    rc=${PIPESTATUS[0]}
    say "### $name: rc=$rc$([ "$rc" = 124 ] && echo ' (cut at its limit)') after $(($(date +%s) - t))s"
}

env_part() {
    echo "host $(hostname), $CORES cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
    echo "load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    for c in cc gcc clang cmake mpicc mpirun ip tc; do
        printf '%-7s %s\n' "$c" "$(command -v $c >/dev/null && ($c --version 2>&1 || $c -V 2>&1) | head -1 || echo missing)"
    done
    echo "python $INA_PYTHON: $($INA_PYTHON -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 | tail -1)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    return 0
}

build_part() {
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINA_EBPF=OFF >"$OUTDIR/build.cmake.log" 2>&1 ||
        { tail -30 "$OUTDIR/build.cmake.log"; return 1; }
    cmake --build build -j"$CORES" 2>&1 | grep -E 'warning|error|Error' | head -40
    [ -x build/bin/ina-switch ] && [ -x build/bin/ina-bench ] && [ -x build/bin/ina-glm ] &&
        [ -f build/lib/libina.so ] && echo "build: ok"
}

export -f env_part build_part
export CORES OUTDIR

if [ "$QUICK" = 1 ]; then
    GPU_ARGS=(--device cpu --standin --params 0.2M --nproc 2 --steps 3 --warmup 1)
    GPUCHECK_ARGS=("${GPU_ARGS[@]}")
    DEF_ARGS=(--size 1M --reps 1 --lanes 1,2 --threads 1,2)
    DEF8_ARGS=(--workers 3 --size 1M --reps 1 --lanes 1 --threads 1,2)
    LAT_ENV=(NS="2" SIZES="32" REPS=1 ITERS=50)
    ONE_ENV=(NS="2" REPS=1 ITERS=50)
    TRAIN_ENV=(NS="1 2" EPOCHS=2)
    GLMSCALE_ENV=(NS="1 2" SHAPES="1024x20000:500" SYSTEMS="ina" REPS=1 EPOCHS=2)
    GLMSCALE_BATCHES="16:8"
    CL_ARGS=(--workers 2 --sizes 1M --scale-sizes 1M)
else
    GPU_ARGS=(--nproc 4 --params 1.6M,18.9M --steps 20 --warmup 5)
    GPUCHECK_ARGS=(--nproc 4 --params 0.2M --steps 5 --warmup 2 --backends gloo,ina,ina-pg)
    DEF_ARGS=(--size 64M --reps 1 --lanes 2,4 --threads 4,8)
    DEF8_ARGS=(--workers 8 --size 64M --reps 1 --lanes 1,2 --threads 4,8)
    LAT_ENV=(NS="2 4 8 16" SIZES="32 1024" REPS=3 ITERS=300)
    ONE_ENV=(NS="2 4 8 16" REPS=3 ITERS=1000)
    TRAIN_ENV=(NS="1 2 4 8")
    GLMSCALE_ENV=(NS="1 2 4 8" SHAPES="2048x200000:16000" SYSTEMS="ina ina-busy mpi-shm" REPS=1
                  EPOCHS=3)
    GLMSCALE_BATCHES="16:8 256:8 256:64"
    CL_ARGS=(--workers 8 --sizes 64M --scale-sizes 64M)
fi

say "# bench/device.sh on $(hostname), $CORES cores, deadline ${DEADLINE}s, parts: $PARTS"
part env 20 5 env_part
part build 180 30 build_part
part onehost 100 30 env "${ONE_ENV[@]}" bash bench/latency.sh
part glmscale 200 40 env "${GLMSCALE_ENV[@]}" GLMSCALE_BATCHES="$GLMSCALE_BATCHES" bash -c \
    'for bm in $GLMSCALE_BATCHES; do BATCH=${bm%:*} MICRO=${bm#*:} bash bench/glm.sh scale || exit 1; done'
part latency 120 30 env "${LAT_ENV[@]}" bash bench/glm.sh latency
part train 90 30 env "${TRAIN_ENV[@]}" TRAIN_BUSY=100 bash bench/glm.sh train
part gpucheck 90 40 "$INA_PYTHON" bench/gpu_ddp.py "${GPUCHECK_ARGS[@]}"
part gpu 170 60 "$INA_PYTHON" bench/gpu_ddp.py "${GPU_ARGS[@]}"
part cluster 200 60 env BENCH_OUT="$OUTDIR/cluster" bash bench/compare.sh --no-install --no-docs \
    --settings cluster "${CL_ARGS[@]}" --cases dedicated,dedicated-mc --agg-link 1 --systems ina,openmpi,gloo \
    --float-add quantized --no-latency
part defaults 110 60 bash bench/defaults.sh "${DEF_ARGS[@]}" --out "$OUTDIR/defaults.md"
part pytest 90 45 bash tests/scripts/test_python.sh
part defaults8 90 45 bash bench/defaults.sh "${DEF8_ARGS[@]}" --out "$OUTDIR/defaults8.md"
say "# done at +$(($(date +%s) - T0))s"
