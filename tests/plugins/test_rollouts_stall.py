"""The Rollouts view never stalls Airflow: with a deployment service that accepts connections and never answers,
fifty viewers with different filters at once get a clear error each within the view's bound, while Airflow's
own REST API, served by the same process, keeps answering within a second.

Everything runs as ``airflow api-server`` runs it: Airflow's real API server app (its REST API, its auth
manager, the plugins it mounts, the Rollouts view among them) under uvicorn, one process, one event loop,
anyio's shared pool of 40 threads; the viewers and the probes are real HTTP clients on their own threads.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from airflow_provider.plugins.rollouts.listing import PAGE_READ_TIMEOUT
from airflow_provider.plugins.rollouts.workers import LONGEST_ANSWER_SECONDS, SLOT_WAIT_SECONDS, VIEW_THREADS
from tests.conftest import CONN_ENV, connection_json

VIEWERS = 50
PROBE_LIMIT = 1.0
"""Seconds Airflow's own API may take to answer while the view is flooded."""
PROBE_TIMEOUT = 5.0
SLACK = 3.0
"""Seconds of scheduling noise allowed on top of a viewer's bound (a shared two-core machine)."""
VIEWER_BOUND = LONGEST_ANSWER_SECONDS
PROBES = [
    ("health", "/api/v2/monitor/health", {}),
    # A synchronous endpoint with the auth manager and a database query, as the UI's DAG list asks; filtered to
    # no DAG, so that rows other tests left in the database do not matter.
    ("dags", "/api/v2/dags", {"limit": 1, "dag_id_pattern": "rollouts-view-stall-probe"}),
]
"""The longest the view may take to answer: a slot's wait, then the request's whole answer time."""


class HangingService:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers (nor closes one); it counts
    the connections open at once (a client closing one is noticed within 50 ms)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._listener.setblocking(False)
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="hanging-service", daemon=True)
        self.accepted = 0
        self.most_open = 0
        self.base_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> HangingService:
        self._thread.start()
        return self

    def open_now(self) -> int:
        with self._lock:
            return len(self._open)

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watched = [self._listener, *self._open]
            readable, _, _ = select.select(watched, [], [], 0.05)
            for sock in readable:
                if sock is self._listener:
                    try:
                        connection, _ = self._listener.accept()
                    except BlockingIOError:
                        continue
                    with self._lock:
                        self._open.append(connection)
                        self.accepted += 1
                        self.most_open = max(self.most_open, len(self._open))
                    continue
                try:
                    closed = sock.recv(65536, socket.MSG_PEEK) == b""
                    if not closed:
                        sock.recv(65536)  # the request: read, never answered
                except OSError:
                    closed = True
                if closed:
                    with self._lock:
                        self._open.remove(sock)
                    sock.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            for sock in self._open:
                sock.close()
            self._open.clear()
        self._listener.close()


@dataclass
class Seen:
    """What one HTTP client saw."""

    what: str
    status: int | None
    detail: str
    retry_after: str | None
    seconds: float
    service_connections: int = 0

    def __str__(self) -> str:
        retry = f", Retry-After {self.retry_after}" if self.retry_after else ""
        return f"{self.what}: {self.status} after {self.seconds:.2f} s{retry}: {self.detail[:160]}"


def ask(client: httpx.Client, what: str, path: str, timeout: float, **params: Any) -> Seen:
    started = time.monotonic()
    try:
        answer = client.get(path, params=params, timeout=timeout)
    except httpx.HTTPError as err:
        return Seen(what, None, f"{type(err).__name__}: {err}", None, time.monotonic() - started)
    seconds = time.monotonic() - started
    try:
        detail = str(answer.json().get("detail", "")) if answer.status_code != 200 else ""
    except ValueError:
        detail = answer.text
    return Seen(what, answer.status_code, detail, answer.headers.get("Retry-After"), seconds)


@pytest.fixture
def hanging_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[HangingService]:
    """``deployment_service_default`` pointing at a :class:`HangingService` (the connection's own timeouts and
    retries left at their defaults: 30 s, 5 attempts)."""
    service = HangingService().start()
    monkeypatch.setenv(CONN_ENV, connection_json(service.base_url, "hanging-service-key"))
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def api_server(auth_manager: Any) -> Iterator[str]:
    """Airflow's API server app under uvicorn on 127.0.0.1, in this process; yields its base URL."""
    import uvicorn
    from airflow.api_fastapi.app import create_app

    from airflow_provider.emulator.server import QuickServer, bind_socket

    class ApiServer(QuickServer):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            await self.lifespan.shutdown()  # as uvicorn's own shutdown ends the app's lifespan

    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(create_app(), loop="asyncio", http="h11", ws="none", log_level="warning", access_log=False)
    server = ApiServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="api-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start within 30 s"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.mark.alone  # timing-sensitive (Airflow's API within a second): run after the parallel part, alone
