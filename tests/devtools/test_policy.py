"""IAM policy evaluation (:mod:`devtools.local_aws.policy`) on AWS's documented rules and examples, without an
emulator: the IAM User Guide's "Policy evaluation logic", "Condition operators" (``...IfExists``, ``Null``, the
negated operators and the set qualifiers), "Wildcards" and "NotAction" / "NotResource" pages, and the AWS KMS
Developer Guide's "Key policies" (the account root delegates to identity policies)."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.local_aws.policy import Policy, Request, evaluate

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/worker"
BUCKET = "arn:aws:s3:::examplebucket"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def policy(*statements: dict[str, Any], name: str = "P", resource: bool = False) -> Policy:
    return Policy.compile(name, {"Version": "2012-10-17", "Statement": list(statements)}, resource_policy=resource)


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


def request(action: str, resource: str = f"{BUCKET}/a.txt", **context: list[str]) -> Request:
    return Request(ROLE, ACCOUNT, action, resource, {k.lower(): v for k, v in context.items()})


def decide(req: Request, *identity: Policy, **kwargs: Any) -> str:
    return evaluate(req, identity, **kwargs).outcome


# --- the evaluation order -------------------------------------------------------------------------------------


def test_no_statement_is_an_implicit_deny_naming_the_identity_policies() -> None:
    decision = evaluate(request("s3:GetObject"), [policy(allow("s3:ListBucket"))])
    assert decision.outcome == "implicit-deny"
    assert decision.reason("s3:GetObject") == "because no identity-based policy allows the s3:GetObject action"


def test_an_explicit_deny_wins_over_any_allow_in_any_policy() -> None:
    identity = policy(allow("s3:*"), deny("s3:DeleteObject", Sid="NoDeletes"), name="Mine")
    decision = evaluate(request("s3:DeleteObject"), [identity])
    assert (decision.outcome, decision.denied_by) == ("explicit-deny", ("Mine#NoDeletes",))
    assert decision.reason("s3:DeleteObject") == "with an explicit deny in an identity-based policy"
    bucket = policy({**allow("s3:*", f"{BUCKET}/*"), "Principal": {"AWS": ROLE}}, name="B", resource=True)
    bucket_deny = policy(
        {**deny("s3:PutObject", f"{BUCKET}/*"), "Principal": "*"}, {**allow("s3:*"), "Principal": "*"}, resource=True
    )
    assert decide(request("s3:PutObject"), policy(allow("s3:*")), resource_policy=bucket_deny) == "explicit-deny"
    assert decide(request("s3:PutObject"), resource_policy=bucket) == "allowed"  # same account: either allows


def test_a_resource_policy_statement_for_another_principal_does_not_apply() -> None:
    other = policy({**deny("s3:*"), "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/other"}}, resource=True)
    assert decide(request("s3:GetObject"), policy(allow("s3:GetObject")), resource_policy=other) == "allowed"
    everyone_but_me = policy({**deny("s3:*"), "NotPrincipal": {"AWS": ROLE}}, resource=True)
    assert decide(request("s3:GetObject"), policy(allow("s3:*")), resource_policy=everyone_but_me) == "allowed"


def test_a_permissions_boundary_caps_what_identity_policies_allow_and_grants_nothing() -> None:
    """IAM User Guide, "Permissions boundaries": the effective permissions are the intersection."""
    identity, boundary = policy(allow(["s3:*", "iam:CreateUser"])), policy(allow("s3:GetObject"), name="Cap")
    assert decide(request("s3:GetObject"), identity, boundary=boundary) == "allowed"
    capped = evaluate(request("s3:PutObject"), [identity], boundary=boundary)
    assert (capped.outcome, capped.kind) == ("implicit-deny", "permissions boundary")
    assert capped.reason("s3:PutObject") == "because no permissions boundary allows the s3:PutObject action"
    assert decide(request("s3:GetObject"), boundary=policy(allow("*"))) == "implicit-deny"  # the cap is not a grant
    assert decide(request("s3:GetObject"), identity, boundary=policy(allow("*"), deny("s3:Get*"))) == "explicit-deny"


# --- KMS: the key policy must allow, directly or through the account root ------------------------------------


def test_kms_needs_the_key_policy_and_the_account_root_delegates_to_iam() -> None:
    identity = policy(allow("kms:Decrypt", KEY))
    root = policy({**allow("kms:*"), "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}}, resource=True)
    direct = policy({**allow("kms:Decrypt"), "Principal": {"AWS": ROLE}}, resource=True)
    others = policy({**allow("kms:*"), "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/admin"}}, resource=True)
    decrypt = request("kms:Decrypt", KEY)
    assert decide(decrypt, identity, resource_policy=root, key_policy=True) == "allowed"
    assert decide(decrypt, resource_policy=root, key_policy=True) == "implicit-deny"  # delegation needs IAM's allow
    assert decide(decrypt, resource_policy=direct, key_policy=True) == "allowed"  # the key policy alone suffices
    refused = evaluate(decrypt, [identity], resource_policy=others, key_policy=True)
    assert (refused.outcome, refused.kind) == ("implicit-deny", "resource-based policy")  # IAM alone never does


# --- Action / NotAction, Resource / NotResource, wildcards and case -----------------------------------------


def test_not_action_and_not_resource_match_everything_else() -> None:
    """IAM User Guide, "NotAction": Allow with NotAction iam:* allows every other service's actions."""
    everything_but_iam = policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})
    assert decide(request("s3:GetObject"), everything_but_iam) == "allowed"
    assert decide(request("iam:CreateUser", "*"), everything_but_iam) == "implicit-deny"
    but_one_bucket = policy({"Effect": "Allow", "Action": "s3:*", "NotResource": [BUCKET, f"{BUCKET}/*"]})
    assert decide(request("s3:GetObject", "arn:aws:s3:::other/a"), but_one_bucket) == "allowed"
    assert decide(request("s3:GetObject"), but_one_bucket) == "implicit-deny"


