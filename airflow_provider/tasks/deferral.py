"""Airflow's own deferral timeout, as a resumed task sees it.

A deferring task gives ``defer()`` a ``timeout``; when its trigger has not fired by then (the triggerer was down,
or restarted too late), Airflow resumes the task with ``next_method="__fail__"`` and
``next_kwargs={"error": "Trigger timeout"}`` (the kwargs given to ``defer()`` are replaced), and
``BaseOperator.resume_execution`` raises ``TaskDeferralTimeout``. A task that must not leave a revision serving
unjudged overrides ``resume_execution`` and asks :func:`deferral_timed_out` first; what it resumes from then is its
``task_state_store`` record, the only thing that survives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFERRAL_TIMEOUT", "TRIGGER_FAIL_METHOD", "TRIGGER_TIMEOUT", "deferral_timed_out"]

TRIGGER_FAIL_METHOD = "__fail__"
"""The ``next_method`` Airflow resumes a task with when its deferral failed (``airflow.sdk.bases.operator``)."""
TRIGGER_TIMEOUT = "Trigger timeout"
"""The ``next_kwargs["error"]`` of a deferral that timed out (``TriggerFailureReason.TRIGGER_TIMEOUT``)."""
DEFERRAL_TIMEOUT = (
    "Airflow's deferral timeout ran out before the trigger reported (the triggerer was down, or restarted too "
    "late to finish in time)"
)
"""What a task says happened (never more: Airflow tells the task nothing else)."""


def deferral_timed_out(next_method: str, next_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether Airflow resumes the task because its deferral outlived the ``timeout`` given to ``defer()``.

    :param next_method: the method Airflow resumes the task in.
    :param next_kwargs: what it resumes it with.
    """
    error = (next_kwargs or {}).get("error")
    return next_method == TRIGGER_FAIL_METHOD and str(getattr(error, "value", error)) == TRIGGER_TIMEOUT
