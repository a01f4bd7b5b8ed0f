"""The record: what each task of this provider did to each revision it created or judged (pure: no Airflow, no I/O).

Every task keeps a list of **entries** in its ``task_state_store`` under :data:`RECORD_KEY` (the writer is
:mod:`airflow_provider.tasks.recording`; the Rollouts view reads it). One entry is one fact about one revision of one
deployment, stamped with the time and the task's try:

- ``rolled_out``: the PATCH was accepted and created the revision (``previous_revision_id``: what served before);
- ``judging``: the revision is live and being judged (``steps``: ``verify``, ``analysis``, ``bake``);
- ``landed``: it is live and passed what judged it (``verdict``: the analysis, when there was one);
- ``rejected``: it failed ``verify``, the bake or the analysis (``step``, ``message``, ``verdict`` with its
  measurements), or could not be judged (``step`` ``unjudged``);
- ``timed_out``: it had not gone live within the task's ``timeout``;
- ``failed``: its rollout failed before it ever served (``status``: ``BUILD_FAILED``...; or superseded, with
  ``superseded_by``: the newer revision that replaced it, e.g. the one the service built instead when it skipped
  ours, ``SKIPPED``, never a failed build; or deleted), or a fleet abort rolled it back before it was judged
  (``step`` ``abort``);
- ``passed``: an analysis gate passed it (:class:`~airflow_provider.operators.analysis.DeploymentAnalysisOperator`);
- ``rolling_back``: a rollback was sent (``revision_id``: the revision it created or redeployed,
  ``rolled_back_from``, ``rolled_back_to``, ``path``);
- ``rolled_back``: that rollback serves (``not_restored``: what it did not undo);
- ``asking``: the analysis was inconclusive and the task asks a person (``verdict``: the measurements,
  ``question_path``: where Airflow's UI shows the question, under its base URL);
- ``answered``: the answer (``answer``: the choice, ``answered_by``: who, none when the timeout answered).

An ``asking`` or ``answered`` entry asked again (another interval analysed, another answer) replaces its earlier
self and moves to the end: the newest entry says whether a question is open.

A rollback someone asked for by hand (the Rollouts view's "Roll back to this revision") carries who asked
(``requested_by``: the Airflow user who triggered the run) and where (``requested_from``: ``Rollouts view``).

A fleet rollout's rows are a record already: :func:`fleet_row_entries` reads one row as entries, and
:func:`event_entries` reads a provider asset event the same way (for tasks that kept no record).

The record is bounded: at most :data:`MAX_ENTRIES` entries and :data:`MAX_RECORD_BYTES` of JSON per task instance,
:data:`MAX_MEASUREMENTS` measurements and :data:`MAX_TEXT` characters per text in an entry. An entry that states a
fact the record already holds (the same kind, deployment and revision) is not written again: a retry's entries are
the facts it adds. Fields this module does not know are kept as they are (a newer writer's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider.decisions.fleet_progress import (
    ABORTED_UNJUDGED,
    ANALYSIS_FAILED_VERDICTS,
    REASON_UNKNOWN_OUTCOMES,
    ROLLED_BACK_OUTCOMES,
    WITH_WAVE_OUTCOMES,
    Outcome,
)

__all__ = [
    "BUILD_FAILURES",
    "FAILURE_KINDS",
    "KINDS",
    "MAX_ENTRIES",
    "MAX_MEASUREMENTS",
    "MAX_RECORD_BYTES",
    "MAX_TEXT",
    "RECORD_KEY",
    "RECORD_VERSION",
    "VERDICT_KINDS",
    "Kind",
    "bounded_verdict",
    "entries_of",
    "entry",
    "event_entries",
    "failure_status",
    "fleet_row_entries",
    "superseded_by",
    "verdict_kind",
    "with_entries",
]

RECORD_KEY = "deployment_service_record"
"""Key of the record in ``context["task_state_store"]`` (renaming it hides the records written before)."""
RECORD_VERSION = 1
"""Version of the record's shape."""
MAX_ENTRIES = 50
"""Most entries one task instance keeps (all its tries together); the oldest go first (see :func:`with_entries`)."""
MAX_MEASUREMENTS = 10
"""Most measurements an entry's ``verdict`` keeps (the latest; ``measurements_total`` counts them all)."""
MAX_TEXT = 500
"""Most characters of a message or reason in an entry."""
MAX_RECORD_BYTES = 48_000
"""Most bytes of the record's JSON: under Airflow's ``[state_store] max_value_storage_bytes`` (64 KB by default)."""


