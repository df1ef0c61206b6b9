"""The submission request: a typed, validated model of the function's event.

A request is a JSON object (the Lambda event)::

    {
      "job_name": "gpt-1b-mxfp8-baseline",          # optional
      "client_token": "3f6c1e0a-...",               # optional idempotency key
      "instance_type": "ml.p6-b200.48xlarge",       # default: configuration
      "instance_count": 1,
      "capacity": "training-plan",                  # | spot | on-demand | auto
      "training_plan_arn": "arn:aws:sagemaker:...", # optional, one of the configured plans
      "hyperparameters": {"model": "gpt-1b", "precision": "mxfp8", "num_layers": 10,
                          "batch_size": 8, "seq_length": 2048},
      "inputs": {"train": "s3://<data bucket>/datasets/guide/train/"},
      "max_runtime_hours": 24,
      "max_wait_hours": 48,                         # spot only
      "max_retry_attempts": 3,
      "tags": {"team": "research"},
      "auto_tune": false,
      "dry_run": false
    }

:func:`parse_request` checks every field and returns a frozen
:class:`SubmitRequest` with defaults filled in, or raises an
``InvalidRequest`` :class:`.errors.Refusal` naming the first bad field (dotted
path), the value received and what was expected. Hyperparameters are checked
by :mod:`training.hyperparameters`, the trainer's own definitions, so the
submitter never accepts what the trainer would reject. Dataclasses and
explicit checks rather than pydantic keep the function's cold start short.

:func:`request_json_schema` renders the same rules as a JSON Schema for docs
and clients.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from training import hyperparameters as hpmod

from .config import SubmitterConfig
from .errors import invalid
from .settings import CAPACITY_TYPES

CAPACITY_CHOICES: tuple[str, ...] = CAPACITY_TYPES + ("auto",)

JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
"""SageMaker's ``TrainingJobName`` rule: 1-63 letters, digits and hyphens, no leading/trailing hyphen."""

CLIENT_TOKEN_RE = re.compile(r"^[A-Za-z0-9._:/=+@-]{1,128}$")
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
S3_URI_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*)$")
TRAINING_PLAN_ARN_RE = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/[A-Za-z0-9-]{1,64}$")

MAX_RUNTIME_HOURS = 28 * 24.0
"""SageMaker's default ``MaxRuntimeInSeconds`` ceiling (28 days)."""
DEFAULT_MAX_RUNTIME_HOURS = 24.0
MAX_RETRY_ATTEMPTS = 30
DEFAULT_MAX_RETRY_ATTEMPTS = 3
MAX_INSTANCE_COUNT = 256
"""The largest ``InstanceCount`` a training plan offering reserves."""
MAX_CHANNELS = 20
RESERVED_TAG_PREFIXES: tuple[str, ...] = ("aws:", "platform:")
"""Tag keys requests may not set: AWS's own, and the submitter's bookkeeping tags."""


