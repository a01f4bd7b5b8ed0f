"""``PatchDeploymentOperator(on_inconclusive="ask")`` against the emulator (issue 32): an inconclusive analysis asks a
person through Airflow's human-in-the-loop, and each answer does what it says to the deployment, the timeout rolls
back, the question and the answer are recorded before they are acted on, and a retry goes on from the record.

Airflow's side is what a worker has: the HITL detail is written through ``upsert_hitl_detail`` (recorded here: in a
unit test there is no supervisor to send it to), the task parks with ``TaskAwaitingInput`` and resumes with the
event Airflow builds from the answer (``HITLDetail.as_resume_event_payload()``: the Core API's answer, or the
scheduler's timeout default). The real machinery is exercised by the ``dag.test()`` test
(``tests/test_dag_test_inconclusive.py``) and the end-to-end test (``tests/e2e/test_e2e_inconclusive.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskAwaitingInput, TaskDeferred

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.decisions.record import RECORD_KEY
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.inconclusive import ANALYSE_AGAIN, OPTIONS, PROMOTE, ROLL_BACK
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY
from tests.tasks.conftest import CONN_ENV, SECRET, FakeStore, FakeTI, connection_json, run_trigger, scan_for_secret

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
SEED = {
    "deployments": [
        {
            "name": "svc",
            "source": "external_docker",
            "source_revision_config": {"image_uri": OLD_IMAGE},
            "secrets": [{"name": "TOKEN", "value": "sv-Before-Ask-77ab"}],
        }
    ]
}
TRAFFIC = 200.0
STATS = "/tracing/runs/stats"


class AskingTI(FakeTI):
    """A task instance with an id (the HITL detail's key)."""

    def __init__(self, try_number: int = 1) -> None:
        super().__init__(try_number)
        self.id = uuid.uuid4()


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


@pytest.fixture
def questions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The HITL details the task writes (what the worker sends its supervisor, and the API server stores)."""
    written: list[dict[str, Any]] = []
    import airflow.sdk.execution_time.hitl as hitl

    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **detail: written.append(detail))
    return written


def svc(emulator: Any) -> dict[str, Any]:
    return dict(emulator.state.find_deployment("svc"))


def inconclusive_next_revision(emulator: Any) -> None:
    """The next revision serves healthy traffic, but the tracing service answers 503 to every stats request."""
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", requests_per_second=TRAFFIC, error_rate=0.0)
    emulator.admin.add_fault(kind="status", method="POST", path=STATS, status_code=503, count=None)


def patch_op(emulator: Any, *, deferrable: bool = False, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "deployment_id": svc(emulator)["id"],
        "image_uri": NEW_IMAGE,
        "secrets": {"TOKEN": SECRET},
        "wait_for_rollout": True,
        "rollback_on_failure": True,
        "deferrable": deferrable,
        "poll_interval": 0.05,
        "timeout": 30,
        "analysis": Analysis(
            checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")],
            interval_seconds=0.3,
            count=2,
            preflight=False,  # the serving revision has no traffic either: this test is about the verdict
        ),
        "on_inconclusive": "ask",
        "response_timeout": timedelta(minutes=5),
        **kwargs,
    }
    return PatchDeploymentOperator(**options)


def drive(
    make_task: Callable[[], PatchDeploymentOperator], context: dict[str, Any], method: str, *args: Any, **kwargs: Any
) -> Any:
    """Call ``method`` on a fresh operator, then run each deferral through its rebuilt trigger and resume on a fresh
    operator with the kwargs merged, as the triggerer does. Returns the result, or what the task ended with: the
    exception, or ``TaskAwaitingInput`` when it parks for an answer."""
    while True:
        try:
            return getattr(make_task(), method)(context, *args, **kwargs)
        except TaskDeferred as deferred:
            _path, trigger_kwargs = deferred.trigger.serialize()
            event = run_trigger(type(deferred.trigger)(**trigger_kwargs), timeout=60)
            method, args, kwargs = deferred.method_name, (event,), dict(deferred.kwargs or {})
        except (Exception, TaskAwaitingInput) as err:
            return err


def run_until_asked(make_task: Callable[[], PatchDeploymentOperator], context: dict[str, Any]) -> TaskAwaitingInput:
    """Run the task until it parks for an answer."""
    asked = drive(make_task, context, "execute")
    assert isinstance(asked, TaskAwaitingInput), f"the task ended without asking: {asked!r}"
    return asked


def answer(
    make_task: Callable[[], PatchDeploymentOperator],
    context: dict[str, Any],
    asked: TaskAwaitingInput,
    event: dict[str, Any],
) -> Any:
    """Resume as Airflow does with the answer (``event`` merged into the parked kwargs), on a fresh operator."""
    return drive(make_task, context, asked.method_name, event=event, **(asked.kwargs or {}))


def chosen(option: str, user: str = "alice") -> dict[str, Any]:
    """The event a person's answer resumes the task with (``HITLDetail.as_resume_event_payload()``)."""
    return {
        "chosen_options": [option],
        "params_input": {},
        "responded_at": datetime.now(timezone.utc),
        "responded_by_user": {"id": user, "name": user},
        "timedout": False,
    }


TIMED_OUT = {
    "chosen_options": [ROLL_BACK],
    "params_input": {},
    "responded_at": datetime.now(timezone.utc),
    "responded_by_user": None,
    "timedout": True,
}
"""What the scheduler's timeout sweep resumes the task with: the default answer, no one named."""


def record_entries(store: FakeStore) -> list[dict[str, Any]]:
    return list(store.data[RECORD_KEY]["entries"])


# ------------------------------------------------------------------------------------------ the question
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_an_inconclusive_analysis_asks_a_person_showing_the_measurements(
    emulator: Any, questions: list[dict[str, Any]], deferrable: bool
) -> None:
    before = svc(emulator)
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}

    asked = run_until_asked(lambda: patch_op(emulator, deferrable=deferrable), context)

    new = ti.xcoms["revision_id"]
    assert asked.method_name == "execute_inconclusive_answered"
    assert asked.timeout == timedelta(minutes=5)
    (question,) = questions
    assert question["ti_id"] == ti.id
    assert question["options"] == OPTIONS and question["defaults"] == [ROLL_BACK] and question["multiple"] is False
    assert new in question["subject"] and "Inconclusive" in question["subject"]
    assert (
        "tracing error_rate" in question["body"] and "< 0.05" in question["body"] and "inconclusive" in question["body"]
    )
    assert "/deployment-service/deployments/" in question["body"]
    # The revision still serves while the person decides: nothing was rolled back yet.
    after = svc(emulator)
    assert after["active_revision_id"] == new != before["active_revision_id"]
    assert after["source_revision_config"]["image_uri"] == NEW_IMAGE
    # Recorded before asking: the question in the patch's record, an ``asking`` entry with the link.
    assert store.data[TASK_STATE_KEY]["question"]["result"]["verdict"] == "inconclusive"
    last = record_entries(store)[-1]
    assert last["kind"] == "asking" and last["revision_id"] == new
    assert last["question_path"] == "dags/dag/runs/run/tasks/task/required_actions?map_index=-1"
    assert last["verdict"]["measurements"]
    scan_for_secret(question, store.data, asked.kwargs)


