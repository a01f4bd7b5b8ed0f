"""The analysis window starts when the revision went live, not when the deployment last changed (issue 28, item 7).

The tracing statistics are read from ``live_since``. The deployment's ``updated_at`` says when it went live only on
a service that moves it then (the emulator by default; the spec does not say). Against an emulator that moves it
on requests only (``updated_at_on_requests_only``), ``updated_at`` is the PATCH: a window from there includes the
build, when the previous revision served. Here the previous revision fails half its requests and the new one none:
a window that includes the build fails a healthy revision (the same mistake that, the other way round, dilutes a
bad one). The window's start comes from the revision's own ``updated_at`` once ``DEPLOYED`` (the revision
endpoint), else from when the task first saw it active; the patch task, the fleet and
``DeploymentAnalysisOperator`` share the rule.

Assertions are on the emulator's real state (what serves) and on the measurements the task reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.operators.deployment_service import DeploymentAnalysisOperator, FleetRolloutOperator
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json, make_context, run_deferred, seed
from tests.tasks.test_patch_analysis import (
    NEW_IMAGE,
    SEED,
    TRAFFIC,
    analysis_of,
    context_with_events,
    emitted,
    patch_op,
    run,
    svc,
)

BUILD_SECONDS = 1.0
"""The build: 200 runs of the previous revision at :data:`TRAFFIC` runs a second, half of them failed."""
OLD_ERROR_RATE = 0.5
ENDPOINTS = pytest.mark.parametrize(
    "revision_endpoint", [True, False], ids=["revision endpoint", "no revision endpoint"]
)


def start(factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, data: Any, revision_endpoint: bool) -> Any:
    """A real-time emulator whose deployments' ``updated_at`` moves on requests only."""
    server = factory(
        data=data,
        frozen_clock=False,
        build_seconds=BUILD_SECONDS,
        ready_seconds=0.1,
        updated_at_on_requests_only=True,
        disabled_endpoints=() if revision_endpoint else ("get_revision",),
    )
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def tracing_values(result: dict[str, Any]) -> list[float]:
    return [m["value"] for m in result["measurements"] if m["check"] == "tracing error_rate"]


@ENDPOINTS
@pytest.mark.parametrize("path", ["worker", "dag.test"], ids=["worker", "deferred, kwargs dropped"])
def test_the_patch_tasks_window_excludes_the_build(
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    revision_endpoint: bool,
) -> None:
    emulator = start(deployment_service_emulator_factory, monkeypatch, SEED, revision_endpoint)
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=OLD_ERROR_RATE, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    time.sleep(0.3)  # the serving revision's runs on the real clock (60): a baseline the preflight can measure
    ti = FakeTI()
    context = context_with_events(ti, FakeStore())
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    outcome, _ = run(lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis), context, path)

    assert isinstance(outcome, dict), outcome
    new = ti.xcoms["revision_id"]
    after = svc(emulator)
    assert after["updated_at"] < after["revisions"][-1]["updated_at"]  # the service did not move it at go-live
    assert after["active_revision_id"] == new and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == NEW_IMAGE
    result = ti.xcoms["analysis"]
    assert result["verdict"] == "passed", result
    assert tracing_values(result) and set(tracing_values(result)) == {0.0}  # none of the old revision's runs
    assert [event["outcome"] for event in emitted(context)] == ["rolled_out"]


@ENDPOINTS
def test_the_fleets_window_excludes_the_build(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, revision_endpoint: bool
) -> None:
    emulator = start(deployment_service_emulator_factory, monkeypatch, seed(2), revision_endpoint)
    emulator.state.add_behaviour_rule(repo_ref="*", error_rate=OLD_ERROR_RATE, requests_per_second=TRAFFIC)
    emulator.state.add_behaviour_rule(repo_ref="v2", error_rate=0.0, requests_per_second=TRAFFIC)
    names = ["app-0000", "app-0001"]
    check = TracingProjectCheck(condition="< 0.05", min_run_count=5)
    ti = FakeTI()

    def make() -> FleetRolloutOperator:
        return FleetRolloutOperator(
            task_id="fleet",
            deployment_names=names,
            repo_ref="v2",
            canary=1,
            wave_size=1,
            max_failures=0,
            rollback_on_failure=True,
            # No preflight: the serving revisions' traffic starts with the test (the window is what it is about).
            analysis=Analysis(checks=[check], interval_seconds=0.3, count=2, preflight=False),
            deferrable=True,
            poll_interval=0.1,
            timeout=30,
        )

    table, _ = run_deferred(make, make_context(ti, FakeStore()))

    measured = ti.xcoms["fleet_analysis"]  # each deployment's whole result, by name
    for row in table:
        deployment = emulator.state.find_deployment(row["name"])
        assert row["outcome"] == Outcome.LANDED, row
        assert deployment["active_revision_id"] == row["to_revision"] and deployment["status"] == "READY"
        assert deployment["source_revision_config"]["repo_ref"] == "v2"
        assert deployment["updated_at"] < deployment["revisions"][-1]["updated_at"]
        assert row["analysis"]["verdict"] == "passed", row
        assert set(tracing_values(measured[row["name"]])) == {0.0}, measured[row["name"]]


def test_the_analysis_operator_never_counts_from_before_the_revision_went_live(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``live_since`` given earlier than the revision went live (the patch's start) is moved to when it did."""
    emulator = start(deployment_service_emulator_factory, monkeypatch, SEED, True)
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=OLD_ERROR_RATE, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    patched = emulator.state.patch_deployment(deployment_id, {"source_revision_config": {"image_uri": NEW_IMAGE}})
    emulator.state.advance(BUILD_SECONDS + 0.5)  # live since half a second
    assert svc(emulator)["active_revision_id"] == patched["latest_revision_id"]
    ti = FakeTI()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    results, _ = run_deferred(
        lambda: DeploymentAnalysisOperator(
            task_id="gate",
            analysis=analysis,
            deployment_ids=deployment_id,
            live_since=datetime.fromisoformat(patched["updated_at"]),  # the PATCH, before the build
        ),
        make_context(ti),
    )

    assert results["svc"]["verdict"] == "passed", results
    assert set(tracing_values(results["svc"])) == {0.0}
