"""The platform's S3 buckets: training data, checkpoints, job output and server access logs.

Encryption choice: the three data buckets use SSE-KMS with one customer managed
key (rotation on) and an S3 Bucket Key. Datasets and checkpoints are the
platform's most valuable data; a customer managed key puts every decrypt in
CloudTrail and lets the key policy revoke access independently of bucket
policies, while the Bucket Key cuts KMS requests (and their cost and
throttling) by reusing a bucket-level data key, which matters for the bursts
of multipart uploads a checkpoint save produces. The access-log bucket uses
SSE-S3 because S3 server access logging can only deliver to SSE-S3 buckets.

Writes under another key are refused. A ``PutObject`` (``CreateMultipartUpload`` included) that names
no encryption gets the bucket's default, the platform key; one that names another key, SSE-S3, or
``aws:kms`` without a key (which S3 answers with the AWS managed key ``aws/s3``, not the bucket's;
Amazon S3 API Reference, ``PutObject``, ``x-amz-server-side-encryption-aws-kms-key-id``) is denied by
the bucket policy (:data:`WRITE_KEY_STATEMENTS`). Jobs name the key themselves: the submitter sets
``OutputDataConfig.KmsKeyId`` to it, and SageMaker then writes with that key's ARN.

Versions are the undo history. The checkpoint and output buckets are
versioned, so an overwrite or a delete keeps the previous object as a
noncurrent version (expired by the lifecycle rule). Writers get
:func:`grant_read_write_current_objects`: they may read, overwrite and delete
current objects, but never ``s3:DeleteObjectVersion`` (CDK's
``grant_read_write`` grants ``s3:DeleteObject*``, which includes it), nor
``s3:PutBucketVersioning`` or ``s3:PutLifecycleConfiguration`` (suspending
versioning or expiring versions at once would erase the history as well).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from constructs import Construct
from platform_spec.runs import RUN_CHECKPOINT_PREFIX

__all__ = [
    "CURRENT_OBJECT_BUCKET_ACTIONS",
    "CURRENT_OBJECT_KEY_ACTIONS",
    "CURRENT_OBJECT_OBJECT_ACTIONS",
    "HISTORY_ERASING_ACTIONS",
    "PRUNED_CHECKPOINTS_RULE",
    "WRITE_KEY_STATEMENTS",
    "TrainingBuckets",
    "TrainingBucketsProps",
    "grant_read_write_current_objects",
]

CURRENT_OBJECT_BUCKET_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads")
"""Bucket-level actions of :func:`grant_read_write_current_objects`: list keys (checkpoint
sync on resume), the bucket's region, and unfinished multipart uploads."""

CURRENT_OBJECT_OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
"""Object-level actions of :func:`grant_read_write_current_objects`. ``s3:PutObject``
covers CreateMultipartUpload, UploadPart and CompleteMultipartUpload; ``s3:DeleteObject``
on a versioned bucket adds a delete marker and keeps the data as a noncurrent version
(Amazon S3 User Guide, "Deleting object versions from a versioning-enabled bucket")."""

CURRENT_OBJECT_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
"""KMS actions on the bucket key: ``GenerateDataKey`` to write SSE-KMS objects, ``Decrypt``
to read them and to complete multipart uploads (Amazon S3 User Guide, "Using server-side
encryption with AWS KMS keys (SSE-KMS)", permissions)."""

PRUNED_CHECKPOINTS_RULE = "ExpirePrunedRunCheckpoints"
"""The checkpoint bucket's lifecycle rule on the run checkpoint prefix (:data:`platform_spec.runs.RUN_CHECKPOINT_PREFIX`):
noncurrent versions expire ``noncurrent_version_expiration`` (default 30 days) after they became noncurrent,
however few. Before a run's next segment the run continuation deletes every checkpoint but the newest
(``constructs/submitter/runtime/checkpoint_prune.py``); each deleted object is then one noncurrent version,
which ``ExpireNoncurrentVersions`` would keep for good (``NewerNoncurrentVersions``: "If there are this many more
recent noncurrent versions, Amazon S3 will take the associated action", AWS::S3::Bucket
NoncurrentVersionExpiration). Until the rule acts, a pruned checkpoint can be restored from its versions."""

HISTORY_ERASING_ACTIONS = ("s3:DeleteObjectVersion", "s3:PutBucketVersioning", "s3:PutLifecycleConfiguration")
"""Actions that can erase a versioned bucket's history; no role the platform creates is granted
them (CDK's own auto-delete custom resource, with ``removal_policy=DESTROY``, aside)."""

WRITE_KEY_STATEMENTS = ("DenyWritesUnderAnotherEncryption", "DenyWritesUnderAnotherKey", "DenyWritesUnderAwsManagedKey")
"""Sids of the statements each KMS bucket's policy gets (module docstring): ``s3:PutObject`` is denied to
every principal when it names an encryption other than ``aws:kms``, a key other than the bucket's, or
``aws:kms`` with no key. Each pairs its negated test with ``Null: false`` (the header is present): a negated
operator, or one ending ``IfExists``, is true when the request lacks the key (IAM User Guide, "Condition
operators"), so without it a write that names no encryption, and gets the bucket's default, would be denied."""


