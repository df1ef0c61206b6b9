"""What ``trainctl train`` does: the trainer run locally through the container's entry point, supervised.

:func:`train` lays out the base directory like ``/opt/ml`` (``hyperparameters.json``
with string values, ``resourceconfig.json``, ``inputdataconfig.json``, the
``train`` channel linked to the data; nothing the user put there is removed or
replaced) and runs ``python -m training.entrypoint train`` with
``SAGEMAKER_BASE_DIR`` set: the code path of a SageMaker job
(:func:`training.local.run_local`). Running it again on the same directory
resumes from the newest complete checkpoint (the hyperparameters of the
previous run are reused unless flags change them,
:func:`collect_hyperparameters`).

Like a supervisor, it relays SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed
terminal; relayed as SIGTERM) to the run and returns only once the workers
have saved their checkpoint and stopped; a second signal kills them without
saving. What it reports (:func:`end_summary`) comes from the trainer's status
record (:mod:`training.supervision`: the step it stopped after and saved) and
from the checkpoints (the one a restart resumes: the newest that verifies),
never from the trainer's free-text lines. When the run is refused because the
checkpoint belongs to another run, the previous run's settings are put back
(:func:`refusal_advice`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from platform_spec.errors import FieldError
from platform_spec.hyperparameters import HyperparameterError, format_value, normalise_name, unquote
from platform_spec.hyperparameters import parse as parse_hyperparameters
from trainctl.model_config import ModelConfigError, model_config_values
from trainctl.output_paths import folder_problem, os_error_text, output_error

if TYPE_CHECKING:
    from training.local import LocalRun


def base_directory(base_dir: str | os.PathLike[str] | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """``base_dir`` (``--base-dir``), else ``SAGEMAKER_BASE_DIR``, made absolute once; None when neither is given."""
    raw = base_dir or environ.get("SAGEMAKER_BASE_DIR") or None
    return Path(raw).resolve() if raw else None


class PreviousRunError(ValueError):
    """The earlier run's ``hyperparameters.json`` cannot be read; names the file."""


