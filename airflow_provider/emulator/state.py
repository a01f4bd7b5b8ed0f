"""The emulator's state: configuration, store, clock, faults and request log (no HTTP code here).

Every public method takes the state lock and first settles every deployment to the clock's current
time, so the service, the admin API and Python tests always see the same, up-to-date state.

Switches (constructor arguments, changeable at run time with :meth:`EmulatorState.update_settings`):

* ``resource_spec_mode``: ``"replace"`` (default, production): a PATCH with a non-null
  ``source_config.resource_spec`` creates a revision and replaces the whole spec (unset ``*_limit`` fields
  default to twice their request; a limit below its request is refused with 422); ``"merge"`` (the older
  reading of the spec): the spec merges field by field and creates no revision.
* ``redeploy_mode``: ``"new_revision"`` (default): ``POST .../redeploy`` creates a revision copying the old
  one; ``"in_place"``: it creates none, the old revision itself is deployed again and becomes active while
  the newer one stays the latest (production does not document which it does).
* ``disabled_endpoints``: names from :data:`OPTIONAL_ENDPOINTS` of production-only endpoints that answer
  as if they did not exist (404; ``get_deployment`` 405, since PATCH shares its path), so client
  fallbacks can be tested. ``optional_endpoints=False`` leaves them all out of the app instead.
* ``unknown_fields``: off (default), or on: the emulator plays a newer service whose answers carry fields the
  provider's models lack, nested ones too, and keeps what a PATCH sends of them (see
  :mod:`airflow_provider.emulator.unknown_fields`).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, ParamSpec, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, SecretStr

from airflow_provider.models import (
    DEFAULT_PAGE_SIZE,
    CreateDeploymentRequest,
    Deployment,
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    OAuthProvider,
    Repository,
    RevisionStatus,
    Secret,
    SecretReference,
    SourceConfig,
    SourceRevisionConfig,
    canonical_uuid,
)

from .behaviour import EPOCH, BehaviourPlan, BehaviourRule, RuleHistory, Timeline, plan_at, plan_timeline
from .clock import Clock
from .contract import PatchBody, PatchInvalid, limits_below_requests, parse_patch, stored_resource_spec
from .faults import ChaosSettings, FaultBook, FaultRule, RequestRecord
from .health import APPS_PREFIX, AppAnswer, UnhealthyRule, app_answer, is_unhealthy
from .merge import known_dump, merge_model
from .metrics import metrics_text
from .records import FAILURE_STATUSES, REDEPLOYABLE, DeploymentRecord, RevisionRecord
from .revision_logs import DEFAULT_LOG_LIMIT, BadCursor, LogOrder, LogType, revision_log
from .revision_logs import page as log_page
from .rules import Current, refusals
from .seed import DataSource, SeedData, load_data
from .tracing import RunStatsQuery, project_id, project_json, project_stats
from .unknown_fields import PatchBodyWithServiceFields, replaced_spec, shown_deployment, shown_revision, stored_dump

DEFAULT_TENANT_ID = "00000000-0000-4000-8000-000000000001"
"""Tenant of seeded deployments that name none, when no ``tenant_id`` is configured."""

StatusName = Literal["AWAITING_DATABASE", "READY", "UNUSED", "AWAITING_DELETE", "UNKNOWN"]
"""The deployment statuses, strictly (the response enum maps an unknown value to UNKNOWN instead)."""

ResourceSpecMode = Literal["replace", "merge"]
"""How a PATCH's ``source_config.resource_spec`` applies (see the module docstring)."""

RedeployMode = Literal["new_revision", "in_place"]
"""Whether ``POST .../redeploy`` creates a revision (see the module docstring)."""

OptionalEndpoint = Literal["get_deployment", "list_revisions", "get_revision", "redeploy", "revision_logs"]
OPTIONAL_ENDPOINTS: tuple[str, ...] = get_args(OptionalEndpoint)
"""Names of the production-only endpoints, for ``disabled_endpoints``: ``GET /v2/deployments/{id}``,
``GET .../revisions``, ``GET .../revisions/{revision_id}``, ``POST .../revisions/{revision_id}/redeploy``,
``GET .../revisions/{revision_id}/logs``."""

P = ParamSpec("P")
R = TypeVar("R")


class EmulatorError(Exception):
    """A request the emulator refuses, with the HTTP status and the ``detail`` to answer.

    :param status_code: HTTP status.
    :param detail: the ``detail`` of the error body: a string, or for 422 a FastAPI-style error list.
    """

    def __init__(self, status_code: int, detail: str | list[dict[str, Any]]) -> None:
        super().__init__(detail if isinstance(detail, str) else f"{len(detail)} validation error(s)")
        self.status_code = status_code
        self.detail = detail


