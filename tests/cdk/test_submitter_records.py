"""The submitter's client-token records (least-privilege grants, only the submitter writes them, never
expired) and training instance types."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re

import aws_cdk as cdk
import pytest

from platform_constructs.submitter.construct import RECORD_WRITE_ACTIONS
from platform_constructs.submitter.runtime import settings
from platform_spec.errors import FieldError
from platform_spec.tracking import MLFLOW_LOGGING_ACTIONS, TENSORBOARD_OUTPUT_PREFIX
from stacks.config import ConfigError, load_config

pytestmark = pytest.mark.xdist_group("cdk")


def _submitter_statements(synth) -> list[dict]:
    found = []
    for logical_id, resource in synth.of_type("AWS::IAM::Policy").items():
        if logical_id.startswith("SubmitterRole"):
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return found


def _actions(statement) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def test_the_function_is_told_where_the_records_live(default_synth):
    stack = default_synth.stack
    env = default_synth.resources[default_synth.logical_id(stack.submitter.function)]["Properties"]["Environment"][
        "Variables"
    ]
    output = default_synth.logical_id(stack.buckets.output)
    assert env[settings.ENV_CLIENT_TOKEN_RECORDS] == {
        "Fn::Join": ["", ["s3://", {"Ref": output}, f"/{settings.CLIENT_TOKEN_RECORDS_PREFIX}"]]
    }


def test_the_submitter_reads_and_writes_records_under_their_prefix_only(default_synth):
    stack = default_synth.stack
    output = default_synth.logical_id(stack.buckets.output)
    key = default_synth.logical_id(stack.buckets.encryption_key)
    found = _submitter_statements(default_synth)
    s3 = [s for s in found if any(a.startswith("s3:") for a in _actions(s))]
    by_sid = {s.get("Sid"): s for s in s3}
    # beside the records: the run store and the checkpoints (tests/cdk/test_runs_infrastructure.py)
    assert set(by_sid) == {"ClientTokenRecords", "ListClientTokenRecords", "RunRecords", "RunRecordsRead",
                           "ListRunRecords", "CheckpointsRead", "ListCheckpoints", "ModelFoldersRead",
                           "RunCheckpointsRead", "ListRunCheckpoints", "RunCheckpointsPrune"}, s3  # fmt: skip
    # a request's init_from folder: its config.json and weights' index or file, nothing else of the data
    data = default_synth.logical_id(stack.buckets.data)
    assert _actions(by_sid["ModelFoldersRead"]) == ["s3:GetObject"]
    assert sorted(by_sid["ModelFoldersRead"]["Resource"], key=json.dumps) == [
        {"Fn::Join": ["", [{"Fn::GetAtt": [data, "Arn"]}, f"/*{name}"]]}
        for name in ("config.json", "model.safetensors", "model.safetensors.index.json")
    ]
    objects = by_sid["ClientTokenRecords"]
    assert sorted(_actions(objects)) == ["s3:GetObject", "s3:PutObject"]  # no delete: a record is never removed
    assert objects["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [output, "Arn"]}, f"/{settings.CLIENT_TOKEN_RECORDS_PREFIX}*"]]
    }
    listing = by_sid["ListClientTokenRecords"]
    assert _actions(listing) == ["s3:ListBucket"]
    assert listing["Resource"] == {"Fn::GetAtt": [output, "Arn"]}
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"{settings.CLIENT_TOKEN_RECORDS_PREFIX}*"]}}
    kms = [s for s in found if any(a.startswith("kms:") for a in _actions(s))]
    assert kms and all(s["Resource"] == {"Fn::GetAtt": [key, "Arn"]} for s in kms)
    assert sorted({a for s in kms for a in _actions(s)}) == ["kms:Decrypt", "kms:GenerateDataKey"]
    search = [s for s in found if "sagemaker:Search" in _actions(s)]
    assert search == [{"Action": "sagemaker:Search", "Effect": "Allow", "Resource": "*", "Sid": "SearchTrainingJobs"}]


def test_no_lifecycle_rule_expires_a_current_record(default_synth):
    """Noncurrent versions may expire; current objects (the records) must stay as long as the bucket."""
    output = default_synth.resources[default_synth.logical_id(default_synth.stack.buckets.output)]["Properties"]
    rules = output["LifecycleConfiguration"]["Rules"]
    assert rules and output["VersioningConfiguration"] == {"Status": "Enabled"}
    for rule in rules:
        assert not {"ExpirationInDays", "ExpirationDate"} & set(rule), rule
    assert json.dumps(rules).count("NoncurrentVersionExpiration") == 1


def test_the_default_allows_no_type_training_jobs_refuse(default_synth):
    from platform_spec.catalogue import INSTANCE_TYPES

    config = load_config(cdk.App().node, environ={})
    assert "ml.u-p6e-gb200x72" in INSTANCE_TYPES and "ml.u-p6e-gb200x72" not in config.allowed_instance_types
    assert "ml.p6e-gb200.36xlarge" not in config.allowed_instance_types  # arm64 host CPUs: the image is amd64
    function = default_synth.resources[default_synth.logical_id(default_synth.stack.submitter.function)]
    allowed = function["Properties"]["Environment"]["Variables"][settings.ENV_ALLOWED_INSTANCE_TYPES].split(",")
    assert "ml.u-p6e-gb200x36" not in allowed and "ml.u-p6e-gb200x72" not in allowed


@pytest.mark.parametrize("ultraserver", ["ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72"])
def test_configuration_refuses_a_type_create_training_job_does_not_accept(ultraserver):
    app = cdk.App(context={"allowedInstanceTypes": ["ml.p6-b200.48xlarge", ultraserver]})
    with pytest.raises(ConfigError) as raised:
        load_config(app.node, environ={})
    assert raised.value.key == "allowedInstanceTypes[1]" and raised.value.value == ultraserver
    assert "CreateTrainingJob accepts" in str(raised.value)


def test_the_construct_refuses_a_type_create_training_job_does_not_accept():
    import dataclasses

    from platform_constructs.submitter.construct import JobSubmitterProps, _validate

    fields = {f.name: None for f in dataclasses.fields(JobSubmitterProps) if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING}  # fmt: skip
    props = JobSubmitterProps(**{**fields, "default_instance_type": "ml.p5.48xlarge",
                                 "allowed_instance_types": ["ml.p5.48xlarge", "ml.u-p6e-gb200x72"]})  # fmt: skip
    with pytest.raises(
        ValueError, match=r"allowed_instance_types: \['ml.u-p6e-gb200x72'\] are not accepted by CreateTrainingJob"
    ):
        _validate(props)
    # the capacity order: the one rule of platform_spec.capacity, refused as a field error naming the prop
    props = dataclasses.replace(props, allowed_instance_types=["ml.p5.48xlarge"], capacity_fallback=["spot", "spot"])
    with pytest.raises(FieldError) as refused:
        _validate(props)
    assert str(refused.value) == (
        "JobSubmitterProps.capacity_fallback: got ['spot', 'spot']; expected a non-empty order of distinct values "
        "from training-plan, spot, on-demand ('spot' is listed more than once)"
    )


# -- only the submitter writes or deletes a record ------------------------------------------------

RECORD_KEY = f"{settings.CLIENT_TOKEN_RECORDS_PREFIX}{hashlib.sha256(b'tok-1').hexdigest()}.json"
AUTO_DELETE_ROLE = "CustomS3AutoDeleteObjectsCustomResourceProviderRole"


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _resolve(value, synth) -> str:
    """A policy Resource as an ARN pattern: bucket ARNs by logical ID (``arn:aws:s3:::<id>``), pseudo
    parameters by their value, every other token as ``*`` (it might be anything)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Fn::Join":
            return argument[0].join(_resolve(part, synth) for part in argument[1])
        if (
            function == "Fn::GetAtt"
            and argument[1] == "Arn"
            and synth.resources.get(argument[0], {}).get("Type") == "AWS::S3::Bucket"
        ):
            return f"arn:aws:s3:::{argument[0]}"
        if function == "Ref" and synth.resources.get(argument, {}).get("Type") == "AWS::S3::Bucket":
            return argument
        if function == "Ref" and argument == "AWS::Partition":
            return "aws"
    return "*"


