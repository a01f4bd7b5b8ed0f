"""Retried and resumed tasks: a patch task killed after its patch reached the service, then retried, creates
no second revision; a deferred rollout whose trigger is torn down and rebuilt from its serialized form
(as after a triggerer restart) resumes and completes."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.client import DeploymentServiceError
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.operators.deployment_service import TASK_STATE_KEY, PatchDeploymentOperator
from airflow_provider.triggers.deployment_service import active_pollers
from tests.reliability.support import LIST_ROUTE, OPERATOR_SECRET, PATCH_ROUTE, Report
from tests.tasks.conftest import FakeStore, FakeTI, wait_until

NAME = "checkout-api-dev"
BUILD_AND_READY = 3.5
"""Seconds of emulated time after which a revision created now is live (build 2 s, ready 1 s)."""


class WorkerKilled(RuntimeError):
    """Stands for the worker dying (OOM kill, node loss) at a chosen point of the task."""


class DyingTI(FakeTI):
    """A task instance whose worker dies when the task pushes its first XCom after the patch landed (the
    empty ``deployment_url`` pushed before any request, for the extra link, goes through)."""

    def xcom_push(self, key: str, value: Any) -> None:
        if key == "deployment_url" and value is None and not self.xcoms:
            super().xcom_push(key, value)
            return
        raise WorkerKilled(f"worker killed before pushing XCom {key!r}")


def context_for(ti: FakeTI, store: FakeStore | None, run_started: datetime) -> dict[str, Any]:
    context: dict[str, Any] = {"ti": ti, "dag_run": SimpleNamespace(start_date=run_started)}
    if store is not None:
        context["task_state_store"] = store
    return context


def patch_task(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "revision_source": "internal_docker",  # NAME is a codehost deployment: image_uri needs this source
        "image_uri": "registry.example.com/acme/checkout-api:7.1.0",
        "secrets": {"TOKEN": OPERATOR_SECRET},
        "poll_interval": 0.05,
        "max_attempts": 2,
        **kwargs,
    }
    return PatchDeploymentOperator(deployment_id=deployment_id, **options)


def outage_after_the_patch(emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the service applies the next PATCH, its answer is lost (drop after processing) and a short
    outage starts: the list endpoint answers 503 to the client's two read-back attempts."""
    state = emulator.state
    original = state.patch_deployment
    tripped: list[bool] = []

    def patch_then_outage(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = original(*args, **kwargs)
        if not tripped:
            tripped.append(True)
            state.add_fault(kind="status", status_code=503, method="GET", path="/v2/deployments", count=2)
        return result

    monkeypatch.setattr(state, "patch_deployment", patch_then_outage)
    state.add_fault(kind="drop_after_processing", method="PATCH", path="/v2/deployments/*", count=1)


@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize("kill_point", ["answer lost, read-back failed", "killed before the XCom push"])
def test_retried_patch_task_creates_no_second_revision(
    frozen_emulator: EmulatorServer,
    monkeypatch: pytest.MonkeyPatch,
    report: Report,
    kill_point: str,
    with_store: bool,
) -> None:
    state = frozen_emulator.state
    deployment = state.find_deployment(NAME)
    revisions_before = [revision["id"] for revision in deployment["revisions"]]
    store = FakeStore() if with_store else None
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)

    # try 1: the patch reaches the service, then the try dies
    if kill_point.startswith("answer lost"):
        outage_after_the_patch(frozen_emulator, monkeypatch)
        first_ti: FakeTI = FakeTI(try_number=1)
        expected_error: type[BaseException] = DeploymentServiceError
    else:
        first_ti = DyingTI(try_number=1)
        expected_error = WorkerKilled
    with pytest.raises(expected_error) as first_error:
        patch_task(deployment["id"], wait_for_rollout=True).execute(context_for(first_ti, store, run_started))
    after_first = state.deployment(deployment["id"])
    created = after_first["latest_revision_id"]
    assert created not in revisions_before, "the first try's patch did not reach the service"
    assert state.count(PATCH_ROUTE) == 1
    if store is not None and kill_point.startswith("killed"):
        assert store.data[TASK_STATE_KEY]["revision_id"] == created

    # try 2, after Airflow's retry delay (the revision has been built meanwhile)
    state.advance(BUILD_AND_READY)
    second_ti = FakeTI(try_number=2)
    result = patch_task(deployment["id"], wait_for_rollout=True).execute(context_for(second_ti, store, run_started))
    revisions_after = [revision["id"] for revision in state.deployment(deployment["id"])["revisions"]]
    new_revisions = len(revisions_after) - len(revisions_before)
    report.row(
        "retried_tasks",
        kill_point=kill_point,
        task_state_store="yes" if with_store else "no",
        first_try=f"{type(first_error.value).__name__}: {str(first_error.value)[:90]}",
        patch_requests=state.count(PATCH_ROUTE),
        new_revisions=new_revisions,
        second_try=f"reattached to {second_ti.xcoms.get('revision_id')} and waited: {result['status']}",
    )
    report.add("retried_tasks", 1)
    report.add("duplicate_revisions_retries", max(0, new_revisions - 1))
    assert state.count(PATCH_ROUTE) == 1, "the retry patched again"
    assert new_revisions == 1
    assert second_ti.xcoms["revision_id"] == created == result["active_revision_id"]
    assert result["status"] == "READY"
    assert OPERATOR_SECRET not in str(first_error.value)


