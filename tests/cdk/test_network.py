"""VPC mode and permissions boundaries in the synthesized template (issue 25): the security groups' rules, the
endpoints, the functions' placement, the execution role's EC2 statement, the submitter's conditioned
CreateTrainingJob and the boundary on every role."""

from __future__ import annotations

import json

import pytest

from platform_constructs.network import GATEWAY_ENDPOINTS, INTERFACE_ENDPOINTS, efa_instances_per_subnet

from .conftest import ACCOUNT, BOUNDARY_ARN, EXISTING_VPC, REGION, _synthesize

pytestmark = pytest.mark.xdist_group("cdk")

VPC_MODES = ["vpc_created_synth", "vpc_imported_synth"]


def _group_id(synth, group) -> dict:
    return {"Fn::GetAtt": [synth.logical_id(group), "GroupId"]}


def _rules(synth, kind: str, group) -> list[dict]:
    """The standalone ingress or egress rules of ``group`` (``kind``: ``Ingress``/``Egress``)."""
    wanted = _group_id(synth, group)
    return [
        {k: v for k, v in r["Properties"].items() if k != "Description"}
        for r in synth.of_type(f"AWS::EC2::SecurityGroup{kind}").values()
        if r["Properties"]["GroupId"] == wanted
    ]


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_every_role_carries_the_boundary(request, fixture):
    synth = request.getfixturevalue(fixture)
    boundary = synth.context["permissionsBoundaryArn"]
    roles = synth.of_type("AWS::IAM::Role")
    assert len(roles) >= 8  # ours and CDK's helpers (auto-delete, image copy, prefix lists, VPC flow logs)
    without = {name for name, role in roles.items() if role["Properties"].get("PermissionsBoundary") != boundary}
    assert without == set()


