"""Start-up where people wait, each as a ratio to a baseline measured side by side in the same run.

Run: ``.venv/bin/python benchmarks/startup.py [--repeats 21] [--json OUT]`` (``make bench``).

| row | subject | baseline | target |
|---|---|---|---|
| submitter cold import | ``import platform_constructs.submitter.runtime.handler`` | ``import boto3`` | <= 1.1 |
| the submitter's init in Lambda | the same import as Lambda runs it: clients and configuration made | ``import boto3`` and its three clients | - |
| the reader's init in Lambda | the same, ``SUBMITTER_ALLOWED_ACTIONS=describe,list,list_runs`` | ``import boto3`` and its three clients | - |
| trainctl --help | ``trainctl --help`` (wall time) | ``python -c pass`` | - |

and, without a target, the submitter's import without bytecode (the package as
it would ship without ``.pyc`` files), which explains the first row.

**Submitter.** The handler imports what every action needs and, in a function
that answers submissions, a submission's own modules (``.service``: request
parsing, capacity, the job's parameters, the planner), in Lambda's init phase
(``handler.preload_submissions``); the reader, deployed with
``SUBMITTER_ALLOWED_ACTIONS=describe,list,list_runs``, never imports them. The
first row is the submitting function's import (its target: against
``import boto3``). In Lambda (``AWS_LAMBDA_FUNCTION_NAME`` and the role's keys
set) the import also makes the botocore clients and reads the configuration
(``handler.prepare_dependencies``): the second and third rows are that import
for the submitting function and for the reader, each against ``import boto3``
with the same three clients (``sagemaker``, ``ssm``, ``s3``), no network
involved: the function's own part of the init phase (the runtime's start is
left out, as below). Each row checks, inside the timed process, that the
import did what its name says (``handler.SUBMISSIONS_PRELOADED``,
``handler.DEPENDENCIES_PREPARED``: :func:`handler_import`); a row whose
import skipped that work fails instead of timing less.
The package is built exactly as the construct builds it
(``platform_constructs.submitter.bundling.SUBMITTER.build``: the pinned
requirements for arm64 / CPython 3.13 with their bytecode, and the package's
declared roots with theirs). Each import runs in a fresh ``python -S``
(no site-packages: only the package and the standard library) of the
bundle's bytecode compiler, a CPython 3.13 like Lambda's ``python3.13``
runtime, and is timed inside that process (``time.perf_counter`` around the
``import``), so the interpreter's own start-up, equal for both, is left out.
Without a 3.13 interpreter on this machine the package carries no bytecode;
this benchmark then compiles a copy with the local interpreter and says so
(a proxy: other version, same mechanism).

**trainctl.** Wall time of the whole process (what a person waits for), the
console script next to this interpreter against the same interpreter's
``python -c pass`` (which pays the same ``site`` start-up, the editable
install's finder included). Bytecode is allowed (``PYTHONDONTWRITEBYTECODE``
is removed from the children's environment) and one warm-up run writes it,
as a user's first run would. ``--help`` imports no command module (the
registry imports a command when it runs); it reads the installed entry points
of the group ``trainctl.commands``. No target: tens of milliseconds are below
what a person notices (as for ``trainctl plan``, whose target was withdrawn).

**Noise.** The machine is shared. Every repeat runs the subject and its
baseline back to back, in alternating order; the ratio reported is the
median of the per-repeat ratios (each pair saw the same load), with the 10th
to 90th percentile of those ratios as the spread, next to each side's median.

**Memory curve (modelled).** Lambda gives a function CPU in proportion to its
memory: "At 1,769 MB, a function has the equivalent of one vCPU" (AWS Lambda
Developer Guide, "Configure Lambda function memory"). No Lambda is reachable
here and this machine has no cgroup CPU controller to throttle a process
honestly, so the curve is a model, labelled as such: an import is one
CPU-bound thread, so its duration at memory M is the one-core time measured
here times ``max(1, 1769 / M)`` (more than one vCPU does not speed up one
thread). It scales this machine's core, not Graviton's. The handler is
imported in Lambda's init phase, and "On-demand Lambda functions use a full
vCPU (non-throttled) [...] during its initialization phase"; with provisioned
concurrency "there is no cpu burst" (AWS, serverlessland.com, "Effectively
running Java on Serverless", "Utilize initialization phase"; no Lambda
reference page states it). So an on-demand function's init (its import in
Lambda, clients made: the two init rows) is the one-core time at every memory
size, and the curve is what provisioned concurrency pays (and what the same
work inside an invocation would): which is why a submitting function imports
a submission's modules, and makes its clients, at init rather than in its
first request.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HANDLER_MODULE = "platform_constructs.submitter.runtime.handler"
"""The module Lambda imports (``bundling.SUBMITTER.handlers``), as the package lays it out."""
INIT_ROW = "the submitter's init in Lambda"
"""The row of the handler imported as Lambda imports it: clients and configuration made (:func:`lambda_environ`)."""
BOTO3_CLIENTS = "boto3; [boto3.client(s) for s in ('sagemaker', 'ssm', 's3')]"
"""The init rows' baseline, after ``import``: boto3 and the submitter's three clients."""
READER_ROW = "the reader's init in Lambda"
"""The row of :data:`HANDLER_MODULE` imported as Lambda imports the reader function (:func:`reader_environ`)."""


def handler_import(*, preloaded: bool, prepared: bool) -> str:
    """What a row times after ``import``: :data:`HANDLER_MODULE`, then an ``assert`` that its import did what the
    row says (``handler.SUBMISSIONS_PRELOADED``, ``handler.DEPENDENCIES_PREPARED``), so a row whose environment
    let the import skip that work (a swallowed failure at init, say) fails rather than time less."""
    flags = f"({HANDLER_MODULE}.SUBMISSIONS_PRELOADED, {HANDLER_MODULE}.DEPENDENCIES_PREPARED)"
    return f"{HANDLER_MODULE}; assert {flags} == {(preloaded, prepared)!r}, {flags}"


ONE_VCPU_MB = 1769
"""Function memory with the equivalent of one vCPU (AWS Lambda Developer Guide, "Configure Lambda function memory")."""
MEMORY_CURVE_MB = (128, 256, 512, 1024, ONE_VCPU_MB, 3008)
"""Memory sizes of the modelled curve, MB (Lambda accepts 128 to 10,240)."""

TARGETS = {"submitter cold import": 1.1}
"""The ratio each row must stay under."""


@dataclasses.dataclass
class Row:
    """One subject against its baseline: seconds per repeat, paired."""

    name: str
    subject: str
    baseline: str
    subject_s: list[float] = dataclasses.field(default_factory=list)
    baseline_s: list[float] = dataclasses.field(default_factory=list)
    note: str = ""

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.name)

    def ratios(self) -> list[float]:
        return [s / b for s, b in zip(self.subject_s, self.baseline_s, strict=True)]

    def summary(self) -> dict[str, Any]:
        ratios = sorted(self.ratios())
        ratio = statistics.median(ratios)
        target = self.target
        return {
            "name": self.name,
            "subject": self.subject,
            "baseline": self.baseline,
            "subject_ms_median": round(statistics.median(self.subject_s) * 1e3, 1),
            "baseline_ms_median": round(statistics.median(self.baseline_s) * 1e3, 1),
            "ratio_median": round(ratio, 3),
            "ratio_p10_p90": [round(_quantile(ratios, 0.1), 3), round(_quantile(ratios, 0.9), 3)],
            "repeats": len(ratios),
            "target": target,
            "met": None if target is None else ratio <= target,
            "note": self.note,
        }


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def measure(rows: Sequence[tuple[Row, Callable[[], float], Callable[[], float]]], repeats: int) -> None:
    """Run each row's subject and baseline ``repeats`` times, back to back, alternating which goes first."""
    for i in range(repeats):
        for row, subject, baseline in rows:
            if i % 2:
                row.subject_s.append(subject())
                row.baseline_s.append(baseline())
            else:
                row.baseline_s.append(baseline())
                row.subject_s.append(subject())


