"""The trainer's GPU path, pinned on the CPU (issue 12).

* the rotary table reaches every block in fp32 under FSDP2's bf16 policy (both backends; why it must:
  tests/model_families/test_gpt_blocks.py);
* fp8 runs resume: TransformerEngine's ``_extra_state`` (recipe, delayed scaling's amax history)
  survives a DCP save and a fresh model's load, with activation checkpointing too, and a resume
  may change the recipe (fp8 current <-> delayed, fp8 -> bf16);
* a sharded model starts equal to the unsharded one (1 vs 2 processes, both backends; HSDP's
  (Replicate, Shard(0)) layout on a 2x2 mesh), and TE parameters keep their attributes;
* a GPU instance never trains on the CPU (entry point and trainer), and the image keeps NVIDIA's
  start-up script in its entry chain; the Dockerfile's EFA installer flags match their comments.

The TE backend runs on :mod:`fake_transformer_engine`, a CPU stand-in with the image's TransformerEngine
(2.19) names and extra-state format (2.10's too, on request): these tests check our code around TE, never TE itself (that is
``benchmarks/gpu_check.py``'s job on a GPU).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from model_families.gpt import ROPE_BASE, ModelConfig
from model_families.rotary import rope_angles
from platform_spec.hyperparameters import Hyperparameters
from platform_spec.precisions import PRECISIONS
from training import precision as prec
from training.checkpoint import extra_state
from training.checkpoint.manager import CheckpointError, CheckpointManager, size_extra_state
from training.environment import (
    ConfigError,
    GPUUnavailable,
    ResourceConfig,
    SageMakerPaths,
    check_gpus_visible,
    expected_gpus,
    read_resource_config,
)
from training.model import CausalLM, build_model
from training.parallelize import REPLICATE_DIM, SHARD_DIM, build_mesh, materialize, parallelize

from . import fake_transformer_engine as fake_te
from .hostile_pickle import Touch

REPO = Path(__file__).resolve().parents[2]
CONFIG = ModelConfig("small", num_layers=2, hidden_size=64, num_attention_heads=2, ffn_hidden_size=128, vocab_size=256)


def _model(backend: str, monkeypatch: pytest.MonkeyPatch, seed: int = 7) -> CausalLM:
    """A CPU model of either backend (TE: the stand-in; build_model refuses TE on the CPU), initialised from ``seed``."""
    if backend == "te":
        fake_te.install(monkeypatch)
    model = CausalLM(CONFIG, backend=backend, device="cpu")
    model.init_weights(seed)
    return model


def _tokens(seq: int = 33, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(3))


# ---------------------------------------------------------------------------
# 1. rotary angles in fp32 under the bf16 policy


@pytest.mark.parametrize("activation_checkpointing", ["off", "full"])
@pytest.mark.parametrize("backend", ["torch", "te"])
def test_rotary_angles_reach_every_block_in_fp32_under_the_bf16_policy(
    process_group, monkeypatch: pytest.MonkeyPatch, backend: str, activation_checkpointing: str
) -> None:
    model = _model(backend, monkeypatch)
    seen: list[tuple[torch.dtype, list[torch.Tensor]]] = []

    def capture(module, args, kwargs):
        rope = kwargs["rotary_pos_emb"] if backend == "te" else args[1]
        seen.append((args[0].dtype, list(rope) if isinstance(rope, tuple) else [rope]))

    for block in model.layers:  # the modules that apply the rotation, inside the FSDP units
        inner = block.layer if backend == "te" else block.attention
        inner.register_forward_pre_hook(capture, with_kwargs=True)
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=(SHARD_DIM,))
    parallelize(
        model,
        mesh=mesh,
        precision=prec.plan("bf16"),
        activation_checkpointing=activation_checkpointing,
        reshard_after_forward=True,
    )
    tokens = _tokens()
    model(tokens[:, :-1], tokens[:, 1:]).backward()

    assert len(seen) >= CONFIG.num_layers  # every block (and its recompute under checkpointing)
    angles = rope_angles(32, CONFIG.head_dim, ROPE_BASE, "cpu")
    expected = [angles.view(32, 1, 1, -1)] if backend == "te" else [angles.cos(), angles.sin()]
    for hidden_dtype, rope in seen:
        assert hidden_dtype == torch.bfloat16  # the policy is in force: the block computes in bf16
        assert [t.dtype for t in rope] == [torch.float32] * len(expected)
        for got, want in zip(rope, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# 2. fp8 resume: TE's _extra_state


def _train(
    model: CausalLM, optimizer: torch.optim.Optimizer, recipe, steps: int, precision: str = "fp8"
) -> list[float]:
    losses = []
    for step in range(steps):
        tokens = _tokens(seq=17 + step)
        with prec.autocast(precision, recipe):
            loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def _fsdp_te_model(
    monkeypatch: pytest.MonkeyPatch, activation_checkpointing: str = "off"
) -> tuple[CausalLM, torch.optim.Optimizer]:
    return _fsdp_model_of("fp8", monkeypatch, activation_checkpointing)


def _fp8_state(model: CausalLM) -> dict[str, dict]:
    """Each stand-in TE module's recipe and, for delayed scaling, its amax histories and scales (names
    without the activation-checkpoint wrapper, so runs with and without it compare)."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, fake_te._BaseModule):
            meta = module.fp8_meta
            delayed = [
                meta[k] for k in ("scaling_fwd", "scaling_bwd") if isinstance(meta.get(k), fake_te._DelayedScalingState)
            ]
            out[name.replace("_checkpoint_wrapped_module.", "")] = {
                "recipe": meta.get("recipe"),
                "history": [state.amax_history.clone() for state in delayed],
                "scale": [state.scale.clone() for state in delayed],
                "saved": module.get_extra_state().numel() > 0,
            }
    return out


