"""What a retry finds of an earlier try's rollback, so that it never rolls back twice nor claims a rollback
that did not happen.

- :func:`reattach_recorded_rollback`: the rollback an earlier try recorded (``task_state_store``), sent or about
  to be sent, as the deployment shows it now: waited for, sent now (it never landed), or a loud failure when
  whether it landed cannot be told.
- :func:`find_earlier_rollback`: without a record (Airflow < 3.3, or a record that could not be written), an
  earlier try's rollback recognised on the deployment on positive evidence only; where the deployment cannot
  tell, a failure saying what was seen and what to check.

The rules are on :mod:`airflow_provider.tasks.rollback`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.spec_changes import spec_shows
from airflow_provider.models import Deployment
from airflow_provider.tasks.rollback.outcome import (
    RESOURCE_SPEC_UNKNOWN,
    RollbackPath,
    RollbackStarted,
    build_clause,
    is_branch_ref,
    recorded_fields,
    recorded_id,
    spec_applies,
)
from airflow_provider.tasks.rollback.revisions import (
    changed_since,
    in_progress,
    neighbours,
    revision_fields,
    revision_if_shown,
    same_build,
)

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = ["find_earlier_rollback", "reattach_recorded_rollback"]


def find_earlier_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    to_revision_id: str,
    *,
    since: datetime | None,
    rolling_back_from: str | None = None,
    fallback_config: Mapping[str, str] | None = None,
    resource_spec: Mapping[str, Any] | None = None,
    resource_spec_fields: Collection[str] | None = None,
    secrets_given: bool = False,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback to ``to_revision_id`` an earlier try sent, recognised on the deployment when it left no
    record; ``None`` when the deployment shows that no earlier rollback made a revision (then roll back);
    :class:`AirflowFailException` when it cannot tell.

    The deployment's latest revision ``L`` is taken for an earlier try's rollback only on positive evidence,
    all of:

    1. ``L`` is neither ``to_revision_id`` nor ``rolling_back_from`` (never the revision being rolled back);
    2. ``L`` has ``to_revision_id``'s ``source_revision_config`` (read from the revision endpoint, else
       ``fallback_config``; the commit compared unless the ref is a branch, whose rebuild has a new one);
    3. ``L`` was made since the DAG run started (its ``created_at``, else the deployment's ``updated_at``; when
       the start is known) and after ``to_revision_id`` (when the revision endpoint shows both);
    4. ``L`` was made after the revision rolled back: with ``rolling_back_from``, ``L`` is newer than it (it is
       the latest and not it); without it, the revision list (``GET .../revisions``) shows the revision made
       just before ``L``, which must not be ``to_revision_id`` (``L`` would be the change itself) and must have
       another build than ``to_revision_id`` (``L`` undoes it), unless the deployment shows ``resource_spec``
       (a change of ``resource_spec`` or secrets only, which a revision does not show);
    5. with ``resource_spec``: the deployment shows it (its ``resource_spec_fields``: the earlier try's rollback
       restored them).

    No earlier rollback (``None``): no latest revision, ``L`` is ``to_revision_id`` or ``rolling_back_from``,
    another config, made before the run or before ``to_revision_id``, or made right after
    ``to_revision_id``. Anything else cannot be told apart: the message names ``L``, what was seen and what
    to check.

    :param hook: the hook to ask (the optional revision and revision-list endpoints).
    :param deployment: the deployment as just read.
    :param to_revision_id: the canonical revision to return to.
    :param since: when the DAG run started (a revision made before it is not this task's); ``None``: unknown.
    :param rolling_back_from: the revision the task rolls back, when given.
    :param fallback_config: the revision's non-secret fields as the user gave them.
    :param resource_spec: the whole resource_spec the rollback restores (checked), when given.
    :param resource_spec_fields: the fields of ``resource_spec`` it restores (``None``: every field).
    :param secrets_given: whether the task sends secrets (an earlier try then took the patch path).
    :param log: where to say what was recognised.
    """
    latest = deployment.latest_revision_id
    if latest is None or latest == to_revision_id:
        return None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    if latest == rolling_back_from:
        log.info(
            "%s: the latest revision is still %s, the one being rolled back: no earlier rollback made one", name, latest
        )
        return None
    target = revision_if_shown(hook, deployment.id, to_revision_id)
    newest = revision_if_shown(hook, deployment.id, latest)
    expected = revision_fields(target.source_revision_config) if target is not None else {}
    if not expected and fallback_config:
        expected = dict(fallback_config)
    made = newest.created_at if newest is not None and newest.created_at else deployment.updated_at
    if since is not None and made < since:
        return None
    exact = not is_branch_ref(expected.get("repo_ref")) or bool(expected.get("image_uri"))
    when = "made" if newest is not None and newest.created_at else "the deployment last changed"
    since_run = " (after this DAG run started)" if since is not None else ""
    seen = f"revision {latest}, the latest ({when} {made.isoformat()}{since_run})"
    if not expected:
        raise _cannot_tell(
            name,
            latest,
            to_revision_id,
            seen,
            f"revision {to_revision_id}'s source_revision_config is unknown (no revision endpoint; give "
            f"source_revision_config=), so whether revision {latest} copies it cannot be told",
        )
    shown = newest.source_revision_config if newest is not None and newest.source_revision_config else None
    if not same_build(shown or deployment.source_revision_config, expected, exact=exact):
        return None
    target_made = target.created_at if target is not None else None
    if target_made is not None and newest is not None and newest.created_at and newest.created_at <= target_made:
        return None  # not newer than the revision returned to
    seen += f" has revision {to_revision_id}'s source_revision_config"
    fields = tuple(resource_spec_fields) if resource_spec_fields is not None else None
    shown_spec = deployment.source_config.resource_spec
    spec_matches = resource_spec is not None and spec_shows(shown_spec, resource_spec, fields)
    if rolling_back_from is not None:
        evidence = f"it is newer than revision {rolling_back_from}, the revision rolled back"
    else:
        around = neighbours(hook, deployment.id, latest)
        before = around[1] if around is not None else None
        if before is None:
            why = (
                "the service does not list the deployment's revisions (GET .../revisions)"
                if around is None
                else "no revision is listed before it"
            )
            raise _cannot_tell(
                name,
                latest,
                to_revision_id,
                seen,
                f"{why}, so whether it is the change being rolled back cannot be told",
            )
        if before.id == to_revision_id:
            log.info(
                "%s: revision %s was made right after revision %s: it is the change to roll back",
                name,
                latest,
                before.id,
            )
            return None
        if not same_build(before.source_revision_config, expected, exact=exact):
            evidence = f"it undoes the change of build of revision {before.id}, made just before it"
        elif spec_matches:
            evidence = (
                f"revision {before.id}, made just before it, has the same build (a resource_spec or secrets change) "
                "and the deployment shows resource_spec= again"
            )
        else:
            spec = "" if resource_spec is None else " and the deployment does not show resource_spec="
            raise _cannot_tell(
                name,
                latest,
                to_revision_id,
                seen,
                f"revision {before.id}, made just before it, has the same build too: a change of resource_spec or "
                f"secrets only, which a revision does not show{spec}",
            )
    if resource_spec is not None and not spec_matches:
        raise _cannot_tell(
            name,
            latest,
            to_revision_id,
            f"{seen}, and {evidence}",
            "but the deployment does not show resource_spec= (a rollback by this task would have restored it)",
        )
    restores_spec = resource_spec is not None and fields != ()
    path: RollbackPath = "patch" if secrets_given or restores_spec else "redeploy"
    log.warning(
        "%s: %s, and %s: it is the rollback to revision %s an earlier try sent (no task_state_store record). "
        "Reattaching to it instead of rolling back again",
        name,
        seen,
        evidence,
        to_revision_id,
    )
    not_restored = build_clause(expected, exact or path == "redeploy")
    if resource_spec is None and spec_applies(deployment):
        not_restored += (RESOURCE_SPEC_UNKNOWN,)
    return RollbackStarted(
        path,
        to_revision_id,
        latest,
        rolling_back_from,
        deployment,
        expected,
        exact=exact or path == "redeploy",
        not_restored=not_restored,
        resource_spec=dict(resource_spec) if resource_spec is not None else None,
        resource_spec_fields=fields,
    )


