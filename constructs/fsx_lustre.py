"""The platform's FSx for Lustre file system: the hot tier in front of the data bucket.

What a user gets: a persistent, KMS-encrypted Lustre file system in one private subnet, linked to the data bucket
(or a prefix of it) by a data repository association (DRA) at the file system's root. Every object of the linked
prefix appears as a file: ``s3://<data bucket>/<prefix><path>`` is ``/<mount name>/<path>`` on the file system,
which a request names as a channel ``{"file_system_id": ..., "directory_path": "/<mount name>/<path>"}``
(SageMaker's ``FileSystemDataSource``, mounted read-only). Import only, no export:

* the listing is imported when the association is created (``BatchImportMetaDataOnCreate``), and new, changed and
  deleted objects follow automatically (``AutoImportPolicy`` ``NEW``, ``CHANGED``, ``DELETED``; FSx for Lustre User
  Guide, "Automatically import updates from your S3 bucket"): ``trainctl prepare-data`` uploads to the bucket and
  the next job sees the files. A file's data is loaded from S3 on its first read (lazy load), then served from the
  file system's disks.
* nothing is exported: jobs mount the file system read-only (:data:`platform_spec.network.FSX_ACCESS_MODE`),
  checkpoints and output go to their own buckets, and the data bucket stays the one source of truth (so the file
  system takes no backups: losing it loses no data, a new one imports the bucket again).

Options (:class:`FsxLustreOptions`, the ``fsxLustre`` context key) and their rules, from the FSx API Reference
(``CreateFileSystem``: ``StorageCapacity``, ``LustreConfiguration.PerUnitStorageThroughput``; botocore's ``fsx``
model carries the same text) and the FSx for Lustre User Guide ("Deployment and storage class options"):

* ``deployment_type``: ``PERSISTENT_2`` (the default: the newest generation, the highest throughput tiers and
  the lowest latency) or ``PERSISTENT_1``. The scratch types are refused: FSx encrypts them with a key it manages
  and takes no ``KmsKeyId`` (User Guide, "Encrypting data at rest"), and the platform encrypts its data with its
  own key. Every persistent type supports a DRA on Lustre 2.12 and 2.15 (``CreateDataRepositoryAssociation``:
  "all FSx for Lustre 2.12 and 2.15 file systems, excluding scratch_1"); the file system runs Lustre 2.15.
* ``storage_capacity_gib``: SSD storage, 1200 GiB, 2400 GiB or a multiple of 2400 GiB (the rule of both
  persistent SSD types). Default 1200 GiB, the least FSx creates: the file system is a cache of the bucket, and
  storage grows later (``UpdateFileSystem``) without a new file system.
* ``per_unit_storage_throughput``: MB/s per TiB of storage, ``PERSISTENT_2`` 125, 250, 500 or 1000;
  ``PERSISTENT_1`` 50, 100 or 200. Default 250 (``PERSISTENT_2``; 200 for ``PERSISTENT_1``): 300 MB/s at
  1.2 TiB. Streaming tokens is light (a host of 8 GPUs at 50,000 tokens/s each reads 1.6 MB/s of 4-byte tokens),
  but a job's start, when every rank of every host opens its shards and the first reads load them from S3, is
  bound by the file servers, whose throughput tier also sets their IOPS and cache (User Guide, "Managing
  throughput capacity"); 250 is the tier below the costly two, and throughput changes later in place.
* ``data_repository_prefix``: the key prefix of the data bucket linked (``""``: the whole bucket, the default),
  ending in ``/``.

Network (User Guide, "File system access control with Amazon VPC"): the file system has its own security group
(:attr:`FsxLustre.security_group`), which allows Lustre's ports, TCP 988 and 1018-1023 (:data:`LUSTRE_TCP_PORTS`),
inbound from the jobs' security group and from itself (the file servers talk to each other), outbound to itself,
and nothing else. The jobs' group gets the matching outbound rules (it restricts its outbound traffic) and the
matching inbound rules from the file system's group only: Lustre's network layer (LNet over TCP) connects both
ways, the servers to their clients too, and the guide's rules for Lustre clients admit 988 and 1018-1023 from the
file system's group.

Keys: the file system's data is encrypted at rest with the given KMS key (FSx takes grants on it through the
deploying principal, whom the key's default policy lets use it). The data bucket's key, when it has one, gets a
key-policy statement (:data:`SLR_KEY_STATEMENT_SID`) that lets FSx's service-linked roles for S3 access
(``AWSServiceRoleForFSxS3Access_fs-*``, one per file system) decrypt through S3 in this region and account, as
"Working with server-side encrypted Amazon S3 buckets" (User Guide) documents; the role is named by pattern
because the file system, whose ID names it, needs the key first, and the bucket is not named because it names the
key (either would be a circular dependency). The service-linked role reads
the bucket with its own AWS-managed policy; no bucket policy statement is needed in the same account.

IAM for jobs: a job that reads an FSx channel needs no IAM permission for it. Lustre has no IAM authentication
(network access is the security group's), and SageMaker's execution-role permissions for ``CreateTrainingJob``
(SageMaker Developer Guide, "CreateTrainingJob API: Execution Role Permissions") name none for a file system
channel, only the EC2 network-interface actions of VPC mode. What a submitter may ask for is bounded by
:meth:`FsxLustre.create_training_job_conditions`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from constructs import Construct
from platform_spec.errors import FieldError
from platform_spec.network import FSX_ACCESS_MODE, FSX_FILE_SYSTEM_TYPE

__all__ = [
    "DEFAULT_DEPLOYMENT_TYPE",
    "DEFAULT_PER_UNIT_STORAGE_THROUGHPUT",
    "DEFAULT_STORAGE_CAPACITY_GIB",
    "LUSTRE_TCP_PORTS",
    "PER_UNIT_STORAGE_THROUGHPUT",
    "SCRATCH_DEPLOYMENT_TYPES",
    "SLR_KEY_STATEMENT_SID",
    "FsxLustre",
    "FsxLustreOptions",
    "FsxLustreProps",
]

PER_UNIT_STORAGE_THROUGHPUT: Mapping[str, tuple[int, ...]] = {
    "PERSISTENT_2": (125, 250, 500, 1000),
    "PERSISTENT_1": (50, 100, 200),
}
"""The deployment types the platform creates -> their SSD throughput tiers, MB/s/TiB (FSx API Reference,
``LustreConfiguration.PerUnitStorageThroughput``)."""
SCRATCH_DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2")
"""Deployment types FSx encrypts with its own key (no ``KmsKeyId``): refused, the platform's key is required."""
DEFAULT_DEPLOYMENT_TYPE = "PERSISTENT_2"
DEFAULT_STORAGE_CAPACITY_GIB = 1200
DEFAULT_PER_UNIT_STORAGE_THROUGHPUT: Mapping[str, int] = {"PERSISTENT_2": 250, "PERSISTENT_1": 200}
"""Each type's default tier (module docstring: why)."""
STORAGE_CAPACITY_MIN_GIB = 1200
STORAGE_CAPACITY_STEP_GIB = 2400
"""Persistent SSD storage: 1200 GiB, 2400 GiB or a multiple of 2400 GiB (FSx API Reference, ``StorageCapacity``)."""
LUSTRE_TCP_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))
"""TCP port ranges (first, last) of Lustre traffic (FSx for Lustre User Guide, "File system access control with
Amazon VPC")."""
AUTO_IMPORT_EVENTS = ("NEW", "CHANGED", "DELETED")
"""Object events the association imports (all three: the file system follows the bucket)."""
SLR_KEY_STATEMENT_SID = "FsxLustreS3AccessDecryptsDataBucket"
"""Sid of the data bucket key's statement for FSx's service-linked roles (module docstring)."""
_S3_ACCESS_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-*"
"""The IAM resource of FSx's per-file-system service-linked roles for S3 access (User Guide, "Working with
server-side encrypted Amazon S3 buckets")."""
_KEY_PREFIX = re.compile(r"(?:[^\x00-\x1f\x7f\u0085\u2028\u2029*?/][^\x00-\x1f\x7f\u0085\u2028\u2029*?]*/)?")
"""An S3 key prefix ending in ``/`` (or empty): no leading ``/``, no wildcard, no control character or line
separator (botocore's ``ArchivePath`` refuses those too)."""
_MAX_KEY_BYTES = 1024
"""S3's longest object key, in UTF-8 bytes (Amazon S3 User Guide, "Naming Amazon S3 objects")."""


