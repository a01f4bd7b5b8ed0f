"""The Rollouts view's FastAPI app, mounted by the API server at ``/deployment-service``.

Pages (plain HTML, JavaScript and CSS from ``static/``, no build step), shown by the Airflow UI in an
iframe: ``deployments`` (the nav entry), ``deployments/<id>`` and ``fleet`` (the task-instance tab). Their
data comes from the JSON endpoints under ``api/``. Every route, pages and assets included, needs an
authenticated Airflow user (:mod:`~airflow_provider.plugins.rollouts.access`); the JSON endpoints also
check read access to the connection or the DAG they show.

Every endpoint is ``async``: the pages are served from memory, and whatever blocks in a JSON request (the
metadata database, the auth manager, the service) runs in the view's own threads
(:mod:`~airflow_provider.plugins.rollouts.workers`), never in the thread pool the API server shares with
Airflow's own REST API.
"""

from __future__ import annotations

import functools
import html
import math
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import quote, urlencode

import pydantic
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from fastapi import FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow_provider.client import describe_validation_error
from airflow_provider.decisions import dora
from airflow_provider.defaults import DEFAULT_CONN_ID
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import Deployment, ListDeploymentsQuery, canonical_uuid
from airflow_provider.plugins.rollouts import aborts, access, actions, credits, guards, history, metadata, shapes
from airflow_provider.plugins.rollouts.access import UserDep
from airflow_provider.plugins.rollouts.listing import MAX_DEPLOYMENTS, ServiceReader, StillFetching, list_query
from airflow_provider.plugins.rollouts.paths import airflow_root_path
from airflow_provider.plugins.rollouts.posts import check_json_post
from airflow_provider.plugins.rollouts.workers import AnswerTooSlow, ViewBusy, ViewWorkers

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from sqlalchemy.orm import Session

    from airflow_provider.plugins.rollouts.metadata import EventRecord, FleetTouch

T = TypeVar("T")

STATIC = resources.files("airflow_provider.plugins.rollouts") / "static"
SCRIPTS = ("widgets.js", "charts.js", "list.js", "deployment.js", "fleet.js", "rollouts.js")
"""The pages' scripts, in the order ``page.html`` loads them: plain scripts sharing one scope, each using what the
ones before it define (the shared widgets, the charts, one script per page, then the start)."""
ASSETS = {
    **dict.fromkeys(SCRIPTS, "text/javascript; charset=utf-8"),
    "rollouts.css": "text/css; charset=utf-8",
    "rollouts.svg": "image/svg+xml",
}
"""The files ``static/<name>`` serves (nothing else is served from the package)."""
HTTP_422 = 422
"""Unprocessable content: a parameter that can never be right, named in the answer."""
PAGES = ("deployments", "deployment", "fleet")
DORA_DAYS = 30
"""The DORA figures' window by default, in days (the task state store keeps records 30 days by default)."""
MAX_DORA_DAYS = 365
"""The longest window the figures may be asked for, in days."""
WAITING_STATES = ("awaiting_input", "deferred")
"""States of an approval task that waits for its answer."""
MAP_INDEX_PLACEHOLDER = "{MAP_INDEX}"
"""What Airflow 3.3's UI leaves in a task-instance tab's URL on an unmapped task instance."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'self'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""Sent with every page and answer: scripts and data from this origin only, framed only by the Airflow UI."""


