"""**Abort** a running fleet rollout from its fleet tab, carried out by the running task itself.

The view writes an abort request in the task's ``task_state_store`` (key
:data:`~airflow_provider.tasks.fleet.abort.ABORT_KEY`, through Airflow's state backend, as the Execution API writes
the task's own keys); the ``FleetRolloutOperator`` reads it before each phase of each wave and acts on it (see
:mod:`~airflow_provider.tasks.fleet.abort`: recorded before acting, never applied twice, honoured by a retry), then
fails "aborted by <user> from the Rollouts view". The view never touches a deployment.

- **authorised by Airflow's auth manager**: edit access to the DAG's task instances (``is_authorized_dag``,
  ``PUT``, ``TASK_INSTANCE``: what Airflow asks to change a task instance's state); anything less is a 403, and the
  tab shows no button;
- **once per confirmation**: the page sends one ``request_id`` per confirmation; a second request with it answers
  with the request already recorded (``already_requested``), another one is a 409 naming who aborted;
- only a task that still runs (queued, running, deferred, up for retry...) can be aborted (else 409);
- **at once**: a task deferred (or awaiting an answer) on something the abort ends (a pause; in ``rollback`` mode
  the watch of the current wave, its analysis or a question about it: see
  :func:`~airflow_provider.tasks.fleet.abort.interrupts`) is resumed by the view in the same transaction, as Airflow's
  own API server resumes a task answered through its human-in-the-loop API; an open question is answered "Roll back"
  in the user's name. A task parked less than :data:`WAKE_SETTLE_SECONDS` ago is woken once it has been parked that
  long (from a timer of the view's process: Airflow 3.3.2 fails a task resumed within seconds of parking). A running
  task reads the request between two rounds of what it waits for;
- **in Airflow's audit log**: one ``Log`` row (event ``deployment_service.abort``, the acting user as ``owner``),
  written in the same transaction as the request.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pydantic
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.models import Log
from fastapi import HTTPException, status
from sqlalchemy import select

from airflow_provider.plugins.rollouts import access
from airflow_provider.plugins.rollouts.access import HTTP_422
from airflow_provider.plugins.rollouts.actions import REQUEST_ID_PATTERN, locked_task_instance, task_instance_named
from airflow_provider.plugins.rollouts.metadata import stored_progress
from airflow_provider.plugins.rollouts.paths import REQUESTED_FROM
from airflow_provider.tasks.fleet.abort import (
    ABORT_KEY,
    ABORT_MODES,
    CLEARED_NOTE,
    TAKEN_KEY,
    AbortRequest,
    abort_event,
    abort_preview,
    interrupts,
    waiting_on,
)
from airflow_provider.tasks.fleet.progress import STATE_KEY

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from sqlalchemy.orm import Session

    from airflow_provider.plugins.rollouts.metadata import FleetTaskRecord

__all__ = [
    "ABORTABLE_STATES",
    "ABORT_AUDIT_EVENT",
    "WAKE_SETTLE_SECONDS",
    "AbortBody",
    "abort_offer",
    "may_abort",
    "request_abort",
    "wake_later",
]

log = logging.getLogger(__name__)

ABORT_AUDIT_EVENT = "deployment_service.abort"
"""The ``event`` of the audit log entry an abort from the view writes."""
ABORTABLE_STATES = (
    "scheduled",
    "queued",
    "running",
    "deferred",
    "awaiting_input",
    "up_for_retry",
    "up_for_reschedule",
    "restarting",
)
"""States of a task instance that may still act on an abort."""
WAKE_SETTLE_SECONDS = 8.0
"""A task parked (deferred, awaiting an answer) less than this long ago is woken only once it has been parked this
long: Airflow 3.3.2 fails a task resumed within a few seconds of parking (the executor's late "success" of the run
that parked it lands after the resume: its stale-success race, apache/airflow#66374 and #72716; seen end to end on
an abort 1 s after the task deferred)."""


class AbortBody(pydantic.BaseModel):
    """The body of ``POST api/fleet/abort``.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the fleet task.
    :param map_index: its map index (``-1``: not mapped).
    :param mode: ``stop`` (no deployment patched any more; those in flight finish) or ``rollback`` (also roll the
        current wave back).
    :param include_earlier: with ``rollback``, also roll back the canary and every earlier wave.
    :param request_id: one per confirmation (a UUID); a second request with it answers with the same request.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    mode: str
    include_earlier: bool = False
    request_id: str


