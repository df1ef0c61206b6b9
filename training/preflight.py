"""The trainer's pre-flight, once at start before any step: is NCCL's network path the one the instance has,
and how fast do FSDP's collectives really run.

* :func:`check_efa`: on an instance type the catalogue says has EFA (:attr:`platform_spec.catalogue.InstanceSpec.
  efa_bandwidth_gb_s` > 0; the type from ``resourceconfig.json``'s ``current_instance_type``), in a job of more
  than one node, every node checks what NCCL needs to reach EFA: the EFA devices (``/sys/class/infiniband/<dev>``
  whose PCI driver is Linux's ``efa``), the aws-ofi-nccl net plugin (``libnccl-net*.so`` on the library path,
  which NCCL ``dlopen``s; training/Dockerfile installs it with the EFA installer) and no setting that steers NCCL
  or libfabric elsewhere (``NCCL_NET`` naming another network than the plugin's, ``NCCL_NET_PLUGIN=none``,
  ``FI_PROVIDER`` other than ``efa``). Without them NCCL falls back to TCP sockets silently and trains at a
  fraction of the speed (NVIDIA/nccl issue #229: "it tries to use the next choices: Infiniband ... and then
  falls back on Sockets"). The decision is collective; a failure is a :class:`PreflightError` headed by
  :data:`platform_spec.health.PREFLIGHT_REASON`, naming each node and what it lacks.
* :func:`measure_bandwidth`: all-gather and reduce-scatter over FSDP's shard group at FSDP's message sizes (one
  block's unsharded parameters in the parameter dtype; its gradients in the reduce dtype), for at most
  ``preflight_seconds``, as bus bandwidth in nccl-tests' definition ("Performance reported by NCCL tests",
  https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md: ``algbw = S / t``; all-gather and
  reduce-scatter ``busbw = algbw * (n - 1) / n``, ``S`` the unsharded size), the slowest rank's. The trainer
  logs it beside the planner's assumption for the instance type
  (:func:`platform_spec.catalogue.collective_bandwidth`) and publishes it on the first step's ``[metrics]``
  line (:data:`platform_spec.metric_lines.PREFLIGHT_FIELDS`). On CPU processes it measures gloo.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from platform_spec import catalogue
from platform_spec.health import PREFLIGHT_REASON
from training.environment import ResourceConfig
from training.parallelize import SHARD_DIM

INFINIBAND_CLASS = Path("/sys/class/infiniband")
"""Where Linux lists RDMA devices (``Documentation/ABI/stable/sysfs-class-infiniband``); EFA devices among them."""
EFA_DRIVER = "efa"
"""The PCI driver name of Linux's EFA driver (``drivers/infiniband/hw/efa``): ``<dev>/device/driver`` links to it."""
PLUGIN_NETWORK_NAMES = ("AWS Libfabric", "Libfabric")
"""Names the aws-ofi-nccl plugin gives NCCL for its network ("Using network AWS Libfabric" in NCCL's INFO log;
"Libfabric" before aws-ofi-nccl 1.4): the values of ``NCCL_NET`` that keep EFA."""
SYSTEM_LIBRARY_DIRS = ("/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib")
"""Directories the dynamic loader searches after ``LD_LIBRARY_PATH`` (ld.so's default paths and ld.so.conf's)."""
WARMUP_ITERATIONS = 2
"""Untimed iterations of each collective first (connection set-up, NCCL's first-call channel set-up)."""
MAX_ITERATIONS = 20
"""Timed iterations of each collective at most: nccl-tests' default (``-n 20``)."""


class PreflightError(RuntimeError):
    """The pre-flight check failed: ``"<PREFLIGHT_REASON>: <each node and what it lacks>"``."""


