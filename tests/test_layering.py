"""The house: modules import downwards only, operators and sensors are siblings, and what every task
shares is declared once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from airflow.sdk import BaseOperator

import airflow_provider
from airflow_provider import client, errors
from airflow_provider.client import ClientSettings, RetryPolicy
from airflow_provider.defaults import CONN_TYPE, SETTING_OVERRIDES
from airflow_provider.get_provider_info import get_provider_info
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import ListDeploymentsOperator, PatchDeploymentOperator
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

PACKAGE = Path(airflow_provider.__file__).parent

# Lower number = lower layer. A module may import only modules of a lower layer, or of its own package
# (tasks.waiting imports tasks.base). Triggers sit below the shared task base: tasks defer to them. What the
# client runs with, how it pages and the words of its errors sit below the rest of the client, which uses them.
LAYERS = {
    "airflow_provider": 0,
    "airflow_provider.defaults": 0,
    "airflow_provider.models": 1,
    "airflow_provider.decisions.spec_changes": 1.5,
    "airflow_provider.errors": 2,
    "airflow_provider.client.error_text": 2,
    "airflow_provider.decisions.rollout": 2,
    "airflow_provider.assets": 2,
    "airflow_provider.decisions.patch_rules": 2,
    # The fleet rollout's strategy arguments and waves (what constructing the fleet task checks), below the fleet's
    # planning, which re-exports them.
    "airflow_provider.decisions.fleet_strategy": 2,
    "airflow_provider.client.settings": 3,
    "airflow_provider.client.pagination": 3,
    "airflow_provider.decisions.fleet_progress": 3,
    # The record of what tasks did to revisions (fleet rows read as entries), and the DORA figures computed from it.
    "airflow_provider.decisions.record": 3.2,
    # What a task tells the deployment watchers (the judging marker), and when a watcher announces a revision.
    "airflow_provider.decisions.judging_marker": 3.2,
    "airflow_provider.decisions.settling": 3.3,
    "airflow_provider.decisions.dora": 3.4,
    "airflow_provider.client": 4,
    "airflow_provider.hooks": 5,
    # Analysis gates: pure definitions over models, measured through the hook's client and connections; the
    # analysis trigger and the tasks use it.
    "airflow_provider.analysis": 5.5,
    "airflow_provider.triggers": 6,
    "airflow_provider.tasks": 7,
    "airflow_provider.operators": 8,
    "airflow_provider.sensors": 8,
    # The Rollouts view reads what tasks record (their progress keys) and links the fleet operator's tasks.
    "airflow_provider.plugins": 9,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> tuple[str, int] | None:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, LAYERS[prefix]
    return None


def _provider_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("airflow_provider")}


TASK_MODULES = sorted(
    path
    for path in PACKAGE.rglob("*.py")
    if "emulator" not in path.parts and path.name != "get_provider_info.py" and _layer(_module_name(path))
)


@pytest.mark.parametrize("path", TASK_MODULES, ids=lambda path: _module_name(path))
def test_every_import_points_down(path: Path) -> None:
    own = _layer(_module_name(path))
    assert own is not None
    upward = []
    for imported in _provider_imports(path):
        target = _layer(imported)
        if target is None or target[0] == own[0]:
            continue
        if target[1] >= own[1]:
            upward.append(f"{imported} (layer {target[1]})")
    assert not upward, f"{_module_name(path)} (layer {own[1]}) imports sideways or upwards: {upward}"


def _package_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``airflow_provider.<package>`` and the provider modules it imports."""
    return {_module_name(path): _provider_imports(path) for path in sorted((PACKAGE / package).rglob("*.py"))}


def test_operators_and_sensors_are_siblings() -> None:
    for module, imported in _package_imports("operators").items():
        assert not any(name.startswith("airflow_provider.sensors") for name in imported), module
    for module, imported in _package_imports("sensors").items():
        assert not any(name.startswith("airflow_provider.operators") for name in imported), module


# The module every family of a package shares: the operators' bases, the triggers' batched poller.
SHARED_MODULES = {"operators": "base", "triggers": "poller"}


