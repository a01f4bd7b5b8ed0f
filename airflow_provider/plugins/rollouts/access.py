"""Who may see what in the Rollouts view, decided by the API server's auth manager.

Airflow does not protect a plugin's endpoints unless they ask for it. Every endpoint of the view asks:

- **an authenticated user** (:data:`UserDep`, Airflow's own ``get_user``): the JWT the UI already holds,
  from the ``_token`` cookie the browser sends with every same-origin request (the pages run in the UI's
  iframe), or an ``Authorization: Bearer`` header (scripts). No token: 401; a bad one: 403.
- **read access to the connection** whose deployments are shown (``is_authorized_connection``, ``GET``);
- **read access to the DAG** whose rollouts are shown: its task instances and its XComs for the fleet tab
  (``is_authorized_dag`` with ``TASK_INSTANCE`` and ``XCOM``, as Airflow's own XCom endpoints ask: the
  tab shows the task's result table and analysis), and the DAG for every rollout listed next to a
  deployment (rollouts of DAGs the user cannot read are left out, not shown as hidden). What a fleet task
  recorded (its rows, their messages, and the measurements of an analysis, in a fleet row or a task's asset
  event) is shown next to a deployment only with the fleet tab's access to that DAG
  (:func:`fleet_readable_dag_ids`); DAG read alone shows what the asset event says the run did.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow.api_fastapi.auth.managers.models.resource_details import (
    ConnectionDetails,
    DagAccessEntity,
    DagDetails,
)
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import HTTPException, status

from airflow_provider.defaults import CONN_TYPE

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from sqlalchemy.orm import Session

HTTP_422 = 422
"""Unprocessable content: a parameter that can never be right, named in the answer."""
UserDep = GetUserDep
"""The authenticated Airflow user of a request (Airflow's ``GetUserDep``: 401 without a token)."""

FLEET_ENTITIES = (DagAccessEntity.TASK_INSTANCE, DagAccessEntity.XCOM)
"""What of a DAG a user must be able to read to see its fleet tasks' records (the fleet tab's access)."""
CONN_ID_PATTERN = re.compile(r"[\w.\-]{1,250}")
"""What a connection id may look like (letters, digits, ``_``, ``.`` and ``-``; Airflow's own rule)."""


def auth_manager() -> BaseAuthManager:
    """The API server's auth manager."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def check_conn_id(conn_id: str) -> str:
    """``conn_id`` when it looks like a connection id; else a 422 naming the field.

    :param conn_id: the ``conn_id`` query parameter.
    """
    if not CONN_ID_PATTERN.fullmatch(conn_id or ""):  # match() and $ would let a trailing newline through
        raise HTTPException(
            HTTP_422,
            f"conn_id must be a connection id (letters, digits, '_', '.', '-'), got {conn_id!r}",
        )
    return conn_id


def require_connection(conn_id: str, user: BaseUser, session: Session) -> None:
    """Refuse (403) a user without read access to connection ``conn_id``.

    The refusal is the same whether or not the connection exists, so it tells nothing about other
    connections.

    :param conn_id: the connection.
    :param user: the request's user.
    :param session: a metadata database session (to find the connection's team).
    """
    from airflow.models import Connection
    from sqlalchemy import select

    team = session.scalar(select(Connection.team_name).where(Connection.conn_id == conn_id))
    details = ConnectionDetails(conn_id=conn_id, team_name=team)
    if not auth_manager().is_authorized_connection(method="GET", details=details, user=user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"you may not read connection {conn_id!r}: ask for read access to it"
        )


def require_dag(dag_id: str, user: BaseUser, entity: DagAccessEntity = DagAccessEntity.TASK_INSTANCE) -> None:
    """Refuse (403) a user without read access to ``entity`` of DAG ``dag_id``.

    :param dag_id: the DAG.
    :param user: the request's user.
    :param entity: what of the DAG is read (its task instances by default).
    """
    if not may_read_dag(dag_id, user, entity):
        what = "" if entity is DagAccessEntity.TASK_INSTANCE else f" ({entity.value})"
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"you may not read DAG {dag_id!r}{what}: ask for read access to it"
        )


def may_read_dag(dag_id: str, user: BaseUser, entity: DagAccessEntity) -> bool:
    """Whether the user may read ``entity`` of DAG ``dag_id``.

    :param dag_id: the DAG.
    :param user: the request's user.
    :param entity: what of the DAG is read.
    """
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return auth_manager().is_authorized_dag(method="GET", access_entity=entity, details=details, user=user)


def fleet_readable_dag_ids(user: BaseUser, dag_ids: Iterable[str]) -> set[str]:
    """Those of ``dag_ids`` whose fleet tasks' records the user may read: the DAG's task instances and XComs
    (:data:`FLEET_ENTITIES`, what the fleet tab asks).

    :param user: the request's user.
    :param dag_ids: the DAGs in question (already readable by the user).
    """
    return {dag_id for dag_id in set(dag_ids) if all(may_read_dag(dag_id, user, e) for e in FLEET_ENTITIES)}


def readable_dag_ids(user: BaseUser) -> set[str]:
    """The DAGs whose rollouts the user may see (read access to the DAG).

    :param user: the request's user.
    """
    return set(auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def readable_connections(user: BaseUser, session: Session) -> list[str]:
    """Ids of the ``deployment_service`` connections in the metadata database the user may read, sorted.

    Connections from environment variables or a secrets backend are not listed (Airflow cannot list
    them); the pages let a person type their id.

    :param user: the request's user.
    :param session: a metadata database session.
    """
    from airflow.models import Connection
    from sqlalchemy import select

    ours = set(session.scalars(select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE)))
    if not ours:
        return []
    allowed = auth_manager().get_authorized_connections(user=user, method="GET", session=session)
    return sorted(ours & set(allowed))


__all__ = [
    "FLEET_ENTITIES",
    "UserDep",
    "check_conn_id",
    "fleet_readable_dag_ids",
    "may_read_dag",
    "readable_connections",
    "readable_dag_ids",
    "require_connection",
    "require_dag",
]
