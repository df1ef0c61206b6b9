"""The platform's network in VPC mode: where training jobs and the platform's functions run, and how they reach AWS.

:class:`PlatformNetwork` (construct ID ``Network``) either creates a VPC (:class:`CreatedVpc`: private isolated
subnets in ``max_azs`` availability zones, no internet gateway or NAT unless asked, flow logs) or takes an
existing one (:class:`ExistingVpc`: IDs only, so synth needs no AWS account), and adds:

* the jobs' security group: all traffic from and to its own members (EFA's requirement, "Get started with EFA and
  NCCL", which also carries inter-container encryption's IPsec, UDP 500 and ESP, SageMaker Developer Guide
  "Protect Communications Between ML Compute Instances"), HTTPS out to the endpoints and S3, nothing else;
* the functions' security group: no inbound, HTTPS out to the endpoints, S3 and DynamoDB only;
* the endpoints (:data:`INTERFACE_ENDPOINTS`, :data:`GATEWAY_ENDPOINTS`) with their own group, HTTPS in from the
  jobs' and functions' groups only (``ExistingVpc.create_endpoints=False`` when the VPC has them already).

IP space: SageMaker gives a training instance without EFA at least 2 private IP addresses and one with EFA at
least 5 (SageMaker Developer Guide, "Give SageMaker Training Jobs Access to Resources in Your Amazon VPC"), and a
subnet loses 5 addresses to AWS (Amazon VPC User Guide, "Subnet CIDR blocks"); :func:`efa_instances_per_subnet`
says how many EFA instances a subnet holds beside the endpoints (a /24 subnet: 48; the default 10.0.0.0/16 in 3 zones, /18
subnets: 3274 each).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr

from constructs import Construct
from platform_spec.network import (
    TRAINING_NETWORK_DESCRIBE,
    TRAINING_NETWORK_INTERFACE_CREATE,
    TRAINING_NETWORK_INTERFACE_MANAGE,
)

from . import acknowledgements as nag

__all__ = [
    "DEFAULT_CIDR",
    "DEFAULT_MAX_AZS",
    "GATEWAY_ENDPOINTS",
    "INTERFACE_ENDPOINTS",
    "CreatedVpc",
    "ExistingVpc",
    "IPlatformNetwork",
    "PlatformNetwork",
    "PlatformNetworkProps",
    "efa_instances_per_subnet",
]

DEFAULT_CIDR = "10.0.0.0/16"
DEFAULT_MAX_AZS = 3
HTTPS = ec2.Port.tcp(443)
PREFIX_LIST_PROVIDER_ID = "AWS" + cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace("-", "")
"""Construct ID (``AWS`` + the UUID, a stack singleton) of the function CDK's ``AwsCustomResource`` runs."""

EFA_INSTANCE_ADDRESSES = 5
"""Private IP addresses a training instance with EFA takes at least (SageMaker Developer Guide, "Give SageMaker
Training Jobs Access to Resources in Your Amazon VPC": 2 without EFA, 5 with)."""
SUBNET_RESERVED_ADDRESSES = 5
"""Addresses AWS reserves in every subnet: the first four and the last (Amazon VPC User Guide, "Subnet CIDR
blocks")."""

