"""Is this folder a complete, loadable checkpoint: its name, its marker, its files and its records.

A checkpoint is a real folder named ``step-<step>``, the step in ASCII digits
without leading zeros (:func:`step_dirs`; the layout of
:mod:`platform_spec.checkpoint_layout`), because that is the only name this
trainer writes. Anything else named ``step-...`` (``step-006``, ``step-3`` in
Arabic-Indic digits, a symbolic link or a file named ``step-6``) is not a
checkpoint: it is never loaded, followed, pruned or deleted, and the resume
log names it (:func:`foreign_entries`).

The ``.complete`` marker is not proof that a checkpoint can be loaded:
SageMaker uploads ``/opt/ml/checkpoints`` to S3 in the background and
downloads whatever is there on restart, so a small ``.complete`` can arrive
while a large shard is still partial, and on several nodes each node's marker
says nothing about the other nodes' files (on a restart every instance gets
the whole S3 prefix: "the checkpoints from this S3 bucket are restored to
checkpoint_local_path in each instance of the new training job",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints-resume.html,
so each node can check every file). So a checkpoint is resumed only when it
verifies (:func:`verify_checkpoint`), and a restart resumes the newest
complete one that does (:func:`restart_point`).
"""

from __future__ import annotations

import json
import math
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from platform_spec.checkpoint_layout import COMPLETE_MARKER, STEP_PREFIX, TRAINER_STATE, checkpoint_step, rng_file
from training.checkpoint.compare import model_shape_fields, processes, saved_run

MOVED_ASIDE = ".moved-aside-"
"""Infix of the new name of a link or file that was in the way of a save (``step-6.moved-aside-20261130T165500Z``)."""


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


def complete_dirs(directory: Path) -> dict[int, Path]:
    """``{step: folder}`` of the complete checkpoints, ascending."""
    return {step: path for step, path in sorted(step_dirs(directory).items()) if is_complete(path)}


def complete_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints, ascending."""
    return list(complete_dirs(directory))


def first_line(exc: BaseException, limit: int = 160) -> str:
    """``Type: first sentence of the message`` (library messages go on for paragraphs)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > 80 and ". " in text:
        text = text.split(". ", 1)[0]
    line = f"{type(exc).__name__}: {text}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true/false is not a count


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _is_numbers(value: Any) -> bool:
    return isinstance(value, list) and all(map(_is_number, value))


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _is_shape_value(value: Any) -> bool:
    """A model shape field's value: an integer (sizes), a finite number (a RoPE base, a norm epsilon), a
    boolean (tied embeddings) or null (an optional field unset: the Llama family's ``head_dim`` and RoPE
    scaling)."""
    return value is None or isinstance(value, bool) or _is_number(value)


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bad(field_name: str, value: Any, expected: str) -> str:
    return f"{TRAINER_STATE} field {field_name!r}: got {_shown(value)}, expected {expected}"


