"""Writing the record: each task of this provider adds what it did to each revision, when it does it, on every try
(the entries' shape and bounds: :mod:`airflow_provider.decisions.record`).

The record lives in the task's ``task_state_store`` (Airflow 3.3+) under
:data:`~airflow_provider.decisions.record.RECORD_KEY`: the store survives failures and retries (XCom is cleared when a
try starts; a failed task emits no asset event), Airflow keeps it in its metadata database, and the Rollouts view reads
it there. Each call is one read and at most one write of the whole record, so a worker that dies between two
writes leaves every entry written before; a fact the record holds already is not written again, so a retry that
goes over the same ground adds only what is new. Recording never fails the task: without a store (Airflow < 3.3)
nothing is recorded, and a store that fails is logged and left alone (a record that cannot be read is never
overwritten).

Each task calls one function, one line per fact: :func:`record_entry` (a revision), :func:`record_landing_entry`
(the patch task's revision, from its landing) and :func:`record_rollback_entry` (a rollback, from its record).
Each write is also told to the deployment's watchers (:mod:`airflow_provider.tasks.publishing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider.decisions.record import RECORD_KEY, Kind, entries_of, entry, failure_status, with_entries
from airflow_provider.tasks.publishing import publish_judging

if TYPE_CHECKING:
    import logging

    from airflow_provider.analysis import AnalysisTarget

__all__ = [
    "judging_entry",
    "record_entries",
    "record_entry",
    "record_landing_entry",
    "record_rollback_entry",
    "round_recorder",
    "verdict_entry",
]


def record_entries(context: Mapping[str, Any], log: logging.Logger | Any, entries: list[dict[str, Any]]) -> None:
    """Add ``entries`` (from :func:`~airflow_provider.decisions.record.entry`, without ``try_number``) to the task's
    record in one write, each stamped with the try; nothing is written when the record holds them all already, and an
    entry without a revision is left out.

    :param context: the task's context (its ``task_state_store`` and ``ti``).
    :param log: the task's logger (where a store failure is said).
    :param entries: the entries.
    """
    store = context.get("task_state_store")
    entries = [item for item in entries if item.get("revision_id")]  # no revision: nothing of it to record
    if store is None or not entries:
        return
    try_number = getattr(context.get("ti"), "try_number", None)
    stamped = [{**item, "try_number": item.get("try_number") or try_number} for item in entries]
    try:
        current = store.get(RECORD_KEY)
    except Exception as err:  # never overwrite a record that could not be read
        log.warning("Could not read the task's record in task_state_store (%s); not recording %s", err, _kinds(entries))
        return
    updated = with_entries(current, stamped)
    if updated is None:
        return
    try:
        store.set(RECORD_KEY, updated)
    except Exception as err:  # the record is for people and the view; the task goes on
        log.warning("Could not record %s in task_state_store (%s)", _kinds(entries), err)
    known = {_identity(item) for item in entries_of(current)}
    new_facts = [item for item in stamped if _identity(item) not in known]  # not the measurements of a judging
    publish_judging(context, log, new_facts)  # what the deployment's watchers read (never fails the task)


def record_entry(
    context: Mapping[str, Any],
    log: logging.Logger | Any,
    kind: str,
    deployment_id: str | None,
    revision_id: str | None,
    **fields: Any,
) -> None:
    """Record one fact about a revision, now (see :func:`~airflow_provider.decisions.record.entry` for ``fields``).

    :param context: the task's context.
    :param log: the task's logger.
    :param kind: see :class:`~airflow_provider.decisions.record.Kind`.
    :param deployment_id: the deployment.
    :param revision_id: the revision.
    :param fields: the entry's optional fields.
    """
    record_entries(context, log, [entry(kind, deployment_id, revision_id, at=time.time(), **fields)])


def record_landing_entry(
    context: Mapping[str, Any], log: logging.Logger | Any, kind: str, landing: Mapping[str, Any], **fields: Any
) -> None:
    """Record one fact about the patch task's revision, named by its landing (its deployment, revision, and the
    revision that served before the patch).

    :param context: the task's context.
    :param log: the task's logger.
    :param kind: see :class:`~airflow_provider.decisions.record.Kind`.
    :param landing: the patch's landing (:func:`~airflow_provider.tasks.patch.verdict.landing_of`).
    :param fields: the entry's optional fields.
    """
    if kind == Kind.TIMED_OUT:
        fields.setdefault("step", "timeout")
    if kind == Kind.FAILED and fields.get("status") is None:
        fields["status"] = failure_status(str(fields.get("message") or ""))
    record_entry(
        context,
        log,
        kind,
        landing.get("deployment_id"),
        landing.get("revision_id"),
        previous_revision_id=landing.get("previous_active_revision_id") or None,
        **fields,
    )


def record_rollback_entry(
    context: Mapping[str, Any],
    log: logging.Logger | Any,
    kind: str,
    rollback: Mapping[str, Any],
    *,
    not_restored: list[str] | tuple[str, ...] | None = None,
    **fields: Any,
) -> None:
    """Record a rollback sent (``rolling_back``) or serving (``rolled_back``) from its record
    (:meth:`~airflow_provider.tasks.rollback.outcome.RollbackStarted.record`, or the patch task's rollback record):
    the revision it created or redeployed, the one rolled back and the one returned to.

    :param context: the task's context.
    :param log: the task's logger.
    :param kind: ``rolling_back`` or ``rolled_back``.
    :param rollback: the rollback's record.
    :param not_restored: what it did not undo (default: the record's).
    :param fields: more optional fields (``requested_by``, ``requested_from``: who asked for a rollback by hand).
    """
    record_entry(
        context,
        log,
        kind,
        rollback.get("deployment_id"),
        rollback.get("revision_id"),
        rolled_back_from=rollback.get("rolled_back_from"),
        rolled_back_to=rollback.get("to_revision_id"),
        path=rollback.get("path"),
        not_restored=list(not_restored if not_restored is not None else rollback.get("not_restored") or []) or None,
        **fields,
    )


def judging_entry(target: AnalysisTarget) -> dict[str, Any]:
    """The ``judging`` entry of a revision an analysis gate starts to measure, now.

    :param target: what the analysis judges.
    """
    return entry(Kind.JUDGING, target.deployment_id, target.revision_id, at=time.time(), steps=["analysis"])


def verdict_entry(deployment_id: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The entry of an analysis gate's verdict on the revision a deployment serves, now: ``passed``, or
    ``rejected`` (step ``analysis``) with the reason and the measurements; a dry run's is ``passed``, its message
    saying what the gate would have done.

    :param deployment_id: the deployment.
    :param result: its ``AnalysisResult`` (``revision_id``: the revision judged).
    """
    passed = result.get("verdict") == "passed"
    dry_run = result.get("dry_run") is True  # never rejected: the message says what it would have done
    message = None if passed else result.get("reason")
    if dry_run and not passed:
        message = f"dry run: {result.get('would_have')}: {result.get('reason')}"
    return entry(
        Kind.PASSED if passed or dry_run else Kind.REJECTED,
        deployment_id,
        result.get("revision_id") or None,
        at=time.time(),
        step="analysis",
        verdict=result,
        message=message,
    )


def _kinds(entries: list[dict[str, Any]]) -> str:
    return ", ".join(f"{item.get('kind')} of revision {item.get('revision_id')}" for item in entries)


def round_recorder(
    context: Mapping[str, Any],
    log: logging.Logger | Any,
    targets: Sequence[AnalysisTarget],
    *,
    steps: list[str],
    fields: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[int, dict[str, list[Any]]], None]:
    """What an analysis on the worker calls after each round: the ``judging`` entry of each target, with its
    measurements so far (``verdict`` ``analysing``, the round, the latest measurements), in one write per round.
    The view shows a revision under analysis as "analysing" with them, never "landed" before its verdict.

    :param context: the task's context.
    :param log: the task's logger.
    :param targets: what the analysis judges.
    :param steps: the judging entry's ``steps`` (``analysis``, and ``verify``, ``bake`` when the task has them).
    :param fields: more fields of each target's judging entry, by deployment id (``previous_revision_id``).
    """

    def record_round(round_number: int, measured: dict[str, list[Any]]) -> None:
        now = time.time()
        made = []
        for target in targets:
            so_far = measured.get(target.deployment_id) or []
            verdict = {"verdict": "analysing", "round": round_number, "measurements": so_far}
            extra = dict((fields or {}).get(target.deployment_id) or {})
            made.append(
                entry(
                    Kind.JUDGING,
                    target.deployment_id,
                    target.revision_id,
                    at=now,
                    steps=steps,
                    verdict=verdict,
                    **extra,
                )
            )
        record_entries(context, log, made)

    return record_round


def _identity(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return (item.get("kind"), item.get("deployment_id"), item.get("revision_id"))
