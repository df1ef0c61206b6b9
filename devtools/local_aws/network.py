"""The emulator's VPC mode: the template's network and FSx for Lustre file system made in moto's EC2 and FSx, a
job's ``VpcConfig`` and ``FileSystemDataSource`` channels checked against them, and the EC2 permissions SageMaker
needs of the job's execution role.

* **Twins** (:func:`create_twins`): each ``AWS::EC2::VPC``, ``AWS::EC2::Subnet`` (in its template availability
  zone; a zone the template leaves to ``Fn::GetAZs`` is the emulator's by index,
  :func:`devtools.local_aws.template.availability_zones`),
  ``AWS::EC2::SecurityGroup`` and ``AWS::FSx::FileSystem`` (Lustre; its mount name drawn as FSx draws one, 8
  lowercase characters) of the template is created in moto under the emulator's account and region, and its
  ``Ref`` and attributes (``VpcId``, ``AvailabilityZone``, ``GroupId``, ``LustreMountName``, ``DNSName``) resolve
  to the twin's IDs (:attr:`Twins.refs`, :attr:`Twins.attrs`, read by :mod:`devtools.local_aws.principals`). The
  IDs and the mount name are derived from the logical ID, the account and the region (:func:`stable_id`), as the
  emulator's bucket names and access keys are: moto keeps nothing across a restart, and an emulator started
  again with the same context makes the same IDs, so a submitter environment sourced before still names its
  network (with random IDs, the grant held to the new ones refused every job ``AccessDeniedException``). An
  existing VPC named by the ``vpc`` context key (``{"vpcId", "subnetIds", "availabilityZones"}``) is created
  under those very IDs, since the template names them as literals.
* **A job's network** (:func:`check_vpc_config`), as ``CreateTrainingJob`` refuses it: every subnet and security
  group exists, and all of them are in one VPC, else ``ValidationException``.
* **A job's file systems** (:func:`check_file_systems`): each ``FileSystemDataSource`` names an FSx for Lustre file
  system of the account (``DescribeFileSystems`` answers for it, moto's FSx), read-only, whose ``DirectoryPath``
  starts with its mount name, and the job runs in the file system's subnet (``VpcConfig``), else
  ``ValidationException``. SageMaker's exact wording for these refusals is not published; the messages say what
  is wrong and with which value.
* **The execution role in VPC mode** (:func:`network_interface_checks`): SageMaker creates the job's network
  interfaces as the job's ``RoleArn``, which needs the EC2 actions of
  :data:`platform_spec.network.VPC_EXECUTION_ROLE_ACTIONS`; the job runner decides them with the emulator's own
  authorization and fails the job with ``ClientError: ...`` naming the first one denied.

Needs moto (imported by the emulator's process only).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from devtools.local_aws.iam_reference import Reference
from devtools.local_aws.operations import Check
from devtools.local_aws.stack import ACCOUNT_ID, MOTO_MISSING, EmulatorUnavailable
from devtools.local_aws.template import availability_zones
from platform_spec.network import FSX_ACCESS_MODE, FSX_FILE_SYSTEM_TYPE, VPC_EXECUTION_ROLE_ACTIONS

try:  # moto is the extra `local`
    from moto.ec2.exceptions import InvalidSubnetIdError
    from moto.ec2.models import ec2_backends
    from moto.ec2.models import security_groups as moto_security_groups
    from moto.ec2.models import subnets as moto_subnets
    from moto.ec2.models import vpcs as moto_vpcs
    from moto.fsx import models as moto_fsx
    from moto.fsx.models import fsx_backends
    from moto.sagemaker.exceptions import ValidationError
except ImportError as exc:
    raise EmulatorUnavailable(f"{MOTO_MISSING} ({exc})") from None


@dataclass
class Twins:
    """moto's twins of the template's network resources: ``refs`` (logical id -> the ``Ref`` value, the ID),
    ``attrs`` ((logical id, attribute) -> value), ``vpc_id`` of the (first) VPC, ``subnets`` (subnet id -> zone)."""

    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    vpc_id: str | None = None
    subnets: dict[str, str] = field(default_factory=dict)


def _zone(value: Any, index: int, zones: list[str]) -> str:
    """A subnet's ``AvailabilityZone``: a literal zone as it is, else the emulator's ``zones`` by the index
    ``Fn::Select`` takes of ``Fn::GetAZs``, or that CDK's placeholder names (``dummy1a``, ``dummy1b``, ...: a
    template synthesized elsewhere without the zones looked up), else by the subnet's ``index``."""
    if isinstance(value, Mapping) and "Fn::Select" in value:
        index = int(value["Fn::Select"][0])
    elif isinstance(value, str) and value in zones:
        return value
    elif isinstance(value, str) and re.fullmatch(r"dummy1[a-z]", value):  # CDK's placeholders, dummy1a first
        index = ord(value[-1]) - ord("a")
    return zones[index % len(zones)]


