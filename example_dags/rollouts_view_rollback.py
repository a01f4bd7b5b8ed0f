"""The DAG behind the Rollouts view's "Roll back to this revision" button (``deployment_service_rollback``).

Airflow reads DAGs from its DAGs folder, not from installed packages: this one file enables the button. The
view triggers a run for the user who confirmed; the task rolls the deployment back with the guarantees of
``RollbackDeploymentOperator`` and records who asked. See ``docs/rollouts-view.md`` (Actions).
"""

from __future__ import annotations

import os

from airflow_provider.plugins.rollouts.rollback_dag import rollback_dag

# Production pacing; the demo and the tests shorten it through these environment variables.
rollback_dag(
    poll_interval=float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15")),
    timeout=float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800")),
)
