"""The pure rollout verdict and the revision-check schedule."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider.decisions.rollout import (
    RevisionCheckSchedule,
    RevisionLookBudget,
    RolloutState,
    awaits_revision_build,
    bake_verdict,
    rollout_verdict,
)
from airflow_provider.models import Deployment, Revision

DEP = "11111111-1111-4111-8111-111111111111"
OLD = "22222222-2222-4222-8222-222222222222"
OURS = "33333333-3333-4333-8333-333333333333"
NEWER = "44444444-4444-4444-8444-444444444444"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def deployment(status: str = "READY", active: str | None = OLD, latest: str | None = OURS, **extra: Any) -> Deployment:
    return Deployment.model_validate(
        {
            "name": "shop-api",
            "source": "codehost",
            "source_config": {},
            "source_revision_config": {},
            "secrets": [],
            "id": DEP,
            "tenant_id": DEP,
            "created_at": T0,
            "updated_at": extra.pop("updated_at", T0),
            "status": status,
            "latest_revision_id": latest,
            "active_revision_id": active,
            **extra,
        }
    )


def revision(status: str, revision_id: str = OURS, message: str | None = None) -> Revision:
    return Revision(id=revision_id, status=status, status_message=message)


@pytest.mark.parametrize(
    ("dep", "revision_id", "rev", "state", "words"),
    [
        (None, OURS, None, RolloutState.FAILED, ["disappeared", DEP]),
        (deployment("AWAITING_DELETE"), OURS, None, RolloutState.FAILED, ["AWAITING_DELETE", "shop-api"]),
        (deployment("AWAITING_DELETE", active=OLD, latest=OLD), None, None, RolloutState.FAILED, ["being deleted"]),
        (deployment("READY", active=OURS, latest=OURS), OURS, None, RolloutState.SUCCEEDED, ["live", OURS]),
        # the stale-READY trap: READY, but the old revision still serves
        (deployment("READY", active=OLD, latest=OURS), OURS, None, RolloutState.WAITING, ["still serves", OLD]),
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("BUILDING"), RolloutState.WAITING, ["BUILDING"]),
        (deployment("AWAITING_DATABASE", active=OURS, latest=OURS), OURS, None, RolloutState.WAITING, ["active"]),
        (deployment("READY", active=OLD, latest=NEWER), OURS, None, RolloutState.FAILED, ["superseded by", NEWER]),
        (
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            revision("BUILD_FAILED", message="npm ci failed"),
            RolloutState.FAILED,
            ["BUILD_FAILED", "npm ci failed", "shop-api", DEP],
        ),
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("DEPLOY_FAILED"), RolloutState.FAILED, []),
        # skipped: superseded, never a failed build; seen before the newer revision shows, the next look names it
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("SKIPPED"), RolloutState.WAITING, ["skipped"]),
        (
            deployment("READY", active=OLD, latest=NEWER),
            OURS,
            revision("SKIPPED"),
            RolloutState.FAILED,
            ["superseded by", NEWER, "SKIPPED, never built"],
        ),
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("INTERRUPTED"), RolloutState.FAILED, []),
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("CREATE_FAILED"), RolloutState.FAILED, []),
        # a failed status of another revision says nothing about ours
        (deployment("READY", active=OLD, latest=OURS), OURS, revision("BUILD_FAILED", NEWER), RolloutState.WAITING, []),
        (deployment("READY", active=OLD, latest=OLD), None, None, RolloutState.SUCCEEDED, ["READY"]),
        (deployment("UNUSED", active=OLD, latest=OLD), None, None, RolloutState.WAITING, ["UNUSED"]),
    ],
)
def test_verdict(
    dep: Deployment | None, revision_id: str | None, rev: Revision | None, state: RolloutState, words: list[str]
) -> None:
    verdict = rollout_verdict(dep, revision_id, rev, deployment_id=DEP)
    assert verdict.state is state
    assert verdict.is_done is (state is not RolloutState.WAITING)
    for word in words:
        assert word in verdict.message


def test_a_skipped_revision_is_superseded_even_by_a_latest_a_rollback_allows() -> None:
    """A rollback may let a newer revision stay the latest while its own goes live; a skipped one never will."""
    seen = deployment("READY", active=OLD, latest=NEWER)
    waiting = rollout_verdict(seen, OURS, revision("QUEUED"), allowed_latest_revision_id=NEWER)
    assert waiting.state is RolloutState.WAITING
    skipped = rollout_verdict(seen, OURS, revision("SKIPPED"), allowed_latest_revision_id=NEWER)
    assert skipped.state is RolloutState.FAILED and f"superseded by {NEWER}" in skipped.message


def test_state_key_changes_only_with_what_was_seen() -> None:
    first = rollout_verdict(deployment(updated_at=T0), OURS)
    same = rollout_verdict(deployment(updated_at=T0 + timedelta(seconds=5)), OURS)
    building = rollout_verdict(deployment(), OURS, revision("BUILDING"))
    live = rollout_verdict(deployment(active=OURS), OURS)
    assert first.key == same.key
    assert len({first.key, building.key, live.key}) == 3


def test_awaits_revision_build() -> None:
    assert awaits_revision_build(deployment(active=OLD, latest=OURS), OURS)
    assert not awaits_revision_build(deployment(active=OURS, latest=OURS), OURS)
    assert not awaits_revision_build(deployment(active=OLD, latest=NEWER), OURS)
    assert not awaits_revision_build(None, OURS)
    assert not awaits_revision_build(deployment(), None)


def test_revision_check_schedule() -> None:
    now = [0.0]
    schedule = RevisionCheckSchedule(60.0, clock=lambda: now[0])
    building = deployment(active=OLD, latest=OURS, updated_at=T0)
    assert schedule.due(building, OURS)
    schedule.mark(building)
    now[0] = 30.0
    assert not schedule.due(building, OURS)  # nothing changed, interval not over
    assert schedule.due(building, OURS, force=True)  # a final check asks anyway
    assert schedule.due(deployment(active=OLD, latest=OURS, updated_at=T0 + timedelta(seconds=1)), OURS)
    now[0] = 60.0
    assert schedule.due(building, OURS)  # interval over
    assert not schedule.due(deployment(active=OURS, latest=OURS), OURS)  # already active: no use
    schedule.disabled = True
    assert not schedule.due(building, OURS, force=True)
    with pytest.raises(ValueError, match="revision_check_interval"):
        RevisionCheckSchedule(-1)


def test_schedule_reasons_tell_urgent_from_unhurried_calls() -> None:
    now = [100.0]
    schedule = RevisionCheckSchedule(600.0, clock=lambda: now[0])
    building = deployment(active=OLD, latest=OURS)
    assert schedule.reason(building, OURS) == "first"
    schedule.mark(building)
    assert schedule.reason(building, OURS) is None
    assert schedule.reason(building, OURS, force=True) == "final"
    assert schedule.reason(deployment(active=OLD, latest=OURS, updated_at=T0 + timedelta(seconds=1)), OURS) == "changed"
    now[0] += 600
    assert schedule.reason(building, OURS) == "timer"
    assert schedule.last_asked == 100.0


def test_a_change_after_the_first_sighting_is_urgent_before_any_call() -> None:
    schedule = RevisionCheckSchedule(600.0, clock=lambda: 0.0)
    building = deployment(active=OLD, latest=OURS, updated_at=T0)
    assert schedule.reason(building, OURS) == "first"
    schedule.seen(building)
    assert schedule.reason(building, OURS) == "first"  # seen, not asked: still unhurried
    moved = deployment(active=OLD, latest=OURS, updated_at=T0 + timedelta(seconds=1))
    assert schedule.reason(moved, OURS) == "changed"  # e.g. its build failed: asked at once
    schedule.seen(moved)  # only the first sighting is the baseline
    assert schedule.reason(moved, OURS) == "changed"
    schedule.mark(moved)
    assert schedule.reason(moved, OURS) is None


@pytest.mark.parametrize("lists", [1, 3, 10])
def test_look_budget_starts_full_then_earns_a_tenth_of_the_list_requests(lists: int) -> None:
    budget = RevisionLookBudget()
    assert budget.grant(lists) == lists  # the first round may look at once
    budget.spend(lists)
    spent = []
    for _ in range(100):
        allowed = budget.grant(lists)
        budget.spend(allowed)
        spent.append(allowed)
    assert sum(spent) == lists * 100 // 10  # one call per ten list requests
    assert max(spent) <= max(1, lists // 10 + 1)  # spread evenly, no burst every tenth round


def test_look_budget_holds_at_most_one_rounds_list_requests_and_keeps_what_is_unspent() -> None:
    budget = RevisionLookBudget()
    assert budget.grant(2) == 2
    for _ in range(50):  # nothing due for a long time: the bucket stays at its cap
        assert budget.grant(2) == 2
    budget.spend(1)
    assert budget.grant(2) == 1  # 1 call and 2 tenths left, plus 2 tenths
    assert budget.grant(2) == 1
    budget.spend(1)
    assert budget.grant(0) == 0  # no rollout waiting: the cap is 0


def test_without_a_revision_ready_with_a_newer_revision_building_is_not_done() -> None:
    # A template that rendered "None" must not fall into the stale-READY trap.
    verdict = rollout_verdict(deployment(active=OLD, latest=OURS), None)
    assert verdict.state is RolloutState.WAITING and "still rolling out" in verdict.message
    assert rollout_verdict(deployment(active=OURS, latest=OURS), None).state is RolloutState.SUCCEEDED


# ------------------------------------------------------------------- the exact lines a user reads
NAME = f"deployment 'shop-api' ({DEP})"


@pytest.mark.parametrize(
    ("dep", "revision_id", "rev", "state", "message"),
    [
        pytest.param(
            None,
            OURS,
            None,
            RolloutState.FAILED,
            f"deployment {DEP} disappeared: the service no longer lists it (awaited revision {OURS})",
            id="gone",
        ),
        pytest.param(
            deployment("AWAITING_DELETE"),
            OURS,
            None,
            RolloutState.FAILED,
            f"{NAME} is being deleted (status AWAITING_DELETE); revision {OURS} will never go live",
            id="deleting",
        ),
        pytest.param(
            deployment("AWAITING_DELETE", active=OLD, latest=OLD),
            None,
            None,
            RolloutState.FAILED,
            f"{NAME} is being deleted (status AWAITING_DELETE); it will never be READY again",
            id="deleting-without-revision",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OLD),
            None,
            None,
            RolloutState.SUCCEEDED,
            f"{NAME} is READY (active revision {OLD})",
            id="ready-without-revision",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            None,
            None,
            RolloutState.WAITING,
            f"{NAME} is READY but revision {OURS} is still rolling out (active {OLD}); waiting for it",
            id="ready-newer-rolling-out",
        ),
        pytest.param(
            deployment("UNUSED", active=OLD, latest=OLD),
            None,
            None,
            RolloutState.WAITING,
            f"{NAME} has status UNUSED, waiting for READY",
            id="not-ready-without-revision",
        ),
        pytest.param(
            deployment("READY", active=OURS, latest=OURS),
            OURS,
            None,
            RolloutState.SUCCEEDED,
            f"{NAME}: revision {OURS} is live (status READY)",
            id="live",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            revision("BUILD_FAILED", message="npm ci failed"),
            RolloutState.FAILED,
            f"{NAME}: revision {OURS} ended with status BUILD_FAILED: npm ci failed (active revision is still {OLD})",
            id="build-failed",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            revision("DEPLOY_FAILED"),
            RolloutState.FAILED,
            f"{NAME}: revision {OURS} ended with status DEPLOY_FAILED (active revision is still {OLD})",
            id="failed-without-status-message",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            revision("DEPLOY_FAILED", message=""),
            RolloutState.FAILED,
            f"{NAME}: revision {OURS} ended with status DEPLOY_FAILED (active revision is still {OLD})",
            id="failed-with-empty-status-message",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=NEWER),
            OURS,
            None,
            RolloutState.FAILED,
            f"{NAME}: revision {OURS} was superseded by {NEWER}, a newer revision; it is not active "
            f"(active revision {OLD}, status READY)",
            id="superseded",
        ),
        pytest.param(
            deployment("AWAITING_DATABASE", active=OURS, latest=OURS),
            OURS,
            None,
            RolloutState.WAITING,
            f"{NAME}: revision {OURS} is active, waiting for status READY (now AWAITING_DATABASE)",
            id="active-not-ready",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            None,
            RolloutState.WAITING,
            f"{NAME} is READY but still serves revision {OLD}; waiting for revision {OURS}",
            id="stale-ready",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            OURS,
            revision("BUILDING"),
            RolloutState.WAITING,
            f"{NAME} is READY but still serves revision {OLD}; waiting for revision {OURS}, revision status BUILDING",
            id="stale-ready-building",
        ),
        pytest.param(
            deployment("AWAITING_DATABASE", active=OLD, latest=OURS),
            OURS,
            None,
            RolloutState.WAITING,
            f"{NAME} has status AWAITING_DATABASE (active revision {OLD}); waiting for revision {OURS}",
            id="not-ready-latest-not-active",
        ),
        pytest.param(
            deployment("UNKNOWN", active=None, latest=OURS),
            OURS,
            revision("DEPLOYING"),
            RolloutState.WAITING,
            f"{NAME} has status UNKNOWN (active revision None); waiting for revision {OURS}, revision status DEPLOYING",
            id="not-ready-latest-deploying",
        ),
    ],
)
def test_the_line_a_user_reads(
    dep: Deployment | None, revision_id: str | None, rev: Revision | None, state: RolloutState, message: str
) -> None:
    verdict = rollout_verdict(dep, revision_id, rev, deployment_id=DEP)
    assert (verdict.state, verdict.message) == (state, message)
    assert ": None" not in verdict.message


def test_a_gone_deployment_without_ids_still_reads_well() -> None:
    verdict = rollout_verdict(None, None)
    assert verdict.message == (
        "deployment (unknown id) disappeared: the service no longer lists it (awaited revision (any))"
    )
    assert verdict.key == ("gone",) and verdict.state is RolloutState.FAILED


def test_keys_name_the_state_and_everything_seen() -> None:
    key = rollout_verdict(deployment("READY", active=OLD, latest=OURS), OURS, revision("BUILDING")).key
    assert key == ("waiting", "READY", OLD, OURS, "BUILDING")
    assert rollout_verdict(None, OURS, deployment_id=DEP).key == ("gone",)


def test_schedule_accepts_zero_and_measures_time_since_the_last_call() -> None:
    now = [1000.0]
    schedule = RevisionCheckSchedule(0.0, clock=lambda: now[0])
    assert schedule.last_asked == float("-inf")
    building = deployment(active=OLD, latest=OURS)
    schedule.mark(building)
    assert schedule.reason(building, OURS) == "timer"  # an interval of 0: every look asks
    slow = RevisionCheckSchedule(10.0, clock=lambda: now[0])
    slow.mark(building)
    now[0] += 9.5
    assert slow.reason(building, OURS) is None  # 9.5 s since the call, not 2009.5
    with pytest.raises(ValueError, match=r"^revision_check_interval must be >= 0 seconds, got -0.5$"):
        RevisionCheckSchedule(-0.5)


# ------------------------------------------------------------------- the bake: does the revision stay live?
@pytest.mark.parametrize(
    ("dep", "message"),
    [
        pytest.param(deployment("READY", active=OURS, latest=OURS), None, id="still-live"),
        # a newer revision built meanwhile but is not active yet: ours still serves
        pytest.param(deployment("READY", active=OURS, latest=NEWER), None, id="still-live-newer-building"),
        pytest.param(
            deployment("AWAITING_DATABASE", active=OURS, latest=OURS),
            f"{NAME} left READY during the bake of revision {OURS}: status AWAITING_DATABASE",
            id="left-ready",
        ),
        pytest.param(
            deployment("AWAITING_DELETE", active=OURS, latest=OURS),
            f"{NAME} left READY during the bake of revision {OURS}: status AWAITING_DELETE",
            id="going-away",
        ),
        pytest.param(
            deployment("READY", active=NEWER, latest=NEWER),
            f"{NAME} left revision {OURS} during the bake: revision {NEWER} is active now (status READY)",
            id="another-revision-active",
        ),
        pytest.param(
            deployment("READY", active=OLD, latest=OURS),
            f"{NAME} left revision {OURS} during the bake: revision {OLD} is active now (status READY)",
            id="rolled-back-to-the-old-revision",
        ),
        # both changed: the revision switch is what the user is told (it is the bigger news)
        pytest.param(
            deployment("AWAITING_DATABASE", active=NEWER, latest=NEWER),
            f"{NAME} left revision {OURS} during the bake: revision {NEWER} is active now (status AWAITING_DATABASE)",
            id="another-revision-and-not-ready",
        ),
        pytest.param(
            deployment("AWAITING_DATABASE", active=None, latest=OURS),
            f"{NAME} left revision {OURS} during the bake: no revision is active now (status AWAITING_DATABASE)",
            id="no-revision-active",
        ),
    ],
)
def test_the_bake_line_a_user_reads(dep: Deployment, message: str | None) -> None:
    assert bake_verdict(dep, OURS) == message
