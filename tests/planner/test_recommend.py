"""The guide's rules on the guide's examples, and auto_tune."""

from __future__ import annotations

import pytest

from planner import PlanInput, PlanInputError, auto_tune, estimate
from planner.plan import evaluate
from platform_spec.catalogue import UnknownInstanceTypeError, UnsupportedPrecisionError
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST, HyperparameterError, Hyperparameters, parse


def full_input(**changes) -> PlanInput:
    base = {
        "model": "gpt-8b",
        "num_layers": None,
        "precision": "fp8",
        "seq_length": 8192,
        "batch_size": 4,
        "activation_checkpointing": "off",
        "instance_type": "ml.p6-b200.48xlarge",
    }
    base.update(changes)
    return PlanInput(**base)


def kinds(plan):
    return [r.kind for r in plan.recommendations]


def test_guide_example_checkpointing_pays_with_a_bigger_batch(make_input):
    """1B, mxfp8, 8K, batch 1: turning checkpointing on and raising the batch wins (~51K vs ~6K)."""
    plan = estimate(make_input())
    rec = next(r for r in plan.recommendations if r.kind == "checkpointing")
    assert rec.changes["activation_checkpointing"] == "full"
    assert rec.changes["batch_size"] >= 16
    assert rec.after.fits
    assert rec.after.tokens_per_second > 5 * plan.tokens_per_second
    # batch first: the throughput rule comes before the checkpointing one
    assert kinds(plan).index("throughput") < kinds(plan).index("checkpointing")


def test_recommendation_after_matches_its_changes(make_input):
    plan = estimate(make_input())
    for rec in plan.recommendations:
        if rec.after is None:
            assert rec.changes == {}
            continue
        assert rec.changes
        for field, value in rec.changes.items():
            assert getattr(rec.after.input, field) == value
        assert rec.after.recommendations == []


def test_large_model_without_checkpointing_is_fixed_by_checkpointing():
    """~14B+: checkpointing is a prerequisite; auto_tune turns it on -- here selective checkpointing of every
    8th block is enough, and faster than recomputing every block -- and keeps the tokens per step."""
    inp = full_input(model="gpt-14b", batch_size=4)
    plan = estimate(inp)
    assert not plan.fits
    assert plan.recommendations[0].kind == "fit"
    assert plan.recommendations[0].changes["activation_checkpointing"] == "selective:8"
    tuned, changes = auto_tune(inp)
    assert tuned.activation_checkpointing == "selective:8"
    assert evaluate(tuned).fits
    full = evaluate(tuned.replace(activation_checkpointing="full"))
    assert full.fits and evaluate(tuned).tokens_per_second > full.tokens_per_second
    assert tuned.batch_size * tuned.gradient_accumulation_steps >= inp.batch_size * inp.gradient_accumulation_steps
    assert any(c.startswith("activation_checkpointing: off -> selective:8") for c in changes)
    assert tuned.model == inp.model and tuned.seq_length == inp.seq_length and tuned.precision == inp.precision


def test_auto_tune_lowers_batch_with_accumulation_when_needed():
    inp = full_input(model="gpt-1b", precision="bf16", batch_size=256, seq_length=8192, activation_checkpointing="full")
    assert not evaluate(inp).fits
    tuned, changes = auto_tune(inp)
    assert tuned.batch_size < 256
    assert tuned.batch_size * tuned.gradient_accumulation_steps == 256
    assert evaluate(tuned).fits
    assert any(c.startswith("batch_size: 256 ->") for c in changes)
    assert any(c.startswith("gradient_accumulation_steps: 1 ->") for c in changes)


@pytest.mark.parametrize("batch_size", [9, 11, 12])
def test_auto_tune_never_changes_the_sequences_per_optimizer_step_while_keeping_them(batch_size):
    """A micro-batch that does not divide the sequences per step would train another run (batch 7 tuned to
    3 x 3 micro-batches is 9 sequences per step, once offered as "keeps the tokens per optimizer step")."""
    inp = full_input(model="llama3-8b", precision="mxfp8", batch_size=batch_size, seq_length=4096)
    assert not evaluate(inp).fits
    tuned, changes = auto_tune(inp)
    assert evaluate(tuned).fits
    assert tuned.batch_size * tuned.gradient_accumulation_steps == batch_size, changes


