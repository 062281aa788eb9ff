#!/usr/bin/env bash
# test_glm.sh: ina-glm (apps/glm, docs/GLM.md). Every loss at N = 1, 2, 4 through ina (--local N,
# fixed point Q8.23) and MPI (mpirun) follows the trajectory of --comm local within the stated
# tolerance; W = 4 micro-batches in flight, and micro-batches of other sizes, give the same
# trajectory bit for bit; the objective ends within 1% of scikit-learn's optimum on real data;
# data-parallel follows model-parallel; training on generated data recovers the planted model;
# generated data survives a libsvm round trip; bad input and out-of-range sums fail clearly.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SRC=${INA_SOURCE_DIR:-.}
GLM=$B/bin/ina-glm
[ -x "$GLM" ] || { echo "FAIL: $GLM not built"; exit 1; }
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"
unset INA_SWITCH INA_JOB INA_RANK INA_WORLD_SIZE RANK WORLD_SIZE INA_FIXED_POINT INA_BUSY_POLL_US
export INA_QUIET=1
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

# The trajectory tolerance (docs/GLM.md): per evaluation, |objective - local's| <= 1e-5 of it.
# Each step's sums differ from local's by at most the all-reduce's bound (fixed point:
# N 2^-24 per dot; floats: a few ulps), which moves the objective by ~1e-8 in these runs.
TOL=1e-5

# same_curve A B TOL: the same number of evaluations, objectives within TOL relative
# (TOL 0: equal bit for bit, as printed with 9 digits).
same_curve() {
    $PY - "$1" "$2" "$3" <<'PYEOF'
import json, sys
def curve(p):
    return [json.loads(l)["objective"] for l in open(p) if l.startswith('{"epoch"')]
a, b, tol = curve(sys.argv[1]), curve(sys.argv[2]), float(sys.argv[3])
if len(a) != len(b) or len(a) < 2:
    sys.exit("evaluations: %d against %d" % (len(a), len(b)))
worst = max(abs(x - y) / max(abs(x), 1e-300) for x, y in zip(a, b))
if worst > tol or (tol == 0 and a != b):
    sys.exit("objective differs by %.3g relative (tolerance %g): %s against %s" % (worst, tol, a, b))
PYEOF
}
summary() { grep '"summary"' "$1"; }
field() { summary "$1" | sed -n "s/.*\"$2\":\\([^,}]*\\).*/\\1/p"; }

# MPI: only if this ina-glm was built with it. The ASan build: OpenMPI leaves allocations at
# exit (see test_mpi.sh), so MPI runs do not check leaks; every other run does.
MPI=0
if "$GLM" --help | grep -q "this build has MPI" && command -v mpirun >/dev/null; then
    MPI=1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
    export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
else
    echo "note: ina-glm built without MPI (or no mpirun): the --comm mpi cases are skipped"
fi
# mpi NP ARGS: ina-glm --comm mpi under mpirun, its output on stdout. A run that ends without
# its summary is tried once more, saying why on the test's output: on this shared machine
# mpirun was seen (once in many runs) to start no rank, and --comm mpi computes the same
# thing every time, so a real failure fails twice.
exec 3>&1
mpi() {
    local np=$1 attempt
    shift
    for attempt in 1 2; do
        ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 timeout 120 mpirun --oversubscribe \
            --bind-to none -x ASAN_OPTIONS -np "$np" "$GLM" --comm mpi "$@" \
            >"$tmp/mpi.out" 2>"$tmp/mpi.err"
        local rc=$?
        if [ "$rc" = 0 ] && grep -q '"summary"' "$tmp/mpi.out"; then
            cat "$tmp/mpi.out"
            return 0
        fi
        echo "note: mpirun -np $np $* (attempt $attempt): status $rc, stderr:" >&3
        sed 's/^/    /' "$tmp/mpi.err" | tail -15 >&3
    done
    cat "$tmp/mpi.out"
    return 1
}

# ---- datasets: Debian's heart_scale, scikit-learn's breast_cancer, diabetes, digits, wine ----
heart=/usr/share/doc/liblinear-tools/examples/heart_scale
[ -f "$heart" ] || heart=$(dpkg -L liblinear-tools 2>/dev/null | grep '/heart_scale$' | head -1)
if [ -n "$heart" ] && [ -f "$heart" ]; then
    logistic_data=(--data "$heart")
