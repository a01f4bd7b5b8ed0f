"""The rounds of an analysis: :func:`analyse` (the verdicts as they are reached, each step resumable) and
:func:`run_analysis` (all of them at the end), the same code in the triggerer and on the worker.

Each round: one batched list request (through the deployment-service hook's asyncio client) checks that every
deployment still serves the revision judged; then every check is measured for every deployment still under
analysis, the sources sharing their requests (one vector query per :class:`MetricQueryCheck` per round;
one tracing statistics request per deployment per round for all the tracing checks of a project; the
tracing project ids looked up once). Sharing is within one call: each call (one trigger, one task) opens
its own sources, so an analysis resumed in another call looks its tracing projects up again. Each measurement
is logged once, scrubbed of secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from airflow_provider.analysis.definitions import (
    Analysis,
    AnalysisResult,
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    Measurement,
    MetricQueryCheck,
    TracingProjectCheck,
)
from airflow_provider.analysis.judge import AnalysisState, Judgement
from airflow_provider.analysis.measuring.endpoints import (
    AnalysisSetupError,
    prometheus_endpoint,
    resolve_connection,
    tracing_endpoint,
)
from airflow_provider.analysis.measuring.sources import (
    CallableRunner,
    HttpProbe,
    PrometheusSource,
    Reading,
    TracingSource,
    unexpected_reading,
)
from airflow_provider.analysis.rounds import RoundJudging, condition_text, measurement_of
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.analysis.statistics.control import control_members, pool, pooled_checks
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, DeploymentStatus

__all__ = [
    "MeasuringSources",
    "RoundVerdicts",
    "analyse",
    "analysis_not_run_reason",
    "analysis_overran_reason",
    "condition_text",
    "measurement_of",
    "run_analysis",
    "still_serving",
]


class MeasuringSources:
    """The measurement sources of one analysis, created from its connections, closed at its end; only the
    kinds its checks need (opened by its ``open`` class method, closed by its ``aclose``).

    :param scrubber: masks the secrets the sources learn.
    """

    def __init__(self, scrubber: Scrubber) -> None:
        self.scrubber = scrubber
        self.tracing: dict[str | None, TracingSource] = {}
        self.prometheus: dict[str, PrometheusSource] = {}
        self.http: HttpProbe | None = None
        self.callables = CallableRunner(scrubber)

    @classmethod
    async def open(cls, analysis: Analysis, hook: DeploymentServiceHook, scrubber: Scrubber) -> MeasuringSources:
        sources = cls(scrubber)
        try:
            # The service's own API key is masked too (a callable's exception text may hold it).
            conn = await resolve_connection(hook.deployment_service_conn_id, "the analysis")
            scrubber.add(conn.password)
            for check in analysis.checks:  # one connection after the other (the worker's secrets comms)
                if isinstance(check, TracingProjectCheck) and check.connection_id not in sources.tracing:
                    endpoint = await tracing_endpoint(check.connection_id, hook, scrubber)
                    sources.tracing[check.connection_id] = await _built(
                        TracingSource.open(endpoint, scrubber), "TracingProjectCheck", endpoint.connection_id, scrubber
                    )
                elif isinstance(check, MetricQueryCheck) and check.connection_id not in sources.prometheus:
                    endpoint = await prometheus_endpoint(check.connection_id, scrubber)
                    sources.prometheus[check.connection_id] = await _built(
                        PrometheusSource.open(endpoint, scrubber), "MetricQueryCheck", endpoint.connection_id, scrubber
                    )
                elif isinstance(check, HttpCheck) and sources.http is None:
                    sources.http = await _built(HttpProbe.open(scrubber), "HttpCheck", None, scrubber)
        except BaseException:
            await sources.aclose()
            raise
        return sources

    async def aclose(self) -> None:
        closing: list[TracingSource | PrometheusSource | HttpProbe | CallableRunner] = [
            *self.tracing.values(),
            *self.prometheus.values(),
            *([self.http] if self.http is not None else []),
            self.callables,
        ]
        for source in closing:
            with contextlib.suppress(Exception):
                await source.aclose()

    async def measure(
        self,
        check: Any,
        targets: Sequence[AnalysisTarget],
        now: datetime,
        deployments: dict[str, Deployment],
    ) -> dict[str, Reading]:
        """One reading of ``check`` per target. Whatever a source raises is an inconclusive reading naming the
        exception's type (each source already says so per deployment where it can), never the end of the
        analysis."""
        try:
            return await self._measure(check, targets, now, deployments)
        except Exception as err:
            reading = unexpected_reading(check.label(), err, self.scrubber)
            return {target.deployment_id: reading for target in targets}

    async def _measure(
        self,
        check: Any,
        targets: Sequence[AnalysisTarget],
        now: datetime,
        deployments: dict[str, Deployment],
    ) -> dict[str, Reading]:
        if isinstance(check, TracingProjectCheck):
            return await self.tracing[check.connection_id].measure(check, targets, now)
        if isinstance(check, MetricQueryCheck):
            return await self.prometheus[check.connection_id].measure(check, targets, now)
        if isinstance(check, HttpCheck) and self.http is not None:  # opened for every analysis with an HttpCheck
            return await self.http.measure(check, targets, now)
        if isinstance(check, CallableCheck):
            return await self.callables.measure(check, targets, deployments)
        raise TypeError(f"unknown check {type(check).__name__}")  # pragma: no cover - the union is closed


_Source = TypeVar("_Source")


async def _built(opening: Awaitable[_Source], kind: str, connection_id: str | None, scrubber: Scrubber) -> _Source:
    """The source ``opening`` gives, or :class:`AnalysisSetupError` when its client cannot be built (a CA bundle
    that is not there, TLS settings the ssl module refuses): the analysis cannot run."""
    try:
        return await opening
    except Exception as err:
        where = f" of connection {connection_id!r}" if connection_id is not None else ""
        raise AnalysisSetupError(
            scrubber(f"{kind}: the client{where} could not be built ({type(err).__name__}: {err})")
        ) from None


async def still_serving(hook: DeploymentServiceHook, targets: Sequence[AnalysisTarget]) -> dict[str, Deployment | None]:
    """Each target's deployment as the service shows it now (``None``: not found), in one list request per
    100 deployments.

    :param hook: the deployment-service hook.
    :param targets: the deployments to look at.
    :raises DeploymentServiceError: when the list cannot be read (after the client's retries).
    """
    client = await hook.get_async_client()
    found: dict[str, Deployment | None] = {target.deployment_id: None for target in targets}
    ids = list(found)
    for start in range(0, len(ids), MAX_PAGE_SIZE):
        chunk = ids[start : start + MAX_PAGE_SIZE]
        page = await client.list_deployments(deployment_ids=chunk, limit=len(chunk))
        for deployment in page.resources:
            if deployment.id in found:
                found[deployment.id] = deployment
    return found


def _not_serving(target: AnalysisTarget, deployment: Deployment | None) -> str | None:
    if deployment is None:
        return f"deployment {target.name!r} ({target.deployment_id}) was not found: it no longer serves"
    if deployment.active_revision_id != target.revision_id or deployment.status != DeploymentStatus.READY:
        return (
            f"revision {target.revision_id} of {target.name!r} no longer serves: active revision "
            f"{deployment.active_revision_id}, status {deployment.status.value}"
        )
    return None


@dataclass(frozen=True)
class RoundVerdicts:
    """What one step of :func:`analyse` reached.

    :param decided: ``{deployment_id: AnalysisResult}`` of the deployments judged in this step.
    :param pending: the deployments still under analysis (none once the analysis is over).
    :param state: where their analysis stands (to go on with it in another call, another trigger), ``None``
        once the analysis is over.
    """

    decided: dict[str, AnalysisResult]
    pending: list[AnalysisTarget]
    state: AnalysisState | None

    @property
    def over(self) -> bool:
        """Whether every deployment is judged."""
        return self.state is None


async def analyse(
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    *,
    hook_params: dict[str, Any],
    log: logging.Logger | logging.LoggerAdapter[Any] | Any,
    resume: AnalysisState | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
    on_round: Callable[[int, dict[str, list[Measurement]]], Any] | None = None,
) -> AsyncGenerator[RoundVerdicts, None]:
    """Measure every check of ``analysis`` for every target, round after round, yielding the verdicts as they
    are reached: after each round that judged a target while others are still under analysis (with their
    :class:`~airflow_provider.analysis.judge.AnalysisState`), and once at the end (every target left judged).

    Round ``k`` starts ``initial_delay_seconds + k * interval_seconds`` after the analysis started. A target
    whose verdict is known (failed, inconclusive, no longer serving) is not measured again. The caller may stop
    after any step (close the generator: ``contextlib.aclosing``) and go on later with the pending targets and
    ``resume=step.state``: the next round is ``state.rounds + 1``, each target's verdict is rebuilt from its
    measurements, and the rounds keep their schedule (moved later by how late the call is, never bunched).

    :param analysis: the analysis, its ``count`` resolved (:meth:`Analysis.with_count_for`).
    :param targets: the revisions to judge (distinct deployments).
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and overrides).
    :param log: where each measurement and each verdict is logged (the task's or the trigger's logger).
    :param resume: where an earlier call stopped (its targets still pending are ``targets``); ``None``: start.
    :param sleep: awaits a number of seconds (tests pass a fake one).
    :param clock: wall-clock seconds since the epoch (tests pass a fake one).
    :param on_round: called after each round that measured something, with the round's number and every
        target's measurements so far (by deployment id), and awaited when it returns an awaitable (a
        coroutine function); what it raises is logged, never the analysis's.
    :raises ~airflow_provider.analysis.measuring.endpoints.AnalysisSetupError: a source's connection is missing or
        incomplete (before any measurement).
    :raises ValueError: targets that are not distinct, or a ``resume`` state that does not fit the analysis.
    """
    count = analysis.rounds()
    if len({target.deployment_id for target in targets}) != len(targets):
        raise ValueError("targets must name distinct deployments")
    labels = [check.label() for check in analysis.checks]
    state = resume if resume is not None else AnalysisState(started_at=clock())
    judgements = {
        target.deployment_id: Judgement.resumed(
            analysis, target.revision_id, labels, state.measurements.get(target.deployment_id, [])
        )
        for target in targets
    }
    rounds, delay = state.rounds, state.delay
    if rounds < count:  # going on late: the later rounds keep their spacing, from now
        delay += max(0.0, clock() - _round_due(analysis, state.started_at, delay, rounds + 1))
    reported: set[str] = set()

    def step(final: bool) -> RoundVerdicts:
        """The verdicts reached and not yet reported (every one left, when ``final``), and the rest's state."""
        decided: dict[str, AnalysisResult] = {}
        for target in targets:
            judgement = judgements[target.deployment_id]
            if target.deployment_id in reported or not (final or judgement.decided):
                continue
            result = decided[target.deployment_id] = judgement.finish(rounds)
            if target.baseline is not None:  # what the preflight measured on the revision serving before
                result["baseline"] = [Measurement(**taken) for taken in target.baseline]  # type: ignore[typeddict-item]
            log.info(
                "Analysis of %r revision %s: %s (%s)",
                target.name,
                target.revision_id,
                result["verdict"],
                result["reason"],
            )
        reported.update(decided)
        pending = [target for target in targets if target.deployment_id not in reported]
        if not pending:
            return RoundVerdicts(decided, [], None)
        measured = {target.deployment_id: list(judgements[target.deployment_id].measurements) for target in pending}
        return RoundVerdicts(decided, pending, AnalysisState(state.started_at, rounds, delay, measured))

    if any(judgement.decided for judgement in judgements.values()):  # decided by the measurements resumed
        early = step(final=False)
        yield early
        if early.over:
            return
    scrubber = Scrubber()
    judging = RoundJudging(judgements, scrubber)
    hook = DeploymentServiceHook(**hook_params)
    sources = await MeasuringSources.open(analysis, hook, scrubber)
    try:
        for round_number in range(rounds + 1, count + 1):
            active = [target for target in targets if not judgements[target.deployment_id].decided]
            if not active:
                break
            await sleep(max(0.0, _round_due(analysis, state.started_at, delay, round_number) - clock()))
            rounds = round_number
            deployments = await _check_still_serving(hook, active, judgements, round_number, count, log, scrubber)
            active = [target for target in active if not judgements[target.deployment_id].decided]
            if active:
                now = datetime.fromtimestamp(clock(), tz=timezone.utc)
                controls = await _control_counts(sources, pooled_checks(analysis), active, now, round_number, log)
                readings = await asyncio.gather(
                    *(sources.measure(check, active, now, deployments) for check in analysis.checks)
                )
                for target in active:
                    for check, label, by_target in zip(analysis.checks, labels, readings, strict=True):
                        reading = by_target[target.deployment_id]
                        measurement = judging.record(
                            check,
                            label,
                            target,
                            reading,
                            round_number,
                            now,
                            controls.get((target.deployment_id, label)),
                        )
                        _log_measurement(log, measurement, count)
                if on_round is not None:
                    so_far = {key: list(judgement.measurements) for key, judgement in judgements.items()}
                    try:
                        told = on_round(round_number, so_far)
                        if inspect.isawaitable(told):  # a trigger's: it writes through the supervisor
                            await told
                    except Exception as err:  # the measurements so far are for people: never fatal
                        log.warning("Could not report analysis round %d: %s", round_number, err)
            decided = [target for target in targets if judgements[target.deployment_id].decided]
            if round_number < count and len(reported) < len(decided) < len(targets):  # new verdicts, others go on
                yield step(final=False)
    finally:
        await sources.aclose()
        await hook.aclose()
    yield step(final=True)


