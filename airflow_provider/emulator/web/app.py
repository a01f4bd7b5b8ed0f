"""The FastAPI app of the emulator: the service endpoints, the admin API and the fault middleware.

Service endpoints (under the state's ``path_prefix``):

* ``GET /v2/auth/providers``, ``GET /v1/integrations/forge/codehost/{integration_id}/repos``,
  ``GET /v2/deployments``, ``PATCH /v2/deployments/{deployment_id}``: the four endpoints of the spec
  (OpenAPI tag ``service``);
* production-only (tag ``production-only``), left out when ``optional_endpoints`` is false, each
  switchable off by name at run time (``disabled_endpoints``: then 404, or 405 for ``get_deployment``):

  - ``get_deployment``: ``GET /v2/deployments/{deployment_id}``;
  - ``list_revisions``: ``GET /v2/deployments/{deployment_id}/revisions`` (``limit`` 1..100, default 20;
    ``offset``; ``status`` comma-separated revision statuses; ``remote_reconciled``), newest first,
    ``{"resources": [...], "offset": N}``;
  - ``get_revision``: ``GET /v2/deployments/{deployment_id}/revisions/{revision_id}``;
  - ``redeploy``: ``POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy`` (200
    Deployment; 400 when the revision's build did not succeed);
  - ``revision_logs``: ``GET /v2/deployments/{deployment_id}/revisions/{revision_id}/logs``
    (``type`` build|deploy, ``order`` asc|desc, ``limit`` 1..1000 default 50, ``offset`` cursor) ->
    ``{"logs": [{"id", "timestamp", "level", "message"}], "next_offset": cursor | null}``;
  - ``build_logs``: ``POST /v1/projects/{deployment_id}/revisions/{revision_id}/build_logs`` and
    ``deploy_logs``: ``POST /v1/projects/{deployment_id}[/revisions/{revision_id}]/deploy_logs`` (the older
    routes the service's command-line client reads), JSON body ``{order, limit, offset, level, query,
    start_time, end_time}`` (all optional), the same answer;
* ``POST /v2/deployments``: emulator-only contract (tag ``emulator-only``);
* ``GET /apps/{deployment_id}[/any/path]`` (no prefix, no key; tag ``emulated-apps``): the deployment's
  app, 200 healthy / 500 unhealthy / 503 nothing live (see :mod:`airflow_provider.emulator.health`);
* ``GET /tracing/sessions``, ``POST /tracing/runs/stats`` (no prefix, the service's key; tag
  ``tracing-service``): the tracing service's endpoints (see :mod:`airflow_provider.emulator.tracing`);
* ``GET /metrics`` (no prefix, no key; tag ``emulated-metrics``): the apps' traffic in the Prometheus text
  format (see :mod:`airflow_provider.emulator.metrics`).

PATCH follows the production contract: 422 schema errors (:mod:`airflow_provider.emulator.contract.schema`),
400 rule refusals (:mod:`airflow_provider.emulator.contract.rules`), nothing applied when refused.
Deployments are answered with secret values in clear, as production may: clients must redact them.
"""

from __future__ import annotations

import asyncio
import hmac
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Security, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, Field

from airflow_provider.models import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Deployment,
    DeploymentListPage,
    DeploymentStatus,
    OAuthProvider,
    Repository,
    Revision,
    RevisionStatus,
    canonical_uuid,
)

from ..contract.schema import PatchBody
from ..health import APPS_PREFIX
from ..metrics import METRICS_PATH, metrics_router
from ..records import SERVICE_DEPLOYMENT_TYPES
from ..revision_logs import DEFAULT_LOG_LIMIT, MAX_LOG_LIMIT, LogFilter, LogOrder, LogType
from ..state import (
    DeploymentFilters,
    EmulatorCreateRequest,
    EmulatorError,
    EmulatorState,
    NotFound,
    OptionalEndpoint,
    StatusName,
)
from ..tracing import tracing_router
from .admin_api import admin_router
from .middleware import FaultMiddleware, install_log_filter

SPEC_TAG = "service"
PRODUCTION_ONLY_TAG = "production-only"
EMULATOR_ONLY_TAG = "emulator-only"
APPS_TAG = "emulated-apps"


_api_key_header = APIKeyHeader(name="X-Api-Key", auto_error=False, description="The service API key.")


async def get_state(request: Request) -> EmulatorState:
    """The emulator state of the app serving ``request``."""
    state: EmulatorState = request.app.state.emulator
    return state


