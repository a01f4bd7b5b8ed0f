"""Sensor that waits until a deployment's revision is live, failing fast when it never can be."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_provider.client import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook, hook_overrides
from airflow_provider.models import Deployment, Revision, canonical_uuid
from airflow_provider.rollout import (
    REVISION_ENDPOINT_MISSING,
    RevisionCheckSchedule,
    RolloutState,
    RolloutVerdict,
    rollout_verdict,
)
from airflow_provider.triggers.deployment_service import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    EVENT_STATUSES,
    DeploymentRolloutTrigger,
)

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

DEFERRAL_GRACE = 60.0
"""Seconds the triggerer's own timeout is given beyond the trigger's deadline (a safety net only)."""


def positive_seconds(value: float | timedelta, name: str) -> float:
    """``value`` as a positive number of seconds, or ``ValueError`` naming ``name``."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(seconds)


MISSING_RENDERS = ("", "None", "null")
"""What a template renders to when the XCom or param it pulls is missing."""


def checked_ids(deployment_id: Any, revision_id: Any) -> tuple[str, str | None]:
    """Canonical ``(deployment_id, revision_id)``; :class:`AirflowFailException` naming the bad field."""
    try:
        deployment = canonical_uuid(deployment_id, "deployment_id")
        # A template that pulls a missing revision renders "None": treat it as no revision.
        missing = revision_id is None or revision_id in MISSING_RENDERS
        revision = None if missing else canonical_uuid(revision_id, "revision_id")
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    return deployment, revision


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


class DeploymentRolloutSensor(BaseSensorOperator):
    """Wait until a deployment's revision is live: status ``READY`` **and** that revision active.

    ``READY`` with the previous revision still active keeps waiting (the old code still serves). Fails
    at once, without retries, when the deployment disappears or is being deleted, when the revision's
    build or deploy failed (seen through the optional revision endpoint; silently skipped where the
    service does not have it), or when a newer revision superseded it. Transient API errors are logged
    and retried on the next poke. Returns (and pushes) the deployment as redacted JSON.

    :param deployment_id: the deployment (UUID). Templated.
    :param revision_id: the revision that must become active; ``None`` waits only for ``READY``. Templated.
    :param deployment_service_conn_id: the Airflow connection. Templated.
    :param poll_interval: seconds between looks (the sensor's ``poke_interval``; give one or the other).
    :param deferrable: wait in the triggerer instead of a worker slot (checks once on the worker first).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls while the
        deployment does not change.
    :param connect_timeout: overrides the connection's connect timeout (seconds).
    :param read_timeout: overrides the connection's read timeout (seconds).
    :param max_attempts: overrides attempts per API call (first included).
    :param backoff_initial: overrides the first retry backoff (seconds).
    :param backoff_max: overrides the longest retry backoff (seconds).
    :param retry_after_max: overrides the longest ``Retry-After`` honoured (seconds).
    """

    template_fields = ("deployment_id", "revision_id", "deployment_service_conn_id")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        deployment_id: str,
        revision_id: str | None = None,
        deployment_service_conn_id: str = DeploymentServiceHook.default_conn_name,
        poll_interval: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        retry_after_max: float | None = None,
        **kwargs: Any,
    ) -> None:
        if poll_interval is not None and "poke_interval" in kwargs:
            raise ValueError("give poll_interval or poke_interval, not both (they are the same setting)")
        if poll_interval is not None:
            kwargs["poke_interval"] = positive_seconds(poll_interval, "poll_interval")
        kwargs.setdefault("poke_interval", DEFAULT_POLL_INTERVAL)
        super().__init__(**kwargs)
        self.deployment_id = deployment_id
        self.revision_id = revision_id
        self.deployment_service_conn_id = deployment_service_conn_id
        self.deferrable = deferrable
        self.revision_check_interval = float(revision_check_interval)
        if self.revision_check_interval < 0:
            raise ValueError(f"revision_check_interval must be >= 0 seconds, got {revision_check_interval!r}")
        self.hook_overrides = hook_overrides(
            connect_timeout, read_timeout, max_attempts, backoff_initial, backoff_max, retry_after_max
        )
        self._check: RolloutCheck | None = None

    @property
    def poll_interval(self) -> float:
        """Seconds between two looks (same as ``poke_interval``)."""
        return float(self.poke_interval)

    @property
    def hook(self) -> DeploymentServiceHook:
        """A hook for this task's connection and overrides."""
        return DeploymentServiceHook(self.deployment_service_conn_id, **self.hook_overrides)

    def _rollout_check(self) -> RolloutCheck:
        if self._check is None:
            deployment_id, revision_id = checked_ids(self.deployment_id, self.revision_id)
            self._check = RolloutCheck(self.hook, deployment_id, revision_id, self.revision_check_interval, self.log)
        return self._check

    def execute(self, context: Context) -> Any:
        """Poke (or reschedule) until live; in deferrable mode check once, then defer to the trigger."""
        check = self._rollout_check()
        try:
            if not self.deferrable:
                try:
                    return super().execute(context)
                except AirflowSensorTimeout as err:
                    raise AirflowSensorTimeout(f"{err} Last seen: {check.last_message}") from None
            verdict = check.check()
        finally:
            check.hook.close()
        if verdict is not None and verdict.is_done:
            return check.outcome(verdict)
        self.defer(
            trigger=DeploymentRolloutTrigger(
                deployment_id=check.deployment_id,
                revision_id=check.revision_id,
                hook_params=check.hook.hook_params,
                poll_interval=self.poll_interval,
                deadline=time.time() + self.timeout,
                revision_check_interval=self.revision_check_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + max(DEFERRAL_GRACE, 2 * self.poll_interval)),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One look: done with the deployment JSON, ``False`` to wait, or fail fast."""
        verdict = self._rollout_check().check()
        if verdict is None or not verdict.is_done:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._rollout_check().outcome(verdict))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: return the deployment JSON or raise what the event says."""
        return rollout_event_result(event, self.log)
