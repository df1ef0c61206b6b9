"""The trainer's watchdog: no progress within a limit is a hang, and every waiting rank acts on it.

A wedged collective or a stuck rank does not end a job: the ranks wait, the ``[metrics]`` lines stop, the
job stays ``InProgress``. Each rank runs a :class:`Watchdog` (a daemon thread, :meth:`Watchdog.start`) that
the training loop tells what it is doing (:meth:`Watchdog.phase`: ``setup``, ``resume``, ``step``,
``evaluate``, ``save``, ``export``) and what it finished (:meth:`Watchdog.progress`: a completed optimizer
step, evaluation or checkpoint save). The limit on the time since the last progress
(:meth:`ProgressClock.limit`):

* before the first step completes (setup, Hugging Face weight load, resume, first step): the fixed
  ``watchdog_first_step_minutes``;
* a step after the first: ``max(watchdog_minutes, watchdog_step_time_factor x the slowest of the last 100
  step times)``;
* an evaluation or a checkpoint save: the same rule over the times of that phase in this job; one not timed
  yet in this job (the first evaluation, the first save, the export), ``watchdog_first_step_minutes``. An
  asynchronous save's phase times only its staging; its background write time joins the save times when it
  is marked complete (:meth:`ProgressClock.observe`), so a synchronous save after it (at the end, at a stop),
  which writes as much while training waits, is held to its write time, not to the staging's.

0 turns a limit off. When the limit passes (:func:`act_on_hang`), the rank writes every Python thread's
stack (:func:`faulthandler.dump_traceback`, ``all_threads``) to ``<base>/output/data/watchdog/rank-<r>-stacks.txt``
(SageMaker uploads ``output/data`` as ``output.tar.gz``), the failure report headed by
:data:`platform_spec.health.HANG_REASON`, the status record and ``[run]`` line ``failed``, then the flight
recorders of the process groups (:func:`dump_flight_recorders`), and exits 1 with :func:`os._exit`: its
main thread is stuck in a collective, so no exception can unwind it. The entry point then ends the other
workers (:func:`training.entrypoint.end_hung_workers`), so the job ends Failed within seconds of the first
rank's report, not after the collective timeout.

Flight recorder (torch 2.13, ``torch._C._distributed_c10d``): ``_dump_nccl_trace(includeCollectives,
includeStackTraces, onlyActive)`` (CUDA builds: NCCL's recorder, a pickle the ``torchfrtrace`` analyzer
reads) and ``_dump_fr_trace_json(includeCollectives, onlyActive)`` (every build: the recorder of the other
backends, gloo included), both sized by ``TORCH_FR_BUFFER_SIZE`` (entries; torch 2.13 reads the older
``TORCH_NCCL_TRACE_BUFFER_SIZE`` with a deprecation warning). The image sets it (``training/Dockerfile``).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform_spec.health import HANG_REASON
from platform_spec.hyperparameters import Hyperparameters
from training.environment import SageMakerPaths, write_failure

WINDOW = 100
"""How many recent times of a phase the limit looks at (the slowest of them)."""
TIMED_PHASES = ("step", "evaluate", "save")
"""The phases whose completion is progress; their times set their limits once measured."""
UNTIMED_PHASES = ("setup", "resume", "export")
"""Phases that run once a job, under the fixed first limit."""
POLL_S = 1.0
"""How often, in seconds, the watchdog thread compares the time since the last progress with the limit."""
FLIGHT_RECORDER_WAIT_S = 60.0
"""How long a rank waits for its flight recorders' dump before it exits anyway (seconds)."""
DUMP_FOLDER = "watchdog"
"""The folder under ``output/data`` that holds each rank's stacks and flight-recorder dumps."""


@dataclass(frozen=True)
class WatchdogLimits:
    """The watchdog's settings in seconds (None: that limit is off); see the module docstring."""

    first_s: float | None
    floor_s: float | None
    factor: float

    @classmethod
    def from_hyperparameters(cls, hp: Hyperparameters) -> WatchdogLimits:
        return cls(
            first_s=hp.watchdog_first_step_minutes * 60.0 or None,
            floor_s=hp.watchdog_minutes * 60.0 or None,
            factor=hp.watchdog_step_time_factor,
        )


