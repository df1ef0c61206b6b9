"""`trainctl local-aws` as the README runs it on a fresh clone, and its errors: the env file's
folder is created, and "cannot listen" is said only when it cannot listen."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainctl.cli import main
from trainctl.local_aws import write_env_file

from .conftest import REPO

pytestmark = pytest.mark.xdist_group("trainctl-aws")


def test_readme_local_aws_then_submit_local_on_a_fresh_clone(aws, aws_env_file: Path) -> None:
    # README: `trainctl local-aws --port 5000 --plans examples/plans.json --env-file .demo/aws.env`, before
    # `make demo` made .demo/, then `source .demo/aws.env && trainctl submit --local examples/guide-default-request.json`
    assert aws_env_file.is_file() and not any(p.name.endswith(".tmp") for p in aws_env_file.parent.iterdir())
    assert f"export AWS_ENDPOINT_URL={aws.endpoint}\n" in aws_env_file.read_text()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        ["bash", "-c", f'source "{aws_env_file}" && exec "$0" -m trainctl.cli submit --local examples/guide-default-request.json',
         sys.executable],
        cwd=REPO, env=clean, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    response = json.loads(done.stdout)
    assert response["status"] == "submitted" and response["training_job_name"] == "guide-default-gpt-1b-mxfp8"
    assert response["capacity"]["training_plan_arn"].endswith("training-plan/p6-b200-active")
    aws.complete_active_jobs()


def test_a_port_in_use_is_the_only_thing_blamed_on_listening(tmp_path: Path) -> None:
    env_file = tmp_path / "new" / "aws.env"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "trainctl.cli", "local-aws", "--port", str(port), "--env-file", str(env_file), "--quiet"],
            capture_output=True, text=True, timeout=300,
        )
    assert done.returncode == 2
    assert done.stderr == f"trainctl local-aws: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert not env_file.exists()  # nothing written for an emulator that never ran


def test_an_env_file_path_that_cannot_be_written_is_refused_before_listening(tmp_path: Path, capsys) -> None:
    assert main(["local-aws", "--port", "0", "--env-file", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"trainctl local-aws: --env-file {tmp_path}: {tmp_path} is a folder; expected a file path\n"
    a_file = tmp_path / "plain"
    a_file.write_text("")
    assert main(["local-aws", "--port", "0", "--env-file", str(a_file / "aws.env")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainctl local-aws: --env-file {a_file / 'aws.env'}: ") and "listen" not in err


def test_port_outside_the_tcp_range_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["local-aws", "--port", "70000"])
    assert exited.value.code == 2
    assert "argument --port: '70000': expected a TCP port 0-65535" in capsys.readouterr().err


def test_write_env_file_creates_its_folder_and_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "aws.env"
    write_env_file(path, {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "X": "it's"})
    write_env_file(path, {"AWS_ENDPOINT_URL": "http://127.0.0.1:2"})
    assert path.read_text().splitlines()[1:] == ["export AWS_ENDPOINT_URL=http://127.0.0.1:2"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["aws.env"]  # no partial file left beside it
