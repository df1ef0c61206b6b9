"""The emulator authorizes every AWS request as AWS would: :class:`Authorizer` finds the caller, the operation and
every action and resource it needs (:mod:`devtools.local_aws.operations`), decides each with the caller's policies,
the resource's policy and the caller's permissions boundary (:mod:`devtools.local_aws.policy`, principals and policies
from the platform's template: :mod:`devtools.local_aws.principals`), and answers a refusal with the error that
service returns, in its protocol's shape, with AWS's message::

    User: arn:aws:sts::123456789012:assumed-role/ROLE/SESSION is not authorized to perform: sagemaker:CreateTrainingJob
    on resource: arn:aws:sagemaker:us-east-1:123456789012:training-plan/NAME because no identity-based policy allows
    the sagemaker:CreateTrainingJob action

The condition context of every request has ``aws:SecureTransport`` ``true`` and ``s3:TlsVersion`` ``1.3``: the
emulator listens on plain HTTP on 127.0.0.1 but stands in for AWS's HTTPS endpoints, which is what the platform's
TLS-only bucket and topic policies assume. An access key no principal has is refused as AWS refuses unknown keys
(``UnrecognizedClientException``, S3's ``InvalidAccessKeyId``, the query protocol's ``InvalidClientTokenId``).

Signatures and secret keys are not verified: the access key id of a request's SigV4 scope names its caller, so any
process that holds a principal's access key id acts as that principal. A request that is not SigV4-signed (no
``Authorization``, SigV2's ``AWS KEY:SIG`` header or ``?AWSAccessKeyId=`` URL), whose service or operation the
emulator cannot identify, or whose JSON body is not of the operation's input shape is refused with AWS's error for
it (:class:`devtools.local_aws.operations.Unidentified`); none reaches moto unauthorized. An S3 request to a
virtual-hosted-style ``Host`` (``BUCKET.s3.REGION.amazonaws.com``) is authorized on the bucket moto reads from that
host (moto's own rule, :func:`host_bucket`).

Every decision that allowed a call is recorded with the statements that allowed it (:attr:`Authorizer.grants`), which
is how the tests show that each statement of each role earns its place.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from xml.sax.saxutils import escape

from devtools.local_aws.iam_reference import Reference, load_reference
from devtools.local_aws.operations import Call, Check, Unidentified, checks, credential, identify, service_model
from devtools.local_aws.policy import Decision, Request, evaluate
from devtools.local_aws.principals import Authorities, Principal
from devtools.local_aws.stack import ACCOUNT_ID

SERVICES = (
    "s3",
    "sagemaker",
    "ssm",
    "logs",
    "cloudwatch",
    "events",
    "kms",
    "sts",
    "iam",
    "sns",
    "sqs",
    "dynamodb",
    "ecr",
    "cloudformation",
    "lambda",
    "ec2",
    "fsx",
)
"""The services whose actions are read from the reference (the platform's and the emulator's)."""

JSON_CODES = {"sqs": "AccessDenied", "cloudwatch": "AccessDenied"}
"""A JSON-protocol service's access-denied code where it is not ``AccessDeniedException``."""
QUERY_CODES = {"sns": "AuthorizationError"}
"""A query-protocol service's code where it is not ``AccessDenied``."""


