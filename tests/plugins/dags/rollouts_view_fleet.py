"""The fleet rollout the Rollouts view's browser test runs (``airflow dags test``) while it watches the tab.

``wait_for_go`` holds the run until the test creates the file ``ROLLOUTS_VIEW_GO_FILE`` names (so the
browser is on the tab before the first wave starts); then six codehost deployments of the emulator's example
data roll out: a canary, then waves of two, within a budget of one failure.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.deployment_service import FleetRolloutOperator

FLEET = [
    "checkout-api-dev",
    "checkout-api-prod",
    "checkout-api-sandbox",
    "search-dev",
    "support-bot-staging",
    "support-bot-prod",
]
GO_TIMEOUT = 120.0


@task
def wait_for_go() -> None:
    """Return once the file ``ROLLOUTS_VIEW_GO_FILE`` names exists (at once when the variable is unset)."""
    path = os.environ.get("ROLLOUTS_VIEW_GO_FILE")
    deadline = time.monotonic() + GO_TIMEOUT
    while path and not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AirflowFailException(f"{path} did not appear within {GO_TIMEOUT:g} s")
        time.sleep(0.1)


with DAG("rollouts_view_fleet", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    wait_for_go() >> FleetRolloutOperator(
        task_id="roll_out",
        deployment_names=FLEET,
        repo_ref="{{ dag_run.conf.get('ref', 'v2.0.0') }}",
        canary=1,
        wave_size=2,
        max_failures=1,
        poll_interval=float(os.environ.get("ROLLOUTS_VIEW_POLL_INTERVAL", "0.3")),
        timeout=60,
        deferrable=False,
        retries=0,
    )
