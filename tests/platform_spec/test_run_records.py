"""The run records of the metric-line contract (``[run]`` lines): they round-trip, stay one line, never read as
a metric line (ours or SageMaker's regexes), tolerate a newer writer's fields, and refuse a malformed record by
naming the field. The trainer's status file uses the same state vocabulary."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_spec.metric_lines import (
    METRIC_DEFINITIONS,
    RUN_FIELDS,
    RUN_PREFIX,
    RUN_STATES,
    RunRecord,
    RunRecordError,
    format_line,
    format_run_record,
    parse_line,
    parse_run_record,
    run_records,
)

FINISHED = RunRecord("finished", step=12, device="cpu", device_name="x86_64", world_size=2, resumed_from=6, saved=12)
GPU = RunRecord("starting", step=0, device="cuda", device_name="NVIDIA B200", world_size=8)

optional_text = st.none() | st.text(max_size=40)
records = st.builds(
    RunRecord,
    state=st.sampled_from(list(RUN_STATES)),
    step=st.integers(min_value=0, max_value=10**9),
    device=st.none() | st.sampled_from(["cpu", "cuda"]),
    device_name=optional_text,
    world_size=st.none() | st.integers(min_value=1, max_value=65536),
    resumed_from=st.none() | st.integers(min_value=0, max_value=10**9),
    saved=st.none() | st.integers(min_value=0, max_value=10**9),
    reason=optional_text,
)


def test_a_record_is_written_in_the_declared_field_order() -> None:
    assert format_run_record(FINISHED) == (
        "[run] state=finished step=12 device=cpu device_name=x86_64 world_size=2 resumed_from=6 saved=12"
    )
    assert format_run_record(GPU) == '[run] state=starting step=0 device=cuda device_name="NVIDIA B200" world_size=8'
    assert [name for name, _ in RUN_FIELDS] == list(RunRecord.__dataclass_fields__)


@given(records)
def test_every_record_round_trips_as_one_line_that_is_no_metric_line(record: RunRecord) -> None:
    line = format_run_record(record)
    assert line.splitlines() == [line] and line.isascii() and line.startswith(RUN_PREFIX + " ")
    assert parse_run_record(line) == record
    assert parse_run_record("2026-11-30T18:28:45Z algo-1 " + line) == record  # a log shipper's prefix
    # whatever its strings hold, it is never read as a metric line: not by us, not by SageMaker's regexes
    assert parse_line(line) is None
    assert "[metrics]" not in line and line.count(RUN_PREFIX) == 1
    assert not any(re.search(d["Regex"], line) for d in METRIC_DEFINITIONS)


def test_a_reason_quoting_a_metric_line_stays_a_reason() -> None:
    reason = 'worker said "[metrics] step=5 loss=1.0" then [run] state=finished; path C:\\tmp\\[x]\nnext\u2028line é'
    record = RunRecord("failed", step=5, reason=reason)
    line = format_run_record(record)
    assert parse_run_record(line) == record and parse_run_record(line).reason == reason
    assert line.splitlines() == [line]  # U+2028 and the newline are escaped, not raw
    assert parse_line(line) is None
    # and a metric line is still a metric line next to it
    assert parse_line(format_line({"step": 5, "loss": 1.0})) == {"step": 5.0, "loss": 1.0}
    assert parse_run_record(format_line({"step": 5, "loss": 1.0})) is None


def test_a_newer_writers_fields_are_ignored_and_order_does_not_matter() -> None:
    line = '[run] world_size=2 step=12 state=finished rank_of_writer=0 note="new in a later trainer" device=cpu'
    assert parse_run_record(line) == RunRecord("finished", step=12, device="cpu", world_size=2)


@pytest.mark.parametrize(
    ("line", "field", "expected"),
    [
        ('[run] state=failed step=3 reason="cut sho', "record", "space-separated name=value fields"),  # cut short
        ("[run] state=finished step=twelve", "step", "an integer >= 0"),
        ("[run] state=finished step=-1", "step", "an integer >= 0"),
        ("[run] state=done step=1", "state", "one of starting, training, finished, stopped, refused, failed"),
        ("[run] step=1", "state", "one of starting"),
        ("[run] state=starting step=0 world_size=0", "world_size", "an integer >= 1"),
        ('[run] state=starting step="0"', "step", "an integer >= 0"),
        ("[run] state=starting step=0 junk", "record", "space-separated name=value fields"),
        # digits int() refuses (a superscript, past its 4300-digit limit) or that no other reader takes: refused
        # as malformed, never a ValueError that ends the reader (trainctl report, a local sweep's outcome)
        ("[run] state=finished step=\u00b2", "step", "an integer >= 0"),
        ("[run] state=finished step=" + "9" * 5000, "step", "an integer >= 0"),
        ("[run] state=finished step=1 world_size=\u0663", "world_size", "an integer >= 1"),
    ],
)
def test_a_malformed_record_names_the_field(line: str, field: str, expected: str) -> None:
    with pytest.raises(RunRecordError) as refused:
        parse_run_record(line)
    assert refused.value.field == field and refused.value.expected.startswith(expected), str(refused.value)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"state": "running"}, "state"),
        ({"state": "finished", "step": -1}, "step"),
        ({"state": "finished", "step": True}, "step"),
        ({"state": "finished", "step": 1.5}, "step"),
        ({"state": "starting", "world_size": 0}, "world_size"),
        ({"state": "stopped", "saved": -2}, "saved"),
        ({"state": "failed", "reason": 42}, "reason"),
    ],
)
def test_a_record_cannot_be_made_wrong(kwargs: dict, field: str) -> None:
    with pytest.raises(RunRecordError) as refused:
        RunRecord(**kwargs)
    assert refused.value.field == field


def test_run_records_reads_an_output_and_leaves_out_what_is_cut_short() -> None:
    lines = [
        "[entrypoint] torchrun ...",
        format_run_record(GPU),
        format_line({"step": 1, "loss": 5.0}),
        "[trainer] some free text with state=finished in it",
        '[run] state=finished step=1 reason="the log was cut',
        format_run_record(RunRecord("stopped", step=1, saved=1, reason="SIGTERM/SIGINT received")),
    ]
    assert [(r.state, r.step) for r in run_records(lines)] == [("starting", 0), ("stopped", 1)]
    assert [r.ended for r in run_records(lines)] == [False, True]


def test_the_status_file_and_the_run_records_share_one_state_vocabulary() -> None:
    from training.supervision import StatusError, TrainerStatus

    for state in RUN_STATES:
        status = TrainerStatus(state, step=7, resumed_from=6, skipped={9: "cut short"}, saved=7, reason="why")
        record = status.run_record(device="cpu", device_name="x86_64", world_size=2)
        assert record == RunRecord(
            state, step=7, device="cpu", device_name="x86_64", world_size=2, resumed_from=6, saved=7, reason="why"
        )
        assert parse_run_record(format_run_record(record)) == record
    with pytest.raises(StatusError, match="expected one of " + ", ".join(RUN_STATES)):
        TrainerStatus("running")
