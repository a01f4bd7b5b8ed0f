"""One round's readings made measurements and counted: the judging half of a round, the same for the rounds of a live
analysis (:mod:`~airflow_provider.analysis.measuring.run`) and a replay of given statistics
(:mod:`~airflow_provider.analysis.replay`).

A reading is what a source found; :func:`measurement_of` records it (scrubbed), and :class:`RoundJudging` hands the
measurement of a statistical check to its
:class:`~airflow_provider.analysis.statistics.sequential_judge.SequentialJudge` (kept per deployment and check for the
whole call, rebuilt from the measurements so far when an analysis goes on after a stop) before the verdict rules of
:class:`~airflow_provider.analysis.judge.Judgement` count it.

Pure: no I/O, no Airflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from airflow_provider.analysis.definitions import (
    AnalysisTarget,
    HttpCheck,
    Measurement,
    TracingProjectCheck,
)
from airflow_provider.analysis.judge import Judgement
from airflow_provider.analysis.reading import Reading
from airflow_provider.analysis.statistics.sequential_judge import SequentialJudge, is_statistical

__all__ = ["BASELINE_ROUND", "RoundJudging", "condition_text", "measurement_of"]

BASELINE_ROUND = 0
"""The round number of a preflight (baseline) measurement: before the analysis's first round."""


def measurement_of(
    check: Any,
    label: str,
    target: AnalysisTarget,
    reading: Reading,
    round_number: int,
    at: datetime,
    scrubber: Callable[[str], str],
) -> Measurement:
    """The measurement of ``reading`` (``check``'s on ``target`` in round ``round_number``, taken ``at``), with
    its run and error counts (and a feedback key's stdev) when the reading has them.

    :param check: the check measured.
    :param label: its label.
    :param target: the revision measured.
    :param reading: what the source answered.
    :param round_number: the round (the preflight's baseline has its own).
    :param at: when it was measured.
    :param scrubber: removes secrets from the detail.
    """
    measurement = Measurement(
        round=round_number,
        check=label,
        deployment_id=target.deployment_id,
        name=target.name,
        at=at.isoformat(),
        value=reading.value,
        condition=condition_text(check),
        verdict=reading.verdict,
        detail=scrubber(reading.detail),
    )
    if reading.runs is not None:
        measurement["runs"] = reading.runs
    if reading.errors is not None:
        measurement["errors"] = reading.errors
    if reading.bound is not None:
        measurement["bound"] = reading.bound
    if reading.stdev is not None:
        measurement["stdev"] = reading.stdev
    return measurement


def condition_text(check: Any) -> str:
    """What passes a measurement of ``check``, as a measurement records it.

    :param check: a check of the analysis.
    """
    if isinstance(check, HttpCheck):
        return check.describe_condition()
    if isinstance(check, TracingProjectCheck) and check.rate_test is not None:
        return check.rate_test.describe()
    condition = getattr(check, "condition", None)
    return condition if condition else "True or None"


class RoundJudging:
    """The sequential judges of an analysis's statistical checks, one per deployment and check, for one call.

    :param judgements: each deployment's running verdict, by deployment id (their measurements so far rebuild a
        judge that starts after a stop).
    :param scrubber: removes secrets from the details.
    """

    def __init__(self, judgements: Mapping[str, Judgement], scrubber: Callable[[str], str]) -> None:
        self.judgements = judgements
        self.scrubber = scrubber
        self._judges: dict[tuple[str, str], SequentialJudge] = {}

    def judge_of(self, check: TracingProjectCheck, target: AnalysisTarget) -> SequentialJudge:
        """The judge of ``check`` on ``target``, built (and fed the measurements so far) on first use.

        :param check: a statistical check.
        :param target: the revision judged.
        """
        key = (target.deployment_id, check.label())
        judge = self._judges.get(key)
        if judge is None:
            judge = self._judges[key] = SequentialJudge(check, target)
            judgement = self.judgements.get(target.deployment_id)
            for earlier in judgement.measurements if judgement is not None else []:
                if earlier["check"] == key[1]:
                    judge.judge(earlier)
        return judge

    def record(
        self,
        check: Any,
        label: str,
        target: AnalysisTarget,
        reading: Reading,
        round_number: int,
        at: datetime,
        control: dict[str, Any] | None = None,
    ) -> Measurement:
        """Make ``reading`` a measurement, judge it when its check is statistical, count it in the target's
        judgement, and return it.

        :param check: the check measured.
        :param label: its label.
        :param target: the revision judged.
        :param reading: what the source answered.
        :param round_number: the round.
        :param at: when it was measured.
        :param control: the control group's counts this round (a canary's statistical check), else ``None``.
        """
        measurement = measurement_of(check, label, target, reading, round_number, at, self.scrubber)
        if control is not None:
            measurement["control"] = control
        if is_statistical(check) and target.role == "judged":
            outcome = self.judge_of(check, target).judge(measurement)
            measurement["verdict"] = outcome.verdict
            measurement["detail"] = self.scrubber(outcome.detail)
            measurement["test"] = outcome.record()
            if outcome.bound is not None:
                measurement["bound"] = outcome.bound
        judgement = self.judgements.get(target.deployment_id)
        if judgement is not None:
            judgement.record(measurement)
        return measurement
