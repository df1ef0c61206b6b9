"""Start a run from a Hugging Face model folder: each rank reads only the rows of its own shards.

A folder is what ``save_pretrained`` writes: ``config.json`` and either ``model.safetensors`` or the shards
``model-0000k-of-0000n.safetensors`` named by ``model.safetensors.index.json`` (its ``weight_map``). The model's
shape comes from ``config.json`` (the family's reader, :func:`platform_spec.models.shape_from_hf_config`); the
tensors' names are the family's export names (:attr:`~platform_spec.models.ModelFamily.export_layout`: the fused
QKV weight and bias are Hugging Face's ``q_proj``/``k_proj``/``v_proj`` rows, the fused gate/up weight
``gate_proj``/``up_proj``; a tied LM head is the embedding), as :func:`training.model.import_tensors` maps them.

Reading: :func:`check_folder` reads the safetensors headers only (names, shapes, dtypes) and refuses, naming
the file and tensor, a missing tensor, a wrong shape, an unexpected tensor and a dtype that is not a float
the trainer can start from (F16, BF16, F32, F64), before any weight is read. :func:`load_into` then fills the
model after it was built and parallelised (FSDP2: each parameter a DTensor sharded by rows): for each
parameter it reads, with ``safe_open(...).get_slice``, the rows of this rank's shard only (from each exported
piece the shard overlaps), casts them to the parameter's dtype (fp32 master weights) and copies them in. Peak
extra memory: one parameter's local shard in the file's dtype and once in the parameter's.

``torch.distributed.checkpoint.HuggingFaceStorageReader`` (torch 2.13) was considered: it loads a state dict
keyed by the file's names whose tensors are sharded as the file's are, but a rank's shard of our fused QKV
(or gate/up) weight spans the ends of two or three of the file's tensors, which no evenly sharded DTensor of
one of those tensors describes; so the rows are read here, with the same ``safe_open`` it uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from platform_spec.hyperparameters import HF_INDEX_FILE
from platform_spec.models import ExportSlice, ModelFamily, ModelShape, family_of_shape, shape_from_hf_config
from training.model import CONFIG_FILE, WEIGHTS_FILE, CausalLM, canonical_name

INDEX_FILE = HF_INDEX_FILE

FLOAT_DTYPES: Mapping[str, int] = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
"""safetensors dtype names the trainer starts from -> bytes per element. FP8 (``F8_E4M3``, ...) is refused:
a quantized checkpoint's tensors need its scales, which this reader does not apply."""


class HfWeightsError(ValueError):
    """A Hugging Face model folder the trainer cannot start from; the message names the file (and tensor)."""


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of the folder, from its file's header: ``file``, ``shape`` and safetensors ``dtype``."""

    file: Path
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return FLOAT_DTYPES.get(self.dtype, 0) * _numel(self.shape)


@dataclass
class LoadStats:
    """What :func:`load_into` read on this rank: ``rows`` (first-dimension rows of the file's tensors),
    ``bytes_read`` (their bytes as stored), ``bytes_total`` (every expected tensor's bytes, all ranks' rows),
    ``peak_extra_bytes`` (the largest transient: one local shard as stored plus as the parameter's dtype)."""

    rows: int = 0
    bytes_read: int = 0
    bytes_total: int = 0
    peak_extra_bytes: int = 0


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def has_weights(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds anything (a channel SageMaker laid out, or a local link to a folder)."""
    path = Path(directory)
    return path.is_dir() and any(path.iterdir())


def read_shape(directory: str | os.PathLike[str]) -> ModelShape:
    """The model shape of the folder's ``config.json`` (its family's reader).

    Raises:
        HfWeightsError: no readable ``config.json``.
        platform_spec.errors.FieldError: a key the family refuses (named).
    """
    path = Path(directory) / CONFIG_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise HfWeightsError(f"{path}: expected a Hugging Face config.json (nested too deeply to read)") from None
    except (OSError, ValueError) as exc:
        raise HfWeightsError(f"{path}: expected a Hugging Face config.json ({exc})") from None
    return shape_from_hf_config(config)


def _weight_files(folder: Path) -> dict[Path, set[str] | None]:
    """Each weights file -> the tensors the index puts in it (None: the single file, no index)."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HfWeightsError(f"{index}: expected an object with a 'weight_map' of tensor -> file ({exc})") from None
        files: dict[Path, set[str] | None] = {}
        for name, file in weight_map.items():
            if not isinstance(file, str) or Path(file).name != file:
                raise HfWeightsError(f"{index}: tensor {name!r} in {file!r}; expected a file name in the folder")
            names = files.setdefault(folder / file, set())
            assert names is not None
            names.add(name)
        return files
    single = folder / WEIGHTS_FILE
    if single.is_file():
        return {single: None}
    raise HfWeightsError(
        f"{folder}: no {WEIGHTS_FILE} and no {INDEX_FILE}; expected a Hugging Face model folder "
        "(config.json and model.safetensors, or model-0000k-of-0000n.safetensors with their index)"
    )


