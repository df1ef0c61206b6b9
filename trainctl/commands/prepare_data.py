"""``trainctl prepare-data``: text, JSONL, Parquet or Arrow files -> token shards for the train channel
(and, with ``--validation-fraction``, a held-out validation split).

Formats read and refused: :mod:`training.documents`. Shard format: :mod:`training.data` (``shard-NNNNN.bin``
raw little-endian uint16/uint32 tokens + ``shard-NNNNN.json`` header). Layout and manifest:
:mod:`training.prepare`. On an error nothing is written and the shards already in ``--output`` stay as they
were. Tokenizer: a local ``tokenizer.json`` (Hugging Face ``tokenizers``), or byte-level (bytes 0-255 +
end-of-document 256) without ``--tokenizer``.

Examples::

    trainctl prepare-data --output data/pydocs --python-docs
    trainctl prepare-data --output data/mine --tokenizer tokenizer.json corpus/*.jsonl.zst
    trainctl prepare-data --output data/fineweb --tokenizer tokenizer.json --validation-fraction 0.001 \\
        fineweb/sample/10BT

    trainctl prepare-data --remote --output s3://DATA_BUCKET/prepared/fineweb --tokenizer tokenizer.json \\
        --instance-count 8 s3://DATA_BUCKET/raw/fineweb/

With ``--remote`` the one input is an S3 prefix of the data bucket, prepared by a SageMaker Processing job
(:mod:`trainctl.remote_prepare`) on the platform's trainer image: the deployed stack's (``--stack``), or the
emulator's when ``AWS_ENDPOINT_URL`` is set (``source .demo/aws.env``).

This module parses the arguments; :mod:`trainctl.shards` and :mod:`trainctl.remote_prepare` do the work.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Tokenize text, JSONL, Parquet or Arrow files into token shards for the trainer's train channel."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        help="files or folders (with --remote: one s3:// prefix of the data bucket): JSONL (plain, .gz, .zst), Parquet (FineWeb's folder tree too), datasets Arrow "
        "files or save_to_disk folders, plain text (one document per file)",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="output directory for shard-*.bin/.json (with --remote: s3://DATA_BUCKET/prepared/NAME/, empty)",
    )
    parser.add_argument("--tokenizer", type=Path, default=None, help="local tokenizer.json (default: byte-level)")
    parser.add_argument(
        "--text-field", default="text", help="the JSONL field or Parquet/Arrow column of the text (default: text)"
    )
    separator = parser.add_mutually_exclusive_group()
    separator.add_argument(
        "--separator",
        default=None,
        help="token appended after each document (default: the tokenizer's <|endoftext|>, </s>, <eos>, ...)",
    )
    separator.add_argument(
        "--no-separator",
        action="store_true",
        help="append nothing: documents run together (for a tokenizer that has no separator token)",
    )
    parser.add_argument("--shard-tokens", type=int, default=None, help="tokens per shard (default 64 Mi)")
    held_out = parser.add_mutually_exclusive_group()
    held_out.add_argument(
        "--validation-fraction",
        type=float,
        default=None,
        help="hold out this share of the documents, in (0, 1), as OUTPUT/validation (the rest: OUTPUT/train)",
    )
    held_out.add_argument(
        "--validation-documents",
        type=int,
        default=None,
        help="or hold out this many documents, drawn at random (seeded) after counting them",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the validation split (default 0)")
    parser.add_argument(
        "--python-docs",
        action="store_true",
        help="add CPython's documentation topics (pydoc_data, ~0.45 MB of text on every machine) as one input",
    )

    remote = parser.add_argument_group("remote preparation (a SageMaker Processing job)")
    remote.add_argument("--remote", action="store_true", help="prepare an S3 prefix in a SageMaker Processing job")
    remote.add_argument("--instance-count", type=int, default=1, help="instances (each gets whole files; default 1)")
    remote.add_argument("--instance-type", default=None, help="a CPU instance type (default ml.m5.xlarge)")
    remote.add_argument("--no-wait", action="store_true", help="print the job's name and return")
    remote.add_argument(
        "--attach", metavar="JOB", default=None, help="wait for a job launched with --no-wait and write its manifest"
    )
    remote.add_argument("--stack", default="TrainingPlatform", help="the platform's stack (default TrainingPlatform)")


def run(args: argparse.Namespace) -> int:
    from trainctl.shards import prepare_shards

    return prepare_shards(
        args.output,
        args.files,
        tokenizer=args.tokenizer,
        separator=args.separator,
        no_separator=args.no_separator,
        text_field=args.text_field,
        shard_tokens=args.shard_tokens,
        validation_fraction=args.validation_fraction,
        validation_documents=args.validation_documents,
        seed=args.seed,
        python_docs=args.python_docs,
        remote=args.remote,
        instance_count=args.instance_count,
        instance_type=args.instance_type,
        no_wait=args.no_wait,
        attach=args.attach,
        stack=args.stack,
    )
