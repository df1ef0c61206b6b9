"""SageMaker ``Search`` of training jobs for the ``trainctl local-aws`` emulator.

moto (5.2)'s ``Search`` ignores ``MaxResults``, ``NextToken``, ``SortBy`` and
``SortOrder``, compares every operator but ``Contains`` and ``NotEquals`` as
equality (``GreaterThan`` on ``CreationTime`` matches nothing), and stops
evaluating a job's filters after its first ``Tags.<key>`` filter matches (so
a second tag filter, or a status filter after a tag filter, is never applied).
The submitter's job API (``runtime/actions.py``) lists jobs with ``Search``,
so :func:`search` replaces it for ``Resource="TrainingJob"`` (other resources
stay moto's), following the API reference
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_Search.html,
``API_Filter.html``, ``API_SearchExpression.html``):

* ``Filters`` (all must hold) and ``SubExpressions`` (joined by the
  expression's ``Operator``, ``And`` by default), recursively; ``NestedFilters``
  are not emulated (a ``ValidationException`` says so);
* a filter's ``Name``: ``Tags.<key>``, ``Metrics.<name>`` (the job's
  ``FinalMetricDataList``), ``HyperParameters.<name>``, or a property path of
  the ``TrainingJob`` record (``TrainingJobStatus``, ``CreationTime``,
  ``ResourceConfig.InstanceType``); an unknown top-level property is a
  ``ValidationException``;
* every ``Operator``: ``Equals`` (the default), ``NotEquals``, ``GreaterThan``,
  ``GreaterThanOrEqualTo``, ``LessThan``, ``LessThanOrEqualTo`` (numbers and
  timestamps only: "Not supported for text properties"), ``In`` and
  ``Contains`` (text only), ``Exists`` and ``NotExists``. A timestamp
  ``Value`` is ISO 8601 (``YYYY-mm-dd'T'HH:MM:SS``, UTC when it names no
  offset); a property a job lacks satisfies only ``NotExists``;
* ``SortBy`` (default ``LastModifiedTime``) and ``SortOrder`` (default
  ``Descending``), ties broken by ARN; ``MaxResults`` (default 10, 1-100 by the
  model); ``NextToken``: opaque, bound to the query (another query's or an
  edited one is a ``ValidationException``), and a cursor after the last result
  returned rather than an offset, so jobs created between pages shift nothing.

Unlike SageMaker's, this ``Search`` is strongly consistent: a job is found
as soon as it is created. Requests and answers are checked against botocore's
service model. Jobs are seen only from their own account and region. It needs moto (the extra ``local``),
imported by the emulator's process only.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from devtools.local_aws.sagemaker import EXTENSION, checked_params, checked_result
from devtools.local_aws.shapes import operation_model

DEFAULT_MAX_RESULTS = 10
"""``MaxResults`` of a request that sends none."""
_ORDERED = ("GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo")
_TEXT_ONLY = ("In", "Contains")
_MISSING = object()
_moto_search: Callable[[SageMakerResponse], Any] | None = None


def _training_job_members() -> frozenset[str]:
    shape = operation_model("sagemaker", "Search").output_shape.members["Results"].member.members["TrainingJob"]
    return frozenset(shape.members)


def search(self: SageMakerResponse) -> Any:
    """``Search``: training jobs as described in the module docstring; other resources: moto's."""
    if self._get_param("Resource") != "TrainingJob":
        assert _moto_search is not None
        return _moto_search(self)
    params = checked_params(self, "Search")
    backend = self.sagemaker_backend
    members = _training_job_members()
    expression = params.get("SearchExpression") or {}
    sort_by = params.get("SortBy") or "LastModifiedTime"
    descending = (params.get("SortOrder") or "Descending") == "Descending"
    size = params.get("MaxResults") or DEFAULT_MAX_RESULTS
    query = hashlib.sha256(
        json.dumps([expression, sort_by, descending], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    _check_names(expression, members)
    if sort_by.split(".", 1)[0] not in members | {"Tags", "Metrics"}:
        raise ValidationError(message=f"Unknown property name for SortBy: {sort_by}")
    jobs = _training_jobs(backend.account_id, backend.region_name, members)
    matched = [job for job in jobs if _matches(job, expression)]
    matched.sort(key=lambda job: _sort_key(job, sort_by), reverse=descending)
    start = _resume_at(matched, params.get("NextToken"), query, sort_by, descending)
    page = matched[start : start + size]
    result: dict[str, Any] = {"Results": [{"TrainingJob": job} for job in page]}
    if start + size < len(matched):
        result["NextToken"] = _encode_token(query, _cursor(page[-1], sort_by))
    return checked_result("Search", result)


def _training_jobs(account: str, region: str, members: frozenset[str]) -> list[dict[str, Any]]:
    """The jobs of ``account`` and ``region`` as ``Search`` returns a ``TrainingJob`` (``members``), with their tags."""
    with EXTENSION.lock:
        moto_jobs = sagemaker_backends[account][region].training_jobs
        jobs = []
        for (job_account, job_region, name), record in EXTENSION.jobs.items():
            if (job_account, job_region) != (account, region):
                continue
            job = {k: v for k, v in EXTENSION.describe_job(record).items() if k in members}
            job["Tags"] = copy.deepcopy(list(getattr(moto_jobs.get(name), "tags", None) or []))
            jobs.append(job)
    return jobs


def _check_names(expression: Mapping[str, Any], members: frozenset[str]) -> None:
    if expression.get("NestedFilters"):
        raise ValidationError(message="SearchExpression.NestedFilters: not emulated by trainctl local-aws")
    for f in expression.get("Filters") or []:
        head = f["Name"].split(".", 1)[0]
        if head not in members | {"Metrics"}:
            raise ValidationError(message=f"Unknown property name: {f['Name']}")
        operator = f.get("Operator", "Equals")
        if operator not in ("Exists", "NotExists") and "Value" not in f:
            raise ValidationError(message=f"Filter {f['Name']}: operator {operator} needs a Value")
    for sub in expression.get("SubExpressions") or []:
        _check_names(sub, members)


def _matches(job: Mapping[str, Any], expression: Mapping[str, Any]) -> bool:
    results = [_holds(job, f) for f in expression.get("Filters") or []]
    results += [_matches(job, sub) for sub in expression.get("SubExpressions") or []]
    if not results:
        return True
    return any(results) if expression.get("Operator") == "Or" else all(results)


def _property(job: Mapping[str, Any], name: str) -> Any:
    head, _, rest = name.partition(".")
    if head == "Tags" and rest:
        return next((t["Value"] for t in job.get("Tags") or [] if t["Key"] == rest), _MISSING)
    if head == "Metrics" and rest:
        return next((m["Value"] for m in job.get("FinalMetricDataList") or [] if m["MetricName"] == rest), _MISSING)
    if head == "HyperParameters" and rest:
        return (job.get("HyperParameters") or {}).get(rest, _MISSING)
    value: Any = job
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _holds(job: Mapping[str, Any], f: Mapping[str, Any]) -> bool:
    operator = f.get("Operator", "Equals")
    actual = _property(job, f["Name"])
    if operator in ("Exists", "NotExists"):
        return (actual is not _MISSING) == (operator == "Exists")
    if actual is _MISSING:
        return False
    raw = str(f["Value"])
    if isinstance(actual, datetime):
        expected: Any = _timestamp(raw, f["Name"])
    elif isinstance(actual, (int, float)) and not isinstance(actual, bool):
        expected = _number(raw, f["Name"])
    elif isinstance(actual, str) and _is_number(actual) and _is_number(raw) and operator in _ORDERED:
        actual, expected = float(actual), float(raw)  # a hyperparameter compared as a number
    else:
        if operator in _ORDERED:
            raise ValidationError(message=f"Filter {f['Name']}: {operator} is not supported for text properties")
        actual, expected = str(actual), raw
    if operator in _TEXT_ONLY and not isinstance(actual, str):
        raise ValidationError(message=f"Filter {f['Name']}: {operator} is supported for text properties only")
    compare: dict[str, Callable[[Any, Any], bool]] = {
        "Equals": lambda a, b: a == b,
        "NotEquals": lambda a, b: a != b,
        "GreaterThan": lambda a, b: a > b,
        "GreaterThanOrEqualTo": lambda a, b: a >= b,
        "LessThan": lambda a, b: a < b,
        "LessThanOrEqualTo": lambda a, b: a <= b,
        "In": lambda a, b: a in [v.strip() for v in b.split(",")],
        "Contains": lambda a, b: b in a,
    }
    return compare[operator](actual, expected)


def _timestamp(raw: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(message=f"Filter {name}: {raw!r} is not an ISO 8601 date-time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(raw: str, name: str) -> float:
    if not _is_number(raw):
        raise ValidationError(message=f"Filter {name}: {raw!r} is not a number")
    return float(raw)


def _sort_key(job: Mapping[str, Any], sort_by: str) -> tuple[Any, ...]:
    value = _property(job, sort_by)
    if value is _MISSING:
        return (0, "", job["TrainingJobArn"])
    if isinstance(value, datetime):
        return (1, value.timestamp(), job["TrainingJobArn"])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, float(value), job["TrainingJobArn"])
    return (1, str(value), job["TrainingJobArn"])


def _cursor(job: Mapping[str, Any], sort_by: str) -> list[Any]:
    return list(_sort_key(job, sort_by))


def _after(key: list[Any], cursor: list[Any], descending: bool) -> bool:
    try:
        return key < cursor if descending else key > cursor
    except TypeError:  # a property holding numbers on some jobs and text on others
        return str(key) < str(cursor) if descending else str(key) > str(cursor)


def _resume_at(matched: list[dict[str, Any]], token: str | None, query: str, sort_by: str, descending: bool) -> int:
    """Where the page of ``token`` starts in ``matched`` (sorted): the first job after its cursor (0: no token)."""
    if not token:
        return 0
    after = _decode_token(token, query)
    return next((i for i, job in enumerate(matched) if _after(_cursor(job, sort_by), after, descending)), len(matched))


def _encode_token(query: str, cursor: list[Any]) -> str:
    body = json.dumps({"q": query, "after": cursor}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(body).decode()


def _decode_token(token: str, query: str) -> list[Any]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode()))
        if body["q"] != query or not isinstance(body["after"], list) or len(body["after"]) != 3:
            raise ValueError("another query's token")
        return list(body["after"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ValidationError(message="Invalid NextToken: it was not returned by this query") from None


def install() -> None:
    """Make :func:`search` moto's ``SageMakerResponse.search`` (idempotent; emulator process only)."""
    global _moto_search
    if _moto_search is None:
        _moto_search = SageMakerResponse.search
    SageMakerResponse.search = search  # type: ignore[method-assign]
