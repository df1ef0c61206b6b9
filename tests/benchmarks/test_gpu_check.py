"""benchmarks/gpu_check.sh: the prepared GPU check runs end to end on the CPU (--dry-run), a GPU run
without usable CUDA ends at once and says so, its results survive a failed step or a cut-off, its time
limit and exit codes are the documented ones, its TE attention setting stays inside the resume step,
and its TransformerEngine checks' own code runs (on the CPU stand-in of
tests/training/fake_transformer_engine.py: a check of the check, not of TransformerEngine)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
IN_IMAGE = REPO / "benchmarks" / "gpu_check_in_image.sh"
_spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)
NVTE_NAME = gpu_check.DETERMINISTIC_TE_ATTENTION[0]


def _stub(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_the_dry_run_goes_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    done = subprocess.run(
        [str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert data["mode"] == "dry-run" and data["status"] == "complete"
    steps = data["steps"]
    assert steps["environment"]["status"] == "passed" and steps["environment"]["torch"]

    resume = steps["resume"]  # a DCP save at step 3, a fresh trainer's resume: the same steps, bitwise
    assert resume["status"] == "passed" and resume["bitwise"] is True and resume["resumed_at_step"] == 3
    assert resume["continuous"] == resume["resumed"] and len(resume["resumed"]) == 3
    assert resume["parameters_equal"] is True and resume["max_abs_loss_difference"] == 0.0
    assert 0 < resume["checkpoint_mb"] < 64

    assert steps["transformer_engine"] == {"status": "skipped", "reason": gpu_check.SKIPPED_DRY_RUN_TE}
    gemm = steps[gpu_check.GEMM_STEP]  # its code on the CPU: one small bf16 GEMM, fp8 skipped, no nominal peak
    assert gemm["status"] == "passed" and [r["kind"] for r in gemm["rows"]] == ["bf16"]
    assert (
        gemm["peaks"] == data["measured_peaks"] == {"bf16_tflops": gemm["rows"][0]["tflops"]}
        and gemm["nominal"] is None
    )
    assert gemm["fp8"].startswith("skipped: fp8 GEMMs need a CUDA GPU")
    assert list(steps)[:3] == ["environment", gpu_check.GEMM_STEP, "resume"]
    assert data["predictions_for"] == "H100" and data["time_limit_s"] == "420"
    assert data["budget"][0].startswith("time limit: 420 s") and "390 s (--budget-s)" in data["budget"][1]

    # the Llama family's step: its resume (GQA, tied embeddings through DCP) bitwise, then a custom shape
    # measured as the trainer resolves it (benchmarks/gpu_check.py asked family_of(model), which a family's
    # name is not: every custom shape failed here)
    llama_resume = steps[gpu_check.LLAMA_RESUME]
    assert llama_resume["status"] == "passed" and llama_resume["bitwise"] is True, llama_resume
    assert llama_resume["backend"] == "torch" and llama_resume["resumed_at_step"] == 3
    assert llama_resume["continuous"] == llama_resume["resumed"] and llama_resume["parameters_equal"] is True
    llama_name = "throughput model=llama backend=torch batch=1 activation_checkpointing=off"
    llama = steps[llama_name]
    assert llama["status"] == "passed", llama
    assert llama["config"] == {
        "label": "llama tiny (custom)",
        "model": "llama",
        "num_layers": 2,
        "hidden_size": 128,
        "num_heads": 4,
        "num_kv_heads": 2,
        "ffn_hidden_size": 352,
        "vocab_size": 512,
        "rope_base": 10000.0,
        "tied_embeddings": True,
        "seq_length": 128,
        "precision": "bf16",
        "backend": "torch",
        "batch_size": 1,
        "activation_checkpointing": "off",
    }
    assert llama["measured"]["backend"] == "torch" and llama["measured"]["tokens_per_second"] > 0
    assert all(math.isfinite(x) for x in llama["measured"]["losses"]) and len(llama["measured"]["losses"]) == 3
    h100 = gpu_check.prediction_gpu(None, dry_run=True)  # the dry run predicts for the GPU lent today
    assert llama["predicted"] == gpu_check.prediction(gpu_check.LLAMA_DRY_SETUP, 1, "off", gpu=h100, gpus=1)
    assert llama["predicted"]["status"] == "fits" and llama["predicted"]["tokens_per_second_per_gpu"] > 0
    assert list(steps).index(gpu_check.LLAMA_RESUME) < list(steps).index(llama_name)

    throughput = {name: step for name, step in steps.items() if name.startswith("throughput backend=")}
    assert list(throughput) == [
        f"throughput backend=torch batch={b} activation_checkpointing={ac}" for b in (1, 2) for ac in ("off", "full")
    ]
    for step in throughput.values():
        assert step["status"] == "passed", step
        measured, predicted = step["measured"], step["predicted"]
        assert step["config"]["backend"] == measured["backend"] == "torch" and measured["world_size"] == 1
        assert measured["tokens_per_second"] > 0 and measured["tflops_per_gpu"] >= 0 and measured["mfu"] is None  # CPU
        assert measured["peak_allocated_gb"] > 0 and measured["peak_reserved_gb"] > 0
        assert predicted["gpu"] == "H100" and predicted["gpus"] == 1 and predicted["fits"]
        table = measured["mfu_table"]  # both attention conventions; no nominal peak on a CPU, the measured GEMM one
        assert table["causal"]["tflops_per_gpu"] == measured["tflops_per_gpu"]
        assert table["full"]["tflops_per_gpu"] >= table["causal"]["tflops_per_gpu"]  # 2 decimals: 0.0 on a CPU
        assert measured["flops_per_token"]["full"] > measured["flops_per_token"]["causal"] > 0
        assert table["causal"]["mfu_nominal"] is None and table["causal"]["mfu_measured_peak"] > 0
        ratio = step["measured_over_predicted"]["tokens_per_second_per_gpu"]
        assert ratio == pytest.approx(
            measured["tokens_per_second_per_gpu"] / predicted["tokens_per_second_per_gpu"], rel=1e-3
        )
    report = (out / "results.md").read_text()
    assert report == gpu_check.report(data)  # the last write of the run
    assert "| model | backend | batch | act. ckpt |" in report and "| gpt-tiny | torch | 2 | full |" in report
    assert "MFU % nominal (pred) | MFU % GEMM | full: TFLOP/s, MFU % nominal / GEMM |" in report
    assert "causal attention counted at half" in report and "torchtitan" in report  # both conventions named
    assert "- predictions (pred) for one H100" in report and "- gemm peak: passed bf16 " in report
    assert "| llama tiny (custom) | torch | 1 | off |" in report and "- llama resume: passed bitwise=True" in report
    assert (
        "- resume: passed bitwise=True" in report and f"- transformer_engine: {gpu_check.SKIPPED_DRY_RUN_TE}" in report
    )
    assert not list(out.glob("**/*.distcp"))  # checkpoints stay out of $OUT (only results come back)


def test_results_survive_a_failed_step_and_record_where_a_run_stopped(tmp_path: Path) -> None:
    results = gpu_check.Results(tmp_path, mode="gpu", argv=[])
    with results.step("first") as record:
        record["value"] = 1
    with results.step("broken"):
        raise RuntimeError("CUDA error: an illegal memory access")
    with results.step("cut off"):
        # a run killed here leaves this on disk: complete JSON and Markdown, the step marked running
        on_disk = json.loads((tmp_path / "results.json").read_text())
        assert on_disk["status"] == "running" and on_disk["steps"]["cut off"] == {"status": "running"}
        assert on_disk["steps"]["first"]["value"] == 1 and on_disk["steps"]["broken"]["status"] == "failed"
        report = (tmp_path / "results.md").read_text()
        assert report.startswith("# GPU check (gpu, running)") and "- cut off: running" in report
        assert "- broken: failed RuntimeError: CUDA error: an illegal memory access" in report
    results.finish()
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["status"] == "failed" and results.failed
    assert (
        "illegal memory access" in data["steps"]["broken"]["error"]
        and "Traceback" in data["steps"]["broken"]["traceback"]
    )
    assert data["steps"]["cut off"]["status"] == "passed" and not list(tmp_path.glob("*.tmp"))


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["--out", str(tmp_path), "--skip", "everything"]) == 2
    assert "--skip" in capsys.readouterr().err
    for budget in ("0", "-5", "soon", "nan"):
        with pytest.raises(SystemExit) as exited:
            gpu_check.main(["--out", str(tmp_path), "--budget-s", budget])
        assert exited.value.code == 2
        assert f"argument --budget-s: got {budget!r}, expected seconds" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()  # refused before anything is recorded


def test_the_transformer_engine_checks_code_runs_on_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only our check's code: the stand-in computes the torch block's math, so the errors are ~0."""
    sys.path.insert(0, str(REPO / "tests" / "training"))
    import fake_transformer_engine

    fake_transformer_engine.install(monkeypatch)
    api = gpu_check.te_api("cpu")
    assert api["problems"] == [] and len(api["parameters"]) == 12
    assert api["recipes"] == {
        "fp8/current": "Float8CurrentScaling",
        "fp8/delayed": "DelayedScaling",
        "mxfp8/current": "MXFP8BlockScaling",
        "nvfp4/current": "NVFP4BlockScaling",
    }
    errors = gpu_check.te_block_against_torch("cpu", seq=32, batch=1, hidden=128, heads=2)
    assert (
        errors["passed"] and errors["te_bf16_output_rel_error"] < 2e-2 and errors["te_bf16_input_grad_rel_error"] < 2e-2
    )