@dataclass(frozen=True)
class SubmitRequest:
    """A validated request with defaults applied.

    Attributes:
        hyperparameters: the trainer's hyperparameters (:class:`training.hyperparameters.Hyperparameters`).
        instance_type: SageMaker ML instance type, e.g. ``ml.p6-b200.48xlarge``.
        instance_count: instances (nodes) for the job, >= 1.
        capacity: ``training-plan`` | ``spot`` | ``on-demand`` | ``auto``.
        training_plan_arn: the plan to use, or ``None`` to choose among the configured ones.
        inputs: channel name -> ``s3://`` URI (resolved; relative keys are made absolute under the data bucket).
        max_runtime_hours: ``StoppingCondition.MaxRuntimeInSeconds`` / 3600.
        max_wait_hours: spot only: ``MaxWaitTimeInSeconds`` / 3600 (>= ``max_runtime_hours``).
        max_retry_attempts: ``RetryStrategy.MaximumRetryAttempts`` (1-30).
        tags: caller's tags (merged with the platform's).
        job_name: the caller's job name, or ``None`` to derive one.
        client_token: idempotency key, or ``None``.
        auto_tune: apply the planner's change when the configuration is predicted not to fit.
        dry_run: validate, choose capacity and estimate, but create nothing.
    """

    hyperparameters: hpmod.Hyperparameters
    instance_type: str
    instance_count: int = 1
    capacity: str = "training-plan"
    training_plan_arn: str | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    max_runtime_hours: float = DEFAULT_MAX_RUNTIME_HOURS
    max_wait_hours: float | None = None
    max_retry_attempts: int = DEFAULT_MAX_RETRY_ATTEMPTS
    tags: Mapping[str, str] = field(default_factory=dict)
    job_name: str | None = None
    client_token: str | None = None
    auto_tune: bool = False
    dry_run: bool = False

    @property
    def max_runtime_seconds(self) -> int:
        return max(1, round(self.max_runtime_hours * 3600))

    def spot_wait_seconds(self) -> int:
        """``MaxWaitTimeInSeconds`` for spot: the request's, else twice the runtime capped at 28 days."""
        hours = self.max_wait_hours
        if hours is None:
            hours = min(2 * self.max_runtime_hours, MAX_RUNTIME_HOURS)
        return max(self.max_runtime_seconds, round(hours * 3600))

    def normalized(self) -> dict[str, Any]:
        """The request as canonical JSON-able data: what decides the job, defaults applied.

        ``dry_run`` and ``client_token`` are left out: they do not change the job.
        """
        return {
            "job_name": self.job_name,
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "capacity": self.capacity,
            "training_plan_arn": self.training_plan_arn,
            "hyperparameters": self.hyperparameters.to_strings(),
            "inputs": dict(sorted(self.inputs.items())),
            "max_runtime_seconds": self.max_runtime_seconds,
            "max_wait_seconds": self.spot_wait_seconds() if self.capacity in ("spot", "auto") else None,
            "max_retry_attempts": self.max_retry_attempts,
            "tags": dict(sorted(self.tags.items())),
            "auto_tune": self.auto_tune,
        }

    def fingerprint(self) -> str:
        """SHA-256 (hex) of :meth:`normalized`: equal for requests that mean the same job."""
        blob = json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


# --- parsing -----------------------------------------------------------------------------------

_FIELD_HELP: dict[str, str] = {
    "job_name": "SageMaker training job name (1-63 letters, digits, hyphens); default derived from model, precision and time, or from client_token",
    "client_token": "idempotency key: the same token returns the first job (1-128 characters of A-Z a-z 0-9 . _ : / = + @ -)",
    "instance_type": "ML instance type; default from configuration",
    "instance_count": f"instances (nodes), 1-{MAX_INSTANCE_COUNT}",
    "capacity": "training-plan (default), spot, on-demand, or auto (plan, then spot, then on-demand as configured)",
    "training_plan_arn": "a configured training plan to use (capacity training-plan or auto)",
    "hyperparameters": "the trainer's hyperparameters (see training/hyperparameters.py)",
    "inputs": "channel name -> s3:// URI under the data bucket, or a key prefix relative to it",
    "max_runtime_hours": f"hours before SageMaker stops the job, > 0 and <= {MAX_RUNTIME_HOURS:g}",
    "max_wait_hours": "spot only: hours to wait for spot capacity plus run, >= max_runtime_hours",
    "max_retry_attempts": f"SageMaker RetryStrategy attempts, 1-{MAX_RETRY_ATTEMPTS}",
    "tags": "tags for the job, merged with the platform's (at most 50 in all)",
    "auto_tune": "apply the planner's change when the configuration is predicted not to fit",
    "dry_run": "validate, choose capacity and estimate, but create nothing",
}

REQUEST_FIELDS: tuple[str, ...] = tuple(_FIELD_HELP)


