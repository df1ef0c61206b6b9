"""The SageMaker Python SDK as a peer client of the platform (``trainctl.sdk``), against the embedded AWS.

The real SDK (``sagemaker.train.ModelTrainer``, pinned by the extra ``sdk``) creates the jobs; the
emulator checks every request against botocore's model and records it. A trainer is configured from
the submitter's own dry-run answer, so the SDK's job equals the submitter's for the same request;
refusals raise with the submitter's code; retries attach to the first job; a trainer changed after
it was configured sends nothing; the trainer's container contract reads what the SDK writes.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import DUMMY_CREDENTIALS
from platform_constructs.submitter.runtime.training_job import (
    TAG_CLIENT_TOKEN_SHA256,
    TAG_REQUEST_SHA256,
    TAG_SUBMITTER,
)
from trainctl.sdk import SUBMITTED_BY, Platform, PlatformRefusal, TrainerChanged
from trainctl.submitter_client import submit_local

pytestmark = pytest.mark.xdist_group("sdk")

REPO = Path(__file__).resolve().parents[2]


def _created(aws: LocalAws, name: str) -> list[dict[str, Any]]:
    """The ``CreateTrainingJob`` requests the emulator received for ``name``."""
    return [c["params"] for c in aws.calls("CreateTrainingJob") if c["params"].get("TrainingJobName") == name]


def _jobs(aws: LocalAws) -> set[str]:
    return {j["name"] for j in aws.training_jobs()}


def _tags(aws: LocalAws, name: str) -> dict[str, str]:
    sagemaker = aws.client("sagemaker")
    arn = sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    return {t["Key"]: t["Value"] for t in sagemaker.list_tags(ResourceArn=arn)["Tags"]}


# --- 1. the trainer is the submitter's job ------------------------------------------------------------


def test_the_sdk_job_equals_the_submitters_job_for_the_same_request(aws, platform) -> None:
    # the guide's request on the active plan, with a train channel under the data bucket
    base = json.loads((REPO / "examples" / "guide-default-request.json").read_text())
    base.pop("job_name", None)
    base.update(capacity="training-plan", inputs={"train": "datasets/guide/train/"})
    via_sdk = platform.train({**base, "client_token": f"sdk-{uuid.uuid4()}"}, wait=False)
    via_submitter = submit_local({**base, "client_token": f"fn-{uuid.uuid4()}"}, aws.env)
    assert via_submitter["status"] == "submitted", via_submitter

    sdk = aws.describe_training_job(via_sdk.training_job_name)
    fn = aws.describe_training_job(via_submitter["training_job_name"])
    plan = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p6-b200-active"
    assert sdk["ResourceConfig"]["TrainingPlanArn"] == fn["ResourceConfig"]["TrainingPlanArn"] == plan
    for key in ("AlgorithmSpecification", "RoleArn", "InputDataConfig", "StoppingCondition", "RetryStrategy",
                "HyperParameters", "OutputDataConfig", "ResourceConfig"):  # fmt: skip
        assert sdk[key] == fn[key], key
    metric_names = [d["Name"] for d in sdk["AlgorithmSpecification"]["MetricDefinitions"]]
    assert "train:loss" in metric_names and sdk["AlgorithmSpecification"]["TrainingImage"].endswith("trainer:local")
    assert sdk["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == (
        f"s3://{aws.resources['data_bucket']}/datasets/guide/train/"
    )
    # one checkpoint prefix per job, the same layout
    for described in (sdk, fn):
        assert described["CheckpointConfig"] == {
            "S3Uri": f"s3://{aws.resources['checkpoint_bucket']}/checkpoints/{described['TrainingJobName']}/",
            "LocalPath": "/opt/ml/checkpoints",
        }
    # the same request (one fingerprint); the token, and who created it, differ
    sdk_tags, fn_tags = _tags(aws, sdk["TrainingJobName"]), _tags(aws, fn["TrainingJobName"])
    assert sdk_tags[TAG_REQUEST_SHA256] == fn_tags[TAG_REQUEST_SHA256]
    assert (sdk_tags[TAG_SUBMITTER], fn_tags[TAG_SUBMITTER]) == (SUBMITTED_BY, "job-submitter")
    mine = {TAG_CLIENT_TOKEN_SHA256, TAG_SUBMITTER}
    assert {k: v for k, v in sdk_tags.items() if k not in mine} == {k: v for k, v in fn_tags.items() if k not in mine}


def test_what_the_sdk_sends_is_the_submitters_request_and_passes_botocores_validation(aws, platform, tiny) -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    trainer = platform.model_trainer(tiny)
    expected = trainer.create_training_job
    trainer.train(wait=False, logs=False)
    (sent,) = _created(aws, expected["TrainingJobName"])
    assert sent == expected  # every parameter, as the submitter builds it (only platform:submitted-by is the SDK's)
    model = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(sent, model.operation_model("CreateTrainingJob").input_shape)
    assert not report.has_errors(), report.generate_report()
    assert trainer.training_job.training_job_status == "InProgress"


def test_the_network_options_and_a_vpc_config_are_sent_by_the_sdk_as_the_submitter_builds_them(
    aws, platform, tiny
) -> None:
    """``network_isolation`` and ``inter_container_encryption`` reach the SDK's job (its ``Networking``), ``infra_check``
    its ``InfraCheckConfig``, and so does
    VPC mode's ``VpcConfig``: without them the wire check would refuse the trainer, and in a VPC deployment the SDK
    would create the job outside the platform's network."""
    options = {"network_isolation": True, "inter_container_encryption": True, "infra_check": True}
    trainer = platform.model_trainer({**tiny, **options})
    expected = trainer.create_training_job
    assert expected["EnableNetworkIsolation"] is True and expected["EnableInterContainerTrafficEncryption"] is True
    assert expected["InfraCheckConfig"] == {"EnableInfraCheck": True}  # SageMaker's health check, on request
    trainer.train(wait=False, logs=False)
    (sent,) = _created(aws, expected["TrainingJobName"])
    assert sent == expected

    from trainctl.sdk_trainer import PlatformModelTrainer

    vpc = {"Subnets": ["subnet-0a1b2c3d4e5f60001"], "SecurityGroupIds": ["sg-0a1b2c3d4e5f60001"]}
    in_vpc = PlatformModelTrainer.configured(platform, tiny, {}, {**expected, "VpcConfig": vpc})
    assert in_vpc._create_training_job_args(boto3=True)["VpcConfig"] == vpc


