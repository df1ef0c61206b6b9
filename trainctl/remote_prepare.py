"""``trainctl prepare-data --remote``: :func:`training.prepare.prepare_data` as a SageMaker Processing job over an
S3 prefix of the data bucket, on N CPU instances of the trainer image (layout and facts:
:mod:`platform_spec.processing`; the container's side: :mod:`training.processing`).

``ShardedByS3Key`` gives each instance a subset of the prefix's files (whole files); each writes its own part
folder. When the job has completed, :func:`finish` writes the dataset's manifest (one per split) over every
part, and before it the split's one ``tokenizer.json`` (the job's ``tokenizer`` input, where the export looks
for it), each with a conditional put (``If-None-Match: *``): written once, and only when each host's part is
there. A dataset prefix without it is incomplete (a job that failed, was stopped or is still running): the
trainer refuses it (:mod:`training.data`).

Before any job: the input prefix must lie in the data bucket and hold files, at least as many as instances; the
output prefix must lie below ``s3://DATA_BUCKET/prepared/`` (the only place the execution role may write), be
empty (nothing is overwritten: a new preparation gets a new name) and not overlap the input.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_spec.errors import FieldError
from platform_spec.processing import (
    DEFAULT_INSTANCE_TYPE,
    ENTRY_POINT,
    INPUT_DATA,
    INPUT_DIR,
    INPUT_TOKENIZER,
    INSTANCE_TYPES,
    MANIFEST,
    OUTPUT_DATASET,
    OUTPUT_DIR,
    PREPARED_PREFIX,
    SPLITS,
    TOKENIZER_DIR,
    TOKENIZER_FILE,
    part_name,
)

TERMINAL = ("Completed", "Failed", "Stopped")
CONFLICT_RETRIES = 3
"""Conditional puts retried on S3's 409 ``ConditionalRequestConflict`` (another write of the key in flight), as
the S3 User Guide's "Conditional writes" asks; a 412 ``PreconditionFailed`` means the key is there."""
ONE_DATASET = (
    "dtype", "vocab_size", "eod_token_id", "tokenizer", "tokenizer_sha256", "split", "validation", "processing_job"
)  # fmt: skip
"""Manifest fields every part of one dataset shares (``processing_job``: the job's name)."""
VOLUME_SIZE_GB = 30
"""``ClusterConfig.VolumeSizeInGB``: the ML storage volume (inputs staged, shards written before upload)."""


@dataclass(frozen=True)
class ProcessingTargets:
    """What the job runs on: the trainer image, the execution role, the data bucket, the platform's KMS key (the
    dataset's encryption, as training jobs' output) and (VPC mode) the jobs' subnets and security groups."""

    image_uri: str
    role_arn: str
    data_bucket: str
    kms_key_arn: str
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()

    @classmethod
    def from_stack_outputs(cls, outputs: Mapping[str, str]) -> ProcessingTargets:
        """From the deployed stack's outputs (``TrainerImageUri``, ``ExecutionRoleArn``, ``DataBucketName``,
        ``BucketKeyArn``, in VPC
        mode ``JobSubnetIds`` (comma-separated) and ``JobSecurityGroupId``). Raises LookupError: one missing."""
        needed = ("TrainerImageUri", "ExecutionRoleArn", "DataBucketName", "BucketKeyArn")
        missing = [k for k in needed if not outputs.get(k)]
        if missing:
            raise LookupError(f"the stack has no {', '.join(missing)} output; expected the training platform's stack")
        subnets = tuple(s for s in outputs.get("JobSubnetIds", "").split(",") if s)
        groups = (outputs["JobSecurityGroupId"],) if subnets and outputs.get("JobSecurityGroupId") else ()
        return cls(*(outputs[k] for k in needed), subnets, groups)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> ProcessingTargets:
        """From the submitter's settings in ``env`` (the emulator's environment, ``.demo/aws.env``).
        Raises ConfigurationError: a setting is missing (naming it)."""
        from platform_constructs.submitter.runtime.config import SubmitterConfig

        config = SubmitterConfig.from_environ(dict(env))
        return cls(
            config.trainer_image_uris["amd64"],  # processing instances are x86-64 (imageArchitectures has amd64)
            config.execution_role_arn,
            config.data_bucket,
            config.output_kms_key_arn,
            tuple(s.subnet_id for s in config.vpc_subnets),
            tuple(config.vpc_security_group_ids),
        )


