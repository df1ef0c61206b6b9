"""``trainctl train``: run the trainer locally through the container's entry point.

Lays out ``--base-dir`` (default: ``$SAGEMAKER_BASE_DIR``, as in the container;
resolved once) like ``/opt/ml`` (``hyperparameters.json`` with string values,
``resourceconfig.json``, ``inputdataconfig.json``, the ``train`` channel linked
to ``--data``; nothing the user put there is removed or replaced) and runs
``python -m training.entrypoint train`` with ``SAGEMAKER_BASE_DIR`` set: the
code path of a SageMaker job. Running it again on the same directory resumes
from the newest complete checkpoint (the hyperparameters of the previous run
are reused unless flags change them).

Like a supervisor, it relays SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed
terminal; relayed as SIGTERM) to the run and exits only once the workers
have saved their checkpoint and stopped; a second signal kills them without
saving. Its output, and the run's, outlive a closed terminal. What it
reports comes from the trainer's status record (the step it stopped after
and saved) and from the checkpoints (the one a restart resumes: the newest
that verifies). When the run is refused because the checkpoint belongs to
another run, the previous run's settings (``input/config/*.json``, the train
channel link) are put back, so the same command without the new flags
resumes. Exit status: the run's (0 finished or stopped by
``--stop-at-step``; 1 failed), 2 bad arguments, base directory or earlier
``hyperparameters.json``, 128 + the signal number after a relayed SIGHUP
(129), SIGINT (130) or SIGTERM (143).

Examples::

    trainctl prepare-data --output data/pydocs --python-docs
    trainctl train --base-dir runs/tiny --data data/pydocs --model gpt-tiny --precision bf16 \\
        --batch-size 8 --seq-length 128 --max-steps 200
    trainctl train --base-dir runs/tiny --python-docs --model gpt-tiny --max-steps 50 --stop-at-step 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from platform_spec.hyperparameters import SPECS, Hyperparameters, normalise_name

if TYPE_CHECKING:
    from training.local import LocalRun

HELP = (
    "Run the trainer locally through the container's entry point, on a directory laid out like /opt/ml. "
    "Ctrl-C (or SIGTERM) stops it as SageMaker does: it exits once the workers have saved a checkpoint "
    "(exit 130 / 143); a second Ctrl-C kills them without saving."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-dir", type=Path, default=None,
        help="directory laid out like /opt/ml (created; default: $SAGEMAKER_BASE_DIR)",
    )
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--data", type=Path, help="token shards (trainctl prepare-data) for the train channel")
    data.add_argument(
        "--python-docs", action="store_true",
        help="use CPython's documentation topics (byte-level tokens) as the train channel",
    )
    parser.add_argument("--nproc", type=int, default=2, help="processes per host when there is no GPU (default 2)")
    parser.add_argument(
        "--stop-at-step", type=int, default=None,
        help="send SIGTERM once this step is logged, as a SageMaker stop does; the trainer finishes the step "
        "in flight, so it reports the step it really stopped after (run again to resume)",
    )
    parser.add_argument(
        "--json-quoted", action="store_true",
        help="write hyperparameters.json JSON-quoted, as older SageMaker SDKs do",
    )
    hp = parser.add_argument_group("hyperparameters (the names SageMaker jobs use; default: the trainer's)")
    defaults = Hyperparameters()
    for name, spec in SPECS.items():
        default = getattr(defaults, name)
        choices = f"; one of {', '.join(spec.choices)}" if spec.choices else ""
        hp.add_argument(
            "--" + name.replace("_", "-"), dest="hp_" + name, default=None, metavar="VALUE",
            help=f"{spec.help} (default {default}{choices})",
        )


def base_directory(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Path | None:
    """``--base-dir``, else ``SAGEMAKER_BASE_DIR``, made absolute once; None when neither is given."""
    raw = args.base_dir or environ.get("SAGEMAKER_BASE_DIR") or None
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


def collect_hyperparameters(args: argparse.Namespace, base: Path) -> dict[str, str]:
    """Previous run's ``hyperparameters.json`` (if any; names in any spelling) overlaid with the flags given.

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
    for name in SPECS:
        value = getattr(args, "hp_" + name)
        if value is not None:
            values[name] = value
    return values


def run(args: argparse.Namespace) -> int:
    from training.supervision import guarded_output

    with guarded_output():  # a closed terminal must not end the run (it is relayed as SIGTERM instead)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
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

    base = base_directory(args)
    if base is None:
        print(
            "trainctl train: no base directory: give --base-dir DIR or set SAGEMAKER_BASE_DIR "
            "(trainctl does not write to SageMaker's /opt/ml)",
            file=sys.stderr,
        )
        return 2
    paths = SageMakerPaths(base)
    try:
        hyperparameters = collect_hyperparameters(args, base)
    except PreviousRunError as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    data_dir = args.data
    try:
        if args.python_docs:
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
        prepare_base_dir(base, hyperparameters, data_dir=data_dir, json_quoted=args.json_quoted)
    except LayoutError as exc:
        print(f"trainctl train: {exc}", file=sys.stderr)
        return 2
    result = run_local(
        base, None, nproc=args.nproc, stop_at_step=args.stop_at_step,
        echo=lambda line: print(line, end="", flush=True), supervise=True,
    )
    losses = [(m["step"], m["loss"]) for m in read_metrics(base) if m.get("loss") is not None]
    if losses:
        print(f"trainctl train: loss {losses[0][1]:.4f} at step {losses[0][0]} -> {losses[-1][1]:.4f} at step {losses[-1][0]}")
    summary = report(result, failure=read_failure(base))
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
        f"trainctl train: these are the settings this base directory already had; resume the checkpoint's run with "
        f"its own settings (the reason above names them), or give this run another --base-dir"
    )


def report(result: LocalRun, *, failure: str | None) -> str | None:
    """One line saying how a failed or stopped run ended: the step it stopped after comes from the
    trainer's status record, the checkpoint a restart resumes from the checkpoints that verify.
    None for a run that ended on its own (the trainer's last line says how)."""
    if result.killed:
        return "trainctl train: killed on the second stop signal, without a checkpoint of the last steps; " + _restart(result)
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
