"""The metric-line contract as training/README.md shows it: its example lines are lines of the contract."""

from __future__ import annotations

from pathlib import Path

from platform_spec.metric_lines import FIELDS, RUN_STATES, parse_line, parse_run_record

README = Path(__file__).resolve().parents[2] / "training" / "README.md"


def test_the_readme_shows_a_metrics_line_and_a_run_record_the_contract_parses() -> None:
    lines = [line.strip() for line in README.read_text(encoding="utf-8").splitlines()]
    metrics = [parse_line(line) for line in lines if line.startswith("[metrics] ")]
    records = [parse_run_record(line) for line in lines if line.startswith("[run] ")]
    assert metrics and all(m is not None and set(m) == {name for name, _, _ in FIELDS} for m in metrics)
    assert records and all(r is not None and r.state in RUN_STATES for r in records)
    assert all(f"`{state}`" in README.read_text(encoding="utf-8") for state in RUN_STATES)  # every state named