INTERFACE_ENDPOINTS: dict[str, tuple[ec2.InterfaceVpcEndpointAwsService, str]] = {
    "SageMakerApi": (
        ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API,
        "the submitter, reader and continuation (Create/Describe/Stop/Search training jobs, DescribeTrainingPlan) "
        "and the plan-metrics function",
    ),
    "Ssm": (ec2.InterfaceVpcEndpointAwsService.SSM, "the submitter's and plan-metrics function's plan-ARNs parameter"),
    "Events": (ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE, "the continuation's run decisions (PutEvents)"),
    "Monitoring": (
        ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
        "the plan-metrics and job-outcomes functions (PutMetricData) and the jobs' metrics",
    ),
    "Logs": (ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS, "the training jobs' container logs"),
    "EcrApi": (ec2.InterfaceVpcEndpointAwsService.ECR, "ECR's API (GetAuthorizationToken) for the jobs' image"),
    "EcrDocker": (ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER, "ECR's Docker registry (the image's layers)"),
    "Sts": (ec2.InterfaceVpcEndpointAwsService.STS, "code in a job that asks STS for its identity or a role"),
    "Kms": (ec2.InterfaceVpcEndpointAwsService.KMS, "code in a job that calls KMS with the platform's key"),
}
"""Interface endpoints (construct ID -> service, who calls it from inside the VPC). A caller whose endpoint is
missing hangs until its timeout: there is no other route out of isolated subnets. The functions' own logs go
through Lambda, not the VPC."""

GATEWAY_ENDPOINTS: dict[str, tuple[ec2.GatewayVpcEndpointAwsService, str]] = {
    "S3": (
        ec2.GatewayVpcEndpointAwsService.S3,
        "the jobs' channels, checkpoints and output; the submitter's and continuation's records",
    ),
    "DynamoDb": (ec2.GatewayVpcEndpointAwsService.DYNAMODB, "the job-outcomes function's idempotency table"),
}
"""Gateway endpoints (construct ID -> service, who calls it): routes in the subnets' route tables, no charge."""


def efa_instances_per_subnet(cidr: str) -> int:
    """How many training instances with EFA a subnet of ``cidr`` holds (IPv4 addresses less AWS's 5, each
    instance :data:`EFA_INSTANCE_ADDRESSES`); the interface endpoints take one address per subnet each.

    Raises:
        ValueError: ``cidr`` is not an IPv4 network.
    """
    network = ipaddress.IPv4Network(cidr)
    return (network.num_addresses - SUBNET_RESERVED_ADDRESSES - len(INTERFACE_ENDPOINTS)) // EFA_INSTANCE_ADDRESSES


@dataclass(frozen=True, kw_only=True)
class CreatedVpc:
    """A VPC the platform creates.

    Attributes:
        cidr: its IPv4 block, split evenly into one private subnet per zone (public subnets, /28 each, only with
            ``internet_access``). Default: :data:`DEFAULT_CIDR`.
        max_azs: availability zones with a private subnet. Default: :data:`DEFAULT_MAX_AZS`.
        internet_access: a public subnet, internet gateway and NAT gateway per zone, the private subnets route
            to it, and the jobs' and functions' groups may send HTTPS (TCP 443) to any IPv4 address (a package index,
            a model hub). Default: none; AWS is reached through the endpoints only.
    """

    cidr: str = DEFAULT_CIDR
    max_azs: int = DEFAULT_MAX_AZS
    internet_access: bool = False


@dataclass(frozen=True, kw_only=True)
class ExistingVpc:
    """A VPC the platform runs in but does not create, named by IDs (synth looks nothing up).

    Attributes:
        vpc_id: ``vpc-...``.
        subnet_ids: the private subnets jobs and functions run in.
        availability_zones: the zone of each subnet, same order.
        route_table_ids: the route table of each subnet, same order (the gateway endpoints' routes go there);
            needed with ``create_endpoints``.
        create_endpoints: create the endpoints. ``False`` when the VPC already has them with private DNS (a
            second interface endpoint with private DNS for one service fails to deploy); its endpoints must then
            admit HTTPS from the jobs' and functions' groups. Default: they are created.
    """

    vpc_id: str
    subnet_ids: tuple[str, ...]
    availability_zones: tuple[str, ...]
    route_table_ids: tuple[str, ...] = ()
    create_endpoints: bool = True


@dataclass(frozen=True, kw_only=True)
class PlatformNetworkProps:
    """Properties of :class:`PlatformNetwork`.

    Attributes:
        vpc: the VPC to create or the one to use.
        log_retention: retention of a created VPC's flow logs. Default: three months.
        removal_policy: what happens to the flow logs' log group when it leaves the stack. Default: it is retained.
    """

    vpc: CreatedVpc | ExistingVpc
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


