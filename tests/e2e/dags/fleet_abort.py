"""End-to-end DAGs of issue 32: a deferrable fleet rollout aborted from the Rollouts view while it waits in the
triggerer. ``fleet_abort_pause`` pauses ten minutes after its canary; ``fleet_abort_bake`` bakes its canary ten
minutes. The deployments (comma-separated) and the image come from the run's conf."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import FleetRolloutOperator

LONG = 600.0
"""Each wait is ten minutes: a run that ends within a minute of its abort was resumed by the view."""


def fleet(**waits: float) -> FleetRolloutOperator:
    return FleetRolloutOperator(
        task_id="fleet",
        deployment_names="{{ dag_run.conf['deployment_names'] }}",
        image_uri="{{ dag_run.conf['image_uri'] }}",
        canary=1,
        deferrable=True,
        rollback_on_failure=True,
        poll_interval=1,
        timeout=2 * LONG,
        retries=0,
        **waits,
    )


with DAG("fleet_abort_pause", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    fleet(pause_seconds=LONG)

with DAG("fleet_abort_bake", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    fleet(bake_seconds=LONG)
