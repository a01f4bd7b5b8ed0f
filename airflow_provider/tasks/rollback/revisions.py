"""A deployment's revisions as a rollback reads them: the non-secret revision fields a config sets (what a
rollback restores), the optional revision and revision-list endpoints (absent on some services: never an
error where the answer is only a help), and the states that tell a redeploy under way.

Shared by the rollback's paths (:mod:`~airflow_provider.tasks.rollback.start`), the evidence a retry reattaches
on (:mod:`~airflow_provider.tasks.rollback.evidence`), the patch task's retries and fleet rollouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider.client import REVISION_CONFIG_FIELDS, same_revision_config
from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import Deployment, Revision, RevisionStatus, SourceRevisionConfig

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = [
    "changed_since",
    "in_progress",
    "neighbours",
    "read_revision",
    "revision_fields",
    "revision_if_shown",
    "same_build",
]

_LISTED_REVISIONS = 100
"""How many of the newest revisions a retry reads to find a revision's neighbours (one page)."""


def revision_fields(config: SourceRevisionConfig | None) -> dict[str, str]:
    """The non-secret revision fields ``config`` sets, as a rollback restores them (``{}`` when it sets none);
    the service's fields this provider does not know are left out: a restore patch cannot name them.

    :param config: a deployment's or a revision's ``source_revision_config`` (``None``: none).
    """
    if config is None:
        return {}
    return {name: str(getattr(config, name)) for name in REVISION_CONFIG_FIELDS if getattr(config, name) is not None}


def read_revision(
    hook: DeploymentServiceHook, deployment_id: str, revision_id: str, log: logging.Logger | Any
) -> Revision | None:
    """The revision from the optional revision endpoint; ``None`` when the server does not have it.

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the revision.
    :param log: where to say the endpoint does not know it.
    """
    try:
        return hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code in REVISION_ENDPOINT_MISSING:
            log.info("The revision endpoint does not know revision %s (%s)", revision_id, err)
            return None
        raise


def revision_if_shown(hook: DeploymentServiceHook, deployment_id: str, revision_id: str) -> Revision | None:
    """The revision from the optional revision endpoint; ``None`` when it cannot say (transient errors
    propagate: guessing would risk a second rollback).

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the revision.
    """
    try:
        return hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.transient:
            raise
        return None


def same_build(shown: SourceRevisionConfig | None, expected: Mapping[str, str], *, exact: bool) -> bool:
    """Whether ``shown`` is the config a rollback to ``expected`` makes (the commit ignored when a branch was
    rebuilt: its head has a new one).

    :param shown: the config a revision (or the deployment) shows.
    :param expected: the revision fields the rollback restores.
    :param exact: whether the very build returns (else the commit is not compared).
    """
    if shown is None or not expected:
        return False
    wanted = dict(expected) if exact else {key: value for key, value in expected.items() if key != "repo_commit_sha"}
    return same_revision_config(shown, SourceRevisionConfig.model_validate(wanted))


def neighbours(
    hook: DeploymentServiceHook, deployment_id: str, revision_id: str
) -> tuple[Revision | None, Revision | None] | None:
    """``(the revision made just after revision_id, the one just before)`` from the revision list (newest
    first); ``None`` when the service has no list endpoint or does not list the revision among its newest
    (transient errors propagate: guessing would risk a second rollback).

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the revision whose neighbours to find.
    """
    try:
        revisions = list(hook.iter_revisions(deployment_id, max_results=_LISTED_REVISIONS))
    except DeploymentServiceError as err:
        if err.transient:
            raise
        return None
    for index, revision in enumerate(revisions):
        if revision.id == revision_id:
            newer = revisions[index - 1] if index > 0 else None
            older = revisions[index + 1] if index + 1 < len(revisions) else None
            return newer, older
    return None


def changed_since(revision: Revision | None, deployment: Deployment) -> bool:
    """Whether ``revision`` changed after ``deployment`` was read (then the deployment is stale: read it again).

    :param revision: the revision as read (``None``: unknown).
    :param deployment: the deployment as read before it.
    """
    return revision is not None and revision.updated_at is not None and revision.updated_at > deployment.updated_at


def in_progress(revision: Revision | None) -> bool:
    """Whether ``revision`` is being built or deployed (not in a final state, and its state known): an older
    revision in progress is being redeployed.

    :param revision: the revision as read (``None``: unknown).
    """
    status = None if revision is None else revision.status
    return status is not None and status.is_known and not status.is_terminal and status is not RevisionStatus.UNKNOWN
