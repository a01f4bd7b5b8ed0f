"""The verdict rules (pure): limits per check, as Argo Rollouts has per metric, but counted differently.

One measurement per check per round. A check fails the revision when its failed measurements **reach** the
analysis's ``failure_limit``: ``failure_limit=1`` fails on the first failed measurement (Argo's
``failureLimit: 1`` tolerates one and fails on the second; our ``failure_limit=N`` is Argo's
``failureLimit: N-1``). The analysis is inconclusive as soon as a check is inconclusive **more than**
``inconclusive_limit`` times (as Argo's ``inconclusiveLimit``). After ``count`` rounds it passed when every
check passed at least once, else it is inconclusive. A deployment found no longer serving its revision fails
with the check :data:`STILL_SERVING`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider.analysis.definitions import Analysis, AnalysisResult, Measurement, Verdict

__all__ = ["STILL_SERVING", "CheckTally", "Judgement"]

STILL_SERVING = "still_serving"
"""The failing check of a deployment whose revision stopped serving during the analysis."""


def _measurements(count: int, kind: str) -> str:
    return f"{count} {kind} measurement{'' if count == 1 else 's'}"


@dataclass
class CheckTally:
    """How one check's measurements of one deployment went so far."""

    passed: int = 0
    failed: int = 0
    inconclusive: int = 0
    last: Measurement | None = None


@dataclass
class Judgement:
    """The running verdict of one deployment's analysis.

    :param analysis: the analysis (``count`` resolved).
    :param revision_id: the revision judged.
    :param check_labels: the name of every check, in order.
    """

    analysis: Analysis
    revision_id: str
    check_labels: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    tallies: dict[str, CheckTally] = field(default_factory=dict)
    verdict: Verdict | None = None
    """Set once the verdict is known (the rest of that round is still recorded, later rounds are not)."""
    failing_check: str | None = None
    reason: str = ""
    decided_round: int | None = None

    def __post_init__(self) -> None:
        self.tallies = {label: CheckTally() for label in self.check_labels}
        self._round = 0

    @property
    def decided(self) -> bool:
        """Whether the verdict is known."""
        return self.verdict is not None

    @property
    def result(self) -> AnalysisResult | None:
        """The result once the verdict is known, else ``None``."""
        if self.verdict is None:
            return None
        return AnalysisResult(
            verdict=self.verdict,
            failing_check=self.failing_check,
            reason=self.reason,
            revision_id=self.revision_id,
            measurements=list(self.measurements),
        )

    def record(self, measurement: Measurement) -> None:
        """Count one measurement and decide when a limit is reached.

        :param measurement: a measurement of one of the checks.
        """
        if self.decided_round is not None and measurement["round"] != self.decided_round:
            return
        self.measurements.append(measurement)
        self._round = measurement["round"]
        tally = self.tallies[measurement["check"]]
        tally.last = measurement
        verdict = measurement["verdict"]
        if verdict == "passed":
            tally.passed += 1
        elif verdict == "failed":
            tally.failed += 1
            if tally.failed >= self.analysis.failure_limit:
                self._decide(
                    "failed",
                    measurement["check"],
                    f"check {measurement['check']!r} failed: {_measurements(tally.failed, 'failed')} reached "
                    f"the limit of {self.analysis.failure_limit}: {measurement['detail']}, "
                    f"needs {measurement['condition']}",
                )
        else:
            tally.inconclusive += 1
            if tally.inconclusive > self.analysis.inconclusive_limit:
                self._decide(
                    "inconclusive",
                    measurement["check"],
                    f"check {measurement['check']!r} could not be measured: "
                    f"{_measurements(tally.inconclusive, 'inconclusive')} exceeded the limit of "
                    f"{self.analysis.inconclusive_limit}: {measurement['detail']}",
                )

    def stop_serving(self, round_number: int, reason: str) -> None:
        """Fail: the revision no longer serves.

        :param round_number: the round that found it.
        :param reason: what the service shows instead.
        """
        self._round = max(self._round, round_number)
        self._decide("failed", STILL_SERVING, reason)

    def finish(self, rounds: int) -> AnalysisResult:
        """The verdict after the last round: passed when every check passed at least once, else inconclusive.

        :param rounds: the rounds measured.
        """
        if self.result is not None:
            return self.result
        never = [label for label, tally in self.tallies.items() if tally.passed == 0]
        if not never:
            self._decide(
                "passed",
                None,
                f"all {len(self.tallies)} check(s) passed over {rounds} round(s)",
            )
        else:
            label = never[0]
            last = self.tallies[label].last
            seen = f": last {last['verdict']}, {last['detail']}" if last is not None else ""
            self._decide(
                "inconclusive",
                label,
                f"check {label!r} never passed in {rounds} round(s){seen}",
            )
        result = self.result
        assert result is not None
        return result

    def _decide(self, verdict: Verdict, failing_check: str | None, reason: str) -> None:
        if self.verdict is None:
            self.verdict, self.failing_check, self.reason = verdict, failing_check, reason
            self.decided_round = self._round
