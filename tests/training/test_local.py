"""Local runs (training.local, trainctl train): the train channel never costs user data, and a
supervised run relays stop signals and returns only after the run has exited."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from training.checkpoint.verify import RestartPoint
from training.environment import SageMakerPaths
from training.local import (
    LOCAL_RUN_RECORD,
    LayoutError,
    LayoutSnapshot,
    LocalRun,
    follow,
    prepare_base_dir,
)
from training.supervision import TrainerStatus, write_status

HP = {"model": "gpt-tiny", "precision": "fp32"}


def _shards(folder: Path, text: str = "tokens") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shard-00000.bin").write_text(text)
    return folder


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- the train channel


def test_data_that_is_the_channel_folder_itself_is_used_as_it_is(tmp_path: Path) -> None:
    """Regression: --data BASE/input/data/train deleted the shards and left a link pointing at itself."""
    base = tmp_path / "ml"
    train = _shards(base / "input" / "data" / "train", "precious")
    for spelling in (train, base / "input" / "data" / ".." / "data" / "train", os.path.relpath(train)):
        paths = prepare_base_dir(base, HP, data_dir=spelling)
        assert train.is_dir() and not train.is_symlink()
        assert _tree(train) == {"shard-00000.bin": "precious"}
        assert "train" in json.loads(paths.input_data_config_file.read_text())
    # reached through a link of the user's: the same folder, so still used as it is
    (tmp_path / "alias").symlink_to(train)
    prepare_base_dir(base, HP, data_dir=tmp_path / "alias")
    assert _tree(train) == {"shard-00000.bin": "precious"} and not train.is_symlink()


@pytest.mark.parametrize("in_the_way", ["folder", "file", "foreign link", "foreign dangling link"])
def test_anything_else_in_the_way_is_refused_before_any_file_is_written(tmp_path: Path, in_the_way: str) -> None:
    base, data = tmp_path / "ml", _shards(tmp_path / "data")
    train = base / "input" / "data" / "train"
    train.parent.mkdir(parents=True)
    elsewhere = _shards(tmp_path / "elsewhere", "theirs")
    if in_the_way == "folder":
        _shards(train, "mine")
    elif in_the_way == "file":
        train.write_text("mine")
    elif in_the_way == "foreign link":
        train.symlink_to(elsewhere)
    else:
        train.symlink_to(tmp_path / "gone")
    before = os.readlink(train) if train.is_symlink() else _tree(train) if train.is_dir() else train.read_text()
    with pytest.raises(LayoutError) as info:
        prepare_base_dir(base, HP, data_dir=data)
    message = str(info.value)
    assert str(train) in message and "left as it is" in message
    assert "Move it away" in message or "Remove the link yourself" in message
    # --data is suggested only where it works: a folder (regression: `--data <the file>` was refused as "not a directory")
    suggested = message.split("--data ", 1)[1].split()[0] if "--data " in message else None
    if in_the_way in ("folder", "foreign link"):
        assert suggested is not None and Path(suggested).is_dir()
        assert prepare_base_dir(tmp_path / "other", HP, data_dir=suggested).train_dir.is_symlink()  # it works
    else:
        assert suggested is None
    if in_the_way == "file":
        assert f"mv {train} {train}.moved" in message
    after = os.readlink(train) if train.is_symlink() else _tree(train) if train.is_dir() else train.read_text()
    assert after == before and _tree(elsewhere) == {"shard-00000.bin": "theirs"}
    assert not (base / "input" / "config").exists()  # nothing half-done


def test_a_link_made_earlier_is_replaced_only_while_it_is_a_link(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    first, second = _shards(tmp_path / "first", "one"), _shards(tmp_path / "second", "two")
    paths = prepare_base_dir(base, HP, data_dir=first)
    assert os.readlink(paths.train_dir) == str(first)
    assert json.loads((base / LOCAL_RUN_RECORD).read_text()) == {"train_link": str(first)}
    prepare_base_dir(base, HP, data_dir=first)  # the same request again: nothing changes
    assert os.readlink(paths.train_dir) == str(first)
    prepare_base_dir(base, HP, data_dir=second)
    assert os.readlink(paths.train_dir) == str(second)
    assert _tree(first) == {"shard-00000.bin": "one"}  # the old folder is untouched
    # our link left dangling (its folder moved away) is still ours: replaced
    (tmp_path / "second").rename(tmp_path / "moved")
    prepare_base_dir(base, HP, data_dir=first)
    assert os.readlink(paths.train_dir) == str(first)
    # once someone puts a real folder there, it is theirs
    paths.train_dir.unlink()
    _shards(paths.train_dir, "theirs now")
    with pytest.raises(LayoutError, match="is a folder of its own"):
        prepare_base_dir(base, HP, data_dir=first)
    assert _tree(paths.train_dir) == {"shard-00000.bin": "theirs now"}


def test_bad_data_directories_are_refused(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    with pytest.raises(LayoutError, match="is not a directory"):
        prepare_base_dir(base, HP, data_dir=tmp_path / "missing")
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(LayoutError, match="is not a directory"):
        prepare_base_dir(base, HP, data_dir=tmp_path / "file.bin")
    assert not base.exists()
    _shards(base / "input" / "data" / "other")
    with pytest.raises(LayoutError, match="contains the base directory's train channel"):
        prepare_base_dir(base, HP, data_dir=base / "input")  # the link would lead into itself
    assert not (base / "input" / "data" / "train").exists() and not (base / "input" / "config").exists()


# --------------------------------------------------------------------------- stop reports


def _status(state: str, step: int, saved: int | None, resumed_from: int | None = None) -> TrainerStatus:
    return TrainerStatus(state, step=step, saved=saved, resumed_from=resumed_from)


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        # --stop-at-step 5 sent SIGTERM when step 5 was logged; the trainer finished step 6 and saved it
        (
            LocalRun(0, interrupted_at=5, status=_status("stopped", 6, 6), restart=RestartPoint(6)),
            "trainctl train: stopped after step 6 (checkpoint step-6); run the same command again to resume",
        ),
        (
            LocalRun(0, stop_signal=signal.SIGINT, status=_status("stopped", 14, 14, 10), restart=RestartPoint(14)),
            "trainctl train: stopped after step 14 (checkpoint step-14); run the same command again to resume",
        ),
        # the review's case: step-9 complete but damaged, the trainer resumed step-6 and stopped after step 7
        (
            LocalRun(
                0, interrupted_at=7, status=_status("stopped", 7, 7, 6), restart=RestartPoint(7, {9: "cut short"})
            ),
            "trainctl train: stopped after step 7 (checkpoint step-7); the same command resumes from step-7 (newer ones "
            "do not verify and are skipped: step-9: cut short)",
        ),
        # the stop came before the run's first step: no new checkpoint, none claimed; a restart skips the damaged one
        (
            LocalRun(
                0,
                stop_signal=signal.SIGTERM,
                status=_status("stopped", 6, None, 6),
                restart=RestartPoint(6, {9: "cut short"}),
            ),
            "trainctl train: stopped before the run's first step, so there was nothing new to save; the same command "
            "resumes from step-6 (newer ones do not verify and are skipped: step-9: cut short)",
        ),
        (
            LocalRun(0, stop_signal=signal.SIGTERM, status=None, restart=RestartPoint(None)),
            "trainctl train: stopped before the run's first step, so there was nothing new to save; no complete "
            "checkpoint yet: the same command begins at step 0",
        ),
        (
            LocalRun(0, stop_signal=signal.SIGTERM, status=_status("finished", 20, 20), restart=RestartPoint(20)),
            "trainctl train: the run had already finished at step 20 when the stop came",
        ),
        (
            LocalRun(
                -9, stop_signal=signal.SIGINT, killed=True, status=_status("training", 13, 12), restart=RestartPoint(12)
            ),
            "trainctl train: killed on the second stop signal, without a checkpoint of the last steps; "
            "the same command resumes from step-12",
        ),
        # SIGHUP was relayed as SIGTERM; the entry point died of it before installing its handler
        (
            LocalRun(-signal.SIGTERM, stop_signal=signal.SIGHUP),
            "trainctl train: stopped by SIGHUP before the entry point had started; nothing was started",
        ),
        (LocalRun(0, status=_status("finished", 20, 20), restart=RestartPoint(20)), None),
    ],
)
def test_reports_name_the_step_the_trainer_really_stopped_after(run: LocalRun, expected: str | None) -> None:
    from trainctl.local_train import end_summary

    assert end_summary(run, failure=None) == expected


def test_a_refused_runs_settings_are_put_back(tmp_path: Path) -> None:
    """The layout trainctl rewrites before a run, restored when the run is refused (review finding 8)."""
    base = tmp_path / "ml"
    first, second = _shards(tmp_path / "first", "one"), _shards(tmp_path / "second", "two")
    paths = prepare_base_dir(base, {**HP, "num_layers": 2}, data_dir=first)
    files = {p: p.read_bytes() for p in paths.config_dir.iterdir()}
    record = (base / LOCAL_RUN_RECORD).read_bytes()
    snapshot = LayoutSnapshot.take(paths)
    assert snapshot.changed() == []
    prepare_base_dir(base, {**HP, "num_layers": 4}, data_dir=second)  # the refused run's settings
    changed = ["input/config/hyperparameters.json", LOCAL_RUN_RECORD, "input/data/train (link)"]
    assert snapshot.changed() == changed
    assert snapshot.restore() == changed and snapshot.changed() == []
    assert {p: p.read_bytes() for p in paths.config_dir.iterdir()} == files
    assert os.readlink(paths.train_dir) == str(first) and (base / LOCAL_RUN_RECORD).read_bytes() == record
    assert _tree(second) == {"shard-00000.bin": "two"}  # the refused run's data folder is untouched

    fresh = LayoutSnapshot.take(SageMakerPaths(tmp_path / "fresh"))  # nothing there before
    prepare_base_dir(tmp_path / "fresh", HP, data_dir=second)
    fresh.restore()
    assert not (tmp_path / "fresh" / "input" / "data" / "train").exists()
    assert not (tmp_path / "fresh" / "input" / "config" / "hyperparameters.json").exists()
    assert not (tmp_path / "fresh" / LOCAL_RUN_RECORD).exists()


def test_a_tensorboard_folder_is_the_runs_local_path_and_a_refused_run_puts_the_previous_one_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trainctl train --tensorboard DIR``: SageMaker's tensorboardoutputconfig.json names DIR (absolute), the
    trainer's tensorboard_dir reads it back; a file in the way is refused before anything is written; no DIR keeps
    the previous one; a refused run's is put back."""
    from training.tracking import tensorboard_dir

    base, data = tmp_path / "ml", _shards(tmp_path / "data", "tokens")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(LayoutError, match="a-file: not a folder; expected a folder for TensorBoard event files"):
        prepare_base_dir(base, HP, data_dir=data, tensorboard=tmp_path / "a-file")
    assert not base.exists()
    monkeypatch.chdir(tmp_path)  # a relative DIR is the caller's, made absolute for the workers
    paths = prepare_base_dir(base, HP, data_dir=data, tensorboard="tb")
    assert json.loads(paths.tensorboard_config_file.read_text()) == {"LocalPath": str(tmp_path / "tb")}
    assert tensorboard_dir(paths) == tmp_path / "tb"
    prepare_base_dir(base, HP, data_dir=data)  # a rerun without it keeps it
    assert tensorboard_dir(paths) == tmp_path / "tb"
    snapshot = LayoutSnapshot.take(paths)
    prepare_base_dir(base, HP, data_dir=data, tensorboard=tmp_path / "other")
    assert snapshot.changed() == ["input/config/tensorboardoutputconfig.json"]
    snapshot.restore()
    assert tensorboard_dir(paths) == tmp_path / "tb"


