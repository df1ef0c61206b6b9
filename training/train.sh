#!/usr/bin/env bash
# The published guide's train.sh interface, delegating to the container entry point.
#
#   PRECISION=mxfp8 NUM_LAYERS=10 BATCH_SIZE=8 SEQ_LENGTH=2048 training/train.sh
#
# The guide's variables (PRECISION, NUM_LAYERS, BATCH_SIZE, SEQ_LENGTH, and MODEL) are read by the
# entry point itself (`train --guide-variables`, training.environment.raw_hyperparameters), which knows
# every spelling of a hyperparameter the trainer accepts. Strongest first: SM_HP_* variables (any
# spelling: SM_HP_NUM_LAYERS, SM_HP_num_layers), the guide's variables, hyperparameters.json (any
# spelling: num_layers, num-layers, NUM_LAYERS), then the guide's defaults: mxfp8, 10 layers, batch 8,
# sequence 2048 (precision/batch/sequence are also the trainer's own defaults; NUM_LAYERS=10 applies
# only when nothing sets num_layers).
# The entry point launches torchrun with one process per GPU (8 on P5/P6), as the guide does.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${here}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python3}" -m training.entrypoint train --guide-variables "$@"
