"""Measure an analysis in the triggerer (:class:`DeploymentAnalysisTrigger`): the rounds of
:func:`~airflow_provider.analysis.measuring.run.analyse` for the deployments of one task, then one event (with
``partial``, as soon as some are judged: the task acts on them and goes on with the rest in another trigger).

A trigger cannot write its task's record, so with ``judging`` it writes each round's measurements so far to the
judging marker of each deployment (:func:`~airflow_provider.decisions.judging_marker.with_rounds`, in the asset state
store of the deployment's id asset, as the deployment watchers read it): the Rollouts view shows the revision
"analysing" with them while the task is deferred."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pydantic
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.analysis import Analysis, AnalysisResult, AnalysisTarget
from airflow_provider.analysis.definitions import ANALYSIS_ROUND_ALLOWANCE, analysis_seconds
from airflow_provider.analysis.judge import AnalysisState
from airflow_provider.analysis.measuring.run import analyse, analysis_not_run_reason, analysis_overran_reason
from airflow_provider.assets import deployment_asset_uri, state_store_unavailable
from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.decisions.judging_marker import JUDGING_KEY, with_rounds
from airflow_provider.triggers import default_store, serialized_classpath

__all__ = ["ANALYSIS_EVENT_STATUSES", "ANALYSIS_ROUND_ALLOWANCE", "DeploymentAnalysisTrigger", "analysis_seconds"]

ANALYSIS_EVENT_STATUSES = ("done", "partial", "error")
"""The ``status`` values of a :class:`DeploymentAnalysisTrigger` event."""


class DeploymentAnalysisTrigger(BaseTrigger):
    """Run an analysis's rounds for a set of live revisions and yield their verdicts.

    Yields exactly one event: ``{"status": "done", "results": {deployment_id: AnalysisResult}, "carry":
    carry}`` once every target is judged; with ``partial``, ``{"status": "partial", "results": {...of the
    targets judged so far}, "targets": [...the others, as JSON], "state": AnalysisState JSON, "deadline": ...,
    "carry": carry}`` after the first round that judged some while others are still under analysis (hand
    ``targets``, ``state`` and ``deadline`` to a new trigger to go on: the next round, the schedule and the
    deadline are kept); or ``{"status": "error", "message": ..., "carry": carry}`` when the analysis cannot run
    (bad arguments, a missing or incomplete connection, the service refusing the key, a source's client that
    cannot be built, anything unexpected outside the measurements, the rounds not done within
    :func:`analysis_seconds` or by ``deadline``, so that the task decides, not Airflow's deferral timeout). The
    sources' requests are shared across the targets (one vector query per round, one stats request per
    deployment, the tracing project ids looked up once per trigger).

    A trigger resumed on another triggerer (a restart) starts its rounds again from its ``state`` (from round 1
    without one: its arguments cannot change, so the rounds it measured are lost); ``deadline`` is wall-clock,
    fixed when the task first deferred the analysis: a restarted trigger that cannot finish its rounds by then
    reports that the analysis could not be measured in time, at the deadline, before Airflow's deferral timeout
    (:func:`~airflow_provider.tasks.analysis.defer_analysis` sizes both for one restart).

    :param analysis: :meth:`Analysis.to_json` (``count`` resolved; no :class:`CallableCheck`).
    :param targets: each :class:`~airflow_provider.analysis.AnalysisTarget` as JSON.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param carry: plain JSON echoed in the event (what the resumed task needs: ``airflow dags test`` in
        Airflow 3.3 drops the ``kwargs`` given to ``defer()``). Never a secret.
    :param deadline: wall-clock time (seconds since the epoch) by which the event must be sent; ``None``: only
        :func:`analysis_seconds` from the start of the rounds bounds them (triggers serialized before it existed).
    :param partial: yield as soon as a round judged some targets while others are still under analysis (a
        fleet wave: each failed deployment is rolled back at once), instead of once all are judged.
    :param state: where an earlier trigger's analysis of these targets stopped (a ``partial`` event's
        ``state``); ``None``: the analysis starts now.
    :param judging: the task instance the analysis is for and until when its judging may last (``{"by":
        {"dag_id", "run_id", "task_id", "map_index", "try_number"}, "until": <Unix seconds>}``): each round's
        measurements so far are written to each deployment's judging marker; ``None``: they are not.
    """

    def __init__(
        self,
        analysis: dict[str, Any],
        targets: list[dict[str, Any]],
        hook_params: dict[str, Any],
        carry: dict[str, Any] | None = None,
        deadline: float | None = None,
        partial: bool = False,
        state: dict[str, Any] | None = None,
        judging: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.analysis = analysis
        self.targets = list(targets)
        self.hook_params = dict(hook_params)
        self.carry = carry
        self.deadline = deadline
        self.partial = bool(partial)
        self.state = state
        self.judging = judging
        self.judging_store: Callable[[str], Any | None] = default_store
        """Where the deployments' judging markers are written (an asset name to its state store; tests swap it)."""
        self._unmarked: set[str] = set()

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
                "partial": self.partial,
                "state": self.state,
                "judging": self.judging,
            },
        )

    def _event(self, payload: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent({**payload, "carry": self.carry})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Measure the rounds (every one, or until some targets are judged), then yield the one event."""
        try:
            analysis = Analysis.from_json(self.analysis)
            targets = [AnalysisTarget.model_validate(target) for target in self.targets]
            count = analysis.rounds()
            state = AnalysisState.from_json(self.state) if self.state is not None else None
        except pydantic.ValidationError as err:
            yield self._event(
                {"status": "error", "message": f"invalid trigger arguments: {describe_validation_error(err)}"}
            )
            return
        except ValueError as err:
            yield self._event({"status": "error", "message": f"invalid trigger arguments: {err}"})
            return
        if state is None:
            limit = analysis_seconds(analysis)
        else:  # the rounds left, the next one due now at the latest (the deadline keeps the whole budget)
            limit = (count - state.rounds) * (analysis.interval_seconds + ANALYSIS_ROUND_ALLOWANCE)
        left = limit if self.deadline is None else min(limit, self.deadline - time.time())
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            event = await asyncio.wait_for(self._measure(analysis, targets, state), timeout=left)
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
        yield self._event(event)

    async def _measure(
        self, analysis: Analysis, targets: list[AnalysisTarget], state: AnalysisState | None
    ) -> dict[str, Any]:
        """The rounds up to the event: every one, or (``partial``) up to the first step that judged some."""
        results: dict[str, AnalysisResult] = {}
        async with contextlib.aclosing(
            analyse(
                analysis,
                targets,
                hook_params=self.hook_params,
                log=self.log,
                resume=state,
                on_round=self._round_measured(targets) if self.judging else None,
            )
        ) as steps:
            async for verdicts in steps:
                results.update(verdicts.decided)
                if verdicts.state is not None and self.partial:
                    return {
                        "status": "partial",
                        "results": results,
                        "targets": [target.model_dump(mode="json") for target in verdicts.pending],
                        "state": verdicts.state.to_json(),
                        "deadline": self.deadline,
                    }
        return {"status": "done", "results": results}

    def _round_measured(self, targets: list[AnalysisTarget]) -> Callable[[int, dict[str, list[Any]]], Awaitable[None]]:
        """What each round calls: the measurements so far of each target, on its deployment's judging marker
        (one read and one write per deployment; a deployment whose marker cannot be written is said once)."""
        revisions = {target.deployment_id: target.revision_id for target in targets}
        judging = self.judging or {}
        named = judging.get("by")
        by: dict[str, Any] = dict(named) if isinstance(named, dict) else {}
        until = judging.get("until") if isinstance(judging.get("until"), (int, float)) else None

        async def measured(round_number: int, so_far: dict[str, list[Any]]) -> None:
            now = time.time()
            for deployment_id, revision_id in revisions.items():
                if deployment_id not in so_far or deployment_id in self._unmarked:
                    continue
                analysis = {"verdict": "analysing", "round": round_number, "measurements": so_far[deployment_id]}
                try:
                    store = self.judging_store(deployment_asset_uri(deployment_id))
                    if store is None:
                        return  # not in a triggerer: nowhere to write
                    value = with_rounds(
                        await store.aget(JUDGING_KEY),
                        revision_id=revision_id,
                        analysis=analysis,
                        at=now,
                        until=until,
                        by=by,
                    )
                    if value is not None:
                        await store.aset(JUDGING_KEY, value)
                except Exception as err:  # no Airflow asset for the deployment: its rounds show at the verdict
                    self._unmarked.add(deployment_id)
                    expected = state_store_unavailable(err)
                    shown = "The rounds of deployment %s are shown with its verdict, not while measured: %s"
                    if expected is not None:  # a condition the provider handles: no error text
                        self.log.debug(shown, deployment_id, expected)
                    else:
                        self.log.info(shown, deployment_id, err)

        return measured
