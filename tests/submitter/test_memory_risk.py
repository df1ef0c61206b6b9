"""The submitter's memory preflight against the emulator: ``at-risk`` is refused like a predicted out-of-memory
unless ``auto_tune`` fixes it or the request accepts the risk; Llama-3-8B-shaped requests on Hopper and Blackwell
are planned and submitted."""

from __future__ import annotations

import pytest

from planner import AT_RISK_FRACTION, PlanInput
from planner.plan import evaluate

pytestmark = pytest.mark.xdist_group("submitter")

AT_RISK = {"model": "llama3-8b", "precision": "mxfp8", "seq_length": 4096, "batch_size": 8}
"""Llama 3 8B, mxfp8, 4096 x 7 on one ml.p6-b200.48xlarge: ~177 GB needed per GPU of ~184 GB usable."""
OUT_OF_MEMORY = {"model": "llama3-8b", "precision": "mxfp8", "seq_length": 8192, "batch_size": 5}


def _plan(hyperparameters: dict, instance_type: str = "ml.p6-b200.48xlarge"):
    return evaluate(PlanInput.from_request(hyperparameters, instance_type=instance_type))


def test_the_configurations_have_the_verdicts_the_tests_rely_on():
    assert _plan(AT_RISK).status == "at-risk"
    assert _plan(OUT_OF_MEMORY).status == "out-of-memory"


def test_an_at_risk_configuration_is_refused_naming_the_figures_and_creates_nothing(aws, submit, make_request):
    aws.clear_calls()
    response = submit(make_request(hyperparameters=AT_RISK, capacity="on-demand"))
    assert response["status"] == "rejected", response
    error = response["error"]
    plan = _plan(AT_RISK)
    assert error["code"] == "PredictedOutOfMemory" and error["field"] == "hyperparameters"
    assert error["details"]["status"] == "at-risk" and error["details"]["estimate"]["status"] == "at-risk"
    assert (
        f"({plan.memory_gb.required:.1f} GB with margins) of {plan.memory_gb.usable:.1f} GB usable" in error["message"]
    )
    assert "at risk of running out of memory" in error["message"] and "accept_memory_risk" in error["message"]
    assert error["details"]["suggestion"]["changes"]
    assert aws.calls("CreateTrainingJob") == []


def test_accept_memory_risk_submits_the_at_risk_configuration_as_it_is(aws, submit, make_request):
    response = submit(make_request(hyperparameters=AT_RISK, capacity="on-demand", accept_memory_risk=True))
    assert response["status"] == "submitted", response
    assert response["estimate"]["status"] == "at-risk" and "auto_tune" not in response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["HyperParameters"]["batch_size"] == "8" and job["HyperParameters"]["model"] == "llama3-8b"


def test_auto_tune_turns_an_at_risk_configuration_into_one_that_fits(aws, submit, make_request):
    response = submit(make_request(hyperparameters=AT_RISK, capacity="on-demand", auto_tune=True))
    assert response["status"] == "submitted", response
    assert response["estimate"]["status"] == "fits"
    changed = response["auto_tune"]["hyperparameters"]
    assert changed
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    for name, value in changed.items():
        assert job["HyperParameters"][name] == value
    assert job["HyperParameters"]["seq_length"] == "4096" and job["HyperParameters"]["precision"] == "mxfp8"


def test_accepting_the_risk_does_not_let_an_out_of_memory_configuration_through(aws, submit, make_request):
    aws.clear_calls()
    response = submit(make_request(hyperparameters=OUT_OF_MEMORY, capacity="on-demand", accept_memory_risk=True))
    assert response["status"] == "rejected", response
    assert response["error"]["code"] == "PredictedOutOfMemory"
    assert response["error"]["details"]["status"] == "out-of-memory"
    estimate = response["error"]["details"]["estimate"]
    # a configuration that would not run shows no speed as if it had
    assert estimate["tokens_per_second"] is None and estimate["mfu"] is None and estimate["not_run"]
    assert aws.calls("CreateTrainingJob") == []


AT_RISK_NO_CHANGE = {
    "model": "llama3-70b", "precision": "bf16", "seq_length": 18432, "batch_size": 1, "activation_checkpointing": "full",
}  # fmt: skip
"""Llama 3 70B at sequence 18432 on 3 x ml.p5.48xlarge: at-risk with batch 1 and full checkpointing, so no change
of the hyperparameters fits (more instances would)."""


