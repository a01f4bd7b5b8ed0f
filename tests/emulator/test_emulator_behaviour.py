"""Application behaviour: set per revision (now, for the next revision, by rule), changing after N seconds,
driving the app's health check and the traffic the tracing endpoints and ``/metrics`` report."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from airflow_provider.emulator.admin_client import EmulatorAdminError
from airflow_provider.emulator.behaviour import BehaviourPlan
from airflow_provider.emulator.server import EmulatorServer

BUILD = 10.0
NAME = "checkout-api-dev"


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=1)


@pytest.fixture
def http(server: EmulatorServer, make_client: Callable[..., httpx.Client]) -> httpx.Client:
    return make_client(server)


def deployment(server: EmulatorServer, name: str = NAME) -> dict[str, Any]:
    return server.state.find_deployment(name)


def roll_out(http: httpx.Client, deployment_id: str, repo_ref: str) -> str:
    response = http.patch(f"/v2/deployments/{deployment_id}", json={"source_revision_config": {"repo_ref": repo_ref}})
    assert response.status_code == 200, response.text
    return str(response.json()["latest_revision_id"])


def stats_since(server: EmulatorServer, deployment_id: str, since: str) -> dict[str, Any]:
    """Run statistics of the deployment's tracing project since ``since``, through the tracing endpoints."""
    with httpx.Client(base_url=server.tracing_base_url, headers={"X-Api-Key": server.api_key}) as tracing:
        name = server.state.deployment(deployment_id)["name"]
        project = tracing.get("/sessions", params={"name": name, "limit": 1}).json()[0]
        answer = tracing.post("/runs/stats", json={"session": [project["id"]], "start_time": since, "is_root": True})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_setting_the_next_revisions_behaviour_answers_what_it_applies_to(
    server: EmulatorServer, http: httpx.Client
) -> None:
    """Issue 33: ``{"revision_id": "next"}`` was answered ``"revision_id": null``, which read as if it did not
    take; the answer says what it applies to, and the next revision created follows it."""
    target = deployment(server)
    before = server.admin.deployment(target["id"])["revisions"][-1]["id"]
    answer = server.admin.set_behaviour(target["id"], revision_id="next", error_rate=0.25)
    assert answer["revision_id"] == "next" and answer["applies_to"] == "the next revision created"
    assert answer["behaviour"]["error_rate"] == 0.25
    latest = server.admin.set_behaviour(target["id"], error_rate=0.0)
    assert latest["revision_id"] == before and latest["applies_to"] == "that revision"
    created = roll_out(http, target["id"], "release-9")
    assert server.admin.behaviour(target["id"], revision_id=created)["error_rate"] == 0.25


def test_next_revision_behaviour_applies_once_it_is_live_and_changes_after_n_seconds(
    server: EmulatorServer, http: httpx.Client
) -> None:
    target = deployment(server)
    server.admin.set_behaviour(
        target["id"],
        revision_id="next",
        error_rate=0.0,
        after_seconds=30,
        then={"error_rate": 0.5, "health_status": 503},
    )
    revision = roll_out(http, target["id"], "release-2")
    assert server.admin.deployment(target["id"])["revisions"][-1]["behaviour"]["then"]["error_rate"] == 0.5
    server.state.advance(BUILD)  # live now
    live_at = server.state.now().isoformat()
    assert server.admin.behaviour(target["id"])["after_seconds"] == 30
    health = target["source_config"]["custom_url"] + "/health"
    assert httpx.get(health).status_code == 200

    server.state.advance(29)
    first = stats_since(server, target["id"], live_at)
    assert (first["run_count"], first["error_rate"]) == (145, 0.0)
    assert httpx.get(health).status_code == 200

    server.state.advance(1 + 20)  # 30 s live: the second behaviour, 20 s of it
    answer = httpx.get(health)
    assert answer.status_code == 503 and answer.json()["status"] == "unhealthy"
    assert answer.json()["revision_id"] == revision
    later = stats_since(server, target["id"], live_at)
    assert later["run_count"] == 250  # 50 s at 5 requests per second
    assert later["error_count"] == 50  # half of the last 100
    assert later["error_rate"] == pytest.approx(0.2)


