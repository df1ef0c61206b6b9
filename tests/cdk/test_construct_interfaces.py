"""Constructs keep no ``props`` attribute and take other resources through interfaces (aws-cdk's
DESIGN_GUIDELINES.md, awslint rules props-no-property and ref-via-interface); their props structs are
keyword-only with every default described as behaviour; and the template's logical IDs stayed put.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from aws_cdk.assertions import Template

from constructs import Construct
from platform_constructs import buckets, execution_role, trainer_image, training_plans
from platform_constructs.observability import construct as observability
from platform_constructs.observability import functions, notifications
from platform_constructs.submitter import construct as submitter
from platform_constructs.submitter.runtime import settings

pytestmark = pytest.mark.xdist_group("cdk")

LOGICAL_IDS = Path(__file__).parent / "data" / "logical_ids.json"
CONSTRUCT_MODULES = (
    buckets,
    execution_role,
    trainer_image,
    training_plans,
    submitter,
    observability,
    functions,
    notifications,
)
ACCOUNT, REGION = "123456789012", "us-west-2"


# -- the template did not move ------------------------------------------------------------------


def logical_ids(synth) -> dict[str, list[str]]:
    """Every section's logical IDs; each image copy's, which follows the image on purpose, as a placeholder (the
    amd64 copy's ID is the one it had before imageArchitectures; an arm64 copy is added beside it)."""
    placeholders = {}
    for architecture, copy in synth.stack.trainer_image.copies.items():
        copy_id = synth.stack.resolve(copy.node.find_child("CustomResource").node.default_child.logical_id)
        suffix = "" if architecture == "amd64" else architecture.capitalize()
        assert re.fullmatch(rf"TrainerImageDeployment{suffix}[0-9a-f]{{24}}CustomResource[0-9A-F]{{8}}", copy_id)
        placeholders[copy_id] = f"TrainerImageDeployment{suffix}<copy id>CustomResource<hash>"
    found = {}
    for section in ("Resources", "Outputs", "Parameters", "Rules", "Conditions"):
        names = synth.template_json.get(section, {})
        found[section] = sorted(placeholders.get(n, n) for n in names)
    return found


@pytest.mark.parametrize("variant", ["default", "variant"])
def test_logical_ids_are_those_before_the_constructs_took_interfaces(request, variant):
    """Pinned from the commit before issue 13's construct changes (tests/cdk/data/logical_ids.json): a renamed
    construct ID would replace a deployed resource (and lose a bucket's or a table's data)."""
    synth = request.getfixturevalue(f"{variant}_synth")
    assert logical_ids(synth) == json.loads(LOGICAL_IDS.read_text())[variant]


# -- no props attribute -------------------------------------------------------------------------


def test_no_construct_of_ours_keeps_its_props(default_synth):
    ours = [
        c
        for c in default_synth.stack.node.find_all()
        if type(c).__module__.startswith(("platform_constructs", "stacks"))
    ]
    classes = {type(c).__name__ for c in ours}
    assert {"TrainerImage", "TrainingBuckets", "TrainingExecutionRole", "TrainingPlans", "JobSubmitter",
            "PlatformObservability", "PlanMetricsPublisher", "JobStateHandler", "AlarmTopic"} <= classes  # fmt: skip
    kept = sorted(
        f"{c.node.path} ({type(c).__name__})" for c in ours if "props" in vars(c) or hasattr(type(c), "props")
    )
    assert kept == []


# -- props structs ------------------------------------------------------------------------------


def props_classes() -> list[type]:
    found = {
        obj
        for module in CONSTRUCT_MODULES
        for obj in vars(module).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
        and (obj.__name__.endswith("Props") or obj.__name__ == "InputLocation")
    }  # fmt: skip
    return sorted(found, key=lambda c: c.__name__)


def classes_in(hint) -> typing.Iterator[type]:
    if isinstance(hint, type) and not typing.get_args(hint):
        yield hint
    for argument in typing.get_args(hint):
        yield from classes_in(argument)
    origin = typing.get_origin(hint)
    if isinstance(origin, type) and origin is not types.UnionType:
        yield origin


def test_every_construct_has_its_props_struct():
    names = {c.__name__ for c in props_classes()}
    assert {"TrainingBucketsProps", "TrainingExecutionRoleProps", "InputLocation", "TrainerImageProps", "TrainingPlansProps",
            "JobSubmitterProps", "PlatformObservabilityProps", "PlanMetricsPublisherProps", "JobStateHandlerProps",
            "AlarmTopicProps"} == names  # fmt: skip


@pytest.mark.parametrize("props", props_classes(), ids=lambda c: c.__name__)
def test_props_take_resources_through_interfaces(props):
    """No prop is typed with a construct class (ours or an L2 such as ``s3.Bucket``): ``s3.IBucket``,
    ``iam.IRole``, ``ssm.IStringParameter``, ``ITrainerImage``, ``ISubmitterMetrics`` instead."""
    hints = typing.get_type_hints(props)
    concrete = {
        name: c.__qualname__ for name, hint in hints.items() for c in classes_in(hint) if issubclass(c, Construct)
    }
    assert concrete == {}


@pytest.mark.parametrize("props", props_classes(), ids=lambda c: c.__name__)
def test_props_are_keyword_only_frozen_and_document_each_default_as_behaviour(props):
    assert props.__dataclass_params__.frozen
    fields = dataclasses.fields(props)
    assert [f.name for f in fields if not f.kw_only] == []
    entries = attribute_entries(props.__doc__ or "")
    assert sorted(entries) == sorted(f.name for f in fields), "every prop documented, and only props"
    for f in fields:
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        text = " ".join(entries[f.name].split())
        if has_default:
            assert "Default:" in text, f"{props.__name__}.{f.name}: default not described"
            assert not re.search(r"Default:\s*(``)?None\b", text), (
                f"{props.__name__}.{f.name}: default described as None"
            )
        else:
            assert "Default:" not in text, f"{props.__name__}.{f.name}: required, yet a default is described"
            assert type(None) not in typing.get_args(typing.get_type_hints(props)[f.name]), (
                f"{props.__name__}.{f.name}: optional (may be None) but required"
            )


def attribute_entries(doc: str) -> dict[str, str]:
    """``name -> text`` of a Google-style ``Attributes:`` section."""
    lines = doc.split("Attributes:", 1)[1].splitlines() if "Attributes:" in doc else []
    entries: dict[str, str] = {}
    indent = None
    for line in lines:
        if not line.strip():
            continue
        current = len(line) - len(line.lstrip())
        match = re.match(r"(\w+): (.*)", line.strip())
        if indent is None:
            indent = current
        if current < indent:
            break
        if current == indent and match:
            name = match.group(1)
            entries[name] = match.group(2)
        elif entries:
            entries[name] += " " + line.strip()
    return entries


# -- resources from elsewhere -------------------------------------------------------------------


class ImageElsewhere:
    """A trainer image that is not a TrainerImage: a URI and something to wait for."""

    def __init__(self, scope: Construct) -> None:
        self.image_uris = {"amd64": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/shared-trainer:v7"}
        self.deployment = cdk.CfnWaitConditionHandle(scope, "ImageCopied")


SHARED_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/0b5e7c1a-1111-4222-8333-444455556666"


def test_submitter_refuses_an_output_bucket_without_a_kms_key():
    # every job's output is encrypted with the output bucket's key (OutputDataConfig.KmsKeyId)
    stack = imported_stack()
    bare = s3.Bucket.from_bucket_name(stack, "Bare", "shared-output")
    with pytest.raises(ValueError, match=r"^JobSubmitterProps.output_bucket: the bucket has no KMS key; expected"):
        submitter.JobSubmitter(stack, "Submitter", submitter_props(stack, output_bucket=bare))


def imported_stack() -> cdk.Stack:
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})  # Lambda packages are not needed to read the template
    return cdk.Stack(app, "Consumer", env=cdk.Environment(account=ACCOUNT, region=REGION))