def trainer_state_problems(state: Any, step: int | None = None) -> list[str]:
    """Type and range problems of a ``trainer_state.json`` (empty: every field a resume uses is usable).

    Fields (all but ``step`` optional, each checked when present; the trainer
    always writes them)::

        step          int >= 0, the folder's step
        data          {"step": int == step, "samples_consumed": int >= 0}
        scheduler     the LR scheduler's state_dict: an object; last_epoch int >= 0,
                      base_lrs and _last_lr lists of finite numbers
        loss_scaler   null or {"scale": finite number > 0, "good_steps": int >= 0}
        non_finite_steps   [[step, "loss", "grad_norm"], ...]: the run of non-finite steps a stop's save was
                      taken in (steps 1..step, the values as text: "inf", "nan")
        run           the run record (:func:`training.checkpoint.compare.run_record`): an object
                      with the fields of ``_RECORD_FIELDS``; data.samples_consumed must be
                      step x samples_per_step (a change of the global batch is always refused)
        world_size, model_config, hyperparameters   the older top-level fields of the run record

    Returns:
        One sentence per problem, naming the field, the value found and what was expected.
    """
    if not isinstance(state, dict):
        return [f"{TRAINER_STATE} holds {type(state).__name__}, expected an object"]
    saved_step = state.get("step")
    if not _is_int(saved_step) or saved_step < 0:
        return [
            f"{TRAINER_STATE} has no integer 'step'" + ("" if "step" not in state else f" (got {_shown(saved_step)})")
        ]
    if step is not None and saved_step != step:
        return [f"{TRAINER_STATE} says step {saved_step}, the folder is step-{step}"]
    problems: list[str] = []
    if "data" in state:
        data_fields = (
            ("step", lambda value: value == saved_step, f"{saved_step} (the checkpoint's step)"),
            ("samples_consumed", _is_count, "an integer >= 0 (samples the run read before this step)"),
        )
        problems += _section_problems(state, "data", "an object (the data position)", data_fields)
    if "scheduler" in state:
        problems += _section_problems(state, "scheduler", "an object (the LR scheduler's state_dict)", _SCHEDULER)
    if state.get("loss_scaler") is not None:
        what = "null or an object (the fp16 loss scaler's state)"
        problems += _section_problems(state, "loss_scaler", what, _LOSS_SCALER, required=True)
    if "non_finite_steps" in state and not _is_non_finite_run(state["non_finite_steps"], saved_step):
        expected = f'a list of [step 1..{saved_step}, "loss", "grad_norm"] (values as text, e.g. "inf")'
        problems.append(_bad("non_finite_steps", state["non_finite_steps"], expected))
    return problems + _run_problems(state, saved_step)


def _is_non_finite_run(value: Any, saved_step: int) -> bool:
    def number(text: Any) -> bool:
        try:
            float(text)
        except (TypeError, ValueError):
            return False
        return isinstance(text, str)

    return isinstance(value, list) and all(
        isinstance(entry, list)
        and len(entry) == 3
        and _is_int(entry[0])
        and 1 <= entry[0] <= saved_step
        and number(entry[1])
        and number(entry[2])
        for entry in value
    )


Check = tuple[str, Callable[[Any], bool], str]
"""``(field, valid(value), what is expected)``."""
_LRS = "a list of finite numbers (one per parameter group)"
_SCHEDULER: tuple[Check, ...] = (
    ("last_epoch", _is_count, "an integer >= 0"),
    ("base_lrs", _is_numbers, _LRS),
    ("_last_lr", _is_numbers, _LRS),
)
_LOSS_SCALER: tuple[Check, ...] = (
    ("scale", lambda value: _is_number(value) and value > 0, "a finite number > 0"),
    ("good_steps", _is_count, "an integer >= 0"),
)


def _section_problems(
    state: Mapping[str, Any], name: str, what: str, fields: tuple[Check, ...], required: bool = False
) -> list[str]:
    """Problems of the object ``state[name]`` (``what`` it must be) and of its ``fields``, each checked when
    present (always when ``required``)."""
    section = state[name]
    if not isinstance(section, dict):
        return [_bad(name, section, what)]
    return [
        _bad(f"{name}.{key}", section.get(key), expected)
        for key, valid, expected in fields
        if (required or key in section) and not valid(section.get(key))
    ]


def _run_problems(state: Mapping[str, Any], step: int) -> list[str]:
    """Problems of the run record (``state["run"]``; in older checkpoints its fields at the top level)."""
    if "run" not in state:
        older = {
            "world_size": state.get("world_size"),
            "model": state.get("model_config"),
            "hyperparameters": state.get("hyperparameters"),
        }
        return _record_problems(older, "", None, step, names={"model": "model_config"})
    if not isinstance(state["run"], dict):
        return [_bad("run", state["run"], "an object (the run record)")]
    data = state.get("data")
    samples = data.get("samples_consumed") if isinstance(data, dict) else None
    return _record_problems(state["run"], "run.", samples if _is_count(samples) else None, step)


