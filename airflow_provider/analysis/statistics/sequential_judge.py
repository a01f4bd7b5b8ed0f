"""The statistical checks of an analysis, judged round after round by always-valid sequential tests.

Two kinds of :class:`~airflow_provider.analysis.definitions.TracingProjectCheck` are statistical:

* ``error_rate`` with a :class:`~airflow_provider.analysis.rate_test.RateTest`: the new revision's errors against
  the baseline's (the revision that served before, measured by the preflight), or against its control group in the
  same window (a fleet's canary, ``canary_baseline="control_group"``);
* ``feedback.<key>`` (any condition): the mean score of the scored runs, its condition's boundary (``"> 0.8"``, or
  ``">= baseline - 0.05"``: a non-inferiority margin of 0.05 below the baseline's score).

Each is judged by two tests on the counts since the revision went live (see
:mod:`~airflow_provider.analysis.statistics.evidence`): **failed** as soon as the evidence of harm reaches ``1 /
(1 - confidence)`` (the revision is worse than the tolerated rate, or than the boundary); **passed** once the
evidence that the harmful change is ruled out reaches it (a rate below ``1 + harmful_increase`` times the
baseline's; a score on the good side of the boundary), and it stays passed unless harm is shown later; otherwise
**undecided**: the measurement is ``inconclusive`` with ``pending`` set, which the verdict rules do not count
against ``inconclusive_limit`` (the test is still collecting runs; the detail says about how many more it needs).
Both bounds hold over every round of the analysis, not one look.

The baseline's own uncertainty is part of each hypothesis (its runs are the size of the hypothesis's beta), and the
**drift guard** (:mod:`~airflow_provider.analysis.statistics.drift`) compares the two halves of the baseline window:
when the baseline's own rate moved within it, the failure test is measured against the higher of its levels (the
first half, the second, and the second's trend carried to the window's end) and the safety test against the lower,
each with the uncertainty of half the window, and the detail says so.

Pure: no I/O, no Airflow. :mod:`~airflow_provider.analysis.measuring.run` (the rounds) and
:mod:`~airflow_provider.analysis.replay` (a replay of given statistics) judge with the same :class:`SequentialJudge`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider.analysis.baseline import BaselineCondition
from airflow_provider.analysis.conditions import Condition
from airflow_provider.analysis.definitions import AnalysisTarget, Measurement, TracingProjectCheck, Verdict
from airflow_provider.analysis.metric_conditions import feedback_key
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.statistics.drift import count_of, drift_of
from airflow_provider.analysis.statistics.evidence import (
    DEFAULT_WEIGHTS,
    GaussianEvidence,
    IntervalEvidence,
    ProportionEvidence,
    beta_grid,
    gamma_grid,
)
from airflow_provider.analysis.statistics.projection import more_runs_needed

__all__ = [
    "DEFAULT_FEEDBACK_CONFIDENCE",
    "FEEDBACK_EFFECT",
    "SequentialJudge",
    "TestRound",
    "is_statistical",
    "member_baseline",
]

FEEDBACK_EFFECT = 0.05
"""The score difference a feedback test is tuned for when its condition states no margin (a fixed threshold)."""
DEFAULT_FEEDBACK_CONFIDENCE = 0.99
"""A feedback test's confidence (its check's ``confidence`` when given)."""
_SHAPE = (0.75, 1.0, 1.4)
"""Where a rate test's three alternatives sit between its two levels (on the log scale): a smaller effect than the
harmful one, the harmful one, a larger one; weighted
:data:`~airflow_provider.analysis.statistics.evidence.DEFAULT_WEIGHTS`."""
_SCALES = (0.5, 1.0, 2.0)
"""A score test's alternatives, in units of its effect: half of it, it, twice it."""
_SHAPED = tuple(zip(_SHAPE, (0.3, 0.55, 0.15), strict=True))
_SCALED = tuple(zip(_SCALES, DEFAULT_WEIGHTS, strict=True))


