"""The container contract: config files, SM_HP_* variables, validation before launch, failure file,
base directory, network interface, capacity block, and how stop signals reach the workers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from platform_spec.capacity import CAPACITY_BLOCK_ENV, CAPACITY_BLOCK_RECLAIM_S
from platform_spec.hyperparameters import HyperparameterError, parse
from training import entrypoint
from training.environment import (
    FAILURE_REASON_LIMIT,
    GUIDE_VARIABLES,
    STOP_MARGIN_S,
    CapacityBlockEnded,
    ConfigError,
    ResourceConfig,
    SageMakerPaths,
    capacity_block_deadline,
    check_capacity_block,
    load_hyperparameters,
    one_line,
    raw_hyperparameters,
    read_resource_config,
    socket_interface_environment,
    write_failure,
)
from training.local import follow, kill_tree, prepare_base_dir, read_failure, start_local
from training.supervision import TrainerStatus, read_status, write_status

REPO = Path(__file__).resolve().parents[2]
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # validate as on a CPU host, whatever this machine has


def _env(base: Path, **extra: str) -> dict[str, str]:
    return {"SAGEMAKER_BASE_DIR": str(base), "PATH": os.environ.get("PATH", ""), **NO_GPU, **extra}


def test_quoted_and_unquoted_hyperparameters_parse_the_same(tmp_path: Path) -> None:
    values = {
        "model": "gpt-tiny",
        "precision": "bf16",
        "batch_size": 4,
        "learning_rate": 1e-3,
        "reshard_after_forward": False,
    }
    plain = prepare_base_dir(tmp_path / "plain", values)
    quoted = prepare_base_dir(tmp_path / "quoted", values, json_quoted=True)
    raw = json.loads(quoted.hyperparameters_file.read_text())
    assert raw["precision"] == '"bf16"' and raw["batch_size"] == '"4"'  # what older SDKs send
    a, b = load_hyperparameters(plain, {}), load_hyperparameters(quoted, {})
    assert a == b
    assert (a.model, a.precision, a.batch_size, a.learning_rate, a.reshard_after_forward) == (
        "gpt-tiny",
        "bf16",
        4,
        1e-3,
        False,
    )


def test_sm_hp_variables_override_the_file_and_work_alone(tmp_path: Path) -> None:
    paths = prepare_base_dir(tmp_path / "b", {"precision": "bf16", "seq_length": "128"})
    hp = load_hyperparameters(paths, {"SM_HP_SEQ_LENGTH": "256", "SM_HP_NUM_LAYERS": "2", "OTHER": "x"})
    assert (hp.precision, hp.seq_length, hp.num_layers) == ("bf16", 256, 2)
    alone = load_hyperparameters(
        SageMakerPaths(tmp_path / "none"), {"SM_HP_PRECISION": "fp32", "SM_HP_BATCH_SIZE": "3"}
    )
    assert (alone.precision, alone.batch_size) == ("fp32", 3)


@pytest.mark.parametrize(
    ("values", "channel", "expected"),
    [
        (
            {"precision": "fp64"},
            True,
            r"hyperparameter 'precision': got 'fp64', expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4",
        ),
        ({"batch_size": "-8"}, True, r"hyperparameter 'batch_size': got '-8', expected an integer >= 1"),
        ({"precision": "fp32"}, False, r"missing data channel 'train'"),
        (
            {"precision": "mxfp8"},
            True,
            r"hyperparameter 'precision': got 'mxfp8', expected one of fp32, bf16 on a host without GPUs",
        ),
        ({"learning_rate": "1e-4", "min_learning_rate": "1e-3"}, True, r"'min_learning_rate'.*<= learning_rate"),
        ({"bogus_knob": "1"}, True, r"hyperparameter 'bogus_knob'.*a known hyperparameter"),
        # a cross-field error on a value the job never set says it is the default
        (
            {"max_steps": "10"},
            True,
            r"^hyperparameter 'warmup_steps': got 100, expected <= max_steps \(10\); warmup_steps=100 is its default \(not set\)$",
        ),
        (
            {"num_layers": "4", "num-layers": "6"},
            True,
            r"'num_layers' and 'num-layers' both set hyperparameter 'num_layers'",
        ),
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
    paths = prepare_base_dir(
        tmp_path, {"precision": "bf16"}, hosts=["algo-1", "algo-2", "algo-3"], current_host="algo-2"
    )
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


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["-h"]])
def test_help_prints_the_help_and_exits_0(tmp_path: Path, argv: list[str], capsys) -> None:
    assert entrypoint.main(argv, _env(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.startswith(entrypoint.USAGE + "\n") and "--guide-variables" in out.partition("\n")[2]
    assert not (tmp_path / "output" / "failure").exists()


def _train_sh(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "training" / "train.sh")], env=env, capture_output=True, text=True, timeout=120
    )


def test_guide_train_sh_interface_maps_to_hyperparameters(tmp_path: Path) -> None:
    env = {**os.environ, **_env(tmp_path / "ml"), "PRECISION": "fp128", "BATCH_SIZE": "4"}
    assert _train_sh(env).returncode == 1
    assert "hyperparameter 'precision': got 'fp128'" in read_failure(tmp_path / "ml")
    env = {**env, "PRECISION": "fp32", "SEQ_LENGTH": "64"}  # valid now: fails on the missing channel instead
    assert _train_sh(env).returncode == 1 and "missing data channel 'train'" in read_failure(tmp_path / "ml")


def test_train_sh_keeps_num_layers_in_any_spelling_over_the_guide_default(tmp_path: Path) -> None:
    """Regression: ``num-layers`` in hyperparameters.json was overridden by the guide's NUM_LAYERS=10."""
    paths = prepare_base_dir(tmp_path / "ml", {"model": "gpt-tiny", "precision": "fp32"})
    paths.hyperparameters_file.write_text(json.dumps({"precision": "fp32", "num-layers": "0"}))  # 0: invalid on purpose
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_HP_") and k not in GUIDE_VARIABLES}
    assert _train_sh({**env, **_env(paths.base_dir)}).returncode == 1
    # the file's value reached validation (the default 10 would have passed and failed on the channel)
    assert read_failure(paths.base_dir).startswith("hyperparameter 'num_layers': got '0'")