else
    echo "note: no heart_scale (apt-get install liblinear-tools): logistic on generated data"
    logistic_data=(--gen 270x13:13)
fi
if $PY "$SRC/apps/glm/datasets/export_sklearn.py" --out "$tmp" >"$tmp/export.log" 2>&1; then
    hinge_data=(--data "$tmp/breast_cancer.svm")
    squared_data=(--data "$tmp/diabetes.svm" --bias)
else
    echo "note: scikit-learn export failed ($(tail -1 "$tmp/export.log")): generated data instead"
    hinge_data=(--gen 569x30:30)
    squared_data=(--gen 442x10:10)
fi

# ---- every loss at N = 1, 2, 4: ina and MPI against local ----------------------------------
for loss in logistic hinge squared; do
    case $loss in
        logistic) data=("${logistic_data[@]}") lr=0.5 ;;
        hinge) data=("${hinge_data[@]}") lr=0.5 ;;
        squared) data=("${squared_data[@]}") lr=0.2 ;;
    esac
    common=(--loss "$loss" --lr "$lr" --epochs 4 --batch 16 --json "${data[@]}")
    if ! "$GLM" "${common[@]}" >"$tmp/$loss.local" 2>"$tmp/err"; then
        bad "$loss: --comm local failed: $(cat "$tmp/err")"
        continue
    fi
    check "$loss: local run learns (objective falls)" $PY -c '
import json, sys
c = [json.loads(l)["objective"] for l in open(sys.argv[1]) if l.startswith("{\"epoch")]
sys.exit(0 if len(c) == 5 and c[-1] < 0.9 * c[0] else "curve %s" % c)' "$tmp/$loss.local"
    for n in 1 2 4; do
        timeout 120 "$GLM" "${common[@]}" --comm ina --local "$n" >"$tmp/$loss.ina$n" 2>"$tmp/err"
        check "$loss: ina N=$n (fixed point) follows local within $TOL" \
            same_curve "$tmp/$loss.local" "$tmp/$loss.ina$n" "$TOL"
        [ "$(field "$tmp/$loss.ina$n" fixed_bits)" = 23 ] ||
            bad "$loss: ina N=$n did not run in fixed point: $(summary "$tmp/$loss.ina$n")"
        if [ "$MPI" = 1 ]; then
            mpi "$n" "${common[@]}" >"$tmp/$loss.mpi$n" 2>"$tmp/err"
            check "$loss: mpi N=$n follows local within $TOL" \
                same_curve "$tmp/$loss.local" "$tmp/$loss.mpi$n" "$TOL"
        fi
    done
    # Pipelining: 4 micro-batches in flight, completed in order: W = 1's arithmetic exactly.
    timeout 120 "$GLM" "${common[@]}" --comm ina --local 4 --window 4 >"$tmp/$loss.w4" 2>"$tmp/err"
    check "$loss: ina W=4 gives W=1's trajectory bit for bit" \
        same_curve "$tmp/$loss.ina4" "$tmp/$loss.w4" 0
    # Busy polling (workers, and the switch --local starts) changes when, not what.
    timeout 120 "$GLM" "${common[@]}" --comm ina --local 4 --busy-poll 100 >"$tmp/$loss.busy" \
        2>"$tmp/err"
    check "$loss: ina N=4 busy-polling gives the same trajectory bit for bit" \
        same_curve "$tmp/$loss.ina4" "$tmp/$loss.busy" 0
done
if [ "$MPI" = 1 ]; then
    mpi 4 --loss logistic --lr 0.5 --epochs 4 --batch 16 --json "${logistic_data[@]}" \
        --window 4 >"$tmp/mpi.w4" 2>"$tmp/err"
    check "logistic: mpi W=4 (MPI_Iallreduce) follows W=1 within $TOL" \
        same_curve "$tmp/logistic.mpi4" "$tmp/mpi.w4" "$TOL"
fi

