"""A fleet wave's inconclusive analysis asks a person, under ``dag.test()`` (issue 32): the deferrable fleet task
parks in Airflow's ``awaiting_input`` state with its question written as a real HITL detail, the fleet tab shows the
open question with a link to Airflow's "Required actions" page, and the answer (recorded as the HITL REST endpoint
records it, ``tests.dag_runs.HumanResponder``) resumes the task from its progress record: "Promote" lands the canary
and the next wave is patched.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.emulator.tracing import tracing_base_url
from tests.conftest import CONN_ENV, connection_json
from tests.dag_runs import HumanResponder
from tests.tasks.conftest import seed

DAG_ID = "fleet_inconclusive_ask"
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
