"""The analysis's preflight (issue 31): before anything is patched, every check is measured once against the
revision serving now; a check that cannot be measured refuses the rollout with nothing sent, naming the source
(its URL, no secret), the Airflow connection id and the rendered project or query. What it measured is the
baseline, recorded with the patch and reported with the verdict.

Against the real-time emulator of ``test_patch_analysis`` (its tracing endpoints answer from the emulated apps'
traffic); Prometheus is the fake of ``tests/analysis`` or a closed port. Assertions are on the emulator's real
state (no PATCH, no new revision) and on what the user reads.
"""

# ruff: noqa: F811 - the emulator and fake_sources fixtures are imported from the modules that define them

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider.analysis import Analysis, HttpCheck, MetricQueryCheck, TracingProjectCheck
from airflow_provider.operators.analysis import DeploymentAnalysisOperator
from tests.analysis.conftest import fake_sources  # noqa: F401 - a fixture
from tests.analysis.fake_sources import PROMETHEUS_PASSWORD, FakeSources
from tests.tasks.conftest import FakeStore, FakeTI, make_context, run_deferred, scan_for_secret
from tests.tasks.test_patch_analysis import (  # noqa: F401 - emulator is a fixture
    OLD_IMAGE,
    PATHS,
    TRAFFIC,
    analysis_of,
    context_with_events,
    emulator,
    patch_op,
    run,
    set_next_revision_behaviour,
    svc,
)

PROMETHEUS_ENV = "AIRFLOW_CONN_PROMETHEUS_DEFAULT"


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def prometheus_at(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv(
        PROMETHEUS_ENV,
        json.dumps(
            {
                "conn_type": "http",
                "host": host,
                "schema": "prometheus",
                "login": "reader",
                "password": PROMETHEUS_PASSWORD,
            }
        ),
    )


def assert_nothing_sent(emulator: Any, before: dict[str, Any]) -> None:
    """No PATCH reached the service; the deployment serves what it served, with the revisions it had."""
    assert not [item for item in emulator.admin.requests() if item["method"] == "PATCH"]
    after = svc(emulator)
    assert after["active_revision_id"] == before["active_revision_id"]
    assert len(after["revisions"]) == len(before["revisions"])
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE


def give_traffic(emulator: Any) -> None:
    """The serving revision answers TRAFFIC requests a second, the next one too (healthy)."""
    set_next_revision_behaviour(emulator, error_rate=0.0)


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_an_unknown_tracing_project_refuses_the_rollout_naming_source_connection_and_project(
    emulator: Any, deferrable: bool
) -> None:
    give_traffic(emulator)
    before = svc(emulator)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05", project="{name}-typo"))

    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=deferrable, analysis=analysis), context_with_events(FakeTI()), "dag.test"
    )

    assert isinstance(outcome, AirflowException) and not isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "preflight refused the rollout, nothing was patched" in message
    assert "no tracing project named 'svc-typo'" in message
    assert f"tracing service {emulator.root_url}/tracing (connection 'deployment_service_default')" in message
    assert "project 'svc-typo'" in message and "check 'tracing error_rate'" in message
    assert "Analysis(preflight=False)" in message
    assert deferrals == []
    scan_for_secret(message)
    assert emulator.api_key not in message
    assert_nothing_sent(emulator, before)


def test_a_prometheus_that_is_down_refuses_the_rollout(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    give_traffic(emulator)
    before = svc(emulator)
    port = closed_port()
    prometheus_at(monkeypatch, f"127.0.0.1:{port}")
    query = 'sum by (name) (rate(http_errors_total{name="{name}"}[{since_seconds}s]))'
    analysis = analysis_of(MetricQueryCheck(query=query, condition="< 1", name="errors"))

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(FakeTI()), "dag.test"
    )

    assert isinstance(outcome, AirflowException), outcome
    message = str(outcome)
    assert f"Prometheus http://127.0.0.1:{port}/prometheus (connection 'prometheus_default')" in message
    assert 'query \'sum by (name) (rate(http_errors_total{name="svc"}[' in message  # rendered
    assert "check 'errors'" in message and "ConnectError" in message
    assert PROMETHEUS_PASSWORD not in message and "reader" not in message
    assert_nothing_sent(emulator, before)


