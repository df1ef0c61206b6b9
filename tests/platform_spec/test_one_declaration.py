"""A hyperparameter is declared once: a field of :class:`platform_spec.hyperparameters.Hyperparameters`.

The proof adds a shape setting, ``num_experts``, the way a contributor would: one line in a copy of
``platform_spec/hyperparameters.py`` (the field and its setting) and, in the toy family of
``tests/model_families/toy_family/`` registered beside the real ones, the shape field it sets and its use in the
family's parameter count. In a fresh process on those copies (the rest of the repository is the checkout's own,
untouched), every reader of hyperparameters takes it: the shape settings, the planner's input and estimate,
``trainctl plan`` and ``trainctl train`` flags, the container's ``SM_HP_*`` variables, the submitter's request
checking and its JSON Schema; and a family without the field refuses it by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from platform_spec.hyperparameters import SPECS, coerce, format_value

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "model_families" / "toy_family"

DECLARATION = (
    '    num_experts: int | None = _declare(None, "MLP experts per block", minimum=1, maximum=64, shape=True)\n'
)
"""The whole edit of ``platform_spec/hyperparameters.py``: one field, placed with the shape settings."""

FAMILY_EDITS = (  # the toy shape's field, and its use: every block holds num_experts MLPs
    ("    vocab_size: int\n", "    vocab_size: int\n    num_experts: int = 1\n"),
    ("2 * self.hidden_size * self.ffn_hidden_size", "2 * self.hidden_size * self.ffn_hidden_size * self.num_experts"),
    ("return 2 * model.hidden_size * model.ffn_hidden_size", "return 2 * model.hidden_size * model.ffn_hidden_size * model.num_experts"),
)  # fmt: skip

SCRIPT = r"""
import contextlib, io, json, sys, tempfile
from pathlib import Path

out = {}
from platform_spec import hyperparameters as h, models
out["shape_setting"] = "num_experts" in h.SHAPE_HYPERPARAMETERS and "num_experts" in h.PLANNED_HYPERPARAMETERS
out["toy_fields"] = dict(models.family_of("toy-tiny").shape_fields)
hp = h.parse({"model": "toy-tiny", "num_experts": "4"})
out["parsed"] = [hp.num_experts, h.model_shape(hp).num_experts, hp.to_strings()["num_experts"]]
for values in ({"model": "gpt-1b", "num_experts": "4"}, {"model": "toy-tiny", "num_experts": "0"}):
    try:
        h.parse(values)
    except h.HyperparameterError as refused:
        out.setdefault("refused", []).append(str(refused))

from planner import PlanInput, estimate
def plan(experts):
    return estimate(PlanInput(model="toy-tiny", num_experts=experts, precision="bf16", seq_length=128, batch_size=4,
                              instance_type="ml.p5.48xlarge")).to_dict()
out["plan"] = [plan(None)["model"]["num_params"], plan(4)["model"]["num_params"], plan(4)["input"]["num_experts"]]

from trainctl.cli import ALL, build_parser, main
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    code = main(["plan", "--json", "--model", "toy-tiny", "--num-experts", "4", "--precision", "bf16",
                 "--seq-length", "128", "--batch-size", "4", "--instance-type", "ml.p5.48xlarge"])
out["trainctl_plan"] = [code, json.loads(printed.getvalue())["model"]["num_params"]]
commands = next(a for a in build_parser(only=ALL)._actions if a.dest == "command").choices
out["train_flag"] = any("--num-experts" in a.option_strings for a in commands["train"]._actions)

from training.environment import SageMakerPaths, load_hyperparameters
with tempfile.TemporaryDirectory() as base:
    job = load_hyperparameters(SageMakerPaths(Path(base)), {"SM_HP_MODEL": "toy-tiny", "SM_HP_NUM_EXPERTS": "4"})
out["container"] = job.num_experts

from platform_constructs.submitter.runtime import config, request, request_schema
local = config.SubmitterConfig(
    trainer_image_uris={"amd64": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"},
    execution_role_arn="arn:aws:iam::123456789012:role/exec", data_bucket="data", checkpoint_bucket="ckpt",
    output_bucket="out", output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
    training_plan_arns_parameter="/plans", allowed_input_prefixes=(), platform_tags={},
)
hyperparameters = {"model": "toy-tiny", "num_experts": 4, "synthetic_data": True}
out["request"] = request.parse_request({"hyperparameters": hyperparameters}, local).hyperparameters.num_experts
schema = request_schema.request_json_schema()["properties"]["hyperparameters"]["properties"]["num_experts"]
out["request_schema"] = schema
Path(sys.argv[1], "result.json").write_text(json.dumps(out))
"""


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture(scope="module")
def with_num_experts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The script above, in a fresh process, on copies with ``num_experts`` declared and the toy family using it."""
    root = tmp_path_factory.mktemp("one_declaration")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "platform_spec", root / "platform_spec", ignore=ignore)
    shutil.copytree(REPO / "model_families", root / "model_families", ignore=ignore)
    shutil.copytree(TOY, root / "model_families" / "toy", ignore=ignore)
    registrations = root / "model_families" / "__init__.py"
    (line,) = re.findall(r"^from model_families import .+$", registrations.read_text(encoding="utf-8"), re.MULTILINE)
    _edit(registrations, line, line + "\nfrom model_families import toy")  # the toy family, as a family is added

    settings = root / "platform_spec" / "hyperparameters.py"
    before = settings.read_text(encoding="utf-8").splitlines(keepends=True)
    (anchor,) = [i for i, text in enumerate(before) if text.strip() == "# numerics"]  # after the shape settings
    settings.write_text("".join([*before[:anchor], DECLARATION, *before[anchor:]]), encoding="utf-8")
    for old, new in FAMILY_EDITS:
        _edit(root / "model_families" / "toy" / "__init__.py", old, new)

    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root)], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((root / "result.json").read_text())


def test_a_shape_setting_is_one_field(with_num_experts: dict) -> None:
    assert with_num_experts["shape_setting"]
    assert with_num_experts["toy_fields"]["num_experts"] == "num_experts"  # the family maps its own field
    assert with_num_experts["parsed"] == [4, 4, "4"]


def test_a_family_without_the_field_refuses_it_and_its_bounds_hold(with_num_experts: dict) -> None:
    gpt, zero = with_num_experts["refused"]
    assert "hyperparameter 'num_experts'" in gpt and "model family 'gpt' has no num_experts" in gpt
    assert zero == "hyperparameter 'num_experts': got '0', expected an integer >= 1 and <= 64"


def test_the_planner_and_trainctl_plan_take_it(with_num_experts: dict) -> None:
    one, four, given = with_num_experts["plan"]
    toy_blocks = 2 * (2 * 64 * 128)  # two blocks, fc1 and fc2 of each expert
    assert four - one == 3 * toy_blocks and given == 4
    assert with_num_experts["trainctl_plan"] == [0, four]


def test_trainctl_train_the_container_and_the_submitter_take_it(with_num_experts: dict) -> None:
    assert with_num_experts["train_flag"] and with_num_experts["container"] == 4 and with_num_experts["request"] == 4
    assert with_num_experts["request_schema"] == {
        "type": ["integer", "string"],
        "description": "MLP experts per block",
        "minimum": 1,
        "maximum": 64,
    }


def test_every_declared_default_is_a_value_of_its_setting() -> None:
    """A default is declared beside its rules and passes them, as given and as SageMaker carries it (the
    planner takes a declared default as already checked)."""
    for name, spec in SPECS.items():
        assert coerce(name, spec.default) == spec.default, name
        if spec.default is not None:
            assert coerce(name, format_value(spec.default)) == spec.default, name