def submitter_props(stack: cdk.Stack, **overrides) -> submitter.JobSubmitterProps:
    values = {
        "trainer_image": ImageElsewhere(stack),
        "execution_role": iam.Role.from_role_arn(
            stack, "Role", f"arn:aws:iam::{ACCOUNT}:role/shared/SageMakerTraining"
        ),
        "data_bucket": s3.Bucket.from_bucket_name(stack, "Data", "shared-datasets"),
        "checkpoint_bucket": s3.Bucket.from_bucket_name(stack, "Checkpoints", "shared-checkpoints"),
        "output_bucket": s3.Bucket.from_bucket_attributes(
            stack, "Output", bucket_name="shared-output", encryption_key=kms.Key.from_key_arn(stack, "Key", SHARED_KEY)
        ),
        "plan_arns_parameter": ssm.StringParameter.from_string_parameter_name(
            stack, "Plans", "/shared/training-plan-arns"
        ),
        "default_instance_type": "ml.p5.48xlarge",
        "allowed_instance_types": ["ml.p5.48xlarge"],
    }
    values.update(overrides)
    return submitter.JobSubmitterProps(**values)


def test_submitter_takes_imported_resources_through_their_interfaces():
    stack = imported_stack()
    job_submitter = submitter.JobSubmitter(stack, "Submitter", submitter_props(stack))
    template = Template.from_stack(stack)
    # three functions of one package: the submitter, the reader and the run continuation
    functions = template.find_resources("AWS::Lambda::Function")
    assert len(functions) == 3
    ((_function_id, function),) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": submitter.HANDLER, "Role": {"Fn::GetAtt": [
            stack.resolve(job_submitter.role.node.default_child.logical_id), "Arn"]}}}
    ).items()  # fmt: skip
    env = function["Properties"]["Environment"]["Variables"]
    assert json.loads(env[settings.ENV_TRAINER_IMAGE_URIS]) == {
        "amd64": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/shared-trainer:v7"
    }
    assert env[settings.ENV_EXECUTION_ROLE_ARN] == f"arn:aws:iam::{ACCOUNT}:role/shared/SageMakerTraining"
    assert env[settings.ENV_TRAINING_PLAN_ARNS_PARAMETER] == "/shared/training-plan-arns"
    assert env[settings.ENV_DATA_BUCKET] == "shared-datasets"
    assert env[settings.ENV_OUTPUT_KMS_KEY_ARN] == SHARED_KEY  # the imported output bucket's key
    assert stack.resolve(stack.get_logical_id(stack.node.find_child("ImageCopied"))) in function["DependsOn"]
    role_id = stack.resolve(job_submitter.role.node.default_child.logical_id)
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert any(
        s["Action"] == "iam:PassRole" and s["Resource"] == f"arn:aws:iam::{ACCOUNT}:role/shared/SageMakerTraining"
        for s in statements
    )
    reads = [
        s for s in statements if "ssm:GetParameter" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert len(reads) == 1 and "parameter/shared/training-plan-arns" in json.dumps(stack.resolve(reads[0]["Resource"]))
    assert isinstance(job_submitter, submitter.ISubmitterMetrics)
    assert isinstance(job_submitter, submitter.IRunMetrics)


def test_submitter_refuses_an_image_without_its_interface_and_builds_nothing():
    stack = imported_stack()
    props = submitter_props(stack, trainer_image=f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/trainer:v7")
    with pytest.raises(
        ValueError,
        match=r"JobSubmitterProps.trainer_image: got str; expected an ITrainerImage \(image_uris and deployment\)",
    ):
        submitter.JobSubmitter(stack, "Refused", props)
    assert not stack.node.find_child("Refused").node.children


class MetricsElsewhere:
    """The submitter's metrics from somewhere else (another namespace): what observability needs, nothing more."""

    def _metric(self, name: str, **props) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace="Elsewhere/Submitter", metric_name=name, **props)

    def metric_invocations(self, **props):
        return self._metric("Invocations", **props)

    def metric_errors(self, **props):
        return self._metric("Errors", **props)

    def metric_throttles(self, **props):
        return self._metric("Throttles", **props)

    def metric_duration(self, **props):
        return self._metric("Duration", **props)

    def metric_submissions(self, capacity_type, **props):
        return self._metric(f"Submissions-{capacity_type}", **props)

    def metric_refusals(self, error_code, **props):
        return self._metric(f"Refusals-{error_code}", **props)


def test_observability_reads_any_submitter_metrics_and_an_imported_plan_parameter():
    stack = imported_stack()
    plans = ssm.StringParameter.from_string_parameter_name(stack, "Plans", "/shared/training-plan-arns")
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/shared-week"
    watched = observability.PlatformObservability(
        stack,
        "Observability",
        observability.PlatformObservabilityProps(
            submitter=MetricsElsewhere(), instance_types=["ml.p5.48xlarge"], plan_arns_parameter=plans, plan_arns=[arn]
        ),
    )
    assert watched.plan_names == ["shared-week"]
    template = Template.from_stack(stack)
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
    }
    errors = alarms["Consumer/SubmitterErrors"]
    assert (errors["Namespace"], errors["MetricName"]) == ("Elsewhere/Submitter", "Errors")
    refusals = alarms["Consumer/SubmissionsRefusedNoCapacity"]
    assert (refusals["Namespace"], refusals["MetricName"]) == ("Elsewhere/Submitter", "Refusals-NoCapacity")
    assert "Consumer/PlanIdleNearEnd-shared-week" in alarms
    publisher = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": functions.PLAN_METRICS_HANDLER}}
    )
    (publisher,) = publisher.values()
    assert (
        publisher["Properties"]["Environment"]["Variables"]["TRAINING_PLAN_ARNS_PARAMETER"]
        == "/shared/training-plan-arns"
    )
    body = json.dumps(stack.resolve(template.find_resources("AWS::CloudWatch::Dashboard")))
    assert "800% = 8 GPUs" in body  # the Fleet note sized by the instance types given


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"submitter": object()}, r"PlatformObservabilityProps.submitter: got object; expected the submitter's metrics \(ISubmitterMetrics"),
        ({"plan_arns": [f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p"]},
         r"PlatformObservabilityProps.plan_arns: got 1 plan\(s\) without plan_arns_parameter; expected the parameter too"),
        ({"plan_arns": ["arn:aws:s3:::bucket"], "with_parameter": True},
         r"PlatformObservabilityProps.plan_arns\[0\]: got 'arn:aws:s3:::bucket'; expected a SageMaker training-plan ARN"),
        ({"plan_arns": [f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p", f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:training-plan/p"],
          "with_parameter": True},
         r"PlatformObservabilityProps.plan_arns: plan names \['p'\] occur more than once; expected each plan once"),
        ({"instance_types": ["ml.p5.48xlarge", "ml.nope.1xlarge"]},
         r"PlatformObservabilityProps.instance_types: got \['ml.nope.1xlarge'\], not in the instance catalogue; expected some of"),
    ],
)  # fmt: skip
def test_observability_refuses_bad_props_naming_the_prop_and_builds_nothing(overrides, message):
    stack = imported_stack()
    if overrides.pop("with_parameter", False):
        overrides["plan_arns_parameter"] = ssm.StringParameter.from_string_parameter_name(stack, "Plans", "/p")
    props = observability.PlatformObservabilityProps(**{"submitter": MetricsElsewhere(), **overrides})
    with pytest.raises(ValueError, match=message):
        observability.PlatformObservability(stack, "Refused", props)
    assert not stack.node.find_child("Refused").node.children
