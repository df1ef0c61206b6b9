"""``trainctl prepare-data --remote``'s pure parts: the CreateProcessingJob request (against botocore's sagemaker
model), the refusals before any job, the manifest over the parts, and the container entry point on one
instance's layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from platform_spec.errors import FieldError
from platform_spec.processing import INSTANCE_TYPES
from trainctl.remote_prepare import (
    ProcessingTargets,
    RemotePreparation,
    check,
    merge_manifests,
    processing_job_request,
)
from training import processing
from training.data import TokenDataset

TARGETS = ProcessingTargets(
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:abc",
    "arn:aws:iam::123456789012:role/exec",
    "data",
    "arn:aws:kms:us-east-1:123456789012:key/k",
    ("subnet-1", "subnet-2"),
    ("sg-1",),
)
SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")


def test_the_request_is_valid_for_botocore_and_shards_by_key_over_n_instances() -> None:
    prep = RemotePreparation("s3://data/raw/", "s3://data/prepared/x/", instance_count=3, validation_fraction=0.1)
    request = processing_job_request("prepare-data-1", prep, TARGETS, "s3://data/prepared/.tokenizers/h/")
    shape = SAGEMAKER.operation_model("CreateProcessingJob").input_shape
    report = ParamValidator().validate(request, shape)
    assert not report.has_errors(), report.generate_report()
    data, tokenizer = request["ProcessingInputs"]
    assert data["S3Input"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert tokenizer["S3Input"]["S3DataDistributionType"] == "FullyReplicated"
    assert request["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 3
    assert request["NetworkConfig"]["VpcConfig"] == {"Subnets": ["subnet-1", "subnet-2"], "SecurityGroupIds": ["sg-1"]}
    assert request["AppSpecification"]["ContainerArguments"][-2:] == ["--validation-fraction", "0.1"]
    assert request["ProcessingOutputConfig"]["KmsKeyId"] == TARGETS.kms_key_arn
    no_vpc = ProcessingTargets(TARGETS.image_uri, TARGETS.role_arn, "data", TARGETS.kms_key_arn)
    assert "NetworkConfig" not in processing_job_request("n", prep, no_vpc)


def test_every_instance_type_is_a_processing_instance_type() -> None:
    enum = SAGEMAKER.shape_for("ProcessingInstanceType").enum
    assert set(INSTANCE_TYPES) <= set(enum)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"source": "s3://other/raw/"}, "input"),
        ({"source": "/local/raw"}, "input"),
        ({"output": "s3://data/datasets/x/"}, "--output"),
        ({"output": "s3://data/prepared/"}, "--output"),
        ({"output": "s3://other/prepared/x/"}, "--output"),
        ({"source": "s3://data/prepared/", "output": "s3://data/prepared/x/"}, "--output"),
        ({"instance_type": "ml.p5.48xlarge"}, "--instance-type"),
        ({"instance_count": 0}, "--instance-count"),
        ({"validation_fraction": 1.0}, "--validation-fraction"),
        ({"shard_tokens": 1}, "--shard-tokens"),
    ],
)
def test_bad_input_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    fields: dict[str, Any] = {"source": "s3://data/raw/", "output": "s3://data/prepared/x/", **change}
    with pytest.raises(FieldError) as info:
        check(RemotePreparation(**fields), TARGETS)
    assert info.value.field == field


def _part(file: str, tokens: int, docs: int, **extra: Any) -> dict[str, Any]:
    base = {"shards": [{"file": file, "num_tokens": tokens}], "num_tokens": tokens, "num_documents": docs}
    base.update({"dtype": "uint16", "vocab_size": 257, "eod_token_id": 256, "tokenizer": "byte", "sources": ["a"]})
    return {**base, **extra}


def test_the_manifest_lists_every_part_and_refuses_parts_of_another_tokenizer() -> None:
    merged = merge_manifests(
        [("part-algo-1", _part("shard-00000.bin", 10, 2)), ("part-algo-2", _part("shard-00000.bin", 5, 1))]
    )
    assert [s["file"] for s in merged["shards"]] == ["part-algo-1/shard-00000.bin", "part-algo-2/shard-00000.bin"]
    assert (merged["num_tokens"], merged["num_documents"]) == (15, 3)
    with pytest.raises(ValueError, match="tokenizer"):
        merge_manifests([("part-algo-1", _part("s.bin", 1, 1)), ("part-algo-2", _part("s.bin", 1, 1, tokenizer="hf"))])


def _instance(base: Path, host: str, files: dict[str, str]) -> None:
    job = json.loads(
        json.dumps(processing_job_request("j", RemotePreparation("s3://data/r/", "s3://data/prepared/x/"), TARGETS))
    )
    (base / "config").mkdir(parents=True)
    (base / "config" / "processingjobconfig.json").write_text(json.dumps(job))
    (base / "config" / "resourceconfig.json").write_text(
        json.dumps({"current_host": host, "hosts": ["algo-1", "algo-2"]})
    )
    for name, text in files.items():
        path = base / "processing" / "input" / "data" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_entry_point_writes_its_part_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "opt_ml"
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(base))
    _instance(base, "algo-2", {"a.jsonl": '{"text": "one"}\n{"text": "two"}\n'})
    processing.run(["--validation-fraction", "0.5", "--seed", "3"])
    out = base / "processing" / "output"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("manifest.json")) == [
        "train/part-algo-2/manifest.json",
        "validation/part-algo-2/manifest.json",
    ]
    assert TokenDataset(out / "train").num_tokens + TokenDataset(out / "validation").num_tokens == 8  # 3+1, 3+1
    with pytest.raises(processing.DataError, match="held-out validation split"):
        TokenDataset(out)  # the whole output is not a training channel: it holds the held-out part
    assert sorted(p.name for p in out.parent.iterdir()) == ["input", "output"]  # the work folder is gone
    with pytest.raises(processing.DataError, match="exists"):  # the same host again: its part stays as it was
        processing.run(["--validation-fraction", "0.5", "--seed", "3"])

    broken = tmp_path / "broken"
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(broken))
    _instance(broken, "algo-1", {"a.jsonl": '{"text": "one"}\n[1, 2]\n'})
    assert processing.main([]) == 2
    assert not any((broken / "processing" / "output").iterdir())
