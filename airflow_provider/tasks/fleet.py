"""The worker side of a fleet rollout, re-exported here from one module per concern:

- :mod:`~airflow_provider.tasks.fleet_plan`: the targets, resolved when the task runs
  (:func:`resolve_targets`), and deployments read 100 to a request (:func:`read_deployments`);
- :mod:`~airflow_provider.tasks.fleet_change`: what is sent, the change as each deployment's patch, its digest
  and each patch's fingerprint (completing a patch against its deployment is the patch task's
  :func:`complete_request`, in :mod:`~airflow_provider.tasks.patch_request`);
- :mod:`~airflow_provider.tasks.fleet_progress`: the progress record in ``context["task_state_store"]``
  (:class:`ProgressStore`, :class:`RollbackRecords`, :func:`new_progress`) and what it decides;
- :mod:`~airflow_provider.tasks.fleet_patching`: patching a wave (:func:`patch_wave`), and
  :mod:`~airflow_provider.tasks.fleet_retry`: what a retry finds of an earlier try's patch;
- :mod:`~airflow_provider.tasks.fleet_watching`: watching a wave on the worker (:func:`watch_wave`), its
  outcomes and failed builds, and ``verify`` (:func:`verify_wave`);
- :mod:`~airflow_provider.tasks.fleet_rollback`: rolling a wave back (:func:`start_rollbacks`,
  :func:`apply_rollbacks`);
- :mod:`~airflow_provider.tasks.fleet_analysis`: a wave's analysis; :mod:`~airflow_provider.tasks.fleet_waves`:
  the rollout wave by wave, each phase recorded before the next; :mod:`~airflow_provider.tasks.fleet_result`:
  the plan, the summary and the asset events, as the task reports them.

The planning itself (waves, budget, the result table) is pure and lives in :mod:`airflow_provider.fleet`;
waiting in the triggerer is :class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`. Everything here runs on
a worker: the callables a user gives (the per-deployment patch, ``verify``) cannot travel to the triggerer.
"""

from __future__ import annotations

from airflow_provider.tasks.fleet_change import change_digest, request_fingerprint
from airflow_provider.tasks.fleet_patching import patch_wave, sets_resource_spec
from airflow_provider.tasks.fleet_plan import TARGET_FILTERS, check_filters, read_deployments, resolve_targets
from airflow_provider.tasks.fleet_progress import (
    STATE_KEY,
    ProgressStore,
    RollbackRecords,
    new_progress,
    scrub_messages,
)
from airflow_provider.tasks.fleet_retry import EARLIER_REVISIONS_READ
from airflow_provider.tasks.fleet_rollback import (
    ROLLBACK_OUTCOMES,
    ROLLBACK_SAVE_EVERY,
    apply_rollbacks,
    is_partial,
    pending_rollbacks,
    rollbacks_allowed_latest,
    secrets_clause,
    start_rollbacks,
)
from airflow_provider.tasks.fleet_watching import (
    BUILD_FAILURES,
    BUILD_LOGS_PER_WAVE,
    BUILD_NOT_RETRIED,
    apply_outcomes,
    explain_failed_builds,
    failed_build,
    in_flight,
    verify_wave,
    watch_wave,
)
from airflow_provider.tasks.patch_request import CompletedPatch, complete_request

__all__ = [
    "BUILD_FAILURES",
    "BUILD_LOGS_PER_WAVE",
    "BUILD_NOT_RETRIED",
    "EARLIER_REVISIONS_READ",
    "ROLLBACK_OUTCOMES",
    "ROLLBACK_SAVE_EVERY",
    "STATE_KEY",
    "TARGET_FILTERS",
    "CompletedPatch",
    "ProgressStore",
    "RollbackRecords",
    "apply_outcomes",
    "apply_rollbacks",
    "change_digest",
    "check_filters",
    "complete_request",
    "explain_failed_builds",
    "failed_build",
    "in_flight",
    "is_partial",
    "new_progress",
    "patch_wave",
    "pending_rollbacks",
    "read_deployments",
    "request_fingerprint",
    "resolve_targets",
    "rollbacks_allowed_latest",
    "scrub_messages",
    "secrets_clause",
    "sets_resource_spec",
    "start_rollbacks",
    "verify_wave",
    "watch_wave",
]