def test_behaviour_set_on_a_live_revision_applies_from_then_on(server: EmulatorServer) -> None:
    target = deployment(server)
    before = server.state.now().isoformat()
    server.state.advance(10)
    server.admin.set_behaviour(target["id"], error_rate=1.0, requests_per_second=2)  # the latest = the live one
    server.state.advance(10)
    stats = stats_since(server, target["id"], before)
    assert stats["run_count"] == 50 + 20  # 10 s at the default 5/s, then 10 s at 2/s
    assert stats["error_count"] == 20  # only the requests served after the change failed


def test_a_rule_by_image_glob_gives_matching_revisions_a_behaviour(server: EmulatorServer, http: httpx.Client) -> None:
    target = deployment(server, "support-bot-dev")
    assert target["source"] == "external_docker", target["source"]
    server.admin.add_behaviour_rule(image_uri="*:bad-*", error_rate=0.2, latency_ms=40)
    response = http.patch(
        f"/v2/deployments/{target['id']}", json={"source_revision_config": {"image_uri": "registry/pay:bad-1"}}
    )
    assert response.status_code == 200, response.text
    server.state.advance(BUILD)
    live_at = server.state.now().isoformat()
    server.state.advance(20)
    stats = stats_since(server, target["id"], live_at)
    assert (stats["run_count"], stats["error_count"], stats["latency_p50"]) == (100, 20, 0.04)
    assert server.admin.behaviour_rules()[0]["image_uri"] == "*:bad-*"
    server.admin.clear_behaviour_rules()
    server.state.advance(20)
    assert stats_since(server, target["id"], live_at)["error_count"] == 20  # no errors after the rule went


def test_a_rollback_redeploys_the_old_behaviour_and_unhealthy_marks_still_fail(
    server: EmulatorServer, http: httpx.Client
) -> None:
    target = deployment(server)
    good = target["active_revision_id"]
    server.admin.set_behaviour(target["id"], revision_id="next", error_rate=0.3)
    roll_out(http, target["id"], "release-2")
    server.state.advance(BUILD)
    response = http.post(f"/v2/deployments/{target['id']}/revisions/{good}/redeploy")
    assert response.status_code == 200, response.text
    server.state.advance(BUILD)
    assert server.admin.behaviour(target["id"])["error_rate"] == 0.0  # the redeployed good build
    server.admin.set_revision_health(target["id"], server.state.deployment(target["id"])["active_revision_id"])
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 500
    assert server.admin.behaviour(target["id"])["error_rate"] == 1.0  # an unhealthy app fails every request


def test_the_health_check_takes_the_behaviour_latency(server: EmulatorServer) -> None:
    target = deployment(server)
    server.admin.set_behaviour(target["id"], latency_ms=300)
    started = time.monotonic()
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 200
    assert time.monotonic() - started >= 0.3


def test_bad_behaviour_is_refused_naming_the_field(server: EmulatorServer) -> None:
    target = deployment(server)
    with pytest.raises(EmulatorAdminError, match="error_rate") as refused:
        server.admin.set_behaviour(target["id"], error_rate=1.5)
    assert refused.value.status_code == 422
    with pytest.raises(EmulatorAdminError, match="after_seconds and then go together"):
        server.admin.set_behaviour(target["id"], after_seconds=5)
    with pytest.raises(EmulatorAdminError, match="image_uri or repo_ref"):
        server.admin.add_behaviour_rule(error_rate=0.1)
    with pytest.raises(ValidationError, match="latency_ms"):
        BehaviourPlan(latency_ms=-1)
    with pytest.raises(EmulatorAdminError) as missing:
        server.admin.set_behaviour(target["id"], revision_id="7a0c7c2e-0000-4000-8000-000000000000")
    assert missing.value.status_code == 404
