"""Template assertions on every resource of the training platform stack."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
from aws_cdk.assertions import Match

from platform_constructs.buckets import (
    CURRENT_OBJECT_BUCKET_ACTIONS,
    CURRENT_OBJECT_KEY_ACTIONS,
    CURRENT_OBJECT_OBJECT_ACTIONS,
    HISTORY_ERASING_ACTIONS,
    PRUNED_CHECKPOINTS_RULE,
    WRITE_KEY_STATEMENTS,
)
from platform_constructs.submitter.construct import DEFAULT_RESERVED_CONCURRENCY, HANDLER
from platform_constructs.submitter.runtime import settings
from platform_constructs.trainer_image import copy_settings_digest
from platform_spec.capacity import CAPACITY_TYPES
from platform_spec.processing import PREPARED_PREFIX
from platform_spec.runs import RUN_CHECKPOINT_PREFIX
from platform_spec.trainer_image import BASE_IMAGE

pytestmark = pytest.mark.xdist_group("cdk")


def getatt_arn(logical_id: str) -> dict:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def statements(synth, policy_owner_prefix: str) -> list[dict]:
    """All statements of the IAM policies whose logical ID starts with ``policy_owner_prefix``."""
    found = []
    for logical_id, resource in synth.of_type("AWS::IAM::Policy").items():
        if logical_id.startswith(policy_owner_prefix):
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return found


def as_list(value):
    return value if isinstance(value, list) else [value]


# -- trainer image ------------------------------------------------------------------------------


def test_repository_scans_on_push_is_immutable_aes256_and_retained(default_synth):
    t = default_synth.template
    t.resource_count_is("AWS::ECR::Repository", 1)
    t.has_resource(
        "AWS::ECR::Repository",
        {
            "Properties": Match.object_like(
                {
                    "ImageScanningConfiguration": {"ScanOnPush": True},
                    "ImageTagMutability": "IMMUTABLE",
                    "EmptyOnDelete": False,
                }
            ),
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )
    (repo,) = default_synth.of_type("AWS::ECR::Repository").values()
    # AES256 is ECR's default and renders as no EncryptionConfiguration, or an explicit AES256 one
    encryption = repo["Properties"].get("EncryptionConfiguration", {"EncryptionType": "AES256"})
    assert encryption == {"EncryptionType": "AES256"}


@pytest.mark.parametrize(("fixture", "count"), [("default_synth", 20), ("variant_synth", 7)])
def test_repository_lifecycle_keeps_last_n_images(request, fixture, count):
    synth = request.getfixturevalue(fixture)
    (repo,) = synth.of_type("AWS::ECR::Repository").values()
    policy = json.loads(repo["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])
    (rule,) = policy["rules"]
    assert rule["selection"] == {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": count}
    assert rule["action"] == {"type": "expire"}


def test_destroy_policy_empties_and_deletes_the_repository(variant_synth):
    variant_synth.template.has_resource(
        "AWS::ECR::Repository",
        {"Properties": Match.object_like({"EmptyOnDelete": True}), "DeletionPolicy": "Delete"},
    )


def test_image_is_copied_into_the_platform_repository_under_the_asset_hash(default_synth):
    stack = default_synth.stack
    repo_id = default_synth.logical_id(stack.trainer_image.repository)
    tag = stack.trainer_image.image_tag
    assert re.fullmatch(r"[0-9a-f]{64}-[0-9a-f]{8}", tag)

    assets = json.loads((default_synth.outdir / f"{stack.stack_name}.assets.json").read_text())
    (image_hash,) = assets["dockerImages"]
    # the tag is the content hash of the build context, then a digest of the copy settings
    assert tag == f"{image_hash}-{copy_settings_digest(stack.trainer_image.copy_timeout)}"
    source = assets["dockerImages"][image_hash]["source"]
    assert source["dockerFile"] == "training/Dockerfile"
    assert source["platform"] == "linux/amd64"
    # the base image comes from its one home (the Dockerfile's ARG BASE_IMAGE has no default)
    assert source["dockerBuildArgs"] == {"BASE_IMAGE": BASE_IMAGE}

    ((copy_id, copy),) = default_synth.of_type("Custom::CDKECRDeployment").items()
    # a new image is a new copy resource: rollbacks never re-push a tag into the immutable repository
    assert tag[:16] in copy_id and tag[-8:] in copy_id
    dest = json.dumps(copy["Properties"]["DestImage"])
    assert f'{{"Ref": "{repo_id}"}}' in dest and dest.endswith(f':{tag}"]]}}')
    assert "container-assets" in json.dumps(copy["Properties"]["SrcImage"])
    assert copy["Properties"]["ImageArch"] == "amd64"


def test_image_copy_fails_fast_with_a_service_timeout_above_the_copy_function_timeout(default_synth):
    ((_copy_id, copy),) = default_synth.of_type("Custom::CDKECRDeployment").items()
    service_token = copy["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
    function_timeout = default_synth.resources[service_token]["Properties"]["Timeout"]
    assert function_timeout == 900  # cdk-ecr-deployment's copy function: 15 minutes
    # CloudFormation's default is 3600 s; 20 minutes: the function's timeout plus 5 minutes
    assert copy["Properties"]["ServiceTimeout"] == 1200
    assert function_timeout < copy["Properties"]["ServiceTimeout"] <= 3600
    image = default_synth.stack.trainer_image
    assert (image.copy_function_timeout.to_seconds(), image.copy_timeout.to_seconds()) == (900, 1200)
    # Every property but the images, the function and ImageArch (the platform, part of the asset hash) is in the
    # tag's copy-settings digest, so none changes in place (an Update re-pushes the immutable tag). A property
    # added by a cdk-ecr-deployment upgrade fails here until copy_settings_digest covers it.
    assert set(copy["Properties"]) - {"ServiceToken", "SrcImage", "DestImage", "ImageArch"} == {"ServiceTimeout"}


def test_image_build_context_holds_only_the_trainer_and_its_pure_packages(default_synth):
    assets = json.loads((default_synth.outdir / "TrainingPlatform.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    context = default_synth.outdir / image["source"]["directory"]
    assert sorted(p.name for p in context.iterdir()) == ["model_families", "platform_spec", "training"]
    assert (context / "training" / "Dockerfile").is_file()
    assert (context / "platform_spec" / "catalogue.py").is_file()
    assert (context / "model_families" / "gpt" / "__init__.py").is_file()
    assert not list(context.rglob("__pycache__")) and not list(context.rglob("*.pyc"))


def test_copy_function_role_is_scoped_to_the_two_repositories(default_synth):
    repo_arn = getatt_arn(default_synth.logical_id(default_synth.stack.trainer_image.repository))
    found = statements(default_synth, "TrainerImageDeploymentRole")
    assert found
    for statement in found:
        resources = as_list(statement["Resource"])
        if "*" in resources:
            assert as_list(statement["Action"]) == ["ecr:GetAuthorizationToken"]
            continue
        for resource in resources:
            assert resource == repo_arn or "container-assets" in json.dumps(resource), resource
    push = [s for s in found if "ecr:PutImage" in as_list(s["Action"])]
    assert push and all(s["Resource"] == repo_arn for s in push)  # never pushes to the asset repository


# -- buckets -----------------------------------------------------------------------------------


def bucket_ids(synth) -> dict[str, str]:
    buckets = synth.stack.buckets
    return {name: synth.logical_id(getattr(buckets, name)) for name in ("data", "checkpoints", "output", "access_logs")}


def test_four_buckets_block_public_access_and_enforce_owner(default_synth):
    t = default_synth.template
    t.resource_count_is("AWS::S3::Bucket", 4)
    for resource in default_synth.of_type("AWS::S3::Bucket").values():
        props = resource["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}


def test_data_buckets_use_the_kms_key_with_bucket_key_and_logs_use_sse_s3(default_synth):
    ids = bucket_ids(default_synth)
    key_id = default_synth.logical_id(default_synth.stack.buckets.encryption_key)
    resources = default_synth.resources
    for name in ("data", "checkpoints", "output"):
        (rule,) = resources[ids[name]]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule == {
            "BucketKeyEnabled": True,
            "ServerSideEncryptionByDefault": {"KMSMasterKeyID": getatt_arn(key_id), "SSEAlgorithm": "aws:kms"},
        }, name
    (rule,) = resources[ids["access_logs"]]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    default_synth.template.has_resource(
        "AWS::KMS::Key", {"Properties": Match.object_like({"EnableKeyRotation": True}), "DeletionPolicy": "Retain"}
    )


def test_every_bucket_policy_denies_insecure_transport_and_old_tls(default_synth):
    ids = bucket_ids(default_synth)
    policies = {
        resource["Properties"]["Bucket"]["Ref"]: resource["Properties"]["PolicyDocument"]["Statement"]
        for resource in default_synth.of_type("AWS::S3::BucketPolicy").values()
    }
    assert set(policies) == set(ids.values())
    for bucket_id, statements_ in policies.items():
        denies = [s for s in statements_ if s["Effect"] == "Deny" and s["Action"] == "s3:*"]
        conditions = [s["Condition"] for s in denies]
        assert {"Bool": {"aws:SecureTransport": "false"}} in conditions, bucket_id
        assert {"NumericLessThan": {"s3:TlsVersion": 1.2}} in conditions, bucket_id
        for deny in denies:
            assert deny["Principal"] == {"AWS": "*"}
            assert getatt_arn(bucket_id) in deny["Resource"]


def test_kms_buckets_refuse_writes_under_another_key_and_jobs_write_under_the_platform_key(default_synth):
    ids = bucket_ids(default_synth)
    key_arn = getatt_arn(default_synth.logical_id(default_synth.stack.buckets.encryption_key))
    policies = {
        resource["Properties"]["Bucket"]["Ref"]: resource["Properties"]["PolicyDocument"]["Statement"]
        for resource in default_synth.of_type("AWS::S3::BucketPolicy").values()
    }
    for name in ("data", "checkpoints", "output"):
        denies = {s["Sid"]: s for s in policies[ids[name]] if s.get("Sid") in WRITE_KEY_STATEMENTS}
        assert set(denies) == set(WRITE_KEY_STATEMENTS), name
        assert all(s["Effect"] == "Deny" and s["Action"] == "s3:PutObject" for s in denies.values())
        assert denies["DenyWritesUnderAnotherKey"]["Condition"] == {
            "StringNotEquals": {"s3:x-amz-server-side-encryption-aws-kms-key-id": key_arn},
            "Null": {"s3:x-amz-server-side-encryption-aws-kms-key-id": "false"},
        }
    assert not any(s.get("Sid") in WRITE_KEY_STATEMENTS for s in policies[ids["access_logs"]])  # SSE-S3 by design
    for function in default_synth.of_type("AWS::Lambda::Function").values():
        env = function["Properties"].get("Environment", {}).get("Variables", {})
        if settings.ENV_OUTPUT_BUCKET in env:  # the submitter, the reader, the continuation
            assert env[settings.ENV_OUTPUT_KMS_KEY_ARN] == key_arn


def test_versioning_on_checkpoints_and_output_only(default_synth):
    ids = bucket_ids(default_synth)
    resources = default_synth.resources
    for name in ("checkpoints", "output"):
        assert resources[ids[name]]["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    for name in ("data", "access_logs"):
        assert "VersioningConfiguration" not in resources[ids[name]]["Properties"]


def test_lifecycle_aborts_multipart_uploads_and_expires_noncurrent_versions(default_synth):
    ids = bucket_ids(default_synth)
    resources = default_synth.resources
    for name, bucket_id in ids.items():
        rules = resources[bucket_id]["Properties"]["LifecycleConfiguration"]["Rules"]
        assert {
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
            "Id": "AbortIncompleteMultipartUploads",
            "Status": "Enabled",
        } in rules, name
        expiring = [r for r in rules if "NoncurrentVersionExpiration" in r]
        if name in ("checkpoints", "output"):
            # a pruned run checkpoint (one noncurrent version per object) expires too: the rule on the run
            # checkpoint prefix keeps no newer noncurrent versions (runtime/checkpoint_prune.py)
            pruned = [{"Id": PRUNED_CHECKPOINTS_RULE, "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
                       "Prefix": RUN_CHECKPOINT_PREFIX, "Status": "Enabled"}] if name == "checkpoints" else []  # fmt: skip
            assert expiring == [
                {
                    "ExpiredObjectDeleteMarker": True,
                    "Id": "ExpireNoncurrentVersions",
                    "NoncurrentVersionExpiration": {"NewerNoncurrentVersions": 3, "NoncurrentDays": 30},
                    "Status": "Enabled",
                },
                *pruned,
            ], name
        else:
            assert expiring == [], name


def test_server_access_logs_go_to_the_logs_bucket(default_synth):
    ids = bucket_ids(default_synth)
    resources = default_synth.resources
    for name in ("data", "checkpoints", "output"):
        assert resources[ids[name]]["Properties"]["LoggingConfiguration"] == {
            "DestinationBucketName": {"Ref": ids["access_logs"]},
            "LogFilePrefix": f"{name}/",
        }
    assert "LoggingConfiguration" not in resources[ids["access_logs"]]["Properties"]


def test_log_delivery_is_granted_by_bucket_policy_not_acl(default_synth):
    ids = bucket_ids(default_synth)
    (policy,) = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in default_synth.of_type("AWS::S3::BucketPolicy").values()
        if r["Properties"]["Bucket"] == {"Ref": ids["access_logs"]}
    ]
    delivery = [s for s in policy if s.get("Principal") == {"Service": "logging.s3.amazonaws.com"}]
    assert delivery and all(s["Action"] == "s3:PutObject" and s["Effect"] == "Allow" for s in delivery)
    sources = json.dumps([s["Condition"] for s in delivery])
    for name in ("data", "checkpoints", "output"):
        assert ids[name] in sources, name
    for resource in default_synth.of_type("AWS::S3::Bucket").values():
        assert "AccessControl" not in resource["Properties"]


def _actions_granted(statement) -> list[str] | None:
    """The actions an Allow statement grants (``None`` for NotAction: everything not listed)."""
    if "NotAction" in statement:
        return None
    return as_list(statement["Action"])


def _grants(statement, action: str) -> bool:
    actions = _actions_granted(statement)
    if actions is None:
        return not any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in as_list(statement["NotAction"]))
    return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in actions)


def allow_statements(synth) -> list[tuple[str, dict]]:
    """``(owner logical ID, statement)`` of every Allow in an identity or bucket policy of the template."""
    found = []
    for logical_id, resource in synth.resources.items():
        props = resource.get("Properties", {})
        documents = []
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::S3::BucketPolicy"):
            documents.append(props["PolicyDocument"])
        if resource["Type"] in ("AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group"):
            documents += [policy["PolicyDocument"] for policy in props.get("Policies", [])]
        for document in documents:
            found += [(logical_id, s) for s in as_list(document["Statement"]) if s["Effect"] == "Allow"]
    return found


AUTO_DELETE_ROLE = "CustomS3AutoDeleteObjectsCustomResourceProviderRole"


def test_no_role_can_erase_the_version_history(default_synth, variant_synth):
    """Object versions on the checkpoint and output buckets are the undo history: no role may delete them,
    suspend versioning or expire them through a lifecycle change, by name or by wildcard (s3:DeleteObject*,
    s3:*, *). CDK's own auto-delete custom resource (removalPolicy=destroy only) is the one exception."""
    assert set(HISTORY_ERASING_ACTIONS) >= {"s3:DeleteObjectVersion", "s3:PutBucketVersioning"}
    exempt = []
    for synth in (default_synth, variant_synth):
        for logical_id, statement in allow_statements(synth):
            principal = json.dumps(statement.get("Principal", {}))
            erasing = [a for a in HISTORY_ERASING_ACTIONS if _grants(statement, a)]
            if AUTO_DELETE_ROLE in principal:
                exempt.append(erasing)
                continue
            assert erasing == [], (logical_id, statement)
        for logical_id, role in synth.of_type("AWS::IAM::Role").items():
            for arn in role["Properties"].get("ManagedPolicyArns", []):
                # CloudWatch Logs only: no managed policy brings S3 rights in
                assert ":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole" in json.dumps(arn), (logical_id, arn)
    # the check is not vacuous: the exempted auto-delete grants (destroy only) would have failed it
    assert len(exempt) == 4 and all("s3:DeleteObjectVersion" in e for e in exempt)
    assert not any(AUTO_DELETE_ROLE in json.dumps(s) for _, s in allow_statements(default_synth))


