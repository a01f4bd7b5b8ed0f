"""Constants every layer agrees on, defined once: the connection type and the transport's defaults.

Imports nothing, so ``get_provider_info`` (run on every Airflow start-up) can read it for free.
"""

from __future__ import annotations

CONN_TYPE = "deployment_service"
"""The Airflow connection type of this provider."""
DEFAULT_CONN_ID = "deployment_service_default"
"""The connection every hook and task uses when given none."""
VIEW_URL_PREFIX = "/deployment-service"
"""Where the API server mounts the Rollouts view (its pages, assets and JSON); tasks link to it in notifications."""

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the service."""
DEFAULT_READ_TIMEOUT = 30.0
"""Seconds to wait for the service's answer."""
DEFAULT_MAX_ATTEMPTS = 5
"""Attempts per API call, the first included (1 = no retry)."""
DEFAULT_BACKOFF_INITIAL = 0.5
"""Base delay in seconds of the first retry; doubles each retry (full jitter)."""
DEFAULT_BACKOFF_MAX = 30.0
"""Cap in seconds of one backoff delay."""
DEFAULT_RETRY_AFTER_MAX = 120.0
"""Cap in seconds on how long a ``Retry-After`` header is honoured."""
TEST_CONNECTION_CONNECT_TIMEOUT = 5.0
"""Seconds ``test_connection`` waits at most to connect (it makes one attempt, no retries)."""
TEST_CONNECTION_READ_TIMEOUT = 10.0
"""Seconds ``test_connection`` waits at most for the answer."""

DEFAULT_POLL_INTERVAL = 30.0
"""Seconds between two looks at a rollout (tasks and triggers)."""
DEFAULT_REVISION_CHECK_INTERVAL = 600.0
"""Safety-net interval of revision-endpoint calls while a building deployment shows no change."""

RESOURCE_SPEC_MODES = ("merge", "replace")
"""How a patch's ``resource_spec`` is sent: completed from the current one, or as given (checked when a patch or
fleet task is constructed; ``airflow_provider.decisions.patch_rules`` re-exports it)."""

SETTING_OVERRIDES = (
    "connect_timeout",
    "read_timeout",
    "max_attempts",
    "backoff_initial",
    "backoff_max",
    "retry_after_max",
)
"""Numbers a hook (and every task) may set over the connection's; they travel into triggers unchanged."""


def checked_setting_overrides(**values: float | None) -> dict[str, float]:
    """The hook overrides a trigger was given (``None``: the connection's), each checked to be a positive number.

    :param values: each of :data:`SETTING_OVERRIDES` by name (``None`` for not given).
    :raises ValueError: naming the first override that is not a positive number, or a name that is none.
    """
    unknown = sorted(set(values) - set(SETTING_OVERRIDES))
    if unknown:
        raise ValueError(f"not a hook override: {', '.join(unknown)}; known: {', '.join(SETTING_OVERRIDES)}")
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return {name: value for name, value in values.items() if value is not None}
