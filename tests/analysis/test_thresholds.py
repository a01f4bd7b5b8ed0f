"""Gates that could never fail are refused when the DAG is parsed, and thresholds mean what they say: an error
rate is a fraction 0..1 (``"< 5"`` is refused, suggesting ``"< 0.05"``); a latency condition takes a unit
(``"< 800ms"``, ``"< 2s"``; a bare number is seconds) and the measured value is compared, stored and shown in
that unit; ``+Inf``/``-Inf`` are no data, like ``NaN`` (inconclusive, never passed)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from airflow_provider.analysis import (
    Analysis,
    CallableCheck,
    MetricQueryCheck,
    TracingProjectCheck,
    parse_condition,
)
from tests.analysis.conftest import live_targets, run_rounds
from tests.analysis.fake_sources import FakeSources, scalar, vector


def _refusal(**check: Any) -> str:
    with pytest.raises(pydantic.ValidationError) as refused:
        TracingProjectCheck(**check)
    return str(refused.value)


# ------------------------------------------------------------------------------------------ error rate
@pytest.mark.parametrize(
    "condition, suggestion",
    [("< 5", "'< 0.05'"), ("<= 50", "'<= 0.5'"), ("> 1.5", "'> 0.015'"), ("< -0.1", "'< 0.05'"), ("< 250", "'< 0.05'")],
)
def test_an_error_rate_threshold_outside_0_1_is_refused_when_the_dag_is_parsed(condition: str, suggestion: str) -> None:
    message = _refusal(metric="error_rate", condition=condition)
    assert "condition" in message
    assert "error_rate is a fraction of the runs, 0..1" in message
    assert f"got {condition!r}" in message
    assert f"e.g. {suggestion}" in message
    with pytest.raises(pydantic.ValidationError, match="error_rate is a fraction"):  # from JSON (the trigger) too
        Analysis.from_json({"checks": [{"kind": "tracing_project", "condition": condition}], "count": 1})


@pytest.mark.parametrize("condition", ["< 0.05", "<= 0", ">= 1", "< 1", "< 0.5"])
def test_an_error_rate_threshold_within_0_1_is_kept(condition: str) -> None:
    assert TracingProjectCheck(metric="error_rate", condition=condition).condition == condition


def test_a_unit_on_a_metric_without_one_is_refused() -> None:
    assert "error_rate takes no unit" in _refusal(metric="error_rate", condition="< 5ms")
    assert "run_count takes no unit" in _refusal(metric="run_count", condition="> 20s")


# ------------------------------------------------------------------------------------------ latency
@pytest.mark.parametrize(
    "condition, stored, seconds",
    [
        ("< 800ms", "< 800ms", 0.8),
        ("< 2s", "< 2s", 2.0),
        ("< 2", "< 2s", 2.0),  # a bare number is seconds, and says so
        ("<= 1.5 s", "<= 1.5s", 1.5),
        ("> 250 ms", "> 250ms", 0.25),
        ("< 1e3ms", "< 1000ms", 1.0),
    ],
)
def test_a_latency_condition_takes_a_unit_and_shows_it(condition: str, stored: str, seconds: float) -> None:
    check = TracingProjectCheck(metric="latency_p99", condition=condition)
    assert check.condition == stored
    parsed = check.parsed_condition
    assert str(parsed) == stored
    assert parsed.in_unit(seconds) == pytest.approx(parsed.threshold)
    assert Analysis.from_json(Analysis(checks=[check], count=1).to_json()).checks[0] == check


def test_the_default_condition_of_a_latency_check_shows_its_unit() -> None:
    assert TracingProjectCheck(metric="latency_p50").condition == "< 0.05s"
    assert TracingProjectCheck().condition == "< 0.05"


@pytest.mark.parametrize(
    "condition, words", [("< 2min", "unit 'min'"), ("< 5h", "unit 'h'"), ("< fast", "not a number")]
)
def test_a_latency_condition_with_an_unknown_unit_is_refused_naming_the_units(condition: str, words: str) -> None:
    message = _refusal(metric="latency_p50", condition=condition)
    assert "condition" in message and words in message
    if "unit" in words:
        assert "ms or s" in message


def test_a_latency_is_compared_and_shown_in_the_conditions_unit(analysis_env: Any, fake_sources: FakeSources) -> None:
    fast, slow = live_targets(analysis_env, 2)
    fake_sources.add_project(fast.name, run_count=50, error_rate=0.0, latency_p50=0.1, latency_p99=0.4)
    fake_sources.add_project(slow.name, run_count=50, error_rate=0.0, latency_p50=0.3, latency_p99=0.912)
    checks = [
        TracingProjectCheck(metric="latency_p99", condition="< 800ms"),
        TracingProjectCheck(metric="latency_p50", condition="< 2", name="median"),
    ]
    results = run_rounds(Analysis(checks=checks, count=1, interval_seconds=0.01), [fast, slow])

    assert results[fast.deployment_id]["verdict"] == "passed", results[fast.deployment_id]
    by_check = {m["check"]: m for m in results[fast.deployment_id]["measurements"]}
    assert (by_check["tracing latency_p99"]["value"], by_check["tracing latency_p99"]["condition"]) == (400, "< 800ms")
    assert by_check["tracing latency_p99"]["detail"].startswith("latency_p99 400ms over 50 runs")
    assert (by_check["median"]["value"], by_check["median"]["condition"]) == (0.1, "< 2s")
    assert by_check["median"]["detail"].startswith("latency_p50 0.1s over 50 runs")
    failed = results[slow.deployment_id]
    assert (failed["verdict"], failed["failing_check"]) == ("failed", "tracing latency_p99")
    assert "latency_p99 912ms over 50 runs" in failed["reason"] and "needs < 800ms" in failed["reason"]


# ---------------------------------------------------------------------------------------- infinities
@pytest.mark.parametrize("raw", ["+Inf", "-Inf", "NaN"])
def test_an_infinite_query_value_is_no_data(analysis_env: Any, fake_sources: FakeSources, raw: str) -> None:
    first, second = live_targets(analysis_env, 2)
    checks = [
        MetricQueryCheck(query="scalar(x)", condition="< 0.05", name="scalar"),
        MetricQueryCheck(query="sum by (name) (x)", condition="> 0.05", name="vector"),
    ]
    fake_sources.answer_query = lambda query: scalar(raw) if query.startswith("scalar") else vector({first.name: raw})
    results = run_rounds(Analysis(checks=checks, count=1, interval_seconds=0.01, inconclusive_limit=2), [first])

    for measurement in results[first.deployment_id]["measurements"]:
        assert (measurement["verdict"], measurement["value"]) == ("inconclusive", None), measurement
        assert "no data" in measurement["detail"], measurement
    assert second.deployment_id not in results


def test_infinite_tracing_statistics_are_no_data(analysis_env: Any, fake_sources: FakeSources) -> None:
    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(target.name)
    checks = [TracingProjectCheck(), TracingProjectCheck(metric="latency_p99", condition="< 1")]
    analysis = Analysis(checks=checks, count=1, interval_seconds=0.01, inconclusive_limit=2)

    fake_sources.raw_stats = '{"run_count": 100, "error_rate": -Infinity, "latency_p99": Infinity}'
    measurements = run_rounds(analysis, [target])[target.deployment_id]["measurements"]
    assert [(m["verdict"], m["value"]) for m in measurements] == [("inconclusive", None)] * 2, measurements
    assert all("no data" in m["detail"] for m in measurements), measurements

    fake_sources.raw_stats = '{"run_count": Infinity, "error_rate": 0.0, "latency_p99": 0.1}'
    measurements = run_rounds(analysis, [target])[target.deployment_id]["measurements"]
    assert [m["verdict"] for m in measurements] == ["inconclusive"] * 2, measurements
    assert all("run_count Infinity is not a count" in m["detail"] for m in measurements), measurements


def test_a_callable_returning_infinity_is_no_data(analysis_env: Any) -> None:
    (target,) = live_targets(analysis_env, 1)
    check = CallableCheck(func=lambda deployment: float("inf"), condition="> 0", name="infinite")
    result = run_rounds(Analysis(checks=[check], count=1, interval_seconds=0.01), [target])[target.deployment_id]
    (measurement,) = result["measurements"]
    assert (measurement["verdict"], measurement["value"]) == ("inconclusive", None), measurement


def test_a_condition_parses_into_its_unit() -> None:
    condition = parse_condition("< 800ms", units={"ms": 1000.0, "s": 1.0}, default_unit="s")
    assert (condition.operator, condition.threshold, condition.unit) == ("<", 800.0, "ms")
    assert condition.holds(condition.in_unit(0.5)) and not condition.holds(condition.in_unit(0.9))
    assert str(parse_condition("< 0.05")) == "< 0.05"
