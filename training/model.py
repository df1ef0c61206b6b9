"""The causal language model, written for one device, around a model family's blocks.

Parallelism (activation checkpointing, FSDP2) is applied afterwards in
:mod:`training.parallelize`; precision recipes in :mod:`training.precision`.

This module is family-independent: the skeleton every family shares
(:class:`CausalLM`) is a token embedding ``tok_embeddings``, the family's
blocks ``layers.<i>``, the family's final norm ``norm``, an output head
``output`` (no bias) and the loss. The head is tied to the embedding when the
shape says ``tied_embeddings`` (:meth:`CausalLM.tie_weights`: one Parameter
under both names, counted once; FSDP2 shards it once, in the root unit that
holds both modules, and registers its sharded and gathered forms on both, as
``fully_shard`` does for any parameter two modules share). The family (:mod:`platform_spec.models`,
found from the shape's type) supplies the blocks of each backend, what every
block receives besides the hidden state (e.g. rotary angles), the names,
initialisation and export facts of its parameters:

* ``backend="te"`` (CUDA with TransformerEngine installed, a precision other
  than fp32, a shape those blocks build): the family's TransformerEngine blocks
  (``model_families/<family>/te_block.py``), so fp8 / mxfp8 / nvfp4 recipes apply.
* ``backend="torch"`` (CPU, CUDA without TransformerEngine, fp32, or a shape the
  TE blocks do not build, e.g. Qwen2's Q/K/V biases): the family's torch-native
  blocks (``torch_block.py``). TransformerEngine is never imported then. fp32
  is here because TE has no fused or flash attention for fp32 inputs: its
  unfused attention would hold the full ``[b, h, s, s]`` scores
  (:data:`platform_spec.precisions.TE_FUSED_ATTENTION_DTYPES`).

The trainer picks one with :meth:`platform_spec.models.ModelFamily.backend_for`.

Both backends of a family have the same parameters (count, shapes, math); the
embedding, final norm and head are torch modules on both, so the head runs in
bf16 outside the FP8 region (its quantisation error would go straight into the
loss). Parameter count = the shape's ``num_params``.

The loss is computed inside ``forward`` (so FSDP's root hooks cover the head)
in chunks of tokens whose logits are recomputed in backward: at most
:data:`platform_spec.models.LOSS_CHUNK_ELEMENTS` fp32 logits are alive at once
instead of ``batch * seq * vocab`` (the planner counts the same chunk).

Canonical parameter names (the torch-native block's) are what initialisation
is keyed on and, unless the family names its exports otherwise, what the final
safetensors export uses; :func:`canonical_name` maps another backend's names to
them with the family's :attr:`~platform_spec.models.ModelFamily.parameter_names`.
A family with an :attr:`~platform_spec.models.ModelFamily.export_layout` (the
Llama family: Hugging Face's ``LlamaForCausalLM`` names) exports under those
names and a ``config.json`` of that library (:func:`save_pretrained`,
:func:`export_tensors`).

The blocks' second input (the family's ``block_input``, e.g. rotary angles)
reaches every block as the family computed it (fp32 for the GPT family's
angles): ``CausalLM.forward`` computes it once per sequence length and passes
it to each block as an argument, and :mod:`training.parallelize` tells FSDP2
not to cast the blocks' forward inputs (its ``MixedPrecisionPolicy`` would
otherwise round them to bf16: at position 8191 bf16's spacing is 32, so an
angle could move by up to 16 radians). The hidden state needs no cast: it comes
out of the token embedding, whose weight FSDP2 already all-gathers in the
compute dtype.

Initial weights (:meth:`CausalLM.init_weights`) are a function of the seed and
each parameter's canonical name only: every parameter is drawn whole from its
own generator (seeded from ``(seed, canonical name)``) and each rank keeps its
shard of it. So a model sharded over any number of ranks starts equal to the
unsharded one (on the same device type), and the TE and torch-native
backends start from the same values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from platform_spec.files import atomic_write_bytes
from platform_spec.hyperparameters import HF_CONFIG_FILE, HF_WEIGHTS_FILE
from platform_spec.models import (
    LOSS_CHUNK_ELEMENTS,
    ModelFamily,
    ModelShape,
    family_names,
    family_of_shape,
    get_family,
)
from training.tokenizer_files import TOKENIZER_FILES, DataTokenizer

BACKENDS: tuple[str, ...] = ("torch", "te")
"""The block implementations the trainer knows: torch-native, TransformerEngine (a family offers one or both)."""


def transformer_engine_available() -> bool:
    """Whether ``transformer_engine.pytorch`` can be imported (imports it; call only on CUDA)."""
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # ImportError, or a broken install (missing .so)
        return False
    return True


# ---------------------------------------------------------------------------
# Canonical parameter names

_WRAPPER_PARTS = re.compile(r"(_checkpoint_wrapped_module|_fsdp_wrapped_module|_orig_mod)\.")
_BLOCK_PARAMETER = re.compile(r"(layers\.\d+\.)(.*)$")
EXTRA_STATE = "_extra_state"


def _block_canonical(rest: str, family: ModelFamily, *, named_only: bool) -> str | None:
    """The canonical name of a block parameter ``rest`` (its name inside the block) of ``family``, or
    None when no backend of the family names a parameter so. A family without
    :attr:`~platform_spec.models.ModelFamily.parameter_names` (its only names are the canonical ones)
    takes every name, unless ``named_only`` (a search over families: only names a family lists count)."""
    mappings = list(family.parameter_names.values())
    if not mappings:
        return None if named_only else rest
    for mapping in mappings:
        if rest in mapping:
            return mapping[rest]
    if any(rest in mapping.values() for mapping in mappings):
        return rest
    return None


def canonical_name(name: str, family: ModelFamily | None = None) -> str | None:
    """The canonical name of a parameter of either backend; None for TransformerEngine's ``_extra_state``.

    Activation-checkpoint, FSDP and ``torch.compile`` wrapper parts are dropped; skeleton names
    (``tok_embeddings``, ``norm``, ``output``) are canonical already; a block's parameter is mapped
    through the family's :attr:`~platform_spec.models.ModelFamily.parameter_names`.

    Args:
        family: the model's family; default: the registered family whose parameter names list the name
            (a family without ``parameter_names`` must be given).

    Raises:
        KeyError: a block parameter the family's names do not know (TE renamed something, or a block
            gained a parameter its other backend lacks), or one several families map differently.
    """
    name = _WRAPPER_PARTS.sub("", name)
    if name.endswith(EXTRA_STATE):
        return None
    match = _BLOCK_PARAMETER.match(name)
    if not match:
        return name
    prefix, rest = match.groups()
    families = [family] if family is not None else [get_family(n) for n in family_names()]
    found = {c for c in (_block_canonical(rest, f, named_only=family is None) for f in families) if c is not None}
    if len(found) == 1:
        return prefix + found.pop()
    where = f"model family {family.name!r}" if family is not None else "the registered model families"
    if not found:
        raise KeyError(f"unknown block parameter {name!r} in {where}; update its parameter_names (model_families/)")
    raise KeyError(f"block parameter {name!r} is named differently by {where}: {sorted(found)}; pass the family")


def canonical_state_dict(
    state_dict: Mapping[str, torch.Tensor], family: ModelFamily | None = None
) -> dict[str, torch.Tensor]:
    """Rename a full state dict of either backend to canonical names (drops TE ``_extra_state``)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        canonical = canonical_name(name, family)
        if canonical is None or not isinstance(tensor, torch.Tensor):
            continue
        out[canonical] = tensor
    return out


