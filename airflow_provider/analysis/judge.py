"""The verdict rules (pure): limits per check, as Argo Rollouts has per metric, but counted differently.

One measurement per check per round. A statistical check (see
:mod:`~airflow_provider.analysis.statistics.sequential_judge`) fails the revision as soon as its sequential test shows
harm (its bound holds over every round), and a round in which its tests are undecided is ``pending``, not counted
against ``inconclusive_limit``. Any other check fails the revision when its failed measurements **reach** the analysis's
``failure_limit``: ``failure_limit=1`` fails on the first failed measurement (Argo's ``failureLimit: 1`` tolerates one
and fails on the second; our ``failure_limit=N`` is Argo's ``failureLimit: N-1``). The analysis is inconclusive as soon
as a check is inconclusive **more than** ``inconclusive_limit`` times (as Argo's ``inconclusiveLimit``). After ``count``
rounds it passed when every check passed at least once, else it is inconclusive. A deployment found no longer serving
its revision fails with the check :data:`STILL_SERVING`.

An analysis can stop after any round and go on later, elsewhere (a trigger yields the verdicts reached so
far; the task acts on them and hands the rest to another trigger): :class:`AnalysisState` is where it stood
(plain JSON), and :meth:`Judgement.resumed` rebuilds each deployment's running verdict from its measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_provider.analysis.definitions import VERDICTS, Analysis, AnalysisResult, Measurement, Verdict

__all__ = ["STILL_SERVING", "AnalysisState", "CheckTally", "Judgement"]

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
    pending: int = 0
    """Rounds a statistical check's tests were undecided (not counted against ``inconclusive_limit``)."""
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

    @classmethod
    def resumed(
        cls, analysis: Analysis, revision_id: str, check_labels: list[str], measurements: list[Measurement]
    ) -> Judgement:
        """The running verdict of a deployment measured ``measurements`` so far (an analysis going on after a
        stop): each is counted again, in order, as when it was taken.

        :param analysis: the analysis (``count`` resolved).
        :param revision_id: the revision judged.
        :param check_labels: the name of every check, in order.
        :param measurements: its measurements so far (the ``measurements`` of an :class:`AnalysisState`).
        :raises ValueError: a measurement of a check the analysis does not have, or out of round order.
        """
        judgement = cls(analysis, revision_id, check_labels)
        for measurement in measurements:
            if measurement["check"] not in judgement.tallies:
                raise ValueError(
                    f"a measurement of check {measurement['check']!r}, which the analysis does not have "
                    f"({', '.join(check_labels)})"
                )
            if measurement["round"] < judgement._round:
                raise ValueError(
                    f"measurements out of round order (round {measurement['round']} after {judgement._round})"
                )
            judgement.record(measurement)
        return judgement

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
            if "test" in measurement:  # a sequential test's failure holds for the whole analysis: decided at once
                self._decide(
                    "failed",
                    measurement["check"],
                    f"check {measurement['check']!r} failed: {measurement['detail']}",
                )
            elif tally.failed >= self.analysis.failure_limit:
                self._decide(
                    "failed",
                    measurement["check"],
                    f"check {measurement['check']!r} failed: {_measurements(tally.failed, 'failed')} reached "
                    f"the limit of {self.analysis.failure_limit}: {measurement['detail']}, "
                    f"needs {measurement['condition']}",
                )
        elif (measurement.get("test") or {}).get("pending"):
            tally.pending += 1  # a statistical check still collecting runs: not a measurement that failed
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
        """The verdict after the last round: passed when every required check passed at least once, else
        inconclusive (a check with ``required=False`` that never passed is named, not held against the revision).

        :param rounds: the rounds measured.
        """
        if self.result is not None:
            return self.result
        optional = {check.label() for check in self.analysis.checks if not check.required}
        never = [label for label, tally in self.tallies.items() if tally.passed == 0 and label not in optional]
        if not never:
            unsure = [label for label in self.tallies if label in optional and self.tallies[label].passed == 0]
            reason = f"all {len(self.tallies)} check(s) passed over {rounds} round(s)"
            if unsure:
                reason = (
                    f"all {len(self.tallies) - len(unsure)} required check(s) passed over {rounds} round(s); not "
                    f"required, never passed: {', '.join(repr(label) for label in unsure)}"
                )
            self._decide("passed", None, reason)
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


