"""The fleet task's question when a wave's analysis is inconclusive (``FleetRolloutOperator(on_inconclusive="ask")``):
a person promotes the wave's inconclusive deployments (the rollout goes on with the next wave), rolls them back (as a
failed verdict would: counted against the budget, rolled back with ``rollback_on_failure``; a canary's stops the
rollout), or has them analysed for another interval; no answer within ``response_timeout`` rolls them back.

With ``ask``, an inconclusive verdict leaves its row ``landed`` with its result
(:func:`~airflow_provider.tasks.fleet.analysis.apply_analysis`); once the wave's analysis is over, those rows
(:func:`awaiting_answer`) are put to a person in one question about the wave (:class:`WaveQuestion`), through Airflow's
human-in-the-loop (:func:`~airflow_provider.tasks.inconclusive.ask_person`). The question is recorded in the wave's
progress record (``question``) and notified (``inconclusive``, once per deployment and question) before the task
waits. The answer is recorded in the same record, in one write with what it does to the rows (:func:`take_answer`):
promoted rows keep the answer in their analysis, rolled back ones are ``failed``, the others' verdicts are cleared to
be measured again. The wave's loop then acts on the rows as on any verdict, so a retry after a crash goes on from the
answer: it never asks again about a verdict answered, and never rolls back twice (the rollbacks are recorded as
always). A question never answered (the try ended while it waited) is asked again by the retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk.exceptions import AirflowException

from airflow_provider.decisions.fleet_progress import FleetProgress, FleetRow, Outcome, WaveRecord
from airflow_provider.tasks.fleet.notify import NotifiedRecord
from airflow_provider.tasks.fleet.progress import ProgressStore, scrub_messages, stop_reason
from airflow_provider.tasks.inconclusive import (
    ANALYSE_AGAIN,
    PROMOTE,
    Answer,
    ask_person,
    question_text,
    read_answer,
    required_actions_path,
)
from airflow_provider.tasks.notify import Notifying

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

__all__ = ["RESUME_METHOD", "AskingFleetTask", "WaveQuestion", "awaiting_answer", "open_question", "take_answer"]

RESUME_METHOD = "execute_fleet_inconclusive_answered"
"""The method Airflow resumes the fleet task in with the answer."""
NAMED = 10
"""Most deployments (and revisions) the question's subject names."""


class AskingFleetTask(Notifying, Protocol):
    """What asking needs of the fleet task: its logger, ``defer``, ``response_timeout`` and ``_notify``."""

    @property
    def log(self) -> logging.Logger: ...

    @property
    def response_timeout(self) -> timedelta: ...

    def defer(self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = None) -> Any: ...


def awaiting_answer(wave: WaveRecord) -> list[FleetRow]:
    """The rows of the wave whose analysis was inconclusive and that wait for a person: landed, judged
    ``inconclusive``, not answered yet.

    :param wave: the wave.
    """
    return [
        row
        for row in wave.rows
        if row.outcome == Outcome.LANDED
        and isinstance(row.analysis, Mapping)
        and row.analysis.get("verdict") == "inconclusive"
        and "answer" not in row.analysis
    ]


def open_question(wave: WaveRecord) -> dict[str, Any] | None:
    """The wave's question when it waits for an answer (asked, not answered), else ``None``.

    :param wave: the wave.
    """
    question = wave.question
    return question if isinstance(question, dict) and "answer" not in question else None


def take_answer(
    progress: FleetProgress,
    index: Any,
    number: Any,
    event: Any,
    save: Callable[[], None],
    log: logging.Logger | Any,
) -> None:
    """Record the answer to wave ``index``'s question ``number`` and what it does to the wave's rows, in one write
    (``save``), before anything acts on it. An answer to a question that is not open (answered already: a second
    resume, or a retry) is not taken again: the recorded one stands.

    :param progress: the fleet's progress.
    :param index: the wave the question is about (from the resume's kwargs; ``None``: the wave whose question is open).
    :param number: the question's number (``None``: the open one).
    :param event: the resume's event (the answer, or the timeout).
    :param save: writes the wave's record.
    :param log: the task's logger.
    :raises AirflowException: the question ended without a usable answer (a retry asks again).
    """
    if not isinstance(index, int):
        index = next((i for i, wave in enumerate(progress.waves) if open_question(wave) is not None), None)
    if index is None or not 0 <= index < len(progress.waves):
        log.warning("No open question about an inconclusive analysis in the fleet's progress: going on from the record")
        return
    wave = progress.waves[index]
    question = open_question(wave)
    if question is None or (isinstance(number, int) and question.get("number") != number):
        log.warning(
            "The question about %s's inconclusive analysis was answered already (%s): the recorded answer stands",
            wave.name,
            (wave.question or {}).get("answer"),
        )
        return
    try:
        answer = read_answer(event)
    except ValueError as err:
        raise AirflowException(
            f"{wave.name}: the question about its inconclusive analysis ended without a usable answer ({err}); its "
            "deployments still serve their new revisions, and a retry asks again"
        ) from None
    log.warning("%s: the inconclusive analysis was answered %s", wave.name, answer.said())
    apply_answer(wave, answer, int(question.get("number") or 0))
    save()  # the answer and what it does to the rows, one write, before anything acts on it


