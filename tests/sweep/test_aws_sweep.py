"""Sweeps of training jobs against the `trainctl local-aws` emulator: submission through the
submitter, idempotent re-runs, waiting, and the report with jobs in every state."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from devtools.local_aws.stack import DUMMY_CREDENTIALS
from platform_spec.metric_lines import format_line
from trainctl import cli
from trainctl.reports.writer import build_report, write_report
from trainctl.sweeps.jobs import wait_for_jobs
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.runner import run_aws_sweep
from trainctl.sweeps.state import Sweep, SweepError, load_sweep
from trainctl.sweeps.submission import CONFIG_TAG, SWEEP_TAG

from .conftest import AT_RISK_BASE, P5_BASE_REQUEST

pytestmark = pytest.mark.xdist_group("sweep")

GRID = {"precision": ["bf16", "fp8", "mxfp8"], "batch_size": [1, 2, 4, 64]}


def _job_names(aws) -> set[str]:
    return {j["name"] for j in aws.training_jobs()}


def _settled_calls(aws) -> int:
    """How many requests the emulator has recorded, once the last one's record has landed (it may be written
    just after its answer)."""
    count = -1
    while count != len(aws.calls()):
        count = len(aws.calls())
        time.sleep(0.2)
    return count


def _lines(offset: float, tokens_per_sec: float, memory_gb: float) -> list[str]:
    """Metric lines of a 100-step job logged every 10 steps: loss 5.0 -> 3.2 (+ offset)."""
    return [
        format_line(
            {
                "step": s,
                "loss": 5.0 - 0.02 * s + offset,
                "tokens_per_sec": tokens_per_sec + s,
                "tokens_per_sec_per_gpu": (tokens_per_sec + s) / 8,
                "mfu": 30.0 + s / 100,
                "peak_mem_allocated_gb": memory_gb,
            }
        )
        for s in range(10, 101, 10)
    ]


def test_a_sweep_submits_through_the_submitter_and_a_rerun_duplicates_nothing(aws, env, tmp_path: Path) -> None:
    before = _job_names(aws)
    first = run_aws_sweep("idem", GRID, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    submitted = [c for c in first.configs if c.job_name]
    # 12 configs: mxfp8 (3) does not run on Hopper, batch 64 (bf16, fp8) is predicted OOM
    assert len(first.configs) == 12 and len(first.skipped) == 6 and len(submitted) == 6
    assert {c.status for c in submitted} == {"InProgress"}
    assert _job_names(aws) - before == {c.job_name for c in submitted}
    sm = aws.client("sagemaker")
    job = sm.describe_training_job(TrainingJobName=submitted[0].job_name)
    assert job["HyperParameters"]["precision"] == "bf16" and job["HyperParameters"]["batch_size"] == "1"
    assert job["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge"
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=job["TrainingJobArn"])["Tags"]}
    assert tags[SWEEP_TAG] == "idem" and tags[CONFIG_TAG] == "precision=bf16 batch_size=1"
    assert (tmp_path / "idem" / "submitter.log").read_text().count('"training job created"') == 6

    # the same sweep again: the state says every job exists, nothing is sent
    again = run_aws_sweep("idem", GRID, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    assert again.answers == []
    # the state lost: the deterministic job names and client tokens find the same jobs
    shutil.rmtree(tmp_path / "idem")
    third = run_aws_sweep("idem", GRID, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    assert [(a["training_job_name"], a["replayed"]) for a in third.answers] == [(c.job_name, True) for c in submitted]
    assert _job_names(aws) - before == {c.job_name for c in submitted}
    for c in submitted:
        aws.set_job_status(c.job_name, "Completed")


def test_refusals_are_recorded_and_retried_on_the_next_run(aws, env, tmp_path: Path) -> None:
    base = {**P5_BASE_REQUEST, "capacity": "training-plan"}  # the emulator has no plans
    result = run_aws_sweep(
        "refused", {"precision": ["bf16"]}, base, sweeps_dir=tmp_path, env=env, wait=False, progress=False
    )
    (config,) = result.configs
    assert config.status == "Rejected" and config.reason.startswith("NoCapacity: ")
    assert result.failed == [config]
    again = run_aws_sweep("refused", None, None, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    assert [a["status"] for a in again.answers] == ["Rejected"]  # retried, refused again
    rows = build_report("refused", sweeps_dir=tmp_path, env=env).results
    assert [(r.status, r.reason) for r in rows] == [("Rejected", config.reason)]


def test_a_rerun_without_its_grid_refuses_set_and_base(aws, env, tmp_path: Path, monkeypatch, capsys) -> None:
    """A sweep's grid and base are fixed by its first run: resuming it (no --grid) with --set or --base would
    ignore them, so it is refused with exit 2, naming the flag, and nothing is submitted or written."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    base = _base_file(tmp_path)
    common = ["sweep", "--name", "fixed", "--dir", str(tmp_path), "--no-progress", "--no-wait"]
    assert cli.main([*common, "--grid", "precision=bf16", "--base", base]) == 0
    capsys.readouterr()
    state, jobs, calls = (tmp_path / "fixed" / "sweep.json").read_bytes(), _job_names(aws), _settled_calls(aws)
    for extra, named in (
        (["--set", "max_steps=abc"], "--set"),
        (["--set", "max_steps=10"], "--set"),
        (["--base", base], "--base"),
        (["--base", base, "--set", "max_steps=10"], "--base and --set"),
    ):
        assert cli.main([*common, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith(f"trainctl sweep: {named}: sweep 'fixed' exists in {tmp_path}"), err
        assert "its grid and base are fixed by its first run" in err and "choose another --name" in err
        assert _settled_calls(aws) == calls and _job_names(aws) == jobs
        assert (tmp_path / "fixed" / "sweep.json").read_bytes() == state
    assert cli.main(common) == 0  # resumed as defined


def test_report_shows_jobs_in_every_state(aws, env, tmp_path: Path) -> None:
    result = run_aws_sweep("states", GRID, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    job = {c.title: c.job_name for c in result.configs if c.job_name}
    aws.set_job_status(job["precision=bf16 batch_size=1"], "InProgress", secondary_status="Training")
    aws.set_job_status(job["precision=bf16 batch_size=1"], "Completed", log_lines=_lines(0.0, 300_000, 30.5))
    aws.set_job_status(job["precision=fp8 batch_size=1"], "Completed", log_lines=_lines(0.02, 360_000, 31.0))
    aws.set_job_status(
        job["precision=bf16 batch_size=2"], "Failed", failure_reason="AlgorithmError: CUDA out of memory"
    )
    aws.client("sagemaker").stop_training_job(TrainingJobName=job["precision=fp8 batch_size=2"])
    aws.set_job_status(job["precision=fp8 batch_size=2"], "Stopped")
    aws.set_job_status(
        job["precision=fp8 batch_size=4"],
        "Completed",
        final_metrics={"train:loss": 3.25, "train:tokens_per_sec": 400_000.0},
    )
    aws.set_job_status(job["precision=bf16 batch_size=4"], "InProgress", secondary_status="Training")  # stays there

    still = wait_for_jobs(result.sweep, env=env, timeout=0.3, poll_interval=0.1)
    assert [c.title for c in still] == ["precision=bf16 batch_size=4"]
    state = {c.title: (c.status, c.reason) for c in load_sweep("states", tmp_path).configs}
    assert state["precision=bf16 batch_size=2"] == ("Failed", "AlgorithmError: CUDA out of memory")
    assert state["precision=fp8 batch_size=2"][0] == "Stopped"

    # the report is read by a person, whose role reads the jobs' logs (the submitter's may not): the administrator
    person = {**env, "AWS_ACCESS_KEY_ID": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"]}
    paths = write_report("states", tmp_path / "report", sweeps_dir=tmp_path, env=person)
    data = json.loads(paths.data.read_text())
    rows = {r["label"]: r for r in data["rows"]}
    assert len(rows) == 12  # the report never hides a configuration
    assert {label: r["status"] for label, r in rows.items()} == {
        "bf16 bs1": "Completed",
        "bf16 bs2": "Failed",
        "bf16 bs4": "InProgress",
        "bf16 bs64": "Skipped",
        "fp8 bs1": "Completed",
        "fp8 bs2": "Stopped",
        "fp8 bs4": "Completed",
        "fp8 bs64": "Skipped",
        "mxfp8 bs1": "Skipped",
        "mxfp8 bs2": "Skipped",
        "mxfp8 bs4": "Skipped",
        "mxfp8 bs64": "Skipped",
    }
    assert rows["bf16 bs2"]["reason"] == "AlgorithmError: CUDA out of memory"
    assert rows["bf16 bs4"]["reason"].startswith("Training")
    assert rows["fp8 bs2"]["reason"].startswith("Stopped")
    assert rows["mxfp8 bs1"]["reason"].startswith("hardware: mxfp8 does not run on H100")
    assert rows["bf16 bs64"]["reason"].startswith("predicted out of memory")

    # per-step curves from CloudWatch Logs; steady state = median of steps 60-100
    bf16 = rows["bf16 bs1"]
    assert bf16["source"] == "CloudWatch Logs (10 metric lines)" and len(bf16["curve"]) == 10
    assert bf16["tokens_per_sec"] == pytest.approx(300_080.0) and bf16["mfu"] == pytest.approx(30.8)
    assert bf16["peak_memory_gb"] == pytest.approx(30.5) and bf16["final_loss"] == pytest.approx(3.0)
    predicted = bf16["predicted"]
    assert predicted["instance_type"] == "ml.p5.48xlarge" and bf16["prediction_comparable"] is True
    assert bf16["tokens_per_sec_measured_over_predicted"] == pytest.approx(
        300_080.0 / predicted["tokens_per_second"], rel=1e-6
    )
    assert bf16["memory_measured_over_predicted"] == pytest.approx(30.5 / predicted["memory_gb_total"], rel=1e-6)
    # final values only
    fp8_4 = rows["fp8 bs4"]
    assert fp8_4["source"].startswith("FinalMetricDataList") and fp8_4["curve"] == []
    assert (fp8_4["final_loss"], fp8_4["tokens_per_sec"], fp8_4["final_step"]) == (3.25, 400_000.0, 100)

    divs = {(d["group"], d["precision"]): d for d in data["divergences"]}
    curves = divs[("bs1", "fp8")]
    assert curves["baseline"] == "bf16" and curves["basis"] == "curves" and curves["steps"] == 10
    assert curves["mean_abs"] == pytest.approx(0.02, abs=1e-6) and curves["max_abs"] == pytest.approx(0.02, abs=1e-6)
    assert set(divs) == {("bs1", "fp8")}  # bs2: bf16 failed; bs4: bf16 still running

    text = paths.markdown.read_text()
    table = [line for line in text.splitlines() if line.startswith("| ") and line[2:4].isdigit()]
    assert len(table) == 12
    assert "| AlgorithmError: CUDA out of memory |" in text
    assert (
        "- fp8 vs bf16 (bs1): smoothed loss differs by mean 0.0200, max 0.0200 nats/token over 10 common steps" in text
    )
    assert "No per-step loss curve for 07-fp8-bs4" in text
    ratio = bf16["tokens_per_sec_measured_over_predicted"]
    assert f"({ratio:.2f}x)" in table[0]
    for png in (paths.throughput_memory, paths.loss_curves):
        assert png.read_bytes().startswith(b"\x89PNG")
    aws.set_job_status(job["precision=bf16 batch_size=4"], "Completed")


def test_cli_sweep_waits_times_out_resumes_and_validates(aws, env, tmp_path: Path, monkeypatch, capsys) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(P5_BASE_REQUEST))
    args = [
        "sweep",
        "--name",
        "cli",
        "--grid",
        "precision=bf16,mxfp8",
        "--base",
        str(base),
        "--dir",
        str(tmp_path),
        "--no-progress",
        "--poll-interval",
        "0.1",
    ]
    before = _job_names(aws)

    assert cli.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Validated" in out and "hardware: mxfp8" in out
    assert _job_names(aws) == before and not (tmp_path / "cli").exists()

    assert cli.main([*args, "--timeout", "0.3"]) == 3
    assert "still running" in capsys.readouterr().err
    (name,) = _job_names(aws) - before
    aws.set_job_status(name, "Completed", log_lines=_lines(0.0, 300_000, 30.5))
    assert cli.main([*args, "--timeout", "5"]) == 0
    assert _job_names(aws) - before == {name}
    assert load_sweep("cli", tmp_path).configs[0].status == "Completed"

    assert cli.main(["sweep", "--name", "cli2", "--grid", "batch_sise=1", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "hyperparameter 'batch_sise'" in err and "batch_size" in err
    assert cli.main(["sweep", "--name", "cli2", "--grid", "precision=bf17", "--dir", str(tmp_path)]) == 2
    assert "expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4" in capsys.readouterr().err


# --- the in-process submitter runs only against the emulator; exit statuses ------------------------


def _base_file(tmp_path: Path, **overrides) -> str:
    path = tmp_path / "base.json"
    path.write_text(json.dumps({**P5_BASE_REQUEST, **overrides}))
    return str(path)


def test_in_process_sweep_refuses_real_aws(aws, env, tmp_path: Path, monkeypatch, capsys) -> None:
    # credentials in the environment, no AWS_ENDPOINT_URL: the in-process submitter would create real jobs
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    calls = len(aws.calls())
    args = [
        "sweep",
        "--name",
        "real",
        "--grid",
        "precision=bf16",
        "--base",
        _base_file(tmp_path),
        "--dir",
        str(tmp_path),
        "--no-progress",
    ]
    for extra in ([], ["--dry-run"]):
        assert cli.main([*args, *extra]) == 2
        assert capsys.readouterr().err.startswith(
            "trainctl sweep: AWS_ENDPOINT_URL is not set; in-process submission runs only against the emulator"
        )
    assert not (tmp_path / "real").exists() and len(aws.calls()) == calls
    with pytest.raises(SweepError, match="AWS_ENDPOINT_URL is not set"):
        run_aws_sweep(
            "real",
            {"precision": ["bf16"]},
            P5_BASE_REQUEST,
            sweeps_dir=tmp_path,
            env={k: v for k, v in env.items() if k != "AWS_ENDPOINT_URL"},
            wait=False,
            progress=False,
        )
    assert not (tmp_path / "real").exists()


def test_an_incomplete_submitter_environment_stops_the_sweep_naming_the_variable(aws, env, tmp_path: Path) -> None:
    """The in-process runtime's ConfigurationError is caught by its type (it was matched by class name):
    the sweep stops with the fix, sends nothing and leaves every configuration to submit on the next run."""
    before = _job_names(aws)
    broken = {k: v for k, v in env.items() if k != "EXECUTION_ROLE_ARN"}
    with pytest.raises(
        SweepError,
        match=r"^the submitter's environment is incomplete: environment variable EXECUTION_ROLE_ARN is required "
        r"and not set; source the env file of `trainctl local-aws --env-file FILE`, or use --function NAME$",
    ):
        run_aws_sweep("unset", {"precision": ["bf16"]}, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=broken, wait=False)
    assert _job_names(aws) == before
    assert [c.status for c in load_sweep("unset", sweeps_dir=tmp_path).configs] == ["Pending"]
    again = run_aws_sweep("unset", None, None, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    assert [c.status for c in again.configs] == ["InProgress"] and len(_job_names(aws) - before) == 1


def test_a_dry_run_nothing_would_pass_and_an_all_skipped_grid_exit_1(
    aws, env, tmp_path: Path, monkeypatch, capsys
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    refused = _base_file(tmp_path, capacity="training-plan")  # the emulator has no plans
    assert (
        cli.main(
            [
                "sweep",
                "--name",
                "dry",
                "--grid",
                "precision=bf16,fp8",
                "--base",
                refused,
                "--dir",
                str(tmp_path),
                "--no-progress",
                "--dry-run",
            ]
        )
        == 1
    )
    last = capsys.readouterr().err.splitlines()[-1]  # after the submitter's JSON logs
    assert last.startswith("trainctl sweep: 2 configuration(s) would not run; first: 01-bf16: NoCapacity: ")
    # mxfp8 does not run on Hopper: nothing to run is not a success
    assert (
        cli.main(
            [
                "sweep",
                "--name",
                "hopper",
                "--grid",
                "precision=mxfp8",
                "--base",
                _base_file(tmp_path),
                "--dir",
                str(tmp_path),
                "--no-progress",
                "--no-wait",
            ]
        )
        == 1
    )
    assert (
        capsys.readouterr().err
        == "trainctl sweep: every configuration of hopper was skipped (see the reasons above); nothing to run\n"
    )


def test_an_unreachable_emulator_stops_the_sweep_and_a_rerun_resumes(aws, env, tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = {**env, "AWS_ENDPOINT_URL": dead, "AWS_MAX_ATTEMPTS": "1"}
    grid = {"precision": ["bf16", "fp8"]}
    result = run_aws_sweep("down", grid, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=down, wait=False, progress=False)
    assert [c.status for c in result.configs] == ["SubmitError", "Pending"]
    assert result.configs[0].reason.startswith(f"cannot reach AWS_ENDPOINT_URL {dead} (")
    again = run_aws_sweep("down", grid, P5_BASE_REQUEST, sweeps_dir=tmp_path, env=env, wait=False, progress=False)
    assert [c.status for c in again.configs] == ["InProgress", "InProgress"]
    for c in again.configs:
        aws.set_job_status(c.job_name, "Completed")


# --- issue 14: a model_config base, shape axes and memory verdicts, through the submitter ------------------


def test_a_model_config_sweep_with_a_shape_axis_and_an_accepted_risk_is_what_the_submitter_runs(
    aws, env, tmp_path: Path
) -> None:
    """The submitter agrees with the sweep's planning: the shape of the base's model_config, varied by a grid
    axis, is submitted as hyperparameters (beside a model_config the submitter would refuse them), and an
    at-risk configuration runs once the base accepts the risk -- refused by neither."""
    config_json = json.loads((Path(__file__).parents[1] / "fixtures" / "llama3_8b_config.json").read_text())
    base = {
        **P5_BASE_REQUEST,
        "model_config": config_json,
        "hyperparameters": {"precision": "bf16", "seq_length": 8192, "activation_checkpointing": "full"},
    }
    before = _job_names(aws)
    result = run_aws_sweep(
        "llama-kv", {"num_kv_heads": [8, 32]}, base, sweeps_dir=tmp_path, env=env, wait=False, progress=False
    )
    assert [c.status for c in result.configs] == ["InProgress", "InProgress"], [c.reason for c in result.configs]
    sm = aws.client("sagemaker")
    for config, kv_heads in zip(result.configs, ("8", "32"), strict=True):
        job = sm.describe_training_job(TrainingJobName=config.job_name)["HyperParameters"]
        assert (job["model"], job["num_kv_heads"], job["hidden_size"], job["num_layers"]) == (
            "llama",
            kv_heads,
            "4096",
            "32",
        )
        assert (job["rope_base"], job["vocab_size"], job["tied_embeddings"]) == ("500000.0", "128256", "false")

    risky = AT_RISK_BASE  # batch 7: at-risk
    skipped = run_aws_sweep(
        "risk", {"batch_size": [7]}, risky, sweeps_dir=tmp_path, env=env, wait=False, progress=False
    )
    assert skipped.configs[0].status == "Skipped" and skipped.answers == []
    accepted = run_aws_sweep(
        "risk",
        {"batch_size": [7]},
        {**risky, "accept_memory_risk": True},
        sweeps_dir=tmp_path,
        env=env,
        wait=False,
        progress=False,
    )
    (config,) = accepted.configs
    assert config.status == "InProgress" and config.prediction["status"] == "at-risk", config.reason
    assert [a["status"] for a in accepted.answers] == ["InProgress"]
    # the submitter itself refuses it without accept_memory_risk: the sweep's skip was its rule
    from trainctl.submitter_client import submit_local

    refused = submit_local(
        {**risky, "hyperparameters": {**risky["hyperparameters"], "batch_size": 7}, "dry_run": True}, env
    )
    assert refused["status"] == "rejected" and refused["error"]["details"]["status"] == "at-risk"
    assert len(_job_names(aws) - before) == 3
    for c in [*result.configs, config]:
        aws.set_job_status(c.job_name, "Completed")


@pytest.mark.parametrize(
    ("mode", "resumed_as", "expected"),
    [
        ("aws", "local", "sweep 's2' is an AWS sweep; run it without --local"),
        ("local", "aws", "sweep 's2' is a local sweep; run it with --local"),
    ],
)
def test_a_rerun_in_the_other_mode_names_the_sweeps_mode(tmp_path: Path, mode, resumed_as, expected) -> None:
    Sweep(name="s2", mode=mode, grid={"precision": ["bf16"]}, base={}, target={}, directory=tmp_path / "s2").save()
    with pytest.raises(SweepError) as refused:
        plan_sweep("s2", None, mode=resumed_as, sweeps_dir=tmp_path)
    assert str(refused.value) == expected
