"""The conditions a check's measurement is judged by: the tracing metrics and their units, a feedback key's
metric (``feedback.<key>``), and a condition as written parsed in a metric's terms, fixed (``"< 0.05"``) or on
the baseline (``"<= baseline * 1.5 + 0.01"``).

Pure: no I/O, no Airflow. Parsed at construction (when the DAG is parsed), naming the field.
"""

from __future__ import annotations

import re

from airflow_provider.analysis.baseline import BaselineCondition, is_baseline_condition, parse_baseline_condition
from airflow_provider.analysis.conditions import Condition, parse_condition, threshold_unit

__all__ = [
    "FEEDBACK_PREFIX",
    "LATENCY_METRICS",
    "LATENCY_UNITS",
    "TRACING_METRICS",
    "AnyCondition",
    "condition_field",
    "condition_or_baseline",
    "feedback_key",
    "is_feedback_key",
    "tracing_condition",
]

TRACING_METRICS: tuple[str, ...] = ("error_rate", "latency_p50", "latency_p99", "run_count")
FEEDBACK_PREFIX = "feedback."
"""A tracing metric ``feedback.<key>``: the mean score of feedback key ``<key>`` over the revision's scored runs."""
_FEEDBACK_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/ -]{0,127}$")


def feedback_key(metric: str) -> str | None:
    """The feedback key of a ``feedback.<key>`` metric, ``None`` for any other metric.

    :param metric: a tracing metric.
    """
    return metric[len(FEEDBACK_PREFIX) :] if metric.startswith(FEEDBACK_PREFIX) else None


LATENCY_METRICS: tuple[str, ...] = ("latency_p50", "latency_p99")
"""The tracing metrics measured in seconds: their conditions take a unit (:data:`LATENCY_UNITS`)."""
LATENCY_UNITS: dict[str, float] = {"ms": 1000.0, "s": 1.0}
"""The units a latency condition may carry, each with how many of it make one second (a bare number is
seconds)."""


def is_feedback_key(key: str) -> bool:
    """Whether ``key`` may name a feedback key (letters, digits and ``_.:/ -``, up to 128 characters).

    :param key: the part of a metric after ``feedback.``.
    """
    return _FEEDBACK_KEY.match(key) is not None


def condition_field(value: object, field: str) -> str:
    return str(parse_condition(value, field))


def condition_or_baseline(value: object, field: str) -> str:
    """A fixed condition (``"< 0.05"``) or one on the baseline (``"<= baseline * 1.5"``), parsed and normalised."""
    if is_baseline_condition(value):
        return str(parse_baseline_condition(value, field))
    return condition_field(value, field)


AnyCondition = Condition | BaselineCondition
"""A parsed condition: a fixed threshold, or one made from the baseline."""


def tracing_condition(metric: str, text: object) -> AnyCondition:
    """The condition of a :class:`TracingProjectCheck` on ``metric``, parsed in the metric's terms: a latency
    takes a unit (``"< 800ms"``, ``"< 2s"``; a bare number is seconds); an error rate is a fraction 0..1;
    ``ValueError`` naming what is wrong otherwise.

    :param metric: one of ``TRACING_METRICS``, or ``feedback.<key>``.
    :param text: the condition as written (on the baseline too: ``"<= baseline * 1.5 + 0.01"``).
    """
    if is_baseline_condition(text):
        units = LATENCY_UNITS if metric in LATENCY_METRICS else None
        return parse_baseline_condition(text, "condition", units=units, default_unit="s" if units else "")
    if metric in LATENCY_METRICS:
        return parse_condition(text, "condition", units=LATENCY_UNITS, default_unit="s")
    if isinstance(text, str) and threshold_unit(text):
        kind = "a fraction of the runs, 0..1" if metric == "error_rate" else "a number of runs"
        if feedback_key(metric) is not None:
            kind = "a mean feedback score"
        raise ValueError(f"condition: {metric} takes no unit (it is {kind}), got {text!r}")
    condition = parse_condition(text, "condition")
    if metric == "error_rate" and not 0 <= condition.threshold <= 1:
        percent = condition.threshold / 100 if 1 < condition.threshold <= 100 else 0.05
        raise ValueError(
            f"condition: error_rate is a fraction of the runs, 0..1 (5 % is 0.05), got {text!r}, a gate that could "
            f"never fail or never pass; write the threshold as a fraction, e.g. '{condition.operator} {percent:g}'"
        )
    return condition
