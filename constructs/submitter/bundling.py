"""The platform's Python Lambda packages, derived from what each handler imports, built without Docker.

A :class:`LambdaPackage` names its handlers (``module.function``) and a pinned
requirements file. Its code is the transitive closure of the handlers'
imports inside this repository (:func:`import_closure`), each module laid out
under its import name, so Lambda imports the same modules the tests do. The
job submitter's package (:data:`SUBMITTER`) is::

    platform_constructs/submitter/__init__.py      (the construct is construct.py, never bundled)
    platform_constructs/submitter/runtime/*.py     (the handler and what it imports)
    platform_spec/*.py                             (the pure contracts the runtime reads)
    model_families/__init__.py, gpt/__init__.py    (the families' pure terms, not their torch blocks)
    planner/*.py
    boto3/, botocore/, aws_lambda_powertools/, ... <- runtime/requirements.txt

and the observability functions' (``platform_constructs.observability.functions.PACKAGE``)
is their runtime and the training-plan ARN rule of ``platform_spec``.

What counts as an import (:func:`import_closure`): ``import a.b``, ``from a
import b`` (``a.b`` too when it is a module), relative imports, at module level
or inside functions (a lazy import still runs in Lambda); and
``importlib.import_module`` / ``__import__`` of a name known without running
the code: string literals, module-level string constants, names a ``for``
loop binds to the items of a module-level tuple of strings, ``__name__`` and
``__package__``, joined by f-strings or ``+`` (the model-family registry
loads ``model_families`` and each registered family so). Imports under ``if
TYPE_CHECKING:`` never run and are not followed, nor are imports of a name
computed otherwise (a family's torch block, which only the trainer loads, is
named by an attribute of its family record). Importing ``a.b.c`` runs ``a``
and ``a.b`` too, so their ``__init__`` modules are in the closure.
Modules of this repository are the top-level packages (folders with an
``__init__.py``) and modules at its root, plus pyproject.toml's
``[tool.setuptools] package-dir`` mappings (``platform_constructs`` ->
``constructs/``); everything else (standard library, the pinned requirements)
is outside and not followed.

The pinned requirements are pure Python, so ``pip install --platform
manylinux2014_aarch64 --python-version 3.13 --only-binary=:all:`` on any
machine produces what the arm64 Python 3.13 runtime needs. The pip result is
cached under ``.cache/submitter-deps/<key>/`` (key: the normalised
requirement lines, the pip target and the bytecode compiler, so packages with
the same pins share one install), and copied into each bundle with hard links
where the file system allows, so repeated synths (tests) cost milliseconds
after the first.

Bytecode: Lambda's file system is read-only, so a package without ``.pyc``
files compiles every module it imports on every cold start (about 60% of the
submitter's import time then, ``benchmarks/startup.py``). Each package therefore ships, for every ``.py``
file (the dependencies' and ours), ``__pycache__/<name>.cpython-313.pyc``
compiled by a CPython :data:`PYTHON_VERSION` interpreter
(:func:`bytecode_compiler`) as *unchecked hash-based* bytecode (PEP 552,
``py_compile.PycInvalidationMode.UNCHECKED_HASH``): Python loads it without
looking at the source's time stamp or contents. Time-stamped ``.pyc`` files
would be stale in Lambda, because the CDK asset zipper resets every file's
time; checked hash-based ones would make every import read and hash its
source. Unchecked bytecode is valid as long as the source beside it is the
one it was compiled from, which holds in an immutable package (a new asset
hash, a new package). Bytecode is specific to the interpreter's minor version
(its magic number), so it is compiled by a 3.13 interpreter found on this
machine; without one the package ships source only (slower cold starts, same
behaviour), with a warning on stderr, and its asset hash says so.

The asset hash is computed here from the same inputs (the closure's paths and
contents, the dependency key), so CDK skips bundling entirely when
``cdk.out`` already holds the asset, and the hash changes whenever the
package would: when a module the handlers import changes, not when another does.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

__all__ = [
    "ARCHITECTURE",
    "BYTECODE_PYTHON_ENV",
    "CACHE_DIR",
    "PIP_PLATFORM",
    "PYTHON_VERSION",
    "REPO_ROOT",
    "RUNTIME",
    "SUBMITTER",
    "TASK_ROOT",
    "BytecodeCompiler",
    "ImportClosure",
    "LambdaPackage",
    "LocalPackageBundler",
    "SourceModule",
    "bytecode_compiler",
    "import_closure",
    "package_dirs",
]

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


# -- bytecode ----------------------------------------------------------------------------------

BYTECODE_PYTHON_ENV = "LAMBDA_BYTECODE_PYTHON"
"""Environment variable naming the CPython :data:`PYTHON_VERSION` interpreter that compiles the packages'
bytecode (a path or a command on ``PATH``), or ``none`` to ship source only. Unset: one is looked for
(:func:`bytecode_compiler`)."""

_PROBE = (
    "import importlib.util, json, sys; print(json.dumps({'implementation': sys.implementation.name, "
    "'version': '%d.%d' % sys.version_info[:2], 'releaselevel': sys.version_info.releaselevel, "
    "'cache_tag': sys.implementation.cache_tag, 'magic': importlib.util.MAGIC_NUMBER.hex()}))"
)

_COMPILE = """
import compileall, py_compile, sys
mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
root, task_root, *files = sys.argv[1:]
if files:  # our modules: each must compile
    for rel in files:
        py_compile.compile(f"{root}/{rel}", dfile=f"{task_root}/{rel}", doraise=True, invalidation_mode=mode)
