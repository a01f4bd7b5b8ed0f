"""Actions in the Rollouts view (issue 32): "Roll back to this revision" end to end, in process.

A rollout through the service's own API gives a deployment of the emulator a second revision; the admin asks the
view to roll back to the first one; the view triggers a run of the provider-shipped rollback DAG for them (and
writes Airflow's audit log); the run is then executed with ``dag.test()`` (the very run the view created: its conf
and its triggering user), and the emulator serves the first revision's build again, the task's record names the
admin, and the deployment's page says "rolled back to by admin from the Rollouts view". Users without the access
get a 403 and no button; bad input a 422 naming the field, before anything is triggered.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import CONN_ENV, REPO_ROOT, connection_json

API_KEY = "rollouts-actions-Distinctive-Key-7f2e"
NAME = "pricing-engine-sandbox"
"""A docker deployment no other test of the view rolls out (the metadata database is shared by a session's tests,
and the emulator's example data keeps its ids: another test's record of it would change what the view shows)."""
ROLLBACK_DAG_FILE = REPO_ROOT / "example_dags" / "rollouts_view_rollback.py"


@dataclass
class Rolled:
    """The deployment after a real rollout: the revision that served before it, and the one serving now."""

    emulator: Any
    deployment_id: str
    old_revision: str
    new_revision: str
    old_image: str


def _sync_dags() -> None:
    """Serialize the DAGs folder's DAGs (the rollback DAG among them), as the DAG processor would."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


@pytest.fixture(scope="module")
def rolled(airflow_db: str) -> Iterator[Rolled]:
    from airflow_provider.emulator.server import EmulatorServer

    server = EmulatorServer(api_key=API_KEY, frozen_clock=False, build_seconds=0.5, ready_seconds=0.2).start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(CONN_ENV, connection_json(server.base_url, API_KEY, backoff_initial=0.05, backoff_max=0.2))
            before = server.admin.find_deployment(NAME)
            patched = httpx.patch(  # a rollout through the service's own API (not Airflow's)
                f"{server.base_url}/v2/deployments/{before['id']}",
                json={"source_revision_config": {"image_uri": "registry.example.com/acme/pricing-engine:4.5.6"}},
                headers={"X-Api-Key": API_KEY},
                timeout=10,
            )
            assert patched.status_code < 300, patched.text
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                live = server.admin.find_deployment(NAME)
                if live["active_revision_id"] == live["latest_revision_id"] != before["active_revision_id"]:
                    break
                time.sleep(0.1)
            after = server.admin.find_deployment(NAME)
            assert after["active_revision_id"] != before["active_revision_id"]
            _sync_dags()
            yield Rolled(
                server,
                after["id"],
                before["active_revision_id"],
                after["active_revision_id"],
                before["source_revision_config"]["image_uri"],
            )
    finally:
        server.stop()


@pytest.fixture
def connected(rolled: Rolled, monkeypatch: pytest.MonkeyPatch) -> Rolled:
    monkeypatch.setenv(CONN_ENV, connection_json(rolled.emulator.base_url, API_KEY, backoff_initial=0.05))
    return rolled


def _post(client: TestClient, rolled: Rolled, **body: Any) -> Any:
    payload = {
        "conn_id": "deployment_service_default",
        "revision_id": rolled.old_revision,
        "rolling_back_from": rolled.new_revision,
        "request_id": str(uuid.uuid4()),
        **body,
    }
    return client.post(f"/deployment-service/api/deployments/{rolled.deployment_id}/rollback", json=payload)


def _rollback_runs() -> list[Any]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider.plugins.rollouts.paths import ROLLBACK_DAG_ID

    with create_session() as session:
        runs = list(session.scalars(select(DagRun).where(DagRun.dag_id == ROLLBACK_DAG_ID)))
        session.expunge_all()
        return runs


def _audit(run_id: str) -> list[Any]:
    from airflow.models import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = list(session.scalars(select(Log).where(Log.run_id == run_id)))
        session.expunge_all()
        return rows


def _execute(run_id: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run the queued run the view created with ``dag.test()`` (its conf and triggering user, not a new run's)."""
    import airflow.models.dagrun as dagrun_module
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    def the_views_run(*, dag: Any, session: Any, **_: Any) -> Any:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id)).one()
        run.state = DagRunState.RUNNING
        run.start_date = timezone.utcnow()
        session.commit()
        run.dag = dag
        return run

    monkeypatch.setattr(dagrun_module, "get_or_create_dagrun", the_views_run)
    bag = DagBag(dag_folder=str(ROLLBACK_DAG_FILE))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag("deployment_service_rollback").test(logical_date=None)


def _record(run_id: str) -> list[dict[str, Any]]:
    from airflow.utils.session import create_session

    from airflow_provider.plugins.rollouts.history import task_histories

    with create_session() as session:
        found = task_histories(session, ["deployment_service_rollback"])
    return [entry for item in found if item.key[1] == run_id for entry in item.entries]


