"""The model-family seam: a new family is its folder plus one registration line, and then the trainer builds,
trains, exports and reloads it and the planner estimates it -- no other file changes.

The proof runs in a fresh process on a copy of ``model_families/`` with the toy family of
``tests/model_families/toy_family/`` added as ``model_families/toy/`` and one import line appended to the
copy's ``__init__.py``; the copy comes first on ``PYTHONPATH``, the rest of the repository is the checkout's
own, untouched.
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

REPO = Path(__file__).resolve().parents[2]
TOY = Path(__file__).with_name("toy_family")

SCRIPT = r"""
import json, math, sys
from pathlib import Path

import torch

out = {}
from platform_spec.models import family_names, family_of, get_preset
out["families"] = list(family_names())
toy = family_of("toy-tiny")
out["toy_module"] = toy.package
shape = get_preset("toy-tiny")

# the trainer's model: built from the family, loss at log(V), gradients, export and reload
from training.model import build_model, load_pretrained, save_pretrained
torch.manual_seed(0)
model = build_model(shape)
tokens = torch.randint(0, shape.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
loss = model(tokens[:, :-1], tokens[:, 1:])
loss.backward()
out["loss"], out["log_vocab"] = loss.item(), math.log(shape.vocab_size)
out["params"], out["num_params"] = model.num_parameters(), shape.num_params
out["final_norm"] = type(model.norm).__name__
out["norm_is_ones"] = bool(torch.equal(model.layers[1].norm.weight, torch.ones(shape.hidden_size)))
out["fc1_std"] = model.layers[0].fc1.weight.std().item()
save_pretrained(sys.argv[1] + "/export", model.state_dict(), shape, dtype=torch.float32)
loaded = load_pretrained(sys.argv[1] + "/export")
out["reloaded_equal"] = bool(torch.equal(loaded(tokens), model(tokens)))
out["export"] = json.loads(Path(sys.argv[1], "export", "config.json").read_text())

# the planner: the toy's own per-block terms
from planner import PlanInput, estimate
from planner.memory import block_activation_bytes_per_token
from planner.throughput import LAUNCH_S
plan = estimate(PlanInput(model="toy-tiny", num_layers=None, precision="bf16", seq_length=128, batch_size=4,
                          activation_checkpointing="off", instance_type="ml.p5.48xlarge"))
out["plan"] = {
    "fits": plan.fits, "model": plan.to_dict()["model"], "flops_per_token": plan.throughput.flops_per_token,
    "activation_bytes_per_token": block_activation_bytes_per_token(plan.resolved),
    "launch_floor": plan.throughput.compute.launch_floor, "launch_s": LAUNCH_S,
    "attention_s": plan.throughput.compute.attention, "tokens_per_second": plan.tokens_per_second,
}

# the trainer itself (the container entry point's worker), one CPU process, two steps, then its export
from training.train import main
base = Path(sys.argv[1], "opt_ml")
out["train_rc"] = main(["--base-dir", str(base), "--model", "toy-tiny", "--precision", "fp32", "--synthetic-data", "true",
                        "--max-steps", "2", "--warmup-steps", "1", "--batch-size", "2", "--seq-length", "16",
                        "--log-interval", "1", "--checkpoint-interval", "100"])
out["trained_export"] = json.loads((base / "model" / "config.json").read_text())
Path(sys.argv[1], "result.json").write_text(json.dumps(out))
"""


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The script above, in a fresh process, with the toy family registered by its folder and one line."""
    root = tmp_path_factory.mktemp("toy_family")
    shutil.copytree(REPO / "model_families", root / "model_families", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TOY, root / "model_families" / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    init = root / "model_families" / "__init__.py"
    registrations = init.read_text(encoding="utf-8")
    imports = re.findall(r"^from model_families import .+$", registrations, flags=re.MULTILINE)
    assert len(imports) == 1 and "gpt" in imports[0]  # the registration list the test extends by one line
    init.write_text(registrations.replace(imports[0], imports[0] + "\nfrom model_families import toy", 1))
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1"}
    env.pop("SAGEMAKER_BASE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root)], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((root / "result.json").read_text())


def test_the_new_family_is_registered_from_its_folder_by_one_line(toy_run: dict) -> None:
    assert toy_run["families"] == ["gpt", "llama", "toy"] and toy_run["toy_module"] == "model_families.toy"


def test_the_trainer_builds_trains_exports_and_reloads_the_new_family(toy_run: dict) -> None:
    assert toy_run["params"] == toy_run["num_params"] == 2 * (64 + 2 * 64 * 128) + 2 * 256 * 64 + 64
    assert toy_run["final_norm"] == "RMSNorm"  # the family's final norm, not the GPT one
    assert toy_run["norm_is_ones"] and toy_run["fc1_std"] == pytest.approx(0.02, rel=0.1)  # the family's init rule
    assert abs(toy_run["loss"] - toy_run["log_vocab"]) < 0.2 and toy_run["reloaded_equal"]
    export = toy_run["export"]
    assert (export["format"], export["model"], export["ffn_hidden_size"], export["activation"]) == (
        "toy-mlp",
        "toy-tiny",
        128,
        "relu",
    )
    assert "num_attention_heads" not in export and "rope_base" not in export  # nothing of GPT's
    assert toy_run["train_rc"] == 0
    assert toy_run["trained_export"]["format"] == "toy-mlp" and toy_run["trained_export"]["step"] == 2


def test_the_planner_estimates_the_new_family_from_its_terms(toy_run: dict) -> None:
    plan = toy_run["plan"]
    assert plan["fits"] and plan["tokens_per_second"] > 0
    assert plan["model"] == {
        "name": "toy-tiny",
        "num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 128,
        "vocab_size": 256,
        "block_params": 2 * (64 + 2 * 64 * 128),
        "num_params": 2 * (64 + 2 * 64 * 128) + 2 * 256 * 64 + 64,
        "modelled_params": 2 * (64 + 2 * 64 * 128) + 2 * 256 * 64 + 64,
    }
    assert plan["flops_per_token"] == 6.0 * (2 * 2 * 64 * 128 + 64 * 256)  # the toy's, no attention term
    assert plan["attention_s"] == 0.0
    assert plan["activation_bytes_per_token"] == 2 * (64 + 64 + 128 + 128)  # bf16: the toy's four tensors
    assert plan["launch_floor"] == pytest.approx(7 * 2 * plan["launch_s"])  # its kernels per block


def test_a_resume_compares_every_field_of_the_family_shape() -> None:
    """Resume rules are family-independent: a checkpoint of a shape whose family is not registered (fields the
    run's shape lacks, or lacks fields it has) is refused by its preset and field by field, and a changed field of any family's shape too
    (the checkpoint compared GPT's five field names only: a family's own field, ``num_experts`` here, went
    unchecked)."""
    from training.checkpoint.compare import compare_runs, run_record
    from training.checkpoint.verify import trainer_state_problems

    def record(model: dict) -> dict:
        return run_record(
            model_config=model,
            backend="torch",
            world_size=1,
            samples_per_step=2,
            hyperparameters={},
            data={"synthetic": True},
        )

    gpt = {
        "name": "gpt-tiny",
        "num_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "ffn_hidden_size": 128,
        "vocab_size": 256,
    }
    toy = {"name": "toy-tiny", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "vocab_size": 256}
    state = {"step": 4, "run": record(gpt)}
    across = compare_runs(state, record(toy))
    assert across.model_refused and across.refusals == [  # toy is not registered in this process: no family known
        "model: gpt-tiny in the checkpoint, toy-tiny in this run",
        "model num_attention_heads: 2 in the checkpoint, absent in this run",
    ]
    experts = {**toy, "num_experts": 4}
    wider = compare_runs({"step": 4, "run": record(experts)}, record({**experts, "num_experts": 8}))
    assert wider.refusals == ["model num_experts: 4 in the checkpoint, 8 in this run"]
    same = compare_runs({"step": 4, "run": record(toy)}, record({**toy, "name": "toy-renamed"}))
    assert not same.model_refused and "model preset toy-tiny -> toy-renamed (same shape)" in same.notes
    problems = trainer_state_problems({"step": 4, "run": record({**toy, "ffn_hidden_size": "128"})}, 4)
    assert any("expected integers, finite numbers, booleans or nulls for every field but 'name'" in p for p in problems)
    # a Llama shape's RoPE base, RMSNorm epsilon and tie are a number, a number and a boolean, its head_dim and
    # RoPE scaling unset are nulls: a valid record
    llama = {**toy, "num_heads": 4, "num_kv_heads": 2, "rope_base": 500000.0, "norm_eps": 1e-5, "tied_embeddings": True,
             "head_dim": None, "rope_scaling_factor": None}  # fmt: skip
    assert trainer_state_problems({"step": 4, "run": record(llama)}, 4) == []
    for bad in ({"rope_base": float("nan")}, {"norm_eps": "1e-5"}, {"tied_embeddings": "true"}, {"head_dim": [64]}):
        assert trainer_state_problems({"step": 4, "run": record({**llama, **bad})}, 4), bad
