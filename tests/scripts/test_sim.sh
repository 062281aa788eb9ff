#!/usr/bin/env bash
# test_sim.sh: bench/sim (the SimGrid simulation of docs/CLUSTER.md "At scale"), quick mode:
#   1. ina-sim reproduces the emulated cluster's measured times (bench/results/latest.jsonl,
#      N = 4 and 8, 16 MiB: ina's hardware-switch model, one switch, dedicated and colocated
#      shards, a tree, OpenMPI's ring) within 15% after calibration (run.py exits 0 only then);
#   2. on the fat tree (N = 8, 16) a hardware switch at the top stays within 10% of flat in N
#      while one software aggregator on a host NIC doubles with N (what the model must show);
#   3. under 1% loss it resends packets (counted) and is not faster than without loss;
#   4. ina-sim refuses bad arguments with exit 2 and a message.
# No SimGrid (no ina-sim built): SKIP (scripts/deps.sh --test installs libsimgrid-dev).
set -uo pipefail
exec </dev/null
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, cleanup, ok/bad/check
SIM=$B/bin/ina-sim
[ -x "$SIM" ] || { echo "SKIP: no $SIM (SimGrid not found at configure time: libsimgrid-dev)"; exit 77; }
# SimGrid keeps memory at exit by design: no leak check on the simulator in an ASan build.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1

timeout 120 /usr/bin/python3 "$SRC/bench/sim/run.py" --sim "$SIM" --quick --max-n 16 --out "$tmp/out" \
    >"$tmp/run.log" 2>&1
rc=$?
cat "$tmp/run.log"
check "calibration within 15% of the measured times (run.py exit $rc)" [ $rc -eq 0 ]
check "the calibration table has 12 rows (5 ina cases and OpenMPI, N = 4 and 8)" \
    [ "$(grep -c '^| [48] | 16M |' "$tmp/out/sim.md")" -eq 12 ]
row() { grep "^| $1 |" "$tmp/out/sim.md" | awk -F'|' '{ print $3, $4 }'; }
read -r hw8 hw16 <<<"$(row "hardware switch at the top")"
read -r one8 one16 <<<"$(row "one software aggregator (host NIC)")"
check "hardware switch flat from N=8 to 16 ($hw8 -> $hw16 ms)" \
    awk -v a="$hw8" -v b="$hw16" 'BEGIN { exit !(b > 0 && b <= a * 1.1) }'
check "one host-NIC aggregator doubles from N=8 to 16 ($one8 -> $one16 ms)" \
    awk -v a="$one8" -v b="$one16" 'BEGIN { exit !(b >= a * 1.8) }'

# Loss: packets resent after the RTO, counted, and never faster than without loss.
/usr/bin/python3 "$SRC/bench/sim/sim_platform.py" emulated 4 4 >"$tmp/e44.xml"
base=$("$SIM" "$tmp/e44.xml" --layout dedicated --m 4 --n 4 --bytes 4194304 --log=root.thres:critical)
lossy=$("$SIM" "$tmp/e44.xml" --layout dedicated --m 4 --n 4 --bytes 4194304 --loss 0.01 \
    --log=root.thres:critical)
echo "no loss: $base; 1% loss: $lossy"
check "1% loss: packets resent, counted, time not below the lossless one" \
    awk -v a="$base" -v b="$lossy" 'BEGIN { split(a, x, " "); split(b, y, " ");
        exit !(x[7] == 0 && y[7] > 0 && y[6] >= x[6]) }'

"$SIM" "$tmp/none.xml" --layout sideways --n 4 >"$tmp/bad" 2>&1
rc=$?
check "an unknown layout: exit 2 with a message" bash -c "[ $rc -eq 2 ] && grep -q 'unknown layout' '$tmp/bad'"
"$SIM" "$tmp/none.xml" --layout dedicated --n 4 >"$tmp/bad" 2>&1
rc=$?
check "dedicated without --m: exit 2" [ $rc -eq 2 ]
finish test_sim
