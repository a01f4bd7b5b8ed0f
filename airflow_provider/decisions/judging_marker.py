"""What a deployment watcher knows of the rollouts judging a revision (pure: no Airflow, no I/O).

A task of this provider that rolls a revision out and judges it (``PatchDeploymentOperator`` waiting for its
rollout, an analysis gate) publishes a small **judging marker** for the deployment, next to its record: in the
asset state store of the deployment's id asset (``deployment-service://deployments/<id>``), under
:data:`JUDGING_KEY`. The marker holds, per revision (the newest :data:`MAX_MARKED_REVISIONS`), what the task's
record says of it (``state``: the record's entry kind, see :class:`~airflow_provider.decisions.record.Kind`), until when
an unfinished judging may last (``until``, wall clock: a task that died does not hold a revision forever), and
which task instance judges it (``by``). A watcher in the triggerer, which has no access to Airflow's metadata
database but does reach the asset state store, reads it before it announces a revision (see
:func:`judging_of`). The writer is :mod:`airflow_provider.tasks.publishing`; the reader the watcher's
:mod:`airflow_provider.decisions.settling`.

An analysis that runs in the triggerer (``deferrable=True``) cannot write its task's record, so its trigger
writes each round to the marker instead (:func:`with_rounds`): the revision's mark gets ``analysis``, the
measurements so far (``verdict`` ``analysing``, the round, the latest
:data:`MAX_ROUND_MEASUREMENTS`), which the Rollouts view shows with the task's record
(:func:`rounds_of`). The task's verdict replaces the mark, rounds and all: the record holds the verdict's
measurements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "JUDGING_KEY",
    "JUDGING_STATES",
    "MARKER_VERSION",
    "MAX_DETAIL",
    "MAX_MARKED_REVISIONS",
    "MAX_ROUND_MEASUREMENTS",
    "REJECTED_STATES",
    "judging_of",
    "rounds_of",
    "with_marker",
    "with_rounds",
]

JUDGING_KEY = "deployment_service_judging"
"""Key of the judging marker in the asset state store of a deployment's id asset."""
MARKER_VERSION = 1
"""Version of the marker's shape."""
MAX_MARKED_REVISIONS = 10
"""Most revisions one deployment's marker keeps (the newest marked)."""
MAX_ROUND_MEASUREMENTS = 10
"""Most measurements a mark's ``analysis`` keeps (the latest; ``measurements_total`` counts them all)."""
MAX_DETAIL = 500
"""Most characters of a measurement's ``detail`` in a mark."""
JUDGING_STATES = frozenset({"rolled_out", "judging", "rolling_back"})
"""Record kinds of a revision a rollout has not reached its verdict on yet (a rollback under way included)."""
REJECTED_STATES = frozenset({"rejected", "timed_out", "failed"})
"""Record kinds of a revision a rollout judged bad (or that never served)."""
_BY_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")


def with_marker(
    value: Any,
    *,
    revision_id: str,
    state: str,
    at: float,
    until: float | None,
    by: Mapping[str, Any],
    rolled_back_from: str | None = None,
) -> dict[str, Any]:
    """The marker ``value`` with what a task now says of ``revision_id`` (bounded to the newest
    :data:`MAX_MARKED_REVISIONS` revisions; fields of a newer writer kept).

    :param value: the stored marker (``None``: none yet).
    :param revision_id: the revision.
    :param state: the record kind the task just recorded of it (``rolled_out``, ``judging``, ``landed``...).
    :param at: when (Unix seconds).
    :param until: for a state of :data:`JUDGING_STATES`, the latest time the judging may still be under way;
        ``None`` for a verdict.
    :param by: the task instance (``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``).
    :param rolled_back_from: for ``rolling_back``/``rolled_back``, the revision the rollback returned from.
    """
    revisions: dict[str, Any] = {}
    if isinstance(value, Mapping) and isinstance(value.get("revisions"), Mapping):
        revisions = {str(key): dict(item) for key, item in value["revisions"].items() if isinstance(item, Mapping)}
    mark: dict[str, Any] = {
        "state": state,
        "at": round(float(at), 3),
        "until": round(float(until), 3) if until is not None else None,
        "by": {name: by.get(name) for name in _BY_FIELDS},
    }
    if rolled_back_from:
        mark["rolled_back_from"] = rolled_back_from
    revisions.pop(revision_id, None)
    revisions[revision_id] = mark
    if rolled_back_from and rolled_back_from in revisions:  # what the rollback says of the revision it undid
        undone = revisions[rolled_back_from]
        if undone.get("state") not in REJECTED_STATES:
            revisions[rolled_back_from] = {**undone, "state": "rejected", "until": None, "at": round(float(at), 3)}
    kept = dict(sorted(revisions.items(), key=lambda item: float(item[1].get("at") or 0))[-MAX_MARKED_REVISIONS:])
    return {"version": MARKER_VERSION, "revisions": kept}


