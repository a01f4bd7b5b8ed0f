"""The judge in the fleet task (issue 31), against the emulator's per-revision behaviour and tracing emulation,
deferrable and not: the preflight refuses a fleet rollout it cannot measure with nothing patched; each deployment
is judged against its own baseline (the preflight's measurement of the revision it served before); a dry run
patches everything and rolls nothing back, saying what it would have done; and with
``canary_baseline="control_group"`` the canary is judged against the deployments not rolled out yet, measured over
the same window. The deployments' real state is asserted."""

# ruff: noqa: F811 - the fleet fixture is imported from the module that defines it

from __future__ import annotations

import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.decisions.record import Kind, fleet_row_entries
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, FakeTI, make_context, scan_for_secret
from tests.tasks.test_fleet_analysis import (  # noqa: F401 - fleet is a fixture
    TRAFFIC,
    assert_rolled_back,
    fleet,
    fleet_op,
    ids_by_name,
    revisions,
    run,
    tracing_analysis,
)

DEFERRABLE = pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
ON_BASELINE = TracingProjectCheck(metric="error_rate", condition="<= baseline * 1.5 + 0.01", name="errors")
RATE_TEST = TracingProjectCheck(
    metric="error_rate", rate_test=RateTest(confidence=0.99, tolerated_increase=0.25), min_run_count=40, name="errors"
)


def judge(check: TracingProjectCheck, **options: Any) -> Analysis:
    """``check`` measured twice, 0.3 s apart, with the preflight (the default)."""
    return Analysis(checks=[check], **{"interval_seconds": 0.3, "count": 2, **options})


JUDGED_TRAFFIC = 25 * TRAFFIC
"""Runs a second: 0.6 s of baseline hold 3,000 runs, a round of 0.3 s 1,500, enough for the sequential test to
decide within two rounds."""


def error_rates(emulator: Any, serving: dict[str, float], new: dict[str, float]) -> None:
    """Each named deployment's serving revision fails ``serving[name]`` of its runs, its next one ``new[name]``;
    then 0.6 s of the serving revisions' traffic (about 3,000 runs each: the baseline the preflight measures)."""
    ids = ids_by_name(emulator)
    for name, rate in serving.items():
        emulator.state.set_behaviour(ids[name], error_rate=rate, requests_per_second=JUDGED_TRAFFIC)
    for name, rate in new.items():
        emulator.state.set_behaviour(ids[name], revision_id="next", error_rate=rate, requests_per_second=JUDGED_TRAFFIC)
    time.sleep(0.6)


def assert_landed(emulator: Any, row: dict[str, Any]) -> None:
    """The row's new revision serves (the one patch, nothing rolled back)."""
    deployment = emulator.state.deployment(row["deployment_id"])
    assert row["outcome"] == Outcome.LANDED, row
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == row["to_revision"]
    assert deployment["status"] == "READY" and deployment["source_revision_config"]["repo_ref"] == "v2"
    assert len(deployment["revisions"]) == 2, row


def patched(emulator: Any) -> list[str]:
    return [record.path.rsplit("/", 1)[1] for record in emulator.state.request_log if record.route == PATCH_ROUTE]


