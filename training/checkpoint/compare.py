"""May this run resume a checkpoint: the run record saved with every checkpoint, and its comparison.

``trainer_state.json["run"]`` (:func:`run_record`) records what defines the
run; on resume (:func:`compare_runs`):

===================================  ====================================================
what changed                         resume
===================================  ====================================================
model family, shape or vocabulary,   refused, both values named (the state would not fit
backend, ``quantized_model_init``    or would load partially); another family is named
                                     as such, its shape fields are not compared
global batch (samples per step)      refused: the LR schedule, warmup and ``max_steps``
                                     count optimizer steps, so the run cannot continue
                                     as it was; the message says how to keep it
training data (fingerprint),         refused unless ``allow_data_change=true``; then the
``seq_length``, ``seed``,            data position carries over as a sample count
``synthetic_data``
world size, micro-batch layout       allowed, logged: DCP reshards model and optimizer,
(same global batch)                  and the data continues at the same sample number
precision, ``fp8_scaling``           allowed, logged: every recipe keeps fp32 master
                                     weights and AdamW state; a precision change with
                                     ``quantized_model_init=true`` is refused (the
                                     weights are stored in the precision's format)
anything else (LR, ``max_steps``,    allowed, logged
intervals, sharding...)
===================================  ====================================================

Checkpoints written before the record existed resume with a warning
(:func:`saved_run`); DCP's tensor metadata still guards the model shape
(:func:`model_mismatch`). A shape field added to a family after a checkpoint
was written (the Llama family's ``head_dim``, ``qkv_bias``, ``qk_norm``, RoPE
scaling and ``sliding_window``) is absent from its record: the older code
computed the field's default (:func:`recorded_shape_value`), so a run with that
value resumes and any other is refused, both values named.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from platform_spec import models
from platform_spec.hyperparameters import SHAPE_HYPERPARAMETERS

RUN_RECORD_VERSION = 1
MODEL_PREFIX = "model."
"""Prefix of the model's tensors in the DCP state dict (``{"model": ..., "optimizer": ...}``)."""
EXTRA_STATE_SUFFIX = "_extra_state"
"""Suffix of a module's extra state in a state dict (``torch.nn.Module.get_extra_state``); TransformerEngine
keeps its recipe and fp8 scaling state there, and its size varies with that state."""
DATA_STREAM_HYPERPARAMETERS = ("seq_length", "seed", "synthetic_data")
"""Hyperparameters that decide which tokens sample number ``g`` is (with the data fingerprint)."""
REFUSED_HYPERPARAMETERS = ("quantized_model_init",)
"""Hyperparameters whose change changes the checkpoint's state-dict layout (TE quantized weights + FusedAdam)."""
_COMPARED_ELSEWHERE = (
    "model",
    "model_family",
    *SHAPE_HYPERPARAMETERS,  # the model record's shape fields are compared (refused when they differ)
    "batch_size",
    "gradient_accumulation_steps",
    "allow_data_change",
    *DATA_STREAM_HYPERPARAMETERS,
    *REFUSED_HYPERPARAMETERS,
)


def model_shape_fields(*models: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields that define the model's tensors in run records' ``model`` (a model family's shape
    dataclass as a dict, :class:`platform_spec.models.ModelShape`): every field but ``name``, in order,
    over all of ``models`` (a field one record lacks differs)."""
    return tuple(dict.fromkeys(k for model in models for k in model if k != "name"))


_ABSENT = object()


def recorded_shape_value(saved_model: Mapping[str, Any], name: str, family: str | None) -> Any:
    """Shape field ``name`` of a checkpoint's run record ``model``; where the record lacks it (written before
    the family had the field), the default of ``family``'s shape dataclass: the value the older code computed
    with, since a field is added with the default that keeps the shapes before it. A field without a default,
    or of an unknown family, absent: a sentinel equal to no value."""
    if name in saved_model:
        return saved_model[name]
    if family is None:
        return _ABSENT
    fields = {f.name: f for f in dataclasses.fields(models.get_family(family).shape_type)}
    default = fields[name].default if name in fields else dataclasses.MISSING
    return _ABSENT if default is dataclasses.MISSING else default


def _shown(saved_model: Mapping[str, Any], name: str, value: Any) -> str:
    """A checkpoint's value of a shape field, saying where it was implied rather than recorded."""
    if name in saved_model:
        return str(value)
    if value is _ABSENT:
        return "absent"
    return f"{value} (absent: the default of the code that wrote it)"


def processes(count: Any) -> str:
    """``1 process``, ``2 processes``."""
    return f"{count} process" + ("" if count == 1 else "es")