# -- the submitter ----------------------------------------------------------------------------------------------


def build_packages(workdir: Path) -> tuple[str, Path, Path, str]:
    """The submitter's package as the construct builds it, and a copy without bytecode.

    Returns:
        (interpreter, package, source-only copy, note): the interpreter to import them with (the bundle's
        bytecode compiler, else this one with a proxy copy compiled by it).
    """
    from platform_constructs.submitter import bundling

    package = workdir / "package"
    bundling.SUBMITTER.build(package)
    source_only = workdir / "source-only"
    shutil.copytree(package, source_only, ignore=shutil.ignore_patterns("__pycache__"))
    compiler = bundling.bytecode_compiler()
    if compiler is not None:
        return compiler.executable, package, source_only, f"CPython {bundling.PYTHON_VERSION} ({compiler.executable})"
    proxy = bundling.BytecodeCompiler(sys.executable, sys.implementation.cache_tag, "")
    proxy.compile(package)
    return (
        sys.executable,
        package,
        source_only,
        f"PROXY: no CPython {bundling.PYTHON_VERSION} here; compiled and imported with {sys.version.split()[0]}",
    )


def reader_environ() -> dict[str, str]:
    """The environment setting that makes a function the reader (``JobSubmitter.grant_read``'s function)."""
    from platform_constructs.submitter.runtime import settings
    from platform_constructs.submitter.runtime.actions import READ_ACTIONS

    return {settings.ENV_ALLOWED_ACTIONS: ",".join(READ_ACTIONS)}


