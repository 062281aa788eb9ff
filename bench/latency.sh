#!/usr/bin/env bash
# latency.sh: small all-reduce latency on one host: ina's defaults first, beside OpenMPI over
# TCP, OpenMPI over shared memory (vader) and Gloo, p50 and p99, interleaved.
#
# For REPS rounds (default 5), at each N of NS (default "2 4", and "2 4 8 16" on a host with 16
# cores or more) runs, one after the other: ina with its defaults (ina-bench --local N: the
# switch and the workers as a new user gets them: rings, busy polling auto, lanes auto),
# OpenMPI TCP (btl tcp,self on lo), OpenMPI vader (btl vader,self) and Gloo (torch.distributed
# on lo; skipped if /usr/bin/python3 cannot import torch), each ITERS timed iterations (default
# 2000) of SIZE bytes (32) of float32 SUM, every result verified. Prints each run's p50 and p99
# (rank 0's), then the medians over rounds and the ratios ina / peer (p50 and p99). Interleaving
# keeps all under the same load; on a shared VM one round says little. Targets of issue 35 at
# N = 4: ina p50 <= 0.6 x OpenMPI TCP's, p99 <= OpenMPI TCP's, p50 <= 2 x vader's.
#
# Environment: INA_BUILD_DIR (default build), NS, SIZE, ITERS, REPS, INA_BENCH_ARGS (more
# ina-bench options, e.g. "--busy-poll 0 --switch-busy-poll 0" to see ina without polling),
# GLOO=0 (skip Gloo). Needs OpenMPI; builds bench/build/mpi_allreduce and libbenchdata.so if
# missing. Run under the team's lock: flock /work/locks/bench.lock bash bench/latency.sh
# Usage: bash bench/latency.sh [--help]
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
cores=$(nproc)
default_ns="2 4"
[ "$cores" -ge 16 ] && default_ns="2 4 8 16"
NS=${NS:-$default_ns} SIZE=${SIZE:-32} ITERS=${ITERS:-2000} REPS=${REPS:-5}
PY=/usr/bin/python3
mpi_bin=$here/build/mpi_allreduce
bd_lib=$here/build/libbenchdata.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$build/bin/ina-bench" ] || { echo "latency.sh: $build/bin/ina-bench missing (make)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "latency.sh: mpirun missing (bench/deps.sh)" >&2; exit 1; }
mkdir -p "$here/build"
[ -x "$mpi_bin" ] || mpicc -O2 -Wall -o "$mpi_bin" "$here/mpi_allreduce.c" "$here/benchdata.c" -lm
gloo=${GLOO:-1}
if [ "$gloo" = 1 ] && ! $PY -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    echo "# Gloo skipped: $PY cannot import torch with Gloo"
    gloo=0
fi
[ "$gloo" = 1 ] && [ ! -f "$bd_lib" ] &&
    cc -O2 -Wall -shared -fPIC -o "$bd_lib" "$here/benchdata.c" -lm

# JSON lines of a verified run -> "p50_us p99_us" (rank 0's line)
times_of() {
    $PY -c 'import json, sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l)
        assert d["ok"], "a result was wrong"
        print("%.2f %.2f" % (d["time_s"] * 1e6, d["time_p99_s"] * 1e6))
        break'
}

mpi() { # btl-args... : one OpenMPI run at N=$n
    timeout 120 mpirun --oversubscribe --bind-to none --mca pml ob1 "$@" \
        --mca oob_tcp_if_include lo -np "$n" "$mpi_bin" --sizes "$SIZE" --dtype float32 \
        --iters "$ITERS" --warmup 100 --system openmpi 2>/dev/null | times_of
}

gloo_run() { # one Gloo run at N=$n
    local port=$((29500 + RANDOM % 20000)) r pids=() out
    out=$(mktemp -d)
    for ((r = 0; r < n; r++)); do
        GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 timeout 120 $PY "$here/gloo_allreduce.py" \
            --rank "$r" --world "$n" --master "127.0.0.1:$port" --lib "$bd_lib" \
            --sizes "$SIZE" --dtype float32 --iters "$ITERS" --warmup 100 \
            >"$out/out.$r" 2>/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    times_of <"$out/out.0"
    rm -rf "$out"
}

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
echo "# latency.sh on $(hostname), $cores cores, $SIZE B float32 SUM, $ITERS iterations x $REPS rounds, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ), ina $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "round N system p50_us p99_us"
for ((i = 1; i <= REPS; i++)); do
    for n in $NS; do
        # shellcheck disable=SC2086 # INA_BENCH_ARGS: words on purpose
        line() { echo "$i $n $1 ${2:-fail fail}" | tee -a "$raw"; }
        line ina "$(timeout 120 "$build/bin/ina-bench" --local "$n" --sizes "$SIZE" \
            --dtype float32 --iters "$ITERS" --warmup 100 --json ${INA_BENCH_ARGS:-} 2>/dev/null |
            times_of)"
        line openmpi-tcp "$(mpi --mca btl tcp,self --mca btl_tcp_if_include lo)"
        line openmpi-vader "$(mpi --mca btl vader,self)"
        [ "$gloo" = 1 ] && line gloo "$(gloo_run)"
    done
    echo "# round $i done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
$PY - "$raw" <<'PYEOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if f[3] != "fail":
        runs[(int(f[1]), f[2])].append((float(f[3]), float(f[4])))
systems = [s for s in ("ina", "openmpi-tcp", "openmpi-vader", "gloo") if any(k[1] == s for k in runs)]
print()
print("| N | " + " | ".join("%s p50 / p99 µs" % s for s in systems) +
      " | ina/TCP p50 | ina/TCP p99 | ina/vader p50 | ina/Gloo p50 |")
print("|---" * (len(systems) + 5) + "|")
for n in sorted({k[0] for k in runs}):
    med = {s: (statistics.median(x[0] for x in runs[(n, s)]),
               statistics.median(x[1] for x in runs[(n, s)])) if runs[(n, s)] else None
           for s in systems}
    def ratio(s, i):
        return "%.2f" % (med["ina"][i] / med[s][i]) if med.get("ina") and med.get(s) else "-"
    cells = " | ".join("%.1f / %.1f" % med[s] if med[s] else "-" for s in systems)
    print("| %d | %s | %s | %s | %s | %s |" % (n, cells, ratio("openmpi-tcp", 0),
          ratio("openmpi-tcp", 1), ratio("openmpi-vader", 0), ratio("gloo", 0)))
PYEOF
