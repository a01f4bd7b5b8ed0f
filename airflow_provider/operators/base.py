"""What every operator of this provider shares: the XCom keys they push, the ``Deployment`` extra link,
and the two bases (one that closes its hook after running; one that can also wait for a revision to go live,
on the worker or in the triggerer).

The operators stand in one module per family (:mod:`~airflow_provider.operators.lists`,
:mod:`~airflow_provider.operators.patch`, :mod:`~airflow_provider.operators.rollback`,
:mod:`~airflow_provider.operators.fleet`); DAGs import them from
:mod:`airflow_provider.operators.deployment_service`, which re-exports them."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink, conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.tasks.base import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    DEFAULT_ROLLOUT_TIMEOUT,
    DeploymentServiceBaseTask,
    non_negative_seconds,
    positive_seconds,
)
from airflow_provider.tasks.events import with_revision_outlets

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_provider.models import Deployment, Revision

# The operator modules import at module level only what defining and constructing their tasks needs; what a
# running task needs (waiting, judging, rolling back, the record, notifying, asking) is imported in the method
# that uses it, so a DAG file that imports the operators does not pay for it (bench/import_cost.py,
# tests/test_import_cost.py).

__all__ = [
    "XCOM_DEPLOYMENT_ID",
    "XCOM_DEPLOYMENT_URL",
    "XCOM_FLEET_SUMMARY",
    "XCOM_NOT_RESTORED",
    "XCOM_PREVIOUS_ACTIVE_REVISION_ID",
    "XCOM_PREVIOUS_RESOURCE_SPEC",
    "XCOM_PREVIOUS_SOURCE_REVISION_CONFIG",
    "XCOM_REVISION_ID",
    "XCOM_ROLLBACK_PATH",
    "XCOM_ROLLED_BACK_FROM",
    "DeploymentLink",
]

# The XCom keys the operators push; downstream tasks pull them by name (renaming one is breaking).
XCOM_DEPLOYMENT_ID = "deployment_id"
XCOM_REVISION_ID = "revision_id"
XCOM_PREVIOUS_ACTIVE_REVISION_ID = "previous_active_revision_id"
XCOM_DEPLOYMENT_URL = "deployment_url"
XCOM_PREVIOUS_SOURCE_REVISION_CONFIG = "previous_source_revision_config"
XCOM_PREVIOUS_RESOURCE_SPEC = "previous_resource_spec"
XCOM_ROLLED_BACK_FROM = "rolled_back_from"
XCOM_ROLLBACK_PATH = "rollback_path"
XCOM_NOT_RESTORED = "not_restored"
XCOM_FLEET_SUMMARY = "fleet_summary"


class DeploymentLink(BaseOperatorLink):
    """Link to the deployment's own URL (``source_config.custom_url``), when the service reports one."""

    name = "Deployment"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The URL pushed under the XCom key ``deployment_url``, or ``""``.

        Airflow asks every task's links when it ends, also when it failed before pushing the XCom (e.g. a
        template that could not render). An unmapped task's value is read as a sequence, which is empty
        when absent, so no "XCom not found" error follows the task's real one.
        """
        from airflow.sdk.execution_time.xcom import XCom

        if ti_key.map_index < 0:
            values = XCom.get_all(
                key=XCOM_DEPLOYMENT_URL, dag_id=ti_key.dag_id, task_id=ti_key.task_id, run_id=ti_key.run_id
            )
            url = values[0] if values else None
        else:
            url = XCom.get_value(ti_key=ti_key, key=XCOM_DEPLOYMENT_URL)
        return url if isinstance(url, str) else ""


class _DeploymentServiceOperator(DeploymentServiceBaseTask):
    """An operator of this provider: runs :meth:`_run`, then closes the hook's pooled connections."""

    def execute(self, context: Context) -> Any:
        """Run the task, then close the hook's pooled connections (also when deferring or failing)."""
        try:
            return self._run(context)
        finally:
            self.close_hook()

    def _run(self, context: Context) -> Any:
        """The task's work (subclasses)."""
        raise NotImplementedError


