"""End to end (issue 32): an inconclusive analysis asks a person, who answers through Airflow's REST API.

Real Airflow services (SQLite + LocalExecutor) parse ``tests/e2e/dags/inconclusive_ask.py``; the emulator's tracing
service answers 503 to every stats request, so every analysis is inconclusive and its task parks in
``awaiting_input`` with a HITL question. Five runs at once, each on deployments of its own. The patch task
(``roll_out``):

- answered "Roll back" with ``PATCH /api/v2/dags/.../taskInstances/roll_out/-1/hitlDetails``: the run fails and
  the revision that served before serves again;
- answered "Promote": the run succeeds and the new revision serves;
- not answered: the scheduler's timeout sweep answers the default after ``response_timeout``: rolled back.

The fleet task (``FleetRolloutOperator``, ``fleet``) on two deployments, a canary of one, then one wave:

- the canary's question answered "Roll back": the canary serves its previous image again, the wave is never
  patched, and the run fails naming who answered;
- "Promote", twice (the canary's question, then the wave's): both deployments serve the new image.

While a question is open, the Rollouts view (the provider's plugin in the real api-server) shows it with the link
to Airflow's "Required actions" page: the deployment's page shows its rollout ``asking``, and the fleet tab the open
question about the wave. Every outcome is checked on the emulator's own state.

On the same stack, ``tests/e2e/dags/fleet_abort.py``: two deferrable fleets waiting in the real triggerer (a
ten-minute pause after the canary; the canary's ten-minute bake) are aborted through the Rollouts view's API
(``stop``; ``rollback``); the view resumes each task at once, and each run ends within a minute and a half with the
emulator showing what the mode promised.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_airflow import AirflowApi, Emulator, wait_until
from e2e_scenarios import DagRun, check_one_new_revision, check_run, revisions
from e2e_stack import Stack, airflow_stack, record_timing

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "dags"
ASK_DAG, TIMEOUT_DAG, FLEET_DAG = "inconclusive_ask", "inconclusive_ask_timeout", "inconclusive_ask_fleet"
RESPONSE_TIMEOUT = 20.0
THINKING_SECONDS = 8.0
"""How long the "person" looks at a question before answering. Airflow 3.3.2 fails a task answered within a
few seconds of parking: the executor's late "success" of the run that parked it lands after the answer queued
the resume (its stale-success race, apache/airflow#66374 and #72716: "finished with state success, but the task
instance's state attribute is queued"), measured here on an answer 1 s after ``awaiting_input``."""
ASK_TIMEOUT = 240.0
RUN_TIMEOUT = 300.0
OPTIONS = ["Promote", "Roll back", "Analyse another interval"]
TARGETS = {"roll back": "checkout-api-staging", "promote": "search-staging", "timeout": "ledger-service-staging"}
FLEETS = {
    "fleet roll back": ("catalog-graph-staging", "onboarding-flow-staging"),
    "fleet promote": ("pricing-engine-dev", "recommendation-agent-prod"),
}
"""Each fleet's deployments (image ones, of no other case), in rollout order: the canary first."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("e2e-inconclusive")
    extra_env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "E2E_RESPONSE_TIMEOUT": str(RESPONSE_TIMEOUT),
        # how often the scheduler answers questions past their response timeout (15 s by default)
        "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
    }
    with airflow_stack("sqlite-inconclusive", workdir, Path(sys.executable).parent, extra_env=extra_env) as stack:
        yield stack


def hitl_path(run: DagRun, task_id: str = "roll_out") -> str:
    return f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/{task_id}/-1/hitlDetails"


@dataclass
class Question:
    """One question as the person saw it.

    :param detail: its HITL detail (``GET .../hitlDetails``) when first seen open.
    :param look: what :attr:`Person.look` recorded then.
    :param answer: the HITL detail the answer's ``PATCH`` returned.
    """

    detail: dict[str, Any]
    look: dict[str, Any]
    answer: dict[str, Any] | None = None


@dataclass
class Person:
    """Answers the questions of one run's task through the REST API, in turn, each :data:`THINKING_SECONDS` after
    first seeing it open, and keeps what it saw.

    :param run: the run.
    :param task_id: the task that asks.
    :param choices: the answer to each question, in turn.
    :param look: what to record while a question is open (called once per question, when first seen).
    """

    run: DagRun
    task_id: str
    choices: Sequence[str]
    look: Callable[[], dict[str, Any]]
    questions: list[Question] = field(default_factory=list)
    seen_at: float | None = None
    last_state: str | None = None

    @property
    def path(self) -> str:
        return hitl_path(self.run, self.task_id)

    @property
    def done(self) -> bool:
        return len(self.questions) == len(self.choices) and self.questions[-1].answer is not None

    def describe(self) -> str:
        answered = [question.answer["chosen_options"] for question in self.questions if question.answer]
        return f"{self.run.run_id}: {self.task_id} {self.last_state}, answered {answered} of {list(self.choices)}"

    def step(self, api: AirflowApi) -> None:
        """Look once: note a question newly open, answer the one open for :data:`THINKING_SECONDS`."""
        states = {ti["task_id"]: ti["state"] for ti in api.task_instances(*self.run.key)}
        self.last_state = states.get(self.task_id)
        if self.last_state in ("failed", "success"):
            raise AssertionError(f"the task ended before every question was answered: {self.describe()}")
        if self.last_state != "awaiting_input":
            return
        response = api.http.get(self.path)
        if response.status_code != 200 or response.json()["response_received"]:
            return  # not written yet, or the last answer not taken yet
        if self.seen_at is None:
            assert len(self.questions) < len(self.choices), f"one question too many: {self.describe()}"
            self.seen_at = time.monotonic()
            self.questions.append(Question(dict(response.json()), self.look()))
        elif time.monotonic() - self.seen_at >= THINKING_SECONDS:
            choice = self.choices[len(self.questions) - 1]
            body = {"chosen_options": [choice], "params_input": {}}
            self.questions[-1].answer = api.request("PATCH", self.path, json=body)
            self.seen_at = None


def answer_all(api: AirflowApi, people: Sequence[Person]) -> None:
    """Let every person answer every question (bounded by :data:`ASK_TIMEOUT`)."""

    def answered() -> bool:
        for person in people:
            if not person.done:
                person.step(api)
        return all(person.done for person in people)

    wait_until(
        answered,
        timeout=ASK_TIMEOUT,
        what="every question is asked and answered",
        interval=1.0,
        diagnostics=lambda: "\n".join(person.describe() for person in people),
    )


def deployment_page(api: AirflowApi, deployment_id: str) -> dict[str, Any]:
    """The Rollouts view's page of one deployment (its ``running`` rollouts)."""
    return dict(api.request("GET", f"/deployment-service/api/deployments/{deployment_id}"))


def patch_look(emulator: Emulator, api: AirflowApi, name: str) -> Callable[[], dict[str, Any]]:
    def look() -> dict[str, Any]:
        deployment = emulator.deployment(name)
        return {"deployment": deployment, "page": deployment_page(api, deployment["id"])}

    return look


def fleet_look(emulator: Emulator, api: AirflowApi, run: DagRun, names: Sequence[str]) -> Callable[[], dict[str, Any]]:
    def look() -> dict[str, Any]:
        deployments = {name: emulator.deployment(name) for name in names}
        params = {"dag_id": run.dag_id, "run_id": run.run_id, "task_id": "fleet", "map_index": -1}
        return {
            "deployments": deployments,
            "pages": {name: deployment_page(api, found["id"]) for name, found in deployments.items()},
            "fleet": api.request("GET", "/deployment-service/api/fleet", params=params),
        }

    return look


def check_patch_question(question: Question, image: str) -> None:
    """The patch task's question and what the Rollouts view showed while it was open."""
    detail, look = question.detail, question.look
    assert detail["options"] == OPTIONS, detail
    assert detail["defaults"] == ["Roll back"] and detail["response_received"] is False, detail
    assert "Inconclusive" in detail["subject"] and "tracing error_rate" in detail["body"], detail
    assert look["deployment"]["source_revision_config"]["image_uri"] == image, "the revision serves while asked"
    (running,) = look["page"]["running"]
    assert running["outcome"] == "asking" and running["question_path"].endswith(
        "/tasks/roll_out/required_actions?map_index=-1"
    ), running


def check_fleet_question(question: Question, wave: str, asked: str, image: str) -> None:
    """A fleet question while open: the asked deployment serves the new image, the fleet tab shows the question
    about ``wave`` asking about ``asked``, and the deployment's page shows it ``asking`` with the same link."""
    look = question.look
    assert look["deployments"][asked]["source_revision_config"]["image_uri"] == image, "the revision serves while asked"
    shown = look["fleet"]["question"]
    assert shown is not None and shown["wave"] == wave, look["fleet"]
    assert [item["name"] for item in shown["deployments"]] == [asked] and shown["answer"] is None, shown
    assert shown["question_path"].endswith("/tasks/fleet/required_actions?map_index=-1"), shown
    (running,) = look["pages"][asked]["running"]
    assert running["outcome"] == "asking" and running["question_path"] == shown["question_path"], running


def test_a_person_answers_an_inconclusive_analysis_through_the_rest_api(stack: Stack) -> None:
    emulator, api = stack.emulator, stack.airflow.api
    assert api is not None, "the Airflow services are not up"
    stamp = int(time.time())
    before = {case: emulator.deployment(name) for case, name in TARGETS.items()}
    fleet_names = [name for names in FLEETS.values() for name in names]
    fleet_before = {name: emulator.deployment(name) for name in fleet_names}
    before_revisions = revisions(emulator)
    for deployment in [*before.values(), *fleet_before.values()]:
        emulator.set_behaviour(deployment["id"], revision_id="next", requests_per_second=200, error_rate=0.0)
    # The tracing service is down for stats: every analysis is inconclusive.
    emulator._call(
        "POST",
        "/faults",
        {"kind": "status", "method": "POST", "path": "/tracing/runs/stats", "status_code": 503, "count": None},
    )
    cases = [*TARGETS, *FLEETS]
    images = {case: f"registry.example.com/acme/{case.replace(' ', '-')}:{stamp}" for case in cases}
    runs = {
        case: DagRun(
            TIMEOUT_DAG if case == "timeout" else ASK_DAG,
            f"{case.replace(' ', '-')}-{stamp}",
            {"deployment_name": TARGETS[case], "image_uri": images[case]},
        )
        for case in TARGETS
    }
    for case, names in FLEETS.items():
        conf = {"deployment_names": ",".join(names), "image_uri": images[case]}
        runs[case] = DagRun(FLEET_DAG, f"{case.replace(' ', '-')}-{stamp}", conf)
    people = {
        case: Person(runs[case], "roll_out", [choice], patch_look(emulator, api, TARGETS[case]))
        for case, choice in (("roll back", "Roll back"), ("promote", "Promote"))
    }
    for case, choices in (("fleet roll back", ["Roll back"]), ("fleet promote", ["Promote", "Promote"])):
        people[case] = Person(runs[case], "fleet", choices, fleet_look(emulator, api, runs[case], FLEETS[case]))
    api.wait_for_dags([ASK_DAG, TIMEOUT_DAG, FLEET_DAG], timeout=120)
    started = time.monotonic()
    for run in runs.values():
        api.trigger(run.dag_id, run.run_id, run.conf)

    answer_all(api, list(people.values()))
    record_timing(stack.name, **{"asked and answered": time.monotonic() - started})
    states = api.wait_for_runs([run.key for run in runs.values()], timeout=RUN_TIMEOUT)
    record_timing(stack.name, **{"five runs": time.monotonic() - started})
    expected = {"roll back": "failed", "promote": "success", "timeout": "failed"}
    expected |= {"fleet roll back": "failed", "fleet promote": "success"}
    for case, run in runs.items():
        check_run(stack, run, states[run.key], expected[case])
    # Each failed for the reason its answer gives (not for Airflow's stale-success race, which also fails a run).
    assert not stack.airflow.stale_success_races(), stack.airflow.stale_success_races()
    rolled_back = api.task_log(*runs["roll back"].key, "roll_out", try_number=1).exception_values()
    assert any("'Roll back', chosen by admin" in error and "rolled back" in error for error in rolled_back), rolled_back
    timed_out = api.task_log(*runs["timeout"].key, "roll_out", try_number=1).exception_values()
    assert any("no answer within the response timeout" in error for error in timed_out), timed_out

    # The patch task's questions, and the Rollouts view while they were open.
    for case in ("roll back", "promote"):
        (question,) = people[case].questions
        check_patch_question(question, images[case])
    answered = people["roll back"].questions[0].answer
    assert answered is not None and answered["responded_by"]["name"] == "admin", answered

    # The patch task on the emulator after each answer.
    after = {case: emulator.deployment(name) for case, name in TARGETS.items()}
    for case in ("roll back", "timeout"):
        assert (
            after[case]["source_revision_config"]["image_uri"] == before[case]["source_revision_config"]["image_uri"]
        ), f"{case}: not rolled back: {after[case]['source_revision_config']}"
        assert after[case]["status"] == "READY", after[case]
    assert after["promote"]["source_revision_config"]["image_uri"] == images["promote"]
    promoted = next(r for r in after["promote"]["revisions"] if r["id"] == after["promote"]["active_revision_id"])
    assert promoted["source_revision_config"]["image_uri"] == images["promote"] and promoted["status"] == "DEPLOYED"
    timeout_detail = api.request("GET", hitl_path(runs["timeout"]))
    assert timeout_detail["chosen_options"] == ["Roll back"] and timeout_detail["responded_by_user"] is None

    # The fleet rolled back: one question, about the canary, showing its measurements; the wave never patched.
    canary, wave = FLEETS["fleet roll back"]
    (question,) = people["fleet roll back"].questions
    detail = question.detail
    assert detail["options"] == OPTIONS and detail["defaults"] == ["Roll back"], detail
    assert "canary" in detail["subject"] and canary in detail["subject"], detail
    assert f"{canary} · tracing error_rate" in detail["body"], detail
    check_fleet_question(question, "canary", canary, images["fleet roll back"])
    assert question.look["deployments"][wave]["latest_revision_id"] == fleet_before[wave]["latest_revision_id"]
    stopped = api.task_log(*runs["fleet roll back"].key, "fleet", try_number=1).exception_values()
    assert any(
        "fleet rollout stopped: the canary failed" in error and "'Roll back', chosen by admin" in error
        for error in stopped
    ), stopped
    for name in (canary, wave):
        now, then = emulator.deployment(name), fleet_before[name]
        assert now["source_revision_config"]["image_uri"] == then["source_revision_config"]["image_uri"], (
            f"{name} does not serve its previous image: {now['source_revision_config']}"
        )
        assert now["status"] == "READY", now
    kept = [revision["id"] for revision in emulator.deployment(wave)["revisions"]]
    assert kept == [revision["id"] for revision in before_revisions[wave]], f"{wave} was patched: {kept}"

    # The fleet promoted: the canary's question, then the wave's; both serve the new image, in one new revision each.
    canary, wave = FLEETS["fleet promote"]
    first, second = people["fleet promote"].questions
    assert canary in first.detail["subject"] and first.detail["response_received"] is False, first.detail
    check_fleet_question(first, "canary", canary, images["fleet promote"])
    assert first.look["deployments"][wave]["latest_revision_id"] == fleet_before[wave]["latest_revision_id"]
    assert second.detail["options"] == OPTIONS and second.detail["response_received"] is False, second.detail
    # Each question shows its own text through the REST API (and so on the Required actions page), issue 40:
    # Airflow 3.3.2 keeps the first's, the provider's API-server middleware writes the second's.
    assert "wave 1" in second.detail["subject"] and wave in second.detail["subject"], second.detail
    assert canary not in second.detail["subject"] and f"{canary} · " not in second.detail["body"], second.detail
    assert f"{wave} · tracing error_rate" in second.detail["body"], second.detail
    check_fleet_question(second, "wave 1", wave, images["fleet promote"])
    for name in (canary, wave):
        check_one_new_revision(before_revisions, emulator, name)
        serving = emulator.deployment(name)["source_revision_config"]["image_uri"]
        assert serving == images["fleet promote"], f"{name} serves {serving}"


ABORTS = {
    "stop": ("billing-worker-prod", "search-sandbox"),
    "rollback": ("pricing-engine-sandbox", "inventory-sync-staging"),
}
"""The aborted fleets' deployments (image ones, of no other case), canary first: ``stop`` aborts ``fleet_abort_pause``
in its pause after the canary, ``rollback`` aborts ``fleet_abort_bake`` while its canary bakes."""
ABORT_DAGS = {"stop": "fleet_abort_pause", "rollback": "fleet_abort_bake"}
ABORTED_WITHIN = 90.0
"""A run must end this soon after its abort (each DAG waits ten minutes)."""


def fleet_tab(api: AirflowApi, run: DagRun) -> dict[str, Any]:
    params = {"dag_id": run.dag_id, "run_id": run.run_id, "task_id": "fleet", "map_index": -1}
    return dict(api.request("GET", "/deployment-service/api/fleet", params=params))


def test_an_abort_from_the_view_resumes_a_fleet_deferred_in_the_triggerer_at_once(stack: Stack) -> None:
    """Two deferrable fleets wait in the real triggerer: one in a ten-minute pause after its canary, one in its
    canary's ten-minute bake. The admin aborts each through the Rollouts view's API (``stop`` the moment its task
    parks, ``rollback`` after a look); the view resumes each task, from its timer once parked 8 s (``wakes_in``) or in
    the same transaction (``woken``), and each run ends within :data:`ABORTED_WITHIN`: the
    paused fleet with its canary serving the new image and its wave never patched, the baking one with its canary
    serving its previous image again. The audit log and the fleet tab name the admin."""
    emulator, api = stack.emulator, stack.airflow.api
    assert api is not None, "the Airflow services are not up"
    stamp = int(time.time())
    before_revisions = revisions(emulator)
    before = {name: emulator.deployment(name) for names in ABORTS.values() for name in names}
    images = {mode: f"registry.example.com/acme/abort-{mode}:{stamp}" for mode in ABORTS}
    runs = {
        mode: DagRun(
            ABORT_DAGS[mode], f"abort-{mode}-{stamp}", {"deployment_names": ",".join(names), "image_uri": images[mode]}
        )
        for mode, names in ABORTS.items()
    }
    api.wait_for_dags(list(ABORT_DAGS.values()), timeout=120)
    for run in runs.values():
        api.trigger(run.dag_id, run.run_id, run.conf)

    def waiting(mode: str) -> Callable[[], dict[str, Any] | None]:
        """The fleet tab once the task waits where the abort is to find it (deferred), else ``None``."""

        def look() -> dict[str, Any] | None:
            run = runs[mode]
            states = {ti["task_id"]: ti["state"] for ti in api.task_instances(*run.key)}
            if states.get("fleet") in ("failed", "success"):
                raise AssertionError(f"{run.run_id}: the task ended before the abort ({states})")
            if states.get("fleet") != "deferred":
                return None
            shown = fleet_tab(api, run)
            canary = (shown.get("waves") or [{}])[0].get("rows") or [{}]
            if mode == "stop":  # the canary landed and the pause began
                return shown if shown.get("resume_at") and canary[0].get("outcome") == "landed" else None
            return (
                shown
                if emulator.deployment(ABORTS[mode][0])["source_revision_config"].get("image_uri") == images[mode]
                else None
            )

        return look

    answers: dict[str, dict[str, Any]] = {}
    asked_at: dict[str, float] = {}

    def abort(mode: str) -> None:
        run = runs[mode]
        body = {"dag_id": run.dag_id, "run_id": run.run_id, "task_id": "fleet", "map_index": -1, "mode": mode}
        answers[mode] = api.request(
            "POST", "/deployment-service/api/fleet/abort", json={**body, "request_id": f"e2e-abort-{mode}-{stamp}"}
        )
        asked_at[mode] = time.monotonic()

    # The paused fleet is aborted the moment it is seen deferred: the view wakes it only once it has been parked
    # WAKE_SETTLE_SECONDS (from its timer), outside Airflow 3.3.2's stale-success window (a resume within a second of
    # deferring lost that race here, failing the run without the abort's rollbacks, before the view waited).
    wait_until(waiting("stop"), timeout=180, what=f"{runs['stop'].run_id} waits deferred", interval=0.5)
    abort("stop")
    # The baking one as a person would, after a look: parked long enough, it is woken at once.
    wait_until(waiting("rollback"), timeout=180, what=f"{runs['rollback'].run_id} waits deferred", interval=1.0)
    time.sleep(THINKING_SECONDS)
    abort("rollback")
    stop = answers["stop"]  # (seen late on a slow machine, it had been parked long enough: woken at once)
    assert (stop["woken"] is None and 0 < stop["wakes_in"] <= 8) or stop["woken"] == "pause", answers
    assert answers["rollback"]["woken"] == "watch" and answers["rollback"]["wakes_in"] is None, answers

    states = api.wait_for_runs([run.key for run in runs.values()], timeout=ABORTED_WITHIN)
    record_timing(stack.name, **{"aborted runs end": time.monotonic() - min(asked_at.values())})
    # Each failed for its abort, not for Airflow's stale-success race (which fails a run too).
    assert not stack.airflow.stale_success_races(), stack.airflow.stale_success_races()
    for run in runs.values():
        check_run(stack, run, states[run.key], "failed")
        errors = api.task_log(*run.key, "fleet", try_number=1).exception_values()
        assert any("aborted by admin from the Rollouts view" in error for error in errors), errors
        shown = fleet_tab(api, run)
        assert shown["stopped"].startswith("aborted by admin from the Rollouts view"), shown["stopped"]

    canary, wave = ABORTS["stop"]  # the canary stays on the new image; the wave was never patched
    assert emulator.deployment(canary)["source_revision_config"]["image_uri"] == images["stop"]
    kept = [revision["id"] for revision in emulator.deployment(wave)["revisions"]]
    assert kept == [revision["id"] for revision in before_revisions[wave]], f"{wave} was patched: {kept}"
    canary, wave = ABORTS["rollback"]  # the canary serves its previous image again; the wave was never patched
    now = emulator.deployment(canary)
    assert now["source_revision_config"]["image_uri"] == before[canary]["source_revision_config"]["image_uri"], now
    assert now["status"] == "READY" and now["active_revision_id"] == now["latest_revision_id"], now
    kept = [revision["id"] for revision in emulator.deployment(wave)["revisions"]]
    assert kept == [revision["id"] for revision in before_revisions[wave]], f"{wave} was patched: {kept}"

    audit = api.request("GET", "/api/v2/eventLogs", params={"event": "deployment_service.abort"})["event_logs"]
    mine = {log["run_id"]: log for log in audit if log["run_id"] in {run.run_id for run in runs.values()}}
    assert {log["owner"] for log in mine.values()} == {"admin"} and len(mine) == 2, audit


def test_a_patch_marked_failed_while_it_judges_on_the_worker_is_rolled_back(stack: Stack) -> None:
    """Issue 39: the task instance marked failed through the REST API mid-analysis (on the worker): Airflow's
    ``SIGTERM`` calls ``on_kill``, which records the verdict and sends the rollback; the old build serves again."""
    emulator, api = stack.emulator, stack.airflow.api
    assert api is not None, "the Airflow services are not up"
    name = "support-bot-dev"
    before = emulator.deployment(name)
    old_image = before["source_revision_config"]["image_uri"]
    image = f"registry.example.com/acme/support-bot:killed-{int(time.time())}"
    run = DagRun("killed_while_judging", f"killed-{int(time.time())}", {"deployment_name": name, "image_uri": image})
    api.wait_for_dags([run.dag_id], timeout=120)
    started = time.monotonic()
    api.trigger(run.dag_id, run.run_id, run.conf)

    def analysing() -> bool:
        current = emulator.deployment(name)
        live = current["source_revision_config"]["image_uri"] == image and current["status"] == "READY"
        return live and api.task_log(*run.key, "roll_out").mentions("Analysis round 2/")

    wait_until(analysing, timeout=90, what="the new revision is live and analysed", interval=0.5)
    task_path = f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/roll_out"
    api.request("PATCH", task_path, json={"new_state": "failed"})

    def old_build_serves() -> bool:
        current = emulator.deployment(name)
        settled = current["active_revision_id"] == current["latest_revision_id"] and current["status"] == "READY"
        return settled and current["source_revision_config"]["image_uri"] == old_image

    wait_until(old_build_serves, timeout=45, what=f"{name} serves {old_image} again", interval=0.5)
    record_timing(stack.name, **{"marked failed mid-analysis, rolled back": time.monotonic() - started})
    log = api.task_log(*run.key, "roll_out")
    assert log.mentions("could not be judged: the task was killed while judging it"), log.messages()[-15:]
    assert log.mentions("Rollback of revision"), log.messages()[-15:]
    assert api.run_state(*run.key) == "failed"
