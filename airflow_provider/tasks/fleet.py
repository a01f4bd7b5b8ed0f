"""The worker side of a fleet rollout: resolve the targets, patch a wave (reattaching on a retry), wait
for a wave on the worker, verify, and keep the progress in ``context["task_state_store"]``.

The planning itself (waves, budget, the result table) is pure and lives in :mod:`airflow_provider.fleet`;
waiting in the triggerer is :class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`.
Everything here runs on a worker: the callables a user gives (the per-deployment patch, ``verify``)
cannot travel to the triggerer.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client import same_revision_config
from airflow_provider.error_text import describe_validation_error, scrub
from airflow_provider.errors import DeploymentServiceError, NotFoundError
from airflow_provider.fleet import (
    REASON_UNKNOWN,
    REASON_UNKNOWN_OUTCOMES,
    SUCCESS_OUTCOMES,
    FleetProgress,
    FleetRow,
    Outcome,
    WaveRecord,
    WaveTracker,
)
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    ListDeploymentsQuery,
    PatchDeploymentRequest,
    Revision,
    canonical_uuid,
)
from airflow_provider.patch_rules import (
    MergedSpec,
    describe_refusals,
    discouraged_fields,
    merge_resource_spec,
    refusals,
    unchanged_fixed_fields,
    without_unchanged_fixed_fields,
)
from airflow_provider.rollout import REVISION_ENDPOINT_MISSING, RevisionCheckSchedule, RevisionLookBudget
from airflow_provider.spec_changes import changes_of, resource_spec_json, spec_shows
from airflow_provider.tasks.build_logs import log_failed_build
from airflow_provider.tasks.rollback import (
    RESOURCE_SPEC_NOT_SENT,
    RESOURCE_SPEC_NOT_SHOWN,
    RESOURCE_SPEC_UNKNOWN,
    RESOURCE_SPEC_VERDICTS,
    RollbackStarted,
    find_earlier_rollback,
    reattach_recorded_rollback,
    start_rollback,
)
from airflow_provider.tasks.rollback_revisions import revision_fields

if TYPE_CHECKING:
    import logging

STATE_KEY = "deployment_service_fleet"
"""Key of the progress header in ``task_state_store``; each wave is under ``<key>/wave/<index>``
(renaming them breaks in-flight retries)."""

TARGET_FILTERS = (
    "name_contains",
    "status",
    "remote_reconciled",
    "tag_value_ids",
    "image_version",
    "deployment_type",
    "deployment_ids",
)
"""The filters of the list endpoint a fleet's ``filters`` may use."""


def check_filters(filters: Any) -> None:
    """Refuse a ``filters`` value that is not a mapping of known, non-empty filters (``ValueError``).

    :param filters: the argument (a literal mapping; a template string is checked after render).
    """
    if not isinstance(filters, Mapping):
        raise ValueError(f"filters must be a mapping of list-endpoint filters, got {type(filters).__name__}")
    unknown = sorted(set(filters) - set(TARGET_FILTERS))
    if unknown:
        raise ValueError(f"filters has unknown filter(s) {', '.join(unknown)}; known: {', '.join(TARGET_FILTERS)}")
    if not any(value not in (None, "", []) for value in filters.values()):
        raise ValueError("filters is empty: it would roll out to every deployment; give at least one filter")


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return [str(item).strip() for item in value]


def _chunks(items: Sequence[str], size: int = MAX_PAGE_SIZE) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def read_deployments(hook: DeploymentServiceHook, deployment_ids: Sequence[str]) -> dict[str, Deployment]:
    """The deployments with these ids that exist, one list request per 100.

    :param hook: the hook.
    :param deployment_ids: canonical ids.
    """
    found: dict[str, Deployment] = {}
    for chunk in _chunks(list(dict.fromkeys(deployment_ids))):
        page = hook.list_deployments(deployment_ids=list(chunk), limit=MAX_PAGE_SIZE)
        found.update({item.id: item for item in page.resources if item.id in chunk})
    return found


def resolve_targets(
    hook: DeploymentServiceHook,
    *,
    deployment_ids: Any,
    deployment_names: Any,
    filters: Any,
) -> list[Deployment]:
    """The deployments of the fleet, in rollout order (as given; by name for ``filters``).

    Exactly one of the three must be given (checked by the operator); a rendered value that names nothing,
    an unknown id or name, or an invalid filter fails the task before anything is patched.

    :param hook: the hook.
    :param deployment_ids: ids (list, or comma-separated string).
    :param deployment_names: exact names (list, or comma-separated string).
    :param filters: list-endpoint filters (see :data:`TARGET_FILTERS`).
    """
    if deployment_ids is not None:
        try:
            ids = [canonical_uuid(value, "deployment_ids") for value in _as_list(deployment_ids)]
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        if not ids:
            raise AirflowFailException(f"deployment_ids rendered to {deployment_ids!r}: no targets")
        found = read_deployments(hook, ids)
        missing = [value for value in dict.fromkeys(ids) if value not in found]
        if missing:
            raise AirflowFailException(f"deployment_ids: no deployment with id {', '.join(missing)}")
        return [found[value] for value in dict.fromkeys(ids)]
    if deployment_names is not None:
        names = list(dict.fromkeys(_as_list(deployment_names)))
        if not names:
            raise AirflowFailException(f"deployment_names rendered to {deployment_names!r}: no targets")
        by_name: dict[str, list[Deployment]] = {}
        if len(names) <= 5:  # a few names: one filtered listing each
            for name in names:
                for item in hook.iter_deployments(ListDeploymentsQuery(limit=MAX_PAGE_SIZE, name_contains=name)):
                    by_name.setdefault(item.name, []).append(item)
        else:  # many names: the whole tenant once
            for item in hook.iter_deployments(ListDeploymentsQuery(limit=MAX_PAGE_SIZE)):
                by_name.setdefault(item.name, []).append(item)
        missing = [name for name in names if not by_name.get(name)]
        if missing:
            raise AirflowFailException(f"deployment_names: no deployment named {', '.join(missing)}")
        repeated = [name for name in names if len({item.id for item in by_name[name]}) > 1]
        if repeated:
            raise AirflowFailException(f"deployment_names: more than one deployment named {', '.join(repeated)}")
        return [by_name[name][0] for name in names]
    if isinstance(filters, str):
        try:
            filters = json.loads(filters)
        except ValueError:
            raise AirflowFailException(f"filters rendered to {filters!r}: expected a mapping of filters") from None
    try:
        check_filters(filters)
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    given = {name: value for name, value in filters.items() if value not in (None, "", [])}
    for name in ("tag_value_ids", "deployment_ids"):
        if name in given:
            given[name] = _as_list(given[name])
    try:
        query = ListDeploymentsQuery.model_validate({"limit": MAX_PAGE_SIZE, **given})
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"filters: {describe_validation_error(err)}") from None
    deployments = sorted(hook.iter_deployments(query), key=lambda item: (item.name, item.id))
    if not deployments:
        shown = ", ".join(f"{name}={value!r}" for name, value in sorted(given.items()))
        raise AirflowFailException(f"filters matched no deployment ({shown}): no targets")
    return list({item.id: item for item in deployments}.values())


