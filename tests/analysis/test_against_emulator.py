"""Each check kind measured against the emulator's application behaviour: its tracing endpoints, its app
health endpoints, and its /metrics (answered through a tiny in-test Prometheus query API that computes the
error-rate query from two scrapes; real Prometheus runs in the e2e tests)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from typing import Any

import httpx
import pytest

from airflow_provider.analysis import Analysis, HttpCheck, MetricQueryCheck, TracingProjectCheck, run_analysis
from tests.analysis.conftest import CONN_ENV, live_targets
from tests.analysis.fake_sources import FakeSources, vector
from tests.conftest import connection_json

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
LOG = logging.getLogger("tests.analysis.emulator")
ERROR_RATE_QUERY = (
    "sum by (name) (rate(deployment_request_errors_total[1m])) / sum by (name) (rate(deployment_requests_total[1m]))"
)
_SAMPLE = re.compile(r'^(\w+)\{name="([^"]*)",[^}]*\} (\S+)$')


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def _run(analysis: Analysis, targets: list[Any]) -> dict[str, Any]:
    return asyncio.run(run_analysis(analysis, targets, hook_params=HOOK_PARAMS, log=LOG, sleep=_no_wait))


@pytest.fixture
def emulator(analysis_env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The deployment-service connection at the emulator, its tracing_base_url the emulator's own."""
    monkeypatch.setenv(CONN_ENV, connection_json(analysis_env.base_url, analysis_env.api_key, max_attempts=2))
    return analysis_env


