"""The decoder-only transformer, written for one device.

Parallelism (activation checkpointing, FSDP2) is applied afterwards in
:mod:`training.parallelize`; precision recipes in :mod:`training.precision`.

Two implementations of the same block, with the same parameters (count,
shapes, math), chosen by :func:`build_model`:

* ``backend="te"`` (CUDA with TransformerEngine installed): each block is a
  ``transformer_engine.pytorch.TransformerLayer`` (fused LayerNorm+QKV,
  fused attention, LayerNorm+MLP), so fp8 / mxfp8 / nvfp4 recipes apply.
* ``backend="torch"`` (CPU, or CUDA without TransformerEngine): the
  torch-native equivalent below. TransformerEngine is never imported here.

Block (pre-LayerNorm, ``te.TransformerLayer``'s structure)::

    x = x + proj(causal_attention(rope(qkv(LayerNorm(x)))))
    x = x + fc2(gelu_tanh(fc1(LayerNorm(x))))

QKV has a bias and is laid out ``[q; k; v]`` (TE ``qkv_weight_interleaved=False``),
GELU is the tanh approximation (TE's ``gelu``), LayerNorm eps 1e-5, no
dropout. Positions: rotary embeddings (RoPE, base 10000, rotate-half layout,
TE's default), which add no parameters. Around the blocks: a token embedding,
a final LayerNorm and an untied output head (no bias); those three are torch
modules on both backends, so the head runs in bf16 outside the FP8 region
(its quantisation error would go straight into the loss).

Parameter count = :attr:`model_families.gpt.ModelConfig.num_params`
(``L * (4h^2 + 2hf + 9h + f) + 2Vh + 2h``).

The loss is computed inside ``forward`` (so FSDP's root hooks cover the head)
in chunks of tokens whose logits are recomputed in backward: at most
``LOSS_CHUNK_ELEMENTS`` fp32 logits are alive at once instead of
``batch * seq * vocab``.

Canonical parameter names (the torch-native names) are what the final
safetensors export uses; :func:`canonical_name` maps TE names to them.

Rotary angles reach every block in fp32: ``GPT.forward`` computes them in
fp32 and passes them to each block as an argument, and
:mod:`training.parallelize` tells FSDP2 not to cast the blocks' forward
inputs (its ``MixedPrecisionPolicy`` would otherwise round them to bf16: at
position 8191 bf16's spacing is 32, so an angle could move by up to 16
radians). The hidden state needs no cast: it comes out of the token
embedding, whose weight FSDP2 already all-gathers in the compute dtype.

Initial weights (:meth:`GPT.init_weights`) are a function of the seed and
each parameter's canonical name only: every parameter is drawn whole from its
own generator (seeded from ``(seed, canonical name)``) and each rank keeps its
shard of it. So a model sharded over any number of ranks starts equal to the
unsharded one (on the same device type), and the TE and torch-native
backends start from the same values.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from model_families.gpt import ModelConfig

ROPE_BASE = 10000.0
LAYERNORM_EPS = 1e-5
INIT_STD = 0.02
LOSS_CHUNK_ELEMENTS = 1 << 26
"""fp32 logits alive at once in the loss (64 Mi elements = 256 MiB)."""


# ---------------------------------------------------------------------------
# Rotary position embedding


def rope_angles(seq_length: int, head_dim: int, device: torch.device | str) -> torch.Tensor:
    """Rotary angles ``[seq_length, head_dim]`` (fp32): ``cat(freqs, freqs)``, ``freqs = pos * base^(-2i/d)``."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    positions = torch.arange(seq_length, device=device, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    return torch.cat([freqs, freqs], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[batch, heads, seq, head_dim]`` by the angles (rotate-half layout), in fp32."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).type_as(x)


# ---------------------------------------------------------------------------
# Torch-native block


