"""What the Rollouts view reads from Airflow's own records (the metadata database of the API server).

- **Asset events** on deployment assets (``deployment-service://deployments/<id>``): the provider's tasks
  emit one when they land a revision (``revision_live``, outcome ``rolled_out`` or ``rolled_back``), with the
  revision ids, the DAG run and task in the event, and watchers emit the changes they see.
- **The fleet's progress** in ``task_state_store`` (Airflow 3.3+): a ``FleetRolloutOperator`` keeps a header
  under :data:`~airflow_provider.tasks.fleet.progress.STATE_KEY` and each wave under ``<key>/wave/<index>``, written
  as it goes (through the Execution API into the ``task_state_store`` table, which this module reads, as
  Airflow's own REST API does). A worker-side store backend (``[workers] state_store_backend``) keeps only
  a reference there: the progress is then shown from XCom once the task ends. Without a store at all, a
  deferred fleet task carries its progress in its trigger's arguments, which are read instead.
- **XCom** of an ended fleet task (the result table and ``fleet_summary``), **human-in-the-loop** approvals
  of the same DAG run, and the task instance itself.

Nothing here calls the service and nothing here checks access: callers pass the DAG ids the user may read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import func, or_, select

from airflow_provider.assets import deployment_asset_uri, deployment_event
from airflow_provider.decisions.fleet_progress import FleetProgress
from airflow_provider.tasks.fleet.abort import ABORT_KEY, TAKEN_KEY
from airflow_provider.tasks.fleet.progress import STATE_KEY

if TYPE_CHECKING:
    from sqlalchemy.orm import Session
    from sqlalchemy.sql.elements import ColumnElement

WAVE_KEY_PREFIX = f"{STATE_KEY}/wave/"
"""Keys of the waves in ``task_state_store``."""
FLEET_LOOKBACK = timedelta(days=7)
"""How far back fleet rollouts count as "the last rollout" of a deployment (their waves' last write)."""
FLEET_WAVES_SCANNED = 200
"""Most wave records read for the deployments list (newest first)."""
EVENTS_SHOWN = 200
"""Most asset events read for one deployment (newest first)."""
SQL_CHUNK = 500
"""Most values in one SQL ``IN`` list."""
STATE_REF = "__airflow_state_ref__"
"""How a worker-side store backend's reference looks in the ``task_state_store`` table."""
UNTOUCHED = frozenset({"pending", "not_patched"})
"""Fleet row outcomes of a deployment the rollout has not patched (yet, or ever)."""
RUNNING_STATES = frozenset(
    {"running", "deferred", "awaiting_input", "queued", "scheduled", "up_for_retry", "up_for_reschedule"}
)
"""Task instance states in which a fleet rollout is still going on."""


def _chunks(items: list[Any], size: int = SQL_CHUNK) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


# ------------------------------------------------------------------------------------ asset events
@dataclass
class EventRecord:
    """One asset event on a deployment's asset.

    :param deployment_id: the deployment.
    :param timestamp: when Airflow recorded it.
    :param dag_id: the DAG of the task that emitted it (``None``: a watcher, or an API call).
    :param run_id: its DAG run.
    :param task_id: its task.
    :param map_index: its map index.
    :param payload: the provider's event (``kind``, ``outcome``, ``revision_id``...), or ``None`` for an
        event someone else emitted on the asset.
    """

    deployment_id: str
    timestamp: datetime
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    map_index: int
    payload: dict[str, Any] | None


def _uris(deployment_ids: Iterable[str]) -> dict[str, str]:
    return {deployment_asset_uri(deployment_id): deployment_id for deployment_id in deployment_ids}


def _dag_filter(column: Any, dag_ids: Collection[str]) -> ColumnElement[bool]:
    """Rows without a DAG (a watcher's events) or of a DAG the user may read."""
    return or_(column.is_(None), column.in_(list(dag_ids)))


def _event_record(event: Any, uri: str, by_uri: dict[str, str]) -> EventRecord:
    return EventRecord(
        deployment_id=by_uri[uri],
        timestamp=_aware(event.timestamp) or datetime.now(timezone.utc),
        dag_id=event.source_dag_id,
        run_id=event.source_run_id,
        task_id=event.source_task_id,
        map_index=event.source_map_index if event.source_map_index is not None else -1,
        payload=deployment_event(event.extra),
    )


def latest_events(session: Session, deployment_ids: Iterable[str], dag_ids: Collection[str]) -> dict[str, EventRecord]:
    """The newest asset event of each deployment (among those of readable DAGs and watchers).

    One query per :data:`SQL_CHUNK` deployments.

    :param session: a metadata database session.
    :param deployment_ids: the deployments (canonical ids).
    :param dag_ids: the DAGs the user may read.
    """
    from airflow.models.asset import AssetEvent, AssetModel

    by_uri = _uris(deployment_ids)
    found: dict[str, EventRecord] = {}
    for chunk in _chunks(list(by_uri)):
        newest = (
            select(func.max(AssetEvent.id))
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri.in_(chunk), _dag_filter(AssetEvent.source_dag_id, dag_ids))
            .group_by(AssetEvent.asset_id)
        )
        rows = session.execute(
            select(AssetEvent, AssetModel.uri)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.id.in_(newest))
        )
        for event, uri in rows:
            record = _event_record(event, uri, by_uri)
            found[record.deployment_id] = record
    return found