async def authenticate(
    request: Request,
    state: Annotated[EmulatorState, Depends(get_state)],
    api_key: Annotated[str | None, Security(_api_key_header)] = None,
) -> str | None:
    """Check ``X-Api-Key`` (401) and ``X-Tenant-Id`` (403 when required); return the tenant, if any."""
    if api_key is None or not hmac.compare_digest(api_key.encode(), state.api_key.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Invalid or missing API key.")
    tenant = request.headers.get("x-tenant-id", "").strip()
    if not tenant:
        if state.tenant_id is not None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "requires workspace specification")
        return None
    try:
        return canonical_uuid(tenant)
    except ValueError:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "X-Tenant-Id must be a UUID.") from None


State = Annotated[EmulatorState, Depends(get_state)]
Tenant = Annotated[str | None, Depends(authenticate)]

service_router = APIRouter(tags=[SPEC_TAG])
optional_router = APIRouter(tags=[PRODUCTION_ONLY_TAG])
emulator_router = APIRouter(tags=[EMULATOR_ONLY_TAG])
apps_router = APIRouter(prefix=APPS_PREFIX, tags=[APPS_TAG])


def switch(name: OptionalEndpoint, *, path_has_other_methods: bool = False) -> Any:
    """A dependency that answers like a missing route when the endpoint ``name`` is switched off.

    :param name: the endpoint's name (see ``OPTIONAL_ENDPOINTS``).
    :param path_has_other_methods: answer 405 (another method serves the path) instead of 404.
    """

    async def check(request: Request) -> None:
        state: EmulatorState = request.app.state.emulator
        if not state.endpoint_enabled(name):
            if path_has_other_methods:
                raise HTTPException(status.HTTP_405_METHOD_NOT_ALLOWED, "Method Not Allowed", {"Allow": "PATCH"})
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")

    return Depends(check)


class RevisionListPage(BaseModel):
    """One page of ``GET /v2/deployments/{deployment_id}/revisions``."""

    resources: list[Revision]
    offset: int


class LogEntryModel(BaseModel):
    """One log line (``id``: stable, the same line always has the same one)."""

    id: str
    timestamp: str
    level: str
    message: str


class LogPage(BaseModel):
    """One page of a revision's log; ``next_offset`` is ``null`` when no more lines exist yet."""

    logs: list[LogEntryModel]
    next_offset: str | None


def _json(content: Any, status_code: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status_code)


def _comma_list(value: str | None, field: str, *, uuids: bool = False) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not uuids:
        return frozenset(items)
    parsed = []
    for item in items:
        try:
            parsed.append(canonical_uuid(item))
        except ValueError:
            message = f"Input should be comma-separated UUIDs, got {item!r}"
            error = {"type": "uuid_parsing", "loc": ("query", field), "msg": message, "input": value}
            raise RequestValidationError([error]) from None
    return frozenset(parsed)


@service_router.get("/v2/auth/providers", response_model=list[OAuthProvider], summary="List OAuth providers")
async def list_oauth_providers(tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.list_oauth_providers())


@service_router.get(
    "/v1/integrations/forge/codehost/{integration_id}/repos",
    response_model=list[Repository],
    summary="List source-host repositories for an integration",
)
async def list_repositories(integration_id: uuid.UUID, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.list_repositories(str(integration_id)))


@service_router.get("/v2/deployments", response_model=DeploymentListPage, summary="List deployments")
async def list_deployments(
    tenant: Tenant,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Maximum number of resources to return")] = (
        DEFAULT_PAGE_SIZE
    ),
    offset: Annotated[int, Query(ge=0, description="Pass the offset of a response to get the next page")] = 0,
    name_contains: Annotated[str | None, Query(description="Substring of the name (case-insensitive)")] = None,
    status: Annotated[StatusName | None, Query(description="Deployment status")] = None,
    remote_reconciled: Annotated[bool | None, Query(description="Remote-reconciled deployments")] = None,
    tag_value_ids: Annotated[str | None, Query(description="Comma-separated tag value IDs (any)")] = None,
    image_version: Annotated[str | None, Query(description="Image version")] = None,
    deployment_type: Annotated[
        str | None, Query(description=f"Deployment type: {', '.join(SERVICE_DEPLOYMENT_TYPES)} (more: unknown_fields)")
    ] = None,
    deployment_ids: Annotated[str | None, Query(description="Comma-separated deployment IDs")] = None,
) -> JSONResponse:
    filters = DeploymentFilters(
        name_contains=name_contains,
        status=DeploymentStatus(status) if status is not None else None,
        remote_reconciled=remote_reconciled,
        tag_value_ids=_comma_list(tag_value_ids, "tag_value_ids"),
        image_version=image_version,
        deployment_type=(
            None
            if deployment_type is None
            else state.checked_deployment_type(deployment_type, ["query", "deployment_type"])
        ),
        deployment_ids=_comma_list(deployment_ids, "deployment_ids", uuids=True),
    )
    return _json(state.list_deployments(filters, limit=limit, offset=offset, tenant=tenant))


