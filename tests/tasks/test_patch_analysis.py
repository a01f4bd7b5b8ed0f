"""``PatchDeploymentOperator(analysis=...)`` against the emulator (issue 24): once the revision is live and
``verify`` passed, the analysis judges it by what the application does; a failed or inconclusive verdict
rolls it back exactly as a failed ``verify`` does (issue 22's guarantees), a passed one lands it.

The emulator runs in real time (short builds), its apps serving the traffic their behaviour says (error
rate, health status) from the moment a revision goes live; the tracing project and the health endpoint
answer from that traffic. Each deferrable run is driven as the triggerer does (the trigger rebuilt from its
JSON kwargs, the resume on a fresh operator), with the ``defer()`` kwargs merged and dropped (``dag.test()``
in Airflow 3.3). Assertions are on the emulator's real state and on what the user sees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider.analysis import Analysis, CallableCheck, HttpCheck, MetricQueryCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.triggers.deployment_service import DeploymentAnalysisTrigger
from tests.tasks.conftest import CONN_ENV, SECRET, FakeStore, FakeTI, connection_json, run_trigger, scan_for_secret

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
RESOURCE_SPEC = {"cpu": 1, "cpu_limit": 2, "memory_mb": 512, "memory_limit_mb": 1024}
BIGGER_SPEC = {"cpu": 2, "memory_mb": 1024}
SEED = {
    "deployments": [
        {
            "name": "svc",
            "source": "external_docker",
            "source_config": {"resource_spec": dict(RESOURCE_SPEC)},
            "source_revision_config": {"image_uri": OLD_IMAGE},
            "secrets": [{"name": "TOKEN", "value": "sv-Before-Analysis-1c4e"}],
        }
    ]
}
TRAFFIC = 200.0
"""Requests per second each app serves (emulated): 20 runs, the tracing check's minimum, in 0.1 s."""
RESUMES = pytest.mark.parametrize(
    "merged", [True, False], ids=["kwargs merged (triggerer)", "kwargs dropped (dag.test)"]
)
PATHS = pytest.mark.parametrize(
    "path", ["worker", "triggerer", "dag.test"], ids=["worker", "deferred, kwargs merged", "deferred, kwargs dropped"]
)


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection (its tracing base URL in the extra)."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02),
    )
    return server


def svc(emulator: Any) -> dict[str, Any]:
    return dict(emulator.state.find_deployment("svc"))


def health_check(emulator: Any) -> HttpCheck:
    """The app's health endpoint (an external_docker deployment shows no custom_url of its own)."""
    return HttpCheck(url=f"{emulator.root_url}/apps/{{deployment_id}}/health", name="app health")


def analysis_of(*checks: Any, count: int | None = 3, **options: Any) -> Analysis:
    settings: dict[str, Any] = {"interval_seconds": 0.3, "count": count, **options}
    return Analysis(checks=list(checks), **settings)


def patch_op(emulator: Any, *, deferrable: bool, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "deployment_id": svc(emulator)["id"],
        "image_uri": NEW_IMAGE,
        "source_config": {"resource_spec": BIGGER_SPEC},
        "secrets": {"TOKEN": SECRET},
        "wait_for_rollout": True,
        "rollback_on_failure": True,
        "deferrable": deferrable,
        "poll_interval": 0.05,
        "timeout": 30,
        **kwargs,
    }
    return PatchDeploymentOperator(**options)


def context_with_events(ti: FakeTI, store: FakeStore | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"ti": ti, "outlet_events": OutletEventAccessors()}
    if store is not None:
        context["task_state_store"] = store
    return context


def emitted(context: dict[str, Any]) -> list[dict[str, Any]]:
    """The asset events the task emitted (through its outlets or the provider's alias)."""
    found = []
    for key, accessor in context["outlet_events"]._dict.items():
        if hasattr(key, "uri") and accessor.extra:
            found.append(dict(accessor.extra))
        for event in accessor.asset_alias_events:
            found.append(dict(event.extra))
    return found


