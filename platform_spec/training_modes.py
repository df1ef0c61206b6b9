"""The trainer's memory-for-time modes: activation checkpointing and gradient synchronisation under
gradient accumulation. One home for their names, their grammar and which blocks / micro-batches each
mode touches: the hyperparameter specs validate with it (:mod:`platform_spec.hyperparameters`), the
trainer applies it (``training/parallelize.py``, ``training/train.py``), the planner models it
(``planner/memory.py``, ``planner/throughput.py``) and the submitter refuses by it.

Activation checkpointing (``activation_checkpointing``)
-------------------------------------------------------
``off``
    every block keeps what its backward needs (no recompute).
``full``
    every block is wrapped: it keeps only its input and runs its forward again in backward.
``selective:N``
    every Nth block is wrapped (block-level selective checkpointing), counting blocks from 1: blocks
    ``N, 2N, 3N ...`` (0-based indices ``N-1, 2N-1 ...``) recompute, the others keep their activations.
    This is torchtitan's ``activation_checkpoint.mode = "selective"`` with an integer
    ``selective_ac_option`` (pytorch/torchtitan ``parallelize_llama.py`` ``_apply_ac_to_transformer_block``:
    ``ptd_checkpoint_wrapper._count % ac_freq == 0``). ``selective:1`` is ``full`` and is normalised to it.
    Per-operation selective checkpointing (torchtitan's ``"op"``) is not offered: the trainer does not
    implement it.

Gradient synchronisation (``gradient_sync``), with ``gradient_accumulation_steps`` > 1
-------------------------------------------------------------------------------------
``every_micro_batch`` (default)
    FSDP2 reduce-scatters the gradients after every micro-batch's backward and accumulates the sharded
    result (``requires_gradient_sync`` stays true): only sharded fp32 gradients (``4N/D`` bytes per GPU)
    live between micro-batches, at the price of one reduce-scatter per micro-batch. What torchtitan and
    MosaicML's Composer do by default, and the mode that fits more.
``last_micro_batch``
    ``FSDPModule.set_requires_gradient_sync(False)`` on all but the last micro-batch: FSDP2 keeps the
    unsharded gradients, accumulated in the reduce dtype (fp32 under the trainer's mixed-precision policy:
    ``FSDPParam.to_accumulated_grad_if_needed`` in torch/distributed/fsdp/_fully_shard/_fsdp_param.py),
    ``4N`` bytes per GPU alive from the first micro-batch's backward to the step, and reduce-scatters once
    per optimizer step: less traffic, much more memory.

With one micro-batch per step both modes are the same run.

Pure Python, standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from platform_spec.errors import FieldError

__all__ = [
    "ACTIVATION_CHECKPOINTING_EXPECTED",
    "ACTIVATION_CHECKPOINTING_KINDS",
    "DEFAULT_GRADIENT_SYNC",
    "GRADIENT_SYNC_MODES",
    "MAX_SELECTIVE_INTERVAL",
    "SELECTIVE_PATTERN",
    "ActivationCheckpointing",
    "activation_checkpointing",
    "check_activation_checkpointing_for",
    "gradient_reductions_per_step",
    "reduces_gradients",
]

ACTIVATION_CHECKPOINTING_KINDS: tuple[str, ...] = ("off", "full", "selective")
"""The kinds of activation checkpointing; ``selective`` takes its interval: ``selective:N``."""

MAX_SELECTIVE_INTERVAL = 512
"""Largest ``N`` of ``selective:N`` (the largest ``num_layers`` the trainer accepts)."""

SELECTIVE_PATTERN = r"(?:off|full|selective:[0-9]+)"
"""The grammar's values as a regular expression (JSON Schema ``pattern`` of the hyperparameter; the range of
``N`` is checked by :func:`activation_checkpointing`)."""

ACTIVATION_CHECKPOINTING_EXPECTED = (
    f"off, full or selective:N (recompute every Nth block; N an integer from 1 to {MAX_SELECTIVE_INTERVAL}, "
    "selective:1 being full)"
)
"""What :func:`activation_checkpointing` accepts, in words (every refusal says it)."""

_SELECTIVE = r"selective:([0-9]+)\Z"
"""``selective:N``, normalised (a pattern ``re`` compiles at its first use, not at import)."""


@dataclass(frozen=True)
class ActivationCheckpointing:
    """One activation-checkpointing mode.

    Attributes:
        kind: ``"off"``, ``"full"`` or ``"selective"``.
        interval: ``N`` of ``selective:N`` (every Nth block recomputes); 1 for ``full``, 0 for ``off``.
    """

    kind: str
    interval: int

    @property
    def name(self) -> str:
        """The hyperparameter value: ``off``, ``full`` or ``selective:N``."""
        return f"selective:{self.interval}" if self.kind == "selective" else self.kind

    def __str__(self) -> str:
        return self.name

    def checkpointed_blocks(self, num_layers: int) -> tuple[int, ...]:
        """0-based indices of the blocks that recompute in backward, of ``num_layers`` blocks: none (``off``),
        all (``full``), or ``N-1, 2N-1, ...`` (``selective:N``, torchtitan's count from 1)."""
        if self.kind == "off" or self.interval < 1:
            return ()
        return tuple(i for i in range(num_layers) if (i + 1) % self.interval == 0)

    def checkpointed_count(self, num_layers: int) -> int:
        """How many of ``num_layers`` blocks recompute: ``floor(num_layers / N)``."""
        return 0 if self.kind == "off" or self.interval < 1 else num_layers // self.interval


def activation_checkpointing(value: Any, *, field: str = "activation_checkpointing") -> ActivationCheckpointing:
    """Parse an activation-checkpointing mode (``off``, ``full``, ``selective:N``; any letter case,
    surrounding spaces ignored; ``selective:1`` is read as ``full``).

    Raises:
        FieldError: (named ``field``) anything else, e.g. ``selective`` without ``N``, ``selective:0`` or
            ``"op"`` (per-operation selective checkpointing is not offered).
    """
    if isinstance(value, ActivationCheckpointing):
        return value
    if not isinstance(value, str):
        raise FieldError(field, value, ACTIVATION_CHECKPOINTING_EXPECTED)
    text = value.strip().lower()
    if text in ("off", "full"):
        return ActivationCheckpointing(text, 0 if text == "off" else 1)
    match = re.match(_SELECTIVE, text)
    if match is None:
        raise FieldError(field, value, ACTIVATION_CHECKPOINTING_EXPECTED)
    interval = int(match.group(1))
    if not 1 <= interval <= MAX_SELECTIVE_INTERVAL:
        raise FieldError(field, value, ACTIVATION_CHECKPOINTING_EXPECTED)
    if interval == 1:
        return ActivationCheckpointing("full", 1)
    return ActivationCheckpointing("selective", interval)


def check_activation_checkpointing_for(
    mode: ActivationCheckpointing | str, num_layers: int, *, field: str = "activation_checkpointing"
) -> ActivationCheckpointing:
    """``mode`` for a model of ``num_layers`` blocks: ``selective:N`` must recompute at least one block.

    Raises:
        FieldError: ``N > num_layers`` (no block would recompute: say ``off``), naming ``field``.
    """
    parsed = activation_checkpointing(mode, field=field)
    if parsed.kind == "selective" and parsed.interval > num_layers:
        raise FieldError(
            field,
            parsed.name,
            f"selective:N with N <= num_layers ({num_layers}): selective:{parsed.interval} recomputes no block "
            "(use off)",
        )
    return parsed


GRADIENT_SYNC_MODES: tuple[str, ...] = ("every_micro_batch", "last_micro_batch")
"""When FSDP2 reduce-scatters gradients under gradient accumulation (module docstring)."""

DEFAULT_GRADIENT_SYNC = "every_micro_batch"
"""The default: sharded accumulation, the mode that fits more."""


def _check_sync(mode: str) -> None:
    if mode not in GRADIENT_SYNC_MODES:
        raise FieldError("gradient_sync", mode, "one of " + ", ".join(GRADIENT_SYNC_MODES))


def reduces_gradients(mode: str, micro_batch: int, micro_batches: int) -> bool:
    """Whether micro-batch ``micro_batch`` (0-based) of ``micro_batches`` reduce-scatters its gradients
    (``FSDPModule.set_requires_gradient_sync``): every one (``every_micro_batch``) or the last only
    (``last_micro_batch``).

    Raises:
        FieldError: an unknown ``mode`` (field ``gradient_sync``).
    """
    _check_sync(mode)
    return mode == "every_micro_batch" or micro_batch == micro_batches - 1


def gradient_reductions_per_step(mode: str, micro_batches: int) -> int:
    """Reduce-scatters of the gradients per optimizer step of ``micro_batches`` micro-batches."""
    return sum(reduces_gradients(mode, i, micro_batches) for i in range(micro_batches))
