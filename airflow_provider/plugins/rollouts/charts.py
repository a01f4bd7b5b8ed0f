"""The measurement charts of the Rollouts view: an analysis's measurements per check over its rounds, with the
threshold and each round's verdict, as the pages draw them (plain SVG, no charting library: the page gets these
numbers and draws lines and dots).

Pure: from an analysis result (``AnalysisResult`` JSON, or the bounded copy the record keeps, whose latest
measurements only are there: ``measurements_total`` says how many were taken). A check's line is where its
verdicts were drawn:

* a fixed threshold (``kind`` ``"threshold"``) comes from its condition as written (``"< 0.05"``, ``"< 800ms"``:
  measured values are in the condition's unit);
* a condition on the baseline (``"<= baseline * 1.5 + 0.01"``, ``kind`` ``"baseline"``) is drawn at the bound it
  made from the baseline the preflight measured (each measurement's ``bound``), labelled with both;
* the statistical judge's (a ``RateTest``, ``kind`` ``"tolerated"``) at the tolerated rate (the baseline's rate
  times ``1 + tolerated_increase``), the test's own verdict per round being the dots' colours.

A condition that is not a comparison (an HTTP check's ``status 200``), or a baseline line whose baseline was
never measured, has no line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_provider.analysis.baseline import is_baseline_condition, parse_baseline_condition
from airflow_provider.analysis.conditions import parse_condition

__all__ = ["MAX_CHARTS", "analysis_charts", "round_verdicts"]

MAX_CHARTS = 8
"""Most checks charted for one analysis (the others are in the measurements' list)."""
_UNITS = {"ms": 1000.0, "s": 1.0}
_SEVERITY = {"passed": 0, "inconclusive": 1, "failed": 2}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _threshold(condition: str) -> tuple[str | None, float | None, str]:
    """``(operator, threshold, unit)`` of a condition as written; ``(None, None, "")`` when it is no comparison."""
    try:
        parsed = parse_condition(condition, units=_UNITS)
    except ValueError:
        return None, None, ""
    return parsed.operator, parsed.threshold, parsed.unit


def _shown(value: float, unit: str) -> str:
    return f"{value:.4g}{unit}"


def _line(condition: str, items: list[Mapping[str, Any]], baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """The line of a check's chart: ``kind``, ``operator``, ``threshold`` (where it is drawn), ``unit``, ``label``
    and ``baseline`` (the baseline's value, when the line was made from one)."""
    bounds = [_number(item.get("bound")) for item in items]
    bound = next((value for value in reversed(bounds) if value is not None), None)
    base = _number(baseline.get("value")) if baseline is not None else None
    if is_baseline_condition(condition):
        try:
            parsed = parse_baseline_condition(condition, units=_UNITS)
        except ValueError:
            parsed = None
        unit = parsed.unit if parsed is not None else ""
        operator = parsed.operator if parsed is not None else None
        if bound is None and parsed is not None and base is not None:
            bound = parsed.resolve(base).threshold
        label = f"{condition}: baseline {_shown(base, unit)}" if base is not None else condition
        if bound is not None:
            label += f" -> {operator} {_shown(bound, unit)}"
        return {"kind": "baseline", "operator": operator, "threshold": bound, "unit": unit, "label": label}
    if bound is not None:  # a rate test: judged against the baseline's rate, tolerated up to the bound
        label = f"tolerated {_shown(bound, '')}"
        if base is not None:
            label += f" (baseline {_shown(base, '')})"
        return {"kind": "tolerated", "operator": "<=", "threshold": bound, "unit": "", "label": label}
    operator, threshold, unit = _threshold(condition)
    return {"kind": "threshold", "operator": operator, "threshold": threshold, "unit": unit, "label": condition}


def _worst(verdicts: list[str]) -> str:
    known = [verdict for verdict in verdicts if verdict in _SEVERITY]
    return max(known, key=lambda verdict: _SEVERITY[verdict]) if known else "inconclusive"


def round_verdicts(measurements: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each round's verdict over every check measured in it: ``failed`` when one failed, else ``inconclusive``
    when one was, else ``passed``; oldest round first.

    :param measurements: the analysis's measurements.
    """
    by_round: dict[int, list[str]] = {}
    for item in measurements:
        number = item.get("round")
        if isinstance(number, int):
            by_round.setdefault(number, []).append(str(item.get("verdict")))
    return [{"round": number, "verdict": _worst(verdicts)} for number, verdicts in sorted(by_round.items())]


def analysis_charts(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One chart per check (at most :data:`MAX_CHARTS`): ``check``, ``condition``, its line (``line_kind``:
    ``threshold``, ``baseline`` or ``tolerated``, see the module; ``operator``, ``threshold``: where the line is,
    ``None`` for none; ``unit``; ``line_label``; ``baseline``: the baseline's value when the line was made from
    it), ``points`` (``round``, ``at``, ``value``: ``None`` when nothing could be measured, ``verdict``),
    ``rounds`` (each round's verdict over all checks, :func:`round_verdicts`) and ``verdict`` (the check's worst).
    ``[]`` when the result holds no measurement.

    :param result: an analysis result, or the record's bounded copy of one.
    """
    raw = result.get("measurements")
    measurements = [item for item in raw if isinstance(item, Mapping)] if isinstance(raw, list) else []
    if not measurements:
        return []
    rounds = round_verdicts(measurements)
    raw_baseline = result.get("baseline")
    baselines = {
        str(item.get("check")): item
        for item in (raw_baseline if isinstance(raw_baseline, list) else [])
        if isinstance(item, Mapping)
    }
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for item in measurements:
        by_check.setdefault(str(item.get("check") or "check"), []).append(item)
    charts = []
    for check, items in list(by_check.items())[:MAX_CHARTS]:
        condition = str(items[-1].get("condition") or "")
        line = _line(condition, items, baselines.get(check))
        points = [
            {
                "round": item.get("round"),
                "at": item.get("at"),
                "value": _number(item.get("value")),
                "verdict": str(item.get("verdict") or "inconclusive"),
            }
            for item in sorted(items, key=lambda item: (item.get("round") or 0, str(item.get("at") or "")))
        ]
        charts.append(
            {
                "check": check,
                "condition": condition,
                "line_kind": line["kind"],
                "operator": line["operator"],
                "threshold": line["threshold"],
                "unit": line["unit"],
                "line_label": line["label"],
                "baseline": _number(baselines[check].get("value")) if check in baselines else None,
                "points": points,
                "rounds": rounds,
                "verdict": _worst([str(point["verdict"]) for point in points]),
            }
        )
    return charts