@service_router.patch("/v2/deployments/{deployment_id}", response_model=Deployment, summary="Patch a deployment")
async def patch_deployment(
    deployment_id: uuid.UUID, body: PatchBody, request: Request, tenant: Tenant, state: State
) -> JSONResponse:
    # The body as sent (already read and checked against PatchBody) when the emulator plays a newer service
    # whose schema has fields PatchBody ignores (see airflow_provider.emulator.unknown_fields).
    sent = await request.json() if state.unknown_fields else body
    return _json(state.patch_deployment(str(deployment_id), sent, tenant=tenant))


@optional_router.get(
    "/v2/deployments/{deployment_id}",
    response_model=Deployment,
    summary="Get a deployment",
    dependencies=[switch("get_deployment", path_has_other_methods=True)],
)
async def get_deployment(deployment_id: uuid.UUID, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.get_deployment(str(deployment_id), tenant=tenant))


@optional_router.get(
    "/v2/deployments/{deployment_id}/revisions",
    response_model=RevisionListPage,
    summary="List a deployment's revisions, newest first",
    dependencies=[switch("list_revisions")],
)
async def list_revisions(
    deployment_id: uuid.UUID,
    tenant: Tenant,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Maximum number of revisions to return")] = (
        DEFAULT_PAGE_SIZE
    ),
    offset: Annotated[int, Query(ge=0, description="Pass the offset of a response to get the next page")] = 0,
    status: Annotated[str | None, Query(description="Comma-separated revision statuses (any)")] = None,
    remote_reconciled: Annotated[bool | None, Query(description="Remote-reconciled revisions")] = None,
) -> JSONResponse:
    statuses = _statuses(status)
    page = state.list_revisions(
        str(deployment_id),
        limit=limit,
        offset=offset,
        statuses=statuses,
        remote_reconciled=remote_reconciled,
        tenant=tenant,
    )
    return _json(page)


def _statuses(value: str | None) -> frozenset[RevisionStatus] | None:
    names = _comma_list(value, "status")
    if names is None:
        return None
    known = {item.value for item in RevisionStatus}
    unknown = sorted(names - known)
    if unknown:
        message = f"Input should be comma-separated revision statuses ({', '.join(sorted(known))})"
        error = {"type": "enum", "loc": ("query", "status"), "msg": message, "input": value}
        raise RequestValidationError([error])
    return frozenset(RevisionStatus(name) for name in names)


@optional_router.get(
    "/v2/deployments/{deployment_id}/revisions/{revision_id}",
    response_model=Revision,
    summary="Get a revision",
    dependencies=[switch("get_revision")],
)
async def get_revision(deployment_id: uuid.UUID, revision_id: uuid.UUID, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.get_revision(str(deployment_id), str(revision_id), tenant=tenant))


@optional_router.post(
    "/v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy",
    response_model=Deployment,
    summary="Redeploy an earlier revision (same build): a rollback",
    dependencies=[switch("redeploy")],
)
async def redeploy_revision(
    deployment_id: uuid.UUID, revision_id: uuid.UUID, tenant: Tenant, state: State
) -> JSONResponse:
    return _json(state.redeploy_revision(str(deployment_id), str(revision_id), tenant=tenant))


@optional_router.get(
    "/v2/deployments/{deployment_id}/revisions/{revision_id}/logs",
    response_model=LogPage,
    summary="Build or deploy log lines of a revision",
    dependencies=[switch("revision_logs")],
)
async def revision_logs(
    deployment_id: uuid.UUID,
    revision_id: uuid.UUID,
    tenant: Tenant,
    state: State,
    type: Annotated[LogType, Query(description="build or deploy")] = "build",
    order: Annotated[LogOrder, Query(description="asc (oldest first) or desc")] = "asc",
    limit: Annotated[int, Query(ge=1, le=MAX_LOG_LIMIT, description="Maximum number of lines")] = DEFAULT_LOG_LIMIT,
    offset: Annotated[str | None, Query(description="Opaque cursor: next_offset of the previous page")] = None,
) -> JSONResponse:
    logs = state.revision_logs(
        str(deployment_id), str(revision_id), kind=type, order=order, limit=limit, offset=offset, tenant=tenant
    )
    return _json(logs)


class LogRequest(BaseModel):
    """Body of the older log routes (``POST /v1/projects/...``), every field optional; other fields are ignored.

    :param order: ``asc`` (oldest first) or ``desc``.
    :param limit: most lines, 1..1000.
    :param offset: opaque cursor: ``next_offset`` of the previous page.
    :param level: only lines of this level.
    :param query: only lines containing this text.
    :param start_time: only lines written at or after this time (naive: UTC).
    :param end_time: only lines written at or before this time (naive: UTC).
    """

    order: LogOrder = "asc"
    limit: int = Field(default=DEFAULT_LOG_LIMIT, ge=1, le=MAX_LOG_LIMIT)
    offset: str | None = None
    level: str | None = None
    query: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    def log_filter(self) -> LogFilter:
        """The filters of this request."""
        return LogFilter(self.level, self.query, _utc(self.start_time), _utc(self.end_time))