def apply_answer(wave: WaveRecord, answer: Answer, number: int) -> None:
    """What the answer does to the wave's rows awaiting it, and the answer in the wave's question.

    :param wave: the wave.
    :param answer: the answer.
    :param number: the question's number.
    """
    now = time.time()
    for row in awaiting_answer(wave):
        assert row.analysis is not None
        reason = row.analysis.get("reason") or "no reason given"
        if answer.choice == ANALYSE_AGAIN:
            row.analysis = None  # measured again, for the analysis's whole length
            row.message = f"analysis inconclusive on revision {row.to_revision}: analysed again ({answer.said()})"
            continue
        row.analysis = {**row.analysis, "answer": answer.record()}
        if answer.choice == PROMOTE:
            row.message = (
                f"analysis inconclusive on revision {row.to_revision}, promoted by {answer.by or 'an unnamed user'} "
                f"(question {number}): {reason}"
            )
        else:
            row.decide(
                Outcome.FAILED,
                f"analysis inconclusive on revision {row.to_revision} and the answer was {answer.said()}: {reason}",
                now,
            )
    wave.question = {**(wave.question or {}), "answer": answer.record()}


@dataclass
class WaveQuestion:
    """The question about one wave's inconclusive analysis (see the module).

    :param task: the fleet task.
    :param context: the task context.
    :param progress: the rollout's progress.
    :param progress_store: where it is saved.
    :param index: the wave, in phase ``analysing``, its analysis over.
    :param secrets: the task's secret values (scrubbed from what travels and what is said).
    """

    task: AskingFleetTask
    context: Context
    progress: FleetProgress
    progress_store: ProgressStore
    index: int
    secrets: Sequence[str] = ()

    @property
    def wave(self) -> WaveRecord:
        """The wave asked about."""
        return self.progress.waves[self.index]

    def ask_if_inconclusive(self) -> None:
        """Ask a person about the wave's rows awaiting an answer (raises ``TaskAwaitingInput`` or ``TaskDeferred``:
        the task resumes in :data:`RESUME_METHOD`); nothing when none awaits. When the wave stops the rollout
        anyway (the budget spent, a failed canary), no one is asked: they count as failed, as without ``ask``."""
        rows = awaiting_answer(self.wave)
        if not rows:
            return
        stopping = stop_reason(self.progress, self.wave)
        if stopping is not None:
            for row in rows:
                assert row.analysis is not None
                row.decide(
                    Outcome.FAILED,
                    f"analysis inconclusive (treated as failed: its wave stops the rollout, no one was asked) on "
                    f"revision {row.to_revision}: {row.analysis.get('reason')}",
                    time.time(),
                )
            self.progress_store.save(self.progress, self.index)
            return
        self._ask(rows)

    def _ask(self, rows: list[FleetRow]) -> None:
        task, context, wave = self.task, self.context, self.wave
        ti = context["ti"]
        path = required_actions_path(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1))
        number = int((wave.question or {}).get("number") or 0) + 1
        deployments = [
            {
                "deployment_id": row.deployment_id,
                "name": row.name,
                "revision_id": row.to_revision,
                "reason": (row.analysis or {}).get("reason"),
            }
            for row in rows
        ]
        wave.question = {"number": number, "asked_at": time.time(), "path": path, "deployments": deployments}
        self.progress_store.save(self.progress, self.index)  # recorded before it is asked
        url = _absolute(path)
        notified = NotifiedRecord(self.progress_store.store, task.log)
        for row in rows:
            reason = f"the analysis of {wave.name} was inconclusive (question {number} to a person)"
            notified.notify_once(
                task,
                context,
                f"inconclusive/{self.index}/{number}/{row.deployment_id}",
                "inconclusive",
                deployment_id=row.deployment_id,
                revision_id=row.to_revision,
                deployment_name=row.name,
                previous_revision_id=row.from_revision,
                reason=f"{reason}: {(row.analysis or {}).get('reason')}",
                analysis=row.analysis,
                extra={"wave": wave.name, "question_url": url},
            )
        names = ", ".join(row.name for row in rows[:NAMED]) + (
            f" and {len(rows) - NAMED} more" if len(rows) > NAMED else ""
        )
        subject, body = question_text(
            f"{wave.name} ({names})",
            ", ".join(str(row.to_revision) for row in rows[:NAMED]) + (", ..." if len(rows) > NAMED else ""),
            _wave_result(wave.name, rows),
            None,
            task.response_timeout,
        )
        task.log.warning(
            "%s: the analysis of %d deployment(s) was inconclusive: asking a person (question %d; answer within %s, "
            "else they are rolled back): %s",
            wave.name,
            len(rows),
            number,
            task.response_timeout,
            url,
        )
        scrub_messages(self.progress, self.secrets)
        store = self.progress_store
        ask_person(
            task,  # type: ignore[arg-type]
            context,
            subject,
            body,
            task.response_timeout,
            method_name=RESUME_METHOD,
            kwargs={
                "fleet_wave": self.index,
                "question": number,
                # Without a task state store, or when its last save failed, the progress travels with the question.
                "carry": self.progress.to_json() if store.store is None or store.behind else None,
            },
        )


def _wave_result(wave: str, rows: Sequence[FleetRow]) -> dict[str, Any]:
    """The wave's inconclusive results as one result for :func:`~airflow_provider.tasks.inconclusive.question_text`:
    each deployment's reason, and its measurements with the deployment named in the check column."""
    reasons = "; ".join(f"{row.name}: {(row.analysis or {}).get('reason')}" for row in rows)
    measurements = [
        {**item, "check": f"{row.name} · {item.get('check')}"}
        for row in rows
        for item in list((row.analysis or {}).get("measurements") or [])[-max(1, 20 // max(1, len(rows))) :]
        if isinstance(item, Mapping)
    ]
    return {"verdict": "inconclusive", "reason": f"{wave}: {reasons}", "measurements": measurements}


def _absolute(path: str) -> str:
    """``path`` (under Airflow's base URL) as an absolute URL."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "http://localhost:8080").rstrip("/")
    return f"{base}/{path}"
