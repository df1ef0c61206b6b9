"""What an HTTP request to the emulator asks AWS to authorize: its caller's access key, service and operation
(:func:`identify`, from the SigV4 credential and botocore's service model), then each action, resource ARN and
condition context it is authorized on (:func:`checks`), resources the request implies included.

* **Caller**: the access key id of the SigV4 ``Authorization`` header's ``Credential`` (or a presigned URL's
  ``X-Amz-Credential``), and the region and signing name of its scope.
* **Operation**: the JSON protocols' ``X-Amz-Target``; the query (and EC2) protocol's ``Action``; S3's REST method, path and
  query against each operation's ``requestUri`` in botocore's model (the most specific match, members located in the
  query string or headers that the model marks required included, so ``CopyObject`` is not ``PutObject``); REST-JSON
  (Lambda's ``Invoke``) the same way. A request that is not SigV4-signed or matches no operation is :class:`Unidentified`
  and refused with AWS's error for it, never passed on unauthorized.
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

import botocore.exceptions

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


class Unidentified(ValueError):
    """A request the emulator refuses before any policy is read: it is not SigV4-signed, or no operation of the
    service's model matches it. ``protocol`` (``rest-xml``, ``query``, ``json``, ``rest-json``) and ``service`` (``""``
    when unknown) shape the answer; ``status``, ``code`` and ``message`` are AWS's for the fault."""

    def __init__(self, protocol: str, service: str, status: int, code: str, message: str) -> None:
        super().__init__(f"{service or 'unknown service'}: {code}: {message}")
        self.protocol = protocol
        self.service = service
        self.status = status
        self.code = code
        self.message = message


