"""The statistical judge of a rate (:class:`RateTest`): is the new revision's error rate higher than its baseline's
(the revision that served before, measured by the preflight) by more than a tolerated increase, at a stated
confidence? Kayenta's question, for the runs of a tracing project.

The test is exact for rare events (a conditional binomial test of two Poisson rates, as for comparing two
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

from pydantic import BaseModel, ConfigDict, Field

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
    terms = [
        log_choose - math.lgamma(i + 1) - math.lgamma(trials - i + 1) + i * log_p + (trials - i) * log_q
        for i in range(successes, trials + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in terms))


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
    """Judge a rate against the baseline's with a test (see the module), instead of a threshold.

    :param confidence: how sure the test must be that the new rate is above the tolerated one before it fails the
        revision (0.5 < confidence < 1): a revision as good as its baseline is rolled back in at most
        ``1 - confidence`` of analyses measured once.
    :param tolerated_increase: how much higher, relatively, the new rate may be and still pass (``0.25``: up to
        1.25 times the baseline's).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    tolerated_increase: float = Field(default=0.25, ge=0.0, le=100.0)

    def describe(self) -> str:
        """What passes, in words: ``error rate at most 1.25 x the baseline's (99 % confidence)``."""
        return (
            f"error rate at most {1 + self.tolerated_increase:g} x the baseline's "
            f"({self.confidence * 100:g} % confidence)"
        )

    def judge(self, base_errors: int, base_runs: int, new_errors: int, new_runs: int, min_runs: int) -> RateVerdict:
        """The verdict on ``new_errors`` of ``new_runs`` against ``base_errors`` of ``base_runs``.

        :param base_errors: errors in the baseline's runs.
        :param base_runs: the baseline's runs.
        :param new_errors: errors in the new revision's runs.
        :param new_runs: the new revision's runs.
        :param min_runs: fewer runs than this on either side is inconclusive.
        """
        counts = f"{new_errors}/{new_runs} errors against the baseline's {base_errors}/{base_runs}"
        if base_runs < max(1, min_runs):
            return RateVerdict(verdict="inconclusive", p_value=None, detail=f"{counts}: too few baseline runs")
        if new_runs < max(1, min_runs):
            return RateVerdict(
                verdict="inconclusive", p_value=None, detail=f"{counts}: fewer runs than {min_runs}, too few to test"
            )
        ratio = 1.0 + self.tolerated_increase
        share = ratio * new_runs / (ratio * new_runs + base_runs)
        p_value = binomial_tail(new_errors, base_errors + new_errors, share)
        worse = p_value < 1.0 - self.confidence
        said = f"{counts}, p = {p_value:.3g} ({'below' if worse else 'not below'} {1 - self.confidence:.3g})"
        return RateVerdict(verdict="failed" if worse else "passed", p_value=p_value, detail=said)
