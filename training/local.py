"""Run the container's entry point locally, on a directory laid out like ``/opt/ml``.

Used by ``trainctl train``, the tests, the benchmarks and the demo: it writes
the same files SageMaker writes (``hyperparameters.json`` with string values,
``resourceconfig.json``, ``inputdataconfig.json``), links the data into
``input/data/train`` (and ``input/data/validation`` for a prepared validation split, ``input/data/init_from`` for
the Hugging Face model folder a run starts from) and runs ``python -m training.entrypoint train`` with
``SAGEMAKER_BASE_DIR`` pointing there, so a laptop run exercises the exact
code path of a SageMaker job.

The data is never removed or replaced: a channel's folder is used as it is
when it already is (or leads to) its source folder, a link this module made
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
from platform_spec.hyperparameters import INIT_CHANNEL, VALIDATION_CHANNEL, format_value
from platform_spec.metric_lines import parse_line
from training.data import SPLITS
from training.entrypoint import DELIVERED_AS, STOP_SIGNALS
from training.environment import TRAIN_CHANNEL, SageMakerPaths, host_interfaces
from training.supervision import TrainerStatus, clear_status, read_status

if TYPE_CHECKING:
    from training.checkpoint.verify import RestartPoint

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_RUN_RECORD = ".local-run.json"
"""``<base>/.local-run.json``: what this module made in a base directory (``{"<channel>_link": target}``)."""


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


LOCAL_CHANNELS: tuple[str, ...] = (TRAIN_CHANNEL, VALIDATION_CHANNEL, INIT_CHANNEL)
"""The channels a local run links to folders of the user's: token shards (train, validation) and the Hugging
Face model folder the run starts from."""


def channel_sources(
    data_dir: str | os.PathLike[str] | None = None, init_from: str | os.PathLike[str] | None = None
) -> dict[str, Path | None]:
    """Which folder each channel links to: a ``trainctl prepare-data`` output with a validation split
    (``DIR/train`` and ``DIR/validation``) gives both channels, other data the ``train`` channel (and no
    ``validation`` channel: None unlinks one this module made); ``init_from`` the ``init_from`` channel.
    A channel left out is left as it is."""
    out: dict[str, Path | None] = {}
    if data_dir is not None:
        data = Path(data_dir)
        split = all((data / name).is_dir() for name in SPLITS)
        out[TRAIN_CHANNEL] = data / TRAIN_CHANNEL if split else data
        out[VALIDATION_CHANNEL] = data / VALIDATION_CHANNEL if split else None
    if init_from is not None:
        out[INIT_CHANNEL] = Path(init_from)
    return out


def plan_link(
    paths: SageMakerPaths, channel: str, data_dir: str | os.PathLike[str] | None, *, data_exists: bool = True
) -> tuple[str, Path | None]:
    """How to expose ``data_dir`` as ``<base>/input/data/<channel>``, without removing anything.

    Args:
        data_dir: the folder; None: no such channel (a link this module made is removed, anything else kept).
        data_exists: False checks the layout for a data folder that is still to
            be written (``trainctl train --python-docs``), so a refusal comes before
            anything is written.

    Returns:
        ``(action, source)``: ``"keep"`` (the channel already is, or leads to, the
        data folder: both paths resolved; or is absent and should be), ``"link"`` (nothing there yet),
        ``"relink"`` (a link this module made earlier, to another folder) or ``"unlink"`` (a link this module
        made, where no channel should be), and the resolved data folder.

    Raises:
        LayoutError: ``data_dir`` is not a directory, contains the channel itself, or
            something else is in the way (a real folder or file, or a link this
            module did not make); the message names it and what to do (``--data``
            only where that would work: a folder).
    """
    target_dir = paths.channel_dir(channel)
    recorded = _record(paths).get(f"{channel}_link")
    if data_dir is None:
        if target_dir.is_symlink() and recorded == os.readlink(target_dir):
            return "unlink", None
        return "keep", None
    source = Path(data_dir).resolve()
    what = "model folder" if channel == INIT_CHANNEL else "data directory"
    if data_exists and not source.is_dir():
        expected = (
            "a Hugging Face model folder (config.json, model*.safetensors)"
            if channel == INIT_CHANNEL
            else "token shards from trainctl prepare-data"
        )
        raise LayoutError(f"{what} {data_dir}: {source} is not a directory (expected {expected})")
    if source == paths.base_dir or source in target_dir.parents:
        raise LayoutError(
            f"{what} {source} contains the base directory's {channel} channel {target_dir}; give the folder itself"
        )
    flag = "--init-from" if channel == INIT_CHANNEL else "--data"
    if target_dir.is_symlink():
        if target_dir.resolve() == source:
            return "keep", source
        target = os.readlink(target_dir)
        if recorded == target:
            return "relink", source
        usable = target_dir.resolve()
        instead = (
            f", or use {usable} with {flag} {usable}"
            if usable.is_dir()
            else f" (it leads to {usable}, which is not a folder)"
        )
        raise LayoutError(
            f"{target_dir} is a link to {target} that trainctl did not make; it is left as it is. "
            f"Remove the link yourself (what it points to is not touched){instead}"
        )
    if target_dir.exists():
        if target_dir.resolve() == source:
            return "keep", source
        if target_dir.is_dir():
            raise LayoutError(
                f"{target_dir} is a folder of its own, not the {what} {source}; it is left as it is. "
                f"Move it away, or use it with {flag} {target_dir}"
            )
        raise LayoutError(
            f"{target_dir} is a file, where the {channel} channel's folder goes; it is left as it is. "
            f"Move it away (for example `mv {shlex.quote(str(target_dir))} {shlex.quote(str(target_dir) + '.moved')}`), "
            "then run the same command again"
        )
    return "link", source


def _swap_link(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically (``rename(2)`` onto a link replaces the link only; onto a folder it
    fails)."""
    staging = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}.link")
    staging.symlink_to(target, target_is_directory=True)
    try:
        os.replace(staging, link)
    except OSError:
        staging.unlink()
        raise


