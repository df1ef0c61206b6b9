#!/usr/bin/env bash
# The prepared GPU check, one command (benchmarks/gpu_check.py says what it measures):
#
#   benchmarks/gpu_check.sh              # on a GPU machine: results in $OUT/results.json and results.md
#   benchmarks/gpu_check.sh --dry-run    # every step on the CPU with a tiny model (make test runs it)
#
# Needs only python with torch and numpy (no install, no network) and this repository. Inside the
# trainer image (TransformerEngine too): benchmarks/gpu_check_in_image.sh IMAGE.
#
# Time: GPU_CHECK_TIMEOUT_S (default 420 s; the expected run on one H100 80 GB is 4-5 minutes, estimated,
# not yet measured) is the limit: `timeout` sends SIGTERM then, SIGKILL 15 s later, and gpu_check.py gets
# --budget-s 30 s less (half of a limit under 60 s; no throughput configuration starts in the last
# CONFIG_MARGIN_S of the budget; a --budget-s given here wins) and prints that budget with each step's
# estimate before it starts. 420 + 15 s fits one device call of 8 minutes (timeout_s=480) with the
# Python and CUDA start-up, of the 15 device-minutes a session has with the machine's own start-up.
# results.json and results.md are rewritten before and after every step, so a run cut off still reports.
#
# Exit status: 0 every step that ran passed (skips are not failures); 1 a step failed (no usable CUDA
# included: the run ends after the environment step, nothing trains on the CPU) or the run was cut off
# by a signal; 2 bad arguments; 124 the time limit cut the run off (the files say "cut off"); 137 it did
# not stop within 15 s of that and was killed (the files are as of the last step boundary).
#
# PYTHON picks the interpreter (default: the first of python3, python that imports torch). The
# repository goes first on PYTHONPATH, ahead of what the environment had (the trainer image's
# /opt/trainer), so the checkout's code runs with the installed libraries.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
out="${OUT:-${TMPDIR:-/tmp}/gpu-check}"
timeout_s="${GPU_CHECK_TIMEOUT_S:-420}"
if ! [[ "$timeout_s" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_check.sh: GPU_CHECK_TIMEOUT_S=${timeout_s}: expected whole seconds >= 1 (default 420)" >&2
  exit 2
fi
export GPU_CHECK_TIMEOUT_S="$timeout_s"  # the limit, for the budget gpu_check.py prints
budget_s=$(( timeout_s >= 60 ? timeout_s - 30 : (timeout_s + 1) / 2 ))
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONUNBUFFERED=1
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"  # deterministic cuBLAS (the resume step)
if [[ -z "${PYTHON:-}" ]]; then  # the first interpreter that has torch
  for candidate in python3 python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import torch" 2>/dev/null; then PYTHON="$candidate"; break; fi
  done
fi
cd "$repo"
exec timeout --signal=TERM --kill-after=15 "$timeout_s" \
  "${PYTHON:-python3}" "$here/gpu_check.py" --out "$out" --budget-s "$budget_s" "$@"
