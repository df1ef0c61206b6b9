"""trainctl prepare-data / train (the error path: validation happens before any worker starts)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainctl.cli import main


def test_prepare_data_python_docs(tmp_path: Path, capsys) -> None:
    assert main(["prepare-data", "--output", str(tmp_path / "shards"), "--python-docs"]) == 0
    header = json.loads((tmp_path / "shards" / "shard-00000.json").read_text())
    assert header["tokenizer"] == "byte-level" and header["num_tokens"] > 400_000
    assert "wrote 1 shard(s)" in capsys.readouterr().out
    assert main(["prepare-data", "--output", str(tmp_path / "x")]) == 2


def test_prepare_data_refuses_its_arguments_before_reading_anything(tmp_path: Path, capsys) -> None:
    """Regression: --output naming a file was a FileExistsError traceback, and --shard-tokens 0 meant the
    default; each is now one line naming the argument, exit status 2, nothing written."""
    text = tmp_path / "doc.txt"
    text.write_text("some text", encoding="utf-8")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for argv, expected in (
        (
            ["--output", str(a_file)],
            f"--output: got '{a_file}'; expected a folder path (created if missing) ({a_file} is a file)",
        ),
        (["--output", str(a_file / "shards")], f"({a_file} is a file)"),
        (["--output", str(tmp_path / "out"), "--shard-tokens", "0"], "--shard-tokens: got 0; expected an integer >= 2"),
    ):
        assert main(["prepare-data", *argv, str(text)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("trainctl prepare-data: ") and expected in err and err.count("\n") == 1, err
    assert a_file.read_text() == "x" and not (tmp_path / "out").exists()


def test_train_lays_out_opt_ml_and_reports_a_bad_precision(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    status = main(
        [
            "train",
            "--base-dir",
            str(base),
            "--python-docs",
            "--model",
            "gpt-tiny",
            "--precision",
            "nvfp4",
            "--batch-size",
            "2",
            "--json-quoted",
        ]
    )
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
    assert main(["train", "--base-dir", str(base), "--precision", "fp8"]) == 1
    assert "'precision': got 'fp8'" in (base / "output" / "failure").read_text()
    hp = json.loads((base / "input" / "config" / "hyperparameters.json").read_text())
    assert hp["model"] == "gpt-tiny" and hp["precision"] == "fp8" and hp["batch_size"] == "2"


def test_a_bad_hyperparameter_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch, capsys) -> None:
    """Regression: a mistyped flag was written to hyperparameters.json before the entry point refused it, so
    every later run of the base directory read it again (a half-done layout); a file as --base-dir, or
    --nproc 0, reached a traceback or the entry point's environment variable."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    assert main(["train", "--base-dir", str(base), "--synthetic-data", "true", "--batch-size", "abc"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "trainctl train: hyperparameter 'batch_size': got 'abc', expected an integer >= 1 and <= 4096 "
        "(from --batch-size; nothing was written)\n"
    )
    assert not base.exists()
    # a laid-out base directory keeps its hyperparameters.json as it was
    assert main(["train", "--base-dir", str(base), "--synthetic-data", "true", "--precision", "nvfp4"]) == 1
    config = base / "input" / "config" / "hyperparameters.json"
    before = config.read_text()
    capsys.readouterr()
    assert main(["train", "--base-dir", str(base), "--max-steps", "10"]) == 2  # warmup_steps' default is 100
    err = capsys.readouterr().err
    assert "'warmup_steps': got 100, expected <= max_steps (10)" in err and "nothing was written" in err
    assert config.read_text() == before
    config.write_text(json.dumps({**json.loads(before), "seq_length": "0"}))  # an earlier file's own bad value
    assert main(["train", "--base-dir", str(base)]) == 2
    assert f"(from the previous run's {config}; nothing was written)" in capsys.readouterr().err
    # where it writes, and how many processes: one line naming the argument, nothing started
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for argv, expected in (
        (["--base-dir", str(a_file / "run")], f"--base-dir: got '{a_file / 'run'}'; expected a folder path"),
        (["--base-dir", str(a_file)], f"({a_file} is a file)"),
        (["--base-dir", str(tmp_path / "new"), "--nproc", "0"], "--nproc: got 0; expected an integer >= 1"),
    ):
        assert main(["train", *argv, "--synthetic-data", "true"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("trainctl train: ") and expected in err and err.count("\n") == 1, err
    assert a_file.read_text() == "x" and not (tmp_path / "new").exists()


def test_train_takes_its_base_dir_from_sagemaker_base_dir_once(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SAGEMAKER_BASE_DIR", raising=False)
    assert main(["train", "--synthetic-data", "true"]) == 2
    assert "no base directory: give --base-dir DIR or set SAGEMAKER_BASE_DIR" in capsys.readouterr().err
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", "jobs/ml")  # relative, as the container would read it
    status = main(["train", "--synthetic-data", "true", "--model", "gpt-tiny", "--precision", "nvfp4"])
    assert status == 1
    # validation read the layout trainctl wrote, and the failure landed in the same folder
    failure = (tmp_path / "jobs" / "ml" / "output" / "failure").read_text()
    assert failure.strip() == (
        "hyperparameter 'precision': got 'nvfp4', expected one of fp32, bf16 on a host without GPUs "
        "(nvfp4 needs an NVIDIA GPU)"
    )


def test_train_never_removes_the_data_it_is_given(tmp_path: Path, monkeypatch, capsys, pydocs_shards: Path) -> None:
    """Regression: --data BASE/input/data/train deleted the shards and linked the folder to itself."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    train = base / "input" / "data" / "train"
    shutil.copytree(pydocs_shards, train)
    shards = sorted(p.name for p in train.iterdir())
    flags = ["--model", "gpt-tiny", "--precision", "nvfp4"]  # fails validation, after the layout
    assert main(["train", "--base-dir", str(base), "--data", str(train), *flags]) == 1
    assert "'precision': got 'nvfp4'" in (base / "output" / "failure").read_text()  # the data was found and read
    assert train.is_dir() and not train.is_symlink() and sorted(p.name for p in train.iterdir()) == shards
    capsys.readouterr()
    other = tmp_path / "other"
    shutil.copytree(pydocs_shards, other)
    assert main(["train", "--base-dir", str(base), "--data", str(other), *flags]) == 2  # a real folder in the way
    err = capsys.readouterr().err
    assert f"{train} is a folder of its own" in err and f"--data {train}" in err
    assert not train.is_symlink() and sorted(p.name for p in train.iterdir()) == shards


def test_a_malformed_earlier_hyperparameters_file_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    """Regression: a raw JSONDecodeError traceback."""
    config = tmp_path / "run" / "input" / "config"
    config.mkdir(parents=True)
    previous = config / "hyperparameters.json"
    for text, detail in (
        ('{"model": "gpt-tiny",', "not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ('["gpt-tiny"]', "a JSON list, expected an object of names to values"),
        ("\udcff".encode("utf-8", "surrogateescape").decode("latin-1"), "not valid JSON"),
    ):
        previous.write_text(text, encoding="latin-1")
        assert main(["train", "--base-dir", str(tmp_path / "run"), "--synthetic-data", "true"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"trainctl train: {previous}: the previous run's hyperparameters are {detail}"), err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "fix the file, or remove it" in err
        assert previous.read_text(encoding="latin-1") == text  # left as it was
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["input"]  # nothing else written


def test_python_docs_checks_the_layout_before_writing_anything(tmp_path: Path, monkeypatch, capsys) -> None:
    """Regression: --python-docs wrote <base>/prepared/ before the layout was refused."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    train = base / "input" / "data" / "train"
    train.mkdir(parents=True)
    (train / "mine.txt").write_text("theirs")
    assert main(["train", "--base-dir", str(base), "--python-docs", "--model", "gpt-tiny"]) == 2
    err = capsys.readouterr().err
    assert f"{train} is a folder of its own" in err
    assert sorted(p.relative_to(base).as_posix() for p in base.rglob("*")) == [
        "input",
        "input/data",
        "input/data/train",
        "input/data/train/mine.txt",
    ]  # no prepared/, no config


def test_a_run_that_trains_no_step_prints_no_loss_of_an_earlier_run(tmp_path: Path, monkeypatch, capsys) -> None:
    # metrics.jsonl keeps every run's records: the summary is this run's, and this run fails before its first step
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tmp_path / "run"
    earlier = base / "output" / "data" / "metrics.jsonl"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps({"step": 1, "loss": 6.3}) + "\n" + json.dumps({"step": 6, "loss": 5.1}) + "\n")
    argv = ["train", "--base-dir", str(base), "--python-docs", "--model", "gpt-tiny", "--precision", "nvfp4"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "failed (exit 1)" in captured.err
    assert "loss" not in captured.out + captured.err
