"""The CDK side of issue 15: the read-only job API function, the run continuation, their grants, triggers and alarm.

Uses the session synths of ``conftest.py`` (the variant sets ``readerPrincipals``,
``runContinuationScheduleMinutes`` = 10 and ``runCapacityWaitAlarmMinutes`` = 45); props and
configuration refusals are checked without a synth.
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
from typing import ClassVar

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm

from platform_constructs.observability import construct as observability
from platform_constructs.observability import widgets
from platform_constructs.submitter import construct as submitter
from platform_constructs.submitter.construct import (
    CONTINUATION_HANDLER,
    CONTINUATION_MAX_EVENT_AGE,
    HANDLER,
    READER_ACTIONS,
    RECORD_WRITE_ACTIONS,
)
from platform_constructs.submitter.runtime import settings
from platform_constructs.submitter.runtime.actions import READ_ACTIONS
from platform_spec import health
from platform_spec.runs import DECISIONS, RUN_CHECKPOINT_PREFIX
from stacks.config import ConfigError, load_config
from trainctl.dashboard.template import dashboard_bodies

pytestmark = pytest.mark.xdist_group("cdk")

AUTO_DELETE_ROLE = "CustomS3AutoDeleteObjectsCustomResourceProviderRole"
READER_ARN = "arn:aws:iam::123456789012:role/Dashboards"
OUTPUT_KEY = "arn:aws:kms:us-west-2:123456789012:key/0b5e7c1a-1111-4222-8333-444455556666"


# -- helpers --------------------------------------------------------------------------------------


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def role_statements(synth, role) -> list[dict]:
    """Every statement of the identity policies attached to ``role`` (no inline or managed policy is used)."""
    role_id = synth.logical_id(role)
    assert "ManagedPolicyArns" not in synth.resources[role_id]["Properties"]
    assert "Policies" not in synth.resources[role_id]["Properties"]
    return [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in as_list(policy["Properties"]["PolicyDocument"]["Statement"])
    ]


def granted(statements: list[dict], action: str) -> list[dict]:
    """The Allow statements granting ``action`` (IAM wildcards in the statement's actions resolved)."""
    return [
        s
        for s in statements
        if s["Effect"] == "Allow"
        and any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in as_list(s["Action"]))
    ]


def by_sid(statements: list[dict]) -> dict[str, dict]:
    return {s["Sid"]: s for s in statements if "Sid" in s}


def objects(synth, bucket, prefix: str) -> dict:
    return {"Fn::Join": ["", [{"Fn::GetAtt": [synth.logical_id(bucket), "Arn"]}, f"/{prefix}*"]]}


def function_properties(synth, function) -> dict:
    return synth.resources[synth.logical_id(function)]["Properties"]


# -- the reader -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["default_synth", "variant_synth"])
def test_the_reader_role_can_change_nothing(request, fixture):
    synth = request.getfixturevalue(fixture)
    statements = role_statements(synth, synth.stack.submitter.reader_role)
    for action in (
        "sagemaker:CreateTrainingJob",
        "sagemaker:StopTrainingJob",
        "sagemaker:AddTags",
        "sagemaker:DeleteTags",
        "iam:PassRole",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "kms:GenerateDataKey",
        "events:PutEvents",
        "cloudwatch:PutMetricData",
        "ssm:GetParameter",
        "lambda:InvokeFunction",
    ):
        assert granted(statements, action) == [], action
    actions = sorted({a for s in statements for a in as_list(s["Action"])})
    assert actions == [
        "kms:Decrypt",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "s3:GetObject",
        "s3:ListBucket",
        "sagemaker:DescribeTrainingJob",
        "sagemaker:DescribeTrainingPlan",
        "sagemaker:ListTags",
        "sagemaker:Search",
    ]


