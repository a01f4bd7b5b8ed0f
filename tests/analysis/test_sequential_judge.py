"""The honest judge (issue 37): always-valid sequential tests for rates and feedback scores, three verdicts that mean
what they say, the drift guard, the replay API and the planner.

The bounds are checked where they can be exactly (an e-value's expectation under its hypothesis is 1, summed over
every outcome), and by a small simulation of whole analyses through the judge (every round looked at): the bench
(``bench/judge_power.py``) measures them over the whole grid.
"""

from __future__ import annotations

import bisect
import math
import random
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, AnalysisTarget, TracingProjectCheck
from airflow_provider.analysis.judge import Judgement
from airflow_provider.analysis.planner import more_runs_needed, plan_analysis, runs_to_decide
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.replay import replay
from airflow_provider.analysis.statistics.drift import drift_of
from airflow_provider.analysis.statistics.evidence import (
    GaussianEvidence,
    IntervalEvidence,
    ProportionEvidence,
    log_mean_exp,
)
from airflow_provider.analysis.statistics.sequential_judge import SequentialJudge

NOW = datetime(2026, 11, 29, 3, 0, tzinfo=timezone.utc)
ERRORS = TracingProjectCheck(rate_test=RateTest(), name="errors", min_run_count=20)
SCORE = TracingProjectCheck(metric="feedback.correctness", condition=">= baseline - 0.05", name="correctness")


def target(baseline: list[dict[str, Any]] | None) -> AnalysisTarget:
    return AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-000000000001",
        name="svc",
        revision_id="00000000-0000-4000-8000-000000000002",
        live_since=NOW,
        baseline=baseline,
    )


def base_errors(runs: int, errors: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"check": "errors", "round": 0, "value": errors / runs, "runs": runs, "errors": errors, **extra}]


def round_of(runs: int, errors: int, number: int = 1) -> dict[str, Any]:
    return {
        "round": number,
        "check": "errors",
        "deployment_id": "x",
        "name": "svc",
        "at": NOW.isoformat(),
        "value": errors / runs if runs else None,
        "condition": "",
        "verdict": "inconclusive",
        "detail": f"{errors} of {runs}",
        "runs": runs,
        "errors": errors,
    }


def binomial(k: int, n: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def binomial_draws(n: int, p: float) -> Any:
    """Draws from Binomial(n, p) by inverse transform over its exact cumulative distribution."""
    cumulative, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )
        cumulative.append(total)
    return lambda rng: min(n, bisect.bisect_left(cumulative, rng.random() * cumulative[-1]))


# ----------------------------------------------------------------------------------------------- the e-values
def test_a_known_boundarys_evidence_has_expectation_one_under_it() -> None:
    """Summed over every outcome: E[e-value] = 1 at the boundary, below 1 on the good side of it (the composite
    hypothesis), so by Ville's inequality it reaches 1/alpha with probability at most alpha at any look."""
    evidence = ProportionEvidence(0.1, ((0.17, 0.3), (0.2, 0.5), (0.32, 0.2)), None)
    for n in (1, 7, 40):
        at_boundary = sum(binomial(k, n, 0.1) * math.exp(evidence.log_evidence(k, n)) for k in range(n + 1))
        below = sum(binomial(k, n, 0.07) * math.exp(evidence.log_evidence(k, n)) for k in range(n + 1))
        assert at_boundary == pytest.approx(1.0, rel=1e-9) and below < 1.0


