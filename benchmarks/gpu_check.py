"""The prepared GPU check: the trainer's GPU path, measured in one command whenever a GPU is lent.

    benchmarks/gpu_check.sh                 # results in $OUT/results.json and $OUT/results.md
    benchmarks/gpu_check.sh --dry-run       # the same steps on the CPU, tiny model, seconds (make test)
    benchmarks/gpu_check_in_image.sh IMAGE  # inside the trainer image: the TransformerEngine path too

Sized for the machine a session is lent today: one H100 80 GB (78 GiB usable;
sometimes an H200, 139 GiB), 16 cores, PyTorch preinstalled, no
TransformerEngine, no network, at most 64 MiB brought in (this repository; no
package is installed), 15 device-minutes per session that the machine's
start-up also counts against, at most 10 minutes per call. The whole check is
one call of at most 8 minutes (:data:`DEVICE_CALL_S`): the wrapper stops the
run at ``GPU_CHECK_TIMEOUT_S`` (default 420 s; the run is expected to take 4-5
minutes on the H100 without TransformerEngine, :data:`STEP_ESTIMATES_S`,
estimated, not yet measured) and gives ``--budget-s`` 30 s less: a throughput
configuration starts only while ``CONFIG_MARGIN_S`` of the budget is left.
The budget and each step's estimate are printed (and kept in
``results.json`` / ``results.md``) before the first step. Run directly,
``gpu_check.py`` has no budget unless given one.

Predictions are the planner's for the GPU measured, found in
:mod:`platform_spec.catalogue` by its name; a GPU the catalogue does not know
(an H100 PCIe, a new part) gets no prediction (``predicted: null`` and the
reason), never another GPU's, and is still measured. MFU is printed against
both the catalogue's nominal dense peak and the GEMM peak measured here, and by
both attention-FLOP conventions: the platform's (causal attention counted at
half, as the trainer's ``[metrics]`` lines and Megatron-LM count it) and the
full square (PaLM, torchtitan), :data:`platform_spec.models.ATTENTION_FLOP_CONVENTIONS`.
Nothing large is written: the trainer runs in this process (its own
``Trainer.setup`` / ``train_step`` / ``save`` / ``resume``: no export, and
checkpoints only of the small resume models, in a temporary folder that is
deleted).

Steps, in this order (``results.json`` and ``results.md`` are rewritten
atomically before and after each step, the step marked ``running`` first, so
a run cut off still reports what it measured and where it stopped):

1. ``environment``: PyTorch, CUDA, the GPU (name, compute capability, memory)
   and its catalogue entry (:mod:`platform_spec.catalogue`), TransformerEngine.
   Without ``--dry-run`` and without a usable CUDA device this step fails and
   the run ends: every other step is recorded as ``skipped: no usable CUDA``
   and nothing is trained on the CPU.
1b. ``gemm peak``: the dense GEMM peak this GPU reaches (:func:`gemm_peaks`):
   square bf16 GEMMs of 4096, 8192 and 16384 (``torch.mm``) and, where the
   precision registry runs fp8 on the GPU (compute capability >= 8.9), fp8
   ones (``torch._scaled_mm``, with and without fast accumulation), 10
   warm-up calls then 40 timed with CUDA events; the best of each next to the
   catalogue's nominal peak. The throughput rows' ``MFU % GEMM`` divide by it.
2. ``resume``: a DCP save at step 3 and a fresh trainer's resume continue
   **bitwise** (losses, gradient norms and final parameters equal to the run
   that did not stop; deterministic algorithms on, SDPA's math backend, and
   ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` while the resume models are built:
   TransformerEngine's ``DotProductAttention`` reads it when constructed,
   ``dot_product_attention.py`` of the image's TE, ``release_v2.19``). The variable is restored afterwards:
   left set, it would steer TE's attention backend in training
   (``dot_product_attention/utils.py`` ``get_attention_backend``: with determinism,
   "Disabling FusedAttention for determinism reasons with FP8 on arch < sm90 or cuDNN < 9.19.0", and
   FlashAttention 3 for head sizes >= 256) and skew every later measurement.
3. ``transformer_engine``: when TE imports -- the API names and arguments the
   trainer uses, a TE block against the torch block (same weights, both in
   bf16, each against the torch block in fp32), fp8 with
   current and delayed scaling (loss next to bf16's) and their resume
   (``_extra_state`` restored bitwise); mxfp8/nvfp4 too on Blackwell.
   Otherwise ``"skipped: TransformerEngine not installed"``.
4. ``llama``: the Llama family on the torch-native blocks (the lent GPU machine
   has no TransformerEngine; where TE imports these steps force the torch
   blocks all the same): ``llama resume``, the bitwise DCP resume of step 2 for
   ``llama-tiny`` with 2 blocks (grouped-query attention, tied embeddings), and
   one throughput row (``throughput model=llama ...``) of a custom shape of the
   family, Llama 3.2 1B's sizes (1.24B parameters, sequence 8192, batch 2,
   bf16, 4 steps after 2 of warm-up), resolved as the trainer resolves shapes
   (:func:`platform_spec.hyperparameters.model_shape`), next to the planner's
   prediction as in step 5.
5. ``throughput``: gpt-1b (1.3B parameters) at sequence 8192 in bf16,
   batch 1, 2, 4 with activation checkpointing off and full: tokens/s,
   TFLOP/s and MFU (the model family's FLOPs per token and
   :func:`platform_spec.models.mfu_percent`, the trainer's own formulas, against
   :func:`platform_spec.catalogue.dense_peak_tflops`), peak allocated and reserved
   memory, next to the planner's prediction for the same configuration on one
   GPU of this type (:func:`planner.plan.evaluate_on_gpus`) and
   measured/predicted. Every row names its ``backend``: first the
   torch-native blocks (``backend=torch``, forced even where TE imports), then,
   where TE imports, the same configurations with TE blocks (``backend=te``,
   what the trainer picks on a GPU with TE) while the budget lasts.
   Configurations the planner predicts not to fit (its verdict ``at-risk`` or
   ``out-of-memory``) are skipped with the verdict and the predicted memory,
   and no predicted speed (they would not run); those the time budget leaves
   no room for, with the time left. Each measured row has ``mfu_table``
   (:func:`mfu_table`): TFLOP/s and MFU by both conventions against both peaks.

``--dry-run``: every step on the CPU with gpt-tiny (2 blocks): one 128 x 128
bf16 GEMM for the GEMM step (its code, not a peak; fp8 skipped), the resume in
fp32 at sequence 64, the throughput in bf16 at sequence 128, batch 1 and 2;
the Llama step's resume likewise, and its throughput row with a tiny custom
Llama shape (2 blocks, hidden 128) at sequence 128, batch 1 (predictions for
one :data:`DRY_RUN_GPU`, for the table's shape only).

Exit status: 0 when every step that ran passed (skips are not failures); 1
when a step failed (no usable CUDA included), the resume was not bitwise, or
the run was cut off (SIGTERM/SIGINT: the running step and the files say
``cut off``); 2 bad arguments. ``gpu_check.sh`` adds ``timeout``'s: 124 when
its time limit cut the run off (the files say ``cut off``), 137 when the run
did not stop within 15 s of that and was killed (the files are as of the last
step boundary).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from platform_spec.catalogue import GPUSpec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS for the resume step

SCHEMA = 1
RESULTS = "results.json"
REPORT = "results.md"
GPU_SETUP = {"model": "gpt-1b", "seq_length": 8192, "precision": "bf16", "batches": (1, 2, 4), "steps": 6, "warmup": 2}
DRY_SETUP = {
    "model": "gpt-tiny",
    "num_layers": 2,
    "seq_length": 128,
    "precision": "bf16",
    "batches": (1, 2),
    "steps": 2,
    "warmup": 1,
}
RESUME_SETUP = {"model": "gpt-tiny", "seq_length": 256, "batch_size": 4, "first": 3, "then": 3}
"""The resume models: small (a few MB of checkpoint), the property does not depend on size."""
LLAMA_RESUME_SETUP: dict[str, Any] = {
    "model": "llama-tiny",
    "num_layers": 2,
    "seq_length": 256,
    "batch_size": 4,
    "first": 3,
    "then": 3,
}
"""The Llama family's resume model: its CPU preset (grouped-query attention 4:2, tied embeddings: the LM head
and the embedding share one FSDP2-sharded weight through DCP), 2 blocks."""
LLAMA_GPU_SETUP: dict[str, Any] = {
    "label": "llama 1.2B (custom)",
    "model": "llama",  # the family's name: a custom shape, every shape hyperparameter given
    "num_layers": 16,
    "hidden_size": 2048,
    "num_heads": 32,
    "num_kv_heads": 8,
    "ffn_hidden_size": 8192,
    "vocab_size": 128256,
    "rope_base": 500000.0,
    "tied_embeddings": True,
    "seq_length": 8192,
    "precision": "bf16",
    "batches": (2,),
    "activation_checkpointing": ("off",),
    "steps": 4,
    "warmup": 2,
}
"""The Llama step's throughput configuration on a GPU: Meta's Llama 3.2 1B sizes (torchtune's ``llama3_2_1b``
builder: 16 layers, hidden 2048, 32 query and 8 KV heads, FFN 8192, vocabulary 128256, RoPE base 500000,
tied embeddings; 1.24B parameters) without its RoPE scaling (``scale_factor=32``, which the trainer does not
implement), as a custom shape of the family; one configuration, a few steps (about 30-40 s on an H100, estimated)."""
LLAMA_DRY_SETUP: dict[str, Any] = {
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
    "batches": (1,),
    "activation_checkpointing": ("off",),
    "steps": 2,
    "warmup": 1,
}
"""The Llama step's throughput configuration in the dry run: a tiny custom shape on the CPU."""
GEMM_STEP = "gemm peak"
"""The GEMM peak step's name in ``results.json``."""
GEMM_SETUP: dict[str, Any] = {"sizes": (4096, 8192, 16384), "warmup": 10, "iters": 40}
"""Large square GEMMs on the GPU: 2 n^3 = 0.14, 1.1 and 8.8 TFLOP each; at H100 rates the step takes
seconds (fp8 adds two passes, with and without fast accumulation)."""
GEMM_DRY_SETUP: dict[str, Any] = {"sizes": (128,), "warmup": 1, "iters": 3}
"""The dry run's GEMM on the CPU: the step's code, not a peak worth reading."""
DRY_RUN_GPU = "H100"
"""The catalogue GPU the dry run's predictions are for (a CPU has none of its own): the one a session is
usually lent (one H100 80 GB)."""
DEVICE_CALL_S = 480
"""The device call the check is sized for: one call of 8 minutes on an H100 (``run(command=
"benchmarks/gpu_check.sh", timeout_s=480)``), of the 15 device-minutes a session has with the machine's start-up;
``gpu_check.sh``'s default limit (420 s) plus its 15 s SIGKILL grace stays inside it."""
STEP_ESTIMATES_S: dict[str, float] = {
    "environment": 15,
    GEMM_STEP: 15,
    "resume": 25,
    "transformer_engine": 150,
    "llama": 45,
    "throughput (per configuration)": 25,
}
"""Seconds each step is expected to take on one H100 80 GB (estimates from the FLOPs and sizes, not yet measured:
no GPU has been lent since the check was sized; ``transformer_engine`` only where TE imports). Printed with
the budget before the run (:func:`budget_lines`)."""
CONFIG_MARGIN_S = 45.0
"""Time kept free per remaining throughput configuration (model build, warm-up, release)."""
SKIPPED_NO_TE = "skipped: TransformerEngine not installed"
SKIPPED_DRY_RUN_TE = "skipped: the TransformerEngine checks need a GPU (dry run on the CPU)"
NO_CUDA = "no usable CUDA"
SKIPPED_NO_CUDA = f"skipped: {NO_CUDA}"
DETERMINISTIC_TE_ATTENTION = ("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "0")
"""Set only while the resume models are built (see the module docstring, step 2)."""


class NoCuda(RuntimeError):
    """A GPU measurement asked for where CUDA is not usable (the check never trains the GPU setup on the CPU)."""


# ---------------------------------------------------------------------------
# results.json and results.md, rewritten before and after every step


class CutOff(BaseException):
    """SIGTERM or SIGINT (the wrapper's time limit, or a person): stop measuring, say so, keep what was measured."""


def _cut_off(signum: int, frame: Any) -> None:
    raise CutOff(f"stopped by {signal.Signals(signum).name} (the run's time limit?)")


def _install_cut_off() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _cut_off)