def test_the_reader_reads_the_run_store_and_the_checkpoint_prefixes_only(default_synth):
    synth, stack = default_synth, default_synth.stack
    found = by_sid(role_statements(synth, stack.submitter.reader_role))
    assert found["RunRecordsRead"]["Resource"] == objects(synth, stack.buckets.output, settings.RUN_STORE_PREFIX)
    assert found["ListRunRecords"]["Resource"] == {"Fn::GetAtt": [synth.logical_id(stack.buckets.output), "Arn"]}
    assert found["ListRunRecords"]["Condition"] == {"StringLike": {"s3:prefix": [f"{settings.RUN_STORE_PREFIX}*"]}}
    prefixes = [settings.JOB_CHECKPOINT_PREFIX, RUN_CHECKPOINT_PREFIX]
    assert found["CheckpointsRead"]["Resource"] == [objects(synth, stack.buckets.checkpoints, p) for p in prefixes]
    assert found["ListCheckpoints"]["Condition"] == {"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}}
    # the job API reads plain jobs' checkpoints where the submitter puts them
    assert settings.JOB_CHECKPOINT_PREFIX == "checkpoints/" and RUN_CHECKPOINT_PREFIX == "run-checkpoints/"
    # nothing else of either bucket: the client-token records and the job output stay out of reach
    reads = granted(role_statements(synth, stack.submitter.reader_role), "s3:GetObject")
    assert [r for s in reads for r in as_list(s["Resource"])] == [
        objects(synth, stack.buckets.output, settings.RUN_STORE_PREFIX),
        *(objects(synth, stack.buckets.checkpoints, p) for p in prefixes),
    ]
    jobs = found["DescribeTrainingJobs"]
    assert json.dumps(jobs["Resource"]).endswith(':training-job/*"]]}')
    assert found["SearchTrainingJobs"]["Resource"] == "*" and "ListTrainingJobs" not in found


def test_the_reader_is_the_submitters_code_limited_to_the_read_actions(default_synth):
    stack = default_synth.stack
    full = function_properties(default_synth, stack.submitter.function)
    reader = function_properties(default_synth, stack.submitter.reader_function)
    assert reader["Handler"] == full["Handler"] == HANDLER
    assert reader["Code"] == full["Code"]  # one asset
    variables = dict(reader["Environment"]["Variables"])
    assert variables.pop(settings.ENV_ALLOWED_ACTIONS) == "describe,list,list_runs"
    assert READER_ACTIONS == READ_ACTIONS
    assert variables == full["Environment"]["Variables"]
    assert settings.ENV_ALLOWED_ACTIONS not in full["Environment"]["Variables"]  # the submitter answers every action
    # the reader reserves nothing: a second reservation would be taken from the account's pool again
    assert "ReservedConcurrentExecutions" not in reader


def test_grant_read_lets_invoke_the_reader_only_and_grant_submit_the_submitter_only(variant_synth):
    stack = variant_synth.stack
    reader = variant_synth.logical_id(stack.submitter.reader_function)
    full = variant_synth.logical_id(stack.submitter.function)
    targets: dict[str, list[str]] = {}
    for permission in variant_synth.of_type("AWS::Lambda::Permission").values():
        props = permission["Properties"]
        assert props["Action"] == "lambda:InvokeFunction"
        targets.setdefault(props["Principal"], []).append(props["FunctionName"]["Fn::GetAtt"][0])
    (reader_arn,) = variant_synth.context["readerPrincipals"]
    (invoker_arn,) = variant_synth.context["invokerPrincipals"]
    assert targets[reader_arn] == [reader]  # a grant_read grantee cannot invoke the submitter function
    assert targets[invoker_arn] == [full]


def test_grant_read_and_grant_submit_add_to_a_grantees_policy_in_the_same_account():
    stack = _bare_stack()
    job_submitter = submitter.JobSubmitter(stack, "Submitter", _props(stack))
    reader_role = iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal())
    caller_role = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    job_submitter.grant_read(reader_role)
    job_submitter.grant_submit(caller_role)
    alias = iam.Role(stack, "Alias", assumed_by=iam.AccountRootPrincipal())
    job_submitter.grant_invoke(alias)

    def invoked(role) -> list:
        document = stack.resolve(role.node.find_child("DefaultPolicy").document.to_json())
        return [r for s in document["Statement"] if "lambda:InvokeFunction" in as_list(s["Action"])
                for r in as_list(s["Resource"])]  # fmt: skip

    reader_arn = stack.resolve(job_submitter.reader_function.function_arn)
    full_arn = stack.resolve(job_submitter.function.function_arn)
    assert reader_arn in invoked(reader_role) and full_arn not in invoked(reader_role)
    assert full_arn in invoked(caller_role) and reader_arn not in invoked(caller_role)
    assert invoked(alias) == invoked(caller_role)  # grant_invoke stays, an alias of grant_submit


