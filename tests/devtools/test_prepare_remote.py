"""``trainctl prepare-data --remote`` against the emulator: a processing job on 2 instances (ShardedByS3Key) makes
the dataset the local ``prepare-data`` makes of the same files with the same tokenizer (the same documents'
tokens; the order of the documents is by part, then as read), the trainer opens it, the export finds its one
``tokenizer.json``, and bad input is refused before any job."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import DUMMY_CREDENTIALS
from trainctl.cli import main
from training.data import TokenDataset
from training.prepare import prepare_data
from training.tokenizer_files import DataTokenizer

pytestmark = pytest.mark.xdist_group("devtools-aws")

FILES = {
    "a.jsonl": [f"alpha document {i} " * (i + 1) for i in range(5)],
    "b.jsonl": ["beta one", "beta two, longer than the first"],
    "sub/c.jsonl": [f"gamma {i}" for i in range(3)],
}


@pytest.fixture
def admin_env(aws: LocalAws, monkeypatch: pytest.MonkeyPatch) -> LocalAws:
    """The emulator's environment with the account administrator's credentials (a person runs trainctl)."""
    for key, value in {**aws.env, **DUMMY_CREDENTIALS}.items():
        monkeypatch.setenv(key, value)
    return aws


def _tokenizer(path: Path) -> Path:
    """A small BPE trained on the test's documents, ``<|endoftext|>`` its separator (a real ``tokenizer.json``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = [text for texts in FILES.values() for text in texts]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet)
    )
    tok.save(str(path))
    return path


def _documents(tokens: np.ndarray, eod: int) -> list[tuple[int, ...]]:
    cuts = np.flatnonzero(tokens == eod)
    return sorted(tuple(int(t) for t in doc) for doc in np.split(tokens, cuts + 1) if doc.size)


def _download(s3: Any, bucket: str, prefix: str, local: Path) -> None:
    for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        target = local / item["Key"][len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, item["Key"], str(target))


def test_remote_preparation_equals_local(
    admin_env: LocalAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = admin_env
    s3 = aws.client("s3")
    bucket = aws.env["DATA_BUCKET"]
    run = uuid.uuid4().hex[:8]
    raw = tmp_path / "raw"
    for name, texts in FILES.items():
        path = raw / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        s3.upload_file(str(path), bucket, f"raw/{run}/{name}")
    output = f"prepared/{run}/"
    argv = ["prepare-data", "--remote", "--output", f"s3://{bucket}/{output}", f"s3://{bucket}/raw/{run}/"]
    tokenizer = _tokenizer(tmp_path / "bpe.json")

    assert main([*argv, "--instance-count", "4"]) == 2  # 3 files: refused before any job
    assert "--instance-count" in capsys.readouterr().err
    assert main(["prepare-data", "--remote", "--output", f"s3://{bucket}/elsewhere/", f"s3://{bucket}/raw/{run}/"]) == 2
    assert "prepared/NAME/" in capsys.readouterr().err
    assert not aws.calls("CreateProcessingJob")

    assert (
        main([*argv, "--instance-count", "2", "--shard-tokens", "16", "--tokenizer", str(tokenizer), "--no-wait"]) == 0
    )
    name = capsys.readouterr().out.strip()
    assert main(["prepare-data", "--remote", "--attach", name, "--output", f"s3://{bucket}/prepared/other/"]) == 2
    attach = ["prepare-data", "--remote", "--attach", name, "--output", f"s3://{bucket}/{output}"]
    assert main(attach) == 0  # waits for the job, then writes the manifest
    assert f"dataset s3://{bucket}/{output}" in capsys.readouterr().out
    first = s3.get_object(Bucket=bucket, Key=f"{output}manifest.json")["ETag"]
    assert main(attach) == 0  # again: the manifest is written once, the dataset reported complete
    assert s3.get_object(Bucket=bucket, Key=f"{output}manifest.json")["ETag"] == first
    assert "complete already" in capsys.readouterr().out

    remote = tmp_path / "remote"
    _download(s3, bucket, output, remote)
    manifest = json.loads((remote / "manifest.json").read_text())
    assert manifest["parts"] == ["part-algo-1", "part-algo-2"]
    assert all((remote / shard["file"]).is_file() for shard in manifest["shards"])
    local = prepare_data(tmp_path / "local", [raw], tokenizer, shard_tokens=16)
    dataset = TokenDataset(remote)  # the trainer's reader accepts the dataset as one channel
    # one tokenizer.json, beside the manifest, and the export's lookup (the shards' tokenizer_sha256) finds it
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("tokenizer.json")) == ["tokenizer.json"]
    assert DataTokenizer.of_dataset(dataset).tokenizer_json == tokenizer.read_text(encoding="utf-8")
    (remote / "manifest.json").rename(tmp_path / "manifest.json")
    with pytest.raises(ValueError, match=f"--attach {name}"):  # parts without the manifest: no training data
        TokenDataset(remote)
    (tmp_path / "manifest.json").rename(remote / "manifest.json")
    assert manifest["num_tokens"] == dataset.num_tokens == local.num_tokens
    assert manifest["num_documents"] == local.num_documents == sum(len(t) for t in FILES.values())
    eod = dataset.eod_token_id
    assert eod is not None
    remote_tokens = np.concatenate([np.asarray(t) for t in dataset.tokens])
    local_tokens = np.concatenate([np.asarray(t) for t in TokenDataset(local.output_dir).tokens])
    assert _documents(remote_tokens, eod) == _documents(local_tokens, eod)

    assert [c["params"]["ProcessingJobName"] for c in aws.calls("CreateProcessingJob")] == [name]
    writes = [g for g in aws.grants() if g["action"] == "s3:PutObject" and f"/{output}part-algo-" in g["resource"]]
    # the job wrote as its execution role, allowed by the statement that grants the prepared/ prefix
    assert writes and all(g["principal"].startswith("ExecutionRole") for g in writes)
    assert all("PreparedDatasets" in json.dumps(g["statements"]) for g in writes)
    assert main(argv) == 2  # the same request again: the dataset is there, nothing is overwritten
    assert "an empty prefix" in capsys.readouterr().err

    # a file the preparation refuses: the job fails naming it, and nothing reaches the output prefix
    s3.put_object(Bucket=bucket, Key=f"raw/{run}-bad/x.jsonl", Body=b'{"text": "fine"}\n[1, 2]\n')
    bad = [
        "prepare-data",
        "--remote",
        "--output",
        f"s3://{bucket}/prepared/{run}-bad/",
        f"s3://{bucket}/raw/{run}-bad/",
    ]
    assert main(bad) == 1
    assert "Failed: AlgorithmError: algo-1: " in capsys.readouterr().out
    assert not s3.list_objects_v2(Bucket=bucket, Prefix=f"prepared/{run}-bad/").get("Contents")