def test_the_baselines_uncertainty_is_the_hypothesiss_spread() -> None:
    """Under the hypothesis's own beta-binomial (the boundary carrying the baseline's uncertainty) the expectation
    is exactly 1; the evidence grows with the errors, and shrinks as the baseline gets smaller (less certain)."""
    size, null = 500.0, 0.04
    evidence = ProportionEvidence(null, ((0.08, 1.0),), size)
    a, b = null * size, (1 - null) * size
    for n in (5, 30):
        mean = sum(
            math.comb(n, k)
            * math.exp(math.lgamma(a + k) + math.lgamma(b + n - k) - math.lgamma(a + b + n))
            / math.exp(math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
            * math.exp(evidence.log_evidence(k, n))
            for k in range(n + 1)
        )
        assert mean == pytest.approx(1.0, rel=1e-6)
    values = [evidence.log_evidence(k, 100) for k in range(0, 20)]
    assert values == sorted(values)
    smaller = ProportionEvidence(null, ((0.08, 1.0),), 50.0)
    assert smaller.log_evidence(12, 100) < evidence.log_evidence(12, 100)


def test_the_interval_test_is_a_martingale_for_a_known_level() -> None:
    def interval(level: float, effect: float, counts: tuple[float, ...]) -> float:
        canary, canary_runs, control, weight = counts
        share = effect * level * canary_runs / (effect * level * canary_runs + weight)
        return canary * math.log(share) + control * math.log1p(-share)

    total, runs, weight = 12, 100.0, 300.0
    share = runs / (runs + weight)
    means = []
    for k in range(total + 1):
        evidence = IntervalEvidence(((1.0, 1.0),), 1.0, ((2.0, 1.0),), interval)
        evidence.add((float(k), runs, float(total - k), weight))
        means.append(binomial(k, total, share) * math.exp(evidence.log_evidence()))
    assert sum(means) == pytest.approx(1.0, rel=1e-9)


def test_the_normal_test_carries_the_baselines_variance() -> None:
    evidence = GaussianEvidence(((-0.05, 1.0),), 0.0)
    spread = GaussianEvidence(((-0.05, 1.0),), 1e-3)
    assert evidence.log_evidence(-400.0, 4000.0) > spread.log_evidence(-400.0, 4000.0) > 0
    assert evidence.log_evidence(0.0, 0.0) == 0.0
    assert log_mean_exp([(0.5, -math.inf), (0.5, -math.inf)]) == -math.inf


# ----------------------------------------------------------------------------------------------- the verdicts
def test_three_verdicts_that_mean_what_they_say() -> None:
    judge = SequentialJudge(ERRORS, target(base_errors(7200, 216)))
    early = judge.judge(round_of(50, 2))
    assert early.verdict == "inconclusive" and early.pending
    assert "not decided yet" in early.detail and "more runs to decide" in early.detail
    assert "99 % over every round" in early.detail
    same = SequentialJudge(ERRORS, target(base_errors(7200, 216)))
    outcomes = [same.judge(round_of(100 * k, 3 * k, k)) for k in range(1, 31)]
    first_pass = next(index for index, outcome in enumerate(outcomes) if outcome.verdict == "passed")
    assert all(outcome.verdict == "passed" for outcome in outcomes[first_pass:])  # stays passed
    assert outcomes[first_pass].safety >= 100 and "the harmful change ruled out" in outcomes[first_pass].detail
    bad = SequentialJudge(ERRORS, target(base_errors(7200, 216)))
    verdicts = [bad.judge(round_of(50 * k, 3 * k, k)).verdict for k in range(1, 31)]
    assert "failed" in verdicts and "passed" not in verdicts


def test_a_revision_that_passed_fails_when_harm_is_shown_later() -> None:
    judge = SequentialJudge(ERRORS, target(base_errors(7200, 216)))
    for k in range(1, 25):
        judge.judge(round_of(100 * k, 3 * k, k))
    assert judge.passed
    later = judge.judge(round_of(2400 + 2000, 72 + 300, 25))  # it degrades: 15 % errors since the last round
    assert later.verdict == "failed"


def test_pending_rounds_do_not_count_against_the_inconclusive_limit() -> None:
    analysis = Analysis(checks=[ERRORS], count=10, inconclusive_limit=0)
    result = replay(
        analysis,
        baseline={"run_count": 7200, "error_count": 216},
        rounds=[{"run_count": 30 * k, "error_count": k} for k in range(1, 11)],
    )
    assert result.verdict == "inconclusive" and result.decided_round == 10  # undecided to the end, never "limit"
    assert "never passed in 10 round(s)" in result.reason and "more runs to decide" in result.reason
    assert all(item["test"]["pending"] for item in result.measurements)


def test_a_measurement_that_cannot_be_judged_is_inconclusive_not_pending() -> None:
    no_base = SequentialJudge(ERRORS, target(None)).judge(round_of(100, 3))
    assert no_base.verdict == "inconclusive" and not no_base.pending
    assert "no baseline run counts of check 'errors' was measured" in no_base.detail
    impossible = SequentialJudge(ERRORS, target(base_errors(1000, 30))).judge(round_of(100, 3) | {"errors": 300})
    assert not impossible.pending and "more errors (300) than runs (100)" in impossible.detail
    more_errors = [{"check": "errors", "round": 0, "value": 2.0, "runs": 10, "errors": 20}]
    assert (
        "more errors (20) than runs (10)" in SequentialJudge(ERRORS, target(more_errors)).judge(round_of(10, 1)).detail
    )


def test_a_failed_test_decides_at_once_whatever_the_failure_limit() -> None:
    analysis = Analysis(checks=[ERRORS], count=30, failure_limit=3)
    result = replay(
        analysis,
        baseline={"run_count": 7200, "error_count": 216},
        rounds=[{"run_count": 50 * k, "error_count": 5 * k} for k in range(1, 31)],
    )
    assert result.verdict == "failed" and result.failing_check == "errors"
    failed = [item for item in result.measurements if item["verdict"] == "failed"]
    assert len(failed) == 1 and result.decided_round == failed[0]["round"]


def test_feedback_is_judged_on_n_avg_and_a_margin() -> None:
    def stats(n: int, avg: float) -> dict[str, Any]:
        return {"run_count": 5 * n, "feedback_stats": {"correctness": {"n": n, "avg": avg, "stdev": 0.35}}}

    analysis = Analysis(checks=[SCORE], count=20)
    as_good = replay(analysis, baseline=stats(4000, 0.85), rounds=[stats(80 * k, 0.85) for k in range(1, 21)])
    assert as_good.verdict == "passed"
    within = replay(analysis, baseline=stats(4000, 0.85), rounds=[stats(80 * k, 0.82) for k in range(1, 21)])
    assert within.verdict != "failed"  # 0.03 worse is within the 0.05 margin: never "shown worse by more"
    worse = replay(analysis, baseline=stats(4000, 0.85), rounds=[stats(80 * k, 0.72) for k in range(1, 21)])
    assert worse.verdict == "failed" and "evidence of a score worse than 0.8" in worse.reason
    sparse = replay(analysis, baseline=stats(4000, 0.85), rounds=[stats(k, 0.85) for k in range(1, 21)])
    assert sparse.verdict == "inconclusive" and "more scored runs to decide at the rates seen" in sparse.reason
    first = sparse.measurements[0]
    assert first["test"]["pending"] and "fewer than min_run_count 20 scored runs yet" in first["detail"]


def test_a_rating_outside_zero_one_is_judged_by_the_normal_test() -> None:
    rating = TracingProjectCheck(metric="feedback.rating", condition=">= baseline - 0.3", name="rating")

    def stats(n: int, avg: float) -> dict[str, Any]:
        return {"run_count": n, "feedback_stats": {"rating": {"n": n, "avg": avg, "stdev": 1.0}}}

    analysis = Analysis(checks=[rating], count=10)
    assert (
        replay(analysis, baseline=stats(5000, 4.2), rounds=[stats(100 * k, 4.2) for k in range(1, 11)]).verdict
        == "passed"
    )
    assert (
        replay(analysis, baseline=stats(5000, 4.2), rounds=[stats(100 * k, 3.5) for k in range(1, 11)]).verdict
        == "failed"
    )


def test_whole_analyses_of_an_unchanged_revision_rarely_fail() -> None:
    """A small simulation through the judge, every round looked at (the bench runs the grid): an unchanged revision
    at 3 % errors, 60 rounds of 50 runs against a 5,000-run baseline, is failed in well under 1 % of analyses; the
    single-look test applied every round, as before, cries wolf several times as often."""
    rng = random.Random(37)
    trials, failed, single_look = 600, 0, 0
    test = RateTest()
    draw_base, draw_round = binomial_draws(5000, 0.03), binomial_draws(50, 0.03)
    for _ in range(trials):
        base = draw_base(rng)
        judge = SequentialJudge(ERRORS, target(base_errors(5000, base)))
        errors = runs = 0
        look_failed = False
        for k in range(1, 61):
            errors += draw_round(rng)
            runs += 50
            if judge.judge(round_of(runs, errors, k)).verdict == "failed":
                failed += 1
                break
            look_failed = look_failed or test.judge(base, 5000, errors, runs, 20).verdict == "failed"
        single_look += look_failed
    assert failed / trials < 0.01
    assert single_look > failed


# ----------------------------------------------------------------------------------------------- the drift guard
def test_the_drift_guard_notices_a_baseline_that_moved_within_its_window() -> None:
    steady = drift_of([{"runs": 5000, "errors": 150}, {"runs": 5000, "errors": 152}])
    assert steady is not None and not steady.moved
    moved = drift_of([{"runs": 5000, "errors": 120}, {"runs": 5000, "errors": 190}])
    assert moved is not None and moved.moved and moved.levels[2] > moved.second
    assert drift_of(None) is None and drift_of([{"runs": 0, "errors": 0}, {"runs": 10, "errors": 1}]) is None
    halves = [{"runs": 5000, "errors": 120}, {"runs": 5000, "errors": 190}]
    guarded = SequentialJudge(ERRORS, target(base_errors(10000, 310, halves=halves)))
    plain = SequentialJudge(ERRORS, target(base_errors(10000, 310)))
    at = round_of(3000, 120)
    assert guarded.judge(at).harm < plain.judge(at).harm
    assert "the baseline's own level moved within its window" in guarded.judge(round_of(3100, 124, 2)).detail


# ----------------------------------------------------------------------------------------------- bad input
def test_impossible_input_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="min_run_count must be at least 1 for a statistical check, got 0"):
        TracingProjectCheck(metric="feedback.correctness", condition="> 0.8", min_run_count=0)
    with pytest.raises(ValueError, match="min_run_count must be at least 1"):
        TracingProjectCheck(rate_test=RateTest(), min_run_count=0)
    assert TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=0).min_run_count == 0
    with pytest.raises(ValueError, match=r"harmful_increase \(0.2\) must be above tolerated_increase \(0.25\)"):
        RateTest(tolerated_increase=0.25, harmful_increase=0.2)
    with pytest.raises(ValueError, match=r"confidence is a feedback check's.*has none"):
        TracingProjectCheck(metric="error_rate", confidence=0.99)
    with pytest.raises(ValueError, match="new_errors must be a whole number >= 0, got -5"):
        RateTest().judge(10, 1000, -5, 100, 20)
    with pytest.raises(ValueError, match=r"new_errors \(120\) cannot be above new_runs \(100\)"):
        RateTest().judge(10, 1000, 120, 100, 20)
    with pytest.raises(ValueError, match="min_runs must be a whole number >= 1"):
        RateTest().judge(10, 1000, 1, 100, 0)
    assert "one look" in RateTest().judge(30, 1000, 3, 100, 20).detail


