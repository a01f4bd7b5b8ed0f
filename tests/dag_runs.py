"""Running the example DAGs with ``dag.test()``: shared by the example-DAG and the reliability tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.conftest import REPO_ROOT, connection_json

DAGS = REPO_ROOT / "example_dags"


def example_emulator(factory: Callable[..., Any], monkeypatch: Any) -> Any:
    """A real-time emulator (builds take 1 s) behind the default connection, as the example DAGs use it.

    :param factory: the ``deployment_service_emulator_factory`` fixture.
    :param monkeypatch: the test's ``monkeypatch`` (the connection is an environment variable).
    """
    server = factory(frozen_clock=False, build_seconds=1.0, ready_seconds=0.5)
    monkeypatch.setenv(
        "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT",
        connection_json(server.base_url, server.api_key, backoff_initial=0.05, backoff_max=0.2),
    )
    return server


def load_dag(dag_id: str) -> Any:
    """The example DAG ``dag_id``, parsed from its file (import errors fail the test)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def run_dag(dag_id: str, **conf: Any) -> tuple[str, dict[str, str]]:
    """Run the DAG once; return the run state and each task's state (mapped tasks as ``task[i]``)."""
    run = load_dag(dag_id).test(run_conf=conf or None)
    states = {}
    for ti in run.get_task_instances():
        name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        states[name] = str(ti.state)
    return str(run.state), states


class HumanResponder:
    """Answer a human-in-the-loop task from a thread, the way the HITL REST endpoint does
    (``update_hitl_detail`` in ``airflow/api_fastapi/core_api/routes/public/hitl.py``): record the
    response on the task's HITL detail row, then resume the parked task with ``handle_event_submit``.

    ``dag.test()`` keeps a run alive while a task waits for input. So that a run can never hang a test,
    a task still waiting ``timeout`` seconds after the responder started is failed instead of answered
    (``answered`` stays unset and ``seen`` says what the responder saw).

    :param dag_id: the DAG.
    :param task_id: the human-in-the-loop task.
    :param choice: the option to choose (``"Approve"``, ``"Reject"``...).
    :param before_answer: called (in the thread) just before answering, e.g. to record the service state.
    :param timeout: seconds to wait for the task to ask.
    """

    def __init__(
        self,
        dag_id: str,
        task_id: str,
        choice: str,
        *,
        before_answer: Callable[[], None] | None = None,
        timeout: float = 60,
    ) -> None:
        self.dag_id, self.task_id, self.choice = dag_id, task_id, choice
        self.before_answer = before_answer
        self.timeout = timeout
        self.subject: str | None = None
        self.body: str | None = None
        self.seen: list[str] = []
        self.answered = threading.Event()
        self._stop = threading.Event()
        self._ignored = self._waiting_ids()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _waiting(self, session: Any) -> list[Any]:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        query = select(TaskInstance).where(
            TaskInstance.dag_id == self.dag_id,
            TaskInstance.task_id == self.task_id,
            TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
        )
        return list(session.scalars(query))

    def _waiting_ids(self) -> set[Any]:
        from airflow.utils.session import create_session

        with create_session() as session:
            return {ti.id for ti in self._waiting(session)}

    def _run(self) -> None:
        from airflow.models.hitl import HITLDetail
        from airflow.models.trigger import handle_event_submit
        from airflow.sdk import timezone
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set():
            with create_session() as session:
                waiting = [ti for ti in self._waiting(session) if ti.id not in self._ignored]
                if waiting and time.monotonic() < deadline:
                    ti = waiting[0]
                    detail = session.get(HITLDetail, ti.id)
                    if detail is None:  # parked before its request was written: look again
                        time.sleep(0.1)
                        continue
                    if self.before_answer is not None:
                        self.before_answer()
                    self.subject, self.body = detail.subject, detail.body
                    detail.responded_by = {"id": "1", "name": "release-manager"}
                    detail.responded_at = timezone.utcnow()
                    detail.chosen_options = [self.choice]
                    detail.params_input = {}
                    session.add(detail)
                    handle_event_submit(
                        TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session
                    )
                    self.answered.set()
                    answered = ti.id
                    break
                if time.monotonic() >= deadline:
                    late = f"{self.task_id} did not ask within {self.timeout:g} s"
                    if late not in self.seen:
                        self.seen.append(late)
                    for ti in waiting:  # never hang the run: fail what still waits
                        ti.state = TaskInstanceState.FAILED
                        self.seen.append(f"{self.task_id} asked too late; failed it")
                    if waiting:
                        return
            time.sleep(0.2)
        else:
            return
        self._resumed(answered)

    def _resumed(self, ti_id: Any) -> None:
        """See the answered task leave ``AWAITING_INPUT``. Airflow may still be parking it as it is answered (its own
        ``AWAITING_INPUT`` write lands after the resume, and ``dag.test()`` then waits forever): resume it again
        while it waits with this answer recorded; fail it if it still waits after 30 s, so a run never hangs."""
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.trigger import handle_event_submit
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        deadline = time.monotonic() + 30
        while not self._stop.wait(0.5):
            with create_session() as session:
                ti = session.get(TaskInstance, ti_id)
                if ti is None or ti.state != TaskInstanceState.AWAITING_INPUT:
                    return
                detail = session.get(HITLDetail, ti_id)
                if detail is None or detail.chosen_options != [self.choice]:
                    return  # another question: not this answer's
                if time.monotonic() >= deadline:
                    ti.state = TaskInstanceState.FAILED
                    self.seen.append(f"{self.task_id} still waited 30 s after it was answered; failed it")
                    return
                self.seen.append(f"{self.task_id} still waited after it was answered; resumed it again")
                handle_event_submit(TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session)

    def __enter__(self) -> HumanResponder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class WhenRevisionAppears:
    """Run ``action`` from a watcher thread as soon as deployment ``name`` gets a new revision (simulates a
    colleague or the platform acting while our rollout is in flight); gives up after 60 s.

    :param emulator: the emulator serving the deployment.
    :param name: the deployment's name.
    :param action: called once, with the deployment as the emulator's control API shows it.
    :param in_process: read the emulator's state directly (an emulator in this process) instead of through
        its control API: untouched by faults injected on requests.
    :param poll: seconds between looks.
    """

    def __init__(
        self,
        emulator: Any,
        name: str,
        action: Callable[[dict[str, Any]], None],
        *,
        in_process: bool = False,
        poll: float = 0.01,
    ) -> None:
        self.find: Callable[[str], dict[str, Any]] = (
            emulator.state.find_deployment if in_process else emulator.admin.find_deployment
        )
        self.name, self.action, self.poll = name, action, poll
        self.before = self.find(name)["latest_revision_id"]
        self.stop = threading.Event()
        self.fired = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        deadline = time.monotonic() + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            deployment = self.find(self.name)
            if deployment["latest_revision_id"] != self.before:
                self.action(deployment)
                self.fired.set()
                return
            time.sleep(self.poll)

    def __enter__(self) -> WhenRevisionAppears:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
