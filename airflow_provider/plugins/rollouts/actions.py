"""What a person can do from the Rollouts view, carried out by Airflow: "Roll back to this revision", and
"Approve" (or any other answer) to a fleet rollout's approval gate.

The view never calls the service to change anything itself. An action is a DAG run of the provider-shipped
rollback DAG (:mod:`~airflow_provider.plugins.rollouts.rollback_dag`), triggered on behalf of the user who
confirmed, so it has the operator's guarantees (recorded before it is sent, never sent twice, refused when a newer
revision went out after the confirmation) and shows in Airflow like any run:

- **authorised by Airflow's auth manager**: edit access to the connection (``is_authorized_connection``, ``PUT``:
  a rollback by hand changes what the connection's deployment serves) and the right to trigger the rollback DAG
  (``is_authorized_dag``, ``POST`` on its runs), on top of the view's read access; anything less is a 403, and
  the page shows no button;
- **once per confirmation**: the page sends one ``request_id`` per confirmation, and the run is named after it
  (``rollouts_view__rollback__<request_id>``): a second request with it answers with the same run; a rollback
  of the same deployment still queued or running refuses another (409);
- **in Airflow's audit log**: one ``Log`` row (event ``deployment_service.rollback``, the acting user as
  ``owner``, the run's ``dag_id`` and ``run_id``, the request in ``extra``), written in the same transaction as
  the run, as Airflow's own REST API writes its entries;
- **in the record and the view**: the run's ``triggering_user_name`` is the user, and the task records it
  (``requested_by``, ``requested_from``): "rolled back to by alice from the Rollouts view".

An approval gate (a human-in-the-loop task, ``ApprovalOperator``, in the fleet rollout's DAG run) is answered as
Airflow's own ``PATCH .../hitlDetails`` answers it: edit access to the DAG's human-in-the-loop details
(``is_authorized_dag``, ``PUT``, ``HITL_DETAIL``), the task's assigned users respected, an option it offers, once
(a second answer is a 409), the parked task resumed by Airflow, and an audit log entry
(``deployment_service.approval``) naming the user; the fleet tab shows who answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from airflow.api_fastapi.auth.managers.models.resource_details import (
    ConnectionDetails,
    DagAccessEntity,
    DagDetails,
)
from airflow.models import Log
from fastapi import FastAPI, HTTPException, Request, status

from airflow_provider.client import describe_validation_error
from airflow_provider.models import canonical_uuid
from airflow_provider.plugins.rollouts import access
from airflow_provider.plugins.rollouts.access import HTTP_422, UserDep
from airflow_provider.plugins.rollouts.paths import (
    REQUESTED_FROM,
    ROLLBACK_DAG_ID,
    ROLLBACK_TASK_ID,
    dag_run_path,
    task_instance_path,
)
from airflow_provider.plugins.rollouts.posts import check_json_post

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from sqlalchemy.orm import Session

    from airflow_provider.plugins.rollouts.listing import ServiceReader

T = TypeVar("T")
InThreads = Callable[[Request, Callable[[], T]], Awaitable[T]]

AUDIT_EVENT = "deployment_service.rollback"
"""The ``event`` of the audit log entry a rollback from the view writes."""
APPROVAL_AUDIT_EVENT = "deployment_service.approval"
"""The ``event`` of the audit log entry an answer to an approval gate from the view writes."""
RUN_ID_PREFIX = "rollouts_view__rollback__"
"""The start of the run id of every rollback the view triggers (then the confirmation's ``request_id``)."""
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{7,63}")
"""What a ``request_id`` may look like (a UUID, as the page makes one per confirmation)."""
IN_FLIGHT_STATES = ("queued", "running")
"""States of a rollback run that still has to act."""

__all__ = [
    "APPROVAL_AUDIT_EVENT",
    "AUDIT_EVENT",
    "RUN_ID_PREFIX",
    "ApprovalAnswer",
    "RollbackRequest",
    "add_action_routes",
    "answer_approval",
    "may_answer_approvals",
    "rollback_actions",
]


class RollbackRequest(pydantic.BaseModel):
    """The body of ``POST api/deployments/<id>/rollback``.

    :param conn_id: the connection of the deployment.
    :param revision_id: the revision to return to.
    :param rolling_back_from: the revision the confirmation showed as the deployment's latest (default: the
        latest now); the rollback refuses if a newer one has gone out since.
    :param request_id: one per confirmation (a UUID); a second request with it answers with the same run.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    conn_id: str
    revision_id: str
    rolling_back_from: str | None = None
    request_id: str


class ApprovalAnswer(pydantic.BaseModel):
    """The body of ``POST api/approvals``: the answer to one human-in-the-loop task of a fleet rollout's DAG run.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the approval task (e.g. ``approve_rollout``).
    :param map_index: its map index (``-1``: not mapped).
    :param option: the option chosen (``Approve``, ``Reject``...: one the task offers).
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    option: str


# ------------------------------------------------------------------------------------ access
def _may_edit_connection(conn_id: str, user: BaseUser, session: Session) -> bool:
    from airflow.models import Connection
    from sqlalchemy import select

    team = session.scalar(select(Connection.team_name).where(Connection.conn_id == conn_id))
    details = ConnectionDetails(conn_id=conn_id, team_name=team)
    return bool(access.auth_manager().is_authorized_connection(method="PUT", details=details, user=user))


def _may_trigger_rollback_dag(user: BaseUser) -> bool:
    from airflow.models.dag import DagModel

    details = DagDetails(id=ROLLBACK_DAG_ID, team_name=DagModel.get_team_name(ROLLBACK_DAG_ID))
    return bool(
        access.auth_manager().is_authorized_dag(
            method="POST", access_entity=DagAccessEntity.RUN, details=details, user=user
        )
    )


def _rollback_dag_state(session: Session) -> str:
    """``missing``, ``paused`` or ``ready``: the rollback DAG as Airflow has it."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    paused = session.scalar(
        select(DagModel.is_paused).where(DagModel.dag_id == ROLLBACK_DAG_ID, ~DagModel.is_stale).limit(1)
    )
    return "missing" if paused is None else "paused" if paused else "ready"


def rollback_actions(user: BaseUser, conn_id: str, session: Session) -> dict[str, Any]:
    """What the deployment page offers the user: ``{"rollback": {"allowed", "available", "dag_id", "why"}}``.

    ``allowed``: the user may roll this connection's deployments back from the view (edit access to the
    connection and the right to trigger the rollback DAG); ``available``: the rollback DAG is in Airflow and not
    paused.

    :param user: the request's user.
    :param conn_id: the connection shown.
    :param session: a metadata database session.
    """
    missing = []
    if not _may_edit_connection(conn_id, user, session):
        missing.append(f"edit access to connection {conn_id!r}")
    if not _may_trigger_rollback_dag(user):
        missing.append(f"the right to trigger DAG {ROLLBACK_DAG_ID!r}")
    state = _rollback_dag_state(session)
    why = ""
    if missing:
        why = "rolling back from the view needs " + " and ".join(missing)
    elif state == "missing":
        why = f"DAG {ROLLBACK_DAG_ID!r} is not in Airflow (see the Rollouts view's documentation, Actions)"
    elif state == "paused":
        why = f"DAG {ROLLBACK_DAG_ID!r} is paused: unpause it to roll back from the view"
    available = state == "ready"
    return {"rollback": {"allowed": not missing, "available": available, "dag_id": ROLLBACK_DAG_ID, "why": why}}


def _require_rollback_access(conn_id: str, user: BaseUser, session: Session) -> None:
    access.require_connection(conn_id, user, session)
    offered = rollback_actions(user, conn_id, session)["rollback"]
    if not offered["allowed"]:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"you may not roll back: {offered['why']}")
    if not offered["available"]:
        raise HTTPException(status.HTTP_409_CONFLICT, offered["why"])


# ------------------------------------------------------------------------------------ the request
def _checked(deployment_id: str, body: RollbackRequest) -> tuple[str, str, str | None, str]:
    """Canonical ``(deployment_id, revision_id, rolling_back_from, request_id)``; a 422 naming the field."""
    access.check_conn_id(body.conn_id)
    try:
        deployment = canonical_uuid(deployment_id, "deployment_id")
        revision = canonical_uuid(body.revision_id, "revision_id")
        source = canonical_uuid(body.rolling_back_from, "rolling_back_from") if body.rolling_back_from else None
    except ValueError as err:
        raise HTTPException(HTTP_422, str(err)) from None
    if not REQUEST_ID_PATTERN.fullmatch(body.request_id):
        raise HTTPException(
            HTTP_422, f"request_id must be 8 to 64 letters, digits, '-' or '_' (a UUID), got {body.request_id!r}"
        )
    return deployment, revision, source, body.request_id


def _answer(run: Any, *, already: bool) -> dict[str, Any]:
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "state": str(run.state),
        "requested_by": run.triggering_user_name,
        "conf": dict(run.conf or {}),
        "already_requested": already,
        "run_path": dag_run_path(run.dag_id, run.run_id),
        "ti_path": task_instance_path(run.dag_id, run.run_id, ROLLBACK_TASK_ID),
    }


def request_rollback(
    reader: ServiceReader, user: BaseUser, deployment_id: str, body: RollbackRequest, *, ui: bool
) -> dict[str, Any]:
    """Trigger the rollback DAG for ``body`` on behalf of ``user`` (blocking: run it in the view's threads).

    :param reader: what reads the service (the deployment and its revisions, to check the request).
    :param user: the request's user.
    :param deployment_id: the deployment.
    :param body: the request.
    :param ui: whether the request came from the view's page (the run is then marked as triggered from the UI).
    :returns: the run (``dag_id``, ``run_id``, ``state``, ``requested_by``, ``already_requested``, paths).
    """
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deployment_id, revision_id, source, request_id = _checked(deployment_id, body)
    conn_id = body.conn_id
    run_id = f"{RUN_ID_PREFIX}{request_id}"
    with create_session() as session:
        _require_rollback_access(conn_id, user, session)
        existing = session.scalar(select(DagRun).where(DagRun.dag_id == ROLLBACK_DAG_ID, DagRun.run_id == run_id))
        if existing is not None:
            if (existing.conf or {}).get("deployment_id") != deployment_id:
                raise HTTPException(
                    status.HTTP_409_CONFLICT, f"request_id {request_id!r} was used for another rollback"
                )
            return _answer(existing, already=True)
    deployment = reader.deployment(conn_id, deployment_id)
    if deployment is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"connection {conn_id!r} has no deployment {deployment_id}")
    if revision_id == deployment.active_revision_id:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"revision {revision_id} already serves deployment {deployment.name!r}: nothing to roll back",
        )
    shown = reader.revisions(conn_id, deployment_id)
    if shown.available and revision_id not in {revision.id for revision in shown.revisions}:
        raise HTTPException(
            HTTP_422, f"revision_id {revision_id} is not one of deployment {deployment.name!r}'s recent revisions"
        )
    conf = {
        "conn_id": conn_id,
        "deployment_id": deployment_id,
        "revision_id": revision_id,
        "rolling_back_from": source or deployment.latest_revision_id or "",
        "requested_from": REQUESTED_FROM,
    }
    with create_session() as session:
        in_flight = _rollback_in_flight(session, deployment_id)
        if in_flight is not None:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"a rollback of deployment {deployment.name!r} is already {in_flight.state} "
                f"(run {in_flight.run_id!r} of DAG {ROLLBACK_DAG_ID!r}): wait for it to end",
            )
        run = _create_run(session, user, run_id, conf, ui=ui)
        session.add(_audit_entry(user, run_id, {**conf, "deployment_name": deployment.name}))
        session.commit()
        return _answer(run, already=False)


def _rollback_in_flight(session: Session, deployment_id: str) -> Any:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    runs = session.scalars(
        select(DagRun).where(DagRun.dag_id == ROLLBACK_DAG_ID, DagRun.state.in_(IN_FLIGHT_STATES)).limit(200)
    )
    return next((run for run in runs if (run.conf or {}).get("deployment_id") == deployment_id), None)


def _create_run(session: Session, user: BaseUser, run_id: str, conf: dict[str, Any], *, ui: bool) -> Any:
    """A queued run of the rollback DAG, triggered by ``user`` (as Airflow's own trigger endpoint creates one)."""
    from airflow.exceptions import ParamValidationError
    from airflow.models.dagbag import DBDagBag
    from airflow.sdk import timezone
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dag = DBDagBag().get_latest_version_of_dag(ROLLBACK_DAG_ID, session=session)
    if dag is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"DAG {ROLLBACK_DAG_ID!r} is not serialized yet: retry")
    try:
        return dag.create_dagrun(
            run_id=run_id,
            logical_date=None,
            run_after=timezone.utcnow(),
            conf=conf,
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.UI if ui else DagRunTriggeredByType.REST_API,
            triggering_user_name=user.get_name(),
            state=DagRunState.QUEUED,
            session=session,
        )
    except (ParamValidationError, ValueError) as err:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"DAG {ROLLBACK_DAG_ID!r} refused the run: {err}") from None