def test_a_sigterm_cuts_the_run_off_and_the_file_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper's time limit sends SIGTERM: the running step and the run are marked cut off, nothing after runs."""
    import signal

    def environment(dry_run: bool) -> dict:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while this step runs
        raise AssertionError("not reached: the signal interrupts the step")

    ran = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # --dry-run sets it; restored after the test
    monkeypatch.setattr(gpu_check, "environment", environment)
    monkeypatch.setattr(gpu_check, "resume_check", lambda *a, **k: ran.append("resume"))
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert gpu_check.main(["--out", str(tmp_path), "--dry-run"]) == 1
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["status"] == "cut off" and ran == []
    assert data["steps"]["environment"]["status"] == "cut off" and "SIGTERM" in data["steps"]["environment"]["error"]
    assert list(data["steps"]) == ["environment"]
    report = (tmp_path / "results.md").read_text()
    assert report.startswith("# GPU check (dry-run, cut off)") and "- environment: cut off stopped by SIGTERM" in report


def test_the_resume_check_compares_transformer_engine_state_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's own comparison of TE extra state (on the stand-in): equal content is equal whatever the
    pickle's key order; one amax differing is not."""
    import torch

    sys.path.insert(0, str(REPO / "tests" / "training"))
    import fake_transformer_engine

    from model_families.gpt import ModelConfig
    from training import precision as prec
    from training.model import CausalLM

    fake_transformer_engine.install(monkeypatch)
    config = ModelConfig("t", num_layers=1, hidden_size=64, num_attention_heads=2, ffn_hidden_size=128, vocab_size=128)
    model = CausalLM(config, backend="te", device="cpu")  # TE blocks on the CPU: the stand-in (build_model refuses)
    model.init_weights(1)
    tokens = torch.randint(0, 128, (2, 17))
    with prec.autocast("fp8", prec.te_recipe("fp8", "delayed")):
        model(tokens[:, :-1], tokens[:, 1:]).backward()
    state = gpu_check._extra_state(model)
    assert len(state) == 4 and all("amax_history_fwd" in s for s in state.values())  # qkv, attention, proj, mlp
    reordered = {name: dict(reversed(list(s.items()))) for name, s in state.items()}
    assert gpu_check._same_extra_state(state, reordered)
    changed = {name: {**s, "amax_history_fwd": s["amax_history_fwd"].clone()} for name, s in state.items()}
    next(iter(changed.values()))["amax_history_fwd"][5, 0] = 1.0
    assert not gpu_check._same_extra_state(state, changed)


