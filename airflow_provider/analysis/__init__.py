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
from airflow_provider.analysis.endpoints import AnalysisSetupError
from airflow_provider.analysis.judge import STILL_SERVING
from airflow_provider.analysis.run import run_analysis

__all__ = [
    "STILL_SERVING",
    "Analysis",
    "AnalysisResult",
    "AnalysisSetupError",
    "AnalysisTarget",
    "CallableCheck",
    "Condition",
    "HttpCheck",
    "Measurement",
    "MetricQueryCheck",
    "TracingProjectCheck",
    "parse_condition",
    "run_analysis",
]
