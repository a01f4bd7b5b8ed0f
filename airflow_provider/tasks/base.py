"""The base every task of this provider stands on: connection arguments, the cached hook, argument checks.

Operators and sensors both inherit :class:`DeploymentServiceBaseTask` (a sensor as
``class S(BaseSensorOperator, DeploymentServiceBaseTask)``), so the connection id and the hook's override
numbers are declared and documented here once. The class is a ``BaseOperator`` so Airflow sees its
arguments: they can come from ``default_args`` and be given to ``.partial()``.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.defaults import DEFAULT_CONN_ID, DEFAULT_POLL_INTERVAL, DEFAULT_REVISION_CHECK_INTERVAL
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import canonical_uuid

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_REVISION_CHECK_INTERVAL",
    "DEFAULT_ROLLOUT_TIMEOUT",
    "DEFERRAL_GRACE",
    "MISSING_RENDERS",
    "DeploymentServiceBaseTask",
    "checked_ids",
    "non_negative_seconds",
    "positive_seconds",
]

DEFAULT_ROLLOUT_TIMEOUT = 3600.0
"""Seconds a task waits for a rollout before its final look."""
DEFERRAL_GRACE = 60.0
"""Seconds the triggerer's own timeout is given beyond the trigger's deadline (a safety net only)."""
MISSING_RENDERS = ("", "None", "null")
"""What a template renders to when the XCom or param it pulls is missing."""


def positive_seconds(value: float | timedelta, name: str) -> float:
    """``value`` as a positive number of seconds, or ``ValueError`` naming ``name``."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(seconds)


def non_negative_seconds(value: float, name: str) -> float:
    """``value`` as a number of seconds >= 0, or ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return float(value)


def checked_ids(deployment_id: Any, revision_id: Any) -> tuple[str, str | None]:
    """Canonical ``(deployment_id, revision_id)``; :class:`AirflowFailException` naming the bad field."""
    try:
        deployment = canonical_uuid(deployment_id, "deployment_id")
        # A template that pulls a missing revision renders "None": treat it as no revision.
        missing = revision_id is None or revision_id in MISSING_RENDERS
        revision = None if missing else canonical_uuid(revision_id, "revision_id")
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    return deployment, revision


class DeploymentServiceBaseTask(BaseOperator):
    """What every task of this provider takes: the connection and the hook's override numbers.

    Every override left ``None`` keeps the connection's value (its extras, else the provider's default).

    :param deployment_service_conn_id: the Airflow connection. Templated.
    :param connect_timeout: overrides the connection's connect timeout (seconds).
    :param read_timeout: overrides the connection's read timeout (seconds).
    :param max_attempts: overrides attempts per API call (first included; 1 = no retry).
    :param backoff_initial: overrides the first retry backoff (seconds; doubles each retry).
    :param backoff_max: overrides the longest retry backoff (seconds).
    :param retry_after_max: overrides the longest ``Retry-After`` honoured (seconds).
    """

    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        deployment_service_conn_id: str = DEFAULT_CONN_ID,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        retry_after_max: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deployment_service_conn_id = deployment_service_conn_id
        given = {
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "max_attempts": max_attempts,
            "backoff_initial": backoff_initial,
            "backoff_max": backoff_max,
            "retry_after_max": retry_after_max,
        }
        self.hook_overrides: dict[str, float] = {name: value for name, value in given.items() if value is not None}
        """The overrides that were given; they recreate the hook in a trigger."""

    @cached_property
    def hook(self) -> DeploymentServiceHook:
        """The hook for this task's connection and overrides (one pooled client per task run)."""
        return DeploymentServiceHook(self.deployment_service_conn_id, **self.hook_overrides)

    def close_hook(self) -> None:
        """Close the hook's pooled connections, if the hook was made (before deferring, failing or returning)."""
        if "hook" in self.__dict__:
            self.hook.close()