class Attention(nn.Module):
    """Causal multi-head self-attention: fused QKV (with bias) + SDPA + output projection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.qkv = nn.Linear(h, 3 * h, bias=True)
        self.proj = nn.Linear(h, h, bias=True)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class FeedForward(nn.Module):
    """``fc2(gelu_tanh(fc1(x)))`` with biases."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=True)
        self.fc2 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm decoder block (torch-native)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)
        self.attention = Attention(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


# ---------------------------------------------------------------------------
# TransformerEngine block (imported lazily; only on CUDA)


def transformer_engine_available() -> bool:
    """Whether ``transformer_engine.pytorch`` can be imported (imports it; call only on CUDA)."""
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # ImportError, or a broken install (missing .so)
        return False
    return True


class TEBlock(nn.Module):
    """One ``te.TransformerLayer`` configured to match :class:`TransformerBlock`.

    ``params_dtype`` is fp32: FSDP2 keeps fp32 master shards and all-gathers
    bf16 copies (MixedPrecisionPolicy), so TE sees bf16 weights and inputs.
    """

    def __init__(self, config: ModelConfig, layer_number: int, *, device: str | torch.device, params_dtype: torch.dtype) -> None:
        super().__init__()
        import transformer_engine.pytorch as te

        std_out = INIT_STD / math.sqrt(2.0 * config.num_layers)
        self.layer = te.TransformerLayer(
            config.hidden_size,
            config.ffn_hidden_size,
            config.num_attention_heads,
            layernorm_epsilon=LAYERNORM_EPS,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            init_method=partial(nn.init.normal_, mean=0.0, std=INIT_STD),
            output_layer_init_method=partial(nn.init.normal_, mean=0.0, std=std_out),
            layer_number=layer_number,
            self_attn_mask_type="causal",
            params_dtype=params_dtype,
            fuse_qkv_params=True,
            qkv_weight_interleaved=False,
            bias=True,
            activation="gelu",
            normalization="LayerNorm",
            attn_input_format="bshd",
            device=device,
        )

    def forward(self, x: torch.Tensor, rope_angles_sb11d: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, seq, hidden]`` (compute dtype); ``rope_angles_sb11d`` ``[seq, 1, 1, head_dim]`` fp32 radians."""
        return self.layer(x, rotary_pos_emb=rope_angles_sb11d)


# TE parameter names (fuse_qkv_params=True, LayerNorm, bias) -> canonical names.
_TE_TO_CANONICAL: tuple[tuple[str, str], ...] = (
    ("layer.self_attention.layernorm_qkv.layer_norm_weight", "attention_norm.weight"),
    ("layer.self_attention.layernorm_qkv.layer_norm_bias", "attention_norm.bias"),
    ("layer.self_attention.layernorm_qkv.weight", "attention.qkv.weight"),
    ("layer.self_attention.layernorm_qkv.bias", "attention.qkv.bias"),
    ("layer.self_attention.proj.weight", "attention.proj.weight"),
    ("layer.self_attention.proj.bias", "attention.proj.bias"),
    ("layer.layernorm_mlp.layer_norm_weight", "ffn_norm.weight"),
    ("layer.layernorm_mlp.layer_norm_bias", "ffn_norm.bias"),
    ("layer.layernorm_mlp.fc1_weight", "feed_forward.fc1.weight"),
    ("layer.layernorm_mlp.fc1_bias", "feed_forward.fc1.bias"),
    ("layer.layernorm_mlp.fc2_weight", "feed_forward.fc2.weight"),
    ("layer.layernorm_mlp.fc2_bias", "feed_forward.fc2.bias"),
)
_WRAPPER_PARTS = re.compile(r"(_checkpoint_wrapped_module|_fsdp_wrapped_module|_orig_mod)\.")


def canonical_name(name: str) -> str | None:
    """The torch-native name of a parameter of either backend; None for TE's ``_extra_state``.

    Raises:
        KeyError: a TE parameter this mapping does not know (TE renamed something).
    """
    name = _WRAPPER_PARTS.sub("", name)
    if name.endswith("_extra_state"):
        return None
    match = re.match(r"(layers\.\d+\.)(layer\..*)$", name)
    if not match:
        return name
    prefix, rest = match.groups()
    for te_name, canonical in _TE_TO_CANONICAL:
        if rest == te_name:
            return prefix + canonical
    raise KeyError(f"unknown TransformerEngine parameter {name!r}; update training.model._TE_TO_CANONICAL")


# ---------------------------------------------------------------------------
# The model


class GPT(nn.Module):
    """Decoder-only language model.

    ``forward(tokens [batch, seq] int64, targets [batch, seq] int64 | None)``
    returns the mean cross-entropy (fp32 scalar, nats/token) when ``targets``
    is given, else logits ``[batch, seq, vocab]``.
    """

    def __init__(self, config: ModelConfig, block_factory: Callable[[int], nn.Module], backend: str) -> None:
        super().__init__()
        self.config = config
        self.backend = backend
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([block_factory(i) for i in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._rope_cache: dict[tuple[int, str], Any] = {}

    def _rope(self, seq_length: int, device: torch.device) -> Any:
        """The blocks' rotary input, fp32: TE ``[s, 1, 1, d]`` angles, or torch ``(cos, sin)`` ``[s, d]``."""
        key = (seq_length, str(device))
        cached = self._rope_cache.get(key)
        if cached is None:
            angles = rope_angles(seq_length, self.config.head_dim, device)
            if self.backend == "te":
                cached = angles.view(seq_length, 1, 1, -1)  # TE's [s, 1, 1, d] angle layout
            else:
                cached = (angles.cos(), angles.sin())
            self._rope_cache[key] = cached
        return cached

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        rope = self._rope(tokens.shape[1], tokens.device)
        for block in self.layers:
            h = block(h, rope)
        h = self.norm(h)
        if targets is None:
            return self.output(h).float()
        return chunked_cross_entropy(h.flatten(0, 1), self.output.weight, targets.flatten())

    @torch.no_grad()
    def init_weights(self, seed: int | None = None) -> None:
        """Initialise every parameter (also after ``to_empty`` from the meta device, and after sharding).

        Linear weights N(0, 0.02), residual output projections (attention
        ``proj``, ``fc2``) N(0, 0.02 / sqrt(2 L)) (GPT-2), biases 0, LayerNorm
        1/0, embedding and head N(0, 0.02), on both backends (TE blocks by
        canonical name). Each parameter is drawn whole, in fp32, from a
        generator on its device seeded by :func:`parameter_seed` ``(seed,
        canonical name)``, then cast to its dtype; a sharded parameter
        (DTensor, FSDP2/HSDP) keeps this rank's shard of that full tensor. The
        values therefore do not depend on the number of ranks, the sharding or
        the order of initialisation. Transient memory: one full parameter.

        Args:
            seed: the run's seed. Default: ``torch.initial_seed()`` (what
                ``torch.manual_seed`` set).
        """
        base = torch.initial_seed() if seed is None else int(seed)
        std_out = INIT_STD / math.sqrt(2.0 * self.config.num_layers)
        for name, param in self.named_parameters():
            canonical = canonical_name(name)
            assert canonical is not None  # _extra_state is not a parameter
            _fill_parameter(param, _init_rule(canonical, std_out), parameter_seed(base, canonical))

    def num_parameters(self) -> int:
        """Parameters (DTensor-aware: counts the full, unsharded sizes)."""
        return sum(p.numel() for p in self.parameters())


def parameter_seed(seed: int, name: str) -> int:
    """The generator seed of parameter ``name`` (canonical) in a run seeded ``seed``: the first 63 bits
    of SHA-256 of ``"<seed>/<name>"`` (stable across processes, Python versions and machines)."""
    digest = hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


_ONES = "ones"
_ZEROS = "zeros"


def _init_rule(canonical: str, std_out: float) -> str | float:
    """``"ones"``, ``"zeros"`` or the standard deviation of the normal init of a canonical parameter name."""
    leaf = canonical.rsplit(".", 2)
    module, kind = (leaf[-2] if len(leaf) > 1 else ""), leaf[-1]
    if module in ("norm", "attention_norm", "ffn_norm"):
        return _ONES if kind == "weight" else _ZEROS
    if kind == "bias":
        return _ZEROS
    if module in ("proj", "fc2"):
        return std_out
    return INIT_STD  # tok_embeddings, output, qkv, fc1


def _fill_parameter(param: torch.Tensor, rule: str | float, seed: int) -> None:
    """Write the full-tensor init ``rule`` into ``param`` (its local shard when it is a DTensor)."""
    if rule == _ONES:
        param.fill_(1.0)
        return
    if rule == _ZEROS:
        param.zero_()
        return
    from torch.distributed.tensor import DTensor, distribute_tensor

    device = param.device
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    full = torch.empty(tuple(param.shape), dtype=torch.float32, device=device)
    full.normal_(mean=0.0, std=float(rule), generator=generator)
    full = full.to(param.dtype)
    if isinstance(param, DTensor):
        # src_data_rank=None: every rank cuts its own shard from its identical full tensor (no communication)
        full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
    param.copy_(full)


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight)
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()  # the softmax and the loss in fp32
    return F.cross_entropy(logits, targets, reduction="sum")


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``hidden [N, h] @ weight[V, h]^T`` against ``targets [N]``.

    Chunks of at most ``LOSS_CHUNK_ELEMENTS / V`` tokens; when there is more
    than one chunk each is recomputed in backward (activation checkpointing
    of the head), so peak logits memory is one chunk.
    """
    n, vocab = hidden.shape[0], weight.shape[0]
    chunk = max(1, LOSS_CHUNK_ELEMENTS // vocab)
    if n <= chunk:
        return _chunk_loss(hidden, weight, targets) / n
    total = hidden.new_zeros((), dtype=torch.promote_types(hidden.dtype, torch.float32))
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        total = total + torch_checkpoint(
            _chunk_loss, hidden[start:end], weight, targets[start:end], use_reentrant=False
        )
    return total / n


def build_model(
    config: ModelConfig,
    *,
    backend: str = "torch",
    device: str | torch.device = "cpu",
) -> GPT:
    """Build the model on ``device`` (``"meta"`` for deferred init; see :meth:`GPT.init_weights`).

    Args:
        backend: ``"torch"`` (native) or ``"te"`` (TransformerEngine blocks, CUDA/meta only;
            fp32 ``params_dtype``: FSDP2 keeps fp32 master shards).

    Raises:
        ValueError: unknown backend, or ``te`` on a CPU device.
    """
    if backend == "torch":
        factory: Callable[[int], nn.Module] = lambda i: TransformerBlock(config)  # noqa: E731
    elif backend == "te":
        if torch.device(device).type == "cpu":
            raise ValueError("backend='te' needs a CUDA (or meta) device; use backend='torch' on CPU")
        factory = lambda i: TEBlock(config, i + 1, device=device, params_dtype=torch.float32)  # noqa: E731
    else:
        raise ValueError(f"backend {backend!r}: expected 'torch' or 'te'")
    with torch.device(device):
        model = GPT(config, factory, backend)
    if torch.device(device).type != "meta":
        model.init_weights()
    return model


# ---------------------------------------------------------------------------
# Export / import of final weights (consolidated safetensors)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_NAME = "gpt-decoder"


def canonical_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a full state dict of either backend to canonical names (drops TE ``_extra_state``)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        canonical = canonical_name(name)
        if canonical is None or not isinstance(tensor, torch.Tensor):
            continue
        out[canonical] = tensor
    return out


def save_pretrained(
    directory: str | os.PathLike[str],
    state_dict: Mapping[str, torch.Tensor],
    config: ModelConfig,
    *,
    dtype: torch.dtype,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model.safetensors`` (canonical names, ``dtype``) and ``config.json``.

    ``config.json`` holds the :class:`ModelConfig` fields, the format, the
    dtype and ``extra`` (e.g. tokenizer and training step).
    """
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in canonical_state_dict(state_dict).items()}
    tmp = out / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / WEIGHTS_FILE)
    meta = {
        "format": FORMAT_NAME,
        "model": config.name,
        "num_layers": config.num_layers,
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "ffn_hidden_size": config.ffn_hidden_size,
        "vocab_size": config.vocab_size,
        "num_params": config.num_params,
        "dtype": str(dtype).removeprefix("torch."),
        "rope_base": ROPE_BASE,
        "layernorm_eps": LAYERNORM_EPS,
        "activation": "gelu_tanh",
        "weights": WEIGHTS_FILE,
        **(dict(extra) if extra else {}),
    }
    (out / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out / WEIGHTS_FILE


def load_pretrained(directory: str | os.PathLike[str], *, dtype: torch.dtype = torch.float32) -> GPT:
    """Load a :func:`save_pretrained` directory into a single-device torch-native model (CPU).

    Raises:
        FileNotFoundError: missing ``config.json`` or weights.
        RuntimeError: weights that do not match the config (strict load).
    """
    from safetensors.torch import load_file

    src = Path(directory)
    meta = json.loads((src / CONFIG_FILE).read_text(encoding="utf-8"))
    config = ModelConfig(
        meta["model"],
        num_layers=meta["num_layers"],
        hidden_size=meta["hidden_size"],
        num_attention_heads=meta["num_attention_heads"],
        ffn_hidden_size=meta["ffn_hidden_size"],
        vocab_size=meta["vocab_size"],
    )
    with torch.device("meta"):
        model = GPT(config, lambda i: TransformerBlock(config), "torch")
    state = load_file(str(src / meta.get("weights", WEIGHTS_FILE)))
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    return model


__all__ = [
    "GPT",
    "TEBlock",
    "TransformerBlock",
    "apply_rope",
    "build_model",
    "canonical_name",
    "canonical_state_dict",
    "chunked_cross_entropy",
    "load_pretrained",
    "parameter_seed",
    "rope_angles",
    "save_pretrained",
    "transformer_engine_available",
]
