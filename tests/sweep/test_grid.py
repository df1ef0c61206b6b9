"""Grid parsing, expansion, naming and pruning (pure: no runs, no AWS)."""

from __future__ import annotations

import re

import pytest

from platform_constructs.submitter.runtime import request as request_module
from platform_spec.hyperparameters import HyperparameterError
from trainctl.sweeps.grid import client_token_for, expand, job_name_for, parse_grid
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.state import SKIPPED, SweepError

from .conftest import P5_BASE_REQUEST

pytestmark = pytest.mark.xdist_group("sweep")


def test_grid_text_and_mapping_parse_to_the_same_normalised_strings() -> None:
    text = parse_grid(["precision=BF16,fp8,mxfp8", "batch-size=1,4,16", "activation_checkpointing=off,full"])
    mapping = parse_grid(
        {"precision": ["bf16", "fp8", "mxfp8"], "batch_size": [1, 4, 16], "activation_checkpointing": ["off", "full"]}
    )
    assert (
        text
        == mapping
        == {
            "precision": ["bf16", "fp8", "mxfp8"],
            "batch_size": ["1", "4", "16"],
            "activation_checkpointing": ["off", "full"],
        }
    )
    assert parse_grid(["batch_size=4,4,2"]) == {"batch_size": ["4", "2"]}


def test_a_bad_grid_key_names_it_and_lists_the_known_ones() -> None:
    with pytest.raises(HyperparameterError) as info:
        parse_grid(["batch_sise=1,2"])
    assert info.value.field == "batch_sise"
    assert "batch_size" in info.value.expected and "precision" in info.value.expected


@pytest.mark.parametrize(
    ("spec", "field", "expected"),
    [
        ("precision=bf16,fp9", "precision", "one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"),
        ("batch_size=1,0", "batch_size", "an integer >= 1"),
        ("activation_checkpointing=off,selective", "activation_checkpointing", "one of off, full"),
        ("batch_size=1,", "batch_size", "an integer >= 1"),
    ],
)
def test_a_bad_grid_value_names_the_key_and_its_allowed_values(spec: str, field: str, expected: str) -> None:
    with pytest.raises(HyperparameterError) as info:
        parse_grid([spec])
    assert info.value.field == field
    assert info.value.expected.startswith(expected)


@pytest.mark.parametrize("spec", ["precision", "=bf16", ""])
def test_malformed_grid_text_is_refused(spec: str) -> None:
    with pytest.raises(SweepError, match="KEY=V1,V2"):
        parse_grid([spec])


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(SweepError, match="given twice"):
        parse_grid(["precision=bf16", "precision=fp8"])


def test_expansion_is_the_cartesian_product_first_key_slowest() -> None:
    configs = expand(parse_grid(["precision=bf16,fp8", "batch_size=1,4,16"]), {"model": "gpt-1b", "seq_length": "2048"})
    assert [c.title for c in configs] == [
        f"precision={p} batch_size={b}" for p in ("bf16", "fp8") for b in ("1", "4", "16")
    ]
    assert [c.id for c in configs][:2] == ["01-bf16-bs1", "02-bf16-bs4"]
    assert configs[4].hyperparameters == {
        "model": "gpt-1b",
        "seq_length": "2048",
        "precision": "fp8",
        "batch_size": "4",
    }


def test_a_combination_breaking_a_cross_field_rule_is_skipped_with_the_rule() -> None:
    configs = expand(parse_grid(["precision=bf16,fp8", "quantized_model_init=true"]), {"model": "gpt-1b"})
    bf16, fp8 = configs
    assert bf16.status == SKIPPED and "quantized_model_init" in bf16.reason and "fp8, mxfp8 or nvfp4" in bf16.reason
    # the trainer image's TransformerEngine cannot shard quantized weights: refused by the same rule for fp8
    assert fp8.status == SKIPPED and "TransformerEngine 2.10" in fp8.reason
    low, high = expand(parse_grid(["learning_rate=1e-5,1e-3"]), {"model": "gpt-1b", "min_learning_rate": "3e-5"})
    assert low.status == SKIPPED and "min_learning_rate" in low.reason and high.status != SKIPPED


