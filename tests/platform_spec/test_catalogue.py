"""Catalogue sanity: instances point at known GPUs, figures agree, precision rules hold."""

from __future__ import annotations

import dataclasses
import re

import pytest

from platform_spec.catalogue import (
    GPUS,
    INSTANCES,
    TRAINABLE_INSTANCE_TYPES,
    UnsupportedPrecisionError,
    default_infra_check,
    dense_peak_tflops,
    deployable_instance_types,
    get_instance,
    gpu_for_device_name,
    infra_check_supported,
    supported_precisions,
    supports_precision,
)
from platform_spec.errors import FieldError
from platform_spec.precisions import PRECISION_NAMES, UnknownPrecisionError

REQUIRED_INSTANCES = {
    "ml.p5.4xlarge",
    "ml.p5.48xlarge",
    "ml.p5e.48xlarge",
    "ml.p5en.48xlarge",
    "ml.p6-b200.48xlarge",
    "ml.p6-b300.48xlarge",
    "ml.p6e-gb200.36xlarge",
    "ml.u-p6e-gb200x36",
    "ml.u-p6e-gb200x72",
}


def test_catalogue_covers_the_issue_list():
    assert set(INSTANCES) >= REQUIRED_INSTANCES
    assert {"H100", "H200", "B200", "B300", "GB200"} <= set(GPUS)


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_instance_gpu_exists_and_memory_adds_up(name):
    inst = INSTANCES[name]
    gpu = GPUS[inst.gpu]
    # the instance's total GPU memory is its GPUs' HBM (AWS rounds: within 7%)
    assert inst.gpu_memory_gb == pytest.approx(inst.gpus_per_instance * gpu.hbm_gb, rel=0.07)
    assert inst.efa_bandwidth_gb_s > 0 and inst.efa_version in (2, 3, 4)
    assert inst.nvlink_domain_gpus >= 1
    assert inst.sources, "every instance names its sources"


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_figure_has_a_source(name):
    gpu = GPUS[name]
    for f in ("hbm_gb", "hbm_bandwidth_tb_s", "bf16_tflops", "tf32_tflops", "compute_capability"):
        assert f in gpu.sources, f"{name}.{f} has no source"
    if gpu.fp8_tflops is not None:
        assert "fp8_tflops" in gpu.sources
    if gpu.fp4_tflops is not None:
        assert "fp4_tflops" in gpu.sources


def test_digest_figures():
    assert GPUS["H100"].bf16_tflops == 989.5 and GPUS["H100"].fp8_tflops == 1979.0
    assert GPUS["B200"].hbm_gb == 180 and GPUS["B300"].hbm_gb == 268
    assert get_instance("ml.p5.4xlarge").efa_bandwidth_gb_s == 12.5
    assert get_instance("ml.u-p6e-gb200x72").efa_bandwidth_gb_s == 3600


def test_dense_is_half_of_sparse_and_ordered():
    for gpu in GPUS.values():
        assert gpu.tf32_tflops < gpu.bf16_tflops
        if gpu.fp8_tflops:
            assert gpu.fp8_tflops == pytest.approx(2 * gpu.bf16_tflops, rel=0.01)
        if gpu.fp4_tflops:
            assert gpu.fp4_tflops >= 2 * gpu.fp8_tflops * 0.99


@pytest.mark.parametrize(
    ("gpu", "precision", "ok"),
    [
        ("H100", "fp8", True),
        ("H100", "mxfp8", False),
        ("H100", "nvfp4", False),
        ("H200", "bf16", True),
        ("H200", "mxfp8", False),
        ("B200", "mxfp8", True),
        ("B200", "nvfp4", True),
        ("B300", "nvfp4", True),
        ("GB200", "mxfp8", True),
        ("B200", "fp32", True),
    ],
)
def test_precision_rules(gpu, precision, ok):
    assert supports_precision(gpu, precision) is ok


def test_precision_rules_follow_compute_capability():
    for gpu in GPUS.values():
        for p in PRECISION_NAMES:
            cc = gpu.compute_capability
            expected = {"fp8": cc >= (8, 9), "mxfp8": (10, 0) <= cc < (12, 0), "nvfp4": (10, 0) <= cc < (12, 0)}.get(
                p, True
            )
            assert supports_precision(gpu, p) is expected
        # a made-up Ada-class part: fp8 yes, block-scaled formats no
    ada = dataclasses.replace(GPUS["H100"], name="L40S", compute_capability=(8, 9))
    assert supports_precision(ada, "fp8") and not supports_precision(ada, "mxfp8")


def test_the_catalogue_applies_the_registry_rule_at_compute_capability_11_and_12():
    """Regression: the catalogue's rule (block-scaled formats on 10.x only) and the trainer's (10.0 <= cc < 12.0)
    disagreed for 11.x. TransformerEngine runs mxfp8/nvfp4 on 11.x (Thor) and not on 12.x; one rule now."""
    thor = dataclasses.replace(GPUS["B200"], name="Thor", compute_capability=(11, 0))
    assert supports_precision(thor, "mxfp8") and supports_precision(thor, "nvfp4")
    assert supported_precisions(thor) == PRECISION_NAMES
    workstation = dataclasses.replace(GPUS["B200"], name="RTX", compute_capability=(12, 0))
    assert supported_precisions(workstation) == ("fp32", "bf16", "fp16", "fp8")
    volta = dataclasses.replace(GPUS["H100"], name="V100", compute_capability=(7, 0))
    assert supported_precisions(volta) == ("fp32", "fp16")  # bf16 from 8.0: PyTorch only emulates it below
    with pytest.raises(UnsupportedPrecisionError, match="nvfp4 is not supported on RTX"):
        dense_peak_tflops(workstation, "nvfp4")