# -- the continuation: function, grants, triggers ----------------------------------------------------


def test_the_continuation_runs_the_submitters_code_and_environment(default_synth):
    stack = default_synth.stack
    full = function_properties(default_synth, stack.submitter.function)
    continuation = function_properties(default_synth, stack.submitter.continuation_function)
    assert continuation["Handler"] == CONTINUATION_HANDLER
    assert CONTINUATION_HANDLER == "platform_constructs.submitter.runtime.continuation.lambda_handler"
    assert continuation["Code"] == full["Code"]
    assert continuation["Environment"] == full["Environment"]
    assert continuation["Timeout"] == 120 and "ReservedConcurrentExecutions" not in continuation

    # it creates jobs with the trainer image: after the image is in the repository, as the submitter
    def depends_on(function) -> set[str]:
        return set(default_synth.resources[default_synth.logical_id(function)]["DependsOn"])

    image_copy = {d for d in depends_on(stack.submitter.function) if d.startswith("TrainerImageDeployment")}
    assert image_copy and image_copy <= depends_on(stack.submitter.continuation_function)


@pytest.mark.parametrize("fixture", ["default_synth", "variant_synth"])
def test_the_continuation_has_the_submitters_grants_but_search_and_its_own(request, fixture):
    synth = request.getfixturevalue(fixture)
    stack = synth.stack
    submitter_statements = role_statements(synth, stack.submitter.role)
    statements = role_statements(synth, stack.submitter.continuation_role)

    def without_logs(found):
        return [s for s in found if not any(a.startswith("logs:") for a in as_list(s["Action"]))]

    # every statement of the submitter's role (its log group's aside) is the continuation's too, but the search
    # of the `list` action, which the continuation never makes (the emulator's authorization of a run shows it)
    for statement in without_logs(submitter_statements):
        assert (statement in statements) == (statement.get("Sid") != "SearchTrainingJobs"), statement
    own = by_sid([s for s in statements if s not in submitter_statements])
    assert set(own) == {"RunMarkers", "RunDecisionEvents", "StepMetricsRead"}
    # the stall watch's GetMetricData, which has no resource-level permissions; never PutMetricData
    assert (own["StepMetricsRead"]["Action"], own["StepMetricsRead"]["Resource"]) == ("cloudwatch:GetMetricData", "*")
    assert "sagemaker:StopTrainingJob" in as_list(by_sid(statements)["TrainingJobs"]["Action"])  # the stall stop
    assert own["RunMarkers"]["Action"] == "s3:DeleteObject"  # never DeleteObjectVersion: the history stays
    # the waiting and active markers only, never the run's records (tests/submitter/test_grants.py)
    markers = (settings.RUN_WAITING_PREFIX, settings.RUN_ACTIVE_PREFIX)
    assert sorted(map(json.dumps, own["RunMarkers"]["Resource"])) == sorted(
        json.dumps(objects(synth, stack.buckets.output, prefix)) for prefix in markers
    )
    events_statement = own["RunDecisionEvents"]
    assert events_statement["Action"] == "events:PutEvents"
    assert json.dumps(events_statement["Resource"]).endswith(':event-bus/default"]]}') or str(
        events_statement["Resource"]
    ).endswith(":event-bus/default")
    assert events_statement["Condition"] == {"StringEquals": {"events:source": [settings.RUN_EVENT_SOURCE]}}
    # its metrics are EMF log lines (Powertools Metrics): no role of the submitter may call PutMetricData
    for role in (stack.submitter.continuation_role, stack.submitter.role, stack.submitter.reader_role):
        assert granted(role_statements(synth, role), "cloudwatch:PutMetricData") == [], role
    found = by_sid(statements)
    assert "sagemaker:CreateTrainingJob" in found["TrainingJobs"]["Action"]
    assert found["TrainingJobsOnPlans"]["Action"] == "sagemaker:CreateTrainingJob"  # segments on a plan (issue 24)
    assert found["RunRecords"]["Action"] == "s3:PutObject"
    assert objects(synth, stack.buckets.checkpoints, RUN_CHECKPOINT_PREFIX) in found["CheckpointsRead"]["Resource"]
    # before a run's next segment its older checkpoints are deleted: under the run checkpoint prefix only, never a
    # version (runtime/checkpoint_prune.py)
    assert found["RunCheckpointsPrune"]["Action"] == "s3:DeleteObject"
    assert found["RunCheckpointsPrune"]["Resource"] == objects(synth, stack.buckets.checkpoints, RUN_CHECKPOINT_PREFIX)
    # failed invocations go to the dead-letter queue
    queue = synth.logical_id(stack.submitter.dead_letter_queue)
    sends = granted(statements, "sqs:SendMessage")
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": [queue, "Arn"]}]


