"""The platform's Python Lambda packages, built from declared roots without Docker.

A :class:`LambdaPackage` carries its roots (packages of this repository, by import name) whole, each under its
import name, with the ``__init__.py`` of every package above a root (importing ``a.b.c`` runs ``a`` and ``a.b``),
less :data:`EXCLUDE`; a module added to a runtime needs no listing. Construct code sits beside the runtimes,
outside every root. The job submitter's package (:data:`SUBMITTER`)::

    platform_constructs/submitter/__init__.py, runtime/   platform_constructs/lambda_runtime/   platform_spec/
    planner/   model_families/ (less the torch and TE blocks)   boto3/, botocore/, ... <- runtime/requirements.txt

The pinned requirements are pure Python: ``pip install --platform manylinux2014_aarch64 --python-version 3.13
--only-binary=:all:`` on any machine gives what the arm64 Python 3.13 runtime needs, cached under
``.cache/submitter-deps/<key>/`` and hard-linked into each bundle where the file system allows.

Bytecode: Lambda's file system is read-only, so without ``.pyc`` files every cold start compiles every module it
imports. Each ``.py`` file ships ``__pycache__/<name>.cpython-313.pyc`` compiled by a CPython
:data:`PYTHON_VERSION` (:func:`bytecode_compiler`) as *unchecked hash-based* bytecode (PEP 552), loaded without
looking at the source: time-stamped files would be stale (the CDK asset zipper resets file times), checked ones
would hash every source at import; unchecked ones stay valid in an immutable package. Without a 3.13 the package
ships source only (slower cold starts, same behaviour), with a warning, and its asset hash says so.

The asset hash is computed here from the inputs (the dependency key, each source's package path and bytes), so
CDK skips bundling when ``cdk.out`` already holds the asset.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

__all__ = [
    "ARCHITECTURE", "BYTECODE_PYTHON_ENV", "CACHE_DIR", "EXCLUDE", "PIP_PLATFORM", "PYTHON_VERSION", "REPO_ROOT",
    "RUNTIME", "SUBMITTER", "TASK_ROOT", "BytecodeCompiler", "LambdaPackage", "LocalPackageBundler",
    "bytecode_compiler",
]  # fmt: skip

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "submitter-deps"
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"
RUNTIME = lambda_.Runtime.PYTHON_3_13
"""The functions' runtime: the CPython version the dependencies are installed for (:data:`PYTHON_VERSION`)."""
ARCHITECTURE = lambda_.Architecture.ARM_64
"""The functions' architecture: the platform the dependencies are installed for (:data:`PIP_PLATFORM`)."""
TASK_ROOT = "/var/task"
"""Where Lambda unpacks a function's package (``LAMBDA_TASK_ROOT``, AWS Lambda Developer Guide, "Defined runtime
environment variables"): the file names recorded in the bytecode."""
EXCLUDE = ("*/torch_block.py", "*/te_block.py", "model_families/rotary.py", "*/tests/*", "*/test_*.py", "*/conftest.py")
"""What no package carries, as :func:`fnmatch.fnmatch` patterns of package paths (``*`` crosses folders): a model
family's torch and TransformerEngine blocks and the rotary embedding they share (the trainer's: torch), tests."""

# -- bytecode ----------------------------------------------------------------------------------

BYTECODE_PYTHON_ENV = "LAMBDA_BYTECODE_PYTHON"
"""Names the CPython :data:`PYTHON_VERSION` that compiles the packages' bytecode (a path or a command on
``PATH``), or ``none`` to ship source only. Unset: one is looked for (:func:`bytecode_compiler`)."""
_PROBE = (
    "import importlib.util as u, sys; v = sys.version_info; i = sys.implementation; "
    "print(i.name, '%d.%d' % v[:2], v.releaselevel, i.cache_tag, u.MAGIC_NUMBER.hex())"
)


