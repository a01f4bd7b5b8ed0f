"""Models: responses tolerate what they do not know, requests refuse it, secrets stay hidden."""

from __future__ import annotations

import gc
import json
import uuid
import weakref
from typing import Any

import pytest
from pydantic import ValidationError

from airflow_provider.client.calls import validated as _validated
from airflow_provider.errors import InvalidRequestError
from airflow_provider.models import (
    REDACTED,
    STRICT_READING,
    CreateDeploymentRequest,
    Deployment,
    DeploymentListPage,
    DeploymentPageReader,
    DeploymentSource,
    DeploymentStatus,
    ListDeploymentsQuery,
    OAuthProvider,
    PatchDeploymentRequest,
    Repository,
    ResourceSpecPatch,
    Revision,
    RevisionListPage,
    RevisionStatus,
    SourceRevisionConfigPatch,
    canonical_uuid,
    error_message,
)
from airflow_provider.models.fields import _HYPHENATED_UUID_PATTERN

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


def test_values_the_provider_does_not_know_are_kept_and_sent_back_as_they_came() -> None:
    body = deployment_json(status="HIBERNATING", source="new_source")
    body["source_config"]["deployment_type"] = "dev_gpu"
    deployment = Deployment.model_validate(body)
    assert deployment.status == "HIBERNATING" and not deployment.status.is_known
    assert deployment.status != DeploymentStatus.UNKNOWN and DeploymentStatus.READY.is_known
    assert deployment.source == "new_source" and deployment.source_config.deployment_type == "dev_gpu"
    shown = deployment.model_dump(mode="json")
    assert (shown["status"], shown["source"], shown["source_config"]["deployment_type"]) == (
        "HIBERNATING",
        "new_source",
        "dev_gpu",
    )
    assert Deployment.model_validate_json(deployment.model_dump_json()).status == "HIBERNATING"
    revision = Revision.model_validate({"id": REV_NEW, "status": "AWAITING_APPROVAL"})
    assert revision.status.value == "AWAITING_APPROVAL" and not revision.status.is_terminal
    assert not revision.status.is_failed  # never taken for a failure: waiting goes on
    with pytest.raises(ValidationError):
        Revision.model_validate({"id": REV_NEW, "status": 3}, context=STRICT_READING)  # not a status at all


def test_requests_send_values_the_provider_does_not_know_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    query = ListDeploymentsQuery(deployment_type="dev_zero", status="HIBERNATING")
    assert query.to_query_params() == {
        "limit": "20",
        "offset": "0",
        "status": "HIBERNATING",
        "deployment_type": "dev_zero",
    }
    assert [record.getMessage() for record in caplog.records] == [
        "status 'HIBERNATING' is not a value this provider knows (AWAITING_DATABASE, READY, UNUSED, AWAITING_DELETE, "
        "UNKNOWN); sending it as given: the service decides"
    ]  # dev_zero is known: no warning
    caplog.clear()
    create = CreateDeploymentRequest.model_validate(
        {"name": "a", "source": "internal_git", "source_config": {"deployment_type": "dev_gpu"}}
    )
    assert create.to_request_body()["source"] == "internal_git"
    assert create.to_request_body()["source_config"] == {"deployment_type": "dev_gpu"}
    assert len(caplog.records) == 2 and "source_config.deployment_type 'dev_gpu'" in caplog.records[1].getMessage()
    patch = PatchDeploymentRequest.model_validate(
        {"revision_source": "internal_git", "source_revision_config": {"image_uri": "x"}}
    )
    assert patch.to_request_body()["revision_source"] == "internal_git"
    with pytest.raises(InvalidRequestError, match=r"deployment_typ: Extra inputs are not permitted"):
        _validated(ListDeploymentsQuery, {"deployment_typ": "dev"})  # a misspelt field is still refused
    with pytest.raises(InvalidRequestError, match="deployment_type"):
        _validated(ListDeploymentsQuery, {"deployment_type": ""})  # and so is a value that is no value


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
    assert RevisionStatus("SOMETHING_NEW") == "SOMETHING_NEW" and not RevisionStatus("SOMETHING_NEW").is_known
    assert RevisionStatus.SKIPPED.is_overtaken and not RevisionStatus.SKIPPED.is_failed  # superseded, not failed


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
        (
            {"source_config": {"resource_spec": {"sidecars": [{"name": "p", "resources": {"limits": {"cpu": 0.5}}}]}}},
            'sidecars.0.resources.limits.cpu\n  must be a Kubernetes quantity string such as "500m" or "1Gi", '
            "got the number 0.5",
        ),
        (
            {
                "source_config": {
                    "resource_spec": {"init_containers": [{"name": "i", "resources": {"requests": {"memory": 512}}}]}
                }
            },
            "init_containers.0.resources.requests.memory\n  must be a Kubernetes quantity string",
        ),
        ({"revision_source": "Internal_Docker"}, "revision_source"),  # a known value in the wrong case: a typo
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


