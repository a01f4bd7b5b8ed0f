"""Rolling a wave of a fleet rollout back: the deployments whose new revision failed (and, when the wave
stops the rollout, those that landed), each through
:func:`~airflow_provider.tasks.rollback.start_rollback`, marked and recorded before its request so a retry
never sends one twice; then how each ended, judged on the deployment (the previous build and
``resource_spec`` serving again, or what was not undone)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import (
    REASON_UNKNOWN_OUTCOMES,
    SUCCESS_OUTCOMES,
    FleetRow,
    Outcome,
    WaveRecord,
    aborted_unjudged,
)
from airflow_provider.decisions.spec_changes import spec_shows
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    Deployment,
)
from airflow_provider.tasks.fleet.plan import read_deployments
from airflow_provider.tasks.fleet.progress import RollbackRecords
from airflow_provider.tasks.rollback import (
    RESOURCE_SPEC_NOT_SENT,
    RESOURCE_SPEC_NOT_SHOWN,
    RESOURCE_SPEC_VERDICTS,
    RollbackStarted,
    find_earlier_rollback,
    reattach_recorded_rollback,
    start_rollback,
)

if TYPE_CHECKING:
    import logging


ROLLBACK_SAVE_EVERY = 20
"""The wave is saved after this many rollbacks started (and at the end): each rollback's own record, written
before and after its request, already protects a retry, so the wave's rows need not be written N times."""


def secrets_clause(names: Sequence[str]) -> str:
    """The ``not_restored`` clause naming the secrets a change set (names only: values are never kept).

    :param names: the secret names.
    """
    return f"secrets {', '.join(names)} (a rollback cannot restore secret values: the deployment keeps the new ones)"


def start_rollbacks(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    *,
    stopping: str | None,
    save: Callable[[], None],
    log: logging.Logger | Any,
    records: RollbackRecords | None = None,
    earlier_try_since: datetime | None = None,
) -> dict[str, str | None]:
    """Roll back every deployment of the wave whose new revision went live and failed, or was still
    rolling out when the watch timed out (it may yet go live), and, when the wave stops the rollout
    (``stopping``), every one that landed (it stays ``landed`` until its rollback is decided, then becomes
    ``rolled_back_with_wave``: not a failure); do not wait.

    A rollback over a revision still rolling out queues behind it on the service: that revision may serve
    for a while, then the restored one replaces it (the rollback's watch waits for that, within
    ``timeout``). When the still-building revision fails instead, there is nothing to roll back and the
    rollback only checks that the previous revision still serves.

    Uses :func:`~airflow_provider.tasks.rollback.start_rollback` with what the row recorded before its
    patch: the previous ``resource_spec`` (restored whole, with the build, in one revision when it changed)
    and config (when the service cannot say). What it does not undo is kept in the row's ``not_restored``:
    its clauses, plus one naming the secrets the patch set (never their values).

    Never twice, never claimed: every rollback about to be sent is marked in the wave's rows
    (``rollback_requested_after``, one save before any request), then recorded in its own key just before its
    request and once sent (``records``: :class:`~airflow_provider.tasks.fleet.progress.RollbackRecords`). A retry
    reattaches to a recorded rollback (:func:`~airflow_provider.tasks.rollback.reattach_recorded_rollback`: waits
    for it, or sends one that did not land), and without a record looks for it on the deployment from the mark (or
    the run's start) on (:func:`~airflow_provider.tasks.rollback.find_earlier_rollback`, positive evidence only).
    When neither can tell, the row keeps its outcome and says so; nothing is sent again. A rollback that cannot
    start (refused, the deployment gone, the service's 4xx) leaves its row ``failed`` (or ``landed``) with the
    reason, is not asked for again (a wave with an analysis calls this as each verdict comes, then once more at its
    end) and the others go on; a transient failure that outlived the client's retries fails the task once what was
    sent is recorded (a retry resumes here).

    :param hook: the hook.
    :param wave: the wave.
    :param stopping: why the wave stops the rollout (``"the failure budget was exceeded"``...), or ``None``
        when it does not: the rows that landed are rolled back too only when it does.
    :param save: records the progress (before the first request, every :data:`ROLLBACK_SAVE_EVERY`
        rollbacks, and at the end).
    :param log: the task's logger.
    :param records: the wave's rollback records (``None`` without a task state store).
    :param earlier_try_since: the run's start when this is a retry (a rollback found on a deployment may be
        an earlier try's), else ``None``.
    :returns: ``{deployment_id: revision to wait for}`` of every rollback started and not yet decided,
        an earlier try's included (see :func:`pending_rollbacks`).
    """
    wanted = [
        row
        for row in wave.rows
        if (row.went_live or row.timed_out)
        and row.to_revision
        and row.rollback_revision is None
        and not row.rollback_decided  # one that could not be started is not asked for again
        and (row.outcome == Outcome.FAILED or (stopping is not None and row.outcome == Outcome.LANDED))
    ]
    for row in [row for row in wanted if not row.from_revision]:
        wanted.remove(row)
        if "the revision that served before it is not known" not in row.message:
            _rollback_not_started(wave, row, "is not possible: the revision that served before it is not known", log)
    live = read_deployments(hook, [row.deployment_id for row in wanted]) if wanted else {}
    marked_earlier = {row.deployment_id for row in wanted if row.rollback_requested_after}
    for row in wanted:
        if row.deployment_id in live and not row.rollback_requested_after:
            row.rollback_requested_after = live[row.deployment_id].updated_at.isoformat()
    save()  # before any request: a retry looks for these rollbacks instead of refusing or re-sending them
    started_count = 0
    for row in wanted:
        deployment = live.get(row.deployment_id)
        if deployment is None:
            _rollback_not_started(wave, row, f"could not be started: deployment {row.name!r} no longer exists", log)
            continue
        retried = row.deployment_id in marked_earlier or earlier_try_since is not None
        try:
            started = _earlier_rollback(hook, row, deployment, records, earlier_try_since, log) if retried else None
        except AirflowFailException as err:
            _rollback_not_started(wave, row, f"could not be confirmed: {err}", log)
            continue
        if started is None:
            try:
                started = _send_rollback(hook, row, deployment, records, log)
            except AirflowFailException as err:
                _rollback_not_started(wave, row, f"was refused: {err}", log)
                continue
            except DeploymentServiceError as err:
                if err.transient:
                    save()  # what was sent is recorded: a retry resumes here
                    raise
                _rollback_not_started(wave, row, f"could not be started: {err}", log)
                continue
        _rollback_started(wave, row, started, stopping, log)
        started_count += 1
        if started_count % ROLLBACK_SAVE_EVERY == 0:
            save()
    save()
    return pending_rollbacks(wave)


