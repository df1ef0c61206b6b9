"""IAM policy evaluation as AWS documents it, for the emulator's authorization (:mod:`devtools.local_aws.authorize`).

Sources: IAM User Guide, "Policy evaluation logic" (an explicit ``Deny`` in any applicable policy wins; a permissions
boundary limits what identity policies and same-account resource policies allow; otherwise an ``Allow`` in an identity
policy or in the resource's policy allows), "IAM JSON policy elements: Condition operators" (operators, ``...IfExists``,
``ForAnyValue:`` / ``ForAllValues:``, ``Null``, and what a missing key means: false, except for the negated operators,
which are true), "Wildcards" (``*`` any run of characters, ``?`` one; actions match case-insensitively, ARNs
case-sensitively) and the AWS KMS Developer Guide, "Key policies" (KMS requires the key policy to allow: identity
policies count only where the key policy allows the account, ``arn:aws:iam::ACCOUNT:root``, the action).

Pure: the standard library only. A :class:`Policy` is compiled once (each statement's actions, resources and conditions
to regular expressions and callables); :func:`evaluate` then costs a few regular-expression matches per statement.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

Context = Mapping[str, Sequence[str]]
"""A request's condition context: lower-cased key -> its values (one for a single-valued key)."""


@dataclass(frozen=True)
class Request:
    """What is authorized: ``principal`` (a role or user ARN, ``arn:aws:iam::ACCOUNT:role/NAME``) calling ``action``
    (``service:Operation``) on ``resource`` (an ARN, or ``*``) with ``context`` (:data:`Context`)."""

    principal: str
    account: str
    action: str
    resource: str
    context: Context = field(default_factory=dict)