def _utc(value: datetime | None) -> datetime | None:
    return value if value is None or value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


async def _older_log_page(
    state: EmulatorState,
    deployment_id: uuid.UUID,
    revision_id: uuid.UUID | None,
    kind: LogType,
    body: LogRequest | None,
    tenant: str | None,
) -> JSONResponse:
    body = body or LogRequest()
    logs = state.revision_logs(
        str(deployment_id),
        None if revision_id is None else str(revision_id),
        kind=kind,
        order=body.order,
        limit=body.limit,
        offset=body.offset,
        filters=body.log_filter(),
        offset_in="body",
        tenant=tenant,
    )
    return _json(logs)


@optional_router.post(
    "/v1/projects/{deployment_id}/revisions/{revision_id}/build_logs",
    response_model=LogPage,
    summary="Build log lines of a revision (the route the service's command-line client reads)",
    dependencies=[switch("build_logs")],
)
async def older_build_logs(
    deployment_id: uuid.UUID, revision_id: uuid.UUID, tenant: Tenant, state: State, body: LogRequest | None = None
) -> JSONResponse:
    return await _older_log_page(state, deployment_id, revision_id, "build", body, tenant)


@optional_router.post(
    "/v1/projects/{deployment_id}/revisions/{revision_id}/deploy_logs",
    response_model=LogPage,
    summary="Deploy log lines of a revision (the route the service's command-line client reads)",
    dependencies=[switch("deploy_logs")],
)
async def older_revision_deploy_logs(
    deployment_id: uuid.UUID, revision_id: uuid.UUID, tenant: Tenant, state: State, body: LogRequest | None = None
) -> JSONResponse:
    return await _older_log_page(state, deployment_id, revision_id, "deploy", body, tenant)


@optional_router.post(
    "/v1/projects/{deployment_id}/deploy_logs",
    response_model=LogPage,
    summary="Deploy log lines of every revision of a deployment, oldest first",
    dependencies=[switch("deploy_logs")],
)
async def older_deploy_logs(
    deployment_id: uuid.UUID, tenant: Tenant, state: State, body: LogRequest | None = None
) -> JSONResponse:
    return await _older_log_page(state, deployment_id, None, "deploy", body, tenant)


@apps_router.get("/{deployment_id}", summary="The deployment's emulated app: its health")
async def app_root(deployment_id: str, state: State) -> JSONResponse:
    return await _app(deployment_id, state)


@apps_router.get("/{deployment_id}/{path:path}", summary="Any path of the deployment's emulated app: its health")
async def app_path(deployment_id: str, path: str, state: State) -> JSONResponse:
    return await _app(deployment_id, state)


async def _app(deployment_id: str, state: EmulatorState) -> JSONResponse:
    try:
        answer = state.app_answer(deployment_id)
    except NotFound:
        return _json({"status": "not_found", "detail": f"No app for deployment {deployment_id}."}, 404)
    if answer.latency_seconds > 0:
        await asyncio.sleep(answer.latency_seconds)
    return _json(answer.body, answer.status_code)


@emulator_router.post(
    "/v2/deployments", response_model=Deployment, status_code=201, summary="Create a deployment (emulator contract)"
)
async def create_deployment(body: EmulatorCreateRequest, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.create_deployment(body, tenant=tenant), status_code=201)


async def _emulator_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EmulatorError)
    return _json({"detail": exc.detail}, status_code=exc.status_code)


def create_app(state: EmulatorState) -> FastAPI:
    """Build the emulator app serving ``state``.

    :param state: the state to serve (its ``path_prefix`` and ``optional_endpoints`` shape the routes).
    """
    app = FastAPI(
        title="Deployment Management Service emulator",
        description=__doc__,
        version="1",
    )
    app.state.emulator = state
    app.include_router(service_router, prefix=state.path_prefix)
    if state.optional_endpoints:
        app.include_router(optional_router, prefix=state.path_prefix)
    app.include_router(emulator_router, prefix=state.path_prefix)
    app.include_router(apps_router)
    app.include_router(tracing_router)
    app.include_router(metrics_router)
    app.include_router(admin_router)
    app.add_exception_handler(EmulatorError, _emulator_error)
    passthrough = frozenset(
        path
        for path in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url, METRICS_PATH)
        if path
    )
    app.add_middleware(FaultMiddleware, state=state, router=app.router, passthrough=passthrough)
    install_log_filter()
    return app