def parse_request(event: Any, config: SubmitterConfig) -> SubmitRequest:
    """Validate ``event`` and apply defaults.

    Instance types are checked against the configuration and the planner's
    catalogue later (:func:`check_instance`), because that needs the catalogue.

    Raises:
        Refusal: code ``InvalidRequest``, naming the first bad field.
    """
    if not isinstance(event, Mapping):
        raise invalid(None, type(event).__name__, "a JSON object with the request fields")
    for key in event:
        if not isinstance(key, str) or key not in _FIELD_HELP:
            raise invalid(str(key), event[key], "a known request field (one of: " + ", ".join(REQUEST_FIELDS) + ")")

    job_name = _optional_str(event, "job_name")
    if job_name is not None and not JOB_NAME_RE.match(job_name):
        raise invalid("job_name", job_name, "1-63 letters, digits and hyphens, starting and ending with a letter or digit")
    client_token = _optional_str(event, "client_token")
    if client_token is not None and not CLIENT_TOKEN_RE.match(client_token):
        raise invalid("client_token", client_token, "1-128 characters of A-Z a-z 0-9 . _ : / = + @ -")

    instance_type = _optional_str(event, "instance_type") or config.default_instance_type
    instance_count = _int(event, "instance_count", 1, minimum=1, maximum=MAX_INSTANCE_COUNT)

    capacity = _optional_str(event, "capacity") or "training-plan"
    if capacity not in CAPACITY_CHOICES:
        raise invalid("capacity", capacity, "one of " + ", ".join(CAPACITY_CHOICES))
    plan_arn = _optional_str(event, "training_plan_arn")
    if plan_arn is not None:
        if capacity not in ("training-plan", "auto"):
            raise invalid("training_plan_arn", plan_arn, f"no plan with capacity {capacity!r} (plans need training-plan or auto)")
        if not TRAINING_PLAN_ARN_RE.match(plan_arn):
            raise invalid("training_plan_arn", plan_arn, "a SageMaker training plan ARN (arn:aws:sagemaker:<region>:<account>:training-plan/<name>)")

    hp = _hyperparameters(event.get("hyperparameters"))
    inputs = _inputs(event.get("inputs"), config)
    if not hp.synthetic_data and "train" not in inputs:
        raise invalid("inputs.train", None, "an s3:// URI for the train channel (or hyperparameters.synthetic_data true)")

    max_runtime = _number(event, "max_runtime_hours", DEFAULT_MAX_RUNTIME_HOURS, maximum=MAX_RUNTIME_HOURS)
    max_wait = None
    if event.get("max_wait_hours") is not None:
        if capacity not in ("spot", "auto"):
            raise invalid("max_wait_hours", event["max_wait_hours"], f"no value with capacity {capacity!r} (spot or auto only)")
        max_wait = _number(event, "max_wait_hours", None, maximum=MAX_RUNTIME_HOURS)
        if max_wait < max_runtime:
            raise invalid("max_wait_hours", max_wait, f">= max_runtime_hours ({max_runtime:g})")
    retries = _int(event, "max_retry_attempts", DEFAULT_MAX_RETRY_ATTEMPTS, minimum=1, maximum=MAX_RETRY_ATTEMPTS)
    tags = _tags(event.get("tags"), config)

    return SubmitRequest(
        hyperparameters=hp,
        instance_type=instance_type,
        instance_count=instance_count,
        capacity=capacity,
        training_plan_arn=plan_arn,
        inputs=inputs,
        max_runtime_hours=max_runtime,
        max_wait_hours=max_wait,
        max_retry_attempts=retries,
        tags=tags,
        job_name=job_name,
        client_token=client_token,
        auto_tune=_bool(event, "auto_tune"),
        dry_run=_bool(event, "dry_run"),
    )


