"""What one measurement found (:class:`Reading`), and how a measured value is judged: by a fixed condition, by a
condition on the baseline (made from the preflight's measurement of the same check), by a
:class:`~airflow_provider.analysis.rate_test.RateTest` of the error counts, or as a feedback key's mean score.

Pure: no I/O, no Airflow. The sources (:mod:`~airflow_provider.analysis.sources`) measure, these judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider.analysis.baseline import BaselineCondition
from airflow_provider.analysis.conditions import Condition
from airflow_provider.analysis.definitions import AnalysisTarget, MetricQueryCheck, TracingProjectCheck, Verdict

__all__ = ["Reading", "against", "feedback_reading", "judged", "rate_tested"]


@dataclass(frozen=True)
class Reading:
    """What one measurement found.

    :param verdict: ``passed``, ``failed`` or ``inconclusive``.
    :param value: the measured number, if any.
    :param detail: one line for people (scrubbed).
    :param runs: the runs a tracing measurement is over (a feedback key's: the scored runs).
    :param errors: the errors among them (an error rate's).
    :param bound: the line the value was judged against when the baseline made it (in the condition's unit): a
        baseline condition's threshold for this baseline, a rate test's tolerated rate (the baseline's rate times
        ``1 + tolerated_increase``); ``None`` for a fixed threshold (the condition says it) or no baseline.
    """

    verdict: Verdict
    value: float | None
    detail: str
    runs: int | None = None
    errors: int | None = None
    bound: float | None = None


def judged(condition: Condition, value: float, describe: Callable[[str], str]) -> Reading:
    """Judge ``value`` (in the metric's own unit) by ``condition``, in the condition's unit; ``NaN`` and ``±Inf``
    are no data. ``describe`` turns the value as shown into the detail (``"value 0.270"``)."""
    if math.isnan(value):
        return Reading("inconclusive", None, f"{describe('NaN')} (no data to divide)")
    if math.isinf(value):
        return Reading(
            "inconclusive", None, f"{describe('+Inf' if value > 0 else '-Inf')} (no data: not a finite number)"
        )
    measured = condition.in_unit(value)
    return Reading("passed" if condition.holds(measured) else "failed", measured, describe(condition.show(measured)))


def against(
    check: TracingProjectCheck | MetricQueryCheck,
    target: AnalysisTarget,
    value: float,
    describe: Callable[[str], str],
) -> Reading:
    """Judge ``value`` by ``check``'s condition; a condition on the baseline is made from the target's baseline
    (the preflight's measurement of the same check), measured only when the target is the baseline itself, and
    inconclusive when no baseline was measured (never passed unjudged)."""
    condition = check.parsed_condition
    if not isinstance(condition, BaselineCondition):
        return judged(condition, value, describe)
    if target.role == "baseline":
        return judged(condition.measuring(), value, lambda shown: f"{describe(shown)} (the baseline)")
    base = target.baseline_of(check.label())
    if base is None:
        return Reading("inconclusive", None, f"{_no_baseline(target, check.label())}, so {condition} cannot be judged")
    resolved = condition.resolve(float(base["value"]))
    reading = judged(
        resolved,
        value,
        lambda shown: f"{describe(shown)}; baseline {resolved.show(float(base['value']))}, so {resolved}",
    )
    return replace(reading, bound=resolved.threshold)


def rate_tested(
    check: TracingProjectCheck, target: AnalysisTarget, stats: dict[str, Any], run_count: int, runs: str
) -> Reading:
    """The reading of an ``error_rate`` check judged by its :class:`RateTest` against the baseline's counts."""
    assert check.rate_test is not None
    rate = stats.get("error_rate")
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not math.isfinite(rate):
        return Reading("inconclusive", None, f"no error_rate yet ({runs})")
    counted = stats.get("error_count")
    errors = int(counted) if isinstance(counted, int) and not isinstance(counted, bool) else round(rate * run_count)
    shown = f"error_rate {rate:.4g} ({errors} of {runs})"
    if target.role == "baseline":
        return Reading("passed", float(rate), f"{shown} (the baseline)", run_count, errors)
    base = target.baseline_of(check.label())
    base_runs, base_errors = (base or {}).get("runs"), (base or {}).get("errors")
    if not isinstance(base_runs, int) or not isinstance(base_errors, int):
        return Reading(
            "inconclusive",
            float(rate),
            f"{shown}: {_no_baseline(target, check.label(), 'baseline run counts')}",
            run_count,
            errors,
        )
    tested = check.rate_test.judge(base_errors, base_runs, errors, run_count, check.min_run_count)
    verdict: Verdict = "failed" if tested.verdict == "failed" else "passed"
    if tested.verdict == "inconclusive":
        verdict = "inconclusive"
    tolerated = base_errors / base_runs * (1.0 + check.rate_test.tolerated_increase) if base_runs > 0 else None
    return Reading(verdict, float(rate), f"{shown}: {tested.detail}", run_count, errors, tolerated)


def _no_baseline(target: AnalysisTarget, label: str, what: str = "baseline") -> str:
    """Why ``target`` has no ``what`` of check ``label``: none was measured before the rollout, or (with a control
    group) none of the group's deployments had runs over the same window."""
    if target.control is not None:
        return (
            f"the control group (deployments not rolled out yet) gave no {what} of check {label!r} over the same window"
        )
    return f"no {what} of check {label!r} was measured before the rollout"


def _number(value: Any) -> float | None:
    """``value`` when it is a finite number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def feedback_reading(
    check: TracingProjectCheck, target: AnalysisTarget, key: str, feedback: Any, project: str, runs: str
) -> Reading:
    """The reading of a ``feedback.<key>`` check from a ``feedback_stats`` object: the mean score ``avg`` over ``n``
    scored runs; fewer than ``min_run_count`` scored runs, or none, is inconclusive."""
    stats = feedback.get(key) if isinstance(feedback, dict) else None
    if not isinstance(stats, dict):
        return Reading("inconclusive", None, f"no run scored for feedback {key!r} yet in project {project!r} ({runs})")
    scored, mean = _number(stats.get("n")), _number(stats.get("avg"))
    if scored is None or mean is None:
        return Reading("inconclusive", None, f"feedback {key!r} in project {project!r} has no n or avg ({runs})")
    shown = f"{int(scored)} scored of {runs}"
    if scored < check.min_run_count:
        return Reading(
            "inconclusive", None, f"feedback {key!r}: {shown}, fewer than min_run_count {check.min_run_count}"
        )
    reading = against(check, target, mean, lambda value: f"feedback {key!r} mean {value} over {shown}")
    return replace(reading, runs=int(scored))
