"""The Lambda packages: their declared roots (and nothing else), under their import names, built without
Docker, lean, each function answering with only its package, content-hashed; the runtimes import without the
CDK."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devtools.local_aws.stack import StackResources
from platform_constructs.observability import functions as observability
from platform_constructs.observability.runtime import settings as observability_settings
from platform_constructs.submitter import bundling
from platform_constructs.submitter.bundling import SUBMITTER, LambdaPackage
from platform_constructs.submitter.runtime import settings as submitter_settings
from platform_constructs.submitter.runtime.actions import READ_ACTIONS

pytestmark = pytest.mark.xdist_group("cdk")

HANDLER_MODULE = "platform_constructs.submitter.runtime.handler"
OURS = ("platform_constructs", "platform_spec", "model_families", "planner", "training", "stacks", "trainctl")


def _staged(synth, function) -> Path:
    """The staged Lambda asset folder of ``function`` in ``synth``."""
    code = synth.resources[synth.logical_id(function)]["Properties"]["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    assets = json.loads((synth.outdir / "TrainingPlatform.assets.json").read_text())
    path = synth.outdir / assets["files"][asset_hash]["source"]["path"]
    assert path.is_dir()
    return path


@pytest.fixture(scope="module")
def package(default_synth) -> Path:
    """The staged Lambda asset folder of the default synth's submitter."""
    return _staged(default_synth, default_synth.stack.submitter.function)


@pytest.fixture(scope="module")
def packages(default_synth, package) -> dict[str, Path]:
    """Each package's staged folder, by its display name."""
    observability_function = default_synth.stack.observability.job_outcomes.function
    return {
        SUBMITTER.display_name: package,
        observability.PACKAGE.display_name: _staged(default_synth, observability_function),
    }


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _paths(package: LambdaPackage, repo_root: Path = bundling.REPO_ROOT) -> set[str]:
    """The package paths of ``package``'s own code."""
    return {name for _, name in package.sources(repo_root)}


def _modules(package: LambdaPackage) -> set[str]:
    """The import names of ``package``'s own modules."""
    return {name.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for name in _paths(package)}


# -- the runtimes are plain packages ----------------------------------------------------------------

