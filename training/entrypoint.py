"""The container entry point: ``<image> train`` on SageMaker, ``trainctl train`` locally.

SageMaker runs the image as ``<image> train`` and sets nothing but files under
``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``; see :mod:`training.environment`)
and, on a training plan, ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``.
This module:

1. reads ``hyperparameters.json`` (values as strings, JSON-quoted ones from
   older SDKs accepted) overlaid with ``SM_HP_*`` variables (the guide's
   ``train.sh`` interface), ``resourceconfig.json`` and ``inputdataconfig.json``;
2. validates everything *before launching anything*: hyperparameter values,
   the ``train`` channel and its token shards (unless ``synthetic_data``), and
   that the precision can run on this host's device type. On error it writes a
   one-line reason to ``<base>/output/failure`` and exits 1;
3. launches torchrun: ``--nnodes=len(hosts) --node-rank=<index of current_host>
   --master-addr=<hosts[0]>`` (single host: ``--standalone``),
   ``--nproc-per-node`` = GPUs on the host; with no GPU, CPU processes
   (``TRAINER_NPROC_PER_NODE``, default 2) on gloo. Workers run
   :mod:`training.train` with every hyperparameter as a flag;
4. forwards SIGTERM/SIGINT to the training workers (torchrun's children;
   to torchrun itself if they do not exist yet, which forwards them and waits
   ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` = 110 s before SIGKILL: SageMaker kills
   the container 120 s after its SIGTERM). The workers checkpoint and exit 0;
   so does the entry point;
5. on a worker failure without a reason written, writes a generic one.

Environment knobs (not hyperparameters: they describe the machine):
``TRAINER_NPROC_PER_NODE`` (processes per host), ``MASTER_PORT`` (multi-node
rendezvous port, default 29500).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from training.environment import (
    ConfigError,
    SageMakerPaths,
    check_train_channel,
    load_hyperparameters,
    read_input_data_config,
    read_resource_config,
    write_failure,
)
from training.hyperparameters import CPU_PRECISIONS, Hyperparameters, HyperparameterError

DEFAULT_CPU_PROCESSES = 2
DEFAULT_MASTER_PORT = 29500
SHUTDOWN_TIMEOUT_S = 110
REPO_ROOT = Path(__file__).resolve().parent.parent


def count_gpus(environ: Mapping[str, str] | None = None) -> int:
    """NVIDIA GPUs visible on this host: ``nvidia-smi -L`` (0 without it), capped by ``CUDA_VISIBLE_DEVICES``.

    Does not import torch, so validation errors come back in well under a second.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        if not entries:
            return 0
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return min(count, len(entries)) if visible is not None else count


def validate(paths: SageMakerPaths, environ: Mapping[str, str], gpus: int) -> Hyperparameters:
    """Everything that can be checked before a worker starts.

    Raises:
        HyperparameterError: a bad value (names the field and what is allowed).
        ConfigError: malformed config file, missing or unsupported data channel.
        training.data.DataError: unreadable token shards.
    """
    hp = load_hyperparameters(paths, environ)
    read_resource_config(paths)
    channels = read_input_data_config(paths)
    mode = channels.get("train", {}).get("TrainingInputMode", "File")
    if mode not in ("File", "FastFile"):
        raise ConfigError(f"channel 'train' uses TrainingInputMode={mode}; this trainer reads File or FastFile mode")
    check_train_channel(paths, hp)
    if gpus == 0 and hp.precision not in CPU_PRECISIONS:
        raise HyperparameterError(
            "precision", hp.precision,
            f"one of {', '.join(CPU_PRECISIONS)} on a host without GPUs ({hp.precision} needs an NVIDIA GPU)",
        )
    if not hp.synthetic_data:
        from training.data import TokenDataset, resolve_vocab_size
        from training.presets import get_preset

        dataset = TokenDataset(paths.train_dir)
        resolve_vocab_size(hp, get_preset(hp.model).vocab_size, dataset.vocab_size)
    return hp


