"""The container entry point: ``<image> train`` on SageMaker, ``trainctl train`` locally.

SageMaker runs the image as ``<image> train`` and sets nothing but files under
``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``; see :mod:`training.environment`)
and, on a training plan, ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``.
This module:

1. resolves the base directory once (a relative ``SAGEMAKER_BASE_DIR`` against
   the working directory) and hands that absolute path to the workers, so
   validation, workers and the failure file all use one folder;
2. reads ``hyperparameters.json`` (values as strings, JSON-quoted ones from
   older SDKs accepted, any spelling of a name) overlaid with ``SM_HP_*``
   variables, ``resourceconfig.json`` and ``inputdataconfig.json``;
   ``train --guide-variables`` (what ``train.sh`` runs) also applies the
   published guide's ``PRECISION``/``NUM_LAYERS``/``BATCH_SIZE``/``SEQ_LENGTH``/
   ``MODEL`` variables (:func:`training.environment.raw_hyperparameters`);
3. validates everything *before launching anything*: hyperparameter values,
   the ``train`` channel and its token shards (unless ``synthetic_data``), the
   ``validation`` channel's (with ``eval_interval``: the same tokenizer), that
   the precision can run on this host's device type, that the capacity block
   (if any) leaves time for a step and its checkpoint, that a GPU instance type
   (``current_instance_type``) shows its GPUs, and that the declared
   network interface exists. On error it writes a one-line reason to
   ``<base>/output/failure`` and exits 1;
4. sets ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` for the workers to
   ``resourceconfig.json``'s ``network_interface_name`` unless the job's
   environment sets them (the job wins; the log says which applied);
5. launches torchrun (in its own session, so a terminal's Ctrl-C reaches only
   this process): ``--nnodes=len(hosts) --node-rank=<index of current_host>
   --master-addr=<hosts[0]>`` (single host: ``--standalone``),
   ``--nproc-per-node`` = GPUs on the host; with no GPU, CPU processes
   (``TRAINER_NPROC_PER_NODE``, default 2) on gloo. Workers run
   :mod:`training.train` with every hyperparameter as a flag;
6. relays SIGTERM/SIGINT (:class:`StopRelay`; SIGHUP, a closed terminal, as
   SIGTERM) to the training workers once each has installed its stop handler
   (Linux ``/proc/<pid>/status`` ``SigCgt``), so none is killed half-started;
   to torchrun itself while no worker exists yet (nothing was trained, so
   nothing needs saving; torchrun forwards the signal and waits
   ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` = 110 s before SIGKILL: SageMaker kills
   the container 120 s after its SIGTERM). The workers checkpoint and exit 0;
   so does the entry point, which then says what the trainer did (its status
   record, :mod:`training.supervision`: the step it stopped after and saved)
   and which checkpoint a restart will resume (the newest that verifies,
   :func:`training.checkpoint.verify.restart_point`);
7. once a worker reports a hang (its watchdog wrote a failure report headed by
   :data:`platform_spec.health.HANG_REASON`, :mod:`training.watchdog`), gives the other
   workers :data:`HANG_GRACE_S` to dump their own stacks and exit, then kills those left
   (SIGKILL, :func:`end_hung_workers`): they wait in a collective that never completes, and
   torchrun's SIGTERM would wait its 110 s shutdown timeout for them; the job ends Failed
   with the hang's report within seconds;
8. on a worker failure without a reason written, writes a generic one; an
   unexpected error of its own during validation is written as
   ``internal error while validating the job: <type>: <message>``.

Its stdout and stderr outlive their reader (:func:`training.supervision.guarded_output`),
like the workers': a closed terminal does not end the run.

Environment knobs (not hyperparameters: they describe the machine):
``TRAINER_NPROC_PER_NODE`` (processes per host), ``MASTER_PORT`` (multi-node
rendezvous port, default 29500), ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``
(override the declared interface).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from platform_spec.health import trainer_failure_kind
from platform_spec.hyperparameters import (
    CPU_PRECISIONS,
    INIT_CHANNEL,
    VALIDATION_CHANNEL,
    HyperparameterError,
    Hyperparameters,
    model_shape,
)
from training.environment import (
    GUIDE_VARIABLES,
    ConfigError,
    SageMakerPaths,
    check_capacity_block,
    check_gpus_visible,
    check_init_channel,
    check_train_channel,
    check_validation_channel,
    load_hyperparameters,
    read_input_data_config,
    read_resource_config,
    socket_interface_environment,
    write_failure,
)
from training.supervision import TrainerStatus, clear_status, guarded_output, read_status

DEFAULT_CPU_PROCESSES = 2
DEFAULT_MASTER_PORT = 29500
SHUTDOWN_TIMEOUT_S = 110
REPO_ROOT = Path(__file__).resolve().parent.parent
VERB = "train"
GUIDE_VARIABLES_FLAG = "--guide-variables"
USAGE = f"usage: <image> {VERB} [{GUIDE_VARIABLES_FLAG}]"
HELP = (
    f"{USAGE}\n\nTrain on the files SageMaker lays out under SAGEMAKER_BASE_DIR (default /opt/ml): validate the "
    "job, launch torchrun, relay stop signals, and write the reason of a failure to output/failure.\n\noptions:\n"
    f"  {GUIDE_VARIABLES_FLAG:<19}also apply the published guide's {', '.join(GUIDE_VARIABLES)} variables\n"
    f"  {'-h, --help':<19}show this help and exit"
)
"""``<image> train --help`` (exit 0, nothing validated or launched)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals that stop a run: SageMaker's SIGTERM, a terminal's Ctrl-C (SIGINT), a closed terminal (SIGHUP)."""
DELIVERED_AS = {signal.SIGHUP: signal.SIGTERM}
"""Stop signals the workers do not catch, and the one relayed in their place."""
HANG_GRACE_S = 10.0
"""Seconds the entry point leaves the other workers after one reported a hang, before it kills them: their own
watchdogs fire within seconds of the first (they wait for the same step, under limits derived from the same
step times) and dump their stacks (:func:`end_hung_workers`)."""
RELAY_POLL_S = 0.2
"""How often, in seconds, the entry point looks for torchrun's workers and retries a stop signal
held for workers that are still starting (:meth:`StopRelay.poll`)."""


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


def validate(
    paths: SageMakerPaths, environ: Mapping[str, str], gpus: int, *, guide_variables: bool = False
) -> Hyperparameters:
    """Everything that can be checked before a worker starts.

    Raises:
        HyperparameterError: a bad value (names the field and what is allowed).
        ConfigError: malformed config file, missing or unsupported data channel;
            :class:`training.environment.CapacityBlockEnded` when the capacity
            block leaves no time for a step and its checkpoint;
            :class:`training.environment.GPUUnavailable` when resourceconfig.json's
            ``current_instance_type`` has GPUs and none is visible.
        training.data.DataError: unreadable token shards.
    """
    hp = load_hyperparameters(paths, environ, guide_variables=guide_variables)
    check_gpus_visible(read_resource_config(paths), gpus)  # a GPU instance never trains on the CPU
    channels = read_input_data_config(paths)
    for channel in ("train", VALIDATION_CHANNEL, INIT_CHANNEL):
        mode = channels.get(channel, {}).get("TrainingInputMode", "File")
        if mode not in ("File", "FastFile"):
            raise ConfigError(
                f"channel {channel!r} uses TrainingInputMode={mode}; this trainer reads File or FastFile mode"
            )
    check_train_channel(paths, hp)
    check_validation_channel(paths, hp)
    check_init_channel(paths, hp)
    if gpus == 0 and hp.precision not in CPU_PRECISIONS:
        raise HyperparameterError(
            "precision",
            hp.precision,
            f"one of {', '.join(CPU_PRECISIONS)} on a host without GPUs ({hp.precision} needs an NVIDIA GPU)",
        )
    if not hp.synthetic_data:
        from training.data import TokenDataset, check_same_tokenizer, resolve_vocab_size

        dataset = TokenDataset(paths.train_dir)
        resolve_vocab_size(hp, model_shape(hp).vocab_size, dataset.vocab_size)
        if hp.eval_interval:  # scanned once here, like train's; the workers check every batch
            check_same_tokenizer(dataset, TokenDataset(paths.validation_dir), VALIDATION_CHANNEL)
    check_capacity_block(environ)
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


def torchrun_command(hp: Hyperparameters, paths: SageMakerPaths, environ: Mapping[str, str], gpus: int) -> list[str]:
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


def process_status(pid: int) -> dict[str, str]:
    """Fields of Linux ``/proc/<pid>/status`` (``{}`` when unreadable: gone, or not Linux)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def catches_signal(pid: int, signum: int) -> bool | None:
    """Whether ``pid`` has a handler installed for ``signum`` (``SigCgt``); None when unknown."""
    mask = process_status(pid).get("SigCgt")
    if mask is None:
        return None
    return bool(int(mask, 16) >> (signum - 1) & 1)


