"""Measure an analysis in the triggerer (:class:`DeploymentAnalysisTrigger`): the rounds of
:func:`~airflow_provider.analysis.run.analyse` for the deployments of one task, then one event (with
``partial``, as soon as some are judged: the task acts on them and goes on with the rest in another trigger)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pydantic
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.analysis import Analysis, AnalysisResult, AnalysisSetupError, AnalysisTarget
from airflow_provider.analysis.definitions import ANALYSIS_ROUND_ALLOWANCE, analysis_seconds
from airflow_provider.analysis.judge import AnalysisState
from airflow_provider.analysis.run import analyse
from airflow_provider.error_text import describe_validation_error
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.triggers import serialized_classpath

__all__ = ["ANALYSIS_EVENT_STATUSES", "ANALYSIS_ROUND_ALLOWANCE", "DeploymentAnalysisTrigger", "analysis_seconds"]

ANALYSIS_EVENT_STATUSES = ("done", "partial", "error")
"""The ``status`` values of a :class:`DeploymentAnalysisTrigger` event."""


class DeploymentAnalysisTrigger(BaseTrigger):
    """Run an analysis's rounds for a set of live revisions and yield their verdicts.

    Yields exactly one event: ``{"status": "done", "results": {deployment_id: AnalysisResult}, "carry":
    carry}`` once every target is judged; with ``partial``, ``{"status": "partial", "results": {...of the
    targets judged so far}, "targets": [...the others, as JSON], "state": AnalysisState JSON, "carry": carry}``
    after the first round that judged some while others are still under analysis (hand ``targets`` and
    ``state`` to a new trigger to go on: the next round, the schedule and the time budget are kept); or
    ``{"status": "error", "message": ..., "carry": carry}`` when the analysis cannot run (bad arguments, a
    missing or incomplete connection, the service refusing the key, the rounds not done within
    :func:`analysis_seconds` of the analysis's start, so that the task decides, not Airflow's deferral
    timeout). The sources' requests are shared across the targets (one vector query per round, one stats
    request per deployment, the tracing project ids looked up once per trigger). A trigger resumed on
    another triggerer starts again from its ``state`` (from round 1 without one).

    :param analysis: :meth:`Analysis.to_json` (``count`` resolved; no :class:`CallableCheck`).
    :param targets: each :class:`~airflow_provider.analysis.AnalysisTarget` as JSON.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param carry: plain JSON echoed in the event (what the resumed task needs: ``airflow dags test`` in
        Airflow 3.3 drops the ``kwargs`` given to ``defer()``). Never a secret.
    :param partial: yield as soon as a round judged some targets while others are still under analysis (a
        fleet wave: each failed deployment is rolled back at once), instead of once all are judged.
    :param state: where an earlier trigger's analysis of these targets stopped (a ``partial`` event's
        ``state``); ``None``: the analysis starts now.
    """

    def __init__(
        self,
        analysis: dict[str, Any],
        targets: list[dict[str, Any]],
        hook_params: dict[str, Any],
        carry: dict[str, Any] | None = None,
        partial: bool = False,
        state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.analysis = analysis
        self.targets = list(targets)
        self.hook_params = dict(hook_params)
        self.carry = carry
        self.partial = bool(partial)
        self.state = state

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (connection ids, never a key or password)."""
        return (
            serialized_classpath(self, DeploymentAnalysisTrigger),
            {
                "analysis": self.analysis,
                "targets": self.targets,
                "hook_params": dict(self.hook_params),
                "carry": self.carry,
                "partial": self.partial,
                "state": self.state,
            },
        )

    def _event(self, payload: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent({**payload, "carry": self.carry})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Measure the rounds (every one, or until some targets are judged), then yield the one event."""
        try:
            analysis = Analysis.from_json(self.analysis)
            targets = [AnalysisTarget.model_validate(target) for target in self.targets]
            analysis.rounds()
            state = AnalysisState.from_json(self.state) if self.state is not None else None
        except pydantic.ValidationError as err:
            yield self._event(
                {"status": "error", "message": f"invalid trigger arguments: {describe_validation_error(err)}"}
            )
            return
        except ValueError as err:
            yield self._event({"status": "error", "message": f"invalid trigger arguments: {err}"})
            return
        budget = analysis_seconds(analysis)
        left = budget if state is None else state.started_at + budget - time.time()  # the budget is not restarted
        try:
            event = await asyncio.wait_for(self._measure(analysis, targets, state), timeout=max(0.0, left))
        except asyncio.TimeoutError:
            message = f"the analysis did not finish within {budget:g} s of its start (its rounds and their allowance)"
            self.log.error("%s", message)
            yield self._event({"status": "error", "message": message})
            return
        except (AnalysisSetupError, DeploymentServiceError, ValueError) as err:
            message = f"the analysis could not run: {err}"
            self.log.error("%s", message)
            yield self._event({"status": "error", "message": message})
            return
        yield self._event(event)

    async def _measure(
        self, analysis: Analysis, targets: list[AnalysisTarget], state: AnalysisState | None
    ) -> dict[str, Any]:
        """The rounds up to the event: every one, or (``partial``) up to the first step that judged some."""
        results: dict[str, AnalysisResult] = {}
        async with contextlib.aclosing(
            # One clock for the rounds and the time budget: the state's start is on it.
            analyse(analysis, targets, hook_params=self.hook_params, log=self.log, resume=state, clock=time.time)
        ) as steps:
            async for verdicts in steps:
                results.update(verdicts.decided)
                if verdicts.state is not None and self.partial:
                    return {
                        "status": "partial",
                        "results": results,
                        "targets": [target.model_dump(mode="json") for target in verdicts.pending],
                        "state": verdicts.state.to_json(),
                    }
        return {"status": "done", "results": results}
