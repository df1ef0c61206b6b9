"""Checkpoints with torch.distributed.checkpoint (DCP), and the final model export.

Layout of ``<checkpoint_dir>`` (``/opt/ml/checkpoints``, synced to S3 by SageMaker)::

    step-120/
        .metadata, __0_0.distcp, ...   DCP: model + optimizer (sharded DTensors, fp32)
        trainer_state.json              step, data position, LR scheduler, loss scaler, run record
        rng/rank-00000.pt               per-rank RNG states (python, numpy, torch, cuda)
        .complete                       written last: the checkpoint is whole

Write protocol: every rank writes its files into ``step-N/``, a barrier
waits for all ranks (DCP's ``.metadata`` is written by rank 0 after the
others finished), then each node's local rank 0 writes ``.complete``. A
folder without ``.complete`` (a run killed while saving) is never loaded and
is deleted once a run has resumed. A marker rather than a rename because on
SageMaker each node has its own ``/opt/ml/checkpoints`` that is synced to the
same S3 prefix: every node marks its own copy complete, and nothing is
uploaded twice.

Names: a checkpoint is a real folder named ``step-<step>``, the step in ASCII
digits without leading zeros (:func:`step_dirs`), because that is the only
name this trainer writes. Anything else in the checkpoint folder
(``step-006``, ``step-3`` spelled in Arabic-Indic digits, a symbolic link or a
file named ``step-6``) is not a checkpoint: it is never loaded, followed,
pruned or deleted, and the resume log names it (:func:`foreign_entries`). A link or file in the way of a
save of that step is moved aside (renamed ``step-6.moved-aside-<UTC time>``,
nothing it points to touched) so the run keeps making progress.

Choosing a checkpoint to resume (:meth:`CheckpointManager.load_latest`)
------------------------------------------------------------------------
The marker is not proof that a checkpoint can be loaded: SageMaker uploads
``/opt/ml/checkpoints`` to S3 in the background and downloads whatever is
there on restart, so a small ``.complete`` can arrive while a large shard is
still partial, and on several nodes each node's marker says nothing about the
other nodes' files (on a restart every instance gets the whole S3 prefix:
"the checkpoints from this S3 bucket are restored to checkpoint_local_path in
each instance of the new training job",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints-resume.html,
so each node can check every file). So the complete checkpoints are tried
newest first, and one is resumed only when, on every rank:

1. it **verifies** (:func:`verify_checkpoint`): ``trainer_state.json`` parses,
   names the folder's step, and every field the resume uses has its type and
   range (:func:`trainer_state_problems`: data position, LR scheduler, loss
   scaler, run record); DCP's ``.metadata`` parses (read by DCP's own
   ``FileSystemReader.read_metadata``); every file its ``storage_data``
   references (``_StorageInfo(relative_path, offset, length)``) exists with at
   least ``offset + length`` bytes; and the RNG file of every rank of the
   saving run exists (a missing one is an incomplete copy, like a missing
   shard, whatever the world size of the run resuming it; a rank the saving
   run did not have starts from the run's seed and the log says so);
2. it belongs to **this run** (:func:`compare_runs` on the run record, and
   :func:`model_mismatch` on DCP's tensor metadata against the model being
   built): a checkpoint of another run is refused (:class:`ResumeRefused`),
   with nothing loaded, pruned or overwritten;
3. it **loads**: ``dcp.load`` (TransformerEngine's ``_extra_state`` placeholders
   sized as saved first, :func:`size_extra_state`, so fp8/mxfp8/nvfp4 runs
   resume with their scaling state) + ``set_state_dict`` + this rank's RNG
   state + the caller's ``restore`` of the rest of ``trainer_state.json``
   (the trainer's LR scheduler, loss scaler and data position): a failure of
   any of them is a failure to load.

Every decision is collective: each rank's outcome is all-gathered over the
checkpoint process group, so all ranks skip, refuse or resume together (a
load that fails on one rank makes all ranks fall back; DCP itself raises a
load failure on every rank). A checkpoint that fails 1 or 3 is skipped with a
log line naming it and why, and the next older one is tried; when every
complete checkpoint fails, :class:`CheckpointError` names each folder and
what is wrong with it (the trainer's failure reason).

Pruning (:meth:`CheckpointManager.prune`, after each save of step ``s``)
keeps the newest ``keep`` loadable checkpoints at or below ``s`` (the one
just written is one of them) and deletes only complete checkpoints older
than the oldest of those. Checkpoints that failed at resume never count
toward ``keep``, and nothing newer than ``s`` is ever deleted, so pruning
never leaves a run with nothing loadable. Pruning reports only the folders it
really removed.

What a restart will resume (:func:`restart_point`): the newest complete
checkpoint that verifies; the entry point and ``trainctl train`` name it after
a run stops.

Run record
----------
``trainer_state.json["run"]`` (:func:`run_record`) records what defines the
run: model shape and vocabulary, the model's backend (parameter names differ
between TransformerEngine and torch-native blocks), every hyperparameter
(precision recipe, micro-batch layout, sequence length, seed...), world size,
samples per optimizer step, and the training data's fingerprint. On resume
(:func:`compare_runs`):

===================================  ====================================================
what changed                         resume
===================================  ====================================================
model shape or vocabulary, backend,  refused, both values named (the state would not fit
``quantized_model_init``             or would load partially)
global batch (samples per step)      refused: the LR schedule, warmup and ``max_steps``
                                     count optimizer steps, so the run cannot continue
                                     as it was; the message says how to keep it
training data (fingerprint),         refused unless ``allow_data_change=true``; then the
``seq_length``, ``seed``,            data position carries over as a sample count
``synthetic_data``
world size, micro-batch layout       allowed, logged: DCP reshards model and optimizer,
(same global batch)                  and the data continues at the same sample number
precision, ``fp8_scaling``           allowed, logged: every recipe keeps fp32 master
                                     weights and AdamW state
anything else (LR, ``max_steps``,    allowed, logged
intervals, sharding...)
===================================  ====================================================

Checkpoints written before the record existed (``trainer_state.json``
without ``"run"``) resume with a warning: their model shape, hyperparameters
and world size are read from the older top-level fields and checked the same
way, the data cannot be checked, and DCP's tensor metadata still guards the
model shape.

Final weights: :func:`export_model` gathers the full state dict to rank 0
and writes consolidated safetensors + ``config.json``
(:func:`training.model.save_pretrained`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from platform_spec.checkpoint_layout import COMPLETE_MARKER, STEP_PREFIX, TRAINER_STATE, checkpoint_step
from platform_spec.files import atomic_write_text
from platform_spec.hyperparameters import SHAPE_HYPERPARAMETERS

RUN_RECORD_VERSION = 1
MODEL_PREFIX = "model."
"""Prefix of the model's tensors in the DCP state dict (``{"model": ..., "optimizer": ...}``)."""
MOVED_ASIDE = ".moved-aside-"
"""Infix of the new name of a link or file that was in the way of a save (``step-6.moved-aside-20261130T165500Z``)."""
DATA_STREAM_HYPERPARAMETERS = ("seq_length", "seed", "synthetic_data")
"""Hyperparameters that decide which tokens sample number ``g`` is (with the data fingerprint)."""
REFUSED_HYPERPARAMETERS = ("quantized_model_init",)
"""Hyperparameters whose change changes the checkpoint's state-dict layout (TE quantized weights + FusedAdam)."""
_COMPARED_ELSEWHERE = (
    "model",
    "model_family",
    *SHAPE_HYPERPARAMETERS,  # the model record's shape fields are compared (refused when they differ)
    "batch_size",
    "gradient_accumulation_steps",
    "allow_data_change",
    *DATA_STREAM_HYPERPARAMETERS,
    *REFUSED_HYPERPARAMETERS,
)


