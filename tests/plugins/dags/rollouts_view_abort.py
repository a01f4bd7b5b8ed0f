"""A fleet rollout aborted from the Rollouts view (its endpoint test runs it with ``dag.test()`` and aborts it from
the fleet tab while wave 1 bakes): three codehost deployments of the emulator's example data, a canary of one, then
waves of one."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import FleetRolloutOperator

FLEET = ["onboarding-flow-pr-107", "fraud-detector-pr-114", "ledger-service-pr-226"]

with DAG("rollouts_view_abort", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    FleetRolloutOperator(
        task_id="roll_out",
        deployment_names=FLEET,
        canary=1,
        wave_size=1,
        repo_ref="v9.9.9",
        max_failures=0,
        bake_seconds=float(os.environ.get("ROLLOUTS_VIEW_ABORT_BAKE", "6")),
        poll_interval=0.3,
        timeout=60,
        deferrable=False,
        retries=0,
    )