@dataclass(frozen=True)
class BytecodeCompiler:
    """A CPython :data:`PYTHON_VERSION` interpreter that compiles a package's bytecode.

    Attributes:
        executable: its path.
        cache_tag: ``sys.implementation.cache_tag`` (``cpython-313``): the ``.pyc`` files' tag.
        magic: ``importlib.util.MAGIC_NUMBER`` in hex (``f30d0d0a`` for 3.13), one value per minor version.
    """

    executable: str
    cache_tag: str
    magic: str

    def compile(self, root: Path, files: list[str] | None = None) -> None:
        """Write unchecked hash-based ``.pyc`` files for ``files`` (relative to ``root``; default: every ``.py``
        under it), recording each under :data:`TASK_ROOT`.

        Raises:
            RuntimeError: a file did not compile (the compiler's output is in the message).
        """
        targets = [str(root / name) for name in files] if files else [str(root)]
        options = ["-q", "-j", "0", "--invalidation-mode", "unchecked-hash", "-s", str(root), "-p", TASK_ROOT]
        result = subprocess.run([self.executable, "-S", "-m", "compileall", *options, *targets], capture_output=True)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise RuntimeError(f"{self.executable} could not compile the package's bytecode under {root}:\n{output}")


def _probe(executable: str) -> BytecodeCompiler | None:
    """The interpreter at ``executable`` as a compiler, or ``None`` unless it is a final CPython
    :data:`PYTHON_VERSION` that runs (pre-releases carry other magic numbers)."""
    try:
        facts = subprocess.run([executable, "-S", "-c", _PROBE], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match facts.split():
        case ["cpython", version, "final", cache_tag, magic] if version == PYTHON_VERSION:
            return BytecodeCompiler(executable=executable, cache_tag=cache_tag, magic=magic)
    return None


def _candidates() -> list[str]:
    """Where a CPython :data:`PYTHON_VERSION` is commonly found, most specific first: this interpreter,
    ``python3.13`` on ``PATH``, pyenv's versions (newest patch first), ``uv python find``."""
    command = f"python{PYTHON_VERSION}"
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [str(p) for p in pyenv.glob(f"{PYTHON_VERSION}.*/bin/{command}")]
    patch = {path: Path(path).parents[1].name.removeprefix(f"{PYTHON_VERSION}.") for path in found}
    found.sort(key=lambda path: int(patch[path]) if patch[path].isdigit() else -1, reverse=True)
    return [sys.executable, *filter(None, [shutil.which(command)]), *found, *_uv_python()]


def _uv_python() -> list[str]:
    """The CPython :data:`PYTHON_VERSION` that ``uv`` has installed, if any (it downloads none)."""
    if (uv := shutil.which("uv")) is None:
        return []
    try:
        command = [uv, "python", "find", "--no-python-downloads", PYTHON_VERSION]
        found = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [found.stdout.strip()] if found.returncode == 0 and found.stdout.strip() else []


@functools.cache
def _find_compiler(setting: str | None) -> BytecodeCompiler | None:
    if setting is not None and setting.strip().lower() == "none":
        return None
    for executable in [shutil.which(setting) or setting] if setting is not None else dict.fromkeys(_candidates()):
        if (compiler := _probe(executable)) is not None:
            return compiler
    if setting is not None:
        raise ValueError(
            f"{BYTECODE_PYTHON_ENV}: got {setting!r}; expected a final CPython {PYTHON_VERSION} interpreter "
            f"(the Lambda runtime's version; a path or a command on PATH), or 'none' to ship source only"
        )
    sys.stderr.write(
        f"warning: no CPython {PYTHON_VERSION} interpreter found: the Lambda packages ship source only, so each "
        f"cold start compiles every module it imports. Install one (pyenv, uv python install {PYTHON_VERSION}, "
        f"python{PYTHON_VERSION} on PATH) or name it in {BYTECODE_PYTHON_ENV}.\n"
    )
    return None


def bytecode_compiler(environ: Mapping[str, str] | None = None) -> BytecodeCompiler | None:
    """The interpreter ``$LAMBDA_BYTECODE_PYTHON`` names (``none``: ``None``, source only), else the first of
    :func:`_candidates` that is one (``None``, with one warning on stderr, when none is). Once per setting.

    Raises:
        ValueError: ``$LAMBDA_BYTECODE_PYTHON`` names no final CPython :data:`PYTHON_VERSION` interpreter.
    """
    return _find_compiler((os.environ if environ is None else environ).get(BYTECODE_PYTHON_ENV))


# -- packages ------------------------------------------------------------------------------------


def _folder(name: str, repo_root: Path) -> Path:
    """The folder of package ``name``, through pyproject.toml's ``[tool.setuptools] package-dir``
    (``platform_constructs`` -> ``constructs/``)."""
    pyproject = repo_root / "pyproject.toml"
    settings = tomllib.loads(pyproject.read_text()) if pyproject.is_file() else {}
    mapped = settings.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    top, *rest = name.split(".")
    return repo_root.joinpath(mapped.get(top, top), *rest)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass(frozen=True)
class LambdaPackage:
    """One Python Lambda deployment package built from this repository.

    Attributes:
        handlers: the functions' handlers, ``module.function`` by import name
            (``platform_constructs.submitter.runtime.handler.lambda_handler``), each module under a root.
        roots: the packages it carries whole, by import name, less :data:`EXCLUDE`.
        requirements: the pinned requirements (pure-Python wheels only), installed with ``--no-deps`` for
            :data:`PIP_PLATFORM` / CPython :data:`PYTHON_VERSION`.
        display_name: the asset's name in CDK's output. Default: ``Lambda package``.

    Raises:
        ValueError: no handler or no root, or a handler not ``module.function`` of Python identifiers.
    """

    handlers: tuple[str, ...]
    roots: tuple[str, ...]
    requirements: Path
    display_name: str = "Lambda package"

    def __post_init__(self) -> None:
        for label, names in (("handlers", self.handlers), ("roots", self.roots)):
            if isinstance(names, str) or not names:
                raise ValueError(f"LambdaPackage.{label}: got {names!r}; expected a non-empty tuple of import names")
        for handler in self.handlers:
            parts = handler.split(".")
            if len(parts) < 2 or not all(part.isidentifier() for part in parts):
                raise ValueError(
                    f"LambdaPackage.handlers: got {handler!r}; expected 'module.function' of Python identifiers, "
                    "e.g. 'platform_constructs.submitter.runtime.handler.lambda_handler'"
                )

    def sources(self, repo_root: Path = REPO_ROOT) -> list[tuple[Path, str]]:
        """``(source file, path inside the package)`` of our code, sorted by the latter.

        Raises:
            ValueError: a root is not a package of the repository, or a handler's module is not in the package.
        """
        repo_root, found = Path(repo_root), {}
        for root in self.roots:
            folder, parts = _folder(root, repo_root), root.split(".")
            if not (folder / "__init__.py").is_file():
                raise ValueError(f"LambdaPackage.roots: got {root!r}; expected a package of the repository {repo_root}")
            for depth in range(1, len(parts)):  # the packages above it (a namespace portion has no __init__.py)
                init = _folder(".".join(parts[:depth]), repo_root) / "__init__.py"
                if init.is_file():
                    found["/".join(parts[:depth]) + "/__init__.py"] = init
            for path in folder.rglob("*.py"):
                found["/".join([*parts, *path.relative_to(folder).parts])] = path
        ours = {name: path for name, path in found.items() if not any(fnmatch.fnmatch(name, p) for p in EXCLUDE)}
        for handler in self.handlers:
            module = handler.rpartition(".")[0].replace(".", "/")
            if f"{module}.py" not in ours and f"{module}/__init__.py" not in ours:
                raise ValueError(f"LambdaPackage.handlers: {handler!r}: its module is not under the roots {self.roots}")
        return [(ours[name], name) for name in sorted(ours)]

    def dependencies_key(self) -> str:
        """Cache key of the installed dependencies: the requirement lines (without comments and blanks, sorted),
        the pip target and the bytecode compiler's tag and magic number (or ``pyc:none``)."""
        lines = sorted(
            filter(None, (line.split("#", 1)[0].strip() for line in self.requirements.read_text().splitlines()))
        )
        compiler = bytecode_compiler()
        pyc = f"pyc:{compiler.cache_tag}:{compiler.magic}" if compiler else "pyc:none"
        target = f"|{PIP_PLATFORM}|{PYTHON_VERSION}|cp|no-deps|{pyc}"
        return hashlib.sha256(("\n".join(lines) + target).encode()).hexdigest()[:32]

    def asset_hash(self, repo_root: Path = REPO_ROOT) -> str:
        """Content hash of the whole package: the dependency key, then each source's package path and bytes."""
        digest = hashlib.sha256(self.dependencies_key().encode())
        for source, name in self.sources(repo_root):
            digest.update(name.encode() + b"\0" + source.read_bytes() + b"\0")
        return digest.hexdigest()

    def installed_dependencies(self) -> Path:
        """The cached pip install of the requirements, with its bytecode, installed on first use. Concurrent callers
        each install into a folder of their own and rename it into place (the first wins); nothing is cached unless
        pip and the compiler both succeeded.

        Raises:
            RuntimeError: pip or the bytecode compiler failed (its output is in the message).
        """
        final = CACHE_DIR / self.dependencies_key()
        if (final / ".complete").is_file():
            return final
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="install-", dir=CACHE_DIR) as tmp:
            staging = Path(tmp) / "dependencies"
            pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                   "--no-deps", "-r", str(self.requirements), "--target", str(staging), "--platform", PIP_PLATFORM,
                   "--python-version", PYTHON_VERSION, "--implementation", "cp", "--only-binary=:all:"]  # fmt: skip
            result = subprocess.run(pip, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(
                    f"pip could not install the requirements {self.requirements} for "
                    f"{PIP_PLATFORM}/cp{PYTHON_VERSION.replace('.', '')}:\n{result.stdout}{result.stderr}"
                )
            shutil.rmtree(staging / "bin", ignore_errors=True)  # console scripts are useless in Lambda
            if (compiler := bytecode_compiler()) is not None:
                compiler.compile(staging)
            (staging / ".complete").write_text("ok\n")
            with contextlib.suppress(OSError):  # another caller's install is in place: it is the same
                os.rename(staging, final)
        if not (final / ".complete").is_file():
            raise RuntimeError(f"the installed requirements could not be moved to {final}")
        return final

    def build(self, output_dir: Path, repo_root: Path = REPO_ROOT) -> None:
        """Write the deployment package into ``output_dir`` (which may exist, empty).

        Raises:
            RuntimeError: pip or the bytecode compiler failed. ValueError: see :meth:`sources`.
        """
        output_dir, sources = Path(output_dir), self.sources(repo_root)
        dependencies, skip = self.installed_dependencies(), shutil.ignore_patterns(".complete")
        shutil.copytree(dependencies, output_dir, dirs_exist_ok=True, copy_function=_link_or_copy, ignore=skip)
        for source, name in sources:
            (output_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, output_dir / name)  # our sources are copied, never linked
            os.chmod(output_dir / name, 0o644)
        if (compiler := bytecode_compiler()) is not None:
            compiler.compile(output_dir, [name for _, name in sources])
        os.chmod(output_dir, 0o755)

    def bundling_options(self) -> BundlingOptions:
        """Bundling options for ``lambda.Code.from_asset(str(REPO_ROOT), ...)``: local bundling always runs (it
        raises rather than fall back); the Docker image and command are CDK's required fallback description, the
        same layout from the repository root, compiled by the image's Python (the runtime's)."""
        steps = [
            f"pip install --no-deps -r {shlex.quote(str(self.requirements.relative_to(REPO_ROOT)))} -t /asset-output"
        ]
        for source, name in self.sources():
            rel = source.relative_to(REPO_ROOT).as_posix()
            steps.append(f"install -D -m 644 {shlex.quote(rel)} {shlex.quote('/asset-output/' + name)}")
        steps.append(f"python -m compileall -q -j 0 --invalidation-mode unchecked-hash -d {TASK_ROOT} /asset-output")
        return BundlingOptions(
            image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}:latest-arm64"),
            command=["bash", "-c", " && ".join(steps)],
            local=LocalPackageBundler(self),
        )

    def code(self) -> lambda_.Code:
        """The package as a function's ``code``: an asset of the repository root, hashed and bundled here."""
        return lambda_.Code.from_asset(
            str(REPO_ROOT),
            asset_hash=self.asset_hash(),
            asset_hash_type=cdk.AssetHashType.CUSTOM,
            bundling=self.bundling_options(),
            display_name=self.display_name,
        )


@jsii.implements(ILocalBundling)
class LocalPackageBundler:
    """CDK local bundling: builds a :class:`LambdaPackage` with this Python's pip (no Docker)."""

    def __init__(self, package: LambdaPackage) -> None:
        self.package = package

    def try_bundle(self, output_dir: str, *_options: object, **_keyword_options: object) -> bool:
        self.package.build(Path(output_dir))  # jsii passes the BundlingOptions struct positionally: not needed
        return True


SUBMITTER = LambdaPackage(
    handlers=(
        "platform_constructs.submitter.runtime.handler.lambda_handler",
        "platform_constructs.submitter.runtime.continuation.lambda_handler",
    ),
    roots=(
        "platform_constructs.submitter.runtime",
        "platform_constructs.lambda_runtime",
        "platform_spec",
        "model_families",
        "planner",
    ),
    requirements=Path(__file__).resolve().parent / "runtime" / "requirements.txt",
    display_name="job submitter package",
)
"""The job submitter's package: the job API's handler (the submitter and reader functions), the run continuation's,
and the pure packages they read."""