def change_digest(parts: Mapping[str, Any]) -> str:
    """A digest of what a fleet rollout was asked to do (no secret values: callers give secret names).

    :param parts: JSON-able description of the change and the plan.
    """
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def request_fingerprint(deployment_id: str, request: PatchDeploymentRequest) -> str:
    """Digest of what one patch sets; secret values are left out (names only)."""
    shown = json.dumps(request.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(f"{deployment_id}:{shown}".encode()).hexdigest()


class CompletedPatch(NamedTuple):
    """The patch to send to one deployment, and what completing it did (see :func:`complete_request`).

    :param request: the patch to send.
    :param unchanged_fixed: create-time-only ``source_config`` fields given with the value the deployment has
        (left out).
    :param kept: ``resource_spec`` fields taken from the deployment's current one.
    :param dropped: limits of the current ``resource_spec`` not kept, being below the new request.
    :param carried: fields of the current ``resource_spec`` this provider does not know (the service's), carried
        through untouched.
    :param discouraged: fields production's reference marks "do not use".
    """

    request: PatchDeploymentRequest
    unchanged_fixed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()
    discouraged: tuple[str, ...] = ()


def complete_request(
    request: PatchDeploymentRequest, deployment: Deployment, *, resource_spec_mode: str, check_source_rules: bool
) -> CompletedPatch:
    """The patch to send to ``deployment``, as the patch operator sends one (``airflow_provider.patch_rules``):
    production's PATCH rules checked against the deployment (unless ``check_source_rules`` is off), create-time
    fields that would not change left out, and with ``resource_spec_mode="merge"`` a partial
    ``source_config.resource_spec`` completed from the deployment's current one (production replaces it
    whole), a kept limit below its new request left out (the service sets it to twice the request).

    :param request: the patch as the fleet's change gives it for this deployment.
    :param deployment: the deployment as read just before.
    :param resource_spec_mode: ``"merge"`` or ``"replace"`` (sent as given).
    :param check_source_rules: whether to refuse locally what production refuses.
    :raises AirflowFailException: naming the deployment, the field and the rule; nothing is sent.
    """
    if check_source_rules:
        found = refusals(request, deployment)
        if found:
            raise AirflowFailException(
                f"{describe_refusals(found, deployment)}; pass check_source_rules=False to send it anyway"
            )
    try:
        unchanged = tuple(unchanged_fixed_fields(request, deployment))
        to_send = without_unchanged_fixed_fields(request, deployment)
        merged = merge_resource_spec(to_send, deployment) if resource_spec_mode == "merge" else MergedSpec(to_send)
    except ValueError as err:
        raise AirflowFailException(f"deployment {deployment.name!r} ({deployment.id}): {err}") from None
    return CompletedPatch(
        merged.request,
        unchanged,
        merged.kept,
        merged.dropped,
        merged.carried,
        tuple(discouraged_fields(merged.request)),
    )


# ------------------------------------------------------------------------------------ progress
class ProgressStore:
    """The fleet's progress in ``task_state_store`` (one key for the header, one per wave), or only in
    memory when the task has no store.

    A key is written only when its value differs from the one this object last wrote there: on a
    worker every write is a round trip to the API server, and the header rarely changes while a wave's
    rows are saved after each batch of answered patches.

    :param store: ``context["task_state_store"]`` or ``None``.
    :param log: the task's logger.
    :param secrets: secret values to scrub from every row's message before it is recorded.
    """

    def __init__(self, store: Any, log: logging.Logger | Any, secrets: Iterable[str] = ()) -> None:
        self.store = store
        self.log = log
        self.secrets = tuple(secrets)
        self._written: dict[str, dict[str, Any]] = {}
        self.behind = False
        """Whether the last save failed: what the store holds is older than the progress (a deferral then
        carries the progress itself, and the resume takes it over the store's)."""

    def load(self, change: str) -> FleetProgress | None:
        """The progress an earlier try or deferral recorded for this change, else ``None``."""
        if self.store is None:
            return None
        try:
            header = self.store.get(STATE_KEY)
            if not isinstance(header, dict):
                return None
            if header.get("change") != change:
                self.log.info("The fleet rollout recorded by an earlier try asked for another change; planning anew")
                return None
            waves = [self.store.get(f"{STATE_KEY}/wave/{index}") for index in range(int(header["waves"]))]
        except Exception as err:  # the store is an optimisation: plan anew, reattach from the deployments
            self.log.warning("Could not read task_state_store (%s); planning the fleet rollout anew", err)
            return None
        if not all(isinstance(wave, dict) for wave in waves):
            return None
        return FleetProgress.from_json(header, waves)

    def save(self, progress: FleetProgress, *waves: int) -> None:
        """Record the header and the given waves (all when none is given), their messages scrubbed."""
        scrub_messages(progress, self.secrets)
        if self.store is None:
            return
        try:
            for index in range(len(progress.waves)) if self.behind else waves or range(len(progress.waves)):
                self._write(f"{STATE_KEY}/wave/{index}", progress.waves[index].to_json())
            self._write(STATE_KEY, progress.header_json())
        except Exception as err:  # not fatal: a retry recognises patches on the deployments
            self.behind = True
            self.log.warning("Could not record the fleet rollout's progress in task_state_store (%s)", err)
        else:
            self.behind = False

    def rollback_records(self, index: int) -> RollbackRecords | None:
        """Wave ``index``'s rollback records (``None`` without a store)."""
        return None if self.store is None else RollbackRecords(self.store, index, self.log)

    def _write(self, key: str, value: dict[str, Any]) -> None:
        if self._written.get(key) == value:
            return
        self._written.pop(key, None)  # until the store confirms, what it holds is unknown
        self.store.set(key, value)
        self._written[key] = value


class RollbackRecords:
    """One wave's rollback records in ``task_state_store``, one small key per deployment
    (``<key>/wave/<index>/rollback/<deployment_id>``): the rollback's intent, written just before its request
    (:class:`~airflow_provider.tasks.rollback.RollbackIntent`), then what was sent
    (:meth:`~airflow_provider.tasks.rollback.RollbackStarted.record`), as the rollback task records its own.
    Small keys, so that rolling back a wave of N deployments writes O(N) bytes, not the wave N times.

    :param store: ``context["task_state_store"]``.
    :param index: the wave.
    :param log: the task's logger.
    """

    def __init__(self, store: Any, index: int, log: logging.Logger | Any) -> None:
        self.store, self.index, self.log = store, index, log

    def key(self, deployment_id: str) -> str:
        """The key of a deployment's record."""
        return f"{STATE_KEY}/wave/{self.index}/rollback/{deployment_id}"

    def get(self, deployment_id: str) -> dict[str, Any] | None:
        """The record of this deployment's rollback, or ``None`` (none, or the store cannot be read)."""
        try:
            value = self.store.get(self.key(deployment_id))
        except Exception as err:  # judged from the deployment instead
            self.log.warning("Could not read the rollback record of %s (%s)", deployment_id, err)
            return None
        return value if isinstance(value, dict) else None

    def set(self, deployment_id: str, record: dict[str, Any]) -> None:
        """Record this deployment's rollback (a failure is logged: a retry then judges from the deployment)."""
        try:
            self.store.set(self.key(deployment_id), record)
        except Exception as err:
            self.log.warning("Could not record the rollback of %s in task_state_store (%s)", deployment_id, err)


def scrub_messages(progress: FleetProgress, secrets: Iterable[str]) -> None:
    """Replace every secret value in the rows' messages (they reach the task state store, XCom, the
    failure message and the trigger's arguments; a ``verify`` error often quotes a URL with a token).

    :param progress: the progress (its rows are updated in place).
    :param secrets: the task's secret values.
    """
    known = tuple(secrets)
    if not known:
        return
    for row in progress.rows:
        row.message = scrub(row.message, known)


def new_progress(
    plan: list[tuple[str, list[tuple[str, str]]]], deployments: Mapping[str, Deployment], allowed: int, change: str
) -> FleetProgress:
    """A fresh progress record for a plan.

    :param plan: waves from :func:`~airflow_provider.fleet.plan_waves`.
    :param deployments: the targets by id (their active revision is the ``from_revision``).
    :param allowed: the failure allowance.
    :param change: :func:`change_digest` of the request.
    """
    waves = [
        WaveRecord(
            name,
            [
                FleetRow(
                    deployment_id, deployment_name, name, from_revision=deployments[deployment_id].active_revision_id
                )
                for deployment_id, deployment_name in members
            ],
        )
        for name, members in plan
    ]
    return FleetProgress(waves=waves, allowed_failures=allowed, change=change)


# ------------------------------------------------------------------------------------ patching
def patch_wave(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    request_for: Callable[[Deployment], PatchDeploymentRequest],
    *,
    save: Callable[[], None],
    earlier_try_since: datetime | None,
    log: logging.Logger | Any,
    max_parallel: int = 1,
    complete: Callable[[PatchDeploymentRequest, Deployment], PatchDeploymentRequest] | None = None,
) -> None:
    """Patch every row of the wave not patched yet, up to ``max_parallel`` at a time; record each patch as
    soon as it is answered.

    What is sent to a deployment is its patch completed against it (``complete``: the source rules, a partial
    ``resource_spec`` completed; see :func:`complete_request`); a patch that cannot be completed fails that
    row, nothing sent. A retry recognises an earlier try's patch by the change as given (which the completed
    patch always shows).

    Before any PATCH, one save records for each row what served before it (revision, config, the whole
    ``resource_spec``, the names of the secrets the patch sets): what a rollback restores.

    A row an earlier try patched (recorded) is left alone. On a retry (``earlier_try_since``), a row with
    no record whose deployment already shows the patch and changed since the run started is reattached to
    (its latest revision is taken as the rollout's, what served before it looked up when unknown) instead
    of patched again; one that does not show it but made a revision since the run started is looked for
    among its revisions (an earlier try's patch, rolled back or superseded since, is recorded as such and
    never patched again; when the service cannot tell, the row fails saying so). A deployment that no
    longer exists, or refuses the patch (400/422), fails its row; the others go on. A transient failure that
    outlived the client's retries fails the task (a retry resumes here): no further patch is sent, and
    the patches already in flight are awaited and recorded first.

    Crash safety does not depend on ``max_parallel``. A row is recorded as patched only once the service
    answered its PATCH (the client itself never applies one PATCH twice: after an ambiguous failure it
    reads the deployment back before sending again). The worker can die between a PATCH reaching the
    service and its record, for at most ``max_parallel`` rows at once (one when patching one at a time);
    a retry finds each of them without a record but showing the patch, changed since the run started, and
    reattaches to it instead of patching again. The calls ``patch_for`` (``request_for``), the row
    updates, the log lines and ``save`` all run on the calling thread, one at a time; only the PATCH
    requests run on the pool's threads (the client's connection pool holds 20 connections: beyond that,
    requests wait for a free one).

    :param hook: the hook.
    :param wave: the wave (its rows are updated in place).
    :param request_for: the patch for a deployment (may raise ``AirflowFailException`` for that one).
    :param save: records the progress (called after each decision, and after each batch of patches that
        finished together).
    :param earlier_try_since: the run's start when this is a retry, else ``None``.
    :param log: the task's logger.
    :param max_parallel: most PATCH requests in flight at once (1: one after the other).
    :param complete: ``(request, deployment) -> the patch to send`` (may raise ``AirflowFailException`` for that
        deployment); ``None`` sends the request as given.
    """
    todo = [row for row in wave.rows if row.outcome == Outcome.PENDING and not row.patched]
    current = read_deployments(hook, [row.deployment_id for row in todo]) if todo else {}
    ready: list[_Patch] = []
    for row in todo:
        now = time.time()
        deployment = current.get(row.deployment_id)
        if deployment is None:
            row.started_at = now
            row.decide(Outcome.FAILED, f"deployment {row.name!r} ({row.deployment_id}) no longer exists", now)
            log.warning("%s: %s", wave.name, row.message)
            save()
            continue
        try:
            request = request_for(deployment)
        except AirflowFailException as err:
            row.started_at = now
            row.decide(Outcome.FAILED, f"could not build the patch: {err}", now)
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
            save()
            continue
        fingerprint = request_fingerprint(row.deployment_id, request)
        secrets = sorted(secret.name for secret in request.secrets or [])
        if row.previous_resource_spec is None and not sets_resource_spec(request):
            # A change that does not set resource_spec leaves it as it was: a rollback has none to restore,
            # even on a retry that lost the record of what served before.
            row.previous_resource_spec = resource_spec_json(deployment.source_config.resource_spec)
            row.resource_spec_changes = []
        applied = earlier_try_since is not None and _applied_earlier(request, deployment, earlier_try_since)
        if earlier_try_since is not None and not applied:
            earlier = _earlier_patch_undone(hook, request, deployment, earlier_try_since, row.previous_latest)
            if earlier is not None:
                row.secrets_changed = secrets
                _record_earlier_patch(wave, row, earlier, fingerprint, now, log)
                save()
                continue
        if applied:
            row.secrets_changed = secrets
            assert earlier_try_since is not None
            try:
                row.to_revision = _earlier_patch_revision(
                    hook, request, deployment, row.previous_latest, earlier_try_since
                )
            except AirflowFailException as err:
                row.started_at, row.fingerprint = now, fingerprint
                row.decide(Outcome.FAILED, f"{err}; not patching it again. Check the deployment", now)
                log.warning("%s: %s: %s", wave.name, row.name, row.message)
                save()
                continue
            row.fingerprint, row.started_at, row.outcome = fingerprint, now, Outcome.ROLLING_OUT
            log.info(
                "%s: %s already shows this patch (an earlier try); reattaching, not patching again", wave.name, row.name
            )
            if row.to_revision is not None:
                _find_what_served_before(hook, row, log)
            save()
            continue
        try:
            to_send = complete(request, deployment) if complete is not None else request
        except AirflowFailException as err:
            row.started_at = now
            row.decide(Outcome.FAILED, f"not patched: {err}", now)
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
            save()
            continue
        row.from_revision, row.previous_latest = deployment.active_revision_id, deployment.latest_revision_id
        row.previous_config = (
            None if deployment.is_rolling_out else revision_fields(deployment.source_revision_config) or None
        )
        row.previous_resource_spec = resource_spec_json(deployment.source_config.resource_spec)
        row.resource_spec_changes = list(changes_of(to_send, row.previous_resource_spec))
        row.secrets_changed = secrets
        ready.append(_Patch(len(ready), row, to_send, fingerprint))
    if ready:
        save()  # what served before each patch, recorded before any is sent: a retry reattaching needs it
        _send_patches(hook, wave, ready, save=save, log=log, max_parallel=max_parallel)


class _Patch(NamedTuple):
    """One PATCH of a wave, ready to send."""

    position: int
    row: FleetRow
    request: PatchDeploymentRequest
    fingerprint: str


def _send_patches(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    patches: Sequence[_Patch],
    *,
    save: Callable[[], None],
    log: logging.Logger | Any,
    max_parallel: int,
) -> None:
    """Send the patches, at most ``max_parallel`` in flight, in wave order; record the answers on this
    thread as they come (see :func:`patch_wave`)."""
    queue = deque(patches)
    in_flight: dict[Future[Deployment], _Patch] = {}
    stop: Exception | None = None  # the first failure that ends the wave (sent no further patch)
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(max_parallel, len(patches)), thread_name_prefix="fleet-patch") as pool:
        while queue or in_flight:
            while queue and stop is None and len(in_flight) < max_parallel:
                item = queue.popleft()
                future = pool.submit(
                    hook.patch_deployment,
                    item.row.deployment_id,
                    item.request,
                    previous_latest_revision_id=item.row.previous_latest,
                )
                in_flight[future] = item
            if not in_flight:
                break
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda done: in_flight[done].position):  # log in wave order
                item = in_flight.pop(future)
                try:
                    _record_patch(wave, item, future.result(), log)
                except NotFoundError as err:
                    item.row.started_at = now = time.time()
                    item.row.decide(Outcome.FAILED, f"deployment {item.row.name!r} was deleted: {err}", now)
                    log.warning("%s: %s", wave.name, item.row.message)
                except DeploymentServiceError as err:
                    if err.transient:
                        stop = stop or err
                        continue
                    item.row.started_at = now = time.time()
                    item.row.decide(Outcome.FAILED, f"the service refused the patch: {err}", now)
                    log.warning("%s: %s: %s", wave.name, item.row.name, item.row.message)
                except Exception as err:  # not the service's verdict: end the wave, as a transient failure does
                    stop = stop or err
            save()
    log.info(
        "%s: %d PATCH request(s) sent in %.1f s, at most %d at a time%s",
        wave.name,
        len(patches) - len(queue),
        time.monotonic() - began,
        max_parallel,
        f"; {len(queue)} not sent" if queue else "",
    )
    if stop is not None:
        raise stop


