"""gpt-1b at sequence 8192 on the GPUs of this host: tokens/s, MFU and peak memory (the guide's table).

For each precision (bf16, fp8), micro-batch (1, 4, 16) and activation
checkpointing (off, full) the trainer runs through the container entry point
(one process per GPU, FSDP2, synthetic tokens) for ``--steps`` steps; the
first ``--warmup`` steps are left out. A configuration that runs out of GPU
memory is reported with the trainer's failure reason.

    python benchmarks/trainer_gpu.py [--steps 8] [--warmup 3] [--precisions bf16,fp8] [--batches 1,4,16]

Needs an NVIDIA GPU and TransformerEngine (the trainer image, or an NGC
PyTorch container with this repository on PYTHONPATH). Not run in the session
that wrote it (no GPU was lent); the guide's figures to compare with are in
shared/docs/seed-digest.md (8x B200, MXFP8: ~6K tokens/s at batch 1, ~51K at
batch 16 with activation checkpointing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def run_config(work: Path, *, precision: str, batch: int, ac: str, steps: int, warmup: int, seq: int) -> dict:
    from training.local import read_failure, read_metrics, run_local

    hp = {
        "model": "gpt-1b", "precision": precision, "batch_size": batch, "seq_length": seq,
        "activation_checkpointing": ac, "synthetic_data": True, "max_steps": steps, "warmup_steps": 1,
        "log_interval": 1, "checkpoint_interval": 10**6, "keep_checkpoints": 1,
    }
    run = run_local(work, hp, timeout=1800)
    row = {"precision": precision, "batch": batch, "ac": ac}
    if run.returncode != 0:
        row["error"] = (read_failure(work) or run.output[-300:]).strip()
        return row
    records = [r for r in read_metrics(work) if r["step"] > warmup]
    row["tokens_per_sec"] = statistics.median(r["tokens_per_sec"] for r in records)
    row["tokens_per_sec_per_gpu"] = statistics.median(r["tokens_per_sec_per_gpu"] for r in records)
    row["tflops_per_gpu"] = statistics.median(r["tflops_per_gpu"] for r in records)
    mfu = [r["mfu"] for r in records if r["mfu"] is not None]
    row["mfu"] = statistics.median(mfu) if mfu else float("nan")
    row["peak_alloc_gb"] = max(r["peak_mem_allocated_gb"] for r in records)
    row["peak_reserved_gb"] = max(r["peak_mem_reserved_gb"] for r in records)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seq-length", type=int, default=8192)
    parser.add_argument("--precisions", default="bf16,fp8")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--ac", default="off,full")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for precision in args.precisions.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                for ac in args.ac.split(","):
                    work = Path(tmp) / f"{precision}-b{batch}-ac{ac}"
                    row = run_config(work, precision=precision, batch=batch, ac=ac, steps=args.steps,
                                     warmup=args.warmup, seq=args.seq_length)
                    rows.append(row)
                    print(row, flush=True)
    print(f"\ngpt-1b, sequence {args.seq_length}, median of steps {args.warmup + 1}-{args.steps}\n")
    print(f"{'precision':<9} {'batch':>5} {'act.ckpt':>8} {'tokens/s':>10} {'tok/s/GPU':>10} {'TFLOP/s/GPU':>11} "
          f"{'MFU %':>6} {'peak alloc GB':>13} {'peak rsvd GB':>12}")
    for r in rows:
        if "error" in r:
            print(f"{r['precision']:<9} {r['batch']:>5} {r['ac']:>8}  failed: {r['error'][:120]}")
            continue
        print(f"{r['precision']:<9} {r['batch']:>5} {r['ac']:>8} {r['tokens_per_sec']:>10.0f} {r['tokens_per_sec_per_gpu']:>10.0f} "
              f"{r['tflops_per_gpu']:>11.1f} {r['mfu']:>6.1f} {r['peak_alloc_gb']:>13.1f} {r['peak_reserved_gb']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
