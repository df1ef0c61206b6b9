"""What ``trainctl prepare-data`` does: text, JSONL, Parquet or Arrow inputs (and, on request, CPython's
documentation) -> token shards for the trainer's train channel (:func:`training.prepare.prepare_data`)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from platform_spec.errors import FieldError
from trainctl.output_paths import folder_problem, os_error_text, output_error


def prepare_shards(
    output: str | os.PathLike[str],
    files: Sequence[str | os.PathLike[str]],
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    separator: str | None = None,
    no_separator: bool = False,
    text_field: str = "text",
    shard_tokens: int | None = None,
    validation_fraction: float | None = None,
    validation_documents: int | None = None,
    seed: int = 0,
    python_docs: bool = False,
    remote: bool = False,
    instance_count: int = 1,
    instance_type: str | None = None,
    no_wait: bool = False,
    attach: str | None = None,
    stack: str = "TrainingPlatform",
) -> int:
    """Tokenize ``files`` (plus CPython's documentation topics with ``python_docs``) into shards in ``output``
    and print what was written.

    Args:
        tokenizer: a local ``tokenizer.json`` (default: byte-level, bytes 0-255 + end-of-document 256).
        separator, no_separator, text_field, validation_fraction, validation_documents, seed: :func:`training.prepare.prepare_data`.
        shard_tokens: tokens per shard (default :data:`training.data.DEFAULT_SHARD_TOKENS`).
        remote, instance_count, instance_type, no_wait, attach, stack: prepare the one input, an S3 prefix, in a SageMaker
            Processing job instead (:func:`trainctl.remote_prepare.prepare_remote_command`).

    Returns:
        The exit status: 0; 1 the data cannot be tokenized or written (one line on stderr; the shards already
        in ``output`` stay as they were); 2 no input given, ``shard_tokens`` below 2 or ``output`` not a
        folder path (one line naming the argument, before anything is read or written).
    """
    if remote:
        from trainctl.remote_prepare import prepare_remote_command

        local_only = {"--python-docs": python_docs, "--validation-documents": validation_documents is not None}
        return prepare_remote_command(
            str(output),
            [str(f) for f in files],
            local_only=[flag for flag, given in local_only.items() if given],
            tokenizer=Path(tokenizer) if tokenizer is not None else None,
            separator=separator,
            no_separator=no_separator,
            text_field=text_field,
            shard_tokens=shard_tokens,
            validation_fraction=validation_fraction,
            seed=seed,
            instance_count=instance_count,
            instance_type=instance_type,
            no_wait=no_wait,
            attach=attach,
            stack=stack,
        )
    from training.corpus import python_docs_corpus
    from training.data import DEFAULT_SHARD_TOKENS, DataError
    from training.prepare import prepare_data

    problem = folder_problem(output)
    if problem is not None:
        print(f"trainctl prepare-data: {output_error('--output', output, problem)}", file=sys.stderr)
        return 2
    if shard_tokens is not None and shard_tokens < 2:  # 0 used to mean the default
        print(
            f"trainctl prepare-data: {FieldError('--shard-tokens', shard_tokens, 'an integer >= 2')}", file=sys.stderr
        )
        return 2
    inputs = [Path(f) for f in files]
    with tempfile.TemporaryDirectory() as tmp:
        if python_docs:
            inputs.append(python_docs_corpus(Path(tmp) / "python-docs.jsonl"))
        if not inputs:
            print("trainctl prepare-data: give input files or --python-docs", file=sys.stderr)
            return 2
        try:
            result = prepare_data(
                Path(output),
                inputs,
                Path(tokenizer) if tokenizer is not None else None,
                separator=separator,
                no_separator=no_separator,
                shard_tokens=DEFAULT_SHARD_TOKENS if shard_tokens is None else shard_tokens,
                text_field=text_field,
                validation_fraction=validation_fraction,
                validation_documents=validation_documents,
                seed=seed,
            )
        except DataError as exc:
            print(f"trainctl prepare-data: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:  # what only reading or writing can tell: no permission, a full disk
            print(f"trainctl prepare-data: {os_error_text(exc)}", file=sys.stderr)
            return 1
    print(
        f"wrote {len(result.shards)} shard(s) to {result.train.directory}: {result.num_tokens:,} tokens from "
        f"{result.num_documents} documents, vocab_size {result.vocab_size} ({result.tokenizer}), "
        f"largest token id {result.max_token_id}"
    )
    if result.validation is not None:
        held = result.validation
        print(
            f"held out {held.num_documents} documents ({held.num_tokens:,} tokens) in {len(held.shards)} "
            f"shard(s) in {held.directory} (seed {seed})"
        )
    if result.skipped_documents:
        print(f"skipped {result.skipped_documents} documents with no text (empty or null)")
    return 0


__all__ = ["prepare_shards"]
