"""A revision under analysis reads "analysing" with its measurements so far (issue 30): the patch task analysing
on the worker records its judging entry round by round (one write per round), never "landed" before its verdict,
and the Rollouts view's history and marks show that entry as the record holds it at that moment."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from airflow_provider.decisions.record import RECORD_KEY, entries_of
from airflow_provider.plugins.rollouts.credits import history_rollout, revision_marks
from airflow_provider.plugins.rollouts.history import TaskHistory
from tests.tasks.conftest import FakeStore, FakeTI
from tests.tasks.test_patch_analysis import (
    TRAFFIC,
    analysis_of,
    context_with_events,
    emulator,  # noqa: F401 - the fixture
    health_check,
    patch_op,
    svc,
)


class SnapshotStore(FakeStore):
    """``task_state_store`` keeping the record as each write left it."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[list[dict[str, Any]]] = []

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        if key == RECORD_KEY:
            self.snapshots.append(entries_of(json.loads(json.dumps(value))))


def test_the_patch_task_records_each_round_and_the_view_shows_analysing_with_the_measurements(emulator: Any) -> None:  # noqa: F811
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    ti, store = FakeTI(), SnapshotStore()
    task = patch_op(emulator, deferrable=False, analysis=analysis_of(health_check(emulator), count=4))

    task.execute(context_with_events(ti, store))

    revision = ti.xcoms["revision_id"]
    assert svc(emulator)["active_revision_id"] == revision  # landed: it serves
    newest = [snapshot[-1] for snapshot in store.snapshots]
    analysing = [item for item in newest if item["kind"] == "judging" and "verdict" in item]
    assert [item["verdict"]["measurements_total"] for item in analysing] == [1, 2, 3, 4], "one write per round"
    assert all(item["verdict"]["verdict"] == "analysing" for item in analysing)
    first_landed = next(index for index, item in enumerate(newest) if item["kind"] == "landed")
    last_round = max(index for index, item in enumerate(newest) if item in analysing)
    assert first_landed > last_round, "landed was recorded before the analysis' verdict"

    # The view, reading the record as it was during round 2 (the task still running).
    during = next(s for s in store.snapshots if s[-1].get("verdict", {}).get("measurements_total") == 2)
    history = TaskHistory("dag", "run", "patch", -1, deployment_id, "record", during, datetime.now(timezone.utc))
    rollout = history_rollout(history, running=True, detailed=True)
    assert (rollout["outcome"], rollout["revision_id"]) == ("analysing", revision)
    assert rollout["analysis"]["verdict"] == "analysing" and rollout["analysis"]["round"] == 2
    assert len(rollout["analysis"]["measurements"]) == 2 and rollout["analysis"]["measurements_total"] == 2
    assert "round 2 · app health" in rollout["analysis"]["measurements"][-1]
    [mark] = revision_marks(revision, [rollout])
    assert (mark["role"], mark["label"]) == ("analysing", "analysing")
    assert mark["analysis"]["measurements"] == rollout["analysis"]["measurements"]
    hidden = history_rollout(history, running=True, detailed=False)  # without the fleet tab's access
    assert hidden["outcome"] == "analysing" and hidden["analysis"] is None