def test_the_history_check_catches_wildcards():
    assert _grants({"Action": "s3:DeleteObject*"}, "s3:DeleteObjectVersion")
    assert _grants({"Action": ["s3:GetObject", "s3:*"]}, "s3:DeleteObjectVersion")
    assert _grants({"Action": "*"}, "s3:PutBucketVersioning")
    assert _grants({"NotAction": "s3:GetObject"}, "s3:DeleteObjectVersion")
    assert not _grants({"NotAction": "s3:Delete*"}, "s3:DeleteObjectVersion")
    assert not _grants({"Action": ["s3:DeleteObject", "s3:PutObject"]}, "s3:DeleteObjectVersion")


def test_checkpoint_and_output_writers_get_exactly_the_current_object_actions(default_synth):
    ids = bucket_ids(default_synth)
    key_arn = getatt_arn(default_synth.logical_id(default_synth.stack.buckets.encryption_key))
    found = statements(default_synth, "ExecutionRole")
    # the output bucket below the jobs' S3OutputPath only: the submitter's client-token records sit beside it
    for name, prefix in (("checkpoints", ""), ("output", settings.TRAINING_JOB_OUTPUT_PREFIX)):
        bucket_arn = getatt_arn(ids[name])
        objects = {"Fn::Join": ["", [bucket_arn, f"/{prefix}*"]]}
        on_bucket = {a for s in found if bucket_arn in as_list(s["Resource"]) for a in as_list(s["Action"])}
        on_objects = {a for s in found if objects in as_list(s["Resource"]) for a in as_list(s["Action"])}
        assert on_bucket == set(CURRENT_OBJECT_BUCKET_ACTIONS), name
        assert on_objects == set(CURRENT_OBJECT_OBJECT_ACTIONS), name
        assert {"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"} <= on_objects
    on_key = {a for s in found if key_arn in as_list(s["Resource"]) for a in as_list(s["Action"])}
    # kms:DescribeKey comes with the data bucket's read grant
    assert on_key == set(CURRENT_OBJECT_KEY_ACTIONS) | {"kms:DescribeKey"}
    assert not [a for a in on_key if "*" in a]


