#!/usr/bin/env bash
# test_mpi.sh: libina-mpi.so, preloaded into an MPI program that knows nothing of ina
# (tests/mpi/plain_allreduce.c, which checks its own results), routes its MPI_Allreduce
# calls through ina-switch on MPI_COMM_WORLD and on sub-communicators; passes everything
# through without a switch; completes calls with MPI when the switch dies mid-run; and routes
# each call to MPI or ina by its size, from a route table or a calibration, the same way on
# every rank.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SW=$B/bin/ina-switch LIB=$(readlink -f "$B/lib/libina-mpi.so" 2>/dev/null) APP=$B/tests/mpi/plain_allreduce

if [ ! -f "$B/lib/libina-mpi.so" ]; then
    if command -v mpicc >/dev/null 2>&1; then
        echo "FAIL: mpicc is installed but $B/lib/libina-mpi.so was not built"
        exit 1
    fi
    echo "SKIP: no MPI installed (apt-get install openmpi-bin libopenmpi-dev), nothing to test"
    exit 0
fi
command -v mpirun >/dev/null || { echo "FAIL: libina-mpi.so built but no mpirun"; exit 1; }

# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"

# As root, mpirun needs these; the machine may have fewer cores than ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
unset INA_SWITCH INA_JOB INA_MPI_QUIET INA_MPI_VERBOSE INA_MPI_DOUBLE INA_MPI_FLOAT \
    INA_MPI_INPLACE_COPY INA_MPI_MIN_BYTES RANK WORLD_SIZE INA_RANK INA_WORLD_SIZE XDG_CACHE_HOME
# Never the user's route table (~/.cache/ina/mpi-route.txt); every eligible call through ina
# (INA_MPI_ROUTE=ina) until the routing checks at the end.
export INA_MPI_ROUTE=ina INA_MPI_ROUTE_FILE=/nonexistent/ina-test-route.txt
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none)

# The ASan/UBSan build: the instrumented interposer needs the ASan runtime, which the
# instrumented test program carries, so it is preloaded into the ranks only (mpirun -x),
# not into mpirun. Any child of a rank inherits the preload and cannot start (ASan's
# symbolizer among them): reports stay unsymbolized (symbolize=0). OpenMPI leaves
# allocations at exit, some from components it has already unloaded, which no suppression
# can name: leaks do not fail a rank (exitcode=0); instead this script fails on any leak
# allocated by code in libina-mpi.so (libina is linked into it), and on any ASan or UBSan
# error (halt_on_error keeps those fatal).
SAN=0
if grep -q '^INA_SANITIZE:BOOL=ON' "$B/CMakeCache.txt" 2>/dev/null; then
    SAN=1
    echo "note: ASan build: ranks run with the interposer preloaded via mpirun -x; LeakSanitizer"
    echo "      reports are checked for allocations by libina-mpi.so only (OpenMPI's own ignored)"
fi

# run_app OUT NP [plain_allreduce args]: the program under the interposer, as documented:
# LD_PRELOAD=libina-mpi.so mpirun -np N ./app. Exit status of mpirun.
run_app() {
    run_app_unchecked "$@"
    local rc=$?
    san_checks "$1"
    return $rc
}
run_app_unchecked() {
    local out=$1 np=$2
    shift 2
    if [ "$SAN" = 0 ]; then
        LD_PRELOAD=$LIB "${MPIRUN[@]}" -np "$np" "$APP" "$@" >"$out" 2>&1
    else
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:symbolize=0 \
            LSAN_OPTIONS=exitcode=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            "${MPIRUN[@]}" -x LD_PRELOAD="$LIB" -x ASAN_OPTIONS -x LSAN_OPTIONS \
            -x UBSAN_OPTIONS -np "$np" "$APP" "$@" >"$out" 2>&1
    fi
}
san_checks() {
    [ "$SAN" = 1 ] || return 0
    # frame #1 is the caller of malloc (#0 is ASan's interceptor in the program)
    check "$(basename "$1"): no leak allocated by libina-mpi.so" \
        bash -c "! grep -Eq '^ *#1 0x[0-9a-f]+ +\\(.*/libina-mpi\\.so\\+' '$1'"
    check "$(basename "$1"): no ASan or UBSan error" \
        bash -c "! grep -Eq 'ERROR: AddressSanitizer|runtime error:' '$1'"
}


