"""``FleetRolloutOperator(on_inconclusive="ask")`` against the emulator (issue 32): a wave whose analysis is
inconclusive asks a person through Airflow's human-in-the-loop, showing the wave, its deployments and the
measurements; promote goes on with the next wave, roll back rolls the wave back as a failed verdict would, analyse
another interval measures again, no answer rolls back; the question and the answer are recorded in the fleet's progress
before they are acted on, so a retry goes on from the answer (never asks twice, never acts twice).

Airflow's side is what a worker has, as in ``test_patch_inconclusive_ask.py``: the HITL detail is recorded through
``upsert_hitl_detail``, the task parks with ``TaskAwaitingInput`` and resumes with the answer's event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskAwaitingInput, TaskDeferred

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.emulator.tracing import tracing_base_url
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.tasks.fleet.progress import STATE_KEY
from airflow_provider.tasks.inconclusive import ANALYSE_AGAIN, OPTIONS, PROMOTE, ROLL_BACK
from tests.tasks.conftest import CONN_ENV, SECRET, FakeStore, connection_json, run_trigger, scan_for_secret, seed
from tests.tasks.test_patch_inconclusive_ask import TIMED_OUT, AskingTI, chosen
from tests.tasks.test_patch_notify import RecordingNotifier

TRAFFIC = 200.0
NAMES = ("app-0000", "app-0001")
RESUME = "execute_fleet_inconclusive_answered"


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two deployments serving traffic; the canary's (app-0000's) next revision serves none: too few runs to judge."""
    server = deployment_service_emulator_factory(
        data=seed(len(NAMES)), frozen_clock=False, build_seconds=0.3, ready_seconds=0.1
    )
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            server.base_url,
            server.api_key,
            backoff_initial=0.01,
            backoff_max=0.02,
            tracing_base_url=tracing_base_url(server.base_url),
        ),
    )
    server.state.add_behaviour_rule(repo_ref="*", requests_per_second=TRAFFIC)
    server.state.set_behaviour(deployment(server, "app-0000")["id"], revision_id="next", requests_per_second=0.0)
    return server