def test_stateful_resources_are_retained_by_default(default_synth):
    for resource_type in ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::ECR::Repository"):
        for logical_id, resource in default_synth.of_type(resource_type).items():
            assert resource["DeletionPolicy"] == "Retain", logical_id
            assert resource["UpdateReplacePolicy"] == "Retain", logical_id
    submitter_logs = default_synth.logical_id(default_synth.stack.submitter.log_group)
    assert default_synth.resources[submitter_logs]["DeletionPolicy"] == "Retain"
    assert not default_synth.of_type("Custom::S3AutoDeleteObjects")


def test_destroy_context_deletes_and_empties_buckets(variant_synth):
    for resource_type in ("AWS::S3::Bucket", "AWS::KMS::Key"):
        for logical_id, resource in variant_synth.of_type(resource_type).items():
            assert resource["DeletionPolicy"] == "Delete", logical_id
    assert len(variant_synth.of_type("Custom::S3AutoDeleteObjects")) == 4


# -- execution role ----------------------------------------------------------------------------


def test_execution_role_trusts_sagemaker_training_jobs_of_this_account_only(default_synth):
    role_id = default_synth.logical_id(default_synth.stack.execution_role.role)
    role = default_synth.resources[role_id]["Properties"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    sources = statement["Condition"]["ArnLike"]["aws:SourceArn"]
    assert len(sources) == 2  # the account's training jobs and processing jobs (prepare-data --remote), nothing else
    assert "training-job/*" in json.dumps(sources[0]) and "processing-job/*" in json.dumps(sources[1])
    assert "ManagedPolicyArns" not in role


def test_no_role_has_sagemaker_full_access(default_synth, variant_synth):
    for synth in (default_synth, variant_synth):
        assert "AmazonSageMakerFullAccess" not in json.dumps(synth.template_json)


def test_execution_role_reads_data_and_writes_only_checkpoints_output_and_prepared_datasets(default_synth):
    ids = bucket_ids(default_synth)
    found = statements(default_synth, "ExecutionRole")
    writers = [s for s in found if "s3:PutObject" in as_list(s["Action"])]
    written = {json.dumps(r) for s in writers for r in as_list(s["Resource"])}
    assert any(ids["checkpoints"] in r for r in written) and any(ids["output"] in r for r in written)
    assert not any(ids["access_logs"] in r for r in written)
    # the data bucket: new objects below prepared/ only (processing jobs' datasets), never a delete
    data_writers = [s for s in writers if ids["data"] in json.dumps(s["Resource"])]
    assert [s.get("Sid") for s in data_writers] == ["PreparedDatasets"]
    assert sorted(as_list(data_writers[0]["Action"])) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert f'"/{PREPARED_PREFIX}*"' in json.dumps(data_writers[0]["Resource"])
    deleters = [s for s in found if any(a.startswith("s3:Delete") for a in as_list(s["Action"]))]
    assert not any(ids["data"] in json.dumps(s["Resource"]) for s in deleters)
    readers = [s for s in found if "s3:GetObject*" in as_list(s["Action"])]
    assert any(getatt_arn(ids["data"]) in as_list(s["Resource"]) for s in readers)
    assert not any(ids["access_logs"] in json.dumps(s) for s in found)


def test_execution_role_pulls_from_the_trainer_repository_only(default_synth):
    repo_arn = getatt_arn(default_synth.logical_id(default_synth.stack.trainer_image.repository))
    for statement in statements(default_synth, "ExecutionRole"):
        actions = as_list(statement["Action"])
        ecr = [a for a in actions if a.startswith("ecr:")]
        if not ecr:
            continue
        if ecr == ["ecr:GetAuthorizationToken"]:
            assert statement["Resource"] == "*"
        else:
            assert statement["Resource"] == repo_arn
            assert set(ecr) == {"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}


def test_execution_role_logs_and_metrics_are_scoped(default_synth):
    found = {s.get("Sid"): s for s in statements(default_synth, "ExecutionRole")}
    logs = json.dumps(found["TrainingJobLogs"]["Resource"])
    assert logs.count("/aws/sagemaker/TrainingJobs") == logs.count("/aws/sagemaker/ProcessingJobs") == 2
    assert len(found["TrainingJobLogs"]["Resource"]) == 4  # each group and its streams, nothing else
    metrics = found["TrainingJobMetrics"]
    assert metrics["Action"] == "cloudwatch:PutMetricData"
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": ["/aws/sagemaker/TrainingJobs"]}}


def test_execution_role_reads_extra_input_prefixes(variant_synth):
    found = statements(variant_synth, "ExecutionRole")
    reads = [json.dumps(s["Resource"]) for s in found if "s3:GetObject*" in as_list(s["Action"])]
    assert any("shared-datasets/tokenized/*" in r for r in reads)


# -- submitter ---------------------------------------------------------------------------------


def test_submitter_function_runtime_arch_handler(default_synth):
    default_synth.template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Runtime": "python3.13",
            "Architectures": ["arm64"],
            "Handler": HANDLER,
            "LoggingConfig": Match.object_like({"LogFormat": "JSON"}),
        },
    )
    # the bundle lays modules out under their import names: Lambda imports the module the tests import
    assert HANDLER == "platform_constructs.submitter.runtime.handler.lambda_handler"


