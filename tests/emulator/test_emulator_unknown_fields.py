"""The ``unknown_fields`` switch: a newer service whose answers carry fields the provider's models lack, at
every depth, and which keeps what a PATCH sends of them (over HTTP, as production would)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.unknown_fields import (
    CONFIG_FIELDS,
    CONTAINER_FIELDS,
    DEPLOYMENT_FIELDS,
    REVISION_CONFIG_FIELDS,
    REVISION_FIELDS,
    SPEC_FIELDS,
)
from airflow_provider.models import Deployment, Revision

Factory = Callable[..., EmulatorServer]
EXTERNAL = "billing-worker-prod"  # external_docker, with a resource_spec
INITIAL = {name: initial for name, (initial, _default) in SPEC_FIELDS.items()}
DEFAULTS = {name: default for name, (_initial, default) in SPEC_FIELDS.items()}
SIDECAR = {"name": "proxy", "image": "envoy:1.30", "resources": {"limits": {"cpu": "500m"}}}


def _client(server: EmulatorServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers=server.headers, timeout=5)


def _named(http: httpx.Client, name: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"name_contains": name, "limit": 100}).json()["resources"]
    return next(item for item in resources if item["name"] == name)


def _patched(http: httpx.Client, target: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    response = http.patch(f"/v2/deployments/{target['id']}", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_answers_carry_fields_the_provider_does_not_know_at_every_depth(
    deployment_service_emulator_factory: Factory,
) -> None:
    server = deployment_service_emulator_factory(unknown_fields=True)
    with _client(server) as http:
        shown = _named(http, EXTERNAL)
        revision = http.get(f"/v2/deployments/{shown['id']}/revisions/{shown['active_revision_id']}").json()
        listed = http.get(f"/v2/deployments/{shown['id']}/revisions").json()["resources"]
    assert {name: shown[name] for name in DEPLOYMENT_FIELDS} == DEPLOYMENT_FIELDS
    config = shown["source_config"]
    assert {name: config[name] for name in CONFIG_FIELDS} == CONFIG_FIELDS
    assert {name: config["resource_spec"][name] for name in SPEC_FIELDS} == INITIAL
    assert config["resource_spec"]["cpu"] == 1.5  # the known fields as before
    for item in (shown, revision, *listed):
        assert {name: item["source_revision_config"][name] for name in REVISION_CONFIG_FIELDS} == REVISION_CONFIG_FIELDS
    for item in (revision, *listed):
        assert {name: item[name] for name in REVISION_FIELDS} == REVISION_FIELDS
    # The provider's models read them as unknown fields, nested ones included.
    unknown = {path for path, _known in Deployment.model_validate(shown).unknown_fields()}
    assert {"billing", "source_config.region", "source_config.resource_spec.gpu_count"} <= unknown
    assert "source_revision_config.build_platform" in unknown
    assert "build_info" in {path for path, _known in Revision.model_validate(revision).unknown_fields()}
    # The admin view (what tests assert on) shows them as the service does.
    assert server.state.find_deployment(EXTERNAL)["source_config"]["resource_spec"]["gpu_count"] == 1


def test_off_by_default_and_switchable_at_run_time(deployment_service_emulator_factory: Factory) -> None:
    server = deployment_service_emulator_factory()
    assert server.admin.settings()["unknown_fields"] is False
    with _client(server) as http:
        assert "gpu_count" not in _named(http, EXTERNAL)["source_config"]["resource_spec"]
        assert server.admin.update_settings(unknown_fields=True)["unknown_fields"] is True
        assert _named(http, EXTERNAL)["source_config"]["resource_spec"]["gpu_count"] == 1


def test_a_patch_that_sends_them_back_whole_keeps_them(deployment_service_emulator_factory: Factory) -> None:
    server = deployment_service_emulator_factory(unknown_fields=True)
    with _client(server) as http:
        target = _named(http, EXTERNAL)
        spec = dict(target["source_config"]["resource_spec"])
        spec.update(cpu=2, gpu_count=3, autoscaling={"metric": "rps", "target": 5, "window": {"seconds": 30}})
        spec["sidecars"] = [{**SIDECAR, "terminationMessagePolicy": "FallbackToLogsOnError", "unheard_of": 1}]
        body = {"source_config": {"resource_spec": spec, "region": "us-east-2"}}
        after = _patched(http, target, body)
        server.state.advance(5)
        again = _named(http, EXTERNAL)
    for shown in (after, again):
        kept = shown["source_config"]["resource_spec"]
        assert (kept["cpu"], kept["gpu_count"]) == (2, 3)
        assert kept["autoscaling"] == {"metric": "rps", "target": 5, "window": {"seconds": 30}}
        assert kept["sidecars"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert "unheard_of" not in kept["sidecars"][0]  # a field the service does not know either is ignored
        assert shown["source_config"]["region"] == "us-east-2"
        assert shown["source_config"]["network"] == CONFIG_FIELDS["network"]


def test_a_replacing_patch_without_them_resets_them_to_the_services_defaults(
    deployment_service_emulator_factory: Factory,
) -> None:
    server = deployment_service_emulator_factory(unknown_fields=True)
    with _client(server) as http:
        target = _named(http, EXTERNAL)
        after = _patched(http, target, {"source_config": {"resource_spec": {"cpu": 2, "sidecars": [SIDECAR]}}})
    spec = after["source_config"]["resource_spec"]
    assert {name: spec[name] for name in SPEC_FIELDS} == DEFAULTS != INITIAL  # a client that drops them shows
    assert spec["sidecars"][0]["terminationMessagePolicy"] == CONTAINER_FIELDS["terminationMessagePolicy"]
    assert after["source_config"]["region"] == CONFIG_FIELDS["region"]  # source_config merges: left alone


def test_merge_mode_changes_only_what_a_patch_gives(deployment_service_emulator_factory: Factory) -> None:
    server = deployment_service_emulator_factory(unknown_fields=True, resource_spec_mode="merge")
    with _client(server) as http:
        target = _named(http, EXTERNAL)
        first = _patched(http, target, {"source_config": {"resource_spec": {"gpu_count": 4}}})
        second = _patched(http, target, {"source_config": {"resource_spec": {"cpu": 2}}})
    assert first["source_config"]["resource_spec"]["gpu_count"] == 4
    spec = second["source_config"]["resource_spec"]
    assert (spec["cpu"], spec["gpu_count"], spec["autoscaling"]) == (2, 4, INITIAL["autoscaling"])


def test_the_newer_schema_still_checks_its_fields(deployment_service_emulator_factory: Factory) -> None:
    server = deployment_service_emulator_factory(unknown_fields=True)
    with _client(server) as http:
        target = _named(http, EXTERNAL)
        response = http.patch(
            f"/v2/deployments/{target['id']}", json={"source_config": {"resource_spec": {"gpu_count": -1}}}
        )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "source_config", "resource_spec", "gpu_count"]


def test_the_command_line_and_a_subprocess_server_have_the_switch(deployment_service_emulator_factory: Factory) -> None:
    data = {
        "deployments": [{"name": "only", "source": "external_docker", "source_config": {"resource_spec": {"cpu": 1}}}]
    }
    server = deployment_service_emulator_factory(in_subprocess=True, data=data, unknown_fields=True)
    assert server.admin.settings()["unknown_fields"] is True
    with _client(server) as http:
        assert _named(http, "only")["source_config"]["resource_spec"]["gpu_count"] == 1
