"""Who made each revision, as the Rollouts view shows it: each task instance's history of a deployment
(:mod:`~airflow_provider.plugins.rollouts.history`) as a rollout, and each revision marked with what the task
instances that touched it did to it (``role``, and a ``label`` that reads the right way round: the healthy revision a
rollback returned to is "rolled back to", the rejected one "rejected (analysis failed)", a revision being judged
"analysing", never "landed" before its verdict).

Outcomes, revisions, times and the DAG run are shown with read access to the DAG; messages and an analysis's
verdict and measurements only with the fleet tab's access (the DAG's task instances and XComs): ``detailed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider.decisions.record import Kind
from airflow_provider.plugins.rollouts.history import TaskHistory
from airflow_provider.plugins.rollouts.paths import (
    airflow_root_path,
    dag_run_path,
    task_instance_path,
    task_instance_tab_path,
)
from airflow_provider.plugins.rollouts.shapes import event_rollout, row_analysis, touch_rollout

__all__ = ["ROLES", "history_rollout", "newest_rollout", "requested_text", "revision_marks"]

ROLES = {
    "rolled_out": "rolled out",
    "judging": "judging",
    "analysing": "analysing",
    "landed": "landed",
    "passed": "passed analysis",
    "rejected": "rejected",
    "timed_out": "timed out",
    "failed": "failed",
    "rolled_back_from": "rolled back from",
    "rolled_back_with_wave": "rolled back with its wave",
    "rolling_back_to": "rolling back to",
    "rolled_back_to": "rolled back to",
    "rollback_revision": "rollback revision",
    "asking": "waiting for a person (analysis inconclusive)",
}
"""Every role a revision can have in a task's history, and its label (a rejection's says what rejected it)."""
_STRENGTH = {
    "rolled_out": 1,
    "judging": 2,
    "analysing": 2,
    "asking": 2,
    "rolling_back_to": 2,
    "landed": 3,
    "passed": 3,
    "rolled_back_from": 3.5,
    "rejected": 4,
    "timed_out": 4,
    "failed": 4,
    "rolled_back_with_wave": 5,
    "rolled_back_to": 5,
    "rollback_revision": 5,
}
"""Which role of a revision a task's later entries may replace: a stronger one, or one as strong (the later)."""
_STEP_LABELS = {
    "verify": "rejected (verify failed)",
    "analysis": "rejected (analysis failed)",
    "bake": "rejected (left service during the bake)",
    "unjudged": "rejected (could not be judged)",
    "guard": "regressed after landing (rolled back by its guard)",
}
_SOURCE_ORDER = {"record": 0, "fleet": 1, "asset_event": 2}
"""Which place tells a task instance's rollout first (the others add nothing to its marks)."""
_OUTCOMES = {
    Kind.ROLLED_OUT: "rolled_out",
    Kind.LANDED: "landed",
    Kind.REJECTED: "rejected",
    Kind.TIMED_OUT: "timed_out",
    Kind.FAILED: "failed",
    Kind.PASSED: "passed",
    Kind.ROLLING_BACK: "rolling_back",
    Kind.ROLLED_BACK: "rolled_back",
    Kind.ASKING: "asking",
}


# ------------------------------------------------------------------------------------ roles of revisions
def _judging_role(item: Mapping[str, Any]) -> str:
    return "analysing" if "analysis" in (item.get("steps") or []) else "judging"


def _rejected_label(item: Mapping[str, Any]) -> str:
    verdict = item.get("verdict")
    if item.get("step") == "analysis" and isinstance(verdict, Mapping) and verdict.get("verdict") == "inconclusive":
        return "rejected (analysis inconclusive)"
    return _STEP_LABELS.get(str(item.get("step")), "rejected")


