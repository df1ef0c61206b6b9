"""The training loop (one process per GPU, or per CPU process), launched by torchrun.

``python -m training.train --base-dir /opt/ml --precision bf16 --num-layers 4 ...``:
every hyperparameter of :mod:`platform_spec.hyperparameters` as ``--kebab-case``
(the guide's trainer interface); :mod:`training.entrypoint` passes them all.
Without torchrun's environment (``RANK``...) it runs as a single process.

Per optimizer step: ``gradient_accumulation_steps`` micro-batches (FSDP2
reduce-scatters every micro-batch's gradients, or only the last's with
``gradient_sync=last_micro_batch``: :func:`accumulate_gradients`), loss = mean cross-entropy, gradients
clipped to ``max_grad_norm`` by their global L2 norm (DTensor-aware),
AdamW (:func:`build_optimizer`, the implementation :mod:`platform_spec.optimizers` names: fused on CUDA,
foreach on the CPU, fp32 master state since FSDP2 keeps fp32 sharded parameters under a bf16 compute
policy; with ``quantized_model_init`` TransformerEngine's FusedAdam with fp32 master weights seeded from
the trainer's initial values), linear warmup then cosine decay to
``min_learning_rate`` (:func:`learning_rate`).

Validation: with ``eval_interval`` N > 0, after every N-th step and after the last, the
loss on the ``validation`` channel (:mod:`training.evaluation`: ``eval_batches``
micro-batches per rank, token-weighted over all ranks, eval mode, no
gradients) as a ``[metrics] step=.. validation_loss=..`` line; a step that
stops the run is not evaluated.

Stopping:
* SIGTERM / SIGINT (SageMaker stop or spot interruption; the entry point
  relays its signal): finish the step, save a checkpoint, export the
  weights, exit 0. The handler is installed first thing in :func:`main`, so a
  signal during setup stops the run before its first step (nothing to save).
  SageMaker sends SIGKILL 120 s after SIGTERM; the entry point gives torchrun
  110 s before it kills the workers.
* ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``: instances are
  reclaimed from 30 minutes before the capacity block ends; the loop stops
  (checkpoint, export, exit 0) once ``now + margin`` reaches that time, with
  ``margin = 300 s + 2 x (last checkpoint save time + last step time)``. A
  start with less than the margin left before its first step trains nothing:
  it fails with a reason (:class:`training.environment.CapacityBlockEnded`)
  instead of ending as a successful job without a model.
* The decision is all-reduced (MAX) across ranks every step, so every rank
  stops after the same step even when signals arrive at different times.

Hangs: each rank's watchdog (:mod:`training.watchdog`) fails the run when no step, evaluation or
checkpoint save completes within its limit (``watchdog_first_step_minutes`` before the first step,
then ``max(watchdog_minutes, watchdog_step_time_factor x the slowest recent step)``): every waiting
rank dumps its stacks and flight recorder to ``output/data/watchdog/``, writes the report headed by
:data:`platform_spec.health.HANG_REASON` and exits 1. Once the first step of the job has completed,
the collective timeout of the default process group and of FSDP's mesh groups (:func:`collective_groups`)
drops from setup's 30 minutes to ``collective_timeout_minutes`` (:func:`set_collective_timeout`).

Non-finite values: the loss (averaged over every rank, so all agree) and the global gradient norm are
checked every step; a step where either is NaN or inf skips the optimizer update (the gradients are
dropped; the step's batch is consumed and the LR schedule advances with the step number, as it must:
a checkpoint's scheduler is at its step). The job's count is the ``skipped_steps`` metric; a skipped
step always prints its metric line. ``max_nonfinite_steps`` such steps in a row stop the run with a
report headed by :data:`platform_spec.health.NON_FINITE_REASON` naming the steps and values (exit 1,
nothing saved but an asynchronous save still being written, which is finished first: the newest
checkpoint holds the last finite state). fp16's loss scaler skips a step whose gradients overflow and
halves its scale: that search is normal, so such a skip counts toward ``skipped_steps`` but not toward
the consecutive count unless the scale is already at its minimum (or the loss itself is not finite); it
neither counts nor resets the run of non-finite steps. A save refuses parameters or optimizer state that
are not finite (:meth:`Trainer.save`), no interval checkpoint is written inside a run of non-finite steps
(the newest checkpoint is the last state that trained), a stop's save inside one carries the run to the
resume (``trainer_state.json``'s ``non_finite_steps``), and a resume skips a checkpoint whose state is not
finite (:mod:`training.finite`).

On failure: a one-line reason in ``<base>/output/failure`` (first writer
wins; it says where: ``at step 7``, ``while saving step-6``, ``after step 9
(exporting the final weights)``, ``during setup``; a CUDA OOM names the
setting to change) and exit status 1. The failure file's folder comes from
``--base-dir`` (else ``SAGEMAKER_BASE_DIR``), read before anything else.

Status: each node's local rank 0 keeps the status record
(:mod:`training.supervision`: resumed from, skipped, last saved, stopped,
finished, refused or failed) up to date, so the entry point and ``trainctl
train`` report what the trainer really did; rank 0 prints each change of
state as a ``[run]`` record (:class:`platform_spec.metric_lines.RunRecord`:
state, step, device, world size), so readers of the output learn how the run
ended and where without matching ``[trainer]`` lines. stdout and stderr
outlive their reader: a closed terminal or a killed ``trainctl`` does not end
the run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import math
import os
import random
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist

from platform_spec.checkpoint_layout import TRAINER_STATE
from platform_spec.health import NON_FINITE_REASON
from platform_spec.hyperparameters import INIT_CHANNEL, SPECS, HyperparameterError, Hyperparameters, model_shape, parse
from platform_spec.metric_lines import format_run_record
from platform_spec.models import family_of_shape
from platform_spec.optimizers import optimizer_for
from platform_spec.training_modes import reduces_gradients
from training import finite
from training import precision as prec
from training.checkpoint.compare import run_record
from training.checkpoint.manager import CheckpointError, CheckpointManager, ResumeRefused, SaveRecord, export_model
from training.data import DataError, DistributedSampler, SyntheticSampler, TokenDataset, resolve_vocab_size
from training.environment import (
    STOP_MARGIN_S,
    CapacityBlockEnded,
    ConfigError,
    SageMakerPaths,
    capacity_block_deadline,
    capacity_block_ended_reason,
    init_config,
    read_resource_config,
    write_failure,
)
from training.evaluation import Evaluator
from training.hf_weights import load_into
from training.metrics import DeviceInfo, MetricsLogger
from training.model import CausalLM, build_model, is_quantized, transformer_engine_available
from training.parallelize import build_mesh, materialize, parallelize
from training.preflight import PreflightError, check_efa, measure_bandwidth
from training.supervision import TrainerStatus, guarded_output, write_status
from training.tokenizer_files import DataTokenizer
from training.tracking import MetricSinks
from training.watchdog import Watchdog, WatchdogLimits, act_on_hang

# ---------------------------------------------------------------------------
# Schedule


def learning_rate(step: int, hp: Hyperparameters) -> float:
    """Learning rate of optimizer step ``step`` (1-based).

    Linear warmup ``lr * step / warmup_steps`` for ``step <= warmup_steps``,
    then cosine from ``learning_rate`` to ``min_learning_rate`` at ``max_steps``.
    """
    peak, floor = hp.learning_rate, hp.min_learning_rate
    if hp.warmup_steps and step <= hp.warmup_steps:
        return peak * step / hp.warmup_steps
    span = max(1, hp.max_steps - hp.warmup_steps)
    progress = min(1.0, max(0.0, (step - hp.warmup_steps) / span))
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------------------
# Stopping


_early_signals: list[int] = []


def _record_early_signal(signum: int, frame: Any) -> None:
    _early_signals.append(signum)


def install_early_stop_handlers() -> None:
    """Record SIGTERM/SIGINT from process start until :meth:`StopController.install` takes over.

    Installed first thing in :func:`main`: the entry point holds its stop
    signal until every worker catches SIGTERM, so a signal during setup stops
    the run cleanly before its first step instead of killing the worker.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _record_early_signal)