def stable_id(prefix: str, logical: str, region: str, digits: int = 17) -> str:
    """``prefix`` + ``digits`` hex digits of SHA-256 of the account, ``region`` and the template's ``logical`` ID:
    the same twin gets the same ID in every emulator started with the same template (``vpc-`` + 17 digits is
    EC2's form of a VPC, subnet or security group ID)."""
    return prefix + hashlib.sha256(f"{ACCOUNT_ID}/{region}/{logical}".encode()).hexdigest()[:digits]


def _mount_name(logical: str, region: str) -> str:
    """8 lowercase letters and digits, the form of the mount names FSx draws, derived like :func:`stable_id`."""
    number = int(stable_id("", f"{logical}/LustreMountName", region, 32), 16)
    alphabet = string.ascii_lowercase + string.digits
    return "".join(alphabet[(number >> (6 * i)) % len(alphabet)] for i in range(8))


@contextmanager
def _with_id(module: Any, generator: str, given: Any) -> Iterator[None]:
    """Make moto's ``module.generator`` (``random_vpc_id``, ``random_subnet_id``, ``random_security_group_id``;
    FSx's ``uuid4``) return ``given`` within the block: an existing VPC's IDs, which the template names as
    literals, or a created twin's :func:`stable_id`. What moto creates beside a VPC or a subnet (the main route
    table, the default network ACL and security group, their associations) then names it too, as it would not if
    the object were renamed afterwards."""
    original = getattr(module, generator)
    setattr(module, generator, lambda: given)
    try:
        yield
    finally:
        setattr(module, generator, original)


def create_twins(template: Mapping[str, Any], context: Mapping[str, Any], *, region: str) -> Twins:
    """Create moto's twins of ``template``'s VPC, subnets, security groups and FSx file systems (module docstring).

    Args:
        template: the synthesized template (VPC mode: ``vpc`` set in its context).
        context: the context it was synthesized with (``vpc``'s existing-VPC IDs are read from it).

    Raises:
        ValueError: the ``vpc`` context names an existing VPC with subnets and zones of different lengths.
    """
    ec2 = ec2_backends[ACCOUNT_ID][region]
    twins = Twins()
    resources = template.get("Resources", {})
    vpc = context.get("vpc")
    if isinstance(vpc, Mapping) and "vpcId" in vpc:
        _existing_vpc(ec2, vpc, twins)
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::EC2::VPC":
            with _with_id(moto_vpcs, "random_vpc_id", stable_id("vpc-", logical, region)):
                made = ec2.create_vpc(resource["Properties"].get("CidrBlock", "10.0.0.0/16"))
            twins.refs[logical] = twins.attrs[(logical, "VpcId")] = made.id
            twins.vpc_id = twins.vpc_id or made.id
    subnets = [(k, r) for k, r in resources.items() if r["Type"] == "AWS::EC2::Subnet"]
    zones = availability_zones(region)
    for index, (logical, resource) in enumerate(subnets):
        props = resource["Properties"]
        zone = _zone(props.get("AvailabilityZone"), index, zones)
        vpc_id = _vpc_of(props.get("VpcId"), twins)
        with _with_id(moto_subnets, "random_subnet_id", stable_id("subnet-", logical, region)):
            made = ec2.create_subnet(vpc_id, props.get("CidrBlock", f"10.0.{index}.0/24"), availability_zone=zone)
        twins.refs[logical] = twins.attrs[(logical, "SubnetId")] = made.id
        twins.attrs[(logical, "AvailabilityZone")] = zone
        twins.subnets[made.id] = zone
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::EC2::SecurityGroup":
            props = resource["Properties"]
            with _with_id(moto_security_groups, "random_security_group_id", stable_id("sg-", logical, region)):
                made = ec2.create_security_group(
                    f"{logical}-{len(twins.refs)}",
                    props.get("GroupDescription", logical),
                    _vpc_of(props.get("VpcId"), twins),
                )
            twins.refs[logical] = twins.attrs[(logical, "GroupId")] = made.id
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::FSx::FileSystem":
            _file_system_twin(logical, resource["Properties"], twins, region)
    return twins


def _existing_vpc(ec2: Any, vpc: Mapping[str, Any], twins: Twins) -> None:
    subnet_ids, zones = list(vpc.get("subnetIds") or []), list(vpc.get("availabilityZones") or [])
    if len(subnet_ids) != len(zones):
        raise ValueError(
            f"vpc.availabilityZones: got {len(zones)} zone(s) for {len(subnet_ids)} subnet(s); expected one per subnet"
        )
    with _with_id(moto_vpcs, "random_vpc_id", str(vpc["vpcId"])):
        twins.vpc_id = ec2.create_vpc("10.0.0.0/16").id
    for index, (subnet_id, zone) in enumerate(zip(subnet_ids, zones, strict=True)):
        with _with_id(moto_subnets, "random_subnet_id", str(subnet_id)):
            ec2.create_subnet(twins.vpc_id, f"10.0.{index}.0/24", availability_zone=zone)
        twins.subnets[subnet_id] = zone


