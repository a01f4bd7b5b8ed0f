"""A fleet wave's failed verdict acts at once (issue 28, item 5), against the emulator, on the worker and
deferrable (each resume given the event only, as ``dag.test()`` resumes): the failed deployment's verdict is
recorded, then its rollback is sent, at the end of the round that reached the verdict, while the rest of the
wave goes on being analysed with the rounds it already had; once the failure budget is spent the rest of the
wave stops being analysed and is rolled back with it (or kept, without ``rollback_on_failure``) at once.

The order of events is read from the emulator's own request log (the tracing statistics requests of each
round, the rollback requests) and from what the task state store held when each request was sent; the
outcome from the emulator's state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from airflow_provider.triggers.fleet import FleetWaveTrigger
from tests.tasks.conftest import FakeStore, FakeTI
from tests.tasks.test_fleet_analysis import (
    assert_landed,
    assert_rolled_back,
    fleet,  # noqa: F401 (the fixture)
    fleet_op,
    ids_by_name,
    revisions,
    run,
    tracing_analysis,
)

STATS_ROUTE = "POST /tracing/runs/stats"
COUNT = 6
"""Rounds of the analyses here: a wave that waited for every round would send ``COUNT`` rounds of statistics
requests before any rollback."""


def analysis() -> Any:
    return tracing_analysis(count=COUNT)


def changes_to(emulator: Any, deployment_id: str) -> list[int]:
    """Positions in the emulator's request log of every request that changes ``deployment_id`` (the rollout's
    PATCH, then its rollback: a redeploy or a PATCH back)."""
    return [
        position
        for position, record in enumerate(emulator.state.request_log)
        if record.path.startswith(f"/v2/deployments/{deployment_id}") and record.method in ("PATCH", "POST")
    ]


def stats_before(emulator: Any, position: int) -> int:
    """Tracing statistics requests (one per deployment per round) the emulator answered before ``position``."""
    return sum(1 for record in emulator.state.request_log[:position] if record.route == STATS_ROUTE)


def stats_after(emulator: Any, position: int) -> int:
    return sum(1 for record in emulator.state.request_log[position:] if record.route == STATS_ROUTE)


class WatchedStore(FakeStore):
    """A task state store that notes, at each write, how many requests had changed each deployment so far:
    whether a verdict was recorded before the rollback it calls for was sent."""

    def __init__(self, emulator: Any) -> None:
        super().__init__()
        self.emulator = emulator
        self.writes: list[tuple[dict[str, Any], dict[str, int]]] = []

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        if "/wave/" in key and "/rollback/" not in key:
            changes = {
                row["deployment_id"]: len(changes_to(self.emulator, row["deployment_id"])) for row in value["rows"]
            }
            self.writes.append((value, changes))

    def first_failed_verdict(self, deployment_id: str) -> tuple[dict[str, Any], int]:
        """The row as first recorded with a failed analysis, and how many changes its deployment had then."""
        for wave, changes in self.writes:
            for row in wave["rows"]:
                if row["deployment_id"] == deployment_id and (row["analysis"] or {}).get("verdict") == "failed":
                    return row, changes[deployment_id]
        raise AssertionError(f"no failed verdict of {deployment_id} was ever recorded")


def rounds_of(result: dict[str, Any]) -> list[int]:
    return [measurement["round"] for measurement in result["measurements"]]


# ------------------------------------------------------------------------------------- the case
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_failed_verdict_over_the_budget_rolls_back_at_once_and_stops_the_rest_of_the_wave(
    fleet: Callable[..., Any],  # noqa: F811
    deferrable: bool,
) -> None:
    """Wave of 2, one failing half its runs, max_failures=0: its rollback is sent right after the round that
    failed it (not once the other finished its rounds), and the other stops being analysed and is rolled back
    with the wave at once."""
    emulator = fleet(2, bad=("app-0001",))
    ids = ids_by_name(emulator)
    bad, good = ids["app-0001"], ids["app-0000"]
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti, store = FakeTI(), WatchedStore(emulator)

    failed, triggers = run(
        fleet_op(deferrable, deployment_names=sorted(ids), wave_size=2, max_failures=0, analysis=analysis()),
        ti,
        store,
    )

    assert isinstance(failed, AirflowFailException), failed
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert_rolled_back(emulator, table["app-0001"], before["app-0001"])
    assert table["app-0001"]["analysis"]["verdict"] == "failed"
    # The other one was not judged: its analysis stopped when the budget was spent; it is rolled back with
    # its wave (not a failure), and the emulator shows its previous build serving again.
    other = table["app-0000"]
    assert other["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE, other
    assert other["analysis"] is None, other
    assert "analysis stopped" in other["message"] and "rolled back with its wave" in other["message"], other
    restored = emulator.state.deployment(good)
    assert len(restored["revisions"]) == 3 and restored["active_revision_id"] == restored["revisions"][-1]["id"]
    assert restored["source_revision_config"]["repo_ref"] != "v2" and restored["status"] == "READY"
    assert ti.xcoms["fleet_summary"]["analysis_verdicts"] == {"failed": 1}
    assert list(ti.xcoms["fleet_analysis"]) == ["app-0001"]

    # The order of things, from the emulator's request log: one round (a statistics request per deployment),
    # then the bad one's rollback, then the other's rollback; no further round.
    _patch, bad_rollback = changes_to(emulator, bad)
    _patch, good_rollback = changes_to(emulator, good)
    assert stats_before(emulator, bad_rollback) == 2, [r.route for r in emulator.state.request_log]
    assert stats_after(emulator, bad_rollback) == 0, [r.route for r in emulator.state.request_log]
    assert bad_rollback < good_rollback
    # The verdict was in the task state store before its rollback was sent.
    row, changes = store.first_failed_verdict(bad)
    assert changes == 1, f"the failed verdict was first recorded after {changes - 1} rollback request(s)"
    assert row["outcome"] == Outcome.FAILED and row["rollback_revision"] is None
    if deferrable:
        assert [type(trigger) for trigger in triggers] == [
            FleetWaveTrigger,
            DeploymentAnalysisTrigger,
            FleetWaveTrigger,
        ], triggers


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_within_the_budget_the_failed_one_is_rolled_back_at_once_and_the_rest_keep_their_rounds(
    fleet: Callable[..., Any],  # noqa: F811
    deferrable: bool,
) -> None:
    """Wave of 3, one bad, max_failures=1: the bad one's rollback is sent after round 1, the other two are
    analysed on, rounds 2.. following round 1 (no round lost, none measured twice), and land."""
    emulator = fleet(3, bad=("app-0001",))
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti, store = FakeTI(), WatchedStore(emulator)

    table, triggers = run(
        fleet_op(deferrable, deployment_names=sorted(ids), wave_size=3, max_failures=1, analysis=analysis()),
        ti,
        store,
    )

    assert isinstance(table, list), table
    rows = {row["name"]: row for row in table}
    assert_rolled_back(emulator, rows["app-0001"], before["app-0001"])
    for name in ("app-0000", "app-0002"):
        assert_landed(emulator, rows[name])
        assert rounds_of(ti.xcoms["fleet_analysis"][name]) == list(range(1, COUNT + 1))
    _patch, bad_rollback = changes_to(emulator, ids["app-0001"])
    assert stats_before(emulator, bad_rollback) == 3, "the rollback waited for more than the round that failed it"
    assert stats_after(emulator, bad_rollback) == 2 * (COUNT - 1)
    row, changes = store.first_failed_verdict(ids["app-0001"])
    assert changes == 1 and row["rollback_revision"] is None
    summary = ti.xcoms["fleet_summary"]
    assert summary["counts"] == {"landed": 2, "rolled_back": 1}
    assert summary["analysis_verdicts"] == {"passed": 2, "failed": 1}
    if deferrable:
        analyses = [trigger for trigger in triggers if isinstance(trigger, DeploymentAnalysisTrigger)]
        # The wave's analysis, then the rest of it, resumed after round 1 with the rounds it had.
        assert [len(trigger.targets) for trigger in analyses] == [3, 2], analyses
        resumed = analyses[1].state
        assert resumed is not None and resumed["rounds"] == 1
        assert sorted(resumed["measurements"]) == sorted([ids["app-0000"], ids["app-0002"]])
        assert all(len(taken) == 1 for taken in resumed["measurements"].values())


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_deployment_that_failed_verify_is_rolled_back_before_the_wave_is_analysed(
    fleet: Callable[..., Any],  # noqa: F811
    deferrable: bool,
) -> None:
    """verify refuses one deployment of a wave of 2 (within the budget): its rollback is sent before the first
    round of the other's analysis, not after its last."""
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()

    table, _ = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            wave_size=2,
            max_failures=1,
            verify=lambda deployment: deployment.name != "app-0001",
            analysis=analysis(),
        ),
        ti,
        FakeStore(),
    )

    assert isinstance(table, list), table
    rows = {row["name"]: row for row in table}
    assert_rolled_back(emulator, rows["app-0001"], before["app-0001"])
    assert rows["app-0001"]["analysis"] is None
    assert_landed(emulator, rows["app-0000"])
    _patch, rollback = changes_to(emulator, ids["app-0001"])
    assert stats_before(emulator, rollback) == 0
    assert stats_after(emulator, rollback) == COUNT


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_budget_spent_before_the_analysis_rolls_the_wave_back_without_analysing_it(
    fleet: Callable[..., Any],  # noqa: F811
    deferrable: bool,
) -> None:
    """verify refuses one of a wave of 2 with max_failures=0: the wave stops the rollout, so the other is not
    analysed at all; it is rolled back with its wave at once."""
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    ti = FakeTI()

    failed, triggers = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            wave_size=2,
            max_failures=0,
            verify=lambda deployment: deployment.name != "app-0001",
            analysis=analysis(),
        ),
        ti,
        FakeStore(),
    )

    assert isinstance(failed, AirflowFailException), failed
    rows = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert rows["app-0001"]["outcome"] == Outcome.ROLLED_BACK
    assert rows["app-0000"]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE
    assert "not analysed" in rows["app-0000"]["message"], rows["app-0000"]
    assert emulator.state.count(STATS_ROUTE) == 0
    assert all(len(revisions(emulator, deployment_id)) == 3 for deployment_id in ids.values())
    assert not any(isinstance(trigger, DeploymentAnalysisTrigger) for trigger in triggers)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_without_rollback_on_failure_the_rest_of_a_stopped_wave_is_kept_unjudged(
    fleet: Callable[..., Any],  # noqa: F811
    deferrable: bool,
) -> None:
    """max_failures=0 and no rollback_on_failure: the bad one fails, the other stops being analysed at once and
    keeps serving its new revision (landed, its analysis not judged, its message saying so); nothing is rolled
    back."""
    emulator = fleet(2, bad=("app-0001",))
    ids = ids_by_name(emulator)
    ti = FakeTI()

    failed, _ = run(
        fleet_op(
            deferrable,
            deployment_names=sorted(ids),
            wave_size=2,
            max_failures=0,
            rollback_on_failure=False,
            analysis=analysis(),
        ),
        ti,
        FakeStore(),
    )

    assert isinstance(failed, AirflowFailException), failed
    rows = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert rows["app-0001"]["outcome"] == Outcome.FAILED and rows["app-0001"]["analysis"]["verdict"] == "failed"
    kept = rows["app-0000"]
    assert kept["outcome"] == Outcome.LANDED and kept["analysis"] is None, kept
    assert "analysis stopped" in kept["message"] and "not judged" in kept["message"], kept
    assert emulator.state.count(STATS_ROUTE) == 2  # one round, then the analysis stopped
    for deployment_id in ids.values():
        view = emulator.state.deployment(deployment_id)
        assert len(view["revisions"]) == 2 and view["active_revision_id"] == view["revisions"][-1]["id"]
