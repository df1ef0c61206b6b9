"""The Lambda packages: what the handlers import (and nothing else), under their import names, built
without Docker, lean, importable on their own, content-hashed; the runtimes import without the CDK."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from platform_constructs.submitter import bundling
from platform_constructs.submitter.bundling import SUBMITTER, LambdaPackage, import_closure

pytestmark = pytest.mark.xdist_group("cdk")

HANDLER_MODULE = "platform_constructs.submitter.runtime.handler"
OURS = ("platform_constructs", "platform_spec", "model_families", "planner", "training", "stacks", "trainctl")


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


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


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
    assert config.default_allowed_instance_types() and settings.function_environment  # lazy paths too
    constructs_modules = sorted(m for m in sys.modules if m.startswith("platform_constructs.") and ".runtime" not in m)
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


# -- the closure's rules ----------------------------------------------------------------------------

TOY_FILES = {
    "pyproject.toml": '[tool.setuptools]\npackage-dir = { "mapped" = "src" }\n',
    "src/app/__init__.py": "",
    "src/app/handler.py": textwrap.dedent(
        """
        from __future__ import annotations

        import importlib
        import json
        from typing import TYPE_CHECKING

        import pure.deep.leaf
        from pure import helpers
        from . import settings
        from .sub import thing

        if TYPE_CHECKING:
            from heavy import torchy  # never runs

        REGISTRY = "plugins"


        def lazy():
            import boto3
            from .lazy_mod import value
            return boto3, value


        def registered():
            return importlib.import_module(REGISTRY)


        def computed(name):
            return importlib.import_module(f"plugins.{name}")  # a computed name: not followed
        """
    ),
    "src/app/settings.py": "NAME = 'x'\n",
    "src/app/sub/__init__.py": "thing = 1\n",
    "src/app/lazy_mod.py": "from .. import other\nvalue = other\n",
    "src/app/unused.py": "import heavy\n",
    "src/other.py": "",
    "src/construct.py": "import aws_cdk\n",
    "pure/__init__.py": "",
    "pure/helpers.py": "",
    "pure/unused.py": "",
    "pure/deep/__init__.py": "",
    "pure/deep/leaf.py": "from ..helpers import *\n",
    "heavy/__init__.py": "import torch\n",
    "heavy/torchy.py": "",
    "plugins/__init__.py": textwrap.dedent(
        """
        import importlib

        KINDS = ("alpha",)
        for _kind in KINDS:  # a registration list
            importlib.import_module(f"{__name__}.{_kind}")
        importlib.import_module(".beta", __name__)


        def block(kind):
            return importlib.import_module(f".{kind}_part", __name__)  # a computed name: not followed
        """
    ),
    "plugins/alpha.py": "",
    "plugins/beta.py": "",
    "plugins/torch_part.py": "import torch\n",
    "tests/test_x.py": "",
}


def _toy(root: Path) -> Path:
    for name, text in TOY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_closure_follows_every_import_that_can_run_and_nothing_else(tmp_path: Path) -> None:
    closure = import_closure(["mapped.app.handler"], _toy(tmp_path))
    assert closure.names() == (
        "mapped.app", "mapped.app.handler", "mapped.app.lazy_mod", "mapped.app.settings", "mapped.app.sub",
        "mapped.other", "plugins", "plugins.alpha", "plugins.beta", "pure", "pure.deep", "pure.deep.leaf", "pure.helpers",
    )  # fmt: skip
    assert closure.package_paths() == (
        "mapped/app/__init__.py", "mapped/app/handler.py", "mapped/app/lazy_mod.py", "mapped/app/settings.py",
        "mapped/app/sub/__init__.py", "mapped/other.py", "plugins/__init__.py", "plugins/alpha.py", "plugins/beta.py",
        "pure/__init__.py",
        "pure/deep/__init__.py", "pure/deep/leaf.py", "pure/helpers.py",
    )  # laid out under import names: src/ is `mapped`  # fmt: skip
    assert closure.external == {"__future__", "boto3", "importlib", "json", "typing"}
    paths = {m.name: m.path for m in closure.modules}
    assert paths["mapped.app.sub"] == tmp_path / "src/app/sub/__init__.py"


def test_a_root_outside_the_repository_is_refused(tmp_path: Path) -> None:
    _toy(tmp_path)
    for root in ("mapped.app.missing", "src.app.handler", "tests.test_x", "json"):
        with pytest.raises(ValueError, match=rf"module '{root}': not a module of the repository"):
            import_closure([root], tmp_path)
    with pytest.raises(ValueError, match=r"LambdaPackage\.handlers: got 'handler'; expected 'module\.function'"):
        LambdaPackage(handlers=("handler",), requirements=tmp_path / "r.txt")
    with pytest.raises(ValueError, match="expected a non-empty tuple"):
        LambdaPackage(handlers=(), requirements=tmp_path / "r.txt")


def test_the_submitters_closure_is_the_runtime_and_the_pure_packages_it_reads() -> None:
    closure = SUBMITTER.closure()
    names = set(closure.names())
    assert {HANDLER_MODULE, "platform_constructs.submitter", "platform_constructs.submitter.runtime",
            "platform_constructs.submitter.runtime.service", "platform_spec.hyperparameters", "platform_spec.models",
            "model_families", "model_families.gpt", "planner", "planner.recommend"} <= names  # fmt: skip
    assert not {n for n in names if n.split(".")[0] in ("training", "stacks", "trainctl")}
    assert not {"platform_constructs.submitter.construct", "platform_constructs.submitter.bundling"} & names
    assert not {n for n in names if n.startswith("platform_constructs.observability")}
    assert not {
        n for n in names if n.endswith(("torch_block", "te_block"))
    }  # a family's torch blocks are the trainer's
    # every library it imports is the standard library's or a pinned requirement's (installed in the package)
    third_party = closure.external - set(sys.stdlib_module_names)
    installed = {p.name for p in SUBMITTER.installed_dependencies().iterdir()}
    assert third_party and third_party <= installed, third_party - installed


# -- the built package ------------------------------------------------------------------------------


def _sources(files: set[str]) -> set[str]:
    return {f for f in files if "__pycache__/" not in f}


def test_the_package_holds_exactly_the_handlers_import_closure(package):
    dependencies = _files(SUBMITTER.installed_dependencies()) - {".complete"}
    ours = _sources(_files(package) - dependencies)
    assert ours == set(SUBMITTER.closure().package_paths())
    assert (
        "platform_constructs/submitter/runtime/handler.py" in ours
        and "platform_constructs/submitter/__init__.py" in ours
    )
    assert not {p.name for p in package.iterdir()} & {"runtime", "training", "stacks", "trainctl", "constructs"}


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
        cfg = config.SubmitterConfig(trainer_image_uri="i", execution_role_arn="arn:aws:iam::123456789012:role/r",
                                     data_bucket="data-bucket", checkpoint_bucket="ckpt-bucket", output_bucket="out-bucket",
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
    assert loaded <= set(SUBMITTER.closure().names()), loaded - set(SUBMITTER.closure().names())


# -- the asset hash ---------------------------------------------------------------------------------


def _copy_of_the_closure(root: Path) -> Path:
    """The files the submitter's package is made of, at their repository paths, plus pyproject.toml."""
    for module in SUBMITTER.closure().modules:
        target = root / module.path.relative_to(bundling.REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module.path, target)
    shutil.copy2(bundling.REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_asset_hash_tracks_what_the_handler_imports(tmp_path: Path) -> None:
    root = _copy_of_the_closure(tmp_path / "repo")
    original = SUBMITTER.asset_hash(root)
    assert original == SUBMITTER.asset_hash(bundling.REPO_ROOT)  # same content, same hash

    # modules the handler does not import: the trainer, a family's torch block, the construct, a new fact
    (root / "training").mkdir()
    (root / "training" / "__init__.py").write_text("import torch\n")
    (root / "model_families" / "gpt" / "torch_block.py").write_text("import torch\n")
    (root / "constructs" / "submitter" / "construct.py").write_text("import aws_cdk\n")
    (root / "platform_spec" / "new_fact.py").write_text("FACT = 1\n")
    (root / "planner" / "__pycache__").mkdir()
    (root / "planner" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert SUBMITTER.asset_hash(root) == original

    # an imported module changes
    hyperparameters = root / "platform_spec" / "hyperparameters.py"
    text = hyperparameters.read_text()
    hyperparameters.write_text(text + "\n# changed\n")
    changed = SUBMITTER.asset_hash(root)
    assert changed != original
    hyperparameters.write_text(text)
    assert SUBMITTER.asset_hash(root) == original

    # a module becomes imported (lazily): it joins the package and the hash
    settings = root / "constructs" / "submitter" / "runtime" / "settings.py"
    settings.write_text(
        settings.read_text() + "\n\ndef _fact():\n    from platform_spec import new_fact\n    return new_fact\n"
    )
    assert "platform_spec.new_fact" in SUBMITTER.closure(root).names()
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
    ours = SUBMITTER.closure().package_paths()
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
    for path in SUBMITTER.closure().package_paths():
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
