"""API key and workspace (tenant) rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.data.generate_example import OTHER_TENANT_ID
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import DEFAULT_TENANT_ID

TENANT = "7d4c1a2b-3e5f-4a6b-8c7d-9e0f1a2b3c4d"
UNKNOWN_TENANT = "11111111-2222-4333-8444-555555555555"
SOME_ID = "0b7c6d2e-0000-4000-8000-00000000abcd"
INTEGRATION_ID = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"

REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v2/auth/providers", None),
    ("GET", f"/v1/integrations/forge/codehost/{INTEGRATION_ID}/repos", None),
    ("GET", "/v2/deployments", None),
    ("PATCH", f"/v2/deployments/{SOME_ID}", {"source_config": {"build_on_push": True}}),
    ("GET", f"/v2/deployments/{SOME_ID}", None),
    ("POST", "/v2/deployments", {"name": "x", "source": "codehost"}),
]


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
@pytest.mark.parametrize("headers", [{}, {"X-Api-Key": "wrong"}, {"X-Api-Key": ""}, {"Authorization": "test-api-key"}])
def test_missing_or_wrong_api_key_is_401(
    emulator: EmulatorServer,
    web: httpx.Client,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
) -> None:
    response = web.request(method, emulator.base_url + path, headers=headers, json=body)
    assert response.status_code == 401
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "wrong" not in detail


@pytest.mark.parametrize("name", ["x-api-key", "X-API-KEY", "X-Api-Key"])
def test_api_key_header_name_is_case_insensitive(emulator: EmulatorServer, web: httpx.Client, name: str) -> None:
    response = web.get(emulator.base_url + "/v2/auth/providers", headers={name: emulator.api_key})
    assert response.status_code == 200


def test_admin_api_needs_no_key(emulator: EmulatorServer, web: httpx.Client) -> None:
    assert web.get(emulator.root_url + "/_emulator/clock").status_code == 200


@pytest.fixture
def org_emulator(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    """An organization-scoped key: requests must name their workspace."""
    return deployment_service_emulator_factory(tenant_id=TENANT)


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_org_scoped_key_without_tenant_header_is_403(
    org_emulator: EmulatorServer, web: httpx.Client, method: str, path: str, body: dict[str, Any] | None
) -> None:
    headers = {"X-Api-Key": org_emulator.api_key}
    response = web.request(method, org_emulator.base_url + path, headers=headers, json=body)
    assert response.status_code == 403
    assert response.json() == {"detail": "requires workspace specification"}


def test_wrong_key_wins_over_missing_tenant(org_emulator: EmulatorServer, web: httpx.Client) -> None:
    assert web.get(org_emulator.base_url + "/v2/deployments", headers={"X-Api-Key": "nope"}).status_code == 401


def test_malformed_tenant_header_is_400(org_emulator: EmulatorServer, web: httpx.Client) -> None:
    headers = {"X-Api-Key": org_emulator.api_key, "X-Tenant-Id": "workspace-1"}
    response = web.get(org_emulator.base_url + "/v2/deployments", headers=headers)
    assert response.status_code == 400 and isinstance(response.json()["detail"], str)


def _ids(web: httpx.Client, server: EmulatorServer, tenant: str, header_name: str = "X-Tenant-Id") -> list[str]:
    headers = {"X-Api-Key": server.api_key, header_name: tenant}
    ids: list[str] = []
    offset = 0
    while True:
        body = web.get(server.base_url + "/v2/deployments", headers=headers, params={"offset": offset, "limit": 100})
        assert body.status_code == 200
        ids += [d["id"] for d in body.json()["resources"]]
        if len(body.json()["resources"]) < 100:
            return ids
        offset = body.json()["offset"]


def test_each_tenant_sees_only_its_deployments(org_emulator: EmulatorServer, web: httpx.Client) -> None:
    by_tenant: dict[str, set[str]] = {}
    for deployment in org_emulator.state.snapshot()["deployments"]:
        by_tenant.setdefault(deployment["tenant_id"], set()).add(deployment["id"])
    assert set(by_tenant) == {TENANT, OTHER_TENANT_ID}  # seeded entries without a tenant took the configured one
    mine = _ids(web, org_emulator, TENANT)
    theirs = _ids(web, org_emulator, OTHER_TENANT_ID.upper(), header_name="x-tenant-id")
    assert set(mine) == by_tenant[TENANT] and set(theirs) == by_tenant[OTHER_TENANT_ID]
    assert _ids(web, org_emulator, UNKNOWN_TENANT) == []


def test_other_tenants_deployment_is_404_to_get_and_patch(org_emulator: EmulatorServer, web: httpx.Client) -> None:
    foreign = next(d for d in org_emulator.state.snapshot()["deployments"] if d["tenant_id"] == OTHER_TENANT_ID)
    headers = {"X-Api-Key": org_emulator.api_key, "X-Tenant-Id": TENANT}
    base = org_emulator.base_url
    patch = web.patch(f"{base}/v2/deployments/{foreign['id']}", headers=headers, json={"secrets": []})
    assert patch.status_code == 404
    assert patch.json() == {"detail": f"Deployment ID {foreign['id']} not found."}
    assert web.get(f"{base}/v2/deployments/{foreign['id']}", headers=headers).status_code == 404
    assert org_emulator.state.deployment(foreign["id"])["latest_revision_id"] == foreign["latest_revision_id"]
    owner = {**headers, "X-Tenant-Id": OTHER_TENANT_ID}
    assert web.patch(f"{base}/v2/deployments/{foreign['id']}", headers=owner, json={"secrets": []}).status_code == 200


def test_created_deployment_belongs_to_the_header_tenant(org_emulator: EmulatorServer, web: httpx.Client) -> None:
    headers = {"X-Api-Key": org_emulator.api_key, "X-Tenant-Id": OTHER_TENANT_ID}
    created = web.post(
        org_emulator.base_url + "/v2/deployments", headers=headers, json={"name": "other-new", "source": "codehost"}
    )
    assert created.status_code == 201 and created.json()["tenant_id"] == OTHER_TENANT_ID
    assert created.json()["id"] not in _ids(web, org_emulator, TENANT)


def test_workspace_key_needs_no_tenant_and_a_tenant_header_still_scopes(
    emulator: EmulatorServer, web: httpx.Client
) -> None:
    assert emulator.tenant_id is None
    everything = _ids(web, emulator, "")
    assert len(everything) == 250
    scoped = _ids(web, emulator, OTHER_TENANT_ID)
    assert 0 < len(scoped) < len(everything)
    assert len(_ids(web, emulator, DEFAULT_TENANT_ID)) == len(everything) - len(scoped)