# ---------------------------------------------------------------------------
# a GPU run without CUDA, measure() on the CPU


def test_a_gpu_run_without_cuda_ends_after_the_environment_step_and_trains_nothing(tmp_path: Path) -> None:
    """Without --dry-run on a host where CUDA is not usable: the environment step fails, every later step
    is recorded as skipped (the throughput rows with their configurations), both files are complete, and
    the exit status is 1 -- not a 1.3B model training on the CPU until the time limit kills it."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",
        "GPU_CHECK_TIMEOUT_S": "120",
    }
    env.pop(NVTE_NAME, None)
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # not 124/137: it ended by itself
    assert "[trainer]" not in done.stdout + done.stderr  # no trainer was set up
    data = json.loads((out / "results.json").read_text())
    assert data["mode"] == "gpu" and data["status"] == "failed" and data["budget_s"] == 90
    steps = data["steps"]
    names = [gpu_check.throughput_name("torch", b, ac) for b in (1, 2, 4) for ac in ("off", "full")]
    llama = gpu_check.throughput_name("torch", 2, "off", model="llama")
    assert llama == "throughput model=llama backend=torch batch=2 activation_checkpointing=off"
    names = [gpu_check.LLAMA_RESUME, llama, *names]
    assert list(steps) == ["environment", gpu_check.GEMM_STEP, "resume", "transformer_engine", *names]
    environment = steps["environment"]
    assert environment["status"] == "failed" and environment["cuda_available"] is False
    assert (
        environment["error"].startswith("NoCuda: no usable CUDA (")
        and "nothing is trained on the CPU" in environment["error"]
    )
    for name in (gpu_check.GEMM_STEP, "resume", "transformer_engine", *names):
        assert steps[name]["status"] == "skipped" and steps[name]["reason"] == gpu_check.SKIPPED_NO_CUDA, name
    assert steps[names[-1]]["config"] == {
        "model": "gpt-1b",
        "num_layers": None,
        "seq_length": 8192,
        "precision": "bf16",
        "backend": "torch",
        "batch_size": 4,
        "activation_checkpointing": "full",
    }
    assert steps[llama]["config"]["model"] == "llama" and steps[llama]["config"]["num_kv_heads"] == 8
    report = (out / "results.md").read_text()
    assert report.startswith("# GPU check (gpu, failed)") and report.count("| skipped: no usable CUDA |") == 7
    assert "- resume: skipped: no usable CUDA" in report and "- llama resume: skipped: no usable CUDA" in report


def test_measure_refuses_the_cpu_outside_the_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    built = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_check, "_trainer", lambda *a, **k: built.append(a))
    with pytest.raises(gpu_check.NoCuda, match="no usable CUDA: gpt-1b at sequence 8192 is measured on a GPU only"):
        gpu_check.measure(tmp_path, gpu_check.GPU_SETUP, 1, "off", steps=1, warmup=0)
    assert built == []  # refused before the model was built


def test_a_configuration_predicted_not_to_fit_is_skipped_on_any_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's "does not fit" skips the configuration on a GPU the catalogue knows; only the dry run's
    tiny model ignores it, and --no-skip. A GPU the catalogue does not know gets no prediction (not an H200's
    or an H100's) and is measured: an out-of-memory error is caught there."""
    measured = []
    monkeypatch.setattr(gpu_check, "measure", lambda *a, **k: measured.append(k) or {"losses": [1.0]})
    config = {
        "model": "gpt-1b",
        "num_layers": None,
        "seq_length": 8192,
        "precision": "bf16",
        "backend": "torch",
        "batch_size": 64,
        "activation_checkpointing": "off",
    }
    for device_name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        record: dict = {}
        gpu = gpu_check.prediction_gpu(device_name)
        gpu_check.measure_config(record, tmp_path, gpu_check.GPU_SETUP, config, gpu=gpu, device_name=device_name)
        predicted = record["predicted"]
        assert record["status"] == "skipped" and record["reason"] == (
            f"skipped: predicted out-of-memory, {predicted['memory_gb']} GB of {predicted['usable_gb']} GB usable "
            f"on {gpu.name}"
        )
        assert predicted["gpu"] == gpu.name and not predicted["fits"] and predicted["status"] == "out-of-memory"
        # not run: no predicted speed as if it had (issue 14), in the record or the table
        assert not set(gpu_check.SPEED_PREDICTIONS) & set(predicted)
        row = next(
            line for line in gpu_check.report({"steps": {"throughput x": record}}).splitlines() if gpu.name in line
        )
        assert row.startswith("| gpt-1b | torch | 64 | off | - (-) | - | - (-) | - (-) | - | -, - / - | - (")
    assert measured == []
    unknown = "NVIDIA H100 PCIe"  # not the catalogue's H100 (SXM: other clocks and peaks)
    record = {}
    assert gpu_check.prediction_gpu(unknown) is None
    with pytest.raises(KeyError):  # measured (the stub's result has no figures): no verdict to skip it by
        gpu_check.measure_config(record, tmp_path, gpu_check.GPU_SETUP, config, gpu=None, device_name=unknown)
    assert record["predicted"] is None and record["prediction"] == gpu_check.no_prediction_reason(unknown)
    assert "'NVIDIA H100 PCIe' is not in platform_spec.catalogue" in record["prediction"]
    record = {}
    with pytest.raises(KeyError):  # measured: the skip was not applied
        gpu_check.measure_config(
            record, tmp_path, gpu_check.GPU_SETUP, config, gpu=gpu_check.prediction_gpu("NVIDIA H200"), run_unfit=True
        )
    assert measured == [{"steps": 6, "warmup": 2, "backend": "torch", "dry_run": False}] * 2
    budget: dict = {}
    gpu_check.measure_config(budget, tmp_path, gpu_check.GPU_SETUP, {**config, "batch_size": 1}, gpu=None, left_s=-3.0)
    assert budget["status"] == "skipped" and budget["reason"] == "skipped: time budget (0 s left of --budget-s)"


