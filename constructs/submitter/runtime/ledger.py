"""The ledger of "at most once": small JSON records in S3, each written by a conditional write.

Its key families (the construct grants the two prefixes; :mod:`.settings` names them)::

    <client-token records>/<sha256(token)>.json     a client token's claim: the job it stands for
    submitter/runs/<run_id>/run.json                 a run's request and budget (its claim of the run id)
    submitter/runs/<run_id>/decisions/seg-NNN.json   the decision on segment NNN's end
    submitter/runs/<run_id>/stop.json, end.json      the run was stopped; how it ended with no segment running
    submitter/runs/<run_id>/stalls/seg-NNN.json      the continuation stopped segment NNN: no step for longer
                                                     than the request's stall_minutes (written before the stop)
    submitter/runs/<run_id>/from-seg-NNN/continued.json   the ended run was continued at segment NNN (its new
                                                     budget, the caller's client token); that continuation's
                                                     own stop.json and end.json sit beside it
    submitter/runs/_waiting/<run_id>.json            the run waits for capacity (no run id starts with ``_``)
    submitter/runs/_active/<run_id>.json             the run has not been seen ended (the tick reconciles it)

A run's decision, stop and end records belong to its claim: the Nth claim of a run id (over a released
``run.json``) keeps them below ``<run_id>/gN/``, so a new claim starts clean of a released one's. A
continuation (:meth:`RunLedger.continuation_key`) starts clean of the stop and end of the run it continues.

**Writes** are S3 conditional writes, strongly consistent and atomic: :meth:`Ledger.create` sends
``If-None-Match: *`` (of concurrent writers exactly one wins), :meth:`Ledger.replace` ``If-Match: <ETag
read>``. **The lost-race rule**: S3 answers ``412 Precondition Failed`` (the condition failed) or ``409
ConditionalRequestConflict`` (a concurrent conditional write is in flight); the write returns ``None``
and the writer reads the winner's record. **One schema**: every record is ``{"schema": 1, ...}``; a claim
holds ``"state": "claimed"`` or ``"released"`` with its ``"reason"`` (its job was refused, so the token
is free again). Records are never deleted (the bucket expires noncurrent versions only), but for the
waiting and active markers. **Strict reading**: an object that is not JSON, not of schema 1, with a bad state or without
its family's fields raises :class:`.errors.IdempotencyRecordError` naming it; nothing is created while it stands.
**Reads** list the exact key, then ``GetObject``: without ``s3:ListBucket`` a missing key answers ``403``,
not ``404`` (Amazon S3 API Reference, GetObject, Permissions); S3 reads and lists are strongly consistent
after a write (Amazon S3 User Guide, "Amazon S3 data consistency model").

Powertools' idempotency utility (the job-outcomes function's) covers no family as well: it stores in
DynamoDB or Redis only, expires its records (a token stands for one job, ever), and answers a concurrent
duplicate with ``IdempotencyAlreadyInProgressError`` where these settle on the one job.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from platform_spec import runs as spec
from platform_spec.errors import FieldError

from . import sagemaker_rules as model
from .aws import Clients, error_code
from .config import SubmitterConfig
from .errors import ConfigurationError, IdempotencyRecordError
from .settings import CLIENT_TOKEN_RECORDS_SID, RUN_ACTIVE_PREFIX, RUN_STORE_PREFIX, RUN_WAITING_PREFIX
from .training_job import FINGERPRINT_VERSION

SCHEMA = 1
CLAIMED = "claimed"
RELEASED = "released"
LOST_RACE_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
"""S3's answers to a conditional write that lost (412: the condition failed; 409: a concurrent one is in flight)."""
_URI_RE = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*/)?\Z")
_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Record:
    """One record as read or written: its fields (``schema`` left out), ETag and ``s3://`` URI."""

    fields: dict[str, Any]
    etag: str
    uri: str

    @property
    def released(self) -> bool:
        return self.fields.get("state") == RELEASED


