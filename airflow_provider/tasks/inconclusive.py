"""Asking a person when an analysis is inconclusive (``on_inconclusive="ask"``), through Airflow's human-in-the-loop
(the standard provider's HITL machinery: :mod:`airflow.providers.standard.operators.hitl`).

The task writes the question as a HITL detail of its own task instance (the subject, the measurements in the body,
the choices :data:`OPTIONS`, :data:`ROLL_BACK` as the default a timeout takes) and waits for the answer: in
Airflow's ``awaiting_input`` state on Airflow 3.3+ (no trigger, no triggerer: the answer, through the UI's
"Required actions" page or ``PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/
hitlDetails``, resumes the task; the scheduler answers the default when ``response_timeout`` passes), deferred to
the standard provider's ``HITLTrigger`` on Airflow 3.1 and 3.2. The task resumes with the answer (:func:`read_answer`).

The patch task records the question and then the answer in its ``task_state_store`` record before anything acts on
them, and a retry starts from the record (:mod:`~airflow_provider.tasks.patch.asking`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator

__all__ = [
    "ANALYSE_AGAIN",
    "DEFAULT_RESPONSE_TIMEOUT",
    "ON_INCONCLUSIVE",
    "OPTIONS",
    "PROMOTE",
    "ROLL_BACK",
    "Answer",
    "ask_person",
    "checked_on_inconclusive",
    "question_text",
    "read_answer",
    "required_actions_path",
]

PROMOTE = "Promote"
"""The answer that lands the revision as it is (its bake, when one follows, still runs)."""
ROLL_BACK = "Roll back"
"""The answer that rolls the revision back (counted as a failed revision); also what a timeout answers."""
ANALYSE_AGAIN = "Analyse another interval"
"""The answer that measures the revision again, for the analysis's whole length, then judges (or asks) again."""
OPTIONS = [PROMOTE, ROLL_BACK, ANALYSE_AGAIN]
"""The choices a person is given, in this order."""
ON_INCONCLUSIVE = ("fail", "ask")
"""What an inconclusive analysis does: ``fail`` (counted as failed: rolled back, or the task fails) or ``ask``."""
DEFAULT_RESPONSE_TIMEOUT = timedelta(hours=1)
"""How long a question waits for an answer by default; then it is rolled back."""


def checked_on_inconclusive(value: Any, response_timeout: Any) -> tuple[str, timedelta]:
    """``on_inconclusive`` and ``response_timeout`` checked when the task is built; ``ask`` also needs Airflow's
    human-in-the-loop (Airflow 3.1+ with the standard provider).

    :param value: ``fail`` or ``ask``.
    :param response_timeout: how long to wait for an answer (a ``timedelta`` or seconds).
    """
    if value not in ON_INCONCLUSIVE:
        raise ValueError(f"on_inconclusive must be one of {', '.join(map(repr, ON_INCONCLUSIVE))}, got {value!r}")
    if isinstance(response_timeout, (int, float)) and not isinstance(response_timeout, bool):
        response_timeout = timedelta(seconds=response_timeout)
    if not isinstance(response_timeout, timedelta) or response_timeout.total_seconds() <= 0:
        raise ValueError(
            f"response_timeout must be a positive timedelta (or seconds): how long an inconclusive analysis waits "
            f"for an answer before rolling back; got {response_timeout!r}"
        )
    if value == "ask":
        why = _hitl_missing()
        if why is not None:
            raise ValueError(f"on_inconclusive='ask' needs Airflow's human-in-the-loop: {why}")
    return str(value), response_timeout


def _hitl_missing() -> str | None:
    """Why Airflow's human-in-the-loop cannot be used here, or ``None``."""
    try:
        import airflow.providers.standard.triggers.hitl
        import airflow.sdk.execution_time.hitl  # noqa: F401
    except Exception as err:  # an older Airflow or no standard provider: the message says which
        return f"{type(err).__name__}: {err} (Airflow 3.1+ with apache-airflow-providers-standard)"
    return None


def required_actions_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """Where Airflow's UI shows the question of a task instance, relative to Airflow's base URL (no leading slash).

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index.
    """
    return (
        f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
        f"/required_actions?map_index={map_index}"
    )


def _value(value: Any) -> str:
    return "no value" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


