"""The submission request: a typed, validated model of the function's event, derived from one table.

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
      "inputs": {"train": "s3://<data bucket>/datasets/guide/train/"},  # or, on the platform's FSx for Lustre:
                 # {"train": {"file_system_id": "fs-...", "directory_path": "/<mount name>/datasets/guide/train"}}
      "max_runtime_hours": 24,
      "max_wait_hours": 48,                         # spot only
      "max_retry_attempts": 3,
      "tags": {"team": "research"},
      "network_isolation": false,                   # EnableNetworkIsolation
      "inter_container_encryption": false,          # EnableInterContainerTrafficEncryption
      "infra_check": null,                          # InfraCheckConfig; default: on with 2+ instances
      "auto_tune": false,
      "dry_run": false
    }

**One table.** The fields are the rows of :data:`FIELDS` (:class:`.fields.Field`), checked in order by
:func:`parse_request` into a frozen :class:`SubmitRequest`, or refused as ``InvalidRequest`` naming the
first bad field; :mod:`.request_schema` renders them as the JSON Schema and the README's request table.
Adding a field is a row here plus its mapping into ``CreateTrainingJob`` (``runtime/job.py``, reading
``request.value(name)``). Hyperparameters are checked by the trainer's own definitions
(:mod:`platform_spec.hyperparameters`), SageMaker's limits by botocore's model, so the submitter never
accepts what the trainer or SageMaker would reject.

**Fingerprint** (:meth:`SubmitRequest.fingerprint`, tag ``platform:request-sha256-v2``): SHA-256 of
what the caller *sent* of the rows marked ``fingerprint``, so that adding an optional field with a
default to the table never changes the fingerprint of a stored job. Fields absent or ``null`` are left
out (defaults are never filled in; an empty object counts as absent); values are canonicalised so that
equal values compare equal (hyperparameter names through
:func:`platform_spec.hyperparameters.normalise_name` and values through the trainer's own
:func:`~platform_spec.hyperparameters.format_value`, numbers by value, input keys resolved to ``s3://``
URIs, maps sorted). ``dry_run``, ``client_token``, ``job_name`` and ``accept_memory_risk`` are not part
of what the job is. A field sent with its default value counts as sent.

**Derived job names** (:func:`derived_job_name`): a request with a ``client_token`` and no
``job_name`` runs as ``job-`` + the first 24 hex digits of SHA-256(token). That name space is reserved:
a ``job_name`` of that form (in any letter case) is refused unless it is exactly the name derived from
the request's own ``client_token``, so no request can take the name another token will derive.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from platform_spec import catalogue, health, models, runs
from platform_spec import hyperparameters as hpmod
from platform_spec.capacity import CAPACITY_TYPES
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE, InstanceSpec
from platform_spec.errors import FieldError
from platform_spec.training_plans import TRAINING_PLAN_ARN_FORMAT, TRAINING_PLAN_ARN_PATTERN

from . import sagemaker_rules as model
from .config import SubmitterConfig, default_allowed_instance_types
from .errors import invalid
from .fields import ABSENT_OBJECT, JOB_NAME, Check, Field, OnlyWith, check_table, parse, whole_string_pattern
from .tracking import mlflow_schema, parse_mlflow, parse_tensorboard, tensorboard_schema

MAX_RUNTIME_HOURS = 28 * 24.0
"""``StoppingCondition.MaxRuntimeInSeconds`` ceiling, in hours (672): "The maximum value is 28 days"
(SageMaker API Reference, StoppingCondition). botocore's model has no ``max`` for it."""
DEFAULT_MAX_RUNTIME_HOURS = 24.0
"""``max_runtime_hours`` of a request that sends none."""
DEFAULT_MAX_RETRY_ATTEMPTS = 3
"""``max_retry_attempts`` of a request that sends none (``RetryStrategy.MaximumRetryAttempts``)."""
MAX_INSTANCE_COUNT = 256
"""The largest ``InstanceCount`` a training plan offering reserves. botocore's model has no ``max``, and
its ``min`` is 0 (instance groups); a job here needs at least one instance."""
RESERVED_TAG_PREFIXES: tuple[str, ...] = ("aws:", "platform:")
"""Tag key prefixes requests may not use, in any letter case: AWS's own ("Don't use ``aws:``,
``AWS:``, or any upper or lowercase combination of such as a prefix", AWS Batch User Guide, Tag
restrictions, https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html) and the
submitter's bookkeeping tags (``platform:``, held to the same rule)."""
CLIENT_TOKEN_PATTERN = r"[A-Za-z0-9._:/=+@-]{1,128}"
"""The platform's client-token rule, matched whole: 1-128 of ``A-Z a-z 0-9 . _ : / = + @ -`` (no spaces,
no control characters). Also a valid ECMA-262 pattern (JSON Schema)."""
CLIENT_TOKEN_RE = re.compile(rf"(?:{CLIENT_TOKEN_PATTERN})\Z")
"""The ``client_token`` row's pattern, compiled. ``\\Z`` anchors it, so ``match`` and ``fullmatch`` agree."""
DERIVED_JOB_NAME_RE = re.compile(r"job-[0-9a-f]{24}\Z", re.IGNORECASE)
"""The form of the job names derived from a ``client_token`` (:func:`derived_job_name`), matched whole and
in any letter case: reserved for them."""
CAPACITY_CHOICES: tuple[str, ...] = (*CAPACITY_TYPES, "auto")
"""The ``capacity`` field's values: the capacity types, or ``auto`` (the configured fallback order)."""
S3_URI_RE = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*)\Z", re.DOTALL)


@functools.cache
def job_name_re() -> re.Pattern[str]:
    """SageMaker's ``TrainingJobName`` rule as one regex (:meth:`.sagemaker_rules.StringRule.regex`; botocore's
    model is read on first use, not at import)."""
    return model.string_rule("TrainingJobName").regex()


