"""Patch a deployment and (by default) wait until its new revision is live, verify, analyse and bake it, and
roll it back when any fails; a retry reattaches to what an earlier try did instead of patching (or rolling
back) twice.

The operator holds its arguments, the patch (or the reattach on a retry), its XComs and the methods Airflow
resumes it in; the steps stand in the task layer, in the patch family's folder (:mod:`airflow_provider.tasks.patch`)
and beside it, one module per concern:

- :mod:`~airflow_provider.tasks.request`: the patch built from the arguments and completed against the
  deployment as read (shared with the fleet and rollback tasks);
- :mod:`~airflow_provider.tasks.patch.retry`: the ``task_state_store`` record and what a retry finds;
- :mod:`~airflow_provider.tasks.patch.judging`: judging the live revision (``verify``, the analysis, the bake);
- :mod:`~airflow_provider.tasks.patch.rollback`: the automatic rollback, and a retry's earlier rollback or
  failed verdict;
- :mod:`~airflow_provider.tasks.patch.verdict`: the verdict recorded, and what the task says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_provider.defaults import RESOURCE_SPEC_MODES
from airflow_provider.errors import NotFoundError
from airflow_provider.models import Deployment, PatchDeploymentRequest, Revision
from airflow_provider.operators.base import (
    XCOM_DEPLOYMENT_ID,
    XCOM_DEPLOYMENT_URL,
    XCOM_PREVIOUS_ACTIVE_REVISION_ID,
    XCOM_PREVIOUS_RESOURCE_SPEC,
    XCOM_PREVIOUS_SOURCE_REVISION_CONFIG,
    XCOM_REVISION_ID,
    DeploymentLink,
    _RolloutWaitingOperator,
)
from airflow_provider.tasks.base import checked_ids, checked_name, deployment_by_name, non_negative_seconds
from airflow_provider.tasks.deferral import DEFERRAL_TIMEOUT, deferral_timed_out
from airflow_provider.tasks.execution_timeout import check_judging_task, what_timeout_covers
from airflow_provider.tasks.inconclusive import DEFAULT_RESPONSE_TIMEOUT, checked_on_inconclusive
from airflow_provider.tasks.notify import checked_notify
from airflow_provider.tasks.patch.asking import InconclusiveAsking
from airflow_provider.tasks.patch.retry import HISTORY_LOOKBACK, TASK_STATE_KEY
from airflow_provider.tasks.patch.verdict import XCOM_ANALYSIS
from airflow_provider.tasks.request import (
    SecretValue,
    against_current,
    build_patch_request,
    describe_patch,
    resolve_secrets,
)
from airflow_provider.tasks.targets import exactly_one_target

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.analysis import Analysis
    from airflow_provider.analysis.guard import Guard

__all__ = [
    "HISTORY_LOOKBACK",
    "TASK_STATE_KEY",
    "XCOM_ANALYSIS",
    "PatchDeploymentOperator",
]


class PatchDeploymentOperator(InconclusiveAsking, _RolloutWaitingOperator):
    """Patch a deployment and wait (unless ``wait_for_rollout=False``) until the revision it created is live.

    The patch is built and validated before any request (a misspelled field fails the task, naming it).
    The deployment is read first; on a retry the task reattaches to the revision its earlier try created
    (recorded in ``task_state_store``, or recognised on the deployment when no store is available)
    instead of patching again. Pushes the XComs ``deployment_id``, ``revision_id`` (the new latest
    revision, ``""`` when the patch created none), ``previous_active_revision_id`` (``""`` when there was
    no active revision), ``previous_source_revision_config`` (the non-secret revision fields that served
    before the patch: what :class:`RollbackDeploymentOperator` restores when the service cannot say),
    ``previous_resource_spec`` (the whole ``source_config.resource_spec`` before the patch, ``{}`` when none;
    not pushed when a retry without a record cannot know it: after a patch that sets ``resource_spec``) and,
    when the service reports a ``source_config.custom_url``, ``deployment_url``
    (the ``Deployment`` extra link). Returns the deployment as redacted JSON (after the rollout when
    ``wait_for_rollout``).

    Secret values are not templated (they must never reach rendered template fields); give them as
    ``{"NAME": value}`` or ``[{"name": "NAME", "value": value}]`` where a value is a string, a callable,
    ``{"variable": "<key>"}`` or ``{"connection": "<conn_id>", "field": "password"}``, resolved when the
    task runs and registered with Airflow's secret masker. Give every secret the deployment needs: the
    spec does not show whether a ``secrets`` list merges with the deployment's or replaces it (the
    emulator replaces it).

    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name, looked up when the task runs (the XCom
        ``deployment_id`` is the id found). Templated. Give this or ``deployment_id``.
    :param revision_source: ``codehost``, ``internal_docker`` or ``internal_source``. Templated.
    :param source_config: settings that change without a new revision. Templated.
    :param source_revision_config: settings that create a new revision. Templated.
    :param secrets: secret values (see above); any list, even empty, creates a new revision. Not templated.
    :param secret_references: Kubernetes secret references (``external_docker`` only).
    :param image_uri: shortcut for ``source_revision_config["image_uri"]``. Templated.
    :param repo_ref: shortcut for ``source_revision_config["repo_ref"]``. Templated.
    :param resource_spec_mode: ``"merge"`` (default): a ``source_config.resource_spec`` that names only some
        fields is completed from the deployment's current one and sent whole, because production replaces
        the whole resource_spec (a field set to ``None`` is removed); the fields kept are logged.
        ``"replace"``: sent as given (production then drops every field not given).
    :param check_source_rules: before sending, refuse what production refuses for this deployment (fields
        that cannot change after creation, fields of another source, ``build_on_push`` with a tag ref),
        naming the field, the deployment's source and the rule. ``False`` skips these local checks for a
        server that accepts more (the server still decides); the request schema (unknown fields,
        ResourceSpec bounds and integers) is always checked.
    :param wait_for_rollout: wait until the new revision is live (status ``READY`` and active), and fail when its
        build or deploy fails (default ``True``, as the dbt Cloud operator's ``wait_for_termination``); how is set
        by ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`). ``False`` returns once the patch is accepted and logs a warning naming
        the revision: the task then does not know whether it will go live (its build may still fail).
    :param verify: a callable given the live :class:`~airflow_provider.models.Deployment` (secrets redacted)
        once the new revision is live (before the analysis); raising, or returning a false value other than
        ``None`` (``False``, ``0``, ``""``), marks the revision bad; returning ``None`` (an assert-style check)
        or a true value passes. Runs on the worker (also with ``deferrable=True``: after the task resumes).
        Needs ``wait_for_rollout``.
    :param bake_seconds: seconds the new revision must then stay active with the deployment ``READY`` before
        it counts as landed (looked at every ``poll_interval``; deferred to a trigger when ``deferrable``).
        With an ``analysis`` without ``count``, the analysis measures for this long instead (see ``analysis``).
        Needs ``wait_for_rollout``.
    :param analysis: an :class:`~airflow_provider.analysis.Analysis` that judges the live revision by what the
        application does (its tracing project, an HTTP endpoint, a Prometheus query, a callable), measured
        every ``analysis.interval_seconds``, after ``verify`` passed. A ``failed`` or ``inconclusive`` verdict
        is a failed revision, like a failed ``verify``: rolled back with ``rollback_on_failure`` (the message
        names the check, its value and condition, and says "inconclusive" when a measurement could not be
        taken), else the task fails. With ``deferrable`` the measurements run in the triggerer, unless the
        analysis holds a ``CallableCheck`` (then on the worker, as ``verify``). ``analysis.count=None`` makes
        its rounds fill ``bake_seconds``: each round also checks that the revision still serves (active,
        ``READY``), so the analysis *is* the bake and there is no separate one; with a ``count`` the bake (if
        any) follows the analysis. Pushes the XCom ``analysis`` (the result) and, once landed, the asset
        event's extra ``analysis`` (verdict, failing check, reason, the latest measurements). Checked when the
        task is built (``count=None`` without ``bake_seconds`` fails naming ``analysis.count``), and before the
        patch is sent on a fresh start (its connections resolved; an ``HttpCheck`` on ``{custom_url}`` refused for
        a deployment without one; then its preflight, unless ``analysis.preflight`` is off: every check measured
        once on the revision serving now, a check that cannot be measured refusing the rollout with nothing sent,
        the measurements kept as the baseline that conditions on the baseline and rate tests compare with). With
        ``analysis.dry_run`` a verdict that is not "passed" neither rolls back nor fails the task: the revision
        lands and the XCom, the asset event and the record say what would have happened. An analysis that could
        not be measured at all fails the try while a retry is left; on the last try the revision is inconclusive.
        Needs ``wait_for_rollout``.
    :param on_inconclusive: what an inconclusive analysis does: ``"fail"`` (default: counted as failed, see
        ``analysis``) or ``"ask"``: the task asks a person through Airflow's human-in-the-loop (the "Required
        actions" page, or the REST API), showing the measurements, with the choices "Promote", "Roll back" and
        "Analyse another interval"; no answer within ``response_timeout`` rolls back. The question and the answer
        are recorded in ``task_state_store`` before they are acted on (a retry goes on from the answer) and the
        Rollouts view shows the open question with a link to it. Needs an ``analysis`` and Airflow 3.1+.
    :param response_timeout: how long a question waits for an answer (a ``timedelta`` or seconds; default 1 hour).
    :param notify: ``{event: notifier or [notifiers]}``, Airflow ``BaseNotifier`` s (Slack, SMTP...) told about
        ``rolled_out``, ``analysis_failed``, ``rolled_back``, ``inconclusive`` (a question asked) and
        ``preflight_failed`` (the analysis refused before the patch); each gets ``rollout_event`` in its context
        (the deployment, revision, measurements, a link to the Rollouts view, and ``message``: all of it in one
        text). A notifier that fails is logged, never fails the task. See :mod:`airflow_provider.tasks.notify`.
    :param rollback_on_failure: when ``verify``, the analysis or the bake fails, or the revision has not gone live
        within ``timeout`` (the service would deploy it later), roll back to the revision active before
        the patch (its build, and the whole resource_spec recorded before the patch when the patch changed it,
        in one revision; secret values cannot be re-sent), wait until it serves again, then fail naming both
        revisions and, after "except:", what the rollback did not undo (secrets by name). The failed verdict is
        recorded in ``task_state_store`` the moment it is reached (with the analysis's measurements), and the
        rollback before it is sent: a retry rolls back from the verdict (never judges the revision again) or
        waits for the rollback, never rolls back (or patches) twice (without a store, Airflow < 3.3, a try that
        dies between its verdict and its rollback request leaves the retry to judge the revision again). A
        timeout without it fails naming the revision that may still go live. A failed build needs no rollback
        (the old revision never stopped serving): the task says so and fails; a retry reports the failed build
        again instead of building the same change again. On the last try, Airflow's own deferral timeout (the
        triggerer down) while the revision is judged rolls it back as an analysis that could not be measured.
    :param plan_only: resolve the deployment, build and check the patch against it (the PATCH rules), run the
        analysis's preflight, then return and log the plan (from -> to, what the gate measures now) and stop:
        no write request is sent, nothing is recorded (see :mod:`airflow_provider.tasks.plan_only`).
    :param guard: a :class:`~airflow_provider.analysis.guard.Guard` (``Guard(analysis=..., for_seconds=86_400)``):
        once the revision landed, hand it to the guard and end: the guard keeps judging it from the triggerer for
        ``for_seconds`` against the baseline this task's analysis measured (a guard's check on the baseline needs a
        check of the same name in ``analysis``, with its preflight), and the guard's DAG
        (:func:`~airflow_provider.plugins.rollouts.guard_dag.guard_dag`) rolls it back to the revision that served
        before when it regresses. See ``docs/guides/guard.md``.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    notified_state_key = f"{TASK_STATE_KEY}/notified"
    template_fields = (
        "deployment_id",
        "deployment_name",
        "image_uri",
        "repo_ref",
        "source_revision_config",
        "source_config",
        "revision_source",
        "deployment_service_conn_id",
    )
    operator_extra_links = (DeploymentLink(),)

    def __init__(
        self,
        *,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        revision_source: str | None = None,
        source_config: dict[str, Any] | None = None,
        source_revision_config: dict[str, Any] | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        secret_references: list[dict[str, str]] | None = None,
        image_uri: str | None = None,
        repo_ref: str | None = None,
        wait_for_rollout: bool = True,
        verify: Callable[[Deployment], Any] | None = None,
        bake_seconds: float = 0,
        analysis: Analysis | None = None,
        rollback_on_failure: bool = False,
        resource_spec_mode: str = "merge",
        check_source_rules: bool = True,
        on_inconclusive: str = "fail",
        response_timeout: timedelta | float = DEFAULT_RESPONSE_TIMEOUT,
        notify: Mapping[str, Any] | None = None,
        plan_only: bool = False,
        guard: Guard | None = None,
        **kwargs: Any,
    ) -> None:
        from airflow_provider.analysis import Analysis
        from airflow_provider.tasks.guarding import checked_guard

        exactly_one_target(deployment_id, deployment_name)
        super().__init__(**kwargs)
        if resource_spec_mode not in RESOURCE_SPEC_MODES:
            raise ValueError(f"resource_spec_mode must be 'merge' or 'replace', got {resource_spec_mode!r}")
        self.resource_spec_mode = resource_spec_mode
        self.check_source_rules = check_source_rules
        if verify is not None and not callable(verify):
            raise ValueError(f"verify must be a callable given the live Deployment, got {type(verify).__name__}")
        self.verify = verify
        self.bake_seconds = non_negative_seconds(bake_seconds, "bake_seconds")
        self.rollback_on_failure = bool(rollback_on_failure)
        if analysis is not None:
            if not isinstance(analysis, Analysis):
                raise ValueError(
                    f"analysis must be an airflow_provider.analysis.Analysis, got {type(analysis).__name__}"
                )
            analysis.with_count_for(self.bake_seconds or None)  # count=None needs a bake: names analysis.count
        self.analysis = analysis
        self.on_inconclusive, self.response_timeout = checked_on_inconclusive(on_inconclusive, response_timeout)
        if self.on_inconclusive == "ask" and analysis is None:
            raise ValueError("on_inconclusive='ask' needs an analysis (only an analysis can be inconclusive)")
        self.notify = checked_notify(notify)
        self.guard = checked_guard(guard, analysis, wait_for_rollout=wait_for_rollout)
        judging = verify is not None or self.bake_seconds or analysis is not None or self.rollback_on_failure
        if judging and not wait_for_rollout:
            raise ValueError(
                "verify, bake_seconds, analysis and rollback_on_failure need wait_for_rollout=True (the default); "
                "it is False"
            )
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.revision_source = revision_source
        self.source_config = source_config
        self.source_revision_config = source_revision_config
        self.secrets = secrets
        self.secret_references = secret_references
        self.image_uri = image_uri
        self.repo_ref = repo_ref
        self.wait_for_rollout = wait_for_rollout
        self.plan_only = bool(plan_only)
        if wait_for_rollout:  # a kill while judging would leave the revision serving unjudged: refuse it now
            check_judging_task(self, analysis, what="the revision it rolls out")

    # ---- request
    def build_request(self) -> PatchDeploymentRequest:
        """The validated patch (secret values resolved and masked); nothing is sent."""
        target = self.deployment_id if self.deployment_name is None else repr(self.deployment_name)
        return build_patch_request(
            f"patch for deployment {target}",
            revision_source=self.revision_source,
            source_config=self.source_config,
            source_revision_config=self.source_revision_config,
            secrets=self._remember_secrets(resolve_secrets(self.secrets)),
            secret_references=self.secret_references,
            image_uri=self.image_uri,
            repo_ref=self.repo_ref,
        )

    def _remember_secrets(self, resolved: list[dict[str, str]] | None) -> list[dict[str, str]] | None:
        """Keep the resolved values in memory only, to scrub them from build logs and ``verify`` errors."""
        self._resolved_secrets = resolved
        return resolved

    # ---- execute
    def _run(self, context: Context) -> dict[str, Any]:
        """Patch (or reattach on a retry), push the XComs, and wait when asked to."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.decisions.spec_changes import changes_of, resource_spec_json
        from airflow_provider.tasks.analysis import check_analysis_sources, check_custom_urls
        from airflow_provider.tasks.patch.retry import (
            earlier_try_of,
            patch_fingerprint,
            record_patch,
            recorded_patch,
            sets_resource_spec,
            unrestorable_parts,
        )
        from airflow_provider.tasks.patch.verdict import landing_of, recorded_failed_verdict
        from airflow_provider.tasks.plan_only import patch_plan
        from airflow_provider.tasks.preflight import baselines_json, preflight_on_worker
        from airflow_provider.tasks.recording import record_landing_entry
        from airflow_provider.tasks.rollback.inputs import revision_config_snapshot

        ti = context["ti"]
        # First, so the extra link finds a value (not a missing XCom, logged as an error) when the task fails.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=None)
        if self.deployment_name is not None:
            name = checked_name(self.deployment_name)
            request = self.build_request()
            current = deployment_by_name(self.hook, name)
            deployment_id = current.id
            self.log.info("Deployment %r has id %s", name, deployment_id)
        else:
            deployment_id, _ = checked_ids(self.deployment_id, None)
            request = self.build_request()
            current = self._read(deployment_id)
        store = context.get("task_state_store")
        record = None if self.plan_only else recorded_patch(store, request, current, self.log)  # a plan resumes nothing
        if record is not None and isinstance(record.get("rollback"), dict):
            return self._resume_recorded_rollback(context, store, record, current)
        verdict = recorded_failed_verdict(record)
        if record is not None and verdict is not None:  # judged failed by an earlier try: never judged again
            return self._resume_failed_verdict(context, record, verdict, current)
        to_send = against_current(
            request,
            current,
            check_source_rules=self.check_source_rules,
            resource_spec_mode=self.resource_spec_mode,
            log=self.log,
        )
        if self.plan_only:  # checked as a rollout would be; nothing sent, nothing recorded
            return patch_plan(self, current, to_send)
        earlier = earlier_try_of(self, request, current, context, record)
        baseline = (record or {}).get("baseline")  # measured by the preflight of the try that patched
        if earlier is not None and earlier.rollback is not None:
            return self._resume_found_rollback(context, earlier, current)
        if earlier is None:
            if self.analysis is not None:  # an analysis that cannot run or never pass: fail before patching
                # Only here, on a fresh start: a retry goes on with what an earlier try patched or rolled back.
                try:
                    check_analysis_sources(self.hook, self.analysis)
                    check_custom_urls(self.analysis, [current], request_for=lambda _deployment: to_send)
                    baseline = baselines_json(preflight_on_worker(self, self.analysis, [current]), current.id)
                except Exception as err:
                    self._notify(
                        context,
                        "preflight_failed",
                        deployment_id=deployment_id,
                        revision_id=None,
                        deployment_name=current.name,
                        reason=str(err),
                    )
                    raise
            previous_active = current.active_revision_id
            previous_latest = current.latest_revision_id
            previous_config = revision_config_snapshot(self.hook, current, self.log)
            spec_before = resource_spec_json(current.source_config.resource_spec)
            previous_spec: dict[str, Any] | None = spec_before
            spec_changes: list[str] | None = list(changes_of(to_send, spec_before))
            not_restorable = unrestorable_parts(to_send, current)
            self.log.info("Patching %s: %s", current.summary(), describe_patch(to_send))
            deployment = self.hook.patch_deployment(deployment_id, to_send, previous_latest_revision_id=previous_latest)
            revision_id = deployment.latest_revision_id if deployment.latest_revision_id != previous_latest else None
        else:
            deployment, revision_id, previous_active = current, earlier.revision_id, earlier.previous_active
            previous_latest = None
            recorded = record or {}
            previous_config = dict(recorded.get("previous_source_revision_config") or earlier.previous_config or {})
            previous_spec = recorded.get("previous_resource_spec") if record is not None else earlier.previous_spec
            # The earlier patch's resource_spec changes: recorded, else none when it sets none, else unknown.
            unrecorded: list[str] | None = None if sets_resource_spec(to_send) else []
            spec_changes = recorded.get("resource_spec_changes") if record is not None else unrecorded
            not_restorable = list(recorded.get("not_restorable") or unrestorable_parts(to_send, None))
        patched = {
            "deployment_id": deployment_id,
            "fingerprint": patch_fingerprint(deployment_id, request),
            "revision_id": revision_id,
            "previous_active_revision_id": previous_active,
            "previous_latest_revision_id": previous_latest,
            "previous_source_revision_config": previous_config,
            "previous_resource_spec": previous_spec,
            "resource_spec_changes": spec_changes,
            "not_restorable": not_restorable,
            "baseline": baseline,
        }
        if record is None:  # patched now, or found on the service: a later try (and the rollback) has a record
            record_patch(store, patched, self.log)
        record_landing_entry(context, self.log, Kind.ROLLED_OUT, patched)
        if earlier is None:
            if revision_id:
                self.log.info("Patched; new revision %s (was active: %s)", revision_id, previous_active)
            else:
                self.log.info("Patched; no new revision was created (active revision %s)", previous_active)
        self._push_xcoms(ti, deployment, revision_id, previous_active, previous_config, previous_spec)
        if not self.wait_for_rollout:
            if revision_id:
                self.log.warning(
                    "wait_for_rollout=False: this task does not know whether revision %s of deployment %s will go "
                    "live (its build or deploy may still fail): wait for it downstream (DeploymentRolloutSensor) "
                    "or leave wait_for_rollout at its default, True",
                    revision_id,
                    deployment_id,
                )
            return deployment.model_dump(mode="json")
        if earlier is not None and earlier.failed:  # the earlier try's revision failed: report it again
            self._explain_failure(deployment_id, revision_id)
            record_landing_entry(context, self.log, Kind.FAILED, patched, message=earlier.failed)
            raise AirflowFailException(earlier.failed)
        self._previous_active_id = previous_active
        # What judging and rolling back need after a deferral (JSON, no secret); none when neither is asked.
        landing = landing_of(patched) if self._judges_live() or self.rollback_on_failure else None
        resume_kwargs = {"landing": landing} if landing else None
        if revision_id and self._judges_live():
            self.log.info("Waiting for revision %s: %s", revision_id, what_timeout_covers(self, self.analysis))
        try:
            live = self._wait(deployment, revision_id, resume_kwargs=resume_kwargs, carry=resume_kwargs)
        except AirflowSensorTimeout as err:
            return self._timed_out(context, err, landing, revision_id, previous_active)
        except AirflowFailException as err:  # the rollout failed: its build, superseded, deleted
            record_landing_entry(context, self.log, Kind.FAILED, patched, message=str(err))
            raise
        return self._judge_live(context, live, landing)

    def _push_xcoms(
        self,
        ti: Any,
        deployment: Deployment,
        revision_id: str | None,
        previous_active: str | None,
        previous_config: dict[str, str],
        previous_spec: dict[str, Any] | None,
    ) -> None:
        """Push the patch's XComs (again on a retry: Airflow clears a task's XComs when a try starts)."""
        ti.xcom_push(key=XCOM_DEPLOYMENT_ID, value=deployment.id)
        # "" for "no revision": a pushed None reads as a missing XCom downstream; the sensor reads "" as none.
        ti.xcom_push(key=XCOM_REVISION_ID, value=revision_id or "")
        ti.xcom_push(key=XCOM_PREVIOUS_ACTIVE_REVISION_ID, value=previous_active or "")
        ti.xcom_push(key=XCOM_PREVIOUS_SOURCE_REVISION_CONFIG, value=previous_config)
        if previous_spec is not None:  # unknown (a retry without a record, of a resource_spec patch): no value
            ti.xcom_push(key=XCOM_PREVIOUS_RESOURCE_SPEC, value=previous_spec)
        url = deployment.source_config.custom_url
        # Pushed even when absent, so the extra link finds a value instead of logging a missing XCom.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)

    def _push_landing_xcoms(self, context: Context, current: Deployment, landing: dict[str, Any]) -> None:
        """Push the patch's XComs again from a landing (a retry that goes on from an earlier try's record)."""
        self._push_xcoms(
            context["ti"],
            current,
            landing["revision_id"],
            landing["previous_active_revision_id"],
            landing["previous_source_revision_config"],
            landing["previous_resource_spec"],
        )

    # ---- resumes (the steps: tasks.patch_judging, tasks.patch_rollback)
    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, landing: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the rollout trigger fired; then verify, analyse and bake the live revision.

        ``landing`` comes from the resume kwargs, else from the trigger's event (``dag.test()`` drops the
        kwargs); a task with ``verify``, an analysis or a bake that gets neither fails instead of declaring
        the revision landed unjudged.
        """
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import checked_landing, recorded_landing
        from airflow_provider.tasks.recording import record_landing_entry
        from airflow_provider.tasks.waiting import resumed_value

        landing = resumed_value("landing", landing, event)
        if landing is None and (self._judges_live() or self.rollback_on_failure):
            landing = recorded_landing(context.get("task_state_store"), event, self.log)
        try:
            seen = event if isinstance(event, dict) else {}
            try:
                live = super().execute_complete(context, event)
            except AirflowSensorTimeout as err:
                return self._timed_out(context, err, landing, seen.get("revision_id"), None)
            except AirflowFailException as err:  # the rollout failed: its build, superseded, deleted
                record_landing_entry(context, self.log, Kind.FAILED, landing or seen, message=str(err))
                raise
            if self._judges_live():
                landing = checked_landing(landing, event, "execute_complete")
            return self._judge_live(context, live, landing)
        finally:
            self.close_hook()

    def execute_analysis_complete(
        self, context: Context, event: dict[str, Any] | None = None, carry: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the analysis trigger fired: land (after the bake when it is its own step), or roll back
        (or fail) on a failed or inconclusive verdict. The landing comes from the resume kwargs' ``carry``,
        else from the trigger's event (``dag.test()`` drops the kwargs), else from ``task_state_store``;
        without it the task fails to retry (a retry reattaches and analyses again), never lands. A trigger
        that could not analyse (an ``error`` event) fails the try the same way while a retry is left; on the
        last try the revision is inconclusive: rolled back (or failed) saying the analysis could not be
        measured."""
        try:
            return self._analysis_resumed(context, event, carry)
        finally:
            self.close_hook()

    def execute_bake_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        landing: dict[str, Any] | None = None,
        analysis: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Resume after the bake trigger fired: landed, or roll back when the revision left (``landing`` from
        the resume kwargs, else from the trigger's event; ``analysis``: the analysis that passed the revision
        before its bake, for the asset event)."""
        try:
            return self._bake_resumed(context, event, landing, analysis)
        finally:
            self.close_hook()

    def execute_rollback_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        landing: dict[str, Any] | None = None,
        rollback: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Resume after the rollback's revision went live (or not): fail naming both revisions (``landing``
        and ``rollback`` from the resume kwargs, else from the trigger's event; without them the task still
        fails, saying what it lacks)."""
        from airflow_provider.tasks.patch.verdict import rollback_not_live_message, rollback_resumed_unknown
        from airflow_provider.tasks.waiting import resumed_value

        landing = resumed_value("landing", landing, event)
        rollback = resumed_value("rollback", rollback, event)
        try:
            live = super().execute_complete(context, event)
        except AirflowSensorTimeout as err:
            if not isinstance(landing, dict) or not isinstance(rollback, dict):
                raise
            raise AirflowSensorTimeout(self._logged(rollback_not_live_message(landing, rollback, err))) from None
        if not isinstance(landing, dict) or not isinstance(rollback, dict):
            raise AirflowFailException(rollback_resumed_unknown(event, landing, rollback))
        self._rolled_back(context, landing, rollback, live)

    # ---- a rollout that did not go live in time, Airflow's deferral timeout
    def _timed_out(
        self,
        context: Context,
        err: AirflowSensorTimeout,
        landing: dict[str, Any] | None,
        revision_id: str | None,
        previous: str | None,
    ) -> dict[str, Any]:
        """The patch's revision did not go live within ``timeout``: the service may still deploy it. With
        ``rollback_on_failure``, roll back (recorded before sending, waited for) so that it does not end up
        serving; without, fail naming the revision that may still go live."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import may_still_go_live, own_xcom
        from airflow_provider.tasks.recording import record_entry

        if not revision_id:  # waiting for READY only: nothing of this patch is rolling out
            raise err
        if self.rollback_on_failure and landing is not None:
            return self._roll_back(context, landing, str(err), step="timeout")
        previous = previous or (landing or {}).get("previous_active_revision_id")
        previous = previous or own_xcom(context, XCOM_PREVIOUS_ACTIVE_REVISION_ID, self.log)
        deployment_id = (landing or {}).get("deployment_id") or own_xcom(context, XCOM_DEPLOYMENT_ID, self.log)
        record_entry(
            context,
            self.log,
            Kind.TIMED_OUT,
            deployment_id,
            revision_id,
            previous_revision_id=previous,
            step="timeout",
            message=str(err),
        )
        why = "rollback_on_failure is off" if not self.rollback_on_failure else "the resume has no record to roll back"
        raise AirflowSensorTimeout(may_still_go_live(err, revision_id, previous, why))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Resume as Airflow asks; when Airflow's deferral timeout ended a deferral (the triggerer down or too
        late), judge what the record says instead of failing with the revision serving unjudged."""
        if not deferral_timed_out(next_method, next_kwargs):
            return super().resume_execution(next_method, next_kwargs, context)
        try:
            return self._deferral_timed_out(context)
        finally:
            self.close_hook()

    def _deferral_timed_out(self, context: Context) -> dict[str, Any]:
        """A deferral ended by Airflow's timeout: a retry reattaches and goes on. On the last try, from the
        ``task_state_store`` record (without one, the try fails): a live revision not judged is rolled back as an
        analysis not measured (or as unjudged), one not live as a timed-out rollout; a recorded rollback is named."""
        from airflow_provider.tasks.analysis import no_retry_left
        from airflow_provider.tasks.patch.verdict import landing_of, own_xcom, read_record, rollback_not_live_message

        record = read_record(context.get("task_state_store"), self.log)
        revision_id = record.get("revision_id") if record else own_xcom(context, XCOM_REVISION_ID, self.log)
        where = f"deployment {record.get('deployment_id') if record else self.deployment_id}, revision {revision_id}"
        if not no_retry_left(context, self.retries):
            raise AirflowException(f"{where}: {DEFERRAL_TIMEOUT}; a retry reattaches to the revision and goes on")
        if record is None:
            raise AirflowException(f"{where}: {DEFERRAL_TIMEOUT}; no task_state_store record: it may serve, not judged")
        landing = landing_of(record)
        if isinstance(record.get("rollback"), dict):
            message = rollback_not_live_message(landing, record["rollback"], DEFERRAL_TIMEOUT)
            raise AirflowFailException(self._logged(message))
        current = self._read(landing["deployment_id"])
        if current.active_revision_id != landing["revision_id"]:
            return self._timed_out(context, AirflowSensorTimeout(DEFERRAL_TIMEOUT), landing, revision_id, None)
        if self.analysis is not None:
            return self._analysis_not_measured(context, landing, DEFERRAL_TIMEOUT)
        return self._roll_back(context, landing, f"could not be judged: {DEFERRAL_TIMEOUT}", step="unjudged")

    def _landed(self, context: Context, live: dict[str, Any], analysis: dict[str, Any] | None = None) -> dict[str, Any]:
        """The one place where the patch's revision is known to be live (verified, analysed and baked when
        asked): emit the deployment's asset event (with the analysis that passed it, if any) when the patch
        changed the revision serving."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.dry_run import dry_run_message
        from airflow_provider.tasks.events import emit_revision_event
        from airflow_provider.tasks.guarding import hand_landed_to_guard
        from airflow_provider.tasks.patch.verdict import own_xcom
        from airflow_provider.tasks.recording import record_entry

        self._judging_ended()  # stops here when on_kill already acted on the revision
        previous = getattr(self, "_previous_active_id", None) or own_xcom(
            context, XCOM_PREVIOUS_ACTIVE_REVISION_ID, self.log
        )
        if live.get("active_revision_id") and live.get("active_revision_id") != previous:
            record_entry(
                context,
                self.log,
                Kind.LANDED,
                live.get("id"),
                live.get("active_revision_id"),
                previous_revision_id=previous,
                verdict=analysis,
                message=dry_run_message(analysis),
            )
            emit_revision_event(
                context,
                live,
                previous_revision_id=previous,
                outlets=self.outlets,
                log=self.log,
                analysis=analysis,
            )
            self._notify(
                context,
                "rolled_out",
                deployment_id=live.get("id"),
                revision_id=live.get("active_revision_id"),
                deployment_name=live.get("name"),
                previous_revision_id=previous,
                analysis=analysis,
            )
            if self.guard is not None:
                hand_landed_to_guard(self, context, live, previous, analysis, TASK_STATE_KEY)
        return live

    def _explain_failure(self, deployment_id: str | None, revision_id: str | None) -> Revision | None:
        """Log the build log's tail; with ``rollback_on_failure``, say why a failed revision needs no rollback."""
        revision = super()._explain_failure(deployment_id, revision_id)
        if self.rollback_on_failure and revision is not None and revision.status.is_failed:
            self.log.warning(
                "Revision %s ended %s without going live: the previous revision kept serving, so there is "
                "nothing to roll back",
                revision_id,
                revision.status.value,
            )
        return revision

    def _secret_values(self) -> tuple[str, ...]:
        return self._known_secret_values() or ()

    def _known_secret_values(self) -> tuple[str, ...] | None:
        """The secret values this task sends, to scrub from build logs and ``verify`` errors; resolved again on a
        resume (a fresh operator: the values are never carried across a deferral). ``None`` when they cannot
        be resolved now (a Variable or Connection gone)."""
        resolved = getattr(self, "_resolved_secrets", None)
        if resolved is None and self.secrets is not None:
            try:
                resolved = self._remember_secrets(resolve_secrets(self.secrets))
            except Exception as err:  # never shown: it may name where the value lives, never the value itself
                self.log.warning("Could not resolve this task's secrets again to scrub them (%s)", type(err).__name__)
                return None
        return tuple(secret["value"] for secret in resolved or [])

    def _read(self, deployment_id: str) -> Deployment:
        try:
            return self.hook.get_deployment(deployment_id)
        except NotFoundError as err:  # nothing to patch: retrying will not make it appear
            raise AirflowFailException(str(err)) from None
