"""Fixtures of the analysis tests: the emulator as the deployment service, fake tracing/Prometheus sources."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.analysis.fake_sources import PROMETHEUS_PASSWORD, TRACING_KEY, FakeSources, FakeSourcesServer
from tests.conftest import CONN_ENV, connection_json

PROMETHEUS_CONN_ENV = "AIRFLOW_CONN_PROMETHEUS_DEFAULT"
TRACING_CONN_ENV = "AIRFLOW_CONN_TRACING"


@pytest.fixture
def fake_sources() -> Iterator[FakeSources]:
    server = FakeSourcesServer(FakeSources())
    yield server.start()
    server.stop()


@pytest.fixture
def analysis_env(deployment_service_emulator: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The deployment-service connection at the emulator (its tracing_base_url at the fake, same key as the
    fake's), a ``tracing`` connection and ``prometheus_default`` at the fake. Yields the emulator."""
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            deployment_service_emulator.base_url,
            deployment_service_emulator.api_key,
            backoff_initial=0.01,
            backoff_max=0.05,
            max_attempts=2,
            tracing_base_url=f"{fake_sources.base_url}/tracing",
        ),
    )
    monkeypatch.setenv(
        TRACING_CONN_ENV,
        json.dumps({"conn_type": "http", "host": f"{fake_sources.base_url}/tracing", "password": TRACING_KEY}),
    )
    monkeypatch.setenv(
        PROMETHEUS_CONN_ENV,
        json.dumps(
            {
                "conn_type": "http",
                "host": fake_sources.base_url.removeprefix("http://"),
                "schema": "prometheus",
                "login": "reader",
                "password": PROMETHEUS_PASSWORD,
            }
        ),
    )
    return deployment_service_emulator


def live_targets(
    emulator: Any, count: int = 3, *, since_minutes: float = 5, live_since: datetime | None = None
) -> list[Any]:
    """The first ``count`` deployments with a custom_url, as analysis targets of their active revision, live
    since ``live_since`` (default: ``since_minutes`` ago)."""
    from airflow_provider.analysis import AnalysisTarget

    state = emulator.admin.state()
    deployments = [d for d in state["deployments"] if d["status"] == "READY" and d["active_revision_id"]]
    deployments = [d for d in deployments if d["source_config"].get("custom_url")][:count]
    if live_since is None:
        live_since = datetime.now(timezone.utc) - timedelta(minutes=since_minutes)
    return [
        AnalysisTarget(
            deployment_id=d["id"],
            name=d["name"],
            revision_id=d["active_revision_id"],
            live_since=live_since,
            custom_url=d["source_config"]["custom_url"],
        )
        for d in deployments
    ]


HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
"""The default deployment-service connection (set by :func:`analysis_env`), as a hook's ``hook_params``."""


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def run_rounds(analysis: Any, targets: list[Any], logger: str = "tests.analysis") -> dict[str, Any]:
    """``run_analysis`` of ``analysis`` for ``targets`` through the default connection, its rounds not waited
    for (each round sleeps 0 s)."""
    from airflow_provider.analysis import run_analysis

    log = logging.getLogger(logger)
    return asyncio.run(run_analysis(analysis, targets, hook_params=HOOK_PARAMS, log=log, sleep=_no_wait))
