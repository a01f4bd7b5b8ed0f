"""Whatever goes wrong inside one measurement makes that measurement inconclusive, naming what went wrong (the
exception's type, its text scrubbed of secrets), on the worker and in the trigger alike; the other
deployments and checks of the round are measured as usual. An analysis that cannot run at all (a source's
client that cannot be built, an error outside any measurement) ends in "could not run" on both sides, the
documented path a task retries, and rolls back on its last try (see ``test_patch_faults``)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from airflow_provider.analysis import (
    Analysis,
    AnalysisTarget,
    HttpCheck,
    MetricQueryCheck,
    TracingProjectCheck,
)
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.tasks.analysis import AnalysisNotMeasured, analyse_on_worker, analysis_event_results
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from tests.analysis.conftest import PROMETHEUS_CONN_ENV, live_targets, run_rounds
from tests.analysis.fake_sources import PROMETHEUS_PASSWORD, TRACING_KEY, FakeSources
from tests.analysis.raw_server import RawAnswers, RawServer, deeply_nested_json

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default", "max_attempts": 2}
LOG = logging.getLogger("tests.analysis.faults")
SECRETS = (TRACING_KEY, PROMETHEUS_PASSWORD, "test-api-key")


def _trigger_event(analysis: Analysis, targets: list[AnalysisTarget]) -> dict[str, Any]:
    trigger = DeploymentAnalysisTrigger(
        analysis=analysis.to_json(),
        targets=[target.model_dump(mode="json") for target in targets],
        hook_params=HOOK_PARAMS,
    )

    async def only_event() -> dict[str, Any]:
        events = [event.payload async for event in trigger.run()]
        assert len(events) == 1, events
        payload: dict[str, Any] = events[0]
        return payload

    return asyncio.run(asyncio.wait_for(only_event(), 30))


class _Task:
    hook = DeploymentServiceHook(**HOOK_PARAMS)
    log = LOG


def _no_secret_in(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret in {text!r}"


# ------------------------------------------------------------------------------------ one measurement
@pytest.mark.parametrize("where", ["worker", "trigger"])
def test_a_custom_url_httpx_cannot_parse_is_an_inconclusive_measurement_naming_invalid_url(
    analysis_env: Any, where: str
) -> None:
    healthy, other = live_targets(analysis_env, 2)
    broken = other.model_copy(update={"custom_url": "http://[::1"})  # httpx.InvalidURL, not an httpx.HTTPError
    analysis = Analysis(checks=[HttpCheck(name="health")], count=2, interval_seconds=0.01)

    if where == "worker":
        results = analyse_on_worker(_Task(), analysis, [healthy, broken])  # type: ignore[arg-type]
    else:
        event = _trigger_event(analysis, [healthy, broken])
        assert event["status"] == "done", event
        results = analysis_event_results(event)

    assert results[healthy.deployment_id]["verdict"] == "passed", results[healthy.deployment_id]
    judged = results[broken.deployment_id]
    assert (judged["verdict"], judged["failing_check"]) == ("inconclusive", "health"), judged
    details = [m["detail"] for m in judged["measurements"]]
    assert [m["verdict"] for m in judged["measurements"]] == ["inconclusive", "inconclusive"]
    assert all("GET http://[::1/health" in detail and "InvalidURL" in detail for detail in details), details
    assert "InvalidURL" in judged["reason"]


def test_json_a_parser_cannot_read_is_an_inconclusive_measurement_of_every_source(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A health endpoint, the tracing service and Prometheus answering valid JSON nested too deep for Python's
    parser (RecursionError, not a ValueError): three inconclusive measurements, the type named."""
    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(target.name, run_count=100, error_rate=0.0)
    fake_sources.raw_stats = deeply_nested_json().decode()
    with RawServer(RawAnswers(body=deeply_nested_json())) as deep:
        monkeypatch.setenv(
            PROMETHEUS_CONN_ENV,
            json.dumps({"conn_type": "http", "host": deep.url, "login": "reader", "password": PROMETHEUS_PASSWORD}),
        )
        checks = [
            HttpCheck(url=f"{deep.url}/health", json_field="status", json_equals="ok", name="health"),
            TracingProjectCheck(),
            MetricQueryCheck(query="sum by (name) (up)", condition="> 0", name="up"),
        ]
        results = run_rounds(Analysis(checks=checks, count=1, interval_seconds=0.01, inconclusive_limit=3), [target])

    by_check = {m["check"]: m for m in results[target.deployment_id]["measurements"]}
    assert sorted(by_check) == ["health", "tracing error_rate", "up"]
    for label, measurement in by_check.items():
        assert measurement["verdict"] == "inconclusive", (label, measurement)
        assert "RecursionError" in measurement["detail"], (label, measurement)
    assert by_check["tracing error_rate"]["detail"].startswith("tracing service: POST /runs/stats")
    assert by_check["up"]["detail"].startswith("Prometheus: GET /api/v1/query")
    _no_secret_in(json.dumps(results))