@pytest.fixture
def questions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The HITL details the task writes."""
    written: list[dict[str, Any]] = []
    import airflow.sdk.execution_time.hitl as hitl

    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **detail: written.append(detail))
    return written


def deployment(emulator: Any, name: str) -> dict[str, Any]:
    return dict(emulator.state.find_deployment(name))


def revisions(emulator: Any, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = emulator.state.deployment(deployment(emulator, name)["id"])["revisions"]
    return found


def fleet_op(deferrable: bool = False, **kwargs: Any) -> Callable[[], FleetRolloutOperator]:
    options: dict[str, Any] = {
        "task_id": "fleet",
        "deployment_names": list(NAMES),
        "canary": 1,
        "poll_interval": 0.1,
        "timeout": 30,
        "repo_ref": "v2",
        "secrets": {"TOKEN": SECRET},
        "rollback_on_failure": True,
        "deferrable": deferrable,
        "analysis": Analysis(
            checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)],
            interval_seconds=0.3,
            count=2,
            preflight=False,  # the serving revisions have too little traffic too: this is about the verdict
        ),
        "on_inconclusive": "ask",
        "response_timeout": timedelta(minutes=5),
        **kwargs,
    }
    return lambda: FleetRolloutOperator(**options)


def drive(make_task: Callable[[], FleetRolloutOperator], context: dict[str, Any], method: str, **kwargs: Any) -> Any:
    """Call ``method`` on a fresh operator, each deferral run through its rebuilt trigger and resumed on a fresh
    operator with the event only (as ``dag.test()`` resumes); the result, or what the task ended with (the exception,
    or ``TaskAwaitingInput`` when it parks for an answer)."""
    while True:
        try:
            return getattr(make_task(), method)(context, **kwargs)
        except TaskDeferred as deferred:
            _path, trigger_kwargs = deferred.trigger.serialize()
            event = run_trigger(type(deferred.trigger)(**json.loads(json.dumps(trigger_kwargs))), timeout=60)
            method, kwargs = deferred.method_name, {"event": event}
        except (Exception, TaskAwaitingInput) as err:
            return err


def run_until_asked(make_task: Callable[[], FleetRolloutOperator], context: dict[str, Any]) -> TaskAwaitingInput:
    asked = drive(make_task, context, "execute")
    assert isinstance(asked, TaskAwaitingInput), f"the task ended without asking: {asked!r}"
    return asked


def answer(
    make_task: Callable[[], FleetRolloutOperator], context: dict[str, Any], asked: TaskAwaitingInput, event: Any
) -> Any:
    """Resume as Airflow does with the answer, on a fresh operator."""
    return drive(make_task, context, asked.method_name, event=event, **(asked.kwargs or {}))


def canary_record(store: FakeStore) -> dict[str, Any]:
    record: dict[str, Any] = store.data[f"{STATE_KEY}/wave/0"]
    return record


def rows(ti: AskingTI) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in ti.xcoms["return_value"]}


# ------------------------------------------------------------------------------------------ the question
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_an_inconclusive_canary_asks_a_person_showing_the_wave_its_deployments_and_measurements(
    emulator: Any, questions: list[dict[str, Any]], deferrable: bool
) -> None:
    before = {name: deployment(emulator, name)["active_revision_id"] for name in NAMES}
    told = RecordingNotifier()
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}

    asked = run_until_asked(fleet_op(deferrable, notify={"inconclusive": told}), context)

    assert asked.method_name == RESUME and asked.timeout == timedelta(minutes=5)
    (question,) = questions
    assert question["ti_id"] == ti.id and question["options"] == OPTIONS and question["defaults"] == [ROLL_BACK]
    assert "canary" in question["subject"] and "Inconclusive" in question["subject"]
    assert "app-0000" in question["body"] and "app-0001" not in question["body"]
    assert "tracing" in question["body"] and "< 0.05" in question["body"] and "min_run_count" in question["body"]
    # The canary still serves its new revision while the person decides; the next wave is not patched.
    canary = deployment(emulator, "app-0000")
    assert canary["active_revision_id"] != before["app-0000"] and canary["source_revision_config"]["repo_ref"] == "v2"
    assert deployment(emulator, "app-0001")["active_revision_id"] == before["app-0001"]
    assert len(revisions(emulator, "app-0001")) == 1
    # Recorded before asking: the open question in the canary's wave record, its row undecided.
    record = canary_record(store)
    assert record["phase"] == "analysing"
    assert record["question"]["number"] == 1 and "answer" not in record["question"]
    assert record["question"]["path"] == "dags/dag/runs/run/tasks/task/required_actions?map_index=-1"
    assert [item["name"] for item in record["question"]["deployments"]] == ["app-0000"]
    (row,) = record["rows"]
    assert row["outcome"] == Outcome.LANDED and row["analysis"]["verdict"] == "inconclusive"
    ((_text, event),) = told.sent
    assert event["event"] == "inconclusive" and event["deployment_name"] == "app-0000" and event["wave"] == "canary"
    assert event["question_url"].endswith("required_actions?map_index=-1") and event["measurements"]
    scan_for_secret(question, store.data, asked.kwargs, told.sent)


def test_without_ask_an_inconclusive_canary_still_counts_as_failed(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    ti = AskingTI()
    failed = drive(fleet_op(on_inconclusive="fail"), {"ti": ti, "task_state_store": FakeStore()}, "execute")
    assert isinstance(failed, AirflowFailException), failed
    assert questions == []
    assert rows(ti)["app-0000"]["outcome"] == Outcome.ROLLED_BACK


def test_a_wave_that_stops_the_rollout_anyway_asks_no_one(emulator: Any, questions: list[dict[str, Any]]) -> None:
    """Both deployments are the canary; app-0001 fails its analysis, so the canary stops the rollout whatever a
    person would say about app-0000: no one is asked, and the whole canary is rolled back."""
    bad = deployment(emulator, "app-0001")["id"]
    emulator.state.set_behaviour(bad, revision_id="next", error_rate=0.5, requests_per_second=TRAFFIC)
    ti = AskingTI()

    failed = drive(fleet_op(canary=2), {"ti": ti, "task_state_store": FakeStore()}, "execute")

    assert isinstance(failed, AirflowFailException), failed
    assert questions == []
    for name in NAMES:  # each restored: a patch, then a rollback
        assert rows(ti)[name]["outcome"] in (Outcome.ROLLED_BACK, Outcome.ROLLED_BACK_WITH_WAVE)
        assert deployment(emulator, name)["source_revision_config"]["repo_ref"] != "v2"
        assert len(revisions(emulator, name)) == 3


def test_an_inconclusive_deployment_of_a_wave_already_stopping_fails_without_a_question(
    questions: list[dict[str, Any]],
) -> None:
    """The verdicts came the other way round (the inconclusive one first, then a failure that stops the canary): once
    the wave's analysis is over, the inconclusive deployment fails as without ``ask``, recorded, and no one is
    asked."""
    import logging

    from airflow_provider.decisions.fleet_progress import FleetProgress, FleetRow, WaveRecord
    from airflow_provider.tasks.fleet.asking import WaveQuestion
    from airflow_provider.tasks.fleet.progress import ProgressStore

    unsure = FleetRow(
        "id-a", "a", "canary", "r0", "r1", Outcome.LANDED, analysis={"verdict": "inconclusive", "reason": "few"}
    )
    broken = FleetRow(
        "id-b", "b", "canary", "r2", "r3", Outcome.FAILED, analysis={"verdict": "failed", "reason": "5xx"}
    )
    progress = FleetProgress(
        [WaveRecord("canary", [unsure, broken], phase="analysing")], allowed_failures=1, change="x"
    )
    store = FakeStore()
    task = fleet_op()()

    WaveQuestion(
        task, {"ti": AskingTI()}, progress, ProgressStore(store, logging.getLogger("t")), 0
    ).ask_if_inconclusive()

    assert questions == []
    assert unsure.outcome == Outcome.FAILED and "no one was asked" in unsure.message
    assert store.data[f"{STATE_KEY}/wave/0"]["rows"][0]["outcome"] == Outcome.FAILED
    assert progress.waves[0].question is None


# ------------------------------------------------------------------------------------------ the answers
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_promote_goes_on_with_the_next_wave(emulator: Any, questions: list[dict[str, Any]], deferrable: bool) -> None:
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(deferrable), context)

    table = answer(fleet_op(deferrable), context, asked, chosen(PROMOTE, "bob"))

    assert isinstance(table, list), table
    found = {row["name"]: row for row in table}
    for name in NAMES:  # both serve v2: the canary as promoted, the next wave patched and judged
        live = deployment(emulator, name)
        assert found[name]["outcome"] == Outcome.LANDED
        assert live["active_revision_id"] == found[name]["to_revision"] and live["status"] == "READY"
        assert live["source_revision_config"]["repo_ref"] == "v2"
    assert found["app-0001"]["analysis"]["verdict"] == "passed"
    assert found["app-0000"]["analysis"]["verdict"] == "inconclusive"
    assert "promoted by bob" in found["app-0000"]["message"]
    assert canary_record(store)["question"]["answer"]["choice"] == PROMOTE
    assert canary_record(store)["rows"][0]["analysis"]["answer"]["by"] == "bob"
    assert len(questions) == 1
    assert ti.xcoms["fleet_summary"]["analysis_failures"] == 0


def test_roll_back_rolls_the_wave_back_as_a_failed_verdict_would(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    before = deployment(emulator, "app-0000")["active_revision_id"]
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(), context)

    outcome = answer(fleet_op(), context, asked, chosen(ROLL_BACK, "alice"))

    assert isinstance(outcome, AirflowFailException), outcome
    assert "canary failed" in str(outcome)
    row = rows(ti)["app-0000"]
    assert row["outcome"] == Outcome.ROLLED_BACK
    assert "'Roll back', chosen by alice" in row["message"]
    canary = deployment(emulator, "app-0000")  # restored: its previous build serves again, in one new revision
    assert canary["active_revision_id"] not in (before, row["to_revision"]) and canary["status"] == "READY"
    assert canary["source_revision_config"]["repo_ref"] != "v2"
    assert len(revisions(emulator, "app-0000")) == 3
    assert len(revisions(emulator, "app-0001")) == 1  # the next wave was never patched
    assert canary_record(store)["question"]["answer"]["choice"] == ROLL_BACK


def test_analyse_another_interval_measures_again_then_goes_on(emulator: Any, questions: list[dict[str, Any]]) -> None:
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(), context)
    emulator.state.set_behaviour(deployment(emulator, "app-0000")["id"], requests_per_second=TRAFFIC)  # traffic now

    table = answer(fleet_op(), context, asked, chosen(ANALYSE_AGAIN))

    assert isinstance(table, list), table
    found = {row["name"]: row for row in table}
    assert found["app-0000"]["analysis"]["verdict"] == "passed"
    for name in NAMES:
        assert deployment(emulator, name)["active_revision_id"] == found[name]["to_revision"]
    assert len(questions) == 1
    assert canary_record(store)["question"]["answer"]["choice"] == ANALYSE_AGAIN


def test_analyse_another_interval_that_is_inconclusive_again_asks_again(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(), context)

    again = answer(fleet_op(), context, asked, chosen(ANALYSE_AGAIN))

    assert isinstance(again, TaskAwaitingInput), again
    assert len(questions) == 2
    assert canary_record(store)["question"]["number"] == 2 and "answer" not in canary_record(store)["question"]
    assert deployment(emulator, "app-0000")["source_revision_config"]["repo_ref"] == "v2"  # still undecided


def test_no_answer_in_time_rolls_the_wave_back(emulator: Any, questions: list[dict[str, Any]]) -> None:
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(), context)

    outcome = answer(fleet_op(), context, asked, TIMED_OUT)

    assert isinstance(outcome, AirflowFailException), outcome
    row = rows(ti)["app-0000"]
    assert row["outcome"] == Outcome.ROLLED_BACK and "no answer within the response timeout" in row["message"]
    assert deployment(emulator, "app-0000")["source_revision_config"]["repo_ref"] != "v2"
    assert canary_record(store)["question"]["answer"]["timed_out"] is True


# ------------------------------------------------------------------------------------------ retries
def test_a_retry_after_a_recorded_roll_back_answer_rolls_back_once_without_asking(
    emulator: Any, questions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeStore()
    first = {"ti": AskingTI(), "task_state_store": store}
    asked = run_until_asked(fleet_op(), first)
    with monkeypatch.context() as crash:  # the worker dies right after recording the answer
        crash.setattr(FleetRolloutOperator, "_advance", lambda *a, **k: (_ for _ in ()).throw(SystemExit(1)))
        with pytest.raises(SystemExit):
            getattr(fleet_op()(), asked.method_name)(first, event=chosen(ROLL_BACK), **(asked.kwargs or {}))
    assert deployment(emulator, "app-0000")["source_revision_config"]["repo_ref"] == "v2"  # not acted on yet
    assert canary_record(store)["question"]["answer"]["choice"] == ROLL_BACK

    ti = AskingTI(try_number=2)
    outcome = drive(fleet_op(), {"ti": ti, "task_state_store": store}, "execute")

    assert isinstance(outcome, AirflowFailException), outcome
    assert len(questions) == 1  # never asked again
    assert rows(ti)["app-0000"]["outcome"] == Outcome.ROLLED_BACK
    assert deployment(emulator, "app-0000")["source_revision_config"]["repo_ref"] != "v2"
    assert len(revisions(emulator, "app-0000")) == 3  # one patch, one rollback: not rolled back twice
    assert len(revisions(emulator, "app-0001")) == 1


def test_a_retry_after_a_recorded_promote_answer_goes_on_without_asking(
    emulator: Any, questions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeStore()
    first = {"ti": AskingTI(), "task_state_store": store}
    asked = run_until_asked(fleet_op(), first)
    with monkeypatch.context() as crash:
        crash.setattr(FleetRolloutOperator, "_advance", lambda *a, **k: (_ for _ in ()).throw(SystemExit(1)))
        with pytest.raises(SystemExit):
            getattr(fleet_op()(), asked.method_name)(first, event=chosen(PROMOTE), **(asked.kwargs or {}))

    ti = AskingTI(try_number=2)
    table = drive(fleet_op(), {"ti": ti, "task_state_store": store}, "execute")

    assert isinstance(table, list), table
    assert len(questions) == 1
    for row in table:
        assert deployment(emulator, row["name"])["active_revision_id"] == row["to_revision"]
        assert row["outcome"] == Outcome.LANDED
    assert len(revisions(emulator, "app-0000")) == 2  # patched once, never rolled back


def test_a_second_answer_to_an_answered_question_is_not_acted_on_twice(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(fleet_op(), context)
    failed = answer(fleet_op(), context, asked, chosen(ROLL_BACK, "alice"))
    assert isinstance(failed, AirflowFailException), failed

    again = answer(fleet_op(), context, asked, chosen(PROMOTE, "bob"))

    assert isinstance(again, AirflowFailException), again  # the recorded answer stands
    assert canary_record(store)["question"]["answer"]["by"] == "alice"
    assert len(revisions(emulator, "app-0000")) == 3


# ------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_inconclusive": "prompt"}, "on_inconclusive must be one of 'fail', 'ask', got 'prompt'"),
        ({"response_timeout": -1}, "response_timeout must be a positive timedelta"),
        ({"analysis": None}, "on_inconclusive='ask' needs an analysis"),
    ],
)
def test_bad_arguments_fail_when_the_task_is_built(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        fleet_op(**kwargs)()