def test_container_resources_in_a_patch_are_kubernetes_quantity_strings() -> None:
    sidecar = {"name": "proxy", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "0.25"}}}
    patch = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {"sidecars": [sidecar]}}})
    assert patch.to_request_body()["source_config"]["resource_spec"]["sidecars"] == [sidecar]
    # responses stay tolerant: a number the service might echo is read as sent
    body = deployment_json()
    body["source_config"]["resource_spec"]["sidecars"][0]["resources"] = {"limits": {"cpu": 1}}
    spec = Deployment.model_validate(body).source_config.resource_spec
    assert spec is not None and spec.sidecars is not None and spec.sidecars[0].resources is not None
    assert spec.sidecars[0].resources.limits == {"cpu": 1}


def test_bad_secret_is_refused_without_echoing_its_value() -> None:
    with pytest.raises(ValidationError) as caught:
        PatchDeploymentRequest.model_validate({"secrets": [{"name": " ", "value": "do-not-echo-me"}]})
    assert "do-not-echo-me" not in str(caught.value)


def test_create_request_requires_name_and_known_source() -> None:
    request = CreateDeploymentRequest(name="svc", source=DeploymentSource.EXTERNAL_DOCKER)
    assert request.to_request_body()["source"] == "external_docker"
    with pytest.raises(ValidationError, match="source"):
        CreateDeploymentRequest.model_validate({"name": "svc", "source": "Codehost"})  # a typo of a known one
    assert CreateDeploymentRequest.model_validate({"name": "svc", "source": "ftp"}).source == "ftp"  # a new one


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
        ({"deployment_type": "Prod"}, "deployment_type"),
        ({"deployment_type": 3}, "deployment_type"),
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


# ------------------------------------------------------------------ production's request schema
INTEGER_FIELDS = [
    name
    for name in ResourceSpecPatch.model_fields
    if name.endswith(("_memory_mb", "_memory_limit_mb", "_scale")) or name in ("memory_mb", "memory_limit_mb")
] + ["db_storage_gi", "db_max_connections"]


def test_every_integer_field_is_known() -> None:
    assert len(INTEGER_FIELDS) == 20


@pytest.mark.parametrize("field", INTEGER_FIELDS)
def test_integer_fields_go_out_as_integers(field: str) -> None:
    for given in (512, 512.0, "512"):
        body = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {field: given}}})
        sent = json.dumps(body.to_request_body())
        assert f'"{field}": 512}}' in sent  # 512, never 512.0


@pytest.mark.parametrize("field", INTEGER_FIELDS)
@pytest.mark.parametrize("given", [512.5, -1, True])
def test_integer_fields_refuse_fractions_negatives_and_booleans_naming_the_field(field: str, given: Any) -> None:
    with pytest.raises(InvalidRequestError, match=rf"source_config\.resource_spec\.{field}: "):
        _validated(PatchDeploymentRequest, {"source_config": {"resource_spec": {field: given}}})