def test_auto_tune_returns_input_when_it_fits_and_none_when_nothing_fits():
    inp = full_input(model="gpt-1b", batch_size=1)
    assert auto_tune(inp) == (evaluate(inp).input, [])
    huge = full_input(model="gpt-64b", batch_size=1, precision="bf16", instance_type="ml.p5.4xlarge")
    assert auto_tune(huge) is None
    plan = estimate(huge)
    assert not plan.fits and plan.recommendations[0].kind == "fit"
    # the way out is more instances
    assert "instance_count" in plan.recommendations[0].changes or plan.recommendations[0].after is None


def test_more_instances_are_recommended_with_every_change_their_figures_include():
    """70B with selective:2 on one ml.p5.48xlarge: the fit is 4 instances *and* full checkpointing; the title once
    said only "Use 4 instances" while its figures were those of full checkpointing."""
    inp = full_input(model="llama3-70b", precision="bf16", batch_size=1, activation_checkpointing="selective:2",
                     instance_type="ml.p5.48xlarge")  # fmt: skip
    rec = estimate(inp).recommendations[0]
    assert rec.changes == {"instance_count": 4, "activation_checkpointing": "full"}
    assert rec.title == "Use 4 instances, activation_checkpointing=full" and rec.after.fits


def test_small_model_in_bf16_is_told_to_start_with_fp8():
    plan = estimate(full_input(model="gpt-1b", precision="bf16", batch_size=2))
    rec = next(r for r in plan.recommendations if r.kind == "precision")
    assert rec.changes == {"precision": "fp8"}
    assert rec.after.tokens_per_second > plan.tokens_per_second
    assert "start with fp8" in rec.reason


def test_large_model_in_mxfp8_keeps_it_for_stability_or_fp8_for_balance():
    plan = estimate(full_input(model="gpt-32b", precision="mxfp8", batch_size=1, activation_checkpointing="full"))
    assert plan.fits
    for rec in plan.recommendations:
        if rec.kind == "precision":
            assert rec.changes == {"precision": "fp8"} and "convergence" in rec.reason
    assert not any(
        r.kind == "checkpointing" and r.changes.get("activation_checkpointing") == "off" for r in plan.recommendations
    )


def test_nvfp4_gets_the_validated_recipe_advice():
    plan = estimate(full_input(model="gpt-32b", precision="nvfp4", batch_size=1, activation_checkpointing="full"))
    assert any("validated recipe" in r.title and r.after is None for r in plan.recommendations)


def test_communication_bound_multi_node_shards_less():
    plan = estimate(
        full_input(model="gpt-8b", seq_length=2048, batch_size=1, instance_type="ml.p5.48xlarge", instance_count=8)
    )
    assert plan.throughput.bound == "communication"
    rec = next(r for r in plan.recommendations if r.kind == "communication")
    assert rec.changes.get("sharding_strategy") == "hybrid" or rec.changes.get("reshard_after_forward") is False
    assert rec.after.tokens_per_second > plan.tokens_per_second


def test_quantized_weights_are_recommended_only_where_the_trainer_stores_them_and_they_save_memory():
    """The trainer stores fp8 and mxfp8 block weights quantized (TransformerEngine's quantized_model_init with
    FusedAdam) and refuses nvfp4 (upstream marks it unsupported under FSDP2). Under FSDP2 with the image's TE the
    stored weights cost memory (TE keeps no quantized copies there, FusedAdam an fp32 master of every parameter)
    and save the per-micro-batch casts: the planner never offers them as a memory saving then; nvfp4 never."""
    from platform_spec.hyperparameters import quantized_model_init_refusal

    pressed = full_input(model="gpt-8b", precision="mxfp8", seq_length=4096, batch_size=5)
    plan = estimate(pressed)
    stored = evaluate(pressed.replace(quantized_model_init=True))
    assert stored.memory_gb.total > plan.memory_gb.total and stored.tokens_per_second > plan.tokens_per_second
    assert not [r for r in plan.recommendations if r.changes.get("quantized_model_init") is True]

    nvfp4 = full_input(
        model="gpt-8b", precision="nvfp4", seq_length=4096, batch_size=5, instance_type="ml.p6-b200.48xlarge"
    )
    for rec in estimate(nvfp4).recommendations:
        assert "quantized_model_init" not in rec.changes, rec.title
        assert rec.after is None or not rec.after.input.quantized_model_init, rec.title
    tuned = auto_tune(nvfp4.replace(batch_size=64))
    assert tuned is None or not tuned[0].quantized_model_init
    with pytest.raises(PlanInputError) as refused:
        evaluate(full_input(precision="nvfp4", quantized_model_init=True, instance_type="ml.p6-b200.48xlarge"))
    assert refused.value.field == "quantized_model_init"
    assert refused.value.expected == quantized_model_init_refusal("nvfp4") and "FSDP2" in refused.value.expected


