"""Roll a deployment back to an earlier revision (its build, and the resource_spec that served with it) and
wait until it serves again; a retry never rolls back twice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.errors import NotFoundError
from airflow_provider.models import Deployment, canonical_uuid
from airflow_provider.operators.base import (
    XCOM_DEPLOYMENT_ID,
    XCOM_DEPLOYMENT_URL,
    XCOM_NOT_RESTORED,
    XCOM_REVISION_ID,
    XCOM_ROLLBACK_PATH,
    XCOM_ROLLED_BACK_FROM,
    DeploymentLink,
    _RolloutWaitingOperator,
)
from airflow_provider.tasks.base import MISSING_RENDERS, checked_ids
from airflow_provider.tasks.request import SecretValue, resolve_secrets
from airflow_provider.tasks.targets import exactly_one_target

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider.tasks.rollback import RollbackStarted

__all__ = [
    "ROLLBACK_CARRY_KEY",
    "ROLLBACK_STATE_KEY",
    "RollbackDeploymentOperator",
]

ROLLBACK_STATE_KEY = "deployment_service_rollback"
"""Key of the rollback record in ``context["task_state_store"]``."""
ROLLBACK_CARRY_KEY = "rollback"
"""Key of the rollback record in the rollout trigger's ``carry`` (what a resumed rollback task judges)."""


def _is_missing_render(value: str) -> bool:
    """Whether a rendered value is, as a whole, what a missing XCom or param renders to."""
    return value.strip() in MISSING_RENDERS


