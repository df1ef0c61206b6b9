"""A sweep's grid: parsing ``KEY=V1,V2`` axes, expanding them over a base into configurations, and the
configurations' deterministic names (the training job's ``job_name`` and ``client_token``).

Grid keys and values are checked with :mod:`platform_spec.hyperparameters` (a bad one raises
:class:`~platform_spec.hyperparameters.HyperparameterError` naming the key and its allowed values); each
configuration is validated as a whole (cross-field rules and the model family's shape rule): one that breaks a
rule is ``Skipped`` with the rule as its reason.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.errors import FieldError
from trainctl.sweeps.state import SKIPPED, SweepConfig, SweepError


def parse_grid(grid: Mapping[str, Sequence[Any]] | Sequence[str]) -> dict[str, list[str]]:
    """Validate a grid: ``{"precision": ["bf16", "fp8"], ...}`` or ``["precision=bf16,fp8", ...]``.

    Keys are normalised (``batch-size`` -> ``batch_size``), values coerced with
    the trainer's rules and rendered as SageMaker strings (``"MXFP8"`` ->
    ``"mxfp8"``); duplicate values are dropped, order is kept.

    Returns:
        ``{key: [value strings]}`` in the order given.

    Raises:
        HyperparameterError: an unknown key (lists the known ones) or a value
            out of range (names the key and its allowed values).
        SweepError: malformed ``KEY=V1,V2`` text, a key given twice, no values.
    """
    items: list[tuple[str, list[Any]]] = []
    if isinstance(grid, Mapping):
        items = [(str(k), list(v) if isinstance(v, (list, tuple)) else [v]) for k, v in grid.items()]
    else:
        for spec in grid:
            key, sep, values = str(spec).partition("=")
            if not sep or not key.strip():
                raise SweepError(f"grid {spec!r}: expected KEY=V1,V2,... (e.g. precision=bf16,fp8)")
            items.append((key, list(values.split(","))))
    out: dict[str, list[str]] = {}
    for key, values in items:
        name = hpmod.normalise_name(key)
        spec = hpmod.lookup(name, key)
        if name in out:
            raise SweepError(f"grid key {name!r} given twice; give all its values once: {name}=V1,V2")
        rendered: list[str] = []
        for raw in values:
            if isinstance(raw, str) and not raw.strip():
                raise hpmod.HyperparameterError(name, raw, spec.expected())
            text = hpmod.format_value(hpmod.coerce(name, raw))
            if text not in rendered:
                rendered.append(text)
        if not rendered:
            raise SweepError(f"grid key {name!r} has no values")
        out[name] = rendered
    if not out:
        raise SweepError("the grid is empty: give at least one --grid KEY=V1,V2")
    return out


def parse_assignments(values: Sequence[str] | Mapping[str, Any] | None) -> dict[str, str]:
    """``["max_steps=100", ...]`` (or a mapping) as validated hyperparameter strings.

    Raises:
        HyperparameterError: unknown key or bad value.
        SweepError: malformed ``KEY=VALUE``.
    """
    if not values:
        return {}
    pairs: list[tuple[str, Any]]
    if isinstance(values, Mapping):
        pairs = list(values.items())
    else:
        pairs = []
        for text in values:
            key, sep, value = str(text).partition("=")
            if not sep or not key.strip():
                raise SweepError(f"--set {text!r}: expected KEY=VALUE (e.g. max_steps=100)")
            pairs.append((key, value))
    out: dict[str, str] = {}
    for key, value in pairs:
        name = hpmod.normalise_name(key)
        out[name] = hpmod.format_value(hpmod.coerce(name, value))
    return out


def expand(grid: Mapping[str, Sequence[str]], base_hyperparameters: Mapping[str, str]) -> list[SweepConfig]:
    """The cartesian product of ``grid`` (first key slowest) over ``base_hyperparameters``.

    A combination that breaks a cross-field rule (e.g. ``quantized_model_init``
    with a precision the trainer does not store quantized:
    :func:`platform_spec.hyperparameters.quantized_model_init_refusal`), or whose model shape its family's rule refuses
    (:func:`platform_spec.hyperparameters.model_shape`: e.g. ``num_kv_heads`` not dividing ``num_heads``,
    a width that is not the precision's GEMM multiple), is ``Skipped`` with the rule as its reason,
    naming the field: ``invalid combination: hyperparameter 'num_kv_heads': got 3, expected ...``.
    """
    keys = list(grid)
    configs: list[SweepConfig] = []
    for index, values in enumerate(itertools.product(*(grid[k] for k in keys))):
        overrides = dict(zip(keys, values, strict=True))
        full = {**base_hyperparameters, **overrides}
        config = SweepConfig(index=index, overrides=overrides, hyperparameters=full)
        try:
            hpmod.parse(full)
        except FieldError as exc:  # HyperparameterError: a cross-field rule, or the model family's shape rule
            config.mark(SKIPPED, f"invalid combination: {exc}")
        configs.append(config)
    return configs


def client_token_for(name: str, config: SweepConfig) -> str:
    """``sweep-<name>-<20 hex>``: SHA-256 of the sweep name and the configuration's grid values."""
    return f"sweep-{name}-{_config_digest(name, config)[:20]}"


def job_name_for(name: str, config: SweepConfig) -> str:
    """A readable, deterministic ``TrainingJobName`` (<= 63 characters): ``<name>-<grid values>-<8 hex>``."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", f"{name[:30]}-{config.label}").strip("-")[:53].strip("-")
    return f"{stem}-{_config_digest(name, config)[:8]}"


def _config_digest(name: str, config: SweepConfig) -> str:
    blob = json.dumps({"sweep": name, "overrides": config.overrides}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


__all__ = ["client_token_for", "expand", "job_name_for", "parse_assignments", "parse_grid"]
