"""Task-side glue of analysis gates: measure on the worker or defer to the triggerer, read the event back,
and say in one line why a revision did not pass.

Used by every task that judges a revision by an :class:`~airflow_provider.analysis.Analysis` (the patch and
fleet operators, :class:`~airflow_provider.operators.analysis.DeploymentAnalysisOperator`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.analysis import Analysis, AnalysisResult, AnalysisTarget
from airflow_provider.analysis.conditions import template_fields
from airflow_provider.analysis.definitions import (
    ANALYSIS_ROUND_ALLOWANCE,
    VERDICTS,
    HttpCheck,
    MetricQueryCheck,
    TracingProjectCheck,
    analysis_seconds,
)
from airflow_provider.analysis.scrubbing import without_userinfo
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, PatchDeploymentRequest, RevisionStatus
from airflow_provider.tasks.base import DEFERRAL_GRACE

if TYPE_CHECKING:
    import logging

    from airflow_provider.analysis.measuring.run import RoundVerdicts

__all__ = [
    "ANALYSIS_RESTARTS",
    "ANALYSIS_ROUND_ALLOWANCE",
    "AnalysingTask",
    "AnalysisNotMeasured",
    "analyse_in_steps_on_worker",
    "analyse_on_worker",
    "analysis_event_results",
    "analysis_event_subject",
    "analysis_failure_reason",
    "analysis_seconds",
    "check_analysis_sources",
    "check_custom_urls",
    "defer_analysis",
    "live_since",
    "log_measured_rounds",
    "no_retry_left",
    "not_measured_result",
]


ANALYSIS_RESTARTS = 1
"""Triggerer restarts a deferred analysis is given time for: a restarted trigger starts its rounds again (its
arguments cannot change), so its deadline and the deferral timeout allow the rounds this many times more."""


class AnalysisNotMeasured(AirflowException):
    """The analysis could not be measured at all (its trigger reported an error, or it could not run on the
    worker): no verdict. A task retries (and analyses again) while it has retries left; on its last try it
    counts the revision inconclusive, a failed revision (see :func:`no_retry_left`)."""


class AnalysingTask(Protocol):
    """What the glue needs of a task: its hook, its logger, and ``defer``."""

    @property
    def hook(self) -> DeploymentServiceHook: ...

    @property
    def log(self) -> Any: ...

    def defer(
        self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = ..., timeout: Any = ...
    ) -> NoReturn: ...


def live_since(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    revision_id: str,
    *,
    log: logging.Logger | Any,
    seen_live_at: datetime | None = None,
) -> datetime:
    """When ``revision_id`` went live on ``deployment``: the start of its analysis window (the tracing statistics
    count from then), so that the window never holds the runs of the revision that served before it.

    The deployment's ``updated_at`` tells only on a service that moves it when a revision goes live (the spec does
    not say so; a service that moves it only on PATCH would put the build in the window). So: the revision's own
    ``updated_at`` once it is ``DEPLOYED`` (its last status change; the optional revision endpoint, on the
    service's clock), else ``seen_live_at`` (the first time the task saw it active, on the task's clock); never
    earlier than the deployment's ``updated_at`` as read with the revision live (at or after the PATCH was
    accepted, on the service's clock).

    :param hook: the hook (asked for the revision; a service without that endpoint, or failing, is not an error).
    :param deployment: the deployment, as read with the revision live.
    :param revision_id: the live revision to analyse.
    :param log: the task's logger.
    :param seen_live_at: when the task first saw the revision active (``None``: now).
    """
    went_live = seen_live_at or datetime.fromtimestamp(time.time(), timezone.utc)
    try:
        revision = hook.get_revision(deployment.id, revision_id)
    except DeploymentServiceError as err:  # an optional endpoint: absent (404/405) or failing
        log.info("The revision endpoint does not say when revision %s went live (%s)", revision_id, err)
    else:
        stamped = revision.updated_at
        created = revision.created_at
        if (
            revision.status is RevisionStatus.DEPLOYED
            and stamped is not None
            and (created is None or stamped > created)
        ):
            went_live = stamped
    return max(went_live, deployment.updated_at)


def analyse_on_worker(
    task: AnalysingTask,
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    on_round: Callable[[int, dict[str, list[Any]]], Any] | None = None,
) -> dict[str, AnalysisResult]:
    """Run the analysis here, on the worker (poke mode, or an analysis with a :class:`CallableCheck`), bounded
    as in the triggerer: it must end within :func:`analysis_seconds`.

    :param task: the task (its hook's settings and its logger are used).
    :param analysis: the analysis, ``count`` resolved.
    :param targets: the revisions to judge.
    :param on_round: given each round's number and the measurements so far (e.g. to record them).
    :return: each target's result by deployment id.
    :raises AnalysisNotMeasured: when the analysis cannot run (a missing connection, the key refused, a source's
        client that cannot be built, anything unexpected outside the measurements) or does not finish in time.
    """
    from airflow_provider.analysis.measuring.run import (  # the measuring side: on first use
        analysis_not_run_reason,
        analysis_overran_reason,
        run_analysis,
    )

    limit = analysis_seconds(analysis)
    measuring = run_analysis(analysis, targets, hook_params=task.hook.hook_params, log=task.log, on_round=on_round)
    try:
        return asyncio.run(asyncio.wait_for(measuring, timeout=limit))
    except asyncio.TimeoutError:
        raise AnalysisNotMeasured(analysis_overran_reason(limit)) from None
    except Exception as err:
        raise AnalysisNotMeasured(analysis_not_run_reason(err)) from None


def analyse_in_steps_on_worker(
    task: AnalysingTask,
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    on_verdicts: Callable[[RoundVerdicts], bool],
    *,
    interrupted: Callable[[], bool] | None = None,
    check_every: float = 5.0,
) -> None:
    """Run the analysis here, on the worker, handing the verdicts to ``on_verdicts`` as they are reached (a
    :class:`~airflow_provider.analysis.measuring.run.RoundVerdicts` after each round that judged some targets, and one
    at the end): on this thread, between two rounds, so it may act on them at once (send requests); it
    returns whether the analysis of the others goes on. The requests stay shared by the whole analysis (one
    set of sources, the tracing projects looked up once).

    Bounded as in the triggerer: the rounds must be done within :func:`analysis_seconds` of the start.

    :param task: the task (its hook's settings and its logger are used).
    :param analysis: the analysis, ``count`` resolved.
    :param targets: the revisions to judge.
    :param on_verdicts: given each step; ``False`` stops the analysis there.
    :param interrupted: asked every ``check_every`` seconds while a round is awaited; true stops the analysis there
        (an abort from the Rollouts view: the verdicts handed over so far stand, the round awaited is dropped).
    :param check_every: seconds between two questions to ``interrupted``.
    :raises AnalysisNotMeasured: when the analysis cannot run (a missing connection, the key refused, a source's
        client that cannot be built, anything unexpected outside the measurements) or does not finish in time (the
        verdicts handed over so far stand).
    """
    from airflow_provider.analysis.measuring.run import (  # the measuring side: on first use
        analyse,
        analysis_not_run_reason,
        analysis_overran_reason,
    )

    limit = analysis_seconds(analysis)
    deadline = time.monotonic() + limit
    loop = asyncio.new_event_loop()
    steps = analyse(analysis, targets, hook_params=task.hook.hook_params, log=task.log)
    try:
        while True:
            try:
                verdicts = loop.run_until_complete(
                    _next_step(steps, max(0.0, deadline - time.monotonic()), interrupted, check_every)
                )
                if verdicts is None:
                    task.log.warning("The analysis stopped: the rollout was aborted")
                    return
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise AnalysisNotMeasured(analysis_overran_reason(limit)) from None
            except Exception as err:
                raise AnalysisNotMeasured(analysis_not_run_reason(err)) from None
            if not on_verdicts(verdicts) or verdicts.over:  # what it raises is the task's, not the analysis's
                return
    finally:
        try:
            # A step interrupted mid-way (Airflow's execution_timeout raised in it) still runs the generator: cancel
            # it first, or closing the generator fails and hides the timeout (and Airflow would not call on_kill).
            interrupted_steps = asyncio.all_tasks(loop)
            for pending_step in interrupted_steps:
                pending_step.cancel()
            if interrupted_steps:
                loop.run_until_complete(asyncio.gather(*interrupted_steps, return_exceptions=True))
            loop.run_until_complete(steps.aclose())  # closes the sources' clients
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _next_step(
    steps: AsyncIterator[RoundVerdicts],
    timeout: float,
    interrupted: Callable[[], bool] | None,
    check_every: float,
) -> RoundVerdicts | None:
    """The analysis's next step within ``timeout`` (``asyncio.TimeoutError`` past it), or ``None`` when
    ``interrupted`` said so while it was awaited (the step is then cancelled)."""
    if interrupted is None:
        return await asyncio.wait_for(anext(steps), timeout)

    async def step() -> RoundVerdicts:
        return await anext(steps)

    end = time.monotonic() + timeout
    pending = asyncio.ensure_future(step())
    try:
        while True:
            left = end - time.monotonic()
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, min(check_every, left)))
            if done:
                return pending.result()
            if left <= check_every:
                raise asyncio.TimeoutError
            if interrupted():
                return None
    finally:
        if not pending.done():
            pending.cancel()
            await asyncio.wait({pending})


def defer_analysis(
    task: AnalysingTask,
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    *,
    method_name: str,
    carry: dict[str, Any],
    partial: bool = False,
    state: dict[str, Any] | None = None,
    deadline: float | None = None,
    judging: dict[str, Any] | None = None,
) -> NoReturn:
    """Hand the analysis to a :class:`DeploymentAnalysisTrigger` (raises ``TaskDeferred``).

    The task resumes in ``method_name`` with the event; read it with :func:`analysis_event_results` and
    what the resume needs from ``event["carry"]`` (``dag.test()`` in Airflow 3.3 drops defer kwargs).

    Sized for :data:`ANALYSIS_RESTARTS` triggerer restarts: the trigger's wall-clock ``deadline`` is that many
    more runs of its rounds (:func:`analysis_seconds`) away, and Airflow's deferral timeout comes
    ``DEFERRAL_GRACE`` later, so a trigger restarted too late to finish reports "could not be measured in time"
    itself (the task retries, or rolls back on its last try) before Airflow's timeout can end the deferral. An
    analysis that goes on (``state``) keeps the deadline it was given when it first deferred: its time budget is
    not restarted.

    :param task: the deferring task.
    :param analysis: the analysis, ``count`` resolved; no :class:`CallableCheck` (those run on the worker).
    :param targets: the revisions to judge.
    :param method_name: the task method to resume in.
    :param carry: plain JSON (never a secret) echoed in the event and also given as ``kwargs``.
    :param partial: resume as soon as some targets are judged (a ``partial`` event), not once all are.
    :param state: a ``partial`` event's ``state``: go on with the analysis of ``targets`` where it stopped.
    :param deadline: a ``partial`` event's ``deadline`` (wall-clock seconds), with ``state``; ``None``: from now.
    :param judging: the trigger writes each round's measurements to the deployments' judging markers for this
        task (:func:`~airflow_provider.tasks.publishing.trigger_judging`), for the Rollouts view; ``None``: it does not.
    """
    from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger  # only a deferring task needs it

    now = time.time()
    if deadline is None:
        deadline = now + (1 + ANALYSIS_RESTARTS) * analysis_seconds(analysis)
    trigger = DeploymentAnalysisTrigger(
        analysis=analysis.to_json(),
        targets=[target.model_dump(mode="json") for target in targets],
        hook_params=task.hook.hook_params,
        carry=carry,
        deadline=deadline,
        partial=partial,
        state=state,
        judging=judging,
    )
    task.defer(
        trigger=trigger,
        method_name=method_name,
        kwargs={"carry": carry},
        timeout=timedelta(seconds=max(0.0, deadline - now) + DEFERRAL_GRACE),
    )


def analysis_event_results(event: Any, log: logging.Logger | Any = None) -> dict[str, AnalysisResult]:
    """The results of a :class:`DeploymentAnalysisTrigger` event, checked (of a ``partial`` event: the targets
    judged so far); with ``log``, each round's measurements logged again in the task's log (the trigger logged
    them where it ran), whatever the verdict.

    :param event: the event the task resumed with.
    :param log: the task's logger (``None``: nothing logged).
    :raises AnalysisNotMeasured: the trigger reported an error (its message).
    :raises AirflowException: the event has another shape (naming what is wrong).
    """
    if not isinstance(event, dict):
        raise AirflowException(f"the analysis trigger sent no event dict, got {type(event).__name__}")
    status = event.get("status")
    if status == "error":
        raise AnalysisNotMeasured(str(event.get("message") or "the analysis trigger reported an error"))
    if status not in ("done", "partial"):
        raise AirflowException(
            f"the analysis trigger sent an event with status {status!r}, expected 'done', 'partial' or 'error'"
        )
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
    if log is not None:
        for result in results.values():
            log_measured_rounds(result, log)
    return results


def log_measured_rounds(result: AnalysisResult, log: logging.Logger | Any) -> None:
    """Log each measurement of an analysis measured in the triggerer, one line a round and check, as the worker
    logs them while it measures; then the verdict.

    :param result: one deployment's result (its ``measurements``).
    :param log: the task's logger.
    """
    measurements = [item for item in result.get("measurements") or [] if isinstance(item, dict)]
    for item in measurements:
        value = item.get("value")
        log.info(
            "Analysis round %s (measured in the triggerer): %s on %r = %s, needs %s -> %s (%s)",
            item.get("round"),
            item.get("check"),
            item.get("name"),
            "n/a" if not isinstance(value, (int, float)) else f"{value:.3f}",
            item.get("condition"),
            item.get("verdict"),
            item.get("detail"),
        )
    log.info("Analysis of revision %s: %s (%s)", result.get("revision_id"), result.get("verdict"), result.get("reason"))


def analysis_event_subject(event: Any) -> dict[str, Any]:
    """The deployment and revision an analysis event of one target is about (``{}`` when it does not say).

    :param event: the event the task resumed with.
    """
    results = event.get("results") if isinstance(event, dict) else None
    if not isinstance(results, dict) or len(results) != 1:
        return {}
    deployment_id, result = next(iter(results.items()))
    revision_id = result.get("revision_id") if isinstance(result, dict) else None
    return {"deployment_id": deployment_id, "revision_id": revision_id}


def analysis_failure_reason(result: AnalysisResult) -> str | None:
    """``None`` when the analysis passed; else one line for messages (an inconclusive analysis fails too).

    :param result: one deployment's result.
    """
    if result["verdict"] == "passed":
        return None
    if result["verdict"] == "inconclusive":
        return f"analysis inconclusive (treated as failed): {result['reason']}"
    return f"analysis failed: {result['reason']}"


def no_retry_left(context: Any, retries: Any) -> bool:
    """Whether this try is the task's last (Airflow will not retry it): ``ti.try_number > retries``.

    :param context: the task context.
    :param retries: the task's ``retries``.
    """
    try_number = getattr(context["ti"], "try_number", None) or 1
    try:
        allowed = int(retries or 0)
    except (TypeError, ValueError):
        allowed = 0
    return int(try_number) > allowed


def not_measured_result(revision_id: str, why: str) -> AnalysisResult:
    """The result of a revision the analysis could not measure at all: inconclusive, no measurement.

    :param revision_id: the revision that was to be judged.
    :param why: why it could not be measured (the trigger's or the worker's message; never a secret).
    """
    return {
        "verdict": "inconclusive",
        "failing_check": None,
        "reason": f"the analysis could not be measured ({why})",
        "revision_id": revision_id,
        "measurements": [],
    }


def check_analysis_sources(
    hook: DeploymentServiceHook, analysis: Analysis, *, unchanged: str = "nothing was patched"
) -> None:
    """Resolve every connection the analysis measures through (a tracing project's, a Prometheus query's)
    before anything is patched: one that is missing or incomplete fails the task naming the check kind, the
    connection and what to set, instead of a revision going live that the analysis then cannot judge. No
    request is sent. Call it only on a fresh start (no patch or rollback recorded, no saved progress): a
    retry goes on with what an earlier try started.

    :param hook: the task's hook (its connection is the tracing project's by default).
    :param analysis: the analysis.
    :param unchanged: what the message says was left unchanged (true when this is called).
    :raises AirflowFailException: naming what is missing or incomplete (never a secret): no retry helps.
    :raises AirflowException: a connection could not be looked up (a secrets backend or the API server
        failing): a retry may find it.
    """
    from airflow_provider.analysis.measuring.endpoints import (  # the measuring side: on first use
        AnalysisSetupError,
        ConnectionLookupError,
        prometheus_endpoint,
        tracing_endpoint,
    )
    from airflow_provider.analysis.scrubbing import Scrubber

    async def resolve() -> None:
        scrubber = Scrubber()
        for check in analysis.checks:
            if isinstance(check, TracingProjectCheck):
                await tracing_endpoint(check.connection_id, hook, scrubber)
            elif isinstance(check, MetricQueryCheck):
                await prometheus_endpoint(check.connection_id, scrubber)

    try:
        asyncio.run(resolve())
    except ConnectionLookupError as err:
        raise AirflowException(f"the analysis's sources could not be checked, {unchanged}: {err}") from None
    except AnalysisSetupError as err:
        raise AirflowFailException(f"the analysis cannot run, {unchanged}: {err}") from None


def check_custom_urls(
    analysis: Analysis,
    deployments: Sequence[Deployment],
    *,
    unchanged: str = "nothing was patched",
    request_for: Callable[[Deployment], PatchDeploymentRequest] | None = None,
) -> None:
    """Refuse an :class:`HttpCheck` whose ``url`` uses ``{custom_url}`` for a deployment whose
    ``source_config.custom_url`` (the one the patch sets, else the one it shows) is missing or is not an http(s)
    URL: every measurement would be inconclusive, and the revision rolled back only after going live. Names the
    check, each deployment and what is wrong with its URL; no request is sent.

    :param analysis: the analysis.
    :param deployments: the deployments about to be patched, as read before patching.
    :param unchanged: what the message says was left unchanged (true when this is called).
    :param request_for: the patch each deployment is about to get (a ``custom_url`` it sets is the one checked).
    :raises AirflowFailException: naming each such check, deployment and URL problem.
    """
    from airflow_provider.analysis.measuring.endpoints import http_url_problem  # the measuring side: on first use

    checks = [
        check
        for check in analysis.checks
        if isinstance(check, HttpCheck) and "custom_url" in template_fields(check.url, HttpCheck.URL_FIELDS, "url")
    ]
    if not checks:
        return
    missing, invalid = [], []
    for deployment in deployments:
        given = request_for(deployment).source_config if request_for is not None else None
        set_by_patch = given.custom_url if given is not None else None
        url = (set_by_patch if set_by_patch is not None else deployment.source_config.custom_url or "").strip()
        shown = f"{deployment.name!r} ({deployment.id})"
        problem = http_url_problem(url) if url else None
        if not url:
            missing.append(shown)
        elif problem is not None:
            after = " after the patch" if set_by_patch is not None else ""
            invalid.append(f"the custom_url of {shown}{after}, {without_userinfo(url)!r}, {problem}")
    if not missing and not invalid:
        return
    problems = []
    for check in checks:
        if missing:
            problems.append(
                f"HttpCheck {check.label()!r} GETs {check.url!r}, but {', '.join(missing)} has no custom_url"
            )
        problems.extend(f"HttpCheck {check.label()!r} GETs {check.url!r}, but {what}" for what in invalid)
    raise AirflowFailException(
        f"the analysis can never pass, {unchanged}: {'; '.join(problems)} (source_config.custom_url); give the "
        "check a url without {custom_url} (e.g. 'https://svc.example.com/health'), or set the deployment's "
        "custom_url to an http(s) URL"
    )