def test_the_analysis_gate_records_each_round_and_the_view_shows_analysing_with_the_measurements(
    emulator: Any,  # noqa: F811
) -> None:
    """``DeploymentAnalysisOperator`` on the worker: each round's measurements in the record while it runs, so the
    view shows the gate's revision "analysing" with them, then "passed"."""
    from airflow_provider.operators.analysis import DeploymentAnalysisOperator

    before = svc(emulator)
    deployment_id, revision = before["id"], before["active_revision_id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    ti, store = FakeTI(), SnapshotStore()
    gate = DeploymentAnalysisOperator(
        task_id="gate",
        analysis=analysis_of(health_check(emulator), count=3, preflight=False),
        deployment_ids=deployment_id,
        deferrable=False,
    )

    result = gate.execute(context_with_events(ti, store))

    assert result["svc"]["verdict"] == "passed" and svc(emulator)["active_revision_id"] == revision
    newest = [snapshot[-1] for snapshot in store.snapshots]
    analysing = [item for item in newest if item["kind"] == "judging" and "verdict" in item]
    assert [item["verdict"]["measurements_total"] for item in analysing] == [1, 2, 3], "one write per round"
    assert newest[-1]["kind"] == "passed" and newest[-1]["revision_id"] == revision

    during = next(s for s in store.snapshots if s[-1].get("verdict", {}).get("measurements_total") == 2)
    history = TaskHistory("dag", "run", "gate", -1, deployment_id, "record", during, datetime.now(timezone.utc))
    rollout = history_rollout(history, running=True, detailed=True)
    assert (rollout["outcome"], rollout["revision_id"]) == ("analysing", revision)
    assert rollout["analysis"]["round"] == 2 and len(rollout["analysis"]["measurements"]) == 2
    [mark] = revision_marks(revision, [rollout])
    assert (mark["role"], mark["label"]) == ("analysing", "analysing")


def test_a_deferred_analysis_shows_analysing_with_the_rounds_the_trigger_measured(
    emulator: Any,  # noqa: F811
    monkeypatch: Any,
) -> None:
    """``deferrable=True``: the rounds run in the triggerer, which cannot write the task's record; the trigger writes
    each round to the deployment's judging marker (its asset state store) and the view reads it with the record:
    after 2 rounds, before the verdict, "analysing" with 2 measurements."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider.decisions.judging_marker import JUDGING_KEY
    from airflow_provider.plugins.rollouts.history import with_rounds_measured
    from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
    from tests.tasks.test_watcher_settling import AssetStore, shared_store

    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    marker = shared_store(monkeypatch, deployment_id, AssetStore())
    assert marker is not None
    ti, store = FakeTI(), SnapshotStore()
    context = context_with_events(ti, store)
    task = patch_op(emulator, deferrable=True, analysis=analysis_of(health_check(emulator), count=4))
    seen: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []  # (the task's record, the marker) per marker write
    original = marker.set

    def watched_set(key: str, value: Any) -> None:
        original(key, value)
        if key == JUDGING_KEY:
            seen.append((entries_of(store.get(RECORD_KEY)), json.loads(json.dumps(value))))

    marker.set = watched_set  # type: ignore[method-assign]

    async def first_event(trigger: Any) -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    def resume(method: str, event: dict[str, Any]) -> Any:
        return getattr(
            patch_op(emulator, deferrable=True, analysis=analysis_of(health_check(emulator), count=4)), method
        )(context, event)

    step: Any = lambda: task.execute(context)  # noqa: E731
    while True:  # the rollout's wait, then the analysis, each in its trigger (rebuilt from its JSON)
        try:
            step()
            raise AssertionError("the analysis was expected to defer")
        except TaskDeferred as deferred:
            _path, kwargs = deferred.trigger.serialize()
            trigger = type(deferred.trigger)(**json.loads(json.dumps(kwargs)))
            method = deferred.method_name
        if isinstance(trigger, DeploymentAnalysisTrigger):
            break
        event = asyncio.run(asyncio.wait_for(first_event(trigger), 30))
        step = lambda method=method, event=event: resume(method, event)  # noqa: E731
    assert trigger.judging["by"]["run_id"] == ti.run_id, trigger.judging
    trigger.judging_store = lambda name: marker if name.endswith(deployment_id) else None
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 30))
    revision = ti.xcoms["revision_id"]
    rounds = [
        value["revisions"][revision].get("analysis", {}).get("round")
        for _record, value in seen
        if revision in value["revisions"]
    ]
    assert [number for number in rounds if number] == [1, 2, 3, 4], rounds  # one marker write per round

    # The view after round 2, before the verdict: the task's record (judging, no measurements) and the marker.
    record, value = next(
        (record, value) for record, value in seen if value["revisions"][revision].get("analysis", {}).get("round") == 2
    )
    assert not [item for item in record if item["kind"] in ("landed", "rejected")]
    assert not [item.get("verdict") for item in record if item["kind"] == "judging" and item.get("verdict")]
    history = TaskHistory(
        ti.dag_id, ti.run_id, ti.task_id, ti.map_index, deployment_id, "record", record, datetime.now(timezone.utc)
    )
    [shown] = with_rounds_measured([history], {deployment_id: value})
    rollout = history_rollout(shown, running=True, detailed=True)
    assert (rollout["outcome"], rollout["revision_id"]) == ("analysing", revision)
    assert rollout["analysis"]["verdict"] == "analysing" and rollout["analysis"]["round"] == 2
    assert len(rollout["analysis"]["measurements"]) == 2 and rollout["analysis"]["measurements_total"] == 2
    assert "round 2 · app health" in rollout["analysis"]["measurements"][-1]
    [mark] = revision_marks(revision, [rollout])
    assert (mark["role"], mark["label"]) == ("analysing", "analysing")
    other = TaskHistory("dag", "another_run", "patch", -1, deployment_id, "record", record, datetime.now(timezone.utc))
    [unrelated] = with_rounds_measured([other], {deployment_id: value})  # another task's rounds are not its own
    assert history_rollout(unrelated, running=True, detailed=True)["analysis"] is None

    # The verdict: the task resumes, lands the revision; the marker then holds no rounds.
    resume(method, event)
    assert svc(emulator)["active_revision_id"] == revision
    final = marker.data[JUDGING_KEY]["revisions"][revision]
    assert final["state"] == "landed" and "analysis" not in final
