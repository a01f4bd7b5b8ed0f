"""``PatchDeploymentOperator(guard=...)`` (issue 42): once its revision landed, the task hands it to the guard (the
revision, the one that served before, the baseline its preflight measured, until when) and ends; the record is
what the guard's trigger reads. Against the real-time emulator, on the worker and deferred."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.guard import Guard, GuardRecord, guard_key
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from tests.tasks.conftest import CONN_ENV, SECRET, FakeStore, FakeTI, connection_json, scan_for_secret, seed
from tests.tasks.test_patch_analysis import SEED, context_with_events, patch_op, run, set_next_revision_behaviour, svc

ERRORS = TracingProjectCheck(rate_test=RateTest(), name="errors")
GUARD = Guard(analysis=Analysis(checks=[ERRORS], interval_seconds=60, count=30), for_seconds=86_400)


class Variables:
    """Airflow's ``Variable.set`` as the task calls it (a task outside a supervisor has no Variables)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def set(self, key: str, value: Any, description: str | None = None, serialize_json: bool = False) -> None:
        assert serialize_json
        self.data[key] = json.loads(json.dumps(value))


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection (as the patch analysis tests')."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


@pytest.fixture
def variables(monkeypatch: pytest.MonkeyPatch) -> Variables:
    store = Variables()
    monkeypatch.setattr("airflow.sdk.Variable.set", store.set)
    return store


@pytest.mark.parametrize("path", ["worker", "triggerer"])
def test_a_landed_revision_is_handed_to_the_guard_with_its_baseline(
    emulator: Any, variables: Variables, path: str
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    # The rollout's own check of the same name, judged by a fixed condition: its preflight is the guard's baseline.
    rollout_check = TracingProjectCheck(metric="error_rate", condition="< 0.05", name="errors")
    analysis = Analysis(checks=[rollout_check], interval_seconds=0.3, count=2)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis, guard=GUARD),
        context_with_events(ti, FakeStore()),
        path,
    )

    assert isinstance(outcome, dict), outcome
    after = svc(emulator)
    key = guard_key("deployment_service_default", after["id"])
    assert list(variables.data) == [key]
    record = GuardRecord.model_validate(variables.data[key])
    assert record.revision_id == after["active_revision_id"] == ti.xcoms["revision_id"]
    assert record.previous_revision_id == before["active_revision_id"]
    assert record.deployment_name == "svc" and record.conn_id == "deployment_service_default"
    assert (record.until - record.landed_at).total_seconds() == 86_400
    assert abs((datetime.now(record.landed_at.tzinfo) - record.landed_at).total_seconds()) < 60
    assert record.baseline and record.baseline[0]["check"] == "errors" and record.baseline[0]["runs"] >= 20
    assert record.the_analysis() == GUARD.analysis
    assert record.handed_by["task_id"] == "task"
    scan_for_secret(variables.data)
    assert SECRET not in json.dumps(variables.data)


def test_a_revision_that_does_not_land_is_never_guarded(emulator: Any, variables: Variables) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.6)
    analysis = Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05", name="errors")],
        interval_seconds=0.3,
        count=3,
    )

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=False, analysis=analysis, guard=GUARD),
        context_with_events(FakeTI(), FakeStore()),
        "worker",
    )

    assert isinstance(outcome, Exception) and "analysis failed" in str(outcome)
    assert variables.data == {}


def test_guard_arguments_are_checked_when_the_task_is_built() -> None:
    deployment_id = "00000000-0000-4000-8000-000000000001"
    with pytest.raises(ValueError, match="guard needs a task that waits for its revision"):
        PatchDeploymentOperator(
            task_id="p", deployment_id=deployment_id, image_uri="x", wait_for_rollout=False, guard=GUARD
        )
    with pytest.raises(ValueError, match=r"guard: the check\(s\) 'errors' compare with the baseline"):
        PatchDeploymentOperator(task_id="p", deployment_id=deployment_id, image_uri="x", guard=GUARD)
    with pytest.raises(ValueError, match=r"guard must be an airflow_provider\.analysis\.guard\.Guard"):
        PatchDeploymentOperator(task_id="p", deployment_id=deployment_id, image_uri="x", guard={"for_seconds": 1})  # type: ignore[arg-type]
    fixed = Guard(
        analysis=Analysis(checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")]), for_seconds=60
    )
    task = PatchDeploymentOperator(task_id="p", deployment_id=deployment_id, image_uri="x", guard=fixed)
    assert task.guard is fixed


def test_a_fleet_rollout_hands_each_deployment_it_landed_to_the_guard(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, variables: Variables
) -> None:
    from tests.tasks import test_fleet_analysis as fleet_tests

    emulator = deployment_service_emulator_factory(data=seed(3), **fleet_tests.FAST)
    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, emulator.api_key, backoff_initial=0.01))
    for item in emulator.state.snapshot()["deployments"]:
        emulator.admin.set_behaviour(item["id"], revision_id="next", requests_per_second=fleet_tests.TRAFFIC)
    before = {item["name"]: item for item in emulator.state.snapshot()["deployments"]}
    fixed = Guard(analysis=fleet_tests.tracing_analysis(count=None, interval_seconds=60), for_seconds=3600)

    table, _ = fleet_tests.run(
        fleet_tests.fleet_op(False, deployment_names=sorted(before), canary=1, wave_size=2, guard=fixed), FakeTI()
    )

    assert isinstance(table, list) and {row["outcome"] for row in table} == {"landed"}, table
    records = {value["deployment_name"]: GuardRecord.model_validate(value) for value in variables.data.values()}
    assert set(records) == set(before)
    for name, record in records.items():
        after = emulator.state.deployment(before[name]["id"])
        assert record.revision_id == after["active_revision_id"] != before[name]["active_revision_id"]
        assert record.previous_revision_id == before[name]["active_revision_id"]
        assert record.baseline is None  # the fleet's analysis had no preflight
    scan_for_secret(variables.data)


def test_the_guides_example_builds_a_guarded_patch_task() -> None:
    from tests.docs_snippets import documented_block

    namespace: dict[str, Any] = {}
    exec(documented_block("guides/guard.md", "guard:patch"), namespace)
    task = namespace["roll_out"]
    assert isinstance(task, PatchDeploymentOperator) and task.guard is not None
    assert task.guard.for_seconds == 86_400
    assert [check.label() for check in task.guard.analysis.checks] == ["errors", "correctness"]