def _assert_same_fp8_state(got: dict[str, dict], want: dict[str, dict]) -> None:
    assert got.keys() == want.keys()
    for name, state in want.items():
        assert got[name]["recipe"] == state["recipe"] and got[name]["saved"] == state["saved"], name
        assert len(got[name]["history"]) == len(state["history"]), name
        for a, b in zip(got[name]["history"] + got[name]["scale"], state["history"] + state["scale"], strict=True):
            assert torch.equal(a, b), name  # delayed scaling's amax history and scales, bitwise


def _fsdp_model_of(
    precision: str, monkeypatch: pytest.MonkeyPatch, activation_checkpointing: str = "off"
) -> tuple[CausalLM, torch.optim.Optimizer]:
    """:func:`_fsdp_te_model` under ``precision``'s FSDP plan."""
    model = _model("te", monkeypatch)
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=(SHARD_DIM,))
    parallelize(
        model,
        mesh=mesh,
        precision=prec.plan(precision),
        activation_checkpointing=activation_checkpointing,
        reshard_after_forward=True,
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


@pytest.mark.parametrize(
    ("precision", "scaling", "activation_checkpointing", "written_by"),
    [
        ("fp8", "delayed", "off", "2.19"),
        ("fp8", "current", "off", "2.19"),
        ("fp8", "delayed", "full", "2.19"),
        ("mxfp8", None, "off", "2.19"),
        ("nvfp4", None, "off", "2.19"),
        ("fp8", "delayed", "off", "2.10"),
        ("fp8", "current", "off", "2.10"),
        ("mxfp8", None, "off", "2.10"),
        ("nvfp4", None, "off", "2.10"),
    ],
)
def test_every_recipe_resumes_with_its_transformer_engine_scaling_state(
    process_group,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    precision: str,
    scaling: str | None,
    activation_checkpointing: str,
    written_by: str,
) -> None:
    """A checkpoint of each recipe resumes on the trainer image's TE (the stand-in's 2.19 reading), whether
    that TE wrote it (2.19: delayed scaling's state pickled, the stateless recipes' empty) or the previous
    image's TE 2.10 did (a pickle for every recipe, with 2.10's recipe fields): delayed scaling comes back
    with its amax history and scales bitwise, though TE itself refuses to unpickle it (the trainer's checked
    opt-in, training/checkpoint/extra_state.py), a stateless recipe's old pickle is ignored as TE does, and
    the run continues exactly as the uninterrupted one."""
    fake_te.install(monkeypatch)
    monkeypatch.setattr(fake_te, "WRITE_FORMAT", written_by)
    recipe = prec.te_recipe(precision, scaling)
    model, optimizer = _fsdp_model_of(precision, monkeypatch, activation_checkpointing)
    _train(model, optimizer, recipe, steps=3, precision=precision)
    saved = _fp8_state(model)
    assert len(saved) == 4 * CONFIG.num_layers  # qkv, attention, proj, mlp of every block ...
    pickled = recipe.delayed() or written_by == "2.10"
    assert all(s["recipe"] == recipe and s["saved"] == pickled for s in saved.values())  # ... saved as TE does
    if recipe.delayed():  # a history of 1024 steps with the 3 latest amaxes written
        history = saved["layers.0.layer.self_attention.layernorm_qkv"]["history"][0]
        assert history.shape == (1024, 3) and int((history[:, 0] > 0).sum()) == 3

    manager = CheckpointManager(tmp_path, keep=2, rank=0, local_rank=0, world_size=1)
    manager.save(3, model, optimizer, {"step": 3})
    continued = _train(model, optimizer, recipe, steps=2, precision=precision)

    monkeypatch.setattr(fake_te, "WRITE_FORMAT", "2.19")  # the new image resumes it
    fresh, fresh_optimizer = _fsdp_model_of(precision, monkeypatch, activation_checkpointing)
    assert all(m.get_extra_state().numel() == 0 for m in fake_te.te_modules(fresh))  # TE's fresh state: empty
    if recipe.delayed():  # TE alone refuses the pickle: the checked opt-in is what restores it
        module = fake_te.te_modules(model)[0]
        with pytest.raises(RuntimeError, match=fake_te.UNSAFE_PICKLE_EXTRA_STATE_ENV):
            fake_te.te_modules(fresh)[0].set_extra_state(module.get_extra_state())
    resumed = manager.load_latest(fresh, fresh_optimizer)
    assert resumed is not None and resumed.step == 3 and not resumed.skipped
    assert fake_te.UNSAFE_PICKLE_EXTRA_STATE_ENV not in os.environ  # the opt-in lasted the load only
    if recipe.delayed():
        _assert_same_fp8_state(_fp8_state(fresh), saved)
    else:  # nothing to restore: the first step sets the recipe
        assert all("recipe" not in m.fp8_meta for m in fake_te.te_modules(fresh))
    # and the run continues exactly as the uninterrupted one (CPU math is deterministic)
    assert _train(fresh, fresh_optimizer, recipe, steps=2, precision=precision) == continued


def test_a_hostile_pickle_in_extra_state_is_refused_before_anything_loads(
    process_group, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A checkpoint whose ``_extra_state`` pickle names anything but a recipe's state (here: a call that would
    create a file) is refused with the key and the global it names; nothing runs, no weight or fp8 state of
    it is loaded, and the resume falls back to the older checkpoint (or fails when there is none)."""
    fake_te.install(monkeypatch)
    recipe = prec.te_recipe("fp8", "delayed")
    model, optimizer = _fsdp_te_model(monkeypatch)
    _train(model, optimizer, recipe, steps=2)
    manager = CheckpointManager(tmp_path / "ckpt", keep=3, rank=0, local_rank=0, world_size=1)
    manager.save(2, model, optimizer, {"step": 2})
    _train(model, optimizer, recipe, steps=1)
    victim = fake_te.te_modules(model)[1]
    marker = tmp_path / "unpickled"
    hostile = torch.frombuffer(bytearray(pickle.dumps(Touch(marker))), dtype=torch.uint8)
    monkeypatch.setattr(victim, "get_extra_state", lambda: hostile)
    manager.save(3, model, optimizer, {"step": 3})

    fresh, fresh_optimizer = _fsdp_te_model(monkeypatch)
    resumed = manager.load_latest(fresh, fresh_optimizer)
    assert resumed is not None and resumed.step == 2 and list(resumed.skipped) == [3]
    assert "refused TransformerEngine extra state: its pickle names pathlib.Path.touch" in resumed.skipped[3]
    assert not marker.exists()

    only_hostile = CheckpointManager(tmp_path / "alone", keep=3, rank=0, local_rank=0, world_size=1)
    only_hostile.save(3, model, optimizer, {"step": 3})
    fresh, fresh_optimizer = _fsdp_te_model(monkeypatch)
    before = {k: v.full_tensor().clone() for k, v in fresh.state_dict().items() if isinstance(v, DTensor)}
    with pytest.raises(CheckpointError, match=r"_extra_state: refused TransformerEngine extra state"):
        only_hostile.load_latest(fresh, fresh_optimizer)
    after = {k: v.full_tensor() for k, v in fresh.state_dict().items() if isinstance(v, DTensor)}
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all("recipe" not in m.fp8_meta for m in fake_te.te_modules(fresh)) and not marker.exists()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x80\x04\x95", "not a readable pickle"),
        (pickle.dumps(["recipe"]), "expected a dict of"),
        (pickle.dumps({"recipe": None, "extra_fp8_variables": {}}), "expected a recipe of"),
        (pickle.dumps({"recipe": 1, "scale_fwd": [1.0]}), "expected a recipe of"),
        (pickle.dumps({"extra_fp8_variables": {}, "unknown": 1}), "expected a dict of"),
        (pickle.dumps({"recipe": OrderedDict()}), "expected a recipe of"),
    ],
    ids=["cut-short", "not-a-dict", "no-recipe", "not-a-recipe", "unknown-key", "ordered-dict"],
)
def test_extra_state_of_another_shape_is_refused(monkeypatch: pytest.MonkeyPatch, payload: bytes, reason: str) -> None:
    fake_te.install(monkeypatch)
    with pytest.raises(extra_state.ExtraStateRefused, match=reason) as refused:
        extra_state.read_extra_state(payload, "layers.0._extra_state")
    assert str(refused.value).startswith("layers.0._extra_state: refused TransformerEngine extra state")


class _Reduced:
    """Pickles as ``callable(*args)``: how a crafted payload names a call."""

    def __init__(self, call, *args) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple:
        return (self.call, self.args)


def _tensor_over(storage, offset: int, size: tuple, stride: tuple, hooks=None) -> _Reduced:
    """A pickled tensor as torch writes one (``_rebuild_tensor_v2``), with a crafted view of ``storage``."""
    from torch._utils import _rebuild_tensor_v2

    return _Reduced(_rebuild_tensor_v2, storage, offset, size, stride, False, hooks or OrderedDict())


@pytest.mark.parametrize(
    ("crafted", "reason"),
    [
        (lambda: _tensor_over(torch.zeros(2).storage(), 0, (10**6,), (1,)), r"size \(1000000,\).*past its storage"),
        (lambda: _tensor_over(torch.zeros(2).storage(), 5, (2,), (1,)), r"offset 5 reaching past its storage"),
        (lambda: _tensor_over(torch.zeros(3).storage(), 0, (2,), (3,)), r"stride \(3,\).*past its storage"),
        (lambda: _tensor_over(torch.zeros(2).storage(), 0, (2,), (1,), OrderedDict(a=1)), "backward hooks"),
        (
            lambda: _tensor_over(
                _Reduced(torch.storage._load_from_bytes, pickle.dumps(_Reduced(os.system, "true"))), 0, (1,), (1,)
            ),
            r"tensor storage that torch's weights-only unpickler refuses \(Unsupported operand",
        ),
    ],
    ids=["view-past-storage", "offset-past-storage", "stride-past-storage", "hooks", "storage-calls-os-system"],
)
def test_a_crafted_tensor_in_extra_state_is_refused(monkeypatch: pytest.MonkeyPatch, crafted, reason: str) -> None:
    """A delayed-scaling state whose tensor is not a plain one within its storage is refused naming the key:
    torch's ``set_`` would grow the storage to the size the pickle names (uninitialised memory, any size), and
    a storage's bytes go to torch's weights-only unpickler, whose refusal is reported without torch's advice to
    retry unsafely."""
    fake_te.install(monkeypatch)
    payload = pickle.dumps({"recipe": fake_te.DelayedScaling(), "scale_fwd": crafted()})
    with pytest.raises(extra_state.ExtraStateRefused, match=reason) as refused:
        extra_state.read_extra_state(payload, "layers.0._extra_state")
    assert str(refused.value).startswith("layers.0._extra_state: refused") and "weights_only" not in str(refused.value)


@pytest.mark.parametrize(
    "value",
    [torch.tensor(1.0), torch.zeros(3, dtype=torch.bfloat16), torch.zeros(2, 4, dtype=torch.uint8)],
    ids=["0-d-float", "bf16", "2-d-uint8"],
)
def test_an_extra_state_tensor_te_does_not_write_is_refused_naming_the_key(value: torch.Tensor) -> None:
    """The checkpoint's metadata sets the dtype and shape an extra state loads as; TE writes 1-D uint8 only."""
    with pytest.raises(extra_state.ExtraStateRefused, match=r"^m\._extra_state: .*expected a 1-D uint8 tensor"):
        extra_state.check_extra_states({"m._extra_state": value})


def test_the_restricted_unpickler_reads_what_te_writes_for_each_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each registry recipe's pickled state (recipe, delayed scaling's tensors, a bf16 tensor) reads back
    equal, with no global beyond the allowed ones; the recipe classes allowed are the registry's."""
    fake_te.install(monkeypatch)
    assert (
        set(extra_state.RECIPE_CLASSES)
        == {s.class_name for p in PRECISIONS for s in p.te_recipes.values()}
        == {"DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling", "NVFP4BlockScaling"}
    )
    for name in extra_state.RECIPE_CLASSES:
        recipe = getattr(fake_te, name)()
        state = {
            "recipe": recipe,
            "scale_fwd": torch.rand(3),
            "amax_history_fwd": torch.rand(4, 3).to(torch.bfloat16)[:, 1:],
            "extra_fp8_variables": {"num_gemms": 1, "fp8_checkpoint": True, "shape": (1, [2.0, "x"])},
        }
        got = extra_state.read_extra_state(pickle.dumps(state), "k")
        assert got["recipe"] == recipe and got["extra_fp8_variables"] == state["extra_fp8_variables"]
        assert torch.equal(got["scale_fwd"], state["scale_fwd"]) and torch.equal(
            got["amax_history_fwd"], state["amax_history_fwd"]
        )