elif not compileall.compile_dir(root, quiet=1, workers=0, ddir=task_root, invalidation_mode=mode):
    sys.exit("some files did not compile (listed above)")
"""
"""Run by the bytecode compiler: ``ROOT TASK_ROOT [FILE...]`` (FILE relative to ROOT; none: all of ROOT)."""


@dataclass(frozen=True)
class BytecodeCompiler:
    """A CPython :data:`PYTHON_VERSION` interpreter that compiles a package's bytecode.

    Attributes:
        executable: its path.
        cache_tag: ``sys.implementation.cache_tag`` (``cpython-313``): the ``.pyc`` files' tag.
        magic: ``importlib.util.MAGIC_NUMBER`` in hex (``f30d0d0a`` for 3.13): the first 4 bytes of each
            ``.pyc``; one value per minor version of a final release.
    """

    executable: str
    cache_tag: str
    magic: str

    @property
    def key(self) -> str:
        """What the bytecode depends on, for cache keys and asset hashes: ``pyc:<cache tag>:<magic>``."""
        return f"pyc:{self.cache_tag}:{self.magic}"

    def compile(self, root: Path, files: Iterable[str] = ()) -> None:
        """Write unchecked hash-based ``.pyc`` files under ``root``: for ``files`` (paths relative to
        ``root``), or for every ``.py`` file under it when none are given.

        Raises:
            RuntimeError: a file did not compile (the compiler's output is in the message).
        """
        result = subprocess.run(
            [self.executable, "-S", "-c", _COMPILE, str(root), TASK_ROOT, *files],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{self.executable} could not compile the package's bytecode under {root}:\n"
                f"{result.stdout}{result.stderr}"
            )


def _probe(executable: str) -> BytecodeCompiler | None:
    """The interpreter at ``executable`` as a compiler, or ``None`` unless it is a final CPython
    :data:`PYTHON_VERSION` that runs."""
    try:
        result = subprocess.run([executable, "-S", "-c", _PROBE], capture_output=True, text=True, timeout=60)
        facts = json.loads(result.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if (facts["implementation"], facts["version"], facts["releaselevel"]) != ("cpython", PYTHON_VERSION, "final"):
        return None  # pre-releases carry other magic numbers
    return BytecodeCompiler(executable=executable, cache_tag=facts["cache_tag"], magic=facts["magic"])


def _candidates() -> Iterator[str]:
    """Places a CPython :data:`PYTHON_VERSION` interpreter is commonly found, most specific first: this
    interpreter, ``python3.13`` on ``PATH``, pyenv's versions (newest patch first), ``uv python find``."""
    yield sys.executable
    command = f"python{PYTHON_VERSION}"
    if found := shutil.which(command):
        yield found
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    pattern = os.path.join(pyenv_root, "versions", f"{PYTHON_VERSION}.*", "bin", command)

    def patch(path: str) -> int:
        version = Path(path).parents[1].name.removeprefix(f"{PYTHON_VERSION}.")
        return int(version) if version.isdigit() else -1

    yield from sorted(glob.glob(pattern), key=patch, reverse=True)
    if uv := shutil.which("uv"):
        try:
            found = subprocess.run(
                [uv, "python", "find", "--no-python-downloads", PYTHON_VERSION],
                capture_output=True, text=True, timeout=60, check=False,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            found = ""
        if found:
            yield found


@functools.cache
def _find_compiler(setting: str | None) -> BytecodeCompiler | None:
    if setting is not None:
        if setting.strip().lower() == "none":
            return None
        executable = shutil.which(setting) or setting
        compiler = _probe(executable)
        if compiler is None:
            raise ValueError(
                f"{BYTECODE_PYTHON_ENV}: got {setting!r}; expected a final CPython {PYTHON_VERSION} interpreter "
                f"(the Lambda runtime's version; a path or a command on PATH), or 'none' to ship source only"
            )
        return compiler
    for executable in dict.fromkeys(_candidates()):
        compiler = _probe(executable)
        if compiler is not None:
            return compiler
    sys.stderr.write(
        f"warning: no CPython {PYTHON_VERSION} interpreter found: the Lambda packages ship source only, so each "
        f"cold start compiles every module it imports. Install one (pyenv, uv python install {PYTHON_VERSION}, "
        f"python{PYTHON_VERSION} on PATH) or name it in {BYTECODE_PYTHON_ENV}.\n"
    )
    return None


def bytecode_compiler(environ: Mapping[str, str] | None = None) -> BytecodeCompiler | None:
    """The interpreter that compiles the packages' bytecode, or ``None`` to ship source only.

    ``$LAMBDA_BYTECODE_PYTHON`` (:data:`BYTECODE_PYTHON_ENV`) when set (``none``: source only); otherwise the
    first final CPython :data:`PYTHON_VERSION` of :func:`_candidates` (``None``, with one warning on stderr,
    when there is none). Looked up once per process and setting.

    Raises:
        ValueError: ``$LAMBDA_BYTECODE_PYTHON`` names no final CPython :data:`PYTHON_VERSION` interpreter.
    """
    env = os.environ if environ is None else environ
    return _find_compiler(env.get(BYTECODE_PYTHON_ENV))


# -- the import closure ------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class SourceModule:
    """One module of this repository in a package.

    Attributes:
        name: its import name (``platform_constructs.submitter.runtime.handler``).
        path: its source file in the repository.
        is_package: whether it is a package's ``__init__.py``.
    """

    name: str
    path: Path
    is_package: bool

    @property
    def package_path(self) -> str:
        """Its path inside the deployment package, from the import name (``platform_spec/errors.py``)."""
        parts = self.name.split(".")
        return "/".join(parts) + ("/__init__.py" if self.is_package else ".py")


@dataclass(frozen=True)
class ImportClosure:
    """What a set of modules imports inside this repository, transitively.

    Attributes:
        modules: the modules (the roots included), sorted by import name.
        external: top-level names imported from outside the repository (standard library and
            third-party packages), by any module of the closure.
    """

    modules: tuple[SourceModule, ...]
    external: frozenset[str] = field(default_factory=frozenset)

    def names(self) -> tuple[str, ...]:
        """The modules' import names, sorted."""
        return tuple(m.name for m in self.modules)

    def package_paths(self) -> tuple[str, ...]:
        """The modules' paths inside the deployment package, sorted."""
        return tuple(sorted(m.package_path for m in self.modules))


def package_dirs(repo_root: Path = REPO_ROOT) -> dict[str, str]:
    """Import name -> folder, from pyproject.toml's ``[tool.setuptools] package-dir``.

    ``{"platform_constructs": "constructs"}`` here; ``{}`` when there is no pyproject.toml.
    """
    pyproject = repo_root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    mapping = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {name: folder for name, folder in mapping.items() if name}


@dataclass(frozen=True)
class _Located:
    kind: str  # "package", "module" or "namespace"
    path: Path  # the file (package: its __init__.py), or the folder of a namespace portion


class _Repository:
    """Finds modules of the repository at ``root`` by import name, as Python's path finder would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mapped = package_dirs(root)
        self._found: dict[str, _Located | None] = {}

    def owns(self, top: str) -> bool:
        """Whether top-level name ``top`` is a module or package of this repository."""
        return self.locate(top) is not None

    def locate(self, name: str) -> _Located | None:
        if name not in self._found:
            self._found[name] = self._locate(name)
        return self._found[name]

    def _locate(self, name: str) -> _Located | None:
        parent, _, last = name.rpartition(".")
        if not parent:
            if name in self.mapped:
                folder = self.root / self.mapped[name]
                init = folder / "__init__.py"
                if init.is_file():
                    return _Located("package", init)
                return _Located("namespace", folder) if folder.is_dir() else None
            if name in self.mapped.values() or not name.isidentifier():
                return None  # a folder importable only under its mapped name (constructs/ is platform_constructs)
            init = self.root / name / "__init__.py"
            if init.is_file():
                return _Located("package", init)
            module = self.root / f"{name}.py"
            return _Located("module", module) if module.is_file() else None  # a bare folder (tests/) is not ours
        above = self.locate(parent)
        if above is None or above.kind == "module":
            return None
        folder = above.path if above.kind == "namespace" else above.path.parent
        if (folder / last / "__init__.py").is_file():
            return _Located("package", folder / last / "__init__.py")
        if (folder / f"{last}.py").is_file():
            return _Located("module", folder / f"{last}.py")
        if (folder / last).is_dir():
            return _Located("namespace", folder / last)
        return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in ``body`` and the blocks nested in it (functions, classes, if/try/with/for/match),
    except the bodies of ``if TYPE_CHECKING:``, which never run."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If) and _is_type_checking(statement.test):
            yield from _statements(statement.orelse)
            continue
        for name in ("body", "orelse", "finalbody"):
            block = getattr(statement, name, None)
            if isinstance(block, list):
                yield from _statements(block)
        for nested in getattr(statement, "handlers", ()) or getattr(statement, "cases", ()):
            yield from _statements(nested.body)


_MAX_NAMES = 256
"""The most names one dynamic import may evaluate to (a product of loops over long tuples is not followed)."""


class _Constants:
    """What a module's string-valued names can hold, for evaluating the names of dynamic imports.

    Module-level assignments of a string, or of a tuple or list of strings; names bound by ``for``
    loops (anywhere in the module) over such a value; ``__name__`` and ``__package__``.
    """

    def __init__(self, tree: ast.Module, module: str, package: str) -> None:
        self.values: dict[str, set[str]] = {"__name__": {module}, "__package__": {package}}
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                target, value = statement.target, statement.value
            else:
                continue
            if isinstance(target, ast.Name):
                strings = self._literal(value)
                if strings is not None:
                    self.values[target.id] = strings
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
                strings = self.evaluate(node.iter, allow_sequences=True)
                if strings:
                    self.values.setdefault(node.target.id, set()).update(strings)

    @staticmethod
    def _literal(value: ast.expr) -> set[str] | None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return {value.value}
        if isinstance(value, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
        ):
            return {e.value for e in value.elts}  # type: ignore[union-attr]
        return None

    def evaluate(self, node: ast.expr, *, allow_sequences: bool = False) -> set[str] | None:
        """The strings ``node`` can be, or ``None`` when they cannot be known statically."""
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return set(self.values[node.id]) if node.id in self.values else None
        if allow_sequences and isinstance(node, (ast.Tuple, ast.List)):
            return self._literal(node)
        if isinstance(node, ast.JoinedStr):  # f"{__name__}.{family}"
            results = {""}
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    if part.conversion != -1 or part.format_spec is not None:
                        return None
                    values = self.evaluate(part.value)
                else:
                    values = self.evaluate(part)
                if not values:
                    return None
                results = {left + right for left in results for right in values}
                if len(results) > _MAX_NAMES:
                    return None
            return results
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            if not left or not right or len(left) * len(right) > _MAX_NAMES:
                return None
            return {a + b for a in left for b in right}
        return None


def _dynamic_imports(tree: ast.Module) -> Iterator[ast.Call]:
    """``importlib.import_module(...)``, ``import_module(...)`` and ``__import__(...)`` calls."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
            isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
        ):
            yield node


def _resolve_name(name: str, package: str) -> str | None:
    """``importlib.util.resolve_name`` without raising: ``None`` for a relative name beyond ``package``."""
    stripped = name.lstrip(".")
    level = len(name) - len(stripped)
    if not level:
        return name
    parts = package.split(".") if package else []
    if not parts or level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, stripped] if stripped else base)


