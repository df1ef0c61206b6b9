"""A sweep over a base whose model is a Hugging Face ``config.json`` (``model_config``), and shape
hyperparameters as grid axes: the sweep plans, prunes and runs the shape the base names (issue 14), each grid
point checked by the family's shape rule (pure: no runs, no AWS)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import planner
from platform_spec import hyperparameters as hpmod
from platform_spec import models
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.state import SKIPPED, SweepError
from trainctl.sweeps.submission import request_for

from .conftest import P5_BASE_REQUEST

pytestmark = pytest.mark.xdist_group("sweep")

LLAMA3_8B = json.loads((Path(__file__).parents[1] / "fixtures" / "llama3_8b_config.json").read_text())
"""Meta-Llama-3-8B's config.json (the submitter's and the trainer's fixture)."""
TINY = {
    **LLAMA3_8B,
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 352,
    "vocab_size": 512,
    "tie_word_embeddings": True,
}
"""A CPU-sized Llama config.json."""
LLAMA_BASE = {
    **P5_BASE_REQUEST,
    "model_config": LLAMA3_8B,
    "hyperparameters": {"precision": "bf16", "seq_length": 8192, "activation_checkpointing": "full", "max_steps": 100},
}
CPU = {"type": "cpu"}


def _plan(hp: dict, count: int = 1) -> planner.Plan:
    return planner.estimate(
        planner.PlanInput.from_hyperparameters(hpmod.parse(hp), instance_type="ml.p5.48xlarge", instance_count=count)
    )


def test_an_aws_sweep_prunes_and_submits_the_shape_of_its_model_config(tmp_path) -> None:
    sweep = plan_sweep("llama", ["batch_size=1,16"], mode="aws", base=LLAMA_BASE, sweeps_dir=tmp_path)
    small, large = sweep.configs
    # the configurations are Llama 3 8B: the file's shape as hyperparameters, the model the family's custom shape
    hp = hpmod.parse(small.hyperparameters)
    assert hp.model == "llama" and models.shape_hyperparameters(hpmod.model_shape(hp)) == models.shape_hyperparameters(
        models.shape_from_hf_config(LLAMA3_8B)
    )
    assert (small.hyperparameters["num_kv_heads"], small.hyperparameters["ffn_hidden_size"]) == ("8", "14336")
    # planned as that shape: the same memory as the llama3-8b preset, not the default model's
    preset = _plan({**LLAMA_BASE["hyperparameters"], "model": "llama3-8b", "batch_size": 1})
    default = _plan({**LLAMA_BASE["hyperparameters"], "batch_size": 1})
    assert small.prediction["memory_gb_total"] == round(preset.memory_gb.total, 3) != round(default.memory_gb.total, 3)
    assert small.prediction["tokens_per_second"] == round(preset.tokens_per_second, 1)
    assert small.status == "Pending" and small.prediction["status"] == "fits"
    assert large.status == SKIPPED and large.reason.startswith("predicted out of memory: ")  # 8B at 16 x 8K tokens
    # the request carries the shape as hyperparameters: the submitter would refuse them beside a model_config
    assert "model_config" not in sweep.base and LLAMA_BASE["model_config"] is LLAMA3_8B  # the caller's base intact
    request = request_for(sweep, small)
    assert "model_config" not in request and request["hyperparameters"] == small.hyperparameters
    assert (
        hpmod.parse(request["hyperparameters"]).to_strings()
        == hpmod.parse(
            hpmod.merge_model_config({**LLAMA_BASE["hyperparameters"], "batch_size": 1}, LLAMA3_8B)
        ).to_strings()
    )  # the training job's hyperparameters are those the submitter makes of the model_config


def test_the_same_base_again_is_the_same_sweep(tmp_path) -> None:
    first = plan_sweep("same", ["batch_size=1"], mode="aws", base=copy.deepcopy(LLAMA_BASE), sweeps_dir=tmp_path)
    first.save()
    again = plan_sweep("same", ["batch_size=1"], mode="aws", base=copy.deepcopy(LLAMA_BASE), sweeps_dir=tmp_path)
    assert [c.job_name for c in again.configs] == [c.job_name for c in first.configs]
    other = {**LLAMA_BASE, "model_config": {**LLAMA3_8B, "num_key_value_heads": 4}}
    with pytest.raises(SweepError, match=r"already exists .* with a different base"):
        plan_sweep("same", ["batch_size=1"], mode="aws", base=other, sweeps_dir=tmp_path)