def test_no_boundary_without_the_key(variant_synth):
    assert all("PermissionsBoundary" not in r["Properties"] for r in variant_synth.of_type("AWS::IAM::Role").values())
    assert variant_synth.of_type("AWS::EC2::SecurityGroup") == {}
    assert all("VpcConfig" not in f["Properties"] for f in variant_synth.of_type("AWS::Lambda::Function").values())


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_the_jobs_group_admits_itself_only_and_reaches_itself_the_endpoints_and_s3(request, fixture):
    synth = request.getfixturevalue(fixture)
    network = synth.stack.network
    jobs, endpoints = network.job_security_group, network.endpoint_security_group
    group = synth.resources[synth.logical_id(jobs)]["Properties"]
    assert "SecurityGroupIngress" not in group and "SecurityGroupEgress" not in group  # no inline (0.0.0.0/0) rule
    ingress = _rules(synth, "Ingress", jobs)
    assert {
        "IpProtocol": "-1",
        "SourceSecurityGroupId": _group_id(synth, jobs),
        "GroupId": _group_id(synth, jobs),
    } in ingress
    others = [r for r in ingress if r["SourceSecurityGroupId"] != _group_id(synth, jobs)]
    if synth.stack.file_system is None:
        assert others == []
    else:  # Lustre's ports from the file servers, nothing else
        servers = _group_id(synth, synth.stack.file_system.security_group)
        assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in others) == [
            ("tcp", 988, 988),
            ("tcp", 1018, 1023),
        ]
        assert all(r["SourceSecurityGroupId"] == servers for r in others)
    egress = _rules(synth, "Egress", jobs)
    assert {
        "IpProtocol": "-1",
        "DestinationSecurityGroupId": _group_id(synth, jobs),
        "GroupId": _group_id(synth, jobs),
    } in egress
    https = [r for r in egress if r["IpProtocol"] == "tcp" and r["FromPort"] == 443]
    assert all((r["FromPort"], r["ToPort"]) == (443, 443) for r in https) and len(https) == 2
    (to_endpoints,) = [r for r in https if "DestinationSecurityGroupId" in r]
    assert to_endpoints["DestinationSecurityGroupId"] == _group_id(synth, endpoints)
    (to_s3,) = [r for r in https if "DestinationPrefixListId" in r]
    logical_id, attribute = to_s3["DestinationPrefixListId"]["Fn::GetAtt"]
    assert logical_id.startswith("NetworkS3PrefixList") and attribute == "PrefixLists.0.PrefixListId"


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_the_functions_group_admits_nothing_and_the_endpoints_admit_https_from_the_platform(request, fixture):
    synth = request.getfixturevalue(fixture)
    network = synth.stack.network
    functions, endpoints = network.function_security_group, network.endpoint_security_group
    assert _rules(synth, "Ingress", functions) == []
    egress = _rules(synth, "Egress", functions)
    assert len(egress) == 3 and all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in egress)
    ingress = _rules(synth, "Ingress", endpoints)
    assert sorted(json.dumps(r["SourceSecurityGroupId"]) for r in ingress) == sorted(
        json.dumps(_group_id(synth, g)) for g in (network.job_security_group, functions)
    )
    assert all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in ingress)


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_the_endpoints_cover_every_service_the_platform_calls(request, fixture):
    synth = request.getfixturevalue(fixture)
    endpoints = synth.of_type("AWS::EC2::VPCEndpoint").values()
    names = {json.dumps(e["Properties"]["ServiceName"]): e["Properties"] for e in endpoints}
    services = {s.short_name for s, _ in INTERFACE_ENDPOINTS.values()} | {"s3", "dynamodb"}
    assert services >= {"sagemaker.api", "ssm", "events", "monitoring", "logs", "ecr.api", "ecr.dkr", "sts", "kms"}
    assert len(names) == len(INTERFACE_ENDPOINTS) + len(GATEWAY_ENDPOINTS) == len(services)
    for endpoint in names.values():
        if endpoint.get("VpcEndpointType") == "Interface":
            assert endpoint["PrivateDnsEnabled"] is True
            assert endpoint["SecurityGroupIds"] == [_group_id(synth, synth.stack.network.endpoint_security_group)]
    if fixture == "vpc_imported_synth":
        gateways = [e for e in names.values() if e.get("VpcEndpointType") == "Gateway"]
        assert all(sorted(e["RouteTableIds"]) == EXISTING_VPC["routeTableIds"] for e in gateways)


def test_a_created_vpc_has_isolated_subnets_in_three_zones_flow_logs_and_no_internet(vpc_created_synth):
    synth = vpc_created_synth
    subnets = synth.of_type("AWS::EC2::Subnet").values()
    assert sorted(s["Properties"]["CidrBlock"] for s in subnets) == ["10.0.0.0/18", "10.0.128.0/18", "10.0.64.0/18"]
    assert all(s["Properties"]["MapPublicIpOnLaunch"] is False for s in subnets)
    for kind in ("InternetGateway", "NatGateway", "EIP"):
        assert synth.of_type(f"AWS::EC2::{kind}") == {}
    (flow_log,) = synth.of_type("AWS::EC2::FlowLog").values()
    assert flow_log["Properties"]["TrafficType"] == "ALL"
    group = synth.resources[flow_log["Properties"]["LogGroupName"]["Ref"]]
    assert group["Properties"]["RetentionInDays"] == 30  # the platform's retention (VARIANT_CONTEXT)
    assert efa_instances_per_subnet("10.0.0.0/18") == 3274 and efa_instances_per_subnet("10.0.0.0/24") == 48


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_every_platform_function_runs_in_the_job_subnets_with_the_functions_group(request, fixture):
    synth = request.getfixturevalue(fixture)
    stack, network = synth.stack, synth.stack.network
    functions = [
        stack.submitter.function,
        stack.submitter.reader_function,
        stack.submitter.continuation_function,
        stack.observability.plan_metrics.function,
        stack.observability.job_outcomes.function,
    ]
    subnets = [stack.resolve(s.subnet_id) for s in network.job_subnets]
    assert len(subnets) == (3 if fixture == "vpc_created_synth" else 2)
    for function in functions:
        properties = synth.resources[synth.logical_id(function)]["Properties"]
        assert properties["VpcConfig"] == {
            "SubnetIds": subnets,
            "SecurityGroupIds": [_group_id(synth, network.function_security_group)],
        }
        policy = _policy_of(synth, function.role)
        (statement,) = [s for s in policy if s.get("Sid") == "LambdaNetworkInterfaces"]
        assert "ec2:CreateNetworkInterface" in statement["Action"]