def _imported_names(source: SourceModule) -> list[str]:
    """Absolute names ``source``'s code may import (see :func:`import_closure` for the rules)."""
    text = source.path.read_bytes()
    tree = ast.parse(text, filename=str(source.path))
    package = source.name if source.is_package else source.name.rpartition(".")[0]

    names: list[str] = []
    for statement in _statements(tree.body):
        if isinstance(statement, ast.Import):
            names.extend(alias.name for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom):
            base = _resolve_name("." * statement.level + (statement.module or ""), package)
            if base is not None:
                names.append(base)
                # `from a import b` imports module a.b when b is one; attributes resolve to nothing
                names.extend(f"{base}.{alias.name}" for alias in statement.names if alias.name != "*")
    if b"import_module" in text or b"__import__" in text:
        constants = _Constants(tree, source.name, package)
        for call in _dynamic_imports(tree):
            targets = constants.evaluate(call.args[0])
            if not targets:
                continue  # a computed name (e.g. a family's torch block, loaded by the trainer): not followed
            anchors = {""}
            if not (isinstance(call.func, ast.Name) and call.func.id == "__import__"):  # import_module(name, package)
                keyword = next((k.value for k in call.keywords if k.arg == "package"), None)
                anchor = call.args[1] if len(call.args) > 1 else keyword
                if anchor is not None:
                    anchors = constants.evaluate(anchor) or set()
            for target in targets:
                for anchor_package in anchors:
                    resolved = _resolve_name(target, anchor_package)
                    if resolved:
                        names.append(resolved)
    return names