class Kind:
    """What an entry says happened to its revision (see the module)."""

    ROLLED_OUT = "rolled_out"
    JUDGING = "judging"
    LANDED = "landed"
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"
    FAILED = "failed"
    PASSED = "passed"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    ASKING = "asking"
    ANSWERED = "answered"


KINDS = frozenset(value for name, value in vars(Kind).items() if name.isupper())
"""Every kind of entry."""
VERDICT_KINDS = frozenset({Kind.LANDED, Kind.REJECTED, Kind.TIMED_OUT, Kind.FAILED, Kind.PASSED})
"""Kinds that end the judging of a revision."""
FAILURE_KINDS = frozenset({Kind.REJECTED, Kind.TIMED_OUT})
"""Kinds of a revision that went out (or may yet) and was judged bad: a failed change."""
_FIELDS = (
    "previous_revision_id",
    "rolled_back_from",
    "rolled_back_to",
    "step",
    "steps",
    "verdict",
    "message",
    "status",
    "superseded_by",
    "path",
    "not_restored",
    "with_wave",
    "wave",
    "requested_by",
    "requested_from",
    "question_path",
    "answer",
    "answered_by",
)
"""The optional fields of an entry, in the order they are written."""


# ------------------------------------------------------------------------------------------ one entry
def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _plain(value: Any) -> Any:
    """``value`` as plain JSON (texts cut to :data:`MAX_TEXT`; what JSON cannot hold as its text)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return _text(value)


def bounded_verdict(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """An analysis result (``verdict``, ``failing_check``, ``reason``, ``measurements``...) as an entry keeps it:
    every field it has (a dry run's, a newer version's), texts cut, the latest :data:`MAX_MEASUREMENTS`
    measurements and ``measurements_total``. Bounding a bounded one changes nothing.

    :param verdict: an ``AnalysisResult`` (JSON), or a shortened one (an asset event's).
    """
    skipped = ("measurements", "measurements_left_out")
    kept = {str(key): _plain(value) for key, value in verdict.items() if key not in skipped}
    measurements = list(verdict.get("measurements") or [])
    left_out = int(verdict.get("measurements_left_out") or 0)
    total = verdict.get("measurements_total")
    kept["measurements"] = [_plain(item) for item in measurements[-MAX_MEASUREMENTS:]]
    kept["measurements_total"] = int(total) if isinstance(total, int) else len(measurements) + left_out
    return kept


def entry(
    kind: str,
    deployment_id: str | None,
    revision_id: str | None,
    *,
    at: float | None,
    try_number: int | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One entry (plain JSON, bounded): ``kind``, ``deployment_id``, ``revision_id``, ``at``, ``try_number`` and
    the optional fields given (``previous_revision_id``, ``rolled_back_from``, ``rolled_back_to``, ``step``,
    ``steps``, ``verdict``, ``message``, ``status``, ``superseded_by`` (a ``failed`` entry whose message says so
    gets it from the message), ``path``, ``not_restored``, ``with_wave``, ``wave``,
    ``requested_by``, ``requested_from``, ``question_path``, ``answer``, ``answered_by``; ``None`` values are left
    out).

    :param kind: see :class:`Kind`.
    :param deployment_id: the deployment.
    :param revision_id: the revision the entry is about (for a rollback: the revision it created or redeployed).
    :param at: when it happened (Unix seconds; ``None``: not known).
    :param try_number: the task's try.
    :param fields: the optional fields.
    """
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown record entry field(s) {', '.join(unknown)}; expected some of {', '.join(_FIELDS)}")
    made: dict[str, Any] = {
        "kind": kind,
        "deployment_id": deployment_id,
        "revision_id": revision_id,
        "at": round(float(at), 3) if at is not None else None,
        "try_number": try_number,
    }
    if kind == Kind.FAILED and fields.get("superseded_by") is None:
        fields["superseded_by"] = superseded_by(str(fields.get("message") or ""))
    for name in _FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        if name == "verdict" and isinstance(value, Mapping):
            made[name] = bounded_verdict(value)
        elif name in ("not_restored", "steps"):
            made[name] = [_text(item) for item in value]
        else:
            made[name] = _plain(value)
    return made


def verdict_kind(step: str | None) -> str:
    """The kind of a failed verdict reached by ``step``: ``timed_out`` for a rollout's ``timeout``, else
    ``rejected`` (``verify``, ``analysis``, ``bake``, ``unjudged``).

    :param step: what reached it.
    """
    return Kind.TIMED_OUT if step == "timeout" else Kind.REJECTED


def _identity(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two entries state the same fact."""
    return (item.get("kind"), item.get("deployment_id"), item.get("revision_id"))


# ------------------------------------------------------------------------------------------ the record
def entries_of(value: Any) -> list[dict[str, Any]]:
    """The entries of a stored record, oldest first (``[]`` for anything that is not one).

    :param value: what ``task_state_store`` holds under :data:`RECORD_KEY`.
    """
    if not isinstance(value, Mapping):
        return []
    return [dict(item) for item in value.get("entries") or [] if isinstance(item, Mapping) and item.get("kind")]


def with_entries(value: Any, new: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The record ``value`` with ``new`` entries added, bounded; ``None`` when nothing changes (every fact is
    recorded already: nothing to write).

    An entry whose fact (kind, deployment, revision) is recorded is not added again; a ``judging`` entry
    replaces its earlier self when it brings something new (the measurements so far), keeping when judging
    started. Over :data:`MAX_ENTRIES` entries or :data:`MAX_RECORD_BYTES` bytes, what goes first: a ``judging``
    entry whose revision has a verdict since, then the measurements of the oldest entries (never the newest's),
    then the oldest entries (``left_out`` counts the entries dropped).

    :param value: the stored record (``None``: none yet).
    :param new: entries from :func:`entry`.
    """
    current = entries_of(value)
    left_out = int(value.get("left_out") or 0) if isinstance(value, Mapping) else 0
    changed = False
    for item in new:
        same = next((index for index, kept in enumerate(current) if _identity(kept) == _identity(item)), None)
        if same is None:
            current.append(dict(item))
            changed = True
        elif item.get("kind") == Kind.JUDGING and _differs(current[same], item):
            current[same] = {**dict(item), "at": current[same].get("at")}
            changed = True
        elif item.get("kind") in (Kind.ASKING, Kind.ANSWERED) and _differs(current[same], item):
            del current[same]  # asked (or answered) again: the newest says it, at the end
            current.append(dict(item))
            changed = True
    if not changed:
        return None
    current, dropped = _bounded(current)
    return {"version": RECORD_VERSION, "entries": current, "left_out": left_out + dropped}


def _differs(kept: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    ignored = ("at", "try_number")
    return {k: v for k, v in kept.items() if k not in ignored} != {k: v for k, v in item.items() if k not in ignored}


def _size(entries: Sequence[Mapping[str, Any]]) -> int:
    return len(json.dumps({"version": RECORD_VERSION, "entries": entries, "left_out": 0}))


def _bounded(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``entries`` within :data:`MAX_ENTRIES` and :data:`MAX_RECORD_BYTES`, and how many were dropped."""
    dropped = 0
    while len(entries) > MAX_ENTRIES or (len(entries) > 1 and _size(entries) > MAX_RECORD_BYTES):
        judged = {(e.get("deployment_id"), e.get("revision_id")) for e in entries if e.get("kind") in VERDICT_KINDS}
        stale = next(
            (
                index
                for index, item in enumerate(entries)
                if item.get("kind") == Kind.JUDGING and (item.get("deployment_id"), item.get("revision_id")) in judged
            ),
            None,
        )
        if stale is None and len(entries) <= MAX_ENTRIES:
            older = entries[:-1]  # the newest entry keeps its measurements
            measured = next(
                (index for index, item in enumerate(older) if (item.get("verdict") or {}).get("measurements")), None
            )
            if measured is not None:
                verdict = entries[measured]["verdict"]
                entries[measured] = {**entries[measured], "verdict": {**verdict, "measurements": []}}
                continue
        del entries[stale if stale is not None else 0]
        dropped += 1
    return entries, dropped


# ------------------------------------------------------------------------------------------ other records
BUILD_FAILURES = ("BUILD_FAILED", "CREATE_FAILED", "DEPLOY_FAILED")
"""Revision statuses of a rollout that never served, as a failure's message names them."""


def fleet_row_entries(row: Mapping[str, Any], phase: str | None = None) -> list[dict[str, Any]]:
    """A fleet rollout's row (:class:`~airflow_provider.decisions.fleet_progress.FleetRow` JSON) read as entries: its
    rollout, its verdict, its rollback. A row that landed while its wave's analysis is under way (``phase``
    ``analysing``, no verdict yet) is ``judging``, never ``landed``.

    :param row: the row.
    :param phase: its wave's phase (``planned``, ``patched``, ``watched``, ``analysing``...), when known.
    """
    outcome, revision = str(row.get("outcome") or ""), row.get("to_revision")
    deployment_id, previous = row.get("deployment_id"), row.get("from_revision")
    started, finished = _number(row.get("started_at")), _number(row.get("finished_at"))
    failed_at = _number(row.get("failed_at"))
    wave, message, analysis = row.get("wave"), row.get("message") or None, row.get("analysis")
    if not revision or started is None:
        return []  # never patched, or the patch made no revision
    found = [entry(Kind.ROLLED_OUT, deployment_id, revision, at=started, previous_revision_id=previous, wave=wave)]
    rolled_back = outcome in ROLLED_BACK_OUTCOMES
    unjudged = str(message or "").startswith(ABORTED_UNJUDGED)  # rolled back with its wave, never judged
    pending_rollback = row.get("rollback_revision") and not row.get("rollback_decided")
    if outcome == Outcome.LANDED and analysis is None and phase == "analysing":
        found.append(entry(Kind.JUDGING, deployment_id, revision, at=finished, steps=["analysis"], wave=wave))
    elif (outcome == Outcome.LANDED or outcome in WITH_WAVE_OUTCOMES) and not unjudged:
        landed_at = finished if outcome == Outcome.LANDED else None
        would_have = analysis.get("would_have") if isinstance(analysis, Mapping) else None  # a dry run's verdict
        said = f"dry run: {would_have}: {analysis.get('reason')}" if would_have and analysis else None
        found.append(
            entry(Kind.LANDED, deployment_id, revision, at=landed_at, verdict=analysis, wave=wave, message=said)
        )
    elif outcome == Outcome.FAILED or unjudged or (rolled_back and outcome not in REASON_UNKNOWN_OUTCOMES):
        at = failed_at if failed_at is not None else (None if rolled_back else finished)
        found.append(_failure_entry(row, at))
    if rolled_back or pending_rollback:
        kind = Kind.ROLLED_BACK if rolled_back else Kind.ROLLING_BACK
        found.append(
            entry(
                kind,
                deployment_id,
                row.get("rollback_revision") or previous,
                at=finished if rolled_back else None,
                rolled_back_from=revision,
                rolled_back_to=previous,
                path=row.get("rollback_path"),
                not_restored=row.get("not_restored") or None,
                with_wave=outcome in WITH_WAVE_OUTCOMES or None,
                message=message if outcome in REASON_UNKNOWN_OUTCOMES else None,
                wave=wave,
            )
        )
    return found


def _failure_entry(row: Mapping[str, Any], at: float | None) -> dict[str, Any]:
    """The verdict of a fleet row that failed: rejected by its analysis, ``verify`` or the bake (or, once live, for
    another reason its message gives), timed out, or a rollout that never served (its build failed, it was
    superseded or deleted)."""
    revision, deployment_id, wave = row.get("to_revision"), row.get("deployment_id"), row.get("wave")
    message, analysis = str(row.get("message") or ""), row.get("analysis")
    shared: dict[str, Any] = {"at": at, "message": message or None, "wave": wave}
    if isinstance(analysis, Mapping) and analysis.get("verdict") in ANALYSIS_FAILED_VERDICTS:
        return entry(Kind.REJECTED, deployment_id, revision, step="analysis", verdict=analysis, **shared)
    if message.startswith("verification failed"):
        return entry(Kind.REJECTED, deployment_id, revision, step="verify", **shared)
    if "left service during the bake" in message:
        return entry(Kind.REJECTED, deployment_id, revision, step="bake", **shared)
    if message.startswith(ABORTED_UNJUDGED):  # given up by an abort before it was judged
        return entry(Kind.FAILED, deployment_id, revision, step="abort", **shared)
    if row.get("timed_out") or message.startswith("timed out"):
        return entry(Kind.TIMED_OUT, deployment_id, revision, step="timeout", **shared)
    status = failure_status(message)
    if status is None and (row.get("went_live") or row.get("rollback_revision")):  # it served: judged bad
        return entry(Kind.REJECTED, deployment_id, revision, **shared)
    return entry(Kind.FAILED, deployment_id, revision, status=status, **shared)


def failure_status(message: str) -> str | None:
    """The revision status a failed rollout's message names (``BUILD_FAILED``, ``CREATE_FAILED``,
    ``DEPLOY_FAILED``), or ``None``.

    :param message: the failure's message (``... revision R ended with status BUILD_FAILED ...``).
    """
    return next((status for status in BUILD_FAILURES if f"status {status}" in message), None)


_SUPERSEDED = re.compile(r"was superseded by ([0-9a-fA-F-]{36})")


def superseded_by(message: str) -> str | None:
    """The revision a failed rollout's message says superseded it (``... was superseded by R ...``: the deployment's
    newer latest revision, the one the service builds instead of a skipped one), or ``None``.

    :param message: the failure's message.
    """
    found = _SUPERSEDED.search(message)
    return found.group(1) if found else None


def event_entries(payload: Mapping[str, Any], at: float | None) -> list[dict[str, Any]]:
    """A provider asset event (a task's ``revision_live``) read as entries: ``landed`` for a revision a task
    rolled out, ``rolled_back`` for one a rollback restored (``[]`` for anything else: a watcher's events are
    what it saw, not what a task did).

    :param payload: the event's payload (:func:`~airflow_provider.assets.event_payload`).
    :param at: when Airflow recorded the event.
    """
    if payload.get("kind") != "revision_live" or payload.get("origin") not in (None, "task"):
        return []
    outcome, deployment_id = str(payload.get("outcome") or ""), payload.get("deployment_id")
    revision, previous = payload.get("revision_id"), payload.get("previous_revision_id")
    if outcome == "rolled_out":
        verdict = payload.get("analysis") if isinstance(payload.get("analysis"), Mapping) else None
        return [entry(Kind.LANDED, deployment_id, revision, at=at, previous_revision_id=previous, verdict=verdict)]
    if outcome.startswith("rolled_back"):
        return [
            entry(
                Kind.ROLLED_BACK,
                deployment_id,
                revision,
                at=at,
                rolled_back_from=previous,
                not_restored=payload.get("not_restored") or None,
            )
        ]
    return []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