def _policy_of(synth, role) -> list[dict]:
    wanted = {"Ref": synth.stack.resolve(role.node.default_child.logical_id)}
    return [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if wanted in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_execution_role_may_create_network_interfaces_in_the_job_subnets_only(vpc_imported_synth):
    synth = vpc_imported_synth
    found = {s.get("Sid"): s for s in _policy_of(synth, synth.stack.execution_role.role)}
    create = found["TrainingNetworkInterfaces"]
    assert create["Action"] == "ec2:CreateNetworkInterface"
    rendered = json.dumps(create["Resource"])
    assert all(f"subnet/{subnet}" in rendered for subnet in EXISTING_VPC["subnetIds"])
    assert "security-group/" in rendered and "network-interface/*" in rendered
    assert sorted(found["TrainingNetworkInterfacePermissions"]["Action"]) == [
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
    ]
    assert sorted(found["TrainingDescribeNetwork"]["Action"]) == [
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSubnets",
        "ec2:DescribeVpcs",
    ]


def test_no_ec2_actions_without_a_vpc(variant_synth):
    statements = _policy_of(variant_synth, variant_synth.stack.execution_role.role)
    assert not any("ec2:" in json.dumps(s["Action"]) for s in statements)


@pytest.mark.parametrize("fixture", VPC_MODES)
def test_create_training_job_is_allowed_in_the_platform_network_only(request, fixture):
    synth = request.getfixturevalue(fixture)
    stack, network = synth.stack, synth.stack.network
    file_systems = (
        {}
        if stack.file_system is None
        else {
            "sagemaker:FileSystemId": [{"Ref": synth.logical_id(stack.file_system.file_system)}],
            "sagemaker:FileSystemType": ["FSxLustre"],
            "sagemaker:FileSystemAccessMode": ["ro"],
        }
    )
    expected = {
        "ForAllValues:StringEquals": {
            "sagemaker:VpcSubnets": [stack.resolve(s.subnet_id) for s in network.job_subnets],
            "sagemaker:VpcSecurityGroupIds": [_group_id(synth, network.job_security_group)],
            **file_systems,
        },
        "Null": {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"},
    }
    for role in (stack.submitter.role, stack.submitter.continuation_role):
        statements = _policy_of(synth, role)
        creating = [s for s in statements if "sagemaker:CreateTrainingJob" in json.dumps(s["Action"])]
        assert {s["Sid"] for s in creating} == {"TrainingJobsInNetwork", "TrainingJobsOnPlansInNetwork"}
        for statement in creating:
            assert statement["Action"] == "sagemaker:CreateTrainingJob"
            assert statement["Condition"] == expected
    reader = _policy_of(synth, stack.submitter.reader_role)
    assert not any("CreateTrainingJob" in json.dumps(s["Action"]) for s in reader)


def test_the_functions_environment_names_the_job_subnets_and_group(vpc_imported_synth):
    synth = vpc_imported_synth
    variables = synth.resources[synth.logical_id(synth.stack.submitter.function)]["Properties"]["Environment"][
        "Variables"
    ]
    assert json.loads(variables["VPC_SUBNETS"]) == [
        {"availability_zone": zone, "subnet_id": subnet}
        for subnet, zone in zip(EXISTING_VPC["subnetIds"], EXISTING_VPC["availabilityZones"], strict=True)
    ]
    assert variables["VPC_SECURITY_GROUP_IDS"] == _group_id(synth, synth.stack.network.job_security_group)
    file_system = synth.stack.file_system
    logical_id = synth.logical_id(file_system.file_system)
    subnet, zone = EXISTING_VPC["subnetIds"][0], EXISTING_VPC["availabilityZones"][0]
    assert variables["FSX_LUSTRE"] == {
        "Fn::Join": [
            "",
            [
                f'{{"availability_zone": "{zone}", "file_system_id": "',
                {"Ref": logical_id},
                '", "mount_name": "',
                {"Fn::GetAtt": [logical_id, "LustreMountName"]},
                f'", "subnet_id": "{subnet}"}}',
            ],
        ]
    }


def test_the_file_system_lives_in_the_first_job_subnet_under_the_platform_key(vpc_imported_synth):
    synth = vpc_imported_synth
    stack = synth.stack
    (file_system,) = synth.of_type("AWS::FSx::FileSystem").values()
    assert file_system["Properties"]["SubnetIds"] == [EXISTING_VPC["subnetIds"][0]]
    assert file_system["Properties"]["KmsKeyId"] == {"Ref": synth.logical_id(stack.buckets.encryption_key)}
    assert file_system["DeletionPolicy"] == "Retain"
    (association,) = synth.of_type("AWS::FSx::DataRepositoryAssociation").values()
    path = json.dumps(association["Properties"]["DataRepositoryPath"])
    assert synth.logical_id(stack.buckets.data) in path and "/datasets/" in path
    outputs = synth.template_json["Outputs"]
    assert outputs["FsxFileSystemId"]["Value"] == {"Ref": synth.logical_id(stack.file_system.file_system)}


def test_the_boundary_fixture_is_the_accounts_policy():
    assert BOUNDARY_ARN.startswith("arn:aws:iam::123456789012:policy/")


def test_internet_access_adds_nat_routes_and_https_out_for_jobs_and_functions_only(tmp_path) -> None:
    """``internetAccess``: public subnets with a NAT gateway per zone, and the jobs' and functions' groups may send
    HTTPS anywhere (routes alone would leave them as closed as before); nothing inbound changes; cdk-nag passes."""
    synth = _synthesize(
        tmp_path,
        {"vpc": {"create": True, "cidr": "10.1.0.0/20", "maxAzs": 2, "internetAccess": True}},
        environ={"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION},
    )
    assert len(synth.of_type("AWS::EC2::NatGateway")) == 2 and len(synth.of_type("AWS::EC2::InternetGateway")) == 1
    network = synth.stack.network
    for group in (network.job_security_group, network.function_security_group):
        inline = synth.resources[synth.logical_id(group)]["Properties"]  # CDK writes a CIDR peer's rule inline
        anywhere = [r for r in inline.get("SecurityGroupEgress", []) if r.get("CidrIp") == "0.0.0.0/0"]
        assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in anywhere] == [("tcp", 443, 443)]
        assert "SecurityGroupIngress" not in inline
        assert all("CidrIp" not in r for r in _rules(synth, "Ingress", group))


def test_the_outputs_name_the_job_subnets_and_group_for_processing_jobs(vpc_imported_synth):
    """``trainctl prepare-data --remote`` reads the jobs' network from the outputs: the submitter's subnets."""
    from trainctl.remote_prepare import ProcessingTargets

    synth = vpc_imported_synth
    outputs = synth.template_json["Outputs"]
    assert outputs["JobSubnetIds"]["Value"] == ",".join(EXISTING_VPC["subnetIds"])
    assert outputs["JobSecurityGroupId"]["Value"] == _group_id(synth, synth.stack.network.job_security_group)
    deployed = {"TrainerImageUri": "i", "ExecutionRoleArn": "r", "DataBucketName": "b", "BucketKeyArn": "k"}
    deployed["JobSecurityGroupId"] = "sg-1"
    targets = ProcessingTargets.from_stack_outputs({**deployed, "JobSubnetIds": outputs["JobSubnetIds"]["Value"]})
    assert (targets.subnets, targets.security_groups) == (tuple(EXISTING_VPC["subnetIds"]), ("sg-1",))
