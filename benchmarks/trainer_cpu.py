"""Tokens/s of our trainer on CPU vs a plain single-process PyTorch loop, side by side.

Same model (training.model, torch-native gpt-tiny), same data (CPython docs,
byte-level shards, the trainer's sampler), same optimizer (AdamW) and global
batch, same number of CPU threads in total. The trainer runs through the
container entry point (torchrun, FSDP2, gloo, metrics, checkpointing at the
end), as a SageMaker job would; the baseline is a bare loop in this process.
The first ``--warmup`` steps of every variant are left out.

    python benchmarks/trainer_cpu.py [--steps 30] [--seq-length 128] [--batch-size 8]

Prints a table: variant, processes x threads, tokens/s, ratio to the plain loop.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def plain_loop(
    shards: Path, *, steps: int, warmup: int, batch_size: int, seq_length: int, threads: int, lr: float
) -> float:
    """A single-process loop without FSDP, distributed, metrics or checkpoints: tokens/s after warmup."""
    import torch

    from platform_spec.hyperparameters import Hyperparameters
    from platform_spec.models import get_preset
    from training.data import DistributedSampler, TokenDataset, resolve_vocab_size
    from training.model import build_model

    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    dataset = TokenDataset(shards)
    preset = get_preset("gpt-tiny")
    config = preset.with_overrides(
        vocab_size=resolve_vocab_size(Hyperparameters(), preset.vocab_size, dataset.vocab_size)
    )
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    sampler = DistributedSampler(
        dataset, seq_length=seq_length, batch_size=batch_size, grad_accum=1, rank=0, world_size=1, seed=1234
    )
    start = 0.0
    for step in range(steps):
        if step == warmup:
            start = time.perf_counter()
        tokens = torch.from_numpy(sampler.batch(step, 0))
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        float(loss.detach())  # the trainer reads the loss every step too (log_interval=1)
    elapsed = time.perf_counter() - start
    return batch_size * seq_length * (steps - warmup) / elapsed


def trainer_run(
    shards: Path, work: Path, *, nproc: int, steps: int, warmup: int, batch_size: int, seq_length: int, lr: float
) -> float:
    """Our trainer through the entry point: tokens/s over the steps after warmup (from its metric records)."""
    from training.local import read_metrics, run_local

    hp = {
        "model": "gpt-tiny",
        "precision": "fp32",
        "batch_size": batch_size // nproc,
        "seq_length": seq_length,
        "max_steps": steps,
        "warmup_steps": min(5, steps),
        "learning_rate": lr,
        "min_learning_rate": lr / 10,
        "log_interval": 1,
        "checkpoint_interval": 10**6,
        "keep_checkpoints": 1,
    }
    run = run_local(work, hp, data_dir=shards, nproc=nproc, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"trainer run failed:\n{run.output[-3000:]}")
    records = [r for r in read_metrics(work) if r["step"] > warmup]
    tokens = batch_size * seq_length * len(records)
    seconds = sum(batch_size * seq_length / r["tokens_per_sec"] for r in records)
    return tokens / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8, help="global batch (sequences per step)")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads in total")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant (the best is reported)")
    args = parser.parse_args(argv)
    lr = 1e-3

    from training.corpus import python_docs_corpus
    from training.prepare import prepare_data

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shards = prepare_data(root / "shards", [python_docs_corpus(root / "corpus.txt")]).output_dir
        common = {
            "steps": args.steps,
            "warmup": args.warmup,
            "batch_size": args.batch_size,
            "seq_length": args.seq_length,
            "lr": lr,
        }
        layouts = [n for n in (1, 2) if args.batch_size % n == 0 and n <= args.threads]
        best: dict[str, float] = {}
        # Alternate the variants and keep each one's best of --repeats: other work on a shared
        # machine only ever slows a run down, so the best run is the least disturbed one.
        for repeat in range(args.repeats):
            best["plain"] = max(best.get("plain", 0.0), plain_loop(shards, threads=args.threads, **common))
            for nproc in layouts:
                tps = trainer_run(shards, root / f"trainer-{nproc}-{repeat}", nproc=nproc, **common)
                best[f"trainer{nproc}"] = max(best.get(f"trainer{nproc}", 0.0), tps)
        baseline = best["plain"]
        rows = [("plain PyTorch loop (1 process, no FSDP)", f"1 x {args.threads}", baseline)]
        for nproc in layouts:
            rows.append(
                (
                    f"trainer via entry point (torchrun, FSDP2 x{nproc}, gloo)",
                    f"{nproc} x {args.threads // nproc}",
                    best[f"trainer{nproc}"],
                )
            )

    print(
        f"\ngpt-tiny, fp32, global batch {args.batch_size} x {args.seq_length} tokens, "
        f"{args.steps} steps ({args.warmup} warmup left out), {args.threads} CPU threads in total, "
        f"best of {args.repeats}\n"
    )
    print(f"{'variant':<52} {'procs x threads':>15} {'tokens/s':>10} {'ratio':>7}")
    for name, layout, tps in rows:
        print(f"{name:<52} {layout:>15} {tps:>10.0f} {tps / baseline:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