def test_the_submitter_may_stop_jobs_and_write_the_run_store_but_not_delete_it(default_synth):
    synth, stack = default_synth, default_synth.stack
    statements = role_statements(synth, stack.submitter.role)
    assert granted(statements, "sagemaker:StopTrainingJob")
    puts = granted(statements, "s3:PutObject")
    runs = objects(synth, stack.buckets.output, settings.RUN_STORE_PREFIX)
    assert runs in [r for s in puts for r in as_list(s["Resource"])]
    # continue_run prunes a run's older checkpoints (runtime/checkpoint_prune.py); it deletes nothing else
    deletes = granted(statements, "s3:DeleteObject")
    assert [s["Resource"] for s in deletes] == [objects(synth, stack.buckets.checkpoints, RUN_CHECKPOINT_PREFIX)]
    assert granted(statements, "events:PutEvents") == []


def test_the_execution_role_reads_and_writes_the_run_checkpoints(default_synth):
    synth, stack = default_synth, default_synth.stack
    statements = role_statements(synth, stack.execution_role.role)
    every_object = objects(synth, stack.buckets.checkpoints, "")  # <bucket>/*: run-checkpoints/<run id>/ too
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert every_object in [r for st in granted(statements, action) for r in as_list(st["Resource"])], action
    bucket = {"Fn::GetAtt": [synth.logical_id(stack.buckets.checkpoints), "Arn"]}
    listing = granted(statements, "s3:ListBucket")
    assert any(bucket in as_list(st["Resource"]) and "Condition" not in st for st in listing)


def test_the_state_change_rule_sends_terminal_job_states_to_the_continuation(default_synth):
    synth, stack = default_synth, default_synth.stack
    rule = synth.resources[synth.logical_id(stack.submitter.continuation_rule)]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Training Job State Change"],
        "detail": {"TrainingJobStatus": ["Completed", "Failed", "Stopped"]},
    }
    (target,) = rule["Targets"]
    _check_target(synth, target)


@pytest.mark.parametrize(("fixture", "minutes"), [("default_synth", 5), ("variant_synth", 10)])
def test_the_schedule_follows_the_configuration(request, fixture, minutes):
    synth = request.getfixturevalue(fixture)
    stack = synth.stack
    rule = synth.resources[synth.logical_id(stack.submitter.continuation_schedule)]["Properties"]
    assert rule["ScheduleExpression"] == f"rate({minutes} minutes)"
    assert "EventPattern" not in rule
    (target,) = rule["Targets"]
    _check_target(synth, target)
    assert "Input" not in target  # the scheduled event itself: source aws.events, detail-type Scheduled Event


def _check_target(synth, target: dict) -> None:
    stack = synth.stack
    function = synth.logical_id(stack.submitter.continuation_function)
    queue = synth.logical_id(stack.submitter.dead_letter_queue)
    assert target["Arn"] == {"Fn::GetAtt": [function, "Arn"]}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue, "Arn"]}}
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": 2,
        "MaximumEventAgeInSeconds": int(CONTINUATION_MAX_EVENT_AGE.to_seconds()),
    }


