#!/usr/bin/env bash
# latency.sh: small all-reduce latency on loopback, ina against OpenMPI over TCP, interleaved.
#
# For REPS rounds (default 7), runs ina (ina-bench --local N) and OpenMPI TCP
# (bench/build/mpi_allreduce, as bench/compare.sh builds it) one after the other, each for ITERS
# timed iterations (default 500) of SIZE bytes (256) of float32 at N = 4, and prints each round's
# median time, then the median of the round medians and the ratio ina / OpenMPI. Interleaving
# keeps both under the same load; this 2-core VM's scheduling noise is large, so one round says
# little. ina's float ops of at most one window of blocks take one round trip (docs/PROTOCOL.md
# §8.7); INA_ONE_ROUND=0 in the environment measures the two-round schedule instead.
#
# Environment: INA_BUILD_DIR (default build), N, SIZE, ITERS, REPS, INA_BENCH_ARGS (more
# ina-bench options, e.g. "--switch-shm" for shared-memory rings). Needs OpenMPI and
# bench/build/mpi_allreduce (run bench/compare.sh once, or make bench).
# Usage: bash bench/latency.sh [--help]
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
N=${N:-4} SIZE=${SIZE:-256} ITERS=${ITERS:-500} REPS=${REPS:-7}
mpi_bin=$here/build/mpi_allreduce
[ -x "$build/bin/ina-bench" ] || { echo "latency.sh: $build/bin/ina-bench missing (make)" >&2; exit 1; }
[ -x "$mpi_bin" ] || { echo "latency.sh: $mpi_bin missing (run bench/compare.sh once)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "latency.sh: mpirun missing (bench/deps.sh)" >&2; exit 1; }

json_time() { python3 -c 'import json,sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l)
        assert d["ok"], "a result was wrong"
        print(d["time_s"] * 1e6)'; }

echo "# latency: $SIZE B float32, N=$N, $ITERS iterations x $REPS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round ina_us openmpi_tcp_us"
ina=() mpi=()
for ((i = 1; i <= REPS; i++)); do
    # shellcheck disable=SC2086 # INA_BENCH_ARGS: words on purpose
    a=$(timeout 120 "$build/bin/ina-bench" --local "$N" --sizes "$SIZE" --dtype float32 \
        --iters "$ITERS" --warmup 50 --json ${INA_BENCH_ARGS:-} 2>/dev/null | json_time)
    b=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 \
        --mca btl tcp,self --mca btl_tcp_if_include lo -np "$N" "$mpi_bin" --sizes "$SIZE" \
        --dtype float32 --iters "$ITERS" --warmup 50 --system openmpi-tcp 2>/dev/null | json_time)
    ina+=("$a") mpi+=("$b")
    printf '%d %.1f %.1f\n' "$i" "$a" "$b"
done
python3 - "${ina[*]}" "${mpi[*]}" <<'EOF'
import statistics, sys
a, b = ([float(v) for v in s.split()] for s in sys.argv[1:3])
ma, mb = statistics.median(a), statistics.median(b)
print(f"median of medians: ina {ma:.1f} us, OpenMPI TCP {mb:.1f} us; ina/OpenMPI {ma/mb:.2f} "
      f"(target <= 1.00); rounds ina faster: {sum(x < y for x, y in zip(a, b))} of {len(a)}")
EOF
