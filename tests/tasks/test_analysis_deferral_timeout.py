"""A deferred analysis and the triggerer restarting under it (issue 28, item 8).

A restarted :class:`DeploymentAnalysisTrigger` starts its rounds again (its arguments cannot change), while
Airflow's deferral timeout counts from the first deferral. The deferral is sized for a restart and the trigger
carries a wall-clock deadline: a trigger restarted too late to finish reports "could not be measured in time"
itself, before Airflow's timeout, and the task follows the documented path (a retry, or the rollback on its last
try). When Airflow's timeout ends the deferral anyway (the triggerer down past it), the last try rolls the revision
back like any analysis that could not be measured, for the patch task and for a fleet's wave, instead of failing
with the revision serving unjudged.

The restart is real: the trigger runs, is cancelled mid-way (as a triggerer going down cancels it), and runs again
rebuilt from its ``serialize()``. Assertions are on the emulator's real state and what the task says.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks import analysis as task_analysis
from airflow_provider.tasks.deferral import TRIGGER_FAIL_METHOD, TRIGGER_TIMEOUT, deferral_timed_out
from airflow_provider.triggers import analysis as trigger_analysis
from tests.tasks.conftest import CONN_ENV, PATCH_ROUTE, FakeStore, FakeTI, connection_json, make_context
from tests.tasks.test_fleet_analysis import (
    assert_rolled_back,
    fleet,  # noqa: F401 (the fixture)
    fleet_op,
    ids_by_name,
    revisions,
    tracing_analysis,
)
from tests.tasks.test_patch_analysis import (
    OLD_IMAGE,
    SEED,
    analysis_of,
    context_with_events,
    patch_op,
    set_next_revision_behaviour,
    svc,
)

ROUNDS_SECONDS = 2.0
"""What the analysis's rounds are given (``analysis_seconds``, scaled down from its 60 s per round allowance)."""
GRACE = 1.0
"""Airflow's deferral timeout beyond the trigger's deadline (``DEFERRAL_GRACE``, scaled down)."""
AIRFLOW_TIMEOUT = {"error": TRIGGER_TIMEOUT}
"""What Airflow resumes a task with when its deferral timed out (``next_kwargs``)."""


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection (its tracing base URL in the extra)."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


@pytest.fixture
def short_analysis_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scale the analysis's time bounds down so that a test can outlive them."""
    monkeypatch.setattr(task_analysis, "analysis_seconds", lambda analysis: ROUNDS_SECONDS)
    monkeypatch.setattr(trigger_analysis, "analysis_seconds", lambda analysis: ROUNDS_SECONDS)
    monkeypatch.setattr(task_analysis, "DEFERRAL_GRACE", GRACE)


def defer_to_the_analysis(make: Callable[[], Any], context: dict[str, Any]) -> TaskDeferred:
    """Run the task until it defers its analysis (the rollout's trigger run inline before); that deferral."""
    method, arguments = "execute", dict[str, Any]()
    while True:
        try:
            getattr(make(), method)(context, **arguments)
        except TaskDeferred as deferred:
            if deferred.method_name == "execute_analysis_complete":
                return deferred
            trigger = rebuilt(deferred.trigger)
            method, arguments = deferred.method_name, {"event": run_for(trigger, 30)}
            continue
        raise AssertionError("the task never deferred its analysis")


def rebuilt(trigger: Any) -> Any:
    """The trigger as a triggerer builds it: from its JSON-checked ``serialize()``."""
    _classpath, kwargs = trigger.serialize()
    return type(trigger)(**json.loads(json.dumps(kwargs)))


