"""The patch task killed while it judges its live revision (issue 39): the revision is rolled back, never left
serving unjudged.

On the worker the kill goes through Airflow's own code: ``_run_execute_callable`` (the task runner's
``execution_timeout``, which calls ``on_kill`` and re-raises ``AirflowTaskTimeout``), and a real ``SIGTERM`` handled
as the task runner's handler does (``on_kill``, then the task goes on until the supervisor's ``SIGKILL``). Deferred,
Airflow's timeout ends the deferral and resumes the task with its deferral timeout. Each test asserts on the
emulator's deployment: the old build serves again, and it was rolled back once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTimeout
from airflow.sdk.execution_time.task_runner import _run_execute_callable

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.operators.deployment_service import FleetRolloutOperator, PatchDeploymentOperator
from airflow_provider.tasks.deferral import TRIGGER_FAIL_METHOD, TRIGGER_TIMEOUT
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY
from tests.tasks.conftest import CONN_ENV, PATCH_ROUTE, FakeStore, FakeTI, connection_json
from tests.tasks.test_analysis_deferral_timeout import defer_to_the_analysis, finish
from tests.tasks.test_patch_analysis import (
    NEW_IMAGE,
    OLD_IMAGE,
    SEED,
    analysis_of,
    context_with_events,
    patch_op,
    set_next_revision_behaviour,
    svc,
)

ROUNDS = 12
INTERVAL = 0.3
"""A healthy revision's analysis of 3.6 s: it would pass; the kill comes in its middle."""


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection (its tracing base URL in the extra)."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def healthy_analysis() -> Any:
    return analysis_of(
        TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=ROUNDS, interval_seconds=INTERVAL
    )


def serves_old_build(emulator: Any, timeout: float = 15.0) -> dict[str, Any]:
    """The deployment once the old build serves again (READY), or fail saying what serves."""
    deadline = time.monotonic() + timeout
    while True:
        current = svc(emulator)
        image = current["source_revision_config"]["image_uri"]
        settled = current["active_revision_id"] and current["active_revision_id"] == current["latest_revision_id"]
        if image == OLD_IMAGE and current["status"] == "READY" and settled:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"the old build does not serve: {image}, {current['status']}")
        time.sleep(0.05)


def analysing(emulator: Any) -> Callable[[], bool]:
    """Whether the new revision is live (its analysis under way)."""
    return lambda: (
        svc(emulator)["source_revision_config"]["image_uri"] == NEW_IMAGE and svc(emulator)["status"] == "READY"
    )


@pytest.fixture
def sigterm_calls_on_kill() -> Iterator[Callable[[Any], None]]:
    """Install the task runner's ``SIGTERM`` handler (``ti.task.on_kill()``, nothing else) for a task."""
    held = signal.getsignal(signal.SIGTERM)

    def install(task: Any) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: task.on_kill())

    yield install
    signal.signal(signal.SIGTERM, held)


def test_an_execution_timeout_shorter_than_the_judging_is_refused_when_the_dag_is_parsed() -> None:
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3, interval_seconds=30)
    with pytest.raises(ValueError) as refused:
        PatchDeploymentOperator(
            task_id="patch",
            deployment_name="svc",
            image_uri=NEW_IMAGE,
            analysis=analysis,
            timeout=60,
            execution_timeout=timedelta(seconds=20),
        )
    message = str(refused.value)
    assert "execution_timeout=20 s is shorter than" in message
    assert "150 s = timeout 60 s + analysis 90 s" in message
    PatchDeploymentOperator(  # long enough: accepted
        task_id="patch",
        deployment_name="svc",
        image_uri=NEW_IMAGE,
        analysis=analysis,
        timeout=60,
        execution_timeout=timedelta(seconds=150),
    )
    PatchDeploymentOperator(  # judges nothing, rolls nothing back: a kill leaves nothing unjudged
        task_id="plain", deployment_name="svc", image_uri=NEW_IMAGE, execution_timeout=timedelta(seconds=20)
    )
    with pytest.raises(ValueError, match=r"610 s = timeout 10 s \+ bake_seconds 600 s"):
        FleetRolloutOperator(
            task_id="fleet",
            deployment_names=["a", "b"],
            image_uri=NEW_IMAGE,
            timeout=10,
            bake_seconds=600,
            execution_timeout=timedelta(seconds=60),
        )