class StopController:
    """Collective stop decision: signal received, or the capacity-block deadline is near."""

    REASONS: ClassVar[dict[int, str]] = {1: "SIGTERM/SIGINT received", 2: "capacity block ends soon"}
    CAPACITY = 2

    def __init__(self, deadline: float | None, group: Any, world_size: int) -> None:
        self.deadline = deadline
        self.group = group
        self.world_size = world_size
        self.signal_received: int | None = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)
        if _early_signals and self.signal_received is None:
            self.signal_received = _early_signals[0]  # received during setup

    def _handler(self, signum: int, frame: Any) -> None:
        self.signal_received = signum

    def margin(self, step_seconds: float, save_seconds: float) -> float:
        return STOP_MARGIN_S + 2.0 * (step_seconds + save_seconds)

    def check(self, *, step_seconds: float = 0.0, save_seconds: float = 0.0) -> str | None:
        code = 1 if self.signal_received is not None else 0
        if (
            code == 0
            and self.deadline is not None
            and time.time() + self.margin(step_seconds, save_seconds) >= self.deadline
        ):
            code = 2
        if self.world_size > 1:
            flag = torch.tensor([code], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
            code = int(flag.item())
        return self.REASONS.get(code)


# ---------------------------------------------------------------------------
# Failure reasons


class TrainingDiverged(RuntimeError):
    """The run stops on non-finite values; the message (the failure report) starts with
    :data:`platform_spec.health.NON_FINITE_REASON`."""


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def oom_reason(hp: Hyperparameters, device: torch.device, rank: int, step: int, where: str | None = None) -> str:
    """A one-line CUDA OOM reason naming the setting to change (``where``: e.g. ``while saving step-6``;
    default ``at step <step>``)."""
    device_name = ""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory / 1e9
        device_name = f" ({torch.cuda.get_device_name(device)}, {total:.0f} GB)"
    advice = []
    if hp.activation_checkpointing == "off":
        advice.append("set activation_checkpointing=full (or selective:N to recompute every Nth block)")
    elif hp.activation_checkpointing != "full":
        advice.append(f"set activation_checkpointing=full (now {hp.activation_checkpointing})")
    if hp.gradient_accumulation_steps > 1 and hp.gradient_sync != "every_micro_batch":
        advice.append("set gradient_sync=every_micro_batch (sharded gradient accumulation)")
    advice.append(f"lower batch_size (now {hp.batch_size}; raise gradient_accumulation_steps to keep the global batch)")
    advice.append(f"lower seq_length (now {hp.seq_length})")
    if not hp.reshard_after_forward:
        advice.append("set reshard_after_forward=true")
    advice.append("or use more GPUs (instance_count)")
    return (
        f"CUDA out of memory on rank {rank}{device_name} {where or f'at step {step}'} with model={hp.model}, "
        f"precision={hp.precision}, "
        f"batch_size={hp.batch_size}, seq_length={hp.seq_length}, activation_checkpointing={hp.activation_checkpointing}: "
        + "; ".join(advice)
    )


# ---------------------------------------------------------------------------
# Gradient accumulation


def accumulate_gradients(
    model: Any,
    micro_batch_loss: Callable[[int], torch.Tensor],
    *,
    micro_batches: int,
    gradient_sync: str,
    scale_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Forward and backward of one optimizer step's micro-batches; the gradients are left in ``.grad``.

    Before each micro-batch's backward the FSDP2 model is told whether to reduce-scatter its gradients
    (``FSDPModule.set_requires_gradient_sync``), by ``gradient_sync``
    (:func:`platform_spec.training_modes.reduces_gradients`): ``every_micro_batch`` reduce-scatters each
    micro-batch and accumulates sharded gradients (less memory); ``last_micro_batch`` keeps unsharded
    gradients (FSDP2 accumulates them in the reduce dtype, fp32) until the last micro-batch (less traffic).
    Both give the same gradients up to the order of floating-point sums.

    Args:
        model: the FSDP2-sharded model (a ``torch.distributed.fsdp.FSDPModule``).
        micro_batch_loss: ``(micro-batch index, 0-based) -> mean loss`` (a scalar tensor with its graph).
        micro_batches: micro-batches per optimizer step (``gradient_accumulation_steps``, >= 1).
        gradient_sync: one of :data:`platform_spec.training_modes.GRADIENT_SYNC_MODES`.
        scale_loss: applied to each micro-batch's share of the loss before backward (fp16 loss scaling).

    Returns:
        The mean of the micro-batches' losses (detached fp32 scalar).

    Raises:
        platform_spec.errors.FieldError: an unknown ``gradient_sync`` (before any forward).
    """
    syncs = [reduces_gradients(gradient_sync, micro, micro_batches) for micro in range(micro_batches)]
    total: torch.Tensor | None = None
    for micro, sync in enumerate(syncs):
        model.set_requires_gradient_sync(sync)
        loss = micro_batch_loss(micro)
        scaled = loss / micro_batches
        if scale_loss is not None:
            scaled = scale_loss(scaled)
        scaled.backward()
        detached = loss.detach().float()
        total = detached if total is None else total + detached
    assert total is not None, "micro_batches must be >= 1"
    return total / micro_batches


# ---------------------------------------------------------------------------
# Distributed setup


def build_optimizer(
    model: torch.nn.Module,
    hp: Hyperparameters,
    device: torch.device,
    *,
    initial_values: Mapping[str, torch.Tensor] | None = None,
) -> torch.optim.Optimizer:
    """The trainer's AdamW: the implementation :func:`platform_spec.optimizers.optimizer_for` names for
    ``device`` and ``hp.quantized_model_init`` (the one the planner models), weight decay on parameters of
    two or more dimensions.

    * ``fused`` / ``foreach``: ``torch.optim.AdamW(..., fused=True)`` on CUDA, ``foreach=True`` on the CPU;
      FSDP2's fp32 sharded parameters are the master weights.
    * ``te_fused_adam`` (``quantized_model_init``): TransformerEngine's
      ``FusedAdam(..., adam_w_mode=True, master_weights=True, master_weight_dtype=torch.float32)``, whose
      fp32 master weights of the parameters stored quantized are seeded from ``initial_values`` (what
      :func:`training.parallelize.materialize` returned: the trainer's own initial values, the same the
      non-quantized path starts from) with ``initialize_state`` and ``set_scaled_state`` (TransformerEngine
      2.19 ``examples/pytorch/quantized_model_init/fully_shard.py``), not from their quantized form.

    Args:
        initial_values: ``{parameter name: local fp32 values}`` of the parameters stored quantized.

    Raises:
        ValueError: ``initial_values`` names a parameter the model does not have (te_fused_adam).
    """
    choice = optimizer_for(device.type, quantized_model_init=hp.quantized_model_init)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    betas = (hp.adam_beta1, hp.adam_beta2)
    if choice.kind != "te_fused_adam":
        flag = {choice.kind: True}  # fused=True or foreach=True
        return torch.optim.AdamW(groups, lr=hp.learning_rate, betas=betas, eps=hp.adam_epsilon, **flag)
    from transformer_engine.pytorch.optimizers import FusedAdam

    optimizer = FusedAdam(
        groups,
        lr=hp.learning_rate,
        betas=betas,
        eps=hp.adam_epsilon,
        adam_w_mode=True,
        master_weights=True,
        master_weight_dtype=torch.float32,
    )
    initial = dict(initial_values or {})
    unknown = sorted(set(initial) - {name for name, _ in model.named_parameters()})
    if unknown:
        raise ValueError(f"initial values for parameters the model does not have: {unknown[:5]}")
    # FusedAdam counts steps in each parameter group's "step", which it creates at the first step: created now,
    # a resume restores it (DCP loads into the keys the fresh optimizer's state dict has, and no other)
    for group in optimizer.param_groups:
        group.setdefault("step", 0)
    # every parameter's state now, as TE's example does (FusedAdam would create it at the first step): a resume
    # then loads into a complete state (DCP's get_state_dict adds none to an optimizer that has some)
    for name, param in model.named_parameters():
        optimizer.initialize_state(param, store_param_remainders=False)
        if name in initial:
            optimizer.set_scaled_state(param, "master_param", initial[name].to(torch.float32))
    return optimizer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SETUP_COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)
"""The default process group's collective timeout during setup (rendezvous, weight load, resume, the first
step): long, because one rank may read or load for minutes while the others wait."""


def collective_groups(mesh: Any) -> dict[str, Any]:
    """``{name: process group}`` of the training loop's collectives: ``"the default group"`` (None) and each of
    FSDP's mesh dimensions (``shard``, ``replicate``: :func:`training.parallelize.build_mesh`) with a group of its own. DeviceMesh (torch 2.13,
    ``device_mesh.py`` ``_init_one_process_group``) reuses the default group for a dimension spanning every rank
    (full sharding) and creates the others (HSDP's) with ``new_group``/``split_group`` at the backend's default
    timeout (NCCL 10 minutes, gloo 30), not the default group's: the timeouts must be set on them too."""
    default = dist.distributed_c10d._get_default_group()
    groups: dict[str, Any] = {"the default group": None}
    for name in mesh.mesh_dim_names or ():
        group = mesh.get_group(name)
        if group is not default and all(group is not known for known in groups.values()):
            groups[name] = group
    return groups


def set_collective_timeout(minutes: float, groups: Sequence[Any] = (None,)) -> datetime.timedelta | None:
    """Set the collective timeout of each of ``groups`` (None: the default group) to ``minutes``; returns it (None
    when ``minutes`` is 0: the timeouts are left as they are).

    torch 2.13 offers ``torch.distributed.distributed_c10d._set_pg_timeout(timeout, group)``, which sets the
    default timeout of the group's gloo and NCCL backends for the collectives issued after it (what
    ``torch.distributed.breakpoint`` uses); the call is local to this rank, so every rank makes it. With
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (the image) a collective past it aborts the process.
    """
    if minutes <= 0:
        return None
    timeout = datetime.timedelta(minutes=minutes)
    for group in groups:
        dist.distributed_c10d._set_pg_timeout(timeout, group)
    return timeout


def init_distributed() -> tuple[int, int, int, int, torch.device]:
    """(rank, world_size, local_rank, local_world_size, device); initialises the default group.

    CUDA (NCCL) when a GPU is visible, else CPU (gloo). Without torchrun's
    variables: a single-process group on a free local port. An existing default
    group is kept (several trainers in one process: ``benchmarks/gpu_check.py``).
    """
    if "RANK" not in os.environ:
        os.environ.update(
            {
                "RANK": "0",
                "WORLD_SIZE": "1",
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(_free_port()),
            }
        )
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl", device_id=device, timeout=SETUP_COLLECTIVE_TIMEOUT)
    else:
        device = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=SETUP_COLLECTIVE_TIMEOUT)
    return rank, world, local_rank, local_world, device


