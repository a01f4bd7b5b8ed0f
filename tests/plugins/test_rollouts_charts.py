"""The measurement charts' data (issue 32): each check's measurements over the rounds, its threshold line and
each round's verdict, from an analysis result or the record's bounded copy of one."""

from __future__ import annotations

from typing import Any

from airflow_provider.plugins.rollouts.charts import analysis_charts, round_verdicts
from airflow_provider.plugins.rollouts.shapes import row_analysis
from airflow_provider.record import bounded_verdict


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
