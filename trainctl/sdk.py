"""SageMaker Python SDK users: a trainer the platform configured, with the submitter's checks, in one call.

Notebook users launch training with the SageMaker Python SDK (v3: ``sagemaker.train.ModelTrainer``).
:class:`Platform` meets them there without giving up the submitter's guarantees:

* :meth:`Platform.model_trainer` runs the submitter's own preflight first: the deployed function
  (or, against the emulator, its handler in this process) answers the request as a dry run
  (validation, the planner's memory verdict, the capacity choice, the job name; nothing is
  created). A refusal raises :class:`PlatformRefusal` with the submitter's code, field and
  details. The answer's ``create_training_job`` (:func:`platform_constructs.submitter.runtime.job.build_create_training_job`,
  the one home of the request-to-job mapping) is turned into a :class:`~trainctl.sdk_trainer.PlatformModelTrainer`:
  image, role, output and checkpoint locations, ``MetricDefinitions``, input channels, tags,
  capacity (``Compute.training_plan_arn`` or managed spot), stopping condition and retry
  strategy, each read from those parameters, none restated here.
* :meth:`~trainctl.sdk_trainer.PlatformModelTrainer.train` runs the preflight again right before the SDK creates the
  job, so a job the same ``client_token`` (or ``job_name``) already made is attached to, never
  created twice (``replayed`` in the submitter's words); the name is the submitter's
  (``job-`` + 24 hex of SHA-256(token)). What the SDK sends is checked on the wire
  (botocore's ``provide-client-params`` event of ``CreateTrainingJob``) against the submitter's
  parameters: a trainer changed after the platform configured it (another channel, image,
  instance type, hyperparameter) raises :class:`TrainerChanged` naming the field, and nothing is
  created.
* :meth:`Platform.submit` sends the request through the submitter itself (all its rules,
  including ``capacity: auto``'s fallback on a quota refusal) and returns the SDK's view of the
  job (``sagemaker.core.resources.TrainingJob``) to follow its status, logs and metrics.

Where the platform is: :meth:`Platform.from_stack` reads the deployed stack's outputs
(CloudFormation ``DescribeStacks``: ``SubmitterFunctionName``) and invokes that function
(``lambda:InvokeFunction``: ``JobSubmitter.grant_submit``); :meth:`Platform.from_env` reads the
emulator's environment (``trainctl local-aws --env-file``, :attr:`devtools.local_aws.client.LocalAws.env`),
whose submitter runs in this process and only against its ``AWS_ENDPOINT_URL``.

``capacity: auto`` through the SDK creates on the capacity the preflight chose first; a quota
refusal then comes back as the SDK's ``ClientError`` (``ResourceLimitExceeded``), where the
submitter would have tried the next capacity: use :meth:`Platform.submit` for the fallback. The
SDK-created job carries the submitter's bookkeeping tags (request fingerprint, client-token
digest, capacity type) and ``platform:submitted-by`` = :data:`SUBMITTED_BY`; the submitter
answers a later request with the same token from that job. Only the submitter writes the
client-token records (the bucket policy allows no one else); the job's tags and name carry the
token for the SDK path.

The SDK is the optional extra ``sdk`` (``pip install .[sdk]``; pinned in ``pyproject.toml`` and
``requirements-sdk.txt``). It imports slowly (seconds): this module's functions import it when they run
(the trainer class is :mod:`trainctl.sdk_trainer`'s), never ``trainctl``'s start-up; without it they raise
:class:`SdkUnavailable`.
The Lambda package and the trainer image never include it (``tests/sdk/test_packaging.py``).
"""

from __future__ import annotations

import copy
import os
import shlex
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.core.resources import TrainingJob
    from sagemaker.train import ModelTrainer

SDK_EXTRA = "sdk"
"""The project's optional extra that installs the SageMaker Python SDK (``pip install .[sdk]``)."""

DEFAULT_STACK_NAME = "TrainingPlatform"
"""The stack's default name (``cdk.json`` context ``stackName``)."""

SUBMITTER_FUNCTION_OUTPUT = "SubmitterFunctionName"
"""The stack output naming the job-submitter function (``stacks/training_platform_stack.py``)."""

SUBMITTED_BY = "sagemaker-sdk"
"""``platform:submitted-by`` of the jobs the SDK creates (the submitter's own say ``job-submitter``)."""

