"""``trainctl plan``: JSON keys, the rich table, bad-argument messages."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

import planner.plan
from planner import PlanInputError, estimate
from platform_spec.models import format_count
from trainctl.cli import main
from trainctl.plans import render_plan


def run_json(capsys, *argv):
    assert main(["plan", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_documented_keys(capsys):
    d = run_json(
        capsys,
        "--model",
        "gpt-8b",
        "--precision",
        "fp8",
        "--seq-length",
        "8192",
        "--batch-size",
        "2",
        "--activation-checkpointing",
        "off",
        "--instance-type",
        "ml.p6-b200.48xlarge",
        "--instance-count",
        "1",
        "--price-per-hour",
        "100",
        "--tokens",
        "1e12",
    )
    for key in (
        "status",
        "fits",
        "not_run",
        "activation_checkpointing",
        "memory_gb",
        "tokens_per_second",
        "tokens_per_second_per_gpu",
        "mfu",
        "step_time_s",
        "recommendations",
        "cost",
        "input",
        "model",
        "hardware",
        "notes",
    ):
        assert key in d
    assert isinstance(d["memory_gb"]["total"], float) and isinstance(d["fits"], bool)
    assert d["status"] == "fits" and d["fits"] is True and d["not_run"] is None
    assert d["input"]["model"] == "gpt-8b" and d["input"]["batch_size"] == 2
    assert d["cost"]["cost_usd"] == pytest.approx(d["cost"]["instance_hours"] * 100, rel=1e-3)
    for rec in d["recommendations"]:
        assert set(rec) == {"title", "reason", "kind", "changes", "after"}
    assert 0 < d["mfu"] < 100


def test_defaults_are_the_guide_request(capsys):
    d = run_json(capsys)
    assert (d["input"]["model"], d["input"]["num_layers"], d["input"]["precision"]) == ("gpt-1b", 10, "mxfp8")
    assert (d["input"]["batch_size"], d["input"]["seq_length"]) == (8, 2048)
    assert d["hardware"]["instance_type"] == "ml.p6-b200.48xlarge" and d["hardware"]["world_size"] == 8


def test_blocks_only_reproduces_the_guide(capsys):
    d = run_json(
        capsys,
        "--model",
        "gpt-1b",
        "--blocks-only",
        "--precision",
        "mxfp8",
        "--seq-length",
        "8192",
        "--batch-size",
        "16",
        "--activation-checkpointing",
        "full",
    )
    assert d["memory_gb"]["total"] == pytest.approx(22.8, rel=0.15)
    assert d["tokens_per_second_per_gpu"] == pytest.approx(51000, rel=0.15)


@pytest.mark.parametrize(
    ("argv", "flag", "allowed"),
    [
        (["--precision", "int8"], "--precision", "mxfp8"),
        (["--instance-type", "ml.p4d.24xlarge"], "--instance-type", "ml.p6-b200.48xlarge"),
        (["--model", "gpt-2t"], "--model", "gpt-8b"),
        (["--activation-checkpointing", "selective"], "--activation-checkpointing", "selective:N"),
        (["--activation-checkpointing", "selective:0"], "--activation-checkpointing", "selective:N"),
        (["--activation-checkpointing", "op"], "--activation-checkpointing", "off, full or selective:N"),
        (["--gradient-sync", "sometimes"], "--gradient-sync", "every_micro_batch"),
        (["--batch-size", "0"], "--batch-size", "integer >= 1"),
        (["--tokens", "lots"], "--tokens", "positive number"),
        (["--precision", "mxfp8", "--instance-type", "ml.p5.48xlarge"], "--precision", "fp8"),
        (["--precision", "bf16", "--quantized-model-init"], "--quantized-model-init", "fp8 or mxfp8"),
    ],
)
def test_bad_arguments_name_the_flag_and_allowed_values(capsys, argv, flag, allowed):
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert flag in err and allowed in err


def test_render_plan_shows_breakdown_and_recommendations(make_input):
    plan = estimate(make_input(price_per_hour=100.0, tokens=1e10))
    console = Console(file=io.StringIO(), width=160, record=True)
    render_plan(plan, console)
    text = console.export_text()
    for needle in (
        "Memory per GPU",
        "quantized weight copies",
        "activations",
        "total (peak allocated)",
        "fits",
        "tokens/s per GPU",
        "MFU",
        "Recommendations",
        "Turn on activation checkpointing",
        "Cost",
    ):
        assert needle in text


def test_table_output_runs(capsys):
    assert main(["plan", "--model", "gpt-14b", "--precision", "fp8", "--seq-length", "8192", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "OUT OF MEMORY" in out and "Make it fit" in out


def test_the_table_shows_a_tiny_models_parameters_as_a_real_number(capsys):
    """llama-tiny's 3,082,496 parameters once showed as "0.00B"."""
    assert main(["plan", "--model", "llama-tiny", "--precision", "bf16", "--instance-type", "ml.p5.48xlarge"]) == 0
    assert "(4 layers, hidden 256, 3.08M parameters)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (8_030_261_248, "8.03B"),  # Llama 3 8B (model card: 8.03B)
        (70_553_706_496, "70.6B"),
        (3_412_224, "3.41M"),
        (1_200_000, "1.2M"),
        (350_000, "350K"),
        (999_999, "1M"),  # rounded before the suffix is chosen, not "1e+03K"
        (15e12, "15T"),
        (2e15, "2,000T"),
        (45.25, "45.2"),
        (0, "0"),
        (-2500, "-2.5K"),
        (float("nan"), "nan"),
    ],
)
def test_counts_are_written_with_three_significant_digits_and_a_suffix(value, text):
    assert format_count(value) == text


