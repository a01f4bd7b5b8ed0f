"""Feedback scores as a gate (issues 31, 37): ``TracingProjectCheck(metric="feedback.<key>", condition="> 0.8")``
judges the scores of a feedback key over the revision's scored runs (the ``feedback_stats`` of ``POST
/runs/stats``) by sequential tests (failed once the mean is shown below 0.8, passed once shown above); its minimum
count is the number of scored runs.

Against the real-time emulator of ``test_patch_analysis``, its apps' runs scored per revision (the emulator's
``feedback`` behaviour): a revision that serves without errors but whose ``correctness`` drops is rolled back.
"""

# ruff: noqa: F811 - the emulator fixture is imported from the module that defines it

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.analysis import DeploymentAnalysisOperator
from tests.tasks.conftest import FakeTI, make_context, run_deferred
from tests.tasks.test_patch_analysis import (  # noqa: F401 - emulator is a fixture
    OLD_IMAGE,
    PATHS,
    TRAFFIC,
    analysis_of,
    context_with_events,
    emulator,
    patch_op,
    run,
    svc,
)

CORRECTNESS = TracingProjectCheck(metric="feedback.correctness", condition="> 0.8", min_run_count=10)


JUDGED_TRAFFIC = 10 * TRAFFIC
"""Runs a second: a round of 0.3 s holds 300 scored runs at half scored, enough for the sequential test."""


def scores(emulator: Any, *, serving: float, new: float, share: float = 0.5) -> None:
    """The serving revision's runs and the next revision's are scored ``serving`` and ``new`` by a 0/1 evaluator
    (no errors)."""
    deployment_id = svc(emulator)["id"]
    for revision_id, score in ((None, serving), ("next", new)):
        emulator.admin.set_behaviour(
            deployment_id,
            revision_id=revision_id,
            requests_per_second=JUDGED_TRAFFIC,
            feedback={"correctness": {"score": score, "share": share}},
        )


@PATHS
def test_a_revision_whose_correctness_drops_is_rolled_back(emulator: Any, path: str) -> None:
    scores(emulator, serving=0.9, new=0.55)
    before = svc(emulator)
    ti = FakeTI()
    analysis = analysis_of(CORRECTNESS, count=2)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis), context_with_events(ti), path
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "check 'tracing feedback.correctness' failed" in str(outcome)
    assert "feedback 'correctness' mean 0.5" in str(outcome) and "evidence of a score worse than 0.8" in str(outcome)
    after = svc(emulator)
    assert after["active_revision_id"] != ti.xcoms["revision_id"]  # rolled back
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE and after["status"] == "READY"
    (baseline,) = ti.xcoms["analysis"]["baseline"]  # the serving revision's score, measured in preflight
    assert baseline["value"] == pytest.approx(0.9, abs=0.01) and baseline["verdict"] == "passed"
    assert before["active_revision_id"] != ti.xcoms["revision_id"]


def test_a_revision_scored_as_well_lands(emulator: Any) -> None:
    scores(emulator, serving=0.9, new=0.92)
    ti = FakeTI()

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=False, analysis=analysis_of(CORRECTNESS, count=1)),
        context_with_events(ti),
        "worker",
    )

    assert isinstance(outcome, dict), outcome
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"]
    (measurement,) = ti.xcoms["analysis"]["measurements"]
    assert measurement["value"] == pytest.approx(0.92, abs=0.01) and "scored of" in measurement["detail"]
    assert measurement["verdict"] == "passed" and "the harmful change ruled out" in measurement["detail"]


def test_too_few_scored_runs_are_inconclusive_not_passed(emulator: Any) -> None:
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(
        deployment_id, requests_per_second=TRAFFIC, feedback={"correctness": {"score": 0.95, "share": 0.02}}
    )
    analysis = Analysis(checks=[CORRECTNESS], count=1, interval_seconds=0.2, preflight=False)
    with pytest.raises(AirflowFailException, match=r"inconclusive.*fewer than min_run_count 10 scored runs yet"):
        run_deferred(
            lambda: DeploymentAnalysisOperator(
                task_id="gate", analysis=analysis, deployment_ids=deployment_id, deferrable=True
            ),
            make_context(FakeTI()),
        )


def test_feedback_metrics_are_checked_at_parse_time() -> None:
    with pytest.raises(ValueError, match=r"metric must be one of .* or feedback\.<key>.*got 'feedback\.'"):
        TracingProjectCheck(metric="feedback.", condition="> 0.8")
    with pytest.raises(ValueError, match="got 'correctness'"):
        TracingProjectCheck(metric="correctness", condition="> 0.8")
    with pytest.raises(ValueError, match=r"feedback\.correctness takes no unit"):
        TracingProjectCheck(metric="feedback.correctness", condition="> 0.8ms")
    check = TracingProjectCheck(metric="feedback.user_rating", condition=">= 4")
    assert check.label() == "tracing feedback.user_rating"
    assert Analysis.from_json(Analysis(checks=[check], count=1).to_json()).checks[0] == check