def efa_problems(
    environ: Mapping[str, str],
    *,
    infiniband: Path = INFINIBAND_CLASS,
    library_dirs: Sequence[str] | None = None,
) -> list[str]:
    """What keeps NCCL off EFA on this node, in words ([] when nothing).

    Args:
        environ: the worker's environment (``NCCL_NET``, ``NCCL_NET_PLUGIN``, ``FI_PROVIDER``, ``LD_LIBRARY_PATH``).
        infiniband: the RDMA device class folder (tests give a fake one: no EFA hardware exists here).
        library_dirs: where to look for the net plugin; default ``LD_LIBRARY_PATH``'s folders, then
            :data:`SYSTEM_LIBRARY_DIRS`.
    """
    problems = []
    devices = sorted(
        entry.name
        for entry in (infiniband.iterdir() if infiniband.is_dir() else [])
        if (entry / "device" / "driver").resolve().name == EFA_DRIVER
    )
    if not devices:
        problems.append(f"no EFA device under {infiniband} (the job's instances were started without EFA)")
    plugin = environ.get("NCCL_NET_PLUGIN", "").strip()
    if plugin.lower() == "none":
        problems.append("NCCL_NET_PLUGIN=none turns NCCL's net plugins (aws-ofi-nccl) off")
    else:
        dirs = library_dirs
        if dirs is None:
            dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(SYSTEM_LIBRARY_DIRS)
        names = {"libnccl-net.so", "libnccl-net-ofi.so"} | ({f"libnccl-net-{plugin}.so", plugin} if plugin else set())
        if not any((Path(d) / name).exists() for d in dirs for name in names):
            problems.append(
                f"no aws-ofi-nccl plugin ({' or '.join(sorted(names))}) on the library path ({':'.join(dirs)})"
            )
    net = environ.get("NCCL_NET", "").strip()
    if net and net not in PLUGIN_NETWORK_NAMES:
        problems.append(f"NCCL_NET={net} steers NCCL off EFA (the plugin's network is {PLUGIN_NETWORK_NAMES[0]!r})")
    provider = environ.get("FI_PROVIDER", "").strip()
    if provider and provider != "efa":
        problems.append(f"FI_PROVIDER={provider} steers libfabric off its efa provider")
    return problems


def efa_expected(resources: ResourceConfig) -> catalogue.InstanceSpec | None:
    """The instance's catalogue entry when EFA must carry NCCL: a multi-node job on a type with EFA; else None
    (one node: NVLink and shared memory; a type the catalogue does not know: nothing to hold it to)."""
    if resources.num_nodes < 2 or not resources.current_instance_type:
        return None
    try:
        instance = catalogue.get_instance(resources.current_instance_type)
    except KeyError:
        return None
    return instance if instance.efa_bandwidth_gb_s > 0 else None


def check_efa(
    resources: ResourceConfig,
    environ: Mapping[str, str],
    *,
    group: Any = None,
    infiniband: Path = INFINIBAND_CLASS,
    library_dirs: Sequence[str] | None = None,
) -> None:
    """Fail fast when NCCL would not use EFA where the catalogue says the instance has it (collective over
    ``group`` when a process group exists: every rank raises the same error, naming each failing node).

    Raises:
        PreflightError: ``"<PREFLIGHT_REASON>: <instance type> has EFA (v<n>) but on <host>: <problems>; ..."``.
    """
    instance = efa_expected(resources)
    if instance is None:
        return
    found = efa_problems(environ, infiniband=infiniband, library_dirs=library_dirs)
    mine = (resources.current_host, found)
    everyone = [mine]
    if dist.is_available() and dist.is_initialized():
        everyone = [mine] * dist.get_world_size(group)
        dist.all_gather_object(everyone, mine, group=group)
    by_host: dict[str, list[str]] = {}
    for host, problems in everyone:
        if problems:
            by_host.setdefault(host, problems)
    if by_host:
        details = "; ".join(f"on {host}: {', '.join(problems)}" for host, problems in sorted(by_host.items()))
        raise PreflightError(
            f"{PREFLIGHT_REASON}: {instance.instance_type} has EFA (v{instance.efa_version}, "
            f"{instance.efa_bandwidth_gb_s:g} GB/s) but NCCL would not use it {details}. Nothing was trained"
        )