@dataclass(frozen=True, kw_only=True)
class FsxLustreOptions:
    """What the file system is: deployment type, storage and throughput, and the prefix of the data bucket linked
    (the module docstring gives each rule, default and its source).

    Attributes:
        deployment_type: ``PERSISTENT_2`` or ``PERSISTENT_1``. Default: ``PERSISTENT_2``.
        storage_capacity_gib: SSD storage, GiB: 1200, 2400 or a multiple of 2400. Default: 1200.
        per_unit_storage_throughput: MB/s per TiB, one of the type's tiers (:data:`PER_UNIT_STORAGE_THROUGHPUT`).
            Default: the type's (:data:`DEFAULT_PER_UNIT_STORAGE_THROUGHPUT`: 250 for ``PERSISTENT_2``).
        data_repository_prefix: key prefix of the data bucket linked, ending in ``/``. Default: the whole bucket.

    Raises:
        platform_spec.errors.FieldError: a value out of these rules; ``field`` is the attribute's name.
    """

    deployment_type: str = DEFAULT_DEPLOYMENT_TYPE
    storage_capacity_gib: int = DEFAULT_STORAGE_CAPACITY_GIB
    per_unit_storage_throughput: int | None = None
    data_repository_prefix: str = ""

    def __post_init__(self) -> None:
        kind = self.deployment_type
        if kind not in PER_UNIT_STORAGE_THROUGHPUT:
            detail = (
                f"{kind} file systems are encrypted with a key FSx manages and take no KMS key; the platform "
                "encrypts its data with its own key"
                if kind in SCRATCH_DEPLOYMENT_TYPES
                else ""
            )
            raise FieldError("deployment_type", kind, f"one of {', '.join(PER_UNIT_STORAGE_THROUGHPUT)}", detail=detail)
        capacity = self.storage_capacity_gib
        if (
            not isinstance(capacity, int)
            or isinstance(capacity, bool)
            or not (
                capacity == STORAGE_CAPACITY_MIN_GIB or (capacity > 0 and capacity % STORAGE_CAPACITY_STEP_GIB == 0)
            )
        ):
            raise FieldError(
                "storage_capacity_gib",
                capacity,
                f"{STORAGE_CAPACITY_MIN_GIB}, {STORAGE_CAPACITY_STEP_GIB} or a multiple of {STORAGE_CAPACITY_STEP_GIB} "
                "(GiB of SSD storage)",
            )
        tiers = PER_UNIT_STORAGE_THROUGHPUT[kind]
        throughput = self.per_unit_storage_throughput
        if throughput is not None and (isinstance(throughput, bool) or throughput not in tiers):
            raise FieldError(
                "per_unit_storage_throughput",
                throughput,
                f"for {kind}, one of {', '.join(map(str, tiers))} (MB/s per TiB of storage)",
            )
        prefix = self.data_repository_prefix
        if (
            not isinstance(prefix, str)
            or not _KEY_PREFIX.fullmatch(prefix)
            or len(prefix.encode("utf-8")) > _MAX_KEY_BYTES
            or prefix.lower().startswith("s3:")
            or any(segment in ("", ".", "..") for segment in prefix.split("/")[:-1])
        ):
            raise FieldError(
                "data_repository_prefix",
                prefix,
                f"a key prefix of the data bucket ending in '/' (at most {_MAX_KEY_BYTES} bytes, no leading '/', "
                "empty, '.' or '..' segment, wildcards or control characters), e.g. 'datasets/', or '' for the "
                "whole bucket",
                detail="the file system links the platform's data bucket, whose name is generated at deploy: give "
                "the key prefix only"
                if isinstance(prefix, str) and prefix.lower().startswith("s3:")
                else "",
            )

    @property
    def throughput(self) -> int:
        """``per_unit_storage_throughput``, or the deployment type's default tier (MB/s/TiB)."""
        if self.per_unit_storage_throughput is not None:
            return self.per_unit_storage_throughput
        return DEFAULT_PER_UNIT_STORAGE_THROUGHPUT[self.deployment_type]


