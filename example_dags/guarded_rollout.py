"""Roll out an image, and keep guarding it after it landed: roll it back once if it regresses later.

patch the deployment named in the params (``image_uri``) -> wait (deferrable) until the new revision is live ->
analyse it (its tracing project's error rate under 5 %) -> landed: the task hands the revision to the guard and
ends. For ``GUARD_SECONDS`` after landing the guard (a trigger in the triggerer, nothing on a worker) keeps
measuring the revision's error rate, one analysis window after the other; the day its error rate rises above 5 %,
``deployment_service_guard`` (the DAG :func:`~airflow_provider.plugins.rollouts.guard_dag.guard_dag` builds,
scheduled on the guard's events) rolls it back to the revision that served before, once, and records why.

Any rollout can be guarded the same way: ``guard=Guard(analysis=..., for_seconds=...)`` on
``PatchDeploymentOperator`` or ``FleetRolloutOperator``. See ``docs/guides/guard.md``.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import Param, dag

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.guard import Guard
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.plugins.rollouts.guard_dag import guard_dag

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ANALYSIS_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "60"))
GUARD_SECONDS = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_GUARD_SECONDS", "86400"))

ERRORS = TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=20, name="errors")

# [START guard]
GUARD = Guard(
    # One window of 10 rounds after the other, each measuring the runs since it started.
    analysis=Analysis(checks=[ERRORS], interval_seconds=ANALYSIS_INTERVAL, count=10),
    for_seconds=GUARD_SECONDS,
)
# [END guard]


@dag(
    dag_id="guarded_rollout",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "deployment_name": Param("checkout-api-staging", type="string", description="deployment to roll out"),
        "image_repository": Param("registry.example.com/acme/checkout-api", type="string"),
        "version": Param("1.0.0", type="string", description="the image tag to roll out"),
    },
    doc_md=__doc__,
)
def guarded_rollout() -> None:
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ params.deployment_name }}",
        image_uri="{{ params.image_repository }}:{{ params.version }}",
        deferrable=True,
        analysis=Analysis(checks=[ERRORS], interval_seconds=ANALYSIS_INTERVAL, count=2, preflight=False),
        rollback_on_failure=True,
        guard=GUARD,
        poll_interval=POLL_INTERVAL,
        retries=0,
    )


guarded_rollout()
# The guard's DAG of the default connection: rolls a regressed revision back (one per connection, like the
# Rollouts view's rollback DAG: build it once in your DAGs folder).
guard_dag(poll_interval=POLL_INTERVAL, rollback_poll_interval=POLL_INTERVAL)
