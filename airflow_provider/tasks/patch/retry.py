"""The patch task's record and its retries: what a retry of :class:`PatchDeploymentOperator` reattaches to
instead of patching (or rolling back) twice.

A try records its patch in ``task_state_store`` under :data:`TASK_STATE_KEY` (:func:`record_patch`: the
revision it made, what served before, no secret), and its automatic rollback in the same record
(:func:`record_rollback`). A retry reads the record back (:func:`recorded_patch`) and
:func:`find_earlier_try` decides what the earlier try left:

- **with a record**: its revision, waited for again (or its rollback: the operator reattaches to it with
  :func:`~airflow_provider.tasks.rollback.evidence.reattach_recorded_rollback`);
- **without one** (Airflow < 3.3, or a try that died before recording): what the service shows since the DAG
  run started, taken only on positive evidence (the revision list: revisions made since, the patch's config,
  the revision made just before), else a loud failure naming what was seen; never the change applied twice,
  never a success it cannot prove.

Nothing here waits or judges a live revision: the operator waits (:mod:`airflow_provider.operators.patch`),
:mod:`~airflow_provider.tasks.patch.judging` judges, :mod:`~airflow_provider.tasks.patch.rollback` rolls back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.models import Deployment, PatchDeploymentRequest, Revision, RevisionStatus

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook
    from airflow_provider.tasks.rollback.outcome import RollbackIntent, RollbackStarted

__all__ = [
    "HISTORY_LOOKBACK",
    "TASK_STATE_KEY",
    "EarlierTry",
    "earlier_try_of",
    "find_earlier_try",
    "merged_clauses",
    "patch_fingerprint",
    "record_patch",
    "record_rollback",
    "recorded_patch",
    "rollback_record",
    "sets_resource_spec",
    "unrestorable_parts",
]

TASK_STATE_KEY = "deployment_service_patch"
"""Key of the patch record in ``context["task_state_store"]`` (renaming it breaks in-flight retries)."""
HISTORY_LOOKBACK = 100
"""Revisions a retry without a record reads back (newest first) to recognise an earlier try's patch and rollback."""


@dataclass(frozen=True)
class EarlierTry:
    """What a retry of the patch task reattaches to.

    :param revision_id: the earlier try's revision (``None``: its patch created none).
    :param previous_active: the revision active before that patch (``None``: unknown or none).
    :param previous_config: that revision's non-secret ``source_revision_config`` fields, when found without a
        record (``None``: take the record's).
    :param rollback: ``{"landing", "rollback"}`` when that try's automatic rollback was recognised on the service.
    :param failed: why that revision will never go live (its build failed: the verdict the earlier try reached,
        or would have), when it ended so; ``None`` otherwise.
    :param previous_spec: the whole ``resource_spec`` before that patch when found without a record: the
        deployment's current one when the patch does not set ``resource_spec`` (it did not change it);
        ``None`` when the patch sets it (unknown: not recorded).
    """

    revision_id: str | None
    previous_active: str | None
    previous_config: dict[str, str] | None = None
    rollback: dict[str, Any] | None = None
    failed: str | None = None
    previous_spec: dict[str, Any] | None = None


