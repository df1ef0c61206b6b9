"""Pruning a sweep's configurations before anything runs, each skipped one with its reason.

* AWS: the planner (:mod:`planner`) skips configurations the instance's GPU cannot run (e.g. ``mxfp8`` on
  Hopper) and those its memory verdict refuses, as the job submitter's preflight does
  (``platform_constructs.submitter.runtime.service.preflight``, the rule these runs go through next):
  ``fits`` runs; ``at-risk`` (the requirement within the planner's stated error of usable memory,
  :data:`planner.AT_RISK_FRACTION`) runs only when the base accepts the risk (``accept_memory_risk``);
  otherwise, with ``auto_tune``, the configuration runs with the planner's change (the submitter applies the
  same :func:`planner.auto_tune`), and without it (or when no change fits) it is skipped with the verdict,
  the figures and the change that would fit.
* Local: precisions the host cannot run (``fp8``/``mxfp8``/``nvfp4``/``fp16`` need an NVIDIA GPU; the CPU
  path runs :data:`platform_spec.hyperparameters.CPU_PRECISIONS`); on a known GPU, the planner as for AWS
  (no ``auto_tune``: a local run trains the configuration as given).

Every configuration the planner estimates keeps its prediction (:func:`prediction_of`): the memory verdict
and figures always, the speed figures only for a configuration that runs (a skipped one did not, so it
shows no tokens/s or MFU as if it had).
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

SPEED_FIGURES: tuple[str, ...] = ("tokens_per_second", "tokens_per_second_per_gpu", "mfu", "step_time_s")
"""The keys of a prediction that describe a run (``None`` in the prediction of a configuration that does not run)."""


def not_run_reason(status: str, required_gb: float, usable_gb: float) -> str:
    """Why a configuration's speed figures are withheld, from the planner's memory verdict: ``"not run:
    out-of-memory (90.1 GB needed per GPU, 85.5 GB usable)"``, ``"not run: at-risk (82.4 GB needed per GPU,
    within 5% of 85.5 GB usable)"``."""
    from planner import AT_RISK_FRACTION

    within = f"within {AT_RISK_FRACTION:.0%} of " if status == "at-risk" else ""
    return f"not run: {status} ({required_gb:.1f} GB needed per GPU, {within}{usable_gb:.1f} GB usable)"


