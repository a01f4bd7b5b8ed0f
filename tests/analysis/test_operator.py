"""DeploymentAnalysisOperator against the emulator, deferrable and not: a passing and a failing gate, what it
pushes to XCom and what its failure says."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.analysis import Analysis, CallableCheck, HttpCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import DeploymentAnalysisOperator
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from tests.analysis.conftest import CONN_ENV
from tests.conftest import connection_json
from tests.tasks.conftest import FakeTI, make_context, run_deferred, run_trigger


@pytest.fixture
def emulator(analysis_env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The deployment-service connection at the emulator, with the emulator's own tracing endpoints."""
    monkeypatch.setenv(CONN_ENV, connection_json(analysis_env.base_url, analysis_env.api_key, max_attempts=2))
    return analysis_env


def _deployments(emulator: Any, count: int) -> list[dict[str, Any]]:
    found = [d for d in emulator.admin.state()["deployments"] if d["source_config"].get("custom_url")]
    return found[:count]


def _gate(emulator: Any, *, error_rate: float, deferrable: bool, by: str = "names") -> tuple[Any, FakeTI, list[Any]]:
    """Run the gate on two deployments, the second serving ``error_rate``; return (outcome, ti, triggers)."""
    first, second = _deployments(emulator, 2)
    live_since = emulator.admin.now().isoformat()
    emulator.admin.set_behaviour(first["id"], error_rate=0.0)
    emulator.admin.set_behaviour(second["id"], error_rate=error_rate)
    emulator.admin.advance(60)
    analysis = Analysis(checks=[TracingProjectCheck(), HttpCheck()], count=2, interval_seconds=0.05)
    targets = (
        {"deployment_names": [first["name"], second["name"]]}
        if by == "names"
        else {"deployment_ids": [first["id"], second["id"]]}
    )
    ti = FakeTI()

    def make() -> DeploymentAnalysisOperator:
        return DeploymentAnalysisOperator(
            task_id="gate", analysis=analysis, live_since=live_since, deferrable=deferrable, **targets
        )

    try:
        result, triggers = run_deferred(make, make_context(ti))
    except AirflowFailException as err:
        return err, ti, []
    return result, ti, triggers


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_the_gate_passes_healthy_revisions(emulator: Any, deferrable: bool) -> None:
    first, second = _deployments(emulator, 2)
    result, ti, triggers = _gate(emulator, error_rate=0.0, deferrable=deferrable, by="ids")
    assert set(result) == {first["name"], second["name"]}
    assert ti.xcoms["analysis"] == result
    for name in (first["name"], second["name"]):
        assert result[name]["verdict"] == "passed"
        assert result[name]["reason"] == "all 2 check(s) passed over 2 round(s)"
        assert [m["check"] for m in result[name]["measurements"]] == [
            "tracing error_rate",
            "http {custom_url}/health",
        ] * 2
    assert result[first["name"]]["revision_id"] == first["active_revision_id"]
    assert [type(trigger) for trigger in triggers] == ([DeploymentAnalysisTrigger] if deferrable else [])
    assert "test-api-key" not in json.dumps(ti.xcoms)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_the_gate_fails_naming_the_deployment_and_its_check(emulator: Any, deferrable: bool) -> None:
    first, second = _deployments(emulator, 2)
    error, ti, _ = _gate(emulator, error_rate=0.2, deferrable=deferrable)
    assert isinstance(error, AirflowFailException)
    message = str(error)
    assert message.startswith(
        f"the analysis did not pass for 1 of 2 deployment(s): {second['name']!r} (tracing error_rate): analysis "
        "failed: check 'tracing error_rate' failed: 1 failed measurement reached the limit of 1: error_rate 0.200 "
        "over 300 runs"
    )
    pushed = ti.xcoms["analysis"]
    assert pushed[first["name"]]["verdict"] == "passed"
    assert (pushed[second["name"]]["verdict"], pushed[second["name"]]["failing_check"]) == (
        "failed",
        "tracing error_rate",
    )
    assert "test-api-key" not in message + json.dumps(pushed)


