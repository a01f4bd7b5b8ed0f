"""The admin side of the state: what tests and the admin API (``/_emulator``) do to it: move the clock, fail
builds, set statuses and emulator-only options, delete, look at everything (a snapshot), reset, and change
the switches at run time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow_provider.models import DeploymentStatus, DeploymentType, RevisionStatus

from ..behaviour import EPOCH
from ..records import FAILURE_STATUSES, DeploymentRecord
from .errors import EmulatorError, NotFound
from .store import StateStore, _locked
from .switches import (
    RedeployMode,
    ResourceSpecMode,
    checked_endpoint_names,
    checked_redeploy_mode,
    checked_spec_mode,
)


class AdminSide(StateStore):
    """The admin operations, on the state (a part of :class:`~airflow_provider.emulator.state.EmulatorState`)."""

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward by ``seconds`` and return the new time."""
        with self._lock:
            now = self.clock.advance(seconds)
            self._settle()
            return now

    @_locked
    def fail_next_build(
        self, deployment_id: str, status: RevisionStatus | str = RevisionStatus.BUILD_FAILED, message: str | None = None
    ) -> str | None:
        """Make the next build of a deployment fail with ``BUILD_FAILED`` or ``DEPLOY_FAILED``.

        The failure applies to the earliest unfinished revision that has not yet passed that point,
        else to the next revision created. Returns the id of the revision already marked, if any.
        """
        return self._record(deployment_id, None).fail_next_build(_failure(status), message)

    @_locked
    def fail_revision(
        self,
        deployment_id: str,
        revision_id: str,
        status: RevisionStatus | str = RevisionStatus.BUILD_FAILED,
        message: str | None = None,
    ) -> dict[str, Any]:
        """End an unfinished revision now with ``BUILD_FAILED`` or ``DEPLOY_FAILED``; return it.

        :raises EmulatorError: 409 if the revision already finished.
        """
        record = self._record(deployment_id, None)
        revision = self._revision(record, revision_id)
        if revision.finished:
            raise EmulatorError(409, f"Revision {revision.id} already finished with {revision.status.value}.")
        touch = self._revision_status_touches()
        record.fail_revision(revision, _failure(status), message, self.clock.now(), touch=touch)
        return self._shown_revision(revision.to_json())

    @_locked
    def set_status(self, deployment_id: str, status: DeploymentStatus | str) -> dict[str, Any]:
        """Set a deployment's status (e.g. ``AWAITING_DELETE``); it then stays until set again."""
        record = self._record(deployment_id, None)
        allowed = [value.value for value in DeploymentStatus]
        if isinstance(status, str) and status not in allowed:
            raise EmulatorError(422, f"status must be one of {', '.join(allowed)}, got {status!r}")
        record.resource.status = DeploymentStatus(status)
        record.status_pinned = True
        if record.resource.status is DeploymentStatus.AWAITING_DELETE:
            record.interrupt(self.clock.now(), "the deployment is being deleted")
        record.touch(self.clock.now())
        return self._render(record)

    @_locked
    def update_deployment_options(
        self,
        deployment_id: str,
        *,
        build_seconds: float | None = None,
        deployment_type: DeploymentType | str | None = None,
        tag_value_ids: Iterable[str] | None = None,
        remote_reconciled: bool | None = None,
        image_version: str | None = None,
    ) -> dict[str, Any]:
        """Change emulator-side settings of a deployment (``None``: unchanged); return its snapshot."""
        record = self._record(deployment_id, None)
        if build_seconds is not None:
            if build_seconds < 0:
                raise EmulatorError(422, "build_seconds must be >= 0")
            record.build_seconds = build_seconds
        if deployment_type is not None:
            record.deployment_type = self.checked_deployment_type(deployment_type, ["body", "deployment_type"])
        if tag_value_ids is not None:
            record.tag_value_ids = list(tag_value_ids)
        if remote_reconciled is not None:
            record.remote_reconciled = remote_reconciled
        if image_version is not None:
            record.resource.image_version = image_version
            record.touch(self.clock.now())
        return self._admin_view(record)

    @_locked
    def delete_deployment(self, deployment_id: str) -> None:
        """Remove a deployment at once (it then answers 404)."""
        del self._deployments[self._record(deployment_id, None).id]

    @_locked
    def deployment(self, deployment_id: str) -> dict[str, Any]:
        """Admin view of one deployment: resource, emulator-only data and revisions."""
        record = self._record(deployment_id, None)
        return self._admin_view(record)

    @_locked
    def find_deployment(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """Admin view of the deployment named exactly ``name``."""
        for record in self._deployments.values():
            if record.resource.name == name and (tenant is None or record.resource.tenant_id == tenant):
                return self._admin_view(record)
        raise NotFound(f"Deployment named {name} not found.")

    @_locked
    def snapshot(self) -> dict[str, Any]:
        """Everything, as JSON: time, deployments with their revisions, faults, chaos."""
        records = sorted(self._deployments.values(), key=lambda record: (record.resource.created_at, record.id))
        return {
            "now": self.clock.now().isoformat(),
            "deployments": [self._admin_view(record) for record in records],
            "faults": [rule.model_dump(mode="json") for rule in self._faults.rules],
            "chaos": self._faults.chaos.model_dump(mode="json") if self._faults.chaos else None,
            "unhealthy_rules": [rule.model_dump(mode="json") for rule in self._unhealthy_rules],
            "behaviour_rules": [rule.model_dump(mode="json") for rule in self._rule_history[-1][1]],
            "settings": self._settings(),
        }

    def reset(self) -> None:
        """Reload the seed data and clear faults, chaos, unhealthy and behaviour rules, the request log and
        counters (clock and settings kept)."""
        seed = self._load()
        with self._lock:
            self._seed(seed)
            self._unhealthy_rules.clear()
            self._rule_history = [(EPOCH, ())]
            self._faults.clear()
            self._log.clear()
            self._counters.clear()

    def _admin_view(self, record: DeploymentRecord) -> dict[str, Any]:
        return self._shown(record.admin_json(self.app_url(record.id)))

    # ------------------------------------------------------------------------------ settings

    def _settings(self) -> dict[str, Any]:
        return {
            "resource_spec_mode": self.resource_spec_mode,
            "redeploy_mode": self.redeploy_mode,
            "optional_endpoints": self.optional_endpoints,
            "disabled_endpoints": sorted(self.disabled_endpoints),
            "revision_status_touches_deployment": self.revision_status_touches_deployment,
            "updated_at_on_requests_only": self.updated_at_on_requests_only,
            "unknown_fields": self.unknown_fields,
        }

    def settings(self) -> dict[str, Any]:
        """``{"resource_spec_mode", "redeploy_mode", "optional_endpoints", "disabled_endpoints",
        "revision_status_touches_deployment", "updated_at_on_requests_only", "unknown_fields"}``."""
        with self._lock:
            return self._settings()

    def update_settings(
        self,
        *,
        resource_spec_mode: ResourceSpecMode | None = None,
        disabled_endpoints: Iterable[str] | None = None,
        redeploy_mode: RedeployMode | None = None,
        revision_status_touches_deployment: bool | None = None,
        updated_at_on_requests_only: bool | None = None,
        unknown_fields: bool | None = None,
    ) -> dict[str, Any]:
        """Change switches at run time (``None``: unchanged); return the settings.

        :param resource_spec_mode: ``"replace"`` or ``"merge"`` (see :mod:`airflow_provider.emulator.state`).
        :param disabled_endpoints: the complete set of disabled endpoint names (``[]`` enables all).
        :param redeploy_mode: ``"new_revision"`` or ``"in_place"`` (see :mod:`airflow_provider.emulator.state`).
        :param revision_status_touches_deployment: see :class:`EmulatorState`.
        :param updated_at_on_requests_only: see :class:`EmulatorState`.
        :param unknown_fields: see :class:`EmulatorState`.
        :raises EmulatorError: 422 for an unknown mode or endpoint name.
        """
        try:
            mode = checked_spec_mode(resource_spec_mode) if resource_spec_mode is not None else None
            names = checked_endpoint_names(disabled_endpoints) if disabled_endpoints is not None else None
            redeploy = checked_redeploy_mode(redeploy_mode) if redeploy_mode is not None else None
        except ValueError as error:
            raise EmulatorError(422, str(error)) from None
        with self._lock:
            if redeploy is not None:
                self.redeploy_mode = redeploy
            if mode is not None:
                self.resource_spec_mode = mode
            if names is not None:
                self.disabled_endpoints = names
            if revision_status_touches_deployment is not None or updated_at_on_requests_only is not None:
                self._settle()  # what happened so far happened under the old setting
            if revision_status_touches_deployment is not None:
                self.revision_status_touches_deployment = revision_status_touches_deployment
            if updated_at_on_requests_only is not None:
                self.updated_at_on_requests_only = updated_at_on_requests_only
            if unknown_fields is not None:
                self.unknown_fields = unknown_fields
            return self._settings()


def _failure(status: RevisionStatus | str) -> RevisionStatus:
    value = RevisionStatus(status) if isinstance(status, str) else status
    if value not in FAILURE_STATUSES:
        raise EmulatorError(422, f"a build can fail with BUILD_FAILED or DEPLOY_FAILED, not {status!r}")
    return value
