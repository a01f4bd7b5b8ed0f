"""A fleet wave's inconclusive analysis asks a person, under ``dag.test()`` (issue 32): the deferrable fleet task
parks in Airflow's ``awaiting_input`` state with its question written as a real HITL detail, the fleet tab shows the
open question with a link to Airflow's "Required actions" page, and the answer (recorded as the HITL REST endpoint
records it, ``tests.dag_runs.HumanResponder``) resumes the task from its progress record: "Promote" lands the canary
and the next wave is patched.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.emulator.tracing import tracing_base_url
from airflow_provider.plugins.rollouts.aborts import WAKE_SETTLE_SECONDS
from tests.conftest import CONN_ENV, connection_json
from tests.dag_runs import HumanResponder
from tests.tasks.conftest import seed

DAG_ID = "fleet_inconclusive_ask"
ABORT = "/deployment-service/api/fleet/abort"
THINKING_SECONDS = 1.0
"""How long after the task parks the admin aborts it: sooner than the view wakes a parked task
(``aborts.WAKE_SETTLE_SECONDS``), so the view wakes it later, from its timer."""
DAG = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import FleetRolloutOperator

with DAG("fleet_inconclusive_ask", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    FleetRolloutOperator(
        task_id="fleet", deployment_names=["app-0000", "app-0001"], canary=1, repo_ref="v2",
        rollback_on_failure=True, deferrable=True, poll_interval=0.1, timeout=60, retries=0,
        analysis=Analysis(
            checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)], interval_seconds=0.3, count=2,
            preflight=False,
        ),
        on_inconclusive="ask", response_timeout=timedelta(minutes=10),
    )
"""


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Two deployments serving traffic; the canary's (app-0000's) next revision serves none: inconclusive."""
    server = deployment_service_emulator_factory(data=seed(2), frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            server.base_url,
            server.api_key,
            backoff_initial=0.05,
            backoff_max=0.2,
            tracing_base_url=tracing_base_url(server.base_url),
        ),
    )
    server.state.add_behaviour_rule(repo_ref="*", requests_per_second=200.0)
    canary = server.state.find_deployment("app-0000")["id"]
    server.state.set_behaviour(canary, revision_id="next", requests_per_second=0.0)
    return server


def test_the_fleet_tab_shows_the_open_question_and_promote_goes_on_with_the_next_wave(
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    client = view(cookie=token("admin"))
    before = {name: emulator.state.find_deployment(name) for name in ("app-0000", "app-0001")}
    dag_file = tmp_path / f"{DAG_ID}.py"
    dag_file.write_text(textwrap.dedent(DAG))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    seen: dict[str, Any] = {}

    def look() -> None:
        seen["canary"] = emulator.state.find_deployment("app-0000")
        seen["next"] = emulator.state.find_deployment("app-0001")
        page = client.get(f"/deployment-service/api/deployments/{before['app-0000']['id']}").json()
        (running,) = page["running"]
        seen["row"] = running
        params = {"dag_id": DAG_ID, "run_id": running["run_id"], "task_id": "fleet", "map_index": -1}
        seen["fleet"] = client.get("/deployment-service/api/fleet", params=params).json()

    with HumanResponder(DAG_ID, "fleet", "Promote", before_answer=look, timeout=120) as human:
        run = bag.get_dag(DAG_ID).test()
    assert human.answered.is_set(), f"the question was never answered: {human.seen}"

    # While the task waited: the canary served its new revision, the next wave was not patched, the tab showed it.
    assert seen["canary"]["active_revision_id"] != before["app-0000"]["active_revision_id"]
    assert seen["next"]["latest_revision_id"] == before["app-0001"]["latest_revision_id"]
    assert seen["row"]["outcome"] == "asking"  # the deployment's page too, with the same link
    question = seen["fleet"]["question"]
    assert question["wave"] == "canary" and [item["name"] for item in question["deployments"]] == ["app-0000"]
    assert question["question_path"].startswith(f"/dags/{DAG_ID}/runs/")
    assert question["question_path"].endswith("/tasks/fleet/required_actions?map_index=-1")
    assert seen["row"]["question_path"] == question["question_path"]
    assert "canary" in str(human.subject) and "app-0000" in str(human.body)
    # The answer: the canary landed as it is, the next wave was patched and passed its analysis.
    assert str(run.state) == "success"
    for name in ("app-0000", "app-0001"):
        after = emulator.state.find_deployment(name)
        assert after["active_revision_id"] != before[name]["active_revision_id"] and after["status"] == "READY"
        assert after["source_revision_config"]["repo_ref"] == "v2"


class AbortWhenAsked:
    """From a thread: once the fleet task parks with its question, abort it from the fleet tab as ``client``'s user
    (``rollback`` mode). So that a run can never hang, a task still parked 30 s after the abort is failed (``seen``
    says so)."""

    def __init__(self, client: TestClient, timeout: float = 120) -> None:
        self.client, self.timeout = client, timeout
        self.answer: Any = None
        self.key: dict[str, Any] = {}
        self.ti_id: Any = None
        self.ignored: set[Any] = set()
        self.ignored = {self._parked()["id"]} if self._parked() is not None else set()  # an earlier test's
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _parked(self) -> dict[str, Any] | None:
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        with create_session() as session:
            query = select(TaskInstance).where(
                TaskInstance.dag_id == DAG_ID, TaskInstance.state == TaskInstanceState.AWAITING_INPUT
            )
            ti = next((ti for ti in session.scalars(query) if ti.id not in self.ignored), None)
            if ti is None or session.get(HITLDetail, ti.id) is None:
                return None
            key = {"dag_id": DAG_ID, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}
            return {**key, "id": ti.id}

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while (parked := self._parked()) is None:
            if time.monotonic() > deadline:
                self.seen.append(f"the task never asked within {self.timeout:g} s")
                return
            time.sleep(0.2)
        time.sleep(THINKING_SECONDS)
        key = {name: parked[name] for name in ("dag_id", "run_id", "task_id", "map_index")}
        self.answer = self.client.post(
            ABORT, json={**key, "mode": "rollback", "include_earlier": False, "request_id": "abort-asked-0001"}
        )
        self.key, self.ti_id = key, parked["id"]
        self._unhang(parked["id"])

    def _unhang(self, ti_id: Any) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.5)
            with create_session() as session:
                ti = session.get(TaskInstance, ti_id)
                if ti is None or ti.state != TaskInstanceState.AWAITING_INPUT:
                    return
        with create_session() as session:
            ti = session.get(TaskInstance, ti_id)
            if ti is not None and ti.state == TaskInstanceState.AWAITING_INPUT:
                ti.state = TaskInstanceState.FAILED
                self.seen.append("the task still waited 30 s after the abort; failed it")


def test_an_abort_from_the_view_answers_the_open_question_and_rolls_the_canary_back_at_once(
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    """The task waits for a person (``awaiting_input``, a response timeout of ten minutes); the admin aborts it from
    the fleet tab in ``rollback`` mode a second after it parked: the view answers the question "Roll back" in the
    admin's name and resumes the task once it has been parked ``WAKE_SETTLE_SECONDS`` (from its timer), which rolls
    the canary back and fails "aborted by admin"."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models import Log
    from airflow.models.hitl import HITLDetail
    from airflow.utils.session import create_session
    from sqlalchemy import select

    client = view(cookie=token("admin"))
    before = {name: emulator.state.find_deployment(name) for name in ("app-0000", "app-0001")}
    dag_file = tmp_path / f"{DAG_ID}.py"
    dag_file.write_text(textwrap.dedent(DAG))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    aborts = AbortWhenAsked(client)
    aborts.thread.start()
    started = time.monotonic()
    run = bag.get_dag(DAG_ID).test()
    aborts.thread.join(timeout=40)
    assert not aborts.seen, (aborts.seen, aborts.answer and aborts.answer.text)
    assert aborts.answer is not None and aborts.answer.status_code == 200, aborts.answer
    answer = aborts.answer.json()  # parked a second ago: woken from the view's timer once parked long enough
    assert answer["woken"] is None and 0 < answer["wakes_in"] <= WAKE_SETTLE_SECONDS, answer
    assert time.monotonic() - started < 300  # the ten-minute response timeout was not waited out

    assert str(run.state) == "failed"
    canary = emulator.state.find_deployment("app-0000")
    assert canary["source_revision_config"]["repo_ref"] != "v2" and canary["status"] == "READY", canary
    assert canary["active_revision_id"] == canary["latest_revision_id"] != before["app-0000"]["active_revision_id"]
    assert emulator.state.find_deployment("app-0001")["latest_revision_id"] == before["app-0001"]["latest_revision_id"]
    with create_session() as session:
        detail = session.get(HITLDetail, aborts.ti_id)
        assert detail.chosen_options == ["Roll back"] and detail.responded_by["name"] == "admin"
        audit = select(Log).where(Log.event == "deployment_service.abort", Log.run_id == aborts.key["run_id"])
        (entry,) = session.scalars(audit).all()
        assert entry.owner == "admin" and '"wakes_in": ' in str(entry.extra), entry.extra
    shown = client.get("/deployment-service/api/fleet", params=aborts.key).json()
    assert shown["stopped"].startswith("aborted by admin from the Rollouts view"), shown["stopped"]
    outcomes = {row["name"]: row["outcome"] for wave in shown["waves"] for row in wave["rows"]}
    assert outcomes == {"app-0000": "rolled_back", "app-0001": "not_patched"}, outcomes