def check_instance(request: SubmitRequest, config: SubmitterConfig, catalogue: Any) -> Any:
    """Check the instance type against the configuration and the planner's catalogue.

    Args:
        catalogue: :mod:`planner.catalogue` (``get_instance``, ``supports_precision``).

    Returns:
        The catalogue's instance entry.

    Raises:
        Refusal: ``InvalidRequest`` on ``instance_type`` (not allowed / unknown) or
        ``hyperparameters.precision`` (the instance's GPU cannot run it).
    """
    allowed = config.allowed_instance_types or tuple(sorted(catalogue.INSTANCES))
    if request.instance_type not in allowed:
        raise invalid("instance_type", request.instance_type, "one of the allowed types: " + ", ".join(allowed))
    try:
        instance = catalogue.get_instance(request.instance_type)
    except KeyError:
        raise invalid(
            "instance_type", request.instance_type, "an instance type the planner knows: " + ", ".join(sorted(catalogue.INSTANCES))
        ) from None
    gpu_name = _gpu_name(instance)
    precision = request.hyperparameters.precision
    if gpu_name is not None and not catalogue.supports_precision(gpu_name, precision):
        supported = [p for p in hpmod.PRECISIONS if catalogue.supports_precision(gpu_name, p)]
        raise invalid(
            "hyperparameters.precision",
            precision,
            f"a precision {gpu_name} on {request.instance_type} supports: {', '.join(supported)}",
        )
    return instance


def _gpu_name(instance: Any) -> str | None:
    gpu = getattr(instance, "gpu", None)
    if isinstance(gpu, str):
        return gpu
    name = getattr(gpu, "name", None)
    return name if isinstance(name, str) else getattr(instance, "gpu_name", None)


def _optional_str(event: Mapping[str, Any], name: str) -> str | None:
    value = event.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(name, value, "a string")
    return value


def _int(event: Mapping[str, Any], name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = event.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise invalid(name, value, f"an integer from {minimum} to {maximum}")
    return value


def _number(event: Mapping[str, Any], name: str, default: float | None, *, maximum: float) -> float:
    value = event.get(name)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, value, f"a number of hours > 0 and <= {maximum:g}")
    try:
        number = float(value)
    except OverflowError:
        raise invalid(name, value, f"a number of hours > 0 and <= {maximum:g}") from None
    if not 0 < number <= maximum or round(number * 3600) < 1:
        raise invalid(name, value, f"a number of hours > 0 and <= {maximum:g}")
    return number


def _bool(event: Mapping[str, Any], name: str) -> bool:
    value = event.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(name, value, "true or false")
    return value


