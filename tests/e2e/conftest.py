"""Fixtures of the end-to-end tests: the emulator plus one set of real Airflow services per backend.

Each stack gets its own AIRFLOW_HOME under pytest's temporary directory (kept for the last three
sessions: component logs are in ``<home>/component-logs``, task logs in ``<home>/logs``).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_backends import (
    BackendUnavailable,
    delete_redis_keys,
    e2e_environment,
    migrated_template,
    new_database,
    require_postgres,
    require_redis,
)
from e2e_stack import Stack, airflow_stack, timing_lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the end-to-end scenarios that ran measured."""
    lines = timing_lines()
    if lines:
        terminalreporter.section("end-to-end wall times (s) and counts")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def sqlite_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """SQLite + LocalExecutor in the main virtual environment; shared by the tests of a module."""
    workdir = tmp_path_factory.mktemp("e2e-sqlite")
    with airflow_stack("sqlite-local", workdir, Path(sys.executable).parent) as stack:
        yield stack


@pytest.fixture(scope="session")
def postgres_available() -> None:
    """Skip unless PostgreSQL listens on 127.0.0.1:5432."""
    try:
        require_postgres()
    except BackendUnavailable as reason:
        pytest.skip(str(reason))


@pytest.fixture(scope="session")
def e2e_bin(postgres_available: None) -> Path:
    """``.e2e/venv/bin`` (Celery provider and psycopg2 live only there), built on first use."""
    return e2e_environment()


@pytest.fixture(scope="session")
def postgres_template(e2e_bin: Path) -> str:
    """A PostgreSQL database migrated by ``.e2e/venv``'s Airflow and never used: what each test's is a copy of."""
    try:
        return migrated_template(e2e_bin)
    except BackendUnavailable as reason:
        pytest.skip(str(reason))


@pytest.fixture
def postgres_url(e2e_bin: Path, postgres_template: str) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, already migrated (a copy of :func:`postgres_template`; give
    ``database_migrated=True`` to the stack), dropped afterwards."""
    try:
        database = new_database(e2e_bin / "python", template=postgres_template)
    except BackendUnavailable as reason:
        pytest.skip(str(reason))
    try:
        yield database.url()
    finally:
        database.drop()


@pytest.fixture(scope="session")
def redis_available() -> None:
    """Skip unless Redis answers PING on 127.0.0.1:6379."""
    try:
        require_redis()
    except BackendUnavailable as reason:
        pytest.skip(str(reason))


@pytest.fixture
def celery_queue(redis_available: None, e2e_bin: Path) -> Iterator[str]:
    """A Celery queue name of this test alone; its Redis keys are deleted afterwards."""
    queue = f"airflow-e2e-{secrets.token_hex(4)}"
    try:
        yield queue
    finally:
        delete_redis_keys(e2e_bin / "python", f"*{queue}*")
