"""A toy second model family, for tests only: what a new family is -- this folder plus one registration line.

``tests/model_families/test_family_seam.py`` copies ``model_families/`` into a
temporary directory, puts this folder beside ``gpt/`` as ``toy/``, adds the one
import line to the copy's ``model_families/__init__.py`` and shows, in a fresh
process, that the trainer builds, trains, exports and reloads a ``toy-tiny``
model and the planner estimates one; nothing else of the repository changes.

The model: token-wise MLP blocks ``x + fc2(relu(fc1(rms_norm(x))))`` (no
attention, no positions, no biases), an RMSNorm before the head, torch-native
blocks only (no TransformerEngine backend). Pure Python, like every family's
``__init__``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from platform_spec.models import ModelFamily, ShapeTerms, register_family

INIT_STD = 0.02


@dataclass(frozen=True)
class ToyConfig:
    """Shape of a toy model: ``num_layers`` MLP blocks of width ``hidden_size`` and inner ``ffn_hidden_size``."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    vocab_size: int

    @property
    def params_per_block(self) -> int:
        """RMSNorm weight ``h`` + fc1 ``h*f`` + fc2 ``f*h``."""
        return self.hidden_size + 2 * self.hidden_size * self.ffn_hidden_size

    @property
    def block_params(self) -> int:
        return self.num_layers * self.params_per_block

    @property
    def num_params(self) -> int:
        """Blocks + embedding ``V*h`` + final RMSNorm ``h`` + head ``h*V``."""
        return self.block_params + 2 * self.vocab_size * self.hidden_size + self.hidden_size

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> ToyConfig:
        changes = {k: v for k, v in (("num_layers", num_layers), ("vocab_size", vocab_size)) if v is not None}
        return dataclasses.replace(self, **changes)


PRESETS = {"toy-tiny": ToyConfig("toy-tiny", num_layers=2, hidden_size=64, ffn_hidden_size=128, vocab_size=256)}


def matmul_weights_per_block(model: ToyConfig) -> int:
    return 2 * model.hidden_size * model.ffn_hidden_size


def attention_flops_per_token(model: ToyConfig, seq_length: int, *, causal: bool = True) -> float:
    return 0.0  # no attention


def flops_per_token(model: ToyConfig, seq_length: int, *, include_embedding: bool = True, causal: bool = True) -> float:
    n = model.num_layers * matmul_weights_per_block(model) + (
        model.hidden_size * model.vocab_size if include_embedding else 0
    )
    return 6.0 * n


def block_activation_terms(
    model: ToyConfig,
    *,
    activation_bytes: float,
    quantized_bytes: float | None,
    dropout: bool = False,
    quantized_copy_bytes: float | None = None,  # no TransformerEngine block: one layout
) -> dict[str, float]:
    h, f, a = model.hidden_size, model.ffn_hidden_size, activation_bytes
    gemm_in = quantized_bytes if quantized_bytes is not None else a
    return {"norm_input": a * h, "fc1_input": gemm_in * h, "fc1_output": a * f, "fc2_input": gemm_in * f}


def block_backward_transient_bytes_per_token(
    model: ToyConfig, *, activation_bytes: float, quantized_bytes: float | None
) -> float:
    return activation_bytes * (model.hidden_size + model.ffn_hidden_size)


def block_elementwise_bytes_per_token(
    model: ToyConfig, *, activation_bytes: float, quantized_bytes: float | None, dropout: bool = False
) -> tuple[float, float]:
    forward = activation_bytes * (4 * model.hidden_size + 2 * model.ffn_hidden_size)
    return forward, 2 * forward


def init_rule(canonical: str, model: ToyConfig) -> str | float:
    return "ones" if canonical.endswith("norm.weight") else INIT_STD


FAMILY = register_family(
    ModelFamily(
        name="toy",
        shape_type=ToyConfig,
        presets=PRESETS,
        flops_per_token=flops_per_token,
        description="token-wise MLP blocks (tests only)",
        terms=ShapeTerms(
            matmul_weights_per_block=matmul_weights_per_block,
            attention_flops_per_token=attention_flops_per_token,
            block_activation_terms=block_activation_terms,
            block_backward_transient_bytes_per_token=block_backward_transient_bytes_per_token,
            block_elementwise_bytes_per_token=block_elementwise_bytes_per_token,
            kernels_per_block=7,
        ),
        package=__name__,
        blocks={"torch": ".torch_block"},
        init_rule=init_rule,
        export_format="toy-mlp",
        export_metadata={"activation": "relu"},
    )
)
