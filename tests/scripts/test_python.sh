#!/usr/bin/env bash
# test_python.sh: the Python package (python/ina) and the DDP training example against this
# build's libina and ina-switch:
#   0. tests/python/test_abi.py: the ctypes mirrors of the C structs have the sizes and offsets
#      of include/ina.h and of this build's libina, and a stale libina is refused by name;
#   1. tests/python/test_ina.py: ina.allreduce on numpy arrays and torch tensors (in place,
#      non-contiguous, int32 exact, float32 within ina_float_error_bound, async, errors), N=1
#      and N=3 workers, and the ina.torch DDP hook against Gloo's gradients (N=2);
#   2. tests/python/check_training.py: examples/pytorch/train_ddp.py with --backend gloo and
#      --backend ina, same seed, N=3, 4 epochs: loss curves within 1e-3 relative, final
#      accuracy with ina >= Gloo's - 0.02 (reasons in that file and docs/PYTHON.md); then the
#      same with bfloat16 gradients (--compress bf16: ina.torch.bf16_compress_hook against Gloo
#      with the same compression), 2 epochs: losses within 1%, accuracy within 0.5 points.
# In an ASan build (INA_SANITIZE=ON) the instrumented libina.so is loaded into Python with the
# compiler's shared ASan runtime in LD_PRELOAD, and LeakSanitizer off for the Python processes
# (the interpreter and torch keep memory at exit by design; the C tests check libina's leaks).
# If that runtime cannot be found or cannot run Python, this build skips with a message; the
# gcc build never skips. Every step runs under `timeout`, which kills the whole process group.
set -uo pipefail
exec </dev/null
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${INA_PYTHON:-/usr/bin/python3}
SW=$B/bin/ina-switch
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, cleanup, ok/bad/check

for need in "$SW" "$B/lib/libina.so"; do
    [ -e "$need" ] || { echo "FAIL: $need missing (build first)"; exit 1; }
done
if ! "$PY" -c 'import numpy, torch, sklearn' 2>"$tmp/import.err"; then
    # make test installs them (scripts/deps.sh --test); a missing package is a failure.
    echo "FAIL: $PY cannot import numpy, torch and sklearn (scripts/deps.sh --test):"
    cat "$tmp/import.err"
    exit 1
fi

export INA_LIBRARY=$B/lib/libina.so INA_BUILD_DIR=$B PYTHONDONTWRITEBYTECODE=1
PYENV=()
if ! rt=$(asan_runtime "$B"); then
    echo "SKIP (ASan build): no shared ASan runtime from its compiler to load the instrumented libina into Python"
    exit 0
fi
if [ -n "$rt" ]; then
    PYENV=(env "LD_PRELOAD=$rt" "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1"
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    if ! "${PYENV[@]}" timeout 60 "$PY" -c "import sys; sys.path.insert(0, '$SRC/python'); import ina; ina.library_version()" \
        >"$tmp/probe" 2>&1; then
        echo "SKIP (ASan build): Python cannot load the ASan libina with LD_PRELOAD=$rt:"
        tail -5 "$tmp/probe"
        exit 0
    fi
    echo "ASan build: Python runs with LD_PRELOAD=$rt, detect_leaks=0"
fi

# result STATUS OUTPUT PATTERN WHAT: show a step's output; ok if it exited 0 and printed PATTERN.
result() {
    cat "$2"
    if [ "$1" -eq 0 ] && grep -q "$3" "$2"; then ok "$4"; else bad "$4 (exit status $1)"; fi
}

"${PYENV[@]}" timeout -k 5 120 "$PY" "$SRC/tests/python/test_abi.py" --src "$SRC" --build "$B" \
    >"$tmp/abi" 2>&1
result $? "$tmp/abi" '^test_abi: [1-9][0-9]* passed, 0 failed' \
    "test_abi.py (the ctypes mirrors against ina.h and libina; a stale libina refused)"
stop_switch() {
    kill -TERM "$swpid"; wait "$swpid"; local rc=$?; swpid=
    [ "$rc" -eq 0 ] && ok "ina-switch exits 0 after the Python tests" || bad "ina-switch exit status $rc"
}

# One switch for the unit tests; the training example starts its own.
"$SW" --listen 127.0.0.1:0 --port-file "$tmp/port" --quiet 2>"$tmp/sw.err" &
swpid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "FAIL: ina-switch did not start"; cat "$tmp/sw.err"; exit 1; }
export INA_SWITCH=127.0.0.1:$(cat "$tmp/port")

"${PYENV[@]}" timeout -k 5 150 "$PY" "$SRC/tests/python/test_ina.py" --deadline 120 >"$tmp/unit" 2>&1
result $? "$tmp/unit" '^test_ina: [1-9][0-9]* checks passed, 0 failed' \
    "test_ina.py (numpy, torch, DDP hook; N=1, 2, 3)"

# The example starts its own switch when INA_SWITCH is unset (the gcc build tests that path).
# In the ASan build that switch would inherit LD_PRELOAD, which an executable linked with the
# static ASan runtime refuses: there the example uses the switch already running.
if [ ${#PYENV[@]} -eq 0 ]; then
    stop_switch
    unset INA_SWITCH
fi

"${PYENV[@]}" timeout -k 5 200 "$PY" "$SRC/tests/python/check_training.py" --nproc 3 --epochs 4 \
    --seed 1 --timeout 150 >"$tmp/train" 2>&1
result $? "$tmp/train" '^check_training: .*: ok$' \
    "train_ddp.py: ina and Gloo loss curves agree, accuracy within margin"

"${PYENV[@]}" timeout -k 5 200 "$PY" "$SRC/tests/python/check_training.py" --nproc 3 --epochs 2 \
    --seed 1 --compress bf16 --timeout 150 >"$tmp/train16" 2>&1
result $? "$tmp/train16" '^check_training: .*bf16 gradients.*: ok$' \
    "train_ddp.py --compress bf16: ina's bf16 hook and Gloo's bf16 compression agree"

if [ -n "$swpid" ]; then
    stop_switch
fi

echo "test_python: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
