"""What an analysis produces: each measurement (:class:`Measurement`) and each deployment's verdict
(:class:`AnalysisResult`), plain JSON for XCom, asset events, the record and the Rollouts view.

Pure: no I/O, no Airflow. Re-exported by :mod:`~airflow_provider.analysis.definitions` and the package.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from typing_extensions import NotRequired

__all__ = ["VERDICTS", "AnalysisResult", "Measurement", "Verdict"]

Verdict = Literal["passed", "failed", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("passed", "failed", "inconclusive")


class Measurement(TypedDict):
    """One measurement of one check for one deployment (JSON, in XCom and events)."""

    round: int
    check: str
    deployment_id: str
    name: str
    at: str
    value: float | None
    condition: str
    verdict: Verdict
    detail: str
    runs: NotRequired[int]
    """The runs (for a feedback key: the scored runs) a tracing measurement is over; its errors, for a rate."""
    errors: NotRequired[int]
    bound: NotRequired[float]
    """The line the value was judged against when the baseline made it, in the condition's unit: a baseline
    condition's threshold (``baseline * 1.5 + 0.01``), a rate test's tolerated rate, a feedback test's boundary."""
    stdev: NotRequired[float]
    """A feedback key's standard deviation of the scores (when the tracing service gives it)."""
    test: NotRequired[dict[str, Any]]
    """A statistical check's tests (:class:`~airflow_provider.analysis.statistics.sequential_judge.TestRound`'s
    ``record``)."""
    control: NotRequired[dict[str, Any]]
    """A canary's control group's counts in the same window
    (:func:`~airflow_provider.analysis.statistics.control.pool`)."""
    halves: NotRequired[list[dict[str, Any]]]
    """A baseline's two halves of its window (``runs`` and ``errors``, or ``value``), for the drift guard."""


class AnalysisResult(TypedDict):
    """The verdict of one deployment's analysis (JSON, in XCom, events and asset extras); ``baseline``: the
    preflight's measurements of the revision serving before (when there was a preflight)."""

    verdict: Verdict
    failing_check: str | None
    reason: str
    revision_id: str
    measurements: list[Measurement]
    baseline: NotRequired[list[Measurement]]
