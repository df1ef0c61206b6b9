"""Run the container's entry point locally, on a directory laid out like ``/opt/ml``.

Used by ``trainctl train``, the tests, the benchmarks and the demo: it writes
the same files SageMaker writes (``hyperparameters.json`` with string values,
``resourceconfig.json``, ``inputdataconfig.json``), links the data into
``input/data/train`` and runs ``python -m training.entrypoint train`` with
``SAGEMAKER_BASE_DIR`` pointing there, so a laptop run exercises the exact
code path of a SageMaker job.

The data is never removed or replaced: ``input/data/train`` is used as it is
when it already is (or leads to) the data folder, a link this module made
earlier (recorded in ``<base>/.local-run.json``) is replaced atomically, and
anything else in the way (a real folder, a file, a link someone else made)
is refused with :class:`LayoutError` before any file is written.

Pure Python (no torch) to lay out and start a run; finding the checkpoint
a restart resumes after a run imports :mod:`training.checkpoint.verify`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_spec.files import atomic_write_bytes
from platform_spec.hyperparameters import VALIDATION_CHANNEL, format_value
from platform_spec.metric_lines import parse_line
from training.entrypoint import DELIVERED_AS, STOP_SIGNALS
from training.environment import TRAIN_CHANNEL, SageMakerPaths, host_interfaces
from training.supervision import TrainerStatus, clear_status, read_status

if TYPE_CHECKING:
    from training.checkpoint.verify import RestartPoint

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_RUN_RECORD = ".local-run.json"
"""``<base>/.local-run.json``: what this module made in a base directory (``{"train_link": target}``)."""


class LayoutError(ValueError):
    """The base directory cannot be laid out without removing or replacing something the user put there."""


def loopback_interface() -> str:
    """This host's loopback interface (``lo`` on Linux, ``lo0`` on macOS): every local "host" is this machine."""
    return next((name for name in host_interfaces() or [] if name.startswith("lo")), "lo")


def _record(paths: SageMakerPaths) -> dict[str, Any]:
    path = paths.base_dir / LOCAL_RUN_RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def plan_train_link(
    paths: SageMakerPaths, data_dir: str | os.PathLike[str], *, data_exists: bool = True
) -> tuple[str, Path]:
    """How to expose ``data_dir`` as ``<base>/input/data/train``, without removing anything.

    Args:
        data_exists: False checks the layout for a data folder that is still to
            be written (``trainctl train --python-docs``), so a refusal comes before
            anything is written.

    Returns:
        ``(action, source)``: ``"keep"`` (the channel already is, or leads to, the
        data folder: both paths resolved), ``"link"`` (nothing there yet) or
        ``"relink"`` (a link this module made earlier, to another folder), and the
        resolved data folder.

    Raises:
        LayoutError: ``data_dir`` is not a directory, contains the channel itself, or
            something else is in the way (a real folder or file, or a link this
            module did not make); the message names it and what to do (``--data``
            only where that would work: a folder).
    """
    source = Path(data_dir).resolve()
    if data_exists and not source.is_dir():
        raise LayoutError(
            f"data directory {data_dir}: {source} is not a directory (expected token shards from trainctl prepare-data)"
        )
    train = paths.train_dir
    if source == paths.base_dir or source in train.parents:
        raise LayoutError(
            f"data directory {source} contains the base directory's train channel {train}; give the shard folder itself"
        )
    if train.is_symlink():
        if train.resolve() == source:
            return "keep", source
        target = os.readlink(train)
        if _record(paths).get("train_link") == target:
            return "relink", source
        usable = train.resolve()
        instead = (
            f", or train on {usable} with --data {usable}"
            if usable.is_dir()
            else f" (it leads to {usable}, which is not a folder)"
        )
        raise LayoutError(
            f"{train} is a link to {target} that trainctl did not make; it is left as it is. "
            f"Remove the link yourself (what it points to is not touched){instead}"
        )
    if train.exists():
        if train.resolve() == source:
            return "keep", source
        if train.is_dir():
            raise LayoutError(
                f"{train} is a folder of its own, not the data directory {source}; it is left as it is. "
                f"Move it away, or train on it with --data {train}"
            )
        raise LayoutError(
            f"{train} is a file, where the train channel's folder goes; it is left as it is. "
            f"Move it away (for example `mv {shlex.quote(str(train))} {shlex.quote(str(train) + '.moved')}`), "
            "then run the same command again"
        )
    return "link", source


