"""The SageMaker Python SDK stays where it belongs: the extra ``sdk`` and ``trainctl.sdk``, imported only
when that module's functions run. The Lambda package and the trainer image never include it, and
``trainctl``'s start-up never imports it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from platform_constructs.submitter.bundling import SUBMITTER

REPO = Path(__file__).resolve().parents[2]
SDK_DISTRIBUTIONS = re.compile(
    r"^\s*(sagemaker|sagemaker[-_](?!mlflow\b)[a-z-]+)\s*[=<>~!\[]", re.IGNORECASE | re.MULTILINE
)
"""The SDK's distributions (sagemaker, sagemaker-core, ...); not sagemaker-mlflow, MLflow's plugin that resolves a
tracking server's ARN (it requires boto3 and mlflow-skinny only: its 0.5.0 wheel's metadata), which the image has."""
SDK_IMPORT = re.compile(r"^\s*(import|from)\s+sagemaker\b", re.MULTILINE)


def test_the_lambda_package_neither_imports_nor_requires_the_sdk() -> None:
    sources = SUBMITTER.sources()
    assert not any(SDK_IMPORT.search(path.read_text()) for path, _ in sources)  # lazy imports too
    assert not any(name.startswith("trainctl") for _, name in sources)
    assert not SDK_DISTRIBUTIONS.search(SUBMITTER.requirements.read_text())


def test_the_trainer_image_neither_imports_nor_installs_the_sdk() -> None:
    # what the entry point imports, transitively, function-local imports included (import-linter's graph)
    graph = grimp.build_graph(
        "training", "platform_spec", "model_families", include_external_packages=True, cache_dir=None
    )
    imported = graph.find_upstream_modules("training.entrypoint") | graph.find_upstream_modules("training.train")
    assert "torch" in imported and "training.model" in imported  # the graph does see the trainer's imports
    assert "sagemaker" not in imported
    assert not any(name.startswith("trainctl") for name in imported)
    assert not SDK_DISTRIBUTIONS.search((REPO / "training" / "requirements.txt").read_text())
    installs = [line for line in (REPO / "training" / "Dockerfile").read_text().splitlines() if "pip install" in line]
    assert installs and not any("sagemaker" in line for line in installs)


def test_the_sdk_is_the_pinned_extra_sdk_and_its_closure_is_pinned() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = extras["sdk"]
    name, version = pin.split("==")
    constraints = (REPO / "requirements-sdk.txt").read_text()
    assert f"\n{name}=={version}\n" in constraints
    pinned = [line for line in constraints.splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[^=\s]+", line) for line in pinned), pinned
    assert "-c requirements-sdk.txt" in (REPO / "Makefile").read_text().replace("\\\n\t\t", "")


def test_trainctl_starts_without_importing_the_sdk() -> None:
    code = (
        "import sys, trainctl.cli, trainctl.sdk\n"
        "print(sorted(m for m in sys.modules if m == 'sagemaker' or m.startswith('sagemaker.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    """The README's SDK example, run as a new user would (from the repository root, the venv's Python):
    the tiny model trains through the SDK on the emulator and its loss is printed."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- sdk-example:begin -->", 1)[1].split("<!-- sdk-example:end -->", 1)[0]
    code = block.strip().removeprefix("```python").removesuffix("```")
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1].split()
    assert last[0].startswith("job-") and last[1] == "Completed" and float(last[2]) > 0