NO_CDK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            # the CDK and torch; and boto3-stubs' client types (mypy_boto3_*), which the runtimes import for
            # the type checker only (under TYPE_CHECKING): the deployed packages do not carry them
            if top in {"aws_cdk", "jsii", "constructs", "cdk_nag", "torch"} or top.startswith("mypy_boto3"):
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Refuse())
    import platform_constructs.submitter.runtime.handler as handler
    import platform_constructs.observability.runtime.job_events as job_events
    import platform_constructs.observability.runtime.plan_metrics as plan_metrics
    from platform_constructs.submitter.runtime import config, settings

    assert callable(handler.lambda_handler) and callable(job_events.lambda_handler) and callable(plan_metrics.lambda_handler)
    assert config.default_allowed_instance_types(("amd64",)) and settings.function_environment  # lazy paths too
    constructs_modules = sorted(
        m for m in sys.modules
        if m.startswith("platform_constructs.") and ".runtime" not in m and ".lambda_runtime" not in m
    )
    print(constructs_modules)
    """
)


def test_the_runtimes_import_without_the_cdk() -> None:
    """Importing a handler runs no construct code: the CDK, jsii, the constructs library and torch are refused
    (the blocker raises on any attempt), and of ``platform_constructs`` only the runtimes' parent packages load.
    The boto3-stubs client types are refused too: the runtimes import them for mypy only."""
    result = subprocess.run(
        [sys.executable, "-c", NO_CDK], cwd=bundling.REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['platform_constructs.observability', 'platform_constructs.submitter']"


def test_the_cdk_blocker_does_refuse() -> None:
    """The proof above can fail: the same harness refuses the construct module."""
    code = NO_CDK.split("import platform_constructs")[0] + "import platform_constructs.submitter.construct\n"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=bundling.REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "ImportError: blocked: aws_cdk" in result.stderr


# -- the declared roots -----------------------------------------------------------------------------

TOY_FILES = {
    "pyproject.toml": '[tool.setuptools]\npackage-dir = { "mapped" = "src" }\n',
    "src/app/__init__.py": "",
    "src/app/runtime/__init__.py": "",
    "src/app/runtime/handler.py": "",
    "src/app/runtime/new_module.py": "",
    "src/app/runtime/sub/__init__.py": "",
    "src/app/construct.py": "import aws_cdk\n",
    "pure/__init__.py": "",
    "pure/fact.py": "",
    "pure/family/__init__.py": "",
    "pure/family/torch_block.py": "import torch\n",
    "pure/family/te_block.py": "import transformer_engine\n",
    "pure/tests/test_fact.py": "",
    "notapackage/module.py": "",
}


def _toy(root: Path) -> Path:
    for name, text in TOY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_package_is_its_roots_under_their_import_names_less_the_excluded(tmp_path: Path) -> None:
    toy = LambdaPackage(
        handlers=("mapped.app.runtime.handler.lambda_handler",),
        roots=("mapped.app.runtime", "pure"),
        requirements=tmp_path / "r.txt",
    )
    assert _paths(toy, _toy(tmp_path)) == {
        "mapped/app/__init__.py", "mapped/app/runtime/__init__.py", "mapped/app/runtime/handler.py",
        "mapped/app/runtime/new_module.py", "mapped/app/runtime/sub/__init__.py",  # every module: none listed
        "pure/__init__.py", "pure/fact.py", "pure/family/__init__.py",
    }  # src/ is `mapped`; the construct beside the root, the torch and TE blocks and the tests stay out  # fmt: skip
    sources = {name: path for path, name in toy.sources(tmp_path)}
    assert sources["mapped/app/runtime/sub/__init__.py"] == tmp_path / "src/app/runtime/sub/__init__.py"


def test_a_root_outside_the_repository_is_refused(tmp_path: Path) -> None:
    _toy(tmp_path)
    for root in ("mapped.app.missing", "notapackage", "json"):
        toy = LambdaPackage(handlers=("pure.fact.f",), roots=(root,), requirements=tmp_path / "r.txt")
        with pytest.raises(
            ValueError, match=rf"LambdaPackage\.roots: got '{root}'; expected a package of the repository"
        ):
            toy.sources(tmp_path)
    # a handler outside the roots: beside them (construct code), or under a folder's name instead of its import name
    for handler, root in (
        ("mapped.app.construct.f", "mapped.app.runtime"),
        ("mapped.app.runtime.handler.f", "src.app.runtime"),
    ):
        outside = LambdaPackage(handlers=(handler,), roots=(root,), requirements=tmp_path / "r.txt")
        with pytest.raises(ValueError, match=rf"'{handler}': its module is not under the roots \('{root}',\)"):
            outside.sources(tmp_path)
    with pytest.raises(ValueError, match=r"LambdaPackage\.handlers: got 'handler'; expected 'module\.function'"):
        LambdaPackage(handlers=("handler",), roots=("pure",), requirements=tmp_path / "r.txt")
    with pytest.raises(ValueError, match="expected a non-empty tuple"):
        LambdaPackage(handlers=(), roots=("pure",), requirements=tmp_path / "r.txt")
    with pytest.raises(ValueError, match=r"LambdaPackage\.roots: got \(\); expected a non-empty tuple"):
        LambdaPackage(handlers=("pure.fact.f",), roots=(), requirements=tmp_path / "r.txt")


def _imports_that_run(path: Path) -> set[str]:
    """Top-level names ``path`` imports absolutely, anywhere but under ``if TYPE_CHECKING:`` (which never runs)."""
    tree = ast.parse(path.read_bytes())
    skipped = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for statement in branch.body
        for node in ast.walk(statement)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_the_submitters_package_is_the_runtime_and_the_pure_packages_it_reads() -> None:
    names = _modules(SUBMITTER)
    assert {HANDLER_MODULE, "platform_constructs.submitter", "platform_constructs.submitter.runtime",
            "platform_constructs.submitter.runtime.service", "platform_spec.hyperparameters", "platform_spec.models",
            "model_families", "model_families.gpt", "planner", "planner.recommend"} <= names  # fmt: skip
    assert not {n for n in names if n.split(".")[0] in ("training", "stacks", "trainctl")}
    assert not {"platform_constructs.submitter.construct", "platform_constructs.submitter.bundling"} & names
    assert not {n for n in names if n.startswith("platform_constructs.observability")}
    assert not {
        n for n in names if n.endswith(("torch_block", "te_block", "rotary"))
    }  # a family's torch blocks are the trainer's


@pytest.mark.parametrize("lambda_package", [SUBMITTER, observability.PACKAGE], ids=lambda p: p.display_name)
def test_every_library_the_package_imports_is_the_standard_librarys_ours_or_a_pinned_requirement(lambda_package):
    """What the package's modules import (lazily too; not under ``TYPE_CHECKING``) is in the package: no torch, no
    CDK, nothing of ours outside the roots (:data:`bundling.EXCLUDE` keeps the torch blocks out)."""
    imported = set().union(*(_imports_that_run(path) for path, _ in lambda_package.sources()))
    ours = {name.partition("/")[0] for name in _paths(lambda_package)}
    installed = {p.name for p in lambda_package.installed_dependencies().iterdir()}
    third_party = imported - set(sys.stdlib_module_names) - ours
    assert third_party and third_party <= installed, third_party - installed
    assert not imported & {"torch", "aws_cdk", "constructs", "jsii", "training", "trainctl", "stacks"}


# -- the built package ------------------------------------------------------------------------------


def _sources(files: set[str]) -> set[str]:
    return {f for f in files if "__pycache__/" not in f}


@pytest.mark.parametrize("lambda_package", [SUBMITTER, observability.PACKAGE], ids=lambda p: p.display_name)
def test_the_package_holds_exactly_its_declared_roots(packages, lambda_package):
    package = packages[lambda_package.display_name]
    dependencies = _files(lambda_package.installed_dependencies()) - {".complete"}
    ours = _sources(_files(package) - dependencies)
    assert ours == _paths(lambda_package)
    for handler in lambda_package.handlers:  # each handler's module, and the runtime's parent package
        module = handler.rpartition(".")[0]
        assert module.replace(".", "/") + ".py" in ours
        assert module.rsplit(".", 2)[0].replace(".", "/") + "/__init__.py" in ours
    assert not {p.name for p in package.iterdir()} & {"runtime", "training", "stacks", "trainctl", "constructs"}
    if lambda_package is observability.PACKAGE:  # the training-plan ARN rule, never the planner
        assert "platform_spec/training_plans.py" in ours and not {"planner", "model_families"} & set(
            os.listdir(package)
        )


def test_package_is_lean(package):
    top = {p.name for p in package.iterdir()}
    assert not {"torch", "numpy", "tokenizers", "safetensors", "aws_cdk", "jsii", "moto"} & top
    assert not any(p.name.startswith("torch") for p in package.iterdir())
    compiler = bundling.bytecode_compiler()
    tags = {p.name.split(".")[-2] for p in package.rglob("*.pyc")}  # name.cpython-313.pyc
    assert tags == ({compiler.cache_tag} if compiler else set())  # no other interpreter's bytecode
    assert not (package / "bin").exists()
    size_mb = sum(f.stat().st_size for f in package.rglob("*") if f.is_file()) / 1e6
    assert size_mb < 100  # Lambda's limit is 250 MB unzipped; boto3 + powertools is ~45 MB


def test_dependencies_match_the_pinned_requirements(package):
    pins = {}
    for line in SUBMITTER.requirements.read_text().splitlines():
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
    """The handler, as Lambda names it, imports and works with nothing but the package and the standard library
    on sys.path, through its lazy paths too (the model-family registry, the planner's recommendations, botocore's
    model), and every module of ours it loads is in the package (no torch, no CDK)."""
    module, _, function = SUBMITTER.handlers[0].rpartition(".")
    code = textwrap.dedent(
        f"""
        import importlib, json, sys
        sys.path[:0] = [{str(package)!r}]
        handler = importlib.import_module({module!r})
        assert callable(getattr(handler, {function!r}))
        import boto3, planner
        from platform_spec import hyperparameters
        from platform_constructs.submitter.runtime import config, request, sagemaker_rules
        assert boto3.__file__.startswith(sys.path[0]), boto3.__file__
        assert hyperparameters.MODEL_PRESETS[:2] == ("gpt-tiny", "gpt-1b")  # families found in the package
        guide = planner.PlanInput.from_request(dict(hyperparameters.GUIDE_DEFAULT_REQUEST), instance_type="ml.p6-b200.48xlarge")
        assert planner.estimate(guide).recommendations is not None and planner.auto_tune(guide) is not None
        assert "ml.p6-b200.48xlarge" in sagemaker_rules.training_instance_types()
        cfg = config.SubmitterConfig(trainer_image_uris={{"amd64": "i"}}, execution_role_arn="arn:aws:iam::123456789012:role/r",
                                     data_bucket="data-bucket", checkpoint_bucket="ckpt-bucket", output_bucket="out-bucket",
                                     output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
                                     training_plan_arns_parameter="/p")
        request.parse_request({{"inputs": {{"train": "x/"}}, "hyperparameters": {{"model": "gpt-1b"}}}}, cfg)
        ours = sorted(name for name, m in sys.modules.items() if name.split(".")[0] in {OURS!r})
        assert all(sys.modules[n].__file__ is None or sys.modules[n].__file__.startswith(sys.path[0]) for n in ours
                   if getattr(sys.modules[n], "__file__", None)), ours
        assert not {{"torch", "aws_cdk", "jsii", "constructs", "training"}} & set(sys.modules)
        print(json.dumps(ours))
        """
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_SERVICE_NAME": "job-submitter",
        "POWERTOOLS_METRICS_NAMESPACE": "TrainingPlatform",
    }
    # -S: no site-packages (so no venv and no editable install); -I: isolated from the repo; -B: the staged
    # asset gets no bytecode of this interpreter
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-B", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=package,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout)) - {"platform_constructs"}  # a namespace package: no file
    assert loaded <= _modules(SUBMITTER), loaded - _modules(SUBMITTER)


ANSWER = textwrap.dedent(
    """
    import importlib, json, sys, types
    package, handler, event = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    sys.path[:0] = [package]
    module, _, function = handler.rpartition(".")
    context = types.SimpleNamespace(
        function_name="packaged", memory_limit_in_mb=512, aws_request_id="req-packaged",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:packaged",
        get_remaining_time_in_millis=lambda: 60_000,
    )
    answer = getattr(importlib.import_module(module), function)(event, context)
    ours = {name: m.__file__ for name, m in sys.modules.items() if name.split(".")[0] in OURS and getattr(m, "__file__", None)}
    print("ANSWER " + json.dumps({"answer": answer, "outside": sorted(n for n, f in ours.items() if not f.startswith(package)),
                                  "torch_or_cdk": sorted({"torch", "aws_cdk", "jsii", "constructs"} & set(sys.modules))}, default=str))
    """
).replace("OURS", repr(set(OURS)))
"""Run in ``python -S -I -B`` with ARGV ``PACKAGE HANDLER EVENT``: Lambda's call of the handler, the package alone on
``sys.path`` (and the standard library); prints its answer and the modules of ours loaded from elsewhere."""

IDEMPOTENCY_TABLE = StackResources().job_events_table  # the name the emulator grants the function
PLAN = {"TrainingPlanName": "packaged-plan", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 2, "StartTime": "now-1d", "EndTime": "now+10d"}  # fmt: skip
SCHEDULED = {"source": "aws.events", "detail-type": "Scheduled Event", "time": "2026-03-01T12:00:00Z"}
JOB_STATE_CHANGE = {
    "id": "packaged-event", "source": "aws.sagemaker", "detail-type": "SageMaker Training Job State Change",
    "time": "2026-03-01T12:00:00Z", "resources": ["arn:aws:sagemaker:us-east-1:123456789012:training-job/packaged"],
    "detail": {"TrainingJobName": "packaged", "TrainingJobStatus": "Completed"},
}  # fmt: skip
FUNCTIONS = {
    # function: (package, handler, its environment beyond the emulator's, event, what of its answer, expected)
    "submitter": (
        SUBMITTER, SUBMITTER.handlers[0], {},
        {"hyperparameters": {"model": "gpt-tiny"}, "inputs": {"train": "datasets/packaged/"}, "dry_run": True,
         "client_token": "packaged-dry-run"},
        lambda answer: answer["status"], "validated",
    ),
    "reader": (
        SUBMITTER, SUBMITTER.handlers[0],
        {submitter_settings.ENV_ALLOWED_ACTIONS: ",".join(READ_ACTIONS)},
        {"action": "list"}, lambda answer: answer["status"], "listed",
    ),
    "continuation": (
        SUBMITTER, SUBMITTER.handlers[1], {}, SCHEDULED,
        lambda answer: (answer["status"], answer["decisions"]), ("ticked", []),
    ),
    "plan metrics": (
        observability.PACKAGE, observability.PLAN_METRICS_HANDLER, {}, SCHEDULED,
        lambda answer: ([p["training_plan_name"] for p in answer["plans"]], answer["problems"]), (["packaged-plan"], []),
    ),
    "job outcomes": (
        observability.PACKAGE, observability.JOB_EVENTS_HANDLER,
        {observability_settings.ENV_IDEMPOTENCY_TABLE: IDEMPOTENCY_TABLE}, JOB_STATE_CHANGE,
        lambda answer: answer["counted"], True,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def emulator():
    """``trainctl local-aws`` with one active plan and the job-outcomes function's idempotency table."""
    from devtools.local_aws.client import LocalAws

    with LocalAws(plans=[PLAN]) as aws:
        aws.client("dynamodb").create_table(
            TableName=IDEMPOTENCY_TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield aws


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_answers_with_only_its_package_on_the_path(packages, emulator, function):
    """The declared roots are enough: each deployed function's handler, called as Lambda calls it with nothing but
    its staged package and the standard library on ``sys.path``, answers a request against the emulator, and
    every module of ours it loaded came from the package (no torch, no CDK)."""
    lambda_package, handler, environment, event, summary, expected = FUNCTIONS[function]
    package = packages[lambda_package.display_name]
    # as the deployed function: its role's credentials (the emulator authorizes each call against its policies)
    env = {"PATH": os.environ.get("PATH", ""), **emulator.function_env(handler), **environment}
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-B", "-c", ANSWER, str(package), handler, json.dumps(event)],
        capture_output=True,
        text=True,
        env=env,
        cwd=package,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("ANSWER ")]
    out = json.loads(line.removeprefix("ANSWER "))
    assert summary(out["answer"]) == expected, out["answer"]
    assert out["outside"] == [] and out["torch_or_cdk"] == []


