"""Adds the `constructs/` folder as the `platform_constructs` package (see pyproject.toml)."""

from setuptools import find_namespace_packages, find_packages, setup

construct_packages = ["platform_constructs"] + [
    f"platform_constructs.{name}" for name in find_namespace_packages(where="constructs")
]
setup(
    packages=find_packages(
        include=["stacks*", "training*", "planner*", "trainctl*", "platform_spec*", "model_families*", "devtools*"]
    )
    + construct_packages
)