def test_submitter_environment(default_synth):
    stack = default_synth.stack
    fn_id = default_synth.logical_id(stack.submitter.function)
    env = default_synth.resources[fn_id]["Properties"]["Environment"]["Variables"]
    ids = bucket_ids(default_synth)
    assert env[settings.ENV_EXECUTION_ROLE_ARN] == getatt_arn(default_synth.logical_id(stack.execution_role.role))
    assert env[settings.ENV_DATA_BUCKET] == {"Ref": ids["data"]}
    assert env[settings.ENV_CHECKPOINT_BUCKET] == {"Ref": ids["checkpoints"]}
    assert env[settings.ENV_OUTPUT_BUCKET] == {"Ref": ids["output"]}
    assert env[settings.ENV_TRAINING_PLAN_ARNS_PARAMETER] == {
        "Ref": default_synth.logical_id(stack.training_plans.parameter)
    }
    image = json.dumps(env[settings.ENV_TRAINER_IMAGE_URIS])
    assert stack.trainer_image.image_tag in image and default_synth.logical_id(stack.trainer_image.repository) in image
    assert env[settings.ENV_DEFAULT_INSTANCE_TYPE] == "ml.p6-b200.48xlarge"
    from platform_spec.catalogue import TRAINABLE_INSTANCE_TYPES

    # every catalogue type but the GB200 UltraServers, which CreateTrainingJob does not accept, and the arm64 GB200
    # host, for which the default deployment builds no image (imageArchitectures ["amd64"])
    ultraservers = ("ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72", "ml.p6e-gb200.36xlarge")
    assert env[settings.ENV_ALLOWED_INSTANCE_TYPES].split(",") == [
        t for t in TRAINABLE_INSTANCE_TYPES if t not in ultraservers
    ]
    assert env[settings.ENV_CAPACITY_FALLBACK] == "training-plan,spot,on-demand"
    assert json.loads(env[settings.ENV_PLATFORM_TAGS]) == {
        "Project": "blackwell-training-platform",
        "CostCenter": "ml-platform",
    }
    assert env["POWERTOOLS_SERVICE_NAME"] == settings.SERVICE_NAME
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == settings.METRICS_NAMESPACE
    assert settings.ENV_ALLOWED_INPUT_PREFIXES not in env