def _scrape(metrics_url: str) -> dict[tuple[str, str], float]:
    """``{(metric, name): value summed over revisions}`` from the emulator's /metrics."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            totals[(match.group(1), match.group(2))] += float(match.group(3))
    return totals


class _RatePrometheus:
    """Answers ``sum by (name) (rate(A[..])) / sum by (name) (rate(B[..]))`` as Prometheus would over the
    window since the previous scrape (the first at construction)."""

    def __init__(self, metrics_url: str) -> None:
        self.metrics_url = metrics_url
        self.previous = _scrape(metrics_url)
        self.queries: list[str] = []

    def __call__(self, query: str) -> tuple[int, dict[str, Any]]:
        self.queries.append(query)
        match = re.fullmatch(
            r"sum by \(name\) \(rate\((\w+)\[1m\]\)\) / sum by \(name\) \(rate\((\w+)\[1m\]\)\)", query
        )
        if match is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"not emulated: {query}"}
        now = _scrape(self.metrics_url)
        numerator, denominator = match.groups()
        names = {name for metric, name in now if metric == denominator}
        samples: dict[str, float | str] = {}
        for name in names:
            made = now[(denominator, name)] - self.previous.get((denominator, name), 0.0)
            if made > 0:
                samples[name] = (now[(numerator, name)] - self.previous.get((numerator, name), 0.0)) / made
        self.previous = now
        return vector(samples)


def test_tracing_check_reads_the_emulated_projects(emulator: Any) -> None:
    failing, healthy, quiet = live_targets(emulator, 3, live_since=emulator.admin.now())
    emulator.admin.set_behaviour(failing.deployment_id, error_rate=0.2)
    emulator.admin.set_behaviour(healthy.deployment_id, error_rate=0.0)
    emulator.admin.set_behaviour(quiet.deployment_id, error_rate=0.0, requests_per_second=0.1)
    emulator.admin.advance(60)
    emulator.admin.reset_requests()

    analysis = Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.01)
    results = _run(analysis, [failing, healthy, quiet])

    failed = results[failing.deployment_id]
    assert (failed["verdict"], failed["failing_check"]) == ("failed", "tracing error_rate")
    assert failed["measurements"][0]["detail"].startswith("error_rate 0.200 over 300 runs since")
    assert results[healthy.deployment_id]["verdict"] == "passed"
    assert [m["value"] for m in results[healthy.deployment_id]["measurements"]] == [0.0, 0.0]
    inconclusive = results[quiet.deployment_id]
    assert inconclusive["verdict"] == "inconclusive"
    assert "6 runs since" in inconclusive["reason"] and "fewer than min_run_count 20" in inconclusive["reason"]

    routes = [request["route"] for request in emulator.admin.requests()]
    assert routes.count("GET /tracing/sessions") == 3  # one lookup per project for the whole analysis
    assert routes.count("POST /tracing/runs/stats") == 1 + 2 + 2  # one per deployment per round measured
    assert routes.count("GET /v2/deployments") == 2  # the still-serving check: one list per round


def test_metric_query_check_on_the_emulated_metrics(emulator: Any, fake_sources: FakeSources) -> None:
    failing, healthy = live_targets(emulator, 2)
    emulator.admin.set_behaviour(failing.deployment_id, error_rate=0.3)
    emulator.admin.set_behaviour(healthy.deployment_id, error_rate=0.0)
    prometheus = _RatePrometheus(emulator.metrics_url)
    fake_sources.answer_query = prometheus
    emulator.admin.advance(30)

    check = MetricQueryCheck(query=ERROR_RATE_QUERY, condition="< 0.05", name="error rate")
    results = _run(Analysis(checks=[check], count=1, interval_seconds=0.01), [failing, healthy])

    assert results[failing.deployment_id]["verdict"] == "failed"
    assert results[failing.deployment_id]["measurements"][0]["value"] == pytest.approx(0.3)
    assert results[failing.deployment_id]["reason"] == (
        "check 'error rate' failed: 1 failed measurement reached the limit of 1: value 0.300, needs < 0.05"
    )
    assert results[healthy.deployment_id]["verdict"] == "passed"
    assert prometheus.queries == [ERROR_RATE_QUERY]  # one query for both deployments


def test_http_check_reads_the_emulated_app_behaviour(emulator: Any) -> None:
    down, slow, fine = live_targets(emulator, 3)
    emulator.admin.set_behaviour(down.deployment_id, health_status=503)
    # The slow app answers after 1.5 s; the bound is 0.75 s, so a fine app on a loaded machine (a few hundred
    # milliseconds of scheduling noise) still passes and the slow one never does.
    emulator.admin.set_behaviour(slow.deployment_id, latency_ms=1500)
    check = HttpCheck(max_latency_seconds=0.75, json_field="status", json_equals="ok")
    results = _run(Analysis(checks=[check], count=1, interval_seconds=0.01), [down, slow, fine])

    assert results[down.deployment_id]["verdict"] == "failed"
    assert "-> 503 in" in results[down.deployment_id]["reason"]
    assert results[slow.deployment_id]["verdict"] == "failed"
    assert "slower than 0.75s" in results[slow.deployment_id]["reason"]
    assert results[slow.deployment_id]["measurements"][0]["value"] >= 1.5
    assert results[fine.deployment_id]["verdict"] == "passed"


def test_a_faulted_tracing_service_is_inconclusive_and_a_failed_list_is_survived(
    emulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (target,) = live_targets(emulator, 1, live_since=emulator.admin.now())
    emulator.admin.advance(60)
    emulator.admin.add_fault("status", method="POST", path="/tracing/runs/stats", status_code=503, count=1)
    emulator.admin.add_fault("status", method="GET", path="/v2/deployments", status_code=503, count=2)
    caplog.set_level(logging.INFO, logger="tests.analysis.emulator")
    analysis = Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.01)
    result = _run(analysis, [target])[target.deployment_id]

    # Round 1: the list fails after the client's 2 attempts (logged, measured anyway); the stats answer 503.
    assert [m["verdict"] for m in result["measurements"]] == ["inconclusive", "passed"]
    assert result["measurements"][0]["detail"] == "tracing service: POST /runs/stats answered 503 (try again later)"
    assert result["verdict"] == "passed"
    assert any("could not check that the revisions still serve" in r.getMessage() for r in caplog.records)


def test_analyse_on_worker_says_why_the_analysis_cannot_run(emulator: Any) -> None:
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook
    from airflow_provider.tasks.analysis import analyse_on_worker

    class Task:
        hook = DeploymentServiceHook()
        log = LOG

    (target,) = live_targets(emulator, 1)
    missing = Analysis(checks=[MetricQueryCheck(query="up", condition="> 0", connection_id="nowhere")], count=1)
    with pytest.raises(AirflowException, match=r"^the analysis could not run: MetricQueryCheck: the Airflow"):
        analyse_on_worker(Task(), missing, [target])  # type: ignore[arg-type]
    healthy = Analysis(checks=[HttpCheck()], count=1, interval_seconds=0.01)
    assert analyse_on_worker(Task(), healthy, [target])[target.deployment_id]["verdict"] == "passed"  # type: ignore[arg-type]
