"""A rollout that its ``verify`` rejects and that rolls itself back (the Rollouts view's browser test runs it with
``airflow dags test`` after the fleet rollout): the task fails, emits no asset event, and its record credits the
rejected revision, the one it rolled back to and the rollback's own revision to this DAG run."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import PatchDeploymentOperator


def refuse(deployment: object) -> bool:
    """The new revision serves, but the check after it says no."""
    return False


with DAG("rollouts_view_rejected", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="checkout-api-dev",
        repo_ref="{{ dag_run.conf.get('ref', 'v2.1.0') }}",
        wait_for_rollout=True,
        verify=refuse,
        rollback_on_failure=True,
        poll_interval=float(os.environ.get("ROLLOUTS_VIEW_POLL_INTERVAL", "0.3")),
        timeout=60,
        deferrable=False,
        retries=0,
    )
