#!/usr/bin/env bash
# The prepared GPU check inside the trainer image, on one GPU: the TransformerEngine path (the image's
# TransformerEngine, PyTorch, CUDA and NCCL: platform_spec/trainer_image.py) before a reserved week depends
# on it; the first job after the image moves to a new NGC release.
#
#   benchmarks/gpu_check_in_image.sh --build                    # build trainer:gpu-check from this checkout, then check
#   benchmarks/gpu_check_in_image.sh trainer:dev                # an image built already; results in $OUT
#   benchmarks/gpu_check_in_image.sh trainer:dev --skip throughput   # (default /tmp/gpu-check)
#
# --build runs `docker build --build-arg BASE_IMAGE=<platform_spec.trainer_image.BASE_IMAGE> -f
# training/Dockerfile -t trainer:gpu-check <this checkout>` first: the base image's one home is that module
# (the Dockerfile's ARG BASE_IMAGE has no default), read with `python3 -m platform_spec.trainer_image`.
#
# The image holds training/, platform_spec/ and model_families/ only (the CDK asset's build context; the
# check also imports planner/ from the checkout), and its ENTRYPOINT runs
# `python -m training.entrypoint`, which would take `bash ...` as its own arguments. So this runs
#
#   docker run --rm --gpus 1 --shm-size 1g --entrypoint <the Dockerfile's ENTRYPOINT[0]> \
#       -v <this checkout>:/src:ro -v "$OUT":/out -e OUT=/out -w /src IMAGE bash benchmarks/gpu_check.sh ARGS
#
# NVIDIA's start-up script (/opt/nvidia/nvidia_entrypoint.sh: the CUDA driver check and forward
# compatibility) stays first, as in training; it then runs the check from the read-only checkout, whose
# folder gpu_check.sh puts ahead of the image's PYTHONPATH (/opt/trainer), with the image's libraries.
# The checkout should be the one the image was built from. Files in $OUT belong to the container's user
# (root). DOCKER picks the client (default: docker); GPU_CHECK_TIMEOUT_S is passed on when set;
# GPU_CHECK_GPUS is docker's --gpus value (default 1). Exit status: gpu_check.sh's (docker's own 125-127
# when the container cannot start).
set -euo pipefail
if [[ $# -lt 1 || ( "$1" == -* && "$1" != --build ) ]]; then
  echo "usage: benchmarks/gpu_check_in_image.sh IMAGE|--build [gpu_check.py arguments...]" >&2
  exit 2
fi
image="$1"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ "$image" == --build ]]; then
  base="$(cd "$repo" && python3 -m platform_spec.trainer_image)"
  image=trainer:gpu-check
  "${DOCKER:-docker}" build --build-arg "BASE_IMAGE=$base" -f "$repo/training/Dockerfile" -t "$image" "$repo"
fi
entrypoint="$(sed -n 's/^ENTRYPOINT[[:space:]]*\[[[:space:]]*"\([^"]*\)".*/\1/p' "$repo/training/Dockerfile")"
if [[ -z "$entrypoint" ]]; then
  echo "gpu_check_in_image.sh: no exec-form ENTRYPOINT in training/Dockerfile" >&2
  exit 2
fi
out="${OUT:-${TMPDIR:-/tmp}/gpu-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec "${DOCKER:-docker}" run --rm --gpus "${GPU_CHECK_GPUS:-1}" --shm-size 1g --entrypoint "$entrypoint" \
  -v "$repo:/src:ro" -v "$out:/out" -e OUT=/out ${GPU_CHECK_TIMEOUT_S:+-e "GPU_CHECK_TIMEOUT_S=$GPU_CHECK_TIMEOUT_S"} \
  -w /src "$image" bash benchmarks/gpu_check.sh "$@"