def run(
    make_task: Callable[[], PatchDeploymentOperator], context: dict[str, Any], path: str
) -> tuple[Any, list[tuple[str, Any]]]:
    """Run the task to its end on ``path``: on the worker, or deferred with each trigger rebuilt from its
    JSON kwargs (checked for secrets) and each resume on a fresh operator, the defer kwargs merged
    (``triggerer``) or dropped (``dag.test``). Returns the result or the exception raised at the end, and
    ``(method resumed, trigger)`` of every deferral."""
    deferrals: list[tuple[str, Any]] = []
    try:
        return make_task().execute(context), deferrals
    except TaskDeferred as deferred:
        pending = deferred
    except Exception as err:
        return err, deferrals
    while True:
        _classpath, trigger_kwargs = pending.trigger.serialize()
        trigger_kwargs = json.loads(json.dumps(trigger_kwargs))
        scan_for_secret(trigger_kwargs, pending.kwargs or {})
        deferrals.append((pending.method_name, pending.trigger))
        event = run_trigger(type(pending.trigger)(**trigger_kwargs), timeout=60)
        resume_kwargs = dict(pending.kwargs or {}) if path == "triggerer" else {}
        try:
            return getattr(make_task(), pending.method_name)(context, event, **resume_kwargs), deferrals
        except TaskDeferred as deferred:
            pending = deferred
        except Exception as err:
            return err, deferrals


def set_next_revision_behaviour(emulator: Any, **behaviour: Any) -> None:
    """What the next revision of ``svc`` does once live (and every revision before it: healthy traffic)."""
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", **{"requests_per_second": TRAFFIC, **behaviour})
    # Traffic counts from when it is set: let the serving revision serve the preflight's minimum runs first (twice
    # over), or a fast machine measures it 75 ms later, at 15 runs, and the preflight refuses the rollout.
    time.sleep(2 * 20 / TRAFFIC)


# ------------------------------------------------------------------------------------------ passed
@PATHS
def test_a_passing_analysis_lands_the_revision_and_reports_the_verdict(emulator: Any, path: str) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    context = context_with_events(ti)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), health_check(emulator))

    outcome, deferrals = run(lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis), context, path)

    assert isinstance(outcome, dict), outcome
    after = svc(emulator)
    new = ti.xcoms["revision_id"]
    assert new != before["active_revision_id"]
    assert after["active_revision_id"] == new and after["status"] == "READY"
    assert outcome["active_revision_id"] == new
    if path != "worker":
        assert [method for method, _ in deferrals][-1] == "execute_analysis_complete"
        assert any(isinstance(trigger, DeploymentAnalysisTrigger) for _, trigger in deferrals)
    result = ti.xcoms["analysis"]
    assert result["verdict"] == "passed" and result["failing_check"] is None
    assert result["revision_id"] == new
    checks = {measurement["check"] for measurement in result["measurements"]}
    assert checks == {"tracing error_rate", "app health"}
    assert {measurement["round"] for measurement in result["measurements"]} == {1, 2, 3}
    (event,) = emitted(context)
    assert event["outcome"] == "rolled_out" and event["revision_id"] == new
    assert event["analysis"]["verdict"] == "passed"
    assert event["analysis"]["measurements_total"] == len(result["measurements"])


# ------------------------------------------------------------------------------------------ failed
@PATHS
def test_an_error_rate_rising_after_going_live_rolls_back_build_and_resource_spec(
    emulator: Any, path: str, task_logs: Callable[[], str]
) -> None:
    before = svc(emulator)
    revisions_before = len(before["revisions"])
    # READY and healthy at first; then 60 % of its runs fail: the tracing project shows it, not the service.
    set_next_revision_behaviour(emulator, error_rate=0.0, after_seconds=0.2, then={"error_rate": 0.6})
    ti, store = FakeTI(), FakeStore()
    analysis = analysis_of(
        TracingProjectCheck(metric="error_rate", condition="< 0.05"), health_check(emulator), count=6
    )

    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis),
        context_with_events(ti, store),
        path,
    )

    bad = ti.xcoms["revision_id"]
    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert f"revision {bad} went live but the analysis failed: " in message
    assert "tracing error_rate" in message and "< 0.05" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    if path != "worker":
        assert [method for method, _ in deferrals][-2:] == ["execute_analysis_complete", "execute_rollback_complete"]
    after = svc(emulator)
    assert len(after["revisions"]) == revisions_before + 2  # the bad revision and the rollback's
    assert after["active_revision_id"] != bad and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None} == (
        RESOURCE_SPEC
    )
    result = ti.xcoms["analysis"]
    assert result["verdict"] == "failed" and result["failing_check"] == "tracing error_rate"
    failed = [m for m in result["measurements"] if m["verdict"] == "failed"]
    assert failed and failed[-1]["value"] > 0.05
    assert SECRET not in message and SECRET not in task_logs()


