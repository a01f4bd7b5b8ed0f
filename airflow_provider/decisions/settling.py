"""When a deployment watcher may announce a revision: once it has stayed live for the settle time and no
rollout of this provider is still judging it (:func:`announcement`), and what to say when an announced
revision stops serving (:func:`stop_kind`). Decisions only: the watcher
(:mod:`airflow_provider.triggers.watcher`) reads the service and the judging markers and hands them in.

A revision that a rollout's analysis rejects serves for seconds or minutes before the rollout rolls it back.
A watcher that announced it as soon as it served would start downstream DAGs (smoke tests, promotions) on a
revision Airflow is about to reject. So :class:`~airflow_provider.triggers.watcher.DeploymentEventTrigger`
holds a new active revision as a *candidate* and announces it (``revision_live``) only when

- it has served, ``READY``, for ``settle_time`` seconds (looked at every ``poll_interval``), and
- the deployment's judging marker (:mod:`airflow_provider.decisions.judging_marker`, written by the tasks of this
  provider to the asset state store of the deployment's id asset) says no rollout is judging it any more: a verdict of
  ``landed``/``passed`` (or a rollback's revision that serves again, ``rolled_back``) announces it, a
  rejection never does (it is being rolled back, or a person has to look).

An announced revision that stops serving fires ``revision_rolled_back`` when what serves now is older (it
served before, a rollback of this provider made it, or the service says it was created earlier), else
``revision_replaced``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_provider.assets import event_payload
from airflow_provider.decisions.judging_marker import REJECTED_STATES, judging_of
from airflow_provider.models import Deployment

__all__ = [
    "DEFAULT_SETTLE_TIME",
    "SERVED_KEPT",
    "Announcement",
    "MarkerReader",
    "Seen",
    "announcement",
    "build_of",
    "settle",
    "stop_kind",
]

DEFAULT_SETTLE_TIME = 300.0
"""Seconds a new active revision must serve before a watcher announces it (``settle_time``): longer than
most analyses and bakes, so a rollout's rollback comes first even when its task publishes no marker."""


def build_of(config: Any) -> str:
    """A short fingerprint of a revision's build settings (``source_revision_config``: image, commit, ref...):
    the same for a redeploy of a build as for the build itself (the service copies them); ``""`` when not known.

    :param config: the revision's ``source_revision_config`` (a model or its JSON), or ``None``.
    """
    if config is None:
        return ""
    data = config.model_dump(mode="json", exclude_none=True) if hasattr(config, "model_dump") else config
    data = {key: value for key, value in dict(data).items() if value is not None}
    if not data:
        return ""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


SERVED_KEPT = 6
"""Revisions announced before the current one that a watcher remembers per deployment (to tell a rollback)."""


@dataclass
class Seen:
    """What a watcher last reported of one deployment (one cursor entry)."""

    active: str | None
    status: str | None
    latest: str | None
    updated_at: str | None
    failed: str | None
    name: str | None = None
    pending: str | None = None
    """The candidate: a new active revision not announced yet (settling, or being judged)."""
    pending_since: str | None = None
    """When the candidate was first seen serving (Unix seconds, as text)."""
    left: str | None = None
    """The announced revision (``active``) once reported as no longer serving."""
    served: str | None = None
    """The revisions announced, ``active`` included, newest last, each with its build
    (``<revision>:<build>``, comma-separated, at most :data:`SERVED_KEPT`; see :func:`build_of`)."""

    def to_json(self) -> list[str | None]:
        return [
            self.active,
            self.status,
            self.latest,
            self.updated_at,
            self.failed,
            self.name,
            self.pending,
            self.pending_since,
            self.left,
            self.served,
        ]

    @classmethod
    def from_json(cls, value: Any) -> Seen | None:
        if not isinstance(value, list) or len(value) not in (6, 10):  # 6: a cursor saved before settling
            return None
        if not all(v is None or isinstance(v, str) for v in value):
            return None
        return cls(*value)

    def served_list(self) -> list[tuple[str, str]]:
        """``(revision, build)`` of each revision announced, newest last (build ``""``: not known)."""
        return [(item.partition(":")[0], item.partition(":")[2]) for item in (self.served or "").split(",") if item]

    @classmethod
    def of(cls, deployment: Deployment) -> Seen:
        return cls(
            deployment.active_revision_id,
            deployment.status.value,
            deployment.latest_revision_id,
            deployment.updated_at.isoformat(),
            None,
            deployment.name,
            served=f"{deployment.active_revision_id}:{_build_now(deployment)}"
            if deployment.active_revision_id
            else None,
        )


