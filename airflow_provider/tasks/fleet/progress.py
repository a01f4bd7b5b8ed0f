"""The fleet's progress record in ``context["task_state_store"]``: the header under :data:`STATE_KEY`, each
wave under ``<key>/wave/<index>``, each rollback of a wave in a small key of its own; what a fresh plan records,
what a resume or a retry reads back, and what the record decides (the rollout stops)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider.client.error_text import scrub
from airflow_provider.decisions.fleet_progress import (
    CANARY,
    FAILURE_OUTCOMES,
    REASON_UNKNOWN_OUTCOMES,
    FleetProgress,
    FleetRow,
    WaveRecord,
)
from airflow_provider.models import (
    Deployment,
)

if TYPE_CHECKING:
    import logging

    from airflow_provider.tasks.publishing import FleetJudging


STATE_KEY = "deployment_service_fleet"
"""Key of the progress header in ``task_state_store``; each wave is under ``<key>/wave/<index>``
(renaming them breaks in-flight retries)."""


class ProgressStore:
    """The fleet's progress in ``task_state_store`` (one key for the header, one per wave), or only in
    memory when the task has no store.

    A key is written only when its value differs from the one this object last wrote there: on a
    worker every write is a round trip to the API server, and the header rarely changes while a wave's
    rows are saved after each batch of answered patches.

    :param store: ``context["task_state_store"]`` or ``None``.
    :param log: the task's logger.
    :param secrets: secret values to scrub from every row's message before it is recorded.
    :param judging: where each save tells the deployments' watchers what the rows say (``None``: nowhere).
    """

    def __init__(
        self,
        store: Any,
        log: logging.Logger | Any,
        secrets: Iterable[str] = (),
        judging: FleetJudging | None = None,
    ) -> None:
        self.store = store
        self.log = log
        self.secrets = tuple(secrets)
        self.judging = judging
        self._written: dict[str, dict[str, Any]] = {}
        self.behind = False
        """Whether the last save failed: what the store holds is older than the progress (a deferral then
        carries the progress itself, and the resume takes it over the store's)."""

    def load(self, change: str) -> FleetProgress | None:
        """The progress an earlier try or deferral recorded for this change, else ``None``."""
        if self.store is None:
            return None
        try:
            header = self.store.get(STATE_KEY)
            if not isinstance(header, dict):
                return None
            if header.get("change") != change:
                self.log.info("The fleet rollout recorded by an earlier try asked for another change; planning anew")
                return None
            waves = [self.store.get(f"{STATE_KEY}/wave/{index}") for index in range(int(header["waves"]))]
        except Exception as err:  # the store is an optimisation: plan anew, reattach from the deployments
            self.log.warning("Could not read task_state_store (%s); planning the fleet rollout anew", err)
            return None
        if not all(isinstance(wave, dict) for wave in waves):
            return None
        return FleetProgress.from_json(header, waves)

    def save(self, progress: FleetProgress, *waves: int) -> None:
        """Record the header and the given waves (all when none is given), their messages scrubbed, and tell the
        deployments' watchers what the rows say of their revisions (``judging``)."""
        scrub_messages(progress, self.secrets)
        if self.judging is not None:
            saved = waves or range(len(progress.waves))
            self.judging.publish(
                (progress.waves[index].phase, [row.to_json() for row in progress.waves[index].rows]) for index in saved
            )
        if self.store is None:
            return
        try:
            for index in range(len(progress.waves)) if self.behind else waves or range(len(progress.waves)):
                self._write(f"{STATE_KEY}/wave/{index}", progress.waves[index].to_json())
            self._write(STATE_KEY, progress.header_json())
        except Exception as err:  # not fatal: a retry recognises patches on the deployments
            self.behind = True
            self.log.warning("Could not record the fleet rollout's progress in task_state_store (%s)", err)
        else:
            self.behind = False

    def rollback_records(self, index: int) -> RollbackRecords | None:
        """Wave ``index``'s rollback records (``None`` without a store)."""
        return None if self.store is None else RollbackRecords(self.store, index, self.log)

    def _write(self, key: str, value: dict[str, Any]) -> None:
        if self._written.get(key) == value:
            return
        self._written.pop(key, None)  # until the store confirms, what it holds is unknown
        self.store.set(key, value)
        self._written[key] = value


class RollbackRecords:
    """One wave's rollback records in ``task_state_store``, one small key per deployment
    (``<key>/wave/<index>/rollback/<deployment_id>``): the rollback's intent, written just before its request
    (:class:`~airflow_provider.tasks.rollback.RollbackIntent`), then what was sent
    (:meth:`~airflow_provider.tasks.rollback.RollbackStarted.record`), as the rollback task records its own.
    Small keys, so that rolling back a wave of N deployments writes O(N) bytes, not the wave N times.

    :param store: ``context["task_state_store"]``.
    :param index: the wave.
    :param log: the task's logger.
    """

    def __init__(self, store: Any, index: int, log: logging.Logger | Any) -> None:
        self.store, self.index, self.log = store, index, log

    def key(self, deployment_id: str) -> str:
        """The key of a deployment's record."""
        return f"{STATE_KEY}/wave/{self.index}/rollback/{deployment_id}"

    def get(self, deployment_id: str) -> dict[str, Any] | None:
        """The record of this deployment's rollback, or ``None`` (none, or the store cannot be read)."""
        try:
            value = self.store.get(self.key(deployment_id))
        except Exception as err:  # judged from the deployment instead
            self.log.warning("Could not read the rollback record of %s (%s)", deployment_id, err)
            return None
        return value if isinstance(value, dict) else None

    def set(self, deployment_id: str, record: dict[str, Any]) -> None:
        """Record this deployment's rollback (a failure is logged: a retry then judges from the deployment)."""
        try:
            self.store.set(self.key(deployment_id), record)
        except Exception as err:
            self.log.warning("Could not record the rollback of %s in task_state_store (%s)", deployment_id, err)


def scrub_messages(progress: FleetProgress, secrets: Iterable[str]) -> None:
    """Replace every secret value in the rows' messages (they reach the task state store, XCom, the
    failure message and the trigger's arguments; a ``verify`` error often quotes a URL with a token).

    :param progress: the progress (its rows are updated in place).
    :param secrets: the task's secret values.
    """
    known = tuple(secrets)
    if not known:
        return
    for row in progress.rows:
        row.message = scrub(row.message, known)


def new_progress(
    plan: list[tuple[str, list[tuple[str, str]]]], deployments: Mapping[str, Deployment], allowed: int, change: str
) -> FleetProgress:
    """A fresh progress record for a plan.

    :param plan: waves from :func:`~airflow_provider.decisions.fleet_progress.plan_waves`.
    :param deployments: the targets by id (their active revision is the ``from_revision``).
    :param allowed: the failure allowance.
    :param change: :func:`~airflow_provider.tasks.fleet.change.change_digest` of the request.
    """
    waves = [
        WaveRecord(
            name,
            [
                FleetRow(
                    deployment_id, deployment_name, name, from_revision=deployments[deployment_id].active_revision_id
                )
                for deployment_id, deployment_name in members
            ],
        )
        for name, members in plan
    ]
    return FleetProgress(waves=waves, allowed_failures=allowed, change=change)


def stop_reason(progress: FleetProgress, wave: WaveRecord) -> str | None:
    """Why this wave stops the rollout (a canary deployment failed, or more failed than the budget
    allows), or ``None``. Only failures count, and the rollbacks an earlier try made without a record of
    why (conservatively, named apart): a deployment rolled back with its wave is not one.

    :param progress: the rollout's progress.
    :param wave: one of its waves.
    """
    if wave.name == CANARY and progress.canary_failed:
        failed = sum(row.outcome in FAILURE_OUTCOMES for row in wave.rows)
        unknown = sum(row.outcome in REASON_UNKNOWN_OUTCOMES for row in wave.rows)
        what = (
            f"the canary failed or was rolled back by an earlier try for a reason not recorded ({failed} "
            f"failed and {unknown} rolled back for a reason not recorded, of {len(wave.rows)} canary "
            "deployment(s))"
            if unknown
            else f"the canary failed ({failed} of {len(wave.rows)} canary deployment(s))"
        )
        return f"{what}; a failed canary stops the rollout whatever max_failures allows"
    if progress.budget_exceeded:
        failed, unknown = len(progress.failures), len(progress.reason_unknown)
        counted = (
            f"{failed} deployment(s) failed and {unknown} were rolled back by an earlier try for a reason not "
            "recorded (counted against the budget)"
            if unknown
            else f"{failed} deployment(s) failed"
        )
        return f"{counted}, more than max_failures allows ({progress.allowed_failures})"
    return None


def stop_as_decided(progress: FleetProgress, progress_store: ProgressStore, log: logging.Logger | Any) -> None:
    """Stop the rollout here when the waves already done stopped it, whatever the header says.

    The stop is decided by the rows of the waves done, not by the header alone: the progress is saved one
    key at a time (each wave, then the header), so a worker that dies between those writes leaves the
    stopping wave recorded done (and maybe the later waves ``not_patched``) under a header that does not
    say the rollout stopped. Judged again from the rows, a retry or a resume never patches a wave after a
    stop decided before the crash, nor succeeds past it. Only between waves (the next wave not started,
    or none left): the rows of a wave in progress are not final.

    :param progress: the rollout's progress.
    :param progress_store: where it is saved.
    :param log: the task's logger.
    """
    index = progress.current()
    if index is not None and progress.waves[index].phase != "planned":
        return
    reason = progress.stopped or next(
        (
            found
            for wave in progress.waves
            if wave.phase == "done" and (found := stop_reason(progress, wave)) is not None
        ),
        None,
    )
    if reason is None or (progress.stopped and index is None):
        return
    log.warning("The rollout was stopped by an earlier try (%s); not patching any further wave", reason)
    progress.stop(reason, time.time())
    progress_store.save(progress)


def resumed_progress(progress_store: ProgressStore, change: str, event: Mapping[str, Any]) -> FleetProgress:
    """The progress to resume from: the event's ``carry`` when it has one (taken when the task deferred:
    the store's may be older, its last save having failed), else the store's; fails when neither.

    :param progress_store: the task's progress store.
    :param change: the digest of this task's change.
    :param event: the trigger's event (its ``carry``, if any).
    :raises AirflowException: when the carry is another change's, or no progress is found.
    """
    carry = event.get("carry")
    if isinstance(carry, dict):
        if carry.get("change") != change:
            raise AirflowException(
                "the trigger's event carries the progress of another change than this task's: not resuming"
            )
        progress = FleetProgress.from_json(carry, carry["wave_records"])
        progress_store.save(progress)  # the store catches up (when it has one)
        return progress
    stored = progress_store.load(change)
    if stored is None:
        where = "task_state_store has no record of it" if progress_store.store is not None else "no task_state_store"
        raise AirflowException(
            f"the fleet rollout's progress was lost ({where}, and the trigger's event carries none): cannot "
            "resume it; a retry recognises the patches already made on the deployments"
        )
    return stored


def resumed_wave(progress: FleetProgress, event: Mapping[str, Any]) -> tuple[int, WaveRecord]:
    """The wave a ``FleetWaveTrigger`` event reports on, in a phase that matches it.

    :param progress: the progress resumed from.
    :param event: the trigger's event.
    :raises AirflowException: when the progress has no such wave, or shows it not patched.
    """
    index = event.get("wave")
    if not isinstance(index, int) or not 0 <= index < len(progress.waves):
        raise AirflowException(f"the FleetWaveTrigger event names wave {index!r}, which the progress does not have")
    wave = progress.waves[index]
    if event["status"] == "done" and wave.phase == "planned":
        raise AirflowException(
            f"the FleetWaveTrigger event reports the watch of {wave.name}, but the progress shows it not patched "
            "(a save was lost): not resuming from it; a retry recognises the patches already made"
        )
    return index, wave