class NotFound(EmulatorError):
    """404: the resource does not exist (or belongs to another tenant)."""

    def __init__(self, detail: str) -> None:
        super().__init__(404, detail)


@dataclass(frozen=True)
class DeploymentFilters:
    """Filters of ``GET /v2/deployments`` (``None``: no filter).

    :param name_contains: case-insensitive substring of the name.
    :param status: exact status.
    :param remote_reconciled: the remote-reconciled flag.
    :param tag_value_ids: any of these tag value ids.
    :param image_version: exact image version.
    :param deployment_type: exact deployment type.
    :param deployment_ids: any of these ids.
    """

    name_contains: str | None = None
    status: DeploymentStatus | None = None
    remote_reconciled: bool | None = None
    tag_value_ids: frozenset[str] | None = None
    image_version: str | None = None
    deployment_type: DeploymentType | None = None
    deployment_ids: frozenset[str] | None = None

    def match(self, record: DeploymentRecord) -> bool:
        """Whether ``record`` passes every filter."""
        resource = record.resource
        checks = (
            self.name_contains is None or self.name_contains.lower() in resource.name.lower(),
            self.status is None or resource.status is self.status,
            self.remote_reconciled is None or record.remote_reconciled is self.remote_reconciled,
            self.tag_value_ids is None or bool(self.tag_value_ids.intersection(record.tag_value_ids)),
            self.image_version is None or resource.image_version == self.image_version,
            self.deployment_type is None or record.deployment_type is self.deployment_type,
            self.deployment_ids is None or resource.id in self.deployment_ids,
        )
        return all(checks)


class EmulatorCreateRequest(CreateDeploymentRequest):
    """``POST /v2/deployments`` body: the provider's create request plus emulator-only settings.

    :param deployment_type: deployment type (default ``dev``).
    :param tag_value_ids: tag value ids.
    :param image_version: image version.
    :param remote_reconciled: remote-reconciled flag.
    :param build_seconds: build duration of this deployment's revisions.
    """

    # Built at once (the provider's models build on first use): FastAPI builds its body adapter around it,
    # and pydantic warns about FastAPI's ``alias`` when the model is still deferred.
    model_config = ConfigDict(defer_build=False)

    deployment_type: DeploymentType = DeploymentType.DEV
    tag_value_ids: list[str] = []
    image_version: str | None = None
    remote_reconciled: bool = False
    build_seconds: float | None = None


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Run ``method`` under the state lock after settling every deployment to now (see ``_settle``)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        state = args[0]
        assert isinstance(state, EmulatorState)
        with state._lock:
            state._settle()
            return method(*args, **kwargs)

    return wrapper