def run_record(
    *,
    model_config: Mapping[str, Any],
    backend: str,
    world_size: int,
    samples_per_step: int,
    hyperparameters: Mapping[str, str],
    data: Mapping[str, Any],
) -> dict[str, Any]:
    """What defines a run, as saved in ``trainer_state.json["run"]``.

    Args:
        model_config: the model family's shape (:class:`platform_spec.models.ModelShape`) as a dict
            (the resolved shape; every field but ``name`` is an integer).
        backend: ``"te"`` or ``"torch"`` (TransformerEngine and torch-native blocks name their parameters
            differently).
        world_size: processes of the job.
        samples_per_step: sequences per optimizer step, all ranks (the global batch).
        hyperparameters: ``Hyperparameters.to_strings()``.
        data: the dataset's fingerprint (:meth:`training.data.TokenDataset.fingerprint`)
            or ``{"synthetic": True, ...}``.
    """
    return {
        "version": RUN_RECORD_VERSION,
        "model": dict(model_config),
        "backend": backend,
        "world_size": int(world_size),
        "samples_per_step": int(samples_per_step),
        "hyperparameters": dict(hyperparameters),
        "data": dict(data),
    }


def saved_run(trainer_state: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The run record of a checkpoint, and whether it predates records (read from the older fields).

    Older checkpoints (no ``"run"``) kept ``model_config``, ``world_size`` and
    ``hyperparameters`` at the top level, which are checked the same way; their
    backend and data are unknown (None), so the data cannot be checked.
    """
    record = trainer_state.get("run")
    if isinstance(record, dict):
        return dict(record), False
    hp = trainer_state.get("hyperparameters")
    hp = dict(hp) if isinstance(hp, dict) else {}
    world = trainer_state.get("world_size")
    spb = None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        spb = int(hp["batch_size"]) * int(hp.get("gradient_accumulation_steps", "1")) * int(world)
    model = trainer_state.get("model_config")
    return {
        "version": 0,
        "model": dict(model) if isinstance(model, dict) else None,
        "backend": None,
        "world_size": world if isinstance(world, int) else None,
        "samples_per_step": spb,
        "hyperparameters": hp,
        "data": None,
    }, True


@dataclass
class RunComparison:
    """What :func:`compare_runs` decided: refusals (resume impossible) and notes (allowed changes)."""

    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_refused: bool = False


def compare_runs(
    trainer_state: Mapping[str, Any], current: Mapping[str, Any], *, allow_data_change: bool = False
) -> RunComparison:
    """Decide whether the run ``current`` (a :func:`run_record`) may resume a checkpoint.

    The policy per item is the table in the module docstring.

    Returns:
        :class:`RunComparison`: ``refusals`` (any: refuse) and ``notes`` (log lines).
    """
    saved, legacy = saved_run(trainer_state)
    out = RunComparison()
    if legacy:
        out.notes.append(
            "the checkpoint has no run record (written before records existed): model shape, hyperparameters and "
            "world size are checked from its older fields, its training data cannot be checked"
        )
    _compare_model(saved, current, out)
    _compare_global_batch(saved, current, out)
    _compare_data_stream(saved, current, allow_data_change, out)
    _note_other_hyperparameters(saved.get("hyperparameters") or {}, current.get("hyperparameters") or {}, out)
    return out


def _family(model: Mapping[str, Any]) -> str | None:
    """The model family of a run record's ``model``: its preset's, or its ``name`` itself for a custom shape
    (named after its family); ``None`` when no registered family knows the name."""
    name = model.get("name")
    if not isinstance(name, str):
        return None
    if name in models.family_names():
        return name
    with contextlib.suppress(models.UnknownModelError):
        return models.family_of(name).name
    return None


def _describe(model: Mapping[str, Any], family: str | None) -> str:
    """``gpt (preset gpt-tiny)``, ``llama (a custom shape)``."""
    name = model.get("name")
    return f"{family} (a custom shape)" if name == family else f"{family} (preset {name})"


def _compare_shape(saved_model: Mapping[str, Any], model: Mapping[str, Any], out: RunComparison) -> None:
    """The model's family, preset and shape: refuse another family (its shape fields are other fields, not
    comparable one by one), and within one family (or when a family is unknown) every shape field that differs,
    after the preset change that explains them; a renamed preset of the same shape is a note."""
    old_family, new_family = _family(saved_model), _family(model)
    if old_family is not None and new_family is not None and old_family != new_family:
        out.refusals.append(
            f"model family: {_describe(saved_model, old_family)} in the checkpoint, {_describe(model, new_family)} "
            "in this run; a checkpoint resumes a model of its own family"
        )
        out.model_refused = True
        return
    family = old_family or new_family
    saved_values = {name: recorded_shape_value(saved_model, name, family) for name in model_shape_fields(model)}
    saved_values.update({name: saved_model[name] for name in model_shape_fields(saved_model)})
    changed = [name for name, value in saved_values.items() if name not in model or value != model[name]]
    renamed = saved_model.get("name") != model.get("name")
    if changed and renamed:
        out.refusals.append(f"model: {saved_model.get('name')} in the checkpoint, {model.get('name')} in this run")
    out.refusals.extend(
        f"model {name}: {_shown(saved_model, name, saved_values[name])} in the checkpoint, "
        f"{model.get(name, 'absent')} in this run"
        for name in changed
    )
    out.model_refused = out.model_refused or bool(changed)
    if renamed and not changed:
        out.notes.append(f"model preset {saved_model.get('name')} -> {model.get('name')} (same shape)")


def _compare_model(saved: Mapping[str, Any], current: Mapping[str, Any], out: RunComparison) -> None:
    """Model family, preset, shape and vocabulary, backend and the state-dict layout's hyperparameters: refuse
    a change."""
    saved_model = saved.get("model")
    if isinstance(saved_model, dict):
        _compare_shape(saved_model, current["model"], out)
    if saved.get("backend") is not None and saved["backend"] != current["backend"]:
        out.refusals.append(
            f"model backend: {saved['backend']!r} in the checkpoint, {current['backend']!r} in this run (TransformerEngine "
            "and torch-native blocks name their parameters differently); resume on the same kind of host"
        )
        out.model_refused = True
    old_hp: Mapping[str, str] = saved.get("hyperparameters") or {}
    new_hp: Mapping[str, str] = current.get("hyperparameters") or {}
    for name in _changed(REFUSED_HYPERPARAMETERS, old_hp, new_hp):
        out.refusals.append(
            f"{name}: {old_hp.get(name)} in the checkpoint, {new_hp.get(name)} in this run "
            "(quantized weights and FusedAdam master weights are another state-dict layout)"
        )
    if old_hp.get("quantized_model_init") == new_hp.get("quantized_model_init") == "true" and old_hp.get(
        "precision"
    ) != new_hp.get("precision"):
        out.refusals.append(
            f"precision: {old_hp.get('precision')} in the checkpoint, {new_hp.get('precision')} in this run with "
            "quantized_model_init=true (the block weights are stored in the precision's own quantized format, "
            f"another state-dict layout); resume with precision={old_hp.get('precision')}"
        )


def _changed(names: tuple[str, ...], old_hp: Mapping[str, str], new_hp: Mapping[str, str]) -> list[str]:
    """The hyperparameters of ``names`` the checkpoint recorded and this run sets otherwise."""
    return [name for name in names if name in old_hp and old_hp.get(name) != new_hp.get(name)]


def _layout(record: Mapping[str, Any]) -> str:
    hp = record.get("hyperparameters") or {}
    return (
        f"{processes(record.get('world_size'))} x batch_size {hp.get('batch_size')} x "
        f"gradient_accumulation_steps {hp.get('gradient_accumulation_steps', '1')}"
    )


def _keep_global_batch(target: int, current: Mapping[str, Any]) -> str:
    """A change of this run's settings that gives ``target`` samples per step, as advice."""
    hp = current.get("hyperparameters") or {}
    world = int(current["world_size"])
    batch = int(hp.get("batch_size", "1"))
    accum = int(hp.get("gradient_accumulation_steps", "1"))
    options = []
    if target % (batch * world) == 0:
        options.append(f"gradient_accumulation_steps={target // (batch * world)}")
    if target % (accum * world) == 0:
        options.append(f"batch_size={target // (accum * world)}")
    if not options:
        return f"choose batch_size x gradient_accumulation_steps x processes = {target}"
    return f"with {processes(world)} set " + " or ".join(options)


