"""Patching a wave of a fleet rollout: what served before each deployment recorded first, then the PATCH
requests, up to ``max_parallel_patches`` in flight, each recorded as soon as it is answered. What a retry finds
of an earlier try's patch (reattached to, never sent twice) is :mod:`~airflow_provider.tasks.fleet.retry`."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import (
    FleetRow,
    Outcome,
    WaveRecord,
)
from airflow_provider.decisions.spec_changes import changes_of, resource_spec_json
from airflow_provider.errors import DeploymentServiceError, NotFoundError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    Deployment,
    PatchDeploymentRequest,
)
from airflow_provider.tasks.fleet.change import request_fingerprint
from airflow_provider.tasks.fleet.plan import read_deployments
from airflow_provider.tasks.fleet.retry import (
    applied_earlier,
    earlier_patch_revision,
    earlier_patch_undone,
    find_what_served_before,
    record_earlier_patch,
)
from airflow_provider.tasks.rollback.revisions import revision_fields

if TYPE_CHECKING:
    import logging


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
    aborted: Callable[[], Collection[str] | None] | None = None,
) -> None:
    """Patch every row of the wave not patched yet, up to ``max_parallel`` at a time; record each patch as
    soon as it is answered.

    What is sent to a deployment is its patch completed against it (``complete``: the source rules, a partial
    ``resource_spec`` completed; see :func:`~airflow_provider.tasks.request.complete_request`); a patch that
    cannot be completed fails that row, nothing sent. A retry recognises an earlier try's patch by the change as
    given (which the completed patch always shows).

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
    :param aborted: reads the abort recorded for the task (``None``: none; else the ids of the deployments it lets
        finish, see :func:`~airflow_provider.tasks.fleet.abort.abort_lets_finish`). The queue reads it before it
        starts PATCH requests, records them as started (``patch_sent_at``, saved), and reads it again: once an abort
        is recorded, it starts no request but those the abort lets finish (what the abort's confirmation showed in
        flight); the others stay not patched (the abort, when the task takes it, says so in their rows).
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
        applied = earlier_try_since is not None and applied_earlier(request, deployment, earlier_try_since)
        if earlier_try_since is not None and not applied:
            earlier = earlier_patch_undone(hook, request, deployment, earlier_try_since, row.previous_latest)
            if earlier is not None:
                row.secrets_changed = secrets
                record_earlier_patch(wave, row, earlier, fingerprint, now, log)
                save()
                continue
        if applied:
            row.secrets_changed = secrets
            assert earlier_try_since is not None
            try:
                row.to_revision = earlier_patch_revision(
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
                find_what_served_before(hook, row, log)
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
        _send_patches(hook, wave, ready, save=save, log=log, max_parallel=max_parallel, aborted=aborted)


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
    aborted: Callable[[], Collection[str] | None] | None = None,
) -> None:
    """Send the patches, at most ``max_parallel`` in flight, in wave order, none once an abort is recorded (but
    those it lets finish); record the answers on this thread as they come (see :func:`patch_wave`)."""
    queue = deque(patches)
    in_flight: dict[Future[Deployment], _Patch] = {}
    stop: Exception | None = None  # the first failure that ends the wave (sent no further patch)
    held = False  # an abort was read: no further patch
    unsaved = False  # answers recorded since the last save
    began = time.monotonic()
    sent = 0
    with ThreadPoolExecutor(max_workers=min(max_parallel, len(patches)), thread_name_prefix="fleet-patch") as pool:
        while queue or in_flight:
            starting: list[_Patch] = []
            if queue and stop is None and not held and len(in_flight) < max_parallel:
                try:
                    held = _read_abort(aborted, queue, starting, log, wave)
                    if not held:
                        while queue and len(in_flight) + len(starting) < max_parallel:
                            starting.append(queue.popleft())
                        now = time.time()
                        for item in starting:
                            item.row.patch_sent_at = now
                        save()  # recorded as started (with the answers recorded since) before the abort is read again
                        unsaved = False
                        held = _read_abort(aborted, queue, starting, log, wave)
                except Exception as err:  # the abort could not be read: no further patch (a retry resumes)
                    for item in reversed(starting):
                        item.row.patch_sent_at = None
                        queue.appendleft(item)
                    starting = []
                    stop = stop or err
            if unsaved:  # the answers of the last batch, when no PATCH started with them
                save()
                unsaved = False
            for item in starting:
                future = pool.submit(
                    hook.patch_deployment,
                    item.row.deployment_id,
                    item.request,
                    previous_latest_revision_id=item.row.previous_latest,
                )
                in_flight[future] = item
                sent += 1
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
            unsaved = True  # saved with the next PATCHes started, or before waiting again
        if unsaved:
            save()
    log.info(
        "%s: %d PATCH request(s) sent in %.1f s, at most %d at a time%s",
        wave.name,
        sent,
        time.monotonic() - began,
        max_parallel,
        f"; {len(queue)} not sent" + (" (aborted)" if held else "") if queue else "",
    )
    if stop is not None:
        raise stop


def _read_abort(
    aborted: Callable[[], Collection[str] | None] | None,
    queue: deque[_Patch],
    starting: list[_Patch],
    log: logging.Logger | Any,
    wave: WaveRecord,
) -> bool:
    """Read the abort (``aborted``); when one is recorded, keep in ``starting`` only the patches it lets finish,
    put the others back at the head of ``queue`` (their ``patch_sent_at`` cleared) and say so. Returns whether an
    abort was read (no further patch is started)."""
    if aborted is None:
        return False
    lets_finish = aborted()
    if lets_finish is None:
        return False
    held_back = [item for item in starting if item.row.deployment_id not in lets_finish]
    starting[:] = [item for item in starting if item.row.deployment_id in lets_finish]
    for item in reversed(held_back):
        item.row.patch_sent_at = None
        queue.appendleft(item)
    log.warning(
        "%s: an abort is recorded: no further PATCH request is started (%d not sent%s)",
        wave.name,
        len(queue),
        f"; {', '.join(item.row.name for item in starting)} finish{'es' if len(starting) == 1 else ''}"
        if starting
        else "",
    )
    return True


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
