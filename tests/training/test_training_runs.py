"""End-to-end runs through the container entry point: torchrun, 2 CPU processes, gloo, FSDP2.

All runs use gpt-tiny on CPython's documentation topics (byte-level) with the
hyperparameters of ``conftest.REFERENCE_HP``. CPU math with a fixed thread
count is deterministic, so runs that should be the same are compared exactly;
runs that split the same global batch differently (1 vs 2 processes, FSDP vs
HSDP) differ only by the order of floating-point sums and get a tolerance.
"""

from __future__ import annotations

import re
import socket
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from platform_spec.checkpoint_layout import dcp_shard_file, missing_files, rng_file
from platform_spec.metric_lines import FIELDS, METRIC_DEFINITIONS, PREFLIGHT_FIELDS, parse_line
from training.checkpoint.verify import complete_steps
from training.data import DistributedSampler, TokenDataset
from training.local import (
    LocalRun,
    follow,
    prepare_base_dir,
    read_failure,
    read_metrics,
    run_local,
    start_local,
)
from training.model import load_pretrained
from training.parallelize import SHARD_DIM

from .conftest import REFERENCE_HP

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainer-runs")]


def _by_step(records: list[dict]) -> dict[int, dict]:
    return {int(r["step"]): r for r in records}


def test_loss_falls_clearly_on_real_text(reference_run) -> None:
    base, run = reference_run
    records = read_metrics(base)
    assert [r["step"] for r in records] == list(range(1, 21))
    losses = [r["loss"] for r in records]
    # starts at the uniform-guess loss ln(512) = 6.24 nats/token, ends near the byte-level
    # statistics of English prose and Python code (~3.2 nats/token after 20 short steps)
    assert losses[0] > 5.8
    assert statistics.mean(losses[-5:]) < losses[0] - 2.5
    assert all(np.isfinite(losses))
    assert "training finished at step 20" in run.output


def test_metric_definitions_read_the_printed_lines(reference_run) -> None:
    """The SageMaker MetricDefinitions regexes capture every value of every printed line (one source); the
    first carries the pre-flight's bus bandwidths, measured over the 2 gloo processes."""
    _, run = reference_run
    lines = [line for line in run.lines if line.startswith("[metrics]")]
    assert len(lines) == 20
    training = {field for field, _, _ in FIELDS} - {"validation_loss", *PREFLIGHT_FIELDS}  # eval_interval 0: off
    for n, line in enumerate(lines):
        values = parse_line(line)
        assert set(values) == (training | set(PREFLIGHT_FIELDS) if n == 0 else training)
        if n == 0:
            assert all(values[field] > 0 for field in PREFLIGHT_FIELDS), line
        for field, metric, _ in (f for f in FIELDS if f[0] in values):
            regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == metric)
            match = re.search(regex, line)
            assert match, (metric, line)
            captured = float(match.group(1))
            assert captured == values[field] or (np.isnan(captured) and np.isnan(values[field])), (metric, line)


def test_keep_last_k_checkpoints_and_loadable_final_weights(reference_run, pydocs_shards: Path) -> None:
    base, run = reference_run
    # saved at 5, 10, 15 (asynchronously) and 20 (end of training, synchronously); keep_checkpoints=2
    assert complete_steps(base / "checkpoints") == [15, 20]
    for step in (5, 10, 15):
        assert f"step-{step} (interval, asynchronous: training blocked " in run.output
    assert "step-20 (end of training, synchronous: training blocked " in run.output
    assert "pre-flight: bus bandwidth over 2 processes: all-gather " in run.output
    assert read_failure(base) is None
    model = load_pretrained(base / "model")  # single-device torch-native model, strict load
    assert model.num_parameters() == model.config.num_params
    sampler = DistributedSampler(
        TokenDataset(pydocs_shards), seq_length=64, batch_size=16, grad_accum=1, rank=0, world_size=1, seed=99
    )
    tokens = torch.from_numpy(sampler.batch(0, 0))
    with torch.no_grad():
        loss = model(tokens[:, :-1], tokens[:, 1:]).item()
    assert loss < 4.0  # trained: far below ln(512) = 6.24 of the initial weights