def model_shape_fields(*models: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields that define the model's tensors in run records' ``model`` (a model family's shape
    dataclass as a dict, :class:`platform_spec.models.ModelShape`): every field but ``name``, in order,
    over all of ``models`` (a field one record lacks differs)."""
    return tuple(dict.fromkeys(k for model in models for k in model if k != "name"))


class CheckpointError(RuntimeError):
    """No checkpoint can be resumed; the message names each folder and what is wrong with it."""


class ResumeRefused(CheckpointError):
    """The newest loadable checkpoint belongs to another run; names what differs, with both values."""


def step_dirs(directory: Path) -> dict[int, Path]:
    """``{step: folder}`` of every checkpoint folder (complete or not), as found.

    A checkpoint folder is a real directory (not a symbolic link) with a
    checkpoint name (:func:`checkpoint_step`); everything else is left alone
    (:func:`foreign_entries`).
    """
    out: dict[int, Path] = {}
    if directory.is_dir():
        for child in directory.iterdir():
            step = checkpoint_step(child.name)
            if step is not None and child.is_dir() and not child.is_symlink():
                out[step] = child
    return out


def foreign_entries(directory: Path) -> dict[str, str]:
    """``{name: what it is}`` of the entries named ``step-...`` that are not checkpoint folders.

    They are never loaded, followed, pruned or deleted; the resume log names them.
    """
    out: dict[str, str] = {}
    if not directory.is_dir():
        return out
    for child in sorted(directory.iterdir()):
        if not child.name.startswith(STEP_PREFIX):
            continue
        if checkpoint_step(child.name) is None:
            if MOVED_ASIDE not in child.name:
                out[child.name] = (
                    "not a checkpoint name (this trainer writes step-<step>, ASCII digits, no leading zeros)"
                )
        elif child.is_symlink():
            out[child.name] = f"a symbolic link (to {os.readlink(child)}), not a checkpoint folder this trainer wrote"
        elif not child.is_dir():
            out[child.name] = "a file, not a checkpoint folder"
    return out


def is_complete(path: Path) -> bool:
    """A checkpoint folder is complete when its marker exists.

    The marker is written after a barrier that follows every rank's writes,
    so it implies the DCP files, ``trainer_state.json`` and the RNG files were
    written (on this node). It does not prove they all arrived after a
    restart: :func:`verify_checkpoint` checks that.
    """
    return (path / COMPLETE_MARKER).is_file()


def complete_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints, ascending."""
    return sorted(step for step, path in step_dirs(directory).items() if is_complete(path))


# ---------------------------------------------------------------------------
# Verification


@dataclass
class Verification:
    """What :func:`verify_checkpoint` found.

    Attributes:
        problems: one sentence per problem (empty: the checkpoint verified).
        metadata: DCP's ``Metadata`` when ``.metadata`` parsed.
        trainer_state: ``trainer_state.json`` when it parsed.
    """

    problems: list[str] = field(default_factory=list)
    metadata: Metadata | None = None
    trainer_state: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _is_shape_value(value: Any) -> bool:
    """A model shape field's value: an integer (sizes), a finite number (a RoPE base, a norm epsilon) or a
    boolean (tied embeddings)."""
    return isinstance(value, bool) or _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true/false is not a count


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def trainer_state_problems(state: Any, step: int | None = None) -> list[str]:
    """Type and range problems of a ``trainer_state.json`` (empty: every field a resume uses is usable).

    Fields (all but ``step`` optional, each checked when present; the trainer
    always writes them)::

        step          int >= 0, the folder's step
        data          {"step": int == step, "samples_consumed": int >= 0}
        scheduler     the LR scheduler's state_dict: an object; last_epoch int >= 0,
                      base_lrs and _last_lr lists of finite numbers
        loss_scaler   null or {"scale": finite number > 0, "good_steps": int >= 0}
        run           the run record (:func:`run_record`): an object; version int,
                      model object or null, backend string or null, world_size and
                      samples_per_step int >= 1, hyperparameters {str: str}, data object or null;
                      with samples_per_step, data.samples_consumed must be step x samples_per_step
                      (a change of the global batch is always refused, so it never changes)
        world_size, model_config, hyperparameters   the older top-level fields of the run record

    Returns:
        One sentence per problem, naming the field, the value found and what was expected.
    """
    if not isinstance(state, dict):
        return [f"{TRAINER_STATE} holds {type(state).__name__}, expected an object"]
    problems: list[str] = []

    def bad(field_name: str, value: Any, expected: str) -> None:
        problems.append(f"{TRAINER_STATE} field {field_name!r}: got {_shown(value)}, expected {expected}")

    saved_step = state.get("step")
    if not _is_int(saved_step) or saved_step < 0:
        return [
            f"{TRAINER_STATE} has no integer 'step'" + ("" if "step" not in state else f" (got {_shown(saved_step)})")
        ]
    if step is not None and saved_step != step:
        return [f"{TRAINER_STATE} says step {saved_step}, the folder is step-{step}"]

    data = state.get("data")
    samples = None
    if "data" in state:
        if not isinstance(data, dict):
            bad("data", data, "an object (the data position)")
        else:
            if "step" in data and data["step"] != saved_step:
                bad("data.step", data["step"], f"{saved_step} (the checkpoint's step)")
            if "samples_consumed" in data:
                samples = data["samples_consumed"]
                if not _is_int(samples) or samples < 0:
                    bad("data.samples_consumed", samples, "an integer >= 0 (samples the run read before this step)")
                    samples = None

    if "scheduler" in state:
        scheduler = state["scheduler"]
        if not isinstance(scheduler, dict):
            bad("scheduler", scheduler, "an object (the LR scheduler's state_dict)")
        else:
            if "last_epoch" in scheduler and (not _is_int(scheduler["last_epoch"]) or scheduler["last_epoch"] < 0):
                bad("scheduler.last_epoch", scheduler["last_epoch"], "an integer >= 0")
            for name in ("base_lrs", "_last_lr"):
                if name in scheduler and not (
                    isinstance(scheduler[name], list) and all(_is_number(v) for v in scheduler[name])
                ):
                    bad(f"scheduler.{name}", scheduler[name], "a list of finite numbers (one per parameter group)")

    scaler = state.get("loss_scaler")
    if scaler is not None:
        if not isinstance(scaler, dict):
            bad("loss_scaler", scaler, "null or an object (the fp16 loss scaler's state)")
        else:
            if not (_is_number(scaler.get("scale")) and scaler["scale"] > 0):
                bad("loss_scaler.scale", scaler.get("scale"), "a finite number > 0")
            if not (_is_int(scaler.get("good_steps")) and scaler["good_steps"] >= 0):
                bad("loss_scaler.good_steps", scaler.get("good_steps"), "an integer >= 0")

    if "run" in state:
        record = state["run"]
        if not isinstance(record, dict):
            bad("run", record, "an object (the run record)")
        else:
            problems.extend(_record_problems(record, "run.", samples, saved_step))
    else:  # older checkpoints: the record's fields at the top level
        problems.extend(
            _record_problems(
                {
                    "world_size": state.get("world_size"),
                    "model": state.get("model_config"),
                    "hyperparameters": state.get("hyperparameters"),
                },
                "",
                None,
                saved_step,
                names={"model": "model_config"},
            )
        )
    return problems


def _record_problems(
    record: Mapping[str, Any], prefix: str, samples: int | None, step: int, names: Mapping[str, str] | None = None
) -> list[str]:
    """Problems of a run record's fields (``None`` values pass: unknown, as in older checkpoints)."""
    problems: list[str] = []
    names = names or {}

    def bad(name: str, expected: str) -> None:
        shown = f"{prefix}{names.get(name, name)}"
        problems.append(f"{TRAINER_STATE} field {shown!r}: got {_shown(record[name])}, expected {expected}")

    for name in ("world_size", "samples_per_step"):
        value = record.get(name)
        if value is not None and (not _is_int(value) or value < 1):
            bad(name, "an integer >= 1")
    if record.get("version") is not None and not _is_int(record["version"]):
        bad("version", "an integer")
    if record.get("backend") is not None and not isinstance(record["backend"], str):
        bad("backend", "a string ('te' or 'torch')")
    model = record.get("model")
    if model is not None:
        if not isinstance(model, dict):
            bad("model", "an object (the model's configuration)")
        elif any(not _is_shape_value(model[name]) for name in model_shape_fields(model)):
            bad("model", "integers, finite numbers or booleans for every field but 'name' (the model family's shape)")
    hp = record.get("hyperparameters")
    if hp is not None and not (
        isinstance(hp, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in hp.items())
    ):
        bad("hyperparameters", "an object of strings (Hyperparameters.to_strings())")
    if record.get("data") is not None and not isinstance(record["data"], dict):
        bad("data", "an object (the data fingerprint) or null")
    spb = record.get("samples_per_step")
    if samples is not None and _is_int(spb) and spb >= 1 and samples != step * spb:
        problems.append(
            f"{TRAINER_STATE} field 'data.samples_consumed': got {samples}, expected {step * spb} "
            f"(step {step} x {spb} samples per step; the global batch never changes within a run)"
        )
    return problems


def _saved_world_size(path: Path, state: Mapping[str, Any] | None) -> int | None:
    """Processes of the run that wrote ``path``: its ``.complete`` marker (written by the manager that
    wrote the RNG files), else its run record; None when unknown."""
    try:
        marker = json.loads((path / COMPLETE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        marker = None
    world = marker.get("world_size") if isinstance(marker, dict) else None
    if _is_int(world) and world >= 1:
        return world
    world = saved_run(state)[0].get("world_size") if state is not None else None
    return world if _is_int(world) and world >= 1 else None


def rng_file(rank: int) -> str:
    """The RNG state file of global rank ``rank``, relative to the checkpoint folder."""
    return f"rng/rank-{rank:05d}.pt"


def verify_checkpoint(path: Path, step: int | None = None) -> Verification:
    """Check that ``path`` holds every byte a DCP load of it will read, and a usable trainer state.

    Reads ``.complete``, ``trainer_state.json`` (every field the resume uses,
    :func:`trainer_state_problems`; its ``step`` is ``step`` when given) and
    DCP's ``.metadata`` with DCP's own ``FileSystemReader.read_metadata``;
    every file named by ``metadata.storage_data``
    (``_StorageInfo(relative_path, offset, length)``) must exist with at least
    ``max(offset + length)`` bytes, and the RNG file of every rank of the
    saving run (its world size: the marker, else the run record) must exist.
    Cost: one stat per file and the unpickling of ``.metadata``; no tensor data is read.

    Returns:
        A :class:`Verification`; ``problems`` name the file and what is wrong.
    """
    result = Verification()
    if not is_complete(path):
        result.problems.append(f"no {COMPLETE_MARKER} marker (the save did not finish)")
    state_file = path / TRAINER_STATE
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        result.problems.append(f"{TRAINER_STATE} is missing")
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        result.problems.append(f"{TRAINER_STATE} is not readable JSON ({_first_line(exc)})")
    else:
        state_problems = trainer_state_problems(state, step)
        if state_problems:
            result.problems.extend(state_problems)
        else:
            result.trainer_state = state
            world = _saved_world_size(path, state)
            missing = [rng_file(r) for r in range(world or 0) if not (path / rng_file(r)).is_file()]
            if missing:
                shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                result.problems.append(
                    f"{shown} {'is' if len(missing) == 1 else 'are'} missing (the saving run had {_processes(world)})"
                )

    metadata_file = path / ".metadata"
    if not metadata_file.is_file():
        result.problems.append(
            "DCP .metadata is missing (written by global rank 0 last; on several nodes, node 0's copy)"
        )
        return result
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:
        result.problems.append(
            f"DCP .metadata ({metadata_file.stat().st_size} bytes) does not parse: {_first_line(exc)}"
        )
        return result
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(metadata, Metadata) or not isinstance(storage, dict):
        result.problems.append("DCP .metadata holds no storage_data (not written by FileSystemWriter)")
        return result
    needed: dict[str, int] = {}
    for info in storage.values():
        if not isinstance(info, _StorageInfo):
            result.problems.append(f"DCP .metadata storage_data holds {type(info).__name__}, not _StorageInfo")
            return result
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    short = []
    for name, size in sorted(needed.items()):
        try:
            have = (path / name).stat().st_size
        except FileNotFoundError:
            short.append(f"{name} is missing (needs {size} bytes)")
            continue
        if have < size:
            short.append(f"{name} has {have} of the {size} bytes .metadata needs (cut short)")
    if short:
        shown = short[:3] + ([f"and {len(short) - 3} more files"] if len(short) > 3 else [])
        result.problems.append(", ".join(shown))
    result.metadata = metadata
    return result


@dataclass(frozen=True)
class RestartPoint:
    """What a restart on a checkpoint folder will resume (:func:`restart_point`).

    Attributes:
        step: the newest complete checkpoint that verifies; None when none does.
        skipped: ``{step: why}`` of the newer complete checkpoints that do not verify
            (a restart skips them with a log line).
    """

    step: int | None
    skipped: dict[int, str] = field(default_factory=dict)

    def describe(self, subject: str = "a restart") -> str:
        """The restart in words, e.g. ``a restart resumes from step-7 (newer ones do not verify and are
        skipped: step-9: ...)``; ``subject`` names who restarts (``the same command``)."""
        damaged = "; ".join(f"{STEP_PREFIX}{s}: {why}" for s, why in sorted(self.skipped.items(), reverse=True))
        if self.step is None:
            if not self.skipped:
                return f"no complete checkpoint yet: {subject} begins at step 0"
            return (
                f"no checkpoint verifies ({damaged}): {subject} fails until whole copies are restored or the "
                "damaged ones moved away"
            )
        if not self.skipped:
            return f"{subject} resumes from {STEP_PREFIX}{self.step}"
        return f"{subject} resumes from {STEP_PREFIX}{self.step} (newer ones do not verify and are skipped: {damaged})"


def restart_point(directory: Path) -> RestartPoint:
    """The checkpoint a restart will resume: the newest complete one that verifies (:func:`verify_checkpoint`).

    What :meth:`CheckpointManager.load_latest` tries first and can load, unless
    the restart belongs to another run (refused) or a load fails for a reason
    verification cannot see (then it falls back further, with a log line).
    """
    skipped: dict[int, str] = {}
    for step, path in sorted(step_dirs(directory).items(), reverse=True):
        if not is_complete(path):
            continue
        check = verify_checkpoint(path, step)
        if check.ok:
            return RestartPoint(step, skipped)
        skipped[step] = "; ".join(check.problems)
    return RestartPoint(None, skipped)


def model_mismatch(metadata: Metadata, model_shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """Compare the checkpoint's model tensors (DCP metadata) with the model being built.

    Args:
        metadata: the checkpoint's DCP metadata.
        model_shapes: ``{fqn: global shape}`` of the model's state dict
            (``get_model_state_dict``; DTensor shapes are global). TransformerEngine
            ``_extra_state`` entries are ignored (their size varies with fp8 state).

    Returns:
        None when the names and shapes agree, else a sentence with examples.
    """
    saved: dict[str, tuple[int, ...]] = {}
    for key, meta in metadata.state_dict_metadata.items():
        if (
            key.startswith(MODEL_PREFIX)
            and isinstance(meta, TensorStorageMetadata)
            and not key.endswith("_extra_state")
        ):
            saved[key[len(MODEL_PREFIX) :]] = tuple(meta.size)
    mine = {k: tuple(v) for k, v in model_shapes.items() if not k.endswith("_extra_state")}
    only_saved = sorted(set(saved) - set(mine))
    only_mine = sorted(set(mine) - set(saved))
    reshaped = sorted(k for k in set(saved) & set(mine) if saved[k] != mine[k])
    if not (only_saved or only_mine or reshaped):
        return None
    parts = []
    if only_saved:
        parts.append(f"{len(only_saved)} tensors only in the checkpoint (e.g. {only_saved[0]})")
    if only_mine:
        parts.append(f"{len(only_mine)} only in this model (e.g. {only_mine[0]})")
    if reshaped:
        k = reshaped[0]
        parts.append(
            f"{len(reshaped)} with another shape (e.g. {k}: {list(saved[k])} in the checkpoint, {list(mine[k])} here)"
        )
    return "model tensors differ: " + "; ".join(parts)


# ---------------------------------------------------------------------------
# Run record


def run_record(
    *,
    model_config: Mapping[str, Any],
    backend: str,
    world_size: int,
    samples_per_step: int,
    hyperparameters: Mapping[str, str],
    data: Mapping[str, Any],
) -> dict[str, Any]:
    """What defines a run, as saved in ``trainer_state.json["run"]``.

    Args:
        model_config: the model family's shape (:class:`platform_spec.models.ModelShape`) as a dict
            (the resolved shape; every field but ``name`` is an integer).
        backend: ``"te"`` or ``"torch"`` (their parameter names differ).
        world_size: processes of the job.
        samples_per_step: sequences per optimizer step, all ranks (the global batch).
        hyperparameters: ``Hyperparameters.to_strings()``.
        data: the dataset's fingerprint (:meth:`training.data.TokenDataset.fingerprint`)
            or ``{"synthetic": True, ...}``.
    """
    return {
        "version": RUN_RECORD_VERSION,
        "model": dict(model_config),
        "backend": backend,
        "world_size": int(world_size),
        "samples_per_step": int(samples_per_step),
        "hyperparameters": dict(hyperparameters),
        "data": dict(data),
    }


def saved_run(trainer_state: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The run record of a checkpoint, and whether it predates records (read from the older fields).

    Older checkpoints (no ``"run"``) kept ``model_config``, ``world_size`` and
    ``hyperparameters`` at the top level; their backend and data are unknown (None).
    """
    record = trainer_state.get("run")
    if isinstance(record, dict):
        return dict(record), False
    hp = trainer_state.get("hyperparameters")
    hp = dict(hp) if isinstance(hp, dict) else {}
    world = trainer_state.get("world_size")
    spb = None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        spb = int(hp["batch_size"]) * int(hp.get("gradient_accumulation_steps", "1")) * int(world)
    model = trainer_state.get("model_config")
    return {
        "version": 0,
        "model": dict(model) if isinstance(model, dict) else None,
        "backend": None,
        "world_size": world if isinstance(world, int) else None,
        "samples_per_step": spb,
        "hyperparameters": hp,
        "data": None,
    }, True


@dataclass
class RunComparison:
    """What :func:`compare_runs` decided: refusals (resume impossible) and notes (allowed changes)."""

    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_refused: bool = False


def _processes(count: Any) -> str:
    return f"{count} process" + ("" if count == 1 else "es")


def _layout(record: Mapping[str, Any]) -> str:
    hp = record.get("hyperparameters") or {}
    return (
        f"{_processes(record.get('world_size'))} x batch_size {hp.get('batch_size')} x "
        f"gradient_accumulation_steps {hp.get('gradient_accumulation_steps', '1')}"
    )


def _keep_global_batch(target: int, current: Mapping[str, Any]) -> str:
    """A change of this run's settings that gives ``target`` samples per step, as advice."""
    hp = current.get("hyperparameters") or {}
    world = int(current["world_size"])
    batch = int(hp.get("batch_size", "1"))
    accum = int(hp.get("gradient_accumulation_steps", "1"))
    options = []
    if target % (batch * world) == 0:
        options.append(f"gradient_accumulation_steps={target // (batch * world)}")
    if target % (accum * world) == 0:
        options.append(f"batch_size={target // (accum * world)}")
    if not options:
        return f"choose batch_size x gradient_accumulation_steps x processes = {target}"
    return f"with {_processes(world)} set " + " or ".join(options)


def compare_runs(
    trainer_state: Mapping[str, Any], current: Mapping[str, Any], *, allow_data_change: bool = False
) -> RunComparison:
    """Decide whether the run ``current`` (a :func:`run_record`) may resume a checkpoint.

    The policy per item is the table in the module docstring.

    Returns:
        :class:`RunComparison`: ``refusals`` (any: refuse) and ``notes`` (log lines).
    """
    saved, legacy = saved_run(trainer_state)
    out = RunComparison()
    if legacy:
        out.notes.append(
            "the checkpoint has no run record (written before records existed): model shape, hyperparameters and "
            "world size are checked from its older fields, its training data cannot be checked"
        )

    # Model shape and vocabulary: refuse.
    saved_model, model = saved.get("model"), current["model"]
    if isinstance(saved_model, dict):
        for name in model_shape_fields(model, saved_model):
            if saved_model.get(name) != model.get(name):
                out.refusals.append(
                    f"model {name}: {saved_model.get(name)} in the checkpoint, {model.get(name)} in this run"
                )
                out.model_refused = True
        if not out.model_refused and saved_model.get("name") != model.get("name"):
            out.notes.append(f"model preset {saved_model.get('name')} -> {model.get('name')} (same shape)")
    if saved.get("backend") is not None and saved["backend"] != current["backend"]:
        out.refusals.append(
            f"model backend: {saved['backend']!r} in the checkpoint, {current['backend']!r} in this run (TransformerEngine "
            "and torch-native blocks name their parameters differently); resume on the same kind of host"
        )
        out.model_refused = True

    old_hp: Mapping[str, str] = saved.get("hyperparameters") or {}
    new_hp: Mapping[str, str] = current.get("hyperparameters") or {}
    for name in REFUSED_HYPERPARAMETERS:
        if name in old_hp and old_hp.get(name) != new_hp.get(name):
            out.refusals.append(
                f"{name}: {old_hp.get(name)} in the checkpoint, {new_hp.get(name)} in this run "
                "(quantized weights and FusedAdam master weights are another state-dict layout)"
            )

    # Global batch: refuse. Layout with the same global batch: note.
    old_spb, new_spb = saved.get("samples_per_step"), current["samples_per_step"]
    if old_spb is not None and old_spb != new_spb:
        out.refusals.append(
            f"global batch: {old_spb} sequences per optimizer step in the checkpoint ({_layout(saved)}), {new_spb} in this "
            f"run ({_layout(current)}); warmup, the cosine schedule and max_steps count optimizer steps, so the run "
            f"cannot continue as it was: keep {old_spb} ({_keep_global_batch(old_spb, current)})"
        )
    elif _layout(saved) != _layout(current) and saved.get("world_size") is not None:
        out.notes.append(
            f"layout {_layout(saved)} -> {_layout(current)} (same global batch of {new_spb}: DCP reshards model and "
            "optimizer state, and the data continues at the next sample)"
        )

    # Data stream: refuse unless allowed.
    changes = [
        f"{n} {old_hp.get(n)} -> {new_hp.get(n)}"
        for n in DATA_STREAM_HYPERPARAMETERS
        if n in old_hp and old_hp.get(n) != new_hp.get(n)
    ]
    old_data, new_data = saved.get("data"), current.get("data") or {}
    if (
        isinstance(old_data, dict)
        and not old_data.get("synthetic")
        and not new_data.get("synthetic")  # a switch is synthetic_data's change
        and old_data.get("sha256") != new_data.get("sha256")
    ):
        changes.append(f"training data {_describe_data(old_data)} -> {_describe_data(new_data)}")
    if changes:
        if allow_data_change:
            out.notes.append(
                "data stream changed (allow_data_change=true): "
                + "; ".join(changes)
                + "; the position carries over as a sample count"
            )
        else:
            out.refusals.append(
                "data stream: " + "; ".join(changes) + "; the samples already trained on cannot be matched in the "
                "new stream. Restore the original data and settings, or set allow_data_change=true to continue "
                "on the new stream from the same sample count"
            )

    # Precision recipe and everything else: note.
    others = []
    for name in sorted(set(old_hp) | set(new_hp)):
        if name in _COMPARED_ELSEWHERE or old_hp.get(name) == new_hp.get(name):
            continue
        others.append(f"{name} {old_hp.get(name, '(unset)')} -> {new_hp.get(name, '(unset)')}")
    if others:
        out.notes.append(
            "hyperparameters changed: "
            + ", ".join(others)
            + (
                " (fp32 master weights and AdamW state carry over)"
                if any(o.startswith(("precision", "fp8_scaling")) for o in others)
                else ""
            )
        )
    return out


def _describe_data(data: Mapping[str, Any]) -> str:
    if data.get("synthetic"):
        return "(synthetic tokens)"
    sha = str(data.get("sha256", ""))[:12]
    return f"({data.get('shards')} shards, {data.get('num_tokens')} tokens, {data.get('tokenizer')}, fingerprint {sha})"


# ---------------------------------------------------------------------------
# RNG and small helpers


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """``Type: first sentence of the message`` (library messages go on for paragraphs)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > 80 and ". " in text:
        text = text.split(". ", 1)[0]
    line = f"{type(exc).__name__}: {text}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _load_error(exc: BaseException) -> str:
    """One line for a failed load; DCP's CheckpointException carries every failing rank's exception."""
    if isinstance(exc, CheckpointException):
        failures = exc.failures
        return "DCP load failed on rank(s) " + ", ".join(
            f"{rank} ({_first_line(pair[0])})" for rank, pair in sorted(failures.items())
        )
    return "loading failed: " + _first_line(exc)


@dataclass
class Resumed:
    """A resumed checkpoint.

    Attributes:
        step: optimizer steps done.
        path: the folder loaded.
        trainer_state: its ``trainer_state.json``.
        restored_rng: every rank restored its RNG state (false after a world-size change adds ranks).
        skipped: ``{step: why}`` of newer complete checkpoints that could not be loaded.
        notes: the allowed differences from the checkpoint's run (logged).
    """

    step: int
    path: Path
    trainer_state: dict[str, Any]
    restored_rng: bool
    skipped: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def samples_consumed(self) -> int | None:
        """Samples the run read before step ``step``: saved, else ``step x`` its samples per step, else None."""
        data = self.trainer_state.get("data")
        if isinstance(data, dict) and isinstance(data.get("samples_consumed"), int):
            return data["samples_consumed"]
        spb = saved_run(self.trainer_state)[0].get("samples_per_step")
        return self.step * spb if isinstance(spb, int) else None


# ---------------------------------------------------------------------------
# The manager


class CheckpointManager:
    """Save, prune and resume ``step-N`` DCP checkpoints (see the module docstring).

    Args:
        directory: the checkpoint root (created).
        keep: loadable checkpoints kept after each save (>= 1).
        rank, local_rank, world_size: this process's place in the job.
        process_group: group for DCP coordination, barriers and the collective
            resume decisions (a gloo group keeps these object collectives off
            NCCL); None: the default group.
        log: where the resume decisions go (called on every rank; the trainer
            prints on rank 0). Default: print on global rank 0.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int,
        rank: int,
        local_rank: int,
        world_size: int,
        process_group: Any = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.group = process_group
        self.last_save_seconds = 0.0
        self.unloadable: dict[int, str] = {}
        """``{step: why}``: complete checkpoints that failed verification or loading at resume."""
        self._log = log if log is not None else self._print
        if self.local_rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._barrier()

    # -- helpers -------------------------------------------------------------
    def _print(self, message: str) -> None:
        if self.rank == 0:
            print(f"[checkpoint] {message}", flush=True)

    def _distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def _barrier(self) -> None:
        if self._distributed():
            dist.barrier(group=self.group)

    def _gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (rank order), on every rank."""
        if not self._distributed():
            return [value]
        out: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(out, value, group=self.group)
        return out

    def _agree(self, problem: str | None) -> str | None:
        """All ranks' problems as one sentence (None when no rank has one); the same on every rank."""
        problems = self._gather(problem)
        by_message: dict[str, list[int]] = {}
        for rank, message in enumerate(problems):
            if message:
                by_message.setdefault(message, []).append(rank)
        if not by_message:
            return None
        if len(by_message) == 1 and len(next(iter(by_message.values()))) == len(problems):
            return next(iter(by_message))
        return "; ".join(
            f"on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {message}"
            for message, ranks in by_message.items()
        )

    def step_dir(self, step: int) -> Path:
        """The folder a save of ``step`` writes (the one checkpoint name, :func:`checkpoint_step`)."""
        return self.directory / f"{STEP_PREFIX}{step}"

    def _remove(self, path: Path) -> str | None:
        """Delete the checkpoint folder ``path`` (a real folder: never a link); None when it is gone, else why not."""
        if path.is_symlink() or not path.is_dir():
            return "not a checkpoint folder (left as it is)"
        errors: list[str] = []

        def note(_function: Any, failed: str, exc: BaseException) -> None:
            errors.append(f"{Path(failed).name}: {_first_line(exc)}")

        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=note)
        else:  # Python 3.11: onerror gets (type, value, traceback)
            shutil.rmtree(path, onerror=lambda function, failed, info: note(function, failed, info[1]))
        if os.path.lexists(path):
            return "could not be removed (" + "; ".join(errors[:2] or ["still there"]) + ")"
        return None

    def remove_incomplete(self) -> list[int]:
        """Delete checkpoint folders without the completion marker (leftovers of a killed save).

        Call it once the run has resumed (or found nothing to resume): a run
        that refuses to resume changes nothing on disk.

        Returns:
            The steps really removed (a folder that could not be removed is logged, not listed).
        """
        removed = []
        if self.local_rank == 0:
            for step, path in sorted(step_dirs(self.directory).items()):
                if not is_complete(path):
                    why = self._remove(path)
                    if why is None:
                        removed.append(step)
                    else:
                        self._log(f"incomplete checkpoint {path.name} {why}")
        self._barrier()
        return removed

    def prune(self, saved: int | None = None) -> list[int]:
        """Delete complete checkpoints older than the newest ``keep`` loadable ones at or below ``saved``.

        Args:
            saved: the step just written (default: the newest complete step).
                Checkpoints newer than it, and those in :attr:`unloadable`, never
                count toward ``keep``; nothing newer than ``saved`` is deleted.

        Returns:
            The steps really deleted (on each node's local rank 0; [] elsewhere).
            Only checkpoint folders (:func:`step_dirs`) are candidates; one that
            cannot be removed is logged and not listed.
        """
        removed: list[int] = []
        if self.local_rank != 0:
            return removed
        folders = {step: path for step, path in step_dirs(self.directory).items() if is_complete(path)}
        steps = sorted(folders)
        if saved is None:
            saved = steps[-1] if steps else None
        if saved is None:
            return removed
        loadable = [s for s in steps if s <= saved and s not in self.unloadable]
        kept = loadable[-self.keep :]
        if not kept:
            return removed
        for step in steps:
            if step < kept[0]:
                why = self._remove(folders[step])
                if why is not None:
                    self._log(f"pruning {folders[step].name}: {why}")
                    continue
                self.unloadable.pop(step, None)
                removed.append(step)
        return removed

    def _clear_the_way(self, path: Path) -> None:
        """Make room for a save at ``path`` (local rank 0): an older folder of ours is replaced; a link
        or file there is not ours, so it is moved aside (renamed; nothing it points to is touched)."""
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            what = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else "a file"
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            target = path.with_name(f"{path.name}{MOVED_ASIDE}{stamp}")
            n = 1
            while os.path.lexists(target):
                n += 1
                target = path.with_name(f"{path.name}{MOVED_ASIDE}{stamp}-{n}")
            os.rename(path, target)
            kept = "what it points to was not touched" if os.path.islink(target) else "kept as it was"
            self._log(
                f"{path.name} was {what}, not a checkpoint folder this trainer wrote: moved aside to {target.name} "
                f"({kept}) to save step {checkpoint_step(path.name)} there"
            )
        elif path.exists():  # a stale save of the same step of ours: incomplete, or unloadable at resume
            why = self._remove(path)
            if why is not None:
                raise CheckpointError(f"cannot save {path}: the earlier folder of that step {why}")

    # -- save ------------------------------------------------------------------
    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer_state: Mapping[str, Any],
    ) -> Path:
        """Write ``step-N`` (collective: every rank calls it), mark it complete, prune.

        ``trainer_state`` must be JSON-serialisable (step, data position,
        scheduler and loss-scaler state, run record). An existing ``step-N``
        folder (an unfinished save, or one that failed at resume) is replaced;
        a link or file named ``step-N`` is moved aside (see the module docstring).
        """
        start = time.monotonic()
        path = self.step_dir(step)
        if self.local_rank == 0:
            self._clear_the_way(path)
            path.mkdir(parents=True)
        self._barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path), process_group=self.group)
        rng_dir = path / "rng"
        rng_dir.mkdir(exist_ok=True)
        torch.save(_rng_state(), path / rng_file(self.rank))
        if self.local_rank == 0:
            atomic_write_text(path / TRAINER_STATE, json.dumps({**trainer_state, "step": step}, indent=2, default=str))
        self._barrier()
        self.last_save_seconds = time.monotonic() - start
        if self.local_rank == 0:
            marker = {
                "step": step,
                "world_size": self.world_size,
                "saved_at": time.time(),
                "seconds": self.last_save_seconds,
            }
            atomic_write_text(path / COMPLETE_MARKER, json.dumps(marker) + "\n")
        self.unloadable.pop(step, None)
        self._barrier()
        self.prune(step)
        self._barrier()
        return path

    # -- load ------------------------------------------------------------------
    def latest_step(self) -> int | None:
        """The newest complete step, as global rank 0 sees it (broadcast to all ranks)."""
        steps = self._complete_of_rank0()
        return steps[-1][0] if steps else None

    def _complete_of_rank0(self) -> list[tuple[int, str]]:
        """``(step, folder name)`` of the complete checkpoint folders, ascending, as global rank 0 found them."""
        found = None
        if self.rank == 0:
            found = sorted((step, path.name) for step, path in step_dirs(self.directory).items() if is_complete(path))
        choice = [found]
        if self._distributed():
            dist.broadcast_object_list(choice, src=0, group=self.group)
        return list(choice[0] or [])

    def load_latest(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        run: Mapping[str, Any] | None = None,
        allow_data_change: bool = False,
        restore: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> Resumed | None:
        """Resume the newest checkpoint that verifies, belongs to this run and loads (collective).

        Args:
            model, optimizer: restored in place (``set_state_dict``; FSDP2-aware, any world size).
            run: this run's :func:`run_record`; None skips the record comparison
                (DCP's tensor metadata is still compared with ``model``).
            allow_data_change: accept a changed data stream (see :func:`compare_runs`).
            restore: called with the candidate's ``trainer_state.json`` after its
                model, optimizer and RNG state loaded (the trainer restores its LR
                scheduler, loss scaler and data position); an exception is a failure
                to load that checkpoint, which is skipped like any other.

        Returns:
            :class:`Resumed`, or None when there is no complete checkpoint.

        Raises:
            ResumeRefused: the newest loadable checkpoint belongs to another run
                (names what differs); nothing was loaded, pruned or written.
            CheckpointError: complete checkpoints exist but none can be loaded
                (names each folder and why).
        """
        if self.rank == 0:
            for name, what in foreign_entries(self.directory).items():
                later = " (a save of its step moves it aside)" if checkpoint_step(name) is not None else ""
                self._log(f"ignoring {name} in {self.directory}: {what}; never loaded, pruned or deleted{later}")
        candidates = self._complete_of_rank0()
        if not candidates:
            return None
        shapes = {k: tuple(v.shape) for k, v in get_model_state_dict(model).items() if isinstance(v, torch.Tensor)}
        skipped: dict[int, str] = {}
        names: dict[int, str] = {}
        for position, (step, name) in enumerate(reversed(candidates)):
            path = self.directory / name
            names[step] = name
            older = candidates[-position - 2][1] if position + 1 < len(candidates) else None
            fallback = f"falling back to {older}" if older is not None else "no older checkpoint"

            check = verify_checkpoint(path, step)
            problem = self._agree("; ".join(check.problems) or None)
            if problem is not None:
                skipped[step] = problem
                self._log(f"skipping checkpoint {name}: {problem}; {fallback}")
                continue

            assert check.metadata is not None and check.trainer_state is not None
            comparison = (
                compare_runs(check.trainer_state, run, allow_data_change=allow_data_change)
                if run is not None
                else RunComparison()
            )
            refusals = list(comparison.refusals)
            if not comparison.model_refused:
                mismatch = model_mismatch(check.metadata, shapes)
                if mismatch:
                    refusals.insert(0, mismatch)
            refused = self._agree("; ".join(refusals) or None)
            if refused is not None:
                raise ResumeRefused(
                    f"checkpoint {path} belongs to another run: {refused}. Nothing was loaded, pruned or overwritten; "
                    f"resume with the checkpoint's settings, or give this run its own checkpoint location"
                )

            error = None
            restored = False
            try:
                restored = self._load(path, model, optimizer, check.metadata)
                if restore is not None:
                    restore(check.trainer_state)
            except (Exception, CheckpointException) as exc:
                error = _load_error(exc)
            error = self._agree(error)
            if error is not None:
                skipped[step] = error
                self._log(f"skipping checkpoint {name}: {error}; {fallback}")
                continue

            self.unloadable = dict(skipped)
            for note in comparison.notes:
                self._log(f"resuming {name} with changes: {note}")
            restored_ranks = self._gather(restored)
            fresh = [rank for rank, ok in enumerate(restored_ranks) if not ok]
            if fresh:
                world = _saved_world_size(path, check.trainer_state)
                self._log(
                    f"rank{'s' if len(fresh) > 1 else ''} {', '.join(map(str, fresh))} start their random number "
                    f"generators from the run's seed: {name} was written by {_processes(world)}, which had no such rank"
                )
            return Resumed(
                step=step,
                path=path,
                trainer_state=check.trainer_state,
                restored_rng=not fresh,
                skipped=skipped,
                notes=list(comparison.notes),
            )

        self.unloadable = dict(skipped)
        details = "; ".join(f"{names[s]}: {why}" for s, why in skipped.items())
        raise CheckpointError(
            f"no loadable checkpoint in {self.directory} ({details}). Left as they are: restore whole copies "
            "(e.g. from the job's checkpoint S3 location), or move them away to start again from step 0"
        )

    def _load(
        self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, metadata: Metadata | None = None
    ) -> bool:
        """Load model, optimizer and this rank's RNG from ``path``; returns whether an RNG state was restored.

        TransformerEngine ``_extra_state`` entries are first sized as the checkpoint holds them
        (:func:`size_extra_state`; ``metadata``: the checkpoint's DCP metadata, read when not given).
        """
        model_sd, optim_sd = get_state_dict(model, optimizer)
        if metadata is None:
            metadata = FileSystemReader(str(path)).read_metadata()
        absent = size_extra_state(model_sd, metadata)
        state = {"model": {k: v for k, v in model_sd.items() if k not in absent}, "optimizer": optim_sd}
        dcp.load(state, checkpoint_id=str(path), process_group=self.group)
        model_sd.update(state["model"])  # DCP replaces non-tensor (bytes) entries in the dict it was given
        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=state["optimizer"])
        rng = path / rng_file(self.rank)
        if not rng.is_file():
            return False  # a rank the saving run did not have (verify_checkpoint found every rank's file it had)
        try:
            _set_rng_state(torch.load(rng, weights_only=False))
        except Exception as exc:
            raise RuntimeError(f"{rng_file(self.rank)}: {_first_line(exc)}") from exc
        return True


EXTRA_STATE_SUFFIX = "_extra_state"
"""Suffix of a module's extra state in a state dict (``torch.nn.Module.get_extra_state``); TransformerEngine
keeps its recipe and fp8 scaling state (delayed scaling: ``scale`` and ``amax_history``) there."""


def size_extra_state(model_state: dict[str, Any], metadata: Metadata) -> set[str]:
    """Make every ``_extra_state`` tensor of ``model_state`` a placeholder of the size the checkpoint holds.

    TransformerEngine (2.10, ``TransformerEngineBaseModule.get_extra_state``)
    serialises its fp8 state into a ``uint8`` tensor whose size depends on that
    state: a model that has not run under ``te.autocast`` yet returns an empty
    tensor, a trained one a pickle of its recipe and (delayed scaling) scales
    and amax history. DCP loads into the tensors it is given and refuses a size
    change ("Size mismatch between saved ... and current", TransformerEngine
    issue #1860), so a fresh model could never resume an fp8, mxfp8 or nvfp4
    checkpoint. Each entry is replaced (in ``model_state``) by an empty tensor
    of the saved size and dtype; after ``dcp.load`` fills it,
    ``set_state_dict`` hands it to the module's ``set_extra_state``, which
    restores the recipe, the scales and the amax history.

    Args:
        model_state: the model's state dict (``get_state_dict``), keys without
            the ``"model."`` prefix of the checkpoint.
        metadata: the checkpoint's DCP metadata.

    Returns:
        The ``_extra_state`` keys the checkpoint does not hold (or holds as
        bytes of another kind): leave them out of ``dcp.load``; the module keeps
        its current (fresh) state for them.
    """
    absent: set[str] = set()
    for key, value in list(model_state.items()):
        if not key.endswith(EXTRA_STATE_SUFFIX) or not isinstance(value, torch.Tensor):
            continue
        saved = metadata.state_dict_metadata.get(MODEL_PREFIX + key)
        if not isinstance(saved, TensorStorageMetadata):
            absent.add(key)
            continue
        model_state[key] = torch.empty(tuple(saved.size), dtype=saved.properties.dtype, device=value.device)
    return absent


def export_model(
    model: torch.nn.Module,
    directory: str | os.PathLike[str],
    *,
    config: Any,
    dtype: torch.dtype,
    rank: int,
    extra: Mapping[str, Any] | None = None,
) -> Path | None:
    """Gather the full model to rank 0 (CPU) and write consolidated safetensors + ``config.json``.

    Collective. Returns the weights path on rank 0, None elsewhere.
    """
    from training.model import save_pretrained

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    written = None
    if rank == 0:
        # TE quantized weights (quantized model init) are tensor subclasses: back to high precision first
        plain = {
            k: (v.dequantize() if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor else v)
            for k, v in state.items()
        }
        written = save_pretrained(directory, plain, config, dtype=dtype, extra=extra)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return written


__all__ = [
    "COMPLETE_MARKER",
    "TRAINER_STATE",
    "CheckpointError",
    "CheckpointManager",
    "RestartPoint",
    "ResumeRefused",
    "Resumed",
    "RunComparison",
    "Verification",
    "checkpoint_step",
    "compare_runs",
    "complete_steps",
    "export_model",
    "foreign_entries",
    "is_complete",
    "model_mismatch",
    "restart_point",
    "rng_file",
    "run_record",
    "saved_run",
    "size_extra_state",
    "step_dirs",
    "trainer_state_problems",
    "verify_checkpoint",
]