def _compare_global_batch(saved: Mapping[str, Any], current: Mapping[str, Any], out: RunComparison) -> None:
    """Global batch: refuse a change. Another layout of the same global batch: note."""
    old_spb, new_spb = saved.get("samples_per_step"), current["samples_per_step"]
    if old_spb is not None and old_spb != new_spb:
        out.refusals.append(
            f"global batch: {old_spb} sequences per optimizer step in the checkpoint ({_layout(saved)}), {new_spb} in this "
            f"run ({_layout(current)}); warmup, the cosine schedule and max_steps count optimizer steps, so the run "
            f"cannot continue as it was: keep {old_spb} ({_keep_global_batch(old_spb, current)})"
        )
    elif _layout(saved) != _layout(current) and saved.get("world_size") is not None:
        out.notes.append(
            f"layout {_layout(saved)} -> {_layout(current)} (same global batch of {new_spb}: DCP reshards model and "
            "optimizer state, and the data continues at the next sample)"
        )


def _describe_data(data: Mapping[str, Any]) -> str:
    if data.get("synthetic"):
        return "(synthetic tokens)"
    sha = str(data.get("sha256", ""))[:12]
    return f"({data.get('shards')} shards, {data.get('num_tokens')} tokens, {data.get('tokenizer')}, fingerprint {sha})"


