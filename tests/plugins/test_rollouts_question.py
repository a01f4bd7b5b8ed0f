"""An inconclusive analysis asks a person, under ``dag.test()`` (issue 32): the patch task parks in Airflow's
``awaiting_input`` state with its question written as a real HITL detail, the Rollouts view shows the open question
with a link to Airflow's "Required actions" page, and the answer (recorded as the HITL REST endpoint records it,
``tests.dag_runs.HumanResponder``) resumes the task, which does what it says to the deployment.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.conftest import CONN_ENV, connection_json
from tests.dag_runs import HumanResponder

NAME = "checkout-api-staging"
OLD_IMAGE_PREFIX = "registry.example.com/acme/checkout-api:"
NEW_IMAGE = "registry.example.com/acme/checkout-api:9.8.0"
DAG = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

with DAG("inconclusive_ask", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(
        task_id="patch", deployment_id={deployment_id!r}, image_uri={image!r},
        wait_for_rollout=True, deferrable=True, rollback_on_failure=True, poll_interval=0.2, timeout=60, retries=0,
        analysis=Analysis(
            checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")], interval_seconds=0.3, count=2,
            preflight=False,  # the serving revision has no traffic either: this test is about the verdict
        ),
        on_inconclusive="ask", response_timeout=timedelta(minutes=10),
    )
"""


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    server = deployment_service_emulator_factory(frozen_clock=False, build_seconds=1.0, ready_seconds=0.5)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.05, backoff_max=0.2)
    )
    deployment_id = server.admin.find_deployment(NAME)["id"]
    server.admin.set_behaviour(deployment_id, revision_id="next", requests_per_second=200, error_rate=0.0)
    # The tracing service answers 503 to every stats request: the analysis is inconclusive.
    server.admin.add_fault(kind="status", method="POST", path="/tracing/runs/stats", status_code=503, count=None)
    return server


def run_answered(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: TestClient, choice: str
) -> dict[str, Any]:
    """Run the DAG with ``dag.test()``; answer ``choice`` once the task asks, after reading the view and the
    deployment. Returns what was seen."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    before = emulator.admin.find_deployment(NAME)
    dag_file = tmp_path / "inconclusive_ask.py"
    dag_file.write_text(textwrap.dedent(DAG).format(deployment_id=before["id"], image=NEW_IMAGE))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    seen: dict[str, Any] = {"before": before}

    def look() -> None:
        seen["asking"] = emulator.admin.find_deployment(NAME)
        seen["page"] = client.get(f"/deployment-service/api/deployments/{before['id']}").json()

    with HumanResponder("inconclusive_ask", "patch", choice, before_answer=look, timeout=120) as human:
        run = bag.get_dag("inconclusive_ask").test()
    assert human.answered.is_set(), f"the question was never answered: {human.seen}"
    seen.update(
        state=str(run.state),
        run_id=run.run_id,
        subject=human.subject,
        body=human.body,
        after=emulator.admin.find_deployment(NAME),
        page_after=client.get(f"/deployment-service/api/deployments/{before['id']}").json(),
    )
    return seen


def marks_of(page: dict[str, Any], revision_id: str, run_id: str) -> list[tuple[str, str]]:
    return [
        (mark["role"], mark["label"])
        for revision in page["revisions"]
        if revision["id"] == revision_id
        for mark in revision["rollouts"]
        if mark["run_id"] == run_id
    ]


def test_the_view_shows_the_open_question_and_roll_back_rolls_back(
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    seen = run_answered(emulator, tmp_path, monkeypatch, view(cookie=token("admin")), "Roll back")

    # While the task waited: the new revision served, and the view showed the open question with its link.
    new = seen["asking"]["active_revision_id"]
    assert (
        new != seen["before"]["active_revision_id"]
        and seen["asking"]["source_revision_config"]["image_uri"] == NEW_IMAGE
    )
    (running,) = seen["page"]["running"]
    assert running["outcome"] == "asking" and running["revision_id"] == new
    assert (
        running["question_path"]
        == f"/dags/inconclusive_ask/runs/{quote(running['run_id'], safe='')}/tasks/patch/required_actions?map_index=-1"
    )
    assert marks_of(seen["page"], new, running["run_id"]) == [
        ("asking", "waiting for a person (analysis inconclusive)")
    ]
    assert new in seen["subject"] and "tracing error_rate" in seen["body"] and "503" in seen["body"]
    # The answer: rolled back, in the emulator and in the record.
    assert seen["state"] == "failed"
    after = seen["after"]
    assert after["active_revision_id"] != new and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"].startswith(OLD_IMAGE_PREFIX)
    assert after["source_revision_config"]["image_uri"] != NEW_IMAGE
    assert seen["page_after"]["running"] == []
    assert marks_of(seen["page_after"], new, seen["run_id"]) == [("rejected", "rejected (analysis inconclusive)")]
    [rollout] = [
        r
        for rev in seen["page_after"]["revisions"]
        for r in rev["rollouts"]
        if r["run_id"] == seen["run_id"] and r["role"] == "rejected"
    ]
    assert "'Roll back', chosen by release-manager" in rollout["message"]


def test_promote_lands_the_revision(
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    seen = run_answered(emulator, tmp_path, monkeypatch, view(cookie=token("admin")), "Promote")

    new = seen["asking"]["active_revision_id"]
    assert seen["state"] == "success"
    assert (
        seen["after"]["active_revision_id"] == new and seen["after"]["source_revision_config"]["image_uri"] == NEW_IMAGE
    )
    assert marks_of(seen["page_after"], new, seen["run_id"]) == [("landed", "landed")]
