"""The Rollouts view's FastAPI app, mounted by the API server at ``/deployment-service``.

Pages (plain HTML, JavaScript and CSS from ``static/``, no build step), shown by the Airflow UI in an
iframe: ``deployments`` (the nav entry), ``deployments/<id>`` and ``fleet`` (the task-instance tab). Their
data comes from the JSON endpoints under ``api/``. Every route, pages and assets included, needs an
authenticated Airflow user (:mod:`~airflow_provider.plugins.rollouts.access`); the JSON endpoints also
check read access to the connection or the DAG they show.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from importlib import resources
from typing import Annotated, Any

import pydantic
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from fastapi import FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow_provider.client import describe_validation_error
from airflow_provider.defaults import DEFAULT_CONN_ID
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import Deployment, canonical_uuid
from airflow_provider.plugins.rollouts import access, records, shapes
from airflow_provider.plugins.rollouts.access import UserDep
from airflow_provider.plugins.rollouts.listing import MAX_DEPLOYMENTS, ServiceReader, StillFetching, list_query
from airflow_provider.plugins.rollouts.paths import airflow_root_path

STATIC = resources.files("airflow_provider.plugins.rollouts") / "static"
ASSETS = {
    "rollouts.js": "text/javascript; charset=utf-8",
    "rollouts.css": "text/css; charset=utf-8",
    "rollouts.svg": "image/svg+xml",
}
"""The files ``static/<name>`` serves (nothing else is served from the package)."""
HTTP_422 = 422
"""Unprocessable content: a parameter that can never be right, named in the answer."""
PAGES = ("deployments", "deployment", "fleet")
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


def create_app(reader: ServiceReader | None = None) -> FastAPI:
    """The view's app.

    :param reader: what reads the service (default: a :class:`ServiceReader` with its shared cache).
    """
    app = FastAPI(
        title="Deployment service: Rollouts view",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.reader = reader or ServiceReader()

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # ------------------------------------------------------------------------------ pages
    @app.get("/", include_in_schema=False)
    def index(request: Request, user: UserDep) -> RedirectResponse:
        return RedirectResponse(f"{_app_path(request)}deployments", status.HTTP_307_TEMPORARY_REDIRECT)

    @app.get("/deployments", response_class=HTMLResponse)
    def deployments_page(request: Request, user: UserDep) -> HTMLResponse:
        """The Deployments page (the nav entry)."""
        return _page(request, "deployments")

    @app.get("/deployments/{deployment_id}", response_class=HTMLResponse)
    def deployment_page(request: Request, deployment_id: str, user: UserDep) -> HTMLResponse:
        """One deployment's page."""
        return _page(request, "deployment")

    @app.get("/fleet", response_class=HTMLResponse)
    def fleet_page(request: Request, user: UserDep) -> HTMLResponse:
        """The Fleet rollout tab of a task instance."""
        return _page(request, "fleet")

    @app.get("/static/{name}")
    def asset(name: str, user: UserDep) -> Response:
        """One of the pages' assets (:data:`ASSETS`)."""
        if name not in ASSETS:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no asset {name!r}")
        return Response((STATIC / name).read_bytes(), media_type=ASSETS[name])

    # ------------------------------------------------------------------------------ data
    @app.get("/api/connections")
    def connections(user: UserDep) -> dict[str, Any]:
        """The ``deployment_service`` connections of the metadata database the user may read."""
        from airflow.utils.session import create_session

        with create_session() as session:
            return {"connections": access.readable_connections(user, session), "default": DEFAULT_CONN_ID}

    @app.get("/api/deployments")
    def deployments(
        request: Request,
        user: UserDep,
        conn_id: str = DEFAULT_CONN_ID,
        name_contains: str | None = None,
        tag_value_ids: str | None = None,
        deployment_status: Annotated[str | None, Query(alias="status")] = None,
        deployment_type: str | None = None,
    ) -> dict[str, Any]:
        """Every deployment of a connection (filtered by the service), with the last rollout of each."""
        from airflow.utils.session import create_session

        conn_id = access.check_conn_id(conn_id)
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
        with create_session() as session:
            access.require_connection(conn_id, user, session)
        listing = _service(request, conn_id, lambda reader: reader.deployments(conn_id, query))
        dag_ids = access.readable_dag_ids(user)
        ids = [deployment.id for deployment in listing.deployments]
        with create_session() as session:
            events = records.latest_events(session, ids, dag_ids)
            touches = records.latest_touches(records.fleet_touches(session, dag_ids))
            running = records.running_task_keys(session, touches.values())
        rows = []
        for deployment in listing.deployments:
            rollouts = []
            if deployment.id in events:
                rollouts.append(shapes.event_rollout(events[deployment.id]))
            touch = touches.get(deployment.id)
            if touch is not None:
                key = (touch.dag_id, touch.run_id, touch.task_id, touch.map_index)
                rollouts.append(shapes.touch_rollout(touch, key in running))
            serving = shapes.serving_from_events(deployment, rollouts)
            summary = shapes.deployment_summary(deployment, serving)
            rows.append({**summary, "last_rollout": shapes.newest_rollout(rollouts)})
        return {
            "conn_id": conn_id,
            "filters": {name: value for name, value in filters.items() if value},
            "deployments": rows,
            "truncated": listing.truncated,
            "max_deployments": MAX_DEPLOYMENTS,
            "fetched_at": _iso(listing.fetched_at),
        }

    @app.get("/api/deployments/{deployment_id}")
    def deployment(
        request: Request, deployment_id: str, user: UserDep, conn_id: str = DEFAULT_CONN_ID
    ) -> dict[str, Any]:
        """One deployment: its revisions marked with the rollouts that rolled them out or back, and the
        rollouts running on it."""
        from airflow.utils.session import create_session

        conn_id = access.check_conn_id(conn_id)
        try:
            deployment_id = canonical_uuid(deployment_id, "deployment_id")
        except ValueError as err:
            raise HTTPException(HTTP_422, str(err)) from None
        with create_session() as session:
            access.require_connection(conn_id, user, session)
        found = _service(request, conn_id, lambda reader: reader.deployment(conn_id, deployment_id))
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"connection {conn_id!r} has no deployment {deployment_id}")
        history = _service(request, conn_id, lambda reader: reader.revisions(conn_id, deployment_id))
        dag_ids = access.readable_dag_ids(user)
        with create_session() as session:
            events = records.deployment_events(session, deployment_id, dag_ids)
            touches = records.fleet_touches(session, dag_ids, deployment_id=deployment_id)
            running = records.running_task_keys(session, touches)
        rollouts = [shapes.event_rollout(event) for event in events]
        for touch in touches:
            live = (touch.dag_id, touch.run_id, touch.task_id, touch.map_index) in running
            if touch.row.get("outcome") == "not_patched" or (touch.row.get("outcome") == "pending" and not live):
                continue  # never patched by that rollout; a pending row of a running one is queued: shown
            rollouts.append(shapes.touch_rollout(touch, live))
        rollouts.sort(key=lambda rollout: rollout["at"] or "", reverse=True)
        return {
            "conn_id": conn_id,
            "deployment": shapes.deployment_summary(found, _serving(found, history.revisions, rollouts)),
            "revisions": _history(found, history.revisions, rollouts),
            "revisions_available": history.available,
            "rollouts": rollouts,
            "running": [rollout for rollout in rollouts if rollout["running"]],
            "fetched_at": _iso(history.fetched_at),
        }

    @app.get("/api/fleet")
    def fleet(
        user: UserDep,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: str = "-1",
    ) -> dict[str, Any]:
        """One fleet task's waves, outcomes, budget, pauses and approvals (read while it runs)."""
        from airflow.utils.session import create_session

        index = _map_index(map_index)
        access.require_dag(dag_id, user, DagAccessEntity.TASK_INSTANCE)
        access.require_dag(dag_id, user, DagAccessEntity.XCOM)  # the result table and analysis come from XCom
        hitl = getattr(DagAccessEntity, "HITL_DETAIL", None)  # Airflow 3.1+
        try:
            if hitl is not None:
                access.require_dag(dag_id, user, hitl)
            with_approvals = hitl is not None
        except HTTPException:
            with_approvals = False
        with create_session() as session:
            record = records.fleet_task(session, dag_id, run_id, task_id, index, with_approvals=with_approvals)
        if record is None:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"no task instance {task_id!r} (map index {index}) in run {run_id!r} of DAG {dag_id!r}",
            )
        return shapes.fleet_view(record)

    return app


# ------------------------------------------------------------------------------------ helpers
def _app_path(request: Request) -> str:
    """The app's own path (``/deployment-service/`` under the API server, any base path included)."""
    root = str(request.scope.get("root_path") or "")
    return root.rstrip("/") + "/"


def _page(request: Request, page: str) -> HTMLResponse:
    assert page in PAGES
    template = (STATIC / "page.html").read_text(encoding="utf-8")
    values = {"app_path": _app_path(request), "airflow_root": airflow_root_path(), "page": page}
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", html.escape(value, quote=True))
    return HTMLResponse(template)


def _service(request: Request, conn_id: str, read: Any) -> Any:
    """Call the service through the app's reader; its failures become 502 (or 404 for a missing connection), and
    a wait for another request's fetch that runs out becomes 503 (retry)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return read(request.app.state.reader)
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
    if value in ("", "{MAP_INDEX}"):
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
        ids = list(dict.fromkeys(revision_id for revision_id in named if revision_id))
    entries = []
    for revision_id in ids:
        marks = shapes.revision_marks(revision_id, rollouts)
        entries.append(shapes.revision_entry(by_id.get(revision_id), revision_id, deployment, marks))
    return entries


__all__ = ["create_app"]
