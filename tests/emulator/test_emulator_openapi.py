"""The emulator's OpenAPI document against the spec: the spec's four operations, the nine list params."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from airflow_provider.emulator.metrics import METRICS_TAG
from airflow_provider.emulator.state import EmulatorState, StatusName
from airflow_provider.emulator.tracing import TRACING_TAG
from airflow_provider.emulator.web.app import APPS_TAG, EMULATOR_ONLY_TAG, PRODUCTION_ONLY_TAG, create_app
from airflow_provider.models import DeploymentStatus, DeploymentType

SPEC_OPERATIONS = {
    ("GET", "/v2/auth/providers"),
    ("GET", "/v1/integrations/forge/codehost/{integration_id}/repos"),
    ("GET", "/v2/deployments"),
    ("PATCH", "/v2/deployments/{deployment_id}"),
}
LIST_PARAMS = {
    "limit",
    "offset",
    "name_contains",
    "status",
    "remote_reconciled",
    "tag_value_ids",
    "image_version",
    "deployment_type",
    "deployment_ids",
}
EXTRA_TAGS = {EMULATOR_ONLY_TAG, PRODUCTION_ONLY_TAG, APPS_TAG, TRACING_TAG, METRICS_TAG}


def openapi(**options: Any) -> dict[str, Any]:
    document: dict[str, Any] = create_app(EmulatorState(api_key="k", data={}, **options)).openapi()
    return document


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def spec_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        key
        for key, operation in operations(document).items()
        if not key[1].startswith("/_emulator") and not EXTRA_TAGS & set(operation.get("tags", []))
    }


def test_exactly_the_spec_operations_outside_the_flagged_extras() -> None:
    document = openapi()
    assert spec_operations(document) == SPEC_OPERATIONS
    flagged = {key for key, op in operations(document).items() if EXTRA_TAGS & set(op.get("tags", []))}
    assert flagged == {
        ("POST", "/v2/deployments"),
        ("GET", "/v2/deployments/{deployment_id}"),
        ("GET", "/v2/deployments/{deployment_id}/revisions"),
        ("GET", "/v2/deployments/{deployment_id}/revisions/{revision_id}"),
        ("POST", "/v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"),
        ("GET", "/v2/deployments/{deployment_id}/revisions/{revision_id}/logs"),
        ("POST", "/v1/projects/{deployment_id}/revisions/{revision_id}/build_logs"),
        ("POST", "/v1/projects/{deployment_id}/revisions/{revision_id}/deploy_logs"),
        ("POST", "/v1/projects/{deployment_id}/deploy_logs"),
        ("GET", "/apps/{deployment_id}"),
        ("GET", "/apps/{deployment_id}/{path}"),
        ("GET", "/tracing/sessions"),
        ("GET", "/tracing/sessions/{session_id}"),
        ("GET", "/tracing/info"),
        ("POST", "/tracing/runs/stats"),
        ("GET", "/metrics"),
    }


def test_optional_endpoints_leave_the_document_when_disabled() -> None:
    keys = set(operations(openapi(optional_endpoints=False)))
    assert not {key for key in keys if key[1].startswith("/v2/deployments/{deployment_id}") and key[0] != "PATCH"}
    assert ("POST", "/v2/deployments") in keys


def test_path_prefix_prefixes_the_service_paths_only() -> None:
    document = openapi(path_prefix="/api-host")
    assert spec_operations(document) == {(method, "/api-host" + path) for method, path in SPEC_OPERATIONS}
    assert any(path.startswith("/_emulator") for path in document["paths"])


def test_list_endpoint_has_the_nine_query_params_with_their_constraints() -> None:
    operation = operations(openapi())[("GET", "/v2/deployments")]
    params = {param["name"]: param for param in operation["parameters"] if param["in"] == "query"}
    assert set(params) == LIST_PARAMS
    assert [param for param in operation["parameters"] if param["in"] != "query"] == []
    limit = params["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 20)
    assert (params["offset"]["schema"]["minimum"], params["offset"]["schema"]["default"]) == (0, 0)
    assert all(not param.get("required", False) for param in params.values())

    def enum_of(name: str) -> list[str]:
        schema = params[name]["schema"]
        options = schema.get("anyOf", [schema])
        return next(option["enum"] for option in options if "enum" in option)

    assert enum_of("status") == [status.value for status in DeploymentStatus]
    assert all(kind.value in params["deployment_type"]["description"] for kind in DeploymentType)


def test_api_key_is_a_security_scheme_not_a_parameter() -> None:
    document = openapi()
    schemes = document["components"]["securitySchemes"]
    assert {"type": "apiKey", "in": "header", "name": "X-Api-Key"}.items() <= next(iter(schemes.values())).items()
    for key, operation in operations(document).items():
        if key in SPEC_OPERATIONS:
            assert operation.get("security"), key


@pytest.mark.parametrize("status", list(DeploymentStatus))
def test_status_filter_names_match_the_model_enum(status: DeploymentStatus) -> None:
    assert status.value in get_args(StatusName)
    assert len(get_args(StatusName)) == len(DeploymentStatus)