@dataclass(frozen=True)
class Stall:
    """No progress within the limit: what the rank was doing and for how long.

    Attributes:
        phase: one of :data:`TIMED_PHASES` or :data:`UNTIMED_PHASES`.
        step: optimizer steps completed when it stalled.
        waited_s: seconds since the last progress (or the start).
        limit_s: the limit that passed.
        rule: how the limit was set, in words.
    """

    phase: str
    step: int
    waited_s: float
    limit_s: float
    rule: str

    def what(self) -> str:
        """What did not complete, and for how long, in words."""
        waited = f"{self.waited_s:.0f} s"
        if self.phase == "evaluate":
            return f"the evaluation after step {self.step} did not complete in {waited}"
        if self.phase == "save":
            return f"the checkpoint save of step-{self.step} did not complete in {waited}"
        if self.phase == "export":
            return f"the export of the final weights after step {self.step} did not complete in {waited}"
        if self.step == 0 or self.phase in ("setup", "resume"):
            doing = {"setup": "setting up", "resume": "resuming"}.get(self.phase, "in the first step")
            return f"no step completed in {waited} since the start ({doing})"
        return f"no step completed in {waited} after step {self.step}"

    def report(self, stacks: str) -> str:
        """The failure report: ``"<HANG_REASON>: no step completed in 312 s after step 41 (limit 300 s: ...);
        stacks in output/data/watchdog/"``. ``stacks``: where they are, relative to ``<base>``."""
        return f"{HANG_REASON}: {self.what()} (limit {self.limit_s:.0f} s: {self.rule}); stacks in {stacks}"