async def _control_counts(
    sources: MeasuringSources,
    checks: Sequence[TracingProjectCheck],
    targets: Sequence[AnalysisTarget],
    now: datetime,
    round_number: int,
    log: Any,
) -> dict[tuple[str, str], dict[str, Any] | None]:
    """Each target with a control group: its group's counts of ``checks`` this round, over the target's own window
    (see :mod:`~airflow_provider.analysis.statistics.control`), by ``(deployment id, check label)``; each logged."""
    counts: dict[tuple[str, str], dict[str, Any] | None] = {}
    for target in targets:
        if target.control is None or not checks:
            continue
        members = control_members(target)
        for check in checks:
            readings = await sources.measure(check, members, now, {}) if members else {}
            measured = [
                (member, readings[member["deployment_id"]])
                for member in target.control
                if member["deployment_id"] in readings
            ]
            measurement, counted = pool(check, target, measured, round_number, now)
            counts[(target.deployment_id, check.label())] = counted
            value = measurement["value"]
            log.info(
                "Analysis round %d: %s of the %s = %s (%s)",
                round_number,
                measurement["check"],
                measurement["name"],
                "n/a" if value is None else f"{value:.4g}",
                measurement["detail"],
            )
    return counts


def _round_due(analysis: Analysis, started_at: float, delay: float, round_number: int) -> float:
    """Wall-clock time round ``round_number`` of an analysis started at ``started_at`` is due."""
    return started_at + delay + analysis.initial_delay_seconds + round_number * analysis.interval_seconds


