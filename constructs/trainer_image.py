"""The trainer image: an ECR repository and the images built from ``training/Dockerfile``.

Each image is a ``DockerImageAsset`` (CDK builds it at publish time, so synth
needs no Docker engine), one per CPU architecture the deployment names
(``imageArchitectures``: ``linux/amd64`` by default, ``linux/arm64`` as well for
the GB200 hosts' NVIDIA Grace CPUs), which lands in the CDK bootstrap repository. The
well-kept ``cdk-ecr-deployment`` construct then copies it into the platform's
own repository under a content-derived tag (the asset hash and a digest of the
copy settings, see :class:`TrainerImage`), so training jobs
pull from a repository whose scanning, tag immutability and lifecycle this
construct controls, and the execution role is granted that repository only.

Encryption choice: AES256 (ECR-managed keys; images are still encrypted at
rest) by default. The image holds code and open-source libraries, not
training data, so a customer managed key would add a key to manage and pay
for, and a key policy every pusher and puller depends on, without protecting
anything sensitive. The choice is fixed when the repository is created: pass
``encryption_key`` up front where policy requires a customer managed key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import aws_cdk as cdk
import cdk_ecr_deployment as ecr_deployment
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from constructs import Construct, DependencyGroup, IDependable
from platform_spec.catalogue import (
    DEFAULT_IMAGE_ARCHITECTURES,
    image_architectures_problem,
)
from platform_spec.trainer_image import docker_build_args

from . import acknowledgements as nag

__all__ = [
    "REPO_ROOT",
    "ITrainerImage",
    "TrainerImage",
    "TrainerImageProps",
    "copy_settings_digest",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the trainer image's Docker build context."""


@runtime_checkable
class ITrainerImage(Protocol):
    """The trainer image as other constructs use it (implemented by :class:`TrainerImage`).

    Attributes:
        image_uris: the image of each CPU architecture built (OCI names, e.g. ``"amd64"``, ``"arm64"``), as
            training jobs pull it, ``<registry>/<repository>:<tag>``; a job runs the one of its instance's
            host architecture (:attr:`platform_spec.catalogue.InstanceSpec.cpu_architecture`).
        deployment: what puts the images into that repository; a resource that
            hands ``image_uris`` to SageMaker depends on it.
    """

    @property
    def image_uris(self) -> Mapping[str, str]: ...

    @property
    def deployment(self) -> IDependable: ...


def _platform(architecture: str) -> ecr_assets.Platform:
    """``linux/<architecture>``: ``Platform.LINUX_AMD64`` or ``Platform.LINUX_ARM64``."""
    return {"amd64": ecr_assets.Platform.LINUX_AMD64, "arm64": ecr_assets.Platform.LINUX_ARM64}[architecture]


@dataclass(frozen=True, kw_only=True)
class TrainerImageProps:
    """Properties of :class:`TrainerImage`.

    Attributes:
        build_context: Docker build context directory. Default: the repository root.
        dockerfile: Dockerfile path relative to ``build_context``.
            Default: ``training/Dockerfile``.
        context_paths: top-level folders of the build context the image needs;
            everything else is excluded from the context and the asset hash
            (``__pycache__`` and ``*.pyc`` too). Default: ``training``, ``platform_spec``
            and ``model_families`` (what ``training/Dockerfile`` copies: the trainer and
            the pure packages it imports).
        build_args: ``docker build --build-arg`` values, laid over
            :func:`platform_spec.trainer_image.docker_build_args` (``BASE_IMAGE``: the NGC release
            ``training/Dockerfile`` builds ``FROM``, pinned by digest; that module is its one home),
            which every build gets. Default: nothing more.
        architectures: the CPU architectures to build an image for (OCI names, each one of
            :data:`platform_spec.catalogue.TRAINER_IMAGE_ARCHITECTURES`, each once, ``"amd64"`` among them:
            the stack's ``TrainerImageUri`` output and data-preparation processing jobs run on x86-64). One
            image asset per architecture (``linux/<arch>``); the submitter runs each job on the image of its
            instance's host architecture and refuses an instance type whose architecture is not built.
            Default: :data:`platform_spec.catalogue.DEFAULT_IMAGE_ARCHITECTURES` (``amd64``; add ``arm64``
            for the GB200 hosts).
        image_retain_count: images kept by the repository lifecycle rule; older
            ones expire. Default: 20.
        encryption_key: KMS key for the repository. Default: AES256 with
            ECR-managed keys (see the module docstring).
        removal_policy: what happens to the repository when it leaves the stack.
            Default: it is retained with its images; ``DESTROY`` also empties it.
        repository_name: physical repository name. Default: CloudFormation generates one.
        copy_timeout: how long CloudFormation waits for the image copy before it
            fails the deployment (the copy resource's ``ServiceTimeout``), in
            whole seconds; it must exceed the copy function's own timeout (15
            minutes in cdk-ecr-deployment; checked at synth) and be at most
            CloudFormation's limit of one hour. Default: 20 minutes (the copy
            function's timeout plus 5 minutes for the asynchronous invocation to
            start and the answer to reach CloudFormation).
    """

    build_context: Path = REPO_ROOT
    dockerfile: str = "training/Dockerfile"
    context_paths: Sequence[str] = ("training", "platform_spec", "model_families")
    build_args: Mapping[str, str] = field(default_factory=dict)
    architectures: Sequence[str] = DEFAULT_IMAGE_ARCHITECTURES
    image_retain_count: int = 20
    encryption_key: kms.IKey | None = None
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    repository_name: str | None = None
    copy_timeout: cdk.Duration = field(default_factory=lambda: cdk.Duration.minutes(20))


