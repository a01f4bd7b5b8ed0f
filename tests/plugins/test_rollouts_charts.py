"""The measurement charts' data (issue 32): each check's measurements over the rounds, its threshold line and
each round's verdict, from an analysis result or the record's bounded copy of one."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider.decisions.record import bounded_verdict
from airflow_provider.plugins.rollouts.charts import analysis_charts, round_verdicts
from airflow_provider.plugins.rollouts.shapes import row_analysis


def measurement(round_: int, check: str, value: float | None, condition: str, verdict: str) -> dict[str, Any]:
    return {
        "round": round_,
        "check": check,
        "deployment_id": "d",
        "name": "checkout-api",
        "at": f"2026-11-26T20:00:0{round_}+00:00",
        "value": value,
        "condition": condition,
        "verdict": verdict,
        "detail": "",
    }


RESULT = {
    "verdict": "failed",
    "failing_check": "tracing error_rate",
    "reason": "error_rate 0.2 >= 0.05",
    "revision_id": "r",
    "measurements": [
        measurement(1, "tracing error_rate", 0.01, "< 0.05", "passed"),
        measurement(1, "http latency", 420.0, "< 800ms", "passed"),
        measurement(2, "tracing error_rate", None, "< 0.05", "inconclusive"),
        measurement(2, "http latency", 910.0, "< 800ms", "failed"),
        measurement(3, "tracing error_rate", 0.2, "< 0.05", "failed"),
        measurement(3, "http latency", 500.0, "< 800ms", "passed"),
    ],
}


def test_one_chart_per_check_with_its_threshold_points_and_round_verdicts() -> None:
    charts = {chart["check"]: chart for chart in analysis_charts(RESULT)}
    assert list(charts) == ["tracing error_rate", "http latency"]
    errors, latency = charts["tracing error_rate"], charts["http latency"]
    assert (errors["operator"], errors["threshold"], errors["unit"]) == ("<", 0.05, "")
    assert (latency["operator"], latency["threshold"], latency["unit"]) == ("<", 800.0, "ms")
    assert [(p["round"], p["value"], p["verdict"]) for p in errors["points"]] == [
        (1, 0.01, "passed"),
        (2, None, "inconclusive"),
        (3, 0.2, "failed"),
    ]
    assert errors["verdict"] == "failed" and latency["verdict"] == "failed"
    # a round fails when one check failed in it, is inconclusive when one was, else passes
    assert errors["rounds"] == [
        {"round": 1, "verdict": "passed"},
        {"round": 2, "verdict": "failed"},
        {"round": 3, "verdict": "failed"},
    ]


def test_a_condition_that_is_no_comparison_has_no_threshold_and_no_measurement_no_chart() -> None:
    [chart] = analysis_charts({"measurements": [measurement(1, "http status", 200.0, "status 200", "passed")]})
    assert chart["threshold"] is None and chart["operator"] is None
    assert analysis_charts({"verdict": "passed", "measurements": []}) == []
    assert analysis_charts({"verdict": "passed"}) == []
    assert round_verdicts([{"round": 1, "verdict": "inconclusive"}, {"round": 1, "verdict": "passed"}]) == [
        {"round": 1, "verdict": "inconclusive"}
    ]


def test_the_views_analysis_carries_the_charts_of_the_records_bounded_copy() -> None:
    many = {
        **RESULT,
        "measurements": [measurement(n % 9 + 1, "tracing error_rate", 0.01 * n, "< 0.05", "passed") for n in range(30)],
    }
    kept = bounded_verdict(many)  # the record keeps the latest 10
    shown = row_analysis(kept)
    assert shown is not None and shown["measurements_total"] == 30
    [chart] = shown["charts"]
    assert len(chart["points"]) == 10 and chart["threshold"] == 0.05


def judged(round_: int, value: float | None, condition: str, verdict: str, bound: float) -> dict[str, Any]:
    return {**measurement(round_, "errors", value, condition, verdict), "bound": bound}


ON_BASELINE = {
    "verdict": "failed",
    "baseline": [{**measurement(0, "errors", 0.08, "<= baseline * 1.5 + 0.01", "passed"), "runs": 900}],
    "measurements": [
        judged(1, 0.09, "<= baseline * 1.5 + 0.01", "passed", 0.13),
        judged(2, 0.3, "<= baseline * 1.5 + 0.01", "failed", 0.13),
    ],
}
RATE_TESTED = {
    "verdict": "passed",
    "baseline": [
        {**measurement(0, "errors", 0.02, "error rate at most 1.25 x the baseline's (99 % confidence)", "passed")}
    ],
    "measurements": [
        judged(1, 0.021, "error rate at most 1.25 x the baseline's (99 % confidence)", "passed", 0.025),
        judged(2, None, "error rate at most 1.25 x the baseline's (99 % confidence)", "inconclusive", 0.025),
    ],
}


def test_a_baseline_conditions_line_is_the_bound_it_made_from_the_baseline() -> None:
    [chart] = analysis_charts(ON_BASELINE)
    assert (chart["line_kind"], chart["operator"], chart["threshold"], chart["baseline"]) == (
        "baseline",
        "<=",
        0.13,
        0.08,
    )
    assert chart["line_label"] == "<= baseline * 1.5 + 0.01: baseline 0.08 -> <= 0.13"
    assert [(p["round"], p["verdict"]) for p in chart["points"]] == [(1, "passed"), (2, "failed")]
    assert chart["rounds"] == [{"round": 1, "verdict": "passed"}, {"round": 2, "verdict": "failed"}]
    # a measurement without its bound (taken before measurements carried one): made from the baseline alike
    older = {
        **ON_BASELINE,
        "measurements": [{k: v for k, v in m.items() if k != "bound"} for m in ON_BASELINE["measurements"]],
    }
    assert analysis_charts(older)[0]["threshold"] == pytest.approx(0.13)
    # no baseline measured: no line (it would be a guess), the condition still said
    [unknown] = analysis_charts({"measurements": older["measurements"]})
    assert unknown["threshold"] is None and unknown["line_label"] == "<= baseline * 1.5 + 0.01"


def test_the_rate_tests_line_is_the_tolerated_rate_and_the_view_json_carries_it() -> None:
    shown = row_analysis(bounded_verdict(RATE_TESTED))
    assert shown is not None
    [chart] = shown["charts"]
    assert (chart["line_kind"], chart["operator"], chart["threshold"]) == ("tolerated", "<=", 0.025)
    assert chart["line_label"] == "tolerated 0.025 (baseline 0.02)"
    assert [(p["value"], p["verdict"]) for p in chart["points"]] == [(0.021, "passed"), (None, "inconclusive")]
    assert chart["rounds"] == [{"round": 1, "verdict": "passed"}, {"round": 2, "verdict": "inconclusive"}]
    # a fixed threshold stays what it was
    assert analysis_charts(RESULT)[0]["line_kind"] == "threshold"
    assert analysis_charts(RESULT)[0]["line_label"] == "< 0.05"
