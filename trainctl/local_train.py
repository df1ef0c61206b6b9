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

from platform_spec.hyperparameters import normalise_name

if TYPE_CHECKING:
    from training.local import LocalRun


def base_directory(base_dir: str | os.PathLike[str] | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """``base_dir`` (``--base-dir``), else ``SAGEMAKER_BASE_DIR``, made absolute once; None when neither is given."""
    raw = base_dir or environ.get("SAGEMAKER_BASE_DIR") or None
    return Path(raw).resolve() if raw else None


class PreviousRunError(ValueError):
    """The earlier run's ``hyperparameters.json`` cannot be read; names the file."""


def _unquote(value: object) -> object:
    """A value as older SDKs JSON-quote it (``'"bf16"'``) -> ``bf16``; anything else as it is."""
    if isinstance(value, str) and value.startswith('"'):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


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
        values.update({normalise_name(str(k)): _unquote(v) for k, v in loaded.items()})
    values.update(flags)
    return values


def train(
    base_dir: str | os.PathLike[str] | None,
    flags: Mapping[str, str],
    *,
    data: str | os.PathLike[str] | None = None,
    python_docs: bool = False,
    nproc: int = 2,
    stop_at_step: int | None = None,
    json_quoted: bool = False,
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
) -> int:
    from training.environment import SageMakerPaths
    from training.local import (
        LayoutError,
        LayoutSnapshot,
        plan_train_link,
        prepare_base_dir,
        read_failure,
        read_metrics,
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
    paths = SageMakerPaths(base)
    try:
        hyperparameters = collect_hyperparameters(base, flags)
    except PreviousRunError as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(data) if data is not None else None
    try:
        if python_docs:
            prepared = base / "prepared" / "python-docs"
            plan_train_link(paths, prepared, data_exists=False)  # refuse before writing anything
            if not any(prepared.glob("shard-*.bin")):
                from training.corpus import python_docs_corpus
                from training.data import prepare_data

                corpus = python_docs_corpus(base / "prepared" / "python-docs.txt")
                prepare_data(prepared, [corpus])
            data_dir = prepared
        if data_dir is None and "synthetic_data" not in hyperparameters and not paths.train_dir.exists():
            print("trainctl train: no data: give --data DIR, --python-docs or --synthetic-data true", file=sys.stderr)
            return 2
        before = LayoutSnapshot.take(paths)
        prepare_base_dir(base, hyperparameters, data_dir=data_dir, json_quoted=json_quoted)
    except LayoutError as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    result = run_local(
        base,
        None,
        nproc=nproc,
        stop_at_step=stop_at_step,
        echo=lambda line: print(line, end="", flush=True),
        supervise=True,
    )
    losses = [(m["step"], m["loss"]) for m in read_metrics(base) if m.get("loss") is not None]
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


__all__ = ["PreviousRunError", "base_directory", "collect_hyperparameters", "end_summary", "refusal_advice", "train"]
