"""``EmulatorServer``: run the emulator on a loopback port, in a background thread or a subprocess."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI

from .admin_client import EmulatorAdmin
from .metrics import METRICS_PATH
from .seed import DataSource
from .state import EmulatorState, RedeployMode, ResourceSpecMode
from .tracing import tracing_base_url
from .web.app import create_app

LISTENING_LINE = "Deployment service emulator listening on {url}"
API_KEY_ENV = "DEPLOYMENT_SERVICE_EMULATOR_API_KEY"
"""Environment variable the CLI reads the API key from when ``--api-key`` is not given."""

_LISTENING_RE = re.compile(r"^Deployment service emulator listening on (?P<url>http://\S+)$")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_SHUTDOWN_GRACE_SECONDS = 0.5


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_non_loopback: bool) -> None:
    """Refuse a non-loopback ``host`` unless explicitly allowed (the emulator has no real security)."""
    if not allow_non_loopback and not is_loopback(host):
        raise ValueError(
            f"refusing to listen on non-loopback host {host!r}: the emulator is for local tests; "
            "pass allow_non_loopback=True (--allow-non-loopback) to do it anyway"
        )


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free port), ready for uvicorn."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so (else ~40 ms per answer).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_for(sock: socket.socket, host: str, path_prefix: str = "") -> str:
    """The base URL of the service served on ``sock``."""
    port = sock.getsockname()[1]
    bare = host.strip("[]")
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}{path_prefix}"


def uvicorn_config(app: FastAPI, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn settings of the emulator: asyncio loop, h11, no lifespan, no websockets, quiet."""
    return uvicorn.Config(
        app,
        loop="asyncio",
        http="h11",
        ws="none",
        lifespan="off",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=1,
    )


class QuickServer(uvicorn.Server):
    """A uvicorn server that notices ``should_exit`` within 10 ms and shuts down without uvicorn's fixed
    grace sleeps: a test fixture starts and stops one per test."""

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            await asyncio.sleep(0.01)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # closes idle keep-alive connections, ends busy ones after their response
        deadline = time.monotonic() + _SHUTDOWN_GRACE_SECONDS
        while self.server_state.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        for task in list(self.server_state.tasks):
            task.cancel()


