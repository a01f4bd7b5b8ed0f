"""Every message in ``airflow_provider/`` that names a task option (``force=True``, ``pass check_source_rules=``,
``set wait_for_rollout=``) names one the task raising it has (issue 33: the patch task said "Pass force=True"
but has no ``force``).

The tasks that can raise a message are the operators and sensors whose module imports the message's module,
directly or through others (imports inside functions count too): an over-approximation, so a message in a
module shared by several tasks must name an option all of them have, or say how each task forces it (as
:func:`~airflow_provider.tasks.rollback.start.start_rollback` takes ``force_hint`` from its caller).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from airflow.sdk import BaseOperator

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_provider"

OPTION = re.compile(
    r"\b(?P<assign>[a-z_][a-z0-9_]*)=(?:True|False|None|\d|'|\"|\[|\{)"
    r"|\b[Pp]ass (?:``)?(?P<passed>[a-z_][a-z0-9_]*)(?:=|``)"
    r"|\b[Ss]et (?:``)?(?P<set>[a-z_][a-z0-9_]*)="
)
"""What names an option in a message: ``name=value``, "pass name", "set name=" (docstrings are not messages)."""

NOT_TASK_OPTIONS = {
    ("airflow_provider.analysis.conditions", "name"): "a PromQL label matcher in a comment-like example",
    ("airflow_provider.analysis.definitions", "count"): "analysis.count, a field of the Analysis, named as such",
    ("airflow_provider.analysis.definitions", "condition"): "a check's argument, named with the check's class",
    ("airflow_provider.analysis.definitions", "preflight"): "Analysis(preflight=...), a field of the Analysis",
    ("airflow_provider.tasks.preflight", "preflight"): "Analysis(preflight=False), named with the Analysis",
    ("airflow_provider.tasks.preflight", "baseline_window_seconds"): (
        "Analysis(baseline_window_seconds=None), a field of the Analysis, named as such"
    ),
    ("airflow_provider.tasks.dry_run", "dry_run"): "Analysis(dry_run=True), a field of the Analysis the log names",
    ("airflow_provider.hooks.deployment_service", "limit"): "a query string (?limit=1) of the request sent",
    ("airflow_provider.tasks.rollback.inputs", "key"): "XComArg(task, key=...), an Airflow call the user writes",
    ("airflow_provider.tasks.targets", "deployment_name"): (
        "raised only for a task given deployment_id; each task taking deployment_id takes deployment_name too "
        "(test_deployment_id_tasks_take_deployment_name), the list operators sharing operators/lists.py take neither"
    ),
}
"""Names that look like options but are not the task's (module, name): why."""

NARROW_IMPORTS = {
    ("airflow_provider.operators.rollback", "airflow_provider.tasks.request"): {"SecretValue", "resolve_secrets"},
}
"""Imports that use only a few names of a module whose messages (and further imports) belong to other tasks:
(importer, imported): the names. Not followed by :func:`closure`; the test checks that the importer still
imports only these names from it, anywhere in its file."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


@cache
def imports_of(module: str) -> frozenset[str]:
    """The provider modules ``module`` imports anywhere in its file (functions included)."""
    path = modules()[module]
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            names = [stem, *(f"{stem}.{alias.name}" for alias in node.names)]
        found.update(name for name in names if name in modules())
    return frozenset(found)


@cache
def closure(module: str) -> frozenset[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parent = current.rsplit(".", 1)[0]
        todo.extend(name for name in imports_of(current) if (current, name) not in NARROW_IMPORTS)
        if parent in modules():  # importing a submodule runs its package's __init__
            todo.append(parent)
    return frozenset(seen)


def task_classes() -> list[type]:
    """Every public operator and sensor class of the provider."""
    found: dict[str, type] = {}
    for module in sorted(modules()):
        if not module.startswith(("airflow_provider.operators.", "airflow_provider.sensors.")):
            continue
        for name, value in vars(importlib.import_module(module)).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseOperator)
                and not name.startswith("_")
                and value.__module__.startswith(("airflow_provider.operators.", "airflow_provider.sensors."))
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def options_of(task: type) -> set[str]:
    """The constructor arguments the task takes, its bases' included (``retries``, ``deferrable``...)."""
    names: set[str] = set()
    for klass in task.__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return names - {"self", "kwargs", "args"}


