"""Replay an analysis on statistics you already have: the same judging code the tasks run, with no request sent.

Backtest a gate on last week's data before trusting it with a rollout (Kayenta's standalone analysis): give the
baseline's statistics (what the preflight would have measured: the revision that served before, over the baseline
window) and each round's (the new revision's runs since it went live, as ``POST /runs/stats`` answers them), and
:func:`replay` returns the verdict, the round that decided it and every measurement, exactly as
:class:`~airflow_provider.operators.patch.PatchDeploymentOperator` would have recorded them::

    from airflow_provider.analysis import Analysis, TracingProjectCheck
    from airflow_provider.analysis.rate_test import RateTest
    from airflow_provider.analysis.replay import replay

    analysis = Analysis(checks=[TracingProjectCheck(rate_test=RateTest(), name="errors")], count=30)
    result = replay(
        analysis,
        baseline={"run_count": 7200, "error_count": 216},
        rounds=[{"run_count": 50 * k, "error_count": 3 * k} for k in range(1, 31)],  # cumulative, 6 % errors
    )
    result.verdict, result.decided_round  # ('failed', 17)

Statistics are the tracing service's ``run_stats`` shape: ``run_count``, ``error_count`` (or ``error_rate``),
``latency_p50``/``latency_p99`` (seconds) and ``feedback_stats`` (``{key: {"n", "avg", "stdev"}}``). Rounds are
cumulative since the revision went live, as the analysis measures them; ``cumulative=False`` takes one interval's
statistics per round and adds them up (counts and feedback sums add; latency percentiles cannot, each interval's is
used as it is). ``baseline_first_half`` (the first half of the baseline window) feeds the drift guard. A control
group (a fleet canary's ``canary_baseline="control_group"``) is given as members, each with its baseline and rounds.

Only :class:`~airflow_provider.analysis.definitions.TracingProjectCheck` checks can be replayed (the others measure
live endpoints). Pure: no I/O, no Airflow; ``bench/judge_power.py`` simulates every round through it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider.analysis.definitions import (
    Analysis,
    AnalysisTarget,
    Measurement,
    TracingProjectCheck,
    Verdict,
)
from airflow_provider.analysis.judge import Judgement
from airflow_provider.analysis.reading import tracing_reading
from airflow_provider.analysis.rounds import BASELINE_ROUND, RoundJudging, measurement_of
from airflow_provider.analysis.statistics.control import pool, pooled_checks

__all__ = ["ControlMember", "ReplayResult", "replay"]

_NAMESPACE = uuid.UUID("0f5d1c7e-3b0a-4c55-9d6e-2a8f7b1e4c90")


@dataclass(frozen=True)
class ControlMember:
    """A member of a canary's control group, for :func:`replay`.

    :param name: the deployment's name.
    :param baseline: its statistics over the baseline window (before the rollout).
    :param rounds: its statistics each round, over the canary's window (cumulative unless the replay says not).
    """

    name: str
    baseline: Mapping[str, Any]
    rounds: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ReplayResult:
    """What the analysis would have decided.

    :param verdict: ``passed``, ``failed`` or ``inconclusive``.
    :param failing_check: the check that decided a verdict other than passed.
    :param reason: the reason, as the task would have said it.
    :param decided_round: the round the verdict was reached in (a failed one as soon as shown; ``passed`` and an
        inconclusive end after the last round).
    :param rounds: the rounds judged (fewer than given when the verdict came early).
    :param complete: every round of the analysis was given (``count`` rounds, when it has a count).
    :param measurements: every measurement, in order.
    :param baseline: the baseline's measurements (round 0).
    """

    verdict: Verdict
    failing_check: str | None
    reason: str
    decided_round: int | None
    rounds: int
    complete: bool
    measurements: list[Measurement] = field(default_factory=list)
    baseline: list[Measurement] = field(default_factory=list)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _errors(stats: Mapping[str, Any]) -> int:
    counted = stats.get("error_count")
    if isinstance(counted, int) and not isinstance(counted, bool):
        return counted
    rate, runs = _number(stats.get("error_rate")), _number(stats.get("run_count")) or 0.0
    return round((rate or 0.0) * runs)


def _with_rate(stats: Mapping[str, Any]) -> dict[str, Any]:
    """``stats`` with ``error_rate`` filled from ``error_count`` when only the count was given."""
    shown = dict(stats)
    runs = _number(shown.get("run_count")) or 0.0
    if shown.get("error_rate") is None and "error_count" in shown and runs > 0:
        shown["error_rate"] = _errors(shown) / runs
    return shown


def _added(total: Mapping[str, Any] | None, interval: Mapping[str, Any]) -> dict[str, Any]:
    """The cumulative statistics after ``interval``: runs, errors and feedback sums added; other fields the
    interval's."""
    if total is None:
        return _with_rate(interval)
    runs = int(_number(total.get("run_count")) or 0) + int(_number(interval.get("run_count")) or 0)
    errors = _errors(total) + _errors(interval)
    merged = {**interval, "run_count": runs, "error_count": errors, "error_rate": errors / runs if runs else None}
    feedback: dict[str, Any] = {}
    for source in (total.get("feedback_stats") or {}, interval.get("feedback_stats") or {}):
        for key, stats in source.items():
            n, avg = _number(stats.get("n")) or 0.0, _number(stats.get("avg")) or 0.0
            spread = _number(stats.get("stdev")) or 0.0
            into = feedback.setdefault(key, {"n": 0.0, "sum": 0.0, "squares": 0.0})
            into["n"] += n
            into["sum"] += n * avg
            into["squares"] += n * (spread * spread + avg * avg)
    merged["feedback_stats"] = {
        key: {
            "n": int(parts["n"]),
            "avg": parts["sum"] / parts["n"],
            "stdev": math.sqrt(max(0.0, parts["squares"] / parts["n"] - (parts["sum"] / parts["n"]) ** 2)),
        }
        for key, parts in feedback.items()
        if parts["n"] > 0
    }
    return merged


