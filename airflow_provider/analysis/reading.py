"""What one measurement found (:class:`Reading`), and how a measured value is judged: by a fixed condition, by a
condition on the baseline (made from the preflight's measurement of the same check), by a
:class:`~airflow_provider.analysis.rate_test.RateTest`'s counts or a feedback key's mean score, read here and judged by
the sequential tests of :mod:`~airflow_provider.analysis.statistics.sequential_judge` (which need the rounds before).

Pure: no I/O, no Airflow. The sources (:mod:`~airflow_provider.analysis.measuring.sources`) measure, these judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider.analysis.baseline import BaselineCondition
from airflow_provider.analysis.conditions import Condition
from airflow_provider.analysis.definitions import AnalysisTarget, MetricQueryCheck, TracingProjectCheck, Verdict
from airflow_provider.analysis.metric_conditions import feedback_key

__all__ = ["Reading", "against", "counted_rate", "feedback_reading", "judged", "tracing_reading"]


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
    :param stdev: a feedback key's standard deviation of the scores, when the service gives it.
    """

    verdict: Verdict
    value: float | None
    detail: str
    runs: int | None = None
    errors: int | None = None
    bound: float | None = None
    stdev: float | None = None


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


def counted_rate(
    check: TracingProjectCheck, target: AnalysisTarget, stats: dict[str, Any], run_count: int, runs: str
) -> Reading:
    """The reading of an ``error_rate`` check with a :class:`RateTest`: the error count of ``run_count`` runs,
    judged afterwards by the check's sequential tests (:mod:`~airflow_provider.analysis.statistics.sequential_judge`),
    which need the rounds before it; the baseline itself is only measured. More errors than runs cannot be judged
    (inconclusive)."""
    rate = stats.get("error_rate")
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not math.isfinite(rate):
        return Reading("inconclusive", None, f"no error_rate yet ({runs})")
    counted = stats.get("error_count")
    errors = int(counted) if isinstance(counted, int) and not isinstance(counted, bool) else round(rate * run_count)
    if errors < 0 or errors > run_count:
        return Reading(
            "inconclusive",
            None,
            f"the tracing service counts {errors} errors of {run_count} runs: not a count to judge",
        )
    shown = f"error_rate {rate:.4g} ({errors} of {runs})"
    if target.role == "baseline":
        return Reading("passed", float(rate), f"{shown} (the baseline)", run_count, errors)
    return Reading("inconclusive", float(rate), shown, run_count, errors)


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
    scored runs (and their ``stdev``), judged afterwards by the check's sequential tests
    (:mod:`~airflow_provider.analysis.statistics.sequential_judge`); the baseline itself is only measured, and fewer
    than ``min_run_count`` scored runs there is inconclusive (too few to be a baseline). No run scored yet is an
    undecided round (no scores to judge), with zero scored runs."""
    stats = feedback.get(key) if isinstance(feedback, dict) else None
    if not isinstance(stats, dict):
        detail = f"no run scored for feedback {key!r} yet in project {project!r} ({runs})"
        if target.role == "baseline":
            return Reading("inconclusive", None, detail)
        return Reading("inconclusive", None, detail, runs=0)
    scored, mean = _number(stats.get("n")), _number(stats.get("avg"))
    if scored is None or mean is None or scored < 0:
        return Reading("inconclusive", None, f"feedback {key!r} in project {project!r} has no n or avg ({runs})")
    shown = f"{int(scored)} scored of {runs}"
    spread = _number(stats.get("stdev"))
    detail = f"feedback {key!r} mean {mean:.3f} over {shown}"
    if target.role == "baseline":
        if scored < check.min_run_count:
            return Reading(
                "inconclusive", None, f"feedback {key!r}: {shown}, fewer than min_run_count {check.min_run_count}"
            )
        return Reading("passed", mean, f"{detail} (the baseline)", int(scored), stdev=spread)
    return Reading("inconclusive", mean, detail, int(scored), stdev=spread)


def tracing_reading(check: TracingProjectCheck, target: AnalysisTarget, stats: Any, project: str) -> Reading:
    """What ``stats`` (a ``POST /runs/stats`` answer, runs since ``target`` went live) say of ``check`` on
    ``target``: pure, the same for a live round and a replay (:mod:`~airflow_provider.analysis.replay`).

    :param check: a tracing check.
    :param target: the revision measured.
    :param stats: the statistics answer.
    :param project: the project's name (for the detail).
    """
    since = target.live_since.strftime("%H:%M:%S")
    if not isinstance(stats, dict):
        return Reading("inconclusive", None, "tracing service: POST /runs/stats answered no statistics object")
    run_count = stats.get("run_count")
    if not isinstance(run_count, int | float) or isinstance(run_count, bool):
        run_count = 0
    if not math.isfinite(run_count):
        shown = "NaN" if math.isnan(run_count) else "Infinity" if run_count > 0 else "-Infinity"
        return Reading("inconclusive", None, f"tracing service: run_count {shown} is not a count (no data)")
    if run_count < 0:
        return Reading("inconclusive", None, f"tracing service: run_count {run_count:g} is not a count")
    runs = f"{int(run_count)} runs since {since}"
    key = feedback_key(check.metric)
    statistical = check.rate_test is not None or key is not None
    if run_count < check.min_run_count and (target.role == "baseline" or not statistical):
        return Reading(
            "inconclusive",
            float(run_count) if check.metric == "run_count" else None,
            f"{runs} in project {project!r}, fewer than min_run_count {check.min_run_count}",
        )
    if key is not None:
        return feedback_reading(check, target, key, stats.get("feedback_stats"), project, runs)
    if check.rate_test is not None:
        return counted_rate(check, target, stats, int(run_count), runs)
    value = stats.get(check.metric)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return Reading("inconclusive", None, f"no {check.metric} yet in project {project!r} ({runs})")
    reading = against(check, target, float(value), lambda shown: f"{check.metric} {shown} over {runs}")
    errors = stats.get("error_count") if check.metric == "error_rate" else None
    if check.metric == "error_rate" and not isinstance(errors, int) and math.isfinite(value):
        errors = round(float(value) * run_count)
    return replace(reading, runs=int(run_count), errors=errors if isinstance(errors, int) else None)