def import_closure(modules: Iterable[str], repo_root: Path = REPO_ROOT) -> ImportClosure:
    """The modules of the repository at ``repo_root`` that importing ``modules`` may import.

    Args:
        modules: import names of the roots (a package's handler modules).
        repo_root: the repository (its pyproject.toml gives the ``package-dir`` mappings).

    Returns:
        The closure: every root, every module they import (transitively, lazily or not; see the
        module docstring for the rules) with the packages above each, and the top-level names
        imported from outside the repository.

    Raises:
        ValueError: a root is not a module of the repository.
        SyntaxError: a module of the closure does not parse.
    """
    repo = _Repository(Path(repo_root))
    pending = list(modules)
    for root in pending:
        located = repo.locate(root)
        if located is None or located.kind == "namespace":
            raise ValueError(
                f"module {root!r}: not a module of the repository at {repo_root}; expected a .py file under it"
            )
    seen: set[str] = set()
    found: dict[str, SourceModule] = {}
    external: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.partition(".")[0]
        if not repo.owns(top):
            external.add(top)
            continue
        parts = name.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # importing a.b.c runs a and a.b
        located = repo.locate(name)
        if located is None or located.kind == "namespace":
            continue  # an attribute (`from a import function`), or a namespace portion (no code)
        source = SourceModule(name=name, path=located.path, is_package=located.kind == "package")
        found[name] = source
        pending.extend(_imported_names(source))
    return ImportClosure(modules=tuple(sorted(found.values())), external=frozenset(external))


