"""The fleet task killed on the worker while a wave is under way (``on_kill``: Airflow's ``execution_timeout``, the
task marked failed, its run stopped): the wave is given up as an abort would give it up, the rollout stopped, and
(with ``rollback_on_failure``) the wave's deployments rolled back, each rollback marked and recorded before its
request; nothing is waited for. A retry (after a timeout) finds the wave ``rolling_back`` in the progress, waits for
those rollbacks and fails naming why the rollout stopped; it never patches the next wave.

Deferred waves are covered by Airflow's deferral timeout (``FleetRolloutOperator.resume_execution``); a task marked
failed by hand while deferred runs no code of the task (see :mod:`airflow_provider.tasks.patch.killed`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from airflow_provider.tasks.fleet.abort import abandon_unjudged
from airflow_provider.tasks.fleet.rollback import start_rollbacks
from airflow_provider.tasks.fleet.waves import earlier_try_since

if TYPE_CHECKING:
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook
    from airflow_provider.tasks.fleet.waves import FleetRun

__all__ = ["KILLED_WHILE_ROLLING_OUT", "kill_outcome", "roll_back_killed_wave"]

KILLED_WHILE_ROLLING_OUT = "the task was killed while its wave was rolled out and judged"
"""Why the rollout stopped (followed by what killed it)."""


def roll_back_killed_wave(run: FleetRun, hook: DeploymentServiceHook, what: str) -> str:
    """Give up the wave under way, stop the rollout and (with ``rollback_on_failure``) start the wave's rollbacks;
    what was done, in words.

    :param run: the run the task was in (its progress and where it is saved).
    :param hook: a hook of its own (the killed step may hold the task's client).
    :param what: what killed the task.
    """
    task, progress, store = run.task, run.progress, run.progress_store
    index = progress.current()
    if index is None:
        return "every wave was done"
    wave = progress.waves[index]
    if wave.phase in ("rolling_back", "done") or not any(row.patched for row in wave.rows):
        return f"{wave.name} had nothing to roll back"
    reason = f"{KILLED_WHILE_ROLLING_OUT} ({what})"
    now = time.time()
    abandon_unjudged(wave, reason, now, landed=True)
    progress.stop(reason, now)  # a retry never patches the next wave after a wave no one judged
    store.save(progress)
    if not task.rollback_on_failure:
        task.log.error("%s: %s; not rolling back (rollback_on_failure is off)", wave.name, reason)
        return "the rollout stopped; its wave serves, not judged (rollback_on_failure is off)"
    task.log.error("%s: %s; rolling the wave back (not waiting: the task is being killed)", wave.name, reason)
    start_rollbacks(
        hook,
        wave,
        stopping=reason,
        save=lambda: store.save(progress, index),
        log=task.log,
        records=store.rollback_records(index),
        earlier_try_since=earlier_try_since(run.context),
    )
    wave.phase = "rolling_back"
    store.save(progress)
    sent = [row.name for row in wave.rows if row.rollback_revision]
    return f"the rollout stopped; {wave.name}'s rollbacks sent: {', '.join(sent) or 'none'}"


def kill_outcome(run: FleetRun, hook: DeploymentServiceHook, what: str) -> str:
    """:func:`roll_back_killed_wave`, never raising (``on_kill`` must end); what was done, or why it could not be (never
    a secret: the client's errors are scrubbed).

    :param run: the run the task was in.
    :param hook: a hook of its own.
    :param what: what killed the task.
    """
    try:
        return roll_back_killed_wave(run, hook, what)
    except Exception as err:
        return f"the wave's rollbacks could not all be sent ({type(err).__name__}: {err}); roll them back from the view"
