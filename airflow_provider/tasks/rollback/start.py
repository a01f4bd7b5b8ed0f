"""Starting a rollback: which path returns a deployment to an earlier revision, and its one request.

:func:`start_rollback` checks everything it can before sending anything (the revision is not the one rolled
back, nothing newer superseded it, it has a build, what to restore is known and can be sent), then takes one
path: **none** (the revision already serves, or is being deployed again), **redeploy** (``POST
.../revisions/{revision_id}/redeploy``: the same build, exact) or **patch** (the revision's non-secret
``source_revision_config`` patched back, with the ``resource_spec`` to restore, in one PATCH). Each request is
announced first (``before_sending``, a :class:`~airflow_provider.tasks.rollback.outcome.RollbackIntent` the
caller records) and never applied twice (the client's read-back).

The rules, and what a retry reattaches to, are on :mod:`airflow_provider.tasks.rollback`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING
from airflow_provider.decisions.spec_changes import (
    fields_not_shown,
    resource_spec_json,
    restored_spec,
    unknown_fields_of,
)
from airflow_provider.errors import ConflictError, DeploymentServiceError, RequestRejectedError
from airflow_provider.models import (
    CarriedResourceSpec,
    Deployment,
    PatchDeploymentRequest,
    ResourceSpec,
    Revision,
    RevisionSource,
    RevisionStatus,
    SourceRevisionConfig,
    canonical_uuid,
)
from airflow_provider.tasks.rollback.inputs import checked_fallback_config, checked_resource_spec
from airflow_provider.tasks.rollback.outcome import (
    RESOURCE_SPEC_UNKNOWN,
    RollbackIntent,
    RollbackPath,
    RollbackStarted,
    build_clause,
    is_branch_ref,
    spec_applies,
)
from airflow_provider.tasks.rollback.revisions import changed_since, in_progress, read_revision, revision_fields

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = ["NOT_BUILT", "start_rollback"]

NOT_BUILT = frozenset({RevisionStatus.BUILD_FAILED, RevisionStatus.CREATE_FAILED})
"""Statuses of revisions that have no build to return to."""
_REVISION_NOT_FOUND = re.compile(r"\brevision\b.*\bnot found\b", re.IGNORECASE)


def start_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    to_revision_id: str,
    *,
    rolling_back_from: str | None = None,
    fallback_config: Mapping[str, Any] | SourceRevisionConfig | None = None,
    resource_spec: Mapping[str, Any] | ResourceSpec | None = None,
    resource_spec_fields: Collection[str] | None = None,
    secrets: list[dict[str, str]] | None = None,
    force: bool = False,
    force_hint: str | None = None,
    before_sending: Callable[[RollbackIntent], None] | None = None,
    log: logging.Logger | Any,
) -> RollbackStarted:
    """Start rolling ``deployment`` back to ``to_revision_id``; do not wait.

    Refuses (:class:`AirflowFailException`) before sending anything when: the revision is the one being
    rolled back; the deployment's latest revision is newer than ``rolling_back_from`` and not ``force``;
    the revision never built; the revision is not the deployment's (the revision endpoint knows the
    deployment's latest revision but not this one, or the redeploy endpoint says it is not found); neither
    the redeploy endpoint, nor the revision endpoint, nor ``fallback_config`` can say what to restore; or
    ``resource_spec`` cannot be sent. Transient service errors propagate (a task retry is safe: both
    requests are never applied twice).

    :param hook: the hook to send through.
    :param deployment: the deployment as just read (its ``latest_revision_id`` is the revision before the
        rollback request; the never-twice read-back compares with it).
    :param to_revision_id: the revision to return to.
    :param rolling_back_from: the revision being rolled back (e.g. the one a patch created); ``None`` takes
        the deployment's latest revision and skips the superseded check.
    :param fallback_config: the revision's non-secret ``source_revision_config`` fields, used for the patch
        path when the revision endpoint is missing (``previous_source_revision_config``).
    :param resource_spec: the whole ``source_config.resource_spec`` that served with ``to_revision_id``
        (recorded before the change, as the deployment showed it; ``{}`` when there was none). When a field of
        ``resource_spec_fields`` differs from it, the rollback sends, with the config, in one PATCH, the whole
        ``resource_spec`` as the deployment shows it now with those fields set back (the fields this provider
        does not know go back untouched). ``None``: unknown; left alone, and named in ``not_restored`` when the
        deployment has one.
    :param resource_spec_fields: the fields of ``resource_spec`` the change being rolled back changed
        (:func:`~airflow_provider.decisions.spec_changes.changed_fields`; ``()``: it left ``resource_spec`` alone,
        nothing is sent for it). ``None`` (default): unknown; every field the deployment does not show as
        ``resource_spec`` has it is restored, except one the service added that ``resource_spec`` lacks.
    :param secrets: secret values to send with the restore (``[{"name", "value"}]``, already resolved); forces
        the patch path. ``None`` (default) sends none: the deployment keeps its current secrets.
    :param force: roll back even when a newer revision than ``rolling_back_from`` exists.
    :param force_hint: how the caller's task forces it (e.g. ``"pass force=True to roll back anyway"``), added to
        the refusal; ``None`` (a task without such an option) says the newer revision is left serving instead.
        A message names only options of the task that raises it.
    :param before_sending: called with the :class:`RollbackIntent` just before each request (record it, so a
        retry can tell whether it landed).
    :param log: where to report (the task's logger).
    """
    try:
        target = canonical_uuid(to_revision_id, "revision_id")
        source_revision = canonical_uuid(rolling_back_from, "rolling_back_from") if rolling_back_from else None
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    fallback = checked_fallback_config(fallback_config)
    spec = checked_resource_spec(resource_spec)
    fields = tuple(sorted(resource_spec_fields)) if resource_spec_fields is not None and spec is not None else None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    never_served = _latest_never_served(hook, deployment, target, source_revision, log)
    rolled_back_from = source_revision or (active if never_served and active not in (None, target) else latest)
    if rolled_back_from == target:
        raise AirflowFailException(f"{name}: cannot roll revision {target} back to itself; give an earlier revision")
    if source_revision is not None and latest not in (source_revision, target):
        if never_served is not None and active == source_revision:
            log.info(
                "%s: the latest revision %s never served (status %s); revision %s, which serves, is rolled back",
                name,
                latest,
                never_served.status.value,
                source_revision,
            )
        else:
            message = (
                f"{name}: revision {source_revision} was to be rolled back to {target}, but the latest revision is "
                f"now {latest} (someone rolled out meanwhile; active {active})"
            )
            if not force:
                hint = force_hint or "it is left as it is (roll it back with RollbackDeploymentOperator if you mean to)"
                raise AirflowFailException(f"{message}; not rolling back over it: {hint}")
            log.warning("%s; rolling back anyway (forced)", message)
    current_spec = resource_spec_json(deployment.source_config.resource_spec)
    to_restore = fields_not_shown(current_spec, spec, fields) if spec is not None else ()
    spec_differs = bool(to_restore)
    if spec is not None and fields is None:
        _warn_unshown_unknown_fields(spec, current_spec, name, log)
    unknown_spec = (RESOURCE_SPEC_UNKNOWN,) if spec is None and spec_applies(deployment) else ()

    def started(
        path: RollbackPath,
        revision_id: str,
        after: Deployment,
        config: dict[str, str],
        *,
        exact: bool = True,
        allowed_latest: str | None = None,
    ) -> RollbackStarted:
        return RollbackStarted(
            path,
            target,
            revision_id,
            rolled_back_from,
            after,
            config,
            exact=exact,
            not_restored=(*build_clause(config, exact), *unknown_spec),
            resource_spec=spec,
            allowed_latest_revision_id=allowed_latest if allowed_latest != revision_id else None,
            previous_latest_revision_id=latest,
            resource_spec_fields=fields,
        ).judged_on(after)

    def intent(path: RollbackPath, config: dict[str, str], exact: bool) -> None:
        if before_sending is not None:
            before_sending(
                RollbackIntent(
                    deployment.id,
                    target,
                    rolled_back_from,
                    latest,
                    active,
                    path,
                    config,
                    spec,
                    exact,
                    (*build_clause(config, exact), *unknown_spec),
                    fields,
                )
            )

    if not spec_differs and active == target and latest is not None:
        newest = never_served or (None if latest == target else read_revision(hook, deployment.id, latest, log))
        if latest == target:
            log.info("%s already serves revision %s; nothing to roll back", name, target)
            return started("none", target, deployment, {})
        if newest is not None and newest.status.is_failed:
            log.info(
                "%s: revision %s never went live (status %s) and revision %s still serves; nothing to roll back",
                name,
                latest,
                newest.status.value,
                target,
            )
            return started("none", target, deployment, {}, allowed_latest=latest)
        if newest is not None and newest.status is RevisionStatus.DEPLOYED:
            log.warning(
                "%s serves revision %s again although revision %s, newer, went live: it was redeployed without a new "
                "revision (by an earlier try or someone else); nothing to send",
                name,
                target,
                latest,
            )
            return started("none", target, deployment, {}, allowed_latest=latest)

    revision = _read_target_revision(hook, deployment, target, name, log)
    if revision is not None and revision.status in NOT_BUILT:
        raise AirflowFailException(
            f"{name}: revision {target} has no build to return to (status {revision.status.value}); "
            "roll back to a revision that was live"
        )
    if not spec_differs and active != target and latest not in (None, target) and changed_since(revision, deployment):
        fresh = hook.get_deployment(deployment.id)  # the revision moved since the deployment was read
        if fresh.latest_revision_id == latest and fresh.active_revision_id == target:
            log.warning(
                "%s serves revision %s again: it was redeployed without a new revision (by an earlier try or someone "
                "else) while this task looked; nothing to send",
                name,
                target,
            )
            return started("none", target, fresh, {}, allowed_latest=latest)
    config = revision_fields(revision.source_revision_config) if revision is not None else {}
    if not config and fallback:
        config = fallback
    restorable = {key: value for key, value in config.items() if key != "repo_commit_sha"}
    if not spec_differs and latest not in (None, target) and active != target and in_progress(revision):
        assert revision is not None
        log.warning(
            "%s: revision %s is being deployed again (status %s) although revision %s is newer: a redeploy without "
            "a new revision is under way; waiting for it instead of sending another",
            name,
            target,
            revision.status.value,
            latest,
        )
        return started("redeploy", target, deployment, config, allowed_latest=latest)

    if secrets is None and not (spec_differs and restorable):
        if spec_differs:
            log.warning(
                "%s: the resource_spec to restore differs from the current one, but revision %s's config is unknown "
                "here, so it cannot be patched back with it: redeploying the build only",
                name,
                target,
            )
        intent("redeploy", config, True)
        after = _redeploy(hook, deployment, target, config, name, log)
        if after is not None:
            moved = after.latest_revision_id is not None and after.latest_revision_id != latest
            new = after.latest_revision_id if moved else target
            assert new is not None
            if moved:
                log.warning(
                    "Rolling %s back from revision %s to revision %s: redeployed its build (exact, commit included) "
                    "as revision %s",
                    name,
                    rolled_back_from,
                    target,
                    new,
                )
            else:
                log.warning(
                    "Rolling %s back from revision %s to revision %s: redeployed its build, which made no new "
                    "revision (the latest is still %s): waiting for revision %s itself to be active again",
                    name,
                    rolled_back_from,
                    target,
                    latest,
                    target,
                )
            return started("redeploy", new, after, config, allowed_latest=None if moved else latest)
    elif secrets is not None:
        log.info("Secrets were given: patching the revision's config back (a redeploy carries no secrets)")

    if not restorable:
        raise AirflowFailException(
            f"{name}: cannot roll back to revision {target}: the service has no redeploy endpoint and does not "
            "show the revision's config (no revision endpoint). Give source_revision_config= with its image_uri "
            "or repo_ref (the patch task pushes it as the XCom previous_source_revision_config)"
        )
    body: dict[str, Any] = {"source_revision_config": restorable}
    revision_source = (revision.model_extra or {}).get("source") if revision is not None else None
    if revision_source in {item.value for item in RevisionSource} and revision_source != str(
        getattr(deployment.source, "value", deployment.source)
    ):
        body["revision_source"] = revision_source
    if secrets is not None:
        body["secrets"] = secrets
    try:
        if spec_differs:
            assert spec is not None
            carried = CarriedResourceSpec.model_validate(restored_spec(current_spec, spec, to_restore))
            body["source_config"] = {"resource_spec": carried}  # the instance: carried, not read as the user's
        request = PatchDeploymentRequest.model_validate(body)
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"{name}: invalid restore patch: {describe_validation_error(err)}") from None
    exact = not is_branch_ref(restorable.get("repo_ref")) or bool(restorable.get("image_uri"))
    if not exact:
        commit = config.get("repo_commit_sha")
        log.warning(
            "Restoring repo_ref %r, a branch: the service rebuilds the branch's current head, not %s that "
            "revision %s ran. Roll back to an image (digest or tag) or a tag ref for an exact rollback",
            restorable["repo_ref"],
            f"commit {commit}" if commit else "the commit",
            target,
        )
    intent("patch", config, exact)
    after = hook.patch_deployment(deployment.id, request, previous_latest_revision_id=latest)
    if after.latest_revision_id in (None, latest):
        raise AirflowFailException(
            f"{name}: patched revision {target}'s config back, but the service made no new revision (the latest is "
            f"still {latest}, active {after.active_revision_id}): nothing will deploy it, so nothing was rolled back. "
            "Check the deployment"
        )
    new = after.latest_revision_id
    restored = ", ".join(f"{key}={value}" for key, value in sorted(restorable.items()))
    log.warning(
        "Rolling %s back from revision %s to revision %s: patched its config back (%s)%s as revision %s",
        name,
        rolled_back_from,
        target,
        restored,
        f" with resource_spec's {', '.join(to_restore)} set back (the rest as shown)" if spec_differs else "",
        new,
    )
    return started("patch", new, after, config, exact=exact)


def _latest_never_served(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    target: str,
    source_revision: str | None,
    log: logging.Logger | Any,
) -> Revision | None:
    """The deployment's latest revision when it ended without ever serving (its build failed: ``BUILD_FAILED``,
    ``CREATE_FAILED``, ``DEPLOY_FAILED``...), read only when it is neither the revision serving, nor the one to
    return to, nor the one named as rolled back; ``None`` otherwise, and when the revision endpoint cannot say.
    What a rollback rolls back is then the revision that serves, not that failed build."""
    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    if latest is None or latest in (active, target, source_revision):
        return None
    revision = read_revision(hook, deployment.id, latest, log)
    return revision if revision is not None and revision.status.is_failed else None


def _redeploy(
    hook: DeploymentServiceHook, deployment: Deployment, target: str, config: dict[str, str], name: str, log: Any
) -> Deployment | None:
    """Redeploy ``target``; the deployment after it, or ``None`` when the service has no redeploy endpoint."""
    expected = SourceRevisionConfig.model_validate(config) if config else None
    try:
        return hook.redeploy_revision(
            deployment.id, target, previous_latest_revision_id=deployment.latest_revision_id, expected_config=expected
        )
    except RequestRejectedError as err:
        raise AirflowFailException(f"{name}: the service refused to redeploy revision {target}: {err}") from None
    except DeploymentServiceError as err:
        if isinstance(err, ConflictError) and err.status_code is None:  # the read-back's verdict, not a 4xx
            raise AirflowFailException(f"{name}: redeploying revision {target}: {err}") from None
        if err.status_code not in REVISION_ENDPOINT_MISSING:
            raise
        if _says_revision_not_found(err):
            raise AirflowFailException(
                f"revision {target} is not a revision of {name}: the redeploy endpoint answered {err}; "
                "check revision_id"
            ) from None
        log.info("The redeploy endpoint is not available (%s); patching the revision's config back", err)
        return None


def _read_target_revision(
    hook: DeploymentServiceHook, deployment: Deployment, revision_id: str, name: str, log: logging.Logger | Any
) -> Revision | None:
    """The revision to return to from the optional revision endpoint; ``None`` when the server does not have
    the endpoint; :class:`AirflowFailException` when it has it but not this revision (before anything is sent).

    A 404 alone cannot tell a missing endpoint from a revision the deployment never had (a typo, or another
    deployment's revision): the deployment's latest revision is asked for too, and an answer means the
    endpoint exists.
    """
    try:
        return hook.get_revision(deployment.id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code not in REVISION_ENDPOINT_MISSING:
            raise
        missing = err
    latest = deployment.latest_revision_id
    if missing.status_code == 404 and latest is not None and latest != revision_id:
        try:
            hook.get_revision(deployment.id, latest)
        except DeploymentServiceError as err:
            if err.status_code not in REVISION_ENDPOINT_MISSING:
                raise
        else:
            raise AirflowFailException(
                f"revision {revision_id} is not a revision of {name}: the revision endpoint knows the "
                f"deployment's latest revision {latest} but not this one; check revision_id"
            )
    log.info("The revision endpoint does not know revision %s (%s)", revision_id, missing)
    return None


def _says_revision_not_found(err: DeploymentServiceError) -> bool:
    """Whether a 404 names a missing revision (``Revision ID ... not found.``), not a missing route."""
    return err.status_code == 404 and isinstance(err.detail, str) and bool(_REVISION_NOT_FOUND.search(err.detail))


def _warn_unshown_unknown_fields(spec: Mapping[str, Any], current: Mapping[str, Any], name: str, log: Any) -> None:
    """Say so when the spec to restore has fields this provider does not know that the deployment does not show
    now: they are restored as given (the service's, when the spec was recorded), never refused; a typo among
    them would not be shown by the service, and the verdict would say so."""
    unshown = [field for field in unknown_fields_of(spec) if field not in current]
    if unshown:
        log.warning(
            "%s: the resource_spec to restore has field(s) %s that this provider does not know and the deployment "
            "does not show now: restoring them as given (the service's own when it was recorded; if one is a typo, "
            "the deployment will not show it and the rollback says so)",
            name,
            ", ".join(unshown),
        )
