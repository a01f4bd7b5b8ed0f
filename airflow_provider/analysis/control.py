"""The control group of a fleet's canary (Kayenta's canary versus baseline): the canary's rate checks judged against
the pooled statistics of deployments not rolled out yet, measured over the same window as the canary, in the same
round, instead of against what the canary's own deployment did before the rollout.

A rate measured at the same time on the control group cancels what changes for every deployment at once (the hour
of the day, a load spike, an upstream model that got worse): a before/after comparison counts it against the new
revision. Which checks are pooled (:func:`pooled_checks`): a :class:`TracingProjectCheck` judged against the
baseline (a baseline condition or a :class:`~airflow_provider.analysis.rate_test.RateTest`) of ``error_rate``
(errors and runs summed) or of a ``feedback.<key>`` (the mean score weighted by the scored runs). Every other check
keeps the preflight's baseline.

Pure: no I/O, no Airflow. :mod:`~airflow_provider.analysis.run` measures the group each round.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow_provider.analysis.definitions import Analysis, AnalysisTarget, Measurement, TracingProjectCheck
from airflow_provider.analysis.metric_conditions import feedback_key
from airflow_provider.analysis.reading import Reading

__all__ = ["CONTROL_GROUP_LIMIT", "control_members", "pool", "pooled_checks", "with_pooled_baseline"]

CONTROL_GROUP_LIMIT = 20
"""Most deployments in a control group (the first not rolled out yet, by the plan's order): each is one tracing
statistics request per check and round."""


def pooled_checks(analysis: Analysis) -> list[TracingProjectCheck]:
    """The checks of ``analysis`` a control group is measured for: tracing checks judged against the baseline, of
    ``error_rate`` or a ``feedback.<key>``.

    :param analysis: the analysis.
    """
    return [
        check
        for check in analysis.checks
        if isinstance(check, TracingProjectCheck)
        and check.uses_baseline
        and (check.metric == "error_rate" or feedback_key(check.metric) is not None)
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


def pool(
    check: TracingProjectCheck,
    target: AnalysisTarget,
    readings: Sequence[tuple[str, Reading]],
    round_number: int,
    at: datetime,
) -> Measurement:
    """The control group's pooled measurement of ``check`` (as the baseline of ``target`` in this round): the
    members measured with runs count, the others are left out and named; no member with runs gives no value (the
    canary's check is then inconclusive, never passed).

    :param check: a check of :func:`pooled_checks`.
    :param target: the canary deployment judged.
    :param readings: ``(member name, reading)`` of each member.
    :param round_number: the round.
    :param at: when it was measured.
    """
    usable = [
        (name, reading)
        for name, reading in readings
        if reading.verdict != "inconclusive" and reading.value is not None and reading.runs
    ]
    runs = sum(reading.runs or 0 for _name, reading in usable)
    errors: int | None = None
    value: float | None = None
    if runs and check.metric == "error_rate":
        errors = sum(
            reading.errors if reading.errors is not None else round((reading.value or 0.0) * (reading.runs or 0))
            for _name, reading in usable
        )
        value = errors / runs
    elif runs:
        value = sum((reading.value or 0.0) * (reading.runs or 0) for _name, reading in usable) / runs
    left_out = [name for name, reading in readings if (name, reading) not in usable]
    detail = (
        f"control group of {target.name!r}: {len(usable)} of {len(readings)} deployment(s) not rolled out yet, "
        f"{runs} runs since {target.live_since.strftime('%H:%M:%S')}"
        + (f" ({errors} errors)" if errors is not None else "")
        + (
            f"; left out (no runs to pool): {', '.join(left_out[:5])}{' ...' if len(left_out) > 5 else ''}"
            if left_out
            else ""
        )
    )
    measurement = Measurement(
        round=round_number,
        check=check.label(),
        deployment_id=target.deployment_id,
        name=f"control group of {target.name}",
        at=at.isoformat(),
        value=value,
        condition="the control group (pooled)",
        verdict="passed" if value is not None else "inconclusive",
        detail=detail,
    )
    if value is not None:
        measurement["runs"] = runs
        if errors is not None:
            measurement["errors"] = errors
    return measurement


def with_pooled_baseline(target: AnalysisTarget, pooled: Sequence[Measurement]) -> AnalysisTarget:
    """``target`` with ``pooled`` as the baseline of their checks (its preflight's baseline of the other checks
    kept), for one round.

    :param target: the canary deployment judged.
    :param pooled: the control group's measurements of this round.
    """
    labels = {measurement["check"] for measurement in pooled}
    kept: list[dict[str, Any]] = [taken for taken in target.baseline or [] if taken.get("check") not in labels]
    return target.model_copy(update={"baseline": [*kept, *(dict(measurement) for measurement in pooled)]})
