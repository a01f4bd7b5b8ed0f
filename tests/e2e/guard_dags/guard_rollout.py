"""End-to-end DAGs of issue 42: a patch that hands its landed revision to the guard, and two guard DAGs of the one
connection (two guard triggers, which the two triggerers of the test may each hold: one regression must still roll
back once). The deployment, the image and the guarded time come from the run's conf."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.guard import Guard
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.plugins.rollouts.guard_dag import guard_dag

ERRORS = TracingProjectCheck(metric="error_rate", condition="< 0.05", name="errors", min_run_count=5)


def guarded_rollout(dag_id: str, for_seconds: float) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        PatchDeploymentOperator(
            task_id="roll_out",
            deployment_name="{{ dag_run.conf['deployment_name'] }}",
            image_uri="{{ dag_run.conf['image_uri'] }}",
            deferrable=True,
            rollback_on_failure=True,
            poll_interval=1,
            timeout=120,
            retries=0,
            analysis=Analysis(checks=[ERRORS], interval_seconds=1, count=2, preflight=False),
            guard=Guard(analysis=Analysis(checks=[ERRORS], interval_seconds=1, count=8), for_seconds=for_seconds),
        )
    return dag


guarded_rollout("guarded_rollout", 300)
guarded_rollout("guarded_rollout_short", 20)
guard_dag(poll_interval=1, rollback_poll_interval=1, timeout=120, retries=0)
guard_dag(dag_id="deployment_service_guard_twin", poll_interval=1.5, rollback_poll_interval=1, timeout=120, retries=0)