def test_a_viewer_and_a_user_see_no_rollback_button_and_get_403(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    runs_before = len(_rollback_runs())
    for role in ("viewer", "user"):
        client = view(cookie=token(role))
        answer = _post(client, connected)
        assert answer.status_code == 403, (role, answer.text)
        # viewer and user may not read the connection at all: the page itself is refused them
        page = client.get(f"/deployment-service/api/deployments/{connected.deployment_id}")
        assert page.status_code == 403
    assert len(_rollback_runs()) == runs_before
    assert connected.emulator.admin.find_deployment(NAME)["active_revision_id"] == connected.new_revision


def test_the_page_offers_the_rollback_to_those_who_may(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    page = view(cookie=token("admin")).get(f"/deployment-service/api/deployments/{connected.deployment_id}")
    assert page.status_code == 200, page.text
    assert page.json()["actions"]["rollback"] == {
        "allowed": True,
        "available": True,
        "dag_id": "deployment_service_rollback",
        "why": "",
    }
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    # an auth manager that lets op read the connection but not edit it: no button, and 403
    original = SimpleAuthManager.is_authorized_connection

    def read_only(self: Any, *, method: str, user: Any, details: Any = None) -> bool:
        return method == "GET" and original(self, method=method, user=user, details=details)

    monkeypatch.setattr(SimpleAuthManager, "is_authorized_connection", read_only)
    op = view(cookie=token("op"))
    offered = op.get(f"/deployment-service/api/deployments/{connected.deployment_id}").json()["actions"]["rollback"]
    assert offered["allowed"] is False
    assert "edit access to connection 'deployment_service_default'" in offered["why"]
    refused = _post(op, connected)
    assert refused.status_code == 403 and "edit access to connection" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"revision_id": "not-a-uuid"}, "revision_id"),
        ({"rolling_back_from": "1234"}, "rolling_back_from"),
        ({"request_id": "x"}, "request_id"),
        ({"conn_id": "bad conn"}, "conn_id"),
        ({"revison_id": "typo"}, "revison_id"),
    ],
)
def test_bad_input_is_refused_naming_the_field_before_anything_runs(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str], body: Any, field: str
) -> None:
    runs_before = len(_rollback_runs())
    answer = _post(view(cookie=token("admin")), connected, **body)
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["detail"]
    assert len(_rollback_runs()) == runs_before


def test_a_rollback_to_the_revision_that_serves_is_refused(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    answer = _post(view(cookie=token("admin")), connected, revision_id=connected.new_revision)
    assert answer.status_code == 409 and "already serves" in answer.json()["detail"]


def test_a_form_post_is_refused(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    client = view(cookie=token("admin"))
    answer = client.post(
        f"/deployment-service/api/deployments/{connected.deployment_id}/rollback",
        data={"conn_id": "deployment_service_default", "revision_id": connected.old_revision, "request_id": "a" * 16},
    )
    assert answer.status_code == 415


def test_admin_rolls_back_from_the_view_and_the_record_and_the_view_name_them(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = view(cookie=token("admin"))
    request_id = str(uuid.uuid4())
    answer = _post(client, connected, request_id=request_id)
    assert answer.status_code == 200, answer.text
    run = answer.json()
    assert run["dag_id"] == "deployment_service_rollback" and run["requested_by"] == "admin"
    assert run["run_id"] == f"rollouts_view__rollback__{request_id}" and run["already_requested"] is False
    assert run["conf"] == {
        "conn_id": "deployment_service_default",
        "deployment_id": connected.deployment_id,
        "revision_id": connected.old_revision,
        "rolling_back_from": connected.new_revision,
        "requested_from": "Rollouts view",
    }
    # the same confirmation twice: the same run, nothing triggered again; another while it is queued: refused
    again = _post(client, connected, request_id=request_id)
    assert again.status_code == 200 and again.json()["run_id"] == run["run_id"] and again.json()["already_requested"]
    other = _post(client, connected)
    assert other.status_code == 409 and "already queued" in other.json()["detail"]
    assert [r.run_id for r in _rollback_runs()].count(run["run_id"]) == 1
    # Airflow's audit log: one entry, the acting user, what was asked
    [entry] = _audit(run["run_id"])
    assert (entry.event, entry.owner, entry.dag_id, entry.task_id) == (
        "deployment_service.rollback",
        "admin",
        "deployment_service_rollback",
        "roll_back",
    )
    extra = json.loads(entry.extra)
    assert extra["revision_id"] == connected.old_revision and extra["deployment_name"] == NAME
    assert API_KEY not in entry.extra
    # before it runs, the emulator still serves the new revision
    assert connected.emulator.admin.find_deployment(NAME)["active_revision_id"] == connected.new_revision

    dag_run = _execute(run["run_id"], monkeypatch)
    assert str(dag_run.state) == "success"
    served = connected.emulator.admin.find_deployment(NAME)
    assert served["active_revision_id"] not in (connected.new_revision,)
    assert served["status"] == "READY"
    assert served["source_revision_config"]["image_uri"] == connected.old_image

    kinds = [(e["kind"], e.get("requested_by"), e.get("requested_from")) for e in _record(run["run_id"])]
    assert ("rolled_back", "admin", "Rollouts view") in kinds and ("rolling_back", "admin", "Rollouts view") in kinds

    page = client.get(f"/deployment-service/api/deployments/{connected.deployment_id}").json()
    old = next(revision for revision in page["revisions"] if revision["id"] == connected.old_revision)
    marks = [mark for mark in old["rollouts"] if mark["run_id"] == run["run_id"]]
    assert [(mark["role"], mark["by"]) for mark in marks] == [("rolled_back_to", "by admin from the Rollouts view")]


def test_a_paused_rollback_dag_offers_no_button_and_triggers_nothing(
    connected: Rolled, view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    def pause(paused: bool) -> None:
        with create_session() as session:
            session.execute(
                update(DagModel).where(DagModel.dag_id == "deployment_service_rollback").values(is_paused=paused)
            )

    client = view(cookie=token("admin"))
    runs_before = len(_rollback_runs())
    pause(True)
    try:
        page = client.get(f"/deployment-service/api/deployments/{connected.deployment_id}").json()
        assert page["actions"]["rollback"]["available"] is False
        assert "is paused" in page["actions"]["rollback"]["why"]
        answer = _post(client, connected)
        assert answer.status_code == 409 and "is paused" in answer.json()["detail"]
    finally:
        pause(False)
    assert len(_rollback_runs()) == runs_before
