"""A local stand-in for the tracing service's two endpoints and Prometheus's instant-query API.

Answers in the documented shapes (``/work/shared/spec/NOTES.md``; Prometheus's HTTP API):
``GET /tracing/sessions?name=&limit=1`` -> ``[{"id", "name", ...}]``, ``POST /tracing/runs/stats`` ->
``{"run_count", "error_rate", "latency_p50", "latency_p99", ...}`` (nulls without runs), both behind
``X-Api-Key``; ``GET /prometheus/api/v1/query?query=`` -> ``{"status": "success", "data": {"resultType",
"result"}}`` or ``{"status": "error", "errorType", "error"}``, behind basic auth when a password is set;
``GET /slow/<name>/health`` -> ``{"status": "ok"}`` after :attr:`FakeSources.slow_seconds` (an application
that answers slowly, for ``HttpCheck`` latencies).
Every request is recorded, so tests count what the analysis sent.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from airflow_provider.emulator.server import QuickServer, bind_socket, url_for

TRACING_KEY = "tracing-secret-key-123"
PROMETHEUS_PASSWORD = "prom-secret-password-456"

QueryAnswer = Callable[[str], tuple[int, dict[str, Any]]]


def vector(samples: dict[str, float | str], label: str = "name") -> tuple[int, dict[str, Any]]:
    """A successful instant-vector answer: one sample per label value."""
    return 200, {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {label: key}, "value": [time.time(), str(value)]} for key, value in samples.items()],
        },
    }


def scalar(value: float | str) -> tuple[int, dict[str, Any]]:
    """A successful scalar answer."""
    return 200, {"status": "success", "data": {"resultType": "scalar", "result": [time.time(), str(value)]}}


@dataclass
class FakeSources:
    """The fake's state: projects, their statistics, the query answers, and the requests seen."""

    projects: dict[str, str] = field(default_factory=dict)
    """Project name -> id."""
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Project id -> the statistics ``/runs/stats`` answers."""
    answer_query: QueryAnswer = field(default=lambda query: vector({}))
    tracing_keys: set[str] = field(default_factory=lambda: {TRACING_KEY, "test-api-key"})
    """API keys the tracing endpoints accept (its own, and the emulator's: the same key by default)."""
    tracing_status: int | None = None
    """Answer every tracing request with this status instead (e.g. 503)."""
    raw_stats: str | None = None
    """Answer ``/runs/stats`` with this JSON text instead (what a JSON encoder would refuse: ``Infinity``)."""
    slow_seconds: float = 0.0
    """How long ``GET /slow/<name>/health`` takes to answer."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def add_project(self, name: str, **stats: Any) -> str:
        project_id = str(uuid.uuid4())
        self.projects[name] = project_id
        self.stats[project_id] = {
            "run_count": 0,
            "error_rate": None,
            "latency_p50": None,
            "latency_p99": None,
            **stats,
        }
        return project_id

    def seen(self, method: str, path: str) -> list[dict[str, Any]]:
        return [item for item in self.requests if item["method"] == method and item["path"] == path]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def record(request: Request, call_next: Any) -> Any:
            body = await request.body()
            self.requests.append(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "params": dict(request.query_params),
                    "body": body.decode() if body else "",
                    "headers": dict(request.headers),
                }
            )
            return await call_next(request)

        def tracing_refusal(request: Request) -> JSONResponse | None:
            if request.headers.get("x-api-key") not in self.tracing_keys:
                return JSONResponse({"detail": "Unauthorized"}, status_code=401)
            if self.tracing_status is not None:
                return JSONResponse({"detail": "busy"}, status_code=self.tracing_status)
            return None

        @app.get("/tracing/sessions")
        async def sessions(request: Request, name: str, limit: int = 100) -> Any:
            refusal = tracing_refusal(request)
            if refusal is not None:
                return refusal
            if name not in self.projects:
                return []
            return [{"id": self.projects[name], "name": name, "tenant_id": str(uuid.uuid4())}][:limit]

        @app.post("/tracing/runs/stats")
        async def run_stats(request: Request) -> Any:
            refusal = tracing_refusal(request)
            if refusal is not None:
                return refusal
            body = await request.json()
            (project_id,) = body["session"]
            assert body["is_root"] is True and body["start_time"]
            if self.raw_stats is not None:
                return Response(self.raw_stats, media_type="application/json")
            return self.stats[project_id]

        @app.get("/slow/{name}/health")
        async def slow_health(name: str) -> Any:
            await asyncio.sleep(self.slow_seconds)
            return {"status": "ok", "name": name}

        @app.get("/prometheus/api/v1/query")
        async def query(request: Request) -> Any:
            if request.headers.get("authorization") is None:
                return JSONResponse({"status": "error", "errorType": "unauthorized", "error": "no"}, status_code=401)
            status, payload = self.answer_query(request.query_params["query"])
            return JSONResponse(payload, status_code=status)

        return app


class FakeSourcesServer:
    """Serve :class:`FakeSources` on a loopback port from a thread."""

    def __init__(self, sources: FakeSources) -> None:
        self.sources = sources
        self._socket = bind_socket("127.0.0.1", 0)
        self._server = QuickServer(uvicorn.Config(sources.app(), log_level="warning", lifespan="off", access_log=False))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def start(self) -> FakeSources:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the fake sources did not start"
            time.sleep(0.005)
        self.sources.base_url = url_for(self._socket, "127.0.0.1")
        return self.sources

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