class Ledger:
    """The records in ``bucket``; an unreadable one is named a ``noun`` in errors, which end with ``advice``."""

    def __init__(self, s3: Any, bucket: str, noun: str = "run-store object", advice: str = "inspect it") -> None:
        self.s3, self.bucket, self.noun, self.advice = s3, bucket, noun, advice

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def keys(self, prefix: str) -> set[str]:
        """Every key under ``prefix`` (paginated ``ListObjectsV2``)."""
        found: set[str] = set()
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found.update(item["Key"] for item in page.get("Contents") or [])
        return found

    def read(self, key: str, known: set[str] | None = None) -> Record | None:
        """The record at ``key``, or ``None``; ``known``: the keys listed already (else the key is listed).

        Raises:
            IdempotencyRecordError: the object is not a schema-1 record (names it, and what is wrong).
        """
        if known is None:
            listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
            known = {item.get("Key") for item in listed.get("Contents") or []}
        if key not in known:
            return None
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None  # removed by hand between the listing and the read
            raise
        with got["Body"] as body:
            raw = body.read()
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self.invalid(self.uri(key), f"is not JSON ({exc})") from None
        schema = data.get("schema") if isinstance(data, dict) else None
        if type(schema) is not int or schema != SCHEMA:
            found = f" (schema {schema}: written by another version of the submitter)" if type(schema) is int else ""
            raise self.invalid(self.uri(key), f"is not a schema-{SCHEMA} record{found}")
        problem = _state_problem(data)
        if problem is not None:
            raise self.invalid(self.uri(key), f"is not a schema-{SCHEMA} record: {problem}")
        del data["schema"]
        return Record(data, str(got.get("ETag", "")), self.uri(key))

    def create(self, key: str, fields: dict[str, Any]) -> Record | None:
        """Write a new record (``If-None-Match: *``); ``None`` when one exists (another writer got there first)."""
        return self._put(key, fields, {"IfNoneMatch": "*"})

    def replace(self, record: Record, fields: dict[str, Any]) -> Record | None:
        """Replace ``record`` as read (``If-Match`` its ETag); ``None`` when it changed since."""
        return self._put(record.uri.split("/", 3)[3], fields, {"IfMatch": record.etag})

    def release(self, record: Record, reason: str) -> bool:
        """Mark the claim ``record`` released with ``reason``; ``False`` when it changed since it was read."""
        return self.replace(record, {**record.fields, "state": RELEASED, "reason": reason}) is not None

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)

    def invalid(self, uri: str, why: str) -> IdempotencyRecordError:
        return IdempotencyRecordError(f"{self.noun} {uri} {why}; {self.advice}")

    def _put(self, key: str, fields: dict[str, Any], condition: dict[str, str]) -> Record | None:
        body = json.dumps({"schema": SCHEMA, **fields}, sort_keys=True).encode()
        try:
            written = self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **condition
            )
        except Exception as exc:
            if error_code(exc) in LOST_RACE_CODES:
                return None
            raise
        return Record(dict(fields), str(written.get("ETag", "")), self.uri(key))


def _state_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a claim's ``state`` (absent in records written once) or ``reason``, if anything."""
    state, reason = data.get("state", CLAIMED), data.get("reason", "")
    if not isinstance(state, str) or state not in (CLAIMED, RELEASED):
        return f"its state {str(state)[:40]!r} is neither {CLAIMED!r} nor {RELEASED!r}"
    if not isinstance(reason, str):
        return f"its reason is a JSON {type(reason).__name__}, not a string"
    return None


# --- client tokens ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRecord:
    """A client token's claim: the job it stands for, the fingerprint (and its version) of the request that
    claimed it, when (ISO 8601), and ``adopted``: the job was made without a token by the same request."""

    record: Record
    training_job_name: str
    request_sha256: str
    created: str
    fingerprint_version: int = FINGERPRINT_VERSION
    adopted: bool = False

    def is_request(self, fingerprint: str) -> bool:
        """Whether the claim is the request with ``fingerprint`` (same fingerprint, of this submitter's version)."""
        return self.fingerprint_version == FINGERPRINT_VERSION and self.request_sha256 == fingerprint


