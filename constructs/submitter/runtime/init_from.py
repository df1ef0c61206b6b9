"""A request that starts from Hugging Face weights (``inputs.init_from``): the folder's ``config.json`` is its shape.

The trainer builds the model from the folder's ``config.json`` and refuses a run of another shape
(``training/hf_weights.py``), so the submitter reads that file before anything is created, the way a request's
``model_config`` is read (:func:`platform_spec.hyperparameters.merge_model_config`): one ``GetObject`` of
``<init_from>/config.json`` and a ``HeadObject`` of the weights (the index, else the single file), each bounded by
the invocation's deadline like every call of :class:`.aws.Clients`. The file's content becomes the request's
``model_config`` before the request is parsed, so

* the job's hyperparameters carry the folder's shape, checked by the family's rule with the request's precision
  and sequence length;
* the fingerprint hashes the shape read (the object may change between two sends: the changed shape is another
  job), and a request that also sends an equal ``model_config`` is the same job; a request without
  ``init_from`` is parsed as before, so its fingerprint is unchanged;
* a run's ``run.json`` keeps the shape its segment 1 was created with: a later segment whose folder changed
  shape is refused rather than resumed from checkpoints of another shape.

Refused as ``InvalidRequest``, before anything is created: ``model_config`` of another shape, a shape
hyperparameter, a ``config.json`` that is missing, unreadable, over :data:`CONFIG_MAX_BYTES`, not JSON or of a
shape the trainer does not run (naming its ``s3://`` URI), and a folder without weights. An FSx channel is not
read here (the submitter has no access to the file system): the trainer checks it at its start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from platform_spec import hyperparameters as hpmod
from platform_spec.errors import FieldError

from .aws import Clients, error_code
from .config import SubmitterConfig
from .errors import invalid
from .request import SubmitRequest, parse_request, parse_request_fields, s3_channel

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CONFIG_MAX_BYTES = 6 * 1024 * 1024
"""Largest ``config.json`` read (bytes): Lambda's synchronous invocation payload quota, 6 MB ("Lambda quotas",
AWS Lambda Developer Guide), the most a ``model_config`` sent in the request itself can be. Published configs
are a few KB."""
ABSENT_CODES = ("NoSuchKey", "404", "NotFound", "AccessDenied", "403")
"""S3's answers for an object that is not there: ``404`` with ``s3:ListBucket`` on the bucket, else ``403``
(S3 answers 403 for a missing key to a caller that may not list it; the submitter may not list the data)."""
WHERE = f"inputs.{hpmod.INIT_CHANNEL}"


def parse_with_folder(event: Any, clients: Clients, config: SubmitterConfig) -> tuple[SubmitRequest, Any]:
    """The request (:func:`.request.parse_request`) and the event it was parsed from: ``event`` itself, or, for an
    ``s3://`` ``inputs.init_from``, ``event`` with its folder's ``config.json`` as ``model_config``.

    Raises:
        Refusal: ``InvalidRequest`` naming the first bad field (see the module docstring).
        botocore.exceptions.ClientError: S3 faults other than a missing or unreadable object.
        DeadlineExceeded: too little of the invocation was left for the read.
    """
    folder = _folder(event, config)
    if folder is None:
        return parse_request(event, config), event
    config_uri = folder + hpmod.HF_CONFIG_FILE
    try:
        hf_config = _read_config(clients.s3, config_uri)
        shape = _shape_of(hf_config, config_uri)
        _check_weights(clients.s3, folder)
        _check_sent_shape(event.get("model_config"), shape, config_uri)
        augmented = {**event, "model_config": hf_config}
        try:
            return parse_request_fields(augmented, config), augmented
        except FieldError as exc:
            raise _aimed_at_folder(exc, config_uri, sent="model_config" in event) from None
    except FieldError as exc:
        raise invalid(exc) from None


def _folder(event: Any, config: SubmitterConfig) -> str | None:
    """The ``s3://`` folder (ending in ``/``) of the event's ``inputs.init_from``, when it is a URI requests may
    read; ``None`` otherwise (no such channel, an FSx one, or one :func:`.request.parse_request` refuses)."""
    inputs = event.get("inputs") if isinstance(event, Mapping) else None
    source = inputs.get(hpmod.INIT_CHANNEL) if isinstance(inputs, Mapping) else None
    if source is None or isinstance(source, Mapping):
        return None
    try:
        uri = s3_channel(WHERE, source, config)
    except FieldError:
        return None  # refused by the parse, in the table's order
    return uri if uri.endswith("/") else uri + "/"


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def _read_config(s3: S3Client, uri: str) -> Any:
    """The JSON of ``config.json`` at ``uri``, read once; the body is not read when it is over the bound."""
    bucket, key = _split(uri)
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if error_code(exc) in ABSENT_CODES:
            raise FieldError(
                WHERE, uri, _expected_folder("a config.json (none there, or not readable by the submitter)")
            ) from None
        raise
    with got["Body"] as body:
        size = got.get("ContentLength", 0)
        if size > CONFIG_MAX_BYTES:
            raise FieldError(WHERE, uri, f"a config.json of at most {CONFIG_MAX_BYTES} bytes; it has {size}")
        raw = body.read()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FieldError(WHERE, uri, _expected_folder(f"a config.json that is a JSON object ({exc})")) from None
    except RecursionError:  # arrays nested past Python's stack: a crash of the invocation, not a refusal
        raise FieldError(
            WHERE, uri, _expected_folder("a config.json that is a JSON object (nested too deeply to read)")
        ) from None


def _shape_of(hf_config: Any, uri: str) -> dict[str, Any]:
    """The shape hyperparameters of the folder's ``config.json``, as ``model_config`` gives them."""
    if not isinstance(hf_config, Mapping):
        raise FieldError(
            WHERE, uri, _expected_folder(f"a config.json that is a JSON object, not {type(hf_config).__name__}")
        )
    try:
        return hpmod.merge_model_config({}, hf_config)
    except FieldError as exc:
        raise FieldError(
            WHERE,
            uri,
            f"a config.json of a model the trainer runs: {exc.field.removeprefix('model_config.')} {exc.expected}",
        ) from None


