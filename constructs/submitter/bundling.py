"""Packages the platform's Python Lambda functions without Docker.

A :class:`LambdaPackage` describes one deployment package: a runtime folder
that becomes the top-level package ``runtime/``, optional pure modules of this
repository copied beside it, and a pinned requirements file. The job
submitter's package (:data:`SUBMITTER`) is::

    runtime/         <- constructs/submitter/runtime/ (the handler package)
    platform_spec/   <- platform_spec/ (the pure contracts: hyperparameters, precisions, catalogue, ...)
    model_families/  <- model_families/ (the families' pure shape and FLOP terms)
    planner/         <- planner/ (pure Python)
    boto3/, botocore/, aws_lambda_powertools/, ...  <- runtime/requirements.txt

The observability functions use their own :class:`LambdaPackage` (see
``platform_constructs.observability.functions``).

The pinned requirements are pure Python, so ``pip install --platform
manylinux2014_aarch64 --python-version 3.13 --only-binary=:all:`` on any
machine produces what the arm64 Python 3.13 runtime needs. The pip result is
cached under ``.cache/submitter-deps/<key>/`` (key: the normalised
requirement lines and the pip target, so packages with the same pins share
one install), and copied into each bundle with hard links where the file
system allows, so repeated synths (tests) cost milliseconds after the first.

The asset hash is computed here from the same inputs (sources, requirements,
target), so CDK skips bundling entirely when ``cdk.out`` already holds the
asset, and the hash changes whenever the package would.

The module-level functions (:func:`asset_hash`, :func:`build_package`,
:func:`bundling_options`, ...) are the submitter's package, as before.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
REQUIREMENTS = RUNTIME_DIR / "requirements.txt"
CACHE_DIR = REPO_ROOT / ".cache" / "submitter-deps"

PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"
PURE_PACKAGES = ("platform_spec", "model_families", "planner")
"""The repository's pure packages the submitter's runtime imports (never the torch trainer)."""

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", "tests"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def _tree(root: Path, prefix: str) -> Iterator[tuple[Path, str]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for filename in filenames:
            path = Path(dirpath) / filename
            if path.suffix in _SKIP_SUFFIXES:
                continue
            files.append(path)
    for path in sorted(files):
        yield path, f"{prefix}/{path.relative_to(root).as_posix()}"


def _requirement_lines(requirements: Path) -> list[str]:
    """The requirement lines without comments and blanks, sorted (what pip actually installs)."""
    lines = (line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines())
    return sorted(line for line in lines if line)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass(frozen=True)
class LambdaPackage:
    """One Python Lambda deployment package built from this repository.

    Attributes:
        runtime_dir: the handler package (absolute path inside the repository);
            it becomes the top-level package ``runtime/``.
        requirements: the pinned requirements (pure-Python wheels only), installed
            with ``--no-deps`` for :data:`PIP_PLATFORM` / CPython :data:`PYTHON_VERSION`.
        files: repository-relative files copied at the same relative path
            (e.g. ``model_families/gpt/__init__.py``). Default: none.
        folders: repository-relative folders copied whole (e.g. ``planner``). Default: none.
        display_name: the asset's name in CDK's output. Default: ``Lambda package``.
    """

    runtime_dir: Path
    requirements: Path
    files: Sequence[str] = ()
    folders: Sequence[str] = ()
    display_name: str = "Lambda package"

    # -- inputs ---------------------------------------------------------------

    def sources(self, repo_root: Path = REPO_ROOT) -> Iterator[tuple[Path, str]]:
        """Yield ``(source file, path inside the package)`` for our own code, sorted."""
        runtime = repo_root / self.runtime_dir.relative_to(REPO_ROOT)
        yield from _tree(runtime, "runtime")
        for name in self.files:
            yield repo_root / name, Path(name).as_posix()
        for folder in self.folders:
            yield from _tree(repo_root / folder, Path(folder).as_posix())

    def pip_arguments(self, target: Path) -> list[str]:
        return [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile", "--no-deps",
            "--requirement", str(self.requirements),
            "--target", str(target),
            "--platform", PIP_PLATFORM,
            "--python-version", PYTHON_VERSION,
            "--implementation", "cp",
            "--only-binary=:all:",
        ]

    def dependencies_key(self) -> str:
        """Cache key of the installed dependencies: the requirement lines + the pip target."""
        digest = hashlib.sha256()
        digest.update("\n".join(_requirement_lines(self.requirements)).encode())
        digest.update(f"|{PIP_PLATFORM}|{PYTHON_VERSION}|cp|no-deps".encode())
        return digest.hexdigest()[:32]

    def asset_hash(self, repo_root: Path = REPO_ROOT) -> str:
        """Content hash of the whole package (sources + dependency key)."""
        digest = hashlib.sha256(self.dependencies_key().encode())
        for source, name in self.sources(repo_root):
            digest.update(name.encode() + b"\0")
            digest.update(source.read_bytes() + b"\0")
        return digest.hexdigest()

    # -- building -------------------------------------------------------------

    def installed_dependencies(self) -> Path:
        """Return the cached pip install of the requirements, installing it on first use.

        Safe under concurrent callers (pytest-xdist): each installs into its own
        temporary folder and renames it into place; a loser discards its copy.

        Raises:
            RuntimeError: pip failed (its output is in the message).
        """
        final = CACHE_DIR / self.dependencies_key()
        if (final / ".complete").is_file():
            return final
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="install-", dir=CACHE_DIR))
        try:
            result = subprocess.run(self.pip_arguments(staging), capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(
                    f"pip could not install the requirements {self.requirements} for "
                    f"{PIP_PLATFORM}/cp{PYTHON_VERSION.replace('.', '')}:\n{result.stdout}{result.stderr}"
                )
            for leftover in staging.glob("bin"):
                shutil.rmtree(leftover)  # console scripts are useless in Lambda
            os.chmod(staging, 0o755)  # mkdtemp makes it 0700; the Lambda runtime user must read the package
            (staging / ".complete").write_text("ok\n")
            try:
                os.rename(staging, final)
            except OSError:
                if not (final / ".complete").is_file():
                    raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return final

    def build(self, output_dir: Path, repo_root: Path = REPO_ROOT) -> None:
        """Write the complete deployment package into ``output_dir`` (which may exist, empty)."""
        output_dir = Path(output_dir)
        dependencies = self.installed_dependencies()
        shutil.copytree(
            dependencies,
            output_dir,
            dirs_exist_ok=True,
            copy_function=_link_or_copy,
            ignore=shutil.ignore_patterns(".complete", "__pycache__"),
        )
        for source, name in self.sources(repo_root):
            destination = output_dir / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)  # our sources are copied, never linked
            os.chmod(destination, 0o644)
        os.chmod(output_dir, 0o755)

    def bundling_options(self) -> BundlingOptions:
        """Bundling options for ``lambda.Code.from_asset(str(REPO_ROOT), ...)``.

        Local bundling always runs (it raises on failure rather than silently
        falling back). The Docker image and command are CDK's required fallback
        description and produce the same layout from the repo root.
        """
        runtime_rel = self.runtime_dir.relative_to(REPO_ROOT).as_posix()
        requirements_rel = self.requirements.relative_to(REPO_ROOT).as_posix()
        steps = [
            f"pip install --no-deps -r {shlex.quote(requirements_rel)} -t /asset-output",
            f"cp -r {shlex.quote(runtime_rel)} /asset-output/runtime",
        ]
        for name in self.files:
            parent = Path(name).parent.as_posix()
            steps.append(f"mkdir -p /asset-output/{parent} && cp {shlex.quote(name)} /asset-output/{shlex.quote(name)}")
        for folder in self.folders:
            steps.append(f"cp -r {shlex.quote(folder)} /asset-output/{shlex.quote(folder)}")
        steps.append("find /asset-output -name __pycache__ -prune -exec rm -rf {} +")
        return BundlingOptions(
            image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}:latest-arm64"),
            command=["bash", "-c", " && ".join(steps)],
            local=LocalPackageBundler(self),
        )


@jsii.implements(ILocalBundling)
class LocalPackageBundler:
    """CDK local bundling: builds a :class:`LambdaPackage` with this Python's pip (no Docker).

    Args:
        package: the package to build. Default: the submitter's (:data:`SUBMITTER`).
    """

    def __init__(self, package: LambdaPackage | None = None) -> None:
        self.package = package

    def try_bundle(self, output_dir: str, *_options: object, **_keyword_options: object) -> bool:
        # jsii passes the BundlingOptions struct positionally; the package needs none of it.
        (self.package or SUBMITTER).build(Path(output_dir))
        return True


SUBMITTER = LambdaPackage(
    runtime_dir=RUNTIME_DIR,
    requirements=REQUIREMENTS,
    folders=PURE_PACKAGES,
    display_name="job submitter package",
)
"""The job submitter's package."""