def live_children(parent: int) -> list[int]:
    """:func:`child_pids` less the zombies (exited, not yet reaped)."""
    return [pid for pid in child_pids(parent) if not process_status(pid).get("State", "").startswith("Z")]


class StopRelay:
    """Delivers stop signals (SIGTERM/SIGINT) to the training workers, once each can take them.

    A worker takes the signal once it has installed its stop handler
    (:mod:`training.train` does so before building anything); before that the
    signal's default action would kill it mid-start, so the relay holds the
    signal and :meth:`deliver` retries while the workers start. While torchrun
    has no worker at all, torchrun gets the signal: it forwards it and stops,
    and nothing was trained, so nothing needed saving. A repeated signal is
    delivered again (the workers' handler only records it).

    Attributes:
        signum: the first stop signal received, or None.
        target: where the first delivery went: ``"workers"``, ``"torchrun"``, or None.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.target: str | None = None
        self.pending = False
        self.proc: subprocess.Popen | None = None
        self._seen_workers = False

    def request(self, signum: int) -> None:
        """Record a stop signal and deliver it if possible (safe to call from a signal handler).

        SIGHUP is delivered as SIGTERM (:data:`DELIVERED_AS`): the workers catch SIGTERM and SIGINT only.
        """
        if self.signum is None:
            self.signum = signum
        self.pending = True
        self.deliver()

    @property
    def delivered(self) -> int | None:
        """The signal the workers (or torchrun) get for :attr:`signum`."""
        return None if self.signum is None else DELIVERED_AS.get(self.signum, self.signum)

    def attach(self, proc: subprocess.Popen) -> None:
        """The started torchrun; a signal received while starting it is delivered now."""
        self.proc = proc
        self.deliver()

    def poll(self) -> None:
        """Called while torchrun runs: note when its workers exist, and retry a held signal.

        Once workers have existed, torchrun is never signalled itself: a signal that
        comes after they exited (torchrun finishing) changes nothing.
        """
        if not self._seen_workers and self.proc is not None and live_children(self.proc.pid):
            self._seen_workers = True
        self.deliver()

    def deliver(self) -> None:
        """Deliver a pending signal when every worker catches it (or to torchrun before any exists)."""
        proc = self.proc
        signum = self.delivered
        if not self.pending or signum is None or proc is None or proc.poll() is not None:
            return
        workers = live_children(proc.pid)
        if not workers:
            if not self._seen_workers:  # torchrun is starting (or in rendezvous): no worker to save anything
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)
                self.target = self.target or "torchrun"
            self.pending = False  # else: the workers are gone and torchrun is finishing
            return
        self._seen_workers = True
        if any(catches_signal(pid, signal.SIGTERM) is False for pid in workers):
            return  # a worker is still starting: retried by the caller's poll
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        self.target = self.target or "workers"
        self.pending = False


def hang_reported(paths: SageMakerPaths) -> bool:
    """Whether the failure report is a worker's hang report (:data:`platform_spec.health.HANG_REASON`)."""
    try:
        report = paths.failure_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return trainer_failure_kind(report) == "hang"


