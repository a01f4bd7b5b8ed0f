"""What a retry of a fleet rollout finds of an earlier try's patch on a deployment it has no record of:
the patch still showing (reattached to: which revision it made, what served before it), or made and no longer
showing (rolled back by that try, or superseded: recorded as such, never patched again), or nothing that can
be told (the row fails saying so). Positive evidence only, from the deployment and its revisions."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client import same_revision_config
from airflow_provider.decisions.fleet_progress import (
    REASON_UNKNOWN,
    FleetRow,
    Outcome,
    WaveRecord,
)
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    Deployment,
    PatchDeploymentRequest,
    Revision,
)
from airflow_provider.tasks.fleet.rollback import secrets_clause
from airflow_provider.tasks.rollback import (
    RESOURCE_SPEC_UNKNOWN,
)
from airflow_provider.tasks.rollback.revisions import revision_fields

if TYPE_CHECKING:
    import logging


def applied_earlier(request: PatchDeploymentRequest, deployment: Deployment, since: datetime) -> bool:
    if not request.is_reflected_in(deployment):
        return False
    if request.creates_revision and deployment.latest_revision_id is None:
        return False
    return deployment.updated_at >= since


def earlier_patch_revision(
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
    made = [revision.id for revision in newest_first(listed) if revision.created_at and revision.created_at >= since]
    if not made:
        return None
    if made == [latest]:
        return latest
    raise AirflowFailException(
        f"shows this resource_spec patch, but {len(made)} revisions were made since the run started "
        f"({', '.join(made)}; latest {latest}): which one is an earlier try's patch cannot be told"
    )


def find_what_served_before(hook: DeploymentServiceHook, row: FleetRow, log: logging.Logger | Any) -> None:
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
    ordered = newest_first(listed)
    ids = [revision.id for revision in ordered]
    if row.to_revision not in ids or ids.index(row.to_revision) + 1 >= len(ids):
        return
    before = ordered[ids.index(row.to_revision) + 1]
    if row.from_revision is None:
        row.from_revision = before.id
    if before.id == row.from_revision:
        row.previous_config = revision_fields(before.source_revision_config) or None


def newest_first(revisions: Iterable[Revision]) -> list[Revision]:
    """The revisions that say when they were made, newest first (the service's order is not documented)."""
    dated = [(revision.created_at, revision) for revision in revisions if revision.created_at is not None]
    return [revision for _, revision in sorted(dated, key=lambda item: item[0], reverse=True)]


EARLIER_REVISIONS_READ = 50
"""At most this many of a deployment's newest revisions are read to recognise an earlier try's patch."""


class EarlierPatch(NamedTuple):
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


def earlier_patch_undone(
    hook: DeploymentServiceHook,
    request: PatchDeploymentRequest,
    deployment: Deployment,
    since: datetime,
    recorded_latest: str | None,
) -> EarlierPatch | None:
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
        return EarlierPatch(None, None, None, False, f"its revisions cannot be read ({err})")
    if any(revision.created_at is None for revision in listed):
        return EarlierPatch(None, None, None, False, "the service does not say when its revisions were made")
    revisions = newest_first(listed)
    made = [revision for revision in revisions if revision.created_at is not None and revision.created_at >= since]
    if not made:
        return None
    if not wanted_fields:
        return EarlierPatch(
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
            return EarlierPatch(patched.id, before.id, before.id, True, in_place=True)
        return EarlierPatch(
            None,
            None,
            None,
            False,
            f"revision {patched.id}, made since the run started, carries this patch and is still the latest, but "
            "the deployment does not show it, nor the build of the revision before it",
        )
    if before is None or before.source_revision_config is None or newest_listed.source_revision_config is None:
        return EarlierPatch(
            None,
            None,
            None,
            False,
            f"revision {patched.id}, made since the run started, carries this patch, but what served before it "
            f"and whether the latest revision {newest_listed.id} copies it cannot be read",
        )
    copies = same_revision_config(newest_listed.source_revision_config, before.source_revision_config)
    return EarlierPatch(patched.id, before.id, newest_listed.id, copies)


def record_earlier_patch(
    wave: WaveRecord, row: FleetRow, earlier: EarlierPatch, fingerprint: str, now: float, log: logging.Logger | Any
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