@lru_cache(maxsize=4096)
def wildcard(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    """``pattern`` with IAM's wildcards (``*``: any run of characters, ``?``: one) as an anchored regular expression."""
    text = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(rf"\A(?:{text})\Z", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _any_of(patterns: Iterable[str], *, ignore_case: bool) -> re.Pattern[str]:
    body = "|".join(wildcard(p, ignore_case=ignore_case).pattern[5:-3] for p in patterns)
    return re.compile(rf"\A(?:{body})\Z", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _listed(value: Any, where: str) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, (str, int, float, bool)):
        return [value]
    raise ValueError(f"{where}: expected a string or a list of strings, got {value!r}")


def _arn_like(pattern: str, value: str) -> bool:
    """``ArnLike``: each of the six colon-separated parts matched with wildcards (the last may hold colons)."""
    wanted, got = pattern.split(":", 5), value.split(":", 5)
    if len(wanted) != 6 or len(got) != 6:
        return wildcard(pattern).match(value) is not None
    return all(wildcard(w).match(g) is not None for w, g in zip(wanted, got, strict=True))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _numeric(test: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def match(policy: str, value: str) -> bool:
        p, v = _number(policy), _number(value)
        return p is not None and v is not None and test(v, p)

    return match


_POSITIVE: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda p, v: p == v,
    "StringEqualsIgnoreCase": lambda p, v: p.lower() == v.lower(),
    "StringLike": lambda p, v: wildcard(p).match(v) is not None,
    "NumericEquals": _numeric(lambda v, p: v == p),
    "NumericLessThan": _numeric(lambda v, p: v < p),
    "NumericLessThanEquals": _numeric(lambda v, p: v <= p),
    "NumericGreaterThan": _numeric(lambda v, p: v > p),
    "NumericGreaterThanEquals": _numeric(lambda v, p: v >= p),
    "Bool": lambda p, v: p.lower() == v.lower(),
    "ArnEquals": _arn_like,
    "ArnLike": _arn_like,
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "NumericNotEquals": "NumericEquals",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}
OPERATORS = (*_POSITIVE, *_NEGATED, "Null")
"""The condition operators evaluated (each also with ``IfExists`` and the ``ForAnyValue:`` / ``ForAllValues:``
qualifiers); a policy using another is refused when compiled."""


def _policy_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _condition(operator: str, key: str, values: Sequence[str]) -> Callable[[Context], bool]:
    """One condition block entry (``operator: {key: values}``) as a test of a request's context."""
    qualifier, _, base = operator.rpartition(":")
    if qualifier not in ("", "ForAnyValue", "ForAllValues"):
        raise ValueError(f"condition operator {operator!r}: expected ForAnyValue: or ForAllValues: as its qualifier")
    if_exists = base.endswith("IfExists") and base != "Null"
    base = base.removesuffix("IfExists") if if_exists else base
    key = key.lower()
    if base == "Null":
        absent = [v.lower() == "true" for v in values]
        return lambda context: any((not context.get(key)) == a for a in absent)
    negated = base in _NEGATED
    test = _POSITIVE.get(_NEGATED.get(base, base))
    if test is None:
        raise ValueError(f"condition operator {operator!r}: expected one of {', '.join(OPERATORS)}")

    def one(value: str) -> bool:
        hit = any(test(p, value) for p in values)
        return not hit if negated else hit

    def check(context: Context) -> bool:
        present = context.get(key)
        if not present:
            if qualifier == "ForAllValues":
                return True
            return if_exists or (negated and qualifier == "")
        if qualifier == "ForAllValues":
            return all(one(v) for v in present)
        return any(one(v) for v in present)

    return check


@dataclass(frozen=True)
class Statement:
    """A compiled statement; :attr:`name` is ``POLICY#SID`` (or ``POLICY#INDEX`` without a ``Sid``)."""

    name: str
    effect: Literal["Allow", "Deny"]
    actions: re.Pattern[str]
    not_action: bool
    resources: re.Pattern[str]
    not_resource: bool
    principals: Callable[[str, str], Literal["direct", "account", ""]] | None
    conditions: tuple[Callable[[Context], bool], ...]
    document: Mapping[str, Any]

    def applies(self, request: Request) -> bool:
        """Whether the statement's action, resource and conditions match ``request`` (not its principal)."""
        if (self.actions.match(request.action) is None) != self.not_action:
            return False
        if (self.resources.match(request.resource) is None) != self.not_resource:
            return False
        return all(check(request.context) for check in self.conditions)


def _principal_matcher(
    principal: Any, negate: bool, where: str
) -> Callable[[str, str], Literal["direct", "account", ""]]:
    """``Principal`` / ``NotPrincipal`` as ``(principal ARN, its account) -> "direct" | "account" | ""``: the ARN
    named (or ``*``), the principal's account root (a delegation: the identity's own policies must allow too), or no
    match."""
    if principal == "*":
        principal = {"AWS": "*"}
    if not isinstance(principal, dict):
        raise ValueError(f'{where}: expected "*" or an object such as {{"AWS": ARN}}, got {principal!r}')
    names = [str(v) for v in _listed(principal.get("AWS", []), f"{where}.AWS")]

    def match(arn: str, account: str) -> Literal["direct", "account", ""]:
        found: Literal["direct", "account", ""] = ""
        for name in names:
            if name == "*" or name == arn:
                found = "direct"
                break
            if name in (account, f"arn:aws:iam::{account}:root"):
                found = "account"
        if negate:
            return "" if found else "direct"
        return found

    return match


def _compile_statement(raw: Mapping[str, Any], name: str, *, resource_policy: bool) -> Statement:
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise ValueError(f"{name}.Effect: expected Allow or Deny, got {effect!r}")
    if ("Action" in raw) == ("NotAction" in raw):
        raise ValueError(f"{name}: expected exactly one of Action and NotAction")
    action_key = "Action" if "Action" in raw else "NotAction"
    resource_key = "NotResource" if "NotResource" in raw else "Resource"
    resources = _listed(raw.get(resource_key, "*"), f"{name}.{resource_key}")
    principals = None
    if resource_policy:
        key = "NotPrincipal" if "NotPrincipal" in raw else "Principal"
        if key not in raw:
            raise ValueError(f"{name}: a resource policy's statement needs Principal or NotPrincipal")
        principals = _principal_matcher(raw[key], key == "NotPrincipal", f"{name}.{key}")
    conditions = []
    for operator, block in (raw.get("Condition") or {}).items():
        if not isinstance(block, Mapping):
            raise ValueError(f"{name}.Condition.{operator}: expected an object of condition key -> values")
        for key, values in block.items():
            texts = [_policy_text(v) for v in _listed(values, f"{name}.Condition.{operator}.{key}")]
            conditions.append(_condition(operator, key, texts))
    return Statement(
        name=name,
        effect=effect,
        actions=_any_of((str(a) for a in _listed(raw[action_key], f"{name}.{action_key}")), ignore_case=True),
        not_action=action_key == "NotAction",
        resources=_any_of((str(r) for r in resources), ignore_case=False),
        not_resource=resource_key == "NotResource",
        principals=principals,
        conditions=tuple(conditions),
        document=raw,
    )


@dataclass(frozen=True)
class Policy:
    """A compiled policy document: :attr:`name` labels it in decisions (e.g. the template's logical id)."""

    name: str
    statements: tuple[Statement, ...]

    @classmethod
    def compile(cls, name: str, document: Mapping[str, Any], *, resource_policy: bool = False) -> Policy:
        """Compile ``document`` (``{"Version", "Statement": [...]}``; a resource policy's statements name a principal).

        Raises:
            ValueError: a statement is malformed or uses a condition operator not in :data:`OPERATORS`
                (the message names the statement).
        """
        raw = document.get("Statement", [])
        raw = [raw] if isinstance(raw, Mapping) else raw
        statements = tuple(
            _compile_statement(s, f"{name}#{s.get('Sid') or i}", resource_policy=resource_policy)
            for i, s in enumerate(raw)
        )
        return cls(name, statements)

    def matching(self, request: Request, effect: str) -> list[Statement]:
        return [s for s in self.statements if s.effect == effect and s.applies(request)]


Outcome = Literal["allowed", "explicit-deny", "implicit-deny"]
PolicyKind = Literal["identity-based policy", "resource-based policy", "permissions boundary"]


@dataclass(frozen=True)
class Decision:
    """:func:`evaluate`'s answer: ``outcome``, the kind of policy that denied (``kind``) and the statements that
    allowed (``allowed_by``, names ``POLICY#SID``) or denied (``denied_by``)."""

    outcome: Outcome
    kind: PolicyKind | None = None
    allowed_by: tuple[str, ...] = ()
    denied_by: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.outcome == "allowed"

    def reason(self, action: str) -> str:
        """AWS's ending of an ``AccessDenied`` message, e.g. "because no identity-based policy allows the X action"."""
        if self.outcome == "explicit-deny":
            article = "an" if self.kind == "identity-based policy" else "a"
            return f"with an explicit deny in {article} {self.kind}"
        return f"because no {self.kind} allows the {action} action"


def evaluate(
    request: Request,
    identity: Sequence[Policy],
    *,
    resource_policy: Policy | None = None,
    boundary: Policy | None = None,
    key_policy: bool = False,
) -> Decision:
    """Decide ``request`` for a principal with ``identity`` policies, under ``resource_policy`` (the resource's own:
    bucket, key, topic or queue policy) and ``boundary`` (the principal's permissions boundary), same account.

    ``key_policy``: ``resource_policy`` is a KMS key policy, which must allow (directly, or by allowing the account's
    root, which delegates to identity policies).
    """
    denied = [s.name for p in identity for s in p.matching(request, "Deny")]
    if denied:
        return Decision("explicit-deny", "identity-based policy", denied_by=tuple(denied))
    resource_allows: list[str] = []
    delegated = False
    if resource_policy is not None:
        for s in resource_policy.statements:
            if s.principals is None or not s.applies(request):
                continue
            who = s.principals(request.principal, request.account)
            if not who:
                continue
            if s.effect == "Deny":
                return Decision("explicit-deny", "resource-based policy", denied_by=(s.name,))
            if who == "direct":
                resource_allows.append(s.name)
            else:
                delegated = True
    if boundary is not None:
        boundary_denies = boundary.matching(request, "Deny")
        if boundary_denies:
            return Decision("explicit-deny", "permissions boundary", denied_by=tuple(s.name for s in boundary_denies))
    identity_allows = [s.name for p in identity for s in p.matching(request, "Allow")]
    if key_policy and not resource_allows and not delegated:
        return Decision("implicit-deny", "resource-based policy")
    counted = identity_allows if (delegated or not key_policy) else []
    allows = resource_allows + counted
    if not allows:
        return Decision("implicit-deny", "identity-based policy")
    if boundary is not None and not boundary.matching(request, "Allow"):
        return Decision("implicit-deny", "permissions boundary")
    return Decision("allowed", allowed_by=tuple(allows))
