"""The metric-line contract as training/README.md shows it: its example lines (a training line, a validation
line, a run record) are lines of the contract."""

from __future__ import annotations

from pathlib import Path

from platform_spec.metric_lines import FIELDS, PREFLIGHT_FIELDS, RUN_STATES, parse_line, parse_run_record

README = Path(__file__).resolve().parents[2] / "training" / "README.md"


def test_the_readme_shows_a_metrics_line_and_a_run_record_the_contract_parses() -> None:
    lines = [line.strip() for line in README.read_text(encoding="utf-8").splitlines()]
    metrics = [parse_line(line) for line in lines if line.startswith("[metrics] ")]
    records = [parse_run_record(line) for line in lines if line.startswith("[run] ")]
    training = {name for name, _, _ in FIELDS} - {"validation_loss", *PREFLIGHT_FIELDS}
    first = training | set(PREFLIGHT_FIELDS)  # a multi-process run's first line: the pre-flight's bandwidths
    assert [None if m is None else set(m) for m in metrics] == [first, training, {"step", "validation_loss"}]
    assert records and all(r is not None and r.state in RUN_STATES for r in records)
    assert all(f"`{state}`" in README.read_text(encoding="utf-8") for state in RUN_STATES)  # every state named
