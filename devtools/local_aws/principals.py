"""Who may do what in the emulator: the principals and resource policies of the platform's synthesized template, with
its intrinsic functions resolved to the emulator's physical names.

* **Principals** (:class:`Principal`): each ``AWS::IAM::Role`` with its policies (``AWS::IAM::Policy`` and
  ``AWS::IAM::ManagedPolicy`` resources attached to it, its inline ``Policies``, AWS managed policies by ARN) and its
  ``PermissionsBoundary``; each gets its own access key id (:func:`access_key_for`). The key of the default
  credentials tests and demos seed data with (:data:`~devtools.local_aws.stack.DUMMY_CREDENTIALS`, ``testing``) is
  the account's administrator, a person with ``AdministratorAccess``. A Lambda function's handler names its role
  (:meth:`Authorities.principal_for_handler`); a handler not in the template is a principal with no policies.
* **Resource policies**: S3 bucket policies, KMS key policies, SNS topic and SQS queue policies, by resource ARN; each
  bucket's default SSE-KMS key.
* **Physical names**: the template's functions' environment variables set to a ``Ref`` or ``Fn::GetAtt`` are matched
  with the emulator's own (:func:`~devtools.local_aws.stack.function_environment`, and the job-outcomes function's
  ``IDEMPOTENCY_TABLE``), which names the buckets, the SSM
  parameter and the execution role as the emulator creates them; every other resource is named as CloudFormation names
  what has no explicit name (``STACK-LogicalId``), its ARN built from its type; in VPC mode the network's
  resources (VPC, subnets, security groups, the FSx file system) are the IDs of their twins in moto
  (:class:`Network`, made by :mod:`devtools.local_aws.network`). Intrinsics are rendered by
  :func:`platform_constructs.intrinsics.render`, the project's one renderer.

No moto (AWS managed policies' documents, needed only by a role that attaches one, are read from moto's copy when
asked for).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devtools.local_aws.policy import Policy
from devtools.local_aws.stack import ACCOUNT_ID, DUMMY_CREDENTIALS, StackResources, function_environment
from platform_constructs.intrinsics import Notation, render
from platform_constructs.observability.runtime import settings as observability_settings

ADMINISTRATOR = "administrator"
"""The name of the principal behind :data:`~devtools.local_aws.stack.DUMMY_CREDENTIALS`."""
UNLISTED = "function-not-in-template"
"""The principal of a function whose handler the template has not (a role with no policies)."""
ADMINISTRATOR_ACCESS = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
"""The document of the AWS managed policy ``AdministratorAccess``."""

_MARK = Notation("\x00", "\x01")
_REFERENCE = re.compile("\x00([^\x01]*)\x01")


@dataclass(frozen=True)
class Network:
    """Physical IDs of a template's network resources (VPC mode): ``refs`` (logical id -> ``Ref`` value) and
    ``attrs`` ((logical id, attribute) -> ``Fn::GetAtt`` value)."""

    refs: Mapping[str, str] = field(default_factory=dict)
    attrs: Mapping[tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True)
class Principal:
    """A caller: ``name`` (the role's logical id, or :data:`ADMINISTRATOR`), ``arn`` (``aws:PrincipalArn``),
    ``session_arn`` (the ARN AWS's messages name: ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``), its
    ``access_key``, ``policies`` and ``boundary``."""

    name: str
    arn: str
    session_arn: str
    access_key: str
    policies: tuple[Policy, ...] = ()
    boundary: Policy | None = None


def access_key_for(name: str) -> str:
    """The access key id of principal ``name``: ``AKIA`` and 16 characters of its digest (20, as AWS's are)."""
    return "AKIA" + hashlib.sha256(name.encode()).hexdigest()[:16].upper()


@dataclass
class Authorities:
    """The principals by access key and by logical id, and the resource policies and bucket keys by ARN/name."""

    principals: dict[str, Principal] = field(default_factory=dict)
    by_name: dict[str, Principal] = field(default_factory=dict)
    resource_policies: dict[str, Policy] = field(default_factory=dict)
    bucket_keys: dict[str, str] = field(default_factory=dict)
    handlers: dict[str, str] = field(default_factory=dict)
    """Lambda handler (``module.function``) -> the logical id of its function's role."""

    def add(self, principal: Principal) -> None:
        self.principals[principal.access_key] = principal
        self.by_name[principal.name] = principal

    def by_arn(self, arn: str) -> Principal | None:
        return next((p for p in self.by_name.values() if p.arn == arn), None)

    def principal_for_handler(self, handler: str) -> Principal:
        """The principal a function with ``handler`` (``module.function`` or ``module:function``) acts as: its
        template role's, else :data:`UNLISTED` (a role with no policies, shared by every such handler: test-only
        targets)."""
        role = self.handlers.get(handler.replace(":", "."))
        if role is not None:
            return self.by_name[role]
        if UNLISTED not in self.by_name:
            self.add(
                Principal(
                    UNLISTED,
                    f"arn:aws:iam::{ACCOUNT_ID}:role/{UNLISTED}",
                    f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{UNLISTED}/{UNLISTED}",
                    access_key_for(UNLISTED),
                )
            )
        return self.by_name[UNLISTED]

    def resource_policy(self, arn: str) -> Policy | None:
        """The policy of the resource ``arn`` (an S3 object's is its bucket's)."""
        if arn.startswith("arn:aws:s3:::"):
            arn = "arn:aws:s3:::" + arn[len("arn:aws:s3:::") :].split("/", 1)[0]
        return self.resource_policies.get(arn)


class _Names:
    """Physical names and attributes of a template's resources in the emulator (module docstring)."""

    def __init__(
        self,
        template: Mapping[str, Any],
        region: str,
        resources: StackResources,
        stack: str,
        network: Network | None = None,
    ) -> None:
        self.resources = template.get("Resources", {})
        self.region, self.stack = region, stack
        self.refs: dict[str, str] = dict(network.refs) if network else {}
        self.attrs: dict[tuple[str, str], str] = dict(network.attrs) if network else {}
        emulator = {
            **function_environment(region, resources),
            observability_settings.ENV_IDEMPOTENCY_TABLE: resources.job_events_table,
        }
        for resource in self.resources.values():
            variables = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
            for name, value in variables.items():
                if name not in emulator or not isinstance(value, dict):
                    continue
                if "Ref" in value:
                    self.refs[value["Ref"]] = emulator[name]
                elif "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
                    self.attrs[(value["Fn::GetAtt"][0], "Arn")] = emulator[name]
        for logical, resource in self.resources.items():
            if resource["Type"] == "AWS::ECR::Repository":
                self.refs[logical] = resources.trainer_repository

    def name(self, logical: str) -> str:
        if logical in self.refs:
            return self.refs[logical]
        arn = self.attrs.get((logical, "Arn"))
        if arn is not None:
            return arn.rsplit("/", 1)[-1]
        return f"{self.stack}-{logical}"[:64]

    def ref(self, logical: str) -> str:
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack,
        }
        if logical in pseudo:
            return pseudo[logical]
        kind = self.resources.get(logical, {}).get("Type", "")
        if kind == "AWS::KMS::Key":
            return self.key_id(logical)
        if kind in ("AWS::SNS::Topic", "AWS::IAM::ManagedPolicy"):
            return self.arn(logical)
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT_ID}/{self.name(logical)}"
        return self.name(logical)

    def key_id(self, logical: str) -> str:
        """A KMS key's id: the emulator's where a function's environment names the key's ARN (the platform key,
        :attr:`~devtools.local_aws.stack.StackResources.encryption_key_id`), else a UUID derived from the stack and
        the logical id."""
        known = self.attrs.get((logical, "Arn"))
        if known is not None:
            return known.rsplit("/", 1)[-1]
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.stack}/{logical}"))

    def arn(self, logical: str) -> str:
        known = self.attrs.get((logical, "Arn"))
        if known is not None:
            return known
        kind = self.resources.get(logical, {}).get("Type", "")
        props = self.resources.get(logical, {}).get("Properties", {})
        name, where = self.name(logical), f"{self.region}:{ACCOUNT_ID}"
        arns = {
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT_ID}:role/{name}",
            "AWS::IAM::ManagedPolicy": f"arn:aws:iam::{ACCOUNT_ID}:policy/{name}",
            "AWS::KMS::Key": f"arn:aws:kms:{where}:key/{self.key_id(logical)}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{where}:log-group:{props.get('LogGroupName', name)}:*",
            "AWS::SQS::Queue": f"arn:aws:sqs:{where}:{name}",
            "AWS::SNS::Topic": f"arn:aws:sns:{where}:{name}",
            "AWS::Events::Rule": f"arn:aws:events:{where}:rule/{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{where}:table/{name}",
            "AWS::ECR::Repository": f"arn:aws:ecr:{where}:repository/{name}",
            "AWS::Lambda::Function": f"arn:aws:lambda:{where}:function:{name}",
        }
        return arns.get(kind, f"arn:aws:cloudformation:{where}:resource/{name}")

    def get_att(self, logical: str, attribute: str) -> str | None:
        known = self.attrs.get((logical, attribute))
        if known is not None:
            return known
        return self.arn(logical) if attribute == "Arn" else self.ref(logical)

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function rendered (lists and objects walked)."""
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict) and not (len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, (dict, str)):
            text = render(value, notation=_MARK, get_att=self.get_att)
            return _REFERENCE.sub(lambda m: self.ref(m.group(1)), text)
        return value


def _managed_policy(arn: str) -> Mapping[str, Any]:
    """The document of the AWS managed policy ``arn`` (moto's copy of them)."""
    if arn.endswith(":policy/AdministratorAccess"):
        return ADMINISTRATOR_ACCESS
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    policies = json.loads(aws_managed_policies_data)
    return dict(policies[arn.rsplit("/", 1)[-1]]["Document"])


def _session(role: str, logical: str, template: Mapping[str, Any]) -> str:
    """The role session AWS names in messages: the function's name for a Lambda role, ``SageMaker`` otherwise."""
    for name, resource in template["Resources"].items():
        if (
            resource["Type"] == "AWS::Lambda::Function"
            and resource["Properties"].get("Role", {}).get("Fn::GetAtt", [""])[0] == logical
        ):
            return f"{template.get('_stack', 'TrainingPlatform')}-{name}"[:64]
    return "SageMaker"


def _scan(
    template: Mapping[str, Any], names: _Names, found: Authorities
) -> tuple[dict[str, list[Policy]], dict[str, Policy]]:
    """Fill ``found``'s resource policies, bucket keys and handlers; return the identity policies by the role they
    are attached to and the template's managed policies by ARN."""
    attached: dict[str, list[Policy]] = {}
    managed: dict[str, Policy] = {}
    for logical, resource in template["Resources"].items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            policy = Policy.compile(logical, names.resolve(props["PolicyDocument"]))
            managed[names.arn(logical)] = policy
            for role in props.get("Roles", []):
                attached.setdefault(role["Ref"], []).append(policy)
        elif kind == "AWS::S3::BucketPolicy":
            arn = f"arn:aws:s3:::{names.resolve(props['Bucket'])}"
            found.resource_policies[arn] = Policy.compile(
                logical, names.resolve(props["PolicyDocument"]), resource_policy=True
            )
        elif kind == "AWS::KMS::Key":
            found.resource_policies[names.arn(logical)] = Policy.compile(
                logical, names.resolve(props["KeyPolicy"]), resource_policy=True
            )
        elif kind in ("AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy"):
            policy = Policy.compile(logical, names.resolve(props["PolicyDocument"]), resource_policy=True)
            for target in props.get("Topics", props.get("Queues", [])):
                found.resource_policies[names.arn(target["Ref"])] = policy
        elif kind == "AWS::S3::Bucket":
            for rule in props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", []):
                key = rule.get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID")
                if key is not None:
                    found.bucket_keys[names.ref(logical)] = names.resolve(key)
        elif kind == "AWS::Lambda::Function":
            role = props.get("Role", {}).get("Fn::GetAtt", [None])[0]
            if role and isinstance(props.get("Handler"), str):
                found.handlers.setdefault(
                    props["Handler"], role
                )  # the submitter before the reader, which shares its handler
    return attached, managed


def resolver(
    template: Mapping[str, Any],
    *,
    region: str,
    resources: StackResources,
    network: Network | None = None,
    stack: str = "TrainingPlatform",
) -> Callable[[Any], Any]:
    """A function that renders a value of ``template`` (a property, an environment variable) with the emulator's
    physical names, as :func:`authorities` reads the policies."""
    return _Names(template, region, resources, stack, network).resolve


def authorities(
    template: Mapping[str, Any],
    *,
    region: str,
    resources: StackResources,
    network: Network | None = None,
    stack: str = "TrainingPlatform",
) -> Authorities:
    """The principals and resource policies of ``template`` in the emulator (module docstring).

    Args:
        network: the IDs of the template's network resources in the emulator (VPC mode:
            :func:`devtools.local_aws.network.create_twins`); their ``Ref`` and attributes resolve to them.

    Raises:
        ValueError: a policy is malformed or uses a condition operator the evaluator does not know (named).
    """
    names = _Names(template, region, resources, stack, network)
    found = Authorities()
    found.add(
        Principal(
            ADMINISTRATOR,
            f"arn:aws:iam::{ACCOUNT_ID}:user/{ADMINISTRATOR}",
            f"arn:aws:iam::{ACCOUNT_ID}:user/{ADMINISTRATOR}",
            DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            (Policy.compile("AdministratorAccess", ADMINISTRATOR_ACCESS),),
        )
    )
    attached, managed = _scan(template, names, found)
    for logical, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        props = resource.get("Properties", {})
        policies = list(attached.get(logical, []))
        policies += [
            Policy.compile(f"{logical}/{p['PolicyName']}", names.resolve(p["PolicyDocument"]))
            for p in props.get("Policies", [])
        ]
        for arn in (names.resolve(a) for a in props.get("ManagedPolicyArns", [])):
            policies.append(
                managed[arn] if arn in managed else Policy.compile(arn.rsplit("/", 1)[-1], _managed_policy(arn))
            )
        boundary = None
        if "PermissionsBoundary" in props:
            arn = names.resolve(props["PermissionsBoundary"])
            boundary = managed[arn] if arn in managed else Policy.compile(arn.rsplit("/", 1)[-1], _managed_policy(arn))
        role_arn = names.arn(logical)
        role_name = role_arn.rsplit("/", 1)[-1]
        session = _session(role_name, logical, {**template, "_stack": stack})
        found.add(
            Principal(
                logical,
                role_arn,
                f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{role_name}/{session}",
                access_key_for(logical),
                tuple(policies),
                boundary,
            )
        )
    return found