_CREATE = "CreateTrainingJob"
_CHECK_EVENT = f"provide-client-params.sagemaker.{_CREATE}"


class SdkUnavailable(ImportError):
    """The SageMaker Python SDK (the extra ``sdk``) is not installed."""


class PlatformRefusal(Exception):
    """The submitter refused the request (its answer ``{"status": "rejected", "error": {...}}``).

    Attributes:
        code: the refusal code (``InvalidRequest``, ``PredictedOutOfMemory``, ``NoCapacity``,
            ``QuotaExceeded``, ``Conflict``, ...: ``settings.ERROR_CODES`` of the runtime).
        field: the request field at fault, or ``None``.
        details: the refusal's details (e.g. the planner's estimate and the change that would fit).
        response: the submitter's whole answer.
    """

    def __init__(self, response: Mapping[str, Any]) -> None:
        error = dict(response.get("error") or {})
        self.code: str = str(error.get("code", "Unknown"))
        self.field: str | None = error.get("field")
        self.details: dict[str, Any] = dict(error.get("details") or {})
        self.response: dict[str, Any] = dict(response)
        self.message: str = str(error.get("message", ""))
        where = f" ({self.field})" if self.field else ""
        super().__init__(f"{self.code}{where}: {self.message}")


class TrainerChanged(ValueError):
    """The SDK was about to send a ``CreateTrainingJob`` other than the submitter's; nothing was sent.

    Attributes:
        field: the first parameter that differs (``CreateTrainingJob``'s name, e.g. ``InputDataConfig``).
    """

    def __init__(self, field: str, sent: Any, expected: Any) -> None:
        self.field = field
        super().__init__(
            f"{field}: the SDK would send {sent!r}, the platform configured {expected!r}; change the request "
            "(and call Platform.model_trainer again), not the trainer"
        )


def _require_sdk() -> None:
    try:
        import sagemaker.train  # noqa: F401
    except ImportError as exc:
        raise SdkUnavailable(
            f"the SageMaker Python SDK is not installed ({exc}); install the extra: pip install '.[{SDK_EXTRA}]'"
        ) from None