@dataclass(frozen=True, kw_only=True)
class FsxLustreProps:
    """Properties of :class:`FsxLustre`.

    Attributes:
        vpc: the VPC of the file system and its clients.
        subnet: the one subnet the file system lives in (one of the jobs' private subnets; a file system is in one
            availability zone, and jobs reading it run in this subnet).
        encryption_key: the platform's KMS key; encrypts the file system at rest.
        data_bucket: the bucket linked. When it is SSE-KMS encrypted, its key must be one this stack can change
            the policy of (a ``kms.Key`` of the app, such as ``encryption_key``).
        client_security_group: the jobs' security group; Lustre traffic from it is allowed.
        options: deployment type, storage, throughput, prefix. Default: :class:`FsxLustreOptions`'s defaults.
        removal_policy: what happens to the file system, its association and its security group when they leave
            the stack. Default: they are retained (the association keeps its link; the data stays in the bucket).
    """

    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    encryption_key: kms.IKey
    data_bucket: s3.IBucket
    client_security_group: ec2.ISecurityGroup
    options: FsxLustreOptions = field(default_factory=FsxLustreOptions)
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class FsxLustre(Construct):
    """An FSx for Lustre file system linked to the data bucket (see the module docstring); the submitter takes it as
    its :class:`~platform_constructs.submitter.construct.IJobFileSystem`.

    Children (stable construct IDs): ``Resource`` (``fsx.LustreFileSystem``), ``SecurityGroup``,
    ``DataRepositoryAssociation``.

    Raises:
        ValueError: ``data_bucket``'s KMS key is imported, so FSx's access to it cannot be granted here (the
            message names the statement to add to that key's policy).
    """

    def __init__(self, scope: Construct, id: str, props: FsxLustreProps) -> None:
        super().__init__(scope, id)
        options = props.options
        stack = cdk.Stack.of(self)
        bucket_key = props.data_bucket.encryption_key
        if bucket_key is not None:  # first: an imported key is refused before anything is built
            _let_fsx_decrypt(stack, bucket_key)

        self.subnet: ec2.ISubnet = props.subnet
        group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=props.vpc,
            description="FSx for Lustre file system: Lustre traffic from the training jobs and between file servers",
            allow_all_outbound=False,
        )
        for first, last in LUSTRE_TCP_PORTS:
            port = ec2.Port.tcp(first) if first == last else ec2.Port.tcp_range(first, last)
            group.add_ingress_rule(group, port, "Lustre between the file servers")
            group.add_egress_rule(group, port, "Lustre between the file servers")
            group.connections.allow_from(props.client_security_group, port, "Lustre from the training jobs")
            props.client_security_group.add_ingress_rule(
                group, port, "Lustre from the file servers (LNet connects both ways)"
            )
        self.security_group: ec2.ISecurityGroup = group

        # The L2 adds a self-referencing TCP 988-1023 rule to the group it is given; an immutable reference keeps
        # the group's rules to exactly the ones above.
        fixed_group = ec2.SecurityGroup.from_security_group_id(
            self, "SecurityGroupReference", group.security_group_id, mutable=False
        )
        self.file_system = fsx.LustreFileSystem(
            self,
            "Resource",
            vpc=props.vpc,
            vpc_subnet=props.subnet,
            security_group=fixed_group,
            storage_capacity_gib=options.storage_capacity_gib,
            kms_key=props.encryption_key,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            removal_policy=props.removal_policy,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=fsx.LustreDeploymentType(options.deployment_type),
                per_unit_storage_throughput=options.throughput,
                automatic_backup_retention=cdk.Duration.days(0),  # the bucket is the source of truth
            ),
        )
        self.file_system_id: str = self.file_system.file_system_id
        self.mount_name: str = self.file_system.mount_name

        self.data_repository_association = fsx.CfnDataRepositoryAssociation(
            self,
            "DataRepositoryAssociation",
            file_system_id=self.file_system_id,
            file_system_path="/",
            data_repository_path=f"s3://{props.data_bucket.bucket_name}/{options.data_repository_prefix}",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                    events=list(AUTO_IMPORT_EVENTS)
                )
            ),
        )
        if bucket_key is not None:
            self.data_repository_association.node.add_dependency(bucket_key)

        for child in self.node.find_all():
            if isinstance(child, cdk.CfnResource):
                # a retained file system keeps its network interfaces in the group: deleting it would fail
                child.apply_removal_policy(props.removal_policy)

    def function_environment_value(self) -> dict[str, str]:
        """The submitter's ``fsx_lustre`` argument of
        :func:`~.submitter.runtime.settings.function_environment`: ``{"file_system_id", "mount_name",
        "subnet_id", "availability_zone"}`` (tokens)."""
        return {
            "file_system_id": self.file_system_id,
            "mount_name": self.mount_name,
            "subnet_id": self.subnet.subnet_id,
            "availability_zone": self.subnet.availability_zone,
        }

    def create_training_job_conditions(self) -> dict[str, dict[str, list[str]]]:
        """Conditions for a ``sagemaker:CreateTrainingJob`` grant: a job's file system channels, if any, name this
        file system, as FSx for Lustre, read-only.

        ``ForAllValues:StringEquals`` on ``sagemaker:FileSystemId``, ``sagemaker:FileSystemType`` and
        ``sagemaker:FileSystemAccessMode`` (Service Authorization Reference, SageMaker, ``CreateTrainingJob``'s
        condition keys). A request without a file system channel carries none of the keys, and ``ForAllValues``
        over no values is true (IAM User Guide, "Multivalued context keys"), so jobs reading S3 stay allowed.
        Merge the mapping into the grant's conditions (the VPC keys use the same operator).
        """
        return {
            "ForAllValues:StringEquals": {
                "sagemaker:FileSystemId": [self.file_system_id],
                "sagemaker:FileSystemType": [FSX_FILE_SYSTEM_TYPE],
                "sagemaker:FileSystemAccessMode": [FSX_ACCESS_MODE],
            }
        }


