#!/usr/bin/env bash
# test_sim.sh: bench/sim (the SimGrid simulation of docs/CLUSTER.md "At scale"), quick mode:
#   1. ina-sim reproduces the emulated cluster's measured times (bench/results/latest.jsonl,
#      N = 4 and 8, 16 MiB: ina's hardware-switch model, one switch, dedicated and colocated
#      shards, a tree, OpenMPI's ring) within 15% after calibration (run.py exits 0 only then);
#   2. on the fat tree (N = 8, 16) a hardware switch at the top stays within 10% of flat in N
#      while one software aggregator on a host NIC doubles with N (what the model must show);
#   3. under 1% loss it resends packets (counted) and is not faster than without loss;
#   4. the symmetry reduction (--group, what the sweep runs dedicated aggregators and
#      colocated shards with from N = 256 on) agrees with the full model within 3%: run.py's
#      own check at N = 16, and here at N = 64 (dedicated, colocated) and with fewer shards
#      than hosts (colocated, 32 shards on 64 hosts: groups with and without a shard);
#   5. ina-sim --help prints its usage; it refuses bad arguments with exit 2 and a message.
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
check "run.py exit 0: calibration within 15%, the reduction within 3% (exit $rc)" [ $rc -eq 0 ]
check "the calibration table has 12 rows (5 ina cases and OpenMPI, N = 4 and 8)" \
    [ "$(grep -c '^| [48] | 16M |' "$tmp/out/sim.md")" -eq 12 ]
check "the reduction's check in run.py: 3 rows, within 3%" \
    bash -c "[ \$(grep -c '^| .* | 16 | [0-9]* | ' '$tmp/out/sim.md') -eq 3 ] &&
             grep -q 'Worst difference: .*within 3%): met' '$tmp/out/sim.md'"
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

# The symmetry reduction against the full model: the same time within 3%.
q=--log=root.thres:critical
within3() { # full reduced what
    check "reduced model within 3% of the full one: $3 (${1:-none} vs ${2:-none} s)" \
        awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b > 0 && b / a < 1.03 && a / b < 1.03) }'
}
t6() { "$SIM" "$@" $q | awk '{ print $6 }'; }
plat() { /usr/bin/python3 "$SRC/bench/sim/sim_platform.py" "$@"; }
plat fattree 64 64 32 >"$tmp/f64.xml"
plat grouped 64 64 16 0 >"$tmp/gd64.xml"
plat grouped 64 0 16 64 >"$tmp/gc64.xml"
plat grouped 64 0 8 32 >"$tmp/gc64s.xml"
M16=16777216
within3 "$(t6 "$tmp/f64.xml" --layout dedicated --m 64 --n 64 --bytes $M16 --agg-cost 5e-7)" \
    "$(t6 "$tmp/gd64.xml" --layout dedicated --m 64 --n 64 --bytes $M16 --agg-cost 5e-7 --group 16)" \
    "dedicated, N = M = 64, groups of 16"
within3 "$(t6 "$tmp/f64.xml" --layout colocated --n 64 --bytes $M16 --agg-cost 5e-7)" \
    "$(t6 "$tmp/gc64.xml" --layout colocated --n 64 --bytes $M16 --agg-cost 5e-7 --group 16)" \
    "colocated, N = 64, groups of 16"
within3 "$(t6 "$tmp/f64.xml" --layout colocated --n 64 --bytes 262144 --agg-cost 5e-7)" \
    "$(t6 "$tmp/gc64s.xml" --layout colocated --n 64 --bytes 262144 --agg-cost 5e-7 --group 8)" \
    "colocated, 32 shards (256 KiB) on 64 hosts, groups of 8"

"$SIM" "$tmp/gd64.xml" --layout dedicated --m 64 --n 64 --group 16 --loss 0.01 >"$tmp/bad" 2>&1
rc=$?
check "--group with loss: exit 2 with the reason" bash -c "[ $rc -eq 2 ] && grep -q 'group needs no loss' '$tmp/bad'"
"$SIM" "$tmp/gd64.xml" --layout dedicated --m 64 --n 64 --group 24 >"$tmp/bad" 2>&1
rc=$?
check "--group not dividing N: exit 2 with the reason" bash -c "[ $rc -eq 2 ] && grep -q 'multiple of G' '$tmp/bad'"
"$SIM" --help >"$tmp/help" 2>&1
rc=$?
check "ina-sim --help: its own usage (--group among the options), exit 0" \
    bash -c "[ $rc -eq 0 ] && grep -q '^Usage: ina_sim' '$tmp/help' && grep -q -- '--group G' '$tmp/help'"
"$SIM" "$tmp/none.xml" --layout sideways --n 4 >"$tmp/bad" 2>&1
rc=$?
check "an unknown layout: exit 2 with a message" bash -c "[ $rc -eq 2 ] && grep -q 'unknown layout' '$tmp/bad'"
"$SIM" "$tmp/none.xml" --layout dedicated --n 4 >"$tmp/bad" 2>&1
rc=$?
check "dedicated without --m: exit 2" [ $rc -eq 2 ]
finish test_sim
