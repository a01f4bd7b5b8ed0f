"""The import paths DAGs already use stay: every documented name still imports from the old module, and is
the same object as in the family module that defines it now. The old modules only re-export."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
from airflow._shared.module_loading import import_string

from airflow_provider.triggers.rollout import DeploymentRolloutTrigger

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
    "ListRevisionsOperator": "airflow_provider.operators.lists",
    "DEFAULT_MAX_RESULTS": "airflow_provider.operators.lists",
    "PatchDeploymentOperator": "airflow_provider.operators.patch",
    "TASK_STATE_KEY": "airflow_provider.operators.patch",
    "HISTORY_LOOKBACK": "airflow_provider.operators.patch",
    "RollbackDeploymentOperator": "airflow_provider.operators.rollback",
    "ROLLBACK_STATE_KEY": "airflow_provider.operators.rollback",
    "ROLLBACK_CARRY_KEY": "airflow_provider.operators.rollback",
    "FleetRolloutOperator": "airflow_provider.operators.fleet",
    "DeploymentAnalysisOperator": "airflow_provider.operators.analysis",
    "PATCH_FIELDS": "airflow_provider.operators.fleet",
    "SecretValue": "airflow_provider.tasks.request",
    "build_patch_request": "airflow_provider.tasks.request",
    "describe_patch": "airflow_provider.tasks.request",
    "resolve_secrets": "airflow_provider.tasks.request",
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

TRIGGERS = "airflow_provider.triggers.deployment_service"

# Every documented name of the old triggers module -> the module that defines it now.
TRIGGER_NAMES = {
    "REVISION_CHECK_CONCURRENCY": "airflow_provider.triggers.poller",
    "active_pollers": "airflow_provider.triggers.poller",
    "EVENT_STATUSES": "airflow_provider.triggers.rollout",
    "DeploymentRolloutTrigger": "airflow_provider.triggers.rollout",
    "DeploymentBakeTrigger": "airflow_provider.triggers.rollout",
    "FleetWaveTrigger": "airflow_provider.triggers.fleet",
    "DeploymentAnalysisTrigger": "airflow_provider.triggers.analysis",
    "ANALYSIS_EVENT_STATUSES": "airflow_provider.triggers.analysis",
    "DeploymentEventTrigger": "airflow_provider.triggers.watcher",
    "CURSOR_KEY_PREFIX": "airflow_provider.triggers.watcher",
    "CURSOR_COMMIT_DELAY": "airflow_provider.triggers.watcher",
    "CURSOR_LOAD_ATTEMPTS": "airflow_provider.triggers.watcher",
    "DEFAULT_EVENT_POLL_INTERVAL": "airflow_provider.triggers.watcher",
    "FILTER_NAMES": "airflow_provider.triggers.watcher",
    "GONE": "airflow_provider.triggers.watcher",
    "DeploymentGuardTrigger": "airflow_provider.triggers.guard",
    "REGRESSED": "airflow_provider.triggers.guard",
}

CLIENT = "airflow_provider.client"

# The names the client module defined or imported from its settings, pagination and error text, which code
# imports from the client -> the module that defines them now (the client is a package of one module per role).
CLIENT_NAMES = {
    "DeploymentServiceClient": "airflow_provider.client.sync_client",
    "AsyncDeploymentServiceClient": "airflow_provider.client.async_client",
    "Call": "airflow_provider.client.calls",
    "LogType": "airflow_provider.client.calls",
    "LogOrder": "airflow_provider.client.calls",
    "MAX_LOG_LIMIT": "airflow_provider.client.calls",
    "NEAR_NAMES_SHOWN": "airflow_provider.client.calls",
    "REVISION_CONFIG_FIELDS": "airflow_provider.client.calls",
    "same_revision_config": "airflow_provider.client.calls",
    "USER_AGENT": "airflow_provider.client.exchange",
    "AmbiguousFailure": "airflow_provider.client.exchange",
    "READ_BACK_SHARES": "airflow_provider.client.once_only",
    "READ_BACK_WINDOW_MAX": "airflow_provider.client.once_only",
    "Landing": "airflow_provider.client.once_only",
    "read_back_waits": "airflow_provider.client.once_only",
    "ClientSettings": "airflow_provider.client.settings",
    "RetryPolicy": "airflow_provider.client.settings",
    "normalize_base_url": "airflow_provider.client.settings",
    "is_loopback_host": "airflow_provider.client.settings",
    "LOOPBACK_NAMES": "airflow_provider.client.settings",
    "DeploymentPaginator": "airflow_provider.client.pagination",
    "RevisionPager": "airflow_provider.client.pagination",
    "describe_validation_error": "airflow_provider.client.error_text",
    "detail_text": "airflow_provider.client.error_text",
    "parse_detail": "airflow_provider.client.error_text",
    "scrub": "airflow_provider.client.error_text",
    "scrub_detail": "airflow_provider.client.error_text",
    "MIN_LENGTH_MASKED_SECRET": "airflow_provider.client.error_text",
}

# The errors and models the client module imported, which code imports from it too (``from
# airflow_provider.client import AuthError``): the client hands them on from the layers below, as the same objects.
CLIENT_HANDS_ON = {
    "airflow_provider.errors": [
        "AmbiguousDeploymentNameError",
        "ApiError",
        "AuthError",
        "ConflictError",
        "DeploymentNameNotFoundError",
        "DeploymentServiceError",
        "InvalidRequestError",
        "NotFoundError",
        "RateLimitedError",
        "RequestRejectedError",
        "ServerError",
        "TlsError",
        "TransportError",
        "UnexpectedResponseError",
    ],
    "airflow_provider.models": [
        "MAX_PAGE_SIZE",
        "CreateDeploymentRequest",
        "Deployment",
        "DeploymentListPage",
        "DeploymentPageReader",
        "ListDeploymentsQuery",
        "OAuthProvider",
        "PatchDeploymentRequest",
        "Repository",
        "Revision",
        "RevisionListPage",
        "RevisionLogPage",
        "RevisionStatus",
        "SourceRevisionConfig",
        "canonical_uuid",
    ],
}

MODELS = "airflow_provider.models"
_SPEC = "airflow_provider.models.resource_spec"
_RESOURCES = "airflow_provider.models.resources"

# Every public name of the one-module schema (``models.py``) -> the module of the package that defines it now.
MODEL_NAMES = {
    "canonical_uuid": "airflow_provider.models.fields",
    "error_message": "airflow_provider.models.fields",
    "UuidStr": "airflow_provider.models.fields",
    "Timestamp": "airflow_provider.models.fields",
    **dict.fromkeys(
        ["DeploymentSource", "RevisionSource", "DeploymentStatus", "DeploymentType", "RevisionStatus", "OpenEnum"],
        "airflow_provider.models.enums",
    ),
    "ServiceModel": "airflow_provider.models.base",
    "RequestModel": "airflow_provider.models.base",
    **dict.fromkeys(
        [
            "ImagePullSecret",
            "Volume",
            "VolumeMount",
            "EnvVar",
            "ContainerResources",
            "Container",
            "Number",
            "ResourceSpec",
            "WholeNumber",
            "Cpu",
            "CpuLimit",
            "OtherCpu",
            "DISCOURAGED_RESOURCE_PREFIXES",
            "KubernetesQuantity",
            "ContainerResourcesPatch",
            "VolumeMountPatch",
            "ContainerPatch",
            "ResourceSpecPatch",
            "CarriedResourceSpec",
        ],
        _SPEC,
    ),
    **dict.fromkeys(
        ["ListenerConfig", "SourceConfig", "SourceConfigPatch", "SourceRevisionConfigPatch", "SourceRevisionConfig"],
        "airflow_provider.models.source_config",
    ),
    "REDACTED": "airflow_provider.models.secrets",
    "Secret": "airflow_provider.models.secrets",
    "SecretReference": "airflow_provider.models.secrets",
    **dict.fromkeys(
        [
            "STRICT_READING",
            "OAuthProvider",
            "DeploymentCreationValues",
            "Repository",
            "Deployment",
            "DeploymentListPage",
            "DeploymentPageReader",
            "Revision",
            "RevisionListPage",
            "LogLine",
            "RevisionLogPage",
            "ErrorDetail",
        ],
        _RESOURCES,
    ),
    **dict.fromkeys(
        [
            "MAX_PAGE_SIZE",
            "DEFAULT_PAGE_SIZE",
            "PatchDeploymentRequest",
            "CreateDeploymentRequest",
            "ListDeploymentsQuery",
        ],
        "airflow_provider.models.requests",
    ),
}

EMULATOR_STATE = "airflow_provider.emulator.state"

# What the emulator's state module defined -> the module of the state package that defines it now (the state
# is made of parts, one module each).
EMULATOR_STATE_NAMES = {
    "EmulatorState": EMULATOR_STATE,
    "DEFAULT_TENANT_ID": "airflow_provider.emulator.state.store",
    "EmulatorError": "airflow_provider.emulator.state.errors",
    "NotFound": "airflow_provider.emulator.state.errors",
    "StatusName": "airflow_provider.emulator.state.service",
    "DeploymentFilters": "airflow_provider.emulator.state.service",
    "EmulatorCreateRequest": "airflow_provider.emulator.state.service",
    **dict.fromkeys(
        ["ResourceSpecMode", "RedeployMode", "OptionalEndpoint", "OPTIONAL_ENDPOINTS"],
        "airflow_provider.emulator.state.switches",
    ),
}

# The public methods and properties of the state before it was split: every one is still the state's.
EMULATOR_STATE_API = [
    "add_behaviour_rule",
    "add_fault",
    "add_unhealthy_rule",
    "advance",
    "app_answer",
    "app_health",
    "app_url",
    "behaviour",
    "behaviour_rules",
    "checked_deployment_type",
    "clear_behaviour_rules",
    "clear_faults",
    "clear_unhealthy_rules",
    "count",
    "count_request",
    "counters",
    "create_deployment",
    "default_tenant_id",
    "delete_deployment",
    "deployment",
    "endpoint_enabled",
    "fail_next_build",
    "fail_revision",
    "faults",
    "find_deployment",
    "get_deployment",
    "get_revision",
    "list_deployments",
    "list_oauth_providers",
    "list_repositories",
    "list_revisions",
    "mark_next_revision_unhealthy",
    "metrics_text",
    "now",
    "patch_deployment",
    "record_request",
    "redeploy_revision",
    "request_log",
    "reset",
    "reset_requests",
    "revision_logs",
    "run_stats",
    "set_behaviour",
    "set_chaos",
    "set_revision_health",
    "set_status",
    "settings",
    "snapshot",
    "take_fault",
    "tracing_project",
    "tracing_projects",
    "unhealthy_rules",
    "update_deployment_options",
    "update_settings",
]

# The plans and rules of the emulated apps moved from the behaviour module to their own (the records hold
# plans, and the behaviour module reads the records: a circle).
BEHAVIOUR_NAMES = dict.fromkeys(
    [
        "Behaviour",
        "BehaviourPlan",
        "BehaviourRule",
        "RevisionGlob",
        "DEFAULT_BEHAVIOUR",
        "FAILING",
        "MAX_HEALTH_SLEEP_SECONDS",
    ],
    "airflow_provider.emulator.plans",
)

# The Rollouts view's paths, which the plugin, the app and the pages' JSON all build, live in one module now
# (the app and the JSON imported them from the plugin, which imports the app: a circle).
VIEW_PATHS = "airflow_provider.plugins.rollouts.paths"
PLUGIN_NAMES = {
    name: VIEW_PATHS
    for name in ("URL_PREFIX", "NAV_ROUTE", "TAB_ROUTE", "airflow_root_path", "view_path", "task_instance_tab_path")
}
SHAPES_NAMES = {"task_instance_path": VIEW_PATHS, "dag_run_path": VIEW_PATHS}

# The rollback's entry points stay importable from tasks.rollback, which re-exports them from one module per
# part (the paths, the evidence a retry reattaches on, the outcome records, the inputs), as fleet rollouts,
# the rollback operator and the patch task's steps import them.
ROLLBACK = "airflow_provider.tasks.rollback"
ROLLBACK_NAMES = {
    **{name: "airflow_provider.tasks.rollback.start" for name in ("NOT_BUILT", "start_rollback")},
    **{
        name: "airflow_provider.tasks.rollback.evidence"
        for name in ("find_earlier_rollback", "reattach_recorded_rollback")
    },
    **{
        name: "airflow_provider.tasks.rollback.inputs"
        for name in ("checked_fallback_config", "checked_resource_spec", "revision_config_snapshot")
    },
    **{
        name: "airflow_provider.tasks.rollback.outcome"
        for name in (
            "RESOURCE_SPEC_NOT_SENT",
            "RESOURCE_SPEC_NOT_SHOWN",
            "RESOURCE_SPEC_UNKNOWN",
            "RESOURCE_SPEC_VERDICTS",
            "RollbackIntent",
            "RollbackPath",
            "RollbackStarted",
            "is_branch_ref",
            "recorded_fields",
        )
    },
}

# The patch operator's module keeps its names; its steps (judging the live revision, the automatic rollback)
# stand in the task layer, and the class keeps every method Airflow resumes it in (PATCH_RESUME_METHODS).
PATCH = "airflow_provider.operators.patch"
PATCH_NAMES = {
    "PatchDeploymentOperator": PATCH,
    "HISTORY_LOOKBACK": "airflow_provider.tasks.patch.retry",
    "TASK_STATE_KEY": "airflow_provider.tasks.patch.retry",
    "XCOM_ANALYSIS": "airflow_provider.tasks.patch.verdict",
}
PATCH_RESUME_METHODS = (
    "execute_complete",
    "execute_analysis_complete",
    "execute_bake_complete",
    "execute_rollback_complete",
    "resume_execution",
)

# The fleet operator's module keeps its names and every method Airflow resumes it in; its phases stand in the
# task layer.
FLEET_OPERATOR = "airflow_provider.operators.fleet"
FLEET_OPERATOR_NAMES = {
    "FleetRolloutOperator": FLEET_OPERATOR,
    "XCOM_FLEET_ANALYSIS": FLEET_OPERATOR,
    "PATCH_FIELDS": "airflow_provider.tasks.fleet.change",
}
FLEET_RESUME_METHODS = ("execute_complete", "execute_complete_analysis", "resume_execution")

PUBLIC_PATHS = {
    OPERATORS: OPERATOR_NAMES,
    TRIGGERS: TRIGGER_NAMES,
    ROLLBACK: ROLLBACK_NAMES,
    MODELS: MODEL_NAMES,
}
"""The modules that became re-exports only: their ``__all__`` is exactly the documented names."""
MOVED_NAMES = {
    **PUBLIC_PATHS,
    PATCH: PATCH_NAMES,
    FLEET_OPERATOR: FLEET_OPERATOR_NAMES,
    CLIENT: CLIENT_NAMES,
    "airflow_provider.plugins.rollouts.plugin": PLUGIN_NAMES,
    "airflow_provider.plugins.rollouts.shapes": SHAPES_NAMES,
    EMULATOR_STATE: EMULATOR_STATE_NAMES,
    "airflow_provider.emulator.behaviour": BEHAVIOUR_NAMES,
}

DEPLOYMENT = "00000000-0000-4000-8000-00000000000a"
REVISION = "00000000-0000-4000-8000-00000000000b"
HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
TRIGGER_ARGUMENTS: dict[str, dict[str, Any]] = {
    "DeploymentRolloutTrigger": {"deployment_id": DEPLOYMENT, "revision_id": REVISION, "hook_params": HOOK_PARAMS},
    "DeploymentBakeTrigger": {
        "deployment_id": DEPLOYMENT,
        "revision_id": REVISION,
        "hook_params": HOOK_PARAMS,
        "poll_interval": 5.0,
        "deadline": 1.0e9,
    },
    "FleetWaveTrigger": {"wave": 0, "rollouts": [[DEPLOYMENT, REVISION]], "hook_params": HOOK_PARAMS},
    "DeploymentAnalysisTrigger": {
        "analysis": {"checks": [{"kind": "tracing_project"}], "count": 1},
        "targets": [
            {
                "deployment_id": DEPLOYMENT,
                "name": "shop",
                "revision_id": REVISION,
                "live_since": "2026-01-01T00:00:00+00:00",
            }
        ],
        "hook_params": HOOK_PARAMS,
        "carry": {"landing": 1},
    },
    "DeploymentEventTrigger": {"deployment_ids": [DEPLOYMENT]},
}


@pytest.mark.parametrize(
    "old, name, home",
    [(old, name, home) for old, names in MOVED_NAMES.items() for name, home in names.items()],
    ids=lambda value: value.rpartition(".")[2],
)
def test_every_documented_name_imports_from_the_old_path_and_its_module_as_one_object(
    old: str, name: str, home: str
) -> None:
    from_old = getattr(importlib.import_module(old), name)
    from_home = getattr(importlib.import_module(home), name)
    assert from_old is from_home
    if inspect.isclass(from_home) or inspect.isfunction(from_home):
        assert from_home.__module__ == home, f"{name} is defined in {from_home.__module__}, not in {home}"


@pytest.mark.parametrize("old", sorted(PUBLIC_PATHS))
def test_the_old_module_exports_exactly_the_documented_names(old: str) -> None:
    assert sorted(importlib.import_module(old).__all__) == sorted(PUBLIC_PATHS[old])


@pytest.mark.parametrize(
    "name, below",
    [(name, below) for below, names in CLIENT_HANDS_ON.items() for name in names],
    ids=lambda value: value.rpartition(".")[2],
)
def test_the_client_hands_on_the_errors_and_models_it_imported(name: str, below: str) -> None:
    assert getattr(importlib.import_module(CLIENT), name) is getattr(importlib.import_module(below), name)


def test_the_client_exports_exactly_its_names_and_those_it_hands_on() -> None:
    handed_on = [name for names in CLIENT_HANDS_ON.values() for name in names]
    assert sorted(importlib.import_module(CLIENT).__all__) == sorted([*CLIENT_NAMES, *handed_on])


def test_the_operators_module_keeps_its_old_star_import() -> None:
    namespace: dict[str, object] = {}
    exec(f"from {OPERATORS} import *", namespace)
    assert set(OLD_OPERATOR_ALL) <= set(namespace)


@pytest.mark.parametrize("name, value", sorted(STORED_KEYS.items()))
def test_the_stored_keys_keep_their_values(name: str, value: str) -> None:
    assert getattr(importlib.import_module(OPERATORS), name) == value


def test_the_patch_operator_pushes_its_analysis_under_the_same_key() -> None:
    assert importlib.import_module(PATCH).XCOM_ANALYSIS == "analysis"


@pytest.mark.parametrize("method", PATCH_RESUME_METHODS)
def test_the_patch_operator_keeps_every_method_airflow_resumes_it_in(method: str) -> None:
    """A deferred patch task in the metadata database names its resume method; the class itself defines it
    (its steps live in the task layer, its entry points do not move)."""
    operator = importlib.import_module(PATCH).PatchDeploymentOperator
    assert method in vars(operator), f"PatchDeploymentOperator does not define {method} itself"


@pytest.mark.parametrize("method", FLEET_RESUME_METHODS)
def test_the_fleet_operator_keeps_every_method_airflow_resumes_it_in(method: str) -> None:
    """A deferred fleet task names its resume method; the class itself defines it (its phases live in the task
    layer, its entry points do not move)."""
    operator = importlib.import_module(FLEET_OPERATOR).FleetRolloutOperator
    assert method in vars(operator), f"FleetRolloutOperator does not define {method} itself"


@pytest.mark.parametrize("old", sorted([*PUBLIC_PATHS, CLIENT]))
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


def test_the_emulator_state_keeps_every_method_it_had() -> None:
    from airflow_provider.emulator.state import EmulatorState

    public = sorted(name for name in dir(EmulatorState) if not name.startswith("_"))
    assert public == EMULATOR_STATE_API


@pytest.mark.parametrize("name", sorted(TRIGGER_ARGUMENTS))
def test_a_trigger_serializes_to_its_old_class_path_which_loads_the_same_class(name: str) -> None:
    """What the metadata database holds for a deferred task or an AssetWatcher (class path and kwargs) is what
    the previous version wrote, and the triggerer's import of it gives the class of the family module."""
    cls = getattr(importlib.import_module(TRIGGER_NAMES[name]), name)
    classpath, kwargs = cls(**TRIGGER_ARGUMENTS[name]).serialize()
    assert classpath == f"{TRIGGERS}.{name}"
    assert import_string(classpath) is cls  # as the triggerer loads it
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)


class _CustomRolloutTrigger(DeploymentRolloutTrigger):
    """A user's subclass: it must come back as itself, not as the class it extends."""


def test_a_subclass_serializes_its_own_class_path() -> None:
    classpath, kwargs = _CustomRolloutTrigger(**TRIGGER_ARGUMENTS["DeploymentRolloutTrigger"]).serialize()
    assert classpath == f"{__name__}._CustomRolloutTrigger"
    assert type(import_string(classpath)(**kwargs)) is _CustomRolloutTrigger
