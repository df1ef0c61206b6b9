"""``trainctl prepare-data --remote``'s pure parts: the CreateProcessingJob request (against botocore's sagemaker
model), the refusals before any job, the manifest over the parts, and the container entry point on one
instance's layout."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
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
    check_objects,
    complete,
    finish,
    merge_manifests,
    prepare_remote,
    processing_job_request,
    wait,
)
from training import processing
from training.data import DataError, TokenDataset
from training.prepare import prepare_data
from training.tokenizer_files import DataTokenizer, byte_level_tokenizer_json

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
    for split in ("train", "validation"):  # a part is no dataset until trainctl writes the manifest over the parts
        with pytest.raises(processing.DataError, match=r"no manifest.json over them.*--attach j\b"):
            TokenDataset(out / split)
    parts = [TokenDataset(out / split / "part-algo-2") for split in ("train", "validation")]
    assert sum(part.num_tokens for part in parts) == 8  # 3+1, 3+1
    part = json.loads((out / "train" / "part-algo-2" / "manifest.json").read_text())
    assert part["processing_job"] == "j" and part["split"] == "train"
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


def _parts(root: Path, hosts: tuple[str, ...], tokenizer: Path | None = None) -> None:
    """What a finished job on ``hosts`` leaves below ``root`` (no validation split): each host's part as the
    entry point writes it, stamped with the job's name (``processing._place``)."""
    for n, host in enumerate(hosts):
        corpus = root.parent / f"{host}.jsonl"
        corpus.write_text(f'{{"text": "document of {host}"}}\n{{"text": "another {n}"}}\n', encoding="utf-8")
        part = root / f"part-{host}"
        prepare_data(part, [corpus], tokenizer)
        (part / "tokenizer.json").unlink(missing_ok=True)
        manifest = json.loads((part / "manifest.json").read_text())
        (part / "manifest.json").write_text(json.dumps({**manifest, "processing_job": "prepare-data-1"}))


