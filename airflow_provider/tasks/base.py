"""The base every task of this provider stands on: connection arguments, the cached hook, argument checks.

Operators and sensors both inherit :class:`DeploymentServiceBaseTask` (a sensor as
``class S(BaseSensorOperator, DeploymentServiceBaseTask)``), so the connection id and the hook's override
numbers are declared and documented here once. The class is a ``BaseOperator`` so Airflow sees its
arguments: they can come from ``default_args`` and be given to ``.partial()``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cached_property
from typing import Any

import pydantic
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.defaults import DEFAULT_CONN_ID, DEFAULT_POLL_INTERVAL, DEFAULT_REVISION_CHECK_INTERVAL
from airflow_provider.errors import AmbiguousDeploymentNameError, DeploymentNameNotFoundError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, canonical_uuid

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_REVISION_CHECK_INTERVAL",
    "DEFAULT_ROLLOUT_TIMEOUT",
    "DEFERRAL_GRACE",
    "MISSING_RENDERS",
    "MISSING_RENDER_SEGMENTS",
    "REVISION_VALUE_FIELDS",
    "DeploymentServiceBaseTask",
    "check_rendered_value",
    "checked_ids",
    "checked_name",
    "checked_revision_id",
    "deployment_by_name",
    "missing_render_problem",
    "non_negative_seconds",
    "positive_seconds",
    "validation_failure",
]

DEFAULT_ROLLOUT_TIMEOUT = 3600.0
"""Seconds a task waits for a rollout before its final look."""
DEFERRAL_GRACE = 60.0
"""Seconds the triggerer's own timeout is given beyond the trigger's deadline (a safety net only)."""
MISSING_RENDERS = ("", "None", "null")
"""What a template renders to when the XCom or param it pulls is missing."""
MISSING_RENDER_SEGMENTS = (*MISSING_RENDERS, "undefined")
"""Parts of a rendered URI or path that mean a missing XCom or param was spliced in (``undefined`` from
a value built in JavaScript or a shell)."""
REVISION_VALUE_FIELDS = ("image_uri", "repo_ref", "source_tarball_path", "graph_config_path")
"""The ``source_revision_config`` fields whose rendered value is checked for spliced-in missing renders."""
_MISSING_RENDER_CAUSE = (
    "what a template renders for a missing XCom or param (task id typo in xcom_pull? param not set?)"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SEPARATORS = re.compile(r"([:/@])")


def missing_render_problem(value: str, *, segments: bool = True) -> str | None:
    """Why ``value`` looks like a template spliced in a missing XCom or param, or ``None`` when it does not.

    A whole value of ``None``, ``null`` or blank is one; so is a part after ``:``, ``/`` or ``@`` that is
    ``None``, ``null``, ``undefined`` or empty (a value ending in ``:`` or ``/``), and such a part before the
    first separator. Only whole parts count: ``refs/heads/none-fix``, ``ghcr.io/acme/nullable:1`` and
    ``app@sha256:...`` pass, and a leading ``scheme://`` or ``/`` is not an empty part.

    :param value: the rendered value.
    :param segments: also look at the parts; else only at the whole value.
    """
    if value.strip() in MISSING_RENDERS:
        return f"the whole value is {value.strip()!r}" if value.strip() else "the value is empty"
    if not segments:
        return None
    parts = _SEPARATORS.split(_SCHEME.sub("", value, count=1))
    first = parts[0]
    if len(parts) == 1:
        return f"the whole value is {first!r}" if first in MISSING_RENDER_SEGMENTS else None
    if first in MISSING_RENDER_SEGMENTS and (first or parts[1] != "/"):
        return f"the part before {parts[1]!r} is {first!r}" if first else f"nothing comes before {parts[1]!r}"
    for index in range(1, len(parts), 2):
        separator, part = parts[index], parts[index + 1]
        if part == "" and index + 2 == len(parts):
            return f"it ends in {separator!r}"
        if part in MISSING_RENDER_SEGMENTS:
            return f"the part after {separator!r} is {part!r}" if part else f"the part after {separator!r} is empty"
    return None


def check_rendered_value(field: str, value: Any, *, segments: bool = True) -> None:
    """Refuse a rendered value that holds a missing render: :class:`AirflowFailException` naming ``field``,
    the value and the likely cause.

    :param field: the field's name as the user wrote it (``image_uri``, ``source_revision_config.repo_ref``).
    :param value: the rendered value (non-strings are left to the request's own validation).
    :param segments: also look at the parts of a URI or path (see :func:`missing_render_problem`); else only
        at the whole value.
    """
    if not isinstance(value, str):
        return
    problem = missing_render_problem(value, segments=segments)
    if problem is not None:
        raise AirflowFailException(
            f"{field} rendered to {value!r}: {problem}, {_MISSING_RENDER_CAUSE}; nothing was sent. "
            "Leave the field out, or set it to None, to keep the current value"
        )


def validation_failure(what: str, err: pydantic.ValidationError) -> AirflowFailException:
    """The task failure for arguments that do not validate: ``invalid <what>: <field>: <problem>``, never the
    input (it may be a secret).

    :param what: what was built (``"deployment filters"``, ``"patch for deployment <id>"``).
    :param err: pydantic's error.
    """
    return AirflowFailException(f"invalid {what}: {describe_validation_error(err)}")


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
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    return deployment, checked_revision_id(revision_id)


def checked_revision_id(revision_id: Any) -> str | None:
    """Canonical ``revision_id``, ``None`` for none (or a missing render); :class:`AirflowFailException` if bad."""
    # A template that pulls a missing revision renders "None": treat it as no revision.
    if revision_id is None or revision_id in MISSING_RENDERS:
        return None
    try:
        return canonical_uuid(revision_id, "revision_id")
    except ValueError as err:
        raise AirflowFailException(str(err)) from None


def checked_name(deployment_name: Any) -> str:
    """The rendered ``deployment_name``; :class:`AirflowFailException` when empty or a missing render."""
    if not isinstance(deployment_name, str):
        raise AirflowFailException(
            f"deployment_name must be a deployment's exact name, got {type(deployment_name).__name__} "
            f"{deployment_name!r}"
        )
    check_rendered_value("deployment_name", deployment_name, segments=False)
    return deployment_name


def deployment_by_name(hook: DeploymentServiceHook, deployment_name: str) -> Deployment:
    """The deployment named exactly ``deployment_name``; :class:`AirflowFailException` (no retry: the names
    will not change by waiting) when none or several are.

    :param hook: the hook to ask.
    :param deployment_name: the checked name (see :func:`checked_name`).
    """
    try:
        return hook.get_deployment_by_name(deployment_name)
    except (DeploymentNameNotFoundError, AmbiguousDeploymentNameError) as err:
        raise AirflowFailException(f"deployment_name={deployment_name!r}: {err}") from None


def task_options(task: type) -> set[str]:
    """The arguments ``task`` takes: every ``__init__`` parameter along its classes (``retries``, ``pool``...)."""
    import inspect  # lazily: only a misspelt argument pays for it

    names: set[str] = set()
    for klass in task.__mro__:
        init = vars(klass).get("__init__")
        if init is not None and callable(init):
            names.update(
                name
                for name, parameter in inspect.signature(init).parameters.items()
                if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL) and name != "self"
            )
    return names


def unknown_arguments(task: type, kwargs: dict[str, Any]) -> None:
    """``TypeError`` naming each argument no class of ``task`` takes and the closest it does (``image`` ->
    "did you mean image_uri?"), before Airflow's generic "Invalid arguments were passed". Values are never
    shown (one may be a secret).

    :param task: the task's class.
    :param kwargs: what is left for :class:`BaseOperator` (what the classes above took is gone).
    """
    given = [name for name in kwargs if not name.startswith("_")]
    if not given:
        return
    options = task_options(task)
    unknown = [name for name in given if name not in options]
    if not unknown:
        return
    from airflow_provider.suggestions import did_you_mean

    own = sorted(options - task_options(BaseOperator))
    task_id = kwargs.get("task_id")
    parts = [f"{name} ({did_you_mean(name, options) or 'its own arguments are ' + ', '.join(own)})" for name in unknown]
    raise TypeError(
        f"{task.__name__}(task_id={task_id!r}) got unknown argument{'s' if len(unknown) > 1 else ''}: "
        + "; ".join(parts)
    )


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
        unknown_arguments(type(self), kwargs)
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