def deployment_events(
    session: Session, deployment_id: str, dag_ids: Collection[str], limit: int = EVENTS_SHOWN
) -> list[EventRecord]:
    """The asset events of one deployment, newest first (at most ``limit``).

    :param session: a metadata database session.
    :param deployment_id: the deployment (canonical id).
    :param dag_ids: the DAGs the user may read.
    :param limit: most events returned.
    """
    from airflow.models.asset import AssetEvent, AssetModel

    by_uri = _uris([deployment_id])
    rows = session.execute(
        select(AssetEvent, AssetModel.uri)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetModel.uri.in_(list(by_uri)), _dag_filter(AssetEvent.source_dag_id, dag_ids))
        .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc())
        .limit(limit)
    )
    return [_event_record(event, uri, by_uri) for event, uri in rows]


# ------------------------------------------------------------------------------ fleet progress rows
@dataclass
class FleetTouch:
    """One deployment's row in a fleet rollout's progress.

    :param dag_id: the DAG of the fleet task.
    :param run_id: its DAG run.
    :param task_id: the fleet task.
    :param map_index: its map index.
    :param wave: the wave the deployment is in.
    :param row: the row (:class:`~airflow_provider.decisions.fleet_progress.FleetRow` as JSON).
    :param updated_at: when the wave was last written.
    :param phase: the wave's phase (``analysing``: the rows that landed are being judged).
    :param question_path: where Airflow asks about the wave's inconclusive analysis, while its question is open
        (``on_inconclusive="ask"``), relative to Airflow's base URL.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    wave: str
    row: dict[str, Any]
    updated_at: datetime
    phase: str | None = None
    question_path: str | None = None

    @property
    def at(self) -> float:
        """When the rollout touched the deployment (its outcome, else its patch, else the wave's write)."""
        for name in ("finished_at", "started_at"):
            value = self.row.get(name)
            if isinstance(value, (int, float)):
                return float(value)
        return self.updated_at.timestamp()


def _state_store_model() -> Any:
    try:
        from airflow.models.task_state_store import TaskStateStoreModel
    except ImportError:  # Airflow before 3.3: no task state store
        return None
    return TaskStateStoreModel


def _stored_json(value: str | None) -> Any:
    """A ``task_state_store`` value as JSON, or ``None`` (unreadable, or a worker-side backend's reference)."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        return None
    if isinstance(decoded, dict) and STATE_REF in decoded:
        return None
    return decoded


def fleet_touches(
    session: Session,
    dag_ids: Collection[str],
    *,
    deployment_id: str | None = None,
    since: datetime | None = None,
    limit: int = FLEET_WAVES_SCANNED,
) -> list[FleetTouch]:
    """Rows of fleet rollouts recorded in ``task_state_store`` (waves written since ``since``), newest first.

    :param session: a metadata database session.
    :param dag_ids: the DAGs the user may read.
    :param deployment_id: only waves naming this deployment (else every deployment's rows).
    :param since: only waves written since (default: :data:`FLEET_LOOKBACK` ago).
    :param limit: most wave records read.
    """
    model = _state_store_model()
    if model is None or not dag_ids:
        return []
    since = since or datetime.now(timezone.utc) - FLEET_LOOKBACK
    query = select(
        model.dag_id, model.run_id, model.task_id, model.map_index, model.key, model.value, model.updated_at
    ).where(model.key.like(f"{WAVE_KEY_PREFIX}%"), model.updated_at >= since, model.dag_id.in_(list(dag_ids)))
    if deployment_id is not None:
        query = query.where(model.value.like(f"%{deployment_id}%"))
    touches: list[FleetTouch] = []
    for dag_id, run_id, task_id, map_index, key, value, updated_at in session.execute(
        query.order_by(model.updated_at.desc()).limit(limit)
    ):
        wave = _stored_json(value)
        if not key.startswith(WAVE_KEY_PREFIX) or not isinstance(wave, dict):
            continue
        question = wave.get("question")
        path = question.get("path") if isinstance(question, dict) and "answer" not in question else None
        for row in wave.get("rows") or []:
            if not isinstance(row, dict) or (deployment_id is not None and row.get("deployment_id") != deployment_id):
                continue
            touches.append(
                FleetTouch(
                    dag_id,
                    run_id,
                    task_id,
                    map_index,
                    str(wave.get("name", "")),
                    row,
                    _aware(updated_at) or since,
                    phase=str(wave.get("phase") or "") or None,
                    question_path=path if isinstance(path, str) else None,
                )
            )
    return touches


def latest_touches(touches: Iterable[FleetTouch]) -> dict[str, FleetTouch]:
    """The newest fleet row of each deployment that a fleet rollout patched (rows of deployments it has not
    patched, or never will, do not count).

    :param touches: rows from :func:`fleet_touches`.
    """
    newest: dict[str, FleetTouch] = {}
    for touch in touches:
        if touch.row.get("outcome") in UNTOUCHED:
            continue
        deployment_id = str(touch.row.get("deployment_id"))
        if deployment_id not in newest or touch.at > newest[deployment_id].at:
            newest[deployment_id] = touch
    return newest


class TaskNamed(Protocol):
    """Something that names a task instance (a fleet row, a task's history)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int


def running_task_keys(session: Session, touches: Iterable[TaskNamed]) -> set[tuple[str, str, str, int]]:
    """Which of the touches' tasks are still running (``(dag_id, run_id, task_id, map_index)``).

    :param session: a metadata database session.
    :param touches: rows from :func:`fleet_touches`, or anything naming a task instance.
    """
    from airflow.models.taskinstance import TaskInstance

    keys = {(t.dag_id, t.run_id, t.task_id, t.map_index) for t in touches}
    running: set[tuple[str, str, str, int]] = set()
    for chunk in _chunks(sorted(keys)):
        rows = session.execute(
            select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index).where(
                TaskInstance.state.in_(list(RUNNING_STATES)),
                or_(
                    *(
                        (TaskInstance.dag_id == d)
                        & (TaskInstance.run_id == r)
                        & (TaskInstance.task_id == t)
                        & (TaskInstance.map_index == m)
                        for d, r, t, m in chunk
                    )
                ),
            )
        )
        running.update((d, r, t, m) for d, r, t, m in rows)
    return running


# ------------------------------------------------------------------------------ one fleet task
@dataclass
class FleetTaskRecord:
    """Everything Airflow knows about one fleet task instance.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index.
    :param state: the task instance's state.
    :param operator: its operator's name.
    :param try_number: its try.
    :param start_date: when it started.
    :param end_date: when it ended.
    :param progress: the fleet's progress, when recorded.
    :param source: where the progress came from (``task_state_store``, ``trigger``, ``xcom``), or ``None``.
    :param stored_elsewhere: the task state store holds only references (a worker-side backend).
    :param updated_at: the progress's last write.
    :param table: the result table from XCom (once the task ended).
    :param summary: ``fleet_summary`` from XCom.
    :param resume_at: when a pause between waves ends (the task waits in the triggerer).
    :param approvals: human-in-the-loop requests of the same DAG run.
    :param conn_id: the connection the task used (its rendered ``deployment_service_conn_id``), if recorded.
    :param abort: the abort request the view recorded and what the task took it to mean, by key, if any.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str | None
    operator: str | None
    try_number: int
    start_date: datetime | None
    end_date: datetime | None
    progress: FleetProgress | None = None
    source: str | None = None
    stored_elsewhere: bool = False
    updated_at: datetime | None = None
    table: list[dict[str, Any]] | None = None
    summary: dict[str, Any] | None = None
    resume_at: float | None = None
    approvals: list[dict[str, Any]] = field(default_factory=list)
    conn_id: str | None = None
    abort: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether the task is still going on (the page keeps polling)."""
        return self.state in RUNNING_STATES or self.state is None


def fleet_task(
    session: Session, dag_id: str, run_id: str, task_id: str, map_index: int, *, with_approvals: bool
) -> FleetTaskRecord | None:
    """The fleet task instance with its progress, or ``None`` when there is no such task instance.

    :param session: a metadata database session.
    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index.
    :param with_approvals: also read the DAG run's human-in-the-loop requests.
    """
    from airflow.models.taskinstance import TaskInstance

    ti = session.scalar(
        select(TaskInstance).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    )
    if ti is None:
        return None
    record = FleetTaskRecord(
        dag_id,
        run_id,
        task_id,
        map_index,
        state=str(ti.state.value if hasattr(ti.state, "value") else ti.state) if ti.state is not None else None,
        operator=ti.custom_operator_name or ti.operator,
        try_number=ti.try_number or 0,
        start_date=_aware(ti.start_date),
        end_date=_aware(ti.end_date),
    )
    _read_store(session, record)
    trigger_kwargs = _trigger_kwargs(session, ti.trigger_id) if record.state == "deferred" else {}
    if record.progress is None and isinstance(trigger_kwargs.get("carry"), dict):
        carry = trigger_kwargs["carry"]
        record.progress = FleetProgress.from_json(carry, carry.get("wave_records") or [])
        record.source = "trigger"
    resume_at = trigger_kwargs.get("resume_at")
    if isinstance(resume_at, (int, float)) and resume_at > time.time():
        record.resume_at = float(resume_at)
    _read_xcom(session, record)
    record.conn_id = _rendered_conn_id(session, record)
    if with_approvals:
        record.approvals = approvals(session, dag_id, run_id)
    return record


def stored_progress(
    session: Session, dag_id: str, run_id: str, task_id: str, map_index: int, *, lock: bool = False
) -> FleetProgress | None:
    """The fleet task's progress as its ``task_state_store`` holds it (``None``: none there).

    :param session: a metadata database session.
    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the map index.
    :param lock: lock the task's ``task_state_store`` rows for the rest of the transaction (``SELECT ... FOR
        UPDATE``, where the database has it): the task's next save of its progress waits until the transaction
        ends, so what is decided from the progress read here and written in the same transaction (an abort request
        naming the PATCH requests in flight) is what the task finds next.
    """
    record = FleetTaskRecord(dag_id, run_id, task_id, map_index, None, None, 0, None, None)
    _read_store(session, record, lock=lock)
    return record.progress if record.source == "task_state_store" else None


def _read_store(session: Session, record: FleetTaskRecord, *, lock: bool = False) -> None:
    model = _state_store_model()
    if model is None:
        return
    query = select(model.key, model.value, model.updated_at).where(
        model.dag_id == record.dag_id,
        model.run_id == record.run_id,
        model.task_id == record.task_id,
        model.map_index == record.map_index,
        or_(model.key.in_((STATE_KEY, ABORT_KEY, TAKEN_KEY)), model.key.like(f"{WAVE_KEY_PREFIX}%")),
    )
    rows = session.execute(query.with_for_update() if lock else query).all()
    if not rows:
        return
    values = {key: _stored_json(value) for key, value, _ in rows}
    record.abort = {key: values.pop(key) for key in (ABORT_KEY, TAKEN_KEY) if isinstance(values.get(key), dict)}
    values = {key: value for key, value in values.items() if key not in (ABORT_KEY, TAKEN_KEY)}
    record.updated_at = max(_aware(updated) or datetime.min.replace(tzinfo=timezone.utc) for _, _, updated in rows)
    header = values.get(STATE_KEY)
    if not isinstance(header, dict):
        record.stored_elsewhere = any(value is None for value in values.values())
        return
    try:
        waves = [values.get(f"{WAVE_KEY_PREFIX}{index}") for index in range(int(header["waves"]))]
        if all(isinstance(wave, dict) for wave in waves):
            record.progress = FleetProgress.from_json(header, [wave for wave in waves if isinstance(wave, dict)])
            record.source = "task_state_store"
    except (KeyError, TypeError, ValueError):  # a record of another version: shown from XCom when it ends
        return


def _trigger_kwargs(session: Session, trigger_id: int | None) -> dict[str, Any]:
    """The fleet wave trigger's ``resume_at`` and ``carry`` (nothing else is read: no secret lives there, but
    nothing else is needed either)."""
    from airflow.models.trigger import Trigger

    if trigger_id is None:
        return {}
    trigger = session.get(Trigger, trigger_id)
    if trigger is None or not trigger.classpath.endswith(".FleetWaveTrigger"):
        return {}
    try:
        kwargs = trigger.kwargs
    except Exception:  # undecryptable (another Fernet key): the page does without
        return {}
    return {name: kwargs.get(name) for name in ("resume_at", "carry")}


def _read_xcom(session: Session, record: FleetTaskRecord) -> None:
    from airflow.models.xcom import XComModel

    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == record.dag_id,
            XComModel.run_id == record.run_id,
            XComModel.task_id == record.task_id,
            XComModel.map_index == record.map_index,
            XComModel.key.in_(["return_value", "fleet_summary"]),
        )
    ).all()
    for row in rows:
        value = XComModel.deserialize_value(row)
        if row.key == "fleet_summary" and isinstance(value, dict):
            record.summary = value
        elif row.key == "return_value" and isinstance(value, list) and all(isinstance(item, dict) for item in value):
            record.table = value
    if record.progress is None and record.table is not None:
        record.source = "xcom"


