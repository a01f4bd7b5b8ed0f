"""The patch task's automatic rollback (``rollback_on_failure``): a failed revision rolled back to the one that
served before the patch, and what a retry does with an earlier try's rollback or failed verdict.

The moment the revision is judged failed, the verdict is recorded (a retry rolls back from it, never judges
again: :mod:`~airflow_provider.tasks.patch.verdict`); the rollback is recorded before its request and once sent
(:func:`~airflow_provider.tasks.patch.retry.record_rollback`), then waited for, and the task fails naming both
revisions and what the rollback did not undo. A retry that finds an earlier try's rollback (recorded, or
recognised on the service) waits for it; one that finds a failed verdict without a rollback rolls back now;
never a second rollback, never a success.

:class:`AutomaticRollback` is a base of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`,
which provides the wait (``_wait``), the deployment read (``_read``) and its XComs (``_push_landing_xcoms``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_provider.tasks.notify import RolloutNotifying

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import AnalysisResult
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook
    from airflow_provider.models import Deployment
    from airflow_provider.tasks.patch.retry import EarlierTry
    from airflow_provider.tasks.patch.verdict import VerdictStep
    from airflow_provider.tasks.rollback.outcome import RollbackIntent

__all__ = ["AutomaticRollback"]


class AutomaticRollback(RolloutNotifying):
    """Roll the patch's revision back when it failed, and pick up an earlier try's rollback or verdict (see the
    module). A base of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`: the operator gives
    the arguments and the wait; the steps here are its methods."""

    if TYPE_CHECKING:  # what the operator provides
        rollback_on_failure: bool

        def _wait(
            self,
            deployment: Deployment,
            revision_id: str | None,
            *,
            resume: str = "execute_complete",
            resume_kwargs: dict[str, Any] | None = None,
            allowed_latest_revision_id: str | None = None,
            carry: dict[str, Any] | None = None,
        ) -> dict[str, Any]: ...

        def _read(self, deployment_id: str) -> Deployment: ...

        def _push_landing_xcoms(self, context: Context, current: Deployment, landing: dict[str, Any]) -> None: ...

    def _logged(self, message: str) -> str:
        """``message``, logged as an error (a failure's message, also in the task log)."""
        self.log.error("%s", message)
        return message

    # ---- the rollback of a failed revision
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
        """The revision is bad (``step`` said why; ``analysis``: the result that decided): record the verdict
        before anything else (a retry rolls back from it, never judges again), push the XCom ``analysis``, then
        fail, after rolling back when ``rollback_on_failure``."""
        from airflow_provider.decisions.record import verdict_kind
        from airflow_provider.tasks.patch.verdict import XCOM_ANALYSIS, failed_revision, failed_verdict, record_verdict
        from airflow_provider.tasks.recording import record_landing_entry

        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        record_verdict(
            context.get("task_state_store"), landing, failed_verdict(step, reason, revision_id, analysis), self.log
        )
        record_landing_entry(
            context, self.log, verdict_kind(step), landing, step=step, message=reason, verdict=analysis
        )
        if analysis is not None:
            context["ti"].xcom_push(key=XCOM_ANALYSIS, value=analysis)
        previous = landing.get("previous_active_revision_id")
        if step == "analysis":
            self._notify(
                context,
                "analysis_failed",
                deployment_id=deployment_id,
                revision_id=revision_id,
                previous_revision_id=previous,
                reason=reason,
                analysis=analysis,
            )
        bad = failed_revision(landing, step, reason)
        if not self.rollback_on_failure:
            raise AirflowFailException(
                f"{bad}; not rolling back (rollback_on_failure is off; revision {previous} served before the patch)"
            )
        if not revision_id or not previous:
            what = "the patch created no revision" if not revision_id else "no revision served before the patch"
            raise AirflowFailException(f"{bad}; cannot roll back: {what}")
        self.log.error("%s; rolling back to revision %s", bad, previous)
        return self._send_rollback(context, landing, reason, step, current or self._read(deployment_id))

    def _send_rollback(
        self, context: Context, landing: dict[str, Any], reason: str, step: Any, current: Deployment
    ) -> dict[str, Any]:
        """Roll back to the revision that served before the patch, its resource_spec included; record the
        rollback in ``task_state_store`` before the request (a retry then knows one may be out) and once sent
        (a retry waits for it instead of rolling back twice); wait for it; fail."""
        rollback, deployment = self._start_recorded_rollback(context, landing, reason, step, current)
        return self._wait_for_rollback(context, landing, rollback, deployment)

    def _start_recorded_rollback(
        self,
        context: Context,
        landing: dict[str, Any],
        reason: str,
        step: Any,
        current: Deployment,
        hook: DeploymentServiceHook | None = None,
    ) -> tuple[dict[str, Any], Deployment]:
        """Send the rollback to the revision that served before the patch, recorded before the request and once
        sent, without waiting for it: the rollback's record and the deployment as the request left it (``hook``: a
        hook of its own, ``on_kill``'s; ``None``: the task's)."""
        from airflow_provider.tasks.patch.retry import record_rollback, rollback_record
        from airflow_provider.tasks.rollback.outcome import recorded_fields
        from airflow_provider.tasks.rollback.start import start_rollback

        store = context.get("task_state_store")
        patch_clauses = list(landing.get("not_restorable") or [])

        def before_sending(intent: RollbackIntent) -> None:
            record_rollback(store, landing, rollback_record(intent, reason, patch_clauses, step=step), self.log)

        started = start_rollback(
            hook or self.hook,
            current,
            landing["previous_active_revision_id"],
            rolling_back_from=landing["revision_id"],
            fallback_config=landing.get("previous_source_revision_config") or None,
            resource_spec=landing.get("previous_resource_spec"),
            resource_spec_fields=recorded_fields(landing.get("resource_spec_changes")),
            before_sending=before_sending,
            log=self.log,
        )
        rollback = rollback_record(started, reason, patch_clauses, step=step)
        record_rollback(store, landing, rollback, self.log)
        if rollback["not_restored"]:
            self.log.warning(
                "The rollback of revision %s does not undo: %s",
                landing["revision_id"],
                "; ".join(rollback["not_restored"]),
            )
        return rollback, started.deployment

    def _wait_for_rollback(
        self, context: Context, landing: dict[str, Any], rollback: dict[str, Any], deployment: Deployment
    ) -> dict[str, Any]:
        """Wait (or defer) until the rollback's revision serves, then fail saying what was rolled back."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import rollback_not_live_message
        from airflow_provider.tasks.recording import record_rollback_entry

        record_rollback_entry(context, self.log, Kind.ROLLING_BACK, rollback)
        resume_kwargs = {"landing": landing, "rollback": rollback}
        try:
            live = self._wait(
                deployment,
                rollback["revision_id"],
                resume="execute_rollback_complete",
                resume_kwargs=resume_kwargs,
                allowed_latest_revision_id=rollback.get("allowed_latest_revision_id"),
                carry=resume_kwargs,
            )
        except AirflowSensorTimeout as err:
            raise AirflowSensorTimeout(self._logged(rollback_not_live_message(landing, rollback, err))) from None
        self._rolled_back(context, landing, rollback, live)

    def _rolled_back(
        self, context: Context, landing: dict[str, Any], rollback: dict[str, Any], live: dict[str, Any]
    ) -> NoReturn:
        """The rollback serves: record it, notify ``rolled_back``, fail naming both revisions."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import judged_not_restored, rolled_back_message
        from airflow_provider.tasks.recording import record_rollback_entry

        record_rollback_entry(
            context, self.log, Kind.ROLLED_BACK, rollback, not_restored=judged_not_restored(rollback, live)
        )
        message = rolled_back_message(landing, rollback, live)
        self._notify(
            context,
            "rolled_back",
            deployment_id=landing.get("deployment_id"),
            revision_id=landing.get("revision_id"),
            deployment_name=live.get("name"),
            previous_revision_id=landing.get("previous_active_revision_id"),
            reason=message,
        )
        raise AirflowFailException(self._logged(message))

    # ---- retries: an earlier verdict, an earlier try's rollback
    def _resume_failed_verdict(
        self, context: Context, record: dict[str, Any], verdict: dict[str, Any], current: Deployment
    ) -> dict[str, Any]:
        """An earlier try judged the patch's revision failed and recorded it, then stopped before its rollback was
        recorded: act on that verdict now (roll back, or fail without ``rollback_on_failure``), never judge the
        revision again (a bad spell that ended since would pass it)."""
        from airflow_provider.tasks.patch.verdict import landing_of

        landing = landing_of(record)
        self._push_landing_xcoms(context, current, landing)
        self.log.warning(
            "An earlier try judged revision %s failed (%s: %s) and stopped before rolling it back: acting on that "
            "verdict now, without judging the revision again",
            landing["revision_id"],
            verdict["step"],
            verdict["reason"],
        )
        analysis = verdict.get("analysis")
        reason, step = verdict["reason"], verdict["step"]
        return self._roll_back(context, landing, reason, step=step, analysis=analysis or None, current=current)

    def _resume_recorded_rollback(
        self, context: Context, store: Any, record: dict[str, Any], current: Deployment
    ) -> dict[str, Any]:
        """An earlier try recorded its rollback: wait for it (sent, or found landed), send it (it never reached
        the service), or fail saying what the deployment shows; never a second rollback, never success."""
        from airflow_provider.tasks.patch.retry import record_rollback, rollback_record
        from airflow_provider.tasks.patch.verdict import landing_of
        from airflow_provider.tasks.rollback.evidence import reattach_recorded_rollback

        landing = landing_of(record)
        rollback = dict(record["rollback"])
        self._push_landing_xcoms(context, current, landing)
        reason = str(rollback.get("reason") or "verify, the analysis or the bake failed in an earlier try")
        started = reattach_recorded_rollback(self.hook, current, rollback, log=self.log)
        if started is None:
            self.log.warning(
                "An earlier try was rolling revision %s back to revision %s when it stopped, and the rollback did "
                "not reach the service: rolling back now",
                landing["revision_id"],
                landing["previous_active_revision_id"],
            )
            return self._send_rollback(context, landing, reason, rollback.get("step"), current)
        if rollback.get("phase") == "sent":
            rollback = {**rollback, "not_restored": list(started.not_restored)}
        else:  # recorded before sending, found landed: record it as sent
            rollback = rollback_record(
                started,
                reason,
                landing["not_restorable"],
                origin="an earlier try's, found on the service",
                step=rollback.get("step"),
            )
            record_rollback(store, landing, rollback, self.log)
        self.log.warning(
            "An earlier try rolled revision %s back to revision %s: waiting for its revision %s instead of rolling "
            "back again",
            landing["revision_id"],
            landing["previous_active_revision_id"],
            started.revision_id,
        )
        return self._wait_for_rollback(context, landing, rollback, current)

    def _resume_found_rollback(self, context: Context, earlier: EarlierTry, current: Deployment) -> dict[str, Any]:
        """An earlier try's rollback recognised on the service (no record): wait for it, then fail."""
        from airflow_provider.tasks.patch.verdict import landing_of

        assert earlier.rollback is not None
        landing = landing_of(earlier.rollback["landing"])
        rollback = earlier.rollback["rollback"]
        self._push_landing_xcoms(context, current, landing)
        self.log.warning(
            "%s: revision %s (this patch's config) was followed by revision %s, which copies revision %s: an "
            "earlier try's automatic rollback (no task_state_store record). Waiting for it instead of patching again",
            current.summary(),
            landing["revision_id"],
            rollback["revision_id"],
            landing["previous_active_revision_id"],
        )
        return self._wait_for_rollback(context, landing, rollback, current)