class TokenLedger(Ledger):
    """The client-token records at ``location`` (``s3://<bucket>/<prefix>/``).

    Raises:
        ConfigurationError: ``location`` is not an ``s3://bucket/prefix/`` URI.
    """

    def __init__(self, s3: Any, location: str) -> None:
        match = _URI_RE.fullmatch(location or "")
        if match is None:
            raise ConfigurationError(f"client-token records location {location!r}: expected s3://<bucket>/<prefix>/")
        super().__init__(
            s3,
            match.group(1),
            "client-token record",
            (
                "inspect it; to free the token, delete it with the output bucket policy's "
                f"{CLIENT_TOKEN_RECORDS_SID} statement lifted (no one but the submitter may write there)"
            ),
        )
        self.prefix = match.group(2) or ""

    @classmethod
    def of(cls, clients: Clients, config: SubmitterConfig) -> TokenLedger:
        if not config.client_token_records:
            raise ConfigurationError("the client-token records location (CLIENT_TOKEN_RECORDS_URI) is not configured")
        return cls(clients.s3, config.client_token_records)

    def key(self, digest: str) -> str:
        """The key of the token whose SHA-256 is ``digest``."""
        return f"{self.prefix}{digest}.json"

    def lookup(self, digest: str) -> TokenRecord | None:
        """The token's claim, or ``None``.

        Raises:
            IdempotencyRecordError: the object is not a client-token record (names it).
        """
        record = self.read(self.key(digest))
        if record is None:
            return None
        data = record.fields
        fields = ("training_job_name", "request_sha256", "state", "created")
        if (
            not all(isinstance(data.get(f), str) and data.get(f) for f in fields)
            or not isinstance(data.get("adopted", False), bool)
            or type(data.get("fingerprint_version", FINGERPRINT_VERSION)) is not int
        ):
            raise self.invalid(
                record.uri,
                f"is not a schema-{SCHEMA} record (needs an integer schema {SCHEMA} and {', '.join(fields)}; state "
                f"{CLAIMED} or {RELEASED})",
            )
        name, sha = data["training_job_name"], data["request_sha256"]
        if not model.string_rule("TrainingJobName").accepts(name):
            raise self.invalid(
                record.uri, f"names training job {name[:80]!r}, which is not a SageMaker TrainingJobName"
            )
        if not _SHA256_RE.fullmatch(sha):
            raise self.invalid(record.uri, f"has request_sha256 {sha[:80]!r}, which is not 64 lower-case hex digits")
        version = data.get("fingerprint_version", FINGERPRINT_VERSION)
        return TokenRecord(record, name, sha, data["created"], version, adopted=data.get("adopted", False))

    def claim(
        self, digest: str, job_name: str, fingerprint: str, created: str, *, replace: Record | None, adopted: bool
    ) -> TokenRecord | None:
        """Claim the token for ``job_name``: a new record, or over ``replace`` (as read); ``None`` when another
        writer got there first."""
        fields: dict[str, Any] = {
            "training_job_name": job_name, "request_sha256": fingerprint, "fingerprint_version": FINGERPRINT_VERSION,
            "state": CLAIMED, "created": created,
        }  # fmt: skip
        if adopted:
            fields["adopted"] = True
        record = self.create(self.key(digest), fields) if replace is None else self.replace(replace, fields)
        return None if record is None else TokenRecord(record, job_name, fingerprint, created, adopted=adopted)


# --- runs ------------------------------------------------------------------------------------------


def _segment_in(key: str) -> int:
    """The NNN of a key's ``from-seg-NNN/`` part (:meth:`RunLedger.episode_prefix`), else 0."""
    part = key.rpartition("from-seg-")[2].partition("/")[0]
    return int(part) if part.isascii() and part.isdigit() else 0


