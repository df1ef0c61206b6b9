"""Job submitter benchmark: cold-start proxy, warm latency against the emulator, package size.

Run: ``.venv/bin/python benchmarks/submitter.py [--repeats 15] [--requests 200] [--json OUT]``

1. **Package size**: the Lambda package built exactly as the construct builds
   it (``platform_constructs.submitter.bundling.SUBMITTER.build``: pinned
   pure-Python requirements for arm64 / CPython 3.13 + the modules the handler
   imports, under their import names), unzipped and zipped (deflate),
   with the largest top-level folders; Lambda's limits are 250 MB unzipped and
   50 MB zipped for a direct upload.
2. **Import time** of the handler module (cold-start proxy) in a fresh
   interpreter with only the package and the standard library on the path
   (``python -S``), against ``import boto3`` alone under the same conditions
   (the floor any boto3 function pays). Medians of interleaved runs; ratio =
   handler / boto3.
3. **Warm latency** of :func:`submit` in-process against ``trainctl
   local-aws`` over HTTP on 127.0.0.1 (clients reused, like a warm function):
   ``dry_run`` (SSM list cached, DescribeTrainingPlan x plans, planner) and
   real submissions (DescribeTrainingJob miss + DescribeTrainingPlan x plans +
   CreateTrainingJob), p50 / p99, against one ``DescribeTrainingPlan`` round
   trip (the baseline: one AWS call to the same emulator) and the planner's
   ``estimate`` alone.

Figures depend on the machine; compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HANDLER_MODULE = "platform_constructs.submitter.runtime.handler"
"""The module Lambda imports (``bundling.SUBMITTER.handlers``), as the package lays it out."""

PLANS = [
    {"TrainingPlanName": "bench-active", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
     "TotalInstanceCount": 4, "StartTime": "now-1d", "EndTime": "now+13d"},
    {"TrainingPlanName": "bench-expired", "Status": "Expired", "InstanceType": "ml.p6-b200.48xlarge",
     "TotalInstanceCount": 4, "AvailableInstanceCount": 0, "StartTime": "now-15d", "EndTime": "now-1d"},
]  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def build_bundle(target: Path) -> str:
    """Build the function package into ``target``; returns how."""
    from platform_constructs.submitter import bundling

    bundling.SUBMITTER.build(target)
    return "platform_constructs.submitter.bundling.SUBMITTER.build (as the construct)"


def package_size(bundle: Path) -> dict[str, Any]:
    unzipped, files = _tree_size(bundle)
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "package.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(bundle.rglob("*")):
                if path.is_file():
                    zf.write(path, path.relative_to(bundle).as_posix())
        zipped = archive.stat().st_size
    top = sorted(
        ((p.name, _tree_size(p)[0]) for p in bundle.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")),
        key=lambda item: -item[1],
    )[:6]
    ours = sum(_tree_size(bundle / d)[0] for d in ("runtime", "training", "planner") if (bundle / d).exists())
    return {
        "unzipped_mb": round(unzipped / 1e6, 2),
        "zipped_mb": round(zipped / 1e6, 2),
        "files": files,
        "own_code_kb": round(ours / 1e3, 1),
        "largest_mb": {name: round(size / 1e6, 2) for name, size in top},
        "lambda_limits_mb": {"unzipped": 250, "zipped_direct_upload": 50},
        "has_torch": (bundle / "torch").exists(),
        "has_sagemaker_sdk": (bundle / "sagemaker").exists(),
    }


def import_times(bundle: Path, repeats: int) -> dict[str, Any]:
    """Fresh-interpreter import of the handler module vs boto3, interleaved, package + stdlib only.

    Measured twice: without bytecode (what the construct's package gives a cold
    Lambda: pip ``--no-compile`` and a read-only file system, so every cold start
    compiles) and with ``.pyc`` files written by a first run (what a package
    precompiled for the runtime's Python would give).
    """
    code = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"

    def once(module: str, *, bytecode: bool) -> float:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(bundle)}
        if not bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        out = subprocess.run(
            [sys.executable, "-S", "-c", code.format(module=module)],
            env=env,
            cwd=bundle,
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout.strip())

    results: dict[str, Any] = {"repeats": repeats}
    for label, bytecode in (("no_pyc", False), ("with_pyc", True)):
        if bytecode:  # write the caches once
            once(HANDLER_MODULE, bytecode=True)
        handler, boto3 = [], []
        for _ in range(repeats):
            handler.append(once(HANDLER_MODULE, bytecode=bytecode))
            boto3.append(once("boto3", bytecode=bytecode))
        h, b = statistics.median(handler), statistics.median(boto3)
        results[label] = {
            "handler_import_ms_median": round(h * 1e3, 1),
            "boto3_import_ms_median": round(b * 1e3, 1),
            "ratio_handler_to_boto3": round(h / b, 2),
        }
    results["note"] = "fresh `python -S` per run with only the package dir (and the stdlib) on sys.path"
    return results


def warm_latency(requests: int) -> dict[str, Any]:
    import logging

    from planner import PlanInput, estimate
    from platform_constructs.submitter.runtime import aws as aws_mod
    from platform_constructs.submitter.runtime import config as config_mod
    from platform_constructs.submitter.runtime import service
    from platform_spec.hyperparameters import parse
    from trainctl.local_aws import LocalAws

    logging.getLogger("job-submitter").setLevel(logging.WARNING)  # keep log formatting out of the figures
    request = {
        "instance_type": "ml.p6-b200.48xlarge",
        "hyperparameters": {
            "model": "gpt-1b",
            "precision": "mxfp8",
            "num_layers": 10,
            "batch_size": 8,
            "seq_length": 2048,
        },
        "inputs": {"train": "datasets/guide/train/"},
    }
    out: dict[str, Any] = {}
    with LocalAws(plans=PLANS) as aws:
        clients = aws_mod.Clients.create(environ=aws.env)
        config = config_mod.SubmitterConfig.from_environ(aws.env)
        sm = clients.sagemaker

        def timed(fn, n: int) -> list[float]:
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t)
            return samples

        for _ in range(10):  # warm-up: connections, caches, lazy imports
            service.submit(
                {**request, "dry_run": True, "client_token": uuid.uuid4().hex}, clients=clients, config=config
            )
            sm.describe_training_plan(TrainingPlanName="bench-active")

        baseline = timed(lambda: sm.describe_training_plan(TrainingPlanName="bench-active"), requests)
        pi = PlanInput.from_hyperparameters(parse(request["hyperparameters"]), instance_type="ml.p6-b200.48xlarge")
        planner_only = timed(lambda: estimate(pi), requests)
        dry = timed(
            lambda: service.submit(
                {**request, "dry_run": True, "client_token": uuid.uuid4().hex}, clients=clients, config=config
            ),
            requests,
        )
        real: list[float] = []
        for _ in range(max(10, requests // 2)):
            event = {**request, "client_token": uuid.uuid4().hex}
            t = time.perf_counter()
            response = service.submit(event, clients=clients, config=config)
            real.append(time.perf_counter() - t)
            assert response["status"] == "submitted", response
            aws.complete_active_jobs()  # free the plan's instance (outside the timed region)

    def summary(samples: list[float]) -> dict[str, float]:
        return {
            "p50_ms": round(_percentile(samples, 50) * 1e3, 2),
            "p99_ms": round(_percentile(samples, 99) * 1e3, 2),
            "n": len(samples),
        }

    out["baseline_describe_training_plan"] = summary(baseline)
    out["planner_estimate_only"] = summary(planner_only)
    out["dry_run_submission"] = summary(dry)
    out["real_submission_on_plan"] = summary(real)
    base = _percentile(baseline, 50)
    out["ratio_p50_dry_run_to_one_call"] = round(_percentile(dry, 50) / base, 2)
    out["ratio_p50_real_to_one_call"] = round(_percentile(real, 50) / base, 2)
    return out


def run(repeats: int = 15, requests: int = 200) -> dict[str, Any]:
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="submitter-bundle-") as tmp:
        bundle = Path(tmp) / "package"
        bundle.mkdir()
        results["package_built_with"] = build_bundle(bundle)
        results["package"] = package_size(bundle)
        results["import"] = import_times(bundle, repeats)
    results["warm_latency"] = warm_latency(requests)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="fresh-interpreter imports of each module")
    parser.add_argument("--requests", type=int, default=200, help="warm submissions per kind")
    parser.add_argument("--json", metavar="OUT", help="also write the figures here")
    args = parser.parse_args(argv)
    results = run(args.repeats, args.requests)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
