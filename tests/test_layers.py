"""The repository's layering: import-linter's contracts (pyproject.toml ``[tool.importlinter]``) hold on the
tree, they do catch a violation, and ``platform_spec`` (with the model families it discovers) imports and
works with the heavy libraries and the rest of the repository made unimportable."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "pyproject.toml"
CONTRACTS = {c["id"]: c for c in tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]}

LINT = "from importlinter.cli import lint_imports\nraise SystemExit(lint_imports(config_filename={config!r}, no_cache=True, no_logo=True))"


def _lint(cwd: Path, config: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath or "", "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-c", LINT.format(config=str(config))],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_contracts_cover_the_floor_plan() -> None:
    """The layers arch13.md item 8 names, each as a contract (a renamed or dropped one fails here)."""
    assert set(CONTRACTS) == {
        "pure-spec",
        "pure-families",
        "pure-planner",
        "planner-layers",
        "planner-training",
        "lambda-runtimes",
        "runtime-parents",
        "trainctl-commands",
        "constructs-layers",
        "acyclic",
        "product-without-devtools",
        "devtools-layers",
        "local-aws-layers",
    }
    assert {"torch", "numpy", "boto3", "botocore", "aws_cdk", "planner", "training"} <= set(
        CONTRACTS["pure-spec"]["forbidden_modules"]
    )
    assert CONTRACTS["planner-training"]["type"] == "independence"
    # the planner's modules in one direction: the rules (estimate, auto_tune) on top, the plan never imports them
    assert CONTRACTS["planner-layers"]["layers"] == [
        "recommend",
        "plan",
        "throughput",
        "checkpoint",
        "memory",
        "inputs",
        "errors",
    ]
    assert {"aws_cdk", "constructs", "jsii", "torch"} <= set(CONTRACTS["lambda-runtimes"]["forbidden_modules"])
    # importing a runtime runs its parent packages: they import nothing (the constructs are construct.py)
    assert {"aws_cdk", "constructs", "jsii", "platform_constructs.submitter.construct"} <= set(
        CONTRACTS["runtime-parents"]["forbidden_modules"]
    )
    assert CONTRACTS["runtime-parents"]["as_packages"] is False
    assert "torch" in CONTRACTS["pure-families"]["forbidden_modules"]
    # only a family's block modules and the rotary embedding they share may import torch (and TE); the
    # planner none of them
    assert all(
        i.split(" -> ")[0] in ("model_families.*.torch_block", "model_families.*.te_block", "model_families.rotary")
        for i in CONTRACTS["pure-families"]["ignore_imports"]
    )
    assert {"torch", "model_families.rotary", "model_families.*.torch_block", "model_families.*.te_block"} <= set(
        CONTRACTS["pure-planner"]["forbidden_modules"]
    )
    # no library of trainctl is exempt
    assert CONTRACTS["trainctl-commands"]["source_modules"] == ["trainctl.*"]
    assert not CONTRACTS["trainctl-commands"].get("ignore_imports")
    # the constructs: observability above the submitter (which once imported it inside a function), and no cycle
    # inside either package
    layers = CONTRACTS["constructs-layers"]["layers"]
    assert layers.index("platform_constructs.observability") < layers.index("platform_constructs.submitter")
    # no cycle at any depth of any root package (the constructs' namespace top level is constructs-layers')
    assert CONTRACTS["acyclic"]["type"] == "acyclic_siblings"
    roots = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]["root_packages"]
    assert set(CONTRACTS["acyclic"]["ancestors"]) == (set(roots) - {"platform_constructs"}) | {
        "platform_constructs.submitter",
        "platform_constructs.observability",
    }
    # every root package but the development tools' is product, and none of it imports them
    product = CONTRACTS["product-without-devtools"]
    roots = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]["root_packages"]
    named = {root + ".*" if root == "platform_constructs" else root for root in roots}  # a namespace package
    assert set(product["source_modules"]) == named - {"devtools"} and product["forbidden_modules"] == ["devtools"]
    assert not product.get("ignore_imports")
    # each module of devtools is a layer of its own, every module listed: no cycle, function-local imports included
    for contract in ("devtools-layers", "local-aws-layers"):
        assert CONTRACTS[contract]["type"] == "layers" and CONTRACTS[contract]["exhaustive"] is True
        assert all("|" not in layer and ":" not in layer for layer in CONTRACTS[contract]["layers"])


def test_the_tree_keeps_every_contract() -> None:
    result = _lint(REPO, CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


VIOLATIONS = {
    # (file in the copy, code appended: imports inside functions count, as the function-local imports that hid
    # the training <-> planner cycle did)
    "training/metrics.py": "def _planned():\n    from planner import estimate\n    return estimate\n",
    "platform_spec/errors.py": "def _heavy():\n    import numpy\n    return numpy\n",
    "model_families/gpt/__init__.py": "def _block():\n    import torch\n    return torch\n",
    "planner/memory.py": "def _blocks():\n    from model_families.gpt import torch_block\n    return torch_block\n",
    "planner/plan.py": "def _rules():\n    from planner.recommend import recommend\n    return recommend\n",
    "platform_constructs/submitter/runtime/settings.py": "def _cdk():\n    import aws_cdk\n    return aws_cdk\n",
    "platform_constructs/observability/__init__.py": "from .construct import PlatformObservability\n",
    "trainctl/reports/markdown.py": "def _command():\n    from trainctl.commands import plan\n    return plan\n",
    "platform_constructs/submitter/construct.py": (
        "def _pattern():\n    from ..observability.functions import JobStateHandler\n    return JobStateHandler\n"
    ),
    "platform_constructs/observability/runtime/settings.py": "def _back():\n    from . import job_events\n    return job_events\n",
    "trainctl/plans.py": "def _emulator():\n    from devtools.local_aws import stack\n    return stack\n",
    "devtools/local_aws/shapes.py": "def _demo():\n    from devtools import demo\n    return demo\n",
    "devtools/local_aws/stack.py": "def _client():\n    from devtools.local_aws import client\n    return client\n",
    "training/checkpoint/compare.py": "def _manager():\n    from training.checkpoint import manager\n    return manager\n",
}


def test_a_violating_import_breaks_its_contract(tmp_path: Path) -> None:
    """The same contracts over a copy of the tree with one forbidden import per layer: each is reported."""
    for package in ("platform_spec", "model_families", "planner", "training", "trainctl", "stacks", "devtools"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    # the copy of constructs/ under its import name, made a regular package so that it alone is found (as a
    # namespace package, its portions would be the copy and the editable install's constructs/, both scanned)
    shutil.copytree(REPO / "constructs", tmp_path / "platform_constructs", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "platform_constructs" / "__init__.py").write_text("")
    shutil.copy2(CONFIG, tmp_path / "pyproject.toml")
    result = _lint(tmp_path, tmp_path / "pyproject.toml", str(tmp_path))
    assert result.returncode == 0, "the unmodified copy keeps every contract:\n" + result.stdout + result.stderr

    for name, code in VIOLATIONS.items():
        with (tmp_path / name).open("a", encoding="utf-8") as handle:
            handle.write("\n\n" + code)
    result = _lint(tmp_path, tmp_path / "pyproject.toml", str(tmp_path))
    out = " ".join(result.stdout.split())
    assert result.returncode == 1, out
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in out
    for expected in (
        "training.metrics -> planner",
        "platform_spec.errors -> numpy",
        "model_families.gpt -> torch",
        "planner.memory -> model_families.gpt.torch_block",
        "planner.plan -> planner.recommend",
        "platform_constructs.submitter.runtime.settings -> aws_cdk",
        "platform_constructs.observability -> platform_constructs.observability.construct",
        "trainctl.reports.markdown -> trainctl.commands",
        "platform_constructs.submitter.construct -> platform_constructs.observability.functions",
        "No cycles are allowed in platform_constructs.observability.runtime",
        "trainctl.plans -> devtools.local_aws.stack",
        "devtools.local_aws.shapes -> devtools.demo",
        "devtools.local_aws.stack -> devtools.local_aws.client",
        "No cycles are allowed in training.checkpoint",
    ):
        assert expected in out, expected


BLOCKER = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    BLOCKED = {blocked!r}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {{name}}")
            return None

    sys.meta_path.insert(0, Refuse())
    import platform_spec
    for info in pkgutil.walk_packages(platform_spec.__path__, "platform_spec."):
        importlib.import_module(info.name)
    from platform_spec import catalogue, hyperparameters, metric_lines, models, precisions, training_plans

    # use them, so lazy paths run too: the family registry, parsing, the catalogue's derived rules
    assert "gpt-1b" in models.preset_names() and models.get_family("gpt").presets
    hp = hyperparameters.parse(hyperparameters.GUIDE_DEFAULT_REQUEST)
    assert catalogue.dense_peak_tflops("B200", hp.precision) == 4500.0
    assert catalogue.supported_precisions("H100") == ("fp32", "bf16", "fp16", "fp8")
    assert training_plans.foreign_reason("arn:aws:sagemaker:us-east-1:123456789012:training-plan/p", region="us-east-1", account=None) is None
    assert metric_lines.parse_line(metric_lines.format_line({{"step": 1, "loss": 2.0}})) == {{"step": 1.0, "loss": 2.0}}
    assert models.get_family("gpt").flops_per_token(models.get_preset("gpt-1b"), 2048) > 0
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & BLOCKED)
    assert not loaded, loaded
    print("pure", sorted({{m.split(".")[0] for m in sys.modules if m.startswith(("platform_spec", "model_families"))}}))
    """
)
HEAVY = (
    "torch",
    "numpy",
    "boto3",
    "botocore",
    "aws_cdk",
    "constructs",
    "jsii",
    "cdk_nag",
    "aws_lambda_powertools",
    "rich",
    "moto",
)
OURS = ("planner", "training", "trainctl", "stacks", "platform_constructs")


def _run_blocked(blocked: tuple[str, ...], code: str = BLOCKER) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code.format(blocked=set(blocked))], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_platform_spec_is_pure_with_heavy_libraries_and_the_rest_of_the_repo_blocked() -> None:
    result = _run_blocked(HEAVY + OURS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pure ['model_families', 'platform_spec']"


def test_the_blocker_does_refuse_what_it_names() -> None:
    """The purity proof can fail: in the same harness, importing a blocked library is refused."""
    code = BLOCKER.split("import platform_spec")[0] + "import platform_spec.catalogue\nimport numpy\n"
    result = _run_blocked(HEAVY + OURS, code)
    assert result.returncode != 0 and "ImportError: blocked: numpy" in result.stderr


@pytest.mark.parametrize("module", ["model_families", "model_families.gpt"])
def test_the_model_families_pure_modules_import_without_torch(module: str) -> None:
    code = BLOCKER.split("import platform_spec")[0] + f"import {module}\nprint('ok')\n"
    result = _run_blocked(HEAVY + OURS, code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
