"""The fleet rollout's notifications (``FleetRolloutOperator(notify={...})``, see
:mod:`~airflow_provider.tasks.notify`): once the rollout is decided, one event per deployment it landed
(``rolled_out``), whose analysis failed it (``analysis_failed``) or that it rolled back (``rolled_back``), and
``fleet_aborted`` when the rollout stopped before the end (the failure budget spent, a failed canary, an abort from
the Rollouts view: ``extra["aborted_by"]`` then names the user), naming the deployments that failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider.fleet import ANALYSIS_FAILED_VERDICTS, ROLLED_BACK_OUTCOMES, FleetProgress, Outcome

if TYPE_CHECKING:
    from airflow_provider.tasks.notify import RolloutNotifying

__all__ = ["notify_fleet_result"]

NAMED_FAILURES = 20
"""Most failed deployments a ``fleet_aborted`` notification names."""


def notify_fleet_result(
    task: RolloutNotifying, context: Mapping[str, Any], progress: FleetProgress, *, aborted_by: str | None = None
) -> None:
    """Send the fleet rollout's events to the task's notifiers (each notifier failure logged, never raised).

    :param task: the fleet task (its ``notify`` and logger).
    :param context: the task's context.
    :param progress: the decided rollout.
    :param aborted_by: the user who aborted it from the Rollouts view, if one did (``extra["aborted_by"]``).
    """
    if not getattr(task, "notify", None):
        return
    for row in progress.rows:
        fields: dict[str, Any] = {
            "deployment_id": row.deployment_id,
            "revision_id": row.to_revision,
            "deployment_name": row.name,
            "previous_revision_id": row.from_revision,
            "extra": {"wave": row.wave},
        }
        analysis = row.analysis if isinstance(row.analysis, Mapping) else None
        if row.outcome == Outcome.LANDED:
            task._notify(context, "rolled_out", analysis=analysis, **fields)
        if analysis is not None and analysis.get("verdict") in ANALYSIS_FAILED_VERDICTS:
            task._notify(context, "analysis_failed", analysis=analysis, reason=str(analysis.get("reason")), **fields)
        if row.outcome in ROLLED_BACK_OUTCOMES:
            task._notify(context, "rolled_back", reason=row.message or None, **fields)
    if progress.stopped:
        failed = progress.failures
        named = ", ".join(row.name for row in failed[:NAMED_FAILURES]) + (
            " ..." if len(failed) > NAMED_FAILURES else ""
        )
        counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(progress.counts().items()) if count)
        task._notify(
            context,
            "fleet_aborted",
            deployment_id=None,
            revision_id=None,
            reason=progress.stopped,
            extra={"failed": named or "none", "outcomes": counts, **({"aborted_by": aborted_by} if aborted_by else {})},
        )