def messages(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, option, text) for each option a string of ``source`` names, docstrings left out."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for match in OPTION.finditer(node.value):
                option = match.group("assign") or match.group("passed") or match.group("set")
                yield node.lineno, option, node.value


def problems(module: str, source: str, tasks: list[type]) -> list[str]:
    """Each option a message of ``module`` names that a task which can raise it lacks."""
    raisers = [task for task in tasks if module in closure(task.__module__)]
    found = []
    for line, option, text in messages(source):
        if (module, option) in NOT_TASK_OPTIONS:
            continue
        lacking = [task.__name__ for task in raisers if option not in options_of(task)]
        if lacking:
            found.append(f"{module}:{line} names {option!r} ({text[:80]!r}), which {', '.join(lacking)} lacks")
    return found


@pytest.fixture(scope="module")
def tasks() -> list[type]:
    return task_classes()


def test_every_message_names_only_options_of_the_tasks_that_raise_it(tasks: list[type]) -> None:
    found = [
        problem for module, path in sorted(modules().items()) for problem in problems(module, path.read_text(), tasks)
    ]
    assert found == [], "\n".join(found)


def test_narrow_imports_stay_narrow() -> None:
    for (importer, imported), allowed in NARROW_IMPORTS.items():
        tree = ast.parse(modules()[importer].read_text())
        used = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == imported
            for alias in node.names
        }
        assert used and used <= allowed, f"{importer} imports {sorted(used - allowed)} from {imported}: walk it again"


def test_the_walk_sees_the_messages_and_the_tasks(tasks: list[type]) -> None:
    """The test above cannot pass by seeing nothing: it finds known messages, tasks and raisers."""
    names = {task.__name__ for task in tasks}
    assert {"PatchDeploymentOperator", "FleetRolloutOperator", "RollbackDeploymentOperator"} <= names
    assert {"DeploymentRolloutSensor"} <= names
    named = {(module, option) for module, path in modules().items() for _, option, _ in messages(path.read_text())}
    assert ("airflow_provider.decisions.patch_rules", "resource_spec_mode") in named
    assert ("airflow_provider.tasks.request", "check_source_rules") in named
    assert ("airflow_provider.operators.rollback", "force") in named
    patch = next(task for task in tasks if task.__name__ == "PatchDeploymentOperator")
    assert "airflow_provider.tasks.rollback.start" in closure(patch.__module__)
    assert {"force", "wait_for_rollout", "retries"} <= options_of(
        next(t for t in tasks if t.__name__ == "RollbackDeploymentOperator")
    )


def test_the_old_force_message_would_be_caught(tasks: list[type]) -> None:
    """The message issue 33 found, put back where it was, is reported naming the patch task."""
    source = 'MESSAGE = f"{message}; not rolling back over it. Pass force=True to roll back anyway"\n'
    found = problems("airflow_provider.tasks.rollback.start", source, tasks)
    assert found and "'force'" in found[0] and "PatchDeploymentOperator" in found[0]
    assert "RollbackDeploymentOperator" not in found[0]


def test_deployment_id_tasks_take_deployment_name(tasks: list[type]) -> None:
    """What makes the ``tasks.targets`` entry of :data:`NOT_TASK_OPTIONS` true."""
    for task in tasks:
        arguments = inspect.signature(task.__init__).parameters
        if "deployment_id" in arguments:
            assert "deployment_name" in arguments, f"{task.__name__} takes deployment_id but not deployment_name"
