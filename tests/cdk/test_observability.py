"""The observability construct in the synthesized stack: dashboard body, alarms, topic, functions, rules.

Uses the session synths of ``conftest.py`` plus one module synth with every
notification option and two plans (``alarm_synth``), checked by cdk-nag and
cfn-lint like the others.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from platform_constructs.observability import functions as obs_functions
from platform_constructs.observability import widgets
from platform_constructs.observability.runtime import settings
from platform_constructs.submitter.runtime import settings as submitter_settings
from platform_spec.metric_lines import METRIC_DEFINITIONS
from trainctl.dashboard.export import export_dashboard
from trainctl.dashboard.template import alarm_summaries, dashboard_bodies

pytestmark = pytest.mark.xdist_group("cdk")

REPO_ROOT = Path(__file__).resolve().parents[2]
ACCOUNT, REGION = "123456789012", "us-west-2"
PLANS = ("p6-b200-reserved", "p5-weekend")
ALARM_CONTEXT = {
    "trainingPlanArns": [f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}" for name in PLANS],
    "alarmEmails": ["ml-oncall@example.com"],
    "alarmHttpsEndpoints": ["https://events.pagerduty.example.com/integration/abc/enqueue"],
    "alarmSlackChannels": ["T0123ABCD/C0456EFGH"],
    "idleCapacityAlarmHours": 36,
    "removalPolicy": "destroy",
}
SAGEMAKER_NS = "/aws/sagemaker/TrainingJobs"


@pytest.fixture(scope="module")
def alarm_synth(tmp_path_factory):
    """Two plans, every subscription kind, N = 36 h; synthesized with cdk-nag (raises on a finding)."""
    from stacks.platform_app import create_app

    outdir = tmp_path_factory.mktemp("cdk-alarms")
    app, stack = create_app(
        context={**ALARM_CONTEXT, "aws:cdk:bundling-stacks": []},  # the packages are checked on the session synths
        outdir=outdir,
        environ={"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION},
        stack_traces=False,
    )
    app.synth()
    template = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return stack, template, outdir


def body_of(template) -> dict:
    (body,) = dashboard_bodies(template).values()
    return body


def resources_of(template, resource_type):
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def logical_id(stack, construct) -> str:
    from aws_cdk import Stack

    child = construct.node.default_child if construct.node.default_child is not None else construct
    return Stack.of(construct).resolve(child.logical_id)


def metric_widgets(body):
    return [w for w in body["widgets"] if w["type"] == "metric"]


def widget_titled(body, title):
    (found,) = [w for w in body["widgets"] if w.get("properties", {}).get("title") == title]
    return found


def expressions(widget) -> list[str]:
    return [
        m[-1]["expression"]
        for m in widget["properties"]["metrics"]
        if isinstance(m[-1], dict) and "expression" in m[-1]
    ]


# -- the dashboard body ---------------------------------------------------------------------------


def test_body_renders_to_json_on_a_24_column_grid_without_overlaps(default_synth):
    body = body_of(default_synth.template_json)
    cells = set()
    for widget in body["widgets"]:
        assert widget["x"] >= 0 and widget["x"] + widget["width"] <= 24, widget
        for x in range(widget["x"], widget["x"] + widget["width"]):
            for y in range(widget["y"], widget["y"] + widget["height"]):
                assert (x, y) not in cells, f"widgets overlap at {(x, y)}"
                cells.add((x, y))


def test_sections_in_order(default_synth):
    body = body_of(default_synth.template_json)
    headers = [
        w["properties"]["markdown"].splitlines()[0]
        for w in body["widgets"]
        if w["type"] == "text" and w["properties"]["markdown"].startswith("## ")
    ]
    assert headers == [
        "## Fleet",
        "## Training progress",
        "## Job submitter",
        "## Training plans",
        "## Job outcomes",
        "## Training runs",
        "## Logs",
    ]
    (status,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    assert status["y"] < min(w["y"] for w in body["widgets"] if w["type"] == "metric")  # alarms on top


def test_fleet_searches_every_host_metric_as_sagemaker_publishes_it(default_synth):
    body = body_of(default_synth.template_json)
    found = {}
    for widget in metric_widgets(body):
        for expression in expressions(widget):
            match = re.fullmatch(
                r"""SEARCH\('\{"/aws/sagemaker/TrainingJobs",Host\} MetricName="(\w+)"', 'Average', 300\)""", expression
            )
            if match:
                found[match.group(1)] = widget
    assert sorted(found) == sorted(
        ["GPUUtilization", "GPUMemoryUtilization", "CPUUtilization", "MemoryUtilization", "DiskUtilization"]
    )
    for name in ("GPUUtilization", "GPUMemoryUtilization"):
        props = found[name]["properties"]
        assert "summed over the host's GPUs" in props["title"]
        # default: every type the trainer image runs on is allowed: 1-GPU p5.4xlarge, 8-GPU hosts (not the
        # 4-GPU GB200 hosts: arm64 CPUs)
        assert [a["value"] for a in props["annotations"]["horizontal"]] == [100, 800]
        assert props["metrics"][0][-1]["label"] == "${PROP('Dim.Host')}"
    assert "summed over the host's vCPUs" in found["CPUUtilization"]["properties"]["title"]
    assert "annotations" not in found["MemoryUtilization"]["properties"]


def test_gpu_annotations_follow_the_allowed_instance_types(variant_synth):
    body = body_of(variant_synth.template_json)  # ml.p5.48xlarge and ml.p6-b200.48xlarge: 8 GPUs each
    gpu = [w for w in metric_widgets(body) if any('MetricName="GPUUtilization"' in e for e in expressions(w))]
    assert [a["value"] for a in gpu[0]["properties"]["annotations"]["horizontal"]] == [800]
    assert "800% = 8 GPUs" in json.dumps(body)


def test_training_progress_searches_the_metric_definitions_per_job(default_synth):
    body = body_of(default_synth.template_json)
    searched = set()
    for widget in metric_widgets(body):
        for expression in expressions(widget):
            match = re.fullmatch(
                r"""SEARCH\('\{"/aws/sagemaker/TrainingJobs",TrainingJobName\} MetricName="([^"]+)"', '(\w+)', 300\)""",
                expression,
            )
            if match:
                searched.add(match.group(1))
                statistic = "Maximum" if "peak_memory" in match.group(1) else "Average"
                assert match.group(2) == statistic
    defined = {d["Name"] for d in METRIC_DEFINITIONS}
    assert searched <= defined  # never a name SageMaker does not publish
    assert {
        "train:loss",
        "validation:loss",
        "train:tokens_per_sec",
        "train:mfu",
        "train:peak_memory_allocated_gb",
        "train:peak_memory_reserved_gb",
    } <= searched
    loss = widget_titled(body, "Loss")["properties"]["metrics"]  # both curves of a job in one graph
    assert ["validation:loss" in m[-1]["expression"] for m in loss] == [False, True]
    assert [m[-1]["label"] for m in loss] == [
        "${PROP('Dim.TrainingJobName')} train",
        "${PROP('Dim.TrainingJobName')} validation",
    ]
    memory = widget_titled(body, "Peak GPU memory (GB)")
    assert [m[-1]["label"] for m in memory["properties"]["metrics"]] == [
        "${PROP('Dim.TrainingJobName')} allocated",
        "${PROP('Dim.TrainingJobName')} reserved",
    ]


def test_trainer_metric_rejects_unknown_fields():
    assert widgets.trainer_metric("mfu") == "train:mfu"
    with pytest.raises(KeyError, match="trainer metric field 'mfu_percent'"):
        widgets.trainer_metric("mfu_percent")


def test_submitter_rows_keep_the_construct_metrics(default_synth):
    body = body_of(default_synth.template_json)
    refusals = widget_titled(body, "Refusals by error code")["properties"]["metrics"]
    assert [m[:2] for m in refusals] == [
        [submitter_settings.METRICS_NAMESPACE, submitter_settings.METRIC_REFUSALS]
    ] * len(submitter_settings.ERROR_CODES)
    assert widget_titled(body, "Duration (ms)")["properties"]["metrics"][0][1] == "Duration"


def test_training_plan_section_searches_every_plan_and_tiles_configured_ones(default_synth, alarm_synth):
    default = body_of(default_synth.template_json)
    for title, metric in (
        ("Available (idle) instances per plan", "AvailableInstanceCount"),
        ("In-use instances per plan", "InUseInstanceCount"),
        ("Hours until each plan ends", "HoursUntilEnd"),
    ):
        (expression,) = expressions(widget_titled(default, title))
        assert expression.startswith(
            f"""SEARCH('{{"TrainingPlatform/TrainingPlans",TrainingPlanName}} MetricName="{metric}"'"""
        )
    assert not [w for w in default["widgets"] if w.get("properties", {}).get("title", "").startswith("Plan ")]
    totals = widget_titled(default, "All usable plans (Active or Scheduled)")["properties"]["metrics"]
    assert [m[:2] for m in totals] == [["TrainingPlatform/TrainingPlans", n] for n in settings.INSTANCE_COUNT_METRICS]
    assert all(len(m) == 3 for m in totals)  # no dimension: the all-plans totals

    _, template, _ = alarm_synth
    body = body_of(template)
    for name in PLANS:
        tile = widget_titled(body, f"Plan {name}")["properties"]
        assert tile["view"] == "singleValue"
        assert [m[:4] for m in tile["metrics"]] == [
            ["TrainingPlatform/TrainingPlans", metric, "TrainingPlanName", name] for metric in settings.PLAN_METRICS
        ]


def test_job_outcomes_section(default_synth):
    body = body_of(default_synth.template_json)
    graph = widget_titled(body, "Job outcomes per hour")["properties"]
    assert [m[:4] for m in graph["metrics"]] == [
        ["TrainingPlatform/TrainingJobs", "TrainingJobOutcomes", "TrainingJobStatus", status]
        for status in ("Completed", "Failed", "Stopped")
    ]
    assert graph["stacked"] is True and all(m[-1]["period"] == 3600 for m in graph["metrics"])
    failures = widget_titled(body, "Recent failed jobs and their FailureReason")["properties"]
    log_group = default_synth.logical_id(default_synth.stack.observability.job_outcomes.log_group)
    assert failures["query"].startswith(f"SOURCE '${{{log_group}}}'")
    assert 'filter message = "training job ended" and training_job_status = "Failed"' in failures["query"]
    assert "failure_reason" in failures["query"]


def test_logs_section_queries_the_training_log_group_for_run_killers(default_synth):
    body = body_of(default_synth.template_json)
    queries = [
        w["properties"]["query"]
        for w in body["widgets"]
        if w["type"] == "log" and SAGEMAKER_NS in w["properties"]["query"]
    ]
    assert len(queries) == 2
    for query in queries:
        assert query.startswith(f"SOURCE '{SAGEMAKER_NS}'")
        for needle in (
            "CUDA out of memory",
            "NCCL error",
            r"\[trainer\] FAILED:",
            r"\[entrypoint\] invalid configuration:",
        ):
            assert needle in query


def test_log_patterns_match_the_lines_that_end_runs():
    combined = re.compile("|".join(widgets.TRAINING_LOG_ERRORS.values()))
    killers = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 178.35 GiB",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error",
        "RuntimeError: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "[rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE)",
        "[trainer] FAILED: CUDA out of memory on rank 0 at step 12 with model=gpt-8b",
        "[entrypoint] invalid configuration: hyperparameter batch_size: got -1; expected an integer >= 1",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    for line in killers:
        assert combined.search(line), line
    for line in (
        "[metrics] step=120 loss=3.2141 mfu=18.32",
        "[trainer] checkpoint saved at step 100",
        "NCCL INFO Channel 00/32",
    ):
        assert not combined.search(line), line
    # the trainer really writes the prefixes the dashboard looks for
    assert 'f"[trainer] FAILED: {reason}"' in (REPO_ROOT / "training" / "train.py").read_text()
    assert 'f"[entrypoint] invalid configuration: {exc}"' in (REPO_ROOT / "training" / "entrypoint.py").read_text()


# -- alarms -------------------------------------------------------------------------------------


def alarms_by_name(template) -> dict[str, dict]:
    found = {}
    for resource in list(resources_of(template, "AWS::CloudWatch::Alarm").values()) + list(
        resources_of(template, "AWS::CloudWatch::CompositeAlarm").values()
    ):
        found[resource["Properties"]["AlarmName"]] = resource["Properties"]
    return found


def test_alarm_set_thresholds_and_actions(alarm_synth):
    stack, template, _ = alarm_synth
    topic = {"Ref": logical_id(stack, stack.observability.alarm_topic.topic)}
    alarms = alarms_by_name(template)
    p = "TrainingPlatform/"
    assert sorted(alarms) == sorted(
        [p + "SubmitterErrors", p + "TrainingJobFailed", p + "ObservabilityFunctionErrors"]
        + [p + f"PlanIdleNearEnd-{name}" for name in PLANS]
        + [p + "PlansHaveNoAvailableInstances", p + "SubmissionsRefusedNoCapacity", p + "ReservedCapacityExhausted"]
        + [p + "RunWaitingForCapacity", p + "RunStalled", p + "RunContinuationDeadLetters"]
    )

    errors = alarms[p + "SubmitterErrors"]
    submitter = logical_id(stack, stack.submitter.function)
    assert (errors["Namespace"], errors["MetricName"], errors["Statistic"], errors["Period"]) == (
        "AWS/Lambda",
        "Errors",
        "Sum",
        300,
    )
    assert errors["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": submitter}}]
    assert (errors["ComparisonOperator"], errors["Threshold"], errors["EvaluationPeriods"]) == (
        "GreaterThanOrEqualToThreshold",
        1,
        1,
    )
    assert errors["AlarmActions"] == [topic] and errors["OKActions"] == [topic]
    assert errors["TreatMissingData"] == "notBreaching"

    failed = alarms[p + "TrainingJobFailed"]
    assert (failed["Namespace"], failed["MetricName"], failed["Statistic"]) == (
        "TrainingPlatform/TrainingJobs",
        "TrainingJobOutcomes",
        "Sum",
    )
    assert failed["Dimensions"] == [{"Name": "TrainingJobStatus", "Value": "Failed"}]
    assert (failed["Threshold"], failed["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert failed["AlarmActions"] == [topic] and "OKActions" not in failed

    functions = alarms[p + "ObservabilityFunctionErrors"]
    (expression,) = [m for m in functions["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "FILL(handler, 0) + FILL(publisher, 0)"
    inputs = {m["Id"]: m["MetricStat"]["Metric"] for m in functions["Metrics"] if "MetricStat" in m}
    assert {m["MetricName"] for m in inputs.values()} == {"Errors"}
    assert (functions["EvaluationPeriods"], functions["DatapointsToAlarm"]) == (3, 2)


def test_idle_plan_alarm_is_math_over_available_and_hours_with_n_from_context(alarm_synth):
    stack, template, _ = alarm_synth
    topic = {"Ref": logical_id(stack, stack.observability.alarm_topic.topic)}
    alarms = alarms_by_name(template)
    for name in PLANS:
        alarm = alarms[f"TrainingPlatform/PlanIdleNearEnd-{name}"]
        (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
        assert expression["Expression"] == "IF(hours > 0 AND hours <= 36 AND available > 0, available, 0)"
        assert expression["ReturnData"] is True
        inputs = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
        assert inputs["available"]["Metric"] == {
            "Namespace": "TrainingPlatform/TrainingPlans",
            "MetricName": "AvailableInstanceCount",
            "Dimensions": [{"Name": "TrainingPlanName", "Value": name}],
        }
        assert inputs["hours"]["Metric"]["MetricName"] == "HoursUntilEnd"
        assert inputs["available"]["Stat"] == inputs["hours"]["Stat"] == "Minimum"
        assert inputs["available"]["Period"] == 900
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
        assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (2, 2)
        # the description's duration is the alarm's own (periods x period), not a figure written beside it
        minutes = alarm["EvaluationPeriods"] * inputs["available"]["Period"] // 60
        assert f"has had idle (available) instances for {minutes} minutes" in alarm["AlarmDescription"]
        assert alarm["AlarmActions"] == [topic]


def test_capacity_exhausted_is_a_composite_of_no_available_instances_and_nocapacity_refusals(alarm_synth):
    stack, template, _ = alarm_synth
    topic = {"Ref": logical_id(stack, stack.observability.alarm_topic.topic)}
    alarms = alarms_by_name(template)
    exhausted = alarms["TrainingPlatform/PlansHaveNoAvailableInstances"]
    assert (exhausted["Namespace"], exhausted["MetricName"], exhausted["Statistic"]) == (
        "TrainingPlatform/TrainingPlans",
        "AvailableInstanceCount",
        "Maximum",
    )
    assert "Dimensions" not in exhausted  # the all-plans total
    assert (exhausted["ComparisonOperator"], exhausted["Threshold"]) == ("LessThanOrEqualToThreshold", 0)
    refusing = alarms["TrainingPlatform/SubmissionsRefusedNoCapacity"]
    assert (refusing["Namespace"], refusing["MetricName"]) == (
        submitter_settings.METRICS_NAMESPACE,
        submitter_settings.METRIC_REFUSALS,
    )
    assert {"Name": "ErrorCode", "Value": "NoCapacity"} in refusing["Dimensions"]
    assert "AlarmActions" not in exhausted and "AlarmActions" not in refusing  # only the composite notifies

    composite = alarms["TrainingPlatform/ReservedCapacityExhausted"]
    summary = {a.name: a for a in alarm_summaries(template)}["TrainingPlatform/ReservedCapacityExhausted"]
    assert (
        summary.watches
        == "(ALARM(TrainingPlatform/PlansHaveNoAvailableInstances) AND ALARM(TrainingPlatform/SubmissionsRefusedNoCapacity))"
    )
    assert composite["AlarmActions"] == [topic] and composite["OKActions"] == [topic]


def test_default_stack_has_no_per_plan_alarms(default_synth):
    names = set(alarms_by_name(default_synth.template_json))
    assert not [n for n in names if "PlanIdleNearEnd" in n]
    assert "TrainingPlatform/ReservedCapacityExhausted" in names  # plans may be added at run time


def test_alarm_status_widget_lists_every_alarm(alarm_synth):
    _, template, _ = alarm_synth
    (status,) = [w for w in body_of(template)["widgets"] if w["type"] == "alarm"]
    listed = {arn.rsplit(":alarm:", 1)[1] for arn in status["properties"]["alarms"]}
    assert listed == set(alarms_by_name(template))


# -- topic and subscriptions ---------------------------------------------------------------------


def test_alarm_topic_is_kms_encrypted_tls_only_and_subscribed_from_context(alarm_synth):
    stack, template, _ = alarm_synth
    ((topic_id, topic),) = resources_of(template, "AWS::SNS::Topic").items()
    key_id = logical_id(stack, stack.observability.alarm_topic.key)
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    key = template["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Delete"  # removalPolicy=destroy in this synth
    (cloudwatch_use,) = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "CloudWatchAlarmsPublish"
    ]
    assert cloudwatch_use["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert sorted(cloudwatch_use["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    (policy,) = resources_of(template, "AWS::SNS::TopicPolicy").values()
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]
    (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

    subscriptions = sorted(
        (s["Properties"]["Protocol"], s["Properties"]["Endpoint"])
        for s in resources_of(template, "AWS::SNS::Subscription").values()
    )
    assert subscriptions == [("email", "ml-oncall@example.com"), ("https", ALARM_CONTEXT["alarmHttpsEndpoints"][0])]
    assert all(
        s["Properties"]["TopicArn"] == {"Ref": topic_id}
        for s in resources_of(template, "AWS::SNS::Subscription").values()
    )
    (slack,) = resources_of(template, "AWS::Chatbot::SlackChannelConfiguration").values()
    assert (slack["Properties"]["SlackWorkspaceId"], slack["Properties"]["SlackChannelId"]) == (
        "T0123ABCD",
        "C0456EFGH",
    )
    assert slack["Properties"]["SnsTopicArns"] == [{"Ref": topic_id}]
    role_id = slack["Properties"]["IamRoleArn"]["Fn::GetAtt"][0]
    assert "ManagedPolicyArns" not in template["Resources"][role_id]["Properties"]  # relays only, no permissions


ALARM_ARN_PATTERN = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TrainingPlatform/*"
SOURCE_CONDITIONS = {"StringEquals": {"aws:SourceAccount": ACCOUNT}, "ArnLike": {"aws:SourceArn": ALARM_ARN_PATTERN}}


def test_cloudwatch_may_publish_for_this_accounts_platform_alarms_only(alarm_synth):
    """The TopicPolicy replaces SNS's default policy: without an Allow for CloudWatch no alarm notifies anyone."""
    stack, template, _ = alarm_synth
    topic = {"Ref": logical_id(stack, stack.observability.alarm_topic.topic)}
    (policy,) = resources_of(template, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert len(statements) == 2
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny == {
        "Action": "sns:Publish",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
        "Principal": "*",
        "Resource": topic,
        "Sid": "AllowPublishThroughSSLOnly",
    }
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]
    assert allow == {
        "Action": "sns:Publish",
        "Condition": SOURCE_CONDITIONS,
        "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"},
        "Resource": topic,
        "Sid": "CloudWatchAlarmsPublish",
    }