def rebuild(classpath: str, kwargs: dict[str, Any]) -> BaseTrigger:
    """Instantiate a trigger from its class path and kwargs, as the triggerer does."""
    module, _, name = classpath.rpartition(".")
    trigger: BaseTrigger = getattr(importlib.import_module(module), name)(**kwargs)
    return trigger


async def first_event(trigger: BaseTrigger) -> TriggerEvent:
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger ended without an event")


async def test_deferred_rollout_resumes_after_the_trigger_is_torn_down_and_rebuilt(
    airflow_db: str, frozen_emulator: EmulatorServer, report: Report
) -> None:
    from airflow.models.trigger import Trigger

    state = frozen_emulator.state
    deployment = state.find_deployment(NAME)
    ti = FakeTI()
    task = patch_task(deployment["id"], wait_for_rollout=True, deferrable=True, timeout=300)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({"ti": ti})
    trigger = deferred.value.trigger
    revision = ti.xcoms["revision_id"]
    assert revision == state.deployment(deployment["id"])["latest_revision_id"]

    # the triggerer runs it; it polls; then the triggerer dies while a poll is in flight
    polls_before = state.count(LIST_ROUTE)
    running = asyncio.create_task(first_event(trigger))
    await wait_until(lambda: state.count(LIST_ROUTE) >= polls_before + 2)
    state.add_fault(kind="delay", method="GET", path="/v2/deployments", delay_seconds=0.3, count=1)
    in_flight = state.count(LIST_ROUTE) + 1
    await wait_until(lambda: state.count(LIST_ROUTE) >= in_flight)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert running.cancelled()
    assert active_pollers() == []
    polls_first_life = state.count(LIST_ROUTE) - polls_before

    # a new triggerer process picks the trigger row up: class path + kwargs, through Airflow's own storage
    row = Trigger.from_object(trigger)
    assert OPERATOR_SECRET not in row.encrypted_kwargs
    revived = rebuild(row.classpath, row.kwargs)
    assert revived.serialize() == trigger.serialize()
    state.advance(BUILD_AND_READY)
    event = await asyncio.wait_for(first_event(revived), 15)
    result = task.execute_complete({"ti": ti}, event.payload)
    revisions = state.deployment(deployment["id"])["revisions"]
    report.row(
        "resumed_trigger",
        scenario="trigger cancelled mid-poll, rebuilt from Trigger.from_object(...).kwargs",
        polls_before_teardown=polls_first_life,
        patch_requests=state.count(PATCH_ROUTE),
        event=event.payload["status"],
        outcome=f"revision {revision} live: {result['active_revision_id'] == revision}",
    )
    assert event.payload["status"] == "success", event.payload
    assert result["active_revision_id"] == revision and result["status"] == "READY"
    assert state.count(PATCH_ROUTE) == 1
    assert [item["id"] for item in revisions].count(revision) == 1 and revisions[-1]["id"] == revision
    assert active_pollers() == []