def _vpc_of(value: Any, twins: Twins) -> str:
    """The twin VPC a ``VpcId`` property names (a ``Ref``, a ``GetAtt`` or a literal)."""
    if isinstance(value, Mapping):
        logical = value.get("Ref") or (value.get("Fn::GetAtt") or [None])[0]
        if logical in twins.refs:
            return twins.refs[logical]
    if isinstance(value, str):
        return value
    if twins.vpc_id is None:
        raise ValueError("the template has subnets or security groups but no VPC (and the context names none)")
    return twins.vpc_id


def _file_system_twin(logical: str, props: Mapping[str, Any], twins: Twins, region: str) -> None:
    subnet_ids = [_named(s, twins) for s in props.get("SubnetIds", [])]
    groups = [_named(s, twins) for s in props.get("SecurityGroupIds", [])]
    lustre = dict(props.get("LustreConfiguration") or {})
    lustre["MountName"] = _mount_name(logical, region)
    with _with_id(moto_fsx, "uuid4", uuid.UUID(hex=stable_id("", logical, region, 32))):  # fs- + its first 8 digits
        made = fsx_backends[ACCOUNT_ID][region].create_file_system(
            client_request_token=logical,
            file_system_type="LUSTRE",
            storage_capacity=int(props.get("StorageCapacity", 1200)),
            storage_type=props.get("StorageType", "SSD"),
            subnet_ids=subnet_ids,
            security_group_ids=groups,
            tags=None,
            kms_key_id=None,
            windows_configuration=None,
            lustre_configuration=lustre,
            ontap_configuration=None,
            open_zfs_configuration=None,
            file_system_type_version=props.get("FileSystemTypeVersion"),
        )
    twins.refs[logical] = made.file_system_id
    twins.attrs[(logical, "LustreMountName")] = lustre["MountName"]
    twins.attrs[(logical, "DNSName")] = made.dns_name
    twins.attrs[(logical, "ResourceARN")] = made.resource_arn


def _named(value: Any, twins: Twins) -> str:
    if isinstance(value, Mapping):
        logical = value.get("Ref") or (value.get("Fn::GetAtt") or [None])[0]
        return twins.refs.get(logical, str(logical))
    return str(value)


# --- a job's VpcConfig and file systems -------------------------------------------------------------------------


def check_vpc_config(vpc_config: Mapping[str, Any], *, account: str, region: str) -> str:
    """The VPC of a job's ``VpcConfig`` (``{"Subnets": [...], "SecurityGroupIds": [...]}``).

    Raises:
        ValidationError: a subnet or a security group does not exist, or they are not all in one VPC.
    """
    ec2 = ec2_backends[account][region]
    vpcs: dict[str, list[str]] = {}
    for subnet_id in vpc_config.get("Subnets") or []:
        try:
            vpcs.setdefault(ec2.get_subnet(subnet_id).vpc_id, []).append(subnet_id)
        except InvalidSubnetIdError:
            raise ValidationError(
                message=f"VpcConfig.Subnets: subnet {subnet_id} does not exist in account {account}, region {region}."
            ) from None
    for group_id in vpc_config.get("SecurityGroupIds") or []:
        group = ec2.get_security_group_from_id(group_id)
        if group is None:
            raise ValidationError(
                message=f"VpcConfig.SecurityGroupIds: security group {group_id} does not exist in account {account}, "
                f"region {region}."
            )
        vpcs.setdefault(group.vpc_id, []).append(group_id)
    if len(vpcs) != 1:
        spread = "; ".join(f"{vpc}: {', '.join(ids)}" for vpc, ids in sorted(vpcs.items(), key=lambda i: str(i[0])))
        raise ValidationError(
            message=f"VpcConfig: the subnets and security groups must all be in one VPC; got {spread}."
        )
    return str(next(iter(vpcs)))