class MarkerReader(Protocol):
    """Reads a deployment's judging marker: the marker, ``{}`` when there is none, ``None`` when it cannot be
    known (the watcher's :class:`~airflow_provider.triggers.watcher.JudgingReader`)."""

    async def marker(self, deployment_id: str) -> Any | None: ...


@dataclass(frozen=True)
class Announcement:
    """What to do with a candidate revision now.

    :param announce: fire ``revision_live`` now.
    :param withheld: a rollout of this provider rejected it: never announce it (log once).
    :param fields: what the event says of its judging (``judging``, ``verdict``, ``judged_by``,
        ``judging_stale``, ``live_since``, ``settle_time``).
    """

    announce: bool
    withheld: bool
    fields: dict[str, Any]


async def announcement(
    reader: MarkerReader,
    deployment_id: str,
    revision_id: str,
    *,
    live_since: float,
    settle_time: float,
    wait_for_verdict: bool,
    now: float,
) -> Announcement | None:
    """Whether the candidate ``revision_id`` (serving, ``READY``, since ``live_since``) is announced now;
    ``None`` while it has not served ``settle_time`` seconds yet (nothing read).

    :param reader: the watcher's marker reader.
    :param deployment_id: the deployment.
    :param revision_id: the candidate.
    :param live_since: when the watcher first saw it serve (Unix seconds).
    :param settle_time: seconds it must serve first.
    :param wait_for_verdict: hold it while a rollout of this provider judges it.
    :param now: the time (Unix seconds).
    """
    if settle_time > 0 and now - live_since < settle_time:
        return None
    judged = judging_of(await reader.marker(deployment_id), revision_id, now)
    fields = {
        "judging": judged["judging"],
        "verdict": judged["verdict"],
        "judged_by": judged["judged_by"],
        "judging_stale": judged["stale"],
        "live_since": round(live_since, 3),
        "settle_time": settle_time,
    }
    if judged["verdict"] in REJECTED_STATES:
        return Announcement(False, True, fields)
    return Announcement(not (wait_for_verdict and judged["judging"]), False, fields)


STOP_KINDS = frozenset({"revision_rolled_back", "revision_replaced"})
"""The kinds that say an announced revision stopped serving."""


async def stop_kind(
    reader: MarkerReader,
    deployment_id: str,
    stopped: str,
    serving: str,
    *,
    serving_build: str,
    served: list[tuple[str, str]],
    created_at: Callable[[str], Any],
) -> str:
    """``revision_rolled_back`` when ``serving`` (active now instead of the announced ``stopped``) is older: it,
    or its build (a redeploy makes a new revision of an old build), was announced before ``stopped``; a
    rollback of this provider made it, or rejected ``stopped``; or the service says it was created before
    ``stopped``. Else ``revision_replaced``.

    :param reader: the watcher's marker reader.
    :param deployment_id: the deployment.
    :param stopped: the announced revision that no longer serves.
    :param serving: the revision serving now.
    :param serving_build: its build (:func:`build_of`; ``""``: not known).
    :param served: ``(revision, build)`` the watcher announced, newest last.
    :param created_at: an async function giving a revision's creation time (``None``: not known).
    """
    stopped_build = next((build for revision, build in served if revision == stopped), "")
    earlier = [(revision, build) for revision, build in served if revision != stopped]
    if serving in {revision for revision, _ in earlier}:
        return "revision_rolled_back"
    if serving_build and serving_build != stopped_build and serving_build in {build for _, build in earlier}:
        return "revision_rolled_back"
    marker = await reader.marker(deployment_id)
    revisions = marker.get("revisions") if isinstance(marker, dict) else None
    if isinstance(revisions, dict):
        mark = revisions.get(serving) or {}
        undone = revisions.get(stopped) or {}
        if mark.get("rolled_back_from") == stopped or undone.get("state") in REJECTED_STATES:
            return "revision_rolled_back"
    born_stopped, born_serving = await created_at(stopped), await created_at(serving)
    if born_stopped is not None and born_serving is not None and born_serving < born_stopped:
        return "revision_rolled_back"
    return "revision_replaced"