def run_for(trigger: Any, seconds: float) -> dict[str, Any] | None:
    """Run ``trigger`` until its first event (its payload) or for ``seconds``, then cancel it (``None``), as a
    triggerer going down cancels its triggers."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise AssertionError("the trigger ended without an event")

    async def bounded() -> dict[str, Any] | None:
        task = asyncio.ensure_future(first())
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None

    return asyncio.run(bounded())


def finish(make: Callable[[], Any], context: dict[str, Any], resume: Callable[[Any], Any]) -> BaseException | Any:
    """Resume the task with ``resume(task)`` and run it to its end (each later deferral through its rebuilt
    trigger, each resume on a fresh operator, given the event only): the result, or the exception raised."""
    call = resume
    while True:
        try:
            return call(make())
        except TaskDeferred as deferred:
            event = run_for(rebuilt(deferred.trigger), 30)
            call = lambda task, method=deferred.method_name, event=event: getattr(task, method)(context, event)  # noqa: E731
        except Exception as err:
            return err


def test_the_deferral_signal_is_airflows() -> None:
    assert (TRIGGER_FAIL_REPR, TriggerFailureReason.TRIGGER_TIMEOUT.value) == (TRIGGER_FAIL_METHOD, TRIGGER_TIMEOUT)
    assert deferral_timed_out(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT})
    assert deferral_timed_out(TRIGGER_FAIL_REPR, {"error": "Trigger timeout"})  # as read back from the database
    assert not deferral_timed_out(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_FAILURE})
    assert not deferral_timed_out("execute_analysis_complete", {"error": "Trigger timeout"})


@pytest.mark.usefixtures("short_analysis_bounds")
def test_a_trigger_restarted_too_late_reports_in_time_and_the_last_try_rolls_back(emulator: Any) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti, store = FakeTI(1), FakeStore()
    context = context_with_events(ti, store)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3, interval_seconds=0.6)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis)

    deferred = defer_to_the_analysis(make, context)
    deferred_at = time.time()
    airflow_gives_up_at = deferred_at + deferred.timeout.total_seconds()
    assert run_for(rebuilt(deferred.trigger), 0.8) is None  # the triggerer goes down mid-analysis
    time.sleep(max(0.0, deferred_at + 1.5 * ROUNDS_SECONDS - time.time()))  # and comes back too late to finish

    event = run_for(rebuilt(deferred.trigger), 3 * ROUNDS_SECONDS)  # rebuilt from the same serialize()
    reported_at = time.time()

    assert event is not None and event["status"] == "error", event
    assert "could not be measured in time" in event["message"], event
    assert reported_at < airflow_gives_up_at, (reported_at - deferred_at, deferred.timeout)
    outcome = finish(make, context, lambda task: task.execute_analysis_complete(context, event))  # the last try

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis could not be measured on the task's last try" in str(outcome)
    assert f"rolled back to revision {before['active_revision_id']}" in str(outcome)
    after = svc(emulator)
    assert after["active_revision_id"] != ti.xcoms["revision_id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"


@pytest.mark.parametrize("retries", [0, 1], ids=["last try", "a retry left"])
def test_airflows_deferral_timeout_during_the_analysis_rolls_back_on_the_last_try(emulator: Any, retries: int) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti, store = FakeTI(1), FakeStore()
    context = context_with_events(ti, store)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis, retries=retries)

    defer_to_the_analysis(make, context)  # the triggerer never runs it; Airflow's timeout ends the deferral
    new = ti.xcoms["revision_id"]

    outcome = finish(make, context, lambda task: task.resume_execution(TRIGGER_FAIL_METHOD, AIRFLOW_TIMEOUT, context))

    assert isinstance(outcome, AirflowException), outcome
    message = str(outcome)
    assert "Airflow's deferral timeout ran out" in message
    after = svc(emulator)
    if retries:  # a retry reattaches and analyses again: nothing judged, nothing sent yet
        assert not isinstance(outcome, AirflowFailException), outcome
        assert after["active_revision_id"] == new
        assert emulator.admin.count(PATCH_ROUTE) == 1
        return
    assert isinstance(outcome, AirflowFailException), outcome
    assert f"revision {new} went live but the analysis could not be measured on the task's last try" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    assert after["active_revision_id"] != new and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"


def test_airflows_deferral_timeout_during_a_wave_analysis_rolls_the_wave_back_on_the_last_try(
    fleet: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti, store = FakeTI(1), FakeStore()
    context = make_context(ti, store)
    make = fleet_op(
        True, deployment_names=sorted(ids), canary=1, wave_size=2, max_failures=2, analysis=tracing_analysis()
    )
    method, event = "execute", None
    while True:  # until the canary's analysis is deferred
        try:
            task = make()
            task.execute(context) if event is None else getattr(task, method)(context, event)
        except TaskDeferred as deferred:
            if deferred.method_name == "execute_complete_analysis":
                break
            method, event = deferred.method_name, run_for(rebuilt(deferred.trigger), 30)
            continue
        raise AssertionError("the fleet never deferred its analysis")

    outcome = finish(make, context, lambda task: task.resume_execution(TRIGGER_FAIL_METHOD, AIRFLOW_TIMEOUT, context))

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the canary failed" in str(outcome)
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    row = table["app-0000"]
    assert_rolled_back(emulator, row, before["app-0000"])
    assert row["analysis"]["verdict"] == "inconclusive"
    assert "Airflow's deferral timeout ran out" in row["analysis"]["reason"]
    assert [table[name]["outcome"] for name in ("app-0001", "app-0002")] == [Outcome.NOT_PATCHED] * 2
    assert all(len(revisions(emulator, ids[name])) == 1 for name in ("app-0001", "app-0002"))