# --- 2. preflight: refusals raise, nothing is created ------------------------------------------------


def test_a_predicted_out_of_memory_raises_with_the_submitters_code_and_creates_nothing(aws, platform) -> None:
    request = json.loads((REPO / "examples" / "oversized-request.json").read_text())
    request["job_name"] = f"sdk-oversized-{uuid.uuid4().hex[:8]}"
    before = _jobs(aws)
    with pytest.raises(PlatformRefusal) as caught:
        platform.model_trainer(request)
    refusal = caught.value
    assert refusal.code == "PredictedOutOfMemory"
    assert refusal.details["estimate"]["memory_gb"]["required"] > refusal.details["estimate"]["memory_gb"]["usable"]
    assert refusal.response["status"] == "rejected"
    assert _jobs(aws) == before


def test_a_bad_field_raises_invalid_request_naming_it(aws, platform, tiny) -> None:
    before = _jobs(aws)
    with pytest.raises(PlatformRefusal) as caught:
        platform.model_trainer({**tiny, "max_runtime_hours": 0})
    assert (caught.value.code, caught.value.field) == ("InvalidRequest", "max_runtime_hours")
    assert "max_runtime_hours" in str(caught.value)
    assert _jobs(aws) == before


def test_a_request_that_is_not_an_object_or_already_a_dry_run_is_refused_before_anything(platform, tiny) -> None:
    with pytest.raises(TypeError, match="request: expected a JSON object"):
        platform.model_trainer([tiny])
    with pytest.raises(ValueError, match="dry_run"):
        platform.model_trainer({**tiny, "dry_run": True})


# --- 3. idempotency: one request, one job -------------------------------------------------------------