def token_digest(token: str) -> str:
    """SHA-256 (hex) of a ``client_token``: its job's ``platform:client-token-sha256`` tag, its record's key."""
    return hashlib.sha256(token.encode()).hexdigest()


def derived_job_name(client_token: str) -> str:
    """The job name of a request with ``client_token`` and no ``job_name``: ``job-`` + 24 hex of
    SHA-256(token), a function of the token alone (see the module docstring)."""
    return f"job-{token_digest(client_token)[:24]}"


def job_name_expected() -> str:
    """What a job name must be, with the model's limits (the ``job_name`` row's expectation)."""
    return JOB_NAME.expected_text()


@dataclass(frozen=True)
class FsxChannel:
    """An input channel on the platform's FSx for Lustre file system (``FileSystemDataSource``, read-only).

    Attributes:
        file_system_id: the platform's file system (:attr:`.config.FsxLustre.file_system_id`).
        directory_path: ``/<mount name>`` or a directory below it, normalised (no ``.``, ``..``, empty
            segment or trailing ``/``).
    """

    file_system_id: str
    directory_path: str

    def to_dict(self) -> dict[str, str]:
        """The request's form: ``{"file_system_id", "directory_path"}`` (also its canonical form)."""
        return {"file_system_id": self.file_system_id, "directory_path": self.directory_path}


