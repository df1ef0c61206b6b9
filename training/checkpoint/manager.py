"""Save, resume and prune ``step-N`` checkpoints with torch.distributed.checkpoint (DCP); the final export.

A checkpoint holds DCP's model and optimizer shards (sharded DTensors, fp32),
``trainer_state.json`` (step, data position, LR scheduler, loss scaler, run
record) and ``rng/rank-<rank>.pt`` (python, numpy, torch and cuda RNG states),
in the layout of :mod:`platform_spec.checkpoint_layout`.

Write protocol: every rank writes its files into ``step-N/``, a barrier
waits for all ranks (DCP's ``.metadata`` is written by rank 0 after the
others finished), then each node's local rank 0 writes ``.complete``. An
asynchronous save (:meth:`CheckpointManager.save` with ``asynchronous=True``:
DCP's ``async_save``) returns once this rank's state is staged (copied to host
memory) and writes the shards in a background thread; the marker is written
only once every rank's write has finished, a collective decision taken by
:meth:`CheckpointManager.poll` at a step boundary or by
:meth:`CheckpointManager.wait` (the next save waits for it first). A
folder without ``.complete`` (a run killed while saving) is never loaded and
is deleted once a run has resumed. A marker rather than a rename because on
SageMaker each node has its own ``/opt/ml/checkpoints`` that is synced to the
same S3 prefix: every node marks its own copy complete, and nothing is
uploaded twice. A link or file in the way of a save is moved aside (renamed
``step-6.moved-aside-<UTC time>``, nothing it points to touched) so the run
keeps making progress.

Every decision of a resume (:meth:`CheckpointManager.load_latest`) is
collective: each rank's outcome is all-gathered over the checkpoint process
group, so all ranks skip, refuse or resume together.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from platform_spec.checkpoint_layout import COMPLETE_MARKER, STEP_PREFIX, TRAINER_STATE, checkpoint_step
from platform_spec.files import atomic_write_text
from training import finite
from training.checkpoint import compare, extra_state, verify
from training.tokenizer_files import DataTokenizer


class CheckpointError(RuntimeError):
    """No checkpoint can be resumed; the message names each folder and what is wrong with it."""


class ResumeRefused(CheckpointError):
    """The newest loadable checkpoint belongs to another run; names what differs, with both values."""


class NonFiniteCheckpoint(ValueError):
    """A checkpoint whose loaded model or optimizer state holds NaN or inf (:mod:`training.finite`): skipped at
    resume like one that does not load."""


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
        spb = compare.saved_run(self.trainer_state)[0].get("samples_per_step")
        return self.step * spb if isinstance(spb, int) else None


@dataclass(frozen=True)
class SaveRecord:
    """A checkpoint written and marked complete.

    Attributes:
        step: the step saved.
        path: its ``step-N`` folder.
        asynchronous: written in the background (DCP ``async_save``) rather than while training waited.
        blocking_seconds: seconds training waited: the whole save when synchronous; staging the state to host
            memory (and waiting for an earlier save, if one was still being written) when asynchronous.
        write_seconds: seconds from the start of the save until every rank's files were written (the time a
            synchronous save of the same state takes, which the stop margin reserves).
    """

    step: int
    path: Path
    asynchronous: bool
    blocking_seconds: float
    write_seconds: float


@dataclass
class _PendingSave:
    """An asynchronous save whose shards are being written (its future), not yet marked complete."""

    step: int
    path: Path
    started: float
    blocking_seconds: float
    future: Future[float] = field(default_factory=Future)
    """Done when this rank's write ended: its ``time.monotonic()`` then, or DCP's exception."""

    def follow(self, upload: Future[Any]) -> None:
        """Resolve :attr:`future` when DCP's ``upload`` future is done."""

        def done(upload: Future[Any]) -> None:
            error = upload.exception()
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(time.monotonic())

        upload.add_done_callback(done)


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
        asynchronous: allow asynchronous saves (``save(..., asynchronous=True)``). With a process group, a
            gloo group of its own is created for them (collective: every rank constructs the manager): DCP's
            background thread runs its collectives (planning, the metadata gather) on it while the training
            thread keeps using the others; collectives of two threads on one group could interleave differently
            on different ranks. ``async_save`` needs a group with a CPU backend ("A CPU backend must be enabled
            for async save", ``torch/distributed/checkpoint/state_dict_saver.py``, torch 2.13); torchtitan
            gives its asynchronous checkpoints a gloo group of their own the same way.
        on_saved: called on every rank with each save's :class:`SaveRecord` once it is marked complete (the
            trainer's status record and log line).

    Attributes:
        last_save_seconds: the write time of the newest finished save (:attr:`SaveRecord.write_seconds`; after
            a resume, before one, the resumed checkpoint's, from its marker; else 0.0): the stop margin's estimate
            of a synchronous save.
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
        asynchronous: bool = False,
        on_saved: Callable[[SaveRecord], None] | None = None,
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
        self.asynchronous = asynchronous
        self._on_saved = on_saved
        self._pending: _PendingSave | None = None
        self._async_group = dist.new_group(backend="gloo") if asynchronous and self._distributed() else None
        if self.local_rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._barrier()

    # -- collectives -----------------------------------------------------------
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

    # -- folders ---------------------------------------------------------------
    def _remove(self, path: Path) -> str | None:
        """Delete the checkpoint folder ``path`` (a real folder: never a link); None when it is gone, else why not."""
        if path.is_symlink() or not path.is_dir():
            return "not a checkpoint folder (left as it is)"
        errors: list[str] = []

        def note(_function: Any, failed: str, exc: BaseException) -> None:
            errors.append(f"{Path(failed).name}: {verify.first_line(exc)}")

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
            for step, path in sorted(verify.step_dirs(self.directory).items()):
                if not verify.is_complete(path):
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
                count toward ``keep``; nothing newer than ``saved`` is deleted, so pruning
                never leaves a run with nothing loadable.

        Returns:
            The steps really deleted (on each node's local rank 0; [] elsewhere).
            Only checkpoint folders (:func:`step_dirs`) are candidates; one that
            cannot be removed is logged and not listed.
        """
        if self.local_rank != 0:
            return []
        folders = verify.complete_dirs(self.directory)
        saved = max(folders, default=-1) if saved is None else saved
        kept = [step for step in folders if step <= saved and step not in self.unloadable][-self.keep :]
        removed = []
        for step, path in folders.items():
            if not kept or step >= kept[0]:
                break  # ascending: every older one was tried
            why = self._remove(path)
            if why is not None:
                self._log(f"pruning {path.name}: {why}")
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
            target = path.with_name(f"{path.name}{verify.MOVED_ASIDE}{stamp}")
            n = 1
            while os.path.lexists(target):
                n += 1
                target = path.with_name(f"{path.name}{verify.MOVED_ASIDE}{stamp}-{n}")
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
    @property
    def pending_step(self) -> int | None:
        """The step of the asynchronous save being written (not yet marked complete), else None."""
        return None if self._pending is None else self._pending.step

    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer_state: Mapping[str, Any],
        *,
        asynchronous: bool = False,
    ) -> Path:
        """Write ``step-N`` (collective: every rank calls it), mark it complete, prune.

        ``trainer_state`` must be JSON-serialisable (step, data position,
        scheduler and loss-scaler state, run record). An existing ``step-N``
        folder (an unfinished save, or one that failed at resume) is replaced;
        a link or file named ``step-N`` is moved aside (see the module docstring).

        An asynchronous save (``asynchronous=True``; the manager must allow them) is finished (marked complete
        and pruned) later by :meth:`poll` or :meth:`wait`; ``trainer_state.json`` and the RNG files are written
        before it returns (they are the state of step N). Either kind first waits for an asynchronous save still
        being written (:meth:`wait`); a save of the step that one wrote is that one. Staging copies this rank's
        model and optimizer state to host memory: as much host memory again as those shards, held until the
        write ends.

        Returns:
            The ``step-N`` folder (complete when synchronous; being written when asynchronous).

        Raises:
            ValueError: ``asynchronous`` on a manager made without ``asynchronous=True``.
            CheckpointError: an earlier asynchronous save failed (:meth:`wait`), or the folder of the step
                cannot be replaced.
        """
        if asynchronous and not self.asynchronous:
            raise ValueError("asynchronous save on a CheckpointManager made with asynchronous=False")
        start = time.monotonic()
        earlier = self.wait()
        if earlier is not None and earlier.step == step:
            return earlier.path
        path = self.directory / f"{STEP_PREFIX}{step}"  # the one checkpoint name (checkpoint_step)
        if self.local_rank == 0:
            self._clear_the_way(path)
            path.mkdir(parents=True)
        self._barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
        future = None
        if asynchronous:
            group = self._async_group if self._async_group is not None else self.group
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=group)
        else:
            dcp.save(state, checkpoint_id=str(path), process_group=self.group)
        (path / "rng").mkdir(exist_ok=True)
        torch.save(_rng_state(), path / verify.rng_file(self.rank))
        if self.local_rank == 0:
            atomic_write_text(path / TRAINER_STATE, json.dumps({**trainer_state, "step": step}, indent=2, default=str))
        if future is not None:
            assert isinstance(future, Future)  # DefaultStager without async staging: a plain upload future
            self._pending = _PendingSave(step, path, start, time.monotonic() - start)
            self._pending.follow(future)
            return path
        self._barrier()
        seconds = time.monotonic() - start
        self._complete(SaveRecord(step, path, False, seconds, seconds))
        return path

    def poll(self) -> SaveRecord | None:
        """Finish the asynchronous save being written if every rank's write has ended (collective: every rank
        calls it, at the same step; no collective when none is pending).

        Returns:
            The finished save (marked complete, older ones pruned), or None: none pending, or some rank still
            writing.

        Raises:
            CheckpointError: the write failed on some rank (names the step, the ranks and the error); the folder
                is left without its marker, so no resume ever loads it.
        """
        if self._pending is None:
            return None
        if not all(self._gather(self._pending.future.done())):
            return None
        return self._finish(self._pending, waited=0.0)

    def wait(self) -> SaveRecord | None:
        """Wait for the asynchronous save being written and finish it (collective); None when none is pending.

        Raises:
            CheckpointError: as :meth:`poll`.
        """
        if self._pending is None:
            return None
        start = time.monotonic()
        try:
            ended = self._pending.future.result()  # when this rank's write ended (time.monotonic())
        except (Exception, CheckpointException):  # reported by _finish, agreed by every rank
            ended = time.monotonic()
        # training waited until the write ended, not until this thread woke up (a busy host's scheduling delay)
        return self._finish(self._pending, waited=max(0.0, ended - start))

    def _finish(self, pending: _PendingSave, *, waited: float) -> SaveRecord:
        """Agree that every rank wrote ``pending`` (or raise the failure), then mark it complete and prune."""
        self._pending = None
        error = pending.future.exception()
        problem = self._agree(None if error is None else _save_error(error))
        if problem is not None:
            raise CheckpointError(
                f"the asynchronous save of {pending.path.name} (step {pending.step}) failed: {problem}; "
                f"{pending.path} has no {COMPLETE_MARKER} marker, so no resume loads it"
            )
        finished = max(self._gather(pending.future.result() - pending.started))  # the slowest rank's write
        record = SaveRecord(pending.step, pending.path, True, pending.blocking_seconds + waited, finished)
        self._complete(record)
        return record

    def _complete(self, record: SaveRecord) -> None:
        """Mark ``record``'s folder complete on each node (every rank has written it), then prune (collective)."""
        self.last_save_seconds = record.write_seconds
        if self.local_rank == 0:
            marker = {
                "step": record.step,
                "world_size": self.world_size,
                "saved_at": time.time(),
                "seconds": record.write_seconds,
                "asynchronous": record.asynchronous,
            }
            atomic_write_text(record.path / COMPLETE_MARKER, json.dumps(marker) + "\n")
        self.unloadable.pop(record.step, None)
        self._barrier()
        self.prune(record.step)
        self._barrier()
        if self._on_saved is not None:
            self._on_saved(record)

    # -- load ------------------------------------------------------------------
    def latest_step(self) -> int | None:
        """The newest complete step, as global rank 0 sees it (broadcast to all ranks)."""
        steps = self._complete_of_rank0()
        return steps[-1][0] if steps else None

    def _complete_of_rank0(self) -> list[tuple[int, str]]:
        """``(step, folder name)`` of the complete checkpoint folders, ascending, as global rank 0 found them."""
        found = (
            [(step, path.name) for step, path in verify.complete_dirs(self.directory).items()]
            if self.rank == 0
            else None
        )
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

        The complete checkpoints are tried newest first. One is resumed when, on every rank, it verifies
        (:func:`training.checkpoint.verify.verify_checkpoint`), belongs to this run
        (:mod:`training.checkpoint.compare`) and loads: ``dcp.load`` (TransformerEngine's ``_extra_state``
        sized as saved first, :func:`size_extra_state`, so fp8/mxfp8/nvfp4 runs resume with their scaling
        state, and checked by :mod:`training.checkpoint.extra_state` before anything else loads: one the
        trainer did not write is refused), ``set_state_dict``, this rank's RNG state (a rank the saving run did not have starts from the
        run's seed, logged) and ``restore``. One that does not verify or load, or whose loaded model or
        optimizer state is not finite (:mod:`training.finite`: a state after a non-finite update), is skipped
        with a log line naming it and why, and the next older one is tried.

        Args:
            model, optimizer: restored in place (``set_state_dict``; FSDP2-aware, any world size).
            run: this run's :func:`training.checkpoint.compare.run_record`; None skips the record
                comparison (DCP's tensor metadata is still compared with ``model``).
            allow_data_change: accept a changed data stream (see :func:`training.checkpoint.compare.compare_runs`).
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
                (names each folder and why: the trainer's failure reason).
        """
        self._log_foreign_entries()
        candidates = self._complete_of_rank0()
        if not candidates:
            return None
        shapes = {k: tuple(v.shape) for k, v in get_model_state_dict(model).items() if isinstance(v, torch.Tensor)}
        skipped: dict[int, str] = {}
        for position, (step, name) in enumerate(reversed(candidates)):
            path = self.directory / name
            check = verify.verify_checkpoint(path, step)
            problem = self._agree("; ".join(check.problems) or None)
            if problem is None:
                assert check.trainer_state is not None
                notes = self._refuse_another_run(path, check, shapes, run, allow_data_change)
                problem, restored = self._load_agreed(path, model, optimizer, check, restore)
                if problem is None:
                    self.unloadable = dict(skipped)
                    for note in notes:
                        self._log(f"resuming {name} with changes: {note}")
                    restored_rng = self._log_fresh_ranks(path, check.trainer_state, restored)
                    # the stop margin's estimate until this job saves: what the resumed checkpoint's write took
                    self.last_save_seconds = verify.saved_write_seconds(path) or 0.0
                    return Resumed(step, path, check.trainer_state, restored_rng, skipped=skipped, notes=notes)
            skipped[step] = problem
            older = candidates[-position - 2][1] if position + 1 < len(candidates) else None
            fallback = f"falling back to {older}" if older is not None else "no older checkpoint"
            self._log(f"skipping checkpoint {name}: {problem}; {fallback}")
        self.unloadable = dict(skipped)
        names = dict(candidates)
        details = "; ".join(f"{names[s]}: {why}" for s, why in skipped.items())
        raise CheckpointError(
            f"no loadable checkpoint in {self.directory} ({details}). Left as they are: restore whole copies "
            "(e.g. from the job's checkpoint S3 location), or move them away to start again from step 0"
        )

    def _log_foreign_entries(self) -> None:
        if self.rank == 0:
            for name, what in verify.foreign_entries(self.directory).items():
                later = " (a save of its step moves it aside)" if checkpoint_step(name) is not None else ""
                self._log(f"ignoring {name} in {self.directory}: {what}; never loaded, pruned or deleted{later}")

    def _refuse_another_run(
        self,
        path: Path,
        check: verify.Verification,
        shapes: Mapping[str, tuple[int, ...]],
        run: Mapping[str, Any] | None,
        allow_data_change: bool,
    ) -> list[str]:
        """Compare a verified checkpoint with this run (collective): raises :class:`ResumeRefused` on any rank's
        refusal, else returns the allowed differences (log lines)."""
        assert check.metadata is not None and check.trainer_state is not None
        comparison = compare.RunComparison()
        if run is not None:
            comparison = compare.compare_runs(check.trainer_state, run, allow_data_change=allow_data_change)
        refusals = list(comparison.refusals)
        if not comparison.model_refused:
            mismatch = compare.model_mismatch(check.metadata, shapes)
            if mismatch:
                refusals.insert(0, mismatch)
        refused = self._agree("; ".join(refusals) or None)
        if refused is not None:
            raise ResumeRefused(
                f"checkpoint {path} belongs to another run: {refused}. Nothing was loaded, pruned or overwritten; "
                f"resume with the checkpoint's settings, or give this run its own checkpoint location"
            )
        return list(comparison.notes)

    def _load_agreed(
        self,
        path: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        check: verify.Verification,
        restore: Callable[[Mapping[str, Any]], None] | None,
    ) -> tuple[str | None, bool]:
        """Load a checkpoint and ``restore`` its trainer state (collective): every rank's failure as one sentence
        (None when all loaded), and whether this rank restored an RNG state."""
        assert check.metadata is not None and check.trainer_state is not None
        error = None
        restored = False
        try:
            restored = self._load(path, model, optimizer, check.metadata)
            if restore is not None:
                restore(check.trainer_state)
        except (Exception, CheckpointException) as exc:
            error = _load_error(exc)
        return self._agree(error), restored

    def _log_fresh_ranks(self, path: Path, state: Mapping[str, Any], restored: bool) -> bool:
        """Whether every rank restored its RNG state (collective); logs the ranks the saving run did not have."""
        fresh = [rank for rank, ok in enumerate(self._gather(restored)) if not ok]
        if fresh:
            self._log(
                f"rank{'s' if len(fresh) > 1 else ''} {', '.join(map(str, fresh))} start their random number "
                f"generators from the run's seed: {path.name} was written by "
                f"{compare.processes(verify.saved_world_size(path, state))}, which had no such rank"
            )
        return not fresh

    def _load(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, metadata: Metadata) -> bool:
        """Load model, optimizer and this rank's RNG from ``path``; returns whether an RNG state was restored.

        TransformerEngine ``_extra_state`` entries are first sized as the checkpoint's DCP ``metadata`` holds
        them (:func:`size_extra_state`), loaded alone and checked (:func:`extra_state.check_extra_states`:
        only the fp8 state the trainer's recipes write, read by a restricted unpickler) before anything else
        is loaded; TE then restores them with its unpickling opt-in for that call only
        (:func:`extra_state.te_unpickles_checked_states`). The checkpoint's non-tensor entries and the RNG file
        are read by torch's weights-only unpickler (:func:`_load_planner`, :func:`_load_rng_state`).

        Raises:
            extra_state.ExtraStateRefused: an extra state is not one the trainer writes (nothing was loaded).
        """
        model_sd, optim_sd = get_state_dict(model, optimizer)
        absent = size_extra_state(model_sd, metadata)
        extras = {
            k: v
            for k, v in model_sd.items()
            if k.endswith(compare.EXTRA_STATE_SUFFIX) and k not in absent and isinstance(v, torch.Tensor)
        }
        pickled = any(v.numel() for v in extras.values())
        if pickled:
            dcp.load(
                {"model": extras},
                storage_reader=verify.CheckpointReader(str(path)),
                process_group=self.group,
                planner=_load_planner(),
            )
            extra_state.check_extra_states(extras)
        state = {
            "model": {k: v for k, v in model_sd.items() if k not in absent and k not in extras},
            "optimizer": optim_sd,
        }
        dcp.load(
            state, storage_reader=verify.CheckpointReader(str(path)), process_group=self.group, planner=_load_planner()
        )
        found = finite.non_finite(state)
        if found:  # a state after a non-finite update: resuming it would train on from a divergence
            raise NonFiniteCheckpoint(f"its model or optimizer state is not finite ({finite.describe(found)})")
        model_sd.update(state["model"])  # DCP replaces non-tensor (bytes) entries in the dict it was given
        model_sd.update(extras)
        with extra_state.te_unpickles_checked_states() if pickled else contextlib.nullcontext():
            set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=state["optimizer"])
        rng = path / verify.rng_file(self.rank)
        if not rng.is_file():
            return False  # a rank the saving run did not have (verify.verify_checkpoint found every rank's file it had)
        try:
            _set_rng_state(_load_rng_state(rng))
        except Exception as exc:
            raise RuntimeError(f"{verify.rng_file(self.rank)}: {verify.first_line(exc)}") from exc
        return True


def _load_error(exc: BaseException) -> str:
    """One line for a failed load; DCP's CheckpointException carries every failing rank's exception."""
    if isinstance(exc, NonFiniteCheckpoint):
        return str(exc)
    if isinstance(exc, CheckpointException):
        failures = exc.failures
        return "DCP load failed on rank(s) " + ", ".join(
            f"{rank} ({verify.first_line(pair[0])})" for rank, pair in sorted(failures.items())
        )
    return "loading failed: " + verify.first_line(exc)


def _save_error(exc: BaseException) -> str:
    """One line for a failed asynchronous write; DCP's CheckpointException carries every failing rank's exception."""
    if isinstance(exc, CheckpointException):
        return "DCP save failed on rank(s) " + ", ".join(
            f"{rank} ({verify.first_line(pair[0])})" for rank, pair in sorted(exc.failures.items())
        )
    return f"{type(exc).__name__}: {verify.first_line(exc)}"


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _load_planner() -> Any:
    """DCP's default load planner, except that a non-tensor entry (the optimizer's ``param_groups`` values: numbers,
    booleans, tuples, parameter names) is read by torch's weights-only unpickler: torch 2.13's
    ``DefaultLoadPlanner.load_bytes`` calls ``torch.load(weights_only=False)``, which runs whatever a pickle in the
    checkpoint names (``torch/distributed/checkpoint/default_planner.py``; this mirrors its two branches)."""
    import io

    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import ReadItem

    class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return WeightsOnlyLoadPlanner()


def _load_rng_state(path: Path) -> dict[str, Any]:
    """A rank's RNG file (:func:`_rng_state`) read by torch's weights-only unpickler, allowing numpy's array
    reconstruction for ``np.random.get_state()``'s key array (by numpy 2's module name and numpy 1's, under which
    older checkpoints were written): ``weights_only=False`` would run whatever the file's pickle names."""
    array = np.zeros(1, dtype=np.uint32)
    reconstruct = array.__reduce__()[0]
    allowed = [
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        type(array.dtype),
    ]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, weights_only=True)


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def size_extra_state(model_state: dict[str, Any], metadata: Metadata) -> set[str]:
    """Make every ``_extra_state`` tensor of ``model_state`` a placeholder of the size the checkpoint holds.

    TransformerEngine (``TransformerEngineBaseModule.get_extra_state``) serialises
    its fp8 state into a ``uint8`` tensor whose size depends on that state: a
    model that has not run under ``te.autocast`` yet returns an empty tensor, a
    trained one a pickle of its recipe and (delayed scaling) scales and amax
    history -- and a checkpoint of the previous image's TE 2.10 holds such a
    pickle for every recipe, where the trainer image's TE
    (:data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`) writes an
    empty tensor for the stateless ones. DCP loads into the tensors it is given
    and refuses a size change ("Size mismatch between saved ... and current",
    NVIDIA/TransformerEngine#1860, open; nothing between v2.10 and
    release_v2.19 changes it), so a fresh model could never resume an fp8,
    mxfp8 or nvfp4 checkpoint. Each entry is replaced (in ``model_state``) by an
    empty tensor of the saved size and dtype; after ``dcp.load`` fills it (and
    :mod:`training.checkpoint.extra_state` has checked it), ``set_state_dict``
    hands it to the module's ``set_extra_state``, which restores the recipe,
    the scales and the amax history (or ignores a stateless recipe's pickle).

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
        if not key.endswith(compare.EXTRA_STATE_SUFFIX) or not isinstance(value, torch.Tensor):
            continue
        saved = metadata.state_dict_metadata.get(compare.MODEL_PREFIX + key)
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
    tokenizer: DataTokenizer | None = None,
    master_weights: Mapping[str, torch.Tensor] | None = None,
) -> Path | None:
    """Gather the full model to rank 0 (CPU) and write consolidated safetensors + ``config.json``, the
    tokenizer's files and ``generation_config.json`` (:func:`training.model.save_pretrained`).

    Args:
        master_weights: ``{parameter name (named_parameters'): fp32 master (DTensor or tensor)}`` of the
            parameters stored quantized (``quantized_model_init``): exported instead of their quantized values,
            as TransformerEngine's FSDP2 example exports the optimizer's masters (``fully_shard.py``).

    Collective. Returns the weights path on rank 0, None elsewhere.
    """
    from torch.distributed.tensor import DTensor

    from training.model import canonical_name, save_pretrained

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    masters = dict(master_weights or {})
    by_canonical = {canonical_name(key): key for key in state if not key.endswith("_extra_state")} if masters else {}
    for name, master in masters.items():
        full = master.full_tensor() if isinstance(master, DTensor) else master  # collective: every rank
        if rank == 0:  # the full state dict is rank 0's alone (cpu_offload)
            state[by_canonical[canonical_name(name)]] = full.detach().to("cpu", torch.float32)
    written = None
    if rank == 0:
        # TE quantized weights (quantized model init) are tensor subclasses: back to high precision first
        plain = {
            k: (v.dequantize() if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor else v)
            for k, v in state.items()
        }
        written = save_pretrained(directory, plain, config, dtype=dtype, extra=extra, tokenizer=tokenizer)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return written
