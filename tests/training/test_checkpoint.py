"""CheckpointManager on real DCP folders (single process): completeness, verification and fallback,
run records and refusals, pruning that never leaves nothing loadable, resume of model/optimizer/RNG."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from platform_spec import hyperparameters as hpmod
from platform_spec.checkpoint_layout import COMPLETE_MARKER, TRAINER_STATE
from platform_spec.hyperparameters import Hyperparameters
from platform_spec.models import get_preset
from training.checkpoint.compare import compare_runs, run_record
from training.checkpoint.manager import CheckpointError, CheckpointManager, ResumeRefused
from training.checkpoint.verify import complete_steps, step_dirs, verify_checkpoint
from training.model import build_model

from .hostile_pickle import Touch

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _model_and_optimizer(seed: int, hidden: int = 16) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 8)).square().mean().backward()
        opt.step()


def _manager(directory: Path, keep: int = 3, log: list[str] | None = None) -> CheckpointManager:
    return CheckpointManager(
        directory, keep=keep, rank=0, local_rank=0, world_size=1, log=None if log is None else log.append
    )


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _six_steps_every_three(directory: Path) -> dict[int, list[torch.Tensor]]:
    """The issue's run: 6 steps, a checkpoint every 3; returns the weights saved at each."""
    model, opt = _model_and_optimizer(0)
    manager = _manager(directory)
    saved = {}
    for step in range(1, 7):
        _train(model, opt, 1)
        if step % 3 == 0:
            manager.save(step, model, opt, {"data": {"step": step, "samples_consumed": step * 5}})
            saved[step] = _weights(model)
    return saved


@pytest.fixture(scope="module")
def six_step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[torch.Tensor]]]:
    """The issue's run, made once per module: ``step-3`` and ``step-6`` (real DCP folders) and their weights."""
    directory = tmp_path_factory.mktemp("six-steps") / "checkpoints"
    return directory, _six_steps_every_three(directory)


@pytest.fixture
def six_steps(six_step_run, tmp_path: Path) -> tuple[Path, dict[int, list[torch.Tensor]]]:
    """A fresh copy of :func:`six_step_run`'s checkpoints for one test to damage."""
    source, saved = six_step_run
    target = tmp_path / "checkpoints"
    shutil.copytree(source, target, symlinks=True)
    return target, saved


def test_keep_last_k_and_half_written_checkpoints_are_ignored(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    manager = CheckpointManager(tmp_path, keep=2, rank=0, local_rank=0, world_size=1)
    for step in (1, 2, 3):
        _train(model, opt, 1)
        manager.save(step, model, opt, {"data": {"step": step}})
    assert complete_steps(tmp_path) == [2, 3]
    assert set(step_dirs(tmp_path)) == {2, 3}
    marker = json.loads((tmp_path / "step-3" / COMPLETE_MARKER).read_text())
    assert marker["step"] == 3 and marker["world_size"] == 1

    # A save killed half-way: newer step, files present, no completion marker.
    half = tmp_path / "step-9"
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"partial")
    (half / TRAINER_STATE).write_text('{"step": 9}')
    assert manager.latest_step() == 3
    assert "no .complete marker" in verify_checkpoint(half, 9).problems[0]
    assert manager.remove_incomplete() == [9]
    assert not half.exists()


def test_resume_restores_model_optimizer_and_rng(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    _train(model, opt, 3)
    torch.manual_seed(42)
    CheckpointManager(tmp_path, keep=3, rank=0, local_rank=0, world_size=1).save(
        3, model, opt, {"data": {"step": 3}, "scheduler": {"last_epoch": 3}}
    )
    expected_random = torch.rand(4)
    torch.manual_seed(7)
    _train(model, opt, 2)  # the uninterrupted run continues

    fresh, fresh_opt = _model_and_optimizer(1)  # other initial weights, empty optimizer state
    torch.manual_seed(999)
    resumed = CheckpointManager(tmp_path, keep=3, rank=0, local_rank=0, world_size=1).load_latest(fresh, fresh_opt)
    assert resumed is not None and resumed.step == 3 and resumed.trainer_state["data"] == {"step": 3}
    assert resumed.restored_rng and resumed.skipped == {}
    torch.testing.assert_close(torch.rand(4), expected_random)  # the RNG continues where it was saved
    torch.manual_seed(7)
    _train(fresh, fresh_opt, 2)  # the resumed run
    for a, b in zip(fresh.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # weights and Adam moments restored exactly


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("optimizer-param-group", "Weights only load failed"),
        ("rng-file", "Weights only load failed"),
        ("dcp-metadata", "DCP .metadata names pathlib.Path.touch, which DCP does not write there"),
    ],
)
def test_a_pickle_in_a_checkpoint_is_never_run_on_resume(tmp_path: Path, where: str, reason: str) -> None:
    """The checkpoint's non-tensor entries (the optimizer's param_groups, which torch 2.13's DCP load planner reads
    with ``torch.load(weights_only=False)``) and each rank's RNG file are read by torch's weights-only unpickler,
    DCP's ``.metadata`` (``pickle.load`` in torch's reader) by one that names only DCP's metadata classes: a
    pickle naming a call (here one creating a file) fails the load, with nothing run, and the resume falls back
    to the older checkpoint."""
    marker = tmp_path / "unpickled"
    model, opt = _model_and_optimizer(0)
    manager = _manager(tmp_path / "ckpt")
    _train(model, opt, 1)
    manager.save(1, model, opt, {"data": {"step": 1}})
    _train(model, opt, 1)
    if where == "optimizer-param-group":
        opt.param_groups[0]["eps"] = Touch(marker)
    manager.save(2, model, opt, {"data": {"step": 2}})
    if where == "rng-file":
        (rng,) = (tmp_path / "ckpt" / "step-2" / "rng").iterdir()
        torch.save({"python": Touch(marker)}, rng)
    if where == "dcp-metadata":
        metadata_file = tmp_path / "ckpt" / "step-2" / ".metadata"
        metadata = pickle.loads(metadata_file.read_bytes())
        metadata.planner_data = Touch(marker)
        metadata_file.write_bytes(pickle.dumps(metadata))

    fresh, fresh_opt = _model_and_optimizer(1)
    resumed = manager.load_latest(fresh, fresh_opt)
    assert resumed is not None and resumed.step == 1 and list(resumed.skipped) == [2]
    assert reason in resumed.skipped[2] and not marker.exists()


