"""Grid parsing, expansion, naming and pruning (pure: no runs, no AWS)."""

from __future__ import annotations

import re

import pytest

from platform_constructs.submitter.runtime import request as request_module
from platform_spec import hyperparameters as hpmod
from platform_spec.hyperparameters import HyperparameterError
from trainctl.sweeps.grid import client_token_for, expand, job_name_for, parse_grid
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.pruning import SPEED_FIGURES
from trainctl.sweeps.state import SKIPPED, SweepError

from .conftest import AT_RISK_BASE, P5_BASE_REQUEST

pytestmark = pytest.mark.xdist_group("sweep")

CPU = {"type": "cpu"}


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
        ("activation_checkpointing=off,selective", "activation_checkpointing", "off, full or selective:N"),
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
    configs = expand(parse_grid(["precision=bf16,fp8,nvfp4", "quantized_model_init=true"]), {"model": "gpt-1b"})
    bf16, fp8, nvfp4 = configs
    assert bf16.status == SKIPPED and "quantized_model_init" in bf16.reason and "fp8 or mxfp8" in bf16.reason
    # fp8 weights are stored quantized; TransformerEngine marks nvfp4's unsupported under FSDP2: the same rule
    assert fp8.status != SKIPPED
    assert nvfp4.status == SKIPPED and "quantized_model_init" in nvfp4.reason and "FSDP2" in nvfp4.reason
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
    for job, token in zip(names, tokens, strict=True):
        assert request_module.job_name_re().match(job) and len(job) <= 63, job
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
        assert fits.status == "Pending" and fits.prediction["fits"] is True and fits.prediction["status"] == "fits"
        assert fits.prediction["gpu"] == "H100" and fits.prediction["tokens_per_second"] > 0
        assert fits.prediction["mfu"] > 0 and fits.prediction["not_run"] is None
        oom = by_title[f"precision={precision} batch_size=64"]
        assert oom.status == SKIPPED and oom.reason.startswith("predicted out of memory: ")
        assert oom.prediction["fits"] is False and oom.prediction["status"] == "out-of-memory"
        assert oom.prediction["memory_gb_total"] > oom.prediction["memory_gb_usable"]
        assert f"{oom.prediction['memory_gb_total']:.1f} GB peak per GPU" in oom.reason
        assert "the planner suggests: batch_size: 64 ->" in oom.reason
        # it does not run: no tokens/s or MFU as if it had (issue 14), the verdict instead
        assert {k: oom.prediction[k] for k in SPEED_FIGURES} == dict.fromkeys(SPEED_FIGURES)
        assert oom.prediction["not_run"] == (
            f"not run: out-of-memory ({oom.prediction['memory_gb_required']:.1f} GB needed per GPU, "
            f"{oom.prediction['memory_gb_usable']:.1f} GB usable)"
        )
    assert not (tmp_path / "prune").exists()  # planning writes nothing


def test_auto_tune_in_the_base_predicts_the_change_the_submitter_applies(tmp_path, env) -> None:
    """With auto_tune the submitter runs the planner's change (planner.auto_tune of the same input): the
    configuration is left to it, and its prediction is of what will run, the changes named."""
    import planner

    sweep = plan_sweep(
        "tune", ["batch_size=64"], mode="aws", base={**P5_BASE_REQUEST, "auto_tune": True}, sweeps_dir=tmp_path, env=env
    )
    (config,) = sweep.configs
    assert config.status == "Pending" and config.job_name
    tuned_input, changes = planner.auto_tune(
        planner.PlanInput.from_hyperparameters(
            hpmod.parse(config.hyperparameters), instance_type="ml.p5.48xlarge", instance_count=1
        )
    )
    assert changes and config.prediction["auto_tune"] == changes
    assert changes[0].startswith("batch_size: 64 -> ")
    tuned = planner.estimate(tuned_input)
    assert config.prediction["status"] == "fits" and config.prediction["memory_gb_total"] == round(
        tuned.memory_gb.total, 3
    )
    assert config.prediction["tokens_per_second"] == round(tuned.tokens_per_second, 1)


# --- memory verdicts: at-risk is skipped unless the base accepts the risk, as the submitter does -------------


# gpt-1b (24 blocks) at 7K tokens on 8x H100, bf16, no checkpointing: batch 1 fits, 7 is at-risk, 8 does not fit
def test_an_at_risk_configuration_is_skipped_with_the_verdict_and_no_speed(tmp_path, env) -> None:
    sweep = plan_sweep("risk", ["batch_size=1,7,8"], mode="aws", base=AT_RISK_BASE, sweeps_dir=tmp_path, env=env)
    fits, risky, oom = sweep.configs
    assert (fits.status, fits.prediction["status"]) == ("Pending", "fits")
    assert (risky.status, risky.prediction["status"], oom.prediction["status"]) == (
        SKIPPED,
        "at-risk",
        "out-of-memory",
    )
    p = risky.prediction
    assert risky.reason.startswith(
        f"predicted at-risk: {p['memory_gb_total']:.1f} GB peak per GPU ({p['memory_gb_required']:.1f} GB with "
        f"margins) of {p['memory_gb_usable']:.1f} GB usable on H100 (ml.p5.48xlarge), within the planner's 5% error "
        "of the limit; set accept_memory_risk in the base request to run it as it is; the planner suggests: "
    )
    assert p["memory_gb_required"] < p["memory_gb_usable"] < p["memory_gb_required"] * 1.05  # within the margin
    assert {k: p[k] for k in SPEED_FIGURES} == dict.fromkeys(SPEED_FIGURES)
    assert p["not_run"].startswith("not run: at-risk (") and risky.job_name is None and risky.client_token is None
    assert oom.reason.startswith("predicted out of memory: ")