# ---------------------------------------------------------------------------
# The trainer


class Trainer:
    """Builds everything from the hyperparameters and runs the loop (see the module docstring)."""

    PHASES = ("setup", "resume", "step", "evaluate", "save", "export")

    def __init__(self, hp: Hyperparameters, paths: SageMakerPaths, environ: dict[str, str] | None = None) -> None:
        self.hp = hp
        self.paths = paths
        self.environ = dict(os.environ if environ is None else environ)
        self.step = 0
        self.rank = int(self.environ.get("RANK", "0"))
        """Global rank: torchrun's ``RANK`` until :meth:`setup` reads the process group (a watchdog report during
        setup names this rank's stacks file)."""
        self.local_rank = int(self.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device("cpu")
        self.phase = "setup"
        """What the trainer is doing (one of :attr:`PHASES`): failure reasons say where it failed."""
        self.resumed_from: int | None = None
        self.skipped: dict[int, str] = {}
        self.saved_step: int | None = None
        self.state = "starting"
        self.watchdog = Watchdog(WatchdogLimits.from_hyperparameters(hp), self._on_hang)
        self.skipped_steps = 0
        """Optimizer steps of this job whose update was skipped (the ``skipped_steps`` metric)."""
        self.non_finite_steps: list[tuple[int, float, float]] = []
        """``(step, loss, grad_norm)`` of the current run of consecutive non-finite steps."""
        self.hang_reported = False
        """The watchdog fired (:meth:`_on_hang`): the process exits 1 once its dumps are written."""

    def _on_hang(self, stall: Any) -> None:
        """The watchdog fired (its thread): dump, report, exit 1 (:func:`training.watchdog.act_on_hang`). From
        then on the main thread, should it move during the dumps (a slow phase rather than a stuck one), leaves
        the status record alone: the hang's report stays the record's reason until the exit."""
        self.hang_reported = True
        act_on_hang(
            stall,
            paths=self.paths,
            rank=self.rank,
            write_status=lambda reason: self.write_status("failed", reason, watchdog=True),
        )

    def log(self, message: str, *, every_rank: bool = False) -> None:
        """Print ``message`` on rank 0 (``every_rank``: on each rank, prefixed with it)."""
        if every_rank:
            print(f"[trainer rank {self.rank}] {message}", flush=True)
        elif self.rank == 0:
            print(f"[trainer] {message}", flush=True)

    def enter(self, phase: str, step: int | None = None) -> None:
        """The trainer starts ``phase`` (one of :attr:`PHASES`) at ``step`` (None: the watchdog's unchanged): what
        failure reasons say (:meth:`where`) and what the watchdog times (:meth:`training.watchdog.Watchdog.phase`)."""
        self.phase = phase
        self.watchdog.phase(phase, step)

    def where(self) -> str:
        """Where a failure happened, in words: ``at step 7``, ``while saving step-6``, ``after step 9 (...)``."""
        if self.phase == "step":
            return f"at step {self.step + 1}"
        if self.phase == "evaluate":
            return f"while evaluating the validation loss after step {self.step}"
        if self.phase == "save":
            return f"while saving step-{self.step}"
        if self.phase == "export":
            return f"after step {self.step} (exporting the final weights)"
        if self.phase == "resume":
            return "while resuming (before the first step)"
        return "during setup (before the first step)"

    def write_status(self, state: str | None = None, reason: str | None = None, *, watchdog: bool = False) -> None:
        """Write the status record (:mod:`training.supervision`) on each node's local rank 0 (``watchdog``: the
        watchdog's hang report; nothing else is written once it fired)."""
        if self.hang_reported and not watchdog:
            return
        if state is not None:
            self.state = state
        status = TrainerStatus(
            self.state,
            step=self.step,
            resumed_from=self.resumed_from,
            skipped=dict(self.skipped),
            saved=self.saved_step,
            reason=reason,
        )
        if state is not None and self.rank == 0:  # each change of state, declared in the output too
            print(format_run_record(status.run_record(**self.device_fields())), flush=True)
        if self.local_rank != 0:
            return
        try:
            write_status(self.paths, status)
        except OSError as exc:  # the record informs the supervisor; it never stops training
            self.log(f"could not write the status record: {exc}")

    def device_fields(self) -> dict[str, Any]:
        """The device of the run's ``[run]`` records once set up (:class:`platform_spec.metric_lines.RunRecord`)."""
        metrics = getattr(self, "metrics", None)
        if metrics is None:
            return {}
        return {"device": metrics.info.type, "device_name": metrics.info.name, "world_size": self.world_size}

    # -- setup -----------------------------------------------------------------
    def setup(self) -> None:
        hp = self.hp
        prec.require_cuda(read_resource_config(self.paths))  # a GPU instance never trains on the CPU
        self.rank, self.world_size, self.local_rank, self.local_world_size, self.device = init_distributed()
        device = self.device
        cuda = device.type == "cuda"
        self.control_group = dist.new_group(backend="gloo") if cuda else dist.group.WORLD
        self.stopper = StopController(capacity_block_deadline(self.environ), self.control_group, self.world_size)
        self.stopper.install()
        self.resources = read_resource_config(self.paths)
        check_efa(self.resources, self.environ, group=self.control_group)  # PreflightError before anything is built

        # TransformerEngine blocks where TE imports on a GPU, the precision is not fp32 (TE's attention is unfused
        # there) and the model's family has blocks that build the shape
        shape = model_shape(hp)  # the preset or custom shape, checked by its family's rule (parse did too)
        family = family_of_shape(shape)
        self.backend = family.backend_for(
            shape, te_available=cuda and transformer_engine_available(), precision=hp.precision
        )
        # The precision's converter (the registry's format) and its GPU check, before anything is built or any
        # step runs; then its recipe, amax reduction and process-wide switches (TF32 for fp32).
        self.plan = prec.plan(hp.precision)
        self.plan.check(device, te_available=self.backend == "te", seq_length=hp.seq_length, batch_size=hp.batch_size)
        self.recipe = self.plan.recipe(hp.fp8_scaling)
        self.amax_group = dist.group.WORLD if self.plan.reduces_amax(hp.fp8_scaling) else None
        self.plan.configure_backends(device)
        if not cuda and "OMP_NUM_THREADS" not in self.environ:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.local_world_size))

        # Identical seeds on every rank: the same initial model everywhere.
        random.seed(hp.seed)
        np.random.seed(hp.seed)
        torch.manual_seed(hp.seed)

        # Data.
        if hp.synthetic_data:
            self.dataset = None
            vocab = resolve_vocab_size(hp, shape.vocab_size, None)
            self.sampler: DistributedSampler | SyntheticSampler = SyntheticSampler(
                vocab_size=vocab,
                seq_length=hp.seq_length,
                batch_size=hp.batch_size,
                grad_accum=hp.gradient_accumulation_steps,
                rank=self.rank,
                world_size=self.world_size,
                seed=hp.seed,
            )
        else:
            # no scan of shards without max_token_id: the entry point scanned them once, and every batch is checked
            self.dataset = TokenDataset(self.paths.train_dir, scan=False)
            vocab = resolve_vocab_size(hp, shape.vocab_size, self.dataset.vocab_size)
            self.sampler = DistributedSampler(
                self.dataset,
                seq_length=hp.seq_length,
                batch_size=hp.batch_size,
                grad_accum=hp.gradient_accumulation_steps,
                rank=self.rank,
                world_size=self.world_size,
                seed=hp.seed,
            )
        self.config = shape.with_overrides(vocab_size=vocab)
        self.evaluator = Evaluator.for_run(
            hp,
            validation_dir=self.paths.validation_dir,
            train=self.dataset,
            vocab_size=vocab,
            rank=self.rank,
            world_size=self.world_size,
            device=device,
        )

        # Model: built for one device on the meta device, parallelised in one place, then allocated and
        # initialised shard by shard (the same initial weights whatever the number of ranks).
        # quantized_model_init: the blocks' matmul weights are stored in the recipe's quantized format
        stored_recipe = self.recipe if hp.quantized_model_init else None
        model = build_model(self.config, backend=self.backend, device="meta", quantized_recipe=stored_recipe)
        mesh = build_mesh(device.type, self.world_size, self.local_world_size, hp.sharding_strategy)
        self.collective_groups = collective_groups(mesh)  # HSDP's groups get setup's timeout too, then the switch
        set_collective_timeout(SETUP_COLLECTIVE_TIMEOUT.total_seconds() / 60, list(self.collective_groups.values()))
        self.model: CausalLM = parallelize(
            model,
            mesh=mesh,
            precision=self.plan,
            activation_checkpointing=hp.activation_checkpointing,
            reshard_after_forward=hp.reshard_after_forward,
        )
        initial = materialize(self.model, device, seed=hp.seed)

        # Optimizer (the one platform_spec.optimizers names for this device) and schedule.
        self.optimizer = build_optimizer(self.model, hp, device, initial_values=initial)
        del initial
        peak = hp.learning_rate
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda e: learning_rate(e + 1, hp) / peak if peak > 0 else 0.0
        )
        self.scaler = self.plan.loss_scaler()

        # Checkpoints and metrics.
        self.checkpoints = CheckpointManager(
            self.paths.checkpoint_dir,
            keep=hp.keep_checkpoints,
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            process_group=self.control_group,
            log=self.log,
            asynchronous=hp.async_checkpoint,
            on_saved=self.saved,
        )
        self.save_reasons: dict[int, str] = {}
        self.tokens_per_step = hp.batch_size * hp.seq_length * hp.gradient_accumulation_steps * self.world_size
        self.metrics = MetricsLogger(
            tokens_per_step=self.tokens_per_step,
            world_size=self.world_size,
            flops_per_token=family.flops_per_token(self.config, hp.seq_length),
            device=device,
            info=DeviceInfo.detect(device, hp.precision),
            rank=self.rank,
            metrics_file=self.paths.metrics_file,
            sinks=MetricSinks(self.paths, rank=self.rank),
        )
        self.log(
            f"model={self.config.name} ({self.model.family_name}: "
            + " ".join(f"{k}={v}" for k, v in asdict(self.config).items() if k != "name")
            + f") params={self.model.num_parameters():,} backend={self.backend} device={device.type} "
            f"({self.metrics.info.name}) world_size={self.world_size} precision={hp.precision} "
            f"sharding={hp.sharding_strategy} activation_checkpointing={hp.activation_checkpointing}"
        )
        data = "synthetic tokens" if self.dataset is None else str(self.dataset.describe())
        self.log(f"data: {data}; tokens per step {self.tokens_per_step:,}")
        self.bandwidth = measure_bandwidth(
            self.model, self.plan, device, seconds=hp.preflight_seconds, resources=self.resources, log=self.log
        )
        if self.bandwidth is not None:
            self.metrics.publish_once(self.bandwidth.metric_values())  # on the first step's [metrics] line

    def run_record(self) -> dict[str, Any]:
        """What defines this run (:func:`training.checkpoint.compare.run_record`), saved with every checkpoint."""
        data = (
            {"synthetic": True, "vocab_size": self.config.vocab_size}
            if self.dataset is None
            else self.dataset.fingerprint()
        )
        return run_record(
            model_config=asdict(self.config),
            backend=self.backend,
            world_size=self.world_size,
            samples_per_step=self.sampler.samples_per_step,
            hyperparameters=self.hp.to_strings(),
            data=data,
        )

    def trainer_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "data": {"step": self.step, "samples_consumed": self.sampler.samples_consumed(self.step)},
            "scheduler": self.scheduler.state_dict(),
            "loss_scaler": self.scaler.state_dict() if self.scaler else None,
            # a stop's save inside a run of non-finite steps (its state is the last finite one): the run goes on
            # counting after the resume; values as text ("inf", "nan": JSON has no such numbers)
            "non_finite_steps": [[step, str(loss), str(norm)] for step, loss, norm in self.non_finite_steps],
            "run": self.run_record(),
        }

    def restore_trainer_state(self, state: dict[str, Any]) -> None:
        """Restore the LR scheduler, the loss scaler, the data position and the run of non-finite steps (a stop's
        save taken inside one) of a verified ``trainer_state.json``.

        Called by :meth:`CheckpointManager.load_latest` as part of loading a
        candidate, so a state that does not fit this trainer makes the checkpoint
        skipped (and the next older one tried) instead of failing the run.

        Raises:
            ValueError: no scheduler state, or one that is not at the checkpoint's step
                or has another number of parameter groups.
        """
        step = state["step"]
        scheduler = state.get("scheduler")
        if not isinstance(scheduler, dict):
            raise ValueError(f"{TRAINER_STATE} has no LR scheduler state ('scheduler')")
        if scheduler.get("last_epoch") != step:
            raise ValueError(
                f"{TRAINER_STATE} 'scheduler.last_epoch' is {scheduler.get('last_epoch')!r}; the scheduler steps once "
                f"per optimizer step, so it must be the checkpoint's step {step}"
            )
        groups = len(self.optimizer.param_groups)
        if len(scheduler.get("base_lrs") or []) != groups:
            raise ValueError(
                f"{TRAINER_STATE} 'scheduler.base_lrs' has {len(scheduler.get('base_lrs') or [])} "
                f"entries; this optimizer has {groups} parameter groups"
            )
        self.scheduler.load_state_dict(copy.deepcopy(scheduler))
        scaler = state.get("loss_scaler")
        if self.scaler is not None and scaler:
            self.scaler.load_state_dict(scaler)
        data = state.get("data") if isinstance(state.get("data"), dict) else {}
        samples = data.get("samples_consumed")
        if samples is None:  # older checkpoints: the layout never changes the global batch within a run
            samples = step * self.sampler.samples_per_step
        self.sampler.start_at(step, samples)
        self.non_finite_steps = [
            (int(s), float(loss), float(norm)) for s, loss, norm in state.get("non_finite_steps", [])
        ]

    def resume(self) -> None:
        """Resume the newest loadable checkpoint of this run (see :mod:`training.checkpoint`), or start at step 0.

        Raises:
            CheckpointError: checkpoints exist but none loads, or they belong to another run
                (nothing is loaded, pruned or written then).
        """
        resumed = self.checkpoints.load_latest(
            self.model,
            self.optimizer,
            run=self.run_record(),
            allow_data_change=self.hp.allow_data_change,
            restore=self.restore_trainer_state,
        )
        removed = self.checkpoints.remove_incomplete()
        if removed:
            self.log(f"removed incomplete checkpoints of steps {removed}")
        init = init_config(self.paths)
        if resumed is None:
            self.log("no complete checkpoint: starting from step 0")
            if init is not None:
                self.load_init_weights(init.parent)
            return
        self.step = self.resumed_from = resumed.step
        self.skipped = dict(resumed.skipped)
        self.log(f"resumed from {resumed.path} (step {self.step}; rng restored: {resumed.restored_rng})")
        if init is not None:
            self.log(f"the checkpoint wins over the {INIT_CHANNEL} weights ({init.parent}): they are not loaded")
        self.log(f"data continues at sample {self.sampler.samples_consumed(self.step):,} of the run")

    def load_init_weights(self, folder: Path) -> None:
        """Fill the (sharded) model from the Hugging Face folder of the ``init_from`` channel, each rank its own
        rows (:func:`training.hf_weights.load_into`); logs what this rank read.

        Raises:
            training.hf_weights.HfWeightsError: a folder that does not fit the model (before any weight is written).
        """
        t0 = time.monotonic()
        stats = load_into(self.model, folder, self.config)
        self.log(
            f"initial weights from {folder}: rank {self.rank} read {stats.rows:,} rows, {stats.bytes_read:,} of "
            f"{stats.bytes_total:,} bytes, peak extra memory {stats.peak_extra_bytes:,} bytes, in "
            f"{time.monotonic() - t0:.1f} s",
            every_rank=True,
        )

    # -- loop ----------------------------------------------------------------------
    def _batch(self, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.from_numpy(self.sampler.batch(self.step, micro))
        if self.device.type == "cuda":
            tokens = tokens.pin_memory().to(self.device, non_blocking=True)
        return tokens[:, :-1], tokens[:, 1:]

    def _grad_norm(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        grads = [p.grad for p in params if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
        if isinstance(total, DTensor):
            total = total.full_tensor()
        if self.hp.max_grad_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, self.hp.max_grad_norm, total, foreach=True)
        return total

    def train_step(self) -> tuple[float, float, float, bool, bool]:
        """One optimizer step (or its skip): ``(loss averaged over every rank, global gradient norm before
        clipping, learning rate, skipped, counts toward max_nonfinite_steps)`` (see the module docstring)."""
        hp = self.hp
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.zero_grad(set_to_none=True)

        def micro_batch_loss(micro: int) -> torch.Tensor:
            inputs, targets = self._batch(micro)
            with self.plan.autocast(self.recipe, device_type=self.device.type, amax_reduction_group=self.amax_group):
                return self.model(inputs, targets)

        mean_loss = accumulate_gradients(
            self.model,
            micro_batch_loss,
            micro_batches=hp.gradient_accumulation_steps,
            gradient_sync=hp.gradient_sync,
            scale_loss=None if self.scaler is None else self.scaler.scale_loss,
        )
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.scaler is not None:
            self.scaler.unscale_(params)
        grad_norm = self._grad_norm(params)  # global (DTensor full_tensor): the same on every rank
        loss = mean_loss.detach().clone()
        if self.world_size > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)  # gloo has no AVG; NaN and inf survive the sum
            loss /= self.world_size
        loss_value, norm_value = float(loss), float(grad_norm)
        if self.scaler is not None:
            at_min_scale = self.scaler.scale <= self.scaler.min_scale
            update = self.scaler.update(norm_value) and math.isfinite(loss_value)
            counts = not math.isfinite(loss_value) or (not math.isfinite(norm_value) and at_min_scale)
        else:
            update = math.isfinite(loss_value) and math.isfinite(norm_value)
            counts = not update
        if update:
            self.optimizer.step()
        self.scheduler.step()
        return loss_value, norm_value, lr, not update, counts

    def diverged_reason(self) -> str:
        """The report of :attr:`non_finite_steps` (``max_nonfinite_steps`` in a row)."""
        steps = self.non_finite_steps
        shown = ", ".join(f"step {step} loss={loss:.4g} grad_norm={norm:.4g}" for step, loss, norm in steps[-5:])
        newest = (
            "none"
            if self.saved_step is None and self.resumed_from is None
            else (f"step-{self.saved_step if self.saved_step is not None else self.resumed_from}")
        )
        return (
            f"{NON_FINITE_REASON}: steps {steps[0][0]}-{steps[-1][0]} ({len(steps)} in a row, "
            f"max_nonfinite_steps={self.hp.max_nonfinite_steps}; their updates were skipped): {shown}; "
            f"no checkpoint holds a non-finite update (the newest of this run: {newest}); lower learning_rate or "
            f"raise warmup_steps, or resume from an earlier checkpoint"
        )

    def evaluate(self) -> None:
        """Print the validation loss of the model after this step (:mod:`training.evaluation`) as a metric line;
        its time is left out of the throughput interval."""
        assert self.evaluator is not None
        self.enter("evaluate", self.step)
        t0 = time.monotonic()
        loss = self.evaluator.evaluate(
            self.model,
            lambda: self.plan.autocast(self.recipe, device_type=self.device.type, amax_reduction_group=self.amax_group),
        )
        self.watchdog.progress(self.step)
        seconds = time.monotonic() - t0
        self.metrics.exclude(seconds)
        self.metrics.log({"step": self.step, "validation_loss": loss})
        self.log(
            f"validation loss {loss:.4f} after step {self.step} ({self.evaluator.batches} batches, {seconds:.1f} s)"
        )

    def refuse_non_finite_state(self) -> None:
        """Raise :class:`TrainingDiverged` (on every rank) when any rank's parameters or optimizer state are not
        finite: a checkpoint is never written from a state that has seen a non-finite update, nor one a resume
        would skip (:meth:`CheckpointManager.load_latest` checks both; AdamW's ``exp_avg_sq`` overflows to inf on a
        gradient element above ~1.8e19 while the parameters and the gradient norm stay finite)."""
        found = finite.non_finite(
            {"model": dict(self.model.named_parameters()), "optimizer": self.optimizer.state_dict()["state"]}
        )
        problem = f"rank {self.rank}: {finite.describe(found)}" if found else None
        problems = [problem]
        if self.world_size > 1:
            problems = [None] * self.world_size
            dist.all_gather_object(problems, problem, group=self.control_group)
        bad = [p for p in problems if p]
        if bad:
            raise TrainingDiverged(
                f"{NON_FINITE_REASON}: the state after step {self.step} is not finite ({'; '.join(bad)}); "
                f"checkpoint step-{self.step} was not written"
            )

    def save(self, reason: str, *, asynchronous: bool = False) -> None:
        """Checkpoint this step (:class:`training.checkpoint.manager.CheckpointManager`): synchronously (after
        finishing an asynchronous save still being written), or, with ``asynchronous``, stage it and write it in
        the background (:meth:`poll_checkpoint` finishes it). Training's wait is left out of the throughput."""
        self.enter("save", self.step)
        t0 = time.monotonic()
        self.save_reasons[self.step] = reason
        try:
            self.refuse_non_finite_state()
        except TrainingDiverged:
            self.finish_pending_save()
            raise
        path = self.checkpoints.save(
            self.step, self.model, self.optimizer, self.trainer_state(), asynchronous=asynchronous
        )
        self.watchdog.progress(self.step)
        seconds = time.monotonic() - t0
        self.metrics.exclude(seconds)
        if self.checkpoints.pending_step == self.step:
            self.log(f"checkpoint {path} ({reason}): staged in {seconds:.1f} s, being written in the background")

    def finish_pending_save(self) -> None:
        """Before the run stops as diverged, finish the asynchronous save being written, if any (collective: every
        rank stops at the same step, the loss and gradient norm being global). Its state was finite when staged
        (:meth:`refuse_non_finite_state`) and precedes the non-finite steps (no interval save is taken inside
        them), so it becomes the newest checkpoint rather than a folder without its marker that the next resume
        deletes. A failed write is logged: the divergence stays the run's reason."""
        pending = self.checkpoints.pending_step
        if pending is None:
            return
        self.enter("save", pending)
        try:
            self.checkpoints.wait()
        except CheckpointError as exc:
            self.log(str(exc))
        self.watchdog.progress(self.step)

    def poll_checkpoint(self) -> None:
        """Finish the asynchronous save being written once every rank has written it (collective, every step)."""
        t0 = time.monotonic()
        self.checkpoints.poll()
        self.metrics.exclude(time.monotonic() - t0)

    def saved(self, record: SaveRecord) -> None:
        """A checkpoint was marked complete (the manager's ``on_saved``): the status record, and a log line with
        the time training waited for it and the time its files took to write."""
        self.saved_step = record.step
        if record.asynchronous:  # its save phase timed the staging only: the watchdog learns the write's time
            self.watchdog.observe("save", record.write_seconds)
        self.write_status()
        reason = self.save_reasons.pop(record.step, "save")
        kind = "asynchronous" if record.asynchronous else "synchronous"
        self.log(
            f"checkpoint {record.path} ({reason}, {kind}: training blocked {record.blocking_seconds:.1f} s, "
            f"written in {record.write_seconds:.1f} s)"
        )

    def export(self) -> None:
        self.enter("export", self.step)
        t0 = time.monotonic()
        extra = {
            "step": self.step,
            "precision": self.hp.precision,
            "tokenizer": None if self.dataset is None else self.dataset.tokenizer,
            "eod_token_id": None if self.dataset is None else self.dataset.eod_token_id,
        }
        tokenizer = DataTokenizer.of_dataset(self.dataset) if self.rank == 0 else None
        masters = {  # quantized_model_init: the fp32 masters, not the quantized weights
            name: self.optimizer.state[param]["master_param"]
            for name, param in self.model.named_parameters()
            if is_quantized(param)
        }
        path = export_model(
            self.model,
            self.paths.model_dir,
            config=self.config,
            dtype=self.plan.param_dtype,
            rank=self.rank,
            extra=extra,
            tokenizer=tokenizer,
            master_weights=masters,
        )
        if path is not None:
            self.log(f"final weights {path} ({time.monotonic() - t0:.1f} s)")
        if tokenizer is not None and tokenizer.missing:
            self.log(f"the export has no tokenizer files: {tokenizer.missing}")

    def run(self) -> int:
        """Set up, resume and train (see the module docstring) under the watchdog; the exit status (0)."""
        self.watchdog.start()
        try:
            return self._run()
        finally:
            self.watchdog.stop()

    def _run(self) -> int:
        hp = self.hp
        self.phase = "setup"
        self.setup()
        self.enter("resume")
        self.resume()
        self.write_status("starting")
        reason = self.stopper.check(save_seconds=self.checkpoints.last_save_seconds)
        if reason == StopController.REASONS[StopController.CAPACITY]:
            assert self.stopper.deadline is not None
            margin = self.stopper.margin(0.0, self.checkpoints.last_save_seconds)
            raise CapacityBlockEnded(capacity_block_ended_reason(self.stopper.deadline, time.time(), margin))
        if reason is not None:
            self.write_status("stopped", reason)
            self.log(f"stopping before step {self.step + 1}: {reason}; nothing to save")
            return 0
        last_saved = first_step = self.step
        step_seconds = 0.0
        self.write_status("training")
        self.metrics.start()
        while self.step < hp.max_steps:
            self.enter("step", self.step)
            t0 = time.monotonic()
            loss, grad_norm, lr, skipped, counts = self.train_step()
            self.step += 1
            self.watchdog.progress(self.step)
            self.metrics.step_done()
            self.skipped_steps += skipped
            if counts:
                self.non_finite_steps.append((self.step, loss, grad_norm))
            elif not skipped:
                self.non_finite_steps.clear()
            # every log_interval steps, plus the first step of a run (start of the curve), the last and a skipped one
            if skipped or self.step % hp.log_interval == 0 or self.step in (first_step + 1, hp.max_steps):
                values = self.metrics.values(
                    step=self.step, loss=loss, lr=lr, grad_norm=grad_norm, skipped_steps=self.skipped_steps
                )
                self.metrics.log(values)
            if len(self.non_finite_steps) >= hp.max_nonfinite_steps:
                self.finish_pending_save()
                raise TrainingDiverged(self.diverged_reason())
            groups = self.collective_groups
            if self.step == first_step + 1 and (
                timeout := set_collective_timeout(hp.collective_timeout_minutes, list(groups.values()))
            ):
                self.log(
                    f"collective timeout {timeout.total_seconds() / 60:g} min from now on on {' and '.join(groups)} "
                    f"(setup: {SETUP_COLLECTIVE_TIMEOUT.total_seconds() / 60:g} min)"
                )
            step_seconds = time.monotonic() - t0
            self.poll_checkpoint()
            reason = self.stopper.check(step_seconds=step_seconds, save_seconds=self.checkpoints.last_save_seconds)
            if reason is not None:
                self.save(reason)
                self.export()
                self.write_status("stopped", reason)
                self.log(f"stopped after step {self.step}: {reason}; resume continues from this checkpoint")
                return 0
            if self.evaluator is not None and (self.step % hp.eval_interval == 0 or self.step == hp.max_steps):
                self.evaluate()
            # no interval checkpoint inside a run of non-finite steps: its state is the last finite one's
            if self.step % hp.checkpoint_interval == 0 and self.step < hp.max_steps and not self.non_finite_steps:
                self.save("interval", asynchronous=hp.async_checkpoint)
                last_saved = self.step
        if last_saved != self.step:
            self.save("end of training")
        self.export()
        self.write_status("finished")
        self.log(f"training finished at step {self.step}")
        return 0


# ---------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.train", description="FSDP2 + TransformerEngine trainer (one rank)."
    )
    parser.add_argument(
        "--base-dir", default=None, help="SageMaker base directory (default: $SAGEMAKER_BASE_DIR or /opt/ml)"
    )
    for name, spec in SPECS.items():
        parser.add_argument(spec.flag, dest=name, default=None, help=spec.help)
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[Hyperparameters, SageMakerPaths]:
    args = build_parser().parse_args(argv)
    raw = {name: getattr(args, name) for name in SPECS if getattr(args, name) is not None}
    paths = SageMakerPaths(Path(args.base_dir)) if args.base_dir else SageMakerPaths.from_environment()
    return parse(raw), paths


