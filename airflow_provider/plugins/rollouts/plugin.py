"""The Rollouts view's Airflow plugin: the provider's FastAPI app, its pages in the UI, and the fleet task's link.

Airflow loads plugins in every component, the task runner included, so this module stays light: the
FastAPI app (:mod:`airflow_provider.plugins.rollouts.app`) is built on its first request in the API server,
and :class:`FleetRolloutViewLink` names the operator it belongs to without importing the operators module.

What the plugin adds to the UI:

- a **Rollouts** entry in the navigation (an ``external_views`` entry with ``destination: nav``): every
  deployment of a connection, and each deployment's revisions and rollouts;
- a **Fleet rollout** tab on task instances (``destination: task_instance``): the waves of a
  ``FleetRolloutOperator`` task, updated while it runs. Airflow 3.3 shows a plugin's tab on every task
  instance (it cannot filter by operator); the page says so when the task is not a fleet rollout;
- a **Fleet rollout** extra link on ``FleetRolloutOperator`` tasks that opens that tab.

And to the API server, a root middleware
(:class:`~airflow_provider.plugins.rollouts.questions.QuestionTextMiddleware`): each question a task of this
provider asks shows its own text on Airflow's "Required actions" page, not the first question's of its task
instance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

from airflow_provider.plugins.rollouts.paths import NAV_ROUTE, TAB_ROUTE, URL_PREFIX, task_instance_tab_path, view_path
from airflow_provider.plugins.rollouts.paths import airflow_root_path as airflow_root_path
from airflow_provider.plugins.rollouts.questions import QuestionTextMiddleware

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

PLUGIN_NAME = "deployment_service_rollouts"
"""The plugin's name (``airflow plugins`` lists it under this name)."""
FLEET_OPERATOR = ("airflow_provider.operators.deployment_service", "FleetRolloutOperator")
"""Module and name of the operator whose tasks get the extra link."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _LazyApp:
    """An ASGI app that builds the view's FastAPI app on its first request (in the API server only)."""

    def __init__(self) -> None:
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from airflow_provider.plugins.rollouts.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class _FleetOperators:
    """``FleetRolloutViewLink.operators``: the operator class, imported only when Airflow asks (when the API
    server reads a serialized DAG), not when a task runner loads the plugin."""

    def __get__(self, instance: object, owner: type | None = None) -> list[type[BaseOperator]]:
        import importlib

        module, name = FLEET_OPERATOR
        return [getattr(importlib.import_module(module), name)]


class FleetRolloutViewLink(BaseOperatorLink):
    """The extra link of ``FleetRolloutOperator`` tasks: their Fleet rollout tab in the Airflow UI.

    Registered through the plugin (``operator_extra_links``), so Airflow computes it in the API server from
    the task instance's key; nothing is pushed to XCom.
    """

    name = "Fleet rollout"
    operators = _FleetOperators()

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The path of the task instance's Fleet rollout tab.

        :param operator: the task.
        :param ti_key: the task instance.
        """
        return task_instance_tab_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index)


class RolloutsViewPlugin(AirflowPlugin):
    """The Rollouts view: registered through the provider info (``plugins``) and the ``airflow.plugins``
    entry point."""

    name = PLUGIN_NAME
    fastapi_apps = [{"app": _LazyApp(), "url_prefix": URL_PREFIX, "name": "Deployment service: Rollouts view"}]
    fastapi_root_middlewares = [
        {"middleware": QuestionTextMiddleware, "args": [], "kwargs": {}, "name": "Deployment service: question text"}
    ]
    external_views = [
        {
            "name": "Rollouts",
            "href": view_path("deployments"),
            "destination": "nav",
            "url_route": NAV_ROUTE,
            "nav_top_level": True,
            "icon": view_path("static/rollouts.svg"),
        },
        {
            "name": "Fleet rollout",
            "href": view_path("fleet?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"),
            "destination": "task_instance",
            "url_route": TAB_ROUTE,
            "icon": view_path("static/rollouts.svg"),
        },
    ]
    operator_extra_links = [FleetRolloutViewLink()]


def _entry_point_plugin() -> type[RolloutsViewPlugin] | None:
    """The plugin for the ``airflow.plugins`` entry point, unless the provider info registers it already.

    Airflow 3.3 loads the provider info's ``plugins`` only with ``[core] lazy_discover_providers = False``;
    with the default (``True``) only the entry point loads it. Loaded both ways, Airflow would report the
    second as a plugin import error ("already registered"): so the entry point gives ``None`` (which
    Airflow skips quietly) when the provider info's route is on.
    """
    from airflow import settings

    return RolloutsViewPlugin if getattr(settings, "LAZY_LOAD_PROVIDERS", True) else None


ENTRY_POINT_PLUGIN = _entry_point_plugin()
"""What the ``airflow.plugins`` entry point names (see :func:`_entry_point_plugin`)."""

__all__ = ["ENTRY_POINT_PLUGIN", "FleetRolloutViewLink", "RolloutsViewPlugin", "task_instance_tab_path", "view_path"]
