"""The older log routes the service's own command-line client reads: ``POST /v1/projects/{deployment_id}/revisions/
{revision_id}/build_logs`` and ``POST /v1/projects/{deployment_id}[/revisions/{revision_id}]/deploy_logs``, a JSON
body ``{order, limit, offset, level, query, start_time, end_time}``, the newer route's answer, entries with ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer

BUILD = 10.0


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=1)


@pytest.fixture
def http(server: EmulatorServer, make_client: Callable[..., httpx.Client]) -> httpx.Client:
    return make_client(server)


def target(server: EmulatorServer) -> dict[str, Any]:
    return server.state.find_deployment("checkout-api-dev")


def older(http: httpx.Client, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = http.post(path, json=body) if body is not None else http.post(path)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_the_older_build_log_route_answers_what_the_newer_one_does(server: EmulatorServer, http: httpx.Client) -> None:
    dep = target(server)
    rid = dep["active_revision_id"]
    newer = http.get(f"/v2/deployments/{dep['id']}/revisions/{rid}/logs", params={"order": "desc", "limit": 30}).json()
    answer = older(http, f"/v1/projects/{dep['id']}/revisions/{rid}/build_logs", {"order": "desc", "limit": 30})
    assert answer == newer
    ids = [entry["id"] for entry in answer["logs"]]
    assert all(ids) and len(set(ids)) == len(ids)
    assert older(http, f"/v1/projects/{dep['id']}/revisions/{rid}/build_logs", {"order": "desc", "limit": 30}) == answer


def test_deploy_logs_follow_by_id_and_filter(server: EmulatorServer, http: httpx.Client) -> None:
    """As the CLI's ``deploy logs --follow`` reads them: newest first, then ascending from a start time, skipping
    the ids it printed; ``level`` and ``query`` filter."""
    dep = target(server)
    path = f"/v1/projects/{dep['id']}/deploy_logs"
    before = older(http, path, {"order": "desc", "limit": 100})["logs"]
    assert before and before[0]["message"] == f"Revision {dep['active_revision_id']} is live"
    new = http.patch(f"/v2/deployments/{dep['id']}", json={"source_revision_config": {"repo_ref": "next"}}).json()
    server.state.advance(BUILD)
    since = before[0]["timestamp"]
    followed = older(http, path, {"order": "asc", "limit": 100, "start_time": since})["logs"]
    seen = {entry["id"] for entry in before}
    fresh = [entry["message"] for entry in followed if entry["id"] not in seen]
    assert fresh == [
        f"Deploying revision {new['latest_revision_id']}",
        "Rolling out 1 replica(s)",
        f"Revision {new['latest_revision_id']} is live",
    ]
    one_revision = older(http, f"/v1/projects/{dep['id']}/revisions/{new['latest_revision_id']}/deploy_logs")["logs"]
    assert [entry["message"] for entry in one_revision] == fresh
    assert (
        older(http, path, {"query": "ROLLING OUT", "limit": 100})["logs"][-1]["message"] == "Rolling out 1 replica(s)"
    )
    assert older(http, path, {"level": "error"})["logs"] == []


def test_bad_bodies_are_422_naming_the_field(server: EmulatorServer, http: httpx.Client) -> None:
    dep = target(server)
    path = f"/v1/projects/{dep['id']}/revisions/{dep['active_revision_id']}/build_logs"
    for body, field in (({"limit": 0}, "limit"), ({"order": "newest"}, "order"), ({"offset": "nope"}, "offset")):
        response = http.post(path, json=body)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", field], body
    assert (
        http.post(f"/v1/projects/{dep['id']}/revisions/0b7c6d2e-0000-4000-8000-00000000abcd/build_logs").status_code
        == 404
    )