def test_without_ask_an_inconclusive_analysis_still_counts_as_failed(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    inconclusive_next_revision(emulator)
    ti = AskingTI()

    with pytest.raises(AirflowFailException, match="inconclusive \\(counted as failed\\)"):
        patch_op(emulator, on_inconclusive="fail").execute({"ti": ti, "task_state_store": FakeStore()})

    assert questions == []
    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE


# ------------------------------------------------------------------------------------------ the answers
def test_roll_back_rolls_the_revision_back_and_names_who_chose(emulator: Any, questions: list[dict[str, Any]]) -> None:
    before = svc(emulator)
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), context)

    outcome = answer(lambda: patch_op(emulator), context, asked, chosen(ROLL_BACK, "alice"))

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis was inconclusive and the answer was 'Roll back', chosen by alice" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    after = svc(emulator)
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE and after["status"] == "READY"
    assert after["active_revision_id"] != ti.xcoms["revision_id"]
    record = store.data[TASK_STATE_KEY]
    assert record["answer"]["choice"] == ROLL_BACK and record["answer"]["by"] == "alice"
    assert record["verdict"]["step"] == "analysis" and record["verdict"]["passed"] is False
    kinds = [item["kind"] for item in record_entries(store)]
    assert kinds[-4:] == ["answered", "rejected", "rolling_back", "rolled_back"]
    assert record_entries(store)[-4]["answered_by"] == "alice"


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_promote_lands_the_revision_as_it_is(emulator: Any, questions: list[dict[str, Any]], deferrable: bool) -> None:
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator, deferrable=deferrable, bake_seconds=0.2), context)

    outcome = answer(
        lambda: patch_op(emulator, deferrable=deferrable, bake_seconds=0.2), context, asked, chosen(PROMOTE, "bob")
    )

    assert isinstance(outcome, dict), outcome
    new = ti.xcoms["revision_id"]
    after = svc(emulator)
    assert after["active_revision_id"] == new and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == NEW_IMAGE
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"
    assert ti.xcoms["analysis"]["answer"]["choice"] == PROMOTE and ti.xcoms["analysis"]["answer"]["by"] == "bob"
    kinds = [item["kind"] for item in record_entries(store)]
    assert kinds[-2:] == ["answered", "landed"]