class ProgressClock:
    """The watchdog's rule, without a thread: what the trainer is doing, its progress, and the limit.

    Args:
        limits: the settings.
        clock: seconds, monotonic (injected in tests).
    """

    def __init__(self, limits: WatchdogLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.current = "setup"
        self.step = 0
        self.steps_done = 0
        """Steps completed in this job (the first is what ends the fixed first limit)."""
        self.last_progress = clock()
        self.phase_start = self.last_progress
        self.times: dict[str, deque[float]] = {name: deque(maxlen=WINDOW) for name in TIMED_PHASES}
        self._lock = threading.Lock()

    def phase(self, name: str, step: int | None = None) -> None:
        """The trainer starts ``name`` (one of :data:`TIMED_PHASES` + :data:`UNTIMED_PHASES`) at ``step`` (optimizer
        steps done; None: unchanged). The clock of the limit keeps running from the last progress.

        Raises:
            ValueError: an unknown phase.
        """
        if name not in TIMED_PHASES + UNTIMED_PHASES:
            raise ValueError(f"phase: got {name!r}, expected one of {', '.join(TIMED_PHASES + UNTIMED_PHASES)}")
        with self._lock:
            self.current = name
            self.phase_start = self.clock()
            if step is not None:
                self.step = step

    def progress(self, step: int) -> float:
        """The current phase (a step, evaluation or save) completed, with ``step`` optimizer steps done; returns
        its time in seconds (from :meth:`phase`), which joins the phase's recent times."""
        with self._lock:
            now = self.clock()
            seconds = now - self.phase_start
            if self.current in self.times:
                self.times[self.current].append(seconds)
            if self.current == "step":
                self.steps_done += 1
            self.step = step
            self.last_progress = now
            return seconds

    def observe(self, name: str, seconds: float) -> None:
        """A time of phase ``name`` (one of :data:`TIMED_PHASES`) measured outside it joins the phase's recent
        times: an asynchronous checkpoint's background write (its ``save`` phase timed only the staging), which a
        later synchronous save of a state of the same size takes too.

        Raises:
            ValueError: a phase that is not timed.
        """
        if name not in TIMED_PHASES:
            raise ValueError(f"observe: got {name!r}, expected one of {', '.join(TIMED_PHASES)}")
        with self._lock:
            self.times[name].append(seconds)

    def limit(self) -> tuple[float, str] | None:
        """The limit on the time since the last progress in the current phase, in seconds, and its rule in
        words; None when off."""
        first, floor, factor = self.limits.first_s, self.limits.floor_s, self.limits.factor
        times = self.times.get(self.current)
        if self.steps_done == 0 or not times:
            if first is None:
                return None
            why = "before the first step" if self.steps_done == 0 else f"the first {self.current} of this job"
            return first, f"watchdog_first_step_minutes={first / 60:g}, {why}"
        if floor is None:
            return None
        slowest = max(times)
        name = {"step": "steps", "evaluate": "evaluations", "save": "checkpoint saves"}[self.current]
        rule = (
            f"the larger of watchdog_minutes={floor / 60:g} and watchdog_step_time_factor={factor:g} x the slowest "
            f"of the last {len(times)} {name} ({slowest:.1f} s)"
        )
        return max(floor, factor * slowest), rule

    def overdue(self) -> Stall | None:
        """A :class:`Stall` when the time since the last progress is past the current limit, else None."""
        with self._lock:
            limit = self.limit()
            waited = self.clock() - self.last_progress
            if limit is None or waited <= limit[0]:
                return None
            return Stall(self.current, self.step, waited, limit[0], limit[1])


class Watchdog(ProgressClock):
    """A :class:`ProgressClock` watched by a daemon thread that calls ``on_stall`` once, when it is overdue.

    Args:
        limits: the settings.
        on_stall: called from the watchdog thread with the :class:`Stall` (:func:`act_on_hang` in the
            trainer: it does not return).
        poll_s: seconds between checks.
    """

    def __init__(
        self,
        limits: WatchdogLimits,
        on_stall: Callable[[Stall], None],
        *,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(limits, clock=clock)
        self.on_stall = on_stall
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="trainer-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the run ended, or failed with its own reason); waits for the thread."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            stall = self.overdue()
            if stall is not None and not self._stop.is_set():
                self.on_stall(stall)
                return


def stacks_file(paths: SageMakerPaths, rank: int) -> Path:
    """``<base>/output/data/watchdog/rank-<rank, 5 digits>-stacks.txt``."""
    return paths.output_data_dir / DUMP_FOLDER / f"rank-{rank:05d}-stacks.txt"


def dump_stacks(path: Path, header: str) -> None:
    """Write ``header`` and every Python thread's stack (:func:`faulthandler.dump_traceback`) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header.rstrip("\n") + "\n\n")
        fh.flush()
        faulthandler.dump_traceback(file=fh, all_threads=True)


def dump_flight_recorders(folder: Path, rank: int) -> list[str]:
    """Write this rank's flight-recorder dumps into ``folder``; returns one line per recorder saying what was
    written or why not (see the module docstring for the API)."""
    import torch

    c10d = torch._C._distributed_c10d
    notes = []
    nccl = getattr(c10d, "_dump_nccl_trace", None)
    if nccl is None:
        notes.append("no NCCL flight recorder: this torch build has no NCCL (a CPU run on gloo)")
    else:
        path = folder / f"rank-{rank:05d}-nccl-flight-recorder.pkl"
        try:
            path.write_bytes(nccl(True, True, False))
            notes.append(f"NCCL flight recorder: {path.name}")
        except Exception as exc:  # a diagnostic: its failure must not replace the hang's report
            notes.append(f"NCCL flight recorder: not dumped ({type(exc).__name__}: {exc})")
    generic = getattr(c10d, "_dump_fr_trace_json", None)
    if generic is not None:
        path = folder / f"rank-{rank:05d}-flight-recorder.json"
        try:
            path.write_bytes(generic(True, False))
            notes.append(f"flight recorder (gloo and other backends): {path.name}")
        except Exception as exc:
            notes.append(f"flight recorder (gloo and other backends): not dumped ({type(exc).__name__}: {exc})")
    return notes


def act_on_hang(
    stall: Stall,
    *,
    paths: SageMakerPaths,
    rank: int,
    write_status: Callable[[str], None],
    exit: Callable[[int], Any] = os._exit,
) -> None:
    """What a rank does when its watchdog fires (see the module docstring); ends with ``exit(1)``.

    Args:
        write_status: writes the status record and ``[run]`` line ``failed`` with the report as the reason.
        exit: :func:`os._exit` (the main thread is stuck: nothing may wait for it); injected in tests.
    """
    stacks = stacks_file(paths, rank)
    relative = stacks.relative_to(paths.base_dir) if stacks.is_relative_to(paths.base_dir) else stacks
    report = stall.report(str(relative.parent) + "/")
    with contextlib.suppress(OSError):
        dump_stacks(stacks, f"rank {rank}: {report}")
    print(f"[trainer rank {rank}] watchdog: {report}", file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        write_failure(paths, report)
        write_status(report)
    done: list[str] = []
    dumper = threading.Thread(
        target=lambda: done.extend(dump_flight_recorders(stacks.parent, rank)), name="flight-recorder", daemon=True
    )
    dumper.start()
    dumper.join(FLIGHT_RECORDER_WAIT_S)
    notes = done or [f"flight recorders: no dump within {FLIGHT_RECORDER_WAIT_S:.0f} s"]
    with contextlib.suppress(OSError), open(stacks, "a", encoding="utf-8") as fh:
        fh.write("\n" + "\n".join(notes) + "\n")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    exit(1)


__all__ = [
    "DUMP_FOLDER",
    "POLL_S",
    "TIMED_PHASES",
    "UNTIMED_PHASES",
    "WINDOW",
    "ProgressClock",
    "Stall",
    "Watchdog",
    "WatchdogLimits",
    "act_on_hang",
    "dump_flight_recorders",
    "dump_stacks",
    "stacks_file",
]