def test_the_topic_key_lets_cloudwatch_encrypt_for_the_same_alarms_only(alarm_synth):
    stack, template, _ = alarm_synth
    key = template["Resources"][logical_id(stack, stack.observability.alarm_topic.key)]
    services = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s["Principal"]]
    assert services == [
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Condition": SOURCE_CONDITIONS,
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Resource": "*",
            "Sid": "CloudWatchAlarmsPublish",
        }
    ]


def test_every_notifying_alarm_matches_the_publish_condition_and_nothing_else_does(alarm_synth):
    stack, template, _ = alarm_synth
    observability = stack.observability
    assert observability.alarm_name_prefix == observability.alarm_topic.alarm_name_prefix == "TrainingPlatform/"
    topic = {"Ref": logical_id(stack, observability.alarm_topic.topic)}
    notifying = [
        name
        for name, props in alarms_by_name(template).items()
        if topic in props.get("AlarmActions", []) + props.get("OKActions", [])
    ]
    assert len(notifying) == 9  # 3 platform alarms, 2 plans, the composite, 3 run alarms
    for name in notifying:
        assert fnmatch.fnmatchcase(f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{name}", ALARM_ARN_PATTERN), name
    for elsewhere in (
        f"arn:aws:cloudwatch:{REGION}:210987654321:alarm:TrainingPlatform/SubmitterErrors",  # another account
        f"arn:aws:cloudwatch:eu-west-1:{ACCOUNT}:alarm:TrainingPlatform/SubmitterErrors",  # another region
        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:OtherTeam-SubmitterErrors",  # another stack's alarm
        # a sibling stack named TrainingPlatform-Dev: its alarms, and the old "<stack>-" names it would have had
        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TrainingPlatform-Dev/SubmitterErrors",
        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TrainingPlatform-Dev-SubmitterErrors",
        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TrainingPlatform-SubmitterErrors",
        f"arn:aws:events:{REGION}:{ACCOUNT}:rule/TrainingPlatform-rule",  # another service
    ):
        assert not fnmatch.fnmatchcase(elsewhere, ALARM_ARN_PATTERN), elsewhere
    # nothing else publishes: no EventBridge rule targets the topic
    for rule in resources_of(template, "AWS::Events::Rule").values():
        assert topic not in [t["Arn"] for t in rule["Properties"]["Targets"]]


def test_environment_agnostic_publish_condition_uses_the_deploy_time_account_and_region(default_synth):
    (policy,) = default_synth.of_type("AWS::SNS::TopicPolicy").values()
    (allow,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert allow["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":cloudwatch:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":alarm:TrainingPlatform/*",
            ],
        ]
    }


