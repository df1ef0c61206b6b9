"""A local run's report row comes from its ``train.log``'s declared lines: metric lines for the numbers and
``[run]`` records for the device, whatever the trainer's free-text lines say."""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_spec.metric_lines import RunRecord, format_line, format_run_record
from trainctl.reports.collection import collect_local, device_of
from trainctl.sweeps.state import Sweep, SweepConfig

DEVICE_TEXT = (
    "[trainer] model=gpt-tiny layers=2 params=1,234 backend=torch device=cpu (x86_64) world_size=2 precision=fp32"
)


def _log(free_text: str | None, *, records: bool = True, device_name: str = "x86_64") -> list[str]:
    lines = ["# trainctl sweep s: precision=fp32 (2026-11-30T18:28:45+00:00)"]
    if free_text is not None:
        lines.append(free_text)
    if records:
        lines.append(format_run_record(RunRecord("starting", device="cpu", device_name=device_name, world_size=2)))
    lines += [format_line({"step": s, "loss": 6.0 - s / 10, "tokens_per_sec": 1000.0 + s}) for s in range(1, 5)]
    if records:
        lines.append(
            format_run_record(
                RunRecord("finished", step=4, saved=4, device="cpu", device_name=device_name, world_size=2)
            )
        )
    return lines


def _row(tmp_path: Path, lines: list[str]):
    sweep = Sweep(
        name="s",
        mode="local",
        grid={"precision": ["fp32"]},
        base={},
        target={"device": {"type": "cpu"}},
        directory=tmp_path,
    )
    config = SweepConfig(
        index=0,
        overrides={"precision": "fp32"},
        hyperparameters={"precision": "fp32"},
        status="Completed",
        run_dir="runs/01-fp32",
    )
    log = tmp_path / "runs" / "01-fp32" / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")
    return collect_local(sweep, config)


@pytest.mark.parametrize(
    "free_text",
    [
        DEVICE_TEXT,
        "[trainer] training gpt-tiny on the CPU, 2 ranks",  # reworded
        "[trainer] model=gpt-tiny device=cpu (x86_64, AVX-512 (256-bit)) world_size=2",  # parentheses the old regex broke on
        None,
    ],
    ids=["as today", "reworded", "nested parentheses", "no line"],
)
def test_the_device_comes_from_the_run_records(free_text: str | None, tmp_path: Path) -> None:
    row = _row(tmp_path, _log(free_text))
    assert row.device == "CPU (x86_64), 2 processes"
    assert row.final_step == 4 and row.source == "train.log (4 metric lines)"


def test_the_free_text_alone_names_no_device(tmp_path: Path) -> None:
    """The old reader took the device from the trainer's setup line; without a record it is not known."""
    row = _row(tmp_path, _log(DEVICE_TEXT, records=False))
    assert row.device is None and row.final_step == 4


def test_gpu_devices_and_the_newest_record_win() -> None:
    lines = [
        format_run_record(RunRecord("starting", device="cpu", device_name="arm64", world_size=1)),
        format_run_record(RunRecord("starting", device="cuda", device_name="NVIDIA B200 (SXM)", world_size=8)),
        format_run_record(
            RunRecord("failed", step=3, reason="no device here")
        ),  # no device: does not hide the one above
    ]
    assert device_of(lines) == "8x NVIDIA B200 (SXM)"
    assert device_of(lines[:1]) == "CPU (arm64), 1 process"
    assert device_of([]) is None