def test_actions_match_without_case_and_resources_with_it() -> None:
    """IAM User Guide: action names are case-insensitive; ARNs (an S3 key included) are case-sensitive."""
    assert decide(request("s3:GetObject"), policy(allow("S3:getobject"))) == "allowed"
    assert decide(request("s3:GetObject"), policy(allow("s3:*", f"{BUCKET}/A.txt"))) == "implicit-deny"
    assert decide(request("s3:GetObject"), policy(allow("s3:*", f"{BUCKET}/a.txt"))) == "allowed"


def test_wildcards_star_any_run_question_mark_one_character() -> None:
    logs = policy(allow("s3:Get*", f"{BUCKET}/logs/*"))
    assert decide(request("s3:GetObject", f"{BUCKET}/logs/2024/a"), logs) == "allowed"  # * crosses "/"
    assert decide(request("s3:PutObject", f"{BUCKET}/logs/2024/a"), logs) == "implicit-deny"
    assert decide(request("s3:GetObject"), policy(allow("s3:*", f"{BUCKET}/?.txt"))) == "allowed"
    assert decide(request("s3:GetObject", f"{BUCKET}/ab.txt"), policy(allow("s3:*", f"{BUCKET}/?.txt"))) == (
        "implicit-deny"
    )
    assert decide(request("s3:GetObject", f"{BUCKET}/a.txt"), policy(allow("s3:*", f"{BUCKET}/a.tx"))) == (
        "implicit-deny"  # anchored: a prefix is not a match
    )


# --- conditions -------------------------------------------------------------------------------------------------


def test_a_missing_key_fails_a_condition_but_passes_a_negated_one() -> None:
    """IAM User Guide, "Condition operators": a key not in the request fails the condition, except a negated
    operator's (StringNotEquals, ArnNotLike, ...), which is true."""
    equals = policy(allow("s3:PutObject", Condition={"StringEquals": {"s3:x-amz-acl": "private"}}))
    assert decide(request("s3:PutObject"), equals) == "implicit-deny"
    not_equals = policy(allow("s3:PutObject", Condition={"StringNotEquals": {"s3:x-amz-acl": "public-read"}}))
    assert decide(request("s3:PutObject"), not_equals) == "allowed"
    assert decide(request("s3:PutObject", **{"s3:x-amz-acl": ["public-read"]}), not_equals) == "implicit-deny"


def test_if_exists_is_true_without_the_key_and_tests_it_when_present() -> None:
    """IAM User Guide, "...IfExists condition operators": the ec2:InstanceType example."""
    types = policy(allow("ec2:RunInstances", Condition={"StringLikeIfExists": {"ec2:InstanceType": ["t1.*", "m*"]}}))
    run = request("ec2:RunInstances", "*")
    assert decide(run, types) == "allowed"
    assert decide(request("ec2:RunInstances", "*", **{"ec2:InstanceType": ["t1.micro"]}), types) == "allowed"
    assert decide(request("ec2:RunInstances", "*", **{"ec2:InstanceType": ["p5.48xlarge"]}), types) == ("implicit-deny")


def test_a_deny_written_with_string_not_equals_if_exists_denies_requests_without_the_header() -> None:
    """Why the platform's bucket policies pair the negated test with Null false (constructs/buckets.py)."""
    encryption = "s3:x-amz-server-side-encryption"
    if_exists = policy({**deny("s3:PutObject"), "Principal": "*", "Condition": {"StringNotEqualsIfExists": {
        encryption: "aws:kms"}}}, resource=True)  # fmt: skip
    present = policy({**deny("s3:PutObject"), "Principal": "*", "Condition": {
        "StringNotEquals": {encryption: "aws:kms"}, "Null": {encryption: "false"}}}, resource=True)  # fmt: skip
    identity = policy(allow("s3:PutObject"))
    assert decide(request("s3:PutObject"), identity, resource_policy=if_exists) == "explicit-deny"
    assert decide(request("s3:PutObject"), identity, resource_policy=present) == "allowed"
    for bucket_policy in (if_exists, present):
        assert decide(request("s3:PutObject", **{encryption: ["AES256"]}), identity, resource_policy=bucket_policy) == (
            "explicit-deny"
        )
        assert decide(
            request("s3:PutObject", **{encryption: ["aws:kms"]}), identity, resource_policy=bucket_policy
        ) == ("allowed")