def test_a_fraction_is_said_in_words() -> None:
    with pytest.raises(InvalidRequestError, match=r"memory_mb: must be a whole number \(the service takes an integer"):
        _validated(PatchDeploymentRequest, {"source_config": {"resource_spec": {"memory_mb": 512.5}}})


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("cpu", 0.1, 8),
        ("queue_cpu", 0.1, 8),
        ("redis_cpu", 0.1, 8),
        ("cpu_limit", 0.1, 16),
        ("queue_cpu_limit", 0.1, 16),
        ("redis_cpu_limit", 0.1, 16),
    ],
)
def test_cpu_bounds(field: str, low: float, high: float) -> None:
    for fine in (low, 0.25, high):
        spec = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {field: fine}}})
        assert spec.to_request_body()["source_config"]["resource_spec"][field] == fine
    for wrong in (0.09, high + 0.01, False):
        with pytest.raises(InvalidRequestError, match=rf"source_config\.resource_spec\.{field}: "):
            _validated(PatchDeploymentRequest, {"source_config": {"resource_spec": {field: wrong}}})


def test_other_cpu_fields_take_any_non_negative_amount() -> None:
    body = {"source_config": {"resource_spec": {"db_cpu": 32.5, "orchestrator_cpu": 0}}}
    assert PatchDeploymentRequest.model_validate(body).to_request_body() == body
    with pytest.raises(InvalidRequestError, match=r"resource_spec\.db_cpu: "):
        _validated(PatchDeploymentRequest, {"source_config": {"resource_spec": {"db_cpu": -1}}})


def test_do_not_use_fields_are_listed() -> None:
    spec = ResourceSpecPatch(executor_memory_mb=1, orchestrator_cpu=0.5, memory_mb=2)
    assert spec.discouraged_fields() == ["executor_memory_mb", "orchestrator_cpu"]
    assert ResourceSpecPatch(memory_mb=2).discouraged_fields() == []


def test_deployment_type_in_a_patch_is_a_tier_name() -> None:
    with pytest.raises(InvalidRequestError, match=r"source_config\.deployment_type: "):
        _validated(PatchDeploymentRequest, {"source_config": {"deployment_type": 3}})
    patch = _validated(PatchDeploymentRequest, {"source_config": {"deployment_type": "dev_zero"}})
    assert patch.to_request_body() == {"source_config": {"deployment_type": "dev_zero"}}


def test_resource_spec_may_create_a_revision() -> None:
    spec = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {"min_scale": 1}}})
    assert spec.may_create_revision and not spec.creates_revision
    url = PatchDeploymentRequest.model_validate({"source_config": {"custom_url": "https://x"}})
    assert not url.may_create_revision
    assert PatchDeploymentRequest(secrets=[]).may_create_revision


# ------------------------------------------------------------------------------ tolerant reader
def odd_deployment() -> dict[str, Any]:
    body = deployment_json(name="odd-one", id="7f4b6c2e-3a51-4a8e-9d2c-0f1e2d3c4b5b", status="HIBERNATING")
    body["source"] = "quantum_source"
    body["source_config"]["integration_id"] = ""
    body["source_config"]["resource_spec"]["min_scale"] = 1.5
    body["source_config"]["resource_spec"]["db_max_connections"] = 10.5
    body["source_config"]["resource_spec"]["volumes"].append({"configMap": {"name": "no-name"}})
    body["secrets"].append({"name": "", "value": "x"})
    return body


def test_one_odd_deployment_does_not_fail_the_page(caplog: pytest.LogCaptureFixture) -> None:
    good = deployment_json()
    also_good = deployment_json(name="other", id="7f4b6c2e-3a51-4a8e-9d2c-0f1e2d3c4b5c")
    page = DeploymentListPage.model_validate_json(
        json.dumps({"resources": [good, odd_deployment(), also_good], "offset": 3})
    )
    assert [item.name for item in page.resources] == ["checkout-api", "odd-one", "other"]
    odd = page.resources[1]
    spec = odd.source_config.resource_spec
    assert spec is not None and spec.min_scale == 1.5 and spec.db_max_connections == 10.5  # kept as sent
    assert odd.status == "HIBERNATING" and odd.source == "quantum_source"
    assert odd.source_config.integration_id is None and odd.source_config.repo_url == good["source_config"]["repo_url"]
    assert [secret.name for secret in odd.secrets] == ["DB_PASSWORD"]
    assert spec.volumes is not None and [volume.name for volume in spec.volumes] == ["cfg"]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert sorted(warnings) == sorted(
        [
            "deployment 'odd-one': ignoring the value of source_config.integration_id the service sent "
            "(Value error, value must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000))",
            "deployment 'odd-one': ignoring the value of source_config.resource_spec.volumes.1 the service sent "
            "(Field required)",
            "deployment 'odd-one': ignoring the value of secrets.1 the service sent "
            "(String should have at least 1 character)",
        ]
    )
    assert "hunter2" not in caplog.text