def end_hung_workers(proc: subprocess.Popen, paths: SageMakerPaths, since: float | None, now: float) -> float | None:
    """Called while torchrun runs: once a hang is reported (``since``: when it was first seen, None before), kill
    torchrun's workers and everything below them (SIGKILL) :data:`HANG_GRACE_S` later; torchrun then sees them
    gone and exits non-zero. Returns the time the hang was first seen (``now`` when it is seen now)."""
    if since is None:
        return now if hang_reported(paths) else None
    if now - since >= HANG_GRACE_S:
        pending = list(child_pids(proc.pid))
        while pending:
            pid = pending.pop()
            pending.extend(child_pids(pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return since


def restart_description(paths: SageMakerPaths) -> str:
    """Which checkpoint a restart resumes, in words: the newest complete one that verifies
    (:func:`training.checkpoint.verify.restart_point`), and the newer ones it will skip."""
    from training.checkpoint.verify import restart_point  # imports torch: only after the run

    return restart_point(paths.checkpoint_dir).describe()


def stop_description(status: TrainerStatus | None) -> str:
    """What the workers did on a stop, from their status record (:mod:`training.supervision`)."""
    if status is None:
        return "the workers stopped cleanly"
    if status.stopped_after is not None:
        return f"the workers stopped after step {status.stopped_after} and saved it (checkpoint step-{status.stopped_after})"
    if status.state == "stopped":
        return f"the workers stopped before their first step (step {status.step + 1}), so there was nothing new to save"
    if status.state == "finished":
        return f"the workers had already finished at step {status.step}"
    return f"the workers exited cleanly ({status.state} at step {status.step})"


def worker_environment(
    environ: Mapping[str, str],
    gpus: int,
    nproc: int,
    *,
    paths: SageMakerPaths,
    network: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The workers' environment: the job's, with the resolved base directory, the socket
    interfaces of :func:`training.environment.socket_interface_environment` and launch defaults."""
    env = dict(environ)
    env.update(network or {})
    env["SAGEMAKER_BASE_DIR"] = str(paths.base_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))
    if gpus == 0:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    root = str(REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Validate, launch torchrun, relay stop signals; returns the exit status."""
    with guarded_output():
        return _main(argv, environ)


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    if {"-h", "--help"} & set(args):
        print(HELP)
        return 0
    if args[:1] not in ([], [VERB]) or any(a != GUIDE_VARIABLES_FLAG for a in args[1:]):
        print(f"{USAGE}   (got {' '.join(args)!r}; this image only trains)", file=sys.stderr)
        return 2
    guide_variables = GUIDE_VARIABLES_FLAG in args
    paths = SageMakerPaths.from_environment(env)  # absolute: the one base directory of this job
    if paths.failure_file.exists():
        paths.failure_file.unlink()  # a stale reason from an earlier local run in the same directory
    clear_status(paths)  # likewise a stale status record

    relay = StopRelay()
    previous = {sig: signal.signal(sig, lambda signum, frame: relay.request(signum)) for sig in STOP_SIGNALS}
    try:
        gpus = count_gpus(env)
        try:
            hp = validate(paths, env, gpus, guide_variables=guide_variables)
            network, notes = socket_interface_environment(read_resource_config(paths), env)
            cmd = torchrun_command(hp, paths, env, gpus)
        except Exception as exc:
            if isinstance(exc, _validation_errors()):
                reason = str(exc)
                print(f"[entrypoint] invalid configuration: {exc}", file=sys.stderr, flush=True)
            else:  # a bug of ours, or something no check foresaw: still a reason, never a silent failure
                traceback.print_exc()
                reason = f"internal error while validating the job: {type(exc).__name__}: {exc}"
                print(f"[entrypoint] {reason}", file=sys.stderr, flush=True)
            write_failure(paths, reason)
            return 1
        if relay.signum is not None:
            print(f"[entrypoint] {signal.Signals(relay.signum).name} before launch: nothing was started", flush=True)
            return 0
        nproc = processes_per_node(env, gpus)
        print(f"[entrypoint] base directory {paths.base_dir}", flush=True)
        print(f"[entrypoint] network: {'; '.join(notes)}", flush=True)
        print(f"[entrypoint] {' '.join(cmd)}", flush=True)
        proc = subprocess.Popen(
            cmd,
            env=worker_environment(env, gpus, nproc, paths=paths, network=network),
            cwd=str(REPO_ROOT),
            start_new_session=True,
        )
        relay.attach(proc)
        hang_seen: float | None = None
        while True:
            try:
                rc = proc.wait(timeout=RELAY_POLL_S)
                break
            except subprocess.TimeoutExpired:
                relay.poll()
                hang_seen = end_hung_workers(proc, paths, hang_seen, time.monotonic())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return outcome(paths, rc, relay)


def _validation_errors() -> tuple[type[Exception], ...]:
    """The errors validation raises on purpose (their message is the reason as it is)."""
    from training.data import DataError

    return (HyperparameterError, ConfigError, DataError)


def outcome(paths: SageMakerPaths, rc: int, relay: StopRelay) -> int:
    """Say what happened and return the entry point's exit status.

    * 0 with no stop signal: training finished (or stopped for the capacity block).
    * a stop signal that reached the workers: 0 when they exited 0 (they saved, or
      had not trained a step yet); otherwise a failure.
    * a stop signal that reached torchrun before any worker existed: 0 unless a
      worker wrote a failure reason (nothing was trained, nothing needed saving).
    * anything else non-zero: the workers' failure reason, or a generic one; 1.

    What the workers did comes from their status record; the checkpoint a
    restart resumes from :func:`restart_description`.
    """
    # a signal that was never delivered (it came as the workers were exiting) changed nothing
    name = signal.Signals(relay.signum).name if relay.signum is not None and relay.target is not None else None
    if name is not None and relay.target == "torchrun" and not paths.failure_file.exists():
        print(
            f"[entrypoint] stopped by {name} before the training workers started: nothing was trained in this run, "
            f"so there was nothing to save; {restart_description(paths)}",
            flush=True,
        )
        return 0
    if rc == 0:
        if name is not None:
            print(
                f"[entrypoint] stopped by {name}: {stop_description(read_status(paths))}; {restart_description(paths)}",
                flush=True,
            )
        return 0
    reason = (
        f"training processes exited with status {rc}"
        + (f" (killed by signal {-rc})" if rc < 0 else "")
        + (f" after {name} was relayed to them" if name is not None else "")
        + "; see the job's log for the traceback"
    )
    write_failure(paths, reason)  # only if no worker wrote a more specific one
    return 1


if __name__ == "__main__":
    sys.exit(main())