def test_activation_checkpointing_leaves_the_fp8_scaling_state_as_the_forward_left_it(
    process_group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TE's non-reentrant recompute re-enters the forward's autocast and reuses (then restores) its
    scaling state: training with full recompute leaves every module's recipe, amax history and
    scales bitwise as training without it does, all of it still saved (``_extra_state`` not empty)."""
    fake_te.install(monkeypatch)
    recipe = prec.te_recipe("fp8", "delayed")
    states, losses = {}, {}
    for ac in ("off", "full"):
        model, optimizer = _fsdp_te_model(monkeypatch, ac)
        losses[ac] = _train(model, optimizer, recipe, steps=3)
        states[ac] = _fp8_state(model)
    assert len(states["full"]) == 4 * CONFIG.num_layers and all(s["saved"] for s in states["full"].values())
    _assert_same_fp8_state(states["full"], states["off"])
    assert losses["full"] == losses["off"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (("fp8", "current"), ("fp8", "delayed")),
        (("fp8", "delayed"), ("fp8", "current")),
        (("fp8", "delayed"), ("bf16", None)),
    ],
    ids=["current-to-delayed", "delayed-to-current", "fp8-to-bf16"],
)
def test_a_resume_may_change_the_recipe(
    process_group, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, before: tuple, after: tuple
) -> None:
    """The resume rules allow a precision or fp8_scaling change (training/checkpoint/compare.py). A saved
    recipe (delayed scaling's: the stateless recipes save none) comes back with the checkpoint, and the
    first step under the new recipe replaces it (TE's
    set_meta_tensor builds a fresh scaling state for a recipe of another kind): no amax history is
    carried into a recipe it does not belong to, and the next checkpoint holds the new recipe's state
    (bf16: nothing, as a module that never ran under autocast)."""
    fake_te.install(monkeypatch)
    old_recipe = prec.te_recipe(*before)
    model, optimizer = _fsdp_te_model(monkeypatch)
    _train(model, optimizer, old_recipe, steps=3, precision=before[0])
    manager = CheckpointManager(tmp_path, keep=3, rank=0, local_rank=0, world_size=1)
    manager.save(3, model, optimizer, {"step": 3})

    fresh, fresh_optimizer = _fsdp_te_model(monkeypatch)
    assert manager.load_latest(fresh, fresh_optimizer).step == 3
    restored = old_recipe if old_recipe.delayed() else None  # a stateless recipe saves nothing (TE 2.16.1+)
    assert all(s["recipe"] == restored for s in _fp8_state(fresh).values())  # restored as saved
    new_recipe = prec.te_recipe(*after) if after[0] != "bf16" else None
    losses = _train(fresh, fresh_optimizer, new_recipe, steps=2, precision=after[0])
    assert all(torch.isfinite(torch.tensor(losses)))
    state = _fp8_state(fresh)
    if new_recipe is None:  # bf16: the modules ran outside autocast, so there is no fp8 state to save
        assert not any(s["saved"] for s in state.values())
    else:
        assert all(s["recipe"] == new_recipe and s["saved"] == new_recipe.delayed() for s in state.values())
        if after[1] == "delayed":  # a fresh history: the 2 steps since the resume, nothing older
            history = state["layers.0.layer.self_attention.layernorm_qkv"]["history"][0]
            assert int((history[:, 0] > 0).sum()) == 2
        else:
            assert all(s["history"] == [] for s in state.values())
    manager.save(5, fresh, fresh_optimizer, {"step": 5})
    again, again_optimizer = _fsdp_te_model(monkeypatch)
    assert manager.load_latest(again, again_optimizer).step == 5
    if new_recipe is None or not new_recipe.delayed():  # an empty extra state restores nothing: the next fp8
        # step starts afresh
        assert all(m.get_extra_state().numel() == 0 and "recipe" not in m.fp8_meta for m in fake_te.te_modules(again))
    else:
        _assert_same_fp8_state(_fp8_state(again), state)


def test_size_extra_state_sizes_placeholders_and_leaves_out_what_the_checkpoint_lacks() -> None:
    def tensor_meta(size: int) -> TensorStorageMetadata:
        return TensorStorageMetadata(
            TensorProperties(dtype=torch.uint8),
            torch.Size([size]),
            [ChunkStorageMetadata(torch.Size([0]), torch.Size([size]))],
        )

    metadata = Metadata(
        state_dict_metadata={
            "model.a._extra_state": tensor_meta(2322),
            "model.b._extra_state": BytesStorageMetadata(),  # an old TE's io.BytesIO extra state
            "model.w": tensor_meta(4),
        }
    )
    weight = torch.ones(4)
    state = {
        "a._extra_state": torch.empty(0, dtype=torch.uint8),
        "b._extra_state": torch.empty(0, dtype=torch.uint8),
        "c._extra_state": torch.empty(0, dtype=torch.uint8),
        "w": weight,
    }
    absent = size_extra_state(state, metadata)
    assert absent == {"b._extra_state", "c._extra_state"}
    assert state["a._extra_state"].shape == (2322,) and state["a._extra_state"].dtype == torch.uint8
    assert state["w"] is weight  # only extra state is touched


# ---------------------------------------------------------------------------
# 3. identical initial weights: 1 process vs 2 processes


@pytest.mark.slow
@pytest.mark.xdist_group("trainer-workers")
def test_a_sharded_model_starts_equal_to_the_unsharded_one(
    process_group, monkeypatch: pytest.MonkeyPatch, two_process_results: dict
) -> None:
    """The trainer's build (meta device, checkpointing, FSDP2, materialize) on 1 process (here) and 2
    gloo processes (torchrun), both backends (TE: the stand-in, whose reset_parameters fills every
    rank's shard from the same seed as TE's does), against the unsharded torch-native model of
    the same seed: bitwise."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from two_process_worker import INIT_CONFIG as ODD
    from two_process_worker import SEED, full_weights, layouts

    fake_te.install(monkeypatch)
    runs = {
        1: {
            name: full_weights(backend, 1, strategy, per_node)
            for name, (backend, strategy, per_node) in layouts(1).items()
        }
    }
    runs[2] = two_process_results["init_weights"]
    assert sorted(runs[2]) == ["te", "te hybrid 1x2", "te hybrid 2x1", "torch"]  # FSDP, and HSDP both ways
    torch.manual_seed(SEED)
    reference = build_model(ODD).state_dict()
    for nproc, result in runs.items():
        for backend, weights in result.items():
            assert weights.keys() == reference.keys(), (nproc, backend)
            for name, tensor in reference.items():
                assert torch.equal(weights[name], tensor), (nproc, backend, name)
    # a 2-way split of a weight is not two copies of one block (TE's own init would make it so)
    qkv = runs[2]["te"]["layers.0.attention.qkv.weight"]
    assert not torch.equal(qkv[: qkv.shape[0] // 2], qkv[qkv.shape[0] // 2 :])


@pytest.mark.slow
@pytest.mark.xdist_group("trainer-workers")
def test_quantized_model_init_trains_under_fsdp2_and_hsdp_and_resumes(two_process_results: dict) -> None:
    """quantized_model_init on 2 gloo processes (the TE stand-in, ``install_2_19``): the trainer's build stores
    the 16 GEMM weights of SYNC_CONFIG's 4 blocks quantized (fp8 current scaling and mxfp8 under FSDP, fp8 under
    HSDP), TE's FusedAdam's fp32 master weights start equal to the non-quantized path's initial weights
    (bitwise: seeded from the trainer's own init, not from the quantized values), and a resume from the
    trainer's CheckpointManager (DCP, optimizer state as DTensors; the FSDP runs save asynchronously, the
    trainer's default, and train on while DCP's async_save writes what it staged) restores the masters and the
    quantized weights (fp8 bits and scales) of the saved step bitwise and continues with the uninterrupted run's
    losses; the export holds the masters of the quantized weights. Stated tolerance: relative 1e-5 on the loss (on
    the CPU the resumed steps are the same computation; on a GPU the order of reductions may differ)."""
    from .two_process_worker import QMI_STEPS, SEED, SYNC_CONFIG, qmi_layouts

    runs = two_process_results["quantized_model_init"]
    assert sorted(runs) == sorted(qmi_layouts(2)) == ["fp8", "fp8 hybrid 1x2", "mxfp8"]
    torch.manual_seed(SEED)
    reference = build_model(SYNC_CONFIG).state_dict()  # the non-quantized path's initial weights (fp32)
    for name, run in runs.items():
        assert run["quantized parameters"] == 4 * SYNC_CONFIG.num_layers, name
        masters = run["initial masters"]
        assert len(masters) == 4 * SYNC_CONFIG.num_layers, name
        for key, master in masters.items():
            assert master.dtype == torch.float32 and torch.equal(master, reference[key]), (name, key)
        assert all(math.isfinite(loss) for loss in run["losses"] + run["continued"]), name
        assert len(run["continued"]) == QMI_STEPS and run["saved masters"].keys() == masters.keys()
        for key, saved in run["saved masters"].items():
            assert not torch.equal(saved, masters[key]), (name, key)  # trained
            assert torch.equal(run["resumed masters"][key], saved), (name, key)
        assert run["saved weights"].keys() == masters.keys(), name
        for key, saved in run["saved weights"].items():  # the staged step's quantized weights, not later ones
            assert torch.equal(run["resumed weights"][key], saved), (name, key)
        assert run["resumed"] == pytest.approx(run["continued"], rel=1e-5), name
        if run["exported"] is not None:  # FSDP runs export: the quantized weights' fp32 masters, bitwise
            for key, master in run["final masters"].items():
                assert torch.equal(run["exported"][key], master), (name, key)
    # HSDP on a 2-D (replicate, shard) mesh trains as FSDP does: the same global batch, the same update
    assert runs["fp8 hybrid 1x2"]["losses"] == pytest.approx(runs["fp8"]["losses"], rel=1e-5)
    assert [runs[name]["asynchronous"] for name in ("fp8", "mxfp8", "fp8 hybrid 1x2")] == [True, True, False]


@pytest.mark.parametrize(
    ("names", "raises"), [((REPLICATE_DIM, SHARD_DIM), False), (("dp_replicate", "dp_shard"), True)]
)
def test_an_hsdp_mesh_names_its_dimensions_as_transformer_engine_looks_them_up(
    process_group, monkeypatch: pytest.MonkeyPatch, names: tuple[str, str], raises: bool
) -> None:
    """TE 2.19's reset_parameters reduces a quantized weight's amax over ``mesh.get_group(mesh_dim="shard")`` of
    a 2-D mesh: build_mesh's names work, the trainer's former ``("dp_replicate", "dp_shard")`` raise KeyError
    there (what the hybrid mesh did inside TE)."""
    from torch.distributed.device_mesh import init_device_mesh

    fake_te.install_2_19(monkeypatch)
    model = build_model(CONFIG, backend="te", device="meta", quantized_recipe=prec.te_recipe("fp8"))
    mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=names)
    parallelize(
        model, mesh=mesh, precision=prec.plan("fp8"), activation_checkpointing="off", reshard_after_forward=True
    )
    if raises:
        with pytest.raises(KeyError):
            materialize(model, torch.device("cpu"), seed=1)
    else:
        initial = materialize(model, torch.device("cpu"), seed=1)
        assert len(initial) == 4 * CONFIG.num_layers


def test_hsdp_shards_start_equal_to_the_unsharded_init_on_a_2x2_mesh() -> None:
    """HSDP's layout: (Replicate, Shard(0)) on a (replicate=2, shard=2) mesh, as FSDP2 shards
    over build_mesh(..., "hybrid"). One process plays the four ranks (no process group: DeviceMesh's
    ``_rank``, torch 2.13); each gets rank numbers of its own, because DTensor caches its sharding
    decisions per mesh and meshes differing only in the local rank compare equal. Every rank's
    ``init_weights`` keeps its shard of the full tensor: both replicas hold the same rows, and the two
    shards (uneven: 301 embedding rows, 200 FFN rows) put together are the unsharded model, bitwise."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from .two_process_worker import INIT_CONFIG as ODD
    from .two_process_worker import SEED

    reference = build_model(ODD)
    reference.init_weights(SEED)
    shards: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
    for rank in range(4):
        ranks = torch.arange(4).view(2, 2) + 4 * rank
        mesh = DeviceMesh(
            "cpu",
            ranks,
            mesh_dim_names=(REPLICATE_DIM, SHARD_DIM),
            _init_backend=False,
            _rank=int(ranks.flatten()[rank]),
        )
        model = build_model(ODD, device="meta")
        for module in model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                empty = torch.empty(param.shape, dtype=param.dtype)
                layout = distribute_tensor(empty, mesh, [Replicate(), Shard(0)], src_data_rank=None)
                setattr(module, name, torch.nn.Parameter(layout))
        model.init_weights(SEED)
        shards[mesh.get_coordinate()] = {name: p.to_local().clone() for name, p in model.named_parameters()}
    assert sorted(shards) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert (
        shards[(0, 0)]["tok_embeddings.weight"].shape[0] == 151
        and shards[(0, 1)]["tok_embeddings.weight"].shape[0] == 150
    )
    for name, full in reference.state_dict().items():
        for replica in (0, 1):
            assert torch.equal(torch.cat([shards[(replica, 0)][name], shards[(replica, 1)][name]]), full), (
                replica,
                name,
            )


def test_te_parameters_keep_their_attributes_through_sharding_and_materialisation(
    process_group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fully_shard and then TE's reset_parameters (in materialize) each replace every Parameter object.
    The Parameters the optimizer gets -- and FSDP2 keeps after its lazy initialisation -- carry TE's
    own parallelism attributes (set again by reset_parameters) and any attribute the block parameters
    had before sharding."""
    fake_te.install(monkeypatch)
    torch.manual_seed(1)
    model = build_model(CONFIG, backend="te", device="meta")
    qkv = model.layers[0].layer.self_attention.layernorm_qkv
    qkv.weight.marker = "set before sharding"  # an attribute a TE version (or another library) may rely on
    parallelize(
        model,
        mesh=build_mesh("cpu", 1, 1, "full"),
        precision=prec.plan("bf16"),
        activation_checkpointing="full",
        reshard_after_forward=True,
    )
    materialize(model, torch.device("cpu"), seed=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = _tokens()
    model(tokens[:, :-1], tokens[:, 1:]).backward()  # FSDP2's lazy init adopts the module's Parameters
    optimizer.step()
    params = dict(model.named_parameters())
    assert {id(p) for p in params.values()} == {id(p) for group in optimizer.param_groups for p in group["params"]}
    weight = params["layers.0._checkpoint_wrapped_module.layer.self_attention.layernorm_qkv.weight"]
    assert weight.marker == "set before sharding"
    assert (weight.tensor_model_parallel, weight.partition_dim, weight.partition_stride) == (True, 0, 1)  # TE's own
    fc2 = params["layers.1._checkpoint_wrapped_module.layer.layernorm_mlp.fc2_weight"]
    assert fc2.partition_dim == 1 and not hasattr(fc2, "marker")
    norm = params["layers.1._checkpoint_wrapped_module.layer.layernorm_mlp.layer_norm_weight"]
    assert norm.sequence_parallel is False


def test_initial_weights_depend_on_the_seed_and_the_name_only() -> None:
    a, b = build_model(CONFIG), build_model(CONFIG)
    a.init_weights(11)
    b.init_weights(11)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    b.init_weights(12)
    assert not torch.equal(a.tok_embeddings.weight, b.tok_embeddings.weight)
    std = a.layers[0].attention.proj.weight.std().item()
    assert std == pytest.approx(0.02 / (2 * CONFIG.num_layers) ** 0.5, rel=0.1)  # GPT-2 residual scaling
    assert torch.equal(a.norm.weight, torch.ones(CONFIG.hidden_size)) and not a.layers[0].attention.qkv.bias.any()


# ---------------------------------------------------------------------------
# 5. a GPU instance never trains on the CPU


def _base(tmp_path: Path, resource: dict) -> SageMakerPaths:
    paths = SageMakerPaths(tmp_path / "opt_ml")
    paths.config_dir.mkdir(parents=True)
    paths.hyperparameters_file.write_text(
        json.dumps({"precision": "bf16", "synthetic_data": "true", "model": "gpt-tiny"})
    )
    paths.resource_config_file.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], **resource}))
    return paths


