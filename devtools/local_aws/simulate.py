"""IAM's ``SimulatePrincipalPolicy`` answered by the emulator's authorization engine (moto answers it with an HTTP
500 page), so the SageMaker SDK's role validation and a person's ``aws iam simulate-principal-policy`` see the
decisions every other call gets.

The principal (``PolicySourceArn``) is a role of the platform's template (:mod:`devtools.local_aws.principals`); each
of ``ActionNames`` on each of ``ResourceArns`` (default ``*``) is decided with its identity policies, its permissions
boundary and, as AWS's simulator does when no ``ResourcePolicy`` is given, no resource policy, under the
``ContextEntries`` given (IAM API Reference, ``SimulatePrincipalPolicy``). The answer is the query protocol's XML with
``EvalDecision`` (``allowed``, ``explicitDeny``, ``implicitDeny``), ``MatchedStatements`` (``POLICY#SID``) and, for a
principal with a boundary, ``PermissionsBoundaryDecisionDetail``. The inputs the engine cannot simulate
(``PolicyInputList``, ``PermissionsBoundaryPolicyInputList``, ``ResourcePolicy``, ``CallerArn``) are refused with
``InvalidInput`` naming the field, never ignored.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from devtools.local_aws.authorize import Authorizer
from devtools.local_aws.operations import Check
from devtools.local_aws.policy import Decision

NAMESPACE = "https://iam.amazonaws.com/doc/2010-05-08/"
UNSUPPORTED = ("PolicyInputList", "PermissionsBoundaryPolicyInputList", "ResourcePolicy", "CallerArn")
"""SimulatePrincipalPolicy's inputs the emulator refuses (module docstring)."""
DECISIONS = {"allowed": "allowed", "explicit-deny": "explicitDeny", "implicit-deny": "implicitDeny"}
"""The engine's outcome -> the simulator's ``EvalDecision``."""


@dataclass(frozen=True)
class Answer:
    """The HTTP ``status`` and XML ``body`` of a SimulatePrincipalPolicy answer."""

    status: int
    body: bytes


def is_simulation(environ: Mapping[str, object], body: bytes) -> bool:
    """Whether the request is IAM's ``SimulatePrincipalPolicy`` (query protocol, signed for ``iam``)."""
    authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
    return "/iam/aws4_request" in authorization and b"Action=SimulatePrincipalPolicy" in body


def _members(form: Mapping[str, str], name: str) -> list[str]:
    found = sorted(
        ((int(m.group(1)), v) for k, v in form.items() if (m := re.fullmatch(rf"{name}\.member\.(\d+)", k))),
    )
    return [v for _, v in found]


def _context(form: Mapping[str, str]) -> dict[str, list[str]]:
    context: dict[str, list[str]] = {}
    for index in {m.group(1) for k in form if (m := re.match(r"ContextEntries\.member\.(\d+)\.", k))}:
        prefix = f"ContextEntries.member.{index}."
        key = form.get(prefix + "ContextKeyName", "")
        if not key:
            raise ValueError(f"{prefix}ContextKeyName: expected a condition key name")
        context[key.lower()] = _members(form, re.escape(prefix + "ContextKeyValues"))
    return context


def answer(authorizer: Authorizer, body: bytes) -> Answer:
    """The simulation of the request whose form body is ``body`` (module docstring)."""
    form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
    for name in UNSUPPORTED:
        if any(k == name or k.startswith(name + ".") for k in form):
            return _error(400, "InvalidInput", f"{name}: the emulator simulates the template's policies only; omit it")
    source = form.get("PolicySourceArn", "")
    principal = authorizer.authorities.by_arn(source)
    if principal is None:
        name = source.rsplit("/", 1)[-1] or source
        return _error(404, "NoSuchEntity", f"The role with name {name} cannot be found.")
    actions = _members(form, "ActionNames")
    if not actions:
        return _error(400, "ValidationError", "ActionNames: expected at least one action, e.g. s3:GetObject")
    try:
        context = _context(form)
    except ValueError as exc:
        return _error(400, "InvalidInput", str(exc))
    results = []
    for action in actions:
        for resource in _members(form, "ResourceArns") or ["*"]:
            decision = authorizer.decide(principal, Check(action, resource, context), resource_policy=False)
            results.append(_result(action, resource, decision, boundary=principal.boundary is not None))
    body_xml = (
        f'<SimulatePrincipalPolicyResponse xmlns="{NAMESPACE}"><SimulatePrincipalPolicyResult>'
        f"<IsTruncated>false</IsTruncated><EvaluationResults>{''.join(results)}</EvaluationResults>"
        f"</SimulatePrincipalPolicyResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        "</SimulatePrincipalPolicyResponse>"
    )
    return Answer(200, body_xml.encode())


def _result(action: str, resource: str, decision: Decision, *, boundary: bool) -> str:
    statements = decision.allowed_by if decision.allowed else decision.denied_by
    matched = "".join(
        f"<member><SourcePolicyId>{escape(name)}</SourcePolicyId><SourcePolicyType>IAM Policy</SourcePolicyType>"
        "</member>"
        for name in statements
    )
    detail = ""
    if boundary:
        allowed = decision.kind != "permissions boundary"
        detail = (
            "<PermissionsBoundaryDecisionDetail><AllowedByPermissionsBoundary>"
            f"{'true' if allowed else 'false'}</AllowedByPermissionsBoundary></PermissionsBoundaryDecisionDetail>"
        )
    return (
        f"<member><EvalActionName>{escape(action)}</EvalActionName><EvalResourceName>{escape(resource)}"
        f"</EvalResourceName><EvalDecision>{DECISIONS[decision.outcome]}</EvalDecision>"
        f"<MatchedStatements>{matched}</MatchedStatements><MissingContextValues/>{detail}</member>"
    )


def _error(status: int, code: str, message: str) -> Answer:
    return Answer(
        status,
        (
            f'<ErrorResponse xmlns="{NAMESPACE}"><Error><Type>Sender</Type><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        ).encode(),
    )