# ranks_ok OUT NP: every rank reports its checks and none failed.
ranks_ok() {
    [ "$(grep -c 'plain_allreduce: rank [0-9]* of '"$2"': [1-9][0-9]* checks, 0 failed' "$1")" -eq "$2" ] &&
        ! grep -q WRONG "$1"
}
# field OUT KIND RANK: KIND = ina, routed, passed or fell; the calls (or bytes, with
# $4 = bytes) from INA_MPI_VERBOSE's final line of RANK.
field() {
    local re
    case $3 in
    ina) re='s/.*: \([0-9]*\) calls (\([0-9]*\) bytes) through ina,.*/' ;;
    routed) re='s/.*ina, \([0-9]*\) calls (\([0-9]*\) bytes) routed to MPI.*/' ;;
    passed) re='s/.*there), \([0-9]*\) calls (\([0-9]*\) bytes) passed to MPI.*/' ;;
    fell) re='s/.*MPI, \([0-9]*\) calls (\([0-9]*\) bytes) fell back.*/' ;;
    esac
    if [ "${4:-calls}" = bytes ]; then re+='\2/p'; else re+='\1/p'; fi
    grep "ina-mpi: rank $2 of " "$1" | sed -n "$re"
}
counter() { sed -n "s/^ *$2  *\([0-9]*\)$/\1/p" "$1"; }

# ---- With a switch: np 2 and np 4 -------------------------------------------------------
start_switch "$tmp/sw1.err"
ina_bytes=0
for np in 2 4; do
    out=$tmp/np$np.out
    INA_MPI_VERBOSE=1 run_app "$out" "$np"
    rc=$?
    check "np $np: mpirun exits 0" test "$rc" -eq 0
    check "np $np: every rank's results correct" ranks_ok "$out" "$np"
    for r in $(seq 0 $((np - 1))); do
        # Per communicator and round: 10 calls through ina (3 float, 3 int, unsigned,
        # unaligned float, int MAX, float MIN) and 3 to MPI (count 0, double, user op); 2
        # rounds, on world and dup, and at np 4 on the split too (at np 2 its halves have
        # one rank).
        want=$((np == 2 ? 40 : 60))
        n=$(field "$out" "$r" ina)
        check "np $np rank $r: $want calls through ina (got ${n:-none})" test "${n:-0}" -eq "$want"
        ina_bytes=$((ina_bytes + $(field "$out" "$r" ina bytes)))
    done
    check "np $np: no fallback" test "$(field "$out" 0 fell)" -eq 0
    check "np $np: world and dup served by ina" \
        test "$(grep -c 'communicator of '"$np"' ranks served by ina job' "$out")" -eq 2
    if [ "$np" = 4 ]; then
        # the split by parity: two concurrent 2-rank communicators, two distinct jobs
        check "np 4: both halves of the split served by ina, distinct jobs" test "$(grep \
            'communicator of 2 ranks served by ina job' "$out" | sort -u | wc -l)" -eq 2
        check "np 4: split calls through ina" \
            grep -q "job '.*' (communicator of 2): 20 calls ([1-9][0-9]* bytes) through ina" "$out"
    else
        # size-1 halves pass through: 2 rounds x 13 calls more passed on every rank
        check "np 2: split of size 1 passed to MPI (38 calls)" test "$(field "$out" 0 passed)" -eq 38
    fi
done
# MPI_Init_thread(MPI_THREAD_MULTIPLE) is intercepted as MPI_Init is
out=$tmp/thread.out
INA_MPI_VERBOSE=1 run_app "$out" 2 --rounds 1 --init-thread
check "MPI_Init_thread: mpirun exits 0" test $? -eq 0
check "MPI_Init_thread: results correct" ranks_ok "$out" 2
check "MPI_Init_thread: 20 calls through ina" test "$(field "$out" 0 ina)" -eq 20
stop_switch
c=$tmp/sw1.err
check "switch: 8 jobs started (np 2: world, dup; np 4: world, dup, 2 halves; np 2 again)" \
    test "$(counter "$c" jobs_started)" -eq 8