def test_sigterm_then_restart_matches_the_uninterrupted_run(reference_run, pydocs_shards: Path, tmp_path: Path) -> None:
    ref_base, _ = reference_run
    reference = _by_step(read_metrics(ref_base))
    base = tmp_path / "interrupted"

    first = run_local(base, REFERENCE_HP, data_dir=pydocs_shards, nproc=2, stop_at_step=8, timeout=600)
    assert first.returncode == 0, first.output[-3000:]  # a stop is a clean exit
    assert read_failure(base) is None
    stopped = max(r["step"] for r in read_metrics(base))
    assert 8 <= stopped < 20
    assert stopped in complete_steps(base / "checkpoints")  # the SIGTERM checkpoint (not an interval one)
    assert f"step-{stopped} (SIGTERM/SIGINT received, synchronous: training blocked " in first.output
    assert f"stopped after step {stopped}" in first.output

    second = run_local(base, REFERENCE_HP, data_dir=pydocs_shards, nproc=2, timeout=600)
    assert second.returncode == 0, second.output[-3000:]
    assert (
        f"resumed from {base.resolve() / 'checkpoints' / f'step-{stopped}'} (step {stopped}; rng restored: True)"
        in second.output
    )
    records = read_metrics(base)
    assert [r["step"] for r in records] == list(range(1, 21))  # no step lost, none repeated
    # Tolerance: none. Model, optimizer moments, LR schedule and data position are restored
    # exactly and CPU math is deterministic, so every loss is bitwise the reference's.
    for r in records:
        assert r["loss"] == reference[r["step"]]["loss"], r["step"]
        assert r["grad_norm"] == reference[r["step"]]["grad_norm"], r["step"]
        assert r["lr"] == reference[r["step"]]["lr"], r["step"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def short_runs(
    tmp_path_factory: pytest.TempPathFactory, pydocs_shards: Path, validation_shards: Path
) -> dict[str, tuple[Path, LocalRun]]:
    """Short runs of the reference run's schedule, ``{name: (base dir, run)}``: the same global
    batch of 16 sequences split 2 processes x 8 ("2 processes", FSDP), 1 x 16 ("1 process") and 2 nodes x 8
    ("2-node HSDP", node0 and node1). The first two run 3 steps with eval_interval=2, eval_batches=3 on a
    validation channel; the HSDP nodes run 2 steps without one. warmup_steps=2 keeps the first two steps'
    learning rates independent of max_steps, so steps 1 and 2 compare with the 20-step reference run."""
    root = tmp_path_factory.mktemp("short-runs")
    evaluated = {**REFERENCE_HP, "max_steps": 3, "eval_interval": 2, "eval_batches": 3}
    bases = {name: root / name.replace(" ", "-") for name in ("2 processes", "1 process", "node0", "node1")}
    for name in ("2 processes", "1 process"):
        (bases[name] / "input" / "data").mkdir(parents=True)
        (bases[name] / "input" / "data" / "validation").symlink_to(validation_shards)
    # In two waves of 3 workers each: all 5 at once on 2 cores cost more CPU seconds than the run they save.
    procs = {
        "2 processes": start_local(bases["2 processes"], evaluated, data_dir=pydocs_shards, nproc=2),
        "1 process": start_local(bases["1 process"], {**evaluated, "batch_size": 16}, data_dir=pydocs_shards, nproc=1),
    }
    runs = {name: follow(proc, timeout=600) for name, proc in procs.items()}
    # Two "nodes" on this host: resourceconfig.json lists both, each entry point runs torchrun with
    # --nnodes=2 --node-rank=i --master-addr=<first host>; HSDP mesh (replicate=2, shard=1).
    hosts = ["127.0.0.1", "localhost"]
    port = str(_free_port())
    nodes = {}
    for i, host in enumerate(hosts):
        prepare_base_dir(
            bases[f"node{i}"],
            {**REFERENCE_HP, "max_steps": 2, "sharding_strategy": "hybrid"},
            data_dir=pydocs_shards,
            hosts=hosts,
            current_host=host,
        )
        nodes[f"node{i}"] = start_local(bases[f"node{i}"], None, nproc=1, env={"MASTER_PORT": port})
    runs |= {name: follow(proc, timeout=600) for name, proc in nodes.items()}
    for name, run in runs.items():
        assert run.returncode == 0, (name, run.output[-3000:])
    return {name: (bases[name], run) for name, run in runs.items()}


def test_fsdp_two_processes_one_process_and_two_node_hsdp_agree(reference_run, short_runs) -> None:
    """Same global batch of 16 sequences, split 2 x 8 (FSDP, the reference run), 1 x 16 (one process, which also
    evaluates: evaluation leaves training alone, test_validation_loss_...), 2 nodes x 8 (HSDP)."""
    ref_base, _ = reference_run
    reference = _by_step(read_metrics(ref_base))
    assert "--nnodes=2" in short_runs["node0"][1].output and "--node-rank=1" in short_runs["node1"][1].output
    # the steady-state timeout reaches HSDP's shard group, which DeviceMesh made with a group of its own (its
    # replicate dimension spans every rank: the default group); full sharding runs on the default group alone
    switch = "collective timeout 10 min from now on on the default group"
    assert f"{switch} and {SHARD_DIM} (setup: 30 min)" in short_runs["node0"][1].output
    assert f"{switch} (setup: 30 min)" in short_runs["2 processes"][1].output

    for name, steps in (("1 process", [1, 2, 3]), ("node0", [1, 2])):
        got = _by_step([r for r in read_metrics(short_runs[name][0]) if "loss" in r])  # training, not validation
        assert sorted(got) == steps, name
        # Step 1: same weights, same 16 sequences; only the order of fp32 sums differs.
        assert got[1]["loss"] == pytest.approx(reference[1]["loss"], abs=1e-5), name
        assert got[1]["grad_norm"] == pytest.approx(reference[1]["grad_norm"], rel=1e-5), name
        # Step 2 follows one AdamW step on reduce-scattered (FSDP) / all-reduced (HSDP) gradients.
        assert got[2]["loss"] == pytest.approx(reference[2]["loss"], abs=1e-4), name
    # the HSDP run's checkpoint is split across the two nodes' directories, each marked complete
    node0, node1 = short_runs["node0"][0], short_runs["node1"][0]
    assert (node0 / "checkpoints" / "step-2" / ".complete").is_file()
    assert (node1 / "checkpoints" / "step-2" / ".complete").is_file()
    assert list((node1 / "checkpoints" / "step-2").glob("__1_*.distcp"))
    # what S3 holds once both nodes uploaded (one prefix) is whole by the prune's rule; one node's files alone are not
    files = {node: {str(p.relative_to(node / "checkpoints" / "step-2")) for p in (node / "checkpoints" / "step-2").rglob("*") if p.is_file()} for node in (node0, node1)}  # fmt: skip
    assert missing_files(files[node0] | files[node1], 2) == []
    assert missing_files(files[node0], 2) == [dcp_shard_file(1), rng_file(1)]


def _validation_losses(lines: list[str]) -> dict[int, float]:
    """``{step: validation loss}`` as SageMaker reads the lines: METRIC_DEFINITIONS' ``validation:loss`` regex."""
    regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "validation:loss")
    steps = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "train:step")
    out = {}
    for line in lines:
        if match := re.search(regex, line):
            out[int(re.search(steps, line).group(1))] = float(match.group(1))
    return out


