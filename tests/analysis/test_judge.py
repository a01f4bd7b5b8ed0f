"""The verdict rules: failure_limit, inconclusive_limit, and passed/inconclusive after count; a verdict that
goes on from the measurements of an analysis stopped earlier (its JSON state)."""

from __future__ import annotations

import json
import re

import pytest

from airflow_provider.analysis import Analysis, HttpCheck, Measurement, TracingProjectCheck
from airflow_provider.analysis.definitions import Verdict
from airflow_provider.analysis.judge import STILL_SERVING, AnalysisState, Judgement

REVISION = "00000000-0000-4000-8000-00000000000b"
TRACING = "tracing error_rate"
HTTP = "http {custom_url}/health"


def _measurement(round_number: int, check: str, verdict: Verdict, value: float | None = 0.1) -> Measurement:
    return Measurement(
        round=round_number,
        check=check,
        deployment_id="d",
        name="shop",
        at="2026-01-01T00:00:00+00:00",
        value=value,
        condition="< 0.05",
        verdict=verdict,
        detail=f"{check} detail {round_number}",
    )


def _judgement(**analysis: int) -> Judgement:
    full = Analysis(checks=[TracingProjectCheck(), HttpCheck()], **analysis)  # type: ignore[arg-type]
    return Judgement(full, REVISION, [check.label() for check in full.checks])


def _play(judgement: Judgement, rounds: list[dict[str, Verdict]]) -> None:
    for number, verdicts in enumerate(rounds, start=1):
        for check, verdict in verdicts.items():
            judgement.record(_measurement(number, check, verdict))


def test_a_check_failing_failure_limit_times_fails_the_revision_at_once() -> None:
    judgement = _judgement(count=5, failure_limit=2)
    judgement.record(_measurement(1, TRACING, "failed"))
    judgement.record(_measurement(1, HTTP, "passed"))
    judgement.record(_measurement(2, HTTP, "passed"))
    assert not judgement.decided
    judgement.record(_measurement(2, TRACING, "failed"))
    assert judgement.decided
    result = judgement.result
    assert result is not None
    assert result["verdict"] == "failed"
    assert result["failing_check"] == TRACING
    assert result["reason"] == (
        f"check {TRACING!r} failed: 2 failed measurements reached the limit of 2: {TRACING} detail 2, needs < 0.05"
    )
    assert result["revision_id"] == REVISION
    assert [m["round"] for m in result["measurements"]] == [1, 1, 2, 2]


def test_the_rest_of_the_deciding_round_is_recorded_and_later_rounds_are_not() -> None:
    judgement = _judgement(count=3)
    judgement.record(_measurement(1, TRACING, "failed"))
    judgement.record(_measurement(1, HTTP, "passed"))
    judgement.record(_measurement(2, HTTP, "passed"))
    result = judgement.finish(3)
    assert result["verdict"] == "failed"
    assert [(m["round"], m["check"]) for m in result["measurements"]] == [(1, TRACING), (1, HTTP)]


def test_inconclusive_beyond_the_limit_makes_the_analysis_inconclusive() -> None:
    judgement = _judgement(count=5, inconclusive_limit=1)
    _play(judgement, [{TRACING: "inconclusive", HTTP: "passed"}])
    assert not judgement.decided
    judgement.record(_measurement(2, TRACING, "inconclusive"))
    result = judgement.result
    assert result is not None
    assert result["verdict"] == "inconclusive"
    assert result["failing_check"] == TRACING
    assert result["reason"] == (
        f"check {TRACING!r} could not be measured: 2 inconclusive measurements exceeded the limit of 1: "
        f"{TRACING} detail 2"
    )


def test_inconclusive_limit_zero_allows_none() -> None:
    judgement = _judgement(count=5, inconclusive_limit=0)
    judgement.record(_measurement(1, HTTP, "inconclusive"))
    assert judgement.result is not None and judgement.result["verdict"] == "inconclusive"
    assert judgement.result["reason"] == (
        f"check {HTTP!r} could not be measured: 1 inconclusive measurement exceeded the limit of 0: {HTTP} detail 1"
    )


def test_failure_limit_1_fails_on_the_first_failed_measurement_and_says_it_reached_the_limit() -> None:
    """Not Argo's reading (its failureLimit: 1 tolerates one failed measurement): the message must not read as
    if the revision were still within an allowance."""
    judgement = _judgement(count=5, failure_limit=1)
    judgement.record(_measurement(1, TRACING, "failed"))
    result = judgement.result
    assert result is not None and result["verdict"] == "failed"
    assert result["reason"] == (
        f"check {TRACING!r} failed: 1 failed measurement reached the limit of 1: {TRACING} detail 1, needs < 0.05"
    )
    assert "allowed" not in result["reason"]


def test_after_count_rounds_every_check_passing_once_passes() -> None:
    judgement = _judgement(count=3, inconclusive_limit=2)
    _play(
        judgement,
        [
            {TRACING: "inconclusive", HTTP: "passed"},
            {TRACING: "inconclusive", HTTP: "passed"},
            {TRACING: "passed", HTTP: "passed"},
        ],
    )
    result = judgement.finish(3)
    assert (result["verdict"], result["failing_check"]) == ("passed", None)
    assert result["reason"] == "all 2 check(s) passed over 3 round(s)"
    assert len(result["measurements"]) == 6


