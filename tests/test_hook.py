"""The hook: connection -> client settings, overrides that travel to triggers, clear config errors."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from airflow.sdk import Connection

from airflow_provider.client import DeploymentServiceClient, InvalidRequestError, TransportError
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


# ------------------------------------------------------------------------ context manager
def test_the_hook_is_a_context_manager_that_closes_its_client(service_connection: Any) -> None:
    with DeploymentServiceHook() as hook:
        assert hook.list_deployments(limit=1).resources
        http = hook.client._http
    assert http.is_closed, "leaving the with block did not close the pooled client"
    assert "client" not in hook.__dict__


async def test_the_hook_is_an_async_context_manager_that_closes_its_async_client(service_connection: Any) -> None:
    async with DeploymentServiceHook() as hook:
        assert (await hook.a_list_deployments(limit=1)).resources
        http = (await hook.get_async_client())._http
    assert http.is_closed, "leaving the async with block did not close the asyncio client"
    assert hook._async_client is None


# ---------------------------------------------------------------- host, port, schema
@pytest.mark.parametrize(
    "connection",
    [
        pytest.param(
            lambda: Connection.from_json(
                json.dumps(
                    {
                        "conn_type": "deployment_service",
                        "host": "https://deploy.internal",
                        "port": 8443,
                        "schema": "api-host",
                        "password": "the-key",
                    }
                ),
                conn_id="svc",
            ),
            id="json",
        ),
        pytest.param(
            lambda: Connection.from_uri("deployment-service://https://:the-key@deploy.internal:8443/api-host", "svc"),
            id="uri with the scheme in the host",
        ),
        pytest.param(
            lambda: Connection.from_uri(
                "deployment-service://:the-key@https%3A%2F%2Fdeploy.internal:8443/api-host", "svc"
            ),
            id="uri with an encoded scheme in the host",
        ),
        pytest.param(
            lambda: conn(host="https://deploy.internal:8443/api-host/", port=8443, schema="/api-host", password="k"),
            id="the same port and prefix given twice",
        ),
    ],
)
def test_a_host_with_a_scheme_keeps_the_connections_port_and_schema(connection: Callable[[], Connection]) -> None:
    # Before, a host holding a scheme was used as it stood: port and path prefix were silently dropped.
    settings, _ = DeploymentServiceHook("svc").settings_from_connection(connection())
    assert settings.base_url == "https://deploy.internal:8443/api-host"
    assert not settings.scheme_assumed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"host": "https://deploy.internal/api-host", "schema": "other"},
            "host 'https://deploy.internal/api-host' has the path prefix /api-host but its schema field is 'other': "
            "give the path prefix in one place",
        ),
        (
            {"host": "https://deploy.internal:8443", "port": 9443},
            "host 'https://deploy.internal:8443' names port 8443 but its port field is 9443: "
            "give the port in one place",
        ),
        (
            {"host": "https://deploy.internal/api-host/v2"},
            "remove the trailing /v2 (the provider adds it to every request path), "
            "e.g. 'https://deploy.internal/api-host'",
        ),
        ({"host": "deploy.internal", "schema": "api-host/V2/"}, "remove the trailing /V2"),
        ({"host": "https://deploy.internal/v1/"}, "remove the trailing /v1"),
    ],
)
def test_a_host_that_conflicts_with_its_fields_or_ends_in_an_api_version_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        DeploymentServiceHook("svc").settings_from_connection(conn(password="k", **fields))
    assert str(caught.value).startswith("connection 'svc': ")
    assert message in str(caught.value)


def test_a_host_without_a_scheme_says_https_was_assumed() -> None:
    hook = DeploymentServiceHook("svc")
    assumed, _ = hook.settings_from_connection(conn(host="deploy.internal", port=8443, password="k"))
    said, _ = hook.settings_from_connection(
        conn(host="deploy.internal", port=8443, password="k", extra={"scheme": "http", "allow_insecure_http": True})
    )
    given, _ = hook.settings_from_connection(conn(host="https://deploy.internal:8443", password="k"))
    assert (assumed.base_url, assumed.scheme_assumed) == ("https://deploy.internal:8443", True)
    assert (said.base_url, said.scheme_assumed) == ("http://deploy.internal:8443", False)
    assert (given.base_url, given.scheme_assumed) == ("https://deploy.internal:8443", False)


def test_an_assumed_https_meeting_a_plain_http_server_says_how_to_ask_for_http(
    deployment_service_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator speaks plain http on 127.0.0.1; the connection names the host without a scheme.
    emulator = deployment_service_emulator
    port = httpx.URL(emulator.base_url).port
    monkeypatch.setenv(
        "AIRFLOW_CONN_NO_SCHEME",
        json.dumps(
            {"conn_type": "deployment_service", "host": "127.0.0.1", "port": port, "password": emulator.api_key}
        ),
    )
    with DeploymentServiceHook("no_scheme", max_attempts=1) as hook, pytest.raises(TransportError) as caught:
        hook.list_deployments(limit=1)
    message = str(caught.value)
    assert message.startswith(f"GET https://127.0.0.1:{port}/v2/deployments: ConnectError (")
    assert "SSL" in message
    assert "https:// was assumed because the connection's host has no scheme" in message
    assert "write the host as http://host:port" in message
    assert emulator.api_key not in message


# ------------------------------------------------------------------------ test_connection
def test_test_connection_says_what_it_tried(service_connection: Any) -> None:
    ok, message = DeploymentServiceHook().test_connection()
    assert ok
    assert message == (
        f"GET {service_connection.base_url}/v2/deployments?limit=1 as the key's own workspace: "
        "API key accepted, at least one deployment visible."
    )


def test_a_failing_test_connection_makes_one_attempt_and_says_what_it_tried(service_connection: Any) -> None:
    # Before, a failing test retried five times (7-9 s with the default backoff).
    emulator = service_connection
    emulator.admin.add_fault("status", method="GET", path="/v2/deployments", status_code=503, count=None)
    ok, message = DeploymentServiceHook().test_connection()
    assert not ok
    assert message.startswith(f"GET {emulator.base_url}/v2/deployments?limit=1 as the key's own workspace: ")
    assert "503 Service Unavailable" in message and "after 1 attempt(s)" in message
    assert emulator.admin.count("GET /v2/deployments") == 1


def test_an_unreachable_test_connection_fails_after_one_short_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a port nobody listens on: the connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_NOBODY",
        json.dumps(
            {
                "conn_type": "deployment_service",
                "host": f"http://127.0.0.1:{port}",
                "password": "k-12345",
                "extra": {"tenant_id": TENANT_ID, "connect_timeout": 60, "read_timeout": 60, "max_attempts": 9},
            }
        ),
    )
    attempts: list[float] = []
    real_init = DeploymentServiceClient.__init__

    def recording_init(self: DeploymentServiceClient, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        attempts.append(self.settings.retry.max_attempts)
        assert (self.settings.connect_timeout, self.settings.read_timeout) == (5.0, 10.0)

    monkeypatch.setattr(DeploymentServiceClient, "__init__", recording_init)
    ok, message = DeploymentServiceHook("nobody").test_connection()
    assert not ok and attempts == [1]
    assert message.startswith(f"GET http://127.0.0.1:{port}/v2/deployments?limit=1 as workspace {TENANT_ID}: ")
    assert f"GET http://127.0.0.1:{port}/v2/deployments: ConnectError" in message
    assert "after 1 attempt(s)" in message and "k-12345" not in message


def test_an_unreachable_service_names_the_connection_and_what_to_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: a connection error named the URL only; it names the Airflow connection and what to check,
    from the hook and from a task, and never the API key."""
    from airflow_provider.operators.deployment_service import ListDeploymentsOperator

    with socket.socket() as sock:  # a port nobody listens on: the connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_SERVICE_DOWN",
        json.dumps(
            {"conn_type": "deployment_service", "host": f"http://127.0.0.1:{port}/api", "password": "k-Secret-98765"}
        ),
    )
    with DeploymentServiceHook("service_down", max_attempts=1) as hook, pytest.raises(TransportError) as caught:
        hook.list_deployments(limit=1)
    task = ListDeploymentsOperator(task_id="list", deployment_service_conn_id="service_down", max_attempts=1)
    with pytest.raises(Exception) as from_task:
        task.execute({})
    for message in (str(caught.value), str(from_task.value)):
        assert f"GET http://127.0.0.1:{port}/api/v2/deployments: ConnectError" in message
        assert "check the Airflow connection 'service_down'" in message
        assert f"(its host, port and scheme make http://127.0.0.1:{port}/api)" in message
        assert "that the service is running" in message and "HTTPS_PROXY" in message
        assert "k-Secret-98765" not in message


def test_test_connection_reports_a_bad_connection_without_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_VERSIONED",
        json.dumps({"conn_type": "deployment_service", "host": "https://x.test/v2", "password": "k"}),
    )
    ok, message = DeploymentServiceHook("versioned").test_connection()
    assert not ok and "connection 'versioned'" in message and "remove the trailing /v2" in message
