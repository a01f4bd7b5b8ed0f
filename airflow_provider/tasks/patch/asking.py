"""The patch task's question when its analysis is inconclusive (``on_inconclusive="ask"``): a person promotes the
revision, rolls it back, or has it analysed for another interval; no answer within ``response_timeout`` rolls it
back.

The question (the inconclusive result and where it is answered) is recorded in ``task_state_store``, as a record
entry ``asking`` (the Rollouts view shows it open, with a link to Airflow's "Required actions" page) and notified
(``inconclusive``) before the task waits (:mod:`~airflow_provider.tasks.inconclusive`). The answer is recorded
before it is acted on, with the failed verdict it makes when it is a roll back (one write): a retry rolls back from
that verdict, lands a promoted revision without judging it again, and judges again after "analyse another
interval" or a question never answered.

:class:`InconclusiveAsking` is a base of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator` (over
:class:`~airflow_provider.tasks.patch.judging.LiveRevisionJudging`, whose hooks it fills).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, cast

from airflow.sdk.exceptions import AirflowException

from airflow_provider.tasks.inconclusive import (
    ANALYSE_AGAIN,
    OPTIONS,
    PROMOTE,
    Answer,
    ask_person,
    question_text,
    read_answer,
    required_actions_path,
)
from airflow_provider.tasks.notify import deployment_view_url
from airflow_provider.tasks.patch.judging import LiveRevisionJudging

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

    from airflow_provider.analysis import AnalysisResult

__all__ = ["RESUME_METHOD", "InconclusiveAsking"]

RESUME_METHOD = "execute_inconclusive_answered"
"""The method Airflow resumes the patch task in with the answer."""


class InconclusiveAsking(LiveRevisionJudging):
    """Ask a person when the analysis is inconclusive, and act on the answer (see the module)."""

    if TYPE_CHECKING:  # what the operator provides
        on_inconclusive: str
        response_timeout: timedelta

    # ---- the question
    def _on_inconclusive(
        self, context: Context, landing: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """With ``on_inconclusive="ask"``, ask (the task waits for the answer); else ``None`` (counted as failed)."""
        if self.on_inconclusive != "ask":
            return None
        self._ask(context, landing, result)

    def _ask(self, context: Context, landing: dict[str, Any], result: dict[str, Any]) -> NoReturn:
        """Record the question, say it (record entry, notification, log), then wait for the answer."""
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.patch.verdict import XCOM_ANALYSIS
        from airflow_provider.tasks.recording import record_landing_entry

        ti = context["ti"]
        store = context.get("task_state_store")
        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        path = required_actions_path(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1))
        earlier = recorded_question(store, landing, self.log) or {}
        number = int(earlier.get("number") or 0) + 1
        question = {"result": result, "path": path, "asked_at": time.time(), "number": number}
        record_question(store, landing, question, self.log)  # before anything acts on it
        ti.xcom_push(key=XCOM_ANALYSIS, value=result)
        reason = f"the analysis was inconclusive (question {number} to a person): {result.get('reason')}"
        record_landing_entry(
            context, self.log, Kind.ASKING, landing, verdict=result, message=reason, question_path=path
        )
        view_url = deployment_view_url(deployment_id, self.deployment_service_conn_id)
        self._notify(
            context,
            "inconclusive",
            deployment_id=deployment_id,
            revision_id=revision_id,
            previous_revision_id=landing.get("previous_active_revision_id"),
            reason=reason,
            analysis=result,
            extra={"question_url": _absolute(path)},
        )
        subject, body = question_text(
            f"deployment {deployment_id}", revision_id, result, view_url, self.response_timeout
        )
        self.log.warning(
            "Revision %s of deployment %s: %s. Asking a person (answer within %s, else it is rolled back): %s",
            revision_id,
            deployment_id,
            reason,
            self.response_timeout,
            _absolute(path),
        )
        ask_person(
            self,
            context,
            subject,
            body,
            self.response_timeout,
            method_name=RESUME_METHOD,
            kwargs={"landing": landing, "analysis": result},
        )

    # ---- the answer
    def execute_inconclusive_answered(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        landing: dict[str, Any] | None = None,
        analysis: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Resume with the answer to the inconclusive question: promote (land, after the bake when it is its own
        step), roll back, or analyse another interval; the answer recorded before it is acted on. ``landing`` and
        ``analysis`` come from the resume kwargs, else from ``task_state_store``."""
        try:
            return self._answered(context, event, landing, analysis)
        finally:
            self.close_hook()

    def _answered(
        self,
        context: Context,
        event: dict[str, Any] | None,
        landing: dict[str, Any] | None,
        analysis: dict[str, Any] | None,
    ) -> dict[str, Any]:
        from airflow_provider.decisions.rollout import bake_verdict
        from airflow_provider.tasks.patch.verdict import checked_landing, failed_verdict, landing_of, read_record

        store = context.get("task_state_store")
        record = read_record(store, self.log)
        if landing is None and record is not None:
            landing = landing_of(record)
        landing = checked_landing(landing, record or {}, RESUME_METHOD)
        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        result = analysis or (recorded_question(store, landing, self.log) or {}).get("result") or {}
        try:
            answer = read_answer(event)
        except ValueError as err:
            raise AirflowException(
                f"deployment {deployment_id}: the question about revision {revision_id} ended without a usable "
                f"answer ({err}); a retry judges the revision again"
            ) from None
        reason = f"the analysis was inconclusive and the answer was {answer.said()}: {result.get('reason')}"
        self.log.warning("Revision %s of deployment %s: %s", revision_id, deployment_id, reason)
        if answer.choice == PROMOTE:
            record_answer(store, landing, answer, self.log)
            self._answer_entry(context, landing, answer, reason)
            return self._promote(context, landing, {**result, "answer": answer.record()})
        if answer.choice == ANALYSE_AGAIN:
            record_answer(store, landing, answer, self.log)
            self._answer_entry(context, landing, answer, reason)
            current = self._read(deployment_id)
            left = bake_verdict(current, revision_id) if revision_id else None
            if left is not None:
                return self._roll_back(context, landing, left, step="bake", current=current)
            return self._analyse(context, current.model_dump(mode="json"), landing)
        decided = cast("AnalysisResult", result) if result else None
        verdict = failed_verdict("analysis", reason, revision_id, decided)
        record_answer(store, landing, answer, self.log, verdict=verdict)  # the answer and its verdict, one write
        self._answer_entry(context, landing, answer, reason)
        return self._roll_back(context, landing, reason, step="analysis", analysis=decided)

    def _answer_entry(self, context: Context, landing: dict[str, Any], answer: Answer, reason: str) -> None:
        from airflow_provider.decisions.record import Kind
        from airflow_provider.tasks.recording import record_landing_entry

        record_landing_entry(
            context, self.log, Kind.ANSWERED, landing, answer=answer.choice, answered_by=answer.by, message=reason
        )

    def _promote(self, context: Context, landing: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """Land the promoted revision (after the bake when it is its own step), the deployment read again: it must
        still serve."""
        from airflow_provider.decisions.rollout import bake_verdict
        from airflow_provider.tasks.patch.verdict import XCOM_ANALYSIS

        current = self._read(landing["deployment_id"])
        left = bake_verdict(current, landing["revision_id"]) if landing["revision_id"] else None
        if left is not None:
            return self._roll_back(context, landing, left, step="bake", current=current)
        context["ti"].xcom_push(key=XCOM_ANALYSIS, value=result)
        return self._bake_and_land(context, current.model_dump(mode="json"), landing, result)

    def _promoted(self, context: Context, landing: dict[str, Any]) -> dict[str, Any] | None:
        """The result an earlier try's person promoted the revision with (from the record), or ``None``."""
        store = context.get("task_state_store")
        answer = recorded_answer(store, landing, self.log)
        if answer is None or answer.choice != PROMOTE:
            return None
        result = (recorded_question(store, landing, self.log) or {}).get("result") or {}
        self.log.warning(
            "An earlier try's question about revision %s was answered %s: landing it without judging it again",
            landing["revision_id"],
            answer.said(),
        )
        return {**result, "answer": answer.record()}


def _absolute(path: str) -> str:
    """``path`` (under Airflow's base URL) as an absolute URL."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "http://localhost:8080").rstrip("/")
    return f"{base}/{path}"


# ---- the question and the answer in the patch's record
QUESTION = "question"
ANSWER = "answer"


def _same_revision(record: Mapping[str, Any] | None, landing: Mapping[str, Any]) -> bool:
    return (
        record is not None
        and record.get("deployment_id") == landing.get("deployment_id")
        and record.get("revision_id") == landing.get("revision_id")
    )


def _write(store: Any, record: dict[str, Any], log: logging.Logger | Any, what: str) -> None:
    from airflow_provider.tasks.patch.retry import TASK_STATE_KEY

    try:
        store.set(TASK_STATE_KEY, record)
    except Exception as err:  # the record lets a retry go on; the task itself goes on without it
        log.warning("Could not record %s in task_state_store (%s)", what, err)


def record_question(
    store: Any, landing: Mapping[str, Any], question: Mapping[str, Any], log: logging.Logger | Any
) -> None:
    """Write the open question (the inconclusive result, where it is answered) into the patch's record, any
    earlier answer cleared, before asking.

    :param store: ``context["task_state_store"]`` (``None``: nothing recorded).
    :param landing: the patch's landing.
    :param question: ``{"result", "path", "asked_at", "round"}``.
    :param log: where to say the store failed.
    """
    from airflow_provider.tasks.patch.verdict import read_record

    record = read_record(store, log)
    if not _same_revision(record, landing):
        return
    assert record is not None
    kept = {key: value for key, value in record.items() if key != ANSWER}
    _write(store, {**kept, QUESTION: dict(question)}, log, "the question")


def record_answer(
    store: Any,
    landing: Mapping[str, Any],
    answer: Answer,
    log: logging.Logger | Any,
    verdict: Mapping[str, Any] | None = None,
) -> None:
    """Write the answer into the patch's record before acting on it, in one write with the failed ``verdict`` it
    makes (a roll back): a retry finds both or neither.

    :param store: ``context["task_state_store"]`` (``None``: nothing recorded).
    :param landing: the patch's landing.
    :param answer: the answer.
    :param log: where to say the store failed.
    :param verdict: the failed verdict the answer makes (:func:`~airflow_provider.tasks.patch.verdict.failed_verdict`).
    """
    from airflow_provider.tasks.patch.verdict import read_record

    record = read_record(store, log)
    if not _same_revision(record, landing):
        return
    assert record is not None
    updated = {**record, ANSWER: answer.record()}
    if verdict is not None:
        updated["verdict"] = dict(verdict)
    _write(store, updated, log, "the answer")


def recorded_answer(store: Any, landing: Mapping[str, Any], log: logging.Logger | Any) -> Answer | None:
    """The answer an earlier try recorded for the patch's revision, or ``None``.

    :param store: ``context["task_state_store"]``.
    :param landing: the patch's landing.
    :param log: where to say the store failed.
    """
    from airflow_provider.tasks.patch.verdict import read_record

    record = read_record(store, log)
    answer = record.get(ANSWER) if record is not None and _same_revision(record, landing) else None
    if not isinstance(answer, Mapping) or answer.get("choice") not in OPTIONS:
        return None
    return Answer(
        choice=str(answer["choice"]),
        by=answer.get("by"),
        at=answer.get("at"),
        timed_out=bool(answer.get("timed_out")),
    )


def recorded_question(store: Any, landing: Mapping[str, Any], log: logging.Logger | Any) -> dict[str, Any] | None:
    """The question the patch's record holds for its revision (``{"result", "path", ...}``), or ``None``.

    :param store: ``context["task_state_store"]``.
    :param landing: the patch's landing.
    :param log: where to say the store failed.
    """
    from airflow_provider.tasks.patch.verdict import read_record

    record = read_record(store, log)
    question = record.get(QUESTION) if record is not None and _same_revision(record, landing) else None
    return dict(question) if isinstance(question, Mapping) else None
