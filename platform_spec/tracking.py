"""Experiment tracking: where a job's metrics go beside its log lines (one home for the submitter and the trainer).

Two optional targets of a request, each a ``CreateTrainingJob`` structure the submitter fills in:

* **TensorBoard** (``TensorBoardOutputConfig``): the trainer writes event files to ``LocalPath`` and SageMaker
  uploads that folder to ``S3OutputPath`` while the job runs. SageMaker tells the container the folder in
  ``/opt/ml/input/config/tensorboardoutputconfig.json`` (``{"LocalPath": ...}``), the file the SageMaker Debugger
  library reads (sagemaker-debugger's ``docs/api.md``, ``TENSORBOARD_CONFIG_FILE_PATH``); ``LocalPath`` defaults
  to ``/opt/ml/output/tensorboard`` (SageMaker API Reference, ``TensorBoardOutputConfig``). The platform's
  ``S3OutputPath`` lies under :data:`TENSORBOARD_OUTPUT_PREFIX` of the output bucket, one folder per job, so
  ``tensorboard --logdir s3://<output bucket>/tensorboard/`` compares every job's curves.
* **MLflow** (``MlflowConfig``, SageMaker managed MLflow): the SageMaker API Reference (``MlflowConfig``,
  ``CreateTrainingJob``) does not say which variables, if any, SageMaker sets in the container for it, so the
  submitter sets the MLflow client's own variables (:data:`MLFLOW_ENV`) in the job's ``Environment`` itself;
  rank 0 of the trainer logs every metric line to that tracking server with the ``mlflow`` client (an ARN
  tracking URI needs the ``sagemaker-mlflow`` plugin in the image).

Pure: standard library only.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TENSORBOARD_LOCAL_PATH",
    "MLFLOW_ENV",
    "MLFLOW_EXPERIMENT_ENV",
    "MLFLOW_LOGGING_ACTIONS",
    "MLFLOW_RUN_NAME_ENV",
    "MLFLOW_TRACKING_URI_ENV",
    "TENSORBOARD_CONFIG_FILE",
    "TENSORBOARD_OUTPUT_PREFIX",
]

TENSORBOARD_CONFIG_FILE = "tensorboardoutputconfig.json"
"""The file in ``<base>/input/config/`` where SageMaker names ``TensorBoardOutputConfig.LocalPath``."""
DEFAULT_TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"
"""``TensorBoardOutputConfig.LocalPath`` when the request names none (SageMaker's own default)."""
TENSORBOARD_OUTPUT_PREFIX = "tensorboard/"
"""Key prefix of the output bucket that TensorBoard output goes under (``s3://<output bucket>/tensorboard/<job>/``
by default); the execution role may write there and nowhere else in that bucket but its job output."""

MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
"""The MLflow client's tracking URI variable (``mlflow.environment_variables``): the tracking server's ARN."""
MLFLOW_EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
"""The MLflow client's experiment-name variable (``mlflow.environment_variables``)."""
MLFLOW_RUN_NAME_ENV = "MLFLOW_RUN_NAME"
"""The run name the trainer gives its MLflow run (the platform's variable; the client has none)."""
MLFLOW_ENV = (MLFLOW_TRACKING_URI_ENV, MLFLOW_EXPERIMENT_ENV, MLFLOW_RUN_NAME_ENV)
"""The variables, in the order of ``MlflowConfig``'s members (resource ARN, experiment name, run name)."""

MLFLOW_LOGGING_ACTIONS = (
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:GetRun",
    "sagemaker-mlflow:LogBatch",
    "sagemaker-mlflow:LogMetric",
    "sagemaker-mlflow:LogParam",
    "sagemaker-mlflow:SetTag",
    "sagemaker-mlflow:UpdateRun",
)
"""What the trainer's MLflow client calls on the tracking server (``set_experiment``: get by name, else create;
``start_run``: create and read the run, its tags; ``log_metrics``/``log_params``: log batch, metric, param;
``end_run``: update run), as actions of the Service Authorization Reference's ``sagemaker-mlflow`` service, all on
its ``mlflow-tracking-server`` resource type (none has a condition key or dependent action beyond
``aws:ResourceTag``; ``sagemaker:CreateTrainingJob`` has none for ``MlflowConfig``)."""