def test_after_count_rounds_a_check_that_never_passed_is_inconclusive() -> None:
    judgement = _judgement(count=2, inconclusive_limit=2)
    _play(judgement, [{TRACING: "inconclusive", HTTP: "passed"}, {TRACING: "inconclusive", HTTP: "passed"}])
    result = judgement.finish(2)
    assert (result["verdict"], result["failing_check"]) == ("inconclusive", TRACING)
    assert result["reason"] == f"check {TRACING!r} never passed in 2 round(s): last inconclusive, {TRACING} detail 2"


def test_a_failure_below_the_limit_does_not_stop_a_pass() -> None:
    judgement = _judgement(count=3, failure_limit=2)
    _play(
        judgement,
        [{TRACING: "failed", HTTP: "passed"}, {TRACING: "passed", HTTP: "passed"}, {TRACING: "passed", HTTP: "passed"}],
    )
    assert judgement.finish(3)["verdict"] == "passed"


@pytest.mark.parametrize("before", [0, 1])
def test_a_revision_that_stops_serving_fails_with_still_serving(before: int) -> None:
    judgement = _judgement(count=3)
    _play(judgement, [{TRACING: "passed", HTTP: "passed"}] * before)
    judgement.stop_serving(before + 1, "revision r is no longer active (active: s, status READY)")
    result = judgement.finish(3)
    assert (result["verdict"], result["failing_check"]) == ("failed", STILL_SERVING)
    assert result["reason"].startswith("revision r is no longer active")


# ------------------------------------------------------------------------------------------ going on later
def test_a_judgement_resumed_from_its_measurements_goes_on_where_it_was() -> None:
    """failure_limit=2: one failed measurement before the stop, one after: the revision fails at the second,
    as it would have without the stop, and the result keeps every measurement."""
    before = _judgement(count=5, failure_limit=2)
    _play(before, [{TRACING: "failed", HTTP: "passed"}])
    assert not before.decided
    state = AnalysisState(started_at=1000.0, rounds=1, measurements={"d": list(before.measurements)})

    carried = AnalysisState.from_json(json.loads(json.dumps(state.to_json())))
    assert carried == state
    after = Judgement.resumed(before.analysis, REVISION, before.check_labels, carried.measurements["d"])
    assert not after.decided
    after.record(_measurement(2, HTTP, "passed"))
    after.record(_measurement(2, TRACING, "failed"))
    result = after.result
    assert result is not None and result["verdict"] == "failed"
    assert result["reason"].startswith(f"check {TRACING!r} failed: 2 failed measurements reached the limit of 2")
    assert [(m["round"], m["check"]) for m in result["measurements"]] == [
        (1, TRACING),
        (1, HTTP),
        (2, HTTP),
        (2, TRACING),
    ]


def test_a_judgement_resumed_from_measurements_that_decide_it_is_decided() -> None:
    judgement = _judgement(count=5)
    judgement.record(_measurement(1, TRACING, "failed"))
    resumed = Judgement.resumed(judgement.analysis, REVISION, judgement.check_labels, list(judgement.measurements))
    assert resumed.decided and resumed.result == judgement.result


def test_a_judgement_refuses_measurements_it_cannot_have_taken() -> None:
    judgement = _judgement(count=5)
    with pytest.raises(ValueError, match=r"a measurement of check 'latency', which the analysis does not have"):
        Judgement.resumed(judgement.analysis, REVISION, judgement.check_labels, [_measurement(1, "latency", "passed")])
    with pytest.raises(ValueError, match=r"out of round order \(round 1 after 2\)"):
        Judgement.resumed(
            judgement.analysis,
            REVISION,
            judgement.check_labels,
            [_measurement(2, TRACING, "passed"), _measurement(1, HTTP, "passed")],
        )


@pytest.mark.parametrize(
    "state, words",
    [
        ([], "state must be an object, got list"),
        ({"rounds": 1}, "state.started_at must be Unix seconds, got None"),
        ({"started_at": 1.0, "rounds": -1}, "state.rounds must be a whole number >= 0, got -1"),
        ({"started_at": 1.0, "delay": "soon"}, "state.delay must be seconds >= 0, got 'soon'"),
        ({"started_at": 1.0, "measurements": {"d": {}}}, "state.measurements.d must be a list, got dict"),
        ({"started_at": 1.0, "measurements": {"d": [{"round": 1}]}}, "state.measurements.d.0.check: expected str"),
        (
            {"started_at": 1.0, "measurements": {"d": [{**_measurement(1, TRACING, "passed"), "verdict": "ok"}]}},
            "state.measurements.d.0.verdict: expected one of passed, failed, inconclusive, got 'ok'",
        ),
    ],
)
def test_a_bad_analysis_state_names_what_is_wrong(state: object, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        AnalysisState.from_json(state)
