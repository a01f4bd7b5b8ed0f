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

from airflow_provider.decisions.rollout import (
    EVENT_STATUSES,
    REVISION_ENDPOINT_MISSING,
    RevisionCheckSchedule,
    RolloutState,
    RolloutVerdict,
    bake_verdict,
    rollout_verdict,
)
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, Revision
from airflow_provider.tasks.base import DEFERRAL_GRACE

if TYPE_CHECKING:
    import logging


class RolloutCheck:
    """Blocking look at one rollout: one list request, plus the revision endpoint when it may help.

    :param hook: the hook to ask.
    :param deployment_id: canonical deployment id.
    :param revision_id: canonical awaited revision, or ``None`` to wait for ``READY`` only.
    :param revision_check_interval: longest time between two revision-endpoint calls while nothing changes.
    :param log: where to report state changes.
    :param allowed_latest_revision_id: a newer revision that may stay the latest while ``revision_id`` goes
        live (an earlier revision redeployed without a new revision; see :func:`rollout_verdict`).
    """

    def __init__(
        self,
        hook: DeploymentServiceHook,
        deployment_id: str,
        revision_id: str | None,
        revision_check_interval: float,
        log: logging.Logger | Any,
        *,
        allowed_latest_revision_id: str | None = None,
    ) -> None:
        self.hook = hook
        self.deployment_id = deployment_id
        self.revision_id = revision_id
        self.allowed_latest_revision_id = allowed_latest_revision_id
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
        verdict = rollout_verdict(
            deployment,
            self.revision_id,
            self.revision,
            deployment_id=self.deployment_id,
            allowed_latest_revision_id=self.allowed_latest_revision_id,
        )
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