def test_an_at_risk_configuration_no_change_fixes_says_how_to_accept_the_risk(aws, submit, make_request):
    request = make_request(
        hyperparameters=AT_RISK_NO_CHANGE, instance_type="ml.p5.48xlarge", instance_count=3, capacity="on-demand"
    )
    assert _plan(AT_RISK_NO_CHANGE, "ml.p5.48xlarge").status == "out-of-memory"  # 1 instance
    response = submit(request)
    assert response["status"] == "rejected" and response["error"]["details"]["status"] == "at-risk", response
    assert response["error"]["details"]["suggestion"] is None
    assert response["error"]["message"].endswith(
        f"within the model's {AT_RISK_FRACTION:.0%} error of the limit; the planner found no change of the "
        "hyperparameters that fits; set accept_memory_risk to submit it as it is"
    ), response["error"]["message"]
    accepted = submit({**request, "accept_memory_risk": True})
    assert accepted["status"] == "submitted" and accepted["estimate"]["status"] == "at-risk", accepted


@pytest.mark.parametrize(("instance_type", "precision"), [("ml.p5.48xlarge", "fp8"), ("ml.p6-b200.48xlarge", "mxfp8")])
def test_a_llama_3_8b_request_is_planned_and_submitted_on_hopper_and_blackwell(
    aws, submit, make_request, instance_type, precision
):
    hyperparameters = {
        "model": "llama3-8b",
        "precision": precision,
        "seq_length": 8192,
        "batch_size": 2,
        "activation_checkpointing": "selective:2",
        "gradient_accumulation_steps": 4,
    }
    response = submit(make_request(instance_type=instance_type, hyperparameters=hyperparameters, capacity="on-demand"))
    assert response["status"] == "submitted", response
    estimate = response["estimate"]
    assert estimate["status"] == "fits"
    assert estimate["model"]["num_params"] == 8_030_261_248
    assert estimate["activation_checkpointing"] == {"mode": "selective:2", "checkpointed_blocks": 16, "num_layers": 32}
    assert estimate["tokens_per_second_per_gpu"] > 0 and 0 < estimate["mfu"] < 100
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["ResourceConfig"]["InstanceType"] == instance_type
    for name, value in hyperparameters.items():
        assert job["HyperParameters"][name] == str(value)
    assert job["HyperParameters"]["gradient_sync"] == "every_micro_batch"


def test_a_retry_without_accept_memory_risk_replays_the_job_the_first_request_made(aws, submit, make_request):
    """``accept_memory_risk`` is not part of the request's fingerprint: a retry that drops it is the same
    request, and the preflight refuses only what would be created, so the retry answers with the first job."""
    first = submit(
        make_request(hyperparameters=AT_RISK, capacity="on-demand", accept_memory_risk=True, client_token="risk-1")
    )
    assert first["status"] == "submitted", first
    aws.clear_calls()
    retry = submit(make_request(hyperparameters=AT_RISK, capacity="on-demand", client_token="risk-1"))
    assert retry["status"] == "submitted" and retry["replayed"], retry
    assert retry["training_job_name"] == first["training_job_name"]
    assert aws.calls("CreateTrainingJob") == []
    # a new token for the same configuration still meets the preflight
    fresh = submit(make_request(hyperparameters=AT_RISK, capacity="on-demand", client_token="risk-2"))
    assert fresh["status"] == "rejected" and fresh["error"]["code"] == "PredictedOutOfMemory"


def test_a_planner_upgrade_that_now_predicts_out_of_memory_does_not_turn_a_retry_into_a_refusal(
    aws, submit, make_request, runtime, monkeypatch
):
    """A job created under one planner, retried after a deploy whose planner refuses the configuration:
    the retry replays the job (idempotency holds across an upgrade); a new request is refused."""
    hyperparameters = {"model": "gpt-tiny", "seq_length": 128, "batch_size": 1, "synthetic_data": True}
    first = submit(make_request(hyperparameters=hyperparameters, capacity="on-demand", client_token="upgrade-1"))
    assert first["status"] == "submitted", first

    def refuses(request):
        raise runtime.errors.Refusal(
            "PredictedOutOfMemory", "the new planner says no", field="hyperparameters", details={"estimate": {}}
        )

    monkeypatch.setattr(runtime.service, "preflight", refuses)
    aws.clear_calls()
    retry = submit(make_request(hyperparameters=hyperparameters, capacity="on-demand", client_token="upgrade-1"))
    assert retry["status"] == "submitted" and retry["replayed"], retry
    assert retry["training_job_name"] == first["training_job_name"] and aws.calls("CreateTrainingJob") == []
    fresh = submit(make_request(hyperparameters=hyperparameters, capacity="on-demand", client_token="upgrade-2"))
    assert fresh["status"] == "rejected" and fresh["error"]["message"] == "the new planner says no"