def test_shape_hyperparameters_are_grid_axes_checked_by_the_family_rule(tmp_path) -> None:
    sweep = plan_sweep("kv", ["num_kv_heads=8,32,3", "batch_size=1"], mode="aws", base=LLAMA_BASE, sweeps_dir=tmp_path)
    gqa, mha, bad = sweep.configs
    assert gqa.status == mha.status == "Pending"
    # 32 KV heads (no grouping): wider K and V, more parameters and memory than 8
    assert mha.prediction["memory_gb_total"] > gqa.prediction["memory_gb_total"]
    assert mha.prediction["memory_gb_total"] == round(
        _plan({**gqa.hyperparameters, "num_kv_heads": 32}).memory_gb.total, 3
    )
    assert bad.status == SKIPPED and bad.prediction is None and bad.job_name is None
    assert bad.reason.startswith(
        "invalid combination: hyperparameter 'num_kv_heads': got 3, expected a divisor of num_heads (32)"
    )


def test_a_shape_is_checked_for_each_precision_of_the_grid(tmp_path) -> None:
    """fp8's GEMMs need widths that are multiples of 16 (the precision registry): an FFN of 14344 runs in bf16
    only; the grid point of fp8 with it is skipped naming ffn_hidden_size, the rest is planned."""
    sweep = plan_sweep(
        "ffn",
        ["precision=bf16,fp8", "ffn_hidden_size=14336,14344"],
        mode="aws",
        base=LLAMA_BASE,
        sweeps_dir=tmp_path,
    )
    status = {c.title: (c.status, c.reason) for c in sweep.configs}
    assert status["precision=bf16 ffn_hidden_size=14344"] == ("Pending", None)
    assert status["precision=fp8 ffn_hidden_size=14336"] == ("Pending", None)
    reason = status["precision=fp8 ffn_hidden_size=14344"][1]
    assert reason.startswith(
        "invalid combination: hyperparameter 'ffn_hidden_size': got 14344, expected a value making ffn_hidden_size "
        "(14344) a multiple of 16 for precision fp8"
    )


def test_shape_axes_work_without_a_model_config_too(tmp_path) -> None:
    sweep = plan_sweep(
        "preset",
        ["num_kv_heads=1,2,3"],
        mode="local",
        base={"model": "llama-tiny"},
        sweeps_dir=tmp_path,
        device=CPU,
    )
    assert [c.status for c in sweep.configs] == ["Pending", "Pending", SKIPPED]
    assert "hyperparameter 'num_kv_heads': got 3, expected a divisor of num_heads (4)" in sweep.configs[2].reason
    assert hpmod.model_shape(hpmod.parse(sweep.configs[0].hyperparameters)).num_kv_heads == 1


def test_a_local_sweep_trains_the_shape_of_its_model_config(tmp_path) -> None:
    """Before, a local sweep dropped the base's model_config and trained its default model (gpt-tiny)."""
    # a request's hyperparameters, or a hyperparameters object beside the model_config
    for form, base in enumerate(
        ({"model_config": TINY, "hyperparameters": {"max_steps": 20}}, {"model_config": TINY, "max_steps": 20})
    ):
        sweep = plan_sweep(
            "local", ["precision=fp32,bf16"], mode="local", base=base, sweeps_dir=tmp_path / str(form), device=CPU
        )
        for config in sweep.configs:  # what run_local_configs hands the entry point as hyperparameters.json
            assert config.status == "Pending" and config.run_dir
            hp = hpmod.parse(config.hyperparameters)
            shape = hpmod.model_shape(hp)
            assert hp.model == "llama" and hp.max_steps == 20
            assert shape == models.shape_from_hf_config(TINY) and shape.tied_embeddings is True
        assert sweep.base["model"] == "llama" and sweep.base["num_kv_heads"] == "2"
    # --set varies the file's shape as a grid axis does (one value)
    shallow = plan_sweep(
        "set",
        ["precision=fp32"],
        mode="local",
        base={"model_config": TINY},
        set_values=["num_layers=1"],
        sweeps_dir=tmp_path,
        device=CPU,
    )
    assert hpmod.model_shape(hpmod.parse(shallow.configs[0].hyperparameters)).num_layers == 1


