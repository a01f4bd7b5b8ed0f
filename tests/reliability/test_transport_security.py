"""Transport security: TLS verification on by default and configurable with a CA bundle; the API key never
sent over plain http to a non-loopback host unless the connection allows it; redirects never followed."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflow_provider.client import (
    ClientSettings,
    DeploymentServiceClient,
    InvalidRequestError,
    RetryPolicy,
    TransportError,
    UnexpectedResponseError,
)
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import EmulatorState
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from tests.reliability.support import (
    API_KEY,
    RecordedSleeps,
    Report,
    StubResponse,
    StubServer,
    TlsFiles,
    connection_json,
    make_tls_files,
    tls_emulator,
)

RETRY = RetryPolicy(max_attempts=3, backoff_initial=0.5, backoff_max=2.0)
DATA = {"deployments": [{"name": "tls-check", "source": "codehost"}]}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_service(tls: TlsFiles) -> Iterator[tuple[str, EmulatorState]]:
    """The emulator served over HTTPS with a certificate from the throwaway CA; yields (base URL, state)."""
    state = EmulatorState(api_key=API_KEY, data=DATA, frozen_clock=True)
    with tls_emulator(state, tls) as base_url:
        yield base_url, state


def use_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str, **extra: Any) -> DeploymentServiceHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection_json(host, API_KEY, **extra))
    return DeploymentServiceHook(conn_id, max_attempts=1)


# ---------------------------------------------------------------------------------------------- TLS
def test_tls_verification_is_on_by_default_and_a_ca_bundle_makes_it_pass(
    tls_service: tuple[str, EmulatorState], tls: TlsFiles, monkeypatch: pytest.MonkeyPatch, report: Report
) -> None:
    base_url, state = tls_service
    state.reset_requests()
    outcomes: list[tuple[str, str, int]] = []

    def attempt(label: str, settings: ClientSettings) -> str:
        before = sum(state.counters.values())
        try:
            with DeploymentServiceClient(settings, API_KEY, sleep=RecordedSleeps()) as client:
                shown = f"ok: {len(client.list_deployments(limit=5).resources)} deployment(s) listed"
        except TransportError as err:
            assert API_KEY not in str(err)
            shown = f"refused: {err}"
        outcomes.append((label, shown, sum(state.counters.values()) - before))
        return shown

    refused = attempt("default settings (verify=True)", ClientSettings(base_url=base_url, retry=RETRY))
    assert refused.startswith("refused") and "CERTIFICATE_VERIFY_FAILED" in refused, refused
    assert state.counters == {}, "a request got through the failed handshake"
    assert attempt("verify=<CA bundle path>", ClientSettings(base_url=base_url, verify=str(tls.ca_cert))).startswith(
        "ok"
    )
    assert attempt("verify=False (no verification)", ClientSettings(base_url=base_url, verify=False)).startswith("ok")

    # the same through an Airflow connection
    for label, extra in (
        ("connection, no TLS extras", {}),
        ("connection extra ca_bundle=<path>", {"ca_bundle": str(tls.ca_cert)}),
        ("connection extra verify=false", {"verify": "false"}),
    ):
        hook = use_connection(monkeypatch, "tls_check", base_url, **extra)
        before = sum(state.counters.values())
        try:
            shown = f"ok: {len(hook.list_deployments(limit=5).resources)} deployment(s) listed"
        except TransportError as err:
            shown = f"refused: {err}"
        finally:
            hook.close()
        outcomes.append((label, shown, sum(state.counters.values()) - before))
    assert [shown.split(":")[0] for _, shown, _ in outcomes[3:]] == ["refused", "ok", "ok"]
    for label, shown, reached in outcomes:
        report.row("transport", check="TLS, self-signed CA", setting=label, requests_served=reached, outcome=shown)
        report.add("transport_checks", 1)


def test_a_certificate_failure_is_not_retried_and_not_transient(
    tls_service: tuple[str, EmulatorState], report: Report
) -> None:
    """An unknown CA will not become known by waiting: the client must say so at once (no backoff waits),
    and the error must not be ``transient`` (else the sensor and the trigger keep polling until their
    timeout instead of failing with the hint to set ``ca_bundle``)."""
    base_url, _ = tls_service
    sleeps = RecordedSleeps()
    with (
        DeploymentServiceClient(
            ClientSettings(base_url=base_url, retry=RETRY), API_KEY, sleep=sleeps, rng=random.Random(1)
        ) as client,
        pytest.raises(TransportError) as raised,
    ):
        client.list_deployments(limit=1)
    report.row(
        "transport",
        check="TLS failure handling",
        setting=f"default settings, max_attempts={RETRY.max_attempts}",
        requests_served=0,
        outcome=f"{len(sleeps.waits)} backoff wait(s), transient={raised.value.transient}",
    )
    assert sleeps.waits == [], f"a certificate failure was retried after waits of {sleeps.delays} s"
    assert raised.value.transient is False
    assert "ca_bundle" in str(raised.value)


# ------------------------------------------------------------------------------------ plain http
def test_the_api_key_never_goes_over_plain_http_to_another_host_unless_allowed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, report: Report
) -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"resources": [], "offset": 0})

    transport = httpx.MockTransport(record)
    url = "http://deploy.example.com/api-host"
    with pytest.raises(InvalidRequestError, match="allow_insecure_http") as refused:
        DeploymentServiceClient(ClientSettings(base_url=url), API_KEY, transport=transport)
    hook = use_connection(monkeypatch, "plain_http", url)
    with pytest.raises(InvalidRequestError, match="allow_insecure_http") as refused_hook:
        hook.list_deployments(limit=1)
    assert sent == []

    caplog.set_level(logging.WARNING, logger="airflow_provider.client")
    settings = ClientSettings(base_url=url, allow_insecure_http=True)
    with DeploymentServiceClient(settings, API_KEY, transport=transport) as client:
        client.list_deployments(limit=1)
    warnings = [record.getMessage() for record in caplog.records if "plain http" in record.getMessage()]
    assert warnings == ["Sending the API key over plain http to deploy.example.com (allow_insecure_http is set)"]
    assert len(sent) == 1 and sent[0].headers["X-Api-Key"] == API_KEY
    assert API_KEY not in str(refused.value) + str(refused_hook.value) + caplog.text

    for setting, outcome in (
        ("client, allow_insecure_http unset", f"refused before any request: {refused.value}"),
        ("connection host http://..., no extra", f"refused before any request: {refused_hook.value}"),
        ("client, allow_insecure_http=True", f"sent, with the warning: {warnings[0]}"),
    ):
        report.row(
            "transport",
            check="plain http to a non-loopback host",
            setting=setting,
            requests_served=1 if "sent" in outcome else 0,
            outcome=outcome,
        )
        report.add("transport_checks", 1)


# ----------------------------------------------------------------------------------------- redirects
@pytest.fixture(scope="module")
def other_host() -> Iterator[EmulatorServer]:
    """A second host (127.0.0.2) a redirect points to; it must never see a request."""
    with EmulatorServer(host="127.0.0.2", api_key=API_KEY, data=DATA, frozen_clock=True) as server:
        yield server


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_redirects_to_another_host_are_not_followed(
    other_host: EmulatorServer, report: Report, status: int, method: str
) -> None:
    other_host.state.reset_requests()
    target = f"{other_host.base_url}/v2/deployments"
    deployment_id = other_host.state.find_deployment("tls-check")["id"]
    with StubServer(lambda _method, _path: StubResponse(status, {"Location": target})) as redirector:
        settings = ClientSettings(base_url=redirector.base_url, retry=RETRY)
        with (
            DeploymentServiceClient(settings, API_KEY, sleep=RecordedSleeps()) as client,
            pytest.raises(UnexpectedResponseError) as raised,
        ):
            if method == "GET":
                client.list_deployments(limit=1)
            else:
                client.patch_deployment(deployment_id, {"source_revision_config": {"image_uri": "app:2"}})
        message = str(raised.value)
        report.row(
            "redirects",
            request=f"{method} (answered {status} to another host)",
            requests_to_redirecting_server=len(redirector.requests),
            requests_to_other_host=sum(other_host.state.counters.values()),
            error=message,
        )
        report.add("transport_checks", 1)
        assert len(redirector.requests) == 1
        assert redirector.requests[0][2].get("X-Api-Key") == API_KEY  # the key went only to the configured host
    assert other_host.state.counters == {}
    assert f"answered {status} redirect to {target!r}" in message
    assert "redirects are not followed (the API key would travel with them)" in message
    assert API_KEY not in message
