"""Models: responses tolerate what they do not know, requests refuse it, secrets stay hidden."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from airflow_provider.models import (
    REDACTED,
    CreateDeploymentRequest,
    Deployment,
    DeploymentListPage,
    DeploymentSource,
    DeploymentStatus,
    ListDeploymentsQuery,
    OAuthProvider,
    PatchDeploymentRequest,
    Repository,
    Revision,
    RevisionStatus,
)

DEPLOYMENT_ID = "7f4b6c2e-3a51-4a8e-9d2c-0f1e2d3c4b5a"
TENANT_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
REV_OLD = "11111111-1111-4111-8111-111111111111"
REV_NEW = "22222222-2222-4222-8222-222222222222"


def deployment_json(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "checkout-api",
        "source": "codehost",
        "source_config": {
            "integration_id": "33333333-3333-4333-8333-333333333333",
            "repo_url": "https://codehost.example/acme/checkout",
            "build_on_push": False,
            "custom_url": None,
            "resource_spec": {
                "min_scale": 1,
                "max_scale": 3,
                "cpu": 0.5,
                "memory_mb": 512,
                "db_storage_gi": 10,
                "labels": {"team": "payments"},
                "image_pull_secrets": [{"name": "regcred"}],
                "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}],
                "volume_mounts": [{"name": "cfg", "mountPath": "/etc/app", "readOnly": True}],
                "sidecars": [
                    {
                        "name": "proxy",
                        "image": "envoy:1.30",
                        "env": [{"name": "MODE", "value": "edge"}],
                        "resources": {"limits": {"cpu": "100m"}, "requests": {"cpu": "50m"}},
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
                    }
                ],
            },
            "listener_config": {"k8s_namespace": "apps"},
        },
        "source_revision_config": {"repo_ref": "main", "repo_commit_sha": "abc123", "image_uri": None},
        "secrets": [{"name": "DB_PASSWORD", "value": "hunter2-very-secret"}],
        "id": DEPLOYMENT_ID,
        "tenant_id": TENANT_ID,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-02T00:00:00Z",
        "status": "READY",
        "latest_revision_id": REV_NEW,
        "active_revision_id": REV_OLD,
    }
    body.update(overrides)
    return body


def test_deployment_parses_every_nested_group_and_keeps_unknown_fields() -> None:
    deployment = Deployment.model_validate(deployment_json(brand_new_field={"x": 1}))
    spec = deployment.source_config.resource_spec
    assert spec is not None and spec.cpu == 0.5 and spec.sidecars is not None
    assert spec.sidecars[0].env is not None and spec.sidecars[0].env[0].value == "edge"
    assert spec.volume_mounts is not None and spec.volume_mounts[0].readOnly is True
    assert deployment.source is DeploymentSource.CODEHOST
    assert deployment.model_dump(mode="json")["brand_new_field"] == {"x": 1}
    assert deployment.is_rolling_out


def test_unknown_status_reads_as_unknown_and_unknown_source_is_kept() -> None:
    deployment = Deployment.model_validate(deployment_json(status="HIBERNATING", source="new_source"))
    assert deployment.status is DeploymentStatus.UNKNOWN
    assert deployment.source == "new_source"


def test_timestamps_without_a_zone_read_as_utc_and_compare_with_aware_ones() -> None:
    from datetime import datetime, timezone

    naive = Deployment.model_validate(
        deployment_json(created_at="2026-01-01T00:00:00", updated_at="2026-01-02T00:00:00")
    )
    assert naive.updated_at == datetime(2026, 1, 2, tzinfo=timezone.utc)
    assert naive.updated_at < datetime(2026, 1, 3, tzinfo=timezone.utc)  # a naive value would raise TypeError
    aware = Deployment.model_validate(deployment_json(updated_at="2026-01-02T02:00:00+02:00"))
    assert aware.updated_at == datetime(2026, 1, 2, tzinfo=timezone.utc)


def test_secret_values_are_redacted_in_repr_str_and_dump() -> None:
    deployment = Deployment.model_validate(deployment_json())
    dumped = deployment.model_dump(mode="json")
    assert dumped["secrets"] == [{"name": "DB_PASSWORD", "value": REDACTED}]
    for text in (repr(deployment), str(deployment), deployment.model_dump_json(), deployment.summary()):
        assert "hunter2-very-secret" not in text


def test_list_page_and_other_resources_parse() -> None:
    page = DeploymentListPage.model_validate({"resources": [deployment_json()], "offset": 1})
    assert page.resources[0].id == DEPLOYMENT_ID
    provider = OAuthProvider.model_validate(
        {
            "id": "p1",
            "organization_id": "o1",
            "provider_id": "codehost",
            "name": "Codehost",
            "client_id": "cid",
            "auth_url": "https://auth",
            "token_url": "https://token",
            "uses_pkce": True,
            "code_challenge_method": "S256",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    assert provider.token_endpoint_auth_method == "client_secret_post" and provider.is_dynamic_client is False
    revision = Revision.model_validate({"id": REV_NEW, "status": "BUILD_FAILED"})
    assert revision.status.is_failed and revision.status.is_terminal
    assert not RevisionStatus.BUILDING.is_terminal and not RevisionStatus.DEPLOYED.is_failed
    assert RevisionStatus("SOMETHING_NEW") is RevisionStatus.UNKNOWN


def test_repository_maps_to_deployment_creation_values() -> None:
    repo = Repository.model_validate(
        {
            "host_integration_id": "33333333-3333-4333-8333-333333333333",
            "id": 42,
            "name": "checkout",
            "owner": "acme",
            "url": "https://codehost.example/acme/checkout",
            "default_branch": "main",
        }
    )
    values = repo.deployment_creation_values().model_dump(mode="json", exclude_none=True)
    assert values == {
        "integration_id": "33333333-3333-4333-8333-333333333333",
        "source_config": {"repo_url": "https://codehost.example/acme/checkout"},
        "source_revision_config": {"repo_ref": "main"},
    }


def test_patch_body_sends_only_given_fields_with_secret_values_revealed() -> None:
    patch = PatchDeploymentRequest.model_validate(
        {
            "source_revision_config": {"image_uri": "registry/app:2"},
            "secrets": [{"name": "TOKEN", "value": "s3cr3t-value"}],
        }
    )
    assert patch.to_request_body() == {
        "source_revision_config": {"image_uri": "registry/app:2"},
        "secrets": [{"name": "TOKEN", "value": "s3cr3t-value"}],
    }
    assert "s3cr3t-value" not in repr(patch) and "s3cr3t-value" not in patch.model_dump_json()
    assert patch.creates_revision


def test_patch_of_source_config_only_creates_no_revision() -> None:
    patch = PatchDeploymentRequest(source_config={"build_on_push": True})  # type: ignore[arg-type]
    assert not patch.creates_revision
    assert PatchDeploymentRequest(secrets=[]).creates_revision


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, "empty patch"),
        ({"source_revision_config": {}}, "empty patch"),
        ({"source_revison_config": {"image_uri": "x"}}, "source_revison_config"),
        ({"source_config": {"resource_spec": {"cpuu": 1}}}, "source_config.resource_spec.cpuu"),
        ({"source_config": {"resource_spec": {"cpuu": 1}}}, "did you mean 'cpu'"),
        ({"source_revision_config": {"repo_commit_sha": "abc"}}, "source_revision_config.repo_commit_sha"),
        ({"source_config": {"resource_spec": {"sidecars": [{"name": "p", "imagee": "x"}]}}}, "sidecars[0].imagee"),
        ({"revision_source": "external_docker"}, "revision_source"),
        ({"secrets": [{"name": "", "value": "x"}]}, "secrets.0.name"),
        ({"secrets": [{"value": "x"}]}, "secrets.0.name"),
        ({"secrets": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "repeated: A"),
        ({"source_config": {"integration_id": "not-a-uuid"}}, "source_config.integration_id"),
        ({"source_config": {"build_on_push": "sometimes"}}, "source_config.build_on_push"),
        ({"secret_references": [{"name": "a", "secret_name": "b"}]}, "secret_references.0.secret_key"),
    ],
)
def test_patch_request_refuses_bad_input_naming_the_field(body: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        PatchDeploymentRequest.model_validate(body)
    assert expected in str(caught.value)


def test_bad_secret_is_refused_without_echoing_its_value() -> None:
    with pytest.raises(ValidationError) as caught:
        PatchDeploymentRequest.model_validate({"secrets": [{"name": " ", "value": "do-not-echo-me"}]})
    assert "do-not-echo-me" not in str(caught.value)


def test_create_request_requires_name_and_known_source() -> None:
    request = CreateDeploymentRequest(name="svc", source=DeploymentSource.EXTERNAL_DOCKER)
    assert request.to_request_body()["source"] == "external_docker"
    with pytest.raises(ValidationError, match="source"):
        CreateDeploymentRequest.model_validate({"name": "svc", "source": "ftp"})


def test_list_query_serializes_production_parameter_names() -> None:
    query = ListDeploymentsQuery(
        limit=50,
        offset=100,
        name_contains="checkout",
        status=DeploymentStatus.READY,
        remote_reconciled=False,
        tag_value_ids=["t1", "t2"],
        image_version="1.2",
        deployment_type="prod",  # type: ignore[arg-type]
        deployment_ids=[DEPLOYMENT_ID.upper(), REV_OLD],
    )
    assert query.to_query_params() == {
        "limit": "50",
        "offset": "100",
        "name_contains": "checkout",
        "status": "READY",
        "remote_reconciled": "false",
        "tag_value_ids": "t1,t2",
        "image_version": "1.2",
        "deployment_type": "prod",
        "deployment_ids": f"{DEPLOYMENT_ID},{REV_OLD}",
    }


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"status": "ready"}, "status"),
        ({"deployment_type": "staging"}, "deployment_type"),
        ({"deployment_ids": ["nope"]}, "deployment_ids.0"),
        ({"deployment_ids": []}, "deployment_ids"),
        ({"tag_value_ids": ["a,b"]}, "tag_value_ids"),
        ({"remote_reconciled": "yes"}, "remote_reconciled"),
        ({"name": "x"}, "name"),
    ],
)
def test_list_query_refuses_bad_values(filters: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ListDeploymentsQuery.model_validate(filters)
    assert field in str(caught.value)


def test_patch_reflection_detects_applied_and_pending_patches() -> None:
    deployment = Deployment.model_validate(
        deployment_json(source_revision_config={"image_uri": "registry/app:2", "repo_commit_sha": None})
    )
    applied = PatchDeploymentRequest.model_validate(
        {
            "source_revision_config": {"image_uri": "registry/app:2"},
            "secrets": [{"name": "DB_PASSWORD", "value": "hunter2-very-secret"}],
            "source_config": {"resource_spec": {"labels": {"team": "payments"}}},
        }
    )
    assert applied.is_reflected_in(deployment)
    pending = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "registry/app:3"}})
    assert not pending.is_reflected_in(deployment)
    other_secret = PatchDeploymentRequest.model_validate({"secrets": [{"name": "DB_PASSWORD", "value": "other"}]})
    assert not other_secret.is_reflected_in(deployment)


def test_a_response_may_leave_secret_values_out_but_a_request_may_not() -> None:
    for secrets in ([{"name": "TOKEN"}], [{"name": "TOKEN", "value": None}]):
        deployment = Deployment.model_validate(deployment_json(secrets=secrets))
        assert deployment.secrets[0].value is None
        assert deployment.model_dump(mode="json")["secrets"] == [{"name": "TOKEN", "value": None}]
    with pytest.raises(ValidationError, match=r"secrets.0.value is required \(secret 'TOKEN' has none\)"):
        PatchDeploymentRequest.model_validate({"secrets": [{"name": "TOKEN"}]})
    with pytest.raises(ValidationError, match="has none"):
        CreateDeploymentRequest.model_validate({"name": "svc", "source": "codehost", "secrets": [{"name": "T"}]})
