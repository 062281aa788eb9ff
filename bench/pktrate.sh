#!/usr/bin/env bash
# pktrate.sh: switch packet rate at N=4 against a plain UDP echo, same generator, same run.
#
# For each packet size (ELEMS, default "256 2048": 1 KiB and 8 KiB payloads) and each batching
# mode (MODES, default "gso plain"):
#   gso    the switch as it runs by default (UDP GRO receive, GSO result trains), the echo with
#          UDP_GRO and one GSO reply per received train, the generator sending GSO trains and
#          receiving with GRO;
#   plain  ina-switch --no-gso, the echo with recvmmsg/sendmmsg of single datagrams, the
#          generator likewise;
# it runs the switch and the echo REPS times each, interleaved, under bench/pktrate's generator
# (4 emulated workers, window WINDOW each, one thread), and reports the median of
#   server packets per second per server core = answers received / server CPU seconds
# where the server CPU time is the scheduler's runtime of the server process over the measured
# interval (/proc/PID/schedstat; utime+stime from /proc/PID/stat agrees to ~1%), and the ratio
# switch / echo against the target of 50%.
#
# Environment: INA_BUILD_DIR (default build), DURATION (s, default 3), WARMUP (0.5), REPS (3),
# WINDOW (128), WORKERS (4), PIN=1 to pin the server to CPU 1 and the generator to CPU 0 (default
# 0: this VM is shared, pinning onto a busy core hurts more than it helps), SPIN=1 to make the
# generator busy-poll, PERF=1 to record a cpu-clock profile of the switch in the first run of
# each configuration (perf report --stdio -i $OUT/perf-*.data), OUT (directory for raw results,
# default $(mktemp -d)).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${INA_BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
switch_bin=$build/bin/ina-switch
pktrate_bin=$build/bench/pktrate
for b in "$switch_bin" "$pktrate_bin"; do
    [ -x "$b" ] || { echo "pktrate.sh: $b missing; build first (make)" >&2; exit 1; }
done

ELEMS=${ELEMS:-"256 2048"}
MODES=${MODES:-"gso plain"}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
REPS=${REPS:-3}
WINDOW=${WINDOW:-128}
WORKERS=${WORKERS:-4}
PIN=${PIN:-0}
SPIN=${SPIN:-0}
PERF=${PERF:-0}
OUT=${OUT:-$(mktemp -d /tmp/pktrate.XXXXXX)}
mkdir -p "$OUT"
results=$OUT/results.txt
: >"$results"

srv_pid=
cleanup() {
    if [ -n "$srv_pid" ] && kill -0 "$srv_pid" 2>/dev/null; then
        kill "$srv_pid" 2>/dev/null || true
        wait "$srv_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

srv_pin=() gen_pin=()
if [ "$PIN" = 1 ]; then
    srv_pin=(taskset -c 1)
    gen_pin=(--cpu 0)
fi
gen_extra=()
[ "$SPIN" = 1 ] && gen_extra+=(--spin)

# run_one KIND(switch|echo) MODE(gso|plain) ELEMS REP
run_one() {
    local kind=$1 mode=$2 elems=$3 rep=$4
    local portf=$OUT/port.$$ gso_flag=() srv_args=()
    rm -f "$portf"
    [ "$mode" = gso ] && gso_flag=(--gso)
    if [ "$kind" = switch ]; then
        srv_args=("$switch_bin" --listen 127.0.0.1:0 --port-file "$portf" --quiet
                  --max-elems "$elems" --slots $((WORKERS * WINDOW * 2)))
        [ "$mode" = plain ] && srv_args+=(--no-gso)
    else
        srv_args=("$pktrate_bin" --echo --port-file "$portf" "${gso_flag[@]}")
    fi
    "${srv_pin[@]}" "${srv_args[@]}" 2>"$OUT/server-$kind-$mode-$elems-$rep.log" &
    srv_pid=$!
    for _ in $(seq 100); do [ -s "$portf" ] && break; sleep 0.05; done
    [ -s "$portf" ] || { echo "pktrate.sh: $kind did not start" >&2; exit 1; }
    local perf_pid=
    if [ "$PERF" = 1 ] && [ "$kind" = switch ] && [ "$rep" = 1 ]; then
        perf record -e cpu-clock -g -p "$srv_pid" -o "$OUT/perf-$mode-$elems.data" \
            -- sleep "$(echo "$WARMUP + $DURATION" | bc)" >/dev/null 2>&1 &
        perf_pid=$!
    fi
    "$pktrate_bin" --target "127.0.0.1:$(cat "$portf")" --mode "$kind" "${gso_flag[@]}" \
        --workers "$WORKERS" --elems "$elems" --window "$WINDOW" --warmup "$WARMUP" \
        --duration "$DURATION" --server-pid "$srv_pid" --label "$kind-$mode-$elems-$rep" \
        "${gen_pin[@]}" "${gen_extra[@]}" 2>>"$OUT/generator.log" | tee -a "$results" >/dev/null
    [ -n "$perf_pid" ] && wait "$perf_pid" 2>/dev/null || true
    kill "$srv_pid"
    wait "$srv_pid" 2>/dev/null || true
    srv_pid=
    rm -f "$portf"
}

echo "pktrate.sh: $WORKERS workers x window $WINDOW, ${DURATION}s runs (+${WARMUP}s warm-up), $REPS reps," \
     "median; raw results in $OUT" >&2
for elems in $ELEMS; do
    for mode in $MODES; do
        for rep in $(seq "$REPS"); do
            run_one switch "$mode" "$elems" "$rep"
            run_one echo "$mode" "$elems" "$rep"
        done
    done
done

# Summary: medians per (mode, elems) of the switch and echo per-core rates.
/usr/bin/env python3 - "$results" "$ELEMS" "$MODES" <<'EOF'
import sys, statistics
path, elems_l, modes_l = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rows = []
for line in open(path):
    if not line.startswith("RESULT "):
        continue
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    rows.append(kv)
def med(kind, mode, elems, key):
    v = [float(r[key]) for r in rows if r["mode"] == kind and r["gso"] == ("1" if mode == "gso" else "0")
         and r["elems"] == elems]
    return statistics.median(v) if v else float("nan"), v
print("%-6s %-5s %8s %16s %16s %7s %14s %14s %6s" % ("elems", "mode", "bytes", "switch pkt/s/core",
      "echo pkt/s/core", "ratio", "switch pkt/s", "echo pkt/s", "target"))
ok = True
for elems in elems_l:
    for mode in modes_l:
        s, sv = med("switch", mode, elems, "srv_pps_per_core")
        e, ev = med("echo", mode, elems, "srv_pps_per_core")
        sw, _ = med("switch", mode, elems, "pps")
        ew, _ = med("echo", mode, elems, "pps")
        nbytes = 32 + 4 * int(elems)
        ratio = s / e if e > 0 else float("nan")
        verdict = "PASS" if ratio >= 0.5 else "MISS"
        ok &= ratio >= 0.5
        print("%-6s %-5s %8d %16.0f %16.0f %6.0f%% %14.0f %14.0f %6s" % (elems, mode, nbytes, s, e,
              100 * ratio, sw, ew, verdict))
        print("       runs: switch %s; echo %s" % (" ".join("%.0f" % x for x in sv),
                                                     " ".join("%.0f" % x for x in ev)))
print("aggregated packets = slot rounds x N contributions; per core = per second of server CPU")
print("target (switch >= 50%% of echo per core): %s" % ("PASS" if ok else "MISS"))
EOF