def test_validation_loss_two_processes_equal_one_process_and_leave_training_alone(reference_run, short_runs) -> None:
    """eval_interval=2, eval_batches=3 on a validation channel: 2 processes x 8 sequences and 1 x 16 evaluate
    the same 48 sequences after steps 2 and 3 (the last); the training losses are the reference run's (which
    has evaluation off, the default, and prints no validation line)."""
    ref_base, ref = reference_run
    reference = _by_step(read_metrics(ref_base))
    assert _validation_losses(ref.lines) == {} and "validation" not in ref.output
    bases = {name: short_runs[name][0] for name in ("2 processes", "1 process")}
    printed = {name: _validation_losses(short_runs[name][1].lines) for name in bases}
    assert sorted(printed["2 processes"]) == sorted(printed["1 process"]) == [2, 3]
    exact = {name: _by_step(read_metrics(base)) for name, base in bases.items()}
    two, one = exact["2 processes"], exact["1 process"]
    for step in (2, 3):
        # the same weights up to the order of fp32 sums, the same 48 sequences, token-weighted over the ranks
        assert two[step]["validation_loss"] == pytest.approx(one[step]["validation_loss"], abs=2e-4), step
        assert printed["2 processes"][step] == round(two[step]["validation_loss"], 4)
    assert two[3]["validation_loss"] < two[2]["validation_loss"]  # one more step of training on related text
    assert 2.5 < two[3]["validation_loss"] < 6.3  # below ln(512) = 6.24 of the initial weights, plus rounding
    # evaluation changes no training value: eval mode, no gradients, no random numbers, the model back in train mode
    losses = {int(r["step"]): r["loss"] for r in read_metrics(bases["2 processes"]) if "loss" in r}
    assert losses == {step: reference[step]["loss"] for step in (1, 2, 3)}
