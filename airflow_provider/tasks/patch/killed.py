"""The patch task killed while it judges its live revision: the revision is rolled back (recorded, then sent), never
left serving unjudged.

Which path covers which kill (Airflow 3.3):

- **On the worker** (``deferrable=False``, or a resumed task judging on the worker): Airflow calls the task's
  ``on_kill`` when its ``execution_timeout`` runs out, and when the task instance is marked failed (or its run
  stopped) while it runs (the supervisor's ``SIGTERM``). :meth:`KilledWhileJudging.on_kill` then records the verdict
  ("killed while judging") in the ``task_state_store`` record before anything else, and sends the rollback to the
  revision that served before the patch, recorded before the request and once sent; it does not wait (Airflow
  gives ``on_kill`` a few seconds). A retry that follows (after a timeout) finds the rollback recorded and waits for
  it; without ``rollback_on_failure`` the verdict is recorded and the task says the revision serves unjudged.
- **Deferred** (the analysis or the bake in the triggerer): an ``execution_timeout`` ends the deferral (Airflow
  bounds the deferral by it) and resumes the task with Airflow's deferral timeout: a retry reattaches and judges
  the revision again, the last try rolls it back as unjudged (``PatchDeploymentOperator.resume_execution``). A task
  marked failed by hand while deferred runs no code of the task at all (no ``on_kill``, no callback): nothing can
  roll back then; **Clear** the task instead (a retry reattaches and judges the revision) or roll back from the
  Rollouts view.
- A crash (the worker lost) is the next try's duty: it reattaches from the record
  (:mod:`~airflow_provider.tasks.patch.retry`).

``execution_timeout`` shorter than the judging itself is refused when the DAG is parsed
(:mod:`airflow_provider.tasks.execution_timeout`), so these kills are the exceptions.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.tasks.execution_timeout import ON_KILL_WAIT_SECONDS, act_on_kill, kill_cause
from airflow_provider.tasks.patch.rollback import AutomaticRollback

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import AnalysisResult
    from airflow_provider.models import Deployment
    from airflow_provider.tasks.patch.verdict import VerdictStep

__all__ = ["KILLED_WHILE_JUDGING", "KilledWhileJudging"]

KILLED_WHILE_JUDGING = "could not be judged: the task was killed while judging it"
"""The reason of the verdict ``on_kill`` records (followed by what killed it)."""


class KilledWhileJudging(AutomaticRollback):
    """Roll the patch's live revision back when Airflow kills the task while it judges it (see the module). A base
    of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`, under its judging steps."""

    if TYPE_CHECKING:  # what the operator provides
        deployment_service_conn_id: str
        hook_overrides: dict[str, float]
        execution_timeout: Any

    _judging: tuple[Context, dict[str, Any]] | None = None
    """The context and the landing of the revision being judged on this worker (``None``: none)."""
    _killed: str | None = None
    """What ``on_kill`` did, once it ran: later steps of the same process then stop instead of acting twice."""
    _kill_worker: threading.Thread | None = None
    """The thread ``on_kill`` records and sends the rollback in, when called from Airflow's ``SIGTERM`` handler."""

    def _judging_started(self, context: Context, landing: dict[str, Any]) -> None:
        """From now until the revision lands or is rolled back, a kill rolls it back."""
        self._judging = (context, landing)

    def _judging_ended(self) -> None:
        """The revision lands: a kill has nothing left to roll back (stops instead when ``on_kill`` acted on it)."""
        self._stop_if_killed()
        self._judging = None

    def _stop_if_killed(self) -> None:
        """Stop a step that would land or roll back the revision after ``on_kill`` acted on it (the task goes on
        running for a few seconds after Airflow's ``SIGTERM``)."""
        if self._killed is not None:
            if self._kill_worker is not None:  # let on_kill's rollback go out before the task ends
                self._kill_worker.join(ON_KILL_WAIT_SECONDS)
            raise AirflowFailException(f"the task was killed while judging the revision; {self._killed}")

    def _roll_back(
        self,
        context: Context,
        landing: dict[str, Any],
        reason: str,
        *,
        step: VerdictStep,
        analysis: AnalysisResult | None = None,
        current: Deployment | None = None,
    ) -> dict[str, Any]:
        self._stop_if_killed()
        return super()._roll_back(context, landing, reason, step=step, analysis=analysis, current=current)

    def on_kill(self) -> None:
        """Airflow kills the task (``execution_timeout``, marked failed, its run stopped): when it was judging a live
        revision, record the verdict and send the rollback (recorded before the request), without waiting."""
        judging, self._judging = self._judging, None
        if judging is None:
            return
        what = kill_cause(self.execution_timeout)
        self._killed = "on_kill is rolling it back"
        self._kill_worker = act_on_kill(lambda: self._on_kill(*judging, what), what)

    def _on_kill(self, context: Context, landing: dict[str, Any], what: str) -> None:
        """What ``on_kill`` does, never raising: :meth:`_act_on_kill`, or why it could not (never a secret: the
        client's errors are scrubbed)."""
        try:
            self._killed = self._act_on_kill(context, landing, what)
        except Exception as err:  # on_kill must end: say what is left
            self._killed = f"the rollback could not be sent ({type(err).__name__}: {err})"
            self.log.error(
                "Killed (%s) while judging revision %s of deployment %s, and its rollback could not be sent (%s): "
                "the revision serves, not judged; roll it back from the Rollouts view",
                what,
                landing.get("revision_id"),
                landing.get("deployment_id"),
                err,
            )

    def _act_on_kill(self, context: Context, landing: dict[str, Any], what: str) -> str:
        """Record the verdict, then (with ``rollback_on_failure``) send the rollback on a fresh client (the killed
        step may hold the task's); what was done."""
        from airflow_provider.decisions.record import verdict_kind
        from airflow_provider.hooks.deployment_service import DeploymentServiceHook
        from airflow_provider.tasks.patch.verdict import (
            failed_revision,
            failed_verdict,
            read_record,
            record_verdict,
            recorded_failed_verdict,
        )
        from airflow_provider.tasks.recording import record_landing_entry

        store = context.get("task_state_store")
        record = read_record(store, self.log)
        if record is not None and isinstance(record.get("rollback"), dict):
            return "its rollback was already recorded (a retry waits for it)"
        earlier = recorded_failed_verdict(record)
        step: VerdictStep = "unjudged"
        reason = f"{KILLED_WHILE_JUDGING} ({what})"
        if earlier is not None:  # judged failed just before the kill: act on that verdict
            step, reason = earlier["step"], earlier["reason"]
        else:
            record_verdict(store, landing, failed_verdict(step, reason, landing.get("revision_id")), self.log)
            record_landing_entry(context, self.log, verdict_kind(step), landing, step=step, message=reason)
        bad = failed_revision(landing, step, reason)
        previous = landing.get("previous_active_revision_id")
        if not self.rollback_on_failure or not previous or not landing.get("revision_id"):
            self.log.error("%s; not rolling back (rollback_on_failure is off, or nothing served before)", bad)
            return "the revision serves, not judged (no rollback)"
        self.log.error("%s; rolling back to revision %s (not waiting: the task is being killed)", bad, previous)
        fresh = DeploymentServiceHook(self.deployment_service_conn_id, **self.hook_overrides)
        try:
            current = fresh.get_deployment(landing["deployment_id"])
            rollback, _ = self._start_recorded_rollback(context, landing, reason, step, current, hook=fresh)
        finally:
            fresh.close()
        self.log.warning(
            "Rollback of revision %s sent: revision %s is going live; a retry waits for it",
            landing.get("revision_id"),
            rollback.get("revision_id"),
        )
        return f"rolled back to revision {previous} (the rollback's revision {rollback.get('revision_id')} was sent)"