@dataclass(frozen=True, kw_only=True)
class SubmitRequest:
    """A validated request with defaults applied: an attribute per row of :data:`FIELDS` (the row's help says
    what it is; ``inputs`` are resolved to ``s3://`` URIs, ``hyperparameters`` parsed into the trainer's
    :class:`~platform_spec.hyperparameters.Hyperparameters`), ``extras`` for the rows this class has no
    attribute for (read any field with :meth:`value`), and ``sent``, the ``fingerprint`` rows the caller sent,
    canonicalised: what :meth:`fingerprint` hashes. An ``inputs`` channel is an ``s3://`` URI or an
    :class:`FsxChannel`."""

    hyperparameters: hpmod.Hyperparameters
    instance_type: str
    instance_count: int
    capacity: str
    training_plan_arn: str | None
    inputs: Mapping[str, str | FsxChannel]
    max_runtime_hours: float
    max_wait_hours: float | None
    max_retry_attempts: int
    tags: Mapping[str, str]
    job_name: str | None
    client_token: str | None
    auto_tune: bool
    dry_run: bool
    extras: Mapping[str, Any] = field(default_factory=dict)
    sent: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run(self) -> runs.RunSpec | None:
        """The request's ``run`` (:class:`platform_spec.runs.RunSpec`), or ``None``."""
        spec = self.extras.get("run")
        return spec if isinstance(spec, runs.RunSpec) else None

    @property
    def segment(self) -> int | None:
        """For a request with ``run``: the index of the segment its ``job_name`` names (the submitter sets
        it to :func:`platform_spec.runs.segment_job_name`: 1 for the caller's request, the next ones for
        the run continuation); ``None`` otherwise."""
        run = self.run
        parsed = runs.parse_segment_job_name(self.job_name) if run is not None and self.job_name else None
        return parsed[1] if parsed is not None and run is not None and parsed[0] == run.run_id else None

    def value(self, name: str) -> Any:
        """The parsed value (default filled in) of the request field ``name``.

        Raises:
            KeyError: no such field.
        """
        if name in self.extras:
            return self.extras[name]
        if name in _FIELD_ATTRIBUTES:
            return getattr(self, name)
        raise KeyError(f"no request field {name!r} in this request")

    @property
    def reads_fsx(self) -> bool:
        """Whether a channel is on the platform's FSx for Lustre file system (the job runs in its subnet)."""
        return any(isinstance(source, FsxChannel) for source in self.inputs.values())

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
        test: changing what it hashes needs a new version (:data:`.training_job.FINGERPRINT_VERSION`).
        """
        blob = json.dumps({"request": dict(self.sent)}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_FIELD_ATTRIBUTES: frozenset[str] = frozenset(f.name for f in dataclasses.fields(SubmitRequest)) - {"extras", "sent"}


# --- the structured fields --------------------------------------------------------------------------


_FINGERPRINTED_SHAPE_FIELDS_V2 = frozenset(
    {"model", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
     "rope_base", "tied_embeddings", "norm_eps"}
)  # fmt: skip
"""The shape hyperparameters of a ``model_config`` that fingerprint version 2 hashed when it was first deployed
(the Llama family's fields then). A field added to the family since is hashed only when it differs from its
default (the shape the older release computed), so a request that release accepted keeps its fingerprint
across the upgrade: a retry straddling a deploy answers with the job it created, not "a different request"."""


def _model_config(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """A Hugging Face ``config.json`` as the hyperparameters of its shape (``model`` and the shape
    hyperparameters, :func:`platform_spec.hyperparameters.merge_model_config`); canonical: those, formatted
    (two files of one shape are one job), a field added since :data:`_FINGERPRINTED_SHAPE_FIELDS_V2` only when
    it is not its default."""
    if raw is ABSENT_OBJECT:
        return None, {}
    derived = hpmod.merge_model_config({}, raw)  # {} too: a config.json names its model_type
    family = models.get_family(derived["model"])
    defaults = {f.name: f.default for f in dataclasses.fields(family.shape_type)}
    canonical = {
        name: hpmod.format_value(value)
        for name, value in sorted(derived.items())
        if name in _FINGERPRINTED_SHAPE_FIELDS_V2 or value != defaults[family.shape_fields[name]]
    }
    return derived, canonical


def _model_config_schema() -> dict[str, Any]:
    types = sorted({t for name in models.family_names() for t in models.get_family(name).hf_model_types})
    return {"required": ["model_type"], "properties": {"model_type": {"enum": types}}}


def _run(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[runs.RunSpec | None, dict[str, Any]]:
    """The run (:func:`platform_spec.runs.parse_run`); canonical: its JSON form, the deadline in UTC."""
    if raw is ABSENT_OBJECT:
        return None, {}
    return runs.parse_run(raw)


def _run_schema() -> dict[str, Any]:
    return {
        "required": ["run_id"],
        "additionalProperties": False,
        "properties": {
            "run_id": {"type": "string", "pattern": whole_string_pattern(runs.RUN_ID_PATTERN)},
            "max_segments": {"type": ["integer", "null"], "minimum": 1, "maximum": runs.MAX_SEGMENTS},
            "deadline": {"type": ["string", "null"], "format": "date-time"},
            "max_instance_hours": {"type": ["number", "null"], "exclusiveMinimum": 0},
        },
    }


def _hyperparameters(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[hpmod.Hyperparameters, dict[str, str]]:
    """The parsed hyperparameters and the canonical form of those sent (name -> ``format_value``)."""
    values: dict[str, Any] = {}
    nulls: set[str] = set()
    for key, value in raw.items():
        if not isinstance(key, str):
            raise FieldError("hyperparameters", key, "string keys")
        name = hpmod.normalise_name(key)
        where = f"hyperparameters.{name}"
        if name in values or name in nulls:
            raise FieldError(where, key, f"{name!r} given once (it appears under two spellings)")
        if value is None:
            # null is absent, as for the request's own fields (a known name all the same)
            if name not in hpmod.SPECS:
                raise FieldError(where, key, "a known hyperparameter: " + ", ".join(sorted(hpmod.SPECS)))
            nulls.add(name)
            continue
        if not isinstance(value, (str, int, float, bool)):
            expected = hpmod.SPECS[name].expected() if name in hpmod.SPECS else "a known hyperparameter"
            raise FieldError(where, value, expected)
        try:
            values[name] = hpmod.coerce(name, value)
        except hpmod.HyperparameterError as exc:
            raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
        except (OverflowError, ValueError, TypeError):
            # e.g. an integer too large for a float field
            raise FieldError(where, value, hpmod.SPECS[name].expected()) from None
    try:
        parsed = hpmod.parse(values)
    except hpmod.HyperparameterError as exc:
        raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
    canonical = {name: hpmod.format_value(value) for name, value in sorted(values.items()) if value is not None}
    return parsed, canonical


def _hyperparameters_schema() -> dict[str, Any]:
    return {k: v for k, v in hpmod.json_schema().items() if k != "$schema"}


_CHANNEL_EXPECTED = "an s3:// URI, a key prefix under the data bucket, or {file_system_id, directory_path}"
FSX_CHANNEL_KEYS = ("file_system_id", "directory_path")
"""The members of an FSx channel (:class:`FsxChannel`)."""


def _inputs(
    raw: Mapping[str, Any], config: SubmitterConfig
) -> tuple[dict[str, str | FsxChannel], dict[str, str | dict[str, str]]]:
    """Channel -> ``s3://`` URI (keys resolved under the data bucket) or :class:`FsxChannel`; canonical: sorted,
    an FSx channel as its object (an ``s3://`` channel's form is unchanged, so fingerprints made before FSx
    channels existed stay equal)."""
    most = model.bounds("InputDataConfig")[1]
    if most is not None and len(raw) > most:
        raise FieldError(
            "inputs", f"{len(raw)} channels", f"at most {most} channels (SageMaker's InputDataConfig limit)"
        )
    channel_rule = model.string_rule("InputDataConfig.member.ChannelName")
    resolved: dict[str, str | FsxChannel] = {}
    for channel, source in raw.items():
        if not isinstance(channel, str) or not channel_rule.accepts(channel):
            raise FieldError("inputs", channel, f"channel names of {channel_rule.expected()}")
        where = f"inputs.{channel}"
        if isinstance(source, Mapping):
            resolved[channel] = _fsx_channel(where, source, config)
        else:
            resolved[channel] = s3_channel(where, source, config)
    canonical = {k: v.to_dict() if isinstance(v, FsxChannel) else v for k, v in sorted(resolved.items())}
    return resolved, canonical


def s3_channel(where: str, source: Any, config: SubmitterConfig) -> str:
    """An ``s3://`` channel's URI, a key prefix resolved under the data bucket."""
    uri_rule = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    if not isinstance(source, str) or not source.strip():
        raise FieldError(where, source, _CHANNEL_EXPECTED)
    uri: str = source
    if not uri.startswith("s3://"):
        if "://" in uri:
            raise FieldError(where, uri, _CHANNEL_EXPECTED)
        uri = f"s3://{config.data_bucket}/{uri.lstrip('/')}"
    if S3_URI_RE.fullmatch(uri) is None or _has_control(uri) or not uri_rule.accepts(uri):
        raise FieldError(where, uri, f"an s3://bucket/key URI without control characters, {uri_rule.length_text()}")
    prefixes = config.input_prefixes()
    if not any(uri.startswith(p) for p in prefixes):
        raise FieldError(where, uri, "a URI under " + " or ".join(prefixes))
    return uri


def _fsx_channel(where: str, source: Mapping[str, Any], config: SubmitterConfig) -> FsxChannel:
    """A channel on the platform's FSx for Lustre file system: its ID, and a directory at or below its mount."""
    fsx = config.fsx_lustre
    if fsx is None:
        raise FieldError(
            where, dict(source), "an s3:// URI or a key prefix under the data bucket: this deployment has no FSx for "
            "Lustre file system (the fsxLustre setting)",
        )  # fmt: skip
    unknown = [k for k in source if k not in FSX_CHANNEL_KEYS]
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", source[unknown[0]], "no such key: " + " and ".join(FSX_CHANNEL_KEYS))
    file_system_id = source.get("file_system_id")
    if file_system_id != fsx.file_system_id:
        raise FieldError(
            f"{where}.file_system_id",
            file_system_id,
            f"{fsx.file_system_id}, the platform's FSx for Lustre file system",
        )
    return FsxChannel(
        fsx.file_system_id, _directory_path(f"{where}.directory_path", source.get("directory_path"), fsx.root)
    )


def _directory_path(where: str, path: Any, root: str) -> str:
    """``path`` normalised (one trailing ``/`` dropped), checked to be ``root`` or below it, within SageMaker's
    ``DirectoryPath`` rule."""
    rule = model.string_rule("InputDataConfig.member.DataSource.FileSystemDataSource.DirectoryPath")
    expected = (
        f"{root} or a directory below it ({root}/<path>: the file system's mount name first, no . or .. or empty "
        f"segments, no control characters, {rule.length_text()})"
    )
    if not isinstance(path, str):
        raise FieldError(where, path, expected)
    trimmed = path[:-1] if path.endswith("/") and path != "/" else path
    if (
        _has_control(trimmed)
        or posixpath.normpath(trimmed) != trimmed
        or trimmed.startswith("//")
        or any(part in (".", "..") for part in trimmed.split("/"))
        or (trimmed != root and not trimmed.startswith(root + "/"))
        or not rule.accepts(trimmed)
    ):
        raise FieldError(where, path, expected)
    return trimmed


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _inputs_schema() -> dict[str, Any]:
    channel = model.string_rule("InputDataConfig.member.ChannelName")
    uri = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    file_system = model.string_rule("InputDataConfig.member.DataSource.FileSystemDataSource.FileSystemId")
    directory = model.string_rule("InputDataConfig.member.DataSource.FileSystemDataSource.DirectoryPath")
    fsx_channel = {
        "type": "object",
        "required": list(FSX_CHANNEL_KEYS),
        "additionalProperties": False,
        "properties": {
            "file_system_id": {"type": "string", "pattern": whole_string_pattern(file_system.pattern or ".*")},
            "directory_path": {"type": "string", "pattern": "^/", "maxLength": directory.max_length},
        },
    }
    return {
        "maxProperties": model.bounds("InputDataConfig")[1],
        "propertyNames": {
            "minLength": channel.min_length,
            "maxLength": channel.max_length,
            "pattern": whole_string_pattern(channel.pattern or ".*"),
        },
        "additionalProperties": {"oneOf": [{"type": "string", "maxLength": uri.max_length}, fsx_channel]},
    }


def _inputs_limits() -> str:
    channel = model.string_rule("InputDataConfig.member.ChannelName")
    uri = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    return (
        f"at most {model.bounds('InputDataConfig')[1]} channels (SageMaker's InputDataConfig), named with "
        f"{channel.length_text()} matching `{channel.pattern}` (SageMaker's {channel.name}); URIs of "
        f"{uri.length_text()} without control characters"
    )


_TAG_TEXT = "letters, digits, spaces and _ . : / = + - @"


def _tags(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The caller's tags; canonical: sorted."""
    key_rule, value_rule = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    tags: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key_rule.accepts(key):
            raise FieldError(
                "tags", key, f"tag keys of {key_rule.length_text()}: {_TAG_TEXT} (SageMaker's {key_rule.name})"
            )
        where = f"tags.{key}"
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise FieldError(
                where, key, "a key not starting with " + " or ".join(RESERVED_TAG_PREFIXES) + " (reserved)"
            )
        taken = next((k for k in config.platform_tags if k.lower() == key.lower()), None)
        if taken is not None:
            # tag keys are case-sensitive: "project" next to the platform's "Project" would split reports by it
            raise FieldError(
                where, value, f"no value: the platform sets tag {taken!r} (keys are compared in any letter case)"
            )
        if not isinstance(value, str) or not value_rule.accepts(value):
            raise FieldError(
                where, value, f"a string of {value_rule.length_text()}: {_TAG_TEXT} (SageMaker's {value_rule.name})"
            )
        tags[key] = value
    return tags, dict(sorted(tags.items()))


def _any_case(prefix: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in prefix)


def _tags_schema() -> dict[str, Any]:
    key, value = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    reserved = "^(?:" + "|".join(_any_case(p) for p in RESERVED_TAG_PREFIXES) + ")"
    return {
        "maxProperties": model.bounds("Tags")[1],
        "propertyNames": {"minLength": key.min_length, "maxLength": key.max_length, "not": {"pattern": reserved}},
        "additionalProperties": {"type": "string", "maxLength": value.max_length},
    }


def _tags_limits() -> str:
    key, value = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    return (
        f"keys of {key.length_text()}, values of {value.length_text()}: {_TAG_TEXT} (SageMaker's {key.name} and "
        f"{value.name}); at most {model.bounds('Tags')[1]} tags in all, the platform's included"
    )


# --- checks across fields ----------------------------------------------------------------------------


def _derived_job_name_reserved(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """A ``job_name`` of the derived form is only the request's own token's (module docstring)."""
    job_name, client_token = values["job_name"], values["client_token"]
    if job_name is None or not DERIVED_JOB_NAME_RE.fullmatch(job_name):
        return
    own = derived_job_name(client_token) if client_token is not None else None
    if job_name != own:
        raise FieldError(
            "job_name", job_name,
            "a name not of the form job-<24 hex digits>, which is reserved for the names derived from a "
            + (f"client_token (this request's client_token derives {own!r}; leave job_name out to use it)"
               if own else "client_token (this request has none)"),
        )  # fmt: skip


def _segment_job_name_reserved(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """A ``job_name`` of a run's segment form (:func:`platform_spec.runs.segment_job_name`, in any letter case, as
    the derived names) is the submitter's alone, for the segments it creates: a plain job of that name would stand
    where the run's next segment goes."""
    job_name = values["job_name"]
    if job_name is not None and runs.parse_segment_job_name(job_name.lower()) is not None:
        raise FieldError(
            "job_name",
            job_name,
            "a name not of the form <run_id>-seg-<3 digits>, which is reserved for the segments of runs (send "
            "run.run_id to start a run; the submitter names its segments)",
        )


def _run_names_its_jobs(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """A run names its segments (``<run_id>-seg-NNN``) and keys them by its run id: no ``job_name`` or
    ``client_token`` with it."""
    if values["run"] is None:
        return
    run_id = values["run"].run_id
    for name in ("job_name", "client_token"):
        if values[name] is not None:
            raise FieldError(
                name,
                values[name],
                f"no {name} with run: the run's segments are named {runs.segment_job_name(run_id, 1)}, "
                f"{runs.segment_job_name(run_id, 2)}, ... and run.run_id is the key a retry is matched on",
            )


def _train_channel(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """The trainer reads the ``train`` channel unless it makes synthetic data."""
    if not values["hyperparameters"].synthetic_data and "train" not in values["inputs"]:
        raise FieldError(
            "inputs.train",
            None,
            "an s3:// URI for the train channel (or an FSx channel {file_system_id, directory_path}, or "
            "hyperparameters.synthetic_data true)",
        )


def _validation_channel(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """With ``eval_interval`` set, the trainer evaluates on the ``validation`` channel (synthetic data: synthetic
    validation tokens)."""
    hp = values["hyperparameters"]
    if hp.eval_interval and not hp.synthetic_data and hpmod.VALIDATION_CHANNEL not in values["inputs"]:
        raise FieldError(
            f"inputs.{hpmod.VALIDATION_CHANNEL}",
            None,
            f"an s3:// URI (or an FSx channel) of token shards made with the train channel's tokenizer: "
            f"hyperparameters.eval_interval={hp.eval_interval} evaluates on it (or eval_interval 0)",
        )


def _wait_covers_runtime(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """SageMaker's ``MaxWaitTimeInSeconds`` counts the run too: at least ``MaxRuntimeInSeconds``."""
    wait, runtime = values["max_wait_hours"], values["max_runtime_hours"]
    if wait is not None and wait < runtime:
        raise FieldError("max_wait_hours", wait, f">= max_runtime_hours ({runtime:g})")


def _model_config_shape(values: Mapping[str, Any], config: SubmitterConfig) -> Mapping[str, Any] | None:
    """A ``model_config`` gives the hyperparameters its shape (the file is the shape's one source, so
    ``hyperparameters`` may not set one too), checked with the request's precision and sequence length by the
    family's rule."""
    derived = values["model_config"]
    if not derived:
        return None
    hp: hpmod.Hyperparameters = values["hyperparameters"]
    try:
        hpmod.refuse_shape_values(_shape_values(hp), derived)
    except FieldError as exc:
        raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
    try:
        return {"hyperparameters": hpmod.parse(derived, base=hp)}
    except hpmod.HyperparameterError as exc:
        raise FieldError(
            "model_config",
            f"{exc.field} {exc.value!r}",
            f"a shape the trainer runs with hyperparameters.precision {hp.precision} and seq_length "
            f"{hp.seq_length}: {exc.field} {exc.expected}",
        ) from None


def _shape_values(hp: hpmod.Hyperparameters) -> dict[str, Any]:
    """The shape hyperparameters (and ``model``, unless it is the default) that ``hp`` sets."""
    names = ("model_family", *hpmod.SHAPE_HYPERPARAMETERS)
    out = {name: getattr(hp, name) for name in names if getattr(hp, name) is not None}
    if hp.model != hpmod.Hyperparameters().model:
        out["model"] = hp.model
    return out


def _stall_minutes(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """``stall_minutes`` only with ``run`` (the run continuation watches runs' segments), and 0 or at least
    :data:`platform_spec.health.MIN_STALL_MINUTES`.

    Raises:
        FieldError: naming ``stall_minutes``.
    """
    minutes = values.get("stall_minutes")
    if minutes is None:
        return
    if values.get("run") is None:
        raise FieldError("stall_minutes", minutes, "no stall_minutes without run (the platform watches runs' segments)")
    if 0 < minutes < health.MIN_STALL_MINUTES:
        raise FieldError(
            "stall_minutes",
            minutes,
            f"0 (off) or a number of minutes >= {health.MIN_STALL_MINUTES:g} (CloudWatch's delay of the train:step "
            "metric and the continuation's schedule would stop healthy jobs under it)",
        )


def _infra_check(values: Mapping[str, Any], config: SubmitterConfig) -> Mapping[str, Any] | None:
    """``infra_check`` absent: on for a multi-node job on an instance type the check applies to
    (:func:`platform_spec.catalogue.default_infra_check`); ``true`` on a type it does not apply to is refused. A type
    the catalogue does not know is left to :func:`check_instance`, which refuses it naming ``instance_type``.

    Raises:
        FieldError: naming ``infra_check``.
    """
    sent, instance_type = values["infra_check"], values["instance_type"]
    if sent is None:
        return {"infra_check": catalogue.default_infra_check(instance_type, values["instance_count"])}
    if sent and instance_type in catalogue.INSTANCES and not catalogue.infra_check_supported(instance_type):
        raise FieldError(
            "infra_check",
            sent,
            f"false or absent: SageMaker's infrastructure health check tests GPU instances with EFA (NVIDIA DCGM, "
            f"NCCL and EFA tests), and {instance_type} has no EFA (platform_spec/catalogue.py)",
        )
    return None


# --- the table ------------------------------------------------------------------------------------------


def _default_instance_type(config: SubmitterConfig) -> str:
    return config.default_instance_type


def _instance_type_schema() -> dict[str, Any]:
    return {"enum": list(model.training_instance_types())}


FIELDS: tuple[Field, ...] = (
    Field(
        "action", "string",
        help="what the request asks: `submit`, a submission (these fields)",
        default="submit",
        choices=("submit",),
        fingerprint=False,
        notes="the other actions (`describe`, `list`, `stop`, ...) take their own fields (README, *The job API*)",
    ),
    dataclasses.replace(
        JOB_NAME,
        default_text="derived: `job-` + 24 hex digits of SHA-256(`client_token`), else `<model>-<precision>-<UTC time>-<4 hex>`",
        checks=(Check(_derived_job_name_reserved, needs=("client_token",)), Check(_segment_job_name_reserved)),
        fingerprint=False,
        notes="`job-` + 24 hex digits (any case) is reserved for the names derived from a `client_token`: a request "
        "may send only its own token's; `<run_id>-seg-` + 3 digits (any case) is reserved for the segments of runs",
    ),
    Field(
        "client_token", "string",
        help="idempotency key: the same token returns the first job, ever",
        pattern=CLIENT_TOKEN_PATTERN,
        expected="1-128 characters of A-Z a-z 0-9 . _ : / = + @ -",
        fingerprint=False,
    ),
    Field(
        "instance_type", "string",
        help="ML instance type",
        default=_default_instance_type,
        default_text=f"the deployment's `defaultInstanceType` (`{DEFAULT_INSTANCE_TYPE}`)",
        expected="one of the allowed types: configured (`allowedInstanceTypes`), accepted by `CreateTrainingJob` "
        "(SageMaker's TrainingInstanceType) and run by the trainer image; its GPU must run `hyperparameters.precision`",
        blank_is_absent=True,
        schema=_instance_type_schema,
    ),
    Field(
        "instance_count", "integer",
        help="instances (nodes)",
        default=1, minimum=1, maximum=MAX_INSTANCE_COUNT,
    ),
    Field(
        "capacity", "string",
        help="where the job runs: a training plan, spot, on-demand, or `auto` (the configured `capacityFallback` "
        "order, moving on when a quota is exceeded)",
        default="training-plan",
        choices=CAPACITY_CHOICES,
        blank_is_absent=True,
    ),
    Field(
        "training_plan_arn", "string",
        help="the training plan to use; default: the best configured plan",
        pattern=TRAINING_PLAN_ARN_PATTERN.pattern,
        sagemaker="ResourceConfig.TrainingPlanArn",
        expected=f"a SageMaker training plan ARN {TRAINING_PLAN_ARN_FORMAT}",
        only_with=OnlyWith("capacity", ("training-plan", "auto"), noun="plan"),
        notes="one of the configured plans, of the deployment's region and account",
    ),
    Field(
        "hyperparameters", "object",
        help="the trainer's hyperparameters",
        default_text="the trainer's defaults",
        parse=_hyperparameters,
        expected="a JSON object of the trainer's hyperparameters",
        notes="validated by `platform_spec/hyperparameters.py`, the trainer's own definitions; numbers as text are "
        'ASCII decimal (`"8"`, `"3e-4"`; not `"1_0"` or other scripts\' digits); `null` is absent (the default), as '
        "for the request's own fields",
        schema=_hyperparameters_schema,
    ),
    Field(
        "model_config", "object",
        help="the model's shape as a Hugging Face `config.json` of a Llama-family model (`model_type` `llama`, "
        "`mistral`, `qwen2` or `qwen3`; transformers 4 or 5 form)",
        parse=_model_config,
        expected="a JSON object: a Hugging Face config.json",
        checks=(Check(_model_config_shape, needs=("hyperparameters",)),),
        notes="mapped to the model family's shape: `hyperparameters.model` becomes the family's custom shape and "
        "its shape hyperparameters come from the file (`hyperparameters` may not set them too); checked by the "
        "family's shape rule with `hyperparameters.precision` and `seq_length`; content the trainer does not "
        "implement (a sliding window shorter than `seq_length`, a RoPE type other than `default` and `llama3`, biases elsewhere, another activation, "
        "an unknown key) is refused with the key named",
        schema=_model_config_schema,
    ),
    Field(
        "inputs", "object",
        help="input channels: channel name -> `s3://` URI, or a key prefix under the data bucket, or "
        '`{"file_system_id": "fs-...", "directory_path": "/<mount name>/<path>"}` on the platform\'s FSx for Lustre '
        "file system",
        parse=_inputs,
        limits=_inputs_limits,
        expected="a JSON object: channel name -> s3:// URI or {file_system_id, directory_path}",
        checks=(
            Check(_train_channel, needs=("hyperparameters",)),
            Check(_validation_channel, needs=("hyperparameters",)),
        ),
        notes="URIs under the data bucket or an `allowedInputPrefixes` prefix; `train` is required unless "
        "`hyperparameters.synthetic_data`, and `validation` (shards of the same tokenizer) with "
        "`hyperparameters.eval_interval`. `init_from`: a Hugging Face model folder to start from, whose `config.json` "
        "the submitter reads as the request's `model_config` (the same shape, or none, may be sent too). An FSx channel (only with `fsxLustre`) names the platform's file system "
        "and a directory at or below its mount name; it is read-only (`FileSystemDataSource`, `InputMode` `File`: "
        "SageMaker mounts it at `/opt/ml/input/data/<channel>`), and the job runs in the file system's subnet, so "
        "on a training plan only a block in that availability zone can run it",
        schema=_inputs_schema,
    ),
    Field(
        "max_runtime_hours", "number",
        help="hours before SageMaker stops the job",
        default=DEFAULT_MAX_RUNTIME_HOURS, minimum=0, exclusive_minimum=True, maximum=MAX_RUNTIME_HOURS, unit="hours",
    ),
    Field(
        "max_wait_hours", "number",
        help="spot only: hours to wait for spot capacity plus run",
        default_text=f"2 x `max_runtime_hours`, at most {MAX_RUNTIME_HOURS:g}",
        minimum=0, exclusive_minimum=True, maximum=MAX_RUNTIME_HOURS, unit="hours",
        only_with=OnlyWith("capacity", ("spot", "auto")),
        checks=(Check(_wait_covers_runtime, needs=("max_runtime_hours",)),),
        notes="at least `max_runtime_hours`",
    ),
    Field(
        "max_retry_attempts", "integer",
        help="SageMaker's RetryStrategy.MaximumRetryAttempts",
        default=DEFAULT_MAX_RETRY_ATTEMPTS,
        sagemaker="RetryStrategy.MaximumRetryAttempts",
    ),
    Field(
        "tags", "object",
        help="the job's tags, merged with the platform's",
        parse=_tags,
        limits=_tags_limits,
        expected="a JSON object of string tag values",
        notes="keys starting with " + " or ".join(f"`{p}`" for p in RESERVED_TAG_PREFIXES) + " are reserved, and so "
        "are the keys of the platform's own tags, in any letter case",
        schema=_tags_schema,
    ),
    Field(
        "mlflow", "object",
        help="log the trainer's metrics to a SageMaker managed MLflow tracking server (CreateTrainingJob's "
        "MlflowConfig): `resource_arn`, `experiment_name`?, `run_name`?",
        parse=parse_mlflow,
        expected="a JSON object: {resource_arn, experiment_name?, run_name?}",
        notes="`resource_arn`: a tracking server (`mlflow-tracking-server/<name>`) of the deployment's partition, "
        "region and account (the execution role may log to those only); `run_name` defaults to the job name, `experiment_name` to "
        "MLflow's default experiment; limits are botocore's MlflowConfig. Rank 0 logs each metric line; a tracking "
        "server that fails is reported once in the job's log and training goes on",
        schema=mlflow_schema,
    ),
    Field(
        "tensorboard", "object",
        help="write the trainer's metrics as TensorBoard event files that SageMaker uploads while the job runs "
        "(CreateTrainingJob's TensorBoardOutputConfig): `s3_output_path`?, `local_path`?; `{}` for the defaults",
        parse=parse_tensorboard,
        expected="a JSON object: {s3_output_path?, local_path?}",
        notes="`s3_output_path`: a folder below `s3://<output bucket>/tensorboard/` (default "
        "`s3://<output bucket>/tensorboard/<job name>/`, so `tensorboard --logdir s3://<output bucket>/tensorboard/` "
        "compares jobs); `local_path`: below `/opt/ml/output/`, not in `/opt/ml/output/data` (default "
        "`/opt/ml/output/tensorboard`)",
        schema=tensorboard_schema,
    ),
    Field(
        "network_isolation", "boolean",
        help="SageMaker's EnableNetworkIsolation: the training container makes no network call but to the job's "
        "other instances, and gets no AWS credentials",
        default=False,
        notes="SageMaker still moves the input channels, checkpoints (`/opt/ml/checkpoints`) and output with the "
        "execution role, outside the container, and collects its logs and metrics; the trainer makes no network call "
        "of its own (its processes talk only to each other), so it runs alike",
    ),
    Field(
        "inter_container_encryption", "boolean",
        help="SageMaker's EnableInterContainerTrafficEncryption: encrypt the traffic between the job's instances",
        default=False,
        notes="no effect on one instance; on several SageMaker encrypts the IP traffic between them (IPsec), and AWS "
        "states it can increase training time by an amount that depends on that traffic (the planner's estimate "
        "notes it); AWS does not say whether it covers NCCL's traffic over EFA, which bypasses the IP stack",
    ),
    Field(
        "infra_check", "boolean",
        help="SageMaker's infrastructure health check (CreateTrainingJob's InfraCheckConfig.EnableInfraCheck): the "
        "instances' hardware and the network between them are tested before the trainer starts",
        default_text="`true` with `instance_count` >= 2 on an instance type with EFA (every type of the catalogue), "
        "else `false`",
        checks=(Check(_infra_check, needs=("instance_type", "instance_count")),),
        notes="`true` on an instance type without EFA is refused; a job that fails the check ends `Failed` "
        f"(`{health.INFRA_CHECK_ERROR}: ...`) before it trains, and a run continues on new instances after the "
        "capacity backoff; AWS publishes no list of the instance types the check supports "
        "(`platform_spec/catalogue.py` `infra_check_supported`, its sources)",
    ),
    Field(
        "auto_tune", "boolean",
        help="apply the planner's change when the configuration is predicted not to fit in GPU memory",
        default=False,
    ),
    Field(
        "accept_memory_risk", "boolean",
        help="submit a configuration the planner calls `at-risk` (its memory requirement within the model's stated "
        "error of usable GPU memory) instead of refusing it as `PredictedOutOfMemory`",
        default=False,
        fingerprint=False,
        notes="a configuration predicted out of memory is refused whatever this says; `auto_tune` applies the "
        "planner's change instead",
    ),
    Field(
        "dry_run", "boolean",
        help="validate, choose capacity and estimate; create nothing",
        default=False,
        fingerprint=False,
    ),
    Field(
        "run", "object",
        help="make the job segment 1 of a run: one training carried across jobs, each resuming the last one's "
        "checkpoint, until `max_steps` or the budget (`platform_spec/runs.py`)",
        parse=_run,
        expected="a JSON object: {" + ", ".join(k if k == "run_id" else k + "?" for k in runs.RUN_FIELDS) + "}",
        checks=(Check(_run_names_its_jobs, needs=("job_name", "client_token")),),
        notes="`run_id`: 1-48 lowercase letters, digits and hyphens, starting with a letter; the run's key (a retry "
        "of the same request replays segment 1, another request with the same `run_id` is a `Conflict`); "
        "segments are named `<run_id>-seg-001`, `-002`, ... and checkpoint to `run-checkpoints/<run_id>/`, so "
        "`job_name` and `client_token` are refused with it; budget: `max_segments` (1-999), `deadline` (ISO 8601 "
        "with a time zone), `max_instance_hours` (> 0, the run's total); each segment's `MaxRuntimeInSeconds` is the "
        "least of `max_runtime_hours`, the time to the deadline and the instance-hours left over `instance_count` "
        "(never shrunk), and a budget leaving less than the trainer's stop margin plus `min_segment_minutes` is "
        "refused naming its field; an ended run is continued with the `continue_run` action; on a training plan a "
        "block shorter than `max_runtime_hours` is used when it leaves the trainer's stop margin plus "
        f"`min_segment_minutes` (> 0, default {runs.DEFAULT_MIN_SEGMENT_MINUTES:g}) of training",
        schema=_run_schema,
    ),
    Field(
        "stall_minutes", "number",
        help="with `run`: a segment whose newest training step is older than this many minutes is stopped (it "
        "checkpoints on SIGTERM) and the run continues on a new segment; 0: not watched",
        default_text=f"`{health.DEFAULT_STALL_MINUTES:g}` with `run`",
        minimum=0, maximum=MAX_RUNTIME_HOURS * 60, unit="minutes",  # no job runs longer
        checks=(Check(_stall_minutes, needs=("run",)),),
        notes=f"0 or at least {health.MIN_STALL_MINUTES:g}; the newest step is the job's newest `train:step` "
        "datapoint in CloudWatch (a `[metrics]` line every `hyperparameters.log_interval` steps), or, before the "
        "first, when the job entered `Training`; the run continuation looks on its schedule (5 minutes by default), "
        "so a stall is acted on within `stall_minutes` plus a tick plus CloudWatch's delay; keep it above "
        "`log_interval` x the step time and the first step's start-up (`platform_spec/health.py`); a new run whose "
        "planned `log_interval` x step time is not under it (this value or the default) is refused naming it",
    ),
)  # fmt: skip
"""The request's fields, in the order they are checked (the first bad one is refused)."""

check_table(FIELDS)


def parse_request(event: Any, config: SubmitterConfig) -> SubmitRequest:
    """Validate ``event`` field by field, in the table's order, and apply defaults.

    Instance types are checked against the configuration, ``CreateTrainingJob``'s
    enum and the catalogue afterwards (:func:`check_instance`).

    Raises:
        Refusal: code ``InvalidRequest``, naming the first bad field (:func:`.errors.invalid`).
    """
    try:
        return parse_request_fields(event, config)
    except FieldError as error:
        raise invalid(error) from None


def parse_request_fields(event: Any, config: SubmitterConfig) -> SubmitRequest:
    """:func:`parse_request`, raising the first bad field's ``FieldError`` (for a caller that names it otherwise).

    Raises:
        platform_spec.errors.FieldError: the first bad field.
    """
    values, sent = parse(event, FIELDS, config)
    attributes = {k: v for k, v in values.items() if k in _FIELD_ATTRIBUTES}
    extras = {k: v for k, v in values.items() if k not in _FIELD_ATTRIBUTES}
    return SubmitRequest(**attributes, extras=MappingProxyType(extras), sent=sent)


# --- instance types ----------------------------------------------------------------------------------


def allowed_instance_types(config: SubmitterConfig) -> tuple[str, ...]:
    """Instance types requests may use: the configured ones (none configured: all) among those a
    deployment may allow (:func:`.config.default_allowed_instance_types`: catalogue types that
    ``CreateTrainingJob`` accepts whose host CPUs run one of the deployment's trainer images), in the
    configured order (else the catalogue's)."""
    deployable = default_allowed_instance_types(config.image_architectures)
    if not config.allowed_instance_types:
        return deployable
    return tuple(t for t in config.allowed_instance_types if t in deployable)


def check_instance(request: SubmitRequest, config: SubmitterConfig) -> InstanceSpec:
    """The catalogue's entry of the request's instance type, checked against ``CreateTrainingJob``, the
    configuration and the catalogue (:mod:`platform_spec.catalogue`).

    Raises:
        Refusal: ``InvalidRequest`` on ``instance_type`` (not accepted by ``CreateTrainingJob``, host CPUs
        the trainer image is not built for, not allowed) or ``hyperparameters.precision`` (the instance's GPU
        cannot run it).
    """
    try:
        return _check_instance(request, config)
    except FieldError as error:
        raise invalid(error) from None


def _check_instance(request: SubmitRequest, config: SubmitterConfig) -> InstanceSpec:
    instance_type = request.instance_type
    if instance_type not in model.training_instance_types():
        raise FieldError(
            "instance_type",
            instance_type,
            "an instance type CreateTrainingJob accepts (SageMaker's TrainingInstanceType)",
        )
    architecture = catalogue.host_architecture_problem(instance_type, config.image_architectures)
    if architecture is not None:
        raise FieldError(
            "instance_type", instance_type,
            f"an instance type the trainer image runs on ({architecture}): one of "
            + ", ".join(allowed_instance_types(config)),
        )  # fmt: skip
    allowed = allowed_instance_types(config)
    if instance_type not in allowed:
        raise FieldError("instance_type", instance_type, "one of the allowed types: " + ", ".join(allowed))
    instance = catalogue.get_instance(instance_type)  # allowed types are catalogue types
    precision = request.hyperparameters.precision
    if not catalogue.supports_precision(instance.gpu, precision):
        supported = catalogue.supported_precisions(instance.gpu)
        raise FieldError(
            "hyperparameters.precision",
            precision,
            f"a precision {instance.gpu} on {instance_type} supports: {', '.join(supported)}",
        )
    return instance