def test_job_names_and_client_tokens_are_deterministic_valid_and_distinct() -> None:
    grid = parse_grid(["precision=bf16,fp8", "batch_size=1,4,16", "activation_checkpointing=off,full"])
    configs = expand(grid, {"model": "gpt-1b"})
    again = expand(grid, {"model": "gpt-1b"})
    name = "a-rather-long-sweep-name-for-b200.grid_v2"[:40]
    names = [job_name_for(name, c) for c in configs]
    tokens = [client_token_for(name, c) for c in configs]
    assert names == [job_name_for(name, c) for c in again]
    assert tokens == [client_token_for(name, c) for c in again]
    assert len(set(names)) == len(set(tokens)) == len(configs) == 12
    for job, token in zip(names, tokens):
        assert request_module.JOB_NAME_RE.match(job) and len(job) <= 63, job
        assert request_module.CLIENT_TOKEN_RE.match(token), token
    # another sweep over the same grid gets other jobs
    assert not set(names) & {job_name_for("other", c) for c in configs}


def test_pruning_on_hopper_skips_mxfp8_and_predicted_oom_with_the_estimate(tmp_path, env) -> None:
    sweep = plan_sweep(
        "prune",
        ["precision=bf16,fp8,mxfp8", "batch_size=1,64"],
        mode="aws",
        base=P5_BASE_REQUEST,
        sweeps_dir=tmp_path,
        env=env,
    )
    by_title = {c.title: c for c in sweep.configs}
    for batch in ("1", "64"):
        mxfp8 = by_title[f"precision=mxfp8 batch_size={batch}"]
        assert mxfp8.status == SKIPPED
        assert mxfp8.reason.startswith("hardware: mxfp8 does not run on H100 (ml.p5.48xlarge)")
        assert mxfp8.job_name is None and mxfp8.client_token is None
    for precision in ("bf16", "fp8"):
        fits = by_title[f"precision={precision} batch_size=1"]
        assert fits.status == "Pending" and fits.prediction["fits"] is True
        assert fits.prediction["gpu"] == "H100" and fits.prediction["tokens_per_second"] > 0
        oom = by_title[f"precision={precision} batch_size=64"]
        assert oom.status == SKIPPED and oom.reason.startswith("predicted out of memory: ")
        assert oom.prediction["fits"] is False
        assert oom.prediction["memory_gb_total"] > oom.prediction["memory_gb_usable"]
        assert f"{oom.prediction['memory_gb_total']:.1f} GB peak per GPU" in oom.reason
        assert "the planner suggests: batch_size: 64 ->" in oom.reason
    assert not (tmp_path / "prune").exists()  # planning writes nothing


def test_auto_tune_in_the_base_leaves_oom_configs_to_the_submitter(tmp_path, env) -> None:
    sweep = plan_sweep(
        "tune", ["batch_size=64"], mode="aws", base={**P5_BASE_REQUEST, "auto_tune": True}, sweeps_dir=tmp_path, env=env
    )
    assert sweep.configs[0].status == "Pending" and sweep.configs[0].prediction["fits"] is False


def test_local_pruning_skips_precisions_a_cpu_cannot_run(tmp_path) -> None:
    sweep = plan_sweep(
        "cpu", ["precision=fp32,bf16,fp16,fp8,mxfp8,nvfp4"], mode="local", sweeps_dir=tmp_path, device={"type": "cpu"}
    )
    statuses = {c.precision: (c.status, c.reason) for c in sweep.configs}
    assert statuses["fp32"] == ("Pending", None) and statuses["bf16"] == ("Pending", None)
    for precision in ("fp16", "fp8", "mxfp8", "nvfp4"):
        status, reason = statuses[precision]
        assert status == SKIPPED and reason == (
            f"hardware: {precision} needs an NVIDIA GPU; this host has none and the CPU path runs fp32, bf16"
        )


def test_bad_names_bases_and_set_values_are_refused(tmp_path) -> None:
    with pytest.raises(SweepError, match="sweep name '../x'"):
        plan_sweep("../x", ["precision=bf16"], mode="local", sweeps_dir=tmp_path, device={"type": "cpu"})
    with pytest.raises(HyperparameterError) as info:
        plan_sweep(
            "x",
            ["precision=bf16"],
            mode="local",
            sweeps_dir=tmp_path,
            set_values=["max_steps=0"],
            device={"type": "cpu"},
        )
    assert info.value.field == "max_steps"
    with pytest.raises(SweepError, match="remove 'client_token'"):
        plan_sweep(
            "x", ["precision=bf16"], mode="aws", base={**P5_BASE_REQUEST, "client_token": "t"}, sweeps_dir=tmp_path
        )
    with pytest.raises(SweepError, match="instance_type 'ml.g5.xlarge'"):
        plan_sweep(
            "x",
            ["precision=bf16"],
            mode="aws",
            base={**P5_BASE_REQUEST, "instance_type": "ml.g5.xlarge"},
            sweeps_dir=tmp_path,
        )
    with pytest.raises(SweepError, match=re.escape("give its grid")):
        plan_sweep("missing", None, mode="local", sweeps_dir=tmp_path)
