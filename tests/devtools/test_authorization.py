"""The emulator authorizes as AWS does: the plan-path fault of issue 24, shown the way a real account shows it.

Without the grant on the plan's ``training-plan`` and ``reserved-capacity`` resources (the shape the submitter's
role had before the fix), the guide's default request is refused by ``CreateTrainingJob`` with SageMaker's
``AccessDeniedException`` and nothing is created; with the shipped template the same request creates its job
(``test_demo_submit``, which runs under the same authorization, and the run end to end).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import DEFAULT_REGION
from devtools.local_aws.template import platform_template
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


def test_the_kms_buckets_take_writes_under_the_platform_key_only() -> None:
    """A write that names no encryption (the bucket's default applies) or the platform key passes the bucket
    policy's WRITE_KEY_STATEMENTS; one under another key, SSE-S3 or ``aws:kms`` without a key is denied by them."""
    with LocalAws() as aws:
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
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="submitter/client-tokens/")["Contents"]
        assert sorted(o["Key"] for o in listed) == [
            "submitter/client-tokens/a.json",
            "submitter/client-tokens/b.json",
        ]  # nothing half-done