class Results:
    """The check's record; :meth:`write` replaces ``results.json`` and ``results.md`` (each atomically), so
    both say what a run killed at any moment had measured (``running`` marks the step it was in)."""

    def __init__(self, out: Path, *, mode: str, argv: Sequence[str]) -> None:
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "mode": mode,
            "argv": list(argv),
            "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "steps": {},
        }
        self.failed = False
        self.cut_off = False
        self.write()

    def write(self) -> None:
        from platform_spec.files import atomic_write_text  # the repository is on sys.path from here on

        atomic_write_text(self.out / RESULTS, json.dumps(self.data, indent=2, default=_json_default) + "\n")
        atomic_write_text(self.out / REPORT, report(self.data))

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        """Record one step: ``running`` first, then its result (or the failure), written either way."""
        record: dict[str, Any] = {"status": "running"}
        self.data["steps"][name] = record
        self.write()
        start = time.monotonic()
        try:
            yield record
            if record["status"] == "running":
                record["status"] = "passed"
        except CutOff as exc:
            record["status"] = "cut off"
            record["error"] = str(exc)
            self.cut_off = True
            raise
        except Exception as exc:
            record["status"] = "failed"
            record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            record["traceback"] = traceback.format_exc()[-4000:]
        finally:
            record["seconds"] = round(time.monotonic() - start, 2)
            if record["status"] == "failed":
                self.failed = True
            self.write()

    def skip(self, name: str, reason: str, **fields: Any) -> None:
        """Record a step that will not run, with why."""
        self.data["steps"][name] = {"status": "skipped", "reason": reason, **fields}
        self.write()

    def finish(self) -> None:
        self.data["status"] = "cut off" if self.cut_off else "failed" if self.failed else "complete"
        self.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.write()


def _json_default(value: Any) -> Any:
    return str(value)  # Path, torch.Size, dtypes ...: their text


