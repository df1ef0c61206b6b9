"""The precision registry: every format's facts, the one hardware rule, and what derives from it."""

from __future__ import annotations

import re

import pytest

from platform_spec import catalogue, hyperparameters
from platform_spec.errors import FieldError
from platform_spec.precisions import (
    CPU_PRECISIONS,
    PRECISION_NAMES,
    PRECISIONS,
    UnknownPrecisionError,
    get_precision,
    names_where,
    supported_names,
)


def test_the_formats_in_report_order() -> None:
    assert PRECISION_NAMES == ("fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
    assert len(set(PRECISION_NAMES)) == len(PRECISIONS)
    assert all(get_precision(name).name == name for name in PRECISION_NAMES)


def test_what_derives_from_the_registry_is_the_registry() -> None:
    """One home: the hyperparameter's allowed values are the registry's own tuples, not copies."""
    assert hyperparameters.PRECISIONS is PRECISION_NAMES
    assert hyperparameters.SPECS["precision"].choices is PRECISION_NAMES
    assert hyperparameters.CPU_PRECISIONS is CPU_PRECISIONS == ("fp32", "bf16")
    assert hyperparameters.FP8_SCALINGS == ("current", "delayed") == get_precision("fp8").scalings
    assert hyperparameters.QUANTIZED_PRECISIONS == ("fp8", "mxfp8", "nvfp4") == names_where(lambda p: p.quantized)


@pytest.mark.parametrize("bad", ["int8", "FP8", "", None, 8])
def test_an_unknown_precision_is_a_field_error_naming_the_known_ones(bad: object) -> None:
    with pytest.raises(UnknownPrecisionError) as refused:
        get_precision(bad)
    error = refused.value
    assert isinstance(error, FieldError) and isinstance(error, ValueError)
    assert (error.field, error.value) == ("precision", bad)
    assert error.expected == "one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"
    assert str(error) == f"precision: got {bad!r}; expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"
    with pytest.raises(UnknownPrecisionError, match=r"^hyperparameters\.precision: "):
        get_precision(bad, field="hyperparameters.precision")


@pytest.mark.parametrize(
    ("name", "below", "lowest", "first_refused_above"),
    [
        ("fp32", None, (0, 0), None),
        ("fp16", None, (0, 0), None),
        ("bf16", (7, 5), (8, 0), None),
        ("fp8", (8, 6), (8, 9), None),
        ("mxfp8", (9, 0), (10, 0), (12, 0)),
        ("nvfp4", (9, 0), (10, 0), (12, 0)),
    ],
)
def test_the_hardware_rule_at_its_edges(name, below, lowest, first_refused_above) -> None:
    record = get_precision(name)
    assert record.supported_by(lowest)
    if below is not None:
        assert not record.supported_by(below)
    assert record.supported_by((11, 0)) is (first_refused_above != (11, 0))  # 11.x (Thor) runs everything
    if first_refused_above is not None:
        assert not record.supported_by(first_refused_above) and not record.supported_by((12, 1))
        assert record.supported_by((first_refused_above[0] - 1, 9))
    assert record.capability_source and record.hardware


def test_supported_names_by_generation() -> None:
    assert supported_names((9, 0)) == ("fp32", "bf16", "fp16", "fp8")  # Hopper
    assert supported_names((10, 0)) == PRECISION_NAMES  # B200, GB200
    assert supported_names((10, 3)) == PRECISION_NAMES  # B300
    assert supported_names((11, 0)) == PRECISION_NAMES  # Thor: what TransformerEngine runs
    assert supported_names((12, 0)) == ("fp32", "bf16", "fp16", "fp8")  # RTX Blackwell: not the block-scaled formats
    assert supported_names((7, 0)) == ("fp32", "fp16")


def test_te_recipes_by_name_and_scaling() -> None:
    fp8 = get_precision("fp8")
    assert fp8.te_recipe() == fp8.te_recipe("current")
    assert fp8.te_recipe("current").class_name == "Float8CurrentScaling"
    assert dict(fp8.te_recipe("current").kwargs) == {"fp8_format": "HYBRID"}
    delayed = fp8.te_recipe("delayed")
    assert delayed.class_name == "DelayedScaling"
    assert dict(delayed.kwargs) == {"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"}
    with pytest.raises(FieldError) as refused:
        fp8.te_recipe("block")
    assert refused.value.field == "fp8_scaling" and refused.value.expected == "one of current, delayed"
    # one recipe: fp8_scaling does not apply
    assert get_precision("mxfp8").te_recipe("delayed").class_name == "MXFP8BlockScaling"
    assert get_precision("nvfp4").te_recipe().class_name == "NVFP4BlockScaling"
    for name in ("fp32", "bf16", "fp16"):
        assert get_precision(name).te_recipe("current") is None and not get_precision(name).uses_te


def test_bytes_per_element_and_weight_copies() -> None:
    """The planner's ``a``, ``q`` and weight-copy bytes, each with its source."""
    assert [get_precision(n).compute_bytes for n in PRECISION_NAMES] == [4, 2, 2, 2, 2, 2]
    assert get_precision("fp8").quantized_bytes == 1.0
    assert get_precision("mxfp8").quantized_bytes == 1.0 + 1.0 / 32  # E8M0 scale per 32 values
    assert get_precision("nvfp4").quantized_bytes == 0.5 + 1.0 / 16  # E4M3 scale per 16 values
    for record in PRECISIONS:
        if record.quantized:
            assert "quantized_bytes" in record.sources
    fp8, mxfp8 = get_precision("fp8"), get_precision("mxfp8")
    assert fp8.weight_copy_bytes((9, 0)) == 2.0 and fp8.weight_copy_bytes((10, 0)) == 1.0  # Hopper needs the transpose
    assert mxfp8.weight_copy_bytes((10, 0)) == 2.0 * mxfp8.quantized_bytes  # rowwise + columnwise, own scales
    assert get_precision("bf16").weight_copy_bytes((10, 0)) == 0.0


def test_every_dense_peak_is_a_catalogue_figure() -> None:
    for record in PRECISIONS:
        for gpu in catalogue.GPUS.values():
            if record.supported_by(gpu.compute_capability):
                assert catalogue.dense_peak_tflops(gpu, record.name) == getattr(gpu, record.dense_peak)
    assert get_precision("fp32").dense_peak == "tf32_tflops"  # fp32 is measured against TF32
    assert get_precision("mxfp8").dense_peak == get_precision("fp8").dense_peak


def test_report_colours_and_gemm_multiples() -> None:
    colours = [p.color for p in PRECISIONS]
    assert len(set(colours)) == len(colours) and all(re.fullmatch(r"#[0-9A-F]{6}", c) for c in colours)
    assert {p.name: p.gemm_multiple for p in PRECISIONS if p.gemm_multiple} == {"fp8": 16, "mxfp8": 32, "nvfp4": 32}
    assert all(p.gemm_multiple is None for p in PRECISIONS if not p.uses_te)
    assert names_where(lambda p: p.autocast_dtype is not None) == ("nvfp4",)
    assert names_where(lambda p: p.loss_scaling) == ("fp16",)
