"""Analysis gates: judge a live revision by what the application does, measured again and again.

:mod:`~airflow_provider.analysis.definitions` holds what an analysis is (pure, validated at construction);
:mod:`~airflow_provider.analysis.judge` the verdict rules; :mod:`~airflow_provider.analysis.sources` how each
check kind is measured (async, requests shared across deployments); :mod:`~airflow_provider.analysis.run`
the rounds (:func:`run_analysis`).
"""

from __future__ import annotations

from airflow_provider.analysis.conditions import Condition, parse_condition
from airflow_provider.analysis.definitions import (
    Analysis,
    AnalysisResult,
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    Measurement,
    MetricQueryCheck,
    TracingProjectCheck,
)

__all__ = [
    "Analysis",
    "AnalysisResult",
    "AnalysisTarget",
    "CallableCheck",
    "Condition",
    "HttpCheck",
    "Measurement",
    "MetricQueryCheck",
    "TracingProjectCheck",
    "parse_condition",
]
