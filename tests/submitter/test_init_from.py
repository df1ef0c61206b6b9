"""Starting from Hugging Face weights through the submitter, against the emulator: the folder's config.json (written
by transformers, the pinned oracle) is the job's shape, read from S3 as the submitter's role before anything is
created; every refusal names its field and creates no job."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save

from platform_constructs.submitter.runtime.init_from import CONFIG_MAX_BYTES
from platform_spec.hyperparameters import HF_CONFIG_FILE, HF_INDEX_FILE, HF_WEIGHTS_FILE, INIT_CHANNEL

pytestmark = pytest.mark.xdist_group("submitter")

TRAINING = {"precision": "bf16", "batch_size": 1, "seq_length": 256}


def _transformers_config(**changes: Any) -> dict[str, Any]:
    """A tiny Llama's config.json as transformers writes it (``save_pretrained``: the transformers 5 form)."""
    from transformers import LlamaConfig

    with tempfile.TemporaryDirectory() as folder:
        shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "intermediate_size": 128, "vocab_size": 512, **changes}  # fmt: skip
        LlamaConfig(**shape).save_pretrained(folder)
        config: dict[str, Any] = json.loads((Path(folder) / HF_CONFIG_FILE).read_text(encoding="utf-8"))
        return config


@pytest.fixture(scope="module")
def hf_config() -> dict[str, Any]:
    return _transformers_config()


@pytest.fixture
def folder(aws, config, hf_config):
    """``folder(name, files)`` uploads a model folder under ``models/<name>/`` of the data bucket (``files``: name
    -> bytes; default: config.json and a single-file safetensors) and returns its key prefix."""
    s3 = aws.client("s3")

    def _folder(name: str, files: dict[str, bytes] | None = None) -> str:
        prefix = f"models/{name}/"
        if files is None:
            weights = save({"model.embed_tokens.weight": np.zeros((2, 2), np.float32)})
            files = {HF_CONFIG_FILE: json.dumps(hf_config).encode(), HF_WEIGHTS_FILE: weights}
        for file, body in files.items():
            s3.put_object(Bucket=config.data_bucket, Key=prefix + file, Body=body)
        return prefix

    return _folder


def _request(make_request, prefix: str, **overrides: Any) -> dict[str, Any]:
    inputs = {"train": "datasets/guide/train/", INIT_CHANNEL: prefix}
    return make_request(**{"hyperparameters": dict(TRAINING), "inputs": inputs, **overrides})


def test_the_folders_config_is_the_jobs_shape_and_the_folder_its_channel(
    aws, submit, make_request, folder, config, hf_config
):
    request = _request(make_request, folder("tiny-llama"))
    response = submit(request)
    assert response["status"] == "submitted", response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    hp = job["HyperParameters"]
    assert {k: hp[k] for k in ("model", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                               "vocab_size", "rope_base", "tied_embeddings", "norm_eps")} == {
        "model": "llama", "num_layers": "2", "hidden_size": "64", "num_heads": "4", "num_kv_heads": "2",
        "ffn_hidden_size": "128", "vocab_size": "512", "rope_base": "10000.0", "tied_embeddings": "false",
        "norm_eps": "1e-06",
    }  # fmt: skip
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
    assert channels[INIT_CHANNEL] == f"s3://{config.data_bucket}/models/tiny-llama/"
    # the same request again is the same job; with the same model_config sent beside it too
    assert submit(request)["replayed"] is True
    again = submit({**request, "model_config": hf_config})
    assert again["replayed"] is True and again["training_job_name"] == response["training_job_name"], again
    # the object changed shape between two sends: another job, so the same token is a Conflict
    folder("tiny-llama", {HF_CONFIG_FILE: json.dumps(_transformers_config(num_hidden_layers=4)).encode()})
    changed = submit(request)
    assert changed["status"] == "rejected" and changed["error"]["code"] == "Conflict", changed


def test_sharded_weights_are_found_by_their_index(aws, submit, make_request, folder, hf_config):
    files = {HF_CONFIG_FILE: json.dumps(hf_config).encode(), HF_INDEX_FILE: b'{"weight_map": {}}'}
    response = submit(_request(make_request, folder("sharded", files), dry_run=True))
    assert response["status"] == "validated", response
    assert response["create_training_job"]["HyperParameters"]["num_layers"] == "2"