def test_an_unexpected_exception_of_a_source_is_inconclusive_and_scrubbed(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source failing in a way no one foresaw (here: rendering the project's name, raising with the API key in
    its text): that measurement is inconclusive, naming the type, the key masked; the next round measures."""
    from airflow_provider.analysis.measuring import sources

    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(target.name, run_count=100, error_rate=0.0)
    calls: list[int] = []
    original = sources.render_template

    def explodes_once(*args: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("project of test-api-key")
        return original(*args)

    monkeypatch.setattr(sources, "render_template", explodes_once)
    result = run_rounds(Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.01), [target])
    measurements = result[target.deployment_id]["measurements"]
    assert [m["verdict"] for m in measurements] == ["inconclusive", "passed"]
    assert measurements[0]["detail"] == "tracing service: unexpected KeyError: 'project of **********'"
    assert result[target.deployment_id]["verdict"] == "passed"


# ------------------------------------------------------------------------------ the whole analysis
def test_a_source_whose_client_cannot_be_built_means_the_analysis_could_not_run(
    analysis_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (target,) = live_targets(analysis_env, 1)
    monkeypatch.setenv(
        PROMETHEUS_CONN_ENV,
        json.dumps(
            {
                "conn_type": "https",
                "host": "prometheus.example.com",
                "login": "reader",
                "password": PROMETHEUS_PASSWORD,
                "extra": {"ca_bundle": "/nonexistent/ca.pem"},
            }
        ),
    )
    analysis = Analysis(checks=[MetricQueryCheck(query="up", condition="> 0")], count=1, interval_seconds=0.01)

    with pytest.raises(AnalysisNotMeasured) as on_worker:
        analyse_on_worker(_Task(), analysis, [target])  # type: ignore[arg-type]
    event = _trigger_event(analysis, [target])

    for message in (str(on_worker.value), event.get("message", "")):
        assert message.startswith("the analysis could not run: MetricQueryCheck: "), message
        assert "connection 'prometheus_default'" in message and "FileNotFoundError" in message, message
        _no_secret_in(message)
    assert event["status"] == "error"


def test_an_error_outside_any_measurement_means_the_analysis_could_not_run(
    analysis_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last resort: whatever escapes the measurements (here the still-serving check, with the service's key
    in its text) ends the analysis as "could not run", naming the type and never the text."""
    from airflow_provider.analysis.measuring import run

    async def broken(*args: Any) -> Any:
        raise RuntimeError("list answered nonsense for test-api-key")

    monkeypatch.setattr(run, "still_serving", broken)
    (target,) = live_targets(analysis_env, 1)
    analysis = Analysis(checks=[HttpCheck()], count=1, interval_seconds=0.01)

    with pytest.raises(AnalysisNotMeasured) as on_worker:
        analyse_on_worker(_Task(), analysis, [target])  # type: ignore[arg-type]
    event = _trigger_event(analysis, [target])

    assert event["status"] == "error", event
    for message in (str(on_worker.value), event["message"]):
        assert message.startswith("the analysis could not run: an unexpected RuntimeError"), message
        _no_secret_in(message)
        assert "nonsense" not in message  # its text may hold anything