def test_fifty_viewers_of_a_hanging_service_never_stall_airflows_own_api(
    api_server: str, hanging_service: HangingService, token: Callable[[str], str]
) -> None:
    headers = {"Authorization": f"Bearer {token('op')}"}
    run = uuid.uuid4().hex[:8]  # filters no earlier test has cached
    with httpx.Client(base_url=api_server, headers=headers) as warm:  # the view's app is built on first use
        first = ask(warm, "warm-up", "/deployment-service/api/connections", 30)
        assert first.status == 200, f"the view did not answer before the test: {first}"

    # One client (a connection each) for every viewer: fifty clients would each build a TLS context first,
    # seconds of CPU under the GIL that the viewers' clocks would count.
    viewers_client = httpx.Client(
        base_url=api_server, headers=headers, limits=httpx.Limits(max_connections=VIEWERS), trust_env=False
    )

    def viewer(index: int) -> Seen:
        return ask(
            viewers_client,
            f"viewer {index}",
            "/deployment-service/api/deployments",
            VIEWER_BOUND + 30,
            name_contains=f"viewer-{run}-{index}",
        )

    pool = ThreadPoolExecutor(max_workers=VIEWERS, thread_name_prefix="viewer")
    probes: list[Seen] = []
    try:
        viewers = [pool.submit(viewer, index) for index in range(VIEWERS)]
        deadline = time.monotonic() + VIEWER_BOUND + 30
        with httpx.Client(base_url=api_server, headers=headers) as prober:
            while not all(future.done() for future in viewers) and time.monotonic() < deadline:
                for what, path, params in PROBES:
                    seen = ask(prober, what, path, PROBE_TIMEOUT, **params)
                    seen.service_connections = hanging_service.open_now()
                    probes.append(seen)
                if sum(probe.status != 200 or probe.seconds >= PROBE_LIMIT for probe in probes) >= 3:
                    break  # stalled: enough seen to say so
                time.sleep(0.1)
        answers = [future.result(timeout=1) for future in viewers if future.done()]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        viewers_client.close()

    slow = [str(probe) for probe in probes if probe.status != 200 or probe.seconds >= PROBE_LIMIT]
    assert not slow, f"Airflow's own API stalled while {VIEWERS} viewers waited on the hanging service: {slow}"
    during = [probe for probe in probes if probe.service_connections > 0]
    assert len(during) >= 5, f"too few probes while the view waited on the service: {[str(p) for p in probes]}"

    assert len(answers) == VIEWERS, f"{VIEWERS - len(answers)} viewers got no answer within the bound"
    unclear = [str(seen) for seen in answers if seen.status not in (502, 503, 504) or not seen.detail]
    assert not unclear, f"viewers without a clear error: {unclear}"
    late = [str(seen) for seen in answers if seen.seconds > VIEWER_BOUND + SLACK]
    assert not late, f"viewers answered after the view's bound of {VIEWER_BOUND:g} s: {late}"
    timed_out = [seen for seen in answers if seen.status == 502]
    assert timed_out and all(
        f"read timeout {PAGE_READ_TIMEOUT:g}" in seen.detail and "after 1 attempt(s)" in seen.detail
        for seen in timed_out
    ), [str(seen) for seen in timed_out]
    busy = [seen for seen in answers if seen.status == 503]
    assert all(seen.retry_after and "busy" in seen.detail for seen in busy), [str(seen) for seen in busy]
    assert all(seen.seconds <= SLOT_WAIT_SECONDS + SLACK for seen in busy), [str(seen) for seen in busy]
    assert hanging_service.most_open <= VIEW_THREADS, (
        f"the view held {hanging_service.most_open} connections to the service at once; its share is {VIEW_THREADS}"
    )

    with httpx.Client(base_url=api_server, headers=headers) as after:  # nothing left stuck
        again = ask(after, "after", "/deployment-service/api/connections", 10)
        assert again.status == 200, f"the view did not recover: {again}"
