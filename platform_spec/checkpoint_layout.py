"""The trainer's checkpoint folder layout: what the trainer writes and everything else reads.

The trainer (``training/checkpoint/``) writes one folder per checkpoint under its checkpoint
directory (``/opt/ml/checkpoints``, which SageMaker syncs with the job's ``CheckpointConfig.S3Uri``)::

    step-120/
        .metadata, __0_0.distcp, ...   DCP: model + optimizer (:func:`dcp_shard_file`: one per rank)
        trainer_state.json              step, data position, LR scheduler, loss scaler, run record
        rng/rank-00000.pt               per-rank RNG states (:func:`rng_file`)
        .complete                       written last: the checkpoint is whole

The submitter's run continuation and the job API read the same facts from S3 object keys
(:func:`newest_complete_step`) and from ``trainer_state.json`` (:func:`read_trainer_state`), so a
checkpoint counts for them exactly when it counts for the trainer: a folder named ``step-<step>``
(ASCII digits, no leading zeros) holding ``.complete``.

Pure Python, standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "COMPLETE_MARKER",
    "DCP_METADATA",
    "STEP_NAME_RE",
    "STEP_PREFIX",
    "TRAINER_STATE",
    "StepState",
    "checkpoint_step",
    "complete_steps_of_keys",
    "dcp_shard_file",
    "missing_files",
    "newest_complete_step",
    "read_trainer_state",
    "rng_file",
]

COMPLETE_MARKER = ".complete"
"""Written last into a checkpoint folder, after every rank's files: the checkpoint is whole."""
TRAINER_STATE = "trainer_state.json"
"""The trainer's JSON record in each checkpoint folder (step, data position, scheduler, run record)."""
DCP_METADATA = ".metadata"
"""DCP's index of the checkpoint's shards, written by rank 0 after every rank's (torch.distributed.checkpoint's
``FileSystemWriter``): without it DCP loads nothing."""
STEP_PREFIX = "step-"
"""Prefix of every checkpoint folder name."""
STEP_NAME_RE = re.compile(r"step-(0|[1-9][0-9]*)", re.ASCII)
"""The only folder name the trainer writes: ``step-`` and the step in ASCII digits without leading zeros."""


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder name (``step-12`` -> 12), or ``None`` for any other name.

    Only the name the trainer writes counts: ``step-012``, ``step-+12`` and ``step-12`` spelled in
    other scripts' digits are not checkpoint names.
    """
    match = STEP_NAME_RE.fullmatch(name)
    return int(match.group(1)) if match else None


def rng_file(rank: int) -> str:
    """The RNG state file of global rank ``rank``, relative to the checkpoint folder (``rng/rank-00003.pt``)."""
    return f"rng/rank-{rank:05d}.pt"


def dcp_shard_file(rank: int) -> str:
    """The first (with the trainer's writer, the only) DCP shard file of process-group rank ``rank``, relative to
    the checkpoint folder (``__3_0.distcp``).

    The trainer saves with ``dcp.save`` / ``dcp.async_save`` and ``checkpoint_id``, that is torch's
    ``FileSystemWriter`` with its defaults ``single_file_per_rank=True`` and ``thread_count=1``: each rank's
    plan gets the storage prefix ``__<rank>_`` and its one bucket of items (empty or not) is written to
    ``<prefix>0.distcp`` (torch 2.13, ``torch/distributed/checkpoint/filesystem.py``:
    ``FileSystemWriter.prepare_global_plan``, ``_FileSystemWriter.write_data``)."""
    return f"__{rank}_0.distcp"


def missing_files(names: Iterable[str], world_size: int | None) -> list[str]:
    """Files every whole checkpoint holds that are not among ``names`` (paths relative to its folder).

    What S3 keys can show without reading the shards: :data:`COMPLETE_MARKER`, :data:`TRAINER_STATE`,
    :data:`DCP_METADATA` and, when ``world_size`` (the run record's processes) is known, each rank's
    :func:`dcp_shard_file` and :func:`rng_file`: a node whose uploads never reached S3 leaves its ranks' files
    missing. Both are asked for because neither proves the other: an asynchronous save writes the RNG file
    before the shard's write ends, and SageMaker uploads each file as it appears, so a node lost mid-upload can
    leave its small RNG file in S3 and not its shard. Sizes and shard contents are the trainer's check
    (``training/checkpoint/verify.py``).
    """
    present = set(names)
    wanted = [COMPLETE_MARKER, TRAINER_STATE, DCP_METADATA]
    for rank in range(world_size or 0):
        wanted += [dcp_shard_file(rank), rng_file(rank)]
    return [name for name in wanted if name not in present]


def complete_steps_of_keys(keys: Iterable[str]) -> list[int]:
    """Steps of the complete checkpoints among object ``keys`` relative to a checkpoint prefix, ascending.

    Args:
        keys: keys below the prefix, e.g. ``step-12/.complete``, ``step-12/trainer_state.json``
            (a leading ``/`` is ignored).

    Returns:
        Each step whose folder holds ``step-<step>/.complete`` directly (a marker deeper down, or in a
        folder that is not a checkpoint name, does not count).
    """
    steps: set[int] = set()
    for key in keys:
        parts = key.lstrip("/").split("/")
        if len(parts) == 2 and parts[1] == COMPLETE_MARKER:
            step = checkpoint_step(parts[0])
            if step is not None:
                steps.add(step)
    return sorted(steps)


def newest_complete_step(keys: Iterable[str]) -> int | None:
    """The newest step whose ``.complete`` marker is among ``keys`` (:func:`complete_steps_of_keys`), or ``None``."""
    steps = complete_steps_of_keys(keys)
    return steps[-1] if steps else None


@dataclass(frozen=True)
class StepState:
    """What a checkpoint's ``trainer_state.json`` declares, as far as the platform reads it.

    Attributes:
        step: the optimizer step the checkpoint holds (equal to its folder's).
        samples_consumed: samples the run had read before this step (``data.samples_consumed``), or
            ``None`` when not recorded.
        seq_length: tokens per sample (the run record's ``seq_length`` hyperparameter), or ``None``.
        world_size: processes of the job that saved it (the run record's ``world_size``), or ``None``.
    """

    step: int
    samples_consumed: int | None = None
    seq_length: int | None = None
    world_size: int | None = None

    @property
    def tokens(self) -> int | None:
        """Tokens the run had trained on before this step (``samples_consumed x seq_length``), or ``None``."""
        if self.samples_consumed is None or self.seq_length is None:
            return None
        return self.samples_consumed * self.seq_length


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_trainer_state(raw: bytes, step: int) -> StepState | str:
    """Read ``trainer_state.json`` of folder ``step-<step>``: a :class:`StepState`, or why it cannot be used.

    Args:
        raw: the file's bytes.
        step: the folder's step.

    Returns:
        The state; or one sentence naming the problem (not JSON, not an object, no integer ``step``,
        a ``step`` other than the folder's: a file copied from another folder or run, or a damaged
        one). The trainer never resumes such a checkpoint, so neither does anything that reads this.
    """
    try:
        state = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"{TRAINER_STATE} is not readable JSON ({type(exc).__name__})"
    if not isinstance(state, dict):
        return f"{TRAINER_STATE} holds {type(state).__name__}, expected an object"
    saved = _int(state.get("step"))
    if saved is None:
        return f"{TRAINER_STATE} has no integer 'step' >= 0"
    if saved != step:
        return f"{TRAINER_STATE} says step {saved}, the folder is step-{step}"
    data = state.get("data")
    samples = _int(data.get("samples_consumed")) if isinstance(data, dict) else None
    record = state.get("run")
    hyperparameters = record.get("hyperparameters") if isinstance(record, dict) else state.get("hyperparameters")
    text = hyperparameters.get("seq_length") if isinstance(hyperparameters, dict) else None
    seq_length = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else _int(text)
    world_size = _int(record.get("world_size")) if isinstance(record, dict) else None
    return StepState(step, samples, seq_length, world_size or None)
