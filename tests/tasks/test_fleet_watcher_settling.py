"""The watcher never announces a revision a fleet rollout rejects (issue 30): ``DeploymentEventTrigger`` runs next to
a real ``FleetRolloutOperator`` whose canary fails its analysis and is rolled back, against the emulator; the judging
marker the fleet task writes for each deployment (as the patch task does, see ``test_watcher_settling``) is what
the watcher reads, through one fake asset state store."""

# ruff: noqa: F811 - the fixtures are imported from the modules that define them

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.judging_marker import JUDGING_KEY
from tests.tasks.conftest import FakeStore, FakeTI, wait_until
from tests.tasks.test_fleet_analysis import (  # noqa: F401 - fleet is a fixture
    fleet,
    fleet_op,
    ids_by_name,
    run,
    tracing_analysis,
)
from tests.tasks.test_watcher_settling import AssetStore, Watching, shared_store


async def test_a_fleet_canary_rejected_by_its_analysis_is_never_announced(
    fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = fleet(3, bad=("app-0000",))
    ids = ids_by_name(emulator)
    canary = ids["app-0000"]
    before = emulator.state.deployment(canary)["active_revision_id"]
    store = shared_store(monkeypatch, canary, AssetStore())
    assert store is not None
    watching = Watching(canary, store, settle_time=0)
    await watching.started()
    ti = FakeTI()
    task = fleet_op(
        False, deployment_names=sorted(ids), canary=1, wave_size=2, max_failures=2, analysis=tracing_analysis(count=4)
    )

    failed, _ = await asyncio.to_thread(run, task, ti, FakeStore())

    assert isinstance(failed, AirflowFailException) and "the canary failed" in str(failed), failed
    after = emulator.state.deployment(canary)
    bad = after["revisions"][1]["id"]  # the fleet's patch; the rollback's revision follows it
    restored = after["active_revision_id"]
    assert restored not in (bad, before) and after["status"] == "READY", after
    await wait_until(lambda: restored in watching.live(), timeout=10)  # the rollback's revision, once it serves
    await watching.stop()
    assert bad not in watching.live(), f"the rejected revision {bad} was announced: {watching.payloads}"
    assert watching.live() == [restored], watching.payloads
    (announced,) = [p for p in watching.payloads if p["kind"] == "revision_live"]
    assert announced["verdict"] == "rolled_back" and announced["judging"] is False, announced
    assert announced["judged_by"]["run_id"] == ti.run_id and announced["judged_by"]["try_number"] == 1, announced
    marks = store.data[JUDGING_KEY]["revisions"]
    assert marks[bad]["state"] == "rejected" and marks[restored]["state"] == "rolled_back"
    assert marks[restored]["rolled_back_from"] == bad
    states = [value["revisions"].get(bad, {}).get("state") for _, value in store.history]
    assert states[0] == "rolled_out" and "landed" not in states, states  # marked before it served, never landed
    assert "judging" in states, states  # under analysis


def test_a_fleet_row_is_landed_for_the_watchers_only_once_its_wave_is_done_and_never_when_rolled_back() -> None:
    from airflow_provider.tasks.publishing import fleet_marker_entries

    row = {
        "deployment_id": "d",
        "wave": "wave 1",
        "from_revision": "r1",
        "to_revision": "r2",
        "outcome": "landed",
        "started_at": 10.0,
        "finished_at": 20.0,
    }
    kinds = {phase: [item["kind"] for item in fleet_marker_entries(row, phase)] for phase in ("watched", "done")}
    assert kinds == {"watched": ["rolled_out", "judging"], "done": ["rolled_out", "landed"]}
    with_wave = {**row, "outcome": "rolled_back_with_wave", "rollback_revision": "r3", "rollback_decided": True}
    found = [(item["kind"], item["revision_id"]) for item in fleet_marker_entries(with_wave, "done")]
    assert found == [("rolled_out", "r2"), ("rolled_back", "r3")], found  # r2: rejected by its rollback's mark
