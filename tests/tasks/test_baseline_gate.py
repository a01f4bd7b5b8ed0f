"""Baseline conditions and the rate test against the emulator (issues 31, 37): an app that normally fails 8 % of
its runs can never pass ``error_rate < 0.05``; judged against its baseline (the preflight's measurement of the
revision serving before, carried to the triggerer with the target), a revision as good as it lands and a worse
one is rolled back. The rate test's sequential judge decides only on enough runs: the apps here serve
:data:`JUDGED_TRAFFIC` runs a second, so a baseline second holds thousands. The deployment's real state is
asserted."""

# ruff: noqa: F811 - the emulator fixture is imported from the module that defines it

from __future__ import annotations

import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from tests.tasks.conftest import FakeTI
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

ON_BASELINE = TracingProjectCheck(metric="error_rate", condition="<= baseline * 1.5 + 0.01", name="errors")
RATE_TEST = TracingProjectCheck(
    metric="error_rate", rate_test=RateTest(confidence=0.99, tolerated_increase=0.25), min_run_count=50, name="errors"
)


JUDGED_TRAFFIC = 25 * TRAFFIC
"""Runs a second: a second of baseline holds 5,000 runs, a round of 0.3 s 1,500; enough for the sequential test to
rule a doubled rate out (or show one) within the two rounds."""


def error_rates(emulator: Any, *, serving: float, new: float) -> None:
    """The serving revision fails ``serving`` of its runs, the next one ``new``; then a second of the serving
    revision's traffic (the baseline the preflight measures)."""
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=serving, requests_per_second=JUDGED_TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=new, requests_per_second=JUDGED_TRAFFIC)
    time.sleep(1.0)


@PATHS
@pytest.mark.parametrize("check", [ON_BASELINE, RATE_TEST], ids=["baseline condition", "rate test"])
def test_a_revision_as_good_as_an_8_percent_baseline_lands(emulator: Any, path: str, check: Any) -> None:
    error_rates(emulator, serving=0.08, new=0.08)
    ti = FakeTI()

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis_of(check, count=2)),
        context_with_events(ti),
        path,
    )

    assert isinstance(outcome, dict), outcome
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"]
    result = ti.xcoms["analysis"]
    assert result["verdict"] == "passed"
    (baseline,) = result["baseline"]
    assert baseline["value"] == pytest.approx(0.08, abs=0.01) and baseline["runs"] > 50
    # Each round's measurement carries the line it was judged by (the view draws it): made from this baseline.
    base = baseline["errors"] / baseline["runs"] if check is RATE_TEST else baseline["value"]
    bound = base * 1.25 if check is RATE_TEST else base * 1.5 + 0.01
    assert [m["bound"] for m in result["measurements"]] == pytest.approx([bound] * len(result["measurements"]))
    if check is RATE_TEST:  # passed: a doubled rate ruled out, over every round, not merely "not shown worse"
        assert result["measurements"][-1]["test"]["safety"] >= 100
        assert "the harmful change ruled out" in result["measurements"][-1]["detail"]


@PATHS
@pytest.mark.parametrize("check", [ON_BASELINE, RATE_TEST], ids=["baseline condition", "rate test"])
def test_a_revision_worse_than_its_baseline_is_rolled_back(emulator: Any, path: str, check: Any) -> None:
    error_rates(emulator, serving=0.08, new=0.3)
    before = svc(emulator)
    ti = FakeTI()

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis_of(check, count=2)),
        context_with_events(ti),
        path,
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "check 'errors' failed" in str(outcome)
    if check is ON_BASELINE:
        assert "; baseline 0.0" in str(outcome) and "<= baseline * 1.5 + 0.01" in str(outcome)
    else:
        assert "harm shown: evidence of harm" in str(outcome) and "99 % over every round" in str(outcome)
    after = svc(emulator)
    assert after["active_revision_id"] not in (ti.xcoms["revision_id"], None)
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the bad revision and the rollback's


def test_a_retry_judges_against_the_baseline_the_first_try_recorded(emulator: Any) -> None:
    """The first try measures the baseline, patches and dies while the revision builds; the retry reattaches and
    judges against the baseline the first try recorded with its patch."""
    from airflow.sdk.exceptions import TaskDeferred

    from tests.tasks.conftest import FakeStore
    from tests.tasks.test_patch_analysis_retries import drive

    error_rates(emulator, serving=0.08, new=0.08)
    store = FakeStore()

    def make() -> Any:
        return patch_op(emulator, deferrable=True, analysis=analysis_of(ON_BASELINE, count=2), retries=1)

    first = drive(make, context_with_events(FakeTI(1), store), stop_before="execute_complete")
    assert isinstance(first, TaskDeferred), first
    recorded = next(value for value in store.data.values() if isinstance(value, dict) and value.get("baseline"))
    (baseline,) = recorded["baseline"]
    assert baseline["value"] == pytest.approx(0.08, abs=0.01)

    second = FakeTI(2)
    outcome = drive(make, context_with_events(second, store))

    assert isinstance(outcome, dict), outcome
    assert second.xcoms["analysis"]["baseline"] == recorded["baseline"]  # the first try's, not measured again
    assert svc(emulator)["active_revision_id"] == second.xcoms["revision_id"]
