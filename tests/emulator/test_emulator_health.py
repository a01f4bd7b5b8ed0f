"""Emulated apps: a revision that builds and goes live but is unhealthy, and rolling back from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.admin_client import EmulatorAdminError
from airflow_provider.emulator.server import EmulatorServer

BUILD = 10.0


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=1)


@pytest.fixture
def http(server: EmulatorServer, make_client: Callable[..., httpx.Client]) -> httpx.Client:
    return make_client(server)


def named(http: httpx.Client, name: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"name_contains": name, "limit": 100}).json()["resources"]
    return next(d for d in resources if d["name"] == name)


def patch(http: httpx.Client, deployment_id: str, config: dict[str, str]) -> str:
    response = http.patch(f"/v2/deployments/{deployment_id}", json={"source_revision_config": config})
    assert response.status_code == 200, response.text
    return str(response.json()["latest_revision_id"])


def test_custom_url_reaches_the_app_of_hosted_deployments(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    url = target["source_config"]["custom_url"]
    assert url == f"{server.root_url}/apps/{target['id']}" == server.admin.app_url(target["id"])
    for path in ("", "/health", "/ok"):
        answer = httpx.get(url + path)
        assert answer.status_code == 200
        assert answer.json()["status"] == "ok" and answer.json()["revision_id"] == target["active_revision_id"]


def test_external_docker_custom_url_stays_what_the_user_set(http: httpx.Client) -> None:
    target = named(http, "billing-worker-prod")
    assert target["source_config"]["custom_url"] is None


def test_the_next_revision_goes_live_but_its_app_fails(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    url = target["source_config"]["custom_url"] + "/health"
    assert server.admin.mark_next_revision_unhealthy(target["id"]) is None  # armed for the next revision
    bad = patch(http, target["id"], {"repo_ref": "release-2"})
    server.state.advance(BUILD - 1)
    assert httpx.get(url).status_code == 200  # the old revision still serves while the new one deploys
    server.state.advance(1)
    revision = http.get(f"/v2/deployments/{target['id']}/revisions/{bad}").json()
    assert revision["status"] == "DEPLOYED"  # the service sees nothing wrong
    answer = httpx.get(url)
    assert answer.status_code == 500
    assert answer.json()["status"] == "unhealthy" and answer.json()["revision_id"] == bad
    # the service's own rollback: redeploy the previous, healthy build
    rollback = http.post(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}/redeploy").json()
    server.state.advance(BUILD)
    assert named(http, "checkout-api-dev")["active_revision_id"] == rollback["latest_revision_id"]
    assert httpx.get(url).status_code == 200


def test_marking_a_building_revision_and_redeploying_a_bad_build(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    building = patch(http, target["id"], {"repo_ref": "release-3"})
    assert server.admin.mark_next_revision_unhealthy(target["id"]) == building
    server.state.advance(BUILD)
    url = target["source_config"]["custom_url"]
    assert httpx.get(url).status_code == 500
    server.admin.set_revision_health(target["id"], target["active_revision_id"], healthy=True)
    http.post(f"/v2/deployments/{target['id']}/revisions/{building}/redeploy")
    server.state.advance(BUILD)
    assert httpx.get(url).status_code == 500  # same build, same bug


def test_a_given_revision_can_be_marked_and_healed(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    url = target["source_config"]["custom_url"]
    marked = server.admin.set_revision_health(target["id"], target["active_revision_id"])
    assert marked["unhealthy"] is True and marked["id"] == target["active_revision_id"]
    assert httpx.get(url).status_code == 500
    server.admin.set_revision_health(target["id"], target["active_revision_id"], healthy=True)
    assert httpx.get(url).status_code == 200


def test_unhealthy_rules_match_image_uri_or_repo_ref(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-staging")  # internal_docker
    url = target["source_config"]["custom_url"]
    rule = server.admin.add_unhealthy_rule(image_uri="*:broken-*", deployment_id=target["id"])
    assert server.admin.unhealthy_rules() == [rule]
    patch(http, target["id"], {"image_uri": "registry.example.com/acme/checkout-api:broken-1"})
    server.state.advance(BUILD)
    assert httpx.get(url).status_code == 500
    patch(http, target["id"], {"image_uri": "registry.example.com/acme/checkout-api:fixed-2"})
    server.state.advance(BUILD)
    assert httpx.get(url).status_code == 200
    server.admin.add_unhealthy_rule(repo_ref="main")  # matches every codehost deployment on main, existing ones too
    assert httpx.get(named(http, "checkout-api-dev")["source_config"]["custom_url"]).status_code == 500
    server.admin.clear_unhealthy_rules()
    assert httpx.get(named(http, "checkout-api-dev")["source_config"]["custom_url"]).status_code == 200
    with pytest.raises(EmulatorAdminError) as error:
        server.admin.add_unhealthy_rule()
    assert error.value.status_code == 422


def test_an_app_with_nothing_live_is_unavailable_and_unknown_apps_are_404(
    server: EmulatorServer, http: httpx.Client
) -> None:
    body = {"name": "fresh-agent", "source": "internal_docker", "source_revision_config": {"image_uri": "app:1"}}
    created = http.post("/v2/deployments", json=body).json()
    assert httpx.get(created["source_config"]["custom_url"]).status_code == 503
    server.state.advance(BUILD)
    assert httpx.get(created["source_config"]["custom_url"]).status_code == 200
    assert httpx.get(f"{server.root_url}/apps/0b7c6d2e-0000-4000-8000-00000000abcd").status_code == 404


def test_apps_are_not_service_requests(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.reset_requests()
    server.admin.add_fault("status", status_code=503, count=None)  # every service request fails
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 200
    assert http.get("/v2/deployments").status_code == 503
    assert server.admin.counters() == {"GET /v2/deployments": 1}


def test_reset_clears_rules_and_marks(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.set_revision_health(target["id"], target["active_revision_id"])
    server.admin.add_unhealthy_rule(repo_ref="*")
    server.admin.reset()
    assert server.admin.unhealthy_rules() == []
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 200


def test_subprocess_server_takes_the_switches_and_serves_apps(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    server = deployment_service_emulator_factory(
        in_subprocess=True, resource_spec_mode="merge", disabled_endpoints=["redeploy"], path_prefix="/api-host"
    )
    assert server.admin.settings()["resource_spec_mode"] == "merge"
    assert server.admin.settings()["disabled_endpoints"] == ["redeploy"]
    http = make_client(server)
    target = named(http, "checkout-api-dev")
    assert target["source_config"]["custom_url"] == f"{server.root_url}/apps/{target['id']}"
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 200
    server.admin.mark_next_revision_unhealthy(target["id"])
    patch(http, target["id"], {"repo_ref": "bad"})
    server.admin.advance(60)
    assert httpx.get(target["source_config"]["custom_url"]).status_code == 500
