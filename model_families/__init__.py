"""Model families, registered by name (:mod:`platform_spec.models`): one folder per family.

Adding a family is its folder (a pure ``__init__`` with its shape dataclass,
presets, FLOP and planner terms, parameter names and its
:class:`~platform_spec.models.ModelFamily` record, ``FAMILY =
register_family(ModelFamily(...))``; its torch and TransformerEngine blocks
beside it, ``torch_block.py`` and ``te_block.py``) and one line below, the
import that registers it. Importing this package registers every family; the
registry imports it on its first lookup, so nothing else needs to.

This package and each family's ``__init__`` are pure Python (they import
:mod:`platform_spec` only, never torch): the planner and the submitter's Lambda
read them. A family's block modules are imported by the trainer only
(:meth:`platform_spec.models.ModelFamily.block_module`).
"""

from __future__ import annotations

# The registration list, in registration order: one import per family (each registers itself).
from model_families import gpt, llama

__all__ = ["gpt", "llama"]