def link_train_channel(paths: SageMakerPaths, action: str, source: Path) -> None:
    """Carry out :func:`plan_train_link`'s plan: an atomic link swap (``rename(2)`` onto a link
    replaces the link only; onto a folder it fails), recorded in ``<base>/.local-run.json``."""
    if action == "keep":
        return
    train = paths.train_dir
    train.parent.mkdir(parents=True, exist_ok=True)
    staging = train.with_name(f".{train.name}.{os.getpid()}.{threading.get_ident()}.link")
    staging.symlink_to(source, target_is_directory=True)
    try:
        os.replace(staging, train)
    except OSError as exc:
        staging.unlink()
        raise LayoutError(
            f"{train}: could not link the data directory {source} ({exc.strerror}); nothing was removed"
        ) from None
    record = {**_record(paths), "train_link": str(source)}
    (paths.base_dir / LOCAL_RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def prepare_base_dir(
    base_dir: str | os.PathLike[str],
    hyperparameters: Mapping[str, Any],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    hosts: Sequence[str] = ("algo-1",),
    current_host: str = "algo-1",
    network_interface_name: str | None = None,
    json_quoted: bool = False,
    input_data_config: Mapping[str, Mapping[str, Any]] | None = None,
) -> SageMakerPaths:
    """Lay out ``base_dir`` like ``/opt/ml``.

    Args:
        hyperparameters: written as strings (SageMaker's format); ``json_quoted``
            writes them JSON-quoted as older SageMaker SDKs do (``"\\"bf16\\""``).
        data_dir: token shards to expose as the ``train`` channel (a link; see
            :func:`plan_train_link`); None leaves the channel as it is (absent
            for synthetic data).
        hosts, current_host, network_interface_name: ``resourceconfig.json``;
            the interface defaults to the loopback (:func:`loopback_interface`),
            which carries every local "host".
        input_data_config: ``inputdataconfig.json`` as given (channel name ->
            ``TrainingInputMode``, ``S3DistributionType``, ``RecordWrapperType``), for a
            caller that laid out the channels itself (the emulator's job runner); None
            derives it: a ``train`` channel when ``input/data/train`` exists, and a ``validation`` channel
            when ``input/data/validation`` does.

    Returns:
        The paths of the layout. Existing checkpoints are kept (a rerun resumes).

    Raises:
        LayoutError: the ``train`` channel cannot be linked without removing
            something; raised before any file is written.
    """
    paths = SageMakerPaths(Path(base_dir))
    plan = plan_train_link(paths, data_dir) if data_dir is not None else None
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    values = {k: format_value(v) for k, v in hyperparameters.items()}
    if json_quoted:
        values = {k: json.dumps(v) for k, v in values.items()}
    paths.hyperparameters_file.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
    resource = {
        "current_host": current_host,
        "hosts": list(hosts),
        "network_interface_name": network_interface_name or loopback_interface(),
    }
    paths.resource_config_file.write_text(json.dumps(resource, indent=2) + "\n", encoding="utf-8")
    channels: dict[str, Any] = {}
    if plan is not None:
        link_train_channel(paths, *plan)
    if input_data_config is not None:
        channels = {name: dict(config) for name, config in input_data_config.items()}
    else:  # a channel for each folder laid out under input/data (train, and validation when the caller made it)
        for name in (TRAIN_CHANNEL, VALIDATION_CHANNEL):
            if paths.channel_dir(name).exists():
                channels[name] = {
                    "TrainingInputMode": "File",
                    "S3DistributionType": "FullyReplicated",
                    "RecordWrapperType": "None",
                }
    paths.input_data_config_file.write_text(json.dumps(channels, indent=2) + "\n", encoding="utf-8")
    for folder in (paths.checkpoint_dir, paths.model_dir, paths.output_data_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return paths


@dataclass
class LayoutSnapshot:
    """What :func:`prepare_base_dir` rewrites in a base directory, as it was before (:meth:`take`).

    ``trainctl train`` puts it back (:meth:`restore`) when the run it started
    was refused because the checkpoint belongs to another run, so the refused
    settings do not stay behind to refuse the next plain rerun too.

    Attributes:
        files: the config files and ``.local-run.json``: their bytes, None when absent.
        train_link: the train channel link's target, None when the channel was not a
            link (absent: removed again if a link was made; a real folder is never touched).
    """

    paths: SageMakerPaths
    files: dict[Path, bytes | None]
    train_link: str | None

    @classmethod
    def take(cls, paths: SageMakerPaths) -> LayoutSnapshot:
        files = {}
        for path in (
            paths.hyperparameters_file,
            paths.resource_config_file,
            paths.input_data_config_file,
            paths.base_dir / LOCAL_RUN_RECORD,
        ):
            try:
                files[path] = path.read_bytes() if path.is_file() else None
            except OSError:
                files[path] = None
        train = paths.train_dir
        return cls(paths, files, os.readlink(train) if train.is_symlink() else None)

    def _link_now(self) -> str | None:
        train = self.paths.train_dir
        return os.readlink(train) if train.is_symlink() else None

    def changed(self) -> list[str]:
        """What differs from the snapshot now (names relative to the base directory)."""
        out = []
        for path, before in self.files.items():
            try:
                now = path.read_bytes() if path.is_file() else None
            except OSError:
                now = None
            if now != before:
                out.append(str(path.relative_to(self.paths.base_dir)))
        if self._link_now() != self.train_link:
            out.append(str(self.paths.train_dir.relative_to(self.paths.base_dir)) + " (link)")
        return out

    def restore(self) -> list[str]:
        """Put back what changed; returns what was put back (see :meth:`changed`)."""
        changed = self.changed()
        for path, before in self.files.items():
            if before is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            atomic_write_bytes(path, before)
        train = self.paths.train_dir
        now = self._link_now()
        if now != self.train_link:
            if self.train_link is None:
                if now is not None:  # a link made by this run where there was none
                    train.unlink()
            else:
                staging = train.with_name(f".{train.name}.{os.getpid()}.{threading.get_ident()}.link")
                staging.symlink_to(self.train_link, target_is_directory=True)
                os.replace(staging, train)  # onto a link: replaces the link only
        return changed


def entrypoint_command() -> list[str]:
    """What the image's ``ENTRYPOINT`` + ``train`` runs."""
    return [sys.executable, "-m", "training.entrypoint", "train"]


def local_environment(
    base_dir: str | os.PathLike[str], nproc: int, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    out = dict(os.environ)
    out.update(env or {})
    out["SAGEMAKER_BASE_DIR"] = str(Path(base_dir).resolve())
    out["TRAINER_NPROC_PER_NODE"] = str(nproc)
    out["PYTHONUNBUFFERED"] = "1"
    root = str(REPO_ROOT)
    out["PYTHONPATH"] = root + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    return out


def start_local(
    base_dir: str | os.PathLike[str],
    hyperparameters: Mapping[str, Any] | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    nproc: int = 2,
    env: Mapping[str, str] | None = None,
    capture: bool = True,
    new_session: bool = False,
) -> subprocess.Popen:
    """Lay out ``base_dir`` (when ``hyperparameters`` is given) and start the entry point.

    With ``capture`` the child's stdout and stderr are one text pipe (``proc.stdout``).
    ``new_session`` starts it in its own session, so a terminal's Ctrl-C reaches only
    the caller, which then relays the stop (:func:`follow` with ``supervise``).
    """
    if hyperparameters is not None:
        prepare_base_dir(base_dir, hyperparameters, data_dir=data_dir)
    return subprocess.Popen(
        entrypoint_command(),
        env=local_environment(base_dir, nproc, env),
        cwd=str(REPO_ROOT),
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        text=True,
        bufsize=1,
        start_new_session=new_session,
    )


@dataclass
class LocalRun:
    """A finished local run: exit status, output lines, parsed metric lines, how it was stopped.

    Attributes:
        interrupted_at: the logged step at which ``stop_at_step`` sent its signal.
        stop_signal: the first SIGINT/SIGTERM/SIGHUP a supervising :func:`follow` received
            (relayed as :attr:`relayed_signal`).
        killed: a second signal made :func:`follow` kill the run (SIGKILL) without waiting.
        status: the trainer's status record after the run (:mod:`training.supervision`;
            None: the trainer never wrote one, e.g. validation failed). :func:`run_local` reads it.
        restart: the checkpoint a restart resumes (:func:`training.checkpoint.verify.restart_point`,
            the newest that verifies); :func:`run_local` finds it after the run.
    """

    returncode: int
    lines: list[str] = field(default_factory=list)
    interrupted_at: int | None = None
    stop_signal: int | None = None
    killed: bool = False
    status: TrainerStatus | None = None
    restart: RestartPoint | None = None

    @property
    def stop_requested(self) -> bool:
        return self.interrupted_at is not None or self.stop_signal is not None

    @property
    def relayed_signal(self) -> int | None:
        """The signal the entry point got for :attr:`stop_signal` (SIGHUP goes on as SIGTERM)."""
        return None if self.stop_signal is None else DELIVERED_AS.get(self.stop_signal, self.stop_signal)

    @property
    def stopped_after(self) -> int | None:
        """The step the trainer really stopped after and saved, from its status record.

        None when no stop was requested, the run failed or was killed, or the
        stop came before the run's first step (no new checkpoint).
        """
        if not self.stop_requested or self.returncode != 0 or self.killed or self.status is None:
            return None
        return self.status.stopped_after

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def metrics(self) -> list[dict[str, float]]:
        return [m for m in (parse_line(line) for line in self.lines) if m]

    @property
    def losses(self) -> dict[int, float]:
        """``{step: loss}`` from the printed lines (4 decimals; :func:`read_metrics` has full precision)."""
        return {int(m["step"]): m["loss"] for m in self.metrics if "loss" in m}


def _say(message: str) -> None:
    """Write to stderr from a signal handler (unbuffered: no re-entrant buffered write)."""
    with contextlib.suppress(OSError):
        os.write(2, message.encode())


def follow(
    proc: subprocess.Popen,
    *,
    stop_at_step: int | None = None,
    stop_signal: int = signal.SIGTERM,
    echo: Callable[[str], None] | None = None,
    timeout: float | None = None,
    supervise: bool = False,
    paths: SageMakerPaths | None = None,
) -> LocalRun:
    """Read a started run to the end; send ``stop_signal`` once a metric line reaches ``stop_at_step``.

    This is how SageMaker stops a job: the signal goes to the entry point
    (the container's PID 1), which relays it to the workers.
    ``timeout`` (seconds, whole run): past it the run and its workers are
    killed (SIGKILL) and the return code is negative.

    ``supervise`` (main thread only; start the run with ``new_session``): a
    SIGINT (Ctrl-C), SIGTERM or SIGHUP (the terminal closed; relayed as
    SIGTERM) sent to this process is relayed to the entry point, and this
    call still returns only once the run has exited, i.e. after the workers
    wrote their checkpoint. A second signal kills the run and its workers
    (SIGKILL) at once; both are said on stderr (``paths``: the run's base
    directory, whose status record tells whether a training step has begun,
    i.e. whether the stop will save a checkpoint).
    """
    run = LocalRun(returncode=0)
    assert proc.stdout is not None, "start the run with capture=True"
    watchdog = threading.Timer(timeout, kill_tree, [proc.pid]) if timeout is not None else None
    if watchdog is not None:
        watchdog.daemon = True
        watchdog.start()

    def relay(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if run.stop_signal is None:
            run.stop_signal = signum
            status = read_status(paths) if paths is not None else None
            what = f"{name} received" + (
                " (the terminal went away; handled as SIGTERM)" if signum == signal.SIGHUP else ""
            )
            if status is not None and status.state == "training":
                then = "the workers finish the step in flight and save a checkpoint before it exits"
            else:
                then = (
                    "no training step has begun, so there is nothing to save; it exits once its processes have stopped"
                )
            _say(f"\n{what}: stopping the run as SageMaker does; {then} (a second Ctrl-C kills it without saving)\n")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(DELIVERED_AS.get(signum, signum))
        elif not run.killed:
            run.killed = True
            _say(
                f"\n{name} received again: killing the run and its workers (SIGKILL) without waiting for a checkpoint; "
                "the newest complete checkpoint stays usable, a half-written one is removed at the next start\n"
            )
            kill_tree(proc.pid)

    previous: dict[int, Any] = {}
    if supervise and threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, relay) for sig in STOP_SIGNALS}
    try:
        for line in proc.stdout:
            run.lines.append(line)
            if echo is not None:
                echo(line)
            if stop_at_step is not None and run.interrupted_at is None:
                values = parse_line(line)
                if values and values.get("step", 0) >= stop_at_step:
                    run.interrupted_at = int(values["step"])
                    proc.send_signal(stop_signal)
        run.returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watchdog is not None:
            watchdog.cancel()
    return run


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (Linux ``/proc``; ``pid`` alone elsewhere)."""
    from training.entrypoint import child_pids

    pending, seen = [pid], []
    while pending:
        current = pending.pop()
        seen.append(current)
        pending.extend(child_pids(current))
    for victim in reversed(seen):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def run_local(
    base_dir: str | os.PathLike[str],
    hyperparameters: Mapping[str, Any] | None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    nproc: int = 2,
    env: Mapping[str, str] | None = None,
    stop_at_step: int | None = None,
    echo: Callable[[str], None] | None = None,
    timeout: float | None = None,
    supervise: bool = False,
) -> LocalRun:
    """Lay out ``base_dir``, run the entry point to the end (optionally SIGTERM it at a step).

    ``hyperparameters`` None runs an already laid-out ``base_dir`` as it is.
    ``supervise``: relay this process's SIGINT/SIGTERM and wait for the run's
    checkpoint (see :func:`follow`).

    Returns:
        :class:`LocalRun` with the exit status, every output line, the trainer's
        status record (:attr:`LocalRun.stopped_after`) and the checkpoint a
        restart resumes (:attr:`LocalRun.restart`).

    Raises:
        LayoutError: see :func:`prepare_base_dir`.
    """
    paths = SageMakerPaths(Path(base_dir))
    clear_status(paths)  # the entry point does too; this one also covers an entry point killed before it
    proc = start_local(paths.base_dir, hyperparameters, data_dir=data_dir, nproc=nproc, env=env, new_session=supervise)
    try:
        run = follow(proc, stop_at_step=stop_at_step, echo=echo, timeout=timeout, supervise=supervise, paths=paths)
    finally:
        if proc.poll() is None:  # an exception here (the reader went away...): leave no worker behind
            kill_tree(proc.pid)
            proc.wait()
    from training.checkpoint.verify import restart_point  # imports torch: only after the run

    run.status = read_status(paths)
    run.restart = restart_point(paths.checkpoint_dir)
    return run


def read_metrics(base_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The full-precision metric records of ``<base>/output/data/metrics.jsonl`` (all runs, in order)."""
    path = SageMakerPaths(Path(base_dir)).metrics_file
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_failure(base_dir: str | os.PathLike[str]) -> str | None:
    """The one-line failure reason, or None."""
    path = SageMakerPaths(Path(base_dir)).failure_file
    return path.read_text(encoding="utf-8").strip() if path.exists() else None


DEMO_HYPERPARAMETERS: dict[str, Any] = {
    "model": "gpt-tiny",
    "precision": "fp32",
    "batch_size": 8,
    "seq_length": 128,
    "max_steps": 40,
    "warmup_steps": 4,
    "learning_rate": 3e-3,
    "min_learning_rate": 3e-4,
    "log_interval": 5,
    "checkpoint_interval": 10,
    "keep_checkpoints": 2,
}
"""A short CPU run on CPython's docs: ~20 s on two cores."""


@dataclass
class InterruptedRun:
    """What :func:`interrupted_run` did: the stopped run, the resumed run and the whole loss curve."""

    base_dir: Path
    stopped: LocalRun
    resumed: LocalRun
    stopped_at_step: int  # the step of the SIGTERM checkpoint (0: the first run was not stopped)
    losses: list[tuple[int, float]]

    @property
    def ok(self) -> bool:
        return self.stopped.returncode == 0 and self.resumed.returncode == 0


def interrupted_run(
    workdir: str | os.PathLike[str],
    *,
    hyperparameters: Mapping[str, Any] | None = None,
    stop_at_step: int = 15,
    nproc: int = 2,
    echo: Callable[[str], None] | None = None,
) -> InterruptedRun:
    """Train on CPython's docs through the entry point, SIGTERM it at a step, restart it to the end.

    Lays out ``<workdir>/data`` (byte-level shards) and ``<workdir>/opt_ml``
    (the ``SAGEMAKER_BASE_DIR``). The second run resumes from the checkpoint the
    first one wrote on SIGTERM. ``losses`` are ``(step, loss)`` at full
    precision from ``output/data/metrics.jsonl``, both runs together.
    """
    from training.corpus import python_docs_corpus
    from training.prepare import prepare_data

    root = Path(workdir)
    data = root / "data"
    if not any(data.glob("shard-*.bin")):
        prepare_data(data, [python_docs_corpus(root / "python-docs.jsonl")])
    hp = dict(DEMO_HYPERPARAMETERS if hyperparameters is None else hyperparameters)
    base = root / "opt_ml"
    stopped = run_local(base, hp, data_dir=data, nproc=nproc, stop_at_step=stop_at_step, echo=echo)
    resumed = run_local(base, hp, data_dir=data, nproc=nproc, echo=echo)
    losses = [(int(r["step"]), float(r["loss"])) for r in read_metrics(base) if r.get("loss") is not None]
    return InterruptedRun(base, stopped, resumed, stopped.stopped_after or 0, losses)


__all__ = [
    "DEMO_HYPERPARAMETERS",
    "LOCAL_RUN_RECORD",
    "InterruptedRun",
    "LayoutError",
    "LayoutSnapshot",
    "LocalRun",
    "entrypoint_command",
    "follow",
    "interrupted_run",
    "kill_tree",
    "link_train_channel",
    "local_environment",
    "loopback_interface",
    "plan_train_link",
    "prepare_base_dir",
    "read_failure",
    "read_metrics",
    "run_local",
    "start_local",
]
