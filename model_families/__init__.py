"""Model families, registered by name (:mod:`platform_spec.models`): one folder per family.

Adding a family is its folder (a pure ``__init__`` with its shape dataclass,
presets and FLOP terms; its torch and TransformerEngine blocks beside it) and
one line below. Importing this package registers every family; the registry
imports it on its first lookup, so nothing else needs to.

This package and each family's ``__init__`` are pure Python (they import
:mod:`platform_spec` only, never torch): the planner and the submitter's Lambda
read them.
"""

from __future__ import annotations

from platform_spec.models import register_family

from model_families import gpt

register_family(gpt.FAMILY)

__all__ = ["gpt"]