# ---------------------------------------------------------------------------
# The model


class CausalLM(nn.Module):
    """Decoder-only language model: embedding, the family's blocks, final norm, LM head, loss.

    ``forward(tokens [batch, seq] int64, targets [batch, seq] int64 | None)``
    returns the mean cross-entropy (fp32 scalar, nats/token) when ``targets``
    is given, else logits ``[batch, seq, vocab]`` (fp32).

    Args:
        config: a shape of a registered model family (its ``ModelShape``); the family is found from its type.
        backend: one of the family's :attr:`~platform_spec.models.ModelFamily.blocks` (``"torch"``, ``"te"``).
        device: where the parameters are created (``"meta"``: no memory; see :func:`build_model`).
            Parameters are not initialised here: call :meth:`init_weights`.

    Raises:
        platform_spec.models.UnknownModelError: ``config`` is no registered family's shape.
        platform_spec.errors.FieldError: the family has no ``backend`` blocks.
    """

    def __init__(self, config: ModelShape, *, backend: str = "torch", device: str | torch.device = "cpu") -> None:
        super().__init__()
        family = family_of_shape(config)
        blocks = family.block_module(backend)
        self.config = config
        self.backend = backend
        self.family_name = family.name
        with torch.device(device):
            self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(
                [blocks.build_block(config, i + 1, device=device) for i in range(config.num_layers)]
            )
            self.norm = family.block_module("torch").build_final_norm(config)
            self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()
        self._block_inputs: dict[tuple[int, str], Any] = {}

    @property
    def tied(self) -> bool:
        """Whether the LM head shares the token embedding's weight (the shape's ``tied_embeddings``)."""
        return bool(getattr(self.config, "tied_embeddings", False))

    def tie_weights(self) -> None:
        """Make ``output.weight`` the very Parameter ``tok_embeddings.weight`` is, when :attr:`tied`.

        Called on construction, and by :meth:`init_weights`: ``to_empty`` (the meta-device path) gives each
        module a new Parameter, so the tie is made again before any value is written. Under FSDP2 the
        module attribute is set on both modules; ``fully_shard`` does the same for a parameter two modules
        share (its ``shared_modules``), so sharding keeps the tie.
        """
        if self.tied and self.output.weight is not self.tok_embeddings.weight:
            self.output.weight = self.tok_embeddings.weight

    @property
    def family(self) -> ModelFamily:
        """The model's family (looked up by name: the record is not part of the module's state)."""
        return get_family(self.family_name)

    def _block_input(self, seq_length: int, device: torch.device) -> Any:
        """What every block receives besides the hidden state (the family's ``block_input``), cached per length."""
        key = (seq_length, str(device))
        cached = self._block_inputs.get(key)
        if cached is None:
            cached = self.family.block_module(self.backend).block_input(self.config, seq_length, device)
            self._block_inputs[key] = cached
        return cached

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        block_input = self._block_input(tokens.shape[1], tokens.device)
        for block in self.layers:
            h = block(h, block_input)
        h = self.norm(h)
        if targets is None:
            return self.output(h).float()
        return chunked_cross_entropy(h.flatten(0, 1), self.output.weight, targets.flatten())

    @torch.no_grad()
    def init_weights(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Initialise every parameter (also after ``to_empty`` from the meta device, and after sharding).

        The family's :attr:`~platform_spec.models.ModelFamily.init_rule` says, by canonical name,
        ones, zeros or a normal draw's standard deviation (the GPT family: weights N(0, 0.02),
        residual output projections N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm 1/0), on both
        backends. Each parameter is drawn whole, in fp32, from a generator on its device seeded by
        :func:`parameter_seed` ``(seed, canonical name)``, then cast to its dtype; a sharded parameter
        (DTensor, FSDP2/HSDP) keeps this rank's shard of that full tensor. The values therefore do not
        depend on the number of ranks, the sharding or the order of initialisation. Transient memory:
        one full parameter.

        A parameter stored quantized (TransformerEngine's ``quantized_model_init``) receives the same fp32
        values through ``copy_``, which quantizes them (TE's ``QuantizedTensor`` quantizes a high-precision
        source into itself); those values are returned, so that the optimizer's master weights start from
        them rather than from their quantized form (:func:`training.train.build_optimizer`).

        Args:
            seed: the run's seed. Default: ``torch.initial_seed()`` (what ``torch.manual_seed`` set).

        Returns:
            ``{parameter name (as named_parameters gives it): this rank's local values in fp32}`` for the
            parameters stored quantized; empty when none is.
        """
        base = torch.initial_seed() if seed is None else int(seed)
        family = self.family
        assert family.init_rule is not None, f"model family {family.name!r} declares no init_rule"
        self.tie_weights()
        initial: dict[str, torch.Tensor] = {}
        for name, param in self.named_parameters():  # a tied weight once, as tok_embeddings.weight
            canonical = canonical_name(name, family)
            assert canonical is not None  # _extra_state is not a parameter
            values = _fill_parameter(param, family.init_rule(canonical, self.config), parameter_seed(base, canonical))
            if values is not None:
                initial[name] = values
        return initial

    def num_parameters(self) -> int:
        """Parameters (DTensor-aware: counts the full, unsharded sizes; a tied weight once)."""
        return sum(p.numel() for p in self.parameters())


def parameter_seed(seed: int, name: str) -> int:
    """The generator seed of parameter ``name`` (canonical) in a run seeded ``seed``: the first 63 bits
    of SHA-256 of ``"<seed>/<name>"`` (stable across processes, Python versions and machines)."""
    digest = hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def is_quantized(param: torch.Tensor) -> bool:
    """Whether ``param`` (or a DTensor's local shard) is a TransformerEngine ``QuantizedTensor`` (a weight
    stored quantized by ``quantized_model_init``); imports TE only for a tensor subclass."""
    local = getattr(param, "_local_tensor", param)
    if type(local) in (torch.Tensor, nn.Parameter):
        return False
    try:
        from transformer_engine.pytorch import QuantizedTensor
    except ImportError:
        return False
    return isinstance(local, QuantizedTensor)


def _fill_parameter(param: torch.Tensor, rule: str | float, seed: int) -> torch.Tensor | None:
    """Write the full-tensor init ``rule`` (``"ones"``, ``"zeros"`` or a std) into ``param`` (its local
    shard when it is a DTensor).

    Returns:
        For a parameter stored quantized (:func:`is_quantized`): the fp32 values written (its local shard),
        which it holds only in quantized form; else None.

    Raises:
        ValueError: a rule that is neither ``"ones"``, ``"zeros"`` nor a number.
    """
    quantized = is_quantized(param)
    if rule in ("ones", "zeros") and not quantized:
        param.fill_(1.0 if rule == "ones" else 0.0)
        return None
    if rule not in ("ones", "zeros") and (isinstance(rule, bool) or not isinstance(rule, (int, float))):
        raise ValueError(f"init rule {rule!r}: expected 'ones', 'zeros' or a standard deviation")
    from torch.distributed.tensor import DTensor, distribute_tensor

    device = param.device
    full = torch.empty(tuple(param.shape), dtype=torch.float32, device=device)
    if rule == "ones":
        full.fill_(1.0)
    elif rule == "zeros":
        full.zero_()
    else:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        full.normal_(mean=0.0, std=float(rule), generator=generator)
    if not quantized:
        full = full.to(param.dtype)
    if isinstance(param, DTensor):
        # src_data_rank=None: every rank cuts its own shard from its identical full tensor (no communication)
        full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
    param.copy_(full)  # a quantized parameter quantizes the fp32 values into itself
    if not quantized:
        return None
    return full.to_local() if isinstance(full, DTensor) else full


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
    config: ModelShape, *, backend: str = "torch", device: str | torch.device = "cpu", quantized_recipe: Any = None
) -> CausalLM:
    """Build the model of ``config``'s family on ``device`` (``"meta"`` for deferred init; see
    :meth:`CausalLM.init_weights`, called here on any other device).

    Args:
        backend: ``"torch"`` (native) or ``"te"`` (TransformerEngine blocks, CUDA/meta only;
            fp32 ``params_dtype``: FSDP2 keeps fp32 master shards).
        quantized_recipe: a TransformerEngine recipe to store the blocks' matmul weights quantized in
            (``quantized_model_init``): the blocks are built under ``te.quantized_model_init(enabled=True,
            recipe=quantized_recipe)`` (TransformerEngine 2.19 ``quantization.py``), so TE's
            ``reset_parameters`` creates those weights as quantized tensors; build on ``"meta"`` and
            materialise after sharding (:func:`training.parallelize.materialize`), as TE's FSDP2 example
            does (block-scaled formats' FSDP2 hooks need it). None: high-precision weights.

    Raises:
        ValueError: a backend the trainer or the model's family does not have, ``te`` on a CPU device, or a
            ``quantized_recipe`` with the torch backend.
    """
    offered = tuple(family_of_shape(config).blocks)
    if backend not in BACKENDS or backend not in offered:
        raise ValueError(f"backend {backend!r}: expected one of {', '.join(b for b in BACKENDS if b in offered)}")
    if backend == "te" and torch.device(device).type == "cpu":
        raise ValueError("backend='te' needs a CUDA (or meta) device; use backend='torch' on CPU")
    if quantized_recipe is None:
        model = CausalLM(config, backend=backend, device=device)
    elif backend != "te":
        raise ValueError("quantized_model_init=true needs TransformerEngine blocks (backend 'te'), got backend 'torch'")
    else:
        import transformer_engine.pytorch as te

        with te.quantized_model_init(enabled=True, recipe=quantized_recipe):
            model = CausalLM(config, backend=backend, device=device)
    if torch.device(device).type != "meta":
        model.init_weights()
    return model


# ---------------------------------------------------------------------------
# Export / import of final weights (consolidated safetensors)

CONFIG_FILE = HF_CONFIG_FILE
WEIGHTS_FILE = HF_WEIGHTS_FILE
GENERATION_CONFIG_FILE = "generation_config.json"
"""A Hugging Face family's export: the ids ``generate`` starts, stops and pads with (:func:`save_pretrained`)."""
PLATFORM_KEY = "platform"
"""The key of a Hugging Face style ``config.json`` under which the export records what the platform knows
(format, preset name, parameter count, dtype, weights file, training step ...); that library ignores it."""


def _shape_fields(config: ModelShape) -> dict[str, Any]:
    """The shape dataclass's fields other than ``name`` (what defines the tensors), in field order."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "name"}


def _tied(config: ModelShape) -> bool:
    return bool(getattr(config, "tied_embeddings", False))


def export_tensors(
    canonical: Mapping[str, torch.Tensor], config: ModelShape, family: ModelFamily | None = None
) -> dict[str, torch.Tensor]:
    """Canonical tensors under the family's export names (:attr:`~platform_spec.models.ModelFamily.export_layout`:
    renamed, or cut by rows into several tensors, e.g. a fused QKV weight into Hugging Face's q/k/v_proj);
    names the layout leaves out keep their canonical name. A tied LM head (``output.weight``) is left out.

    Raises:
        ValueError: a layout whose slices do not cover their tensor's rows exactly, in order.
    """
    family = family or family_of_shape(config)
    layout = family.export_layout(config) if family.export_layout is not None else {}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in canonical.items():
        if name == "output.weight" and _tied(config):
            continue
        slices = layout.get(name)
        if slices is None:
            out[name] = tensor
            continue
        if not slices:
            continue
        bounds = [(piece.start, piece.stop) for piece in slices]
        expected = list(zip([0] + [b for _, b in bounds[:-1]], [b for _, b in bounds], strict=True))
        if bounds != expected or bounds[-1][1] != tensor.shape[0]:
            raise ValueError(
                f"export layout of {name!r} (model family {family.name!r}): rows {bounds} do not cover "
                f"0:{tensor.shape[0]} in order"
            )
        for piece in slices:  # a cut tensor's pieces as tensors of their own (no shared storage in the file)
            part = tensor[piece.start : piece.stop]
            out[piece.name] = part if len(slices) == 1 else part.clone()
    return out


def import_tensors(
    exported: Mapping[str, torch.Tensor], config: ModelShape, family: ModelFamily | None = None
) -> dict[str, torch.Tensor]:
    """The inverse of :func:`export_tensors`: exported tensors back under canonical names (the pieces of a cut
    tensor concatenated in order; a tied LM head is the embedding's tensor).

    Raises:
        KeyError: an exported piece is missing (names it).
    """
    family = family or family_of_shape(config)
    layout = family.export_layout(config) if family.export_layout is not None else {}
    exported_names = {piece.name for slices in layout.values() for piece in slices}
    out = {name: tensor for name, tensor in exported.items() if name not in exported_names}
    for name, slices in layout.items():
        if not slices:
            continue
        missing = [piece.name for piece in slices if piece.name not in exported]
        if missing:
            raise KeyError(f"exported weights lack {missing[0]!r} (part of {name!r})")
        pieces = [exported[piece.name] for piece in slices]
        out[name] = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    if _tied(config) and "tok_embeddings.weight" in out:
        out["output.weight"] = out["tok_embeddings.weight"]
    return out


def save_pretrained(
    directory: str | os.PathLike[str],
    state_dict: Mapping[str, torch.Tensor],
    config: ModelShape,
    *,
    dtype: torch.dtype,
    extra: Mapping[str, Any] | None = None,
    tokenizer: DataTokenizer | None = None,
) -> Path:
    """Write ``model.safetensors`` (``dtype``), ``config.json``, the tokenizer's files and, for a Hugging Face
    family, ``generation_config.json``.

    The weights are named by the family's export names (:func:`export_tensors`; canonical names unless the
    family has an ``export_layout``). ``config.json`` is:

    * for a family with :attr:`~platform_spec.models.ModelFamily.to_hf_config` (Llama): that library's
      configuration (so the directory loads there, e.g. ``LlamaForCausalLM.from_pretrained``) with
      ``torch_dtype``, ``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` all ``tokenizer``'s document
      separator (null without one: else that library's defaults, e.g. Llama's 1 and 2, would name tokens the
      data never used that way), and under :data:`PLATFORM_KEY` what the platform records: ``format``,
      ``model`` (the preset name), ``num_params``, ``dtype``, ``weights``, ``tokenizer_files`` (the files
      written, ``[]`` when the tokenizer is missing, with ``tokenizer_missing`` saying why) and ``extra``;
      ``generation_config.json`` holds the same three ids;
    * otherwise the platform's own format: ``format`` (``"gpt-decoder"`` for GPT), ``model``, the shape's
      fields, ``num_params``, ``dtype``, the family's
      :attr:`~platform_spec.models.ModelFamily.export_metadata` and ``extra`` (e.g. tokenizer and step).

    ``tokenizer`` (default: none, as for synthetic tokens) gives ``tokenizer.json`` and
    ``tokenizer_config.json`` (:class:`training.tokenizer_files.DataTokenizer`): ``AutoTokenizer`` then
    encodes a document into the ids prepare-data wrote for it. A tokenizer file of an earlier export into
    ``directory`` that this one does not write is removed, so none of another run is left beside these weights.

    Every file is written beside and renamed into place, so a reader never sees half a file; ``config.json``
    comes last.
    """
    from safetensors.torch import save_file

    family = family_of_shape(config)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    canonical = canonical_state_dict(state_dict, family)
    tensors = {
        k: v.detach().to("cpu", dtype).contiguous() for k, v in export_tensors(canonical, config, family).items()
    }
    tmp = out / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / WEIGHTS_FILE)
    dtype_name = str(dtype).removeprefix("torch.")
    tokenizer = tokenizer or DataTokenizer("none", None, None, missing="the export was given no tokenizer")
    tokenizer_files = tokenizer.files()
    for name in TOKENIZER_FILES:
        if name in tokenizer_files:
            atomic_write_bytes(out / name, tokenizer_files[name])
        else:
            (out / name).unlink(missing_ok=True)
    platform = {
        "format": family.format_name,
        "model": config.name,
        "num_params": config.num_params,
        "dtype": dtype_name,
        **family.export_metadata,
        "weights": WEIGHTS_FILE,
        **(dict(extra) if extra else {}),
        "tokenizer_files": sorted(tokenizer_files),
        **({"tokenizer_missing": tokenizer.missing} if tokenizer.missing else {}),
    }
    if family.to_hf_config is not None:
        separator = tokenizer.eod_token_id  # where a document starts and ends in the data, and generation stops
        ids = {"bos_token_id": separator, "eos_token_id": separator, "pad_token_id": separator}
        meta = {**family.to_hf_config(config), **ids, "torch_dtype": dtype_name, PLATFORM_KEY: platform}
        atomic_write_bytes(out / GENERATION_CONFIG_FILE, (json.dumps(ids, indent=2) + "\n").encode("utf-8"))
    else:
        meta = {"format": platform.pop("format"), "model": platform.pop("model"), **_shape_fields(config), **platform}
    atomic_write_bytes(out / CONFIG_FILE, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    return out / WEIGHTS_FILE


def load_pretrained(directory: str | os.PathLike[str], *, dtype: torch.dtype = torch.float32) -> CausalLM:
    """Load a :func:`save_pretrained` directory into a single-device torch-native model (CPU).

    Raises:
        FileNotFoundError: missing ``config.json`` or weights.
        ValueError: a ``format`` no registered model family exports.
        platform_spec.errors.FieldError: a Hugging Face ``config.json`` its family refuses (names the key).
        RuntimeError: weights that do not match the config (strict load).
    """
    from safetensors.torch import load_file

    src = Path(directory)
    meta = json.loads((src / CONFIG_FILE).read_text(encoding="utf-8"))
    platform = meta.get(PLATFORM_KEY) if isinstance(meta.get(PLATFORM_KEY), dict) else meta
    formats = {get_family(name).format_name: get_family(name) for name in family_names()}
    family = formats.get(platform.get("format"))
    if family is None:
        raise ValueError(
            f"{src / CONFIG_FILE}: format {platform.get('format')!r}; expected one of {', '.join(formats)}"
        )
    if family.from_hf_config is not None and platform is not meta:
        hf = {k: v for k, v in meta.items() if k != PLATFORM_KEY}
        config = dataclasses.replace(family.from_hf_config(hf), name=platform.get("model", family.name))
    else:
        fields = [f.name for f in dataclasses.fields(family.shape_type) if f.name != "name"]
        config = family.shape_type(meta["model"], **{name: meta[name] for name in fields if name in meta})
    model = CausalLM(config, backend="torch", device="meta")
    state = import_tensors(load_file(str(src / platform.get("weights", WEIGHTS_FILE))), config, family)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    model.tie_weights()  # assign=True gave each module its own Parameter
    return model


__all__ = [
    "BACKENDS",
    "CausalLM",
    "build_model",
    "canonical_name",
    "canonical_state_dict",
    "chunked_cross_entropy",
    "export_tensors",
    "import_tensors",
    "load_pretrained",
    "parameter_seed",
    "save_pretrained",
    "transformer_engine_available",
]
