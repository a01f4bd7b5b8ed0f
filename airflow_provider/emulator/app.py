"""The FastAPI app of the emulator: the service endpoints, the admin API and the fault middleware.

Service endpoints (under the state's ``path_prefix``):

* ``GET /v2/auth/providers``, ``GET /v1/integrations/forge/codehost/{integration_id}/repos``,
  ``GET /v2/deployments``, ``PATCH /v2/deployments/{deployment_id}``: the four endpoints of the spec
  (OpenAPI tag ``service``);
* ``GET /v2/deployments/{deployment_id}`` and ``GET /v2/deployments/{deployment_id}/revisions/{revision_id}``:
  production-only (tag ``production-only``), left out when ``optional_endpoints`` is false;
* ``POST /v2/deployments``: emulator-only contract (tag ``emulator-only``).

Deployments are answered with secret values in clear, as production may: clients must redact them.
"""

from __future__ import annotations

import hmac
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Security, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import ConfigDict

from airflow_provider.models import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Deployment,
    DeploymentListPage,
    DeploymentStatus,
    DeploymentType,
    OAuthProvider,
    PatchDeploymentRequest,
    Repository,
    Revision,
    canonical_uuid,
)

from .admin_api import admin_router
from .middleware import FaultMiddleware, install_log_filter
from .state import DeploymentFilters, EmulatorCreateRequest, EmulatorError, EmulatorState, StatusName

SPEC_TAG = "service"
PRODUCTION_ONLY_TAG = "production-only"
EMULATOR_ONLY_TAG = "emulator-only"


class LenientPatchRequest(PatchDeploymentRequest):
    """``PATCH`` body parsed like production: same fields and types, unknown fields ignored.

    The provider's request model refuses unknown fields and empty patches (client-side safety); the
    service ignores unknown fields, so both checks are switched off here (overriding a pydantic validator
    by name replaces it). Wrong types and repeated secret names are still refused with 422.
    """

    model_config = ConfigDict(extra="ignore")

    def _refuse_unknown_fields(self) -> LenientPatchRequest:  # type: ignore[override]
        return self

    def _not_empty(self) -> LenientPatchRequest:  # type: ignore[override]
        return self


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
    deployment_type: Annotated[DeploymentType | None, Query(description="Deployment type")] = None,
    deployment_ids: Annotated[str | None, Query(description="Comma-separated deployment IDs")] = None,
) -> JSONResponse:
    filters = DeploymentFilters(
        name_contains=name_contains,
        status=DeploymentStatus(status) if status is not None else None,
        remote_reconciled=remote_reconciled,
        tag_value_ids=_comma_list(tag_value_ids, "tag_value_ids"),
        image_version=image_version,
        deployment_type=deployment_type,
        deployment_ids=_comma_list(deployment_ids, "deployment_ids", uuids=True),
    )
    return _json(state.list_deployments(filters, limit=limit, offset=offset, tenant=tenant))


@service_router.patch("/v2/deployments/{deployment_id}", response_model=Deployment, summary="Patch a deployment")
async def patch_deployment(
    deployment_id: uuid.UUID, body: LenientPatchRequest, tenant: Tenant, state: State
) -> JSONResponse:
    return _json(state.patch_deployment(str(deployment_id), body, tenant=tenant))


@optional_router.get("/v2/deployments/{deployment_id}", response_model=Deployment, summary="Get a deployment")
async def get_deployment(deployment_id: uuid.UUID, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.get_deployment(str(deployment_id), tenant=tenant))


@optional_router.get(
    "/v2/deployments/{deployment_id}/revisions/{revision_id}", response_model=Revision, summary="Get a revision"
)
async def get_revision(deployment_id: uuid.UUID, revision_id: uuid.UUID, tenant: Tenant, state: State) -> JSONResponse:
    return _json(state.get_revision(str(deployment_id), str(revision_id), tenant=tenant))


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
    app.include_router(admin_router)
    app.add_exception_handler(EmulatorError, _emulator_error)
    passthrough = frozenset(
        path for path in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url) if path
    )
    app.add_middleware(FaultMiddleware, state=state, router=app.router, passthrough=passthrough)
    install_log_filter()
    return app
