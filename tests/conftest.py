"""Shared test set-up: a throwaway AIRFLOW_HOME and an Airflow connection pointing at the emulator.

The emulator fixtures (``deployment_service_emulator``, ``deployment_service_emulator_factory``) come
from the package's own pytest plugin, ``airflow_provider.emulator.pytest_plugin``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Must be set before anything imports airflow.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="airflow-provider-tests-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "example_dags")
# One explicit database for the in-process engine and the migration subprocess alike (unit-test mode
# would switch some readers to a second, unmigrated file).
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME}/airflow.db"
os.environ.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
os.environ["AIRFLOW__CORE__PARALLELISM"] = "4"
os.environ.pop("AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT", None)
# The example DAGs poll every 15 s in production; here rollouts take about a second.
os.environ["DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL"] = "0.2"
os.environ["DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT"] = "60"
os.environ["DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS"] = "0.5"
# the analysed examples fit one round (initial delay + one interval) in that bake
os.environ["DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL"] = "0.2"
os.environ["DEPLOYMENT_SERVICE_EXAMPLE_PAUSE_SECONDS"] = "0"

CONN_ENV = "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"

# Migrate the metadata database (about 5 s) before anything in this process imports airflow: a process
# that touched the file before the migration keeps answering "no such table".
subprocess.run(
    [sys.executable, "-m", "airflow", "db", "migrate"],
    check=True,
    capture_output=True,
    timeout=300,
    env=os.environ.copy(),
)
PRISTINE_DB = Path(_AIRFLOW_HOME) / "airflow.pristine.db"
"""A copy of the freshly migrated database, for tests that start Airflow services on an empty one."""
shutil.copyfile(Path(_AIRFLOW_HOME) / "airflow.db", PRISTINE_DB)


def connection_json(base_url: str, api_key: str, **extra: Any) -> str:
    """The JSON form of a ``deployment_service`` connection, as users put it in an env var."""
    from airflow_provider.emulator.tracing import tracing_base_url

    extra = {"tracing_base_url": tracing_base_url(base_url), **extra}  # the emulator's tracing endpoints
    return json.dumps({"conn_type": "deployment_service", "host": base_url, "password": api_key, "extra": extra})


@pytest.fixture
def service_connection(deployment_service_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Point ``deployment_service_default`` at a fresh emulator (fast retries) and yield the emulator."""
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            deployment_service_emulator.base_url,
            deployment_service_emulator.api_key,
            backoff_initial=0.01,
            backoff_max=0.05,
        ),
    )
    yield deployment_service_emulator


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker: the slowest modules first (:mod:`tests.worker_order`; every worker collects, and
    all order alike). A run without workers keeps the files' order."""
    if hasattr(config, "workerinput"):
        from tests.worker_order import slowest_modules_first

        items[:] = slowest_modules_first(items)


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """The session's AIRFLOW_HOME, whose SQLite metadata database was migrated at start-up."""
    return _AIRFLOW_HOME


@pytest.fixture
def task_logs(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> Callable[[], str]:
    """Everything the test printed or logged so far (task logs included), for message assertions."""
    captured: list[str] = []

    def read() -> str:
        out, err = capfd.readouterr()
        captured.append(out + err)
        return "\n".join([*captured, caplog.text])

    return read
