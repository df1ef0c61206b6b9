"""The trainer's metric log lines and the regexes SageMaker reads them with.

One source for both: the trainer prints lines with :func:`format_line`, and the
submitter passes :data:`METRIC_DEFINITIONS` as ``AlgorithmSpecification.
MetricDefinitions`` to ``CreateTrainingJob``; SageMaker then publishes each
captured value to CloudWatch (namespace ``/aws/sagemaker/TrainingJobs``,
dimension ``TrainingJobName``, metric name = the definition's ``Name``).
Local tools (sweep reports) parse logs with :func:`parse_line`.

The same output carries the run's declared records (:class:`RunRecord`,
written by :func:`format_run_record`, read by :func:`parse_run_record`): a
``[run]`` line each time the run changes state, saying on which device it
trains and how it ended, so that no reader matches the trainer's free-text
``[trainer]`` lines::

    [run] state=finished step=12 device=cpu device_name=x86_64 world_size=2 saved=12

A line looks like (one line, fields separated by single spaces)::

    [metrics] step=120 loss=3.2141 lr=2.9e-04 grad_norm=0.812 tokens_per_sec=51234.5
      tokens_per_sec_per_gpu=6404.3 tflops_per_gpu=412.31 mfu=18.32
      peak_mem_allocated_gb=22.810 peak_mem_reserved_gb=24.102 skipped_steps=0

and, after each evaluation of the validation channel (``eval_interval``), a line of its own::

    [metrics] step=120 validation_loss=3.3017

The first step's line of a multi-process run also carries the pre-flight's bus bandwidths
(:data:`PREFLIGHT_FIELDS`, :mod:`training.preflight`).

A reader that keeps one record per step merges a step's two lines
(``trainctl.reports.collection.metrics_by_step``).

Pure Python, standard library only: the trainer, the submitter's Lambda and
``trainctl`` import it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from platform_spec.errors import FieldError

PREFIX = "[metrics]"

SAGEMAKER_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
"""The log group SageMaker writes training-job container logs to (streams ``<job>/algo-<n>-<epoch>``)."""
SAGEMAKER_METRIC_NAMESPACE = "/aws/sagemaker/TrainingJobs"
"""The CloudWatch namespace of training-job metrics (``MetricDefinitions`` and instance metrics)."""
TRAINING_JOB_DIMENSION = "TrainingJobName"
"""The dimension of the metrics SageMaker extracts from a job's log with ``MetricDefinitions`` (the instance
metrics have ``Host`` instead); the SageMaker Python SDK's ``TrainingJobAnalytics`` queries it so."""

# (field in the log line, SageMaker metric name, unit for docs)
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("step", "train:step", "optimizer steps"),
    ("loss", "train:loss", "nats/token (cross-entropy)"),
    ("lr", "train:learning_rate", "learning rate"),
    ("grad_norm", "train:grad_norm", "global L2 norm before clipping"),
    ("tokens_per_sec", "train:tokens_per_sec", "tokens/s, whole job"),
    ("tokens_per_sec_per_gpu", "train:tokens_per_sec_per_gpu", "tokens/s per GPU (or CPU process)"),
    ("tflops_per_gpu", "train:tflops_per_gpu", "model TFLOP/s per GPU"),
    ("mfu", "train:mfu", "percent of the device's dense peak for the precision"),
    ("peak_mem_allocated_gb", "train:peak_memory_allocated_gb", "GB (1e9 bytes), max allocated"),
    ("peak_mem_reserved_gb", "train:peak_memory_reserved_gb", "GB (1e9 bytes), max reserved by the allocator"),
    (
        "skipped_steps",
        "train:skipped_steps",
        "optimizer steps of this job whose update was skipped (non-finite loss or gradient norm, fp16 overflow)",
    ),
    (
        "validation_loss",
        "validation:loss",
        "nats/token (cross-entropy over every token of the evaluation's validation batches, all ranks)",
    ),
    (
        "all_gather_busbw_gb_s",
        "preflight:all_gather_busbw_gb_s",
        "GB/s (1e9 bytes/s): the pre-flight's all-gather bus bandwidth at FSDP's per-block size, the slowest "
        "rank's (first step's line only; multi-process runs)",
    ),
    (
        "reduce_scatter_busbw_gb_s",
        "preflight:reduce_scatter_busbw_gb_s",
        "GB/s (1e9 bytes/s): the pre-flight's reduce-scatter bus bandwidth at FSDP's per-block gradient size, the "
        "slowest rank's (first step's line only; multi-process runs)",
    ),
)
PREFLIGHT_FIELDS: tuple[str, ...] = ("all_gather_busbw_gb_s", "reduce_scatter_busbw_gb_s")
"""The fields the trainer's pre-flight measurement adds to the first step's line (:mod:`training.preflight`)."""

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"

METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": metric, "Regex": rf"\[metrics\] .*\b{field}=({_NUMBER})(?:\s|$)"} for field, metric, _ in FIELDS
]
"""SageMaker ``MetricDefinitions``: each regex captures one number from a metric line."""

_FIELD_RE = re.compile(rf"\b([a-z_]+)=({_NUMBER})(?=\s|$)")


def format_line(values: Mapping[str, float | int]) -> str:
    """Render one metric line. Keys must be fields of :data:`FIELDS`; order is fixed.

    Raises:
        KeyError: an unknown key (so a typo cannot silently drop a metric).
    """
    known = {f for f, _, _ in FIELDS}
    unknown = set(values) - known
    if unknown:
        raise KeyError(f"unknown metric field(s) {sorted(unknown)}; expected {sorted(known)}")
    parts = [PREFIX]
    for name, _, _ in FIELDS:
        if name not in values:
            continue
        v = values[name]
        if name in ("step", "skipped_steps"):
            parts.append(f"{name}={int(v)}")
        elif name == "lr":
            parts.append(f"lr={v:.3e}")
        elif name in ("loss", "grad_norm", "validation_loss"):
            parts.append(f"{name}={v:.4f}")
        elif name in PREFLIGHT_FIELDS:
            parts.append(f"{name}={v:.4g}")  # gloo on CPU measures fractions of a GB/s
        elif name.startswith("peak_mem"):
            parts.append(f"{name}={v:.3f}")
        else:
            parts.append(f"{name}={v:.2f}")
    return " ".join(parts)


def parse_line(line: str) -> dict[str, float] | None:
    """The numbers of a metric line, or ``None`` if ``line`` is not one."""
    idx = line.find(PREFIX)
    if idx < 0:
        return None
    run = line.find(RUN_PREFIX)
    if 0 <= run < idx:  # a run record (its strings never hold a prefix: see format_run_record)
        return None
    return {k: float(v) for k, v in _FIELD_RE.findall(line[idx + len(PREFIX) :])}


# ---------------------------------------------------------------------------
# Run records: how a run began and ended, declared (not read from free text)

RUN_PREFIX = "[run]"

RUN_STATES: dict[str, str] = {
    "starting": "set up and resume decided; no step run yet",
    "training": "in the training loop: a stop now finishes the step and saves a checkpoint",
    "finished": "reached max_steps (and saved it)",
    "stopped": "stopped on a signal or the capacity-block deadline",
    "refused": "the newest loadable checkpoint belongs to another run; nothing loaded, pruned or written",
    "failed": "any other failure (the reason is also in output/failure)",
}
"""The states of a run and what each means: the ``state`` of a :class:`RunRecord` line and of the trainer's
status file (:mod:`training.supervision`), one vocabulary for both."""

RUN_FIELDS: tuple[tuple[str, str], ...] = (
    ("state", "one of RUN_STATES"),
    ("step", "optimizer steps done (an integer >= 0)"),
    ("device", "the torch device type the ranks train on: cpu or cuda"),
    ("device_name", "the device's name: the GPU's (torch.cuda.get_device_name), or the CPU's (platform.processor)"),
    ("world_size", "processes training together (an integer >= 1)"),
    ("resumed_from", "the checkpoint step this run started from (absent: step 0)"),
    ("saved", "the newest checkpoint step this run wrote (absent: none)"),
    ("reason", "why it stopped, failed or was refused"),
)
"""The fields of a run record line, in the order they are written, with their meaning."""

_INT_FIELDS = {"step": 0, "world_size": 1, "resumed_from": 0, "saved": 0}  # field -> smallest value
_BARE = re.compile(r"[A-Za-z0-9_.:/+@%,-]+")
_ASCII_DIGITS = re.compile(r"[0-9]+")
_RUN_FIELD_RE = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^\s"]+)(?:\s+|$)')


class RunRecordError(FieldError):
    """A ``[run]`` record that does not follow :data:`RUN_FIELDS`: names the field, the value and what was expected."""