def may_abort(user: BaseUser, dag_id: str) -> bool:
    """Whether the user may abort the DAG's fleet tasks (edit access to its task instances).

    :param user: the request's user.
    :param dag_id: the DAG.
    """
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return bool(
        access.auth_manager().is_authorized_dag(
            method="PUT", access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=user
        )
    )


def abort_offer(user: BaseUser, record: FleetTaskRecord, stored: dict[str, Any]) -> dict[str, Any]:
    """What the fleet tab shows of Abort: ``allowed`` (the user may), ``available`` (the task still runs, keeps a
    ``task_state_store``, and no abort was asked for), ``requested`` / ``taken`` (the request, and what the task
    took it to mean), and the confirmation's ``preview`` per mode
    (:func:`~airflow_provider.tasks.fleet.abort.abort_preview`, from the progress the task records): which
    deployments would not be started, which are in flight and finish, which would be rolled back; once aborted,
    ``cleared`` says what clearing the task does (and how to roll out again).

    :param user: the request's user.
    :param record: the fleet task as the tab reads it.
    :param stored: the task's abort keys (:data:`~airflow_provider.tasks.fleet.abort.ABORT_KEY` and
        :data:`~airflow_provider.tasks.fleet.abort.TAKEN_KEY`) as stored.
    """
    requested, taken = stored.get(ABORT_KEY), stored.get(TAKEN_KEY)
    progress = record.progress
    running = str(record.state) in ABORTABLE_STATES
    why = ""
    if requested:
        why = f"aborted by {requested.get('requested_by')} from the {requested.get('requested_from')}"
    elif not running:
        why = f"the task is {record.state}: nothing to abort"
    elif progress is None or record.source != "task_state_store":
        why = "the task keeps no task_state_store (Airflow 3.3+) the view can see: it cannot be told to abort"
    preview = abort_preview(progress) if progress is not None else {}
    return {
        "allowed": may_abort(user, record.dag_id),
        "available": not why,
        "why": why,
        "requested": requested,
        "taken": taken,
        "preview": preview,
        "modes": list(ABORT_MODES),
        "cleared": CLEARED_NOTE if requested or taken else None,
    }


