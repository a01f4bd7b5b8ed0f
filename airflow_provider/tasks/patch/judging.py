"""Judging the patch's live revision before it counts as landed: ``verify`` (on the worker), then the analysis
(in the triggerer when ``deferrable``, else on the worker), then the bake (the revision must stay live); a
revision that fails any is rolled back (:mod:`~airflow_provider.tasks.patch.rollback`) or fails the task.

What judging needs travels as the landing (:func:`~airflow_provider.tasks.patch.verdict.landing_of`), carried
across deferrals (also in the trigger's event: ``dag.test()`` drops the defer kwargs) and kept in
``task_state_store``. An analysis that could not be measured fails the try while a retry is left (the retry
reattaches and analyses again); on the last try it counts as inconclusive, a failed revision.

:class:`LiveRevisionJudging` is a base of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`,
which provides the arguments, the waiting settings and ``_landed`` (the asset event); the operator's resume
methods (``execute_analysis_complete``, ``execute_bake_complete``) hand over to the steps here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider.tasks.patch.killed import KilledWhileJudging

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import Analysis, AnalysisResult, AnalysisTarget
    from airflow_provider.models import Deployment

__all__ = ["LiveRevisionJudging"]


class LiveRevisionJudging(KilledWhileJudging):
    """Verify, analyse and bake the patch's live revision, then land it, or roll it back (see the module). A base
    of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`; the steps here are its methods."""

    if TYPE_CHECKING:  # what the operator provides
        verify: Callable[[Deployment], Any] | None
        bake_seconds: float
        analysis: Analysis | None
        deferrable: bool
        poll_interval: float
        timeout: float
        revision_check_interval: float

        def _known_secret_values(self) -> tuple[str, ...] | None: ...

        def _landed(
            self, context: Context, live: dict[str, Any], analysis: dict[str, Any] | None = None
        ) -> dict[str, Any]: ...

    def _judges_live(self) -> bool:
        """Whether a live revision is judged (``verify``, an analysis or a bake) before it counts as landed."""
        return self.verify is not None or bool(self.bake_seconds) or self.analysis is not None

    def _judge_live(self, context: Context, live: dict[str, Any], landing: dict[str, Any] | None) -> dict[str, Any]:
        """Run ``verify`` on the live deployment, then the analysis, then the bake; roll back (or fail) when
        any fails."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import verify_failure
        from airflow_provider.tasks.recording import record_landing_entry

        if landing is None:
            return self._landed(context, live)
        self._judging_started(context, landing)  # a kill from now on rolls the revision back (tasks.patch.killed)
        record_landing_entry(context, self.log, Kind.JUDGING, landing, steps=self._judging_steps())
        promoted = self._promoted(context, landing)
        if promoted is not None:  # a person promoted it in an earlier try: never judged again
            return self._bake_and_land(context, live, landing, promoted)
        reason = verify_failure(self.verify, live, self._known_secret_values, self.log)
        if reason is None and self.analysis is not None:
            return self._analyse(context, live, landing)
        if reason is None:
            return self._bake_and_land(context, live, landing)
        return self._roll_back(context, landing, reason, step="verify")

    def _on_inconclusive(
        self, context: Context, landing: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What an inconclusive verdict does instead of counting as failed (``None``: it counts as failed); the
        patch task asks a person (:mod:`~airflow_provider.tasks.patch.asking`)."""
        return None

    def _promoted(self, context: Context, landing: dict[str, Any]) -> dict[str, Any] | None:
        """The analysis result a person promoted the revision with in an earlier try (``None``: none): it lands
        without being judged again (:mod:`~airflow_provider.tasks.patch.asking`)."""
        return None

    def _judging_steps(self) -> list[str]:
        """What judges a live revision, in order: ``verify``, ``analysis``, ``bake``."""
        given = (
            ("verify", self.verify is not None),
            ("analysis", self.analysis is not None),
            ("bake", self.bake_seconds),
        )
        return [step for step, on in given if on]

    def _bake_and_land(
        self,
        context: Context,
        live: dict[str, Any],
        landing: dict[str, Any],
        analysis: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Bake the live revision when asked (deferred to a trigger when ``deferrable``), then land it; roll
        back (or fail) when it left. ``analysis``: the result that passed it, for the asset event."""
        from airflow_provider.tasks.events import analysis_extra
        from airflow_provider.tasks.waiting import bake, defer_bake

        revision_id = landing["revision_id"]
        reason = None
        if self._bakes_separately() and revision_id:
            if self.deferrable:
                kwargs: dict[str, Any] = {"landing": landing}
                if analysis is not None:
                    kwargs["analysis"] = analysis_extra(analysis)
                defer_bake(
                    self,
                    self.hook,
                    landing["deployment_id"],
                    revision_id,
                    self.bake_seconds,
                    method_name="execute_bake_complete",
                    kwargs=kwargs,
                )
            reason = bake(
                self.hook, landing["deployment_id"], revision_id, self.bake_seconds, self.poll_interval, self.log
            )
        if reason is None:
            return self._landed(context, live, analysis)
        return self._roll_back(context, landing, reason, step="bake")

    def _bakes_separately(self) -> bool:
        """Whether the bake is its own step: there is one, and no analysis whose rounds fill it (an analysis
        without ``count`` measures for ``bake_seconds`` and checks each round that the revision still
        serves: that is the bake)."""
        return bool(self.bake_seconds) and (self.analysis is None or self.analysis.count is not None)

    # ---- the analysis
    def _analyse(self, context: Context, live: dict[str, Any], landing: dict[str, Any]) -> dict[str, Any]:
        """Judge the live revision by its analysis: in the triggerer when ``deferrable`` (the landing carried in
        the trigger's event, which every resume gets), else (or with a ``CallableCheck``) on the worker."""
        from airflow_provider.tasks.analysis import AnalysisNotMeasured, analyse_on_worker, defer_analysis
        from airflow_provider.tasks.publishing import trigger_judging
        from airflow_provider.tasks.recording import round_recorder

        assert self.analysis is not None
        analysis = self.analysis.with_count_for(self.bake_seconds or None)
        target = self._analysis_target(live, landing)
        self.log.info(
            "Analysing revision %s of %r (live since %s): %d round(s) every %g s",
            target.revision_id,
            target.name,
            target.live_since.isoformat(),
            analysis.count or 0,
            analysis.interval_seconds,
        )
        if self.deferrable:
            if not analysis.runs_on_worker:
                defer_analysis(
                    self,
                    analysis,
                    [target],
                    method_name="execute_analysis_complete",
                    carry={"landing": landing},
                    judging=trigger_judging(context),  # the rounds shown as measured, while deferred
                )
            self.log.info("The analysis holds a CallableCheck, which runs only on the worker: measuring here")
        try:
            recorder = round_recorder(
                context,
                self.log,
                [target],
                steps=self._judging_steps(),
                fields={
                    target.deployment_id: {"previous_revision_id": landing.get("previous_active_revision_id") or None}
                },
            )
            results = analyse_on_worker(self, analysis, [target], on_round=recorder)
        except AnalysisNotMeasured as err:
            return self._analysis_not_measured(context, landing, str(err))
        return self._judge_analysis(context, landing, results)

    def _analysis_not_measured(self, context: Context, landing: dict[str, Any], why: str) -> dict[str, Any]:
        """The analysis could not be measured at all (its trigger reported an error, or it could not run here):
        with a retry left, fail to retry (the retry reattaches to the revision and analyses it again); on the
        last try, the revision is inconclusive, a failed revision: roll back (or fail) saying so."""
        from airflow_provider.tasks.analysis import no_retry_left, not_measured_result

        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        if self.analysis is not None and self.analysis.dry_run and no_retry_left(context, self.retries):
            return self._judge_analysis(context, landing, {deployment_id: not_measured_result(revision_id or "", why)})
        if not no_retry_left(context, self.retries):
            raise AirflowException(
                f"deployment {deployment_id}: the analysis of revision {revision_id} could not be measured ({why}); "
                "the revision serves, not judged: a retry reattaches to it and analyses it again"
            )
        return self._roll_back(
            context,
            landing,
            f"the analysis could not be measured on the task's last try, so it is inconclusive (counted as failed): "
            f"{why}",
            step="analysis",
            analysis=not_measured_result(revision_id or "", why),
        )

    def _analysis_target(self, live: dict[str, Any], landing: dict[str, Any]) -> AnalysisTarget:
        """The live revision to analyse, its window from when it went live (see
        :func:`~airflow_provider.tasks.analysis.live_since`)."""
        from airflow_provider.analysis import AnalysisTarget
        from airflow_provider.models import Deployment
        from airflow_provider.tasks.analysis import live_since

        deployment = Deployment.model_validate(live)
        revision_id = landing.get("revision_id") or deployment.active_revision_id or ""
        return AnalysisTarget(
            deployment_id=deployment.id,
            name=deployment.name,
            revision_id=revision_id,
            live_since=live_since(self.hook, deployment, revision_id, log=self.log),
            custom_url=deployment.source_config.custom_url,
            baseline=landing.get("baseline"),
        )

    def _analysis_resumed(
        self, context: Context, event: dict[str, Any] | None, carry: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The resume of the analysis trigger (see ``execute_analysis_complete``): the landing from ``carry``, else
        the event, else ``task_state_store`` (without it the try fails: a retry analyses again); then the verdict."""
        from airflow_provider.tasks.analysis import AnalysisNotMeasured, analysis_event_results, analysis_event_subject
        from airflow_provider.tasks.patch.verdict import checked_landing, recorded_landing
        from airflow_provider.tasks.waiting import resumed_value

        subject = analysis_event_subject(event)
        given = carry.get("landing") if isinstance(carry, dict) else None
        landing = checked_landing(
            resumed_value("landing", given, event)
            or recorded_landing(context.get("task_state_store"), subject, self.log),
            subject,
            "execute_analysis_complete",
        )
        self._judging_started(context, landing)
        try:
            results = analysis_event_results(event, self.log)
        except AnalysisNotMeasured as err:
            return self._analysis_not_measured(context, landing, str(err))
        return self._judge_analysis(context, landing, results)

    def _judge_analysis(
        self, context: Context, landing: dict[str, Any], results: Mapping[str, AnalysisResult]
    ) -> dict[str, Any]:
        """Push the XCom ``analysis``; roll back (or fail) on a failed or inconclusive verdict, saying which;
        else bake (when that is its own step) and land, the deployment read again: the revision must still
        serve."""
        from airflow_provider.decisions.rollout import bake_verdict
        from airflow_provider.tasks.analysis import analysis_failure_reason
        from airflow_provider.tasks.dry_run import dry_run_result
        from airflow_provider.tasks.patch.verdict import XCOM_ANALYSIS

        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        result = results.get(deployment_id)
        if result is None:
            raise AirflowException(
                f"deployment {deployment_id}: the analysis of revision {revision_id} returned no result for it "
                f"(results for: {', '.join(map(str, results)) or 'none'}); a retry reattaches and analyses again"
            )
        dry_run = self.analysis is not None and self.analysis.dry_run
        if analysis_failure_reason(result) is not None and not dry_run:
            asked = (
                self._on_inconclusive(context, landing, dict(result))
                if result.get("verdict") == "inconclusive"
                else None
            )
            if asked is not None:
                return asked
            if result.get("verdict") == "inconclusive":
                why = "the analysis was inconclusive (counted as failed)"
            else:
                why = "the analysis failed"
            return self._roll_back(context, landing, f"{why}: {result['reason']}", step="analysis", analysis=result)
        if dry_run:  # logs what it would have done
            then = "the revision goes on (bake, land)"
            result = dry_run_result(
                result, rollback=self.rollback_on_failure, log=self.log, subject=f"revision {revision_id}", then=then
            )
        else:
            self.log.info("The analysis passed revision %s: %s", revision_id, result["reason"] or "every check passed")
        context["ti"].xcom_push(key=XCOM_ANALYSIS, value=result)
        current = self._read(deployment_id)
        left = bake_verdict(current, revision_id) if revision_id else None
        if left is not None:
            return self._roll_back(context, landing, left, step="bake")
        return self._bake_and_land(context, current.model_dump(mode="json"), landing, dict(result))

    # ---- the bake
    def _bake_resumed(
        self,
        context: Context,
        event: dict[str, Any] | None,
        landing: dict[str, Any] | None,
        analysis: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The resume of the bake trigger (see ``execute_bake_complete``): landed, or rolled back when the
        revision left."""
        from airflow_provider.tasks.patch.verdict import checked_landing, recorded_landing
        from airflow_provider.tasks.waiting import resumed_value

        if not isinstance(event, dict):
            raise AirflowException(f"unexpected event from DeploymentBakeTrigger: {event!r}")
        landing = checked_landing(
            resumed_value("landing", landing, event)
            or recorded_landing(context.get("task_state_store"), event, self.log),
            event,
            "execute_bake_complete",
        )
        self._judging_started(context, landing)
        message = str(event.get("message", ""))
        if event.get("status") == "baked":
            self.log.info("%s", message)
            return self._landed(context, event.get("deployment") or {}, resumed_value("analysis", analysis, event))
        if event.get("status") == "left":
            return self._roll_back(context, landing, message, step="bake")
        raise AirflowException(f"could not watch the bake: {message}")
