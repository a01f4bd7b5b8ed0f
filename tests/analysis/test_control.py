"""The pooling of a fleet canary's control group (:mod:`airflow_provider.analysis.control`): errors and runs summed
for an error rate, the mean score weighted by the scored runs for a feedback key, members without runs left out
and named, and a group without runs leaving the canary's check inconclusive (never passed)."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_provider.analysis import Analysis, AnalysisTarget, HttpCheck, TracingProjectCheck
from airflow_provider.analysis.control import control_members, pool, pooled_checks, with_pooled_baseline
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.reading import Reading, against

NOW = datetime(2026, 11, 27, 2, 0, tzinfo=timezone.utc)
CANARY = AnalysisTarget(
    deployment_id="00000000-0000-0000-0000-000000000001",
    name="canary",
    revision_id="00000000-0000-0000-0000-0000000000a1",
    live_since=NOW,
    baseline=[{"check": "latency", "value": 0.2, "runs": 100}],
    control=[
        {
            "deployment_id": "00000000-0000-0000-0000-000000000002",
            "name": "b",
            "revision_id": "00000000-0000-0000-0000-0000000000b1",
        },
        {
            "deployment_id": "00000000-0000-0000-0000-000000000003",
            "name": "c",
            "revision_id": "00000000-0000-0000-0000-0000000000c1",
        },
    ],
)
ERRORS = TracingProjectCheck(metric="error_rate", rate_test=RateTest(), name="errors")
SCORE = TracingProjectCheck(metric="feedback.correctness", condition=">= baseline - 0.05", name="correctness")


def test_only_tracing_rate_checks_on_the_baseline_are_pooled() -> None:
    fixed = TracingProjectCheck(metric="error_rate", condition="< 0.05", name="fixed")
    latency = TracingProjectCheck(metric="latency_p99", condition="<= baseline * 1.2", name="latency")
    analysis = Analysis(checks=[ERRORS, SCORE, fixed, latency, HttpCheck()], count=1)
    assert [check.label() for check in pooled_checks(analysis)] == ["errors", "correctness"]


def test_the_members_are_measured_over_the_canarys_window_as_baselines() -> None:
    members = control_members(CANARY)
    assert [member.name for member in members] == ["b", "c"]
    assert all(member.live_since == NOW and member.role == "baseline" for member in members)


def test_an_error_rate_sums_errors_and_runs_and_leaves_out_members_without_runs() -> None:
    readings = [
        ("b", Reading("passed", 0.1, "b", runs=100, errors=10)),
        ("c", Reading("passed", 0.05, "c", runs=300, errors=15)),
        ("d", Reading("inconclusive", None, "no runs")),
    ]
    pooled = pool(ERRORS, CANARY, readings, 2, NOW)
    assert (pooled["value"], pooled["runs"], pooled["errors"]) == (25 / 400, 400, 25)
    assert pooled["verdict"] == "passed" and pooled["round"] == 2 and pooled["check"] == "errors"
    assert "2 of 3 deployment(s)" in pooled["detail"] and "left out (no runs to pool): d" in pooled["detail"]
    judged = with_pooled_baseline(CANARY, [pooled])
    assert judged.baseline_of("errors") == dict(pooled)
    assert judged.baseline_of("latency") == {"check": "latency", "value": 0.2, "runs": 100}  # the preflight's kept


def test_a_feedback_score_is_weighted_by_the_scored_runs() -> None:
    readings = [("b", Reading("passed", 0.9, "b", runs=10)), ("c", Reading("passed", 0.6, "c", runs=30))]
    pooled = pool(SCORE, CANARY, readings, 1, NOW)
    assert pooled["value"] == (0.9 * 10 + 0.6 * 30) / 40 and pooled["runs"] == 40 and "errors" not in pooled


def test_a_group_without_runs_leaves_the_canary_inconclusive() -> None:
    pooled = pool(SCORE, CANARY, [("b", Reading("inconclusive", None, "no runs"))], 1, NOW)
    assert pooled["value"] is None and pooled["verdict"] == "inconclusive"
    reading = against(SCORE, with_pooled_baseline(CANARY, [pooled]), 0.9, lambda shown: shown)
    assert reading.verdict == "inconclusive"
    assert (
        "the control group (deployments not rolled out yet) gave no baseline of check 'correctness'" in reading.detail
    )
