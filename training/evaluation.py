"""The validation loss: every ``eval_interval`` optimizer steps (and after the last), the model's loss on the
``validation`` channel, under the run's parallelism.

What an evaluation reads: ``eval_batches`` global micro-batches of ``batch_size x world_size`` sequences of
``seq_length`` tokens, windows of the validation shards cut as the training data's are
(:class:`training.data.DistributedSampler`, one epoch's permutation seeded by ``seed``, read from its start):
global batch ``b`` is samples ``[b * B * W, (b + 1) * B * W)`` and rank ``r`` takes its ``batch_size`` rows of
each, so every evaluation reads the same sequences, and a run of another world size with the same global
micro-batch (1 x 16 or 2 x 8) reads the same ones too. Every rank runs the same number of forwards (FSDP's
all-gathers are collective). With ``synthetic_data`` the batches are random tokens of a stream of their own
(seeded apart from the training stream: seed + 2**31), for benchmarks of the evaluation's cost.

The loss is token-weighted: sum over every target token of its cross-entropy / number of target tokens, over
all ranks (one all-reduce of ``(loss sum, token count)`` in float64), not a mean of batch means. The model runs
in eval mode without gradients (activation checkpointing then recomputes nothing) under the precision's
autocast, and is back in train mode afterwards, also when the evaluation fails.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as dist

from platform_spec.hyperparameters import VALIDATION_CHANNEL, Hyperparameters
from training.data import DataError, DistributedSampler, SyntheticSampler, TokenDataset, check_same_tokenizer

SYNTHETIC_SEED_OFFSET = 1 << 31
"""Added to ``seed`` for synthetic validation tokens: above every training seed (``seed`` <= 2**31 - 1)."""


class Evaluator:
    """The validation batches of one rank and the loss over all ranks.

    Args:
        sampler: yields this rank's micro-batch ``b`` as ``sampler.batch(0, b)`` (``[batch_size, seq_length + 1]``
            int64 tokens); its ``grad_accum`` is ``eval_batches``.
        device: where the batches go.
        world_size: ranks taking part (each calls :meth:`evaluate`).
    """

    def __init__(self, sampler: DistributedSampler | SyntheticSampler, *, device: torch.device, world_size: int):
        self.sampler = sampler
        self.batches = sampler.grad_accum
        self.device = device
        self.world_size = world_size

    @classmethod
    def for_run(
        cls,
        hp: Hyperparameters,
        *,
        validation_dir: Any,
        train: TokenDataset | None,
        vocab_size: int,
        rank: int,
        world_size: int,
        device: torch.device,
    ) -> Evaluator | None:
        """The evaluator of a run (``None`` when ``eval_interval`` is 0).

        Args:
            validation_dir: the ``validation`` channel's folder (read unless ``synthetic_data``).
            train: the training shards (``None`` with synthetic data); the validation shards must share their
                tokenizer.
            vocab_size: the model's vocabulary (synthetic tokens are drawn below it).

        Raises:
            DataError: no validation shards, another tokenizer than ``train``'s, or fewer windows than one
                evaluation reads (names ``eval_batches`` and what the channel holds).
        """
        if hp.eval_interval == 0:
            return None
        layout = {
            "seq_length": hp.seq_length,
            "batch_size": hp.batch_size,
            "grad_accum": hp.eval_batches,
            "rank": rank,
            "world_size": world_size,
        }
        if hp.synthetic_data:
            synthetic = SyntheticSampler(vocab_size=vocab_size, seed=hp.seed + SYNTHETIC_SEED_OFFSET, **layout)
            return cls(synthetic, device=device, world_size=world_size)
        dataset = TokenDataset(validation_dir, scan=False)
        if train is not None:
            check_same_tokenizer(train, dataset, VALIDATION_CHANNEL)
        sampler = DistributedSampler(dataset, seed=hp.seed, **layout)
        needed = sampler.samples_per_step
        if sampler.num_windows < needed:
            raise DataError(
                f"hyperparameter 'eval_batches': got {hp.eval_batches}, expected at most "
                f"{sampler.num_windows // (hp.batch_size * world_size)}: an evaluation reads eval_batches x "
                f"batch_size {hp.batch_size} x {world_size} ranks = {needed} sequences of seq_length + 1 = "
                f"{hp.seq_length + 1} tokens, and the {VALIDATION_CHANNEL} channel ({dataset.directory}, "
                f"{dataset.num_tokens} tokens) holds {sampler.num_windows}; lower eval_batches or add validation data"
            )
        return cls(sampler, device=device, world_size=world_size)

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's micro-batch ``index`` of every evaluation: ``(inputs, targets)``, ``[batch_size,
        seq_length]`` int64 each, on the device."""
        tokens = torch.from_numpy(self.sampler.batch(0, index))
        if self.device.type == "cuda":
            tokens = tokens.pin_memory().to(self.device, non_blocking=True)
        return tokens[:, :-1], tokens[:, 1:]

    def evaluate(self, model: torch.nn.Module, autocast: Callable[[], AbstractContextManager[Any]]) -> float:
        """The validation loss (nats/token) of ``model`` over every rank's batches; every rank calls it and
        gets the same value.

        Args:
            model: ``model(inputs, targets)`` returns the mean cross-entropy of the batch's tokens.
            autocast: a new context of the precision's autocast for each forward.
        """
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # (loss sum, tokens)
        model.eval()
        try:
            with torch.no_grad():
                for index in range(self.batches):
                    inputs, targets = self.batch(index)
                    with autocast():
                        mean = model(inputs, targets)
                    tokens = targets.numel()
                    totals[0] += mean.detach().double() * tokens
                    totals[1] += tokens
            if self.world_size > 1:
                dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        finally:
            model.train()
        return float(totals[0] / totals[1])


__all__ = ["SYNTHETIC_SEED_OFFSET", "Evaluator"]
