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

This module parses the arguments; :mod:`trainctl.shards` tokenizes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Tokenize text, JSONL, Parquet or Arrow files into token shards for the trainer's train channel."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="files or folders: JSONL (plain, .gz, .zst), Parquet (FineWeb's folder tree too), datasets Arrow "
        "files or save_to_disk folders, plain text (one document per file)",
    )
    parser.add_argument("--output", required=True, type=Path, help="output directory for shard-*.bin/.json")
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
    )
