"""What a fleet rollout reports: the plan before anything is patched, each wave as it finishes, the summary
(``fleet_summary``), the failure that names what stopped it, and one asset event per deployment it changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import (
    REASON_UNKNOWN,
    REASON_UNKNOWN_OUTCOMES,
    ROLLED_BACK_OUTCOMES,
    FleetProgress,
    Outcome,
)
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import MAX_PAGE_SIZE
from airflow_provider.tasks.events import emit_revision_event
from airflow_provider.tasks.fleet.rollback import is_partial

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

__all__ = ["emit_events", "log_plan", "log_wave", "report_result", "stopped_failure", "summary"]


def log_plan(progress: FleetProgress, log: logging.Logger | Any) -> None:
    """Log the plan: the waves and their deployments (50 names a wave at most), and the budget.

    :param progress: a fresh progress.
    :param log: the task's logger.
    """
    total = len(progress.rows)
    log.info(
        "Fleet rollout plan: %d deployment(s) in %d wave(s); the rollout stops when more than %d fail",
        total,
        len(progress.waves),
        progress.allowed_failures,
    )
    for wave in progress.waves:
        names = [row.name for row in wave.rows]
        shown = ", ".join(names[:50]) + (f" ... and {len(names) - 50} more" if len(names) > 50 else "")
        log.info("  %s (%d): %s", wave.name, len(names), shown)


def log_wave(progress: FleetProgress, index: int, log: logging.Logger | Any) -> None:
    """Log a finished wave: its outcomes counted, and the failures so far against the budget.

    :param progress: the rollout's progress.
    :param index: the wave that finished.
    :param log: the task's logger.
    """
    wave = progress.waves[index]
    counts: dict[str, int] = {}
    for row in wave.rows:
        counts[row.outcome] = counts.get(row.outcome, 0) + 1
    unknown = len(progress.reason_unknown)
    log.info(
        "%s finished: %s; %d failure(s)%s so far of %d allowed",
        wave.name,
        ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())),
        len(progress.failures),
        f" and {unknown} rollback(s) of an earlier try whose reason was not recorded" if unknown else "",
        progress.allowed_failures,
    )


def summary(progress: FleetProgress, *, analysed: bool) -> dict[str, Any]:
    """What the task pushes under ``fleet_summary``: the counts per outcome, the failures, the budget, why it
    stopped; with an analysis, its failures and verdicts too, and in a dry run (``Analysis(dry_run=True)``)
    ``would_have``: ``{name: "would have rolled back"}`` of each deployment the gate would have acted on.

    :param progress: the finished progress.
    :param analysed: whether the rollout had an analysis.
    """
    shown: dict[str, Any] = {
        "counts": progress.counts(),
        "failures": len(progress.failures),
        "allowed_failures": progress.allowed_failures,
        "stopped": progress.stopped,
    }
    if analysed:
        shown["analysis_failures"] = len(progress.analysis_failures)
        shown["analysis_verdicts"] = progress.analysis_verdicts()
        said = {row.name: (row.analysis or {}).get("would_have") for row in progress.rows}
        would_have = {name: what for name, what in said.items() if what}
        if would_have:
            shown["would_have"] = would_have
    return shown


def stopped_failure(progress: FleetProgress) -> AirflowFailException:
    """The failure of a rollout that stopped: why, the deployments that failed (20 at most, with why), those
    rolled back for a reason not recorded or with their wave, and how many were not patched.

    :param progress: the stopped progress.
    """
    failures, unknown = progress.failures, progress.reason_unknown
    named = "; ".join(f"{row.name} ({row.message})" for row in failures[:20])
    more = f"; and {len(failures) - 20} more" if len(failures) > 20 else ""
    failed = f" Failed: {named}{more}." if failures else " Failed: none."
    unexplained = (
        f" {len(unknown)} deployment(s) were {REASON_UNKNOWN} (counted against the budget, not as "
        f"failures): {', '.join(row.name for row in unknown[:20])}{' ...' if len(unknown) > 20 else ''}."
        if unknown
        else ""
    )
    withdrawn = [row.name for row in progress.rolled_back_with_wave]
    with_wave = (
        f" {len(withdrawn)} deployment(s) that landed were rolled back with their wave (not failures): "
        f"{', '.join(withdrawn[:20])}{' ...' if len(withdrawn) > 20 else ''}."
        if withdrawn
        else ""
    )
    skipped = progress.counts().get(Outcome.NOT_PATCHED, 0)
    return AirflowFailException(
        f"fleet rollout stopped: {progress.stopped}.{failed}{unexplained}{with_wave} "
        f"{skipped} deployment(s) in later waves were not patched."
    )


def report_result(progress: FleetProgress, log: logging.Logger | Any) -> None:
    """Log a rollout that did not stop: the failures within the budget, and the rollbacks whose reason was
    not recorded counted against it.

    :param progress: the finished progress.
    :param log: the task's logger.
    """
    failures, unknown = progress.failures, progress.reason_unknown
    if failures:
        log.warning(
            "%d deployment(s) failed, within the budget of %d: %s",
            len(failures),
            progress.allowed_failures,
            ", ".join(row.name for row in failures),
        )
    if unknown:
        log.warning(
            "%d deployment(s) were %s, counted against the budget of %d (within it): %s",
            len(unknown),
            REASON_UNKNOWN,
            progress.allowed_failures,
            ", ".join(row.name for row in unknown),
        )


def emit_events(
    context: Context,
    hook: DeploymentServiceHook,
    progress: FleetProgress,
    *,
    outlets: list[Any],
    log: logging.Logger | Any,
) -> None:
    """One asset event per deployment this rollout changed, read back (one list request per 100): a row
    that landed and still serves its revision (``rolled_out``), and a row rolled back whose rollback still
    serves (``rolled_back``, or ``rolled_back_partially`` with the ``not_restored`` clauses in its extra;
    the secrets the change set are named there too). A row's analysis, when it has one, is the extra
    ``analysis`` (the one that passed the revision, or failed the one rolled back).

    :param context: the task context.
    :param hook: the hook.
    :param progress: the finished progress.
    :param outlets: the task's outlets.
    :param log: the task's logger.
    """
    landed = {
        row.deployment_id: row
        for row in progress.rows
        if row.outcome == Outcome.LANDED and row.rollback_revision is None and row.to_revision
    }
    restored = {
        row.deployment_id: row for row in progress.rows if row.outcome in ROLLED_BACK_OUTCOMES and row.rollback_revision
    }
    ids = [*landed, *restored]
    for start in range(0, len(ids), MAX_PAGE_SIZE):
        try:
            page = hook.list_deployments(deployment_ids=ids[start : start + MAX_PAGE_SIZE], limit=MAX_PAGE_SIZE)
        except DeploymentServiceError as err:  # the rollout succeeded; only its events are missing
            log.warning("Could not read the changed deployments back for their asset events (%s)", err)
            continue
        for deployment in page.resources:
            row = landed.get(deployment.id)
            if row is not None and deployment.active_revision_id == row.to_revision:
                emit_revision_event(
                    context,
                    deployment,
                    previous_revision_id=row.from_revision,
                    outlets=outlets,
                    log=log,
                    analysis=row.analysis,
                )
            row = restored.get(deployment.id)
            if row is not None and deployment.active_revision_id == row.rollback_revision:
                partial = row.outcome in (
                    Outcome.ROLLED_BACK_PARTIALLY,
                    Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY,
                ) or (row.outcome in REASON_UNKNOWN_OUTCOMES and is_partial(row))
                emit_revision_event(
                    context,
                    deployment,
                    previous_revision_id=row.to_revision,
                    outcome="rolled_back_partially" if partial else "rolled_back",
                    outlets=outlets,
                    log=log,
                    not_restored=row.not_restored,
                    analysis=row.analysis,  # the analysis that failed the revision rolled back, if any
                )
