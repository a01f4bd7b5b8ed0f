"""Conditions on the baseline and the statistical judge of rates (issue 31), pure: parsed safely at parse time
(no eval), resolved from the preflight's measurement, and the rate test's arithmetic."""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import pytest

from airflow_provider.analysis import Analysis, MetricQueryCheck, TracingProjectCheck
from airflow_provider.analysis.baseline import BaselineCondition, parse_baseline_condition
from airflow_provider.analysis.definitions import AnalysisTarget
from airflow_provider.analysis.rate_test import RateTest, binomial_tail
from airflow_provider.analysis.reading import against, counted_rate

LATENCY = {"ms": 1000.0, "s": 1.0}


def test_baseline_conditions_parse_into_a_factor_and_an_offset() -> None:
    parsed = parse_baseline_condition("<= baseline * 1.5 + 0.01")
    assert parsed == BaselineCondition("<=", 1.5, 0.01)
    assert str(parsed) == "<= baseline * 1.5 + 0.01"
    assert parsed.resolve(0.02).threshold == pytest.approx(0.04)
    assert parse_baseline_condition(">= baseline - 0.05") == BaselineCondition(">=", 1.0, -0.05)
    assert parse_baseline_condition("< baseline") == BaselineCondition("<", 1.0, 0.0)
    latency = parse_baseline_condition("<= baseline * 1.2 + 50ms", units=LATENCY, default_unit="s")
    assert (latency.unit, latency.per_base_unit, latency.offset) == ("ms", 1000.0, 50.0)
    assert latency.resolve(800.0).threshold == pytest.approx(1010.0)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("<= baseline ** 2", "could not read '\\*\\* 2'"),
        ("<= baseline * 0 + 0.01", "the factor '0' is not above 0"),
        ("<= baseline * 1.5 + __import__('os')", "could not read"),
        ("<= baseline + 1e999", "not a finite number"),
        ("<= baseline + 5ms", "the unit 'ms' is not none"),
        ("== baseline", "got '== baseline'"),
    ],
)
def test_bad_baseline_conditions_are_refused_naming_what_was_expected(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said) as raised:
        parse_baseline_condition(text)
    assert "e.g. '<= baseline * 1.5 + 0.01'" in str(raised.value)


def test_checks_take_baseline_conditions_at_parse_time() -> None:
    check = TracingProjectCheck(metric="error_rate", condition="<=   baseline*1.5+0.01")
    assert check.condition == "<= baseline * 1.5 + 0.01" and check.uses_baseline
    assert TracingProjectCheck(metric="latency_p99", condition="<= baseline * 1.2 + 50ms").uses_baseline
    with pytest.raises(ValueError, match="the unit 'ms' is not none"):
        TracingProjectCheck(metric="error_rate", condition="<= baseline + 5ms")
    assert MetricQueryCheck(query="up", condition="< baseline * 2").uses_baseline
    with pytest.raises(ValueError, match="judged against the baseline, which the preflight measures"):
        Analysis(checks=[check], count=1, preflight=False)
    with pytest.raises(ValueError, match="rate_test judges a rate: metric must be 'error_rate'"):
        TracingProjectCheck(metric="latency_p99", rate_test=RateTest())
    with pytest.raises(ValueError, match="confidence"):
        RateTest(confidence=1.0)
    tested = TracingProjectCheck(rate_test=RateTest(confidence=0.99, tolerated_increase=0.25))
    assert tested.uses_baseline
    assert Analysis.from_json(Analysis(checks=[tested], count=1).to_json()).checks[0] == tested


def _target(baseline: list[dict[str, object]] | None, role: str = "judged") -> AnalysisTarget:
    return AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-000000000001",
        name="svc",
        revision_id="00000000-0000-4000-8000-000000000002",
        live_since=datetime(2026, 1, 1, tzinfo=timezone.utc),
        baseline=baseline,  # type: ignore[arg-type]
        role=role,  # type: ignore[arg-type]
    )


