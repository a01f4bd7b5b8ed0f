"""The ``analysed_rollout`` example DAG under ``dag.test()`` against the emulator: a release whose app serves
well lands, its asset event carrying the analysis; one that goes live ``READY`` but fails 20 % of its runs
is judged by its tracing project after the task resumed (``dag.test()`` drops the defer kwargs) and rolled
back. Every test asserts what the emulator serves afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.dag_runs import example_emulator, run_dag
from tests.test_dag_test_patch import asset_events_of

NAME = "checkout-api-staging"
TRAFFIC = 200.0
"""Requests per second the emulated app serves: the tracing check's 20 runs arrive in 0.1 s."""


@pytest.fixture
def emulator(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """The examples' emulator, and the example's pacing shortened: rounds every 0.3 s over a 1.5 s bake."""
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "0.2")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "60")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "0.3")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS", "1.5")
    return example_emulator(deployment_service_emulator_factory, monkeypatch)


def test_a_release_that_serves_well_lands_with_its_analysis_in_the_asset_event(emulator: Any) -> None:
    before = emulator.admin.find_deployment(NAME)
    emulator.admin.add_behaviour_rule(image_uri="*:7.0.0", error_rate=0.0, requests_per_second=TRAFFIC)

    state, tasks = run_dag("analysed_rollout", version="7.0.0")

    assert (state, tasks) == ("success", {"roll_out": "success", "report": "success"})
    after = emulator.admin.find_deployment(NAME)
    assert after["active_revision_id"] == after["latest_revision_id"] != before["active_revision_id"]
    assert after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == "registry.example.com/acme/checkout-api:7.0.0"
    (event,) = [extra for extra in asset_events_of(before["id"]) if extra["revision_id"] == after["active_revision_id"]]
    assert event["outcome"] == "rolled_out"
    assert event["analysis"]["verdict"] == "passed" and event["analysis"]["failing_check"] is None
    checks = {measurement["check"] for measurement in event["analysis"]["measurements"]}
    assert checks == {"tracing error_rate", "health"}


def test_a_release_failing_a_fifth_of_its_runs_is_rolled_back_after_the_resume(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    before = emulator.admin.find_deployment(NAME)
    emulator.admin.add_behaviour_rule(image_uri="*:7.6.6", error_rate=0.2, requests_per_second=TRAFFIC)

    state, tasks = run_dag("analysed_rollout", version="7.6.6")

    assert (state, tasks) == ("failed", {"roll_out": "failed", "report": "failed"})
    after = emulator.admin.find_deployment(NAME)
    bad, restored = after["revisions"][-2], after["revisions"][-1]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the bad revision and the rollback's
    assert bad["source_revision_config"]["image_uri"].endswith(":7.6.6")
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert [
        extra for extra in asset_events_of(before["id"]) if extra.get("revision_id") in (bad["id"], restored["id"])
    ] == []
    logs = task_logs()
    assert f"revision {bad['id']} went live but the analysis failed: " in logs
    assert "tracing error_rate" in logs and "< 0.05" in logs
    assert f"rolled back to revision {before['active_revision_id']}" in logs
    assert f"revision {bad['id']}: analysis failed" in logs  # the report task read the XCom
