"""Asset events out: a task that lands a revision emits one event on the deployment's asset."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider.assets import (
    REVISIONS_ALIAS_NAME,
    deployment_asset,
    deployment_asset_uri,
    deployment_event,
)
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.events import emit_revision_event, with_revision_outlets
from tests.tasks.conftest import SECRET, FakeTI, deployment_named, make_context, scan_for_secret


class ResumingTI(FakeTI):
    """A task instance that also reads back its own XComs (as after resuming from the triggerer)."""

    def xcom_pull(self, task_ids: str, key: str, map_indexes: int = -1) -> Any:
        assert task_ids == self.task_id
        return self.xcoms.get(key)


@pytest.fixture
def ticking() -> Iterator[Callable[[Any], None]]:
    """Move an emulator's frozen clock 1 s forward every 0.1 s (however long the task takes to patch)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(emulator: Any) -> None:
        def tick() -> None:
            while not stop.wait(0.1):
                emulator.state.advance(1.0)

        threads.append(threading.Thread(target=tick, daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join()


def context_with_events(ti: FakeTI | None = None) -> dict[str, Any]:
    context = make_context(ti)
    context["outlet_events"] = OutletEventAccessors()
    return context


def emitted(context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(asset uri, extra)`` of every event the task recorded (direct outlets and through aliases)."""
    found = []
    for key, accessor in context["outlet_events"]._dict.items():
        if hasattr(key, "uri") and accessor.extra:
            found.append((key.uri, dict(accessor.extra)))
        for event in accessor.asset_alias_events:
            found.append((event.dest_asset_key.uri, dict(event.extra)))
    return found


def patch_op(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    return PatchDeploymentOperator(task_id="patch", deployment_id=deployment_id, poll_interval=0.05, **kwargs)


def test_patch_and_wait_emits_one_event_with_the_revisions_and_no_secret(emulator: Any, ticking: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ticking(emulator)
    ti = FakeTI()
    context = context_with_events(ti)
    task = patch_op(dep["id"], repo_ref="release/2", secrets={"TOKEN": SECRET}, wait_for_rollout=True)
    task.execute(context)
    [(uri, extra)] = emitted(context)
    assert uri == f"deployment-service://deployments/{dep['id']}"
    assert extra["kind"] == "revision_live" and extra["origin"] == "task" and extra["outcome"] == "rolled_out"
    assert extra["deployment_id"] == dep["id"] and extra["deployment_name"] == "checkout-api-dev"
    assert extra["revision_id"] == ti.xcoms["revision_id"] != dep["active_revision_id"]
    assert extra["previous_revision_id"] == dep["active_revision_id"]
    assert extra["source_revision_config"]["repo_ref"] == "release/2"
    assert extra["status"] == "READY"
    scan_for_secret(extra)
    assert deployment_event({"from_trigger": False, **extra}) == {"from_trigger": False, **extra}


def test_a_declared_deployment_asset_gets_the_extra_instead_of_the_alias(emulator: Any, ticking: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ticking(emulator)
    context = context_with_events()
    task = patch_op(dep["id"], repo_ref="release/2", wait_for_rollout=True, outlets=[deployment_asset(dep["id"])])
    task.execute(context)
    [(uri, extra)] = emitted(context)
    assert uri == deployment_asset_uri(dep["id"]) and extra["kind"] == "revision_live"
    alias_key = [key for key in context["outlet_events"]._dict if getattr(key, "name", "") == REVISIONS_ALIAS_NAME]
    assert alias_key == []


def test_no_event_without_waiting_or_when_the_rollout_fails(emulator: Any, ticking: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "compile error")
    ticking(emulator)
    failing = context_with_events()
    with pytest.raises(AirflowFailException):
        patch_op(dep["id"], repo_ref="release/3", wait_for_rollout=True, timeout=30).execute(failing)
    assert emitted(failing) == []
    context = context_with_events()
    patch_op(dep["id"], repo_ref="release/2", wait_for_rollout=False).execute(context)
    assert emitted(context) == []


def test_deferred_patch_emits_when_it_resumes(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ti = ResumingTI()
    task = patch_op(dep["id"], repo_ref="release/2", wait_for_rollout=True, deferrable=True)
    with pytest.raises(TaskDeferred):
        task.execute(make_context(ti))
    emulator.state.advance(2.5)
    live = emulator.state.snapshot()["deployments"]
    deployment = next(item for item in live if item["id"] == dep["id"])
    event = {"status": "success", "message": "live", "deployment_id": dep["id"], "revision_id": ti.xcoms["revision_id"]}
    context = context_with_events(ti)
    result = task.execute_complete(context, {**event, "deployment": deployment})
    assert result["active_revision_id"] == ti.xcoms["revision_id"]
    [(_, extra)] = emitted(context)
    assert extra["revision_id"] == ti.xcoms["revision_id"]
    assert extra["previous_revision_id"] == dep["active_revision_id"]


def test_waiting_operators_declare_the_alias_once() -> None:
    task = patch_op("8d12e254-9195-47ca-94ec-20051ae2fc1b", wait_for_rollout=True, outlets=[Asset("other")])
    names = [getattr(item, "name", None) for item in task.outlets]
    assert names == ["other", REVISIONS_ALIAS_NAME]
    assert with_revision_outlets(with_revision_outlets(None)) == [AssetAlias(REVISIONS_ALIAS_NAME)]


def test_emit_is_a_no_op_without_outlet_events_or_outlets(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    assert emit_revision_event(make_context(), dep, previous_revision_id=None, outlets=[AssetAlias("x")]) is None
    context = context_with_events()
    assert emit_revision_event(context, dep, previous_revision_id=None, outlets=[]) is None
    assert emitted(context) == []


def test_rollback_emits_rolled_back_with_the_revision_it_replaced(emulator: Any, ticking: Any) -> None:
    from airflow_provider.operators.deployment_service import RollbackDeploymentOperator

    dep = deployment_named(emulator, "checkout-api-staging")
    good = dep["active_revision_id"]
    body = PatchDeploymentRequest(source_revision_config={"image_uri": "registry.example.com/acme/checkout-api:broken"})
    bad = str(emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"])
    emulator.state.advance(5)
    ticking(emulator)
    ti = ResumingTI()
    context = context_with_events(ti)
    task = RollbackDeploymentOperator(task_id="rollback", deployment_id=dep["id"], revision_id=good, poll_interval=0.05)
    result = task.execute(context)
    [(uri, extra)] = emitted(context)
    assert uri == deployment_asset_uri(dep["id"])
    assert extra["outcome"] == "rolled_back" and extra["kind"] == "revision_live"
    assert extra["revision_id"] == result["active_revision_id"] and extra["previous_revision_id"] == bad
    scan_for_secret(extra)


def test_fleet_rollout_emits_one_event_per_deployment_it_landed(service: Any) -> None:
    from airflow_provider.operators.deployment_service import FleetRolloutOperator
    from tests.tasks.conftest import seed

    emulator = service(data=seed(5), frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    names = sorted(item["name"] for item in emulator.state.snapshot()["deployments"])
    context = context_with_events()
    task = FleetRolloutOperator(
        task_id="fleet", deployment_names=names, repo_ref="v2", wave_size=2, poll_interval=0.1, timeout=30
    )
    table = task.execute(context)
    events = dict(emitted(context))
    assert set(events) == {deployment_asset_uri(row["deployment_id"]) for row in table}
    for row in table:
        extra = events[deployment_asset_uri(row["deployment_id"])]
        assert (extra["revision_id"], extra["previous_revision_id"]) == (row["to_revision"], row["from_revision"])
        assert extra["source_revision_config"]["repo_ref"] == "v2" and extra["outcome"] == "rolled_out"
        scan_for_secret(extra)
