"""Emulated apps: each deployment's app answers a health check from its active revision and its behaviour.

The service side knows nothing of this: a revision marked unhealthy still builds and ends ``DEPLOYED``.
Only its app shows the problem, like a real release that starts but serves errors:

* ``GET {root}/apps/{deployment_id}`` and any path below it (``/apps/{id}/health``, ``/apps/{id}/ok``):
  200 ``{"status": "ok", ...}`` when the active revision is healthy, 500 ``{"status": "unhealthy", ...}``
  when it is marked unhealthy, its behaviour's ``health_status`` otherwise (``"unhealthy"`` unless 2xx;
  see :mod:`airflow_provider.emulator.behaviour`), 503 ``{"status": "unavailable", ...}`` while no revision
  is live, 404 for an unknown deployment. The answer takes the behaviour's ``latency_ms`` (a real sleep,
  at most 2 s). No API key; never faulted or counted as a service request.
* The service shows ``{root}/apps/{deployment_id}`` as ``source_config.custom_url`` of every deployment
  whose source is not ``external_docker`` (there the user sets ``custom_url``; point it at the app URL
  to check it the same way).

A revision is unhealthy when it was marked (next revision, a given revision; a redeploy copies the mark
of the revision it redeploys) or when an :class:`UnhealthyRule` matches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from .behaviour import Timeline, plan_at, serving_spans
from .plans import MAX_HEALTH_SLEEP_SECONDS, RevisionGlob
from .records import DeploymentRecord, RevisionRecord

APPS_PREFIX = "/apps"


class UnhealthyRule(RevisionGlob):
    """Every revision whose ``image_uri`` or ``repo_ref`` matches a glob is unhealthy.

    :param image_uri: glob over the revision's ``image_uri`` (e.g. ``*:broken*``).
    :param repo_ref: glob over the revision's ``repo_ref`` (e.g. ``refs/tags/v2.*``).
    :param deployment_id: only this deployment's revisions (``None``: any deployment).
    """

    rule_kind: ClassVar[str] = "an unhealthy rule"


def is_unhealthy(revision: RevisionRecord, rules: list[UnhealthyRule]) -> bool:
    """Whether ``revision`` is marked unhealthy or matched by one of ``rules``."""
    return revision.unhealthy or any(rule.matches(revision) for rule in rules)


@dataclass(frozen=True)
class AppAnswer:
    """What an emulated app answers.

    :param status_code: the HTTP status.
    :param body: the JSON body.
    :param latency_seconds: how long the app takes to answer (sleep this long before answering).
    """

    status_code: int
    body: dict[str, Any]
    latency_seconds: float = 0.0


def app_answer(
    record: DeploymentRecord,
    rules: list[UnhealthyRule],
    timeline_of: Callable[[RevisionRecord], Timeline],
    now: datetime,
) -> AppAnswer:
    """What the app of ``record`` answers now.

    :param record: the deployment (settled to now).
    :param rules: the unhealthy rules in force.
    :param timeline_of: the behaviour plans of a revision over time.
    :param now: the emulated time.
    """
    active_id = record.resource.active_revision_id
    active = record.revision(active_id) if active_id is not None else None
    if active is None:
        body = {"status": "unavailable", "deployment_id": record.id, "detail": "no revision is live yet"}
        return AppAnswer(503, body)
    answer = {
        "deployment_id": record.id,
        "revision_id": active.id,
        "source_revision_config": active.source_revision_config.model_dump(mode="json"),
    }
    if is_unhealthy(active, rules):
        return AppAnswer(
            500, {"status": "unhealthy", **answer, "detail": "the live revision is failing its health check"}
        )
    live_since = next((span.start for span in reversed(serving_spans(record)) if span.revision_id == active.id), now)
    behaviour = plan_at(timeline_of(active), now).at((now - live_since).total_seconds())
    latency = min(behaviour.latency_ms / 1000.0, MAX_HEALTH_SLEEP_SECONDS)
    if 200 <= behaviour.health_status < 300:
        return AppAnswer(behaviour.health_status, {"status": "ok", **answer}, latency)
    detail = f"the live revision answers its health check with {behaviour.health_status}"
    return AppAnswer(behaviour.health_status, {"status": "unhealthy", **answer, "detail": detail}, latency)
