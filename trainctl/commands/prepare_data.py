"""``trainctl prepare-data``: text or JSONL files -> token shards for the train channel.

Shard format: :mod:`training.data` (``shard-NNNNN.bin`` raw little-endian
uint16/uint32 tokens + ``shard-NNNNN.json`` header with the shard's largest
token id, so the trainer checks ids against the vocabulary without a scan).
On an error the shards already in ``--output`` stay as they were. Tokenizer: a local
``tokenizer.json`` (Hugging Face ``tokenizers``), or byte-level (bytes 0-255
+ end-of-document 256) without ``--tokenizer``.

Examples::

    trainctl prepare-data --output data/pydocs --python-docs
    trainctl prepare-data --output data/mine --tokenizer tokenizer.json corpus/*.jsonl

This module parses the arguments; :mod:`trainctl.shards` tokenizes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Tokenize text or JSONL files into token shards for the trainer's train channel."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="*", type=Path, help="text files (one document each) or JSONL (a 'text' field per line)"
    )
    parser.add_argument("--output", required=True, type=Path, help="output directory for shard-*.bin/.json")
    parser.add_argument("--tokenizer", type=Path, default=None, help="local tokenizer.json (default: byte-level)")
    parser.add_argument(
        "--eod-token", default=None, help="end-of-document token of the tokenizer (default: <|endoftext|>, </s>, ...)"
    )
    parser.add_argument("--shard-tokens", type=int, default=None, help="tokens per shard (default 64 Mi)")
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
        eod_token=args.eod_token,
        shard_tokens=args.shard_tokens,
        python_docs=args.python_docs,
    )