def test_failed_invocations_are_retried_then_dead_lettered(default_synth):
    synth, stack = default_synth, default_synth.stack
    function = synth.logical_id(stack.submitter.continuation_function)
    queue = synth.logical_id(stack.submitter.dead_letter_queue)
    (config,) = [
        c["Properties"]
        for c in synth.of_type("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function}
    ]
    assert config["MaximumRetryAttempts"] == 2
    assert config["MaximumEventAgeInSeconds"] == 21600  # Lambda's most for asynchronous invocations
    assert config["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": [queue, "Arn"]}}}
    dead_letters = synth.resources[queue]
    assert dead_letters["Properties"]["SqsManagedSseEnabled"] is True
    assert dead_letters["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    assert dead_letters["DeletionPolicy"] == "Retain"  # events that were never handled are data
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in synth.of_type("AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue}]
    ]
    deny = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    senders = [s["Condition"]["ArnEquals"]["aws:SourceArn"] for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert sorted(json.dumps(s) for s in senders) == sorted(
        json.dumps({"Fn::GetAtt": [synth.logical_id(rule), "Arn"]})
        for rule in (stack.submitter.continuation_rule, stack.submitter.continuation_schedule)
    )


# -- the run store is the submitter's and the continuation's -----------------------------------------


@pytest.mark.parametrize("fixture", ["default_synth", "variant_synth"])
def test_the_output_bucket_denies_run_store_writes_to_everyone_else(request, fixture):
    synth = request.getfixturevalue(fixture)
    stack = synth.stack
    output = synth.logical_id(stack.buckets.output)
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for r in synth.of_type("AWS::S3::BucketPolicy").values()
        if r["Properties"]["Bucket"] == {"Ref": output}
    ]
    (deny,) = [s for s in policy["Statement"] if s.get("Sid") == "RunRecordsSubmitterOnly"]
    exempt = [
        {"Fn::GetAtt": [synth.logical_id(stack.submitter.role), "Arn"]},
        {"Fn::GetAtt": [synth.logical_id(stack.submitter.continuation_role), "Arn"]},
    ]
    if fixture == "variant_synth":  # removalPolicy=destroy: the function that empties the bucket
        (auto_delete,) = [i for i in synth.of_type("AWS::IAM::Role") if i.startswith(AUTO_DELETE_ROLE)]
        exempt.append({"Fn::GetAtt": [auto_delete, "Arn"]})
    assert deny == {
        "Sid": "RunRecordsSubmitterOnly",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": sorted(RECORD_WRITE_ACTIONS),
        "Resource": objects(synth, stack.buckets.output, settings.RUN_STORE_PREFIX),
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": exempt}},
    }
    # the reader and the execution role (every training job) are not exempt
    text = json.dumps(deny)
    for role in (stack.submitter.reader_role, stack.execution_role.role):
        assert synth.logical_id(role) not in text


# -- the alarm and the dashboard ----------------------------------------------------------------------


@pytest.mark.parametrize(("fixture", "minutes", "schedule"), [("default_synth", 120, 5), ("variant_synth", 45, 10)])
def test_the_waiting_alarm_threshold_comes_from_the_configuration(request, fixture, minutes, schedule):
    synth = request.getfixturevalue(fixture)
    observed = synth.stack.observability
    alarm = synth.resources[synth.logical_id(observed.alarms["RunWaitingForCapacity"])]["Properties"]
    topic = {"Ref": synth.logical_id(observed.alarm_topic.topic)}
    assert alarm["AlarmName"] == "TrainingPlatform/RunWaitingForCapacity"
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        settings.METRICS_NAMESPACE,
        settings.METRIC_RUN_CAPACITY_WAIT_SECONDS,
        "Maximum",
    )
    assert alarm["Dimensions"] == [{"Name": "service", "Value": settings.CONTINUATION_SERVICE_NAME}]
    assert alarm["Threshold"] == minutes * 60
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    # one value per scheduled run: a period per run, and one of two periods breaching is enough
    assert alarm["Period"] == schedule * 60
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (2, 1)
    assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic]
    assert f"{minutes} minutes" in alarm["AlarmDescription"]


def test_a_run_without_a_step_for_the_default_stall_minutes_raises_an_alarm(default_synth):
    synth = default_synth
    observed = synth.stack.observability
    alarm = synth.resources[synth.logical_id(observed.alarms["RunStalled"])]["Properties"]
    topic = {"Ref": synth.logical_id(observed.alarm_topic.topic)}
    assert alarm["AlarmName"] == "TrainingPlatform/RunStalled"
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        settings.METRICS_NAMESPACE,
        settings.METRIC_RUN_STEP_AGE_SECONDS,
        "Maximum",
    )
    # the oldest of the runs (no RunId): one series an alarm can watch
    assert alarm["Dimensions"] == [{"Name": "service", "Value": settings.CONTINUATION_SERVICE_NAME}]
    assert alarm["Threshold"] == health.DEFAULT_STALL_MINUTES * 60
    assert (alarm["ComparisonOperator"], alarm["TreatMissingData"]) == ("GreaterThanThreshold", "notBreaching")
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (5 * 60, 2, 1)
    assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic]
    assert f"{health.DEFAULT_STALL_MINUTES:g} minutes" in alarm["AlarmDescription"]