@pytest.mark.parametrize("package", sorted(SHARED_MODULES))
def test_families_stand_on_their_base_and_the_public_path_re_exports_them(package: str) -> None:
    """A family module (lists, patch, rollback, fleet; rollout, fleet, watcher) imports the package's shared
    module, never another family nor the public path; only the public path (``deployment_service``) imports
    the families."""
    prefix = f"airflow_provider.{package}"
    public = f"{prefix}.deployment_service"
    shared = {f"{prefix}.{SHARED_MODULES[package]}"}
    for module, imported in _package_imports(package).items():
        siblings = {name for name in imported if name.startswith(prefix + ".")}
        if module == public:
            continue
        assert public not in siblings, f"{module} imports the public path {public}"
        if module not in shared and module != prefix:
            assert siblings <= shared, f"{module} imports another family: {sorted(siblings - shared)}"
        else:
            assert not siblings, f"{module} (shared) imports a family: {sorted(siblings)}"


def test_emulator_never_imports_the_client_side() -> None:
    for path in (PACKAGE / "emulator").rglob("*.py"):
        wrong = {
            name
            for name in _provider_imports(path)
            if not name.startswith(("airflow_provider.emulator", "airflow_provider.models"))
            and name not in ("airflow_provider", "airflow_provider.defaults")
        }
        assert not wrong, f"{path.name} imports {wrong}"


def test_errors_module_holds_the_hierarchy_and_the_client_raises_the_same_classes() -> None:
    exported = {name: getattr(errors, name) for name in errors.__all__}
    assert all(issubclass(cls, Exception) for cls in exported.values())
    assert all(issubclass(cls, errors.DeploymentServiceError) for cls in exported.values())
    assert client.NotFoundError is errors.NotFoundError


def test_provider_info_reads_the_transport_defaults() -> None:
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    retry, settings = RetryPolicy(), ClientSettings(base_url="https://api.example.com")
    assert get_provider_info()["connection-types"][0]["connection-type"] == CONN_TYPE == DeploymentServiceHook.conn_type
    assert fields["connect_timeout"]["schema"]["default"] == settings.connect_timeout
    assert fields["read_timeout"]["schema"]["default"] == settings.read_timeout
    for name in ("max_attempts", "backoff_initial", "backoff_max", "retry_after_max"):
        assert fields[name]["schema"]["default"] == getattr(retry, name), name


def test_hook_refuses_an_unknown_override_naming_the_known_ones() -> None:
    with pytest.raises(TypeError, match=r"max_atempts.*connect_timeout, read_timeout, max_attempts"):
        DeploymentServiceHook(max_atempts=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "task_class, arguments",
    [
        (PatchDeploymentOperator, {"deployment_id": "00000000-0000-4000-8000-00000000000a"}),
        (DeploymentRolloutSensor, {"deployment_id": "00000000-0000-4000-8000-00000000000a"}),
        (ListDeploymentsOperator, {}),
    ],
)
def test_every_task_takes_the_connection_arguments_from_one_base(
    task_class: type[BaseOperator], arguments: dict[str, str]
) -> None:
    overrides = dict.fromkeys(SETTING_OVERRIDES, 3)
    task = task_class(task_id="t", deployment_service_conn_id="other", **overrides, **arguments)
    assert task.hook is task.hook  # cached: one pooled client per task run
    assert task.hook.hook_params == {"deployment_service_conn_id": "other", **overrides}


def test_connection_arguments_come_from_default_args_and_partial() -> None:
    from airflow.sdk import DAG

    with DAG("layering_defaults", schedule=None, default_args={"deployment_service_conn_id": "from_defaults"}):
        sensor = DeploymentRolloutSensor(task_id="wait", deployment_id="00000000-0000-4000-8000-00000000000a")
        mapped = PatchDeploymentOperator.partial(task_id="patch", max_attempts=2, image_uri="r/i:1").expand(
            deployment_id=["00000000-0000-4000-8000-00000000000a"]
        )
    assert sensor.deployment_service_conn_id == "from_defaults"
    assert mapped.partial_kwargs["max_attempts"] == 2


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The provider modules ``path`` imports, anywhere in it (in a function, under ``TYPE_CHECKING``),
    ``from package import module`` and relative imports resolved to the module."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def test_no_two_modules_import_each_other() -> None:
    """A circle means a third module is missing: imports in functions and under ``TYPE_CHECKING`` count too."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: _imported_modules(path, set(paths)) for name, path in paths.items()}

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for module in graph[todo.pop()] - seen:
                seen.add(module)
                todo.append(module)
        return seen

    reach = {name: reachable(name) for name in graph}
    circles = {
        frozenset({name} | {other for other in reach[name] if name in reach[other]})
        for name in graph
        if name in reach[name]
    }
    found = sorted(sorted(circle) for circle in circles)
    assert not found, f"modules that import each other (through the others listed): {found}"