def test_a_callable_check_keeps_a_deferrable_gate_on_the_worker(emulator: Any) -> None:
    (first,) = _deployments(emulator, 1)
    seen: list[str] = []

    def serving(deployment: Any) -> bool:
        seen.append(deployment.active_revision_id)
        return True

    analysis = Analysis(checks=[CallableCheck(func=serving)], count=1, interval_seconds=0.01)
    ti = FakeTI()
    result, triggers = run_deferred(
        lambda: DeploymentAnalysisOperator(
            task_id="gate", analysis=analysis, deployment_ids=first["id"], deferrable=True
        ),
        make_context(ti),
    )
    assert triggers == []
    assert result[first["name"]]["verdict"] == "passed"
    assert seen == [first["active_revision_id"]] * 2  # the preflight's measurement, then the round's
    assert [m["round"] for m in result[first["name"]]["baseline"]] == [0]


def test_bad_arguments_fail_at_parse_time_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^analysis\.count is None") as raised:
        DeploymentAnalysisOperator(task_id="gate", analysis=Analysis(checks=[HttpCheck()]), deployment_ids="x")
    # This operator has no bake window: the message must not tell its user to give it bake_seconds.
    assert "set analysis.count" in str(raised.value)
    assert "or bake_seconds" not in str(raised.value) and "the task has no bake_seconds" not in str(raised.value)
    with pytest.raises(ValueError, match="exactly one of deployment_ids and deployment_names"):
        DeploymentAnalysisOperator(task_id="gate", analysis=Analysis(checks=[HttpCheck()], count=1))
    with pytest.raises(TypeError, match=r"analysis must be an airflow_provider\.analysis\.Analysis, got dict"):
        DeploymentAnalysisOperator(task_id="gate", analysis={"checks": []}, deployment_ids="x")  # type: ignore[arg-type]


def test_unknown_or_idle_deployments_fail_before_any_measurement(emulator: Any) -> None:
    analysis = Analysis(checks=[HttpCheck()], count=1, interval_seconds=0.01)
    missing = "00000000-0000-4000-8000-0000000000ee"
    with pytest.raises(AirflowFailException, match=f"deployment_ids: no deployment with id {missing}"):
        DeploymentAnalysisOperator(task_id="gate", analysis=analysis, deployment_ids=[missing]).execute(make_context())
    with pytest.raises(AirflowFailException, match="deployment_ids must be a UUID"):
        DeploymentAnalysisOperator(task_id="gate", analysis=analysis, deployment_ids="nope").execute(make_context())
    (first,) = _deployments(emulator, 1)
    emulator.admin.set_status(first["id"], "UNUSED")
    with pytest.raises(AirflowFailException, match=f"deployment {first['name']!r} serves no revision to analyse"):
        DeploymentAnalysisOperator(task_id="gate", analysis=analysis, deployment_names=first["name"]).execute(
            make_context()
        )


@pytest.mark.parametrize("merged", [True, False], ids=["kwargs merged (triggerer)", "kwargs dropped (dag.test)"])
def test_a_deployment_without_a_result_in_the_event_is_inconclusive_never_passed(emulator: Any, merged: bool) -> None:
    first, second = _deployments(emulator, 2)
    for deployment in (first, second):
        emulator.admin.set_behaviour(deployment["id"], error_rate=0.0)
    analysis = Analysis(checks=[HttpCheck()], count=1, interval_seconds=0.05)

    def make() -> DeploymentAnalysisOperator:
        return DeploymentAnalysisOperator(
            task_id="gate", analysis=analysis, deployment_ids=[first["id"], second["id"]], deferrable=True
        )

    with pytest.raises(TaskDeferred) as deferred:
        make().execute(make_context())
    _path, kwargs = deferred.value.trigger.serialize()
    event = run_trigger(DeploymentAnalysisTrigger(**json.loads(json.dumps(kwargs))))
    assert set(event["results"]) == {first["id"], second["id"]}
    del event["results"][second["id"]]  # an event that judged only one of the two (a lost or partial result)
    ti = FakeTI()

    with pytest.raises(AirflowFailException) as failed:
        make().execute_complete(make_context(ti), event, **(dict(deferred.value.kwargs or {}) if merged else {}))

    message = str(failed.value)
    assert "did not pass for 1 of 2 deployment(s)" in message
    assert f"{second['name']!r} (None): analysis inconclusive (treated as failed): no analysis result" in message
    assert first["name"] not in message
    shown = ti.xcoms["analysis"]
    assert shown[first["name"]]["verdict"] == "passed"
    assert shown[second["name"]]["verdict"] == "inconclusive"
    assert shown[second["name"]]["revision_id"] == second["active_revision_id"]