def _cumulative(rounds: Sequence[Mapping[str, Any]], cumulative: bool) -> list[dict[str, Any]]:
    if cumulative:
        return [_with_rate(stats) for stats in rounds]
    totals: list[dict[str, Any]] = []
    for stats in rounds:
        totals.append(_added(totals[-1] if totals else None, stats))
    return totals


def _halves(
    first: Mapping[str, Any], whole: Mapping[str, Any], check: TracingProjectCheck
) -> list[dict[str, Any]] | None:
    """The two halves of the baseline window for the drift guard: the first as given, the second the whole minus it."""
    from airflow_provider.analysis.metric_conditions import feedback_key

    key = feedback_key(check.metric)
    if key is None:
        first_runs, whole_runs = int(_number(first.get("run_count")) or 0), int(_number(whole.get("run_count")) or 0)
        first_errors, whole_errors = _errors(first), _errors(whole)
        if not 0 < first_runs < whole_runs:
            return None
        return [
            {"runs": first_runs, "errors": first_errors},
            {"runs": whole_runs - first_runs, "errors": max(0, whole_errors - first_errors)},
        ]
    part, all_of = (first.get("feedback_stats") or {}).get(key), (whole.get("feedback_stats") or {}).get(key)
    if not isinstance(part, Mapping) or not isinstance(all_of, Mapping):
        return None
    first_n, whole_n = _number(part.get("n")) or 0.0, _number(all_of.get("n")) or 0.0
    first_avg, whole_avg = _number(part.get("avg")), _number(all_of.get("avg"))
    if first_avg is None or whole_avg is None or not 0 < first_n < whole_n:
        return None
    second_avg = (whole_avg * whole_n - first_avg * first_n) / (whole_n - first_n)
    return [{"runs": int(first_n), "value": first_avg}, {"runs": int(whole_n - first_n), "value": second_avg}]


