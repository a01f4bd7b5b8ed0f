"""The preflight of a task's analysis, on the worker, before anything is patched: every check measured once
against the revision each deployment serves now (see :mod:`airflow_provider.analysis.measuring.preflight`); a check that
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
from airflow_provider.analysis.planner import BASELINE_MULTIPLE, AnalysisPlan
from airflow_provider.models import Deployment, DeploymentStatus
from airflow_provider.tasks.analysis import AnalysingTask, live_since

__all__ = [
    "DEFAULT_BASELINE_WINDOW",
    "EXACT_LIVE_SINCE_LIMIT",
    "LONGEST_BASELINE_WINDOW",
    "PREFLIGHT_OFF_HINT",
    "baseline_target",
    "baselines_json",
    "longer_baseline_window",
    "preflight_on_worker",
    "warn_if_undecidable",
]

PREFLIGHT_OFF_HINT = "Analysis(preflight=False) skips the preflight, e.g. for a deployment that serves no traffic yet"
"""What a refusal says about turning the preflight off."""


DEFAULT_BASELINE_WINDOW = 3600.0
"""The first baseline window of ``baseline_window_seconds=None``: an hour, lengthened when a decision needs more
(:func:`longer_baseline_window`)."""
LONGEST_BASELINE_WINDOW = 86400.0
"""The longest baseline window ``baseline_window_seconds=None`` measures: a day."""

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
    from airflow_provider.analysis.measuring.endpoints import (  # the measuring side: on first use
        AnalysisSetupError,
        ConnectionLookupError,
    )
    from airflow_provider.analysis.measuring.preflight import PreflightRefused, preflight

    if not analysis.preflight or not deployments:
        return {}
    window = analysis.baseline_window_seconds or DEFAULT_BASELINE_WINDOW
    exact = len(deployments) <= EXACT_LIVE_SINCE_LIMIT
    by_id = {deployment.id: deployment for deployment in deployments}

    def measured(seconds: float) -> tuple[dict[str, list[Measurement]], list[AnalysisTarget], float]:
        now = time.time()
        window_start = datetime.fromtimestamp(now - seconds, tz=timezone.utc)
        targets = [
            baseline_target(task, deployment, window_start, unchanged=unchanged, exact=exact)
            for deployment in deployments
        ]
        task.log.info(
            "Preflight: measuring %d check(s) on the revision %s serves now, over the last %gs (the baseline)",
            len(analysis.checks),
            ", ".join(repr(deployment.name) for deployment in deployments[:5])
            + (f" and {len(deployments) - 5} more" if len(deployments) > 5 else ""),
            seconds,
        )
        measuring = preflight(analysis, targets, by_id, hook_params=task.hook.hook_params, log=task.log)
        try:
            return asyncio.run(measuring), targets, now
        except PreflightRefused as err:
            raise AirflowException(
                f"the analysis's preflight refused the rollout, {unchanged}: {err}. Fix the source, the query or the "
                f"project (a retry runs the preflight again), or give it traffic; {PREFLIGHT_OFF_HINT}"
            ) from None
        except ConnectionLookupError as err:
            raise AirflowException(f"the analysis's preflight could not run, {unchanged}: {err}") from None
        except AnalysisSetupError as err:
            raise AirflowFailException(f"the analysis's preflight cannot run, {unchanged}: {err}") from None

    baselines, targets, now = measured(window)
    resolved = _resolved(task, analysis)
    if analysis.baseline_window_seconds is None:
        longer = longer_baseline_window(resolved, baselines, targets, now, window)
        if longer is not None:
            task.log.info(
                "Preflight: the last %gs hold fewer than %d times the runs a decision of the analysis needs: "
                "measuring the baseline over the last %gs instead (baseline_window_seconds=None: long enough for "
                "the test, never before the serving revision went live)",
                window,
                BASELINE_MULTIPLE,
                longer,
            )
            baselines, targets, now = measured(longer)
    warn_if_undecidable(task.log, resolved, baselines, targets, now)
    return baselines


def _resolved(task: AnalysingTask, analysis: Analysis) -> Analysis:
    """``analysis`` with its rounds resolved for the task's bake (unchanged when they cannot be)."""
    try:
        return analysis.with_count_for(getattr(task, "bake_seconds", None) or None)
    except ValueError:
        return analysis