def test_no_checkpoint_means_fresh_start(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    assert (
        CheckpointManager(tmp_path / "empty", keep=1, rank=0, local_rank=0, world_size=1).load_latest(model, opt)
        is None
    )


# ---------------------------------------------------------------------------
# Verification and fallback (issue 11.1), on real DCP folders damaged by the test


def test_truncated_shard_of_the_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    """The issue's example: 6 steps, a checkpoint every 3, one shard of step-6 cut to 1000 bytes."""
    saved = _six_steps_every_three(tmp_path)
    shard = tmp_path / "step-6" / "__0_0.distcp"
    full_size = shard.stat().st_size
    assert full_size > 1000
    with open(shard, "r+b") as fh:
        fh.truncate(1000)
    assert (tmp_path / "step-6" / COMPLETE_MARKER).is_file()  # the marker arrived, the shard did not

    problems = verify_checkpoint(tmp_path / "step-6", 6).problems
    assert problems == [f"__0_0.distcp has 1000 of the {full_size} bytes .metadata needs (cut short)"]

    log: list[str] = []
    model, opt = _model_and_optimizer(1)
    resumed = _manager(tmp_path, log=log).load_latest(model, opt)
    assert resumed is not None and resumed.step == 3 and resumed.samples_consumed == 15
    assert resumed.skipped == {6: problems[0]}
    assert log == [f"skipping checkpoint step-6: {problems[0]}; falling back to step-3"]
    for got, want in zip(model.parameters(), saved[3], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert complete_steps(tmp_path) == [3, 6]  # nothing deleted by the fallback


def _cut(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


def _zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: (d / ".metadata").unlink(), "DCP .metadata is missing"),
        (lambda d: _cut(d / ".metadata", 100), "DCP .metadata (100 bytes) does not parse: "),
        (lambda d: (d / "__0_0.distcp").unlink(), "__0_0.distcp is missing (needs "),
        (lambda d: _zero(d / "__0_0.distcp"), "DCP load failed on rank(s) 0 ("),  # every byte there, content not
        (lambda d: _cut(d / TRAINER_STATE, 5), f"{TRAINER_STATE} is not readable JSON"),
        (lambda d: (d / TRAINER_STATE).write_text('{"step": 5}'), f"{TRAINER_STATE} says step 5, the folder is step-6"),
        (lambda d: _cut(d / "rng" / "rank-00000.pt", 10), "loading failed: RuntimeError: rng/rank-00000.pt: "),
        # the saving run had this rank: a missing RNG file is an incomplete copy, not a silent fresh RNG
        (
            lambda d: (d / "rng" / "rank-00000.pt").unlink(),
            "rng/rank-00000.pt is missing (the saving run had 1 process)",
        ),
    ],
    ids=[
        "metadata-missing",
        "metadata-cut",
        "shard-missing",
        "shard-zeroed",
        "state-cut",
        "state-other-step",
        "rng-cut",
        "rng-missing",
    ],
)
def test_every_kind_of_damage_falls_back_with_its_reason(six_steps, damage, expected: str) -> None:
    directory, saved = six_steps
    damage(directory / "step-6")
    log: list[str] = []
    model, opt = _model_and_optimizer(1)
    resumed = _manager(directory, log=log).load_latest(model, opt)
    assert resumed is not None and resumed.step == 3
    assert expected in resumed.skipped[6], resumed.skipped
    assert log[0].startswith("skipping checkpoint step-6: ") and log[0].endswith("; falling back to step-3")
    for got, want in zip(model.parameters(), saved[3], strict=True):  # a half-done load of step-6 is fully overwritten
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_nothing_loadable_names_each_folder_and_deletes_nothing(tmp_path: Path) -> None:
    _six_steps_every_three(tmp_path)
    _cut(tmp_path / "step-6" / "__0_0.distcp", 1000)
    (tmp_path / "step-3" / ".metadata").unlink()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    model, opt = _model_and_optimizer(1)
    manager = _manager(tmp_path, keep=1)
    with pytest.raises(CheckpointError) as err:
        manager.load_latest(model, opt)
    message = str(err.value)
    assert message.startswith(f"no loadable checkpoint in {tmp_path} (step-6: __0_0.distcp has 1000 of the ")
    assert "; step-3: DCP .metadata is missing" in message and "move them away to start again from step 0" in message
    assert not isinstance(err.value, ResumeRefused)
    assert manager.prune() == [] and manager.remove_incomplete() == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_pruning_never_leaves_the_run_without_a_loadable_checkpoint(tmp_path: Path) -> None:
    """step-3 good, step-6 and step-9 damaged (a newer attempt's uploads cut short): keep=2."""
    model, opt = _model_and_optimizer(0)
    manager = _manager(tmp_path, keep=3)
    for step in (3, 6, 9):
        _train(model, opt, 1)
        manager.save(step, model, opt, {"data": {"step": step}})
    for step in (6, 9):
        _cut(tmp_path / f"step-{step}" / "__0_0.distcp", 1000)

    log: list[str] = []
    manager = _manager(tmp_path, keep=2, log=log)
    resumed = manager.load_latest(model, opt)
    assert resumed is not None and resumed.step == 3 and sorted(resumed.skipped) == [6, 9]
    assert log[0].endswith("falling back to step-6") and log[1].endswith("falling back to step-3")

    # A stop at step 4 (say SIGTERM): counting markers, keep=2 would delete step-3 and step-4 and keep only damage.
    manager.save(4, model, opt, {"data": {"step": 4}})
    assert complete_steps(tmp_path) == [3, 4, 6, 9]
    manager.save(5, model, opt, {"data": {"step": 5}})
    assert complete_steps(tmp_path) == [4, 5, 6, 9]  # step-3 pruned only once two loadable newer ones exist
    manager.save(6, model, opt, {"data": {"step": 6}})  # replaces the damaged step-6
    assert verify_checkpoint(tmp_path / "step-6", 6).ok
    assert complete_steps(tmp_path) == [5, 6, 9]  # step-9 is newer than anything saved: never pruned
    # Restarted here: step-9 is still damaged, the run resumes from step-6.
    fresh, fresh_opt = _model_and_optimizer(1)
    assert _manager(tmp_path, keep=2).load_latest(fresh, fresh_opt).step == 6