def _split(folder: Path) -> Path:
    """A prepare-data output with a validation split: folder/train and folder/validation."""
    _shards(folder / "train", "train tokens")
    _shards(folder / "validation", "held out")
    return folder


def test_each_channel_links_to_its_own_source(tmp_path: Path) -> None:
    """A prepared split gives the train and validation channels their own folders (not DIR itself as train),
    the Hugging Face folder its init_from channel; inputdataconfig.json names the three."""
    base, data, hf = tmp_path / "ml", _split(tmp_path / "data"), _shards(tmp_path / "hf", "{}")
    paths = prepare_base_dir(base, HP, data_dir=data, init_from=hf)
    assert os.readlink(paths.train_dir) == str(data / "train")
    assert os.readlink(paths.validation_dir) == str(data / "validation")
    assert os.readlink(paths.channel_dir("init_from")) == str(hf)
    assert sorted(json.loads(paths.input_data_config_file.read_text())) == ["init_from", "train", "validation"]
    assert json.loads((base / LOCAL_RUN_RECORD).read_text()) == {
        "train_link": str(data / "train"),
        "validation_link": str(data / "validation"),
        "init_from_link": str(hf),
    }
    # data without a split next time: the validation link this module made goes, init_from stays as it was
    plain = _shards(tmp_path / "plain")
    prepare_base_dir(base, HP, data_dir=plain)
    assert os.readlink(paths.train_dir) == str(plain) and not paths.validation_dir.exists()
    assert os.readlink(paths.channel_dir("init_from")) == str(hf)
    assert sorted(json.loads(paths.input_data_config_file.read_text())) == ["init_from", "train"]
    assert _tree(data) == {"train/shard-00000.bin": "train tokens", "validation/shard-00000.bin": "held out"}


