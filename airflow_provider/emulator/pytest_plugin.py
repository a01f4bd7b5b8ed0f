"""pytest fixtures that run the emulator (registered through the ``pytest11`` entry point).

* ``deployment_service_emulator``: a fresh emulator per test, served from a background thread, with the
  example data, a frozen clock, ``build_seconds=2`` and ``ready_seconds=1``. It yields the
  :class:`~airflow_provider.emulator.server.EmulatorServer` (``.base_url``, ``.api_key``, ``.headers``,
  ``.state``, ``.admin``).
* ``deployment_service_emulator_factory``: call it with :class:`EmulatorServer` keyword arguments
  (``tenant_id=...``, ``data=...``, ``optional_endpoints=False``, ``disabled_endpoints=["redeploy"]``,
  ``resource_spec_mode="merge"``, ``updated_at_on_requests_only=True``, ``unknown_fields=True``,
  ``in_subprocess=True``...) to get started servers, all stopped at the end of the test.
  ``unknown_fields=True`` plays a newer service whose answers carry fields the provider's models lack
  (:mod:`airflow_provider.emulator.unknown_fields`).

Importing this module is cheap: the server is imported only when a fixture runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .server import EmulatorServer

FIXTURE_DEFAULTS: dict[str, Any] = {
    "api_key": "test-api-key",
    "frozen_clock": True,
    "build_seconds": 2.0,
    "ready_seconds": 1.0,
}
"""Options the fixtures use unless told otherwise."""


@pytest.fixture
def deployment_service_emulator_factory() -> Iterator[Callable[..., EmulatorServer]]:
    """Start emulators with the given :class:`EmulatorServer` options; stop them after the test."""
    from .server import EmulatorServer

    servers: list[EmulatorServer] = []

    def start(**options: Any) -> EmulatorServer:
        if options.get("state") is None:
            options = {**FIXTURE_DEFAULTS, **options}
        server = EmulatorServer(**options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def deployment_service_emulator(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
) -> EmulatorServer:
    """A running emulator with fresh example data and a frozen clock."""
    return deployment_service_emulator_factory()