def create_app(reader: ServiceReader | None = None, workers: ViewWorkers | None = None) -> FastAPI:
    """The view's app.

    :param reader: what reads the service (default: a :class:`ServiceReader` with its shared cache).
    :param workers: the view's own threads, where every blocking part of a request runs (default: a
        :class:`ViewWorkers` of :data:`~airflow_provider.plugins.rollouts.workers.VIEW_THREADS` threads).
    """
    app = FastAPI(
        title="Deployment service: Rollouts view",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.reader = reader or ServiceReader()
    app.state.workers = workers or ViewWorkers()

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # ------------------------------------------------------------------------------ pages
    @app.get("/", include_in_schema=False)
    async def index(request: Request, user: UserDep) -> RedirectResponse:
        return RedirectResponse(f"{_app_path(request)}deployments", status.HTTP_307_TEMPORARY_REDIRECT)

    @app.get("/deployments", response_class=HTMLResponse)
    async def deployments_page(request: Request, user: UserDep) -> HTMLResponse:
        """The Deployments page (the nav entry)."""
        return _page(request, "deployments")

    @app.get("/deployments/{deployment_id}", response_class=HTMLResponse)
    async def deployment_page(request: Request, deployment_id: str, user: UserDep) -> HTMLResponse:
        """One deployment's page."""
        return _page(request, "deployment")

    @app.get("/fleet", response_class=HTMLResponse)
    async def fleet_page(request: Request, user: UserDep) -> Response:
        """The Fleet rollout tab of a task instance.

        Airflow 3.3's UI fills the tab's ``{MAP_INDEX}`` only on a mapped task instance's route; on an
        unmapped one it leaves it as it is: that URL is redirected to the one with the real map index (-1).
        """
        if request.query_params.get("map_index") == MAP_INDEX_PLACEHOLDER:
            query = [
                (name, "-1" if name == "map_index" else value) for name, value in request.query_params.multi_items()
            ]
            location = f"{_app_path(request)}fleet?{urlencode(query, quote_via=quote)}"
            return RedirectResponse(location, status.HTTP_307_TEMPORARY_REDIRECT)
        return _page(request, "fleet")

    @app.get("/static/{name}")
    async def asset(name: str, user: UserDep) -> Response:
        """One of the pages' assets (:data:`ASSETS`)."""
        if name not in ASSETS:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no asset {name!r}")
        return Response(_static(name), media_type=ASSETS[name])

    # ------------------------------------------------------------------------------ data
    @app.get("/api/connections")
    async def connections(request: Request, user: UserDep) -> dict[str, Any]:
        """The ``deployment_service`` connections of the metadata database the user may read."""
        return await _in_view_threads(request, lambda: _connections(user))

    @app.get("/api/deployments")
    async def deployments(
        request: Request,
        user: UserDep,
        conn_id: str = DEFAULT_CONN_ID,
        name_contains: str | None = None,
        tag_value_ids: str | None = None,
        deployment_status: Annotated[str | None, Query(alias="status")] = None,
        deployment_type: str | None = None,
        days: str = str(DORA_DAYS),
    ) -> dict[str, Any]:
        """Every deployment of a connection (filtered by the service), with the last rollout of each, and the DORA
        figures of the deployments listed over the last ``days``."""
        conn_id = access.check_conn_id(conn_id)
        window = _days(days)
        filters = {
            "name_contains": name_contains,
            "tag_value_ids": tag_value_ids,
            "status": deployment_status,
            "deployment_type": deployment_type,
        }
        try:
            query = list_query(filters)
        except pydantic.ValidationError as err:
            raise HTTPException(HTTP_422, describe_validation_error(err)) from None
        reader = request.app.state.reader
        listing = await _in_view_threads(request, lambda: _deployments(reader, user, conn_id, query, window))
        return {
            "conn_id": conn_id,
            "filters": {name: value for name, value in filters.items() if value},
            **listing,
        }

    @app.get("/api/deployments/{deployment_id}")
    async def deployment(
        request: Request, deployment_id: str, user: UserDep, conn_id: str = DEFAULT_CONN_ID, days: str = str(DORA_DAYS)
    ) -> dict[str, Any]:
        """One deployment: its revisions marked with what the provider's tasks did to them, the rollouts running
        on it, and its DORA figures over the last ``days``."""
        conn_id = access.check_conn_id(conn_id)
        window = _days(days)
        try:
            deployment_id = canonical_uuid(deployment_id, "deployment_id")
        except ValueError as err:
            raise HTTPException(HTTP_422, str(err)) from None
        reader = request.app.state.reader
        return await _in_view_threads(request, lambda: _deployment(reader, user, conn_id, deployment_id, window))

    @app.get("/api/fleet")
    async def fleet(
        request: Request,
        user: UserDep,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: str = "-1",
    ) -> dict[str, Any]:
        """One fleet task's waves, outcomes, budget, pauses and approvals (read while it runs)."""
        index = _map_index(map_index)
        return await _in_view_threads(request, lambda: _fleet(user, dag_id, run_id, task_id, index))

    actions.add_action_routes(app, _in_view_threads)

    @app.post("/api/deployments/{deployment_id}/guard/end")
    async def end_guard(request: Request, deployment_id: str, user: UserDep) -> dict[str, Any]:
        """End a deployment's guard early, as the user (:mod:`~airflow_provider.plugins.rollouts.guards`)."""
        if "application/json" not in request.headers.get("content-type", ""):  # no cross-site form posts
            raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send the body as application/json")
        try:
            deployment_id = canonical_uuid(deployment_id, "deployment_id")
            body = guards.EndGuardBody.model_validate(await request.json())
            body.conn_id = access.check_conn_id(body.conn_id)
        except ValueError as err:
            detail = describe_validation_error(err) if isinstance(err, pydantic.ValidationError) else str(err)
            raise HTTPException(
                HTTP_422, f"the body must be a JSON object with conn_id and revision_id: {detail}"
            ) from None
        return await _in_view_threads(request, lambda: guards.end_guard(user, deployment_id, body))

    @app.post("/api/fleet/abort")
    async def abort(request: Request, user: UserDep) -> dict[str, Any]:
        """Ask a running fleet task to abort, as the user (:mod:`~airflow_provider.plugins.rollouts.aborts`)."""
        check_json_post(request)  # JSON from the view's own pages only
        try:
            body = aborts.AbortBody.model_validate(await request.json())
        except ValueError as err:
            detail = describe_validation_error(err) if isinstance(err, pydantic.ValidationError) else str(err)
            raise HTTPException(
                HTTP_422, f"the body must be a JSON object with dag_id, run_id, task_id, mode and request_id: {detail}"
            ) from None
        return await _in_view_threads(request, lambda: aborts.request_abort(user, body))

    return app


# ------------------------------------------------------------------------------------ blocking parts
# Each runs in one of the view's own threads (:mod:`~airflow_provider.plugins.rollouts.workers`).
def _connections(user: BaseUser) -> dict[str, Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {"connections": access.readable_connections(user, session), "default": DEFAULT_CONN_ID}


def _deployments(
    reader: ServiceReader, user: BaseUser, conn_id: str, query: ListDeploymentsQuery, days: float
) -> dict[str, Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        access.require_connection(conn_id, user, session)
    listing = _service(conn_id, lambda: reader.deployments(conn_id, query))
    ids = [deployment.id for deployment in listing.deployments]
    dag_ids = access.readable_dag_ids(user)
    with create_session() as session:
        events = metadata.latest_events(session, ids, dag_ids)
        found = _histories(session, user, dag_ids, list(events.values()), days)
    listed = set(ids)
    by_deployment: dict[str, list[dict[str, Any]]] = {}
    for rollout in found.rollouts:
        if rollout["deployment_id"] in listed:
            by_deployment.setdefault(rollout["deployment_id"], []).append(rollout)
    rows = []
    for deployment in listing.deployments:
        rollouts = by_deployment.get(deployment.id, [])
        serving = shapes.serving_from_events(deployment, found.event_rollouts)
        summary = shapes.deployment_summary(deployment, serving)
        rows.append({**summary, "last_rollout": credits.newest_rollout(rollouts)})
    return {
        "deployments": rows,
        "truncated": listing.truncated,
        "max_deployments": MAX_DEPLOYMENTS,
        "fetched_at": _iso(listing.fetched_at),
        "dora": found.dora(listed),
    }


def _deployment(reader: ServiceReader, user: BaseUser, conn_id: str, deployment_id: str, days: float) -> dict[str, Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        access.require_connection(conn_id, user, session)
    found = _service(conn_id, lambda: reader.deployment(conn_id, deployment_id))
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"connection {conn_id!r} has no deployment {deployment_id}")
    shown = _service(conn_id, lambda: reader.revisions(conn_id, deployment_id))
    dag_ids = access.readable_dag_ids(user)
    with create_session() as session:
        events = metadata.deployment_events(session, deployment_id, dag_ids)
        told = _histories(session, user, dag_ids, events, days, deployment_id=deployment_id)
        offered = actions.rollback_actions(user, conn_id, session)
        guarded = guards.guard_of(session, user, conn_id, deployment_id)
    rollouts = sorted(told.rollouts, key=lambda rollout: rollout["at"] or "", reverse=True)
    return {
        "conn_id": conn_id,
        "deployment": shapes.deployment_summary(found, _serving(found, shown.revisions, told.event_rollouts)),
        "revisions": _history(found, shown.revisions, rollouts),
        "revisions_available": shown.available,
        "rollouts": rollouts,
        "running": [rollout for rollout in rollouts if rollout["running"]],
        "fetched_at": _iso(shown.fetched_at),
        "dora": told.dora({deployment_id}),
        "actions": offered,
        "guard": guarded,
    }


@dataclass
class _Told:
    """What Airflow's records tell of some deployments, as the user may see it.

    :param rollouts: one per task instance and deployment (see
        :func:`~airflow_provider.plugins.rollouts.credits.history_rollout`).
    :param event_rollouts: every provider asset event read, as a rollout (the serving build comes from there).
    :param entries: the record entries the figures count (tasks' records and fleet rows).
    :param window: the figures' window (Unix seconds).
    """

    rollouts: list[dict[str, Any]]
    event_rollouts: list[dict[str, Any]]
    entries: list[dict[str, Any]]
    window: tuple[float, float]

    def dora(self, deployment_ids: Collection[str]) -> dict[str, Any]:
        """The DORA figures of ``deployment_ids`` over the window."""
        counted = [item for item in self.entries if item.get("deployment_id") in deployment_ids]
        return dora.figures(counted, *self.window)


def _histories(
    session: Session,
    user: BaseUser,
    dag_ids: Collection[str],
    events: list[EventRecord],
    days: float,
    *,
    deployment_id: str | None = None,
) -> _Told:
    """The rollouts Airflow's records tell (every deployment's, or one's) for the DAGs the user may read: the tasks'
    records (detailed with the fleet tab's access), fleet rows (only with it), and the asset events of tasks that
    kept no record."""
    end = time.time()
    start = end - days * dora.DAY
    since = datetime.fromtimestamp(min(start, end - metadata.FLEET_LOOKBACK.total_seconds()), tz=timezone.utc)
    tasks = history.task_histories(session, dag_ids, deployment_id=deployment_id, since=since)
    touches = metadata.fleet_touches(
        session, dag_ids, deployment_id=deployment_id, since=since, limit=history.RECORDS_SCANNED
    )
    detailed = _fleet_readable(user, events, touches) | access.fleet_readable_dag_ids(user, {t.dag_id for t in tasks})
    fleets = history.fleet_histories(touch for touch in touches if touch.dag_id in detailed)
    told = history.without_duplicates([*tasks, *fleets, *history.event_histories(events)])
    told = history.with_rounds_measured(told, history.judging_markers(session, history.judged_deployments(told)))
    running = metadata.running_task_keys(session, told)
    rollouts = []
    for item in told:
        live = item.key in running
        if item.source == "fleet" and not item.entries and not live:
            continue  # a fleet's queued row: shown while the rollout runs
        rollouts.append(credits.history_rollout(item, running=live, detailed=item.dag_id in detailed))
    event_rollouts = [shapes.event_rollout(event) for event in events]
    entries = [entry for item in told if item.source != "asset_event" for entry in item.entries]
    return _Told(rollouts, event_rollouts, entries, (start, end))


def _fleet(user: BaseUser, dag_id: str, run_id: str, task_id: str, index: int) -> dict[str, Any]:
    from airflow.utils.session import create_session

    for entity in access.FLEET_ENTITIES:  # the result table and analysis come from XCom
        access.require_dag(dag_id, user, entity)
    hitl = getattr(DagAccessEntity, "HITL_DETAIL", None)  # Airflow 3.1+
    with_approvals = hitl is not None and access.may_read_dag(dag_id, user, hitl)
    with create_session() as session:
        record = metadata.fleet_task(session, dag_id, run_id, task_id, index, with_approvals=with_approvals)
    if record is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no task instance {task_id!r} (map index {index}) in run {run_id!r} of DAG {dag_id!r}",
        )
    shown = shapes.fleet_view(record)
    waiting = [item for item in shown.get("approvals") or [] if item.get("chosen_options") is None]
    allowed = bool(waiting) and actions.may_answer_approvals(user, dag_id)
    for item in shown.get("approvals") or []:  # the fleet tab's Approve buttons
        item["may_answer"] = allowed and item.get("chosen_options") is None and item.get("state") in WAITING_STATES
    if shown["is_fleet"]:  # the fleet tab's Abort button, its confirmation, and who aborted
        shown["abort"] = aborts.abort_offer(user, record, record.abort)
    return shown


def _fleet_readable(user: BaseUser, events: Iterable[EventRecord], touches: Iterable[FleetTouch]) -> set[str]:
    """The DAGs, of those named by ``events`` and ``touches``, whose fleet records the user may read."""
    named = {touch.dag_id for touch in touches} | {event.dag_id for event in events if event.dag_id}
    return access.fleet_readable_dag_ids(user, named)


# ------------------------------------------------------------------------------------ helpers
def _app_path(request: Request) -> str:
    """The app's own path (``/deployment-service/`` under the API server, any base path included)."""
    root = str(request.scope.get("root_path") or "")
    return root.rstrip("/") + "/"


@functools.cache
def _static(name: str) -> bytes:
    """A file of ``static/``, read once (the pages' endpoints run on the event loop: nothing there blocks)."""
    return (STATIC / name).read_bytes()


def _page(request: Request, page: str) -> HTMLResponse:
    assert page in PAGES
    template = _static("page.html").decode("utf-8")
    values = {"app_path": _app_path(request), "airflow_root": airflow_root_path(), "page": page}
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", html.escape(value, quote=True))
    return HTMLResponse(template)


async def _in_view_threads(request: Request, work: Callable[[], T]) -> T:
    """``work()`` in the app's own threads; no free thread within the slot wait is a 503 (retry), work that
    outlasts the answer time a 504."""
    try:
        return await request.app.state.workers.run(work)
    except ViewBusy as err:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, str(err), headers={"Retry-After": str(math.ceil(err.waited))}
        ) from None
    except AnswerTooSlow as err:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, str(err)) from None