class TrainerImage(Construct):
    """ECR repository (primary child ``Resource``) plus the trainer image copied into it.

    Children: ``Resource`` (the repository), ``Asset`` (the amd64 image asset),
    ``DeploymentRole`` (the copy function's role) and ``Deployment<copy id>``
    (the cdk-ecr-deployment copy, a custom resource whose function is a
    stack-level singleton; its ID changes with the tag on purpose, see below);
    with ``arm64`` also ``AssetArm64`` and ``DeploymentArm64<copy id>`` (the amd64
    children keep the IDs they had before a second architecture existed, so adding
    ``arm64`` to a deployment replaces nothing). Each architecture's image has its
    own tag (its asset hash covers the platform), in the same repository.

    Immutable tags and redeploying old content: ECR refuses to push a tag that
    already exists, even with identical content, and cdk-ecr-deployment does not
    check first (cdklabs/cdk-ecr-deployment#207). Each image therefore gets its
    own copy resource, so rollbacks never re-push. Deploying a build context
    whose tag is still in the repository (e.g. after reverting a trainer change)
    fails the copy and rolls back cleanly; delete that tag first
    (``aws ecr batch-delete-image --repository-name <repo> --image-ids imageTag=<tag>``)
    or let the lifecycle rule expire it.

    Failing fast: CloudFormation waits up to one hour (its default
    ``ServiceTimeout``) for a custom resource that never answers, e.g. when the
    copy function times out without reporting. The copy resource's
    ``ServiceTimeout`` is ``copy_timeout`` (20 minutes by default), so a stuck
    copy rolls the deployment back after 20 minutes, not 60.

    Copy settings are part of the tag. The copy function copies again on every
    ``Update`` of its resource (cdk-ecr-deployment's handler treats Update like
    Create), and a copy into an existing immutable tag fails, as does the
    rollback's second Update: a stack would end in ``UPDATE_ROLLBACK_FAILED``.
    So the copy resource's properties never change in place: the tag is
    ``<asset hash>-<8 hex digits of the copy settings>`` (today the service
    timeout), and a new tag is a new resource. Changing ``copy_timeout``, or
    upgrading from a release whose copy had no service timeout (tag = bare asset
    hash), creates a new tag for the same image digest (allowed by tag
    immutability) and deletes the old copy resource (a no-op); jobs move to the
    new tag with the submitter's environment.

    Attributes:
        repository: the platform's trainer repository.
        deployment: the copies into it, one per architecture (a ``DependencyGroup``); what uses ``image_uris``
            depends on it (:class:`ITrainerImage`).
        copies: each architecture's copy (cdk-ecr-deployment's ``ECRDeployment``).
        assets: the image asset of each architecture (``asset`` is the amd64 one).
        image_tags: each architecture's ``<asset hash>-<copy settings digest>`` (64 + 1 + 8 characters);
            ``image_tag`` is the amd64 one.
        image_uris: each architecture's ``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>``.
        image_uri: the amd64 image's URI (the stack's ``TrainerImageUri`` output; processing jobs run it).
        copy_function_timeout: the copy function's own timeout (set by cdk-ecr-deployment).
        copy_timeout: the copy resource's ``ServiceTimeout``.
    """

    def __init__(self, scope: Construct, id: str, props: TrainerImageProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or TrainerImageProps()
        _validate(props)

        self.repository = ecr.Repository(
            self,
            "Resource",
            repository_name=props.repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS if props.encryption_key else ecr.RepositoryEncryption.AES_256,
            encryption_key=props.encryption_key,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description=f"Keep the newest {props.image_retain_count} images",
                    max_image_count=props.image_retain_count,
                    tag_status=ecr.TagStatus.ANY,
                )
            ],
            removal_policy=props.removal_policy,
            empty_on_delete=props.removal_policy == cdk.RemovalPolicy.DESTROY,
        )

        self.copy_timeout: cdk.Duration = props.copy_timeout
        # The repository lives in this stack, so its registry is the stack's own account and region
        # (repository_uri_for_tag would split the repository ARN to find them, which renders less readably).
        stack = cdk.Stack.of(self)
        registry = f"{stack.account}.dkr.ecr.{stack.region}.{stack.url_suffix}"

        # The copy function's role. cdk-ecr-deployment grants its own role ECR actions on
        # every repository ('*'); it receives this role without policy updates instead, and
        # the same ECR actions are granted here on the repositories involved only.
        self.deployment_role = iam.Role(
            self,
            "DeploymentRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Copies the trainer image from the CDK asset repository into the trainer repository",
            managed_policies=[_BASIC_EXECUTION],
        )
        self.assets: dict[str, ecr_assets.DockerImageAsset] = {}
        self.image_tags: dict[str, str] = {}
        uris: dict[str, str] = {}
        self.deployment = DependencyGroup()
        self.copies: dict[str, ecr_deployment.ECRDeployment] = {}
        for architecture in props.architectures:
            suffix = "" if architecture == "amd64" else architecture.capitalize()
            asset = ecr_assets.DockerImageAsset(
                self,
                f"Asset{suffix}",
                directory=str(props.build_context),
                file=props.dockerfile,
                build_args={**docker_build_args(), **props.build_args},
                platform=_platform(architecture),
                ignore_mode=cdk.IgnoreMode.DOCKER,
                exclude=build_context_excludes(props.context_paths),
                display_name=f"trainer image ({architecture})" if suffix else "trainer image",
            )
            tag = f"{asset.asset_hash}-{copy_settings_digest(self.copy_timeout)}"
            self.assets[architecture], self.image_tags[architecture] = asset, tag
            uris[architecture] = f"{registry}/{self.repository.repository_name}:{tag}"
            if not self.copies:  # the CDK asset repository is one for every asset of the stack
                for repository in (asset.repository, self.repository):
                    repository.grant_read(self.deployment_role)
                    repository.grant_pull(self.deployment_role)
                    # the rest of the library's read actions, scoped the same way
                    repository.grant(self.deployment_role, *_DEPLOYMENT_EXTRA_READ_ACTIONS)
                self.repository.grant_pull_push(self.deployment_role)
            # The copy's construct ID carries the tag, so a new image (or new copy settings) is a new
            # custom resource: an immutable repository refuses a second push of an existing tag, so
            # re-running an old copy (what an in-place update or its rollback would do) must never
            # happen. A rollback now deletes the new copy resource (a no-op for images) and leaves
            # the old one alone.
            copy = ecr_deployment.ECRDeployment(
                self,
                f"Deployment{suffix}{_copy_id(tag)}",
                src=ecr_deployment.DockerImageName(asset.image_uri),
                dest=ecr_deployment.DockerImageName(uris[architecture]),
                image_arch=[architecture],
                role=self.deployment_role.without_policy_updates(),
            )
            self.copies[architecture] = copy
            self.deployment.add(copy)
        self.image_uris: Mapping[str, str] = MappingProxyType(uris)
        self.asset = self.assets["amd64"]
        self.image_tag: str = self.image_tags["amd64"]
        self.image_uri: str = uris["amd64"]
        self.copy_function_timeout: cdk.Duration = self._set_service_timeout(tuple(self.copies.values()))
        nag.acknowledge(
            self.deployment_role,
            nag.IAM4,
            "AWSLambdaBasicExecutionRole only lets the copy function write its own CloudWatch logs; its "
            "log group is named after a generated function name, so it cannot be scoped in advance.",
            finding=nag.managed_policy(self, _BASIC_EXECUTION.managed_policy_arn),
        )
        nag.acknowledge(
            self.deployment_role,
            nag.IAM5,
            "ecr:GetAuthorizationToken has no resource-level permissions (AWS requires '*'); every other "
            "ECR action is scoped to the asset and trainer repositories.",
            finding="Resource::*",
        )

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        """Pull images from the trainer repository (plus ``ecr:GetAuthorizationToken`` on ``*``)."""
        return self.repository.grant_pull(grantee)

    def _set_service_timeout(self, copies: Sequence[ecr_deployment.ECRDeployment]) -> cdk.Duration:
        """Set each copy resource's ``ServiceTimeout`` to :attr:`copy_timeout`; returns the copy function's timeout.

        cdk-ecr-deployment creates the ``AWS::CloudFormation::CustomResource``
        (type ``Custom::CDKECRDeployment``, child ``CustomResource``) without a
        service timeout, and its copy function as a stack-level singleton
        (:attr:`SingletonFunction.construct_name`); both are reached through
        the construct tree, so the function's timeout is read, not copied.

        Raises:
            ValueError: ``copy_timeout`` is not longer than the copy function's timeout.
        """
        handler = copies[0].node.find_child("CustomResourceHandler")
        function = cdk.Stack.of(self).node.find_child(handler.construct_name)
        function_timeout = function.timeout
        if function_timeout is None:  # pragma: no cover - cdk-ecr-deployment always sets one
            raise ValueError("the cdk-ecr-deployment copy function has no timeout; expected one to size ServiceTimeout")
        function_s = int(function_timeout.to_seconds())
        seconds = int(self.copy_timeout.to_seconds())
        if seconds <= function_s:
            raise ValueError(
                f"TrainerImageProps.copy_timeout: got {seconds} s; expected more than the copy function's timeout "
                f"({function_s} s): CloudFormation would give up while the copy may still succeed"
            )
        for copy in copies:
            resource = copy.node.find_child("CustomResource").node.default_child
            resource.add_property_override("ServiceTimeout", seconds)
        return function_timeout


