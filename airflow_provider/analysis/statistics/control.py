"""The control group of a fleet's canary (Kayenta's canary versus baseline): the canary's statistical checks judged
against the deployments not rolled out yet, measured over the same window as the canary, in the same round, instead
of against what the canary's own deployment did before the rollout.

A rate measured at the same time on the control group cancels what changes for every deployment at once (the hour
of the day, a load spike, an upstream model that got worse): a before/after comparison counts it against the new
revision. The members' normal rates differ, so they are not pooled as one sample: each member's runs are weighed by
its own pre-rollout rate relative to the group's (``weighted_runs``), each member's scores are taken against its own
pre-rollout mean (``shift_sum``), and the canary's own level relative to the group is the test's nuisance (see
:class:`~airflow_provider.analysis.statistics.sequential_judge.SequentialJudge`). Which checks (:func:`pooled_checks`):
a :class:`TracingProjectCheck` with a :class:`~airflow_provider.analysis.rate_test.RateTest`, and a ``feedback.<key>``
on the baseline (``">= baseline - 0.05"``). Every other check keeps the canary's own preflight baseline.

Pure: no I/O, no Airflow. :mod:`~airflow_provider.analysis.measuring.run` measures the group each round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider.analysis.baseline import BaselineCondition
from airflow_provider.analysis.definitions import Analysis, AnalysisTarget, Measurement, TracingProjectCheck
from airflow_provider.analysis.metric_conditions import feedback_key
from airflow_provider.analysis.reading import Reading
from airflow_provider.analysis.statistics.sequential_judge import member_baseline

__all__ = ["CONTROL_GROUP_LIMIT", "MEMBER_SHRINK", "control_members", "member_weights", "pool", "pooled_checks"]

CONTROL_GROUP_LIMIT = 20
"""Most deployments in a control group (the first not rolled out yet, by the plan's order): each is one tracing
statistics request per check and round."""
MEMBER_SHRINK = 2.0
"""Pseudo-errors a member's pre-rollout rate is shrunk toward the group's by (a member with few runs weighs as an
average one)."""


def pooled_checks(analysis: Analysis) -> list[TracingProjectCheck]:
    """The checks of ``analysis`` a control group is measured for: a tracing ``error_rate`` with a rate test, and a
    ``feedback.<key>`` with a condition on the baseline.

    :param analysis: the analysis.
    """
    return [
        check
        for check in analysis.checks
        if isinstance(check, TracingProjectCheck)
        and (
            check.rate_test is not None
            or (feedback_key(check.metric) is not None and isinstance(check.parsed_condition, BaselineCondition))
        )
    ]


def control_members(target: AnalysisTarget) -> list[AnalysisTarget]:
    """The control group of ``target`` as targets to measure: each serving revision, over ``target``'s window (from
    its ``live_since``), in the role of a baseline (measured, never judged).

    :param target: a canary deployment's revision, with its ``control``.
    """
    return [
        AnalysisTarget(
            deployment_id=member["deployment_id"],
            name=member["name"],
            revision_id=member["revision_id"],
            live_since=target.live_since,
            role="baseline",
        )
        for member in target.control or []
    ]


def member_weights(members: Sequence[Mapping[str, Any]], label: str) -> tuple[float | None, dict[str, float]]:
    """The group's pre-rollout error rate and each member's rate relative to it (shrunk toward 1 by
    :data:`MEMBER_SHRINK` pseudo-errors; 1 for a member measured without runs), from the members' preflight
    baselines of check ``label``; ``(None, {})`` when no member was measured.

    :param members: the target's ``control`` entries.
    :param label: the check's label.
    """
    measured = {member["deployment_id"]: member_baseline(member, label) for member in members}
    runs = sum(int(base.get("runs") or 0) for base in measured.values() if base is not None)
    errors = sum(int(base.get("errors") or 0) for base in measured.values() if base is not None)
    if runs <= 0:
        return None, {}
    group = (errors + 0.5) / (runs + 1.0)
    weights = {}
    for deployment_id, base in measured.items():
        if base is None:
            weights[deployment_id] = 1.0
            continue
        expected = int(base.get("runs") or 0) * group
        weights[deployment_id] = (int(base.get("errors") or 0) + MEMBER_SHRINK) / (expected + MEMBER_SHRINK)
    return group, weights


def pool(
    check: TracingProjectCheck,
    target: AnalysisTarget,
    readings: Sequence[tuple[Mapping[str, Any], Reading]],
    round_number: int,
    at: datetime,
) -> tuple[Measurement, dict[str, Any] | None]:
    """The control group's measurement of ``check`` in this round (for the log and the record) and its counts (the
    canary's measurement's ``control``, what the test reads): the members measured with runs count, the others are
    left out and named; none with runs gives no counts (the canary's check is then inconclusive, never passed).

    :param check: a check of :func:`pooled_checks`.
    :param target: the canary deployment judged.
    :param readings: ``(member, reading)`` of each member (a ``control`` entry of ``target``).
    :param round_number: the round.
    :param at: when it was measured.
    """
    label = check.label()
    usable = [
        (member, reading)
        for member, reading in readings
        if reading.value is not None
        and reading.runs
        and (feedback_key(check.metric) is not None or reading.errors is not None)
    ]
    runs = sum(reading.runs or 0 for _member, reading in usable)
    counts: dict[str, Any] | None = None
    value: float | None = None
    if usable and feedback_key(check.metric) is None:
        _group, weights = member_weights(target.control or [], label)
        errors = sum(reading.errors or 0 for _member, reading in usable)
        weighted = sum(weights.get(member["deployment_id"], 1.0) * (reading.runs or 0) for member, reading in usable)
        counts = {"runs": runs, "errors": errors, "weighted_runs": round(weighted, 6)}
        value = errors / runs
    elif usable:
        total = sum((reading.value or 0.0) * (reading.runs or 0) for _member, reading in usable)
        value = total / runs
        shifted = [
            (reading, member_baseline(member, label))
            for member, reading in usable
            if member_baseline(member, label) is not None
        ]
        scored = sum(reading.runs or 0 for reading, _base in shifted)
        shift = sum(
            (reading.runs or 0) * ((reading.value or 0.0) - float((base or {}).get("value") or 0.0))
            for reading, base in shifted
        )
        counts = {"scored": scored, "shift_sum": round(shift, 9), "value": value} if scored else None
    left_out = [member["name"] for member, reading in readings if (member, reading) not in usable]
    detail = (
        f"control group of {target.name!r}: {len(usable)} of {len(readings)} deployment(s) not rolled out yet, "
        f"{runs} {'scored ' if feedback_key(check.metric) else ''}runs since {target.live_since.strftime('%H:%M:%S')}"
        + (f" ({counts['errors']} errors)" if counts is not None and "errors" in counts else "")
        + (
            f"; left out (no runs to compare): {', '.join(left_out[:5])}{' ...' if len(left_out) > 5 else ''}"
            if left_out
            else ""
        )
    )
    measurement = Measurement(
        round=round_number,
        check=label,
        deployment_id=target.deployment_id,
        name=f"control group of {target.name}",
        at=at.isoformat(),
        value=value,
        condition="the control group (each member against its own pre-rollout level)",
        verdict="passed" if counts is not None else "inconclusive",
        detail=detail,
    )
    if counts is not None:
        measurement["runs"] = runs
        measurement["control"] = counts
    return measurement, counts
