"""The triggers' public import path, and the class path every trigger serializes to (re-exports only).

Each family stands in its own module: :mod:`~airflow_provider.triggers.rollout` (a revision going live, a
bake), :mod:`~airflow_provider.triggers.fleet` (a fleet rollout's wave),
:mod:`~airflow_provider.triggers.watcher` (the ``AssetWatcher`` trigger), :mod:`~airflow_provider.triggers.guard`
(the guard after landing, an ``AssetWatcher``'s trigger too), all over the shared batched poller
of :mod:`~airflow_provider.triggers.poller`; and :mod:`~airflow_provider.triggers.analysis` (an analysis's
measurement rounds, on :func:`~airflow_provider.analysis.measuring.run.run_analysis`). The names below are the same
objects as there. A trigger's ``serialize()`` returns its path in this module
(``airflow_provider.triggers.deployment_service.<class>``): triggers in the metadata database and
``AssetWatcher`` triggers keep loading, and stay the same triggers, across upgrades.
"""

from __future__ import annotations

from airflow_provider.triggers.analysis import ANALYSIS_EVENT_STATUSES, DeploymentAnalysisTrigger
from airflow_provider.triggers.fleet import FleetWaveTrigger
from airflow_provider.triggers.guard import REGRESSED, DeploymentGuardTrigger
from airflow_provider.triggers.poller import REVISION_CHECK_CONCURRENCY, active_pollers
from airflow_provider.triggers.rollout import EVENT_STATUSES, DeploymentBakeTrigger, DeploymentRolloutTrigger
from airflow_provider.triggers.watcher import (
    CURSOR_COMMIT_DELAY,
    CURSOR_KEY_PREFIX,
    CURSOR_LOAD_ATTEMPTS,
    DEFAULT_EVENT_POLL_INTERVAL,
    FILTER_NAMES,
    GONE,
    DeploymentEventTrigger,
)

__all__ = [
    "ANALYSIS_EVENT_STATUSES",
    "CURSOR_COMMIT_DELAY",
    "CURSOR_KEY_PREFIX",
    "CURSOR_LOAD_ATTEMPTS",
    "DEFAULT_EVENT_POLL_INTERVAL",
    "EVENT_STATUSES",
    "FILTER_NAMES",
    "GONE",
    "REGRESSED",
    "REVISION_CHECK_CONCURRENCY",
    "DeploymentAnalysisTrigger",
    "DeploymentBakeTrigger",
    "DeploymentEventTrigger",
    "DeploymentGuardTrigger",
    "DeploymentRolloutTrigger",
    "FleetWaveTrigger",
    "active_pollers",
]
