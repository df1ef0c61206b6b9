"""Settings of the whole test session.

One intra-op thread per process, here and in every run a test starts (the trainer's entry point keeps a
job's ``OMP_NUM_THREADS``, the emulator's jobs and the sweeps inherit it), unless the environment sets
another: ``make test`` runs three xdist workers on two cores, where a second thread per process only waits
for a core. A 1-process gpt-tiny run of 20 steps took 9-10 s of CPU and 12 s with one thread, 27-28 s of CPU and
31 s with two, on this 2-core machine shared with other work.
"""

from __future__ import annotations

import os


def pytest_configure() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
