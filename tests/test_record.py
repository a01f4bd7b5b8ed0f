"""The record's shape and bounds (:mod:`airflow_provider.decisions.record`) and its writer
(:mod:`airflow_provider.tasks.recording`): what a task instance keeps of the revisions it made or judged, read back
as the Rollouts view reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider.decisions.fleet_progress import FleetRow, Outcome
from airflow_provider.decisions.record import (
    MAX_ENTRIES,
    MAX_MEASUREMENTS,
    MAX_RECORD_BYTES,
    MAX_TEXT,
    RECORD_KEY,
    Kind,
    entries_of,
    entry,
    event_entries,
    fleet_row_entries,
    with_entries,
)
from airflow_provider.tasks.recording import record_entries, record_entry, record_landing_entry
from tests.tasks.conftest import FakeStore, FakeTI


def measurement(index: int) -> dict[str, Any]:
    return {"round": index, "check": "tracing error_rate", "value": 0.2, "condition": "< 0.05", "verdict": "failed"}


FAILED_ANALYSIS = {
    "verdict": "failed",
    "failing_check": "tracing error_rate",
    "reason": "error_rate 0.2 not < 0.05",
    "revision_id": "r1",
    "measurements": [measurement(index) for index in range(1, 31)],
    "would_have_rolled_back": True,  # a field this provider does not know (a dry run's): kept
}


# ------------------------------------------------------------------------------------------ one entry
def test_an_entry_keeps_the_latest_measurements_and_every_field_of_the_verdict() -> None:
    made = entry(Kind.REJECTED, "d", "r1", at=10.0, step="analysis", verdict=FAILED_ANALYSIS, message="x" * 2000)
    verdict = made["verdict"]
    assert [item["round"] for item in verdict["measurements"]] == list(range(31 - MAX_MEASUREMENTS, 31))
    assert verdict["measurements_total"] == 30 and verdict["would_have_rolled_back"] is True
    assert len(made["message"]) == MAX_TEXT and made["message"].endswith("...")
    assert entry(Kind.REJECTED, "d", "r1", at=10.0, verdict=verdict)["verdict"] == verdict  # bounding twice: same
    assert "previous_revision_id" not in made  # None fields are left out
    json.dumps(made)


def test_an_entry_with_a_field_the_record_does_not_have_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"unknown record entry field.*revison"):
        entry(Kind.LANDED, "d", "r1", at=1.0, revison="typo")


# ------------------------------------------------------------------------------------------ the record
def test_a_fact_recorded_already_is_not_written_again_and_judging_keeps_when_it_started() -> None:
    first = with_entries(None, [entry(Kind.ROLLED_OUT, "d", "r1", at=1.0, try_number=1)])
    assert first is not None and [item["kind"] for item in entries_of(first)] == [Kind.ROLLED_OUT]
    assert with_entries(first, [entry(Kind.ROLLED_OUT, "d", "r1", at=5.0, try_number=2)]) is None  # a retry
    judging = with_entries(first, [entry(Kind.JUDGING, "d", "r1", at=2.0, steps=["analysis"])])
    assert judging is not None
    so_far = {"verdict": "pending", "measurements": [measurement(1)]}
    updated = with_entries(judging, [entry(Kind.JUDGING, "d", "r1", at=3.0, steps=["analysis"], verdict=so_far)])
    assert updated is not None
    [_, kept] = entries_of(updated)
    assert kept["at"] == 2.0 and kept["verdict"]["measurements"] == [measurement(1)]


def test_the_record_stays_within_its_bounds_dropping_what_matters_least_first() -> None:
    record: Any = None
    for index in range(MAX_ENTRIES):
        record = with_entries(record, [entry(Kind.JUDGING, "d", f"r{index}", at=float(index), steps=["analysis"])])
        record = with_entries(record, [entry(Kind.LANDED, "d", f"r{index}", at=float(index) + 0.5)])
    entries = entries_of(record)
    assert len(entries) == MAX_ENTRIES and record["left_out"] == MAX_ENTRIES
    assert all(item["kind"] == Kind.LANDED for item in entries)  # judged revisions' judging entries went first
    for index in range(MAX_ENTRIES, MAX_ENTRIES + 5):
        record = with_entries(record, [entry(Kind.LANDED, "d", f"r{index}", at=float(index))])
    entries = entries_of(record)
    assert len(entries) == MAX_ENTRIES and entries[-1]["revision_id"] == f"r{MAX_ENTRIES + 4}"
    assert entries[0]["revision_id"] == "r5" and record["left_out"] == MAX_ENTRIES + 5  # then the oldest


def test_the_record_stays_under_its_size_dropping_old_measurements_before_entries() -> None:
    big = {**FAILED_ANALYSIS, "reason": "r" * MAX_TEXT, "measurements": [{"detail": "m" * MAX_TEXT}] * 40}
    record: Any = None
    for index in range(MAX_ENTRIES):
        item = entry(Kind.REJECTED, "d", f"r{index}", at=float(index), verdict=big, message="m" * MAX_TEXT)
        record = with_entries(record, [item])
    assert len(json.dumps(record)) <= MAX_RECORD_BYTES
    entries = entries_of(record)
    assert entries[-1]["verdict"]["measurements"], "the newest entry keeps its measurements"
    assert entries[0]["verdict"]["measurements"] == [], "the oldest lost theirs first"
    assert len(entries) == MAX_ENTRIES or record["left_out"] == MAX_ENTRIES - len(entries)


# ------------------------------------------------------------------------------------------ fleet rows
SUCCESSOR = "5e1c0b6a-9f0d-4c1e-8a5b-3d2f1e0c9b8a"


def test_the_view_says_superseded_with_the_successor_never_a_failed_build() -> None:
    from airflow_provider.plugins.rollouts.credits import revision_roles

    failed = entry(Kind.FAILED, "d", "r1", at=1.0, message=f"revision r1 was superseded by {SUCCESSOR}, a newer one")
    assert failed["superseded_by"] == SUCCESSOR and "status" not in failed
    assert revision_roles([failed])["r1"][:2] == ("failed", f"superseded by {SUCCESSOR}")
    built = entry(
        Kind.FAILED, "d", "r2", at=1.0, message="revision r2 ended with status BUILD_FAILED", status="BUILD_FAILED"
    )
    assert revision_roles([built])["r2"][:2] == ("failed", "failed (BUILD_FAILED)")


def row(**fields: Any) -> dict[str, Any]:
    base = FleetRow("d", "app", "wave 1", "r0", "r1", Outcome.LANDED, started_at=100.0, finished_at=160.0)
    return {**base.to_json(), **fields}


def kinds(entries: list[dict[str, Any]]) -> list[tuple[str, str | None, float | None]]:
    return [(item["kind"], item["revision_id"], item["at"]) for item in entries]


def test_a_fleet_row_rolled_back_after_its_analysis_failed_reads_as_rollout_rejection_and_rollback() -> None:
    failed = FleetRow("d", "app", "wave 1", "r0", "r1", Outcome.ROLLING_OUT, started_at=100.0)
    failed.decide(Outcome.FAILED, "analysis failed on revision r1: error_rate", 130.0)
    failed.analysis = dict(FAILED_ANALYSIS)
    failed.rollback_revision, failed.rollback_path, failed.rollback_decided = "r2", "redeploy", True
    failed.decide(Outcome.ROLLED_BACK, "...; rolled back (revision r2 serves revision r0's build again)", 190.0)
    entries = fleet_row_entries(failed.to_json(), "done")
    assert kinds(entries) == [
        (Kind.ROLLED_OUT, "r1", 100.0),
        (Kind.REJECTED, "r1", 130.0),
        (Kind.ROLLED_BACK, "r2", 190.0),
    ]
    assert entries[1]["step"] == "analysis" and entries[1]["verdict"]["failing_check"] == "tracing error_rate"
    assert (entries[2]["rolled_back_from"], entries[2]["rolled_back_to"], entries[2]["path"]) == (
        "r1",
        "r0",
        "redeploy",
    )


def test_a_fleet_row_that_landed_while_its_wave_is_analysed_is_judging_not_landed() -> None:
    assert [item["kind"] for item in fleet_row_entries(row(), "analysing")] == [Kind.ROLLED_OUT, Kind.JUDGING]
    passed = {"verdict": "passed", "reason": "passed", "measurements": []}
    assert [item["kind"] for item in fleet_row_entries(row(analysis=passed), "analysing")] == [
        Kind.ROLLED_OUT,
        Kind.LANDED,
    ]
    assert kinds(fleet_row_entries(row(), "done"))[-1] == (Kind.LANDED, "r1", 160.0)


@pytest.mark.parametrize(
    ("fields", "kind", "extra"),
    [
        ({"outcome": "failed", "message": "verification failed on revision r1: no"}, Kind.REJECTED, {"step": "verify"}),
        ({"outcome": "failed", "message": "left service during the bake: x"}, Kind.REJECTED, {"step": "bake"}),
        ({"outcome": "failed", "message": "timed out: x", "timed_out": True}, Kind.TIMED_OUT, {"step": "timeout"}),
        (
            {"outcome": "failed", "message": "revision r1 no longer served when its analysis was to start"},
            Kind.FAILED,
            {"status": None},
        ),
        (
            {
                "outcome": "failed",
                "message": "revision r1 no longer served when its analysis was to start",
                "went_live": True,
            },
            Kind.REJECTED,
            {"step": None},
        ),
        (
            {"outcome": "failed", "message": "revision r1 ended with status BUILD_FAILED"},
            Kind.FAILED,
            {"status": "BUILD_FAILED", "superseded_by": None},
        ),
        (  # the service skipped it for a newer one: superseded, with its successor, never a failed build
            {
                "outcome": "failed",
                "message": f"deployment 'app' (d): revision r1 was superseded by {SUCCESSOR}, a newer revision (the "
                "service skipped it while it was queued: SKIPPED, never built); it is not active",
            },
            Kind.FAILED,
            {"status": None, "superseded_by": SUCCESSOR},
        ),
    ],
)
def test_a_failed_fleet_row_says_what_failed_it(fields: dict[str, Any], kind: str, extra: dict[str, Any]) -> None:
    verdict = fleet_row_entries(row(**fields), "done")[-1]
    assert verdict["kind"] == kind and {name: verdict.get(name) for name in extra} == extra


def test_a_fleet_row_rolled_back_with_its_wave_landed_first_and_rows_never_patched_say_nothing() -> None:
    with_wave = row(outcome="rolled_back_with_wave", rollback_revision="r2", rollback_decided=True, finished_at=200.0)
    entries = fleet_row_entries(with_wave, "done")
    assert [item["kind"] for item in entries] == [Kind.ROLLED_OUT, Kind.LANDED, Kind.ROLLED_BACK]
    assert entries[-1]["with_wave"] is True and entries[-1]["at"] == 200.0
    assert fleet_row_entries(row(outcome="not_patched", started_at=None, to_revision=None), "done") == []


def test_a_provider_asset_event_reads_as_entries_and_a_watchers_does_not() -> None:
    landed = {"kind": "revision_live", "origin": "task", "outcome": "rolled_out", "deployment_id": "d"}
    landed.update(revision_id="r1", previous_revision_id="r0")
    assert kinds(event_entries(landed, 5.0)) == [(Kind.LANDED, "r1", 5.0)]
    back = {**landed, "outcome": "rolled_back", "revision_id": "r2", "previous_revision_id": "r1"}
    [rolled_back] = event_entries(back, 6.0)
    assert (rolled_back["kind"], rolled_back["revision_id"], rolled_back["rolled_back_from"]) == (
        Kind.ROLLED_BACK,
        "r2",
        "r1",
    )
    assert event_entries({**landed, "origin": "watcher"}, 7.0) == []


# ------------------------------------------------------------------------------------------ the writer
class BrokenStore(FakeStore):
    def __init__(self, *, reads: bool, writes: bool) -> None:
        super().__init__()
        self.reads, self.writes = reads, writes

    def get(self, key: str, default: Any = None) -> Any:
        if not self.reads:
            raise RuntimeError("store down")
        return super().get(key, default)

    def set(self, key: str, value: Any) -> None:
        if not self.writes:
            raise RuntimeError("store down")
        super().set(key, value)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: Any) -> None:
        self.warnings.append(message % args)


def test_the_writer_stamps_each_try_and_adds_only_what_is_new() -> None:
    store, log = FakeStore(), Log()
    landing = {"deployment_id": "d", "revision_id": "r1", "previous_active_revision_id": "r0"}
    record_landing_entry({"ti": FakeTI(1), "task_state_store": store}, log, Kind.ROLLED_OUT, landing)
    record_landing_entry({"ti": FakeTI(2), "task_state_store": store}, log, Kind.ROLLED_OUT, landing)  # a retry
    record_landing_entry({"ti": FakeTI(2), "task_state_store": store}, log, Kind.TIMED_OUT, landing, message="late")
    entries = entries_of(store.data[RECORD_KEY])
    assert [(item["kind"], item["try_number"], item.get("step")) for item in entries] == [
        (Kind.ROLLED_OUT, 1, None),
        (Kind.TIMED_OUT, 2, "timeout"),
    ]
    assert entries[0]["previous_revision_id"] == "r0" and log.warnings == []
    record_entry({"ti": FakeTI(1), "task_state_store": store}, log, Kind.LANDED, "d", None)  # no revision: nothing
    record_entries({"ti": FakeTI(1), "task_state_store": store}, log, [entry(Kind.PASSED, "d", "", at=1.0)])
    assert len(entries_of(store.data[RECORD_KEY])) == 2


def test_a_failing_store_never_fails_the_task_and_an_unreadable_record_is_not_overwritten() -> None:
    log = Log()
    unreadable = BrokenStore(reads=False, writes=True)
    unreadable.data[RECORD_KEY] = {"version": 1, "entries": [{"kind": "landed", "revision_id": "r0"}]}
    record_entries({"ti": FakeTI(), "task_state_store": unreadable}, log, [entry(Kind.LANDED, "d", "r1", at=1.0)])
    assert entries_of(unreadable.data[RECORD_KEY]) == [{"kind": "landed", "revision_id": "r0"}]
    unwritable = BrokenStore(reads=True, writes=False)
    record_entries({"ti": FakeTI(), "task_state_store": unwritable}, log, [entry(Kind.LANDED, "d", "r1", at=1.0)])
    assert len(log.warnings) == 2 and all("store down" in line for line in log.warnings)
    assert "landed of revision r1" in log.warnings[0]
    record_entries({"ti": FakeTI()}, log, [entry(Kind.LANDED, "d", "r1", at=1.0)])  # Airflow < 3.3: no store


# ------------------------------------------------------------------------------------------ rounds of an analysis
DEPLOYMENT = "8d12e254-9195-47ca-94ec-20051ae2fc1b"
REVISION = "5c964c02-46fb-4109-b3ee-fc643d75043e"


class CountingStore(FakeStore):
    """A store that keeps what each write wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[Any] = []

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        self.written.append(json.loads(json.dumps(value)))


