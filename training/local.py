"""Run the container's entry point locally, on a directory laid out like ``/opt/ml``.

Used by ``trainctl train``, the tests, the benchmarks and the demo: it writes
the same files SageMaker writes (``hyperparameters.json`` with string values,
``resourceconfig.json``, ``inputdataconfig.json``), links the data into
``input/data/train`` and runs ``python -m training.entrypoint train`` with
``SAGEMAKER_BASE_DIR`` pointing there, so a laptop run exercises the exact
code path of a SageMaker job.

Pure Python (no torch): the heavy lifting happens in the child processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.environment import SageMakerPaths
from training.hyperparameters import format_value
from training.metric_lines import parse_line

REPO_ROOT = Path(__file__).resolve().parent.parent


def prepare_base_dir(
    base_dir: str | os.PathLike[str],
    hyperparameters: Mapping[str, Any],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    hosts: Sequence[str] = ("algo-1",),
    current_host: str = "algo-1",
    json_quoted: bool = False,
) -> SageMakerPaths:
    """Lay out ``base_dir`` like ``/opt/ml``.

    Args:
        hyperparameters: written as strings (SageMaker's format); ``json_quoted``
            writes them JSON-quoted as older SageMaker SDKs do (``"\\"bf16\\""``).
        data_dir: token shards to expose as the ``train`` channel (symlinked);
            None leaves the channel as it is (absent for synthetic data).
        hosts, current_host: ``resourceconfig.json``.

    Returns:
        The paths of the layout. Existing checkpoints are kept (a rerun resumes).
    """
    paths = SageMakerPaths(Path(base_dir).resolve())
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    values = {k: format_value(v) for k, v in hyperparameters.items()}
    if json_quoted:
        values = {k: json.dumps(v) for k, v in values.items()}
    paths.hyperparameters_file.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
    resource = {"current_host": current_host, "hosts": list(hosts), "network_interface_name": "eth0"}
    paths.resource_config_file.write_text(json.dumps(resource, indent=2) + "\n", encoding="utf-8")
    channels: dict[str, Any] = {}
    if data_dir is not None:
        src = Path(data_dir).resolve()
        train = paths.train_dir
        train.parent.mkdir(parents=True, exist_ok=True)
        if train.is_symlink() or train.is_file():
            train.unlink()
        elif train.is_dir():
            import shutil

            shutil.rmtree(train)
        train.symlink_to(src, target_is_directory=True)
    if paths.train_dir.exists():
        channels["train"] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
    paths.input_data_config_file.write_text(json.dumps(channels, indent=2) + "\n", encoding="utf-8")
    for folder in (paths.checkpoint_dir, paths.model_dir, paths.output_data_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return paths


def entrypoint_command() -> list[str]:
    """What the image's ``ENTRYPOINT`` + ``train`` runs."""
    return [sys.executable, "-m", "training.entrypoint", "train"]


def local_environment(base_dir: str | os.PathLike[str], nproc: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
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
) -> subprocess.Popen:
    """Lay out ``base_dir`` (when ``hyperparameters`` is given) and start the entry point.

    With ``capture`` the child's stdout and stderr are one text pipe (``proc.stdout``).
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
    )


@dataclass
class LocalRun:
    """A finished local run: exit status, output lines, parsed metric lines."""

    returncode: int
    lines: list[str] = field(default_factory=list)
    interrupted_at: int | None = None

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


def follow(
    proc: subprocess.Popen,
    *,
    stop_at_step: int | None = None,
    stop_signal: int = signal.SIGTERM,
    echo: Callable[[str], None] | None = None,
    timeout: float | None = None,
) -> LocalRun:
    """Read a started run to the end; send ``stop_signal`` once a metric line reaches ``stop_at_step``.

    This is how SageMaker stops a job: the signal goes to the entry point
    (the container's PID 1), which forwards it to the workers.
    ``timeout`` (seconds, whole run): past it the run and its workers are
    killed (SIGKILL) and the return code is negative.
    """
    run = LocalRun(returncode=0)
    assert proc.stdout is not None, "start the run with capture=True"
    watchdog = threading.Timer(timeout, kill_tree, [proc.pid]) if timeout is not None else None
    if watchdog is not None:
        watchdog.daemon = True
        watchdog.start()
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
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
) -> LocalRun:
    """Lay out ``base_dir``, run the entry point to the end (optionally SIGTERM it at a step).

    ``hyperparameters`` None runs an already laid-out ``base_dir`` as it is.

    Returns:
        :class:`LocalRun` with the exit status and every output line.
    """
    proc = start_local(base_dir, hyperparameters, data_dir=data_dir, nproc=nproc, env=env)
    try:
        return follow(proc, stop_at_step=stop_at_step, echo=echo, timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
    from training.data import prepare_data

    root = Path(workdir)
    data = root / "data"
    if not any(data.glob("shard-*.bin")):
        prepare_data(data, [python_docs_corpus(root / "python-docs.jsonl")])
    hp = dict(DEMO_HYPERPARAMETERS if hyperparameters is None else hyperparameters)
    base = root / "opt_ml"
    stopped = run_local(base, hp, data_dir=data, nproc=nproc, stop_at_step=stop_at_step, echo=echo)
    match = re.search(r"stopped after step (\d+)", stopped.output)
    resumed = run_local(base, hp, data_dir=data, nproc=nproc, echo=echo)
    losses = [(int(r["step"]), float(r["loss"])) for r in read_metrics(base) if r.get("loss") is not None]
    return InterruptedRun(base, stopped, resumed, int(match.group(1)) if match else 0, losses)


__all__ = [
    "DEMO_HYPERPARAMETERS",
    "InterruptedRun",
    "LocalRun",
    "entrypoint_command",
    "follow",
    "interrupted_run",
    "kill_tree",
    "local_environment",
    "prepare_base_dir",
    "read_failure",
    "read_metrics",
    "run_local",
    "start_local",
]
