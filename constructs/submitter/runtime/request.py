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

Rules come from their homes: SageMaker's limits (job name, channel names,
S3 URIs, tags, counts, retry attempts, instance types) from botocore's model
of ``CreateTrainingJob`` (:mod:`.sagemaker_rules`, matched whole-string and by
exact length); the trainer's hyperparameters from
:mod:`platform_spec.hyperparameters`, so the submitter never accepts what the
trainer or SageMaker would reject; the platform's own rules (the client token,
the data bucket, reserved tag prefixes, the runtime ceiling) here.

:func:`parse_request` checks every field and returns a frozen
:class:`SubmitRequest` with defaults filled in, or raises an
``InvalidRequest`` :class:`.errors.Refusal` naming the first bad field (dotted
path), the value received and what was expected. Dataclasses and explicit
checks rather than pydantic keep the function's cold start short.

**Fingerprint** (:meth:`SubmitRequest.fingerprint`, tag
``platform:request-sha256-v2``): SHA-256 of what the caller *sent*, so that
adding an optional field with a default to this model never changes the
fingerprint of a stored job. Fields absent or ``null`` are left out (defaults
are never filled in); values are canonicalised so that equal values compare
equal (hyperparameter names through :func:`platform_spec.hyperparameters.normalise_name`
and values through the trainer's own :func:`~platform_spec.hyperparameters.format_value`,
numbers by value, input keys resolved to ``s3://`` URIs, maps sorted).
``dry_run``, ``client_token`` and ``job_name`` are not part of what the job is.
A field sent with its default value counts as sent; a field (or hyperparameter)
sent as ``null`` is absent.

**Derived job names** (:func:`derived_job_name`): a request with a
``client_token`` and no ``job_name`` runs as ``job-`` + the first 24 hex digits
of SHA-256(token). That name space is reserved: a ``job_name`` of that form (in
any letter case) is refused unless it is exactly the name derived from the
request's own ``client_token``, so no request can take the name another token
will derive.

**Previous fingerprint** (:meth:`SubmitRequest.legacy_fingerprint_v1`, tag
``platform:request-sha256`` of jobs created before version 2): a frozen copy of
that version's algorithm over that version's hyperparameter names and defaults
(:data:`V1_HYPERPARAMETER_DEFAULTS`), so that retries of those jobs keep
matching whatever the trainer's definitions become.

:func:`request_json_schema` renders the same rules as a JSON Schema for docs
and clients.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.training_plans import TRAINING_PLAN_ARN_FORMAT, TRAINING_PLAN_ARN_PATTERN

from . import sagemaker_rules as model
from .config import SubmitterConfig
from .errors import invalid
from .settings import CAPACITY_TYPES

CAPACITY_CHOICES: tuple[str, ...] = CAPACITY_TYPES + ("auto",)

CLIENT_TOKEN_RE = re.compile(r"[A-Za-z0-9._:/=+@-]{1,128}\Z")
"""The platform's client-token rule: 1-128 of ``A-Z a-z 0-9 . _ : / = + @ -`` (no spaces, no
control characters). ``\\Z`` anchors it, so ``match`` and ``fullmatch`` agree."""
S3_URI_RE = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*)\Z", re.DOTALL)

