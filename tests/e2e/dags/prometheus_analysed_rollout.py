"""The end-to-end Prometheus scenario's DAG: roll out an image and let a real Prometheus judge it.

patch (deferrable) -> wait until the revision is live -> in the triggerer, every ``interval`` seconds, a
PromQL error rate over ``rate()`` of the emulator's counters, read from a real Prometheus (connection
``prometheus_e2e``), must stay under 5 % -> landed, or rolled back to the revision that served before and
the task fails naming the check.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import Param, dag

from airflow_provider.analysis import Analysis, MetricQueryCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

ERROR_RATE_QUERY = (
    "sum by (name) (rate(deployment_request_errors_total[10s])) / sum by (name) (rate(deployment_requests_total[10s]))"
)
"""The deployment's error rate over the last 10 s: one vector, one sample per deployment (label ``name``)."""
CHECK_NAME = "prometheus error rate"
INTERVAL = float(os.environ.get("E2E_ANALYSIS_INTERVAL", "2"))
ROUNDS = int(os.environ.get("E2E_ANALYSIS_ROUNDS", "20"))


@dag(
    dag_id="prometheus_analysed_rollout",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "deployment_name": Param("checkout-api-staging", type="string"),
        "image_uri": Param("registry.example.com/acme/checkout-api:9.9.9", type="string"),
    },
)
def prometheus_analysed_rollout() -> None:
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ params.deployment_name }}",
        image_uri="{{ params.image_uri }}",
        wait_for_rollout=True,
        deferrable=True,
        rollback_on_failure=True,
        analysis=Analysis(
            checks=[
                MetricQueryCheck(
                    query=ERROR_RATE_QUERY, condition="< 0.05", connection_id="prometheus_e2e", name=CHECK_NAME
                )
            ],
            interval_seconds=INTERVAL,
            count=ROUNDS,
            failure_limit=1,
            inconclusive_limit=2,
        ),
        poll_interval=1.0,
        timeout=180.0,
        retries=0,
    )


prometheus_analysed_rollout()
