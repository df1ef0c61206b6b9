"""``trainctl plan``: predict memory, speed and cost of a training configuration
and recommend changes (the planner, :mod:`planner`).

Without flags it plans the guide's default request (``GUIDE_DEFAULT_REQUEST``:
gpt-1b with 10 layers, mxfp8, batch 8, sequence 2048) on one
``ml.p6-b200.48xlarge``. ``--json`` prints :meth:`planner.Plan.to_dict`. This module
parses the arguments; :mod:`trainctl.plans` estimates and prints.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

# The top level imports argparse only (``trainctl --help`` imports this module for HELP): the facts the flags
# offer are imported by add_arguments, the planner by run (trainctl.cli).
if TYPE_CHECKING:
    from collections.abc import Callable


HELP = "Predict per-GPU memory, tokens/s, MFU and cost of a training config, and recommend changes."

_FLAGS = {
    "model": "--model",
    "num_layers": "--num-layers",
    "vocab_size": "--vocab-size",
    "precision": "--precision",
    "seq_length": "--seq-length",
    "batch_size": "--batch-size",
    "gradient_accumulation_steps": "--gradient-accumulation-steps",
    "activation_checkpointing": "--activation-checkpointing",
    "gradient_sync": "--gradient-sync",
    "instance_type": "--instance-type",
    "instance_count": "--instance-count",
    "sharding_strategy": "--sharding-strategy",
    "reshard_after_forward": "--reshard-after-forward",
    "quantized_model_init": "--quantized-model-init",
    "blocks_only": "--blocks-only",
    "price_per_hour": "--price-per-hour",
    "tokens": "--tokens",
}


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number (e.g. 1e12)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number (e.g. 1e12)")
    return value


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
    """``--quantized-model-init``'s help, from the trainer's one refusal rule."""
    from platform_spec.hyperparameters import QUANTIZED_MODEL_INIT_REFUSAL
    from platform_spec.precisions import names_where

    formats = ", ".join(names_where(lambda p: p.uses_te))
    return (
        f"store block weights quantized ({formats})"
        if QUANTIZED_MODEL_INIT_REFUSAL is None
        else f"store block weights quantized ({formats}). REFUSED with the current trainer image (exit 2, no plan): "
        + QUANTIZED_MODEL_INIT_REFUSAL.removeprefix("false: ")
        + ". The flag mirrors the trainer's hyperparameter, so the planner answers with the reason and plans it "
        "again once the image supports it"
    )


def _activation_checkpointing(text: str) -> str:
    """An activation-checkpointing mode (``off``, ``full``, ``selective:N``), normalised; else what is accepted
    (:mod:`platform_spec.training_modes`, the trainer's one grammar)."""
    from platform_spec.errors import FieldError
    from platform_spec.training_modes import activation_checkpointing

    try:
        return activation_checkpointing(text).name
    except FieldError as exc:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {exc.expected}") from None


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"got {text!r}, expected true or false")


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


