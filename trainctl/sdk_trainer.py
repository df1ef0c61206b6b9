"""The SageMaker Python SDK's ``ModelTrainer`` as the platform configures it (:class:`PlatformModelTrainer`).

This module imports the SDK (the extra ``sdk``): :meth:`trainctl.sdk.Platform.model_trainer` imports it once
the SDK is found installed, and makes its trainers. It knows the platform by the methods it calls
(``preflight``, ``training_job``, ``sagemaker_session``, the wire and upload checks), not by import.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import ClientError
from pydantic import PrivateAttr
from sagemaker.core import shapes
from sagemaker.core.resources import TrainingJob
from sagemaker.core.training.configs import Compute, Networking
from sagemaker.core.utils.code_injection.codec import transform
from sagemaker.train import ModelTrainer

_VALIDATE_ROLE = "SAGEMAKER_VALIDATE_ROLE"
_ENV_LOCK = threading.Lock()


class PlatformModelTrainer(ModelTrainer):  # type: ignore[misc]
    """A ``sagemaker.train.ModelTrainer`` configured from the submitter's ``CreateTrainingJob`` parameters.

    Made by :meth:`trainctl.sdk.Platform.model_trainer`. ``train()`` runs the preflight again, attaches to the
    request's job when it exists, and otherwise creates it under the submitter's name with exactly the
    submitter's parameters (checked on the wire; :class:`trainctl.sdk.TrainerChanged`).

    Attributes:
        request: the request it was made from (with its ``client_token``).
        preflight_answer: the submitter's latest dry-run answer.
        create_training_job: the parameters the job is created with (``platform:submitted-by`` =
            :data:`trainctl.sdk.SUBMITTED_BY`; else the submitter's own).
        training_job: the job, after ``train()`` (the SDK's ``TrainingJob``).
    """

    _platform: Any = PrivateAttr(default=None)
    _request: dict[str, Any] = PrivateAttr(default_factory=dict)
    _answer: dict[str, Any] = PrivateAttr(default_factory=dict)
    _params: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def configured(
        cls, platform: Any, request: dict[str, Any], answer: dict[str, Any], params: dict[str, Any]
    ) -> PlatformModelTrainer:
        """A trainer of ``platform`` (a :class:`trainctl.sdk.Platform`) for ``request``, whose preflight
        ``answer`` gave the job's parameters ``params``."""
        with _role_validation(platform.validate_role):
            trainer = cls(sagemaker_session=platform.sagemaker_session, **_fields(params))
        trainer._platform, trainer._request, trainer._answer = platform, request, answer
        trainer._apply(params)
        return trainer

    def _apply(self, params: dict[str, Any]) -> None:
        snake = transform(params, "CreateTrainingJobRequest")
        if snake.get("retry_strategy"):
            self.with_retry_strategy(shapes.RetryStrategy(**snake["retry_strategy"]))
        if snake.get("infra_check_config"):  # given whole: with_infra_check_config(None) would turn the check on
            self.with_infra_check_config(shapes.InfraCheckConfig(**snake["infra_check_config"]))
        definitions = snake["algorithm_specification"].get("metric_definitions") or []
        self.with_metric_definitions([shapes.MetricDefinition(**d) for d in definitions])
        self._params = params

    @property
    def request(self) -> dict[str, Any]:
        return copy.deepcopy(self._request)

    @property
    def preflight_answer(self) -> dict[str, Any]:
        return copy.deepcopy(self._answer)

    @property
    def create_training_job(self) -> dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def training_job(self) -> TrainingJob:
        if self._latest_training_job is None:
            raise RuntimeError("no training job yet: call train() first")
        return self._latest_training_job

    def _create_training_job_args(self, input_data_config: Any = None, boto3: bool = False) -> dict[str, Any]:
        args = super()._create_training_job_args(input_data_config=input_data_config, boto3=boto3)
        name = self._params["TrainingJobName"]
        series = self._params["AlgorithmSpecification"].get("EnableSageMakerMetricsTimeSeries")
        if boto3:
            args["TrainingJobName"] = name
            if series is not None:
                args["AlgorithmSpecification"]["EnableSageMakerMetricsTimeSeries"] = series
        else:
            args["training_job_name"] = name
            if series is not None:
                args["algorithm_specification"].enable_sage_maker_metrics_time_series = series
        return args

    def train(  # type: ignore[override]
        self, input_data_config: Any = None, wait: bool = True, logs: bool = True, dry_run: bool = False
    ) -> None:
        """The SDK's ``train()``, after the submitter's preflight; attaches to the request's job if it exists.

        Raises:
            trainctl.sdk.PlatformRefusal: the submitter refuses the request now (e.g. a ``Conflict``, or no
                capacity left).
            trainctl.sdk.TrainerChanged: the trainer was changed after the platform configured it (nothing is
                created).
        """
        answer = self._platform.preflight(self._request)
        self._answer = answer
        if answer.get("replayed"):
            return self._attach(answer["training_job_name"], wait=wait, logs=logs)
        params = self._platform._create_params(answer)
        if params != self._params:  # the capacity moved (a plan ended, another filled): follow the submitter
            for key, value in _fields(params).items():
                setattr(self, key, value)
            self._apply(params)
        self._platform._refuse_uploads(self, input_data_config)
        if dry_run:
            return super().train(input_data_config=input_data_config, wait=wait, logs=logs, dry_run=True)
        self._platform._expect(params)
        try:
            super().train(input_data_config=input_data_config, wait=wait, logs=logs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUse":
                raise
            # another caller created the name first: the preflight says whether it is this request's job
            answer = self._platform.preflight(self._request)
            self._answer = answer
            if not answer.get("replayed"):
                raise
            return self._attach(answer["training_job_name"], wait=wait, logs=logs)
        finally:
            self._platform._expect(None)
        return None

    def _attach(self, name: str, *, wait: bool, logs: bool) -> None:
        job = self._platform.training_job(name)
        self._latest_training_job = job
        if wait:
            job.wait(logs=logs)


@contextlib.contextmanager
def _role_validation(enabled: bool) -> Iterator[None]:
    """The SDK checks a trainer's role with IAM's policy simulator (``iam:SimulatePrincipalPolicy``) when it
    is made; it asks for actions the platform's execution role is not granted (VPC network interfaces,
    ``cloudwatch:PutMetricData`` in any namespace), so unless the platform was asked to run it
    (:attr:`trainctl.sdk.Platform.validate_role`) the check is switched off with the SDK's own switch
    (``SAGEMAKER_VALIDATE_ROLE=false``) while the trainer is made."""
    if enabled:
        yield
        return
    with _ENV_LOCK:
        before = os.environ.get(_VALIDATE_ROLE)
        os.environ[_VALIDATE_ROLE] = "false"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(_VALIDATE_ROLE, None)
            else:
                os.environ[_VALIDATE_ROLE] = before


def _fields(params: Mapping[str, Any]) -> dict[str, Any]:
    """``ModelTrainer`` keyword arguments from ``CreateTrainingJob`` parameters (botocore's names)."""
    snake = transform(dict(params), "CreateTrainingJobRequest")
    algorithm = snake["algorithm_specification"]
    resource = dict(snake["resource_config"])
    if snake.get("enable_managed_spot_training") is not None:
        resource["enable_managed_spot_training"] = snake["enable_managed_spot_training"]
    fields: dict[str, Any] = {
        "training_image": algorithm["training_image"],
        "training_input_mode": algorithm.get("training_input_mode"),
        "role": snake["role_arn"],
        "base_job_name": params["TrainingJobName"],
        "hyperparameters": dict(snake.get("hyper_parameters") or {}),
        "environment": dict(snake.get("environment") or {}),
        "output_data_config": shapes.OutputDataConfig(**snake["output_data_config"]),
        "compute": Compute(**resource),
        "stopping_condition": shapes.StoppingCondition(**snake["stopping_condition"]),
        "tags": [shapes.Tag(**t) for t in snake.get("tags") or []],
        "input_data_config": [shapes.Channel(**c) for c in snake.get("input_data_config") or []] or None,
        "checkpoint_config": (
            shapes.CheckpointConfig(**snake["checkpoint_config"]) if snake.get("checkpoint_config") else None
        ),
    }
    # VPC mode (VpcConfig) and the request's network options: without them the SDK would send a job outside the
    # platform's network, which the wire check refuses (and the submitter's grant would deny)
    vpc = snake.get("vpc_config") or {}
    isolation = snake.get("enable_network_isolation")
    encryption = snake.get("enable_inter_container_traffic_encryption")
    if vpc or isolation is not None or encryption is not None:
        fields["networking"] = Networking(
            subnets=vpc.get("subnets"),
            security_group_ids=vpc.get("security_group_ids"),
            enable_network_isolation=isolation,
            enable_inter_container_traffic_encryption=encryption,
        )
    return fields


__all__ = ["PlatformModelTrainer"]
