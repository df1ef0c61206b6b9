"""Before a run's next segment only its newest complete checkpoint stays under its prefix (runtime/checkpoint_prune.py).

Against the emulator (moto's S3, the synthesized template's versioned checkpoint bucket), as the run continuation's
role, whose authorization is checked against the template's policies."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from platform_constructs.submitter.runtime import checkpoint_prune
from platform_spec.checkpoint_layout import dcp_shard_file, rng_file
from platform_spec.runs import run_checkpoint_prefix

pytestmark = pytest.mark.xdist_group("submitter")

WORLD = 2


@pytest.fixture
def seed(aws, config):
    """``seed(run_id, step, complete=True, files=...)``: a checkpoint folder as the trainer writes it for 2 ranks
    (DCP shards and ``.metadata``, RNG files, ``trainer_state.json``, ``.complete``); ``put(run_id, name)`` any
    object below the run's prefix. Each object's body is 100 bytes."""
    s3 = aws.client("s3")
    body = b"x" * 100

    def put(run_id: str, name: str, raw: bytes = body) -> None:
        s3.put_object(Bucket=config.checkpoint_bucket, Key=run_checkpoint_prefix(run_id) + name, Body=raw)

    def checkpoint(run_id: str, step: int, *, complete: bool = True, skip: tuple[str, ...] = ()) -> None:
        state = {
            "step": step,
            "data": {"samples_consumed": step * 8},
            "run": {"world_size": WORLD, "hyperparameters": {"seq_length": "2048"}},
        }
        names = [".metadata", *(dcp_shard_file(r) for r in range(WORLD)), *(rng_file(r) for r in range(WORLD))]
        for name in names:
            if name not in skip:
                put(run_id, f"step-{step}/{name}")
        put(run_id, f"step-{step}/trainer_state.json", json.dumps(state).encode())
        if complete:
            put(run_id, f"step-{step}/.complete", b"{}")

    checkpoint.put = put  # type: ignore[attr-defined]
    return checkpoint


def _keys(aws: Any, config: Any, run_id: str) -> list[str]:
    prefix = run_checkpoint_prefix(run_id)
    found = aws.client("s3").list_objects_v2(Bucket=config.checkpoint_bucket, Prefix=prefix).get("Contents") or []
    return sorted(item["Key"][len(prefix) :] for item in found)


def _run_id() -> str:
    return f"p{uuid.uuid4().hex[:12]}"


def test_only_the_newest_complete_checkpoint_stays_and_the_deleted_keep_their_versions(
    aws, config, continuation_clients, seed
):
    run_id = _run_id()
    for step in (10, 20, 30):
        seed(run_id, step)
    seed(run_id, 40, complete=False)  # a save cut short: newer, never loaded
    for stray in ("notes.txt", "step-030/.complete", "step-30.moved-aside-20261130T165500Z", "tmp/x/.complete"):
        seed.put(run_id, stray)
    before = _keys(aws, config, run_id)

    first = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)

    kept = [k for k in before if k.startswith("step-30/")]
    assert _keys(aws, config, run_id) == kept
    assert (first.kept_step, first.kept_objects, first.failed_count, first.cut_short) == (30, 7, 0, False)
    assert first.deleted_objects == len(before) - len(kept) == 24
    assert first.kept_prefix == f"s3://{config.checkpoint_bucket}/{run_checkpoint_prefix(run_id)}step-30/"
    assert "kept step-30" in first.reason and "deleted 24 objects" in first.reason
    # the same prune again (a duplicate event, a retry after a crash): nothing left to delete
    again = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert (again.kept_step, again.deleted_objects, again.deleted_bytes) == (30, 0, 0)
    assert _keys(aws, config, run_id) == kept
    # versioned: every deleted object is a noncurrent version under a delete marker, until the lifecycle rule acts
    s3 = aws.client("s3")
    assert s3.get_bucket_versioning(Bucket=config.checkpoint_bucket)["Status"] == "Enabled"
    versions = s3.list_object_versions(Bucket=config.checkpoint_bucket, Prefix=run_checkpoint_prefix(run_id))
    prefix = len(run_checkpoint_prefix(run_id))
    noncurrent = {v["Key"][prefix:] for v in versions.get("Versions") or [] if not v["IsLatest"]}
    markers = {m["Key"][prefix:] for m in versions.get("DeleteMarkers") or [] if m["IsLatest"]}
    assert noncurrent == markers == set(before) - set(kept)


def test_nothing_is_deleted_without_a_complete_checkpoint_or_when_the_newest_lacks_a_ranks_files(
    aws, config, continuation_clients, seed
):
    run_id = _run_id()
    seed(run_id, 10, complete=False)
    seed.put(run_id, "notes.txt")
    before = _keys(aws, config, run_id)
    result = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert (result.kept_step, result.deleted_objects) == (None, 0) and "no complete checkpoint" in result.reason
    assert _keys(aws, config, run_id) == before
    # a newest checkpoint whose second node never uploaded: the older one stays to fall back on
    seed(run_id, 20)
    seed(run_id, 30, skip=(rng_file(1),))
    before = _keys(aws, config, run_id)
    result = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert result.deleted_objects == 0 and rng_file(1) in result.reason and "nothing pruned" in result.reason
    assert _keys(aws, config, run_id) == before
    # a newest checkpoint whose second node's RNG file arrived and its DCP shard did not (an asynchronous save writes
    # the RNG file first; the node was lost mid-upload): still not whole, nothing pruned
    seed(run_id, 40, skip=(dcp_shard_file(1),))
    before = _keys(aws, config, run_id)
    result = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert result.deleted_objects == 0 and dcp_shard_file(1) in result.reason and "nothing pruned" in result.reason
    assert _keys(aws, config, run_id) == before


def test_a_deleteobjects_partial_failure_keeps_the_refused_folder_whole_and_the_next_prune_finishes(
    aws, config, continuation_clients, seed
):
    """moto answers every key of a DeleteObjects alike; S3 can refuse some keys and delete the rest (its ``Errors``,
    e.g. ``InternalError`` per key). That answer is made here on the client: the refused key is taken out of the
    request before it is sent and reported in the answer, as S3 reports it."""
    run_id = _run_id()
    for step in (10, 20, 30):
        seed(run_id, step)
    refused = run_checkpoint_prefix(run_id) + "step-10/.complete"
    s3 = continuation_clients.s3

    dropped: list[str] = []

    def drop(params: dict[str, Any], **_: Any) -> None:
        sent = params["Delete"]["Objects"]
        params["Delete"]["Objects"] = [o for o in sent if o["Key"] != refused]
        dropped[:] = [refused] if len(sent) != len(params["Delete"]["Objects"]) else []

    def report(parsed: dict[str, Any], **_: Any) -> None:
        for key in dropped:
            parsed.setdefault("Errors", []).append({"Key": key, "Code": "InternalError", "Message": "try again"})

    s3.meta.events.register("provide-client-params.s3.DeleteObjects", drop, unique_id="drop-refused")
    s3.meta.events.register("after-call.s3.DeleteObjects", report, unique_id="report-refused")
    try:
        result = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    finally:
        s3.meta.events.unregister("provide-client-params.s3.DeleteObjects", unique_id="drop-refused")
        s3.meta.events.unregister("after-call.s3.DeleteObjects", unique_id="report-refused")
    assert result.failed == [f"{refused}: InternalError"] and result.failed_count == 1
    left = _keys(aws, config, run_id)
    assert [k for k in left if k.startswith("step-10/")] == [  # its marker refused: its files stay with it
        f"step-10/{name}" for name in sorted([".complete", ".metadata", "__0_0.distcp", "__1_0.distcp",
                                               rng_file(0), rng_file(1), "trainer_state.json"])
    ]  # fmt: skip
    assert not any(k.startswith("step-20/") for k in left)
    again = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert again.deleted_objects == 7 and again.failed_count == 0
    assert all(k.startswith("step-30/") for k in _keys(aws, config, run_id))


def test_a_prune_that_runs_out_of_time_stops_and_leaves_the_rest(aws, config, continuation_clients, seed, runtime):
    """The prune keeps PRUNE_RESERVE_S for the submission: with less left it deletes nothing and says so."""
    run_id = _run_id()
    for step in (10, 20):
        seed(run_id, step)
    before = _keys(aws, config, run_id)
    from platform_constructs.lambda_runtime.deadline import deadline_scope

    with deadline_scope(runtime.aws.Deadline(checkpoint_prune.PRUNE_RESERVE_S + 0.5)):
        result = checkpoint_prune.prune_run_checkpoints(continuation_clients, config, run_id)
    assert result.cut_short is True and result.deleted_objects == 0 and "cut short for time" in result.reason
    assert _keys(aws, config, run_id) == before