# ------------------------------------------------------------------------------------------ the record
def patch_fingerprint(deployment_id: str, request: PatchDeploymentRequest) -> str:
    """A digest of what a patch sets on a deployment (secret values left out: names only); a record of another
    patch (the task's arguments changed between tries) has another one.

    :param deployment_id: the deployment.
    :param request: the patch as built from the task's arguments.
    """
    shown = json.dumps(request.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(f"{deployment_id}:{shown}".encode()).hexdigest()


def recorded_patch(
    store: Any, request: PatchDeploymentRequest, current: Deployment, log: logging.Logger | Any
) -> dict[str, Any] | None:
    """This patch's record from an earlier try, or ``None``: none, unreadable, another deployment's, or another
    patch's (the task's arguments changed between tries).

    :param store: ``context["task_state_store"]`` (``None``: none).
    :param request: the patch as built from the task's arguments.
    :param current: the deployment as just read.
    :param log: where to say why a record is not used.
    """
    if store is None:
        return None
    try:
        recorded = store.get(TASK_STATE_KEY)
    except Exception as err:  # the store is an optimisation; fall back to the deployment's state
        log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
        return None
    if not isinstance(recorded, dict):
        return None
    if recorded.get("fingerprint") != patch_fingerprint(current.id, request):
        log.info("The patch recorded by an earlier try differs from this one; patching anew")
        return None
    return recorded if recorded.get("deployment_id") == current.id else None


def record_patch(store: Any, record: dict[str, Any], log: logging.Logger | Any) -> None:
    """Record this try's patch in ``task_state_store`` (JSON, no secret; not fatal when the store fails).

    :param store: ``context["task_state_store"]`` (``None``: nothing is recorded).
    :param record: the record.
    :param log: where to say the store failed.
    """
    if store is None:
        return
    try:
        store.set(TASK_STATE_KEY, record)
    except Exception as err:  # not fatal: a retry still recognises the patch on the deployment
        log.warning("Could not record the patch in task_state_store (%s)", err)


def record_rollback(store: Any, landing: dict[str, Any], rollback: dict[str, Any], log: logging.Logger | Any) -> None:
    """Write ``rollback`` into the patch's record (not fatal when the store fails: a retry then judges from
    the service).

    :param store: ``context["task_state_store"]`` (``None``: nothing is recorded).
    :param landing: the patch's landing (its ``deployment_id`` must be the record's).
    :param rollback: the rollback's JSON (:func:`rollback_record`, or an intent's).
    :param log: where to say the store failed.
    """
    if store is None:
        return
    try:
        recorded = store.get(TASK_STATE_KEY)
        if not isinstance(recorded, dict) or recorded.get("deployment_id") != landing.get("deployment_id"):
            log.warning("No task_state_store record of the patch to add the rollback to; not recording it")
            return
        store.set(TASK_STATE_KEY, {**recorded, "rollback": rollback})
    except Exception as err:
        log.warning("Could not record the rollback in task_state_store (%s)", err)


def rollback_record(
    started: RollbackStarted | RollbackIntent,
    reason: str,
    patch_clauses: Sequence[str],
    *,
    origin: str | None = None,
    step: str | None = None,
) -> dict[str, Any]:
    """The JSON of a rollback sent, or about to be (``task_state_store``, the trigger's carry): the contract's
    record, why it was rolled back, and the parts of the patch no rollback undoes (secrets by name).

    :param started: the rollback sent (or found), or the intent recorded just before its request.
    :param reason: why the patch's revision was rolled back.
    :param patch_clauses: :func:`unrestorable_parts` of the patch.
    :param origin: how it was found, when an earlier try sent it.
    :param step: what failed the revision (see :data:`~airflow_provider.tasks.patch.verdict.VERDICT_STEPS`;
        ``None``: not known).
    """
    record = started.record()
    record["not_restored"] = merged_clauses(record.get("not_restored"), patch_clauses)
    return {"reason": reason, "step": step, **record, **({"origin": origin} if origin else {})}


def sets_resource_spec(request: PatchDeploymentRequest) -> bool:
    """Whether ``request`` changes ``source_config.resource_spec`` (only then may its rollback need to restore
    one).

    :param request: the patch.
    """
    return request.source_config is not None and request.source_config.resource_spec is not None


def unrestorable_parts(request: PatchDeploymentRequest, current: Deployment | None) -> list[str]:
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


def merged_clauses(clauses: Any, more: Sequence[str]) -> list[str]:
    """``clauses`` then each of ``more`` not already there.

    :param clauses: the clauses so far (a list, or ``None``).
    :param more: the clauses to add.
    """
    merged = [str(item) for item in clauses or []]
    return merged + [item for item in more if item not in merged]


# ------------------------------------------------------------------------------------------ a retry
def find_earlier_try(
    hook: DeploymentServiceHook,
    request: PatchDeploymentRequest,
    current: Deployment,
    *,
    record: dict[str, Any] | None,
    try_number: int,
    started: datetime | None,
    rollback_on_failure: bool,
    log: logging.Logger | Any,
) -> EarlierTry | None:
    """What an earlier try of this patch left to reattach to (its revision, or its rollback found on the
    service); ``None`` to patch now; :class:`AirflowFailException` when patching again would be wrong.

    :param hook: the hook to ask (the optional revision and revision-list endpoints).
    :param request: the patch as built from the task's arguments.
    :param current: the deployment as just read.
    :param record: this patch's record from an earlier try (:func:`recorded_patch`), or ``None``.
    :param try_number: this try's number (the first try has no earlier one).
    :param started: when the DAG run started (``None``: unknown).
    :param rollback_on_failure: whether the task rolls back (an earlier try may then have rolled back).
    :param log: the task's logger.
    """
    return _Retry(hook, request, current, started, rollback_on_failure, log).reattach(record, try_number)


def earlier_try_of(
    task: Any, request: PatchDeploymentRequest, current: Deployment, context: Any, record: dict[str, Any] | None
) -> EarlierTry | None:
    """What an earlier try of ``task``'s patch left to reattach to (:func:`find_earlier_try` with the task's hook,
    try number, run start and ``rollback_on_failure``); ``None`` to patch now.

    :param task: the patch task.
    :param request: the patch.
    :param current: the deployment as read now.
    :param context: the task's context.
    :param record: the ``task_state_store`` record, ``None`` when there is none.
    """
    started = getattr(context.get("dag_run"), "start_date", None)
    return find_earlier_try(
        task.hook,
        request,
        current,
        record=record,
        try_number=getattr(context["ti"], "try_number", 1) or 1,
        started=started if isinstance(started, datetime) else None,
        rollback_on_failure=task.rollback_on_failure,
        log=task.log,
    )


class _Retry:
    """One retry's look at what an earlier try left (see :func:`find_earlier_try`)."""

    def __init__(
        self,
        hook: DeploymentServiceHook,
        request: PatchDeploymentRequest,
        current: Deployment,
        started: datetime | None,
        rollback_on_failure: bool,
        log: logging.Logger | Any,
    ) -> None:
        self.hook = hook
        self.request = request
        self.current = current
        self.started = started
        self.rollback_on_failure = rollback_on_failure
        self.log = log

    def reattach(self, recorded: dict[str, Any] | None, try_number: int) -> EarlierTry | None:
        """The earlier try's revision (recorded, else found on the service), judged as the deployment shows it:
        to wait for again, or failed (its build failed: reported again, never built a second time); a
        revision superseded by someone else's, or a deployment going away, fails the task."""
        from airflow_provider.decisions.rollout import RolloutState, awaits_revision_build, rollout_verdict
        from airflow_provider.errors import DeploymentServiceError

        current = self.current
        if recorded is not None:
            revision_id = recorded.get("revision_id")
            previous_active = recorded.get("previous_active_revision_id")
            source = "recorded by an earlier try"
            previous_config = None
        else:
            if try_number <= 1:
                return None
            found = self._on_service()
            if found is None or found.rollback is not None:
                return found
            revision_id, previous_active = found.revision_id, found.previous_active
            source = f"found on the deployment (try {try_number}, no task_state_store record)"
            previous_config = found.previous_config
        previous_spec = None if recorded is not None else self._spec_before()
        revision = None
        if awaits_revision_build(current, revision_id):
            assert revision_id is not None
            with contextlib.suppress(DeploymentServiceError):  # optional endpoint: absent or failing is fine
                revision = self.hook.get_revision(current.id, revision_id)
        verdict = rollout_verdict(current, revision_id, revision, deployment_id=current.id)
        if verdict.state is RolloutState.FAILED and revision_id is not None:
            if revision is not None and revision.status.is_failed:
                # The earlier try's verdict stands: the same change would build (and fail) the same way again.
                self.log.warning("The patch %s made revision %s, which failed: not patching again", source, revision_id)
                failed = (
                    f"not patching again on this retry: {verdict.message}. Revision {revision_id} is this patch's, "
                    f"made by an earlier try of this task, and it ended {revision.status.value} without going live; "
                    "a second patch would build the same change again. A new DAG run (or a changed patch) builds again"
                )
                return EarlierTry(
                    revision_id, previous_active, previous_config, failed=failed, previous_spec=previous_spec
                )
            # Superseded or going away: patching again would roll back whatever replaced our revision.
            raise AirflowFailException(f"not patching again on this retry: {verdict.message}")
        self.log.info("Reattaching to the patch %s: revision %s, not patching again", source, revision_id)
        return EarlierTry(revision_id, previous_active, previous_config, previous_spec=previous_spec)

    def _spec_before(self) -> dict[str, Any] | None:
        """The ``resource_spec`` before the earlier try's patch, without a record: the current one when the
        patch does not set ``resource_spec``; ``None`` (unknown) when it does."""
        from airflow_provider.decisions.spec_changes import resource_spec_json

        if sets_resource_spec(self.request):
            return None
        return resource_spec_json(self.current.source_config.resource_spec)

    def _on_service(self) -> EarlierTry | None:
        """An earlier try's patch (or patch and automatic rollback) recognised on the service, without a record.

        Untouched since the DAG run started: nothing to reattach to. Otherwise, with ``rollback_on_failure``
        (an earlier try may have rolled its revision back, so the deployment no longer shows the patch), the
        revision list must give positive evidence: a revision made since the run started with the patch's
        config (for a patch that sets no revision field, such as ``resource_spec`` or secrets only: the one
        revision made since, the deployment showing the patch), then (for a rollback) a newer latest one
        copying the revision before it. What cannot be told fails the task, saying what was seen: never the
        bad patch again, never a success it cannot prove. Without ``rollback_on_failure``: the deployment
        showing the patch.
        """
        request, current, started = self.request, self.current, self.started
        if started is not None and current.updated_at < started:  # not changed since this run started
            return None
        if not self.rollback_on_failure or started is None:
            return self._reflected()
        history = self._history_since(started)
        wanted = request.source_revision_config.model_dump(exclude_none=True) if request.source_revision_config else {}
        wanted.pop("repo_commit_sha", None)
        if history is None:  # no revision list endpoint
            if wanted and request.is_reflected_in(current):  # a rollback would have restored the old config
                return self._reflected()
            return self._cannot_tell(started, "the service has no revision list endpoint to tell")
        made, before = history
        if not made:
            return self._reflected()
        if not wanted:
            if len(made) == 1:
                return self._sole_revision(made[0], before)
            return self._cannot_tell(
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
            redeployed = self._redeployed_in_place(patched, previous)
            return redeployed or self._patched_revision(patched, previous)
        if previous is not None and previous.source_revision_config is not None:
            found = self._found_rollback(started, patched, previous)
            if found is not None:
                return found
        return self._cannot_tell(
            started,
            f"revision {patched.id} with this patch's config was made since, then {_listed(made[:index])}, "
            f"the latest of which does not copy the revision before it ({previous.id if previous else 'unknown'})",
        )

    def _sole_revision(self, made: Revision, before: Revision | None) -> EarlierTry | None:
        """The earlier try's revision when the patch sets no revision field (``resource_spec``, secrets) and
        ``made`` is the one revision made since the DAG run started: it is the patch's when the patch may make
        one and the deployment shows every value of the patch; the revision that served before it is
        ``before``, the newest one made before the run started (when it had been deployed)."""
        if not self.request.may_create_revision:  # a patch that makes no revision: the revision is someone else's
            return self._reflected()
        if not self.request.is_reflected_in(self.current):
            return None  # someone else's revision: the earlier try's patch did not land
        return self._redeployed_in_place(made, before) or self._patched_revision(made, before)

    def _redeployed_in_place(self, patched: Revision, previous: Revision | None) -> EarlierTry | None:
        """The earlier try's rollback when the service redeployed the previous revision without making a new
        one: ``patched`` went live (``DEPLOYED``), and the revision before it is active again or being deployed
        again (an older revision only deploys again when redeployed)."""
        from airflow_provider.tasks.rollback.outcome import RESOURCE_SPEC_UNKNOWN, RollbackStarted
        from airflow_provider.tasks.rollback.revisions import in_progress, revision_fields

        current = self.current
        if previous is None or previous.source_revision_config is None or patched.status is not RevisionStatus.DEPLOYED:
            return None
        if current.active_revision_id != previous.id and not in_progress(previous):
            return None
        started = RollbackStarted(
            "redeploy",
            previous.id,
            previous.id,
            patched.id,
            current,
            revision_fields(previous.source_revision_config),
            not_restored=(RESOURCE_SPEC_UNKNOWN,) if self._spec_before() is None else (),
            allowed_latest_revision_id=patched.id,
            previous_latest_revision_id=patched.id,
        )
        return self._earlier_rollback(patched, previous, started)

    def _patched_revision(self, patched: Revision, previous: Revision | None) -> EarlierTry:
        """Reattach to ``patched``, the earlier try's revision; what served before it is the active revision
        while it builds, else the revision before it when that one had been deployed."""
        from airflow_provider.tasks.rollback.revisions import revision_fields

        current = self.current
        if current.active_revision_id != patched.id:
            served = previous if previous is not None and previous.id == current.active_revision_id else None
        elif previous is not None and previous.status is RevisionStatus.DEPLOYED:
            served = previous
        else:
            return EarlierTry(patched.id, None)
        config = revision_fields(served.source_revision_config) if served and served.source_revision_config else None
        return EarlierTry(patched.id, served.id if served else current.active_revision_id, previous_config=config)

    def _reflected(self) -> EarlierTry | None:
        """Reattach to the revision the deployment shows when it shows every value of this patch."""
        request, current = self.request, self.current
        if not request.is_reflected_in(current):
            return None
        if request.creates_revision and current.latest_revision_id is None:
            return None
        # A resource_spec patch creates a revision in production and none under the spec's reading: an
        # earlier try's revision is the latest one while it rolls out (once live, waiting for READY is the same).
        created = request.creates_revision or (request.may_create_revision and current.is_rolling_out)
        revision_id = current.latest_revision_id if created else None
        previous_active = current.active_revision_id if current.active_revision_id != revision_id else None
        return EarlierTry(revision_id, previous_active)

    def _found_rollback(self, started: datetime, patched: Revision, previous: Revision) -> EarlierTry | None:
        """The earlier try's automatic rollback of ``patched`` to ``previous`` when the service shows positive
        evidence of it (:func:`~airflow_provider.tasks.rollback.evidence.find_earlier_rollback`); ``None`` when it
        shows none."""
        from airflow_provider.tasks.rollback.evidence import find_earlier_rollback
        from airflow_provider.tasks.rollback.revisions import revision_fields

        assert previous.source_revision_config is not None
        found = find_earlier_rollback(
            self.hook,
            self.current,
            previous.id,
            since=started,
            rolling_back_from=patched.id,
            fallback_config=revision_fields(previous.source_revision_config),
            log=self.log,
        )
        if found is None:
            return None
        return self._earlier_rollback(patched, previous, found)

    def _earlier_rollback(self, patched: Revision, previous: Revision, found: RollbackStarted) -> EarlierTry:
        """What a retry without a record reattaches to when it found its earlier try's rollback."""
        from airflow_provider.tasks.rollback.outcome import RESOURCE_SPEC_UNKNOWN
        from airflow_provider.tasks.rollback.revisions import revision_fields

        assert previous.source_revision_config is not None
        previous_config = revision_fields(previous.source_revision_config)
        not_restorable = unrestorable_parts(self.request, None)
        spec_before = self._spec_before()
        if spec_before is not None:  # the patch did not change resource_spec: its rollback has none to restore
            found = replace(found, not_restored=tuple(c for c in found.not_restored if c != RESOURCE_SPEC_UNKNOWN))
        landing = {
            "deployment_id": self.current.id,
            "revision_id": patched.id,
            "previous_active_revision_id": previous.id,
            "previous_source_revision_config": previous_config,
            "previous_resource_spec": spec_before,
            "not_restorable": not_restorable,
        }
        reason = "verify or the bake failed in an earlier try (that try's log says why; no task_state_store record)"
        rollback = rollback_record(found, reason, not_restorable, origin="an earlier try's, found on the service")
        return EarlierTry(patched.id, previous.id, previous_config, {"landing": landing, "rollback": rollback})

    def _cannot_tell(self, started: datetime, seen: str) -> NoReturn:
        """Fail: the deployment changed since the run started and does not prove what an earlier try did; say
        what the deployment may still carry from this patch (no rollback restores secrets)."""
        carried = _parts_kept(self.request, self.current)
        still = f" The deployment may still carry this patch's {carried}." if carried else ""
        raise AirflowFailException(
            f"not patching on this retry: {self.current.summary()} changed since this DAG run started "
            f"({started.isoformat()}) and there is no task_state_store record of an earlier try; {seen}. An earlier "
            "try may have patched and "
            "rolled back (patching again would re-apply a change that failed verify or its bake), or someone else "
            f"changed the deployment.{still} Check its revisions, then clear the task to patch again"
        )

    def _history_since(self, started: datetime) -> tuple[list[Revision], Revision | None] | None:
        """``(revisions made since started, newest first; the newest one before it)`` from the revision list
        endpoint; ``None`` when the service has no such endpoint."""
        from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING
        from airflow_provider.errors import DeploymentServiceError

        made: list[Revision] = []
        before: Revision | None = None
        try:
            revisions = sorted(
                self.hook.iter_revisions(self.current.id, max_results=HISTORY_LOOKBACK),
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


def _parts_kept(request: PatchDeploymentRequest, current: Deployment) -> str:
    """The parts of ``request`` the deployment still shows, as one phrase (``""`` when none): its secrets by
    name (never values: no rollback restores them), its ``source_config`` fields (``resource_spec``
    included) and ``secret_references``."""
    parts = []
    shown = {secret.name for secret in current.secrets or []}
    names = sorted(secret.name for secret in request.secrets or [] if secret.name in shown)
    if names:
        parts.append(f"secrets {', '.join(names)} (the values it sent; no rollback restores secret values)")
    given = request.source_config.model_dump(mode="json", exclude_none=True) if request.source_config else {}
    have = current.source_config.model_dump(mode="json", exclude_none=True)
    kept = sorted(name for name, value in given.items() if _shows(have.get(name), value))
    parts += [f"source_config.{name}" for name in kept]
    if request.secret_references is not None and current.secret_references:
        parts.append("secret_references")
    return ", ".join(parts)


def _shows(have: Any, wanted: Any) -> bool:
    """Whether a value the deployment shows contains ``wanted`` (mappings compared key by key)."""
    if isinstance(wanted, dict) and isinstance(have, dict):
        return all(key in have and _shows(have[key], value) for key, value in wanted.items())
    return bool(have == wanted)


def _has_fields(revision: Revision, wanted: dict[str, Any]) -> bool:
    """Whether ``revision`` shows every ``source_revision_config`` value in ``wanted``."""
    config = revision.source_revision_config
    shown = config.model_dump(exclude_none=True) if config is not None else {}
    return all(shown.get(name) == value for name, value in wanted.items())


def _listed(revisions: Sequence[Revision]) -> str:
    return ", ".join(f"{item.id} ({item.status.value})" for item in revisions) or "none"
