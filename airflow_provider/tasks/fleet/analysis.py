"""The analysis step of a fleet wave (``FleetRolloutOperator(analysis=...)``): what it judges, and how each
verdict is recorded and acted on as it comes.

A wave's landed deployments are analysed together (:class:`WaveAnalysis`), and a verdict does not wait for
the others': after each round that judged some of them, their verdicts are recorded in the fleet's progress
(``task_state_store``) first, then the failed ones are rolled back at once (``rollback_on_failure``), then the
failure budget is looked at. Within it, the others are analysed on with the rounds they had (on the worker,
in the same analysis; in the triggerer, in a new trigger given where the analysis stood: no round lost, the
schedule and the deadline kept). Over it (or a failed canary), the rest of the wave is not analysed
further: the wave stops the rollout, and its landed deployments are rolled back with it at once (or kept,
without ``rollback_on_failure``), each saying it was not judged.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException

from airflow_provider.analysis import Analysis, AnalysisTarget
from airflow_provider.decisions.fleet_progress import (
    CANARY,
    ROW_MEASUREMENTS,
    FleetProgress,
    FleetRow,
    Outcome,
    WaveRecord,
)
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import DeploymentStatus
from airflow_provider.tasks.analysis import (
    AnalysingTask,
    AnalysisNotMeasured,
    analyse_in_steps_on_worker,
    analysis_event_results,
    defer_analysis,
    live_since,
)
from airflow_provider.tasks.dry_run import dry_run_message, dry_run_result
from airflow_provider.tasks.fleet.plan import read_deployments
from airflow_provider.tasks.fleet.progress import ProgressStore, scrub_messages
from airflow_provider.tasks.fleet.rollback import start_rollbacks
from airflow_provider.tasks.publishing import trigger_judging

if TYPE_CHECKING:
    import logging

    from airflow_provider.analysis.measuring.run import RoundVerdicts

__all__ = [
    "NOT_ANALYSED",
    "NOT_JUDGED",
    "NO_RESULT",
    "WaveAnalysis",
    "analysis_targets",
    "apply_analysis",
    "awaiting_analysis",
    "control_rows",
    "kept_result",
]

NO_RESULT = "no analysis result came back for it: not judged, so treated as inconclusive"
"""The reason of a row the analysis was to judge and that got no result (never landed unjudged)."""
NOT_ANALYSED = "not analysed: its wave stopped the rollout before its analysis started"
"""What a landed row of a wave that stopped the rollout before its analysis says (it was never judged)."""
NOT_JUDGED = "not judged: its analysis stopped"
"""How a landed row whose analysis stopped when its wave stopped the rollout says so (before the rounds)."""


# ------------------------------------------------------------------------------------ what is judged
def awaiting_analysis(wave: WaveRecord) -> list[FleetRow]:
    """The rows of the wave the analysis is to judge: landed on a new revision, not judged yet, not left
    unjudged when the wave stopped the rollout, and no rollback asked for (a row whose rollback was asked for
    was judged by an earlier try: its deployment may already serve the rollback, which is not what the analysis
    is to judge).

    :param wave: the wave.
    """
    return [
        row
        for row in wave.rows
        if row.outcome == Outcome.LANDED
        and row.to_revision
        and row.analysis is None
        and row.rollback_requested_after is None
        and not left_unjudged(row)
    ]


def left_unjudged(row: FleetRow) -> bool:
    """Whether the row's analysis was stopped (or never started) because its wave stopped the rollout.

    :param row: a row.
    """
    return f"; {NOT_ANALYSED}" in row.message or f"; {NOT_JUDGED}" in row.message


def control_rows(progress: FleetProgress, index: int) -> list[FleetRow] | None:
    """The control group of wave ``index`` when it is the canary: the first
    :data:`~airflow_provider.analysis.statistics.control.CONTROL_GROUP_LIMIT` deployments of the waves not patched yet
    (by the plan's order); ``None`` for any other wave (judged against its preflight baseline).

    :param progress: the rollout's progress.
    :param index: the wave analysed.
    """
    from airflow_provider.analysis.statistics.control import CONTROL_GROUP_LIMIT

    if progress.waves[index].name != CANARY:
        return None
    later = [row for wave in progress.waves[index + 1 :] if wave.phase == "planned" for row in wave.rows]
    return later[:CONTROL_GROUP_LIMIT]


def analysis_targets(
    hook: DeploymentServiceHook,
    wave: WaveRecord,
    log: logging.Logger | Any,
    control: Sequence[FleetRow] | None = None,
) -> list[AnalysisTarget]:
    """What the analysis of the wave judges: each row of :func:`awaiting_analysis`, read live (one list request
    per 100), with the baseline the preflight measured for it.

    A row whose new revision no longer serves (another revision active, the deployment not ``READY``, or gone)
    fails here, not analysed, as :func:`~airflow_provider.tasks.fleet.watching.verify_wave` fails one that no longer
    serves. The others' ``live_since`` is when their revision went live
    (:func:`~airflow_provider.tasks.analysis.live_since`: the analysis never counts the previous revision's runs)
    and ``custom_url`` their ``source_config.custom_url``.

    :param hook: the hook.
    :param wave: the wave (rows that no longer serve are decided ``failed`` in place).
    :param log: the task's logger.
    :param control: the canary's control group (:func:`control_rows`), read in the same request; those serving a
        revision (``READY``) are each target's ``control``; ``None``: no control group.
    """
    rows = awaiting_analysis(wave)
    wanted = [row.deployment_id for row in [*rows, *(control or [])]]
    live = read_deployments(hook, wanted) if rows else {}
    group: list[dict[str, Any]] | None = None
    if control is not None:
        group = []
        for row in control:
            serving = live.get(row.deployment_id)
            if serving is not None and serving.active_revision_id and serving.status == DeploymentStatus.READY:
                group.append(
                    {
                        "deployment_id": row.deployment_id,
                        "name": row.name,
                        "revision_id": serving.active_revision_id,
                        "baseline": row.baseline,  # its own pre-rollout level: each member weighed by it
                    }
                )
        log.info(
            "%s: the control group (not rolled out yet, serving): %s",
            wave.name,
            ", ".join(member["name"] for member in group) or "none",
        )
    targets: list[AnalysisTarget] = []
    for row in rows:
        deployment = live.get(row.deployment_id)
        now = time.time()
        if deployment is None:
            row.decide(Outcome.FAILED, f"deployment {row.name!r} disappeared before its analysis", now)
            log.warning("%s: %s", wave.name, row.message)
            continue
        if deployment.active_revision_id != row.to_revision or deployment.status != DeploymentStatus.READY:
            row.decide(
                Outcome.FAILED,
                f"revision {row.to_revision} no longer served when its analysis was to start (active: "
                f"{deployment.active_revision_id}; status {deployment.status.value}): not analysed",
                now,
            )
            log.warning("%s: %s: %s", wave.name, row.name, row.message)
            continue
        assert row.to_revision is not None
        targets.append(
            AnalysisTarget(
                deployment_id=row.deployment_id,
                name=row.name,
                revision_id=row.to_revision,
                live_since=live_since(hook, deployment, row.to_revision, log=log),
                custom_url=deployment.source_config.custom_url,
                baseline=row.baseline,
                control=group,
            )
        )
    return targets


# ------------------------------------------------------------------------------------ verdicts
def apply_analysis(
    wave: WaveRecord,
    results: Mapping[str, Mapping[str, Any]],
    log: logging.Logger | Any,
    *,
    missing_reason: str | None = NO_RESULT,
    ask: bool = False,
    dry_run: bool = False,
    rollback: bool = False,
) -> None:
    """Record verdicts of the wave's analysis: each row of :func:`awaiting_analysis` with a result keeps it (its
    latest :data:`~airflow_provider.decisions.fleet_progress.ROW_MEASUREMENTS` measurements); a ``failed`` or
    ``inconclusive`` verdict fails the row, which is then rolled back as a failed ``verify`` is
    (``rollback_on_failure``) and counts against the budget. Once the analysis is over (``missing_reason`` given), a row
    the results leave out (or judge on another revision) is ``inconclusive``: a revision is never called landed without
    a verdict. With ``ask``, an ``inconclusive`` row stays ``landed`` with its result, for a person to decide
    (:mod:`~airflow_provider.tasks.fleet.asking`).

    :param wave: the wave (its rows are updated in place).
    :param results: ``{deployment_id: AnalysisResult}``.
    :param log: the task's logger.
    :param missing_reason: the reason recorded for a row the results leave out; ``None`` while the analysis goes
        on (such a row is still under analysis).
    :param ask: whether an inconclusive verdict waits for a person (``on_inconclusive="ask"``).
    :param dry_run: the analysis's ``dry_run``: a verdict that is not "passed" leaves the row landed (not rolled
        back, not counted against the budget), its result and message saying what the gate would have done.
    :param rollback: whether the gate would have rolled back (``rollback_on_failure``), for a dry run's message.
    """
    for row in awaiting_analysis(wave):
        now = time.time()
        result = results.get(row.deployment_id)
        if not isinstance(result, Mapping) or result.get("revision_id") not in (None, row.to_revision):
            if missing_reason is None:
                continue
            result = {
                "verdict": "inconclusive",
                "failing_check": None,
                "reason": missing_reason,
                "revision_id": row.to_revision,
                "measurements": [],
            }
        verdict = str(result.get("verdict"))
        if dry_run:
            subject = f"revision {row.to_revision} of {row.name!r}"
            then = "the fleet goes on (nothing rolled back, nothing counted against max_failures)"
            result = dry_run_result(result, rollback=rollback, log=log, subject=subject, then=then)
            said = dry_run_message(result)
            if said:
                row.message = f"{row.message}; {said}" if row.message else said
        row.analysis = kept_result(result)
        if dry_run:
            continue
        if verdict == "passed":
            log.info(
                "%s: %s passed its analysis on revision %s (%d measurement(s))",
                wave.name,
                row.name,
                row.to_revision,
                len(result.get("measurements") or []),
            )
            continue
        reason = str(result.get("reason") or "no reason given")
        if ask and verdict == "inconclusive":
            log.warning(
                "%s: %s: analysis inconclusive on revision %s (%s): a person is asked once the wave's analysis is over",
                wave.name,
                row.name,
                row.to_revision,
                reason,
            )
            continue
        shown = {"failed": "failed", "inconclusive": "inconclusive (treated as failed)"}.get(
            verdict, f"verdict {verdict!r} (not passed)"
        )
        row.decide(Outcome.FAILED, f"analysis {shown} on revision {row.to_revision}: {reason}", now)
        log.warning("%s: %s: %s", wave.name, row.name, row.message)


def kept_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """An analysis result as a row keeps it: plain JSON, its latest
    :data:`~airflow_provider.decisions.fleet_progress.ROW_MEASUREMENTS` measurements (``measurements_left_out`` counts
    the others).

    :param result: an ``AnalysisResult``.
    """
    kept = json.loads(json.dumps(dict(result), default=str))
    measurements = kept.get("measurements") or []
    if len(measurements) > ROW_MEASUREMENTS:
        kept["measurements_left_out"] = len(measurements) - ROW_MEASUREMENTS
        kept["measurements"] = measurements[-ROW_MEASUREMENTS:]
    return kept


# ------------------------------------------------------------------------------------ the step
@dataclass
class WaveAnalysis:
    """The analysis of one wave of a fleet rollout, its verdicts acted on as they come (see the module).

    Built afresh for each call (the task's execute, each resume): everything it goes on from is in the progress
    (``task_state_store``, or the trigger's ``carry``) and the trigger's event, never in ``defer()`` kwargs.

    :param task: the fleet task (its hook, logger and ``defer``).
    :param progress: the rollout's progress.
    :param progress_store: where the progress is saved.
    :param index: the wave, in phase ``analysing``.
    :param analysis: the analysis, ``count`` resolved.
    :param rollback_on_failure: roll back each failed deployment as its verdict comes.
    :param stop_reason: why the wave now stops the rollout (the budget spent, a failed canary), else ``None``.
    :param last_try: whether this is the task's last try (an analysis that cannot be measured then judges the
        wave's deployments inconclusive instead of failing the try).
    :param earlier_try_since: the run's start when this is a retry (a rollback found may be an earlier try's).
    :param secrets: the task's secret values (scrubbed from the rows before they travel to the triggerer).
    :param ask: an inconclusive verdict waits for a person (``on_inconclusive="ask"``) instead of failing the row.
    :param control_group: judge the canary's rate checks against its control group (``canary_baseline=
        "control_group"``, see :func:`control_rows`).
    :param interrupted: on the worker, asked every ``check_every`` seconds while a round is awaited: true ends the
        analysis there (an abort that rolls the wave back; see :mod:`~airflow_provider.tasks.fleet.abort`).
    :param check_every: seconds between two questions to ``interrupted``.
    """

    task: AnalysingTask
    progress: FleetProgress
    progress_store: ProgressStore
    index: int
    analysis: Analysis
    rollback_on_failure: bool
    stop_reason: Callable[[], str | None]
    last_try: bool
    earlier_try_since: datetime | None = None
    secrets: Sequence[str] = ()
    ask: bool = False
    control_group: bool = False
    interrupted: Callable[[], bool] | None = None
    check_every: float = 5.0

    @property
    def wave(self) -> WaveRecord:
        """The wave analysed."""
        return self.progress.waves[self.index]

    def save(self) -> None:
        """Record the wave (and the header) in the progress store."""
        self.progress_store.save(self.progress, self.index)

    # ---- the start
    def run(self, *, deferrable: bool, method_name: str) -> None:
        """Analyse what the wave has to be judged (rows judged already, by an earlier try or the resume, are
        not judged again): in the triggerer when ``deferrable`` (raises ``TaskDeferred``: the task resumes in
        ``method_name``; see :meth:`resume`), else on the worker. Before any round, what already failed is
        rolled back and the budget is looked at (over it, nothing is analysed)."""
        if not self.act(rounds=0):
            return
        control = control_rows(self.progress, self.index) if self.control_group else None
        targets = analysis_targets(self.task.hook, self.wave, self.task.log, control)
        if not self.act(rounds=0) or not targets:  # rows no longer serving failed: acted on at once too
            return
        analysis = self.analysis
        in_triggerer = deferrable and not analysis.runs_on_worker
        self.task.log.info(
            "%s: analysing %d deployment(s) %s: %s every %g s, %d round(s): %s",
            self.wave.name,
            len(targets),
            "in the triggerer" if in_triggerer else "on the worker",
            ", ".join(check.label() for check in analysis.checks),
            analysis.interval_seconds,
            analysis.count or 0,
            ", ".join(target.name for target in targets),
        )
        if deferrable and not in_triggerer:
            self.task.log.info("The analysis holds a CallableCheck: it runs on the worker, not in the triggerer")
        if in_triggerer:
            self._defer(targets, method_name)
        try:
            analyse_in_steps_on_worker(
                self.task,
                analysis,
                targets,
                self._on_worker_step,
                interrupted=self.interrupted,
                check_every=self.check_every,
            )
        except AnalysisNotMeasured as err:
            self.not_measured(str(err))

    def _on_worker_step(self, verdicts: RoundVerdicts) -> bool:
        return self.record(
            verdicts.decided,
            over=verdicts.over,
            rounds=verdicts.state.rounds if verdicts.state is not None else self.analysis.rounds(),
        )

    def _defer(
        self,
        targets: Sequence[AnalysisTarget],
        method_name: str,
        state: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> NoReturn:
        """Hand the analysis of ``targets`` to a trigger that yields as soon as some are judged (raises
        ``TaskDeferred``); with ``state`` and ``deadline`` (a ``partial`` event's), it goes on where it stood."""
        scrub_messages(self.progress, self.secrets)
        self.save()
        store = self.progress_store
        defer_analysis(
            self.task,
            self.analysis,
            targets,
            method_name=method_name,
            carry={
                "fleet_wave": self.index,
                "change": self.progress.change,
                # Without a task state store, or when its last save failed, the progress travels with the
                # trigger (JSON, no secrets), as for the waves' watches.
                "progress": self.progress.to_json() if store.store is None or store.behind else None,
            },
            partial=True,
            state=state,
            deadline=deadline,
            # the rounds shown as measured while deferred, for the task whose watchers the progress store tells
            judging=trigger_judging(store.judging.context) if store.judging is not None else None,
        )

    # ---- a resume
    def resume(self, event: Any, *, method_name: str) -> None:
        """Act on a :class:`~airflow_provider.triggers.analysis.DeploymentAnalysisTrigger` event: record its
        verdicts and act on them; a ``partial`` event whose wave goes on defers again (raises ``TaskDeferred``)
        with the rest of the analysis where it stood; an ``error`` event is an analysis that could not be
        measured (see :meth:`not_measured`).

        :param event: the event (the task resumed with it, and only with it under ``dag.test()``).
        :param method_name: the task method to resume in after a further deferral.
        :raises AirflowException: the event has another shape (a retry analyses the rest of the wave again).
        """
        try:
            results = analysis_event_results(event, self.task.log)
        except AnalysisNotMeasured as err:
            self.not_measured(str(err))
            return
        except AirflowException as err:
            raise AirflowException(
                f"the analysis of {self.wave.name} could not run: {err}; its {len(awaiting_analysis(self.wave))} "
                "deployment(s) not judged yet serve their new revision (a retry analyses them again)"
            ) from None
        if event["status"] == "done":
            self.record(results, over=True, rounds=self.analysis.rounds())
            return
        try:
            state = event["state"]
            rounds = int(state["rounds"])
            pending = [AnalysisTarget.model_validate(target) for target in event["targets"]]
            deadline = None if event.get("deadline") is None else float(event["deadline"])
        except (KeyError, TypeError, ValueError) as err:
            raise AirflowException(
                f"the analysis trigger's partial event lacks the analysis of the rest of {self.wave.name} ({err!r}); "
                "a retry analyses it again"
            ) from None
        if not self.record(results, over=False, rounds=rounds):
            return
        awaiting = {row.deployment_id for row in awaiting_analysis(self.wave)}
        targets = [target for target in pending if target.deployment_id in awaiting]
        if targets:
            self.task.log.info(
                "%s: the analysis of %d deployment(s) goes on from round %d: %s",
                self.wave.name,
                len(targets),
                rounds + 1,
                ", ".join(target.name for target in targets),
            )
            self._defer(targets, method_name, state=state, deadline=deadline)

    # ---- acting on verdicts
    def record(self, results: Mapping[str, Mapping[str, Any]], *, over: bool, rounds: int) -> bool:
        """Record these verdicts (with ``over``, a row left out is inconclusive), then act on them (see
        :meth:`act`); whether the analysis of the others goes on.

        :param results: ``{deployment_id: AnalysisResult}`` of the deployments judged since the last call.
        :param over: whether the analysis is over (every deployment it was to judge has its verdict).
        :param rounds: the rounds measured so far.
        """
        apply_analysis(
            self.wave,
            results,
            self.task.log,
            missing_reason=NO_RESULT if over else None,
            dry_run=self.analysis.dry_run,
            rollback=self.rollback_on_failure,
            ask=self.ask,
        )
        return self.act(rounds=rounds)

    def act(self, *, rounds: int) -> bool:
        """Act on the verdicts recorded: save them (before anything acts on them), roll back every deployment of
        the wave that failed and is not rolled back yet (``rollback_on_failure``), and stop the analysis when
        the wave now stops the rollout (its other deployments are left unjudged, to be rolled back with it or
        kept). Whether any deployment is still to be analysed.

        :param rounds: the rounds measured so far (``0``: the analysis has not started).
        """
        self.save()
        if self.rollback_on_failure:
            start_rollbacks(
                self.task.hook,
                self.wave,
                stopping=None,
                save=functools.partial(self.progress_store.save, self.progress, self.index),
                log=self.task.log,
                records=self.progress_store.rollback_records(self.index),
                earlier_try_since=self.earlier_try_since,
            )
        waiting = awaiting_analysis(self.wave)
        reason = self.stop_reason()
        if reason is None:
            return bool(waiting)
        stopped = f"{NOT_JUDGED} after {rounds} of {self.analysis.rounds()} round(s) when its wave stopped the rollout"
        for row in waiting:
            row.message += f"; {stopped if rounds else NOT_ANALYSED}"
            self.task.log.warning("%s: %s: %s", self.wave.name, row.name, row.message)
        if waiting:
            self.task.log.warning(
                "%s: the wave stops the rollout (%s): %d deployment(s) are not analysed further",
                self.wave.name,
                reason,
                len(waiting),
            )
            self.save()
        return False

    def not_measured(self, why: str) -> None:
        """The wave's analysis could not be measured (its trigger reported an error, or it could not run or
        finish on the worker): the verdicts recorded so far stand; with a retry left, fail the try (the retry
        analyses the rest again); on the last try every deployment still to be judged is inconclusive, a failed
        deployment (rolled back at once with ``rollback_on_failure``, counted against the budget).

        :param why: what went wrong (never a secret).
        :raises AirflowException: while a retry is left.
        """
        waiting = len(awaiting_analysis(self.wave))
        if not self.last_try:
            raise AirflowException(
                f"the analysis of {self.wave.name} could not be measured ({why}); its {waiting} deployment(s) not "
                "judged yet serve their new revision (a retry analyses them again)"
            )
        self.task.log.error(
            "%s: the analysis could not be measured on the task's last try (%s): its %d deployment(s) not judged "
            "yet are inconclusive, counted as failed",
            self.wave.name,
            why,
            waiting,
        )
        apply_analysis(
            self.wave,
            {},
            self.task.log,
            missing_reason=f"the analysis could not be measured on the task's last try ({why})",
            ask=self.ask,
            dry_run=self.analysis.dry_run,
            rollback=self.rollback_on_failure,
        )
        self.act(rounds=0)
