"""Always-valid sequential tests: the evidence behind every statistical verdict of an analysis.

An analysis looks at its counts every round and acts on the first look that shows harm. A test built for one
look (a p-value below ``1 - confidence``) is then wrong far more often than it says: each look is another
chance to cross by luck. The tests here are **e-processes** (mixture sequential probability ratio tests, mSPRT):
the evidence against a hypothesis is a likelihood ratio mixed over the alternatives, and by Ville's inequality a
process whose expectation is at most 1 under the hypothesis reaches ``1 / alpha`` at *any* look with probability
at most ``alpha``. So the false-rollback bound of ``confidence=0.99`` holds for the whole analysis, whatever the
number of rounds and their interval.

Each statistical check runs two of them on the same data:

* **harm**: the evidence that the revision is worse than the check's boundary (the tolerated rate, the
  condition's margin). Crossing ``1 / alpha`` fails the revision.
* **safety**: the evidence that the revision is better than the harmful level (a rate ``1 +
  harmful_increase`` times the baseline's, a score below the condition's boundary). Crossing passes the check:
  the harmful change is ruled out at the stated confidence, not merely "not shown".

Three families, one shape (``log_evidence`` of the data so far):

* :class:`ProportionEvidence`: a rate or a 0..1 score of the new revision against the baseline's, whose own
  uncertainty the hypothesis carries: the rate is a beta-binomial (the baseline's runs are the beta's size), the
  alternatives are the same beta moved to the harmful levels. This is the conditional binomial test of new
  against baseline counts, mixed over the effect (for error rates it is exactly that, given the total errors);
  without a baseline (a fixed threshold) it is the plain binomial likelihood ratio.
* :class:`GaussianEvidence`: a mean score outside 0..1 (a 1-5 rating): the normal mSPRT on the running
  difference, its null drift spread by the baseline's own sampling variance (exact in the normal limit).
* :class:`IntervalEvidence`: the canary against its control group, round by round (Lindon et al., KDD 2022):
  within each round the control's concurrent counts cancel what changes for every deployment at once (the hour,
  the load, an upstream model); each member is weighed by its own pre-rollout level, and the canary's own level
  relative to the group (measured before the rollout) is the hypothesis's nuisance, mixed over its posterior.

A 0..1 score scored as a binary likelihood is conservative for any score in 0..1 (a convex function of a bounded
variable has its largest mean at the two-point distribution), so one test serves 0/1 evaluators and graded ones.

Pure: no I/O, no Airflow, no third-party numerics (``math.lgamma``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_WEIGHTS",
    "GRID_POINTS",
    "GaussianEvidence",
    "IntervalEvidence",
    "ProportionEvidence",
    "bernoulli_log_ratio",
    "beta_log_ratio",
    "gamma_grid",
    "log_mean_exp",
    "log_threshold",
    "normalised_grid",
]

DEFAULT_WEIGHTS: tuple[float, float, float] = (0.3, 0.5, 0.2)
"""The mixture's weights over its three alternatives: a smaller effect, the effect the test is tuned for, a
larger one. Most weight sits on the effect a decision is planned for (it costs ``log(1 / 0.5)`` of evidence there);
the others keep the test quick for larger effects and able to see smaller ones."""

_EDGE = 1e-9
"""Rates and scores are kept inside ``(_EDGE, 1 - _EDGE)``: a rate of exactly 0 or 1 has no likelihood ratio."""


def log_threshold(alpha: float) -> float:
    """``log(1 / alpha)``: the evidence (as a log) at which a test rejects its hypothesis.

    :param alpha: the error bound (``1 - confidence``).
    """
    return -math.log(alpha)


def log_mean_exp(weighted: Sequence[tuple[float, float]]) -> float:
    """``log(sum(weight * exp(value)))`` of ``(weight, value)`` pairs, computed without overflow.

    :param weighted: the pairs; weights positive.
    """
    top = max(value for _, value in weighted)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(weight * math.exp(value - top) for weight, value in weighted))


def _clip(rate: float) -> float:
    return min(1.0 - _EDGE, max(_EDGE, rate))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def beta_log_ratio(successes: float, trials: float, alternative: float, null: float, size: float) -> float:
    """``log`` of the beta-binomial likelihood of ``successes`` in ``trials`` when the rate is a beta of mean
    ``alternative``, over the same when its mean is ``null``; both betas have ``size`` pseudo-trials (the
    baseline's uncertainty). The binomial coefficients cancel.

    :param successes: the successes (errors, or the sum of 0..1 scores) so far.
    :param trials: the trials (runs, or scored runs) so far.
    :param alternative: the alternative's mean rate.
    :param null: the hypothesis's mean rate.
    :param size: the betas' size (> 0).
    """
    failures = trials - successes

    def marginal(mean: float) -> float:
        a, b = _clip(mean) * size, (1.0 - _clip(mean)) * size
        return _log_beta(a + successes, b + failures) - _log_beta(a, b)

    return marginal(alternative) - marginal(null)


def bernoulli_log_ratio(successes: float, trials: float, alternative: float, null: float) -> float:
    """``log`` of the binomial likelihood ratio of ``successes`` in ``trials``, rate ``alternative`` over
    ``null`` (both known: a fixed threshold).

    :param successes: the successes so far.
    :param trials: the trials so far.
    :param alternative: the alternative's rate.
    :param null: the hypothesis's rate.
    """
    p, q = _clip(alternative), _clip(null)
    return successes * math.log(p / q) + (trials - successes) * math.log((1.0 - p) / (1.0 - q))


@dataclass(frozen=True)
class ProportionEvidence:
    """The evidence against "the rate is ``null``" (and anything on the far side of it from the alternatives).

    :param null: the hypothesis's rate (the boundary: a tolerated rate, a score's margin).
    :param alternatives: ``(rate, weight)`` of each alternative, all on one side of ``null``; weights sum to 1.
    :param size: the baseline's size (runs, scored runs): the spread of the hypothesis and of each alternative
        around its mean, the baseline's own uncertainty; ``None``: the boundary is known exactly (a fixed
        threshold).
    """

    null: float
    alternatives: tuple[tuple[float, float], ...]
    size: float | None
    _betas: tuple[tuple[float, float, float], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size is not None:  # each beta's (a, b, log B(a, b)), computed once
            betas = []
            for mean in (self.null, *(rate for rate, _ in self.alternatives)):
                a, b = _clip(mean) * self.size, (1.0 - _clip(mean)) * self.size
                betas.append((a, b, _log_beta(a, b)))
            object.__setattr__(self, "_betas", tuple(betas))

    def log_evidence(self, successes: float, trials: float) -> float:
        """The log of the e-value after ``successes`` of ``trials`` (cumulative).

        :param successes: errors, or the sum of 0..1 scores, so far.
        :param trials: runs, or scored runs, so far.
        """
        if trials <= 0:
            return 0.0
        if self.size is None:
            return log_mean_exp(
                [
                    (weight, bernoulli_log_ratio(successes, trials, rate, self.null))
                    for rate, weight in self.alternatives
                ]
            )
        failures = trials - successes
        marginals = [
            math.lgamma(a + successes) + math.lgamma(b + failures) - math.lgamma(a + b + trials) - prior
            for a, b, prior in self._betas
        ]
        null = marginals[0]
        return log_mean_exp(
            [(weight, marginal - null) for (_, weight), marginal in zip(self.alternatives, marginals[1:], strict=True)]
        )


def _gaussian_marginal(score: float, info: float, mean: float, spread: float) -> float:
    """``log`` of a Brownian motion's likelihood (relative to no drift) of reaching ``score`` at ``info`` when its
    drift is drawn from ``N(mean, spread)``."""
    return -0.5 * math.log1p(spread * info) + (spread * score * score + 2.0 * mean * score - mean * mean * info) / (
        2.0 * (1.0 + spread * info)
    )


@dataclass(frozen=True)
class GaussianEvidence:
    """The normal mSPRT on a mean: the evidence against "the mean is at the boundary" from the running score
    ``sum((y - boundary) / variance)`` and the information ``n / variance``.

    :param alternatives: ``(drift, weight)``: the mean's distance from the boundary under each alternative (in the
        score's unit), all of one sign.
    :param null_spread: the variance of the boundary's own estimate (the baseline's ``f**2 * var_b / n_b``): the
        hypothesis's drift is spread by it, and so is each alternative's.
    """

    alternatives: tuple[tuple[float, float], ...]
    null_spread: float

    def log_evidence(self, score: float, info: float) -> float:
        """The log of the e-value at the running ``score`` and ``info`` (see the class).

        :param score: ``n * (mean - boundary) / variance``.
        :param info: ``n / variance``.
        """
        if info <= 0:
            return 0.0
        null = _gaussian_marginal(score, info, 0.0, self.null_spread)
        return log_mean_exp(
            [
                (weight, _gaussian_marginal(score, info, drift, self.null_spread) - null)
                for drift, weight in self.alternatives
            ]
        )


@dataclass
class IntervalEvidence:
    """Evidence accumulated interval by interval, mixed over a nuisance on a grid (the canary's own level relative
    to its control group), against the hypothesis's effect and for each alternative effect.

    ``interval_log_likelihood(nuisance, effect, counts)`` gives one interval's log likelihood; the evidence is
    ``sum_j w_j sum_g pi_g exp(L_gj) / sum_g pi_g exp(L_g0)`` with ``L`` summed over the intervals so far. Kept as
    running sums: :meth:`add` costs one pass over the grid.

    :param nuisance: ``(value, weight)`` of each grid point (weights: the nuisance's posterior from before the
        rollout, summing to 1).
    :param null_effect: the hypothesis's effect (a rate ratio, a score shift).
    :param alternatives: ``(effect, weight)`` of each alternative.
    :param interval_log_likelihood: one interval's log likelihood.
    """

    nuisance: tuple[tuple[float, float], ...]
    null_effect: float
    alternatives: tuple[tuple[float, float], ...]
    interval_log_likelihood: Callable[[float, float, tuple[float, ...]], float]
    _sums: list[list[float]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._sums = [[0.0] * (1 + len(self.alternatives)) for _ in self.nuisance]

    def add(self, counts: tuple[float, ...]) -> None:
        """Account one interval's counts.

        :param counts: what ``interval_log_likelihood`` reads.
        """
        effects = (self.null_effect, *(effect for effect, _ in self.alternatives))
        for sums, (value, _weight) in zip(self._sums, self.nuisance, strict=True):
            for index, effect in enumerate(effects):
                sums[index] += self.interval_log_likelihood(value, effect, counts)

    def log_evidence(self) -> float:
        """The log of the e-value over the intervals added so far."""
        null = log_mean_exp([(weight, sums[0]) for sums, (_, weight) in zip(self._sums, self.nuisance, strict=True)])
        alternatives = [
            (
                alt_weight,
                log_mean_exp(
                    [(weight, sums[1 + index]) for sums, (_, weight) in zip(self._sums, self.nuisance, strict=True)]
                ),
            )
            for index, (_effect, alt_weight) in enumerate(self.alternatives)
        ]
        return log_mean_exp(alternatives) - null


GRID_POINTS = 25
"""Points of a nuisance grid (a control-group test's canary level), over +-4.5 standard deviations."""


def gamma_grid(shape: float, exposure: float) -> tuple[tuple[float, float], ...]:
    """A grid over a rate ratio whose posterior is ``Gamma(shape, exposure)`` (``shape`` errors seen where
    ``exposure`` were expected at ratio 1), in log space over +-4.5 standard deviations, with its weights."""
    centre, spread = math.log(shape / exposure), 1.0 / math.sqrt(shape)
    points = [centre + spread * 4.5 * (2 * i / (GRID_POINTS - 1) - 1) for i in range(GRID_POINTS)]
    logs = [shape * point - exposure * math.exp(point) for point in points]
    return normalised_grid(points, logs, math.exp)


def beta_grid(successes: float, failures: float) -> tuple[tuple[float, float], ...]:
    """A grid over a 0..1 level whose posterior is ``Beta(successes, failures)``, over +-4.5 standard deviations
    (inside 0..1), with its weights."""
    total = successes + failures
    mean = successes / total
    spread = math.sqrt(mean * (1 - mean) / (total + 1))
    low, high = max(1e-6, mean - 4.5 * spread), min(1 - 1e-6, mean + 4.5 * spread)
    points = [low + (high - low) * i / (GRID_POINTS - 1) for i in range(GRID_POINTS)]
    logs = [(successes - 1) * math.log(point) + (failures - 1) * math.log1p(-point) for point in points]
    return normalised_grid(points, logs, lambda value: value)


def normalised_grid(points: Sequence[float], logs: Sequence[float], value_of: Any) -> tuple[tuple[float, float], ...]:
    top = max(logs)
    weights = [math.exp(log - top) for log in logs]
    total = sum(weights)
    return tuple((value_of(point), weight / total) for point, weight in zip(points, weights, strict=True))
