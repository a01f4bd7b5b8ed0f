"""The drift guard: did the baseline's own level move within its window? The preflight measures the window's two
halves for each statistical check (:mod:`~airflow_provider.analysis.measuring.preflight`), and
:func:`drift_of` compares them with an exact two-sided test; a baseline that moved is judged at the level least kind
to the revision (see :class:`~airflow_provider.analysis.statistics.sequential_judge.SequentialJudge`).

Pure: no I/O, no Airflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider.analysis.rate_test import binomial_tail

__all__ = ["DRIFT_LEVEL", "Drift", "count_of", "drift_of"]

DRIFT_LEVEL = 0.05
"""The drift guard's level: the two halves of the baseline window differ at this two-sided significance."""


@dataclass(frozen=True)
class Drift:
    """What the drift guard found in a baseline window.

    :param first: the first half's rate (or mean score).
    :param second: the second half's.
    :param p_value: the two-sided p-value of "both halves had the same rate".
    """

    first: float
    second: float
    p_value: float
    spread: float = 0.0
    """The standard error of the second half's trend carried to the window's end."""

    @property
    def moved(self) -> bool:
        """Whether the baseline's own level moved within its window (at :data:`DRIFT_LEVEL`)."""
        return self.p_value < DRIFT_LEVEL

    @property
    def levels(self) -> tuple[float, float, float, float]:
        """The first half's level, the second's, and the second's trend carried to the window's end, one standard
        error either side (the trend is itself measured)."""
        trend = self.second + (self.second - self.first) / 2.0
        return self.first, self.second, max(0.0, trend - self.spread), trend + self.spread

    def describe(self) -> str:
        """One clause for people."""
        return (
            f"the baseline's own level moved within its window ({self.first:.4g} in its first half, {self.second:.4g} "
            f"in its second, p = {self.p_value:.2g}): judged against the level least kind to the revision, with half "
            "the window's certainty"
        )


def drift_of(halves: Any) -> Drift | None:
    """The drift guard's reading of a baseline's two halves (``[{"runs", "errors"|"value"}, ...]``, the first half
    of the window then the second), ``None`` when they are not there or hold too little to compare.

    :param halves: the baseline measurement's ``halves``.
    """
    if not isinstance(halves, list) or len(halves) != 2 or not all(isinstance(half, dict) for half in halves):
        return None
    runs = [count_of(half.get("runs")) for half in halves]
    hits = [_successes(half) for half in halves]
    if any(value is None for value in (*runs, *hits)):
        return None
    first_runs, second_runs = (int(value) for value in runs)  # type: ignore[arg-type]
    first_hits, second_hits = (float(value) for value in hits)  # type: ignore[arg-type]
    if first_runs <= 0 or second_runs <= 0:
        return None
    total = round(first_hits + second_hits)
    share = second_runs / (first_runs + second_runs)
    observed = round(second_hits)
    upper = binomial_tail(observed, total, share)
    lower = 1.0 - binomial_tail(observed + 1, total, share)
    first, second = first_hits / first_runs, second_hits / second_runs

    def variance(level: float, runs: int) -> float:  # a binomial rate's (a 0..1 score's: at most it)
        return max(abs(level * (1.0 - level)), 1e-12) / runs

    spread = math.sqrt(2.25 * variance(second, second_runs) + 0.25 * variance(first, first_runs))
    return Drift(first, second, min(1.0, 2.0 * min(upper, lower)), spread)


def count_of(value: Any) -> int | None:
    """``value`` as a count (a whole number >= 0), ``None`` when it is not one.

    :param value: a field of a measurement.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _successes(half: Mapping[str, Any]) -> float | None:
    """The errors of a half, or (a feedback key's) its scored runs times their mean."""
    errors = half.get("errors")
    if isinstance(errors, int) and not isinstance(errors, bool):
        return float(errors)
    runs, value = count_of(half.get("runs")), half.get("value")
    if runs is None or isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return runs * float(value)
