"""Grace-Blackwell (GB200) end to end, short of the emulator (tests/devtools/test_emulator.py's GB200 job): the
catalogue's GB200 host against botocore's SageMaker model, the NVLink domain the planner models across instances,
the ``imageArchitectures`` option, one image asset per architecture, and each job's image chosen by its instance's
host architecture, refused before anything is created where none was built."""

from __future__ import annotations

import json

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk import assertions

from planner import PlanInput, estimate
from platform_constructs.submitter.runtime import config as runtime_config
from platform_constructs.submitter.runtime import errors as runtime_errors
from platform_constructs.submitter.runtime import request as runtime_request
from platform_constructs.submitter.runtime import settings
from platform_spec import catalogue
from stacks.config import ConfigError, load_config
from stacks.platform_app import cdk_json_context

GB200 = "ml.p6e-gb200.36xlarge"
REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer"


def _enum(shape: str) -> set[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return set(model.shape_for(shape).enum)


def test_the_gb200_host_is_the_training_instance_type_sagemaker_accepts() -> None:
    host = catalogue.get_instance(GB200)
    assert GB200 in _enum("TrainingInstanceType") and GB200 in _enum("ReservedCapacityInstanceType")
    ultraservers = {t for t, spec in catalogue.INSTANCES.items() if spec.host_instance_type == GB200}
    assert ultraservers == {"ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72"}
    assert not ultraservers & _enum("TrainingInstanceType")  # a plan reserves them; jobs run on their hosts
    assert (host.cpu_architecture, host.gpus_per_instance, host.nvlink_domain_gpus) == ("arm64", 4, 72)
    assert catalogue.nvlink_domain_hosts(host) == 18  # 72 GPUs of an NVL72 UltraServer, 4 per host
    assert catalogue.nvlink_domain_hosts(catalogue.get_instance("ml.p6-b200.48xlarge")) == 1
    for field in ("cpu_architecture", "host_memory_gib", "nvlink_domain_gpus", "host_link_gb_s"):
        assert host.sources[field]  # each figure names its source


def test_the_image_architectures_are_the_catalogues_and_default_to_x86_64() -> None:
    assert catalogue.TRAINER_IMAGE_ARCHITECTURES == ("amd64", "arm64")
    assert catalogue.DEFAULT_IMAGE_ARCHITECTURES == ("amd64",)
    assert {spec.cpu_architecture for spec in catalogue.INSTANCES.values()} == {"amd64", "arm64"}
    assert catalogue.TRAINABLE_INSTANCE_TYPES == catalogue.INSTANCE_TYPES  # the planner plans every type
    assert catalogue.host_architecture_problem(GB200) is None
    assert catalogue.host_architecture_problem(GB200, ("amd64", "arm64")) is None
    assert catalogue.host_architecture_problem(GB200.upper(), ("amd64",)) == (
        f"{GB200} runs arm64 host CPUs and the deployment's trainer image is built for amd64 only (imageArchitectures)"
    )
    assert catalogue.host_architecture_problem("ml.m5.large", ("amd64",)) is None  # unknown: refused as unknown
    accepted = {"ml.p5.48xlarge", GB200, "ml.p6-b200.48xlarge", "ml.m5.large"}
    assert catalogue.deployable_instance_types(accepted, ("amd64",)) == ("ml.p5.48xlarge", "ml.p6-b200.48xlarge")
    assert catalogue.deployable_instance_types(accepted, ("amd64", "arm64")) == (
        "ml.p5.48xlarge",
        "ml.p6-b200.48xlarge",
        GB200,
    )
    with pytest.raises(catalogue.UnsupportedHostArchitectureError) as refused:
        catalogue.get_trainable_instance(GB200, ("amd64",))
    assert refused.value.field == "instance_type" and GB200 not in refused.value.expected


def _plan(instance_type: str, count: int, **changes) -> PlanInput:
    base = {
        "model": "gpt-8b",
        "precision": "mxfp8",
        "seq_length": 8192,
        "batch_size": 1,
        "activation_checkpointing": "full",
        "instance_type": instance_type,
        "instance_count": count,
    }
    return PlanInput(**{**base, **changes})


def test_the_planner_keeps_fsdp_on_nvlink_across_the_instances_of_one_gb200_domain() -> None:
    two = estimate(_plan(GB200, 2))  # 8 GPUs on two hosts of one UltraServer
    assert two.throughput.comm.link == "NVLink"
    assert two.throughput.comm.bandwidth_gb_s == pytest.approx(1800 / 2 * catalogue.NVLINK_EFFICIENCY)
    assert estimate(_plan(GB200, 18)).throughput.comm.link == "NVLink"  # 72 GPUs: the whole domain
    beyond = estimate(_plan(GB200, 19))  # 76 GPUs span two domains: EFA between them
    assert beyond.throughput.comm.link == "EFA v4"
    assert beyond.throughput.comm.bandwidth_gb_s < two.throughput.comm.bandwidth_gb_s
    b200 = estimate(_plan("ml.p6-b200.48xlarge", 2))  # 16 GPUs on two HGX hosts: EFA
    assert b200.throughput.comm.link == "EFA v4"
    assert two.throughput.comm.bandwidth_gb_s > b200.throughput.comm.bandwidth_gb_s
    # HSDP: the replica all-reduce of 18 hosts stays in the domain; of 19 it crosses EFA
    hsdp = [estimate(_plan(GB200, n, sharding_strategy="hybrid")).throughput.comm for n in (18, 19)]
    assert hsdp[0].allreduce_bytes / hsdp[0].allreduce_s > 4 * hsdp[1].allreduce_bytes / hsdp[1].allreduce_s


@pytest.mark.parametrize("sharding_strategy", ["full", "hybrid"])
def test_ultraservers_plan_as_their_hosts(sharding_strategy: str) -> None:
    """2 x ml.u-p6e-gb200x72 is 36 x ml.p6e-gb200.36xlarge (2 NVLink domains of 18 hosts): the same plan. Before,
    the UltraServer's EFA figure (the sum over its 18 hosts) was one ring's and its HSDP shard group was 72 GPUs
    where the trainer's node has 4: exposed communication and the recommendations differed."""
    host = catalogue.get_instance(GB200)
    for name, hosts in catalogue.GB200_ULTRASERVER_HOSTS.items():
        server = catalogue.get_instance(name)
        assert server.host is host and server.gpus_per_host == host.gpus_per_instance
        assert (server.gpus_per_instance, server.nvlink_domain_gpus) == (hosts * 4, hosts * 4)
        assert server.efa_bandwidth_gb_s == hosts * host.efa_bandwidth_gb_s  # the digest's 1800 and 3600 GB/s
        assert catalogue.nvlink_domain_hosts(server) == hosts
    base = {"model": "llama3-70b", "precision": "mxfp8", "seq_length": 8192, "batch_size": 1}
    plans = [
        estimate(PlanInput(instance_type=t, instance_count=n, sharding_strategy=sharding_strategy, **base))
        for t, n in ((GB200, 36), ("ml.u-p6e-gb200x72", 2))
    ]
    assert plans[0].resolved.world_size == plans[1].resolved.world_size == 144
    assert plans[0].resolved.shard_degree == plans[1].resolved.shard_degree
    assert plans[0].memory_gb == plans[1].memory_gb and plans[0].status == plans[1].status
    assert plans[0].throughput == plans[1].throughput
    assert plans[0].throughput.comm.link == ("EFA v4" if sharding_strategy == "full" else "NVLink")

    def advice(plan):  # the instance count a recommendation names is in each one's own units
        return [
            (r.kind, {k: v for k, v in r.changes.items() if k != "instance_count"}, r.after and r.after.throughput)
            for r in plan.recommendations
            if "instance_count" not in r.changes
        ]

    assert advice(plans[0]) == advice(plans[1])


def test_collectives_between_single_instance_domains_are_unchanged() -> None:
    p5 = catalogue.get_instance("ml.p5.48xlarge")
    assert catalogue.collective_bandwidth(p5, 8).link == "NVLink"
    across = catalogue.collective_bandwidth(p5, 16)
    assert (across.link, across.bytes_per_s) == ("EFA v2", pytest.approx(400e9 * catalogue.EFA_EFFICIENCY))
    replicas = catalogue.collective_bandwidth(p5, 2, per_host=1)  # HSDP: 8 such groups share the NICs
    assert replicas.bytes_per_s == pytest.approx(400e9 / 8 * catalogue.EFA_EFFICIENCY)


def _config(**images: str) -> runtime_config.SubmitterConfig:
    return runtime_config.SubmitterConfig(
        trainer_image_uris=images,
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        training_plan_arns_parameter="/plans",
    )


def test_each_job_runs_the_image_of_its_instances_host_architecture() -> None:
    both = _config(amd64=f"{REGISTRY}:x86", arm64=f"{REGISTRY}:arm")
    assert both.trainer_image_for(GB200) == f"{REGISTRY}:arm"
    assert both.trainer_image_for("ml.p6-b200.48xlarge") == f"{REGISTRY}:x86"
    assert GB200 in runtime_request.allowed_instance_types(both)
    request = runtime_request.parse_request({"instance_type": GB200, "inputs": {"train": "x/"}}, both)
    assert runtime_request.check_instance(request, both).cpu_architecture == "arm64"


def test_an_instance_whose_architecture_was_not_built_is_refused_naming_both() -> None:
    x86 = _config(amd64=f"{REGISTRY}:x86")
    assert GB200 not in runtime_request.allowed_instance_types(x86)
    request = runtime_request.parse_request({"instance_type": GB200, "inputs": {"train": "x/"}}, x86)
    with pytest.raises(runtime_errors.Refusal) as refused:
        runtime_request.check_instance(request, x86)
    assert refused.value.field == "instance_type"
    assert f"{GB200} runs arm64 host CPUs" in refused.value.message
    assert "built for amd64 only (imageArchitectures)" in refused.value.message
    with pytest.raises(catalogue.UnsupportedHostArchitectureError):
        x86.trainer_image_for(GB200)


def test_the_function_reads_the_images_by_architecture() -> None:
    env = {
        settings.ENV_TRAINER_IMAGE_URIS: json.dumps({"amd64": f"{REGISTRY}:x86", "arm64": f"{REGISTRY}:arm"}),
        "EXECUTION_ROLE_ARN": "arn:aws:iam::123456789012:role/exec",
        "DATA_BUCKET": "data",
        "CHECKPOINT_BUCKET": "ckpt",
        "OUTPUT_BUCKET": "out",
        "OUTPUT_KMS_KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        "TRAINING_PLAN_ARNS_PARAMETER": "/plans",
        "PLATFORM_ACCOUNT_ID": "123456789012",
        "CLIENT_TOKEN_RECORDS_URI": "s3://out/records/",
        "AWS_REGION": "us-east-1",
    }
    read = runtime_config.SubmitterConfig.from_environ(env)
    assert read.image_architectures == ("amd64", "arm64")
    for bad in ('{"x86_64": "i"}', "{}", '["i"]', '{"arm64": ""}'):
        with pytest.raises(runtime_errors.ConfigurationError, match=settings.ENV_TRAINER_IMAGE_URIS):
            runtime_config.SubmitterConfig.from_environ({**env, settings.ENV_TRAINER_IMAGE_URIS: bad})
    with pytest.raises(runtime_errors.ConfigurationError, match="is required"):
        runtime_config.SubmitterConfig.from_environ({k: v for k, v in env.items() if k != "TRAINER_IMAGE_URIS"})
    # an arm64 image alone (no stack writes it): refused at parse by the stack's rule, not each amd64 request later
    with pytest.raises(runtime_errors.ConfigurationError) as arm_only:
        runtime_config.SubmitterConfig.from_environ(
            {**env, settings.ENV_TRAINER_IMAGE_URIS: json.dumps({"arm64": f"{REGISTRY}:arm"})}
        )
    assert str(arm_only.value).startswith(f"{settings.ENV_TRAINER_IMAGE_URIS}: got the architectures arm64; ")
    assert catalogue.IMAGE_ARCHITECTURES_RULE in str(arm_only.value)
    assert catalogue.image_architectures_problem(["arm64"]) is not None  # the stack's imageArchitectures rule
    amd64_only = {**env, settings.ENV_TRAINER_IMAGE_URIS: json.dumps({"amd64": f"{REGISTRY}:x86"})}
    assert runtime_config.SubmitterConfig.from_environ(amd64_only).image_architectures == ("amd64",)


def _load(**context) -> object:
    return load_config(cdk.App(context={**cdk_json_context(), **context}).node, environ={})


def test_image_architectures_default_to_x86_64_and_arm64_opens_the_gb200_hosts() -> None:
    default = _load()
    assert default.image_architectures == ("amd64",) and GB200 not in default.allowed_instance_types
    both = _load(imageArchitectures=["amd64", "arm64"])
    assert both.image_architectures == ("amd64", "arm64") and GB200 in both.allowed_instance_types
    assert _load(imageArchitectures="amd64,arm64").image_architectures == ("amd64", "arm64")  # -c's form
    with pytest.raises(ConfigError) as refused:
        _load(allowedInstanceTypes=["ml.p6-b200.48xlarge", GB200])
    assert refused.value.key == "allowedInstanceTypes[1]" and "add its architecture to imageArchitectures" in str(
        refused.value
    )
    for bad, key in ((["x86_64"], "imageArchitectures[0]"), (["arm64"], "imageArchitectures")):
        with pytest.raises(ConfigError) as wrong:
            _load(imageArchitectures=bad)
        assert wrong.value.key == key and '"amd64" among them' in str(wrong.value)
    with pytest.raises(ConfigError, match="each value once"):
        _load(imageArchitectures=["amd64", "amd64"])


def test_one_image_asset_and_copy_per_architecture() -> None:
    from platform_constructs.trainer_image import TrainerImage, TrainerImageProps

    app = cdk.App()
    one = TrainerImage(cdk.Stack(app, "One"), "Image")
    two = TrainerImage(cdk.Stack(app, "Two"), "Image", TrainerImageProps(architectures=("amd64", "arm64")))
    assertions.Template.from_stack(cdk.Stack.of(one)).resource_count_is("Custom::CDKECRDeployment", 1)
    copies = assertions.Template.from_stack(cdk.Stack.of(two)).find_resources("Custom::CDKECRDeployment")
    assert len(copies) == 2
    assert sorted(c["Properties"]["ImageArch"] for c in copies.values()) == ["amd64", "arm64"]
    assert set(two.image_uris) == {"amd64", "arm64"} and len(set(two.image_tags.values())) == 2  # own tags
    assert two.image_tags["amd64"] == one.image_tags["amd64"]  # adding arm64 leaves the x86-64 image as it was
    assert [a.node.id for a in two.assets.values()] == ["Asset", "AssetArm64"]
    with pytest.raises(ValueError, match=r"TrainerImageProps.architectures: got \['arm64'\]"):
        TrainerImage(cdk.Stack(app, "Three"), "Image", TrainerImageProps(architectures=("arm64",)))