def _audit_entry(user: BaseUser, run_id: str, extra: dict[str, Any]) -> Any:
    """The audit log row of the action, shaped as Airflow's ``action_logging`` writes its own."""
    return Log(
        event=AUDIT_EVENT,
        owner=user.get_name(),
        owner_display_name=user.get_name(),
        extra=json.dumps({**extra, "method": "POST", "from": REQUESTED_FROM}),
        dag_id=ROLLBACK_DAG_ID,
        run_id=run_id,
        task_id=ROLLBACK_TASK_ID,
    )


# ------------------------------------------------------------------------------------ approvals
def may_answer_approvals(user: BaseUser, dag_id: str) -> bool:
    """Whether the user may answer the DAG's human-in-the-loop tasks (as Airflow's own endpoint asks).

    :param user: the request's user.
    :param dag_id: the DAG.
    """
    from airflow.models.dag import DagModel

    entity = getattr(DagAccessEntity, "HITL_DETAIL", None)
    if entity is None:  # Airflow before 3.1
        return False
    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return bool(access.auth_manager().is_authorized_dag(method="PUT", access_entity=entity, details=details, user=user))


def task_instance_named(body: Any) -> str:
    """The task instance a request names (``dag_id``, ``run_id``, ``task_id``, ``map_index``), as messages say it.

    :param body: the request.
    """
    return f"task {body.task_id!r} (map index {body.map_index}) of run {body.run_id!r} of DAG {body.dag_id!r}"


