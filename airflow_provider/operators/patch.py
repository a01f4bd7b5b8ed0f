"""Patch a deployment and, optionally, wait until its new revision is live, verify and bake it, and roll
it back when either fails; a retry reattaches to what an earlier try did instead of patching (or rolling
back) twice."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.error_text import scrub
from airflow_provider.errors import DeploymentServiceError, NotFoundError
from airflow_provider.models import Deployment, PatchDeploymentRequest, Revision, RevisionStatus, SourceRevisionConfig
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
from airflow_provider.patch_rules import (
    RESOURCE_SPEC_MODES,
    describe_refusals,
    discouraged_fields,
    merge_resource_spec,
    refusals,
    unchanged_fixed_fields,
    without_unchanged_fixed_fields,
)
from airflow_provider.rollout import REVISION_ENDPOINT_MISSING, RolloutState, awaits_revision_build, rollout_verdict
from airflow_provider.tasks.base import (
    checked_ids,
    checked_name,
    deployment_by_name,
    exactly_one_target,
    non_negative_seconds,
)
from airflow_provider.tasks.events import emit_revision_event
from airflow_provider.tasks.patch_request import SecretValue, build_patch_request, describe_patch, resolve_secrets
from airflow_provider.tasks.rollback import (
    RESOURCE_SPEC_UNKNOWN,
    RollbackIntent,
    RollbackStarted,
    find_earlier_rollback,
    reattach_recorded_rollback,
    resource_spec_json,
    revision_config_snapshot,
    start_rollback,
)
from airflow_provider.tasks.waiting import bake, defer_bake, resumed_value

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "HISTORY_LOOKBACK",
    "TASK_STATE_KEY",
    "PatchDeploymentOperator",
]

TASK_STATE_KEY = "deployment_service_patch"
"""Key of the patch record in ``context["task_state_store"]`` (renaming it breaks in-flight retries)."""
HISTORY_LOOKBACK = 100
"""Revisions a retry without a record reads back (newest first) to recognise an earlier try's patch and rollback."""


def _own_xcom(context: Context, key: str, log: Any) -> str | None:
    """A string this task pushed under ``key`` earlier in this try (``None`` when absent or unreadable)."""
    ti = context["ti"]
    try:
        value = ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)
    except Exception as err:  # an asset event still goes out, without this value
        log.warning("Could not read the XCom %r back (%s)", key, err)
        return None
    return value if isinstance(value, str) and value else None