def test_submitter_environment_follows_context(variant_synth):
    fn_id = variant_synth.logical_id(variant_synth.stack.submitter.function)
    env = variant_synth.resources[fn_id]["Properties"]["Environment"]["Variables"]
    assert env[settings.ENV_ALLOWED_INSTANCE_TYPES] == "ml.p5.48xlarge,ml.p6-b200.48xlarge"
    assert env[settings.ENV_ALLOWED_INPUT_PREFIXES] == "s3://shared-datasets/tokenized/"
    assert json.loads(env[settings.ENV_PLATFORM_TAGS]) == {"Project": "llm-pretraining", "CostCenter": "cc-1234"}


@pytest.mark.parametrize(
    ("fixture", "reserved"), [("default_synth", DEFAULT_RESERVED_CONCURRENCY), ("variant_synth", 25)]
)
def test_submitter_concurrency_is_reserved_from_context(request, fixture, reserved):
    synth = request.getfixturevalue(fixture)
    fn_id = synth.logical_id(synth.stack.submitter.function)
    assert synth.resources[fn_id]["Properties"]["ReservedConcurrentExecutions"] == reserved
    assert DEFAULT_RESERVED_CONCURRENCY == 10
    # only the submitter reserves: the observability functions share the unreserved pool
    reserving = [
        k
        for k, r in synth.of_type("AWS::Lambda::Function").items()
        if "ReservedConcurrentExecutions" in r["Properties"]
    ]
    assert reserving == [fn_id]


