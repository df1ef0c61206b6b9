"""Settings of the whole test session.

One intra-op thread per process, here and in every run a test starts (the trainer's entry point keeps a
job's ``OMP_NUM_THREADS``, the emulator's jobs and the sweeps inherit it), unless the environment sets
another: ``make test`` runs three xdist workers on two cores, where a second thread per process only waits
for a core. A 1-process gpt-tiny run of 20 steps took 9-10 s of CPU and 12 s with one thread, 27-28 s of CPU and
31 s with two, on this 2-core machine shared with other work.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def process_group(tmp_path_factory: pytest.TempPathFactory):
    """A one-process gloo group (FSDP2, DCP and DeviceMesh need one), torn down after the module."""
    import torch.distributed as dist

    if dist.is_initialized():  # pragma: no cover - another module left one behind
        pytest.skip("a default process group already exists in this process")
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()
