"""The trainer image's base release and the library versions it carries: one home for every "TE x.y" fact.

The trainer image (``training/Dockerfile``) is built ``FROM`` NVIDIA's NGC PyTorch container
:data:`BASE_IMAGE`, which the Dockerfile receives as its ``BASE_IMAGE`` build argument (from
:func:`docker_build_args`: the CDK image asset, ``constructs/trainer_image.py``, passes it; by hand,
``docker build --build-arg BASE_IMAGE="$(python -m platform_spec.trainer_image)" -f training/Dockerfile .``).
What the trainer, the planner and the tests say about TransformerEngine's or PyTorch's behaviour on a GPU
follows the versions below; code that depends on a version compares against
:data:`TRANSFORMER_ENGINE_VERSION` rather than naming a number.

Why 26.09: it is the newest NGC PyTorch release public evidence places (no public file names a
``pytorch:26.10-py3`` or later tag as of this change). The evidence, as searched:

- the tag and its digest: NVIDIA's own ``NVIDIA-BioNeMo/CodonFM`` ``Dockerfile`` (commit 2df12a8,
  https://github.com/NVIDIA-BioNeMo/CodonFM/blob/2df12a8ea8cad5dd4183d7d20215a1bec0e0638f/Dockerfile)
  builds ``FROM nvcr.io/nvidia/pytorch:26.09-py3@sha256:6e8ccc60...a7a6`` and asserts inside it
  ``torch == 2.14.0a0+b2c75dd062.nv26.9.68203377``; a second public build script pins the same tag to the
  same digest and says it is the multi-architecture index digest (x86-64 and aarch64 pull the same
  reference);
- the libraries: a public Dockerfile built ``FROM nvcr.io/nvidia/pytorch:26.09-py3`` lists the base's
  "CUDA: 13.4 V13.4.59, cuDNN: 9.26.0, NCCL: 2.31.2, TransformerEngine: 2.19.0, torch:
  2.14.0a0+b2c75dd062.nv26.09"; other public reports of the container print PyTorch
  ``2.14.0a0+b2c75dd062.nv26.09``, CUDA 13.4 and Python 3.12.3. NVIDIA's release notes page for the
  release, https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-26-09.html, is the
  authority to re-check against before a production move.

The TransformerEngine source read for API names is the ``release_v2.19`` branch of
github.com/NVIDIA/TransformerEngine; PyTorch's is torch 2.14's where it differs from the repository's
pinned CPU torch.
"""

from __future__ import annotations

NGC_RELEASE = "26.09"
"""The NGC PyTorch container release (``YY.MM``) the trainer image is built from."""

BASE_IMAGE_DIGEST = "sha256:6e8ccc607fc2a51e3741667b86316a0889418ba8b78ed0ba96e8d282b648a7a6"
"""The manifest-list (multi-architecture index) digest of ``nvcr.io/nvidia/pytorch:26.09-py3`` (see the
module docstring for where it was read): a build pulls exactly these bytes even if NVIDIA re-pushes the tag."""

BASE_IMAGE = f"nvcr.io/nvidia/pytorch:{NGC_RELEASE}-py3@{BASE_IMAGE_DIGEST}"
"""The ``FROM`` image of ``training/Dockerfile`` (its ``BASE_IMAGE`` build argument), pinned by tag and digest."""

TRANSFORMER_ENGINE_VERSION: tuple[int, int] = (2, 19)
"""TransformerEngine (major, minor) in :data:`BASE_IMAGE` (2.19.0)."""

PYTORCH_VERSION = "2.14"
"""PyTorch (major.minor) in :data:`BASE_IMAGE` (NVIDIA's pre-release build ``2.14.0a0+b2c75dd062``)."""

CUDA_VERSION = "13.4.1"
"""The CUDA toolkit of :data:`BASE_IMAGE`."""

NCCL_VERSION = "2.31"
"""NCCL (major.minor) of :data:`BASE_IMAGE` (2.31.2)."""

PYTHON_VERSION = "3.12"
"""The Python (major.minor) of :data:`BASE_IMAGE` (3.12.3, Ubuntu 24.04's)."""


def transformer_engine_label() -> str:
    """``"TransformerEngine 2.19"``: how messages and docs name the image's TE."""
    major, minor = TRANSFORMER_ENGINE_VERSION
    return f"TransformerEngine {major}.{minor}"


def docker_build_args() -> dict[str, str]:
    """The ``docker build --build-arg`` values ``training/Dockerfile`` needs: ``{"BASE_IMAGE": BASE_IMAGE}``.

    The Dockerfile declares ``ARG BASE_IMAGE`` without a default (a default would be a second copy of
    :data:`BASE_IMAGE`), so a build without it fails at ``FROM`` with Docker's "base name should not be blank".
    """
    return {"BASE_IMAGE": BASE_IMAGE}


if __name__ == "__main__":  # ``python -m platform_spec.trainer_image``: the value of ``--build-arg BASE_IMAGE=``
    print(BASE_IMAGE)