MAX_RUNTIME_HOURS = 28 * 24.0
"""``StoppingCondition.MaxRuntimeInSeconds`` ceiling: "The maximum value is 28 days"
(SageMaker API Reference, StoppingCondition). The model has no ``max`` for it."""
DEFAULT_MAX_RUNTIME_HOURS = 24.0
DEFAULT_MAX_RETRY_ATTEMPTS = 3
MAX_INSTANCE_COUNT = 256
"""The largest ``InstanceCount`` a training plan offering reserves. The model has no ``max``,
and its ``min`` is 0 (instance groups); a job here needs at least one instance."""
RESERVED_TAG_PREFIXES: tuple[str, ...] = ("aws:", "platform:")
"""Tag key prefixes requests may not use, in any letter case: AWS's own ("Don't use ``aws:``,
``AWS:``, or any upper or lowercase combination of such as a prefix", AWS Batch User Guide, Tag
restrictions, https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html) and the
submitter's bookkeeping tags (``platform:``, held to the same rule)."""
DERIVED_JOB_NAME_RE = re.compile(r"job-[0-9a-f]{24}\Z", re.IGNORECASE)
"""The form of the job names derived from a ``client_token`` (:func:`derived_job_name`), matched in
any letter case: reserved for them."""
FINGERPRINT_FIELDS: tuple[str, ...] = (
    "instance_type", "instance_count", "capacity", "training_plan_arn", "hyperparameters", "inputs",
    "max_runtime_hours", "max_wait_hours", "max_retry_attempts", "tags", "auto_tune",
)  # fmt: skip
"""Request fields that are part of what the job is (the fingerprint's domain)."""


def __getattr__(name: str) -> Any:
    # JOB_NAME_RE is derived from botocore's model on first use, not at import (cold start)
    if name == "JOB_NAME_RE":
        return model.string_rule("TrainingJobName").regex()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def token_digest(token: str) -> str:
    """SHA-256 (hex) of a ``client_token``: its job's ``platform:client-token-sha256`` tag, its record's key."""
    return hashlib.sha256(token.encode()).hexdigest()


def derived_job_name(client_token: str) -> str:
    """The job name of a request with ``client_token`` and no ``job_name``: ``job-`` + 24 hex of
    SHA-256(token), a function of the token alone (see the module docstring)."""
    return f"job-{token_digest(client_token)[:24]}"


def job_name_expected() -> str:
    """What a job name must be, with the model's limits."""
    rule = model.string_rule("TrainingJobName")
    return (
        f"{rule.min_length}-{rule.max_length} letters, digits and hyphens, starting and ending with a letter "
        f"or digit (SageMaker's {rule.name})"
    )