async def settle(
    trigger: Any,
    events: set[str],
    reader: MarkerReader,
    withheld: set[tuple[str, str]],
    deployment: Deployment,
    before: Seen,
    after: Seen,
    created_at: Callable[[str], Awaitable[Any]],
) -> list[dict[str, Any]]:
    """One look at a ``READY`` deployment with an active revision: the announced revision stopped serving
    (``revision_rolled_back``/``revision_replaced``, at once); the one serving now announced once settled and
    judged (``revision_live``). Updates ``after`` (what the watcher remembers of the deployment).

    :param trigger: the watcher (``settle_time``, ``wait_for_verdict``, ``log``).
    :param events: the kinds it fires.
    :param reader: its marker reader.
    :param withheld: candidates a rollout rejected (said once; updated).
    :param deployment: the deployment as seen now.
    :param before: what the watcher remembered of it.
    :param after: what it remembers now (updated).
    :param created_at: a revision's creation time as the service shows it (``None``: not known), to tell an
        older revision.
    """
    deployment_id = deployment.id
    log, serving = trigger.log, deployment.active_revision_id
    assert serving is not None
    payloads: list[dict[str, Any]] = []
    if before.active is not None and serving != before.active and before.left != before.active:
        after.left = before.active
        # which of the two it was costs up to two revision reads: only for a watcher that fires one of them
        if events & STOP_KINDS:
            kind = await stop_kind(
                reader,
                deployment_id,
                before.active,
                serving,
                serving_build=_build_now(deployment),
                served=before.served_list(),
                created_at=created_at,
            )
            log.info(
                "%s: announced revision %s no longer serves (%s now): %s", deployment.name, before.active, serving, kind
            )
            if kind in events:
                payloads.append(
                    event_payload(
                        kind,
                        deployment,
                        deployment_id=deployment_id,
                        origin="watcher",
                        previous_revision_id=before.active,
                        previous_status=before.status,
                    )
                )
    if serving == before.active and after.left != serving:
        after.pending = after.pending_since = None  # a candidate that stopped serving first is forgotten
        return payloads
    now = time.time()
    if after.pending != serving or after.pending_since is None:
        # Rounded down: a time rounded up would lie in the future, and ``settle_time=0`` would wait a round.
        after.pending, after.pending_since = serving, f"{math.floor(now * 1000) / 1000:.3f}"
    if (deployment_id, serving) in withheld:
        return payloads
    decided = await announcement(
        reader,
        deployment_id,
        serving,
        live_since=float(after.pending_since),
        settle_time=trigger.settle_time,
        wait_for_verdict=trigger.wait_for_verdict,
        now=now,
    )
    if decided is None or not decided.announce:
        if decided is not None and decided.withheld:
            withheld.add((deployment_id, serving))
            log.warning(
                "%s: revision %s serves but a rollout of this provider judged it %s (%s): not announced",
                deployment.name,
                serving,
                decided.fields["verdict"],
                decided.fields["judged_by"],
            )
        return payloads
    served = [*[item for item in before.served_list() if item[0] != serving], (serving, _build_now(deployment))]
    after.served = ",".join(f"{revision}:{build}" for revision, build in served[-SERVED_KEPT:])
    after.active, after.pending, after.pending_since, after.left = serving, None, None, None
    if "revision_live" in events:
        payloads.append(
            event_payload(
                "revision_live",
                deployment,
                deployment_id=deployment_id,
                origin="watcher",
                previous_revision_id=before.active,
                previous_status=before.status,
                extra=decided.fields,
            )
        )
    return payloads


def _build_now(deployment: Deployment) -> str:
    """The build of the revision serving, when the deployment's settings are its (active is the latest)."""
    if deployment.active_revision_id != deployment.latest_revision_id:
        return ""
    return build_of(deployment.source_revision_config)