# ----------------------------------------------------------------------------------------------- replay, planner
def test_the_replay_example_of_the_docs() -> None:
    analysis = Analysis(checks=[TracingProjectCheck(rate_test=RateTest(), name="errors")], count=30)
    result = replay(
        analysis,
        baseline={"run_count": 7200, "error_count": 216},
        rounds=[{"run_count": 50 * k, "error_count": 3 * k} for k in range(1, 31)],
    )
    assert (result.verdict, result.decided_round) == ("failed", 9)
    assert result.baseline[0]["runs"] == 7200 and result.rounds == 9 and result.complete


def test_a_replay_of_intervals_is_the_replay_of_their_sums() -> None:
    analysis = Analysis(checks=[ERRORS, SCORE], count=12)
    intervals = [
        {"run_count": 100, "error_count": 3, "feedback_stats": {"correctness": {"n": 40, "avg": 0.8, "stdev": 0.4}}}
        for _ in range(12)
    ]
    cumulative = [
        {"run_count": 100 * k, "error_count": 3 * k, "feedback_stats": {"correctness": {"n": 40 * k, "avg": 0.8}}}
        for k in range(1, 13)
    ]
    baseline = {"run_count": 9000, "error_count": 270, "feedback_stats": {"correctness": {"n": 3600, "avg": 0.8}}}
    added = replay(analysis, baseline=baseline, rounds=intervals, cumulative=False)
    given = replay(analysis, baseline=baseline, rounds=cumulative)
    assert (added.verdict, added.decided_round) == (given.verdict, given.decided_round)
    assert [item["test"] for item in added.measurements] == [item["test"] for item in given.measurements]


