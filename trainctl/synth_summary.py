"""What ``trainctl synth-summary`` reports: the CDK app synthesized, cdk-nag and cfn-lint run, summarized.

:func:`summarize` synthesizes the app in-process into a cloud assembly folder
(or reads an existing cloud assembly) with the default environment ``cdk synth`` would
give it (:func:`trainctl.cdk_context.synth_environment`: the region from
``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile, else us-east-1), so it
refuses what ``npx cdk synth`` refuses; then reports, per stack: resources by type,
outputs (intrinsics written ``<LogicalId>``, ``<LogicalId.Attr>`` by
:func:`platform_constructs.intrinsics.render`, anything else as compact JSON); for the app: cdk-nag ``AwsSolutions`` findings (from CDK's
``validation-report.json``; acknowledged ones from the construct metadata,
with their reasons) and cfn-lint results for every template.

:func:`render` prints it; :func:`summarize_and_print` is the command: exit
status 0 when there is no unacknowledged cdk-nag finding and no cfn-lint
error; 1 otherwise; 2 when the configuration is invalid or there is no
assembly to read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_constructs import intrinsics
from trainctl.cdk_context import CdkEnvironmentError, synth_environment

if TYPE_CHECKING:
    from rich.console import Console

NAG_PLUGIN = "AwsSolutions"
ACKNOWLEDGED_METADATA = "aws:cdk:acknowledged-rules"
DEFAULT_LINT_REGION = "us-east-1"


@dataclass(frozen=True)
class Finding:
    """One validation finding (a cdk-nag rule or another plugin's rule) not acknowledged."""

    plugin: str
    rule_id: str
    severity: str
    description: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Acknowledgement:
    """An acknowledged rule: the construct path it applies to (and below), the rule, the reason."""

    path: str
    rule_id: str
    reason: str


@dataclass(frozen=True)
class LintResult:
    """One cfn-lint match."""

    template: str
    rule_id: str
    severity: str  # "error", "warning" or "informational"
    message: str
    line: int


@dataclass
class StackSummary:
    name: str
    template: Path
    resource_counts: Counter[str]
    outputs: dict[str, tuple[str, str]]  # output id -> (description, value rendered)

    @property
    def resource_total(self) -> int:
        return sum(self.resource_counts.values())


@dataclass
class SynthSummary:
    """What ``summarize`` found. ``ok`` is the verdict the exit status follows."""

    assembly: Path
    stacks: list[StackSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    acknowledgements: list[Acknowledgement] = field(default_factory=list)
    lint: list[LintResult] = field(default_factory=list)

    @property
    def nag_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.plugin == NAG_PLUGIN]

    @property
    def lint_errors(self) -> list[LintResult]:
        return [m for m in self.lint if m.severity == "error"]

    @property
    def resource_counts(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for stack in self.stacks:
            total.update(stack.resource_counts)
        return total

    @property
    def ok(self) -> bool:
        return not self.findings and not self.lint_errors


def summarize(
    out: str | Path = "cdk.out",
    *,
    synthesize: bool = True,
    context: dict[str, Any] | None = None,
    lint: bool = True,
    environ: Mapping[str, str] | None = None,
) -> SynthSummary:
    """Synthesize (unless ``synthesize=False``) into ``out`` and collect the summary.

    Args:
        out: cloud assembly directory (written when synthesizing, read otherwise).
        synthesize: build the app in-process with cdk-nag registered; otherwise
            read an assembly that ``cdk synth`` already wrote.
        context: context overrides on top of ``cdk.json`` (synthesis only).
        lint: run cfn-lint on every template.
        environ: the app's environment variables (account and region: ``CDK_DEFAULT_*``).
            Default: this process's, as the CDK CLI would hand them to the app
            (:func:`trainctl.cdk_context.synth_environment`).

    Raises:
        stacks.config.ConfigError: a context value is invalid (synthesis only).
        trainctl.cdk_context.CdkEnvironmentError: the AWS config files cannot be read (synthesis only).
        FileNotFoundError: ``out`` holds no cloud assembly (``manifest.json``).
    """
    assembly = Path(out).resolve()
    if synthesize:
        _synthesize(assembly, context, synth_environment() if environ is None else environ)
    manifest_path = assembly / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(
            f"{manifest_path} not found: expected a cloud assembly (run `cdk synth` or drop --no-synth)"
        )
    manifest = json.loads(manifest_path.read_text())

    summary = SynthSummary(assembly=assembly)
    for artifact_id, artifact in manifest.get("artifacts", {}).items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template_path = assembly / artifact["properties"]["templateFile"]
        template = json.loads(template_path.read_text())
        counts = Counter(resource["Type"] for resource in template.get("Resources", {}).values())
        outputs = {
            name: (
                output.get("Description", ""),
                intrinsics.render(output.get("Value"), fallback=intrinsics.compact_json),
            )
            for name, output in template.get("Outputs", {}).items()
        }
        summary.stacks.append(StackSummary(artifact_id, template_path, counts, outputs))
        summary.acknowledgements.extend(_acknowledgements(assembly, artifact))
        if lint:
            region = _region(artifact.get("environment", ""))
            summary.lint.extend(lint_template(template_path, region))
    summary.findings = _validation_findings(assembly)
    return summary


def _synthesize(assembly: Path, context: dict[str, Any] | None, environ: Mapping[str, str]) -> None:
    from stacks.platform_app import create_app

    app, _ = create_app(context=context, outdir=assembly, nag=True, environ=environ, stack_traces=False)
    stale = assembly / "validation-report.json"
    if stale.exists():
        stale.unlink()
    try:
        app.synth()
    except RuntimeError as exc:
        # Validation plugins (cdk-nag) report through validation-report.json; anything else is a real failure.
        if "ValidationFailed" not in str(exc) or not stale.exists():
            raise


def _validation_findings(assembly: Path) -> list[Finding]:
    report_path = assembly / "validation-report.json"
    if not report_path.is_file():
        return []
    report = json.loads(report_path.read_text())
    findings = []
    for plugin in report.get("pluginReports", []):
        for violation in plugin.get("violations", []):
            paths = tuple(
                c.get("constructPath") or c.get("resourceLogicalId", "?")
                for c in violation.get("violatingConstructs", violation.get("violatingResources", []))
            )
            findings.append(
                Finding(
                    plugin=plugin.get("pluginName", "?"),
                    rule_id=violation.get("ruleName", "?"),
                    severity=violation.get("severity", "error"),
                    description=violation.get("description", ""),
                    paths=paths,
                )
            )
    return findings


def _acknowledgements(assembly: Path, artifact: dict[str, Any]) -> list[Acknowledgement]:
    metadata: dict[str, list[dict[str, Any]]] = dict(artifact.get("metadata", {}))
    extra = artifact.get("additionalMetadataFile")
    if extra and (assembly / extra).is_file():
        metadata.update(json.loads((assembly / extra).read_text()))
    found = []
    for path, entries in metadata.items():
        for entry in entries:
            if entry.get("type") != ACKNOWLEDGED_METADATA:
                continue
            for rule, reason in entry.get("data", {}).items():
                rule_id = rule.split("::", 1)[1] if rule.startswith("Annotation::") else rule
                found.append(Acknowledgement(path=path, rule_id=rule_id, reason=reason))
    return sorted(set(found), key=lambda a: (a.path, a.rule_id))


def lint_template(template: Path, region: str = DEFAULT_LINT_REGION) -> list[LintResult]:
    """cfn-lint (Python API) on one template for ``region``."""
    from cfnlint.api import lint_file
    from cfnlint.config import ManualArgs

    matches = lint_file(Path(template), config=ManualArgs(regions=[region]))
    return [
        LintResult(
            template=Path(template).name,
            rule_id=match.rule.id,
            severity=str(match.rule.severity).lower(),
            message=match.message,
            line=match.linenumber,
        )
        for match in matches
    ]


def _region(environment: str) -> str:
    # "aws://<account>/<region>", with "unknown-account"/"unknown-region" when agnostic
    region = environment.rsplit("/", 1)[-1] if environment else ""
    return region if region and not region.startswith("unknown") else DEFAULT_LINT_REGION


def render(summary: SynthSummary, console: Console | None = None) -> None:
    """Print the summary with rich. Names, reasons and messages from the assembly are printed as they are
    (``rich.text.Text``): never read as markup or emoji codes."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    for stack in summary.stacks:
        table = Table(title=Text(f"{stack.name}: {stack.resource_total} resources"), title_justify="left")
        table.add_column("Resource type")
        table.add_column("Count", justify="right")
        for resource_type, count in sorted(stack.resource_counts.items()):
            table.add_row(Text(resource_type), str(count))
        console.print(table)

        outputs = Table(title=Text(f"{stack.name}: outputs"), title_justify="left")
        outputs.add_column("Output")
        outputs.add_column("Value")
        outputs.add_column("Description")
        for name, (description, value) in stack.outputs.items():
            outputs.add_row(Text(name), Text(value), Text(description))
        console.print(outputs)

    nag = summary.nag_findings
    other = [f for f in summary.findings if f.plugin != NAG_PLUGIN]
    style = "green" if not nag else "red"
    console.print(Text.assemble((f"cdk-nag {NAG_PLUGIN}", "bold"), ": ", (f"{len(nag)} unacknowledged", style),
                                f", {len(summary.acknowledgements)} acknowledged"))  # fmt: skip
    for finding in summary.findings:
        console.print(Text.assemble("  ", (finding.severity.upper(), "red"),
                                    f" {finding.plugin} {finding.rule_id}: {finding.description}"))  # fmt: skip
        for path in finding.paths:
            console.print(Text(f"      at {path}"))
    grouped: dict[tuple[str, str], list[str]] = {}
    for ack in summary.acknowledgements:
        grouped.setdefault((ack.path, ack.reason), []).append(ack.rule_id)
    for (path, reason), rule_ids in grouped.items():
        console.print(
            Text.assemble("  ", (path.lstrip("/"), "dim"), ": ", (", ".join(rule_ids), "cyan")), overflow="fold"
        )
        console.print(Text(f"      {reason}"))
    if other:
        console.print(Text(f"{len(other)} finding(s) from other validation plugins", "red"))

    errors = summary.lint_errors
    warnings = [m for m in summary.lint if m.severity == "warning"]
    style = "green" if not errors else "red"
    console.print(
        Text.assemble(("cfn-lint", "bold"), ": ", (f"{len(errors)} errors", style), f", {len(warnings)} warnings")
    )
    for match in summary.lint:
        colour = "red" if match.severity == "error" else "yellow"
        console.print(Text.assemble("  ", (match.rule_id, colour), f" {match.template}:{match.line} {match.message}"))
    verdict = Text("OK", "green") if summary.ok else Text("FAILED", "red")
    console.print(Text.assemble(("Synth checks", "bold"), ": ", verdict, f" (assembly: {summary.assembly})"))


def summarize_and_print(
    out: str | Path = "cdk.out", *, synthesize: bool = True, context: dict[str, Any] | None = None
) -> int:
    """``trainctl synth-summary``: :func:`summarize` then :func:`render`; returns the exit status (module docstring)."""
    from rich.console import Console
    from rich.markup import escape

    from stacks.config import ConfigError

    console = Console()
    try:
        summary = summarize(out, synthesize=synthesize, context=context)
    except (ConfigError, CdkEnvironmentError) as exc:
        console.print(f"[red]configuration error:[/red] {escape(str(exc))}")
        return 2
    except FileNotFoundError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        return 2
    render(summary, console)
    return 0 if summary.ok else 1


__all__ = [
    "Acknowledgement",
    "Finding",
    "LintResult",
    "StackSummary",
    "SynthSummary",
    "lint_template",
    "render",
    "summarize",
    "summarize_and_print",
]
