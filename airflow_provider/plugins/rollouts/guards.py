"""The guard after landing in the Rollouts view: the revision a deployment's guard guards (until when, what it last
measured, its measurements), a regression it found, and **End guard** (edit access, audited).

What it shows is read from Airflow's Variables (the guard's own records, :mod:`airflow_provider.analysis.guard`):
the guard record a task handed over, the status the guard's trigger writes every few minutes, and the claim of a
regression. Ending a guard deletes its record (the trigger stops guarding it at its next look; its status is left
for the record) and writes one ``Log`` row in Airflow's audit log (event ``deployment_service.guard_ended``, the
acting user as ``owner``), in one transaction. Who may end it: a user with edit access to the task instances of the
DAG whose task handed the revision to the guard (what aborting a fleet rollout asks, see
:mod:`~airflow_provider.plugins.rollouts.aborts`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pydantic
from fastapi import HTTPException, status

from airflow_provider.analysis.guard import claim_key, guard_key, status_key
from airflow_provider.plugins.rollouts.aborts import may_abort
from airflow_provider.plugins.rollouts.paths import REQUESTED_FROM

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from sqlalchemy.orm import Session

__all__ = ["GUARD_ENDED_AUDIT_EVENT", "EndGuardBody", "end_guard", "guard_of"]

GUARD_ENDED_AUDIT_EVENT = "deployment_service.guard_ended"
"""The ``event`` of the audit log entry an early end of a guard writes."""


class EndGuardBody(pydantic.BaseModel):
    """What the page sends to end a guard early: the connection and the revision it shows guarded (refused when
    another revision is guarded by now)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    conn_id: str
    revision_id: str


def _variable(session: Session, key: str) -> Any | None:
    from airflow.models.variable import Variable

    row = session.query(Variable).filter(Variable.key == key).one_or_none()
    if row is None:
        return None
    try:
        return json.loads(row.val)
    except (TypeError, ValueError):
        return None


def guard_of(session: Session, user: BaseUser, conn_id: str, deployment_id: str) -> dict[str, Any] | None:
    """The deployment's guard as the page shows it, ``None`` when none guards it: ``revision_id``,
    ``previous_revision_id``, ``landed_at``, ``guarded_until``, ``checks``, ``handed_by``, ``last_measured`` and
    ``measurements`` (the trigger's latest status of this revision, when written), ``regressed`` (the regression's
    message and when, once found) and ``may_end``.

    :param session: a metadata database session.
    :param user: the request's user.
    :param conn_id: the connection.
    :param deployment_id: the deployment.
    """
    record = _variable(session, guard_key(conn_id, deployment_id))
    if not isinstance(record, dict) or not record.get("revision_id"):
        return None
    revision_id = str(record["revision_id"])
    shown = _variable(session, status_key(conn_id, deployment_id))
    shown = shown if isinstance(shown, dict) and shown.get("revision_id") == revision_id else {}
    claim = _variable(session, claim_key(deployment_id, revision_id))
    payload = claim.get("payload") if isinstance(claim, dict) else None
    given = record.get("handed_by")
    handed_by: dict[str, Any] = given if isinstance(given, dict) else {}
    checks = [check.get("name") or check.get("metric") for check in (record.get("analysis") or {}).get("checks", [])]
    return {
        "revision_id": revision_id,
        "previous_revision_id": record.get("previous_revision_id"),
        "landed_at": record.get("landed_at"),
        "guarded_until": record.get("until"),
        "checks": checks,
        "handed_by": handed_by,
        "last_measured": shown.get("last_measured"),
        "measurements": list(shown.get("measurements") or []),
        "regressed": (
            {"message": payload.get("message"), "at": payload.get("regressed_at")}
            if isinstance(payload, dict)
            else None
        ),
        "may_end": bool(handed_by.get("dag_id")) and may_abort(user, str(handed_by["dag_id"])),
    }


def end_guard(user: BaseUser, deployment_id: str, body: EndGuardBody) -> dict[str, Any]:
    """End the deployment's guard now, on behalf of ``user`` (blocking: run it in the view's threads).

    :param user: the request's user.
    :param deployment_id: the deployment.
    :param body: the connection and the revision the page showed guarded.
    :returns: what was ended (its ``ended_by``, ``ended_at``...); a 404 (an ``HTTPException``) when no guard, 409
        when another revision is guarded by now, 403 without edit access.
    """
    from airflow.models import Log
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    key = guard_key(body.conn_id, deployment_id)
    with create_session() as session:
        row = session.query(Variable).filter(Variable.key == key).with_for_update().one_or_none()
        record = _variable(session, key) if row is not None else None
        if not isinstance(record, dict):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no guard of deployment {deployment_id}")
        if record.get("revision_id") != body.revision_id:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"the guard of deployment {deployment_id} guards revision {record.get('revision_id')} now, not "
                f"{body.revision_id}",
            )
        dag_id = str((record.get("handed_by") or {}).get("dag_id") or "")
        if not dag_id or not may_abort(user, dag_id):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"you may not end this guard: ask for edit access to DAG {dag_id or '(unknown)'!r}'s task instances",
            )
        session.delete(row)
        ended = {
            "conn_id": body.conn_id,
            "deployment_id": deployment_id,
            "revision_id": body.revision_id,
            "guarded_until": record.get("until"),
            "ended_by": user.get_name(),
            "ended_at": datetime.now(timezone.utc).isoformat(),
            "from": REQUESTED_FROM,
        }
        session.add(
            Log(
                event=GUARD_ENDED_AUDIT_EVENT,
                owner=user.get_name(),
                owner_display_name=user.get_name(),
                extra=json.dumps(ended),
                dag_id=dag_id,
            )
        )
        session.commit()
    return ended
