"""Fixtures of the emulator suite: plain httpx clients against the emulator (the provider's client is
not used here, so these tests pin the wire format on their own).

``deployment_service_emulator`` and ``deployment_service_emulator_factory`` come from the package's
pytest plugin (``pytest11`` entry point; the package must be installed, as ``make`` does).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer

Factory = Callable[..., EmulatorServer]

# Building an SSL context (loading the CA bundle) costs ~15 ms per httpx client; these clients speak
# plain HTTP to loopback, so they share one.
SHARED_SSL_CONTEXT = ssl.create_default_context()


@pytest.fixture
def emulator(deployment_service_emulator: EmulatorServer) -> EmulatorServer:
    """The default emulator: example data, frozen clock, build_seconds=2, ready_seconds=1."""
    return deployment_service_emulator


@pytest.fixture
def client(emulator: EmulatorServer) -> Iterator[httpx.Client]:
    """An authorized httpx client of the default emulator."""
    with httpx.Client(
        base_url=emulator.base_url, headers=emulator.headers, timeout=30, verify=SHARED_SSL_CONTEXT
    ) as http:
        yield http


@pytest.fixture
def web() -> Iterator[httpx.Client]:
    """A bare httpx client: full URLs, no headers."""
    with httpx.Client(timeout=30, verify=SHARED_SSL_CONTEXT) as http:
        yield http


@pytest.fixture
def make_client() -> Iterator[Callable[..., httpx.Client]]:
    """Build extra httpx clients (closed after the test): ``make_client(server, headers=...)``."""
    clients: list[httpx.Client] = []

    def make(server: EmulatorServer, headers: dict[str, str] | None = None, **options: Any) -> httpx.Client:
        http = httpx.Client(
            base_url=server.base_url,
            headers=server.headers if headers is None else headers,
            timeout=options.pop("timeout", 30),  # a loaded machine answers late; no test here is about time
            verify=SHARED_SSL_CONTEXT,
            **options,
        )
        clients.append(http)
        return http

    yield make
    for http in clients:
        http.close()