def test_a_replay_refuses_what_it_cannot_judge() -> None:
    from airflow_provider.analysis import HttpCheck

    with pytest.raises(ValueError, match=r"only TracingProjectCheck checks can be replayed.*http"):
        replay(Analysis(checks=[HttpCheck()], count=1), baseline={}, rounds=[{}])
    with pytest.raises(ValueError, match="rounds: give at least one"):
        replay(Analysis(checks=[ERRORS], count=1), baseline={"run_count": 1}, rounds=[])
    with pytest.raises(ValueError, match="baseline: checks judged against the baseline"):
        replay(Analysis(checks=[ERRORS], count=1), baseline=None, rounds=[{"run_count": 1}])


def test_a_replay_resumes_as_an_analysis_does() -> None:
    """A judgement rebuilt from its measurements (an analysis going on in another trigger) reaches the verdict the
    uninterrupted one reached."""
    analysis = Analysis(checks=[ERRORS], count=30)
    result = replay(
        analysis,
        baseline={"run_count": 7200, "error_count": 216},
        rounds=[{"run_count": 100 * k, "error_count": 3 * k} for k in range(1, 31)],
    )
    resumed = Judgement.resumed(analysis, "r", ["errors"], result.measurements)
    assert resumed.finish(30)["verdict"] == result.verdict == "passed"


