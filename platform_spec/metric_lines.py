"""The trainer's metric log lines and the regexes SageMaker reads them with.

One source for both: the trainer prints lines with :func:`format_line`, and the
submitter passes :data:`METRIC_DEFINITIONS` as ``AlgorithmSpecification.
MetricDefinitions`` to ``CreateTrainingJob``; SageMaker then publishes each
captured value to CloudWatch (namespace ``/aws/sagemaker/TrainingJobs``,
dimension ``TrainingJobName``, metric name = the definition's ``Name``).
Local tools (sweep reports) parse logs with :func:`parse_line`.

A line looks like (one line, fields separated by single spaces)::

    [metrics] step=120 loss=3.2141 lr=2.9e-04 grad_norm=0.812 tokens_per_sec=51234.5
      tokens_per_sec_per_gpu=6404.3 tflops_per_gpu=412.31 mfu=18.32
      peak_mem_allocated_gb=22.810 peak_mem_reserved_gb=24.102

Pure Python, standard library only: the trainer, the submitter's Lambda and
``trainctl`` import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "[metrics]"

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
)

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
        if name == "step":
            parts.append(f"step={int(v)}")
        elif name == "lr":
            parts.append(f"lr={v:.3e}")
        elif name in ("loss", "grad_norm"):
            parts.append(f"{name}={v:.4f}")
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
    return {k: float(v) for k, v in _FIELD_RE.findall(line[idx + len(PREFIX):])}