def is_statistical(check: Any) -> bool:
    """Whether ``check`` is judged by the sequential tests of this module.

    :param check: a check of an analysis.
    """
    return isinstance(check, TracingProjectCheck) and (
        check.rate_test is not None or feedback_key(check.metric) is not None
    )


def member_baseline(member: Mapping[str, Any], label: str) -> Mapping[str, Any] | None:
    """A control-group member's pre-rollout measurement of check ``label`` (its ``baseline``, measured by the
    preflight), ``None`` when it has none with runs.

    :param member: an entry of a target's ``control``.
    :param label: the check's label.
    """
    for taken in member.get("baseline") or []:
        if isinstance(taken, Mapping) and taken.get("check") == label and count_of(taken.get("runs")):
            return taken
    return None


# ----------------------------------------------------------------------------------------------- one round
@dataclass(frozen=True)
class TestRound:
    """A statistical check's verdict after one round.

    :param verdict: ``failed`` (harm shown), ``passed`` (harm ruled out, now or in an earlier round) or
        ``inconclusive``.
    :param pending: the tests are undecided (not a measurement that could not be taken).
    :param harm: the evidence of harm (an e-value; fails at ``threshold``).
    :param safety: the evidence that the harmful change is ruled out (passes at ``threshold``).
    :param threshold: ``1 / (1 - confidence)``.
    :param detail: one line for people.
    :param needed: about how many more runs (scored runs, for a feedback key) a decision needs at the rates seen,
        ``None`` when decided or unknown.
    :param bound: the boundary the failure test is at (the tolerated rate, the score's boundary).
    """

    verdict: Verdict
    pending: bool
    harm: float
    safety: float
    threshold: float
    detail: str
    needed: int | None = None
    bound: float | None = None

    def record(self) -> dict[str, Any]:
        """The ``test`` field of the measurement (plain JSON)."""
        shown: dict[str, Any] = {
            "harm": _rounded(self.harm),
            "safety": _rounded(self.safety),
            "threshold": self.threshold,
        }
        if self.pending:
            shown["pending"] = True
        if self.needed is not None:
            shown["needed"] = self.needed
        return shown


def _rounded(value: float) -> float:
    if math.isinf(value):
        return 1e300 if value > 0 else 0.0
    return float(f"{value:.4g}")


def _shown(value: float) -> str:
    return f"{value:.3g}" if value < 1e6 else f"{value:.1e}"


# ----------------------------------------------------------------------------------------------- the judge
@dataclass(frozen=True)
class _ScoreSetup:
    """A score test against a boundary: ``fail_boundary`` for the evidence of harm, ``pass_boundary`` for the
    evidence that it is ruled out (the same unless the drift guard moved them apart)."""

    fail_boundary: float
    pass_boundary: float
    factor: float
    sign: float
    effect: float
    size: float | None
    base_mean: float | None = None
    base_runs: int | None = None
    base_variance: float | None = None

    def unit_scores(self, mean: float) -> bool:
        """Whether the scores are 0..1 (a proportion test), else a normal test of the mean."""
        inside = 0.0 <= mean <= 1.0 and (self.base_mean is None or 0.0 <= self.base_mean <= 1.0)
        return inside and -1.0 <= self.fail_boundary <= 2.0


