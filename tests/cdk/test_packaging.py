"""The submitter's Lambda package: built without Docker, lean, importable, content-hashed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from platform_constructs.submitter import bundling

pytestmark = pytest.mark.xdist_group("cdk")


@pytest.fixture(scope="module")
def package(default_synth) -> Path:
    """The staged Lambda asset folder of the default synth."""
    fn_id = default_synth.logical_id(default_synth.stack.submitter.function)
    code = default_synth.resources[fn_id]["Properties"]["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    assets = json.loads((default_synth.outdir / "TrainingPlatform.assets.json").read_text())
    path = default_synth.outdir / assets["files"][asset_hash]["source"]["path"]
    assert path.is_dir()
    return path


def test_package_layout(package):
    assert (package / "runtime" / "__init__.py").is_file()
    assert (package / "runtime" / "settings.py").is_file()
    assert (package / "runtime" / "requirements.txt").is_file()
    assert not (package / "training").exists()  # the torch trainer never ships; its contracts are platform_spec's
    for folder in bundling.PURE_PACKAGES:
        assert (package / folder / "__init__.py").is_file(), folder
    assert (package / "platform_spec" / "hyperparameters.py").is_file() and (package / "platform_spec" / "catalogue.py").is_file()
    assert (package / "model_families" / "gpt" / "__init__.py").is_file()
    for dependency in ("boto3", "botocore", "aws_lambda_powertools"):
        assert (package / dependency / "__init__.py").is_file(), dependency


def test_package_is_lean(package):
    top = {p.name for p in package.iterdir()}
    assert not {"torch", "numpy", "tokenizers", "safetensors", "aws_cdk", "jsii", "moto"} & top
    assert not any(p.name.startswith("torch") for p in package.iterdir())
    assert not list(package.rglob("__pycache__")) and not list(package.rglob("*.pyc"))
    assert not (package / "bin").exists()
    size_mb = sum(f.stat().st_size for f in package.rglob("*") if f.is_file()) / 1e6
    assert size_mb < 100  # Lambda's limit is 250 MB unzipped; boto3 + powertools is ~45 MB


def test_dependencies_match_the_pinned_requirements(package):
    pins = {}
    for line in bundling.REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("-", "_")] = version
    installed = {}
    for info in package.glob("*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").rsplit("-", 1)
        installed[name.lower().replace("-", "_")] = version
    assert installed == pins
    assert pins["boto3"] == "1.44.5" and pins["aws_lambda_powertools"] == "3.37.0"


def test_package_imports_on_its_own(package):
    """The handler module imports with nothing but the package and the standard library on sys.path."""
    code = (
        "import importlib, sys\n"
        f"sys.path[:0] = [{str(package)!r}]\n"
        "import boto3, aws_lambda_powertools, platform_spec.hyperparameters, platform_spec.catalogue, planner, runtime.settings\n"
        "assert boto3.__file__.startswith(sys.path[0]), boto3.__file__\n"
        "import runtime.handler as handler\n"
        "assert callable(handler.lambda_handler)\n"
        "assert 'torch' not in sys.modules and 'training' not in sys.modules\n"
        "assert platform_spec.hyperparameters.MODEL_PRESETS[:2] == ('gpt-tiny', 'gpt-1b')  # families found in the package\n"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_SERVICE_NAME": "job-submitter",
        "POWERTOOLS_METRICS_NAMESPACE": "TrainingPlatform",
    }
    # -S: no site-packages (so no venv and no editable install); -I: isolated from the repo
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, env=env, cwd=package, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_asset_hash_tracks_sources_and_requirements(tmp_path):
    root = tmp_path / "repo"
    runtime_rel = bundling.RUNTIME_DIR.relative_to(bundling.REPO_ROOT)
    shutil.copytree(bundling.RUNTIME_DIR, root / runtime_rel, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in bundling.PURE_PACKAGES:
        shutil.copytree(bundling.REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "training").mkdir()

    original = bundling.asset_hash(root)
    assert original == bundling.asset_hash(bundling.REPO_ROOT)  # same content, same hash
    (root / "training" / "data.py").write_text("import torch\n")  # not part of the package
    (root / "planner" / "__pycache__").mkdir()
    (root / "planner" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert bundling.asset_hash(root) == original
    with (root / "platform_spec" / "hyperparameters.py").open("a") as handle:
        handle.write("\n# changed\n")
    assert bundling.asset_hash(root) != original


def test_dependency_cache_is_reused():
    first = bundling.installed_dependencies()
    assert first.parent == bundling.CACHE_DIR and (first / ".complete").is_file()
    assert bundling.installed_dependencies() == first
    assert first.name == bundling.dependencies_key()