def test_a_validation_folder_of_the_users_is_neither_replaced_nor_removed(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    own = _shards(base / "input" / "data" / "validation", "mine")
    with pytest.raises(LayoutError, match="is a folder of its own"):
        prepare_base_dir(base, HP, data_dir=_split(tmp_path / "data"))
    assert not (base / "input" / "config").exists()  # refused before anything was written
    prepare_base_dir(base, HP, data_dir=_shards(tmp_path / "plain"))  # no split: the user's folder stays
    assert _tree(own) == {"shard-00000.bin": "mine"} and not own.is_symlink()
    with pytest.raises(LayoutError, match=r"model folder .* is not a directory"):
        prepare_base_dir(base, HP, init_from=tmp_path / "missing")


def test_a_refused_runs_channel_links_are_put_back(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    first, hf = _split(tmp_path / "first"), _shards(tmp_path / "hf", "{}")
    paths = prepare_base_dir(base, HP, data_dir=first)
    snapshot = LayoutSnapshot.take(paths)
    prepare_base_dir(base, HP, data_dir=_shards(tmp_path / "second"), init_from=hf)
    changed = snapshot.changed()
    assert {"input/data/train (link)", "input/data/validation (link)", "input/data/init_from (link)"} <= set(changed)
    assert snapshot.restore() == changed and snapshot.changed() == []
    assert os.readlink(paths.train_dir) == str(first / "train")
    assert os.readlink(paths.validation_dir) == str(first / "validation")
    assert not paths.channel_dir("init_from").exists() and _tree(hf) == {"shard-00000.bin": "{}"}


# --------------------------------------------------------------------------- supervision

# A stand-in run: says "up", catches SIGINT/SIGTERM like the workers (finish, "save", exit 0),
# and says "still here" whenever asked to stop again.
_RUN = r"""
import signal, sys, time
received = []
def stop(signum, frame):
    received.append(signum)
    print("stop", len(received), signal.Signals(signum).name, flush=True)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
while not received:
    time.sleep(0.01)
if sys.argv[1] == "saves":
    time.sleep(0.5)
    print("checkpoint written", flush=True)
    sys.exit(0)
while True:
    time.sleep(0.01)
"""


def _supervised(
    mode: str, signals: int, sent: int = signal.SIGINT, paths: SageMakerPaths | None = None
) -> tuple[LocalRun, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    seen: list[str] = []

    def echo(line: str) -> None:  # runs in follow's loop: its handlers are installed
        seen.append(line.strip())
        if line.strip() == "up" or (signals > 1 and line.startswith("stop 1")):
            os.kill(os.getpid(), sent)  # as a terminal's Ctrl-C (or its hangup) reaches trainctl alone

    previous = signal.getsignal(signal.SIGHUP)
    try:
        return follow(proc, echo=echo, supervise=True, timeout=120, paths=paths), seen
    finally:
        signal.signal(signal.SIGHUP, previous)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_supervised_run_relays_ctrl_c_and_returns_after_the_run_exits(capfd: pytest.CaptureFixture[str]) -> None:
    previous = signal.getsignal(signal.SIGINT)
    run, seen = _supervised("saves", signals=1)
    assert run.stop_signal == signal.SIGINT and not run.killed and run.returncode == 0
    assert seen == ["up", "stop 1 SIGINT", "checkpoint written"]  # returned only after the "checkpoint"
    assert "a second Ctrl-C kills it without saving" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGINT) is previous  # handlers restored


def test_a_closed_terminal_stops_the_run_as_sigterm_and_waits_for_it(capfd: pytest.CaptureFixture[str]) -> None:
    """Regression: SIGHUP killed trainctl at once; the workers died later at their next print."""
    previous = signal.getsignal(signal.SIGHUP)
    run, seen = _supervised("saves", signals=1, sent=signal.SIGHUP)
    assert run.stop_signal == signal.SIGHUP and run.relayed_signal == signal.SIGTERM and run.returncode == 0
    assert seen == ["up", "stop 1 SIGTERM", "checkpoint written"]  # relayed as SIGTERM, waited for
    assert "SIGHUP received (the terminal went away; handled as SIGTERM)" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGHUP) is previous


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (None, "no training step has begun, so there is nothing to save; it exits once its processes have stopped"),
        ("starting", "no training step has begun, so there is nothing to save"),
        ("training", "the workers finish the step in flight and save a checkpoint before it exits"),
    ],
)
def test_the_first_stop_message_promises_a_checkpoint_only_once_training_began(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], state: str | None, said: str
) -> None:
    """Regression: the message claimed the workers would save a checkpoint before any worker existed."""
    paths = SageMakerPaths(tmp_path)
    if state is not None:
        write_status(paths, TrainerStatus(state))
    _supervised("saves", signals=1, paths=paths)
    err = capfd.readouterr().err
    assert f"SIGINT received: stopping the run as SageMaker does; {said}" in err
    if state != "training":
        assert "save a checkpoint" not in err


