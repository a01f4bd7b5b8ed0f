"""The fleet rollout's notifications (``FleetRolloutOperator(notify={...})``, see
:mod:`~airflow_provider.tasks.notify`): once the rollout is decided, one event per deployment it landed
(``rolled_out``), whose analysis failed it (``analysis_failed``) or that it rolled back (``rolled_back``), and
``fleet_aborted`` when the rollout stopped before the end (the failure budget spent, a failed canary, an abort from
the Rollouts view: ``extra["aborted_by"]`` then names the user), naming the
deployments that failed; ``inconclusive`` when a person is asked (:mod:`~airflow_provider.tasks.fleet.asking`) and
``preflight_failed`` when the analysis is refused before any patch.

Each event is sent at most once across the task's tries: the events sent are recorded in ``task_state_store``
(:class:`NotifiedRecord`, under ``<progress key>/notified``) before they are sent, so a retry that finishes the same
rollout again (a failed rollout's retry, a try that failed after notifying) does not send them again. A try that dies
between the record and the sending loses those notifications rather than sending them twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider.decisions.fleet_progress import ROLLED_BACK_OUTCOMES, FleetProgress, Outcome
from airflow_provider.tasks.fleet.progress import STATE_KEY
from airflow_provider.tasks.notify import NotifiedRecord as TaskNotifiedRecord
from airflow_provider.tasks.notify import Notifying

if TYPE_CHECKING:
    import logging

__all__ = ["NOTIFIED_KEY", "NotifiedRecord", "Notifying", "notify_fleet_result"]

NAMED_FAILURES = 20
"""Most failed deployments a ``fleet_aborted`` notification names."""
NOTIFIED_KEY = f"{STATE_KEY}/notified"
"""Key in ``task_state_store`` of the fleet's notifications sent (``{"sent": [event key, ...]}``)."""


class NotifiedRecord(TaskNotifiedRecord):
    """The fleet's notifications sent, across tries, under :data:`NOTIFIED_KEY` (in memory only without a store).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param log: the task's logger.
    """

    def __init__(self, store: Any, log: logging.Logger | Any) -> None:
        super().__init__(store, log, key=NOTIFIED_KEY)


def notify_fleet_result(
    task: Notifying, context: Mapping[str, Any], progress: FleetProgress, *, aborted_by: str | None = None
) -> None:
    """Send the fleet rollout's events to the task's notifiers (each notifier failure logged, never raised), each at
    most once across tries.

    :param task: the fleet task (its ``notify`` and logger).
    :param context: the task's context.
    :param progress: the decided rollout.
    :param aborted_by: the user who aborted it from the Rollouts view, if one did (``extra["aborted_by"]``).
    """
    if not getattr(task, "notify", None):
        return
    events: list[tuple[str, str, dict[str, Any]]] = []
    analysis_failed = {row.deployment_id for row in progress.analysis_failures}
    for row in progress.rows:
        fields: dict[str, Any] = {
            "deployment_id": row.deployment_id,
            "revision_id": row.to_revision,
            "deployment_name": row.name,
            "previous_revision_id": row.from_revision,
            "extra": {"wave": row.wave},
        }
        about = f"{row.deployment_id}/{row.to_revision}"
        analysis = row.analysis if isinstance(row.analysis, Mapping) else None
        if row.outcome == Outcome.LANDED:
            events.append((f"rolled_out/{about}", "rolled_out", {"analysis": analysis, **fields}))
        if analysis is not None and row.deployment_id in analysis_failed:
            reason = str(analysis.get("reason"))
            events.append(
                (f"analysis_failed/{about}", "analysis_failed", {"analysis": analysis, "reason": reason, **fields})
            )
        if row.outcome in ROLLED_BACK_OUTCOMES:
            events.append((f"rolled_back/{about}", "rolled_back", {"reason": row.message or None, **fields}))
    if progress.stopped:
        failed = progress.failures
        named = ", ".join(row.name for row in failed[:NAMED_FAILURES]) + (
            " ..." if len(failed) > NAMED_FAILURES else ""
        )
        counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(progress.counts().items()) if count)
        extra = {"failed": named or "none", "outcomes": counts, **({"aborted_by": aborted_by} if aborted_by else {})}
        fields = {"deployment_id": None, "revision_id": None, "reason": progress.stopped, "extra": extra}
        events.append(("fleet_aborted", "fleet_aborted", fields))
    notifiers = getattr(task, "notify", None) or {}
    wanted = [item for item in events if notifiers.get(item[1])]  # only events someone listens to are recorded
    log = getattr(task, "log", None)
    record = NotifiedRecord(context.get("task_state_store"), log)
    new = set(record.claim([key for key, _event, _fields in wanted]))
    skipped = len(wanted) - len(new)
    if skipped and log is not None:
        log.info("%d notification(s) were sent by an earlier try: not sent again", skipped)
    for key, event, fields in wanted:
        if key in new:
            task._notify(context, event, **fields)
