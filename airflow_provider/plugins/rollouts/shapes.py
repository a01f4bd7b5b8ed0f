"""The JSON the Rollouts view's pages get: chosen fields only, so no secret ever reaches a page.

A deployment as the service answers may echo secret values (``secrets``), and its ``resource_spec`` may
hold environment values of sidecars: none of that is read here. Every value below is an id, a name, a
status, a revision setting (image, git ref, commit, tarball path, graph config path), a URL the service
publishes, a time, or what Airflow recorded about a rollout (asset events carry no secrets; fleet rows'
messages are scrubbed of the task's secret values before they are stored).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider.decisions.fleet_progress import (
    ANALYSIS_FAILED_VERDICTS,
    BUDGET_OUTCOMES,
    CANARY,
    FAILURE_OUTCOMES,
    REASON_UNKNOWN_OUTCOMES,
    FleetProgress,
    FleetRow,
    Outcome,
    WaveRecord,
)
from airflow_provider.models import Deployment, Revision, SourceRevisionConfig
from airflow_provider.plugins.rollouts.charts import analysis_charts
from airflow_provider.plugins.rollouts.metadata import EventRecord, FleetTaskRecord, FleetTouch
from airflow_provider.plugins.rollouts.paths import (
    airflow_root_path,
    dag_run_path,
    task_instance_path,
    task_instance_tab_path,
)

ASKING = "asking"
"""How the view shows a fleet row whose inconclusive analysis waits for a person's answer."""
ANALYSING = "analysing"
"""How the view shows a fleet row that landed and waits for its wave's analysis (no verdict yet)."""
BUILD_FIELDS = ("image_uri", "repo_ref", "repo_commit_sha", "source_tarball_path", "graph_config_path")
"""The revision settings shown as a revision's build."""


def _iso(value: datetime | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, tz=timezone.utc)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()


def build_of(config: SourceRevisionConfig | Mapping[str, Any] | None) -> dict[str, str]:
    """The build a revision config names (its non-empty :data:`BUILD_FIELDS`).

    :param config: a revision config (model, or the JSON an asset event carries).
    """
    if config is None:
        return {}
    values = config.model_dump(mode="json") if isinstance(config, SourceRevisionConfig) else dict(config)
    return {name: str(values[name]) for name in BUILD_FIELDS if values.get(name)}


