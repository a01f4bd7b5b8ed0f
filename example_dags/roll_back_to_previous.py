"""Roll a deployment back to the revision that served before the current one, without looking up its id.

Run it by hand when the revision serving now is bad. ``list_revisions`` logs and returns the deployment's
revisions, newest first, with their status and build, so the run shows what there was to choose from;
``roll_back`` then returns to ``revision_id="previous"``: the newest revision older than the serving one
that was deployed (a build that failed, and so never served, is skipped), and waits until it serves again.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag

from airflow_provider.operators.deployment_service import ListRevisionsOperator, RollbackDeploymentOperator


@dag(
    dag_id="roll_back_to_previous",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={"deployment_name": Param("checkout-api-staging", type="string")},
    doc_md=__doc__,
)
def roll_back_to_previous() -> None:
    revisions = ListRevisionsOperator(
        task_id="list_revisions",
        deployment_name="{{ params.deployment_name }}",
        max_results=20,
    )
    roll_back = RollbackDeploymentOperator(
        task_id="roll_back",
        deployment_name="{{ params.deployment_name }}",
        revision_id="previous",  # the revision that served before the current one
        poll_interval=1,
        timeout=600,
    )
    revisions >> roll_back


roll_back_to_previous()
