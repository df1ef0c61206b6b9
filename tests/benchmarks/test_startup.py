"""benchmarks/startup.py's arithmetic and instruments (not its timings): the modelled memory curve gives the
submitting function's import and the reader's, and each init row times the import it names."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("benchmarks_startup", REPO / "benchmarks" / "startup.py")
startup = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = startup  # its dataclass resolves its annotations through sys.modules
_spec.loader.exec_module(startup)


def test_the_memory_curve_models_both_functions_at_each_size() -> None:
    points = {p["memory_mb"]: p for p in startup.memory_curve(0.3, 512, 0.2)}
    # 1,769 MB is one vCPU: 512 MB runs one thread 1769/512 times slower; above one vCPU, no faster
    assert points[512] == {
        "memory_mb": 512,
        "vcpu_share": 0.289,
        "modelled_import_ms": 1036.5,
        "modelled_reader_import_ms": 691.0,
        "configured": True,
    }
    assert (points[3008]["modelled_import_ms"], points[3008]["modelled_reader_import_ms"]) == (300.0, 200.0)
    assert "modelled_reader_import_ms" not in startup.memory_curve(0.2, 512)[0]


def test_the_report_shows_the_readers_column_of_the_curve() -> None:
    results = {
        "rows": [],
        "repeats": 3,
        "python": "3.11",
        "cpus": 2,
        "memory_curve": {
            "one_core_ms": 300.0,
            "reader_one_core_ms": 200.0,
            "points": startup.memory_curve(0.3, 512, 0.2),
            "modelled": True,
        },
    }
    text = startup.markdown(results)
    assert "its init is the one-core time at every size, 300.0 ms here (200.0 ms for the reader)" in text
    assert "| memory MB | vCPU share | modelled init ms | the reader's ms | |" in text
    assert "| 512 | 0.289 | 1036.5 | 691.0 | configured (JobSubmitterProps.memory_size) |" in text


def test_the_init_row_imports_the_handler_as_lambda_does_making_clients_and_configuration() -> None:
    code = (
        "from platform_constructs.submitter.runtime import handler; "
        "print(handler.DEPENDENCIES_PREPARED, handler.SUBMISSIONS_PRELOADED)"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **startup.lambda_environ()}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def _timed_statement(statement: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``statement`` run as :func:`startup.timed_import` runs a row's subject (``import`` + the statement)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **environ}
    return subprocess.run(
        [sys.executable, "-c", f"import {statement}"], cwd=REPO, env=env, capture_output=True, text=True
    )


def test_an_init_row_fails_rather_than_time_an_import_that_skipped_its_work() -> None:
    # a setting missing: the import swallows the failure to make the configuration (the first request reports it),
    # so without the check the init row would time an import that made no clients and call it the init
    in_lambda = startup.lambda_environ()
    init = startup.handler_import(preloaded=True, prepared=True)
    assert _timed_statement(init, in_lambda).returncode == 0
    broken = {k: v for k, v in in_lambda.items() if k != "TRAINER_IMAGE_URIS"}
    failed = _timed_statement(init, broken)
    assert failed.returncode != 0 and "AssertionError: (True, False)" in failed.stderr
    reader = {**in_lambda, **startup.reader_environ()}
    assert _timed_statement(startup.handler_import(preloaded=False, prepared=True), reader).returncode == 0


def test_the_reader_row_times_its_init_in_lambda_against_boto3_making_the_same_clients(monkeypatch) -> None:
    calls: list[tuple[str, dict[str, str]]] = []

    def timed_import(interpreter, package, module, environ=None):
        calls.append((module, dict(environ or {})))
        return 1.0

    monkeypatch.setattr(startup, "timed_import", timed_import)
    rows = {
        row.name: (subject, baseline) for row, subject, baseline in startup.submitter_rows("python", REPO, REPO, "")
    }
    subject, baseline = rows[startup.READER_ROW]
    subject(), baseline()
    (module, environ), (baseline_module, baseline_environ) = calls
    assert module == startup.handler_import(preloaded=False, prepared=True)
    assert environ == {**startup.lambda_environ(), **startup.reader_environ()}
    assert (baseline_module, baseline_environ) == (startup.BOTO3_CLIENTS, startup.lambda_environ())


def test_the_memory_curve_is_the_init_as_lambda_runs_it() -> None:
    rows = {
        "submitter cold import": startup.Row("submitter cold import", "", "", subject_s=[0.1, 0.1, 0.1]),
        startup.INIT_ROW: startup.Row(startup.INIT_ROW, "", "", subject_s=[0.3, 0.4, 0.2]),
        startup.READER_ROW: startup.Row(startup.READER_ROW, "", "", subject_s=[0.25, 0.2, 0.15]),
    }
    curve = startup.init_curve(rows, 512)
    assert (curve["one_core_ms"], curve["reader_one_core_ms"], curve["modelled"]) == (300.0, 200.0, True)
    assert curve["points"] == startup.memory_curve(0.3, 512, 0.2)