@dataclass(frozen=True)
class Refusal:
    """A refused call: its HTTP ``status``, ``headers`` and ``body``, and the ``code`` and ``message`` in it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    code: str
    message: str


@dataclass(frozen=True)
class Grant:
    """One allowed check: ``principal`` (logical id), ``operation`` (``service:Operation``), the ``action`` and
    ``resource`` checked and the ``statements`` that allowed it (``POLICY#SID``)."""

    principal: str
    operation: str
    action: str
    resource: str
    statements: tuple[str, ...]


class Authorizer:
    """Authorize requests against ``authorities`` (module docstring).

    Args:
        authorities: principals and resource policies.
        plan_capacity: a training plan's reserved-capacity ARNs (the emulator's plans).
        region: the emulator's region (a request's own scope is used where it names one).
        reference: the Service Authorization Reference (default: loaded for :data:`SERVICES`).
    """

    def __init__(
        self,
        authorities: Authorities,
        *,
        plan_capacity: Callable[[str], Sequence[str]],
        reference: Reference | None = None,
    ) -> None:
        self.authorities = authorities
        self.plan_capacity = plan_capacity
        self.reference = reference or load_reference(SERVICES)
        self.lock = threading.Lock()
        self.grants: list[Grant] = []

    def principal(self, access_key: str) -> Principal | None:
        return self.authorities.principals.get(access_key)

    def decide(self, principal: Principal, check: Check, *, resource_policy: bool = True) -> Decision:
        """The decision on one check for ``principal`` (identity policies, the resource's policy, the boundary);
        ``resource_policy=False``: without the resource's policy, as IAM's policy simulator decides."""
        context = {
            "aws:securetransport": ["true"],
            "s3:tlsversion": ["1.3"],
            "aws:principalarn": [principal.arn],
            "aws:principalaccount": [ACCOUNT_ID],
            **check.context,
        }
        request = Request(principal.arn, ACCOUNT_ID, check.action, check.resource, context)
        found = self.authorities.resource_policy(check.resource) if resource_policy else None
        # A key the template does not define (one a test creates) has KMS's default key policy, which allows the
        # account's root kms:* (AWS KMS Developer Guide, "Default key policy"): its identity policies decide, as
        # they do for the actions on no key (kms:CreateKey, kms:ListKeys).
        return evaluate(
            request,
            principal.policies,
            resource_policy=found,
            boundary=principal.boundary,
            key_policy=check.action.startswith("kms:") and found is not None,
        )

    def authorize(self, environ: Mapping[str, Any], body: bytes) -> Refusal | None:
        """``None`` when the AWS request ``environ`` (WSGI, body ``body``) may proceed, else the :class:`Refusal` to
        answer with (the admin endpoints are no AWS requests: the caller does not pass them here)."""
        bucket = host_bucket(environ)
        if bucket is not None and _signing_name(environ) in (
            "s3",
            None,
        ):  # moto serves this bucket whatever the path says: authorize it, path-style
            environ = {**environ, "PATH_INFO": f"/{bucket}{environ.get('PATH_INFO') or '/'}"}
        try:
            call = identify(environ, body)
        except Unidentified as fault:
            return _shaped(fault.protocol, fault.service, fault.status, fault.code, fault.message, environ)
        principal = self.principal(call.access_key)
        if principal is None:
            return _unknown_key(call)
        try:
            found = checks(
                call,
                self.reference,
                account=ACCOUNT_ID,
                bucket_key=self.authorities.bucket_keys.get,
                plan_capacity=self.plan_capacity,
            )
        except KeyError:  # an operation of botocore's model whose action the reference the emulator loads lacks
            text = (
                f"User: {principal.session_arn} is not authorized to perform: {call.service}:{call.operation} because "
                f"the emulator's Service Authorization Reference ({', '.join(SERVICES)}) has no such action"
            )
            code = _denied_code(call.protocol, call.service)
            return _shaped(call.protocol, call.service, 403 if call.protocol != "json" else 400, code, text, environ)
        allowed: list[Grant] = []
        for check in found:
            decision = self.decide(principal, check)
            if not decision.allowed:
                return _refusal(call, principal, check, decision, head=environ.get("REQUEST_METHOD") == "HEAD")
            allowed.append(
                Grant(
                    principal.name,
                    f"{call.service}:{call.operation}",
                    check.action,
                    check.resource,
                    decision.allowed_by,
                )
            )
        with self.lock:
            self.grants.extend(allowed)
        return None

    def grants_of(self, principals: Iterable[str] | None = None) -> list[Grant]:
        wanted = None if principals is None else set(principals)
        with self.lock:
            return [g for g in self.grants if wanted is None or g.principal in wanted]


def message(principal: Principal, check: Check, decision: Decision, *, quoted: bool) -> str:
    """AWS's access-denied message (S3 quotes the resource)."""
    resource = f'"{check.resource}"' if quoted else check.resource
    return (
        f"User: {principal.session_arn} is not authorized to perform: {check.action} on resource: {resource} "
        f"{decision.reason(check.action)}"
    )


def host_bucket(environ: Mapping[str, Any]) -> str | None:
    """The bucket moto takes from a virtual-hosted-style ``Host`` (``BUCKET.s3.amazonaws.com``,
    ``BUCKET.s3.REGION.amazonaws.com``, ``BUCKET.localhost.localstack.cloud``...), by moto's own rule
    (``S3Response.subdomain_based_buckets`` and ``bucket_name_from_url``); None: path-style (``localhost``,
    ``127.0.0.1``) or not S3."""
    from moto.s3.responses import S3Response
    from moto.s3.utils import bucket_name_from_url

    host = environ.get("HTTP_HOST", "")
    if not host or environ.get("HTTP_X_AMZ_TARGET"):
        return None

    request = SimpleNamespace(headers={"host": host}, url=f"http://{host}{environ.get('PATH_INFO') or '/'}")
    if not S3Response.subdomain_based_buckets(request):
        return None
    return bucket_name_from_url(request.url)


def _signing_name(environ: Mapping[str, Any]) -> str | None:
    try:
        signed = credential(environ)
    except Unidentified:
        return None
    return None if signed is None else signed[2]


def _denied_code(protocol: str, service: str) -> str:
    if protocol == "rest-xml":
        return "AccessDenied"
    if protocol == "ec2":
        return "UnauthorizedOperation"
    if protocol == "query":
        return QUERY_CODES.get(service, "AccessDenied")
    return JSON_CODES.get(service, "AccessDeniedException")


def _refusal(call: Call, principal: Principal, check: Check, decision: Decision, *, head: bool) -> Refusal:
    text = message(principal, check, decision, quoted=call.service == "s3")
    code = _denied_code(call.protocol, call.service)
    if call.protocol == "rest-xml":
        return _xml_error(403, code, text, head=head)
    if call.protocol == "query":
        return _query_error(call.service, 403, code, text)
    if call.protocol == "ec2":
        return _ec2_error(403, code, text)
    return _json_error(call.service, 400 if call.protocol == "json" else 403, code, text)


def _shaped(protocol: str, service: str, status: int, code: str, text: str, environ: Mapping[str, Any]) -> Refusal:
    """``code`` and ``text`` in ``protocol``'s error shape."""
    if protocol == "rest-xml":
        return _xml_error(status, code, text, head=environ.get("REQUEST_METHOD") == "HEAD")
    if protocol == "query":
        return _query_error(service, status, code, text)
    if protocol == "ec2":
        return _ec2_error(status, code, text)
    return _json_error(service, status, code, text)


def _unknown_key(call: Call) -> Refusal:
    if call.protocol == "rest-xml":
        return _xml_error(
            403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", head=False
        )
    text = "The security token included in the request is invalid."
    if call.protocol == "query":
        return _query_error(call.service, 403, "InvalidClientTokenId", text)
    if call.protocol == "ec2":
        return _ec2_error(401, "AuthFailure", "AWS was not able to validate the provided access credentials")
    return _json_error(call.service, 400, "UnrecognizedClientException", text)


def _json_error(service: str, status: int, code: str, text: str) -> Refusal:
    body = json.dumps({"__type": code, "message": text, "Message": text}).encode()
    headers = [
        ("Content-Type", "application/x-amz-json-1.1"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
        ("x-amzn-ErrorType", code),
    ]
    if service and service_model(service).metadata.get("awsQueryCompatible") is not None:
        headers.append(("x-amzn-query-error", f"{code};Sender"))
    return Refusal(status, tuple(headers), body, code, text)


def _query_error(service: str, status: int, code: str, text: str) -> Refusal:
    namespace = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/", "iam": "https://iam.amazonaws.com/doc/2010-05-08/"}
    xmlns = f' xmlns="{namespace[service]}"' if service in namespace else ""
    request_id = str(uuid.uuid4())
    body = (
        f"<ErrorResponse{xmlns}><Error><Type>Sender</Type><Code>{code}</Code><Message>{escape(text)}</Message></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()
    return Refusal(status, (("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)), body, code, text)


def _ec2_error(status: int, code: str, text: str) -> Refusal:
    """EC2's error shape (Amazon EC2 API Reference, "Error codes": ``<Response><Errors><Error>``)."""
    request_id = str(uuid.uuid4())
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{escape(text)}</Message></Error></Errors>"
        f"<RequestID>{request_id}</RequestID></Response>"
    ).encode()
    return Refusal(status, (("Content-Type", "text/xml"),), body, code, text)


def _xml_error(status: int, code: str, text: str, *, head: bool) -> Refusal:
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        b""
        if head
        else (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(text)}</Message>'
            f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>"
        ).encode()
    )
    return Refusal(status, (("Content-Type", "application/xml"), ("x-amz-request-id", request_id)), body, code, text)
