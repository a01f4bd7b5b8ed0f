"""Emulated application behaviour: how each revision's app answers over time, and the traffic it serves.

A revision's :class:`BehaviourPlan` (defined in :mod:`airflow_provider.emulator.plans`, with the rules) says
what its app does while it is live: the share of requests that fail (``error_rate``), how long a request
takes (``latency_ms``), what its health check answers (``health_status``), how many requests it serves per
second of emulated time (``requests_per_second``), and optionally another :class:`Behaviour` (``then``) from
``after_seconds`` after it went live. A plan is set per revision
(:meth:`~airflow_provider.emulator.state.apps.AppSide.set_behaviour`), for the next revision created, or by
a :class:`BehaviourRule` (a glob over ``image_uri`` / ``repo_ref``); a revision with none behaves like
:data:`DEFAULT_BEHAVIOUR` (no errors, instant answers, healthy), and a revision marked unhealthy (see
:mod:`airflow_provider.emulator.health`) fails every request. A change applies from when it is made (traffic
already served stays as it was, so counters only grow); a redeploy copies the plan of the revision it
redeploys (same build, same behaviour).

Traffic is computed lazily from the emulator clock, like everything else: a revision serves during its
serving spans (from going live until another revision goes live), ``requests_per_second`` requests per
second, numbered from the start of the span; the first ``k`` requests of a phase hold
``floor(k * error_rate)`` errors, so counts only grow and the same window always gives the same numbers.
Every request of a phase takes exactly that phase's ``latency_ms``; of the first ``k`` requests of a phase,
``floor(k * share)`` are scored for each feedback key (``feedback``: the tracing service's ``feedback_stats``): a
score in 0..1 is a 0/1 evaluator's (of the first ``j`` scored runs, ``floor(j * score)`` get 1, the others 0), any
other score is every scored run's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

# The plans and rules live in .plans (the records hold plans; this module reads the records). They stay
# importable from here, where they were defined before.
from .plans import DEFAULT_BEHAVIOUR as DEFAULT_BEHAVIOUR
from .plans import FAILING as FAILING
from .plans import MAX_HEALTH_SLEEP_SECONDS as MAX_HEALTH_SLEEP_SECONDS
from .plans import Behaviour as Behaviour
from .plans import BehaviourPlan as BehaviourPlan
from .plans import BehaviourRule as BehaviourRule
from .plans import RevisionGlob as RevisionGlob

if TYPE_CHECKING:
    from .records import DeploymentRecord, RevisionRecord

EPOCH = datetime.min.replace(tzinfo=timezone.utc)
"""The start of every timeline: before anything was set."""

RuleHistory = list[tuple[datetime, tuple[BehaviourRule, ...]]]
"""The behaviour rules in force from each time on, oldest first (starting at :data:`EPOCH`)."""

Timeline = list[tuple[datetime, BehaviourPlan]]
"""The plan a revision follows from each time on, oldest first (starting at :data:`EPOCH`)."""


def plan_timeline(revision: RevisionRecord, rule_history: RuleHistory, *, unhealthy: bool = False) -> Timeline:
    """The plans ``revision`` follows over time: from each time on, the last plan set for it, else the newest
    matching rule's, else :data:`DEFAULT_BEHAVIOUR`. A change applies from when it was made, never to
    traffic already served.

    :param revision: the revision.
    :param rule_history: the behaviour rules in force over time.
    :param unhealthy: the revision is marked unhealthy (a mark has no time): :data:`FAILING` throughout.
    """
    if unhealthy:
        return [(EPOCH, FAILING)]
    own = revision.behaviour_changes
    times = sorted({EPOCH, *(at for at, _ in own), *(at for at, _ in rule_history)})
    timeline: Timeline = []
    for at in times:
        chosen = next((plan for changed, plan in reversed(own) if changed <= at), None)
        if chosen is None:
            rules = next((rules for changed, rules in reversed(rule_history) if changed <= at), ())
            matching = [rule for rule in rules if rule.matches(revision)]
            chosen = matching[-1].plan() if matching else DEFAULT_BEHAVIOUR
        if not timeline or timeline[-1][1] != chosen:
            timeline.append((at, chosen))
    return timeline


def plan_at(timeline: Timeline, at: datetime) -> BehaviourPlan:
    """The plan of ``timeline`` in force at ``at``."""
    return next((plan for start, plan in reversed(timeline) if start <= at), timeline[0][1])


@dataclass(frozen=True)
class ServingSpan:
    """A time a revision was the live one.

    :param revision_id: the revision.
    :param start: when it went live.
    :param end: when another revision went live (``None``: still live).
    """

    revision_id: str
    start: datetime
    end: datetime | None


def serving_spans(record: DeploymentRecord) -> list[ServingSpan]:
    """Every span during which one of ``record``'s revisions was live, oldest first."""
    history = record.serving_history
    if not history and record.resource.active_revision_id is not None and record.active_since is not None:
        history = [(record.resource.active_revision_id, record.active_since)]  # seeded live, never replaced
    return [
        ServingSpan(revision_id, start, history[index + 1][1] if index + 1 < len(history) else None)
        for index, (revision_id, start) in enumerate(history)
    ]


