"""DORA figures from the record (pure: no Airflow, no I/O): how often this provider's tasks roll changes out, how
often a change fails, how long a failed change takes to undo, and how long a change takes from its PATCH to live.

What counts, from the entries of :mod:`airflow_provider.decisions.record` (every task's, fleet rows included):

- **A rollout** is a revision a task created with a PATCH the service accepted (a ``rolled_out`` entry; a task that
  kept no record but emitted a ``rolled_out`` asset event counts from its ``landed`` entry). One per deployment and
  revision, however many tries or tasks recorded it; it falls in the window by when it was rolled out. A rollout
  whose revision never served (its build or deploy failed, or it was superseded before going live) is counted
  apart (``never_served``): nothing reached production, nothing was restored.
- **A failed rollout** was rejected (``verify``, the bake, an analysis: the task's own or a gate's), timed out, or
  rolled back (with its wave too). A rollout **landed** when it went live and passed what judged it, and was not
  rolled back since. The others are **in progress** (rolled out, or being judged).
- **Rollouts per day**: rollouts that went out (never-served ones left out) over the window's days.
- **Change failure rate**: failed rollouts over decided ones (failed + landed); ``None`` when none is decided.
- **Time to restore**: from a failed verdict (rejected or timed out) to the previous build serving again (its
  rollback's revision live), for each failed rollout whose rollback went live.
- **Time from PATCH to live**: from the PATCH being accepted to the revision serving (when judging started, or
  when it landed for a task that does not judge: for a fleet row, when it was decided landed, after its bake).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider.decisions.record import FAILURE_KINDS, Kind

__all__ = ["DAY", "RolloutFacts", "figures", "rollout_facts", "seconds_stats"]

DAY = 86_400.0
"""Seconds in a day."""


@dataclass
class RolloutFacts:
    """What the record says of one rollout (a deployment's revision), its times in Unix seconds.

    :param deployment_id: the deployment.
    :param revision_id: the revision rolled out.
    :param rolled_out_at: when the PATCH was accepted (``None``: not recorded).
    :param live_at: when it was first seen serving (judging started, or landed).
    :param landed: whether a task declared it landed.
    :param failed_at: when it was first judged failed (rejected or timed out).
    :param rolled_back: whether a rollback of it went live (with its wave too).
    :param restored_at: when that rollback's revision first served.
    :param never_served: whether its rollout failed before it served (a failed build...).
    """

    deployment_id: str
    revision_id: str
    rolled_out_at: float | None = None
    live_at: float | None = None
    landed: bool = False
    failed_at: float | None = None
    rejected: bool = False
    rolled_back: bool = False
    restored_at: float | None = None
    never_served: bool = False

    @property
    def at(self) -> float | None:
        """When it was rolled out (else when it was seen live)."""
        return self.rolled_out_at if self.rolled_out_at is not None else self.live_at

    @property
    def failed(self) -> bool:
        """Rejected, timed out or rolled back."""
        return self.rejected or self.rolled_back

    @property
    def state(self) -> str:
        """``failed``, ``landed``, ``never_served`` or ``in_progress``."""
        if self.failed:
            return "failed"
        if self.never_served:
            return "never_served"
        return "landed" if self.landed else "in_progress"


def _earliest(current: float | None, value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return current
    return float(value) if current is None else min(current, float(value))


def rollout_facts(entries: Iterable[Mapping[str, Any]]) -> list[RolloutFacts]:
    """The rollouts the entries tell of (see the module), each once.

    :param entries: record entries of any tasks (fleet rows and asset events read as entries included); the same
        fact told twice counts once.
    """
    facts: dict[tuple[str, str], RolloutFacts] = {}
    rollbacks: list[Mapping[str, Any]] = []

    def of(item: Mapping[str, Any]) -> RolloutFacts:
        key = (str(item.get("deployment_id")), str(item.get("revision_id")))
        if key not in facts:
            facts[key] = RolloutFacts(*key)
        return facts[key]

    for item in entries:
        kind, at = item.get("kind"), item.get("at")
        if not item.get("deployment_id") or not item.get("revision_id"):
            continue
        if kind == Kind.ROLLED_OUT:
            fact = of(item)
            fact.rolled_out_at = _earliest(fact.rolled_out_at, at)
        elif kind in (Kind.JUDGING, Kind.LANDED):
            fact = of(item)
            fact.live_at = _earliest(fact.live_at, at)
            fact.landed = fact.landed or kind == Kind.LANDED
        elif kind in FAILURE_KINDS:
            fact = of(item)
            fact.rejected = True
            fact.failed_at = _earliest(fact.failed_at, at)
        elif kind == Kind.FAILED:
            of(item).never_served = True
        elif kind == Kind.ROLLED_BACK and item.get("rolled_back_from"):
            rollbacks.append(item)
    for item in rollbacks:
        restored = facts.get((str(item.get("deployment_id")), str(item.get("rolled_back_from"))))
        if restored is not None:
            restored.rolled_back = True
            restored.restored_at = _earliest(restored.restored_at, item.get("at"))
    return [fact for fact in facts.values() if fact.rolled_out_at is not None or fact.landed]


def seconds_stats(values: Iterable[float]) -> dict[str, Any]:
    """``{"count", "median_seconds", "mean_seconds", "max_seconds"}`` of durations (``None`` values when none).

    :param values: durations in seconds.
    """
    kept = sorted(value for value in values if value >= 0)
    if not kept:
        return {"count": 0, "median_seconds": None, "mean_seconds": None, "max_seconds": None}
    return {
        "count": len(kept),
        "median_seconds": round(statistics.median(kept), 1),
        "mean_seconds": round(statistics.fmean(kept), 1),
        "max_seconds": round(kept[-1], 1),
    }


def figures(entries: Iterable[Mapping[str, Any]], start: float, end: float) -> dict[str, Any]:
    """The DORA figures of the rollouts rolled out from ``start`` to ``end`` (see the module for what counts).

    :param entries: record entries (of the deployments in question: one, or a connection's).
    :param start: the window's start (Unix seconds).
    :param end: its end.
    """
    if end <= start:
        raise ValueError(f"the window must end after it starts, got {start} to {end}")
    within = [fact for fact in rollout_facts(entries) if fact.at is not None and start <= fact.at <= end]
    states = {state: [fact for fact in within if fact.state == state] for state in ("failed", "landed")}
    went_out = [fact for fact in within if fact.state != "never_served"]
    decided = len(states["failed"]) + len(states["landed"])
    days = (end - start) / DAY
    restores = [
        fact.restored_at - fact.failed_at
        for fact in states["failed"]
        if fact.failed_at is not None and fact.restored_at is not None
    ]
    to_live = [fact.live_at - fact.rolled_out_at for fact in went_out if fact.live_at and fact.rolled_out_at]
    return {
        "window": {"from": _iso(start), "to": _iso(end), "days": round(days, 3)},
        "deployments": len({fact.deployment_id for fact in went_out}),
        "rollouts": len(went_out),
        "rollouts_per_day": round(len(went_out) / days, 3),
        "landed": len(states["landed"]),
        "failed": len(states["failed"]),
        "in_progress": sum(fact.state == "in_progress" for fact in within),
        "never_served": sum(fact.state == "never_served" for fact in within),
        "change_failure_rate": round(len(states["failed"]) / decided, 4) if decided else None,
        "time_to_restore": seconds_stats(restores),
        "patch_to_live": seconds_stats(to_live),
    }


def _iso(value: float) -> str:
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat()