def question_text(
    deployment: str, revision_id: str, result: Mapping[str, Any], view_url: str | None, timeout: timedelta
) -> tuple[str, str]:
    """The question's subject and body (Markdown): what is inconclusive, the measurements, the choices.

    :param deployment: the deployment as named to people (its name and id).
    :param revision_id: the revision judged.
    :param result: the analysis result (scrubbed already).
    :param view_url: the deployment's page in the Rollouts view.
    :param timeout: how long the question waits.
    """
    subject = f"Inconclusive analysis of {deployment}, revision {revision_id}: promote, roll back or analyse again?"
    rows = [
        f"| {item.get('round')} | {item.get('check')} | {_value(item.get('value'))} | {item.get('condition')} | "
        f"{item.get('verdict')} | {str(item.get('detail') or '').replace('|', '/')} |"
        for item in list(result.get("measurements") or [])[-20:]
    ]
    lines = [
        f"The analysis of revision **{revision_id}** of **{deployment}** was inconclusive: {result.get('reason')}",
        "",
        "| Round | Check | Value | Condition | Verdict | Detail |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"- **{PROMOTE}**: the revision counts as passed and lands.",
        f"- **{ROLL_BACK}**: the revision counts as failed and is rolled back (if the task rolls back).",
        f"- **{ANALYSE_AGAIN}**: it is measured again for the analysis's length, then judged (or asked) again.",
        "",
        f"Without an answer within {timeout}, it is rolled back.",
    ]
    if view_url:
        lines.append(f"\nThe deployment in the Rollouts view: {view_url}")
    return subject, "\n".join(lines)


def ask_person(
    task: BaseOperator,
    context: Mapping[str, Any],
    subject: str,
    body: str,
    timeout: timedelta,
    *,
    method_name: str,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Write the question as the task instance's HITL detail, then wait for the answer: ``awaiting_input`` on
    Airflow 3.3+, else deferred to the standard provider's ``HITLTrigger``. Resumes in ``method_name`` with
    ``event`` (the answer) and ``kwargs``.

    :param task: the task asking.
    :param context: its context (the task instance's id).
    :param subject: the question's headline.
    :param body: its Markdown text.
    :param timeout: how long to wait; then :data:`ROLL_BACK` is the answer.
    :param method_name: the method that reads the answer.
    :param kwargs: what that method gets besides the answer (JSON).
    """
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    ti_id = context["ti"].id
    upsert_hitl_detail(
        ti_id=ti_id, options=list(OPTIONS), subject=subject, body=body, defaults=[ROLL_BACK], multiple=False, params={}
    )
    import airflow.sdk.exceptions as sdk_exceptions

    awaiting = getattr(sdk_exceptions, "TaskAwaitingInput", None)  # Airflow 3.3+
    if awaiting is not None:
        raise awaiting(method_name=method_name, kwargs=kwargs, timeout=timeout)
    from airflow.providers.standard.triggers.hitl import HITLTrigger
    from airflow.sdk.timezone import utcnow

    trigger = HITLTrigger(
        ti_id=ti_id,
        options=list(OPTIONS),
        defaults=[ROLL_BACK],
        params={},
        multiple=False,
        timeout_datetime=utcnow() + timeout,
    )
    task.defer(trigger=trigger, method_name=method_name, kwargs=kwargs)
    raise AssertionError("defer() returned")  # pragma: no cover


@dataclass(frozen=True)
class Answer:
    """A person's answer (or the timeout's).

    :param choice: one of :data:`OPTIONS`.
    :param by: who answered (their name; ``None`` for the timeout).
    :param at: when (ISO 8601; ``None`` when not said).
    :param timed_out: no one answered in time: :data:`ROLL_BACK`.
    """

    choice: str
    by: str | None
    at: str | None
    timed_out: bool

    def record(self) -> dict[str, Any]:
        """The answer as recorded (JSON)."""
        return asdict(self)

    def said(self) -> str:
        """The answer as the task says it: ``"Roll back" (chosen by alice)`` or ``no answer within the timeout``."""
        if self.timed_out:
            return f"no answer within the response timeout, so {self.choice!r}"
        return f"{self.choice!r}, chosen by {self.by or 'an unnamed user'}"


def read_answer(event: Any) -> Answer:
    """The answer a resume got from Airflow: the chosen option and who chose it, or the timeout (the default
    answer written by the scheduler, or the trigger's timeout error): :data:`ROLL_BACK`. Anything else raises
    ``ValueError`` naming what came.

    :param event: the resume's ``event`` (``HITLDetail.as_resume_event_payload()`` or the trigger's event).
    """
    if not isinstance(event, Mapping):
        raise ValueError(f"expected the human-in-the-loop answer, got {event!r}")
    if event.get("error_type") == "timeout":
        return Answer(choice=ROLL_BACK, by=None, at=None, timed_out=True)
    if "error" in event:
        raise ValueError(f"the human-in-the-loop question ended without an answer: {event.get('error')}")
    chosen = list(event.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in OPTIONS:
        raise ValueError(f"expected one of {OPTIONS} as the answer, got {chosen!r}")
    user = event.get("responded_by_user")
    at = event.get("responded_at")
    return Answer(
        choice=chosen[0],
        by=str(user.get("name") or user.get("id")) if isinstance(user, Mapping) else None,
        at=at.isoformat() if isinstance(at, datetime) else (str(at) if at else None),
        timed_out=bool(event.get("timedout")),
    )