def test_a_second_ctrl_c_kills_the_run(capfd: pytest.CaptureFixture[str]) -> None:
    run, seen = _supervised("hangs", signals=2)
    assert run.killed and run.returncode == -signal.SIGKILL
    assert seen == ["up", "stop 1 SIGINT"]
    assert "killing the run and its workers (SIGKILL)" in capfd.readouterr().err


def _trainctl_run(base: Path, shards: Path) -> subprocess.Popen:
    """A long 1-process `trainctl train` in its own process group, as a shell runs a foreground job."""
    cmd = [
        sys.executable,
        "-m",
        "trainctl.cli",
        "train",
        "--base-dir",
        str(base),
        "--data",
        str(shards),
        "--model",
        "gpt-tiny",
        "--num-layers",
        "1",
        "--precision",
        "fp32",
        "--batch-size",
        "2",
        "--seq-length",
        "16",
        "--max-steps",
        "500",
        "--warmup-steps",
        "1",
        "--log-interval",
        "1",
        "--checkpoint-interval",
        "1000",
        "--nproc",
        "1",
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )


@pytest.mark.slow  # a real run, but no shared fixture: free to run beside the "trainer-runs" group
def test_trainctl_train_waits_for_the_checkpoint_after_ctrl_c(tmp_path: Path, pydocs_shards: Path) -> None:
    """Regression: trainctl returned at once on Ctrl-C while the workers went on writing."""
    base = tmp_path / "run"
    proc = _trainctl_run(base, pydocs_shards)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[metrics]"):
            os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C goes to the foreground group
            break
    lines += proc.stdout.readlines()
    output = "".join(lines)
    assert proc.wait(timeout=300) == 128 + signal.SIGINT, output[-3000:]

    from training.checkpoint.verify import complete_steps

    steps = complete_steps(base / "checkpoints")
    assert steps, output[-3000:]  # written before trainctl returned
    assert f"trainctl train: stopped after step {steps[-1]} (checkpoint step-{steps[-1]})" in output
    assert f"[trainer] stopped after step {steps[-1]}" in output
    assert (
        f"[entrypoint] stopped by SIGINT: the workers stopped after step {steps[-1]} and saved it "
        f"(checkpoint step-{steps[-1]}); a restart resumes from step-{steps[-1]}"
    ) in output
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, str(base))]
    assert not leftovers  # no worker goes on in the background


