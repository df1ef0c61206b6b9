"""What the trainer's checkpoints cost: their size, a restart's download, the write and staging times, the host
memory an asynchronous save stages into, and whether the save at a stop fits SageMaker's grace period.

What a checkpoint holds (``training.checkpoint.manager``; layout :mod:`platform_spec.checkpoint_layout`)
---------------------------------------------------------------------------------------------------------
DCP's shards of the model and optimizer state -- fp32 parameters ``4N`` and AdamW's two fp32 moments ``8N``, each
rank writing its own shard (:func:`planner.memory.state_bytes`: ``12N``, or the quantized-weights variant) -- plus
AdamW's per-parameter ``step`` scalars, the param groups, ``trainer_state.json`` (:data:`TRAINER_STATE_BYTES`),
one ``rng/rank-<rank>.pt`` per rank (:data:`RNG_FILE_BYTES`), DCP's ``.metadata`` and ``.complete``. The size
here is ``state + world_size * RNG_FILE_BYTES + TRAINER_STATE_BYTES``: it leaves out DCP's framing (its default
``torch.save`` serialization wraps every shard of every tensor, ~1.5 KB each), the ``step`` scalars (4 bytes per
parameter tensor) and ``.metadata`` (~0.5 KB per tensor), so it is a lower bound by a few KB per tensor and rank.
Measured on a saved checkpoint (gpt-tiny with 2 blocks, 2 ranks: ``tests/training/test_checkpoint_size.py``):
``12N`` = 18,954,240 bytes is exactly the tensors' bytes less the 28 ``step`` scalars, and the folder holds 2.2%
more than the prediction -- a share that falls with the model's size (Llama 3 8B on 16 GPUs: ~7 MB of 96 GB).

Where the bytes go (``H`` hosts, ``G`` GPUs per host, shard degree ``D``)
-------------------------------------------------------------------------
* **Per GPU**: its local shard of the state, ``state / D`` -- with HSDP every replica holds one.
* **Written per host**: ``size / H``. Each host's ``/opt/ml/checkpoints`` is its own local disk, synced to the
  same S3 prefix; with full sharding a host's ranks write their own shards; with HSDP DCP writes each replicated
  shard once, on the least-loaded rank (``dedup_save_plans`` in torch 2.13), which spreads them over the hosts.
* **Downloaded per host at a restart**: SageMaker copies the whole ``CheckpointConfig.S3Uri`` prefix to every
  host's ``/opt/ml/checkpoints`` before the container starts. Assumed: the prefix holds one checkpoint (only
  the newest complete one is kept under the synced prefix), so each host downloads ``size``; with ``k`` kept
  it would be ``k * size``. No time is given: AWS publishes no rate for this download to cite
  (:data:`DOWNLOAD_TIME_NOTE`).

Times (per host, hosts in parallel)
-----------------------------------
* **Staging** (device-to-host copy): each GPU copies its shard over its own link to the host,
  ``(state / D) / (host_link_gb_s * D2H_EFFICIENCY)`` (:attr:`platform_spec.catalogue.InstanceSpec.host_link_gb_s`:
  PCIe Gen5 x16, 64 GB/s each way, on P5 and P6; NVLink-C2C on GB200).
* **Write**: ``size / H / NVME_WRITE_GB_S`` to the local NVMe instance store.
* **Synchronous save**: staging + write (DCP's writer copies each tensor to the CPU and writes it; no overlap is
  assumed, a bound). The training waits for all of it.
* **Asynchronous save** (``torch.distributed.checkpoint.async_save``): the training waits for the staging only;
  the write runs in the background. If the write outlasts the ``checkpoint_interval`` steps until the next save,
  that save waits for it: the blocking time is ``staging + max(0, write - interval * step)``.
* **Per step**: the blocking time spread over ``checkpoint_interval`` steps, added to the step time, so tokens/s,
  MFU and cost include it (:func:`planner.throughput.estimate_throughput`).
* **At a stop** (SIGTERM; the end of a capacity block): the save is synchronous. From SIGTERM the trainer finishes
  its step, waits for an asynchronous write in flight (at most ``write``), then saves: ``step + write (async) +
  synchronous save`` must fit :data:`platform_spec.capacity.SIGTERM_GRACE_S` (120 s), or SageMaker ends the job
  first and the run resumes from the checkpoint before (:attr:`CheckpointEstimate.stop_fits`).

Host memory
-----------
An asynchronous save stages every rank's whole local state in host memory (DCP's stager copies the state dict to
the CPU: ``_create_cpu_state_dict``/``_copy_state_dict`` in ``torch.distributed.checkpoint``; in pageable memory
with ``async_save``'s default stager, ``StagingOptions`` all false, pinned with ``FileSystemWriter(
cache_staged_state_dict=True)``): ``G * state / D`` per host. That must fit :data:`HOST_STAGING_FRACTION` of the
host's memory (the rest: the OS, the trainer processes, data loading, the page cache of the write), or the plan
recommends synchronous saves. GPU memory is unchanged: the stager allocates CPU tensors only and
``get_state_dict`` returns views of the sharded parameters and optimizer state, no device copies. A synchronous save
copies one tensor at a time (no staging memory counted).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs import CHECKPOINT_SAVES, DEFAULT_CHECKPOINT_SAVE, ResolvedInput
from planner.memory import GIB, state_bytes
from platform_spec.capacity import SIGTERM_GRACE_S

RNG_FILE_BYTES = 14_462
"""Bytes of one rank's ``rng/rank-<rank>.pt`` (python, numpy and torch CPU generator states), measured on a CPU
run (torch 2.13); a GPU run adds the CUDA generators' states, 16 bytes per visible GPU."""
TRAINER_STATE_BYTES = 2_000
"""``trainer_state.json``: step, data position, scheduler, run record (1,849 bytes measured on a gpt-tiny run;
estimate)."""
NVME_WRITE_GB_S = 2.7
"""Sequential write to the local NVMe instance store holding ``/opt/ml/checkpoints``, GB/s: one device's, the
figure AWS published for P4d's drives ("Each device has a maximum read/write throughput of 2.7 GB/s", AWS Compute
Blog, "Amazon EC2 P4d instances deep dive", https://aws.amazon.com/blogs/compute/amazon-ec2-p4d-instances-deep-dive/).
AWS publishes none for the 3.84 TB drives of P5/P6, nor whether SageMaker stripes ``/opt/ml/checkpoints`` over
them: one device is assumed, a conservative figure (8 striped devices would write up to 8x faster)."""
D2H_EFFICIENCY = 0.5
"""Achieved fraction of the GPU-to-host link in a checkpoint's staging (estimate): ``async_save``'s default stager
copies into pageable memory, which the CUDA driver moves through pinned bounce buffers, and the host's GPUs copy at
once into the same memory."""
HOST_STAGING_FRACTION = 0.75
"""Share of a host's memory an asynchronous save may stage into (estimate; the rest: the OS, the trainer
processes, data loading, the write's page cache)."""
DOWNLOAD_TIME_NOTE = (
    "no published rate of SageMaker's checkpoint download (CheckpointConfig.S3Uri to /opt/ml/checkpoints on every "
    "host, before the container starts) to cite"
)
"""Why the plan gives the restart's download in bytes and no time."""