def resumed_value(name: str, given: Any, event: Any) -> Any:
    """A value a deferring task handed to its resume method: ``given`` (the ``kwargs`` Airflow's triggerer
    merges back), else the one the trigger carried back in ``event["carry"]`` (``dag.test()`` in Airflow 3.3
    drops the ``kwargs``), else ``None``: the caller decides whether it can go on without it.

    :param name: the keyword given to ``defer(kwargs=...)`` and to the trigger's ``carry``.
    :param given: the value the resume method received for it.
    :param event: the trigger's event payload.
    """
    if given is not None:
        return given
    carried = event.get("carry") if isinstance(event, dict) else None
    return carried.get(name) if isinstance(carried, dict) else None


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

    def defer(
        self,
        *,
        trigger: Any,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        """Airflow's ``BaseOperator.defer``."""


def defer_until_live(
    task: WaitingTask,
    check: RolloutCheck,
    *,
    method_name: str = "execute_complete",
    kwargs: dict[str, Any] | None = None,
    carry: dict[str, Any] | None = None,
) -> None:
    """Hand the rest of ``check``'s wait to a :class:`DeploymentRolloutTrigger` (raises ``TaskDeferred``).

    The trigger carries the hook's settings (not the key), the task's poll interval and revision-check
    interval, and a wall-clock deadline ``task.timeout`` seconds from now, so it behaves like the worker
    wherever it resumes; the triggerer's own timeout is only a safety net beyond it. The task resumes in
    its ``execute_complete``. Who logs what: the task logs its own looks, the trigger only the states that
    follow the last one the task logged, and the resumed task the outcome.

    ``dag.test()`` in Airflow 3.3 resumes a task with ``event`` only: give what the resume needs as
    ``carry`` too (the same dict as ``kwargs`` will do) and read it with :func:`resumed_value`.

    :param task: the deferring task.
    :param check: the rollout being waited for.
    :param method_name: the task method to resume in (called with ``event`` and ``kwargs``).
    :param kwargs: JSON values passed on to ``method_name`` (never a secret: they are stored). ``airflow dags
        test`` / ``dag.test()`` in Airflow 3.3 drops them on resume: what a resume cannot do without goes in
        ``carry``.
    :param carry: plain JSON (never a secret) the trigger echoes in its event (``event["carry"]``), which every
        resume gets.
    """
    # Imported here, not at the top: only a deferring task needs the trigger (and ``airflow.triggers.base``),
    # so importing the operators and the sensor stays cheap (bench/import_cost.py).
    from airflow_provider.triggers.rollout import DeploymentRolloutTrigger

    task.defer(
        trigger=DeploymentRolloutTrigger(
            deployment_id=check.deployment_id,
            revision_id=check.revision_id,
            hook_params=check.hook.hook_params,
            poll_interval=task.poll_interval,
            deadline=time.time() + task.timeout,
            revision_check_interval=task.revision_check_interval,
            seen_key=None if check.last_key is None else list(check.last_key),
            allowed_latest_revision_id=check.allowed_latest_revision_id,
            carry=carry,
        ),
        method_name=method_name,
        kwargs=kwargs,
        timeout=timedelta(seconds=task.timeout + max(DEFERRAL_GRACE, 2 * task.poll_interval)),
    )


BAKE_GRACE_LOOKS = 2
"""Looks :func:`bake` makes after its last one failed (transient error) before giving up without a verdict."""


def bake(
    hook: DeploymentServiceHook,
    deployment_id: str,
    revision_id: str,
    seconds: float,
    poll_interval: float,
    log: logging.Logger | Any,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Block for a bake: ``revision_id`` must stay active and the deployment ``READY`` for ``seconds``.

    Looks every ``poll_interval`` seconds and once at the end; returns why the revision stopped counting as
    live (at the first look that shows it), or ``None`` when it stayed live. Transient errors skip a look;
    a look that could not be made never counts as "left": when the look at the end fails, up to
    :data:`BAKE_GRACE_LOOKS` more are made ``poll_interval`` apart and the first that answers decides; when
    none does, :class:`AirflowException` (not a failure: the task retries and reattaches, as when the
    bake trigger reports an error).

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the live revision.
    :param seconds: the bake period.
    :param poll_interval: seconds between two looks.
    :param log: the task's logger.
    :param sleep: how to wait (tests may pass their own).
    """
    log.info("Baking revision %s of deployment %s for %.1f s", revision_id, deployment_id, seconds)
    deadline = time.monotonic() + seconds
    grace_looks = 0
    while True:
        final = time.monotonic() >= deadline
        try:
            deployment = hook.get_deployment(deployment_id)
        except DeploymentServiceError as err:
            if not err.transient:
                raise
            log.warning("Deployment %s: the service is unavailable during the bake (%s)", deployment_id, err)
            if final:
                if grace_looks >= BAKE_GRACE_LOOKS:
                    raise AirflowException(
                        f"could not finish the bake of revision {revision_id} of deployment {deployment_id}: the "
                        f"service was unavailable at its end and for {grace_looks} more look(s) ({err}); not "
                        "rolling back a revision that may be healthy (a retry reattaches and bakes again)"
                    ) from None
                grace_looks += 1
                sleep(poll_interval)
                continue
        else:
            reason = bake_verdict(deployment, revision_id)
            if reason is not None:
                return reason
            if final:
                log.info("Revision %s stayed live for the %.1f s bake", revision_id, seconds)
                return None
        sleep(max(0.0, min(poll_interval, deadline - time.monotonic())))


def defer_bake(
    task: WaitingTask,
    hook: DeploymentServiceHook,
    deployment_id: str,
    revision_id: str,
    seconds: float,
    *,
    method_name: str,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Hand a bake to a :class:`DeploymentBakeTrigger` (raises ``TaskDeferred``); see :func:`bake`.

    :param task: the deferring task (its ``poll_interval`` paces the looks).
    :param hook: the task's hook (its settings travel, not the key).
    :param deployment_id: the deployment.
    :param revision_id: the live revision.
    :param seconds: the bake period; the trigger's deadline is wall-clock.
    :param method_name: the task method to resume in.
    :param kwargs: JSON values passed on to ``method_name`` (never a secret), also carried back in the
        trigger's event (``event["carry"]``; see :func:`defer_until_live`).
    """
    from airflow_provider.triggers.rollout import DeploymentBakeTrigger  # only a deferring task needs it

    task.defer(
        trigger=DeploymentBakeTrigger(
            deployment_id=deployment_id,
            revision_id=revision_id,
            hook_params=hook.hook_params,
            poll_interval=task.poll_interval,
            deadline=time.time() + seconds,
            carry=kwargs or None,
        ),
        method_name=method_name,
        kwargs=kwargs,
        timeout=timedelta(seconds=seconds + max(DEFERRAL_GRACE, 2 * task.poll_interval)),
    )