check "switch: all 8 ended cleanly" test "$(counter "$c" jobs_ended)" -eq 8
check "switch: none aborted" test "$(counter "$c" jobs_aborted)" -eq 0
check "switch: completions counted" test "$(counter "$c" completions)" -gt 0
check "switch: received at least the bytes the ranks sent through ina ($ina_bytes)" \
    test "$(counter "$c" rx_bytes)" -ge "$ina_bytes"
check "switch: those bytes were a real amount" test "$ina_bytes" -gt 1000000

# ---- No switch: INA_SWITCH unset, everything passes through -----------------------------
unset INA_SWITCH
out=$tmp/noswitch.out
INA_MPI_VERBOSE=1 run_app "$out" 2
check "no switch: mpirun exits 0" test $? -eq 0
check "no switch: results correct" ranks_ok "$out" 2
check "no switch: one warning, on rank 0" test "$(grep -c 'INA_SWITCH is not set' "$out")" -eq 1
check "no switch: nothing through ina" test "$(field "$out" 0 ina)" -eq 0
check "no switch: all 78 calls passed to MPI" test "$(field "$out" 1 passed)" -eq 78
INA_MPI_QUIET=1 run_app "$out" 2
check "INA_MPI_QUIET=1: no warning" bash -c "! grep -q 'ina-mpi: ' '$out'"