@runtime_checkable
class IPlatformNetwork(Protocol):
    """What the submitter, the observability functions and the execution role take of the network (implemented by
    :class:`PlatformNetwork`): the jobs' subnets and group, and the placement of a Lambda function."""

    job_subnets: list[ec2.ISubnet]
    job_security_group: ec2.ISecurityGroup

    def function_options(self, role: iam.Role) -> dict[str, Any]: ...

    def grant_training_network_interfaces(self, role: iam.IRole) -> None: ...


class PlatformNetwork(Construct):
    """The VPC (created: child ``Vpc``), the jobs' and functions' security groups (``JobSecurityGroup``,
    ``FunctionSecurityGroup``), the endpoints (``Endpoints``) and, for the security groups' HTTPS to S3 and
    DynamoDB, the regional prefix lists (``S3PrefixList``, ``DynamoDBPrefixList``: read at deploy time).

    Attributes:
        vpc: the VPC.
        job_subnets: the private subnets jobs and functions run in, one per zone.
        job_security_group / function_security_group / endpoint_security_group: the groups.
        interface_endpoints / gateway_endpoints: the endpoints by construct ID (empty without ``create_endpoints``).
        flow_log: a created VPC's flow log (``None`` for an existing VPC).
    """

    def __init__(self, scope: Construct, id: str, props: PlatformNetworkProps) -> None:
        super().__init__(scope, id)
        self.flow_log: ec2.FlowLog | None = None
        if isinstance(props.vpc, CreatedVpc):
            self.vpc, self.job_subnets = self._create_vpc(props)
        else:
            self.vpc, self.job_subnets = self._import_vpc(props.vpc)
        self.job_security_group = ec2.SecurityGroup(
            self,
            "JobSecurityGroup",
            vpc=self.vpc,
            description="Training jobs: all traffic among themselves (EFA, NCCL, IPsec), HTTPS to AWS endpoints",
            allow_all_outbound=False,
        )
        self.job_security_group.add_ingress_rule(
            self.job_security_group, ec2.Port.all_traffic(), "Jobs' instances among themselves (EFA)"
        )
        self.job_security_group.add_egress_rule(
            self.job_security_group, ec2.Port.all_traffic(), "Jobs' instances among themselves (EFA)"
        )
        self.function_security_group = ec2.SecurityGroup(
            self,
            "FunctionSecurityGroup",
            vpc=self.vpc,
            description="Platform Lambda functions: no inbound, HTTPS to AWS endpoints only",
            allow_all_outbound=False,
        )
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="AWS interface endpoints: HTTPS from the platform jobs and functions only",
            allow_all_outbound=False,
        )
        for group in (self.job_security_group, self.function_security_group):
            self.endpoint_security_group.add_ingress_rule(group, HTTPS, "HTTPS from the platform")
            group.add_egress_rule(self.endpoint_security_group, HTTPS, "HTTPS to the interface endpoints")
        prefix_lists = self._prefix_lists()
        self.job_security_group.add_egress_rule(prefix_lists["S3"], HTTPS, "HTTPS to S3 (gateway endpoint)")
        for name, peer in prefix_lists.items():
            self.function_security_group.add_egress_rule(peer, HTTPS, f"HTTPS to {name} (gateway endpoint)")

        if isinstance(props.vpc, CreatedVpc) and props.vpc.internet_access:
            for group in (self.job_security_group, self.function_security_group):
                group.add_egress_rule(ec2.Peer.any_ipv4(), HTTPS, "HTTPS to the internet through the NAT gateways")

        self.interface_endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        self.gateway_endpoints: dict[str, ec2.GatewayVpcEndpoint] = {}
        if isinstance(props.vpc, CreatedVpc) or props.vpc.create_endpoints:
            self._endpoints()

    # -- the VPC --------------------------------------------------------------------------------

    def _create_vpc(self, props: PlatformNetworkProps) -> tuple[ec2.IVpc, list[ec2.ISubnet]]:
        options = props.vpc
        assert isinstance(options, CreatedVpc)
        private = (
            ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
            if options.internet_access
            else ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        )
        public = [ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=28)]
        flow_logs = logs.LogGroup(self, "FlowLogs", retention=props.log_retention, removal_policy=props.removal_policy)
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(options.cidr),
            max_azs=options.max_azs,
            subnet_configuration=[*(public if options.internet_access else []), private],
            nat_gateways=options.max_azs if options.internet_access else 0,
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        self.flow_log = vpc.node.find_child("All")  # type: ignore[assignment]
        subnet_type = private.subnet_type
        return vpc, list(vpc.select_subnets(subnet_type=subnet_type).subnets)

    def _import_vpc(self, options: ExistingVpc) -> tuple[ec2.IVpc, list[ec2.ISubnet]]:
        vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=options.vpc_id,
            availability_zones=sorted(set(options.availability_zones)),
        )
        route_tables = options.route_table_ids or (None,) * len(options.subnet_ids)
        subnets = [
            ec2.Subnet.from_subnet_attributes(
                self, f"Subnet{index}", subnet_id=subnet_id, availability_zone=zone, route_table_id=route_table
            )
            for index, (subnet_id, zone, route_table) in enumerate(
                zip(options.subnet_ids, options.availability_zones, route_tables, strict=True)
            )
        ]
        return vpc, subnets

    def _prefix_lists(self) -> dict[str, ec2.IPeer]:
        """The AWS-managed prefix lists of S3 and DynamoDB in the stack's region (``com.amazonaws.<region>.s3``,
        ``...dynamodb``), read at deploy time with ``ec2:DescribeManagedPrefixLists``: a security group rule names a
        prefix list by its ID, which differs per region and which no CloudFormation attribute gives."""
        stack = cdk.Stack.of(self)
        peers: dict[str, ec2.IPeer] = {}
        for name, service in (("S3", "s3"), ("DynamoDB", "dynamodb")):
            call = cr.AwsSdkCall(
                service="EC2",
                action="describeManagedPrefixLists",
                parameters={
                    "Filters": [{"Name": "prefix-list-name", "Values": [f"com.amazonaws.{stack.region}.{service}"]}]
                },
                physical_resource_id=cr.PhysicalResourceId.of(f"com.amazonaws.{stack.region}.{service}"),
                output_paths=["PrefixLists.0.PrefixListId"],
            )
            lookup = cr.AwsCustomResource(
                self,
                f"{name}PrefixList",
                on_create=call,
                on_update=call,
                policy=cr.AwsCustomResourcePolicy.from_statements(
                    [iam.PolicyStatement(actions=["ec2:DescribeManagedPrefixLists"], resources=["*"])]
                ),
                install_latest_aws_sdk=False,
            )
            nag.acknowledge(
                lookup,
                nag.IAM5,
                "ec2:DescribeManagedPrefixLists has no resource-level permissions (AWS requires '*'); it only reads.",
                finding="Resource::*",
            )
            peers[name] = ec2.Peer.prefix_list(lookup.get_response_field("PrefixLists.0.PrefixListId"))
        provider = stack.node.find_child(PREFIX_LIST_PROVIDER_ID)
        nag.acknowledge(
            provider,
            nag.IAM4,
            "CDK's AwsCustomResource provider (a stack singleton) writes its logs with AWSLambdaBasicExecutionRole; "
            "it runs at deploy time only, to read the S3 and DynamoDB prefix lists.",
            finding=nag.managed_policy(
                provider,
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AWSLambdaBasicExecutionRole"
                ).managed_policy_arn,
            ),
        )
        return peers

    # -- endpoints ------------------------------------------------------------------------------

    def _endpoints(self) -> None:
        scope = Construct(self, "Endpoints")
        subnets = ec2.SubnetSelection(subnets=self.job_subnets)
        for endpoint_id, (gateway, _) in GATEWAY_ENDPOINTS.items():
            self.gateway_endpoints[endpoint_id] = ec2.GatewayVpcEndpoint(
                scope, endpoint_id, vpc=self.vpc, service=gateway, subnets=[subnets]
            )
        for endpoint_id, (service, _) in INTERFACE_ENDPOINTS.items():
            self.interface_endpoints[endpoint_id] = ec2.InterfaceVpcEndpoint(
                scope,
                endpoint_id,
                vpc=self.vpc,
                service=service,
                subnets=subnets,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                open=False,
            )

    # -- what jobs and functions need ---------------------------------------------------------------

    def function_options(self, role: iam.Role) -> dict[str, Any]:
        """``lambda_.Function`` keyword arguments placing a function in the job subnets with the functions' group,
        and ``role`` granted the network-interface actions Lambda needs for it (AWS Lambda Developer Guide,
        "Giving Lambda functions access to resources in an Amazon VPC": what ``AWSLambdaVPCAccessExecutionRole``
        holds, here scoped to this network's subnets and group)."""
        stack = cdk.Stack.of(self)
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="LambdaNetworkInterfaces",
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:DeleteNetworkInterface",
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                resources=[interfaces, *self._subnet_arns(), self._group_arn(self.function_security_group)],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="LambdaDescribeNetwork",
                actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"],
                resources=["*"],  # Describe* have no resource-level permissions
            )
        )
        self._acknowledge_interfaces(role, interfaces, "Lambda")
        return {
            "vpc": self.vpc,
            "vpc_subnets": ec2.SubnetSelection(subnets=self.job_subnets),
            "security_groups": [self.function_security_group],
        }

    def grant_training_network_interfaces(self, role: iam.IRole) -> None:
        """Grant ``role`` (a SageMaker execution role) what SageMaker needs to run its jobs in this network
        (:data:`platform_spec.network.VPC_EXECUTION_ROLE_ACTIONS`, with their source): creating network
        interfaces in the job subnets with the jobs' group, their permissions and deletion on the account's network
        interfaces in this region, and the Describe actions (no resource-level permissions)."""
        stack = cdk.Stack.of(self)
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingNetworkInterfaces",
                actions=list(TRAINING_NETWORK_INTERFACE_CREATE),
                resources=[interfaces, *self._subnet_arns(), self._group_arn(self.job_security_group)],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingNetworkInterfacePermissions",
                actions=list(TRAINING_NETWORK_INTERFACE_MANAGE),
                resources=[interfaces],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingDescribeNetwork",
                actions=list(TRAINING_NETWORK_DESCRIBE),
                resources=["*"],
            )
        )
        self._acknowledge_interfaces(role, interfaces, "SageMaker")

    def _acknowledge_interfaces(self, role: iam.IRole, interfaces: str, service: str) -> None:
        nag.acknowledge(
            role,
            nag.IAM5,
            f"{service} creates the network interfaces it attaches with generated IDs, so the interface actions are "
            "granted on the account's network interfaces in this region (creation only in the platform's subnets "
            "and group).",
            finding=nag.resource(self, interfaces),
        )
        nag.acknowledge(
            role,
            nag.IAM5,
            "EC2's Describe actions have no resource-level permissions (AWS requires '*').",
            finding="Resource::*",
        )

    def _subnet_arns(self) -> list[str]:
        stack = cdk.Stack.of(self)
        return [stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id) for s in self.job_subnets]

    def _group_arn(self, group: ec2.ISecurityGroup) -> str:
        return cdk.Stack.of(self).format_arn(
            service="ec2", resource="security-group", resource_name=group.security_group_id
        )
