"""The :class:`ModelShape` protocol: what every model family's shape dataclass offers.

Its home is here, not in :mod:`platform_spec.models` (which re-exports it, ``models.ModelShape``), because a
runtime-checkable protocol needs :mod:`typing` (about 3 ms to import), and nothing that plans or validates a
configuration needs the protocol at run time, only type checkers and ``isinstance`` checks do:
:mod:`platform_spec.models` imports this module on the first ``models.ModelShape`` lookup (its module
``__getattr__``), so ``trainctl plan`` starts without :mod:`typing` (issue 17).

Pure Python, standard library only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ModelShape"]


@runtime_checkable
class ModelShape(Protocol):
    """What every family's shape dataclass offers (frozen dataclasses; sizes as integers).

    Attributes:
        name: the preset's name (``"gpt-1b"``), or any label for a custom shape.
        num_layers: transformer blocks.
        hidden_size: width of the residual stream (embedding columns, LM-head rows).
        vocab_size: embedding rows.
        params_per_block: parameters in one block.
        block_params: parameters in all blocks.
        num_params: parameters of the full model (a tied weight once).

    A shape may also have ``tied_embeddings`` (the LM head shares the token embedding's weight; absent:
    untied), which the trainer's skeleton reads.
    """

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int

    @property
    def params_per_block(self) -> int: ...

    @property
    def block_params(self) -> int: ...

    @property
    def num_params(self) -> int: ...

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> ModelShape: ...
