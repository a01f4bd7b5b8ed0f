"""The guard in the Rollouts view (issue 42): a deployment's page shows the revision its guard guards (until when,
what it last measured, a regression found), and a user with edit access ends a guard early, audited; a viewer gets a
403 and the guard goes on."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.guard import GuardRecord, claim_key, guard_key, status_key
from tests.conftest import connection_json
from tests.tasks.conftest import seed

CONN = "deployment_service_default"


@pytest.fixture
def service(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    server = deployment_service_emulator_factory(data=seed(2))
    monkeypatch.setenv("AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT", connection_json(server.base_url, server.api_key))
    return server


@pytest.fixture
def guarded(service: Any) -> Iterator[dict[str, Any]]:
    """A guard record of ``app-0000``'s serving revision, its status and a regression claim, in Variables."""
    from airflow.models.variable import Variable

    deployment = service.admin.find_deployment("app-0000")
    landed = datetime.now(timezone.utc) - timedelta(hours=7)
    record = GuardRecord(
        deployment_id=deployment["id"],
        deployment_name="app-0000",
        revision_id=deployment["active_revision_id"],
        previous_revision_id="00000000-0000-4000-8000-00000000000f",
        conn_id=CONN,
        landed_at=landed,
        until=landed + timedelta(days=1),
        analysis=Analysis(checks=[TracingProjectCheck(condition="< 0.05", name="errors")]).to_json(),
        handed_by={"dag_id": "guarded_rollout", "run_id": "r", "task_id": "roll_out", "map_index": -1},
    )
    measurement = {"round": 3, "check": "errors", "value": 0.01, "verdict": "passed"}
    values = {
        guard_key(CONN, deployment["id"]): json.loads(record.model_dump_json()),
        status_key(CONN, deployment["id"]): {
            "revision_id": record.revision_id,
            "last_measured": "2026-11-29T06:00:00+00:00",
            "measurements": [measurement],
        },
        claim_key(deployment["id"], record.revision_id): {
            "state": "announced",
            "payload": {
                "message": "rolled back by the guard, 7 h 0 min after landing, errors 0.09",
                "regressed_at": "x",
            },
        },
    }
    for key, value in values.items():
        Variable.set(key, value, serialize_json=True)
    yield {"deployment": deployment, "record": record}
    for key in values:
        Variable.delete(key)


def test_the_page_shows_the_guard_and_an_admin_ends_it_early_audited(
    view: Callable[..., TestClient], token: Callable[[str], str], guarded: dict[str, Any]
) -> None:
    from airflow.models import Log
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    deployment, record = guarded["deployment"], guarded["record"]
    admin = view(cookie=token("admin"))
    page = admin.get(f"/deployment-service/api/deployments/{deployment['id']}", params={"conn_id": CONN})
    assert page.status_code == 200, page.text
    shown = page.json()["guard"]
    assert shown["revision_id"] == record.revision_id and shown["checks"] == ["errors"]
    assert datetime.fromisoformat(shown["guarded_until"].replace("Z", "+00:00")) == record.until
    assert shown["last_measured"] == "2026-11-29T06:00:00+00:00" and shown["measurements"][0]["value"] == 0.01
    assert shown["regressed"]["message"].startswith("rolled back by the guard, 7 h")
    assert shown["may_end"] is True

    viewer = view(cookie=token("viewer"))
    path = f"/deployment-service/api/deployments/{deployment['id']}/guard/end"
    refused = viewer.post(path, json={"conn_id": CONN, "revision_id": record.revision_id})
    assert refused.status_code == 403, refused.text
    stale = admin.post(path, json={"conn_id": CONN, "revision_id": "00000000-0000-4000-8000-000000000009"})
    assert stale.status_code == 409, stale.text
    assert admin.post(path, content="conn_id=x", headers={"content-type": "text/plain"}).status_code == 415

    ended = admin.post(path, json={"conn_id": CONN, "revision_id": record.revision_id})

    assert ended.status_code == 200, ended.text
    assert ended.json()["ended_by"] == "admin"
    assert Variable.get(guard_key(CONN, deployment["id"]), default_var=None) is None
    with create_session() as session:
        logged = session.query(Log).filter(Log.event == "deployment_service.guard_ended").all()
    assert any(
        json.loads(row.extra or "{}").get("deployment_id") == deployment["id"] and row.owner == "admin"
        for row in logged
    )
    again = admin.get(f"/deployment-service/api/deployments/{deployment['id']}", params={"conn_id": CONN})
    assert again.json()["guard"] is None
    assert admin.post(path, json={"conn_id": CONN, "revision_id": record.revision_id}).status_code == 404