# -- the asset hash ---------------------------------------------------------------------------------


def _copy_of_the_package(root: Path) -> Path:
    """The files the submitter's package is made of, at their repository paths, plus pyproject.toml."""
    for source, _ in SUBMITTER.sources():
        target = root / source.relative_to(bundling.REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    shutil.copy2(bundling.REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_asset_hash_tracks_the_declared_roots(tmp_path: Path) -> None:
    root = _copy_of_the_package(tmp_path / "repo")
    original = SUBMITTER.asset_hash(root)
    assert original == SUBMITTER.asset_hash(bundling.REPO_ROOT)  # same content, same hash

    # files outside the roots or excluded: the trainer, a family's torch block, the construct, bytecode, tests
    (root / "training").mkdir()
    (root / "training" / "__init__.py").write_text("import torch\n")
    (root / "model_families" / "gpt" / "torch_block.py").write_text("import torch\n")
    (root / "constructs" / "submitter" / "construct.py").write_text("import aws_cdk\n")
    (root / "planner" / "__pycache__").mkdir()
    (root / "planner" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (root / "planner" / "tests").mkdir()
    (root / "planner" / "tests" / "test_x.py").write_text("import pytest\n")
    assert SUBMITTER.asset_hash(root) == original

    # a module of the package changes
    hyperparameters = root / "platform_spec" / "hyperparameters.py"
    text = hyperparameters.read_text()
    hyperparameters.write_text(text + "\n# changed\n")
    changed = SUBMITTER.asset_hash(root)
    assert changed != original
    hyperparameters.write_text(text)
    assert SUBMITTER.asset_hash(root) == original

    # a new module under a root (the runtime's, say) joins the package and the hash without being listed
    (root / "constructs" / "submitter" / "runtime" / "ledger.py").write_text("RECORDS = 1\n")
    assert "platform_constructs/submitter/runtime/ledger.py" in _paths(SUBMITTER, root)
    assert SUBMITTER.asset_hash(root) not in (original, changed)


def test_asset_hash_tracks_the_requirements(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(SUBMITTER.requirements.read_text())
    same = dataclasses.replace(SUBMITTER, requirements=requirements)
    assert same.asset_hash() == SUBMITTER.asset_hash()
    requirements.write_text(SUBMITTER.requirements.read_text() + "\n# a comment changes nothing\n")
    assert same.asset_hash() == SUBMITTER.asset_hash()
    requirements.write_text(SUBMITTER.requirements.read_text().replace("six==1.17.0", "six==1.16.0"))
    assert same.asset_hash() != SUBMITTER.asset_hash()


def test_dependency_cache_is_reused():
    first = SUBMITTER.installed_dependencies()
    assert first.parent == bundling.CACHE_DIR and (first / ".complete").is_file()
    assert SUBMITTER.installed_dependencies() == first
    assert first.name == SUBMITTER.dependencies_key()


# -- bytecode ---------------------------------------------------------------------------------------

COMPILER = bundling.bytecode_compiler()
needs_compiler = pytest.mark.skipif(
    COMPILER is None,
    reason=f"no CPython {bundling.PYTHON_VERSION} on this machine: the package ships source only "
    f"(test_the_bytecode_compiler_is_chosen_or_refused_by_name covers that case)",
)

CHECK_BYTECODE = textwrap.dedent(
    """
    import importlib.util, json, pathlib, sys
    root = pathlib.Path(sys.argv[1])
    problems, count = [], 0
    for source in sorted(root.rglob("*.py")):
        count += 1
        pyc = pathlib.Path(importlib.util.cache_from_source(str(source)))
        if not pyc.is_file():
            problems.append(f"{source.relative_to(root)}: no {pyc.name}")
            continue
        header = pyc.read_bytes()[:16]
        flags = int.from_bytes(header[4:8], "little")
        if header[:4] != importlib.util.MAGIC_NUMBER:
            problems.append(f"{pyc.relative_to(root)}: magic {header[:4].hex()}")
        elif flags != 0b01:  # PEP 552: bit 0 hash-based, bit 1 check_source
            problems.append(f"{pyc.relative_to(root)}: flags {flags:#04b}, expected 0b01 (unchecked hash)")
        elif header[8:16] != importlib.util.source_hash(source.read_bytes()):
            problems.append(f"{pyc.relative_to(root)}: compiled from another source")
    print(json.dumps({"sources": count, "problems": problems}))
    """
)


@needs_compiler
def test_every_module_ships_unchecked_hash_bytecode_of_its_own_source(package):
    """Every ``.py`` of the package, ours and the dependencies', has the runtime's ``.pyc`` beside it: its
    interpreter's magic number, unchecked hash-based (PEP 552), and the hash of the very source shipped."""
    result = subprocess.run(
        [COMPILER.executable, "-S", "-c", CHECK_BYTECODE, str(package)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    checked = json.loads(result.stdout)
    assert checked["problems"] == []
    ours = _paths(SUBMITTER)
    assert checked["sources"] > len(ours) + 300  # botocore, boto3, powertools... were checked too
    for path in ours:
        pyc = package / path.rpartition("/")[0] / "__pycache__" / f"{Path(path).stem}.{COMPILER.cache_tag}.pyc"
        assert pyc.is_file(), path


@needs_compiler
def test_the_runtime_loads_the_bytecode_without_reading_a_source(package, tmp_path: Path) -> None:
    """What Lambda does with the package: every file's time reset (the CDK asset zipper writes one date), our
    sources replaced by a line that raises, and the handler still imports and answers through its lazy paths
    on the runtime's Python, from the bytecode alone (Python only checks that a source exists)."""
    copy = tmp_path / "package"
    shutil.copytree(package, copy)
    for path in copy.rglob("*"):
        os.utime(path, (315532800, 315532800))  # 1980-01-01, as in a zip
    for path in _paths(SUBMITTER):
        (copy / path).write_text("raise ImportError('the source was read')\n")
    code = textwrap.dedent(
        """
        import importlib, sys
        handler = importlib.import_module("platform_constructs.submitter.runtime.handler")
        import planner
        from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST
        guide = planner.PlanInput.from_request(dict(GUIDE_DEFAULT_REQUEST), instance_type="ml.p6-b200.48xlarge")
        assert planner.estimate(guide).fits is not None and planner.auto_tune(guide) is not None
        ours = [m for n, m in sys.modules.items() if n.split(".")[0] in {"platform_constructs", "platform_spec",
                "planner", "model_families"} and getattr(m, "__file__", None)]
        assert ours and all(m.__cached__ and m.__file__.startswith(sys.argv[1]) for m in ours), ours
        print(len(ours))
        """
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(copy), "AWS_DEFAULT_REGION": "us-west-2"}
    result = subprocess.run(
        [COMPILER.executable, "-S", "-B", "-c", code, str(copy)],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 20

    # the proof can fail: where the bytecode is checked against its source, the line that raises is read
    result = subprocess.run(
        [COMPILER.executable, "-S", "-B", "--check-hash-based-pycs", "always", "-c", code, str(copy)],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy,
        timeout=120,
    )
    assert result.returncode != 0 and "the source was read" in result.stderr


def test_the_bytecode_compiler_is_chosen_or_refused_by_name(monkeypatch) -> None:
    """``$LAMBDA_BYTECODE_PYTHON`` names the compiler: ``none`` ships source only (another cache key, so another
    asset hash); a path that is not a final CPython 3.13 is refused with the variable, the value and what was
    expected, before anything is installed or built."""
    default_key = SUBMITTER.dependencies_key()
    monkeypatch.setenv(bundling.BYTECODE_PYTHON_ENV, "none")
    assert bundling.bytecode_compiler() is None
    assert SUBMITTER.dependencies_key() != default_key or COMPILER is None

    for wrong in ("/nonexistent/python3.13", sys.executable if sys.version_info[:2] != (3, 13) else "/bin/true"):
        monkeypatch.setenv(bundling.BYTECODE_PYTHON_ENV, wrong)
        with pytest.raises(
            ValueError, match=rf"^{bundling.BYTECODE_PYTHON_ENV}: got '{wrong}'; expected a final CPython"
        ):
            bundling.bytecode_compiler()
        with pytest.raises(ValueError, match=bundling.BYTECODE_PYTHON_ENV):
            SUBMITTER.asset_hash()  # synth stops here, before pip or a bundle

    if COMPILER is not None:
        monkeypatch.setenv(bundling.BYTECODE_PYTHON_ENV, COMPILER.executable)
        assert bundling.bytecode_compiler() == COMPILER
        assert SUBMITTER.dependencies_key() == default_key


def test_the_docker_fallback_compiles_the_same_bytecode() -> None:
    """CDK's required Docker description of the bundling (never used: local bundling always runs) ends with the
    same unchecked-hash compile, by the image's Python (the runtime's)."""
    command = SUBMITTER.bundling_options().command
    assert command is not None
    assert command[-1].endswith(
        f"python -m compileall -q -j 0 --invalidation-mode unchecked-hash -d {bundling.TASK_ROOT} /asset-output"
    )