class EmulatorServer:
    """Serve the emulator on a loopback port, in a background thread (default) or a subprocess.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    :param state: the state to serve (thread mode only); when ``None``, one is built from the options.
    :param host: interface to listen on; loopback only unless ``allow_non_loopback``.
    :param port: port to listen on; 0 picks a free port.
    :param allow_non_loopback: allow a non-loopback ``host``.
    :param in_subprocess: run ``python -m airflow_provider.emulator`` in a child process instead of a
        thread (no :attr:`state` then; drive it through :attr:`admin`).
    :param api_key: API key (default: a random one; see :attr:`api_key`).
    :param tenant_id: organization-scoped mode (see :class:`EmulatorState`).
    :param data: seed data (path or content; ``None``: the shipped example data).
    :param build_seconds: revision build duration.
    :param ready_seconds: delay before a new deployment is ``READY``.
    :param optional_endpoints: serve the production-only GET endpoints.
    :param frozen_clock: time moves only by :meth:`EmulatorAdmin.advance` / ``state.advance``.
    :param path_prefix: service path prefix (e.g. ``/api-host``), included in :attr:`base_url`.
    :param resource_spec_mode: ``"replace"`` (production, default) or ``"merge"`` (see :class:`EmulatorState`).
    :param disabled_endpoints: production-only endpoints to answer 404/405 (see ``OPTIONAL_ENDPOINTS``).
    :param redeploy_mode: ``"new_revision"`` (default) or ``"in_place"`` (see :class:`EmulatorState`).
    :param updated_at_on_requests_only: a deployment's ``updated_at`` moves only on requests, not when a revision
        goes live (see :class:`EmulatorState`).
    :param unknown_fields: answer fields the provider's models lack, nested ones too (see :class:`EmulatorState`).
    :param startup_timeout: seconds to wait for the server to listen.
    """

    def __init__(
        self,
        state: EmulatorState | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_non_loopback: bool = False,
        in_subprocess: bool = False,
        api_key: str | None = None,
        tenant_id: str | None = None,
        data: DataSource | None = None,
        build_seconds: float = 30.0,
        ready_seconds: float = 10.0,
        optional_endpoints: bool = True,
        frozen_clock: bool = False,
        path_prefix: str = "",
        resource_spec_mode: ResourceSpecMode = "replace",
        disabled_endpoints: Iterable[str] = (),
        redeploy_mode: RedeployMode = "new_revision",
        updated_at_on_requests_only: bool = False,
        unknown_fields: bool = False,
        startup_timeout: float = 20.0,
    ) -> None:
        check_host(host, allow_non_loopback)
        if state is not None and in_subprocess:
            raise ValueError("a subprocess server builds its own state: pass options, not state")
        self.host = host
        self.port = port
        self.allow_non_loopback = allow_non_loopback
        self.startup_timeout = startup_timeout
        self._subprocess_mode = in_subprocess
        self._options: dict[str, Any] = {
            "api_key": api_key or (state.api_key if state else secrets.token_urlsafe(16)),
            "tenant_id": tenant_id,
            "data": data,
            "build_seconds": build_seconds,
            "ready_seconds": ready_seconds,
            "optional_endpoints": optional_endpoints,
            "frozen_clock": frozen_clock,
            "path_prefix": path_prefix,
            "resource_spec_mode": resource_spec_mode,
            "disabled_endpoints": tuple(disabled_endpoints),
            "redeploy_mode": redeploy_mode,
            "updated_at_on_requests_only": updated_at_on_requests_only,
            "unknown_fields": unknown_fields,
        }
        if state is None and not in_subprocess:
            state = EmulatorState(**self._options)
        self._state = state
        self._base_url: str | None = None
        self._admin: EmulatorAdmin | None = None
        self._server: QuickServer | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._process: subprocess.Popen[str] | None = None
        self._data_file: str | None = None

    # ------------------------------------------------------------------------------ properties
    @property
    def api_key(self) -> str:
        """The API key requests must send in ``X-Api-Key``."""
        return self._state.api_key if self._state is not None else str(self._options["api_key"])

    @property
    def tenant_id(self) -> str | None:
        """The organization-scoped tenant, if configured."""
        return self._state.tenant_id if self._state is not None else self._options["tenant_id"]

    @property
    def path_prefix(self) -> str:
        """The service path prefix."""
        return self._state.path_prefix if self._state is not None else str(self._options["path_prefix"])

    @property
    def base_url(self) -> str:
        """Base URL of the service, path prefix included (the server must be started)."""
        if self._base_url is None:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._base_url

    @property
    def root_url(self) -> str:
        """Base URL without the path prefix (where ``/_emulator`` lives)."""
        prefix = self.path_prefix
        return self.base_url[: -len(prefix)] if prefix else self.base_url

    @property
    def tracing_base_url(self) -> str:
        """Base URL of the tracing endpoints (``{root}/tracing``): a connection's ``tracing_base_url`` extra."""
        return tracing_base_url(self.root_url)

    @property
    def metrics_url(self) -> str:
        """URL of the Prometheus exposition (``{root}/metrics``)."""
        return f"{self.root_url}{METRICS_PATH}"

    @property
    def headers(self) -> dict[str, str]:
        """Headers an authorized client sends (API key, and the tenant when organization-scoped)."""
        headers = {"X-Api-Key": self.api_key}
        if self.tenant_id is not None:
            headers["X-Tenant-Id"] = self.tenant_id
        return headers

    @property
    def state(self) -> EmulatorState:
        """The served state (thread mode only)."""
        if self._state is None:
            raise RuntimeError("a subprocess emulator has no in-process state; use .admin")
        return self._state

    @property
    def admin(self) -> EmulatorAdmin:
        """An HTTP client of the admin API."""
        if self._admin is None:
            self._admin = EmulatorAdmin(self.root_url)
        return self._admin

    @property
    def running(self) -> bool:
        """Whether the server is started and not stopped."""
        return self._base_url is not None

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> EmulatorServer:
        """Start serving; return once the port is listening."""
        if self.running:
            return self
        if self._subprocess_mode:
            self._start_subprocess()
        else:
            self._start_thread()
        return self

    def stop(self) -> None:
        """Stop serving and release the port, the thread or child process, and the admin client."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        if self._process is not None:
            self._stop_process(self._process)
        if self._data_file is not None:
            Path(self._data_file).unlink(missing_ok=True)
        self._server = self._thread = self._socket = self._process = None
        self._data_file = self._base_url = None

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _start_thread(self) -> None:
        state = self.state
        self._socket = bind_socket(self.host, self.port)
        self._server = QuickServer(uvicorn_config(create_app(state)))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="deployment-service-emulator", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the emulator server thread did not start")
            time.sleep(0.002)
        self._base_url = url_for(self._socket, self.host, state.path_prefix)
        state.public_url = self.root_url

    def _start_subprocess(self) -> None:
        options = self._options
        command = [sys.executable, "-m", "airflow_provider.emulator", "--host", self.host, "--port", str(self.port)]
        command += ["--build-seconds", str(options["build_seconds"]), "--ready-seconds", str(options["ready_seconds"])]
        if options["tenant_id"] is not None:
            command += ["--tenant-id", options["tenant_id"]]
        if options["data"] is not None:
            command += ["--data", self._data_path(options["data"])]
        if not options["optional_endpoints"]:
            command.append("--no-optional-endpoints")
        if options["frozen_clock"]:
            command.append("--frozen-clock")
        if options["path_prefix"]:
            command += ["--path-prefix", options["path_prefix"]]
        command += ["--resource-spec-mode", options["resource_spec_mode"]]
        for name in options["disabled_endpoints"]:
            command += ["--disable-endpoint", name]
        command += ["--redeploy-mode", options["redeploy_mode"]]
        if options["updated_at_on_requests_only"]:
            command.append("--updated-at-on-requests-only")
        if options["unknown_fields"]:
            command.append("--unknown-fields")
        if self.allow_non_loopback:
            command.append("--allow-non-loopback")
        env = dict(os.environ)
        env[API_KEY_ENV] = str(options["api_key"])  # not on the command line, where `ps` shows it
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PACKAGE_ROOT), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        self._process = process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        assert process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([process.stdout], [], [], max(remaining, 0))
            line = process.stdout.readline() if ready else ""
            match = _LISTENING_RE.match(line.strip())
            if match:
                self._base_url = match.group("url")
                return
            if not ready or not line or remaining <= 0:
                code = process.poll()
                self.stop()
                raise RuntimeError(f"the emulator subprocess did not start (exit code {code}); see its stderr")

    def _data_path(self, data: DataSource) -> str:
        if not isinstance(data, Mapping):
            return str(data)
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="emulator-data-", delete=False) as handle:
            json.dump(data, handle)
        self._data_file = handle.name
        return handle.name

    @staticmethod
    def _stop_process(process: subprocess.Popen[str]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
