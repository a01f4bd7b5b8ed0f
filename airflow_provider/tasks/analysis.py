"""Task-side glue of analysis gates: measure on the worker or defer to the triggerer, read the event back,
and say in one line why a revision did not pass.

Used by every task that judges a revision by an :class:`~airflow_provider.analysis.Analysis` (the patch and
fleet operators, :class:`~airflow_provider.operators.analysis.DeploymentAnalysisOperator`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn, Protocol

from airflow.sdk.exceptions import AirflowException

from airflow_provider.analysis import (
    Analysis,
    AnalysisResult,
    AnalysisSetupError,
    AnalysisTarget,
    run_analysis,
)
from airflow_provider.analysis.definitions import VERDICTS
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.tasks.base import DEFERRAL_GRACE
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger

__all__ = [
    "ANALYSIS_ROUND_ALLOWANCE",
    "AnalysingTask",
    "analyse_on_worker",
    "analysis_event_results",
    "analysis_failure_reason",
    "analysis_seconds",
    "defer_analysis",
]

ANALYSIS_ROUND_ALLOWANCE = 60.0
"""Seconds allowed per round beyond its interval for the measurements themselves (the triggerer's
timeout is a safety net only)."""


class AnalysingTask(Protocol):
    """What the glue needs of a task: its hook, its logger, and ``defer``."""

    @property
    def hook(self) -> DeploymentServiceHook: ...

    @property
    def log(self) -> Any: ...

    def defer(
        self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = ..., timeout: Any = ...
    ) -> NoReturn: ...


def analysis_seconds(analysis: Analysis) -> float:
    """Longest time the analysis is expected to take (its rounds plus an allowance per round).

    :param analysis: the analysis, ``count`` resolved.
    """
    return analysis.initial_delay_seconds + analysis.rounds() * (analysis.interval_seconds + ANALYSIS_ROUND_ALLOWANCE)


def analyse_on_worker(
    task: AnalysingTask, analysis: Analysis, targets: Sequence[AnalysisTarget]
) -> dict[str, AnalysisResult]:
    """Run the analysis here, on the worker (poke mode, or an analysis with a :class:`CallableCheck`).

    :param task: the task (its hook's settings and its logger are used).
    :param analysis: the analysis, ``count`` resolved.
    :param targets: the revisions to judge.
    :return: each target's result by deployment id.
    :raises AirflowException: when the analysis cannot run (a missing connection, the key refused).
    """
    try:
        return asyncio.run(run_analysis(analysis, targets, hook_params=task.hook.hook_params, log=task.log))
    except (AnalysisSetupError, DeploymentServiceError) as err:
        raise AirflowException(f"the analysis could not run: {err}") from None


def defer_analysis(
    task: AnalysingTask,
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    *,
    method_name: str,
    carry: dict[str, Any],
) -> NoReturn:
    """Hand the analysis to a :class:`DeploymentAnalysisTrigger` (raises ``TaskDeferred``).

    The task resumes in ``method_name`` with the event; read it with :func:`analysis_event_results` and
    what the resume needs from ``event["carry"]`` (``dag.test()`` in Airflow 3.3 drops defer kwargs).

    :param task: the deferring task.
    :param analysis: the analysis, ``count`` resolved; no :class:`CallableCheck` (those run on the worker).
    :param targets: the revisions to judge.
    :param method_name: the task method to resume in.
    :param carry: plain JSON (never a secret) echoed in the event and also given as ``kwargs``.
    """
    trigger = DeploymentAnalysisTrigger(
        analysis=analysis.to_json(),
        targets=[target.model_dump(mode="json") for target in targets],
        hook_params=task.hook.hook_params,
        carry=carry,
    )
    task.defer(
        trigger=trigger,
        method_name=method_name,
        kwargs={"carry": carry},
        timeout=timedelta(seconds=analysis_seconds(analysis) + DEFERRAL_GRACE),
    )


def analysis_event_results(event: Any) -> dict[str, AnalysisResult]:
    """The results of a :class:`DeploymentAnalysisTrigger` event, checked.

    :param event: the event the task resumed with.
    :raises AirflowException: the trigger reported an error (its message), or the event has another shape
        (naming what is wrong).
    """
    if not isinstance(event, dict):
        raise AirflowException(f"the analysis trigger sent no event dict, got {type(event).__name__}")
    status = event.get("status")
    if status == "error":
        raise AirflowException(str(event.get("message") or "the analysis trigger reported an error"))
    if status != "done":
        raise AirflowException(f"the analysis trigger sent an event with status {status!r}, expected 'done' or 'error'")
    results = event.get("results")
    if not isinstance(results, dict):
        raise AirflowException("the analysis trigger's event has no 'results' object")
    for deployment_id, result in results.items():
        if not isinstance(result, dict):
            raise AirflowException(f"the analysis result of {deployment_id} is not an object")
        missing = [
            key for key in ("verdict", "failing_check", "reason", "revision_id", "measurements") if key not in result
        ]
        if missing:
            raise AirflowException(f"the analysis result of {deployment_id} lacks {', '.join(missing)}")
        if result["verdict"] not in VERDICTS:
            raise AirflowException(
                f"the analysis result of {deployment_id} has verdict {result['verdict']!r}, expected one of "
                f"{', '.join(VERDICTS)}"
            )
        if not isinstance(result["measurements"], list):
            raise AirflowException(f"the analysis result of {deployment_id} has no measurement list")
    return results


def analysis_failure_reason(result: AnalysisResult) -> str | None:
    """``None`` when the analysis passed; else one line for messages (an inconclusive analysis fails too).

    :param result: one deployment's result.
    """
    if result["verdict"] == "passed":
        return None
    if result["verdict"] == "inconclusive":
        return f"analysis inconclusive (treated as failed): {result['reason']}"
    return f"analysis failed: {result['reason']}"