def test_a_deployment_without_a_usable_id_is_left_out_of_the_page_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = deployment_json(name="broken", id="not-a-uuid")
    page = DeploymentListPage.model_validate({"resources": [broken, deployment_json()], "offset": 2})
    assert [item.name for item in page.resources] == ["checkout-api"]
    assert "Leaving out deployment 'broken' (entry 0 of the page): id: Value error, value must be a UUID" in caplog.text
    with pytest.raises(ValidationError, match="id"):
        Deployment.model_validate(broken)


def test_a_required_field_is_never_dropped() -> None:
    with pytest.raises(ValidationError, match="created_at"):
        Deployment.model_validate(deployment_json(created_at="yesterday"))


def test_an_odd_revision_value_is_dropped_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    revision = Revision.model_validate({"id": REV_NEW, "status": "BUILDING", "created_at": "not a date"})
    assert revision.status is RevisionStatus.BUILDING and revision.created_at is None
    assert "revision '22222222-2222-4222-8222-222222222222': ignoring the value of created_at" in caplog.text


def test_an_odd_revision_on_a_revision_page_is_dropped_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    odd = {"id": REV_NEW, "status": "BUILDING", "created_at": "not a date"}
    fine = {"id": REV_OLD, "status": "DEPLOYED", "created_at": "2026-01-01T00:00:00Z"}
    page = RevisionListPage.model_validate_json(json.dumps({"resources": [odd, fine], "offset": 2}))
    assert [(item.id, item.created_at is None) for item in page.resources] == [(REV_NEW, True), (REV_OLD, False)]
    assert f"revision '{REV_NEW}': ignoring the value of created_at" in caplog.text
    with pytest.raises(ValidationError, match=r"resources\.0\.created_at"):
        RevisionListPage.model_validate({"resources": [odd], "offset": 1}, context=STRICT_READING)


@pytest.mark.parametrize("model", [Deployment, DeploymentListPage, Revision, RevisionListPage])
def test_a_body_that_is_not_json_is_a_validation_error(model: Any) -> None:
    with pytest.raises(ValidationError, match="Invalid JSON"):
        model.model_validate_json(b'{"resources": [')


def test_strict_reading_switches_the_tolerant_reader_off() -> None:
    odd = odd_deployment()
    with pytest.raises(ValidationError, match="integration_id"):
        Deployment.model_validate(odd, context=STRICT_READING)
    with pytest.raises(ValidationError, match=r"resources\.0"):
        DeploymentListPage.model_validate({"resources": [odd], "offset": 1}, context=STRICT_READING)


# ------------------------------------------------------------------ validators (mutation survivors)
def test_canonical_uuid_forms_and_errors() -> None:
    value = "7F4B6C2E-3A51-4A8E-9D2C-0F1E2D3C4B5A"
    assert canonical_uuid(uuid.UUID(value)) == DEPLOYMENT_ID
    assert canonical_uuid(DEPLOYMENT_ID) == DEPLOYMENT_ID
    assert canonical_uuid(f"  {value} ") == DEPLOYMENT_ID
    assert canonical_uuid("{" + value + "}") == DEPLOYMENT_ID
    with pytest.raises(ValueError, match=r"^value must be a UUID string, got int$"):
        canonical_uuid(123)
    with pytest.raises(ValueError, match=r"^deployment_id must be a UUID \(e\.g\. 123e4567-.*\), got 'nope'$"):
        canonical_uuid("nope", "deployment_id")


