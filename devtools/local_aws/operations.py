"""What an HTTP request to the emulator asks AWS to authorize: its caller's access key, service and operation
(:func:`identify`, from the SigV4 credential and botocore's service model), then each action, resource ARN and
condition context it is authorized on (:func:`checks`), resources the request implies included.

* **Caller**: the access key id of the SigV4 ``Authorization`` header's ``Credential`` (or a presigned URL's
  ``X-Amz-Credential``), and the region and signing name of its scope.
* **Operation**: the JSON protocols' ``X-Amz-Target``; the query protocol's ``Action``; S3's REST method, path and
  query against each operation's ``requestUri`` in botocore's model (the most specific match, members located in the
  query string or headers that the model marks required included, so ``CopyObject`` is not ``PutObject``).
* **Action**: ``prefix:Operation``, except where AWS authorizes an operation under another action (:data:`S3_ACTIONS`,
  the Amazon S3 User Guide's "Required permissions for Amazon S3 API operations").
* **Resources**: the Service Authorization Reference's ARN pattern of each resource type of the action
  (:mod:`devtools.local_aws.iam_reference`) with its variables from the request's parameters (an explicit ``...Arn``
  parameter used as it is); ``*`` where the action has no resource type the request names.
* **Implied**: ``CreateTrainingJob`` is also authorized on its ``ResourceConfig.TrainingPlanArn`` and that plan's
  reserved capacity (SageMaker Developer Guide, "IAM for SageMaker training plans"), needs ``iam:PassRole`` on its
  ``RoleArn`` (``iam:PassedToService`` ``sagemaker.amazonaws.com``) and ``sagemaker:AddTags`` when it has ``Tags``;
  S3 object writes and reads under SSE-KMS need ``kms:GenerateDataKey`` / ``kms:Decrypt`` on the key (the request's
  ``x-amz-server-side-encryption-aws-kms-key-id``, else the bucket's default key), as the caller, via S3.

The standard library and botocore only (no moto).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, unquote
from xml.etree import ElementTree

from devtools.local_aws.iam_reference import Reference

SIGNING_NAMES = {"monitoring": "cloudwatch"}
"""SigV4 signing names that differ from botocore's service name (which is also the IAM prefix of these services)."""

S3_ACTIONS = {
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "HeadBucket": "ListBucket",
    "HeadObject": "GetObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "UploadPartCopy": "PutObject",
    "ListParts": "ListMultipartUploadParts",
    "ListMultipartUploads": "ListBucketMultipartUploads",
    "ListObjectVersions": "ListBucketVersions",
    "CopyObject": "PutObject",
    "DeleteObjects": "DeleteObject",
    "ListBuckets": "ListAllMyBuckets",
    "PutBucketEncryption": "PutEncryptionConfiguration",
    "GetBucketEncryption": "GetEncryptionConfiguration",
    "PutBucketVersioning": "PutBucketVersioning",
    "GetBucketVersioning": "GetBucketVersioning",
}
"""S3 operations authorized under another action (Amazon S3 User Guide, "Required permissions for Amazon S3 API
operations"); ``GetObject`` / ``DeleteObject`` with a ``VersionId`` are ``...Version`` (:func:`_s3_action`)."""

UNAUTHORIZED_OPERATIONS = {("sts", "GetCallerIdentity")}
"""Operations AWS answers for any valid credentials ("No permissions are required to perform this operation",
STS API Reference, GetCallerIdentity)."""

ALIASES = {
    "BucketName": ("Bucket",),
    "ObjectName": ("Key",),
    "ParameterNameWithoutLeadingSlash": ("Name",),
    "RoleNameWithPath": ("RoleName",),
    "TrainingPlanName": ("TrainingPlanName",),
    "RepositoryName": ("repositoryName",),
    "EventBusName": ("EventBusName",),
}
"""Reference ARN variables filled from a parameter of another name (matched case-insensitively otherwise)."""

_SSE_WRITES = {"PutObject", "CreateMultipartUpload", "CopyObject", "UploadPart", "UploadPartCopy"}
_SSE_READS = {"GetObject", "CompleteMultipartUpload"}
_SCOPE = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")


@dataclass(frozen=True)
class Call:
    """One AWS request: the caller's ``access_key``, the ``region`` and botocore ``service`` it was signed for, the
    ``operation`` and its ``params`` (top-level members; S3's from its path, query and headers)."""

    access_key: str
    region: str
    service: str
    operation: str
    params: Mapping[str, Any]
    protocol: str