def _service(conn_id: str, read: Callable[[], T]) -> T:
    """Call the service through the app's reader; its failures become 502 (or 404 for a missing connection), and
    a wait for another request's fetch that runs out becomes 503 (retry)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return read()
    except AirflowNotFoundException:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"connection {conn_id!r} is not defined") from None
    except StillFetching as err:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, str(err), headers={"Retry-After": str(round(err.waited) or 1)}
        ) from None
    except DeploymentServiceError as err:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY, f"the service behind connection {conn_id!r} failed: {err}"
        ) from None


def _map_index(value: str) -> int:
    """The ``map_index`` query value: a number, or the UI's unreplaced ``{MAP_INDEX}`` (an unmapped task)."""
    if value in ("", MAP_INDEX_PLACEHOLDER):
        return -1
    try:
        index = int(value)
    except ValueError:
        raise HTTPException(HTTP_422, f"map_index must be a whole number >= -1, got {value!r}") from None
    if index < -1:
        raise HTTPException(HTTP_422, f"map_index must be >= -1, got {value!r}")
    return index


def _iso(value: float) -> str:
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat()


def _days(value: str) -> float:
    """The ``days`` query value: the DORA figures' window, from 1 to :data:`MAX_DORA_DAYS` days."""
    try:
        days = float(value)
    except ValueError:
        raise HTTPException(
            HTTP_422, f"days must be a number of days from 1 to {MAX_DORA_DAYS}, got {value!r}"
        ) from None
    if not 1 <= days <= MAX_DORA_DAYS:
        raise HTTPException(HTTP_422, f"days must be from 1 to {MAX_DORA_DAYS}, got {value!r}")
    return days