def _matches(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value.lower(), pattern.lower())  # IAM: '*' and '?' wildcards, actions case-insensitive


def _writes_record(statement: dict, record_arn: str, synth) -> list[str]:
    """The record-changing actions an Allow statement grants on ``record_arn`` (wildcards, NotAction and
    NotResource resolved)."""
    if "NotAction" in statement:
        actions = [a for a in RECORD_WRITE_ACTIONS if not any(_matches(p, a) for p in _as_list(statement["NotAction"]))]
    else:
        actions = [a for a in RECORD_WRITE_ACTIONS if any(_matches(p, a) for p in _as_list(statement["Action"]))]
    if "NotResource" in statement:
        covered = not any(_matches(_resolve(r, synth), record_arn) for r in _as_list(statement["NotResource"]))
    else:
        covered = any(_matches(_resolve(r, synth), record_arn) for r in _as_list(statement["Resource"]))
    return actions if covered else []


def _allow_statements(synth) -> list[tuple[str, dict]]:
    """``(who, statement)`` for every Allow of the template: the role(s) an identity policy is attached
    to, or the principal of a bucket policy statement (as JSON)."""
    found = []
    for logical_id, resource in synth.resources.items():
        props = resource.get("Properties", {})
        kind = resource["Type"]
        if kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            owners = json.dumps(props.get("Roles", []) + props.get("Users", []) + props.get("Groups", []))
            documents = [(owners, props["PolicyDocument"])]
        elif kind == "AWS::IAM::Role":
            documents = [(logical_id, policy["PolicyDocument"]) for policy in props.get("Policies", [])]
        elif kind == "AWS::S3::BucketPolicy":
            documents = [(None, props["PolicyDocument"])]
        else:
            continue
        for owner, document in documents:
            for statement in _as_list(document["Statement"]):
                if statement["Effect"] == "Allow":
                    found.append((owner if owner is not None else json.dumps(statement.get("Principal")), statement))
    return found


