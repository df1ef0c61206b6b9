"""Where a command writes is checked before it does any work: a file where a folder goes (or a folder where a
file goes, or a file among the parents) is one line naming the argument, exit status 2, nothing written and no
long step started (a synth, a training run). Regression: each of these was a traceback (FileExistsError,
NotADirectoryError, IsADirectoryError, a LayoutError), some after the dashboard's synth or the sweep's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainctl.cli import main
from trainctl.output_paths import file_problem, folder_problem, os_error_text, output_error


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


def test_folder_and_file_problems(tmp_path: Path, a_file: Path) -> None:
    assert folder_problem(tmp_path) is None and folder_problem(tmp_path / "new" / "deeper") is None
    assert folder_problem(a_file) == f"{a_file} is a file"
    assert folder_problem(a_file / "sub" / "deeper") == f"{a_file} is a file"
    assert file_problem(tmp_path / "new" / "out.json") is None and file_problem(a_file) is None  # replaced
    assert file_problem(tmp_path) == f"{tmp_path} is a folder"
    assert file_problem(a_file / "out.json") == f"{a_file} is a file"
    refusal = output_error("--out", a_file, f"{a_file} is a file")
    assert (refusal.field, refusal.value) == ("--out", str(a_file))
    assert str(refusal) == f"--out: got '{a_file}'; expected a folder path (created if missing) ({a_file} is a file)"
    assert os_error_text(FileExistsError(17, "File exists", "x")) == "File exists: x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # the checks create nothing


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["dashboard", "--out", "{tmp}"], "trainctl dashboard: --out: got '{tmp}'; expected a file path"),
        (["dashboard", "--out", "{file}/dashboard.json"], "trainctl dashboard: --out: got '{file}/dashboard.json'"),
        (["report", "--out", "{file}", "--dir", "{tmp}/sweeps", "s"], "trainctl report: --out: got '{file}'"),
        (["report", "--out", "{file}/r", "--dir", "{tmp}/sweeps", "s"], "trainctl report: --out: got '{file}/r'"),
        (
            ["sweep", "--name", "s", "--local", "--grid", "precision=fp32", "--dir", "{file}"],
            "trainctl sweep: --dir: got '{file}'; expected a folder path",
        ),
        (
            [
                "sweep",
                "--name",
                "s",
                "--local",
                "--grid",
                "precision=fp32",
                "--dir",
                "{tmp}/sweeps",
                "--data",
                "{file}",
            ],
            "trainctl sweep: --data: got '{file}'; expected a folder of token shards (trainctl prepare-data) (is a file)",
        ),
        (
            [
                "sweep",
                "--name",
                "s",
                "--local",
                "--grid",
                "precision=fp32",
                "--dir",
                "{tmp}/sweeps",
                "--data",
                "{tmp}/no",
            ],
            "trainctl sweep: --data: got '{tmp}/no'; expected a folder of token shards",
        ),
    ],
)
def test_an_output_argument_that_cannot_be_written_is_one_line_before_any_work(
    argv: list[str], expected: str, tmp_path: Path, a_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill = {"tmp": str(tmp_path), "file": str(a_file)}
    assert main([arg.format(**fill) for arg in argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(expected.format(**fill)), captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and a_file.read_text() == "x"  # nothing written