def lambda_environ() -> dict[str, str]:
    """A Lambda function's environment for the handler's import, with no AWS reachable or needed: what Lambda
    sets (its function name, region, credentials) and the function's settings (``settings.function_environment``
    with placeholder resources)."""
    from platform_constructs.submitter.runtime import handler, settings
    from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE

    return {
        handler.LAMBDA_FUNCTION_ENV: "job-submitter",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "benchmark",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        **settings.function_environment(
            trainer_image_uris={"amd64": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:bench"},
            execution_role_arn="arn:aws:iam::123456789012:role/bench",
            data_bucket="bench-data",
            checkpoint_bucket="bench-checkpoints",
            output_bucket="bench-output",
            output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
            plan_arns_parameter="/bench/plans",
            account_id="123456789012",
            default_instance_type=DEFAULT_INSTANCE_TYPE,
            allowed_instance_types=(),
            capacity_fallback=("training-plan", "on-demand"),
        ),
    }


def timed_import(interpreter: str, package: Path, module: str, environ: Mapping[str, str] | None = None) -> float:
    """Seconds ``import module`` takes in a fresh ``python -S`` with only ``package`` (and the standard library)
    on ``sys.path``, writing no bytecode, with ``environ`` added to its environment. ``module`` may carry
    statements after it (``"boto3; boto3.client('s3')"``), timed with it."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(package), "PYTHONDONTWRITEBYTECODE": "1"}
    env.update(environ or {})
    out = subprocess.run(
        [interpreter, "-S", "-c", code], env=env, cwd=package, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def submitter_rows(interpreter: str, package: Path, source_only: Path, note: str) -> list[tuple[Row, Any, Any]]:
    submitting = handler_import(preloaded=True, prepared=False)
    with_pyc = Row(
        "submitter cold import",
        HANDLER_MODULE,
        "import boto3",
        note=note + "; with the shipped .pyc; the function answering submissions, which imports their modules at init",
    )
    without = Row(
        "submitter cold import, source only",
        HANDLER_MODULE,
        "import boto3",
        note="both without .pyc: the package before it shipped bytecode (Lambda cannot write a cache)",
    )
    in_lambda = lambda_environ()
    reader = {**in_lambda, **reader_environ()}
    reader_row = Row(
        READER_ROW,
        " ".join([*(f"{k}={v}" for k, v in reader_environ().items()), HANDLER_MODULE, "in Lambda"]),
        f"import {BOTO3_CLIENTS}",
        note="no target: with the shipped .pyc; the reader answers no submission and never imports their modules; "
        "as Lambda runs it, making the botocore clients and reading the configuration",
    )
    init = Row(
        INIT_ROW,
        f"{HANDLER_MODULE} in Lambda",
        f"import {BOTO3_CLIENTS}",
        note="no target: with the shipped .pyc; the import as Lambda runs it, making the botocore clients and "
        "reading the configuration, against boto3 making the same three clients (no network either side)",
    )
    return [
        (
            with_pyc,
            lambda: timed_import(interpreter, package, submitting),
            lambda: timed_import(interpreter, package, "boto3"),
        ),
        (
            init,
            lambda: timed_import(interpreter, package, handler_import(preloaded=True, prepared=True), in_lambda),
            lambda: timed_import(interpreter, package, BOTO3_CLIENTS, in_lambda),
        ),
        (
            reader_row,
            lambda: timed_import(interpreter, package, handler_import(preloaded=False, prepared=True), reader),
            lambda: timed_import(interpreter, package, BOTO3_CLIENTS, in_lambda),
        ),
        (
            without,
            lambda: timed_import(interpreter, source_only, submitting),
            lambda: timed_import(interpreter, source_only, "boto3"),
        ),
    ]


def configured_memory_mb() -> int:
    """The submitter's memory size: ``JobSubmitterProps.memory_size``'s default."""
    from platform_constructs.submitter.construct import JobSubmitterProps

    memory = next(f.default for f in dataclasses.fields(JobSubmitterProps) if f.name == "memory_size")
    assert isinstance(memory, int), memory
    return memory


def init_curve(rows: Mapping[str, Row], configured_mb: int) -> dict[str, Any]:
    """The memory curve of both functions' init as Lambda runs it (:data:`INIT_ROW`, :data:`READER_ROW`: the
    handler's import making the clients and reading the configuration), from each row's median one-core time."""
    one_core = statistics.median(rows[INIT_ROW].subject_s)
    reader = statistics.median(rows[READER_ROW].subject_s)
    return {
        "one_core_ms": round(one_core * 1e3, 1),
        "reader_one_core_ms": round(reader * 1e3, 1),
        "points": memory_curve(one_core, configured_mb, reader),
        "modelled": True,
    }


def memory_curve(one_core_s: float, configured_mb: int, reader_one_core_s: float | None = None) -> list[dict[str, Any]]:
    """Modelled init duration per memory size at the proportional CPU share: what provisioned concurrency
    pays (an on-demand function initialises on a full vCPU: the one-core time at every size; module docstring).

    Args:
        one_core_s: the submitting function's init (its import in Lambda) on one core of this machine, seconds.
        configured_mb: the function's configured memory (marked).
        reader_one_core_s: the reader's init on one core, seconds; when given, each point also has
            ``modelled_reader_import_ms``.

    Returns:
        One point per memory size: ``memory_mb``, ``vcpu_share``, ``modelled_import_ms`` (and
        ``modelled_reader_import_ms``), ``configured``.
    """
    sizes = sorted({*MEMORY_CURVE_MB, configured_mb})
    points = []
    for mb in sizes:
        slowdown = max(1.0, ONE_VCPU_MB / mb)
        point: dict[str, Any] = {
            "memory_mb": mb,
            "vcpu_share": round(mb / ONE_VCPU_MB, 3),
            "modelled_import_ms": round(one_core_s * slowdown * 1e3, 1),
        }
        if reader_one_core_s is not None:
            point["modelled_reader_import_ms"] = round(reader_one_core_s * slowdown * 1e3, 1)
        point["configured"] = mb == configured_mb
        points.append(point)
    return points


# -- trainctl ---------------------------------------------------------------------------------------------------


def _trainctl() -> list[str]:
    script = Path(sys.executable).parent / "trainctl"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trainctl.cli"]


def _wall(command: Sequence[str], env: Mapping[str, str]) -> float:
    import time

    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def trainctl_rows() -> list[tuple[Row, Any, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command, baseline = [*_trainctl(), "--help"], [sys.executable, "-c", "pass"]
    subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, check=True)  # warm-up: writes bytecode
    row = Row("trainctl --help", "trainctl --help", "python -c pass")
    return [(row, lambda: _wall(command, env), lambda: _wall(baseline, env))]


# -- report -----------------------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| measurement | subject | baseline | subject ms | baseline ms | ratio (p10-p90) | target | met |",
        "|---|---|---|---:|---:|---|---:|---|",
    ]
    for r in results["rows"]:
        low, high = r["ratio_p10_p90"]
        target = "-" if r["target"] is None else f"<= {r['target']}"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| {r['name']} | `{r['subject']}` | `{r['baseline']}` | {r['subject_ms_median']} | "
            f"{r['baseline_ms_median']} | {r['ratio_median']:.2f} ({low:.2f}-{high:.2f}) | {target} | {met} |"
        )
    lines += ["", "Notes:"] + [f"- {r['name']}: {r['note']}" for r in results["rows"] if r["note"]]
    curve = results.get("memory_curve")
    if curve:
        reader = "reader_one_core_ms" in curve
        lines += [
            "",
            "The submitter's init in Lambda (its import, clients made) against function memory (MODELLED). An "
            f"on-demand function initialises on a full vCPU: its init is the one-core time at every size, "
            f"{curve['one_core_ms']} ms here"
            + (f" ({curve['reader_one_core_ms']} ms for the reader)" if reader else "")
            + ". With provisioned concurrency init gets the proportional share (1,769 MB = 1 vCPU):",
            "",
            "| memory MB | vCPU share | modelled init ms |" + (" the reader's ms |" if reader else "") + " |",
            "|---:|---:|---:|" + ("---:|" if reader else "") + "---|",
        ]
        for point in curve["points"]:
            mark = "configured (JobSubmitterProps.memory_size)" if point["configured"] else ""
            also = f" {point['modelled_reader_import_ms']} |" if reader else ""
            lines.append(
                f"| {point['memory_mb']} | {point['vcpu_share']} | {point['modelled_import_ms']} |{also} {mark} |"
            )
    lines += ["", f"{results['repeats']} repeats, interleaved; python {results['python']}, {results['cpus']} CPUs."]
    return "\n".join(lines)


def run(repeats: int = 21, *, submitter: bool = True, cli: bool = True) -> dict[str, Any]:
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "repeats": repeats}
    rows: list[tuple[Row, Any, Any]] = []
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        if submitter:
            interpreter, package, source_only, note = build_packages(Path(tmp))
            for module in (HANDLER_MODULE, "boto3"):  # warm-up: the page cache
                timed_import(interpreter, package, module)
            rows += submitter_rows(interpreter, package, source_only, note)
        if cli:
            rows += trainctl_rows()
        measure(rows, repeats)
    results["rows"] = [row.summary() for row, _, _ in rows]
    if submitter:
        results["memory_curve"] = init_curve({row.name: row for row, _, _ in rows}, configured_memory_mb())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21, help="pairs of runs per row (default: %(default)s)")
    parser.add_argument("--only", choices=("submitter", "trainctl"), help="measure one group of rows")
    parser.add_argument("--json", metavar="OUT", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error(f"--repeats: got {args.repeats}; expected 3 or more (a median of fewer is noise)")
    results = run(args.repeats, submitter=args.only in (None, "submitter"), cli=args.only in (None, "trainctl"))
    print(markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
