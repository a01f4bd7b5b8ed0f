"""A fleet canary's control group (:mod:`airflow_provider.analysis.statistics.control`): the members' counts in the
canary's own window, each member weighed by its own pre-rollout level (never pooled as one sample), members without runs
left out and named, and the canary judged against them by the per-round conditional test, its own normal level relative
to the group carried as the test's nuisance."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, AnalysisTarget, HttpCheck, TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.reading import Reading
from airflow_provider.analysis.replay import ControlMember, replay
from airflow_provider.analysis.statistics.control import control_members, member_weights, pool, pooled_checks
from airflow_provider.analysis.statistics.sequential_judge import SequentialJudge

NOW = datetime(2026, 11, 27, 2, 0, tzinfo=timezone.utc)
ERRORS = TracingProjectCheck(metric="error_rate", rate_test=RateTest(), name="errors")
SCORE = TracingProjectCheck(metric="feedback.correctness", condition=">= baseline - 0.05", name="correctness")


def member(letter: str, *, runs: int = 0, errors: int = 0, score: float | None = None) -> dict[str, Any]:
    baseline: list[dict[str, Any]] = []
    if runs:
        baseline.append({"check": "errors", "round": 0, "value": errors / runs, "runs": runs, "errors": errors})
    if score is not None:
        baseline.append({"check": "correctness", "round": 0, "value": score, "runs": 200})
    return {
        "deployment_id": f"00000000-0000-0000-0000-00000000000{letter}",
        "name": letter,
        "revision_id": f"00000000-0000-0000-0000-0000000000{letter}1",
        "baseline": baseline,
    }


B, C, D = member("b", runs=1000, errors=10, score=0.9), member("c", runs=1000, errors=40, score=0.6), member("d")
CANARY = AnalysisTarget(
    deployment_id="00000000-0000-0000-0000-000000000001",
    name="canary",
    revision_id="00000000-0000-0000-0000-0000000000a1",
    live_since=NOW,
    baseline=[{"check": "errors", "value": 0.02, "runs": 1000, "errors": 20, "round": 0}],
    control=[B, C, D],
)


def test_the_statistical_checks_on_the_baseline_are_pooled() -> None:
    fixed = TracingProjectCheck(metric="error_rate", condition="< 0.05", name="fixed")
    on_base = TracingProjectCheck(metric="error_rate", condition="<= baseline * 1.5", name="on base")
    fixed_score = TracingProjectCheck(metric="feedback.correctness", condition="> 0.8", name="fixed score")
    latency = TracingProjectCheck(metric="latency_p99", condition="<= baseline * 1.2", name="latency")
    analysis = Analysis(checks=[ERRORS, SCORE, fixed, on_base, fixed_score, latency, HttpCheck()], count=1)
    assert [check.label() for check in pooled_checks(analysis)] == ["errors", "correctness"]


def test_the_members_are_measured_over_the_canarys_window_as_baselines() -> None:
    members = control_members(CANARY)
    assert [item.name for item in members] == ["b", "c", "d"]
    assert all(item.live_since == NOW and item.role == "baseline" for item in members)


def test_each_member_is_weighed_by_its_own_pre_rollout_rate() -> None:
    group, weights = member_weights(CANARY.control or [], "errors")
    assert group == pytest.approx(50.5 / 2001)
    assert weights[B["deployment_id"]] < 1 < weights[C["deployment_id"]]  # 1 % and 4 % against a 2.5 % group
    assert weights[D["deployment_id"]] == 1.0  # never measured before the rollout: an average member
    readings = [
        (B, Reading("passed", 0.01, "b", runs=100, errors=1)),
        (C, Reading("passed", 0.04, "c", runs=300, errors=12)),
        (D, Reading("inconclusive", None, "no runs")),
    ]
    shown, counts = pool(ERRORS, CANARY, readings, 2, NOW)
    assert counts is not None and (counts["runs"], counts["errors"]) == (400, 13)
    expected = weights[B["deployment_id"]] * 100 + weights[C["deployment_id"]] * 300
    assert counts["weighted_runs"] == pytest.approx(expected)
    assert shown["control"] == counts and shown["round"] == 2 and shown["check"] == "errors"
    assert "2 of 3 deployment(s)" in shown["detail"] and "left out (no runs to compare): d" in shown["detail"]


def test_a_feedback_score_is_each_members_shift_from_its_own_pre_rollout_mean() -> None:
    readings = [(B, Reading("passed", 0.85, "b", runs=10)), (C, Reading("passed", 0.6, "c", runs=30))]
    shown, counts = pool(SCORE, CANARY, readings, 1, NOW)
    assert counts is not None and counts["scored"] == 40
    assert counts["shift_sum"] == pytest.approx(10 * (0.85 - 0.9) + 30 * (0.6 - 0.6))
    assert shown["value"] == pytest.approx((0.85 * 10 + 0.6 * 30) / 40)


def test_a_group_without_runs_leaves_the_canary_inconclusive_never_passed() -> None:
    shown, counts = pool(ERRORS, CANARY, [(D, Reading("inconclusive", None, "no runs"))], 1, NOW)
    assert counts is None and shown["value"] is None and shown["verdict"] == "inconclusive"
    judge = SequentialJudge(ERRORS, CANARY)
    measured = {**shown, "name": "canary", "runs": 100, "errors": 2, "detail": "2 of 100"}
    outcome = judge.judge(measured)  # type: ignore[arg-type]
    assert outcome.verdict == "inconclusive" and not outcome.pending
    assert "no control-group counts this round" in outcome.detail


def _group(rates: list[float], runs: int, rounds: int, drift: float = 1.0) -> list[ControlMember]:
    """Members at ``rates`` (their normal error rates), ``runs`` a round each, all their rates times ``drift`` after
    the rollout (what changes for every deployment at once)."""
    return [
        ControlMember(
            f"m{index}",
            {"run_count": 20 * runs, "error_count": round(20 * runs * rate)},
            [{"run_count": runs * k, "error_count": round(runs * k * rate * drift)} for k in range(1, rounds + 1)],
        )
        for index, rate in enumerate(rates)
    ]


def test_a_canary_whose_normal_rate_is_above_the_groups_is_not_rolled_back() -> None:
    """The canary's own normal rate is 1.3x the group's average (members spread 2-4 %): pooling the group as one
    sample would call it worse; weighed by its own pre-rollout level, it passes."""
    analysis = Analysis(checks=[ERRORS], count=30, interval_seconds=60)
    members = _group([0.02, 0.025, 0.03, 0.035, 0.04], 200, 30)
    canary_rate = 0.039
    result = replay(
        analysis,
        baseline={"run_count": 4000, "error_count": round(4000 * canary_rate)},
        rounds=[{"run_count": 200 * k, "error_count": round(200 * k * canary_rate)} for k in range(1, 31)],
        control=members,
    )
    assert result.verdict == "passed", result.reason
    doubled = replay(
        analysis,
        baseline={"run_count": 4000, "error_count": round(4000 * canary_rate)},
        rounds=[{"run_count": 200 * k, "error_count": round(200 * k * canary_rate * 2)} for k in range(1, 31)],
        control=members,
    )
    assert doubled.verdict == "failed" and doubled.decided_round is not None and doubled.decided_round < 30


def test_what_changes_for_every_deployment_at_once_is_cancelled() -> None:
    """Every deployment's rate rises by half at the rollout (an upstream model got worse): against its own
    baseline the canary looks 1.5x worse; against its control group in the same window it passes."""
    analysis = Analysis(checks=[ERRORS], count=30, interval_seconds=60)
    members = _group([0.03] * 8, 300, 30, drift=1.5)
    before = {"run_count": 6000, "error_count": 180}
    rounds = [{"run_count": 300 * k, "error_count": round(300 * k * 0.045)} for k in range(1, 31)]
    assert replay(analysis, baseline=before, rounds=rounds).verdict == "failed"
    assert replay(analysis, baseline=before, rounds=rounds, control=members).verdict == "passed"