def test_the_planner_states_the_runs_a_decision_needs() -> None:
    analysis = Analysis(checks=[ERRORS, SCORE], count=20, interval_seconds=60)
    plan = plan_analysis(analysis, runs_per_second=2.0, error_rate=0.03, scores={"correctness": 0.85}, scored_share=0.2)
    errors, score = plan.checks
    assert errors.unit == "runs" and score.unit == "scored runs"
    assert errors.harmful == "an error rate of 0.06 (2x the baseline's)"
    assert errors.runs_to_fail is not None and 720 <= errors.runs_to_fail <= 1.7 * 720 * 1.2
    assert errors.median_runs_to_fail is not None and errors.median_runs_to_fail < errors.runs_to_fail
    assert errors.runs_to_pass is not None and plan.seconds_needed is not None
    assert not plan.decides and "it will likely end inconclusive" in plan.describe()  # 20 minutes is too short
    long = plan_analysis(analysis.model_copy(update={"count": 200}), runs_per_second=20.0, error_rate=0.03)
    assert long.decides and "can decide" in long.describe()
    with pytest.raises(ValueError, match="runs_per_second must be a positive number"):
        plan_analysis(analysis, runs_per_second=0)
    with pytest.raises(ValueError, match=r"error_rate must be a fraction 0\.\.1"):
        plan_analysis(analysis, runs_per_second=1, error_rate=3)


def test_the_planner_matches_the_judges_own_projection() -> None:
    judge = SequentialJudge(ERRORS, target(base_errors(7200, 216)))
    to_fail = runs_to_decide(judge, 0.06, fail=True)
    to_pass = runs_to_decide(judge, 0.03, fail=False)
    assert to_fail is not None and to_pass is not None
    assert 0.5 < to_fail / to_pass < 2.0  # symmetric questions need runs of one order
    projected = more_runs_needed(judge, round_of(100, 3), 100)
    assert projected is not None and 100 < projected < to_pass * 2
    assert more_runs_needed(SequentialJudge(ERRORS, target(None)), round_of(100, 3), 100) is None


def test_sparse_feedback_need_not_hold_the_verdict_back() -> None:
    """Feedback scored on a few runs cannot decide within a short analysis: by default the analysis ends inconclusive
    (on_inconclusive decides); a check given required=False does not hold a passed verdict back, and still fails the
    revision once harm is shown."""

    def stats(k: int, avg: float, scored: int) -> dict[str, Any]:
        feedback = {"correctness": {"n": scored, "avg": avg}} if scored else {}
        return {"run_count": 300 * k, "error_count": 9 * k, "feedback_stats": feedback}

    sparse = TracingProjectCheck(
        metric="feedback.correctness", condition=">= baseline - 0.05", name="correctness", required=False
    )
    baseline = {"run_count": 9000, "error_count": 270, "feedback_stats": {"correctness": {"n": 4000, "avg": 0.85}}}
    rounds = [stats(k, 0.85, 2 * k) for k in range(1, 21)]
    strict = replay(Analysis(checks=[ERRORS, SCORE], count=20), baseline=baseline, rounds=rounds)
    assert strict.verdict == "inconclusive" and strict.failing_check == "correctness"
    relaxed = replay(Analysis(checks=[ERRORS, sparse], count=20), baseline=baseline, rounds=rounds)
    assert relaxed.verdict == "passed"
    assert (
        relaxed.reason == "all 1 required check(s) passed over 20 round(s); not required, never passed: 'correctness'"
    )
    worse = [stats(k, 0.5, 60 * k) for k in range(1, 21)]
    assert replay(Analysis(checks=[ERRORS, sparse], count=20), baseline=baseline, rounds=worse).verdict == "failed"
