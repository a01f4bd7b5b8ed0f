"""End-to-end DAG of issue 39: a patch judged on the worker for a minute, which the test marks failed mid-analysis.

The deployment and the image come from the run's conf. The analysis is a ``CallableCheck`` (it runs on the worker,
where Airflow's ``SIGTERM`` calls the task's ``on_kill``) that always passes: only the kill can stop the rollout.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, CallableCheck
from airflow_provider.models import Deployment
from airflow_provider.operators.deployment_service import PatchDeploymentOperator


def healthy(deployment: Deployment) -> float:
    """An error rate of 0: the revision would pass."""
    return 0.0


with DAG("killed_while_judging", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ dag_run.conf['deployment_name'] }}",
        image_uri="{{ dag_run.conf['image_uri'] }}",
        deferrable=False,
        rollback_on_failure=True,
        poll_interval=1,
        timeout=120,
        retries=0,
        execution_timeout=timedelta(minutes=4),
        analysis=Analysis(
            checks=[CallableCheck(func=healthy, condition="< 0.05")], interval_seconds=2, count=30, preflight=False
        ),
    )