# --- model shapes: presets, shape flags and a Hugging Face config.json plan the same model ----------------

LLAMA3_8B_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "llama3_8b_config.json"
TRAINING = ["--precision", "bf16", "--seq-length", "8192", "--batch-size", "1", "--activation-checkpointing", "full",
            "--instance-type", "ml.p5.48xlarge"]  # fmt: skip
LLAMA3_8B_FLAGS = ["--num-layers", "32", "--hidden-size", "4096", "--num-heads", "32", "--num-kv-heads", "8",
                   "--ffn-hidden-size", "14336", "--vocab-size", "128256", "--rope-base", "500000"]  # fmt: skip


def _figures(d):
    return (d["model"]["num_params"], d["memory_gb"]["total"], d["status"], d["tokens_per_second_per_gpu"])


@pytest.mark.parametrize(
    "model",
    [
        ["--model", "llama", *LLAMA3_8B_FLAGS],  # a custom shape of the family, every field given
        ["--model-family", "llama", *LLAMA3_8B_FLAGS],  # the family alone is the same
        ["--model-config", str(LLAMA3_8B_CONFIG)],
    ],
    ids=["family-name", "model-family", "model-config"],
)
def test_a_shape_given_by_flags_or_a_config_json_plans_as_its_preset(capsys, model):
    """Shapes are hyperparameters: ``trainctl plan`` takes every shape flag the trainer does (it once took only
    --num-layers and --vocab-size, so a user's own shape could be planned only from a file)."""
    preset = run_json(capsys, "--model", "llama3-8b", *TRAINING)
    custom = run_json(capsys, *model, *TRAINING)
    assert custom["input"]["model"] == "llama" and custom["model"]["num_kv_heads"] == 8
    assert _figures(custom) == _figures(preset) and preset["model"]["num_params"] == 8_030_261_248


def test_a_shape_flag_changes_the_preset(capsys):
    tied = run_json(capsys, "--model", "llama3-8b", "--tied-embeddings", "true", *TRAINING)
    untied = run_json(capsys, "--model", "llama3-8b", *TRAINING)
    assert untied["model"]["num_params"] - tied["model"]["num_params"] == 128256 * 4096


@pytest.mark.parametrize(
    ("argv", "flag", "expected"),
    [
        (["--model", "gpt-1b", "--num-kv-heads", "8"], "--num-kv-heads", "model family 'gpt' has no num_kv_heads"),
        (["--model", "llama3-8b", "--num-kv-heads", "5"], "--num-kv-heads", "a divisor of num_heads (32)"),
        (["--model", "llama3-8b", "--num-kv-heads", "eight"], "--num-kv-heads", "an integer >= 1"),
        (["--model", "llama3-8b", "--tied-embeddings", "maybe"], "--tied-embeddings", "true or false"),
        (["--model", "llama", "--num-layers", "2"], "--hidden-size", "custom llama shape, which needs"),
        (["--model-config", str(LLAMA3_8B_CONFIG), "--num-kv-heads", "4"], "--num-kv-heads",
         "model_config sets the model's shape"),
    ],
)  # fmt: skip
def test_a_shape_flag_the_family_refuses_names_the_flag(capsys, argv, flag, expected):
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert flag in err and expected in err, err


def test_a_shape_the_precision_refuses_from_a_config_json_names_the_file_not_a_flag(capsys, tmp_path):
    config = json.loads(LLAMA3_8B_CONFIG.read_text(encoding="utf-8"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "intermediate_size": 14000}), encoding="utf-8")
    assert main(["plan", "--model-config", str(path), "--precision", "mxfp8"]) == 2
    err = capsys.readouterr().err
    assert f"--model-config {path}: its shape's ffn_hidden_size: got 14000" in err and "multiple of 32" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--price-per-hour", "nan"],
            "--price-per-hour: got 'nan', expected a positive number of USD per instance-hour",
        ),
        (["--price-per-hour", "0"], "--price-per-hour: got '0', expected a positive number of USD per instance-hour"),
        (["--tokens", "inf"], "--tokens: got 'inf', expected a positive number of training tokens (e.g. 1e12)"),
    ],
)
def test_each_budget_flag_states_its_own_expectation(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and expected in err
    assert argv[0] != "--price-per-hour" or "1e12" not in err


def test_inter_container_encryption_is_noted_for_a_multi_instance_job_only(capsys, make_input):
    """AWS: it "doesn't affect training jobs with a single compute instance"; on several its cost depends on the
    traffic between them, which the planner reports but does not turn into a figure AWS does not publish."""
    note = planner.plan.INTER_CONTAINER_ENCRYPTION_NOTE
    two = run_json(capsys, "--instance-count", "2", "--inter-container-encryption")
    assert note in two["notes"] and two["input"]["inter_container_encryption"] is True
    assert "reduce-scatters" in note and "train-encrypt.html" in note
    plain = run_json(capsys, "--instance-count", "2")
    assert note not in plain["notes"] and plain["input"]["inter_container_encryption"] is False
    assert note not in run_json(capsys, "--inter-container-encryption")["notes"]  # one instance
    # the figures are the same: the cost is noted, not modelled
    assert two["tokens_per_second"] == plain["tokens_per_second"]
    with pytest.raises(PlanInputError, match="inter_container_encryption"):
        estimate(make_input(inter_container_encryption="yes"))


def test_the_tables_show_inter_container_encryption_and_its_note_for_a_multi_instance_job(capsys):
    """``trainctl plan --inter-container-encryption`` without ``--json``: the configuration says the traffic is
    encrypted and the throughput table carries the planner's note (its figures leave the cost out); one instance
    shows the setting and no note, as AWS states it is unaffected."""

    def shown() -> str:  # what is printed, without the tables' borders and white space (rich folds long words)
        return "".join(re.sub(r"[\u2500-\u257f]", " ", capsys.readouterr().out).split())

    assert main(["plan", "--instance-count", "2", "--inter-container-encryption"]) == 0
    two = shown()
    assert "inter-containerencryption" in two
    assert "".join(planner.plan.INTER_CONTAINER_ENCRYPTION_NOTE.split()) in two
    assert main(["plan", "--inter-container-encryption"]) == 0
    one = shown()
    assert "inter-containerencryption" in one and "train-encrypt.html" not in one


HF_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.mark.parametrize("form", ["transformers-4", "transformers-5"])
@pytest.mark.parametrize("name", sorted(p.stem for p in HF_CONFIGS.glob("*.json")))
def test_plan_takes_each_published_config_in_both_forms_with_transformers_parameter_count(capsys, tmp_path, name, form):
    """Each family's published config.json as published (transformers 4 form) and as transformers 5 writes it;
    the count is the model transformers builds (tests/model_families/test_hf_architectures.py holds the two
    equal for every fixture)."""
    import copy

    import torch
    import transformers

    config = json.loads((HF_CONFIGS / f"{name}.json").read_text(encoding="utf-8"))
    hf_config = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    if form == "transformers-5":
        hf_config.save_pretrained(tmp_path)
        path = tmp_path / "config.json"
    else:
        path = HF_CONFIGS / f"{name}.json"
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(hf_config).parameters())
    d = run_json(capsys, "--model-config", str(path), *TRAINING)
    assert d["input"]["model"] == "llama" and d["model"]["num_params"] == expected