def judging_of(value: Any, revision_id: str, now: float) -> dict[str, Any]:
    """What a watcher's event says of the rollouts judging ``revision_id``, from the deployment's marker.

    ``judging``: ``True`` while a rollout of this provider has not reached its verdict (and its ``until`` has not
    passed); ``False`` when one reached it, or none of them touched the revision; ``None`` when the marker could
    not be read (``value`` ``None``: unknown, no Airflow asset for the deployment's id, or no store). ``verdict``:
    the state the rollout recorded last (``landed``, ``passed``, ``rejected``, ``rolled_back``...), ``None``
    while judging or when no rollout touched it. ``judged_by``: the task instance, when one did. ``stale``:
    ``True`` when a judging's ``until`` passed without a verdict (the task may have died).

    :param value: the marker as stored, or ``None`` when it could not be read.
    :param revision_id: the revision about to be announced.
    :param now: the time (Unix seconds).
    """
    if value is None:
        return {"judging": None, "verdict": None, "judged_by": None, "stale": False}
    revisions = value.get("revisions") if isinstance(value, Mapping) else None
    mark = revisions.get(revision_id) if isinstance(revisions, Mapping) else None
    if not isinstance(mark, Mapping):
        return {"judging": False, "verdict": None, "judged_by": None, "stale": False}
    state = str(mark.get("state") or "")
    by = mark.get("by") if isinstance(mark.get("by"), Mapping) else None
    if state in JUDGING_STATES:
        until = mark.get("until")
        stale = isinstance(until, (int, float)) and now > float(until)
        return {"judging": not stale, "verdict": None, "judged_by": by, "stale": stale}
    return {"judging": False, "verdict": state or None, "judged_by": by, "stale": False}


def with_rounds(
    value: Any,
    *,
    revision_id: str,
    analysis: Mapping[str, Any],
    at: float,
    until: float | None,
    by: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The marker ``value`` with an analysis' measurements so far on ``revision_id``'s mark (bounded: the latest
    :data:`MAX_ROUND_MEASUREMENTS`, each ``detail`` cut to :data:`MAX_DETAIL` characters); ``None`` when nothing
    is to be written: the revision has a verdict already (a late round never hides it), or these rounds are the
    ones marked.

    :param value: the stored marker (``None``: none yet).
    :param revision_id: the revision under analysis.
    :param analysis: ``{"verdict": "analysing", "round": ..., "measurements": [...]}``.
    :param at: when the round was measured (Unix seconds).
    :param until: the latest time the judging may still be under way (a mark made here, when the task's is missing).
    :param by: the task instance the analysis is for (``dag_id``, ``run_id``, ``task_id``, ``map_index``,
        ``try_number``).
    """
    revisions = value.get("revisions") if isinstance(value, Mapping) else None
    mark = revisions.get(revision_id) if isinstance(revisions, Mapping) else None
    if isinstance(mark, Mapping) and mark.get("state") not in JUDGING_STATES:
        return None
    rounds = _bounded_rounds(analysis)
    if isinstance(mark, Mapping) and mark.get("analysis") == rounds:
        return None
    if not isinstance(mark, Mapping):  # the task's mark is missing (its write failed): judging, by this analysis
        value = with_marker(value, revision_id=revision_id, state="judging", at=at, until=until, by=by)
        mark = value["revisions"][revision_id]
    updated = dict(value) if isinstance(value, Mapping) else {}
    updated["revisions"] = {**dict(updated.get("revisions") or {}), revision_id: {**dict(mark), "analysis": rounds}}
    updated.setdefault("version", MARKER_VERSION)
    return updated


def rounds_of(value: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The measurements so far of each revision under analysis in a marker, with the task instance they are for:
    ``{revision_id: (by, analysis)}`` (revisions with a verdict, or without rounds, left out).

    :param value: the stored marker.
    """
    revisions = value.get("revisions") if isinstance(value, Mapping) else None
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for revision_id, mark in (revisions or {}).items() if isinstance(revisions, Mapping) else ():
        if not isinstance(mark, Mapping) or mark.get("state") not in JUDGING_STATES:
            continue
        by, analysis = mark.get("by"), mark.get("analysis")
        if isinstance(by, Mapping) and isinstance(analysis, Mapping):
            found[str(revision_id)] = (dict(by), dict(analysis))
    return found


def _bounded_rounds(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """``analysis`` with its latest :data:`MAX_ROUND_MEASUREMENTS` measurements (``measurements_total``: all)."""
    measurements = [item for item in analysis.get("measurements") or [] if isinstance(item, Mapping)]
    kept = []
    for item in measurements[-MAX_ROUND_MEASUREMENTS:]:
        detail = item.get("detail")
        if isinstance(detail, str) and len(detail) > MAX_DETAIL:
            item = {**item, "detail": detail[: MAX_DETAIL - 3] + "..."}
        kept.append(dict(item))
    others = {str(key): value for key, value in analysis.items() if key not in ("measurements", "measurements_total")}
    return {**others, "measurements": kept, "measurements_total": len(measurements)}