def deny_writes_under_another_key(bucket: s3.IBucket, key: kms.IKey) -> None:
    """Add the :data:`WRITE_KEY_STATEMENTS` to ``bucket``'s policy: writes are under ``key`` or the default."""
    objects = [bucket.arn_for_objects("*")]
    for sid, conditions in zip(
        WRITE_KEY_STATEMENTS,
        (
            {
                "StringNotEquals": {"s3:x-amz-server-side-encryption": "aws:kms"},
                "Null": {"s3:x-amz-server-side-encryption": "false"},
            },
            {
                "StringNotEquals": {"s3:x-amz-server-side-encryption-aws-kms-key-id": key.key_arn},
                "Null": {"s3:x-amz-server-side-encryption-aws-kms-key-id": "false"},
            },
            {
                "StringEquals": {"s3:x-amz-server-side-encryption": "aws:kms"},
                "Null": {"s3:x-amz-server-side-encryption-aws-kms-key-id": "true"},
            },
        ),
        strict=True,
    ):
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject"],
                resources=objects,
                conditions=conditions,
            )
        )


@dataclass(frozen=True, kw_only=True)
class TrainingBucketsProps:
    """Properties of :class:`TrainingBuckets`.

    Attributes:
        removal_policy: what happens to the buckets and the key when they leave
            the stack. Default: they are retained with their objects.
            ``DESTROY`` also empties the buckets on delete (test accounts only).
        encryption_key: KMS key for the data, checkpoint and output buckets.
            Default: a customer managed key with yearly rotation is created.
        abort_incomplete_multipart_upload_after: age after which unfinished
            multipart uploads are aborted (all buckets). Default: 7 days.
        noncurrent_version_expiration: age after which overwritten or deleted
            object versions are removed from the versioned buckets
            (checkpoints, output). Default: 30 days.
        noncurrent_versions_to_retain: newest noncurrent versions always kept
            regardless of age. Default: 3. Not under the run checkpoint prefix
            (:data:`PRUNED_CHECKPOINTS_RULE`): a checkpoint pruned before a run's
            next segment is removed ``noncurrent_version_expiration`` after.
        access_log_expiration: age after which server access log objects are
            deleted. Default: access logs are kept.
    """

    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    encryption_key: kms.IKey | None = None
    abort_incomplete_multipart_upload_after: cdk.Duration = field(default_factory=lambda: cdk.Duration.days(7))
    noncurrent_version_expiration: cdk.Duration = field(default_factory=lambda: cdk.Duration.days(30))
    noncurrent_versions_to_retain: int = 3
    access_log_expiration: cdk.Duration | None = None


class TrainingBuckets(Construct):
    """Data, checkpoint, output and access-log buckets with secure defaults.

    Every bucket blocks public access, enforces TLS 1.2+ (a bucket policy
    denies ``aws:SecureTransport=false``), uses bucket-owner-enforced object
    ownership and aborts stale multipart uploads. The data, checkpoint and
    output buckets are KMS-encrypted with a Bucket Key and log server access
    into ``access_logs`` under ``<bucket role>/`` (delivery is granted by the
    access-log bucket's policy, never by ACLs). Checkpoints and output are
    versioned; their old versions expire after
    ``noncurrent_version_expiration``.

    Children (stable construct IDs): ``Key``, ``AccessLogs``, ``Data``,
    ``Checkpoints``, ``Output``. There is no single primary resource.
    """

    def __init__(self, scope: Construct, id: str, props: TrainingBucketsProps | None = None) -> None:
        super().__init__(scope, id)
        # ACLs are disabled (bucket-owner-enforced), so log delivery must be granted through the
        # access-log bucket's policy; set here so the construct does not depend on the app's flags.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        props = props or TrainingBucketsProps()
        _validate(props)
        destroy = props.removal_policy == cdk.RemovalPolicy.DESTROY

        if props.encryption_key is None:
            key = kms.Key(
                self,
                "Key",
                description="Encrypts the training platform's data, checkpoint and output buckets",
                enable_key_rotation=True,
                removal_policy=props.removal_policy,
            )
        else:
            key = props.encryption_key
        self.encryption_key: kms.IKey = key

        common = {
            "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
            "enforce_ssl": True,
            "minimum_tls_version": 1.2,
            "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            "removal_policy": props.removal_policy,
            "auto_delete_objects": destroy,
        }
        abort_rule = s3.LifecycleRule(
            id="AbortIncompleteMultipartUploads",
            abort_incomplete_multipart_upload_after=props.abort_incomplete_multipart_upload_after,
        )

        log_rules = [abort_rule]
        if props.access_log_expiration is not None:
            log_rules.append(s3.LifecycleRule(id="ExpireAccessLogs", expiration=props.access_log_expiration))
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # server access logging requires SSE-S3
            lifecycle_rules=log_rules,
            **common,
        )
        cdk.Validations.of(self.access_logs).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-S1",
                reason="This is the server access log destination; logging it into itself would loop.",
            )
        )

        versioned_rules = [
            abort_rule,
            s3.LifecycleRule(
                id="ExpireNoncurrentVersions",
                noncurrent_version_expiration=props.noncurrent_version_expiration,
                noncurrent_versions_to_retain=props.noncurrent_versions_to_retain,
                expired_object_delete_marker=True,
            ),
        ]
        # A pruned checkpoint's objects have one noncurrent version each, which ExpireNoncurrentVersions keeps
        # for good (it acts only on versions with noncurrent_versions_to_retain newer ones): this rule expires
        # them after the same days; of two overlapping expirations S3 honours the shorter ("How Amazon S3
        # handles conflicts in lifecycle configurations")
        checkpoint_rules = [
            *versioned_rules,
            s3.LifecycleRule(
                id=PRUNED_CHECKPOINTS_RULE,
                prefix=RUN_CHECKPOINT_PREFIX,
                noncurrent_version_expiration=props.noncurrent_version_expiration,
            ),
        ]

        def kms_bucket(child_id: str, *, versioned: bool, rules: list[s3.LifecycleRule] | None = None) -> s3.Bucket:
            bucket = s3.Bucket(
                self,
                child_id,
                encryption=s3.BucketEncryption.KMS,
                encryption_key=key,
                bucket_key_enabled=True,
                versioned=versioned,
                lifecycle_rules=rules or (versioned_rules if versioned else [abort_rule]),
                server_access_logs_bucket=self.access_logs,
                server_access_logs_prefix=f"{child_id.lower()}/",
                **common,
            )
            deny_writes_under_another_key(bucket, key)
            return bucket

        self.data = kms_bucket("Data", versioned=False)
        self.checkpoints = kms_bucket("Checkpoints", versioned=True, rules=checkpoint_rules)
        self.output = kms_bucket("Output", versioned=True)


