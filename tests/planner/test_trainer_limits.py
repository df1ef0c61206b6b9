"""What the trainer cannot run is refused everywhere by one rule: the planner, the submitter and the
stack's configuration agree (quantized model init); and the one-GPU plan the GPU check compares with. The host
architectures' rules are tests/platform_spec/test_grace_blackwell.py's."""

from __future__ import annotations

import json

import pytest

from planner import PlanInput, PlanInputError
from planner.plan import evaluate, evaluate_on_gpus
from platform_constructs.submitter.runtime import config as runtime_config
from platform_constructs.submitter.runtime import errors as runtime_errors
from platform_constructs.submitter.runtime import request as runtime_request
from platform_spec import hyperparameters as hpmod
from platform_spec.precisions import get_precision

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


@pytest.mark.parametrize("precision", ["nvfp4", "bf16"])
def test_quantized_model_init_is_refused_by_one_rule(precision: str) -> None:
    """The trainer (parse), the entry point (parse), the submitter (parse) and the planner (resolve) apply
    platform_spec.hyperparameters.validate: nvfp4's reason is its registry record's (upstream marks it
    unsupported under FSDP2), bf16's that it does not quantize; fp8 and mxfp8 are accepted by all of them."""
    with pytest.raises(hpmod.HyperparameterError) as trainer:
        hpmod.parse({"precision": precision, "quantized_model_init": "true"})
    with pytest.raises(PlanInputError) as planner:
        evaluate(_input(precision=precision, quantized_model_init=True))
    assert trainer.value.field == planner.value.field == "quantized_model_init"
    assert trainer.value.expected == planner.value.expected
    assert trainer.value.expected == hpmod.quantized_model_init_refusal(precision)
    if precision == "nvfp4":
        assert trainer.value.expected == get_precision("nvfp4").quantized_model_init_refusal
    for accepted in hpmod.QUANTIZED_MODEL_INIT_PRECISIONS:
        assert hpmod.parse({"precision": accepted, "quantized_model_init": "true"}).quantized_model_init
    request_mod, config_mod, errors = runtime_request, runtime_config, runtime_errors
    config = config_mod.SubmitterConfig(
        trainer_image_uris={"amd64": "i"},
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


def test_trainctl_plan_says_where_quantized_model_init_is_refused_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """The flag mirrors the trainer's hyperparameter; its help names the precisions that store weights quantized
    and nvfp4's refusal, from the one rule, and the planner plans fp8 with it and refuses nvfp4 with the reason."""
    from trainctl.cli import main
    from trainctl.commands.plan import quantized_model_init_help

    help_text = quantized_model_init_help()
    assert help_text.startswith(f"store block weights quantized ({', '.join(hpmod.QUANTIZED_MODEL_INIT_PRECISIONS)};")
    refusal = hpmod.quantized_model_init_refusal("nvfp4")
    assert refusal is not None and refusal.removeprefix("false: ") in help_text
    delayed = hpmod.quantized_model_init_refusal("fp8", fp8_scaling="delayed")
    assert delayed is not None and f"The trainer REFUSES it {delayed.removeprefix('false ')}" in help_text
    assert "".join(help_text.split()) in "".join(_plan_help(capsys).split())  # argparse wraps at "-"
    assert main(["plan", "--precision", "fp8", "--quantized-model-init", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["input"]["quantized_model_init"] is True
    assert (
        main(["plan", "--precision", "nvfp4", "--instance-type", "ml.p6-b200.48xlarge", "--quantized-model-init"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("trainctl plan: error: argument --quantized-model-init: got True, expected false: ")
    assert refusal in err
