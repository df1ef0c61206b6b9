"""The container contract: config files, SM_HP_* variables, validation before launch, failure file."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from training import entrypoint
from training.environment import (
    FAILURE_REASON_LIMIT,
    ConfigError,
    SageMakerPaths,
    capacity_block_deadline,
    load_hyperparameters,
    one_line,
    write_failure,
)
from training.local import prepare_base_dir, read_failure

REPO = Path(__file__).resolve().parents[2]
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # validate as on a CPU host, whatever this machine has


def _env(base: Path, **extra: str) -> dict[str, str]:
    return {"SAGEMAKER_BASE_DIR": str(base), "PATH": os.environ.get("PATH", ""), **NO_GPU, **extra}


def test_quoted_and_unquoted_hyperparameters_parse_the_same(tmp_path: Path) -> None:
    values = {"model": "gpt-tiny", "precision": "bf16", "batch_size": 4, "learning_rate": 1e-3, "reshard_after_forward": False}
    plain = prepare_base_dir(tmp_path / "plain", values)
    quoted = prepare_base_dir(tmp_path / "quoted", values, json_quoted=True)
    raw = json.loads(quoted.hyperparameters_file.read_text())
    assert raw["precision"] == '"bf16"' and raw["batch_size"] == '"4"'  # what older SDKs send
    a, b = load_hyperparameters(plain, {}), load_hyperparameters(quoted, {})
    assert a == b
    assert (a.model, a.precision, a.batch_size, a.learning_rate, a.reshard_after_forward) == ("gpt-tiny", "bf16", 4, 1e-3, False)


def test_sm_hp_variables_override_the_file_and_work_alone(tmp_path: Path) -> None:
    paths = prepare_base_dir(tmp_path / "b", {"precision": "bf16", "seq_length": "128"})
    hp = load_hyperparameters(paths, {"SM_HP_SEQ_LENGTH": "256", "SM_HP_NUM_LAYERS": "2", "OTHER": "x"})
    assert (hp.precision, hp.seq_length, hp.num_layers) == ("bf16", 256, 2)
    alone = load_hyperparameters(SageMakerPaths(tmp_path / "none"), {"SM_HP_PRECISION": "fp32", "SM_HP_BATCH_SIZE": "3"})
    assert (alone.precision, alone.batch_size) == ("fp32", 3)


@pytest.mark.parametrize(
    ("values", "channel", "expected"),
    [
        ({"precision": "fp64"}, True, r"hyperparameter 'precision': got 'fp64', expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"),
        ({"batch_size": "-8"}, True, r"hyperparameter 'batch_size': got '-8', expected an integer >= 1"),
        ({"precision": "fp32"}, False, r"missing data channel 'train'"),
        ({"precision": "mxfp8"}, True, r"hyperparameter 'precision': got 'mxfp8', expected one of fp32, bf16 on a host without GPUs"),
        ({"learning_rate": "1e-4", "min_learning_rate": "1e-3"}, True, r"'min_learning_rate'.*<= learning_rate"),
        ({"bogus_knob": "1"}, True, r"hyperparameter 'bogus_knob'.*a known hyperparameter"),
    ],
)
def test_bad_values_fail_before_launch_with_a_failure_file(
    tmp_path: Path, pydocs_shards: Path, values: dict[str, str], channel: bool, expected: str, capsys
) -> None:
    base = tmp_path / "ml"
    prepare_base_dir(base, {"model": "gpt-tiny", **values}, data_dir=pydocs_shards if channel else None)
    assert entrypoint.main(["train"], _env(base)) == 1
    reason = read_failure(base)
    assert reason is not None
    assert re.search(expected, reason), reason
    assert "\n" not in reason and len(reason) <= FAILURE_REASON_LIMIT
    assert "invalid configuration" in capsys.readouterr().err
    assert not list((base / "checkpoints").iterdir())  # nothing was launched


def test_malformed_files_and_bad_shards_are_reported(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    paths = prepare_base_dir(base, {"model": "gpt-tiny", "precision": "fp32"})
    paths.resource_config_file.write_text(json.dumps({"current_host": "algo-9", "hosts": ["algo-1"]}))
    assert entrypoint.main(["train"], _env(base)) == 1
    assert "'current_host' 'algo-9' is not one of hosts" in read_failure(base)

    paths = prepare_base_dir(tmp_path / "ml2", {"model": "gpt-tiny", "precision": "fp32"})
    paths.train_dir.mkdir(parents=True)
    (paths.train_dir / "notes.txt").write_text("not a shard")
    assert entrypoint.main(["train"], _env(paths.base_dir)) == 1
    assert "no token shards" in read_failure(paths.base_dir)


def test_torchrun_command_for_a_multi_node_job(tmp_path: Path) -> None:
    paths = prepare_base_dir(tmp_path, {"precision": "bf16"}, hosts=["algo-1", "algo-2", "algo-3"], current_host="algo-2")
    hp = load_hyperparameters(paths, {})
    cmd = entrypoint.torchrun_command(hp, paths, {"MASTER_PORT": "29555"}, gpus=8)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    for arg in ("--nnodes=3", "--node-rank=1", "--master-addr=algo-1", "--master-port=29555", "--nproc-per-node=8"):
        assert arg in cmd
    assert cmd[cmd.index("--precision") + 1] == "bf16" and "--standalone" not in cmd
    single = entrypoint.torchrun_command(hp, prepare_base_dir(tmp_path / "one", {}), {}, gpus=0)
    assert "--standalone" in single and "--nproc-per-node=2" in single
    assert "--nproc-per-node=3" in entrypoint.torchrun_command(hp, paths, {"TRAINER_NPROC_PER_NODE": "3"}, gpus=0)
    with pytest.raises(ConfigError, match="TRAINER_NPROC_PER_NODE"):
        entrypoint.processes_per_node({"TRAINER_NPROC_PER_NODE": "zero"}, 0)


def test_only_the_train_verb(tmp_path: Path) -> None:
    assert entrypoint.main(["serve"], _env(tmp_path)) == 2


def test_guide_train_sh_interface_maps_to_sm_hp(tmp_path: Path) -> None:
    env = {**os.environ, **_env(tmp_path / "ml"), "PRECISION": "fp128", "BATCH_SIZE": "4"}
    out = subprocess.run(["bash", str(REPO / "training" / "train.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "hyperparameter 'precision': got 'fp128'" in read_failure(tmp_path / "ml")
    env = {**env, "PRECISION": "fp32", "SEQ_LENGTH": "64"}  # valid now: fails on the missing channel instead
    out = subprocess.run(["bash", str(REPO / "training" / "train.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "missing data channel 'train'" in read_failure(tmp_path / "ml")


def test_failure_reason_is_one_line_and_first_writer_wins(tmp_path: Path) -> None:
    paths = SageMakerPaths(tmp_path)
    assert write_failure(paths, "first\nreason " + "x" * 5000)
    assert not write_failure(paths, "second")
    text = paths.failure_file.read_text()
    assert text.startswith("first reason") and text.count("\n") == 1 and len(text.strip()) == FAILURE_REASON_LIMIT
    assert one_line("a \t b") == "a b"


def test_capacity_block_deadline_is_30_minutes_before_expiry() -> None:
    assert capacity_block_deadline({}) is None
    assert capacity_block_deadline({"SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP": "1800000"}) == 0.0
    with pytest.raises(ConfigError, match="milliseconds"):
        capacity_block_deadline({"SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP": "soon"})
