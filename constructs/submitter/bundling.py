"""Packages the job submitter's Lambda code without Docker.

The deployment package is::

    runtime/    <- constructs/submitter/runtime/ (the handler package)
    training/   <- training/{__init__,hyperparameters,presets,metric_lines}.py (pure contracts)
    planner/    <- planner/ (pure Python)
    boto3/, botocore/, aws_lambda_powertools/, ...  <- runtime/requirements.txt

The pinned requirements are pure Python, so ``pip install --platform
manylinux2014_aarch64 --python-version 3.13 --only-binary=:all:`` on any
machine produces what the arm64 Python 3.13 runtime needs. The pip result is
cached under ``.cache/submitter-deps/<key>/`` (key: the requirements file and
the pip target), and copied into each bundle with hard links where the file
system allows, so repeated synths (tests) cost milliseconds after the first.

The asset hash is computed here from the same inputs (sources, requirements,
target), so CDK skips bundling entirely when ``cdk.out`` already holds the
asset, and the hash changes whenever the package would.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
REQUIREMENTS = RUNTIME_DIR / "requirements.txt"
CACHE_DIR = REPO_ROOT / ".cache" / "submitter-deps"

PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"
TRAINING_MODULES = ("__init__.py", "hyperparameters.py", "presets.py", "metric_lines.py")
"""The pure modules of ``training/`` the function needs (never the torch trainer)."""

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", "tests"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def package_sources(repo_root: Path = REPO_ROOT) -> Iterator[tuple[Path, str]]:
    """Yield ``(source file, path inside the package)`` for our own code, sorted."""
    runtime = repo_root / RUNTIME_DIR.relative_to(REPO_ROOT)
    yield from _tree(runtime, "runtime")
    for name in TRAINING_MODULES:
        yield repo_root / "training" / name, f"training/{name}"
    yield from _tree(repo_root / "planner", "planner")


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


def pip_arguments(target: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "install",
        "--quiet", "--disable-pip-version-check", "--no-compile", "--no-deps",
        "--requirement", str(REQUIREMENTS),
        "--target", str(target),
        "--platform", PIP_PLATFORM,
        "--python-version", PYTHON_VERSION,
        "--implementation", "cp",
        "--only-binary=:all:",
    ]


def dependencies_key() -> str:
    """Cache key of the installed dependencies: requirements content + pip target."""
    digest = hashlib.sha256()
    digest.update(REQUIREMENTS.read_bytes())
    digest.update(f"{PIP_PLATFORM}|{PYTHON_VERSION}|cp|no-deps".encode())
    return digest.hexdigest()[:32]


def asset_hash(repo_root: Path = REPO_ROOT) -> str:
    """Content hash of the whole package (sources + dependency key)."""
    digest = hashlib.sha256(dependencies_key().encode())
    for source, name in package_sources(repo_root):
        digest.update(name.encode() + b"\0")
        digest.update(source.read_bytes() + b"\0")
    return digest.hexdigest()


def installed_dependencies() -> Path:
    """Return the cached pip install of the requirements, installing it on first use.

    Safe under concurrent callers (pytest-xdist): each installs into its own
    temporary folder and renames it into place; a loser discards its copy.

    Raises:
        RuntimeError: pip failed (its output is in the message).
    """
    final = CACHE_DIR / dependencies_key()
    if (final / ".complete").is_file():
        return final
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="install-", dir=CACHE_DIR))
    try:
        result = subprocess.run(pip_arguments(staging), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"pip could not install the submitter's requirements ({REQUIREMENTS}) for "
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


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build_package(output_dir: Path, repo_root: Path = REPO_ROOT) -> None:
    """Write the complete deployment package into ``output_dir`` (which may exist, empty)."""
    output_dir = Path(output_dir)
    dependencies = installed_dependencies()
    shutil.copytree(
        dependencies,
        output_dir,
        dirs_exist_ok=True,
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns(".complete", "__pycache__"),
    )
    for source, name in package_sources(repo_root):
        destination = output_dir / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)  # our sources are copied, never linked
        os.chmod(destination, 0o644)
    os.chmod(output_dir, 0o755)


@jsii.implements(ILocalBundling)
class LocalPackageBundler:
    """CDK local bundling: builds the package with this Python's pip (no Docker)."""

    def try_bundle(self, output_dir: str, *_options: object, **_keyword_options: object) -> bool:
        # jsii passes the BundlingOptions struct positionally; the package needs none of it.
        build_package(Path(output_dir))
        return True


def bundling_options() -> BundlingOptions:
    """Bundling options for ``lambda.Code.from_asset(str(REPO_ROOT), ...)``.

    Local bundling always runs (it raises on failure rather than silently
    falling back). The Docker image and command are CDK's required fallback
    description and produce the same layout from the repo root.
    """
    runtime_rel = RUNTIME_DIR.relative_to(REPO_ROOT).as_posix()
    training_files = " ".join(f"training/{name}" for name in TRAINING_MODULES)
    command = (
        f"pip install --no-deps -r {runtime_rel}/requirements.txt -t /asset-output"
        f" && cp -r {runtime_rel} /asset-output/runtime"
        f" && mkdir -p /asset-output/training && cp {training_files} /asset-output/training/"
        " && cp -r planner /asset-output/planner"
        " && find /asset-output -name __pycache__ -prune -exec rm -rf {} +"
    )
    return BundlingOptions(
        image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}:latest-arm64"),
        command=["bash", "-c", command],
        local=LocalPackageBundler(),
    )