def request_abort(user: BaseUser, body: AbortBody) -> dict[str, Any]:
    """Record an abort request for a running fleet task on behalf of ``user`` (blocking: run it in the view's
    threads).

    :param user: the request's user.
    :param body: the request.
    :returns: the request recorded (``request_id``, ``mode``, ``include_earlier``, ``requested_by``...) and
        ``already_requested``, and the ``preview`` (:func:`~airflow_provider.tasks.fleet.abort.abort_preview`) of
        what it does, read with the request written: its ``not_started`` deployments are never patched.
    """
    from airflow._shared.state import TaskScope
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session

    if body.mode not in ABORT_MODES:
        raise HTTPException(HTTP_422, f"mode must be one of {list(ABORT_MODES)}, got {body.mode!r}")
    if body.include_earlier and body.mode != "rollback":
        raise HTTPException(HTTP_422, "include_earlier goes with mode 'rollback' only")
    if not REQUEST_ID_PATTERN.fullmatch(body.request_id):
        raise HTTPException(
            HTTP_422, f"request_id must be 8 to 64 letters, digits, '-' or '_' (a UUID), got {body.request_id!r}"
        )
    if body.map_index < -1:
        raise HTTPException(HTTP_422, f"map_index must be >= -1, got {body.map_index}")
    if not may_abort(user, body.dag_id):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"you may not abort DAG {body.dag_id!r}'s tasks: ask for edit access to its task instances",
        )
    where = task_instance_named(body)
    backend = get_state_backend()
    scope = TaskScope(dag_id=body.dag_id, run_id=body.run_id, task_id=body.task_id, map_index=body.map_index)
    with create_session() as session:
        ti = locked_task_instance(session, body)
        if ti is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {where}")
        planned = backend.get(scope, STATE_KEY, session=session) is not None  # (a subclass has another name)
        if ti.operator != "FleetRolloutOperator" and not planned:
            raise HTTPException(status.HTTP_409_CONFLICT, f"{where} is a {ti.operator}, not a fleet rollout")
        existing = AbortRequest.from_json(_json(backend.get(scope, ABORT_KEY, session=session)))
        if existing is not None:
            if existing.request_id != body.request_id:
                raise HTTPException(
                    status.HTTP_409_CONFLICT,
                    f"{where} was already aborted by {existing.requested_by} (request {existing.request_id}). "
                    f"{CLEARED_NOTE}",
                )
            return {**existing.to_json(), "already_requested": True}
        if str(ti.state) not in ABORTABLE_STATES:
            raise HTTPException(status.HTTP_409_CONFLICT, f"{where} is {ti.state}: nothing to abort")
        # What the abort does, from the progress the task records, locked until the request is written: the PATCH
        # requests started now finish (named in the request), no other is sent (the queue reads the request).
        progress = stored_progress(session, body.dag_id, body.run_id, body.task_id, body.map_index, lock=True)
        preview = abort_preview(progress) if progress is not None else {}
        request = AbortRequest(
            request_id=body.request_id,
            mode=body.mode,
            include_earlier=body.include_earlier,
            requested_by=user.get_name(),
            requested_at=datetime.now(timezone.utc).isoformat(),
            requested_from=REQUESTED_FROM,
            in_flight=tuple(preview.get("in_flight_ids") or ()),
        )
        backend.set(scope, ABORT_KEY, json.dumps(request.to_json()), session=session)
        woken, delay = _wake(session, ti, request, user, body)
        how = {"method": "POST", "from": REQUESTED_FROM, "woken": woken, "wakes_in": delay or None}
        session.add(
            Log(
                event=ABORT_AUDIT_EVENT,
                owner=user.get_name(),
                owner_display_name=user.get_name(),
                extra=json.dumps({**request.to_json(), **how}),
                dag_id=body.dag_id,
                run_id=body.run_id,
                task_id=body.task_id,
                map_index=body.map_index,
            )
        )
        session.commit()
    if delay:
        timer = threading.Timer(delay, wake_later, (user, body, request.request_id))
        timer.daemon = True
        timer.start()
    return {
        **request.to_json(),
        "already_requested": False,
        "woken": woken,
        "wakes_in": round(delay, 1) or None,
        "preview": preview,
    }


def wake_later(user: BaseUser, body: AbortBody, request_id: str, attempts: int = 3) -> str | None:
    """Wake the task for the abort ``request_id`` once it has been parked :data:`WAKE_SETTLE_SECONDS` (run by a timer
    of the view's process; see :func:`request_abort`): in a transaction of its own, the task instance locked, only
    while the request is still the recorded one and the task has not taken it. Parked again meanwhile (another
    wait), it tries again later, ``attempts`` times in all. Never raises: the task takes the abort at its next step
    anyway. Returns what the task waited for when it was woken.

    :param user: who aborted (an open question is answered in their name).
    :param body: the request.
    :param request_id: the request's id.
    :param attempts: tries left.
    """
    from airflow._shared.state import TaskScope
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session

    scope = TaskScope(dag_id=body.dag_id, run_id=body.run_id, task_id=body.task_id, map_index=body.map_index)
    try:
        backend = get_state_backend()
        with create_session() as session:
            ti = locked_task_instance(session, body)
            request = AbortRequest.from_json(_json(backend.get(scope, ABORT_KEY, session=session)))
            taken = backend.get(scope, TAKEN_KEY, session=session) is not None
            if ti is None or request is None or request.request_id != request_id or taken:
                return None
            woken, delay = _wake(session, ti, request, user, body)
            session.commit()
    except Exception:  # the task takes the abort at its next step
        log.exception("Could not wake %s for its abort %s", task_instance_named(body), request_id)
        return None
    if delay and attempts > 1:
        timer = threading.Timer(delay, wake_later, (user, body, request_id, attempts - 1))
        timer.daemon = True
        timer.start()
    if woken:
        log.info("Woke %s for its abort %s (it waited for: %s)", task_instance_named(body), request_id, woken)
    return woken


