"""A fleet rollout behind an approval gate (the Rollouts view's browser test runs it with ``airflow dags test`` and
answers the gate from the fleet tab): two codehost deployments of the emulator's example data roll out once a
person approves."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import FleetRolloutOperator

FLEET = ["inventory-sync-dev", "inventory-sync-sandbox"]

with DAG("rollouts_view_approval", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    ApprovalOperator(
        task_id="approve_rollout",
        subject="Roll v5.0.0 out to the inventory-sync fleet?",
        body="Two deployments, one wave.",
        response_timeout=timedelta(minutes=5),
    ) >> FleetRolloutOperator(
        task_id="roll_out",
        deployment_names=FLEET,
        repo_ref="v5.0.0",
        wave_size=2,
        max_failures=0,
        poll_interval=float(os.environ.get("ROLLOUTS_VIEW_POLL_INTERVAL", "0.3")),
        timeout=60,
        deferrable=False,
        retries=0,
    )
