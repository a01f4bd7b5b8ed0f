"""Each check kind measured for real by run_analysis: the emulator as the deployment service (still-serving
check, health endpoints), a local fake of the tracing service and Prometheus in their documented shapes."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import uuid
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

from airflow_provider.analysis import (
    STILL_SERVING,
    Analysis,
    AnalysisSetupError,
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    MetricQueryCheck,
    TracingProjectCheck,
    run_analysis,
)
from airflow_provider.analysis.measuring.sources import SOURCE_CONCURRENCY, HttpProbe
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.models import Deployment
from tests.analysis.conftest import live_targets
from tests.analysis.fake_sources import PROMETHEUS_PASSWORD, TRACING_KEY, FakeSources, scalar, vector

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
LOG = logging.getLogger("tests.analysis")


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def _run(analysis: Analysis, targets: list[AnalysisTarget]) -> dict[str, Any]:
    return asyncio.run(run_analysis(analysis, targets, hook_params=HOOK_PARAMS, log=LOG, sleep=_no_wait))


def _no_secret_in(*texts: str) -> None:
    for text in texts:
        for secret in (TRACING_KEY, PROMETHEUS_PASSWORD, "test-api-key"):
            assert secret not in text


# ------------------------------------------------------------------------------------------ tracing
def test_tracing_judges_each_deployment_and_looks_each_project_up_once(
    analysis_env: Any, fake_sources: FakeSources, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad, quiet = live_targets(analysis_env, 3)
    fake_sources.add_project(good.name, run_count=140, error_rate=0.01, latency_p50=0.2, latency_p99=0.9)
    fake_sources.add_project(bad.name, run_count=140, error_rate=0.2, latency_p50=0.2, latency_p99=0.9)
    fake_sources.add_project(quiet.name, run_count=3, error_rate=0.0)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01, inconclusive_limit=5)
    caplog.set_level(logging.INFO, logger="tests.analysis")

    results = _run(analysis, [good, bad, quiet])

    assert results[good.deployment_id]["verdict"] == "passed"
    assert [m["value"] for m in results[good.deployment_id]["measurements"]] == [0.01, 0.01, 0.01]
    failed = results[bad.deployment_id]
    assert (failed["verdict"], failed["failing_check"]) == ("failed", "tracing error_rate")
    assert failed["reason"].startswith(
        "check 'tracing error_rate' failed: 1 failed measurement reached the limit of 1: error_rate 0.200 over 140 "
        "runs since "
    )
    assert failed["reason"].endswith(", needs < 0.05")
    assert len(failed["measurements"]) == 1  # stopped after the failing round
    quiet_result = results[quiet.deployment_id]
    assert (quiet_result["verdict"], quiet_result["failing_check"]) == ("inconclusive", "tracing error_rate")
    assert "3 runs since" in quiet_result["reason"] and "fewer than min_run_count 20" in quiet_result["reason"]

    # One session lookup per project for the whole analysis; one stats request per deployment per round.
    lookups = fake_sources.seen("GET", "/tracing/sessions")
    assert sorted(item["params"]["name"] for item in lookups) == sorted([good.name, bad.name, quiet.name])
    assert all(item["params"]["limit"] == "1" for item in lookups)
    assert len(fake_sources.seen("POST", "/tracing/runs/stats")) == 3 + 1 + 3
    body = json.loads(fake_sources.seen("POST", "/tracing/runs/stats")[0]["body"])
    assert body["is_root"] is True and body["start_time"] == good.live_since.isoformat()
    assert all(item["headers"]["x-api-key"] == "test-api-key" for item in lookups)

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Analysis round")]
    assert len(lines) == 7  # each measurement logged once
    assert any(f"tracing error_rate on {bad.name!r} = 0.200, needs < 0.05 -> failed" in line for line in lines)
    _no_secret_in(caplog.text, json.dumps(results))


def test_two_tracing_checks_of_one_project_share_one_stats_request_per_deployment_per_round(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    targets = live_targets(analysis_env, 2)
    for target in targets:
        fake_sources.add_project(target.name, run_count=140, error_rate=0.01, latency_p50=0.2, latency_p99=0.9)
    checks = [TracingProjectCheck(), TracingProjectCheck(metric="latency_p99", condition="< 2")]
    results = _run(Analysis(checks=checks, count=3, interval_seconds=0.01), targets)

    for target in targets:
        result = results[target.deployment_id]
        assert result["verdict"] == "passed", result
        by_check = sorted((m["round"], m["check"], m["value"]) for m in result["measurements"])
        assert by_check == [
            (round_number, check, value)
            for round_number in (1, 2, 3)
            for check, value in (("tracing error_rate", 0.01), ("tracing latency_p99", 0.9))
        ]
    stats = fake_sources.seen("POST", "/tracing/runs/stats")
    assert len(stats) == 2 * 3  # one per deployment per round, read by both checks
    assert len(fake_sources.seen("GET", "/tracing/sessions")) == 2


def test_tracing_inconclusive_when_the_source_cannot_answer(analysis_env: Any, fake_sources: FakeSources) -> None:
    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(target.name, run_count=100, error_rate=0.0)
    fake_sources.tracing_status = 503
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01, inconclusive_limit=1)
    result = _run(analysis, [target])[target.deployment_id]
    assert result["verdict"] == "inconclusive"
    assert [m["verdict"] for m in result["measurements"]] == ["inconclusive", "inconclusive"]
    assert "tracing service: GET /sessions answered 503" in result["reason"]

    fake_sources.tracing_status = None  # the source recovers: the project id is looked up and cached then
    analysis = Analysis(
        checks=[TracingProjectCheck(metric="latency_p99", condition="< 1")], count=2, interval_seconds=0.01
    )
    result = _run(analysis, [target])[target.deployment_id]
    assert result["verdict"] == "inconclusive"
    assert result["measurements"][0]["detail"].startswith("no latency_p99 yet in project")


def test_tracing_with_a_separate_connection_and_a_project_template(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(f"{target.name}-traces", run_count=50, latency_p99=0.4, error_rate=0.5)
    check = TracingProjectCheck(metric="latency_p99", condition="< 1", connection_id="tracing", project="{name}-traces")
    result = _run(Analysis(checks=[check], count=1, interval_seconds=0.01), [target])[target.deployment_id]
    assert result["verdict"] == "passed", result
    assert result["measurements"][0]["detail"] == "latency_p99 0.4s over 50 runs since " + target.live_since.strftime(
        "%H:%M:%S"
    )
    assert fake_sources.seen("GET", "/tracing/sessions")[0]["headers"]["x-api-key"] == TRACING_KEY


def test_tracing_a_missing_project_and_a_wrong_key_are_inconclusive_with_a_hint(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (target,) = live_targets(analysis_env, 1)
    analysis = Analysis(checks=[TracingProjectCheck()], count=1, interval_seconds=0.01, inconclusive_limit=0)
    result = _run(analysis, [target])[target.deployment_id]
    assert result["verdict"] == "inconclusive"
    assert f"no tracing project named {target.name!r}" in result["reason"]

    monkeypatch.setenv(
        "AIRFLOW_CONN_TRACING",
        json.dumps({"conn_type": "http", "host": f"{fake_sources.base_url}/tracing", "password": "wrong-key-789"}),
    )
    caplog.set_level(logging.INFO, logger="tests.analysis")
    wrong = Analysis(checks=[TracingProjectCheck(connection_id="tracing")], count=1, interval_seconds=0.01)
    result = _run(wrong, [target])[target.deployment_id]
    assert "GET /sessions answered 401; check the API key of connection 'tracing'" in result["reason"]
    assert "wrong-key-789" not in caplog.text + json.dumps(result)


def test_tracing_without_a_base_url_fails_before_any_request(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import CONN_ENV, connection_json

    monkeypatch.setenv(CONN_ENV, connection_json(analysis_env.base_url, analysis_env.api_key, tracing_base_url=None))
    (target,) = live_targets(analysis_env, 1)
    analysis_env.admin.reset_requests()
    with pytest.raises(
        AnalysisSetupError, match="set the extra 'tracing_base_url' of connection 'deployment_service_default'"
    ):
        _run(Analysis(checks=[TracingProjectCheck()], count=1), [target])
    assert fake_sources.requests == []
    assert analysis_env.admin.requests() == []


# ----------------------------------------------------------------------------------------- prometheus
def test_a_vector_query_is_sent_once_per_round_for_every_deployment(
    analysis_env: Any, fake_sources: FakeSources, caplog: pytest.LogCaptureFixture
) -> None:
    targets = live_targets(analysis_env, 3)
    first, second, third = targets
    fake_sources.answer_query = lambda query: vector({first.name: 0.01, second.name: 0.3})
    check = MetricQueryCheck(
        query="sum by (name) (rate(errors[{since_seconds}s])) / sum by (name) (rate(requests[{since_seconds}s]))",
        condition="< 0.05",
    )
    caplog.set_level(logging.INFO, logger="tests.analysis")
    results = _run(Analysis(checks=[check], count=2, interval_seconds=0.01, inconclusive_limit=3), targets)

    assert results[first.deployment_id]["verdict"] == "passed"
    assert results[second.deployment_id]["verdict"] == "failed"
    assert results[second.deployment_id]["reason"].startswith(
        f"check {check.label()!r} failed: 1 failed measurement reached the limit of 1: value 0.300"
    )
    assert results[third.deployment_id]["verdict"] == "inconclusive"
    assert "none with name=" in results[third.deployment_id]["measurements"][0]["detail"]
    queries = fake_sources.seen("GET", "/prometheus/api/v1/query")
    assert len(queries) == 2  # one per round, for all three
    # since_seconds: the revisions went live 5 minutes ago
    assert re.search(r"rate\(errors\[30[01]s\]\)", queries[0]["params"]["query"])
    assert queries[0]["headers"]["authorization"].startswith("Basic ")
    _no_secret_in(caplog.text, json.dumps(results))


def test_a_query_naming_the_deployment_is_sent_per_deployment(analysis_env: Any, fake_sources: FakeSources) -> None:
    targets = live_targets(analysis_env, 2)
    values = {target.deployment_id: 0.5 + index for index, target in enumerate(targets)}

    def answer(query: str) -> tuple[int, dict[str, Any]]:
        (deployment_id,) = [key for key in values if key in query]
        return vector({"whatever": values[deployment_id]}, label="pod")

    fake_sources.answer_query = answer
    check = MetricQueryCheck(query='avg(latency{deployment_id="{deployment_id}"})', condition="< 1", name="latency")
    results = _run(Analysis(checks=[check], count=1, interval_seconds=0.01), targets)
    assert [results[t.deployment_id]["verdict"] for t in targets] == ["passed", "failed"]
    assert [results[t.deployment_id]["measurements"][0]["value"] for t in targets] == [0.5, 1.5]
    assert len(fake_sources.seen("GET", "/prometheus/api/v1/query")) == 2


@pytest.mark.parametrize(
    "answer, verdict, words",
    [
        (scalar(0.01), "passed", "value 0.010"),
        (scalar("NaN"), "inconclusive", "NaN (no data to divide)"),
        (vector({}), "inconclusive", "no data: the query returned an empty vector"),
        (  # one sample, but of another deployment: never this deployment's value
            vector({"another-deployment": 0.01}),
            "inconclusive",
            "no data: the query returned 1 sample(s), none with name=",
        ),
        (  # one sample naming no deployment (e.g. a per-target query's aggregate): its value
            (
                200,
                {
                    "status": "success",
                    "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "0.01"]}]},
                },
            ),
            "passed",
            "value 0.010",
        ),
        ((503, {"status": "error", "errorType": "unavailable", "error": "down"}), "inconclusive", "answered 503"),
        (
            (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}),
            "inconclusive",
            "answered 400 parse error at char 3",
        ),
        (
            (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
            "inconclusive",
            "returned a matrix; it must return an instant vector or a scalar",
        ),
        (
            (401, {"status": "error", "errorType": "unauthorized", "error": "no"}),
            "inconclusive",
            "answered 401; check the credentials of connection 'prometheus_default'",
        ),
    ],
)
def test_what_a_query_answer_means(
    analysis_env: Any, fake_sources: FakeSources, answer: tuple[int, dict[str, Any]], verdict: str, words: str
) -> None:
    (target,) = live_targets(analysis_env, 1)
    fake_sources.answer_query = lambda query: answer
    check = MetricQueryCheck(query="vector(1)", condition="< 0.05")
    result = _run(Analysis(checks=[check], count=1, interval_seconds=0.01, inconclusive_limit=1), [target])
    measurement = result[target.deployment_id]["measurements"][0]
    assert measurement["verdict"] == verdict
    assert words in measurement["detail"]
    _no_secret_in(json.dumps(result))


def test_a_missing_metrics_connection_fails_before_any_request(analysis_env: Any, fake_sources: FakeSources) -> None:
    (target,) = live_targets(analysis_env, 1)
    check = MetricQueryCheck(query="up", condition="> 0", connection_id="no_such_prometheus")
    with pytest.raises(AnalysisSetupError, match="the Airflow connection 'no_such_prometheus' could not be found"):
        _run(Analysis(checks=[check], count=1), [target])
    assert fake_sources.requests == []


# ----------------------------------------------------------------------------------------------- http
def test_http_check_against_the_emulator_health_endpoint(analysis_env: Any) -> None:
    healthy, sick = live_targets(analysis_env, 2)
    analysis_env.admin.set_revision_health(sick.deployment_id, sick.revision_id, healthy=False)
    check = HttpCheck(json_field="status", json_equals="ok", max_latency_seconds=5)
    results = _run(Analysis(checks=[check], count=2, interval_seconds=0.01), [healthy, sick])

    passed = results[healthy.deployment_id]
    assert passed["verdict"] == "passed"
    assert passed["measurements"][0]["detail"].startswith(f"GET {healthy.custom_url}/health -> 200 in ")
    assert passed["measurements"][0]["condition"] == "status 200..299, status == 'ok', latency <= 5s"
    failed = results[sick.deployment_id]
    assert (failed["verdict"], failed["failing_check"]) == ("failed", "http {custom_url}/health")
    assert "-> 500 in" in failed["reason"] and "outside 200..299" in failed["reason"]


def test_waiting_for_a_request_slot_does_not_count_as_latency(fake_sources: FakeSources) -> None:
    """More deployments than the probe sends at once, each answering in 0.6 s, under max_latency_seconds=1:
    the ones waiting for a slot (another 0.6 s) are not slow, and none fails."""
    fake_sources.slow_seconds = 0.6
    live_since = datetime.now(timezone.utc)
    targets = [
        AnalysisTarget(
            deployment_id=str(uuid.uuid4()),
            name=f"app-{index}",
            revision_id=str(uuid.uuid4()),
            live_since=live_since,
            custom_url=f"{fake_sources.base_url}/slow/app-{index}",
        )
        for index in range(SOURCE_CONCURRENCY + 10)
    ]
    check = HttpCheck(json_field="status", json_equals="ok", max_latency_seconds=1.0)

    async def measure() -> dict[str, Any]:
        probe = await HttpProbe.open(Scrubber())
        try:
            return await probe.measure(check, targets, datetime.now(timezone.utc))
        finally:
            await probe.aclose()

    readings = asyncio.run(measure())
    assert len(fake_sources.seen("GET", "/slow/app-0/health")) == 1
    failed = {key: reading.detail for key, reading in readings.items() if reading.verdict != "passed"}
    assert failed == {}
    assert all(0.6 <= reading.value < 1.0 for reading in readings.values() if reading.value is not None)


@pytest.mark.parametrize(
    "checks, kinds",
    [
        ([TracingProjectCheck()], ["deployment service", "tracing"]),
        ([HttpCheck()], ["deployment service", "http probe"]),
        ([MetricQueryCheck(query="up", condition="> 0")], ["deployment service", "prometheus"]),
    ],
)
def test_only_the_clients_a_check_needs_are_built_and_off_the_event_loop(
    analysis_env: Any, fake_sources: FakeSources, monkeypatch: pytest.MonkeyPatch, checks: list[Any], kinds: list[str]
) -> None:
    (target,) = live_targets(analysis_env, 1)
    fake_sources.add_project(target.name, run_count=100, error_rate=0.0)
    fake_sources.answer_query = lambda query: scalar(1)
    built: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
    original = httpx.AsyncClient.__init__

    def recording_init(client: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
        original(client, *args, **kwargs)
        base = str(kwargs.get("base_url") or "")
        kind = (
            "tracing"
            if base.endswith("/tracing")
            else "prometheus"
            if base.endswith("/prometheus")
            else "deployment service"
            if base
            else "http probe"
        )
        built.append((kind, threading.get_ident() == loop_thread))

    monkeypatch.setattr(httpx.AsyncClient, "__init__", recording_init)
    result = _run(Analysis(checks=checks, count=1, interval_seconds=0.01), [target])[target.deployment_id]
    assert result["verdict"] == "passed", result
    assert sorted(kind for kind, _ in built) == sorted(kinds)
    assert [kind for kind, on_loop in built if on_loop] == []  # each built in a worker thread


def test_http_check_json_mismatch_fails_and_an_unreachable_url_is_inconclusive(analysis_env: Any) -> None:
    (target,) = live_targets(analysis_env, 1)
    wrong_field = HttpCheck(json_field="status", json_equals="great", name="status great")
    gone = HttpCheck(url="http://127.0.0.1:9/health", timeout_seconds=1, name="nothing listens")
    results = _run(Analysis(checks=[wrong_field, gone], count=1, interval_seconds=0.01), [target])
    by_check = {m["check"]: m for m in results[target.deployment_id]["measurements"]}
    assert by_check["status great"]["verdict"] == "failed"
    assert "status = 'ok', needs 'great'" in by_check["status great"]["detail"]
    assert by_check["nothing listens"]["verdict"] == "inconclusive"
    assert by_check["nothing listens"]["detail"].startswith("GET http://127.0.0.1:9/health failed (ConnectError")


# ----------------------------------------------------------------------------------- still serving
def test_a_revision_no_longer_active_fails_with_still_serving(analysis_env: Any, fake_sources: FakeSources) -> None:
    serving, replaced, stopped = live_targets(analysis_env, 3)
    other_revision = replaced.model_copy(update={"revision_id": "00000000-0000-4000-8000-0000000000ff"})
    analysis_env.admin.set_status(stopped.deployment_id, "UNUSED")
    for target in (serving, replaced, stopped):
        fake_sources.add_project(target.name, run_count=100, error_rate=0.0)
    analysis_env.admin.reset_requests()
    results = _run(
        Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.01), [serving, other_revision, stopped]
    )

    assert results[serving.deployment_id]["verdict"] == "passed"
    for target in (other_revision, stopped):
        result = results[target.deployment_id]
        assert (result["verdict"], result["failing_check"], result["measurements"]) == ("failed", STILL_SERVING, [])
    assert "no longer serves: active revision " + replaced.revision_id in results[replaced.deployment_id]["reason"]
    assert "status UNUSED" in results[stopped.deployment_id]["reason"]
    # One batched list request per round for all targets.
    lists = [
        r
        for r in analysis_env.admin.requests()
        if r.get("method") == "GET" and r.get("path", "").endswith("/v2/deployments")
    ]
    assert len(lists) == 2, analysis_env.admin.requests()


# ------------------------------------------------------------------------------------------ callable
def test_callable_checks_run_with_this_rounds_deployment(analysis_env: Any) -> None:
    first, second = live_targets(analysis_env, 2)
    seen: list[str] = []

    def healthy(deployment: Deployment) -> bool:
        seen.append(deployment.name)
        return deployment.name == first.name

    def error_ratio(deployment: Deployment) -> float:
        return 0.01 if deployment.name == first.name else 0.5

    def explodes(deployment: Deployment) -> None:
        raise RuntimeError("boom with test-api-key inside")

    analysis = Analysis(
        checks=[
            CallableCheck(func=healthy),
            CallableCheck(func=error_ratio, condition="< 0.05"),
            CallableCheck(func=explodes),
        ],
        count=1,
        interval_seconds=0.01,
        failure_limit=1,
    )
    assert analysis.runs_on_worker
    results = _run(analysis, [first, second])
    first_result = {m["check"]: m for m in results[first.deployment_id]["measurements"]}
    assert first_result["callable healthy"]["verdict"] == "passed"
    assert first_result["callable error_ratio"]["value"] == 0.01
    assert first_result["callable explodes"]["verdict"] == "failed"
    assert first_result["callable explodes"]["detail"] == "raised RuntimeError: boom with ********** inside"
    assert results[second.deployment_id]["failing_check"] == "callable healthy"
    assert sorted(seen) == sorted([first.name, second.name])


def test_targets_must_be_distinct_and_count_resolved(analysis_env: Any) -> None:
    (target,) = live_targets(analysis_env, 1)
    with pytest.raises(ValueError, match="distinct deployments"):
        _run(Analysis(checks=[HttpCheck()], count=1), [target, target])
    with pytest.raises(ValueError, match=r"analysis\.count is None"):
        _run(Analysis(checks=[HttpCheck()]), [target])
    assert math.isfinite(Analysis(checks=[HttpCheck()]).interval_seconds)
