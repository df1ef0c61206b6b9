#!/usr/bin/env bash
# The published guide's train.sh interface, delegating to the container entry point.
#
#   PRECISION=mxfp8 NUM_LAYERS=10 BATCH_SIZE=8 SEQ_LENGTH=2048 training/train.sh
#
# The guide's variables (PRECISION, NUM_LAYERS, BATCH_SIZE, SEQ_LENGTH, and MODEL) become
# SM_HP_* variables, which training.entrypoint honours on top of hyperparameters.json;
# SM_HP_* already set win. Defaults are the guide's: mxfp8, 10 layers, batch 8, sequence 2048
# (precision/batch/sequence are also the trainer's own defaults; NUM_LAYERS=10 is applied only
# when neither SM_HP_NUM_LAYERS nor hyperparameters.json sets num_layers).
# The entry point launches torchrun with one process per GPU (8 on P5/P6), as the guide does.
set -euo pipefail

base="${SAGEMAKER_BASE_DIR:-/opt/ml}"
hp_file="${base}/input/config/hyperparameters.json"

[[ -n "${PRECISION:-}" && -z "${SM_HP_PRECISION:-}" ]] && export SM_HP_PRECISION="${PRECISION}"
[[ -n "${BATCH_SIZE:-}" && -z "${SM_HP_BATCH_SIZE:-}" ]] && export SM_HP_BATCH_SIZE="${BATCH_SIZE}"
[[ -n "${SEQ_LENGTH:-}" && -z "${SM_HP_SEQ_LENGTH:-}" ]] && export SM_HP_SEQ_LENGTH="${SEQ_LENGTH}"
[[ -n "${MODEL:-}" && -z "${SM_HP_MODEL:-}" ]] && export SM_HP_MODEL="${MODEL}"
if [[ -z "${SM_HP_NUM_LAYERS:-}" ]]; then
  if [[ -n "${NUM_LAYERS:-}" ]]; then
    export SM_HP_NUM_LAYERS="${NUM_LAYERS}"
  elif ! grep -qs '"num_layers"' "${hp_file}"; then
    export SM_HP_NUM_LAYERS=10
  fi
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${here}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python3}" -m training.entrypoint train "$@"
