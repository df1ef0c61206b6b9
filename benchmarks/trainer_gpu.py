"""The guide's table on this host's GPUs: tokens/s, TFLOP/s, MFU and peak memory per configuration.

For each precision, micro-batch and activation checkpointing setting, the
trainer's own ``Trainer.setup`` / ``train_step`` run in this process (FSDP2,
synthetic tokens; the harness of ``benchmarks/gpu_check.py``,
:func:`gpu_check.measure_config`): ``--warmup`` steps, then the median of
``--steps``. Nothing is written to disk (no checkpoint, no export: a gpt-1b
checkpoint with its AdamW state is ~21 GB). A configuration that runs out of
memory is reported as such; one the planner predicts not to fit is skipped
with the prediction (``--no-skip`` runs it anyway). Each row has the planner's
prediction for the same configuration on the same number of GPUs of this
type, measured/predicted, and the block ``backend`` it ran (``--backend``:
the trainer's own choice by default -- TransformerEngine where it imports --
or ``torch`` / ``te``).

    python benchmarks/trainer_gpu.py                                   # one GPU: one rank
    python -m torch.distributed.run --nproc-per-node 8 benchmarks/trainer_gpu.py --precisions bf16,fp8
    python benchmarks/trainer_gpu.py --batches 1,4,16 --json rows.json

One process per GPU: launch with torchrun for several GPUs (each rank takes
``cuda:LOCAL_RANK``); a plain ``python`` run is one rank on ``cuda:0``. fp8,
mxfp8 and nvfp4 need TransformerEngine (the trainer image); mxfp8/nvfp4 need
Blackwell. Without a usable CUDA device it exits 2 before building anything
(the table's configurations would train for hours on a CPU). No determinism
setting is made here: TransformerEngine picks its fastest attention backends,
as in training. The guide's published figures (8x B200, MXFP8: ~6K tokens/s
at batch 1, ~51K at batch 16 with activation checkpointing) are in
shared/docs/seed-digest.md.

Exit status: 0 every configuration measured, skipped or refused by the
planner; 1 one failed or ran out of memory; 2 no usable CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_check  # noqa: E402  (benchmarks/ is a folder of scripts)


def _status(record: dict) -> str:
    """One row's outcome as the table prints it."""
    status = record.get("status", "running")
    if status == "skipped":
        return record["reason"]
    if status == "out of memory":
        return f"out of memory: {record['error']}"
    return "ok" if status == "running" else status


def run(args: argparse.Namespace) -> list[dict]:
    import torch
    import torch.distributed as dist

    rows = []
    work = Path(tempfile.mkdtemp(prefix="trainer-gpu-"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    from platform_spec.catalogue import gpu_for_device_name

    gpu_name = torch.cuda.get_device_name(0)
    gpu = gpu_for_device_name(gpu_name)  # None: a GPU the catalogue does not know, no prediction
    backend = None if args.backend == "auto" else args.backend
    for precision in args.precisions.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            for ac in args.ac.split(","):
                setup = {
                    "model": args.model,
                    "seq_length": args.seq_length,
                    "precision": precision,
                    "steps": args.steps,
                    "warmup": args.warmup,
                }
                if args.num_layers:
                    setup["num_layers"] = args.num_layers
                config = {
                    "model": args.model,
                    "num_layers": args.num_layers,
                    "seq_length": args.seq_length,
                    "precision": precision,
                    "backend": backend,
                    "batch_size": batch,
                    "activation_checkpointing": ac,
                }
                row: dict = {
                    "precision": precision,
                    "batch_size": batch,
                    "activation_checkpointing": ac,
                    "status": "running",
                }
                try:
                    gpu_check.measure_config(
                        row, work, setup, config, gpu=gpu, device_name=gpu_name, gpus=world, run_unfit=args.no_skip
                    )
                except ValueError as exc:  # the planner refuses the configuration (e.g. mxfp8 on Hopper)
                    row["status"] = f"refused: {exc}"
                except Exception as exc:
                    row["status"] = f"failed: {type(exc).__name__}: {exc}"[:300]
                row["status"] = _status(row)
                row["backend"] = row.get("measured", {}).get("backend", backend or "auto")
                rows.append(row)
                if int(os.environ.get("RANK", "0")) == 0:
                    print(json.dumps(row), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return rows


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"{args.model}, sequence {args.seq_length}, median of {args.steps} steps after {args.warmup}",
        "",
        f"{'precision':<9} {'backend':>7} {'batch':>5} {'ckpt':>5} {'tok/s/GPU':>10} {'pred':>8} {'TFLOP/s':>8} "
        f"{'MFU %':>6} {'pred':>5} {'alloc GB':>9} {'pred':>6} {'rsvd GB':>8}  status",
    ]
    for r in rows:
        m, p = r.get("measured", {}), r.get("predicted") or {}
        lines.append(
            f"{r['precision']:<9} {r['backend']:>7} {r['batch_size']:>5} {r['activation_checkpointing']:>5} "
            f"{m.get('tokens_per_second_per_gpu', float('nan')):>10.0f} {p.get('tokens_per_second_per_gpu', float('nan')):>8.0f} "
            f"{m.get('tflops_per_gpu', float('nan')):>8.1f} {m.get('mfu') or float('nan'):>6.1f} {p.get('mfu', float('nan')):>5.1f} "
            f"{m.get('peak_allocated_gb', float('nan')):>9.1f} {p.get('memory_gb', float('nan')):>6.1f} "
            f"{m.get('peak_reserved_gb', float('nan')):>8.1f}  {r['status'][:80]}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-1b")
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--seq-length", type=int, default=8192)
    parser.add_argument("--precisions", default="bf16")
    parser.add_argument("--batches", default="1,2,4")
    parser.add_argument("--ac", default="off,full")
    parser.add_argument(
        "--backend",
        choices=("auto", *gpu_check.BACKENDS),
        default="auto",
        help="transformer blocks: the trainer's choice (auto: TransformerEngine where it imports), "
        "torch-native, or TransformerEngine (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-skip", action="store_true", help="also run configurations predicted not to fit")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here (rank 0)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            f"trainer_gpu: {gpu_check.NO_CUDA} (torch {torch.__version__}, built for CUDA {torch.version.cuda}): "
            "the table is measured on GPUs only; benchmarks/gpu_check.sh --dry-run checks the harness on a CPU",
            file=sys.stderr,
        )
        return 2
    start = time.monotonic()
    rows = run(args)
    if int(os.environ.get("RANK", "0")) == 0:
        print()
        print(table(rows, args))
        print(f"\n({time.monotonic() - start:.0f} s)")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r["status"] == "ok" or r["status"].startswith(("skipped", "refused")) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