def _wake(
    session: Session, ti: Any, request: AbortRequest, user: BaseUser, body: AbortBody
) -> tuple[str | None, float]:
    """Resume a task deferred (or awaiting an answer) on something the abort ends, with an
    :func:`~airflow_provider.tasks.fleet.abort.abort_event`, in the caller's transaction (the task instance is
    locked); an open question is answered "Roll back" in ``user``'s name. Returns what the task waited for when it was
    woken, else ``None`` (it takes the abort at its next step, or between two rounds on the worker), and the seconds
    after which to try again when the task parked less than :data:`WAKE_SETTLE_SECONDS` ago (else ``0``)."""
    from airflow.models.trigger import Trigger, handle_event_submit
    from airflow.triggers.base import TriggerEvent

    from airflow_provider.plugins.rollouts.metadata import fleet_task

    state = str(ti.state.value if hasattr(ti.state, "value") else ti.state)
    if state not in ("deferred", "awaiting_input"):
        return None, 0.0
    record = fleet_task(session, body.dag_id, body.run_id, body.task_id, body.map_index, with_approvals=False)
    if record is None or record.progress is None or record.source != "task_state_store":
        return None, 0.0
    waiting = waiting_on(record.progress, ti.next_method)
    if waiting is None or not interrupts(request.mode, waiting):
        return None, 0.0
    parked = ti.updated_at
    parked_for = (datetime.now(timezone.utc) - parked).total_seconds() if parked is not None else WAKE_SETTLE_SECONDS
    if parked_for < WAKE_SETTLE_SECONDS:
        return None, WAKE_SETTLE_SECONDS - max(parked_for, 0.0)
    carry = None
    if ti.trigger_id is not None and (trigger := session.get(Trigger, ti.trigger_id)) is not None:
        try:
            carry = trigger.kwargs.get("carry")
        except Exception:  # undecryptable (another Fernet key): the task goes on from its store
            carry = None
    if waiting == "question":
        _answer_roll_back(session, ti, user)
    handle_event_submit(TriggerEvent(abort_event(request, carry)), task_instance=ti, session=session)
    return waiting, 0.0


def _answer_roll_back(session: Session, ti: Any, user: BaseUser) -> None:
    """Answer the task's open human-in-the-loop question "Roll back" in ``user``'s name (as Airflow's
    ``PATCH .../hitlDetails`` records an answer), so that Airflow's "Required actions" page closes it."""
    from airflow.models.hitl import HITLDetail, HITLUser

    from airflow_provider.tasks.inconclusive import ROLL_BACK

    detail = session.scalar(select(HITLDetail).where(HITLDetail.ti_id == ti.id).with_for_update(of=HITLDetail))
    if detail is None or detail.response_received or ROLL_BACK not in (detail.options or []):
        return
    user_id = user.get_id()
    detail.responded_by = HITLUser(id=str(user_id), name=user.get_name())
    detail.responded_at = datetime.now(timezone.utc)
    detail.chosen_options = [ROLL_BACK]
    detail.params_input = {}
    session.add(detail)


def _json(value: str | None) -> Any:
    try:
        return json.loads(value) if value is not None else None
    except ValueError:
        return None