# --- where the platform is -------------------------------------------------------------------------


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The variables of an env file written by ``trainctl local-aws --env-file`` (``export NAME=value`` lines).

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not ``export NAME=value`` (names the line).
    """
    env: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:  # shlex's "No closing quotation", "No escaped character"
            raise ValueError(f"{path}:{number}: expected `export NAME=value`, got {line!r} ({exc})") from None
        if len(words) != 2 or words[0] != "export" or "=" not in words[1]:
            raise ValueError(f"{path}:{number}: expected `export NAME=value`, got {line!r}")
        name, value = words[1].split("=", 1)
        env[name] = value
    return env


def stack_outputs(stack_name: str, *, boto_session: Any) -> dict[str, str]:
    """``OutputKey -> OutputValue`` of a deployed stack (CloudFormation ``DescribeStacks``).

    Raises:
        ValueError: ``stack_name`` is not a non-empty string (``DescribeStacks`` without a name
            describes every stack, and the first one's outputs would be read).
        LookupError: no such stack in the session's account and region.
        trainctl.submitter_client.SubmitError: no region or credentials.
    """
    import botocore.exceptions

    from trainctl.submitter_client import SubmitError

    if not isinstance(stack_name, str) or not stack_name.strip():
        raise ValueError(f"stack_name: got {stack_name!r}, expected the platform stack's name (cdk.json stackName)")
    try:
        client = boto_session.client("cloudformation")
        stacks = client.describe_stacks(StackName=stack_name)["Stacks"]
    except (botocore.exceptions.NoRegionError, botocore.exceptions.NoCredentialsError) as exc:
        raise SubmitError(
            f"cannot read stack {stack_name!r}: {exc}; pass region= (or set AWS_REGION) and configure credentials, "
            "or pass boto_session=",
            may_have_run=False,
            unavailable=True,
        ) from None
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationError":
            raise LookupError(
                f"stack_name: no stack {stack_name!r} in {boto_session.region_name} "
                f"({exc.response['Error'].get('Message', '')}); expected the platform's stack (cdk.json stackName)"
            ) from None
        raise
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs") or []}


class _EndpointSession:
    """Builds a boto3 session whose clients all use one endpoint (the emulator's), without touching
    ``os.environ``. Every client is bound to it, even one made with an explicit ``endpoint_url`` (the
    SDK names STS's regional endpoint when it looks up the account): this session never reaches AWS."""

    @staticmethod
    def create(env: Mapping[str, str]) -> Any:
        import boto3

        endpoint = env["AWS_ENDPOINT_URL"]

        def bound(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if len(args) >= 6:  # endpoint_url is the sixth parameter of client() and resource()
                args = (*args[:5], endpoint, *args[6:])
            else:
                kwargs["endpoint_url"] = endpoint
            return args, kwargs

        class EmulatorSession(boto3.session.Session):
            def client(self, *args: Any, **kwargs: Any) -> Any:
                args, kwargs = bound(args, kwargs)
                return super().client(*args, **kwargs)

            def resource(self, *args: Any, **kwargs: Any) -> Any:
                args, kwargs = bound(args, kwargs)
                return super().resource(*args, **kwargs)

        return EmulatorSession(
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=env.get("AWS_SESSION_TOKEN"),
            region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        )


# --- the platform ----------------------------------------------------------------------------------


class Platform:
    """The deployed platform (or the emulator) as the SageMaker Python SDK sees it.

    Build one with :meth:`from_stack` or :meth:`from_env`.

    Args:
        submit: sends one request to the submitter, returns its answer (a dict).
        boto_session: the boto3 session the SDK's clients come from (account, region, endpoint).
        where: words naming the submitter, for messages.
        telemetry: let the SDK send its usage telemetry to AWS (the SDK's default). ``False``
            sets the SDK's ``TelemetryOptOut`` for this platform's sessions.
        validate_role: let the SDK check the execution role's permissions with IAM's policy simulator when a
            trainer is made. Off by default (the SDK's default is on): the check asks for what the platform's
            execution role is deliberately not granted (the VPC network-interface actions and
            ``cloudwatch:PutMetricData`` outside SageMaker's namespace), so for a caller allowed
            ``iam:SimulatePrincipalPolicy`` it raises ``RoleValidationError`` on the stack's own role (shown
            against the emulator, whose simulator answers from the template's policies); the role is the one the
            submitter's preflight names, deployed with the stack.
    """

    def __init__(
        self,
        *,
        submit: Callable[[dict[str, Any]], dict[str, Any]],
        boto_session: Any,
        where: str,
        telemetry: bool,
        validate_role: bool = False,
    ) -> None:
        self._submit = submit
        self.boto_session = boto_session
        self.where = where
        self.telemetry = telemetry
        self.validate_role = validate_role
        self._session: Session | None = None
        self._expected = threading.local()
        self._armed = False
        # clients copy their session's handlers when they are made: registered before any client exists
        boto_session.events.register(_CHECK_EVENT, self._check_sent, unique_id=f"trainctl-sdk-{id(self)}")

    @classmethod
    def from_stack(
        cls,
        stack_name: str = DEFAULT_STACK_NAME,
        *,
        boto_session: Any = None,
        region: str | None = None,
        telemetry: bool = True,
        validate_role: bool = False,
    ) -> Platform:
        """The platform a deployed stack runs: its submitter function from the stack's outputs.

        Args:
            stack_name: the CloudFormation stack (``cdk.json`` ``stackName``; default ``TrainingPlatform``).
            boto_session: credentials, account and region (default: boto3's chain, ``region``).
            region: the region when ``boto_session`` is not given (default: ``AWS_REGION``, then botocore's).
            telemetry, validate_role: see :class:`Platform` (telemetry: the SDK's default, on; validate_role: off).

        Raises:
            ValueError: ``stack_name`` is empty.
            LookupError: no such stack, or it has no :data:`SUBMITTER_FUNCTION_OUTPUT` output.
            trainctl.submitter_client.SubmitError: no region or credentials.
        """
        import boto3

        from trainctl.submitter_client import invoke_function, lambda_client

        if boto_session is None:  # botocore reads AWS_DEFAULT_REGION only; the other SDKs read AWS_REGION first
            boto_session = boto3.session.Session(region_name=region or os.environ.get("AWS_REGION") or None)
        outputs = stack_outputs(stack_name, boto_session=boto_session)
        function = outputs.get(SUBMITTER_FUNCTION_OUTPUT)
        if not function:
            raise LookupError(
                f"stack_name: stack {stack_name!r} has no {SUBMITTER_FUNCTION_OUTPUT} output "
                f"(outputs: {', '.join(sorted(outputs)) or 'none'}); expected the training platform's stack"
            )
        client = lambda_client(function, region=boto_session.region_name, session=boto_session)

        def submit(request: dict[str, Any]) -> dict[str, Any]:
            return invoke_function(function, request, client=client)

        return cls(
            submit=submit,
            boto_session=boto_session,
            where=f"function {function}",
            telemetry=telemetry,
            validate_role=validate_role,
        )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | str | os.PathLike[str] | None = None, *, telemetry: bool = False
    ) -> Platform:
        """The emulator's platform (``trainctl local-aws``): its submitter's handler runs in this process.

        Args:
            env: the emulator's environment: :attr:`devtools.local_aws.client.LocalAws.env`, the path of
                the file ``trainctl local-aws --env-file`` wrote, or ``None`` for ``os.environ``
                (after ``source .demo/aws.env``).
            telemetry: the SDK's usage telemetry (default off: the emulator is not AWS).

        Raises:
            trainctl.submitter_client.LocalEndpointRequired: no ``AWS_ENDPOINT_URL`` (this never
                runs the submitter against real AWS).
            ConfigurationError: a submitter variable is missing (the runtime's, naming it).
        """
        from platform_constructs.submitter.runtime.config import SubmitterConfig
        from trainctl.submitter_client import require_local_endpoint, submit_local

        if env is None:
            variables = dict(os.environ)
        elif isinstance(env, Mapping):
            variables = dict(env)
        else:
            variables = read_env_file(env)
        endpoint = require_local_endpoint(variables)
        SubmitterConfig.from_environ(variables)  # a missing setting fails here, naming it

        def submit(request: dict[str, Any]) -> dict[str, Any]:
            return submit_local(request, variables)

        return cls(
            submit=submit,
            boto_session=_EndpointSession.create(variables),
            where=f"the emulator's submitter ({endpoint})",
            telemetry=telemetry,
        )

    # -- the SDK's session ---------------------------------------------------------------------------

    @property
    def sagemaker_session(self) -> Session:
        """The SDK's ``Session`` over :attr:`boto_session` (created once)."""
        _require_sdk()
        if self._session is None:
            from sagemaker.core.helper.session_helper import Session

            config = None
            if not self.telemetry:
                config = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
            self._session = Session(boto_session=self.boto_session, sagemaker_config=config)
        return self._session

    def _expect(self, params: dict[str, Any] | None) -> None:
        """What this thread's next ``CreateTrainingJob`` through :attr:`boto_session` must send (``None``: unchecked)."""
        if params is not None and not self._armed:
            from sagemaker.core.resources import Base

            # the client the SDK creates jobs with (cached per session); made before this platform, it lacks the handler
            client = Base.get_sagemaker_client(session=self.boto_session, region_name=None, service_name="sagemaker")
            client.meta.events.register(_CHECK_EVENT, self._check_sent, unique_id=f"trainctl-sdk-{id(self)}")
            self._armed = True
        self._expected.params = params

    def _check_sent(self, params: dict[str, Any], **_: Any) -> None:
        """botocore's ``provide-client-params`` handler of ``CreateTrainingJob``: see :func:`check_sent`."""
        expected = getattr(self._expected, "params", None)
        if expected is not None:
            check_sent(params, expected)

    def _refuse_uploads(self, trainer: ModelTrainer, input_data_config: Any) -> None:
        """The SDK uploads ``source_code`` (with its ``distributed`` drivers) and channels given as local
        paths to its default bucket before it sends ``CreateTrainingJob``, so the wire check would come
        after those writes: ``trainer`` raises :class:`TrainerChanged` here, before anything is written.
        A ``distributed`` config alone the SDK drops without a word; it is refused too (the platform's
        trainer image launches its own processes, one per GPU).
        """
        if trainer.source_code is not None or trainer.distributed is not None:
            what = "source_code" if trainer.source_code is not None else "distributed"
            raise TrainerChanged(
                "AlgorithmSpecification",
                f"the SDK's own entry point for {what} (its code uploaded to its default bucket first)",
                trainer.create_training_job["AlgorithmSpecification"],
            )
        for channel in [*(trainer.input_data_config or []), *(input_data_config or [])]:
            source = getattr(channel, "data_source", None)
            if isinstance(source, str) and not source.startswith("s3://"):
                raise TrainerChanged(
                    "InputDataConfig",
                    f"channel {channel.channel_name!r} from the local path {source!r} (uploaded to the SDK's "
                    "default bucket first)",
                    trainer.create_training_job.get("InputDataConfig"),
                )

    def _create_params(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The ``CreateTrainingJob`` parameters of a trainer for ``answer``: the submitter's with
        ``platform:submitted-by`` = :data:`SUBMITTED_BY`, or for a replay the existing job's
        (``DescribeTrainingJob`` and its tags)."""
        from platform_constructs.submitter.runtime.training_job import TAG_SUBMITTER

        if not answer.get("replayed"):
            params = copy.deepcopy(dict(answer["create_training_job"]))
            params["Tags"] = [
                {"Key": t["Key"], "Value": SUBMITTED_BY if t["Key"] == TAG_SUBMITTER else t["Value"]}
                for t in params["Tags"]
            ]
            return params
        sagemaker = self.boto_session.client("sagemaker")
        described = sagemaker.describe_training_job(TrainingJobName=answer["training_job_name"])
        members = sagemaker.meta.service_model.operation_model(_CREATE).input_shape.members
        params = {k: v for k, v in described.items() if k in members}
        params["Tags"] = sagemaker.list_tags(ResourceArn=described["TrainingJobArn"]).get("Tags") or []
        return params

    # -- the submitter --------------------------------------------------------------------------------

    def preflight(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The submitter's answer to ``request`` as a dry run (nothing is created).

        Returns:
            ``{"status": "validated", "training_job_name", "capacity", "estimate", "replayed",
            "create_training_job"?, "training_job_arn"?}``: ``create_training_job`` when a job would
            be created; ``replayed`` with the ARN when the request's job exists already.

        Raises:
            PlatformRefusal: the submitter refused the request.
            trainctl.submitter_client.SubmitError: no answer from the submitter.
        """
        answer = self._submit({**_plain(request), "dry_run": True})
        if answer.get("status") == "rejected":
            raise PlatformRefusal(answer)
        if answer.get("status") != "validated":
            raise RuntimeError(f"{self.where} answered a dry run with status {answer.get('status')!r}: {answer}")
        return answer

    def model_trainer(self, request: Mapping[str, Any]) -> ModelTrainer:
        """A ``ModelTrainer`` (a :class:`trainctl.sdk_trainer.PlatformModelTrainer`) configured as the submitter would create ``request``'s job.

        ``request`` is the submitter's request (``runtime/request.py``'s table; README "Request"):
        ``client_token`` or ``job_name`` make it idempotent. A request with neither gets a
        generated ``client_token`` (``trainctl.submitter_client.with_client_token``), kept on the
        trainer (its ``request``), so calling ``train()`` twice attaches to the
        first job. A run (a request with ``run``) is started through the submitter only
        (:meth:`submit`): the submitter writes the run's record that its continuation reads, which a
        job the SDK created would lack.

        Raises:
            PlatformRefusal: the submitter refused it (code, field, details), or ``InvalidRequest`` on
                ``run`` for a run.
            SdkUnavailable: the extra ``sdk`` is not installed.
        """
        from trainctl.submitter_client import with_client_token

        _require_sdk()
        from trainctl.sdk_trainer import PlatformModelTrainer

        if _plain(request).get("dry_run"):
            raise ValueError("dry_run: the trainer is made from a dry run already; expected no dry_run field")
        if _plain(request).get("run") is not None:
            raise PlatformRefusal(
                {
                    "status": "rejected",
                    "error": {
                        "code": "InvalidRequest",
                        "field": "run",
                        "message": "run: a run is started through the submitter, which keeps its record for the "
                        "continuation: use Platform.submit(request); expected no run in a ModelTrainer's request",
                    },
                }
            )
        sent, _ = with_client_token(_plain(request))
        answer = self.preflight(sent)
        return PlatformModelTrainer.configured(self, sent, answer, self._create_params(answer))

    def train(self, request: Mapping[str, Any], *, wait: bool = True, logs: bool = False) -> TrainingJob:
        """``model_trainer(request).train(wait=wait, logs=logs)``; returns the job (the SDK's ``TrainingJob``)."""
        trainer = self.model_trainer(request)
        trainer.train(wait=wait, logs=logs)
        return trainer.training_job

    def submit(self, request: Mapping[str, Any], *, wait: bool = False, logs: bool = False) -> TrainingJob:
        """Send ``request`` through the submitter (which creates the job) and return the SDK's view of it.

        Raises:
            PlatformRefusal: the submitter refused it.
            trainctl.submitter_client.SubmitError: no answer (then retry with the same ``client_token``).
        """
        from trainctl.submitter_client import with_client_token

        sent, _ = with_client_token(_plain(request))
        answer = self._submit(sent)
        if answer.get("status") == "rejected":
            raise PlatformRefusal(answer)
        if answer.get("status") != "submitted":
            raise RuntimeError(f"{self.where} answered with status {answer.get('status')!r}: {answer}")
        job = self.training_job(answer["training_job_name"])
        if wait:
            job.wait(logs=logs)
        return job

    def continue_run(
        self,
        run_id: str,
        *,
        client_token: str | None = None,
        max_segments: int | None = None,
        deadline: str | None = None,
        max_instance_hours: float | None = None,
        min_segment_minutes: float | None = None,
    ) -> dict[str, Any]:
        """Continue the run ``run_id``, which ended ``budget-*``, ``stopped`` or ``no-progress``, from its newest
        complete checkpoint (the job API's ``continue_run``). Each budget argument given replaces the run's
        (``max_segments`` and ``max_instance_hours`` are the run's totals; ``deadline`` ISO 8601 with a time zone).

        Args:
            client_token: the continuation's idempotency key (default: a generated one, in the answer's
                ``client_token``): a retry with it answers the same segment.

        Returns:
            ``{"status": "continued", "run_id", "segment", "training_job_name", "training_job_arn", "capacity",
            "budget", "previous": {"decision", "reason"}, "replayed", "client_token"}``.

        Raises:
            PlatformRefusal: refused (``Conflict``: the run is active or ended finished / failed; ``InvalidRequest``
                naming a budget field that leaves the next segment too little; the segment's own refusal).
            trainctl.submitter_client.SubmitError: no answer (then retry with the same ``client_token``).
        """
        import uuid

        from trainctl.submitter_client import GENERATED_TOKEN_PREFIX

        token = client_token or f"{GENERATED_TOKEN_PREFIX}{uuid.uuid4()}"
        budget = {
            "max_segments": max_segments, "deadline": deadline, "max_instance_hours": max_instance_hours,
            "min_segment_minutes": min_segment_minutes,
        }  # fmt: skip
        request = {"action": "continue_run", "run_id": run_id, "client_token": token}
        request.update({key: value for key, value in budget.items() if value is not None})
        answer = self._submit(request)
        if answer.get("status") == "rejected":
            raise PlatformRefusal(answer)
        if answer.get("status") != "continued":
            raise RuntimeError(f"{self.where} answered continue_run with status {answer.get('status')!r}: {answer}")
        return {**answer, "client_token": token}

    def training_job(self, name: str) -> TrainingJob:
        """The SDK's view of the training job ``name`` (``TrainingJob.get``)."""
        _require_sdk()
        from sagemaker.core.resources import TrainingJob

        return TrainingJob.get(training_job_name=name, session=self.boto_session, region=self.boto_session.region_name)


def _plain(request: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(request, Mapping):
        raise TypeError(
            f"request: expected a JSON object (a dict) of the submitter's fields, got {type(request).__name__}"
        )
    return copy.deepcopy(dict(request))


def check_sent(sent: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """The ``CreateTrainingJob`` parameters the SDK sends must be ``expected`` (the submitter's).

    Parameters sent empty (``{}``, ``[]``, ``None``) count as absent; tags compare as a mapping.

    Raises:
        TrainerChanged: naming the first parameter (in name order) that differs.
    """
    present = {k: v for k, v in sent.items() if v not in ({}, [], None)}
    for key in sorted(set(present) | set(expected)):
        if _normal(present.get(key)) != _normal(expected.get(key)):
            raise TrainerChanged(key, present.get(key), expected.get(key))


def _normal(value: Any) -> Any:
    """Tags compare as a mapping (SageMaker keeps no order); other values as they are."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and set(v) == {"Key", "Value"} for v in value):
        return {v["Key"]: v["Value"] for v in value}
    return value


__all__ = [
    "DEFAULT_STACK_NAME",
    "SDK_EXTRA",
    "SUBMITTED_BY",
    "Platform",
    "PlatformRefusal",
    "SdkUnavailable",
    "TrainerChanged",
    "check_sent",
    "read_env_file",
    "stack_outputs",
]