def _fingerprint(deployment_id: str, request: PatchDeploymentRequest) -> tuple[str, str]:
    """``(deployment_id, digest)`` of what a patch sets; secret values are left out (names only)."""
    shown = json.dumps(request.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return deployment_id, hashlib.sha256(f"{deployment_id}:{shown}".encode()).hexdigest()


class PatchDeploymentOperator(_RolloutWaitingOperator):
    """Patch a deployment and, optionally, wait until the revision it created is live.

    The patch is built and validated before any request (a misspelled field fails the task, naming it).
    The deployment is read first; on a retry the task reattaches to the revision its earlier try created
    (recorded in ``task_state_store``, or recognised on the deployment when no store is available)
    instead of patching again. Pushes the XComs ``deployment_id``, ``revision_id`` (the new latest
    revision, ``""`` when the patch created none), ``previous_active_revision_id`` (``""`` when there was
    no active revision), ``previous_source_revision_config`` (the non-secret revision fields that served
    before the patch: what :class:`RollbackDeploymentOperator` restores when the service cannot say),
    ``previous_resource_spec`` (the whole ``source_config.resource_spec`` before the patch, ``{}`` when none;
    not pushed when a retry without a record cannot know it) and,
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
    :param wait_for_rollout: wait until the new revision is live (status ``READY`` and active); how is set by
        ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`).
    :param verify: a callable given the live :class:`~airflow_provider.models.Deployment` (secrets redacted)
        once the new revision is live; raising, or returning a false value other than ``None`` (``False``,
        ``0``, ``""``), marks the revision bad; returning ``None`` (an assert-style check) or a true value
        passes. Runs on the worker (also with ``deferrable=True``: after the task resumes). Needs
        ``wait_for_rollout``.
    :param bake_seconds: seconds the new revision must then stay active with the deployment ``READY`` before
        it counts as landed (looked at every ``poll_interval``; deferred to a trigger when ``deferrable``).
        Needs ``wait_for_rollout``.
    :param rollback_on_failure: when ``verify`` or the bake fails, roll back to the revision active before
        the patch (its build, and the whole resource_spec recorded before the patch when the patch changed it,
        in one revision; secret values cannot be re-sent), wait until it serves again, then fail naming both
        revisions and, after "except:", what the rollback did not undo (secrets by name). The rollback is
        recorded in ``task_state_store`` before it is sent: a retry waits for it instead of rolling back (or
        patching) again. A failed build needs no rollback (the old revision never stopped serving): the task
        says so and fails.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

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
        wait_for_rollout: bool = False,
        verify: Callable[[Deployment], Any] | None = None,
        bake_seconds: float = 0,
        rollback_on_failure: bool = False,
        resource_spec_mode: str = "merge",
        check_source_rules: bool = True,
        **kwargs: Any,
    ) -> None:
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
        if (verify is not None or self.bake_seconds or self.rollback_on_failure) and not wait_for_rollout:
            raise ValueError("verify, bake_seconds and rollback_on_failure need wait_for_rollout=True")
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
        record = self._recorded_patch(store, request, current)
        if record is not None and isinstance(record.get("rollback"), dict):
            return self._resume_recorded_rollback(context, store, record, current)
        to_send = self._against_current(request, current)
        earlier = self._reattach(request, current, context, record)
        if earlier is not None and earlier.rollback is not None:
            return self._resume_found_rollback(context, earlier, current)
        if earlier is None:
            previous_active = current.active_revision_id
            previous_latest = current.latest_revision_id
            previous_config = revision_config_snapshot(self.hook, current, self.log)
            previous_spec: dict[str, Any] | None = resource_spec_json(current.source_config.resource_spec)
            not_restorable = _not_restorable(to_send, current)
            self.log.info("Patching %s: %s", current.summary(), describe_patch(to_send))
            deployment = self.hook.patch_deployment(deployment_id, to_send, previous_latest_revision_id=previous_latest)
            revision_id = deployment.latest_revision_id if deployment.latest_revision_id != previous_latest else None
            self._record(
                store,
                {
                    "deployment_id": deployment_id,
                    "fingerprint": _fingerprint(deployment_id, request)[1],
                    "revision_id": revision_id,
                    "previous_active_revision_id": previous_active,
                    "previous_latest_revision_id": previous_latest,
                    "previous_source_revision_config": previous_config,
                    "previous_resource_spec": previous_spec,
                    "not_restorable": not_restorable,
                },
            )
            if revision_id:
                self.log.info("Patched; new revision %s (was active: %s)", revision_id, previous_active)
            else:
                self.log.info("Patched; no new revision was created (active revision %s)", previous_active)
        else:
            deployment, revision_id, previous_active = current, earlier.revision_id, earlier.previous_active
            recorded = record or {}
            previous_config = dict(recorded.get("previous_source_revision_config") or earlier.previous_config or {})
            previous_spec = recorded.get("previous_resource_spec") if record is not None else None
            not_restorable = list(recorded.get("not_restorable") or _not_restorable(to_send, None))
            if record is None:  # found on the service: record it, so a later try (and the rollback) has a record
                self._record(
                    store,
                    {
                        "deployment_id": deployment_id,
                        "fingerprint": _fingerprint(deployment_id, request)[1],
                        "revision_id": revision_id,
                        "previous_active_revision_id": previous_active,
                        "previous_latest_revision_id": None,
                        "previous_source_revision_config": previous_config,
                        "previous_resource_spec": None,
                        "not_restorable": not_restorable,
                    },
                )
        self._push_xcoms(ti, deployment, revision_id, previous_active, previous_config, previous_spec)
        if not self.wait_for_rollout:
            return deployment.model_dump(mode="json")
        self._previous_active_id = previous_active
        landing = self._landing(
            deployment_id, revision_id, previous_active, previous_config, previous_spec, not_restorable
        )
        resume_kwargs = {"landing": landing} if landing else None
        live = self._wait(deployment, revision_id, resume_kwargs=resume_kwargs, carry=resume_kwargs)
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
        # "" rather than None for "no revision": Airflow reads a pushed None under a custom key as a missing
        # XCom, so XComArg(patch, key="revision_id") would fail downstream. The sensor reads "" as none.
        ti.xcom_push(key=XCOM_REVISION_ID, value=revision_id or "")
        ti.xcom_push(key=XCOM_PREVIOUS_ACTIVE_REVISION_ID, value=previous_active or "")
        ti.xcom_push(key=XCOM_PREVIOUS_SOURCE_REVISION_CONFIG, value=previous_config)
        if previous_spec is not None:  # unknown (a retry without a record): no value rather than a wrong one
            ti.xcom_push(key=XCOM_PREVIOUS_RESOURCE_SPEC, value=previous_spec)
        url = deployment.source_config.custom_url
        # Pushed even when absent, so the extra link finds a value instead of logging a missing XCom.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)

    # ---- automatic rollback (verify, bake, roll back)
    def _landing(
        self,
        deployment_id: str,
        revision_id: str | None,
        previous_active: str | None,
        previous_config: dict[str, str],
        previous_spec: dict[str, Any] | None = None,
        not_restorable: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """What judging the live revision and rolling it back need after a deferral or on a retry (JSON, no
        secret); ``None`` when there is nothing to judge (no ``verify``, no bake).

        ``previous_resource_spec`` is the whole resource_spec before the patch (``None``: unknown);
        ``not_restorable`` names the parts of the patch no rollback undoes (secrets by name).
        """
        if not self._judges_live():
            return None
        return {
            "deployment_id": deployment_id,
            "revision_id": revision_id,
            "previous_active_revision_id": previous_active,
            "previous_source_revision_config": previous_config,
            "previous_resource_spec": previous_spec,
            "not_restorable": list(not_restorable),
        }

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, landing: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the rollout trigger fired; then verify and bake the live revision (on the worker).

        ``landing`` comes from the resume kwargs, else from the trigger's event (``dag.test()`` drops the
        kwargs); a task with ``verify`` or a bake that gets neither fails instead of declaring the revision
        landed unjudged.
        """
        landing = resumed_value("landing", landing, event) or self._recorded_landing(context, event)
        live = super().execute_complete(context, event)
        try:
            if self._judges_live():
                landing = self._checked_landing(landing, event, "execute_complete")
            return self._judge_live(context, live, landing)
        finally:
            self.close_hook()

    def _recorded_landing(self, context: Context, event: Any) -> dict[str, Any] | None:
        """The landing of this task's ``task_state_store`` record, when it is the one of the revision ``event``
        is about (a resume that got the landing neither in its kwargs nor in the trigger's event: a trigger
        serialized by an earlier provider version); ``None`` otherwise."""
        store = context.get("task_state_store")
        if not self._judges_live() or store is None or not isinstance(event, dict):
            return None
        try:
            record = store.get(TASK_STATE_KEY)
        except Exception as err:  # the store is a fallback here
            self.log.warning("Could not read task_state_store (%s)", err)
            return None
        if not isinstance(record, dict) or record.get("deployment_id") != event.get("deployment_id"):
            return None
        if record.get("revision_id") != event.get("revision_id"):
            return None
        self.log.info("Resumed without the landing in the kwargs or the event: taking it from task_state_store")
        return self._landing_of(record)

    def _judges_live(self) -> bool:
        """Whether a live revision is judged (``verify`` or a bake) before it counts as landed."""
        return self.verify is not None or bool(self.bake_seconds)

    @staticmethod
    def _checked_landing(landing: Any, event: Any, method: str) -> dict[str, Any]:
        """``landing`` when it has what verify, the bake and the rollback need; else :class:`AirflowException`
        (a retry reattaches to the revision and judges it again) naming what is missing."""
        needed = ("deployment_id", "revision_id", "previous_active_revision_id")
        missing = [key for key in needed if not isinstance(landing, dict) or key not in landing]
        if not missing:
            return dict(landing)
        seen = event if isinstance(event, dict) else {}
        raise AirflowException(
            f"deployment {seen.get('deployment_id')}: revision {seen.get('revision_id')} is live, but {method} "
            f"resumed without {', '.join(missing)} of 'landing' (neither in the resume kwargs nor in the "
            "trigger's event): without them verify, the bake and the rollback cannot run, so the revision is "
            "not declared landed. A retry reattaches to it and judges it again"
        )

    def _judge_live(self, context: Context, live: dict[str, Any], landing: dict[str, Any] | None) -> dict[str, Any]:
        """Run ``verify`` on the live deployment, then the bake; roll back (or fail) when either fails."""
        if landing is None:
            return self._landed(context, live)
        reason = self._verify_failure(live)
        revision_id = landing["revision_id"]
        if reason is None and self.bake_seconds and revision_id:
            if self.deferrable:
                defer_bake(
                    self,
                    self.hook,
                    landing["deployment_id"],
                    revision_id,
                    self.bake_seconds,
                    method_name="execute_bake_complete",
                    kwargs={"landing": landing},
                )
            reason = bake(
                self.hook, landing["deployment_id"], revision_id, self.bake_seconds, self.poll_interval, self.log
            )
        if reason is None:
            return self._landed(context, live)
        return self._roll_back(context, landing, reason)

    def execute_bake_complete(
        self, context: Context, event: dict[str, Any] | None = None, landing: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the bake trigger fired: landed, or roll back when the revision left (``landing`` from
        the resume kwargs, else from the trigger's event)."""
        try:
            if not isinstance(event, dict):
                raise AirflowException(f"unexpected event from DeploymentBakeTrigger: {event!r}")
            landing = self._checked_landing(
                resumed_value("landing", landing, event) or self._recorded_landing(context, event),
                event,
                "execute_bake_complete",
            )
            message = str(event.get("message", ""))
            if event.get("status") == "baked":
                self.log.info("%s", message)
                return self._landed(context, event.get("deployment") or {})
            if event.get("status") == "left":
                return self._roll_back(context, landing, message)
            raise AirflowException(f"could not watch the bake: {message}")
        finally:
            self.close_hook()

    def _verify_failure(self, live: dict[str, Any]) -> str | None:
        """Why ``verify`` says the live revision is bad, or ``None`` (also when there is no ``verify``)."""
        if self.verify is None:
            return None
        deployment = Deployment.model_validate(live)
        try:
            verdict = self.verify(deployment)
        except Exception as err:  # any failure of the user's check means the revision is bad
            shown = scrub(f"{type(err).__name__}: {err}", self._secret_values())
            return f"verify raised {shown}"
        if verdict is not None and not verdict:  # None passes: an assert-style check returns nothing when good
            return f"verify returned {verdict!r}"
        self.log.info("verify accepted revision %s", deployment.active_revision_id)
        return None

    def _roll_back(self, context: Context, landing: dict[str, Any], reason: str) -> dict[str, Any]:
        """The live revision is bad: fail, after rolling back when ``rollback_on_failure``."""
        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        previous = landing.get("previous_active_revision_id")
        bad = f"deployment {deployment_id}: revision {revision_id} went live but {reason}"
        if not self.rollback_on_failure:
            raise AirflowFailException(
                f"{bad}; not rolling back (rollback_on_failure is off; revision {previous} served before the patch)"
            )
        if not revision_id or not previous:
            what = "the patch created no revision" if not revision_id else "no revision served before the patch"
            raise AirflowFailException(f"{bad}; cannot roll back: {what}")
        self.log.error("%s; rolling back to revision %s", bad, previous)
        return self._send_rollback(context, landing, reason, self._read(deployment_id))

    def _send_rollback(
        self, context: Context, landing: dict[str, Any], reason: str, current: Deployment
    ) -> dict[str, Any]:
        """Roll back to the revision that served before the patch, its resource_spec included; record the
        rollback in ``task_state_store`` before the request (a retry then knows one may be out) and once sent
        (a retry waits for it instead of rolling back twice); wait for it; fail."""
        store = context.get("task_state_store")
        patch_clauses = list(landing.get("not_restorable") or [])

        def before_sending(intent: RollbackIntent) -> None:
            record = intent.record()
            record["not_restored"] = _merged(record.get("not_restored"), patch_clauses)
            self._record_rollback(store, landing, {"reason": reason, **record})

        started = start_rollback(
            self.hook,
            current,
            landing["previous_active_revision_id"],
            rolling_back_from=landing["revision_id"],
            fallback_config=landing.get("previous_source_revision_config") or None,
            resource_spec=landing.get("previous_resource_spec"),
            before_sending=before_sending,
            log=self.log,
        )
        rollback = self._rollback_record(started, reason, patch_clauses)
        self._record_rollback(store, landing, rollback)
        if rollback["not_restored"]:
            self.log.warning(
                "The rollback of revision %s does not undo: %s", landing["revision_id"], _clauses(rollback)
            )
        return self._wait_for_rollback(landing, rollback, started.deployment)

    @staticmethod
    def _rollback_record(
        started: RollbackStarted, reason: str, patch_clauses: Sequence[str], *, origin: str | None = None
    ) -> dict[str, Any]:
        """The JSON of a sent rollback (``task_state_store``, the trigger's carry): the contract's record, why
        it was rolled back, and the parts of the patch no rollback undoes (secrets by name)."""
        record = started.record()
        record["not_restored"] = _merged(record.get("not_restored"), patch_clauses)
        return {"reason": reason, **record, **({"origin": origin} if origin else {})}

    def _wait_for_rollback(
        self, landing: dict[str, Any], rollback: dict[str, Any], deployment: Deployment
    ) -> dict[str, Any]:
        """Wait (or defer) until the rollback's revision serves, then fail saying what was rolled back."""
        resume_kwargs = {"landing": landing, "rollback": rollback}
        live = self._wait(
            deployment,
            rollback["revision_id"],
            resume="execute_rollback_complete",
            resume_kwargs=resume_kwargs,
            allowed_latest_revision_id=rollback.get("allowed_latest_revision_id"),
            carry=resume_kwargs,
        )
        raise AirflowFailException(self._rolled_back_message(landing, rollback, live))

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
        landing = resumed_value("landing", landing, event)
        rollback = resumed_value("rollback", rollback, event)
        live = super().execute_complete(context, event)
        if not isinstance(landing, dict) or not isinstance(rollback, dict):
            seen = event if isinstance(event, dict) else {}
            missing = [name for name, value in (("landing", landing), ("rollback", rollback)) if value is None]
            raise AirflowFailException(
                f"deployment {seen.get('deployment_id')}: the automatic rollback's revision {seen.get('revision_id')} "
                f"is live, but execute_rollback_complete resumed without {' and '.join(missing) or 'a valid record'} "
                "(neither in the resume kwargs nor in the trigger's event): which revision was rolled back, why, and "
                "what the rollback restored are unknown"
            )
        raise AirflowFailException(self._rolled_back_message(landing, rollback, live))

    def _rolled_back_message(self, landing: dict[str, Any], rollback: dict[str, Any], live: dict[str, Any]) -> str:
        """The failure message of a rolled-back patch: "rolled back" only when the previous build serves again
        with its previous resource_spec (judged again on the live deployment); otherwise "rolled back ...
        except: <what the rollback did not undo>". Also logged, as an error."""
        not_restored = list(rollback.get("not_restored") or [])
        if live:
            shown = Deployment.model_validate(live)
            not_restored = list(RollbackStarted.from_record(rollback, shown).judged_on(shown).not_restored)
        how = rollback.get("path")
        if rollback.get("origin"):
            how = f"{how}, {rollback['origin']}"
        head = (
            f"deployment {landing.get('deployment_id')}: revision {landing.get('revision_id')} went live but "
            f"{rollback.get('reason')}; rolled back to revision {landing.get('previous_active_revision_id')} ({how})"
        )
        if not not_restored:
            message = f"{head}, which serves again as revision {rollback.get('revision_id')}"
        else:
            message = f"{head} as revision {rollback.get('revision_id')}, except: {'; '.join(not_restored)}"
        self.log.error("%s", message)
        return message

    def _record_rollback(self, store: Any, landing: dict[str, Any], rollback: dict[str, Any]) -> None:
        """Write ``rollback`` into this task's ``task_state_store`` record (not fatal when the store fails: a retry
        then judges from the service)."""
        if store is None:
            return
        try:
            recorded = store.get(TASK_STATE_KEY)
            if not isinstance(recorded, dict) or recorded.get("deployment_id") != landing.get("deployment_id"):
                self.log.warning("No task_state_store record of the patch to add the rollback to; not recording it")
                return
            store.set(TASK_STATE_KEY, {**recorded, "rollback": rollback})
        except Exception as err:
            self.log.warning("Could not record the rollback in task_state_store (%s)", err)

    # ---- retries: an earlier try's rollback
    def _resume_recorded_rollback(
        self, context: Context, store: Any, record: dict[str, Any], current: Deployment
    ) -> dict[str, Any]:
        """An earlier try recorded its rollback: wait for it (sent, or found landed), send it (it never reached
        the service), or fail saying what the deployment shows; never a second rollback, never success."""
        landing = self._landing_of(record)
        rollback = dict(record["rollback"])
        self._push_xcoms(
            context["ti"],
            current,
            landing["revision_id"],
            landing["previous_active_revision_id"],
            landing["previous_source_revision_config"],
            landing["previous_resource_spec"],
        )
        reason = str(rollback.get("reason") or "verify or the bake failed in an earlier try")
        started = reattach_recorded_rollback(self.hook, current, rollback, log=self.log)
        if started is None:
            self.log.warning(
                "An earlier try was rolling revision %s back to revision %s when it stopped, and the rollback did "
                "not reach the service: rolling back now",
                landing["revision_id"],
                landing["previous_active_revision_id"],
            )
            return self._send_rollback(context, landing, reason, current)
        if rollback.get("phase") == "sent":
            rollback = {**rollback, "not_restored": list(started.not_restored)}
        else:  # recorded before sending, found landed: record it as sent
            rollback = self._rollback_record(
                started, reason, landing["not_restorable"], origin="an earlier try's, found on the service"
            )
            self._record_rollback(store, landing, rollback)
        self.log.warning(
            "An earlier try rolled revision %s back to revision %s: waiting for its revision %s instead of rolling "
            "back again",
            landing["revision_id"],
            landing["previous_active_revision_id"],
            started.revision_id,
        )
        return self._wait_for_rollback(landing, rollback, current)

    def _resume_found_rollback(self, context: Context, earlier: _EarlierTry, current: Deployment) -> dict[str, Any]:
        """An earlier try's rollback recognised on the service (no record): wait for it, then fail."""
        assert earlier.rollback is not None
        landing = self._landing_of(earlier.rollback["landing"])
        rollback = earlier.rollback["rollback"]
        self._push_xcoms(
            context["ti"],
            current,
            landing["revision_id"],
            landing["previous_active_revision_id"],
            landing["previous_source_revision_config"],
            None,
        )
        self.log.warning(
            "%s: revision %s (this patch's config) was followed by revision %s, which copies revision %s: an "
            "earlier try's automatic rollback (no task_state_store record). Waiting for it instead of patching again",
            current.summary(),
            landing["revision_id"],
            rollback["revision_id"],
            landing["previous_active_revision_id"],
        )
        return self._wait_for_rollback(landing, rollback, current)

    @staticmethod
    def _landing_of(record: dict[str, Any]) -> dict[str, Any]:
        """The landing stored in (or built from) a record: every key present."""
        return {
            "deployment_id": record.get("deployment_id"),
            "revision_id": record.get("revision_id"),
            "previous_active_revision_id": record.get("previous_active_revision_id"),
            "previous_source_revision_config": dict(record.get("previous_source_revision_config") or {}),
            "previous_resource_spec": record.get("previous_resource_spec"),
            "not_restorable": list(record.get("not_restorable") or []),
        }

    def _landed(self, context: Context, live: dict[str, Any]) -> dict[str, Any]:
        """The one place where the patch's revision is known to be live (verified and baked when asked):
        emit the deployment's asset event when the patch changed the revision serving."""
        previous = getattr(self, "_previous_active_id", None) or _own_xcom(
            context, XCOM_PREVIOUS_ACTIVE_REVISION_ID, self.log
        )
        if live.get("active_revision_id") and live.get("active_revision_id") != previous:
            emit_revision_event(context, live, previous_revision_id=previous, outlets=self.outlets, log=self.log)
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
        return tuple(secret["value"] for secret in getattr(self, "_resolved_secrets", None) or [])

    def _against_current(self, request: PatchDeploymentRequest, current: Deployment) -> PatchDeploymentRequest:
        """The patch to send to ``current``: production's rules checked (unless ``check_source_rules`` is
        off), create-time fields that would not change left out, a partial resource_spec completed."""
        if self.check_source_rules:
            found = refusals(request, current)
            if found:
                raise AirflowFailException(
                    f"{describe_refusals(found, current)}; pass check_source_rules=False to send it anyway"
                )
        try:
            unchanged = unchanged_fixed_fields(request, current)
            to_send = without_unchanged_fixed_fields(request, current)
            if unchanged:
                self.log.info(
                    "Not sending source_config.%s: unchanged, and it cannot change after creation",
                    ", source_config.".join(unchanged),
                )
            if self.resource_spec_mode == "merge":
                merged = merge_resource_spec(to_send, current)
                to_send = merged.request
                if merged.kept:
                    self.log.info(
                        "Sending the whole source_config.resource_spec (production replaces it): kept %s from the "
                        "deployment's current one (resource_spec_mode='replace' sends only what you gave)",
                        ", ".join(merged.kept),
                    )
                if merged.dropped:
                    self.log.warning(
                        "Not keeping %s from the deployment's current resource_spec: a limit below its new request "
                        "(production set it to twice the old request); left out, so the service sets it to twice "
                        "the new request",
                        ", ".join(merged.dropped),
                    )
                if merged.left_out:
                    self.log.warning(
                        "The deployment's current resource_spec has fields this provider cannot send, left out "
                        "of the patch (production drops them): %s",
                        ", ".join(merged.left_out),
                    )
        except ValueError as err:
            raise AirflowFailException(f"deployment {current.name!r} ({current.id}): {err}") from None
        discouraged = discouraged_fields(to_send)
        if discouraged:
            self.log.warning(
                "%s: production's reference marks these fields 'do not use'; they are sent, but may be ignored",
                ", ".join(discouraged),
            )
        return to_send

    def _read(self, deployment_id: str) -> Deployment:
        try:
            return self.hook.get_deployment(deployment_id)
        except NotFoundError as err:  # nothing to patch: retrying will not make it appear
            raise AirflowFailException(str(err)) from None

    def _recorded_patch(
        self, store: Any, request: PatchDeploymentRequest, current: Deployment
    ) -> dict[str, Any] | None:
        """This patch's record from an earlier try (``task_state_store``), or ``None``: none, unreadable, another
        deployment's, or another patch's (the task's arguments changed between tries)."""
        if store is None:
            return None
        try:
            recorded = store.get(TASK_STATE_KEY)
        except Exception as err:  # the store is an optimisation; fall back to the deployment's state
            self.log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
            return None
        if not isinstance(recorded, dict):
            return None
        if recorded.get("fingerprint") != _fingerprint(current.id, request)[1]:
            self.log.info("The patch recorded by an earlier try differs from this one; patching anew")
            return None
        return recorded if recorded.get("deployment_id") == current.id else None

    def _reattach(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        context: Context,
        recorded: dict[str, Any] | None,
    ) -> _EarlierTry | None:
        """What an earlier try of this patch left to reattach to (its revision, or its rollback found on the
        service); ``None`` to patch now."""
        if recorded is not None:
            revision_id = recorded.get("revision_id")
            previous_active = recorded.get("previous_active_revision_id")
            source = "recorded by an earlier try"
            previous_config = None
        else:
            try_number = getattr(context["ti"], "try_number", 1) or 1
            if try_number <= 1:
                return None
            found = self._earlier_try_on_service(request, current, context)
            if found is None or found.rollback is not None:
                return found
            revision_id, previous_active = found.revision_id, found.previous_active
            source = f"found on the deployment (try {try_number}, no task_state_store record)"
            previous_config = found.previous_config
        revision = None
        if awaits_revision_build(current, revision_id):
            assert revision_id is not None
            with contextlib.suppress(DeploymentServiceError):  # optional endpoint: absent or failing is fine
                revision = self.hook.get_revision(current.id, revision_id)
        verdict = rollout_verdict(current, revision_id, revision, deployment_id=current.id)
        if verdict.state is RolloutState.FAILED and revision_id is not None:
            if revision is not None and revision.status.is_failed:
                self.log.warning("The earlier try's revision failed (%s); patching again", verdict.message)
                return None
            # Superseded or going away: patching again would roll back whatever replaced our revision.
            raise AirflowFailException(f"not patching again on this retry: {verdict.message}")
        self.log.info("Reattaching to the patch %s: revision %s, not patching again", source, revision_id)
        return _EarlierTry(revision_id, previous_active, previous_config)

    def _earlier_try_on_service(
        self, request: PatchDeploymentRequest, current: Deployment, context: Context
    ) -> _EarlierTry | None:
        """An earlier try's patch (or patch and automatic rollback) recognised on the service, without a record.

        Untouched since the DAG run started: nothing to reattach to. Otherwise, with ``rollback_on_failure``
        (an earlier try may have rolled its revision back, so the deployment no longer shows the patch), the
        revision list must give positive evidence: a revision made since the run started with the patch's
        config, then (for a rollback) a newer latest one copying the revision before it. What cannot be told
        fails the task, saying what was seen: never the bad patch again, never a success it cannot prove.
        Without ``rollback_on_failure``: the deployment showing the patch.
        """
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        started = started if isinstance(started, datetime) else None
        if started is not None and current.updated_at < started:  # not changed since this run started
            return None
        if not self.rollback_on_failure or started is None:
            return self._reflected(request, current)
        history = self._history_since(current, started)
        wanted = request.source_revision_config.model_dump(exclude_none=True) if request.source_revision_config else {}
        wanted.pop("repo_commit_sha", None)
        if history is None:  # no revision list endpoint
            if wanted and request.is_reflected_in(current):  # a rollback would have restored the old config
                return self._reflected(request, current)
            return self._cannot_tell(current, started, "the service has no revision list endpoint to tell")
        made, before = history
        if not made:
            return self._reflected(request, current)
        if not wanted:
            if len(made) == 1:
                return self._reflected(request, current)
            return self._cannot_tell(
                current,
                started,
                f"{len(made)} revisions were made since ({_listed(made)}), and this patch sets no revision field "
                "that would tell its revision from an automatic rollback's",
            )
        mine = [index for index, item in enumerate(made) if _has_fields(item, wanted)]
        if not mine:
            return None  # the earlier try's patch never made its revision: patch now
        index = mine[0]
        patched = made[index]
        previous = made[index + 1] if index + 1 < len(made) else before
        if index == 0:  # the latest revision has this patch's config and was made since the run started
            redeployed = self._redeployed_in_place(request, current, patched, previous)
            return redeployed or self._patched_revision(current, patched, previous)
        if previous is not None and previous.source_revision_config is not None:
            found = self._found_rollback(request, current, started, patched, previous)
            if found is not None:
                return found
        return self._cannot_tell(
            current,
            started,
            f"revision {patched.id} with this patch's config was made since, then {_listed(made[:index])}, "
            f"the latest of which does not copy the revision before it ({previous.id if previous else 'unknown'})",
        )

    def _redeployed_in_place(
        self, request: PatchDeploymentRequest, current: Deployment, patched: Revision, previous: Revision | None
    ) -> _EarlierTry | None:
        """The earlier try's rollback when the service redeployed the previous revision without making a new
        one: ``patched`` went live (``DEPLOYED``), and the revision before it is active again or being deployed
        again (an older revision only deploys again when redeployed)."""
        if previous is None or previous.source_revision_config is None or patched.status is not RevisionStatus.DEPLOYED:
            return None
        in_progress = not previous.status.is_terminal and previous.status is not RevisionStatus.UNKNOWN
        if current.active_revision_id != previous.id and not in_progress:
            return None
        started = RollbackStarted(
            "redeploy",
            previous.id,
            previous.id,
            patched.id,
            current,
            _config_fields(previous.source_revision_config),
            not_restored=(RESOURCE_SPEC_UNKNOWN,) if current.source_config.resource_spec is not None else (),
            allowed_latest_revision_id=patched.id,
            previous_latest_revision_id=patched.id,
        )
        return self._earlier_rollback(request, current, patched, previous, started)

    @staticmethod
    def _patched_revision(current: Deployment, patched: Revision, previous: Revision | None) -> _EarlierTry:
        """Reattach to ``patched``, the earlier try's revision; what served before it is the active revision
        while it builds, else the revision before it when that one had been deployed."""
        if current.active_revision_id != patched.id:
            served = previous if previous is not None and previous.id == current.active_revision_id else None
        elif previous is not None and previous.status is RevisionStatus.DEPLOYED:
            served = previous
        else:
            return _EarlierTry(patched.id, None)
        config = _config_fields(served.source_revision_config) if served and served.source_revision_config else None
        return _EarlierTry(patched.id, served.id if served else current.active_revision_id, previous_config=config)

    @staticmethod
    def _reflected(request: PatchDeploymentRequest, current: Deployment) -> _EarlierTry | None:
        """Reattach to the revision the deployment shows when it shows every value of this patch."""
        if not request.is_reflected_in(current):
            return None
        if request.creates_revision and current.latest_revision_id is None:
            return None
        # A resource_spec patch creates a revision in production and none under the spec's reading: an
        # earlier try's revision is the latest one while it rolls out (once live, waiting for READY is the same).
        created = request.creates_revision or (request.may_create_revision and current.is_rolling_out)
        revision_id = current.latest_revision_id if created else None
        previous_active = current.active_revision_id if current.active_revision_id != revision_id else None
        return _EarlierTry(revision_id, previous_active)

    def _found_rollback(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        started: datetime,
        patched: Revision,
        previous: Revision,
    ) -> _EarlierTry | None:
        """The earlier try's automatic rollback of ``patched`` to ``previous`` when the service shows positive
        evidence of it (:func:`~airflow_provider.tasks.rollback.find_earlier_rollback`); ``None`` when it
        shows none."""
        assert previous.source_revision_config is not None
        previous_config = _config_fields(previous.source_revision_config)
        found = find_earlier_rollback(
            self.hook,
            current,
            previous.id,
            since=started,
            rolling_back_from=patched.id,
            fallback_config=previous_config,
            log=self.log,
        )
        if found is None:
            return None
        return self._earlier_rollback(request, current, patched, previous, found)

    def _earlier_rollback(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        patched: Revision,
        previous: Revision,
        found: RollbackStarted,
    ) -> _EarlierTry:
        """What a retry without a record reattaches to when it found its earlier try's rollback."""
        assert previous.source_revision_config is not None
        previous_config = _config_fields(previous.source_revision_config)
        not_restorable = _not_restorable(request, None)
        landing = {
            "deployment_id": current.id,
            "revision_id": patched.id,
            "previous_active_revision_id": previous.id,
            "previous_source_revision_config": previous_config,
            "not_restorable": not_restorable,
        }
        reason = "verify or the bake failed in an earlier try (that try's log says why; no task_state_store record)"
        rollback = self._rollback_record(found, reason, not_restorable, origin="an earlier try's, found on the service")
        return _EarlierTry(patched.id, previous.id, previous_config, {"landing": landing, "rollback": rollback})

    @staticmethod
    def _cannot_tell(current: Deployment, started: datetime, seen: str) -> NoReturn:
        """Fail: the deployment changed since the run started and does not prove what an earlier try did."""
        raise AirflowFailException(
            f"not patching on this retry: {current.summary()} changed since this DAG run started "
            f"({started.isoformat()}) and there is no task_state_store record of an earlier try; {seen}. An earlier "
            "try may have patched and "
            "rolled back (patching again would re-apply a change that failed verify or its bake), or someone else "
            "changed the deployment. Check its revisions, then clear the task to patch again"
        )

    def _history_since(self, current: Deployment, started: datetime) -> tuple[list[Revision], Revision | None] | None:
        """``(revisions made since started, newest first; the newest one before it)`` from the revision list
        endpoint; ``None`` when the service has no such endpoint."""
        made: list[Revision] = []
        before: Revision | None = None
        try:
            revisions = sorted(
                self.hook.iter_revisions(current.id, max_results=HISTORY_LOOKBACK),
                key=lambda item: item.created_at or datetime.min.replace(tzinfo=timezone.utc),
                reverse=True,
            )
        except DeploymentServiceError as err:
            if err.status_code in REVISION_ENDPOINT_MISSING:
                self.log.info("The revision list endpoint is not available (%s)", err)
                return None
            raise
        for revision in revisions:
            if revision.created_at is not None and revision.created_at >= started:
                made.append(revision)
            else:
                before = revision
                break
        return made, before

    def _record(self, store: Any, record: dict[str, Any]) -> None:
        """Record this try's patch in ``task_state_store`` (JSON, no secret; not fatal when the store fails)."""
        if store is None:
            return
        try:
            store.set(TASK_STATE_KEY, record)
        except Exception as err:  # not fatal: a retry still recognises the patch on the deployment
            self.log.warning("Could not record the patch in task_state_store (%s)", err)


@dataclass(frozen=True)
class _EarlierTry:
    """What a retry of the patch task reattaches to.

    :param revision_id: the earlier try's revision (``None``: its patch created none).
    :param previous_active: the revision active before that patch (``None``: unknown or none).
    :param previous_config: that revision's non-secret ``source_revision_config`` fields, when found without a
        record (``None``: take the record's).
    :param rollback: ``{"landing", "rollback"}`` when that try's automatic rollback was recognised on the service.
    """

    revision_id: str | None
    previous_active: str | None
    previous_config: dict[str, str] | None = None
    rollback: dict[str, Any] | None = None


def _not_restorable(request: PatchDeploymentRequest, current: Deployment | None) -> list[str]:
    """Clauses naming the parts of ``request`` no automatic rollback undoes (secret names only, never values).

    :param request: the patch as sent.
    :param current: the deployment before the patch; ``None`` when unknown (every ``source_config`` field the
        patch gives is then named).
    """
    clauses = []
    if request.secrets is not None:
        names = sorted({secret.name for secret in request.secrets})
        removed = sorted({secret.name for secret in current.secrets or []} - set(names)) if current else []
        listed = f"secrets {', '.join(names)}" if names else "secrets (the patch sent an empty list)"
        if removed:
            listed += f", and removed {', '.join(removed)}"
        clauses.append(f"{listed} (the rollback cannot restore secret values; the deployment keeps the new ones)")
    if request.secret_references is not None:
        clauses.append("secret_references (the rollback does not restore them; the deployment keeps the new ones)")
    if request.source_config is not None:
        given = request.source_config.model_dump(mode="json", exclude_none=True, exclude={"resource_spec"})
        have = current.source_config.model_dump(mode="json") if current is not None else {}
        changed = sorted(name for name, value in given.items() if current is None or have.get(name) != value)
        if changed:
            fields = ", ".join(f"source_config.{name}" for name in changed)
            clauses.append(f"{fields} (a rollback restores the build and resource_spec only; the new values stay)")
    return clauses


def _clauses(rollback: dict[str, Any]) -> str:
    return "; ".join(rollback.get("not_restored") or [])


def _merged(clauses: Any, more: Sequence[str]) -> list[str]:
    """``clauses`` then each of ``more`` not already there."""
    merged = [str(item) for item in clauses or []]
    return merged + [item for item in more if item not in merged]


def _has_fields(revision: Revision, wanted: dict[str, Any]) -> bool:
    """Whether ``revision`` shows every ``source_revision_config`` value in ``wanted``."""
    config = revision.source_revision_config
    shown = config.model_dump(exclude_none=True) if config is not None else {}
    return all(shown.get(name) == value for name, value in wanted.items())


def _config_fields(config: SourceRevisionConfig) -> dict[str, str]:
    return {name: str(value) for name, value in config.model_dump(exclude_none=True).items()}


def _listed(revisions: Sequence[Revision]) -> str:
    return ", ".join(f"{item.id} ({item.status.value})" for item in revisions) or "none"
