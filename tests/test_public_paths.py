"""The import paths DAGs already use stay: every documented name still imports from the old module, and is
the same object as in the family module that defines it now. The old modules only re-export."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

OPERATORS = "airflow_provider.operators.deployment_service"
OLD_OPERATOR_ALL = [
    "DeploymentLink",
    "FleetRolloutOperator",
    "ListDeploymentsOperator",
    "ListOAuthProvidersOperator",
    "ListRepositoriesOperator",
    "PatchDeploymentOperator",
    "RollbackDeploymentOperator",
]
"""``__all__`` of the operators module before the split (one module for every operator)."""

# Every documented name of the old operators module -> the module that defines it now.
OPERATOR_NAMES = {
    "DeploymentLink": "airflow_provider.operators.base",
    "XCOM_DEPLOYMENT_ID": "airflow_provider.operators.base",
    "XCOM_REVISION_ID": "airflow_provider.operators.base",
    "XCOM_PREVIOUS_ACTIVE_REVISION_ID": "airflow_provider.operators.base",
    "XCOM_DEPLOYMENT_URL": "airflow_provider.operators.base",
    "XCOM_PREVIOUS_SOURCE_REVISION_CONFIG": "airflow_provider.operators.base",
    "XCOM_PREVIOUS_RESOURCE_SPEC": "airflow_provider.operators.base",
    "XCOM_ROLLED_BACK_FROM": "airflow_provider.operators.base",
    "XCOM_ROLLBACK_PATH": "airflow_provider.operators.base",
    "XCOM_NOT_RESTORED": "airflow_provider.operators.base",
    "XCOM_FLEET_SUMMARY": "airflow_provider.operators.base",
    "ListOAuthProvidersOperator": "airflow_provider.operators.lists",
    "ListRepositoriesOperator": "airflow_provider.operators.lists",
    "ListDeploymentsOperator": "airflow_provider.operators.lists",
    "DEFAULT_MAX_RESULTS": "airflow_provider.operators.lists",
    "PatchDeploymentOperator": "airflow_provider.operators.patch",
    "TASK_STATE_KEY": "airflow_provider.operators.patch",
    "HISTORY_LOOKBACK": "airflow_provider.operators.patch",
    "RollbackDeploymentOperator": "airflow_provider.operators.rollback",
    "ROLLBACK_STATE_KEY": "airflow_provider.operators.rollback",
    "ROLLBACK_CARRY_KEY": "airflow_provider.operators.rollback",
    "FleetRolloutOperator": "airflow_provider.operators.fleet",
    "PATCH_FIELDS": "airflow_provider.operators.fleet",
    "SecretValue": "airflow_provider.tasks.patch_request",
    "build_patch_request": "airflow_provider.tasks.patch_request",
    "describe_patch": "airflow_provider.tasks.patch_request",
    "resolve_secrets": "airflow_provider.tasks.patch_request",
}

# What Airflow and retries in flight already hold: an XCom, a task_state_store record or a trigger's carry
# written by the previous version is read back under these keys after an upgrade.
STORED_KEYS = {
    "XCOM_DEPLOYMENT_ID": "deployment_id",
    "XCOM_REVISION_ID": "revision_id",
    "XCOM_PREVIOUS_ACTIVE_REVISION_ID": "previous_active_revision_id",
    "XCOM_DEPLOYMENT_URL": "deployment_url",
    "XCOM_PREVIOUS_SOURCE_REVISION_CONFIG": "previous_source_revision_config",
    "XCOM_PREVIOUS_RESOURCE_SPEC": "previous_resource_spec",
    "XCOM_ROLLED_BACK_FROM": "rolled_back_from",
    "XCOM_ROLLBACK_PATH": "rollback_path",
    "XCOM_NOT_RESTORED": "not_restored",
    "XCOM_FLEET_SUMMARY": "fleet_summary",
    "TASK_STATE_KEY": "deployment_service_patch",
    "ROLLBACK_STATE_KEY": "deployment_service_rollback",
    "ROLLBACK_CARRY_KEY": "rollback",
}

PUBLIC_PATHS = {OPERATORS: OPERATOR_NAMES}


@pytest.mark.parametrize(
    "old, name, home",
    [(old, name, home) for old, names in PUBLIC_PATHS.items() for name, home in names.items()],
    ids=lambda value: value.rpartition(".")[2],
)
def test_every_documented_name_imports_from_the_old_path_and_its_module_as_one_object(
    old: str, name: str, home: str
) -> None:
    from_old = getattr(importlib.import_module(old), name)
    from_home = getattr(importlib.import_module(home), name)
    assert from_old is from_home
    assert name in importlib.import_module(old).__all__
    if inspect.isclass(from_home) or inspect.isfunction(from_home):
        assert from_home.__module__ == home, f"{name} is defined in {from_home.__module__}, not in {home}"


@pytest.mark.parametrize("old", sorted(PUBLIC_PATHS))
def test_the_old_module_exports_exactly_the_documented_names(old: str) -> None:
    assert sorted(importlib.import_module(old).__all__) == sorted(PUBLIC_PATHS[old])


def test_the_operators_module_keeps_its_old_star_import() -> None:
    namespace: dict[str, object] = {}
    exec(f"from {OPERATORS} import *", namespace)
    assert set(OLD_OPERATOR_ALL) <= set(namespace)


@pytest.mark.parametrize("name, value", sorted(STORED_KEYS.items()))
def test_the_stored_keys_keep_their_values(name: str, value: str) -> None:
    assert getattr(importlib.import_module(OPERATORS), name) == value


@pytest.mark.parametrize("old", sorted(PUBLIC_PATHS))
def test_the_old_modules_only_re_export(old: str) -> None:
    module = importlib.import_module(old)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    defined = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["__all__"]:
            continue
        defined.append(ast.unparse(node).splitlines()[0])
    assert defined == [], f"{old} should only re-export, but defines: {defined}"