@dataclass(frozen=True)
class SubmitRequest:
    """A validated request with defaults applied.

    Attributes:
        hyperparameters: the trainer's hyperparameters (:class:`platform_spec.hyperparameters.Hyperparameters`).
        instance_type: SageMaker ML instance type, e.g. ``ml.p6-b200.48xlarge``.
        instance_count: instances (nodes) for the job, >= 1.
        capacity: ``training-plan`` | ``spot`` | ``on-demand`` | ``auto``.
        training_plan_arn: the plan to use, or ``None`` to choose among the configured ones.
        inputs: channel name -> ``s3://`` URI (resolved; relative keys are made absolute under the data bucket).
        max_runtime_hours: ``StoppingCondition.MaxRuntimeInSeconds`` / 3600.
        max_wait_hours: spot only: ``MaxWaitTimeInSeconds`` / 3600 (>= ``max_runtime_hours``).
        max_retry_attempts: ``RetryStrategy.MaximumRetryAttempts``.
        tags: caller's tags (merged with the platform's).
        job_name: the caller's job name, or ``None`` to derive one.
        client_token: idempotency key, or ``None``.
        auto_tune: apply the planner's change when the configuration is predicted not to fit.
        dry_run: validate, choose capacity and estimate, but create nothing.
        sent: the fields of :data:`FINGERPRINT_FIELDS` the caller sent (not ``null``),
            canonicalised; what :meth:`fingerprint` hashes.
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
    sent: Mapping[str, Any] = field(default_factory=dict)

    @property
    def max_runtime_seconds(self) -> int:
        return max(1, round(self.max_runtime_hours * 3600))

    def spot_wait_seconds(self) -> int:
        """``MaxWaitTimeInSeconds`` for spot: the request's, else twice the runtime capped at 28 days."""
        hours = self.max_wait_hours
        if hours is None:
            hours = min(2 * self.max_runtime_hours, MAX_RUNTIME_HOURS)
        return max(self.max_runtime_seconds, round(hours * 3600))

    def fingerprint(self) -> str:
        """SHA-256 (hex) of :attr:`sent`: equal for requests that send the same job (module docstring).

        The value of the ``platform:request-sha256-v2`` tag. Pinned by a golden
        test: changing what it hashes needs a new tag version.
        """
        blob = json.dumps({"request": dict(self.sent)}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def legacy_fingerprint_v1(self, job_name: str | None) -> str | None:
        """The previous version's fingerprint (tag ``platform:request-sha256``) of this request under ``job_name``.

        Kept to recognise retries of jobs created before version 2. That
        version hashed every field with its defaults filled in, the job name
        (the caller's, or ``None`` for a derived one) and all of the trainer's
        hyperparameters as strings. This is a frozen copy: it is computed from
        what the caller sent (:attr:`sent`) over that version's defaults
        (:data:`_V1_DEFAULTS`, :data:`V1_HYPERPARAMETER_DEFAULTS`), never from
        today's, so a default or a hyperparameter added since changes nothing.
        Golden values computed by that version's code pin it (tests).

        Returns:
            64 hex digits, or ``None`` when the request sends a hyperparameter
            that version did not know (it would have refused the request, so
            no job of it can match).
        """
        sent = self.sent
        hyperparameters = dict(sent.get("hyperparameters") or {})
        if any(name not in V1_HYPERPARAMETER_DEFAULTS for name in hyperparameters):
            return None
        strings = {k: v for k, v in V1_HYPERPARAMETER_DEFAULTS.items() if v is not None}
        strings.update(hyperparameters)
        capacity = sent.get("capacity", _V1_DEFAULTS["capacity"])
        runtime_hours = sent.get("max_runtime_hours", _V1_DEFAULTS["max_runtime_hours"])
        runtime_s = max(1, round(runtime_hours * 3600))
        wait_s = None
        if capacity in ("spot", "auto"):
            wait_hours = sent.get("max_wait_hours")
            if wait_hours is None:
                wait_hours = min(2 * runtime_hours, _V1_DEFAULTS["max_runtime_hours_ceiling"])
            wait_s = max(runtime_s, round(wait_hours * 3600))
        normalized = {
            "job_name": job_name,
            "instance_type": self.instance_type,  # the request's, else the deployment's default, as then
            "instance_count": sent.get("instance_count", _V1_DEFAULTS["instance_count"]),
            "capacity": capacity,
            "training_plan_arn": sent.get("training_plan_arn"),
            "hyperparameters": strings,
            "inputs": dict(sent.get("inputs") or {}),
            "max_runtime_seconds": runtime_s,
            "max_wait_seconds": wait_s,
            "max_retry_attempts": sent.get("max_retry_attempts", _V1_DEFAULTS["max_retry_attempts"]),
            "tags": dict(sent.get("tags") or {}),
            "auto_tune": sent.get("auto_tune", False),
        }
        blob = json.dumps(normalized, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


V1_HYPERPARAMETER_DEFAULTS: Mapping[str, str | None] = MappingProxyType({
    "model": "gpt-1b", "num_layers": None, "vocab_size": None, "precision": "mxfp8", "fp8_scaling": "current",
    "quantized_model_init": "false", "batch_size": "8", "seq_length": "2048", "gradient_accumulation_steps": "1",
    "activation_checkpointing": "off", "sharding_strategy": "full", "reshard_after_forward": "true",
    "max_steps": "1000", "learning_rate": "0.0003", "min_learning_rate": "3e-05", "warmup_steps": "100",
    "weight_decay": "0.1", "adam_beta1": "0.9", "adam_beta2": "0.95", "adam_epsilon": "1e-08",
    "max_grad_norm": "1.0", "seed": "1234", "synthetic_data": "false", "checkpoint_interval": "500",
    "keep_checkpoints": "3", "log_interval": "10",
})  # fmt: skip
"""The trainer's hyperparameters when fingerprint version 1 was written, with their defaults as
SageMaker strings (``None``: left out), frozen: the names and defaults of ``Hyperparameters`` at
the last commit of that version (``git show fb12a67:training/hyperparameters.py``). Not the
trainer's definitions (:mod:`platform_spec.hyperparameters` is their home): a record of the past, which
must not follow them."""

_V1_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "capacity": "training-plan", "instance_count": 1, "max_runtime_hours": 24.0, "max_runtime_hours_ceiling": 28 * 24.0,
    "max_retry_attempts": 3,
})  # fmt: skip
"""Request defaults of fingerprint version 1, frozen for :meth:`SubmitRequest.legacy_fingerprint_v1`
(today's live in the constants above and may change)."""