def test_a_sweep_accepts_the_risk_explicitly_and_again_on_an_existing_sweep(tmp_path, env) -> None:
    accepted = plan_sweep(
        "accepted",
        ["batch_size=7,8"],
        mode="aws",
        base={**AT_RISK_BASE, "accept_memory_risk": True},
        sweeps_dir=tmp_path,
        env=env,
    )
    risky, oom = accepted.configs
    assert risky.status == "Pending" and risky.job_name and risky.client_token
    assert risky.prediction["status"] == "at-risk" and risky.prediction["tokens_per_second"] > 0
    assert risky.prediction["not_run"] is None
    assert oom.status == SKIPPED  # out of memory is refused whatever accept_memory_risk says (the submitter's rule)

    # a sweep that skipped it runs it when defined again with the risk accepted, and skips it again without
    first = plan_sweep("later", ["batch_size=7,8"], mode="aws", base=AT_RISK_BASE, sweeps_dir=tmp_path, env=env)
    first.save()
    assert [c.status for c in first.configs] == [SKIPPED, SKIPPED]
    again = plan_sweep(
        "later",
        ["batch_size=7,8"],
        mode="aws",
        base={**AT_RISK_BASE, "accept_memory_risk": True},
        sweeps_dir=tmp_path,
        env=env,
    )
    risky, oom = again.configs
    assert risky.status == "Pending" and risky.reason is None and risky.prediction["tokens_per_second"] > 0
    assert risky.job_name == job_name_for("later", risky) and again.base["accept_memory_risk"] is True
    assert oom.status == SKIPPED and oom.reason.startswith("predicted out of memory: ")
    again.save()
    back = plan_sweep("later", ["batch_size=7,8"], mode="aws", base=AT_RISK_BASE, sweeps_dir=tmp_path, env=env)
    assert back.configs[0].status == SKIPPED and back.configs[0].reason.startswith("predicted at-risk: ")
    assert back.configs[0].job_name is None and back.base["accept_memory_risk"] is False


def test_accept_memory_risk_and_auto_tune_must_be_true_or_false(tmp_path, env) -> None:
    for key in ("accept_memory_risk", "auto_tune"):
        with pytest.raises(SweepError, match=re.escape(f"base request: {key} 'yes': expected true or false")):
            plan_sweep("x", ["batch_size=1"], mode="aws", base={**AT_RISK_BASE, key: "yes"}, sweeps_dir=tmp_path)
    with pytest.raises(SweepError, match=re.escape("--base: auto_tune true: a local sweep runs each configuration")):
        plan_sweep("x", ["batch_size=1"], mode="local", base={"auto_tune": True}, sweeps_dir=tmp_path, device=CPU)
    assert not list(tmp_path.iterdir())


def test_a_local_sweep_on_a_known_gpu_skips_at_risk_unless_its_base_accepts_it(tmp_path) -> None:
    h100 = {"type": "cuda", "gpus": 8, "name": "NVIDIA H100 80GB HBM3", "gpu": "H100"}
    base = {"hyperparameters": {"model": "gpt-1b", "seq_length": 7168}}
    skipped = plan_sweep("gpu", ["batch_size=7"], mode="local", base=base, sweeps_dir=tmp_path, device=h100)
    assert skipped.configs[0].status == SKIPPED
    assert "set accept_memory_risk in --base to run it as it is" in skipped.configs[0].reason
    runs = plan_sweep(
        "gpu2",
        ["batch_size=7"],
        mode="local",
        base={**base, "accept_memory_risk": True},
        sweeps_dir=tmp_path,
        device=h100,
    )
    (config,) = runs.configs
    assert config.status == "Pending" and config.run_dir == f"runs/{config.id}"
    assert config.prediction["status"] == "at-risk" and runs.target["accept_memory_risk"] is True


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
    with pytest.raises(SweepError, match=re.escape("sweep name '../x'")):
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
    with pytest.raises(SweepError, match=re.escape("instance_type 'ml.g5.xlarge'")):
        plan_sweep(
            "x",
            ["precision=bf16"],
            mode="aws",
            base={**P5_BASE_REQUEST, "instance_type": "ml.g5.xlarge"},
            sweeps_dir=tmp_path,
        )
    with pytest.raises(SweepError, match=re.escape("give its grid")):
        plan_sweep("missing", None, mode="local", sweeps_dir=tmp_path)