def test_error_message_words_only_the_uuid_pattern() -> None:
    uuid_error = {"type": "string_pattern_mismatch", "msg": "raw", "ctx": {"pattern": _HYPHENATED_UUID_PATTERN}}
    assert error_message(uuid_error) == "Value error, value must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000)"
    assert error_message({"type": "string_pattern_mismatch", "msg": "raw", "ctx": {"pattern": "^x$"}}) == "raw"
    assert error_message({"type": "other", "msg": "raw", "ctx": {"pattern": _HYPHENATED_UUID_PATTERN}}) == "raw"
    assert error_message({"type": "int_from_float", "msg": "raw"}).startswith("must be a whole number")
    assert error_message({}) == ""


def test_zero_is_a_valid_integer_field_and_a_boolean_is_named() -> None:
    body = {"source_config": {"resource_spec": {"min_scale": 0, "db_cpu": 0}}}
    assert PatchDeploymentRequest.model_validate(body).to_request_body() == body
    with pytest.raises(
        InvalidRequestError, match=r"resource_spec\.max_scale: Value error, must be a number, got True$"
    ):
        _validated(PatchDeploymentRequest, {"source_config": {"resource_spec": {"max_scale": True}}})


def test_unknown_field_messages() -> None:
    with pytest.raises(ValidationError) as caught:
        PatchDeploymentRequest.model_validate({"source_config": {"repo_ulr": "x", "zzz": 1}})
    text = str(caught.value)
    assert (
        "unknown field 'source_config.repo_ulr'; did you mean 'repo_url'?; unknown field 'source_config.zzz'; " in text
    )
    assert "expected one of: build_command, build_on_push, custom_url, deployment_type, install_command, " in text


def test_changes_revision_needs_a_set_field() -> None:
    assert not SourceRevisionConfigPatch().changes_revision
    assert SourceRevisionConfigPatch(graph_config_path="g.json").changes_revision


def test_request_secret_messages() -> None:
    with pytest.raises(ValidationError, match=r"secrets\.0\.value is required \(secret 'A' has none\)"):
        PatchDeploymentRequest.model_validate({"secrets": [{"name": "A"}]})
    repeated = [{"name": name, "value": "v"} for name in ("B", "A", "B", "A")]
    with pytest.raises(ValidationError, match="secret names must be unique, repeated: A, B"):
        PatchDeploymentRequest.model_validate({"secrets": repeated})
    with pytest.raises(ValidationError, match="secret name must not be blank"):
        PatchDeploymentRequest.model_validate({"secrets": [{"name": "  ", "value": "v"}]})


def test_an_empty_nested_object_is_an_empty_patch() -> None:
    with pytest.raises(ValidationError, match="empty patch"):
        PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {}}})


def test_tag_ids_with_a_comma_are_refused_by_name() -> None:
    with pytest.raises(
        ValidationError, match=r"tag_value_ids entries must be non-empty and contain no comma, got 'a,b'"
    ):
        ListDeploymentsQuery(tag_value_ids=["a,b"])


def reflected(patch: dict[str, Any], **deployment: Any) -> bool:
    return PatchDeploymentRequest.model_validate(patch).is_reflected_in(
        Deployment.model_validate(deployment_json(**deployment))
    )


def test_is_reflected_in_compares_every_part_of_the_patch() -> None:
    assert reflected({"source_revision_config": {"repo_ref": "main"}})
    assert not reflected({"source_revision_config": {"repo_ref": "dev"}})
    assert reflected({"source_config": {"resource_spec": {"min_scale": 1, "labels": {"team": "payments"}}}})
    assert not reflected({"source_config": {"resource_spec": {"min_scale": 2}}})
    assert not reflected({"source_config": {"install_command": "make"}})  # absent on the deployment
    assert not reflected({"source_config": {"resource_spec": {"labels": {"team": "x"}}}})
    secret = {"secrets": [{"name": "DB_PASSWORD", "value": "hunter2-very-secret"}]}
    assert reflected(secret)  # echoed equal
    assert reflected(secret, secrets=[{"name": "DB_PASSWORD", "value": REDACTED}])
    assert reflected(secret, secrets=[{"name": "DB_PASSWORD"}])
    assert not reflected(secret, secrets=[{"name": "DB_PASSWORD", "value": "other"}])
    assert not reflected(secret, secrets=[{"name": "OTHER", "value": REDACTED}])
    refs = {"secret_references": [{"name": "A", "secret_name": "s", "secret_key": "k"}]}
    assert reflected(refs, secret_references=refs["secret_references"])
    assert not reflected(refs, secret_references=[{"name": "A", "secret_name": "s", "secret_key": "other"}])
    assert not reflected(refs)
    both = {"source_revision_config": {"repo_ref": "main"}, "source_config": {"repo_url": "elsewhere"}}
    assert not reflected(both)


