"""What ``trainctl`` imports before it answers: its start-up is what people wait for (issue 17).

Not timed (speed is measured in ``benchmarks/startup.py``): each test runs the command in a fresh interpreter
and pins which modules were loaded when it finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainctl.cli import ALL, COMMANDS, build_parser, command_in

REPO = Path(__file__).resolve().parents[2]

HEAVY = ("rich", "matplotlib", "torch", "numpy", "boto3", "botocore", "aws_cdk", "jsii", "moto", "cdk_nag")
"""Libraries no start-up of ``trainctl --help`` or ``trainctl plan --json`` may import."""

RUN = textwrap.dedent(
    """
    import json, sys
    from trainctl.cli import main
    codes = []
    for argv in json.loads(sys.argv[1]):
        try:
            codes.append(main(argv))
        except SystemExit as exc:  # --help exits 0
            codes.append(exc.code)
    sys.stdout.flush()
    print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}), file=sys.stderr)
    """
)


def loaded(*argvs: list[str], env: dict[str, str] | None = None) -> tuple[list[int], set[str], str]:
    """Run ``trainctl ARGV`` for each argv in one fresh interpreter (stdout a pipe, as in a script; ``env``
    added to the environment); return the exit codes, the top-level names of every module loaded by the end,
    and what was printed."""
    result = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(list(argvs))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return report["codes"], {name.partition(".")[0] for name in report["modules"]}, result.stdout


def test_help_lists_every_command_and_imports_only_the_standard_library_and_the_cli() -> None:
    codes, modules, out = loaded(["--help"])
    assert codes == [0]
    for name in COMMANDS:
        assert name in out
    assert not set(HEAVY) & modules
    # the command modules' top levels import nothing of ours but the CLI: no fact tables, no planner
    assert not {"platform_spec", "planner", "model_families", "training", "stacks"} & modules


def test_plan_as_json_imports_the_planner_and_nothing_heavy() -> None:
    codes, modules, out = loaded(["plan", "--json"])
    assert codes == [0]
    assert json.loads(out)["fits"] is True  # the guide's default request, planned
    assert "planner" in modules
    assert not set(HEAVY) & modules


def test_plan_tables_import_rich_to_draw_and_nothing_else_heavy() -> None:
    """rich draws the tables (a pipe gets its plain text, a terminal its colours); it is imported after the
    estimate, when there is a table to draw, and nothing else heavy is."""
    codes, modules, out = loaded(["plan"])
    assert codes == [0]
    assert "Memory per GPU (GB)" in out and "Recommendations" in out
    assert "rich" in modules
    assert not (set(HEAVY) - {"rich"}) & modules


def test_plan_tables_on_a_terminal_import_rich_and_nothing_else_heavy() -> None:
    """On a terminal (here: ``TTY_COMPATIBLE=1``, rich's own switch) rich draws the tables, in colour (the
    verdict in green or red); it is imported after the estimate, and nothing else heavy is."""
    codes, modules, out = loaded(["plan"], env={"TTY_COMPATIBLE": "1"})
    assert codes == [0]
    assert "Memory per GPU (GB)" in out and "\x1b[" in out
    assert "rich" in modules
    assert not (set(HEAVY) - {"rich"}) & modules


def test_a_refused_plan_answers_before_anything_is_drawn() -> None:
    codes, modules, _ = loaded(["plan", "--model", "gpt-1b", "--batch-size", "0"])
    assert codes == [2]
    assert not set(HEAVY) & modules


def test_every_commands_help_is_light() -> None:
    """``trainctl COMMAND --help`` builds that command's flags (the catalogue's instance types, the trainer's
    hyperparameters) without importing what the command then runs."""
    codes, modules, out = loaded(*([name, "--help"] for name in COMMANDS))
    assert codes == [0] * len(COMMANDS)
    assert "--instance-type" in out and "--base-dir" in out  # plan's and train's own flags were built
    assert not set(HEAVY) & modules


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([], None),
        (["--help"], None),
        (["-h", "plan"], "plan"),
        (["plan", "--json"], "plan"),
        (["submit", "--local", "-"], "submit"),
        (["nonsense"], "nonsense"),
    ],
)
def test_the_command_is_the_first_item_that_is_not_an_option(argv, command) -> None:
    assert command_in(argv) == command


def test_only_the_chosen_commands_arguments_are_built() -> None:
    def options(parser, name):
        sub = next(a for a in parser._actions if a.dest == "command")
        return {o for a in sub.choices[name]._actions for o in a.option_strings}

    plan_only = build_parser(only="plan")
    assert "--instance-type" in options(plan_only, "plan")
    assert options(plan_only, "train") == set()  # never parsed in that process
    none = build_parser(only=None)
    assert all(options(none, name) == set() for name in COMMANDS)
    full = build_parser(only=ALL)
    assert "--instance-type" in options(full, "plan") and "--base-dir" in options(full, "train")


def test_an_unknown_command_is_refused_with_the_list() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainctl.cli", "nonsense"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "invalid choice: 'nonsense'" in result.stderr and "plan" in result.stderr


def test_a_command_not_in_this_build_is_refused_with_the_list_of_those_that_are(monkeypatch, capsys) -> None:
    monkeypatch.setitem(COMMANDS, "absent", "trainctl.commands.absent")
    parser = build_parser(only="absent")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["absent"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'absent'" in err and "'plan'" in err and "'train'" in err