def test_submitter_waits_for_the_image_copy(default_synth):
    fn_id = default_synth.logical_id(default_synth.stack.submitter.function)
    (copy_id,) = default_synth.of_type("Custom::CDKECRDeployment")
    assert copy_id in default_synth.resources[fn_id]["DependsOn"]


@pytest.mark.parametrize(("fixture", "days"), [("default_synth", 90), ("variant_synth", 30)])
def test_submitter_log_group_retention(request, fixture, days):
    synth = request.getfixturevalue(fixture)
    log_group_id = synth.logical_id(synth.stack.submitter.log_group)
    assert synth.resources[log_group_id]["Properties"]["RetentionInDays"] == days
    fn_id = synth.logical_id(synth.stack.submitter.function)
    assert synth.resources[fn_id]["Properties"]["LoggingConfig"]["LogGroup"] == {"Ref": log_group_id}


def test_submitter_role_sagemaker_permissions(default_synth):
    role_id = default_synth.logical_id(default_synth.stack.submitter.role)
    assert "ManagedPolicyArns" not in default_synth.resources[role_id]["Properties"]
    found = {s.get("Sid"): s for s in statements(default_synth, "SubmitterRole")}
    jobs = found["TrainingJobs"]
    # the job API's stop (of a job, or of a run's running segment) is the submitter's too
    assert sorted(as_list(jobs["Action"])) == [
        "sagemaker:AddTags",
        "sagemaker:CreateTrainingJob",
        "sagemaker:StopTrainingJob",
    ]
    assert json.dumps(jobs["Resource"]).endswith(':training-job/*"]]}')
    # a job on a training plan is authorized against the plan and its reserved capacity as well (issue 24)
    on_plans = found["TrainingJobsOnPlans"]
    assert on_plans["Action"] == "sagemaker:CreateTrainingJob"
    assert sorted(json.dumps(r).rsplit(":", 1)[-1] for r in on_plans["Resource"]) == [
        'reserved-capacity/*"]]}',
        'training-plan/*"]]}',
    ]
    described = found["DescribeTrainingJobs"]
    assert sorted(as_list(described["Action"])) == ["sagemaker:DescribeTrainingJob", "sagemaker:ListTags"]
    assert described["Resource"] == jobs["Resource"]
    assert found["DescribeTrainingPlans"]["Action"] == "sagemaker:DescribeTrainingPlan"
    assert json.dumps(found["DescribeTrainingPlans"]["Resource"]).endswith(':training-plan/*"]]}')
    # the plans are the SSM parameter's: the runtime never lists them (tests/submitter/test_grants.py)
    every_action = [a for s in statements(default_synth, "SubmitterRole") for a in as_list(s["Action"])]
    assert "sagemaker:ListTrainingPlans" not in every_action and "sagemaker:ListTrainingJobs" not in every_action
    parameter_id = default_synth.logical_id(default_synth.stack.training_plans.parameter)
    # statements without a Sid collide in `found`: search them all
    reads = [s for s in statements(default_synth, "SubmitterRole") if "ssm:GetParameter" in as_list(s["Action"])]
    assert reads and parameter_id in json.dumps(reads)


