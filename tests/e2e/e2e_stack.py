"""One scenario's stack: the emulator plus a set of Airflow services, and the wall times measured."""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e_airflow import CONN_ENV, PAYMENT_TOKEN_ENV, AirflowConfig, AirflowServices, Emulator
from e2e_backends import E2E_DIR

from tests.conftest import PRISTINE_DB

BUILD_SECONDS = 6.0
"""Emulated build time of every revision: long enough that each waiting task really defers."""
POLL_INTERVAL = 1.0
WATCH_INTERVAL = 1.0
"""Poll interval of the example watcher (``smoke_test_on_new_revision``); equal to :data:`POLL_INTERVAL`, so
the watcher shares the rollouts' poller."""
ROLLOUT_TIMEOUT = 180.0
SETTLE_TIME = 2.0
"""Settle time of the example watchers: shorter than the time a rejected revision serves before its rollout's
rollback replaces it (its build, the analysis' first round), so only the judging marker keeps it unannounced."""
ANALYSIS_INTERVAL = 2.0
"""Analysis interval (and initial delay) of ``analysed_rollout``."""
BAKE_SECONDS = 12.0
"""Bake window of ``analysed_rollout``: its analysis measures 5 rounds of 2 s after a 2 s delay."""
PAYMENT_TOKEN = "e2e-payment-token-" + secrets.token_hex(6)

_TIMINGS: dict[str, dict[str, float]] = {}


def record_timing(scenario: str, **seconds: float) -> None:
    """Keep wall times of a scenario for the summary (and ``.e2e/timings.json``)."""
    _TIMINGS.setdefault(scenario, {}).update({name: round(value, 1) for name, value in seconds.items()})


def timing_lines() -> list[str]:
    """One line per scenario that ran: its measured wall times; also written to ``.e2e/timings.json``."""
    if not _TIMINGS:
        return []
    with contextlib.suppress(OSError):
        E2E_DIR.mkdir(exist_ok=True)
        (E2E_DIR / "timings.json").write_text(json.dumps(_TIMINGS, indent=2) + "\n")
    return [
        f"{scenario}: " + ", ".join(f"{name} {value}" for name, value in seconds.items())
        for scenario, seconds in _TIMINGS.items()
    ]


@dataclass
class Stack:
    """The emulator and the Airflow services that talk to it.

    :param name: scenario name (for timings and messages).
    :param emulator: the running emulator.
    :param airflow: the running Airflow services.
    """

    name: str
    emulator: Emulator
    airflow: AirflowServices


@contextlib.contextmanager
def airflow_stack(
    name: str,
    workdir: Path,
    bin_dir: Path,
    *,
    sql_alchemy_conn: str | None = None,
    executor: str = "LocalExecutor",
    extra_env: dict[str, str] | None = None,
    celery_queue: str | None = None,
    sidecar: Callable[[Emulator], contextlib.AbstractContextManager[dict[str, str]]] | None = None,
    database_migrated: bool = False,
) -> Iterator[Stack]:
    """Start the emulator and the Airflow services; stop both afterwards (also after a failure).

    :param sidecar: a service started once the emulator runs and stopped after Airflow (e.g. a Prometheus
        scraping it): called with the emulator, it gives a context manager whose value is more environment
        for the Airflow services (e.g. a connection to it).
    :param database_migrated: ``sql_alchemy_conn`` is a copy of a migrated template (see
        :class:`~e2e_airflow.AirflowConfig`): not migrated again.

    SQLite in the main virtual environment starts from a copy of the database the test session migrated at
    start-up (``tests/conftest.py``: the same Airflow), instead of migrating one more.
    """
    started = time.monotonic()
    with contextlib.ExitStack() as services:
        emulator = services.enter_context(Emulator(Path(sys.executable), workdir, build_seconds=BUILD_SECONDS))
        sidecar_env = services.enter_context(sidecar(emulator)) if sidecar is not None else {}
        env = {
            CONN_ENV: emulator.connection_json(),
            PAYMENT_TOKEN_ENV: PAYMENT_TOKEN,
            "DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL": str(POLL_INTERVAL),
            "DEPLOYMENT_SERVICE_EXAMPLE_WATCH_INTERVAL": str(WATCH_INTERVAL),
            "DEPLOYMENT_SERVICE_EXAMPLE_SETTLE_TIME": str(SETTLE_TIME),
            "DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL": str(ANALYSIS_INTERVAL),
            "DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS": str(BAKE_SECONDS),
            "DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT": str(ROLLOUT_TIMEOUT),
            **sidecar_env,
            **(extra_env or {}),
        }
        home = workdir / "airflow-home"
        home.mkdir()
        same_airflow = bin_dir.resolve() == Path(sys.executable).parent.resolve()
        config = AirflowConfig(
            bin_dir,
            home,
            sql_alchemy_conn=sql_alchemy_conn,
            executor=executor,
            env=env,
            celery_queue=celery_queue,
            migrated_database=PRISTINE_DB if sql_alchemy_conn is None and same_airflow else None,
            database_migrated=database_migrated,
        )
        try:
            with AirflowServices(config) as airflow:
                record_timing(name, **airflow.timings, **{"stack ready": time.monotonic() - started})
                yield Stack(name, emulator, airflow)
                stopping = time.monotonic()
            record_timing(name, **{"stack stopped": time.monotonic() - stopping})
        finally:
            record_timing(name, **{"stack total": time.monotonic() - started})
