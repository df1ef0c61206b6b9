"""Job submitter benchmark: cold-start proxy, warm latency against the emulator, package size.

Run: ``.venv/bin/python benchmarks/submitter.py [--repeats 15] [--requests 200] [--json OUT]``

1. **Package size**: the Lambda package built exactly as the construct builds
   it (``platform_constructs.submitter.bundling.SUBMITTER.build``: pinned
   pure-Python requirements for arm64 / CPython 3.13 + the package's declared
   roots, under their import names, with their bytecode), unzipped and
   zipped (deflate), with the largest top-level folders; Lambda's limits are
   250 MB unzipped and 50 MB zipped for a direct upload.
2. **Import time** of the handler module (cold-start proxy) against ``import
   boto3``, with the package's bytecode and without: the rows of
   ``benchmarks/startup.py`` (one home for how it is measured: fresh ``python
   -S`` of the bundle's CPython 3.13, interleaved pairs, median ratio).
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
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import startup  # noqa: E402  (benchmarks/startup.py: the import-time rows)

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
    from platform_constructs.submitter import bundling

    tops = {name.partition("/")[0] for _, name in bundling.SUBMITTER.sources()}
    ours = sum(_tree_size(bundle / d)[0] for d in tops if (bundle / d).exists())
    return {
        "unzipped_mb": round(unzipped / 1e6, 2),
        "zipped_mb": round(zipped / 1e6, 2),
        "files": files,
        "own_code_kb": round(ours / 1e3, 1),
        "largest_mb": {name: round(size / 1e6, 2) for name, size in top},
        "lambda_limits_mb": {"unzipped": 250, "zipped_direct_upload": 50},
        "pyc_files": sum(1 for _ in bundle.rglob("*.pyc")),
        "has_torch": (bundle / "torch").exists(),
        "has_sagemaker_sdk": (bundle / "sagemaker").exists(),
    }


def warm_latency(requests: int) -> dict[str, Any]:
    import logging

    from devtools.local_aws.client import LocalAws
    from planner import PlanInput, estimate
    from platform_constructs.submitter.runtime import aws as aws_mod
    from platform_constructs.submitter.runtime import config as config_mod
    from platform_constructs.submitter.runtime import service
    from platform_spec.hyperparameters import parse

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
        interpreter, package, source_only, note = startup.build_packages(Path(tmp))
        results["package_built_with"] = "platform_constructs.submitter.bundling.SUBMITTER.build (as the construct)"
        results["package"] = package_size(package)
        rows = startup.submitter_rows(interpreter, package, source_only, note)
        startup.measure(rows, repeats)
        results["import"] = [row.summary() for row, _, _ in rows]
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
