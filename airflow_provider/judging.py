"""What a deployment watcher knows of the rollouts judging a revision (pure: no Airflow, no I/O).

A task of this provider that rolls a revision out and judges it (``PatchDeploymentOperator`` waiting for its
rollout, an analysis gate) publishes a small **judging marker** for the deployment, next to its record: in the
asset state store of the deployment's id asset (``deployment-service://deployments/<id>``), under
:data:`JUDGING_KEY`. The marker holds, per revision (the newest :data:`MAX_MARKED_REVISIONS`), what the task's
record says of it (``state``: the record's entry kind, see :class:`~airflow_provider.record.Kind`), until when
an unfinished judging may last (``until``, wall clock: a task that died does not hold a revision forever), and
which task instance judges it (``by``). A watcher in the triggerer, which has no access to Airflow's metadata
database but does reach the asset state store, reads it before it announces a revision (see
:func:`judging_of`). The writer is :mod:`airflow_provider.tasks.judging`; the reader the watcher's
:mod:`airflow_provider.settling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "JUDGING_KEY",
    "JUDGING_STATES",
    "MARKER_VERSION",
    "MAX_MARKED_REVISIONS",
    "REJECTED_STATES",
    "judging_of",
    "with_marker",
]

JUDGING_KEY = "deployment_service_judging"
"""Key of the judging marker in the asset state store of a deployment's id asset."""
MARKER_VERSION = 1
"""Version of the marker's shape."""
MAX_MARKED_REVISIONS = 10
"""Most revisions one deployment's marker keeps (the newest marked)."""
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