def test_pass_role_only_on_the_execution_role_only_to_sagemaker(default_synth, variant_synth):
    for synth in (default_synth, variant_synth):
        role_arn = getatt_arn(synth.logical_id(synth.stack.execution_role.role))
        passes = [
            (logical_id, s)
            for logical_id, resource in synth.of_type("AWS::IAM::Policy").items()
            for s in resource["Properties"]["PolicyDocument"]["Statement"]
            if any(a in ("iam:PassRole", "iam:*", "*") for a in as_list(s["Action"]))
        ]
        # the submitter and the run continuation, which submits a run's next segment through the same code
        assert sorted(logical_id.rstrip("0123456789ABCDEF") for logical_id, _ in passes) == [
            "SubmitterContinuationRoleDefaultPolicy",
            "SubmitterRoleDefaultPolicy",
        ], passes
        for _, statement in passes:
            assert statement == {
                "Action": "iam:PassRole",
                "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                "Effect": "Allow",
                "Resource": role_arn,
            }


def test_invoker_principals_may_invoke_the_submitter(default_synth, variant_synth):
    # the only permissions by default are EventBridge's, on the observability functions
    permissions = default_synth.of_type("AWS::Lambda::Permission").values()
    assert {p["Properties"]["Principal"] for p in permissions} <= {"events.amazonaws.com"}
    submitter_id = default_synth.logical_id(default_synth.stack.submitter.function)
    assert all(submitter_id not in json.dumps(p["Properties"]["FunctionName"]) for p in permissions)
    fn_id = variant_synth.logical_id(variant_synth.stack.submitter.function)
    variant_synth.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "Principal": variant_synth.context["invokerPrincipals"][0],
            "FunctionName": getatt_arn(fn_id),
        },
    )


