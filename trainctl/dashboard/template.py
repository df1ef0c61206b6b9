"""Reading the dashboard and the alarms out of a synthesized template.

* :func:`dashboard_bodies`: every dashboard's body as plain JSON, CloudFormation
  intrinsics inside it rendered readably (:func:`render_intrinsic`):
  ``${LogicalId}`` for a ``Ref``, ``${LogicalId.Attr}`` for a ``Fn::GetAtt``,
  ``${AWS::Region}`` for a pseudo parameter, and an alarm's ARN as
  ``arn:aws:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:<AlarmName>``;
* :func:`alarm_summaries`: every alarm: name, metric or expression, threshold, actions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platform_constructs import intrinsics

_COMPARISONS = {
    "GreaterThanOrEqualToThreshold": ">=",
    "GreaterThanThreshold": ">",
    "LessThanThreshold": "<",
    "LessThanOrEqualToThreshold": "<=",
}


@dataclass(frozen=True)
class AlarmSummary:
    """One alarm as deployed.

    Attributes:
        name: ``AlarmName``.
        kind: ``metric``, ``math`` or ``composite``.
        watches: the metric (``namespace name{dims} statistic/period``), the math
            expression with its inputs, or the composite rule with alarm names.
        threshold: e.g. ``>= 1 for 2 of 3 x 300 s (missing data: notBreaching)``; for a composite, the rule.
        actions: ``ALARM -> <topic>`` / ``OK -> <topic>`` entries.
        description: ``AlarmDescription``.
    """

    name: str
    kind: str
    watches: str
    threshold: str
    actions: tuple[str, ...]
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "watches": self.watches,
            "threshold": self.threshold,
            "actions": list(self.actions),
            "description": self.description,
        }


def render_intrinsic(value: Any, names: Mapping[str, str] | None = None) -> str:
    """A CloudFormation value as readable text (see the module docstring), by
    :func:`platform_constructs.intrinsics.render` in ``Fn::Sub`` notation.

    Args:
        value: a template value: a string, a number, ``Ref``, ``Fn::GetAtt``, ``Fn::Join`` or ``Fn::Sub``.
        names: alarm logical ID -> ``AlarmName``; ``Fn::GetAtt [id, Arn]`` of such an
            alarm renders as its ARN. Default: no alarm is known by name.

    Raises:
        ValueError: another intrinsic (e.g. ``Fn::If``), which the deployed value depends on.
    """
    names = dict(names or {})

    def alarm_arn(logical_id: str, attribute: str) -> str | None:
        if attribute == "Arn" and logical_id in names:
            return f"arn:aws:cloudwatch:${{AWS::Region}}:${{AWS::AccountId}}:alarm:{names[logical_id]}"
        return None

    return intrinsics.render(value, notation=intrinsics.SUB, get_att=alarm_arn, functions=intrinsics.BASIC_FUNCTIONS)


def _alarm_names(template: Mapping[str, Any]) -> dict[str, str]:
    return {
        logical_id: resource["Properties"]["AlarmName"]
        for logical_id, resource in template.get("Resources", {}).items()
        if resource["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        and isinstance(resource["Properties"].get("AlarmName"), str)
    }


def dashboard_bodies(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every dashboard of ``template`` as ``{logical id: body (plain JSON)}``.

    Raises:
        ValueError: a body does not render to JSON.
    """
    names = _alarm_names(template)
    bodies = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource["Type"] != "AWS::CloudWatch::Dashboard":
            continue
        text = render_intrinsic(resource["Properties"]["DashboardBody"], names)
        try:
            bodies[logical_id] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"dashboard {logical_id}: the rendered body is not JSON ({exc})") from None
    return bodies


def _metric_text(props: Mapping[str, Any], names: Mapping[str, str]) -> str:
    dims = ",".join(f"{d['Name']}={render_intrinsic(d['Value'], names)}" for d in props.get("Dimensions", []))
    stat = props.get("Statistic") or props.get("ExtendedStatistic") or props.get("Stat")
    return f"{props['Namespace']} {props['MetricName']}{{{dims}}} {stat}/{props['Period']}s"


def alarm_summaries(template: Mapping[str, Any]) -> list[AlarmSummary]:
    """Every alarm and composite alarm of ``template``, in template order."""
    names = _alarm_names(template)
    resources = template.get("Resources", {})

    def actions(props: Mapping[str, Any]) -> tuple[str, ...]:
        out = []
        for key, state in (
            ("AlarmActions", "ALARM"),
            ("OKActions", "OK"),
            ("InsufficientDataActions", "INSUFFICIENT_DATA"),
        ):
            for action in props.get(key, []):
                target = action.get("Ref") if isinstance(action, dict) else None
                if target in resources and resources[target]["Type"] == "AWS::SNS::Topic":
                    display = resources[target].get("Properties", {}).get("DisplayName")
                    label = f"SNS topic '{display}'" if isinstance(display, str) else f"SNS topic {target}"
                else:
                    label = render_intrinsic(action, names)
                out.append(f"{state} -> {label}")
        return tuple(out)

    found = []
    for logical_id, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::CompositeAlarm":
            rule = render_intrinsic(props["AlarmRule"], names)
            rule = re.sub(r'"arn:aws:cloudwatch:\$\{AWS::Region\}:\$\{AWS::AccountId\}:alarm:([^"]+)"', r"\1", rule)
            found.append(
                AlarmSummary(
                    name=props.get("AlarmName", logical_id),
                    kind="composite",
                    watches=rule,
                    threshold="ALARM while the rule holds",
                    actions=actions(props),
                    description=props.get("AlarmDescription", ""),
                )
            )
            continue
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        if "Metrics" in props:
            expression = next(q for q in props["Metrics"] if "Expression" in q)
            inputs = [
                f"{q['Id']} = {_metric_text({**q['MetricStat']['Metric'], 'Statistic': q['MetricStat']['Stat'], 'Period': q['MetricStat']['Period']}, names)}"
                for q in props["Metrics"]
                if "MetricStat" in q
            ]
            kind, watches = "math", f"{expression['Expression']} where " + "; ".join(inputs)
            period = expression.get("Period") or props["Metrics"][-1].get("MetricStat", {}).get("Period")
        else:
            kind, watches, period = "metric", _metric_text(props, names), props.get("Period")
        evaluations = props["EvaluationPeriods"]
        datapoints = props.get("DatapointsToAlarm", evaluations)
        threshold = (
            f"{_COMPARISONS.get(props['ComparisonOperator'], props['ComparisonOperator'])} {props['Threshold']:g} "
            f"for {datapoints} of {evaluations} x {period} s (missing data: {props.get('TreatMissingData', 'missing')})"
        )
        found.append(
            AlarmSummary(
                name=props.get("AlarmName", logical_id),
                kind=kind,
                watches=watches,
                threshold=threshold,
                actions=actions(props),
                description=props.get("AlarmDescription", ""),
            )
        )
    return found


__all__ = ["AlarmSummary", "alarm_summaries", "dashboard_bodies", "render_intrinsic"]