def test_a_retry_attaches_to_the_first_job(aws, platform, tiny) -> None:
    first = platform.model_trainer(tiny)
    first.train(wait=False, logs=False)
    name = first.training_job.training_job_name
    assert name.startswith("job-")  # derived from the client_token, as the submitter derives it
    first.train(wait=False, logs=False)  # train() again: the preflight finds the job
    again = platform.model_trainer(tiny)  # a notebook cell run again
    assert again.preflight_answer["replayed"] is True
    again.train(wait=False, logs=False)
    assert again.training_job.training_job_name == name
    assert len(_created(aws, name)) == 1 and name in _jobs(aws)
    # the submitter answers the same token from the SDK's job
    answer = submit_local(tiny, aws.env)
    assert (answer["status"], answer["training_job_name"], answer["replayed"]) == ("submitted", name, True)


def test_two_trainers_racing_with_one_token_create_one_job(aws, platform, tiny) -> None:
    trainers = [platform.model_trainer(tiny) for _ in range(2)]  # both preflights see no job yet
    assert not any(t.preflight_answer["replayed"] for t in trainers)
    errors: list[BaseException] = []

    def train(trainer: Any) -> None:
        try:
            trainer.train(wait=False, logs=False)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(t,)) for t in trainers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    names = {t.training_job.training_job_name for t in trainers}
    assert len(names) == 1
    (name,) = names
    assert len(_created(aws, name)) >= 1 and sum(1 for j in aws.training_jobs() if j["name"] == name) == 1


def test_the_same_token_with_another_request_is_a_conflict(aws, platform, tiny) -> None:
    platform.train(tiny, wait=False)
    changed = copy.deepcopy(tiny)
    changed["hyperparameters"]["batch_size"] = 4
    with pytest.raises(PlatformRefusal) as caught:
        platform.model_trainer(changed)
    assert (caught.value.code, caught.value.field) == ("Conflict", "client_token")


def test_a_request_without_a_key_gets_a_token_so_train_twice_is_one_job(aws, platform, tiny) -> None:
    request = {k: v for k, v in tiny.items() if k != "client_token"}
    trainer = platform.model_trainer(request)
    assert trainer.request["client_token"].startswith("trainctl-")
    trainer.train(wait=False, logs=False)
    trainer.train(wait=False, logs=False)
    assert len(_created(aws, trainer.training_job.training_job_name)) == 1


# --- 4. what the SDK sends is checked: a changed trainer creates nothing ------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t.hyperparameters.update(batch_size="64"), "HyperParameters"),
        (lambda t: setattr(t, "environment", {"NCCL_DEBUG": "INFO"}), "Environment"),
        (
            lambda t: setattr(t, "training_image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/other:1"),
            "AlgorithmSpecification",
        ),
    ],
)
def test_a_trainer_changed_after_it_was_configured_sends_nothing(aws, platform, tiny, change, field) -> None:
    trainer = platform.model_trainer(tiny)
    change(trainer)
    with pytest.raises(TrainerChanged) as caught:
        trainer.train(wait=False, logs=False)
    assert caught.value.field == field
    assert _created(aws, trainer.create_training_job["TrainingJobName"]) == []


def test_an_extra_channel_passed_to_train_sends_nothing(aws, platform, tiny) -> None:
    from sagemaker.core.training.configs import InputData

    trainer = platform.model_trainer(tiny)
    extra = InputData(channel_name="eval", data_source=f"s3://{aws.resources['data_bucket']}/eval/")
    with pytest.raises(TrainerChanged) as caught:
        trainer.train(input_data_config=[extra], wait=False, logs=False)
    assert caught.value.field == "InputDataConfig"
    assert _created(aws, trainer.create_training_job["TrainingJobName"]) == []


# --- 5. through the submitter: the SDK's view of the job ---------------------------------------------


def test_submit_goes_through_the_submitter_and_returns_the_sdks_training_job(aws, platform, tiny) -> None:
    job = platform.submit(tiny)
    assert type(job).__module__ == "sagemaker.core.resources" and type(job).__name__ == "TrainingJob"
    assert job.training_job_status == "InProgress"
    assert _tags(aws, job.training_job_name)[TAG_SUBMITTER] == "job-submitter"
    assert platform.submit(tiny).training_job_name == job.training_job_name  # replayed, one job
    assert len(_created(aws, job.training_job_name)) == 1
    with pytest.raises(PlatformRefusal) as caught:
        platform.submit({**tiny, "client_token": f"sdk-{uuid.uuid4()}", "capacity": "spot-ish"})
    assert (caught.value.code, caught.value.field) == ("InvalidRequest", "capacity")