def _compare_data_stream(
    saved: Mapping[str, Any], current: Mapping[str, Any], allow_data_change: bool, out: RunComparison
) -> None:
    """The data stream (fingerprint, ``DATA_STREAM_HYPERPARAMETERS``): refuse a change unless allowed."""
    old_hp: Mapping[str, str] = saved.get("hyperparameters") or {}
    new_hp: Mapping[str, str] = current.get("hyperparameters") or {}
    changes = [f"{n} {old_hp.get(n)} -> {new_hp.get(n)}" for n in _changed(DATA_STREAM_HYPERPARAMETERS, old_hp, new_hp)]
    old_data, new_data = saved.get("data"), current.get("data") or {}
    if (
        isinstance(old_data, dict)
        and not old_data.get("synthetic")
        and not new_data.get("synthetic")  # a switch is synthetic_data's change
        and old_data.get("sha256") != new_data.get("sha256")
    ):
        changes.append(f"training data {_describe_data(old_data)} -> {_describe_data(new_data)}")
    if not changes:
        return
    if allow_data_change:
        out.notes.append(
            "data stream changed (allow_data_change=true): "
            + "; ".join(changes)
            + "; the position carries over as a sample count"
        )
    else:
        out.refusals.append(
            "data stream: " + "; ".join(changes) + "; the samples already trained on cannot be matched in the "
            "new stream. Restore the original data and settings, or set allow_data_change=true to continue "
            "on the new stream from the same sample count"
        )


def _note_other_hyperparameters(old_hp: Mapping[str, str], new_hp: Mapping[str, str], out: RunComparison) -> None:
    """The precision recipe and everything else not compared above: note a change."""
    others = [
        f"{name} {old_hp.get(name, '(unset)')} -> {new_hp.get(name, '(unset)')}"
        for name in sorted(set(old_hp) | set(new_hp))
        if name not in _COMPARED_ELSEWHERE and old_hp.get(name) != new_hp.get(name)
    ]
    if others:
        precision = any(o.startswith(("precision", "fp8_scaling")) for o in others)
        out.notes.append(
            "hyperparameters changed: "
            + ", ".join(others)
            + (" (fp32 master weights and AdamW state carry over)" if precision else "")
        )


def model_mismatch(metadata: Metadata, model_shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """Compare the checkpoint's model tensors (DCP metadata) with the model being built.

    Args:
        metadata: the checkpoint's DCP metadata.
        model_shapes: ``{fqn: global shape}`` of the model's state dict
            (``get_model_state_dict``; DTensor shapes are global). TransformerEngine
            ``_extra_state`` entries are ignored (their size varies with fp8 state).

    Returns:
        None when the names and shapes agree, else a sentence with examples.
    """
    saved = {
        key[len(MODEL_PREFIX) :]: tuple(meta.size)
        for key, meta in metadata.state_dict_metadata.items()
        if key.startswith(MODEL_PREFIX)
        and isinstance(meta, TensorStorageMetadata)
        and not key.endswith(EXTRA_STATE_SUFFIX)
    }
    mine = {k: tuple(v) for k, v in model_shapes.items() if not k.endswith(EXTRA_STATE_SUFFIX)}
    only_saved = sorted(set(saved) - set(mine))
    only_mine = sorted(set(mine) - set(saved))
    reshaped = sorted(k for k in set(saved) & set(mine) if saved[k] != mine[k])
    parts = []
    if only_saved:
        parts.append(f"{len(only_saved)} tensors only in the checkpoint (e.g. {only_saved[0]})")
    if only_mine:
        parts.append(f"{len(only_mine)} only in this model (e.g. {only_mine[0]})")
    if reshaped:
        k = reshaped[0]
        parts.append(
            f"{len(reshaped)} with another shape (e.g. {k}: {list(saved[k])} in the checkpoint, {list(mine[k])} here)"
        )
    return "model tensors differ: " + "; ".join(parts) if parts else None