def test_is_reflected_in_ignores_revision_fields_the_patch_does_not_set() -> None:
    image_too = {"repo_ref": "main", "image_uri": "img:1", "graph_config_path": "g.json"}
    assert reflected({"source_revision_config": {"repo_ref": "main"}}, source_revision_config=image_too)


def test_is_reflected_in_a_nested_value_the_deployment_lacks() -> None:
    config = deployment_json()["source_config"]
    assert not reflected(
        {"source_config": {"resource_spec": {"min_scale": 1}}}, source_config={**config, "resource_spec": None}
    )


# ------------------------------------------------------------------------------- page reader
OTHER_ID = "44444444-4444-4444-8444-444444444444"


def page_body(*rows: dict[str, Any], offset: int = 2) -> bytes:
    return json.dumps({"resources": list(rows), "offset": offset}).encode()


def test_page_reader_reuses_unchanged_rows_and_reads_changed_ones_again() -> None:
    reader = DeploymentPageReader()
    first = reader.read(page_body(deployment_json(), deployment_json(id=OTHER_ID, name="other")))
    assert first == DeploymentListPage.model_validate_json(
        page_body(deployment_json(), deployment_json(id=OTHER_ID, name="other"))
    )
    again = reader.read(page_body(deployment_json(), deployment_json(id=OTHER_ID, name="other")))
    assert again.resources[0] is first.resources[0] and again.resources[1] is first.resources[1]
    moved = deployment_json(updated_at="2026-01-03T00:00:00Z", status="UNUSED", active_revision_id=REV_NEW)
    third = reader.read(page_body(moved, deployment_json(id=OTHER_ID, name="other"), offset=7))
    assert third.resources[0] is not first.resources[0]
    assert third.resources[0].status is DeploymentStatus.UNUSED and third.resources[0].active_revision_id == REV_NEW
    assert third.resources[1] is first.resources[1] and third.offset == 7
    for field, value in [("status", "UNUSED"), ("active_revision_id", REV_NEW), ("latest_revision_id", REV_OLD)]:
        # what a verdict reads is compared itself, even if updated_at did not move
        base = reader.read(page_body(deployment_json())).resources[0]
        assert reader.read(page_body(deployment_json())).resources[0] is base
        changed = reader.read(page_body(deployment_json(**{field: value}))).resources[0]
        assert changed is not base and changed.model_dump(mode="json")[field] == value


def test_page_reader_fails_and_leaves_out_what_a_page_would() -> None:
    reader = DeploymentPageReader()
    with pytest.raises(ValidationError) as without_reader:
        DeploymentListPage.model_validate_json(b"not json")
    with pytest.raises(ValidationError) as with_reader:
        reader.read(b"not json")
    assert with_reader.value.errors() == without_reader.value.errors()
    with pytest.raises(ValidationError):
        reader.read(page_body(deployment_json(), offset="many"))  # type: ignore[arg-type]
    broken = deployment_json(id="not-a-uuid", name="broken")
    page = reader.read(page_body(deployment_json(), broken))
    assert [item.id for item in page.resources] == [DEPLOYMENT_ID]  # left out, as a page reading does


def test_page_reader_forgets_what_is_no_longer_read_or_held() -> None:
    reader = DeploymentPageReader()
    first = reader.read(page_body(deployment_json()))
    reader.retain([OTHER_ID])
    assert reader.read(page_body(deployment_json())).resources[0] is not first.resources[0]
    # A model nobody holds any more is not kept alive by the reader: the row is read again.
    held = reader.read(page_body(deployment_json())).resources[0]
    watching = weakref.ref(held)
    del held, first
    gc.collect()
    assert watching() is None
    again = reader.read(page_body(deployment_json())).resources[0]
    assert again.id == DEPLOYMENT_ID and reader.read(page_body(deployment_json())).resources[0] is again