# --- parsing -----------------------------------------------------------------------------------

_FIELD_HELP: dict[str, str] = {
    "job_name": "SageMaker training job name (SageMaker's TrainingJobName: letters, digits, hyphens); default "
    "derived from client_token (job-<24 hex digits>, a form reserved for those names), or from model, precision and time",
    "client_token": "idempotency key: the same token returns the first job (1-128 characters of A-Z a-z 0-9 . _ : / = + @ -)",
    "instance_type": "ML instance type (CreateTrainingJob's TrainingInstanceType, allowed by configuration); "
    "default from configuration",
    "instance_count": f"instances (nodes), 1-{MAX_INSTANCE_COUNT}",
    "capacity": "training-plan (default), spot, on-demand, or auto (plan, then spot, then on-demand as configured)",
    "training_plan_arn": "a configured training plan to use (capacity training-plan or auto)",
    "hyperparameters": "the trainer's hyperparameters (see platform_spec/hyperparameters.py); null is absent (the default)",
    "inputs": "channel name -> s3:// URI under the data bucket, or a key prefix relative to it",
    "max_runtime_hours": f"hours before SageMaker stops the job, > 0 and <= {MAX_RUNTIME_HOURS:g}",
    "max_wait_hours": "spot only: hours to wait for spot capacity plus run, >= max_runtime_hours",
    "max_retry_attempts": "SageMaker RetryStrategy.MaximumRetryAttempts (its range in botocore's model)",
    "tags": "tags for the job, merged with the platform's (SageMaker's Tags limit counts both)",
    "auto_tune": "apply the planner's change when the configuration is predicted not to fit",
    "dry_run": "validate, choose capacity and estimate, but create nothing",
}

REQUEST_FIELDS: tuple[str, ...] = tuple(_FIELD_HELP)