_LISTED_SHAPE_FLAGS = ("num_layers", "vocab_size")
"""Shape hyperparameters with their own flag above the others (the guide's knobs)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE, TRAINABLE_INSTANCE_TYPES, TRAINER_IMAGE_ARCHITECTURES
    from platform_spec.hyperparameters import (
        GRADIENT_SYNC_MODES,
        GUIDE_DEFAULT_REQUEST,
        MODEL_FAMILIES,
        PRECISIONS,
        SHAPE_HYPERPARAMETERS,
        SHARDING_STRATEGIES,
        SPECS,
    )
    from platform_spec.training_modes import DEFAULT_GRADIENT_SYNC

    g = parser.add_argument_group("model")
    g.add_argument(
        "--model",
        choices=SPECS["model"].choices,
        default=None,
        help="model preset, or a family's name for a custom shape of it (its shape flags given) (default: the "
        f"guide's request, {GUIDE_DEFAULT_REQUEST['model']} with {GUIDE_DEFAULT_REQUEST['num_layers']} layers)",
    )
    g.add_argument(
        "--model-config",
        default=None,
        metavar="FILE",
        help="the model's shape from a Hugging Face config.json of a Llama-style model (model_type llama) instead "
        "of --model; unsupported content (rope_scaling, biases) is refused with the key named",
    )
    g.add_argument("--num-layers", type=_positive_int, default=None, help="transformer blocks (default: the preset's)")
    g.add_argument("--vocab-size", type=_positive_int, default=None, help="vocabulary size (default: the preset's)")
    g.add_argument(
        "--model-family",
        choices=MODEL_FAMILIES,
        default=None,
        help=SPECS["model_family"].help.replace("%", "%%"),
    )
    for name in SHAPE_HYPERPARAMETERS:  # the trainer's shape hyperparameters, its rules (a family refuses others)
        if name not in _LISTED_SHAPE_FLAGS:
            g.add_argument(
                "--" + name.replace("_", "-"),
                type=_hyperparameter(name),
                default=None,
                metavar="VALUE",
                help=f"{SPECS[name].help} (default: the preset's)".replace("%", "%%"),
            )
    g.add_argument(
        "--blocks-only",
        action="store_true",
        help="model TransformerEngine's FSDP example (the guide's benchmark: blocks only, bf16 Adam)",
    )
    t = parser.add_argument_group("training")
    t.add_argument(
        "--precision", choices=PRECISIONS, default=GUIDE_DEFAULT_REQUEST["precision"], help="(default: %(default)s)"
    )
    t.add_argument(
        "--seq-length",
        type=_positive_int,
        default=int(GUIDE_DEFAULT_REQUEST["seq_length"]),
        help="tokens per sequence (default: %(default)s)",
    )
    t.add_argument(
        "--batch-size",
        type=_positive_int,
        default=int(GUIDE_DEFAULT_REQUEST["batch_size"]),
        help="micro-batch, sequences per GPU (default: %(default)s)",
    )
    t.add_argument("--gradient-accumulation-steps", type=_positive_int, default=1, help="(default: %(default)s)")
    t.add_argument(
        "--activation-checkpointing",
        type=_activation_checkpointing,
        default="off",
        metavar="{off,full,selective:N}",
        help="recompute blocks in backward: none, every block, or every Nth block (default: %(default)s)",
    )
    t.add_argument(
        "--gradient-sync",
        choices=GRADIENT_SYNC_MODES,
        default=DEFAULT_GRADIENT_SYNC,
        help="with gradient accumulation: reduce-scatter every micro-batch (less memory) or the last only "
        "(less traffic) (default: %(default)s)",
    )
    t.add_argument(
        "--sharding-strategy",
        choices=SHARDING_STRATEGIES,
        default="full",
        help="full: FSDP over every GPU; hybrid: HSDP (default: %(default)s)",
    )
    t.add_argument(
        "--reshard-after-forward",
        type=_bool,
        default=True,
        metavar="{true,false}",
        help="free gathered parameters after forward (default: true)",
    )
    t.add_argument("--quantized-model-init", action="store_true", help=quantized_model_init_help().replace("%", "%%"))
    h = parser.add_argument_group("hardware and budget")
    h.add_argument(
        "--instance-type",
        type=_instance_type,
        default=DEFAULT_INSTANCE_TYPE,
        metavar="{" + ",".join(TRAINABLE_INSTANCE_TYPES) + "}",
        help=f"an instance type the trainer image runs on ({', '.join(TRAINER_IMAGE_ARCHITECTURES)} hosts; "
        "platform_spec.catalogue) (default: %(default)s)",
    )
    h.add_argument("--instance-count", type=_positive_int, default=1, help="(default: %(default)s)")
    h.add_argument("--price-per-hour", type=_positive_float, default=None, help="USD per instance-hour (for cost)")
    h.add_argument("--tokens", type=_positive_float, default=None, help="training-token budget, e.g. 1e12")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (planner.Plan.to_dict)")


def plan_fields(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`planner.PlanInput`'s keyword arguments for parsed ``trainctl plan`` arguments (no flag: the
    guide's default request's model and layers)."""
    from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST, SHAPE_HYPERPARAMETERS

    model = args.model
    num_layers = args.num_layers
    family = getattr(args, "model_family", None)
    if model is None and family is not None:
        model = family  # the family alone: a custom shape of it (as the trainer reads model_family alone)
    if model is None and getattr(args, "model_config", None) is None:
        model = GUIDE_DEFAULT_REQUEST["model"]
        if num_layers is None:
            num_layers = int(GUIDE_DEFAULT_REQUEST["num_layers"])
    shape = {n: getattr(args, n, None) for n in SHAPE_HYPERPARAMETERS if n not in _LISTED_SHAPE_FLAGS}
    return {
        "model": model,
        "model_family": family,
        **shape,
        "num_layers": num_layers,
        "precision": args.precision,
        "seq_length": args.seq_length,
        "batch_size": args.batch_size,
        "activation_checkpointing": args.activation_checkpointing,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "sharding_strategy": args.sharding_strategy,
        "reshard_after_forward": args.reshard_after_forward,
        "quantized_model_init": args.quantized_model_init,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "gradient_sync": args.gradient_sync,
        "vocab_size": args.vocab_size,
        "blocks_only": args.blocks_only,
        "price_per_hour": args.price_per_hour,
        "tokens": args.tokens,
    }


def flags() -> dict[str, str]:
    """Plan input field -> the flag that sets it (to name the flag in an error): :data:`_FLAGS` and the shape
    hyperparameters' flags."""
    from platform_spec.hyperparameters import SHAPE_HYPERPARAMETERS

    return {
        **_FLAGS,
        "model_family": "--model-family",
        **{n: "--" + n.replace("_", "-") for n in SHAPE_HYPERPARAMETERS},
    }


def run(args: argparse.Namespace) -> int:
    from trainctl.plans import plan_and_print

    return plan_and_print(plan_fields(args), as_json=args.json, flags=flags(), model_config=args.model_config)