def test_slack_configuration_name_is_the_one_deployed_before_and_carries_the_channel(alarm_synth):
    _, template, _ = alarm_synth
    (slack,) = resources_of(template, "AWS::Chatbot::SlackChannelConfiguration").values()
    # account-unique through the channel (Chatbot configures a channel once per account); unchanged from the
    # previous release, since a rename replaces the configuration and the replacement is refused for the channel
    assert slack["Properties"]["ConfigurationName"] == "TrainingPlatform-alarms-C0456EFGH"


# Physical names: (property, scope). "account": unique in the account across regions (must carry the region
# and the stack name); "channel": unique in the account through the Slack channel, which AWS Chatbot configures
# once per account (must carry the channel and the stack name); "region": unique per account and region (must
# carry the stack name).
NAME_PROPERTIES = {
    "AWS::CloudWatch::Dashboard": ("DashboardName", "account"),
    "AWS::Chatbot::SlackChannelConfiguration": ("ConfigurationName", "channel"),
    "AWS::IAM::Role": ("RoleName", "account"),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName", "account"),
    "AWS::S3::Bucket": ("BucketName", "account"),  # in fact unique across all accounts
    "AWS::CloudWatch::Alarm": ("AlarmName", "region"),
    "AWS::CloudWatch::CompositeAlarm": ("AlarmName", "region"),
    "AWS::SSM::Parameter": ("Name", "region"),
    "AWS::Lambda::Function": ("FunctionName", "region"),
    "AWS::Logs::LogGroup": ("LogGroupName", "region"),
    "AWS::ECR::Repository": ("RepositoryName", "region"),
    "AWS::DynamoDB::Table": ("TableName", "region"),
    "AWS::SNS::Topic": ("TopicName", "region"),
    "AWS::Events::Rule": ("Name", "region"),
    "AWS::SQS::Queue": ("QueueName", "region"),
    "AWS::KMS::Key": (None, None),  # no name (aliases would be AWS::KMS::Alias)
}
UNNAMED_TYPES = {
    "AWS::IAM::Policy",  # PolicyName is scoped to the role it is attached to
    "AWS::Lambda::Permission",
    "AWS::Lambda::EventInvokeConfig",
    "AWS::S3::BucketPolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::Subscription",
    "Custom::CDKECRDeployment",
    "Custom::S3AutoDeleteObjects",
}