def _json_safe(value: Any) -> Any:
    """``value`` when it is plain JSON (an analysis verdict from an event or a row), else ``None``."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return None


# ------------------------------------------------------------------------------------ rollouts
def event_rollout(event: EventRecord) -> dict[str, Any]:
    """A rollout as an asset event tells it.

    :param event: the event.
    """
    payload = event.payload or {}
    rollout: dict[str, Any] = {
        "source": "asset_event",
        "kind": payload.get("kind") or "asset_event",
        "outcome": payload.get("outcome") or payload.get("kind") or "asset event",
        "origin": payload.get("origin") or ("task" if event.dag_id else "outside a task"),
        "at": _iso(event.timestamp),
        "revision_id": payload.get("revision_id") or payload.get("failed_revision_id"),
        "previous_revision_id": payload.get("previous_revision_id"),
        "build": build_of(payload.get("source_revision_config")),
        "status": payload.get("failed_revision_status") or payload.get("status"),
        "analysis": _json_safe(payload.get("analysis")),
        "running": False,
    }
    return {**rollout, **_task_fields(event.dag_id, event.run_id, event.task_id, event.map_index, tab=False)}


def touch_rollout(touch: FleetTouch, running: bool) -> dict[str, Any]:
    """A rollout as a fleet task's progress tells it.

    :param touch: the deployment's row in the fleet's progress.
    :param running: whether the fleet task is still running.
    """
    row = touch.row
    rollout: dict[str, Any] = {
        "source": "fleet",
        "kind": "fleet",
        "outcome": row.get("outcome"),
        "origin": "task",
        "at": _iso(touch.at),
        "wave": touch.wave,
        "revision_id": row.get("to_revision"),
        "previous_revision_id": row.get("from_revision"),
        "rollback_revision_id": row.get("rollback_revision"),
        "message": row.get("message") or "",
        "analysis": row_analysis(row.get("analysis")),
        "running": running,
    }
    analysis = row.get("analysis")
    if (
        touch.phase == "analysing"
        and row.get("outcome") == Outcome.LANDED
        and isinstance(analysis, Mapping)
        and analysis.get("verdict") == "inconclusive"
        and "answer" not in analysis
    ):  # waiting for a person (on_inconclusive="ask"): where Airflow asks
        rollout["outcome"] = ASKING
        if running and touch.question_path:
            rollout["question_path"] = airflow_root_path() + touch.question_path.lstrip("/")
    return {**rollout, **_task_fields(touch.dag_id, touch.run_id, touch.task_id, touch.map_index, tab=True)}


def _task_fields(
    dag_id: str | None, run_id: str | None, task_id: str | None, map_index: int, *, tab: bool
) -> dict[str, Any]:
    fields: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    if dag_id and run_id and task_id:
        fields["ti_path"] = task_instance_path(dag_id, run_id, task_id, map_index)
        fields["run_path"] = dag_run_path(dag_id, run_id)
        if tab:
            fields["tab_path"] = task_instance_tab_path(dag_id, run_id, task_id, map_index)
    return fields


# ------------------------------------------------------------------------------------ deployments
def deployment_summary(deployment: Deployment, serving: dict[str, str] | None = None) -> dict[str, Any]:
    """A deployment as the list shows it.

    :param deployment: the deployment as the service answered.
    :param serving: the active revision's build when known from elsewhere (a revision, an event).
    """
    url = deployment.source_config.custom_url
    latest_build = build_of(deployment.source_revision_config)
    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    differ = latest is not None and active != latest
    return {
        "id": deployment.id,
        "name": deployment.name,
        "status": deployment.status.value,
        "source": getattr(deployment.source, "value", deployment.source),
        "deployment_type": deployment.source_config.deployment_type,
        "image_version": deployment.image_version,
        "url": url if url and url.startswith(("https://", "http://")) else None,
        "active_revision_id": deployment.active_revision_id,
        "latest_revision_id": deployment.latest_revision_id,
        "revisions_differ": differ,
        "serving": latest_build if not differ else (serving or None),
        "latest_build": latest_build,
        "created_at": _iso(deployment.created_at),
        "updated_at": _iso(deployment.updated_at),
    }


def serving_from_events(deployment: Deployment, rollouts: Iterable[dict[str, Any]]) -> dict[str, str] | None:
    """The active revision's build as an asset event recorded it, if one did.

    :param deployment: the deployment.
    :param rollouts: its rollouts (from :func:`event_rollout`).
    """
    for rollout in rollouts:
        ours = rollout.get("source") == "asset_event" and rollout.get("revision_id") == deployment.active_revision_id
        if ours and rollout.get("build"):
            return dict(rollout["build"])
    return None


def revision_entry(
    revision: Revision | None,
    revision_id: str,
    deployment: Deployment,
    marks: list[dict[str, Any]],
) -> dict[str, Any]:
    """One revision of the history, with the rollouts that rolled it out or back.

    :param revision: the revision from the revision endpoint (``None``: known only from Airflow's records).
    :param revision_id: its id.
    :param deployment: the deployment.
    :param marks: rollouts that name it.
    """
    build = build_of(revision.source_revision_config) if revision is not None else {}
    if not build:
        build = next((dict(mark["build"]) for mark in marks if mark.get("build")), {})
    return {
        "id": revision_id,
        "status": revision.status.value if revision is not None else None,
        "created_at": _iso(revision.created_at) if revision is not None else None,
        "updated_at": _iso(revision.updated_at) if revision is not None else None,
        "build": build,
        "active": revision_id == deployment.active_revision_id,
        "latest": revision_id == deployment.latest_revision_id,
        "rollouts": marks,
    }


# ------------------------------------------------------------------------------------ fleet
def _wave_state(progress: FleetProgress, index: int, wave: WaveRecord, resume_at: float | None) -> str:
    if wave.phase == "planned":
        if progress.stopped and wave.rows and all(row.outcome == "not_patched" for row in wave.rows):
            return "not started: the rollout stopped"
        if progress.current() == index and progress.paused_before == index and resume_at is not None:
            return "paused"
        return "pending"
    if wave.phase == "done" and wave.rows and all(row.outcome == "not_patched" for row in wave.rows):
        return "not started: the rollout stopped"
    return {
        "patched": "rolling out",
        "watched": "verifying",
        "analysing": "analysing",
        "rolling_back": "rolling back",
        "done": "done",
    }.get(wave.phase, wave.phase)


def shown_outcome(row: FleetRow, phase: str) -> str:
    """A fleet row's outcome as the view shows it: ``analysing`` for a row that landed while its wave's analysis
    is under way and has no verdict yet (never ``landed`` before its verdict); ``asking`` for one whose analysis
    was inconclusive and that waits for a person's answer (``on_inconclusive="ask"``).

    :param row: the row.
    :param phase: its wave's phase.
    """
    if phase == "analysing" and row.outcome == Outcome.LANDED and row.analysis is None:
        return ANALYSING
    if (
        phase == "analysing"
        and row.outcome == Outcome.LANDED
        and row.analysis is not None
        and row.analysis.get("verdict") == "inconclusive"
        and "answer" not in row.analysis
    ):
        return ASKING
    return row.outcome


def _row(row: FleetRow | Mapping[str, Any], phase: str = "") -> dict[str, Any]:
    values = row.to_json() if isinstance(row, FleetRow) else dict(row)
    seconds = values.get("seconds")
    if seconds is None and isinstance(row, FleetRow):
        seconds = row.seconds
    return {
        "name": values.get("name"),
        "deployment_id": values.get("deployment_id"),
        "outcome": shown_outcome(row, phase) if isinstance(row, FleetRow) else values.get("outcome"),
        "from_revision": values.get("from_revision"),
        "to_revision": values.get("to_revision"),
        "rollback_revision": values.get("rollback_revision"),
        "seconds": seconds,
        "message": values.get("message") or "",
        "started_at": _iso(values.get("started_at")),
        "finished_at": _iso(values.get("finished_at")),
        "analysis": row_analysis(values.get("analysis")),
    }


ROW_MEASUREMENTS_SHOWN = 10
"""Measurements the fleet tab shows per row (the latest): each as one line."""


def row_analysis(value: Any) -> dict[str, Any] | None:
    """The analysis column of a fleet row: ``verdict``, ``failing_check``, ``reason``, and when the row keeps
    its measurements (the progress does; the result table does not) the latest
    :data:`ROW_MEASUREMENTS_SHOWN` as one line each (``round 2 · tracing error_rate · 0.21 (< 0.05): failed``)
    and ``measurements_total``, and ``charts``: each check's measurements over the rounds, with its threshold and
    each round's verdict (:func:`~airflow_provider.plugins.rollouts.charts.analysis_charts`). ``None`` when the
    row was not analysed.

    :param value: the row's ``analysis`` (an ``AnalysisResult`` from the progress, or the table's summary).
    """
    if not isinstance(value, Mapping):
        return None
    shown: dict[str, Any] = {
        "verdict": _json_safe(value.get("verdict")),
        "failing_check": _json_safe(value.get("failing_check")),
        "reason": _json_safe(value.get("reason")),
    }
    answer = value.get("answer")
    if isinstance(answer, Mapping):  # an inconclusive verdict a person answered (on_inconclusive="ask")
        shown["answer"] = {name: _json_safe(answer.get(name)) for name in ("choice", "by", "at", "timed_out")}
    if isinstance(value.get("round"), int):  # an analysis under way: the rounds measured so far
        shown["round"] = value["round"]
    measurements = value.get("measurements")
    if isinstance(measurements, list):
        total = value.get("measurements_total")  # a record entry keeps the latest and counts them all
        if not isinstance(total, int) or isinstance(total, bool):
            total = len(measurements) + int(value.get("measurements_left_out") or 0)
        shown["measurements"] = [_measurement_line(item) for item in measurements[-ROW_MEASUREMENTS_SHOWN:]]
        shown["measurements_total"] = total
        shown["charts"] = analysis_charts(value)
    return shown


def _measurement_line(item: Any) -> str:
    if not isinstance(item, Mapping):
        return str(_json_safe(item))
    value = item.get("value")
    shown = "no value" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"round {item.get('round')} · {item.get('check')} · {shown} ({item.get('condition')}): {item.get('verdict')}"


def _waves_from_table(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order: dict[str, list[dict[str, Any]]] = {}
    for row in table:
        order.setdefault(str(row.get("wave") or ""), []).append(row)
    waves = []
    for index, (name, rows) in enumerate(order.items()):
        stopped = all(row.get("outcome") == "not_patched" for row in rows)
        waves.append(
            {
                "index": index,
                "name": name,
                "phase": "done",
                "state": "not started: the rollout stopped" if stopped else "done",
                "counts": dict(Counter(str(row.get("outcome")) for row in rows)),
                "rows": [_row(row) for row in rows],
            }
        )
    return waves


def _question(wave: WaveRecord, index: int) -> dict[str, Any] | None:
    """A wave's question about its inconclusive analysis as the fleet tab shows it: its number, when it was asked,
    the deployments asked about, the link to Airflow's "Required actions" page, and the answer once given."""
    question = wave.question
    if not isinstance(question, Mapping):
        return None
    answer = question.get("answer")
    return {
        "wave": wave.name,
        "index": index,
        "number": _json_safe(question.get("number")),
        "asked_at": _iso(asked) if isinstance(asked := question.get("asked_at"), (int, float)) else None,
        "deployments": [
            {name: _json_safe(item.get(name)) for name in ("name", "deployment_id", "revision_id", "reason")}
            for item in question.get("deployments") or []
            if isinstance(item, Mapping)
        ],
        "question_path": airflow_root_path() + str(question.get("path") or "").lstrip("/"),
        "answer": (
            {name: _json_safe(answer.get(name)) for name in ("choice", "by", "at", "timed_out")}
            if isinstance(answer, Mapping)
            else None
        ),
    }