@dataclass(frozen=True)
class TrafficGroup:
    """Requests of one phase of one span inside a window: all take the same time.

    :param requests: how many.
    :param errors: how many of them failed.
    :param latency_ms: the time each took.
    :param feedback: ``(key, runs scored, sum of their scores, sum of their squares)`` of each feedback key the
        phase's runs get.
    """

    requests: int
    errors: int
    latency_ms: float
    feedback: tuple[tuple[str, int, float, float], ...] = ()


def _served(behaviour: Behaviour, seconds: float) -> tuple[int, int]:
    """Requests and errors of the first ``seconds`` of a phase."""
    if seconds <= 0:
        return 0, 0
    # A tiny tolerance: float time arithmetic must not lose the request due exactly at a whole second.
    requests = math.floor(behaviour.requests_per_second * seconds + 1e-9)
    return requests, math.floor(requests * behaviour.error_rate + 1e-9)


def span_traffic(timeline: Timeline, span: ServingSpan, since: datetime, until: datetime) -> list[TrafficGroup]:
    """The requests ``span`` served between ``since`` and ``until``, per plan in force and phase.

    :param timeline: the revision's plans over time (see :func:`plan_timeline`).
    :param span: when the revision was live.
    :param since: start of the window.
    :param until: end of the window (the emulated now, at most).
    """
    end = until if span.end is None else min(span.end, until)
    start = max(span.start, since)
    groups: list[TrafficGroup] = []
    for index, (plan_start, plan) in enumerate(timeline):
        plan_end = timeline[index + 1][0] if index + 1 < len(timeline) else None
        low = max(start, plan_start)
        high = end if plan_end is None else min(end, plan_end)
        if high > low:
            groups += _plan_traffic(plan, (low - span.start).total_seconds(), (high - span.start).total_seconds())
    return groups


def _plan_traffic(plan: BehaviourPlan, offset_from: float, offset_to: float) -> list[TrafficGroup]:
    """Requests served under ``plan`` from ``offset_from`` to ``offset_to`` seconds after going live."""
    switch = plan.after_seconds if plan.then is not None and plan.after_seconds is not None else math.inf
    phases = [(plan.first, 0.0, switch)]
    if plan.then is not None:
        phases.append((plan.then, switch, math.inf))
    groups = []
    for behaviour, phase_start, phase_end in phases:
        low = min(max(offset_from, phase_start), phase_end) - phase_start
        high = min(max(offset_to, phase_start), phase_end) - phase_start
        before, errors_before = _served(behaviour, low)
        after, errors_after = _served(behaviour, high)
        if after > before:
            scored = tuple(
                _scores(key, _scored(before, given.share), _scored(after, given.share), given.score)
                for key, given in sorted(behaviour.feedback.items())
            )
            groups.append(TrafficGroup(after - before, errors_after - errors_before, behaviour.latency_ms, scored))
    return groups


def _scores(key: str, scored_before: int, scored_after: int, score: float) -> tuple[str, int, float, float]:
    """``(key, runs scored, sum of scores, sum of squares)`` of the scored runs numbered ``scored_before`` to
    ``scored_after`` of a phase: 0/1 scores for a score in 0..1 (counts only grow), else the score itself."""
    count = scored_after - scored_before
    if 0.0 <= score <= 1.0:
        ones = math.floor(scored_after * score + 1e-9) - math.floor(scored_before * score + 1e-9)
        return key, count, float(ones), float(ones)
    return key, count, count * score, count * score * score


