"""Training metrics: one ``[metrics]`` line every ``log_interval`` steps.

The line is rendered by :func:`platform_spec.metric_lines.format_line`, whose
module also holds the SageMaker ``MetricDefinitions`` regexes (one source).
Values:

* ``loss``: mean cross-entropy of the step (nats/token), averaged over
  micro-batches and ranks.
* ``lr``: learning rate used by the step; ``grad_norm``: global L2 norm of
  the gradients before clipping.
* ``tokens_per_sec``: tokens of the whole job per second of wall time over
  the interval since the previous line (checkpoint time excluded);
  ``tokens_per_sec_per_gpu``: that divided by the world size (per CPU
  process on CPU).
* ``tflops_per_gpu``: model FLOPs (the model family's ``flops_per_token``,
  :func:`model_families.gpt.flops_per_token`: ``6N + 6Lhs``, causal attention,
  recompute not counted) times per-GPU tokens/s.
* ``mfu``: percent of the GPU's dense peak for the precision in use
  (:func:`platform_spec.catalogue.dense_peak_tflops`: fp32 -> TF32, fp8/mxfp8 ->
  fp8, nvfp4 -> fp4). ``nan`` on CPU (no vendor dense peak exists for a CPU;
  measured CPU peaks depend on SKU, threads and clocks, so we print none) and
  on GPUs missing from the catalogue (no wrong MFU).
* ``peak_mem_allocated_gb`` / ``peak_mem_reserved_gb`` (GB = 1e9 bytes):
  ``torch.cuda.max_memory_allocated / max_memory_reserved`` of this rank's
  GPU. On CPU both report the process's peak resident set size
  (``getrusage(RUSAGE_SELF).ru_maxrss``): the allocator has no separate
  reserved pool there.

Rank 0 also appends each line's values, unrounded, as one JSON object to
``<base>/output/data/metrics.jsonl``, and hands them to the job's tracking targets
(TensorBoard, MLflow: :class:`training.tracking.MetricSinks`).
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from platform_spec import catalogue
from platform_spec.metric_lines import format_line
from training.tracking import MetricSinks


@dataclass(frozen=True)
class DeviceInfo:
    """The device a rank trains on and its dense peak for the precision (None: unknown / CPU)."""

    type: str
    name: str
    peak_tflops: float | None

    @classmethod
    def detect(cls, device: torch.device, precision: str) -> DeviceInfo:
        if device.type != "cuda":
            import platform

            return cls("cpu", platform.processor() or platform.machine() or "cpu", None)
        name = torch.cuda.get_device_name(device)
        gpu = catalogue.gpu_for_device_name(name)
        peak = None
        if gpu is not None and catalogue.supports_precision(gpu, precision):
            peak = catalogue.dense_peak_tflops(gpu, precision)
        return cls("cuda", name, peak)


def peak_memory_gb(device: torch.device) -> tuple[float, float]:
    """(allocated, reserved) peak in GB (1e9 bytes); CPU: peak RSS for both."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9, torch.cuda.max_memory_reserved(device) / 1e9
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB
    return rss_bytes / 1e9, rss_bytes / 1e9


class MetricsLogger:
    """Computes and prints the metric line (rank 0 prints; every rank may call).

    Args:
        tokens_per_step: tokens of the whole job per optimizer step.
        world_size: ranks (GPUs or CPU processes).
        flops_per_token: training FLOPs per token (the model family's ``flops_per_token``).
        device: this rank's device (for peak memory) and ``info`` its peak.
        metrics_file: JSON-lines file for unrounded values (rank 0), or None.
        sinks: the job's tracking targets (rank 0), or None.
    """

    def __init__(
        self,
        *,
        tokens_per_step: int,
        world_size: int,
        flops_per_token: float,
        device: torch.device,
        info: DeviceInfo,
        rank: int,
        metrics_file: Path | None = None,
        stream: TextIO | None = None,
        sinks: MetricSinks | None = None,
    ) -> None:
        self.tokens_per_step = tokens_per_step
        self.world_size = world_size
        self.flops_per_token = flops_per_token
        self.device = device
        self.info = info
        self.rank = rank
        self.metrics_file = metrics_file
        self.stream = stream or sys.stdout
        self.sinks = sinks
        self._t0 = time.perf_counter()
        self._steps = 0
        self._excluded = 0.0
        self._once: dict[str, float] = {}

    def publish_once(self, values: dict[str, float]) -> None:
        """Add ``values`` (fields of :data:`platform_spec.metric_lines.FIELDS`) to the next line of
        :meth:`values` only: measurements made once per run (the pre-flight bandwidth)."""
        self._once.update(values)

    def start(self) -> None:
        """Start (or restart) the throughput interval."""
        self._t0 = time.perf_counter()
        self._steps = 0
        self._excluded = 0.0

    def step_done(self) -> None:
        self._steps += 1

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (e.g. a checkpoint save) out of the current interval."""
        self._excluded += seconds

    def values(
        self, *, step: int, loss: float, lr: float, grad_norm: float, skipped_steps: int = 0
    ) -> dict[str, float]:
        """The line's values for the interval ending now, and start the next interval (``skipped_steps``: the
        job's optimizer steps whose update was skipped so far)."""
        elapsed = max(1e-9, time.perf_counter() - self._t0 - self._excluded)
        tokens_per_sec = self.tokens_per_step * self._steps / elapsed
        per_gpu = tokens_per_sec / self.world_size
        tflops = per_gpu * self.flops_per_token / 1e12
        mfu = 100.0 * tflops / self.info.peak_tflops if self.info.peak_tflops else math.nan
        allocated, reserved = peak_memory_gb(self.device)
        self.start()
        return {
            "step": step,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens_per_sec": tokens_per_sec,
            "tokens_per_sec_per_gpu": per_gpu,
            "tflops_per_gpu": tflops,
            "mfu": mfu,
            "peak_mem_allocated_gb": allocated,
            "peak_mem_reserved_gb": reserved,
            "skipped_steps": skipped_steps,
            **self._pop_once(),
        }

    def _pop_once(self) -> dict[str, float]:
        once, self._once = self._once, {}
        return once

    def log(self, values: dict[str, float], extra: dict[str, Any] | None = None) -> str:
        """Print the line (rank 0) and append the JSON record; returns the line."""
        line = format_line(values)
        if self.rank == 0:
            print(line, file=self.stream, flush=True)
            if self.metrics_file is not None:
                self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
                record = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}
                record["time"] = time.time()
                if extra:
                    record.update(extra)
                with open(self.metrics_file, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")
            if self.sinks is not None:
                self.sinks.log(values)
        return line


__all__ = ["DeviceInfo", "MetricsLogger", "peak_memory_gb"]