def _record_patch(wave: WaveRecord, item: _Patch, patched: Deployment, log: logging.Logger | Any) -> None:
    row = item.row
    created = patched.latest_revision_id if patched.latest_revision_id != row.previous_latest else None
    row.to_revision, row.fingerprint = created, item.fingerprint
    row.started_at, row.outcome = time.time(), Outcome.ROLLING_OUT
    log.info(
        "%s: patched %s: revision %s (was active: %s)",
        wave.name,
        row.name,
        created or "(none created)",
        row.from_revision,
    )


def sets_resource_spec(request: PatchDeploymentRequest) -> bool:
    """Whether a patch sets ``source_config.resource_spec`` (else it leaves the deployment's as it was).

    :param request: the patch.
    """
    return request.source_config is not None and request.source_config.resource_spec is not None


def _applied_earlier(request: PatchDeploymentRequest, deployment: Deployment, since: datetime) -> bool:
    if not request.is_reflected_in(deployment):
        return False
    if request.creates_revision and deployment.latest_revision_id is None:
        return False
    return deployment.updated_at >= since


def _earlier_patch_revision(
    hook: DeploymentServiceHook,
    request: PatchDeploymentRequest,
    deployment: Deployment,
    recorded_latest: str | None,
    since: datetime,
) -> str | None:
    """The revision an earlier try's patch made, on a deployment that shows the patch (``None``: it made none).

    A patch that sets a revision field or secrets makes the latest revision. A ``resource_spec``-only patch
    makes one in production and none under another reading of the spec: it made the latest one when that is
    not the latest recorded just before the PATCH (``recorded_latest``), or, with nothing recorded, while it
    still rolls out, else when it is the one revision made since the DAG run started (the revision list). A
    revision already live is never taken for "no revision": the task would call the deployment
    ``unchanged`` and never verify it.

    :param hook: the hook.
    :param request: the patch (as the change gives it).
    :param deployment: the deployment as just read (it shows the patch, changed since the run started).
    :param recorded_latest: the latest revision recorded just before the PATCH (``None``: not recorded).
    :param since: when the DAG run started.
    :raises AirflowFailException: when which revision is the patch's cannot be told.
    """
    latest = deployment.latest_revision_id
    if request.creates_revision or not request.may_create_revision:
        return latest if request.creates_revision else None
    if recorded_latest is not None:
        return latest if latest != recorded_latest else None
    if deployment.is_rolling_out:
        return latest
    try:
        listed = list(hook.iter_revisions(deployment.id, max_results=EARLIER_REVISIONS_READ))
    except DeploymentServiceError as err:
        if err.transient:
            raise
        raise AirflowFailException(
            f"shows this resource_spec patch, but whether an earlier try's patch made its latest revision "
            f"{latest} cannot be told: its revisions cannot be read ({err})"
        ) from None
    if any(revision.created_at is None for revision in listed):
        raise AirflowFailException(
            "shows this resource_spec patch, but the service does not say when its revisions were made, so "
            f"whether an earlier try's patch made its latest revision {latest} cannot be told"
        )
    made = [revision.id for revision in _newest_first(listed) if revision.created_at and revision.created_at >= since]
    if not made:
        return None
    if made == [latest]:
        return latest
    raise AirflowFailException(
        f"shows this resource_spec patch, but {len(made)} revisions were made since the run started "
        f"({', '.join(made)}; latest {latest}): which one is an earlier try's patch cannot be told"
    )