@dataclass(frozen=True)
class RemotePreparation:
    """One ``prepare-data --remote``: ``source`` and ``output`` are ``s3://`` prefixes; the rest as
    :func:`training.prepare.prepare_data` (``validation_documents`` is not offered: it needs every file's count)."""

    source: str
    output: str
    instance_count: int = 1
    instance_type: str = DEFAULT_INSTANCE_TYPE
    text_field: str = "text"
    separator: str | None = None
    no_separator: bool = False
    shard_tokens: int | None = None
    validation_fraction: float | None = None
    seed: int = 0

    def arguments(self) -> list[str]:
        """``ContainerArguments`` of :mod:`training.processing`."""
        args = ["--text-field", self.text_field, "--seed", str(self.seed)]
        if self.separator is not None:
            args += ["--separator", self.separator]
        if self.no_separator:
            args.append("--no-separator")
        if self.shard_tokens is not None:
            args += ["--shard-tokens", str(self.shard_tokens)]
        if self.validation_fraction is not None:
            args += ["--validation-fraction", repr(self.validation_fraction)]
        return args


def split_uri(field: str, uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> ``(bucket, "prefix/")`` (a trailing slash added: a prefix is a folder)."""
    if not uri.startswith("s3://") or not uri[5:].partition("/")[0]:
        raise FieldError(field, uri, "an s3://BUCKET/PREFIX/ URI")
    bucket, _, key = uri[5:].partition("/")
    return bucket, (key.rstrip("/") + "/") if key.strip("/") else ""


def check(prep: RemotePreparation, targets: ProcessingTargets) -> tuple[str, str]:
    """The argument checks that need no AWS call; returns the input and output key prefixes.

    Raises:
        FieldError: naming the argument, what it got and what was expected."""
    bucket, source = split_uri("input", prep.source)
    if bucket != targets.data_bucket:
        raise FieldError("input", prep.source, f"a prefix in the data bucket s3://{targets.data_bucket}/")
    out_bucket, output = split_uri("--output", prep.output)
    if out_bucket != targets.data_bucket or not output.startswith(PREPARED_PREFIX) or output == PREPARED_PREFIX:
        raise FieldError("--output", prep.output, f"s3://{targets.data_bucket}/{PREPARED_PREFIX}NAME/")
    if output.startswith(source) or source.startswith(output):
        raise FieldError("--output", prep.output, f"a prefix apart from the input {prep.source}")
    if prep.instance_type not in INSTANCE_TYPES:
        raise FieldError("--instance-type", prep.instance_type, f"one of {', '.join(INSTANCE_TYPES)}")
    if prep.instance_count < 1:
        raise FieldError("--instance-count", prep.instance_count, "an integer >= 1")
    if prep.shard_tokens is not None and prep.shard_tokens < 2:
        raise FieldError("--shard-tokens", prep.shard_tokens, "an integer >= 2")
    if prep.validation_fraction is not None and not 0 < prep.validation_fraction < 1:
        raise FieldError("--validation-fraction", prep.validation_fraction, "a number in (0, 1)")
    if not 0 <= prep.seed < 1 << 32:
        raise FieldError("--seed", prep.seed, "an integer in [0, 2**32)")
    return source, output


def _keys(s3: Any, bucket: str, prefix: str, limit: int | None = None) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents") or [] if not o["Key"].endswith("/")]
        if limit is not None and len(keys) >= limit:
            return keys[:limit]
    return keys


def check_objects(s3: Any, prep: RemotePreparation, targets: ProcessingTargets, source: str, output: str) -> None:
    """The checks that read the bucket: input files (at least ``instance_count``), an empty output."""
    files = _keys(s3, targets.data_bucket, source, limit=prep.instance_count)
    if not files:
        raise FieldError("input", prep.source, "a prefix holding the files to prepare (it holds none)")
    if len(files) < prep.instance_count:
        raise FieldError(
            "--instance-count",
            prep.instance_count,
            f"at most the input's {len(files)} file(s) (ShardedByS3Key gives each instance whole files)",
        )
    there = _keys(s3, targets.data_bucket, output, limit=1)  # a finished dataset's first key is its manifest
    if there:
        manifests = {f"{output}{MANIFEST}", *(f"{output}{split}/{MANIFEST}" for split in SPLITS)}
        what = "the dataset of an earlier preparation, " if there[0] in manifests else ""
        raise FieldError(
            "--output", prep.output, f"an empty prefix (it holds {what}s3://{targets.data_bucket}/{there[0]})"
        )


def upload_tokenizer(s3: Any, bucket: str, tokenizer: Path) -> str:
    """Put ``tokenizer`` at ``prepared/.tokenizers/<sha256>/tokenizer.json`` (the job's ``tokenizer`` input,
    and the source of the dataset's copy, :func:`finish`; content-addressed: the same file
    twice is one object); returns its prefix URI."""
    data = tokenizer.read_bytes()
    key = f"{PREPARED_PREFIX}.tokenizers/{hashlib.sha256(data).hexdigest()}/{TOKENIZER_FILE}"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    return f"s3://{bucket}/{key.rsplit('/', 1)[0]}/"


def job_name(now: datetime | None = None) -> str:
    """``prepare-data-YYYYMMDD-HHMMSS-xxxxxx`` (processing job names: 1-63 of ``[a-zA-Z0-9-]``)."""
    now = now or datetime.now(UTC)
    return f"prepare-data-{now:%Y%m%d-%H%M%S}-{hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:6]}"


def processing_job_request(
    name: str, prep: RemotePreparation, targets: ProcessingTargets, tokenizer_uri: str | None = None
) -> dict[str, Any]:
    """The ``CreateProcessingJob`` parameters (botocore's sagemaker model)."""
    inputs: list[dict[str, Any]] = [
        {
            "InputName": INPUT_DATA,
            "S3Input": {
                "S3Uri": prep.source,
                "LocalPath": INPUT_DIR,
                "S3DataType": "S3Prefix",
                "S3InputMode": "File",
                "S3DataDistributionType": "ShardedByS3Key",
            },
        }
    ]
    if tokenizer_uri:
        inputs.append(
            {
                "InputName": INPUT_TOKENIZER,
                "S3Input": {
                    "S3Uri": tokenizer_uri,
                    "LocalPath": TOKENIZER_DIR,
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                    "S3DataDistributionType": "FullyReplicated",
                },
            }
        )
    request: dict[str, Any] = {
        "ProcessingJobName": name,
        "ProcessingInputs": inputs,
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": OUTPUT_DATASET,
                    "S3Output": {"S3Uri": prep.output, "LocalPath": OUTPUT_DIR, "S3UploadMode": "EndOfJob"},
                }
            ],
            "KmsKeyId": targets.kms_key_arn,
        },
        "ProcessingResources": {
            "ClusterConfig": {
                "InstanceCount": prep.instance_count,
                "InstanceType": prep.instance_type,
                "VolumeSizeInGB": VOLUME_SIZE_GB,
            }
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 24 * 3600},
        "AppSpecification": {
            "ImageUri": targets.image_uri,
            "ContainerEntrypoint": list(ENTRY_POINT),
            "ContainerArguments": prep.arguments(),
        },
        "RoleArn": targets.role_arn,
    }
    if targets.subnets:
        request["NetworkConfig"] = {
            "VpcConfig": {"Subnets": list(targets.subnets), "SecurityGroupIds": list(targets.security_groups)}
        }
    return request


