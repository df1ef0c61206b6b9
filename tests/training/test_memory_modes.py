"""The trainer implements every memory mode the planner offers (platform_spec.training_modes): activation
checkpointing ``off`` / ``full`` / ``selective:N`` wraps exactly the blocks the mode names and changes no
number, and both ``gradient_sync`` modes give the same step as the unsharded model."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

from model_families.gpt import ModelConfig
from platform_spec.errors import FieldError
from platform_spec.training_modes import GRADIENT_SYNC_MODES
from training.model import build_model, canonical_name
from training.parallelize import apply_activation_checkpointing
from training.train import accumulate_gradients

CONFIG = ModelConfig("ac", num_layers=6, hidden_size=64, num_attention_heads=4, ffn_hidden_size=192, vocab_size=97)


def _wrapped(model) -> list[int]:
    return [i for i, block in enumerate(model.layers) if isinstance(block, CheckpointWrapper)]


def _loss_and_grads(model, tokens):
    model.zero_grad(set_to_none=True)
    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    return loss.detach(), {canonical_name(n): p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("mode", "blocks"),
    [
        ("off", []),
        ("full", [0, 1, 2, 3, 4, 5]),
        ("selective:2", [1, 3, 5]),
        ("selective:3", [2, 5]),
        ("selective:6", [5]),
    ],
)
def test_each_mode_wraps_its_blocks_and_changes_no_number(mode: str, blocks: list[int]) -> None:
    """Every Nth block counted from 1 (torchtitan's selective_ac_option), the loss and every gradient equal
    to the model without checkpointing, bit for bit (the CPU recompute runs the same kernels)."""
    torch.manual_seed(0)
    plain = build_model(CONFIG)
    plain.init_weights(7)
    checkpointed = copy.deepcopy(plain)
    assert apply_activation_checkpointing(checkpointed, mode) == tuple(blocks)
    assert _wrapped(checkpointed) == blocks
    tokens = torch.randint(0, CONFIG.vocab_size, (2, 33), generator=torch.Generator().manual_seed(3))
    loss, grads = _loss_and_grads(plain, tokens)
    loss_ck, grads_ck = _loss_and_grads(checkpointed, tokens)
    assert torch.equal(loss, loss_ck)
    assert grads.keys() == grads_ck.keys()
    for name, grad in grads.items():
        assert torch.equal(grad, grads_ck[name]), name


@pytest.mark.parametrize("mode", ["selective:7", "selective", "op", "selective:0"])
def test_a_mode_that_recomputes_no_block_or_is_no_mode_is_refused_before_wrapping(mode: str) -> None:
    model = build_model(CONFIG)
    with pytest.raises(FieldError) as refused:
        apply_activation_checkpointing(model, mode)
    assert refused.value.field == "activation_checkpointing"
    assert _wrapped(model) == []


class _NoFSDP(torch.nn.Module):
    """A plain module standing in for an FSDP2 one: records what ``set_requires_gradient_sync`` was told."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.told: list[bool] = []

    def set_requires_gradient_sync(self, value: bool) -> None:
        self.told.append(value)


@pytest.mark.parametrize(
    ("mode", "told"),
    [("every_micro_batch", [True, True, True, True]), ("last_micro_batch", [False, False, False, True])],
)
def test_the_loop_tells_fsdp_when_to_reduce_scatter(mode: str, told: list[bool]) -> None:
    module = _NoFSDP()
    losses = [1.0, 2.0, 3.0, 6.0]
    mean = accumulate_gradients(
        module, lambda i: (module.weight * losses[i]).sum() / 3, micro_batches=4, gradient_sync=mode
    )
    assert module.told == told
    assert mean.item() == pytest.approx(sum(losses) / 4)
    assert torch.allclose(module.weight.grad, torch.full((3,), sum(losses) / 4 / 3))


def test_an_unknown_gradient_sync_is_refused_before_any_forward() -> None:
    module = _NoFSDP()
    calls: list[int] = []
    with pytest.raises(FieldError) as refused:
        accumulate_gradients(
            module, lambda i: calls.append(i) or module.weight.sum(), micro_batches=2, gradient_sync="x"
        )
    assert refused.value.field == "gradient_sync" and calls == [] and module.told == []


@pytest.mark.xdist_group("trainer-workers")
def test_both_gradient_sync_modes_give_the_unsharded_step_on_two_processes(two_process_results: dict) -> None:
    """2 gloo processes, FSDP2, selective:2 checkpointing, 3 micro-batches: every_micro_batch holds sharded
    gradients between micro-batches, last_micro_batch none (FSDP2 keeps them unsharded); both give the
    gradients and the AdamW step of the unsharded model on all the micro-batches, to float tolerance."""
    result = two_process_results["gradient_sync"]
    reference = result["reference"]
    every, last = result["every_micro_batch"], result["last_micro_batch"]
    assert every["sharded grads after micro-batch 1"] == every["parameters"] > 0
    assert last["sharded grads after micro-batch 1"] == 0
    for mode in GRADIENT_SYNC_MODES:
        run = result[mode]
        assert run["grads"].keys() == reference["grads"].keys(), mode
        for name, grad in reference["grads"].items():
            torch.testing.assert_close(run["grads"][name], grad, rtol=1e-5, atol=1e-7, msg=f"{mode} {name}")
        # AdamW's first step moves each weight by ~lr * g / (|g| + eps): where a gradient is ~eps (1e-8) a
        # rounding-level difference moves it by a fraction of lr (1e-3); a wrong accumulation moves most by lr
        for name, weight in reference["weights"].items():
            torch.testing.assert_close(run["weights"][name], weight, rtol=1e-5, atol=1e-5, msg=f"{mode} {name}")
