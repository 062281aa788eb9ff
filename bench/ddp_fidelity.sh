#!/usr/bin/env bash
# ddp_fidelity.sh: DDP with 16-bit gradients through ina against Gloo with the same compression,
# the longer run of the fidelity check of issue 32 (make test runs 2 epochs of one seed):
# examples/pytorch/train_ddp.py --compress bf16 (or fp16), --backend gloo and ina, for each seed;
# tests/python/check_training.py prints every seed's curves and checks the means over the seeds
# (per-epoch loss within 1% relative, final accuracy within 0.5 points). docs/PYTHON.md,
# "bfloat16 gradients", says why single seeds part after a few epochs.
#
# Usage: bench/ddp_fidelity.sh [--compress bf16|fp16] [--nproc N] [--epochs E] [--seeds LIST]
# Defaults: bf16, N=3, 10 epochs, seeds 1,2,3,4,5,6 (about 2 minutes on 2 cores).
# Environment: INA_BUILD_DIR (default build): its ina-switch and libina.
set -uo pipefail
exec </dev/null
cd "$(dirname "$0")/.." || exit 1
COMPRESS=bf16 NPROC=3 EPOCHS=10 SEEDS=1,2,3,4,5,6
while [ $# -gt 0 ]; do
    case $1 in
        --compress) COMPRESS=${2:?}; shift ;;
        --nproc) NPROC=${2:?}; shift ;;
        --epochs) EPOCHS=${2:?}; shift ;;
        --seeds) SEEDS=${2:?}; shift ;;
        -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "ddp_fidelity: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case $COMPRESS in bf16 | fp16) ;; *) echo "ddp_fidelity: --compress bf16 or fp16" >&2; exit 2 ;; esac
B=${INA_BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
[ -x "$B/bin/ina-switch" ] && [ -e "$B/lib/libina.so" ] || { echo "ddp_fidelity: build first ($B)" >&2; exit 1; }
export INA_BUILD_DIR=$B INA_LIBRARY=$B/lib/libina.so PYTHONDONTWRITEBYTECODE=1
unset INA_SWITCH # train_ddp.py starts a switch of its own per run
PY=${INA_PYTHON:-/usr/bin/python3}
echo "ddp_fidelity: --compress $COMPRESS, N=$NPROC, $EPOCHS epochs, seeds $SEEDS, libina $INA_LIBRARY"
timeout -k 5 3600 "$PY" tests/python/check_training.py --compress "$COMPRESS" --nproc "$NPROC" \
    --epochs "$EPOCHS" --seeds "$SEEDS" --timeout 600
