"""Watching and verifying a wave of a fleet rollout: the watch on the worker (the trigger's twin: one list
request per 100 rollouts a round, the revision endpoint within a budget), its decisions recorded in the rows,
the build log's tail of each failed build, then the user's ``verify`` on each deployment that landed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider.client.error_text import scrub
from airflow_provider.decisions.fleet_progress import (
    FleetRow,
    Outcome,
    WaveRecord,
    WaveTracker,
)
from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING, RevisionCheckSchedule, RevisionLookBudget
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    Revision,
)
from airflow_provider.tasks.build_logs import log_failed_build
from airflow_provider.tasks.fleet.plan import chunks, read_deployments

if TYPE_CHECKING:
    import logging


def in_flight(wave: WaveRecord) -> dict[str, str | None]:
    """``{deployment_id: revision or None}`` of the wave's rollouts still undecided."""
    return {row.deployment_id: row.to_revision for row in wave.rows if row.outcome == Outcome.ROLLING_OUT}


def apply_outcomes(wave: WaveRecord, outcomes: Mapping[str, Sequence[Any]], log: logging.Logger | Any) -> None:
    """Record what the watch decided: ``{deployment_id: (outcome, message, at)}``.

    :param wave: the wave.
    :param outcomes: the decisions (a trigger event's ``outcomes`` or :attr:`WaveTracker.decided`).
    :param log: the task's logger.
    """
    for row in wave.rows:
        decision = outcomes.get(row.deployment_id)
        if row.outcome != Outcome.ROLLING_OUT or decision is None:
            continue
        outcome, message, at = decision
        row.decide(str(outcome), str(message), float(at))
        row.went_live = row.outcome == Outcome.LANDED or row.message.startswith("left service during the bake")
        row.timed_out = row.outcome == Outcome.FAILED and row.message.startswith("timed out")
        if row.timed_out:
            row.message += "; still rolling out when the task stopped watching it: its revision may yet go live"
        if failed_build(row):
            row.message += f"; {BUILD_NOT_RETRIED}"
        if row.outcome == Outcome.FAILED:
            log.warning("%s: %s failed: %s", wave.name, row.name, row.message)


BUILD_FAILURES = ("BUILD_FAILED", "CREATE_FAILED")
"""Revision statuses of a failed build (the rows whose build log is worth showing)."""
BUILD_NOT_RETRIED = "a retry of this task does not build it again: a new DAG run, or a changed patch, does"
"""What a row whose build failed says of retries: a retry finds the failed revision and reports it again,
never patching the deployment a second time for the same change."""


def failed_build(row: FleetRow) -> bool:
    """Whether the row failed because its revision's build failed.

    :param row: a row.
    """
    return (
        row.outcome == Outcome.FAILED
        and bool(row.to_revision)
        and any(f"status {status}" in row.message for status in BUILD_FAILURES)
    )


BUILD_LOGS_PER_WAVE = 5
"""At most this many failed builds of one wave get their build log's tail in the task log."""


def explain_failed_builds(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    log: logging.Logger | Any,
    *,
    secrets: Iterable[str] = (),
    limit: int = BUILD_LOGS_PER_WAVE,
) -> list[str]:
    """Log the last lines of the build log of each revision of the wave whose build failed.

    Only rows that failed because their revision's build failed are explained (a timeout, a deletion or a
    refused verify has no build log to show), at most ``limit`` per wave; reading a log never fails the
    task (see :func:`~airflow_provider.tasks.build_logs.log_failed_build`).

    :param hook: the hook.
    :param wave: the wave, its outcomes recorded.
    :param log: the task's logger.
    :param secrets: secret values to scrub from the lines.
    :param limit: most build logs shown for the wave.
    :returns: names of the deployments whose build log was asked for.
    """
    failed = [row for row in wave.rows if failed_build(row)]
    known = tuple(secrets)
    for row in failed[:limit]:
        log.error("%s: the build of %s's revision %s failed", wave.name, row.name, row.to_revision)
        log_failed_build(hook, row.deployment_id, row.to_revision, log, secrets=known)
    if len(failed) > limit:
        log.warning(
            "%s: %d more failed build(s), build logs not shown: %s",
            wave.name,
            len(failed) - limit,
            ", ".join(row.name for row in failed[limit:]),
        )
    return [row.name for row in failed[:limit]]