def _find_what_served_before(hook: DeploymentServiceHook, row: FleetRow, log: logging.Logger | Any) -> None:
    """For a row reattached to an earlier try's patch: the revision before it and its config (what a
    rollback restores), when the row does not know them (planned anew after the patch went live, or the
    patch's record was lost), from the deployment's revisions (the optional revisions endpoint).

    Unknown stays unknown: ``from_revision`` is then ``None`` (no rollback is possible, and the row says so)
    rather than the patch's own revision.
    """
    if row.from_revision == row.to_revision:
        row.from_revision = None
    if row.from_revision is not None and row.previous_config is not None:
        return
    try:
        listed = list(hook.iter_revisions(row.deployment_id, max_results=EARLIER_REVISIONS_READ))
    except DeploymentServiceError as err:
        if err.transient:
            raise
        log.info("%s: the revisions before %s cannot be read (%s)", row.name, row.to_revision, err)
        return
    ordered = _newest_first(listed)
    ids = [revision.id for revision in ordered]
    if row.to_revision not in ids or ids.index(row.to_revision) + 1 >= len(ids):
        return
    before = ordered[ids.index(row.to_revision) + 1]
    if row.from_revision is None:
        row.from_revision = before.id
    if before.id == row.from_revision:
        row.previous_config = revision_fields(before.source_revision_config) or None


def _newest_first(revisions: Iterable[Revision]) -> list[Revision]:
    """The revisions that say when they were made, newest first (the service's order is not documented)."""
    dated = [(revision.created_at, revision) for revision in revisions if revision.created_at is not None]
    return [revision for _, revision in sorted(dated, key=lambda item: item[0], reverse=True)]


EARLIER_REVISIONS_READ = 50
"""At most this many of a deployment's newest revisions are read to recognise an earlier try's patch."""


class _EarlierPatch(NamedTuple):
    """What a retry with no record found on a deployment: an earlier try's patch, then a newer revision.

    :param patched: the revision the earlier try's patch created.
    :param before: the revision before it (what served when it was patched).
    :param latest: the deployment's latest revision now.
    :param rolled_back: whether ``latest`` copies ``before`` (the earlier try's rollback); else someone
        else's revision superseded the patch.
    :param cannot_tell: why nothing can be said (then the other fields are ``None``/``False``).
    :param in_place: whether the rollback deployed ``before`` itself again (a service whose redeploy makes no
        revision): ``latest`` is then ``before``, and ``patched`` stays the deployment's latest revision.
    """

    patched: str | None
    before: str | None
    latest: str | None
    rolled_back: bool
    cannot_tell: str = ""
    in_place: bool = False


