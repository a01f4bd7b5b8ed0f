"""The round loop as it goes (``analyse``): each verdict handed over at the end of the round that reached it
while the others are analysed on, and an analysis stopped there going on later from its state (the next
round, the rounds' schedule, no round measured twice), in the triggerer (a ``partial`` event, then a new
trigger) as on the worker. Against the emulator (still-serving check) and the fake tracing service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_provider.analysis import Analysis, AnalysisTarget, TracingProjectCheck, run_analysis
from airflow_provider.analysis.definitions import analysis_seconds
from airflow_provider.analysis.judge import AnalysisState
from airflow_provider.analysis.measuring.run import RoundVerdicts, analyse
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from tests.analysis.conftest import live_targets
from tests.analysis.fake_sources import FakeSources

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
LOG = logging.getLogger("tests.analysis")
STATS = ("POST", "/tracing/runs/stats")


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def _steps(
    analysis: Analysis,
    targets: list[AnalysisTarget],
    *,
    resume: AnalysisState | None = None,
    stop_after: int | None = None,
    sleep: Callable[[float], Awaitable[Any]] = _no_wait,
    clock: Callable[[], float] = time.time,
) -> list[RoundVerdicts]:
    """Every step ``analyse`` yields (the first ``stop_after`` of them: the generator is closed there)."""

    async def collect() -> list[RoundVerdicts]:
        taken: list[RoundVerdicts] = []
        steps = analyse(analysis, targets, hook_params=HOOK_PARAMS, log=LOG, resume=resume, sleep=sleep, clock=clock)
        async with contextlib.aclosing(steps):
            async for step in steps:
                taken.append(step)
                if stop_after is not None and len(taken) == stop_after:
                    break
        return taken

    return asyncio.run(collect())


def _projects(fake_sources: FakeSources, good: AnalysisTarget, bad: AnalysisTarget) -> None:
    fake_sources.add_project(good.name, run_count=100, error_rate=0.0)
    fake_sources.add_project(bad.name, run_count=100, error_rate=0.5)


def _rounds(result: Any) -> list[int]:
    return [measurement["round"] for measurement in result["measurements"]]


def test_a_verdict_is_handed_over_after_its_round_while_the_others_go_on(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01)

    first, last = _steps(analysis, [good, bad])

    assert list(first.decided) == [bad.deployment_id] and first.decided[bad.deployment_id]["verdict"] == "failed"
    assert first.pending == [good] and not first.over
    assert first.state is not None and first.state.rounds == 1
    assert list(first.state.measurements) == [good.deployment_id]
    assert _rounds({"measurements": first.state.measurements[good.deployment_id]}) == [1]
    assert list(last.decided) == [good.deployment_id] and last.over and last.pending == []
    assert last.decided[good.deployment_id]["verdict"] == "passed" and _rounds(last.decided[good.deployment_id]) == [
        1,
        2,
        3,
    ]
    assert len(fake_sources.seen(*STATS)) == 2 + 1 + 1  # both in round 1, the good one alone after
    # run_analysis runs the same steps to the end: every verdict, in the targets' order.
    fake_sources.requests.clear()
    results = asyncio.run(run_analysis(analysis, [good, bad], hook_params=HOOK_PARAMS, log=LOG, sleep=_no_wait))
    assert list(results) == [good.deployment_id, bad.deployment_id]
    assert [results[good.deployment_id]["verdict"], results[bad.deployment_id]["verdict"]] == ["passed", "failed"]


def test_an_analysis_stopped_after_a_verdict_goes_on_from_its_state_without_measuring_a_round_twice(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=4, interval_seconds=0.01)
    (first,) = _steps(analysis, [good, bad], stop_after=1)
    assert first.state is not None
    carried = AnalysisState.from_json(json.loads(json.dumps(first.state.to_json())))  # as a trigger's kwargs
    fake_sources.requests.clear()

    (last,) = _steps(analysis, first.pending, resume=carried)

    result = last.decided[good.deployment_id]
    assert result["verdict"] == "passed" and _rounds(result) == [1, 2, 3, 4]
    assert result["reason"] == "all 1 check(s) passed over 4 round(s)"
    assert len(fake_sources.seen(*STATS)) == 3  # rounds 2, 3 and 4, each once


def test_going_on_late_moves_the_later_rounds_instead_of_bunching_them(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    """Round 2 was due at 1020 and the analysis goes on at 1050: round 2 at once, round 3 an interval later
    (1060), not at once as well (1030)."""
    (good,) = live_targets(analysis_env, 1)
    fake_sources.add_project(good.name, run_count=100, error_rate=0.0)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=10)
    now = [1050.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    (last,) = _steps(
        analysis, [good], resume=AnalysisState(started_at=1000.0, rounds=1), sleep=sleep, clock=lambda: now[0]
    )

    assert slept == [0.0, 10.0]
    assert _rounds(last.decided[good.deployment_id]) == [2, 3]


def test_measurements_resumed_that_decide_a_target_hand_it_over_before_any_round(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01)
    (first,) = _steps(analysis, [good, bad], stop_after=1)
    assert first.state is not None
    bad_measurements = first.decided[bad.deployment_id]["measurements"]
    state = AnalysisState(
        first.state.started_at, 1, 0.0, {**first.state.measurements, bad.deployment_id: bad_measurements}
    )
    fake_sources.requests.clear()

    (early,) = _steps(analysis, [good, bad], resume=state, stop_after=1)

    assert list(early.decided) == [bad.deployment_id] and early.pending == [good]
    assert fake_sources.seen(*STATS) == []


# ------------------------------------------------------------------------------------------ the trigger
def _trigger(analysis: Analysis, targets: list[dict[str, Any]], **options: Any) -> DeploymentAnalysisTrigger:
    return DeploymentAnalysisTrigger(
        analysis=analysis.to_json(), targets=targets, hook_params=HOOK_PARAMS, carry={"n": 1}, **options
    )


def _event(trigger: DeploymentAnalysisTrigger) -> dict[str, Any]:
    """The trigger's one event, the trigger rebuilt from its JSON arguments first (as the triggerer does)."""

    async def first() -> list[dict[str, Any]]:
        _path, kwargs = trigger.serialize()
        rebuilt = DeploymentAnalysisTrigger(**json.loads(json.dumps(kwargs)))
        return [event.payload async for event in rebuilt.run()]

    (event,) = asyncio.run(first())
    json.dumps(event)  # plain JSON, as the triggerer stores it
    return event


