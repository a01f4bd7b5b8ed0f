"""The hook: connection -> client settings, overrides that travel to triggers, clear config errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk import Connection

from airflow_provider.client import InvalidRequestError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from tests.test_models import TENANT_ID


def conn(**fields: Any) -> Connection:
    extra = fields.pop("extra", {})
    return Connection(conn_id="svc", conn_type="deployment_service", extra=json.dumps(extra), **fields)


def test_json_connection_maps_to_settings_and_key() -> None:
    hook = DeploymentServiceHook("svc")
    settings, key = hook.settings_from_connection(
        conn(
            host="https://deploy.example.com/api-host/",
            password="the-key",
            extra={
                "tenant_id": TENANT_ID,
                "connect_timeout": "3",
                "read_timeout": 12,
                "verify": "false",
                "max_attempts": "7",
                "backoff_initial": 0.2,
                "backoff_max": 4,
                "retry_after_max": 30,
            },
        )
    )
    assert key == "the-key"
    assert settings.base_url == "https://deploy.example.com/api-host"
    assert settings.tenant_id == TENANT_ID
    assert (settings.connect_timeout, settings.read_timeout, settings.verify) == (3.0, 12.0, False)
    assert (settings.retry.max_attempts, settings.retry.backoff_initial, settings.retry.backoff_max) == (7, 0.2, 4.0)
    assert settings.retry.retry_after_max == 30


def test_uri_style_connection_builds_the_base_url_from_host_port_and_schema() -> None:
    settings, _ = DeploymentServiceHook("svc").settings_from_connection(
        conn(host="deploy.internal", port=8443, schema="api-host", password="k", extra={"ca_bundle": "/etc/ca.pem"})
    )
    assert settings.base_url == "https://deploy.internal:8443/api-host"
    assert settings.verify == "/etc/ca.pem"


def test_prefixed_extras_of_older_forms_are_read() -> None:
    settings, _ = DeploymentServiceHook("svc").settings_from_connection(
        conn(host="https://x.test", password="k", extra={"extra__deployment_service__tenant_id": TENANT_ID})
    )
    assert settings.tenant_id == TENANT_ID


def test_hook_overrides_win_and_travel_as_plain_json() -> None:
    hook = DeploymentServiceHook("svc", read_timeout=5, max_attempts=2)
    settings, _ = hook.settings_from_connection(conn(host="https://x.test", password="k", extra={"read_timeout": 60}))
    assert settings.read_timeout == 5 and settings.retry.max_attempts == 2
    assert json.loads(json.dumps(hook.hook_params)) == {
        "deployment_service_conn_id": "svc",
        "read_timeout": 5,
        "max_attempts": 2,
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"host": "", "password": "k"}, "host is empty"),
        ({"host": "https://x.test", "password": ""}, "API key is missing"),
        ({"host": "https://x.test", "password": "k", "extra": {"tenant_id": "acme"}}, "tenant_id must be a UUID"),
        (
            {"host": "https://x.test", "password": "k", "extra": {"read_timeout": "soon"}},
            "'read_timeout' must be a number",
        ),
        ({"host": "https://x.test", "password": "k", "extra": {"read_timeout": -1}}, "read_timeout must be a positive"),
        ({"host": "https://x.test", "password": "k", "extra": {"max_attempts": 2.5}}, "'max_attempts' must be a whole"),
        ({"host": "https://x.test", "password": "k", "extra": {"max_attempts": 0}}, "max_attempts must be >= 1"),
        ({"host": "https://x.test", "password": "k", "extra": {"verify": "maybe"}}, "'verify' must be true or false"),
        ({"host": "ftp://x.test", "password": "k"}, "must start with https://"),
    ],
)
def test_bad_connections_get_errors_naming_the_connection_and_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message) as caught:
        DeploymentServiceHook("svc").settings_from_connection(conn(**fields))
    assert "connection 'svc'" in str(caught.value)
    assert "k" not in str(caught.value).split("'svc'")[0]


def test_plain_http_to_a_remote_host_is_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_REMOTE",
        json.dumps({"conn_type": "deployment_service", "host": "http://deploy.example.com", "password": "k"}),
    )
    with pytest.raises(InvalidRequestError, match="plain http"):
        _ = DeploymentServiceHook("remote").client
    monkeypatch.setenv(
        "AIRFLOW_CONN_REMOTE",
        json.dumps(
            {
                "conn_type": "deployment_service",
                "host": "http://deploy.example.com",
                "password": "k",
                "extra": {"allow_insecure_http": True},
            }
        ),
    )
    hook = DeploymentServiceHook("remote")
    assert hook.client.settings.allow_insecure_http
    hook.close()


async def test_concurrent_first_async_calls_share_one_client(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    monkeypatch.setenv(
        "AIRFLOW_CONN_SHARED",
        json.dumps({"conn_type": "deployment_service", "host": "https://x.test", "password": "k"}),
    )
    hook = DeploymentServiceHook("shared")
    clients = await asyncio.gather(*(hook.get_async_client() for _ in range(5)))
    assert len({id(client) for client in clients}) == 1
    await hook.aclose()


async def test_async_twins_reach_every_endpoint_over_http(service_connection: Any) -> None:
    emulator = service_connection
    hook = DeploymentServiceHook()
    try:
        assert await hook.a_list_oauth_providers()
        integration = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
        assert {repo.name for repo in await hook.a_list_repositories(integration)} >= {"checkout-api"}
        names = [deployment.name async for deployment in hook.a_iter_deployments(name_contains="checkout")]
        assert "checkout-api-dev" in names
        target = emulator.admin.find_deployment("checkout-api-dev")
        assert (await hook.a_get_deployment(target["id"])).name == "checkout-api-dev"
        patched = await hook.a_patch_deployment(target["id"], {"source_revision_config": {"repo_ref": "async-ref"}})
        assert patched.latest_revision_id != target["latest_revision_id"]
        revision = await hook.a_get_revision(target["id"], patched.latest_revision_id or "")
        assert revision.id == patched.latest_revision_id
        assert emulator.admin.count("PATCH /v2/deployments/{deployment_id}") == 1
        created = await hook.a_create_deployment(
            {"name": "async-created", "source": "internal_docker", "source_revision_config": {"image_uri": "img:1"}}
        )
        assert created.name == "async-created" and created.latest_revision_id is not None
        assert emulator.admin.find_deployment("async-created")["id"] == created.id
    finally:
        await hook.aclose()


def test_test_connection_reports_success_and_a_rejected_key(
    service_connection: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = DeploymentServiceHook()
    ok, message = hook.test_connection()
    assert ok and "API key accepted" in message
    assert "client" not in hook.__dict__, "test_connection left its pooled client open"
    from tests.conftest import connection_json

    monkeypatch.setenv("AIRFLOW_CONN_BAD_KEY", connection_json(service_connection.base_url, "wrong-key"))
    ok, message = DeploymentServiceHook("bad_key").test_connection()
    assert not ok and "401" in message and "check the API key" in message and "wrong-key" not in message
