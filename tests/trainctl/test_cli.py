"""The trainctl entry point: every subcommand registers, and the shared -c flag parses strictly."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from trainctl.cdk_context import context_item
from trainctl.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[2]
GUIDE_REQUEST = str(REPO / "examples" / "guide-default-request.json")


def test_every_listed_subcommand_is_registered():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_help_does_not_import_heavy_modules():
    # `trainctl --help` must stay fast: no torch, aws_cdk or boto3 at import time.
    code = (
        "import sys; from trainctl.cli import build_parser; build_parser();"
        "print(','.join(m for m in ('torch', 'aws_cdk', 'boto3', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_parses_its_arguments_and_makes_one_library_call(name: str) -> None:
    """``run(args)`` imports one function from a trainctl library (never another command) and returns its
    answer: the command's behaviour lives in the library, where the demo and tests call it too."""
    path = REPO / (COMMANDS[name].replace(".", "/") + ".py")
    run = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "run")
    *imports, answer = run.body
    assert len(imports) == 1 and isinstance(imports[0], ast.ImportFrom), ast.unparse(run)
    library = imports[0].module or ""
    package = COMMANDS[name].partition(".")[0]  # trainctl, or the package that adds the command (devtools)
    assert library.startswith(f"{package}.") and not library.startswith("trainctl.commands"), library
    assert library not in COMMANDS.values(), library  # never another command
    assert isinstance(answer, ast.Return) and isinstance(answer.value, ast.Call), ast.unparse(run)
    callee = answer.value.func
    assert isinstance(callee, ast.Name) and [alias.name for alias in imports[0].names] == [callee.id], ast.unparse(run)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("removalPolicy=destroy", ("removalPolicy", "destroy")),
        ('trainingPlanArns=["a=b"]', ("trainingPlanArns", '["a=b"]')),
        ("key=", ("key", "")),
    ],
)
def test_context_item_parses_key_value(text, expected):
    assert context_item(text) == expected


@pytest.mark.parametrize("text", ["removalPolicy", "=destroy", " =x"])
def test_context_item_rejects_malformed(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
        context_item(text)


def test_submit_local_refuses_without_the_emulator(monkeypatch, capsys):
    # --local must never reach real AWS with leftover credentials: it needs the emulator's endpoint.
    from trainctl.cli import main

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert main(["submit", "--local", GUIDE_REQUEST]) == 2
    assert "AWS_ENDPOINT_URL is not set" in capsys.readouterr().err


def test_submit_local_names_a_missing_setting(monkeypatch, capsys):
    from trainctl.cli import main

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("TRAINER_IMAGE_URIS", "DATA_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    assert main(["submit", "--local", GUIDE_REQUEST]) == 2
    assert "is required and not set" in capsys.readouterr().err


def test_a_command_whose_module_or_package_is_missing_is_left_out(monkeypatch, tmp_path):
    # Python names the first missing package (``devtools``), not the command's module: both are left out.
    (tmp_path / "present_pkg").mkdir()
    (tmp_path / "present_pkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "absent-package", "absent_pkg_for_the_test.sub.command")
    monkeypatch.setitem(COMMANDS, "absent-module", "present_pkg.command")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "plan" in sub.choices and not {"absent-package", "absent-module"} & set(sub.choices)


def test_a_command_module_that_imports_something_missing_raises(monkeypatch, tmp_path):
    (tmp_path / "broken_command_for_the_test.py").write_text("import absent_dependency_for_the_test\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "broken", "broken_command_for_the_test")
    with pytest.raises(ModuleNotFoundError, match="absent_dependency_for_the_test"):
        build_parser()


def test_every_command_but_the_tools_runs_without_devtools():
    # the product without the `local` extra: devtools is not importable at all
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'devtools':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from trainctl.cli import main\n"
        "sys.exit(main(['plan', '--model', 'gpt-tiny', '--json']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith(("{", "["))


@pytest.mark.parametrize("command", ["train", "plan"])
def test_a_hyperparameter_flag_shows_what_it_takes(command: str) -> None:
    """Each flag's value in the usage comes from its declaration: its choices, else its name (not ``VALUE``)."""
    from platform_spec.hyperparameters import SPECS

    sub = next(a for a in build_parser(only=command)._actions if isinstance(a, argparse._SubParsersAction))
    usage = sub.choices[command].format_usage()
    assert "VALUE" not in usage
    for shown in (
        "[--batch-size BATCH_SIZE]",
        "[--num-kv-heads NUM_KV_HEADS]",
        "[--precision {" + ",".join(SPECS["precision"].choices or ()) + "}]",
        "[--activation-checkpointing {off,full,selective:N}]",
        "[--reshard-after-forward {true,false}]",
    ):
        assert shown in usage, shown
