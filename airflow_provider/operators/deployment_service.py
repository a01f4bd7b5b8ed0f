"""The operators' public import path: ``from airflow_provider.operators.deployment_service import
PatchDeploymentOperator``. Re-exports only.

Each family stands in its own module: :mod:`~airflow_provider.operators.lists` (the list operators),
:mod:`~airflow_provider.operators.patch`, :mod:`~airflow_provider.operators.rollback`,
:mod:`~airflow_provider.operators.fleet`, :mod:`~airflow_provider.operators.analysis` (the standalone
analysis gate), and :mod:`~airflow_provider.operators.base` (the XCom keys and
the ``Deployment`` extra link every operator shares). The names below are the same objects as there, under
the path DAGs have always imported; either path works.
"""

from __future__ import annotations

from airflow_provider.operators.analysis import DeploymentAnalysisOperator
from airflow_provider.operators.base import (
    XCOM_DEPLOYMENT_ID,
    XCOM_DEPLOYMENT_URL,
    XCOM_FLEET_SUMMARY,
    XCOM_NOT_RESTORED,
    XCOM_PREVIOUS_ACTIVE_REVISION_ID,
    XCOM_PREVIOUS_RESOURCE_SPEC,
    XCOM_PREVIOUS_SOURCE_REVISION_CONFIG,
    XCOM_REVISION_ID,
    XCOM_ROLLBACK_PATH,
    XCOM_ROLLED_BACK_FROM,
    DeploymentLink,
)
from airflow_provider.operators.fleet import PATCH_FIELDS, FleetRolloutOperator
from airflow_provider.operators.lists import (
    DEFAULT_MAX_RESULTS,
    ListDeploymentsOperator,
    ListOAuthProvidersOperator,
    ListRepositoriesOperator,
    ListRevisionsOperator,
)
from airflow_provider.operators.patch import HISTORY_LOOKBACK, TASK_STATE_KEY, PatchDeploymentOperator
from airflow_provider.operators.rollback import ROLLBACK_CARRY_KEY, ROLLBACK_STATE_KEY, RollbackDeploymentOperator
from airflow_provider.tasks.request import SecretValue, build_patch_request, describe_patch, resolve_secrets

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "HISTORY_LOOKBACK",
    "PATCH_FIELDS",
    "ROLLBACK_CARRY_KEY",
    "ROLLBACK_STATE_KEY",
    "TASK_STATE_KEY",
    "XCOM_DEPLOYMENT_ID",
    "XCOM_DEPLOYMENT_URL",
    "XCOM_FLEET_SUMMARY",
    "XCOM_NOT_RESTORED",
    "XCOM_PREVIOUS_ACTIVE_REVISION_ID",
    "XCOM_PREVIOUS_RESOURCE_SPEC",
    "XCOM_PREVIOUS_SOURCE_REVISION_CONFIG",
    "XCOM_REVISION_ID",
    "XCOM_ROLLBACK_PATH",
    "XCOM_ROLLED_BACK_FROM",
    "DeploymentAnalysisOperator",
    "DeploymentLink",
    "FleetRolloutOperator",
    "ListDeploymentsOperator",
    "ListOAuthProvidersOperator",
    "ListRepositoriesOperator",
    "ListRevisionsOperator",
    "PatchDeploymentOperator",
    "RollbackDeploymentOperator",
    "SecretValue",
    "build_patch_request",
    "describe_patch",
    "resolve_secrets",
]