def _scored(requests: int, share: float) -> int:
    """How many of the first ``requests`` runs of a phase are scored (counts only grow)."""
    return math.floor(requests * share + 1e-9)


def feedback_stats(groups: list[TrafficGroup]) -> dict[str, dict[str, Any]]:
    """The tracing service's ``feedback_stats`` of the runs in ``groups``: per key, ``n`` (runs scored), ``avg``
    (their mean score), ``stdev``, ``min``, ``max``, ``median``, ``type`` (``continuous``: numeric scores),
    ``errors`` (0), ``values`` (``{}``) and ``contains_thread_feedback`` (false: runs are scored, not threads);
    keys without a scored run left out."""
    parts_of: dict[str, list[tuple[int, float]]] = {}
    for group in groups:
        for key, scored, total, squares in group.feedback:
            if scored > 0:
                parts_of.setdefault(key, []).extend(_score_parts(scored, total, squares))
    stats: dict[str, dict[str, Any]] = {}
    for key, parts in sorted(parts_of.items()):
        parts = [(count, score) for count, score in parts if count > 0]
        n = sum(count for count, _ in parts)
        avg = sum(count * score for count, score in parts) / n
        variance = sum(count * (score - avg) ** 2 for count, score in parts) / n
        scores = [score for _, score in parts]
        stats[key] = {
            "n": n,
            "avg": avg,
            "stdev": math.sqrt(variance),
            "min": min(scores),
            "max": max(scores),
            "median": _median(parts, n),
            "type": "continuous",
            "errors": 0,
            "values": {},
            "contains_thread_feedback": False,
        }
    return stats


def _score_parts(scored: int, total: float, squares: float) -> list[tuple[int, float]]:
    """``(how many, score)`` of a group's scored runs: its 1s and 0s (a 0/1 evaluator's: the sum of squares is the
    sum), or every run at the one score it got."""
    if abs(squares - total) < 1e-9 and 0.0 <= total <= scored:
        ones = round(total)
        return [(ones, 1.0), (scored - ones, 0.0)]
    return [(scored, total / scored)]


def _median(parts: list[tuple[int, float]], n: int) -> float:
    """The median of ``n`` scores given as ``(how many, score)`` parts."""
    ordered = sorted(parts, key=lambda part: part[1])

    def at(position: int) -> float:
        seen = 0
        for count, score in ordered:
            seen += count
            if position < seen:
                return score
        return ordered[-1][1]

    return (at((n - 1) // 2) + at(n // 2)) / 2


def percentile_seconds(groups: list[TrafficGroup], quantile: float) -> float | None:
    """The latency (seconds) at ``quantile`` (0..1) of the requests in ``groups``; ``None`` without any."""
    total = sum(group.requests for group in groups)
    if total == 0:
        return None
    rank = max(1, math.ceil(quantile * total))
    seen = 0
    for group in sorted(groups, key=lambda group: group.latency_ms):
        seen += group.requests
        if seen >= rank:
            return group.latency_ms / 1000.0
    return max(group.latency_ms for group in groups) / 1000.0


def run_stats(groups: list[TrafficGroup], last_request_at: datetime | None) -> dict[str, Any]:
    """The tracing service's run statistics of the requests in ``groups`` (nulls when there are none)."""
    runs = sum(group.requests for group in groups)
    errors = sum(group.errors for group in groups)
    return {
        "run_count": runs,
        "error_count": errors,
        "error_rate": errors / runs if runs else None,
        "latency_p50": percentile_seconds(groups, 0.5),
        "latency_p99": percentile_seconds(groups, 0.99),
        "first_token_p50": None,
        "first_token_p99": None,
        "total_tokens": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "median_tokens": 0,
        "total_cost": None,
        "prompt_cost": None,
        "completion_cost": None,
        "last_run_start_time": last_request_at.isoformat() if runs and last_request_at is not None else None,
        "feedback_stats": feedback_stats(groups),
        "run_facets": [],
    }
