"""The estimate's memo (``planner.plan.Evaluator``, ``planner.inputs.ResolveMemo``, ``PlanInput.replace``) gives
the answers the planner gave without it, and works each configuration out once.

``trainctl plan`` weighs some 120 configurations for one request (issue 17: about a third of its wall time went
to working some of them out twice and to the speed model of configurations only asked whether they fit). These
tests hold the memo to the plain functions (:func:`planner.plan.evaluate`, ``dataclasses.replace``), not to
times (speed is measured in ``benchmarks/startup.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import random

import pytest

import planner.inputs
import planner.plan
from planner import Plan, PlanInput, PlanInputError, auto_tune, estimate
from planner.inputs import ResolveMemo, resolve
from planner.plan import Evaluator, evaluate
from planner.recommend import fitting_candidates, recommend
from platform_spec.catalogue import TRAINABLE_INSTANCE_TYPES
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import MODEL_PRESETS, PRECISIONS

GUIDE = PlanInput(
    model="gpt-1b",
    num_layers=10,
    precision="mxfp8",
    seq_length=2048,
    batch_size=8,
    activation_checkpointing="off",
    instance_type="ml.p6-b200.48xlarge",
)


def configurations(count: int, seed: int = 17) -> list[PlanInput]:
    """Seeded configurations across models, precisions, instances, modes and budgets (many do not fit, some
    are refused)."""
    rng = random.Random(seed)
    return [
        PlanInput(
            model=rng.choice(MODEL_PRESETS),
            num_layers=rng.choice([None, None, 2, 10]),
            precision=rng.choice(PRECISIONS),
            seq_length=rng.choice([512, 2048, 8192]),
            batch_size=rng.choice([1, 4, 8, 64]),
            activation_checkpointing=rng.choice(["off", "full", "selective:2"]),
            instance_type=rng.choice(TRAINABLE_INSTANCE_TYPES),
            instance_count=rng.choice([1, 1, 2, 16]),
            sharding_strategy=rng.choice(["full", "hybrid"]),
            reshard_after_forward=rng.choice([True, False]),
            gradient_accumulation_steps=rng.choice([1, 1, 4]),
            gradient_sync=rng.choice(["every_micro_batch", "last_micro_batch"]),
            blocks_only=rng.choice([False, False, True]),
            price_per_hour=rng.choice([None, 98.3]),
            tokens=rng.choice([None, 1e12]),
        )
        for _ in range(count)
    ]


def unmemoised(inp: PlanInput) -> dict:
    """What :func:`planner.estimate` answered before the memo: every configuration through :func:`evaluate`."""
    plan = evaluate(inp)
    return dataclasses.replace(plan, recommendations=recommend(plan, evaluate)).to_dict()


@pytest.mark.parametrize("inp", configurations(40), ids=lambda inp: f"{inp.model}-{inp.precision}-{inp.instance_type}")
def test_the_estimate_is_the_one_without_the_memo(inp) -> None:
    try:
        expected = unmemoised(inp)
    except FieldError as refused:
        with pytest.raises(FieldError) as caught:
            estimate(inp)
        assert (type(caught.value), str(caught.value)) == (type(refused), str(refused))
        return
    assert estimate(inp).to_dict() == expected


@pytest.mark.parametrize("inp", [c for c in configurations(40) if not c.blocks_only][:12])
def test_auto_tune_finds_what_it_found_without_the_memo(inp) -> None:
    try:
        plan = evaluate(inp)
    except FieldError:
        return
    if plan.fits:
        assert auto_tune(inp) == (plan.input, [])
        return
    plain = [p.input for p in fitting_candidates(plan, evaluate)]
    assert [p.input for p in fitting_candidates(plan, Evaluator(plan))] == plain
    tuned = auto_tune(inp)
    assert (tuned is None) == (not plain) and (tuned is None or tuned[0] == plain[0])


def test_each_configuration_the_estimate_weighs_is_resolved_once(monkeypatch) -> None:
    """The guide's request: the recommendations ask about some 120 configurations; each is resolved (and its
    memory modelled) once, and the speed model runs only for those whose speed is asked (bisecting the largest
    batch that fits asks memory only)."""
    resolved: collections.Counter[PlanInput] = collections.Counter()
    real_resolve = planner.plan.resolve

    def counting(inp: PlanInput, **kw) -> planner.inputs.ResolvedInput:
        resolved[inp] += 1
        return real_resolve(inp, **kw)

    speed = collections.Counter()
    real_speed = planner.plan.estimate_throughput

    def counting_speed(r, **kw):
        speed[r.input] += 1
        return real_speed(r, **kw)

    monkeypatch.setattr(planner.plan, "resolve", counting)
    monkeypatch.setattr(planner.plan, "estimate_throughput", counting_speed)
    plan = estimate(GUIDE)
    assert plan.recommendations  # the rules did weigh alternatives
    assert len(resolved) > 50
    assert max(resolved.values()) == 1  # none worked out twice
    assert max(speed.values()) == 1
    assert len(speed) < len(resolved)  # the bisections' configurations had their memory modelled only


def test_the_evaluator_answers_fits_as_evaluate_does_and_refuses_alike_every_time() -> None:
    plan = evaluate(GUIDE)
    evaluator = Evaluator(plan)
    for batch in (1, 8, 64, 512, 4096):
        candidate = plan.input.replace(batch_size=batch)
        assert evaluator.fits(candidate) == evaluate(candidate).fits
        assert evaluator(candidate) == evaluate(candidate)
    refused = plan.input.replace(activation_checkpointing="selective:11")  # more than the 10 blocks
    for _ in range(2):  # a refusal is not remembered as an answer
        with pytest.raises(PlanInputError, match="activation_checkpointing"):
            evaluator.fits(refused)
        with pytest.raises(PlanInputError, match="activation_checkpointing"):
            evaluator(refused)


def test_the_memo_tells_a_boolean_from_the_integer_it_equals() -> None:
    """``True == 1`` in Python, not as hyperparameters: a memo keyed by value alone would accept
    ``batch_size=True`` after ``batch_size=1`` (and refuse ``quantized_model_init=1`` after ``True`` the
    other way round)."""
    memo = ResolveMemo()
    assert memo.coerce("batch_size", 1) == 1
    with pytest.raises(PlanInputError, match="batch_size"):
        memo.coerce("batch_size", True)
    assert memo.coerce("reshard_after_forward", True) is True
    with pytest.raises(PlanInputError, match="reshard_after_forward"):
        memo.coerce("reshard_after_forward", 1)
    with pytest.raises(PlanInputError, match="batch_size"):
        resolve(GUIDE.replace(batch_size=True), memo=memo)


def test_replace_is_dataclasses_replace() -> None:
    changed = GUIDE.replace(batch_size=16, activation_checkpointing="full")
    assert changed == dataclasses.replace(GUIDE, batch_size=16, activation_checkpointing="full")
    assert type(changed) is PlanInput and changed.batch_size == 16 and GUIDE.batch_size == 8
    assert hash(changed) == hash(dataclasses.replace(GUIDE, batch_size=16, activation_checkpointing="full"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.batch_size = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        GUIDE.replace(batchsize=16)


def test_a_plan_of_the_memo_is_a_plan() -> None:
    """The recommendations' ``after`` plans come from the memo: plans like any other, without their own
    recommendations."""
    plan = estimate(GUIDE)
    for rec in plan.recommendations:
        assert rec.after is None or (isinstance(rec.after, Plan) and rec.after.recommendations == [])


@pytest.mark.parametrize(
    ("mode", "layers", "checkpointing", "blocks"),
    [
        ("off", 10, "off", 0),
        ("full", 10, "full", 10),
        ("selective:3", 10, "selective:3", 3),
        ("selective:1", 7, "full", 7),
    ],
)
def test_the_resolved_checkpointing_is_kept_with_its_input_and_follows_a_replaced_one(
    mode, layers, checkpointing, blocks
) -> None:
    """``ResolvedInput.activation_checkpointing`` and ``checkpointed_blocks`` are worked out once per instance
    (issue 17); a copy with another input or model has its own, and the kept values do not change equality."""
    r = resolve(GUIDE.replace(activation_checkpointing=mode, num_layers=layers))
    fresh = resolve(GUIDE.replace(activation_checkpointing=mode, num_layers=layers))
    assert (r.activation_checkpointing.name, r.checkpointed_blocks) == (checkpointing, blocks)
    assert r.checkpointing is (blocks > 0)
    assert r == fresh  # one has its values kept, the other not yet
    other = resolve(GUIDE.replace(activation_checkpointing="full", num_layers=4))
    copy = dataclasses.replace(r, input=other.input, model=other.model)
    assert (copy.activation_checkpointing.name, copy.checkpointed_blocks) == ("full", 4)
    assert (r.activation_checkpointing.name, r.checkpointed_blocks) == (checkpointing, blocks)
