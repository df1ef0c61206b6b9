"""The request's ``mlflow`` and ``tensorboard`` fields: CreateTrainingJob through the emulator (which checks every
request against botocore's model) carries them, and foreign or malformed values are refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("submitter")


def _server(config, account=None, region=None) -> str:
    return f"arn:aws:sagemaker:{region or config.region}:{account or config.account_id}:mlflow-tracking-server/team"


def test_a_job_with_mlflow_and_tensorboard_is_created_with_both(submit, make_request, config, aws) -> None:
    event = make_request(mlflow={"resource_arn": _server(config), "experiment_name": "fp8-study"}, tensorboard={})
    response = submit(event)
    assert response["status"] == "submitted", response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    name = response["training_job_name"]
    assert job["TensorBoardOutputConfig"] == {
        "S3OutputPath": f"s3://{config.output_bucket}/tensorboard/{name}/",
        "LocalPath": "/opt/ml/output/tensorboard",
    }
    assert job["Environment"] == {
        "MLFLOW_TRACKING_URI": _server(config), "MLFLOW_EXPERIMENT_NAME": "fp8-study", "MLFLOW_RUN_NAME": name
    }  # fmt: skip


def test_the_fields_are_fingerprinted(runtime, make_request, config) -> None:
    base = make_request(client_token="t-1")
    on = runtime.request.parse_request({**base, "tensorboard": {}}, config)
    off = runtime.request.parse_request(base, config)
    assert on.fingerprint() != off.fingerprint()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("mlflow", {"resource_arn": "ACCOUNT"}, "mlflow.resource_arn"),
        ("mlflow", {"resource_arn": "REGION"}, "mlflow.resource_arn"),
        (
            "mlflow",
            {"resource_arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-1"},
            "mlflow.resource_arn",
        ),
        ("mlflow", {}, "mlflow.resource_arn"),
        ("mlflow", {"resource_arn": "OWN", "run_name": ""}, "mlflow.run_name"),
        ("mlflow", {"resource_arn": "OWN", "experiment_name": "x" * 257}, "mlflow.experiment_name"),
        ("mlflow", {"resource_arn": "OWN", "tracking_uri": "http://x"}, "mlflow.tracking_uri"),
        ("tensorboard", {"s3_output_path": "s3://someone-elses-bucket/tensorboard/x/"}, "tensorboard.s3_output_path"),
        ("tensorboard", {"s3_output_path": "OUTPUT/training-jobs/x/"}, "tensorboard.s3_output_path"),
        ("tensorboard", {"s3_output_path": "OUTPUT/tensorboard/../x/"}, "tensorboard.s3_output_path"),
        ("tensorboard", {"local_path": "/opt/ml/output/data/tb"}, "tensorboard.local_path"),
        ("tensorboard", {"local_path": "/opt/ml/checkpoints"}, "tensorboard.local_path"),
    ],
)
def test_foreign_or_malformed_values_are_refused_naming_the_field_and_nothing_is_created(
    submit, make_request, config, aws, field, value, named
) -> None:
    arns = {"ACCOUNT": _server(config, account="210987654321"), "REGION": _server(config, region="eu-west-1"),
            "OWN": _server(config)}  # fmt: skip
    value = {k: arns.get(v, v) if isinstance(v, str) else v for k, v in value.items()}
    value = {k: v.replace("OUTPUT", f"s3://{config.output_bucket}") for k, v in value.items()}
    before = len(aws.training_jobs())
    response = submit(make_request(**{field: value}))
    assert response["status"] == "rejected" and response["error"]["code"] == "InvalidRequest", response
    assert response["error"]["field"] == named, response
    assert len(aws.training_jobs()) == before


def test_the_readmes_tracking_example_is_submitted_with_both(submit, config, aws) -> None:
    """The request the README shows under "Experiment tracking" (its ARN is the emulator's account and region)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    example = json.loads(readme.split("### Experiment tracking")[1].split("```json\n")[1].split("```")[0])
    assert example["mlflow"]["resource_arn"] == _server(config)
    response = submit({**example, "client_token": "readme-tracking"})
    assert response["status"] == "submitted", response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["MlflowConfig"] == {"MlflowResourceArn": _server(config), "MlflowExperimentName": "gpt-1b-formats"}
    assert (
        job["TensorBoardOutputConfig"]["S3OutputPath"]
        == f"s3://{config.output_bucket}/tensorboard/{example['job_name']}/"
    )