def wait(
    sagemaker: Any, name: str, *, poll_s: float = 10.0, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """``DescribeProcessingJob`` until the job is Completed, Failed or Stopped; returns the last answer. The
    pause between two calls doubles from 0.5 s up to ``poll_s``."""
    pause = 0.5
    while True:
        job: dict[str, Any] = sagemaker.describe_processing_job(ProcessingJobName=name)
        if job["ProcessingJobStatus"] in TERMINAL:
            return job
        sleep(min(pause, poll_s))
        pause *= 2


def merge_manifests(parts: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One split's manifest over its parts: ``(part folder, part manifest)``, in host order. Shards are listed by
    path relative to the split's folder; counts are summed.

    Raises:
        ValueError: parts of another tokenizer, dtype, vocabulary or processing job (not one dataset)."""
    first = parts[0][1]
    for folder, manifest in parts:
        for key in ONE_DATASET:
            if manifest.get(key) != first.get(key):
                raise ValueError(
                    f"{folder}: {key} {manifest.get(key)!r} differs from {first.get(key)!r} of {parts[0][0]}"
                )
    merged = dict(first)
    merged["shards"] = [{**s, "file": f"{folder}/{s['file']}"} for folder, m in parts for s in m["shards"]]
    merged["num_tokens"] = sum(int(m["num_tokens"]) for _, m in parts)
    merged["num_documents"] = sum(int(m["num_documents"]) for _, m in parts)
    merged["sources"] = [f"{folder}:{s}" for folder, m in parts for s in m.get("sources", [])]
    merged["parts"] = [folder for folder, _ in parts]
    return merged


def _put_once(s3: Any, bucket: str, key: str, body: bytes, content_type: str) -> bool:
    """Put ``body`` at ``key`` unless an object is there (``If-None-Match: *``); True when this call wrote it.
    An object that is there must hold ``body`` (the same job finished twice, or two ``--attach`` at once).

    Raises:
        LookupError: the object there holds something else (naming it)."""
    import botocore.exceptions

    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*", ContentType=content_type)
            return True
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "PreconditionFailed":
                break
            if code != "ConditionalRequestConflict" or attempt == CONFLICT_RETRIES:
                raise
            time.sleep(1.0)
    there = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if there != body:
        raise LookupError(f"s3://{bucket}/{key} is there and is not this job's (nothing replaced)")
    return False


def finish(
    s3: Any,
    bucket: str,
    output: str,
    instance_count: int,
    splits: Sequence[str | None],
    tokenizer: bytes | None = None,
) -> dict[str, bool]:
    """Write each split's manifest over every host's part (module docstring), and before it the split's one
    ``tokenizer.json`` (``tokenizer``: the job's ``tokenizer`` input; the parts hold none), each unless it is
    there already with the same content (a second finish of one job, or two at once, changes nothing).
    Returns split folder (key prefix) -> whether this call wrote its manifest (False: it was complete).

    Raises:
        LookupError: a host's part manifest is missing, ``tokenizer`` is not the one the parts' shards were
            made with (by SHA-256), or a manifest or tokenizer of something else is there; the dataset stays
            without a manifest (incomplete)."""
    hosts = [f"algo-{i}" for i in range(1, instance_count + 1)]
    manifests: dict[str, dict[str, Any]] = {}
    for split in splits:
        folder = f"{output}{split}/" if split else output
        parts = []
        for host in hosts:
            key = f"{folder}{part_name(host)}/{MANIFEST}"
            try:
                body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            except s3.exceptions.NoSuchKey:
                raise LookupError(f"s3://{bucket}/{key} is missing: {host}'s part is not complete") from None
            parts.append((part_name(host), json.loads(body)))
        manifests[folder] = merge_manifests(parts)
    written: dict[str, bool] = {}
    for folder, manifest in manifests.items():
        sha = manifest.get("tokenizer_sha256")
        if sha is not None:
            if tokenizer is None or hashlib.sha256(tokenizer).hexdigest() != sha:
                raise LookupError(
                    f"the job's tokenizer input is {'missing' if tokenizer is None else 'another tokenizer'}; "
                    f"the shards of s3://{bucket}/{folder} were made with the tokenizer of sha256 {sha}"
                )
            _put_once(s3, bucket, f"{folder}{TOKENIZER_FILE}", tokenizer, "application/json")
        body = (json.dumps(manifest, indent=2) + "\n").encode()
        written[folder] = _put_once(s3, bucket, f"{folder}{MANIFEST}", body, "application/json")
    return written


def job_tokenizer(s3: Any, job: Mapping[str, Any]) -> bytes | None:
    """The ``tokenizer.json`` of a DescribeProcessingJob answer's ``tokenizer`` input (None: the job has none,
    the byte-level tokenizer).

    Raises:
        LookupError: the input's object is gone."""
    for item in job.get("ProcessingInputs") or []:
        if item.get("InputName") == INPUT_TOKENIZER:
            bucket, prefix = split_uri("tokenizer", item["S3Input"]["S3Uri"])
            try:
                return bytes(s3.get_object(Bucket=bucket, Key=f"{prefix}{TOKENIZER_FILE}")["Body"].read())
            except s3.exceptions.NoSuchKey:
                raise LookupError(f"the job's tokenizer s3://{bucket}/{prefix}{TOKENIZER_FILE} is gone") from None
    return None


def complete(session: Any, name: str, *, output: str | None = None, poll_s: float = 10.0) -> int:
    """Wait for processing job ``name`` and write its dataset's manifests and tokenizer copies, from the job's
    own description (its output, instance count, ``tokenizer`` input and ``--validation-fraction``); prints
    where the dataset is, and whether it was complete already. Returns 0, or 1 when the job did not complete
    (Failed, or Stopped) or a part is missing (the dataset stays without a manifest).

    Raises:
        FieldError: ``output`` is given and is not the job's output."""
    sagemaker = session.client("sagemaker")
    job = wait(sagemaker, name, poll_s=poll_s)
    uri = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    bucket, prefix = split_uri("--output", uri)
    if output is not None and split_uri("--output", output) != (bucket, prefix):
        raise FieldError("--output", output, f"the output of processing job {name}, {uri}")
    status = job["ProcessingJobStatus"]
    if status != "Completed":
        reason = job.get("FailureReason") or (
            "StopProcessingJob, or past its StoppingCondition.MaxRuntimeInSeconds" if status == "Stopped" else "?"
        )
        print(
            f"processing job {name} {status}: {reason}; {uri} has no manifest (incomplete: the trainer refuses "
            "it); prepare the data again into a new --output"
        )
        return 1
    count = int(job["ProcessingResources"]["ClusterConfig"]["InstanceCount"])
    split = "--validation-fraction" in job["AppSpecification"].get("ContainerArguments", [])
    s3 = session.client("s3")
    try:
        written = finish(s3, bucket, prefix, count, SPLITS if split else (None,), job_tokenizer(s3, job))
    except (LookupError, ValueError) as exc:  # ValueError: parts that are not one dataset
        print(f"processing job {name} completed but {exc}")
        return 1
    for folder, now in written.items():
        state = "" if now else ": complete already (its manifest was written before)"
        print(f"dataset s3://{bucket}/{folder} ({MANIFEST}){state}")
    return 0


def prepare_remote(
    prep: RemotePreparation,
    targets: ProcessingTargets,
    session: Any,
    *,
    tokenizer: Path | None = None,
    no_wait: bool = False,
    poll_s: float = 10.0,
) -> int:
    """Check, launch and (unless ``no_wait``) :func:`complete` the job; prints the dataset's location, or with
    ``no_wait`` the job's name and the command that completes it. Returns :func:`complete`'s status (0 launched
    with ``no_wait``).

    Raises:
        FieldError: refused input (before any job or upload), a ``tokenizer`` or separator included
            (:func:`training.data.load_tokenizer`'s refusals, which the job would meet)."""
    from training.data import DataError, load_tokenizer

    source, output = check(prep, targets)
    if tokenizer is not None and not tokenizer.is_file():
        raise FieldError("--tokenizer", str(tokenizer), "a local tokenizer.json file")
    try:  # the job's own rules, here: a tokenizer it cannot read or a separator it lacks fails no job
        load_tokenizer(tokenizer, prep.separator, no_separator=prep.no_separator)
    except DataError as exc:
        field, value = ("--tokenizer", str(tokenizer)) if tokenizer is not None else ("--separator", prep.separator)
        raise FieldError(field, value, "a tokenizer and separator the preparation can use", detail=str(exc)) from None
    s3 = session.client("s3")
    check_objects(s3, prep, targets, source, output)
    tokenizer_uri = upload_tokenizer(s3, targets.data_bucket, tokenizer) if tokenizer is not None else None
    name = job_name()
    session.client("sagemaker").create_processing_job(**processing_job_request(name, prep, targets, tokenizer_uri))
    if no_wait:
        print(name)
        print(f"its manifest: trainctl prepare-data --remote --attach {name} --output {prep.output}", file=sys.stderr)
        return 0
    print(f"processing job {name}: {prep.instance_count} x {prep.instance_type}, waiting", flush=True)
    try:
        return complete(session, name, poll_s=poll_s)
    except KeyboardInterrupt:  # the job goes on without us: say how to finish it
        print(f"\nthe job goes on; its manifest: trainctl prepare-data --remote --attach {name}", file=sys.stderr)
        raise


def prepare_remote_command(
    output: str,
    files: Sequence[str],
    *,
    local_only: Sequence[str] = (),
    tokenizer: Path | None = None,
    instance_count: int = 1,
    instance_type: str | None = None,
    no_wait: bool = False,
    attach: str | None = None,
    stack: str = "TrainingPlatform",
    **options: Any,
) -> int:
    """``trainctl prepare-data --remote``: the platform's targets (the emulator's settings when
    ``AWS_ENDPOINT_URL`` is set, else ``stack``'s outputs), then :func:`prepare_remote`; with ``attach``, a job
    launched before (``--no-wait``): :func:`complete`. ``options``:
    :class:`RemotePreparation`'s preparation fields. Returns the exit status (2: refused input, one line on
    stderr, before any job; 1: AWS refused or failed a call, one line naming the call, its error code and
    message)."""
    import os

    import boto3
    import botocore.exceptions

    from platform_constructs.submitter.runtime.errors import ConfigurationError

    try:
        session = boto3.session.Session(region_name=os.environ.get("AWS_REGION") or None)
        if attach is not None:
            return complete(session, attach, output=output)
        if local_only:
            raise FieldError(local_only[0], "with --remote", "a local preparation only (it reads every input first)")
        if len(files) != 1:
            raise FieldError("input", list(files), "one s3:// prefix of the data bucket")
        if os.environ.get("AWS_ENDPOINT_URL"):
            targets = ProcessingTargets.from_environ(os.environ)
        else:
            from trainctl.sdk import stack_outputs

            targets = ProcessingTargets.from_stack_outputs(stack_outputs(stack, boto_session=session))
        prep = RemotePreparation(
            source=files[0],
            output=output,
            instance_count=instance_count,
            instance_type=instance_type or DEFAULT_INSTANCE_TYPE,
            **options,
        )
        return prepare_remote(prep, targets, session, tokenizer=tokenizer, no_wait=no_wait)
    except (FieldError, LookupError, ConfigurationError) as exc:
        print(f"trainctl prepare-data --remote: {exc}", file=sys.stderr)
        return 2
    except botocore.exceptions.ClientError as exc:  # AccessDenied, a job name that is not one, ...
        error = exc.response.get("Error", {})
        print(
            f"trainctl prepare-data --remote: {exc.operation_name} answered {error.get('Code', 'Unknown')}: "
            f"{error.get('Message', '')}",
            file=sys.stderr,
        )
        return 1
    except botocore.exceptions.BotoCoreError as exc:  # no credentials or region, AWS unreachable
        print(f"trainctl prepare-data --remote: {exc}", file=sys.stderr)
        return 1


__all__ = [
    "ProcessingTargets",
    "RemotePreparation",
    "check",
    "check_objects",
    "complete",
    "finish",
    "job_name",
    "job_tokenizer",
    "merge_manifests",
    "prepare_remote",
    "prepare_remote_command",
    "processing_job_request",
    "upload_tokenizer",
    "wait",
]
