"""The emulator authorizes as AWS does: the plan-path fault of issue 24, shown the way a real account shows it.

Without the grant on the plan's ``training-plan`` and ``reserved-capacity`` resources (the shape the submitter's
role had before the fix), the guide's default request is refused by ``CreateTrainingJob`` with SageMaker's
``AccessDeniedException`` and nothing is created; with the shipped template the same request creates its job
(``test_demo_submit``, which runs under the same authorization, and the run end to end).
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import ACCOUNT_ID, DEFAULT_REGION
from devtools.local_aws.template import platform_template
from platform_constructs.submitter.runtime import continuation, settings
from platform_spec.tracking import MLFLOW_LOGGING_ACTIONS, TENSORBOARD_OUTPUT_PREFIX
from trainctl.submitter_client import SubmitError, submit_local

pytestmark = pytest.mark.xdist_group("devtools-aws")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN_GRANT = "TrainingJobsOnPlans"


def without_statement(template: dict[str, Any], sid: str) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``template`` whose identity policies lack every statement ``sid``, and the policies it left."""
    edited = copy.deepcopy(template)
    touched = []
    for logical, resource in edited["Resources"].items():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        statements = resource["Properties"]["PolicyDocument"]["Statement"]
        kept = [s for s in statements if s.get("Sid") != sid]
        if len(kept) != len(statements):
            resource["Properties"]["PolicyDocument"]["Statement"] = kept
            touched.append(logical)
    return edited, touched


def test_without_the_plan_grant_the_guides_request_is_refused_as_aws_refuses_it(tmp_path: Path) -> None:
    edited, touched = without_statement(platform_template(DEFAULT_REGION), PLAN_GRANT)
    assert any(name.startswith("SubmitterRole") for name in touched), touched  # the grant is there to remove
    template = tmp_path / "template.json"
    template.write_text(json.dumps(edited))
    request = json.loads((EXAMPLES / "guide-default-request.json").read_text())
    with LocalAws(plans=str(EXAMPLES / "plans.json"), template=template) as aws:
        with pytest.raises(SubmitError) as refused:
            submit_local(request, aws.env)
        submitter = next(p for p in aws.principals().values() if p["access_key"] == aws.env["AWS_ACCESS_KEY_ID"])
        plan = next(a for a in aws.training_plan_arns if a.endswith("/p6-b200-active"))
        assert str(refused.value) == (
            f"CreateTrainingJob answered AccessDeniedException: User: {submitter['session_arn']} is not authorized to "
            f"perform: sagemaker:CreateTrainingJob on resource: {plan} because no identity-based policy allows the "
            "sagemaker:CreateTrainingJob action (after 1 attempt)"
        )
        assert aws.training_jobs() == []  # nothing half-done


