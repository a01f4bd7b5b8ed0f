"""Waiting for a rollout: a blocking look (workers), deferring to the trigger, and reading its event.

Shared by every task that waits for a revision to go live (the sensor, the patch and rollback operators,
fleet rollouts), so a wait reads and logs the same whichever task waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, Revision
from airflow_provider.rollout import (
    REVISION_ENDPOINT_MISSING,
    RevisionCheckSchedule,
    RolloutState,
    RolloutVerdict,
    rollout_verdict,
)
from airflow_provider.tasks.base import DEFERRAL_GRACE, EVENT_STATUSES
from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger

if TYPE_CHECKING:
    import logging


class RolloutCheck:
    """Blocking look at one rollout: one list request, plus the revision endpoint when it may help.

    :param hook: the hook to ask.
    :param deployment_id: canonical deployment id.
    :param revision_id: canonical awaited revision, or ``None`` to wait for ``READY`` only.
    :param revision_check_interval: longest time between two revision-endpoint calls while nothing changes.
    :param log: where to report state changes.
    """

    def __init__(
        self,
        hook: DeploymentServiceHook,
        deployment_id: str,
        revision_id: str | None,
        revision_check_interval: float,
        log: logging.Logger | Any,
    ) -> None:
        self.hook = hook
        self.deployment_id = deployment_id
        self.revision_id = revision_id
        self.schedule = RevisionCheckSchedule(revision_check_interval)
        self.revision: Revision | None = None
        self.log = log
        self.started = time.monotonic()
        self.last_key: tuple[Any, ...] | None = None
        self.last_message = "no answer from the service yet"
        self.deployment: Deployment | None = None

    @property
    def target(self) -> str:
        return f"revision {self.revision_id}" if self.revision_id else "READY"

    def waited(self) -> str:
        return f"{time.monotonic() - self.started:.1f} s"

    def check(self, *, final: bool = False) -> RolloutVerdict | None:
        """Look once; ``None`` when a transient error prevented it (logged once per kind).

        Non-transient errors (auth, 4xx, bad connection) propagate.

        :param final: a last look before a timeout (the revision endpoint is asked regardless of interval).
        """
        try:
            page = self.hook.list_deployments(deployment_ids=[self.deployment_id], limit=1)
        except DeploymentServiceError as err:
            if not err.transient:
                raise
            key = ("transient", type(err).__name__)
            if key != self.last_key:
                self.log.warning(
                    "Deployment %s: the service is unavailable (%s); trying again next poke (waited %s)",
                    self.deployment_id,
                    err,
                    self.waited(),
                )
            self.last_key = key
            self.last_message = f"the service was unavailable: {err}"
            return None
        deployment = next((item for item in page.resources if item.id == self.deployment_id), None)
        self.deployment = deployment or self.deployment
        if deployment is not None and self.revision_id and self.schedule.due(deployment, self.revision_id, force=final):
            self.schedule.mark(deployment)
            self._ask_revision()
        verdict = rollout_verdict(deployment, self.revision_id, self.revision, deployment_id=self.deployment_id)
        if verdict.key != self.last_key:
            self.log.info("%s (waited %s)", verdict.message, self.waited())
            self.last_key = verdict.key
        self.last_message = verdict.message
        return verdict

    def _ask_revision(self) -> None:
        assert self.revision_id is not None
        try:
            self.revision = self.hook.get_revision(self.deployment_id, self.revision_id)
        except DeploymentServiceError as err:
            if err.transient:
                return
            if err.status_code in REVISION_ENDPOINT_MISSING:
                self.schedule.disabled = True
                self.log.info("The revision endpoint is not available (%s); watching the deployment only", err)
            else:
                self.log.warning("The revision endpoint failed (%s); asking again when the deployment changes", err)

    def outcome(self, verdict: RolloutVerdict) -> dict[str, Any] | None:
        """The redacted deployment JSON on success, ``None`` while waiting; :class:`AirflowFailException`
        on a failed rollout."""
        if verdict.state is RolloutState.FAILED:
            raise AirflowFailException(verdict.message)
        if verdict.state is RolloutState.SUCCEEDED and self.deployment is not None:
            return self.deployment.model_dump(mode="json")
        return None

    def wait(self, poll_interval: float, timeout: float, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
        """Block until the rollout is decided; one final look after ``timeout`` seconds.

        :param poll_interval: seconds between looks.
        :param timeout: seconds to wait before the final look.
        :param sleep: how to wait (tests may pass their own).
        """
        deadline = time.monotonic() + timeout
        while True:
            final = time.monotonic() >= deadline
            verdict = self.check(final=final)
            if verdict is not None and verdict.is_done:
                result = self.outcome(verdict)
                assert result is not None
                return result
            if final:
                raise AirflowSensorTimeout(
                    f"timed out after {self.waited()} waiting for deployment {self.deployment_id} "
                    f"({self.target}): {self.last_message}"
                )
            sleep(max(0.0, min(poll_interval, deadline - time.monotonic())))


def rollout_event_result(event: dict[str, Any] | None, task_log: logging.Logger | Any) -> dict[str, Any]:
    """Turn a :class:`DeploymentRolloutTrigger` event into the deployment JSON, or the right exception.

    :param event: the event payload.
    :param task_log: the task's logger.
    """
    if not isinstance(event, dict) or event.get("status") not in EVENT_STATUSES:
        raise AirflowException(f"unexpected event from DeploymentRolloutTrigger: {event!r}")
    status, message = event["status"], str(event.get("message", ""))
    if status == "success":
        task_log.info("%s", message)
        deployment: dict[str, Any] = event.get("deployment") or {}
        return deployment
    if status == "failed":
        raise AirflowFailException(message)
    if status == "timeout":
        raise AirflowSensorTimeout(message)
    raise AirflowException(message)


class WaitingTask(Protocol):
    """A task that waits for rollouts: the settings :func:`defer_until_live` reads from it."""

    @property
    def poll_interval(self) -> float:
        """Seconds between two looks."""

    @property
    def timeout(self) -> float:
        """Seconds to the final look."""

    @property
    def revision_check_interval(self) -> float:
        """Longest time between two revision-endpoint calls while nothing changes."""

    def defer(self, *, trigger: Any, method_name: str, timeout: timedelta | None = None) -> None:
        """Airflow's ``BaseOperator.defer``."""


def defer_until_live(task: WaitingTask, check: RolloutCheck) -> None:
    """Hand the rest of ``check``'s wait to a :class:`DeploymentRolloutTrigger` (raises ``TaskDeferred``).

    The trigger carries the hook's settings (not the key), the task's poll interval and revision-check
    interval, and a wall-clock deadline ``task.timeout`` seconds from now, so it behaves like the worker
    wherever it resumes; the triggerer's own timeout is only a safety net beyond it. The task resumes in
    its ``execute_complete``. Who logs what: the task logs its own looks, the trigger only the states that
    follow the last one the task logged, and the resumed task the outcome.

    :param task: the deferring task.
    :param check: the rollout being waited for.
    """
    task.defer(
        trigger=DeploymentRolloutTrigger(
            deployment_id=check.deployment_id,
            revision_id=check.revision_id,
            hook_params=check.hook.hook_params,
            poll_interval=task.poll_interval,
            deadline=time.time() + task.timeout,
            revision_check_interval=task.revision_check_interval,
            seen_key=None if check.last_key is None else list(check.last_key),
        ),
        method_name="execute_complete",
        timeout=timedelta(seconds=task.timeout + max(DEFERRAL_GRACE, 2 * task.poll_interval)),
    )
