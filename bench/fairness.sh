#!/usr/bin/env bash
# fairness.sh: two jobs of equal size sharing one ina-switch: each one's throughput against one
# job alone on the same switch, in the same run. Target (issue 6): each shared job gets at least
# 40% of the lone job's algbw.
#
# For REPS rounds (default 3): one job alone (N workers), then two jobs at once (N workers each),
# all on loopback, SIZE bytes (default 16M) of DTYPE (float32), ITERS timed iterations (20). Rank
# 0 of each job reports its median time (ina-bench --json); the script prints per-round figures,
# then medians and the ratio shared/alone for each job.
#
# Environment: INA_BUILD_DIR (default build), N (2), SIZE, DTYPE, ITERS, REPS, SWITCH_ARGS (extra
# ina-switch options, e.g. "--threads 2"). Usage: bash bench/fairness.sh [--help]
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
N=${N:-2}
SIZE=${SIZE:-16M}
DTYPE=${DTYPE:-float32}
ITERS=${ITERS:-20}
REPS=${REPS:-3}
SWITCH_ARGS=${SWITCH_ARGS:-}
for b in "$build/bin/ina-switch" "$build/bin/ina-bench"; do
    [ -x "$b" ] || { echo "fairness.sh: $b missing; build first (make)" >&2; exit 1; }
done

tmp=$(mktemp -d)
sw_pid=
cleanup() {
    [ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null && wait "$sw_pid" 2>/dev/null
    pkill -P $$ 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$build/bin/ina-switch" --listen 127.0.0.1:0 --port-file "$tmp/port" --quiet $SWITCH_ARGS \
    2>"$tmp/switch.log" &
sw_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "fairness.sh: ina-switch did not start" >&2; exit 1; }
addr=127.0.0.1:$(cat "$tmp/port")

# run_job NAME OUT: N workers of job NAME; rank 0's JSON line goes to OUT.
run_job() {
    local name=$1 out=$2 pids=() r
    for ((r = 0; r < N; r++)); do
        if [ "$r" = 0 ]; then
            timeout 300 "$build/bin/ina-bench" --switch "$addr" --rank 0 --world "$N" --job "$name" \
                --sizes "$SIZE" --dtype "$DTYPE" --iters "$ITERS" --warmup 3 --json >"$out" &
        else
            timeout 300 "$build/bin/ina-bench" --switch "$addr" --rank "$r" --world "$N" \
                --job "$name" --sizes "$SIZE" --dtype "$DTYPE" --iters "$ITERS" --warmup 3 \
                --json >/dev/null &
        fi
        pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(d[sys.argv[2]])' "$1" "$2"; }

echo "# fairness: N=$N per job, $SIZE $DTYPE, $ITERS iterations, $REPS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round alone_gbps shared_a_gbps shared_b_gbps"
alone=() sa=() sb=()
for ((i = 1; i <= REPS; i++)); do
    run_job "solo-$i" "$tmp/alone.json"
    run_job "fair-a-$i" "$tmp/a.json" & pa=$!
    run_job "fair-b-$i" "$tmp/b.json" & pb=$!
    wait $pa && wait $pb
    for f in alone a b; do
        [ "$(field "$tmp/$f.json" ok)" = True ] || { echo "fairness.sh: a result was wrong ($f)" >&2; exit 1; }
    done
    x=$(field "$tmp/alone.json" algbw_gbps) y=$(field "$tmp/a.json" algbw_gbps) z=$(field "$tmp/b.json" algbw_gbps)
    alone+=("$x") sa+=("$y") sb+=("$z")
    echo "$i $x $y $z"
done
python3 - "${alone[*]}" "${sa[*]}" "${sb[*]}" <<'EOF'
import statistics, sys
alone, a, b = ([float(v) for v in s.split()] for s in sys.argv[1:4])
ma, mb, m0 = statistics.median(a), statistics.median(b), statistics.median(alone)
print(f"median algbw: alone {m0:.3f} Gbit/s, shared: job A {ma:.3f}, job B {mb:.3f}")
print(f"shared/alone: job A {ma/m0:.2f}, job B {mb/m0:.2f} (target >= 0.40 each); "
      f"sum {(ma+mb)/m0:.2f}")
EOF
