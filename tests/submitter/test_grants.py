"""Each action's IAM grants (runtime/actions.py; the construct grants a function its actions') are exactly what its
handler calls: no call without a grant, no grant without a call.

Every AWS call of an action's scenarios against the emulator is recorded on the function's own clients
(botocore's ``before-parameter-build`` event) and named as IAM names it: the service's signing name and the
operation (:data:`IAM_NAMES` where they differ), plus what AWS authorizes beside the operation
(:data:`ALSO_AUTHORIZED`). A call is covered by a grant of its IAM action (an S3 one when its key is below
the grant's prefix, :func:`s3_scopes`); a grant is needed when a call uses each of its IAM actions, and no
narrower prefix would cover those calls. The scenarios take each action down its paths that reach AWS.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from platform_constructs.submitter.runtime import actions, continuation, settings
from platform_spec import runs as spec
from platform_spec.runs import RUN_CHECKPOINT_PREFIX

pytestmark = pytest.mark.xdist_group("submitter")

IAM_NAMES = {
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:DeleteObjects": "s3:DeleteObject",
    "monitoring:GetMetricData": "cloudwatch:GetMetricData",
}
"""API operations whose IAM action is named otherwise (Service Authorization Reference, Amazon S3; Amazon
CloudWatch's actions have the prefix ``cloudwatch``, its API the signing name ``monitoring``)."""
ALSO_AUTHORIZED = {"sagemaker:CreateTrainingJob": ("sagemaker:AddTags", "iam:PassRole")}
"""What AWS authorizes beside the operation: a CreateTrainingJob with ``Tags`` needs ``sagemaker:AddTags``, and
its ``RoleArn`` ``iam:PassRole`` (SageMaker Developer Guide, "SageMaker AI API Permissions Reference")."""


@dataclass(frozen=True)
class Call:
    """One IAM action a call needed, and for S3 the bucket and the key (or the listed prefix)."""

    action: str
    bucket: str | None = None
    key: str | None = None


def recording(*clients: Any) -> set[Call]:
    """The IAM actions of every call ``clients`` (botocore clients) make from now on."""
    calls: set[Call] = set()

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        name = f"{model.service_model.signing_name}:{model.name}"
        deleted = [o.get("Key") for o in (params.get("Delete") or {}).get("Objects") or []]  # s3:DeleteObject each
        for key in deleted or [params.get("Key", params.get("Prefix"))]:
            calls.add(Call(IAM_NAMES.get(name, name), params.get("Bucket"), key))
        calls.update(Call(also) for also in ALSO_AUTHORIZED.get(name, ()))

    for client in clients:
        client.meta.events.register("before-parameter-build", record)
    return calls


def s3_scopes(config: Any) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The S3 resources of the grants: their bucket and key prefixes (the construct's ``_resources``)."""
    return {
        "client-token-records": (config.output_bucket, (settings.CLIENT_TOKEN_RECORDS_PREFIX,)),
        "run-records": (config.output_bucket, (settings.RUN_STORE_PREFIX,)),
        "run-markers": (config.output_bucket, (settings.RUN_WAITING_PREFIX, settings.RUN_ACTIVE_PREFIX)),
        "checkpoints-prefix": (config.checkpoint_bucket, (settings.JOB_CHECKPOINT_PREFIX, RUN_CHECKPOINT_PREFIX)),
        "run-checkpoints": (config.checkpoint_bucket, (RUN_CHECKPOINT_PREFIX,)),
    }


def _within(call: Call, scope: tuple[str, tuple[str, ...]]) -> bool:
    bucket, prefixes = scope
    return call.bucket == bucket and any((call.key or "").startswith(prefix) for prefix in prefixes)


def _covers(grant: actions.Grant, call: Call, scopes: dict[str, Any]) -> bool:
    return call.action in grant.actions and (grant.resource not in scopes or _within(call, scopes[grant.resource]))


def uncovered(calls: set[Call], grants: tuple[actions.Grant, ...], scopes: dict[str, Any]) -> list[Call]:
    """The calls no grant covers."""
    return sorted((c for c in calls if not any(_covers(g, c, scopes) for g in grants)), key=repr)


def unneeded(calls: set[Call], grants: tuple[actions.Grant, ...], scopes: dict[str, Any]) -> list[str]:
    """Each granted IAM action no call uses, and each S3 grant whose calls a narrower prefix covers."""
    found = []
    for grant in grants:
        for action in grant.actions:
            used = [c for c in calls if c.action == action and _covers(grant, c, scopes)]
            if not used:
                found.append(f"{action} on {grant.resource} ({grant.sid}): never called")
            elif grant.resource in scopes:
                found.extend(
                    f"{action} on {grant.resource} ({grant.sid}): every call is below {name}"
                    for name in _inside(scopes, grant.resource)
                    if all(_within(c, scopes[name]) for c in used)
                )
    return found


def _inside(scopes: dict[str, Any], resource: str) -> list[str]:
    """The other S3 resources whose prefixes are all below ``resource``'s."""
    bucket, prefixes = scopes[resource]
    return [
        name
        for name, (other, inner) in scopes.items()
        if name != resource and other == bucket and all(p.startswith(prefixes) for p in inner)
    ]


# --- the scenarios: each action down its paths that reach AWS ------------------------------------------


def _submit(kit: SimpleNamespace) -> None:
    """A plain request with a token on a training plan and a run, each then replayed (the records and tags read)."""
    for body in (kit.make_request(), kit.run_kit.request(_run_id())):
        assert kit.act(body)["replayed"] is False
        assert kit.act(body)["replayed"] is True


def _describe(kit: SimpleNamespace) -> None:
    """A run's running segment on a plan with a complete checkpoint (its block, its checkpoint), and the run."""
    plain = kit.submit(kit.make_request(capacity="on-demand"))["training_job_name"]
    uri = kit.aws.describe_training_job(plain)["CheckpointConfig"]["S3Uri"]
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    for name, body in (("trainer_state.json", b'{"step": 3}'), (".complete", b"{}")):
        kit.aws.client("s3").put_object(Bucket=bucket, Key=f"{prefix}step-3/{name}", Body=body)
    assert kit.act({"action": "describe", "job_name": plain})["job"]["checkpoint"]["newest_complete_step"] == 3
    run_id = kit.running_run()
    job = kit.act({"action": "describe", "job_name": spec.segment_job_name(run_id, 1)})["job"]
    assert job["checkpoint"]["newest_complete_step"] == 10 and job["capacity"]["block"]["running"] is True, job
    assert kit.act({"action": "describe", "run_id": run_id})["run"]["newest_complete_step"] == 10


def _list(kit: SimpleNamespace) -> None:
    kit.submit(kit.make_request(capacity="on-demand"))
    assert kit.act({"action": "list", "max_results": 5})["jobs"]


def _stop(kit: SimpleNamespace) -> None:
    """A plain job, and a run with a running segment."""
    plain = kit.submit(kit.make_request(capacity="on-demand"))
    assert kit.act({"action": "stop", "job_name": plain["training_job_name"]})["changed"] is True
    assert kit.act({"action": "stop", "run_id": kit.running_run()})["changed"] is True


def _list_runs(kit: SimpleNamespace) -> None:
    kit.running_run()
    assert kit.act({"action": "list_runs", "max_results": 5})["runs"]


def _continue_run(kit: SimpleNamespace) -> None:
    """A run ended budget-segments, continued (its older checkpoint pruned; a stop landing while its segment is
    created stops it), then replayed."""
    run_id = kit.ended_run()
    body = {"action": "continue_run", "run_id": run_id, "client_token": f"t-{uuid.uuid4()}", "max_segments": 2}
    kit.stop_marker(run_id, 2)  # as a stop of the run arriving between the continuation's record and its job
    answer = kit.act(body)
    assert answer["stopped_on_start"] is True and answer["checkpoint_prune"]["deleted_objects"] == 3, answer
    assert kit.act(body)["replayed"] is True


SCENARIOS: dict[str, Callable[[SimpleNamespace], None]] = {
    actions.SUBMIT: _submit,
    "describe": _describe,
    "list": _list,
    "stop": _stop,
    "list_runs": _list_runs,
    "continue_run": _continue_run,
}


def _run_id() -> str:
    return f"g{uuid.uuid4().hex[:12]}"


@pytest.fixture
def kit(aws, env, config, submit, make_request, run_kit, runtime):
    """``act(event)``: the event through the job API on fresh clients whose calls are ``calls``; ``running_run()``:
    a run (made outside the recording) whose segment 1 runs with a complete checkpoint at step 10."""
    clients = runtime.aws.Clients.create(environ=env)
    calls = recording(clients.sagemaker, clients.s3, clients.ssm)

    def running_run() -> str:
        run_id = _run_id()
        assert submit(run_kit.request(run_id))["status"] == "submitted"
        aws.set_job_status(spec.segment_job_name(run_id, 1), "InProgress")
        run_kit.checkpoint(run_id, 5)  # older: pruned before the run's next segment
        run_kit.checkpoint(run_id, 10)
        return run_id

    def ended_run() -> str:
        run_id = _run_id()
        assert submit(run_kit.request(run_id, max_segments=1))["status"] == "submitted"
        run_kit.checkpoint(run_id, 5)
        run_kit.checkpoint(run_id, 10)
        aws.set_job_status(spec.segment_job_name(run_id, 1), "InProgress")
        aws.set_job_status(spec.segment_job_name(run_id, 1), "Completed")
        assert (
            run_kit.handle(run_kit.event(spec.segment_job_name(run_id, 1)))["decision"]["decision"] == "budget-segments"
        )
        return run_id

    def stop_marker(run_id: str, first_segment: int) -> None:
        store = runtime.ledger.RunLedger.of(runtime.aws.Clients.create(environ=env), config)
        claim = store.read_run(run_id)
        store.create(store.stop_key(claim, first_segment), {"run_id": run_id, "requested_at": "2026-01-01T00:00:00Z"})

    def act(event: dict[str, Any]) -> dict[str, Any]:
        answer = actions.dispatch(event, clients=clients, config=config)
        assert answer["status"] != "rejected", answer
        return answer

    return SimpleNamespace(
        act=act, calls=calls, clients=clients, running_run=running_run, submit=submit, make_request=make_request,
        run_kit=run_kit, ended_run=ended_run, stop_marker=stop_marker, aws=aws,
    )  # fmt: skip


def test_every_action_has_its_scenarios():
    assert set(SCENARIOS) == set(actions.ACTIONS)


@pytest.mark.parametrize("name", list(actions.ACTIONS))
def test_an_actions_grants_are_exactly_what_its_handler_calls(kit, config, name):
    """Review finding: sagemaker:ListTrainingJobs (list), sagemaker:ListTrainingPlans and sagemaker:Search (submit)
    were granted and never called."""
    SCENARIOS[name](kit)
    grants, scopes = actions.ACTIONS[name].grants, s3_scopes(config)
    assert uncovered(kit.calls, grants, scopes) == []
    assert unneeded(kit.calls, grants, scopes) == []


def test_the_continuations_own_grants_are_exactly_what_it_calls_beyond_the_actions(
    aws, continuation_env, config, kit, runtime
):
    """A run's segment 2 refused (quota: the run waits, its marker written), then started by the retry (its marker
    deleted), each decision published; segment 2 watched while it trains (its step metric read); its end decided by the tick's reconciliation (its event lost) and the
    ended run's active marker deleted. Review finding: the continuation could delete every run record, where it
    deletes only waiting markers."""
    clients = runtime.aws.Clients.create(environ=continuation_env)  # as the continuation's role
    events = continuation.events_client(continuation_env)
    calls = recording(clients.sagemaker, clients.s3, clients.ssm, clients.cloudwatch, events)
    run_id = kit.running_run()
    aws.set_job_status(spec.segment_job_name(run_id, 1), "Completed")
    event = kit.run_kit.event(spec.segment_job_name(run_id, 1))
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", message="limit 'ml.p6-b200.48xlarge' is 0")
    waiting = continuation.handle(event, clients=clients, config=config, events=events)
    assert waiting["decision"]["decision"] == spec.WAITING_FOR_CAPACITY, waiting
    assert waiting["decision"]["checkpoint_prune"]["kept_step"] == 10, waiting  # step-5 deleted before segment 2
    aws.clear_faults()
    outcome, _ = continuation.retry_waiting(run_id, clients=clients, config=config, now=datetime.now(UTC))
    assert outcome is not None and outcome.decision == spec.CONTINUE, outcome
    continuation.publish(outcome, events)
    # segment 2 trains: the tick's stall watch reads its train:step metric and leaves it alone
    aws.set_job_status(spec.segment_job_name(run_id, 2), "InProgress", secondary_status="Training")
    watched, age = continuation.reconcile(run_id, clients=clients, config=config, now=datetime.now(UTC))
    assert watched is None and age is not None, (watched, age)
    # segment 2's event is lost: the tick's reconciliation decides it, then removes the ended run's active marker
    aws.set_job_status(spec.segment_job_name(run_id, 2), "Failed", failure_reason="AlgorithmError: boom")
    ended, _ = continuation.reconcile(run_id, clients=clients, config=config, now=datetime.now(UTC))
    assert ended is not None and ended.decision == spec.FAILED, ended
    assert continuation.reconcile(run_id, clients=clients, config=config, now=datetime.now(UTC)) == (None, None)
    assert any(c.action == "s3:DeleteObject" and settings.RUN_ACTIVE_PREFIX in (c.key or "") for c in calls)
    own, scopes = actions.CONTINUATION_GRANTS, s3_scopes(config)
    assert uncovered(calls, (*actions.grants(actions.CONTINUATION_ACTIONS), *own), scopes) == []
    assert unneeded(calls, own, scopes) == []