def test_killed_by_execution_timeout_mid_analysis_on_the_worker_rolls_back_and_the_retry_waits(emulator: Any) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti, store = FakeTI(1), FakeStore()
    context = context_with_events(ti, store)
    task = patch_op(emulator, deferrable=False, analysis=healthy_analysis(), retries=1)
    task.execution_timeout = timedelta(seconds=3)  # the kill that still comes (a rollout slower than usual)

    with pytest.raises(AirflowTaskTimeout):
        _run_execute_callable(context, task.execute, task)  # Airflow's own timeout: on_kill, then re-raised

    new = ti.xcoms["revision_id"]
    record = store.get(TASK_STATE_KEY)
    assert record["verdict"]["step"] == "unjudged"
    assert "killed while judging" in record["verdict"]["reason"]
    assert "execution_timeout of 3 s ran out" in record["verdict"]["reason"]
    assert record["rollback"]["phase"] == "sent"
    after = serves_old_build(emulator)
    assert after["active_revision_id"] == record["rollback"]["revision_id"] != new

    retry = finish(
        lambda: patch_op(emulator, deferrable=False, analysis=healthy_analysis(), retries=1),
        context_with_events(FakeTI(2), store),
        lambda task: task.execute(context_with_events(FakeTI(2), store)),
    )
    assert isinstance(retry, AirflowFailException), retry
    assert f"rolled back to revision {before['active_revision_id']}" in str(retry)
    assert serves_old_build(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert emulator.admin.count(PATCH_ROUTE) == 2  # the patch and on_kill's rollback: the retry sent neither again


def test_marked_failed_mid_analysis_on_the_worker_rolls_back_once(
    emulator: Any, sigterm_calls_on_kill: Callable[[Any], None]
) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti, store = FakeTI(1), FakeStore()
    context = context_with_events(ti, store)
    task = patch_op(emulator, deferrable=False, analysis=healthy_analysis())
    sigterm_calls_on_kill(task)
    live = analysing(emulator)

    ended = threading.Event()

    def mark_failed_once_analysing() -> None:
        deadline = time.monotonic() + 20
        while not live() and time.monotonic() < deadline and not ended.is_set():
            time.sleep(0.05)
        if not ended.wait(4 * INTERVAL):  # a few rounds in; never once the task ended (the handler is gone then)
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=mark_failed_once_analysing, daemon=True)
    killer.start()
    try:
        with pytest.raises(AirflowFailException) as stopped:  # the task goes on after SIGTERM, until the SIGKILL
            task.execute(context)
    finally:
        ended.set()
        killer.join(timeout=5)

    assert "killed while judging" in str(stopped.value)
    assert "rolled back to revision" in str(stopped.value)
    record = store.get(TASK_STATE_KEY)
    assert "Airflow stopped it" in record["verdict"]["reason"]
    assert record["rollback"]["phase"] == "sent"
    serves_old_build(emulator)
    # the patch and one rollback: the analysis, which saw the revision leave, neither landed nor rolled back again
    assert emulator.admin.count(PATCH_ROUTE) == 2


@pytest.mark.parametrize("retries", [0, 1], ids=["last try", "a retry left"])
def test_an_execution_timeout_while_the_analysis_is_deferred_is_judged_by_the_next_try_or_rolled_back(
    emulator: Any, retries: int
) -> None:
    """Deferred, Airflow bounds the deferral by ``execution_timeout`` and resumes the task with its deferral
    timeout: a retry reattaches and judges the revision again; the last try rolls it back."""
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti, store = FakeTI(1), FakeStore()
    context = context_with_events(ti, store)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=healthy_analysis(), retries=retries)

    defer_to_the_analysis(make, context)  # the trigger never fires in time: Airflow's timeout ends the deferral
    new = ti.xcoms["revision_id"]
    outcome = finish(
        make, context, lambda task: task.resume_execution(TRIGGER_FAIL_METHOD, {"error": TRIGGER_TIMEOUT}, context)
    )

    assert isinstance(outcome, AirflowException), outcome
    if retries:
        assert not isinstance(outcome, AirflowFailException)
        assert svc(emulator)["active_revision_id"] == new  # the retry judges it
        return
    assert isinstance(outcome, AirflowFailException), outcome
    assert "rolled back to revision" in str(outcome)
    assert serves_old_build(emulator)["active_revision_id"] != new