class EmulatorState:
    """Everything the emulator knows; thread-safe; shared by the service app, the admin API and tests.

    :param api_key: the key requests must send in ``X-Api-Key``.
    :param tenant_id: when set, the key is organization-scoped: every service request must name its
        workspace in ``X-Tenant-Id`` (403 otherwise) and sees only that tenant's deployments. It is also
        the tenant of seeded deployments that name none. Without it (a workspace-scoped key) requests
        need no tenant header; one that sends it is scoped to that tenant all the same.
    :param data: seed data: a JSON file path, its parsed content, or ``None`` for the shipped example
        data (250 deployments); ``{}`` for none.
    :param build_seconds: time from a revision's build start to ``DEPLOYED``.
    :param ready_seconds: time from a deployment's creation to ``READY`` (its first revision must be
        deployed too).
    :param optional_endpoints: serve the production-only ``GET /v2/deployments/{id}`` and
        ``GET /v2/deployments/{id}/revisions/{revision_id}`` (when false they answer 405 / 404).
    :param frozen_clock: time moves only through :meth:`advance`.
    :param start_time: start of a frozen clock (default: now).
    :param path_prefix: path prefix of the service endpoints, e.g. ``/api-host`` (self-hosted style).
    :param resource_spec_mode: ``"replace"`` (production, default) or ``"merge"``; see the module docstring.
    :param disabled_endpoints: names from :data:`OPTIONAL_ENDPOINTS` to answer as missing.
    :param redeploy_mode: ``"new_revision"`` (default) or ``"in_place"``; see the module docstring.
    :param revision_status_touches_deployment: whether a revision's status change (building, failed...)
        moves its deployment's ``updated_at`` (default). When false, only what the deployment itself shows
        does (a new latest or active revision, a status): a failed build then leaves the deployment record
        unchanged, which production may do too (it does not document it).
    :param updated_at_on_requests_only: when true, a deployment's ``updated_at`` moves only on a request that
        changes it (a PATCH, a redeploy), never as its revisions build and go live, as a service that stamps
        ``updated_at`` on writes only would (the spec does not say when it moves): the deployment then does not
        tell when its active revision went live (its revision's own ``updated_at`` does).
    :param unknown_fields: play a newer service whose answers carry fields the provider's models lack (see
        :mod:`airflow_provider.emulator.unknown_fields`); default off.
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
        self.resource_spec_mode: ResourceSpecMode = _spec_mode(resource_spec_mode)
        self.disabled_endpoints: frozenset[str] = _endpoint_names(disabled_endpoints)
        self.redeploy_mode: RedeployMode = _redeploy_mode(redeploy_mode)
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

    def _admin_view(self, record: DeploymentRecord) -> dict[str, Any]:
        return self._shown(record.admin_json(self.app_url(record.id)))

    def _shown(self, deployment: dict[str, Any]) -> dict[str, Any]:
        """A deployment's JSON as this service shows it (with the ``unknown_fields`` switch, its fields too)."""
        return shown_deployment(deployment) if self.unknown_fields else deployment

    def _shown_revision(self, revision: dict[str, Any]) -> dict[str, Any]:
        return shown_revision(revision) if self.unknown_fields else revision

    def endpoint_enabled(self, name: str) -> bool:
        """Whether the production-only endpoint ``name`` (see :data:`OPTIONAL_ENDPOINTS`) is served."""
        return self.optional_endpoints and name not in self.disabled_endpoints

    # --------------------------------------------------------------------------- service side
    @_locked
    def list_oauth_providers(self) -> list[dict[str, Any]]:
        """``GET /v2/auth/providers``."""
        return [provider.model_dump(mode="json") for provider in self._oauth_providers]

    @_locked
    def list_repositories(self, integration_id: str) -> list[dict[str, Any]]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        repos = self._integrations.get(canonical_uuid(integration_id))
        if repos is None:
            raise NotFound(f"Integration {integration_id} not found.")
        return [repo.model_dump(mode="json") for repo in repos]

    @_locked
    def list_deployments(
        self,
        filters: DeploymentFilters | None = None,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v2/deployments``: one page, ordered by creation time then id.

        :param filters: filters to apply.
        :param limit: page size.
        :param offset: number of matching deployments to skip.
        :param tenant: only this tenant's deployments (``None``: all).
        """
        filters = filters or DeploymentFilters()
        matching = [
            record
            for record in self._deployments.values()
            if (tenant is None or record.resource.tenant_id == tenant) and filters.match(record)
        ]
        matching.sort(key=lambda record: (record.resource.created_at, record.id))
        page = matching[offset : offset + limit]
        return {"resources": [self._render(record) for record in page], "offset": offset + len(page)}

    @_locked
    def get_deployment(self, deployment_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}``: the deployment resource, secrets in clear."""
        return self._render(self._record(deployment_id, tenant))

    @_locked
    def get_revision(self, deployment_id: str, revision_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}/revisions/{revision_id}``."""
        return self._shown_revision(self._revision(self._record(deployment_id, tenant), revision_id).to_json())

    @_locked
    def list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        statuses: Iterable[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}/revisions``: one page, newest first.

        :param deployment_id: the deployment.
        :param limit: page size.
        :param offset: number of matching revisions to skip.
        :param statuses: only revisions in one of these statuses (``None``: any).
        :param remote_reconciled: only revisions with this flag (the deployment's when they were created).
        :param tenant: only this tenant's deployment (``None``: any).
        """
        record = self._record(deployment_id, tenant)
        wanted = {RevisionStatus(status) for status in statuses} if statuses is not None else None
        matching = [
            revision
            for revision in reversed(record.revisions)
            if (wanted is None or revision.status in wanted)
            and (remote_reconciled is None or revision.remote_reconciled is remote_reconciled)
        ]
        chunk = matching[offset : offset + limit]
        revisions = [self._shown_revision(revision.to_json()) for revision in chunk]
        return {"resources": revisions, "offset": offset + len(chunk)}

    @_locked
    def revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        kind: LogType = "build",
        order: LogOrder = "asc",
        limit: int = DEFAULT_LOG_LIMIT,
        offset: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET .../revisions/{revision_id}/logs``: ``{"logs": [...], "next_offset": cursor | None}``.

        See :mod:`airflow_provider.emulator.revision_logs` for the lines and the entry shape.

        :raises EmulatorError: 422 for an ``offset`` that is not one of this emulator's cursors.
        """
        record = self._record(deployment_id, tenant)
        entries = revision_log(record, self._revision(record, revision_id), kind, self.clock.now())
        try:
            return log_page(entries, order=order, limit=limit, offset=offset)
        except BadCursor as error:
            problem = {"type": "value_error", "loc": ["query", "offset"], "msg": str(error), "input": offset}
            raise EmulatorError(422, [problem]) from None

    @_locked
    def patch_deployment(
        self,
        deployment_id: str,
        patch: PatchBody | BaseModel | Mapping[str, Any],
        *,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``PATCH /v2/deployments/{deployment_id}`` with the production rules; all or nothing.

        ``source_config`` fields merge into the stored ones (a null or missing field keeps its value);
        ``resource_spec`` follows ``resource_spec_mode``; ``secrets`` and ``secret_references``
        replace their lists. A revision is created by a non-null ``source_revision_config`` field,
        non-null ``secrets``, or (``replace`` mode) a non-null ``resource_spec``.

        :param deployment_id: the deployment.
        :param patch: the body: :class:`~airflow_provider.emulator.contract.PatchBody`, the provider's
            request model, or plain JSON.
        :param tenant: the caller's tenant (``None``: any).
        :raises EmulatorError: 404 unknown deployment; 422 schema (see
            :mod:`~airflow_provider.emulator.contract`); 400 rules (see :mod:`~airflow_provider.emulator.rules`).
        """
        record = self._record(deployment_id, tenant)
        try:
            body = parse_patch(patch, PatchBodyWithServiceFields if self.unknown_fields else PatchBody)
        except PatchInvalid as error:
            raise EmulatorError(422, error.errors) from None
        shown = self._render(record)
        current = Current(
            source=record.source,
            source_config=shown["source_config"],
            repo_ref=record.resource.source_revision_config.repo_ref,
            custom_url=shown["source_config"].get("custom_url"),
        )
        problems = refusals(body, current)
        if problems:
            raise EmulatorError(400, "; ".join(problems))
        source_config = self._patched_source_config(record, body)
        spec = body.source_config.resource_spec if body.source_config is not None else None
        creates_revision = (
            body.secrets is not None
            or bool(body.revision_fields())
            or (spec is not None and self.resource_spec_mode == "replace")
        )
        # Everything is checked and built: from here on nothing can fail half-way.
        resource = record.resource
        now = self.clock.now()
        changed = False
        if source_config is not None:
            resource.source_config = source_config
            changed = True
        if body.secret_references is not None:
            resource.secret_references = [SecretReference(**ref.model_dump()) for ref in body.secret_references]
            changed = True
        if body.secrets is not None:
            resource.secrets = [Secret(name=item.name, value=SecretStr(item.value)) for item in body.secrets]
        if creates_revision:
            base = known_dump(resource.source_revision_config)
            base.pop("repo_commit_sha", None)
            revision_config = SourceRevisionConfig.model_validate({**base, **body.revision_fields()})
            self._new_revision(record, revision_config, now, source=body.revision_source or record.source)
            changed = True
        if changed:
            record.touch(now)
        return self._render(record)

    def _patched_source_config(self, record: DeploymentRecord, body: PatchBody) -> SourceConfig | None:
        """The ``source_config`` after ``body`` (``None``: the patch leaves it alone)."""
        patch = body.source_config
        if patch is None:
            return None
        stored = (stored_dump if self.unknown_fields else known_dump)(record.resource.source_config)
        stored.pop("deployment_type", None)  # kept on the record; shown by DeploymentRecord.to_json
        given = patch.model_dump(exclude_none=True, exclude={"resource_spec", "listener_config", "deployment_type"})
        given = {name: str(value) if isinstance(value, uuid.UUID) else value for name, value in given.items()}
        if record.source != DeploymentSource.EXTERNAL_DOCKER.value:
            given.pop("custom_url", None)  # the rules let only the value already shown through: the service's
        stored.update(given)
        if patch.listener_config is not None:
            stored["listener_config"] = {
                **stored.get("listener_config", {}),
                **patch.listener_config.model_dump(exclude_none=True),
            }
        if patch.resource_spec is not None:
            if self.resource_spec_mode == "replace":
                stored["resource_spec"] = stored_resource_spec(patch.resource_spec, default_limits=True)
                if self.unknown_fields:
                    stored["resource_spec"] = replaced_spec(stored["resource_spec"])
            else:
                merged = {**stored.get("resource_spec", {})}
                merged.update(stored_resource_spec(patch.resource_spec, default_limits=False))
                stored["resource_spec"] = merged
            below = limits_below_requests(stored["resource_spec"])
            if below:  # Kubernetes refuses a request above its limit: nothing is applied
                raise EmulatorError(422, below)
        return SourceConfig.model_validate(stored)

    @_locked
    def redeploy_revision(self, deployment_id: str, revision_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST .../revisions/{revision_id}/redeploy``: deploy an earlier build again (a rollback).

        Creates a revision whose ``source_revision_config`` (``repo_commit_sha`` included) and ``source``
        copy the old one's; it skips the build (the build exists) and goes ``AWAITING_DEPLOY`` ->
        ``DEPLOYING`` -> ``DEPLOYED``, queueing behind a revision in progress. An unhealthy mark is copied
        too (same build, same bug). ``source_config`` (``resource_spec`` included) is left as it is.
        Returns the deployment.

        With ``redeploy_mode="in_place"`` no revision is created: the old revision goes through the same
        phases again and becomes the active revision, ``latest_revision_id`` stays where it was, and the
        deployment shows the old revision's config. Asking again while it is being deployed changes
        nothing; while another revision is in progress it is refused (400).

        :raises EmulatorError: 404 unknown deployment or revision; 400 when the revision's build did
            not succeed (only ``DEPLOYED`` and ``DEPLOY_FAILED`` revisions have one) or the deployment
            is being deleted.
        """
        record = self._record(deployment_id, tenant)
        old = self._revision(record, revision_id)
        if self.redeploy_mode == "in_place" and old.deployed_again and not old.finished:
            return self._render(record)  # being deployed again already
        if old.status not in REDEPLOYABLE:
            raise EmulatorError(
                400,
                f"Revision {old.id} cannot be redeployed: its status is {old.status.value}; only a revision "
                f"whose build succeeded ({' or '.join(status.value for status in REDEPLOYABLE)}) can be redeployed.",
            )
        if record.resource.status is DeploymentStatus.AWAITING_DELETE:
            raise EmulatorError(400, f"Deployment ID {record.id} is being deleted.")
        now = self.clock.now()
        if self.redeploy_mode == "in_place":
            self._deploy_again(record, old, now)
        else:
            self._new_revision(record, old.source_revision_config.model_copy(), now, source=old.source, redeploy_of=old)
        return self._render(record)

    def _deploy_again(self, record: DeploymentRecord, old: RevisionRecord, now: datetime) -> None:
        """``redeploy_mode="in_place"``: deploy ``old`` itself again (no new revision)."""
        building = record.current_build()
        if building is not None:
            raise EmulatorError(
                400,
                f"Revision {old.id} cannot be redeployed now: revision {building.id} is in progress "
                f"({building.status.value}).",
            )
        old.deploy_again(now)
        record.resource.source_revision_config = old.source_revision_config.model_copy()
        record.touch(now)

    def _new_revision(
        self,
        record: DeploymentRecord,
        config: SourceRevisionConfig,
        now: datetime,
        *,
        source: str,
        redeploy_of: RevisionRecord | None = None,
    ) -> RevisionRecord:
        revision_id = str(uuid.uuid4())
        resource = record.resource
        if redeploy_of is None and source == DeploymentSource.CODEHOST.value and config.repo_ref:
            seed = f"{resource.source_config.repo_url}@{config.repo_ref}@{revision_id}".encode()
            digest = hashlib.sha1(seed, usedforsecurity=False)  # a fake commit sha
            config = config.model_copy(update={"repo_commit_sha": digest.hexdigest()})
        resource.source_revision_config = config
        revision = RevisionRecord(
            id=revision_id,
            deployment_id=resource.id,
            source_revision_config=config,
            created_at=now,
            build_seconds=record.build_seconds if record.build_seconds is not None else self.build_seconds,
            source=source,
            redeploy_of=redeploy_of.id if redeploy_of is not None else None,
            unhealthy=redeploy_of.unhealthy if redeploy_of is not None else False,
            behaviour_changes=[(now, redeploy_of.behaviour)] if redeploy_of and redeploy_of.behaviour else [],
            remote_reconciled=record.remote_reconciled,
        )
        record.add_revision(revision, now)
        return revision

    @_locked
    def create_deployment(self, request: EmulatorCreateRequest, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /v2/deployments`` (emulator-only contract): create a deployment and its first revision.

        :param request: the creation request.
        :param tenant: owning tenant (default: :attr:`default_tenant_id`).
        :raises EmulatorError: 409 if the tenant already has a deployment with that name.
        """
        tenant_id = tenant or self.default_tenant_id
        resources = [record.resource for record in self._deployments.values()]
        if any(res.name == request.name and res.tenant_id == tenant_id for res in resources):
            raise EmulatorError(409, f"Deployment with name {request.name} already exists.")
        now = self.clock.now()
        source_config = request.source_config
        if request.integration_id is not None:
            source_config = source_config.model_copy(update={"integration_id": request.integration_id})
        resource = Deployment(
            name=request.name,
            source=request.source.value,
            source_config=SourceConfig.model_validate(merge_model(SourceConfig(), source_config)),
            source_revision_config=SourceRevisionConfig.model_validate(
                merge_model(SourceRevisionConfig(), request.source_revision_config)
            ),
            secrets=[secret.model_copy() for secret in request.secrets],
            secret_references=request.secret_references,
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            created_at=now,
            updated_at=now,
            status=DeploymentStatus.AWAITING_DATABASE,
            latest_revision_id=None,
            active_revision_id=None,
            image_version=request.image_version,
        )
        record = DeploymentRecord(
            resource=resource,
            deployment_type=request.deployment_type,
            tag_value_ids=list(request.tag_value_ids),
            remote_reconciled=request.remote_reconciled,
            build_seconds=request.build_seconds,
        )
        self._deployments[record.id] = record
        self._moving.add(record.id)
        self._new_revision(record, resource.source_revision_config, now, source=record.source)
        return self._render(record)

    # ------------------------------------------------------------------------------ admin side
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
            record.deployment_type = DeploymentType(deployment_type)
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

        :param resource_spec_mode: ``"replace"`` or ``"merge"`` (see the module docstring).
        :param disabled_endpoints: the complete set of disabled endpoint names (``[]`` enables all).
        :param redeploy_mode: ``"new_revision"`` or ``"in_place"`` (see the module docstring).
        :param revision_status_touches_deployment: see :class:`EmulatorState`.
        :param updated_at_on_requests_only: see :class:`EmulatorState`.
        :param unknown_fields: see :class:`EmulatorState`.
        :raises EmulatorError: 422 for an unknown mode or endpoint name.
        """
        try:
            mode = _spec_mode(resource_spec_mode) if resource_spec_mode is not None else None
            names = _endpoint_names(disabled_endpoints) if disabled_endpoints is not None else None
            redeploy = _redeploy_mode(redeploy_mode) if redeploy_mode is not None else None
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

    # ------------------------------------------------------------------------------ app health
    @_locked
    def mark_next_revision_unhealthy(self, deployment_id: str) -> str | None:
        """Make the next revision of a deployment to go live unhealthy (its app answers 500).

        Like :meth:`fail_next_build`: the earliest unfinished revision not yet marked, else the next
        revision created. Returns the id of the revision already marked, if any.
        """
        return self._record(deployment_id, None).mark_next_unhealthy()

    @_locked
    def set_revision_health(self, deployment_id: str, revision_id: str, *, healthy: bool = False) -> dict[str, Any]:
        """Mark one revision unhealthy (``healthy=False``) or clear its mark; return its admin view."""
        revision = self._revision(self._record(deployment_id, None), revision_id)
        revision.unhealthy = not healthy
        return self._shown_revision(revision.admin_json())

    def add_unhealthy_rule(self, rule: UnhealthyRule | None = None, /, **fields: Any) -> UnhealthyRule:
        """Make every revision whose ``image_uri`` or ``repo_ref`` matches a glob unhealthy, existing ones
        included (an :class:`~airflow_provider.emulator.health.UnhealthyRule`, or its fields as keywords).

        Example: ``state.add_unhealthy_rule(image_uri="*:broken-*")``.
        """
        rule = rule if rule is not None else UnhealthyRule(**fields)
        if rule.deployment_id is not None:
            rule.deployment_id = canonical_uuid(rule.deployment_id, "deployment_id")
        with self._lock:
            self._unhealthy_rules.append(rule)
        return rule

    def unhealthy_rules(self) -> list[UnhealthyRule]:
        """The unhealthy rules in force."""
        with self._lock:
            return [rule.model_copy() for rule in self._unhealthy_rules]

    def clear_unhealthy_rules(self) -> None:
        """Remove every unhealthy rule (marks on revisions stay)."""
        with self._lock:
            self._unhealthy_rules.clear()

    @_locked
    def app_health(self, deployment_id: str) -> tuple[int, dict[str, Any]]:
        """What the deployment's app answers now: ``(status code, body)``; see
        :mod:`airflow_provider.emulator.health`.

        :raises NotFound: unknown deployment.
        """
        answer = self.app_answer(deployment_id)
        return answer.status_code, answer.body

    @_locked
    def app_answer(self, deployment_id: str) -> AppAnswer:
        """What the deployment's app answers now, and how long it takes (its live behaviour's latency).

        :raises NotFound: unknown deployment.
        """
        return app_answer(self._record(deployment_id, None), self._unhealthy_rules, self._timeline, self.clock.now())

    # ------------------------------------------------------------------------------ app behaviour
    def _timeline(self, revision: RevisionRecord) -> Timeline:
        unhealthy = is_unhealthy(revision, self._unhealthy_rules)
        return plan_timeline(revision, self._rule_history, unhealthy=unhealthy)

    @_locked
    def set_behaviour(
        self, deployment_id: str, plan: BehaviourPlan | None = None, /, *, revision_id: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Set what a revision's app does (see :mod:`airflow_provider.emulator.behaviour`); return
        ``{"revision_id": id | None, "behaviour": plan}``.

        :param deployment_id: the deployment.
        :param plan: the :class:`~airflow_provider.emulator.behaviour.BehaviourPlan` (or its fields as keywords).
        :param revision_id: the revision; ``None``: the latest one; ``"next"``: the next revision created
            (answered with ``revision_id`` null).
        :raises NotFound: unknown deployment or revision, or no revision yet.
        """
        plan = plan if plan is not None else BehaviourPlan(**fields)
        record = self._record(deployment_id, None)
        if revision_id == "next":
            record.pending_behaviour = plan
            return {"revision_id": None, "behaviour": plan.model_dump(mode="json")}
        if revision_id is None:
            if not record.revisions:
                raise NotFound(f"Deployment ID {record.id} has no revision yet.")
            revision = record.revisions[-1]
        else:
            revision = self._revision(record, revision_id)
        revision.behaviour_changes.append((self.clock.now(), plan))
        return {"revision_id": revision.id, "behaviour": plan.model_dump(mode="json")}

    @_locked
    def behaviour(self, deployment_id: str, revision_id: str | None = None) -> BehaviourPlan:
        """The plan a revision follows (its own, a rule's, the default; failing when marked unhealthy).

        :param deployment_id: the deployment.
        :param revision_id: the revision (``None``: the active one).
        :raises NotFound: unknown deployment or revision, or nothing live.
        """
        record = self._record(deployment_id, None)
        chosen = revision_id or record.resource.active_revision_id
        if chosen is None:
            raise NotFound(f"Deployment ID {record.id} has no live revision.")
        return plan_at(self._timeline(self._revision(record, chosen)), self.clock.now())

    def add_behaviour_rule(self, rule: BehaviourRule | None = None, /, **fields: Any) -> BehaviourRule:
        """Give every revision whose ``image_uri`` or ``repo_ref`` matches a glob a plan, existing ones included
        (a :class:`~airflow_provider.emulator.behaviour.BehaviourRule`, or its fields as keywords); a plan set
        for a revision itself wins, and the newest matching rule wins over older ones.

        Example: ``state.add_behaviour_rule(image_uri="*:bad*", error_rate=0.2)``.
        """
        rule = rule if rule is not None else BehaviourRule(**fields)
        if rule.deployment_id is not None:
            rule = rule.model_copy(update={"deployment_id": canonical_uuid(rule.deployment_id, "deployment_id")})
        with self._lock:
            self._rule_history.append((self.clock.now(), (*self._rule_history[-1][1], rule)))
        return rule

    def behaviour_rules(self) -> list[BehaviourRule]:
        """The behaviour rules in force, oldest first."""
        with self._lock:
            return list(self._rule_history[-1][1])

    def clear_behaviour_rules(self) -> None:
        """Remove every behaviour rule from now on (plans set on revisions stay)."""
        with self._lock:
            self._rule_history.append((self.clock.now(), ()))

    # ------------------------------------------------------------------------------ tracing, metrics
    @_locked
    def tracing_projects(
        self, *, name: str | None = None, tenant: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        """``GET /tracing/sessions``: the deployments' tracing projects named ``name`` (any when ``None``)."""
        records = sorted(self._deployments.values(), key=lambda record: (record.resource.created_at, record.id))
        matching = [
            record
            for record in records
            if (name is None or record.resource.name == name)
            and (tenant is None or record.resource.tenant_id == tenant)
        ]
        return [project_json(record) for record in matching[offset : offset + limit]]

    @_locked
    def run_stats(self, query: RunStatsQuery, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /tracing/runs/stats``: statistics of the projects' runs in the query's window.

        :raises NotFound: a project id that is not one of the (tenant's) deployments' projects.
        """
        by_project = {
            project_id(record.id): record
            for record in self._deployments.values()
            if tenant is None or record.resource.tenant_id == tenant
        }
        records = []
        for session in query.session:
            record = by_project.get(str(session))
            if record is None:
                raise NotFound(f"Tracing project {session} not found.")
            records.append(record)
        return project_stats(records, self._timeline, query, self.clock.now())

    @_locked
    def metrics_text(self) -> str:
        """``GET /metrics``: every revision's traffic so far, in the Prometheus text format."""
        return metrics_text(self._deployments.values(), self._timeline, self.clock.now())

    # ------------------------------------------------------------------------------ faults
    def add_fault(self, rule: FaultRule | None = None, /, **fields: Any) -> FaultRule:
        """Add a fault rule (a :class:`FaultRule`, or its fields as keywords) and return it.

        Example: ``state.add_fault(kind="status", status_code=503, method="GET",
        path="/v2/deployments", count=2)``.
        """
        rule = rule if rule is not None else FaultRule(**fields)
        with self._lock:
            return self._faults.add(rule)

    def faults(self) -> list[FaultRule]:
        """The fault rules still active."""
        with self._lock:
            return [rule.model_copy() for rule in self._faults.rules]

    def clear_faults(self) -> None:
        """Remove every fault rule and turn chaos off."""
        with self._lock:
            self._faults.clear()

    def set_chaos(self, chaos: ChaosSettings | None = None, /, **fields: Any) -> ChaosSettings | None:
        """Turn seeded chaos on (a :class:`ChaosSettings` or its fields as keywords), or off if none."""
        settings = chaos if chaos is not None or not fields else ChaosSettings(**fields)
        with self._lock:
            self._faults.set_chaos(settings)
        return settings

    def take_fault(self, method: str, path: str) -> FaultRule | None:
        """Decide the fault for one incoming request (consumes a rule use or a chaos draw)."""
        with self._lock:
            return self._faults.take(method, path)

    # ------------------------------------------------------------------------------ request log
    def count_request(self, route: str) -> None:
        """Count one service request on ``route`` (``METHOD /path/template``)."""
        with self._lock:
            self._counters[route] += 1

    def record_request(self, record: RequestRecord) -> None:
        """Append one answered service request to the log."""
        with self._lock:
            self._log.append(record)

    @property
    def request_log(self) -> list[RequestRecord]:
        """A copy of the request log, oldest first."""
        with self._lock:
            return list(self._log)

    @property
    def counters(self) -> dict[str, int]:
        """Requests per ``METHOD /path/template`` (e.g. ``GET /v2/deployments``), faulted ones included."""
        with self._lock:
            return dict(self._counters)

    def count(self, route: str) -> int:
        """Requests counted on ``route``, e.g. ``count("PATCH /v2/deployments/{deployment_id}")``."""
        with self._lock:
            return self._counters[route]

    def reset_requests(self) -> None:
        """Clear the request log and the counters."""
        with self._lock:
            self._log.clear()
            self._counters.clear()


def _failure(status: RevisionStatus | str) -> RevisionStatus:
    value = RevisionStatus(status) if isinstance(status, str) else status
    if value not in FAILURE_STATUSES:
        raise EmulatorError(422, f"a build can fail with BUILD_FAILED or DEPLOY_FAILED, not {status!r}")
    return value


def _spec_mode(value: str) -> ResourceSpecMode:
    if value == "replace":
        return "replace"
    if value == "merge":
        return "merge"
    raise ValueError(f"resource_spec_mode must be 'replace' or 'merge', got {value!r}")


def _redeploy_mode(value: str) -> RedeployMode:
    if value == "new_revision":
        return "new_revision"
    if value == "in_place":
        return "in_place"
    raise ValueError(f"redeploy_mode must be 'new_revision' or 'in_place', got {value!r}")


def _endpoint_names(names: Iterable[str]) -> frozenset[str]:
    if isinstance(names, str):
        names = [names]
    chosen = frozenset(names)
    unknown = sorted(chosen.difference(OPTIONAL_ENDPOINTS))
    if unknown:
        raise ValueError(f"unknown endpoint names {unknown}; expected some of {list(OPTIONAL_ENDPOINTS)}")
    return chosen