def test_the_kms_buckets_take_writes_under_the_platform_key_only(aws: LocalAws) -> None:
    """A write that names no encryption (the bucket's default applies) or the platform key passes the bucket
    policy's WRITE_KEY_STATEMENTS; one under another key, SSE-S3 or ``aws:kms`` without a key is denied by them."""
    s3 = aws.client("s3", access_key=aws.env["AWS_ACCESS_KEY_ID"])  # the submitter writes the output bucket
    bucket, key_arn = aws.resources["output_bucket"], aws.env["OUTPUT_KMS_KEY_ARN"]
    other = aws.client("kms").create_key(Description="not the platform's")["KeyMetadata"]["Arn"]
    s3.put_object(Bucket=bucket, Key="submitter/client-tokens/a.json", Body=b"{}")
    s3.put_object(
        Bucket=bucket,
        Key="submitter/client-tokens/b.json",
        Body=b"{}",
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=key_arn,
    )
    assert s3.head_object(Bucket=bucket, Key="submitter/client-tokens/b.json")["SSEKMSKeyId"] == key_arn
    refused = {
        "DenyWritesUnderAnotherKey": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": other},
        "DenyWritesUnderAnotherEncryption": {"ServerSideEncryption": "AES256"},
        "DenyWritesUnderAwsManagedKey": {"ServerSideEncryption": "aws:kms"},
    }
    for sid, encryption in refused.items():
        with pytest.raises(botocore.exceptions.ClientError) as denied:
            s3.put_object(Bucket=bucket, Key=f"submitter/client-tokens/{sid}.json", Body=b"{}", **encryption)
        error = denied.value.response["Error"]
        assert error["Code"] == "AccessDenied", sid
        assert error["Message"].endswith("with an explicit deny in a resource-based policy"), sid
    aws.remove_object(bucket, "submitter/client-tokens/not-there.json")  # as S3's DeleteObject: nothing to do
    with pytest.raises(RuntimeError, match=r"HTTP 404.*not found: .*bucket 'no-such-bucket'"):
        aws.remove_object("no-such-bucket", "k")
    with pytest.raises(
        RuntimeError, match=r"HTTP 400.*objects/remove: expected .*bucket.*NAME.*key.*KEY.* \(non-empty strings\)"
    ):
        aws.remove_object(bucket, "")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="submitter/client-tokens/")["Contents"]
    assert sorted(o["Key"] for o in listed) == [
        "submitter/client-tokens/a.json",
        "submitter/client-tokens/b.json",
    ]  # nothing half-done


def _edited(template: dict[str, Any], edit: Callable[[str, dict[str, Any]], bool]) -> list[str]:
    """Apply ``edit(logical id, statement)`` to every statement of ``template``'s identity and bucket policies (in
    place); returns the logical ids of the policies it changed (``edit`` returned True)."""
    touched = []
    for logical, resource in template["Resources"].items():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::S3::BucketPolicy"):
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            changed = [edit(logical, s) for s in list(statements)]  # every statement, not up to the first
            if any(changed):
                touched.append(logical)
    return touched


def _remove(statement: dict[str, Any], template: dict[str, Any]) -> None:
    for resource in template["Resources"].values():
        statements = resource.get("Properties", {}).get("PolicyDocument", {}).get("Statement", [])
        if statement in statements:
            statements.remove(statement)


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement.get("Action", [])
    return [actions] if isinstance(actions, str) else actions


