"""What a training run tells the processes that supervise it, and how it outlives their output pipe.

Pure Python (no torch): the trainer writes, the entry point and ``trainctl
train`` read, and all three guard their output streams.

The trainer's status record
---------------------------
``<base>/output/data/trainer-status.json`` (:func:`status_file`) is a
declared record of what the trainer did, so the entry point and
``trainctl train`` report a stop from what really happened rather than from
folder markers or log lines. Its states are the run states of the
metric-line contract (:data:`platform_spec.metric_lines.RUN_STATES`), and the
trainer prints each change of state as a ``[run]`` line too
(:meth:`TrainerStatus.run_record`), for readers of its output. The trainer's node-local rank 0 writes it
atomically (:func:`platform_spec.files.atomic_write_text`) after the resume decision,
when the loop starts, after every checkpoint it saves, and when it ends; the
entry point removes a stale one before it launches the workers. One JSON
object::

    {"state": "stopped",          # one of platform_spec.metric_lines.RUN_STATES
     "step": 7,                   # optimizer steps done
     "resumed_from": 6,           # the checkpoint step this run started from (null: step 0)
     "skipped": {"9": "why"},     # newer complete checkpoints that could not be loaded
     "saved": 7,                  # the newest checkpoint this run wrote (null: none)
     "reason": "SIGTERM/SIGINT received"}   # why it stopped, failed or was refused (null otherwise)

Output streams
--------------
The workers' and the entry point's stdout and stderr are a pipe to whoever
started them (``trainctl train``, a terminal). When that reader goes away (a
closed terminal, a killed ``trainctl``), a write fails with ``EPIPE`` (or
``EIO`` on a hung-up terminal) and Python raises ``BrokenPipeError`` at the
next ``print``: the run would die at its next log line and lose the work
since its last checkpoint. :func:`guarded_output` makes such a stream quietly
discard what follows instead (its file descriptor is pointed at
``/dev/null``), so training continues and the stop that follows is
checkpointed as usual.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from platform_spec.files import atomic_write_text
from platform_spec.metric_lines import RUN_STATES, RunRecord
from training.environment import SageMakerPaths

STATUS_FILE_NAME = "trainer-status.json"


class StatusError(ValueError):
    """A status record that does not follow the schema in the module docstring."""


@dataclass(frozen=True)
class TrainerStatus:
    """The trainer's status record (see the module docstring)."""

    state: str
    step: int = 0
    resumed_from: int | None = None
    skipped: dict[int, str] = field(default_factory=dict)
    saved: int | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.state not in RUN_STATES:
            raise StatusError(f"state: got {self.state!r}, expected one of {', '.join(RUN_STATES)}")

    @property
    def stopped_after(self) -> int | None:
        """The step a stop saved a checkpoint of (the run's last step), or None (no stop, or none saved)."""
        if self.state == "stopped" and self.saved is not None and self.saved == self.step:
            return self.step
        return None

    def run_record(
        self, *, device: str | None = None, device_name: str | None = None, world_size: int | None = None
    ) -> RunRecord:
        """This status as the run's declared ``[run]`` line (:class:`platform_spec.metric_lines.RunRecord`), with
        the device it trains on when known: what the trainer prints when its state changes."""
        return RunRecord(
            self.state,
            step=self.step,
            device=device,
            device_name=device_name,
            world_size=world_size,
            resumed_from=self.resumed_from,
            saved=self.saved,
            reason=self.reason,
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["skipped"] = {str(k): v for k, v in self.skipped.items()}
        return out

    @classmethod
    def from_json(cls, data: Any) -> TrainerStatus:
        """Parse a record.

        Raises:
            StatusError: not an object, or a field of the wrong type.
        """
        if not isinstance(data, dict):
            raise StatusError(f"expected an object, got {type(data).__name__}")

        def step(name: str, optional: bool) -> int | None:
            value = data.get(name)
            if value is None and optional:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StatusError(f"{name}: got {value!r}, expected an integer >= 0" + (" or null" if optional else ""))
            return value

        skipped = data.get("skipped") or {}
        if not isinstance(skipped, dict) or not all(k.isdigit() and isinstance(v, str) for k, v in skipped.items()):
            raise StatusError(f"skipped: got {skipped!r}, expected {{step: reason}}")
        reason = data.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise StatusError(f"reason: got {reason!r}, expected a string or null")
        state = data.get("state")
        if not isinstance(state, str):
            raise StatusError(f"state: got {state!r}, expected one of {', '.join(RUN_STATES)}")
        return cls(
            state=state,
            step=step("step", False) or 0,
            resumed_from=step("resumed_from", True),
            skipped={int(k): v for k, v in skipped.items()},
            saved=step("saved", True),
            reason=reason,
        )


def status_file(paths: SageMakerPaths) -> Path:
    """``<base>/output/data/trainer-status.json``."""
    return paths.output_data_dir / STATUS_FILE_NAME


def write_status(paths: SageMakerPaths, status: TrainerStatus) -> None:
    """Replace the record atomically (the reader sees the old or the new one, never half of one)."""
    path = status_file(paths)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(status.to_json(), indent=2) + "\n")


def read_status(paths: SageMakerPaths) -> TrainerStatus | None:
    """The record, or None when there is none (the trainer never got that far) or it is unreadable."""
    try:
        return TrainerStatus.from_json(json.loads(status_file(paths).read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):  # JSONDecodeError and StatusError are ValueErrors
        return None


def clear_status(paths: SageMakerPaths) -> None:
    """Remove a record left by an earlier run in the same base directory."""
    with contextlib.suppress(FileNotFoundError):
        status_file(paths).unlink()


# ---------------------------------------------------------------------------
# Output streams

_GONE = (errno.EPIPE, errno.EIO)
"""A pipe whose reader exited (``EPIPE``); a terminal that hung up (``EIO``)."""


class ReaderGoneStream:
    """A text stream that discards its output once its reader is gone, instead of raising.

    Wraps ``stream``; every attribute but :meth:`write` and :meth:`flush` is the
    wrapped stream's. On the first ``EPIPE``/``EIO`` the stream's file
    descriptor (when it has one) is pointed at ``/dev/null``, so later writes,
    C-level ones and the interpreter's final flush included, succeed.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def _reader_gone(self) -> None:
        self.gone = True
        with contextlib.suppress(Exception):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)

    def write(self, text: str) -> int:
        if self.gone:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        if self.gone:
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()  # the buffer now drains into /dev/null
            return
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            self._reader_gone()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """Within the block, ``sys.stdout`` and ``sys.stderr`` survive their reader going away
    (:class:`ReaderGoneStream`); the previous stream objects are put back on exit."""
    previous = sys.stdout, sys.stderr
    sys.stdout = ReaderGoneStream(sys.stdout)  # type: ignore[assignment]
    sys.stderr = ReaderGoneStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = previous


__all__ = [
    "STATUS_FILE_NAME",
    "ReaderGoneStream",
    "StatusError",
    "TrainerStatus",
    "clear_status",
    "guarded_output",
    "read_status",
    "status_file",
    "write_status",
]
