"""The trainer image's base release and the library versions it carries: one home for every "TE x.y" fact.

The trainer image (``training/Dockerfile``) is built ``FROM`` NVIDIA's NGC PyTorch container
:data:`BASE_IMAGE`. What the trainer, the planner and the tests say about TransformerEngine's or PyTorch's
behaviour on a GPU follows the versions below; code that depends on a version compares against
:data:`TRANSFORMER_ENGINE_VERSION` rather than naming a number.

Sources: the release's contents as public environment dumps of the container report them (the evidence is
recorded beside ``FROM`` in ``training/Dockerfile``); the TransformerEngine source read for API names is
the ``release_v2.19`` branch of github.com/NVIDIA/TransformerEngine.
"""

from __future__ import annotations

NGC_RELEASE = "26.09"
"""The NGC PyTorch container release (``YY.MM``) the trainer image is built from."""

BASE_IMAGE = f"nvcr.io/nvidia/pytorch:{NGC_RELEASE}-py3"
"""The ``FROM`` image of ``training/Dockerfile``."""

TRANSFORMER_ENGINE_VERSION: tuple[int, int] = (2, 19)
"""TransformerEngine (major, minor) in :data:`BASE_IMAGE`."""

PYTORCH_VERSION = "2.14"
"""PyTorch (major.minor) in :data:`BASE_IMAGE` (an NGC pre-release build of it)."""

CUDA_VERSION = "13.4.1"
"""The CUDA toolkit of :data:`BASE_IMAGE`."""

NCCL_VERSION = "2.31"
"""NCCL (major.minor) of :data:`BASE_IMAGE`."""


def transformer_engine_label() -> str:
    """``"TransformerEngine 2.19"``: how messages and docs name the image's TE."""
    major, minor = TRANSFORMER_ENGINE_VERSION
    return f"TransformerEngine {major}.{minor}"
