"""Fixtures of the reliability suite: the report every test writes its figures to, and the emulators.

Each test records what it injected or tried and what came out through the session fixture ``report``.
When the environment variable ``RELIABILITY_REPORT_JSON`` names a file, the rows, the headline counters
and every test's outcome are written there at the end of the session; ``scripts/reliability_report.py``
runs this suite that way and renders ``docs/RELIABILITY.md`` from the file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.emulator.server import EmulatorServer
from tests.reliability.crash_points import Harness
from tests.reliability.crash_scenarios import seeded_harness
from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, Report, connection_json

REPORT_ENV = "RELIABILITY_REPORT_JSON"


_REPORT = Report()
_OUTCOMES: dict[str, dict[str, Any]] = {}
_STARTED = time.monotonic()


@pytest.fixture(scope="session")
def report() -> Report:
    """The session's :class:`Report`."""
    return _REPORT


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember each reliability test's outcome and duration (setup, call and teardown summed)."""
    entry = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0})
    entry["seconds"] += report.duration
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the report when ``RELIABILITY_REPORT_JSON`` asks for it."""
    target = os.environ.get(REPORT_ENV)
    if not target:
        return
    payload = {
        "rows": _REPORT.rows,
        "headline": _REPORT.headline,
        "notes": _REPORT.notes,
        "tests": _OUTCOMES,
        "wall_seconds": round(time.monotonic() - _STARTED, 1),
        "exit_status": int(exitstatus),
    }
    Path(target).write_text(json.dumps(payload, indent=1, default=str))


# -------------------------------------------------------------------------------------- emulators
@pytest.fixture
def realtime_emulator(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., EmulatorServer]:
    """Start a real-time emulator (short builds) behind ``deployment_service_default`` for ``dag.test()``.

    Keyword arguments go to :class:`EmulatorServer`; ``extras`` to the connection (fast retries by default).
    """

    def start(*, extras: dict[str, Any] | None = None, **options: Any) -> EmulatorServer:
        settings: dict[str, Any] = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1, **options}
        server = deployment_service_emulator_factory(**settings)
        monkeypatch.setenv(
            CONN_ENV, connection_json(server.base_url, server.api_key, **{**FAST_RETRY_EXTRAS, **(extras or {})})
        )
        return server

    return start


@pytest.fixture
def frozen_emulator(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], monkeypatch: pytest.MonkeyPatch
) -> Iterator[EmulatorServer]:
    """A frozen-clock emulator (example data) behind ``deployment_service_default``, fast retries."""
    server = deployment_service_emulator_factory()
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, server.api_key, **FAST_RETRY_EXTRAS))
    yield server


# ---------------------------------------------------------------------------------------- crash points
@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    """The crash-point harness of a test module (:func:`tests.reliability.crash_scenarios.seeded_harness`): one per
    module, so that its ``dag.test`` sweeps reuse the ``triggerer`` sweeps' runs."""
    with seeded_harness() as harness:
        yield harness