def _roles_of_entry(item: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(revision, role, label)`` for each revision ``item`` says something of."""
    kind, revision = item.get("kind"), item.get("revision_id")
    if kind in (Kind.ROLLING_BACK, Kind.ROLLED_BACK):
        done = kind == Kind.ROLLED_BACK
        to, source = item.get("rolled_back_to"), item.get("rolled_back_from")
        found = []
        if to:
            found.append((to, "rolled_back_to" if done else "rolling_back_to"))
        if revision and revision != to:
            found.append((revision, "rollback_revision" if to or not done else "rolled_back_to"))
        if source:
            found.append((source, "rolled_back_with_wave" if item.get("with_wave") else "rolled_back_from"))
        return [(rev, role, ROLES[role]) for rev, role in found]
    if not revision or kind == Kind.ANSWERED:  # an answer is said by what follows it (landed, rejected...)
        return []
    if kind == Kind.JUDGING:
        role = _judging_role(item)
        return [(revision, role, ROLES[role])]
    if kind == Kind.REJECTED:
        return [(revision, "rejected", _rejected_label(item))]
    if kind == Kind.FAILED:
        status, successor = item.get("status"), item.get("superseded_by")
        if successor:  # never a failed build: a newer revision replaced it (the service may have skipped it)
            return [(revision, "failed", f"superseded by {successor}")]
        return [(revision, "failed", f"failed ({status})" if status else "failed")]
    outcome = _OUTCOMES.get(str(kind))
    if outcome not in ROLES:
        return []
    verdict = item.get("verdict")
    would_have = verdict.get("would_have") if isinstance(verdict, Mapping) else None
    if would_have:  # a dry run's gate let it through: say what it would have done
        return [(revision, outcome, f"{ROLES[outcome]} (dry run: {would_have})")]
    return [(revision, outcome, ROLES[outcome])]


def revision_roles(entries: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str, Mapping[str, Any]]]:
    """What one task instance's entries make of each revision: ``{revision: (role, label, the entry that says
    it)}`` (the strongest role, the later of two as strong).

    :param entries: the task instance's entries about one deployment, oldest first.
    """
    roles: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
    for item in entries:
        for revision, role, label in _roles_of_entry(item):
            kept = roles.get(revision)
            if kept is None or _STRENGTH[role] >= _STRENGTH[kept[0]]:
                roles[revision] = (role, label, item)
    return roles


# ------------------------------------------------------------------------------------ rollouts
def _task_fields(history: TaskHistory, *, tab: bool) -> dict[str, Any]:
    dag_id, run_id, task_id, map_index = history.key
    fields: dict[str, Any] = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "try_number": history.try_number,
        "ti_path": task_instance_path(dag_id, run_id, task_id, map_index),
        "run_path": dag_run_path(dag_id, run_id),
    }
    if tab:
        fields["tab_path"] = task_instance_tab_path(dag_id, run_id, task_id, map_index)
    return fields


def _shown_entry(item: Mapping[str, Any], detailed: bool) -> dict[str, Any]:
    """An entry as the view shows it: its message and verdict only when ``detailed``."""
    hidden = () if detailed else ("message", "verdict")
    shown = {key: value for key, value in item.items() if key not in hidden}
    if isinstance(shown.get("at"), (int, float)):
        shown["at"] = _iso(shown["at"])
    return shown


def history_rollout(history: TaskHistory, *, running: bool, detailed: bool) -> dict[str, Any]:
    """A task instance's rollout of a deployment, as the view's JSON shows it.

    ``outcome`` is the newest entry's (``rolled_out``, ``analysing``/``judging``, ``landed``, ``rejected``,
    ``timed_out``, ``failed``, ``passed``, ``rolling_back``, ``rolled_back``; a fleet row keeps its own outcome,
    ``analysing`` while it waits for its wave's analysis; ``asking`` while a person is asked about an inconclusive
    analysis, with ``question_path``: where Airflow's UI shows the question), ``entries`` the task's record of it.

    :param history: the task instance's history of the deployment.
    :param running: whether the task still runs.
    :param detailed: whether messages and measurements may be shown (the fleet tab's access).
    """
    if history.source == "fleet" and history.touch is not None:
        rollout = touch_rollout(history.touch, running)
        if history.entries and history.entries[-1]["kind"] == Kind.JUDGING:
            rollout["outcome"] = "analysing"
    elif history.source == "asset_event" and history.event is not None:
        rollout = event_rollout(history.event)
    else:
        rollout = _record_rollout(history, running)
    entries = [_shown_entry(item, detailed) for item in history.entries]
    rollout.update(_task_fields(history, tab=history.source == "fleet"))
    rollout.update(deployment_id=history.deployment_id, entries=entries, at=_iso(history.at), running=running)
    question = history.entries[-1] if history.entries else {}
    if running and question.get("kind") == Kind.ASKING and question.get("question_path"):
        rollout["question_path"] = airflow_root_path() + str(question["question_path"]).lstrip("/")
    if not detailed:
        rollout.update(message="", analysis=None)
    return rollout


def _record_rollout(history: TaskHistory, running: bool) -> dict[str, Any]:
    """A task's record of a deployment as a rollout: the revision it rolled out or judged (for a rollback task,
    the revision the rollback made, from the one it rolled back), the newest entry's outcome."""
    last = history.entries[-1]
    kind = last.get("kind")
    outcome = _judging_role(last) if kind == Kind.JUDGING else _OUTCOMES.get(str(kind), str(kind))
    if kind == Kind.ANSWERED:  # acted on now: judged again, landing or rolling back
        outcome = "judging"
    if kind == Kind.ROLLED_BACK and last.get("not_restored"):
        outcome = "rolled_back_partially"
    rollbacks = [item for item in history.entries if item.get("kind") in (Kind.ROLLING_BACK, Kind.ROLLED_BACK)]
    rollback = rollbacks[-1] if rollbacks else {}
    others = [item for item in history.entries if item.get("kind") not in (Kind.ROLLING_BACK, Kind.ROLLED_BACK)]
    subject = next((item for item in others if item.get("kind") == Kind.ROLLED_OUT), others[-1] if others else None)
    if subject is not None:
        revision, previous = subject.get("revision_id"), subject.get("previous_revision_id")
    else:  # a rollback task: the revision it made, from the one it rolled back
        revision, previous = rollback.get("revision_id"), rollback.get("rolled_back_from")
    judged = next((item for item in reversed(history.entries) if isinstance(item.get("verdict"), Mapping)), None)
    return {
        "source": "record",
        "kind": "record",
        "outcome": outcome,
        "origin": "task",
        "revision_id": revision,
        "previous_revision_id": previous,
        "rollback_revision_id": rollback.get("revision_id"),
        "requested_by": rollback.get("requested_by"),
        "by": requested_text(rollback),
        "message": next((str(item["message"]) for item in reversed(history.entries) if item.get("message")), ""),
        "analysis": row_analysis(judged["verdict"]) if judged is not None else None,
        "running": running,
    }