def test_the_emulator_platform_refuses_to_run_without_its_endpoint(aws) -> None:
    from trainctl.submitter_client import LocalEndpointRequired

    env = {k: v for k, v in aws.env.items() if k != "AWS_ENDPOINT_URL"}
    with pytest.raises(LocalEndpointRequired):
        Platform.from_env(env)


def test_the_env_file_of_local_aws_is_read_as_written(aws, tmp_path) -> None:
    from devtools.local_aws.stack import write_env_file
    from trainctl.sdk import read_env_file

    path = tmp_path / "aws.env"
    env = {**aws.env, "PLATFORM_TAGS": '{"team": "a b\'c"}'}
    write_env_file(path, env)
    assert read_env_file(path) == env
    path.write_text("export A=1\nnot a line\n")
    with pytest.raises(ValueError, match=r"aws.env:2: expected `export NAME=value`"):
        read_env_file(path)


# --- 6. the container contract reads what the SDK writes ----------------------------------------------


def test_the_trainer_reads_the_hyperparameters_a_plain_model_trainer_sends(
    aws, platform, tmp_path, monkeypatch
) -> None:
    """A notebook user's own ModelTrainer with native Python values: the pinned SDK JSON-encodes each
    non-string value (``safe_serialize``); SageMaker writes them to hyperparameters.json as sent; the
    trainer's entry point validates them."""
    from sagemaker.core.training.configs import Compute
    from sagemaker.train import ModelTrainer

    from training.entrypoint import validate
    from training.environment import SageMakerPaths

    name = f"plain-sdk-{uuid.uuid4().hex[:8]}"
    hyperparameters = {
        "model": "gpt-tiny", "num_layers": 1, "precision": "fp32", "batch_size": 2, "seq_length": 32,
        "learning_rate": 3e-4, "max_steps": 4, "warmup_steps": 1, "synthetic_data": True,
        "activation_checkpointing": "off", "max_grad_norm": 1.0,
    }  # fmt: skip
    # the SDK's switch: its role check asks for VPC and any-namespace metric actions the execution role lacks
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
    # the notebook user's own session: a person's credentials (the administrator's), not the submitter role's,
    # which may not read the SDK's default bucket
    person = Platform.from_env({**aws.env, "AWS_ACCESS_KEY_ID": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"]})
    trainer = ModelTrainer(
        sagemaker_session=person.sagemaker_session,
        training_image=platform.preflight({"capacity": "on-demand", "job_name": name, "hyperparameters": {
            "synthetic_data": True, "precision": "fp32", "model": "gpt-tiny"}})["create_training_job"]
        ["AlgorithmSpecification"]["TrainingImage"],
        role=f"arn:aws:iam::123456789012:role/{aws.resources['execution_role_name']}",
        base_job_name="plain-sdk",
        compute=Compute(instance_type="ml.p5.48xlarge", instance_count=1),
        hyperparameters=hyperparameters,
    )  # fmt: skip
    trainer.train(wait=False, logs=False)
    sent = [
        c["params"] for c in aws.calls("CreateTrainingJob")
        if c["params"]["TrainingJobName"] == trainer._latest_training_job.training_job_name
    ]  # fmt: skip
    (request,) = sent
    carried = request["HyperParameters"]
    assert (
        carried["synthetic_data"] == "true" and carried["learning_rate"] == "0.0003" and carried["model"] == "gpt-tiny"
    )

    paths = SageMakerPaths(tmp_path / "opt_ml")
    paths.config_dir.mkdir(parents=True)
    paths.hyperparameters_file.write_text(json.dumps(carried))  # as SageMaker writes HyperParameters
    hp = validate(paths, {}, gpus=0)
    assert (hp.model, hp.num_layers, hp.batch_size, hp.seq_length) == ("gpt-tiny", 1, 2, 32)
    assert (hp.learning_rate, hp.synthetic_data, hp.max_grad_norm) == (3e-4, True, 1.0)


def test_a_run_starts_through_the_submitter_and_a_model_trainer_refuses_it(aws, platform, tiny) -> None:
    run_id = f"sdk-{uuid.uuid4().hex[:10]}"
    request = {k: v for k, v in tiny.items() if k != "client_token"}
    request.update(capacity="training-plan", instance_type="ml.p6-b200.48xlarge", run={"run_id": run_id})
    with pytest.raises(PlatformRefusal) as caught:
        platform.model_trainer(request)
    assert (caught.value.code, caught.value.field) == ("InvalidRequest", "run")
    assert not any(name.startswith(run_id) for name in _jobs(aws))
    job = platform.submit(request)  # no client_token is generated for a run: its run_id is the key
    assert job.training_job_name == f"{run_id}-seg-001"
    assert platform.submit(request).training_job_name == job.training_job_name  # replayed, one job
    assert len(_created(aws, job.training_job_name)) == 1


def _s3_objects(aws: LocalAws) -> set[tuple[str, str]]:
    s3 = aws.client("s3")
    return {
        (bucket["Name"], obj["Key"])
        for bucket in s3.list_buckets()["Buckets"]
        for obj in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
    }


@pytest.mark.parametrize(
    "change", ["source_code", "distributed", "local channel on the trainer", "local channel to train"]
)
def test_a_trainer_the_sdk_would_upload_for_is_refused_before_anything_is_written(
    aws, platform, tiny, tmp_path, change
) -> None:
    """The SDK uploads source code and local channel paths to its default bucket before it sends
    CreateTrainingJob: such a trainer is refused before that upload, not only on the wire after it."""
    from sagemaker.core.training.configs import InputData, SourceCode
    from sagemaker.train.distributed import Torchrun

    (tmp_path / "train.py").write_text("print('not the platform trainer')\n")
    trainer = platform.model_trainer(tiny)
    name = trainer.create_training_job["TrainingJobName"]
    local = InputData(channel_name="eval", data_source=str(tmp_path))
    extra = None
    if change == "source_code":
        trainer.source_code = SourceCode(source_dir=str(tmp_path), entry_script="train.py")
    elif change == "distributed":
        trainer.distributed = Torchrun()  # the SDK drops it without source_code: refused, not ignored
    elif change == "local channel on the trainer":
        trainer.input_data_config = [local]
    else:
        extra = [local]
    before = _s3_objects(aws)
    with pytest.raises(TrainerChanged) as caught:
        trainer.train(input_data_config=extra, wait=False, logs=False)
    assert caught.value.field == ("InputDataConfig" if "channel" in change else "AlgorithmSpecification")
    assert _s3_objects(aws) == before
    assert _created(aws, name) == []


def test_an_env_file_line_with_an_open_quote_is_named(tmp_path) -> None:
    from trainctl.sdk import read_env_file

    path = tmp_path / "aws.env"
    path.write_text('export A=1\nexport PLATFORM_TAGS=\'{"team": "a"}\n')
    with pytest.raises(ValueError, match=r"aws.env:2: expected `export NAME=value`.*No closing quotation"):
        read_env_file(path)


def test_the_sdks_role_check_refuses_the_platforms_execution_role_so_it_is_off_by_default(aws, tiny) -> None:
    # the emulator answers SimulatePrincipalPolicy from the template's policies: for a caller allowed the
    # simulator (here the account's administrator), the SDK's check asks for VPC network-interface actions and
    # PutMetricData in any namespace, which the platform's execution role is deliberately not granted
    from sagemaker.core.helper.iam_role_resolver import RoleValidationError

    as_administrator = {**aws.env, **DUMMY_CREDENTIALS}
    assert Platform.from_env(as_administrator).validate_role is False
    checked = Platform.from_env(as_administrator)
    checked.validate_role = True
    with pytest.raises(RoleValidationError, match=r"Missing permissions: .*ec2:CreateNetworkInterface"):
        checked.model_trainer(tiny)
    trainer = Platform.from_env(as_administrator).model_trainer({**tiny, "client_token": f"sdk-{uuid.uuid4()}"})
    assert trainer.role == aws.env["EXECUTION_ROLE_ARN"]