@pytest.mark.parametrize(
    ("file", "environ", "expected"),
    [
        (
            {},
            {},
            {"model": "gpt-1b", "precision": "mxfp8", "num_layers": "10", "batch_size": "8", "seq_length": "2048"},
        ),
        ({"num-layers": "4"}, {}, {"num_layers": "4"}),
        ({"NUM_LAYERS": "4"}, {}, {"num_layers": "4"}),
        ({"--num-layers": "4"}, {"NUM_LAYERS": "6"}, {"num_layers": "6"}),  # the guide's variable beats the file
        ({"num_layers": "4"}, {"NUM_LAYERS": "6", "SM_HP_num_layers": "8"}, {"num_layers": "8"}),  # SM_HP_* beat both
        ({"num_layers": "4"}, {"SM_HP_NUM_LAYERS": "8"}, {"num_layers": "8"}),
        ({"seq-length": "64"}, {"SEQ_LENGTH": " "}, {"seq_length": "64"}),  # an empty variable sets nothing
    ],
)
def test_guide_variables_honour_every_spelling_and_precedence(
    tmp_path: Path, file: dict[str, str], environ: dict[str, str], expected: dict[str, str]
) -> None:
    paths = SageMakerPaths(tmp_path)
    paths.config_dir.mkdir(parents=True)
    paths.hyperparameters_file.write_text(json.dumps(file))
    values = raw_hyperparameters(paths, environ, guide_variables=True)
    assert {k: values[k] for k in expected} == expected
    assert all(k == k.lower() and "-" not in k for k in values)  # one key per hyperparameter, snake_case
    if not file:  # without the guide interface (SageMaker's `train`), no guide default applies
        assert raw_hyperparameters(paths, environ) == {}