def test_a_failing_health_check_without_rollback_fails_naming_it(emulator: Any) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, health_status=503)
    ti = FakeTI()
    analysis = analysis_of(health_check(emulator), count=2)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis, rollback_on_failure=False),
        context_with_events(ti),
        "dag.test",
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis failed: " in str(outcome) and "app health" in str(outcome) and "503" in str(outcome)
    assert "not rolling back (rollback_on_failure is off" in str(outcome)
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"] != before["active_revision_id"]


# ------------------------------------------------------------------------------------------ inconclusive
@RESUMES
def test_an_inconclusive_analysis_rolls_back_saying_inconclusive(emulator: Any, merged: bool) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    # The tracing service answers 503 to every stats request: no measurement can be taken. (With the preflight
    # on, the rollout would be refused before the patch: tests/tasks/test_preflight.py.)
    emulator.admin.add_fault(kind="status", method="POST", path="/tracing/runs/stats", status_code=503, count=None)
    ti = FakeTI()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3, preflight=False)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis),
        context_with_events(ti),
        "triggerer" if merged else "dag.test",
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "went live but the analysis was inconclusive (counted as failed): " in str(outcome)
    assert "tracing error_rate" in str(outcome)
    assert f"rolled back to revision {before['active_revision_id']}" in str(outcome)
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"
    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE


# ------------------------------------------------------------------------------------------ the bake
def test_an_analysis_without_count_fills_the_bake_and_is_the_bake(emulator: Any) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    analysis = analysis_of(health_check(emulator), count=None, interval_seconds=0.25)

    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis, bake_seconds=1.0),
        context_with_events(ti),
        "dag.test",
    )

    assert isinstance(outcome, dict), outcome
    assert [method for method, _ in deferrals] == ["execute_complete", "execute_analysis_complete"]  # no bake
    assert {m["round"] for m in ti.xcoms["analysis"]["measurements"]} == {1, 2, 3, 4}  # 1.0 s / 0.25 s


def test_an_analysis_with_a_count_is_followed_by_the_bake(emulator: Any) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    context = context_with_events(ti)
    analysis = analysis_of(health_check(emulator), count=1)

    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis, bake_seconds=0.3), context, "dag.test"
    )

    assert isinstance(outcome, dict), outcome
    assert [method for method, _ in deferrals] == [
        "execute_complete",
        "execute_analysis_complete",
        "execute_bake_complete",
    ]
    (event,) = emitted(context)
    assert event["analysis"]["verdict"] == "passed"  # carried through the bake's deferral


# ------------------------------------------------------------------------------------------ on the worker
def test_a_callable_check_runs_on_the_worker_even_when_deferrable(emulator: Any, task_logs: Callable[[], str]) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    seen: list[str | None] = []

    def error_budget_left(deployment: Any) -> bool:
        seen.append(deployment.active_revision_id)
        return False

    ti = FakeTI()
    analysis = analysis_of(CallableCheck(func=error_budget_left, name="error budget"), count=2)

    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(ti), "dag.test"
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis failed: " in str(outcome) and "error budget" in str(outcome)
    assert not any(isinstance(trigger, DeploymentAnalysisTrigger) for _, trigger in deferrals)
    # The preflight measured it once on the revision serving before the patch (a failed baseline is only
    # logged), then every round on the new revision.
    assert seen[0] == ti.xcoms["previous_active_revision_id"]
    assert len(seen) > 1 and set(seen[1:]) == {ti.xcoms["revision_id"]}
    assert "CallableCheck" in task_logs()


