"""Rolling a deployment back to an earlier revision: the decision and the request, not the wait.

One non-blocking step, :func:`start_rollback`, shared by :class:`RollbackDeploymentOperator`, the patch
operator's automatic rollback and fleet rollouts (one call per deployment). It checks everything it can
before sending anything, sends one request, and returns :class:`RollbackStarted`: which path was used,
the revision to wait for and the deployment after the request. The caller waits (a task with
``_wait(started.deployment, started.revision_id)``, a fleet through its trigger).

Which path:

1. **redeploy** (``POST .../revisions/{revision_id}/redeploy``) where the service has it: the same build,
   commit included (exact). Never sent twice (see ``DeploymentServiceClient.redeploy_revision``).
2. **patch** where the redeploy endpoint answers 404/405 (or secrets are given: a redeploy carries no
   body): ``PATCH`` the revision's non-secret ``source_revision_config`` back, read from the revision
   endpoint, else from the caller's ``fallback_config`` (the patch operator's
   ``previous_source_revision_config`` XCom, or the user's ``source_revision_config=``). A branch
   ``repo_ref`` rebuilds the branch's current head, not the old commit: logged as a warning. Never
   applied twice (see ``DeploymentServiceClient.patch_deployment``).
3. **none**: the revision asked for already serves and nothing newer exists, or the newer revision's build
   failed (it never went live; the revision endpoint says so).

Secrets are never re-sent unless the caller gives them. A rollback refuses, naming both revisions, when
``latest_revision_id`` moved past the revision being rolled back (someone else rolled out meanwhile),
unless ``force``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client import REVISION_CONFIG_FIELDS, describe_validation_error
from airflow_provider.errors import DeploymentServiceError, RequestRejectedError
from airflow_provider.models import (
    Deployment,
    PatchDeploymentRequest,
    Revision,
    RevisionSource,
    RevisionStatus,
    SourceRevisionConfig,
    canonical_uuid,
)
from airflow_provider.rollout import REVISION_ENDPOINT_MISSING

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = [
    "RollbackPath",
    "RollbackStarted",
    "is_branch_ref",
    "revision_config_snapshot",
    "start_rollback",
]

RollbackPath = Literal["redeploy", "patch", "none"]
NOT_BUILT = frozenset({RevisionStatus.BUILD_FAILED, RevisionStatus.CREATE_FAILED})
"""Statuses of revisions that have no build to return to."""
_COMMIT_SHA = re.compile(r"[0-9a-fA-F]{7,40}")


@dataclass(frozen=True)
class RollbackStarted:
    """What :func:`start_rollback` did.

    :param path: ``redeploy`` (the same build again), ``patch`` (the old config patched back) or ``none``
        (the revision already serves and nothing newer will replace it: the newer one failed; nothing sent).
    :param to_revision_id: the revision asked to return to.
    :param revision_id: the revision to wait for: the one the rollback created, or ``to_revision_id``
        for ``none``.
    :param rolled_back_from: the revision rolled back (the deployment's latest before the rollback).
    :param deployment: the deployment after the request (redacted when dumped).
    :param restored_config: the non-secret revision fields restored (``{}`` when unknown: a redeploy
        without the revision endpoint).
    :param exact: whether the very build returns (redeploy, or an image / tag / commit); ``False`` when a
        branch is rebuilt from its current head.
    """

    path: RollbackPath
    to_revision_id: str
    revision_id: str
    rolled_back_from: str | None
    deployment: Deployment
    restored_config: dict[str, str] = field(default_factory=dict)
    exact: bool = True

    def summary(self) -> str:
        """One line for logs and messages (never a secret)."""
        how = {
            "redeploy": "redeployed its build",
            "patch": "patched its source_revision_config back",
            "none": "it already serves",
        }[self.path]
        return (
            f"rollback of deployment {self.deployment.name!r} ({self.deployment.id}) from revision "
            f"{self.rolled_back_from} to revision {self.to_revision_id}: {how}; waiting for revision {self.revision_id}"
        )


def is_branch_ref(repo_ref: str | None) -> bool:
    """Whether ``repo_ref`` names a branch (its head moves), not a tag or a commit.

    :param repo_ref: a ``repo_ref`` value.
    """
    if not repo_ref:
        return False
    return not (repo_ref.startswith("refs/tags/") or _COMMIT_SHA.fullmatch(repo_ref))


def checked_fallback_config(config: Any, field_name: str = "source_revision_config") -> dict[str, str] | None:
    """A fallback config as the non-secret revision fields it sets; :class:`AirflowFailException` naming the
    bad field (before any request).

    :param config: ``None``, a mapping or a model of ``source_revision_config`` fields.
    :param field_name: the argument's name, for messages.
    """
    if config is None or config in ("", {}):
        return None
    if isinstance(config, pydantic.BaseModel):
        config = config.model_dump(mode="json", exclude_none=True)
    if not isinstance(config, Mapping):
        raise AirflowFailException(f"{field_name} must be a mapping, got {type(config).__name__}")
    unknown = sorted(set(config) - set(REVISION_CONFIG_FIELDS))
    if unknown:
        expected = ", ".join(REVISION_CONFIG_FIELDS)
        listed = ", ".join(unknown)
        raise AirflowFailException(f"{field_name} has unknown field(s) {listed}; expected some of {expected}")
    try:
        parsed = SourceRevisionConfig.model_validate(dict(config))
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"invalid {field_name}: {describe_validation_error(err)}") from None
    fields = _fields(parsed)
    if not {name: value for name, value in fields.items() if name != "repo_commit_sha"}:
        raise AirflowFailException(
            f"{field_name} sets no revision field: give at least one of repo_ref, graph_config_path, image_uri, "
            "source_tarball_path"
        )
    return fields


def _fields(config: SourceRevisionConfig | None) -> dict[str, str]:
    if config is None:
        return {}
    return {name: str(getattr(config, name)) for name in REVISION_CONFIG_FIELDS if getattr(config, name) is not None}


def _read_revision(
    hook: DeploymentServiceHook, deployment_id: str, revision_id: str, log: logging.Logger | Any
) -> Revision | None:
    """The revision from the optional revision endpoint; ``None`` when the server does not have it."""
    try:
        return hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code in REVISION_ENDPOINT_MISSING:
            log.info("The revision endpoint does not know revision %s (%s)", revision_id, err)
            return None
        raise


def revision_config_snapshot(
    hook: DeploymentServiceHook, deployment: Deployment, log: logging.Logger | Any
) -> dict[str, str]:
    """The non-secret revision fields of the revision ``deployment`` serves: what a rollback restores.

    Read from the revision endpoint for the active revision when the service has it (one GET), else from
    what the deployment shows (its latest revision's config: the active one's unless a rollout is in
    progress, which is then logged). ``{}`` when the deployment serves no revision.

    :param hook: the hook to ask.
    :param deployment: the deployment as read before a patch.
    :param log: where to say which source was used.
    """
    active = deployment.active_revision_id
    if active is None:
        return {}
    try:
        revision = _read_revision(hook, deployment.id, active, log)
    except DeploymentServiceError as err:
        log.info("Could not read revision %s (%s); taking its config from the deployment", active, err)
        revision = None
    if revision is not None and revision.source_revision_config is not None:
        return _fields(revision.source_revision_config)
    if deployment.is_rolling_out:
        log.warning(
            "The deployment shows the config of revision %s, which is still rolling out, not of the active "
            "revision %s: previous_source_revision_config may not be what serves now",
            deployment.latest_revision_id,
            active,
        )
    return _fields(deployment.source_revision_config)


def start_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    to_revision_id: str,
    *,
    rolling_back_from: str | None = None,
    fallback_config: Mapping[str, Any] | SourceRevisionConfig | None = None,
    secrets: list[dict[str, str]] | None = None,
    force: bool = False,
    log: logging.Logger | Any,
) -> RollbackStarted:
    """Start rolling ``deployment`` back to ``to_revision_id``; do not wait.

    Refuses (:class:`AirflowFailException`) before sending anything when: the revision is the one being
    rolled back; the deployment's latest revision is newer than ``rolling_back_from`` and not ``force``;
    the revision never built; or neither the redeploy endpoint, nor the revision endpoint, nor
    ``fallback_config`` can say what to restore. Transient service errors propagate (a task retry is safe:
    both requests are never applied twice).

    :param hook: the hook to send through.
    :param deployment: the deployment as just read (its ``latest_revision_id`` is the revision before the
        rollback request; the never-twice read-back compares with it).
    :param to_revision_id: the revision to return to.
    :param rolling_back_from: the revision being rolled back (e.g. the one a patch created); ``None`` takes
        the deployment's latest revision and skips the superseded check.
    :param fallback_config: the revision's non-secret ``source_revision_config`` fields, used for the patch
        path when the revision endpoint is missing (``previous_source_revision_config``).
    :param secrets: secret values to send with the restore (``[{"name", "value"}]``, already resolved); forces
        the patch path. ``None`` (default) sends none: the deployment keeps its current secrets.
    :param force: roll back even when a newer revision than ``rolling_back_from`` exists.
    :param log: where to report (the task's logger).
    """
    try:
        target = canonical_uuid(to_revision_id, "revision_id")
        source_revision = canonical_uuid(rolling_back_from, "rolling_back_from") if rolling_back_from else None
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    fallback = checked_fallback_config(fallback_config)
    name = f"deployment {deployment.name!r} ({deployment.id})"
    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    rolled_back_from = source_revision or latest
    if rolled_back_from == target:
        raise AirflowFailException(f"{name}: cannot roll revision {target} back to itself; give an earlier revision")
    if source_revision is not None and latest not in (source_revision, target):
        message = (
            f"{name}: revision {source_revision} was to be rolled back to {target}, but the latest revision is now "
            f"{latest} (someone rolled out meanwhile; active {active})"
        )
        if not force:
            raise AirflowFailException(f"{message}; not rolling back over it. Pass force=True to roll back anyway")
        log.warning("%s; rolling back anyway (force=True)", message)
    if active == target and latest == target:
        log.info("%s already serves revision %s; nothing to roll back", name, target)
        return RollbackStarted("none", target, target, rolled_back_from, deployment, exact=True)

    if active == target and latest is not None:
        newest = _read_revision(hook, deployment.id, latest, log)
        if newest is not None and newest.status.is_failed:
            log.info(
                "%s: revision %s never went live (status %s) and revision %s still serves; nothing to roll back",
                name,
                latest,
                newest.status.value,
                target,
            )
            return RollbackStarted("none", target, target, rolled_back_from, deployment, exact=True)

    revision = _read_revision(hook, deployment.id, target, log)
    if revision is not None and revision.status in NOT_BUILT:
        raise AirflowFailException(
            f"{name}: revision {target} has no build to return to (status {revision.status.value}); "
            "roll back to a revision that was live"
        )
    config = _fields(revision.source_revision_config) if revision is not None else {}
    if revision is not None and not config and fallback:
        config = fallback
    if revision is None and fallback:
        config = fallback

    if secrets is None:
        expected = SourceRevisionConfig.model_validate(config) if config else None
        try:
            after = hook.redeploy_revision(
                deployment.id, target, previous_latest_revision_id=latest, expected_config=expected
            )
        except RequestRejectedError as err:
            raise AirflowFailException(f"{name}: the service refused to redeploy revision {target}: {err}") from None
        except DeploymentServiceError as err:
            if err.status_code not in REVISION_ENDPOINT_MISSING:
                raise
            log.info("The redeploy endpoint is not available (%s); patching the revision's config back", err)
        else:
            new = after.latest_revision_id or target
            log.warning(
                "Rolling %s back from revision %s to revision %s: redeployed its build (exact, commit included) "
                "as revision %s",
                name,
                rolled_back_from,
                target,
                new,
            )
            return RollbackStarted("redeploy", target, new, rolled_back_from, after, config, exact=True)
    else:
        log.info("Secrets were given: patching the revision's config back (a redeploy carries no secrets)")

    restorable = {key: value for key, value in config.items() if key != "repo_commit_sha"}
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
    after = hook.patch_deployment(deployment.id, request, previous_latest_revision_id=latest)
    new = after.latest_revision_id or target
    log.warning(
        "Rolling %s back from revision %s to revision %s: patched its config back (%s) as revision %s",
        name,
        rolled_back_from,
        target,
        ", ".join(f"{key}={value}" for key, value in sorted(restorable.items())),
        new,
    )
    return RollbackStarted("patch", target, new, rolled_back_from, after, config, exact=exact)