def base_paths(argv: Sequence[str] | None) -> SageMakerPaths:
    """The base directory's paths from ``--base-dir`` alone (else ``SAGEMAKER_BASE_DIR``, else ``/opt/ml``).

    Read before anything else can fail, so the failure file of any error (a bad
    hyperparameter flag included) lands in the base directory the run was given.
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--base-dir", default=None)
    try:
        known, _ = parser.parse_known_args(argv)
    except SystemExit:  # `--base-dir` without a value: parse_args reports it
        known = argparse.Namespace(base_dir=None)
    return SageMakerPaths(Path(known.base_dir)) if known.base_dir else SageMakerPaths.from_environment()


def main(argv: Sequence[str] | None = None) -> int:
    """Train one rank; returns the exit status (0: finished or stopped, 1: failed with a reason written).

    stdout and stderr outlive their reader (:func:`training.supervision.guarded_output`):
    a closed terminal or a killed ``trainctl`` does not stop training.
    """
    install_early_stop_handlers()
    with guarded_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    paths = base_paths(argv)
    trainer: Trainer | None = None
    try:
        hp, paths = parse_args(argv)
        trainer = Trainer(hp, paths)
        status = trainer.run()
    except BaseException as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        rank = trainer.rank if trainer else int(os.environ.get("RANK", "0"))
        where = trainer.where() if trainer else "during setup (before the first step)"
        if isinstance(
            exc, (HyperparameterError, DataError, ConfigError, CheckpointError, PreflightError, TrainingDiverged)
        ):
            reason = str(exc)
        elif trainer is not None and is_oom(exc):
            reason = oom_reason(trainer.hp, trainer.device, rank, trainer.step + 1, where)
        else:
            reason = f"{type(exc).__name__} on rank {rank} {where}: {exc}"
        write_failure(paths, reason)
        if trainer is not None:
            trainer.write_status("refused" if isinstance(exc, ResumeRefused) else "failed", reason)
        elif int(os.environ.get("LOCAL_RANK", "0")) == 0:
            with contextlib.suppress(OSError):
                write_status(paths, TrainerStatus("failed", reason=reason))
        if trainer is None and int(os.environ.get("RANK", "0")) == 0:
            print(format_run_record(TrainerStatus("failed", reason=reason).run_record()), flush=True)
        traceback.print_exc()
        print(f"[trainer] FAILED: {reason}", file=sys.stderr, flush=True)
        return 1
    finally:
        # Free the model, optimizer and FSDP state now: they hold collective work objects whose
        # destruction during interpreter shutdown (after the process group is gone) can abort the
        # process ("terminate called without an active exception") after a successful run.
        metrics = getattr(trainer, "metrics", None)  # absent when setup failed first
        if metrics is not None and metrics.sinks is not None:
            metrics.sinks.close()  # ends the MLflow run, flushes the TensorBoard file
        trainer = None
        gc.collect()
        if dist.is_available() and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
