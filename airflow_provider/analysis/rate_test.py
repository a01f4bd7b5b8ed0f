"""The statistical judge of a rate (:class:`RateTest`): is the new revision's error rate higher than its baseline's
(the revision that served before, measured by the preflight) by more than a tolerated increase, or is a harmful
increase ruled out, at a stated confidence over the whole analysis? Kayenta's question, for the runs of a tracing
project. The analysis answers it with the sequential tests of
:mod:`~airflow_provider.analysis.statistics.sequential_judge`; the single-look test below (:meth:`RateTest.judge`) is
kept for comparison.

The single-look test is exact for rare events (a conditional binomial test of two Poisson rates, as for comparing two
counts): given ``k`` errors in all, ``e_new`` of them in ``n_new`` runs of the new revision and the rest in
``n_base`` runs of the baseline, if the new rate were at most ``(1 + tolerated_increase)`` times the baseline's,
``e_new`` would follow a binomial of ``k`` trials with probability ``r n_new / (r n_new + n_base)``, ``r = 1 +
tolerated_increase``. The revision fails when ``P(X >= e_new)`` is below ``1 - confidence`` (a false rollback
of a revision as good as its baseline is then at most that likely); it passes otherwise. Fewer runs than the
check's ``min_run_count`` on either side are inconclusive (the test cannot tell), never passed. It needs no
error in the baseline (an app that never failed is judged too), no normal approximation and no ``scipy``.

Pure: no I/O, no Airflow.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["RateTest", "RateVerdict", "binomial_tail"]


def binomial_tail(successes: int, trials: int, probability: float) -> float:
    """``P(X >= successes)`` for ``X ~ Binomial(trials, probability)``, summed in log space (exact).

    :param successes: the observed count.
    :param trials: the number of trials.
    :param probability: the probability of each.
    """
    if successes <= 0:
        return 1.0
    if successes > trials or probability <= 0.0:
        return 0.0
    if probability >= 1.0:
        return 1.0
    log_p, log_q = math.log(probability), math.log1p(-probability)
    log_choose = math.lgamma(trials + 1)

    def term(i: int) -> float:
        return log_choose - math.lgamma(i + 1) - math.lgamma(trials - i + 1) + i * log_p + (trials - i) * log_q

    def summed(indices: range) -> float:
        """The terms' sum, from the side nearest the mode outwards, stopping once a term is below e**-40 of the
        largest (past the mode they fall faster than geometrically: what is left cannot change a double)."""
        terms: list[float] = []
        for i in indices:
            value = term(i)
            if terms and value < max(terms[0], terms[-1]) - 40.0:
                break
            terms.append(value)
        if not terms:
            return 0.0
        top = max(terms)
        return math.exp(top) * sum(math.exp(value - top) for value in terms)

    mode = math.floor((trials + 1) * probability)
    if successes > mode:  # the upper tail, from its first term outwards
        return min(1.0, summed(range(successes, trials + 1)))
    return max(0.0, min(1.0, 1.0 - summed(range(successes - 1, -1, -1))))  # one minus the lower tail


class RateVerdict(BaseModel):
    """What a :class:`RateTest` found.

    :param verdict: ``passed``, ``failed`` or ``inconclusive``.
    :param p_value: the chance of seeing this many errors or more were the revision as good as tolerated
        (``None`` when inconclusive).
    :param detail: one line for people.
    """

    model_config = ConfigDict(frozen=True)

    verdict: str
    p_value: float | None
    detail: str


class RateTest(BaseModel):
    """Judge an error rate against the baseline's by two always-valid sequential tests, instead of a threshold.

    Every round of the analysis (see :mod:`~airflow_provider.analysis.statistics.sequential_judge`): the check **fails**
    once the evidence shows the new rate above ``1 + tolerated_increase`` times the baseline's; it **passes** once the
    evidence rules out a rate of ``1 + harmful_increase`` times the baseline's (or more); until then it is
    undecided. Each test errs with probability at most ``1 - confidence`` over the **whole analysis**, however many
    rounds it has: a revision exactly as good as the tolerated rate is rolled back in at most 1 % of analyses at
    ``confidence=0.99``, and one exactly as bad as the harmful rate passes in at most 1 %. The baseline's own
    uncertainty (its runs) is part of both tests, and a fleet's canary can be judged against its control group in
    the same window instead (``canary_baseline="control_group"``). The harmful rate is at least ``harmful_difference``
    above the baseline's.

    :param confidence: how sure each test must be before it decides (0.5 < confidence < 1); ``1 - confidence``
        bounds false rollbacks over every round of the analysis.
    :param tolerated_increase: how much higher, relatively, the new rate may be before it is harm (``0``: any
        increase shown fails the revision; ``0.25``: up to 1.25 times the baseline's is tolerated).
    :param harmful_increase: the increase a decision is planned for: the revision passes only once a rate of ``1 +
        harmful_increase`` times the baseline's is ruled out, and the failure test is quickest at it (``1``: a
        doubled rate). Must be above ``tolerated_increase``.
    :param harmful_difference: the harmful rate is at least this much above the baseline's, as a fraction of the
        runs (``0.005``: half a percentage point): twice a rate near 0 % is no harm worth ruling out, and could
        never be (an app that never fails passes once an error rate of 0.5 % is ruled out, about 1,000 runs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    tolerated_increase: float = Field(default=0.0, ge=0.0, le=100.0)
    harmful_increase: float = Field(default=1.0, gt=0.0, le=100.0)
    harmful_difference: float = Field(default=0.005, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _harmful_above_tolerated(self) -> RateTest:
        if self.harmful_increase <= self.tolerated_increase:
            raise ValueError(
                f"harmful_increase ({self.harmful_increase:g}) must be above tolerated_increase "
                f"({self.tolerated_increase:g}): a revision passes once a rate {1 + self.harmful_increase:g}x the "
                f"baseline's is ruled out, and fails once one above {1 + self.tolerated_increase:g}x is shown"
            )
        return self

    def describe(self) -> str:
        """What passes, in words: ``error rate below 2x the baseline's (at least +0.005), not shown above 1x (99 %
        over every round)``."""
        return (
            f"error rate below {1 + self.harmful_increase:g}x the baseline's (at least +{self.harmful_difference:g}), "
            f"not shown above {1 + self.tolerated_increase:g}x ({self.confidence * 100:g} % over every round)"
        )

    def judge(self, base_errors: int, base_runs: int, new_errors: int, new_runs: int, min_runs: int) -> RateVerdict:
        """The single-look test (one look only): ``new_errors`` of ``new_runs`` against ``base_errors`` of
        ``base_runs``, failed when ``P(X >= new_errors)`` under the tolerated rate is below ``1 - confidence``,
        else passed. Its bound holds for **one** look; an analysis judges with the sequential tests instead
        (looking every round at this test would roll back good revisions several times as often). Kept for
        comparison (the bench's single-look row) and one-off judgements.

        :param base_errors: errors in the baseline's runs.
        :param base_runs: the baseline's runs.
        :param new_errors: errors in the new revision's runs.
        :param new_runs: the new revision's runs.
        :param min_runs: fewer runs than this on either side is inconclusive (at least 1).
        :raises ValueError: a negative count, errors above runs, or ``min_runs`` below 1.
        """
        for name, value in (
            ("base_errors", base_errors),
            ("base_runs", base_runs),
            ("new_errors", new_errors),
            ("new_runs", new_runs),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        if base_errors > base_runs:
            raise ValueError(f"base_errors ({base_errors}) cannot be above base_runs ({base_runs})")
        if new_errors > new_runs:
            raise ValueError(f"new_errors ({new_errors}) cannot be above new_runs ({new_runs})")
        if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 1:
            raise ValueError(f"min_runs must be a whole number >= 1, got {min_runs!r}")
        counts = f"{new_errors}/{new_runs} errors against the baseline's {base_errors}/{base_runs}"
        if base_runs < min_runs:
            return RateVerdict(verdict="inconclusive", p_value=None, detail=f"{counts}: too few baseline runs")
        if new_runs < min_runs:
            return RateVerdict(
                verdict="inconclusive", p_value=None, detail=f"{counts}: fewer runs than {min_runs}, too few to test"
            )
        ratio = 1.0 + self.tolerated_increase
        share = ratio * new_runs / (ratio * new_runs + base_runs)
        p_value = binomial_tail(new_errors, base_errors + new_errors, share)
        worse = p_value < 1.0 - self.confidence
        said = f"{counts}, p = {p_value:.3g} ({'below' if worse else 'not below'} {1 - self.confidence:.3g}, one look)"
        return RateVerdict(verdict="failed" if worse else "passed", p_value=p_value, detail=said)