def test_a_baseline_condition_is_resolved_from_the_preflight_measurement() -> None:
    check = TracingProjectCheck(metric="error_rate", condition="<= baseline * 1.5 + 0.01")
    base = [{"check": "tracing error_rate", "value": 0.08, "round": 0}]
    passed = against(check, _target(base), 0.12, lambda shown: f"error_rate {shown}")
    assert passed.verdict == "passed" and "baseline 0.080, so <= 0.13" in passed.detail
    assert against(check, _target(base), 0.14, str).verdict == "failed"
    missing = against(check, _target(None), 0.0, str)
    assert missing.verdict == "inconclusive" and "no baseline of check 'tracing error_rate'" in missing.detail
    assert against(check, _target(None, role="baseline"), 0.5, str).verdict == "passed"  # the preflight measures


def test_a_reading_judged_against_the_baseline_carries_the_bound_it_was_judged_by() -> None:
    """The Rollouts view draws the line there (issue 32): a baseline condition's threshold for this baseline, the
    rate test's tolerated rate; a fixed threshold's line is its condition, and the baseline itself has none."""
    on_baseline = TracingProjectCheck(metric="error_rate", condition="<= baseline * 1.5 + 0.01")
    base = [{"check": "tracing error_rate", "value": 0.08, "runs": 1000, "errors": 80, "round": 0}]
    assert against(on_baseline, _target(base), 0.12, str).bound == pytest.approx(0.13)
    assert against(on_baseline, _target(base), 0.5, str).bound == pytest.approx(0.13)  # failed: same line
    assert against(on_baseline, _target(None, role="baseline"), 0.08, str).bound is None
    fixed = TracingProjectCheck(metric="error_rate", condition="< 0.05")
    assert against(fixed, _target(base), 0.01, str).bound is None
    tested = TracingProjectCheck(rate_test=RateTest(confidence=0.99, tolerated_increase=0.25), min_run_count=100)
    reading = counted_rate(tested, _target(base), {"error_rate": 0.09, "error_count": 90}, 1000, "1000 runs")
    assert reading.bound is None  # a rate test's line is its judge's (see test_sequential_judge)
    assert counted_rate(tested, _target(base, role="baseline"), {"error_rate": 0.08}, 1000, "").bound is None


def test_a_rate_tests_reading_carries_the_counts_its_judge_reads() -> None:
    check = TracingProjectCheck(rate_test=RateTest(), min_run_count=100)
    base = [{"check": "tracing error_rate", "value": 0.03, "runs": 10000, "errors": 300, "round": 0}]
    read = counted_rate(check, _target(base), {"error_rate": 0.03, "error_count": 30}, 1000, "1000 runs")
    assert (read.runs, read.errors, read.value) == (1000, 30, 0.03)
    assert counted_rate(check, _target(base), {"error_rate": 0.031}, 1000, "").errors == 31  # from the rate
    assert counted_rate(check, _target(base, role="baseline"), {"error_rate": 0.03}, 1000, "").verdict == "passed"
    impossible = counted_rate(check, _target(base), {"error_rate": 1.5, "error_count": 1500}, 1000, "1000 runs")
    assert impossible.verdict == "inconclusive" and "1500 errors of 1000 runs" in impossible.detail
    negative = counted_rate(check, _target(base), {"error_rate": 0.0, "error_count": -5}, 1000, "1000 runs")
    assert negative.verdict == "inconclusive" and negative.errors is None


def test_the_binomial_tail_is_exact() -> None:
    rng = random.Random(7)
    for _ in range(20):
        trials, probability = rng.randint(1, 60), rng.random()
        successes = rng.randint(0, trials)
        brute = sum(
            math.comb(trials, i) * probability**i * (1 - probability) ** (trials - i)
            for i in range(successes, trials + 1)
        )
        assert binomial_tail(successes, trials, probability) == pytest.approx(brute, rel=1e-9, abs=1e-12)
    assert binomial_tail(0, 10, 0.5) == 1.0 and binomial_tail(11, 10, 0.5) == 0.0
    assert 0 < binomial_tail(900, 2000, 0.3) < 1e-30  # no overflow with thousands of errors