def grant_read_write_current_objects(bucket: s3.IBucket, grantee: iam.IGrantable, key_prefix: str = "") -> iam.Grant:
    """Read, overwrite and delete the current objects of ``bucket``; its object versions stay untouched.

    Grants :data:`CURRENT_OBJECT_BUCKET_ACTIONS` on the bucket,
    :data:`CURRENT_OBJECT_OBJECT_ACTIONS` on its objects below ``key_prefix``
    and, when the bucket has a KMS key, :data:`CURRENT_OBJECT_KEY_ACTIONS` on
    the key; nothing in :data:`HISTORY_ERASING_ACTIONS`. Like
    ``Bucket.grant_read_write``, the grant goes to the principal's policy, or
    to the bucket policy for a principal of another account.

    Args:
        bucket: the bucket.
        grantee: the principal.
        key_prefix: object actions on keys starting with this prefix only (e.g.
            ``"training-jobs/"``), so objects of other writers under other
            prefixes stay out of reach. The bucket-level actions (listing keys)
            are not narrowed. Default: every object of the bucket.

    Raises:
        ValueError: ``key_prefix`` starts with ``/`` or holds an IAM wildcard (``*``, ``?``).
    """
    if key_prefix.startswith("/") or "*" in key_prefix or "?" in key_prefix:
        raise ValueError(
            f"key_prefix: got {key_prefix!r}; expected a key prefix without a leading '/' or the IAM wildcards "
            "'*' and '?', e.g. 'training-jobs/'"
        )
    grant = iam.Grant.add_to_principal_or_resource(
        grantee=grantee,
        actions=list(CURRENT_OBJECT_BUCKET_ACTIONS),
        resource_arns=[bucket.bucket_arn],
        resource=bucket,
    )
    grant = grant.combine(
        iam.Grant.add_to_principal_or_resource(
            grantee=grantee,
            actions=list(CURRENT_OBJECT_OBJECT_ACTIONS),
            resource_arns=[bucket.arn_for_objects(f"{key_prefix}*")],
            resource=bucket,
        )
    )
    if bucket.encryption_key is not None:
        grant = grant.combine(bucket.encryption_key.grant(grantee, *CURRENT_OBJECT_KEY_ACTIONS))
    return grant


def _validate(props: TrainingBucketsProps) -> None:
    if props.noncurrent_versions_to_retain < 0 or props.noncurrent_versions_to_retain > 100:
        raise ValueError(
            f"TrainingBucketsProps.noncurrent_versions_to_retain: got {props.noncurrent_versions_to_retain}; "
            "expected an integer from 0 to 100 (the S3 lifecycle limit)"
        )
    if props.removal_policy not in (cdk.RemovalPolicy.RETAIN, cdk.RemovalPolicy.DESTROY):
        raise ValueError(f"TrainingBucketsProps.removal_policy: got {props.removal_policy}; expected RETAIN or DESTROY")
