"""``trainctl train``: run the trainer locally through the container's entry point.

Lays out ``--base-dir`` like ``/opt/ml`` (``hyperparameters.json`` with string
values, ``resourceconfig.json``, ``inputdataconfig.json``, the ``train``
channel linked to ``--data``) and runs ``python -m training.entrypoint train``
with ``SAGEMAKER_BASE_DIR`` set: the code path of a SageMaker job. Running it
again on the same directory resumes from the newest complete checkpoint (the
hyperparameters of the previous run are reused unless flags change them).

Examples::

    trainctl prepare-data --output data/pydocs --python-docs
    trainctl train --base-dir runs/tiny --data data/pydocs --model gpt-tiny --precision bf16 \\
        --batch-size 8 --seq-length 128 --max-steps 200
    trainctl train --base-dir runs/tiny --python-docs --model gpt-tiny --max-steps 50 --stop-at-step 20
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.hyperparameters import SPECS, Hyperparameters

HELP = "Run the trainer locally through the container's entry point, on a directory laid out like /opt/ml."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-dir", required=True, type=Path, help="directory laid out like /opt/ml (created)")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--data", type=Path, help="token shards (trainctl prepare-data) for the train channel")
    data.add_argument(
        "--python-docs", action="store_true",
        help="use CPython's documentation topics (byte-level tokens) as the train channel",
    )
    parser.add_argument("--nproc", type=int, default=2, help="processes per host when there is no GPU (default 2)")
    parser.add_argument(
        "--stop-at-step", type=int, default=None,
        help="send SIGTERM once this step is logged, as a SageMaker stop does (run again to resume)",
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


def collect_hyperparameters(args: argparse.Namespace) -> dict[str, str]:
    """Previous run's ``hyperparameters.json`` (if any) overlaid with the flags given."""
    values: dict[str, str] = {}
    previous = Path(args.base_dir) / "input" / "config" / "hyperparameters.json"
    if previous.exists():
        loaded = json.loads(previous.read_text(encoding="utf-8"))
        values.update({k: (json.loads(v) if isinstance(v, str) and v.startswith('"') else v) for k, v in loaded.items()})
    for name in SPECS:
        value = getattr(args, "hp_" + name)
        if value is not None:
            values[name] = value
    return values


def run(args: argparse.Namespace) -> int:
    from training.local import read_failure, read_metrics, run_local

    base = Path(args.base_dir)
    data_dir = args.data
    if args.python_docs:
        from training.corpus import python_docs_corpus
        from training.data import prepare_data

        prepared = base / "prepared" / "python-docs"
        if not any(prepared.glob("shard-*.bin")):
            corpus = python_docs_corpus(base / "prepared" / "python-docs.txt")
            prepare_data(prepared, [corpus])
        data_dir = prepared
    hyperparameters = collect_hyperparameters(args)
    if data_dir is None and "synthetic_data" not in hyperparameters and not (base / "input" / "data" / "train").exists():
        print("trainctl train: no data: give --data DIR, --python-docs or --synthetic-data true", file=sys.stderr)
        return 2

    from training.local import prepare_base_dir

    prepare_base_dir(base, hyperparameters, data_dir=data_dir, json_quoted=args.json_quoted)
    result = run_local(
        base, None, nproc=args.nproc, stop_at_step=args.stop_at_step,
        echo=lambda line: print(line, end="", flush=True),
    )
    losses = [(m["step"], m["loss"]) for m in read_metrics(base) if m.get("loss") is not None]
    if losses:
        print(f"trainctl train: loss {losses[0][1]:.4f} at step {losses[0][0]} -> {losses[-1][1]:.4f} at step {losses[-1][0]}")
    failure = read_failure(base)
    if result.returncode != 0:
        print(f"trainctl train: failed (exit {result.returncode}): {failure or 'see the output above'}", file=sys.stderr)
    elif result.interrupted_at is not None:
        print(f"trainctl train: stopped after step {result.interrupted_at}; run the same command again to resume")
    return result.returncode
