"""What the trainer cannot run is refused everywhere by one rule: the planner, the submitter and the
stack's configuration agree (arm64 GB200 hosts, quantized model init); and the one-GPU plan the GPU
check compares with."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from planner import PlanInput, PlanInputError, estimate
from planner.plan import evaluate, evaluate_on_gpus
from platform_constructs.submitter.runtime import config as runtime_config
from platform_constructs.submitter.runtime import errors as runtime_errors
from platform_constructs.submitter.runtime import request as runtime_request
from platform_spec import catalogue
from platform_spec import hyperparameters as hpmod
from platform_spec.errors import FieldError
from stacks.config import ConfigError, load_config
from stacks.platform_app import cdk_json_context

GB200 = "ml.p6e-gb200.36xlarge"


def _input(**changes) -> PlanInput:
    base = {
        "model": "gpt-1b",
        "num_layers": None,
        "precision": "bf16",
        "seq_length": 8192,
        "batch_size": 2,
        "activation_checkpointing": "off",
        "instance_type": "ml.p6-b200.48xlarge",
    }
    base.update(changes)
    return PlanInput(**base)


def test_the_catalogue_is_the_one_home_of_host_architectures() -> None:
    assert catalogue.TRAINER_IMAGE_ARCHITECTURES == ("amd64",)
    arm = {t for t, spec in catalogue.INSTANCES.items() if spec.cpu_architecture == "arm64"}
    assert arm == {GB200, "ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72"}
    assert all("cpu_architecture" in catalogue.INSTANCES[t].sources for t in arm)  # each figure has a source
    assert set(catalogue.TRAINABLE_INSTANCE_TYPES) == set(catalogue.INSTANCES) - arm
    assert catalogue.host_architecture_problem("ml.p5.48xlarge") is None
    assert catalogue.host_architecture_problem("ml.m5.large") is None  # unknown: refused elsewhere, as unknown
    problem = catalogue.host_architecture_problem(GB200.upper())
    assert problem == f"{GB200} runs arm64 host CPUs and the trainer image is built for amd64 only"


def test_the_planner_refuses_gb200_naming_the_field_and_the_reason() -> None:
    with pytest.raises(catalogue.UnsupportedHostArchitectureError) as refused:
        estimate(_input(instance_type=GB200, precision="mxfp8"))
    error = refused.value
    assert isinstance(error, FieldError) and error.field == "instance_type" and error.value == GB200
    assert "arm64 host CPUs" in str(error) and GB200 not in error.expected
    assert error.expected == "one of " + ", ".join(catalogue.TRAINABLE_INSTANCE_TYPES)


def test_the_submitter_refuses_gb200_before_anything_is_created() -> None:
    request_mod, config_mod, errors = runtime_request, runtime_config, runtime_errors
    config = config_mod.SubmitterConfig(
        trainer_image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1",
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        training_plan_arns_parameter="/plans",
        allowed_instance_types=("ml.p5.48xlarge", GB200),  # a configuration from before the refusal
    )
    assert request_mod.allowed_instance_types(config) == ("ml.p5.48xlarge",)
    request = request_mod.parse_request({"instance_type": GB200, "inputs": {"train": "x/"}}, config)
    with pytest.raises(errors.Refusal) as refused:
        request_mod.check_instance(request, config)
    assert refused.value.field == "instance_type"
    assert "arm64 host CPUs" in refused.value.message and "ml.p5.48xlarge" in refused.value.message


def test_the_configuration_refuses_gb200_naming_the_key() -> None:
    context = {**cdk_json_context(), "allowedInstanceTypes": ["ml.p6-b200.48xlarge", GB200]}
    with pytest.raises(ConfigError) as refused:
        load_config(cdk.App(context=context).node, environ={})
    assert refused.value.key == "allowedInstanceTypes[1]" and refused.value.value == GB200
    assert "arm64 host CPUs" in str(refused.value)
    default = load_config(cdk.App(context={**cdk_json_context(), "allowedInstanceTypes": None}).node, environ={})
    assert GB200 not in default.allowed_instance_types and "ml.p6-b200.48xlarge" in default.allowed_instance_types


@pytest.mark.parametrize("precision", ["fp8", "mxfp8", "nvfp4", "bf16"])
def test_quantized_model_init_is_refused_by_one_rule(precision: str) -> None:
    """The trainer (parse), the entry point (parse), the submitter (parse) and the planner (resolve) apply
    platform_spec.hyperparameters.validate; bf16 keeps its own, earlier reason."""
    with pytest.raises(hpmod.HyperparameterError) as trainer:
        hpmod.parse({"precision": precision, "quantized_model_init": "true"})
    with pytest.raises(PlanInputError) as planner:
        evaluate(_input(precision=precision, quantized_model_init=True))
    assert trainer.value.field == planner.value.field == "quantized_model_init"
    assert trainer.value.expected == planner.value.expected
    if precision != "bf16":
        assert trainer.value.expected == hpmod.QUANTIZED_MODEL_INIT_REFUSAL
    request_mod, config_mod, errors = runtime_request, runtime_config, runtime_errors
    config = config_mod.SubmitterConfig(
        trainer_image_uri="i",
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        training_plan_arns_parameter="/plans",
    )
    with pytest.raises(errors.Refusal) as submitter:
        request_mod.parse_request(
            {"hyperparameters": {"precision": precision, "quantized_model_init": True}, "inputs": {"train": "x/"}},
            config,
        )
    assert submitter.value.field == "hyperparameters.quantized_model_init"
    assert trainer.value.expected in submitter.value.message


def test_one_gpu_of_an_instance_is_planned_without_collectives() -> None:
    inp = _input(instance_type="ml.p5e.48xlarge", batch_size=4)
    one = evaluate_on_gpus(inp, 1)
    eight = evaluate(inp)
    assert (one.resolved.world_size, one.resolved.shard_degree, one.resolved.replicate_degree) == (1, 1, 1)
    assert one.resolved.gpu.name == "H200" and eight.resolved.world_size == 8
    assert one.throughput.comm.total == 0.0 and one.throughput.exposed_comm_s == 0.0
    assert one.tokens_per_second == one.tokens_per_second_per_gpu
    # nothing sharded: parameters, gradients and AdamW state are whole on the one GPU
    assert one.memory_gb.total > eight.memory_gb.total
    assert evaluate_on_gpus(inp, 8).memory_gb.total == pytest.approx(eight.memory_gb.total)
    for bad in (0, 9, True):
        with pytest.raises(PlanInputError) as refused:
            evaluate_on_gpus(inp, bad)
        assert refused.value.field == "gpus" and "1 to 8" in refused.value.expected
    with pytest.raises(PlanInputError):
        evaluate_on_gpus(inp.replace(instance_count=2), 1)


# ---------------------------------------------------------------------------
# the same rule behind every list people see: trainctl plan and sweep, the emulator, the image asset


def _plan_help(capsys: pytest.CaptureFixture[str]) -> str:
    from trainctl.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_trainctl_plan_offers_only_the_instance_types_the_trainer_runs_on(capsys: pytest.CaptureFixture[str]) -> None:
    from trainctl.cli import main

    text = _plan_help(capsys)
    assert "--instance-type {" + ",".join(catalogue.TRAINABLE_INSTANCE_TYPES) + "}" in text
    assert "gb200" not in text
    for refused, why in (
        (GB200, f"({GB200} runs arm64 host CPUs and the trainer image is built for amd64 only)"),
        ("ml.u-p6e-gb200x72", "arm64 host CPUs"),
        ("ml.p4d.24xlarge", ""),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["plan", "--instance-type", refused])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and f"argument --instance-type: got {refused!r}, expected one of " in err
        assert why in err and "gb200" not in err.split("expected one of ", 1)[1].split(" (")[0]
    assert main(["plan", "--json", "--instance-type", "p5en.48xlarge", "--precision", "bf16"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["instance_type"] == "ml.p5en.48xlarge"


def test_trainctl_plan_says_quantized_model_init_is_refused_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """Kept as a flag (it mirrors the trainer's hyperparameter, and the planner answers with the reason);
    its help says so from the one refusal rule."""
    from platform_spec.precisions import names_where
    from trainctl.cli import main
    from trainctl.commands.plan import quantized_model_init_help

    QUANTIZED_MODEL_INIT_HELP = quantized_model_init_help()
    assert hpmod.QUANTIZED_MODEL_INIT_REFUSAL is not None  # while the image cannot train it
    te_formats = ", ".join(names_where(lambda p: p.uses_te))  # the registry's TransformerEngine formats
    assert QUANTIZED_MODEL_INIT_HELP.startswith(f"store block weights quantized ({te_formats}). REFUSED")
    assert hpmod.QUANTIZED_MODEL_INIT_REFUSAL.removeprefix("false: ") in QUANTIZED_MODEL_INIT_HELP
    assert "".join(QUANTIZED_MODEL_INIT_HELP.split()) in "".join(_plan_help(capsys).split())  # argparse wraps at "-"
    assert main(["plan", "--precision", "fp8", "--quantized-model-init"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainctl plan: error: argument --quantized-model-init: got True, expected false: ")
    assert hpmod.QUANTIZED_MODEL_INIT_REFUSAL in err


def test_unknown_types_are_answered_with_the_types_to_use() -> None:
    with pytest.raises(catalogue.UnknownInstanceTypeError) as unknown:
        catalogue.get_trainable_instance("ml.p4d.24xlarge")
    assert unknown.value.expected == "one of " + ", ".join(catalogue.TRAINABLE_INSTANCE_TYPES)
    with pytest.raises(catalogue.UnsupportedHostArchitectureError):
        catalogue.get_trainable_instance(GB200)
    assert catalogue.get_instance(GB200).cpu_architecture == "arm64"  # still described, for the reason
    assert catalogue.get_trainable_instance("p6-b300.48xlarge").instance_type == "ml.p6-b300.48xlarge"


def test_trainctl_sweep_refuses_gb200_with_the_reason_and_lists_only_trainable_types(tmp_path) -> None:
    from trainctl.sweeps.planning import plan_sweep
    from trainctl.sweeps.pruning import prune_for_instance
    from trainctl.sweeps.state import SweepError

    base = {"instance_type": GB200, "inputs": {"train": "s3://data/tokens/"}, "hyperparameters": {"model": "gpt-tiny"}}
    expected = "expected one of " + ", ".join(catalogue.TRAINABLE_INSTANCE_TYPES)
    with pytest.raises(SweepError) as refused:
        plan_sweep("gb", ["precision=bf16"], mode="aws", base=base, sweeps_dir=tmp_path)
    assert (
        str(refused.value)
        == f"base request: instance_type {GB200!r}: {expected} ({catalogue.host_architecture_problem(GB200)})"
    )
    with pytest.raises(SweepError) as unknown:
        plan_sweep(
            "g5", ["precision=bf16"], mode="aws", base={**base, "instance_type": "ml.g5.xlarge"}, sweeps_dir=tmp_path
        )
    assert str(unknown.value) == f"base request: instance_type 'ml.g5.xlarge': {expected}"
    assert not list(tmp_path.iterdir())  # nothing recorded for a refused sweep
    with pytest.raises(SweepError, match="arm64 host CPUs"):
        prune_for_instance([], GB200, 1)


def test_the_trainer_image_is_built_for_the_catalogue_architecture_only() -> None:
    from aws_cdk import aws_ecr_assets as ecr_assets

    from platform_constructs.trainer_image import TrainerImage, TrainerImageProps

    assert TrainerImageProps().platform.platform == f"linux/{catalogue.TRAINER_IMAGE_ARCHITECTURES[0]}"
    stack = cdk.Stack(cdk.App(), "Image")
    with pytest.raises(ValueError) as refused:
        TrainerImage(stack, "Arm", TrainerImageProps(platform=ecr_assets.Platform.LINUX_ARM64))
    assert str(refused.value).startswith("TrainerImageProps.platform: got 'linux/arm64'; expected 'linux/amd64'")
    assert "platform_spec.catalogue.TRAINER_IMAGE_ARCHITECTURES" in str(refused.value)
