"""Stored deployments and revisions, and the revision state machine.

Transitions are computed lazily: :meth:`DeploymentRecord.settle` replays every transition that is due at
a given time, in time order, stamping each with the time it happened (not the time it was noticed).

A revision's life: ``CREATING`` for its first moments (:data:`CREATING_SHARE` of ``build_seconds``, at most
:data:`CREATING_MAX_SECONDS`), then ``QUEUED`` while an earlier revision of the same deployment is unfinished (one
build at a time), then ``AWAITING_BUILD`` -> ``BUILDING`` -> ``DEPLOYING`` -> ``DEPLOYED`` over ``build_seconds``
(20 % / 50 % / 30 %; a revision that starts at once spends its ``CREATING`` moments inside the first 20 %, so
the build still ends ``build_seconds`` after its creation). A queued revision that a newer one overtakes (a
PATCH or a redeploy while it waits) is ``SKIPPED``, never built, as production does; only the newest waiting
revision builds (a failure or unhealthy mark set for the skipped one passes to it). A deployment set
``AWAITING_DELETE`` interrupts its unfinished revisions (``INTERRUPTED``). A revision marked to fail ends in
``BUILD_FAILED`` at the end of ``BUILDING`` or ``DEPLOY_FAILED`` at the end of ``DEPLOYING``. When a revision is
``DEPLOYED`` it becomes the deployment's active revision. A deployment ``AWAITING_DATABASE`` becomes ``READY`` once
``ready_seconds`` have passed since its creation and a revision is active; it stays ``READY`` while
later revisions build (the old revision keeps serving).

A redeploy (``POST .../revisions/{revision_id}/redeploy``) reuses the build of the earlier revision, so
its revision skips the build: ``QUEUED`` (if need be) -> ``AWAITING_DEPLOY`` -> ``DEPLOYING`` ->
``DEPLOYED``, ending 30 % of ``build_seconds`` after it starts (``DEPLOYING`` from 10 %).

With the emulator's ``redeploy_mode="in_place"`` switch a redeploy makes no revision: the earlier revision
itself is deployed again (:meth:`RevisionRecord.deploy_again`), through the same phases, and becomes the
active revision again while the newer one stays the latest.

A revision can be marked unhealthy (emulator-only, see ``RevisionRecord.unhealthy``): the service
still reports it ``DEPLOYED``, but the deployment's app URL answers 500 while it is the active revision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_provider.models import (
    Deployment,
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    Revision,
    RevisionStatus,
    SourceRevisionConfig,
)

from .contract.schema import render_resource_spec
from .plans import BehaviourPlan

CREATING_SHARE = 0.05
"""The share of ``build_seconds`` a new revision is ``CREATING`` (see the module docstring)."""
CREATING_MAX_SECONDS = 1.0
"""The longest a new revision is ``CREATING``."""

BUILD_PHASES: dict[RevisionStatus, tuple[float, RevisionStatus]] = {
    RevisionStatus.AWAITING_BUILD: (0.2, RevisionStatus.BUILDING),
    RevisionStatus.BUILDING: (0.7, RevisionStatus.DEPLOYING),
    RevisionStatus.DEPLOYING: (1.0, RevisionStatus.DEPLOYED),
}
"""For each in-progress status: the fraction of ``build_seconds`` (from the build start) at which it
ends, and the status that follows."""

REDEPLOY_PHASES: dict[RevisionStatus, tuple[float, RevisionStatus]] = {
    RevisionStatus.AWAITING_DEPLOY: (0.1, RevisionStatus.DEPLOYING),
    RevisionStatus.DEPLOYING: (0.3, RevisionStatus.DEPLOYED),
}
"""The same for a redeploy, which skips the build."""

SERVICE_DEPLOYMENT_TYPES = ("dev_free", "dev", "prod", "dev_zero")
"""The deployment types the emulated service knows (``dev_zero``: serverless, the default of the service's own
command-line client); with the ``unknown_fields`` switch it knows more (see
:data:`~airflow_provider.emulator.unknown_fields.DEPLOYMENT_TYPES`)."""
ServiceDeploymentType = Literal["dev_free", "dev", "prod", "dev_zero"]
SERVICE_SOURCES = ("codehost", "external_docker", "internal_docker", "internal_source", "internal_template")
"""The deployment sources the emulated service knows."""

REDEPLOYABLE = (RevisionStatus.DEPLOYED, RevisionStatus.DEPLOY_FAILED)
"""Statuses of revisions whose build succeeded, so that they can be redeployed."""

FAILURE_STATUSES = (RevisionStatus.BUILD_FAILED, RevisionStatus.DEPLOY_FAILED)
"""The statuses a build can be made to fail with."""

_FAILS_INSTEAD_OF = {
    RevisionStatus.BUILD_FAILED: RevisionStatus.DEPLOYING,
    RevisionStatus.DEPLOY_FAILED: RevisionStatus.DEPLOYED,
}
_FAILURE_MESSAGES = {
    RevisionStatus.BUILD_FAILED: "Build failed (injected by the emulator)",
    RevisionStatus.DEPLOY_FAILED: "Deploy failed (injected by the emulator)",
}


@dataclass
class RevisionRecord:
    """One revision of a deployment.

    :param id: revision id.
    :param deployment_id: owning deployment.
    :param source_revision_config: the revision settings.
    :param created_at: creation time.
    :param build_seconds: duration of the build, from start to ``DEPLOYED``.
    :param source: the revision's source (the patch's ``revision_source``, else the deployment's).
    :param status: current status.
    :param started_at: when its build started (left ``QUEUED``); ``None`` while queued.
    :param fail_with: ``BUILD_FAILED`` or ``DEPLOY_FAILED`` to make the build fail.
    :param fail_message: status message of that failure.
    :param status_message: message of the current status (failures).
    :param redeploy_of: the revision this one redeploys (it then skips the build).
    :param unhealthy: emulator-only: the app answers 500 while this revision is active.
    :param remote_reconciled: the ``remote_reconciled`` filter flag (the deployment's at creation).
    :param deployed_again: emulator-only: the revision was redeployed in place (``redeploy_mode="in_place"``).
    :param behaviour_changes: emulator-only: ``(when, plan)`` each time its app's behaviour was set, oldest
        first (none: a rule's or the default; see :mod:`airflow_provider.emulator.behaviour`).
    """

    id: str
    deployment_id: str
    source_revision_config: SourceRevisionConfig
    created_at: datetime
    build_seconds: float
    source: str
    status: RevisionStatus = RevisionStatus.CREATING
    started_at: datetime | None = None
    fail_with: RevisionStatus | None = None
    fail_message: str | None = None
    status_message: str | None = None
    redeploy_of: str | None = None
    unhealthy: bool = False
    remote_reconciled: bool = False
    deployed_again: bool = False
    behaviour_changes: list[tuple[datetime, BehaviourPlan]] = field(default_factory=list)
    updated_at: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.updated_at = self.created_at

    @property
    def behaviour(self) -> BehaviourPlan | None:
        """The behaviour last set for this revision (``None``: never set)."""
        return self.behaviour_changes[-1][1] if self.behaviour_changes else None

    @property
    def finished(self) -> bool:
        """Whether the revision reached a terminal status."""
        return self.status.is_terminal

    @property
    def skips_build(self) -> bool:
        """Whether this revision reuses an earlier build (a redeploy, or itself deployed again)."""
        return self.redeploy_of is not None or self.deployed_again

    @property
    def phases(self) -> dict[RevisionStatus, tuple[float, RevisionStatus]]:
        """The in-progress phases this revision goes through."""
        return REDEPLOY_PHASES if self.skips_build else BUILD_PHASES

    @property
    def creating_ends(self) -> datetime:
        """When this revision stops being ``CREATING``."""
        seconds = min(CREATING_SHARE * self.build_seconds, CREATING_MAX_SECONDS)
        return self.created_at + timedelta(seconds=seconds)

    @property
    def waiting(self) -> bool:
        """Whether the revision waits for its build to start (``CREATING`` or ``QUEUED``, not started)."""
        return self.started_at is None and not self.finished

    def next_transition(self) -> tuple[datetime, RevisionStatus] | None:
        """The next status change of a started revision and when it happens (``None`` if none)."""
        if self.finished or self.started_at is None:
            return None
        if self.status is RevisionStatus.CREATING:
            return self.creating_ends, min(self.phases, key=lambda status: self.phases[status][0])
        if self.status not in self.phases:
            return None
        fraction, following = self.phases[self.status]
        if self.fail_with is not None and _FAILS_INSTEAD_OF[self.fail_with] is following:
            following = self.fail_with
        return self.started_at + timedelta(seconds=self.build_seconds * fraction), following

    def set_status(self, status: RevisionStatus, at: datetime, message: str | None = None) -> None:
        """Record a status change that happened at ``at``."""
        self.status = status
        self.updated_at = max(self.updated_at, at)
        if status in FAILURE_STATUSES:
            self.status_message = message or self.fail_message or _FAILURE_MESSAGES[status]
        elif status is RevisionStatus.DEPLOYED:
            self.status_message = None

    def start(self, at: datetime) -> None:
        """The build starts at ``at`` (still ``CREATING`` when that is within its first moments)."""
        self.started_at = at
        if self.status is RevisionStatus.CREATING and at < self.creating_ends:
            return
        self.set_status(RevisionStatus.AWAITING_DEPLOY if self.skips_build else RevisionStatus.AWAITING_BUILD, at)

    def deploy_again(self, at: datetime) -> None:
        """Deploy this (finished) revision's build again from ``at``: a redeploy that makes no revision."""
        self.deployed_again = True
        self.fail_with = self.fail_message = None
        self.started_at = at
        self.set_status(RevisionStatus.AWAITING_DEPLOY, at)
        self.status_message = None

    def to_model(self) -> Revision:
        """The revision resource."""
        return Revision(
            id=self.id,
            deployment_id=self.deployment_id,
            status=self.status,
            source_revision_config=self.source_revision_config,
            created_at=self.created_at,
            updated_at=self.updated_at,
            status_message=self.status_message,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON of the revision resource (``source`` always included, as production does)."""
        body: dict[str, Any] = self.to_model().model_dump(mode="json")
        body["source"] = self.source
        return body

    def admin_json(self) -> dict[str, Any]:
        """JSON of the revision plus its emulator-only data."""
        return {
            **self.to_json(),
            "redeploy_of": self.redeploy_of,
            "deployed_again": self.deployed_again,
            "unhealthy": self.unhealthy,
            "behaviour": self.behaviour.model_dump(mode="json") if self.behaviour is not None else None,
            "fail_with": self.fail_with.value if self.fail_with else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
        }


@dataclass
class DeploymentRecord:
    """A deployment as the emulator stores it: the resource plus data the resource does not show.

    :param resource: the deployment resource (mutated in place; secrets in clear inside).
    :param deployment_type: one of :data:`SERVICE_DEPLOYMENT_TYPES` (``deployment_type`` filter).
    :param tag_value_ids: tag value ids (``tag_value_ids`` filter).
    :param remote_reconciled: the ``remote_reconciled`` filter flag.
    :param build_seconds: build duration for this deployment, overriding the emulator's.
    :param revisions: revisions in creation order.
    """

    resource: Deployment
    deployment_type: DeploymentType = DeploymentType.DEV
    tag_value_ids: list[str] = field(default_factory=list)
    remote_reconciled: bool = False
    build_seconds: float | None = None
    revisions: list[RevisionRecord] = field(default_factory=list)
    status_pinned: bool = False
    """Set by an admin status change: the status no longer moves by itself."""
    active_since: datetime | None = None
    """When the active revision was deployed."""
    pending_failure: tuple[RevisionStatus, str | None] | None = None
    """A failure for the next revision to be created (see :meth:`fail_next_build`)."""
    pending_unhealthy: bool = False
    """The next revision created will be unhealthy (see :meth:`mark_next_unhealthy`)."""
    pending_behaviour: BehaviourPlan | None = None
    """The behaviour of the next revision created (see
    :meth:`~airflow_provider.emulator.state.apps.AppSide.set_behaviour`)."""
    serving_history: list[tuple[str, datetime]] = field(default_factory=list)
    """``(revision id, when it went live)`` each time a revision went live, oldest first: the revision serves
    until the next entry (see :func:`airflow_provider.emulator.behaviour.serving_spans`)."""

    @property
    def id(self) -> str:
        """The deployment id."""
        return self.resource.id

    def touch(self, at: datetime) -> None:
        """Record a change at ``at``."""
        self.resource.updated_at = max(self.resource.updated_at, at)

    def revision(self, revision_id: str) -> RevisionRecord | None:
        """The revision with ``revision_id``, if it belongs to this deployment."""
        return next((rev for rev in self.revisions if rev.id == revision_id), None)

    def current_build(self) -> RevisionRecord | None:
        """The earliest unfinished revision (the one building, or next to build)."""
        return next((rev for rev in self.revisions if not rev.finished), None)

    # ------------------------------------------------------------------------------ state machine
    def settle(
        self,
        now: datetime,
        ready_seconds: float,
        *,
        revision_status_touches: bool = True,
        going_live_touches: bool = True,
    ) -> None:
        """Apply, in time order, every transition due at or before ``now``.

        :param now: the emulated time.
        :param ready_seconds: the emulator's delay before a new deployment is ``READY``.
        :param revision_status_touches: whether a revision's status change moves the deployment's
            ``updated_at`` (when false only the changes the deployment shows do: a revision going live).
        :param going_live_touches: whether a revision going live (and the deployment becoming ``READY``) moves
            it; when false (with ``revision_status_touches`` false too) only requests move it.
        """
        while True:
            build = self.current_build()
            if build is not None and build.started_at is None:
                # Only happens for data whose first unfinished revision was never started.
                build.start(now)
            revision_step = build.next_transition() if build is not None else None
            ready_at = self._ready_at(ready_seconds)
            queued = min(
                (rev for rev in self.revisions if rev.waiting and rev.status is RevisionStatus.CREATING),
                key=lambda rev: rev.creating_ends,
                default=None,
            )
            if (
                queued is not None
                and queued.creating_ends <= now
                and (revision_step is None or queued.creating_ends <= revision_step[0])
                and (ready_at is None or queued.creating_ends <= ready_at)
            ):
                queued.set_status(RevisionStatus.QUEUED, queued.creating_ends)
                if revision_status_touches:
                    self.touch(queued.creating_ends)
            elif (
                revision_step is not None
                and revision_step[0] <= now
                and (ready_at is None or revision_step[0] <= ready_at)
            ):
                assert build is not None
                self._apply(
                    build,
                    revision_step[1],
                    revision_step[0],
                    touch=revision_status_touches,
                    going_live_touches=going_live_touches,
                )
            elif ready_at is not None and ready_at <= now:
                self.resource.status = DeploymentStatus.READY
                if going_live_touches:
                    self.touch(ready_at)
            else:
                return

    def quiet(self, ready_seconds: float) -> bool:
        """True when time alone cannot change this deployment: no unfinished revision, no pending READY."""
        return self.current_build() is None and self._ready_at(ready_seconds) is None

    def _ready_at(self, ready_seconds: float) -> datetime | None:
        if (
            self.status_pinned
            or self.resource.status is not DeploymentStatus.AWAITING_DATABASE
            or self.active_since is None
        ):
            return None
        return max(self.resource.created_at + timedelta(seconds=ready_seconds), self.active_since)

    def _apply(
        self,
        revision: RevisionRecord,
        status: RevisionStatus,
        at: datetime,
        *,
        touch: bool = True,
        going_live_touches: bool = True,
    ) -> None:
        revision.set_status(status, at)
        if touch or (going_live_touches and status is RevisionStatus.DEPLOYED):
            self.touch(at)
        if status is RevisionStatus.DEPLOYED:
            previous = self.resource.active_revision_id
            if not self.serving_history and previous is not None and self.active_since is not None:
                self.serving_history.append((previous, self.active_since))  # seeded as live: it served until now
            self.serving_history.append((revision.id, at))
            self.resource.active_revision_id = revision.id
            self.active_since = at
        if revision.finished:
            self._start_next(at, touch=touch)

    def _start_next(self, at: datetime, *, touch: bool = True) -> None:
        following = self.current_build()
        if following is not None and following.started_at is None:
            following.start(max(at, following.created_at))
            if touch:
                self.touch(at)

    def add_revision(self, revision: RevisionRecord, now: datetime) -> None:
        """Append a new revision created at ``now``; it starts at once if nothing else is building."""
        if self.pending_failure is not None and _can_fail(revision, self.pending_failure[0]):
            revision.fail_with, revision.fail_message = self.pending_failure
            self.pending_failure = None
        if self.pending_unhealthy:
            revision.unhealthy = True
            self.pending_unhealthy = False
        if self.pending_behaviour is not None:
            revision.behaviour_changes.append((now, self.pending_behaviour))
            self.pending_behaviour = None
        for waiting in [rev for rev in self.revisions if rev.waiting]:
            self._skip(waiting, revision, now)
        idle = self.current_build() is None
        self.revisions.append(revision)
        self.resource.latest_revision_id = revision.id
        self.touch(now)
        if idle:
            revision.start(now)

    def _skip(self, overtaken: RevisionRecord, newer: RevisionRecord, now: datetime) -> None:
        """``overtaken`` waited to be built when ``newer`` was created: it is skipped, and what was set for it to
        happen when it builds or goes live (a failure, an unhealthy mark) passes to ``newer``."""
        overtaken.set_status(RevisionStatus.SKIPPED, now)
        overtaken.status_message = f"Skipped: revision {newer.id} overtook it before it was built"
        if overtaken.fail_with is not None and newer.fail_with is None and _can_fail(newer, overtaken.fail_with):
            newer.fail_with, newer.fail_message = overtaken.fail_with, overtaken.fail_message
        newer.unhealthy = newer.unhealthy or overtaken.unhealthy
        overtaken.fail_with = overtaken.fail_message = None
        overtaken.unhealthy = False

    def interrupt(self, now: datetime, reason: str) -> None:
        """End every unfinished revision ``INTERRUPTED`` at ``now`` (the deployment is going away)."""
        for revision in self.revisions:
            if not revision.finished:
                revision.set_status(RevisionStatus.INTERRUPTED, now)
                revision.status_message = f"Interrupted: {reason}"

    def fail_next_build(self, status: RevisionStatus, message: str | None) -> str | None:
        """Make the next build fail with ``status``; return the revision it applies to, if one exists.

        The next build is the earliest unfinished revision that has not yet passed the point of that
        failure; if there is none, the failure waits for the next revision created.
        """
        too_late = {RevisionStatus.DEPLOYING} if status is RevisionStatus.BUILD_FAILED else set()
        for revision in self.revisions:
            if (
                not revision.finished
                and revision.fail_with is None
                and revision.status not in too_late
                and _can_fail(revision, status)
            ):
                revision.fail_with, revision.fail_message = status, message
                return revision.id
        self.pending_failure = (status, message)
        return None

    def mark_next_unhealthy(self) -> str | None:
        """Make the next revision to go live unhealthy; return its id if it already exists.

        That is the earliest unfinished revision not yet marked; if there is none, the mark waits for
        the next revision created.
        """
        for revision in self.revisions:
            if not revision.finished and not revision.unhealthy:
                revision.unhealthy = True
                return revision.id
        self.pending_unhealthy = True
        return None

    def fail_revision(
        self,
        revision: RevisionRecord,
        status: RevisionStatus,
        message: str | None,
        now: datetime,
        *,
        touch: bool = True,
    ) -> None:
        """End an unfinished ``revision`` with ``status`` at ``now`` (moving the deployment's ``updated_at``
        unless ``touch`` is false)."""
        revision.set_status(status, now, message)
        if touch:
            self.touch(now)
        self._start_next(now, touch=touch)

    @property
    def source(self) -> str:
        """The deployment's source, as a string."""
        source = self.resource.source
        return source.value if isinstance(source, DeploymentSource) else str(source)

    def to_json(self, app_url: str | None = None) -> dict[str, Any]:
        """JSON of the deployment resource as production answers it, secret values in clear (as
        production may echo them): ``source_config.deployment_type`` shown, resource spec rendered (see
        :func:`~airflow_provider.emulator.contract.schema.render_resource_spec`).

        :param app_url: the URL the service gives the app; shown as ``source_config.custom_url`` of
            every source but ``external_docker`` (where the user sets it).
        """
        body: dict[str, Any] = self.resource.model_dump(mode="json", context={"reveal_secrets": True})
        config = body["source_config"]
        config["deployment_type"] = self.deployment_type.value
        if config.get("resource_spec") is not None:
            config["resource_spec"] = render_resource_spec(config["resource_spec"])
        if app_url is not None and self.source != DeploymentSource.EXTERNAL_DOCKER.value:
            config["custom_url"] = app_url
        return body

    def admin_json(self, app_url: str | None = None) -> dict[str, Any]:
        """JSON of the resource plus the emulator-only data and the revisions (admin snapshot).

        :param app_url: as for :meth:`to_json`.
        """
        return {
            **self.to_json(app_url),
            "deployment_type": self.deployment_type.value,
            "tag_value_ids": list(self.tag_value_ids),
            "remote_reconciled": self.remote_reconciled,
            "build_seconds": self.build_seconds,
            "status_pinned": self.status_pinned,
            "pending_failure": self.pending_failure[0].value if self.pending_failure else None,
            "pending_unhealthy": self.pending_unhealthy,
            "pending_behaviour": self.pending_behaviour.model_dump(mode="json") if self.pending_behaviour else None,
            "revisions": [revision.admin_json() for revision in self.revisions],
        }


def _can_fail(revision: RevisionRecord, status: RevisionStatus) -> bool:
    """Whether ``revision`` can be made to fail with ``status`` (a redeploy has no build to fail)."""
    return not (status is RevisionStatus.BUILD_FAILED and revision.skips_build)
