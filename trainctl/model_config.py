"""``--model-config FILE``: a Hugging Face ``config.json`` as the model's shape, for ``trainctl train`` and
``trainctl plan``.

The mapping is the model family's (:func:`platform_spec.hyperparameters.merge_model_config`, the same one
the submitter applies to a request's ``model_config``): ``model`` becomes the family's custom shape and its
shape hyperparameters come from the file (Llama, Mistral, Qwen2/2.5 and Qwen3 configurations, in the
transformers 4 or 5 form: :func:`model_families.llama.from_hf_config`); content the trainer does not implement
(a sliding window shorter than the sequence, another RoPE type, biases elsewhere, another activation, an unknown
key) is refused with the key named, and so is a shape flag given as well.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platform_spec.errors import FieldError
from platform_spec.hyperparameters import merge_model_config


class ModelConfigError(ValueError):
    """A ``--model-config`` file (or ``--init-from``'s ``config.json``) cannot be read, or describes a shape the
    trainer refuses; the message names the flag, the file and the key (or the flag that sets the shape too)."""


def read_model_config(path: str | os.PathLike[str], *, flag: str = "--model-config") -> Any:
    """The JSON value of the file at ``path`` (given by ``flag``: ``--model-config FILE``, or the
    ``config.json`` of ``--init-from DIR``).

    Raises:
        ModelConfigError: unreadable or not JSON (names the file and why).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        detail = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ModelConfigError(f"{flag} {path}: cannot read a JSON config.json ({detail})") from None


def model_config_values(
    path: str | os.PathLike[str], values: Mapping[str, Any], *, flag: str = "--model-config"
) -> dict[str, Any]:
    """``values`` (hyperparameters given as flags, ``None`` for unset) with the shape of the ``config.json``
    at ``path``: ``model`` and the family's shape hyperparameters (typed values).

    Raises:
        ModelConfigError: the file is unreadable, a key of it is refused (named as ``model_config.<key>``),
            or a flag sets the shape too (named as ``--<flag>``).
    """
    config = read_model_config(path, flag=flag)
    given = {name: value for name, value in values.items() if value is not None}
    try:
        merged = merge_model_config(given, config)
    except FieldError as exc:
        where = exc.field if exc.field.startswith("model_config") else "--" + exc.field.replace("_", "-")
        raise ModelConfigError(f"{flag} {path}: {where}: {exc.reason}") from None
    return {**dict(values), **merged}


__all__ = ["ModelConfigError", "model_config_values", "read_model_config"]
