"""``RollbackDeploymentOperator(revision_id="previous")``: which revision served before the one serving now.

Its own module, imported by the rollback operator only: its messages name the rollback task's
``revision_id``, which the other tasks sharing :mod:`~airflow_provider.tasks.rollback.revisions` do not have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import Deployment, Revision, RevisionStatus
from airflow_provider.tasks.rollback.revisions import revision_fields

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = ["PREVIOUS", "check_literal_revision_id", "previous_hint", "previous_served_revision"]

PREVIOUS = "previous"
"""``RollbackDeploymentOperator(revision_id="previous")``: the revision that served before the current one."""

_PREVIOUS_WORDS = ("last", "before", "earlier", "rollback", "back")
"""Words users reach for when they mean ``"previous"``, beyond its misspellings."""


def previous_hint(value: Any) -> str:
    """``'; did you mean "previous" ...?'`` when ``value`` (a ``revision_id`` that is not a UUID) looks like it, else
    ``""``.

    :param value: the ``revision_id`` as given or rendered.
    """
    from airflow_provider.suggestions import did_you_mean

    word = value.strip().lower() if isinstance(value, str) else ""
    if not word or not (did_you_mean(word, [PREVIOUS]) or PREVIOUS.startswith(word) or word in _PREVIOUS_WORDS):
        return ""
    return f'; did you mean "{PREVIOUS}" (the revision that served before the one serving now)?'


def check_literal_revision_id(value: Any) -> None:
    """Refuse, when the DAG is parsed, a literal ``revision_id`` that is neither a UUID nor ``"previous"`` (a template
    or an XCom is checked once rendered).

    :param value: the argument.
    :raises ValueError: naming ``revision_id``, what was expected and, when it looks like it, ``"previous"``.
    """
    from airflow_provider.models import canonical_uuid

    if not isinstance(value, str) or "{{" in value or value.strip().lower() == PREVIOUS:
        return
    if value.strip() in ("", "None", "null"):  # what a missing XCom renders to: said once rendered, naming it
        return
    try:
        canonical_uuid(value, "revision_id")
    except ValueError as err:
        raise ValueError(f'{err} (expected a revision UUID or "{PREVIOUS}"){previous_hint(value)}') from None


_PREVIOUS_LOOKBACK = 500
"""How many of the newest revisions ``revision_id="previous"`` reads, at most, to find it."""


def previous_served_revision(
    hook: DeploymentServiceHook, deployment: Deployment, log: logging.Logger | Any
) -> tuple[Revision, list[Revision]]:
    """The revision that served before the one serving now: the newest revision older than the active one
    (in the service's newest-first list) that was deployed (status ``DEPLOYED``); revisions that never served
    (``BUILD_FAILED``, ``DEPLOY_FAILED``, ``CREATE_FAILED``, ``SKIPPED``, ``INTERRUPTED``, unfinished) are
    skipped. Returns it and the revisions skipped. ``ValueError`` saying why when there is none, when the
    deployment serves no revision, or when the service does not list revisions.

    :param hook: the hook to ask.
    :param deployment: the deployment as just read.
    :param log: the task's logger.
    """
    name = f"deployment {deployment.name!r} ({deployment.id})"
    active = deployment.active_revision_id
    if not active:
        raise ValueError(f"{name}: revision_id='previous' needs a revision serving now; the deployment has none")
    seen_active = False
    skipped: list[Revision] = []
    try:
        for revision in hook.iter_revisions(deployment.id, max_results=_PREVIOUS_LOOKBACK):
            if not seen_active:
                seen_active = revision.id == active
                continue
            if revision.status is RevisionStatus.DEPLOYED:
                log.info(
                    "%s: revision_id='previous' is revision %s (%s), which served before the serving revision %s%s",
                    name,
                    revision.id,
                    ", ".join(f"{k}={v}" for k, v in revision_fields(revision.source_revision_config).items())
                    or "no build shown",
                    active,
                    f"; skipped {', '.join(f'{r.id} ({r.status.value})' for r in skipped)}" if skipped else "",
                )
                return revision, skipped
            skipped.append(revision)
    except DeploymentServiceError as err:
        if err.status_code in (404, 405):
            raise ValueError(
                f"{name}: revision_id='previous' needs the service's revision list, which it does not offer "
                f"({err.status_code}); give the revision's id"
            ) from None
        raise
    where = "is not among its newest revisions" if not seen_active else "is its oldest deployed revision"
    raise ValueError(
        f"{name}: no revision served before the serving revision {active} (it {where}"
        + (f"; never served: {', '.join(f'{r.id} ({r.status.value})' for r in skipped)}" if skipped else "")
        + "): nothing to roll back to"
    )