def _send_rollback(
    hook: DeploymentServiceHook,
    row: FleetRow,
    deployment: Deployment,
    records: RollbackRecords | None,
    log: logging.Logger | Any,
) -> RollbackStarted:
    """Start the row's rollback, its intent recorded just before the request and what was sent just after."""
    assert row.from_revision is not None
    started = start_rollback(
        hook,
        deployment,
        row.from_revision,
        rolling_back_from=row.to_revision,
        fallback_config=row.previous_config,
        resource_spec=row.previous_resource_spec,
        resource_spec_fields=row.resource_spec_changes,
        before_sending=None if records is None else (lambda intent: records.set(row.deployment_id, intent.record())),
        log=log,
    )
    if records is not None:
        records.set(row.deployment_id, started.record())
    return started


def _earlier_rollback(
    hook: DeploymentServiceHook,
    row: FleetRow,
    deployment: Deployment,
    records: RollbackRecords | None,
    earlier_try_since: datetime | None,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback an earlier try (or this one, before it died) sent for ``row``, from its record, else
    found on the deployment; ``None`` when none landed (send it). :class:`AirflowFailException` when whether
    one landed cannot be told (the row then says so; nothing is sent).

    :param hook: the hook.
    :param row: a row whose rollback is wanted and not recorded as accepted in the wave.
    :param deployment: the deployment as just read.
    :param records: the wave's rollback records, if any.
    :param earlier_try_since: the run's start on a retry.
    :param log: the task's logger.
    """
    assert row.from_revision is not None
    record = records.get(row.deployment_id) if records is not None else None
    if (
        record is not None
        and record.get("deployment_id") == row.deployment_id
        and record.get("to_revision_id") == row.from_revision
        and record.get("rolled_back_from") in (None, row.to_revision)
    ):
        return reattach_recorded_rollback(hook, deployment, record, log=log)
    if row.rollback_requested_after:
        since: datetime | None = datetime.fromisoformat(row.rollback_requested_after)
    else:
        since = earlier_try_since
    return find_earlier_rollback(
        hook,
        deployment,
        row.from_revision,
        since=since,
        rolling_back_from=row.to_revision,
        fallback_config=row.previous_config,
        resource_spec=row.previous_resource_spec,
        resource_spec_fields=row.resource_spec_changes,
        log=log,
    )


def _rollback_started(
    wave: WaveRecord, row: FleetRow, started: RollbackStarted, stopping: str | None, log: logging.Logger | Any
) -> None:
    """Record a rollback the service accepted (or that a retry found): a retry watches it."""
    if row.outcome == Outcome.LANDED:
        row.message = f"{row.message}; rolled back with its wave ({stopping})"
    row.rollback_revision = started.revision_id
    row.rollback_allowed_latest = started.allowed_latest_revision_id
    row.rollback_path = started.path
    row.not_restored = [*started.not_restored, *([secrets_clause(row.secrets_changed)] if row.secrets_changed else [])]
    log.warning("%s: %s: %s", wave.name, row.name, started.summary())


def _rollback_not_started(wave: WaveRecord, row: FleetRow, reason: str, log: logging.Logger | Any) -> None:
    """Record a rollback that was never sent: a failed row stays ``failed``; a row that landed keeps its
    outcome (its new revision still serves), the reason in its message either way. Decided: it is not asked
    for again (a wave's failed rows are rolled back as their verdicts come, then the wave's at its end)."""
    row.rollback_decided = True
    if row.outcome == Outcome.FAILED:
        row.decide(Outcome.FAILED, f"{row.message}; the rollback {reason}", time.time())
    else:
        row.message = f"{row.message}; rolling it back with its wave {reason}"
    log.warning("%s: %s: %s", wave.name, row.name, row.message)


ROLLBACK_OUTCOMES = frozenset({Outcome.FAILED, Outcome.LANDED, Outcome.ROLLED_BACK_REASON_UNKNOWN})
"""Outcomes a row keeps while its rollback is awaited: ``failed``, ``landed`` (rolled back with its wave), or
``rolled_back_reason_unknown`` (an earlier try's rollback, found on the deployment)."""


def pending_rollbacks(wave: WaveRecord) -> dict[str, str | None]:
    """``{deployment_id: rollback revision}`` of the wave's rollbacks started (by this try or an earlier
    one) whose outcome is not recorded yet.

    :param wave: the wave.
    """
    return {
        row.deployment_id: row.rollback_revision
        for row in wave.rows
        if row.rollback_revision is not None and not row.rollback_decided and row.outcome in ROLLBACK_OUTCOMES
    }


def rollbacks_allowed_latest(wave: WaveRecord) -> dict[str, str]:
    """``{deployment_id: revision}`` allowed to stay the latest while a pending rollback goes live (a redeploy
    that made no revision; see :class:`~airflow_provider.decisions.fleet_progress.WaveTracker`).

    :param wave: the wave.
    """
    pending = pending_rollbacks(wave)
    return {
        row.deployment_id: row.rollback_allowed_latest
        for row in wave.rows
        if row.deployment_id in pending and row.rollback_allowed_latest
    }


def is_partial(row: FleetRow) -> bool:
    """Whether a rollback left part of the change in place, besides secrets (a resource_spec not the
    previous one, a branch rebuilt from its head): then it is not ``rolled_back``.

    :param row: a row whose rollback went live.
    """
    return any(not clause.startswith("secrets ") for clause in row.not_restored)


def apply_rollbacks(
    hook: DeploymentServiceHook, wave: WaveRecord, outcomes: Mapping[str, Sequence[Any]], log: logging.Logger | Any
) -> None:
    """Record how the rollbacks ended.

    A rollback that went live is judged on the deployment (one list request per 100): it is ``rolled_back``
    (it had failed) or ``rolled_back_with_wave`` (it had landed) when the previous build serves again with
    its previous ``resource_spec``; ``rolled_back_partially`` / ``rolled_back_with_wave_partially`` when
    not, the message saying ``rolled back ... except: ...`` (a secret the change set is named too, but
    does not make it partial: values are never restored). The others keep their outcome, the rollback's
    failure in their message (one that had landed still serves its new revision, or is still being rolled
    back).

    :param hook: the hook (to read the restored deployments).
    :param wave: the wave.
    :param outcomes: ``{deployment_id: (outcome, message, at)}`` of the rollbacks' watch.
    :param log: the task's logger.
    """
    decided = [
        row
        for row in wave.rows
        if row.rollback_revision is not None
        and not row.rollback_decided
        and row.outcome in ROLLBACK_OUTCOMES
        and row.deployment_id in outcomes
    ]
    live_ids = [row.deployment_id for row in decided if outcomes[row.deployment_id][0] in SUCCESS_OUTCOMES]
    live = read_deployments(hook, live_ids) if live_ids else {}
    for row in decided:
        outcome, message, at = outcomes[row.deployment_id]
        row.rollback_decided = True
        if outcome in SUCCESS_OUTCOMES:
            _judge_resource_spec(row, live.get(row.deployment_id))
            before = Outcome.LANDED if row.outcome == Outcome.FAILED and aborted_unjudged(row) else row.outcome
            how = _ROLLED_BACK_HOW[before]
            serves = (
                f"revision {row.from_revision} serves again (deployed again in place)"
                if row.rollback_revision == row.from_revision
                else f"revision {row.rollback_revision} serves revision {row.from_revision}'s build again"
            )
            except_clause = f" except: {'; '.join(row.not_restored)}" if row.not_restored else ""
            row.decide(
                _restored_outcome(before, is_partial(row)),
                f"{row.message}; rolled back ({serves}){except_clause}",
                float(at),
            )
            log.warning(
                "%s: %s rolled back%s to %s (revision %s)%s",
                wave.name,
                row.name,
                how,
                row.from_revision,
                row.rollback_revision,
                except_clause,
            )
        elif row.outcome == Outcome.FAILED:
            row.decide(Outcome.FAILED, f"{row.message}; the rollback failed too: {message}", float(at))
            log.error("%s: %s: %s", wave.name, row.name, row.message)
        elif row.outcome in REASON_UNKNOWN_OUTCOMES:  # the earlier try's rollback did not go live
            row.decide(Outcome.FAILED, f"{row.message}; but that rollback did not go live: {message}", float(at))
            log.error("%s: %s: %s", wave.name, row.name, row.message)
        else:  # it had landed: its revision still serves unless the rollback's may yet go live
            row.message = f"{row.message}, but the rollback failed: {message}"
            log.error("%s: %s: %s", wave.name, row.name, row.message)


_ROLLED_BACK_HOW = {
    Outcome.FAILED: "",
    Outcome.LANDED: " with its wave",
    Outcome.ROLLED_BACK_REASON_UNKNOWN: " (by an earlier try, why not recorded)",
}
"""How the log says a rollback went live, by the row's outcome while it was awaited."""


def _restored_outcome(before: str, partial: bool) -> str:
    """The outcome of a row whose rollback went live, from its outcome while the rollback was awaited."""
    if before in REASON_UNKNOWN_OUTCOMES:
        return before  # partial or not, the message says what was not undone
    if before == Outcome.FAILED:
        return Outcome.ROLLED_BACK_PARTIALLY if partial else Outcome.ROLLED_BACK
    return Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY if partial else Outcome.ROLLED_BACK_WITH_WAVE


def _judge_resource_spec(row: FleetRow, deployment: Deployment | None) -> None:
    """Judge the rollback's ``resource_spec`` again on the live deployment (as
    :meth:`~airflow_provider.tasks.rollback.RollbackStarted.judged_on` does): one that does not show the
    previous ``resource_spec`` is named in ``not_restored``."""
    kept = [clause for clause in row.not_restored if clause not in RESOURCE_SPEC_VERDICTS]
    wanted, fields = row.previous_resource_spec, row.resource_spec_changes
    if (
        deployment is not None
        and wanted is not None
        and not spec_shows(deployment.source_config.resource_spec, wanted, fields)
    ):
        kept.insert(0, RESOURCE_SPEC_NOT_SHOWN if row.rollback_path == "patch" else RESOURCE_SPEC_NOT_SENT)
    row.not_restored = kept
