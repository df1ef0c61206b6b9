"""trainctl prepare-data / train (the error path: validation happens before any worker starts)."""

from __future__ import annotations

import json
from pathlib import Path

from trainctl.cli import main


def test_prepare_data_python_docs(tmp_path: Path, capsys) -> None:
    assert main(["prepare-data", "--output", str(tmp_path / "shards"), "--python-docs"]) == 0
    header = json.loads((tmp_path / "shards" / "shard-00000.json").read_text())
    assert header["tokenizer"] == "byte-level" and header["num_tokens"] > 400_000
    assert "wrote 1 shard(s)" in capsys.readouterr().out
    assert main(["prepare-data", "--output", str(tmp_path / "x")]) == 2


def test_train_lays_out_opt_ml_and_reports_a_bad_precision(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    status = main(["train", "--base-dir", str(base), "--python-docs", "--model", "gpt-tiny", "--precision", "nvfp4",
                   "--batch-size", "2", "--json-quoted"])
    assert status == 1
    hp = json.loads((base / "input" / "config" / "hyperparameters.json").read_text())
    assert hp == {"model": '"gpt-tiny"', "precision": '"nvfp4"', "batch_size": '"2"'}
    assert json.loads((base / "input" / "config" / "resourceconfig.json").read_text())["hosts"] == ["algo-1"]
    assert "train" in json.loads((base / "input" / "config" / "inputdataconfig.json").read_text())
    assert any((base / "input" / "data" / "train").glob("shard-*.bin"))
    failure = (base / "output" / "failure").read_text()
    assert "'precision': got 'nvfp4'" in failure
    assert "failed (exit 1)" in capsys.readouterr().err
    # a second call without flags reuses the previous hyperparameters (resume-friendly)
    assert main(["train", "--base-dir", str(base), "--precision", "fp32", "--batch-size", "-1"]) == 1
    assert "'batch_size': got '-1'" in (base / "output" / "failure").read_text()
    hp = json.loads((base / "input" / "config" / "hyperparameters.json").read_text())
    assert hp["model"] == "gpt-tiny" and hp["precision"] == "fp32"