@pytest.mark.parametrize("fixture", ["default_synth", "variant_synth", "alarm_synth"])
def test_explicit_names_are_unique_where_the_service_needs_them_to_be(request, fixture):
    synth = request.getfixturevalue(fixture)
    template = synth[1] if isinstance(synth, tuple) else synth.template_json
    region_mark = json.dumps({"Ref": "AWS::Region"}) if fixture == "default_synth" else REGION
    named = 0
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        assert kind in NAME_PROPERTIES or kind in UNNAMED_TYPES, f"classify {kind}: does it take a physical name?"
        prop, scope = NAME_PROPERTIES.get(kind, (None, None))
        if prop is None or prop not in resource["Properties"]:
            continue
        named += 1
        name = json.dumps(resource["Properties"][prop])
        if any(json.dumps({"Ref": other}) in name for other in template["Resources"]):
            continue  # derived from a name CloudFormation generated (e.g. /aws/lambda/<function>): unique already
        assert "TrainingPlatform" in name, (logical_id, name)
        if scope == "account":
            assert region_mark in name, (logical_id, name)
        if scope == "channel":
            assert resource["Properties"]["SlackChannelId"] in name, (logical_id, name)
    assert named >= 5  # alarms, the parameter and the dashboard at least


def test_default_stack_has_a_topic_and_no_subscriptions(default_synth):
    assert len(default_synth.of_type("AWS::SNS::Topic")) == 1
    assert default_synth.of_type("AWS::SNS::Subscription") == {}
    assert default_synth.of_type("AWS::Chatbot::SlackChannelConfiguration") == {}
    topic_id = default_synth.logical_id(default_synth.stack.observability.alarm_topic.topic)
    assert default_synth.template_json["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic_id}


def test_alarm_synth_is_nag_and_cfn_lint_clean(alarm_synth):
    from trainctl.synth_summary import lint_template

    _, _, outdir = alarm_synth  # app.synth() raised on any unacknowledged cdk-nag finding
    report = json.loads((outdir / "validation-report.json").read_text())
    assert [v for plugin in report["pluginReports"] for v in plugin.get("violations", [])] == []
    errors = [m for m in lint_template(outdir / "TrainingPlatform.template.json", REGION) if m.severity == "error"]
    assert errors == []


# -- functions and rules ------------------------------------------------------------------------


def test_plan_metrics_schedule_every_five_minutes(default_synth):
    publisher = default_synth.stack.observability.plan_metrics
    rule = default_synth.resources[default_synth.logical_id(publisher.rule)]["Properties"]
    assert rule["ScheduleExpression"] == "rate(5 minutes)"
    fn_id = default_synth.logical_id(publisher.function)
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    permissions = [
        p["Properties"]
        for p in default_synth.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    ]
    assert permissions == [
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [fn_id, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [default_synth.logical_id(publisher.rule), "Arn"]},
        }
    ]


