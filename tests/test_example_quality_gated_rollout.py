"""The ``quality_gated_rollout`` example DAG under ``dag.test()`` against the emulator (issue 31): the preflight
measures the serving revision's correctness score and error counts (the baseline); a release answering as well
lands, one that serves without a single error but whose ``correctness`` drops is rolled back. Every test asserts
what the emulator serves afterwards."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.dag_runs import example_emulator, run_dag
from tests.test_dag_test_patch import asset_events_of

NAME = "checkout-api-staging"
TRAFFIC = 2000.0
"""Runs a second: the 1.5 s bake sees about 2,500 runs, enough for the error-rate test to rule out the harmful
rate of an app that never fails (half a percentage point) and the feedback test to decide."""


@pytest.fixture
def emulator(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """The examples' emulator, the pacing shortened (rounds every 0.3 s over a 1.5 s bake), and the serving
    revision's runs scored 0.9 for correctness."""
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "0.2")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "60")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "0.3")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS", "1.5")
    server = example_emulator(deployment_service_emulator_factory, monkeypatch)
    deployment_id = server.admin.find_deployment(NAME)["id"]
    server.admin.set_behaviour(deployment_id, requests_per_second=TRAFFIC, feedback={"correctness": {"score": 0.9}})
    return server


def test_a_release_answering_as_well_lands(emulator: Any) -> None:
    before = emulator.admin.find_deployment(NAME)
    good = {"correctness": {"score": 0.92, "share": 0.5}}
    emulator.admin.add_behaviour_rule(image_uri="*:7.0.0", requests_per_second=TRAFFIC, feedback=good)

    state, tasks = run_dag("quality_gated_rollout", version="7.0.0")

    assert (state, tasks) == ("success", {"roll_out": "success"})
    after = emulator.admin.find_deployment(NAME)
    assert after["active_revision_id"] == after["latest_revision_id"] != before["active_revision_id"]
    (event,) = [extra for extra in asset_events_of(before["id"]) if extra["revision_id"] == after["active_revision_id"]]
    assert event["analysis"]["verdict"] == "passed"
    assert {m["check"] for m in event["analysis"]["measurements"]} == {"correctness", "errors"}


def test_a_release_without_errors_whose_correctness_drops_is_rolled_back(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    before = emulator.admin.find_deployment(NAME)
    worse = {"correctness": {"score": 0.55, "share": 0.5}}
    emulator.admin.add_behaviour_rule(image_uri="*:7.6.6", error_rate=0.0, requests_per_second=TRAFFIC, feedback=worse)

    state, tasks = run_dag("quality_gated_rollout", version="7.6.6")

    assert (state, tasks) == ("failed", {"roll_out": "failed"})
    after = emulator.admin.find_deployment(NAME)
    bad, restored = after["revisions"][-2], after["revisions"][-1]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the bad revision and the rollback's
    assert bad["source_revision_config"]["image_uri"].endswith(":7.6.6")
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    logs = task_logs()
    assert re.search(
        r"Preflight: correctness on 'checkout-api-staging' \(serving revision [0-9a-f-]+\) = 0\.(899|900)", logs
    )
    assert "check 'correctness' failed" in logs and "feedback 'correctness' mean 0.5" in logs
    assert f"rolled back to revision {before['active_revision_id']}" in logs