def test_the_record_check_resolves_wildcards(default_synth):
    output = default_synth.logical_id(default_synth.stack.buckets.output)
    record = f"arn:aws:s3:::{output}/{RECORD_KEY}"
    whole_bucket = {"Fn::Join": ["", [{"Fn::GetAtt": [output, "Arn"]}, "/*"]]}
    # the execution role's grant before the fix: PutObject/DeleteObject on every object of the output bucket
    assert _writes_record(
        {"Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": whole_bucket}, record, default_synth
    ) == ["s3:PutObject", "s3:DeleteObject"]
    assert _writes_record({"Action": "s3:*", "Resource": "*"}, record, default_synth) == list(RECORD_WRITE_ACTIONS)
    assert _writes_record({"Action": "s3:Delete*", "Resource": "arn:aws:s3:::*/submitter/*"}, record, default_synth)
    assert _writes_record({"NotAction": "s3:GetObject", "NotResource": "arn:aws:s3:::other/*"}, record, default_synth)
    assert _writes_record({"Action": "s3:PutObject", "Resource": {"Fn::ImportValue": "x"}}, record, default_synth)
    jobs_only = {"Fn::Join": ["", [{"Fn::GetAtt": [output, "Arn"]}, f"/{settings.TRAINING_JOB_OUTPUT_PREFIX}*"]]}
    assert not _writes_record({"Action": "s3:PutObject", "Resource": jobs_only}, record, default_synth)
    assert not _writes_record(
        {"Action": ["s3:GetObject*", "s3:List*"], "Resource": whole_bucket}, record, default_synth
    )


def test_no_role_but_the_submitters_may_write_or_delete_a_record(default_synth, variant_synth):
    """Before: the execution role (every training job) had s3:PutObject/DeleteObject on the whole output
    bucket, so a job could overwrite or delete the idempotency lock of any client token."""
    for synth in (default_synth, variant_synth):
        output = synth.logical_id(synth.stack.buckets.output)
        submitter_role = synth.logical_id(synth.stack.submitter.role)
        continuation_role = synth.logical_id(synth.stack.submitter.continuation_role)
        record = f"arn:aws:s3:::{output}/{RECORD_KEY}"
        writers = {}
        for who, statement in _allow_statements(synth):
            granted = _writes_record(statement, record, synth)
            if granted:
                writers.setdefault(who, set()).update(granted)
        # no delete: released by overwrite; the continuation submits a run's next segment through the same code
        assert writers.pop(json.dumps([{"Ref": submitter_role}])) == {"s3:PutObject"}
        assert writers.pop(json.dumps([{"Ref": continuation_role}])) == {"s3:PutObject"}
        if synth is variant_synth:  # removalPolicy=destroy: CDK's function that empties the bucket on stack deletion
            (who,) = [w for w in writers if AUTO_DELETE_ROLE in w]
            assert writers.pop(who) == {"s3:DeleteObject", "s3:DeleteObjectVersion"}  # s3:DeleteObject*, nothing more
        assert writers == {}