def test_a_query_with_no_data_refuses_the_rollout(
    emulator: Any,
    fake_sources: FakeSources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    give_traffic(emulator)
    before = svc(emulator)
    prometheus_at(monkeypatch, fake_sources.base_url.removeprefix("http://"))  # answers an empty vector
    analysis = analysis_of(MetricQueryCheck(query="sum by (name) (rate(http_erors_total[5m]))", condition="< 1"))

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=False, analysis=analysis), context_with_events(FakeTI()), "worker"
    )

    assert isinstance(outcome, AirflowException), outcome
    assert "no data: the query returned an empty vector" in str(outcome)
    assert "query 'sum by (name) (rate(http_erors_total[5m]))'" in str(outcome)
    assert fake_sources.seen("GET", "/prometheus/api/v1/query")  # measured, once
    assert_nothing_sent(emulator, before)


def test_a_deployment_without_traffic_is_refused_unless_the_preflight_is_off(emulator: Any) -> None:
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, requests_per_second=0.0)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", requests_per_second=TRAFFIC)
    before = svc(emulator)
    check = TracingProjectCheck(metric="error_rate", condition="< 0.05")

    refused, _ = run(
        lambda: patch_op(emulator, deferrable=False, analysis=analysis_of(check)),
        context_with_events(FakeTI()),
        "worker",
    )

    assert isinstance(refused, AirflowException), refused
    assert "fewer than min_run_count 20" in str(refused)
    assert_nothing_sent(emulator, before)

    ti = FakeTI()
    landed, _ = run(
        lambda: patch_op(emulator, deferrable=False, analysis=analysis_of(check, preflight=False)),
        context_with_events(ti),
        "worker",
    )
    assert isinstance(landed, dict), landed
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"] != before["active_revision_id"]
    assert "baseline" not in ti.xcoms["analysis"]


# ------------------------------------------------------------------------------------------ the baseline
@PATHS
def test_the_preflight_measures_the_baseline_and_the_verdict_reports_it(emulator: Any, path: str) -> None:
    deployment_id = svc(emulator)["id"]
    # The revision serving now fails 10 % of its runs; the new one none.
    emulator.admin.set_behaviour(deployment_id, error_rate=0.1, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    time.sleep(1.0)  # 200 runs of the serving revision: its baseline
    before = svc(emulator)
    ti, store = FakeTI(), FakeStore()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.5"), count=2)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis), context_with_events(ti, store), path
    )

    assert isinstance(outcome, dict), outcome
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"] != before["active_revision_id"]
    result = ti.xcoms["analysis"]
    (baseline,) = result["baseline"]
    assert baseline["round"] == 0 and baseline["verdict"] == "passed"
    assert baseline["value"] == pytest.approx(0.1, abs=0.02)  # the serving revision's error rate
    assert all(m["value"] == 0.0 for m in result["measurements"])  # the new revision's
    recorded = next(value for value in store.data.values() if isinstance(value, dict) and "baseline" in value)
    assert recorded["baseline"] == result["baseline"]


# ------------------------------------------------------------------------------------------ standalone
def test_the_standalone_gate_refuses_before_any_round_and_reports_the_baseline(emulator: Any) -> None:
    give_traffic(emulator)
    deployment_id = svc(emulator)["id"]
    unknown = Analysis(checks=[TracingProjectCheck(project="nowhere")], count=1, interval_seconds=0.01)

    with pytest.raises(AirflowException, match="preflight refused the rollout, no round was measured") as raised:
        DeploymentAnalysisOperator(
            task_id="gate", analysis=unknown, deployment_ids=deployment_id, deferrable=True
        ).execute(make_context())
    assert not isinstance(raised.value, TaskDeferred)
    assert "no tracing project named 'nowhere'" in str(raised.value)

    ti = FakeTI()
    health = HttpCheck(url=f"{emulator.root_url}/apps/{{deployment_id}}/health", name="app health")
    known = Analysis(checks=[TracingProjectCheck(), health], count=1, interval_seconds=0.01)
    result, triggers = run_deferred(
        lambda: DeploymentAnalysisOperator(
            task_id="gate", analysis=known, deployment_ids=deployment_id, deferrable=True
        ),
        make_context(ti),
    )
    assert len(triggers) == 1
    baseline = result["svc"]["baseline"]
    assert [(m["check"], m["round"], m["verdict"]) for m in baseline] == [
        ("tracing error_rate", 0, "passed"),
        ("app health", 0, "passed"),
    ]


def test_preflight_and_its_window_are_checked_at_parse_time() -> None:
    with pytest.raises(ValueError, match="baseline_window_seconds"):
        Analysis(checks=[HttpCheck()], count=1, baseline_window_seconds=0)
    with pytest.raises(ValueError, match="baseline_window_seconds must be a finite number"):
        Analysis(checks=[HttpCheck()], count=1, baseline_window_seconds=float("inf"))
    assert Analysis(checks=[HttpCheck()], count=1).preflight is True
    assert Analysis.from_json(Analysis(checks=[HttpCheck()], count=1, preflight=False).to_json()).preflight is False