# ------------------------------------------------------------------------------------------ resumes
def test_an_analysis_resume_without_the_landing_fails_to_retry_never_lands(emulator: Any) -> None:
    """A resume that gets the landing neither in its kwargs nor in the event (nor in a store) cannot roll
    back: it raises a retryable error (the retry reattaches and analyses again), never success."""
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    context = context_with_events(ti)
    analysis = analysis_of(health_check(emulator), count=1)
    make = lambda: patch_op(emulator, deferrable=True, analysis=analysis)  # noqa: E731
    pending: Any = None
    try:
        make().execute(context)
    except TaskDeferred as deferred:
        pending = deferred
    while pending.method_name != "execute_analysis_complete":
        event = run_trigger(type(pending.trigger)(**pending.trigger.serialize()[1]))
        try:
            getattr(make(), pending.method_name)(context, event)
        except TaskDeferred as deferred:
            pending = deferred
    event = run_trigger(type(pending.trigger)(**pending.trigger.serialize()[1]))
    event.pop("carry", None)

    with pytest.raises(AirflowException) as raised:
        make().execute_analysis_complete(context, event)

    assert not isinstance(raised.value, AirflowFailException)
    assert "resumed without" in str(raised.value) and "landing" in str(raised.value)


def test_the_analysis_trigger_carries_the_landing_and_no_secret(emulator: Any) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    analysis = analysis_of(TracingProjectCheck(), health_check(emulator), count=1)
    outcome, deferrals = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(ti), "dag.test"
    )

    assert isinstance(outcome, dict), outcome
    (trigger,) = [trigger for _, trigger in deferrals if isinstance(trigger, DeploymentAnalysisTrigger)]
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider.triggers.deployment_service.DeploymentAnalysisTrigger"
    assert kwargs["carry"]["landing"]["revision_id"] == ti.xcoms["revision_id"]
    text = json.dumps(kwargs)
    assert SECRET not in text and emulator.api_key not in text


# ------------------------------------------------------------------------------------------ bad input
def test_count_none_without_bake_seconds_fails_when_the_dag_is_parsed_naming_analysis_count(emulator: Any) -> None:
    with pytest.raises(ValueError, match=r"analysis\.count"):
        patch_op(emulator, deferrable=False, analysis=analysis_of(health_check(emulator), count=None))
    assert len(svc(emulator)["revisions"]) == 1


def test_an_analysis_interval_longer_than_the_bake_is_refused_when_the_dag_is_parsed(emulator: Any) -> None:
    """Issue 33: one 20 s round for an 8 s bake was accepted; nothing is sent."""
    slow = Analysis(checks=[health_check(emulator)], interval_seconds=20)
    with pytest.raises(ValueError, match=r"analysis\.interval_seconds \(20 s\).*longer than the bake \(8 s\)"):
        patch_op(emulator, deferrable=False, analysis=slow, bake_seconds=8)
    assert len(svc(emulator)["revisions"]) == 1 and emulator.state.counters == {}


def test_an_analysis_needs_wait_for_rollout_and_an_analysis_object(emulator: Any) -> None:
    with pytest.raises(ValueError, match="need wait_for_rollout=True"):
        patch_op(
            emulator,
            deferrable=False,
            analysis=analysis_of(health_check(emulator)),
            wait_for_rollout=False,
            rollback_on_failure=False,
        )
    with pytest.raises(ValueError, match=r"analysis must be an airflow_provider\.analysis\.Analysis, got dict"):
        patch_op(emulator, deferrable=False, analysis={"checks": []})


@pytest.mark.parametrize(
    ("check", "named"),
    [
        (TracingProjectCheck(), "tracing_base_url"),
        (MetricQueryCheck(query="sum(up)", condition="> 0", connection_id="prometheus_nowhere"), "prometheus_nowhere"),
    ],
    ids=["tracing base URL missing", "Prometheus connection missing"],
)
def test_a_source_the_analysis_cannot_reach_fails_before_anything_is_patched(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, check: Any, named: str
) -> None:
    bare = {"conn_type": "deployment_service", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv(CONN_ENV, json.dumps(bare))  # no extra tracing_base_url
    before = svc(emulator)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis_of(check)),
        context_with_events(FakeTI()),
        "worker",
    )

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis cannot run, nothing was patched" in str(outcome) and named in str(outcome)
    assert emulator.api_key not in str(outcome)
    assert svc(emulator)["revisions"] == before["revisions"]
    assert emulator.admin.count("PATCH /v2/deployments/{deployment_id}") == 0
