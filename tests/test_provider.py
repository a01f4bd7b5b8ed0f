"""Airflow discovers the provider, its info validates against Airflow's own schema, the form is declared."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest

from airflow_provider.get_provider_info import CONN_FIELDS, PACKAGE_NAME, get_provider_info


def test_provider_info_validates_against_airflows_schema() -> None:
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_package_name_matches_the_distribution_and_entry_point() -> None:
    assert metadata.distribution(PACKAGE_NAME).metadata["Name"] == PACKAGE_NAME
    points = [
        ep for ep in metadata.entry_points(group="apache_airflow_provider") if ep.dist and ep.dist.name == PACKAGE_NAME
    ]
    assert [ep.value for ep in points] == ["airflow_provider.get_provider_info:get_provider_info"]


def test_every_declared_module_and_class_imports() -> None:
    info = get_provider_info()
    import importlib

    for group in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[group]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for dotted in [info["connection-types"][0]["hook-class-name"], *info["extra-links"]]:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


@pytest.mark.parametrize("group", ["operators", "sensors", "triggers"])
def test_every_public_task_module_is_declared(group: str) -> None:
    import importlib
    import pkgutil

    package = importlib.import_module(f"airflow_provider.{group}")
    found = {info.name for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")}
    public = {name for name in found if not name.rpartition(".")[2].startswith("_")}
    declared = {module for entry in get_provider_info()[group] for module in entry["python-modules"]}
    assert declared == public


def test_providers_manager_registers_the_connection_type_and_form() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert PACKAGE_NAME in manager.providers
    hook_info = ProvidersManagerTaskRuntime().hooks["deployment_service"]
    assert hook_info is not None and hook_info.hook_class_name.endswith("DeploymentServiceHook")
    widgets = manager.connection_form_widgets
    for name in CONN_FIELDS:
        assert f"extra__deployment_service__{name}" in widgets
    behaviour = manager.field_behaviours["deployment_service"]
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "API key"}


@pytest.mark.parametrize("command", [["providers", "list"], ["providers", "hooks"]])
def test_airflow_cli_lists_the_provider(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airflow", *command, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert PACKAGE_NAME in result.stdout or "deployment_service" in result.stdout
