"""The guard's pure parts (issue 42): its windows over the guarded time, and the line that says what it did."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.guard import (
    Guard,
    GuardRecord,
    duration_text,
    regression_text,
    window_of,
    windows_in,
)
from airflow_provider.analysis.rate_test import RateTest

LANDED = datetime(2026, 11, 29, 6, 0, tzinfo=timezone.utc)
CHECK = TracingProjectCheck(metric="error_rate", condition="< 0.05", name="errors")


def record(analysis: Analysis, hours: float = 24) -> GuardRecord:
    return GuardRecord(
        deployment_id="00000000-0000-4000-8000-000000000001",
        deployment_name="svc",
        revision_id="00000000-0000-4000-8000-000000000002",
        previous_revision_id=None,
        conn_id="deployment_service_default",
        landed_at=LANDED,
        until=LANDED + timedelta(hours=hours),
        analysis=analysis.to_json(),
    )


def test_windows_follow_one_another_from_landing_and_the_last_is_cut_at_the_end() -> None:
    analysis = Analysis(checks=[CHECK], interval_seconds=300, count=24)  # two-hour windows
    guarded = record(analysis, hours=5)
    start, window = window_of(analysis, guarded, LANDED + timedelta(minutes=10))
    assert (start, window.count) == (LANDED, 24)
    start, window = window_of(analysis, guarded, LANDED + timedelta(hours=2, minutes=1))
    assert (start, window.count) == (LANDED + timedelta(hours=2), 24)
    start, window = window_of(analysis, guarded, LANDED + timedelta(hours=4, minutes=30))
    assert (start, window.count) == (LANDED + timedelta(hours=4), 12)  # one hour left: 12 rounds


def test_an_analysis_without_count_is_one_window_over_the_guarded_time() -> None:
    analysis = Analysis(checks=[CHECK], interval_seconds=600, count=None)
    start, window = window_of(analysis, record(analysis, hours=24), LANDED + timedelta(hours=7))
    assert (start, window.count) == (LANDED, 144)


def test_each_window_judges_at_its_share_of_the_guards_false_alarm_bound() -> None:
    rate = TracingProjectCheck(metric="error_rate", rate_test=RateTest(confidence=0.99), name="error rate")
    scores = TracingProjectCheck(metric="feedback.correctness", condition=">= baseline - 0.05", name="correctness")
    analysis = Analysis(checks=[rate, scores, CHECK], interval_seconds=300, count=24)  # two-hour windows
    guarded = record(analysis, hours=24)
    assert windows_in(analysis, guarded) == 12
    for at in (timedelta(minutes=1), timedelta(hours=23)):
        _, window = window_of(analysis, guarded, LANDED + at)
        judged_rate, judged_scores, threshold = window.checks
        assert judged_rate.rate_test.confidence == pytest.approx(1 - 0.01 / 12)
        assert judged_scores.confidence == pytest.approx(1 - 0.01 / 12)  # a feedback check's default 0.99, split
        assert threshold == CHECK  # a condition is no test: judged as given
    assert analysis.checks[0].rate_test.confidence == 0.99  # the guard's own analysis is unchanged
    one = Analysis(checks=[rate], interval_seconds=600, count=None)
    _, window = window_of(one, record(one, hours=24), LANDED + timedelta(hours=3))
    assert windows_in(one, record(one)) == 1 and window.checks[0].rate_test.confidence == 0.99


def test_the_line_says_when_and_what_against_the_baseline_or_the_condition() -> None:
    failing = {"check": "tracing feedback.correctness", "value": 0.612, "condition": ">= baseline - 0.05"}
    baseline = [{"check": "tracing feedback.correctness", "value": 0.88}]
    after = 7 * 3600 + 12 * 60
    assert regression_text(failing, baseline, after) == (
        "rolled back by the guard, 7 h 12 min after landing, correctness 0.61 against 0.88"
    )
    fixed = {"check": "errors", "value": 0.133, "condition": "< 0.05"}
    assert regression_text(fixed, None, 9) == "rolled back by the guard, 9 s after landing, errors 0.13 (needs < 0.05)"
    assert regression_text(None, None, 90_000) == "rolled back by the guard, 1 d 1 h after landing"
    assert [duration_text(s) for s in (42, 185, 3600, 7 * 3600 + 12 * 60)] == [
        "42 s",
        "3 min 5 s",
        "1 h 0 min",
        "7 h 12 min",
    ]


def test_a_guard_refuses_what_it_cannot_do_naming_it() -> None:
    with pytest.raises(ValueError, match="for_seconds"):
        Guard(analysis=Analysis(checks=[CHECK]), for_seconds=float("inf"))
    with pytest.raises(ValueError, match="for_seconds"):
        Guard(analysis=Analysis(checks=[CHECK]), for_seconds=-1)
    with pytest.raises(ValueError, match=r"Extra inputs are not permitted"):
        Guard(analysis=Analysis(checks=[CHECK]), for_seconds=60, seconds=1)  # type: ignore[call-arg]
