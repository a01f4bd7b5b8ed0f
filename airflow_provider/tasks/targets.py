"""Which deployment a task targets, checked when the DAG is parsed: exactly one of ``deployment_id`` and
``deployment_name``, and a literal ``deployment_id`` that is a UUID (a name there is refused, suggesting
``deployment_name``). Used by the tasks that take both (patch, rollback, rollout sensor).
"""

from __future__ import annotations

from typing import Any

from airflow_provider.models import canonical_uuid
from airflow_provider.tasks.base import MISSING_RENDERS

__all__ = ["exactly_one_target", "is_template", "literal_deployment_id"]


def exactly_one_target(deployment_id: Any, deployment_name: Any) -> None:
    """``ValueError`` (at DAG parse) unless exactly one of ``deployment_id`` and ``deployment_name`` is given.

    :param deployment_id: the argument as given (a literal, a template or an ``XComArg``).
    :param deployment_name: the argument as given.
    """
    if deployment_id is not None and deployment_name is not None:
        raise ValueError(
            f"give deployment_id or deployment_name, not both (got deployment_id={deployment_id!r} and "
            f"deployment_name={deployment_name!r})"
        )
    if deployment_id is None and deployment_name is None:
        raise ValueError("give deployment_id (the deployment's UUID) or deployment_name (its exact name)")
    literal_deployment_id(deployment_id)


def is_template(value: str) -> bool:
    """Whether ``value`` is still Jinja (rendered when the task runs), so cannot be checked at DAG parse."""
    return "{{" in value or "{%" in value


def literal_deployment_id(deployment_id: Any) -> None:
    """``ValueError`` (at DAG parse) when ``deployment_id`` is a plain string that is not a UUID: most often a
    deployment's name, so the message suggests ``deployment_name``. Templates, ``XComArg`` values and the
    renders of a missing value (checked when the task runs) pass.

    :param deployment_id: the argument as given.
    """
    if not isinstance(deployment_id, str) or is_template(deployment_id) or deployment_id in MISSING_RENDERS:
        return
    try:
        canonical_uuid(deployment_id, "deployment_id")
    except ValueError:
        raise ValueError(
            f"deployment_id must be the deployment's UUID (e.g. 123e4567-e89b-12d3-a456-426614174000), got "
            f"{deployment_id!r}: to name the deployment, pass deployment_name={deployment_id!r} instead (looked "
            "up by its exact name when the task runs)"
        ) from None
