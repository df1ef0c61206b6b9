"""The trainer image's preparation entry point: one instance's part of a ``trainctl prepare-data --remote``
SageMaker Processing job (layout and paths: :mod:`platform_spec.processing`).

Each instance reads the files ShardedByS3Key staged for it (``ProcessingInputs`` ``data``), runs
:func:`training.prepare.prepare_data` on them into a work folder, and only when that succeeded moves the
result below its own part folder in the ``dataset`` output (``part-<host>``, or ``train/part-<host>`` and
``validation/part-<host>``): a failed instance leaves its output folder empty. Its host (``current_host``)
comes from ``resourceconfig.json``, the input and output folders from ``processingjobconfig.json`` (the
CreateProcessingJob request as SageMaker writes it). ``SAGEMAKER_BASE_DIR`` stands for ``/opt/ml`` (the
emulator runs several instances on one machine).

Validation split: ``--validation-fraction F`` applies :mod:`training.prepare`'s rule to each part's documents,
numbered within the part (the instance cannot count the documents of the files other instances read): each
document is held out with probability F, seeded, as locally; which documents differs from a local run over the
same files. Exit status 0 on success, 2 on refused input (the reason on stderr, naming the file).

Usage (``ContainerArguments``)::

    python -m training.processing [--tokenizer] [--text-field F] [--separator S | --no-separator]
        [--shard-tokens N] [--validation-fraction F --seed S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from platform_spec.processing import (
    CONFIG_DIR,
    INPUT_DATA,
    INPUT_TOKENIZER,
    MANIFEST,
    OUTPUT_DATASET,
    SPLITS,
    TOKENIZER_FILE,
    part_name,
)
from training.data import DataError
from training.prepare import PreparedDataset, prepare_data


def _local(path: str) -> Path:
    """A container path below ``/opt/ml`` under ``SAGEMAKER_BASE_DIR`` (the same when it is unset)."""
    base = os.environ.get("SAGEMAKER_BASE_DIR")
    relative = Path(path).relative_to("/opt/ml")
    return Path(base) / relative if base else Path(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read the job's configuration ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object")
    return data


def job_paths(job: dict[str, Any]) -> tuple[Path, Path | None, Path]:
    """The ``data`` and ``tokenizer`` inputs' and the ``dataset`` output's local folders of a
    ``processingjobconfig.json``.

    Raises:
        DataError: the job has no ``data`` input or ``dataset`` output."""
    inputs = {i.get("InputName"): i.get("S3Input", {}).get("LocalPath") for i in job.get("ProcessingInputs") or []}
    outputs = {
        o.get("OutputName"): o.get("S3Output", {}).get("LocalPath")
        for o in (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []
    }
    if not inputs.get(INPUT_DATA) or not outputs.get(OUTPUT_DATASET):
        raise DataError(
            f"processingjobconfig.json: expected a {INPUT_DATA!r} input and a {OUTPUT_DATASET!r} output "
            f"(got inputs {sorted(map(str, inputs))}, outputs {sorted(map(str, outputs))})"
        )
    tokenizer = inputs.get(INPUT_TOKENIZER)
    return _local(inputs[INPUT_DATA]), _local(tokenizer) if tokenizer else None, _local(outputs[OUTPUT_DATASET])


def _place(work: Path, out: Path, host: str, job: str, prepared: PreparedDataset) -> None:
    """Move a finished preparation in ``work`` below ``host``'s part folder(s) of ``out``. Each part's manifest
    gains ``processing_job`` (the job's name: the trainer's refusal of a dataset whose parts have no manifest
    over them names the job to finish). The copy of the tokenizer prepare_data put beside each split's shards
    stays out: the dataset has one per split, which trainctl writes from the job's ``tokenizer`` input beside
    the dataset's manifest (:mod:`platform_spec.processing`)."""
    moves = [(work / split, out / split / part_name(host)) for split in SPLITS] if prepared.validation else []
    moves = moves or [(work, out / part_name(host))]
    for source, target in moves:
        if target.exists():
            raise DataError(f"{target} exists: another preparation wrote this host's part")
        (source / TOKENIZER_FILE).unlink(missing_ok=True)
        manifest = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
        (source / MANIFEST).write_text(json.dumps({**manifest, "processing_job": job}, indent=2) + "\n")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), target)


def run(argv: Sequence[str] | None = None) -> PreparedDataset:
    """Prepare this instance's files (module docstring). Raises :class:`DataError` on refused input."""
    parser = argparse.ArgumentParser(prog="python -m training.processing")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--separator", default=None)
    parser.add_argument("--no-separator", action="store_true")
    parser.add_argument("--shard-tokens", type=int, default=None)
    parser.add_argument("--validation-fraction", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = _local(CONFIG_DIR)
    host = _read_json(config / "resourceconfig.json").get("current_host")
    if not isinstance(host, str) or not host:
        raise DataError(f"{config / 'resourceconfig.json'}: no current_host")
    job = _read_json(config / "processingjobconfig.json")
    name = job.get("ProcessingJobName")
    if not isinstance(name, str) or not name:
        raise DataError(f"{config / 'processingjobconfig.json'}: no ProcessingJobName")
    data, tokenizer_dir, out = job_paths(job)
    tokenizer = tokenizer_dir / TOKENIZER_FILE if tokenizer_dir else None
    if not data.is_dir() or not any(p.is_file() for p in data.rglob("*")):
        raise DataError(f"{host}: no input files in {data} (the job has more instances than files)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".prepare-", dir=out.parent) as scratch:
        work = Path(scratch) / "dataset"
        options: dict[str, Any] = {"shard_tokens": args.shard_tokens} if args.shard_tokens else {}
        prepared = prepare_data(
            work,
            [data],
            tokenizer,
            separator=args.separator,
            no_separator=args.no_separator,
            text_field=args.text_field,
            validation_fraction=args.validation_fraction,
            seed=args.seed,
            **options,
        )
        _place(work, out, host, name, prepared)
    print(
        f"[prepare] {host}: {prepared.num_documents} documents, {prepared.num_tokens} tokens "
        f"in {len(prepared.shards)} shards"
        + (f"; validation {prepared.validation.num_tokens} tokens" if prepared.validation else ""),
        flush=True,
    )
    return prepared


def main(argv: Sequence[str] | None = None) -> int:
    try:
        run(argv)
    except DataError as exc:
        print(f"prepare-data: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