def _check_weights(s3: S3Client, folder: str) -> None:
    """The folder has weights: the index of sharded weights, else the single file (what the trainer reads first)."""
    for name in (hpmod.HF_INDEX_FILE, hpmod.HF_WEIGHTS_FILE):
        bucket, key = _split(folder + name)
        try:
            s3.head_object(Bucket=bucket, Key=key)
            return
        except Exception as exc:
            if error_code(exc) not in ABSENT_CODES:
                raise
    raise FieldError(
        WHERE,
        folder,
        _expected_folder(f"weights: {hpmod.HF_INDEX_FILE} or {hpmod.HF_WEIGHTS_FILE} (neither there, or not readable)"),
    )


def _check_sent_shape(sent: Any, shape: Mapping[str, Any], uri: str) -> None:
    """A ``model_config`` sent beside ``init_from`` gives the folder's shape (or the parse refuses it as it is)."""
    if sent is None:
        return
    try:
        own = hpmod.merge_model_config({}, sent)
    except FieldError:
        return  # a malformed model_config: the parse names it
    differing = next((name for name in sorted(set(shape) | set(own)) if shape.get(name) != own.get(name)), None)
    if differing is not None:
        raise FieldError(
            "model_config",
            f"{differing} {own.get(differing)!r}",
            f"the shape of {uri} ({WHERE}), which has {differing} {shape.get(differing)!r}; or no model_config",
        )


def _aimed_at_folder(exc: FieldError, uri: str, *, sent: bool) -> FieldError:
    """A refusal of the shape the folder gave, named for the folder rather than for a ``model_config`` the caller
    did not send."""
    if sent:
        return exc
    if exc.field == "model_config":
        return FieldError(WHERE, uri, exc.expected.replace("a shape", "a config.json of a shape", 1))
    if exc.field.startswith("hyperparameters.") and exc.expected.startswith("no value: model_config"):
        return FieldError(exc.field, exc.value, f"no value: {uri} ({WHERE}) sets the model's shape")
    return exc


def _expected_folder(what: str) -> str:
    return f"a Hugging Face model folder (what save_pretrained writes) with {what}"