def test_two_spellings_of_one_hyperparameter_must_agree(tmp_path: Path) -> None:
    paths = SageMakerPaths(tmp_path)
    paths.config_dir.mkdir(parents=True)
    paths.hyperparameters_file.write_text(json.dumps({"batch_size": "4", "batch-size": 4, "BATCH_SIZE": '"4"'}))
    assert raw_hyperparameters(paths, {})["batch_size"] in ("4", 4, '"4"')  # same value in three spellings: fine
    with pytest.raises(
        ConfigError, match=r"'SM_HP_BATCH_SIZE' and 'SM_HP_batch_size' both set hyperparameter 'batch_size'"
    ):
        raw_hyperparameters(paths, {"SM_HP_BATCH_SIZE": "4", "SM_HP_batch_size": "2"})
    # the file and the environment may differ: SM_HP_* wins, as documented
    assert load_hyperparameters(paths, {"SM_HP_batch_size": "2"}).batch_size == 2


def test_cross_field_errors_name_the_defaults_involved() -> None:
    with pytest.raises(HyperparameterError) as info:
        parse({"max_steps": 10})
    assert (info.value.field, info.value.value) == ("warmup_steps", 100)  # the fields the submitter reads
    assert info.value.expected == "<= max_steps (10); warmup_steps=100 is its default (not set)"
    with pytest.raises(HyperparameterError) as info:
        parse({"warmup_steps": 2000})
    assert info.value.expected == "<= max_steps (1000); max_steps=1000 is its default (not set)"
    with pytest.raises(HyperparameterError) as info:
        parse({"learning_rate": 1e-5})
    assert info.value.expected == "<= learning_rate (1e-05); min_learning_rate=3e-05 is its default (not set)"
    with pytest.raises(HyperparameterError) as info:  # both given: nothing to point at
        parse({"warmup_steps": 20, "max_steps": 10})
    assert info.value.expected == "<= max_steps (10)"
    with pytest.raises(HyperparameterError) as info:  # a timeout under a minute would abort healthy collectives
        parse({"collective_timeout_minutes": 1e-9})
    assert info.value.field == "collective_timeout_minutes" and info.value.expected.startswith("0 (keep setup's")
    assert parse({"collective_timeout_minutes": 0}).collective_timeout_minutes == 0
    assert parse({"collective_timeout_minutes": 1}).collective_timeout_minutes == 1


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


# --------------------------------------------------------------------------- base directory