def test_guide_default_request_plans():
    hp = parse(GUIDE_DEFAULT_REQUEST)
    inp = PlanInput.from_hyperparameters(hp, instance_type="ml.p6-b200.48xlarge")
    assert inp.num_layers == 10 and inp.precision == "mxfp8" and inp.batch_size == 8 and inp.seq_length == 2048
    plan = estimate(inp)
    assert plan.fits and plan.tokens_per_second > 0
    assert PlanInput.from_request(GUIDE_DEFAULT_REQUEST, instance_type="ml.p6-b200.48xlarge") == inp


def test_from_hyperparameters_overrides():
    inp = PlanInput.from_hyperparameters(
        Hyperparameters(),
        instance_type="ml.p5.48xlarge",
        instance_count=2,
        blocks_only=True,
        tokens=1e9,
        price_per_hour=98.3,
    )
    assert inp.instance_count == 2 and inp.blocks_only and inp.tokens == 1e9
    plan = estimate(inp.replace(precision="fp8"))
    assert plan.throughput.cost.cost == pytest.approx(plan.throughput.cost.instance_hours * 98.3)
    assert plan.throughput.cost.wall_time_hours == pytest.approx(1e9 / plan.tokens_per_second / 3600)


@pytest.mark.parametrize(
    ("changes", "field", "kind"),
    [
        ({"precision": "mxfp8", "instance_type": "ml.p5.48xlarge"}, "precision", UnsupportedPrecisionError),
        ({"instance_type": "ml.p4d.24xlarge"}, "instance_type", UnknownInstanceTypeError),
        ({"model": "gpt-2t"}, "model", PlanInputError),
        ({"batch_size": 0}, "batch_size", PlanInputError),
        ({"activation_checkpointing": "selective"}, "activation_checkpointing", PlanInputError),
        ({"precision": "bf16", "quantized_model_init": True}, "quantized_model_init", PlanInputError),
        ({"instance_count": 0}, "instance_count", PlanInputError),
        ({"tokens": -1}, "tokens", PlanInputError),
    ],
)
def test_bad_input_names_the_field(changes, field, kind):
    """Every refusal is a FieldError naming the field: the planner's own (PlanInputError) and the
    catalogue's (platform_spec.catalogue, which the planner does not own)."""
    with pytest.raises(FieldError) as info:
        estimate(full_input(**changes))
    assert type(info.value) is kind
    assert info.value.field == field
    assert isinstance(info.value, ValueError)
    assert info.value.expected


def test_from_request_rejects_bad_values():
    with pytest.raises(PlanInputError) as info:
        PlanInput.from_request({"precision": "int4"}, instance_type="ml.p6-b200.48xlarge")
    assert info.value.field == "precision"
    assert not isinstance(info.value, HyperparameterError)


def test_raising_the_batch_under_accumulation_keeps_tokens_per_step():
    inp = full_input(model="gpt-1b", precision="fp8", seq_length=2048, batch_size=1, gradient_accumulation_steps=16)
    plan = estimate(inp)
    rec = next(r for r in plan.recommendations if r.kind == "throughput")
    after = rec.after.input
    assert after.batch_size > 1
    assert after.batch_size * after.gradient_accumulation_steps == 16
    assert "keep the tokens per optimizer step" in rec.reason
