"""A gate between tasks: judge the revisions deployments serve now by an analysis
(:class:`DeploymentAnalysisOperator`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.base import _DeploymentServiceOperator
from airflow_provider.tasks.base import check_rendered_value, deployment_by_name

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import Analysis, AnalysisResult, AnalysisTarget
    from airflow_provider.models import Deployment

# What only a running task needs (the measuring side, the preflight, the record) is imported in the methods that
# use it, so a DAG file that imports the operators does not pay for it (bench/import_cost.py). The analysis
# definitions themselves come with the ``Analysis`` the DAG file builds.

__all__ = ["NO_RESULT", "XCOM_ANALYSIS", "DeploymentAnalysisOperator"]

XCOM_ANALYSIS = "analysis"
"""The XCom key of the analysis results (``{deployment name: AnalysisResult}`` for this operator)."""
NO_RESULT = "no analysis result came back for it: not judged, so treated as inconclusive"
"""The reason of a deployment the analysis was to judge and that got no result (never passed unjudged)."""


def _as_list(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return list(value)
    raise AirflowFailException(f"{field} must be a string or a list of strings, got {type(value).__name__}")


class DeploymentAnalysisOperator(_DeploymentServiceOperator):
    """Judge the revision each deployment serves now by an analysis; fail unless every verdict is "passed".

    The active revision of each deployment is measured ``analysis.count`` times, every
    ``analysis.interval_seconds`` (in the triggerer when ``deferrable`` and the analysis has no
    :class:`~airflow_provider.analysis.CallableCheck`, else on the worker). Returns and pushes (XCom key
    ``"analysis"``) ``{deployment name: AnalysisResult}``; a failed or inconclusive verdict fails the task
    (``AirflowFailException``, no retry) naming the deployments and their failing checks, unless the analysis is a
    dry run (``Analysis(dry_run=True)``: each result then carries ``dry_run`` and, when it did not pass,
    ``would_have: "would have failed the task"``, logged as a warning; the task succeeds). A deployment the
    analysis returned no result for is inconclusive (never passed unjudged).

    :param analysis: the :class:`~airflow_provider.analysis.Analysis`; its ``count`` must be set (this task
        has no bake window). Its preflight (on by default) first measures every check once over its
        ``baseline_window_seconds`` up to now: a check that cannot be measured fails the task before any round,
        naming the source, its connection and the rendered project or query; the measurements are each
        result's ``baseline``.
    :param deployment_ids: deployment id(s) to analyse. Templated.
    :param deployment_names: deployment name(s) to analyse (exact names), instead of ids. Templated.
    :param live_since: when the revisions went live (tracing statistics count from then; a datetime or an
        ISO 8601 string, UTC when naive), moved to when each active revision did go live when that is later (see
        :func:`~airflow_provider.tasks.analysis.live_since`: the window never holds an earlier revision's runs);
        ``None``: when the task starts. Templated.
    :param deferrable: measure in the triggerer instead of a worker slot.
    :param kwargs: the connection arguments of
        :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask` and ``BaseOperator``'s.
    """

    template_fields: Sequence[str] = ("deployment_ids", "deployment_names", "live_since", "deployment_service_conn_id")
    ui_color = "#e8daef"

    def __init__(
        self,
        *,
        analysis: Analysis,
        deployment_ids: str | list[str] | None = None,
        deployment_names: str | list[str] | None = None,
        live_since: datetime | str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        from airflow_provider.analysis import Analysis  # loaded already: the caller built one

        super().__init__(**kwargs)
        if not isinstance(analysis, Analysis):
            raise TypeError(f"analysis must be an airflow_provider.analysis.Analysis, got {type(analysis).__name__}")
        analysis.with_count_for(None)  # ValueError naming analysis.count when it is None
        if (deployment_ids is None) == (deployment_names is None):
            raise ValueError("give exactly one of deployment_ids and deployment_names")
        self.analysis = analysis
        self.deployment_ids = deployment_ids
        self.deployment_names = deployment_names
        self.live_since = live_since
        self.deferrable = deferrable

    # ------------------------------------------------------------------------------------------ run
    def _run(self, context: Context) -> dict[str, AnalysisResult]:
        from airflow_provider.tasks.analysis import analyse_on_worker, defer_analysis
        from airflow_provider.tasks.preflight import baselines_json, preflight_on_worker
        from airflow_provider.tasks.publishing import trigger_judging
        from airflow_provider.tasks.recording import judging_entry, record_entries, round_recorder

        deployments = self._deployments()
        since = self._live_since()
        targets = [self._target(deployment, since) for deployment in deployments]
        baselines = preflight_on_worker(self, self.analysis, deployments, unchanged="no round was measured")
        targets = [
            target.model_copy(update={"baseline": baselines_json(baselines, target.deployment_id)})
            for target in targets
        ]
        names = {deployment.id: deployment.name for deployment in deployments}
        revisions = {target.deployment_id: target.revision_id for target in targets}
        self.log.info(
            "Analysing %d deployment(s) (%s): %d check(s), %d round(s) every %gs",
            len(targets),
            ", ".join(sorted(names.values())),
            len(self.analysis.checks),
            self.analysis.rounds(),
            self.analysis.interval_seconds,
        )
        record_entries(context, self.log, [judging_entry(target) for target in targets])
        if self.deferrable and not self.analysis.runs_on_worker:
            defer_analysis(
                self,
                self.analysis,
                targets,
                method_name="execute_complete",
                carry={"names": names, "revisions": revisions},
                judging=trigger_judging(context),  # the rounds shown as measured, while deferred
            )
        if self.deferrable:
            self.log.info("The analysis holds a CallableCheck: measured on the worker, not in the triggerer")
        recorder = round_recorder(context, self.log, targets, steps=["analysis"])  # "analysing", as it goes
        results = analyse_on_worker(self, self.analysis, targets, on_round=recorder)
        return self._judged(context, results, names, revisions)

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, carry: dict[str, Any] | None = None
    ) -> dict[str, AnalysisResult]:
        """Resume after the trigger's event: push and return the results, or fail naming what did not pass."""
        from airflow_provider.tasks.analysis import analysis_event_results

        try:
            results = analysis_event_results(event, self.log)
            carried = carry if carry is not None else (event or {}).get("carry")
            names = carried.get("names") if isinstance(carried, dict) else None
            if not isinstance(names, dict):
                names = {}
            revisions = carried.get("revisions") if isinstance(carried, dict) else None
            return self._judged(context, results, names, revisions if isinstance(revisions, dict) else {})
        finally:
            self.close_hook()

    def _judged(
        self,
        context: Context,
        results: dict[str, AnalysisResult],
        names: dict[str, str],
        revisions: dict[str, str],
    ) -> dict[str, AnalysisResult]:
        """Push and return the results by deployment name; fail naming every deployment whose verdict is not
        "passed", each deployment of ``names`` without a result counted inconclusive."""
        from airflow_provider.tasks.analysis import analysis_failure_reason
        from airflow_provider.tasks.dry_run import dry_run_result
        from airflow_provider.tasks.recording import record_entries, verdict_entry

        judged = dict(results)
        for deployment_id in names:
            if deployment_id not in judged:
                judged[deployment_id] = {
                    "verdict": "inconclusive",
                    "failing_check": None,
                    "reason": NO_RESULT,
                    "revision_id": str(revisions.get(deployment_id) or ""),
                    "measurements": [],
                }
        if self.analysis.dry_run:  # never fails the task: each result says what the gate would have done
            judged = {
                deployment_id: dry_run_result(
                    result,
                    rollback=False,
                    log=self.log,
                    subject=f"{names.get(deployment_id, deployment_id)!r} (revision {result.get('revision_id')})",
                )
                for deployment_id, result in judged.items()
            }
        by_name = {names.get(deployment_id, deployment_id): result for deployment_id, result in judged.items()}
        record_entries(
            context, self.log, [verdict_entry(deployment_id, result) for deployment_id, result in judged.items()]
        )
        context["ti"].xcom_push(key=XCOM_ANALYSIS, value=by_name)
        failures = []
        for name, result in sorted(by_name.items()):
            reason = analysis_failure_reason(result)
            if reason is not None and not self.analysis.dry_run:
                failures.append(f"{name!r} ({result['failing_check']}): {reason}")
        if failures:
            raise AirflowFailException(
                f"the analysis did not pass for {len(failures)} of {len(by_name)} deployment(s): " + "; ".join(failures)
            )
        if not self.analysis.dry_run:
            self.log.info("The analysis passed for %s", ", ".join(repr(name) for name in sorted(by_name)))
        return by_name

    # --------------------------------------------------------------------------------- arguments
    def _deployments(self) -> list[Deployment]:
        from airflow_provider.models import canonical_uuid

        if self.deployment_names is not None:
            names = _as_list(self.deployment_names, "deployment_names")
            for name in names:
                check_rendered_value("deployment_names", name, segments=False)
            if not names:
                raise AirflowFailException("deployment_names is empty: name at least one deployment")
            return [deployment_by_name(self.hook, name) for name in dict.fromkeys(names)]
        raw = _as_list(self.deployment_ids, "deployment_ids")
        if not raw:
            raise AirflowFailException("deployment_ids is empty: give at least one deployment id")
        try:
            ids = list(dict.fromkeys(canonical_uuid(value, "deployment_ids") for value in raw))
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        found: dict[str, Deployment] = {}
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            for deployment in self.hook.list_deployments(deployment_ids=chunk, limit=len(chunk)).resources:
                found[deployment.id] = deployment
        missing = [deployment_id for deployment_id in ids if deployment_id not in found]
        if missing:
            raise AirflowFailException(f"deployment_ids: no deployment with id {', '.join(missing)}")
        return [found[deployment_id] for deployment_id in ids]

    def _live_since(self) -> datetime:
        value = self.live_since
        if value is None or value == "":
            return datetime.now(timezone.utc)
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise AirflowFailException(f"live_since must be an ISO 8601 time, got {value!r}") from None
        if not isinstance(value, datetime):
            raise AirflowFailException(
                f"live_since must be a datetime or an ISO 8601 string, got {type(value).__name__}"
            )
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)

    def _target(self, deployment: Deployment, since: datetime) -> AnalysisTarget:
        """The active revision to judge; its window from ``since``, or from when it went live when later (only
        asked when ``live_since`` was given: the task's start is after it anyway)."""
        from airflow_provider.analysis import AnalysisTarget
        from airflow_provider.models import DeploymentStatus
        from airflow_provider.tasks.analysis import live_since

        revision_id = deployment.active_revision_id
        if revision_id is None or deployment.status != DeploymentStatus.READY:
            raise AirflowFailException(
                f"deployment {deployment.name!r} serves no revision to analyse (status {deployment.status.value}, "
                f"active revision {deployment.active_revision_id})"
            )
        if self.live_since not in (None, ""):
            since = max(since, live_since(self.hook, deployment, revision_id, log=self.log, seen_live_at=since))
        return AnalysisTarget(
            deployment_id=deployment.id,
            name=deployment.name,
            revision_id=revision_id,
            live_since=since,
            custom_url=deployment.source_config.custom_url,
        )
