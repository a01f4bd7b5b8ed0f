"""The Rollouts view's plugin: registered once whichever way Airflow discovers providers, light to load, its
app mounted by the API server, its pages in the UI's navigation and task-instance tabs, and its link on
fleet tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
from fastapi import FastAPI

from airflow_provider.get_provider_info import PLUGIN_CLASS, get_provider_info
from airflow_provider.get_provider_info import PLUGIN_NAME as INFO_PLUGIN_NAME
from airflow_provider.plugins.rollouts import plugin

PROBE = """
import json
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
ours = [p for p in plugins if p.name == "deployment_service_rollouts"]
views = [dict(v) for p in ours for v in p.external_views]
apps = [{"url_prefix": a["url_prefix"], "name": a["name"]} for p in ours for a in p.fastapi_apps]
print(json.dumps({"count": len(ours), "errors": errors, "views": views, "apps": apps}))
"""


def test_the_provider_info_names_the_plugin_class() -> None:
    entry = get_provider_info()["plugins"]
    assert entry == [{"name": plugin.PLUGIN_NAME, "plugin-class": PLUGIN_CLASS}]
    assert f"{plugin.RolloutsViewPlugin.__module__}.{plugin.RolloutsViewPlugin.__name__}" == PLUGIN_CLASS
    assert plugin.RolloutsViewPlugin.name == INFO_PLUGIN_NAME == plugin.PLUGIN_NAME


@pytest.mark.parametrize("lazy", ["True", "False"])
def test_airflow_registers_the_plugin_exactly_once_without_errors(
    airflow_db: str, lazy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS", lazy)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["count"] == 1 and found["errors"] == {}, found
    assert found["apps"] == [{"url_prefix": "/deployment-service", "name": "Deployment service: Rollouts view"}]
    by_route = {view["url_route"]: view for view in found["views"]}
    assert by_route["rollouts"]["destination"] == "nav" and by_route["rollouts"]["nav_top_level"] is True
    assert by_route["rollouts"]["href"] == "/deployment-service/deployments"
    assert by_route["fleet-rollout"]["destination"] == "task_instance"
    assert by_route["fleet-rollout"]["href"] == (
        "/deployment-service/fleet?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"
    )


def test_loading_the_plugin_imports_neither_fastapi_nor_the_operators(airflow_db: str) -> None:
    probe = (
        "import sys, airflow.sdk.plugins_manager\n"
        "import airflow_provider.plugins.rollouts.plugin\n"
        "print(sorted(m for m in sys.modules if m.startswith(('fastapi', 'airflow_provider'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert "fastapi" not in loaded and "operators" not in loaded and "hooks" not in loaded, loaded


def test_the_api_server_mounts_the_app_where_the_views_point() -> None:
    from airflow.api_fastapi.app import init_plugins

    app = FastAPI()
    init_plugins(app)
    mounted = {getattr(route, "path", None) for route in app.routes}
    assert plugin.URL_PREFIX in mounted


def test_fleet_tasks_get_a_link_to_their_tab_and_other_tasks_do_not() -> None:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider.operators.deployment_service import FleetRolloutOperator, PatchDeploymentOperator

    with DAG("rollouts_view_link", schedule=None) as dag:
        FleetRolloutOperator(task_id="fleet", deployment_names=["a"], image_uri="r/i:1")
        PatchDeploymentOperator(task_id="patch", deployment_name="a", image_uri="r/i:1")
    served: Any = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # as the API server reads it
    fleet, patch = served.get_task("fleet"), served.get_task("patch")
    assert "Fleet rollout" in fleet.extra_links and "Fleet rollout" not in patch.extra_links
    key = TaskInstanceKey("rollouts_view_link", "fleet", "manual__2026-01-01T00:00:00+00:00", 1, -1)
    link = fleet.operator_extra_link_dict["Fleet rollout"].get_link(fleet, ti_key=key)
    assert (
        link
        == "/dags/rollouts_view_link/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/fleet/plugin/fleet-rollout"
    )
    mapped = fleet.operator_extra_link_dict["Fleet rollout"].get_link(fleet, ti_key=key._replace(map_index=3))
    assert mapped.endswith("/tasks/fleet/mapped/3/plugin/fleet-rollout")


def test_paths_follow_a_base_url_with_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/team-a")
    assert plugin.view_path("deployments") == "/team-a/deployment-service/deployments"
    assert plugin.task_instance_tab_path("d", "r", "t") == "/team-a/dags/d/runs/r/tasks/t/plugin/fleet-rollout"


def ui_tab_src(href: str, dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
    """The iframe ``src`` Airflow 3.3's UI builds from a ``task_instance`` view's href: ``{DAG_ID}``,
    ``{RUN_ID}`` and ``{TASK_ID}`` URL-encoded, ``{MAP_INDEX}`` only on a mapped task instance's route
    (``.../mapped/<index>/plugin/...``); on an unmapped one it stays as it is (``ui/dist``, ``replaceAll``)."""
    src = href.replace("{DAG_ID}", quote(dag_id, safe="")).replace("{RUN_ID}", quote(run_id, safe=""))
    src = src.replace("{TASK_ID}", quote(task_id, safe=""))
    return src if map_index is None else src.replace("{MAP_INDEX}", str(map_index))


@pytest.mark.parametrize(("ui_map_index", "expected"), [(None, "-1"), (3, "3")])
def test_the_fleet_tabs_url_carries_the_real_map_index(
    view: Any, token: Any, ui_map_index: int | None, expected: str
) -> None:
    tab = next(v for v in plugin.RolloutsViewPlugin.external_views if v["destination"] == "task_instance")
    run_id = "manual__2026-01-01T00:00:00+00:00"
    src = ui_tab_src(tab["href"], "fleet dag", run_id, "roll_out", ui_map_index)
    answer = view(cookie=token("viewer")).get(src)
    assert answer.status_code == 200 and 'data-page="fleet"' in answer.text, answer.text[:300]
    shown = urlsplit(str(answer.url))
    assert "MAP_INDEX" not in unquote(str(answer.url)), f"the tab's URL ended as {answer.url}"
    assert parse_qs(shown.query) == {
        "dag_id": ["fleet dag"],
        "run_id": [run_id],
        "task_id": ["roll_out"],
        "map_index": [expected],
    }, f"the tab's URL ended as {answer.url} (from {src})"
