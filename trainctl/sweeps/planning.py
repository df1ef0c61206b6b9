"""Defining a sweep: its base (a submitter request, or hyperparameters for local runs), the grid expanded
over it and pruned, or the existing sweep of that name when its definition is the same.

What happens, in order (:func:`plan_sweep`): the grid is parsed and expanded
(:mod:`trainctl.sweeps.grid`), then pruned (:mod:`trainctl.sweeps.pruning`);
AWS configurations get their deterministic ``job_name`` and ``client_token``,
local ones their run folder. A sweep's definition (mode, base, grid, target)
is fixed once created: running it again with a different one raises
:class:`~trainctl.sweeps.state.SweepError` (choose another name).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from trainctl.sweeps.grid import client_token_for, expand, job_name_for, parse_assignments, parse_grid
from trainctl.sweeps.pruning import local_device, prune_for_instance, prune_for_local, trainable_instance
from trainctl.sweeps.state import DEFAULT_SWEEPS_DIR, SKIPPED, STATE_FILE, Sweep, SweepError, check_name

LOCAL_BASE_HYPERPARAMETERS: dict[str, str] = {
    "model": "gpt-tiny",
    "precision": "bf16",
    "batch_size": "4",
    "seq_length": "128",
    "max_steps": "60",
    "warmup_steps": "5",
    "learning_rate": "0.003",
    "min_learning_rate": "0.0003",
    "log_interval": "1",
    "checkpoint_interval": "1000",
    "keep_checkpoints": "1",
    "seed": "1234",
}
"""The default base of a local sweep: gpt-tiny (4 blocks, hidden 256, 3.4 M parameters)
on byte-level CPython documentation, 60 steps of ``batch_size`` x 128 tokens per
process, every step logged (for the loss curves). Measured on 2 shared cores with 2
CPU processes per run: 15-35 s per configuration at batch 1-4, 60-80 s at batch 16;
override with ``set_values`` / ``--set``."""

AWS_BASE_REQUEST: dict[str, Any] = {
    "instance_type": DEFAULT_INSTANCE_TYPE,
    "instance_count": 1,
    "capacity": "auto",
    "hyperparameters": {**hpmod.GUIDE_DEFAULT_REQUEST, "max_steps": "500", "log_interval": "10"},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 4,
}
"""The default base request of an AWS sweep: the guide's ``train.sh`` defaults
(gpt-1b with 10 layers, mxfp8, batch 8, sequence 2048) for 500 steps."""


def _read_base(base: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if base is None:
        return None
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base))
    path = Path(base)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        raise SweepError(f"--base {path}: cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise SweepError(f"--base {path}: expected a JSON object (a submit request, or hyperparameters)")
    return data


def _strings(hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in hyperparameters.items():
        name = hpmod.normalise_name(key)
        if value is None:
            continue
        out[name] = hpmod.format_value(hpmod.coerce(name, value))
    return out


def plan_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    *,
    mode: str,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    nproc: int = 2,
    data_dir: str | os.PathLike[str] | None = None,
    device: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    submitter: str = "in-process",
) -> Sweep:
    """Expand and prune a sweep, or load it when it exists with the same definition.

    Args:
        grid: see :func:`~trainctl.sweeps.grid.parse_grid`; ``None`` resumes an existing sweep as defined.
        mode: ``"local"`` or ``"aws"``.
        base: AWS: a submit request (path or mapping; default :data:`AWS_BASE_REQUEST`);
            local: a request (its ``hyperparameters`` are used) or a hyperparameters
            object, over :data:`LOCAL_BASE_HYPERPARAMETERS`.
        set_values: ``KEY=VALUE`` hyperparameters applied over the base.
        nproc: local: processes per run when there is no GPU.
        data_dir: local: token shards (default: CPython's docs, prepared once under ``sweeps_dir``).
        device: local: :func:`~trainctl.sweeps.pruning.local_device` (detected when None).
        env: AWS: the environment (``DEFAULT_INSTANCE_TYPE`` when the base names no instance).
        submitter: AWS: ``"in-process"`` or the function name (recorded only).

    Returns:
        The sweep (not yet saved when new).

    Raises:
        SweepError: bad name / mode / base, no grid for a new sweep, or an existing
            sweep of that name with a different definition.
        HyperparameterError: a bad grid or ``--set`` key or value.
    """
    check_name(name)
    if mode not in ("local", "aws"):
        raise SweepError(f"mode {mode!r}: expected 'local' or 'aws'")
    directory = Path(sweeps_dir) / name
    existing = Sweep.load(directory) if (directory / STATE_FILE).is_file() else None
    if grid is None:
        if existing is None:
            raise SweepError(f"sweep {name!r} does not exist in {Path(sweeps_dir)}: give its grid (--grid KEY=V1,V2)")
        if existing.mode != mode:
            raise SweepError(
                f"sweep {name!r} is a {existing.mode} sweep; run it {'with --local' if existing.mode == 'local' else 'without --local'}"
            )
        return existing
    parsed_grid = parse_grid(grid)
    overrides = parse_assignments(set_values)
    raw_base = _read_base(base)

    if mode == "local":
        if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
            raise SweepError(f"nproc {nproc!r}: expected an integer >= 1")
        given = {}
        if raw_base is not None:
            given = raw_base.get("hyperparameters", raw_base)
            if not isinstance(given, Mapping):
                raise SweepError("--base: 'hyperparameters' must be a JSON object")
        base_hp = {**LOCAL_BASE_HYPERPARAMETERS, **_strings(given), **overrides}
        hpmod.parse(base_hp)
        dev = dict(device) if device is not None else local_device()
        target: dict[str, Any] = {"nproc": nproc, "device": dev, "data": str(data_dir) if data_dir else "python-docs"}
        sweep_base: dict[str, Any] = base_hp
    else:
        request = raw_base if raw_base is not None else copy.deepcopy(AWS_BASE_REQUEST)
        hp_raw = request.get("hyperparameters") or {}
        if not isinstance(hp_raw, Mapping):
            raise SweepError("base request: 'hyperparameters' must be a JSON object")
        base_hp = {**_strings(hp_raw), **overrides}
        hpmod.parse(base_hp)
        request["hyperparameters"] = base_hp
        for key in ("client_token", "job_name", "dry_run"):
            if key in request:
                raise SweepError(f"base request: remove {key!r}: the sweep sets it for each configuration")
        environ = os.environ if env is None else env
        instance_type = request.get("instance_type") or environ.get("DEFAULT_INSTANCE_TYPE") or DEFAULT_INSTANCE_TYPE
        request["instance_type"] = instance_type
        count = request.get("instance_count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SweepError(f"base request: instance_count {count!r}: expected an integer >= 1")
        gpu = trainable_instance(instance_type, "base request: ").gpu_spec.name
        target = {"instance_type": instance_type, "instance_count": count, "gpu": gpu, "submitter": submitter}
        sweep_base = request

    sweep = Sweep(
        name=name,
        mode=mode,
        grid=parsed_grid,
        base=sweep_base,
        target=target,
        directory=directory,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if existing is not None:
        if existing.definition() != sweep.definition():
            differs = [
                k for k in ("mode", "grid", "base", "target") if existing.definition()[k] != sweep.definition()[k]
            ]
            raise SweepError(
                f"sweep {name!r} already exists in {directory} with a different {', '.join(differs)}; "
                f"run it again as defined (omit --grid to resume it) or choose another --name"
            )
        existing.target.update({k: v for k, v in target.items() if k in ("submitter", "device")})
        return existing

    sweep.configs = expand(parsed_grid, base_hp)
    if mode == "local":
        prune_for_local(sweep.configs, target["device"])
    else:
        prune_for_instance(
            sweep.configs,
            target["instance_type"],
            target["instance_count"],
            auto_tune=bool(sweep_base.get("auto_tune")),
        )
    for config in sweep.configs:
        if config.status == SKIPPED:
            continue
        if mode == "aws":
            config.client_token = client_token_for(name, config)
            config.job_name = job_name_for(name, config)
        else:
            config.run_dir = f"runs/{config.id}"
    return sweep


__all__ = ["AWS_BASE_REQUEST", "LOCAL_BASE_HYPERPARAMETERS", "plan_sweep"]