def test_removing_a_statement_of_each_principal_kind_makes_the_platform_call_it_allowed_fail(tmp_path: Path) -> None:
    """One statement per kind of principal, removed (or, for the bucket policy's key requirement, inverted) from the
    platform's template, one emulator for all four: the submitter's iam:PassRole (the guide's request is refused by
    CreateTrainingJob), the continuation's events:PutEvents (its decision event), the execution role's checkpoint
    write (SageMaker's checkpoint sync) and the output bucket's DenyWritesUnderAnotherKey turned into a deny of the
    platform key (SageMaker's upload of the job's output under OutputDataConfig.KmsKeyId). Each refusal is AWS's
    message for exactly that grant; the calls beside it still pass."""
    template = copy.deepcopy(platform_template(DEFAULT_REGION))
    checkpoints = next(
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::S3::Bucket" and "Checkpoints" in k
    )

    removed = {"SubmitterRole": "iam:PassRole", "SubmitterContinuationRole": "events:PutEvents"}

    def edit(logical: str, statement: dict[str, Any]) -> bool:
        role = next((r for r in removed if logical.startswith(r)), None)
        if role is not None and removed[role] in _actions(statement):
            _remove(statement, template)
        elif (
            logical.startswith("ExecutionRole")
            and "s3:PutObject" in _actions(statement)
            and checkpoints in json.dumps(statement["Resource"])
        ):
            kept = [r for r in statement["Resource"] if checkpoints not in json.dumps(r)]
            assert len(kept) == len(statement["Resource"]) - 1, statement
            statement["Resource"] = kept
        elif logical.startswith("BucketsOutputPolicy") and statement.get("Sid") == "DenyWritesUnderAnotherKey":
            statement["Condition"]["StringEquals"] = statement["Condition"].pop("StringNotEquals")
        else:
            return False
        return True

    touched = _edited(template, edit)
    assert len(touched) == 4, touched  # each edit found its statement
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    request = json.loads((EXAMPLES / "guide-default-request.json").read_text())
    with LocalAws(plans=str(EXAMPLES / "plans.json"), template=path) as aws:
        principals = aws.principals()
        session = {name: p["session_arn"] for name, p in principals.items()}
        execution = next(p for p in principals.values() if p["arn"] == aws.env["EXECUTION_ROLE_ARN"])

        def refused(role: str, action: str, resource: str, why: str = "because no identity-based policy allows") -> str:
            name = next(n for n in session if n.startswith(role))
            ending = f"{why} the {action} action" if why.startswith("because") else why
            return f"User: {session[name]} is not authorized to perform: {action} on resource: {resource} {ending}"

        with pytest.raises(SubmitError) as submitter:
            submit_local(request, aws.env)
        assert str(submitter.value) == (
            "CreateTrainingJob answered AccessDeniedException: "
            + refused("SubmitterRole", "iam:PassRole", aws.env["EXECUTION_ROLE_ARN"])
            + " (after 1 attempt)"
        )
        assert aws.training_jobs() == []

        env = aws.function_env("platform_constructs.submitter.runtime.continuation.lambda_handler")
        with pytest.raises(botocore.exceptions.ClientError) as publish:
            continuation.publish(
                continuation.Outcome({"decision": "continue", "run_id": "r1"}), continuation.events_client(env)
            )
        bus = f"arn:aws:events:{DEFAULT_REGION}:123456789012:event-bus/default"
        assert publish.value.response["Error"]["Message"] == refused(
            "SubmitterContinuationRole", "events:PutEvents", bus
        )

        s3 = aws.client("s3", access_key=execution["access_key"])
        bucket, output = aws.env["CHECKPOINT_BUCKET"], aws.env["OUTPUT_BUCKET"]
        key = f"{settings.JOB_CHECKPOINT_PREFIX}job-1/checkpoints/step-10/.complete"
        with pytest.raises(botocore.exceptions.ClientError) as sync:
            s3.put_object(Bucket=bucket, Key=key, Body=b"{}")
        assert sync.value.response["Error"]["Message"] == refused(
            execution["name"], "s3:PutObject", f'"arn:aws:s3:::{bucket}/{key}"'
        )

        model = "training-jobs/job-1/output/model.tar.gz"
        s3.put_object(Bucket=output, Key=model, Body=b"x")  # the bucket's default key: still allowed
        with pytest.raises(botocore.exceptions.ClientError) as upload:
            s3.put_object(
                Bucket=output, Key=model, Body=b"x", ServerSideEncryption="aws:kms",
                SSEKMSKeyId=aws.env["OUTPUT_KMS_KEY_ARN"],
            )  # fmt: skip
        assert upload.value.response["Error"]["Message"] == refused(
            execution["name"], "s3:PutObject", f'"arn:aws:s3:::{output}/{model}"',
            "with an explicit deny in a resource-based policy",
        )  # fmt: skip