def _earlier_patch_undone(
    hook: DeploymentServiceHook,
    request: PatchDeploymentRequest,
    deployment: Deployment,
    since: datetime,
    recorded_latest: str | None,
) -> _EarlierPatch | None:
    """On a retry with no record of this deployment's patch: whether an earlier try patched it and its patch
    no longer shows (rolled back by that try, or superseded), read from the revisions the deployment made
    since the run started; ``None`` when it did not (patch it).

    No revision made since the run started means no earlier patch: the deployment has not changed since
    then, or its latest revision is still the one recorded just before the patch would have been sent, or
    the revision endpoint dates the latest revision before the run. Otherwise the deployment's revisions are
    read (the optional revisions endpoint): one made since then that carries the patch's revision fields is
    the earlier try's. When that cannot be read (no revisions endpoint, or a patch that sets no revision
    field: only secrets or ``resource_spec``), the answer is ``cannot_tell``: the row fails rather than
    risk a second patch.

    :param hook: the hook.
    :param request: the patch for this deployment.
    :param deployment: the deployment as just read.
    :param since: when the DAG run started.
    :param recorded_latest: the deployment's latest revision as recorded before its patch (``None``: not
        recorded).
    """
    if deployment.updated_at < since or not request.may_create_revision:
        return None  # unchanged, or a patch that makes no revision (so no rollback either)
    latest = deployment.latest_revision_id
    if latest is None or (recorded_latest is not None and latest == recorded_latest):
        return None
    try:
        newest = hook.get_revision(deployment.id, latest)
    except DeploymentServiceError as err:
        if err.transient:
            raise
        newest = None  # no revision endpoint: the revision list says more
    if newest is not None and newest.created_at is not None and newest.created_at < since:
        return None
    wanted = request.source_revision_config
    wanted_fields = wanted.model_dump(mode="json", exclude_none=True) if wanted is not None else {}
    try:
        listed = list(hook.iter_revisions(deployment.id, max_results=EARLIER_REVISIONS_READ))
    except DeploymentServiceError as err:
        if err.transient:
            raise
        return _EarlierPatch(None, None, None, False, f"its revisions cannot be read ({err})")
    if any(revision.created_at is None for revision in listed):
        return _EarlierPatch(None, None, None, False, "the service does not say when its revisions were made")
    revisions = _newest_first(listed)
    made = [revision for revision in revisions if revision.created_at is not None and revision.created_at >= since]
    if not made:
        return None
    if not wanted_fields:
        return _EarlierPatch(
            None,
            None,
            None,
            False,
            f"{len(made)} revision(s) were made since the run started and the patch sets no revision field "
            "(only secrets or resource_spec) to recognise its own among them",
        )
    ours = [
        revision
        for revision in made
        if revision.source_revision_config is not None
        and all(
            revision.source_revision_config.model_dump(mode="json").get(name) == value
            for name, value in wanted_fields.items()
        )
    ]
    if not ours:
        return None
    patched, newest_listed = ours[-1], revisions[0]  # newest first: the oldest of them is the earlier try's patch
    before = revisions[revisions.index(patched) + 1] if revisions.index(patched) + 1 < len(revisions) else None
    if newest_listed.id == patched.id:
        # Still the latest revision, yet the deployment does not show the patch: the revision before it was
        # deployed again in place (a redeploy that makes no revision: the earlier try's rollback).
        config = before.source_revision_config if before is not None else None
        if (
            before is not None
            and config is not None
            and same_revision_config(deployment.source_revision_config, config)
        ):
            return _EarlierPatch(patched.id, before.id, before.id, True, in_place=True)
        return _EarlierPatch(
            None,
            None,
            None,
            False,
            f"revision {patched.id}, made since the run started, carries this patch and is still the latest, but "
            "the deployment does not show it, nor the build of the revision before it",
        )
    if before is None or before.source_revision_config is None or newest_listed.source_revision_config is None:
        return _EarlierPatch(
            None,
            None,
            None,
            False,
            f"revision {patched.id}, made since the run started, carries this patch, but what served before it "
            f"and whether the latest revision {newest_listed.id} copies it cannot be read",
        )
    copies = same_revision_config(newest_listed.source_revision_config, before.source_revision_config)
    return _EarlierPatch(patched.id, before.id, newest_listed.id, copies)


def _record_earlier_patch(
    wave: WaveRecord, row: FleetRow, earlier: _EarlierPatch, fingerprint: str, now: float, log: logging.Logger | Any
) -> None:
    """Record what a retry found of an earlier try's patch that no longer shows: never patch it again."""
    row.started_at, row.fingerprint = now, fingerprint
    if earlier.cannot_tell:
        row.decide(
            Outcome.FAILED,
            "changed since this DAG run started without showing this patch, and no earlier try left a record: "
            f"cannot tell whether an earlier try patched it and rolled it back ({earlier.cannot_tell}); not "
            "patching it again. Check the deployment, then run the rollout again",
            now,
        )
    elif earlier.rolled_back:
        row.from_revision, row.to_revision = earlier.before, earlier.patched
        row.went_live, row.rollback_revision = True, earlier.latest
        row.rollback_allowed_latest = earlier.patched if earlier.in_place else None
        how = "deployed again in place" if earlier.in_place else f"a copy of revision {earlier.before}"
        # What the rollback could not undo, as a rollback this try sent would say.
        unknown_spec = [RESOURCE_SPEC_UNKNOWN] if row.previous_resource_spec is None else []
        row.not_restored = [*unknown_spec, *([secrets_clause(row.secrets_changed)] if row.secrets_changed else [])]
        row.decide(
            Outcome.ROLLED_BACK_REASON_UNKNOWN,
            f"{REASON_UNKNOWN}: it patched it (revision {earlier.patched}) and rolled it back (revision "
            f"{earlier.latest}, {how}); it may have failed verify or the bake, or "
            "been rolled back with its wave, so it counts against the failure budget (not as a failure)",
            now,
        )
    else:
        row.from_revision, row.to_revision = earlier.before, earlier.patched
        row.decide(
            Outcome.FAILED,
            f"superseded: an earlier try of this task patched it (revision {earlier.patched}), then revision "
            f"{earlier.latest} replaced it (someone else rolled out); not patching it again",
            now,
        )
    log.warning("%s: %s: %s", wave.name, row.name, row.message)


def in_flight(wave: WaveRecord) -> dict[str, str | None]:
    """``{deployment_id: revision or None}`` of the wave's rollouts still undecided."""
    return {row.deployment_id: row.to_revision for row in wave.rows if row.outcome == Outcome.ROLLING_OUT}


def apply_outcomes(wave: WaveRecord, outcomes: Mapping[str, Sequence[Any]], log: logging.Logger | Any) -> None:
    """Record what the watch decided: ``{deployment_id: (outcome, message, at)}``.

    :param wave: the wave.
    :param outcomes: the decisions (a trigger event's ``outcomes`` or :attr:`WaveTracker.decided`).
    :param log: the task's logger.
    """
    for row in wave.rows:
        decision = outcomes.get(row.deployment_id)
        if row.outcome != Outcome.ROLLING_OUT or decision is None:
            continue
        outcome, message, at = decision
        row.decide(str(outcome), str(message), float(at))
        row.went_live = row.outcome == Outcome.LANDED or row.message.startswith("left service during the bake")
        row.timed_out = row.outcome == Outcome.FAILED and row.message.startswith("timed out")
        if row.timed_out:
            row.message += "; still rolling out when the task stopped watching it: its revision may yet go live"
        if failed_build(row):
            row.message += f"; {BUILD_NOT_RETRIED}"
        if row.outcome == Outcome.FAILED:
            log.warning("%s: %s failed: %s", wave.name, row.name, row.message)


BUILD_FAILURES = ("BUILD_FAILED", "CREATE_FAILED")
"""Revision statuses of a failed build (the rows whose build log is worth showing)."""
BUILD_NOT_RETRIED = "a retry of this task does not build it again: a new DAG run, or a changed patch, does"
"""What a row whose build failed says of retries: a retry finds the failed revision and reports it again,
never patching the deployment a second time for the same change."""


def failed_build(row: FleetRow) -> bool:
    """Whether the row failed because its revision's build failed.

    :param row: a row.
    """
    return (
        row.outcome == Outcome.FAILED
        and bool(row.to_revision)
        and any(f"status {status}" in row.message for status in BUILD_FAILURES)
    )


BUILD_LOGS_PER_WAVE = 5
"""At most this many failed builds of one wave get their build log's tail in the task log."""