def parse_request(event: Any, config: SubmitterConfig) -> SubmitRequest:
    """Validate ``event`` and apply defaults.

    Instance types are checked against the configuration, ``CreateTrainingJob``'s
    enum and the planner's catalogue later (:func:`check_instance`), because
    that needs the catalogue.

    Raises:
        Refusal: code ``InvalidRequest``, naming the first bad field.
    """
    if not isinstance(event, Mapping):
        raise invalid(None, type(event).__name__, "a JSON object with the request fields")
    for key in event:
        if not isinstance(key, str) or key not in _FIELD_HELP:
            raise invalid(str(key), event[key], "a known request field (one of: " + ", ".join(REQUEST_FIELDS) + ")")
    sent: dict[str, Any] = {}

    job_name = _optional_str(event, "job_name")
    if job_name is not None and not model.string_rule("TrainingJobName").accepts(job_name):
        raise invalid("job_name", job_name, job_name_expected())
    client_token = _optional_str(event, "client_token")
    if client_token is not None and not CLIENT_TOKEN_RE.fullmatch(client_token):
        raise invalid("client_token", client_token, "1-128 characters of A-Z a-z 0-9 . _ : / = + @ -")
    if job_name is not None and DERIVED_JOB_NAME_RE.fullmatch(job_name):
        own = derived_job_name(client_token) if client_token is not None else None
        if job_name != own:
            raise invalid(
                "job_name", job_name,
                "a name not of the form job-<24 hex digits>, which is reserved for the names derived from a "
                + (f"client_token (this request's client_token derives {own!r}; leave job_name out to use it)"
                   if own else "client_token (this request has none)"),
            )  # fmt: skip

    instance_type = _optional_str(event, "instance_type")
    if instance_type:
        sent["instance_type"] = instance_type
    instance_type = instance_type or config.default_instance_type
    instance_count = _int(event, "instance_count", 1, minimum=1, maximum=MAX_INSTANCE_COUNT)
    if event.get("instance_count") is not None:
        sent["instance_count"] = instance_count

    capacity = _optional_str(event, "capacity")
    if capacity:
        sent["capacity"] = capacity
    capacity = capacity or "training-plan"
    if capacity not in CAPACITY_CHOICES:
        raise invalid("capacity", capacity, "one of " + ", ".join(CAPACITY_CHOICES))
    plan_arn = _optional_str(event, "training_plan_arn")
    if plan_arn is not None:
        if capacity not in ("training-plan", "auto"):
            raise invalid("training_plan_arn", plan_arn, f"no plan with capacity {capacity!r} (plans need training-plan or auto)")
        arn_rule = model.string_rule("ResourceConfig.TrainingPlanArn")
        if not TRAINING_PLAN_ARN_PATTERN.fullmatch(plan_arn) or not arn_rule.accepts(plan_arn):
            raise invalid(
                "training_plan_arn", plan_arn, f"a SageMaker training plan ARN {TRAINING_PLAN_ARN_FORMAT}"
            )
        sent["training_plan_arn"] = plan_arn

    hp, hp_sent = _hyperparameters(event.get("hyperparameters"))
    if hp_sent:
        sent["hyperparameters"] = hp_sent
    inputs = _inputs(event.get("inputs"), config)
    if not hp.synthetic_data and "train" not in inputs:
        raise invalid("inputs.train", None, "an s3:// URI for the train channel (or hyperparameters.synthetic_data true)")
    if inputs:
        sent["inputs"] = dict(sorted(inputs.items()))

    max_runtime = _number(event, "max_runtime_hours", DEFAULT_MAX_RUNTIME_HOURS, maximum=MAX_RUNTIME_HOURS)
    if event.get("max_runtime_hours") is not None:
        sent["max_runtime_hours"] = max_runtime
    max_wait = None
    if event.get("max_wait_hours") is not None:
        if capacity not in ("spot", "auto"):
            raise invalid("max_wait_hours", event["max_wait_hours"], f"no value with capacity {capacity!r} (spot or auto only)")
        max_wait = _number(event, "max_wait_hours", None, maximum=MAX_RUNTIME_HOURS)
        if max_wait < max_runtime:
            raise invalid("max_wait_hours", max_wait, f">= max_runtime_hours ({max_runtime:g})")
        sent["max_wait_hours"] = max_wait
    lo, hi = model.bounds("RetryStrategy.MaximumRetryAttempts")
    retries = _int(event, "max_retry_attempts", DEFAULT_MAX_RETRY_ATTEMPTS, minimum=lo or 1, maximum=hi or 1)
    if event.get("max_retry_attempts") is not None:
        sent["max_retry_attempts"] = retries
    tags = _tags(event.get("tags"), config)
    if tags:
        sent["tags"] = dict(sorted(tags.items()))
    auto_tune = _bool(event, "auto_tune")
    if event.get("auto_tune") is not None:
        sent["auto_tune"] = auto_tune

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
        auto_tune=auto_tune,
        dry_run=_bool(event, "dry_run"),
        sent=sent,
    )


def allowed_instance_types(config: SubmitterConfig, catalogue: Any) -> tuple[str, ...]:
    """Instance types requests may use: the configured ones (default: the planner catalogue's)
    that ``CreateTrainingJob`` accepts (:func:`.sagemaker_rules.training_instance_types`) and
    whose host CPUs the trainer image runs on (:func:`platform_spec.catalogue.host_architecture_problem`)."""
    accepted = set(model.training_instance_types())
    configured = config.allowed_instance_types or tuple(sorted(catalogue.INSTANCES))
    return tuple(t for t in configured if t in accepted and catalogue.host_architecture_problem(t) is None)