def link_channel(paths: SageMakerPaths, channel: str, action: str, source: Path | None) -> None:
    """Carry out :func:`plan_link`'s plan for ``channel``: an atomic link swap (or the removal of this module's
    own link), recorded in ``<base>/.local-run.json`` (``"<channel>_link"``)."""
    if action == "keep":
        return
    link = paths.channel_dir(channel)
    record = _record(paths)
    if action == "unlink":
        link.unlink()
        record.pop(f"{channel}_link", None)
    else:
        assert source is not None
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            _swap_link(link, str(source))
        except OSError as exc:
            raise LayoutError(f"{link}: could not link {source} ({exc.strerror}); nothing was removed") from None
        record[f"{channel}_link"] = str(source)
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
    init_from: str | os.PathLike[str] | None = None,
    tensorboard: str | os.PathLike[str] | None = None,
) -> SageMakerPaths:
    """Lay out ``base_dir`` like ``/opt/ml``.

    Args:
        hyperparameters: written as strings (SageMaker's format); ``json_quoted``
            writes them JSON-quoted as older SageMaker SDKs do (``"\\"bf16\\""``).
        data_dir: token shards to expose as the ``train`` channel, or a ``trainctl prepare-data`` output with a
            validation split to expose as the ``train`` and ``validation`` channels (links; see
            :func:`channel_sources`, :func:`plan_link`); None leaves the channels as they are (absent
            for synthetic data).
        init_from: a Hugging Face model folder to expose as the ``init_from`` channel (the run's starting
            weights); None leaves the channel as it is.
        tensorboard: a folder for the run's TensorBoard event files (``tensorboard --logdir`` it), written as
            ``LocalPath`` (absolute) to ``input/config/tensorboardoutputconfig.json``, the file SageMaker writes
            for a job's ``TensorBoardOutputConfig`` and the trainer reads (:func:`training.tracking.tensorboard_dir`);
            None leaves that file as it is (a rerun keeps the previous run's settings).
        hosts, current_host, network_interface_name: ``resourceconfig.json``;
            the interface defaults to the loopback (:func:`loopback_interface`),
            which carries every local "host".
        input_data_config: ``inputdataconfig.json`` as given (channel name ->
            ``TrainingInputMode``, ``S3DistributionType``, ``RecordWrapperType``), for a
            caller that laid out the channels itself (the emulator's job runner); None
            derives it: a channel for each of :data:`LOCAL_CHANNELS` whose folder exists under ``input/data``.

    Returns:
        The paths of the layout. Existing checkpoints are kept (a rerun resumes).

    Raises:
        LayoutError: a channel cannot be linked without removing
            something; raised before any file is written.
    """
    paths = SageMakerPaths(Path(base_dir))
    plans = {
        channel: plan_link(paths, channel, source) for channel, source in channel_sources(data_dir, init_from).items()
    }
    events = Path(tensorboard).resolve() if tensorboard is not None else None
    if events is not None and events.exists() and not events.is_dir():
        raise LayoutError(f"{events}: not a folder; expected a folder for TensorBoard event files (made if absent)")
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
    for channel, plan in plans.items():
        link_channel(paths, channel, *plan)
    if input_data_config is not None:
        channels = {name: dict(config) for name, config in input_data_config.items()}
    else:  # a channel for each folder laid out under input/data
        for name in LOCAL_CHANNELS:
            if paths.channel_dir(name).exists():
                channels[name] = {
                    "TrainingInputMode": "File",
                    "S3DistributionType": "FullyReplicated",
                    "RecordWrapperType": "None",
                }
    paths.input_data_config_file.write_text(json.dumps(channels, indent=2) + "\n", encoding="utf-8")
    if events is not None:
        paths.tensorboard_config_file.write_text(json.dumps({"LocalPath": str(events)}) + "\n", encoding="utf-8")
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
        links: each of :data:`LOCAL_CHANNELS` -> its link's target, None when the channel was not a
            link (absent: removed again if a link was made; a real folder is never touched).
    """

    paths: SageMakerPaths
    files: dict[Path, bytes | None]
    links: dict[str, str | None]

    @classmethod
    def take(cls, paths: SageMakerPaths) -> LayoutSnapshot:
        files = {}
        for path in (
            paths.hyperparameters_file,
            paths.resource_config_file,
            paths.input_data_config_file,
            paths.tensorboard_config_file,
            paths.base_dir / LOCAL_RUN_RECORD,
        ):
            try:
                files[path] = path.read_bytes() if path.is_file() else None
            except OSError:
                files[path] = None
        return cls(paths, files, cls._links_now(paths))

    @staticmethod
    def _links_now(paths: SageMakerPaths) -> dict[str, str | None]:
        return {
            channel: os.readlink(link) if (link := paths.channel_dir(channel)).is_symlink() else None
            for channel in LOCAL_CHANNELS
        }

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
        now_links = self._links_now(self.paths)
        for channel, before_link in self.links.items():
            if now_links[channel] != before_link:
                out.append(str(self.paths.channel_dir(channel).relative_to(self.paths.base_dir)) + " (link)")
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
        now_links = self._links_now(self.paths)
        for channel, before_link in self.links.items():
            link, now = self.paths.channel_dir(channel), now_links[channel]
            if now == before_link:
                continue
            if before_link is None:
                if now is not None:  # a link made by this run where there was none
                    link.unlink()
            elif not link.exists() or link.is_symlink():  # onto a link (or nothing): replaces the link only
                _swap_link(link, before_link)
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


def worker_pid(root: int, rank: int) -> int | None:
    """The pid of the training worker of global ``rank`` below the process ``root`` (the entry point, or torchrun):
    the ``training.train`` process whose environment holds ``RANK=<rank>``, as torchrun sets it for each worker
    ("torchrun (Elastic Launch)", https://docs.pytorch.org/docs/stable/elastic/run.html, environment variables).
    ``None`` when there is none (not started yet, or ended; Linux ``/proc`` only)."""
    from training.entrypoint import child_pids

    pending = list(child_pids(root))
    while pending:
        pid = pending.pop()
        pending.extend(child_pids(pid))
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ and b"training.train" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    return None


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
    "LOCAL_CHANNELS",
    "LOCAL_RUN_RECORD",
    "InterruptedRun",
    "LayoutError",
    "LayoutSnapshot",
    "LocalRun",
    "channel_sources",
    "entrypoint_command",
    "follow",
    "interrupted_run",
    "kill_tree",
    "link_channel",
    "local_environment",
    "loopback_interface",
    "plan_link",
    "prepare_base_dir",
    "read_failure",
    "read_metrics",
    "run_local",
    "start_local",
]