def replay(
    analysis: Analysis,
    *,
    baseline: Mapping[str, Any] | None,
    rounds: Sequence[Mapping[str, Any]],
    baseline_first_half: Mapping[str, Any] | None = None,
    control: Sequence[ControlMember] | None = None,
    cumulative: bool = True,
    name: str = "replay",
    live_since: datetime | None = None,
) -> ReplayResult:
    """Judge ``analysis`` on given statistics, round by round, with the code the tasks use (no I/O).

    :param analysis: the analysis (its tracing checks; ``count`` rounds, else as many as given).
    :param baseline: the baseline's statistics (the revision serving before, over the baseline window); ``None``:
        no preflight (only checks that need no baseline can decide).
    :param rounds: each round's statistics of the new revision (cumulative since it went live, unless
        ``cumulative=False``).
    :param baseline_first_half: the first half of the baseline window's statistics (the drift guard compares it
        with the second half, the baseline minus it); ``None``: no drift guard.
    :param control: a canary's control group (each member's baseline and rounds), judged as a fleet canary with
        ``canary_baseline="control_group"``; ``None``: against the baseline.
    :param cumulative: ``rounds`` (and the members') are cumulative; ``False``: one interval each, added up here.
    :param name: the deployment's name (in details).
    :param live_since: when the revision went live (round ``k`` is ``initial_delay_seconds + k *
        interval_seconds`` later); default now.
    :raises ValueError: a check that is not a ``TracingProjectCheck``, no rounds, a member without as many rounds.
    """
    others = [check.label() for check in analysis.checks if not isinstance(check, TracingProjectCheck)]
    if others:
        raise ValueError(
            f"only TracingProjectCheck checks can be replayed (the others measure live endpoints): {', '.join(others)}"
        )
    if not rounds:
        raise ValueError("rounds: give at least one round's statistics")
    if baseline is None and any(getattr(check, "uses_baseline", False) for check in analysis.checks):
        raise ValueError("baseline: checks judged against the baseline need the baseline's statistics")
    for member in control or []:
        if len(member.rounds) < len(rounds):
            raise ValueError(
                f"control member {member.name!r} has {len(member.rounds)} rounds, fewer than {len(rounds)}"
            )
    started = live_since or datetime.now(timezone.utc)
    count = analysis.count if analysis.count is not None else len(rounds)
    checks: list[TracingProjectCheck] = [check for check in analysis.checks if isinstance(check, TracingProjectCheck)]
    labels = [check.label() for check in checks]

    def ident(label: str) -> str:
        return str(uuid.uuid5(_NAMESPACE, label))

    def measured_baseline(stats: Mapping[str, Any], who: str, first: Mapping[str, Any] | None) -> list[Measurement]:
        target = AnalysisTarget(
            deployment_id=ident(who), name=who, revision_id=ident(f"{who}/serving"), live_since=started, role="baseline"
        )
        taken = []
        for check, label in zip(checks, labels, strict=True):
            reading = tracing_reading(check, target, _with_rate(stats), who)
            measurement = measurement_of(check, label, target, reading, BASELINE_ROUND, started, lambda text: text)
            halves = _halves(first, stats, check) if first is not None else None
            if halves is not None:
                measurement["halves"] = halves
            taken.append(measurement)
        return taken

    base_measurements = measured_baseline(baseline, name, baseline_first_half) if baseline is not None else []
    members: list[dict[str, Any]] = [
        {
            "deployment_id": ident(member.name),
            "name": member.name,
            "revision_id": ident(f"{member.name}/serving"),
            "baseline": [dict(item) for item in measured_baseline(member.baseline, member.name, None)],
        }
        for member in control or []
    ]
    target = AnalysisTarget(
        deployment_id=ident(name),
        name=name,
        revision_id=ident(f"{name}/new"),
        live_since=started,
        baseline=[dict(item) for item in base_measurements] if baseline is not None else None,
        control=members if control is not None else None,
    )
    judgement = Judgement(analysis, target.revision_id, labels)
    judging = RoundJudging({target.deployment_id: judgement}, lambda text: text)
    totals = _cumulative(rounds, cumulative)
    member_totals = [_cumulative(member.rounds, cumulative) for member in control or []]
    pooled = {check.label() for check in pooled_checks(analysis)} if control is not None else set()
    member_targets = [
        AnalysisTarget(
            deployment_id=str(member["deployment_id"]),
            name=str(member["name"]),
            revision_id=str(member["revision_id"]),
            live_since=started,
            role="baseline",
        )
        for member in members
    ]
    judged = 0
    for round_number, stats in enumerate(totals[:count], start=1):
        at = started + timedelta(seconds=analysis.initial_delay_seconds + round_number * analysis.interval_seconds)
        judged = round_number
        for check, label in zip(checks, labels, strict=True):
            counts = None
            if label in pooled:
                readings = [
                    (member, tracing_reading(check, member_target, per_member[round_number - 1], member_target.name))
                    for member, member_target, per_member in zip(members, member_targets, member_totals, strict=True)
                ]
                _shown, counts = pool(check, target, readings, round_number, at)
            reading = tracing_reading(check, target, stats, name)
            judging.record(check, label, target, reading, round_number, at, counts)
        if judgement.decided:
            break
    result = judgement.finish(judged)
    return ReplayResult(
        verdict=result["verdict"],
        failing_check=result["failing_check"],
        reason=result["reason"],
        decided_round=judgement.decided_round,
        rounds=judged,
        complete=len(rounds) >= count,
        measurements=list(judgement.measurements),
        baseline=base_measurements,
    )
