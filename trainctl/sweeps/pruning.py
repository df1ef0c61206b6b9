"""Pruning a sweep's configurations before anything runs, each skipped one with its reason.

* AWS: the planner (:mod:`planner`) skips configurations the instance's GPU cannot run (e.g. ``mxfp8`` on
  Hopper) and those predicted not to fit in GPU memory, each with its reason and the estimate (unless the
  base request sets ``auto_tune``: the submitter then applies the planner's change).
* Local: precisions the host cannot run (``fp8``/``mxfp8``/``nvfp4``/``fp16`` need an NVIDIA GPU; the CPU
  path runs :data:`platform_spec.hyperparameters.CPU_PRECISIONS`); on a known GPU, the planner as for AWS.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from platform_spec import hyperparameters as hpmod
from platform_spec.catalogue import InstanceSpec
from platform_spec.errors import FieldError
from platform_spec.precisions import get_precision
from trainctl.sweeps.state import SKIPPED, SweepConfig, SweepError

if TYPE_CHECKING:
    from planner import Plan


def prediction_of(plan: Plan) -> dict[str, Any]:
    """The planner figures a sweep keeps for one configuration (per GPU unless stated).

    Keys: ``instance_type``, ``instance_count``, ``gpu``, ``world_size``, ``fits``,
    ``memory_gb_total`` (predicted peak allocated, GB), ``memory_gb_required``
    (with margins), ``memory_gb_usable``, ``tokens_per_second`` (job),
    ``tokens_per_second_per_gpu``, ``mfu`` (percent), ``step_time_s``, ``source``.
    """
    hardware = plan.resolved
    return {
        "instance_type": hardware.instance.instance_type,
        "instance_count": plan.input.instance_count,
        "gpu": hardware.gpu.name,
        "world_size": hardware.world_size,
        "fits": bool(plan.fits),
        "memory_gb_total": round(float(plan.memory_gb.total), 3),
        "memory_gb_required": round(float(plan.memory_gb.required), 3),
        "memory_gb_usable": round(float(plan.memory_gb.usable), 3),
        "tokens_per_second": round(float(plan.tokens_per_second), 1),
        "tokens_per_second_per_gpu": round(float(plan.tokens_per_second_per_gpu), 1),
        "mfu": round(float(plan.mfu), 2),
        "step_time_s": round(float(plan.step_time_s), 6),
        "source": "planner.estimate",
    }


def trainable_instance(instance_type: str, where: str = "") -> InstanceSpec:
    """The catalogue entry of an instance type the trainer image runs on; SweepError naming the types to use
    (and, for a known type it does not run on, why) otherwise: the planner's one rule."""
    from platform_spec import catalogue

    try:
        return catalogue.get_trainable_instance(instance_type)
    except FieldError as exc:
        detail = f" ({exc.detail})" if exc.detail else ""
        raise SweepError(f"{where}instance_type {instance_type!r}: expected {exc.expected}{detail}") from None


def prune_for_instance(
    configs: Sequence[SweepConfig], instance_type: str, instance_count: int, *, auto_tune: bool = False
) -> None:
    """Mark configurations the hardware cannot run or that are predicted not to fit as ``Skipped``.

    Every configuration that the planner can estimate gets its ``prediction``.

    Raises:
        SweepError: the instance type is not in the planner's catalogue, or the trainer image does not
            run on it (:func:`platform_spec.catalogue.get_trainable_instance`).
    """
    import planner
    from platform_spec import catalogue

    instance = trainable_instance(instance_type)
    gpu = instance.gpu_spec
    for config in configs:
        if config.status == SKIPPED:
            continue
        hp = hpmod.parse(config.hyperparameters)
        if not catalogue.supports_precision(gpu, hp.precision):
            supported = ", ".join(catalogue.supported_precisions(gpu))
            config.mark(
                SKIPPED,
                f"hardware: {hp.precision} does not run on {gpu.name} ({instance.instance_type}); "
                f"it supports {supported} ({hp.precision} needs {get_precision(hp.precision).hardware})",
            )
            continue
        plan_input = planner.PlanInput.from_hyperparameters(
            hp, instance_type=instance.instance_type, instance_count=instance_count
        )
        try:
            plan = planner.estimate(plan_input)
        except ValueError as exc:
            config.mark(SKIPPED, f"the planner cannot estimate it: {exc}")
            continue
        config.prediction = prediction_of(plan)
        if plan.fits or auto_tune:
            continue
        suggestion = ""
        tuned = planner.auto_tune(plan_input)
        if tuned is not None and tuned[1]:
            suggestion = "; the planner suggests: " + "; ".join(tuned[1])
        config.mark(
            SKIPPED,
            f"predicted out of memory: {plan.memory_gb.total:.1f} GB peak per GPU "
            f"({plan.memory_gb.required:.1f} GB with margins) of {plan.memory_gb.usable:.1f} GB usable "
            f"on {gpu.name} ({instance.instance_type}){suggestion}",
        )


def local_device(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The device a local run trains on: ``{"type": "cpu"}`` or ``{"type": "cuda", "gpus", "name", "gpu"}``.

    ``gpu`` is the planner catalogue's name for it (``None`` when unknown). Uses
    ``nvidia-smi`` (no torch import), as the entry point does.
    """
    from training.entrypoint import count_gpus

    gpus = count_gpus(environ)
    if gpus == 0:
        return {"type": "cpu"}
    name = ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
        name = out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    from platform_spec import catalogue

    spec = catalogue.gpu_for_device_name(name) if name else None
    return {"type": "cuda", "gpus": gpus, "name": name, "gpu": spec.name if spec else None}


def prune_for_local(configs: Sequence[SweepConfig], device: Mapping[str, Any]) -> None:
    """Skip configurations the local host cannot run; on a known GPU, add the planner's prediction
    when the catalogue has an instance with that GPU count, and skip predicted OOM."""
    if device.get("type") != "cuda":
        for config in configs:
            if config.status != SKIPPED and config.precision not in hpmod.CPU_PRECISIONS:
                config.mark(
                    SKIPPED,
                    f"hardware: {config.precision} needs an NVIDIA GPU; this host has none and the CPU path "
                    f"runs {', '.join(hpmod.CPU_PRECISIONS)}",
                )
        return
    from platform_spec import catalogue

    gpu = device.get("gpu")
    if gpu is None:
        return
    instance = next(  # the planner plans only the types the trainer image runs on (a GB200 host: precision checks only)
        (
            i
            for i in (catalogue.INSTANCES[t] for t in catalogue.TRAINABLE_INSTANCE_TYPES)
            if i.gpu_spec.name == gpu and i.gpus_per_instance == device.get("gpus")
        ),
        None,
    )
    if instance is not None:
        prune_for_instance(configs, instance.instance_type, 1)
        return
    for config in configs:
        if config.status != SKIPPED and not catalogue.supports_precision(gpu, config.precision):
            config.mark(
                SKIPPED,
                f"hardware: {config.precision} does not run on {gpu}; it supports {', '.join(catalogue.supported_precisions(gpu))}",
            )


__all__ = ["local_device", "prediction_of", "prune_for_instance", "prune_for_local", "trainable_instance"]