def _rendered_conn_id(session: Session, record: FleetTaskRecord) -> str | None:
    """The task's rendered ``deployment_service_conn_id`` (Airflow keeps every templated field as rendered)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered

    fields = session.scalar(
        select(Rendered.rendered_fields).where(
            Rendered.dag_id == record.dag_id,
            Rendered.run_id == record.run_id,
            Rendered.task_id == record.task_id,
            Rendered.map_index == record.map_index,
        )
    )
    value = fields.get("deployment_service_conn_id") if isinstance(fields, dict) else None
    return value if isinstance(value, str) and value else None


def approvals(session: Session, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The human-in-the-loop requests of a DAG run (an ``ApprovalOperator`` between two waves), oldest first.

    :param session: a metadata database session.
    :param dag_id: the DAG.
    :param run_id: the DAG run.
    """
    try:
        from airflow.models.hitl import HITLDetail
    except ImportError:  # Airflow before 3.1
        return []
    from airflow.models.taskinstance import TaskInstance

    rows = session.execute(
        select(HITLDetail, TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state)
        .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        .order_by(HITLDetail.created_at)
    ).all()
    found = []
    for detail, task_id, map_index, state in rows:
        responder = detail.responded_by if isinstance(detail.responded_by, dict) else {}
        found.append(
            {
                "task_id": task_id,
                "map_index": map_index,
                "state": str(state.value if hasattr(state, "value") else state) if state is not None else None,
                "subject": detail.subject,
                "options": list(detail.options or []),
                "chosen_options": list(detail.chosen_options or []) if detail.chosen_options is not None else None,
                "responded_by": responder.get("name") or responder.get("id"),
                "responded_at": _iso(detail.responded_at),
                "created_at": _iso(detail.created_at),
            }
        )
    return found


def _iso(value: datetime | None) -> str | None:
    value = _aware(value)
    return value.isoformat() if value is not None else None


__all__ = [
    "EVENTS_SHOWN",
    "FLEET_LOOKBACK",
    "FLEET_WAVES_SCANNED",
    "RUNNING_STATES",
    "SQL_CHUNK",
    "UNTOUCHED",
    "WAVE_KEY_PREFIX",
    "EventRecord",
    "FleetTaskRecord",
    "FleetTouch",
    "TaskNamed",
    "deployment_events",
    "fleet_task",
    "fleet_touches",
    "latest_events",
    "latest_touches",
    "running_task_keys",
]
