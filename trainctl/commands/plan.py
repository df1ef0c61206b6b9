"""``trainctl plan``: predict memory, speed and cost of a training configuration
and recommend changes (the planner, :mod:`planner`).

Without flags it plans the guide's default request (``GUIDE_DEFAULT_REQUEST``:
gpt-1b with 10 layers, mxfp8, batch 8, sequence 2048) on one
``ml.p6-b200.48xlarge``. ``--json`` prints :meth:`planner.Plan.to_dict`. This module
parses the arguments; :mod:`trainctl.plans` estimates and prints.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

# ``trainctl --help`` imports this module for HELP: the facts the flags offer are imported by add_arguments,
# the planner by run (trainctl.cli).

HELP = "Predict per-GPU memory, tokens/s, MFU and cost of a training config, and recommend changes."


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1")
    return value


def _positive_number(expected: str) -> Callable[[str], float]:
    """An argparse type: a finite number > 0; a refusal says ``expected`` (the flag's own words)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}")
        return value

    return parse


def _instance_type(text: str) -> str:
    """An instance type the trainer image runs on (the planner's one rule), normalised (``p5.48xlarge`` ->
    ``ml.p5.48xlarge``); otherwise the types to use and, for a known one, why not."""
    from platform_spec.catalogue import get_trainable_instance
    from platform_spec.errors import FieldError

    try:
        return get_trainable_instance(text).instance_type
    except FieldError as exc:
        detail = f" ({exc.detail})" if exc.detail else ""
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {exc.expected}{detail}") from None


def quantized_model_init_help() -> str:
    """``--quantized-model-init``'s help, from the trainer's one rule
    (:func:`platform_spec.hyperparameters.quantized_model_init_refusal`, per precision)."""
    from platform_spec.hyperparameters import (
        FP8_SCALINGS,
        QUANTIZED_MODEL_INIT_PRECISIONS,
        QUANTIZED_MODEL_INIT_SCALINGS,
        quantized_model_init_refusal,
    )
    from platform_spec.precisions import SCALED_PRECISIONS, names_where

    refused = [name for name in names_where(lambda p: p.quantized) if quantized_model_init_refusal(name) is not None]
    text = (
        f"store block weights quantized ({', '.join(QUANTIZED_MODEL_INIT_PRECISIONS)}; TransformerEngine's "
        "FusedAdam keeps fp32 master weights)"
    )
    for name in refused:
        reason = quantized_model_init_refusal(name) or ""
        text += f". REFUSED with precision {name} (exit 2, no plan): " + reason.removeprefix("false: ")
    for scaling in (s for s in FP8_SCALINGS if s not in QUANTIZED_MODEL_INIT_SCALINGS):
        reason = quantized_model_init_refusal(SCALED_PRECISIONS[0], fp8_scaling=scaling) or ""
        text += ". The trainer REFUSES it " + reason.removeprefix("false ")
    return text


def _hyperparameter(name: str) -> Callable[[str], Any]:
    """The argparse type of the trainer hyperparameter ``name``: the trainer's own parser
    (:func:`platform_spec.hyperparameters.coerce`), its refusal as argparse's."""

    def parse(text: str) -> Any:
        from platform_spec.hyperparameters import HyperparameterError, coerce

        try:
            return coerce(name, text)
        except HyperparameterError as exc:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {exc.expected}") from None

    parse.__name__ = name  # argparse's "invalid <type> value" names it
    return parse


def _add_hyperparameter(group: argparse._ArgumentGroup, name: str) -> None:
    """The flag of a hyperparameter the estimate depends on, from its declaration: unset by default (the
    trainer's default, or the preset's for a shape setting); a boolean that defaults to false is a switch."""
    from platform_spec.hyperparameters import SPECS, format_value

    spec = SPECS[name]
    default = "the preset's" if spec.optional else format_value(spec.default)
    help_text = quantized_model_init_help() if name == "quantized_model_init" else f"{spec.help} (default: {default})"
    if spec.kind is bool and spec.default is False:
        group.add_argument(spec.flag, action="store_true", default=None, help=help_text.replace("%", "%%"))
        return
    group.add_argument(
        spec.flag,
        type=_hyperparameter(name),
        choices=spec.choices,
        default=None,
        metavar=spec.metavar,
        help=help_text.replace("%", "%%"),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from planner.inputs import (
        ATTENTION_KERNELS,
        CHECKPOINT_SAVES,
        DEFAULT_ATTENTION,
        DEFAULT_CHECKPOINT_SAVE,
        DEFAULT_LOSS,
        LOSS_IMPLEMENTATIONS,
    )
    from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE, TRAINABLE_INSTANCE_TYPES, TRAINER_IMAGE_ARCHITECTURES
    from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST, PLANNED_HYPERPARAMETERS, SPECS

    g = parser.add_argument_group("model")
    g.add_argument(
        "--model",
        type=_hyperparameter("model"),
        choices=SPECS["model"].choices,
        default=None,
        help="model preset, or a family's name for a custom shape of it (its shape flags given) (default: the "
        f"guide's request, {GUIDE_DEFAULT_REQUEST['model']} with {GUIDE_DEFAULT_REQUEST['num_layers']} layers)",
    )
    g.add_argument(
        "--model-config",
        default=None,
        metavar="FILE",
        help="the model's shape from a Hugging Face config.json (model_type llama, mistral, qwen2 or qwen3; "
        "transformers 4 or 5 form) instead of --model; unsupported content (a sliding window shorter than "
        "--seq-length, another RoPE type) "
        "is refused with the key named",
    )
    g.add_argument(
        "--init-from",
        default=None,
        metavar="DIR",
        help="a Hugging Face model folder the run starts from (trainctl train --init-from): its config.json is "
        "the shape, and the plan shows what loading its weights costs each GPU (bytes read, peak extra memory)",
    )
    t = parser.add_argument_group("training")
    for name in PLANNED_HYPERPARAMETERS:
        if name != "model":
            _add_hyperparameter(g if name == "model_family" or SPECS[name].shape else t, name)
    t.add_argument(
        "--loss",
        choices=LOSS_IMPLEMENTATIONS,
        default=DEFAULT_LOSS,
        help="how the cross-entropy is computed: chunked (the trainer's: one chunk of logits live at a time) or "
        "unchunked-fp32 (every logit of the micro-batch in fp32, as torchtitan does: tens of GB at 32K with a 128K "
        "vocabulary), to plan another framework's run (default: %(default)s)",
    )
    t.add_argument(
        "--attention",
        choices=ATTENTION_KERNELS,
        default=DEFAULT_ATTENTION,
        help="the attention kernel: te-fused (the trainer's: TransformerEngine's fused attention) or "
        "flash-attention-2 (llm-foundry's, PyTorch SDPA's flash backend), to plan another framework's run "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--blocks-only",
        action="store_true",
        help="model TransformerEngine's FSDP example (the guide's benchmark: blocks only, bf16 Adam)",
    )
    h = parser.add_argument_group("hardware and budget")
    h.add_argument(
        "--instance-type",
        type=_instance_type,
        default=DEFAULT_INSTANCE_TYPE,
        metavar="{" + ",".join(TRAINABLE_INSTANCE_TYPES) + "}",
        help=f"an instance type the trainer image can be built for ({', '.join(TRAINER_IMAGE_ARCHITECTURES)} hosts; "
        'platform_spec.catalogue; a deployment runs the arm64 GB200 hosts with imageArchitectures ["amd64", '
        '"arm64"]) (default: %(default)s)',
    )
    h.add_argument("--instance-count", type=_positive_int, default=1, help="(default: %(default)s)")
    h.add_argument(
        "--inter-container-encryption",
        action="store_true",
        help="the job encrypts traffic between its instances (SageMaker's EnableInterContainerTrafficEncryption; "
        "noted with several instances, not modelled)",
    )
    h.add_argument(
        "--checkpoint-save",
        choices=CHECKPOINT_SAVES,
        default=DEFAULT_CHECKPOINT_SAVE,
        help="how interval checkpoints are saved: async (the training waits for the device-to-host staging only) "
        "or sync (for the write too); the save at a stop is synchronous either way (default: %(default)s)",
    )
    h.add_argument(
        "--price-per-hour",
        type=_positive_number("a positive number of USD per instance-hour (e.g. 12.5)"),
        default=None,
        help="USD per instance-hour (for cost)",
    )
    h.add_argument(
        "--tokens",
        type=_positive_number("a positive number of training tokens (e.g. 1e12)"),
        default=None,
        help="training-token budget, e.g. 1e12",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (planner.Plan.to_dict)")


def plan_fields(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`planner.PlanInput`'s keyword arguments for parsed ``trainctl plan`` arguments: the hyperparameters
    given (no model: the guide's default request's model and layers; the family alone: a custom shape of it,
    as the trainer reads ``model_family`` alone), the hardware and the budget."""
    from planner.inputs import PlanInput
    from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST, PLANNED_HYPERPARAMETERS

    fields = {name: value for name in PLANNED_HYPERPARAMETERS if (value := getattr(args, name)) is not None}
    if "model" not in fields and "model_family" in fields:
        fields["model"] = fields["model_family"]
    if "model" not in fields and args.model_config is None and args.init_from is None:
        fields["model"] = GUIDE_DEFAULT_REQUEST["model"]
        fields.setdefault("num_layers", int(GUIDE_DEFAULT_REQUEST["num_layers"]))
    return {**fields, **{name: getattr(args, name) for name in PlanInput.own_fields()}}


def flags() -> dict[str, str]:
    """Plan input field -> the flag that sets it (to name the flag in an error): its name, kebab-cased."""
    from planner.inputs import PlanInput
    from platform_spec.hyperparameters import PLANNED_HYPERPARAMETERS

    return {name: "--" + name.replace("_", "-") for name in (*PLANNED_HYPERPARAMETERS, *PlanInput.own_fields())}


def run(args: argparse.Namespace) -> int:
    from trainctl.plans import plan_and_print

    return plan_and_print(
        plan_fields(args), as_json=args.json, flags=flags(), model_config=args.model_config, init_from=args.init_from
    )
