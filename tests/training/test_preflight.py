"""The trainer's pre-flight (training.preflight): the EFA check with injected inputs, the bus-bandwidth arithmetic
and the planner's figure it is logged beside. The measurement itself runs in the 2-process reference run
(``test_training_runs.test_metric_definitions_read_the_printed_lines``).

No EFA hardware exists here: a fake ``/sys/class/infiniband`` tree stands in for the devices (each
``<dev>/device/driver`` a link to a folder named as Linux's EFA driver, ``efa``) and a fake library folder for
the aws-ofi-nccl plugin the trainer image installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_spec import catalogue
from platform_spec.health import PREFLIGHT_REASON, trainer_failure_kind
from training.environment import ResourceConfig
from training.preflight import (
    PreflightError,
    bus_bandwidth_gb_s,
    check_efa,
    efa_expected,
    efa_problems,
    planner_assumption,
)

P5 = "ml.p5.48xlarge"


def _efa_node(root: Path, *, devices: int = 2, driver: str = "efa", plugin: bool = True) -> tuple[Path, list[str]]:
    """A fake node: ``root/sys/class/infiniband`` with ``devices`` RDMA devices of ``driver``, and a library
    folder holding the aws-ofi-nccl plugin (``plugin``)."""
    drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True)
    infiniband = root / "sys" / "class" / "infiniband"
    infiniband.mkdir(parents=True)
    for i in range(devices):
        device = root / "sys" / "devices" / f"0000:{i:02x}:00.0"
        device.mkdir(parents=True)
        (device / "driver").symlink_to(drivers)
        (infiniband / f"rdmap{i}s0").mkdir()
        (infiniband / f"rdmap{i}s0" / "device").symlink_to(device)
    libraries = root / "opt" / "amazon" / "ofi-nccl" / "lib"
    libraries.mkdir(parents=True)
    if plugin:
        (libraries / "libnccl-net-ofi.so").write_bytes(b"\x7fELF")
    return infiniband, [str(libraries)]


def _two_nodes(instance_type: str | None = P5) -> ResourceConfig:
    return ResourceConfig("algo-2", ("algo-1", "algo-2"), "eth0", instance_type)


def test_one_node_or_an_instance_without_efa_in_the_catalogue_is_not_checked(tmp_path: Path) -> None:
    one_node = ResourceConfig("algo-1", ("algo-1",), "eth0", P5)
    assert efa_expected(one_node) is None  # NVLink and shared memory inside the node: NCCL needs no EFA
    assert efa_expected(_two_nodes(None)) is None  # a local run: no instance type
    assert efa_expected(_two_nodes("ml.unknown.48xlarge")) is None
    assert efa_expected(_two_nodes(P5)) == catalogue.get_instance(P5)
    check_efa(one_node, {}, infiniband=tmp_path / "absent", library_dirs=[])  # nothing there, and no check


def test_a_multi_node_efa_job_with_its_devices_and_plugin_passes(tmp_path: Path) -> None:
    infiniband, libraries = _efa_node(tmp_path)
    assert efa_problems({}, infiniband=infiniband, library_dirs=libraries) == []
    check_efa(_two_nodes(), {"FI_PROVIDER": "efa"}, infiniband=infiniband, library_dirs=libraries)
    environ = {"LD_LIBRARY_PATH": libraries[0], "NCCL_NET": "AWS Libfabric"}
    check_efa(_two_nodes(), environ, infiniband=infiniband)  # found on LD_LIBRARY_PATH, as the image sets it


@pytest.mark.parametrize(
    ("node", "environ", "expected"),
    [
        ({"devices": 0}, {}, "no EFA device under"),
        ({"driver": "mlx5_core"}, {}, "no EFA device under"),  # an RDMA device, but not EFA
        ({"plugin": False}, {}, "no aws-ofi-nccl plugin"),
        ({}, {"NCCL_NET_PLUGIN": "none"}, "NCCL_NET_PLUGIN=none"),
        ({}, {"NCCL_NET": "Socket"}, "NCCL_NET=Socket steers NCCL off EFA"),
        ({}, {"FI_PROVIDER": "tcp"}, "FI_PROVIDER=tcp steers libfabric off"),
    ],
)
def test_what_keeps_nccl_off_efa_fails_the_run_with_the_preflight_reason(
    tmp_path: Path, node: dict, environ: dict, expected: str
) -> None:
    infiniband, libraries = _efa_node(tmp_path, **node)
    with pytest.raises(PreflightError) as err:
        check_efa(_two_nodes(), environ, infiniband=infiniband, library_dirs=libraries)
    report = str(err.value)
    assert report.startswith(PREFLIGHT_REASON + ": ml.p5.48xlarge has EFA (v2, 400 GB/s)")
    assert "on algo-2: " in report and expected in report
    assert trainer_failure_kind(report) == "preflight"  # what the run continuation reads


def test_bus_bandwidth_is_nccl_tests_definition() -> None:
    # PERFORMANCE.md: algbw = S / t; all-gather and reduce-scatter busbw = algbw * (n - 1) / n
    assert bus_bandwidth_gb_s(8_000_000_000, 1.0, 8) == pytest.approx(7.0)
    assert bus_bandwidth_gb_s(1_000_000_000, 0.5, 2) == pytest.approx(1.0)


def test_the_log_names_the_planners_assumption_from_its_one_home() -> None:
    resources = _two_nodes()
    link = catalogue.collective_bandwidth(catalogue.get_instance(P5), 16)
    assert link.link == "EFA v2"
    assert f"the planner assumes {link.bytes_per_s / 1e9:.4g} GB/s (EFA v2) for 16 GPUs of {P5}" in (
        planner_assumption(resources, 16)
    )
    assert "(NVLink)" in planner_assumption(resources, 8)  # one instance's shard group
    assert "no instance type" in planner_assumption(None, 2)