def credential(environ: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(access key id, region, signing name)`` of a SigV4-signed request (header or presigned URL); None: unsigned.

    Raises:
        Unidentified: an authorization the emulator cannot read as SigV4 (module docstring of :func:`identify`).
    """
    header = environ.get("HTTP_AUTHORIZATION", "")
    query = parse_qs(environ.get("QUERY_STRING", ""))
    if header:
        scope = header
    elif "X-Amz-Credential" in query:
        scope = "Credential=" + query["X-Amz-Credential"][0]
    elif "AWSAccessKeyId" in query or "Signature" in query:
        raise _unsupported_signature(environ)
    else:
        return None
    if not scope.startswith(("AWS4-HMAC-SHA256 ", "Credential=")):
        raise _unsupported_signature(environ)
    found = _SCOPE.search(scope)
    if found is None:
        protocol = _protocol_of(environ)
        text = f"the credential scope is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request: {scope[:200]!r}"
        code = {
            "rest-xml": "AuthorizationHeaderMalformed",
            "query": "IncompleteSignature",
            "json": "IncompleteSignatureException",
        }[protocol]
        raise Unidentified(protocol, "", 400, code, f"The authorization is malformed; {text}")
    return found.group(1), found.group(2), found.group(3)


def _protocol_of(environ: Mapping[str, Any], body: bytes = b"") -> str:
    """The protocol of a request whose service is unknown: JSON with an ``X-Amz-Target``, query with an ``Action`` in
    its query string or form ``body``, else S3's REST-XML (what the emulator serves at paths no other service
    claims)."""
    if environ.get("HTTP_X_AMZ_TARGET"):
        return "json"
    form = body.decode(errors="replace") if "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", "") else ""
    if "Action" in parse_qs(environ.get("QUERY_STRING", "")) or "Action" in parse_qs(form):
        return "query"
    return "rest-xml"


def _unsupported_signature(environ: Mapping[str, Any]) -> Unidentified:
    protocol = _protocol_of(environ)
    if protocol == "rest-xml":
        text = "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
        return Unidentified(protocol, "", 400, "InvalidRequest", text)
    return _unsigned(protocol)


def _unsigned(protocol: str) -> Unidentified:
    if protocol == "rest-xml":
        return Unidentified(protocol, "", 403, "AccessDenied", "Access Denied")
    if protocol == "query":
        return Unidentified(protocol, "", 403, "MissingAuthenticationToken", "Request is missing Authentication Token")
    return Unidentified(protocol, "", 403, "MissingAuthenticationTokenException", "Missing Authentication Token")


def identify(environ: Mapping[str, Any], body: bytes) -> Call:
    """The AWS call ``environ`` (a WSGI request whose body is ``body``) makes.

    Signatures are read, not verified: the access key id of the scope names the caller.

    Raises:
        Unidentified: refused as AWS refuses it: not SigV4-signed (no ``Authorization``: S3's 403 ``AccessDenied``,
            ``MissingAuthenticationToken[Exception]`` elsewhere; SigV2's ``AWS KEY:SIG`` or ``?AWSAccessKeyId=``: S3's
            ``InvalidRequest``; a SigV4 scope that does not parse: ``AuthorizationHeaderMalformed`` /
            ``IncompleteSignature[Exception]``); a service botocore does not know; an operation its model does not
            have (``UnknownOperationException``, ``InvalidAction``, ``MissingAction``, S3's ``MethodNotAllowed``);
            a JSON body that is not an object of the operation's input shape (``SerializationException``).
    """
    signed = credential(environ)
    if signed is None:
        raise _unsigned(_protocol_of(environ, body))
    access_key, region, signing = signed
    service = SIGNING_NAMES.get(signing, signing)
    try:
        model = service_model(service)
    except botocore.exceptions.UnknownServiceError:
        protocol = _protocol_of(environ, body)
        text = f"Credential should be scoped to a valid service: '{signing}' is not an AWS service's signing name."
        code = {"rest-xml": "AuthorizationHeaderMalformed", "query": "SignatureDoesNotMatch"}.get(
            protocol, "InvalidSignatureException"
        )
        raise Unidentified(protocol, "", 400 if protocol != "query" else 403, code, text) from None
    protocols = model.metadata.get("protocols") or [model.protocol]  # CloudWatch: CBOR, JSON and query
    operations = model.operation_names
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, operation = target.rpartition(".")
        if "json" not in protocols or prefix != model.metadata.get("targetPrefix") or operation not in operations:
            raise Unidentified("json", service, 400, "UnknownOperationException", f"Unknown operation {target}")
        params = _json_params(service, model.operation_model(operation), body)
        return Call(access_key, region, service, operation, params, "json")
    if "query" in protocols or "ec2" in protocols:  # EC2's protocol encodes requests as the query protocol does
        form = {
            k: v[0] for k, v in parse_qs(body.decode(errors="replace") + "&" + environ.get("QUERY_STRING", "")).items()
        }
        operation = form.pop("Action", "")
        if not operation:
            raise Unidentified("query", service, 400, "MissingAction", "The request must contain the parameter Action")
        if operation not in operations:
            text = f"The action {operation} is not valid for this web service."
            raise Unidentified("query", service, 400, "InvalidAction", text)
        return Call(access_key, region, service, operation, form, "ec2" if "ec2" in protocols else "query")
    if service == "s3":
        return _s3_call(environ, body, access_key, region, model)
    if model.protocol == "rest-json":
        return _rest_json_call(environ, body, access_key, region, service, model)
    # a JSON-protocol service without X-Amz-Target, or a protocol the emulator does not read
    raise Unidentified(
        model.protocol, service, 400, "UnknownOperationException", f"{service} ({model.protocol}): no operation"
    )


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "structure": (dict,),
    "map": (dict,),
    "list": (list,),
    "string": (str,),
    "blob": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "long": (int,),
    "float": (int, float),
    "double": (int, float),
    "timestamp": (int, float, str),
}
"""The JSON value each botocore shape type is sent as (botocore's JSON serializer; blobs base64 text)."""


def _json_params(service: str, operation: Any, body: bytes) -> dict[str, Any]:
    import json

    def fault(text: str) -> Unidentified:
        return Unidentified("json", service, 400, "SerializationException", text)

    try:
        params = json.loads(body or b"{}")
    except ValueError as error:
        raise fault(f"The request body is not JSON: {error}") from None
    errors = _json_shape(params, operation.input_shape, "") if operation.input_shape is not None else []
    if not isinstance(params, dict) or errors:
        raise fault(errors[0] if errors else f"The request body must be a JSON object, not {type(params).__name__}")
    return params


def _json_shape(value: Any, shape: Any, path: str) -> list[str]:
    """Where ``value`` is not the JSON type of ``shape`` (botocore's): ``"FIELD: expected TYPE, got TYPE"``."""
    expected = _JSON_TYPES.get(shape.type_name)
    if expected is not None and (not isinstance(value, expected) or (bool not in expected and isinstance(value, bool))):
        where = path or "the request body"
        return [f"{where}: expected a {shape.type_name}, got {type(value).__name__} {json_repr(value)}"]
    if shape.type_name == "structure":
        found = []
        for name, item in value.items():
            if name in shape.members:
                found += _json_shape(item, shape.members[name], f"{path}.{name}" if path else name)
        return found
    if shape.type_name == "list":
        return [e for i, item in enumerate(value) for e in _json_shape(item, shape.member, f"{path}[{i}]")]
    if shape.type_name == "map":
        return [e for k, item in value.items() for e in _json_shape(item, shape.value, f"{path}.{k}")]
    return []


def json_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rest_json_call(
    environ: Mapping[str, Any], body: bytes, access_key: str, region: str, service: str, model: Any
) -> Call:
    """A REST-JSON call (Lambda's ``Invoke``): the operation whose ``requestUri`` matches most specifically."""
    method = environ.get("REQUEST_METHOD", "GET")
    path = environ.get("PATH_INFO", "/")
    query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}
    best: tuple[int, str, dict[str, Any]] | None = None
    for name in model.operation_names:
        operation = model.operation_model(name)
        if operation.http.get("method") != method:
            continue
        uri, _, _ = operation.http["requestUri"].partition("?")
        literal = _literal_query(operation.http["requestUri"])
        if any(k not in query or (v is not None and query[k] != v) for k, v in literal.items()):
            continue
        matched = _uri_pattern(uri).fullmatch(path)
        if matched is None:
            continue
        params = {k: unquote(v) for k, v in matched.groupdict().items()}
        score = len(re.sub(r"\{[^}]+\}", "", uri)) + len(literal)
        if best is None or score > best[0]:
            best = (score, name, params)
    if best is None:
        text = f"{service}: no operation of botocore's model is {method} {path}"
        raise Unidentified("rest-json", service, 404, "UnknownOperationException", text)
    _, name, params = best
    operation = model.operation_model(name)
    members = operation.input_shape.members if operation.input_shape else {}
    for member, shape in members.items():
        where, wire = shape.serialization.get("location"), shape.serialization.get("name", member)
        if where == "querystring" and wire in query:
            params[member] = query[wire]
    payload = operation.input_shape.serialization.get("payload") if operation.input_shape else None
    if payload is None and body:
        params = {**_json_params(service, operation, body), **params}
    return Call(access_key, region, service, name, params, "rest-json")


@lru_cache(maxsize=512)
def _uri_pattern(uri: str) -> re.Pattern[str]:
    """``/2015-03-31/functions/{FunctionName}/invocations`` as a regex with a group per label (``{Key+}``: greedy)."""
    parts = re.split(r"(\{[^}]+\})", uri)
    pattern = "".join(
        (f"(?P<{p[1:-2]}>.+)" if p.endswith("+}") else f"(?P<{p[1:-1]}>[^/]+)") if p.startswith("{") else re.escape(p)
        for p in parts
    )
    return re.compile(pattern)


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
        text = f"The specified method is not allowed against this resource: {method} {path}"
        raise Unidentified("rest-xml", "s3", 405, "MethodNotAllowed", text)
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
    "sagemaker:intercontainertrafficencryption": lambda p: (
        [str(bool(p["EnableInterContainerTrafficEncryption"])).lower()]
        if "EnableInterContainerTrafficEncryption" in p
        else []
    ),
    "sagemaker:vpcsubnets": lambda p: _strings(p, "VpcConfig", "Subnets"),
    "sagemaker:vpcsecuritygroupids": lambda p: _strings(p, "VpcConfig", "SecurityGroupIds"),
    "sagemaker:filesystemid": lambda p: _file_systems(p, "FileSystemId"),
    "sagemaker:filesystemaccessmode": lambda p: _file_systems(p, "FileSystemAccessMode"),
    "sagemaker:filesystemdirectorypath": lambda p: _file_systems(p, "DirectoryPath"),
    "sagemaker:filesystemtype": lambda p: _file_systems(p, "FileSystemType"),
}
"""Service condition keys the emulator fills from a request's parameters (the reference lists which apply:
``CreateTrainingJob``'s in the Service Authorization Reference, "Actions defined by Amazon SageMaker AI"). The
VPC and file-system keys are multivalued (one value per subnet, security group or ``FileSystemDataSource``
channel), for ``ForAllValues:`` / ``ForAnyValue:`` conditions."""