def stored_tensors(directory: str | os.PathLike[str]) -> dict[str, StoredTensor]:
    """Every tensor of the folder's weights files, from their headers only (no weight is read).

    Raises:
        HfWeightsError: no weights file, an unreadable or cut-short file (safetensors checks that the data
            covers the header's offsets), a tensor in two files, or an index
            naming a tensor its file lacks (file and tensor named).
    """
    from safetensors import SafetensorError, safe_open

    out: dict[str, StoredTensor] = {}
    for file, indexed in _weight_files(Path(directory)).items():
        try:
            with safe_open(str(file), framework="pt") as handle:
                names = list(handle.keys())
                for name in names:
                    piece = handle.get_slice(name)
                    if name in out:
                        raise HfWeightsError(f"{file}: tensor {name!r} is also in {out[name].file.name}")
                    out[name] = StoredTensor(file, tuple(piece.get_shape()), piece.get_dtype())
        except (OSError, SafetensorError) as exc:
            raise HfWeightsError(f"{file}: not a readable safetensors file ({exc})") from None
        for name in sorted((indexed or set()) - set(names)):
            raise HfWeightsError(f"{file}: lacks tensor {name!r}, which {INDEX_FILE} puts there")
    return out


def expected_tensors(model: nn.Module, config: ModelShape, family: ModelFamily | None = None) -> dict[str, ExportSlice]:
    """The folder's tensor names the model needs -> the rows of which canonical parameter they fill, as
    ``ExportSlice(canonical name, start, stop)`` (a tied LM head needs none)."""
    family = family or family_of_shape(config)
    layout = family.export_layout(config) if family.export_layout is not None else {}
    out: dict[str, ExportSlice] = {}
    for name, param in _canonical_parameters(model, family):
        slices = layout.get(name, (ExportSlice(name, 0, param.shape[0]),))
        for piece in slices:
            out[piece.name] = ExportSlice(name, piece.start, piece.stop)
    return out


def _canonical_parameters(model: nn.Module, family: ModelFamily) -> Iterator[tuple[str, nn.Parameter]]:
    for name, param in model.named_parameters():  # a tied weight once, as tok_embeddings.weight
        canonical = canonical_name(name, family)
        assert canonical is not None
        yield canonical, param


def check_folder(directory: str | os.PathLike[str], model: nn.Module, config: ModelShape) -> dict[str, StoredTensor]:
    """Refuse a folder whose tensors are not exactly the model's (headers only; nothing is read or changed).

    Returns:
        The folder's tensors (:func:`stored_tensors`).

    Raises:
        HfWeightsError: a missing tensor, an unexpected one (a tied LM head's ``lm_head.weight`` is not:
            transformers ties it to the embedding too), a shape other than the config's, or a dtype that is
            not one of :data:`FLOAT_DTYPES`; the file and tensor named.
    """
    family = family_of_shape(config)
    stored = stored_tensors(directory)
    expected = expected_tensors(model, config, family)
    params = dict(_canonical_parameters(model, family))
    folder = Path(directory)
    for name, target in expected.items():
        tensor = stored.get(name)
        if tensor is None:
            raise HfWeightsError(f"{folder}: tensor {name!r} is missing (the model's {target.name} needs it)")
        shape = (target.stop - target.start, *params[target.name].shape[1:])
        if tensor.shape != shape:
            raise HfWeightsError(
                f"{tensor.file}: tensor {name!r} has shape {list(tensor.shape)}; expected {list(shape)} "
                f"(from {folder / CONFIG_FILE})"
            )
        if tensor.dtype not in FLOAT_DTYPES:
            raise HfWeightsError(
                f"{tensor.file}: tensor {name!r} is {tensor.dtype}; expected one of {', '.join(FLOAT_DTYPES)}"
            )
    tolerated = {"lm_head.weight"} if getattr(config, "tied_embeddings", False) else set()
    for name, tensor in stored.items():
        if name not in expected and name not in tolerated:
            raise HfWeightsError(
                f"{tensor.file}: unexpected tensor {name!r} (the model built from config.json has none)"
            )
    return stored