def processes_per_node(environ: Mapping[str, str], gpus: int) -> int:
    """``TRAINER_NPROC_PER_NODE``, else one per GPU, else 2 CPU processes.

    Raises:
        ConfigError: a value that is not a positive integer.
    """
    raw = environ.get("TRAINER_NPROC_PER_NODE", "").strip()
    if not raw:
        return gpus or DEFAULT_CPU_PROCESSES
    try:
        nproc = int(raw)
    except ValueError:
        nproc = 0
    if nproc < 1:
        raise ConfigError(f"TRAINER_NPROC_PER_NODE={raw!r}: expected a positive integer")
    return nproc


def torchrun_command(
    hp: Hyperparameters, paths: SageMakerPaths, environ: Mapping[str, str], gpus: int
) -> list[str]:
    """The torchrun command line for this host."""
    resource = read_resource_config(paths)
    nproc = processes_per_node(environ, gpus)
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if resource.num_nodes == 1:
        cmd += ["--standalone", "--nnodes=1"]
    else:
        port = environ.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT)
        cmd += [
            f"--nnodes={resource.num_nodes}",
            f"--node-rank={resource.node_rank}",
            f"--master-addr={resource.master_addr}",
            f"--master-port={port}",
        ]
    cmd += [f"--nproc-per-node={nproc}", "-m", "training.train", "--base-dir", str(paths.base_dir)]
    for name, value in hp.to_strings().items():
        cmd += ["--" + name.replace("_", "-"), value]
    return cmd


def child_pids(parent: int) -> list[int]:
    """PIDs whose parent is ``parent`` (Linux ``/proc``; [] elsewhere)."""
    pids = []
    proc = Path("/proc")
    if not proc.is_dir():
        return pids
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(parent):
            pids.append(int(entry.name))
    return pids


def signal_workers(torchrun: subprocess.Popen, signum: int) -> None:
    """Deliver a stop signal to the training workers, or to torchrun before they exist.

    The workers (torchrun's children) checkpoint and exit 0, after which
    torchrun exits 0 on its own. Signalling torchrun instead also works (it
    forwards the signal and waits ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``) but makes
    it exit with a SignalException traceback that reads like a failure.
    """
    workers = child_pids(torchrun.pid)
    if not workers:
        torchrun.send_signal(signum)
        return
    for pid in workers:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def worker_environment(environ: Mapping[str, str], gpus: int, nproc: int) -> dict[str, str]:
    env = dict(environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))
    if gpus == 0:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    root = str(REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Validate, launch torchrun, forward stop signals; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    paths = SageMakerPaths.from_environment(env)
    if args and args[0] != "train":
        print(f"usage: <image> train   (got {' '.join(args)!r}; this image only trains)", file=sys.stderr)
        return 2
    if paths.failure_file.exists():
        paths.failure_file.unlink()  # a stale reason from an earlier local run in the same directory

    stop: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum: int, frame: object) -> None:
        stop.append(signum)
        if child and child[0].poll() is None:
            signal_workers(child[0], signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        gpus = count_gpus(env)
        try:
            hp = validate(paths, env, gpus)
            cmd = torchrun_command(hp, paths, env, gpus)
        except Exception as exc:  # noqa: BLE001 - every validation error becomes the failure reason
            from training.data import DataError

            if not isinstance(exc, (HyperparameterError, ConfigError, DataError)):
                raise
            write_failure(paths, str(exc))
            print(f"[entrypoint] invalid configuration: {exc}", file=sys.stderr, flush=True)
            return 1
        if stop:
            print("[entrypoint] stop requested before launch; nothing to do", flush=True)
            return 0
        nproc = processes_per_node(env, gpus)
        print(f"[entrypoint] {' '.join(cmd)}", flush=True)
        proc = subprocess.Popen(cmd, env=worker_environment(env, gpus, nproc), cwd=str(REPO_ROOT))
        child.append(proc)
        if stop:  # a signal that arrived while starting
            signal_workers(proc, stop[0])
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if rc == 0:
        return 0
    if stop and not paths.failure_file.exists():
        print(f"[entrypoint] stopped by signal {stop[0]}; workers saved their checkpoint", flush=True)
        return 0
    reason = (
        f"training processes exited with status {rc}"
        + (f" (killed by signal {-rc})" if rc < 0 else "")
        + "; see the job's log for the traceback"
    )
    write_failure(paths, reason)  # only if no worker wrote a more specific one
    return 1


if __name__ == "__main__":
    sys.exit(main())
