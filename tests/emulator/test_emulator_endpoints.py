"""The service endpoints over real HTTP: shapes, filters, pagination, patch semantics, errors."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.models import Deployment, DeploymentListPage, OAuthProvider, Repository, Revision

UNKNOWN_ID = "0b7c6d2e-0000-4000-8000-00000000abcd"


def list_all(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    """Every deployment matching ``params``, following the offset pagination."""
    resources: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = http.get("/v2/deployments", params={**params, "offset": offset, "limit": 100})
        assert page.status_code == 200, page.text
        body = page.json()
        resources += body["resources"]
        if len(body["resources"]) < 100:
            return resources
        offset = body["offset"]


def assert_422(response: httpx.Response, loc: list[Any]) -> None:
    """A FastAPI-style validation error naming ``loc``."""
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    for item in detail:
        assert {"loc", "msg", "type"} <= item.keys()
    assert loc in [item["loc"] for item in detail], detail


def first_named(http: httpx.Client, name: str) -> dict[str, Any]:
    matches = [d for d in http.get("/v2/deployments", params={"name_contains": name}).json()["resources"]]
    return next(d for d in matches if d["name"] == name)


# ------------------------------------------------------------------------------- providers, repos
def test_oauth_providers(client: httpx.Client) -> None:
    response = client.get("/v2/auth/providers")
    assert response.status_code == 200
    providers = [OAuthProvider.model_validate(item) for item in response.json()]
    assert len(providers) >= 2
    assert {"provider_type", "token_endpoint_auth_method", "is_dynamic_client"} <= response.json()[0].keys()


def test_repositories_of_each_integration(client: httpx.Client, emulator: EmulatorServer) -> None:
    integrations = emulator.state._integrations
    assert len(integrations) == 2
    for integration_id, repos in integrations.items():
        response = client.get(f"/v1/integrations/forge/codehost/{integration_id.upper()}/repos")
        assert response.status_code == 200
        listed = [Repository.model_validate(item) for item in response.json()]
        assert [repo.url for repo in listed] == [repo.url for repo in repos]
        assert {repo.host_integration_id for repo in listed} == {integration_id}


def test_repositories_unknown_integration_is_404_with_string_detail(client: httpx.Client) -> None:
    response = client.get(f"/v1/integrations/forge/codehost/{UNKNOWN_ID}/repos")
    assert response.status_code == 404
    assert response.json() == {"detail": f"Integration {UNKNOWN_ID} not found."}


def test_repositories_non_uuid_is_422(client: httpx.Client) -> None:
    assert_422(client.get("/v1/integrations/forge/codehost/not-a-uuid/repos"), ["path", "integration_id"])


# ------------------------------------------------------------------------------------ list
def test_list_default_page_shape_and_order(client: httpx.Client) -> None:
    response = client.get("/v2/deployments")
    assert response.status_code == 200
    page = DeploymentListPage.model_validate(response.json())
    assert len(page.resources) == 20 and page.offset == 20
    for resource in response.json()["resources"]:
        assert set(Deployment.model_fields) - {"secret_references", "image_version"} <= resource.keys()
        assert "deployment_type" not in resource and "tag_value_ids" not in resource
    keys = [(d.created_at, d.id) for d in page.resources]
    assert keys == sorted(keys)


def test_list_echoes_secret_values_in_clear(client: httpx.Client) -> None:
    secrets = [s for d in list_all(client) for s in d["secrets"]]
    assert secrets and all(s["value"].startswith("example-secret-value-") for s in secrets)


@pytest.mark.parametrize("limit", [1, 7, 100])
def test_list_limit(client: httpx.Client, limit: int) -> None:
    body = client.get("/v2/deployments", params={"limit": limit, "offset": 3}).json()
    assert len(body["resources"]) == limit
    assert body["offset"] == 3 + limit


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 101}, ["query", "limit"]),
        ({"limit": -5}, ["query", "limit"]),
        ({"limit": "ten"}, ["query", "limit"]),
        ({"offset": -1}, ["query", "offset"]),
        ({"status": "RUNNING"}, ["query", "status"]),
        ({"status": "ready"}, ["query", "status"]),
        ({"deployment_type": "staging"}, ["query", "deployment_type"]),
        ({"remote_reconciled": "maybe"}, ["query", "remote_reconciled"]),
        ({"deployment_ids": f"{UNKNOWN_ID},not-a-uuid"}, ["query", "deployment_ids"]),
    ],
)
def test_list_invalid_query_is_422(client: httpx.Client, params: dict[str, Any], loc: list[str]) -> None:
    assert_422(client.get("/v2/deployments", params=params), loc)


def test_list_offset_past_end_is_empty(client: httpx.Client) -> None:
    total = len(list_all(client))
    for offset in (total, total + 1, 10_000):
        body = client.get("/v2/deployments", params={"offset": offset}).json()
        assert body == {"resources": [], "offset": offset}


@pytest.mark.parametrize("limit", [50, 100, 33])
def test_pagination_walks_every_deployment_once(client: httpx.Client, emulator: EmulatorServer, limit: int) -> None:
    total = len(emulator.state.snapshot()["deployments"])
    assert total == 250
    seen: list[str] = []
    sizes: list[int] = []
    offset = 0
    while True:
        body = client.get("/v2/deployments", params={"limit": limit, "offset": offset}).json()
        sizes.append(len(body["resources"]))
        seen += [d["id"] for d in body["resources"]]
        assert body["offset"] == offset + len(body["resources"])
        if len(body["resources"]) < limit:
            break
        offset = body["offset"]
    assert len(seen) == len(set(seen)) == total
    full, rest = divmod(total, limit)
    # An exact multiple ends with an empty page; otherwise with a short one.
    assert sizes == [limit] * full + [rest]


def _expected(emulator: EmulatorServer, predicate: Callable[[dict[str, Any]], bool]) -> list[str]:
    deployments = emulator.state.snapshot()["deployments"]
    return [d["id"] for d in deployments if predicate(d)]


def _filter_cases(snapshot: list[dict[str, Any]]) -> list[tuple[dict[str, str], Callable[[dict[str, Any]], bool]]]:
    tags = sorted({tag for d in snapshot for tag in d["tag_value_ids"]})
    some_ids = [d["id"] for d in snapshot[5:8]]
    return [
        ({"name_contains": "checkout-api-dev"}, lambda d: "checkout-api-dev" in d["name"]),
        ({"name_contains": "SEARCH-dev"}, lambda d: "search-dev" in d["name"]),
        *[
            ({"status": status}, lambda d, s=status: d["status"] == s)
            for status in ("READY", "AWAITING_DELETE", "UNUSED")
        ],
        ({"remote_reconciled": "true"}, lambda d: d["remote_reconciled"]),
        ({"remote_reconciled": "false"}, lambda d: not d["remote_reconciled"]),
        ({"tag_value_ids": tags[0]}, lambda d: tags[0] in d["tag_value_ids"]),
        ({"tag_value_ids": f"{tags[1]},{tags[2]}"}, lambda d: bool({tags[1], tags[2]} & set(d["tag_value_ids"]))),
        ({"image_version": "0.4.1"}, lambda d: d["image_version"] == "0.4.1"),
        *[({"deployment_type": t}, lambda d, t=t: d["deployment_type"] == t) for t in ("dev_free", "dev", "prod")],
        ({"deployment_ids": ",".join(i.upper() for i in some_ids)}, lambda d: d["id"] in some_ids),
        (
            {"deployment_type": "prod", "status": "READY", "name_contains": "-"},
            lambda d: d["deployment_type"] == "prod" and d["status"] == "READY",
        ),
    ]


def test_every_filter_matches_an_independent_computation(client: httpx.Client, emulator: EmulatorServer) -> None:
    snapshot = emulator.state.snapshot()["deployments"]
    for params, predicate in _filter_cases(snapshot):
        expected = _expected(emulator, predicate)
        assert 0 < len(expected) < len(snapshot), params  # the case really filters
        assert [d["id"] for d in list_all(client, **params)] == expected, params


def test_name_contains_is_a_case_insensitive_substring(client: httpx.Client) -> None:
    names = {d["name"] for d in list_all(client, name_contains="Checkout-API-Dev")}
    assert {"checkout-api-dev", "checkout-api-dev-eu", "legacy-checkout-api-dev"} <= names
    assert "checkout-api-prod" not in names


def test_unknown_filter_values_match_nothing(client: httpx.Client) -> None:
    assert list_all(client, deployment_ids=UNKNOWN_ID) == []
    assert list_all(client, tag_value_ids="no-such-tag") == []
    assert list_all(client, name_contains="zzz-no-such-name") == []


# ----------------------------------------------------------------------------------- patch
def test_patch_unknown_deployment_is_404(client: httpx.Client) -> None:
    response = client.patch(f"/v2/deployments/{UNKNOWN_ID}", json={"source_config": {"build_on_push": True}})
    assert response.status_code == 404
    assert response.json() == {"detail": f"Deployment ID {UNKNOWN_ID} not found."}


def test_patch_non_uuid_is_422(client: httpx.Client) -> None:
    assert_422(client.patch("/v2/deployments/nope", json={}), ["path", "deployment_id"])


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"source_config": {"build_on_push": "sometimes"}}, ["body", "source_config", "build_on_push"]),
        ({"source_config": {"resource_spec": {"cpu": "lots"}}}, ["body", "source_config", "resource_spec", "cpu"]),
        ({"secrets": "A=1"}, ["body", "secrets"]),
        ({"secrets": [{"name": "A"}]}, ["body", "secrets", 0, "value"]),
        ({"revision_source": "svn"}, ["body", "revision_source"]),
        ({"source_revision_config": ["main"]}, ["body", "source_revision_config"]),
    ],
)
def test_patch_wrong_types_are_422(client: httpx.Client, body: dict[str, Any], loc: list[Any]) -> None:
    target = first_named(client, "checkout-api-dev")
    assert_422(client.patch(f"/v2/deployments/{target['id']}", json=body), loc)


def test_patch_body_not_json_is_422(client: httpx.Client) -> None:
    target = first_named(client, "checkout-api-dev")
    response = client.patch(
        f"/v2/deployments/{target['id']}", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)


def test_patch_source_config_merges_field_by_field_without_revision(
    client: httpx.Client, emulator: EmulatorServer
) -> None:
    target = first_named(client, "checkout-api-prod")
    before = target["source_config"]
    assert before["resource_spec"]["cpu"] == 1.5 and before["build_on_push"] is False
    emulator.state.advance(5)
    body = {"source_config": {"build_on_push": True, "repo_url": None, "install_command": "make deps"}}
    response = client.patch(f"/v2/deployments/{target['id']}", json=body)
    assert response.status_code == 200
    after = response.json()
    Deployment.model_validate(after)
    assert after["source_config"]["build_on_push"] is True
    assert after["source_config"]["install_command"] == "make deps"
    assert after["source_config"]["repo_url"] == before["repo_url"]  # null keeps the value
    assert after["source_config"]["resource_spec"] == before["resource_spec"]
    assert after["latest_revision_id"] == target["latest_revision_id"]
    assert after["updated_at"] > target["updated_at"]


def test_patch_source_revision_config_creates_a_revision(client: httpx.Client) -> None:
    target = first_named(client, "checkout-api-dev")
    response = client.patch(f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "v2"}})
    assert response.status_code == 200
    after = response.json()
    assert after["latest_revision_id"] not in (None, target["latest_revision_id"])
    assert after["active_revision_id"] == target["active_revision_id"]
    assert after["source_revision_config"]["repo_ref"] == "v2"
    assert after["source_revision_config"]["graph_config_path"] == target["source_revision_config"]["graph_config_path"]
    assert after["source_revision_config"]["repo_commit_sha"] != target["source_revision_config"]["repo_commit_sha"]
    assert after["status"] == "READY"


def test_patch_secrets_replace_the_list_and_create_a_revision(client: httpx.Client) -> None:
    target = next(d for d in list_all(client, status="READY") if d["secrets"])
    body = {"secrets": [{"name": "NEW_TOKEN", "value": "s3cr3t-value"}]}
    after = client.patch(f"/v2/deployments/{target['id']}", json=body).json()
    assert after["secrets"] == [{"name": "NEW_TOKEN", "value": "s3cr3t-value"}]  # echoed in clear
    assert after["latest_revision_id"] != target["latest_revision_id"]
    emptied = client.patch(f"/v2/deployments/{target['id']}", json={"secrets": []}).json()
    assert emptied["secrets"] == []
    assert emptied["latest_revision_id"] != after["latest_revision_id"]


def test_patch_with_only_null_revision_fields_creates_no_revision(client: httpx.Client) -> None:
    target = first_named(client, "search-dev")
    body = {"source_revision_config": {"repo_ref": None, "image_uri": None}, "secrets": None}
    after = client.patch(f"/v2/deployments/{target['id']}", json=body).json()
    assert after["latest_revision_id"] == target["latest_revision_id"]
    assert after["updated_at"] == target["updated_at"]


def test_patch_ignores_unknown_fields(client: httpx.Client) -> None:
    target = first_named(client, "search-dev")
    body = {
        "bogus_top_level": 1,
        "source_config": {"build_on_push": False, "bogus_nested": "x"},
        "source_revision_config": {"repo_ref": "feature/x", "repo_commit_sha": "f" * 40, "bogus": True},
    }
    response = client.patch(f"/v2/deployments/{target['id']}", json=body)
    assert response.status_code == 200
    after = response.json()
    assert "bogus_top_level" not in after and "bogus_nested" not in after["source_config"]
    assert "bogus" not in after["source_revision_config"]
    assert after["source_revision_config"]["repo_ref"] == "feature/x"
    assert after["source_revision_config"]["repo_commit_sha"] != "f" * 40  # read-only: not taken from the patch
    only_unknown = client.patch(f"/v2/deployments/{target['id']}", json={"whatever": 1})
    assert only_unknown.status_code == 200
    assert only_unknown.json()["latest_revision_id"] == after["latest_revision_id"]


# ------------------------------------------------------------------ production-only endpoints
def test_get_deployment_matches_the_list_entry(client: httpx.Client) -> None:
    target = first_named(client, "checkout-api-dev")
    response = client.get(f"/v2/deployments/{target['id']}")
    assert response.status_code == 200
    assert response.json() == target
    missing = client.get(f"/v2/deployments/{UNKNOWN_ID}")
    assert missing.status_code == 404 and missing.json() == {"detail": f"Deployment ID {UNKNOWN_ID} not found."}


def test_get_revision(client: httpx.Client) -> None:
    target = first_named(client, "checkout-api-dev")
    response = client.get(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}")
    assert response.status_code == 200
    body = response.json()
    fields = {"id", "deployment_id", "status", "source", "source_revision_config", "created_at", "updated_at"}
    fields.add("status_message")
    assert set(body) == fields
    revision = Revision.model_validate(body)
    assert revision.status.value == "DEPLOYED" and revision.deployment_id == target["id"]
    other = first_named(client, "search-dev")
    assert client.get(f"/v2/deployments/{other['id']}/revisions/{target['active_revision_id']}").status_code == 404
    assert client.get(f"/v2/deployments/{target['id']}/revisions/{UNKNOWN_ID}").status_code == 404


def test_optional_endpoints_can_be_disabled(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    server = deployment_service_emulator_factory(optional_endpoints=False)
    http = make_client(server)
    target = first_named(http, "checkout-api-dev")
    assert http.get(f"/v2/deployments/{target['id']}").status_code == 405
    assert http.get(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}").status_code == 404
    patched = http.patch(f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "x"}})
    assert patched.status_code == 200


# ----------------------------------------------------------------------------- create (extra)
def test_create_from_a_repository_listing(client: httpx.Client, emulator: EmulatorServer) -> None:
    integration_id = next(iter(emulator.state._integrations))
    repo = Repository.model_validate(client.get(f"/v1/integrations/forge/codehost/{integration_id}/repos").json()[0])
    values = repo.deployment_creation_values()
    body = {
        "name": "brand-new-agent",
        "source": "codehost",
        "integration_id": values.integration_id,
        "source_config": {"repo_url": values.source_config.repo_url},
        "source_revision_config": {"repo_ref": values.source_revision_config.repo_ref},
        "secrets": [{"name": "TOKEN", "value": "abc"}],
        "deployment_type": "prod",
        "tag_value_ids": ["t-1"],
    }
    response = client.post("/v2/deployments", json=body)
    assert response.status_code == 201, response.text
    created = Deployment.model_validate(response.json())
    assert created.status.value == "AWAITING_DATABASE"
    assert created.latest_revision_id is not None and created.active_revision_id is None
    assert created.source_config.integration_id == integration_id
    assert created.source_revision_config.repo_ref == repo.default_branch
    assert response.json()["secrets"] == [{"name": "TOKEN", "value": "abc"}]
    assert [d["id"] for d in list_all(client, tag_value_ids="t-1", deployment_type="prod")] == [created.id]
    duplicate = client.post("/v2/deployments", json=body)
    assert duplicate.status_code == 409 and isinstance(duplicate.json()["detail"], str)


def test_create_refuses_unknown_fields_and_bad_sources(client: httpx.Client) -> None:
    assert client.post("/v2/deployments", json={"name": "x", "source": "codehost", "colour": "red"}).status_code == 422
    assert_422(client.post("/v2/deployments", json={"name": "x", "source": "svn"}), ["body", "source"])


# ------------------------------------------------------------------------------- path prefix
def test_path_prefix(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
    make_client: Callable[..., httpx.Client],
    web: httpx.Client,
) -> None:
    server = deployment_service_emulator_factory(path_prefix="/api-host")
    assert server.base_url.endswith("/api-host") and server.root_url + "/api-host" == server.base_url
    http = make_client(server)
    assert http.get("/v2/deployments", params={"limit": 1}).status_code == 200
    bare = web.get(f"{server.root_url}/v2/deployments", headers=server.headers)
    assert bare.status_code == 404
    assert server.admin.counters() == {"GET /v2/deployments": 1, "GET /v2/deployments (no route)": 1}
    assert server.admin.now() == server.state.now()


def test_upper_case_uuids_are_accepted(client: httpx.Client) -> None:
    target = first_named(client, "checkout-api-dev")
    upper = str(uuid.UUID(target["id"])).upper()
    assert client.get(f"/v2/deployments/{upper}").json()["id"] == target["id"]
