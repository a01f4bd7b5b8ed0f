"""Approving a fleet rollout from the Rollouts view (issue 32): ``rollouts_view_approval`` (the browser test's DAG:
an approval gate, then a fleet of two deployments no other test of the view touches) runs with ``dag.test()``
against the emulator and stops at its approval gate; a viewer's answer is refused (403), the admin's answer through
the view resumes it (Airflow's human-in-the-loop mechanism), the fleet rolls out, the audit log and the fleet tab
name the admin, and a second answer changes nothing (409)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import CONN_ENV, REPO_ROOT, connection_json

API_KEY = "rollouts-approvals-Distinctive-Key-2b8d"
DAG_ID = "rollouts_view_approval"
FLEET = ("inventory-sync-dev", "inventory-sync-sandbox")
DAGS = REPO_ROOT / "tests" / "plugins" / "dags"


class ViewAnswers:
    """From a thread: wait for the approval gate to ask, then answer it through the view as a viewer and as admin."""

    def __init__(self, viewer: TestClient, admin: TestClient, timeout: float = 90) -> None:
        self.viewer, self.admin, self.timeout = viewer, admin, timeout
        self.answers: dict[str, Any] = {}
        self.body: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _waiting(self) -> Any:
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        with create_session() as session:
            ti = session.scalar(
                select(TaskInstance).where(
                    TaskInstance.dag_id == DAG_ID,
                    TaskInstance.task_id == "approve_rollout",
                    TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                )
            )
            if ti is None or session.get(HITLDetail, ti.id) is None:
                return None
            return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            key = self._waiting()
            if key is not None:
                self.body = {**key, "option": "Approve"}
                self.answers["fleet_before"] = self.admin.get(
                    "/deployment-service/api/fleet", params={**key, "task_id": "roll_out"}
                ).json()
                self.answers["viewer"] = self.viewer.post("/deployment-service/api/approvals", json=self.body)
                self.answers["bad_option"] = self.admin.post(
                    "/deployment-service/api/approvals", json={**self.body, "option": "Maybe"}
                )
                self.answers["admin"] = self.admin.post("/deployment-service/api/approvals", json=self.body)
                return
            time.sleep(0.2)
        self.answers["timeout"] = True


def test_an_admin_approves_a_waiting_fleet_rollout_from_the_view(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    server = deployment_service_emulator_factory(
        api_key=API_KEY, frozen_clock=False, build_seconds=0.5, ready_seconds=0.2
    )
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, API_KEY, backoff_initial=0.05, backoff_max=0.2))
    admin, viewer = view(cookie=token("admin")), view(cookie=token("viewer"))
    answers = ViewAnswers(viewer, admin)
    answers.thread.start()
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(DAGS))
    bag = DagBag(dag_folder=str(DAGS / f"{DAG_ID}.py"))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(DAG_ID).test()
    state, tasks = str(run.state), {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    answers.thread.join(timeout=10)
    assert "timeout" not in answers.answers, f"the approval gate never asked: {tasks}"
    # the viewer may read the DAG but not answer its approvals: refused, nothing answered
    assert answers.answers["viewer"].status_code == 403, answers.answers["viewer"].text
    assert (
        "Maybe" in answers.answers["bad_option"].json()["detail"] and answers.answers["bad_option"].status_code == 422
    )
    approved = answers.answers["admin"]
    assert approved.status_code == 200, approved.text
    assert approved.json() == {
        "task_id": "approve_rollout",
        "chosen_options": ["Approve"],
        "responded_by": "admin",
        "resumed": True,
    }
    # the fleet tab offered the answer while it waited
    [waiting] = answers.answers["fleet_before"]["approvals"]
    assert waiting["chosen_options"] is None and waiting["may_answer"] is True

    assert state == "success", tasks
    assert tasks["approve_rollout"] == "success" and tasks["roll_out"] == "success"
    for name in FLEET:  # the fleet rolled out after the admin's approval
        served = server.admin.find_deployment(name)
        assert served["source_revision_config"]["repo_ref"] == "v5.0.0", served
        assert served["active_revision_id"] == served["latest_revision_id"]

    body = answers.body
    fleet = admin.get("/deployment-service/api/fleet", params={**body, "task_id": "roll_out"}).json()
    [approval] = fleet["approvals"]
    assert (approval["responded_by"], approval["chosen_options"], approval["may_answer"]) == (
        "admin",
        ["Approve"],
        False,
    )
    again = admin.post("/deployment-service/api/approvals", json=body)
    assert again.status_code == 409 and "answered already" in again.json()["detail"]

    from airflow.models import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        logs = list(
            session.scalars(select(Log).where(Log.event == "deployment_service.approval", Log.run_id == body["run_id"]))
        )
        [entry] = [(log.owner, log.task_id, json.loads(log.extra)["option"]) for log in logs]
    assert entry == ("admin", "approve_rollout", "Approve")