def test_null_tests_whether_the_key_is_present() -> None:
    """IAM User Guide, "Condition operator to check existence of condition keys": Null true = absent."""
    absent = policy(allow("s3:GetObject", Condition={"Null": {"aws:TokenIssueTime": "true"}}))
    present = policy(allow("s3:GetObject", Condition={"Null": {"aws:TokenIssueTime": "false"}}))
    with_token = request("s3:GetObject", **{"aws:TokenIssueTime": ["2026-01-01T00:00:00Z"]})
    assert (decide(request("s3:GetObject"), absent), decide(with_token, absent)) == ("allowed", "implicit-deny")
    assert (decide(request("s3:GetObject"), present), decide(with_token, present)) == ("implicit-deny", "allowed")


def test_set_qualifiers_on_multivalued_keys() -> None:
    """IAM User Guide, "Set operators for multivalued context keys": ForAnyValue needs one match, ForAllValues
    every value to match, and is true when the key is absent."""
    any_of = policy(allow("ec2:CreateTags", Condition={"ForAnyValue:StringEquals": {"aws:TagKeys": ["team", "cost"]}}))
    all_of = policy(allow("ec2:CreateTags", Condition={"ForAllValues:StringEquals": {"aws:TagKeys": ["team", "cost"]}}))
    mixed = request("ec2:CreateTags", "*", **{"aws:TagKeys": ["team", "owner"]})
    within = request("ec2:CreateTags", "*", **{"aws:TagKeys": ["cost", "team"]})
    untagged = request("ec2:CreateTags", "*")
    assert [decide(r, any_of) for r in (mixed, within, untagged)] == ["allowed", "allowed", "implicit-deny"]
    assert [decide(r, all_of) for r in (mixed, within, untagged)] == ["implicit-deny", "allowed", "allowed"]


def test_several_values_are_or_and_several_keys_and_operators_are_and() -> None:
    both = policy(allow("s3:PutObject", Condition={
        "StringEquals": {"s3:x-amz-acl": ["private", "bucket-owner-full-control"]},
        "Bool": {"aws:SecureTransport": "true"},
    }))  # fmt: skip
    tls = {"aws:SecureTransport": ["true"]}
    assert decide(request("s3:PutObject", **{"s3:x-amz-acl": ["bucket-owner-full-control"]}, **tls), both) == "allowed"
    assert decide(request("s3:PutObject", **{"s3:x-amz-acl": ["private"]}), both) == "implicit-deny"


def test_numeric_arn_and_bool_operators() -> None:
    tls = policy({**deny("s3:*"), "Principal": "*", "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}}},
                 resource=True)  # fmt: skip
    identity = policy(allow("s3:*"))
    assert decide(request("s3:GetObject", **{"s3:TlsVersion": ["1.0"]}), identity, resource_policy=tls) == (
        "explicit-deny"
    )
    assert decide(request("s3:GetObject", **{"s3:TlsVersion": ["1.3"]}), identity, resource_policy=tls) == "allowed"
    arn = policy(allow("sqs:SendMessage", Condition={"ArnLike": {"aws:SourceArn": "arn:aws:sns:*:123456789012:*"}}))
    sns = f"arn:aws:sns:us-east-1:{ACCOUNT}:alarms"
    assert decide(request("sqs:SendMessage", "*", **{"aws:SourceArn": [sns]}), arn) == "allowed"
    other_account = "arn:aws:sns:us-east-1:111122223333:alarms"
    assert decide(request("sqs:SendMessage", "*", **{"aws:SourceArn": [other_account]}), arn) == "implicit-deny"


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        ({"Effect": "Permit", "Action": "s3:*", "Resource": "*"}, r"P#0\.Effect: expected Allow or Deny"),
        ({"Effect": "Allow", "Resource": "*"}, "P#0: expected exactly one of Action and NotAction"),
        (allow("s3:*", Condition={"DateGreaterThan": {"aws:CurrentTime": "2026"}}), "'DateGreaterThan': expected one"),
        (allow("s3:*", Condition={"ForSome:StringEquals": {"k": "v"}}), "expected ForAnyValue: or ForAllValues:"),
    ],
)
def test_a_malformed_statement_or_an_unknown_operator_is_refused_naming_it(statement: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        policy(statement)
