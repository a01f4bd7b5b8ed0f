"""Analysis gates: judge a live revision by what the application does, measured again and again.

:mod:`~airflow_provider.analysis.definitions` holds what an analysis is (pure, validated at construction);
:mod:`~airflow_provider.analysis.judge` the verdict rules; :mod:`~airflow_provider.analysis.measuring.sources` how each
check kind is measured (async, requests shared across deployments); :mod:`~airflow_provider.analysis.measuring.run`
the rounds (:func:`~airflow_provider.analysis.measuring.run.run_analysis`). ``run_analysis`` and ``AnalysisSetupError``
are imported from the package on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from airflow_provider.analysis.judge import STILL_SERVING

if TYPE_CHECKING:
    from airflow_provider.analysis.measuring.endpoints import AnalysisSetupError
    from airflow_provider.analysis.measuring.run import run_analysis

_MEASURING_NAMES = {
    "AnalysisSetupError": "airflow_provider.analysis.measuring.endpoints",
    "run_analysis": "airflow_provider.analysis.measuring.run",
}
"""Names of the measuring side, imported on first use: a DAG file that only defines an analysis (and the
operators that take one) does not import the HTTP clients and connection lookups that measure it."""


def __getattr__(name: str) -> Any:
    module = _MEASURING_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