def copy_settings_digest(copy_timeout: cdk.Duration) -> str:
    """8 hex digits of SHA-256 over the copy resource's settings (``{"ServiceTimeout": <s>}``), for the tag.

    Add a setting here whenever the copy resource gets a new property: its
    properties must never change in place (see :class:`TrainerImage`).
    """
    settings = {"ServiceTimeout": int(copy_timeout.to_seconds())}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]


def _copy_id(image_tag: str) -> str:
    """The copy resource's construct ID suffix: the asset hash's start and the settings digest."""
    asset_hash, _, digest = image_tag.rpartition("-")
    return f"{asset_hash[:_DEPLOYMENT_ID_HASH_CHARS]}{digest}"


_DEPLOYMENT_ID_HASH_CHARS = 16

_SERVICE_TIMEOUT_MAX_S = 3600
"""CloudFormation custom resources: ``ServiceTimeout`` is 1-3600 seconds, default 3600
(AWS CloudFormation User Guide, ``AWS::CloudFormation::CustomResource``)."""

_DEPLOYMENT_EXTRA_READ_ACTIONS = (
    "ecr:ListImages",
    "ecr:ListTagsForResource",
    "ecr:GetRepositoryPolicy",
    "ecr:DescribeImageScanFindings",
)
_BASIC_EXECUTION = iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")


