"""The tracing service's two public endpoints, answered from the emulated apps' traffic.

Each deployment has a tracing project named like it (created with it; its id derives from the deployment
id). Under ``{root}/tracing`` (no service path prefix; OpenAPI tag ``tracing-service``), answering what the
service's own Python client (``langsmith``: ``read_project``, ``list_projects``, ``get_run_stats``, ``info``)
asks:

* ``GET /tracing/sessions?name=<project>&limit=1``: ``[{"id", "name", "tenant_id", "start_time", ...}]``,
  empty when no project has that name (without ``name``: every project, ``offset``/``limit`` paged); also
  ``name_contains`` (case-insensitive), ``id`` (repeatable) and ``include_stats=true`` (each project with its
  run statistics over its whole life: ``run_count``, ``error_rate``, ``latency_p50``, ``feedback_stats``...);
  the other filters the service knows (``reference_free``, ``metadata``...) change nothing here;
* ``GET /tracing/sessions/{id}`` (``include_stats`` too): one project, 404 when there is none;
* ``GET /tracing/info`` (no key needed): ``{"version", "instance_flags", ...}``;
* ``POST /tracing/runs/stats`` with ``{"session": [id, ...], "start_time": iso, "end_time"?: iso,
  "is_root": true, "error"?: bool}``: ``{"run_count", "error_rate", "latency_p50", "latency_p99", ...}`` of
  the requests the projects' deployments served in that window (see :mod:`.behaviour`); rates and latencies
  are ``null`` when there were none. Every emulated request is one root run, so ``is_root`` changes nothing;
  the ``filter``-style arguments and ``group_by`` are not emulated (422 naming them). ``feedback_stats`` maps
  each scored key to ``{"n", "avg", "stdev", "min", "max", "median", "type": "continuous", "errors",
  "values", "contains_thread_feedback"}``.

Auth: the service's ``X-Api-Key`` (401 without it, as the tracing service answers); an ``X-Tenant-Id``
header, when sent, limits the projects to that tenant. These requests are counted, logged and can be
faulted like the service's (``GET /tracing/sessions``, ``POST /tracing/runs/stats``).
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Protocol
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_provider.models import canonical_uuid

from .behaviour import Timeline, TrafficGroup, run_stats, serving_spans, span_traffic

if TYPE_CHECKING:
    from .records import DeploymentRecord, RevisionRecord

TRACING_PREFIX = "/tracing"
TRACING_TAG = "tracing-service"
_PROJECT_NAMESPACE = uuid.UUID("5b0c3a52-1d8e-4d59-9a43-6f1d3c1f7a10")
_NOT_EMULATED = (
    "filter",
    "trace_filter",
    "tree_filter",
    "run_type",
    "trace",
    "parent_run",
    "reference_example",
    "group_by",
)
TRACING_VERSION = "0.0.0-emulator"
"""The version ``GET /tracing/info`` answers."""
_PROJECT_STATS = (
    "run_count",
    "error_rate",
    "latency_p50",
    "latency_p99",
    "first_token_p50",
    "first_token_p99",
    "total_tokens",
    "prompt_tokens",
    "completion_tokens",
    "total_cost",
    "prompt_cost",
    "completion_cost",
    "last_run_start_time",
    "feedback_stats",
    "run_facets",
)


def tracing_base_url(service_url: str) -> str:
    """The tracing base URL of the emulator serving ``service_url`` (its root plus ``/tracing``): the
    ``tracing_base_url`` extra of a connection to it."""
    parts = urlsplit(service_url)
    return f"{parts.scheme}://{parts.netloc}{TRACING_PREFIX}"


def project_id(deployment_id: str) -> str:
    """The id of the tracing project of the deployment ``deployment_id``."""
    return str(uuid.uuid5(_PROJECT_NAMESPACE, deployment_id))


def project_json(record: DeploymentRecord) -> dict[str, Any]:
    """A tracing project (a "session") as the tracing service lists it."""
    resource = record.resource
    return {
        "id": project_id(record.id),
        "name": resource.name,
        "tenant_id": resource.tenant_id,
        "start_time": resource.created_at.isoformat(),
        "end_time": None,
        "description": f"Traces of deployment {resource.name}",
        "reference_dataset_id": None,
        "extra": {"deployment_id": record.id},
    }


def project_stats_fields(stats: dict[str, Any]) -> dict[str, Any]:
    """The run statistics a project listed with ``include_stats`` carries (those of :func:`project_stats`), and
    ``session_feedback_stats`` (``{}``: the emulator scores runs, never whole projects)."""
    return {**{name: stats.get(name) for name in _PROJECT_STATS}, "session_feedback_stats": {}}


class RunStatsQuery(BaseModel):
    """``POST /tracing/runs/stats`` body (other fields the real service knows are accepted and ignored,
    except those that would change the answer: ``filter``, ``trace_filter``, ``tree_filter``,
    ``run_type``, ``trace``, ``parent_run``, ``reference_example``, ``group_by``, answered 422).

    :param session: ids of the projects to count.
    :param start_time: count runs from then (default: since the project exists); naive times are UTC.
    :param end_time: count runs until then (default: now).
    :param is_root: only root runs (every emulated run is one).
    :param error: only failed (``true``) or only successful (``false``) runs.
    """

    model_config = ConfigDict(extra="allow")

    session: list[uuid.UUID] = Field(min_length=1)
    start_time: datetime | None = None
    end_time: datetime | None = None
    is_root: bool | None = None
    error: bool | None = None

    @field_validator("start_time", "end_time")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return value if value is None or value.tzinfo is not None else value.replace(tzinfo=timezone.utc)

    def not_emulated(self) -> list[str]:
        """Names of the given filters the emulator does not apply."""
        extra = self.model_extra or {}
        return [name for name in _NOT_EMULATED if extra.get(name) not in (None, [], "")]


def project_stats(
    records: Iterable[DeploymentRecord],
    timeline_of: Callable[[RevisionRecord], Timeline],
    query: RunStatsQuery,
    now: datetime,
) -> dict[str, Any]:
    """The run statistics of ``records``' traffic in the window of ``query`` (up to ``now``)."""
    until = now if query.end_time is None else min(query.end_time, now)
    groups: list[TrafficGroup] = []
    last_request_at: datetime | None = None
    for record in records:
        since = query.start_time or record.resource.created_at
        for span in serving_spans(record):
            revision = record.revision(span.revision_id)
            if revision is None:
                continue
            served = span_traffic(timeline_of(revision), span, since, until)
            if served:
                groups.extend(served)
                span_end = until if span.end is None else min(span.end, until)
                last_request_at = span_end if last_request_at is None else max(last_request_at, span_end)
    if query.error is True:
        groups = [TrafficGroup(group.errors, group.errors, group.latency_ms) for group in groups]  # scores unknown
    elif query.error is False:
        groups = [TrafficGroup(group.requests - group.errors, 0, group.latency_ms) for group in groups]
    return run_stats(groups, last_request_at)