def test_the_output_bucket_denies_record_writes_to_everyone_but_the_submitter(default_synth, variant_synth):
    for synth in (default_synth, variant_synth):
        output = synth.logical_id(synth.stack.buckets.output)
        (policy,) = [
            r["Properties"]["PolicyDocument"]
            for r in synth.of_type("AWS::S3::BucketPolicy").values()
            if r["Properties"]["Bucket"] == {"Ref": output}
        ]
        (deny,) = [s for s in policy["Statement"] if s.get("Sid") == "ClientTokenRecordsSubmitterOnly"]
        exempt = [
            {"Fn::GetAtt": [synth.logical_id(synth.stack.submitter.role), "Arn"]},
            {"Fn::GetAtt": [synth.logical_id(synth.stack.submitter.continuation_role), "Arn"]},
        ]
        if synth is variant_synth:
            auto_delete = [i for i in synth.of_type("AWS::IAM::Role") if i.startswith(AUTO_DELETE_ROLE)]
            exempt += [{"Fn::GetAtt": [auto_delete[0], "Arn"]}]
        assert deny == {
            "Sid": "ClientTokenRecordsSubmitterOnly",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": sorted(RECORD_WRITE_ACTIONS),
            "Resource": {
                "Fn::Join": ["", [{"Fn::GetAtt": [output, "Arn"]}, f"/{settings.CLIENT_TOKEN_RECORDS_PREFIX}*"]]
            },
            "Condition": {"ArnNotEquals": {"aws:PrincipalArn": exempt}},
        }
        # no other bucket's policy mentions the records
        others = [
            r for r in synth.of_type("AWS::S3::BucketPolicy").values() if r["Properties"]["Bucket"] != {"Ref": output}
        ]
        assert settings.CLIENT_TOKEN_RECORDS_PREFIX not in json.dumps(others)


def test_training_jobs_write_the_output_bucket_below_their_output_prefix_only(default_synth):
    output = default_synth.logical_id(default_synth.stack.buckets.output)
    role = default_synth.logical_id(default_synth.stack.execution_role.role)
    statements = [s for who, s in _allow_statements(default_synth) if who == json.dumps([{"Ref": role}])]
    writes = [s for s in statements if "s3:PutObject" in _as_list(s["Action"])]
    written = [r for s in writes for r in _as_list(s["Resource"]) if output in json.dumps(r)]
    assert sorted(written, key=json.dumps) == [
        {"Fn::Join": ["", [{"Fn::GetAtt": [output, "Arn"]}, f"/{prefix}*"]]}
        for prefix in sorted((settings.TRAINING_JOB_OUTPUT_PREFIX, TENSORBOARD_OUTPUT_PREFIX))
    ]
    for prefix in (settings.TRAINING_JOB_OUTPUT_PREFIX, TENSORBOARD_OUTPUT_PREFIX):
        assert not settings.CLIENT_TOKEN_RECORDS_PREFIX.startswith(prefix)


def test_training_jobs_log_to_this_accounts_and_regions_mlflow_tracking_servers_only(default_synth):
    role = default_synth.logical_id(default_synth.stack.execution_role.role)
    statements = [s for who, s in _allow_statements(default_synth) if who == json.dumps([{"Ref": role}])]
    mlflow = [s for s in statements if any(a.startswith("sagemaker-mlflow:") for a in _as_list(s["Action"]))]
    assert mlflow == [
        {
            "Sid": "MlflowTracking",
            "Effect": "Allow",
            "Action": sorted(MLFLOW_LOGGING_ACTIONS),
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":sagemaker:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":mlflow-tracking-server/*",
                    ],
                ]
            },
        }
    ]


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "/training-jobs/",
        "jobs",
        "jobs/*/",
        "job?/",
        "submitter/",
        "submitter/client-tokens/",
        "submitter/client-tokens/x/",
    ],
)
def test_the_execution_role_refuses_an_output_prefix_that_reaches_the_records(prefix):
    from aws_cdk import aws_ecr as ecr
    from aws_cdk import aws_s3 as s3

    from platform_constructs.execution_role import TrainingExecutionRole, TrainingExecutionRoleProps

    stack = cdk.Stack(cdk.App(), "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Bucket", "bucket-b")
    props = TrainingExecutionRoleProps(data_bucket=bucket, checkpoint_bucket=bucket, output_bucket=bucket,
                                       repository=ecr.Repository.from_repository_name(stack, "Repo", "r"),
                                       output_prefix=prefix)  # fmt: skip
    with pytest.raises(
        ValueError, match=re.escape(f"TrainingExecutionRoleProps.output_prefix: got {prefix!r}; expected a key prefix")
    ):
        TrainingExecutionRole(stack, "Role", props)
    assert not stack.node.find_child("Role").node.children  # nothing was built