class RunLedger(Ledger):
    """The run store: the run families under :data:`.settings.RUN_STORE_PREFIX` of the output bucket."""

    prefix = RUN_STORE_PREFIX

    @classmethod
    def of(cls, clients: Clients, config: SubmitterConfig) -> RunLedger:
        return cls(clients.s3, config.output_bucket)

    def run_prefix(self, run_id: str) -> str:
        return f"{self.prefix}{run_id}/"

    def run_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}run.json"

    def claim_prefix(self, claim: RunRecord) -> str:
        """Where the decision, stop and end records of the run's claim ``claim`` go: the run's prefix, below
        ``g<N>/`` for its Nth claim (a claim over a released ``run.json``)."""
        base = self.run_prefix(claim.run.run_id)
        return base if claim.generation == 1 else f"{base}g{claim.generation}/"

    def decision_key(self, claim: RunRecord, index: int) -> str:
        return f"{self.claim_prefix(claim)}decisions/seg-{index:03d}.json"

    def stall_key(self, claim: RunRecord, index: int) -> str:
        """The record that the continuation stopped segment ``index`` for a stall (:mod:`.stall`)."""
        return f"{self.claim_prefix(claim)}stalls/seg-{index:03d}.json"

    def episode_prefix(self, claim: RunRecord, first_segment: int = 1) -> str:
        """Where the records of the run's stretch from segment ``first_segment`` go: the claim's prefix for the
        first (segment 1), ``from-seg-NNN/`` below it for a continuation at segment NNN."""
        base = self.claim_prefix(claim)
        return base if first_segment == 1 else f"{base}from-seg-{first_segment:03d}/"

    def continuation_key(self, claim: RunRecord, first_segment: int) -> str:
        """The record of the continuation that resumes the ended run at segment ``first_segment`` (>= 2)."""
        return f"{self.episode_prefix(claim, first_segment)}continued.json"

    def continuation_segments(self, claim: RunRecord, keys: set[str]) -> list[int]:
        """The segments (ascending) at which the claim's continuation records among ``keys`` resume the run: the
        keys of :meth:`continuation_key`'s layout."""
        return sorted(
            index
            for key in keys
            if key.startswith(self.claim_prefix(claim))
            for index in [_segment_in(key)]
            if index >= 2 and key == self.continuation_key(claim, index)
        )

    def stop_key(self, claim: RunRecord, first_segment: int = 1) -> str:
        return f"{self.episode_prefix(claim, first_segment)}stop.json"

    def end_key(self, claim: RunRecord, first_segment: int = 1) -> str:
        return f"{self.episode_prefix(claim, first_segment)}end.json"

    def waiting_key(self, run_id: str) -> str:
        return f"{RUN_WAITING_PREFIX}{run_id}.json"

    def active_key(self, run_id: str) -> str:
        return f"{RUN_ACTIVE_PREFIX}{run_id}.json"

    def read_run(self, run_id: str, known: set[str] | None = None) -> RunRecord | None:
        """The run's ``run.json``, or ``None``.

        Raises:
            IdempotencyRecordError: it exists and is not a run record.
        """
        record = self.read(self.run_key(run_id), known)
        if record is None:
            return None
        data = record.fields
        try:
            run, _ = spec.parse_run(data["budget"])
            request, max_steps = data["request"], data["max_steps"]
            if run.run_id != run_id or not isinstance(request, dict) or type(max_steps) is not int:
                raise ValueError("fields")
            version, generation = data.get("fingerprint_version", FINGERPRINT_VERSION), data.get("generation", 1)
            sha, created = str(data["request_sha256"]), str(data["created"])
            if type(generation) is not int or generation < 1:
                raise ValueError("generation")
        except (KeyError, TypeError, ValueError, FieldError):
            raise self.invalid(record.uri, "is not a run record") from None
        return RunRecord(run, request, sha, max_steps, created, record, version, generation)


@dataclass(frozen=True)
class RunRecord:
    """``run.json``: the run (its id and budget), the submission event that started it (every segment is
    submitted from it), its fingerprint, ``max_steps``, when it was written (ISO 8601), the record as
    read or written (``None`` before; a released one, whose first segment SageMaker refused, does not exist
    for the job API), and ``generation``: which claim of the run id it is (1, then one more for each claim
    over a released one; :meth:`RunLedger.claim_prefix`)."""

    run: spec.RunSpec
    request: dict[str, Any]
    request_sha256: str
    max_steps: int
    created: str
    record: Record | None = None
    fingerprint_version: int = FINGERPRINT_VERSION
    generation: int = 1

    @property
    def released(self) -> bool:
        return self.record is not None and self.record.released

    def is_request(self, fingerprint: str) -> bool:
        """Whether the claim is the request with ``fingerprint`` (same fingerprint, of this submitter's version)."""
        return self.fingerprint_version == FINGERPRINT_VERSION and self.request_sha256 == fingerprint

    def fields(self) -> dict[str, Any]:
        return {
            "run_id": self.run.run_id, "budget": self.run.to_dict(), "request": self.request,
            "request_sha256": self.request_sha256, "fingerprint_version": self.fingerprint_version,
            "max_steps": self.max_steps, "created": self.created, "state": CLAIMED, "generation": self.generation,
        }  # fmt: skip
