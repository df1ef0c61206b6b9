"""The top-level ``constructs/`` folder never shadows the ``constructs`` library; ``python app.py`` works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("cdk")

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_constructs_is_the_library_even_with_the_repo_root_first_on_sys_path():
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "import constructs\n"
        "from constructs import Construct\n"
        "import aws_cdk\n"
        "import platform_constructs.buckets as ours\n"
        "print(json.dumps({'library': constructs.__file__, 'construct': Construct.__module__,"
        " 'ours': ours.__file__, 'first': sys.path[0]}))\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["first"] == str(REPO_ROOT)
    assert "site-packages" in found["library"] and found["library"].endswith("constructs/__init__.py")
    assert not found["library"].startswith(str(REPO_ROOT / "constructs"))
    assert found["construct"] == "constructs"
    assert found["ours"] == str(REPO_ROOT / "constructs" / "buckets.py")
    assert not (REPO_ROOT / "constructs" / "__init__.py").exists()


def test_python_app_py_synthesizes_from_the_repo_root(tmp_path):
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_DEFAULT_REGION": "", "CDK_DEFAULT_ACCOUNT": ""},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    template = json.loads((tmp_path / "TrainingPlatform.template.json").read_text())
    assert any(r["Type"] == "AWS::Lambda::Function" for r in template["Resources"].values())
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert report["pluginReports"] == []  # cdk-nag ran (registered in app.py) and found nothing unacknowledged


def test_a_bad_context_value_fails_python_app_py_with_the_key_named(tmp_path):
    # the CDK CLI hands context to the app through CDK_CONTEXT_JSON
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "CDK_OUTDIR": str(tmp_path),
            "CDK_CONTEXT_JSON": json.dumps({"allowedInstanceTypes": ["ml.g5.xlarge"]}),
        },
        timeout=300,
    )
    assert result.returncode != 0
    assert (
        "context key 'allowedInstanceTypes[0]': got 'ml.g5.xlarge'; expected an instance type from the planner catalogue"
        in result.stderr
    )
