"""Credentials never travel over plain http to another machine: the tracing key, and Prometheus's basic auth,
bearer token and header values, under one rule (a loopback host, or the connection's extra
``allow_insecure_http`` set to true, aside). Refused before any request, naming the connection and the field,
never the secret: when the analysis starts, and before anything is patched."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import Analysis, AnalysisSetupError, MetricQueryCheck, TracingProjectCheck, run_analysis
from airflow_provider.analysis.measuring.endpoints import prometheus_endpoint, tracing_endpoint
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.tasks.analysis import check_analysis_sources
from tests.analysis.conftest import PROMETHEUS_CONN_ENV, TRACING_CONN_ENV, live_targets
from tests.analysis.fake_sources import PROMETHEUS_PASSWORD, TRACING_KEY, FakeSources

TOKEN = "bearer-secret-token-789"
HEADER_VALUE = "header-secret-value-321"
REMOTE = "http://metrics.example.com:9090"


def _prometheus(monkeypatch: pytest.MonkeyPatch, host: str, **fields: Any) -> None:
    monkeypatch.setenv(PROMETHEUS_CONN_ENV, json.dumps({"conn_type": "http", "host": host, **fields}))


def _prometheus_refusal() -> str:
    with pytest.raises(AnalysisSetupError) as refused:
        asyncio.run(prometheus_endpoint("prometheus_default", Scrubber()))
    message = str(refused.value)
    for secret in (PROMETHEUS_PASSWORD, TOKEN, HEADER_VALUE):
        assert secret not in message
    return message


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"login": "reader", "password": PROMETHEUS_PASSWORD}, "the password (basic auth)"),
        ({"extra": {"bearer_token": TOKEN}}, "the extra bearer_token"),
        ({"extra": {"headers": {"X-Scope-OrgID": HEADER_VALUE}}}, "the extra headers (X-Scope-OrgID)"),
        (
            {"login": "reader", "password": PROMETHEUS_PASSWORD, "extra": {"bearer_token": TOKEN}},
            "the password (basic auth), the extra bearer_token",
        ),
        (
            {"login": "reader", "password": PROMETHEUS_PASSWORD, "extra": {"allow_insecure_http": "false"}},
            "the password (basic auth)",
        ),
    ],
)
def test_prometheus_credentials_are_not_sent_over_plain_http_to_another_host(
    analysis_env: Any, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], named: str
) -> None:
    _prometheus(monkeypatch, REMOTE, **fields)
    message = _prometheus_refusal()
    assert message.startswith(f"MetricQueryCheck: refusing to send {named} of connection 'prometheus_default' ")
    assert "over plain http to metrics.example.com; use https, or set the extra allow_insecure_http" in message


@pytest.mark.parametrize(
    "host, extra",
    [
        ("http://127.0.0.1:9090", {}),  # loopback
        ("http://localhost:9090", {}),
        (REMOTE, {"allow_insecure_http": True}),
        (REMOTE, {"allow_insecure_http": "true"}),
        ("https://metrics.example.com", {}),
    ],
)
def test_prometheus_credentials_go_to_loopback_https_or_where_explicitly_allowed(
    monkeypatch: pytest.MonkeyPatch, host: str, extra: dict[str, Any]
) -> None:
    _prometheus(monkeypatch, host, login="reader", password=PROMETHEUS_PASSWORD, extra={**extra, "bearer_token": TOKEN})
    endpoint = asyncio.run(prometheus_endpoint("prometheus_default", Scrubber()))
    assert endpoint.auth == ("reader", PROMETHEUS_PASSWORD)


def test_plain_http_without_credentials_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    _prometheus(monkeypatch, REMOTE)
    assert asyncio.run(prometheus_endpoint("prometheus_default", Scrubber())).base_url == REMOTE


def test_an_allow_insecure_http_that_is_no_yes_or_no_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _prometheus(monkeypatch, REMOTE, password=PROMETHEUS_PASSWORD, login="r", extra={"allow_insecure_http": "sure"})
    message = _prometheus_refusal()
    assert "connection 'prometheus_default'" in message and "allow_insecure_http" in message and "'sure'" in message


@pytest.mark.parametrize("allow, refused", [("false", True), ("0", True), ("true", False), (None, True)])
def test_the_tracing_key_follows_the_same_rule(
    monkeypatch: pytest.MonkeyPatch, allow: str | None, refused: bool
) -> None:
    extra = {} if allow is None else {"allow_insecure_http": allow}
    monkeypatch.setenv(
        TRACING_CONN_ENV,
        json.dumps(
            {"conn_type": "http", "host": "http://tracing.example.com", "password": TRACING_KEY, "extra": extra}
        ),
    )
    resolve = tracing_endpoint("tracing", DeploymentServiceHook(), Scrubber())
    if not refused:
        assert asyncio.run(resolve).headers["X-Api-Key"] == TRACING_KEY
        return
    with pytest.raises(AnalysisSetupError) as refusal:
        asyncio.run(resolve)
    message = str(refusal.value)
    assert message.startswith(
        "TracingProjectCheck: refusing to send the API key (password) of connection 'tracing' over plain http to "
        "tracing.example.com"
    )
    assert TRACING_KEY not in message


def test_refused_before_any_request_and_before_anything_is_patched(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    _prometheus(monkeypatch, REMOTE, login="reader", password=PROMETHEUS_PASSWORD)
    analysis = Analysis(checks=[MetricQueryCheck(query="up", condition="> 0"), TracingProjectCheck()], count=1)

    with pytest.raises(AirflowFailException, match="refusing to send the password") as before_patching:
        check_analysis_sources(DeploymentServiceHook(), analysis)
    assert "nothing was patched" in str(before_patching.value)

    (target,) = live_targets(analysis_env, 1)
    analysis_env.admin.reset_requests()
    with pytest.raises(AnalysisSetupError, match="refusing to send the password"):
        asyncio.run(
            run_analysis(
                analysis,
                [target],
                hook_params={"deployment_service_conn_id": "deployment_service_default"},
                log=logging.getLogger("tests.analysis.credentials"),
            )
        )
    assert fake_sources.requests == [] and analysis_env.admin.requests() == []