def test_refusals_name_the_field_and_create_nothing(aws, submit, make_request, folder, hf_config, config):
    runtime_max = CONFIG_MAX_BYTES
    weights = {HF_WEIGHTS_FILE: b"x"}
    data = f"s3://{config.data_bucket}/models"
    cases = [
        (_request(make_request, folder("a"), model_config={**hf_config, "num_hidden_layers": 3}), "model_config",
         f"the shape of {data}/a/config.json (inputs.init_from), which has num_layers 2"),
        (_request(make_request, folder("a"), hyperparameters={**TRAINING, "num_layers": 3}), "hyperparameters.num_layers",
         f"no value: {data}/a/config.json (inputs.init_from) sets the model's shape"),
        (_request(make_request, folder("none", weights)), "inputs.init_from",
         f"got '{data}/none/config.json', expected a Hugging Face model folder (what save_pretrained writes) with a "
         "config.json (none there"),
        (_request(make_request, folder("big", {**weights, HF_CONFIG_FILE: b" " * (runtime_max + 1)})),
         "inputs.init_from", f"a config.json of at most {runtime_max} bytes; it has {runtime_max + 1}"),
        (_request(make_request, folder("text", {**weights, HF_CONFIG_FILE: b"model_type: llama"})),
         "inputs.init_from", "a config.json that is a JSON object (Expecting value"),
        (_request(make_request, folder("list", {**weights, HF_CONFIG_FILE: b"[1]"})),
         "inputs.init_from", "a config.json that is a JSON object, not list"),
        (_request(make_request, folder("deep", {**weights, HF_CONFIG_FILE: b"[" * 100_000 + b"]" * 100_000})),
         "inputs.init_from", "a config.json that is a JSON object (nested too deeply to read)"),
        (_request(make_request, folder("yarn", {**weights, HF_CONFIG_FILE: json.dumps(
            {**hf_config, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}).encode()})),
         "inputs.init_from", "a config.json of a model the trainer runs: rope_parameters.rope_type"),
        (_request(make_request, folder("noweights", {HF_CONFIG_FILE: json.dumps(hf_config).encode()})),
         "inputs.init_from", f"weights: {HF_INDEX_FILE} or {HF_WEIGHTS_FILE}"),
        (_request(make_request, folder("a"), hyperparameters={**TRAINING, "precision": "mxfp8"},
                  instance_type="ml.p5.48xlarge"), "hyperparameters.precision", "a precision H100"),
    ]  # fmt: skip
    aws.clear_calls()
    for request, field, expected in cases:
        response = submit(request)
        assert response["status"] == "rejected", (field, response)
        assert response["error"]["field"] == field and expected in response["error"]["message"], response["error"]
    assert aws.calls("CreateTrainingJob") == []


def test_the_read_is_bounded_by_the_deadline(aws, runtime, clients, config, make_request, folder):
    request = _request(make_request, folder("tiny-llama"))
    aws.clear_calls()
    with pytest.raises(runtime.errors.DeadlineExceeded) as raised:
        runtime.service.submit(request, clients=clients, config=config, deadline=runtime.aws.Deadline(-1.0))
    assert raised.value.operation == "s3.GetObject" and aws.calls() == []


def test_the_submitters_role_reads_a_folders_config_and_weights_headers_only(aws, config, folder):
    """The emulator authorizes as AWS against the synthesized template (ModelFoldersRead): the submitter may read
    config.json and head the weights anywhere in the data bucket, and read nothing else there."""
    import botocore.exceptions

    prefix = folder("tiny-llama", None)
    folder("tiny-llama", {"tokenizer.json": b"{}"})
    s3 = aws.client("s3", access_key=aws.env["AWS_ACCESS_KEY_ID"])  # the submitter's role
    assert json.loads(s3.get_object(Bucket=config.data_bucket, Key=prefix + HF_CONFIG_FILE)["Body"].read())
    s3.head_object(Bucket=config.data_bucket, Key=prefix + HF_WEIGHTS_FILE)
    for key in (prefix + "tokenizer.json", "datasets/guide/train/shard-00000.bin"):
        with pytest.raises(botocore.exceptions.ClientError) as denied:
            s3.get_object(Bucket=config.data_bucket, Key=key)
        assert denied.value.response["Error"]["Code"] == "AccessDenied", key
