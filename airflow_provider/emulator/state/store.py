"""What every part of the emulator's state stands on: the deployments in memory under one lock, settled to
the clock, the switches, and how a deployment is looked up and shown.

Every public method of the parts (:mod:`.service`, :mod:`.admin`, :mod:`.apps`, :mod:`.request_log`) takes
the state lock and first settles every deployment to the clock's current time (``_locked``), so the
service, the admin API and Python tests always see the same, up-to-date state.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from airflow_provider.models import DeploymentType, OAuthProvider, Repository, canonical_uuid

from ..behaviour import EPOCH, RuleHistory
from ..clock import Clock
from ..faults import FaultBook, RequestRecord
from ..health import APPS_PREFIX, UnhealthyRule
from ..records import SERVICE_DEPLOYMENT_TYPES, DeploymentRecord, RevisionRecord
from ..seed import DataSource, SeedData, load_data
from ..unknown_fields import DEPLOYMENT_TYPES as NEWER_DEPLOYMENT_TYPES
from ..unknown_fields import shown_deployment, shown_revision
from .errors import EmulatorError, NotFound
from .switches import (
    RedeployMode,
    ResourceSpecMode,
    checked_endpoint_names,
    checked_redeploy_mode,
    checked_spec_mode,
)

DEFAULT_TENANT_ID = "00000000-0000-4000-8000-000000000001"
"""Tenant of seeded deployments that name none, when no ``tenant_id`` is configured."""

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Run ``method`` under the state lock after settling every deployment to now (see ``_settle``)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        state = args[0]
        assert isinstance(state, StateStore)
        with state._lock:
            state._settle()
            return method(*args, **kwargs)

    return wrapper


class StateStore:
    """The store, clock, switches, rules, faults and request log of
    :class:`~airflow_provider.emulator.state.EmulatorState` (which documents the arguments), and what every
    part of it shares: settling to the clock, the lookups and how a deployment is shown.
    """

    def __init__(
        self,
        *,
        api_key: str,
        tenant_id: str | None = None,
        data: DataSource | None = None,
        build_seconds: float = 30.0,
        ready_seconds: float = 10.0,
        optional_endpoints: bool = True,
        frozen_clock: bool = False,
        start_time: datetime | None = None,
        path_prefix: str = "",
        resource_spec_mode: ResourceSpecMode = "replace",
        disabled_endpoints: Iterable[str] = (),
        redeploy_mode: RedeployMode = "new_revision",
        revision_status_touches_deployment: bool = True,
        updated_at_on_requests_only: bool = False,
        unknown_fields: bool = False,
    ) -> None:
        if not api_key:
            raise ValueError("api_key must not be empty")
        if build_seconds < 0 or ready_seconds < 0:
            raise ValueError("build_seconds and ready_seconds must be >= 0")
        if path_prefix and (not path_prefix.startswith("/") or path_prefix.endswith("/")):
            raise ValueError(f"path_prefix must start with '/' and not end with it, got {path_prefix!r}")
        self.api_key = api_key
        self.tenant_id = canonical_uuid(tenant_id, "tenant_id") if tenant_id is not None else None
        self.build_seconds = build_seconds
        self.ready_seconds = ready_seconds
        self.optional_endpoints = optional_endpoints
        self.path_prefix = path_prefix
        self.clock = Clock(frozen=frozen_clock, start=start_time)
        self.resource_spec_mode: ResourceSpecMode = checked_spec_mode(resource_spec_mode)
        self.disabled_endpoints: frozenset[str] = checked_endpoint_names(disabled_endpoints)
        self.redeploy_mode: RedeployMode = checked_redeploy_mode(redeploy_mode)
        self.revision_status_touches_deployment = bool(revision_status_touches_deployment)
        self.updated_at_on_requests_only = bool(updated_at_on_requests_only)
        self.unknown_fields = bool(unknown_fields)
        self.public_url: str | None = None
        """Root URL the emulator is served at (set by the server); apps' URLs derive from it."""
        self._unhealthy_rules: list[UnhealthyRule] = []
        self._rule_history: RuleHistory = [(EPOCH, ())]
        self._data_source = data
        self._lock = threading.RLock()
        self._faults = FaultBook()
        self._log: list[RequestRecord] = []
        self._counters: Counter[str] = Counter()
        self._seed(self._load())

    @property
    def default_tenant_id(self) -> str:
        """Tenant of seeded deployments that name none, and of creations without a tenant header."""
        return self.tenant_id or DEFAULT_TENANT_ID

    def _load(self) -> SeedData:
        now = self.clock.now()
        return load_data(
            self._data_source, default_tenant_id=self.default_tenant_id, now=now, build_seconds=self.build_seconds
        )

    def _seed(self, seed: SeedData) -> None:
        self._oauth_providers: list[OAuthProvider] = seed.oauth_providers
        self._integrations: dict[str, list[Repository]] = seed.integrations
        self._deployments: dict[str, DeploymentRecord] = {record.id: record for record in seed.deployments}
        self._moving: set[str] = set(self._deployments)
        """Ids of the deployments that may still change with time alone (see ``_settle``)."""

    def _settle(self) -> None:
        """Apply every transition due by now.

        Only deployments in ``_moving`` are visited: a deployment with no unfinished revision and no
        pending READY is quiet, and time alone cannot change it; only a request can, and every request
        that reaches a deployment goes through ``_record`` (or creates it), which puts it back in
        ``_moving``. So a request costs the same with 10 or 10 000 deployments at rest, and the result
        is the one of settling all of them.
        """
        now = self.clock.now()
        for deployment_id in list(self._moving):
            record = self._deployments.get(deployment_id)
            if record is not None:
                record.settle(
                    now,
                    self.ready_seconds,
                    revision_status_touches=self._revision_status_touches(),
                    going_live_touches=not self.updated_at_on_requests_only,
                )
            if record is None or record.quiet(self.ready_seconds):
                self._moving.discard(deployment_id)

    def _revision_status_touches(self) -> bool:
        return self.revision_status_touches_deployment and not self.updated_at_on_requests_only

    def now(self) -> datetime:
        """The emulated time."""
        return self.clock.now()

    # ---------------------------------------------------------------------------------- lookups
    def _record(self, deployment_id: str, tenant: str | None) -> DeploymentRecord:
        try:
            key = canonical_uuid(deployment_id)
        except ValueError:
            key = deployment_id
        record = self._deployments.get(key)
        if record is None or (tenant is not None and record.resource.tenant_id != tenant):
            raise NotFound(f"Deployment ID {deployment_id} not found.")
        self._moving.add(record.id)  # the caller may change it: the next settle looks at it again
        return record

    def _revision(self, record: DeploymentRecord, revision_id: str) -> RevisionRecord:
        try:
            key = canonical_uuid(revision_id)
        except ValueError:
            key = revision_id
        revision = record.revision(key)
        if revision is None:
            raise NotFound(f"Revision ID {revision_id} not found.")
        return revision

    def app_url(self, deployment_id: str) -> str | None:
        """URL of a deployment's emulated app (``None`` until the server sets :attr:`public_url`)."""
        return f"{self.public_url}{APPS_PREFIX}/{deployment_id}" if self.public_url else None

    def _render(self, record: DeploymentRecord) -> dict[str, Any]:
        return self._shown(record.to_json(self.app_url(record.id)))

    def _shown(self, deployment: dict[str, Any]) -> dict[str, Any]:
        """A deployment's JSON as this service shows it (with the ``unknown_fields`` switch, its fields too)."""
        return shown_deployment(deployment) if self.unknown_fields else deployment

    def _shown_revision(self, revision: dict[str, Any]) -> dict[str, Any]:
        return shown_revision(revision) if self.unknown_fields else revision

    def checked_deployment_type(self, value: str, loc: list[str]) -> DeploymentType:
        """``value`` as a deployment type this service knows (:data:`SERVICE_DEPLOYMENT_TYPES`, with the
        ``unknown_fields`` switch also :data:`~airflow_provider.emulator.unknown_fields.DEPLOYMENT_TYPES`), or a
        FastAPI-style 422 located at ``loc`` naming the accepted ones."""
        known = SERVICE_DEPLOYMENT_TYPES + (NEWER_DEPLOYMENT_TYPES if self.unknown_fields else ())
        if value not in known:
            accepted = ", ".join(repr(name) for name in known)
            problem = {"type": "enum", "loc": loc, "msg": f"Input should be one of {accepted}", "input": value}
            raise EmulatorError(422, [problem])
        return DeploymentType(value)

    def endpoint_enabled(self, name: str) -> bool:
        """Whether the production-only endpoint ``name`` (see :data:`OPTIONAL_ENDPOINTS`) is served."""
        return self.optional_endpoints and name not in self.disabled_endpoints
