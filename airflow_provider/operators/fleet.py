"""Roll one change out to a fleet of deployments progressively: a canary, then waves, within a failure
budget. The plan is :mod:`airflow_provider.fleet` (pure), the machinery :mod:`airflow_provider.tasks.fleet`,
and a deferred wave waits in :class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider import fleet
from airflow_provider.analysis import Analysis
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, PatchDeploymentRequest
from airflow_provider.operators.base import XCOM_FLEET_SUMMARY, _RolloutWaitingOperator
from airflow_provider.patch_rules import RESOURCE_SPEC_MODES
from airflow_provider.tasks import fleet as fleet_tasks
from airflow_provider.tasks.analysis import check_analysis_sources, check_custom_urls, no_retry_left
from airflow_provider.tasks.base import DEFERRAL_GRACE, non_negative_seconds
from airflow_provider.tasks.deferral import DEFERRAL_TIMEOUT, deferral_timed_out
from airflow_provider.tasks.events import emit_revision_event
from airflow_provider.tasks.fleet_analysis import WaveAnalysis
from airflow_provider.tasks.patch_request import SecretValue, build_patch_request, resolve_secrets

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "PATCH_FIELDS",
    "XCOM_FLEET_ANALYSIS",
    "FleetRolloutOperator",
]

XCOM_FLEET_ANALYSIS = "fleet_analysis"
"""XCom key of ``{deployment name: AnalysisResult}`` of every deployment the analysis judged."""

PATCH_FIELDS = (
    "revision_source",
    "source_config",
    "source_revision_config",
    "secrets",
    "secret_references",
    "image_uri",
    "repo_ref",
)
"""What a fleet's change (or its ``patch_for`` callable) may set: the patch operator's arguments."""


class FleetRolloutOperator(_RolloutWaitingOperator):
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

    Returns the result table: one row per deployment, ``{"name", "deployment_id", "wave",
    "from_revision", "to_revision", "outcome", "seconds", "message", "analysis"}`` (``analysis``:
    ``{"verdict", "failing_check", "reason"}``, or ``None`` when not analysed) with ``outcome`` one of
    ``landed``, ``unchanged``, ``failed``, ``rolled_back`` (failed, then restored: its previous build
    serves with its previous ``resource_spec``), ``rolled_back_with_wave`` (landed, then restored because
    its wave stopped the rollout: not a failure), ``rolled_back_partially`` /
    ``rolled_back_with_wave_partially`` (the same, but part of the change stays: the message says ``rolled
    back ... except: ...``), ``rolled_back_reason_unknown`` (a retry without a record found it rolled back by
    an earlier try that left no record of why), ``not_patched`` (also pushed as the return value when the
    task fails, so a summary task with ``trigger_rule="all_done"`` can read it); pushes the counts per
    outcome, the deployments that failed and the budget under ``fleet_summary``. ``failed``, ``rolled_back``
    and ``rolled_back_partially`` count against ``max_failures``, and (conservatively, named apart)
    ``rolled_back_reason_unknown``. When it succeeds, the task emits a ``rolled_out`` asset event per
    deployment it landed and a ``rolled_back`` (or ``rolled_back_partially``, with ``not_restored``) one per
    deployment it rolled back.

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
        holds ``{name: AnalysisResult}`` (at most :data:`~airflow_provider.fleet.ROW_MEASUREMENTS`
        measurements each). Checked when the DAG is parsed (``count=None`` without ``bake_seconds`` names
        ``analysis.count``), and its connections when the task starts, before anything is patched.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks at a wave.
    :param timeout: seconds each wave's revisions have to go live (then one final look; late ones fail).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls for a
        rollout that does not change.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if resource_spec_mode not in RESOURCE_SPEC_MODES:
            raise ValueError(f"resource_spec_mode must be 'merge' or 'replace', got {resource_spec_mode!r}")
        given = {"deployment_ids": deployment_ids, "deployment_names": deployment_names, "filters": filters}
        named = [name for name, value in given.items() if value is not None]
        if len(named) != 1:
            problem = "no targets" if not named else f"{' and '.join(named)} given together"
            raise ValueError(f"{problem}: give exactly one of deployment_ids, deployment_names, filters")
        value = given[named[0]]
        if value in ("", []) or (isinstance(value, (list, tuple)) and not any(value)):
            raise ValueError(f"{named[0]} is empty: no targets")
        if isinstance(filters, Mapping):
            fleet_tasks.check_filters(filters)
        change = {
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
        }
        if patch_for is not None and not callable(patch_for):
            raise ValueError(f"patch_for must be a callable Deployment -> patch arguments, got {patch_for!r}")
        if not change and patch_for is None:
            raise ValueError(
                "no change: give image_uri, repo_ref, source_revision_config, source_config, revision_source, "
                "secrets or secret_references, or patch_for"
            )
        if verify is not None and not callable(verify):
            raise ValueError(f"verify must be a callable given the live Deployment, got {verify!r}")
        if analysis is not None:
            if not isinstance(analysis, Analysis):
                raise ValueError(
                    f"analysis must be an airflow_provider.analysis.Analysis, got {type(analysis).__name__}"
                )
            # count=None fills the bake window: without one there is nothing to fill (names analysis.count).
            analysis.with_count_for(non_negative_seconds(bake_seconds, "bake_seconds") or None)
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
        self.canary = fleet.check_canary(canary)
        self.wave_size = fleet.check_wave_size(wave_size)
        self.max_failures = fleet.check_max_failures(max_failures)
        self.pause_seconds = non_negative_seconds(pause_seconds, "pause_seconds")
        self.max_parallel_patches = fleet.check_max_parallel_patches(max_parallel_patches)
        self.verify = verify
        self.bake_seconds = non_negative_seconds(bake_seconds, "bake_seconds")
        self.rollback_on_failure = bool(rollback_on_failure)
        self.resource_spec_mode = resource_spec_mode
        self.check_source_rules = bool(check_source_rules)
        self.analysis = analysis

    # ---- the change
    def _fixed_change(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in PATCH_FIELDS}
        values["secrets"] = resolve_secrets(self.secrets)  # once per run, not once per deployment
        self._resolved_secrets = values["secrets"]  # scrubbed from build logs
        return {name: value for name, value in values.items() if value is not None}

    def _change(self) -> tuple[Callable[[Deployment], PatchDeploymentRequest], str]:
        """The patch for each deployment, and a digest of the whole request (no secret values)."""
        fixed = self._fixed_change()
        digest_parts: dict[str, Any] = {
            "targets": [self.deployment_ids, self.deployment_names, self.filters],
            "plan": [self.canary, self.wave_size, self.max_failures],
            "patch_for": getattr(self.patch_for, "__qualname__", None),
            "completed": [self.resource_spec_mode, self.check_source_rules],
        }
        if self.patch_for is None:
            request = build_patch_request("patch for the fleet", **fixed)
            digest_parts["request"] = request.model_dump(mode="json", exclude_none=True)
            return (lambda deployment: request), fleet_tasks.change_digest(digest_parts)
        digest_parts["fixed"] = {
            name: value if name != "secrets" else sorted(item["name"] for item in value)
            for name, value in fixed.items()
        }
        patch_for = self.patch_for

        def request_for(deployment: Deployment) -> PatchDeploymentRequest:
            given = patch_for(deployment)
            if not isinstance(given, Mapping):
                raise AirflowFailException(f"patch_for returned {type(given).__name__}, expected a mapping")
            unknown = sorted(set(given) - set(PATCH_FIELDS))
            if unknown:
                raise AirflowFailException(
                    f"patch_for returned unknown argument(s) {', '.join(unknown)}; known: {', '.join(PATCH_FIELDS)}"
                )
            merged = {**fixed, **{name: value for name, value in given.items() if value is not None}}
            return build_patch_request(f"patch for deployment {deployment.name!r} ({deployment.id})", **merged)

        return request_for, fleet_tasks.change_digest(digest_parts)

    # ---- execute
    def _run(self, context: Context) -> list[dict[str, Any]]:
        """Plan (or resume the recorded plan), then roll out wave by wave."""
        request_for, change = self._change()
        progress_store = fleet_tasks.ProgressStore(
            context.get("task_state_store"), self.log, secrets=self._secret_values()
        )
        progress = progress_store.load(change)
        if progress is not None:
            self.log.info("Resuming the fleet rollout recorded by an earlier try: %s", progress.counts())
        else:
            targets = fleet_tasks.resolve_targets(
                self.hook,
                deployment_ids=self.deployment_ids,
                deployment_names=self.deployment_names,
                filters=self.filters,
            )
            if self.analysis is not None:  # an analysis that cannot run or never pass: fail before any patch
                # Only on a fresh start: a retry with saved progress goes on with what an earlier try started.
                unchanged = (
                    "nothing was patched"
                    if self._earlier_try_since(context) is None
                    else "this try patched nothing (an earlier try's patches, if any, stay as they are)"
                )
                check_analysis_sources(self.hook, self.analysis, unchanged=unchanged)
                check_custom_urls(self.analysis, targets, unchanged=unchanged, request_for=request_for)
            try:
                plan = fleet.plan_waves([(item.id, item.name) for item in targets], self.canary, self.wave_size)
            except ValueError as err:
                raise AirflowFailException(str(err)) from None
            allowed = fleet.failure_allowance(self.max_failures, len(targets))
            progress = fleet_tasks.new_progress(plan, {item.id: item for item in targets}, allowed, change)
            self._log_plan(progress)
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
        try:
            if not isinstance(event, dict) or event.get("status") not in ("done", "paused", "error"):
                raise AirflowException(f"unexpected event from FleetWaveTrigger: {event!r}")
            request_for, change = self._change()
            progress_store = fleet_tasks.ProgressStore(
                context.get("task_state_store"), self.log, secrets=self._secret_values()
            )
            progress = self._resumed_progress(progress_store, change, event)
            if event["status"] == "error":
                raise AirflowException(str(event.get("message")))  # a retry resumes from the progress
            index, wave = self._resumed_wave(progress, event)
            if event["status"] == "done" and wave.phase == "patched":
                self._record_outcomes(wave, event.get("outcomes") or {})
                if not fleet_tasks.in_flight(wave):
                    wave.phase = "watched"  # else the rest is watched again (the event left some undecided)
                progress_store.save(progress, index)
            elif event["status"] == "done" and wave.phase == "rolling_back":
                fleet_tasks.apply_rollbacks(self.hook, wave, event.get("outcomes") or {}, self.log)
                progress_store.save(progress, index)
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Resume as Airflow asks. A wave's analysis whose deferral Airflow's timeout ended (the triggerer down, or
        restarted too late) could not be measured: a retry analyses the wave's deployments not judged yet again,
        the last try counts them inconclusive and rolls them back (see
        :meth:`~airflow_provider.tasks.fleet_analysis.WaveAnalysis.not_measured`), from the progress in
        ``task_state_store`` (without one, the try fails as Airflow says)."""
        if deferral_timed_out(next_method, next_kwargs):
            request_for, change = self._change()
            store = fleet_tasks.ProgressStore(context.get("task_state_store"), self.log, secrets=self._secret_values())
            progress = store.load(change)
            index = progress.current() if progress is not None else None
            if progress is not None and index is not None and progress.waves[index].phase == "analysing":
                try:
                    self._wave_analysis(context, index, progress, store).not_measured(DEFERRAL_TIMEOUT)
                    store.save(progress, index)
                    return self._advance(context, progress, store, request_for)
                finally:
                    self.close_hook()
        return super().resume_execution(next_method, next_kwargs, context)

    def _resumed_progress(
        self, progress_store: fleet_tasks.ProgressStore, change: str, event: dict[str, Any]
    ) -> fleet.FleetProgress:
        """The progress to resume from: the event's ``carry`` when it has one (taken when the task deferred:
        the store's may be older, its last save having failed), else the store's; fails when neither."""
        carry = event.get("carry")
        if isinstance(carry, dict):
            if carry.get("change") != change:
                raise AirflowException(
                    "the trigger's event carries the progress of another change than this task's: not resuming"
                )
            progress = fleet.FleetProgress.from_json(carry, carry["wave_records"])
            progress_store.save(progress)  # the store catches up (when it has one)
            return progress
        stored = progress_store.load(change)
        if stored is None:
            where = (
                "task_state_store has no record of it" if progress_store.store is not None else "no task_state_store"
            )
            raise AirflowException(
                f"the fleet rollout's progress was lost ({where}, and the trigger's event carries none): cannot "
                "resume it; a retry recognises the patches already made on the deployments"
            )
        return stored

    def _resumed_wave(self, progress: fleet.FleetProgress, event: dict[str, Any]) -> tuple[int, fleet.WaveRecord]:
        """The wave the event reports on, in a phase that matches it; :class:`AirflowException` otherwise."""
        index = event.get("wave")
        if not isinstance(index, int) or not 0 <= index < len(progress.waves):
            raise AirflowException(f"the FleetWaveTrigger event names wave {index!r}, which the progress does not have")
        wave = progress.waves[index]
        if event["status"] == "done" and wave.phase == "planned":
            raise AirflowException(
                f"the FleetWaveTrigger event reports the watch of {wave.name}, but the progress shows it not patched "
                "(a save was lost): not resuming from it; a retry recognises the patches already made"
            )
        return index, wave

    def _advance(
        self,
        context: Context,
        progress: fleet.FleetProgress,
        progress_store: fleet_tasks.ProgressStore,
        request_for: Callable[[Deployment], PatchDeploymentRequest],
    ) -> list[dict[str, Any]]:
        """Run the waves from where the progress stands until done, stopped or deferred."""
        self._stop_as_decided(progress, progress_store)
        while (index := progress.current()) is not None:
            wave = progress.waves[index]
            if wave.phase == "planned":
                started = any(row.patched for row in progress.rows)
                if self.pause_seconds and started and progress.paused_before != index:
                    progress.paused_before = index
                    progress_store.save(progress, index)
                    self.log.info("Pausing %g s before %s", self.pause_seconds, wave.name)
                    if self.deferrable:
                        self._defer_wave(index, {}, None, progress_store, progress, time.time() + self.pause_seconds)
                    time.sleep(self.pause_seconds)
                self.log.info("Rolling out %s: %s", wave.name, ", ".join(row.name for row in wave.rows))
                fleet_tasks.patch_wave(
                    self.hook,
                    wave,
                    request_for,
                    save=lambda index=index: progress_store.save(progress, index),  # type: ignore[misc]
                    earlier_try_since=self._earlier_try_since(context),
                    log=self.log,
                    max_parallel=self.max_parallel_patches,
                    complete=self._completed_for,
                )
                wave.phase = "patched"
                progress_store.save(progress, index)
            if wave.phase == "patched":
                rollouts = fleet_tasks.in_flight(wave)
                if rollouts:
                    begun = min(row.started_at or time.time() for row in wave.rows if row.deployment_id in rollouts)
                    deadline = begun + self.timeout
                    if self.deferrable:
                        self._defer_wave(index, rollouts, deadline, progress_store, progress, None)
                    outcomes = fleet_tasks.watch_wave(
                        self.hook,
                        rollouts,
                        poll_interval=self.poll_interval,
                        deadline=deadline,
                        bake_seconds=self._watch_bake_seconds(),
                        revision_check_interval=self.revision_check_interval,
                        log=self.log,
                    )
                    self._record_outcomes(wave, outcomes)
                wave.phase = "watched"
                progress_store.save(progress, index)
            save = functools.partial(progress_store.save, progress, index)
            if wave.phase == "watched":
                if self.verify is not None:
                    fleet_tasks.verify_wave(self.hook, wave, self.verify, self.log, secrets=self._secret_values())
                if self.analysis is not None:
                    wave.phase = "analysing"  # recorded with verify's verdicts: a retry does not verify again
                if self.verify is not None or self.analysis is not None:
                    save()
            if wave.phase == "analysing" and self.analysis is not None:  # (a retry of a task that lost it goes on)
                self._analyse_wave(context, index, progress, progress_store)
            if wave.phase in ("watched", "analysing"):
                if self.rollback_on_failure:
                    # The wave that stops the rollout (over the budget, or a failed canary) is rolled back whole.
                    fleet_tasks.start_rollbacks(
                        self.hook,
                        wave,
                        stopping=self._stop_reason(progress, wave),
                        save=save,
                        log=self.log,
                        records=progress_store.rollback_records(index),
                        earlier_try_since=self._earlier_try_since(context),
                    )
                wave.phase = "rolling_back"
                save()
            if wave.phase == "rolling_back":
                # The rollbacks started, this try's or an earlier one's, whose outcome is not recorded yet.
                rollbacks = fleet_tasks.pending_rollbacks(wave)
                if rollbacks:
                    deadline = time.time() + self.timeout
                    allowed = fleet_tasks.rollbacks_allowed_latest(wave)
                    if self.deferrable:
                        self._defer_wave(
                            index, rollbacks, deadline, progress_store, progress, None, bake=False, allowed=allowed
                        )
                    outcomes = fleet_tasks.watch_wave(
                        self.hook,
                        rollbacks,
                        poll_interval=self.poll_interval,
                        deadline=deadline,
                        bake_seconds=0,
                        revision_check_interval=self.revision_check_interval,
                        log=self.log,
                        allowed_latest=allowed,
                    )
                    fleet_tasks.apply_rollbacks(self.hook, wave, outcomes, self.log)
                wave.phase = "done"
                self._log_wave(progress, index)
                stopping = self._stop_reason(progress, wave)
                if stopping is not None:
                    progress.stop(stopping, time.time())
                progress_store.save(progress)
        return self._finish(context, progress)

    def _analyse_wave(
        self, context: Context, index: int, progress: fleet.FleetProgress, progress_store: fleet_tasks.ProgressStore
    ) -> None:
        """Judge the wave's landed deployments with the analysis, all together (in the triggerer when deferrable
        and the analysis can run there, else on the worker), each verdict recorded and acted on as it comes (see
        :mod:`~airflow_provider.tasks.fleet_analysis`). Rows already judged (an earlier try, or the resume) are
        not judged again."""
        self._wave_analysis(context, index, progress, progress_store).run(
            deferrable=self.deferrable, method_name="execute_complete_analysis"
        )

    def _wave_analysis(
        self, context: Context, index: int, progress: fleet.FleetProgress, progress_store: fleet_tasks.ProgressStore
    ) -> WaveAnalysis:
        return WaveAnalysis(
            task=self,
            progress=progress,
            progress_store=progress_store,
            index=index,
            analysis=self._resolved_analysis(),
            rollback_on_failure=self.rollback_on_failure,
            stop_reason=lambda: self._stop_reason(progress, progress.waves[index]),
            last_try=no_retry_left(context, self.retries),
            earlier_try_since=self._earlier_try_since(context),
            secrets=self._secret_values(),
        )

    def _resolved_analysis(self) -> Analysis:
        """The analysis with its ``count`` resolved (``None``: as many rounds as fit in ``bake_seconds``)."""
        assert self.analysis is not None
        return self.analysis.with_count_for(self.bake_seconds)

    def _watch_bake_seconds(self) -> float:
        """The bake a wave's watch waits: none when the analysis's rounds fill ``bake_seconds`` (``count=None``:
        each round checks that the revision still serves, so the analysis is the bake)."""
        if self.analysis is not None and self.analysis.count is None:
            return 0.0
        return self.bake_seconds

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
        try:
            carry = event.get("carry") if isinstance(event, dict) and "carry" in event else carry
            if not isinstance(carry, dict) or not isinstance(carry.get("fleet_wave"), int):
                raise AirflowException(f"unexpected event from DeploymentAnalysisTrigger: {event!r}")
            request_for, change = self._change()
            progress_store = fleet_tasks.ProgressStore(
                context.get("task_state_store"), self.log, secrets=self._secret_values()
            )
            if carry.get("change") != change:
                raise AirflowException(
                    "the DeploymentAnalysisTrigger event carries the analysis of another change than this task's: "
                    "not resuming"
                )
            progress = self._resumed_progress(progress_store, change, {"carry": carry.get("progress")})
            index = carry["fleet_wave"]
            if not 0 <= index < len(progress.waves) or progress.waves[index].phase != "analysing":
                shown = progress.waves[index].phase if 0 <= index < len(progress.waves) else "not in the plan"
                raise AirflowException(
                    f"the DeploymentAnalysisTrigger event reports the analysis of wave {index}, but the progress shows "
                    f"it {shown} (a save was lost): not resuming from it; a retry analyses the wave again"
                )
            self._wave_analysis(context, index, progress, progress_store).resume(
                event, method_name="execute_complete_analysis"
            )
            progress_store.save(progress, index)
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def _stop_as_decided(self, progress: fleet.FleetProgress, progress_store: fleet_tasks.ProgressStore) -> None:
        """Stop the rollout here when the waves already done stopped it, whatever the header says.

        The stop is decided by the rows of the waves done, not by the header alone: the progress is saved one
        key at a time (each wave, then the header), so a worker that dies between those writes leaves the
        stopping wave recorded done (and maybe the later waves ``not_patched``) under a header that does not
        say the rollout stopped. Judged again from the rows, a retry or a resume never patches a wave after a
        stop decided before the crash, nor succeeds past it. Only between waves (the next wave not started,
        or none left): the rows of a wave in progress are not final.
        """
        index = progress.current()
        if index is not None and progress.waves[index].phase != "planned":
            return
        reason = progress.stopped or next(
            (
                found
                for wave in progress.waves
                if wave.phase == "done" and (found := self._stop_reason(progress, wave)) is not None
            ),
            None,
        )
        if reason is None or (progress.stopped and index is None):
            return
        self.log.warning("The rollout was stopped by an earlier try (%s); not patching any further wave", reason)
        progress.stop(reason, time.time())
        progress_store.save(progress)

    @staticmethod
    def _stop_reason(progress: fleet.FleetProgress, wave: fleet.WaveRecord) -> str | None:
        """Why this wave stops the rollout (a canary deployment failed, or more failed than the budget
        allows), or ``None``. Only failures count, and the rollbacks an earlier try made without a record of
        why (conservatively, named apart): a deployment rolled back with its wave is not one."""
        if wave.name == fleet.CANARY and progress.canary_failed:
            failed = sum(row.outcome in fleet.FAILURE_OUTCOMES for row in wave.rows)
            unknown = sum(row.outcome in fleet.REASON_UNKNOWN_OUTCOMES for row in wave.rows)
            what = (
                f"the canary failed or was rolled back by an earlier try for a reason not recorded ({failed} "
                f"failed and {unknown} rolled back for a reason not recorded, of {len(wave.rows)} canary "
                "deployment(s))"
                if unknown
                else f"the canary failed ({failed} of {len(wave.rows)} canary deployment(s))"
            )
            return f"{what}; a failed canary stops the rollout whatever max_failures allows"
        if progress.budget_exceeded:
            failed, unknown = len(progress.failures), len(progress.reason_unknown)
            counted = (
                f"{failed} deployment(s) failed and {unknown} were rolled back by an earlier try for a reason not "
                "recorded (counted against the budget)"
                if unknown
                else f"{failed} deployment(s) failed"
            )
            return f"{counted}, more than max_failures allows ({progress.allowed_failures})"
        return None

    def _completed_for(self, request: PatchDeploymentRequest, deployment: Deployment) -> PatchDeploymentRequest:
        """The patch to send to ``deployment`` (see :func:`~airflow_provider.tasks.fleet.complete_request`); what
        completing it did is logged."""
        completed = fleet_tasks.complete_request(
            request,
            deployment,
            resource_spec_mode=self.resource_spec_mode,
            check_source_rules=self.check_source_rules,
        )
        if completed.unchanged_fixed:
            self.log.info(
                "%s: not sending source_config.%s: unchanged, and it cannot change after creation",
                deployment.name,
                ", source_config.".join(completed.unchanged_fixed),
            )
        if completed.kept:
            self.log.info(
                "%s: sending the whole source_config.resource_spec (production replaces it): kept %s from its "
                "current one (resource_spec_mode='replace' sends only what you gave)",
                deployment.name,
                ", ".join(completed.kept),
            )
        if completed.dropped:
            self.log.warning(
                "%s: not keeping %s from its current resource_spec: a limit below its new request (production set "
                "it to twice the old request); left out, so the service sets it to twice the new request",
                deployment.name,
                ", ".join(completed.dropped),
            )
        if completed.carried:
            self.log.info(
                "%s: carried through untouched the fields of its current resource_spec this provider does not know "
                "(the service's): %s",
                deployment.name,
                ", ".join(completed.carried),
            )
        if completed.discouraged:
            self.log.warning(
                "%s: %s: production's reference marks these fields 'do not use'; they are sent, but may be ignored",
                deployment.name,
                ", ".join(completed.discouraged),
            )
        return completed.request

    def _record_outcomes(self, wave: fleet.WaveRecord, outcomes: Mapping[str, Sequence[Any]]) -> None:
        """Record what the watch decided; show the build log's tail of each failed build."""
        fleet_tasks.apply_outcomes(wave, outcomes, self.log)
        fleet_tasks.explain_failed_builds(self.hook, wave, self.log, secrets=self._secret_values())

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in getattr(self, "_resolved_secrets", None) or [])

    def _defer_wave(
        self,
        index: int,
        rollouts: Mapping[str, str | None],
        deadline: float | None,
        progress_store: fleet_tasks.ProgressStore,
        progress: fleet.FleetProgress,
        resume_at: float | None,
        *,
        bake: bool = True,
        allowed: Mapping[str, str] | None = None,
    ) -> None:
        wait = (resume_at - time.time()) if resume_at is not None else (deadline or time.time()) - time.time()
        fleet_tasks.scrub_messages(progress, self._secret_values())
        allowed = allowed or {}
        from airflow_provider.triggers.fleet import FleetWaveTrigger  # only a deferring task needs the trigger

        self.defer(
            trigger=FleetWaveTrigger(
                wave=index,
                rollouts=[
                    [deployment_id, revision_id, *([allowed[deployment_id]] if deployment_id in allowed else [])]
                    for deployment_id, revision_id in rollouts.items()
                ],
                hook_params=self.hook.hook_params,
                poll_interval=self.poll_interval,
                deadline=deadline,
                bake_seconds=self._watch_bake_seconds() if bake else 0.0,
                revision_check_interval=self.revision_check_interval,
                resume_at=resume_at,
                # Without a task state store, or when its last save failed, the progress travels with the
                # trigger (JSON, no secrets): the resume must not go on from an older one.
                carry=progress.to_json() if progress_store.store is None or progress_store.behind else None,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=max(0.0, wait) + self.bake_seconds + max(DEFERRAL_GRACE, 2 * self.poll_interval)),
        )

    def _earlier_try_since(self, context: Context) -> datetime | None:
        """The run's start when this is a retry (patches found on deployments may be an earlier try's)."""
        try_number = getattr(context["ti"], "try_number", 1) or 1
        started = getattr(context.get("dag_run"), "start_date", None)
        if try_number <= 1:
            return None
        return started if isinstance(started, datetime) else datetime.min.replace(tzinfo=timezone.utc)

    def _log_plan(self, progress: fleet.FleetProgress) -> None:
        total = len(progress.rows)
        self.log.info(
            "Fleet rollout plan: %d deployment(s) in %d wave(s); the rollout stops when more than %d fail",
            total,
            len(progress.waves),
            progress.allowed_failures,
        )
        for wave in progress.waves:
            names = [row.name for row in wave.rows]
            shown = ", ".join(names[:50]) + (f" ... and {len(names) - 50} more" if len(names) > 50 else "")
            self.log.info("  %s (%d): %s", wave.name, len(names), shown)

    def _log_wave(self, progress: fleet.FleetProgress, index: int) -> None:
        wave = progress.waves[index]
        counts: dict[str, int] = {}
        for row in wave.rows:
            counts[row.outcome] = counts.get(row.outcome, 0) + 1
        unknown = len(progress.reason_unknown)
        self.log.info(
            "%s finished: %s; %d failure(s)%s so far of %d allowed",
            wave.name,
            ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())),
            len(progress.failures),
            f" and {unknown} rollback(s) of an earlier try whose reason was not recorded" if unknown else "",
            progress.allowed_failures,
        )

    def _finish(self, context: Context, progress: fleet.FleetProgress) -> list[dict[str, Any]]:
        fleet_tasks.scrub_messages(progress, self._secret_values())
        table = progress.table()
        counts = progress.counts()
        self.log.info("Fleet rollout summary: %s\n%s", counts, fleet.format_table(table))
        ti = context["ti"]
        failures = progress.failures
        summary: dict[str, Any] = {
            "counts": counts,
            "failures": len(failures),
            "allowed_failures": progress.allowed_failures,
            "stopped": progress.stopped,
        }
        if self.analysis is not None:
            summary["analysis_failures"] = len(progress.analysis_failures)
            summary["analysis_verdicts"] = progress.analysis_verdicts()
            ti.xcom_push(
                key=XCOM_FLEET_ANALYSIS, value={row.name: row.analysis for row in progress.rows if row.analysis}
            )
        ti.xcom_push(key=XCOM_FLEET_SUMMARY, value=summary)
        unknown = progress.reason_unknown
        if progress.stopped:
            ti.xcom_push(key="return_value", value=table)
            named = "; ".join(f"{row.name} ({row.message})" for row in failures[:20])
            more = f"; and {len(failures) - 20} more" if len(failures) > 20 else ""
            failed = f" Failed: {named}{more}." if failures else " Failed: none."
            unexplained = (
                f" {len(unknown)} deployment(s) were {fleet.REASON_UNKNOWN} (counted against the budget, not as "
                f"failures): {', '.join(row.name for row in unknown[:20])}{' ...' if len(unknown) > 20 else ''}."
                if unknown
                else ""
            )
            withdrawn = [row.name for row in progress.rolled_back_with_wave]
            with_wave = (
                f" {len(withdrawn)} deployment(s) that landed were rolled back with their wave (not failures): "
                f"{', '.join(withdrawn[:20])}{' ...' if len(withdrawn) > 20 else ''}."
                if withdrawn
                else ""
            )
            skipped = counts.get(fleet.Outcome.NOT_PATCHED, 0)
            raise AirflowFailException(
                f"fleet rollout stopped: {progress.stopped}.{failed}{unexplained}{with_wave} "
                f"{skipped} deployment(s) in later waves were not patched."
            )
        if failures:
            self.log.warning(
                "%d deployment(s) failed, within the budget of %d: %s",
                len(failures),
                progress.allowed_failures,
                ", ".join(row.name for row in failures),
            )
        if unknown:
            self.log.warning(
                "%d deployment(s) were %s, counted against the budget of %d (within it): %s",
                len(unknown),
                fleet.REASON_UNKNOWN,
                progress.allowed_failures,
                ", ".join(row.name for row in unknown),
            )
        self._emit_events(context, progress)
        return table

    def _emit_events(self, context: Context, progress: fleet.FleetProgress) -> None:
        """One asset event per deployment this rollout changed, read back (one list request per 100): a row
        that landed and still serves its revision (``rolled_out``), and a row rolled back whose rollback still
        serves (``rolled_back``, or ``rolled_back_partially`` with the ``not_restored`` clauses in its extra;
        the secrets the change set are named there too). A row's analysis, when it has one, is the extra
        ``analysis`` (the one that passed the revision, or failed the one rolled back)."""
        landed = {
            row.deployment_id: row
            for row in progress.rows
            if row.outcome == fleet.Outcome.LANDED and row.rollback_revision is None and row.to_revision
        }
        restored = {
            row.deployment_id: row
            for row in progress.rows
            if row.outcome in fleet.ROLLED_BACK_OUTCOMES and row.rollback_revision
        }
        ids = [*landed, *restored]
        for start in range(0, len(ids), MAX_PAGE_SIZE):
            try:
                page = self.hook.list_deployments(
                    deployment_ids=ids[start : start + MAX_PAGE_SIZE], limit=MAX_PAGE_SIZE
                )
            except DeploymentServiceError as err:  # the rollout succeeded; only its events are missing
                self.log.warning("Could not read the changed deployments back for their asset events (%s)", err)
                continue
            for deployment in page.resources:
                row = landed.get(deployment.id)
                if row is not None and deployment.active_revision_id == row.to_revision:
                    emit_revision_event(
                        context,
                        deployment,
                        previous_revision_id=row.from_revision,
                        outlets=self.outlets,
                        log=self.log,
                        analysis=row.analysis,
                    )
                row = restored.get(deployment.id)
                if row is not None and deployment.active_revision_id == row.rollback_revision:
                    partial = row.outcome in (
                        fleet.Outcome.ROLLED_BACK_PARTIALLY,
                        fleet.Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY,
                    ) or (row.outcome in fleet.REASON_UNKNOWN_OUTCOMES and fleet_tasks.is_partial(row))
                    emit_revision_event(
                        context,
                        deployment,
                        previous_revision_id=row.to_revision,
                        outcome="rolled_back_partially" if partial else "rolled_back",
                        outlets=self.outlets,
                        log=self.log,
                        not_restored=row.not_restored,
                        analysis=row.analysis,  # the analysis that failed the revision rolled back, if any
                    )