def test_job_state_rule_pattern(default_synth):
    handler = default_synth.stack.observability.job_outcomes
    rule = default_synth.resources[default_synth.logical_id(handler.rule)]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Training Job State Change"],
        "detail": {"TrainingJobStatus": ["Completed", "Failed", "Stopped"]},
    }
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [default_synth.logical_id(handler.function), "Arn"]}


@pytest.mark.parametrize(
    ("fixture", "days", "deletion"), [("default_synth", 90, "Retain"), ("variant_synth", 30, "Delete")]
)
def test_functions_runtime_environment_logs_and_table(request, fixture, days, deletion):
    synth = request.getfixturevalue(fixture)
    observability = synth.stack.observability
    for construct, handler in (
        (observability.plan_metrics, obs_functions.PLAN_METRICS_HANDLER),
        (observability.job_outcomes, obs_functions.JOB_EVENTS_HANDLER),
    ):
        props = synth.resources[synth.logical_id(construct.function)]["Properties"]
        assert (props["Handler"], props["Runtime"], props["Architectures"]) == (handler, "python3.13", ["arm64"])
        # the timeout the runtime's deadline stands for (a context without one is given the same), and Lambda's
        # retries of a failed invocation, which the runtime's DeadlineExceeded names (the publisher: its schedule)
        timeout, retries = {
            obs_functions.PLAN_METRICS_HANDLER: (settings.PLAN_METRICS_TIMEOUT_S, 0),
            obs_functions.JOB_EVENTS_HANDLER: (settings.JOB_EVENTS_TIMEOUT_S, settings.JOB_EVENTS_RETRY_ATTEMPTS),
        }[handler]
        (invoke,) = [
            c["Properties"]
            for c in synth.of_type("AWS::Lambda::EventInvokeConfig").values()
            if c["Properties"]["FunctionName"] == {"Ref": synth.logical_id(construct.function)}
        ]
        assert (props["Timeout"], invoke["MaximumRetryAttempts"]) == (timeout, retries)
        assert props["LoggingConfig"]["LogGroup"] == {"Ref": synth.logical_id(construct.log_group)}
        log_group = synth.resources[synth.logical_id(construct.log_group)]
        assert log_group["Properties"]["RetentionInDays"] == days and log_group["DeletionPolicy"] == deletion
    env = synth.resources[synth.logical_id(observability.plan_metrics.function)]["Properties"]["Environment"][
        "Variables"
    ]
    assert env[settings.ENV_TRAINING_PLAN_ARNS_PARAMETER] == {
        "Ref": synth.logical_id(synth.stack.training_plans.parameter)
    }
    table_id = synth.logical_id(observability.job_outcomes.table)
    env = synth.resources[synth.logical_id(observability.job_outcomes.function)]["Properties"]["Environment"][
        "Variables"
    ]
    assert env[settings.ENV_IDEMPOTENCY_TABLE] == {"Ref": table_id}
    assert env[settings.ENV_IDEMPOTENCY_TTL_SECONDS] == str(7 * 24 * 3600)
    table = synth.resources[table_id]
    assert table["Properties"]["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert table["Properties"]["BillingMode"] == "PAY_PER_REQUEST"
    assert table["DeletionPolicy"] == deletion


def role_statements(synth, role) -> list[dict]:
    role_id = synth.logical_id(role)
    found = []
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def actions_of(statements) -> set[str]:
    out = set()
    for s in statements:
        out.update(s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    return out


def test_function_roles_are_least_privilege(default_synth):
    observability = default_synth.stack.observability
    publisher = role_statements(default_synth, observability.plan_metrics.role)
    assert actions_of(publisher) == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "cloudwatch:PutMetricData",
        "sagemaker:DescribeTrainingPlan",
        "ssm:GetParameter",
    }
    handler = role_statements(default_synth, observability.job_outcomes.role)
    assert actions_of(handler) == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "cloudwatch:PutMetricData",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    }
    for statements, namespace in (
        (publisher, settings.PLAN_METRICS_NAMESPACE),
        (handler, settings.JOB_METRICS_NAMESPACE),
    ):
        (put,) = [s for s in statements if s["Action"] == "cloudwatch:PutMetricData"]
        assert put["Condition"] == {"StringEquals": {"cloudwatch:namespace": namespace}}
    (dynamo,) = [s for s in handler if "dynamodb:PutItem" in s["Action"]]
    assert dynamo["Resource"] == {"Fn::GetAtt": [default_synth.logical_id(observability.job_outcomes.table), "Arn"]}
    (describe,) = [s for s in publisher if s["Action"] == "sagemaker:DescribeTrainingPlan"]
    assert json.dumps(describe["Resource"]).endswith(':training-plan/*"]]}')


