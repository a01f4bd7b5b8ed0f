"""``PatchDeploymentOperator(analysis=...)`` across tries, against the emulator: the analysis's sources are
checked only on a fresh start (a retry goes on with the patch or the rollback an earlier try recorded, whatever
the analysis's connection now says); an analysis that can never pass is refused before anything is patched;
an analysis that could not be measured at all fails the try while a retry is left and, on the last try, is
inconclusive: the revision is rolled back.

Assertions are on the emulator's real state (revisions, the build serving, its request log) and on what the
user sees (the failure's class and text, the XComs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider.analysis import HttpCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY
from airflow_provider.triggers.deployment_service import DeploymentAnalysisTrigger
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json, run_trigger
from tests.tasks.test_patch_analysis import (
    NEW_IMAGE,
    OLD_IMAGE,
    SEED,
    analysis_of,
    context_with_events,
    health_check,
    patch_op,
    set_next_revision_behaviour,
    svc,
)

PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"
BAD_ERROR_RATE = 0.6


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` (as in :mod:`tests.tasks.test_patch_analysis`) behind the default
    connection (its tracing base URL in the extra)."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def break_tracing_connection(monkeypatch: pytest.MonkeyPatch, emulator: Any) -> None:
    """The default connection loses its extra ``tracing_base_url``: a tracing check can no longer run."""
    bare = {"conn_type": "deployment_service", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv(CONN_ENV, json.dumps(bare))


def drive(
    make_task: Callable[[], PatchDeploymentOperator],
    context: dict[str, Any],
    *,
    merged: bool = True,
    before_trigger: Callable[[Any], None] = lambda trigger: None,
    stop_before: str | None = None,
) -> Any:
    """Run one try to its end (the result, or the exception raised), every deferral through its trigger rebuilt
    from its JSON kwargs, each resume on a fresh operator (the defer kwargs merged, or dropped as ``dag.test()``
    does). ``before_trigger`` sees each trigger before it runs; ``stop_before``: the try ends (the worker dies)
    when the task defers to resume in that method, its trigger never run."""
    method, arguments = "execute", dict[str, Any]()
    while True:
        try:
            return getattr(make_task(), method)(context, **arguments)
        except TaskDeferred as deferred:
            if deferred.method_name == stop_before:
                return deferred
            _classpath, kwargs = deferred.trigger.serialize()
            trigger = type(deferred.trigger)(**json.loads(json.dumps(kwargs)))
            before_trigger(trigger)
            event = run_trigger(trigger, timeout=60)
            method = deferred.method_name
            arguments = {"event": event, **(dict(deferred.kwargs or {}) if merged else {})}
        except Exception as err:
            return err


# ------------------------------------------------------------------------------- P1-3: fresh start only
@pytest.mark.parametrize("merged", [True, False], ids=["kwargs merged (triggerer)", "kwargs dropped (dag.test)"])
def test_a_retry_of_a_recorded_rollback_resumes_it_though_the_analysis_connection_broke(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, merged: bool
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=BAD_ERROR_RATE)
    store = FakeStore()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis, retries=2)

    first = drive(make, context_with_events(FakeTI(1), store), merged=merged, stop_before="execute_rollback_complete")
    assert isinstance(first, TaskDeferred), first  # the rollback is sent and recorded; the worker dies here
    assert store.data[TASK_STATE_KEY]["rollback"]["phase"] == "sent"
    patches = emulator.admin.count(PATCH_ROUTE)
    break_tracing_connection(monkeypatch, emulator)  # the analysis could not even start now

    ti = FakeTI(2)
    outcome = drive(make, context_with_events(ti, store), merged=merged)

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "nothing was patched" not in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    assert "except: secrets TOKEN" in message  # what no rollback undoes, said as before
    assert emulator.admin.count(PATCH_ROUTE) == patches  # the retry sent no patch, no second rollback
    after = svc(emulator)
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the bad revision and the one rollback
    assert after["active_revision_id"] == after["revisions"][-1]["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE


def test_a_retry_of_a_recorded_patch_reattaches_though_the_analysis_connection_broke(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    store = FakeStore()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis, retries=1)

    first = drive(make, context_with_events(FakeTI(1), store), stop_before="execute_complete")
    assert isinstance(first, TaskDeferred), first  # patched and recorded; the worker dies while it waits
    new = store.data[TASK_STATE_KEY]["revision_id"]
    break_tracing_connection(monkeypatch, emulator)

    ti = FakeTI(2)  # the last try: the analysis cannot be measured, so the revision is inconclusive
    outcome = drive(make, context_with_events(ti, store))

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "nothing was patched" not in message
    assert f"revision {new} went live but the analysis could not be measured" in message
    assert "TracingProjectCheck" in message and "tracing_base_url" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    assert emulator.admin.count(PATCH_ROUTE) == 2  # the patch (once) and the rollback
    after = svc(emulator)
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE and after["status"] == "READY"
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"


def test_a_connection_lookup_that_fails_on_a_fresh_start_is_retried_not_failed_for_good(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)

    async def backend_down(conn_id: str) -> Any:
        raise ConnectionError("the secrets backend did not answer")

    monkeypatch.setattr(BaseHook, "aget_connection", staticmethod(backend_down))
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    outcome = drive(lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(FakeTI()))

    assert isinstance(outcome, AirflowException) and not isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "could not be looked up (ConnectionError)" in message and "nothing was patched" in message
    assert "did not answer" not in message  # the backend's own text may name where secrets live
    assert emulator.admin.count(PATCH_ROUTE) == 0
    assert svc(emulator)["revisions"] == before["revisions"]


# ------------------------------------------------------------------------------- P2-4: no custom_url
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_an_http_check_on_custom_url_is_refused_before_patching_a_deployment_without_one(
    emulator: Any, deferrable: bool
) -> None:
    before = svc(emulator)
    assert not before["source_config"].get("custom_url")  # external_docker: the user sets it, and did not
    analysis = analysis_of(HttpCheck(name="health"), health_check(emulator), count=2)

    outcome = drive(lambda: patch_op(emulator, deferrable=deferrable, analysis=analysis), context_with_events(FakeTI()))

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis can never pass, nothing was patched" in message
    assert "HttpCheck 'health' GETs '{custom_url}/health'" in message
    assert f"'svc' ({before['id']}) has no custom_url" in message
    assert "GETs '" + health_check(emulator).url not in message  # the check without {custom_url} is fine
    assert emulator.admin.count(PATCH_ROUTE) == 0
    assert svc(emulator)["revisions"] == before["revisions"]


# ------------------------------------------------------------------------------- P2-5: not measured
@pytest.mark.parametrize("merged", [True, False], ids=["kwargs merged (triggerer)", "kwargs dropped (dag.test)"])
def test_an_analysis_that_cannot_be_measured_retries_then_rolls_back_on_the_last_try(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, merged: bool
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    store = FakeStore()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)
    seen: list[str] = []

    def break_before_the_analysis(trigger: Any) -> None:
        seen.append(type(trigger).__name__)
        if isinstance(trigger, DeploymentAnalysisTrigger):  # the sources were fine when the task started
            break_tracing_connection(monkeypatch, emulator)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis, retries=1)

    first_ti = FakeTI(1)
    first = drive(make, context_with_events(first_ti, store), merged=merged, before_trigger=break_before_the_analysis)

    assert type(first) is AirflowException, first  # retryable: a retry is left
    new = first_ti.xcoms["revision_id"]
    assert f"the analysis of revision {new} could not be measured" in str(first)
    assert "a retry reattaches to it and analyses it again" in str(first)
    assert svc(emulator)["active_revision_id"] == new  # still serving, not judged yet
    assert "DeploymentAnalysisTrigger" in seen

    second_ti = FakeTI(2)  # the last try (retries=1): reattaches, analyses again, cannot measure: inconclusive
    second = drive(make, context_with_events(second_ti, store), merged=merged)

    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"revision {new} went live but the analysis could not be measured on the task's last try" in message
    assert "inconclusive (counted as failed)" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    assert emulator.admin.count(PATCH_ROUTE) == 2  # one patch, one rollback
    after = svc(emulator)
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert after["active_revision_id"] == after["revisions"][-1]["id"] != new and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    result = second_ti.xcoms["analysis"]
    assert result["verdict"] == "inconclusive" and result["revision_id"] == new and result["measurements"] == []


def test_an_analysis_that_cannot_be_measured_without_retries_rolls_back_at_once(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)

    def break_before_the_analysis(trigger: Any) -> None:
        if isinstance(trigger, DeploymentAnalysisTrigger):
            break_tracing_connection(monkeypatch, emulator)

    outcome = drive(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis),
        context_with_events(FakeTI(1)),
        before_trigger=break_before_the_analysis,
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis could not be measured on the task's last try" in str(outcome)
    assert f"rolled back to revision {before['active_revision_id']}" in str(outcome)
    after = svc(emulator)
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE and after["status"] == "READY"
    assert NEW_IMAGE not in json.dumps(after["source_revision_config"])


def test_an_analysis_trigger_out_of_time_reports_it_and_the_last_try_rolls_back(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger ends its rounds at its own deadline (before Airflow's deferral timeout, which would fail the
    try without a verdict) with an error event: on the last try, the revision is inconclusive, rolled back."""
    from airflow_provider.triggers import analysis as analysis_trigger

    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    monkeypatch.setattr(analysis_trigger, "analysis_seconds", lambda analysis: 0.2)  # 3 rounds 0.3 s apart: late
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3)
    ti = FakeTI(1)

    outcome = drive(lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(ti))

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis could not be measured on the task's last try" in message
    assert "the analysis did not finish within 0.2 s" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    after = svc(emulator)
    assert after["active_revision_id"] != ti.xcoms["revision_id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"