def check_instance(request: SubmitRequest, config: SubmitterConfig, catalogue: Any) -> Any:
    """Check the instance type against ``CreateTrainingJob``, the configuration and the planner's catalogue.

    Args:
        catalogue: :mod:`platform_spec.catalogue` (``get_instance``, ``supports_precision``).

    Returns:
        The catalogue's instance entry.

    Raises:
        Refusal: ``InvalidRequest`` on ``instance_type`` (not accepted by
        ``CreateTrainingJob`` / host CPUs the trainer image is not built for /
        not allowed / unknown to the planner) or
        ``hyperparameters.precision`` (the instance's GPU cannot run it).
    """
    if request.instance_type not in model.training_instance_types():
        raise invalid(
            "instance_type", request.instance_type, "an instance type CreateTrainingJob accepts (SageMaker's TrainingInstanceType)"
        )
    architecture = catalogue.host_architecture_problem(request.instance_type)
    if architecture is not None:
        raise invalid(
            "instance_type", request.instance_type,
            f"an instance type the trainer image runs on ({architecture}): one of "
            + ", ".join(allowed_instance_types(config, catalogue)),
        )
    allowed = allowed_instance_types(config, catalogue)
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
        supported = catalogue.supported_precisions(gpu_name)
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


def _hyperparameters(raw: Any) -> tuple[hpmod.Hyperparameters, dict[str, str]]:
    """The parsed hyperparameters and the canonical form of those sent (name -> ``format_value``)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise invalid("hyperparameters", raw, "a JSON object of the trainer's hyperparameters")
    values: dict[str, Any] = {}
    nulls: set[str] = set()
    for key, value in raw.items():
        if not isinstance(key, str):
            raise invalid("hyperparameters", key, "string keys")
        name = hpmod.normalise_name(key)
        where = f"hyperparameters.{name}"
        if name in values or name in nulls:
            raise invalid(where, key, f"{name!r} given once (it appears under two spellings)")
        if value is None:
            # null is absent, as for the request's own fields (a known name all the same)
            if name not in hpmod.SPECS:
                raise invalid(where, key, "a known hyperparameter: " + ", ".join(sorted(hpmod.SPECS)))
            nulls.add(name)
            continue
        if not isinstance(value, (str, int, float, bool)):
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
        parsed = hpmod.parse(values)
    except hpmod.HyperparameterError as exc:
        raise invalid(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
    canonical = {name: hpmod.format_value(value) for name, value in sorted(values.items()) if value is not None}
    return parsed, canonical


def _inputs(raw: Any, config: SubmitterConfig) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("inputs", raw, "a JSON object: channel name -> s3:// URI")
    most = model.bounds("InputDataConfig")[1]
    if most is not None and len(raw) > most:
        raise invalid("inputs", f"{len(raw)} channels", f"at most {most} channels (SageMaker's InputDataConfig limit)")
    channel_rule = model.string_rule("InputDataConfig.member.ChannelName")
    uri_rule = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    prefixes = config.input_prefixes()
    resolved: dict[str, str] = {}
    for channel, uri in raw.items():
        if not isinstance(channel, str) or not channel_rule.accepts(channel):
            raise invalid("inputs", channel, f"channel names of {channel_rule.expected()}")
        where = f"inputs.{channel}"
        if not isinstance(uri, str) or not uri.strip():
            raise invalid(where, uri, "an s3:// URI or a key prefix under the data bucket")
        if not uri.startswith("s3://"):
            if "://" in uri:
                raise invalid(where, uri, "an s3:// URI or a key prefix under the data bucket")
            uri = f"s3://{config.data_bucket}/{uri.lstrip('/')}"
        if S3_URI_RE.fullmatch(uri) is None or any(ord(c) < 32 or ord(c) == 127 for c in uri) or not uri_rule.accepts(uri):
            raise invalid(where, uri, f"an s3://bucket/key URI without control characters, {uri_rule.length_text()}")
        if not any(uri.startswith(p) for p in prefixes):
            raise invalid(where, uri, "a URI under " + " or ".join(prefixes))
        resolved[channel] = uri
    return resolved


_TAG_TEXT = "letters, digits, spaces and _ . : / = + - @"


def _tags(raw: Any, config: SubmitterConfig) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("tags", raw, "a JSON object of string tag values")
    key_rule, value_rule = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    tags: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key_rule.accepts(key):
            raise invalid("tags", key, f"tag keys of {key_rule.length_text()}: {_TAG_TEXT} (SageMaker's {key_rule.name})")
        where = f"tags.{key}"
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise invalid(where, key, "a key not starting with " + " or ".join(RESERVED_TAG_PREFIXES) + " (reserved)")
        taken = next((k for k in config.platform_tags if k.lower() == key.lower()), None)
        if taken is not None:
            # tag keys are case-sensitive: "project" next to the platform's "Project" would split reports by it
            raise invalid(where, value, f"no value: the platform sets tag {taken!r} (keys are compared in any letter case)")
        if not isinstance(value, str) or not value_rule.accepts(value):
            raise invalid(where, value, f"a string of {value_rule.length_text()}: {_TAG_TEXT} (SageMaker's {value_rule.name})")
        tags[key] = value
    return tags


def request_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the request, for the README and clients.

    SageMaker's limits are filled in from botocore's model. Rules that need
    the deployment (allowed instance types, the data bucket, the configured
    plans) are described in the ``description`` fields.
    """
    help_ = _FIELD_HELP
    job = model.string_rule("TrainingJobName")
    channel = model.string_rule("InputDataConfig.member.ChannelName")
    key, value = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    retries = model.bounds("RetryStrategy.MaximumRetryAttempts")
    props: dict[str, Any] = {
        "job_name": {"type": "string", "minLength": job.min_length, "maxLength": job.max_length,
                     "pattern": job.ecma_pattern(), "description": help_["job_name"]},
        "client_token": {"type": "string", "pattern": "^[A-Za-z0-9._:/=+@-]{1,128}$", "description": help_["client_token"]},
        "instance_type": {"enum": list(model.training_instance_types()), "description": help_["instance_type"]},
        "instance_count": {"type": "integer", "minimum": 1, "maximum": MAX_INSTANCE_COUNT, "default": 1,
                           "description": help_["instance_count"]},
        "capacity": {"enum": list(CAPACITY_CHOICES), "default": "training-plan", "description": help_["capacity"]},
        "training_plan_arn": {"type": "string", "pattern": TRAINING_PLAN_ARN_PATTERN.pattern,
                              "description": help_["training_plan_arn"]},
        "hyperparameters": hpmod.json_schema() | {"description": help_["hyperparameters"]},
        "inputs": {
            "type": "object",
            "maxProperties": model.bounds("InputDataConfig")[1],
            "propertyNames": {
                "minLength": channel.min_length, "maxLength": channel.max_length, "pattern": channel.ecma_pattern()
            },
            "additionalProperties": {"type": "string", "maxLength": model.string_rule(
                "InputDataConfig.member.DataSource.S3DataSource.S3Uri").max_length},
            "description": help_["inputs"],
        },
        "max_runtime_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RUNTIME_HOURS,
                              "default": DEFAULT_MAX_RUNTIME_HOURS, "description": help_["max_runtime_hours"]},
        "max_wait_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RUNTIME_HOURS,
                           "description": help_["max_wait_hours"]},
        "max_retry_attempts": {"type": "integer", "minimum": retries[0], "maximum": retries[1],
                               "default": DEFAULT_MAX_RETRY_ATTEMPTS, "description": help_["max_retry_attempts"]},
        "tags": {
            "type": "object",
            "maxProperties": model.bounds("Tags")[1],
            "propertyNames": {"minLength": key.min_length, "maxLength": key.max_length,
                              "not": {"pattern": "^([Aa][Ww][Ss]|[Pp][Ll][Aa][Tt][Ff][Oo][Rr][Mm]):"}},
            "additionalProperties": {"type": "string", "maxLength": value.max_length},
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