def file_system_channels(params: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(channel name, FileSystemDataSource)`` of each file-system channel of a ``CreateTrainingJob`` request."""
    return [
        (channel["ChannelName"], channel["DataSource"]["FileSystemDataSource"])
        for channel in params.get("InputDataConfig") or []
        if "FileSystemDataSource" in (channel.get("DataSource") or {})
    ]


def mount_name(file_system_id: str, *, account: str, region: str) -> str | None:
    """The Lustre mount name of ``file_system_id`` in moto's FSx (``None``: no such Lustre file system)."""
    found = fsx_backends[account][region].file_systems.get(file_system_id)
    if found is None or found.file_system_type != "LUSTRE":
        return None
    return str((found.lustre_configuration or {}).get("MountName", ""))


def check_file_systems(params: Mapping[str, Any], *, account: str, region: str) -> None:
    """A job's ``FileSystemDataSource`` channels (module docstring).

    Raises:
        ValidationError: naming the channel, the field and the value expected.
    """
    for name, source in file_system_channels(params):
        system, path = source["FileSystemId"], source["DirectoryPath"]
        where = f"InputDataConfig channel {name!r}: FileSystemDataSource"
        if source["FileSystemType"] != FSX_FILE_SYSTEM_TYPE:
            raise ValidationError(
                message=f"{where}.FileSystemType: got {source['FileSystemType']}; expected {FSX_FILE_SYSTEM_TYPE}."
            )
        if source["FileSystemAccessMode"] != FSX_ACCESS_MODE:
            raise ValidationError(
                message=f"{where}.FileSystemAccessMode: got {source['FileSystemAccessMode']}; expected "
                f"{FSX_ACCESS_MODE} (a training channel is read-only)."
            )
        mount = mount_name(system, account=account, region=region)
        if mount is None:
            raise ValidationError(message=f"{where}.FileSystemId: file system {system} does not exist.")
        if path != f"/{mount}" and not path.startswith(f"/{mount}/"):
            raise ValidationError(
                message=f"{where}.DirectoryPath: got {path}; expected a path under the mount name, /{mount}/..."
            )
        found = fsx_backends[account][region].file_systems[system]
        subnets = list((params.get("VpcConfig") or {}).get("Subnets") or [])
        if not set(found.subnet_ids) & set(subnets):
            raise ValidationError(
                message=f"{where}: file system {system} is in subnet {', '.join(found.subnet_ids)}; the job's "
                f"VpcConfig.Subnets ({', '.join(subnets) or 'none'}) must include it."
            )


# --- the execution role in VPC mode ------------------------------------------------------------------------------


def network_interface_checks(
    vpc_config: Mapping[str, Any], vpc_id: str, reference: Reference, *, region: str
) -> list[Check]:
    """What SageMaker does as the job's execution role to put a job in ``vpc_config``'s subnets: each action of
    :data:`platform_spec.network.VPC_EXECUTION_ROLE_ACTIONS` on the resource types the Service Authorization
    Reference lists for it (the job's subnets, security groups, VPC and a new network interface; ``*`` for the
    ``Describe`` actions), with ``ec2:Vpc`` and ``ec2:Region`` as its condition context."""
    where = f"arn:aws:ec2:{region}:{ACCOUNT_ID}"
    arns = {
        "subnet": [f"{where}:subnet/{s}" for s in vpc_config.get("Subnets") or []],
        "security-group": [f"{where}:security-group/{g}" for g in vpc_config.get("SecurityGroupIds") or []],
        "vpc": [f"{where}:vpc/{vpc_id}"],
        "network-interface": [f"{where}:network-interface/*"],
    }
    context = {"ec2:vpc": [f"{where}:vpc/{vpc_id}"], "ec2:region": [region]}
    found: list[Check] = []
    for action in VPC_EXECUTION_ROLE_ACTIONS:
        prefix, name = action.split(":")
        kinds = [k.name for k in reference.resource_types(prefix, name) if k.name in arns]
        resources = [arn for kind in kinds for arn in arns[kind]] or ["*"]
        found += [Check(action, arn, context) for arn in resources]
    return found


def environment_of(template: Mapping[str, Any], handler: str, resolve: Callable[[Any], Any]) -> dict[str, Any]:
    """The VPC and FSx arguments of :func:`~platform_constructs.submitter.runtime.settings.function_environment`
    that the template gives the function of ``handler``, rendered with the emulator's IDs by ``resolve``
    (:func:`devtools.local_aws.principals.resolver`): ``vpc_subnets``, ``vpc_security_group_ids``, ``fsx_lustre``
    (``{}``: the function is not in VPC mode).

    Raises:
        ValueError: a variable is not the JSON the construct writes (``json.JSONDecodeError``).
    """
    from platform_constructs.submitter.runtime import settings

    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if resource["Type"] != "AWS::Lambda::Function" or props.get("Handler") != handler:
            continue
        variables = props.get("Environment", {}).get("Variables", {})
        found: dict[str, Any] = {}
        if settings.ENV_VPC_SUBNETS in variables:
            found["vpc_subnets"] = json.loads(resolve(variables[settings.ENV_VPC_SUBNETS]))
            found["vpc_security_group_ids"] = resolve(variables[settings.ENV_VPC_SECURITY_GROUP_IDS]).split(",")
        if settings.ENV_FSX_LUSTRE in variables:
            found["fsx_lustre"] = json.loads(resolve(variables[settings.ENV_FSX_LUSTRE]))
        return found
    return {}
