"""The preflight of a task's analysis, on the worker, before anything is patched: every check measured once
against the revision each deployment serves now (see :mod:`airflow_provider.analysis.preflight`); a check that
cannot be measured refuses the rollout with nothing sent. What it measured is each deployment's baseline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.analysis import Analysis, AnalysisTarget, Measurement
from airflow_provider.models import Deployment, DeploymentStatus
from airflow_provider.tasks.analysis import AnalysingTask, live_since

__all__ = [
    "EXACT_LIVE_SINCE_LIMIT",
    "PREFLIGHT_OFF_HINT",
    "baseline_target",
    "baselines_json",
    "preflight_on_worker",
]

PREFLIGHT_OFF_HINT = "Analysis(preflight=False) skips the preflight, e.g. for a deployment that serves no traffic yet"
"""What a refusal says about turning the preflight off."""


EXACT_LIVE_SINCE_LIMIT = 20
"""Up to this many deployments, each serving revision's go-live time is asked of the revision endpoint (one request
each); a larger fleet's baseline windows start at each deployment's ``updated_at`` (at or after the PATCH that made
the revision serving now) or the window's start, whichever is later."""


def baseline_target(
    task: AnalysingTask, deployment: Deployment, window_start: datetime, *, unchanged: str, exact: bool = True
) -> AnalysisTarget:
    """The revision ``deployment`` serves now, as a target whose window is its baseline window: from
    ``window_start``, or from when the revision went live when later (the window never holds the runs of the
    revision before it).

    :param task: the task (its hook and logger).
    :param deployment: the deployment as read before anything is sent.
    :param window_start: the start of the baseline window (now minus ``baseline_window_seconds``).
    :param unchanged: what the message says was left unchanged.
    :param exact: ask the revision endpoint when the revision went live (else the deployment's ``updated_at``).
    :raises AirflowFailException: the deployment serves no revision (nothing to measure a baseline on).
    """
    revision_id = deployment.active_revision_id
    if revision_id is None or deployment.status != DeploymentStatus.READY:
        raise AirflowFailException(
            f"the analysis's preflight cannot run, {unchanged}: deployment {deployment.name!r} serves no revision "
            f"to measure the checks on (status {deployment.status.value}, active revision {revision_id}); "
            f"{PREFLIGHT_OFF_HINT}"
        )
    went_live = deployment.updated_at
    if exact:
        went_live = live_since(task.hook, deployment, revision_id, log=task.log, seen_live_at=window_start)
    return AnalysisTarget(
        deployment_id=deployment.id,
        name=deployment.name,
        revision_id=revision_id,
        live_since=max(window_start, went_live),
        custom_url=deployment.source_config.custom_url,
        role="baseline",
    )


def preflight_on_worker(
    task: AnalysingTask,
    analysis: Analysis,
    deployments: Sequence[Deployment],
    *,
    unchanged: str = "nothing was patched",
) -> dict[str, list[Measurement]]:
    """Measure every check of ``analysis`` once against the revision each deployment serves now, over the
    analysis's baseline window up to now; return the measurements (the baselines) by deployment id, ``{}`` when
    the analysis has ``preflight=False``. No request is sent to the deployment service besides reads.

    :param task: the task (its hook's settings and its logger).
    :param analysis: the analysis.
    :param deployments: the deployments about to be changed (or judged), as read.
    :param unchanged: what the message says was left unchanged (true when this is called).
    :raises AirflowException: a check could not be measured (naming the source, its connection and the rendered
        project or query of each), or a connection could not be looked up: nothing was sent, and a retry (which
        runs the preflight again) may find the source back.
    :raises AirflowFailException: a connection is missing or incomplete, or a deployment serves no revision.
    """
    from airflow_provider.analysis.endpoints import (  # the measuring side: on first use
        AnalysisSetupError,
        ConnectionLookupError,
    )
    from airflow_provider.analysis.preflight import PreflightRefused, preflight

    if not analysis.preflight or not deployments:
        return {}
    now = time.time()
    window_start = datetime.fromtimestamp(now - analysis.baseline_window_seconds, tz=timezone.utc)
    exact = len(deployments) <= EXACT_LIVE_SINCE_LIMIT
    targets = [
        baseline_target(task, deployment, window_start, unchanged=unchanged, exact=exact) for deployment in deployments
    ]
    task.log.info(
        "Preflight: measuring %d check(s) on the revision %s serves now, over the last %gs (the baseline)",
        len(analysis.checks),
        ", ".join(repr(deployment.name) for deployment in deployments[:5])
        + (f" and {len(deployments) - 5} more" if len(deployments) > 5 else ""),
        analysis.baseline_window_seconds,
    )
    by_id = {deployment.id: deployment for deployment in deployments}
    measuring = preflight(analysis, targets, by_id, hook_params=task.hook.hook_params, log=task.log)
    try:
        return asyncio.run(measuring)
    except PreflightRefused as err:
        raise AirflowException(
            f"the analysis's preflight refused the rollout, {unchanged}: {err}. Fix the source, the query or the "
            f"project (a retry runs the preflight again), or give it traffic; {PREFLIGHT_OFF_HINT}"
        ) from None
    except ConnectionLookupError as err:
        raise AirflowException(f"the analysis's preflight could not run, {unchanged}: {err}") from None
    except AnalysisSetupError as err:
        raise AirflowFailException(f"the analysis's preflight cannot run, {unchanged}: {err}") from None


def baselines_json(baselines: dict[str, list[Measurement]], deployment_id: str) -> list[dict[str, Any]] | None:
    """One deployment's baseline as plain JSON for its record (``None``: no preflight).

    :param baselines: what :func:`preflight_on_worker` returned.
    :param deployment_id: the deployment.
    """
    taken = baselines.get(deployment_id)
    return None if taken is None else [dict(measurement) for measurement in taken]
