"""The guard's DAG (issue 42): what a run rolls back for the guard's events (each regression once, only while the
regressed revision still serves, never one another run handled), alerts de-duplicated by rule and time bucket, and
the rollback it makes restores the revision that served before on the emulator."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider.analysis.guard import claim_key
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import RollbackDeploymentOperator
from airflow_provider.plugins.rollouts.guard_dag import (
    GUARD_DAG_ID,
    confirmed_regressions,
    guard_dag,
    regressions_of,
)
from airflow_provider.triggers.deployment_service import DeploymentGuardTrigger
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json, make_context

LOG = logging.getLogger("tests.guard_dag")
IMAGE = "registry.example.com/acme/svc:1.0.0"
SEED = {"deployments": [{"name": "svc", "source": "external_docker", "source_revision_config": {"image_uri": IMAGE}}]}


class Claims:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.2, ready_seconds=0.1)
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01))
    return server


def landed_new_revision(emulator: Any) -> tuple[dict[str, Any], str, str]:
    """``svc`` after a new revision went live: (deployment, regressed revision, the one before)."""
    before = dict(emulator.state.find_deployment("svc"))
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": IMAGE + "-2"}})
    emulator.state.patch_deployment(before["id"], request)
    import time

    deadline = time.monotonic() + 10
    while emulator.state.deployment(before["id"])["active_revision_id"] == before["active_revision_id"]:
        assert time.monotonic() < deadline, "the new revision did not go live"
        time.sleep(0.05)
    after = emulator.state.deployment(before["id"])
    return after, after["active_revision_id"], before["active_revision_id"]


def event(deployment: dict[str, Any], revision: str, previous: str) -> dict[str, Any]:
    payload = {
        "kind": "revision_regressed",
        "deployment_id": deployment["id"],
        "deployment_name": "svc",
        "revision_id": revision,
        "previous_revision_id": previous,
        "message": "rolled back by the guard, 7 h 12 min after landing, correctness 0.61 against 0.88",
        "measurements": [],
    }
    return {"from_trigger": True, "payload": payload}


def test_two_events_of_one_regression_roll_back_once_and_the_old_revision_serves(emulator: Any) -> None:
    deployment, regressed, previous = landed_new_revision(emulator)
    claims = Claims()
    hook = DeploymentServiceHook()
    twice = [event(deployment, regressed, previous), event(deployment, regressed, previous)]  # two triggerers

    found = regressions_of(twice, guards={}, taken=lambda rule, bucket: True, log=LOG)
    chosen = confirmed_regressions(found, read=hook.get_deployment, claims=claims, run_id="run-1", log=LOG)

    assert len(found) == 1 and len(chosen) == 1
    (kwargs,) = chosen
    assert kwargs["revision_id"] == previous and kwargs["rolling_back_from"] == regressed
    assert kwargs["requested_from"].startswith("rolled back by the guard, 7 h 12 min")
    assert claims.data[claim_key(deployment["id"], regressed)]["handled_by"] == "run-1"
    # Another run of the same events (a duplicate event that made a second run) rolls nothing back.
    assert confirmed_regressions(found, read=hook.get_deployment, claims=claims, run_id="run-2", log=LOG) == []

    task = RollbackDeploymentOperator(task_id="roll_back", poll_interval=0.05, timeout=30, **kwargs)
    task.execute(make_context(FakeTI(), FakeStore()))  # type: ignore[arg-type]

    after = emulator.state.deployment(deployment["id"])
    assert after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == IMAGE  # the revision that served before serves again
    # Once rolled back, a late duplicate run finds the regressed revision no longer serving.
    claims.data.clear()
    assert confirmed_regressions(found, read=hook.get_deployment, claims=claims, run_id="run-3", log=LOG) == []
    hook.close()


def test_alerts_are_taken_once_per_rule_and_bucket_and_only_for_guarded_deployments() -> None:
    guards = {
        "d1": {"deployment_id": "d1", "revision_id": "r1", "previous_revision_id": "r0", "deployment_name": "svc"}
    }
    buckets: set[tuple[str, int]] = set()

    def taken(rule: str, bucket: int) -> bool:
        if (rule, bucket) in buckets:
            return False
        buckets.add((rule, bucket))
        return True

    alert = {"kind": "alert", "rule": "errors-high", "deployment_id": "d1", "fired_at": "2026-11-29T06:10:00Z"}
    later = {**alert, "fired_at": "2026-11-29T06:40:00Z"}  # the same hour: the same bucket
    other = {**alert, "deployment_id": "d2"}  # not guarded

    first = regressions_of([alert], guards=guards, taken=taken, log=LOG)
    assert [(item["revision_id"], item["previous_revision_id"], item["origin"]) for item in first] == [
        ("r1", "r0", "alert")
    ]
    assert regressions_of([later, other], guards=guards, taken=taken, log=LOG) == []


def test_the_guard_dag_is_scheduled_on_the_guard_asset_and_rolls_back_through_the_operator() -> None:
    dag = guard_dag()
    assert dag.dag_id == GUARD_DAG_ID and dag.max_active_runs == 1
    assert sorted(dag.task_dict) == ["confirm", "report", "roll_back"]
    (asset,) = dag.timetable.asset_condition.objects  # type: ignore[union-attr]
    (watcher,) = asset.watchers
    assert isinstance(watcher.trigger, DeploymentGuardTrigger)
    assert watcher.trigger.serialize()[1]["deployment_service_conn_id"] == "deployment_service_default"
    other = guard_dag(conn_id="eu", poll_interval=30)
    assert other.dag_id == f"{GUARD_DAG_ID}__eu"
    with pytest.raises(ValueError, match="notify has an unknown event"):
        guard_dag(notify={"regresed": []})
