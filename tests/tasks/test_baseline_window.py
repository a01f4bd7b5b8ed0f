"""The preflight of a statistical check (issue 37): it measures the two halves of the baseline window (the drift
guard's reading), lengthens the window when a decision needs a baseline of more runs
(``baseline_window_seconds=None``), and warns, before anything is patched, when the analysis cannot decide at the
traffic it measured. Against the real-time emulator of ``test_patch_analysis``; the judge's reading of the halves is
asserted on the measurement it records."""

# ruff: noqa: F811 - the emulator fixture is imported from the module that defines it

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, AnalysisTarget, TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.statistics.drift import drift_of
from airflow_provider.analysis.statistics.sequential_judge import SequentialJudge
from airflow_provider.models import Deployment
from airflow_provider.tasks.preflight import (
    DEFAULT_BASELINE_WINDOW,
    LONGEST_BASELINE_WINDOW,
    longer_baseline_window,
    preflight_on_worker,
    warn_if_undecidable,
)
from tests.tasks.test_patch_analysis import TRAFFIC, emulator, svc  # noqa: F401 - emulator is a fixture

ERRORS = TracingProjectCheck(rate_test=RateTest(), name="errors")
NOW = time.time()


def target(hours_live: float) -> AnalysisTarget:
    return AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-000000000001",
        name="svc",
        revision_id="00000000-0000-4000-8000-000000000002",
        live_since=datetime.fromtimestamp(NOW - hours_live * 3600, tz=timezone.utc),
        role="baseline",
    )


def baseline(runs: int, errors: int) -> dict[str, list[Any]]:
    return {
        "00000000-0000-4000-8000-000000000001": [
            {"check": "errors", "round": 0, "value": errors / runs, "runs": runs, "errors": errors}
        ]
    }


def test_a_window_too_small_for_a_decision_is_lengthened_up_to_a_day() -> None:
    analysis = Analysis(checks=[ERRORS], count=30, interval_seconds=60)
    # An hour of 1 run a second at 3 %: 3,600 runs, fewer than ten times the ~1,000 a decision needs.
    longer = longer_baseline_window(analysis, baseline(3600, 108), [target(1.0)], NOW, DEFAULT_BASELINE_WINDOW)
    assert longer is not None and DEFAULT_BASELINE_WINDOW < longer <= LONGEST_BASELINE_WINDOW
    # Enough runs already: the hour stays.
    assert longer_baseline_window(analysis, baseline(36000, 1080), [target(1.0)], NOW, 3600) is None
    # The serving revision went live within the hour: a longer window would measure nothing more.
    assert longer_baseline_window(analysis, baseline(3600, 108), [target(0.5)], NOW, 3600) is None
    # A trickle: the day is the most it asks for.
    assert longer_baseline_window(analysis, baseline(40, 1), [target(1.0)], NOW, 3600) == LONGEST_BASELINE_WINDOW


def test_an_analysis_too_short_for_its_traffic_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.preflight")
    short = Analysis(checks=[ERRORS], count=1, interval_seconds=60)  # 600 runs at 10 a second
    with caplog.at_level(logging.WARNING, logger="test.preflight"):
        warn_if_undecidable(log, short, baseline(36000, 1080), [target(1.0)], NOW)
    (said,) = [record.getMessage() for record in caplog.records]
    assert "the analysis cannot decide on 'svc' at the traffic its baseline shows" in said
    assert "check 'errors':" in said and "runs to fail an error rate of 0.06 (2x the baseline's)" in said
    assert "it will likely end inconclusive" in said
    caplog.clear()
    long = Analysis(checks=[ERRORS], count=120, interval_seconds=60)
    with caplog.at_level(logging.WARNING, logger="test.preflight"):
        warn_if_undecidable(log, long, baseline(36000, 1080), [target(1.0)], NOW)
    assert not caplog.records


class _Task:
    """What the preflight reads of a task: its hook and its logger."""

    def __init__(self) -> None:
        from airflow_provider.hooks.deployment_service import DeploymentServiceHook

        self.hook = DeploymentServiceHook()
        self.log = logging.getLogger("test.preflight.task")


def test_the_preflight_measures_the_halves_of_the_window_and_the_judge_reads_them(emulator: Any) -> None:
    """The serving revision fails 2 % of its runs for a second, then 6 %: the two halves of a two-second window differ,
    the drift guard says so, and the failure test is measured against the higher level."""
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.02, requests_per_second=20 * TRAFFIC)
    time.sleep(1.0)
    emulator.admin.set_behaviour(deployment_id, error_rate=0.06, requests_per_second=20 * TRAFFIC)
    time.sleep(1.0)
    analysis = Analysis(checks=[ERRORS], count=1, baseline_window_seconds=2.0)
    deployment = Deployment.model_validate(svc(emulator))

    measured = preflight_on_worker(_Task(), analysis, [deployment])  # type: ignore[arg-type]

    (taken,) = measured[deployment_id]
    first, second = taken["halves"]
    assert first["runs"] + second["runs"] == taken["runs"] and first["errors"] + second["errors"] == taken["errors"]
    drift = drift_of(taken["halves"])
    assert drift is not None and drift.moved and drift.second > drift.first
    judged = AnalysisTarget(
        deployment_id=deployment_id,
        name="svc",
        revision_id=str(deployment.active_revision_id),
        live_since=datetime.now(timezone.utc) - timedelta(seconds=1),
        baseline=[dict(taken)],
    )
    judge = SequentialJudge(ERRORS, judged)
    assert "the baseline's own level moved within its window" in judge.note
    assert judge._bound is not None and judge._bound > taken["errors"] / taken["runs"]


def test_a_short_analysis_on_a_trickle_is_warned_about_before_anything_is_sent(
    emulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A deployment serving a trickle (the window bounded by its revision's short life): the preflight warns that a
    one-round analysis cannot decide, before anything is sent."""
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.03, requests_per_second=TRAFFIC)
    time.sleep(0.5)
    analysis = Analysis(checks=[ERRORS], count=1, interval_seconds=0.2)
    deployment = Deployment.model_validate(svc(emulator))
    with caplog.at_level(logging.INFO, logger="test.preflight.task"):
        preflight_on_worker(_Task(), analysis, [deployment])  # type: ignore[arg-type]
    said = " ".join(record.getMessage() for record in caplog.records)
    assert "the analysis cannot decide on 'svc'" in said
    assert not [item for item in emulator.admin.requests() if item["method"] == "PATCH"]