def local_rows(param: torch.Tensor) -> tuple[int, int]:
    """The rows ``[start, stop)`` of the full parameter that this rank holds (a DTensor sharded by rows, as
    FSDP2 and HSDP shard; a plain tensor: all of them).

    Raises:
        ValueError: a DTensor sharded along another dimension.
    """
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not isinstance(param, DTensor):
        return 0, param.shape[0]
    local_shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    if any(offset[1:]) or tuple(local_shape[1:]) != tuple(param.shape[1:]):
        raise ValueError(f"parameter sharded along a dimension other than 0: {param.placements}")
    return offset[0], offset[0] + local_shape[0]


@torch.no_grad()
def load_into(model: nn.Module, directory: str | os.PathLike[str], config: ModelShape) -> LoadStats:
    """Fill ``model``'s parameters (built, parallelised and allocated) from the folder: each rank reads only
    the rows of its own shards (see the module docstring), cast to each parameter's dtype.

    Raises:
        HfWeightsError: see :func:`check_folder` (raised before any parameter is written).
    """
    from safetensors import safe_open
    from torch.distributed.tensor import DTensor

    family = family_of_shape(config)
    stored = check_folder(directory, model, config)
    expected = expected_tensors(model, config, family)
    stats = LoadStats(bytes_total=sum(stored[name].nbytes for name in expected))
    pieces_of: dict[str, list[tuple[str, ExportSlice]]] = {}
    for name, target in expected.items():
        pieces_of.setdefault(target.name, []).append((name, target))
    with ExitStack() as stack:
        handles: dict[Path, Any] = {}
        for canonical, param in _canonical_parameters(model, family):
            start, stop = local_rows(param)
            parts = []
            for name, target in sorted(pieces_of[canonical], key=lambda item: item[1].start):
                lo, hi = max(start, target.start), min(stop, target.stop)
                if lo >= hi:
                    continue
                file = stored[name].file
                if file not in handles:
                    handles[file] = stack.enter_context(safe_open(str(file), framework="pt"))
                part = handles[file].get_slice(name)[lo - target.start : hi - target.start]
                stats.rows += hi - lo
                stats.bytes_read += part.numel() * part.element_size()
                parts.append(part)
            local = param.to_local() if isinstance(param, DTensor) else param
            if not parts:
                continue
            stored_rows = parts[0] if len(parts) == 1 else torch.cat(parts)
            stats.peak_extra_bytes = max(
                stats.peak_extra_bytes,
                stored_rows.numel() * (stored_rows.element_size() + local.element_size()),
            )
            local.copy_(stored_rows.to(local.dtype))
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return stats


def shard_rows(rows: int, shards: int, index: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of shard ``index`` of ``shards`` of a ``rows``-row tensor as FSDP2's ``Shard(0)``
    cuts it (``torch.chunk``: ``ceil(rows / shards)`` each, the last ones shorter or empty)."""
    size = -(-rows // shards)
    return min(index * size, rows), min((index + 1) * size, rows)


def read_plan(directory: str | os.PathLike[str], shard_degree: int) -> list[LoadStats]:
    """What each of ``shard_degree`` ranks of an FSDP2 shard group reads when :func:`load_into` fills the model
    of the folder's ``config.json`` (built on the meta device: no memory), from the headers only: the same
    figures :func:`load_into` reports. A rank's replicas (HSDP) read the same.

    Raises:
        HfWeightsError: see :func:`check_folder`.
    """
    config = read_shape(directory)
    model = CausalLM(config, device="meta")
    family = family_of_shape(config)
    stored = check_folder(directory, model, config)
    expected = expected_tensors(model, config, family)
    total = sum(stored[name].nbytes for name in expected)
    params = dict(_canonical_parameters(model, family))
    out = [LoadStats(bytes_total=total) for _ in range(shard_degree)]
    for rank, stats in enumerate(out):
        local: dict[str, int] = {}
        for name, target in expected.items():
            start, stop = shard_rows(params[target.name].shape[0], shard_degree, rank)
            rows = max(0, min(stop, target.stop) - max(start, target.start))
            row_bytes = stored[name].nbytes // max(1, stored[name].shape[0])
            stats.rows += rows
            stats.bytes_read += rows * row_bytes
            local[target.name] = local.get(target.name, 0) + rows * row_bytes
            local[target.name + "/fp32"] = (
                local.get(target.name + "/fp32", 0)
                + rows * row_bytes * (params[target.name].element_size()) // FLOAT_DTYPES[stored[name].dtype]
            )
        stats.peak_extra_bytes = max(
            (local[n] + local[n + "/fp32"] for n in local if not n.endswith("/fp32")), default=0
        )
    return out


__all__ = [
    "FLOAT_DTYPES",
    "INDEX_FILE",
    "HfWeightsError",
    "LoadStats",
    "StoredTensor",
    "check_folder",
    "expected_tensors",
    "has_weights",
    "load_into",
    "local_rows",
    "read_plan",
    "read_shape",
    "shard_rows",
    "stored_tensors",
]
