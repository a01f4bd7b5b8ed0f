"""Each question a task asks shows its own text where a person answers it (issue 40), under ``dag.test()``.

A fleet of two (a canary, then a wave of one) whose analyses are both inconclusive asks two questions on one task
instance: the canary's, then wave 1's. Airflow 3.3.2's ``upsert_hitl_detail`` writes a detail's text only when it
creates it; the provider's root middleware (:mod:`airflow_provider.plugins.rollouts.questions`), which the API server
puts around its whole app, the Execution API included, writes each new question into it. Here the in-process
Execution API that ``dag.test()`` uses gets the plugin's root middlewares as the API server's ``init_plugins`` adds
them; each question is read back through Airflow's own REST handler (``get_hitl_detail`` of the public API, what
``GET .../hitlDetails`` and the "Required actions" page serve) while it is open, with the fleet tab and the
deployment page, then answered as the REST endpoint answers it. Nothing of the upsert is replaced.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.emulator.tracing import tracing_base_url
from airflow_provider.plugins.rollouts.plugin import RolloutsViewPlugin
from airflow_provider.tasks.inconclusive import OPTIONS
from tests.conftest import CONN_ENV, connection_json
from tests.tasks.conftest import seed

DAG_ID = "fleet_two_questions"
FLEET = ("app-0000", "app-0001")
DAG = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import FleetRolloutOperator

with DAG("fleet_two_questions", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    FleetRolloutOperator(
        task_id="fleet", deployment_names=["app-0000", "app-0001"], canary=1, wave_size=1, repo_ref="v2",
        rollback_on_failure=True, deferrable=True, poll_interval=0.1, timeout=60, retries=0, max_failures=1,
        analysis=Analysis(
            checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)], interval_seconds=0.3, count=2,
            preflight=False,
        ),
        on_inconclusive="ask", response_timeout=timedelta(minutes=10),
    )
"""


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Two deployments whose next revisions serve no traffic: every analysis is inconclusive."""
    server = deployment_service_emulator_factory(data=seed(2), frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            server.base_url,
            server.api_key,
            backoff_initial=0.05,
            backoff_max=0.2,
            tracing_base_url=tracing_base_url(server.base_url),
        ),
    )
    server.state.add_behaviour_rule(repo_ref="*", requests_per_second=200.0)
    for name in FLEET:
        deployment_id = server.state.find_deployment(name)["id"]
        server.state.set_behaviour(deployment_id, revision_id="next", requests_per_second=0.0)
    return server


@pytest.fixture
def plugin_middlewares() -> Iterator[None]:
    """The in-process Execution API of ``dag.test()``, with the plugin's root middlewares added as the API server's
    ``init_plugins`` adds them around its app (and so around its ``/execution`` mount)."""
    from airflow.sdk.execution_time import supervisor

    supervisor.in_process_api_server.cache_clear()
    app = supervisor.in_process_api_server().app
    for entry in RolloutsViewPlugin.fastapi_root_middlewares:
        app.add_middleware(entry["middleware"], *entry.get("args", []), **entry.get("kwargs", {}))
    yield
    supervisor.in_process_api_server.cache_clear()


class Person:
    """From a thread: each time the fleet task waits with a new question, read it as Airflow's REST API serves it,
    look at the fleet tab and the deployment pages, then answer ``choice`` as the REST endpoint records an answer
    (``update_hitl_detail``, then ``handle_event_submit``). A run never hangs: after ``timeout`` a waiting task is
    failed."""

    def __init__(
        self, client: TestClient, ids: dict[str, str], choice: str, questions: int, timeout: float = 120
    ) -> None:
        self.client, self.ids, self.choice, self.questions, self.timeout = client, ids, choice, questions, timeout
        self.asked: list[dict[str, Any]] = []
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _look(self, run_id: str) -> dict[str, Any]:
        params = {"dag_id": DAG_ID, "run_id": run_id, "task_id": "fleet", "map_index": -1}
        return {
            "fleet": self.client.get("/deployment-service/api/fleet", params=params).json(),
            "pages": {
                name: self.client.get(f"/deployment-service/api/deployments/{deployment_id}").json()
                for name, deployment_id in self.ids.items()
            },
        }

    def _run(self) -> None:
        from airflow.api_fastapi.core_api.routes.public.hitl import get_hitl_detail
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.trigger import handle_event_submit
        from airflow.sdk import timezone
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        deadline = time.monotonic() + self.timeout
        answered_at = 0.0
        while not self._stop.wait(0.2):
            with create_session() as session:
                ti = session.scalar(
                    select(TaskInstance).where(
                        TaskInstance.dag_id == DAG_ID,
                        TaskInstance.task_id == "fleet",
                        TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                    )
                )
                if ti is None:
                    continue
                if time.monotonic() > deadline:
                    ti.state = TaskInstanceState.FAILED
                    self.seen.append(f"still waiting after {self.timeout:g} s; failed it")
                    return
                detail = session.get(HITLDetail, ti.id)
                if detail is None:
                    continue
                if detail.response_received:
                    # Airflow may park the task after the answer resumed it: resume it again with the same answer.
                    if time.monotonic() - answered_at > 1.0:
                        self.seen.append("still waiting after the answer; resumed it again")
                        handle_event_submit(
                            TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session
                        )
                        answered_at = time.monotonic()
                    continue
                if len(self.asked) >= self.questions:
                    self.seen.append("one question too many; failed it")
                    ti.state = TaskInstanceState.FAILED
                    return
                shown = get_hitl_detail(
                    dag_id=DAG_ID, dag_run_id=ti.run_id, task_id="fleet", session=session, map_index=-1
                )
                self.asked.append({"detail": shown.model_dump(mode="json"), **self._look(ti.run_id)})
                detail.responded_by = {"id": "1", "name": "release-manager"}
                detail.responded_at = timezone.utcnow()
                detail.chosen_options = [self.choice]
                detail.params_input = {}
                session.add(detail)
                handle_event_submit(TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session)
                answered_at = time.monotonic()

    def __enter__(self) -> Person:
        # Imported here, on the test's thread: importing Airflow's REST routes on the thread while the run configures
        # SQLAlchemy's mappers on the main thread deadlocks (the import lock against the mappers' lock).
        import airflow.api_fastapi.core_api.routes.public.hitl
        import airflow.models.trigger  # noqa: F401
        from sqlalchemy.orm import configure_mappers

        configure_mappers()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_two_questions_of_one_fleet_task_each_show_their_own_text(
    emulator: Any,
    plugin_middlewares: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: Callable[..., TestClient],
    token: Callable[[str], str],
) -> None:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    dag_file = tmp_path / f"{DAG_ID}.py"
    dag_file.write_text(textwrap.dedent(DAG))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    ids = {name: emulator.state.find_deployment(name)["id"] for name in FLEET}
    with Person(view(cookie=token("admin")), ids, "Promote", questions=2) as person:
        run = bag.get_dag(DAG_ID).test()
    assert len(person.asked) == 2, f"expected two questions, got {len(person.asked)}: {person.seen}"
    assert str(run.state) == "success", person.seen

    for (wave, asked, other), seen in zip(
        (("canary", "app-0000", "app-0001"), ("wave 1", "app-0001", "app-0000")), person.asked, strict=True
    ):
        detail, fleet = seen["detail"], seen["fleet"]
        # The fleet tab shows the open question about this wave, asking about this deployment.
        question = fleet["question"]
        assert question["wave"] == wave and [item["name"] for item in question["deployments"]] == [asked], question
        revision = question["deployments"][0]["revision_id"]
        # The asked deployment's page shows its rollout asking, with the same link as the tab.
        (running,) = seen["pages"][asked]["running"]
        assert running["outcome"] == "asking" and running["question_path"] == question["question_path"], running
        # What Airflow serves (the Required actions page, GET .../hitlDetails) is this question, not the other's.
        assert detail["options"] == OPTIONS and detail["defaults"] == ["Roll back"], detail
        assert detail["response_received"] is False, detail
        assert f"Inconclusive analysis of {wave} ({asked})" in detail["subject"], detail["subject"]
        assert revision in detail["subject"] and other not in detail["subject"], detail["subject"]
        assert f"| {asked} · " in detail["body"] and f"| {other} · " not in detail["body"], detail["body"]
        assert f"revision **{revision}**" in detail["body"], detail["body"]
    # Each answer applied to its own wave: each wave's question holds its answer, both deployments landed.
    params = {"dag_id": DAG_ID, "run_id": run.run_id, "task_id": "fleet", "map_index": -1}
    after = view(cookie=token("admin")).get("/deployment-service/api/fleet", params=params).json()
    answers = [(wave["name"], (wave["question"] or {}).get("answer")) for wave in after["waves"]]
    assert [(name, answer["choice"], answer["by"]) for name, answer in answers if answer] == [
        ("canary", "Promote", "release-manager"),
        ("wave 1", "Promote", "release-manager"),
    ], answers
    for name in FLEET:
        after = emulator.state.find_deployment(name)
        assert after["source_revision_config"]["repo_ref"] == "v2" and after["status"] == "READY", after


# ------------------------------------------------------------------------------------ the middleware on its own
def _call(
    middleware_app: Any, method: str, path: str, body: bytes, chunks: int = 1
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Send one request through ``middleware_app`` (wrapping a recording app); the messages sent back, and the
    body the wrapped app read."""
    import asyncio

    parts = [body[i * len(body) // chunks : (i + 1) * len(body) // chunks] for i in range(chunks)]
    incoming = [
        {"type": "http.request", "body": part, "more_body": index < chunks - 1} for index, part in enumerate(parts)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(middleware_app(scope, receive, send))
    return sent, middleware_app.app.read


class Recording:
    """An ASGI app that reads the whole body and answers ``status``."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.read: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            self.read.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})


UPSERT = "/execution/hitlDetails/0196d1a2-3b4c-7d5e-8f90-a1b2c3d4e5f6"


@pytest.mark.parametrize(
    ("method", "path", "options", "status", "rewritten"),
    [
        ("POST", UPSERT, OPTIONS, 201, True),  # this provider's question, stored: rewritten
        ("POST", UPSERT.removeprefix("/execution"), OPTIONS, 201, True),  # the in-process Execution API
        ("POST", UPSERT, ["Approve", "Reject"], 201, False),  # another operator's question: never
        ("POST", UPSERT, OPTIONS, 409, False),  # refused by Airflow: nothing to rewrite
        ("POST", UPSERT, OPTIONS, 401, False),  # not the task's own token: nothing
        ("GET", UPSERT, OPTIONS, 200, False),  # reading it
        ("PATCH", UPSERT, OPTIONS, 200, False),  # answering it
        ("POST", "/api/v2/dags/d/dagRuns/r/taskInstances/t/-1/hitlDetails", OPTIONS, 200, False),
        ("POST", "/deployment-service/api/fleet/abort", OPTIONS, 200, False),
    ],
)
def test_the_middleware_hands_every_request_on_untouched_and_rewrites_only_this_providers_questions(
    monkeypatch: pytest.MonkeyPatch, method: str, path: str, options: list[str], status: int, rewritten: bool
) -> None:
    import json

    from airflow_provider.plugins.rollouts import questions

    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(questions, "rewrite_question", lambda ti_id, payload: calls.append((ti_id, payload)))
    payload = {"ti_id": UPSERT.rsplit("/", 1)[1], "options": options, "subject": "Inconclusive analysis of wave 1"}
    body = json.dumps(payload).encode()
    sent, read = _call(questions.QuestionTextMiddleware(Recording(status)), method, path, body, chunks=3)
    assert b"".join(read) == body  # the wrapped app read the body as sent
    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == status and sent[1]["body"] == b'{"ok": true}'
    assert calls == ([(payload["ti_id"], payload)] if rewritten else [])


def test_a_question_of_another_operator_is_never_rewritten() -> None:
    from airflow_provider.plugins.rollouts.questions import rewrite_question

    other = {"options": ["Approve", "Reject"], "subject": "Deploy?", "body": "x"}
    assert rewrite_question("0196d1a2-3b4c-7d5e-8f90-a1b2c3d4e5f6", other) is False  # before any database access