def explain_failed_builds(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    log: logging.Logger | Any,
    *,
    secrets: Iterable[str] = (),
    limit: int = BUILD_LOGS_PER_WAVE,
) -> list[str]:
    """Log the last lines of the build log of each revision of the wave whose build failed.

    Only rows that failed because their revision's build failed are explained (a timeout, a deletion or a
    refused verify has no build log to show), at most ``limit`` per wave; reading a log never fails the
    task (see :func:`~airflow_provider.tasks.build_logs.log_failed_build`).

    :param hook: the hook.
    :param wave: the wave, its outcomes recorded.
    :param log: the task's logger.
    :param secrets: secret values to scrub from the lines.
    :param limit: most build logs shown for the wave.
    :returns: names of the deployments whose build log was asked for.
    """
    failed = [row for row in wave.rows if failed_build(row)]
    known = tuple(secrets)
    for row in failed[:limit]:
        log.error("%s: the build of %s's revision %s failed", wave.name, row.name, row.to_revision)
        log_failed_build(hook, row.deployment_id, row.to_revision, log, secrets=known)
    if len(failed) > limit:
        log.warning(
            "%s: %d more failed build(s), build logs not shown: %s",
            wave.name,
            len(failed) - limit,
            ", ".join(row.name for row in failed[limit:]),
        )
    return [row.name for row in failed[:limit]]