def test_the_trainer_refuses_parts_without_their_manifest_or_with_another(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    _parts(root, ("algo-1", "algo-2"))
    with pytest.raises(DataError, match=r"dataset holds the parts part-algo-1, part-algo-2 of processing job "):
        TokenDataset(root)  # a job that failed or was not finished: parts, no manifest over them
    with pytest.raises(DataError, match=r"--attach prepare-data-1\b"):
        TokenDataset(root)
    parts = [
        (f"part-{h}", json.loads((root / f"part-{h}" / "manifest.json").read_text())) for h in ("algo-1", "algo-2")
    ]
    (root / "manifest.json").write_text('{"parts": [["part-algo-1"]]}')  # malformed
    with pytest.raises(DataError, match=r"dataset/manifest.json: not the manifest over the parts"):
        TokenDataset(root)
    (root / "manifest.json").write_text(json.dumps(merge_manifests(parts)))
    assert TokenDataset(root).num_tokens == sum(m["num_tokens"] for _, m in parts)

    shutil.copytree(root / "part-algo-2", root / "part-algo-3")  # a part of another run copied in
    with pytest.raises(DataError, match=r"does not cover the parts .*\(extra part part-algo-3\)"):
        TokenDataset(root)
    shutil.rmtree(root / "part-algo-3")
    # two jobs into one output at once (both saw it empty): the second's part-algo-1 overwrote the first's
    # shards it also had and left the rest, which the manifest over the parts does not list
    for suffix in (".bin", ".json"):
        shutil.copy(root / "part-algo-1" / f"shard-00000{suffix}", root / "part-algo-1" / f"shard-00001{suffix}")
    with pytest.raises(DataError, match=r"does not cover the parts .*\(extra shard part-algo-1/shard-00001.bin\)"):
        TokenDataset(root)
    for suffix in (".bin", ".json"):
        (root / "part-algo-1" / f"shard-00001{suffix}").unlink()
    (root / "part-algo-2" / "manifest.json").unlink()  # a copy cut short
    with pytest.raises(DataError, match=r"missing part part-algo-2"):
        TokenDataset(root)
    shutil.rmtree(root / "part-algo-2")
    with pytest.raises(DataError, match=r"missing part part-algo-2, missing shard part-algo-2/shard-00000.bin"):
        TokenDataset(root)
    # a local preparation (no processing job) in folders of that name is a dataset of its own, as before
    local = tmp_path / "local"
    prepare_data(local / "part-a", [tmp_path / "algo-1.jsonl"])
    assert TokenDataset(local).num_tokens == TokenDataset(local / "part-a").num_tokens


@pytest.fixture
def s3() -> Iterator[Any]:
    """moto's in-process S3 (the conditional put: a 412 PreconditionFailed when the key is there)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
        client.create_bucket(Bucket="data")
        yield client


def _upload(s3: Any, local: Path, prefix: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.upload_file(str(path), "data", prefix + path.relative_to(local).as_posix())


def test_finish_writes_one_tokenizer_then_the_manifest_once(s3: Any, tmp_path: Path) -> None:
    tokenizer = tmp_path / "tok.json"
    tokenizer.write_text(byte_level_tokenizer_json(), encoding="utf-8")  # a tokenizer.json of a real tokenizer
    _parts(tmp_path / "out", ("algo-1", "algo-2"), tokenizer)
    _upload(s3, tmp_path / "out", "prepared/x/")
    data = tokenizer.read_bytes()

    with pytest.raises(LookupError, match="another tokenizer"):
        finish(s3, "data", "prepared/x/", 2, (None,), b"{}")
    with pytest.raises(LookupError, match="algo-3's part is not complete"):
        finish(s3, "data", "prepared/x/", 3, (None,), data)
    assert not s3.list_objects_v2(Bucket="data", Prefix="prepared/x/manifest").get("KeyCount")
    assert not s3.list_objects_v2(Bucket="data", Prefix="prepared/x/tokenizer").get("KeyCount")

    assert finish(s3, "data", "prepared/x/", 2, (None,), data) == {"prepared/x/": True}
    # a second --attach, at once or later: the same objects are there, it reports the dataset complete
    assert finish(s3, "data", "prepared/x/", 2, (None,), data) == {"prepared/x/": False}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="data", Prefix="prepared/x/")["Contents"]]
    assert [k for k in keys if k.endswith("tokenizer.json")] == ["prepared/x/tokenizer.json"]  # one per split
    assert s3.get_object(Bucket="data", Key="prepared/x/tokenizer.json")["Body"].read() == data

    dataset = tmp_path / "download"
    for key in keys:
        (dataset / key[len("prepared/x/") :]).parent.mkdir(parents=True, exist_ok=True)
        s3.download_file("data", key, str(dataset / key[len("prepared/x/") :]))
    found = DataTokenizer.of_dataset(TokenDataset(dataset))  # the export's lookup (by the shards' sha256)
    assert found.tokenizer_json == tokenizer.read_text(encoding="utf-8")

    s3.put_object(Bucket="data", Key="prepared/y/manifest.json", Body=b"{}")  # someone else's, not replaced
    _upload(s3, tmp_path / "out", "prepared/y/")
    with pytest.raises(LookupError, match=r"prepared/y/manifest.json is there and is not this job's"):
        finish(s3, "data", "prepared/y/", 2, (None,), data)
    assert s3.get_object(Bucket="data", Key="prepared/y/manifest.json")["Body"].read() == b"{}"


def test_an_output_holding_an_earlier_dataset_is_refused_naming_it(s3: Any) -> None:
    prep = RemotePreparation("s3://data/raw/", "s3://data/prepared/x/")
    s3.put_object(Bucket="data", Key="raw/a.jsonl", Body=b'{"text": "a"}\n')
    s3.put_object(Bucket="data", Key="prepared/x/part-algo-1/manifest.json", Body=b"{}")
    with pytest.raises(FieldError, match=r"an empty prefix \(it holds s3://data/prepared/x/part-algo-1/manifest"):
        check_objects(s3, prep, TARGETS, "raw/", "prepared/x/")
    s3.put_object(Bucket="data", Key="prepared/x/manifest.json", Body=b"{}")
    with pytest.raises(FieldError, match=r"the dataset of an earlier preparation, s3://data/prepared/x/manifest"):
        check_objects(s3, prep, TARGETS, "raw/", "prepared/x/")


class _Stand:
    """Stands in for SageMaker (StopProcessingJob is not emulated): DescribeProcessingJob answers ``statuses``
    in turn; the S3 client must not be used."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses
        job = processing_job_request("j", RemotePreparation("s3://data/raw/", "s3://data/prepared/x/"), TARGETS)
        self.job = json.loads(json.dumps(job))

    def client(self, service: str) -> Any:
        assert service == "sagemaker", f"{service} used for a job that did not complete"
        return self

    def describe_processing_job(self, ProcessingJobName: str) -> dict[str, Any]:
        return {**self.job, "ProcessingJobStatus": self.statuses.pop(0)}


def test_a_stopping_job_is_waited_for_and_a_stopped_one_gets_no_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    pauses: list[float] = []
    stand = _Stand(["InProgress", "Stopping", "Stopping", "Stopped"])
    assert wait(stand, "j", poll_s=1.0, sleep=pauses.append)["ProcessingJobStatus"] == "Stopped"
    assert pauses == [0.5, 1.0, 1.0]  # Stopping is not an end: polled through, doubling up to poll_s
    assert complete(_Stand(["Stopped"]), "j") == 1
    out = capsys.readouterr().out
    assert "processing job j Stopped: StopProcessingJob, or past its StoppingCondition.MaxRuntimeInSeconds" in out
    assert "has no manifest (incomplete: the trainer refuses it)" in out


class _Untouched:
    def client(self, name: str) -> Any:
        raise AssertionError(f"refused input reached AWS ({name})")


def test_a_tokenizer_the_job_would_refuse_is_refused_before_any_upload_or_job(tmp_path: Path) -> None:
    # Regression: only "is a file" was checked here; a tokenizer.json that is not JSON, or a --separator it
    # lacks, was uploaded and launched a job that failed on every instance
    prep = RemotePreparation("s3://data/raw/", "s3://data/prepared/x/")
    broken = tmp_path / "tokenizer.json"
    broken.write_text("<html>rate limited</html>", encoding="utf-8")
    with pytest.raises(FieldError, match=r"--tokenizer: got '.*tokenizer.json'; .*expected a Hugging Face tokenizer"):
        prepare_remote(prep, TARGETS, _Untouched(), tokenizer=broken)
    broken.write_text(byte_level_tokenizer_json(), encoding="utf-8")
    prep = RemotePreparation("s3://data/raw/", "s3://data/prepared/x/", separator="<eos>")
    with pytest.raises(FieldError, match=r"--tokenizer: .*has no token '<eos>' \(--separator\)"):
        prepare_remote(prep, TARGETS, _Untouched(), tokenizer=broken)
    with pytest.raises(FieldError, match=r"--separator: got '<eos>'; .*needs --tokenizer"):
        prepare_remote(prep, TARGETS, _Untouched())


def test_an_aws_error_is_one_line_naming_the_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: --attach with a job name that is not one (and any AccessDenied) ended in a botocore
    traceback; moto's SageMaker answers as SageMaker does."""
    from moto import mock_aws

    from trainctl.remote_prepare import prepare_remote_command

    for name, value in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        assert prepare_remote_command("s3://data/prepared/x/", [], attach="prepare-data-nosuch") == 1
    err = capsys.readouterr().err
    assert err.startswith("trainctl prepare-data --remote: DescribeProcessingJob answered ValidationException: ")
    assert "prepare-data-nosuch" in err and "Traceback" not in err