@contextlib.contextmanager
def _environment_variable(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block; the previous value (or its absence) after it."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


# ---------------------------------------------------------------------------
# the trainer, in this process

BACKENDS = ("torch", "te")
"""The trainer's block implementations (:func:`training.model.build_model`)."""


@contextlib.contextmanager
def _forced_backend(backend: str | None) -> Iterator[None]:
    """Make ``Trainer.setup`` pick ``backend`` (``None``: its own choice, TE on a GPU where TE imports).

    The trainer has no setting for it; for ``"torch"`` its probe for TransformerEngine answers "no"
    inside the block. :func:`_trainer` checks the outcome, so a renamed probe fails loudly instead of
    measuring the other backend.
    """
    if backend in (None, "te"):
        yield
        return
    if backend != "torch":
        raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    import training.train as train_module

    probe = train_module.transformer_engine_available
    train_module.transformer_engine_available = lambda: False
    try:
        yield
    finally:
        train_module.transformer_engine_available = probe


def _trainer(values: dict[str, Any], base: Path, *, backend: str | None = None) -> Any:
    """The trainer's own setup (model, FSDP2, optimizer, data) for ``values``; no file is written.

    Raises:
        RuntimeError: ``backend`` given and the trainer built the other one (TE asked for where it
            does not import, or the forcing of :func:`_forced_backend` no longer works).
    """
    from platform_spec.hyperparameters import parse
    from training.environment import SageMakerPaths
    from training.train import Trainer

    hp = parse(
        {
            "synthetic_data": True,
            "max_steps": 1000,
            "warmup_steps": 2,
            "log_interval": 10**6,
            "checkpoint_interval": 10**6,
            "keep_checkpoints": 1,
            **values,
        }
    )
    trainer = Trainer(hp, SageMakerPaths(base), environ={})
    with _forced_backend(backend):
        trainer.setup()
    _install_cut_off()  # the trainer's stop handlers would only record the signal and keep going
    if backend is not None and trainer.backend != backend:
        built = trainer.backend
        _release(trainer)
        raise RuntimeError(f"asked for backend={backend}, the trainer built backend={built}")
    return trainer


def _release(trainer: Any) -> None:
    import torch

    device = trainer.device
    for name in ("model", "optimizer", "scheduler", "sampler", "checkpoints", "metrics"):
        setattr(trainer, name, None)
    del trainer
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_step(trainer: Any) -> tuple[float, float, float]:
    """One optimizer step of the trainer; ``(seconds, loss, grad_norm)`` (synchronised)."""
    _sync(trainer.device)
    start = time.perf_counter()
    loss, grad_norm, _lr, skipped, _counts = trainer.train_step()  # the loss and norm are read: synchronised
    trainer.step += 1
    _sync(trainer.device)
    if skipped:  # a step without its optimizer update would time less than a step
        raise RuntimeError(f"step {trainer.step} skipped its update: loss={loss:.4g} grad_norm={grad_norm:.4g}")
    return time.perf_counter() - start, loss, grad_norm


def _parameter_digest(model: Any) -> str:
    """SHA-256 of every full parameter's bytes, in name order (collective under FSDP2)."""
    import torch
    from torch.distributed.tensor import DTensor

    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        full = param.full_tensor() if isinstance(param, DTensor) else param
        digest.update(name.encode())
        digest.update(full.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _extra_state(model: Any) -> dict[str, dict[str, Any]]:
    """Each TransformerEngine module's ``_extra_state``, unpickled (recipe, scales, amax history); {} without TE.

    Compared by content (:func:`_same_extra_state`), not by bytes: the pickle's dict order may differ.
    """
    import pickle

    import torch

    out = {}
    for name, module in model.named_modules():
        if type(module).get_extra_state is not torch.nn.Module.get_extra_state:  # the modules that define one
            state = module.get_extra_state()
            if hasattr(state, "numel") and state.numel():
                out[name] = pickle.loads(state.detach().cpu().numpy().tobytes())
    return out


def _same_extra_state(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> bool:
    import torch

    if a.keys() != b.keys():
        return False
    for name, state in a.items():
        other = b[name]
        if state.keys() != other.keys() or repr(state.get("recipe")) != repr(other.get("recipe")):
            return False
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                if not torch.equal(value, other[key]):
                    return False
            elif key != "recipe" and value != other[key]:
                return False
    return True


# ---------------------------------------------------------------------------
# step: environment


def environment(dry_run: bool) -> dict[str, Any]:
    import torch

    from platform_spec import catalogue
    from training.model import transformer_engine_available

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
    }
    if torch.cuda.is_available() and not dry_run:
        props = torch.cuda.get_device_properties(0)
        gpu = catalogue.gpu_for_device_name(props.name)
        env.update(
            {
                "gpu": props.name,
                "gpu_count": torch.cuda.device_count(),
                "compute_capability": f"{props.major}.{props.minor}",
                "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                "gpu_memory_gb": round(props.total_memory / 1e9, 1),
                "catalogue_gpu": gpu.name if gpu else None,
                "catalogue_hbm_gb": gpu.hbm_gb if gpu else None,
                "cudnn": torch.backends.cudnn.version(),
                "nccl": _nccl_version(),
                "driver": _driver_version(),
            }
        )
        env["transformer_engine"] = _te_version() if transformer_engine_available() else None
    else:
        env["transformer_engine"] = None
        if not dry_run:  # CUDA's own reason, as the trainer gives it (training.precision.require_cuda)
            try:
                torch.cuda.init()
                env["cuda_error"] = "torch.cuda.is_available() is false"
            except Exception as exc:
                env["cuda_error"] = " ".join(str(exc).split())[:300]
    return env


def _nccl_version() -> str | None:
    try:
        import torch

        version = torch.cuda.nccl.version()
        return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:
        return None


def _driver_version() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _te_version() -> str | None:
    try:
        import transformer_engine

        return getattr(transformer_engine, "__version__", "unknown")
    except Exception:
        return None


# ---------------------------------------------------------------------------
# step: GEMM peak


def gemm_tflops(n: int, kind: str, device: Any, *, warmup: int, iters: int, fast_accum: bool = False) -> dict[str, Any]:
    """TFLOP/s of one square ``n x n @ n x n`` GEMM (``2 n^3`` FLOPs) on ``device``.

    ``kind`` ``"bf16"``: ``torch.mm`` of bf16 operands; ``"fp8"``: ``torch._scaled_mm`` of E4M3 operands
    (the second column-major, as cuBLASLt's fp8 GEMM needs), per-tensor fp32 scales of 1, bf16 output,
    ``use_fast_accum`` as given (PyTorch ``torch/_meta_registrations.py`` ``meta_scaled_mm``: "mat2 must be
    col_major"; CUDA, compute capability >= 8.9). ``warmup`` calls first (clocks, cuBLAS heuristics), then
    ``iters`` back to back timed with CUDA events around the loop (``time.perf_counter`` on a CPU).

    Returns:
        ``{"kind", "n", "fast_accum", "ms", "tflops"}``: mean milliseconds per GEMM and TFLOP/s (10^12 FLOP/s).

    Raises:
        ValueError: ``kind`` not ``"bf16"`` or ``"fp8"``, ``n``, ``warmup`` or ``iters`` out of range.
    """
    import torch

    if kind not in ("bf16", "fp8"):
        raise ValueError(f"kind {kind!r}: expected 'bf16' or 'fp8'")
    if n < 1 or warmup < 0 or iters < 1:
        raise ValueError(f"n={n}, warmup={warmup}, iters={iters}: expected n >= 1, warmup >= 0, iters >= 1")
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=generator).to(torch.bfloat16)
    b = torch.randn(n, n, device=device, generator=generator).to(torch.bfloat16)
    if kind == "bf16":

        def gemm() -> Any:
            return torch.mm(a, b)

    else:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major
        one = torch.ones((), device=device, dtype=torch.float32)

        def gemm() -> Any:
            return torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    for _ in range(warmup):
        gemm()
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            gemm()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / iters
    else:
        began = time.perf_counter()
        for _ in range(iters):
            gemm()
        ms = (time.perf_counter() - began) * 1e3 / iters
    return {
        "kind": kind,
        "n": n,
        "fast_accum": fast_accum,
        "ms": round(ms, 4),
        "tflops": float(f"{2 * n**3 / ms / 1e9:.4g}"),
    }


def gemm_peaks(device: Any, setup: dict[str, Any], *, fp8: bool) -> dict[str, Any]:
    """The dense GEMM peak this device reaches: the best of :func:`gemm_tflops` over ``setup["sizes"]``
    (bf16; fp8 too where ``fp8``, with and without fast accumulation).

    Returns:
        ``{"rows": [each gemm_tflops result], "peaks": {"bf16_tflops": ..., "fp8_tflops": ...}}``: the peaks
        under the catalogue's attribute names (:class:`platform_spec.catalogue.GPUSpec`), so a precision's
        :attr:`~platform_spec.precisions.Precision.dense_peak` names its own; ``fp8_tflops`` only where ``fp8``.
    """
    rows = []
    runs = [("bf16", False)] + ([("fp8", False), ("fp8", True)] if fp8 else [])
    for kind, fast_accum in runs:
        for n in setup["sizes"]:
            rows.append(
                gemm_tflops(n, kind, device, warmup=setup["warmup"], iters=setup["iters"], fast_accum=fast_accum)
            )
    peaks = {f"{kind}_tflops": max(r["tflops"] for r in rows if r["kind"] == kind) for kind, _ in runs}
    return {"rows": rows, "peaks": peaks}


def gemm_step(results: Results, *, cuda: bool) -> dict[str, float]:
    """The ``gemm peak`` step: :func:`gemm_peaks` of :data:`GEMM_SETUP` on the GPU (fp8 where the precision
    registry's hardware rule runs fp8 on it), of :data:`GEMM_DRY_SETUP` (bf16) on the CPU in the dry run,
    next to the catalogue's nominal dense peaks; the measured peaks (``{}`` if the step failed), which are
    also ``results.data["measured_peaks"]``."""
    import torch

    from platform_spec import catalogue
    from platform_spec.precisions import get_precision

    with results.step(GEMM_STEP) as record:
        if cuda:
            capability = tuple(torch.cuda.get_device_capability(0))
            fp8 = get_precision("fp8").supported_by(capability)
            measured = gemm_peaks(torch.device("cuda", 0), GEMM_SETUP, fp8=fp8)
            gpu = catalogue.gpu_for_device_name(torch.cuda.get_device_name(0))
        else:
            fp8 = False
            measured = gemm_peaks(torch.device("cpu"), GEMM_DRY_SETUP, fp8=False)
            gpu = None
        if not fp8:
            record["fp8"] = "skipped: " + (
                "fp8 GEMMs need a CUDA GPU (dry run on the CPU)"
                if not cuda
                else f"fp8 needs {get_precision('fp8').hardware}"
            )
        record.update(measured)
        record["nominal"] = {k: getattr(gpu, k) for k in measured["peaks"]} if gpu else None
        if gpu:
            record["measured_over_nominal"] = {k: _ratio(v, getattr(gpu, k)) for k, v in measured["peaks"].items()}
        results.data["measured_peaks"] = measured["peaks"]
    return dict(results.data.get("measured_peaks", {}))


# ---------------------------------------------------------------------------
# step: resume


def resume_check(
    work: Path, values: dict[str, Any], *, first: int, then: int, backend: str | None = None
) -> dict[str, Any]:
    """Save at step ``first``, keep going ``then`` steps; a fresh trainer resumes and does the same: equal?

    ``backend``: the blocks both trainers build (:func:`_trainer`; None: the trainer's choice).

    Returns the losses and gradient norms of both, whether they and the final
    parameters (and TE's extra state) are bitwise equal, and the checkpoint's size.
    """
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    base = work / "resume"
    shutil.rmtree(base, ignore_errors=True)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    stack = contextlib.ExitStack()
    # SDPA's math backend: the flash and memory-efficient backward kernels accumulate with atomics
    stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
    # TE's attention picks a deterministic backend when built under it (both trainers are built inside)
    stack.enter_context(_environment_variable(*DETERMINISTIC_TE_ATTENTION))
    try:
        a = _trainer(values, base, backend=backend)
        a.resume()
        before = [_one_step(a)[1:] for _ in range(first)]
        a.save("gpu check")
        saved_extra = _extra_state(a.model)
        continuous = [_one_step(a)[1:] for _ in range(then)]
        final_a = _parameter_digest(a.model)
        built = a.backend
        _release(a)

        b = _trainer(values, base, backend=backend)
        b.resume()
        resumed_at = b.step
        restored_extra = _extra_state(b.model)
        resumed = [_one_step(b)[1:] for _ in range(then)]
        final_b = _parameter_digest(b.model)
        _release(b)
    finally:
        stack.close()
        torch.use_deterministic_algorithms(previous)
    size = sum(f.stat().st_size for f in (base / "checkpoints").rglob("*") if f.is_file())
    shutil.rmtree(base, ignore_errors=True)
    diffs = [abs(x[0] - y[0]) for x, y in zip(continuous, resumed, strict=True)]
    extra_restored = _same_extra_state(saved_extra, restored_extra)
    return {
        "backend": built,
        "resumed_at_step": resumed_at,
        "losses_before_save": [x[0] for x in before],
        "continuous": continuous,
        "resumed": resumed,
        "max_abs_loss_difference": max(diffs) if diffs else None,
        "parameters_equal": final_a == final_b,
        "extra_state_modules": len(saved_extra),
        "extra_state_restored": extra_restored,
        "bitwise": resumed_at == first and continuous == resumed and final_a == final_b and extra_restored,
        "checkpoint_mb": round(size / 1e6, 2),
    }


# ---------------------------------------------------------------------------
# step: throughput


def setup_values(setup: dict[str, Any], batch: int, ac: str) -> dict[str, Any]:
    """The trainer's hyperparameters of one throughput configuration of ``setup``: its model (a preset, or a
    family's name with the shape hyperparameters of a custom shape), sequence, precision, ``batch`` and
    activation checkpointing ``ac``."""
    from platform_spec.hyperparameters import SHAPE_HYPERPARAMETERS

    names = ("model", *SHAPE_HYPERPARAMETERS, "seq_length", "precision")
    values = {k: setup[k] for k in names if setup.get(k) is not None}
    values.update({"batch_size": batch, "activation_checkpointing": ac})
    return values


class Target(NamedTuple):
    """What the throughput rows are compared with: the catalogue GPU the predictions are for
    (:func:`prediction_gpu`; ``None``: none), the measured GPU's own name, and the GEMM peaks measured on it
    (:func:`gemm_peaks`: ``{"bf16_tflops": ..., "fp8_tflops": ...}``, the catalogue's attribute names, so a
    precision's :attr:`~platform_spec.precisions.Precision.dense_peak` finds its own)."""

    gpu: GPUSpec | None
    device_name: str | None
    measured_peaks: dict[str, float]


SPEED_PREDICTIONS = ("tokens_per_second_per_gpu", "tflops_per_gpu", "mfu")
"""The predicted figures that describe a run: left out of a prediction for a configuration that would not run
(readers take a missing one as unknown: ``-`` in ``results.md``, NaN in ``trainer_gpu.py``'s table)."""


def prediction_gpu(device_name: str | None, *, dry_run: bool = False) -> GPUSpec | None:
    """The catalogue GPU the planner's predictions are for: the measured GPU's entry
    (:func:`platform_spec.catalogue.gpu_for_device_name` of ``torch.cuda.get_device_name()``), ``None`` for a GPU
    the catalogue does not know (no prediction rather than another GPU's: an H100 PCIe is not an H100 SXM);
    in the dry run, which has no GPU, :data:`DRY_RUN_GPU`."""
    from platform_spec import catalogue

    if dry_run:
        return catalogue.GPUS[DRY_RUN_GPU]
    return catalogue.gpu_for_device_name(device_name) if device_name else None


def no_prediction_reason(device_name: str | None) -> str:
    """Why a row has no prediction: the GPU is not in the catalogue (:func:`prediction_gpu` gave ``None``)."""
    return f"no prediction: GPU {device_name!r} is not in platform_spec.catalogue.GPUS (no other GPU's figures)"


def prediction(setup: dict[str, Any], batch: int, ac: str, *, gpu: GPUSpec | None, gpus: int) -> dict[str, Any] | None:
    """The planner's figures for the configuration on ``gpus`` GPUs of type ``gpu`` (:func:`prediction_gpu`);
    ``None`` when ``gpu`` is ``None`` (a GPU the catalogue does not know: no prediction).

    The model's shape is the one the trainer builds (:func:`platform_spec.hyperparameters.model_shape` of the
    same hyperparameters, through :meth:`planner.PlanInput.from_hyperparameters`). ``status`` is the
    planner's memory verdict (``fits``, ``at-risk``, ``out-of-memory``); the speed figures
    (:data:`SPEED_PREDICTIONS`) are left out for a configuration predicted out of memory, which would not run.
    """
    from planner import PlanInput
    from planner.plan import evaluate_on_gpus
    from platform_spec import catalogue
    from platform_spec.hyperparameters import parse

    if gpu is None:
        return None
    instance = next(s for s in catalogue.INSTANCES.values() if s.gpu == gpu.name and s.gpus_per_instance >= gpus)
    hp = parse(setup_values(setup, batch, ac))
    plan = evaluate_on_gpus(PlanInput.from_hyperparameters(hp, instance_type=instance.instance_type), gpus)
    predicted = {
        "gpu": gpu.name,
        "instance_type": instance.instance_type,
        "gpus": gpus,
        "status": plan.status,
        "fits": plan.fits,
        "memory_gb": round(plan.memory_gb.total, 2),
        "usable_gb": round(plan.memory_gb.usable, 2),
    }
    if plan.ran:
        predicted.update(
            tokens_per_second_per_gpu=round(plan.tokens_per_second_per_gpu, 1),
            tflops_per_gpu=round(plan.tflops_per_gpu, 1),
            mfu=round(plan.mfu, 2),
        )
    return predicted


def measure(
    work: Path,
    setup: dict[str, Any],
    batch: int,
    ac: str,
    *,
    steps: int,
    warmup: int,
    backend: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Median step of ``steps`` after ``warmup``: tokens/s, TFLOP/s, MFU, peak memory (GB, 10^9 B).

    Args:
        backend: ``"torch"`` or ``"te"`` blocks (None: the trainer's choice); the result names the one built.
        dry_run: allow the CPU (the tiny dry-run setup); otherwise CUDA is required.

    Raises:
        NoCuda: not ``dry_run`` and CUDA is not usable, before anything is built (a GPU configuration,
            gpt-1b at sequence 8192, would otherwise train on the CPU for hours).
        torch.OutOfMemoryError: the configuration does not fit.
    """
    import torch

    from platform_spec.models import mfu_percent, model_tflops_per_second
    from training.metrics import peak_memory_gb

    if not dry_run and not torch.cuda.is_available():
        raise NoCuda(
            f"{NO_CUDA}: {setup['model']} at sequence {setup['seq_length']} is measured on a GPU only "
            "(--dry-run measures the tiny setup on the CPU)"
        )
    values = setup_values(setup, batch, ac)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer = _trainer(values, work / f"{setup['model']}-b{batch}-{ac.replace(':', '')}", backend=backend)
    try:
        if not dry_run and trainer.device.type != "cuda":
            raise NoCuda(f"{NO_CUDA}: the trainer chose device {trainer.device}")
        times, losses = [], []
        for _ in range(warmup + steps):
            seconds, loss, _ = _one_step(trainer)
            times.append(seconds)
            losses.append(loss)
        step_s = statistics.median(times[warmup:])
        tokens_per_second = trainer.tokens_per_step / step_s
        per_gpu = tokens_per_second / trainer.world_size
        # the trainer's own FLOPs per token: its model family's, of the shape it built (a preset or a custom
        # shape, platform_spec.hyperparameters.model_shape), what its [metrics] lines report MFU with
        fpt = trainer.metrics.flops_per_token
        peak = trainer.metrics.info.peak_tflops
        # the other common convention (the full attention square), for figures published that way
        full = trainer.model.family.flops_per_token(trainer.config, trainer.hp.seq_length, causal=False)
        allocated, reserved = peak_memory_gb(trainer.device)
        return {
            "backend": trainer.backend,
            "world_size": trainer.world_size,
            "step_seconds": round(step_s, 4),
            "tokens_per_second": round(tokens_per_second, 1),
            "tokens_per_second_per_gpu": round(per_gpu, 1),
            "tflops_per_gpu": round(model_tflops_per_second(per_gpu, fpt), 2),
            "mfu": round(mfu_percent(per_gpu, fpt, peak), 2) if peak else None,
            "flops_per_token": {CONVENTIONS[True]: fpt, CONVENTIONS[False]: full},
            "nominal_peak_tflops": peak,
            "peak_allocated_gb": round(allocated, 2),
            "peak_reserved_gb": round(reserved, 2),
            "losses": [round(x, 4) for x in losses],
        }
    finally:
        _release(trainer)


CONVENTIONS = {True: "causal", False: "full"}
"""The keys of :func:`mfu_table` by the ``causal`` flag of the families' ``flops_per_token``: ``causal`` the
platform's (what the trainer's ``[metrics]`` lines report), ``full`` the other common one
(:data:`platform_spec.models.ATTENTION_FLOP_CONVENTIONS` says who counts which)."""


def mfu_table(
    tokens_per_second_per_gpu: float,
    flops_per_token: dict[str, float],
    *,
    nominal_peak: float | None,
    measured_peak: float | None,
) -> dict[str, dict[str, float | None]]:
    """Model TFLOP/s per GPU and MFU (percent) by both attention-FLOP conventions and against both peaks.

    Args:
        tokens_per_second_per_gpu: the measured throughput.
        flops_per_token: training FLOPs per token by convention (:data:`CONVENTIONS`' values).
        nominal_peak: the dense peak of the catalogue for the run's precision, TFLOP/s
            (:func:`platform_spec.catalogue.dense_peak_tflops`); ``None`` for a GPU it does not know, or a CPU.
        measured_peak: the GEMM peak this GPU reached at that precision (:func:`gemm_peaks`), TFLOP/s;
            ``None`` where not measured.

    Returns:
        ``{convention: {"tflops_per_gpu", "mfu_nominal", "mfu_measured_peak"}}``, rounded to 2 decimals; an MFU
        is ``None`` where its peak is.

    Raises:
        ValueError: a peak that is not > 0.
    """
    from platform_spec.models import mfu_percent, model_tflops_per_second

    out: dict[str, dict[str, float | None]] = {}
    for convention, fpt in flops_per_token.items():
        out[convention] = {
            "tflops_per_gpu": round(model_tflops_per_second(tokens_per_second_per_gpu, fpt), 2),
            "mfu_nominal": None
            if nominal_peak is None
            else round(mfu_percent(tokens_per_second_per_gpu, fpt, nominal_peak), 2),
            "mfu_measured_peak": None
            if measured_peak is None
            else round(mfu_percent(tokens_per_second_per_gpu, fpt, measured_peak), 2),
        }
    return out


def free_accelerator_memory() -> None:
    """Collect garbage and return PyTorch's cached CUDA blocks (after an out-of-memory error).

    Call it after the ``except`` block that caught the error: inside it the exception's traceback
    still holds the failed step's frames and, through them, its tensors.
    """
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def throughput_name(backend: str, batch: int, ac: str, *, model: str | None = None) -> str:
    """The step name of one throughput configuration in ``results.json`` (``model``: named for the rows of
    another setup than the GPT one, e.g. the Llama step's)."""
    named = f" model={model}" if model else ""
    return f"throughput{named} backend={backend} batch={batch} activation_checkpointing={ac}"


def throughput_configs(
    setup: dict[str, Any], backends: Sequence[str], *, named: bool = False
) -> list[tuple[str, dict[str, Any]]]:
    """``(step name, config)`` of every throughput configuration, in the order they run: every
    torch-native one first, then the next backend's; activation checkpointing ``off`` and ``full`` unless
    the setup lists its own. ``named``: the step names carry the setup's model (:func:`throughput_name`)."""
    from platform_spec.hyperparameters import SHAPE_HYPERPARAMETERS

    shape = [k for k in SHAPE_HYPERPARAMETERS if k != "num_layers" and k in setup]
    out = []
    for backend in backends:
        for batch in setup["batches"]:
            for ac in setup.get("activation_checkpointing", ("off", "full")):
                config = {k: setup.get(k) for k in ("model", "num_layers", *shape, "seq_length", "precision")}
                if "label" in setup:
                    config["label"] = setup["label"]
                config.update({"backend": backend, "batch_size": batch, "activation_checkpointing": ac})
                model = setup["model"] if named else None
                out.append((throughput_name(backend, batch, ac, model=model), config))
    return out


def measure_config(
    record: dict[str, Any],
    work: Path,
    setup: dict[str, Any],
    config: dict[str, Any],
    *,
    gpu: GPUSpec | None,
    gpus: int = 1,
    dry_run: bool = False,
    left_s: float | None = None,
    run_unfit: bool = False,
    measured_peaks: dict[str, float] | None = None,
    device_name: str | None = None,
) -> None:
    """One throughput configuration into ``record``: the prediction, then the measurement or why not.

    ``record`` gets ``config``, ``predicted`` (``None`` where ``gpu`` is, with
    ``prediction`` saying why: the configuration is then measured, an
    out-of-memory error caught) and then either ``measured`` (with its
    :func:`mfu_table` against the nominal peak and ``measured_peaks``, the GEMM
    step's) and ``measured_over_predicted``, or ``status`` ``"skipped"``
    (predicted not to fit, unless ``run_unfit`` or ``dry_run``; fewer than
    ``CONFIG_MARGIN_S`` seconds ``left_s``) or ``"out of memory"`` with the
    error's first line.

    Raises:
        ValueError: the planner refuses the configuration (e.g. mxfp8 on Hopper).
        NoCuda: see :func:`measure`.
        AssertionError: a loss that is not finite.
    """
    import torch

    from platform_spec.precisions import get_precision

    batch, ac = config["batch_size"], config["activation_checkpointing"]
    record["config"] = dict(config)
    predicted = prediction(setup, batch, ac, gpu=gpu, gpus=gpus)
    record["predicted"] = predicted
    if predicted is None:
        record["prediction"] = no_prediction_reason(device_name)
    elif not predicted["fits"] and not (dry_run or run_unfit):
        record["status"] = "skipped"
        record["reason"] = (
            f"skipped: predicted {predicted['status']}, {predicted['memory_gb']} GB of {predicted['usable_gb']} GB "
            f"usable on {predicted['gpu']}"
        )
        for key in SPEED_PREDICTIONS:  # not run: no speed as if it had
            predicted.pop(key, None)
        return
    if left_s is not None and left_s < CONFIG_MARGIN_S:
        record["status"] = "skipped"
        record["reason"] = f"skipped: time budget ({max(left_s, 0.0):.0f} s left of --budget-s)"
        return
    out_of_memory = None
    try:
        measured = measure(
            work,
            setup,
            batch,
            ac,
            steps=setup["steps"],
            warmup=setup["warmup"],
            backend=config.get("backend"),
            dry_run=dry_run,
        )
    except torch.OutOfMemoryError as exc:
        out_of_memory = str(exc).splitlines()[0][:300]
    if out_of_memory is not None:
        free_accelerator_memory()  # here, not in the except block: the traceback is gone now
        record["status"] = "out of memory"
        record["error"] = out_of_memory
        return
    measured["mfu_table"] = mfu_table(
        measured["tokens_per_second_per_gpu"],
        measured["flops_per_token"],
        nominal_peak=measured["nominal_peak_tflops"],
        measured_peak=(measured_peaks or {}).get(get_precision(setup["precision"]).dense_peak),
    )
    record["measured"] = measured
    if predicted is None:
        return
    record["measured_over_predicted"] = {
        "tokens_per_second_per_gpu": _ratio(
            measured["tokens_per_second_per_gpu"], predicted.get("tokens_per_second_per_gpu")
        ),
        "tflops_per_gpu": _ratio(measured["tflops_per_gpu"], predicted.get("tflops_per_gpu")),
        "mfu": _ratio(measured["mfu"], predicted.get("mfu")),
        "peak_allocated_gb": _ratio(measured["peak_allocated_gb"], predicted["memory_gb"]),
    }
    if not all(math.isfinite(x) for x in measured["losses"]):
        raise AssertionError(f"non-finite loss: {measured['losses']}")


def throughput(
    results: Results,
    work: Path,
    setup: dict[str, Any],
    *,
    backends: Sequence[str],
    target: Target,
    deadline: float | None,
    dry_run: bool = False,
    named: bool = False,
) -> None:
    """One step per configuration (backend x batch x activation checkpointing), each with the planner's prediction
    for ``target``'s GPU and MFU against its peaks (``named``: see :func:`throughput_configs`)."""
    for name, config in throughput_configs(setup, backends, named=named):
        with results.step(name) as record:
            left = None if deadline is None else deadline - time.monotonic()
            measure_config(
                record,
                work,
                setup,
                config,
                gpu=target.gpu,
                device_name=target.device_name,
                measured_peaks=target.measured_peaks,
                dry_run=dry_run,
                left_s=left,
            )


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return float(f"{measured / predicted:.4g}")  # 4 significant digits


# ---------------------------------------------------------------------------
# step: the Llama family (torch-native blocks)

LLAMA_RESUME = "llama resume"
"""The Llama step's resume check (its step name in ``results.json``)."""


def llama_checks(
    results: Results,
    work: Path,
    *,
    cuda: bool,
    target: Target,
    deadline: float | None,
    dry_run: bool = False,
) -> None:
    """The Llama family on the torch-native path (module docstring, step 4): a DCP save and resume of
    :data:`LLAMA_RESUME_SETUP` that must continue bitwise, then the throughput of :data:`LLAMA_GPU_SETUP`
    (:data:`LLAMA_DRY_SETUP` in the dry run) with the planner's prediction, a custom shape resolved as the
    trainer resolves it. Torch-native blocks only (forced where TransformerEngine imports too), as the
    lent GPU machine, which has no TransformerEngine, runs them."""
    with results.step(LLAMA_RESUME) as record:
        values = {k: LLAMA_RESUME_SETUP[k] for k in ("model", "num_layers", "seq_length", "batch_size")}
        values["precision"] = "bf16" if cuda else "fp32"  # fp32 on the CPU, as the GPT resume (main())
        if dry_run:
            values.update({"seq_length": 64, "batch_size": 2})
        outcome = resume_check(
            work, values, first=LLAMA_RESUME_SETUP["first"], then=LLAMA_RESUME_SETUP["then"], backend="torch"
        )
        record.update(outcome)
        if not outcome["bitwise"]:
            raise AssertionError("the resumed run does not continue bitwise (see continuous / resumed)")
    throughput(
        results,
        work,
        LLAMA_DRY_SETUP if dry_run else LLAMA_GPU_SETUP,
        backends=("torch",),
        target=target,
        deadline=deadline,
        dry_run=dry_run,
        named=True,
    )


# ---------------------------------------------------------------------------
# step: TransformerEngine (only where it imports)


def te_checks(results: Results, work: Path, *, cuda: bool) -> None:
    """The TE checks (module docstring); a skip with the reason when TE cannot run here."""
    from training.model import transformer_engine_available

    if not cuda:  # the dry run (main() ends a GPU run without CUDA before this step)
        results.skip("transformer_engine", SKIPPED_DRY_RUN_TE)
        return
    if not transformer_engine_available():
        results.skip("transformer_engine", SKIPPED_NO_TE)
        return
    with results.step("transformer_engine api") as record:
        record.update(te_api("cuda"))
        if record.get("problems"):
            raise AssertionError("; ".join(record["problems"]))
    with results.step("transformer_engine block vs torch block") as record:
        record.update(te_block_against_torch("cuda"))
        if not record["passed"]:
            raise AssertionError(
                "the TE block is further from the fp32 torch block than twice the torch block's bf16 error"
            )
    import torch

    from platform_spec.precisions import PRECISIONS, SCALED_PRECISIONS, SCALINGS, get_precision, recipe_scalings

    # every TE recipe of the registry this GPU runs (its one hardware rule): fp8 current and delayed on Hopper,
    # mxfp8 and nvfp4 too on Blackwell; first the formats they keep outside their quantized GEMMs (bf16), whose
    # losses theirs are compared with
    capability = tuple(torch.cuda.get_device_capability(0))
    recipes = [(p.name, s) for p in PRECISIONS if p.supported_by(capability) for s in recipe_scalings(p)]
    baselines = list(dict.fromkeys(p.high_precision for p in PRECISIONS if p.uses_te))
    baseline_losses: dict[str, list[float]] = {}
    for precision, scaling in [*((b, SCALINGS[0]) for b in baselines), *recipes]:
        name = (
            f"transformer_engine {precision}"
            + (f" {scaling} scaling" if precision in SCALED_PRECISIONS else "")
            + " + resume"
        )
        with results.step(name) as record:
            values = {
                "model": RESUME_SETUP["model"],
                "seq_length": RESUME_SETUP["seq_length"],
                "batch_size": RESUME_SETUP["batch_size"],
                "precision": precision,
                "fp8_scaling": scaling,
            }
            outcome = resume_check(work, values, first=RESUME_SETUP["first"], then=RESUME_SETUP["then"])
            record.update(outcome)
            losses = outcome["losses_before_save"] + [x[0] for x in outcome["continuous"]]
            baseline = get_precision(precision).high_precision
            if precision in baselines:
                baseline_losses[precision] = losses
            elif baseline in baseline_losses:
                record[f"final_loss_vs_{baseline}"] = _ratio(losses[-1], baseline_losses[baseline][-1])
            if outcome["backend"] != "te" or not all(math.isfinite(x) for x in losses):
                raise AssertionError(f"backend {outcome['backend']}, losses {losses}")
            if not outcome["bitwise"] or not outcome["extra_state_restored"]:
                raise AssertionError("the resumed run does not continue bitwise (see continuous / resumed)")


def te_api(device: str) -> dict[str, Any]:
    """The TE names and arguments the trainer uses, against the installed TE (``problems``: what is missing)."""
    import inspect

    import torch
    import transformer_engine.pytorch as te

    from model_families.gpt import ModelConfig
    from model_families.gpt.te_block import TEBlock
    from training import precision as prec

    problems = []
    block = TEBlock(ModelConfig("t", 1, 256, 4, 512, 256), 1, device=device, params_dtype=torch.float32)  # our kwargs
    names = sorted(n for n, _ in block.named_parameters())
    autocast_params = set(inspect.signature(te.autocast).parameters)
    for needed in ("enabled", "recipe", "amax_reduction_group"):
        if needed not in autocast_params:
            problems.append(f"te.autocast has no {needed!r} parameter")
    if not callable(getattr(te, "checkpoint", None)):
        problems.append("te.checkpoint is missing")
    recipes = {}
    from platform_spec.precisions import PRECISIONS, recipe_scalings

    every_recipe = [(p.name, s) for p in PRECISIONS for s in recipe_scalings(p)]
    for precision, scaling in every_recipe:
        try:
            recipes[f"{precision}/{scaling}"] = type(prec.te_recipe(precision, scaling)).__name__
        except Exception as exc:
            problems.append(f"recipe {precision}/{scaling}: {exc}")
    from training.model import canonical_name

    try:
        for name in names:
            canonical_name(f"layers.0.{name}")
    except KeyError as exc:
        problems.append(str(exc))
    return {
        "parameters": names,
        "recipes": recipes,
        "autocast_parameters": sorted(autocast_params),
        "problems": problems,
    }


def te_block_against_torch(
    device: str, seq: int = 512, batch: int = 2, *, hidden: int = 1024, heads: int = 8
) -> dict[str, Any]:
    """A TE block and the torch block, both bf16 with the same weights, against the torch block in fp32.

    Relative L2 errors of the outputs and the input gradients (causal attention,
    rotary angles); the TE block passes when its errors are at most twice the
    torch block's own bf16 errors (or below 1e-3): bf16 rounding differs between
    kernels, a wrong layout or rotation does not stay within that.
    """
    import torch

    from model_families.gpt import ROPE_BASE, ModelConfig
    from model_families.gpt.te_block import TEBlock
    from model_families.gpt.torch_block import TransformerBlock
    from model_families.rotary import rope_angles
    from training.model import canonical_name

    torch.manual_seed(0)
    config = ModelConfig("t", 1, hidden, heads, 4 * hidden, 256)
    reference = TransformerBlock(config).to(device=device, dtype=torch.float32)
    torch_bf16 = TransformerBlock(config).to(device=device, dtype=torch.bfloat16)
    te_block = TEBlock(config, 1, device=device, params_dtype=torch.bfloat16)
    with torch.no_grad():
        weights = dict(reference.named_parameters())
        for name, param in torch_bf16.named_parameters():
            param.copy_(weights[name])
        for name, param in te_block.named_parameters():
            param.copy_(weights[canonical_name(f"layers.0.{name}").removeprefix("layers.0.")])
    angles = rope_angles(seq, config.head_dim, ROPE_BASE, device)
    x = torch.randn(batch, seq, config.hidden_size, device=device)
    grad = torch.randn_like(x)
    runs = {}
    for label, block, rope, dtype in (
        ("fp32", reference, (angles.cos(), angles.sin()), torch.float32),
        ("torch_bf16", torch_bf16, (angles.cos(), angles.sin()), torch.bfloat16),
        ("te_bf16", te_block, angles.view(seq, 1, 1, -1), torch.bfloat16),
    ):
        inp = x.detach().to(dtype).clone().requires_grad_(True)
        y = block(inp, rope)
        y.backward(grad.to(dtype))
        runs[label] = (y.detach().float(), inp.grad.float())

    def rel(a: Any, b: Any) -> float:
        return float((a - b).norm() / b.norm().clamp_min(1e-12))

    out = {"seq_length": seq, "batch_size": batch, "hidden_size": hidden}
    for label in ("torch_bf16", "te_bf16"):
        out[f"{label}_output_rel_error"] = rel(runs[label][0], runs["fp32"][0])
        out[f"{label}_input_grad_rel_error"] = rel(runs[label][1], runs["fp32"][1])
    out["passed"] = all(
        out[f"te_bf16_{kind}_rel_error"] <= max(2.0 * out[f"torch_bf16_{kind}_rel_error"], 1e-3)
        for kind in ("output", "input_grad")
    )
    return out


# ---------------------------------------------------------------------------
# the report


def report(data: dict[str, Any]) -> str:
    """``results.md``: the environment, the throughput table (measured next to predicted), the other steps."""
    from platform_spec.models import ATTENTION_FLOP_CONVENTIONS

    env = data.get("environment", {})
    lines = [f"# GPU check ({data.get('mode')}, {data.get('status')})", ""]
    lines.append(", ".join(f"{k}: {v}" for k, v in env.items()) or "(environment not recorded)")
    lines += ["", *(f"- {line}" for line in data.get("budget", []))]
    if "predictions_for" in data:
        lines.append(f"- predictions (pred) for one {data['predictions_for']}")
    peaks = data.get("measured_peaks") or {}
    measured = ", ".join(f"{k.removesuffix('_tflops')} {v} TFLOP/s" for k, v in peaks.items()) or "not measured"
    lines += [
        f"- MFU counts model FLOPs per token with {ATTENTION_FLOP_CONVENTIONS[True]}; the `full` columns with "
        f"{ATTENTION_FLOP_CONVENTIONS[False]}",
        "- MFU `nominal`: of the catalogue's dense peak for the precision (platform_spec.catalogue); `GEMM`: of the "
        f"peak measured on this GPU by the `{GEMM_STEP}` step ({measured})",
        "",
        "| model | backend | batch | act. ckpt | tokens/s/GPU (pred) | ratio | TFLOP/s/GPU (pred) | "
        "MFU % nominal (pred) | MFU % GEMM | full: TFLOP/s, MFU % nominal / GEMM | "
        "peak alloc GB (pred) | peak rsvd GB | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(values: dict[str, Any], key: str) -> Any:
        value = values.get(key)
        return "-" if value is None else value

    for name, step in data.get("steps", {}).items():
        if not name.startswith("throughput"):
            continue
        c, p, m = step.get("config", {}), step.get("predicted") or {}, step.get("measured", {})
        r = step.get("measured_over_predicted", {})
        causal, full = (m.get("mfu_table", {}).get(CONVENTIONS[k], {}) for k in (True, False))
        status = step.get("reason") or step.get("error") or step.get("status")
        if step.get("prediction") and status == "passed":
            status = f"passed ({step['prediction']})"
        lines.append(
            f"| {c.get('label') or c.get('model') or '-'} | {m.get('backend') or c.get('backend')} | "
            f"{c.get('batch_size')} | {c.get('activation_checkpointing')} | "
            f"{cell(m, 'tokens_per_second_per_gpu')} ({cell(p, 'tokens_per_second_per_gpu')}) | "
            f"{cell(r, 'tokens_per_second_per_gpu')} | {cell(m, 'tflops_per_gpu')} ({cell(p, 'tflops_per_gpu')}) | "
            f"{cell(m, 'mfu')} ({cell(p, 'mfu')}) | {cell(causal, 'mfu_measured_peak')} | "
            f"{cell(full, 'tflops_per_gpu')}, {cell(full, 'mfu_nominal')} / {cell(full, 'mfu_measured_peak')} | "
            f"{cell(m, 'peak_allocated_gb')} ({cell(p, 'memory_gb')}) | "
            f"{cell(m, 'peak_reserved_gb')} | {status} |"
        )
    lines.append("")
    for name, step in data.get("steps", {}).items():
        if name.startswith("throughput"):
            continue
        status, detail = step.get("status"), step.get("reason") or step.get("error") or ""
        if name == "environment" and status == "passed":
            continue
        extra = f" bitwise={step['bitwise']}" if "bitwise" in step else ""
        if name == GEMM_STEP and step.get("peaks"):
            nominal = step.get("nominal") or {}
            extra = " " + ", ".join(
                f"{k.removesuffix('_tflops')} {v} TFLOP/s"
                + (f" ({_ratio(v, nominal[k])} of nominal {nominal[k]})" if k in nominal else "")
                for k, v in step["peaks"].items()
            )
            if step.get("fp8"):
                extra += f"; fp8 {step['fp8']}"
        text = detail if detail.startswith(f"{status}:") else f"{status}{extra} {detail}".rstrip()
        lines.append(f"- {name}: {text}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# the budget, printed before the run


def planned_seconds(skip: set[str], *, te: bool, dry_run: bool) -> dict[str, float]:
    """The estimated seconds of each step that will run (:data:`STEP_ESTIMATES_S`, one H100): ``skip``'s steps
    left out, the TE checks and TE throughput rows only where ``te``; ``{}`` in the dry run (no GPU to time)."""
    if dry_run:
        return {}
    est = STEP_ESTIMATES_S
    out = {"environment": est["environment"], GEMM_STEP: est[GEMM_STEP]}
    if "resume" not in skip:
        out["resume"] = est["resume"]
    if te and "te" not in skip:
        out["transformer_engine"] = est["transformer_engine"]
    if "llama" not in skip:
        out["llama"] = est["llama"]
    if "throughput" not in skip:
        rows = len(throughput_configs(GPU_SETUP, ("torch", "te") if te else ("torch",)))
        out[f"throughput ({rows} configurations)"] = rows * est["throughput (per configuration)"]
    return out


def budget_lines(budget_s: float | None, time_limit_s: str | None, planned: dict[str, float]) -> list[str]:
    """The budget printed before the run and kept in ``results.json``: the wrapper's limit
    (``GPU_CHECK_TIMEOUT_S``, ``None`` when run directly), the measuring budget (``--budget-s``), the steps'
    estimates and their sum, and what the budget leaves out when the sum exceeds it."""
    lines = []
    if time_limit_s:
        lines.append(
            f"time limit: {time_limit_s} s (GPU_CHECK_TIMEOUT_S; SIGKILL 15 s later); one device call: "
            f'run(command="benchmarks/gpu_check.sh", timeout_s={DEVICE_CALL_S}) with the start-up'
        )
    lines.append(
        "measuring budget: "
        + (f"{budget_s:.0f} s (--budget-s)" if budget_s is not None else "none (--budget-s not given)")
        + f"; a throughput configuration starts only with {CONFIG_MARGIN_S:.0f} s of it left"
    )
    if planned:
        total = sum(planned.values())
        steps = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in planned.items())
        lines.append(f"expected on one H100 80 GB (estimates, not yet measured): {steps}; total {total:.0f} s")
        if budget_s is not None and total > budget_s:
            lines.append(
                f"the estimates exceed the budget by {total - budget_s:.0f} s: the last throughput configurations "
                "will be skipped (the TE rows first, as they run last)"
            )
    return lines


# ---------------------------------------------------------------------------
# main

STEPS = ("resume", "te", "llama", "throughput")
"""What ``--skip`` may name."""


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected seconds (a number > 0)") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected seconds (a number > 0)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or Path(tempfile.gettempdir()) / "gpu-check"),
        help="folder for results.json and results.md (default: $OUT)",
    )
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU with a tiny model")
    parser.add_argument(
        "--budget-s",
        type=_budget,
        default=None,
        help="seconds from the start after which no further throughput configuration starts "
        "(gpu_check.sh: its time limit less 30 s; default here: no limit)",
    )
    parser.add_argument("--skip", default="", help=f"comma-separated steps to leave out: {', '.join(STEPS)}")
    return parser


def _skip_without_cuda(results: Results, skip: set[str]) -> None:
    """A GPU run on a host without usable CUDA: every step after ``environment`` is recorded as not run."""
    results.skip(GEMM_STEP, SKIPPED_NO_CUDA)
    if "resume" not in skip:
        results.skip("resume", SKIPPED_NO_CUDA)
    if "te" not in skip:
        results.skip("transformer_engine", SKIPPED_NO_CUDA)
    if "llama" not in skip:
        results.skip(LLAMA_RESUME, SKIPPED_NO_CUDA)
        for name, config in throughput_configs(LLAMA_GPU_SETUP, ("torch",), named=True):
            results.skip(name, SKIPPED_NO_CUDA, config=config)
    if "throughput" not in skip:
        for name, config in throughput_configs(GPU_SETUP, ("torch",)):
            results.skip(name, SKIPPED_NO_CUDA, config=config)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(STEPS):
        print(f"gpu_check: --skip {args.skip!r}: expected names from {', '.join(STEPS)}", file=sys.stderr)
        return 2
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path even where a GPU exists (before CUDA is touched)
    deadline = None if args.budget_s is None else time.monotonic() + args.budget_s
    results = Results(args.out, mode="dry-run" if args.dry_run else "gpu", argv=sys.argv[1:] if argv is None else argv)
    results.data["budget_s"] = args.budget_s
    results.data["time_limit_s"] = os.environ.get("GPU_CHECK_TIMEOUT_S")  # gpu_check.sh exports its limit
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    import torch.distributed as dist

    group_before = dist.is_available() and dist.is_initialized()  # a caller's group is left alone
    _install_cut_off()
    try:
        with results.step("environment") as record:
            env = environment(args.dry_run)
            results.data["environment"] = env
            record.update(env)
            if not args.dry_run and not env["cuda_available"]:
                raise NoCuda(
                    f"{NO_CUDA} ({env.get('cuda_error')}): nothing is trained on the CPU; "
                    "--dry-run checks the steps there with a tiny model"
                )
        env = results.data.get("environment", {})
        cuda = not args.dry_run and bool(env.get("cuda_available"))
        if not args.dry_run and not cuda:  # the environment step failed: the run ends here
            _skip_without_cuda(results, skip)
            return 1
        from training.model import transformer_engine_available

        te = cuda and transformer_engine_available()
        planned = planned_seconds(skip, te=te, dry_run=args.dry_run)
        results.data["budget"] = budget_lines(args.budget_s, results.data["time_limit_s"], planned)
        results.write()
        print("\n".join(results.data["budget"]), flush=True)
        device_name = env.get("gpu") if cuda else None
        gpu = prediction_gpu(device_name, dry_run=args.dry_run)
        results.data["predictions_for"] = gpu.name if gpu else no_prediction_reason(device_name)
        measured_peaks = gemm_step(results, cuda=cuda)
        target = Target(gpu=gpu, device_name=device_name, measured_peaks=measured_peaks)
        if "resume" not in skip:
            with results.step("resume") as record:
                values = {k: RESUME_SETUP[k] for k in ("model", "seq_length", "batch_size")}
                values["precision"] = "bf16"
                if args.dry_run:  # fp32: bf16 matmuls are slow on most CPUs, and the property is the same
                    values.update({"seq_length": 64, "batch_size": 2, "num_layers": 2, "precision": "fp32"})
                record.update(resume_check(work, values, first=RESUME_SETUP["first"], then=RESUME_SETUP["then"]))
                if not record["bitwise"]:
                    raise AssertionError("the resumed run does not continue bitwise (see continuous / resumed)")
        if "te" not in skip:
            te_checks(results, work, cuda=cuda)
        if "llama" not in skip:
            llama_checks(results, work, cuda=cuda, target=target, deadline=deadline, dry_run=args.dry_run)
        if "throughput" not in skip:
            backends = ("torch", "te") if cuda and env.get("transformer_engine") else ("torch",)
            throughput(
                results,
                work,
                DRY_SETUP if args.dry_run else GPU_SETUP,
                backends=backends,
                target=target,
                deadline=deadline,
                dry_run=args.dry_run,
            )
    except CutOff as exc:
        print(f"gpu_check: {exc}; results so far in {args.out / RESULTS}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        results.finish()
        with contextlib.suppress(Exception):
            if not group_before and dist.is_initialized():  # the trainers' group, made by this run
                dist.destroy_process_group()
        print(report(results.data))
        print(f"results: {args.out / RESULTS} and {args.out / REPORT}")
    return 1 if results.failed or results.cut_off else 0


if __name__ == "__main__":
    sys.exit(main())
