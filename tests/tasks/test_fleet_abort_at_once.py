"""An abort from the Rollouts view ends what a fleet task waits for at once (issue 32), not at the task's next step:
a pause before a wave (either mode), and in ``rollback`` mode the watch of the current wave (its bake), its analysis
and an open question about it. On the worker the task reads the request between two rounds of its wait; a deferred
task (or one awaiting an answer) is resumed by the view with an abort event, which these tests send as the view does
(:func:`~airflow_provider.tasks.fleet.abort.abort_event`, the trigger's ``carry`` in it). Each wait below is far
longer than the test may take: a task that waited it out fails the time bound, and every outcome is checked on what
the emulator serves."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskAwaitingInput, TaskDeferred

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.decisions.fleet_progress import ABORTED_UNJUDGED, Outcome
from airflow_provider.decisions.record import fleet_row_entries
from airflow_provider.tasks.fleet.abort import ABORT_KEY, TAKEN_KEY, abort_event, interrupts, waiting_on
from airflow_provider.tasks.fleet.progress import STATE_KEY
from airflow_provider.tasks.inconclusive import ROLL_BACK
from tests.tasks.conftest import FakeStore, run_trigger
from tests.tasks.test_fleet_abort import FAST, assert_untouched, request, serving
from tests.tasks.test_fleet_inconclusive_ask import (  # noqa: F401 (emulator, questions: fixtures)
    RESUME,
    AskingTI,
    canary_record,
    deployment,
    emulator,
    fleet_op,
    questions,
    revisions,
    run_until_asked,
)
from tests.tasks.test_fleet_retries import (
    REDEPLOY_ROUTE,
    assert_restored,
    context_for,
    ids_by_name,
    operator,
    released,
    requests_to,
)

LONG = 120.0
"""Every wait these tests abort is this long; the task must end well within :data:`BOUND`."""
BOUND = 45.0
TRAFFIC = 200.0


class AbortWhen(FakeStore):
    """A task state store that records the abort request (as the view does) the first time the task saves a value
    for which ``when(key, value)`` holds (``delay`` seconds later, from another thread, when given): the abort
    arrives while the task waits on what it just saved."""

    def __init__(self, value: dict[str, Any], when: Callable[[str, Any], bool], delay: float = 0.0) -> None:
        super().__init__()
        self.value, self.when, self.delay, self.fired = value, when, delay, False
        self.written = threading.Event()

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        if not self.fired and self.when(key, value):
            self.fired = True
            if self.delay:
                threading.Timer(self.delay, self._write).start()
            else:
                self._write()

    def _write(self) -> None:
        super().set(ABORT_KEY, self.value)
        self.written.set()


def wave_saved(index: int, phase: str) -> Callable[[str, Any], bool]:
    return lambda key, value: key == f"{STATE_KEY}/wave/{index}" and value.get("phase") == phase


@pytest.fixture
def fleet(service: Callable[..., Any]) -> Any:
    seeded = service(data=released(3), **FAST)
    seeded.state.add_behaviour_rule(repo_ref="*", requests_per_second=TRAFFIC)
    return seeded


def run_waking(
    make_task: Callable[[], Any], context: dict[str, Any], wake_on: str = "FleetWaveTrigger", wait: float = 0.0
) -> Any:
    """Run a deferrable task to its end, each deferral through its rebuilt trigger and each resume on a fresh operator,
    except the first deferral to a ``wake_on`` trigger once the view's abort is recorded (waiting up to ``wait``
    seconds for it): that one is resumed as the view resumes it (its trigger never fires)."""
    woken = False
    resume: Callable[[Any], Any] = lambda task: task.execute(context)  # noqa: E731
    while True:
        try:
            return resume(make_task())
        except TaskDeferred as deferred:
            _path, trigger_kwargs = deferred.trigger.serialize()
            trigger_kwargs = json.loads(json.dumps(trigger_kwargs))
            kwargs = dict(deferred.kwargs or {})
            if (
                not woken
                and type(deferred.trigger).__name__ == wake_on
                and context["task_state_store"].written.wait(wait)
            ):
                woken = True
                kwargs["event"] = abort_event(_request_of(context), trigger_kwargs.get("carry"))
                resume = functools.partial(_resume, method=deferred.method_name, kwargs=kwargs, context=context)
            else:
                kwargs["event"] = run_trigger(type(deferred.trigger)(**trigger_kwargs))
                resume = functools.partial(_call, method=deferred.method_name, kwargs=kwargs, context=context)


def _resume(task: Any, *, method: str, kwargs: dict[str, Any], context: dict[str, Any]) -> Any:
    return task.resume_execution(method, kwargs, context)


def _call(task: Any, *, method: str, kwargs: dict[str, Any], context: dict[str, Any]) -> Any:
    return getattr(task, method)(context, **kwargs)


def _request_of(context: dict[str, Any]) -> Any:
    from airflow_provider.tasks.fleet.abort import AbortRequest

    found = AbortRequest.from_json(context["task_state_store"].data[ABORT_KEY])
    assert found is not None
    return found


def outcomes(context: dict[str, Any]) -> dict[str, str]:
    return {row["name"]: row["outcome"] for row in context["ti"].xcoms["return_value"]}


# ------------------------------------------------------------------------------------------------ the pause
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_stop_ends_a_pause_before_a_wave_at_once(fleet: Any, deferrable: bool) -> None:
    ids = ids_by_name(fleet)
    store = AbortWhen(request("stop"), lambda key, value: key == STATE_KEY and value.get("paused_before") == 1)
    context = context_for(1, store, datetime.now(timezone.utc))
    make = lambda: operator(  # noqa: E731
        ids, verify=None, canary=1, wave_size=1, max_failures=0, pause_seconds=LONG, deferrable=deferrable
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        run_waking(make, context) if deferrable else make().execute(context)
    assert time.monotonic() - started < BOUND, "the pause was waited out"
    assert serving(fleet, ids["app-0000"]) == "v2"  # the canary landed before the pause; stop leaves it
    for name in ("app-0001", "app-0002"):
        assert_untouched(fleet, ids[name])
    assert outcomes(context) == {"app-0000": "landed", "app-0001": "not_patched", "app-0002": "not_patched"}


def test_rollback_during_a_pause_rolls_the_last_wave_back_at_once(fleet: Any) -> None:
    ids = ids_by_name(fleet)
    before = fleet.state.deployment(ids["app-0000"])["active_revision_id"]
    store = AbortWhen(request("rollback"), lambda key, value: key == STATE_KEY and value.get("paused_before") == 1)
    context = context_for(1, store, datetime.now(timezone.utc))
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match="the current wave rolled back"):
        operator(ids, verify=None, canary=1, wave_size=1, max_failures=0, pause_seconds=LONG).execute(context)
    assert time.monotonic() - started < BOUND, "the pause was waited out"
    assert_restored(fleet, ids["app-0000"], before)
    assert outcomes(context)["app-0000"] == Outcome.ROLLED_BACK_WITH_WAVE
    assert store.data[TAKEN_KEY]["rollback_waves"] == [0]


# -------------------------------------------------------------------------------------------- the watch
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_rollback_ends_the_watch_of_the_wave_and_rolls_back_what_is_still_rolling_out(
    fleet: Any, deferrable: bool
) -> None:
    """The canary is aborted right after its patch, while its revision builds and bakes (a bake of two minutes):
    the watch ends, the revision is rolled back without being judged, and the record says so."""
    ids = ids_by_name(fleet)
    before = fleet.state.deployment(ids["app-0000"])["active_revision_id"]
    store = AbortWhen(request("rollback"), wave_saved(0, "patched"))
    context = context_for(1, store, datetime.now(timezone.utc))
    make = lambda: operator(  # noqa: E731
        ids, verify=None, canary=1, wave_size=1, max_failures=0, bake_seconds=LONG, timeout=LONG, deferrable=deferrable
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        run_waking(make, context) if deferrable else make().execute(context)
    assert time.monotonic() - started < BOUND, "the bake was waited out"
    assert_restored(fleet, ids["app-0000"], before)
    assert requests_to(fleet, REDEPLOY_ROUTE, ids["app-0000"]) == 1
    for name in ("app-0001", "app-0002"):
        assert_untouched(fleet, ids[name])
    (canary,) = store.data[f"{STATE_KEY}/wave/0"]["rows"]
    assert canary["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE  # not judged: not a failure of the change
    assert canary["message"].startswith(f"{ABORTED_UNJUDGED}: aborted by alice"), canary["message"]
    kinds = [(item["kind"], item.get("step")) for item in fleet_row_entries(canary)]
    assert kinds == [("rolled_out", None), ("failed", "abort"), ("rolled_back", None)], kinds


def test_stop_lets_the_wave_in_flight_finish_its_watch(fleet: Any) -> None:
    """``stop`` does not end the watch: the canary in flight lands (judged as usual), nothing more is patched."""
    ids = ids_by_name(fleet)
    store = AbortWhen(request("stop"), wave_saved(0, "patched"))
    context = context_for(1, store, datetime.now(timezone.utc))
    with pytest.raises(AirflowFailException, match="no deployment patched after it"):
        operator(ids, verify=None, canary=1, wave_size=1, max_failures=0, bake_seconds=1.0).execute(context)
    assert serving(fleet, ids["app-0000"]) == "v2"
    assert outcomes(context) == {"app-0000": "landed", "app-0001": "not_patched", "app-0002": "not_patched"}


# ------------------------------------------------------------------------------------------ the analysis
def long_analysis() -> Analysis:
    check = TracingProjectCheck(condition="< 0.05", min_run_count=5)
    return Analysis(checks=[check], interval_seconds=LONG / 4, count=4, preflight=False)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_rollback_ends_the_analysis_of_the_wave(fleet: Any, deferrable: bool) -> None:
    ids = ids_by_name(fleet)
    before = fleet.state.deployment(ids["app-0000"])["active_revision_id"]
    store = AbortWhen(request("rollback"), wave_saved(0, "analysing"), delay=1.0)  # once the analysis runs
    context = context_for(1, store, datetime.now(timezone.utc))
    make = lambda: operator(  # noqa: E731
        ids, verify=None, canary=1, wave_size=1, max_failures=0, analysis=long_analysis(), deferrable=deferrable
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        run_waking(make, context, "DeploymentAnalysisTrigger", wait=10) if deferrable else make().execute(context)
    assert time.monotonic() - started < BOUND, "the analysis was waited out"
    assert_restored(fleet, ids["app-0000"], before)
    (canary,) = store.data[f"{STATE_KEY}/wave/0"]["rows"]
    assert canary["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE  # live, its analysis unfinished: not judged
    assert canary["message"].startswith(f"{ABORTED_UNJUDGED}: aborted by alice"), canary["message"]
    assert "served, not judged yet" in canary["message"], canary["message"]
    kinds = [(item["kind"], item.get("step")) for item in fleet_row_entries(canary)]
    assert kinds == [("rolled_out", None), ("failed", "abort"), ("rolled_back", None)], kinds
    for name in ("app-0001", "app-0002"):
        assert_untouched(fleet, ids[name])


# ------------------------------------------------------------------------------------------ the question
def test_rollback_answers_the_open_question_and_rolls_the_wave_back(
    emulator: Any,  # noqa: F811 (the fixture imported above)
    questions: list[dict[str, Any]],  # noqa: F811
) -> None:
    """The canary's analysis is inconclusive and the task waits for a person; the abort resumes it: the question is
    answered "Roll back" in the user's name (recorded in the wave's progress), the canary is rolled back."""
    before = deployment(emulator, "app-0000")["active_revision_id"]
    ti, store = AskingTI(), FakeStore()
    context: dict[str, Any] = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(False), context)
    assert isinstance(asked, TaskAwaitingInput)
    store.set(ABORT_KEY, request("rollback"))
    event = abort_event(_request_of(context), None)
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        fleet_op(False)().resume_execution(asked.method_name, {**(asked.kwargs or {}), "event": event}, context)
    answer = canary_record(store)["question"]["answer"]
    assert answer["choice"] == ROLL_BACK and answer["by"] == "alice" and not answer["timed_out"]
    restored = deployment(emulator, "app-0000")
    assert restored["active_revision_id"] != before and restored["source_revision_config"]["repo_ref"] != "v2"
    assert revisions(emulator, "app-0000")[-1]["redeploy_of"] == before
    assert len(revisions(emulator, "app-0001")) == 1  # never patched


# ------------------------------------------------------------------------------------- what the view asks
def test_what_an_abort_ends_at_once() -> None:
    assert interrupts("stop", "pause") and interrupts("rollback", "pause")
    for waiting in ("watch", "analysis", "question"):
        assert interrupts("rollback", waiting) and not interrupts("stop", waiting)
    assert not interrupts("rollback", "rollbacks") and not interrupts("stop", "rollbacks")


def test_what_a_deferred_fleet_task_waits_for() -> None:
    from airflow_provider.decisions.fleet_progress import FleetProgress, FleetRow, WaveRecord

    row = FleetRow("id-a", "a", "canary", "r0", None, Outcome.PENDING)
    progress = FleetProgress([WaveRecord("canary", [row], phase="planned")], allowed_failures=0, change="x")
    assert waiting_on(progress, "execute_complete") == "pause"
    for phase, waiting in (("patched", "watch"), ("rolling_back", "rollbacks"), ("watched", None)):
        progress.waves[0].phase = phase
        assert waiting_on(progress, "execute_complete") == waiting
    progress.waves[0].phase = "analysing"
    assert waiting_on(progress, "execute_complete_analysis") == "analysis"
    assert waiting_on(progress, RESUME) == "question"
    progress.waves[0].phase = "done"
    assert waiting_on(progress, "execute_complete") is None