def locked_task_instance(session: Session, body: Any) -> Any:
    """The task instance a request names, locked for the rest of ``session``'s transaction (``None``: none).

    :param session: the metadata database session.
    :param body: the request (``dag_id``, ``run_id``, ``task_id``, ``map_index``).
    """
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    return session.scalar(
        select(TaskInstance)
        .where(
            TaskInstance.dag_id == body.dag_id,
            TaskInstance.run_id == body.run_id,
            TaskInstance.task_id == body.task_id,
            TaskInstance.map_index == body.map_index,
        )
        .with_for_update()
    )


def answer_approval(user: BaseUser, body: ApprovalAnswer) -> dict[str, Any]:
    """Answer a waiting approval gate as ``user`` (blocking: run it in the view's threads).

    :param user: the request's user.
    :param body: the answer.
    :returns: ``task_id``, ``chosen_options``, ``responded_by``, ``resumed`` (the parked task was resumed).
    """
    from airflow.models.hitl import HITLDetail, HITLUser
    from airflow.models.trigger import handle_event_submit
    from airflow.sdk import timezone
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    if body.map_index < -1:
        raise HTTPException(HTTP_422, f"map_index must be >= -1, got {body.map_index}")
    if not may_answer_approvals(user, body.dag_id):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"you may not answer DAG {body.dag_id!r}'s approvals: ask for edit access to its human-in-the-loop tasks",
        )
    where = task_instance_named(body)
    with create_session() as session:
        ti = locked_task_instance(session, body)
        detail = session.get(HITLDetail, ti.id, with_for_update=True) if ti is not None else None
        if ti is None or detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no approval waits in {where}")
        if detail.chosen_options is not None or detail.responded_at is not None:
            raise HTTPException(status.HTTP_409_CONFLICT, f"{where} was answered already: nothing done")
        assigned = {str(item.get("id")) for item in detail.assigned_users or [] if isinstance(item, dict)}
        if assigned and not access.auth_manager().is_authorized_hitl_task(assigned_users=assigned, user=user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"you are not one of the users {where} is assigned to")
        options = list(detail.options or [])
        if body.option not in options:
            raise HTTPException(HTTP_422, f"option must be one of {options} (what {where} offers), got {body.option!r}")
        user_id = user.get_id()
        detail.responded_by = HITLUser(id=str(user_id), name=user.get_name())  # type: ignore[assignment]
        detail.responded_at = timezone.utcnow()
        detail.chosen_options = [body.option]
        detail.params_input = {}
        session.add(detail)
        session.add(
            Log(
                event=APPROVAL_AUDIT_EVENT,
                owner=user.get_name(),
                owner_display_name=user.get_name(),
                extra=json.dumps({"option": body.option, "subject": detail.subject, "from": REQUESTED_FROM}),
                dag_id=body.dag_id,
                run_id=body.run_id,
                task_id=body.task_id,
                map_index=body.map_index,
            )
        )
        resumed = ti.state in (TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED)
        if resumed:
            handle_event_submit(TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session)
        session.commit()
        return {
            "task_id": body.task_id,
            "chosen_options": [body.option],
            "responded_by": user.get_name(),
            "resumed": resumed,
        }


