"""Sensor that waits until a deployment's revision is live, failing fast when it never can be."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_provider.tasks.base import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    DeploymentServiceBaseTask,
    checked_ids,
    checked_name,
    checked_revision_id,
    deployment_by_name,
    non_negative_seconds,
    positive_seconds,
)
from airflow_provider.tasks.targets import exactly_one_target

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.decisions.rollout import RolloutVerdict
    from airflow_provider.tasks.waiting import RolloutCheck


class DeploymentRolloutSensor(BaseSensorOperator, DeploymentServiceBaseTask):
    """Wait until a deployment's revision is live: status ``READY`` **and** that revision active.

    ``READY`` with the previous revision still active keeps waiting (the old code still serves). Fails
    at once, without retries, when the deployment disappears or is being deleted, when the revision's
    build or deploy failed (seen through the optional revision endpoint; silently skipped where the
    service does not have it), or when a newer revision superseded it. Transient API errors are logged
    and retried on the next poke. Returns (and pushes) the deployment as redacted JSON.

    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name, looked up once when the task starts (before
        deferring: the trigger gets the id). Templated. Give this or ``deployment_id``.
    :param revision_id: the revision that must become active; ``None`` waits only for ``READY``. Templated.
    :param poll_interval: seconds between looks (the sensor's ``poke_interval``; give one or the other).
    :param deferrable: wait in the triggerer instead of a worker slot (checks once on the worker first).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls while the
        deployment does not change.

    The connection arguments (``deployment_service_conn_id`` and the hook overrides) are those of
    :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = ("deployment_id", "deployment_name", "revision_id", "deployment_service_conn_id")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        revision_id: str | None = None,
        poll_interval: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        **kwargs: Any,
    ) -> None:
        exactly_one_target(deployment_id, deployment_name)
        if poll_interval is not None and "poke_interval" in kwargs:
            raise ValueError("give poll_interval or poke_interval, not both (they are the same setting)")
        if poll_interval is not None:
            kwargs["poke_interval"] = positive_seconds(poll_interval, "poll_interval")
        kwargs.setdefault("poke_interval", DEFAULT_POLL_INTERVAL)
        super().__init__(**kwargs)
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.revision_id = revision_id
        self.deferrable = deferrable
        self.revision_check_interval = non_negative_seconds(revision_check_interval, "revision_check_interval")
        self._check: RolloutCheck | None = None

    @property
    def poll_interval(self) -> float:
        """Seconds between two looks (same as ``poke_interval``)."""
        return float(self.poke_interval)

    def _rollout_check(self) -> RolloutCheck:
        from airflow_provider.tasks.waiting import RolloutCheck

        if self._check is None:
            if self.deployment_name is not None:
                name = checked_name(self.deployment_name)
                revision_id = checked_revision_id(self.revision_id)
                deployment_id = deployment_by_name(self.hook, name).id
                self.log.info("Deployment %r has id %s", name, deployment_id)
            else:
                deployment_id, revision_id = checked_ids(self.deployment_id, self.revision_id)
            self._check = RolloutCheck(self.hook, deployment_id, revision_id, self.revision_check_interval, self.log)
        return self._check

    def execute(self, context: Context) -> Any:
        """Poke (or reschedule) until live; in deferrable mode check once, then defer to the trigger."""
        from airflow_provider.tasks.waiting import defer_until_live

        try:
            check = self._rollout_check()
            if not self.deferrable:
                try:
                    return super().execute(context)
                except AirflowSensorTimeout as err:
                    raise AirflowSensorTimeout(f"{err} Last seen: {check.last_message}") from None
            verdict = check.check()
        finally:
            self.close_hook()
        if verdict is not None and verdict.is_done:
            return self._outcome(check, verdict)
        defer_until_live(self, check)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One look: done with the deployment JSON, ``False`` to wait, or fail fast."""
        verdict = self._rollout_check().check()
        if verdict is None or not verdict.is_done:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._outcome(self._rollout_check(), verdict))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: return the deployment JSON or raise what the event says."""
        from airflow_provider.tasks.build_logs import log_failed_build
        from airflow_provider.tasks.waiting import rollout_event_result

        try:
            return rollout_event_result(event, self.log)
        except AirflowFailException:
            if isinstance(event, dict):  # a failed build: its build log's last lines in the task log
                log_failed_build(self.hook, event.get("deployment_id"), event.get("revision_id"), self.log)
            raise
        finally:
            self.close_hook()

    def _outcome(self, check: RolloutCheck, verdict: RolloutVerdict) -> Any:
        """``check.outcome(verdict)``; on a failed rollout, first log a failed build's last log lines."""
        from airflow_provider.tasks.build_logs import log_failed_build

        try:
            return check.outcome(verdict)
        except AirflowFailException:
            log_failed_build(self.hook, check.deployment_id, check.revision_id, self.log)
            self.close_hook()
            raise
