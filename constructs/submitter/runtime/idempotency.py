"""Client-token records: one S3 object per token, the race-free lock of "one request, one job".

A ``client_token`` names one request for good. Its record,
``<records prefix><sha256(token)>.json`` (the prefix is
:data:`.settings.CLIENT_TOKEN_RECORDS_PREFIX` in the output bucket, given to
the function as :data:`.settings.ENV_CLIENT_TOKEN_RECORDS`), holds::

    {"schema": 1, "training_job_name": "...", "request_sha256": "<fingerprint v2>",
     "state": "claimed" | "released", "created": "<ISO 8601>", "reason"?: "...", "adopted"?: true}

``adopted``: the job was created without a ``client_token`` (by a request
with the same ``job_name`` and fingerprint) and this token was bound to it
afterwards; a job that carries no token tag is the token's only then, or when
its fingerprint tag is the record's. A record is read strictly (an integer
``schema``, a ``training_job_name`` SageMaker accepts, a 64-hex
``request_sha256``): anything else raises :class:`.errors.IdempotencyRecordError`
naming the object, and nothing is created.

It is written with S3 conditional writes, which are strongly consistent and
atomic: a new record with ``If-None-Match: *`` (of concurrent writers exactly
one wins; the others get ``412 Precondition Failed`` and read the winner's),
a change with ``If-Match: <ETag read>``. It is looked up with
``ListObjectsV2`` on its exact key, then ``GetObject``: without
``s3:ListBucket``, a ``GetObject`` of a missing key answers ``403`` rather than
``404`` (Amazon S3 API Reference, GetObject, Permissions), and the function is
granted ``ListBucket`` only for this prefix. S3 reads and lists are strongly
consistent after a write (Amazon S3 User Guide, "Amazon S3 data consistency
model").

A record is never deleted: the bucket's lifecycle rules expire only
noncurrent versions, so a current record stays as long as the bucket. A
record whose job SageMaker refused (quota, validation, a name another request
holds) is marked ``released``: the token may then be used for a corrected
request. The submitter (:mod:`.service`) settles every request against the
record's job name first, so releasing never lets a second job be created for
a job that exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import sagemaker_rules as model
from .aws import error_code
from .errors import ConfigurationError, IdempotencyRecordError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

RECORD_SCHEMA = 1
CLAIMED = "claimed"
RELEASED = "released"
_LOST_RACE_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
"""S3's answers to a conditional write that lost: 412 (the condition failed) or 409 (a
concurrent conditional write to the same key is in progress)."""
_URI_RE = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*/)?\Z")
_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class TokenRecord:
    """One client token's record as read (or just written).

    Attributes:
        training_job_name: the job the token stands for.
        request_sha256: fingerprint (version 2) of the request that claimed the token.
        state: ``claimed`` or ``released`` (SageMaker refused the job; the token is free again).
        created: when the record was written (ISO 8601).
        etag: the object's ETag (for a conditional change).
        uri: ``s3://bucket/key`` of the record.
        reason: why it was released.
        adopted: the job was created without a client token and bound to this one afterwards.
    """

    training_job_name: str
    request_sha256: str
    state: str
    created: str
    etag: str
    uri: str
    reason: str | None = None
    adopted: bool = False


class TokenRecords:
    """The client-token records under ``location`` (``s3://bucket/prefix/``).

    Args:
        s3: an S3 client.
        location: ``s3://<bucket>/<prefix>/`` (prefix ending in ``/``).

    Raises:
        ConfigurationError: ``location`` is not an ``s3://bucket/prefix/`` URI.
    """

    def __init__(self, s3: S3Client, location: str) -> None:
        match = _URI_RE.fullmatch(location or "")
        if match is None:
            raise ConfigurationError(f"client-token records location {location!r}: expected s3://<bucket>/<prefix>/")
        self.s3 = s3
        self.bucket = match.group(1)
        self.prefix = match.group(2) or ""

    def key(self, digest: str) -> str:
        """The object key of the token whose SHA-256 is ``digest``."""
        return f"{self.prefix}{digest}.json"

    def uri(self, digest: str) -> str:
        return f"s3://{self.bucket}/{self.key(digest)}"

    def lookup(self, digest: str) -> TokenRecord | None:
        """The token's record, or ``None`` when it has none.

        Raises:
            IdempotencyRecordError: the object is not a record (names its URI).
            botocore.exceptions.ClientError: S3 faults.
        """
        key = self.key(digest)
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        if not any(item.get("Key") == key for item in listed.get("Contents") or []):
            return None
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None  # removed by hand between the listing and the read
            raise
        with got["Body"] as body:
            raw = body.read()
        return self._parse(digest, raw, got.get("ETag", ""))

    def claim(
        self,
        digest: str,
        job_name: str,
        fingerprint: str,
        *,
        replace: TokenRecord | None = None,
        adopted: bool = False,
    ) -> TokenRecord | None:
        """Write the token's record naming ``job_name``; ``None`` when another writer got there first.

        Args:
            replace: the record (as read) this one replaces (``If-Match`` its
                ETag); ``None`` writes a new record (``If-None-Match: *``).
            adopted: ``job_name`` is an existing job made without a client token
                (same request), bound to this token now.
        """
        body: dict[str, Any] = {
            "schema": RECORD_SCHEMA,
            "training_job_name": job_name,
            "request_sha256": fingerprint,
            "state": CLAIMED,
            "created": datetime.now(UTC).isoformat(),
        }
        if adopted:
            body["adopted"] = True
        etag = self._put(digest, body, if_match=replace.etag if replace is not None else None)
        if etag is None:
            return None
        return TokenRecord(job_name, fingerprint, CLAIMED, body["created"], etag, self.uri(digest), adopted=adopted)

    def release(self, record: TokenRecord, reason: str) -> bool:
        """Mark ``record`` released (its job was refused); ``False`` when it changed since it was read."""
        digest = record.uri.rsplit("/", 1)[-1].removesuffix(".json")
        body: dict[str, Any] = {
            "schema": RECORD_SCHEMA,
            "training_job_name": record.training_job_name,
            "request_sha256": record.request_sha256,
            "state": RELEASED,
            "created": record.created,
            "reason": reason,
        }
        if record.adopted:
            body["adopted"] = True
        return self._put(digest, body, if_match=record.etag) is not None

    def _put(self, digest: str, body: dict[str, Any], *, if_match: str | None) -> str | None:
        """Write the record conditionally: ``If-Match: if_match`` (replace that version), or, with
        ``None``, ``If-None-Match: *`` (only if there is none); ``None`` when the condition failed."""
        body_bytes = json.dumps(body, sort_keys=True).encode()
        try:
            if if_match is not None:
                written = self.s3.put_object(
                    Bucket=self.bucket,
                    Key=self.key(digest),
                    Body=body_bytes,
                    ContentType="application/json",
                    IfMatch=if_match,
                )
            else:
                written = self.s3.put_object(
                    Bucket=self.bucket,
                    Key=self.key(digest),
                    Body=body_bytes,
                    ContentType="application/json",
                    IfNoneMatch="*",
                )
        except Exception as exc:
            if error_code(exc) in _LOST_RACE_CODES:
                return None
            raise
        return str(written.get("ETag", ""))

    def _parse(self, digest: str, raw: bytes, etag: str) -> TokenRecord:
        uri = self.uri(digest)
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IdempotencyRecordError(
                f"client-token record {uri} is not JSON ({exc}); inspect it, or delete it to free the token"
            ) from None
        fields = ("training_job_name", "request_sha256", "state", "created")
        schema = data.get("schema") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or type(schema) is not int
            or schema != RECORD_SCHEMA
            or not all(isinstance(data.get(f), str) and data.get(f) for f in fields)
            or data["state"] not in (CLAIMED, RELEASED)
            or not isinstance(data.get("adopted", False), bool)
            or not (data.get("reason") is None or isinstance(data.get("reason"), str))
        ):
            raise IdempotencyRecordError(
                f"client-token record {uri} is not a schema-{RECORD_SCHEMA} record (needs an integer schema "
                f"{RECORD_SCHEMA} and {', '.join(fields)}; state {CLAIMED} or {RELEASED}); inspect it, or delete it "
                "to free the token"
            )
        name = data["training_job_name"]
        if not model.string_rule("TrainingJobName").accepts(name):
            raise IdempotencyRecordError(
                f"client-token record {uri} names training job {name[:80]!r}, which is not a SageMaker "
                "TrainingJobName; inspect it, or delete it to free the token"
            )
        if not _SHA256_RE.fullmatch(data["request_sha256"]):
            raise IdempotencyRecordError(
                f"client-token record {uri}: request_sha256 {data['request_sha256'][:80]!r} is not 64 lower-case hex "
                "digits; inspect it, or delete it to free the token"
            )
        return TokenRecord(
            name, data["request_sha256"], data["state"], data["created"], etag, uri, data.get("reason"),
            adopted=bool(data.get("adopted", False)),
        )  # fmt: skip
