"""The production PATCH contract: 422 schema bounds, 400 rules, resource_spec replaced with a revision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import EmulatorError
from airflow_provider.models import PatchDeploymentRequest

EXTERNAL = "billing-worker-prod"  # external_docker, with a resource_spec
CODEHOST = "checkout-api-dev"  # codehost, build_on_push true, repo_ref main
INTERNAL_DOCKER = "checkout-api-staging"


def named(http: httpx.Client, name: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"name_contains": name, "limit": 100}).json()["resources"]
    return next(d for d in resources if d["name"] == name)


def of_source(http: httpx.Client, source: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"limit": 100}).json()["resources"]
    return next(d for d in resources if d["source"] == source)


def patch(http: httpx.Client, target: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
    return http.patch(f"/v2/deployments/{target['id']}", json=body)


def spec_patch(**spec: Any) -> dict[str, Any]:
    return {"source_config": {"resource_spec": spec}}


def error_locs(response: httpx.Response) -> list[list[Any]]:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert all({"loc", "msg", "type"} <= item.keys() for item in detail)
    return [item["loc"] for item in detail]


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    return detail


# ------------------------------------------------------------------------------ resource_spec
def test_resource_spec_patch_creates_a_revision_and_replaces_the_whole_spec(client: httpx.Client) -> None:
    target = named(client, EXTERNAL)
    assert target["source_config"]["resource_spec"]["db_storage_gi"] == 20
    response = patch(client, target, spec_patch(cpu=2, memory_mb=4096, max_scale=3))
    assert response.status_code == 200, response.text
    after = response.json()
    assert after["latest_revision_id"] != target["latest_revision_id"]
    spec = after["source_config"]["resource_spec"]
    assert (spec["cpu"], spec["memory_mb"], spec["max_scale"]) == (2, 4096, 3)
    assert spec["db_storage_gi"] is None and spec["min_scale"] is None  # not merged with the old spec
    assert (spec["cpu_limit"], spec["memory_limit_mb"]) == (4, 8192)  # an unset limit is twice the request
    revision = client.get(f"/v2/deployments/{target['id']}/revisions/{after['latest_revision_id']}").json()
    assert revision["source"] == "external_docker"
    assert revision["source_revision_config"]["image_uri"] == target["source_revision_config"]["image_uri"]


def test_integers_come_back_as_integers_and_cpu_is_rounded_to_millicores(client: httpx.Client) -> None:
    target = named(client, EXTERNAL)
    body = spec_patch(cpu=0.12345, cpu_limit=0.5, memory_mb=512.0, memory_limit_mb="1024", db_max_connections=50.0)
    response = patch(client, target, body)
    assert response.status_code == 200, response.text
    raw = response.text
    assert "512.0" not in raw and "1024.0" not in raw and "50.0" not in raw
    spec = response.json()["source_config"]["resource_spec"]
    assert spec["memory_mb"] == 512 and isinstance(spec["memory_mb"], int)
    assert spec["memory_limit_mb"] == 1024 and spec["db_max_connections"] == 50
    assert spec["cpu"] == 0.123 and spec["cpu_limit"] == 0.5
    listed = named(client, EXTERNAL)["source_config"]["resource_spec"]
    assert listed == spec


@pytest.mark.parametrize(
    ("spec", "loc"),
    [
        ({"cpu": 0.05}, ["cpu"]),
        ({"cpu": 8.5}, ["cpu"]),
        ({"queue_cpu": 9}, ["queue_cpu"]),
        ({"redis_cpu": 0}, ["redis_cpu"]),
        ({"cpu_limit": 16.5}, ["cpu_limit"]),
        ({"queue_cpu_limit": 0.01}, ["queue_cpu_limit"]),
        ({"redis_cpu_limit": 17}, ["redis_cpu_limit"]),
        ({"memory_mb": 512.5}, ["memory_mb"]),
        ({"redis_memory_limit_mb": 1.5}, ["redis_memory_limit_mb"]),
        ({"min_scale": 1.5}, ["min_scale"]),
        ({"db_storage_gi": 10.25}, ["db_storage_gi"]),
        ({"db_max_connections": "many"}, ["db_max_connections"]),
        ({"max_scale": -1}, ["max_scale"]),
        ({"labels": {"team": 7}}, ["labels", "team"]),
        ({"sidecars": [{"image": "proxy:1"}]}, ["sidecars", 0, "name"]),
        ({"init_containers": [{"name": "init", "volumeMounts": [{"name": "v"}]}]}, ["init_containers", 0]),
        ({"volume_mounts": [{"name": "data", "mountPath": None}]}, ["volume_mounts", 0, "mountPath"]),
        (
            {"sidecars": [{"name": "proxy", "resources": {"limits": {"cpu": 0.5}}}]},
            ["sidecars", 0, "resources", "limits", "cpu"],
        ),
        (
            {"init_containers": [{"name": "init", "resources": {"requests": {"memory": 512}}}]},
            ["init_containers", 0, "resources", "requests", "memory"],
        ),
    ],
)
def test_resource_spec_bounds_are_422(client: httpx.Client, spec: dict[str, Any], loc: list[Any]) -> None:
    target = named(client, EXTERNAL)
    locs = error_locs(patch(client, target, spec_patch(**spec)))
    expected = ["body", "source_config", "resource_spec", *loc]
    assert any(found[: len(expected)] == expected for found in locs), locs
    assert named(client, EXTERNAL) == target  # nothing applied


def test_bounds_accept_their_edges(client: httpx.Client) -> None:
    target = named(client, EXTERNAL)
    edges = spec_patch(cpu=8, cpu_limit=16, queue_cpu=0.1, queue_cpu_limit=0.1, redis_cpu=8, redis_cpu_limit=16)
    response = patch(client, target, edges)
    assert response.status_code == 200, response.text
    assert response.json()["source_config"]["resource_spec"]["cpu_limit"] == 16


def test_container_resources_take_kubernetes_quantity_strings(client: httpx.Client) -> None:
    target = named(client, EXTERNAL)
    sidecar = {"name": "proxy", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "250m"}}}
    response = patch(client, target, spec_patch(sidecars=[sidecar]))
    assert response.status_code == 200, response.text
    assert response.json()["source_config"]["resource_spec"]["sidecars"][0]["resources"] == sidecar["resources"]


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        ({"cpu": 4, "cpu_limit": 2}, "cpu_limit"),
        ({"memory_mb": 4096, "memory_limit_mb": 1024}, "memory_limit_mb"),
        ({"redis_cpu": 1, "redis_cpu_limit": 0.5}, "redis_cpu_limit"),
    ],
)
def test_a_limit_below_its_request_is_422_at_the_limit(client: httpx.Client, spec: dict[str, Any], limit: str) -> None:
    """Kubernetes refuses a container whose request exceeds its limit; production answers before applying."""
    target = named(client, EXTERNAL)
    response = patch(client, target, spec_patch(**spec))
    assert error_locs(response) == [["body", "source_config", "resource_spec", limit]]
    assert "must be at least" in response.json()["detail"][0]["msg"]
    assert named(client, EXTERNAL) == target  # nothing applied, no revision


def test_an_unset_limit_is_twice_the_new_request_and_echoed(client: httpx.Client) -> None:
    target = named(client, EXTERNAL)
    patch(client, target, spec_patch(cpu=1, memory_mb=512))
    shown = named(client, EXTERNAL)["source_config"]["resource_spec"]
    assert (shown["cpu_limit"], shown["memory_limit_mb"]) == (2, 1024)
    after = patch(client, target, spec_patch(cpu=4, memory_mb=4096)).json()["source_config"]["resource_spec"]
    assert (after["cpu_limit"], after["memory_limit_mb"]) == (8, 8192)


def test_merge_mode_keeps_the_old_reading(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    server = deployment_service_emulator_factory(resource_spec_mode="merge")
    http = make_client(server)
    target = named(http, EXTERNAL)
    after = patch(http, target, spec_patch(max_scale=9)).json()
    assert after["latest_revision_id"] == target["latest_revision_id"]
    spec = after["source_config"]["resource_spec"]
    assert (spec["max_scale"], spec["cpu"], spec["db_storage_gi"]) == (9, 1.5, 20)
    assert spec["cpu_limit"] is None  # no limit defaults in merge mode
    # switched back at run time through the admin API
    assert server.admin.update_settings(resource_spec_mode="replace")["resource_spec_mode"] == "replace"
    replaced = patch(http, target, spec_patch(max_scale=4)).json()
    assert replaced["latest_revision_id"] != target["latest_revision_id"]
    assert replaced["source_config"]["resource_spec"]["db_storage_gi"] is None


def test_bounds_hold_in_merge_mode_too(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    http = make_client(deployment_service_emulator_factory(resource_spec_mode="merge"))
    assert error_locs(patch(http, named(http, EXTERNAL), spec_patch(cpu=12))) == [
        ["body", "source_config", "resource_spec", "cpu"]
    ]


# ------------------------------------------------------------------------------ immutable fields
@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        (CODEHOST, "integration_id", "00000000-0000-4000-8000-0000000000aa"),
        (CODEHOST, "repo_url", "https://codehost.example.com/acme-corp/other"),
        (EXTERNAL, "listener_id", "00000000-0000-4000-8000-0000000000bb"),
        (CODEHOST, "deployment_type", "prod"),
    ],
)
def test_immutable_fields_are_refused_with_400(client: httpx.Client, name: str, field: str, value: str) -> None:
    target = named(client, name)
    detail = refusal(patch(client, target, {"source_config": {field: value}}))
    assert f"source_config.{field}" in detail and "cannot be changed" in detail
    assert named(client, name) == target


def test_immutable_fields_accept_their_current_value(client: httpx.Client) -> None:
    target = named(client, CODEHOST)
    config = target["source_config"]
    same = {
        "integration_id": config["integration_id"].upper(),
        "repo_url": config["repo_url"],
        "deployment_type": "dev",
    }
    response = patch(client, target, {"source_config": same})
    assert response.status_code == 200, response.text
    assert response.json()["source_config"]["deployment_type"] == "dev"
    assert response.json()["latest_revision_id"] == target["latest_revision_id"]


def test_deployment_type_is_shown_in_source_config(client: httpx.Client) -> None:
    assert named(client, "checkout-api-prod")["source_config"]["deployment_type"] == "prod"
    assert named(client, CODEHOST)["source_config"]["deployment_type"] == "dev"


# ------------------------------------------------------------------------------ source rules
@pytest.mark.parametrize(
    ("source", "field", "allowed"),
    [
        ("external_docker", "repo_ref", "codehost"),
        ("internal_docker", "repo_ref", "codehost"),
        ("codehost", "image_uri", "external_docker and internal_docker"),
        ("internal_source", "image_uri", "external_docker and internal_docker"),
        ("codehost", "source_tarball_path", "internal_source"),
        ("external_docker", "graph_config_path", "codehost and internal_source"),
        ("internal_docker", "graph_config_path", "codehost and internal_source"),
    ],
)
def test_revision_fields_follow_the_source(client: httpx.Client, source: str, field: str, allowed: str) -> None:
    target = of_source(client, source)
    detail = refusal(patch(client, target, {"source_revision_config": {field: "x"}}))
    assert f"source_revision_config.{field}" in detail and f"source {source}" in detail and allowed in detail
    assert named(client, target["name"])["latest_revision_id"] == target["latest_revision_id"]


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ("codehost", "repo_ref"),
        ("codehost", "graph_config_path"),
        ("internal_source", "source_tarball_path"),
        ("internal_source", "graph_config_path"),
        ("internal_docker", "image_uri"),
        ("external_docker", "image_uri"),
    ],
)
def test_revision_fields_accepted_for_their_source(client: httpx.Client, source: str, field: str) -> None:
    target = of_source(client, source)
    response = patch(client, target, {"source_revision_config": {field: "value-2"}})
    assert response.status_code == 200, response.text
    assert response.json()["source_revision_config"][field] == "value-2"
    assert response.json()["latest_revision_id"] != target["latest_revision_id"]


def test_revision_source_decides_which_fields_apply(client: httpx.Client) -> None:
    target = named(client, CODEHOST)
    refused = patch(client, target, {"revision_source": "internal_docker", "source_revision_config": {"repo_ref": "x"}})
    assert "source internal_docker" in refusal(refused)
    body = {"revision_source": "internal_docker", "source_revision_config": {"image_uri": "registry/app:pushed"}}
    response = patch(client, target, body)
    assert response.status_code == 200, response.text
    revision_id = response.json()["latest_revision_id"]
    revision = client.get(f"/v2/deployments/{target['id']}/revisions/{revision_id}").json()
    assert revision["source"] == "internal_docker"
    assert revision["source_revision_config"]["image_uri"] == "registry/app:pushed"


def test_custom_url_is_settable_for_external_docker_only(client: httpx.Client) -> None:
    external = named(client, EXTERNAL)
    response = patch(client, external, {"source_config": {"custom_url": "https://billing.example.com"}})
    assert response.status_code == 200
    assert response.json()["source_config"]["custom_url"] == "https://billing.example.com"
    codehost = named(client, CODEHOST)
    detail = refusal(patch(client, codehost, {"source_config": {"custom_url": "https://x.example.com"}}))
    assert "source_config.custom_url" in detail and "source codehost" in detail
    shown = codehost["source_config"]["custom_url"]
    assert patch(client, codehost, {"source_config": {"custom_url": shown}}).status_code == 200  # unchanged: fine


def test_secret_references_and_resource_spec_are_external_docker_only(client: httpx.Client) -> None:
    reference = {"name": "TOKEN", "secret_name": "app-secrets", "secret_key": "token"}
    external = named(client, EXTERNAL)
    response = patch(client, external, {"secret_references": [reference]})
    assert response.status_code == 200 and response.json()["secret_references"] == [reference]
    target = of_source(client, "internal_source")
    assert "secret_references" in refusal(patch(client, target, {"secret_references": [reference]}))
    detail = refusal(patch(client, target, spec_patch(cpu=1)))
    assert "source_config.resource_spec" in detail and "source internal_source" in detail


@pytest.mark.parametrize(
    "body",
    [
        {"source_revision_config": {"repo_ref": "refs/tags/v1.0.0"}},  # build_on_push already true
        {"source_config": {"build_on_push": True}, "source_revision_config": {"repo_ref": "refs/tags/v2"}},
    ],
)
def test_build_on_push_cannot_follow_a_tag(client: httpx.Client, body: dict[str, Any]) -> None:
    target = named(client, CODEHOST)
    assert target["source_config"]["build_on_push"] is True
    detail = refusal(patch(client, target, body))
    assert "build_on_push" in detail and "refs/tags/" in detail


def test_a_tag_with_build_on_push_off_is_fine_and_then_the_flag_is_refused(client: httpx.Client) -> None:
    target = named(client, CODEHOST)
    body = {"source_config": {"build_on_push": False}, "source_revision_config": {"repo_ref": "refs/tags/v1.0.0"}}
    assert patch(client, target, body).status_code == 200
    assert "build_on_push" in refusal(patch(client, target, {"source_config": {"build_on_push": True}}))
    assert patch(client, target, {"source_config": {"build_on_push": False}}).status_code == 200


def test_a_refused_patch_changes_nothing(client: httpx.Client, emulator: EmulatorServer) -> None:
    target = named(client, CODEHOST)
    emulator.state.advance(5)
    body = {
        "source_config": {"build_on_push": False, "install_command": "make", "repo_url": "https://elsewhere"},
        "source_revision_config": {"repo_ref": "release"},
        "secrets": [{"name": "NEW", "value": "new-secret-value"}],
    }
    detail = refusal(patch(client, target, body))
    assert "repo_url" in detail and "new-secret-value" not in detail
    assert named(client, CODEHOST) == target
    assert len(emulator.admin.deployment(target["id"])["revisions"]) == 1


def test_every_problem_is_named_in_one_answer(client: httpx.Client) -> None:
    target = named(client, CODEHOST)
    body = {
        "source_config": {"repo_url": "x", "resource_spec": {"cpu": 1}},
        "source_revision_config": {"image_uri": "a"},
    }
    detail = refusal(patch(client, target, body))
    for field in ("source_config.repo_url", "source_config.resource_spec", "source_revision_config.image_uri"):
        assert field in detail


def test_schema_errors_come_before_rules(client: httpx.Client) -> None:
    target = named(client, CODEHOST)
    body = {"source_config": {"repo_url": "x", "resource_spec": {"cpu": 99}}}
    assert error_locs(patch(client, target, body)) == [["body", "source_config", "resource_spec", "cpu"]]


# ------------------------------------------------------------------------------ the Python door
def test_state_patch_applies_the_same_contract(emulator: EmulatorServer, client: httpx.Client) -> None:
    state = emulator.state
    target = named(client, CODEHOST)
    with pytest.raises(EmulatorError) as refused:
        state.patch_deployment(target["id"], {"source_revision_config": {"image_uri": "x"}})
    assert refused.value.status_code == 400 and "image_uri" in str(refused.value.detail)
    external = named(client, EXTERNAL)
    with pytest.raises(EmulatorError) as invalid:
        state.patch_deployment(external["id"], spec_patch(memory_mb=1.5))
    assert invalid.value.status_code == 422
    assert isinstance(invalid.value.detail, list)
    assert invalid.value.detail[0]["loc"] == ["body", "source_config", "resource_spec", "memory_mb"]
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"repo_ref": "from-python"}})
    after = state.patch_deployment(target["id"], request)
    assert after["source_revision_config"]["repo_ref"] == "from-python"
