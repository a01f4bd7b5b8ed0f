"""The DAG behind the Rollouts view's "Roll back to this revision", as a user enables it (the browser test's
scheduler runs what the view triggers)."""

from __future__ import annotations

import os

from airflow_provider.plugins.rollouts.rollback_dag import rollback_dag

rollback_dag(poll_interval=float(os.environ.get("ROLLOUTS_VIEW_POLL_INTERVAL", "0.3")), timeout=60)
