"""The fleet tab's JSON in the cases a single run does not reach: a pause between waves, a progress known
only from XCom (a worker-side state store backend), a record from another version, and the store's
references."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_provider.decisions.fleet_progress import FleetProgress, FleetRow, Outcome, WaveRecord
from airflow_provider.decisions.record import KINDS, Kind, entry, event_entries
from airflow_provider.plugins import rollouts as rollouts_package
from airflow_provider.plugins.rollouts.credits import ROLES, revision_marks
from airflow_provider.plugins.rollouts.metadata import FleetTaskRecord, _stored_json
from airflow_provider.plugins.rollouts.shapes import fleet_view


def record(**fields: Any) -> FleetTaskRecord:
    base: dict[str, Any] = {
        "dag_id": "d",
        "run_id": "r",
        "task_id": "t",
        "map_index": -1,
        "state": "deferred",
        "operator": "FleetRolloutOperator",
        "try_number": 1,
        "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "end_date": None,
    }
    return FleetTaskRecord(**{**base, **fields})


def progress() -> FleetProgress:
    canary = WaveRecord("canary", [FleetRow("id-a", "a", "canary", "r0", "r1", Outcome.LANDED)], phase="done")
    wave = WaveRecord("wave 1", [FleetRow("id-b", "b", "wave 1", "r2")])
    return FleetProgress(waves=[canary, wave], allowed_failures=0, change="x", paused_before=1)


def test_a_pause_before_a_wave_shows_when_it_ends() -> None:
    resume = time.time() + 120
    view = fleet_view(record(progress=progress(), source="task_state_store", resume_at=resume))
    assert [(wave["name"], wave["state"]) for wave in view["waves"]] == [("canary", "done"), ("wave 1", "paused")]
    assert view["resume_at"] == datetime.fromtimestamp(resume, tz=timezone.utc).isoformat()
    assert view["current_wave"] == 1 and view["task"]["running"] is True
    assert view["canary"] == {"failed": False, "deployments": ["a"]}
    no_pause = fleet_view(record(progress=progress(), source="task_state_store"))
    assert no_pause["waves"][1]["state"] == "pending"


def test_a_progress_known_only_from_xcom_is_shown_from_the_result_table() -> None:
    table = [
        {"name": "a", "deployment_id": "id-a", "wave": "canary", "outcome": "landed", "seconds": 3.0, "message": ""},
        {"name": "b", "deployment_id": "id-b", "wave": "wave 1", "outcome": "failed", "seconds": 4.0, "message": "x"},
        {
            "name": "c",
            "deployment_id": "id-c",
            "wave": "wave 2",
            "outcome": "not_patched",
            "seconds": None,
            "message": "",
        },
    ]
    summary = {"counts": {"landed": 1, "failed": 1, "not_patched": 1}, "stopped": "1 deployment(s) failed"}
    view = fleet_view(record(state="failed", table=table, summary=summary, source="xcom", stored_elsewhere=True))
    assert view["is_fleet"] and view["source"] == "xcom" and view["stopped"] == "1 deployment(s) failed"
    assert [(wave["name"], wave["state"]) for wave in view["waves"]] == [
        ("canary", "done"),
        ("wave 1", "done"),
        ("wave 2", "not started: the rollout stopped"),
    ]
    assert view["budget"] == {"allowed_failures": None, "failures": 1, "reason_unknown": 0, "exceeded": True}
    assert view["task"]["running"] is False


def test_a_task_that_recorded_nothing_is_a_fleet_rollout_by_its_operator_only() -> None:
    assert fleet_view(record(state=None))["is_fleet"] is True
    assert fleet_view(record(state="success", operator="PatchDeploymentOperator"))["is_fleet"] is False


def test_the_store_references_of_a_worker_side_backend_are_not_read_as_progress() -> None:
    assert _stored_json(json.dumps({"__airflow_state_ref__": "s3://bucket/key"})) is None
    assert _stored_json("not json") is None
    assert _stored_json(json.dumps({"name": "wave 1", "rows": []})) == {"name": "wave 1", "rows": []}


def test_every_fleet_outcome_has_a_tone_in_the_view() -> None:
    """A new outcome shown without a tone would look like an unknown status: each has its colour."""
    script = (Path(rollouts_package.__file__).parent / "static" / "widgets.js").read_text()
    tones = script[script.index("const STATUS_TONE = {") : script.index("};", script.index("const STATUS_TONE"))]
    outcomes = [value for name, value in vars(Outcome).items() if name.isupper()]
    outcomes += [*ROLES, *KINDS]  # a revision's role in a task's record, a record's newest outcome
    missing = [outcome for outcome in outcomes if not re.search(rf"\b{outcome}\s*:", tones)]
    assert not missing, f"outcomes with no STATUS_TONE in widgets.js: {missing}"


def test_a_rollback_whose_reason_is_unknown_counts_against_the_budget_apart_from_the_failures() -> None:
    rows = [
        FleetRow("id-a", "a", "wave 1", "r0", "r1", Outcome.ROLLED_BACK),
        FleetRow("id-b", "b", "wave 1", "r2", "r3", Outcome.ROLLED_BACK_REASON_UNKNOWN),
    ]
    stopped = FleetProgress(waves=[WaveRecord("wave 1", rows, phase="done")], allowed_failures=1, change="x")
    view = fleet_view(record(state="running", progress=stopped, source="task_state_store"))
    assert view["budget"] == {"allowed_failures": 1, "failures": 1, "reason_unknown": 1, "exceeded": True}


def test_an_analysed_fleet_shows_each_verdict_its_failing_check_and_the_measurements() -> None:
    measurement = {
        "round": 1,
        "check": "tracing error_rate",
        "deployment_id": "id-b",
        "name": "b",
        "at": "2026-01-01T00:00:00+00:00",
        "value": 0.25,
        "condition": "< 0.05",
        "verdict": "failed",
        "detail": "error_rate 0.250 over 140 runs",
    }
    failed = {
        "verdict": "failed",
        "failing_check": "tracing error_rate",
        "reason": "check 'tracing error_rate' failed 1 of 1 allowed: 0.250, needs < 0.05",
        "revision_id": "r3",
        "measurements": [measurement] * 12,
        "measurements_left_out": 3,
    }
    passed = {**failed, "verdict": "passed", "failing_check": None, "reason": "passed", "measurements": []}
    passed.pop("measurements_left_out")
    rows = [
        FleetRow("id-a", "a", "canary", "r0", "r1", Outcome.LANDED, analysis=passed),
        FleetRow("id-b", "b", "wave 1", "r2", "r3", Outcome.ROLLED_BACK, analysis=failed),
        FleetRow("id-c", "c", "wave 1", "r4", "r5", Outcome.LANDED),
    ]
    waves = [WaveRecord("canary", rows[:1], phase="done"), WaveRecord("wave 1", rows[1:], phase="analysing")]
    view = fleet_view(record(progress=FleetProgress(waves=waves, allowed_failures=1, change="x"), source="trigger"))
    assert view["waves"][1]["state"] == "analysing"
    assert view["analysis"] == {"failures": 1, "verdicts": {"passed": 1, "failed": 1}}
    shown = view["waves"][1]["rows"][0]["analysis"]
    assert shown["verdict"] == "failed" and shown["failing_check"] == "tracing error_rate"
    assert shown["measurements_total"] == 15 and len(shown["measurements"]) == 10
    assert shown["measurements"][0] == "round 1 · tracing error_rate · 0.25 (< 0.05): failed"
    assert view["waves"][1]["rows"][1]["analysis"] is None
    # c landed and waits for its wave's analysis: "analysing", never "landed" before its verdict
    assert view["waves"][1]["rows"][1]["outcome"] == "analysing"
    assert view["waves"][1]["counts"] == {"rolled_back": 1, "analysing": 1}
    assert view["counts"] == {"landed": 1, "rolled_back": 1, "analysing": 1}
    # Known from the result table only (XCom): the summary each row carries.
    table = [{**row.table_row()} for row in rows]
    from_table = fleet_view(record(state="success", table=table, source="xcom"))
    assert from_table["analysis"] == {"failures": 1, "verdicts": {"passed": 1, "failed": 1}}
    assert from_table["waves"][1]["rows"][0]["analysis"] == {
        "verdict": "failed",
        "failing_check": "tracing error_rate",
        "reason": failed["reason"],
    }
    json.dumps(view)


def test_a_rollback_marks_the_revision_it_restored_and_the_one_it_replaced() -> None:
    """A rollback task's asset event alone (a task that kept no record): the revision serving again is "rolled back
    to", the one it replaced "rolled back from"."""
    payload = {"kind": "revision_live", "origin": "task", "outcome": "rolled_back", "deployment_id": "d"}
    payload.update(revision_id="old", previous_revision_id="bad")
    rolled_back = {"source": "asset_event", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
    rolled_back["entries"] = event_entries(payload, 1.0)
    assert [mark["label"] for mark in revision_marks("old", [rolled_back])] == ["rolled back to"]
    assert [mark["label"] for mark in revision_marks("bad", [rolled_back])] == ["rolled back from"]


def test_a_patch_tasks_record_reads_the_right_way_round_and_a_retry_adds_no_second_mark() -> None:
    """The record of a patch whose analysis failed and whose rollback made a new revision: the rejected revision is
    "rejected (analysis failed)" (not "rolled back from"), the original "rolled back to", the rollback's own revision
    "rollback revision"; another task's record of the same revisions is its own mark."""
    entries = [
        entry(Kind.ROLLED_OUT, "d", "bad", at=1.0, previous_revision_id="good", try_number=1),
        entry(Kind.JUDGING, "d", "bad", at=2.0, steps=["analysis"], try_number=1),
        entry(Kind.REJECTED, "d", "bad", at=3.0, step="analysis", verdict={"verdict": "inconclusive"}, try_number=1),
        entry(Kind.ROLLING_BACK, "d", "new", at=4.0, rolled_back_from="bad", rolled_back_to="good", try_number=2),
        entry(Kind.ROLLED_BACK, "d", "new", at=5.0, rolled_back_from="bad", rolled_back_to="good", try_number=2),
    ]
    ours = {"source": "record", "dag_id": "d", "run_id": "r", "task_id": "patch", "map_index": -1, "entries": entries}
    later = {**ours, "run_id": "r2", "entries": [entry(Kind.LANDED, "d", "good", at=9.0)]}
    labels = {
        rev: [(m["run_id"], m["label"]) for m in revision_marks(rev, [ours, later])] for rev in ("bad", "good", "new")
    }
    assert labels == {
        "bad": [("r", "rejected (analysis inconclusive)")],
        "good": [("r2", "landed"), ("r", "rolled back to")],
        "new": [("r", "rollback revision")],
    }
    judging = {**ours, "entries": entries[:2]}
    assert [mark["label"] for mark in revision_marks("bad", [judging])] == ["analysing"]


def test_an_open_question_about_an_inconclusive_wave_is_shown_with_its_link() -> None:
    """``on_inconclusive="ask"``: the row waiting for a person shows ``asking``, the fleet tab names the open
    question, its deployments and the link to Airflow's Required actions page; once answered, the answer shows on
    the row and the question is no longer open."""
    result = {"verdict": "inconclusive", "failing_check": "tracing error_rate", "reason": "too few runs"}
    asked = {
        "number": 1,
        "asked_at": 1_700_000_000.0,
        "path": "dags/d/runs/r/tasks/t/required_actions?map_index=-1",
        "deployments": [{"deployment_id": "id-a", "name": "a", "revision_id": "r1", "reason": "too few runs"}],
    }
    row = FleetRow("id-a", "a", "canary", "r0", "r1", Outcome.LANDED, analysis=dict(result))
    canary = WaveRecord("canary", [row], phase="analysing", question=dict(asked))
    waves = [canary, WaveRecord("wave 1", [FleetRow("id-b", "b", "wave 1", "r2")])]

    view = fleet_view(record(state="awaiting_input", progress=FleetProgress(waves, 0, "x"), source="task_state_store"))

    assert view["waves"][0]["rows"][0]["outcome"] == "asking" and view["waves"][0]["counts"] == {"asking": 1}
    question = view["question"]
    assert question["wave"] == "canary" and question["number"] == 1 and question["answer"] is None
    assert question["question_path"] == "/dags/d/runs/r/tasks/t/required_actions?map_index=-1"
    assert [item["name"] for item in question["deployments"]] == ["a"]
    assert question["asked_at"].startswith("2023-11-14")

    answer = {"choice": "Promote", "by": "bob", "at": None, "timed_out": False}
    row.analysis = {**result, "answer": answer}
    canary.question = {**asked, "answer": answer}
    answered = fleet_view(record(state="running", progress=FleetProgress(waves, 0, "x"), source="task_state_store"))

    assert answered["question"] is None
    assert answered["waves"][0]["question"]["answer"]["choice"] == "Promote"
    assert answered["waves"][0]["rows"][0]["outcome"] == Outcome.LANDED
    assert answered["waves"][0]["rows"][0]["analysis"]["answer"] == answer


def test_a_dry_run_fleet_shows_what_the_gate_would_have_rolled_back_not_failures() -> None:
    """Issue 31: a fleet's dry run lands a deployment its analysis failed; the fleet tab counts it apart, from the
    progress and from the result table alike."""
    said = "dry run: would have rolled back: check 'tracing error_rate' failed"
    failed = {"verdict": "failed", "failing_check": "tracing error_rate", "reason": "check failed", "measurements": []}
    dry = {**failed, "dry_run": True, "would_have": "would have rolled back"}
    rows = [
        FleetRow("id-a", "a", "canary", "r0", "r1", Outcome.LANDED, message=said, analysis=dry),
        FleetRow("id-b", "b", "wave 1", "r2", "r3", Outcome.LANDED, analysis={**failed, "verdict": "passed"}),
    ]
    waves = [WaveRecord("canary", rows[:1], phase="done"), WaveRecord("wave 1", rows[1:], phase="done")]
    view = fleet_view(record(progress=FleetProgress(waves=waves, allowed_failures=0, change="x"), source="trigger"))
    assert view["analysis"] == {
        "failures": 0,
        "verdicts": {"failed": 1, "passed": 1},
        "would_have": {"a": "would have rolled back"},
    }
    assert view["waves"][0]["rows"][0]["outcome"] == Outcome.LANDED
    from_table = fleet_view(record(state="success", table=[row.table_row() for row in rows], source="xcom"))
    assert from_table["analysis"] == {
        "failures": 0,
        "verdicts": {"failed": 1, "passed": 1},
        "would_have": {"a": "would have rolled back"},
    }
