"""Every route of the Rollouts view refuses a request without an Airflow user, and its data routes refuse a
user without read access to the connection or the DAG, through Airflow's real auth dependency and auth
manager. A refused request never reaches the service."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.assets import deployment_asset_uri
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.plugins.rollouts.app import SCRIPTS
from tests.tasks.conftest import connection_json, seed

ROUTES = [
    "/deployment-service/",
    "/deployment-service/deployments",
    "/deployment-service/deployments/00000000-0000-4000-8000-000000000001",
    "/deployment-service/fleet?dag_id=d&run_id=r&task_id=t",
    "/deployment-service/static/rollouts.js",
    "/deployment-service/static/rollouts.css",
    "/deployment-service/static/rollouts.svg",
    "/deployment-service/api/connections",
    "/deployment-service/api/deployments",
    "/deployment-service/api/deployments/00000000-0000-4000-8000-000000000001",
    "/deployment-service/api/fleet?dag_id=d&run_id=r&task_id=t",
]
VISIBLE_DAG = "rollouts_view_visible"
HIDDEN_DAG = "rollouts_view_hidden"


@pytest.fixture
def fleet_service(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """An emulator with three fresh deployments (new ids: no other test's records name them) behind
    ``deployment_service_default``."""
    server = deployment_service_emulator_factory(data=seed(3))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT",
        connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02),
    )
    server.admin.reset_requests()
    return server


def service_requests(server: Any) -> list[str]:
    return [record["route"] for record in server.admin.requests() if record["route"].startswith(("GET", "PATCH"))]


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_refuses_a_request_without_a_user(view: Callable[..., TestClient], route: str) -> None:
    answer = view().get(route, follow_redirects=False)
    assert answer.status_code == 401, f"{route} answered {answer.status_code}: {answer.text[:300]}"
    assert answer.json() == {"detail": "Not authenticated"}


@pytest.mark.parametrize("route", ["/deployment-service/deployments", "/deployment-service/api/connections"])
def test_a_forged_token_is_refused(view: Callable[..., TestClient], route: str, token: Callable[[str], str]) -> None:
    forged = token("admin")[:-4] + "AAAA"
    assert view(cookie=forged).get(route).status_code == 403
    assert view(bearer=forged).get(route).status_code == 403


def test_the_ui_cookie_and_a_bearer_header_both_authenticate(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any
) -> None:
    for client in (view(cookie=token("op")), view(bearer=token("op"))):
        page = client.get("/deployment-service/deployments")
        assert page.status_code == 200 and 'data-page="deployments"' in page.text
        listed = client.get("/deployment-service/api/deployments").json()["deployments"]
        assert sorted(row["name"] for row in listed) == ["app-0000", "app-0001", "app-0002"]


def test_the_page_loads_the_view_scripts_in_order_and_each_is_served(
    view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    """The pages' scripts are plain files sharing one scope: ``page.html`` loads every one, in the order in which
    each uses what the ones before it define, and the app serves each as JavaScript."""
    client = view(cookie=token("op"))
    page = client.get("/deployment-service/deployments")
    assert page.status_code == 200
    assert re.findall(r'<script defer src="[^"]*static/([\w.]+)"></script>', page.text) == list(SCRIPTS)
    for name in SCRIPTS:
        served = client.get(f"/deployment-service/static/{name}")
        assert served.status_code == 200 and served.headers["content-type"].startswith("text/javascript"), name


@pytest.mark.parametrize("role", ["viewer", "user"])
def test_a_user_without_read_access_to_the_connection_is_refused_before_any_request(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, role: str
) -> None:
    client = view(cookie=token(role))
    some_id = fleet_service.admin.find_deployment("app-0000")["id"]
    for route in ("/deployment-service/api/deployments", f"/deployment-service/api/deployments/{some_id}"):
        answer = client.get(route, params={"conn_id": "deployment_service_default"})
        assert answer.status_code == 403, f"{role} on {route}: {answer.status_code} {answer.text[:300]}"
        assert "may not read connection 'deployment_service_default'" in answer.json()["detail"]
    assert service_requests(fleet_service) == []


def test_a_connection_id_that_cannot_be_one_is_refused_naming_the_field(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any
) -> None:
    answer = view(cookie=token("admin")).get("/deployment-service/api/deployments", params={"conn_id": "../etc"})
    assert answer.status_code == 422 and "conn_id must be a connection id" in answer.json()["detail"]
    bad_status = view(cookie=token("admin")).get("/deployment-service/api/deployments", params={"status": "ready"})
    assert bad_status.status_code == 422 and "status" in bad_status.json()["detail"]
    assert service_requests(fleet_service) == []


# ------------------------------------------------------------------------------------ per-DAG access
@pytest.fixture
def dag_scoped_manager(auth_manager: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An auth manager that lets everyone read connections and every DAG but :data:`HIDDEN_DAG` (the simple
    auth manager has no per-DAG permissions; this stands for one that does)."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class DagScoped(SimpleAuthManager):
        def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
            if details is not None and details.id == HIDDEN_DAG:
                return False
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    monkeypatch.setattr(api_app._AuthManagerState, "instance", DagScoped())
    yield api_app._AuthManagerState.instance


def asset_event(asset_id: int, extra: dict[str, Any], dag_id: str, task_id: str, run_id: str, at: datetime) -> Any:
    """An asset event as a task of ``dag_id`` emits it."""
    from airflow.models.asset import AssetEvent

    return AssetEvent(
        asset_id=asset_id,
        extra=extra,
        source_dag_id=dag_id,
        source_task_id=task_id,
        source_run_id=run_id,
        source_map_index=-1,
        timestamp=at,
    )


def add_dags_and_events(deployment_id: str) -> None:
    """Two DAGs in the metadata database, and one asset event from each on the deployment's asset: the
    hidden DAG's is the newer."""
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    uri = deployment_asset_uri(deployment_id)
    now = datetime.now(timezone.utc)
    with create_session() as session:
        if session.get(DagBundleModel, "rollouts-view-tests") is None:
            session.add(DagBundleModel(name="rollouts-view-tests"))
            session.flush()
        for dag_id in (VISIBLE_DAG, HIDDEN_DAG):
            if session.get(DagModel, dag_id) is None:
                session.add(
                    DagModel(
                        dag_id=dag_id,
                        bundle_name="rollouts-view-tests",
                        max_active_tasks=16,
                        max_consecutive_failed_dag_runs=0,
                        has_task_concurrency_limits=False,
                        is_stale=False,
                    )
                )
        asset = session.scalar(select(AssetModel).where(AssetModel.uri == uri))
        if asset is None:
            asset = AssetModel(name=uri, uri=uri, group="asset")
            session.add(asset)
            session.flush()
        for dag_id, at, outcome in ((VISIBLE_DAG, now - timedelta(minutes=5), "rolled_out"), (HIDDEN_DAG, now, "x")):
            extra = {"kind": "revision_live", "deployment_id": deployment_id, "outcome": outcome, "origin": "task"}
            session.add(asset_event(asset.id, extra, dag_id, "roll_out", f"manual__{uuid.uuid4().hex[:8]}", at))


def test_rollouts_of_a_dag_the_user_may_not_read_are_left_out(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, dag_scoped_manager: Any
) -> None:
    deployment_id = fleet_service.admin.find_deployment("app-0001")["id"]
    add_dags_and_events(deployment_id)
    client = view(cookie=token("op"))
    rows = {row["name"]: row for row in client.get("/deployment-service/api/deployments").json()["deployments"]}
    assert rows["app-0001"]["last_rollout"]["dag_id"] == VISIBLE_DAG  # the hidden DAG's newer event is not shown
    assert rows["app-0001"]["last_rollout"]["outcome"] == "rolled_out"
    page = client.get(f"/deployment-service/api/deployments/{deployment_id}").json()
    assert {rollout["dag_id"] for rollout in page["rollouts"]} == {VISIBLE_DAG}
    assert HIDDEN_DAG not in str(page)


def test_the_fleet_tab_of_a_dag_the_user_may_not_read_is_refused(
    view: Callable[..., TestClient], token: Callable[[str], str], dag_scoped_manager: Any
) -> None:
    client = view(cookie=token("admin"))
    params = {"dag_id": HIDDEN_DAG, "run_id": "manual__1", "task_id": "roll_out"}
    answer = client.get("/deployment-service/api/fleet", params=params)
    assert answer.status_code == 403 and f"may not read DAG '{HIDDEN_DAG}'" in answer.json()["detail"]
    missing = client.get("/deployment-service/api/fleet", params={**params, "dag_id": VISIBLE_DAG})
    assert missing.status_code == 404  # readable DAG: the refusal above was about access, not existence


def test_only_readable_connections_of_the_provider_are_offered(
    view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    from airflow.models import Connection
    from airflow.utils.session import create_session

    names = {f"rollouts_view_{uuid.uuid4().hex[:6]}": "deployment_service", f"other_{uuid.uuid4().hex[:6]}": "http"}
    with create_session() as session:
        for conn_id, conn_type in names.items():
            session.add(Connection(conn_id=conn_id, conn_type=conn_type, password="not-shown-anywhere"))
    try:
        ours = next(conn_id for conn_id, conn_type in names.items() if conn_type == "deployment_service")
        offered = view(cookie=token("op")).get("/deployment-service/api/connections").json()
        other = next(conn_id for conn_id, conn_type in names.items() if conn_type != "deployment_service")
        assert ours in offered["connections"] and other not in offered["connections"]
        assert "not-shown-anywhere" not in str(offered)
        assert view(cookie=token("viewer")).get("/deployment-service/api/connections").json()["connections"] == []
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id.in_(list(names))).delete(synchronize_session=False)


@pytest.mark.parametrize("conn_id", ["deployment_service_default\n", "op\n"])
def test_a_connection_id_with_a_valid_prefix_and_more_is_refused_naming_the_field(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, conn_id: str
) -> None:
    answer = view(cookie=token("admin")).get("/deployment-service/api/deployments", params={"conn_id": conn_id})
    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["detail"] == (
        f"conn_id must be a connection id (letters, digits, '_', '.', '-'), got {conn_id!r}"
    )
    assert service_requests(fleet_service) == []


@pytest.fixture
def xcom_hidden_manager(auth_manager: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An auth manager that lets everyone read every DAG and its task instances, but nobody read the XComs of
    :data:`VISIBLE_DAG` (as a role without "XComs" read permission would)."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class NoXCom(SimpleAuthManager):
        def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
            if access_entity is DagAccessEntity.XCOM and details is not None and details.id == VISIBLE_DAG:
                return False
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    monkeypatch.setattr(api_app._AuthManagerState, "instance", NoXCom())
    yield api_app._AuthManagerState.instance


def test_the_fleet_tab_needs_read_access_to_the_dags_xcoms(
    view: Callable[..., TestClient], token: Callable[[str], str], xcom_hidden_manager: Any
) -> None:
    client = view(cookie=token("admin"))
    params = {"dag_id": VISIBLE_DAG, "run_id": "manual__1", "task_id": "roll_out"}
    answer = client.get("/deployment-service/api/fleet", params=params)
    assert answer.status_code == 403, answer.text[:300]
    assert answer.json()["detail"] == f"you may not read DAG '{VISIBLE_DAG}' (XCOM): ask for read access to it"
    other = client.get("/deployment-service/api/fleet", params={**params, "dag_id": HIDDEN_DAG})
    assert other.status_code == 404  # XComs of that DAG readable: the refusal above was about them


# ------------------------------------------------------------------------------------ fleet records need fleet access
FLEET_MESSAGE = "wave 1: error_rate 0.21 over its limit, rolled back (fleet-row-message-7f3a)"
"""A fleet row's message, only for users who may read the fleet tab of its DAG."""
MEASUREMENT = {"round": 1, "check": "error_rate", "value": 0.2137, "condition": "< 0.05", "verdict": "failed"}
"""A measurement (in the row's analysis and in the task's asset event)."""


def add_fleet_rollout(deployment_id: str) -> str:
    """A run of :data:`VISIBLE_DAG` whose fleet task patched the deployment and rolled it back after a failed
    analysis: its wave in ``task_state_store`` (the row, its message and measurements) and its asset event
    (with the analysis' measurements). Returns the run id."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider.plugins.rollouts.metadata import WAVE_KEY_PREFIX

    add_dags_and_events(deployment_id)  # the DAGs (and their bundle)
    run_id = f"manual__fleet_{uuid.uuid4().hex[:8]}"
    now = datetime.now(timezone.utc)
    analysis = {
        "verdict": "failed",
        "failing_check": "error_rate",
        "reason": "error_rate 0.214 not < 0.05",
        "measurements": [MEASUREMENT],
        "measurements_total": 1,
    }
    row = {
        "deployment_id": deployment_id,
        "name": "app-0001",
        "wave": "wave 1",
        "from_revision": "rev-before",
        "to_revision": "rev-rejected",
        "rollback_revision": "rev-restored",
        "outcome": "rolled_back",
        "message": FLEET_MESSAGE,
        "started_at": (now - timedelta(minutes=2)).timestamp(),
        "finished_at": (now - timedelta(minutes=1)).timestamp(),
        "analysis": analysis,
    }
    add_failed_run(run_id, "roll_out_fleet", f"{WAVE_KEY_PREFIX}0", {"name": "wave 1", "phase": "done", "rows": [row]})
    with create_session() as session:
        asset = session.scalar(select(AssetModel).where(AssetModel.uri == deployment_asset_uri(deployment_id)))
        assert asset is not None
        extra = {
            "kind": "revision_live",
            "deployment_id": deployment_id,
            "revision_id": "rev-restored",
            "previous_revision_id": "rev-rejected",
            "outcome": "rolled_back",
            "origin": "task",
            "analysis": analysis,
        }
        session.add(asset_event(asset.id, extra, VISIBLE_DAG, "roll_out_fleet", run_id, now - timedelta(seconds=30)))
    return run_id


@pytest.fixture(params=["TASK_INSTANCE", "XCOM"])
def fleet_hidden_manager(request: pytest.FixtureRequest, auth_manager: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An auth manager that lets everyone read connections and every DAG, but not the task instances (or the
    XComs) of :data:`VISIBLE_DAG`: what its fleet tab needs."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    denied = DagAccessEntity[request.param]

    class NoFleetTab(SimpleAuthManager):
        def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
            if access_entity is denied and details is not None and details.id == VISIBLE_DAG:
                return False
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    monkeypatch.setattr(api_app._AuthManagerState, "instance", NoFleetTab())
    return denied


def shown_text(client: TestClient, deployment_id: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    listing = client.get("/deployment-service/api/deployments")
    page = client.get(f"/deployment-service/api/deployments/{deployment_id}")
    assert listing.status_code == page.status_code == 200, (listing.text[:300], page.text[:300])
    row = next(row for row in listing.json()["deployments"] if row["id"] == deployment_id)
    return row, page.json(), listing.text + page.text


def test_fleet_rows_messages_and_measurements_need_the_fleet_tabs_access(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, fleet_hidden_manager: Any
) -> None:
    deployment_id = fleet_service.admin.find_deployment("app-0001")["id"]
    run_id = add_fleet_rollout(deployment_id)
    client = view(cookie=token("op"))
    row, page, text = shown_text(client, deployment_id)
    denied = fleet_hidden_manager.value
    where = text.find(FLEET_MESSAGE)
    assert where < 0, (
        f"a fleet row's message was shown without {denied} read: ...{text[max(where - 400, 0) : where + 200]}"
    )
    assert "error_rate" not in text and "0.214" not in text, f"measurements shown without {denied} read"
    assert [rollout for rollout in page["rollouts"] if rollout["source"] == "fleet"] == []
    ours = [rollout for rollout in page["rollouts"] if rollout["run_id"] == run_id]
    assert [(rollout["source"], rollout["outcome"], rollout["analysis"]) for rollout in ours] == [
        ("asset_event", "rolled_back", None)  # the asset event still says what the run did (DAG read suffices)
    ]
    assert row["last_rollout"]["source"] == "asset_event" and row["last_rollout"]["analysis"] is None
    # The fleet tab of that task is refused as well: the same rule on both pages.
    tab = client.get(
        "/deployment-service/api/fleet", params={"dag_id": VISIBLE_DAG, "run_id": run_id, "task_id": "roll_out_fleet"}
    )
    assert tab.status_code == 403, tab.text[:300]


def test_fleet_rows_messages_and_measurements_are_shown_with_the_fleet_tabs_access(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, dag_scoped_manager: Any
) -> None:
    deployment_id = fleet_service.admin.find_deployment("app-0001")["id"]
    run_id = add_fleet_rollout(deployment_id)
    row, page, text = shown_text(view(cookie=token("op")), deployment_id)
    assert row["last_rollout"]["analysis"]["verdict"] == "failed"
    assert FLEET_MESSAGE in text and "round 1 · error_rate · 0.214 (< 0.05): failed" in text
    fleet = [rollout for rollout in page["rollouts"] if rollout["source"] == "fleet" and rollout["run_id"] == run_id]
    assert [(rollout["outcome"], rollout["message"]) for rollout in fleet] == [("rolled_back", FLEET_MESSAGE)]
    # The task's asset event tells the same rollout as its row: one rollout (the row), with the measurements.
    assert [rollout["source"] for rollout in page["rollouts"] if rollout["run_id"] == run_id] == ["fleet"]
    [rejected] = [item for item in fleet[0]["entries"] if item["kind"] == "rejected"]
    assert rejected["verdict"]["measurements"][0] == MEASUREMENT


# ------------------------------------------------------------------------------------ a task's record
RECORD_MESSAGE = "the analysis failed: error_rate 0.31 not < 0.05 (patch-record-message-2c9e)"
"""The message of a patch task's rejection, only for users who may read the DAG's task instances and XComs."""


def add_patch_record(server: Any, deployment_id: str) -> tuple[str, dict[str, str]]:
    """A failed run of :data:`VISIBLE_DAG` whose patch task recorded its revision rejected by the analysis and
    rolled back (its record in ``task_state_store``; a failed task emits no asset event), on two revisions made on
    the emulator. Returns the run id and the revisions (``good``, ``bad``, ``restored``)."""
    from airflow_provider.decisions.record import RECORD_KEY, Kind, entry, with_entries

    add_dags_and_events(deployment_id)
    revisions = {"good": server.state.deployment(deployment_id)["active_revision_id"]}
    for name in ("bad", "restored"):
        request = PatchDeploymentRequest.model_validate({"source_revision_config": {"repo_ref": f"v-{name}"}})
        revisions[name] = server.state.patch_deployment(deployment_id, request)["latest_revision_id"]
    good, bad, restored = revisions["good"], revisions["bad"], revisions["restored"]
    run_id = f"manual__patch_{uuid.uuid4().hex[:8]}"
    now = datetime.now(timezone.utc)
    start = (now - timedelta(minutes=3)).timestamp()
    verdict = {"verdict": "failed", "failing_check": "error_rate", "reason": "error_rate 0.31"}
    verdict["measurements"] = [MEASUREMENT]
    rollback = {"rolled_back_from": bad, "rolled_back_to": good, "try_number": 1}
    record = with_entries(
        None,
        [
            entry(Kind.ROLLED_OUT, deployment_id, bad, at=start, previous_revision_id=good, try_number=1),
            entry(Kind.JUDGING, deployment_id, bad, at=start + 30, steps=["analysis"], try_number=1),
            entry(
                Kind.REJECTED,
                deployment_id,
                bad,
                at=start + 60,
                step="analysis",
                verdict=verdict,
                message=RECORD_MESSAGE,
                try_number=1,
            ),
            entry(Kind.ROLLING_BACK, deployment_id, restored, at=start + 61, **rollback),
            entry(Kind.ROLLED_BACK, deployment_id, restored, at=start + 90, **rollback),
        ],
    )
    add_failed_run(run_id, "patch", RECORD_KEY, record)
    return run_id, revisions


def add_failed_run(run_id: str, task_id: str, key: str, value: Any) -> None:
    """A failed run of :data:`VISIBLE_DAG` whose task ``task_id`` wrote ``value`` under ``key`` in its
    ``task_state_store``."""
    from airflow.models.dagrun import DagRun
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    now = datetime.now(timezone.utc)
    with create_session() as session:
        run = DagRun(
            dag_id=VISIBLE_DAG,
            run_id=run_id,
            run_type=DagRunType.MANUAL,
            state=DagRunState.FAILED,
            run_after=now,
            start_date=now - timedelta(minutes=3),
        )
        session.add(run)
        session.flush()
        session.add(
            TaskStateStoreModel(
                dag_run_id=run.id,
                dag_id=VISIBLE_DAG,
                run_id=run_id,
                task_id=task_id,
                map_index=-1,
                key=key,
                value=json.dumps(value),
                updated_at=now,
            )
        )


def test_a_tasks_record_shows_its_outcomes_with_dag_read_but_its_messages_and_measurements_only_with_more(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, fleet_hidden_manager: Any
) -> None:
    deployment_id = fleet_service.admin.find_deployment("app-0002")["id"]
    run_id, revisions = add_patch_record(fleet_service, deployment_id)
    _row, page, text = shown_text(view(cookie=token("op")), deployment_id)
    assert RECORD_MESSAGE not in text and "0.2137" not in text, f"shown without {fleet_hidden_manager.value} read"
    [ours] = [rollout for rollout in page["rollouts"] if rollout["run_id"] == run_id]
    assert (ours["source"], ours["outcome"], ours["message"], ours["analysis"]) == ("record", "rolled_back", "", None)
    assert all("message" not in item and "verdict" not in item for item in ours["entries"])
    roles = {
        revision["id"]: [
            (mark["role"], mark["message"], mark["analysis"])
            for mark in revision["rollouts"]
            if mark["run_id"] == run_id
        ]
        for revision in page["revisions"]
    }
    assert roles[revisions["bad"]] == [("rejected", "", None)]
    assert roles[revisions["good"]] == [("rolled_back_to", "", None)]
    assert roles[revisions["restored"]] == [("rollback_revision", "", None)]


def test_a_tasks_record_shows_its_messages_and_measurements_with_the_fleet_tabs_access(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_service: Any, dag_scoped_manager: Any
) -> None:
    deployment_id = fleet_service.admin.find_deployment("app-0002")["id"]
    run_id, revisions = add_patch_record(fleet_service, deployment_id)
    _row, page, text = shown_text(view(cookie=token("op")), deployment_id)
    assert RECORD_MESSAGE in text
    [mark] = next(revision["rollouts"] for revision in page["revisions"] if revision["id"] == revisions["bad"])
    assert (mark["run_id"], mark["label"], mark["message"]) == (run_id, "rejected (analysis failed)", RECORD_MESSAGE)
    assert mark["analysis"]["measurements"] == ["round 1 · error_rate · 0.214 (< 0.05): failed"]