# ---------------------------------------------------------------------------
# Run records (issue 11.2)


def _gpt_record(num_layers: int, **hp: object) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict]:
    torch.manual_seed(0)
    config = get_preset("gpt-tiny").with_overrides(num_layers=num_layers)
    model = build_model(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hps = Hyperparameters(model="gpt-tiny", num_layers=num_layers, precision="fp32", batch_size=8, **hp)
    record = run_record(
        model_config=asdict(config),
        backend="torch",
        world_size=2,
        samples_per_step=16,
        hyperparameters=hps.to_strings(),
        data={"sha256": "a" * 64, "shards": 1, "num_tokens": 1000, "tokenizer": "byte-level"},
    )
    return model, opt, record


def test_another_model_shape_is_refused_naming_both_values_and_nothing_changes(tmp_path: Path) -> None:
    """The issue's example: num_layers 4 -> 2 used to resume "successfully" from a partial load."""
    model4, opt4, record4 = _gpt_record(4)
    CheckpointManager(tmp_path, keep=1, rank=0, local_rank=0, world_size=1).save(
        7, model4, opt4, {"data": {"step": 7, "samples_consumed": 112}, "run": record4}
    )
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    model2, opt2, record2 = _gpt_record(2)
    initial = _weights(model2)
    manager = CheckpointManager(tmp_path, keep=1, rank=0, local_rank=0, world_size=1)
    with pytest.raises(ResumeRefused, match=r"model num_layers: 4 in the checkpoint, 2 in this run") as err:
        manager.load_latest(model2, opt2, run=record2)
    assert f"checkpoint {tmp_path / 'step-7'} belongs to another run" in str(err.value)
    # Without a run record, DCP's tensor metadata still refuses the smaller model.
    with pytest.raises(
        ResumeRefused, match=r"model tensors differ: \d+ tensors only in the checkpoint \(e\.g\. layers\.2\."
    ):
        manager.load_latest(model2, opt2)
    for got, want in zip(model2.parameters(), initial, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)  # nothing loaded
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing pruned or written

    # Another vocabulary: refused with both sizes.
    model_v = build_model(get_preset("gpt-tiny").with_overrides(num_layers=4, vocab_size=1024))
    record_v = {**record4, "model": {**record4["model"], "vocab_size": 1024}}
    with pytest.raises(ResumeRefused, match=r"model vocab_size: 512 in the checkpoint, 1024 in this run"):
        manager.load_latest(model_v, torch.optim.AdamW(model_v.parameters()), run=record_v)


def test_a_checkpoint_without_a_run_record_resumes_with_a_warning(tmp_path: Path) -> None:
    """Written by the previous version: model_config, world_size and hyperparameters at the top level."""
    model, opt, record = _gpt_record(2)
    legacy = {
        "data": {"step": 4, "samples_consumed": 64},
        "world_size": 2,
        "model_config": record["model"],
        "hyperparameters": record["hyperparameters"],
    }
    CheckpointManager(tmp_path, keep=1, rank=0, local_rank=0, world_size=1).save(4, model, opt, legacy)
    log: list[str] = []
    resumed = _manager(tmp_path, log=log).load_latest(model, opt, run=record)
    assert resumed is not None and resumed.step == 4 and resumed.samples_consumed == 64
    assert log == [
        "resuming step-4 with changes: the checkpoint has no run record (written before records existed): "
        "model shape, hyperparameters and world size are checked from its older fields, its training data "
        "cannot be checked"
    ]
    # ... and its older fields are checked: another layer count is refused.
    model3, opt3, record3 = _gpt_record(3)
    with pytest.raises(ResumeRefused, match="model num_layers: 2 in the checkpoint, 3 in this run"):
        _manager(tmp_path).load_latest(model3, opt3, run=record3)


# ``trainer_state.json["run"]["model"]`` of llama-tiny with 1 layer as the previous release wrote it (commit
# ad66d5e: LlamaShape's fields then, before head_dim, qkv_bias, qk_norm, the RoPE scaling and sliding_window)
LLAMA_RECORD_AD66D5E = {
    "name": "llama-tiny", "num_layers": 1, "hidden_size": 256, "num_heads": 4, "num_kv_heads": 2,
    "ffn_hidden_size": 704, "vocab_size": 512, "rope_base": 10000.0, "tied_embeddings": True, "norm_eps": 1e-05,
}  # fmt: skip


def _llama_record(model: dict) -> dict:
    return run_record(
        model_config=model,
        backend="torch",
        world_size=1,
        samples_per_step=2,
        hyperparameters={"model": "llama-tiny", "num_layers": "1"},
        data={"synthetic": True},
    )


def test_a_checkpoint_written_before_the_new_shape_fields_resumes_when_the_run_keeps_their_defaults(
    tmp_path: Path,
) -> None:
    """A field the older code did not have is the default it computed with: the same run resumes (its weights
    restored); a run setting such a field otherwise is refused naming the field and both values, loading
    nothing."""
    shape = get_preset("llama-tiny").with_overrides(num_layers=1)
    assert {k: v for k, v in asdict(shape).items() if k in LLAMA_RECORD_AD66D5E} == LLAMA_RECORD_AD66D5E
    torch.manual_seed(0)
    model = build_model(shape)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    old_run = {**_llama_record(asdict(shape)), "model": dict(LLAMA_RECORD_AD66D5E)}
    _manager(tmp_path).save(3, model, opt, {"data": {"step": 3, "samples_consumed": 6}, "run": old_run})
    saved = _weights(model)
    torch.manual_seed(1)
    fresh = build_model(shape)
    log: list[str] = []
    resumed = _manager(tmp_path, log=log).load_latest(
        fresh, torch.optim.AdamW(fresh.parameters()), run=_llama_record(asdict(shape))
    )
    assert resumed is not None and resumed.step == 3 and log == []
    for got, want in zip(fresh.parameters(), saved, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

    for field, value, implied in (("qk_norm", True, False), ("head_dim", 128, None), ("sliding_window", 64, None)):
        run = _llama_record({**asdict(shape), field: value})
        refused = compare_runs({"step": 3, "run": old_run}, run)
        assert refused.model_refused and refused.refusals == [
            f"model {field}: {implied} (absent: the default of the code that wrote it) in the checkpoint, "
            f"{value} in this run"
        ]
    with pytest.raises(ResumeRefused, match=r"model qkv_bias: False \(absent: .*\) in the checkpoint, True in"):
        _manager(tmp_path).load_latest(
            fresh, torch.optim.AdamW(fresh.parameters()), run=_llama_record({**asdict(shape), "qkv_bias": True})
        )
    # a field the record has and the run lacks is no default to imply: refused as absent in this run
    lacking = {k: v for k, v in asdict(shape).items() if k != "norm_eps"}
    assert compare_runs({"step": 3, "run": old_run}, _llama_record(lacking)).refusals == [
        "model norm_eps: 1e-05 in the checkpoint, absent in this run"
    ]


def _record(
    world_size: int = 2,
    batch_size: int = 8,
    accum: int = 1,
    *,
    data: str = "a",
    backend: str = "torch",
    vocab: int = 512,
    **hp: object,
) -> dict:
    config = get_preset("gpt-tiny").with_overrides(num_layers=2, vocab_size=vocab)
    hps = Hyperparameters(
        model="gpt-tiny", num_layers=2, batch_size=batch_size, gradient_accumulation_steps=accum, **hp
    )
    return run_record(
        model_config=asdict(config),
        backend=backend,
        world_size=world_size,
        samples_per_step=world_size * batch_size * accum,
        hyperparameters=hps.to_strings(),
        data={"sha256": data * 64, "shards": 3, "num_tokens": 10_000, "tokenizer": "byte-level"},
    )


@pytest.mark.parametrize(
    ("current", "allow", "refusal", "note"),
    [
        (_record(), False, None, None),
        (
            _record(world_size=1, batch_size=16),
            False,
            None,
            "layout 2 processes x batch_size 8 x gradient_accumulation_steps 1 -> 1 process x batch_size 16 x "
            "gradient_accumulation_steps 1 (same global batch of 16",
        ),
        (
            _record(world_size=4, batch_size=2, accum=2),
            False,
            None,
            "-> 4 processes x batch_size 2 x gradient_accumulation_steps 2",
        ),
        (
            _record(world_size=1),
            False,
            "global batch: 16 sequences per optimizer step in the checkpoint (2 processes x batch_size 8 x "
            "gradient_accumulation_steps 1), 8 in this run (1 process x batch_size 8 x gradient_accumulation_steps 1); "
            "warmup, the cosine schedule and max_steps count optimizer steps, so the run cannot continue as it was: "
            "keep 16 (with 1 process set gradient_accumulation_steps=2 or batch_size=16)",
            None,
        ),
        (_record(vocab=1024), False, "model vocab_size: 512 in the checkpoint, 1024 in this run", None),
        (_record(backend="te"), False, "model backend: 'torch' in the checkpoint, 'te' in this run", None),
        (
            _record(data="b"),
            False,
            "data stream: training data (3 shards, 10000 tokens, byte-level, fingerprint aaaaaaaaaaaa) "
            "-> (3 shards, 10000 tokens, byte-level, fingerprint bbbbbbbbbbbb)",
            None,
        ),
        (_record(data="b"), True, None, "data stream changed (allow_data_change=true): training data"),
        (_record(seq_length=4096), False, "data stream: seq_length 2048 -> 4096;", None),
        (_record(seed=7), True, None, "data stream changed (allow_data_change=true): seed 1234 -> 7;"),
        (
            _record(precision="bf16"),
            False,
            None,
            "hyperparameters changed: precision mxfp8 -> bf16 (fp32 master weights and AdamW state carry over)",
        ),
        (
            _record(precision="fp8", quantized_model_init=True),
            False,
            "quantized_model_init: false in the checkpoint, true in this run",
            "precision mxfp8 -> fp8",
        ),
        (  # the saved record is _record() (mxfp8, quantized_model_init=false): see the test below for both true
            _record(precision="fp8"),
            False,
            None,
            "hyperparameters changed: precision mxfp8 -> fp8 (fp32 master weights and AdamW state carry over)",
        ),
        (
            _record(max_steps=5000, learning_rate=1e-4),
            False,
            None,
            "hyperparameters changed: learning_rate 0.0003 -> 0.0001, max_steps 1000 -> 5000",
        ),
        (  # memory modes change what is kept or when gradients are reduced, not the run's math: allowed
            _record(activation_checkpointing="selective:2", gradient_sync="last_micro_batch"),
            False,
            None,
            "hyperparameters changed: activation_checkpointing off -> selective:2, "
            "gradient_sync every_micro_batch -> last_micro_batch",
        ),
    ],
    ids=[
        "same",
        "2-to-1-same-global-batch",
        "2-to-4-same-global-batch",
        "global-batch",
        "vocab",
        "backend",
        "data",
        "data-allowed",
        "seq-length",
        "seed-allowed",
        "precision",
        "quantized-init",
        "fp8-without-quantized-init",
        "schedule",
        "memory-modes",
    ],
)
def test_resume_policy_per_recorded_item(current: dict, allow: bool, refusal: str | None, note: str | None) -> None:
    saved = {"step": 10, "run": _record()}
    result = compare_runs(saved, current, allow_data_change=allow)
    if refusal is None:
        assert result.refusals == []
    else:
        assert len(result.refusals) == 1 and result.refusals[0].startswith(refusal), result.refusals
    if note is None:
        assert result.notes == []
    else:
        assert len(result.notes) == 1 and note in result.notes[0], result.notes


@pytest.mark.parametrize(("before", "after"), [("fp8", "mxfp8"), ("mxfp8", "fp8")])
def test_a_precision_change_under_quantized_model_init_is_refused(before: str, after: str) -> None:
    """With quantized_model_init=true in both, the block weights are Float8Tensor or MXFP8Tensor by precision:
    the checkpoint's quantized weights are another layout (the TE stand-in's FSDP2 all-gather fails on the
    first step after such a load), so the resume is refused naming both precisions and the way to resume."""
    saved = {"step": 10, "run": _record(precision=before, quantized_model_init=True)}
    result = compare_runs(saved, _record(precision=after, quantized_model_init=True))
    assert result.refusals == [
        f"precision: {before} in the checkpoint, {after} in this run with quantized_model_init=true (the block "
        "weights are stored in the precision's own quantized format, another state-dict layout); resume with "
        f"precision={before}"
    ]
    same = compare_runs(saved, _record(precision=before, quantized_model_init=True, learning_rate=1e-4))
    assert same.refusals == []


def test_quantized_fp8_weights_train_and_resume_with_current_scaling_only() -> None:
    """fp8 with quantized_model_init: current scaling only. fp8_scaling=delayed is refused by the one rule
    (platform_spec.hyperparameters.quantized_model_init_refusal, applied at parse by the trainer, the entry point,
    the submitter), naming the fix and TransformerEngine 2.19's reasons, so a resume of a quantized-weights
    checkpoint that switches to delayed scaling is refused before anything loads; mxfp8 (one recipe) ignores
    fp8_scaling, as in training. The one other change, a checkpoint of delayed-scaling quantized weights (written
    before the rule) resumed with current scaling, loads the same layout (per-tensor fp8 weights with their
    scale_inv; the next optimizer step quantizes the fp32 masters with current scaling) and is allowed, noted."""
    with pytest.raises(hpmod.HyperparameterError) as refused:
        hpmod.parse({"precision": "fp8", "fp8_scaling": "delayed", "quantized_model_init": "true"})
    assert refused.value.field == "quantized_model_init"
    assert refused.value.expected == hpmod.DELAYED_QUANTIZED_INIT_REFUSAL
    assert "use fp8_scaling=current" in refused.value.expected and "#1860" in refused.value.expected
    assert hpmod.parse({"precision": "fp8", "quantized_model_init": "true"}).fp8_scaling == "current"
    assert hpmod.parse({"precision": "mxfp8", "fp8_scaling": "delayed", "quantized_model_init": "true"})
    saved = {"step": 10, "run": _record(precision="fp8", fp8_scaling="delayed", quantized_model_init=True)}
    result = compare_runs(saved, _record(precision="fp8", fp8_scaling="current", quantized_model_init=True))
    assert result.refusals == [] and len(result.notes) == 1 and "fp8_scaling" in result.notes[0]


def test_another_model_family_is_refused_as_such_and_another_preset_is_named_first() -> None:
    """A family change is one refusal that names both families and presets (not a list of the two families'
    differently named fields); within a family, the preset change comes before the fields it changes."""

    def record(model: str) -> dict:
        return run_record(
            model_config=asdict(get_preset(model)),
            backend="torch",
            world_size=1,
            samples_per_step=2,
            hyperparameters={},
            data={"synthetic": True},
        )

    across = compare_runs({"step": 6, "run": record("gpt-tiny")}, record("llama-tiny"))
    assert across.model_refused and across.refusals == [
        "model family: gpt (preset gpt-tiny) in the checkpoint, llama (preset llama-tiny) in this run; "
        "a checkpoint resumes a model of its own family"
    ]
    custom = {**asdict(get_preset("llama-tiny")), "name": "llama"}
    to_custom = compare_runs({"step": 6, "run": record("gpt-tiny")}, {**record("llama-tiny"), "model": custom})
    assert to_custom.refusals[0].startswith("model family: gpt (preset gpt-tiny) in the checkpoint, llama (a custom")
    larger = compare_runs({"step": 6, "run": record("gpt-tiny")}, record("gpt-1b"))
    assert larger.refusals[:2] == [
        "model: gpt-tiny in the checkpoint, gpt-1b in this run",
        "model num_layers: 4 in the checkpoint, 24 in this run",
    ]


# ---------------------------------------------------------------------------
# Names: only the folders this trainer writes are checkpoints (review of issue 11, findings 2 and 4)


def _snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry under ``directory`` without following links: file bytes, link targets."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(directory))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_bytes()
    return out


def test_checkpoint_names_are_the_canonical_ones_only() -> None:
    from platform_spec.checkpoint_layout import checkpoint_step

    assert checkpoint_step("step-0") == 0 and checkpoint_step("step-120") == 120
    for name in (
        "step-006",
        "step-00",
        "step-\u0663",
        "step-\uff16",
        "step-+6",
        "step- 6",
        "step-6 ",
        "step-6\n",
        "step--1",
        "step-abc",
        "step-",
        "Step-6",
        "step-6.moved-aside-20261130T000000Z",
    ):
        assert checkpoint_step(name) is None, name


def test_zero_padded_and_non_ascii_step_folders_are_never_loaded_pruned_or_deleted(six_steps) -> None:
    """Regression: ``step-006`` was taken for step 6 (and reported with false reasons), ``step-\u0663``
    (Arabic-Indic 3) for step 3; both could be pruned or blocked training."""
    directory, saved = six_steps
    shutil.copytree(directory / "step-6", directory / "step-009")  # a whole checkpoint, under a name we never write
    shutil.copytree(directory / "step-3", directory / "step-\u0669")  # Arabic-Indic 9
    (directory / "step-6" / ".metadata").unlink()  # the real step-6 is damaged: step-009 must not stand in for it
    theirs = {name: _snapshot(directory / name) for name in ("step-009", "step-\u0669")}

    assert sorted(step_dirs(directory)) == [3, 6] and complete_steps(directory) == [3, 6]
    log: list[str] = []
    manager = _manager(directory, keep=1, log=log)
    model, opt = _model_and_optimizer(1)
    resumed = manager.load_latest(model, opt)
    assert resumed is not None and resumed.step == 3 and resumed.path == directory / "step-3"
    assert list(resumed.skipped) == [6] and "DCP .metadata is missing" in resumed.skipped[6]
    assert [line for line in log if line.startswith("ignoring")] == [
        f"ignoring step-009 in {directory}: not a checkpoint name (this trainer writes step-<step>, ASCII digits, "
        "no leading zeros); never loaded, pruned or deleted",
        f"ignoring step-\u0669 in {directory}: not a checkpoint name (this trainer writes step-<step>, ASCII digits, "
        "no leading zeros); never loaded, pruned or deleted",
    ]
    for got, want in zip(model.parameters(), saved[3], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # saves of 9 and 10 with keep=1 prune every older checkpoint of ours, and nothing else
    manager.save(9, model, opt, {"data": {"step": 9}})
    manager.save(10, model, opt, {"data": {"step": 10}})
    assert sorted(p.name for p in directory.iterdir()) == ["step-009", "step-10", "step-\u0669"]
    assert manager.remove_incomplete() == []
    assert {name: _snapshot(directory / name) for name in theirs} == theirs


def test_a_link_or_file_named_like_a_step_is_moved_aside_never_followed_or_deleted(six_steps, tmp_path: Path) -> None:
    """Regression: a symlinked ``step-6`` crashed every save of step 6 (rmtree on a link), a file
    ``step-9`` every save of step 9 (NotADirectoryError), and pruning a link was a silent no-op reported
    as removed."""
    directory, _saved = six_steps
    elsewhere = tmp_path / "elsewhere-6"
    (directory / "step-6").rename(elsewhere)  # a whole checkpoint, kept elsewhere by someone
    (directory / "step-6").symlink_to(elsewhere, target_is_directory=True)
    (directory / "step-9").write_text("notes")
    (directory / "step-12").symlink_to(elsewhere, target_is_directory=True)
    kept = _snapshot(elsewhere)

    log: list[str] = []
    manager = _manager(directory, keep=1, log=log)
    model, opt = _model_and_optimizer(1)
    resumed = manager.load_latest(model, opt)
    assert resumed is not None and resumed.step == 3 and resumed.skipped == {}  # the link was not followed
    assert (
        f"ignoring step-6 in {directory}: a symbolic link (to {elsewhere}), not a checkpoint folder this "
        "trainer wrote; never loaded, pruned or deleted (a save of its step moves it aside)" in log
    )
    assert (
        f"ignoring step-9 in {directory}: a file, not a checkpoint folder; never loaded, pruned or deleted "
        "(a save of its step moves it aside)" in log
    )

    log.clear()
    manager.save(6, model, opt, {"data": {"step": 6}})  # the link is in the way: moved aside, the save goes on
    assert verify_checkpoint(directory / "step-6", 6).ok and not (directory / "step-6").is_symlink()
    moved = [p for p in directory.iterdir() if p.name.startswith("step-6.moved-aside-")]
    assert len(moved) == 1 and os.readlink(moved[0]) == str(elsewhere)
    assert log[0] == (
        f"step-6 was a symbolic link to {elsewhere}, not a checkpoint folder this trainer wrote: moved "
        f"aside to {moved[0].name} (what it points to was not touched) to save step 6 there"
    )
    manager.save(9, model, opt, {"data": {"step": 9}})
    assert verify_checkpoint(directory / "step-9", 9).ok
    [file] = [p for p in directory.iterdir() if p.name.startswith("step-9.moved-aside-")]
    assert file.read_text() == "notes"
    # keep=1: step-3 and step-6 pruned (really removed, so reported); the links, the file and what
    # the links point to are untouched
    assert complete_steps(directory) == [9]
    assert _snapshot(elsewhere) == kept
    assert (directory / "step-12").is_symlink() and os.readlink(directory / "step-12") == str(elsewhere)
    assert manager.prune(9) == []


def test_pruning_reports_only_what_it_really_removed(six_steps, monkeypatch: pytest.MonkeyPatch) -> None:
    directory, _ = six_steps
    import training.checkpoint.manager as checkpoint

    log: list[str] = []
    manager = _manager(directory, keep=1, log=log)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", lambda path, **kwargs: None)  # a removal that silently fails
    assert manager.prune(6) == []
    assert complete_steps(directory) == [3, 6]
    assert log == ["pruning step-3: could not be removed (still there)"]
    monkeypatch.undo()
    assert manager.prune(6) == [3] and complete_steps(directory) == [6]


# ---------------------------------------------------------------------------
# Every field of trainer_state.json is verified (review of issue 11, finding 5)


def _edit_state(folder: Path, **changes: object) -> None:
    path = folder / TRAINER_STATE
    state = json.loads(path.read_text())
    state.update(changes)
    path.write_text(json.dumps(state))


_RUN = {
    "version": 1,
    "model": {"num_layers": 2},
    "backend": "torch",
    "world_size": 1,
    "samples_per_step": 5,
    "hyperparameters": {"batch_size": "5"},
    "data": None,
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"scheduler": "junk"},
            "trainer_state.json field 'scheduler': got 'junk', expected an object (the LR scheduler's state_dict)",
        ),
        ({"scheduler": {"last_epoch": -1}}, "field 'scheduler.last_epoch': got -1, expected an integer >= 0"),
        (
            {"scheduler": {"last_epoch": 6, "base_lrs": ["x"]}},
            "field 'scheduler.base_lrs': got ['x'], expected a list of finite numbers",
        ),
        (
            {"data": {"step": 6, "samples_consumed": "x"}},
            "field 'data.samples_consumed': got 'x', expected an integer >= 0 (samples the run read before this step)",
        ),
        (
            {"data": {"step": 6, "samples_consumed": -30}},
            "field 'data.samples_consumed': got -30, expected an integer >= 0",
        ),
        (
            {"data": {"step": 6, "samples_consumed": True}},
            "field 'data.samples_consumed': got True, expected an integer >= 0",
        ),
        ({"data": {"step": 5, "samples_consumed": 30}}, "field 'data.step': got 5, expected 6 (the checkpoint's step)"),
        ({"data": [6, 30]}, "field 'data': got [6, 30], expected an object (the data position)"),
        (
            {"loss_scaler": {"scale": 0, "good_steps": 1}},
            "field 'loss_scaler.scale': got 0, expected a finite number > 0",
        ),
        ({"loss_scaler": "x"}, "field 'loss_scaler': got 'x', expected null or an object"),
        ({"run": "x"}, "field 'run': got 'x', expected an object (the run record)"),
        (
            {"run": {**_RUN, "hyperparameters": ["batch_size"]}},
            "field 'run.hyperparameters': got ['batch_size'], expected an object of strings",
        ),
        ({"run": {**_RUN, "world_size": 0}}, "field 'run.world_size': got 0, expected an integer >= 1"),
        (
            {"run": {**_RUN, "model": {"num_layers": "2"}}},
            "field 'run.model': got {'num_layers': '2'}, expected integers, finite numbers, booleans or nulls for",
        ),
        # a bad position used to be replaced silently by step x samples_per_step
        (
            {"run": {**_RUN, "samples_per_step": 8}},
            "field 'data.samples_consumed': got 30, expected 48 (step 6 x 8 samples per step; the global batch never changes",
        ),
        (
            {"world_size": "2", "hyperparameters": {"batch_size": "5"}},
            "field 'world_size': got '2', expected an integer >= 1",
        ),
    ],
    ids=[
        "scheduler-junk",
        "scheduler-epoch",
        "scheduler-lrs",
        "samples-str",
        "samples-negative",
        "samples-bool",
        "data-step",
        "data-list",
        "scaler-scale",
        "scaler-junk",
        "run-junk",
        "run-hp",
        "run-world",
        "run-model",
        "samples-disagree",
        "legacy-world",
    ],
)
def test_every_field_of_the_trainer_state_is_verified_and_a_bad_one_falls_back(
    six_steps, changes: dict, expected: str
) -> None:
    """Regression: only ``step`` was checked; ``"scheduler": "junk"`` or a string ``samples_consumed``
    made every resume fail with an AttributeError and no fallback."""
    directory, saved = six_steps
    _edit_state(directory / "step-6", **changes)
    problems = verify_checkpoint(directory / "step-6", 6).problems
    assert len(problems) == 1 and expected in problems[0], problems
    model, opt = _model_and_optimizer(1)
    resumed = _manager(directory).load_latest(model, opt)
    assert resumed is not None and resumed.step == 3 and expected in resumed.skipped[6]
    for got, want in zip(model.parameters(), saved[3], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_state_the_caller_cannot_restore_is_a_failure_to_load(six_steps) -> None:
    directory, saved = six_steps
    seen: list[int] = []

    def restore(state) -> None:  # what the trainer does: scheduler, loss scaler, data position
        seen.append(state["step"])
        if state["step"] == 6:
            raise ValueError("trainer_state.json 'scheduler.last_epoch' is 5; ...")

    log: list[str] = []
    model, opt = _model_and_optimizer(1)
    resumed = _manager(directory, log=log).load_latest(model, opt, restore=restore)
    assert resumed is not None and resumed.step == 3 and seen == [6, 3]
    assert resumed.skipped == {6: "loading failed: ValueError: trainer_state.json 'scheduler.last_epoch' is 5; ..."}
    assert log == [
        "skipping checkpoint step-6: loading failed: ValueError: trainer_state.json 'scheduler.last_epoch' "
        "is 5; ...; falling back to step-3"
    ]
    for got, want in zip(model.parameters(), saved[3], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_trainer_restores_scheduler_and_data_position_or_refuses_the_state(tmp_path: Path) -> None:
    from platform_spec.hyperparameters import parse
    from training.data import SyntheticSampler
    from training.environment import SageMakerPaths
    from training.train import Trainer, learning_rate

    hp = parse({"precision": "fp32", "max_steps": 20, "warmup_steps": 2})
    trainer = Trainer(hp, SageMakerPaths(tmp_path))
    _model, trainer.optimizer = _model_and_optimizer(0)
    trainer.optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})  # two groups, as the trainer
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
        trainer.optimizer, lambda e: learning_rate(e + 1, hp) / hp.learning_rate
    )
    trainer.scaler = None
    trainer.sampler = SyntheticSampler(
        vocab_size=16, seq_length=4, batch_size=2, grad_accum=1, rank=0, world_size=2, seed=1
    )
    for _ in range(6):
        trainer.optimizer.step()  # no gradients: nothing changes; the scheduler follows an optimizer step
        trainer.scheduler.step()
    state = {"step": 6, "scheduler": trainer.scheduler.state_dict(), "data": {"step": 6, "samples_consumed": 24}}
    expected_lr = trainer.scheduler.get_last_lr()

    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
        trainer.optimizer, lambda e: learning_rate(e + 1, hp) / hp.learning_rate
    )
    trainer.restore_trainer_state(state)
    assert trainer.scheduler.last_epoch == 6 and trainer.scheduler.get_last_lr() == expected_lr
    assert trainer.sampler.samples_consumed(6) == 24
    trainer.restore_trainer_state({**state, "data": {"step": 6}})  # older checkpoints: the position is derived
    assert trainer.sampler.samples_consumed(6) == 6 * 4

    with pytest.raises(ValueError, match=r"'scheduler.last_epoch' is 5; .* must be the checkpoint's step 6"):
        trainer.restore_trainer_state({**state, "scheduler": {**state["scheduler"], "last_epoch": 5}})
    with pytest.raises(ValueError, match="has no LR scheduler state"):
        trainer.restore_trainer_state({"step": 6})
    with pytest.raises(ValueError, match=r"'scheduler\.base_lrs' has 1 entries; this optimizer has 2 parameter groups"):
        trainer.restore_trainer_state({**state, "scheduler": {**state["scheduler"], "base_lrs": [1e-3]}})
    with pytest.raises(KeyError):  # a state_dict without LambdaLR's own fields: a failure to load, not a crash later
        trainer.restore_trainer_state({**state, "scheduler": {"last_epoch": 6, "base_lrs": [1.0, 1.0]}})