# ------------------------------------------------------------------------------------------ preflight
def test_the_preflight_refuses_a_fleet_rollout_it_cannot_measure_with_nothing_patched(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    unknown = TracingProjectCheck(project="{name}-typo", min_run_count=5)
    task = fleet_op(False, deployment_names=sorted(ids), canary=1, analysis=judge(unknown))()

    with pytest.raises(AirflowException) as raised:
        task.execute(make_context(FakeTI(), FakeStore()))

    message = str(raised.value)
    assert "the analysis's preflight refused the rollout, nothing was patched" in message
    assert "project 'app-0000-typo'" in message and "no tracing project named 'app-0000-typo'" in message
    assert (
        f"{emulator.base_url.split('://')[0]}://" in message
        and "/tracing (connection 'deployment_service_default')" in message
    )
    assert "Analysis(preflight=False)" in message
    assert patched(emulator) == []
    assert all(len(revisions(emulator, deployment_id)) == 1 for deployment_id in ids.values())
    scan_for_secret({}, message)


@DEFERRABLE
def test_each_deployment_is_judged_against_its_own_baseline(fleet: Any, deferrable: bool) -> None:
    """Normal error rates of 8 % and 0.5 %: ``< 0.05`` could judge neither; ``<= baseline * 1.5 + 0.01`` lands a
    revision as good as the one before on each, and rolls back the one that got worse (wave 1's app-0002)."""
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    serving = {"app-0000": 0.08, "app-0001": 0.005, "app-0002": 0.005, "app-0003": 0.08}
    error_rates(emulator, serving, new={**serving, "app-0002": 0.3})
    ti, store = FakeTI(), FakeStore()

    table, _ = run(
        fleet_op(
            deferrable, deployment_names=sorted(ids), canary=1, wave_size=3, max_failures=1, analysis=judge(ON_BASELINE)
        ),
        ti,
        store,
    )

    assert isinstance(table, list), table
    rows = {row["name"]: row for row in table}
    for name in ("app-0000", "app-0001", "app-0003"):
        assert_landed(emulator, rows[name])
        result = ti.xcoms["fleet_analysis"][name]
        assert result["verdict"] == "passed", result
        (baseline,) = result["baseline"]
        assert baseline["value"] == pytest.approx(serving[name], abs=0.01) and baseline["runs"] >= 50
    assert_rolled_back(emulator, rows["app-0002"], before["app-0002"])
    reason = rows["app-0002"]["analysis"]["reason"]
    assert "check 'errors' failed" in reason and "baseline 0.0" in reason and "<= baseline * 1.5 + 0.01" in reason


@DEFERRABLE
def test_a_canary_worse_than_its_baseline_stops_the_fleet(fleet: Any, deferrable: bool) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["app-0000"])["active_revision_id"]
    error_rates(emulator, dict.fromkeys(ids, 0.08), new={"app-0000": 0.3})
    ti = FakeTI()

    failed, _ = run(
        fleet_op(deferrable, deployment_names=sorted(ids), canary=1, max_failures=2, analysis=judge(RATE_TEST)), ti
    )

    assert isinstance(failed, AirflowFailException), failed
    assert "the canary failed" in str(failed)
    canary = {row["name"]: row for row in ti.xcoms["return_value"]}["app-0000"]
    assert_rolled_back(emulator, canary, before)
    assert "harm shown: evidence of harm" in canary["analysis"]["reason"]
    assert patched(emulator) == [ids["app-0000"]]
    assert len(revisions(emulator, ids["app-0001"])) == len(revisions(emulator, ids["app-0002"])) == 1


# ------------------------------------------------------------------------------------------ dry run
@DEFERRABLE
def test_a_dry_run_patches_everything_rolls_nothing_back_and_says_what_it_would_have_done(
    fleet: Any, deferrable: bool
) -> None:
    emulator = fleet(3, bad=("app-0000",))
    ids = ids_by_name(emulator)
    ti, store = FakeTI(), FakeStore()

    table, _ = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            canary=1,
            max_failures=0,
            analysis=tracing_analysis(dry_run=True),
        ),
        ti,
        store,
    )

    assert isinstance(table, list), table  # the bad canary did not stop the fleet
    rows = {row["name"]: row for row in table}
    for name in ids:
        assert_landed(emulator, rows[name])
    assert sorted(patched(emulator)) == sorted(ids.values())
    canary = rows["app-0000"]
    assert canary["analysis"]["verdict"] == "failed"
    assert "dry run: would have rolled back: check 'tracing error_rate' failed" in canary["message"]
    result = ti.xcoms["fleet_analysis"]["app-0000"]
    assert result["dry_run"] is True and result["would_have"] == "would have rolled back"
    assert ti.xcoms["fleet_analysis"]["app-0001"]["dry_run"] is True
    assert "would_have" not in ti.xcoms["fleet_analysis"]["app-0001"]
    summary = ti.xcoms["fleet_summary"]
    assert summary["failures"] == 0 and summary["analysis_failures"] == 0
    assert summary["would_have"] == {"app-0000": "would have rolled back"}
    # The record (what the Rollouts view shows) reads the saved rows: landed, and what the gate would have done.
    (saved,) = [
        row
        for value in store.data.values()
        if isinstance(value, dict)
        for row in value.get("rows", [])
        if row.get("name") == "app-0000"
    ]
    (landed,) = [item for item in fleet_row_entries(saved) if item["kind"] == Kind.LANDED]
    assert landed["message"].startswith("dry run: would have rolled back: check 'tracing error_rate' failed")
    assert landed["verdict"]["would_have"] == "would have rolled back"


