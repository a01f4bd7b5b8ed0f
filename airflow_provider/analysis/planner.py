"""How long an analysis must run to decide: the runs (and, at a traffic level, the time) its statistical checks need.

Two questions per statistical check (see :mod:`~airflow_provider.analysis.statistics.sequential_judge`), each answered
for a 95 % chance (and the median):

* **to fail** a harmful revision: a rate ``1 + harmful_increase`` times the baseline's (2x errors by default), a
  score one effect worse than the boundary (a drop of 0.10 below a 0.85 baseline for ``">= baseline - 0.05"``);
* **to pass** a revision as good as its baseline (the harmful change ruled out).

Computed from the tests' own evidence (not a formula for another test): the fewest errors (or the least score) at
which a test decides after ``n`` runs is found exactly, and the chance of reaching it after ``n`` runs from the
normal approximation of the binomial count. A decision reached at an earlier look counts too, so the figures are
a little pessimistic (the bench measures the real ones). :func:`plan_analysis` is the public planner;
:func:`~airflow_provider.analysis.statistics.projection.more_runs_needed` (re-exported here) is what an undecided
round's message says.

Pure: no I/O, no Airflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider.analysis.definitions import Analysis, AnalysisTarget, TracingProjectCheck
from airflow_provider.analysis.metric_conditions import feedback_key
from airflow_provider.analysis.statistics.projection import RUNS_LIMIT, more_runs_needed
from airflow_provider.analysis.statistics.sequential_judge import SequentialJudge, is_statistical

__all__ = [
    "BASELINE_MULTIPLE",
    "RUNS_LIMIT",
    "AnalysisPlan",
    "CheckPlan",
    "more_runs_needed",
    "plan_analysis",
    "runs_to_decide",
]

BASELINE_MULTIPLE = 10
"""A baseline should hold this many times the runs a decision needs (see :func:`plan_analysis`)."""
_PLACEHOLDER_ID = "00000000-0000-0000-0000-000000000000"


def _normal_upper(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _chance_at_least(threshold: float, trials: float, rate: float) -> float:
    """``P(X >= threshold)`` for ``X ~ Binomial(trials, rate)``, normal approximation with continuity correction."""
    mean, spread = trials * rate, math.sqrt(max(trials * rate * (1.0 - rate), 1e-12))
    return _normal_upper((threshold - 0.5 - mean) / spread)


def _first_crossing(evidence: Any, trials: int, crossing: float, increasing: bool) -> float | None:
    """The fewest successes (``increasing``) or the most (else) at which ``evidence(successes)`` reaches
    ``crossing`` after ``trials`` runs; ``None`` when none does. The evidence is monotone in the successes."""
    low, high = 0.0, float(trials)
    if increasing:
        if evidence(high) < crossing:
            return None
        for _ in range(40):
            middle = (low + high) / 2.0
            low, high = (low, middle) if evidence(middle) >= crossing else (middle, high)
        return high
    if evidence(low) < crossing:
        return None
    for _ in range(40):
        middle = (low + high) / 2.0
        low, high = (middle, high) if evidence(middle) >= crossing else (low, middle)
    return low


def runs_to_decide(judge: SequentialJudge, rate: float, *, fail: bool, chance: float = 0.95) -> int | None:
    """The runs after which ``judge``'s test decides with probability ``chance`` when the revision's rate (or mean
    score) is ``rate``: its failure test (``fail``), else its safety test. ``None``: beyond :data:`RUNS_LIMIT`.

    :param judge: the check's judge, its baseline known.
    :param rate: the revision's true error rate, or mean 0..1 score.
    :param fail: the failure test (the revision is harmful), else the safety test (it is good).
    :param chance: the chance of a decision (0.5: the median).
    """
    crossing = math.log(judge.threshold)
    higher_is_harm = judge.harm_direction > 0

    def power(trials: int) -> float:
        def evidence(successes: float) -> float:
            harm, safety = judge.evidence_at(successes, trials)
            return harm if fail else safety

        increasing = higher_is_harm if fail else not higher_is_harm
        edge = _first_crossing(evidence, trials, crossing, increasing)
        if edge is None:
            return 0.0
        above = _chance_at_least(edge, trials, rate)
        return above if increasing else 1.0 - _chance_at_least(edge + 1.0, trials, rate)

    trials = 16
    while power(trials) < chance:
        trials *= 2
        if trials > RUNS_LIMIT:
            return None
    low, high = trials // 2, trials
    while high - low > max(1, high // 200):
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle) >= chance else (middle, high)
    return high


@dataclass(frozen=True)
class CheckPlan:
    """What one statistical check needs to decide.

    :param check: the check's name.
    :param unit: ``"runs"``, or ``"scored runs"`` for a feedback key.
    :param harmful: the harmful revision the failure figures are for (``"2x the baseline's error rate"``).
    :param runs_to_fail: runs for a 95 % chance to fail a harmful revision (``None``: out of reach).
    :param median_runs_to_fail: the same for an even chance.
    :param runs_to_pass: runs for a 95 % chance to pass a revision as good as its baseline.
    :param seconds: time for both at the traffic given (``None``: out of reach).
    """

    check: str
    unit: str
    harmful: str
    runs_to_fail: int | None
    median_runs_to_fail: int | None
    runs_to_pass: int | None
    seconds: float | None

    @property
    def runs(self) -> int | None:
        """The runs a decision needs either way (the larger of the two), ``None`` when out of reach."""
        if self.runs_to_fail is None or self.runs_to_pass is None:
            return None
        return max(self.runs_to_fail, self.runs_to_pass)

    def describe(self) -> str:
        """One line for people."""
        if self.runs is None:
            return (
                f"check {self.check!r}: no decision within {RUNS_LIMIT:,} {self.unit} (a baseline this small is too "
                "uncertain to rule the harmful change out: measure a longer baseline window)"
            )
        text = (
            f"check {self.check!r}: {self.runs_to_fail:,} {self.unit} to fail {self.harmful} (95 %; median "
            f"{self.median_runs_to_fail:,}), {self.runs_to_pass:,} to pass one as good as its baseline"
        )
        if self.seconds is not None:
            text += f", about {_duration(self.seconds)} at this traffic"
        return text


@dataclass(frozen=True)
class AnalysisPlan:
    """What an analysis needs to decide, against what it has.

    :param checks: one :class:`CheckPlan` per statistical check.
    :param analysis_seconds: how long the analysis measures (its rounds; ``None``: ``count`` not resolved).
    :param baseline_runs: the baseline's runs the plan assumed.
    """

    checks: list[CheckPlan]
    analysis_seconds: float | None
    baseline_runs: int

    @property
    def seconds_needed(self) -> float | None:
        """The time the slowest check needs to decide, ``None`` when one is out of reach."""
        if any(plan.seconds is None for plan in self.checks):
            return None
        return max((plan.seconds or 0.0 for plan in self.checks), default=0.0)

    @property
    def decides(self) -> bool:
        """Whether the analysis lasts long enough for every check to decide."""
        needed = self.seconds_needed
        return needed is not None and (self.analysis_seconds is None or needed <= self.analysis_seconds)

    @property
    def baseline_enough(self) -> bool:
        """Whether the baseline holds :data:`BASELINE_MULTIPLE` times the runs of the most demanding decision."""
        runs = [plan.runs for plan in self.checks if plan.unit == "runs"]
        if any(value is None for value in runs):
            return False
        return all(self.baseline_runs >= BASELINE_MULTIPLE * (value or 0) for value in runs)

    def describe(self) -> str:
        """Lines for people: each check, then whether the analysis can decide."""
        lines = [plan.describe() for plan in self.checks]
        needed = self.seconds_needed
        if self.analysis_seconds is not None:
            if needed is None:
                lines.append(f"the analysis ({_duration(self.analysis_seconds)}) cannot decide at this traffic")
            elif needed > self.analysis_seconds:
                lines.append(
                    f"the analysis lasts {_duration(self.analysis_seconds)}, less than the {_duration(needed)} a "
                    "decision needs: it will likely end inconclusive"
                )
            else:
                lines.append(
                    f"the analysis ({_duration(self.analysis_seconds)}) can decide (needs {_duration(needed)})"
                )
        return "; ".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _baseline_measurement(check: TracingProjectCheck, runs: int, value: float) -> dict[str, Any]:
    taken: dict[str, Any] = {"check": check.label(), "runs": runs, "value": value}
    if feedback_key(check.metric) is None:
        taken["errors"] = round(value * runs)
    else:
        taken["stdev"] = math.sqrt(max(value * (1.0 - value), 0.0))
    return taken


def plan_analysis(
    analysis: Analysis,
    *,
    runs_per_second: float,
    error_rate: float = 0.03,
    scores: Mapping[str, float] | None = None,
    scored_share: float = 1.0,
    baseline_runs: int | None = None,
    baseline_seconds: float = 3600.0,
) -> AnalysisPlan:
    """The runs and time the statistical checks of ``analysis`` need to decide, at a traffic level.

    :param analysis: the analysis (its checks; its rounds for the plan's ``analysis_seconds``).
    :param runs_per_second: the deployment's traffic (root runs a second).
    :param error_rate: its normal error rate (the baseline's), 0..1.
    :param scores: each feedback key's normal mean score (0..1), by key (``{"correctness": 0.85}``); default 0.85.
    :param scored_share: the share of runs scored (0..1].
    :param baseline_runs: the baseline's runs; default the traffic over ``baseline_seconds``.
    :param baseline_seconds: the baseline window when ``baseline_runs`` is not given.
    :raises ValueError: naming an argument out of its range.
    """
    if not runs_per_second > 0 or not math.isfinite(runs_per_second):
        raise ValueError(f"runs_per_second must be a positive number, got {runs_per_second!r}")
    if not 0.0 <= error_rate < 1.0:
        raise ValueError(f"error_rate must be a fraction 0..1, got {error_rate!r}")
    if not 0.0 < scored_share <= 1.0:
        raise ValueError(f"scored_share must be in (0, 1], got {scored_share!r}")
    runs = baseline_runs if baseline_runs is not None else int(runs_per_second * baseline_seconds)
    if runs < 1:
        raise ValueError(
            f"the baseline must hold runs (baseline_runs or runs_per_second x baseline_seconds), got {runs}"
        )
    plans: list[CheckPlan] = []
    now = datetime.now(timezone.utc)
    for check in analysis.checks:
        if not is_statistical(check):
            continue
        assert isinstance(check, TracingProjectCheck)
        key = feedback_key(check.metric)
        if key is None:
            level = error_rate
            base_runs = runs
        else:
            level = (scores or {}).get(key, 0.85)
            if not 0.0 <= level <= 1.0:
                raise ValueError(f"scores[{key!r}] must be a mean 0..1 score, got {level!r}")
            base_runs = max(1, int(runs * scored_share))
        target = AnalysisTarget(
            deployment_id=_PLACEHOLDER_ID,
            name="plan",
            revision_id=_PLACEHOLDER_ID,
            live_since=now,
            baseline=[_baseline_measurement(check, base_runs, level)],
        )
        judge = SequentialJudge(check, target)
        harmful_rate, harmful = judge.harmful_level(level)
        good_rate = level
        to_fail = runs_to_decide(judge, harmful_rate, fail=True)
        median = runs_to_decide(judge, harmful_rate, fail=True, chance=0.5)
        to_pass = runs_to_decide(judge, good_rate, fail=False)
        rate = runs_per_second * (scored_share if key is not None else 1.0)
        seconds = None if to_fail is None or to_pass is None else max(to_fail, to_pass) / rate
        plans.append(
            CheckPlan(
                check.label(), "runs" if key is None else "scored runs", harmful, to_fail, median, to_pass, seconds
            )
        )
    seconds = None
    if analysis.count is not None:
        seconds = analysis.initial_delay_seconds + analysis.count * analysis.interval_seconds
    return AnalysisPlan(plans, seconds, runs)