def test_a_relative_base_dir_is_resolved_once_for_validation_workers_and_failure_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: workers (cwd = the repository) resolved a relative SAGEMAKER_BASE_DIR again and
    wrote their failure file into the repository."""
    monkeypatch.chdir(tmp_path)
    prepare_base_dir(Path("jobs") / "ml", {"model": "gpt-tiny", "precision": "fp64"})
    assert entrypoint.main(["train"], _env(Path("jobs/ml"))) == 1  # SAGEMAKER_BASE_DIR=jobs/ml, relative
    assert "'precision': got 'fp64'" in read_failure(tmp_path / "jobs" / "ml")
    assert not (REPO / "jobs").exists()

    paths = SageMakerPaths.from_environment({"SAGEMAKER_BASE_DIR": "jobs/ml"})
    assert paths.base_dir == tmp_path / "jobs" / "ml" and paths.base_dir.is_absolute()
    assert SageMakerPaths(Path("jobs/ml")) == paths
    hp = parse({"precision": "fp32"})
    cmd = entrypoint.torchrun_command(hp, paths, {}, gpus=0)
    assert cmd[cmd.index("--base-dir") + 1] == str(tmp_path / "jobs" / "ml")
    workers = entrypoint.worker_environment({"SAGEMAKER_BASE_DIR": "jobs/ml"}, 0, 2, paths=paths)
    assert workers["SAGEMAKER_BASE_DIR"] == str(tmp_path / "jobs" / "ml")


# --------------------------------------------------------------------------- network interface


def test_resourceconfig_network_interface_is_read_and_checked(tmp_path: Path) -> None:
    paths = prepare_base_dir(
        tmp_path / "a", {}, hosts=["algo-1", "algo-2"], current_host="algo-2", network_interface_name="eth1"
    )
    assert read_resource_config(paths) == ResourceConfig("algo-2", ("algo-1", "algo-2"), "eth1")
    paths.resource_config_file.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    assert read_resource_config(paths).network_interface_name is None  # older files name none
    paths.resource_config_file.write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": 7})
    )
    with pytest.raises(ConfigError, match="'network_interface_name' must be an interface name"):
        read_resource_config(paths)


def test_socket_interfaces_follow_the_declared_interface_unless_the_job_sets_them() -> None:
    declared = ResourceConfig("algo-1", ("algo-1", "algo-2"), "eth0")
    interfaces = ["lo", "eth0", "docker0"]
    updates, notes = socket_interface_environment(declared, {}, interfaces)
    assert updates == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert notes == [
        "NCCL_SOCKET_IFNAME=eth0 (resourceconfig.json network_interface_name)",
        "GLOO_SOCKET_IFNAME=eth0 (resourceconfig.json network_interface_name)",
    ]
    # the job's environment wins, variable by variable, and the note says so
    updates, notes = socket_interface_environment(declared, {"NCCL_SOCKET_IFNAME": "ens5"}, interfaces)
    assert updates == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert notes[0] == "NCCL_SOCKET_IFNAME=ens5 (the job's environment)"
    env = {"NCCL_SOCKET_IFNAME": "ens5", "GLOO_SOCKET_IFNAME": "ens5"}
    assert socket_interface_environment(declared, env, ["lo"])[0] == {}  # nothing of ours used: no check
    # a declared interface this host lacks fails before launch, naming it and what exists
    with pytest.raises(
        ConfigError, match=r"network_interface_name 'eth0' is not an interface of this host \(it has lo, ens5\)"
    ):
        socket_interface_environment(declared, {}, ["lo", "ens5"])
    # nothing declared: nothing set, and the note says the library chooses
    updates, notes = socket_interface_environment(ResourceConfig("algo-1", ("algo-1",)), {}, interfaces)
    assert updates == {} and all("names no network_interface_name" in n for n in notes)
    # what the workers get
    workers = entrypoint.worker_environment(
        {"GLOO_SOCKET_IFNAME": "x"}, 8, 8, paths=SageMakerPaths(Path("/opt/ml")), network={"NCCL_SOCKET_IFNAME": "eth0"}
    )
    assert (workers["NCCL_SOCKET_IFNAME"], workers["GLOO_SOCKET_IFNAME"]) == ("eth0", "x")


def test_an_interface_this_host_lacks_fails_before_launch(tmp_path: Path, pydocs_shards: Path) -> None:
    paths = prepare_base_dir(
        tmp_path / "ml",
        {"model": "gpt-tiny", "precision": "fp32"},
        data_dir=pydocs_shards,
        network_interface_name="nonexistent9",
    )
    assert entrypoint.main(["train"], _env(paths.base_dir)) == 1
    assert "network_interface_name 'nonexistent9' is not an interface of this host" in read_failure(paths.base_dir)
    assert not list(paths.checkpoint_dir.iterdir())


# --------------------------------------------------------------------------- capacity block


def _expiry_ms(seconds_from_now: float) -> str:
    return str(int((time.time() + seconds_from_now) * 1000))


def test_a_capacity_block_that_already_ended_fails_the_job_with_a_reason(tmp_path: Path, pydocs_shards: Path) -> None:
    """Regression: it ended as a successful job with no model."""
    paths = prepare_base_dir(tmp_path / "ml", {"model": "gpt-tiny", "precision": "fp32"}, data_dir=pydocs_shards)
    assert entrypoint.main(["train"], _env(paths.base_dir, **{CAPACITY_BLOCK_ENV: _expiry_ms(-3600)})) == 1
    reason = read_failure(paths.base_dir)
    assert reason.startswith("the training plan's capacity block leaves no time to train")
    assert "nothing was trained" in reason and "\n" not in reason
    assert not list(paths.checkpoint_dir.iterdir()) and not list(paths.model_dir.iterdir())


def test_capacity_block_check_uses_the_reclaim_time_and_the_stop_margin() -> None:
    now = 1_000_000.0

    def ending_in(seconds: float) -> dict[str, str]:
        return {CAPACITY_BLOCK_ENV: str(int((now + seconds) * 1000))}

    check_capacity_block({}, now=now)  # no training plan
    # usable until CAPACITY_BLOCK_RECLAIM_S before the end, less the trainer's fixed margin
    check_capacity_block(ending_in(CAPACITY_BLOCK_RECLAIM_S + STOP_MARGIN_S + 1), now=now)
    with pytest.raises(CapacityBlockEnded, match=r"in 300 s, and a step plus its checkpoint needs at least 300 s"):
        check_capacity_block(ending_in(CAPACITY_BLOCK_RECLAIM_S + STOP_MARGIN_S), now=now)
    with pytest.raises(CapacityBlockEnded, match=r"reclaimed from 1970-01-12T13:16:40Z .*, 1800 s ago"):
        check_capacity_block(ending_in(0), now=now)
    assert issubclass(CapacityBlockEnded, ConfigError)  # the trainer writes it as the failure reason


def test_the_trainer_fails_when_the_block_ends_before_its_first_step(tmp_path: Path) -> None:
    """The trainer's own check before its first step (a long setup can use up the margin the entry point saw)."""
    from training.train import StopController, Trainer

    trainer = Trainer(parse({"precision": "fp32"}), SageMakerPaths(tmp_path))
    trainer.setup = trainer.resume = lambda: None  # type: ignore[method-assign]
    trainer.stopper = StopController(time.time() + 60, None, 1)
    trainer.checkpoints = type("NoCheckpointYet", (), {"last_save_seconds": 0.0})()
    with pytest.raises(CapacityBlockEnded, match="nothing was trained"):
        trainer.run()