# ------------------------------------------------------------------------------------------ control group
@DEFERRABLE
def test_a_canary_worse_than_its_control_group_is_rolled_back_and_the_others_never_patched(
    fleet: Any, deferrable: bool
) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["app-0000"])["active_revision_id"]
    error_rates(emulator, dict.fromkeys(ids, 0.08), new={"app-0000": 0.3})
    ti = FakeTI()

    failed, _ = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            canary=1,
            max_failures=3,
            analysis=judge(RATE_TEST),
            canary_baseline="control_group",
        ),
        ti,
    )

    assert isinstance(failed, AirflowFailException), failed
    canary = {row["name"]: row for row in ti.xcoms["return_value"]}["app-0000"]
    assert_rolled_back(emulator, canary, before)
    assert canary["analysis"]["verdict"] == "failed" and "harm shown" in canary["analysis"]["reason"]
    assert "the control group's" in canary["analysis"]["reason"]  # judged against the group, not its own past
    assert patched(emulator) == [ids["app-0000"]]
    for name in ("app-0001", "app-0002", "app-0003"):
        assert len(revisions(emulator, ids[name])) == 1, f"{name} was patched after the canary failed"


@DEFERRABLE
def test_a_canary_is_judged_by_its_own_place_in_the_fleet_not_the_fleets_average(fleet: Any, deferrable: bool) -> None:
    """The deployments' normal rates differ (the canary's deployment fails 12 % of its runs, the others 4 % and 8 %):
    pooled as one sample, the control group would call the canary's new revision (as good as its own normal 12 %)
    worse; each member weighed by its own pre-rollout rate, and the canary by its own relation to the group, it
    lands, and the fleet goes on. The control group's counts are in each round's measurement."""
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    serving = {"app-0000": 0.12, "app-0001": 0.04, "app-0002": 0.08}
    error_rates(emulator, serving, new=serving)
    ti = FakeTI()

    table, _ = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            canary=1,
            wave_size=2,
            analysis=judge(RATE_TEST),
            canary_baseline="control_group",
        ),
        ti,
    )

    assert isinstance(table, list), table
    rows = {row["name"]: row for row in table}
    for name in ids:
        assert_landed(emulator, rows[name])
    canary = ti.xcoms["fleet_analysis"]["app-0000"]
    assert canary["verdict"] == "passed", canary
    assert canary["baseline"][0]["value"] == pytest.approx(0.12, abs=0.01)  # its own past, kept
    last = canary["measurements"][-1]
    group = last["control"]
    # Two members, measured over the canary's window (a few milliseconds later than the canary: at 5,000 runs a
    # second that is tens of runs more each).
    assert group["runs"] >= 1.8 * last["runs"]
    assert group["errors"] == pytest.approx(0.06 * group["runs"], rel=0.15)  # 4 % and 8 %
    assert group["weighted_runs"] == pytest.approx(group["runs"], rel=0.15)  # each weighed by its own rate
    assert "the harmful change ruled out" in last["detail"] and "control group" in last["detail"]
    # Wave 1 is judged against its own baselines, as without a control group.
    assert ti.xcoms["fleet_analysis"]["app-0001"]["baseline"][0]["value"] == pytest.approx(0.04, abs=0.01)


def test_control_group_arguments_are_checked_when_the_dag_is_parsed() -> None:
    def make(**kwargs: Any) -> Any:
        return fleet_op(False, deployment_names=["a", "b"], **kwargs)()

    with pytest.raises(ValueError, match="canary_baseline must be one of 'previous_revision', 'control_group'"):
        make(canary=1, analysis=judge(RATE_TEST), canary_baseline="control")
    with pytest.raises(ValueError, match=r"canary_baseline='control_group'.*give a canary"):
        make(analysis=judge(RATE_TEST), canary_baseline="control_group")
    with pytest.raises(ValueError, match=r"canary_baseline='control_group'.*give an analysis"):
        make(canary=1, canary_baseline="control_group")
    fixed = TracingProjectCheck(metric="error_rate", condition="< 0.05")
    with pytest.raises(ValueError, match=r"the analysis has none .*rate_test=RateTest"):
        make(canary=1, analysis=judge(fixed), canary_baseline="control_group")
    with pytest.raises(ValueError, match=r"the analysis has none .*'>= baseline - 0.05'"):
        make(canary=1, analysis=judge(ON_BASELINE), canary_baseline="control_group")  # a point value, not a test
    score = TracingProjectCheck(metric="feedback.correctness", condition=">= baseline - 0.05")
    make(canary=1, analysis=judge(score), canary_baseline="control_group")
    make(canary=1, analysis=judge(RATE_TEST), canary_baseline="control_group")