def build_context_excludes(context_paths: Sequence[str]) -> list[str]:
    """``.dockerignore``-style patterns that keep only ``context_paths`` in the build context.

    Everything is excluded, then each kept top-level folder is re-included,
    then bytecode caches are excluded again (later patterns win).
    """
    patterns = ["*", "**/*"]
    for path in context_paths:
        patterns += [f"!{path}", f"!{path}/**"]
    patterns += ["**/__pycache__", "**/*.pyc", "**/.pytest_cache"]
    return patterns


def _validate(props: TrainerImageProps) -> None:
    seconds = props.copy_timeout.to_seconds(integral=False)
    if not 1 <= seconds <= _SERVICE_TIMEOUT_MAX_S or seconds != int(seconds):
        raise ValueError(
            f"TrainerImageProps.copy_timeout: got {seconds:g} s; expected whole seconds from 1 to "
            f"{_SERVICE_TIMEOUT_MAX_S} (CloudFormation's ServiceTimeout limit), more than the copy function's timeout"
        )
    if not 1 <= props.image_retain_count <= 10_000:
        raise ValueError(
            f"TrainerImageProps.image_retain_count: got {props.image_retain_count!r}; expected an integer from 1 to 10000"
        )
    problem = image_architectures_problem(props.architectures)
    if problem is not None:
        raise ValueError(f"TrainerImageProps.architectures: got {list(props.architectures)!r}; expected {problem}")
    context = Path(props.build_context)
    dockerfile = context / props.dockerfile
    if not dockerfile.is_file():
        raise ValueError(
            f"TrainerImageProps.dockerfile: {str(dockerfile)!r} does not exist; expected the trainer's Dockerfile"
        )
    for path in props.context_paths:
        if "/" in path.strip("/") or path in ("", ".", ".."):
            raise ValueError(
                f"TrainerImageProps.context_paths: got {path!r}; expected a top-level folder name such as 'training'"
            )
        if not (context / path).is_dir():
            raise ValueError(f"TrainerImageProps.context_paths: {str(context / path)!r} is not a folder")
    dockerfile_top = Path(props.dockerfile).parts[0]
    if dockerfile_top not in props.context_paths:
        raise ValueError(
            f"TrainerImageProps.dockerfile: {props.dockerfile!r} lies outside context_paths {list(props.context_paths)}; "
            "expected it inside one of them"
        )