@pytest.fixture
def trainer_main(monkeypatch: pytest.MonkeyPatch):
    """``training.train.main`` in this process, with its signal handlers put back afterwards."""
    from training import train

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.delenv("SAGEMAKER_BASE_DIR", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    yield train.main
    train._early_signals.clear()
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def test_the_trainer_writes_its_failure_into_the_base_dir_it_was_given(tmp_path: Path, trainer_main) -> None:
    """Regression: with SAGEMAKER_BASE_DIR unset, the failure paths were fixed (/opt/ml) before --base-dir was read."""
    opt_ml_failure = Path("/opt/ml/output/failure")
    existed = opt_ml_failure.exists()
    assert trainer_main(["--base-dir", str(tmp_path / "ml"), "--precision", "fp64"]) == 1
    assert read_failure(tmp_path / "ml").startswith("hyperparameter 'precision': got 'fp64'")
    assert opt_ml_failure.exists() == existed
    status = read_status(SageMakerPaths(tmp_path / "ml"))
    assert status is not None and status.state == "failed" and status.reason.startswith("hyperparameter 'precision'")


@pytest.mark.parametrize(
    ("phase", "step", "where"),
    [
        ("setup", 0, "during setup (before the first step)"),
        ("resume", 0, "while resuming (before the first step)"),
        ("step", 6, "at step 7"),
        ("save", 6, "while saving step-6"),  # was "at step 7"
        ("export", 9, "after step 9 (exporting the final weights)"),  # was "at step 10"
    ],
)
def test_failure_reasons_say_where_the_trainer_was(
    tmp_path: Path, trainer_main, monkeypatch: pytest.MonkeyPatch, phase: str, step: int, where: str
) -> None:
    from training.train import Trainer

    def fail(self: Trainer) -> int:
        self.phase, self.step = phase, step
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trainer, "run", fail)
    assert trainer_main(["--base-dir", str(tmp_path), "--precision", "fp32"]) == 1
    assert read_failure(tmp_path) == f"OSError on rank 0 {where}: [Errno 28] No space left on device"