def _model_is_shape(model: Any) -> bool:
    return isinstance(model, dict) and all(_is_shape_value(model[name]) for name in model_shape_fields(model))


_RECORD_FIELDS: tuple[Check, ...] = (
    ("world_size", lambda v: _is_count(v) and v >= 1, "an integer >= 1"),
    ("samples_per_step", lambda v: _is_count(v) and v >= 1, "an integer >= 1"),
    ("version", _is_int, "an integer"),
    ("backend", lambda v: isinstance(v, str), "a string ('te' or 'torch')"),
    ("model", lambda v: isinstance(v, dict), "an object (the model's configuration)"),
    (
        "model",
        lambda v: not isinstance(v, dict) or _model_is_shape(v),
        "integers, finite numbers, booleans or nulls for every field but 'name' (the model family's shape)",
    ),
    (
        "hyperparameters",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "an object of strings (Hyperparameters.to_strings())",
    ),
    ("data", lambda v: isinstance(v, dict), "an object (the data fingerprint) or null"),
)
"""The run record's fields; ``None`` (unknown) always passes."""


def _record_problems(
    record: Mapping[str, Any], prefix: str, samples: int | None, step: int, names: Mapping[str, str] | None = None
) -> list[str]:
    """Problems of a run record's fields (``None`` values pass: unknown, as in older checkpoints); ``names``:
    how a field is spelled where it was read (the older top-level ``model_config``)."""
    names = names or {}
    problems = [
        _bad(prefix + names.get(name, name), record[name], expected)
        for name, valid, expected in _RECORD_FIELDS
        if record.get(name) is not None and not valid(record[name])
    ]
    spb = record.get("samples_per_step")
    if samples is not None and _is_int(spb) and spb >= 1 and samples != step * spb:
        problems.append(
            f"{TRAINER_STATE} field 'data.samples_consumed': got {samples}, expected {step * spb} "
            f"(step {step} x {spb} samples per step; the global batch never changes within a run)"
        )
    return problems


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


def saved_world_size(path: Path, state: Mapping[str, Any] | None) -> int | None:
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