def test_a_sweep_planned_before_keeps_sending_its_model_config(tmp_path) -> None:
    """A sweep state written before model_config was mapped kept it in its base request and planned the default
    model: resumed as defined, its requests still carry the model_config (the submitter maps it, as it did);
    defined again with its grid, it is a different sweep (the base now carries the shape), refused by name."""
    from trainctl.sweeps.state import Sweep, SweepConfig

    old = Sweep(
        name="before",
        mode="aws",
        grid={"batch_size": ["1"]},
        base={**copy.deepcopy(LLAMA_BASE), "hyperparameters": {"precision": "bf16", "batch_size": "1"}},
        target={"instance_type": "ml.p5.48xlarge", "instance_count": 1, "gpu": "H100", "submitter": "in-process"},
        directory=tmp_path / "before",
        configs=[
            SweepConfig(
                index=0, overrides={"batch_size": "1"}, hyperparameters={"precision": "bf16", "batch_size": "1"}
            )
        ],
    )
    old.save()
    resumed = plan_sweep("before", None, mode="aws", sweeps_dir=tmp_path)
    request = request_for(resumed, resumed.configs[0])
    assert request["model_config"] == LLAMA3_8B and request["hyperparameters"] == {
        "precision": "bf16",
        "batch_size": "1",
    }
    with pytest.raises(SweepError, match=r"already exists .* with a different base; run it again as defined"):
        plan_sweep("before", ["batch_size=1"], mode="aws", base=LLAMA_BASE, sweeps_dir=tmp_path)


@pytest.mark.parametrize(
    ("mode", "base", "grid", "set_values", "message"),
    [
        # the base's hyperparameters may not set the shape the file gives (the submitter's rule)
        (
            "aws",
            {**LLAMA_BASE, "hyperparameters": {"num_layers": 10}},
            ["batch_size=1"],
            None,
            "base request: num_layers: got 10; expected no value: model_config sets the model's shape",
        ),
        (
            "local",
            {"model_config": TINY, "hyperparameters": {"model": "gpt-tiny"}},
            ["batch_size=1"],
            None,
            "--base: model: got 'gpt-tiny'; expected no value: model_config sets the model's shape",
        ),
        # what the trainer does not implement is refused with the key named
        (
            "aws",
            {**LLAMA_BASE, "model_config": {**LLAMA3_8B, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}},
            ["batch_size=1"],
            None,
            "base request: model_config.rope_scaling.rope_type: got 'yarn'; expected 'default' or 'llama3'",
        ),
        (
            "aws",
            {**LLAMA_BASE, "model_config": ["not", "an", "object"]},
            ["batch_size=1"],
            None,
            "base request: model_config: got 'list'; expected a JSON object",
        ),
        # the model itself is the file's: not a grid axis nor a --set value
        (
            "aws",
            LLAMA_BASE,
            ["model=gpt-1b,llama3-8b"],
            None,
            "grid key 'model': base request's model_config sets the model (model=llama); vary its shape "
            "hyperparameters (num_layers, hidden_size, num_heads, num_kv_heads, ffn_hidden_size, vocab_size, "
            "rope_base, tied_embeddings, norm_eps, head_dim, qkv_bias, qk_norm, rope_scaling_factor, "
            "rope_low_freq_factor, rope_high_freq_factor, rope_original_max_positions, sliding_window) instead, or "
            "remove model_config",
        ),
        (
            "local",
            {"model_config": TINY},
            ["batch_size=1"],
            ["model_family=gpt"],
            "--set 'model_family': --base's model_config sets the model (model=llama)",
        ),
    ],
)
def test_a_model_config_the_sweep_cannot_use_is_refused_naming_the_key(
    tmp_path, mode, base, grid, set_values, message
) -> None:
    with pytest.raises(SweepError) as refused:
        plan_sweep("bad", grid, mode=mode, base=base, set_values=set_values, sweeps_dir=tmp_path, device=CPU)
    assert str(refused.value).startswith(message), str(refused.value)
    assert not list(tmp_path.iterdir())  # nothing recorded


def test_a_grid_whose_every_point_is_invalid_is_refused_naming_the_rule(tmp_path) -> None:
    with pytest.raises(SweepError) as refused:
        plan_sweep("none", ["num_kv_heads=3,5"], mode="aws", base=LLAMA_BASE, sweeps_dir=tmp_path)
    assert str(refused.value).startswith(
        "every configuration of the grid is invalid; the first, num_kv_heads=3: hyperparameter 'num_kv_heads': "
        "got 3, expected a divisor of num_heads (32)"
    )
    assert not list(tmp_path.iterdir())