# ----------------------------------------------------------------------------------------------- routes
_tracing_key = APIKeyHeader(name="X-Api-Key", auto_error=False, description="The API key (the service's).")


class TracingSource(Protocol):
    """What the tracing routes read: the emulator's state
    (:class:`~airflow_provider.emulator.state.EmulatorState`, which answers from :func:`project_json` and
    :func:`project_stats`)."""

    api_key: str

    def tracing_projects(
        self,
        *,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        offset: int = 0,
        name_contains: str | None = None,
        ids: Iterable[str] | None = None,
        include_stats: bool = False,
    ) -> list[dict[str, Any]]:
        """The deployments' tracing projects named ``name`` (any when ``None``), filtered, with statistics."""

    def tracing_project(
        self, session_id: str, *, tenant: str | None = None, include_stats: bool = False
    ) -> dict[str, Any]:
        """One tracing project (raises the state's ``NotFound`` when there is none)."""

    def run_stats(self, query: RunStatsQuery, *, tenant: str | None = None) -> dict[str, Any]:
        """Statistics of the projects' runs in the query's window."""


def _state(request: Request) -> TracingSource:
    state: TracingSource = request.app.state.emulator
    return state


async def tracing_tenant(request: Request, api_key: Annotated[str | None, Depends(_tracing_key)] = None) -> str | None:
    """Check ``X-Api-Key`` (401); return the tenant an ``X-Tenant-Id`` header names, if any."""
    state = _state(request)
    if api_key is None or not hmac.compare_digest(api_key.encode(), state.api_key.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Invalid or missing API key.")
    tenant = request.headers.get("x-tenant-id", "").strip()
    if not tenant:
        return None
    try:
        return canonical_uuid(tenant)
    except ValueError:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "X-Tenant-Id must be a UUID.") from None


Tenant = Annotated[str | None, Depends(tracing_tenant)]

tracing_router = APIRouter(prefix=TRACING_PREFIX, tags=[TRACING_TAG])


@tracing_router.get("/sessions", summary="Tracing projects (one per deployment, named like it)")
async def list_sessions(
    request: Request,
    tenant: Tenant,
    name: Annotated[str | None, Query(description="Exact project name")] = None,
    name_contains: Annotated[str | None, Query(description="Substring of the name (case-insensitive)")] = None,
    id: Annotated[list[uuid.UUID] | None, Query(description="Project ids (repeatable)")] = None,
    include_stats: Annotated[bool, Query(description="Each project with its run statistics")] = False,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JSONResponse:
    projects = _state(request).tracing_projects(
        name=name,
        name_contains=name_contains,
        ids=None if id is None else [str(item) for item in id],
        include_stats=include_stats,
        tenant=tenant,
        limit=limit,
        offset=offset,
    )
    return JSONResponse(projects)


@tracing_router.get("/sessions/{session_id}", summary="One tracing project")
async def get_session(
    request: Request,
    session_id: uuid.UUID,
    tenant: Tenant,
    include_stats: Annotated[bool, Query(description="With its run statistics")] = False,
) -> JSONResponse:
    return JSONResponse(_state(request).tracing_project(str(session_id), tenant=tenant, include_stats=include_stats))


@tracing_router.get("/info", summary="What the tracing service is (its version); no key needed")
async def info() -> JSONResponse:
    return JSONResponse(
        {"version": TRACING_VERSION, "license_expiration_time": None, "batch_ingest_config": None, "instance_flags": {}}
    )


@tracing_router.post("/runs/stats", summary="Run statistics of tracing projects in a time window")
async def runs_stats(request: Request, query: RunStatsQuery, tenant: Tenant) -> JSONResponse:
    unsupported = query.not_emulated()
    if unsupported:
        problems = [
            {
                "type": "value_error",
                "loc": ["body", name],
                "msg": f"the emulator does not apply {name}: ask without it",
                "input": (query.model_extra or {})[name],
            }
            for name in unsupported
        ]
        raise HTTPException(422, problems)
    return JSONResponse(_state(request).run_stats(query, tenant=tenant))