def _serving(deployment: Deployment, revisions: list[Any], rollouts: list[dict[str, Any]]) -> dict[str, str] | None:
    active = next((revision for revision in revisions if revision.id == deployment.active_revision_id), None)
    if active is not None and active.source_revision_config is not None:
        return shapes.build_of(active.source_revision_config)
    return shapes.serving_from_events(deployment, rollouts)


def _history(deployment: Deployment, revisions: list[Any], rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The revisions, newest first: from the revision endpoint, else the ones Airflow's records and the
    deployment name."""
    by_id = {revision.id: revision for revision in revisions}
    ids = list(by_id)
    if not revisions:
        named = [deployment.latest_revision_id, deployment.active_revision_id]
        for rollout in rollouts:
            named += [rollout.get(name) for name in ("revision_id", "rollback_revision_id", "previous_revision_id")]
            for item in rollout.get("entries") or []:
                named += [item.get(name) for name in ("revision_id", "rolled_back_from", "rolled_back_to")]
        ids = list(dict.fromkeys(revision_id for revision_id in named if revision_id))
    entries = []
    for revision_id in ids:
        marks = credits.revision_marks(revision_id, rollouts)
        entries.append(shapes.revision_entry(by_id.get(revision_id), revision_id, deployment, marks))
    return entries


__all__ = ["create_app"]