def prediction_of(plan: Plan, *, runs: bool | None = None) -> dict[str, Any]:
    """The planner figures a sweep keeps for one configuration (per GPU unless stated).

    Args:
        runs: whether the configuration runs as planned (default: only when it fits, ``plan.status ==
            "fits"``). A sweep runs an ``at-risk`` configuration whose base accepts the risk.

    Keys: ``instance_type``, ``instance_count``, ``gpu``, ``world_size``, ``status`` (the planner's
    memory verdict: ``fits``, ``at-risk`` or ``out-of-memory``), ``fits`` (``status == "fits"``),
    ``memory_gb_total`` (predicted peak allocated, GB), ``memory_gb_required`` (with margins),
    ``memory_gb_usable``, ``tokens_per_second`` (job), ``tokens_per_second_per_gpu``, ``mfu`` (percent),
    ``step_time_s`` -- the last four (:data:`SPEED_FIGURES`) ``None`` when it does not run --,
    ``not_run`` (``None``, or why not: :func:`not_run_reason`), ``source``.
    """
    hardware = plan.resolved
    runs = plan.fits if runs is None else runs
    memory = plan.memory_gb
    return {
        "instance_type": hardware.instance.instance_type,
        "instance_count": plan.input.instance_count,
        "gpu": hardware.gpu.name,
        "world_size": hardware.world_size,
        "status": plan.status,
        "fits": bool(plan.fits),
        "memory_gb_total": round(float(memory.total), 3),
        "memory_gb_required": round(float(memory.required), 3),
        "memory_gb_usable": round(float(memory.usable), 3),
        "tokens_per_second": round(float(plan.tokens_per_second), 1) if runs else None,
        "tokens_per_second_per_gpu": round(float(plan.tokens_per_second_per_gpu), 1) if runs else None,
        "mfu": round(float(plan.mfu), 2) if runs else None,
        "step_time_s": round(float(plan.step_time_s), 6) if runs else None,
        "not_run": None if runs else not_run_reason(plan.status, float(memory.required), float(memory.usable)),
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
    configs: Sequence[SweepConfig],
    instance_type: str,
    instance_count: int,
    *,
    auto_tune: bool = False,
    accept_memory_risk: bool = False,
    where: str = "the base request",
) -> None:
    """Mark configurations the hardware cannot run, or whose memory verdict refuses them, as ``Skipped``
    (module docstring: the submitter's rule).

    Every configuration that the planner can estimate gets its ``prediction`` (:func:`prediction_of`):
    for one that runs with the planner's change (``auto_tune``), the changed configuration's, with the
    changes under ``"auto_tune"``.

    Args:
        auto_tune: the submitter applies the planner's change to a configuration that does not fit.
        accept_memory_risk: run ``at-risk`` configurations as they are.
        where: what sets ``accept_memory_risk``, for the reasons (``"the base request"``, ``"--base"``).

    Raises:
        SweepError: the instance type is not in the planner's catalogue, or the trainer image does not
            run on it (:func:`platform_spec.catalogue.get_trainable_instance`).
    """
    import planner
    from planner.memory import AT_RISK, FITS
    from planner.plan import evaluate
    from platform_spec import catalogue

    instance = trainable_instance(instance_type)
    gpu = instance.gpu_spec
    on = f"on {gpu.name} ({instance.instance_type})"
    for config in configs:
        if config.status == SKIPPED:
            continue
        try:
            hp = hpmod.parse(config.hyperparameters)
        except FieldError as exc:  # grid.expand marks these; a hand-made configuration may not be
            config.mark(SKIPPED, f"invalid combination: {exc}")
            continue
        if not catalogue.supports_precision(gpu, hp.precision):
            supported = ", ".join(catalogue.supported_precisions(gpu))
            config.mark(
                SKIPPED,
                f"hardware: {hp.precision} does not run {on}; "
                f"it supports {supported} ({hp.precision} needs {get_precision(hp.precision).hardware})",
            )
            continue
        try:
            plan_input = planner.PlanInput.from_hyperparameters(
                hp, instance_type=instance.instance_type, instance_count=instance_count
            )
            plan = evaluate(plan_input)
        except ValueError as exc:
            config.mark(SKIPPED, f"the planner cannot estimate it: {exc}")
            continue
        status = plan.status
        if status == FITS or (status == AT_RISK and accept_memory_risk):
            config.prediction = prediction_of(plan, runs=True)
            continue
        tuned = planner.auto_tune(plan_input)
        if auto_tune and tuned is not None:  # the submitter applies this same change: predict what will run
            tuned_input, changes = tuned
            config.prediction = {**prediction_of(evaluate(tuned_input), runs=True), "auto_tune": list(changes)}
            continue
        config.prediction = prediction_of(plan, runs=False)
        memory = plan.memory_gb
        figures = (
            f"{memory.total:.1f} GB peak per GPU ({memory.required:.1f} GB with margins) of "
            f"{memory.usable:.1f} GB usable {on}"
        )
        if status == AT_RISK:
            reason = (
                f"predicted at-risk: {figures}, within the planner's {planner.AT_RISK_FRACTION:.0%} error of the "
                f"limit; set accept_memory_risk in {where} to run it as it is"
            )
        else:
            reason = f"predicted out of memory: {figures}"
        if tuned is not None and tuned[1]:
            reason += "; the planner suggests: " + "; ".join(tuned[1])
        elif auto_tune:
            reason += "; auto_tune found no change that fits"
        config.mark(SKIPPED, reason)


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


def prune_for_local(
    configs: Sequence[SweepConfig], device: Mapping[str, Any], *, accept_memory_risk: bool = False
) -> None:
    """Skip configurations the local host cannot run; on a known GPU, add the planner's prediction
    when the catalogue has an instance with that GPU count, and skip what its memory verdict refuses
    (``at-risk`` too, unless ``accept_memory_risk``: :func:`prune_for_instance`)."""
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
        prune_for_instance(configs, instance.instance_type, 1, accept_memory_risk=accept_memory_risk, where="--base")
        return
    for config in configs:
        if config.status != SKIPPED and not catalogue.supports_precision(gpu, config.precision):
            config.mark(
                SKIPPED,
                f"hardware: {config.precision} does not run on {gpu}; it supports {', '.join(catalogue.supported_precisions(gpu))}",
            )


__all__ = [
    "SPEED_FIGURES",
    "local_device",
    "not_run_reason",
    "prediction_of",
    "prune_for_instance",
    "prune_for_local",
    "trainable_instance",
]