def newest_rollout(rollouts: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The rollout that touched the deployment last (a running one first), failed ones included.

    :param rollouts: rollouts from :func:`history_rollout`.
    """
    known = [rollout for rollout in rollouts if rollout]
    if not known:
        return None
    return max(known, key=lambda rollout: (rollout["running"], rollout["at"] or ""))


# ------------------------------------------------------------------------------------ marks
def revision_marks(revision_id: str, rollouts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The task instances that did something to ``revision_id``, one mark each (from the first place that tells
    it: the task's record, its fleet row, its asset event), newest first: the rollout's fields and ``role``,
    ``label``, ``at`` (when), ``message`` and ``analysis`` (of the entry that says it; empty without the details),
    ``requested_by`` and ``by`` (who asked for it by hand: "by alice from the Rollouts view"; empty otherwise).

    :param revision_id: the revision.
    :param rollouts: the deployment's rollouts (from :func:`history_rollout`, with their ``entries``).
    """
    by_task: dict[tuple[Any, ...], dict[str, Any]] = {}
    ordered = sorted(rollouts, key=lambda rollout: _SOURCE_ORDER.get(str(rollout.get("source")), 9))
    for rollout in ordered:
        key = (rollout.get("dag_id"), rollout.get("run_id"), rollout.get("task_id"), rollout.get("map_index"))
        if key in by_task:
            continue
        found = revision_roles(rollout.get("entries") or []).get(revision_id)
        if found is None:
            continue
        role, label, item = found
        verdict = item.get("verdict")
        by_task[key] = {
            **{name: value for name, value in rollout.items() if name != "entries"},
            "role": role,
            "label": label,
            "at": item.get("at") or rollout.get("at"),
            "message": str(item.get("message") or ""),
            "analysis": row_analysis(verdict) if isinstance(verdict, Mapping) else None,
            "requested_by": item.get("requested_by"),
            "by": requested_text(item),
        }
    return sorted(by_task.values(), key=lambda mark: str(mark.get("at") or ""), reverse=True)


def requested_text(item: Mapping[str, Any]) -> str:
    """Who asked for what an entry records, by hand, and where: ``by alice from the Rollouts view`` (``""`` when
    a task did it on its own).

    :param item: a record entry.
    """
    by = item.get("requested_by")
    if not by:
        return ""
    where = item.get("requested_from")
    return f"by {by} from the {where}" if where else f"by {by}"


def _iso(value: float) -> str:
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat()