async def run_analysis(
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    *,
    hook_params: dict[str, Any],
    log: logging.Logger | logging.LoggerAdapter[Any] | Any,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
    on_round: Callable[[int, dict[str, list[Measurement]]], Any] | None = None,
) -> dict[str, AnalysisResult]:
    """Every round of :func:`analyse` to the end: each target's verdict.

    :param analysis: the analysis, its ``count`` resolved (:meth:`Analysis.with_count_for`).
    :param targets: the revisions to judge (distinct deployments).
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and overrides).
    :param log: where each measurement is logged (the task's or the trigger's logger).
    :param sleep: awaits a number of seconds (tests pass a fake one).
    :param clock: wall-clock seconds since the epoch (tests pass a fake one).
    :param on_round: as on :func:`analyse`.
    :return: each target's :class:`~airflow_provider.analysis.AnalysisResult`, by deployment id.
    :raises ~airflow_provider.analysis.measuring.endpoints.AnalysisSetupError: a source's connection is missing or
        incomplete (before any measurement).
    """
    results: dict[str, AnalysisResult] = {}
    async with contextlib.aclosing(
        analyse(analysis, targets, hook_params=hook_params, log=log, sleep=sleep, clock=clock, on_round=on_round)
    ) as steps:
        async for verdicts in steps:
            results.update(verdicts.decided)
    return {target.deployment_id: results[target.deployment_id] for target in targets}


