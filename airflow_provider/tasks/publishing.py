"""Publishing the judging marker: what a task records of a revision, told to the deployment watchers too
(the marker's shape and how a watcher reads it: :mod:`airflow_provider.decisions.judging_marker`).

The record (written by :mod:`airflow_provider.tasks.recording`) lives in the task's own ``task_state_store``,
which a trigger cannot read. So each time a task records a fact about a revision, :func:`publish_judging` also
writes the fact to the asset state store of the deployment's id asset (``deployment-service://deployments/<id>``),
which the watcher in the triggerer reads: a ``rolled_out`` (of a task that waits for its rollout), ``judging`` or
``rolling_back`` entry says "a rollout is judging this revision, until at most ``until``"; a verdict (``landed``,
``passed``, ``rejected``, ``timed_out``, ``failed``, ``rolled_back``) ends it.

Publishing never fails the task and never delays it beyond one read and one write: without Airflow's task
supervisor (tests, a plain script) nothing is published; when the deployment has no asset in Airflow (no DAG
names ``deployment_asset(<id>)``), the write fails, is logged once per task instance at info level, and the
watchers say ``judging: null`` (unknown) for its revisions.

A fleet rollout keeps no record entries (its rows are its record): :class:`FleetJudging` publishes what each row
says of its revisions each time the fleet's progress is saved, a row that landed still judged until its wave is
done (its wave's analysis, or the rollback of a wave that stops the rollout, may yet undo it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider.assets import deployment_asset_uri, state_store_unavailable
from airflow_provider.decisions.fleet_progress import WITH_WAVE_OUTCOMES
from airflow_provider.decisions.judging_marker import JUDGING_KEY, JUDGING_STATES, with_marker
from airflow_provider.decisions.record import Kind, fleet_row_entries

if TYPE_CHECKING:
    import logging

__all__ = [
    "JUDGING_MARGIN",
    "FleetJudging",
    "asset_store",
    "fleet_marker_entries",
    "judging_window",
    "publish_judging",
    "trigger_judging",
]

JUDGING_MARGIN = 600.0
"""Seconds added to a task's own bound on its judging (``timeout``, the analysis, the bake) for the marker's
``until``: a verdict written late (a busy worker, a retry) still arrives before the marker goes stale."""
_MARKED = frozenset({*JUDGING_STATES, "landed", "passed", "rejected", "timed_out", "failed", "rolled_back"})
_unpublished: set[tuple[Any, ...]] = set()
"""Task instances (and deployments) whose marker could not be written: said once, at info level."""


def asset_store(uri: str) -> Any | None:
    """The asset state store of the asset named ``uri`` (Airflow's ``AssetStateStoreAccessor``), or ``None``
    outside a task run by Airflow's supervisor (nothing to publish to).

    :param uri: the asset's name (a deployment asset's name is its URI).
    """
    # Airflow's task runner, imported already wherever a supervisor runs us (never imported here: no cost).
    task_runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if getattr(task_runner, "SUPERVISOR_COMMS", None) is None:
        return None
    try:
        from airflow.sdk.execution_time.context import AssetStateStoreAccessor
    except ImportError:  # pragma: no cover - Airflow < 3.3
        return None
    return AssetStateStoreAccessor(name=uri)


def judging_window(task: Any) -> float:
    """The longest a task may judge a revision it rolled out, in seconds: its rollout ``timeout``, its
    analysis (``initial_delay_seconds + count * interval_seconds``) and its ``bake_seconds``, plus
    :data:`JUDGING_MARGIN`.

    :param task: the operator (any attribute it lacks counts as 0).
    """
    total = JUDGING_MARGIN
    for name in ("timeout", "bake_seconds"):
        value = getattr(task, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            total += float(value)
    analysis = getattr(task, "analysis", None)
    if analysis is not None:
        count = getattr(analysis, "count", None) or 1
        total += float(getattr(analysis, "initial_delay_seconds", 0) or 0)
        total += float(count) * float(getattr(analysis, "interval_seconds", 0) or 0)
    return total


def _by(ti: Any) -> dict[str, Any]:
    """The task instance a marker names (``by``)."""
    names = ("dag_id", "run_id", "task_id", "map_index", "try_number")
    return {name: getattr(ti, name, None) for name in names}


def trigger_judging(context: Mapping[str, Any]) -> dict[str, Any]:
    """What an analysis trigger needs to write its rounds to the deployments' judging markers for this task
    (:class:`~airflow_provider.triggers.analysis.DeploymentAnalysisTrigger`'s ``judging``): the task instance
    (``by``) and until when its judging may last (``until``, as :func:`publish_judging` marks it).

    :param context: the task's context (``ti``, ``task``).
    """
    ti = context.get("ti")
    task = context.get("task") or getattr(ti, "task", None)
    return {"by": _by(ti), "until": round(time.time() + judging_window(task), 3)}


def publish_judging(
    context: Mapping[str, Any], log: logging.Logger | Any, entries: Sequence[Mapping[str, Any]]
) -> None:
    """Tell the watchers what ``entries`` (just recorded) say of their revisions: one read and one write of
    the marker per deployment. A ``rolled_out`` entry counts only for a task that waits for its rollout (one
    that does not never reaches a verdict).

    :param context: the task's context (``ti``, ``task``).
    :param log: the task's logger.
    :param entries: record entries (``kind``, ``deployment_id``, ``revision_id``, ``at``, ``rolled_back_from``).
    """
    ti = context.get("ti")
    task = context.get("task") or getattr(ti, "task", None)
    waits = bool(getattr(task, "wait_for_rollout", True))
    marked = [
        item
        for item in entries
        if item.get("kind") in _MARKED
        and item.get("deployment_id")
        and item.get("revision_id")
        and (item.get("kind") != "rolled_out" or waits)
    ]
    if not marked:
        return
    by = _by(ti)
    window = judging_window(task)
    for deployment_id in dict.fromkeys(str(item["deployment_id"]) for item in marked):
        try:
            uri = deployment_asset_uri(deployment_id)
        except ValueError:  # not a deployment id: nothing a watcher could look up
            continue
        store = asset_store(uri)
        if store is None:
            return
        try:
            value = store.get(JUDGING_KEY)
            for item in (item for item in marked if item["deployment_id"] == deployment_id):
                at = float(item.get("at") or time.time())
                kind = str(item["kind"])
                value = with_marker(
                    value,
                    revision_id=str(item["revision_id"]),
                    state=kind,
                    at=at,
                    until=at + window if kind in JUDGING_STATES else None,
                    by=by,
                    rolled_back_from=item.get("rolled_back_from"),
                )
            store.set(JUDGING_KEY, value)
        except Exception as err:  # the asset may not exist in Airflow: watchers then say judging is unknown
            seen = (by["dag_id"], by["run_id"], by["task_id"], by["map_index"], deployment_id)
            if seen not in _unpublished:
                if len(_unpublished) > 1000:
                    _unpublished.clear()
                _unpublished.add(seen)
                expected = state_store_unavailable(err)
                if expected is not None:  # a condition the provider handles: no error text
                    log.debug(
                        "Deployment watchers do not see this task judge deployment %s: %s", deployment_id, expected
                    )
                else:
                    log.info(
                        "Deployment watchers cannot see this task judge deployment %s (asset %s): %s",
                        deployment_id,
                        uri,
                        err,
                    )


def fleet_marker_entries(row: Mapping[str, Any], phase: str | None) -> list[dict[str, Any]]:
    """What a fleet row says of its revisions, for the judging marker: its record entries
    (:func:`~airflow_provider.decisions.record.fleet_row_entries`), a ``landed`` one read as ``judging`` until its wave
    is ``done`` (verify, the analysis or the rollback of a wave that stops the rollout may yet undo it), and left out
    of a row rolled back (with its wave: the rollback's entry marks the revision rejected).

    :param row: the row (:class:`~airflow_provider.decisions.fleet_progress.FleetRow` JSON).
    :param phase: its wave's phase.
    """
    undone = row.get("outcome") in WITH_WAVE_OUTCOMES or bool(row.get("rollback_revision"))
    found = []
    for item in fleet_row_entries(row, phase):
        if item.get("kind") == Kind.LANDED and undone:
            continue  # rolled back with its wave: its rollback's entry marks it rejected
        if item.get("kind") == Kind.LANDED and phase != "done":
            item = {**item, "kind": Kind.JUDGING}
        found.append(item)
    return found


class FleetJudging:
    """Publishes a fleet rollout's rows to the deployments' judging markers, each fact once per try (as the patch
    task's record does; see :func:`publish_judging`).

    :param context: the fleet task's context (``ti``, ``task``).
    :param log: its logger.
    """

    def __init__(self, context: Mapping[str, Any], log: logging.Logger | Any) -> None:
        self.context = context
        self.log = log
        self.published: set[tuple[Any, ...]] = set()

    def publish(self, waves: Iterable[tuple[str | None, Iterable[Mapping[str, Any]]]]) -> None:
        """Tell the watchers what the rows of ``waves`` (each its phase and rows) say that was not told yet.

        :param waves: ``(phase, rows)`` of each wave just saved.
        """
        new = []
        for phase, rows in waves:
            for row in rows:
                for item in fleet_marker_entries(row, phase):
                    fact = (item.get("kind"), item.get("deployment_id"), item.get("revision_id"))
                    if fact not in self.published:
                        self.published.add(fact)
                        new.append({**item, "at": item.get("at") or time.time()})
        if new:
            publish_judging(self.context, self.log, new)