def reattach_recorded_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    record: Mapping[str, Any],
    *,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback an earlier try recorded (:meth:`RollbackStarted.record` or :meth:`RollbackIntent.record`),
    as the deployment shows it now; ``None`` when it was recorded as about to be sent but did not land (send it
    now); :class:`AirflowFailException` when whether it landed cannot be told.

    An intent landed when the deployment's latest revision moved on from the one recorded and the first
    revision made after it (revision list, else the latest) has the restored config; or, with the latest
    unchanged, when the revision returned to is active again or being deployed again (a redeploy that made no
    revision).

    :param hook: the hook to ask (the optional revision and revision-list endpoints).
    :param deployment: the deployment as just read.
    :param record: the record (matching the deployment and the revision returned to).
    :param log: where to say what was decided.
    """
    if record.get("phase", "sent") != "sending":
        return RollbackStarted.from_record(record, deployment) if record.get("revision_id") else None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    target = str(record["to_revision_id"])
    previous = recorded_id(record.get("previous_latest_revision_id"))
    config = {str(key): str(value) for key, value in dict(record.get("restored_config") or {}).items()}
    exact = bool(record.get("exact", True))
    path: RollbackPath = "patch" if record.get("path") == "patch" else "redeploy"
    spec = record.get("resource_spec")

    def found(revision_id: str, allowed_latest: str | None = None) -> RollbackStarted:
        return RollbackStarted(
            path,
            target,
            revision_id,
            recorded_id(record.get("rolled_back_from")),
            deployment,
            config,
            exact=exact,
            not_restored=tuple(str(item) for item in record.get("not_restored") or ()),
            resource_spec=dict(spec) if isinstance(spec, Mapping) else None,
            allowed_latest_revision_id=allowed_latest,
            previous_latest_revision_id=previous,
            resource_spec_fields=recorded_fields(record.get("resource_spec_fields")),
        ).judged_on(deployment)

    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    if latest == previous:
        if latest != target and active == target:
            log.warning(
                "%s: revision %s serves again (latest still %s): the recorded rollback landed without a new revision",
                name,
                target,
                latest,
            )
            return found(target, latest)
        revision = revision_if_shown(hook, deployment.id, target) if latest != target and path == "redeploy" else None
        if in_progress(revision):
            log.warning(
                "%s: revision %s is being deployed again (latest still %s): the recorded redeploy is under way",
                name,
                target,
                latest,
            )
            return found(target, latest)
        if changed_since(revision, deployment):  # deployed again since the deployment was read?
            fresh = hook.get_deployment(deployment.id)
            if fresh.latest_revision_id == latest and fresh.active_revision_id == target:
                log.warning(
                    "%s: revision %s serves again: the recorded redeploy landed without a new revision", name, target
                )
                return replace(found(target, latest), deployment=fresh)
        log.info(
            "%s: the rollback an earlier try was about to send did not land (the latest revision is still %s): "
            "sending it now",
            name,
            latest,
        )
        return None
    around = neighbours(hook, deployment.id, previous) if previous else None
    after = around[0] if around is not None else None
    candidate = after.id if after is not None else latest
    assert candidate is not None
    if after is not None:
        shown = after.source_revision_config
    else:
        newest = revision_if_shown(hook, deployment.id, candidate)
        shown = newest.source_revision_config if newest is not None and newest.source_revision_config else None
        shown = shown or deployment.source_revision_config
    if same_build(shown, config, exact=exact):
        log.warning(
            "%s: reattaching to the rollback an earlier try recorded before sending it: revision %s, the first "
            "after revision %s, has revision %s's config",
            name,
            candidate,
            previous,
            target,
        )
        return found(candidate)
    what = "its config is unknown" if not config else f"revision {candidate} does not have revision {target}'s config"
    raise AirflowFailException(
        f"{name}: an earlier try recorded a rollback to revision {target} about to be sent while the latest revision "
        f"was {previous}; the latest is now {latest}, and {what}: whether that rollback landed cannot be told. Not "
        f"sending it again (that could make a second rollback revision) and not claiming a rollback. Check revision "
        f"{candidate} (someone else's rollout?) and what the deployment serves, then clear this task"
    )


def _cannot_tell(name: str, latest: str, to_revision_id: str, seen: str, why: str) -> AirflowFailException:
    """The failure of a retry that cannot tell an earlier try's rollback from the change being rolled back."""
    return AirflowFailException(
        f"{name}: cannot tell whether revision {latest} is the rollback to revision {to_revision_id} that an earlier "
        f"try sent (no task_state_store record): {seen}; {why}. Not rolling back again (that could make a second "
        f"rollback revision) and not claiming a rollback. Check revision {latest}: if it is this task's rollback, it "
        f"serves revision {to_revision_id}'s build once live (then mark this task success); if it is the change to "
        f"roll back, give rolling_back_from={latest!r} (the patch task's revision_id XCom) and resource_spec= (its "
        "previous_resource_spec XCom), then clear this task"
    )
