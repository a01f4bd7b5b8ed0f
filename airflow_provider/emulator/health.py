"""Emulated apps: each deployment's app answers a health check from its active revision.

The service side knows nothing of this: a revision marked unhealthy still builds and ends ``DEPLOYED``.
Only its app shows the problem, like a real release that starts but serves errors:

* ``GET {root}/apps/{deployment_id}`` and any path below it (``/apps/{id}/health``, ``/apps/{id}/ok``):
  200 ``{"status": "ok", ...}`` when the active revision is healthy, 500 ``{"status": "unhealthy", ...}``
  when it is marked unhealthy, 503 ``{"status": "unavailable", ...}`` while no revision is live, 404 for
  an unknown deployment. No API key; never faulted or counted as a service request.
* The service shows ``{root}/apps/{deployment_id}`` as ``source_config.custom_url`` of every deployment
  whose source is not ``external_docker`` (there the user sets ``custom_url``; point it at the app URL
  to check it the same way).

A revision is unhealthy when it was marked (next revision, a given revision; a redeploy copies the mark
of the revision it redeploys) or when an :class:`UnhealthyRule` matches it.
"""

from __future__ import annotations

import fnmatch
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .records import DeploymentRecord, RevisionRecord

APPS_PREFIX = "/apps"


class UnhealthyRule(BaseModel):
    """Every revision whose ``image_uri`` or ``repo_ref`` matches a glob is unhealthy.

    :param image_uri: glob over the revision's ``image_uri`` (e.g. ``*:broken*``).
    :param repo_ref: glob over the revision's ``repo_ref`` (e.g. ``refs/tags/v2.*``).
    :param deployment_id: only this deployment's revisions (``None``: any deployment).
    """

    model_config = ConfigDict(extra="forbid")

    image_uri: str | None = None
    repo_ref: str | None = None
    deployment_id: str | None = None
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])

    @model_validator(mode="after")
    def _needs_a_pattern(self) -> UnhealthyRule:
        if self.image_uri is None and self.repo_ref is None:
            raise ValueError("an unhealthy rule needs image_uri or repo_ref (a glob)")
        return self

    def matches(self, revision: RevisionRecord) -> bool:
        """Whether ``revision`` is unhealthy under this rule."""
        if self.deployment_id is not None and self.deployment_id != revision.deployment_id:
            return False
        config = revision.source_revision_config
        return any(
            pattern is not None and value is not None and fnmatch.fnmatchcase(value, pattern)
            for pattern, value in ((self.image_uri, config.image_uri), (self.repo_ref, config.repo_ref))
        )


def is_unhealthy(revision: RevisionRecord, rules: list[UnhealthyRule]) -> bool:
    """Whether ``revision`` is marked unhealthy or matched by one of ``rules``."""
    return revision.unhealthy or any(rule.matches(revision) for rule in rules)


def app_answer(record: DeploymentRecord, rules: list[UnhealthyRule]) -> tuple[int, dict[str, Any]]:
    """The status code and body of the app of ``record`` now.

    :param record: the deployment (settled to now).
    :param rules: the unhealthy rules in force.
    """
    active_id = record.resource.active_revision_id
    active = record.revision(active_id) if active_id is not None else None
    if active is None:
        body = {"status": "unavailable", "deployment_id": record.id, "detail": "no revision is live yet"}
        return 503, body
    answer = {
        "deployment_id": record.id,
        "revision_id": active.id,
        "source_revision_config": active.source_revision_config.model_dump(mode="json"),
    }
    if is_unhealthy(active, rules):
        return 500, {"status": "unhealthy", **answer, "detail": "the live revision is failing its health check"}
    return 200, {"status": "ok", **answer}