# ---- A switch address where none listens: ina_init fails, pass through ------------------
out=$tmp/dead.out
INA_SWITCH=127.0.0.1:9 INA_JOIN_TIMEOUT_MS=1000 INA_MPI_VERBOSE=1 run_app "$out" 2
check "dead switch address: mpirun exits 0" test $? -eq 0
check "dead switch address: results correct" ranks_ok "$out" 2
check "dead switch address: one warning: ina_init failed, ina off for the run" test "$(grep -c \
    "ina_init of job .* failed on at least one rank (INA_ERR_TIMEOUT.* on every communicator" \
    "$out")" -eq 1
check "dead switch address: nothing through ina" test "$(field "$out" 0 ina)" -eq 0

# ---- One rank fails, the other has the sum: MPI broadcasts it ---------------------------
# INA_MPI_TEST_FAIL_RANK=1 (a test hook): rank 1's first successful ina call on world is
# reported as failed and its result scribbled over; rank 0 has the sum.
start_switch "$tmp/sw4.err"
out=$tmp/onefail.out
INA_MPI_TEST_FAIL_RANK=1 INA_MPI_VERBOSE=1 run_app "$out" 2 --rounds 1
check "one rank failed: mpirun exits 0" test $? -eq 0
check "one rank failed: results correct on every rank" ranks_ok "$out" 2
check "one rank failed: the sum was broadcast from rank 0" \
    grep -q "ina all-reduce on job .* failed (INA_ERR_ABORTED.*broadcast from rank 0" "$out"
check "one rank failed: one fallback on each rank" \
    test "$(field "$out" 0 fell)$(field "$out" 1 fell)" = 11
# world went to MPI after its first call; dup kept ina: 10 calls on it
check "one rank failed: dup still through ina" test "$(field "$out" 0 ina)" -eq 10
stop_switch

# ---- The switch dies mid-run: calls fall back to MPI, results stay right ----------------
# run_pause OUT SWITCH_LOG [VAR=VALUE...]: the program pauses after one round of checks;
# the switch is killed (SIGKILL) before it goes on. Sets rc.
run_pause() {
    local out=$1 log=$2
    shift 2
    rm -rf "$tmp/pause"
    mkdir -p "$tmp/pause"
    start_switch "$log"
    (
        for kv in "$@"; do export "${kv?}"; done
        INA_MPI_VERBOSE=1 run_app_unchecked "$out" 2 --rounds 1 --pause "$tmp/pause"
    ) &
    local app=$!
    for _ in $(seq 600); do [ -e "$tmp/pause/ready" ] && break; sleep 0.1; done
    kill -9 "$swpid"; wait "$swpid" 2>/dev/null; swpid=
    touch "$tmp/pause/go"
    wait "$app"; rc=$?
    san_checks "$out"
}
out=$tmp/kill.out
run_pause "$out" "$tmp/sw2.err"
check "switch killed: mpirun exits 0" test "$rc" -eq 0
check "switch killed: results correct on every rank" ranks_ok "$out" 2
check "switch killed: world and dup each fell back once" test "$(field "$out" 0 fell)" -eq 2
check "switch killed: the fallback is explained" \
    test "$(grep -c "ina all-reduce on job .* failed (ECONNREFUSED.*MPI_Allreduce of the original input" "$out")" -eq 2
# 19 before the pause (3 on world, 3 on dup, 13 on the 1-rank split), then one int call
# each on world and dup, which no longer have ina
check "switch killed: later calls passed to MPI" test "$(field "$out" 1 passed)" -eq 21

# Without a kept copy, an in-place call that failed everywhere cannot be redone: the
# program gets an MPI error (here fatal: MPI_ERRORS_ARE_FATAL), never a wrong sum.
out=$tmp/nocopy.out
run_pause "$out" "$tmp/sw3.err" INA_MPI_INPLACE_COPY=0
check "no in-place copy: the job fails" test "$rc" -ne 0
check "no in-place copy: says why" grep -q "in-place input was overwritten and not kept (INA_MPI_INPLACE_COPY=0)" "$out"
check "no in-place copy: no wrong result reported" bash -c "! grep -q WRONG '$out'"

# ---- Routing: each call to MPI or ina by its size, the same on every rank ----------------
# same_on_ranks OUT KIND R1 R2: KIND's calls and bytes are equal on ranks R1 and R2 (a rank
# that took another path than the others of its communicator would hang the job or show
# here).
same_on_ranks() {
    [ "$(field "$1" "$3" "$2") $(field "$1" "$3" "$2" bytes)" = \
        "$(field "$1" "$4" "$2") $(field "$1" "$4" "$2" bytes)" ]
}
start_switch "$tmp/sw5.err"
# A forced table: at 4 and 2 ranks on one host MPI is 10x faster up to 512 B and ina from
# 2048 B; the lines cross at 1280 B (ina chosen where it takes under 0.8 of MPI's time:
# 100 - 0.8 * 10 = 92 at 512 B, 20 - 0.8 * 140 = -92 at 2048 B). "hosts" says ina for every
# size: a wrong placement would show in the counts.
route=$tmp/route.txt
{
    echo "# placement ranks bytes mpi_us ina_us (a test table)"
    for n in 2 4; do
        printf 'onehost %d 4 10 100\nonehost %d 512 10 100   # small: MPI\n' "$n" "$n"
        printf 'onehost %d 2048 140 20\nonehost %d 1048576 1000 10\n' "$n" "$n"
        printf 'hosts %d 4 100 1\nhosts %d 1048576 1000 10\n' "$n" "$n"
    done
} >"$route"
out=$tmp/route.out
INA_MPI_ROUTE=table INA_MPI_ROUTE_FILE=$route INA_MPI_VERBOSE=1 run_app "$out" 4
check "table: mpirun exits 0" test $? -eq 0
check "table: every rank's results correct" ranks_ok "$out" 4
check "table: every communicator's route from the table, crossing at 1281 B" test "$(grep -c \
    "(communicator of [24], one host): route from the table '$route': MPI below 1281 B, ina from 1281 B$" \
    "$out")" -eq 4
# Per communicator and round, 5 calls of 1281 B or more through ina (4 x 20000 B and the
# unaligned 3108 B) and 5 smaller ones routed to MPI (12 + 12 + 8 + 4 + 12 B); 6 rounds of
# communicators per rank (world, dup, split; 2 rounds).
for r in 0 1 2 3; do
    check "table: rank $r: 30 calls (498648 B) through ina, 30 (288 B) routed to MPI" test \
        "$(field "$out" $r ina) $(field "$out" $r ina bytes) $(field "$out" $r routed) $(field "$out" $r routed bytes)" \
        = "30 498648 30 288"
done
check "table: the ineligible calls still passed to MPI (18 per rank)" \
    test "$(field "$out" 3 passed)" -eq 18
check "table: per communicator too" test "$(grep -c \
    "(communicator of [24]): 10 calls (166216 bytes) through ina, 10 calls (96 bytes) routed to MPI, 0 fell back" \
    "$out")" -eq 4

same_halves() { same_on_ranks "$1" "$2" 0 2 && same_on_ranks "$1" "$2" 1 3; }
# No table: a calibration at MPI_Init (world), then reused (dup) or run again (each half of
# the split, a communicator of its own); which path wins depends on the machine, but every
# rank of a communicator takes the same one: ranks 0 and 2 (one half) have the same totals,
# and so do 1 and 3.
out=$tmp/calib.out
INA_MPI_ROUTE=auto INA_MPI_VERBOSE=1 run_app "$out" 4 --rounds 1
check "calibration: mpirun exits 0" test $? -eq 0
check "calibration: results correct" ranks_ok "$out" 4
check "calibration: world calibrated at MPI_Init, said in the log" \
    grep -q "job 'mpi-[0-9a-f]*' (communicator of 4, one host): route calibrated in [0-9]* ms (8 sizes, 4 B to 4194304 B): " "$out"
check "calibration: the dup reuses it" \
    grep -q "(communicator of 4, one host): route from this run's calibration of an earlier communicator" "$out"
n_ina=$(field "$out" 2 ina) n_routed=$(field "$out" 2 routed)
check "calibration: every eligible call counted on one path (30 per rank)" \
    test $((${n_ina:-0} + ${n_routed:-0})) -eq 30
for kind in ina routed passed; do
    check "calibration: '$kind' calls and bytes the same on ranks 0 and 2, 1 and 3" \
        same_halves "$out" "$kind"
done

# INA_MPI_ROUTE=mpi: nothing through ina; the default table path under XDG_CACHE_HOME.
out=$tmp/mpi.out
INA_MPI_ROUTE=mpi INA_MPI_VERBOSE=1 run_app "$out" 2 --rounds 1
check "INA_MPI_ROUTE=mpi: results correct, nothing through ina, 20 calls routed to MPI" test \
    "$(ranks_ok "$out" 2 && echo ok) $(field "$out" 1 ina) $(field "$out" 1 routed)" = "ok 0 20"
mkdir -p "$tmp/xdg/ina"
cp "$route" "$tmp/xdg/ina/mpi-route.txt"
out=$tmp/xdg.out
(unset INA_MPI_ROUTE_FILE; XDG_CACHE_HOME=$tmp/xdg INA_MPI_ROUTE=auto INA_MPI_VERBOSE=1 \
    run_app "$out" 2 --rounds 1)
check "default table path: \$XDG_CACHE_HOME/ina/mpi-route.txt read, 10 through ina" test \
    "$(grep -c "route from the table '$tmp/xdg/ina/mpi-route.txt'" "$out") $(field "$out" 0 ina)" = "2 10"
# A malformed table is ignored as a whole, with a warning naming its line.
printf 'onehost 2 4 10 100\nonehost 2 64 fast 1\n' >"$tmp/bad.txt"
out=$tmp/bad.out
INA_MPI_ROUTE=table INA_MPI_ROUTE_FILE=$tmp/bad.txt INA_MPI_VERBOSE=1 run_app "$out" 2 --rounds 1
check "malformed table: results correct" ranks_ok "$out" 2
check "malformed table: one warning naming line 2" test "$(grep -c \
    "route table '$tmp/bad.txt': line 2 is not" "$out")" -eq 1
check "malformed table: ignored; INA_MPI_ROUTE=table without an entry sends all to MPI" test \
    "$(field "$out" 0 ina) $(grep -c 'no table entry and INA_MPI_ROUTE=table: MPI for every size' "$out")" = "0 2"
stop_switch
check "switch: the routed runs' jobs all ended cleanly, none aborted" \
    test "$(counter "$tmp/sw5.err" jobs_aborted)" -eq 0

finish test_mpi
