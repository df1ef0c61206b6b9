"""The planner's checkpoint size (``planner.checkpoint``) against a checkpoint the trainer really saved: the
2-process reference run's ``step-20`` (``conftest.reference_run``: gpt-tiny with 2 blocks, fp32, 2 CPU ranks).

Tolerance: the planner counts the state (fp32 parameters and AdamW's two moments, ``12N``), one RNG file per rank
and the trainer state; it leaves out DCP's ``torch.save`` framing of every tensor shard (~1.5 KB each), AdamW's
4-byte ``step`` scalars and ``.metadata``, so the folder may hold up to 3% more than predicted at this tiny size
(the left-out part is a few KB per tensor and rank: ~0.01% of Llama 3 8B's) and never less.
"""

from __future__ import annotations

import math

import pytest
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from planner.checkpoint import checkpoint_size_bytes, estimate_checkpoint
from planner.inputs import PlanInput, resolve
from planner.memory import state_bytes

from .conftest import REFERENCE_HP

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainer-runs")]

FRAMING_TOLERANCE = 0.03
"""What a saved folder may hold beyond the prediction at gpt-tiny's size (module docstring)."""


def _reference_plan():
    """The reference run as a plan: its model, precision and batch on 2 one-GPU hosts (2 ranks, one shard each)."""
    hp = {k: REFERENCE_HP[k] for k in ("model", "num_layers", "precision", "batch_size", "seq_length")}
    return resolve(PlanInput(**hp, checkpoint_interval=5, instance_type="ml.p5.4xlarge", instance_count=2))


def test_the_predicted_size_is_the_saved_checkpoints(reference_run) -> None:
    base, _ = reference_run
    folder = base / "checkpoints" / f"step-{REFERENCE_HP['max_steps']}"
    r = _reference_plan()
    params, optimizer = state_bytes(r)
    assert params + optimizer == 12 * r.model.num_params

    # the tensors DCP recorded: exactly the predicted state, plus AdamW's 4-byte step scalar per parameter tensor
    metadata = FileSystemReader(str(folder)).read_metadata()
    tensors = {k: v for k, v in metadata.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
    steps = [k for k in tensors if k.startswith("optimizer.state.") and k.endswith(".step")]
    saved = sum(math.prod(v.size) * v.properties.dtype.itemsize for v in tensors.values())
    assert steps and saved == params + optimizer + 4 * len(steps)

    # the folder on disk: the prediction, plus at most the framing the planner leaves out
    on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    predicted = checkpoint_size_bytes(r)
    assert predicted <= on_disk <= predicted * (1 + FRAMING_TOLERANCE), (on_disk, predicted)

    # each rank's shard file: its share of the state (what one host writes with one GPU per host)
    estimate = estimate_checkpoint(r, step_s=0.1)
    assert estimate is not None
    shards = sorted(folder.glob("*.distcp"))
    assert len(shards) == r.world_size
    for shard in shards:
        assert estimate.per_gpu_bytes <= shard.stat().st_size <= estimate.per_gpu_bytes * (1 + FRAMING_TOLERANCE)
    rng_files = list((folder / "rng").iterdir())
    assert len(rng_files) == r.world_size
