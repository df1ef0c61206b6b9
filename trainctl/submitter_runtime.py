"""Load the submitter's Lambda runtime (``constructs/submitter/runtime/``) outside Lambda.

In the function bundle the runtime is the top-level package ``runtime``. In
this repository it sits below ``platform_constructs.submitter``, whose
``__init__`` is the CDK construct (aws-cdk-lib, jsii: seconds to import).
:func:`load` imports the runtime package alone, under the name
``submitter_runtime``, without running the construct's module; its modules
import each other relatively, so the code is the same as in Lambda.

    handler = load("handler")          # submitter_runtime.handler
    settings = load("settings")
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "submitter_runtime"


def runtime_dir() -> Path:
    """The ``constructs/submitter/runtime`` folder.

    Raises:
        ModuleNotFoundError: the repository is not installed (``pip install -e .``).
    """
    spec = importlib.util.find_spec("platform_constructs")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "submitter" / "runtime"
            if (candidate / "__init__.py").exists():
                return candidate
    candidate = Path(__file__).resolve().parents[1] / "constructs" / "submitter" / "runtime"
    if (candidate / "__init__.py").exists():
        return candidate
    raise ModuleNotFoundError("constructs/submitter/runtime not found; install the repository with `pip install -e .`")


def load(module: str | None = None) -> ModuleType:
    """The runtime package, or its submodule ``module`` (e.g. ``"handler"``)."""
    package = sys.modules.get(PACKAGE)
    if package is None:
        folder = runtime_dir()
        spec = importlib.util.spec_from_file_location(
            PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            sys.modules.pop(PACKAGE, None)
            raise
    if module is None:
        return package
    return importlib.import_module(f"{PACKAGE}.{module}")