# -- packages ------------------------------------------------------------------------------------


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
        handlers: the functions' handlers, ``module.function`` with the module's import name
            (``platform_constructs.submitter.runtime.handler.lambda_handler``); the package holds
            what their modules import (:func:`import_closure`).
        requirements: the pinned requirements (pure-Python wheels only), installed
            with ``--no-deps`` for :data:`PIP_PLATFORM` / CPython :data:`PYTHON_VERSION`.
            The package holds every ``.py`` file's unchecked hash-based bytecode when a
            :func:`bytecode_compiler` is found (see the module docstring).
        display_name: the asset's name in CDK's output. Default: ``Lambda package``.

    Raises:
        ValueError: a handler is not ``module.function`` of Python identifiers, or none is given.
    """

    handlers: tuple[str, ...]
    requirements: Path
    display_name: str = "Lambda package"

    def __post_init__(self) -> None:
        if isinstance(self.handlers, str) or not self.handlers:
            raise ValueError(
                f"LambdaPackage.handlers: got {self.handlers!r}; expected a non-empty tuple of 'module.function'"
            )
        for handler in self.handlers:
            parts = handler.split(".")
            if len(parts) < 2 or not all(part.isidentifier() for part in parts):
                raise ValueError(
                    f"LambdaPackage.handlers: got {handler!r}; expected 'module.function' of Python identifiers, "
                    "e.g. 'platform_constructs.submitter.runtime.handler.lambda_handler'"
                )

    def handler_modules(self) -> tuple[str, ...]:
        """The handlers' modules (the closure's roots), without duplicates, in order."""
        return tuple(dict.fromkeys(handler.rpartition(".")[0] for handler in self.handlers))

    # -- inputs ---------------------------------------------------------------

    def closure(self, repo_root: Path = REPO_ROOT) -> ImportClosure:
        """What the handlers import inside ``repo_root`` (see :func:`import_closure`)."""
        return import_closure(self.handler_modules(), repo_root)

    def sources(self, repo_root: Path = REPO_ROOT, closure: ImportClosure | None = None) -> Iterator[tuple[Path, str]]:
        """Yield ``(source file, path inside the package)`` for our own code, sorted by the latter."""
        closure = closure or self.closure(repo_root)
        for module in sorted(closure.modules, key=lambda m: m.package_path):
            yield module.path, module.package_path

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
        ]  # fmt: skip

    def dependencies_key(self) -> str:
        """Cache key of the installed dependencies: the requirement lines + the pip target + the bytecode
        compiler (:attr:`BytecodeCompiler.key`, or ``pyc:none``)."""
        compiler = bytecode_compiler()
        digest = hashlib.sha256()
        digest.update("\n".join(_requirement_lines(self.requirements)).encode())
        digest.update(f"|{PIP_PLATFORM}|{PYTHON_VERSION}|cp|no-deps".encode())
        digest.update(f"|{compiler.key if compiler else 'pyc:none'}".encode())
        return digest.hexdigest()[:32]

    def asset_hash(self, repo_root: Path = REPO_ROOT, closure: ImportClosure | None = None) -> str:
        """Content hash of the whole package: the dependency key, then each module's package path and bytes."""
        digest = hashlib.sha256(self.dependencies_key().encode())
        for source, name in self.sources(repo_root, closure):
            digest.update(name.encode() + b"\0")
            digest.update(source.read_bytes() + b"\0")
        return digest.hexdigest()

    # -- building -------------------------------------------------------------

    def installed_dependencies(self) -> Path:
        """Return the cached pip install of the requirements (with its bytecode), installing it on first use.

        Safe under concurrent callers (pytest-xdist): each installs into its own
        temporary folder and renames it into place; a loser discards its copy.
        Nothing is cached unless pip and the compiler both succeeded.

        Raises:
            RuntimeError: pip or the bytecode compiler failed (its output is in the message).
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
            compiler = bytecode_compiler()
            if compiler is not None:
                compiler.compile(staging)
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

    def build(self, output_dir: Path, repo_root: Path = REPO_ROOT, closure: ImportClosure | None = None) -> None:
        """Write the complete deployment package into ``output_dir`` (which may exist, empty).

        Raises:
            RuntimeError: pip or the bytecode compiler failed (see :meth:`installed_dependencies`).
            ValueError: a handler's module is not in the repository.
        """
        output_dir = Path(output_dir)
        closure = closure or self.closure(repo_root)
        dependencies = self.installed_dependencies()
        shutil.copytree(
            dependencies,
            output_dir,
            dirs_exist_ok=True,
            copy_function=_link_or_copy,
            ignore=shutil.ignore_patterns(".complete"),
        )
        ours = []
        for source, name in self.sources(repo_root, closure):
            destination = output_dir / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)  # our sources are copied, never linked
            os.chmod(destination, 0o644)
            ours.append(name)
        compiler = bytecode_compiler()
        if compiler is not None and ours:
            compiler.compile(output_dir, ours)
        os.chmod(output_dir, 0o755)

    def bundling_options(self, closure: ImportClosure | None = None) -> BundlingOptions:
        """Bundling options for ``lambda.Code.from_asset(str(REPO_ROOT), ...)``.

        Local bundling always runs (it raises on failure rather than silently
        falling back). The Docker image and command are CDK's required fallback
        description and produce the same layout from the repo root.
        """
        closure = closure or self.closure()
        requirements_rel = self.requirements.relative_to(REPO_ROOT).as_posix()
        steps = [f"pip install --no-deps -r {shlex.quote(requirements_rel)} -t /asset-output"]
        for source, name in self.sources(closure=closure):
            rel = source.relative_to(REPO_ROOT).as_posix()
            steps.append(f"install -D -m 644 {shlex.quote(rel)} {shlex.quote('/asset-output/' + name)}")
        steps.append(
            f"python -m compileall -q -j 0 --invalidation-mode unchecked-hash -d {TASK_ROOT} /asset-output"
        )  # the image's python is the runtime's (python{PYTHON_VERSION})
        return BundlingOptions(
            image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}:latest-arm64"),
            command=["bash", "-c", " && ".join(steps)],
            local=LocalPackageBundler(self, closure),
        )

    def code(self) -> lambda_.Code:
        """The package as a function's ``code``: an asset of the repository root, hashed and bundled here."""
        closure = self.closure()
        return lambda_.Code.from_asset(
            str(REPO_ROOT),
            asset_hash=self.asset_hash(closure=closure),
            asset_hash_type=cdk.AssetHashType.CUSTOM,
            bundling=self.bundling_options(closure),
            display_name=self.display_name,
        )


@jsii.implements(ILocalBundling)
class LocalPackageBundler:
    """CDK local bundling: builds a :class:`LambdaPackage` with this Python's pip (no Docker).

    Args:
        package: the package to build.
        closure: the modules to put in it (the ones its asset hash was computed from).
            Default: the package's closure at bundling time.
    """

    def __init__(self, package: LambdaPackage, closure: ImportClosure | None = None) -> None:
        self.package = package
        self.closure = closure

    def try_bundle(self, output_dir: str, *_options: object, **_keyword_options: object) -> bool:
        # jsii passes the BundlingOptions struct positionally; the package needs none of it.
        self.package.build(Path(output_dir), closure=self.closure)
        return True


SUBMITTER = LambdaPackage(
    handlers=(
        "platform_constructs.submitter.runtime.handler.lambda_handler",
        "platform_constructs.submitter.runtime.continuation.lambda_handler",
    ),
    requirements=Path(__file__).resolve().parent / "runtime" / "requirements.txt",
    display_name="job submitter package",
)
"""The job submitter's package: the job API's handler (the submitter and reader functions) and the run
continuation's."""