def _target() -> Any:
    from airflow_provider.analysis import AnalysisTarget

    return AnalysisTarget(deployment_id=DEPLOYMENT, revision_id=REVISION, name="svc", live_since="2026-01-01T00:00:00Z")


def test_each_round_of_an_analysis_is_one_write_of_the_measurements_so_far_bounded() -> None:
    from airflow_provider.tasks.recording import round_recorder

    store, log = CountingStore(), Log()
    context = {"ti": FakeTI(), "task_state_store": store}
    record_entry(context, log, Kind.JUDGING, DEPLOYMENT, REVISION, steps=["analysis"], previous_revision_id="r0")
    started = store.written[-1]["entries"][-1]["at"]
    fields = {DEPLOYMENT: {"previous_revision_id": "r0"}}
    record_round = round_recorder(context, log, [_target()], steps=["analysis"], fields=fields)
    for number in range(1, 16):
        record_round(number, {DEPLOYMENT: [measurement(index) for index in range(1, number + 1)]})
    assert len(store.written) == 1 + 15, "one write per round"
    [judging] = entries_of(store.data[RECORD_KEY])
    assert judging["kind"] == "judging" and judging["at"] == started  # when judging started, kept
    assert judging["previous_revision_id"] == "r0" and judging["steps"] == ["analysis"]
    verdict = judging["verdict"]
    assert (verdict["verdict"], verdict["round"], verdict["measurements_total"]) == ("analysing", 15, 15)
    assert [item["round"] for item in verdict["measurements"]] == list(range(6, 16))  # the latest, bounded
    record_entry(context, log, Kind.REJECTED, DEPLOYMENT, REVISION, step="analysis", verdict=FAILED_ANALYSIS)
    assert [item["kind"] for item in entries_of(store.data[RECORD_KEY])] == ["judging", "rejected"]


def test_a_round_that_cannot_be_recorded_never_fails_the_analysis() -> None:
    from airflow_provider.tasks.recording import round_recorder

    log = Log()
    context = {"ti": FakeTI(), "task_state_store": BrokenStore(reads=True, writes=False)}
    record_round = round_recorder(context, log, [_target()], steps=["analysis"])
    record_round(1, {DEPLOYMENT: [measurement(1)]})
    assert len(log.warnings) == 1 and f"judging of revision {REVISION}" in log.warnings[0]