class RollbackDeploymentOperator(_RolloutWaitingOperator):
    """Roll a deployment back to an earlier revision and (by default) wait until it serves again.

    What it restores: the revision's build and, when given, the ``resource_spec`` that served with it. Where
    the service has it, the build is redeployed exactly (``POST .../redeploy``, commit included); otherwise
    (404/405), or when the current ``resource_spec`` differs from ``resource_spec=``, the revision's non-secret
    ``source_revision_config`` is patched back, read from the revision endpoint, else from
    ``source_revision_config=`` (the patch task's ``previous_source_revision_config`` XCom), together with
    the whole ``resource_spec`` (production replaces it whole) as the deployment shows it now, the fields that
    differ set back: one PATCH, one revision. Fields this provider does not know (the service's, at any depth)
    are restored as given and carried as shown, never refused; a field the service added that
    ``resource_spec=`` lacks is left as it is. A restored branch
    ``repo_ref`` rebuilds the branch's current head. Secret values are never restored (they are not kept);
    ``secrets=`` sends the ones given. When ``rolling_back_from`` is given and a newer revision exists
    (someone rolled out meanwhile), the task refuses, naming both revisions, unless ``force``.

    The verdict: "rolled back" (log, asset event ``outcome`` ``rolled_back``) only when the previous build
    serves again with its previous ``resource_spec``. Otherwise the log, the XCom ``not_restored`` and the
    asset event (``outcome`` ``rolled_back_partially``, extra ``not_restored``) name what was not restored
    (a branch rebuilt from its head; a ``resource_spec`` not given while the deployment has one); and when
    the deployment does not show the ``resource_spec`` given, the task fails saying so.

    Retries never roll back twice: the rollback is recorded in ``task_state_store`` before it is sent and once
    sent, and a retry reattaches (or, for a rollback recorded but not sent, sends it). Without a record
    (Airflow < 3.3) a retry reattaches only on positive evidence (see
    :func:`~airflow_provider.tasks.rollback.find_earlier_rollback`) and fails, saying what it saw and what to
    check, when the deployment cannot tell. A deferred wait resumes with what it needs in the trigger's event,
    so ``airflow dags test`` resumes it too.

    Pushes the XComs ``revision_id`` (the revision that serves after the rollback: the one it created, or
    ``revision_id`` itself), ``rolled_back_from`` (the revision rolled back), ``deployment_id``,
    ``rollback_path`` (``redeploy``, ``patch`` or ``none``) and ``not_restored`` (a list of clauses, ``[]``
    when everything was restored). Returns the deployment as redacted JSON (after the rollout when
    ``wait_for_rollout``).

    :param revision_id: the revision to return to (UUID), or ``"previous"``: the revision that served before the
        one serving now, resolved when the task runs (the newest revision older than the active one that was
        deployed, status ``DEPLOYED``; revisions that never served, such as ``BUILD_FAILED``, are skipped; the
        log names it and what was skipped). A retry rolls back to what the first try resolved (recorded in
        ``task_state_store``; without a store a retry refuses "previous"). Templated.
    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name. Templated.
    :param rolling_back_from: the revision being rolled back (e.g. a patch task's ``revision_id`` XCom);
        the rollback refuses when a newer revision exists. ``None``: the deployment's latest. Templated.
    :param source_revision_config: the revision's non-secret fields, used when the service can neither
        redeploy nor show the revision (``image_uri``, ``repo_ref``...). Templated.
    :param resource_spec: the whole ``source_config.resource_spec`` that served with ``revision_id``, as the
        deployment showed it (the patch task's ``previous_resource_spec`` XCom; ``{}`` when there was none).
        ``None`` (default): unknown, left as it is and named in ``not_restored`` when the deployment has one. A
        field this provider does not know spelled like one it knows (``cpus``) is refused as a typo before any
        request. Templated.
    :param secrets: secret values to send with the restore (as on :class:`PatchDeploymentOperator`; forces
        the patch path). Not templated. Default: none sent, the deployment keeps its current secrets.
    :param force: roll back even over a newer revision than ``rolling_back_from``.
    :param requested_by: who asked for this rollback by hand, recorded with it (the Rollouts view's rollback DAG
        gives ``{{ dag_run.triggering_user_name }}``: the Airflow user who triggered the run). Templated.
    :param requested_from: where they asked (``Rollouts view``), recorded with it. Templated.
    :param wait_for_rollout: wait until the restored revision is active and the deployment ``READY``; how
        is set by ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`).
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "revision_id",
        "deployment_id",
        "deployment_name",
        "rolling_back_from",
        "source_revision_config",
        "resource_spec",
        "deployment_service_conn_id",
        "requested_by",
        "requested_from",
    )
    operator_extra_links = (DeploymentLink(),)

    def __init__(
        self,
        *,
        revision_id: str,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        rolling_back_from: str | None = None,
        source_revision_config: dict[str, Any] | None = None,
        resource_spec: dict[str, Any] | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        force: bool = False,
        wait_for_rollout: bool = True,
        requested_by: str | None = None,
        requested_from: str | None = None,
        **kwargs: Any,
    ) -> None:
        from airflow_provider.tasks.rollback.previous import check_literal_revision_id

        exactly_one_target(deployment_id, deployment_name)
        check_literal_revision_id(revision_id)
        super().__init__(**kwargs)
        self.revision_id = revision_id
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.rolling_back_from = rolling_back_from
        self.source_revision_config = source_revision_config
        self.resource_spec = resource_spec
        self.secrets = secrets
        self.force = force
        self.wait_for_rollout = wait_for_rollout
        self.requested_by = requested_by
        self.requested_from = requested_from
        self._resolved_secrets: list[dict[str, str]] | None = None

    def _checked_revisions(self) -> tuple[str | None, str | None]:
        """Canonical ``(revision_id, rolling_back_from)`` (``None`` for ``"previous"``, resolved once the deployment
        is read); fails naming the field (before any request)."""
        from airflow_provider.tasks.rollback.previous import PREVIOUS, previous_hint

        value = self.revision_id
        if isinstance(value, str) and value.strip().lower() == PREVIOUS:
            given = self.rolling_back_from
            try:
                source = (
                    None if given is None or given in MISSING_RENDERS else canonical_uuid(given, "rolling_back_from")
                )
            except ValueError as err:
                raise AirflowFailException(str(err)) from None
            return None, source
        if value is None or (isinstance(value, str) and _is_missing_render(value)):
            raise AirflowFailException(
                f"revision_id rendered to {value!r}: expected the revision to return to (is the upstream XCom, "
                "e.g. the patch task's previous_active_revision_id, missing or empty?)"
            )
        try:
            target = canonical_uuid(value, "revision_id")
        except ValueError as err:
            raise AirflowFailException(f"{err}{previous_hint(value)}") from None
        try:
            given = self.rolling_back_from
            source = None if given is None or given in MISSING_RENDERS else canonical_uuid(given, "rolling_back_from")
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        return target, source

    def _resolve_deployment(self) -> Deployment:
        """The deployment by id, or by exact name through ``hook.get_deployment_by_name``."""
        if self.deployment_id is not None:
            deployment_id, _ = checked_ids(self.deployment_id, None)
            try:
                return self.hook.get_deployment(deployment_id)
            except NotFoundError as err:
                raise AirflowFailException(str(err)) from None
        name = (self.deployment_name or "").strip()
        if not name or name in MISSING_RENDERS:
            raise AirflowFailException(f"deployment_name rendered to {self.deployment_name!r}: expected a name")
        by_name = getattr(self.hook, "get_deployment_by_name", None)
        if by_name is None:
            raise AirflowFailException(
                "deployment_name needs DeploymentServiceHook.get_deployment_by_name, which this version of the "
                "provider lacks; give deployment_id"
            )
        try:
            deployment: Deployment = by_name(name)
        except (NotFoundError, LookupError) as err:
            raise AirflowFailException(str(err)) from None
        return deployment

    def _run(self, context: Context) -> dict[str, Any]:
        """Roll back (or reattach on a retry), push the XComs, and wait when asked to."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.recording import record_rollback_entry
        from airflow_provider.tasks.rollback import (
            checked_fallback_config,
            checked_resource_spec,
            reattach_recorded_rollback,
            start_rollback,
        )

        target, source = self._checked_revisions()
        fallback = checked_fallback_config(self.source_revision_config)
        spec = checked_resource_spec(self.resource_spec, refuse_typos=True)
        self._resolved_secrets = resolve_secrets(self.secrets)
        current = self._resolve_deployment()
        ti = context["ti"]
        store = context.get("task_state_store")
        if target is None:
            target = self._previous(context, store, current)
        recorded = self._recorded(store, current.id, target)
        if recorded is not None:
            started = reattach_recorded_rollback(self.hook, current, recorded, log=self.log)
        else:
            started = self._earlier_try_rollback(context, current, target, source, fallback, spec)
            if started is not None:
                self._save(store, started.record())
        if started is None:
            started = start_rollback(
                self.hook,
                current,
                target,
                rolling_back_from=source,
                fallback_config=fallback,
                resource_spec=spec,
                secrets=self._resolved_secrets,
                force=self.force,
                force_hint="pass force=True to roll back anyway",
                before_sending=lambda intent: self._save(store, intent.record()),
                log=self.log,
            )
            self._save(store, started.record())
        ti.xcom_push(key=XCOM_DEPLOYMENT_ID, value=current.id)
        ti.xcom_push(key=XCOM_REVISION_ID, value=started.revision_id)
        ti.xcom_push(key=XCOM_ROLLED_BACK_FROM, value=started.rolled_back_from or "")
        ti.xcom_push(key=XCOM_ROLLBACK_PATH, value=started.path)
        ti.xcom_push(key=XCOM_NOT_RESTORED, value=list(started.not_restored))
        url = started.deployment.source_config.custom_url
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)
        if started.path != "none":  # a rollback sent (now, or by an earlier try): the view shows it under way
            record_rollback_entry(context, self.log, Kind.ROLLING_BACK, started.record(), **self._requested())
        if not self.wait_for_rollout:
            if started.not_restored:
                self.log.warning("Started the %s", started.summary())
            return started.deployment.model_dump(mode="json")
        live = self._wait(
            started.deployment,
            started.revision_id,
            allowed_latest_revision_id=started.allowed_latest_revision_id,
            carry={ROLLBACK_CARRY_KEY: started.record()},
        )
        return self._landed(context, started, live)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: judge the rollback the event carries (or the task record holds)
        on the live deployment; raise what the event says when the wait failed.

        Needs nothing from ``defer()``'s kwargs (``airflow dags test`` drops them) nor from XCom; fails,
        claiming nothing, when neither the event nor ``task_state_store`` says what the rollback restored.
        """
        live = super().execute_complete(context, event)
        started = self._resumed_rollback(context, event or {}, live)
        return self._landed(context, started, live)

    def _resumed_rollback(self, context: Context, event: dict[str, Any], live: dict[str, Any]) -> RollbackStarted:
        """The rollback this try started, from the trigger's event, else from ``task_state_store``."""
        from airflow_provider.tasks.rollback import RollbackStarted

        deployment = Deployment.model_validate(live)
        target, _ = self._checked_revisions()
        carried = event.get("carry")
        record = carried.get(ROLLBACK_CARRY_KEY) if isinstance(carried, dict) else None
        if not isinstance(record, dict):
            record = self._recorded(context.get("task_state_store"), deployment.id, target)
        awaited = event.get("revision_id")
        if not isinstance(record, dict) or record.get("phase") != "sent" or record.get("revision_id") != awaited:
            raise AirflowFailException(
                f"resumed after waiting for revision {awaited} of deployment {deployment.name!r} ({deployment.id}), "
                "but neither the trigger's event nor task_state_store holds the rollback this task started, so "
                f"what it restored cannot be told: not claiming a rollback. The deployment serves revision "
                f"{deployment.active_revision_id} (status {deployment.status.value}); check that it runs revision "
                f"{target}'s build with its previous resource_spec, then mark this task success or clear it"
            )
        return RollbackStarted.from_record(record, deployment)

    def _landed(self, context: Context, started: RollbackStarted, live: dict[str, Any]) -> dict[str, Any]:
        """The one place where the restored revision is known to be live: judge what it restored."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.events import emit_revision_event
        from airflow_provider.tasks.recording import record_rollback_entry
        from airflow_provider.tasks.rollback import RESOURCE_SPEC_VERDICTS

        deployment = Deployment.model_validate(live)
        judged = started.judged_on(deployment)
        record_rollback_entry(context, self.log, Kind.ROLLED_BACK, judged.record(), **self._requested())
        context["ti"].xcom_push(key=XCOM_NOT_RESTORED, value=list(judged.not_restored))
        serves = (
            f"deployment {deployment.name!r} ({deployment.id}) serves revision {judged.to_revision_id}'s build "
            f"again as revision {deployment.active_revision_id} (status {deployment.status.value})"
        )
        if any(clause in RESOURCE_SPEC_VERDICTS for clause in judged.not_restored):
            raise AirflowFailException(
                f"{serves}, rolled back from revision {judged.rolled_back_from}{judged.except_clause()}. The "
                "resource_spec given (resource_spec=) is not what the deployment shows"
            )
        if judged.not_restored:
            self.log.warning("Rolled back: %s%s%s", serves, judged.except_clause(), self._spec_hint(judged))
        else:
            restored = " with its previous resource_spec" if judged.resource_spec is not None else ""
            self.log.info("Rolled back: %s%s", serves, restored)
        emit_revision_event(
            context,
            live,
            previous_revision_id=judged.rolled_back_from,
            outcome="rolled_back_partially" if judged.not_restored else "rolled_back",
            outlets=self.outlets,
            log=self.log,
            not_restored=judged.not_restored,
        )
        return live

    def _spec_hint(self, judged: RollbackStarted) -> str:
        """How to restore (or vouch for) the resource_spec when none was given and the verdict calls it unknown."""
        from airflow_provider.tasks.rollback import RESOURCE_SPEC_UNKNOWN

        if self.resource_spec is not None or RESOURCE_SPEC_UNKNOWN not in judged.not_restored:
            return ""
        return (
            f". Give resource_spec= (the whole resource_spec that served with revision {judged.to_revision_id}: "
            "the patch task's previous_resource_spec XCom, {} when there was none) to restore it, or to vouch that "
            "the change left it alone"
        )

    def _requested(self) -> dict[str, Any]:
        """Who asked for this rollback by hand and where, as the record keeps it (nothing when not given)."""
        by, where = (str(value or "").strip() for value in (self.requested_by, self.requested_from))
        return {
            "requested_by": by if by and by not in MISSING_RENDERS else None,
            "requested_from": where if where and where not in MISSING_RENDERS else None,
        }

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in self._resolved_secrets or [])

    def _previous(self, context: Context, store: Any, current: Deployment) -> str:
        """``revision_id="previous"`` resolved: on a retry, what the earlier try recorded (never resolved again:
        after its rollback, "previous" would be an older revision still); else the revision that served before
        the current one (:func:`~airflow_provider.tasks.rollback.previous.previous_served_revision`)."""
        from airflow_provider.tasks.rollback.previous import previous_served_revision

        try:
            recorded = store.get(ROLLBACK_STATE_KEY) if store is not None else None
        except Exception as err:  # the store is an optimisation
            self.log.warning("Could not read task_state_store (%s)", err)
            recorded = None
        if (
            isinstance(recorded, dict)
            and recorded.get("deployment_id") == current.id
            and recorded.get("to_revision_id")
        ):
            self.log.info(
                "revision_id='previous': revision %s, as an earlier try resolved it", recorded["to_revision_id"]
            )
            return str(recorded["to_revision_id"])
        if store is None and (getattr(context["ti"], "try_number", 1) or 1) > 1:
            raise AirflowFailException(
                "revision_id='previous' on a retry without task_state_store: what the first try resolved (and may "
                "have rolled back to) is not known, and resolving it again could roll back one revision too far; "
                "give the revision's id"
            )
        try:
            revision, _ = previous_served_revision(self.hook, current, self.log)
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        return revision.id

    def _recorded(self, store: Any, deployment_id: str, target: str | None) -> dict[str, Any] | None:
        """The rollback an earlier try (or this one, before deferring) recorded for this deployment and
        revision (``None``: ``"previous"``, any revision); ``None`` when none (or the store cannot be read)."""
        try:
            recorded = store.get(ROLLBACK_STATE_KEY) if store is not None else None
        except Exception as err:  # the store is an optimisation
            self.log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
            return None
        if not isinstance(recorded, dict) or recorded.get("deployment_id") != deployment_id:
            return None
        if target is not None and recorded.get("to_revision_id") != target:
            return None
        return recorded

    def _earlier_try_rollback(
        self,
        context: Context,
        current: Deployment,
        target: str,
        source: str | None,
        fallback: dict[str, str] | None,
        spec: dict[str, Any] | None,
    ) -> RollbackStarted | None:
        """On a retry with no record: the rollback an earlier try sent, recognised on the deployment."""
        from airflow_provider.tasks.rollback import find_earlier_rollback

        try_number = getattr(context["ti"], "try_number", 1) or 1
        if try_number <= 1:
            return None
        started = getattr(context.get("dag_run"), "start_date", None)
        return find_earlier_rollback(
            self.hook,
            current,
            target,
            since=started if isinstance(started, datetime) else None,
            rolling_back_from=source,
            fallback_config=fallback,
            resource_spec=spec,
            secrets_given=self._resolved_secrets is not None,
            log=self.log,
        )

    def _save(self, store: Any, record: dict[str, Any]) -> None:
        """Record the rollback (about to be sent, or sent) in ``task_state_store``, when there is one."""
        if store is None:
            return
        try:
            store.set(ROLLBACK_STATE_KEY, record)
        except Exception as err:  # not fatal: the never-twice read-back still guards the request itself
            self.log.warning("Could not record the rollback in task_state_store (%s)", err)