_MEASUREMENT_FIELDS: dict[str, tuple[type, ...]] = {
    "round": (int,),
    "check": (str,),
    "deployment_id": (str,),
    "name": (str,),
    "at": (str,),
    "value": (int, float, type(None)),
    "condition": (str,),
    "verdict": (str,),
    "detail": (str,),
}
"""The fields of a :class:`~airflow_provider.analysis.definitions.Measurement` and the JSON types they take."""


def _measurements_from_json(data: Any) -> dict[str, list[Measurement]]:
    """``{deployment_id: [Measurement, ...]}`` from JSON, checked; ``ValueError`` naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"state.measurements must be an object, got {type(data).__name__}")
    checked: dict[str, list[Measurement]] = {}
    for deployment_id, taken in data.items():
        if not isinstance(taken, list):
            raise ValueError(f"state.measurements.{deployment_id} must be a list, got {type(taken).__name__}")
        for position, item in enumerate(taken):
            where = f"state.measurements.{deployment_id}.{position}"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be an object, got {type(item).__name__}")
            for name, types in _MEASUREMENT_FIELDS.items():
                value = item.get(name)
                if isinstance(value, bool) or not isinstance(value, types):
                    raise ValueError(
                        f"{where}.{name}: expected {' or '.join(t.__name__ for t in types)}, got {value!r}"
                    )
            if item["verdict"] not in VERDICTS:
                raise ValueError(f"{where}.verdict: expected one of {', '.join(VERDICTS)}, got {item['verdict']!r}")
        checked[str(deployment_id)] = [Measurement(**item) for item in taken]  # type: ignore[typeddict-item]
    return checked


@dataclass
class AnalysisState:
    """Where an analysis of several deployments stands between two runs of its rounds (plain JSON through
    :meth:`to_json`): it goes on with round ``rounds + 1``, its schedule unchanged.

    :param started_at: wall-clock time (Unix seconds) the analysis started: round ``k`` is due
        ``initial_delay_seconds + k * interval_seconds`` after it (plus ``delay``).
    :param rounds: the rounds measured so far.
    :param delay: seconds the later rounds were moved when the analysis went on after its next round was due
        (they keep their spacing instead of being measured back to back).
    :param measurements: the measurements so far of each deployment still under analysis, by deployment id.
    """

    started_at: float
    rounds: int = 0
    delay: float = 0.0
    measurements: dict[str, list[Measurement]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (no secret: measurements are scrubbed when taken)."""
        return {
            "started_at": self.started_at,
            "rounds": self.rounds,
            "delay": self.delay,
            "measurements": {key: [dict(item) for item in value] for key, value in self.measurements.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> AnalysisState:
        """Back from :meth:`to_json`.

        :param data: the JSON form.
        :raises ValueError: naming the field that is missing or of the wrong shape.
        """
        if not isinstance(data, dict):
            raise ValueError(f"state must be an object, got {type(data).__name__}")
        started_at, rounds, delay = data.get("started_at"), data.get("rounds", 0), data.get("delay", 0.0)
        if isinstance(started_at, bool) or not isinstance(started_at, (int, float)):
            raise ValueError(f"state.started_at must be Unix seconds, got {started_at!r}")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise ValueError(f"state.rounds must be a whole number >= 0, got {rounds!r}")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"state.delay must be seconds >= 0, got {delay!r}")
        return cls(float(started_at), rounds, float(delay), _measurements_from_json(data.get("measurements") or {}))
