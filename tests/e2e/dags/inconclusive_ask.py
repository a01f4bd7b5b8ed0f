"""End-to-end DAGs of issue 32: a patch whose analysis is inconclusive asks a person (``on_inconclusive="ask"``).

``inconclusive_ask`` waits up to 10 minutes for the answer; ``inconclusive_ask_timeout`` only
``E2E_RESPONSE_TIMEOUT`` seconds (then the scheduler answers the default: roll back). The deployment and the image
come from the run's conf. ``inconclusive_ask_fleet`` rolls the image out to a fleet (``FleetRolloutOperator``: the
run's ``deployment_names``, comma-separated, a canary of one, then one wave) and asks about each wave's inconclusive
analysis.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import FleetRolloutOperator, PatchDeploymentOperator


def analysis() -> Analysis:
    return Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")],
        interval_seconds=1,
        count=2,
        preflight=False,  # the serving revision has no traffic either: this test is about the verdict
    )


def roll_out(response_timeout: timedelta) -> PatchDeploymentOperator:
    return PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ dag_run.conf['deployment_name'] }}",
        image_uri="{{ dag_run.conf['image_uri'] }}",
        wait_for_rollout=True,
        deferrable=True,
        rollback_on_failure=True,
        poll_interval=1,
        timeout=180,
        retries=0,
        analysis=analysis(),
        on_inconclusive="ask",
        response_timeout=response_timeout,
    )


with DAG("inconclusive_ask", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    roll_out(timedelta(minutes=10))

with DAG("inconclusive_ask_timeout", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    roll_out(timedelta(seconds=float(os.environ.get("E2E_RESPONSE_TIMEOUT", "20"))))

with DAG("inconclusive_ask_fleet", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    FleetRolloutOperator(
        task_id="fleet",
        deployment_names="{{ dag_run.conf['deployment_names'] }}",
        image_uri="{{ dag_run.conf['image_uri'] }}",
        canary=1,
        deferrable=True,
        rollback_on_failure=True,
        poll_interval=1,
        timeout=180,
        retries=0,
        analysis=analysis(),
        on_inconclusive="ask",
        response_timeout=timedelta(minutes=10),
    )