def test_simulate_principal_policy_answers_from_the_same_engine(aws: LocalAws) -> None:
    """IAM's policy simulator (the SageMaker SDK's role validation) decides as every call is decided: the execution
    role may write checkpoints (and the statement that allows it is named), may not create network interfaces
    (it runs without a VPC), and a role the template has not is NoSuchEntity."""
    iam = aws.client("iam")
    role = aws.env["EXECUTION_ROLE_ARN"]
    bucket = aws.env["CHECKPOINT_BUCKET"]
    results = iam.simulate_principal_policy(
        PolicySourceArn=role,
        ActionNames=["s3:PutObject", "ec2:CreateNetworkInterface"],
        ResourceArns=[f"arn:aws:s3:::{bucket}/checkpoints/j/step-1/x"],
    )["EvaluationResults"]
    decided = {r["EvalActionName"]: r for r in results}
    assert decided["s3:PutObject"]["EvalDecision"] == "allowed"
    (matched,) = decided["s3:PutObject"]["MatchedStatements"]
    assert matched["SourcePolicyId"].startswith("ExecutionRoleDefaultPolicy")
    assert decided["ec2:CreateNetworkInterface"]["EvalDecision"] == "implicitDeny"
    assert decided["ec2:CreateNetworkInterface"]["MatchedStatements"] == []
    other = f"arn:aws:s3:::{aws.env['DATA_BUCKET']}/x"  # the data bucket is read-only to jobs
    (write,) = iam.simulate_principal_policy(PolicySourceArn=role, ActionNames=["s3:PutObject"], ResourceArns=[other])[
        "EvaluationResults"
    ]
    assert write["EvalDecision"] == "implicitDeny"
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        iam.simulate_principal_policy(PolicySourceArn=role + "-gone", ActionNames=["s3:GetObject"])
    assert missing.value.response["Error"]["Code"] == "NoSuchEntity"
    with pytest.raises(botocore.exceptions.ClientError) as unsupported:
        iam.simulate_principal_policy(PolicySourceArn=role, ActionNames=["s3:GetObject"], CallerArn=role)
    assert unsupported.value.response["Error"]["Code"] == "InvalidInput"
    assert "CallerArn" in unsupported.value.response["Error"]["Message"]
    submitter = aws.client("iam", access_key=aws.env["AWS_ACCESS_KEY_ID"])  # the simulator is authorized too
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        submitter.simulate_principal_policy(PolicySourceArn=role, ActionNames=["s3:GetObject"])
    assert refused.value.response["Error"]["Code"] == "AccessDenied"