class SequentialJudge:
    """The two tests of one statistical check of one revision, built from what the target knows (its baseline, its
    control group) and fed every round's cumulative counts.

    :param check: a statistical check (:func:`is_statistical`).
    :param target: the revision judged (its ``baseline``, and ``control`` for a canary against its control group).
    """

    def __init__(self, check: TracingProjectCheck, target: AnalysisTarget) -> None:
        self.check = check
        self.target = target
        self.label = check.label()
        self.key = feedback_key(check.metric)
        self.confidence = (
            check.rate_test.confidence
            if check.rate_test is not None
            else check.confidence or DEFAULT_FEEDBACK_CONFIDENCE
        )
        self.alpha = 1.0 - self.confidence
        self.threshold = 1.0 / self.alpha
        self.passed = False
        self.note = ""
        self._previous: tuple[float, ...] | None = None
        self._setup_error: str | None = None
        self._harm: Any = None
        self._safety: Any = None
        self._control = False
        self._bound: float | None = None
        self._score: _ScoreSetup | None = None
        self._build()

    # -------------------------------------------------------------------------------------------- setup
    def _build(self) -> None:
        base = self.target.baseline_of(self.label) if self.target.baseline is not None else None
        if self.key is None:
            self._build_rate(base)
        else:
            self._build_score(base)

    def _no_baseline(self, what: str = "baseline") -> None:
        if self.target.control is not None:
            self._setup_error = (
                f"the control group (deployments not rolled out yet) gave no {what} of check {self.label!r}"
            )
        else:
            self._setup_error = f"no {what} of check {self.label!r} was measured before the rollout"

    def _build_rate(self, base: Mapping[str, Any] | None) -> None:
        test = self.check.rate_test
        assert test is not None
        runs, errors = count_of((base or {}).get("runs")), count_of((base or {}).get("errors"))
        if base is None or runs is None or errors is None or runs <= 0:
            self._no_baseline("baseline run counts")
            return
        if errors > runs:
            self._setup_error = f"the baseline of {self.label!r} counts more errors ({errors}) than runs ({runs})"
            return
        tolerated, harmful = 1.0 + test.tolerated_increase, 1.0 + test.harmful_increase
        if self.target.control is not None:
            self._build_control_rate(runs, errors, tolerated, harmful)
            return
        level = (errors + 0.5) / (runs + 1.0)
        low = high = level
        size = float(runs)
        drift = drift_of(base.get("halves"))
        if drift is not None and drift.moved:
            levels = (level, *drift.levels)
            low, high, size = min(levels), max(levels), runs / 2.0
            self.note = drift.describe()
        self._bound = tolerated * (high if self.note else errors / runs)  # the line the view draws
        fail_null = tolerated * high
        pass_null = max(harmful * low, low + test.harmful_difference)
        spread = max(pass_null / fail_null, 1.25)  # where the alternatives sit between the two levels
        self._harm = ProportionEvidence(fail_null, tuple((fail_null * spread**k, w) for k, w in _SHAPED), size)
        self._safety = ProportionEvidence(pass_null, tuple((pass_null / spread**k, w) for k, w in _SHAPED), size)

    def _build_control_rate(self, runs: int, errors: int, tolerated: float, harmful: float) -> None:
        """The canary's errors against its control group's in the same rounds, each member weighed by its own
        pre-rollout rate, the canary's own level relative to the group's (measured before the rollout) the
        nuisance."""
        measured = [member_baseline(member, self.label) for member in self.target.control or []]
        group_runs = sum(count_of(base.get("runs")) or 0 for base in measured if base is not None)
        group_errors = sum(count_of(base.get("errors")) or 0 for base in measured if base is not None)
        group_rate = (group_errors + 0.5) / (group_runs + 1.0) if group_runs > 0 else None
        if group_rate is None:  # no member measured before the rollout: the canary's level assumed the group's
            nuisance: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
            self.note = (
                "the control group's members were not measured before the rollout: the canary's normal rate is taken "
                "to be theirs"
            )
        else:
            nuisance = gamma_grid(errors + 0.5, runs * group_rate)

        def interval(level: float, effect: float, counts: tuple[float, ...]) -> float:
            canary_errors, canary_runs, control_errors, control_weight = counts
            if canary_runs <= 0 or control_weight <= 0:
                return 0.0
            odds = effect * level * canary_runs
            share = odds / (odds + control_weight)
            return canary_errors * math.log(share) + control_errors * math.log1p(-share)

        self._control = True
        self._bound = None
        self._harm = IntervalEvidence(
            nuisance,
            tolerated,
            tuple((tolerated * (harmful / tolerated) ** k, w) for k, w in _SHAPED),
            interval,
        )
        self._safety = IntervalEvidence(
            nuisance,
            harmful,
            tuple((harmful * (tolerated / harmful) ** k, w) for k, w in _SHAPED),
            interval,
        )

    def _build_score(self, base: Mapping[str, Any] | None) -> None:
        condition = self.check.parsed_condition
        higher_is_better = condition.operator in (">", ">=")
        sign = -1.0 if higher_is_better else 1.0  # the direction of harm
        if isinstance(condition, Condition):  # a fixed threshold: known exactly, no baseline needed
            self._score = _ScoreSetup(condition.threshold, condition.threshold, 1.0, sign, FEEDBACK_EFFECT, None)
            self._bound = condition.threshold
            return
        else:
            assert isinstance(condition, BaselineCondition)
            base_runs = count_of((base or {}).get("runs"))
            base_value = (base or {}).get("value")
            if base is None or base_runs is None or base_runs <= 0 or not isinstance(base_value, int | float):
                self._no_baseline("baseline score")
                return
            base_mean = float(base_value)
            factor = condition.factor
            boundary = condition.resolve(base_mean).threshold
            effect = max(abs(boundary - base_mean), 0.02)
            if self.target.control is not None:
                self._build_control_score(boundary, factor, sign, effect, base_mean, base_runs)
                self._bound = boundary
                return
            spread = base.get("stdev")
            base_variance = float(spread) ** 2 if isinstance(spread, int | float) and math.isfinite(spread) else None
            fail_boundary = pass_boundary = boundary
            size = base_runs / (factor * factor)
            drift = drift_of(base.get("halves"))
            if drift is not None and drift.moved:
                levels = (base_mean, *drift.levels)
                kindest, harshest = (max, min) if higher_is_better else (min, max)
                fail_boundary = condition.resolve(kindest(levels)).threshold
                pass_boundary = condition.resolve(harshest(levels)).threshold
                size /= 2.0
                self.note = drift.describe()
            self._score = _ScoreSetup(
                fail_boundary, pass_boundary, factor, sign, effect, size, base_mean, base_runs, base_variance
            )
            self._bound = fail_boundary

    def _build_control_score(
        self, boundary: float, factor: float, sign: float, effect: float, base_mean: float, base_runs: int
    ) -> None:
        """The canary's scores round by round against its own pre-rollout score moved by what its control group's
        scores moved (each member against its own pre-rollout score), its own pre-rollout score the nuisance."""
        offset = boundary - factor * base_mean  # the condition's offset: boundary = factor * level + offset
        nuisance = beta_grid(base_mean * base_runs + 0.5, (1.0 - base_mean) * base_runs + 0.5)

        def interval(level: float, shift: float, counts: tuple[float, ...]) -> float:
            total, scored, group_shift = counts
            if scored <= 0:
                return 0.0
            rate = min(1.0 - 1e-9, max(1e-9, factor * (level + group_shift) + offset + shift))
            return total * math.log(rate) + (scored - total) * math.log1p(-rate)

        self._control = True
        self._harm = IntervalEvidence(nuisance, 0.0, tuple((sign * effect * k, w) for k, w in _SCALED), interval)
        self._safety = IntervalEvidence(nuisance, 0.0, tuple((-sign * effect * k, w) for k, w in _SCALED), interval)

    # -------------------------------------------------------------------------------------------- judging
    def judge(self, measurement: Measurement) -> TestRound:
        """The verdict after the round of ``measurement`` (cumulative counts since the revision went live; with a
        control group, its ``control`` counts too). Rounds are given in order, each once.

        :param measurement: this round's measurement of the check on the target, as the source read it.
        """
        if self._setup_error is not None:
            return TestRound("inconclusive", False, 1.0, 1.0, self.threshold, self._setup_error)
        runs = count_of(measurement.get("runs"))
        if runs is None:
            return TestRound("inconclusive", False, 1.0, 1.0, self.threshold, measurement["detail"])
        harm, safety, problem = self._evidence(measurement, runs)
        if problem is not None:
            return TestRound("inconclusive", False, 1.0, 1.0, self.threshold, f"{measurement['detail']}: {problem}")
        crossing = math.log(self.threshold)
        if runs < self.check.min_run_count:
            return self._round(
                "inconclusive",
                True,
                harm,
                safety,
                measurement,
                f"fewer than min_run_count {self.check.min_run_count} {'scored ' if self.key else ''}runs yet",
                runs,
            )
        if harm >= crossing:
            return self._round("failed", False, harm, safety, measurement, "harm shown", runs)
        if safety >= crossing or self.passed:
            self.passed = True
            return self._round("passed", False, harm, safety, measurement, "the harmful change ruled out", runs)
        return self._round("inconclusive", True, harm, safety, measurement, "not decided yet", runs)

    def _evidence(self, measurement: Measurement, runs: int) -> tuple[float, float, str | None]:
        if self.key is None:
            errors = count_of(measurement.get("errors"))
            if errors is None:
                return 0.0, 0.0, "no error count"
            if errors > runs:
                return 0.0, 0.0, f"more errors ({errors}) than runs ({runs}): the statistics cannot be judged"
            if self._control:
                return self._interval_evidence(measurement, (float(errors), float(runs)))
            return self._harm.log_evidence(errors, runs), self._safety.log_evidence(errors, runs), None
        value = measurement.get("value") if runs else 0.0  # no run scored yet: nothing to weigh, not a failure
        if not isinstance(value, int | float) or isinstance(value, bool):
            return 0.0, 0.0, "no mean score"
        if self._control:
            return self._interval_evidence(measurement, (float(value) * runs, float(runs)))
        return self._score_evidence(float(value), runs, measurement.get("stdev"))

    def _interval_evidence(
        self, measurement: Measurement, canary: tuple[float, float]
    ) -> tuple[float, float, str | None]:
        control = measurement.get("control")
        if not isinstance(control, dict):
            return 0.0, 0.0, "no control-group counts this round"
        if self.key is None:
            now = (canary[0], canary[1], float(control.get("errors", 0)), float(control.get("weighted_runs", 0)))
        else:
            scored = float(control.get("scored", 0))
            now = (canary[0], canary[1], float(control.get("shift_sum", 0.0)), scored)
        previous = self._previous or (0.0,) * len(now)
        step = tuple(current - before for current, before in zip(now, previous, strict=True))
        if any(value < -1e-9 for index, value in enumerate(step) if self.key is None or index != 2):
            return 0.0, 0.0, "counts went down since the previous round (the window moved?)"
        self._previous = now
        if self.key is None:
            self._harm.add(step)
            self._safety.add(step)
        else:
            total, scored, shift_sum, group_scored = step
            group_shift = shift_sum / group_scored if group_scored > 0 else 0.0
            self._harm.add((total, scored, group_shift))
            self._safety.add((total, scored, group_shift))
        return self._harm.log_evidence(), self._safety.log_evidence(), None

    def _score_evidence(self, mean: float, runs: int, stdev: Any) -> tuple[float, float, str | None]:
        setup = self._score
        assert setup is not None
        fail_boundary, pass_boundary, sign, effect, size = (
            setup.fail_boundary,
            setup.pass_boundary,
            setup.sign,
            setup.effect,
            setup.size,
        )
        if setup.unit_scores(mean):
            harm = ProportionEvidence(
                fail_boundary,
                tuple((fail_boundary + sign * effect * k, w) for k, w in _SCALED),
                size,
            )
            safety = ProportionEvidence(
                pass_boundary,
                tuple((pass_boundary - sign * effect * k, w) for k, w in _SCALED),
                size,
            )
            total = mean * runs
            return harm.log_evidence(total, runs), safety.log_evidence(total, runs), None
        variance = _variance(stdev, setup.base_variance, mean)
        null_spread = (
            0.0 if setup.base_runs is None else setup.factor**2 * (setup.base_variance or variance) / setup.base_runs
        )
        info = runs / variance
        harm_gauss = GaussianEvidence(tuple((sign * effect * k, w) for k, w in _SCALED), null_spread)
        safety_gauss = GaussianEvidence(tuple((-sign * effect * k, w) for k, w in _SCALED), null_spread)
        return (
            harm_gauss.log_evidence(info * (mean - fail_boundary), info),
            safety_gauss.log_evidence(info * (mean - pass_boundary), info),
            None,
        )

    def _round(
        self,
        verdict: Verdict,
        pending: bool,
        harm: float,
        safety: float,
        measurement: Measurement,
        state: str,
        runs: int,
    ) -> TestRound:
        harm_e, safety_e = math.exp(min(harm, 700.0)), math.exp(min(safety, 700.0))
        needed = more_runs_needed(self, measurement, runs) if pending else None
        what = "harm" if self.key is None else f"a score worse than {self._bound_text()}"
        ruled = self._ruled_out_text()
        detail = (
            f"{measurement['detail']}; {state}: evidence of {what} {_shown(harm_e)}, that {ruled} "
            f"{_shown(safety_e)} (each decides at {_shown(self.threshold)}, "
            f"{self.confidence * 100:g} % over every round)"
        )
        if needed is not None:
            detail += f"; about {needed:,} more {'scored ' if self.key else ''}runs to decide at the rates seen"
        if self.note:
            detail += f"; {self.note}"
        return TestRound(verdict, pending, harm_e, safety_e, self.threshold, detail, needed, self._bound)

    def _bound_text(self) -> str:
        return "the boundary" if self._bound is None else f"{self._bound:.3g}"

    def _ruled_out_text(self) -> str:
        if self.key is not None:
            return "it is no worse"
        test = self.check.rate_test
        assert isinstance(test, RateTest)
        return (
            f"the rate is below {1 + test.harmful_increase:g}x the {'control group' if self._control else 'baseline'}'s"
        )

    @property
    def harm_direction(self) -> float:
        """``+1`` when more errors (a higher score) is harm, ``-1`` when a lower score is."""
        if self.key is None:
            return 1.0
        return -1.0 if self.check.parsed_condition.operator in (">", ">=") else 1.0

    @property
    def projects(self) -> bool:
        """Whether :meth:`evidence_at` can project the evidence (not a control-group test, nor one without a
        baseline)."""
        return self._setup_error is None and not self._control

    def harmful_level(self, level: float) -> tuple[float, str]:
        """The rate (or mean score) of the harmful revision a plan is for, with its description, for a revision
        whose baseline is at ``level``.

        :param level: the baseline's error rate, or mean score.
        """
        if self.key is None:
            test = self.check.rate_test
            assert test is not None
            harmful = max(level * (1 + test.harmful_increase), level + test.harmful_difference)
            return min(1.0, harmful), f"an error rate of {harmful:.3g} ({1 + test.harmful_increase:g}x the baseline's)"
        setup = self._score
        if setup is None:
            return level, "a harmful score"
        harmful = setup.fail_boundary + setup.sign * setup.effect
        return min(1.0, max(0.0, harmful)), f"a mean {self.key} of {harmful:.3g} (baseline {level:.3g})"

    def evidence_at(self, successes: float, trials: float) -> tuple[float, float]:
        """The log evidence of harm and of safety were the cumulative counts ``successes`` of ``trials`` (a
        projection, for the planner; a control-group test answers from its rounds so far).

        :param successes: errors (or the sum of scores).
        :param trials: runs (or scored runs).
        """
        if self._setup_error is not None or self._control:
            return 0.0, 0.0
        if self.key is None:
            return self._harm.log_evidence(successes, trials), self._safety.log_evidence(successes, trials)
        harm, safety, _ = self._score_evidence(successes / trials if trials else 0.0, int(trials), None)
        return harm, safety


def _variance(stdev: Any, base_spread: float | None, mean: float) -> float:
    """The per-run variance of a score outside 0..1: the run's own stdev, else the baseline's, never below a
    millionth of its scale."""
    given = float(stdev) ** 2 if isinstance(stdev, int | float) and math.isfinite(stdev) and stdev > 0 else None
    variance = given if given is not None else base_spread
    floor = 1e-6 * max(1.0, mean * mean)
    return max(variance or floor, floor)