@dataclass(frozen=True)
class RunRecord:
    """One ``[run]`` line: what the trainer declares when its run changes state.

    The trainer's rank 0 prints one when the run's state changes (:data:`RUN_STATES`): ``starting`` (set up,
    device known, resume decided), ``training``, and how it ended: ``finished``, ``stopped``, ``refused`` or
    ``failed``. Readers of the output (``trainctl sweep``'s local runs, ``trainctl report``, CloudWatch Logs
    readers) learn from these that a run finished and on which device, never from the trainer's free-text
    ``[trainer]`` lines, whose wording may change. A line looks like::

        [run] state=starting step=6 device=cpu device_name=x86_64 world_size=2 resumed_from=6
        [run] state=finished step=12 device=cuda device_name="NVIDIA B200" world_size=8 resumed_from=6 saved=12

    Strings other than a bare token (letters, digits, ``_ . : / + @ % , -``) are written as JSON strings in
    ASCII, so a record is always one line, however it is split into lines. Absent fields (None) are not written.

    Raises:
        RunRecordError: on construction, a field outside :data:`RUN_FIELDS`'s rules.
    """

    state: str
    step: int = 0
    device: str | None = None
    device_name: str | None = None
    world_size: int | None = None
    resumed_from: int | None = None
    saved: int | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.state not in RUN_STATES:
            raise RunRecordError("state", self.state, "one of " + ", ".join(RUN_STATES))
        for name, smallest in _INT_FIELDS.items():
            value = getattr(self, name)
            if value is None and name != "step":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
                raise RunRecordError(
                    name, value, f"an integer >= {smallest}" + ("" if name == "step" else " or absent")
                )
        for name in ("device", "device_name", "reason"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise RunRecordError(name, value, "a string or absent")

    @property
    def ended(self) -> bool:
        """The run is over: ``finished``, ``stopped``, ``refused`` or ``failed``."""
        return self.state in ("finished", "stopped", "refused", "failed")


def _render(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    if _BARE.fullmatch(value):
        return value
    # a JSON string in ASCII (no character str.splitlines() breaks at, e.g. U+2028, stays raw), with "[" escaped:
    # a record never holds a "[metrics]" (SageMaker's regexes) or "[run]" prefix
    return json.dumps(value, ensure_ascii=True).replace("[", "\\u005b")


def format_run_record(record: RunRecord) -> str:
    """Render one ``[run]`` line (fields in :data:`RUN_FIELDS` order; absent ones left out)."""
    parts = [RUN_PREFIX]
    for name, _ in RUN_FIELDS:
        value = getattr(record, name)
        if value is not None:
            parts.append(f"{name}={_render(value)}")
    return " ".join(parts)


def parse_run_record(line: str) -> RunRecord | None:
    """The record of a ``[run]`` line, or ``None`` when ``line`` is not one.

    The record may follow a prefix (a log shipper's timestamp). Fields this version does not know are
    ignored, so an older reader reads a newer trainer's records.

    Raises:
        RunRecordError: the line is a ``[run]`` record but malformed (cut short, a bad value, no ``state``):
            names the field.
    """
    idx = line.find(RUN_PREFIX)
    if idx < 0 or (line.find(PREFIX) >= 0 and line.find(PREFIX) < idx):
        return None
    text = line[idx + len(RUN_PREFIX) :].strip()
    values: dict[str, Any] = {}
    pos = 0
    while pos < len(text):
        match = _RUN_FIELD_RE.match(text, pos)
        if match is None:
            raise RunRecordError("record", text[pos:], "space-separated name=value fields (strings JSON-quoted)")
        name, raw = match.groups()
        pos = match.end()
        if raw.startswith('"'):
            try:
                value: Any = json.loads(raw)
            except ValueError:
                raise RunRecordError(name, raw, "a JSON string") from None
        elif name in _INT_FIELDS:
            try:  # ASCII digits only (str.isdigit() takes "²", which int() refuses); int() refuses > 4300 digits
                value = int(raw) if _ASCII_DIGITS.fullmatch(raw) else None
            except ValueError:
                value = None
            if value is None:
                raise RunRecordError(name, raw, f"an integer >= {_INT_FIELDS[name]}")
        else:
            value = raw
        values[name] = value
    if "state" not in values:
        raise RunRecordError("state", None, "one of " + ", ".join(RUN_STATES))
    known = {name for name, _ in RUN_FIELDS}
    return RunRecord(**{k: v for k, v in values.items() if k in known})


def run_records(lines: Iterable[str]) -> list[RunRecord]:
    """Every well-formed ``[run]`` record of ``lines``, in order; malformed ones (a log cut short) are left out."""
    out = []
    for line in lines:
        try:
            record = parse_run_record(line)
        except RunRecordError:
            continue
        if record is not None:
            out.append(record)
    return out