def _raw(aws: LocalAws, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    request = urllib.request.Request(aws.endpoint + path, data=body or None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_no_request_reaches_moto_unsigned_unidentified_or_on_another_bucket(aws: LocalAws) -> None:
    """Unsigned, SigV2 and malformed requests are refused as AWS refuses them (never a 500, never moto's answer), and
    a virtual-hosted ``Host`` is authorized on the bucket moto writes to, not the one in the path."""
    output, data = aws.env["OUTPUT_BUCKET"], aws.env["DATA_BUCKET"]
    key = aws.env["AWS_ACCESS_KEY_ID"]  # the submitter: writes client tokens to the output bucket only
    signed = (
        f"AWS4-HMAC-SHA256 Credential={key}/20260101/{DEFAULT_REGION}/s3/aws4_request, SignedHeaders=host, Signature=0"
    )
    token = f"/{output}/submitter/client-tokens/raw.json"
    assert _raw(aws, "PUT", token, {}, b"x")[0] == 403
    assert b"<Code>InvalidRequest</Code>" in _raw(aws, "PUT", token, {"Authorization": f"AWS {key}:c2ln"}, b"x")[1]
    json_headers = {"X-Amz-Target": "SageMaker.NoSuchOp", "Content-Type": "application/x-amz-json-1.1"}
    sagemaker = signed.replace("/s3/", "/sagemaker/")
    status, body = _raw(aws, "POST", "/", {**json_headers, "Authorization": sagemaker}, b"{}")
    assert (status, json.loads(body)["__type"]) == (400, "UnknownOperationException")
    list_jobs = {**json_headers, "X-Amz-Target": "SageMaker.ListTrainingJobs", "Authorization": sagemaker}
    assert json.loads(_raw(aws, "POST", "/", list_jobs, b"[1]")[1])["__type"] == "SerializationException"
    assert json.loads(_raw(aws, "POST", "/", {**list_jobs, "Authorization": ""}, b"{}")[1])["__type"] == (
        "MissingAuthenticationTokenException"
    )
    status, body = _raw(aws, "PUT", token, {"Host": f"{data}.s3.amazonaws.com", "Authorization": signed}, b"x")
    assert status == 403 and f'on resource: "arn:aws:s3:::{data}/{token[1:]}"'.encode() in body, body
    virtual = {"Host": f"{output}.s3.{DEFAULT_REGION}.amazonaws.com", "Authorization": signed}
    assert _raw(aws, "PUT", "/submitter/client-tokens/virtual.json", virtual, b"x")[0] == 200
    s3 = aws.client("s3")
    s3.head_object(Bucket=output, Key="submitter/client-tokens/virtual.json")  # written where it was authorized
    assert "Contents" not in s3.list_objects_v2(Bucket=data, Prefix=output)
    assert "Contents" not in s3.list_objects_v2(Bucket=output, Prefix="submitter/client-tokens/raw.json")


def test_the_execution_role_logs_to_its_own_accounts_tracking_servers_and_writes_tensorboard_output_only(
    aws: LocalAws,
) -> None:
    """The experiment-tracking grants (``MlflowTracking``, the output bucket's ``tensorboard/`` prefix) as AWS decides
    them: each MLflow call the trainer makes is allowed on a tracking server of the deployment's account and region,
    and on no other account's, region's or resource type's; the role writes TensorBoard files below ``tensorboard/``
    (SageMaker's upload of ``TensorBoardOutputConfig``) and, in the output bucket, nowhere else it could not before."""
    iam = aws.client("iam")
    role = aws.env["EXECUTION_ROLE_ARN"]
    own = f"arn:aws:sagemaker:{DEFAULT_REGION}:{ACCOUNT_ID}:mlflow-tracking-server/team"
    foreign = [
        own.replace(ACCOUNT_ID, "210987654321"),
        own.replace(DEFAULT_REGION, "eu-west-1"),
        own.replace("mlflow-tracking-server/", "mlflow-app/"),
    ]
    results = iam.simulate_principal_policy(
        PolicySourceArn=role, ActionNames=list(MLFLOW_LOGGING_ACTIONS), ResourceArns=[own, *foreign]
    )["EvaluationResults"]
    decided = {(r["EvalActionName"], r["EvalResourceName"]): r for r in results}
    for action in MLFLOW_LOGGING_ACTIONS:
        allowed = decided[(action, own)]
        assert allowed["EvalDecision"] == "allowed", action
        assert [m["SourcePolicyId"].rpartition("#")[2] for m in allowed["MatchedStatements"]] == ["MlflowTracking"]
        assert [decided[(action, arn)]["EvalDecision"] for arn in foreign] == ["implicitDeny"] * 3, action
    (registry,) = iam.simulate_principal_policy(
        PolicySourceArn=role, ActionNames=["sagemaker-mlflow:DeleteRegisteredModel"], ResourceArns=[own]
    )["EvaluationResults"]
    assert registry["EvalDecision"] == "implicitDeny"  # logging runs only: no model registry, no deletes

    execution = next(p for p in aws.principals().values() if p["arn"] == role)
    s3 = aws.client("s3", access_key=execution["access_key"])
    output = aws.env["OUTPUT_BUCKET"]
    key = f"{TENSORBOARD_OUTPUT_PREFIX}job-1/events.out.tfevents.1.algo-1.1.0"
    s3.put_object(Bucket=output, Key=key, Body=b"event")
    assert s3.get_object(Bucket=output, Key=key)["Body"].read() == b"event"
    s3.put_object(Bucket=output, Key=f"{settings.TRAINING_JOB_OUTPUT_PREFIX}job-1/output/model.tar.gz", Body=b"m")
    for elsewhere in (
        "tensorboard",
        "tensorboard-x/events",
        "other/events",
        settings.CLIENT_TOKEN_RECORDS_PREFIX + "x",
    ):
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            s3.put_object(Bucket=output, Key=elsewhere, Body=b"event")
        assert refused.value.response["Error"]["Code"] == "AccessDenied", elsewhere