def _hyperparameters(raw: Any) -> hpmod.Hyperparameters:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise invalid("hyperparameters", raw, "a JSON object of the trainer's hyperparameters")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise invalid("hyperparameters", key, "string keys")
        name = hpmod.normalise_name(key)
        where = f"hyperparameters.{name}"
        if name in values:
            raise invalid(where, key, f"{name!r} given once (it appears under two spellings)")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            expected = hpmod.SPECS[name].expected() if name in hpmod.SPECS else "a known hyperparameter"
            raise invalid(where, value, expected)
        try:
            values[name] = hpmod.coerce(name, value)
        except hpmod.HyperparameterError as exc:
            raise invalid(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
        except (OverflowError, ValueError, TypeError):
            # e.g. an integer too large for a float field
            raise invalid(where, value, hpmod.SPECS[name].expected()) from None
    try:
        return hpmod.parse(values)
    except hpmod.HyperparameterError as exc:
        raise invalid(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None


def _inputs(raw: Any, config: SubmitterConfig) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("inputs", raw, "a JSON object: channel name -> s3:// URI")
    if len(raw) > MAX_CHANNELS:
        raise invalid("inputs", f"{len(raw)} channels", f"at most {MAX_CHANNELS} channels (SageMaker's limit)")
    prefixes = config.input_prefixes()
    resolved: dict[str, str] = {}
    for channel, uri in raw.items():
        if not isinstance(channel, str) or not CHANNEL_NAME_RE.match(channel):
            raise invalid("inputs", channel, "channel names of 1-64 characters A-Z a-z 0-9 . - _")
        where = f"inputs.{channel}"
        if not isinstance(uri, str) or not uri.strip():
            raise invalid(where, uri, "an s3:// URI or a key prefix under the data bucket")
        if not uri.startswith("s3://"):
            if "://" in uri:
                raise invalid(where, uri, "an s3:// URI or a key prefix under the data bucket")
            uri = f"s3://{config.data_bucket}/{uri.lstrip('/')}"
        match = S3_URI_RE.match(uri)
        if match is None or len(uri) > 1024 or any(ord(c) < 32 for c in uri):
            raise invalid(where, uri, "an s3://bucket/key URI of at most 1024 characters")
        if not any(uri.startswith(p) for p in prefixes):
            raise invalid(where, uri, "a URI under " + " or ".join(prefixes))
        resolved[channel] = uri
    return resolved


def _tags(raw: Any, config: SubmitterConfig) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("tags", raw, "a JSON object of string tag values")
    tags: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or not _tag_text(key):
            raise invalid("tags", key, "tag keys of 1-128 letters, digits, spaces and _ . : / = + - @")
        where = f"tags.{key}"
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise invalid(where, key, "a key not starting with " + " or ".join(RESERVED_TAG_PREFIXES) + " (reserved)")
        if key in config.platform_tags:
            raise invalid(where, value, f"no value: the platform sets tag {key!r}")
        if not isinstance(value, str) or len(value) > 256 or not _tag_text(value):
            raise invalid(where, value, "a string of at most 256 letters, digits, spaces and _ . : / = + - @")
        tags[key] = value
    return tags


def _tag_text(text: str) -> bool:
    """SageMaker's tag pattern ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``."""
    return all(unicodedata.category(c)[0] in "LZN" or c in "_.:/=+-@" for c in text)


def request_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the request, for the README and clients.

    Rules that need the deployment (allowed instance types, the data bucket,
    the configured plans) are described in the ``description`` fields.
    """
    help_ = _FIELD_HELP
    props: dict[str, Any] = {
        "job_name": {"type": "string", "pattern": JOB_NAME_RE.pattern, "description": help_["job_name"]},
        "client_token": {"type": "string", "pattern": CLIENT_TOKEN_RE.pattern, "description": help_["client_token"]},
        "instance_type": {"type": "string", "description": help_["instance_type"]},
        "instance_count": {"type": "integer", "minimum": 1, "maximum": MAX_INSTANCE_COUNT, "default": 1,
                           "description": help_["instance_count"]},
        "capacity": {"enum": list(CAPACITY_CHOICES), "default": "training-plan", "description": help_["capacity"]},
        "training_plan_arn": {"type": "string", "pattern": TRAINING_PLAN_ARN_RE.pattern,
                              "description": help_["training_plan_arn"]},
        "hyperparameters": hpmod.json_schema() | {"description": help_["hyperparameters"]},
        "inputs": {
            "type": "object",
            "maxProperties": MAX_CHANNELS,
            "propertyNames": {"pattern": CHANNEL_NAME_RE.pattern},
            "additionalProperties": {"type": "string", "maxLength": 1024},
            "description": help_["inputs"],
        },
        "max_runtime_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RUNTIME_HOURS,
                              "default": DEFAULT_MAX_RUNTIME_HOURS, "description": help_["max_runtime_hours"]},
        "max_wait_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RUNTIME_HOURS,
                           "description": help_["max_wait_hours"]},
        "max_retry_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_RETRY_ATTEMPTS,
                               "default": DEFAULT_MAX_RETRY_ATTEMPTS, "description": help_["max_retry_attempts"]},
        "tags": {
            "type": "object",
            "propertyNames": {"minLength": 1, "maxLength": 128, "not": {"pattern": "^([Aa][Ww][Ss]|[Pp][Ll][Aa][Tt][Ff][Oo][Rr][Mm]):"}},
            "additionalProperties": {"type": "string", "maxLength": 256},
            "description": help_["tags"],
        },
        "auto_tune": {"type": "boolean", "default": False, "description": help_["auto_tune"]},
        "dry_run": {"type": "boolean", "default": False, "description": help_["dry_run"]},
    }
    props["hyperparameters"].pop("$schema", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Training job submission request",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }

