"""Model shapes through the submitter, against the `trainctl local-aws` emulator over HTTP: a preset, shape
hyperparameters and a Hugging Face ``config.json`` (the ``model_config`` field) become the job's
hyperparameters; a shape the trainer's family rule refuses is refused before ``CreateTrainingJob``, naming
the field, and creates nothing.

``tests/fixtures/llama3_8b_config.json`` is Meta-Llama-3-8B's published Hugging Face configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_spec.hyperparameters import model_shape, parse

pytestmark = pytest.mark.xdist_group("submitter")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LLAMA3_8B_CONFIG = json.loads((FIXTURES / "llama3_8b_config.json").read_text(encoding="utf-8"))
QWEN25_7B_CONFIG = json.loads((FIXTURES / "hf_configs" / "Qwen2.5-7B.json").read_text(encoding="utf-8"))
QWEN3_8B_CONFIG = json.loads((FIXTURES / "hf_configs" / "Qwen3-8B.json").read_text(encoding="utf-8"))
MISTRAL_7B_CONFIG = json.loads((FIXTURES / "hf_configs" / "Mistral-7B-v0.3.json").read_text(encoding="utf-8"))
TRAINING = {"precision": "bf16", "batch_size": 1, "seq_length": 2048, "activation_checkpointing": "full"}


def test_a_hugging_face_config_becomes_the_jobs_shape(aws, submit, make_request) -> None:
    response = submit(make_request(model_config=LLAMA3_8B_CONFIG, hyperparameters=dict(TRAINING)))
    assert response["status"] == "submitted", response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    hp = job["HyperParameters"]
    assert {k: hp[k] for k in ("model", "num_layers", "hidden_size", "num_heads", "num_kv_heads")} == {
        "model": "llama", "num_layers": "32", "hidden_size": "4096", "num_heads": "32", "num_kv_heads": "8",
    }  # fmt: skip
    assert (hp["ffn_hidden_size"], hp["vocab_size"], hp["rope_base"], hp["tied_embeddings"], hp["norm_eps"]) == (
        "14336", "128256", "500000.0", "false", "1e-05",
    )  # fmt: skip
    # what the trainer parses from the job is Meta's 8B shape (8.03B parameters)
    assert model_shape(parse(hp)).num_params == 8_030_261_248
    assert response["estimate"]["fits"] is True and response["training_job_name"].startswith("job-")


@pytest.mark.parametrize(
    ("hf_config", "option", "value"),
    [
        (QWEN25_7B_CONFIG, "qkv_bias", "true"),
        (QWEN3_8B_CONFIG, "qk_norm", "true"),
        ({**MISTRAL_7B_CONFIG, "sliding_window": 4096}, "sliding_window", "4096"),  # MistralConfig's default
    ],
)
def test_a_bf16_config_with_an_option_is_accepted_and_the_job_carries_it(
    aws, submit, make_request, hf_config, option, value
) -> None:
    """bf16 Qwen jobs are accepted: the trainer builds them on its torch-native blocks, even where
    TransformerEngine imports (tests/model_families/test_llama_blocks.py); a Mistral window of at least
    seq_length never binds."""
    response = submit(make_request(model_config=hf_config, hyperparameters=dict(TRAINING)))
    assert response["status"] == "submitted", response
    hp = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])["HyperParameters"]
    assert hp[option] == value and hp["precision"] == "bf16"


def test_the_llama3_8b_preset_and_shape_hyperparameters_are_accepted(aws, submit, make_request) -> None:
    response = submit(make_request(hyperparameters={**TRAINING, "model": "llama3-8b", "num_layers": 16}))
    assert response["status"] == "submitted", response
    hp = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])["HyperParameters"]
    assert (hp["model"], hp["num_layers"]) == ("llama3-8b", "16") and "num_kv_heads" not in hp


def test_the_same_shape_from_two_files_is_one_job(aws, submit, make_request) -> None:
    """The fingerprint hashes the shape a config.json maps to: keys read as information only (token ids)
    and number spellings do not make another job; a shape change is a Conflict."""
    first = make_request(model_config=LLAMA3_8B_CONFIG, hyperparameters=dict(TRAINING))
    assert submit(first)["status"] == "submitted"
    same = {**LLAMA3_8B_CONFIG, "bos_token_id": 1, "rope_theta": 500000, "transformers_version": "4.45.0"}
    again = submit({**first, "model_config": same})
    assert again["status"] == "submitted" and again["replayed"] is True, again
    other = submit({**first, "model_config": {**LLAMA3_8B_CONFIG, "num_hidden_layers": 16}})
    assert other["status"] == "rejected" and other["error"]["code"] == "Conflict", other


def test_a_model_config_request_keeps_the_fingerprint_the_deployed_release_gave_it(runtime, local_config) -> None:
    """Fingerprint version 2 as commit ad66d5e (the release before the Llama family's head_dim, biases, Q/K
    norm, RoPE scaling and sliding window) computed it for this request, so a retry straddling the upgrade is
    the job it created; a shape the new fields change is another job."""
    request = {"client_token": "t", "instance_type": "ml.p6-b200.48xlarge", "instance_count": 1,
               "capacity": "on-demand", "hyperparameters": dict(TRAINING), "model_config": LLAMA3_8B_CONFIG,
               "inputs": {"train": "datasets/guide/train/"}, "max_runtime_hours": 24}  # fmt: skip
    sent = runtime.request.parse_request(request, local_config)
    assert sent.fingerprint() == "559c1a063d7fe16591afdda984a21a06e8b32b73330512b4503ea640f19c006a"
    llama = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k not in ("attention_bias", "mlp_bias", "pretraining_tp")}
    qwen2 = {**llama, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}  # Q/K/V biases
    for config in (
        qwen2,
        {**LLAMA3_8B_CONFIG, "head_dim": 64},
        {**llama, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 8192},
    ):
        other = runtime.request.parse_request({**request, "model_config": config}, local_config)
        assert other.fingerprint() != sent.fingerprint(), config


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        ({"hyperparameters": {"num_kv_heads": 8}}, "hyperparameters.num_kv_heads", "model family 'gpt' has no num_kv_heads"),
        ({"hyperparameters": {"model": "llama3-8b", "num_kv_heads": 5}}, "hyperparameters.num_kv_heads",
         "a divisor of num_heads (32)"),
        ({"hyperparameters": {"model": "llama3-8b", "ffn_hidden_size": 14000, "precision": "mxfp8"}},
         "hyperparameters.ffn_hidden_size", "a multiple of 32 for precision mxfp8"),
        ({"hyperparameters": {"model": "gpt-1b", "model_family": "llama"}}, "hyperparameters.model_family",
         "'gpt', the family of model 'gpt-1b'"),
        ({"hyperparameters": {"model_family": "llama", "num_layers": 2}}, "hyperparameters.hidden_size",
         "custom llama shape, which needs"),
        ({"model_config": {**LLAMA3_8B_CONFIG, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}},
         "model_config.rope_scaling.rope_type", "'default' or 'llama3'"),
        ({"model_config": {**LLAMA3_8B_CONFIG, "hidden_act": "gelu"}}, "model_config.hidden_act", "'silu'"),
        ({"model_config": {**LLAMA3_8B_CONFIG, "model_type": "gpt2"}}, "model_config.model_type", "llama"),
        ({"model_config": ["not", "an", "object"]}, "model_config", "a JSON object"),
        # an empty object is no config.json (it once was read as absent: the job trained the default model)
        ({"model_config": {}}, "model_config.model_type", "llama"),
        ({"model_config": LLAMA3_8B_CONFIG, "hyperparameters": {**TRAINING, "num_layers": 2}},
         "hyperparameters.num_layers", "model_config sets the model's shape"),
        ({"model_config": LLAMA3_8B_CONFIG, "hyperparameters": {**TRAINING, "model": "llama3-8b"}},
         "hyperparameters.model", "model_config sets the model's shape"),
        ({"model_config": {**LLAMA3_8B_CONFIG, "intermediate_size": 14000}, "hyperparameters": {"precision": "mxfp8"}},
         "model_config", "ffn_hidden_size a value making ffn_hidden_size (14000) a multiple of 32"),
        # the TransformerEngine recipes run in blocks that build no Q/K/V-only bias (Qwen2) or Q/K norm (Qwen3)
        ({"model_config": QWEN25_7B_CONFIG, "hyperparameters": {**TRAINING, "precision": "fp8"}},
         "model_config", "qkv_bias"),
        ({"model_config": QWEN3_8B_CONFIG, "hyperparameters": {**TRAINING, "precision": "nvfp4"}},
         "model_config", "qk_norm"),
        ({"hyperparameters": {**TRAINING, "model": "llama3-8b", "qk_norm": True, "precision": "mxfp8"}},
         "hyperparameters.qk_norm", "false with precision mxfp8"),
        # a Mistral window shorter than the sequence binds: the blocks compute full causal attention only
        ({"model_config": {**MISTRAL_7B_CONFIG, "sliding_window": 1024}, "hyperparameters": TRAINING},
         "model_config", "seq_length 2048: sliding_window at least seq_length (2048)"),
    ],
)  # fmt: skip
def test_a_shape_the_trainer_refuses_is_refused_before_create_training_job(
    aws, submit, make_request, overrides, field, expected
) -> None:
    aws.clear_calls()
    response = submit(make_request(**overrides))
    assert response["status"] == "rejected", response
    assert response["error"]["code"] == "InvalidRequest"
    assert response["error"]["field"] == field and expected in response["error"]["message"], response["error"]
    assert aws.calls("CreateTrainingJob") == []