# A worker whose reader goes away: it prints a line per "step", the test closes the pipe after the
# first, and the worker must go on to the end (and say so in a file), not die of BrokenPipeError.
_PRINTS_ON = r"""
import sys, time
from pathlib import Path
from training.supervision import guarded_output
with guarded_output():
    for step in range(1, 41):
        print(f"step {step}", flush=True)
        print(f"on stderr {step}", file=sys.stderr, flush=True)
        time.sleep(0.01)
    Path(sys.argv[1]).write_text("trained to step 40")
"""


def test_a_worker_outlives_its_output_pipe(tmp_path: Path) -> None:
    """Regression: after `trainctl train` died (closed terminal), the workers died of BrokenPipeError at their
    next print, losing the work since the last checkpoint."""
    done = tmp_path / "done"
    proc = subprocess.Popen(
        [sys.executable, "-c", _PRINTS_ON, str(done)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"step 1\n"
    proc.stdout.close()  # the reader goes away
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert done.read_text() == "trained to step 40"


def test_a_signal_during_worker_setup_is_kept_for_the_stop_decision() -> None:
    from training import train

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        train.install_early_stop_handlers()
        signal.raise_signal(signal.SIGTERM)  # while the worker imports, builds, resumes
        stopper = train.StopController(None, None, 1)
        stopper.install()
        assert stopper.check() == "SIGTERM/SIGINT received"
    finally:
        train._early_signals.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- stop signals

# A stand-in for torchrun: two child "workers" that install their SIGTERM handler only after a
# line from the test (as a worker does once it has imported torch), then save and exit 0 on it.
_WORKER = r"""
import os, signal, sys, time
sys.stdin.readline()
def stop(signum, frame):
    os.write(1, f"saved on {signal.Signals(signum).name}\n".encode())  # one write: lines never interleave
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
os.write(1, b"ready\n")
time.sleep(60)
sys.exit(3)
"""
_TORCHRUN = r"""
import subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, text=True) for _ in range(2)]
print("spawned", flush=True)
sys.stdin.readline()
for p in procs:
    p.stdin.write("go\n")
    p.stdin.flush()
sys.exit(max(p.wait() for p in procs))
"""


def test_the_relay_holds_a_stop_until_every_worker_catches_it() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _TORCHRUN, _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "spawned\n"
        relay = entrypoint.StopRelay()
        relay.attach(proc)
        while len(entrypoint.live_children(proc.pid)) < 2:
            time.sleep(0.05)
        relay.request(signal.SIGTERM)  # the workers have no handler yet: held, not delivered
        assert (relay.pending, relay.target) == (True, None)
        assert proc.poll() is None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert [proc.stdout.readline() for _ in range(2)] == ["ready\n", "ready\n"]
        while relay.pending:  # what the entry point's wait loop does
            relay.poll()
            time.sleep(0.05)
        assert relay.target == "workers"
        assert proc.wait(timeout=60) == 0  # both saved and exited 0: none was killed half-started
        assert proc.stdout.read().count("saved on SIGTERM") == 2
    finally:
        kill_tree(proc.pid)  # whatever happened, leave no process behind
        proc.wait()


def test_a_stop_before_any_worker_exists_goes_to_torchrun() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    relay = entrypoint.StopRelay()
    relay.request(signal.SIGTERM)  # before launch: recorded only
    assert relay.pending and relay.target is None
    relay.attach(proc)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert (relay.target, relay.pending) == ("torchrun", False)


def test_sighup_stops_the_run_as_sigterm() -> None:
    """A closed terminal (SIGHUP) stops the run like SageMaker's SIGTERM: the workers catch SIGTERM, not SIGHUP."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    relay = entrypoint.StopRelay()
    relay.attach(proc)
    relay.request(signal.SIGHUP)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # torchrun (no worker yet) got SIGTERM
    assert (relay.signum, relay.delivered, relay.target) == (signal.SIGHUP, signal.SIGTERM, "torchrun")
    assert signal.SIGHUP in entrypoint.STOP_SIGNALS


def test_a_stop_after_the_workers_exited_leaves_torchrun_alone() -> None:
    """Torchrun finishing after its workers exited must not be signalled (it would exit non-zero)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.run([sys.executable, '-c', 'import time; time.sleep(1)']); time.sleep(60)",
        ]
    )
    try:
        relay = entrypoint.StopRelay()
        relay.attach(proc)
        while not relay._seen_workers:
            relay.poll()
            time.sleep(0.05)
        while entrypoint.live_children(proc.pid):  # the worker exits
            time.sleep(0.05)
        relay.request(signal.SIGTERM)
        assert (relay.target, relay.pending) == (None, False) and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_outcome_messages_say_what_happened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = SageMakerPaths(tmp_path)
    relay = entrypoint.StopRelay()
    relay.signum, relay.target = signal.SIGTERM, "torchrun"
    # stopped before any worker existed: torchrun's own exit status is no failure, and nothing was "saved"
    assert entrypoint.outcome(paths, 1, relay) == 0
    out = capsys.readouterr().out
    assert "stopped by SIGTERM before the training workers started: nothing was trained" in out
    assert "saved" not in out and "no complete checkpoint yet" in out
    assert read_failure(tmp_path) is None

    relay.target = "workers"
    # what the workers did comes from their status record, not from folder markers: a step-9 folder
    # with a marker (whose shards never arrived) is not what a restart resumes
    (tmp_path / "checkpoints" / "step-9").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-9" / ".complete").write_text("")
    write_status(paths, TrainerStatus("stopped", step=7, resumed_from=6, skipped={9: "cut short"}, saved=7))
    assert entrypoint.outcome(paths, 0, relay) == 0
    assert (
        "stopped by SIGTERM: the workers stopped after step 7 and saved it (checkpoint step-7); no checkpoint "
        "verifies (step-9: trainer_state.json is missing; DCP .metadata is missing"
    ) in capsys.readouterr().out
    write_status(paths, TrainerStatus("stopped", step=6, resumed_from=6))
    assert entrypoint.outcome(paths, 0, relay) == 0
    assert (
        "stopped by SIGTERM: the workers stopped before their first step (step 7), so there was nothing new to "
        "save; no checkpoint verifies"
    ) in capsys.readouterr().out

    assert entrypoint.outcome(paths, 1, relay) == 1  # the workers were asked to stop and failed: a failure
    assert read_failure(tmp_path) == (
        "training processes exited with status 1 after SIGTERM was relayed to them; see the job's log for the traceback"
    )


@pytest.mark.slow  # a real run, but no shared fixture: free to run beside the "trainer-runs" group
def test_sigterm_right_after_launch_never_claims_a_checkpoint(tmp_path: Path, pydocs_shards: Path) -> None:
    """SIGTERM as soon as the entry point has launched torchrun, before any worker has trained."""
    hp = {
        "model": "gpt-tiny",
        "num_layers": 1,
        "precision": "fp32",
        "batch_size": 2,
        "seq_length": 16,
        "max_steps": 5,
        "warmup_steps": 1,
    }
    proc = start_local(tmp_path / "ml", hp, data_dir=pydocs_shards, nproc=1)

    def stop_once_launched(line: str) -> None:
        if "torch.distributed.run" in line:
            proc.send_signal(signal.SIGTERM)

    run = follow(proc, echo=stop_once_launched, timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    assert read_failure(tmp_path / "ml") is None
    assert "[entrypoint] stopped by SIGTERM" in run.output
    assert "saved" not in run.output.replace("nothing to save", "")
    assert not list((tmp_path / "ml" / "checkpoints").iterdir())  # nothing was trained, so nothing was written