def test_analyse_another_interval_measures_again_and_lands_when_it_passes(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), context)
    emulator.admin.clear_faults()  # the tracing service is back: the next interval can be measured

    outcome = answer(lambda: patch_op(emulator), context, asked, chosen(ANALYSE_AGAIN))

    assert isinstance(outcome, dict), outcome
    assert svc(emulator)["active_revision_id"] == ti.xcoms["revision_id"]
    assert ti.xcoms["analysis"]["verdict"] == "passed"
    assert store.data[TASK_STATE_KEY]["answer"]["choice"] == ANALYSE_AGAIN
    assert [item["kind"] for item in record_entries(store)][-2:] == ["answered", "landed"]


def test_analyse_another_interval_that_is_inconclusive_again_asks_again(
    emulator: Any, questions: list[dict[str, Any]]
) -> None:
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), context)

    again = answer(lambda: patch_op(emulator), context, asked, chosen(ANALYSE_AGAIN))

    assert isinstance(again, TaskAwaitingInput), again
    assert len(questions) == 2
    assert store.data[TASK_STATE_KEY]["question"]["number"] == 2
    assert "answer" not in store.data[TASK_STATE_KEY]  # the new question is open
    last = record_entries(store)[-1]
    assert last["kind"] == "asking" and "question 2" in last["message"]
    assert svc(emulator)["source_revision_config"]["image_uri"] == NEW_IMAGE  # still serving, still undecided


@pytest.mark.parametrize(
    "event",
    [
        TIMED_OUT,
        {"error": "The Human-in-the-loop response timeout has passed without a response.", "error_type": "timeout"},
    ],
    ids=["the default answer", "a timeout without default"],
)
def test_no_answer_in_time_rolls_back(emulator: Any, questions: list[dict[str, Any]], event: dict[str, Any]) -> None:
    before = svc(emulator)
    inconclusive_next_revision(emulator)
    ti, store = AskingTI(), FakeStore()
    context = {"ti": ti, "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), context)

    outcome = answer(lambda: patch_op(emulator), context, asked, event)

    assert isinstance(outcome, AirflowFailException), outcome
    assert "no answer within the response timeout, so 'Roll back'" in str(outcome)
    assert f"rolled back to revision {before['active_revision_id']}" in str(outcome)
    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert store.data[TASK_STATE_KEY]["answer"]["timed_out"] is True


# ------------------------------------------------------------------------------------------ retries
def test_a_retry_after_a_roll_back_answer_rolls_back_from_the_record_without_asking(
    emulator: Any, questions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    inconclusive_next_revision(emulator)
    store = FakeStore()
    first = {"ti": AskingTI(), "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), first)
    with monkeypatch.context() as crash:  # the worker dies right after recording the answer
        crash.setattr(PatchDeploymentOperator, "_roll_back", lambda *a, **k: (_ for _ in ()).throw(SystemExit(1)))
        with pytest.raises(SystemExit):
            getattr(patch_op(emulator), asked.method_name)(first, event=chosen(ROLL_BACK), **(asked.kwargs or {}))
    assert svc(emulator)["source_revision_config"]["image_uri"] == NEW_IMAGE  # not rolled back yet

    with pytest.raises(AirflowFailException, match="chosen by alice") as failed:
        patch_op(emulator).execute({"ti": AskingTI(try_number=2), "task_state_store": store})

    assert len(questions) == 1  # never asked again
    assert f"rolled back to revision {before['active_revision_id']}" in str(failed.value)
    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE


def test_a_retry_after_a_promote_answer_lands_without_judging_again(
    emulator: Any, questions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    inconclusive_next_revision(emulator)  # the tracing service stays down: judging again would ask again
    store = FakeStore()
    first = {"ti": AskingTI(), "task_state_store": store}
    asked = run_until_asked(lambda: patch_op(emulator), first)
    with monkeypatch.context() as crash:
        crash.setattr(PatchDeploymentOperator, "_promote", lambda *a, **k: (_ for _ in ()).throw(SystemExit(1)))
        with pytest.raises(SystemExit):
            getattr(patch_op(emulator), asked.method_name)(first, event=chosen(PROMOTE), **(asked.kwargs or {}))
    stats_before = len([r for r in emulator.admin.requests() if r["path"] == STATS])

    ti = AskingTI(try_number=2)
    result = patch_op(emulator).execute({"ti": ti, "task_state_store": store})

    assert result["active_revision_id"] == ti.xcoms["revision_id"] == svc(emulator)["active_revision_id"]
    assert svc(emulator)["source_revision_config"]["image_uri"] == NEW_IMAGE
    assert len(questions) == 1
    assert len([r for r in emulator.admin.requests() if r["path"] == STATS]) == stats_before  # not measured again


# ------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_inconclusive": "prompt"}, "on_inconclusive must be one of 'fail', 'ask', got 'prompt'"),
        ({"response_timeout": 0}, "response_timeout must be a positive timedelta"),
        ({"response_timeout": "1h"}, "response_timeout must be a positive timedelta"),
        ({"analysis": None}, "on_inconclusive='ask' needs an analysis"),
    ],
)
def test_bad_arguments_fail_when_the_task_is_built(emulator: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        patch_op(emulator, **kwargs)