@dataclass(frozen=True)
class CheckpointEstimate:
    """One checkpoint's size, times and memory (module docstring). Sizes in bytes, times in seconds.

    Attributes:
        save: ``"async"`` or ``"sync"`` (the interval saves).
        interval: ``checkpoint_interval``, steps.
        hosts: hosts (SageMaker instances) in the job.
        state_bytes: parameters and optimizer state, one replica.
        size_bytes: one checkpoint (state, RNG files, trainer state).
        per_gpu_bytes: one GPU's shard of the state.
        written_per_host_bytes: what one host writes to its ``/opt/ml/checkpoints`` (and uploads).
        download_per_host_bytes: what each host downloads at a restart (one checkpoint under the prefix).
        staging_per_host_bytes: host memory an asynchronous save stages into (0 for ``sync``).
        host_memory_bytes: the host's memory.
        staging_s: device-to-host copy of a GPU's shard, seconds.
        write_s: a host's write to local NVMe, seconds.
        sync_save_s: a synchronous save, ``staging_s + write_s``.
        blocking_s: what the training waits for per interval save.
        per_step_s: ``blocking_s / interval``, in the step time.
        stop_s: from SIGTERM to the end of the save at a stop (step, async write in flight, synchronous save).
        stop_limit_s: :data:`platform_spec.capacity.SIGTERM_GRACE_S`.
    """

    save: str
    interval: int
    hosts: int
    state_bytes: float
    size_bytes: float
    per_gpu_bytes: float
    written_per_host_bytes: float
    download_per_host_bytes: float
    staging_per_host_bytes: float
    host_memory_bytes: float | None
    staging_s: float
    write_s: float
    sync_save_s: float
    blocking_s: float
    per_step_s: float
    stop_s: float
    stop_limit_s: float

    @property
    def staging_fits(self) -> bool:
        """The staging fits :data:`HOST_STAGING_FRACTION` of host memory (true for ``sync``, or an unknown host)."""
        if self.host_memory_bytes is None:
            return True
        return self.staging_per_host_bytes <= HOST_STAGING_FRACTION * self.host_memory_bytes

    @property
    def stop_fits(self) -> bool:
        """The save at a stop ends within SageMaker's grace period after SIGTERM."""
        return self.stop_s <= self.stop_limit_s

    def to_dict(self) -> dict[str, object]:
        """JSON-able: every figure (GB as 10^9 bytes, seconds), ``staging_fits``, ``stop_fits`` and
        ``download_time`` (why none is given)."""
        gb = 1e9
        return {
            "save": self.save,
            "interval_steps": self.interval,
            "size_gb": round(self.size_bytes / gb, 4),
            "state_gb": round(self.state_bytes / gb, 4),
            "per_gpu_gb": round(self.per_gpu_bytes / gb, 4),
            "written_per_host_gb": round(self.written_per_host_bytes / gb, 4),
            "download_per_host_gb": round(self.download_per_host_bytes / gb, 4),
            "download_time": DOWNLOAD_TIME_NOTE,
            "staging_per_host_gb": round(self.staging_per_host_bytes / gb, 4),
            "host_memory_gb": None if self.host_memory_bytes is None else round(self.host_memory_bytes / gb, 1),
            "staging_fits": self.staging_fits,
            "staging_s": round(self.staging_s, 4),
            "write_s": round(self.write_s, 3),
            "sync_save_s": round(self.sync_save_s, 3),
            "blocking_s": round(self.blocking_s, 4),
            "per_step_s": round(self.per_step_s, 6),
            "stop_s": round(self.stop_s, 2),
            "stop_limit_s": self.stop_limit_s,
            "stop_fits": self.stop_fits,
        }