# -- the submitter's package, as module-level functions ------------------------


def package_sources(repo_root: Path = REPO_ROOT) -> Iterator[tuple[Path, str]]:
    """Yield ``(source file, path inside the package)`` for the submitter's own code, sorted."""
    return SUBMITTER.sources(repo_root)


def pip_arguments(target: Path) -> list[str]:
    return SUBMITTER.pip_arguments(target)


def dependencies_key() -> str:
    """Cache key of the submitter's installed dependencies."""
    return SUBMITTER.dependencies_key()


def asset_hash(repo_root: Path = REPO_ROOT) -> str:
    """Content hash of the submitter's whole package (sources + dependency key)."""
    return SUBMITTER.asset_hash(repo_root)


def installed_dependencies() -> Path:
    """The cached pip install of the submitter's requirements (see :meth:`LambdaPackage.installed_dependencies`)."""
    return SUBMITTER.installed_dependencies()


def build_package(output_dir: Path, repo_root: Path = REPO_ROOT) -> None:
    """Write the submitter's complete deployment package into ``output_dir``."""
    SUBMITTER.build(output_dir, repo_root)


def bundling_options() -> BundlingOptions:
    """Bundling options of the submitter's package (see :meth:`LambdaPackage.bundling_options`)."""
    return SUBMITTER.bundling_options()