def _let_fsx_decrypt(stack: cdk.Stack, key: kms.IKey) -> None:
    """Let FSx's service-linked roles for S3 access decrypt ``bucket``'s objects with ``key`` (module docstring).

    Decrypt only (import, no export), through S3 in this region, by this account's roles. AWS's example statement
    also names the bucket (``kms:EncryptionContext:aws:s3:arn``); here it cannot: the bucket's encryption names the
    key, so a key policy naming the bucket is a circular dependency that CloudFormation refuses. Each
    service-linked role's own policy reaches only the buckets linked to its file system, and linking one takes
    ``fsx:CreateDataRepositoryAssociation``.
    """
    role_arn = stack.format_arn(
        service="iam", region="", resource=_S3_ACCESS_ROLE, arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
    )
    statement = iam.PolicyStatement(
        sid=SLR_KEY_STATEMENT_SID,
        principals=[iam.AnyPrincipal()],
        actions=["kms:Decrypt"],
        resources=["*"],
        conditions={
            "ArnLike": {"aws:PrincipalArn": role_arn},
            "StringEquals": {
                "kms:CallerAccount": stack.account,
                "kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}",
            },
        },
    )
    if not key.add_to_resource_policy(statement).statement_added:
        raise ValueError(
            "FsxLustreProps.data_bucket: its KMS key is imported, so its policy cannot be changed here; expected a "
            "key of this app, or add to the key's policy a statement allowing kms:Decrypt to principals "
            f"arn:aws:iam::<account>:{_S3_ACCESS_ROLE} via s3.<region>.amazonaws.com for the bucket's objects"
        )
