"""What a DAG file pays to import the operators, the sensor and the hook (``bench/import_cost.py`` times it):
the modules only a running task needs stay unimported until a task runs, so the import cost cannot grow back
silently when a new step of a task lands."""

from __future__ import annotations

import json
import subprocess
import sys

PUBLIC_MODULES = [
    "airflow_provider.operators.deployment_service",
    "airflow_provider.sensors.deployment_service",
    "airflow_provider.hooks.deployment_service",
]

RUN_TIME_ONLY = [
    # the analysis gates: definitions come with the Analysis a DAG builds; the measuring side when a task measures
    "airflow_provider.analysis",
    "airflow_provider.tasks.analysis",
    "airflow_provider.tasks.preflight",
    "airflow_provider.tasks.dry_run",
    # waiting, judging and the record of what a task did
    "airflow_provider.decisions.rollout",
    "airflow_provider.tasks.waiting",
    "airflow_provider.tasks.build_logs",
    "airflow_provider.decisions.record",
    "airflow_provider.tasks.recording",
    "airflow_provider.decisions.spec_changes",
    "airflow_provider.decisions.patch_rules",
    # rolling back
    "airflow_provider.tasks.rollback",
    "airflow_provider.tasks.rollback.start",
    "airflow_provider.tasks.rollback.evidence",
    "airflow_provider.tasks.rollback.outcome",
    "airflow_provider.tasks.rollback.revisions",
    "airflow_provider.tasks.rollback.previous",
    # the fleet's waves, rows and progress (its strategy arguments, checked at parse time, do come)
    "airflow_provider.decisions.fleet_progress",
    "airflow_provider.tasks.fleet.waves",
    "airflow_provider.tasks.fleet.patching",
    "airflow_provider.tasks.fleet.retry",
    "airflow_provider.tasks.fleet.watching",
    "airflow_provider.tasks.fleet.analysis",
    "airflow_provider.tasks.fleet.rollback",
    "airflow_provider.tasks.fleet.progress",
    "airflow_provider.tasks.fleet.result",
    "airflow_provider.tasks.fleet.notify",
    # what a deferring task hands to the triggerer, and suggestions for a misspelt argument
    "airflow_provider.triggers",
    "airflow_provider.suggestions",
    "difflib",
]
"""Modules a DAG file that imports every operator class, the sensor and the hook must not import."""


def _imported_after(modules: list[str]) -> set[str]:
    """The modules a fresh interpreter imports for ``modules``, on top of ``airflow.sdk``."""
    probe = (
        "import json, sys, airflow.sdk\n"
        "before = set(sys.modules)\n"
        f"for name in {modules!r}: __import__(name)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_operators_sensor_and_hook_leaves_the_run_time_modules_unimported() -> None:
    imported = _imported_after(PUBLIC_MODULES)
    assert set(PUBLIC_MODULES) <= imported
    loaded = sorted(name for name in RUN_TIME_ONLY if name in imported)
    assert not loaded, f"imported with the operators, sensor and hook, but only a running task needs: {loaded}"
