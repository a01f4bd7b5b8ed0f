"""DORA figures computed from a known history of records (:mod:`airflow_provider.decisions.dora`)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider.decisions.dora import DAY, figures, rollout_facts
from airflow_provider.decisions.fleet_progress import FleetRow, Outcome
from airflow_provider.decisions.record import Kind, entry, fleet_row_entries

START = 1_800_000_000.0
"""The window's start."""
HOUR = 3600.0


def at(days: float, hours: float = 0.0) -> float:
    return START + days * DAY + hours * HOUR


def history() -> list[dict[str, Any]]:
    """Ten days of one connection's record, every kind of outcome once at least:

    - ``a``: r1 rolled out day 1, live after 5 min, landed; r2 rolled out day 2, live after 10 min, rejected by its
      analysis 20 min later, rolled back (live again 6 min after the verdict); the same facts recorded again by a
      retry (try 2) and by the fleet-like duplicate of the asset event;
    - ``b``: r3 rolled out day 3, its build failed (never served); r4 rolled out day 4, timed out, rolled back
      30 min after; r5 rolled out day 5, landed after 2 min, rolled back with its wave the same day (no failed
      verdict of its own: no time to restore); r6 rolled out day 6, still being judged;
    - ``c``: r7 rolled out before the window (day -1), rejected in it: outside the window;
    - a gate passed ``d``'s r8 (rolled out outside Airflow: not a rollout), and rejected ``d``'s r9 likewise.
    """
    return [
        entry(Kind.ROLLED_OUT, "a", "r1", at=at(1), previous_revision_id="r0", try_number=1),
        entry(Kind.JUDGING, "a", "r1", at=at(1, 5 / 60), steps=["analysis"], try_number=1),
        entry(Kind.LANDED, "a", "r1", at=at(1, 25 / 60), try_number=1),
        entry(Kind.ROLLED_OUT, "a", "r2", at=at(2), previous_revision_id="r1", try_number=1),
        entry(Kind.JUDGING, "a", "r2", at=at(2, 10 / 60), steps=["analysis"], try_number=1),
        entry(Kind.REJECTED, "a", "r2", at=at(2, 30 / 60), step="analysis", try_number=1),
        entry(Kind.REJECTED, "a", "r2", at=at(2, 40 / 60), step="analysis", try_number=2),  # a retry says it again
        entry(Kind.ROLLING_BACK, "a", "r2b", at=at(2, 31 / 60), rolled_back_from="r2", rolled_back_to="r1"),
        entry(Kind.ROLLED_BACK, "a", "r2b", at=at(2, 36 / 60), rolled_back_from="r2", rolled_back_to="r1"),
        entry(Kind.ROLLED_BACK, "a", "r2b", at=at(2, 37 / 60), rolled_back_from="r2"),  # the task's asset event
        entry(Kind.ROLLED_OUT, "b", "r3", at=at(3), previous_revision_id="r0"),
        entry(Kind.FAILED, "b", "r3", at=at(3, 0.1), status="BUILD_FAILED"),
        entry(Kind.ROLLED_OUT, "b", "r4", at=at(4), previous_revision_id="r0"),
        entry(Kind.TIMED_OUT, "b", "r4", at=at(4, 1), step="timeout"),
        entry(Kind.ROLLED_BACK, "b", "r4b", at=at(4, 1.5), rolled_back_from="r4", rolled_back_to="r0"),
        entry(Kind.ROLLED_OUT, "b", "r5", at=at(5), previous_revision_id="r0"),
        entry(Kind.LANDED, "b", "r5", at=at(5, 2 / 60)),
        entry(Kind.ROLLED_BACK, "b", "r5b", at=at(5, 3), rolled_back_from="r5", with_wave=True),
        entry(Kind.ROLLED_OUT, "b", "r6", at=at(6), previous_revision_id="r5b"),
        entry(Kind.JUDGING, "b", "r6", at=at(6, 0.05), steps=["verify", "bake"]),
        entry(Kind.ROLLED_OUT, "c", "r7", at=at(-1)),
        entry(Kind.REJECTED, "c", "r7", at=at(0, 1), step="verify"),
        entry(Kind.PASSED, "d", "r8", at=at(7), step="analysis"),
        entry(Kind.REJECTED, "d", "r9", at=at(8), step="analysis"),
    ]


def test_the_figures_of_a_known_history() -> None:
    shown = figures(history(), START, at(10))
    assert shown["window"]["days"] == 10.0
    # a:r1, a:r2, b:r4, b:r5, b:r6 went out (b:r3 never served; c:r7 before the window; d's are not rollouts)
    assert (shown["rollouts"], shown["never_served"], shown["deployments"]) == (5, 1, 2)
    assert shown["rollouts_per_day"] == 0.5
    assert (shown["landed"], shown["failed"], shown["in_progress"]) == (1, 3, 1)  # a:r1 | a:r2, b:r4, b:r5 | b:r6
    assert shown["change_failure_rate"] == 0.75
    # a:r2: 6 min from the first verdict to the rollback live; b:r4: 30 min; b:r5 has no failed verdict
    assert shown["time_to_restore"] == {
        "count": 2,
        "median_seconds": 1080.0,
        "mean_seconds": 1080.0,
        "max_seconds": 1800.0,
    }
    # a:r1 5 min, a:r2 10 min, b:r5 2 min, b:r6 3 min (b:r4 never went live)
    assert shown["patch_to_live"]["count"] == 4
    assert shown["patch_to_live"]["median_seconds"] == 240.0 and shown["patch_to_live"]["max_seconds"] == 600.0


def test_a_window_takes_the_rollouts_rolled_out_in_it() -> None:
    first_two_days = figures(history(), START, at(2, 12))
    assert (first_two_days["rollouts"], first_two_days["failed"], first_two_days["landed"]) == (2, 1, 1)
    assert first_two_days["change_failure_rate"] == 0.5
    nothing = figures(history(), at(20), at(30))
    assert nothing["rollouts"] == 0 and nothing["change_failure_rate"] is None
    assert nothing["time_to_restore"]["median_seconds"] is None
    with pytest.raises(ValueError, match="must end after it starts"):
        figures(history(), at(2), at(1))


def test_fleet_rows_count_as_the_same_rollouts_as_the_records() -> None:
    failed = FleetRow("f", "fleet-app", "wave 1", "r0", "r1", Outcome.ROLLING_OUT, started_at=at(1))
    failed.decide(Outcome.FAILED, "verification failed on revision r1: no", at(1, 0.25))
    failed.rollback_revision, failed.rollback_decided = "r2", True
    failed.decide(Outcome.ROLLED_BACK, f"{failed.message}; rolled back (revision r2 serves r0's build)", at(1, 0.75))
    landed = FleetRow("g", "other", "wave 1", "r0", "r3", Outcome.LANDED, started_at=at(2), finished_at=at(2, 0.1))
    entries = [*fleet_row_entries(failed.to_json(), "done"), *fleet_row_entries(landed.to_json(), "done")]
    [one, two] = sorted(rollout_facts(entries), key=lambda fact: fact.deployment_id)
    assert (one.state, one.failed_at, one.restored_at) == ("failed", at(1, 0.25), at(1, 0.75))
    assert (two.state, two.live_at) == ("landed", at(2, 0.1))
    shown = figures(entries, START, at(3))
    assert shown["time_to_restore"]["median_seconds"] == 1800.0 and shown["change_failure_rate"] == 0.5