def test_dense_peak_by_precision():
    assert dense_peak_tflops("B200", "mxfp8") == dense_peak_tflops("B200", "fp8") == 4500
    assert dense_peak_tflops("B200", "nvfp4") == 9000
    assert dense_peak_tflops("B200", "fp16") == dense_peak_tflops("B200", "bf16") == 2250
    assert dense_peak_tflops("H100", "fp32") == GPUS["H100"].tf32_tflops


def test_unsupported_precision_names_gpu_and_precision():
    with pytest.raises(UnsupportedPrecisionError) as info:
        dense_peak_tflops("H100", "mxfp8")
    assert isinstance(info.value, ValueError)
    assert "mxfp8" in str(info.value) and "H100" in str(info.value) and "fp8" in info.value.expected
    with pytest.raises(UnknownPrecisionError, match="precision") as unknown:
        supports_precision("B200", "int8")
    assert isinstance(unknown.value, FieldError) and unknown.value.expected == "one of " + ", ".join(PRECISION_NAMES)


def test_unknown_instance_lists_allowed():
    with pytest.raises(KeyError) as info:
        get_instance("ml.p4d.24xlarge")
    assert "ml.p6-b200.48xlarge" in str(info.value)
    assert isinstance(info.value, ValueError) and info.value.field == "instance_type"
    assert get_instance("p6-b200.48xlarge").instance_type == "ml.p6-b200.48xlarge"


@pytest.mark.parametrize(
    ("device", "gpu"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA A100-SXM4-80GB", None),
        ("", None),
    ],
)
def test_gpu_for_device_name(device, gpu):
    spec = gpu_for_device_name(device)
    assert (spec.name if spec else None) == gpu


def test_a_gpu_added_to_the_catalogue_is_found_by_its_device_name(monkeypatch):
    """The trainer's MFU lookup reads GPUS, not a second list of GPU names (it used to try a hand-written
    tuple of five names, so a new catalogue GPU got no MFU)."""
    a100 = dataclasses.replace(GPUS["H100"], name="A100", compute_capability=(8, 0), device_names=(r"\bA100\b",))
    monkeypatch.setitem(GPUS, "A100", a100)
    assert gpu_for_device_name("NVIDIA A100-SXM4-80GB") is a100
    assert gpu_for_device_name("NVIDIA GB200").name == "GB200"  # the others still found, GB200 not as B200
    # a name two GPUs claim is ambiguous: no MFU rather than a wrong one
    monkeypatch.setitem(GPUS, "A100X", dataclasses.replace(a100, name="A100X"))
    assert gpu_for_device_name("NVIDIA A100-SXM4-80GB") is None


@pytest.mark.parametrize("name", sorted(GPUS))
def test_each_gpu_claims_only_its_own_device_names(name):
    """Device names as torch reports them match exactly one catalogue GPU each (the lookup tries them all)."""
    for device in (f"NVIDIA {name}", f"NVIDIA {name} SXM"):
        assert [g for g in GPUS.values() if any(re.search(p, device, re.IGNORECASE) for p in g.device_names)] == [
            GPUS[name]
        ], device


def test_every_instance_knows_the_gpus_of_one_host():
    """One host is what a training job's instance is: an UltraServer's hosts are its host instance type
    (the observability dashboard reads this; it used to special-case GB200 by name)."""
    for spec in INSTANCES.values():
        if spec.host_instance_type is None:
            assert spec.gpus_per_host == spec.gpus_per_instance
        else:
            host = INSTANCES[spec.host_instance_type]
            assert host.host_instance_type is None and host.gpu == spec.gpu
            assert spec.gpus_per_instance % host.gpus_per_instance == 0 and "host_instance_type" in spec.sources
            assert spec.gpus_per_host == host.gpus_per_instance
    assert INSTANCES["ml.u-p6e-gb200x72"].gpus_per_host == 4
    assert INSTANCES["ml.p6-b200.48xlarge"].gpus_per_host == 8


def test_deployable_instance_types_are_the_trainable_ones_create_training_job_accepts():
    accepted = {"ml.p5.48xlarge", "ml.p6e-gb200.36xlarge", "ml.p6-b200.48xlarge", "ml.m5.large"}
    # catalogue order; an arm64 host only with an arm64 image; no type outside the catalogue
    assert deployable_instance_types(accepted, ("amd64",)) == ("ml.p5.48xlarge", "ml.p6-b200.48xlarge")
    assert deployable_instance_types((), ("amd64",)) == ()
    assert set(deployable_instance_types(INSTANCES, ("amd64", "arm64"))) == set(TRAINABLE_INSTANCE_TYPES)


def test_the_infrastructure_health_check_is_on_by_default_for_multi_node_jobs_on_efa_types(monkeypatch):
    for name in INSTANCES:  # every catalogue type has EFA
        assert infra_check_supported(name) and default_infra_check(name, 2) and default_infra_check(name, 16)
        assert not default_infra_check(name, 1)
    assert not infra_check_supported("ml.m5.xlarge") and not default_infra_check("ml.m5.xlarge", 4)  # not catalogued
    # a type without EFA (none is catalogued yet): the check does not apply to it, whatever the count
    monkeypatch.setitem(
        INSTANCES, "ml.p5.4xlarge", dataclasses.replace(INSTANCES["ml.p5.4xlarge"], efa_bandwidth_gb_s=0)
    )
    assert not infra_check_supported("ml.p5.4xlarge") and not default_infra_check("ml.p5.4xlarge", 4)
