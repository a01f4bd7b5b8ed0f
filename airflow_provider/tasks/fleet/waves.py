"""A fleet rollout wave by wave: each wave patched, watched, verified, analysed and rolled back (as asked), each
phase recorded in the progress before the next begins, so that a resume or a retry goes on from the phase
recorded; on the worker, or deferring to :class:`~airflow_provider.triggers.fleet.FleetWaveTrigger` between
and during waves (:class:`FleetRun`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider.analysis import Analysis
from airflow_provider.decisions.fleet_progress import FleetProgress, WaveRecord
from airflow_provider.models import Deployment, PatchDeploymentRequest
from airflow_provider.tasks.analysis import AnalysingTask, no_retry_left
from airflow_provider.tasks.base import DEFERRAL_GRACE
from airflow_provider.tasks.fleet import watching
from airflow_provider.tasks.fleet.abort import (
    TakenAbort,
    abandon_unjudged,
    abort_interrupts,
    abort_lets_finish,
    interrupts,
    rollback_candidates,
    take_abort,
)
from airflow_provider.tasks.fleet.analysis import WaveAnalysis
from airflow_provider.tasks.fleet.asking import WaveQuestion, apply_answer, open_question
from airflow_provider.tasks.fleet.change import completed_for
from airflow_provider.tasks.fleet.patching import patch_wave
from airflow_provider.tasks.fleet.progress import ProgressStore, scrub_messages, stop_as_decided, stop_reason
from airflow_provider.tasks.fleet.result import log_wave
from airflow_provider.tasks.fleet.rollback import (
    apply_rollbacks,
    pending_rollbacks,
    rollbacks_allowed_latest,
    start_rollbacks,
)
from airflow_provider.tasks.inconclusive import ROLL_BACK, Answer
from airflow_provider.tasks.notify import Notifying

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["FleetRun", "FleetTask", "earlier_try_since"]


class FleetTask(AnalysingTask, Notifying, Protocol):
    """What the wave loop needs of the fleet task: its hook, logger and ``defer``, and its settings."""

    @property
    def deferrable(self) -> bool: ...

    @property
    def poll_interval(self) -> float: ...

    @property
    def timeout(self) -> float: ...

    @property
    def revision_check_interval(self) -> float: ...

    @property
    def pause_seconds(self) -> float: ...

    @property
    def max_parallel_patches(self) -> int: ...

    @property
    def bake_seconds(self) -> float: ...

    @property
    def verify(self) -> Callable[[Deployment], Any] | None: ...

    @property
    def analysis(self) -> Analysis | None: ...

    @property
    def rollback_on_failure(self) -> bool: ...

    @property
    def resource_spec_mode(self) -> str: ...

    @property
    def check_source_rules(self) -> bool: ...

    @property
    def on_inconclusive(self) -> str: ...

    @property
    def response_timeout(self) -> timedelta: ...

    @property
    def canary_baseline(self) -> str: ...


def earlier_try_since(context: Context) -> datetime | None:
    """The run's start when this is a retry (patches found on deployments may be an earlier try's), else
    ``None``.

    :param context: the task context.
    """
    try_number = getattr(context["ti"], "try_number", 1) or 1
    started = getattr(context.get("dag_run"), "start_date", None)
    if try_number <= 1:
        return None
    return started if isinstance(started, datetime) else datetime.min.replace(tzinfo=timezone.utc)


@dataclass
class FleetRun:
    """One call's run of a fleet rollout (the task's execute, or a resume), from where its progress stands.

    Built afresh for each call: everything it goes on from is in the progress (``task_state_store``, or the
    trigger's ``carry``), never in ``defer()`` kwargs.

    :param task: the fleet task.
    :param context: the task context.
    :param progress: the rollout's progress.
    :param progress_store: where the progress is saved.
    :param request_for: the patch for a deployment, as the change gives it.
    :param secrets: the task's secret values (scrubbed from the rows before they travel or are recorded).
    :param retries: the task's retries (an analysis's last try judges what it cannot measure inconclusive).
    """

    task: FleetTask
    context: Context
    progress: FleetProgress
    progress_store: ProgressStore
    request_for: Callable[[Deployment], PatchDeploymentRequest]
    secrets: Sequence[str] = ()
    retries: int | None = None
    taken: TakenAbort | None = None
    """The abort this run acts on (:mod:`~airflow_provider.tasks.fleet.abort`), once taken."""

    def advance(self) -> None:
        """Run the waves from where the progress stands until done, stopped or deferred (``TaskDeferred``)."""
        task, progress, progress_store = self.task, self.progress, self.progress_store
        stop_as_decided(progress, progress_store, task.log)
        while self.check_abort() is None and (index := progress.current()) is not None:
            wave = progress.waves[index]
            if wave.phase == "planned":
                started = any(row.patched for row in progress.rows)
                if task.pause_seconds and started and progress.paused_before != index:
                    progress.paused_before = index
                    progress_store.save(progress, index)
                    task.log.info("Pausing %g s before %s", task.pause_seconds, wave.name)
                    if task.deferrable:
                        self.defer_wave(index, {}, None, time.time() + task.pause_seconds)
                    if self.pause(task.pause_seconds):
                        continue  # aborted while paused: the loop takes the abort
                task.log.info("Rolling out %s: %s", wave.name, ", ".join(row.name for row in wave.rows))
                patch_wave(
                    task.hook,
                    wave,
                    self.request_for,
                    save=lambda index=index: progress_store.save(progress, index),  # type: ignore[misc]
                    earlier_try_since=earlier_try_since(self.context),
                    log=task.log,
                    max_parallel=task.max_parallel_patches,
                    complete=self.complete,
                    aborted=functools.partial(abort_lets_finish, progress_store.store),
                )
                self.check_abort()  # one that held PATCHes back: they become "not patched" (the wave goes on)
                if wave.phase == "planned":
                    wave.phase = "patched"
                progress_store.save(progress, index)
            if wave.phase == "patched":
                self.give_up_unjudged(index)  # an abort that rolls the wave back: not watched any further
                rollouts = watching.in_flight(wave)
                if rollouts:
                    begun = min(row.started_at or time.time() for row in wave.rows if row.deployment_id in rollouts)
                    deadline = begun + task.timeout
                    if task.deferrable:
                        self.defer_wave(index, rollouts, deadline, None)
                    outcomes = watching.watch_wave(
                        task.hook,
                        rollouts,
                        poll_interval=task.poll_interval,
                        deadline=deadline,
                        bake_seconds=self.watch_bake_seconds(),
                        revision_check_interval=task.revision_check_interval,
                        log=task.log,
                        interrupted=functools.partial(self.abort_interrupts, "watch"),
                    )
                    self.record_outcomes(wave, outcomes)
                    if watching.in_flight(wave):  # the watch ended early: an abort rolls the wave back
                        self.check_abort()
                        if not self.give_up_unjudged(index):
                            continue  # (not an abort of this wave after all: watched again)
                wave.phase = "watched"
                progress_store.save(progress, index)
            save = functools.partial(progress_store.save, progress, index)
            if wave.phase == "watched":
                if task.verify is not None and not self.rolls_back(index):
                    watching.verify_wave(task.hook, wave, task.verify, task.log, secrets=self.secrets)
                if task.analysis is not None:
                    wave.phase = "analysing"  # recorded with verify's verdicts: a retry does not verify again
                if task.verify is not None or task.analysis is not None:
                    save()
            self.check_abort()  # an abort asked for while the wave was watched rolls it back now, not analysed
            if wave.phase == "analysing" and task.analysis is not None and not self.rolls_back(index):
                # Rows already judged (an earlier try, or the resume) are not judged again.
                self.wave_analysis(index).run(deferrable=task.deferrable, method_name="execute_complete_analysis")
                self.check_abort()  # (one that ended the analysis on the worker)
                if task.on_inconclusive == "ask" and not self.rolls_back(index):
                    self.wave_question(index).ask_if_inconclusive()  # the wave's inconclusive deployments
            if wave.phase in ("watched", "analysing"):
                if wave.phase == "analysing":
                    self.give_up_unjudged(index)  # an abort: the deployments its analysis had not judged yet
                if task.rollback_on_failure or self.rolls_back(index):
                    # The wave that stops the rollout (over the budget, or a failed canary) is rolled back whole.
                    start_rollbacks(
                        task.hook,
                        wave,
                        stopping=self.stopping(index),
                        save=save,
                        log=task.log,
                        records=progress_store.rollback_records(index),
                        earlier_try_since=earlier_try_since(self.context),
                    )
                wave.phase = "rolling_back"
                save()
            if wave.phase == "rolling_back":
                # The rollbacks started, this try's or an earlier one's, whose outcome is not recorded yet.
                rollbacks = pending_rollbacks(wave)
                if rollbacks:
                    deadline = time.time() + task.timeout
                    allowed = rollbacks_allowed_latest(wave)
                    if task.deferrable:
                        self.defer_wave(index, rollbacks, deadline, None, bake=False, allowed=allowed)
                    outcomes = watching.watch_wave(
                        task.hook,
                        rollbacks,
                        poll_interval=task.poll_interval,
                        deadline=deadline,
                        bake_seconds=0,
                        revision_check_interval=task.revision_check_interval,
                        log=task.log,
                        allowed_latest=allowed,
                    )
                    apply_rollbacks(task.hook, wave, outcomes, task.log)
                wave.phase = "done"
                log_wave(progress, index, task.log)
                stopping = stop_reason(progress, wave)
                if stopping is not None and self.taken is None:  # an abort's reason stays the reason
                    progress.stop(stopping, time.time())
                progress_store.save(progress)

    def check_abort(self) -> TakenAbort | None:
        """Take an abort requested from the Rollouts view (:func:`~airflow_provider.tasks.fleet.abort.take_abort`),
        answer "Roll back" to an open question about a wave it rolls back (in the user's name), and start the
        rollbacks it asks for of the waves already done (each marked and recorded before its request; the wave loop
        then waits for them as for any wave's rollbacks). Returns ``None`` (the loop goes on)."""
        progress = self.progress
        taken = self.taken = take_abort(progress, self.progress_store, self.taken, self.task.log)
        for index in taken.rollback_waves if taken is not None else ():
            wave = progress.waves[index]
            question = open_question(wave)
            if question is not None and taken is not None:
                request = taken.request
                answer = Answer(choice=ROLL_BACK, by=request.requested_by, at=request.requested_at, timed_out=False)
                apply_answer(wave, answer, int(question.get("number") or 0))
                self.task.log.warning("%s: the open question is answered %s (the abort)", wave.name, answer.said())
                self.progress_store.save(progress, index)
            if wave.phase == "done" and rollback_candidates(progress, index):
                start_rollbacks(
                    self.task.hook,
                    wave,
                    stopping=self.stopping(index),
                    save=functools.partial(self.progress_store.save, progress, index),
                    log=self.task.log,
                    records=self.progress_store.rollback_records(index),
                    earlier_try_since=earlier_try_since(self.context),
                )
                wave.phase = "rolling_back"
                self.progress_store.save(progress, index)
        return None

    def rolls_back(self, index: int) -> bool:
        """Whether the abort taken rolls wave ``index`` back."""
        return self.taken is not None and self.taken.rolls_back(index)

    def abort_interrupts(self, waiting: str) -> bool:
        """Whether an abort (taken, or requested since) ends the wait for ``waiting`` now (asked between two rounds
        of a wait on the worker; see :func:`~airflow_provider.tasks.fleet.abort.interrupts`)."""
        if self.taken is not None:
            return interrupts(self.taken.request.mode, waiting)
        return abort_interrupts(self.progress_store.store, waiting, self.task.log)

    def pause(self, seconds: float) -> bool:
        """Pause ``seconds`` before a wave on the worker, asking every ``poll_interval`` whether an abort ends the
        pause; returns whether one did."""
        end = time.time() + seconds
        while (left := end - time.time()) > 0:
            time.sleep(min(left, max(self.task.poll_interval, 0.1)))
            if self.abort_interrupts("pause"):
                return True
        return False

    def give_up_unjudged(self, index: int) -> bool:
        """When the abort taken rolls wave ``index`` back, give up the judging of its deployments not judged yet
        (:func:`~airflow_provider.tasks.fleet.abort.abandon_unjudged`: rollouts still undecided, and those live while
        ``verify`` or the analysis was still to judge them) and record it; returns whether it does."""
        if not self.rolls_back(index):
            return False
        assert self.taken is not None
        wave, task = self.progress.waves[index], self.task
        landed = task.analysis is not None or (wave.phase == "patched" and task.verify is not None)
        if abandon_unjudged(wave, self.taken.request.reason, time.time(), landed=landed):
            self.progress_store.save(self.progress, index)
        return True

    def stopping(self, index: int) -> str | None:
        """Why wave ``index`` stops the rollout (its deployments that landed are then rolled back with it): an abort
        that rolls it back, else :func:`~airflow_provider.tasks.fleet.progress.stop_reason`."""
        if self.taken is not None and self.taken.rolls_back(index):
            return self.taken.request.reason
        return stop_reason(self.progress, self.progress.waves[index])

    def complete(self, request: PatchDeploymentRequest, deployment: Deployment) -> PatchDeploymentRequest:
        """The patch to send to ``deployment`` (:func:`~airflow_provider.tasks.fleet.change.completed_for`)."""
        return completed_for(
            request,
            deployment,
            resource_spec_mode=self.task.resource_spec_mode,
            check_source_rules=self.task.check_source_rules,
            log=self.task.log,
        )

    def record_outcomes(self, wave: WaveRecord, outcomes: Mapping[str, Sequence[Any]]) -> None:
        """Record what the watch decided; show the build log's tail of each failed build."""
        watching.apply_outcomes(wave, outcomes, self.task.log)
        watching.explain_failed_builds(self.task.hook, wave, self.task.log, secrets=self.secrets)

    def wave_analysis(self, index: int) -> WaveAnalysis:
        """The analysis step of wave ``index`` (see :mod:`~airflow_provider.tasks.fleet.analysis`)."""
        task, progress = self.task, self.progress
        assert task.analysis is not None
        return WaveAnalysis(
            task=task,
            progress=progress,
            progress_store=self.progress_store,
            index=index,
            # count=None: as many rounds as fit in bake_seconds.
            analysis=task.analysis.with_count_for(task.bake_seconds),
            rollback_on_failure=task.rollback_on_failure,
            stop_reason=lambda: self.stopping(index),
            last_try=no_retry_left(self.context, self.retries),
            earlier_try_since=earlier_try_since(self.context),
            secrets=self.secrets,
            ask=task.on_inconclusive == "ask",
            control_group=task.canary_baseline == "control_group",
            interrupted=functools.partial(self.abort_interrupts, "analysis"),
            check_every=max(task.poll_interval, 0.1),
        )

    def wave_question(self, index: int) -> WaveQuestion:
        """The question about wave ``index``'s inconclusive analysis (:mod:`~airflow_provider.tasks.fleet.asking`)."""
        return WaveQuestion(self.task, self.context, self.progress, self.progress_store, index, secrets=self.secrets)

    def watch_bake_seconds(self) -> float:
        """The bake a wave's watch waits: none when the analysis's rounds fill ``bake_seconds`` (``count=None``:
        each round checks that the revision still serves, so the analysis is the bake)."""
        if self.task.analysis is not None and self.task.analysis.count is None:
            return 0.0
        return self.task.bake_seconds

    def defer_wave(
        self,
        index: int,
        rollouts: Mapping[str, str | None],
        deadline: float | None,
        resume_at: float | None,
        *,
        bake: bool = True,
        allowed: Mapping[str, str] | None = None,
    ) -> None:
        """Wait for wave ``index``'s rollouts (or rollbacks, or a pause) in the triggerer; the task resumes in
        ``execute_complete``.

        :param index: the wave.
        :param rollouts: ``{deployment_id: revision or None}`` to watch (none for a pause).
        :param deadline: wall-clock time by which they must be live (``None`` for a pause).
        :param resume_at: when a pause ends (``None`` unless pausing).
        :param bake: whether the watch bakes (not a rollback's).
        :param allowed: ``{deployment_id: revision}`` allowed to stay the latest.
        """
        task, progress = self.task, self.progress
        wait = (resume_at - time.time()) if resume_at is not None else (deadline or time.time()) - time.time()
        scrub_messages(progress, self.secrets)
        allowed = allowed or {}
        from airflow_provider.triggers.fleet import FleetWaveTrigger  # only a deferring task needs the trigger

        task.defer(
            trigger=FleetWaveTrigger(
                wave=index,
                rollouts=[
                    [deployment_id, revision_id, *([allowed[deployment_id]] if deployment_id in allowed else [])]
                    for deployment_id, revision_id in rollouts.items()
                ],
                hook_params=task.hook.hook_params,
                poll_interval=task.poll_interval,
                deadline=deadline,
                bake_seconds=self.watch_bake_seconds() if bake else 0.0,
                revision_check_interval=task.revision_check_interval,
                resume_at=resume_at,
                # Without a task state store, or when its last save failed, the progress travels with the
                # trigger (JSON, no secrets): the resume must not go on from an older one.
                carry=progress.to_json() if self.progress_store.store is None or self.progress_store.behind else None,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=max(0.0, wait) + task.bake_seconds + max(DEFERRAL_GRACE, 2 * task.poll_interval)),
        )