def test_resourceconfig_names_the_instance_type_and_its_gpus(tmp_path: Path) -> None:
    paths = _base(tmp_path, {"current_instance_type": "ml.p5.48xlarge", "network_interface_name": "eth0"})
    resource = read_resource_config(paths)
    assert resource.current_instance_type == "ml.p5.48xlarge" and expected_gpus(resource) == 8
    assert expected_gpus(ResourceConfig("algo-1", ("algo-1",))) is None  # local runs name no type
    assert (
        expected_gpus(ResourceConfig("algo-1", ("algo-1",), None, "ml.m5.xlarge")) is None
    )  # not a catalogue GPU type
    paths.resource_config_file.write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "current_instance_type": 5})
    )
    with pytest.raises(ConfigError, match="'current_instance_type' must be an instance type"):
        read_resource_config(paths)


def test_the_entry_point_refuses_a_gpu_instance_without_visible_gpus(tmp_path: Path) -> None:
    from training import entrypoint

    resource = ResourceConfig("algo-1", ("algo-1",), None, "ml.p6-b200.48xlarge")
    check_gpus_visible(resource, 8)
    with pytest.raises(GPUUnavailable) as refused:
        check_gpus_visible(resource, 0)
    assert "ml.p6-b200.48xlarge with 8 NVIDIA GPUs" in str(refused.value)
    assert "/opt/nvidia/nvidia_entrypoint.sh" in str(refused.value) and "CPU" in str(refused.value)

    paths = _base(tmp_path, {"current_instance_type": "ml.p5.4xlarge"})
    env = {"SAGEMAKER_BASE_DIR": str(paths.base_dir), "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible
    assert entrypoint.main(["train"], env) == 1
    reason = paths.failure_file.read_text()
    assert "ml.p5.4xlarge with 1 NVIDIA GPU, but nvidia-smi lists no GPU" in reason
    assert not paths.checkpoint_dir.exists()  # nothing was launched


def test_the_trainer_refuses_to_fall_back_to_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from training.train import Trainer

    paths = _base(tmp_path, {"current_instance_type": "ml.p5.48xlarge"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GPUUnavailable) as refused:
        Trainer(Hyperparameters(precision="bf16", synthetic_data=True), paths).setup()
    reason = str(refused.value)
    assert "ml.p5.48xlarge with 8 NVIDIA GPUs, but CUDA is not usable in this process" in reason
    assert f"PyTorch {torch.__version__}" in reason
    # without a GPU instance type (a local run) the CPU is the intended device
    prec.require_cuda(ResourceConfig("algo-1", ("algo-1",)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    prec.require_cuda(read_resource_config(paths))


# ---------------------------------------------------------------------------
# the image: NVIDIA's start-up script stays in the entry chain; EFA installer flags


def _dockerfile() -> str:
    return (REPO / "training" / "Dockerfile").read_text(encoding="utf-8")


def test_the_image_keeps_nvidia_start_up_in_its_entry_chain() -> None:
    text = _dockerfile()
    entrypoints = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, flags=re.MULTILINE)
    assert len(entrypoints) == 1
    assert json.loads(entrypoints[0]) == ["/opt/nvidia/nvidia_entrypoint.sh", "python", "-m", "training.entrypoint"]
    assert json.loads(re.search(r"^CMD\s+(\[.*\])\s*$", text, flags=re.MULTILINE).group(1)) == ["train"]
    assert re.search(r"^RUN .*test -x /opt/nvidia/nvidia_entrypoint\.sh", text, flags=re.MULTILINE)  # fails the build


def test_efa_installer_flags_are_the_ones_the_comment_explains() -> None:
    text = _dockerfile()
    command = re.search(r"\./efa_installer\.sh ([^\n\\&]+)", text).group(1).split()
    assert command == ["-y", "--skip-kmod", "--skip-limit-conf", "--no-verify", "--mpi=openmpi4"]
    # -d is --debug-packages and -g (--enable-gdr) is a no-op: neither is used, nor claimed
    assert "-d (" not in text and "-g (" not in text