async def _check_still_serving(
    hook: DeploymentServiceHook,
    active: Sequence[AnalysisTarget],
    judgements: dict[str, Judgement],
    round_number: int,
    count: int,
    log: Any,
    scrubber: Scrubber,
) -> dict[str, Deployment]:
    try:
        shown = await still_serving(hook, active)
    except DeploymentServiceError as err:
        log.warning(
            "Analysis round %d/%d: could not check that the revisions still serve (%s); measuring anyway",
            round_number,
            count,
            scrubber(str(err)),
        )
        return {}
    for target in active:
        reason = _not_serving(target, shown[target.deployment_id])
        if reason is not None:
            log.warning("Analysis round %d/%d: %s", round_number, count, reason)
            judgements[target.deployment_id].stop_serving(round_number, reason)
    return {deployment_id: deployment for deployment_id, deployment in shown.items() if deployment is not None}


def _log_measurement(log: Any, measurement: Measurement, count: int) -> None:
    value = measurement["value"]
    log.info(
        "Analysis round %d/%d: %s on %r = %s, needs %s -> %s (%s)",
        measurement["round"],
        count,
        measurement["check"],
        measurement["name"],
        "n/a" if value is None else f"{value:.3f}",
        measurement["condition"],
        measurement["verdict"],
        measurement["detail"],
    )


def analysis_not_run_reason(err: Exception) -> str:
    """Why an analysis could not run at all, the same words from the trigger (its ``error`` event) and the
    worker: what the analysis's own errors say (a connection missing or incomplete, the service failing, bad
    arguments); for anything else, its type only (its text may hold a secret).

    :param err: what ended the analysis.
    """
    if isinstance(err, (AnalysisSetupError, DeploymentServiceError, ValueError)):
        return f"the analysis could not run: {err}"
    return (
        f"the analysis could not run: an unexpected {type(err).__name__} (its text is left out: it may hold a secret)"
    )


def analysis_overran_reason(limit: float) -> str:
    """What the trigger and the worker say of an analysis that did not finish within ``limit`` seconds
    (``analysis_seconds`` of :mod:`~airflow_provider.analysis.definitions`).

    :param limit: the time limit, in seconds.
    """
    return f"the analysis did not finish within {limit:g} s (its rounds and their allowance)"
