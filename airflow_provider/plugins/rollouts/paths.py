"""Where the Rollouts view lives and where it links to: the app's URL prefix and UI routes, and the Airflow UI
paths of a DAG run, a task instance and its Fleet rollout tab, all under Airflow's base URL path.

The plugin (its navigation entry, tab and extra link), the app (its pages) and the pages' JSON
(:mod:`~airflow_provider.plugins.rollouts.shapes`) all build their paths here. Light: no FastAPI import.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from airflow_provider.defaults import VIEW_URL_PREFIX

URL_PREFIX = VIEW_URL_PREFIX
"""Where the API server mounts the view's FastAPI app (pages, assets and JSON)."""
NAV_ROUTE = "rollouts"
"""The UI route of the navigation entry: ``<airflow>/plugin/rollouts``."""
TAB_ROUTE = "fleet-rollout"
"""The UI route of the task-instance tab: ``.../tasks/<task_id>/plugin/fleet-rollout``."""
ROLLBACK_DAG_ID = "deployment_service_rollback"
"""The provider-shipped DAG that carries out the view's "Roll back to this revision"
(:mod:`~airflow_provider.plugins.rollouts.rollback_dag`)."""
ROLLBACK_TASK_ID = "roll_back"
"""Its one task (a ``RollbackDeploymentOperator``)."""
REQUESTED_FROM = "Rollouts view"
"""Where an action was asked for, as the record and the audit log say it."""


def airflow_root_path() -> str:
    """The path under which Airflow's UI and API are served (``[api] base_url``'s path, ``/`` by default),
    with a trailing slash."""
    from airflow.configuration import conf

    path = urlsplit(conf.get("api", "base_url", fallback="") or "").path or "/"
    return path if path.endswith("/") else path + "/"


def view_path(page: str = "") -> str:
    """The absolute path of one of the view's pages (``deployments``, ``fleet``...), base URL's path included.

    :param page: the page's path under the app, without a leading slash.
    """
    return f"{airflow_root_path()}{URL_PREFIX.strip('/')}/{page}"


def dag_run_path(dag_id: str, run_id: str) -> str:
    """The Airflow UI path of a DAG run.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    """
    return f"{airflow_root_path()}dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The Airflow UI path of a task instance.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index (``-1``: not mapped).
    """
    path = f"{dag_run_path(dag_id, run_id)}/tasks/{quote(task_id, safe='')}"
    return f"{path}/mapped/{map_index}" if map_index >= 0 else path


def task_instance_tab_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The UI path of the Fleet rollout tab of one task instance.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index (``-1``: not mapped).
    """
    return f"{task_instance_path(dag_id, run_id, task_id, map_index)}/plugin/{TAB_ROUTE}"