@pytest.mark.slow  # a real run, but no shared fixture: free to run beside the "trainer-runs" group
def test_a_closed_terminal_checkpoints_the_run_instead_of_losing_it(tmp_path: Path, pydocs_shards: Path) -> None:
    """Regression: SIGHUP (terminal closed, ssh dropped) killed trainctl; the workers then died of
    BrokenPipeError at their next print and the work since the last checkpoint was lost."""
    base = tmp_path / "run"
    proc = _trainctl_run(base, pydocs_shards)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("[metrics]"):
            break
    proc.stdout.close()  # the terminal is gone: every later write by trainctl, the entry point or a worker fails
    os.killpg(proc.pid, signal.SIGHUP)  # and the session's foreground group is hung up
    assert proc.wait(timeout=300) == 128 + signal.SIGHUP

    from training.checkpoint.verify import restart_point
    from training.supervision import read_status

    paths = SageMakerPaths(base)
    status = read_status(paths)
    assert status is not None and status.state == "stopped" and status.reason == "SIGTERM/SIGINT received"
    assert status.stopped_after is not None and status.stopped_after >= 1
    assert restart_point(paths.checkpoint_dir).step == status.stopped_after  # the work is in a loadable checkpoint
    assert not paths.failure_file.exists()
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, str(base))]
    assert not leftovers


def _cmdline_mentions(proc_dir: Path, text: str) -> bool:
    try:
        return text in (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