def _plans(
    analysis: Analysis, baselines: dict[str, list[Measurement]], targets: Sequence[AnalysisTarget], now: float
) -> list[tuple[AnalysisTarget, AnalysisPlan]]:
    """Each target's plan at the traffic and levels its baseline shows (targets whose baseline holds no runs are
    left out)."""
    from airflow_provider.analysis.metric_conditions import feedback_key
    from airflow_provider.analysis.planner import plan_analysis

    plans = []
    for target in targets:
        taken = {item["check"]: item for item in baselines.get(target.deployment_id, [])}
        seconds = max(1.0, now - target.live_since.timestamp())
        runs = error_rate = None
        scores: dict[str, float] = {}
        scored = 1.0
        for check in analysis.checks:
            item = taken.get(check.label())
            value = None if item is None else item.get("value")
            if item is None or not isinstance(item.get("runs"), int) or not isinstance(value, int | float):
                continue
            key = feedback_key(getattr(check, "metric", ""))
            if key is None and "errors" in item:
                runs, error_rate = item["runs"], item["errors"] / max(1, item["runs"])
            elif key is not None and 0.0 <= value <= 1.0:
                scores[key] = float(value)
                scored = item["runs"]
        if runs is None:
            runs = next((item["runs"] for item in taken.values() if isinstance(item.get("runs"), int)), None)
        if not runs:
            continue
        try:
            plan = plan_analysis(
                analysis,
                runs_per_second=runs / seconds,
                error_rate=min(error_rate or 0.0, 0.999),
                scores=scores,
                scored_share=min(1.0, max(scored / runs, 1e-6)) if scores else 1.0,
                baseline_runs=runs,
            )
        except ValueError:
            continue
        if plan.checks:
            plans.append((target, plan))
    return plans


def longer_baseline_window(
    analysis: Analysis,
    baselines: dict[str, list[Measurement]],
    targets: Sequence[AnalysisTarget],
    now: float,
    window: float,
) -> float | None:
    """The baseline window that holds :data:`~airflow_provider.analysis.planner.BASELINE_MULTIPLE` times the runs
    the analysis's statistical checks need to decide, at the traffic the first window showed (at most
    :data:`LONGEST_BASELINE_WINDOW`); ``None`` when ``window`` is enough, or the serving revisions have not lived
    longer than it (a longer window would measure nothing more).

    :param analysis: the analysis, its rounds resolved.
    :param baselines: what the first window measured.
    :param targets: the serving revisions measured (their ``live_since``: the window's start).
    :param now: when it was measured.
    :param window: the first window's length.
    """
    wanted = window
    for target, plan in _plans(analysis, baselines, targets, now):
        if plan.baseline_enough or target.live_since.timestamp() > now - window + 1.0:
            continue  # enough, or the revision is younger than the window: a longer one adds nothing
        needed = [check.runs for check in plan.checks if check.unit == "runs"]
        if not needed:
            continue
        most = max(value if value is not None else plan.baseline_runs * 100 for value in needed)
        wanted = max(wanted, window * BASELINE_MULTIPLE * most / max(1, plan.baseline_runs) * 1.1)
    wanted = min(wanted, LONGEST_BASELINE_WINDOW)
    return round(wanted) if wanted > window * 1.05 else None


def warn_if_undecidable(
    log: Any,
    analysis: Analysis,
    baselines: dict[str, list[Measurement]],
    targets: Sequence[AnalysisTarget],
    now: float,
) -> None:
    """Warn, once, when the analysis is too short (or the baseline too small) for its statistical checks to decide
    at the traffic the baseline showed: it would end inconclusive (rolled back by ``on_inconclusive="fail"``).

    :param log: the task's logger.
    :param analysis: the analysis, its rounds resolved.
    :param baselines: the preflight's measurements.
    :param targets: the serving revisions measured.
    :param now: when they were measured.
    """
    for target, plan in _plans(analysis, baselines, targets, now):
        if not plan.decides:
            log.warning(
                "Preflight: the analysis cannot decide on %r at the traffic its baseline shows: %s. Give it more "
                "rounds (count, bake_seconds) or a longer interval, or expect an inconclusive verdict "
                "(on_inconclusive decides)",
                target.name,
                plan.describe(),
            )
            return
        if not plan.baseline_enough:
            log.warning(
                "Preflight: the baseline of %r holds %d runs, fewer than %d times what a decision needs (%s): the "
                "baseline's own uncertainty slows the test; give baseline_window_seconds=None (the default) or a "
                "longer window",
                target.name,
                plan.baseline_runs,
                BASELINE_MULTIPLE,
                plan.describe(),
            )
            return


def baselines_json(baselines: dict[str, list[Measurement]], deployment_id: str) -> list[dict[str, Any]] | None:
    """One deployment's baseline as plain JSON for its record (``None``: no preflight).

    :param baselines: what :func:`preflight_on_worker` returned.
    :param deployment_id: the deployment.
    """
    taken = baselines.get(deployment_id)
    return None if taken is None else [dict(measurement) for measurement in taken]