def test_the_dashboard_shows_each_runs_time_since_its_newest_step(default_synth):
    (body,) = dashboard_bodies(default_synth.template_json).values()
    titled = {w["properties"].get("title"): w for w in body["widgets"] if "properties" in w}
    graph = titled["Time since the newest step, per run in training (seconds)"]["properties"]
    per_run, oldest = graph["metrics"]
    expression = per_run[0]["expression"]
    assert expression.startswith(f"SEARCH('{{{settings.METRICS_NAMESPACE},service,{settings.DIMENSION_RUN_ID}}} ")
    assert f'MetricName="{settings.METRIC_RUN_STEP_AGE_SECONDS}"' in expression
    assert expression.endswith("'Maximum', 300)")  # the schedule's period: one value a tick
    assert per_run[0]["label"] == "${PROP('Dim.RunId')}"
    assert oldest[:2] == [settings.METRICS_NAMESPACE, settings.METRIC_RUN_STEP_AGE_SECONDS]
    assert graph["annotations"]["horizontal"] == [
        {"value": health.DEFAULT_STALL_MINUTES * 60, "label": "RunStalled alarm", "yAxis": "left"}
    ]


def test_dead_lettered_continuation_events_raise_an_alarm(default_synth):
    synth = default_synth
    observed = synth.stack.observability
    alarm = synth.resources[synth.logical_id(observed.alarms["RunContinuationDeadLetters"])]["Properties"]
    queue = synth.logical_id(synth.stack.submitter.dead_letter_queue)
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["AlarmActions"] == [{"Ref": synth.logical_id(observed.alarm_topic.topic)}]


def test_the_dashboard_shows_the_runs_decisions_and_the_wait(default_synth):
    synth = default_synth
    (body,) = dashboard_bodies(synth.template_json).values()
    titled = {w["properties"].get("title"): w for w in body["widgets"] if "properties" in w}
    table = titled["Run decisions (run, segment, decision, reason, newest step, next segment's job)"]
    log_group = synth.logical_id(synth.stack.submitter.continuation_log_group)
    assert table["type"] == "log" and table["properties"]["view"] == "table"
    assert table["properties"]["query"] == f"SOURCE '${{{log_group}}}' | " + "\n| ".join(widgets.run_decisions_query())
    assert widgets.run_decisions_query()[:2] == [
        "fields @timestamp, run_id, segment, decision, reason, newest_step, next_training_job_name",
        f'filter message = "{settings.RUN_DECISION_LOG_MESSAGE}"',
    ]
    decisions = titled["Run decisions per hour"]["properties"]["metrics"]
    assert [m[3] for m in decisions] == list(DECISIONS)  # one line per decision, from the vocabulary's one home
    assert all(m[:3] == [settings.METRICS_NAMESPACE, settings.METRIC_RUN_DECISIONS, settings.DIMENSION_DECISION]
               for m in decisions)  # fmt: skip
    wait = titled["Longest wait for capacity (seconds)"]["properties"]
    assert wait["metrics"][0][:2] == [settings.METRICS_NAMESPACE, settings.METRIC_RUN_CAPACITY_WAIT_SECONDS]
    assert wait["metrics"][0][-1]["stat"] == "Maximum"
    assert wait["annotations"]["horizontal"] == [
        {"value": 120 * 60, "label": "RunWaitingForCapacity alarm", "yAxis": "left"}
    ]
    started = titled["Segments started"]["properties"]["metrics"]
    assert started[0][:2] == [settings.METRICS_NAMESPACE, settings.METRIC_RUN_SEGMENTS_STARTED]


# -- refusals -----------------------------------------------------------------------------------------


def _config(context: dict):
    app = cdk.App(context=context)
    return load_config(app.node, {})


