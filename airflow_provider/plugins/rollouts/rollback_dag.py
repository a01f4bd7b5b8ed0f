"""The DAG that carries out the Rollouts view's "Roll back to this revision": one ``RollbackDeploymentOperator``
task, with the operator's guarantees (the rollback is recorded before it is sent, a retry never rolls back twice,
and it refuses when a newer revision than the one the confirmation named went out meanwhile).

The view triggers a run of it (``conf``: the connection, the deployment, the revision to return to and the one
being rolled back) on behalf of the user who confirmed; the task records that user (the run's
``triggering_user_name``, set by Airflow from the authenticated user) and where they asked.

Airflow reads DAGs from its DAG bundles, not from installed packages, so enable it with a file in the DAGs folder::

    from airflow_provider.plugins.rollouts.rollback_dag import rollback_dag

    rollback_dag()
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param

from airflow_provider.operators.rollback import RollbackDeploymentOperator
from airflow_provider.plugins.rollouts.paths import REQUESTED_FROM, ROLLBACK_DAG_ID, ROLLBACK_TASK_ID

__all__ = ["rollback_dag"]

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def rollback_dag(
    *,
    poll_interval: float = 15.0,
    timeout: float = 1800.0,
    retries: int = 2,
    **dag_kwargs: Any,
) -> DAG:
    """The rollback DAG (``deployment_service_rollback``): build it at the top level of a DAG file.

    :param poll_interval: seconds between looks while the restored revision goes live.
    :param timeout: longest wait for it to serve, in seconds.
    :param retries: the task's retries (a retry reattaches to the rollback its earlier try sent).
    :param dag_kwargs: more ``DAG`` arguments (``tags``, ``access_control``...); ``dag_id`` stays
        ``deployment_service_rollback``, the id the view triggers. Not paused upon creation by default (the view
        refuses to trigger it while it is paused).
    """
    dag_kwargs.setdefault("tags", ["deployment-service", "rollouts-view"])
    dag_kwargs.setdefault("is_paused_upon_creation", False)  # a paused DAG would leave the view's runs queued
    with DAG(
        dag_id=ROLLBACK_DAG_ID,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        doc_md=__doc__,
        params={
            "conn_id": Param("deployment_service_default", type="string", description="the connection"),
            "deployment_id": Param("", type="string", pattern=UUID_PATTERN, description="the deployment"),
            "revision_id": Param("", type="string", pattern=UUID_PATTERN, description="the revision to return to"),
            "rolling_back_from": Param(
                "", type="string", description="the revision being rolled back (refused if a newer one went out)"
            ),
            "requested_from": Param(REQUESTED_FROM, type="string", description="where the rollback was asked for"),
        },
        **dag_kwargs,
    ) as dag:
        RollbackDeploymentOperator(
            task_id=ROLLBACK_TASK_ID,
            deployment_service_conn_id="{{ params.conn_id }}",
            deployment_id="{{ params.deployment_id }}",
            revision_id="{{ params.revision_id }}",
            rolling_back_from="{{ params.rolling_back_from }}",
            requested_by="{{ dag_run.triggering_user_name }}",
            requested_from="{{ params.requested_from }}",
            poll_interval=poll_interval,
            timeout=timeout,
            retries=retries,
            retry_delay=timedelta(seconds=10),
        )
    return dag