class _RolloutWaitingOperator(_DeploymentServiceOperator):
    """An operator that can wait for a revision to go live, on the worker or in the triggerer.

    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks while waiting.
    :param timeout: seconds the new revision has to go live (its build and deploy; then one final look, then
        ``AirflowSensorTimeout``). It covers reaching live only, not a bake, an analysis or the whole task: Airflow's
        ``execution_timeout`` bounds the task.
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls while the
        deployment does not change.

    Its outlets get the provider's revisions alias (:func:`~airflow_provider.tasks.events.with_revision_outlets`),
    so a subclass that lands a revision emits the deployment's asset event with one call to
    :func:`~airflow_provider.tasks.events.emit_revision_event` (from its ``_landed``).
    """

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        timeout: float | timedelta = DEFAULT_ROLLOUT_TIMEOUT,
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        **kwargs: Any,
    ) -> None:
        # A task that lands a revision emits an asset event on the deployment (through this alias).
        kwargs["outlets"] = with_revision_outlets(kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.timeout = positive_seconds(timeout, "timeout")
        self.revision_check_interval = non_negative_seconds(revision_check_interval, "revision_check_interval")

    def _wait(
        self,
        deployment: Deployment,
        revision_id: str | None,
        *,
        resume: str = "execute_complete",
        resume_kwargs: dict[str, Any] | None = None,
        allowed_latest_revision_id: str | None = None,
        carry: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Wait until ``revision_id`` (or, when ``None``, ``READY``) is live; returns the deployment JSON.

        Decided at once when the deployment already shows the outcome; otherwise defers (raises
        ``TaskDeferred``, resuming in ``resume``, by default :meth:`execute_complete`, with
        ``resume_kwargs``, and ``carry`` in the event) or blocks on the worker. A failed build's log tail is
        logged before failing. ``allowed_latest_revision_id``: a newer revision that may stay the latest while
        ``revision_id`` goes live (see :func:`~airflow_provider.decisions.rollout.rollout_verdict`).
        """
        from airflow_provider.decisions.rollout import RolloutState, rollout_verdict
        from airflow_provider.tasks.waiting import RolloutCheck, defer_until_live

        try:
            verdict = rollout_verdict(
                deployment,
                revision_id,
                deployment_id=deployment.id,
                allowed_latest_revision_id=allowed_latest_revision_id,
            )
            if verdict.state is RolloutState.SUCCEEDED:
                self.log.info("%s", verdict.message)
                return deployment.model_dump(mode="json")
            if verdict.state is RolloutState.FAILED:
                raise AirflowFailException(verdict.message)
            check = RolloutCheck(
                self.hook,
                deployment.id,
                revision_id,
                self.revision_check_interval,
                self.log,
                allowed_latest_revision_id=allowed_latest_revision_id,
            )
            check.deployment = deployment
            if self.deferrable:
                defer_until_live(self, check, method_name=resume, kwargs=resume_kwargs, carry=carry)
            return check.wait(self.poll_interval, self.timeout)
        except AirflowFailException:
            self._explain_failure(deployment.id, revision_id)
            raise

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: return the live deployment JSON or raise what the event says."""
        from airflow_provider.tasks.waiting import rollout_event_result

        try:
            return rollout_event_result(event, self.log)
        except AirflowFailException:
            if isinstance(event, dict):
                self._explain_failure(event.get("deployment_id"), event.get("revision_id"))
            raise
        finally:
            self.close_hook()

    def _explain_failure(self, deployment_id: str | None, revision_id: str | None) -> Revision | None:
        """After a failed rollout: log the build log's last lines when the revision's build failed."""
        from airflow_provider.tasks.build_logs import log_failed_build

        return log_failed_build(self.hook, deployment_id, revision_id, self.log, secrets=self._secret_values())

    def _secret_values(self) -> tuple[str, ...]:
        """Secret values this task knows (scrubbed from build logs)."""
        return ()
