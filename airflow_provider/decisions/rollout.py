"""The rollout verdict shared by the sensor, the operator and the trigger (pure: no Airflow, no HTTP).

A rollout of revision ``R`` is finished when the deployment is ``READY`` **and** its active revision
is ``R``. ``READY`` alone is not enough: the previous revision keeps the deployment ``READY`` while the
new one builds (the stale-READY trap). The verdict fails fast when waiting can never succeed: the
deployment is gone or going away, the revision's build failed, or a newer revision superseded it (the
deployment's latest revision moved past it, or the service skipped it, ``SKIPPED``, because a newer one overtook
it while it was queued: superseded, never a failed build; the message names the successor).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from airflow_provider.models import Deployment, DeploymentStatus, Revision

__all__ = [
    "EVENT_STATUSES",
    "REVISION_ENDPOINT_MISSING",
    "UNHURRIED_LOOK_SHARE",
    "RevisionCheckSchedule",
    "RevisionLookBudget",
    "RolloutState",
    "RolloutVerdict",
    "awaits_revision_build",
    "bake_verdict",
    "rollout_verdict",
]


EVENT_STATUSES = ("success", "failed", "timeout", "error")
"""The ``status`` values of a :class:`~airflow_provider.triggers.rollout.DeploymentRolloutTrigger` event
(defined here so that a task reading one need not import the trigger)."""

REVISION_ENDPOINT_MISSING = frozenset({404, 405})
"""Answers of the optional revision endpoint meaning the service does not have it. The revision asked
about is always the deployment's own latest one, so a 404 means the endpoint, not the revision, is
missing. Any other error skips one check and leaves fail-fast on."""


class RolloutState(str, Enum):
    """Where a rollout stands."""

    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_done(self) -> bool:
        """Whether waiting is over (succeeded or failed)."""
        return self is not RolloutState.WAITING


@dataclass(frozen=True)
class RolloutVerdict:
    """The outcome of one look at a deployment.

    :param state: waiting, succeeded or failed.
    :param message: one line for a person: deployment name and id, revision, status (never a secret).
    :param key: compact description of what was seen; log only when it changes.
    """

    state: RolloutState
    message: str
    key: tuple[str | None, ...]

    @property
    def is_done(self) -> bool:
        """Whether waiting is over."""
        return self.state.is_done


def awaits_revision_build(deployment: Deployment | None, revision_id: str | None) -> bool:
    """Whether ``revision_id`` is the deployment's latest revision but not yet its active one.

    Only then can the revision's own status (the optional revision endpoint) tell something the
    deployment does not: that its build or deploy failed.

    :param deployment: the deployment as last seen (``None`` if not found).
    :param revision_id: the awaited revision.
    """
    return (
        deployment is not None
        and revision_id is not None
        and deployment.latest_revision_id == revision_id
        and deployment.active_revision_id != revision_id
    )


def _describe(deployment: Deployment) -> str:
    return f"deployment {deployment.name!r} ({deployment.id})"


def rollout_verdict(
    deployment: Deployment | None,
    revision_id: str | None,
    revision: Revision | None = None,
    *,
    deployment_id: str | None = None,
    allowed_latest_revision_id: str | None = None,
) -> RolloutVerdict:
    """Decide whether the rollout of ``revision_id`` succeeded, failed, or needs more waiting.

    :param deployment: the deployment as the service reports it now; ``None`` when it was not found.
    :param revision_id: the awaited revision; ``None`` waits for the deployment to be ``READY`` with no newer
        revision still rolling out.
    :param revision: the awaited revision as the revision endpoint reports it, if known (ignored when it
        is another revision).
    :param deployment_id: the awaited deployment's id, named in the message when it was not found.
    :param allowed_latest_revision_id: a newer revision that may stay the deployment's latest while
        ``revision_id`` goes live, not taken for one that supersedes it (an earlier revision redeployed
        without a new revision: a rollback). Any other newer latest still supersedes it.
    """
    if deployment is None:
        return RolloutVerdict(
            RolloutState.FAILED,
            f"deployment {deployment_id or '(unknown id)'} disappeared: the service no longer lists it "
            f"(awaited revision {revision_id or '(any)'})",
            ("gone",),
        )
    status = deployment.status
    name = _describe(deployment)
    active, latest = deployment.active_revision_id, deployment.latest_revision_id
    revision_status = revision.status.value if revision is not None and revision.id == revision_id else None
    key: tuple[str | None, ...] = (status.value, active, latest, revision_status)

    def verdict(state: RolloutState, message: str) -> RolloutVerdict:
        return RolloutVerdict(state, message, (state.value, *key))

    if status is DeploymentStatus.AWAITING_DELETE:
        never = f"revision {revision_id} will never go live" if revision_id else "it will never be READY again"
        return verdict(RolloutState.FAILED, f"{name} is being deleted (status AWAITING_DELETE); {never}")
    if revision_id is None:
        # Without a revision to wait for, READY is not enough either: a newer revision still building means
        # the deployment is about to change (the old revision keeps it READY meanwhile).
        if status is DeploymentStatus.READY and not deployment.is_rolling_out:
            return verdict(RolloutState.SUCCEEDED, f"{name} is READY (active revision {active})")
        if status is DeploymentStatus.READY:
            return verdict(
                RolloutState.WAITING,
                f"{name} is READY but revision {latest} is still rolling out (active {active}); waiting for it",
            )
        return verdict(RolloutState.WAITING, f"{name} has status {status.value}, waiting for READY")

    if active == revision_id and status is DeploymentStatus.READY:
        return verdict(RolloutState.SUCCEEDED, f"{name}: revision {revision_id} is live (status READY)")
    if revision_status is not None and revision is not None and revision.status.is_failed:
        detail = f": {revision.status_message}" if revision.status_message else ""
        return verdict(
            RolloutState.FAILED,
            f"{name}: revision {revision_id} ended with status {revision_status}{detail} "
            f"(active revision is still {active})",
        )
    skipped = revision is not None and revision_status is not None and revision.status.is_overtaken
    newer = latest not in (revision_id, allowed_latest_revision_id) or (skipped and latest != revision_id)
    if latest is not None and newer and active != revision_id:
        how = " (the service skipped it while it was queued: SKIPPED, never built)" if skipped else ""
        return verdict(
            RolloutState.FAILED,
            f"{name}: revision {revision_id} was superseded by {latest}, a newer revision{how}; it is not active "
            f"(active revision {active}, status {status.value})",
        )
    if skipped:  # the deployment was read before the newer revision showed: the next look names it
        return verdict(
            RolloutState.WAITING,
            f"{name}: revision {revision_id} was skipped (SKIPPED) for a newer revision; waiting to see which",
        )
    if active == revision_id:
        return verdict(
            RolloutState.WAITING,
            f"{name}: revision {revision_id} is active, waiting for status READY (now {status.value})",
        )
    building = f", revision status {revision_status}" if revision_status else ""
    if status is DeploymentStatus.READY:
        return verdict(
            RolloutState.WAITING,
            f"{name} is READY but still serves revision {active}; waiting for revision {revision_id}{building}",
        )
    return verdict(
        RolloutState.WAITING,
        f"{name} has status {status.value} (active revision {active}); waiting for revision {revision_id}{building}",
    )


def bake_verdict(deployment: Deployment, revision_id: str) -> str | None:
    """Why ``revision_id`` no longer counts as live on ``deployment`` (``None`` while it does).

    :param deployment: the deployment as just seen.
    :param revision_id: the revision being baked.
    """
    if deployment.active_revision_id != revision_id:
        active = deployment.active_revision_id
        now = f"revision {active} is active now" if active else "no revision is active now"
        return (
            f"deployment {deployment.name!r} ({deployment.id}) left revision {revision_id} during the bake: "
            f"{now} (status {deployment.status.value})"
        )
    if deployment.status is not DeploymentStatus.READY:
        return (
            f"deployment {deployment.name!r} ({deployment.id}) left READY during the bake of revision "
            f"{revision_id}: status {deployment.status.value}"
        )
    return None


class RevisionCheckSchedule:
    """Decide when the optional revision endpoint is worth a call for one awaited rollout.

    A call is due only while the awaited revision is the latest but not yet active, and then: when the
    deployment's ``updated_at`` changed since it was first seen or last asked about (a revision moving
    through its statuses touches its deployment: ``"changed"``, urgent), for a final check (``"final"``,
    urgent), before the first call (``"first"``) or when ``interval`` seconds passed without a call (a
    safety net, ``"timer"``); the last two are unhurried, spent from a :class:`RevisionLookBudget` by a
    poller that watches many rollouts. So a rollout costs a few revision calls over its whole build, not
    one per interval. After the endpoint answered 404 or 405 it is :attr:`disabled`.

    :param interval: longest time in seconds between two calls while nothing visibly changes.
    :param clock: monotonic time source (tests may pass their own).
    """

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        if interval < 0:
            raise ValueError(f"revision_check_interval must be >= 0 seconds, got {interval}")
        self.interval = interval
        self.disabled = False
        """Whether the revision endpoint is off for this wait (the service answered that it lacks it)."""
        self._clock = clock
        self._last_at: float | None = None
        self._last_updated_at: datetime | None = None

    def reason(self, deployment: Deployment | None, revision_id: str | None, *, force: bool = False) -> str | None:
        """Why to ask the revision endpoint now (``"final"``, ``"changed"``, ``"first"``, ``"timer"``),
        or ``None`` not to.

        :param deployment: the deployment as just seen.
        :param revision_id: the awaited revision.
        :param force: a final check: ask whenever the other conditions hold.
        """
        if self.disabled or deployment is None or not awaits_revision_build(deployment, revision_id):
            return None
        if force:
            return "final"
        if self._last_updated_at is not None and deployment.updated_at != self._last_updated_at:
            return "changed"
        if self._last_at is None:
            return "first"
        return "timer" if self._clock() - self._last_at >= self.interval else None

    def due(self, deployment: Deployment | None, revision_id: str | None, *, force: bool = False) -> bool:
        """Whether to ask the revision endpoint now (see :meth:`reason`)."""
        return self.reason(deployment, revision_id, force=force) is not None

    @property
    def last_asked(self) -> float:
        """Monotonic time of the last call; ``-inf`` before the first."""
        return float("-inf") if self._last_at is None else self._last_at

    def seen(self, deployment: Deployment) -> None:
        """Record the deployment as first seen, before any call: a later change to it is ``"changed"``
        (urgent) even while the unhurried first call still waits for its turn in the budget."""
        if self._last_updated_at is None:
            self._last_updated_at = deployment.updated_at

    def mark(self, deployment: Deployment) -> None:
        """Record that the endpoint was asked about ``deployment`` just now."""
        self._last_at = self._clock()
        self._last_updated_at = deployment.updated_at


UNHURRIED_LOOK_SHARE = 10
"""A poller's unhurried revision-endpoint calls (first looks, safety-net timer) cost at most one per
``UNHURRIED_LOOK_SHARE`` list requests: ``ceil(N / 100) / 10`` per round for N waiting rollouts."""


class RevisionLookBudget:
    """How many unhurried revision-endpoint calls (first looks and the safety-net timer) a poll round may make.

    A token bucket counted in tenths of a call: each round earns ``ceil(N / 100)`` tenths (one tenth of
    the round's list requests, :data:`UNHURRIED_LOOK_SHARE`) and the bucket holds at most one round's
    list requests' worth of calls, ``ceil(N / 100)``. It starts full, so a lone rollout (or the first
    ``ceil(N / 100)`` of a fleet) gets its first look in its first round; after that a quiet fleet costs at
    most ``1.1 x ceil(N / 100)`` requests per round on average, and over any R rounds the unhurried calls
    number at most ``ceil(N / 100) x (1 + R / 10)``. The calls a change or a final check needs are not
    drawn from it: they are what the service showed (a failed build is looked at in the round that sees
    its deployment change).

    Why a bucket rather than the whole budget every tenth round: the same calls per round on average, but
    spread evenly (one call per round for 1000 rollouts instead of ten calls in one round out of ten), and a
    rollout arriving alone to a quiet poller is looked at at once.
    """

    def __init__(self) -> None:
        self._tenths: int | None = None

    def grant(self, list_requests: int) -> int:
        """Earn this round's share for a round of ``list_requests`` list requests; return how many calls
        the round may make now (spend them with :meth:`spend`).

        :param list_requests: ``ceil(N / 100)`` for N waiting rollouts.
        """
        cap = list_requests * UNHURRIED_LOOK_SHARE
        if self._tenths is None:
            self._tenths = cap
        else:
            self._tenths = min(cap, self._tenths + list_requests)
        return self._tenths // UNHURRIED_LOOK_SHARE

    def spend(self, calls: int) -> None:
        """Take ``calls`` calls (at most what :meth:`grant` returned) out of the bucket.

        :param calls: the unhurried calls this round makes.
        """
        self._tenths = max(0, (self._tenths or 0) - calls * UNHURRIED_LOOK_SHARE)