# ---------------------------------------------------------------------------
# What a restart resumes (review of issue 11, finding 1)


def test_the_restart_point_is_the_newest_checkpoint_that_verifies(six_steps, tmp_path: Path) -> None:
    from training.checkpoint.verify import RestartPoint, restart_point

    directory, _ = six_steps
    assert restart_point(directory) == RestartPoint(6)
    assert restart_point(directory).describe() == "a restart resumes from step-6"
    _cut(directory / "step-6" / "__0_0.distcp", 1000)
    point = restart_point(directory)
    assert point.step == 3 and list(point.skipped) == [6]
    assert point.describe("the same command").startswith("the same command resumes from step-3 (")
    assert point.describe().startswith(
        "a restart resumes from step-3 (newer ones do not verify and are skipped: step-6: __0_0.distcp has 1000 of the "
    )
    (directory / "step-3" / ".metadata").unlink()
    nothing = restart_point(directory)
    assert nothing.step is None and sorted(nothing.skipped) == [3, 6]
    assert nothing.describe().startswith("no checkpoint verifies (step-6: __0_0.distcp has 1000")
    assert nothing.describe().endswith("a restart fails until whole copies are restored or the damaged ones moved away")
    assert restart_point(tmp_path / "none").describe() == "no complete checkpoint yet: a restart begins at step 0"