def test_submitter_metrics_use_the_settings_names(default_synth):
    from aws_cdk import Stack

    submitter = default_synth.stack.submitter
    resolve = Stack.of(submitter).resolve
    metric = submitter.metric_submissions("spot")
    assert metric.namespace == settings.METRICS_NAMESPACE
    assert metric.metric_name == settings.METRIC_SUBMISSIONS
    assert metric.dimensions == {"service": settings.SERVICE_NAME, settings.DIMENSION_CAPACITY_TYPE: "spot"}
    assert metric.statistic == "Sum"
    refusals = submitter.metric_refusals("NoCapacity")
    assert refusals.metric_name == settings.METRIC_REFUSALS
    assert refusals.dimensions == {"service": settings.SERVICE_NAME, settings.DIMENSION_ERROR_CODE: "NoCapacity"}
    errors = submitter.metric_errors()
    assert (errors.namespace, errors.metric_name) == ("AWS/Lambda", "Errors")
    assert resolve(errors.dimensions["FunctionName"]) == {"Ref": default_synth.logical_id(submitter.function)}
    with pytest.raises(ValueError, match="capacity_type: got 'reserved'; expected one of training-plan"):
        submitter.metric_submissions("reserved")
    with pytest.raises(ValueError, match="error_code: got 'Oops'"):
        submitter.metric_refusals("Oops")


# -- training plans, dashboard, tags, outputs ---------------------------------------------------


def test_training_plan_parameter_holds_the_context_list(default_synth, variant_synth):
    default_synth.template.has_resource_properties(
        "AWS::SSM::Parameter",
        {"Type": "String", "Value": "[]", "Name": "/TrainingPlatform/training-plan-arns"},
    )
    (parameter,) = variant_synth.of_type("AWS::SSM::Parameter").values()
    assert json.loads(parameter["Properties"]["Value"]) == variant_synth.context["trainingPlanArns"]


def test_dashboard_is_built_from_the_submitter_metrics(default_synth):
    (dashboard,) = default_synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in (
        settings.METRIC_SUBMISSIONS,
        settings.METRIC_REFUSALS,
        settings.METRICS_NAMESPACE,
        "Invocations",
        "Throttles",
    ):
        assert name in body
    for value in CAPACITY_TYPES + settings.ERROR_CODES:
        assert value in body


def test_every_taggable_resource_carries_project_and_cost_center(default_synth, variant_synth):
    for synth, project, cost in (
        (default_synth, "blackwell-training-platform", "ml-platform"),
        (variant_synth, "llm-pretraining", "cc-1234"),
    ):
        tagged_types = set()
        for logical_id, resource in synth.resources.items():
            tags = resource.get("Properties", {}).get("Tags")
            if tags is None:
                continue
            tagged_types.add(resource["Type"])
            as_dict = tags if isinstance(tags, dict) else {t["Key"]: t["Value"] for t in tags}
            assert as_dict.get("Project") == project, logical_id
            assert as_dict.get("CostCenter") == cost, logical_id
        assert {
            "AWS::S3::Bucket",
            "AWS::KMS::Key",
            "AWS::ECR::Repository",
            "AWS::IAM::Role",
            "AWS::Lambda::Function",
            "AWS::Logs::LogGroup",
            "AWS::SSM::Parameter",
        } <= tagged_types


def test_outputs(default_synth):
    stack = default_synth.stack
    outputs = default_synth.template_json["Outputs"]
    assert {
        "TrainerImageUri",
        "SubmitterFunctionName",
        "SubmitterFunctionArn",
        "DataBucketName",
        "CheckpointBucketName",
        "OutputBucketName",
        "AccessLogsBucketName",
        "ExecutionRoleArn",
        "TrainingPlanParameterName",
        "DashboardName",
    } <= set(outputs)
    assert outputs["ExecutionRoleArn"]["Value"] == getatt_arn(default_synth.logical_id(stack.execution_role.role))
    assert outputs["SubmitterFunctionArn"]["Value"] == getatt_arn(default_synth.logical_id(stack.submitter.function))
    assert outputs["DataBucketName"]["Value"] == {"Ref": bucket_ids(default_synth)["data"]}
    assert stack.trainer_image.image_tag in json.dumps(outputs["TrainerImageUri"]["Value"])