@dataclass(frozen=True)
class Bandwidth:
    """The pre-flight's measurement.

    Attributes:
        ranks: processes in the measured group (FSDP's shard group).
        all_gather_bytes: one all-gather's unsharded size, bytes (a block's parameters in the parameter dtype).
        reduce_scatter_bytes: one reduce-scatter's unsharded size, bytes (a block's gradients, reduce dtype).
        all_gather_busbw_gb_s, reduce_scatter_busbw_gb_s: bus bandwidth, GB/s (1e9 bytes/s), the slowest rank's.
        iterations: timed iterations of each.
    """

    ranks: int
    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_gather_busbw_gb_s: float
    reduce_scatter_busbw_gb_s: float
    iterations: int

    def metric_values(self) -> dict[str, float]:
        """The metric-line fields (:data:`platform_spec.metric_lines.PREFLIGHT_FIELDS`)."""
        return {
            "all_gather_busbw_gb_s": self.all_gather_busbw_gb_s,
            "reduce_scatter_busbw_gb_s": self.reduce_scatter_busbw_gb_s,
        }


def bus_bandwidth_gb_s(size_bytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-gather or reduce-scatter of ``size_bytes`` (the unsharded size) over
    ``ranks`` taking ``seconds``: ``S / t * (n - 1) / n``, GB/s (1e9 bytes/s)."""
    return size_bytes / seconds * (ranks - 1) / ranks / 1e9


def block_message_bytes(model: torch.nn.Module, param_dtype: torch.dtype, reduce_dtype: torch.dtype) -> tuple[int, int]:
    """(all-gather bytes, reduce-scatter bytes) of FSDP's largest per-block collective: a block of ``model.layers``
    (each its own ``fully_shard`` unit, :func:`training.parallelize.apply_fsdp`) with its unsharded parameter
    count in ``param_dtype`` and in ``reduce_dtype``."""
    numel = max(sum(p.numel() for p in block.parameters()) for block in model.layers)  # DTensor: global numel
    return numel * param_dtype.itemsize, numel * reduce_dtype.itemsize


def shard_group(model: torch.nn.Module) -> Any:
    """FSDP's shard group of ``model`` (its parameters' mesh, dimension
    :data:`training.parallelize.SHARD_DIM`), or None unsharded."""

    param = next(model.layers[0].parameters())
    mesh = getattr(param, "device_mesh", None)
    if mesh is None:
        return None
    return mesh.get_group(SHARD_DIM) if mesh.mesh_dim_names and SHARD_DIM in mesh.mesh_dim_names else mesh.get_group()


def measure_bandwidth(
    model: torch.nn.Module,
    plan: Any,
    device: torch.device,
    *,
    seconds: float,
    resources: ResourceConfig | None = None,
    log: Callable[[str], None] = print,
) -> Bandwidth | None:
    """Measure FSDP's all-gather and reduce-scatter bus bandwidth (module docstring) for at most about ``seconds``
    (collective over FSDP's shard group); logs it beside the planner's assumption for the instance type.

    Args:
        model: the FSDP2-sharded model (:func:`training.parallelize.parallelize`).
        plan: its :class:`training.precision.PrecisionPlan` (``param_dtype``, ``reduce_dtype``; fp32 when not mixed).
        device: where the collectives' buffers live (the ranks' GPU, or the CPU for gloo).
        seconds: the time budget (``preflight_seconds``); 0 skips.
        resources: this host's resource config (the instance type, for the planner's figure).

    Returns:
        None when skipped (``seconds`` 0, or a shard group of one process: nothing moves).
    """
    group = shard_group(model)
    ranks = 1 if group is None else dist.get_world_size(group)
    if seconds <= 0 or ranks < 2:
        return None
    mixed = getattr(plan, "mixed", False)
    param_dtype = plan.param_dtype if mixed else torch.float32
    reduce_dtype = plan.reduce_dtype if mixed else torch.float32
    ag_bytes, rs_bytes = block_message_bytes(model, param_dtype, reduce_dtype)
    ag_numel = ag_bytes // param_dtype.itemsize // ranks * ranks
    rs_numel = rs_bytes // reduce_dtype.itemsize // ranks * ranks
    gathered = torch.empty(ag_numel, dtype=param_dtype, device=device)
    shard = torch.ones(ag_numel // ranks, dtype=param_dtype, device=device)
    gradients = torch.ones(rs_numel, dtype=reduce_dtype, device=device)
    reduced = torch.empty(rs_numel // ranks, dtype=reduce_dtype, device=device)
    # gloo has no reduce_scatter_tensor; its reduce_scatter takes lists (the same bytes on the wire)
    gradient_chunks = list(gradients.chunk(ranks))

    def all_gather() -> None:
        dist.all_gather_into_tensor(gathered, shard, group=group)

    def reduce_scatter() -> None:
        if dist.get_backend(group) == "gloo":
            dist.reduce_scatter(reduced, gradient_chunks, group=group)
        else:
            dist.reduce_scatter_tensor(reduced, gradients, group=group)

    budget = seconds / 2
    ag_iters, ag_s = _time(all_gather, budget, device, group)
    rs_iters, rs_s = _time(reduce_scatter, budget, device, group)
    result = Bandwidth(
        ranks=ranks,
        all_gather_bytes=ag_numel * param_dtype.itemsize,
        reduce_scatter_bytes=rs_numel * reduce_dtype.itemsize,
        all_gather_busbw_gb_s=bus_bandwidth_gb_s(ag_numel * param_dtype.itemsize, ag_s, ranks),
        reduce_scatter_busbw_gb_s=bus_bandwidth_gb_s(rs_numel * reduce_dtype.itemsize, rs_s, ranks),
        iterations=min(ag_iters, rs_iters),
    )
    log(
        f"pre-flight: bus bandwidth over {ranks} processes: all-gather {result.all_gather_busbw_gb_s:.4g} GB/s at "
        f"{result.all_gather_bytes / 1e6:.3g} MB ({param_dtype}), reduce-scatter "
        f"{result.reduce_scatter_busbw_gb_s:.4g} GB/s at {result.reduce_scatter_bytes / 1e6:.3g} MB ({reduce_dtype}), "
        f"{result.iterations}+ iterations each; {planner_assumption(resources, ranks)}"
    )
    return result


def planner_assumption(resources: ResourceConfig | None, ranks: int) -> str:
    """The planner's bandwidth for a shard group of ``ranks`` processes on this instance type, in words."""
    instance_type = resources.current_instance_type if resources is not None else None
    if not instance_type:
        return "the planner assumes nothing here (no instance type: not a SageMaker instance)"
    try:
        instance = catalogue.get_instance(instance_type)
    except KeyError:
        return f"the planner does not know {instance_type}"
    link = catalogue.collective_bandwidth(instance, ranks)
    return (
        f"the planner assumes {link.bytes_per_s / 1e9:.4g} GB/s ({link.link}) for {ranks} GPUs of {instance_type} "
        "(platform_spec.catalogue.collective_bandwidth)"
    )