def saved_write_seconds(path: Path) -> float | None:
    """Seconds the save of ``path`` took to write every rank's files (its ``.complete`` marker's ``seconds``);
    None when unknown."""
    try:
        marker = json.loads((path / COMPLETE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    seconds = marker.get("seconds") if isinstance(marker, dict) else None
    return float(seconds) if _is_number(seconds) and seconds >= 0 else None


def verify_checkpoint(path: Path, step: int | None = None) -> Verification:
    """Check that ``path`` holds every byte a DCP load of it will read, and a usable trainer state.

    Reads ``.complete``, ``trainer_state.json`` (every field the resume uses,
    :func:`trainer_state_problems`; its ``step`` is ``step`` when given) and
    DCP's ``.metadata`` with :class:`CheckpointReader` (DCP's reader, restricted to what DCP writes there);
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
    _verify_trainer_state(path, step, result)
    _verify_shards(path, result)
    return result


def _verify_trainer_state(path: Path, step: int | None, result: Verification) -> None:
    """``trainer_state.json`` and the RNG file of every rank of the saving run."""
    try:
        state = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        result.problems.append(f"{TRAINER_STATE} is missing")
        return
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        result.problems.append(f"{TRAINER_STATE} is not readable JSON ({first_line(exc)})")
        return
    problems = trainer_state_problems(state, step)
    if problems:
        result.problems.extend(problems)
        return
    result.trainer_state = state
    world = saved_world_size(path, state)
    missing = [rng_file(r) for r in range(world or 0) if not (path / rng_file(r)).is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        result.problems.append(
            f"{shown} {'is' if len(missing) == 1 else 'are'} missing (the saving run had {processes(world)})"
        )


_METADATA_CLASSES = (
    "BytesStorageMetadata",
    "ChunkStorageMetadata",
    "Metadata",
    "MetadataIndex",
    "StorageMeta",
    "TensorProperties",
    "TensorStorageMetadata",
    "_MEM_FORMAT_ENCODING",
)
"""The classes of ``torch.distributed.checkpoint.metadata`` a DCP ``.metadata`` pickle holds (torch 2.13)."""


class MetadataUnpickler(pickle.Unpickler):
    """Reads a DCP ``.metadata`` naming only what DCP writes there: the classes of :data:`_METADATA_CLASSES`,
    ``_StorageInfo``, ``torch.Size``, torch dtypes, ``torch.serialization._get_layout`` and the checkpoint's
    path (``pathlib.PosixPath``). torch's ``FileSystemReader.read_metadata`` uses ``pickle.load``, which runs
    whatever a crafted ``.metadata`` names.

    Raises:
        pickle.UnpicklingError: any other global (message: ``module.name``).
    """

    def find_class(self, module: str, name: str) -> Any:
        if module == dcp_metadata.__name__ and name in _METADATA_CLASSES:
            return getattr(dcp_metadata, name)
        if (module, name) == (_StorageInfo.__module__, "_StorageInfo"):
            return _StorageInfo
        if (module, name) == ("torch", "Size"):
            return torch.Size
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) == ("torch.serialization", "_get_layout"):
            from torch.serialization import _get_layout

            return _get_layout
        if module in ("pathlib", "pathlib._local") and name in ("PosixPath", "PurePosixPath"):
            return getattr(__import__("pathlib"), name)
        raise pickle.UnpicklingError(f"DCP .metadata names {module}.{name}, which DCP does not write there")


class CheckpointReader(FileSystemReader):
    """DCP's ``FileSystemReader`` whose ``read_metadata`` uses :class:`MetadataUnpickler` (otherwise as torch 2.13's:
    ``torch/distributed/checkpoint/filesystem.py``). Pass it as ``dcp.load``'s ``storage_reader``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as metadata_file:
            metadata = MetadataUnpickler(metadata_file).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError(f"DCP .metadata holds a {type(metadata).__name__}, not Metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]
        return metadata


def _read_metadata(path: Path) -> Metadata | str:
    """DCP's ``.metadata`` of ``path`` with its ``storage_data``, or what is wrong with it."""
    metadata_file = path / ".metadata"
    if not metadata_file.is_file():
        return "DCP .metadata is missing (written by global rank 0 last; on several nodes, node 0's copy)"
    try:
        metadata = CheckpointReader(str(path)).read_metadata()
    except Exception as exc:
        return f"DCP .metadata ({metadata_file.stat().st_size} bytes) does not parse: {first_line(exc)}"
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(metadata, Metadata) or not isinstance(storage, dict):
        return "DCP .metadata holds no storage_data (not written by FileSystemWriter)"
    wrong = next((info for info in storage.values() if not isinstance(info, _StorageInfo)), None)
    if wrong is not None:
        return f"DCP .metadata storage_data holds {type(wrong).__name__}, not _StorageInfo"
    return metadata


def _verify_shards(path: Path, result: Verification) -> None:
    """DCP's ``.metadata``, and every byte of the files its ``storage_data`` references."""
    metadata = _read_metadata(path)
    if isinstance(metadata, str):
        result.problems.append(metadata)
        return
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
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

    What :meth:`training.checkpoint.manager.CheckpointManager.load_latest` tries first and can load, unless
    the restart belongs to another run (refused) or a load fails for a reason
    verification cannot see (then it falls back further, with a log line).
    """
    skipped: dict[int, str] = {}
    for step, path in reversed(complete_dirs(directory).items()):
        check = verify_checkpoint(path, step)
        if check.ok:
            return RestartPoint(step, skipped)
        skipped[step] = "; ".join(check.problems)
    return RestartPoint(None, skipped)