def test_observability_package_is_lean_and_imports_on_its_own(default_synth):
    import os
    import subprocess
    import sys

    observability = default_synth.stack.observability
    keys = {
        default_synth.resources[default_synth.logical_id(c.function)]["Properties"]["Code"]["S3Key"]
        for c in (observability.job_outcomes, observability.plan_metrics)
    }
    (key,) = keys  # one package, both functions
    submitter_id = default_synth.logical_id(default_synth.stack.submitter.function)
    assert key != default_synth.resources[submitter_id]["Properties"]["Code"]["S3Key"]
    assets = json.loads((default_synth.outdir / "TrainingPlatform.assets.json").read_text())
    package = default_synth.outdir / assets["files"][key.removesuffix(".zip")]["source"]["path"]
    top = {p.name for p in package.iterdir()}
    assert {"platform_constructs", "platform_spec", "boto3", "botocore", "aws_lambda_powertools"} <= top
    assert not {"training", "planner", "model_families", "torch", "aws_cdk", "moto"} & top
    # the runtime and the code every runtime shares (the deadline on AWS calls); no submitter code
    assert sorted(p.name for p in (package / "platform_constructs").iterdir()) == ["lambda_runtime", "observability"]
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(package)!r}]\n"
        "import platform_constructs.observability.runtime.plan_metrics as p\n"
        "import platform_constructs.observability.runtime.job_events as j\n"
        "assert callable(p.lambda_handler) and callable(j.lambda_handler)\n"
        "from aws_lambda_powertools.utilities.idempotency import idempotent_function\n"
        "assert not {'aws_cdk', 'jsii', 'constructs', 'torch'} & set(sys.modules), sorted(sys.modules)\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": REGION}
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, env=env, cwd=package, timeout=120
    )
    assert result.returncode == 0, result.stderr


# -- the export command on the session synth -----------------------------------------------------


def test_export_dashboard_writes_json_png_and_lists_alarms(default_synth, tmp_path):
    result = export_dashboard(tmp_path / "out" / "dashboard.json", template=default_synth.template_json)
    json_path, png_path, alarms = result
    assert json.loads(json_path.read_text()) == body_of(default_synth.template_json)
    assert png_path == tmp_path / "out" / "dashboard.png"
    header = png_path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert width >= 1600 and height > width  # 24 columns across, the sections below each other
    names = {a.name for a in alarms}
    assert {
        "TrainingPlatform/SubmitterErrors",
        "TrainingPlatform/TrainingJobFailed",
        "TrainingPlatform/ReservedCapacityExhausted",
    } <= names
    failed = next(a for a in alarms if a.name == "TrainingPlatform/TrainingJobFailed")
    assert failed.watches == "TrainingPlatform/TrainingJobs TrainingJobOutcomes{TrainingJobStatus=Failed} Sum/300s"
    assert failed.threshold == ">= 1 for 1 of 1 x 300 s (missing data: notBreaching)"
    assert failed.actions == ("ALARM -> SNS topic 'TrainingPlatform alarms'",)