@dataclass(frozen=True)
class Check:
    """``action`` on ``resource`` with ``context`` (lower-cased keys, lists of values) that ``call`` needs."""

    action: str
    resource: str
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)


@lru_cache(maxsize=64)
def service_model(service: str) -> Any:
    """botocore's model of ``service`` (shared loader, parsed once per process)."""

    return _session().get_service_model(service)


@lru_cache(maxsize=1)
def _session() -> Any:
    import botocore.session

    return botocore.session.get_session()


def credential(environ: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(access key id, region, signing name)`` of a SigV4-signed request (header or presigned URL); None: unsigned."""
    found = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if found is None:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        scope = (query.get("X-Amz-Credential") or [""])[0]
        found = _SCOPE.search("Credential=" + scope)
    return None if found is None else (found.group(1), found.group(2), found.group(3))


def identify(environ: Mapping[str, Any], body: bytes) -> Call | None:
    """The AWS call ``environ`` (a WSGI request whose body is ``body``) makes; None when it is not SigV4-signed.

    Raises:
        ValueError: signed, but no operation of the service's model matches it (the message says what was seen).
    """
    signed = credential(environ)
    if signed is None:
        return None
    access_key, region, signing = signed
    service = SIGNING_NAMES.get(signing, signing)
    model = service_model(service)
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        import json

        operation = target.rpartition(".")[2]
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = {}
        return Call(access_key, region, service, operation, params, "json")
    if model.protocol == "query":
        form = {
            k: v[0] for k, v in parse_qs(body.decode(errors="replace") + "&" + environ.get("QUERY_STRING", "")).items()
        }
        operation = form.pop("Action", "")
        if not operation:
            raise ValueError(f"{service}: a query-protocol request without Action")
        return Call(access_key, region, service, operation, form, "query")
    if service == "s3":
        return _s3_call(environ, body, access_key, region, model)
    raise ValueError(f"{service} ({model.protocol}): the emulator does not authorize this protocol")


def _s3_call(environ: Mapping[str, Any], body: bytes, access_key: str, region: str, model: Any) -> Call:
    method = environ.get("REQUEST_METHOD", "GET")
    path = unquote(environ.get("PATH_INFO", "/"))
    bucket, _, key = path.lstrip("/").partition("/")
    query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    best: tuple[int, str, dict[str, Any]] | None = None
    for name in _s3_operations(method, bool(bucket), bool(key)):
        operation = model.operation_model(name)
        literal = _literal_query(operation.http["requestUri"])
        if any(k not in query or (v is not None and query[k] != v) for k, v in literal.items()):
            continue  # a literal of the URI (?uploads, ?tagging, ?list-type=2) missing, or with another value
        params: dict[str, Any] = {}
        score = len(literal)
        ok = True
        members = operation.input_shape.members if operation.input_shape else {}
        required = set(operation.input_shape.required_members) if operation.input_shape else set()
        for member, shape in members.items():
            where, wire = shape.serialization.get("location"), shape.serialization.get("name", member)
            value = (
                query.get(wire) if where == "querystring" else headers.get(wire.lower()) if where == "header" else None
            )
            if value is not None:
                params[member] = value
            if where in ("querystring", "header") and member in required:
                ok = ok and value is not None
                score += 1
        if ok and (best is None or score > best[0]):
            best = (score, name, params)
    if best is None:
        raise ValueError(f"s3: no operation of botocore's model is {method} {path}?{environ.get('QUERY_STRING', '')}")
    _, name, params = best
    if bucket:
        params["Bucket"] = bucket
    if key:
        params["Key"] = key
    if name == "DeleteObjects":
        params["Delete"] = [
            el.text or "" for el in ElementTree.fromstring(body or b"<Delete/>").iter() if el.tag.endswith("Key")
        ]
    return Call(access_key, region, "s3", name, params, "rest-xml")


@lru_cache(maxsize=16)
def _s3_operations(method: str, bucket: bool, key: bool) -> tuple[str, ...]:
    model = service_model("s3")
    shape = "/{Bucket}/{Key+}" if key else "/{Bucket}" if bucket else "/"
    found = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        if http.get("method") == method and http.get("requestUri", "").split("?")[0] == shape:
            found.append(name)
    return tuple(found)


def _literal_query(uri: str) -> dict[str, str | None]:
    _, _, query = uri.partition("?")
    literal: dict[str, str | None] = {}
    for part in filter(None, query.split("&")):
        name, eq, value = part.partition("=")
        if name != "x-id":
            literal[name] = value if eq else None
    return literal


def _s3_action(call: Call) -> str:
    name = S3_ACTIONS.get(call.operation, call.operation)
    if (
        name in ("GetObject", "DeleteObject")
        and call.operation in ("GetObject", "DeleteObject")
        and call.params.get("VersionId")
    ):
        return name + "Version"
    return name


def _lookup(params: Mapping[str, Any], variable: str) -> str | None:
    names = (*ALIASES.get(variable, ()), variable)
    lowered = {k.lower(): v for k, v in params.items() if isinstance(v, str)}
    for name in names:
        value = lowered.get(name.lower())
        if value:
            return value.lstrip("/") if variable == "ParameterNameWithoutLeadingSlash" else value
    return None


def resources(call: Call, prefix: str, action: str, reference: Reference, account: str) -> list[str]:
    """The ARNs ``call`` is authorized on for ``prefix:action`` (module docstring): ``["*"]`` when none."""
    explicit = [v for k, v in call.params.items() if k.lower() == "resourcearn" and isinstance(v, str)]
    if explicit:
        return explicit
    if (prefix, action) == ("events", "PutEvents"):
        buses = {e.get("EventBusName") or "default" for e in call.params.get("Entries", []) if isinstance(e, Mapping)}
        return [
            b if b.startswith("arn:") else f"arn:aws:events:{call.region}:{account}:event-bus/{b}"
            for b in sorted(buses) or ["default"]
        ]
    if (prefix, action) == ("s3", "DeleteObject") and call.operation == "DeleteObjects":
        return [f"arn:aws:s3:::{call.params['Bucket']}/{k}" for k in call.params.get("Delete", [])] or ["*"]
    values = {"Partition": "aws", "Region": call.region, "Account": account}
    found: list[str] = []
    for kind in reference.resource_types(prefix, action):
        filled = dict(values)
        for variable in kind.variables:
            value = _lookup(call.params, variable)
            if value is not None:
                filled[variable] = value
        arn = kind.arn(filled)
        if arn is None:
            arn = next(
                (
                    v
                    for k, v in call.params.items()
                    if isinstance(v, str) and v.startswith(f"arn:aws:{prefix}:") and f":{kind.name}/" in v
                ),
                None,
            )
        if arn is not None:
            found.append(arn)
    return found or ["*"]


CONTEXT_PARAMS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "cloudwatch:namespace": lambda p: [p["Namespace"]] if isinstance(p.get("Namespace"), str) else [],
    "events:source": lambda p: sorted(
        {e["Source"] for e in p.get("Entries", []) if isinstance(e, Mapping) and "Source" in e}
    ),
    "events:detail-type": lambda p: sorted(
        {e["DetailType"] for e in p.get("Entries", []) if isinstance(e, Mapping) and "DetailType" in e}
    ),
    "s3:prefix": lambda p: [p["Prefix"]] if "Prefix" in p else [],
    "s3:delimiter": lambda p: [p["Delimiter"]] if "Delimiter" in p else [],
    "s3:x-amz-server-side-encryption": lambda p: [p["ServerSideEncryption"]] if "ServerSideEncryption" in p else [],
    "s3:x-amz-server-side-encryption-aws-kms-key-id": lambda p: [p["SSEKMSKeyId"]] if "SSEKMSKeyId" in p else [],
    "s3:x-amz-copy-source": lambda p: [p["CopySource"]] if "CopySource" in p else [],
    "sagemaker:instancetypes": lambda p: (
        [p["ResourceConfig"]["InstanceType"]]
        if isinstance(p.get("ResourceConfig"), Mapping) and "InstanceType" in p["ResourceConfig"]
        else []
    ),
    "sagemaker:maxruntimeinseconds": lambda p: (
        [str(p["StoppingCondition"]["MaxRuntimeInSeconds"])]
        if isinstance(p.get("StoppingCondition"), Mapping) and "MaxRuntimeInSeconds" in p["StoppingCondition"]
        else []
    ),
    "sagemaker:outputkmskey": lambda p: (
        [p["OutputDataConfig"]["KmsKeyId"]]
        if isinstance(p.get("OutputDataConfig"), Mapping) and "KmsKeyId" in p["OutputDataConfig"]
        else []
    ),
    "sagemaker:networkisolation": lambda p: (
        [str(bool(p["EnableNetworkIsolation"])).lower()] if "EnableNetworkIsolation" in p else []
    ),
}
"""Service condition keys the emulator fills from a request's parameters (the reference lists which apply)."""


def request_context(call: Call) -> dict[str, list[str]]:
    """The condition keys ``call``'s own parameters carry: :data:`CONTEXT_PARAMS`, ``aws:RequestTag/K`` and
    ``aws:TagKeys`` from ``Tags`` (a list of ``{Key, Value}``)."""
    context: dict[str, list[str]] = {}
    for key, read in CONTEXT_PARAMS.items():
        values = read(call.params)
        if values:
            context[key.lower()] = values
    tags = call.params.get("Tags")
    if isinstance(tags, list):
        pairs = [(t.get("Key"), t.get("Value")) for t in tags if isinstance(t, Mapping)]
        context["aws:tagkeys"] = [str(k) for k, _ in pairs]
        for k, v in pairs:
            context[f"aws:requesttag/{k}".lower()] = [str(v)]
    return context


def checks(
    call: Call,
    reference: Reference,
    *,
    account: str,
    bucket_key: Callable[[str], str | None],
    plan_capacity: Callable[[str], Sequence[str]],
) -> list[Check]:
    """Every authorization ``call`` needs, implied ones included (module docstring); ``[]`` for an operation that
    needs none (:data:`UNAUTHORIZED_OPERATIONS`).

    Args:
        account: the account of the resources.
        bucket_key: a bucket's default SSE-KMS key ARN (None: not SSE-KMS).
        plan_capacity: a training plan's reserved-capacity ARNs.

    Raises:
        KeyError: the action is not in the Service Authorization Reference.
    """
    if (call.service, call.operation) in UNAUTHORIZED_OPERATIONS:
        return []
    prefix = call.service
    action = _s3_action(call) if prefix == "s3" else call.operation
    context = request_context(call)
    found = [
        Check(f"{prefix}:{action}", arn, context)
        for arn in resources(call, prefix, reference.actions[prefix][action.lower()][0], reference, account)
    ]
    if prefix == "s3" and call.operation == "CopyObject" and isinstance(call.params.get("CopySource"), str):
        source = unquote(call.params["CopySource"]).lstrip("/").split("?versionId=")[0]
        found.append(Check("s3:GetObject", f"arn:aws:s3:::{source}", context))
    if prefix == "sagemaker" and call.operation == "CreateTrainingJob":
        found += _training_job_implied(call, context, account, plan_capacity)
    if prefix == "s3" and (call.operation in _SSE_WRITES or call.operation in _SSE_READS):
        found += _kms_implied(call, account, bucket_key)
    return found


def _training_job_implied(
    call: Call, context: Mapping[str, Sequence[str]], account: str, plan_capacity: Callable[[str], Sequence[str]]
) -> list[Check]:
    found = []
    plan = (call.params.get("ResourceConfig") or {}).get("TrainingPlanArn")
    if isinstance(plan, str):
        found.append(Check("sagemaker:CreateTrainingJob", plan, context))
        found += [Check("sagemaker:CreateTrainingJob", arn, context) for arn in plan_capacity(plan)]
    role = call.params.get("RoleArn")
    if isinstance(role, str):
        found.append(Check("iam:PassRole", role, {"iam:passedtoservice": ["sagemaker.amazonaws.com"]}))
    if call.params.get("Tags"):
        job = call.params.get("TrainingJobName", "")
        found.append(
            Check("sagemaker:AddTags", f"arn:aws:sagemaker:{call.region}:{account}:training-job/{job}", context)
        )
    return found


def _kms_implied(call: Call, account: str, bucket_key: Callable[[str], str | None]) -> list[Check]:
    bucket = call.params.get("Bucket", "")
    requested = call.params.get("SSEKMSKeyId")
    if call.params.get("ServerSideEncryption") not in (None, "aws:kms", "aws:kms:dsse") and not requested:
        return []
    key = requested or bucket_key(bucket)
    if not key:
        return []
    if not key.startswith("arn:"):
        key = f"arn:aws:kms:{call.region}:{account}:key/{key}"
    action = "kms:GenerateDataKey" if call.operation in _SSE_WRITES else "kms:Decrypt"
    context = {
        "kms:viaservice": [f"s3.{call.region}.amazonaws.com"],
        "kms:calleraccount": [account],
        "kms:encryptioncontext:aws:s3:arn": [f"arn:aws:s3:::{bucket}"],
    }
    found = [Check(action, key, context)]
    if call.operation == "CopyObject":
        source_bucket = unquote(str(call.params.get("CopySource", ""))).lstrip("/").split("/")[0]
        source_key = bucket_key(source_bucket)
        if source_key:
            found.append(Check("kms:Decrypt", source_key, context))
    return found