# ---- micro-batches: how many dots one all-reduce sums changes when a worker waits, not what
# it computes: every forward of a mini-batch comes before its first backward, and fixed-point
# sums are exact however they are grouped.
common=(--loss logistic --lr 0.5 --epochs 4 --batch 16 --json "${logistic_data[@]}")
timeout 120 "$GLM" "${common[@]}" --comm ina --local 4 --micro 3 --window 2 >"$tmp/m3" 2>"$tmp/err"
check "ina N=4: micro-batches of 3, 2 in flight, give 8's trajectory bit for bit" \
    same_curve "$tmp/logistic.ina4" "$tmp/m3" 0
"$GLM" "${common[@]}" --micro 16 >"$tmp/m16" 2>"$tmp/err"
check "local: one micro-batch of 16 a step gives 8's trajectory bit for bit" \
    same_curve "$tmp/logistic.local" "$tmp/m16" 0
# Each evaluation reports the all-reduces of its span: one per micro-batch, sum ceil(b / M)
# over the epoch's mini-batches (the last one short), and waits within the communication time.
check "rounds per epoch: one all-reduce per micro-batch (M = 3 and 8), waits within comm" $PY - "$tmp/m3" "$tmp/logistic.ina4" <<'PYEOF'
import json, sys
for path in sys.argv[1:]:
    ev = [json.loads(l) for l in open(path) if l.startswith("{")]
    s = ev[-1]
    n, B, M = s["samples"], s["batch"], s["micro"]
    want = sum(-(-min(B, n - b0) // M) for b0 in range(0, n, B))
    for e in ev[1:-1]:
        if e["rounds"] != want or not 0 <= e["wait_s"] <= e["comm_s"] or e["cpu_s"] <= 0:
            sys.exit("%s: epoch %d: rounds %d (want %d), wait_s %g, comm_s %g, cpu_s %g" % (
                path, e["epoch"], e["rounds"], want, e["wait_s"], e["comm_s"], e["cpu_s"]))
PYEOF

# ---- against scikit-learn and liblinear: the optimum of the same objective ------------------
# reference.py solves min mean loss + l2/2 |x|^2 exactly (Ridge, LogisticRegression with lbfgs,
# LinearSVC = liblinear's dual solver), l2 = 0.01. ina-glm at N = 4 through ina (fixed point)
# must end within 1% above it: SGD with a constant rate ends in a noise band above the optimum
# (up to 7% here after 30 epochs), so the rate decays, lr / (1 + D (e - 1)) in epoch e. The
# rates are the data's: wine's 178 samples make 12 steps an epoch and need a larger one.
refcase() { # loss lr decay epochs data...
    local loss=$1 lr=$2 decay=$3 epochs=$4
    shift 4
    local name
    name=$(basename "$2")
    bias=
    [ "${3:-}" = --bias ] && bias=--bias
    if ! opt=$($PY "$SRC/apps/glm/datasets/reference.py" "$2" "$loss" 0.01 $bias 2>"$tmp/err"); then
        echo "note: $loss on $name: scikit-learn reference failed: $(tail -1 "$tmp/err")"
        return
    fi
    timeout 120 "$GLM" --loss "$loss" --l2 0.01 --lr "$lr" --lr-decay "$decay" --epochs "$epochs" \
        --batch 16 --json "$@" --comm ina --local 4 >"$tmp/ref" 2>"$tmp/err"
    got=$(field "$tmp/ref" objective)
    check "$loss on $name: ina N=4 reaches scikit-learn's optimum $opt within 1% (got ${got:-none})" \
        $PY -c "import sys; o, g = float('$opt'), float('${got:-nan}'); sys.exit(0 if o * (1 - 1e-6) <= g <= o * 1.01 else 1)"
}
[ "${logistic_data[0]}" = --data ] && refcase logistic 0.5 0.5 100 "${logistic_data[@]}"
if [ "${hinge_data[0]}" = --data ]; then
    refcase hinge 0.5 0.5 100 "${hinge_data[@]}"
    refcase squared 0.5 0.5 100 "${squared_data[@]}"
    refcase logistic 0.5 0.5 100 --data "$tmp/digits.svm"
    refcase hinge 0.5 0.5 100 --data "$tmp/digits.svm"
    refcase logistic 2 0.1 200 --data "$tmp/wine.svm"
else
    echo "note: no scikit-learn files: only heart_scale is compared with its optimum"
fi

# ---- data-parallel follows model-parallel --------------------------------------------------
timeout 120 "$GLM" --loss logistic --lr 0.5 --epochs 4 --batch 16 --json "${logistic_data[@]}" \
    --comm ina --local 2 --data-parallel --fixed-bits 0 >"$tmp/dp" 2>"$tmp/err"
check "data-parallel (gradients all-reduced) follows model-parallel within $TOL" \
    same_curve "$tmp/logistic.local" "$tmp/dp" "$TOL"

# ---- the planted model is recovered ---------------------------------------------------------
# 3000 dense samples of 16 features, y = a.x* + N(0, 0.01^2): least squares is within about
# 0.002 of x*; the stated tolerance is |x - x*| / |x*| <= 0.01 after 6 epochs.
timeout 120 "$GLM" --gen 3000x16:16 --loss squared --noise 0.01 --lr 0.1 --batch 8 --epochs 6 \
    --comm ina --local 2 --json >"$tmp/planted" 2>"$tmp/err"
err=$(field "$tmp/planted" model_err)
check "planted model recovered: |x - x*| / |x*| = ${err:-none} <= 0.01" \
    $PY -c "import sys; sys.exit(0 if 0 <= float('${err:-nan}') <= 0.01 else 1)"

# ---- a libsvm round trip keeps the data exactly -----------------------------------------------
timeout 60 "$GLM" --gen 200x500:20 --seed 7 --epochs 2 --json --save-data "$tmp/gen.svm" \
    >"$tmp/gen.a" 2>"$tmp/err"
timeout 60 "$GLM" --data "$tmp/gen.svm" --features 500 --epochs 2 --json >"$tmp/gen.b" 2>"$tmp/err"
check "generated data written and read back trains the same, bit for bit" \
    same_curve "$tmp/gen.a" "$tmp/gen.b" 0
check "generated rows: about 20 nonzeros each, 1-based increasing indices" $PY -c '
import sys
rows = [l.split()[1:] for l in open(sys.argv[1])]
idx = [[int(t.split(":")[0]) for t in r] for r in rows]
ok = len(rows) == 200 and all(i == sorted(set(i)) and i[0] >= 1 and i[-1] <= 500 for i in idx)
mean = sum(map(len, rows)) / len(rows)
sys.exit(0 if ok and 15 <= mean <= 25 else "rows %d, mean nonzeros %.1f" % (len(rows), mean))' \
    "$tmp/gen.svm"

# ---- bad input says what and where, and fails ------------------------------------------------
printf '1 1:0.5 2:1\n-1 2:0.25 1:3\n' >"$tmp/bad.svm"
"$GLM" --data "$tmp/bad.svm" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "malformed libsvm (indices not increasing): exit 1, says the line" \
    test "$rc" = 1 -a -n "$(grep 'line 2: index 1 after 2' "$tmp/err")"
printf '1 1:0.5 x:1\n' >"$tmp/bad.svm"
"$GLM" --data "$tmp/bad.svm" >"$tmp/out" 2>"$tmp/err"
check "malformed libsvm (index not a number): exit 1, says the line" \
    test $? = 1 -a -n "$(grep 'line 1: index .x. is not an integer' "$tmp/err")"
printf '1 1:nan\n' >"$tmp/bad.svm"
"$GLM" --data "$tmp/bad.svm" >"$tmp/out" 2>"$tmp/err"
check "libsvm with a NaN value refused" test $? = 1 -a -n "$(grep 'not a finite float' "$tmp/err")"
"$GLM" --gen rcv1 --comm mpi --local 2 >"$tmp/out" 2>"$tmp/err"
check "usage error: --local with --comm mpi is exit 2" test $? = 2
# Fixed point has a range: with 30 fractional bits (|x| < 2) the dots of this model reach 2.3,
# and every rank stops with the same clear error rather than a wrapped sum.
timeout 60 "$GLM" --gen 2000x16:16 --loss squared --noise 0 --lr 0.5 --epochs 2 --comm ina \
    --local 2 --fixed-bits 30 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "fixed-point range exceeded: exit 1, every rank says why" \
    test "$rc" = 1 -a "$(grep -c 'left the fixed-point range of Q1.30' "$tmp/err")" = 2

finish test_glm
