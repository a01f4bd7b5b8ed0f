"""Measure an analysis in the triggerer (:class:`DeploymentAnalysisTrigger`): every round of
:func:`~airflow_provider.analysis.run.run_analysis` for the deployments of one task, then one event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import pydantic
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.analysis import Analysis, AnalysisTarget
from airflow_provider.analysis.definitions import ANALYSIS_ROUND_ALLOWANCE, analysis_seconds
from airflow_provider.analysis.run import analysis_not_run_reason, analysis_overran_reason, run_analysis
from airflow_provider.error_text import describe_validation_error
from airflow_provider.triggers import serialized_classpath

__all__ = ["ANALYSIS_EVENT_STATUSES", "ANALYSIS_ROUND_ALLOWANCE", "DeploymentAnalysisTrigger", "analysis_seconds"]

ANALYSIS_EVENT_STATUSES = ("done", "error")
"""The ``status`` values of a :class:`DeploymentAnalysisTrigger` event."""


class DeploymentAnalysisTrigger(BaseTrigger):
    """Run an analysis's rounds for a set of live revisions and yield their verdicts.

    Yields exactly one event: ``{"status": "done", "results": {deployment_id: AnalysisResult}, "carry":
    carry}``, or ``{"status": "error", "message": ..., "carry": carry}`` when the analysis cannot run (bad
    arguments, a missing or incomplete connection, the service refusing the key, a source's client that cannot
    be built, anything unexpected outside the measurements, the rounds not done within
    :func:`analysis_seconds` or by ``deadline``, so that the task decides, not Airflow's deferral timeout). The
    sources' requests are shared across the targets (one vector query per round, one stats request per deployment,
    the tracing project ids looked up once).

    A trigger resumed on another triggerer (a restart) starts its rounds again (its arguments cannot change, so
    the rounds already measured are lost); ``deadline`` is wall-clock, fixed when the task deferred: a restarted
    trigger that cannot finish its rounds by then reports that the analysis could not be measured in time, at the
    deadline, before Airflow's deferral timeout (:func:`~airflow_provider.tasks.analysis.defer_analysis` sizes both
    for one restart).

    :param analysis: :meth:`Analysis.to_json` (``count`` resolved; no :class:`CallableCheck`).
    :param targets: each :class:`~airflow_provider.analysis.AnalysisTarget` as JSON.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param carry: plain JSON echoed in the event (what the resumed task needs: ``airflow dags test`` in
        Airflow 3.3 drops the ``kwargs`` given to ``defer()``). Never a secret.
    :param deadline: wall-clock time (seconds since the epoch) by which the event must be sent; ``None``: only
        :func:`analysis_seconds` from the start of the rounds bounds them (triggers serialized before it existed).
    """

    def __init__(
        self,
        analysis: dict[str, Any],
        targets: list[dict[str, Any]],
        hook_params: dict[str, Any],
        carry: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.analysis = analysis
        self.targets = list(targets)
        self.hook_params = dict(hook_params)
        self.carry = carry
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (connection ids, never a key or password)."""
        return (
            serialized_classpath(self, DeploymentAnalysisTrigger),
            {
                "analysis": self.analysis,
                "targets": self.targets,
                "hook_params": dict(self.hook_params),
                "carry": self.carry,
                "deadline": self.deadline,
            },
        )

    def _event(self, payload: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent({**payload, "carry": self.carry})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Measure every round, then yield the one event."""
        try:
            analysis = Analysis.from_json(self.analysis)
            targets = [AnalysisTarget.model_validate(target) for target in self.targets]
            analysis.rounds()
        except pydantic.ValidationError as err:
            yield self._event(
                {"status": "error", "message": f"invalid trigger arguments: {describe_validation_error(err)}"}
            )
            return
        except ValueError as err:
            yield self._event({"status": "error", "message": f"invalid trigger arguments: {err}"})
            return
        limit = analysis_seconds(analysis)
        left = limit if self.deadline is None else min(limit, self.deadline - time.time())
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            results = await asyncio.wait_for(
                run_analysis(analysis, targets, hook_params=self.hook_params, log=self.log), timeout=left
            )
        except asyncio.TimeoutError:
            if left < limit:
                assert self.deadline is not None
                by = datetime.fromtimestamp(self.deadline, timezone.utc).isoformat(timespec="seconds")
                message = (
                    f"the analysis could not be measured in time: its rounds started too late to finish by its "
                    f"deadline ({by}; a triggerer restart starts them again)"
                )
            else:
                message = analysis_overran_reason(limit)
            self.log.error("%s", message)
            yield self._event({"status": "error", "message": message})
            return
        except Exception as err:  # whatever it is, the task decides (retry; on its last try, roll back)
            message = analysis_not_run_reason(err)
            self.log.error("%s", message)
            yield self._event({"status": "error", "message": message})
            return
        yield self._event({"status": "done", "results": results})
