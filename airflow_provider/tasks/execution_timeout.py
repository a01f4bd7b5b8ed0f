"""Airflow's ``execution_timeout`` against what a task must wait, checked when the DAG is parsed.

A task that patches a deployment and then judges the revision (waits for it to go live within ``timeout``, bakes
it, analyses it, asks a person) must be given the time to do so: Airflow kills a task whose ``execution_timeout``
runs out (on the worker it calls the task's ``on_kill``; while deferred it ends the deferral), and a task killed
while judging leaves a revision no one judged serving unless something rolls it back. So an ``execution_timeout``
shorter than the longest wait the task may need is refused when the DAG is parsed, naming both values and each part
of the wait. What happens to a kill that still comes (a task marked failed, a timeout within a long rollback) is
the patch task's :mod:`~airflow_provider.tasks.patch.killed`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowTaskTimeout

if TYPE_CHECKING:
    from airflow_provider.analysis import Analysis

__all__ = [
    "ON_KILL_WAIT_SECONDS",
    "act_on_kill",
    "check_execution_timeout",
    "check_judging_task",
    "judging_wait_parts",
    "kill_cause",
    "what_timeout_covers",
]

ON_KILL_WAIT_SECONDS = 4.0
"""How long ``on_kill`` waits, in Airflow's ``SIGTERM`` handler, for its rollback to be recorded and sent (the
supervisor sends ``SIGKILL`` 5 s after ``SIGTERM``)."""


def judging_wait_parts(
    *,
    timeout: float,
    bake_seconds: float,
    analysis: Analysis | None,
    response_timeout: timedelta | None = None,
) -> dict[str, float]:
    """What a task that lands and judges one revision (or one wave) may have to wait, part by part (seconds).

    :param timeout: the rollout ``timeout`` (reaching live).
    :param bake_seconds: the bake (filled by the analysis's rounds when it has no ``count``).
    :param analysis: the analysis, if any: its initial delay and its rounds.
    :param response_timeout: how long an inconclusive analysis waits for a person's answer (``on_inconclusive="ask"``);
        ``None``: nobody is asked.
    """
    parts: dict[str, float] = {"timeout": float(timeout)}
    if analysis is not None:
        resolved = analysis.with_count_for(bake_seconds or None)
        parts["analysis"] = resolved.initial_delay_seconds + resolved.rounds() * resolved.interval_seconds
        if analysis.count is not None and bake_seconds:  # the bake is its own step after the analysis
            parts["bake_seconds"] = float(bake_seconds)
    elif bake_seconds:
        parts["bake_seconds"] = float(bake_seconds)
    if response_timeout is not None:
        parts["response_timeout"] = response_timeout.total_seconds()
    return parts


def check_execution_timeout(task_id: Any, execution_timeout: Any, parts: Mapping[str, float], *, what: str) -> None:
    """Refuse an ``execution_timeout`` shorter than the sum of ``parts`` (``None``: no timeout, nothing to check).

    :param task_id: the task's id (named in the message).
    :param execution_timeout: the task's ``execution_timeout`` (a ``timedelta`` or ``None``).
    :param parts: what the task must wait, by the argument that sets each part (seconds).
    :param what: what the wait is for, in a few words ("the revision", "each wave").
    :raises ValueError: naming ``execution_timeout``, its value, the wait and its parts.
    """
    if not isinstance(execution_timeout, timedelta):
        return
    needed = sum(parts.values())
    given = execution_timeout.total_seconds()
    if given >= needed:
        return
    shown = " + ".join(f"{name} {seconds:g} s" for name, seconds in parts.items() if seconds)
    raise ValueError(
        f"task {task_id!r}: execution_timeout={given:g} s is shorter than what the task must wait for {what} "
        f"({needed:g} s = {shown}): Airflow would kill it while it judges a revision it rolled out. Give "
        f"execution_timeout at least {needed:g} s (timedelta(seconds={needed:g})), or shorten timeout, "
        "bake_seconds or the analysis"
    )


def check_judging_task(task: Any, analysis: Analysis | None, *, what: str) -> None:
    """:func:`check_execution_timeout` of a task that rolls out and judges (its ``timeout``, ``bake_seconds``,
    ``on_inconclusive`` and ``response_timeout`` read from it once they are checked); a task that neither judges
    (``verify``, a bake, an analysis) nor rolls back leaves nothing unjudged when killed: not checked.

    :param task: the patch or fleet operator, in its ``__init__``.
    :param analysis: its analysis (``None``: none).
    :param what: what the wait is for, in a few words.
    """
    judges = task.verify is not None or task.bake_seconds or analysis is not None or task.rollback_on_failure
    if not judges:
        return
    asked = task.response_timeout if task.on_inconclusive == "ask" else None
    parts = judging_wait_parts(
        timeout=task.timeout, bake_seconds=task.bake_seconds, analysis=analysis, response_timeout=asked
    )
    check_execution_timeout(task.task_id, task.execution_timeout, parts, what=what)


def what_timeout_covers(task: Any, analysis: Analysis | None) -> str:
    """What a rolling-out task's ``timeout`` covers and what follows it, for its log before it waits: ``timeout``
    bounds reaching live only; the analysis and the bake come after it, and only ``execution_timeout`` bounds it all.

    :param task: the patch or fleet operator (its ``timeout``, ``bake_seconds``, ``execution_timeout``).
    :param analysis: its analysis (``None``: none).
    """
    parts = judging_wait_parts(timeout=task.timeout, bake_seconds=task.bake_seconds, analysis=analysis)
    after = [f"{name} {seconds:g} s" for name, seconds in parts.items() if name != "timeout" and seconds]
    limit = task.execution_timeout
    bound = f"execution_timeout {limit.total_seconds():g} s" if isinstance(limit, timedelta) else "no execution_timeout"
    then = f"then {' and '.join(after)} follow" if after else "nothing follows"
    return (
        f"timeout={task.timeout:g} s covers the new revision going live only (its build and deploy); {then}; the "
        f"whole task is bounded by {bound}"
    )


def kill_cause(execution_timeout: Any) -> str:
    """What killed the task, as far as its ``on_kill`` can tell: Airflow calls it while its ``AirflowTaskTimeout`` is
    being handled (``execution_timeout``), or from its ``SIGTERM`` handler (marked failed, the run stopped).

    :param execution_timeout: the task's ``execution_timeout``.
    """
    if isinstance(sys.exc_info()[1], AirflowTaskTimeout):
        seconds = execution_timeout.total_seconds() if isinstance(execution_timeout, timedelta) else None
        return (
            f"Airflow's execution_timeout of {seconds:g} s ran out"
            if seconds
            else "Airflow's execution_timeout ran out"
        )
    return "Airflow stopped it: marked failed, or its DAG run stopped"


def act_on_kill(action: Callable[[], None], what: str) -> threading.Thread | None:
    """Run ``on_kill``'s ``action`` (it must never raise): at once after an ``execution_timeout`` (the step it
    interrupted has unwound), else in a thread waited for :data:`ON_KILL_WAIT_SECONDS` (in the ``SIGTERM`` handler
    the interrupted step may hold the supervisor's channel, which ``task_state_store`` needs: it lets go of it when
    the handler returns). Returns the thread, if any, for a later step to wait for.

    :param action: what to do.
    :param what: :func:`kill_cause`.
    """
    if "execution_timeout" in what:
        action()
        return None
    worker = threading.Thread(target=action, name="rollback-on-kill")
    worker.start()
    worker.join(ON_KILL_WAIT_SECONDS)
    return worker