@pytest.mark.parametrize(
    ("context", "key", "fragment"),
    [
        ({"runContinuationScheduleMinutes": 0}, "runContinuationScheduleMinutes", "an integer from 1 to 1440"),
        ({"runContinuationScheduleMinutes": 1441}, "runContinuationScheduleMinutes", "an integer from 1 to 1440"),
        ({"runContinuationScheduleMinutes": "five"}, "runContinuationScheduleMinutes", "an integer"),
        ({"runContinuationScheduleMinutes": 2.5}, "runContinuationScheduleMinutes", "an integer"),
        ({"runCapacityWaitAlarmMinutes": 0}, "runCapacityWaitAlarmMinutes", "from runContinuationScheduleMinutes (5"),
        ({"runCapacityWaitAlarmMinutes": 43201}, "runCapacityWaitAlarmMinutes", "to 43200"),
        ({"runContinuationScheduleMinutes": 60, "runCapacityWaitAlarmMinutes": 30}, "runCapacityWaitAlarmMinutes",
         "from runContinuationScheduleMinutes (60"),
        ({"readerPrincipals": ["arn:aws:iam::123456789012:group/readers"]}, "readerPrincipals[0]",
         "an IAM principal ARN"),
        ({"readerPrincipal": [READER_ARN]}, "readerPrincipal", "did you mean 'readerPrincipals'"),
    ],
)  # fmt: skip
def test_bad_run_configuration_is_refused_naming_the_key(context, key, fragment):
    with pytest.raises(ConfigError) as caught:
        _config(context)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"context key {key!r}: got ")
    assert fragment in str(caught.value)


def test_run_configuration_defaults_and_values():
    config = _config({})
    assert (config.run_continuation_schedule_minutes, config.run_capacity_wait_alarm_minutes) == (5, 120)
    assert config.reader_principals == ()
    config = _config({"runContinuationScheduleMinutes": "15", "runCapacityWaitAlarmMinutes": "15",
                      "readerPrincipals": READER_ARN})  # fmt: skip
    assert (config.run_continuation_schedule_minutes, config.run_capacity_wait_alarm_minutes) == (15, 15)
    assert config.reader_principals == (READER_ARN,)


def _bare_stack() -> cdk.Stack:
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})  # the package is not needed to read the template
    return cdk.Stack(app, "Consumer", env=cdk.Environment(account="123456789012", region="us-west-2"))


