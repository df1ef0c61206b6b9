"""Compare a measured run with the planner's prediction (measured / predicted ratios).

For a GPU machine: run the trainer (or TransformerEngine's ``fsdp.py`` for
``--blocks-only``) and hand this script its log together with the same
configuration flags ``trainctl plan`` takes::

    python benchmarks/planner_validation.py --log run.log --model gpt-1b --blocks-only \\
        --precision mxfp8 --seq-length 8192 --batch-size 16 --activation-checkpointing full
    python benchmarks/planner_validation.py --run "torchrun --nproc_per_node=8 fsdp.py --precision mxfp8 \\
        --num-layers 24 --batch-size 16 --seq-length 8192 --checkpoint-layer transformerlayer" \\
        --model gpt-1b --blocks-only --precision mxfp8 --seq-length 8192 --batch-size 16 \\
        --activation-checkpointing full

A run on fewer GPUs than the instance type holds (a one-GPU benchmark
machine, ``benchmarks/trainer_gpu.py`` or ``gpu_check.sh`` there) is compared
with the planner's figures for that many GPUs of the type: ``--gpus 1``
(:func:`planner.plan.evaluate_on_gpus`; one GPU shards nothing and
communicates nothing, so memory and speed differ from the 8-GPU plan)::

    python benchmarks/planner_validation.py --log run.log --gpus 1 --model gpt-1b --precision bf16 \\
        --seq-length 8192 --batch-size 2 --instance-type ml.p5e.48xlarge

Log formats understood:

* the trainer's ``[metrics]`` lines (:mod:`platform_spec.metric_lines`): peak
  allocated memory is the largest ``peak_mem_allocated_gb``; tokens/s per GPU
  and MFU are the medians over the lines after the first (warm-up);
* TransformerEngine's ``fsdp.py``: ``Peak Memory Use: <MB>MBs`` (10^6 bytes)
  and ``Avg. Iter. Time: <s>s``; tokens/s per GPU = batch * sequence / time.

Prints a table of measured, predicted and measured/predicted (``--json`` for a
JSON object). Exit status 0; 2 on bad arguments or a log without figures.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence

from planner import PlanInput, PlanInputError
from planner.plan import evaluate, evaluate_on_gpus
from platform_spec.metric_lines import parse_line
from trainctl.commands import plan as plan_cmd

_TE_PEAK = re.compile(r"Peak Memory Use:\s*([0-9.eE+-]+)\s*MBs")
_TE_ITER = re.compile(r"Avg\. Iter\. Time:\s*([0-9.eE+-]+)\s*s")


def measured_figures(text: str, *, tokens_per_microbatch: int) -> dict[str, float]:
    """Peak memory (GB), tokens/s per GPU and MFU (percent, trainer logs only) found in a log.

    Raises:
        ValueError: no figure found.
    """
    out: dict[str, float] = {}
    lines = [d for d in (parse_line(line) for line in text.splitlines()) if d]
    if lines:
        peaks = [d["peak_mem_allocated_gb"] for d in lines if "peak_mem_allocated_gb" in d]
        if peaks:
            out["peak_memory_gb"] = max(peaks)
        steady = lines[1:] or lines
        tps = [d["tokens_per_sec_per_gpu"] for d in steady if "tokens_per_sec_per_gpu" in d]
        if tps:
            out["tokens_per_second_per_gpu"] = statistics.median(tps)
        mfu = [d["mfu"] for d in steady if "mfu" in d]
        if mfu:
            out["mfu"] = statistics.median(mfu)
    te_peaks = [float(m.group(1)) / 1000.0 for m in _TE_PEAK.finditer(text)]
    if te_peaks and "peak_memory_gb" not in out:
        out["peak_memory_gb"] = max(te_peaks)
    te_iters = [float(m.group(1)) for m in _TE_ITER.finditer(text)]
    if te_iters and "tokens_per_second_per_gpu" not in out:
        out["tokens_per_second_per_gpu"] = tokens_per_microbatch / te_iters[-1]
    if not out:
        raise ValueError("no [metrics] lines or fsdp.py figures found in the log")
    return out


def compare(text: str, plan_input, *, gpus: int | None = None) -> list[dict[str, float | str]]:
    """Rows ``{quantity, measured, predicted, ratio}`` for the figures found in ``text``.

    Args:
        gpus: GPUs the run used when fewer than one instance holds (None: the plan input's instances).
    """
    plan = evaluate(plan_input) if gpus is None else evaluate_on_gpus(plan_input, gpus)
    measured = measured_figures(text, tokens_per_microbatch=plan_input.batch_size * plan_input.seq_length)
    predicted = {
        "peak_memory_gb": plan.memory_gb.total,
        "tokens_per_second_per_gpu": plan.tokens_per_second_per_gpu,
        "mfu": plan.mfu,
    }
    return [
        {"quantity": k, "measured": v, "predicted": predicted[k], "ratio": v / predicted[k]}
        for k, v in measured.items()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", help="log file of the run")
    src.add_argument("--run", help="shell command to run; its output is the log")
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs the run used, when fewer than one instance of --instance-type holds (e.g. 1)",
    )
    plan_cmd.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.run:
        done = subprocess.run(args.run, shell=True, capture_output=True, text=True, check=False)
        text = done.stdout + done.stderr
    else:
        with open(args.log, encoding="utf-8") as fh:
            text = fh.read()
    try:
        rows = compare(text, PlanInput(**plan_cmd.plan_fields(args)), gpus=args.gpus)
    except (PlanInputError, ValueError) as exc:
        print(f"planner_validation: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'quantity':<28}{'measured':>14}{'predicted':>14}{'ratio':>8}")
    for r in rows:
        print(f"{r['quantity']:<28}{r['measured']:>14.2f}{r['predicted']:>14.2f}{r['ratio']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
