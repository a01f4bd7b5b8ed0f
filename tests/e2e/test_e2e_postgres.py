"""End-to-end on PostgreSQL (a fresh database per test, a copy of one migrated once), with LocalExecutor and
with CeleryExecutor (Redis broker, PostgreSQL result backend, one worker). Runs in ``.e2e/venv``; skipped where
PostgreSQL or Redis is not reachable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_backends import REDIS_HOST, REDIS_PORT
from e2e_scenarios import rollout_scenario
from e2e_stack import airflow_stack

pytestmark = pytest.mark.e2e


def test_rollouts_on_postgres_local_executor(postgres_url: str, e2e_bin: Path, tmp_path: Path) -> None:
    """PostgreSQL + LocalExecutor: the same scenario on a fresh database."""
    with airflow_stack(
        "postgres-local", tmp_path, e2e_bin, sql_alchemy_conn=postgres_url, database_migrated=True
    ) as stack:
        rollout_scenario(stack, "2.0.0")


def test_rollouts_on_postgres_celery_executor(
    celery_queue: str, postgres_url: str, e2e_bin: Path, tmp_path: Path
) -> None:
    """PostgreSQL + CeleryExecutor (Redis broker, PostgreSQL result backend, one worker): the same scenario."""
    celery_env = {
        "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/0",
        # "db+postgresql://" would pick SQLAlchemy 2.1's default driver, psycopg 3, which is not installed.
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{postgres_url}",
    }
    with airflow_stack(
        "postgres-celery",
        tmp_path,
        e2e_bin,
        sql_alchemy_conn=postgres_url,
        database_migrated=True,
        executor="CeleryExecutor",
        extra_env=celery_env,
        celery_queue=celery_queue,
    ) as stack:
        rollout_scenario(stack, "2.0.0")
