"""The training loop (one process per GPU, or per CPU process), launched by torchrun.

``python -m training.train --base-dir /opt/ml --precision bf16 --num-layers 4 ...``:
every hyperparameter of :mod:`training.hyperparameters` as ``--kebab-case``
(the guide's trainer interface); :mod:`training.entrypoint` passes them all.
Without torchrun's environment (``RANK``...) it runs as a single process.

Per optimizer step: ``gradient_accumulation_steps`` micro-batches (FSDP2
gradient sync only on the last), loss = mean cross-entropy, gradients
clipped to ``max_grad_norm`` by their global L2 norm (DTensor-aware),
AdamW (fp32 master state: FSDP2 keeps fp32 sharded parameters under a
bf16 compute policy), linear warmup then cosine decay to
``min_learning_rate`` (:func:`learning_rate`).

Stopping:
* SIGTERM / SIGINT (SageMaker stop or spot interruption; torchrun forwards
  the entry point's signal): finish the step, save a checkpoint, export the
  weights, exit 0. SageMaker sends SIGKILL 120 s after SIGTERM; the entry
  point gives torchrun 110 s before it kills the workers.
* ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``: instances are
  reclaimed from 30 minutes before the capacity block ends; the loop stops
  (checkpoint, export, exit 0) once ``now + margin`` reaches that time, with
  ``margin = 300 s + 2 x (last checkpoint save time + last step time)``.
* The decision is all-reduced (MAX) across ranks every step, so every rank
  stops after the same step even when signals arrive at different times.

On failure: a one-line reason in ``<base>/output/failure`` (first writer
wins; a CUDA OOM names the setting to change) and exit status 1.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from training import precision as prec
from training.checkpoint import CheckpointManager, export_model
from training.data import DataError, DistributedSampler, SyntheticSampler, TokenDataset, resolve_vocab_size
from training.environment import (
    ConfigError,
    SageMakerPaths,
    capacity_block_deadline,
    write_failure,
)
from training.hyperparameters import SPECS, Hyperparameters, HyperparameterError, parse
from training.metrics import DeviceInfo, MetricsLogger
from training.model import GPT, build_model, transformer_engine_available
from training.parallelize import build_mesh, materialize, parallelize
from training.presets import get_preset

STOP_MARGIN_S = 300.0
"""Fixed part of the safety margin before the capacity-block deadline."""


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


class StopController:
    """Collective stop decision: signal received, or the capacity-block deadline is near."""

    REASONS = {1: "SIGTERM/SIGINT received", 2: "capacity block ends soon"}

    def __init__(self, deadline: float | None, group: Any, world_size: int) -> None:
        self.deadline = deadline
        self.group = group
        self.world_size = world_size
        self.signal_received: int | None = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.signal_received = signum

    def margin(self, step_seconds: float, save_seconds: float) -> float:
        return STOP_MARGIN_S + 2.0 * (step_seconds + save_seconds)

    def check(self, *, step_seconds: float = 0.0, save_seconds: float = 0.0) -> str | None:
        code = 1 if self.signal_received is not None else 0
        if code == 0 and self.deadline is not None:
            if time.time() + self.margin(step_seconds, save_seconds) >= self.deadline:
                code = 2
        if self.world_size > 1:
            flag = torch.tensor([code], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
            code = int(flag.item())
        return self.REASONS.get(code)


# ---------------------------------------------------------------------------
# Failure reasons


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def oom_reason(hp: Hyperparameters, device: torch.device, rank: int, step: int) -> str:
    """A one-line CUDA OOM reason naming the setting to change."""
    where = ""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory / 1e9
        where = f" ({torch.cuda.get_device_name(device)}, {total:.0f} GB)"
    advice = []
    if hp.activation_checkpointing == "off":
        advice.append("set activation_checkpointing=full")
    advice.append(f"lower batch_size (now {hp.batch_size}; raise gradient_accumulation_steps to keep the global batch)")
    advice.append(f"lower seq_length (now {hp.seq_length})")
    if not hp.reshard_after_forward:
        advice.append("set reshard_after_forward=true")
    advice.append("or use more GPUs (instance_count)")
    return (
        f"CUDA out of memory on rank {rank}{where} at step {step} with model={hp.model}, precision={hp.precision}, "
        f"batch_size={hp.batch_size}, seq_length={hp.seq_length}, activation_checkpointing={hp.activation_checkpointing}: "
        + "; ".join(advice)
    )


# ---------------------------------------------------------------------------
# Distributed setup


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> tuple[int, int, int, int, torch.device]:
    """(rank, world_size, local_rank, local_world_size, device); initialises the default group.

    CUDA (NCCL) when a GPU is visible, else CPU (gloo). Without torchrun's
    variables: a single-process group on a free local port.
    """
    if "RANK" not in os.environ:
        os.environ.update(
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        )
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(minutes=30))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    return rank, world, local_rank, local_world, device


# ---------------------------------------------------------------------------
# The trainer


class Trainer:
    """Builds everything from the hyperparameters and runs the loop (see the module docstring)."""

    def __init__(self, hp: Hyperparameters, paths: SageMakerPaths, environ: dict[str, str] | None = None) -> None:
        self.hp = hp
        self.paths = paths
        self.environ = dict(os.environ if environ is None else environ)
        self.step = 0
        self.rank = 0
        self.device = torch.device("cpu")

    def log(self, message: str) -> None:
        if self.rank == 0:
            print(f"[trainer] {message}", flush=True)

    # -- setup -----------------------------------------------------------------
    def setup(self) -> None:
        hp = self.hp
        self.rank, self.world_size, self.local_rank, self.local_world_size, self.device = init_distributed()
        device = self.device
        cuda = device.type == "cuda"
        self.control_group = dist.new_group(backend="gloo") if cuda else dist.group.WORLD
        self.stopper = StopController(capacity_block_deadline(self.environ), self.control_group, self.world_size)
        self.stopper.install()

        self.backend = "te" if cuda and transformer_engine_available() else "torch"
        # The GPU / precision check, before anything is built or any step runs.
        prec.check_supported(
            hp.precision, device, te_available=self.backend == "te", seq_length=hp.seq_length, batch_size=hp.batch_size
        )
        if hp.quantized_model_init and self.backend != "te":
            raise prec.PrecisionError("quantized_model_init", True, "false unless TransformerEngine runs the model")
        self.plan = prec.plan(hp.precision)
        self.recipe = prec.te_recipe(hp.precision, hp.fp8_scaling) if self.plan.uses_te_recipe else None
        if cuda and hp.precision == "fp32":
            torch.backends.cuda.matmul.allow_tf32 = True  # fp32 peak convention of planner.catalogue: TF32
            torch.backends.cudnn.allow_tf32 = True
        if not cuda and "OMP_NUM_THREADS" not in self.environ:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.local_world_size))

        # Identical seeds on every rank: the same initial model everywhere.
        random.seed(hp.seed)
        np.random.seed(hp.seed)
        torch.manual_seed(hp.seed)

        # Data.
        preset = get_preset(hp.model)
        if hp.synthetic_data:
            self.dataset = None
            vocab = resolve_vocab_size(hp, preset.vocab_size, None)
            self.sampler: DistributedSampler | SyntheticSampler = SyntheticSampler(
                vocab_size=vocab, seq_length=hp.seq_length, batch_size=hp.batch_size,
                grad_accum=hp.gradient_accumulation_steps, rank=self.rank, world_size=self.world_size, seed=hp.seed,
            )
        else:
            self.dataset = TokenDataset(self.paths.train_dir)
            vocab = resolve_vocab_size(hp, preset.vocab_size, self.dataset.vocab_size)
            self.sampler = DistributedSampler(
                self.dataset, seq_length=hp.seq_length, batch_size=hp.batch_size,
                grad_accum=hp.gradient_accumulation_steps, rank=self.rank, world_size=self.world_size, seed=hp.seed,
            )
        self.config = preset.with_overrides(num_layers=hp.num_layers, vocab_size=vocab)

        # Model: built for one device, then parallelised in one place.
        init_device = "meta" if cuda else "cpu"
        te_dtype = torch.bfloat16 if hp.quantized_model_init else torch.float32
        with prec.quantized_model_init(hp.quantized_model_init, self.recipe):
            model = build_model(self.config, backend=self.backend, device=init_device, te_params_dtype=te_dtype)
        mesh = build_mesh(device.type, self.world_size, self.local_world_size, hp.sharding_strategy)
        self.model: GPT = parallelize(
            model, mesh=mesh, precision=self.plan, activation_checkpointing=hp.activation_checkpointing,
            reshard_after_forward=hp.reshard_after_forward, quantized_blocks=hp.quantized_model_init,
        )
        if init_device == "meta":
            materialize(self.model, device)

        # Optimizer and schedule.
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        betas = (hp.adam_beta1, hp.adam_beta2)
        if hp.quantized_model_init:
            import transformer_engine.pytorch as te

            self.optimizer = te.optimizers.FusedAdam(
                groups, lr=hp.learning_rate, betas=betas, eps=hp.adam_epsilon, adam_w_mode=True,
                master_weights=True, master_weight_dtype=torch.float32,
            )
        else:
            # foreach (multi-tensor) AdamW: supported on DTensor shards on CPU and CUDA alike.
            self.optimizer = torch.optim.AdamW(groups, lr=hp.learning_rate, betas=betas, eps=hp.adam_epsilon, foreach=True)
        peak = hp.learning_rate
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda e: learning_rate(e + 1, hp) / peak if peak > 0 else 0.0
        )
        self.scaler = prec.DynamicLossScaler() if self.plan.loss_scaling else None

        # Checkpoints and metrics.
        self.checkpoints = CheckpointManager(
            self.paths.checkpoint_dir, keep=hp.keep_checkpoints, rank=self.rank, local_rank=self.local_rank,
            world_size=self.world_size, process_group=self.control_group,
        )
        removed = self.checkpoints.remove_incomplete()
        if removed:
            self.log(f"removed incomplete checkpoints of steps {removed}")
        self.tokens_per_step = hp.batch_size * hp.seq_length * hp.gradient_accumulation_steps * self.world_size
        from planner.flops import flops_per_token

        self.metrics = MetricsLogger(
            tokens_per_step=self.tokens_per_step, world_size=self.world_size,
            flops_per_token=flops_per_token(self.config, hp.seq_length), device=device,
            info=DeviceInfo.detect(device, hp.precision), rank=self.rank, metrics_file=self.paths.metrics_file,
        )
        self.log(
            f"model={self.config.name} layers={self.config.num_layers} hidden={self.config.hidden_size} "
            f"heads={self.config.num_attention_heads} ffn={self.config.ffn_hidden_size} vocab={self.config.vocab_size} "
            f"params={self.model.num_parameters():,} backend={self.backend} device={device.type} "
            f"({self.metrics.info.name}) world_size={self.world_size} precision={hp.precision} "
            f"sharding={hp.sharding_strategy} activation_checkpointing={hp.activation_checkpointing}"
        )
        data = "synthetic tokens" if self.dataset is None else str(self.dataset.describe())
        self.log(f"data: {data}; tokens per step {self.tokens_per_step:,}")

    def trainer_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "data": {"step": self.step, "samples_consumed": self.step * self.sampler.samples_per_step},
            "scheduler": self.scheduler.state_dict(),
            "loss_scaler": self.scaler.state_dict() if self.scaler else None,
            "world_size": self.world_size,
            "model_config": asdict(self.config),
            "hyperparameters": self.hp.to_strings(),
        }

    def resume(self) -> None:
        state = self.checkpoints.load_latest(self.model, self.optimizer)
        if state is None:
            self.log("no complete checkpoint: starting from step 0")
            return
        self.step = int(state["step"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler and state.get("loss_scaler"):
            self.scaler.load_state_dict(state["loss_scaler"])
        self.log(f"resumed from {self.checkpoints.step_dir(self.step)} (step {self.step}; rng restored: {state['restored_rng']})")

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

    def train_step(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        hp = self.hp
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        accum = hp.gradient_accumulation_steps
        group = dist.group.WORLD if hp.fp8_scaling == "delayed" else None
        for micro in range(accum):
            self.model.set_requires_gradient_sync(micro == accum - 1)
            inputs, targets = self._batch(micro)
            with prec.autocast(hp.precision, self.recipe, amax_reduction_group=group):
                loss = self.model(inputs, targets)
            scaled = loss / accum
            if self.scaler is not None:
                scaled = self.scaler.scale_loss(scaled)
            scaled.backward()
            loss_sum += loss.detach()
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.scaler is not None:
            self.scaler.unscale_(params)
        grad_norm = self._grad_norm(params)
        if self.scaler is None or self.scaler.update(float(grad_norm)):
            self.optimizer.step()
        self.scheduler.step()
        return loss_sum / accum, grad_norm, lr

    def save(self, reason: str) -> None:
        t0 = time.monotonic()
        path = self.checkpoints.save(self.step, self.model, self.optimizer, self.trainer_state())
        seconds = time.monotonic() - t0
        self.metrics.exclude(seconds)
        self.log(f"checkpoint {path} ({reason}, {seconds:.1f} s)")

    def export(self) -> None:
        t0 = time.monotonic()
        extra = {
            "step": self.step,
            "precision": self.hp.precision,
            "tokenizer": None if self.dataset is None else self.dataset.tokenizer,
            "eod_token_id": None if self.dataset is None else self.dataset.eod_token_id,
        }
        path = export_model(
            self.model, self.paths.model_dir, config=self.config, dtype=self.plan.param_dtype, rank=self.rank, extra=extra
        )
        if path is not None:
            self.log(f"final weights {path} ({time.monotonic() - t0:.1f} s)")

    def run(self) -> int:
        hp = self.hp
        self.setup()
        self.resume()
        reason = self.stopper.check(save_seconds=self.checkpoints.last_save_seconds)
        if reason is not None:
            self.log(f"stopping before step {self.step + 1}: {reason}")
            return 0
        last_saved = first_step = self.step
        step_seconds = 0.0
        self.metrics.start()
        while self.step < hp.max_steps:
            t0 = time.monotonic()
            loss, grad_norm, lr = self.train_step()
            self.step += 1
            self.metrics.step_done()
            # every log_interval steps, plus the first step of a run (start of the curve) and the last
            if self.step % hp.log_interval == 0 or self.step in (first_step + 1, hp.max_steps):
                loss_value = loss.detach().clone()
                if self.world_size > 1:
                    dist.all_reduce(loss_value, op=dist.ReduceOp.SUM)  # gloo has no AVG
                    loss_value /= self.world_size
                values = self.metrics.values(step=self.step, loss=float(loss_value), lr=lr, grad_norm=float(grad_norm))
                self.metrics.log(values)
            step_seconds = time.monotonic() - t0
            reason = self.stopper.check(step_seconds=step_seconds, save_seconds=self.checkpoints.last_save_seconds)
            if reason is not None:
                self.save(reason)
                self.export()
                self.log(f"stopped after step {self.step}: {reason}; resume continues from this checkpoint")
                return 0
            if self.step % hp.checkpoint_interval == 0 and self.step < hp.max_steps:
                self.save("interval")
                last_saved = self.step
        if last_saved != self.step:
            self.save("end of training")
        self.export()
        self.log(f"training finished at step {self.step}")
        return 0


# ---------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.train", description="FSDP2 + TransformerEngine trainer (one rank).")
    parser.add_argument("--base-dir", default=None, help="SageMaker base directory (default: $SAGEMAKER_BASE_DIR or /opt/ml)")
    for name, spec in SPECS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None, help=spec.help)
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[Hyperparameters, SageMakerPaths]:
    args = build_parser().parse_args(argv)
    raw = {name: getattr(args, name) for name in SPECS if getattr(args, name) is not None}
    paths = SageMakerPaths(Path(args.base_dir)) if args.base_dir else SageMakerPaths.from_environment()
    return parse(raw), paths


def main(argv: Sequence[str] | None = None) -> int:
    paths = SageMakerPaths.from_environment()
    trainer: Trainer | None = None
    try:
        hp, paths = parse_args(argv)
        trainer = Trainer(hp, paths)
        status = trainer.run()
    except BaseException as exc:  # noqa: BLE001 - every failure must leave a reason
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        rank = trainer.rank if trainer else int(os.environ.get("RANK", "0"))
        step = trainer.step + 1 if trainer else 0
        if isinstance(exc, (HyperparameterError, DataError, ConfigError)):
            reason = str(exc)
        elif trainer is not None and is_oom(exc):
            reason = oom_reason(trainer.hp, trainer.device, rank, step)
        else:
            reason = f"{type(exc).__name__} on rank {rank} at step {step}: {exc}"
        write_failure(paths, reason)
        traceback.print_exc()
        print(f"[trainer] FAILED: {reason}", file=sys.stderr, flush=True)
        return 1
    finally:
        # Free the model, optimizer and FSDP state now: they hold collective work objects whose
        # destruction during interpreter shutdown (after the process group is gone) can abort the
        # process ("terminate called without an active exception") after a successful run.
        trainer = None
        gc.collect()
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
    return status


if __name__ == "__main__":
    sys.exit(main())