def _time(op: Callable[[], None], budget: float, device: torch.device, group: Any) -> tuple[int, float]:
    """(iterations, seconds per iteration, the slowest rank's) of ``op``: :data:`WARMUP_ITERATIONS` untimed, then
    as many as fit ``budget`` by the warm-up's pace (agreed by all ranks, so all run the same count), at most
    :data:`MAX_ITERATIONS`."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    start = time.perf_counter()
    for _ in range(WARMUP_ITERATIONS):
        op()
    sync()
    pace = torch.tensor([(time.perf_counter() - start) / WARMUP_ITERATIONS], dtype=torch.float64, device=device)
    dist.all_reduce(pace, op=dist.ReduceOp.MAX, group=group)
    iterations = int(max(1, min(MAX_ITERATIONS, budget // max(float(pace.item()), 1e-9))))
    start = time.perf_counter()
    for _ in range(iterations):
        op()
    sync()
    elapsed = torch.tensor([(time.perf_counter() - start) / iterations], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return iterations, max(float(elapsed.item()), 1e-12)


__all__ = [
    "Bandwidth",
    "PreflightError",
    "block_message_bytes",
    "bus_bandwidth_gb_s",
    "check_efa",
    "efa_expected",
    "efa_problems",
    "measure_bandwidth",
    "planner_assumption",
]