# ------------------------------------------------------------------------------------ waiting
def watch_wave(
    hook: DeploymentServiceHook,
    rollouts: Mapping[str, str | None],
    *,
    poll_interval: float,
    deadline: float,
    bake_seconds: float,
    revision_check_interval: float,
    log: logging.Logger | Any,
    sleep: Callable[[float], None] = time.sleep,
    allowed_latest: Mapping[str, str] | None = None,
) -> dict[str, tuple[str, str, float]]:
    """Wait on the worker until every rollout of a wave is decided, as the trigger does: one list request
    per 100 undecided rollouts per interval, the revision endpoint (fail fast on a failed build) when a
    deployment changed, and otherwise (first looks, the safety-net timer) out of a
    :class:`~airflow_provider.rollout.RevisionLookBudget` of one call per ten list requests.

    :param hook: the hook.
    :param rollouts: ``{deployment_id: revision or None}``.
    :param poll_interval: seconds between rounds.
    :param deadline: wall-clock time by which every revision must be live.
    :param bake_seconds: how long a live revision must stay live.
    :param revision_check_interval: longest time between two revision-endpoint calls while nothing changes.
    :param log: the task's logger.
    :param sleep: how to wait (tests may pass their own).
    :param allowed_latest: ``{deployment_id: revision}`` allowed to stay the latest (see
        :class:`~airflow_provider.fleet.WaveTracker`).
    :returns: ``{deployment_id: (outcome, message, decided_at)}``.
    """
    tracker = WaveTracker(dict(rollouts), bake_seconds, deadline, dict(allowed_latest or {}))
    schedules = {deployment_id: RevisionCheckSchedule(revision_check_interval) for deployment_id in rollouts}
    budget = RevisionLookBudget()
    revisions: dict[str, Revision] = {}
    endpoint = True
    while not tracker.done:
        started = time.time()
        final = started >= deadline
        waiting = tracker.undecided
        found: dict[str, Deployment] = {}
        failed: set[str] = set()
        for chunk in _chunks(waiting):
            try:
                page = hook.list_deployments(deployment_ids=list(chunk), limit=MAX_PAGE_SIZE)
            except DeploymentServiceError as err:
                if not err.transient:
                    raise
                log.warning("Listing %d deployment(s) failed (%s); trying again next round", len(chunk), err)
                failed.update(chunk)
                continue
            found.update({item.id: item for item in page.resources if item.id in chunk})
        allowed = budget.grant(-(-len(waiting) // MAX_PAGE_SIZE))
        due: list[tuple[str, Deployment, str]] = []
        unhurried: list[tuple[str, Deployment, str]] = []
        for deployment_id in waiting:
            deployment, revision_id = found.get(deployment_id), rollouts[deployment_id]
            reason = schedules[deployment_id].reason(deployment, revision_id, force=final)
            if deployment is not None:
                schedules[deployment_id].seen(deployment)  # a later change is urgent even before the first look
            if not endpoint or reason is None or deployment is None or revision_id is None:
                continue
            (unhurried if reason in ("first", "timer") else due).append((deployment_id, deployment, revision_id))
        unhurried.sort(key=lambda item: schedules[item[0]].last_asked)  # never asked first, then longest unasked
        budget.spend(min(allowed, len(unhurried)))
        for deployment_id, deployment, revision_id in [*due, *unhurried[:allowed]]:
            if not endpoint:
                break
            schedules[deployment_id].mark(deployment)
            try:
                revisions[deployment_id] = hook.get_revision(deployment_id, revision_id)
            except DeploymentServiceError as err:
                if not err.transient and err.status_code in REVISION_ENDPOINT_MISSING:
                    endpoint = False
                    log.info("The revision endpoint is not available (%s); watching the deployments only", err)
        for deployment_id in waiting:
            if deployment_id in failed:
                if final:
                    tracker.give_up(deployment_id, "timed out; the final check failed", started)
                continue
            message = tracker.observe(
                deployment_id, found.get(deployment_id), revisions.get(deployment_id), started, final=final
            )
            if message is not None:
                log.info("%s", message)
        if tracker.done:
            break
        pause = max(0.0, poll_interval - (time.time() - started))
        if not final and time.time() + pause > deadline:
            pause = max(0.0, deadline - time.time())
        sleep(pause)
    return dict(tracker.decided)


# ------------------------------------------------------------------------------------ verifying
def verify_wave(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    verify: Callable[[Deployment], Any],
    log: logging.Logger | Any,
    *,
    secrets: Iterable[str] = (),
) -> None:
    """Run ``verify`` on every deployment of the wave that landed (read live); a false result or an
    exception fails that row (the secret values scrubbed from what it said).

    :param hook: the hook.
    :param wave: the wave.
    :param verify: the user's check: given the live ``Deployment``, returns false or raises when bad.
    :param log: the task's logger.
    :param secrets: secret values to scrub from the verdict (an error often quotes a URL with a token).
    """
    known = tuple(secrets)
    # A row whose rollback was asked for was verified by an earlier try (its verdict is recorded): the
    # deployment may already serve the rollback, which is not what verify is to judge.
    landed = [row for row in wave.rows if row.outcome == Outcome.LANDED and row.rollback_requested_after is None]
    live = read_deployments(hook, [row.deployment_id for row in landed]) if landed else {}
    for row in landed:
        deployment = live.get(row.deployment_id)
        now = time.time()
        if deployment is None:
            row.decide(Outcome.FAILED, f"deployment {row.name!r} disappeared before it could be verified", now)
            continue
        if row.to_revision is not None and deployment.active_revision_id != row.to_revision:
            row.decide(
                Outcome.FAILED,
                f"revision {row.to_revision} no longer served when verify was to run (active: "
                f"{deployment.active_revision_id}; latest: {deployment.latest_revision_id}): not verified",
                now,
            )
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
            continue
        try:
            accepted = verify(deployment)
        except Exception as err:  # the user's check failing is the verdict, not a task error
            passed, reason = False, f"verify raised {type(err).__name__}: {err}"
        else:
            passed, reason = accepted is None or bool(accepted), f"verify returned {accepted!r}"
        if passed:
            log.info("%s: %s verified on revision %s", wave.name, row.name, row.to_revision)
        else:
            reason = scrub(reason, known)
            row.decide(Outcome.FAILED, f"verification failed on revision {row.to_revision}: {reason}", now)
            log.warning("%s: %s: %s", wave.name, row.name, row.message)


# ------------------------------------------------------------------------------------ rolling back
ROLLBACK_SAVE_EVERY = 20
"""The wave is saved after this many rollbacks started (and at the end): each rollback's own record, written
before and after its request, already protects a retry, so the wave's rows need not be written N times."""


def secrets_clause(names: Sequence[str]) -> str:
    """The ``not_restored`` clause naming the secrets a change set (names only: values are never kept).

    :param names: the secret names.
    """
    return f"secrets {', '.join(names)} (a rollback cannot restore secret values: the deployment keeps the new ones)"


def start_rollbacks(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    *,
    stopping: str | None,
    save: Callable[[], None],
    log: logging.Logger | Any,
    records: RollbackRecords | None = None,
    earlier_try_since: datetime | None = None,
) -> dict[str, str | None]:
    """Roll back every deployment of the wave whose new revision went live and failed, or was still
    rolling out when the watch timed out (it may yet go live), and, when the wave stops the rollout
    (``stopping``), every one that landed (it stays ``landed`` until its rollback is decided, then becomes
    ``rolled_back_with_wave``: not a failure); do not wait.

    A rollback over a revision still rolling out queues behind it on the service: that revision may serve
    for a while, then the restored one replaces it (the rollback's watch waits for that, within
    ``timeout``). When the still-building revision fails instead, there is nothing to roll back and the
    rollback only checks that the previous revision still serves.

    Uses :func:`~airflow_provider.tasks.rollback.start_rollback` with what the row recorded before its
    patch: the previous ``resource_spec`` (restored whole, with the build, in one revision when it changed)
    and config (when the service cannot say). What it does not undo is kept in the row's ``not_restored``:
    its clauses, plus one naming the secrets the patch set (never their values).

    Never twice, never claimed: every rollback about to be sent is marked in the wave's rows
    (``rollback_requested_after``, one save before any request), then recorded in its own key just before
    its request and once sent (``records``: :class:`RollbackRecords`). A retry reattaches to a recorded
    rollback (:func:`~airflow_provider.tasks.rollback.reattach_recorded_rollback`: waits for it, or sends
    one that did not land), and without a record looks for it on the deployment from the mark (or the run's
    start) on (:func:`~airflow_provider.tasks.rollback.find_earlier_rollback`, positive evidence only).
    When neither can tell, the row keeps its outcome and says so; nothing is sent again. A rollback that
    cannot start (refused, the deployment gone, the service's 4xx) leaves its row ``failed`` (or ``landed``)
    with the reason, is not asked for again (a wave with an analysis calls this as each verdict comes, then
    once more at its end) and the others go on; a transient failure that outlived the client's retries fails the
    task once what was sent is recorded (a retry resumes here).

    :param hook: the hook.
    :param wave: the wave.
    :param stopping: why the wave stops the rollout (``"the failure budget was exceeded"``...), or ``None``
        when it does not: the rows that landed are rolled back too only when it does.
    :param save: records the progress (before the first request, every :data:`ROLLBACK_SAVE_EVERY`
        rollbacks, and at the end).
    :param log: the task's logger.
    :param records: the wave's rollback records (``None`` without a task state store).
    :param earlier_try_since: the run's start when this is a retry (a rollback found on a deployment may be
        an earlier try's), else ``None``.
    :returns: ``{deployment_id: revision to wait for}`` of every rollback started and not yet decided,
        an earlier try's included (see :func:`pending_rollbacks`).
    """
    wanted = [
        row
        for row in wave.rows
        if (row.went_live or row.timed_out)
        and row.to_revision
        and row.rollback_revision is None
        and not row.rollback_decided  # one that could not be started is not asked for again
        and (row.outcome == Outcome.FAILED or (stopping is not None and row.outcome == Outcome.LANDED))
    ]
    for row in [row for row in wanted if not row.from_revision]:
        wanted.remove(row)
        if "the revision that served before it is not known" not in row.message:
            _rollback_not_started(wave, row, "is not possible: the revision that served before it is not known", log)
    live = read_deployments(hook, [row.deployment_id for row in wanted]) if wanted else {}
    marked_earlier = {row.deployment_id for row in wanted if row.rollback_requested_after}
    for row in wanted:
        if row.deployment_id in live and not row.rollback_requested_after:
            row.rollback_requested_after = live[row.deployment_id].updated_at.isoformat()
    save()  # before any request: a retry looks for these rollbacks instead of refusing or re-sending them
    started_count = 0
    for row in wanted:
        deployment = live.get(row.deployment_id)
        if deployment is None:
            _rollback_not_started(wave, row, f"could not be started: deployment {row.name!r} no longer exists", log)
            continue
        retried = row.deployment_id in marked_earlier or earlier_try_since is not None
        try:
            started = _earlier_rollback(hook, row, deployment, records, earlier_try_since, log) if retried else None
        except AirflowFailException as err:
            _rollback_not_started(wave, row, f"could not be confirmed: {err}", log)
            continue
        if started is None:
            try:
                started = _send_rollback(hook, row, deployment, records, log)
            except AirflowFailException as err:
                _rollback_not_started(wave, row, f"was refused: {err}", log)
                continue
            except DeploymentServiceError as err:
                if err.transient:
                    save()  # what was sent is recorded: a retry resumes here
                    raise
                _rollback_not_started(wave, row, f"could not be started: {err}", log)
                continue
        _rollback_started(wave, row, started, stopping, log)
        started_count += 1
        if started_count % ROLLBACK_SAVE_EVERY == 0:
            save()
    save()
    return pending_rollbacks(wave)


def _send_rollback(
    hook: DeploymentServiceHook,
    row: FleetRow,
    deployment: Deployment,
    records: RollbackRecords | None,
    log: logging.Logger | Any,
) -> RollbackStarted:
    """Start the row's rollback, its intent recorded just before the request and what was sent just after."""
    assert row.from_revision is not None
    started = start_rollback(
        hook,
        deployment,
        row.from_revision,
        rolling_back_from=row.to_revision,
        fallback_config=row.previous_config,
        resource_spec=row.previous_resource_spec,
        resource_spec_fields=row.resource_spec_changes,
        before_sending=None if records is None else (lambda intent: records.set(row.deployment_id, intent.record())),
        log=log,
    )
    if records is not None:
        records.set(row.deployment_id, started.record())
    return started


def _earlier_rollback(
    hook: DeploymentServiceHook,
    row: FleetRow,
    deployment: Deployment,
    records: RollbackRecords | None,
    earlier_try_since: datetime | None,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback an earlier try (or this one, before it died) sent for ``row``, from its record, else
    found on the deployment; ``None`` when none landed (send it). :class:`AirflowFailException` when whether
    one landed cannot be told (the row then says so; nothing is sent).

    :param hook: the hook.
    :param row: a row whose rollback is wanted and not recorded as accepted in the wave.
    :param deployment: the deployment as just read.
    :param records: the wave's rollback records, if any.
    :param earlier_try_since: the run's start on a retry.
    :param log: the task's logger.
    """
    assert row.from_revision is not None
    record = records.get(row.deployment_id) if records is not None else None
    if (
        record is not None
        and record.get("deployment_id") == row.deployment_id
        and record.get("to_revision_id") == row.from_revision
        and record.get("rolled_back_from") in (None, row.to_revision)
    ):
        return reattach_recorded_rollback(hook, deployment, record, log=log)
    if row.rollback_requested_after:
        since: datetime | None = datetime.fromisoformat(row.rollback_requested_after)
    else:
        since = earlier_try_since
    return find_earlier_rollback(
        hook,
        deployment,
        row.from_revision,
        since=since,
        rolling_back_from=row.to_revision,
        fallback_config=row.previous_config,
        resource_spec=row.previous_resource_spec,
        resource_spec_fields=row.resource_spec_changes,
        log=log,
    )


def _rollback_started(
    wave: WaveRecord, row: FleetRow, started: RollbackStarted, stopping: str | None, log: logging.Logger | Any
) -> None:
    """Record a rollback the service accepted (or that a retry found): a retry watches it."""
    if row.outcome == Outcome.LANDED:
        row.message = f"{row.message}; rolled back with its wave ({stopping})"
    row.rollback_revision = started.revision_id
    row.rollback_allowed_latest = started.allowed_latest_revision_id
    row.rollback_path = started.path
    row.not_restored = [*started.not_restored, *([secrets_clause(row.secrets_changed)] if row.secrets_changed else [])]
    log.warning("%s: %s: %s", wave.name, row.name, started.summary())


def _rollback_not_started(wave: WaveRecord, row: FleetRow, reason: str, log: logging.Logger | Any) -> None:
    """Record a rollback that was never sent: a failed row stays ``failed``; a row that landed keeps its
    outcome (its new revision still serves), the reason in its message either way. Decided: it is not asked
    for again (a wave's failed rows are rolled back as their verdicts come, then the wave's at its end)."""
    row.rollback_decided = True
    if row.outcome == Outcome.FAILED:
        row.decide(Outcome.FAILED, f"{row.message}; the rollback {reason}", time.time())
    else:
        row.message = f"{row.message}; rolling it back with its wave {reason}"
    log.warning("%s: %s: %s", wave.name, row.name, row.message)


ROLLBACK_OUTCOMES = frozenset({Outcome.FAILED, Outcome.LANDED, Outcome.ROLLED_BACK_REASON_UNKNOWN})
"""Outcomes a row keeps while its rollback is awaited: ``failed``, ``landed`` (rolled back with its wave), or
``rolled_back_reason_unknown`` (an earlier try's rollback, found on the deployment)."""


def pending_rollbacks(wave: WaveRecord) -> dict[str, str | None]:
    """``{deployment_id: rollback revision}`` of the wave's rollbacks started (by this try or an earlier
    one) whose outcome is not recorded yet.

    :param wave: the wave.
    """
    return {
        row.deployment_id: row.rollback_revision
        for row in wave.rows
        if row.rollback_revision is not None and not row.rollback_decided and row.outcome in ROLLBACK_OUTCOMES
    }


def rollbacks_allowed_latest(wave: WaveRecord) -> dict[str, str]:
    """``{deployment_id: revision}`` allowed to stay the latest while a pending rollback goes live (a redeploy
    that made no revision; see :class:`~airflow_provider.fleet.WaveTracker`).

    :param wave: the wave.
    """
    pending = pending_rollbacks(wave)
    return {
        row.deployment_id: row.rollback_allowed_latest
        for row in wave.rows
        if row.deployment_id in pending and row.rollback_allowed_latest
    }


def is_partial(row: FleetRow) -> bool:
    """Whether a rollback left part of the change in place, besides secrets (a resource_spec not the
    previous one, a branch rebuilt from its head): then it is not ``rolled_back``.

    :param row: a row whose rollback went live.
    """
    return any(not clause.startswith("secrets ") for clause in row.not_restored)


def apply_rollbacks(
    hook: DeploymentServiceHook, wave: WaveRecord, outcomes: Mapping[str, Sequence[Any]], log: logging.Logger | Any
) -> None:
    """Record how the rollbacks ended.

    A rollback that went live is judged on the deployment (one list request per 100): it is ``rolled_back``
    (it had failed) or ``rolled_back_with_wave`` (it had landed) when the previous build serves again with
    its previous ``resource_spec``; ``rolled_back_partially`` / ``rolled_back_with_wave_partially`` when
    not, the message saying ``rolled back ... except: ...`` (a secret the change set is named too, but
    does not make it partial: values are never restored). The others keep their outcome, the rollback's
    failure in their message (one that had landed still serves its new revision, or is still being rolled
    back).

    :param hook: the hook (to read the restored deployments).
    :param wave: the wave.
    :param outcomes: ``{deployment_id: (outcome, message, at)}`` of the rollbacks' watch.
    :param log: the task's logger.
    """
    decided = [
        row
        for row in wave.rows
        if row.rollback_revision is not None
        and not row.rollback_decided
        and row.outcome in ROLLBACK_OUTCOMES
        and row.deployment_id in outcomes
    ]
    live_ids = [row.deployment_id for row in decided if outcomes[row.deployment_id][0] in SUCCESS_OUTCOMES]
    live = read_deployments(hook, live_ids) if live_ids else {}
    for row in decided:
        outcome, message, at = outcomes[row.deployment_id]
        row.rollback_decided = True
        if outcome in SUCCESS_OUTCOMES:
            _judge_resource_spec(row, live.get(row.deployment_id))
            how = _ROLLED_BACK_HOW[row.outcome]
            serves = (
                f"revision {row.from_revision} serves again (deployed again in place)"
                if row.rollback_revision == row.from_revision
                else f"revision {row.rollback_revision} serves revision {row.from_revision}'s build again"
            )
            except_clause = f" except: {'; '.join(row.not_restored)}" if row.not_restored else ""
            row.decide(
                _restored_outcome(row.outcome, is_partial(row)),
                f"{row.message}; rolled back ({serves}){except_clause}",
                float(at),
            )
            log.warning(
                "%s: %s rolled back%s to %s (revision %s)%s",
                wave.name,
                row.name,
                how,
                row.from_revision,
                row.rollback_revision,
                except_clause,
            )
        elif row.outcome == Outcome.FAILED:
            row.decide(Outcome.FAILED, f"{row.message}; the rollback failed too: {message}", float(at))
            log.error("%s: %s: %s", wave.name, row.name, row.message)
        elif row.outcome in REASON_UNKNOWN_OUTCOMES:  # the earlier try's rollback did not go live
            row.decide(Outcome.FAILED, f"{row.message}; but that rollback did not go live: {message}", float(at))
            log.error("%s: %s: %s", wave.name, row.name, row.message)
        else:  # it had landed: its revision still serves unless the rollback's may yet go live
            row.message = f"{row.message}, but the rollback failed: {message}"
            log.error("%s: %s: %s", wave.name, row.name, row.message)


_ROLLED_BACK_HOW = {
    Outcome.FAILED: "",
    Outcome.LANDED: " with its wave",
    Outcome.ROLLED_BACK_REASON_UNKNOWN: " (by an earlier try, why not recorded)",
}
"""How the log says a rollback went live, by the row's outcome while it was awaited."""


def _restored_outcome(before: str, partial: bool) -> str:
    """The outcome of a row whose rollback went live, from its outcome while the rollback was awaited."""
    if before in REASON_UNKNOWN_OUTCOMES:
        return before  # partial or not, the message says what was not undone
    if before == Outcome.FAILED:
        return Outcome.ROLLED_BACK_PARTIALLY if partial else Outcome.ROLLED_BACK
    return Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY if partial else Outcome.ROLLED_BACK_WITH_WAVE


def _judge_resource_spec(row: FleetRow, deployment: Deployment | None) -> None:
    """Judge the rollback's ``resource_spec`` again on the live deployment (as
    :meth:`~airflow_provider.tasks.rollback.RollbackStarted.judged_on` does): one that does not show the
    previous ``resource_spec`` is named in ``not_restored``."""
    kept = [clause for clause in row.not_restored if clause not in RESOURCE_SPEC_VERDICTS]
    wanted, fields = row.previous_resource_spec, row.resource_spec_changes
    if (
        deployment is not None
        and wanted is not None
        and not spec_shows(deployment.source_config.resource_spec, wanted, fields)
    ):
        kept.insert(0, RESOURCE_SPEC_NOT_SHOWN if row.rollback_path == "patch" else RESOURCE_SPEC_NOT_SENT)
    row.not_restored = kept
