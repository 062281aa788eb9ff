#!/usr/bin/env bash
# glm.sh: issue 11's and 34's benchmarks (docs/GLM.md): small all-reduce latency, ina-glm
# training, and ina-glm's scaling against N from communication-bound to compute-bound shapes.
#
#   bash bench/glm.sh latency   p50 and p99 of 32 B..1 KiB float32 all-reduces at N = 2, 4 (NS;
#                               and 8, 16 on a host of 16 cores or more): ina with its defaults
#                               first (rings, busy polling auto), ina in fixed point (Q8.23,
#                               one round, as ina-glm), ina without busy polling (workers and
#                               switch: 0), OpenMPI over TCP and over shared memory (vader),
#                               Gloo (if /usr/bin/python3 has torch), and the ideal: one round
#                               trip through the switch with no other rank to wait for (ina at
#                               N = 1). Interleaved over REPS rounds (default 3) of ITERS timed
#                               iterations (default 300); every result verified by the tools.
#                               Prints the medians over rounds and ratios to OpenMPI and Gloo.
#   bash bench/glm.sh train     ina-glm on the rcv1-shaped generated data (logistic, B = 16,
#                               W = 2, lr 8): time to the target objective TARGET (default
#                               0.40) and per epoch (compute / communication) at N = 1, 2, 4
#                               (NS), --comm ina against --comm mpi (TCP; shared memory too),
#                               model- against data-parallel at the largest N, the speedup
#                               against N beside the ideal (linear: local time / N).
#   bash bench/glm.sh scale     ina-glm's time per epoch and to a target against N (NS, default
#                               "1 2 4") on generated shapes (SHAPES, default 8,192 rows x
#                               200,000 features with 16, 64, 256, 1,000 and 4,000 nonzeros a
#                               row, and 2,048 x 200,000 with 16,000), logistic, lr 8, B = BATCH
#                               (16), micro-batches of MICRO (8), all of a mini-batch in flight.
#                               The target of a shape is the objective one process (--comm
#                               local) reaches in EPOCHS (3) epochs: every run follows the same
#                               trajectory, so time to target is time for the same work. Systems
#                               (SYSTEMS): ina, ina-busy (workers and switch busy-polling BUSY
#                               us, default 100), mpi-tcp, mpi-shm (OpenMPI over TCP and over
#                               shared memory, vader), all N > 1; ina also at N = 1 (its cost
#                               with nobody to wait for). REPS rounds (default 3), interleaved;
#                               medians. Prints per shape: epoch s, time to target, speedup
#                               against one process, s/epoch waiting for sums (wait), CPU s/epoch
#                               of rank 0 (cpu: wall - cpu is the host's other load and sleep),
#                               all-reduces/epoch, and us exposed per all-reduce; then the
#                               crossover: the nonzeros a row (interpolated in log) above which
#                               N workers beat one process; and speedup / N on the last shape
#                               against GOAL (default 0.8). The raw lines go to SCALE_RAW if set.
#   bash bench/glm.sh all       latency and train.
#   (ina-glm at N = 4 on one host against MPI over shared memory: `train`, rows ina and
#   mpi-shm; ina runs its defaults there, busy polling included.)
#
# Environment: INA_BUILD_DIR (default build), NS (default "2 4" for latency, "1 2 4" for train
# and scale), SIZES (default "32 256 1024"), REPS, ITERS, TARGET, EPOCHS (default 6; scale 3),
# BATCH (16), WINDOW (train: 2: micro-batches of 8 in flight; at most BATCH/8 are useful),
# TRAIN_BUSY (train: US > 0 adds the row ina-busy, workers and switch busy-polling up to US
# microseconds; for hosts with spare cores). Needs OpenMPI and bench/build/mpi_allreduce
# (bench/compare.sh builds it; this script does if it is missing).
# Run under the team's lock: flock /work/locks/bench.lock bash bench/glm.sh all
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ] || [ $# -ne 1 ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    [ $# -eq 1 ] && exit 0 || exit 2
fi
what=$1
case $what in latency | train | scale | all) ;; *) echo "glm.sh: unknown '$what' (see --help)" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
PY=${INA_PYTHON:-/usr/bin/python3}
[ -x $PY ] || PY=python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_TCP=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
MPI_SHM=(--mca pml ob1 --mca btl vader,self --mca oob_tcp_if_include lo)
mpi_bin=$here/build/mpi_allreduce
for t in ina-bench ina-glm ina-switch; do
    [ -x "$build/bin/$t" ] || { echo "glm.sh: $build/bin/$t missing (make)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "glm.sh: mpirun missing (bench/deps.sh)" >&2; exit 1; }
if [ ! -x "$mpi_bin" ]; then
    mkdir -p "$here/build"
    mpicc -O2 -Wall -o "$mpi_bin" "$here/mpi_allreduce.c" "$here/benchdata.c" -lm
fi
echo "# glm.sh $what on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"

# One JSON line of a verified run -> "p50_us p99_us"
times_of() {
    $PY -c 'import json, sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l)
        assert d["ok"], "a result was wrong"
        print("%.2f %.2f" % (d["time_s"] * 1e6, d["time_p99_s"] * 1e6))'
}

latency() {
    local dflt_ns="2 4"
    [ "$(nproc)" -ge 16 ] && dflt_ns="2 4 8 16"
    local NS=${NS:-$dflt_ns} SIZES=${SIZES:-32 256 1024} REPS=${REPS:-3} ITERS=${ITERS:-300}
    local raw gloo=1 bd_lib=$here/build/libbenchdata.so
    raw=$(mktemp)
    if ! $PY -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
        echo "# Gloo skipped: $PY cannot import torch with Gloo"
        gloo=0
    fi
    [ "$gloo" = 1 ] && [ ! -f "$bd_lib" ] &&
        cc -O2 -Wall -shared -fPIC -o "$bd_lib" "$here/benchdata.c" -lm
    echo "## latency: float32 SUM, $ITERS iterations x $REPS rounds (medians over rounds)"
    for ((rep = 1; rep <= REPS; rep++)); do
        for n in $NS; do
            for size in $SIZES; do
                local ib=("$build/bin/ina-bench" --sizes "$size" --dtype float32 --iters "$ITERS"
                          --warmup 50 --json)
                run() { # system command...
                    local sys=$1
                    shift
                    echo "$n $size $sys $(timeout 120 "$@" 2>/dev/null | times_of)" >>"$raw"
                }
                run ina "${ib[@]}" --local "$n"
                run ina-fixed "${ib[@]}" --local "$n" --fixed-point 23
                run ina-nopoll "${ib[@]}" --local "$n" --busy-poll 0 --switch-busy-poll 0
                run ideal "${ib[@]}" --local 1
                run openmpi-tcp mpirun --oversubscribe --bind-to none "${MPI_TCP[@]}" -np "$n" \
                    "$mpi_bin" --sizes "$size" --dtype float32 --iters "$ITERS" --warmup 50 \
                    --system openmpi-tcp
                run openmpi-shm mpirun --oversubscribe --bind-to none "${MPI_SHM[@]}" -np "$n" \
                    "$mpi_bin" --sizes "$size" --dtype float32 --iters "$ITERS" --warmup 50 \
                    --system openmpi-shm
                if [ "$gloo" = 1 ]; then
                    local port=$((29500 + RANDOM % 20000)) r pids=() gd
                    gd=$(mktemp -d)
                    for ((r = 0; r < n; r++)); do
                        GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 timeout 120 $PY \
                            "$here/gloo_allreduce.py" --rank "$r" --world "$n" \
                            --master "127.0.0.1:$port" --lib "$bd_lib" --sizes "$size" \
                            --dtype float32 --iters "$ITERS" --warmup 50 >"$gd/out.$r" 2>/dev/null &
                        pids+=($!)
                    done
                    wait "${pids[@]}" || true
                    echo "$n $size gloo $(times_of <"$gd/out.0")" >>"$raw"
                    rm -rf "$gd"
                fi
            done
        done
        echo "# round $rep done, load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    $PY - "$raw" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 5:
        sys.exit("a run failed or was not verified: %r" % line)
    runs[(int(f[0]), int(f[1]), f[2])].append((float(f[3]), float(f[4])))
systems = ["ina", "ina-fixed", "ina-nopoll", "ideal", "openmpi-tcp", "openmpi-shm", "gloo"]
systems = [s for s in systems if any(k[2] == s for k in runs)]
print("| N | bytes | " + " | ".join("%s p50 / p99 us" % s for s in systems) +
      " | ina/TCP p50 | ina/TCP p99 | ina/shm p50 | ina-fixed/shm p50 |")
print("|---" * (len(systems) + 6) + "|")
for n, size in sorted({(k[0], k[1]) for k in runs}):
    med = {s: (statistics.median(x[0] for x in runs[(n, size, s)]),
               statistics.median(x[1] for x in runs[(n, size, s)])) for s in systems}
    cells = " | ".join("%.1f / %.1f" % med[s] for s in systems)
    tcp, shm = med["openmpi-tcp"], med["openmpi-shm"]
    print("| %d | %d | %s | %.2f | %.2f | %.2f | %.2f |" % (
        n, size, cells, med["ina"][0] / tcp[0], med["ina"][1] / tcp[1], med["ina"][0] / shm[0],
        med["ina-fixed"][0] / shm[0]))
EOF
    rm -f "$raw"
}

train() {
    local NS=${NS:-1 2 4} TARGET=${TARGET:-0.40} EPOCHS=${EPOCHS:-6} B=${BATCH:-16} W=${WINDOW:-2}
    local raw common
    raw=$(mktemp)
    common=(--gen rcv1 --loss logistic --lr 8 --batch "$B" --window "$W" --epochs "$EPOCHS"
            --target "$TARGET" --json)
    echo "## ina-glm: rcv1 shape (20,242 x 47,236, 74 nonzeros a row), logistic, B=$B, W=$W, lr 8,"
    echo "## target objective $TARGET; times are training only (evaluations excluded)"
    glm() { # label n command...
        local label=$1 n=$2
        shift 2
        local out
        out=$(timeout 300 "$@" 2>/dev/null) || { echo "glm.sh: $label N=$n failed" >&2; return 1; }
        echo "$out" | $PY -c 'import json, sys
label, n = sys.argv[1], sys.argv[2]
ev = [json.loads(l) for l in sys.stdin if l.startswith("{")]
s = ev[-1]
assert s.get("summary"), "no summary"
ep = [e for e in ev[:-1] if e["epoch"] > 0]
per = sorted(e["epoch_s"] for e in ep)[len(ep) // 2]
comm = sorted(e["comm_s"] for e in ep)[len(ep) // 2]
print(label, n, s["time_to_target_s"] if s["reached"] else "nan", per, comm, s["objective"],
      s["epochs_run"])' "$label" "$n" >>"$raw"
    }
    local mpi=(mpirun --oversubscribe --bind-to none)
    local maxn=1
    for n in $NS; do
        [ "$n" -gt "$maxn" ] && maxn=$n
        if [ "$n" = 1 ]; then
            glm local 1 "$build/bin/ina-glm" "${common[@]}"
        fi
        glm ina "$n" "$build/bin/ina-glm" "${common[@]}" --comm ina --local "$n"
        if [ "${TRAIN_BUSY:-0}" -gt 0 ]; then
            glm ina-busy "$n" "$build/bin/ina-glm" "${common[@]}" --comm ina --local "$n" \
                --busy-poll "$TRAIN_BUSY" --switch-opt=--busy-poll --switch-opt="$TRAIN_BUSY"
        fi
        glm mpi-tcp "$n" "${mpi[@]}" "${MPI_TCP[@]}" -np "$n" "$build/bin/ina-glm" "${common[@]}" --comm mpi
        glm mpi-shm "$n" "${mpi[@]}" "${MPI_SHM[@]}" -np "$n" "$build/bin/ina-glm" "${common[@]}" --comm mpi
        echo "# N=$n done, load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    glm ina-data-parallel "$maxn" "$build/bin/ina-glm" "${common[@]}" --comm ina --local "$maxn" \
        --data-parallel --fixed-bits 0
    glm mpi-tcp-data-parallel "$maxn" "${mpi[@]}" "${MPI_TCP[@]}" -np "$maxn" "$build/bin/ina-glm" \
        "${common[@]}" --comm mpi --data-parallel
    $PY - "$raw" <<'EOF'
import math, sys
rows = [l.split() for l in open(sys.argv[1])]
t = {(r[0], int(r[1])): [float(x) for x in r[2:]] for r in rows}
local = t.get(("local", 1), [math.nan] * 5)[0]
print("| run | N | time to target s | epoch s | comm s/epoch | final objective | epochs | ideal s (local/N) | vs mpi-tcp | vs mpi-shm |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    label, n = r[0], int(r[1])
    tt, ep, comm, obj, epochs = t[(label, n)]
    base = label.replace("ina-busy", "ina").replace("ina", "mpi-tcp") if label.startswith("ina") else None
    ref = t.get((base, n), [math.nan])[0] if base else math.nan
    shm = t.get((base.replace("tcp", "shm"), n), [math.nan])[0] if base else math.nan
    print("| %s | %d | %.3f | %.3f | %.3f | %.4f | %d | %.3f | %s | %s |" % (
        label, n, tt, ep, comm, obj, epochs, local / n,
        "%.2fx" % (tt / ref) if ref == ref and tt == tt else "",
        "%.2fx" % (tt / shm) if shm == shm and tt == tt else ""))
ina1 = t.get(("ina", 1), [math.nan])[0]
print()
print("speedup of --comm ina against N (time to target at N=1 / at N; P4SGD: near-linear on "
      "FPGAs; ideal = N):")
for (label, n), v in sorted(t.items()):
    if label == "ina":
        print("  N=%d: %.2f" % (n, ina1 / v[0]))
EOF
    rm -f "$raw"
}

# One ina-glm run's JSON -> "epoch_s wait_s cpu_s rounds time_to_target objective epochs comm_s"
# (medians over the epochs after the first, which pays page faults and cold caches).
glm_stats() {
    $PY -c 'import json, statistics, sys
ev = [json.loads(l) for l in sys.stdin if l.startswith("{")]
s = ev[-1]
assert s.get("summary"), "no summary"
ep = [e for e in ev[:-1] if e["epoch"] > 0]
ep = ep[1:] or ep
med = lambda k: statistics.median(e[k] for e in ep)
print("%.6f %.6f %.6f %d %s %.9g %d %.6f" % (med("epoch_s"), med("wait_s"), med("cpu_s"), med("rounds"),
      "%.6f" % s["time_to_target_s"] if s["reached"] else "nan", s["objective"], s["epochs_run"],
      med("comm_s")))'
}

scale() {
    local NS=${NS:-1 2 4} REPS=${REPS:-3} E=${EPOCHS:-3} B=${BATCH:-16} M=${MICRO:-8} BUSY=${BUSY:-100}
    local SHAPES=${SHAPES:-8192x200000:16 8192x200000:64 8192x200000:256 8192x200000:1000 8192x200000:4000 2048x200000:16000}
    local SYSTEMS=${SYSTEMS:-ina ina-busy mpi-tcp mpi-shm}
    local raw=${SCALE_RAW:-$(mktemp)} targets
    targets=$(mktemp)
    : >"$raw"
    local common=(--loss logistic --lr 8 --batch "$B" --micro "$M" --json)
    echo "## scale: logistic, lr 8, B=$B, micro-batches of $M (all of a mini-batch in flight),"
    echo "## target = one process's objective after $E epochs; medians of $REPS interleaved rounds"
    # The targets: one process's objective after E epochs (the same for every rank count).
    for shape in $SHAPES; do
        local obj
        obj=$(timeout 300 "$build/bin/ina-glm" --gen "$shape" "${common[@]}" --epochs "$E" 2>/dev/null |
              glm_stats | cut -d' ' -f6) || { echo "glm.sh: local run of $shape failed" >&2; return 1; }
        echo "$shape $($PY -c "print('%.9g' % ($obj * (1 + 1e-5)))")" >>"$targets"
    done
    run1() { # shape system n
        local shape=$1 sys=$2 n=$3 target cmd out
        target=$(awk -v s="$shape" '$1 == s {print $2}' "$targets")
        local args=(--gen "$shape" "${common[@]}" --epochs $((E + 1)) --target "$target")
        case $sys in
        local) cmd=("$build/bin/ina-glm" "${args[@]}") ;;
        ina) cmd=("$build/bin/ina-glm" "${args[@]}" --comm ina --local "$n") ;;
        ina-busy) cmd=("$build/bin/ina-glm" "${args[@]}" --comm ina --local "$n" --busy-poll "$BUSY") ;;
        mpi-tcp) cmd=(mpirun --oversubscribe --bind-to none "${MPI_TCP[@]}" -np "$n" "$build/bin/ina-glm" "${args[@]}" --comm mpi) ;;
        mpi-shm) cmd=(mpirun --oversubscribe --bind-to none "${MPI_SHM[@]}" -np "$n" "$build/bin/ina-glm" "${args[@]}" --comm mpi) ;;
        esac
        if out=$(timeout 300 "${cmd[@]}" 2>/dev/null | glm_stats 2>/dev/null) && [ -n "$out" ]; then
            echo "$shape $sys $n $out" >>"$raw"
        else
            echo "$shape $sys $n nan nan nan 0 nan nan 0 nan" >>"$raw"
            echo "# $sys N=$n on $shape failed or timed out" >&2
        fi
    }
    for ((rep = 1; rep <= REPS; rep++)); do
        for shape in $SHAPES; do
            run1 "$shape" local 1
            for n in $NS; do
                for sys in $SYSTEMS; do
                    [ "$n" = 1 ] && [ "$sys" != ina ] && continue
                    run1 "$shape" "$sys" "$n"
                done
            done
        done
        echo "# round $rep done, load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    rm -f "$targets"
    echo "## raw: shape system N epoch_s wait_s cpu_s rounds time_to_target_s objective epochs comm_s"
    sed 's/^/#  /' "$raw"
    $PY - "$raw" "${GOAL:-0.8}" <<'EOF2'