def checkpoint_size_bytes(r: ResolvedInput) -> float:
    """One checkpoint's bytes: the state of one replica (:func:`planner.memory.state_bytes`), one RNG file per rank
    and the trainer state (a lower bound by DCP's framing: module docstring)."""
    params, optimizer = state_bytes(r)
    return params + optimizer + r.world_size * RNG_FILE_BYTES + TRAINER_STATE_BYTES


def estimate_checkpoint(r: ResolvedInput, step_s: float) -> CheckpointEstimate | None:
    """The checkpoint figures of ``r`` whose step takes ``step_s`` seconds without checkpoints (module docstring);
    ``None`` for a blocks-only plan (TransformerEngine's example saves no checkpoints).

    Raises:
        ValueError: ``step_s`` negative or not finite.
    """
    if not 0 <= step_s < float("inf"):
        raise ValueError(f"step_s: got {step_s!r}, expected a finite number of seconds >= 0")
    p = r.input
    if p.blocks_only:
        return None
    params, optimizer = state_bytes(r)
    state = params + optimizer
    size = checkpoint_size_bytes(r)
    host = r.instance.host
    gpus_per_host = r.instance.gpus_per_host
    hosts = max(1, r.world_size // gpus_per_host)
    per_gpu = state / r.shard_degree
    written = size / hosts
    link = (host.host_link_gb_s or r.instance.host_link_gb_s or 0.0) * 1e9 * D2H_EFFICIENCY
    staging_s = per_gpu / link if link > 0 else 0.0
    write_s = written / (NVME_WRITE_GB_S * 1e9)
    sync_s = staging_s + write_s
    interval = p.checkpoint_interval
    if p.checkpoint_save == "async":
        blocking = staging_s + max(0.0, write_s - interval * step_s)
        staging_bytes = gpus_per_host * per_gpu
        in_flight = write_s
    else:
        blocking = sync_s
        staging_bytes = 0.0
        in_flight = 0.0
    memory = host.host_memory_gib * GIB if host.host_memory_gib is not None else None
    return CheckpointEstimate(
        save=p.checkpoint_save,
        interval=interval,
        hosts=hosts,
        state_bytes=state,
        size_bytes=size,
        per_gpu_bytes=per_gpu,
        written_per_host_bytes=written,
        download_per_host_bytes=size,
        staging_per_host_bytes=staging_bytes,
        host_memory_bytes=memory,
        staging_s=staging_s,
        write_s=write_s,
        sync_save_s=sync_s,
        blocking_s=blocking,
        per_step_s=blocking / interval,
        stop_s=step_s + in_flight + sync_s,
        stop_limit_s=SIGTERM_GRACE_S,
    )


__all__ = [
    "CHECKPOINT_SAVES",
    "D2H_EFFICIENCY",
    "DEFAULT_CHECKPOINT_SAVE",
    "DOWNLOAD_TIME_NOTE",
    "HOST_STAGING_FRACTION",
    "NVME_WRITE_GB_S",
    "RNG_FILE_BYTES",
    "TRAINER_STATE_BYTES",
    "CheckpointEstimate",
    "checkpoint_size_bytes",
    "estimate_checkpoint",
]
