"""Roll one change out to a fleet of deployments progressively: a canary, then waves, within a failure
budget. The plan is :mod:`airflow_provider.decisions.fleet_progress` (pure), the machinery
:mod:`airflow_provider.tasks.fleet` (one module per concern; the wave loop is
:mod:`~airflow_provider.tasks.fleet.waves`), and a deferred wave waits in
:class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.decisions import fleet_strategy
from airflow_provider.operators.base import XCOM_FLEET_SUMMARY, _RolloutWaitingOperator
from airflow_provider.tasks.base import non_negative_seconds
from airflow_provider.tasks.deferral import DEFERRAL_TIMEOUT, deferral_timed_out
from airflow_provider.tasks.execution_timeout import check_judging_task
from airflow_provider.tasks.fleet.arguments import (
    check_arguments,
    check_budget_fits,
    check_canary_baseline,
    known_fleet_size,
)
from airflow_provider.tasks.fleet.change import PATCH_FIELDS
from airflow_provider.tasks.inconclusive import DEFAULT_RESPONSE_TIMEOUT, checked_on_inconclusive
from airflow_provider.tasks.notify import RolloutNotifying, checked_notify

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import Analysis, Measurement
    from airflow_provider.analysis.guard import Guard
    from airflow_provider.decisions import fleet_progress
    from airflow_provider.models import Deployment, PatchDeploymentRequest
    from airflow_provider.tasks.fleet.progress import ProgressStore
    from airflow_provider.tasks.fleet.waves import FleetRun
    from airflow_provider.tasks.request import SecretValue

__all__ = [
    "PATCH_FIELDS",
    "XCOM_FLEET_ANALYSIS",
    "FleetRolloutOperator",
]

XCOM_FLEET_ANALYSIS = "fleet_analysis"
"""XCom key of ``{deployment name: AnalysisResult}`` of every deployment the analysis judged."""


class FleetRolloutOperator(RolloutNotifying, _RolloutWaitingOperator):
    """Roll one change out to a fleet of deployments progressively: a canary, then waves, within a
    failure budget.

    The targets are resolved when the task runs and logged as a plan (waves and their deployments)
    before anything is patched. Each wave is patched, then watched until every rollout in it is decided
    (its revision live, ``READY`` and active, for ``bake_seconds``; or failed: build or deploy failed,
    superseded, deleted, timed out), then ``verify`` runs on each deployment that landed. Failures count
    against ``max_failures``; when more fail, the rollout stops, later waves are never patched, and the
    task fails naming the deployments that failed. Within the budget the task succeeds and its table
    shows the failures. The canary is stricter: when any canary deployment fails, the rollout stops
    there whatever ``max_failures`` allows (as Argo Rollouts and Flagger abort on a failed canary); the
    budget applies to the waves after it.

    Returns the result table: one row per deployment, ``{"name", "deployment_id", "wave", "from_revision",
    "to_revision", "outcome", "seconds", "message", "analysis"}`` (``analysis``: ``{"verdict", "failing_check",
    "reason"}``, with ``would_have`` in a dry run, or ``None`` when not analysed) with ``outcome`` one of
    ``landed``, ``unchanged``, ``failed``, ``rolled_back`` (failed, then restored: its previous build serves with
    its previous ``resource_spec``), ``rolled_back_with_wave`` (landed, then restored because its wave stopped the
    rollout: not a failure), ``rolled_back_partially`` / ``rolled_back_with_wave_partially`` (the same, but part of
    the change stays: the message says ``rolled back ... except: ...``), ``rolled_back_reason_unknown`` (a retry
    without a record found it rolled back by an earlier try that left no record of why), ``not_patched`` (also
    pushed as the return value when the task fails, so a summary task with ``trigger_rule="all_done"`` can read it);
    pushes the counts per outcome, the deployments that failed and the budget under ``fleet_summary``. ``failed``,
    ``rolled_back`` and ``rolled_back_partially`` count against ``max_failures``, and (conservatively, named apart)
    ``rolled_back_reason_unknown``. When it succeeds, the task emits a ``rolled_out`` asset event per deployment it
    landed and a ``rolled_back`` (or ``rolled_back_partially``, with ``not_restored``) one per deployment it rolled
    back.

    With ``analysis``, each wave's landed deployments are then judged together by what the application does
    (error rate, latency, health, a metric): a failed or inconclusive analysis fails the deployment, exactly
    as a failed ``verify``; ``fleet_summary`` then also counts ``analysis_failures`` and
    ``analysis_verdicts``, and ``fleet_analysis`` holds each deployment's ``AnalysisResult``.

    Deferrable: between and during waves the task waits in the triggerer, one
    :class:`~airflow_provider.triggers.fleet.FleetWaveTrigger` per wave on the shared
    batched poller; ``patch_for`` and ``verify`` run on the worker when it resumes. A retry resumes from
    ``task_state_store``: deployments that landed are skipped, revisions the first try created are
    reattached to, and no deployment is patched twice.

    The change is the patch operator's arguments (same rules, same secret handling: ``secrets`` are not
    templated and never reach logs, XCom or trigger arguments), or ``patch_for``, a callable given each
    target ``Deployment`` that returns those arguments for it (sources differ: a git ref for codehost, an
    image for docker, a tarball for uploaded source); the fixed arguments are the defaults for what it
    leaves out. What is sent to each deployment is completed against it as the patch operator completes its
    patch (``resource_spec_mode``, ``check_source_rules``): a partial ``source_config.resource_spec`` keeps the
    deployment's other fields (production replaces the whole ``resource_spec``), and a patch production
    would refuse for a deployment fails that deployment alone, nothing sent.

    :param deployment_ids: the targets by id (list, or comma-separated string). Templated.
    :param deployment_names: the targets by exact name (list, or comma-separated string). Templated.
    :param filters: the targets by list-endpoint filters (``tag_value_ids``, ``deployment_type``,
        ``name_contains``, ``status``, ``image_version``, ``remote_reconciled``, ``deployment_ids``),
        ordered by name. Templated. Give exactly one of ``deployment_ids``, ``deployment_names``,
        ``filters``.
    :param image_uri: the image to roll out. Templated.
    :param repo_ref: the git ref to roll out. Templated.
    :param source_revision_config: settings that create a new revision. Templated.
    :param source_config: settings that change without a new revision. Templated.
    :param revision_source: ``codehost``, ``internal_docker`` or ``internal_source``. Templated.
    :param secrets: secret values, as for :class:`PatchDeploymentOperator`. Not templated.
    :param secret_references: Kubernetes secret references (``external_docker`` only).
    :param patch_for: callable ``Deployment -> {argument: value}`` giving each deployment's change (keys
        among the arguments above). Runs on the worker.
    :param resource_spec_mode: ``"merge"`` (default): a ``source_config.resource_spec`` that names only some
        fields is completed, per deployment, from that deployment's current one and sent whole (a field set
        to ``None`` is removed; a kept ``*_limit`` below the new request is left out, so the service sets it to
        twice the request), as :class:`~airflow_provider.operators.patch.PatchDeploymentOperator` does.
        ``"replace"``: sent as given (production then drops every field not given).
    :param check_source_rules: before sending, refuse for a deployment what production refuses for it
        (fields that cannot change after creation, fields of another source, ``build_on_push`` with a tag
        ref): that deployment fails, naming the field and the rule, and the others go on. ``False`` skips
        these local checks (the server still decides).
    :param canary: how many of the first targets, or which names, to roll out and verify first.
    :param wave_size: deployments per wave after the canary: a count, or a percentage of the fleet
        (``"25%"``). Default 100.
    :param max_failures: the failure budget: a count, or a fraction of the fleet (``0.1``). Default 0. A
        failed canary stops the rollout whatever the budget; its failures still count against it.
    :param pause_seconds: seconds to wait between two waves (in the triggerer when deferrable).
    :param max_parallel_patches: most PATCH requests of a wave in flight at once (a whole number >= 1;
        default 10; 1 sends them one after the other). Each patch is recorded as soon as it is answered,
        and a retry never patches a deployment twice whatever the value; the hook's client holds 20
        connections, so more than 20 only queue.
    :param verify: callable given the live ``Deployment`` of each deployment that landed; raising, or
        returning a false value other than ``None`` (``False``, ``0``, ``""``), fails that deployment;
        returning ``None`` (an assert-style check) or a true value passes. Runs on the worker.
    :param bake_seconds: how long a new revision must stay live (``READY`` and active) before it counts
        as landed.
    :param rollback_on_failure: roll back (as :class:`RollbackDeploymentOperator` does: the previous build
        and the whole previous ``resource_spec``, recorded before the patch, in one revision; secrets not
        re-sent, and named in the row's message) every deployment whose new revision went live and then
        failed ``verify`` or the bake, or was still rolling out when ``timeout`` ran out (it may yet go live:
        the rollback queues behind it on the service and replaces it once it is done), and, when the wave
        stops the rollout (it exceeds the budget, or it is the canary and a canary deployment failed), every
        deployment of that wave that landed; a restored one is ``rolled_back`` in the table
        (``rolled_back_with_wave`` for one that had landed; ``..._partially`` when part of the change stays).
    :param analysis: an :class:`~airflow_provider.analysis.Analysis` judging each wave's landed deployments by
        what the application does (their tracing projects, an HTTP check, a Prometheus query, a callable), all
        of a wave together, after ``verify`` and before the wave is counted and the next wave started (so
        before ``pause_seconds``): one :class:`~airflow_provider.triggers.analysis.DeploymentAnalysisTrigger`
        per wave when deferrable (on the worker when the analysis holds a ``CallableCheck``), sharing its
        requests (one vector query per ``MetricQueryCheck`` and round for the whole wave). A ``failed`` or
        ``inconclusive`` verdict fails the deployment as a failed ``verify`` does: counted against
        ``max_failures`` (a canary failing it stops the rollout) and, with ``rollback_on_failure``, rolled back
        at once, at the end of the round that reached it (recorded first), while the rest of the wave is
        analysed on with the rounds it had (a new trigger goes on from where the analysis stood). Once the
        wave stops the rollout (the budget spent, a failed canary), the rest of it is not analysed further and
        is rolled back with it at once (kept without ``rollback_on_failure``; its message says it was not
        judged). ``count=None`` makes the analysis's
        rounds fill ``bake_seconds`` (each round checks that the revision still serves: the analysis is the
        bake, and the watch does not bake first); with a ``count`` the wave bakes, then is analysed. Each
        row's ``analysis`` column gives the verdict, the failing check and the reason; ``fleet_analysis``
        holds ``{name: AnalysisResult}`` (at most :data:`~airflow_provider.decisions.fleet_progress.ROW_MEASUREMENTS`
        measurements each). Checked when the DAG is parsed (``count=None`` without ``bake_seconds`` names
        ``analysis.count``), and its connections when the task starts, before anything is patched. Then its
        preflight (``Analysis(preflight=True)``, the default) measures every check once on the revision each
        deployment of the fleet serves (all of them, not only the canary's: each is judged against its own),
        over ``baseline_window_seconds`` up to the start of the rollout: a check that cannot be measured refuses
        the rollout with nothing patched (naming the source URL, the connection id and the rendered project or
        query), and what it measured is each deployment's baseline (``"<= baseline * 1.5 + 0.01"``, a
        ``RateTest``), kept in its row. With ``Analysis(dry_run=True)`` every verdict is reached as usual, but one
        that is not "passed" neither fails the deployment nor rolls it back: its row lands, its message, its
        ``analysis`` and ``fleet_summary["would_have"]`` say "would have rolled back", and the fleet goes on.
    :param canary_baseline: what the canary's checks on the baseline compare with: ``"previous_revision"``
        (default: the revision each canary deployment served before, measured by the preflight) or
        ``"control_group"`` (Kayenta's canary versus baseline: its tracing checks of ``error_rate`` and
        ``feedback.<key>`` judged, each round, against the pooled statistics of up to 20 deployments not rolled
        out yet, over the canary's own window; see :mod:`airflow_provider.analysis.statistics.control`). Needs a canary
        and such a check.
    :param on_inconclusive: what an inconclusive verdict does: ``"fail"`` (default: the deployment fails, as on a
        failed verdict) or ``"ask"``: once the wave's analysis is over, its inconclusive deployments (still serving
        their new revisions) are put to a person through Airflow's human-in-the-loop, in one question showing the
        wave, the deployments and the measurements: "Promote" (they land; the rollout goes on with the next wave),
        "Roll back" (they fail, as on a failed verdict: rolled back with ``rollback_on_failure``, counted against the
        budget; a canary's stops the rollout) or "Analyse another interval"; no answer within ``response_timeout``
        rolls back. The question and the answer are recorded in the wave's progress before they are acted on: a
        retry goes on from the answer (see :mod:`~airflow_provider.tasks.fleet.asking`). Needs ``analysis``.
    :param response_timeout: how long a question waits for an answer (a ``timedelta`` or seconds; default 1 hour).
    :param notify: ``{event: notifier or [notifiers]}``, Airflow ``BaseNotifier`` s told, once the rollout is
        decided, of each deployment it landed (``rolled_out``), whose analysis failed it (``analysis_failed``) or
        that it rolled back (``rolled_back``), of a rollout that stopped early (``fleet_aborted``), of an
        analysis refused before any patch (``preflight_failed``) and, as it asks, of each deployment a person is
        asked about (``inconclusive``); see :mod:`airflow_provider.tasks.notify`. Each event is sent at most once
        across the task's tries (:mod:`~airflow_provider.tasks.fleet.notify`). A notifier that fails is logged,
        never fails the task.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks at a wave.
    :param timeout: seconds each wave's revisions have to go live (then one final look; late ones fail). It covers
        reaching live only, not the bake, the analysis, the pauses or the whole task (Airflow's
        ``execution_timeout`` bounds the task; one shorter than a wave's ``timeout``, bake and analysis is refused).
    :param plan_only: resolve the targets, check every argument and each deployment's patch (the PATCH rules), run
        the analysis's preflight, then return and log the plan (the waves, each deployment from -> to, what the
        gate measures now) and stop: no write request is sent, nothing is recorded
        (see :mod:`airflow_provider.tasks.plan_only`).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls for a
        rollout that does not change.
    :param guard: a :class:`~airflow_provider.analysis.guard.Guard`: once the rollout succeeded, each deployment
        it landed is handed to the guard (per deployment, with the baseline its preflight measured), as with
        ``PatchDeploymentOperator(guard=...)``; see ``docs/guides/guard.md``.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "deployment_ids",
        "deployment_names",
        "filters",
        "image_uri",
        "repo_ref",
        "source_revision_config",
        "source_config",
        "revision_source",
        "deployment_service_conn_id",
    )
    ui_color = "#d5f5e3"
    _running: FleetRun | None = None
    """The run under way on this worker, which ``on_kill`` rolls back (``None``: none)."""

    def __init__(
        self,
        *,
        deployment_ids: list[str] | str | None = None,
        deployment_names: list[str] | str | None = None,
        filters: dict[str, Any] | str | None = None,
        image_uri: str | None = None,
        repo_ref: str | None = None,
        source_revision_config: dict[str, Any] | None = None,
        source_config: dict[str, Any] | None = None,
        revision_source: str | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        secret_references: list[dict[str, str]] | None = None,
        patch_for: Callable[[Deployment], Mapping[str, Any]] | None = None,
        canary: int | list[str] | str | None = None,
        wave_size: int | str = 100,
        max_failures: int | float = 0,
        pause_seconds: float = 0,
        max_parallel_patches: int = 10,
        verify: Callable[[Deployment], Any] | None = None,
        bake_seconds: float = 0,
        rollback_on_failure: bool = False,
        resource_spec_mode: str = "merge",
        check_source_rules: bool = True,
        analysis: Analysis | None = None,
        canary_baseline: str = "previous_revision",
        notify: Mapping[str, Any] | None = None,
        on_inconclusive: str = "fail",
        response_timeout: timedelta | float = DEFAULT_RESPONSE_TIMEOUT,
        plan_only: bool = False,
        guard: Guard | None = None,
        **kwargs: Any,
    ) -> None:
        from airflow_provider.tasks.guarding import checked_guard

        super().__init__(**kwargs)
        check_arguments(
            targets={"deployment_ids": deployment_ids, "deployment_names": deployment_names, "filters": filters},
            change={
                name: value
                for name, value in (
                    ("image_uri", image_uri),
                    ("repo_ref", repo_ref),
                    ("source_revision_config", source_revision_config),
                    ("source_config", source_config),
                    ("revision_source", revision_source),
                    ("secrets", secrets),
                    ("secret_references", secret_references),
                )
                if value is not None
            },
            patch_for=patch_for,
            verify=verify,
            analysis=analysis,
            bake_seconds=bake_seconds,
            resource_spec_mode=resource_spec_mode,
        )
        check_canary_baseline(canary_baseline, analysis, canary)
        self.deployment_ids = deployment_ids
        self.deployment_names = deployment_names
        self.filters = filters
        self.image_uri = image_uri
        self.repo_ref = repo_ref
        self.source_revision_config = source_revision_config
        self.source_config = source_config
        self.revision_source = revision_source
        self.secrets = secrets
        self.secret_references = secret_references
        self.patch_for = patch_for
        self.canary = fleet_strategy.check_canary(canary)
        self.wave_size = fleet_strategy.check_wave_size(wave_size)
        self.max_failures = fleet_strategy.check_max_failures(max_failures)
        size = known_fleet_size(
            {"deployment_ids": deployment_ids, "deployment_names": deployment_names, "filters": filters}
        )
        if size is not None:  # known now: refused when the DAG is parsed; else once the targets are resolved
            check_budget_fits(self.max_failures, size)
            fleet_strategy.check_canary_fits(self.canary, size)
        self.pause_seconds = non_negative_seconds(pause_seconds, "pause_seconds")
        self.max_parallel_patches = fleet_strategy.check_max_parallel_patches(max_parallel_patches)
        self.verify = verify
        self.bake_seconds = non_negative_seconds(bake_seconds, "bake_seconds")
        self.rollback_on_failure = bool(rollback_on_failure)
        self.resource_spec_mode = resource_spec_mode
        self.check_source_rules = bool(check_source_rules)
        self.analysis = analysis
        self.canary_baseline = canary_baseline
        self.plan_only = bool(plan_only)
        self.notify = checked_notify(notify)
        self.guard = checked_guard(guard, analysis)
        self.on_inconclusive, self.response_timeout = checked_on_inconclusive(on_inconclusive, response_timeout)
        if self.on_inconclusive == "ask" and analysis is None:
            raise ValueError("on_inconclusive='ask' needs an analysis (only an analysis can be inconclusive)")
        check_judging_task(self, analysis, what="one wave (the canary)")  # a shorter execution_timeout refused

    # ---- the change
    def _change(self) -> tuple[Callable[[Deployment], PatchDeploymentRequest], str]:
        """The patch for each deployment, and a digest of the whole request (no secret values); the secrets
        resolved (scrubbed from the rows and build logs)."""
        from airflow_provider.tasks.fleet.change import fleet_change

        change = fleet_change(
            {name: getattr(self, name) for name in PATCH_FIELDS},
            self.patch_for,
            targets=[self.deployment_ids, self.deployment_names, self.filters],
            plan=[self.canary, self.wave_size, self.max_failures],
            completed=[self.resource_spec_mode, self.check_source_rules],
        )
        self._resolved_secrets = change.secrets
        return change.request_for, change.digest

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in getattr(self, "_resolved_secrets", None) or [])

    def _progress_store(self, context: Context) -> ProgressStore:
        from airflow_provider.tasks.fleet.progress import ProgressStore
        from airflow_provider.tasks.publishing import FleetJudging

        return ProgressStore(
            context.get("task_state_store"),
            self.log,
            secrets=self._secret_values(),
            judging=FleetJudging(context, self.log),  # the deployments' watchers: never announce a rejected one
        )

    def _fleet_run(
        self,
        context: Context,
        progress: fleet_progress.FleetProgress,
        progress_store: ProgressStore,
        request_for: Callable[[Deployment], PatchDeploymentRequest],
    ) -> FleetRun:
        from airflow_provider.tasks.fleet.waves import FleetRun

        return FleetRun(
            self,
            context,
            progress,
            progress_store,
            request_for,
            secrets=self._secret_values(),
            retries=self.retries,
        )

    # ---- execute
    def _run(self, context: Context) -> list[dict[str, Any]] | dict[str, Any]:
        """Plan (or resume the recorded plan), then roll out wave by wave."""
        from airflow_provider.tasks.analysis import check_analysis_sources, check_custom_urls
        from airflow_provider.tasks.fleet.abort import cleared_after_abort
        from airflow_provider.tasks.fleet.notify import NotifiedRecord
        from airflow_provider.tasks.fleet.plan import resolve_targets
        from airflow_provider.tasks.fleet.progress import new_progress
        from airflow_provider.tasks.fleet.result import log_plan
        from airflow_provider.tasks.fleet.waves import earlier_try_since
        from airflow_provider.tasks.plan_only import fleet_plan
        from airflow_provider.tasks.preflight import baselines_json, preflight_on_worker

        why = cleared_after_abort(context.get("task_state_store"), context["ti"].try_number, self.log)
        if why is not None:  # an abort ended an earlier try: this one is a clear, and sends nothing
            raise AirflowFailException(why)
        request_for, change = self._change()
        progress_store = self._progress_store(context)
        progress = None if self.plan_only else progress_store.load(change)  # a plan resumes nothing
        if progress is not None:
            self.log.info("Resuming the fleet rollout recorded by an earlier try: %s", progress.counts())
        else:
            targets = resolve_targets(
                self.hook,
                deployment_ids=self.deployment_ids,
                deployment_names=self.deployment_names,
                filters=self.filters,
            )
            baselines: dict[str, list[Measurement]] = {}
            if self.analysis is not None:  # an analysis that cannot run or never pass: fail before any patch
                # Only on a fresh start: a retry with saved progress goes on with what an earlier try started.
                unchanged = (
                    "nothing was patched"
                    if earlier_try_since(context) is None
                    else "this try patched nothing (an earlier try's patches, if any, stay as they are)"
                )
                try:
                    check_analysis_sources(self.hook, self.analysis, unchanged=unchanged)
                    check_custom_urls(self.analysis, targets, unchanged=unchanged, request_for=request_for)
                    baselines = preflight_on_worker(self, self.analysis, targets, unchanged=unchanged)
                except Exception as err:
                    if self.plan_only:  # a plan tells no one
                        raise
                    NotifiedRecord(context.get("task_state_store"), self.log).notify_once(
                        self,
                        context,
                        "preflight_failed",
                        "preflight_failed",
                        deployment_id=None,
                        revision_id=None,
                        reason=str(err),
                    )
                    raise
            try:
                check_budget_fits(self.max_failures, len(targets))  # before any PATCH
                plan = fleet_strategy.plan_waves(
                    [(item.id, item.name) for item in targets], self.canary, self.wave_size
                )
            except ValueError as err:
                raise AirflowFailException(str(err)) from None
            if self.plan_only:  # checked as a rollout would be; nothing sent, nothing recorded
                return fleet_plan(self, plan, targets, request_for, baselines)
            allowed = fleet_strategy.failure_allowance(self.max_failures, len(targets))
            progress = new_progress(plan, {item.id: item for item in targets}, allowed, change)
            for row in progress.rows:
                row.baseline = baselines_json(baselines, row.deployment_id)
            log_plan(progress, self.log)
            progress_store.save(progress)
        return self._advance(context, progress, progress_store, request_for)

    def execute_complete(  # type: ignore[override]
        self, context: Context, event: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Resume after a wave (or a pause) in the triggerer: record the outcomes, go on with the rollout.

        Everything a resume needs comes from the trigger's event and the progress (``task_state_store``, or
        the event's ``carry`` when the task has no store or its last save failed), never from the ``kwargs``
        given to ``defer()`` (``dag.test()`` in Airflow 3.3 drops them). A resume that cannot find the wave
        the event reports, in the phase it reports on, fails (a retry resumes from the deployments) instead
        of going on from a progress that is not the one that deferred.
        """
        from airflow_provider.tasks.fleet.progress import resumed_progress, resumed_wave
        from airflow_provider.tasks.fleet.rollback import apply_rollbacks
        from airflow_provider.tasks.fleet.watching import in_flight

        try:
            if not isinstance(event, dict) or event.get("status") not in ("done", "paused", "error"):
                raise AirflowException(f"unexpected event from FleetWaveTrigger: {event!r}")
            request_for, change = self._change()
            progress_store = self._progress_store(context)
            progress = resumed_progress(progress_store, change, event)
            if event["status"] == "error":
                raise AirflowException(str(event.get("message")))  # a retry resumes from the progress
            index, wave = resumed_wave(progress, event)
            if event["status"] == "done" and wave.phase == "patched":
                self._fleet_run(context, progress, progress_store, request_for).record_outcomes(
                    wave, event.get("outcomes") or {}
                )
                if not in_flight(wave):
                    wave.phase = "watched"  # else the rest is watched again (the event left some undecided)
                progress_store.save(progress, index)
            elif event["status"] == "done" and wave.phase == "rolling_back":
                apply_rollbacks(self.hook, wave, event.get("outcomes") or {}, self.log)
                progress_store.save(progress, index)
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Resume as Airflow asks. A wave's analysis whose deferral Airflow's timeout ended (the triggerer down, or
        restarted too late) could not be measured: a retry analyses the wave's deployments not judged yet again,
        the last try counts them inconclusive and rolls them back (see
        :meth:`~airflow_provider.tasks.fleet.analysis.WaveAnalysis.not_measured`), from the progress in
        ``task_state_store`` (without one, the try fails as Airflow says). A task the Rollouts view woke for an abort
        goes on from its progress, the abort taken at once (see :meth:`resume_aborted`)."""
        from airflow_provider.tasks.fleet.abort import is_abort_event

        if is_abort_event((next_kwargs or {}).get("event")):
            return self.resume_aborted(context, dict(next_kwargs or {}))
        if deferral_timed_out(next_method, next_kwargs):
            request_for, change = self._change()
            store = self._progress_store(context)
            progress = store.load(change)
            index = progress.current() if progress is not None else None
            if progress is not None and index is not None and progress.waves[index].phase == "analysing":
                try:
                    run = self._fleet_run(context, progress, store, request_for)
                    run.wave_analysis(index).not_measured(DEFERRAL_TIMEOUT)
                    store.save(progress, index)
                    return self._advance(context, progress, store, request_for)
                finally:
                    self.close_hook()
        return super().resume_execution(next_method, next_kwargs, context)

    def resume_aborted(self, context: Context, next_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """Resume after the Rollouts view woke the task for an abort
        (:func:`~airflow_provider.tasks.fleet.abort.abort_event`): whatever it waited for (a pause, the watch of a
        wave, its analysis, a question) is over; the rollout goes on from its progress (the trigger's or the
        question's ``carry`` when the last save failed, else ``task_state_store``) and takes the abort at once.

        :param context: the task context.
        :param next_kwargs: the resume's kwargs (``event``: the view's, and the deferral's own).
        """
        from airflow_provider.tasks.fleet.abort import carried_progress
        from airflow_provider.tasks.fleet.progress import resumed_progress

        try:
            request_for, change = self._change()
            progress_store = self._progress_store(context)
            progress = resumed_progress(progress_store, change, {"carry": carried_progress(next_kwargs)})
            self.log.warning(
                "Resumed by the Rollouts view: the rollout is aborted (request %s)", next_kwargs["event"]["request_id"]
            )
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def execute_complete_analysis(
        self, context: Context, event: dict[str, Any] | None = None, carry: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Resume after a step of a wave's analysis in the triggerer: record each verdict, act on it, and go on
        with the analysis (deferring again) or the rollout.

        As for :meth:`execute_complete`, everything comes from the event (its ``carry`` names the wave, and holds
        the progress when the task has no store or its last save failed; a ``partial`` event holds the rest of
        the analysis) and ``task_state_store``, never from ``defer()`` kwargs. An ``error`` event (the analysis
        could not run) fails the try while a retry is left (the retry analyses the wave's deployments not judged
        yet again, they still serve their new revisions); on the last try they are inconclusive, failed, and
        rolled back as a failed analysis is.

        :param context: the task context.
        :param event: the trigger's event.
        :param carry: the same ``carry`` as the event's, as the real triggerer passes the defer kwargs (the
            event's is used: ``dag.test()`` passes none).
        """
        from airflow_provider.tasks.fleet.progress import resumed_progress

        try:
            carry = event.get("carry") if isinstance(event, dict) and "carry" in event else carry
            if not isinstance(carry, dict) or not isinstance(carry.get("fleet_wave"), int):
                raise AirflowException(f"unexpected event from DeploymentAnalysisTrigger: {event!r}")
            request_for, change = self._change()
            progress_store = self._progress_store(context)
            if carry.get("change") != change:
                raise AirflowException(
                    "the DeploymentAnalysisTrigger event carries the analysis of another change than this task's: "
                    "not resuming"
                )
            progress = resumed_progress(progress_store, change, {"carry": carry.get("progress")})
            index = carry["fleet_wave"]
            if not 0 <= index < len(progress.waves) or progress.waves[index].phase != "analysing":
                shown = progress.waves[index].phase if 0 <= index < len(progress.waves) else "not in the plan"
                raise AirflowException(
                    f"the DeploymentAnalysisTrigger event reports the analysis of wave {index}, but the progress shows "
                    f"it {shown} (a save was lost): not resuming from it; a retry analyses the wave again"
                )
            run = self._fleet_run(context, progress, progress_store, request_for)
            run.wave_analysis(index).resume(event, method_name="execute_complete_analysis")
            progress_store.save(progress, index)
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def execute_fleet_inconclusive_answered(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        fleet_wave: int | None = None,
        question: int | None = None,
        carry: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Resume with the answer to a wave's inconclusive analysis (``on_inconclusive="ask"``): record it in the
        wave's progress with what it does to the rows (one write), then go on with the rollout, which acts on it.

        :param context: the task context.
        :param event: the answer (``HITLDetail.as_resume_event_payload()``) or the timeout.
        :param fleet_wave: the wave asked about (else the wave whose question is open).
        :param question: the question's number (an answer to another is not taken).
        :param carry: the progress, when the task has no store or its last save failed.
        """
        from airflow_provider.tasks.fleet.asking import take_answer
        from airflow_provider.tasks.fleet.progress import resumed_progress

        try:
            request_for, change = self._change()
            progress_store = self._progress_store(context)
            progress = resumed_progress(progress_store, change, {"carry": carry})
            take_answer(
                progress, fleet_wave, question, event, functools.partial(progress_store.save, progress), self.log
            )
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def _advance(
        self,
        context: Context,
        progress: fleet_progress.FleetProgress,
        progress_store: ProgressStore,
        request_for: Callable[[Deployment], PatchDeploymentRequest],
    ) -> list[dict[str, Any]]:
        """Run the waves from where the progress stands until done, stopped or deferred
        (:class:`~airflow_provider.tasks.fleet.waves.FleetRun`), then report."""
        run = self._running = self._fleet_run(context, progress, progress_store, request_for)  # what on_kill rolls back
        run.advance()
        self._running = None
        return self._finish(context, progress)

    def on_kill(self) -> None:
        """Airflow kills the task on the worker (``execution_timeout``, marked failed, its run stopped): give up the
        wave under way, stop the rollout and send the wave's rollbacks (:mod:`airflow_provider.tasks.fleet.killed`)."""
        from airflow_provider.hooks.deployment_service import DeploymentServiceHook
        from airflow_provider.tasks.execution_timeout import act_on_kill, kill_cause
        from airflow_provider.tasks.fleet.killed import kill_outcome

        run, self._running = self._running, None
        if run is None:
            return
        what = kill_cause(self.execution_timeout)

        def act() -> None:
            hook = DeploymentServiceHook(self.deployment_service_conn_id, **self.hook_overrides)
            try:
                self.log.warning("Killed (%s): %s", what, kill_outcome(run, hook, what))
            finally:
                hook.close()

        act_on_kill(act, what)

    def _finish(self, context: Context, progress: fleet_progress.FleetProgress) -> list[dict[str, Any]]:
        """Push the table and the summary (and the analysis results); fail naming what stopped the rollout, else
        emit the asset events and return the table."""
        from airflow_provider.decisions import fleet_progress
        from airflow_provider.tasks.fleet.abort import aborted, end_abort
        from airflow_provider.tasks.fleet.notify import notify_fleet_result
        from airflow_provider.tasks.fleet.progress import scrub_messages
        from airflow_provider.tasks.fleet.result import emit_events, report_result, stopped_failure, summary
        from airflow_provider.tasks.guarding import hand_fleet_to_guard

        scrub_messages(progress, self._secret_values())
        table = progress.table()
        self.log.info("Fleet rollout summary: %s\n%s", progress.counts(), fleet_progress.format_table(table))
        ti = context["ti"]
        if self.analysis is not None:
            ti.xcom_push(
                key=XCOM_FLEET_ANALYSIS, value={row.name: row.analysis for row in progress.rows if row.analysis}
            )
        ti.xcom_push(key=XCOM_FLEET_SUMMARY, value=summary(progress, analysed=self.analysis is not None))
        taken = aborted(context.get("task_state_store"))
        notify_fleet_result(self, context, progress, aborted_by=taken.request.requested_by if taken else None)
        if progress.stopped:
            ti.xcom_push(key="return_value", value=table)
            if taken is not None:  # carried out: a later try is a clear, which the abort ends at once
                end_abort(context.get("task_state_store"), taken, ti.try_number, self.log)
            raise stopped_failure(progress)
        report_result(progress, self.log)
        emit_events(context, self.hook, progress, outlets=self.outlets, log=self.log)
        if self.guard is not None:
            hand_fleet_to_guard(self, context, progress)
        return table