def fleet_view(record: FleetTaskRecord) -> dict[str, Any]:
    """The fleet tab's JSON for one task instance.

    :param record: what Airflow knows about the task.
    """
    task = {
        "dag_id": record.dag_id,
        "run_id": record.run_id,
        "task_id": record.task_id,
        "map_index": record.map_index,
        "state": record.state,
        "operator": record.operator,
        "try_number": record.try_number,
        "start_date": _iso(record.start_date),
        "end_date": _iso(record.end_date),
        "running": record.running,
        "ti_path": task_instance_path(record.dag_id, record.run_id, record.task_id, record.map_index),
        "run_path": dag_run_path(record.dag_id, record.run_id),
    }
    view: dict[str, Any] = {
        "task": task,
        "is_fleet": (
            record.progress is not None or record.summary is not None or record.operator == "FleetRolloutOperator"
        ),
        "source": record.source,
        "stored_elsewhere": record.stored_elsewhere,
        "updated_at": _iso(record.updated_at),
        "stopped": (record.progress.stopped if record.progress else (record.summary or {}).get("stopped")) or "",
        "resume_at": _iso(record.resume_at),
        "approvals": record.approvals,
        "conn_id": record.conn_id,
        "waves": [],
        "counts": {},
        "budget": None,
        "current_wave": None,
        "canary": None,
        "analysis": None,
        "question": None,
    }
    progress = record.progress
    if progress is not None:
        view["waves"] = [
            {
                "index": index,
                "name": wave.name,
                "phase": wave.phase,
                "state": _wave_state(progress, index, wave, record.resume_at),
                "counts": dict(Counter(shown_outcome(row, wave.phase) for row in wave.rows)),
                "rows": [_row(row, wave.phase) for row in wave.rows],
                "question": _question(wave, index),
            }
            for index, wave in enumerate(progress.waves)
        ]
        asked = [wave["question"] for wave in view["waves"] if wave["question"] and wave["question"]["answer"] is None]
        if asked and record.running:  # the open question, with the link where it is answered
            view["question"] = asked[-1]
        view["counts"] = dict(Counter(shown_outcome(row, wave.phase) for wave in progress.waves for row in wave.rows))
        view["current_wave"] = progress.current()
        view["budget"] = {
            "allowed_failures": progress.allowed_failures,
            "failures": len(progress.failures),
            "reason_unknown": len(progress.reason_unknown),
            "exceeded": progress.budget_exceeded,
        }
        canary = next((wave for wave in progress.waves if wave.name == CANARY), None)
        if canary is not None:
            view["canary"] = {"failed": progress.canary_failed, "deployments": [row.name for row in canary.rows]}
        view["paused_before"] = progress.paused_before
        verdicts = progress.analysis_verdicts()
        if verdicts:
            view["analysis"] = {"failures": len(progress.analysis_failures), "verdicts": verdicts}
            _dry_run(view["analysis"], [(row.name, row.analysis) for row in progress.rows])
    elif record.table is not None:
        view["waves"] = _waves_from_table(record.table)
        view["counts"] = dict(Counter(str(row.get("outcome")) for row in record.table))
        failures = sum(row.get("outcome") in FAILURE_OUTCOMES for row in record.table)
        unknown = sum(row.get("outcome") in REASON_UNKNOWN_OUTCOMES for row in record.table)
        view["budget"] = {
            "allowed_failures": None,
            "failures": failures,
            "reason_unknown": unknown,
            "exceeded": bool(view["stopped"]),
        }
        verdicts = Counter(
            str(row["analysis"].get("verdict")) for row in record.table if isinstance(row.get("analysis"), Mapping)
        )
        if verdicts:
            analysed = [(str(row.get("name")), row.get("analysis")) for row in record.table]
            failed = sum(
                isinstance(shown, Mapping)
                and shown.get("verdict") in ANALYSIS_FAILED_VERDICTS
                and not shown.get("would_have")
                for _name, shown in analysed
            )
            view["analysis"] = {"failures": failed, "verdicts": dict(verdicts)}
            _dry_run(view["analysis"], analysed)
        canary_rows = [row for row in record.table if row.get("wave") == CANARY]
        if canary_rows:
            view["canary"] = {
                "failed": any(row.get("outcome") in BUDGET_OUTCOMES for row in canary_rows),
                "deployments": [row.get("name") for row in canary_rows],
            }
    return view


__all__ = [
    "ANALYSING",
    "ASKING",
    "BUILD_FIELDS",
    "ROW_MEASUREMENTS_SHOWN",
    "build_of",
    "deployment_summary",
    "event_rollout",
    "fleet_view",
    "revision_entry",
    "row_analysis",
    "shown_outcome",
    "touch_rollout",
]


def _dry_run(shown: dict[str, Any], analysed: list[tuple[str, Any]]) -> None:
    """Add ``would_have`` (``{name: "would have rolled back"}``) to the fleet view's analysis when a dry run's gate
    would have acted on some deployments (they landed: not failures)."""
    would_have = {
        name: result["would_have"]
        for name, result in analysed
        if isinstance(result, Mapping) and result.get("would_have")
    }
    if would_have:
        shown["would_have"] = would_have
