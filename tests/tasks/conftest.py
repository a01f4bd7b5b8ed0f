"""Helpers for the task tests: a fake task instance and state store, and emulators wired to a connection."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

CONN_ENV = "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"
SECRET = "zq-Distinctive-S3cret-7f2a9c41"
"""A secret value no test output may contain."""

LIST_ROUTE = "GET /v2/deployments"
PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"
REVISION_ROUTE = "GET /v2/deployments/{deployment_id}/revisions/{revision_id}"


class FakeTI:
    """What the operators use of a task instance: ``xcom_push`` (JSON-checked) and ``try_number``."""

    def __init__(self, try_number: int = 1) -> None:
        self.try_number = try_number
        self.xcoms: dict[str, Any] = {}
        self.task_id = "task"
        self.dag_id = "dag"
        self.run_id = "run"
        self.map_index = -1

    def xcom_push(self, key: str, value: Any) -> None:
        json.dumps(value)  # XCom values must be JSON
        self.xcoms[key] = value


class FakeStore:
    """``context["task_state_store"]``: ``get``/``set`` over a dict that survives between tries."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.data[key])) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self.data[key] = json.loads(json.dumps(value))


def make_context(ti: FakeTI | None = None, store: FakeStore | None = None) -> dict[str, Any]:
    """A minimal task context."""
    context: dict[str, Any] = {"ti": ti or FakeTI()}
    if store is not None:
        context["task_state_store"] = store
    return context


def run_trigger(trigger: Any, timeout: float = 30) -> dict[str, Any]:
    """The payload of the trigger's first event, as the triggerer would hand it to the task."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise AssertionError(f"{type(trigger).__name__} ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def run_deferred(
    make_task: Callable[[], Any], context: dict[str, Any], *, trigger_timeout: float = 30
) -> tuple[Any, list[Any]]:
    """Run a task to the end, deferrable or not: each trigger is rebuilt from its (JSON-checked) arguments,
    as the triggerer does, and each resume runs on a fresh operator, as on another worker. Returns the
    result and the triggers it deferred to."""
    from airflow.sdk.exceptions import TaskDeferred

    triggers: list[Any] = []
    try:
        return make_task().execute(context), triggers
    except TaskDeferred as deferred:
        pending = deferred
    while True:
        trigger = pending.trigger
        triggers.append(trigger)
        _path, kwargs = trigger.serialize()
        json.dumps(kwargs)  # trigger kwargs are JSON
        event = run_trigger(type(trigger)(**kwargs), trigger_timeout)
        try:
            return getattr(make_task(), pending.method_name)(context, event), triggers
        except TaskDeferred as deferred:
            pending = deferred


def connection_json(base_url: str, api_key: str, **extra: Any) -> str:
    """The JSON form of a ``deployment_service`` connection to an emulator, as users put it in an env var."""
    from airflow_provider.emulator.tracing import tracing_base_url

    extra = {"tracing_base_url": tracing_base_url(base_url), **extra}  # the emulator's tracing endpoints
    return json.dumps({"conn_type": "deployment_service", "host": base_url, "password": api_key, "extra": extra})


@pytest.fixture
def service(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """Start an emulator with the given options and point ``deployment_service_default`` at it."""

    def start(**options: Any) -> Any:
        emulator = deployment_service_emulator_factory(**options)
        monkeypatch.setenv(
            CONN_ENV,
            connection_json(emulator.base_url, emulator.api_key, backoff_initial=0.01, backoff_max=0.02),
        )
        return emulator

    return start


@pytest.fixture
def emulator(service: Callable[..., Any]) -> Any:
    """The default emulator (example data, frozen clock, 2 s builds) behind the default connection."""
    return service()


def deployment_named(emulator: Any, name: str) -> dict[str, Any]:
    return dict(emulator.state.find_deployment(name))


def seed(count: int, **fields: Any) -> dict[str, Any]:
    """Seed data with ``count`` codehost deployments named ``app-0000``... (extra ``fields`` on each)."""
    deployments = [
        {
            "name": f"app-{index:04d}",
            "source": "codehost",
            "secrets": [{"name": "TOKEN", "value": SECRET}],
            **fields,
        }
        for index in range(count)
    ]
    return {"deployments": deployments}


@pytest.fixture
def advance_later() -> Iterator[Callable[[Any, float, float], None]]:
    """Keep advancing an emulator's clock by ``seconds`` every ``delay`` real seconds, from another thread,
    until the test ends: a build finishes whenever the task gets to it, however busy the machine is (one
    advance after a fixed delay could come before the task even sent its patch)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def schedule(emulator: Any, seconds: float, delay: float) -> None:
        def tick() -> None:
            while not stop.wait(delay):
                emulator.state.advance(seconds)

        thread = threading.Thread(target=tick, daemon=True, name="advance-emulator-clock")
        threads.append(thread)
        thread.start()

    yield schedule
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Yield to the event loop until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


async def collect(run: Awaitable[Any], timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(run, timeout)


def scan_for_secret(*texts: Any) -> None:
    """Fail if the distinctive secret appears in any of ``texts`` (JSON-dumped when not a string)."""
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        assert SECRET not in shown