def _props(stack: cdk.Stack, **overrides) -> submitter.JobSubmitterProps:
    class Image:
        image_uris: ClassVar[dict[str, str]] = {"amd64": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:v1"}
        deployment = cdk.CfnWaitConditionHandle(stack, "ImageCopied")

    values = {
        "trainer_image": Image(),
        "execution_role": iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::123456789012:role/SageMakerTraining"),
        "data_bucket": s3.Bucket.from_bucket_name(stack, "Data", "data-b"),
        "checkpoint_bucket": s3.Bucket.from_bucket_name(stack, "Checkpoints", "checkpoints-b"),
        "output_bucket": s3.Bucket.from_bucket_attributes(
            stack, "Output", bucket_name="output-b", encryption_key=kms.Key.from_key_arn(stack, "Key", OUTPUT_KEY)
        ),
        "plan_arns_parameter": ssm.StringParameter.from_string_parameter_name(stack, "Plans", "/plans"),
        "default_instance_type": "ml.p5.48xlarge",
        "allowed_instance_types": ["ml.p5.48xlarge"],
        **overrides,
    }
    return submitter.JobSubmitterProps(**values)


@pytest.mark.parametrize(
    "schedule", [cdk.Duration.seconds(30), cdk.Duration.seconds(90), cdk.Duration.days(2)], ids=["30s", "90s", "2d"]
)
def test_the_construct_refuses_a_schedule_eventbridge_cannot_run_and_builds_nothing(schedule):
    stack = _bare_stack()
    props = _props(stack, continuation_schedule=schedule)
    with pytest.raises(ValueError, match=r"JobSubmitterProps.continuation_schedule: got [0-9.]+ minutes; expected "
                                         r"whole minutes from 1 to 1440"):  # fmt: skip
        submitter.JobSubmitter(stack, "Refused", props)
    assert not stack.node.find_child("Refused").node.children


def test_run_metrics_name_the_continuations_dimensions_and_refuse_an_unknown_decision():
    stack = _bare_stack()
    job_submitter = submitter.JobSubmitter(
        stack, "Submitter", _props(stack, continuation_schedule=cdk.Duration.minutes(3))
    )
    decisions = job_submitter.metric_run_decisions("continue")
    assert (decisions.namespace, decisions.metric_name, decisions.statistic) == (
        settings.METRICS_NAMESPACE, settings.METRIC_RUN_DECISIONS, "Sum")  # fmt: skip
    assert decisions.dimensions == {
        "service": settings.CONTINUATION_SERVICE_NAME,
        settings.DIMENSION_DECISION: "continue",
    }
    wait = job_submitter.metric_run_capacity_wait_seconds()
    assert (wait.metric_name, wait.statistic, wait.period.to_minutes()) == (
        settings.METRIC_RUN_CAPACITY_WAIT_SECONDS, "Maximum", 3)  # fmt: skip
    assert job_submitter.metric_run_segments_started().metric_name == settings.METRIC_RUN_SEGMENTS_STARTED
    with pytest.raises(ValueError, match="decision: got 'continued'; expected one of continue, finished"):
        job_submitter.metric_run_decisions("continued")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"runs": object()}, r"PlatformObservabilityProps.runs: got object; expected the runs' metrics \(IRunMetrics"),
        ({"run_capacity_wait_minutes": 0}, r"PlatformObservabilityProps.run_capacity_wait_minutes: got 0; expected"),
        ({"run_capacity_wait_minutes": True}, r"PlatformObservabilityProps.run_capacity_wait_minutes: got True"),
    ],
)
def test_observability_refuses_bad_run_props_and_builds_nothing(overrides, message):
    stack = _bare_stack()
    job_submitter = submitter.JobSubmitter(stack, "Submitter", _props(stack))
    props = observability.PlatformObservabilityProps(submitter=job_submitter, **overrides)
    with pytest.raises(ValueError, match=message):
        observability.PlatformObservability(stack, "Refused", props)
    assert not stack.node.find_child("Refused").node.children


def test_the_decisions_table_reads_fields_the_continuation_logs():
    """The Logs Insights table's fields and filter against the continuation's own decision line."""
    from platform_constructs.submitter.runtime import continuation
    from platform_constructs.submitter.runtime.continuation import Outcome

    class Events:  # the default bus: the decision's event is published, and answered as accepted
        def __init__(self):
            self.entries = []

        def put_events(self, Entries):  # boto3's parameter name
            self.entries += Entries
            return {"FailedEntryCount": 0, "Entries": [{"EventId": "1"}]}

    record = {"run_id": "llm-7b", "segment": 2, "decision": "continue", "reason": "capacity block ended at step 1200",
              "newest_step": 1200, "next_training_job_name": "llm-7b-seg-003",
              "training_job_name": "llm-7b-seg-002", "max_steps": 5000, "decided_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    events = Events()
    # read the line from the continuation logger's own handlers: their stream is whatever sys.stdout was when
    # the logger was made (an earlier test's capture, when one made it), so capsys may not see it
    out = io.StringIO()
    handlers = [h for h in continuation.logger.handlers if isinstance(h, logging.StreamHandler)]
    streams = [h.stream for h in handlers]
    for handler in handlers:  # by assignment: setStream would flush the old stream, which may be closed
        handler.stream = out
    try:
        continuation.publish(Outcome(record=record, segment_started=True), events=events)
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.stream = stream
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    (logged,) = [line for line in lines if line.get("message") == settings.RUN_DECISION_LOG_MESSAGE]
    fields = settings.RUN_DECISION_LOG_FIELDS
    # every field the table reads is logged, with the decision record's value, and none of the record's others
    assert {name: logged.get(name, "<not logged>") for name in fields} == {name: record[name] for name in fields}
    assert [name for name in logged if name in record] == list(fields)
    assert (logged["decision"], logged["next_training_job_name"]) == ("continue", "llm-7b-seg-003")
    # the event the continuation's role may put: its source is the one the PutEvents grant is conditioned on
    assert [entry["Source"] for entry in events.entries] == [settings.RUN_EVENT_SOURCE]