def watch_wave(
    hook: DeploymentServiceHook,
    rollouts: Mapping[str, str | None],
    *,
    poll_interval: float,
    deadline: float,
    bake_seconds: float,
    revision_check_interval: float,
    log: logging.Logger | Any,
    sleep: Callable[[float], None] = time.sleep,
    allowed_latest: Mapping[str, str] | None = None,
    interrupted: Callable[[], bool] | None = None,
) -> dict[str, tuple[str, str, float]]:
    """Wait on the worker until every rollout of a wave is decided, as the trigger does: one list request
    per 100 undecided rollouts per interval, the revision endpoint (fail fast on a failed build) when a
    deployment changed, and otherwise (first looks, the safety-net timer) out of a
    :class:`~airflow_provider.decisions.rollout.RevisionLookBudget` of one call per ten list requests.

    :param hook: the hook.
    :param rollouts: ``{deployment_id: revision or None}``.
    :param poll_interval: seconds between rounds.
    :param deadline: wall-clock time by which every revision must be live.
    :param bake_seconds: how long a live revision must stay live.
    :param revision_check_interval: longest time between two revision-endpoint calls while nothing changes.
    :param log: the task's logger.
    :param sleep: how to wait (tests may pass their own).
    :param allowed_latest: ``{deployment_id: revision}`` allowed to stay the latest (see
        :class:`~airflow_provider.decisions.fleet_progress.WaveTracker`).
    :param interrupted: asked after each round that left rollouts undecided; true ends the watch there (an abort
        from the Rollouts view: the rollouts still undecided are left out of the result).
    :returns: ``{deployment_id: (outcome, message, decided_at)}``.
    """
    tracker = WaveTracker(dict(rollouts), bake_seconds, deadline, dict(allowed_latest or {}))
    schedules = {deployment_id: RevisionCheckSchedule(revision_check_interval) for deployment_id in rollouts}
    budget = RevisionLookBudget()
    revisions: dict[str, Revision] = {}
    endpoint = True
    while not tracker.done:
        started = time.time()
        final = started >= deadline
        waiting = tracker.undecided
        found: dict[str, Deployment] = {}
        failed: set[str] = set()
        for chunk in chunks(waiting):
            try:
                page = hook.list_deployments(deployment_ids=list(chunk), limit=MAX_PAGE_SIZE)
            except DeploymentServiceError as err:
                if not err.transient:
                    raise
                log.warning("Listing %d deployment(s) failed (%s); trying again next round", len(chunk), err)
                failed.update(chunk)
                continue
            found.update({item.id: item for item in page.resources if item.id in chunk})
        allowed = budget.grant(-(-len(waiting) // MAX_PAGE_SIZE))
        due: list[tuple[str, Deployment, str]] = []
        unhurried: list[tuple[str, Deployment, str]] = []
        for deployment_id in waiting:
            deployment, revision_id = found.get(deployment_id), rollouts[deployment_id]
            reason = schedules[deployment_id].reason(deployment, revision_id, force=final)
            if deployment is not None:
                schedules[deployment_id].seen(deployment)  # a later change is urgent even before the first look
            if not endpoint or reason is None or deployment is None or revision_id is None:
                continue
            (unhurried if reason in ("first", "timer") else due).append((deployment_id, deployment, revision_id))
        unhurried.sort(key=lambda item: schedules[item[0]].last_asked)  # never asked first, then longest unasked
        budget.spend(min(allowed, len(unhurried)))
        for deployment_id, deployment, revision_id in [*due, *unhurried[:allowed]]:
            if not endpoint:
                break
            schedules[deployment_id].mark(deployment)
            try:
                revisions[deployment_id] = hook.get_revision(deployment_id, revision_id)
            except DeploymentServiceError as err:
                if not err.transient and err.status_code in REVISION_ENDPOINT_MISSING:
                    endpoint = False
                    log.info("The revision endpoint is not available (%s); watching the deployments only", err)
        for deployment_id in waiting:
            if deployment_id in failed:
                if final:
                    tracker.give_up(deployment_id, "timed out; the final check failed", started)
                continue
            message = tracker.observe(
                deployment_id, found.get(deployment_id), revisions.get(deployment_id), started, final=final
            )
            if message is not None:
                log.info("%s", message)
        if tracker.done or (interrupted is not None and interrupted()):
            break
        pause = max(0.0, poll_interval - (time.time() - started))
        if not final and time.time() + pause > deadline:
            pause = max(0.0, deadline - time.time())
        sleep(pause)
    return dict(tracker.decided)


def verify_wave(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    verify: Callable[[Deployment], Any],
    log: logging.Logger | Any,
    *,
    secrets: Iterable[str] = (),
) -> None:
    """Run ``verify`` on every deployment of the wave that landed (read live); a false result or an
    exception fails that row (the secret values scrubbed from what it said).

    :param hook: the hook.
    :param wave: the wave.
    :param verify: the user's check: given the live ``Deployment``, returns false or raises when bad.
    :param log: the task's logger.
    :param secrets: secret values to scrub from the verdict (an error often quotes a URL with a token).
    """
    known = tuple(secrets)
    # A row whose rollback was asked for was verified by an earlier try (its verdict is recorded): the
    # deployment may already serve the rollback, which is not what verify is to judge.
    landed = [row for row in wave.rows if row.outcome == Outcome.LANDED and row.rollback_requested_after is None]
    live = read_deployments(hook, [row.deployment_id for row in landed]) if landed else {}
    for row in landed:
        deployment = live.get(row.deployment_id)
        now = time.time()
        if deployment is None:
            row.decide(Outcome.FAILED, f"deployment {row.name!r} disappeared before it could be verified", now)
            continue
        if row.to_revision is not None and deployment.active_revision_id != row.to_revision:
            row.decide(
                Outcome.FAILED,
                f"revision {row.to_revision} no longer served when verify was to run (active: "
                f"{deployment.active_revision_id}; latest: {deployment.latest_revision_id}): not verified",
                now,
            )
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
            continue
        try:
            accepted = verify(deployment)
        except Exception as err:  # the user's check failing is the verdict, not a task error
            passed, reason = False, f"verify raised {type(err).__name__}: {err}"
        else:
            passed, reason = accepted is None or bool(accepted), f"verify returned {accepted!r}"
        if passed:
            log.info("%s: %s verified on revision %s", wave.name, row.name, row.to_revision)
        else:
            reason = scrub(reason, known)
            row.decide(Outcome.FAILED, f"verification failed on revision {row.to_revision}: {reason}", now)
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