# ------------------------------------------------------------------------------------ routes
def add_action_routes(app: FastAPI, in_threads: InThreads[Any]) -> None:
    """Add the action endpoints to the view's app.

    :param app: the view's app (``app.state.reader`` reads the service).
    :param in_threads: runs a request's blocking part in the view's own threads.
    """

    @app.post("/api/deployments/{deployment_id}/rollback")
    async def rollback(request: Request, deployment_id: str, user: UserDep) -> dict[str, Any]:
        """Roll the deployment back to a revision: trigger the rollback DAG for the user (see the module)."""
        check_json_post(request)  # JSON from the view's own pages only
        try:
            body = RollbackRequest.model_validate(await request.json())
        except ValueError as err:
            detail = describe_validation_error(err) if isinstance(err, pydantic.ValidationError) else str(err)
            raise HTTPException(
                HTTP_422, f"the body must be a JSON object with conn_id, revision_id and request_id: {detail}"
            ) from None
        ui = bool(request.headers.get("referer"))
        reader = request.app.state.reader
        return await in_threads(request, lambda: request_rollback(reader, user, deployment_id, body, ui=ui))

    @app.post("/api/approvals")
    async def approve(request: Request, user: UserDep) -> dict[str, Any]:
        """Answer a fleet rollout's waiting approval gate as the user (see the module)."""
        check_json_post(request)  # JSON from the view's own pages only
        try:
            body = ApprovalAnswer.model_validate(await request.json())
        except ValueError as err:
            detail = describe_validation_error(err) if isinstance(err, pydantic.ValidationError) else str(err)
            raise HTTPException(
                HTTP_422, f"the body must be a JSON object with dag_id, run_id, task_id and option: {detail}"
            ) from None
        return await in_threads(request, lambda: answer_approval(user, body))