def test_a_partial_trigger_yields_the_first_verdicts_and_a_new_one_goes_on_with_the_rest(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01)

    partial = _event(_trigger(analysis, [good.model_dump(mode="json"), bad.model_dump(mode="json")], partial=True))

    assert partial["status"] == "partial" and partial["carry"] == {"n": 1}
    assert list(partial["results"]) == [bad.deployment_id]
    assert partial["results"][bad.deployment_id]["verdict"] == "failed"
    assert partial["targets"] == [good.model_dump(mode="json")] and partial["state"]["rounds"] == 1

    done = _event(_trigger(analysis, partial["targets"], partial=True, state=partial["state"]))

    assert done["status"] == "done" and list(done["results"]) == [good.deployment_id]
    assert _rounds(done["results"][good.deployment_id]) == [1, 2, 3]
    assert len(fake_sources.seen(*STATS)) == 2 + 2


def test_a_trigger_without_partial_yields_once_every_target_is_judged(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=2, interval_seconds=0.01)
    event = _event(_trigger(analysis, [good.model_dump(mode="json"), bad.model_dump(mode="json")]))
    assert event["status"] == "done" and set(event["results"]) == {good.deployment_id, bad.deployment_id}


def test_a_partial_event_carries_the_deadline_and_a_resumed_trigger_keeps_it(
    analysis_env: Any, fake_sources: FakeSources
) -> None:
    """The analysis's deadline is set once, when it first deferred: the partial event hands it on, and a trigger
    going on after it passed reports the analysis could not be measured in time, measuring nothing."""
    good, bad = live_targets(analysis_env, 2)
    _projects(fake_sources, good, bad)
    analysis = Analysis(checks=[TracingProjectCheck()], count=3, interval_seconds=0.01)
    deadline = time.time() + analysis_seconds(analysis)
    both = [good.model_dump(mode="json"), bad.model_dump(mode="json")]
    partial = _event(_trigger(analysis, both, partial=True, deadline=deadline))
    assert partial["status"] == "partial" and partial["deadline"] == deadline
    fake_sources.requests.clear()

    late = _event(
        _trigger(analysis, partial["targets"], partial=True, state=partial["state"], deadline=time.time() - 1)
    )

    assert late["status"] == "error", late
    assert late["message"].startswith("the analysis could not be measured in time"), late["message"]
    assert fake_sources.seen(*STATS) == []


def test_a_trigger_refuses_a_bad_state_with_an_error_event() -> None:
    target = AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-00000000000a",
        name="shop",
        revision_id="00000000-0000-4000-8000-00000000000b",
        live_since="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
    )
    analysis = Analysis(checks=[TracingProjectCheck()], count=3)
    event = _event(_trigger(analysis, [target.model_dump(mode="json")], partial=True, state={"rounds": 1}))
    assert event == {
        "status": "error",
        "message": "invalid trigger arguments: state.started_at must be Unix seconds, got None",
        "carry": {"n": 1},
    }
