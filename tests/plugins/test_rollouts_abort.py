"""Aborting a running fleet rollout from the Rollouts view (issue 32): ``rollouts_view_abort`` runs with
``dag.test()`` against the emulator; while its wave 1 bakes, a viewer's abort is refused (403), the admin's is
recorded in the task's ``task_state_store`` (a second request with the same ``request_id`` changes nothing,
another is a 409), the running task takes it, rolls the current wave and the canary back, and fails "aborted by
admin from the Rollouts view"; the emulator, the audit log and the fleet tab agree."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import CONN_ENV, REPO_ROOT, connection_json

API_KEY = "rollouts-abort-Distinctive-Key-7c1e"
DAG_ID = "rollouts_view_abort"
FLEET = ("onboarding-flow-pr-107", "fraud-detector-pr-114", "ledger-service-pr-226")
DAGS = REPO_ROOT / "tests" / "plugins" / "dags"
ABORT = "/deployment-service/api/fleet/abort"


class ViewAborts:
    """From a thread: wait until wave 1 is patched, then abort through the view as a viewer and as admin."""

    def __init__(self, viewer: TestClient, admin: TestClient, timeout: float = 90) -> None:
        self.viewer, self.admin, self.timeout = viewer, admin, timeout
        self.answers: dict[str, Any] = {}
        self.key: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _wave_one_patched(self) -> dict[str, Any] | None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        with create_session() as session:
            ti = session.scalar(
                select(TaskInstance).where(
                    TaskInstance.dag_id == DAG_ID,
                    TaskInstance.task_id == "roll_out",
                    TaskInstance.state == TaskInstanceState.RUNNING,
                )
            )
            if ti is None:
                return None
            key = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}
        shown = self.admin.get("/deployment-service/api/fleet", params=key).json()
        waves = shown.get("waves") or []
        if len(waves) > 1 and any(row.get("to_revision") for row in waves[1]["rows"]):
            self.answers["fleet_before"] = shown
            return key
        return None

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            key = self._wave_one_patched()
            if key is not None:
                self.key = key
                body = {**key, "mode": "rollback", "include_earlier": True, "request_id": "abort-req-0001"}
                self.answers["viewer_offer"] = self.viewer.get("/deployment-service/api/fleet", params=key).json()
                self.answers["viewer"] = self.viewer.post(ABORT, json=body)
                self.answers["bad_mode"] = self.admin.post(ABORT, json={**body, "mode": "pause"})
                self.answers["admin"] = self.admin.post(ABORT, json=body)
                self.answers["again"] = self.admin.post(ABORT, json=body)
                self.answers["other"] = self.admin.post(ABORT, json={**body, "request_id": "abort-req-0002"})
                return
            time.sleep(0.2)
        self.answers["timeout"] = True


def test_an_admin_aborts_a_running_fleet_rollout_from_the_view(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    server = deployment_service_emulator_factory(
        api_key=API_KEY, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1
    )
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, API_KEY, backoff_initial=0.05, backoff_max=0.2))
    before = {name: server.admin.find_deployment(name)["active_revision_id"] for name in FLEET}
    admin, viewer = view(cookie=token("admin")), view(cookie=token("viewer"))
    aborts = ViewAborts(viewer, admin)
    aborts.thread.start()
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(DAGS))
    bag = DagBag(dag_folder=str(DAGS / f"{DAG_ID}.py"))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(DAG_ID).test()
    state, tasks = str(run.state), {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    aborts.thread.join(timeout=10)
    answers = aborts.answers
    assert "timeout" not in answers, f"wave 1 was never seen patched: {tasks}"

    # the confirmation named what would change
    offer = answers["fleet_before"]["abort"]
    assert offer["allowed"] and offer["available"], offer
    assert offer["preview"]["not_started"] == [FLEET[2]]
    assert offer["preview"]["rolled_back"] == [FLEET[1]]
    assert offer["preview"]["rolled_back_with_earlier"] == [FLEET[0], FLEET[1]]
    # a viewer may read the DAG but not abort it; a mode that does not exist is refused, naming the field
    assert answers["viewer_offer"]["abort"]["allowed"] is False  # the tab shows the viewer no button
    assert answers["viewer"].status_code == 403, answers["viewer"].text
    assert answers["bad_mode"].status_code == 422 and "mode" in answers["bad_mode"].json()["detail"]
    assert answers["admin"].status_code == 200, answers["admin"].text
    assert answers["admin"].json()["requested_by"] == "admin" and not answers["admin"].json()["already_requested"]
    # the answer's preview is read with the request written: nothing in flight (wave 1 bakes), one not started
    recorded = answers["admin"].json()
    assert recorded["preview"]["not_started"] == [FLEET[2]] and recorded["preview"]["in_flight"] == []
    assert recorded["in_flight"] == []
    assert answers["again"].status_code == 200 and answers["again"].json()["already_requested"]
    assert answers["other"].status_code == 409 and "already aborted by admin" in answers["other"].json()["detail"]

    # carried out by the running task: it failed, the canary and wave 1 serve what they served before
    assert state == "failed" and tasks["roll_out"] == "failed", tasks
    for name in FLEET[:2]:
        served = server.admin.find_deployment(name)
        assert served["active_revision_id"] == served["latest_revision_id"] != before[name]
        assert served["source_revision_config"]["repo_ref"] != "v9.9.9", served
    untouched = server.admin.find_deployment(FLEET[2])
    assert untouched["active_revision_id"] == before[FLEET[2]] == untouched["latest_revision_id"]

    # the audit log names the admin, once
    from airflow.models import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        entries = session.scalars(
            select(Log).where(Log.event == "deployment_service.abort", Log.run_id == aborts.key["run_id"])
        ).all()
        assert [(entry.owner, entry.task_id) for entry in entries] == [("admin", "roll_out")]

    # the fleet tab says who aborted and what was rolled back
    shown = admin.get("/deployment-service/api/fleet", params=aborts.key).json()
    assert shown["stopped"].startswith("aborted by admin from the Rollouts view")
    assert shown["abort"]["taken"]["requested_by"] == "admin" and shown["abort"]["taken"]["rollback_waves"] == [0, 1]
    assert not shown["abort"]["available"] and "aborted by admin" in shown["abort"]["why"]
    # ... and what a clear does: the try that carried the abort out is recorded, a clear ends at once (issue 40)
    assert shown["abort"]["taken"]["ended_try"] == 1
    assert "A clear does not lift an abort" in shown["abort"]["cleared"]
    assert "trigger a new DAG run" in answers["other"].json()["detail"]
    outcomes = {row["name"]: row["outcome"] for wave in shown["waves"] for row in wave["rows"]}
    assert outcomes == {FLEET[0]: "rolled_back_with_wave", FLEET[1]: "rolled_back_with_wave", FLEET[2]: "not_patched"}