class _Held:
    """Stands for the failed step's tensors, reachable only from its frame."""


def test_out_of_memory_frees_the_cache_only_after_the_error_and_its_frames_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    import torch

    held: list[weakref.ref] = []
    alive_at_free: list[bool] = []

    def out_of_memory(*args, **kwargs):
        tensors = _Held()  # a local of the failing frame, as a step's activations are
        held.append(weakref.ref(tensors))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.\nmore detail")

    def free() -> None:
        gc.collect()
        alive_at_free.append(held[0]() is not None)

    monkeypatch.setattr(gpu_check, "measure", out_of_memory)
    monkeypatch.setattr(gpu_check, "free_accelerator_memory", free)
    config = {
        "model": "gpt-1b",
        "num_layers": None,
        "seq_length": 8192,
        "precision": "bf16",
        "backend": "torch",
        "batch_size": 1,
        "activation_checkpointing": "full",
    }
    record: dict = {}
    gpu_check.measure_config(record, tmp_path, gpu_check.GPU_SETUP, config, gpu=gpu_check.prediction_gpu("NVIDIA H200"))
    assert record["status"] == "out of memory" and record["error"] == "CUDA out of memory. Tried to allocate 2.00 GiB."
    assert alive_at_free == [False]  # freed after the except block: the traceback no longer holds the frame

    trainer_gpu = _trainer_gpu(monkeypatch)
    monkeypatch.setattr(trainer_gpu.gpu_check, "measure", out_of_memory)
    monkeypatch.setattr(trainer_gpu.gpu_check, "free_accelerator_memory", free)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    held.clear()
    rows = trainer_gpu.run(trainer_gpu.build_parser().parse_args(["--batches", "1", "--ac", "full"]))
    assert [r["status"] for r in rows] == ["out of memory: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert rows[0]["backend"] == "auto" and rows[0]["predicted"]["gpu"] == "H200"
    assert alive_at_free == [False, False]


def _trainer_gpu(monkeypatch: pytest.MonkeyPatch):
    """benchmarks/trainer_gpu.py as a module (it imports gpu_check by name from its folder)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    for name in ("gpu_check", "trainer_gpu"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import trainer_gpu

    monkeypatch.setitem(sys.modules, "trainer_gpu", trainer_gpu)
    monkeypatch.setitem(sys.modules, "gpu_check", trainer_gpu.gpu_check)
    return trainer_gpu


def test_trainer_gpu_refuses_a_host_without_cuda(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    trainer_gpu = _trainer_gpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(trainer_gpu, "run", lambda args: pytest.fail("nothing may run without CUDA"))
    assert trainer_gpu.main([]) == 2
    assert "trainer_gpu: no usable CUDA" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# TransformerEngine's attention setting; the backend of each row


def test_the_deterministic_te_attention_setting_is_made_only_while_the_resume_models_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TE's DotProductAttention reads NVTE_ALLOW_NONDETERMINISTIC_ALGO when it is built; =0 disables fused
    attention on Blackwell. The check sets it for the resume trainers only and puts the old value back."""
    seen = []

    def trainer(values, base, **kwargs):
        seen.append(os.environ.get(NVTE_NAME))
        raise RuntimeError("stop after the first build")

    monkeypatch.setattr(gpu_check, "_trainer", trainer)
    for before in (None, "1"):
        if before is None:
            monkeypatch.delenv(NVTE_NAME, raising=False)
        else:
            monkeypatch.setenv(NVTE_NAME, before)
        with pytest.raises(RuntimeError, match="stop after the first build"):
            gpu_check.resume_check(tmp_path, {"model": "gpt-tiny"}, first=1, then=1)
        assert os.environ.get(NVTE_NAME) == before
    assert seen == ["0", "0"]
    env = {k: v for k, v in os.environ.items() if k != NVTE_NAME}
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; sys.path.insert(0, 'benchmarks'); import gpu_check, trainer_gpu; "
            f"print(os.environ.get({NVTE_NAME!r}))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert imported.stdout.strip() == "None", imported.stderr  # importing the tools sets nothing


def test_each_throughput_row_names_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch-native rows first, then TE's; the torch rows force the trainer's TE probe off (where TE imports
    the trainer would otherwise build TE blocks), and the table has a backend column."""
    sys.path.insert(0, str(REPO / "tests" / "training"))
    import fake_transformer_engine

    import training.train as train_module

    fake_transformer_engine.install(monkeypatch)
    assert train_module.transformer_engine_available()
    with gpu_check._forced_backend("torch"):
        assert not train_module.transformer_engine_available()
    with gpu_check._forced_backend("te"), gpu_check._forced_backend(None):
        assert train_module.transformer_engine_available()
    assert train_module.transformer_engine_available()
    with pytest.raises(ValueError, match="backend 'xla': expected one of torch, te"), gpu_check._forced_backend("xla"):
        pass
    names = [name for name, _ in gpu_check.throughput_configs(gpu_check.DRY_SETUP, ("torch", "te"))]
    assert names == [
        gpu_check.throughput_name(b, n, ac) for b in ("torch", "te") for n in (1, 2) for ac in ("off", "full")
    ]
    data = {
        "mode": "gpu",
        "status": "complete",
        "steps": {
            names[0]: {
                "status": "passed",
                "config": {"backend": "torch", "batch_size": 1, "activation_checkpointing": "off"},
                "measured": {"backend": "torch", "tokens_per_second_per_gpu": 10.0},
            },
            names[4]: {
                "status": "skipped",
                "reason": "skipped: time budget (12 s left of --budget-s)",
                "config": {"backend": "te", "batch_size": 1, "activation_checkpointing": "off"},
            },
        },
    }
    rows = [line for line in gpu_check.report(data).splitlines() if line.startswith("| - | t")]
    assert rows[0].startswith("| - | torch | 1 | off | 10.0 (-) |") and rows[1].startswith(
        "| - | te | 1 | off | - (-) |"
    )
    assert rows[1].endswith("| skipped: time budget (12 s left of --budget-s) |")


# ---------------------------------------------------------------------------
# the wrappers: time limit, exit codes, the trainer image


def test_the_wrapper_gives_the_budget_keeps_the_pythonpath_and_exits_124_when_it_cuts_the_run_off(
    tmp_path: Path,
) -> None:
    record = tmp_path / "argv"
    python = _stub(
        tmp_path, "python", 'printf "%s\\n" "PYTHONPATH=$PYTHONPATH" "$@" > "$STUB_RECORD"; exec sleep "$STUB_SLEEP"'
    )
    base = {
        **os.environ,
        "PYTHON": str(python),
        "STUB_RECORD": str(record),
        "OUT": str(tmp_path / "out"),
        "PYTHONPATH": "/opt/trainer",
    }  # the trainer image's
    base.pop("GPU_CHECK_TIMEOUT_S", None)

    def run(**env: str) -> tuple[int, list[str]]:
        done = subprocess.run(
            [str(SCRIPT), "--skip", "te"], capture_output=True, text=True, env={**base, **env}, timeout=120
        )
        return done.returncode, record.read_text().splitlines() if done.returncode != 2 else [done.stderr]

    code, argv = run(STUB_SLEEP="0")  # the default limit: 420 s, so a budget of 390 s
    assert code == 0
    assert argv == [
        f"PYTHONPATH={REPO}:/opt/trainer",
        str(REPO / "benchmarks" / "gpu_check.py"),
        "--out",
        str(tmp_path / "out"),
        "--budget-s",
        "390",
        "--skip",
        "te",
    ]
    code, argv = run(STUB_SLEEP="60", GPU_CHECK_TIMEOUT_S="1")  # the limit passes: SIGTERM, exit 124
    assert code == 124 and argv[4:6] == ["--budget-s", "1"]
    assert run(STUB_SLEEP="0", GPU_CHECK_TIMEOUT_S="45")[1][4:6] == ["--budget-s", "23"]  # under 60 s: half
    code, argv = run(STUB_SLEEP="0", GPU_CHECK_TIMEOUT_S="5m")
    assert code == 2 and "GPU_CHECK_TIMEOUT_S=5m: expected whole seconds >= 1" in argv[0]


def test_the_check_runs_inside_the_trainer_image_behind_nvidia_start_up(tmp_path: Path) -> None:
    """The image holds training/, platform_spec/ and model_families/ only and its ENTRYPOINT runs the trainer's entry point, so
    the wrapper replaces the ENTRYPOINT with its first element (NVIDIA's start-up script, which then execs
    bash) and mounts this checkout read-only at the working directory; gpu_check.sh puts that folder ahead
    of the image's PYTHONPATH (previous test)."""
    record = tmp_path / "docker-argv"
    docker = _stub(tmp_path, "docker", 'printf "%s\\n" "$@" > "$STUB_RECORD"')
    out = tmp_path / "results"
    env = {
        **os.environ,
        "DOCKER": str(docker),
        "STUB_RECORD": str(record),
        "OUT": str(out),
        "GPU_CHECK_TIMEOUT_S": "540",
    }
    done = subprocess.run(
        [str(IN_IMAGE), "trainer:dev", "--skip", "throughput"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    dockerfile = (REPO / "training" / "Dockerfile").read_text()
    entrypoint = json.loads(
        next(line for line in dockerfile.splitlines() if line.startswith("ENTRYPOINT")).split(None, 1)[1]
    )
    assert entrypoint[1:] == ["python", "-m", "training.entrypoint"]  # what a plain `docker run IMAGE bash` would hit
    assert record.read_text().splitlines() == [
        "run",
        "--rm",
        "--gpus",
        "1",
        "--shm-size",
        "1g",
        "--entrypoint",
        entrypoint[0],
        "-v",
        f"{REPO}:/src:ro",
        "-v",
        f"{out}:/out",
        "-e",
        "OUT=/out",
        "-e",
        "GPU_CHECK_TIMEOUT_S=540",
        "-w",
        "/src",
        "trainer:dev",
        "bash",
        "benchmarks/gpu_check.sh",
        "--skip",
        "throughput",
    ]
    assert out.is_dir()  # made for the mount
    assert "ENV PYTHONPATH=/opt/trainer" in dockerfile  # the image's; gpu_check.sh keeps it, after /src
    usage = subprocess.run([str(IN_IMAGE)], capture_output=True, text=True, env=env, timeout=60)
    assert usage.returncode == 2 and "usage: benchmarks/gpu_check_in_image.sh IMAGE" in usage.stderr


def test_the_in_image_check_can_build_the_image_from_the_base_images_one_home(tmp_path: Path) -> None:
    """``--build`` builds the checkout's image with ``BASE_IMAGE`` from ``platform_spec.trainer_image`` (the
    Dockerfile's ARG has no default), then checks that image."""
    from platform_spec.trainer_image import BASE_IMAGE

    record = tmp_path / "docker-argv"
    docker = _stub(tmp_path, "docker", 'printf "%s\\n" "$@" >> "$STUB_RECORD"; echo --- >> "$STUB_RECORD"')
    env = {**os.environ, "DOCKER": str(docker), "STUB_RECORD": str(record), "OUT": str(tmp_path / "results")}
    done = subprocess.run(
        [str(IN_IMAGE), "--build", "--skip", "te"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    build, run, _ = record.read_text().split("---\n")
    assert build.splitlines() == [
        "build",
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "-f",
        f"{REPO}/training/Dockerfile",
        "-t",
        "trainer:gpu-check",
        str(REPO),
    ]
    assert run.splitlines()[0] == "run"
    assert run.splitlines()[-5:] == ["trainer:gpu-check", "bash", "benchmarks/gpu_check.sh", "--skip", "te"]


# ---------------------------------------------------------------------------
# the Llama step's shapes


def test_the_llama_step_plans_the_shape_the_trainer_builds() -> None:
    """A custom shape (``model`` = the family's name, every shape hyperparameter given) is resolved by the one
    resolver the trainer uses, and the prediction is the planner's for that shape: Llama 3.2 1B's sizes,
    1.24B parameters (Meta's 1.23B), fitting one H100 80 GB (the GPU lent today) at 2 x 8K tokens."""
    import planner
    from planner.plan import evaluate_on_gpus
    from platform_spec.hyperparameters import model_shape, parse
    from platform_spec.models import family_of_shape

    values = gpu_check.setup_values(gpu_check.LLAMA_GPU_SETUP, 2, "off")
    shape = model_shape(parse(values))
    assert family_of_shape(shape).name == "llama" and shape.name == "llama"
    assert (shape.num_layers, shape.hidden_size, shape.num_heads, shape.num_kv_heads) == (16, 2048, 32, 8)
    assert shape.tied_embeddings is True and round(shape.num_params / 1e9, 2) == 1.24
    h100 = gpu_check.prediction_gpu("NVIDIA H100 80GB HBM3")
    predicted = gpu_check.prediction(gpu_check.LLAMA_GPU_SETUP, 2, "off", gpu=h100, gpus=1)
    instance = predicted["instance_type"]  # an H100 instance type of the catalogue
    plan = evaluate_on_gpus(planner.PlanInput.from_hyperparameters(parse(values), instance_type=instance), 1)
    assert predicted["gpu"] == "H100" and predicted["status"] == "fits"
    assert predicted["memory_gb"] == round(plan.memory_gb.total, 2) < predicted["usable_gb"]
    assert predicted["tokens_per_second_per_gpu"] == round(plan.tokens_per_second_per_gpu, 1)
    ((name, config),) = gpu_check.throughput_configs(gpu_check.LLAMA_GPU_SETUP, ("torch",), named=True)
    assert name == "throughput model=llama backend=torch batch=2 activation_checkpointing=off"
    assert {k: config[k] for k in ("num_kv_heads", "ffn_hidden_size", "vocab_size")} == {
        "num_kv_heads": 8,
        "ffn_hidden_size": 8192,
        "vocab_size": 128256,
    }


# ---------------------------------------------------------------------------
# the pure parts sized for the machine lent today: predictions, MFU, GEMM peak, budget


def test_predictions_are_for_the_measured_gpu_and_an_unknown_gpu_gets_none() -> None:
    from platform_spec import catalogue

    assert gpu_check.prediction_gpu("NVIDIA H100 80GB HBM3") is catalogue.GPUS["H100"]
    assert gpu_check.prediction_gpu("NVIDIA H200") is catalogue.GPUS["H200"]
    for unknown in ("NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "", None):  # not H200's figures, nor H100's
        assert gpu_check.prediction_gpu(unknown) is None
        assert gpu_check.prediction(gpu_check.GPU_SETUP, 1, "off", gpu=None, gpus=1) is None
    assert gpu_check.prediction_gpu(None, dry_run=True) is catalogue.GPUS[gpu_check.DRY_RUN_GPU]
    assert gpu_check.DRY_RUN_GPU == "H100"
    # every configuration the check runs on the lent H100 is predicted to fit it (none skipped by the planner)
    h100 = catalogue.GPUS["H100"]
    for setup in (gpu_check.GPU_SETUP, gpu_check.LLAMA_GPU_SETUP):
        for _, config in gpu_check.throughput_configs(setup, ("torch",)):
            predicted = gpu_check.prediction(
                setup, config["batch_size"], config["activation_checkpointing"], gpu=h100, gpus=1
            )
            assert predicted is not None and predicted["status"] == "fits", (config, predicted)


def test_the_mfu_table_gives_both_conventions_against_both_peaks() -> None:
    """Hand-computed: 10,000 tokens/s x 5e10 FLOPs/token = 500 TFLOP/s; of 1000 nominal 50 %, of 800 measured 62.5 %."""
    from model_families.gpt import flops_per_token
    from platform_spec.models import ATTENTION_FLOP_CONVENTIONS, get_preset

    table = gpu_check.mfu_table(10_000, {"causal": 5e10, "full": 6e10}, nominal_peak=1000.0, measured_peak=800.0)
    assert table == {
        "causal": {"tflops_per_gpu": 500.0, "mfu_nominal": 50.0, "mfu_measured_peak": 62.5},
        "full": {"tflops_per_gpu": 600.0, "mfu_nominal": 60.0, "mfu_measured_peak": 75.0},
    }
    unknown = gpu_check.mfu_table(10_000, {"causal": 5e10}, nominal_peak=None, measured_peak=None)
    assert unknown == {"causal": {"tflops_per_gpu": 500.0, "mfu_nominal": None, "mfu_measured_peak": None}}
    with pytest.raises(ValueError, match="peak_tflops must be > 0"):
        gpu_check.mfu_table(1.0, {"causal": 1.0}, nominal_peak=0.0, measured_peak=None)
    # the two conventions differ by the attention term only: 6 L h s more for the full square (gpt-1b at 8K)
    shape = get_preset("gpt-1b")
    extra = flops_per_token(shape, 8192, causal=False) - flops_per_token(shape, 8192)
    assert extra == 6 * shape.num_layers * shape.hidden_size * 8192
    assert gpu_check.CONVENTIONS == {True: "causal", False: "full"}
    assert "at half" in ATTENTION_FLOP_CONVENTIONS[True] and "Megatron-LM" in ATTENTION_FLOP_CONVENTIONS[True]
    assert "PaLM" in ATTENTION_FLOP_CONVENTIONS[False] and "torchtitan" in ATTENTION_FLOP_CONVENTIONS[False]


def test_the_gemm_peak_code_runs_bf16_and_fp8_on_the_cpu() -> None:
    """The step's GEMMs on the CPU (the GPU's peak needs the GPU): bf16 torch.mm and fp8 torch._scaled_mm with
    the column-major second operand it requires; the peaks are keyed by the catalogue's attribute names, so
    the precision registry's dense_peak finds a precision's own."""
    import torch

    from platform_spec.catalogue import GPUSpec
    from platform_spec.precisions import get_precision

    setup = {"sizes": (32, 64), "warmup": 1, "iters": 2}
    result = gpu_check.gemm_peaks(torch.device("cpu"), setup, fp8=True)
    assert [(r["kind"], r["n"], r["fast_accum"]) for r in result["rows"]] == [
        ("bf16", 32, False),
        ("bf16", 64, False),
        ("fp8", 32, False),
        ("fp8", 64, False),
        ("fp8", 32, True),
        ("fp8", 64, True),
    ]
    assert all(r["tflops"] > 0 and r["ms"] > 0 for r in result["rows"])
    assert set(result["peaks"]) == {"bf16_tflops", "fp8_tflops"} <= set(GPUSpec.__dataclass_fields__)
    assert result["peaks"]["bf16_tflops"] == max(r["tflops"] for r in result["rows"] if r["kind"] == "bf16")
    assert {get_precision(p).dense_peak for p in ("bf16", "fp8")} == set(result["peaks"])
    assert set(gpu_check.gemm_peaks(torch.device("cpu"), setup, fp8=False)["peaks"]) == {"bf16_tflops"}
    with pytest.raises(ValueError, match="kind 'fp16'"):
        gpu_check.gemm_tflops(32, "fp16", "cpu", warmup=0, iters=1)


def test_the_printed_budget_fits_one_eight_minute_call_on_an_h100() -> None:
    planned = gpu_check.planned_seconds(set(), te=False, dry_run=False)
    assert list(planned) == ["environment", gpu_check.GEMM_STEP, "resume", "llama", "throughput (6 configurations)"]
    lines = gpu_check.budget_lines(390.0, "420", planned)
    assert lines[0].startswith("time limit: 420 s") and "timeout_s=480" in lines[0]
    assert lines[1].startswith("measuring budget: 390 s (--budget-s)")
    assert lines[2].startswith("expected on one H100 80 GB (estimates, not yet measured)")
    assert len(lines) == 3 and sum(planned.values()) <= 390  # the plain check fits its budget
    assert 420 + 15 < gpu_check.DEVICE_CALL_S <= 480  # the wrapper's default limit and SIGKILL grace fit the call
    with_te = gpu_check.planned_seconds(set(), te=True, dry_run=False)  # in the image: TE checks and TE rows
    assert "transformer_engine" in with_te and "throughput (12 configurations)" in with_te
    over = gpu_check.budget_lines(390.0, "420", with_te)
    assert over[-1].startswith("the estimates exceed the budget by")
    assert gpu_check.planned_seconds({"llama", "throughput"}, te=False, dry_run=False).keys() == {
        "environment",
        gpu_check.GEMM_STEP,
        "resume",
    }
    assert gpu_check.planned_seconds(set(), te=False, dry_run=True) == {}
    assert gpu_check.budget_lines(None, None, {}) == [
        "measuring budget: none (--budget-s not given); a throughput configuration starts only with 45 s of it left"
    ]