def collect_hyperparameters(base: Path, flags: Mapping[str, str]) -> dict[str, str]:
    """Previous run's ``hyperparameters.json`` (if any; names in any spelling) overlaid with ``flags``, the
    hyperparameters given on the command line (``{name: value}``).

    Raises:
        PreviousRunError: that file is not a JSON object (names it and what to do).
    """
    values: dict[str, str] = {}
    previous = base / "input" / "config" / "hyperparameters.json"
    if previous.exists():
        try:
            loaded = json.loads(previous.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
            detail = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise PreviousRunError(
                f"{previous}: the previous run's hyperparameters are not valid JSON ({detail}); fix the file, or "
                "remove it to start from the trainer's defaults and the flags given"
            ) from None
        if not isinstance(loaded, dict):
            raise PreviousRunError(
                f"{previous}: the previous run's hyperparameters are a JSON {type(loaded).__name__}, expected an object "
                "of names to values; fix the file, or remove it to start from the trainer's defaults and the flags given"
            )
        values.update({normalise_name(str(k)): unquote(v) if isinstance(v, str) else v for k, v in loaded.items()})
    values.update(flags)
    return values


def check_hyperparameters(base: Path, hyperparameters: Mapping[str, str], flags: Mapping[str, str]) -> None:
    """Refuse ``hyperparameters`` (the previous run's overlaid with ``flags``) by the trainer's own rules
    (:func:`platform_spec.hyperparameters.parse`) before anything is written, so a mistyped flag never lands
    in ``hyperparameters.json`` to be read again by the next run. What depends on the machine (a precision its
    device cannot run) is the entry point's to judge.

    Raises:
        HyperparameterError: the first invalid value, its message saying where it came from (the flag, the
            previous run's ``hyperparameters.json``, or a default a cross-field rule involves) and that nothing
            was written.
    """
    try:
        parse_hyperparameters(hyperparameters)
    except HyperparameterError as exc:
        if exc.field in {normalise_name(name) for name in flags}:
            origin = f"--{exc.field.replace('_', '-')}"
        elif exc.field in hyperparameters:
            origin = f"the previous run's {base / 'input' / 'config' / 'hyperparameters.json'}"
        else:
            origin = "the trainer's defaults"
        exc.args = (f"{exc} (from {origin}; nothing was written)",)
        raise


def model_config_flags(
    path: str | os.PathLike[str], flags: Mapping[str, str], *, flag: str = "--model-config"
) -> dict[str, str]:
    """``flags`` (hyperparameters given on the command line) with the shape of the Hugging Face ``config.json``
    at ``path`` (:func:`trainctl.model_config.model_config_values`), as the strings ``hyperparameters.json``
    holds.

    Raises:
        trainctl.model_config.ModelConfigError: the file is unreadable, a key of it is refused (named), or a
            flag sets the shape too.
    """
    merged = model_config_values(path, flags, flag=flag)
    return {name: value if isinstance(value, str) else format_value(value) for name, value in merged.items()}


def shape_flags(
    flags: Mapping[str, str],
    model_config: str | os.PathLike[str] | None,
    init_from: str | os.PathLike[str] | None,
) -> dict[str, str]:
    """``flags`` with the model's shape from ``--init-from DIR``'s ``config.json``, else ``--model-config``'s
    (:func:`model_config_flags`); unchanged without either.

    Raises:
        trainctl.model_config.ModelConfigError: see :func:`model_config_flags`; or a ``--model-config`` given
            beside ``--init-from`` whose shape differs (the first such hyperparameter named, both values).
    """
    if init_from is None:
        return dict(flags) if model_config is None else model_config_flags(model_config, flags)
    config = Path(init_from) / "config.json"
    if not config.is_file():
        raise ModelConfigError(
            f"--init-from {init_from}: no {config}; expected a Hugging Face model folder (config.json and "
            "model.safetensors, or model-*.safetensors with model.safetensors.index.json)"
        )
    from_weights = model_config_flags(config, flags, flag="--init-from")
    given = from_weights if model_config is None else model_config_flags(model_config, flags)
    for key, value in from_weights.items():
        if given.get(key) != value:
            raise ModelConfigError(
                f"--model-config {model_config}: {key} is {given.get(key)}, the --init-from {init_from} weights' "
                f"config.json has {value}; leave --model-config out (the weights' config.json gives the shape)"
            )
    return from_weights


def train(
    base_dir: str | os.PathLike[str] | None,
    flags: Mapping[str, str],
    *,
    data: str | os.PathLike[str] | None = None,
    python_docs: bool = False,
    nproc: int = 2,
    stop_at_step: int | None = None,
    json_quoted: bool = False,
    model_config: str | os.PathLike[str] | None = None,
    init_from: str | os.PathLike[str] | None = None,
    tensorboard: str | os.PathLike[str] | None = None,
) -> int:
    """Run the trainer locally on ``base_dir`` (else ``SAGEMAKER_BASE_DIR``) with the hyperparameters ``flags``
    over the previous run's, and say how it ended.

    Args:
        flags: hyperparameters given on the command line (``{name: value}``, names as in
            :data:`platform_spec.hyperparameters.SPECS`).
        data: token shards for the train channel; ``python_docs``: CPython's documentation instead.
        nproc: processes per host when there is no GPU.
        stop_at_step: send SIGTERM once this step is logged (a SageMaker stop).
        json_quoted: write ``hyperparameters.json`` JSON-quoted, as older SageMaker SDKs do.
        model_config: a Hugging Face ``config.json`` giving the model's shape (:func:`model_config_flags`).
        init_from: a Hugging Face model folder the run starts from (the ``init_from`` channel): its
            ``config.json`` gives the model's shape; a ``model_config`` given too must give the same.
        tensorboard: a folder the run writes TensorBoard event files to (``tensorboard --logdir`` it), through
            the layout's ``tensorboardoutputconfig.json`` as on SageMaker; a rerun without it keeps the previous one.

    Returns:
        The exit status: the run's (0 finished or stopped by ``stop_at_step``; 1 failed), 2 bad arguments,
        base directory or earlier ``hyperparameters.json`` (one line on stderr, nothing started), 128 + the
        signal number after a relayed SIGHUP (129), SIGINT (130) or SIGTERM (143).
    """
    from training.supervision import guarded_output

    with guarded_output():  # a closed terminal must not end the run (it is relayed as SIGTERM instead)
        return _train(
            base_dir,
            flags,
            data=data,
            python_docs=python_docs,
            nproc=nproc,
            stop_at_step=stop_at_step,
            json_quoted=json_quoted,
            model_config=model_config,
            init_from=init_from,
            tensorboard=tensorboard,
        )


def _train(
    base_dir: str | os.PathLike[str] | None,
    flags: Mapping[str, str],
    *,
    data: str | os.PathLike[str] | None,
    python_docs: bool,
    nproc: int,
    stop_at_step: int | None,
    json_quoted: bool,
    model_config: str | os.PathLike[str] | None = None,
    init_from: str | os.PathLike[str] | None = None,
    tensorboard: str | os.PathLike[str] | None = None,
) -> int:
    from training.environment import SageMakerPaths
    from training.local import (
        LayoutError,
        LayoutSnapshot,
        plan_link,
        prepare_base_dir,
        read_failure,
        run_local,
    )

    base = base_directory(base_dir)
    if base is None:
        print(
            "trainctl train: no base directory: give --base-dir DIR or set SAGEMAKER_BASE_DIR "
            "(trainctl does not write to SageMaker's /opt/ml)",
            file=sys.stderr,
        )
        return 2
    argument = "--base-dir" if base_dir else "SAGEMAKER_BASE_DIR"
    problem = folder_problem(base)
    if problem is not None:
        print(f"trainctl train: {output_error(argument, base, problem)}", file=sys.stderr)
        return 2
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        print(f"trainctl train: {FieldError('--nproc', nproc, 'an integer >= 1')}", file=sys.stderr)
        return 2
    paths = SageMakerPaths(base)
    try:
        flags = shape_flags(flags, model_config, init_from)  # before anything is written
        hyperparameters = collect_hyperparameters(base, flags)
        check_hyperparameters(base, hyperparameters, flags)  # before anything is written, too
    except (PreviousRunError, ModelConfigError, HyperparameterError) as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(data) if data is not None else None
    try:
        if python_docs:
            prepared = base / "prepared" / "python-docs"
            plan_link(paths, "train", prepared, data_exists=False)  # refuse before writing anything
            if not any(prepared.glob("shard-*.bin")):
                from training.corpus import python_docs_corpus
                from training.prepare import prepare_data

                corpus = python_docs_corpus(base / "prepared" / "python-docs.txt")
                prepare_data(prepared, [corpus])
            data_dir = prepared
        if data_dir is None and "synthetic_data" not in hyperparameters and not paths.train_dir.exists():
            print("trainctl train: no data: give --data DIR, --python-docs or --synthetic-data true", file=sys.stderr)
            return 2
        before = LayoutSnapshot.take(paths)
        prepare_base_dir(
            base, hyperparameters, data_dir=data_dir, json_quoted=json_quoted, init_from=init_from,
            tensorboard=tensorboard,
        )  # fmt: skip
    except LayoutError as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # what only writing can tell: no permission, a full disk
        print(f"trainctl train: {argument} {base}: cannot lay it out ({os_error_text(exc)})", file=sys.stderr)
        return 2
    result = run_local(
        base,
        None,
        nproc=nproc,
        stop_at_step=stop_at_step,
        echo=lambda line: print(line, end="", flush=True),
        supervise=True,
    )
    losses = sorted(result.losses.items())  # this run's (output/data/metrics.jsonl holds every run's)
    if losses:
        print(
            f"trainctl train: loss {losses[0][1]:.4f} at step {losses[0][0]} -> {losses[-1][1]:.4f} at step {losses[-1][0]}"
        )
    summary = end_summary(result, failure=read_failure(base))
    if summary:
        print(summary, file=sys.stderr if result.returncode != 0 or result.killed else sys.stdout)
    if result.status is not None and result.status.state == "refused":
        print(refusal_advice(base, before.restore()), file=sys.stderr)
    if result.stop_signal is not None and (result.returncode in (0, -(result.relayed_signal or 0)) or result.killed):
        return 128 + result.stop_signal
    return result.returncode if result.returncode >= 0 else 1


def refusal_advice(base: Path, restored: list[str]) -> str:
    """What to do after a resume was refused (the checkpoint belongs to another run), and what was put back."""
    command = f"trainctl train --base-dir {base}"
    if restored:
        return (
            f"trainctl train: put back the previous run's settings ({', '.join(restored)}), so `{command}` resumes "
            "the checkpoint's run; to train with the new settings, give them another --base-dir"
        )
    return (
        "trainctl train: these are the settings this base directory already had; resume the checkpoint's run with "
        "its own settings (the reason above names them), or give this run another --base-dir"
    )


def end_summary(result: LocalRun, *, failure: str | None) -> str | None:
    """One line saying how a failed or stopped run ended: the step it stopped after comes from the
    trainer's status record, the checkpoint a restart resumes from the checkpoints that verify.
    None for a run that ended on its own (the trainer's last line says how)."""
    if result.killed:
        return "trainctl train: killed on the second stop signal, without a checkpoint of the last steps; " + _restart(
            result
        )
    if result.stop_signal is not None and result.returncode == -(result.relayed_signal or 0) and not failure:
        return (
            f"trainctl train: stopped by {signal.Signals(result.stop_signal).name} before the entry point had started; "
            "nothing was started"
        )
    if result.returncode != 0:
        return f"trainctl train: failed (exit {result.returncode}): {failure or 'see the output above'}"
    if not result.stop_requested:
        return None
    status = result.status
    if status is not None and status.state == "finished":
        return f"trainctl train: the run had already finished at step {status.step} when the stop came"
    stopped = result.stopped_after
    if stopped is not None:
        restart = result.restart
        if restart is not None and restart.step == stopped and not restart.skipped:
            return f"trainctl train: stopped after step {stopped} (checkpoint step-{stopped}); run the same command again to resume"
        return f"trainctl train: stopped after step {stopped} (checkpoint step-{stopped}); " + _restart(result)
    return "trainctl train: stopped before the run's first step, so there was nothing new to save; " + _restart(result)


def _restart(result: LocalRun) -> str:
    if result.restart is None:
        return "run the same command again to resume"
    return result.restart.describe("the same command")


__all__ = [
    "PreviousRunError",
    "base_directory",
    "collect_hyperparameters",
    "end_summary",
    "model_config_flags",
    "refusal_advice",
    "shape_flags",
    "train",
]