def _strings(params: Mapping[str, Any], member: str, field: str) -> list[str]:
    """The strings of the list ``params[member][field]`` (``[]`` when absent)."""
    found = params.get(member)
    values = found.get(field) if isinstance(found, Mapping) else None
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _file_systems(params: Mapping[str, Any], field: str) -> list[str]:
    """``field`` of every ``InputDataConfig[].DataSource.FileSystemDataSource``, in channel order, once each."""
    found: list[str] = []
    for channel in params.get("InputDataConfig") or []:
        source = channel.get("DataSource") if isinstance(channel, Mapping) else None
        system = source.get("FileSystemDataSource") if isinstance(source, Mapping) else None
        value = system.get(field) if isinstance(system, Mapping) else None
        if isinstance(value, str) and value not in found:
            found.append(value)
    return found


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
    if (
        prefix == "s3"
        and call.operation in ("CopyObject", "UploadPartCopy")
        and isinstance(call.params.get("CopySource"), str)
    ):
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
    if call.operation in ("CopyObject", "UploadPartCopy"):
        source_bucket = unquote(str(call.params.get("CopySource", ""))).lstrip("/").split("/")[0]
        source_key = bucket_key(source_bucket)
        if source_key:
            found.append(Check("kms:Decrypt", source_key, context))
    return found
