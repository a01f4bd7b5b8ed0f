"""About how many more runs an undecided statistical check needs: where its evidence would decide were the
revision's rate (or score) to stay as measured (what each undecided round's message says).

Pure: no I/O, no Airflow.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from airflow_provider.analysis.definitions import Measurement

__all__ = ["RUNS_LIMIT", "Projectable", "more_runs_needed"]


class Projectable(Protocol):
    """What a projection reads of a statistical check's judge
    (:class:`~airflow_provider.analysis.statistics.sequential_judge.SequentialJudge`)."""

    threshold: float
    key: str | None
    check: Any

    @property
    def projects(self) -> bool:
        """Whether its evidence can be projected."""

    def evidence_at(self, successes: float, trials: float) -> tuple[float, float]:
        """The log evidence of harm and of safety at the given cumulative counts."""


RUNS_LIMIT = 10_000_000
"""Past this many runs a decision is called out of reach."""


def more_runs_needed(judge: Projectable, measurement: Measurement, runs: int) -> int | None:
    """About how many more runs (scored runs) an undecided test needs at the rates seen so far: where its
    evidence would decide were the revision's rate (or score) to stay as measured. ``None`` when it cannot be
    projected (a control-group test, no counts) or it is beyond :data:`RUNS_LIMIT`.

    :param judge: the check's judge.
    :param measurement: this round's measurement (cumulative counts).
    :param runs: its runs (scored runs).
    """
    if runs <= 0 or judge.projects is False:
        return None
    if judge.key is None:
        errors = measurement.get("errors")
        if not isinstance(errors, int):
            return None
        rate = errors / runs
    else:
        value = measurement.get("value")
        if not isinstance(value, int | float):
            return None
        rate = float(value)
    crossing = math.log(judge.threshold)

    def evidence(total: float) -> float:
        return max(judge.evidence_at(rate * total, total))

    total = float(max(runs, judge.check.min_run_count))
    if evidence(total) >= crossing:
        return max(0, round(total) - runs)
    low, low_evidence = total, evidence(total)
    high = total * 2
    high_evidence = evidence(high)
    while high_evidence < crossing:  # doubling, then a straight line between the last two (it is "about")
        if high > RUNS_LIMIT:
            return None
        low, low_evidence = high, high_evidence
        high *= 2
        high_evidence = evidence(high)
    share = (crossing - low_evidence) / (high_evidence - low_evidence) if high_evidence > low_evidence else 1.0
    return max(1, round(low + share * (high - low)) - runs)
