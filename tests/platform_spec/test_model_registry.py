"""The model-family registry's plugin-style registration (platform_spec.models imports ``model_families`` by
name, which import-linter cannot see): every registered name resolves, and every family folder is registered."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from platform_spec import models

REPO = Path(__file__).resolve().parents[2]


def test_every_family_folder_is_registered_and_every_registered_family_is_a_folder() -> None:
    folders = sorted(
        p.name for p in (REPO / models.FAMILIES_PACKAGE).iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    )
    packages = sorted(models.get_family(name).package for name in models.family_names())
    assert packages == [f"{models.FAMILIES_PACKAGE}.{folder}" for folder in folders]


@pytest.mark.parametrize("name", models.family_names())
def test_every_registered_family_name_resolves(name: str) -> None:
    family = models.get_family(name)
    assert family.name == name and models.family_names().count(name) == 1
    assert family.presets, f"family {name!r} has no preset"
    for preset, shape in family.presets.items():
        assert preset in models.preset_names() and models.family_of(preset) is family
        assert models.get_preset(preset) == shape and isinstance(shape, family.shape_type)
    # its blocks are named, not imported (torch): each resolves to a module file of the family's package
    assert family.blocks, f"family {name!r} names no block module"
    for backend, module in family.blocks.items():
        spec = importlib.util.find_spec(importlib.util.resolve_name(module, family.package))
        assert spec is not None and spec.origin is not None and Path(spec.origin).is_file(), (backend, module)
        assert spec.name.startswith(family.package + "."), (backend, spec.name)


def test_an_unknown_family_is_a_field_error_naming_the_registered_ones() -> None:
    with pytest.raises(models.UnknownModelError) as refused:
        models.get_family("no-such-family")
    assert refused.value.field == "model_family" and all(n in refused.value.expected for n in models.family_names())


@pytest.mark.parametrize("preset", ["gpt-1b", "llama3-8b"])
def test_the_trainers_backend_choice_keeps_fp32_off_transformer_engines_unfused_attention(preset: str) -> None:
    """fp32 on a GPU where TransformerEngine imports trains on the torch-native blocks: TE has no fused or
    flash attention for fp32 and would hold every [b, h, s, s] score; every other precision the TE blocks
    run gets them; without TE (or on the CPU) every precision gets the torch blocks. An unknown precision is
    refused by name. Pure: no torch, no TE (the one choice Trainer.setup makes)."""
    from platform_spec.precisions import PRECISION_NAMES, UnknownPrecisionError

    family = models.family_of(preset)
    shape = models.get_preset(preset)
    chosen = {p: family.backend_for(shape, te_available=True, precision=p) for p in PRECISION_NAMES}
    assert chosen == {"fp32": "torch", "bf16": "te", "fp16": "te", "fp8": "te", "mxfp8": "te", "nvfp4": "te"}
    assert {family.backend_for(shape, te_available=False, precision=p) for p in PRECISION_NAMES} == {"torch"}
    with pytest.raises(UnknownPrecisionError) as refused:
        family.backend_for(shape, te_available=True, precision="tf32")
    assert refused.value.field == "precision" and "fp32" in refused.value.expected
