"""Handing a landed revision to the guard (``PatchDeploymentOperator(guard=...)``, ``FleetRolloutOperator(guard=...)``):
the task writes a :class:`~airflow_provider.analysis.guard.GuardRecord` (the revision, the one that served before,
the baseline its rollout measured, the guard's analysis and until when) to an Airflow Variable and ends; the guard's
trigger (:class:`~airflow_provider.triggers.guard.DeploymentGuardTrigger`) judges it from the triggerer. Nothing
runs on a worker while it guards. No secret goes into the record (ids, names, measurements and the analysis).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider.analysis.definitions import Analysis
from airflow_provider.analysis.guard import Guard, GuardRecord, guard_key

__all__ = ["checked_guard", "hand_fleet_to_guard", "hand_landed_to_guard", "hand_to_guard", "handed_by_of"]


def checked_guard(guard: object, analysis: Analysis | None, *, wait_for_rollout: bool = True) -> Guard | None:
    """``guard`` checked when the task is built: a :class:`Guard` (or ``None``), with a task that waits for its
    revision, and, when the guard's checks compare with the baseline, a rollout analysis with a preflight that
    measures the same checks (by name): the guard compares with the baseline the rollout measured.

    :param guard: the ``guard`` argument.
    :param analysis: the task's ``analysis``.
    :param wait_for_rollout: the task's ``wait_for_rollout`` (a guard needs to know its revision landed).
    :raises ValueError: naming ``guard`` and what was expected.
    """
    if guard is None:
        return None
    if not isinstance(guard, Guard):
        raise ValueError(f"guard must be an airflow_provider.analysis.guard.Guard, got {type(guard).__name__}")
    if not wait_for_rollout:
        raise ValueError(
            "guard needs a task that waits for its revision (its wait_for_rollout is off): only a landed revision "
            "is guarded"
        )
    on_baseline = [check.label() for check in guard.analysis.checks if getattr(check, "uses_baseline", False)]
    if on_baseline:
        measured = (
            {check.label() for check in analysis.checks} if analysis is not None and analysis.preflight else set()
        )
        missing = [label for label in on_baseline if label not in measured]
        if missing:
            raise ValueError(
                f"guard: the check(s) {', '.join(map(repr, missing))} compare with the baseline its rollout measured, "
                "but the task's analysis has no check of that name with a preflight: give the task an analysis "
                "(preflight on) with the same check(s), or guard with fixed conditions"
            )
    return guard


def hand_to_guard(
    guard: Guard,
    *,
    conn_id: str,
    deployment: Mapping[str, Any],
    previous_revision_id: str | None,
    baseline: Sequence[Mapping[str, Any]] | None,
    handed_by: Mapping[str, Any],
    log: Any,
    landed_at: datetime | None = None,
    store: Any = None,
) -> dict[str, Any]:
    """Hand the revision ``deployment`` serves to the guard: its record written to the Variable
    :func:`~airflow_provider.analysis.guard.guard_key` (replacing the deployment's earlier guard, if any).

    :param guard: the guard.
    :param conn_id: the deployment-service connection (rendered).
    :param deployment: the live deployment (redacted JSON or a model's dump).
    :param previous_revision_id: the revision that served before (what the guard's DAG rolls back to).
    :param baseline: the baseline the rollout measured (its preflight's measurements), ``None`` when none.
    :param handed_by: the task instance (``dag_id``, ``run_id``, ``task_id``, ``map_index``).
    :param log: the task's logger.
    :param landed_at: when it landed (default now).
    :param store: what writes the Variable (``set(key, value, serialize_json=True)``; default Airflow's ``Variable``).
    :returns: the record as written (JSON).
    """
    landed = landed_at or datetime.now(timezone.utc)
    record = GuardRecord(
        deployment_id=str(deployment["id"]),
        deployment_name=str(deployment["name"]),
        revision_id=str(deployment["active_revision_id"]),
        previous_revision_id=previous_revision_id or None,
        conn_id=conn_id,
        landed_at=landed,
        until=landed + timedelta(seconds=guard.for_seconds),
        analysis=guard.analysis.to_json(),
        baseline=[dict(item) for item in baseline] if baseline else None,
        custom_url=(deployment.get("source_config") or {}).get("custom_url"),
        handed_by=dict(handed_by),
    )
    value = record.model_dump(mode="json")
    if store is None:
        from airflow.sdk import Variable

        store = Variable
    store.set(guard_key(conn_id, record.deployment_id), value, serialize_json=True)
    log.info(
        "Revision %s of %r handed to the guard until %s (back to %s if it regresses)",
        record.revision_id,
        record.deployment_name,
        record.until.isoformat(timespec="seconds"),
        record.previous_revision_id,
    )
    return value


def handed_by_of(context: Mapping[str, Any]) -> dict[str, Any]:
    """The task instance of ``context`` as a guard record names it.

    :param context: the task's context.
    """
    ti = context.get("ti")
    return {
        "dag_id": getattr(ti, "dag_id", None),
        "run_id": getattr(ti, "run_id", None),
        "task_id": getattr(ti, "task_id", None),
        "map_index": getattr(ti, "map_index", -1),
    }


def hand_landed_to_guard(
    task: Any,
    context: Mapping[str, Any],
    live: Mapping[str, Any],
    previous: str | None,
    analysis: Mapping[str, Any] | None,
    state_key: str,
) -> dict[str, Any]:
    """Hand a patch task's landed revision to its guard (``task.guard``), with the baseline its preflight measured:
    the analysis result's, else the one recorded in ``task_state_store`` under ``state_key`` (a retry's); the
    revision that served before likewise.

    :param task: the patch task (its ``guard``, ``deployment_service_conn_id`` and ``log``).
    :param context: the task's context.
    :param live: the live deployment (redacted JSON).
    :param previous: the revision that served before the patch.
    :param analysis: the analysis result that passed the revision, ``None`` when none.
    :param state_key: the task's ``task_state_store`` key.
    """
    store = context.get("task_state_store")
    recorded = store.get(state_key) if store is not None else None
    recorded = recorded if isinstance(recorded, dict) else {}
    baseline = (analysis or {}).get("baseline") or recorded.get("baseline")
    previous = previous or recorded.get("previous_active_revision_id")
    return hand_to_guard(
        task.guard,
        conn_id=task.deployment_service_conn_id,
        deployment=live,
        previous_revision_id=previous,
        baseline=baseline,
        handed_by=handed_by_of(context),
        log=task.log,
    )


def hand_fleet_to_guard(task: Any, context: Mapping[str, Any], progress: Any) -> list[dict[str, Any]]:
    """Hand each deployment a fleet rollout landed to its guard (``task.guard``): the revision it created, the one
    that served before and the baseline its preflight measured (a row that did not land, or was rolled back, is
    not guarded). A deployment that no longer serves the revision ends its guard at the guard's first look.

    :param task: the fleet task (its ``guard``, ``deployment_service_conn_id`` and ``log``).
    :param context: the task's context.
    :param progress: the finished :class:`~airflow_provider.decisions.fleet_progress.FleetProgress`.
    :returns: the records written.
    """
    from airflow_provider.decisions.fleet_progress import Outcome

    handed_by = handed_by_of(context)
    records = []
    for row in progress.rows:
        if row.outcome != Outcome.LANDED or row.rollback_revision is not None or not row.to_revision:
            continue
        records.append(
            hand_to_guard(
                task.guard,
                conn_id=task.deployment_service_conn_id,
                deployment={"id": row.deployment_id, "name": row.name, "active_revision_id": row.to_revision},
                previous_revision_id=row.from_revision,
                baseline=row.baseline,
                handed_by=handed_by,
                log=task.log,
            )
        )
    return records
