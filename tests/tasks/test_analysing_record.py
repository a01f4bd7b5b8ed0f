"""A revision under analysis reads "analysing" with its measurements so far (issue 30): the patch task analysing
on the worker records its judging entry round by round (one write per round), never "landed" before its verdict,
and the Rollouts view's history and marks show that entry as the record holds it at that moment."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from airflow_provider.plugins.rollouts.credits import history_rollout, revision_marks
from airflow_provider.plugins.rollouts.history import TaskHistory
from airflow_provider.record import RECORD_KEY, entries_of
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
