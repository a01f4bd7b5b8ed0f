"""A rollout judged by an analysis that passes (the Rollouts view's browser test runs it with ``airflow dags test``
before rolling it back from the view): its measurements are the deployment page's charts, and the revision it
rolled out is the one the admin then rolls back from."""

from __future__ import annotations

import os
from datetime import datetime
from itertools import count

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, CallableCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

_LATENCY = count()


def p95_latency_ms(deployment: object) -> float:
    """A latency that wobbles under its threshold, round after round."""
    return (410.0, 520.0, 470.0, 610.0, 480.0)[next(_LATENCY) % 5]


def error_rate(deployment: object) -> float:
    return 0.004


with DAG("rollouts_view_analysed", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="billing-worker-sandbox",
        repo_ref="v3.0.0",
        wait_for_rollout=True,
        analysis=Analysis(
            checks=[
                CallableCheck(func=p95_latency_ms, condition="< 800", name="p95 latency ms"),
                CallableCheck(func=error_rate, condition="< 0.05", name="error rate"),
            ],
            interval_seconds=0.3,
            count=5,
        ),
        rollback_on_failure=True,
        poll_interval=float(os.environ.get("ROLLOUTS_VIEW_POLL_INTERVAL", "0.3")),
        timeout=60,
        deferrable=False,
        retries=0,
    )