import collections, math, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    runs[(f[0], f[1], int(f[2]))].append([float(x) for x in f[3:]])
def med(key, i):
    v = [r[i] for r in runs.get(key, []) if not math.isnan(r[i])]
    return statistics.median(v) if v else math.nan
def nnz(shape): # ROWSxCOLS:NNZ, or a named shape of ina-glm's (its nonzeros a row)
    named = {"rcv1": 74, "real-sim": 51, "avazu": 15, "amazon": 40}
    return named[shape] if shape in named else int(shape.split(":")[1])
shapes = sorted({k[0] for k in runs}, key=nnz)
order = {"local": 0, "ina": 1, "ina-busy": 2, "mpi-tcp": 3, "mpi-shm": 4}
keys = sorted({(k[1], k[2]) for k in runs}, key=lambda k: (k[1], order.get(k[0], 9), k[0]))
speed = {}
for shape in shapes:
    base = med((shape, "local", 1), 4)
    print()
    print("### %s (%d nonzeros a row)" % (shape, nnz(shape)))
    print("| system | N | epoch s | time to target s | speedup vs 1 process | comm s/epoch | of which wait | cpu s/epoch (rank 0) | all-reduces/epoch | us in comm per all-reduce |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sysname, n in keys:
        k = (shape, sysname, n)
        if k not in runs:
            continue
        ep, wait, cpu, rounds, tt = (med(k, i) for i in range(5))
        comm = med(k, 7)
        sp = base / tt if tt == tt and tt > 0 else math.nan
        speed[(sysname, n, shape)] = sp
        per = comm / rounds * 1e6 if rounds > 0 and sysname != "local" else math.nan
        print("| %s | %d | %.4f | %.4f | %.2f | %.4f | %.4f | %.4f | %d | %s |" % (
            sysname, n, ep, tt, sp, comm, wait, cpu, rounds, "%.1f" % per if per == per else ""))
# Crossover: where the speedup against one process passes 1, interpolated in log(nonzeros).
print()
print("### crossover: nonzeros a row above which N workers beat one process (time to target)")
print("| system | N | " + " | ".join("%d" % nnz(s) for s in shapes) + " | crossover |")
print("|---|---|" + "---|" * len(shapes) + "---|")
for sysname, n in keys:
    if n == 1:
        continue
    sp = [speed.get((sysname, n, s), math.nan) for s in shapes]
    cross = "never (up to %d)" % nnz(shapes[-1])
    for i, s in enumerate(shapes):
        if sp[i] == sp[i] and sp[i] > 1 and all(x == x and x > 1 for x in sp[i:]):
            if i == 0:
                cross = "below %d" % nnz(s)
            elif sp[i - 1] == sp[i - 1]:
                a, b = math.log(nnz(shapes[i - 1])), math.log(nnz(s))
                t = (1 - sp[i - 1]) / (sp[i] - sp[i - 1])
                cross = "%.0f" % math.exp(a + t * (b - a))
            else:
                cross = "<= %d" % nnz(s)
            break
    print("| %s | %d | %s | %s |" % (sysname, n, " | ".join("%.2f" % x for x in sp), cross))
# Efficiency where compute weighs most: speedup / N against the goal (issue 34: 0.8).
goal, last = float(sys.argv[2]), shapes[-1]
print()
print("### efficiency on %s: speedup against one process / N (goal >= %.2f)" % (last, goal))
print("| system | N | speedup | speedup / N | goal met |")
print("|---|---|---|---|---|")
for sysname, n in keys:
    sp = speed.get((sysname, n, last), math.nan)
    if n > 1 and (sysname, n, last) in speed:
        print("| %s | %d | %.2f | %.2f | %s |" % (sysname, n, sp, sp / n,
              "yes" if sp == sp and sp / n >= goal else "no"))
EOF2
    [ -n "${SCALE_RAW:-}" ] || rm -f "$raw"
}

case $what in
latency) latency ;;
scale) scale ;;
train) train ;;
all) latency; train ;;
esac
