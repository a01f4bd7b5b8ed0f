"""The record as the Rollouts view reads it: what each task instance of the provider did to each deployment, as
record entries (:mod:`airflow_provider.decisions.record`), from three places in Airflow's metadata database:

- **the tasks' records** in ``task_state_store`` (key :data:`~airflow_provider.decisions.record.RECORD_KEY`): every
  patch, rollback and analysis task, failed tasks included, on every try;
- **the fleet rollouts' rows** in ``task_state_store``
  (:func:`~airflow_provider.plugins.rollouts.metadata.fleet_touches`): a fleet's record is its rows, read as entries
  (no second copy is written);
- **the provider's asset events** of tasks that kept no record (a task of an earlier provider version, or one run
  without a task state store): a landed or rolled-back revision.

A task whose analysis runs in the triggerer cannot write its record until the verdict: its trigger writes the
rounds so far to the deployment's judging marker (:mod:`airflow_provider.decisions.judging_marker`, in the asset state
store of the deployment's id asset), which :func:`judging_markers` reads and :func:`with_rounds_measured` adds to that
task's ``judging`` entry.

One :class:`TaskHistory` per task instance, deployment and place; :func:`without_duplicates` keeps a task
instance's asset events only when it has no record of that deployment. Nothing here calls the service or checks
access: callers pass the DAG ids the user may read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from airflow_provider.assets import deployment_asset_uri
from airflow_provider.decisions.judging_marker import JUDGING_KEY, rounds_of
from airflow_provider.decisions.record import RECORD_KEY, Kind, entries_of, event_entries, fleet_row_entries
from airflow_provider.plugins.rollouts.metadata import _aware, _chunks, _state_store_model, _stored_json

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider.plugins.rollouts.metadata import EventRecord, FleetTouch

__all__ = [
    "RECORDS_SCANNED",
    "TaskHistory",
    "event_histories",
    "fleet_histories",
    "judged_deployments",
    "judging_markers",
    "task_histories",
    "with_rounds_measured",
    "without_duplicates",
]

RECORDS_SCANNED = 1000
"""Most task records read for one answer (newest first): a window's worth for a connection's figures."""


@dataclass
class TaskHistory:
    """What one task instance did to one deployment, as one place in Airflow's database tells it.

    :param dag_id: the task's DAG.
    :param run_id: its DAG run.
    :param task_id: the task.
    :param map_index: its map index.
    :param deployment_id: the deployment.
    :param source: ``record`` (the task's record), ``fleet`` (a fleet row) or ``asset_event``.
    :param entries: the record entries, oldest first.
    :param updated_at: when that place was last written.
    :param wave: the fleet wave (``fleet`` only).
    :param event: the asset event (``asset_event`` only).
    :param touch: the fleet row (``fleet`` only).
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    deployment_id: str
    source: str
    entries: list[dict[str, Any]]
    updated_at: datetime
    wave: str | None = None
    event: EventRecord | None = None
    touch: FleetTouch | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        """The task instance: ``(dag_id, run_id, task_id, map_index)``."""
        return (self.dag_id, self.run_id, self.task_id, self.map_index)

    @property
    def at(self) -> float:
        """When the task last did something to the deployment (its newest entry, else the last write)."""
        times = [item["at"] for item in self.entries if isinstance(item.get("at"), (int, float))]
        return max(times) if times else self.updated_at.timestamp()

    @property
    def try_number(self) -> int | None:
        """The try of its newest entry."""
        tries = [item.get("try_number") for item in self.entries if isinstance(item.get("try_number"), int)]
        return tries[-1] if tries else None


def task_histories(
    session: Session,
    dag_ids: Collection[str],
    *,
    deployment_id: str | None = None,
    since: datetime | None = None,
    limit: int = RECORDS_SCANNED,
) -> list[TaskHistory]:
    """The tasks' records (written since ``since``), one history per task instance and deployment, newest first.

    :param session: a metadata database session.
    :param dag_ids: the DAGs the user may read.
    :param deployment_id: only this deployment's entries (else every deployment's).
    :param since: only records written since (default: 30 days ago).
    :param limit: most records read.
    """
    model = _state_store_model()
    if model is None or not dag_ids:
        return []
    since = since or datetime.now(timezone.utc) - timedelta(days=30)
    query = select(model.dag_id, model.run_id, model.task_id, model.map_index, model.value, model.updated_at).where(
        model.key == RECORD_KEY, model.updated_at >= since, model.dag_id.in_(list(dag_ids))
    )
    if deployment_id is not None:
        query = query.where(model.value.like(f"%{deployment_id}%"))
    histories: list[TaskHistory] = []
    for dag_id, run_id, task_id, map_index, value, updated_at in session.execute(
        query.order_by(model.updated_at.desc()).limit(limit)
    ):
        by_deployment: dict[str, list[dict[str, Any]]] = {}
        for item in entries_of(_stored_json(value)):
            if isinstance(item.get("deployment_id"), str):
                by_deployment.setdefault(item["deployment_id"], []).append(item)
        for found, entries in by_deployment.items():
            if deployment_id is None or found == deployment_id:
                written = _aware(updated_at) or since
                histories.append(TaskHistory(dag_id, run_id, task_id, map_index, found, "record", entries, written))
    return histories


def fleet_histories(touches: Iterable[FleetTouch]) -> list[TaskHistory]:
    """The fleet rows read as histories (a row never patched is left out; one still ``pending``, queued in a rollout
    that may still patch it, has no entries yet).

    :param touches: rows from :func:`~airflow_provider.plugins.rollouts.metadata.fleet_touches`.
    """
    histories = []
    for touch in touches:
        entries = fleet_row_entries(touch.row, touch.phase)
        deployment_id = touch.row.get("deployment_id")
        if (entries or touch.row.get("outcome") == "pending") and isinstance(deployment_id, str):
            histories.append(
                TaskHistory(
                    touch.dag_id,
                    touch.run_id,
                    touch.task_id,
                    touch.map_index,
                    deployment_id,
                    "fleet",
                    entries,
                    touch.updated_at,
                    wave=touch.wave,
                    touch=touch,
                )
            )
    return histories


def event_histories(events: Iterable[EventRecord]) -> list[TaskHistory]:
    """The provider's asset events emitted by tasks, read as histories (a watcher's are left out: what it saw is
    not what a task did).

    :param events: asset events from :func:`~airflow_provider.plugins.rollouts.metadata.deployment_events`.
    """
    histories = []
    for event in events:
        if not (event.dag_id and event.run_id and event.task_id) or event.payload is None:
            continue
        entries = event_entries(event.payload, event.timestamp.timestamp())
        histories.append(
            TaskHistory(
                event.dag_id,
                event.run_id,
                event.task_id,
                event.map_index,
                event.deployment_id,
                "asset_event",
                entries,
                event.timestamp,
                event=event,
            )
        )
    return histories


def without_duplicates(histories: Iterable[TaskHistory]) -> list[TaskHistory]:
    """``histories`` without the asset events of a task instance whose record (or fleet row) of the same deployment
    is among them: they tell the same rollout.

    :param histories: histories of any sources.
    """
    listed = list(histories)
    recorded = {(item.key, item.deployment_id) for item in listed if item.source != "asset_event"}
    return [item for item in listed if item.source != "asset_event" or (item.key, item.deployment_id) not in recorded]


def judged_deployments(histories: Iterable[TaskHistory]) -> set[str]:
    """The deployments of ``histories`` with a revision still being judged (a ``judging`` entry, newest of its
    revision): those whose judging markers may hold rounds measured in the triggerer.

    :param histories: histories of any sources.
    """
    found = set()
    for item in histories:
        newest = {entry.get("revision_id"): entry.get("kind") for entry in item.entries}
        if item.source != "asset_event" and Kind.JUDGING in newest.values():
            found.add(item.deployment_id)
    return found


def judging_markers(session: Session, deployment_ids: Collection[str]) -> dict[str, Any]:
    """The judging markers of ``deployment_ids`` (by deployment id; a deployment without an Airflow asset, or
    without a marker, is left out).

    :param session: a metadata database session.
    :param deployment_ids: the deployments.
    """
    if not deployment_ids:
        return {}
    try:
        from airflow.models.asset import AssetModel
        from airflow.models.asset_state_store import AssetStateStoreModel
    except ImportError:  # pragma: no cover - Airflow < 3.3
        return {}
    uris: dict[str, str] = {}
    for deployment_id in deployment_ids:
        try:
            uris[deployment_asset_uri(deployment_id)] = deployment_id
        except ValueError:  # not a deployment id: no asset
            continue
    if not uris:
        return {}
    found: dict[str, Any] = {}
    for chunk in _chunks(sorted(uris)):
        rows = session.execute(
            select(AssetModel.uri, AssetStateStoreModel.value)
            .join(AssetStateStoreModel, AssetStateStoreModel.asset_id == AssetModel.id)
            .where(AssetModel.uri.in_(chunk), AssetStateStoreModel.key == JUDGING_KEY)
        )
        found.update((uris[uri], _stored_json(value)) for uri, value in rows if uri in uris)
    return found


def with_rounds_measured(histories: Iterable[TaskHistory], markers: Mapping[str, Any]) -> list[TaskHistory]:
    """``histories`` with the rounds an analysis measured in the triggerer: a history whose newest entry of a
    revision is ``judging`` gets the marker's measurements so far for it, when the marker says they were measured
    for that task instance and are newer than the record's (another task's rounds are never its own).

    :param histories: histories of any sources.
    :param markers: the deployments' judging markers (:func:`judging_markers`).
    """
    found = []
    for item in histories:
        rounds = rounds_of(markers.get(item.deployment_id)) if item.source != "asset_event" else {}
        entries, changed = list(item.entries), False
        for revision_id, (by, analysis) in rounds.items():
            if (by.get("dag_id"), by.get("run_id"), by.get("task_id"), by.get("map_index")) != item.key:
                continue
            index = max((i for i, e in enumerate(entries) if e.get("revision_id") == revision_id), default=None)
            if index is None or entries[index].get("kind") != Kind.JUDGING:
                continue
            recorded = entries[index].get("verdict") or {}
            if int(analysis.get("round") or 0) > int(recorded.get("round") or 0):
                entries[index] = {**entries[index], "verdict": analysis}
                changed = True
        found.append(replace(item, entries=entries) if changed else item)
    return found
