"""The analysis trigger run for real in asyncio, its event, its serialization, and the task-side glue."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import timedelta
from typing import Any

import pytest
from airflow._shared.module_loading import import_string
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider.analysis import Analysis, AnalysisTarget, CallableCheck, TracingProjectCheck
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.tasks.analysis import (
    analysis_event_results,
    analysis_failure_reason,
    analysis_seconds,
    defer_analysis,
)
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from tests.analysis.conftest import live_targets
from tests.analysis.fake_sources import TRACING_KEY, FakeSources

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default", "max_attempts": 2}


async def _events(trigger: DeploymentAnalysisTrigger) -> list[Any]:
    return [event.payload async for event in trigger.run()]


def _trigger(
    analysis: Analysis, targets: list[AnalysisTarget], carry: dict[str, Any] | None = None
) -> DeploymentAnalysisTrigger:
    return DeploymentAnalysisTrigger(
        analysis=analysis.to_json(),
        targets=[target.model_dump(mode="json") for target in targets],
        hook_params=HOOK_PARAMS,
        carry=carry,
    )


def test_the_trigger_measures_every_round_and_yields_one_done_event(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    fake_sources.add_project(good.name, run_count=100, error_rate=0.0)
    fake_sources.add_project(bad.name, run_count=100, error_rate=0.5)
    trigger = _trigger(Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.05), [good, bad], {"n": 1})

    (event,) = asyncio.run(_events(trigger))

    assert set(event) == {"status", "results", "carry"}
    assert (event["status"], event["carry"]) == ("done", {"n": 1})
    results = analysis_event_results(event)
    assert results[good.deployment_id]["verdict"] == "passed"
    assert len(results[good.deployment_id]["measurements"]) == 2
    assert results[bad.deployment_id]["verdict"] == "failed"
    assert analysis_failure_reason(results[good.deployment_id]) is None
    assert (
        analysis_failure_reason(results[bad.deployment_id])
        == "analysis failed: " + results[bad.deployment_id]["reason"]
    )
    json.dumps(event)  # plain JSON, as the triggerer stores it
    assert "test-api-key" not in json.dumps(event)


def test_the_trigger_reports_an_analysis_that_cannot_run(analysis_env: Any, fake_sources: FakeSources) -> None:
    (target,) = live_targets(analysis_env, 1)
    check = TracingProjectCheck(connection_id="no_such_tracing")
    (event,) = asyncio.run(_events(_trigger(Analysis(checks=[check], count=1), [target], {"n": 2})))
    assert event == {
        "status": "error",
        "message": "the analysis could not run: TracingProjectCheck: the Airflow connection 'no_such_tracing' "
        "could not be found (AirflowNotFoundException)",
        "carry": {"n": 2},
    }
    with pytest.raises(AirflowException, match=r"^the analysis could not run: TracingProjectCheck"):
        analysis_event_results(event)


@pytest.mark.parametrize(
    "analysis, targets, words",
    [
        ({"checks": []}, [], "invalid trigger arguments: checks: List should have at least 1 item"),
        ({"checks": [{"kind": "http"}]}, [], "invalid trigger arguments: analysis.count is None"),
        (
            {"checks": [{"kind": "http"}], "count": 1},
            [{"deployment_id": "nope", "name": "x", "revision_id": "nope", "live_since": "2026-01-01T00:00:00Z"}],
            "invalid trigger arguments: deployment_id: Value error, value must be a UUID",
        ),
    ],
)
def test_the_trigger_refuses_bad_arguments_with_an_error_event(
    analysis: dict[str, Any], targets: list[dict[str, Any]], words: str
) -> None:
    trigger = DeploymentAnalysisTrigger(analysis=analysis, targets=targets, hook_params=HOOK_PARAMS)
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "error"
    assert event["message"].startswith(words)


def test_the_trigger_serializes_to_its_public_path_without_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    target = AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-00000000000a",
        name="shop",
        revision_id="00000000-0000-4000-8000-00000000000b",
        live_since="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
    )
    analysis = Analysis(checks=[TracingProjectCheck(connection_id="tracing")], count=3)
    classpath, kwargs = _trigger(analysis, [target], {"landing": {"revision_id": target.revision_id}}).serialize()
    assert classpath == "airflow_provider.triggers.deployment_service.DeploymentAnalysisTrigger"
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert kwargs["hook_params"] == HOOK_PARAMS
    assert Analysis.from_json(kwargs["analysis"]) == analysis
    assert TRACING_KEY not in json.dumps(kwargs) and "password" not in json.dumps(kwargs)


class _Task:
    """What defer_analysis needs of a task (hook, log, defer), the way BaseOperator.defer raises."""

    def __init__(self) -> None:
        self.hook = DeploymentServiceHook("deployment_service_default", max_attempts=2)
        self.log = None

    def defer(
        self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = None, timeout: Any = None
    ) -> Any:
        raise TaskDeferred(trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)


def test_defer_analysis_hands_the_analysis_and_the_carry_to_the_trigger() -> None:
    target = AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-00000000000a",
        name="shop",
        revision_id="00000000-0000-4000-8000-00000000000b",
        live_since="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
    )
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=30, initial_delay_seconds=10)
    deferred_at = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        defer_analysis(_Task(), analysis, [target], method_name="resume", carry={"a": 1})  # type: ignore[arg-type]
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeploymentAnalysisTrigger)
    assert trigger.hook_params == HOOK_PARAMS
    assert trigger.carry == {"a": 1} and deferred.value.kwargs == {"carry": {"a": 1}}
    assert deferred.value.method_name == "resume"
    assert analysis_seconds(analysis) == 10 + 3 * (30 + 60)
    # Sized for one triggerer restart (the rounds run again): the trigger's own deadline, then Airflow's timeout.
    assert (
        deferred_at + 2 * analysis_seconds(analysis) <= trigger.deadline <= time.time() + 2 * analysis_seconds(analysis)
    )
    assert deferred.value.timeout == timedelta(seconds=2 * analysis_seconds(analysis) + 60)

    with pytest.raises(ValueError, match="CallableCheck runs on the worker only"):
        defer_analysis(
            _Task(),  # type: ignore[arg-type]
            Analysis(checks=[CallableCheck(func=bool)], count=1),
            [target],
            method_name="resume",
            carry={},
        )


@pytest.mark.parametrize(
    "event, words",
    [
        ("done", "no event dict, got str"),
        ({"status": "success"}, "status 'success', expected 'done', 'partial' or 'error'"),
        ({"status": "done"}, "no 'results' object"),
        ({"status": "done", "results": {"d": {"verdict": "passed"}}}, "the analysis result of d lacks failing_check"),
        (
            {
                "status": "done",
                "results": {
                    "d": {"verdict": "ok", "failing_check": None, "reason": "", "revision_id": "r", "measurements": []}
                },
            },
            "verdict 'ok', expected one of passed, failed, inconclusive",
        ),
        ({"status": "error"}, "the analysis trigger reported an error"),
    ],
)
def test_a_bad_event_names_what_is_wrong(event: Any, words: str) -> None:
    with pytest.raises(AirflowException, match=re.escape(words)):
        analysis_event_results(event)


def test_an_inconclusive_result_reads_as_a_failure() -> None:
    result = {"verdict": "inconclusive", "failing_check": "c", "reason": "why", "revision_id": "r", "measurements": []}
    assert analysis_failure_reason(result) == "analysis inconclusive (treated as failed): why"  # type: ignore[arg-type]
