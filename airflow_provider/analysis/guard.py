"""The guard after landing (pure): what a user asks for (:class:`Guard`), what a task hands to the guard once its
revision landed (:class:`GuardRecord`, plain JSON in an Airflow Variable), how the guard's analyses follow one
another over the guarded time (:func:`window_of`) and how its regression is said in one line
(:func:`regression_text`).

A guard keeps judging a landed revision with its analysis, against the baseline its rollout measured, for
``for_seconds`` after landing, in the triggerer (:class:`~airflow_provider.triggers.guard.DeploymentGuardTrigger`);
no I/O and no Airflow here.

The analysis runs again and again, back to back: a *window* is one analysis of ``count`` rounds (every
``interval_seconds``) measuring the runs since the window started. Each window's statistical checks are always-valid
sequential tests, so a window may be looked at after every round; each statistical check's share of false alarms,
``1 - confidence``, is divided among the ``W`` windows of the guarded time (:func:`windows_in`: each window judges at
``1 - (1 - confidence) / W``), so the bound holds for the whole guard, not one window. An analysis without ``count``
is one window over the whole guarded time.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_provider.analysis.definitions import Analysis, Measurement
from airflow_provider.analysis.statistics.sequential_judge import DEFAULT_FEEDBACK_CONFIDENCE, is_statistical

__all__ = [
    "CLAIM_KEY_PREFIX",
    "GUARD_KEY_PREFIX",
    "STATUS_KEY_PREFIX",
    "Guard",
    "GuardRecord",
    "claim_key",
    "duration_text",
    "guard_key",
    "regression_text",
    "status_key",
    "window_analysis",
    "window_of",
    "windows_in",
]

GUARD_KEY_PREFIX = "deployment_service_guard"
"""Airflow Variable key prefix of the guarded revisions: ``deployment_service_guard:<conn id>:<deployment id>``."""
CLAIM_KEY_PREFIX = "deployment_service_guard_claim"
"""Airflow Variable key prefix of a regression's claim: ``deployment_service_guard_claim:<deployment>:<revision>``."""

STATUS_KEY_PREFIX = "deployment_service_guard_status"
"""Airflow Variable key prefix of what a guard last measured (the Rollouts view shows it):
``deployment_service_guard_status:<conn id>:<deployment id>``."""


def guard_key(conn_id: str, deployment_id: str) -> str:
    """The Variable key of a deployment's guard (one per deployment: a newer landing replaces it).

    :param conn_id: the deployment-service connection the guard measures through.
    :param deployment_id: the deployment.
    """
    return f"{GUARD_KEY_PREFIX}:{conn_id}:{deployment_id}"


def status_key(conn_id: str, deployment_id: str) -> str:
    """The Variable key of what the guard of a deployment last measured (written at most every few minutes).

    :param conn_id: the deployment-service connection.
    :param deployment_id: the deployment.
    """
    return f"{STATUS_KEY_PREFIX}:{conn_id}:{deployment_id}"


def claim_key(deployment_id: str, revision_id: str) -> str:
    """The Variable key of the claim on a revision's regression (one regression per revision, ever).

    :param deployment_id: the deployment.
    :param revision_id: the regressed revision.
    """
    return f"{CLAIM_KEY_PREFIX}:{deployment_id}:{revision_id}"


class Guard(BaseModel):
    """Keep judging a landed revision for ``for_seconds`` and roll it back once when it regresses.

    Give it to ``PatchDeploymentOperator(guard=...)`` or ``FleetRolloutOperator(guard=...)``: once the revision
    landed, the task hands it (with the baseline its rollout measured) to the guard and ends; the guard measures
    in the triggerer (:func:`~airflow_provider.plugins.rollouts.guard_dag.guard_dag`), and its DAG rolls the
    revision back to the one that served before when the analysis fails.

    :param analysis: the :class:`~airflow_provider.analysis.Analysis` that judges the landed revision, again and
        again: one window of ``count`` rounds after the other (``count=None``: one window over the whole guarded
        time). Measured in the triggerer: no :class:`~airflow_provider.analysis.CallableCheck`.
    :param for_seconds: how long after landing the revision is guarded (> 0, finite); the guard ends sooner when
        another revision serves.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    analysis: Analysis
    for_seconds: float = Field(gt=0)

    @field_validator("analysis", mode="before")
    @classmethod
    def _an_analysis(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        if not isinstance(value, Analysis):
            raise ValueError(f"must be an airflow_provider.analysis.Analysis, got {type(value).__name__}")
        if value.runs_on_worker:
            raise ValueError(
                "a guard measures in the triggerer, where a CallableCheck cannot run: use a TracingProjectCheck, "
                "an HttpCheck or a MetricQueryCheck"
            )
        return value

    @field_validator("for_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number of seconds, got {value!r}")
        return value


class GuardRecord(BaseModel):
    """A guarded revision, as the task hands it to the guard (JSON in the Variable :func:`guard_key`).

    :param deployment_id: the deployment.
    :param deployment_name: its name (the tracing project's, by default).
    :param revision_id: the landed revision guarded.
    :param previous_revision_id: the revision that served before it (what the guard's DAG rolls back to).
    :param conn_id: the deployment-service connection.
    :param landed_at: when the revision landed (UTC).
    :param until: when the guard ends (``landed_at + for_seconds``).
    :param analysis: the guard's analysis (:meth:`Analysis.to_json`).
    :param baseline: the baseline its rollout measured (the preflight's measurements), ``None`` when none.
    :param custom_url: the deployment's URL (an ``HttpCheck`` on ``{custom_url}``).
    :param handed_by: the task instance that handed it (``dag_id``, ``run_id``, ``task_id``, ``map_index``).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    deployment_id: str
    deployment_name: str = Field(min_length=1)
    revision_id: str
    previous_revision_id: str | None
    conn_id: str
    landed_at: datetime
    until: datetime
    analysis: dict[str, Any]
    baseline: list[dict[str, Any]] | None = None
    custom_url: str | None = None
    handed_by: dict[str, Any] = Field(default_factory=dict)

    def the_analysis(self) -> Analysis:
        """The analysis, validated again."""
        return Analysis.from_json(self.analysis)


def windows_in(analysis: Analysis, record: GuardRecord) -> int:
    """How many windows of ``analysis`` the guarded time of ``record`` holds (1 without ``count``): the number the
    statistical checks' false-alarm share is divided by.

    :param analysis: the guard's analysis.
    :param record: the guarded revision.
    """
    if analysis.count is None:
        return 1
    guarded = max(analysis.interval_seconds, (record.until - record.landed_at).total_seconds())
    length = analysis.initial_delay_seconds + analysis.count * analysis.interval_seconds
    return max(1, math.ceil(guarded / length))


def _with_share(check: Any, windows: int) -> Any:
    """``check`` judging at ``1 - (1 - confidence) / windows`` (a statistical check; any other as it is)."""
    if windows <= 1 or not is_statistical(check):
        return check
    if check.rate_test is not None:
        confidence = 1.0 - (1.0 - check.rate_test.confidence) / windows
        return check.model_copy(update={"rate_test": check.rate_test.model_copy(update={"confidence": confidence})})
    confidence = 1.0 - (1.0 - (check.confidence or DEFAULT_FEEDBACK_CONFIDENCE)) / windows
    return check.model_copy(update={"confidence": confidence})


def window_analysis(analysis: Analysis, rounds: int, windows: int) -> Analysis:
    """One window's analysis: ``rounds`` rounds, each statistical check judging at ``1 - (1 - confidence) /
    windows`` (the guard's false-alarm bound split among its windows: Bonferroni over the windows, each an
    always-valid test over its rounds).

    :param analysis: the guard's analysis.
    :param rounds: the window's rounds.
    :param windows: the windows of the guarded time (:func:`windows_in`).
    """
    checks = [_with_share(check, windows) for check in analysis.checks]
    return analysis.model_copy(update={"count": rounds, "checks": checks})


def window_of(analysis: Analysis, record: GuardRecord, now: datetime) -> tuple[datetime, Analysis]:
    """The guard window running at ``now``: its start and its analysis (``count`` resolved, each statistical
    check's false-alarm share divided among the windows, :func:`window_analysis`).

    Windows follow one another from ``landed_at``, each ``count * interval_seconds`` long (the last one cut at
    ``until``); an analysis without ``count`` is one window from ``landed_at`` to ``until``.

    :param analysis: the guard's analysis.
    :param record: the guarded revision.
    :param now: the time (aware).
    """
    interval = analysis.interval_seconds
    guarded = max(interval, (record.until - record.landed_at).total_seconds())
    if analysis.count is None:
        rounds = max(1, math.floor((guarded - analysis.initial_delay_seconds) / interval))
        return record.landed_at, window_analysis(analysis, rounds, 1)
    length = analysis.initial_delay_seconds + analysis.count * interval
    elapsed = max(0.0, (now - record.landed_at).total_seconds())
    start = record.landed_at + timedelta(seconds=math.floor(elapsed / length) * length)
    left = (record.until - start).total_seconds() - analysis.initial_delay_seconds
    rounds = max(1, min(analysis.count, math.floor(left / interval)))
    return start, window_analysis(analysis, rounds, windows_in(analysis, record))


def duration_text(seconds: float) -> str:
    """``7 h 12 min``, ``3 min 5 s``, ``42 s``: a duration as people say it.

    :param seconds: the duration.
    """
    total = max(0, round(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def _short(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def regression_text(
    failing: Measurement | dict[str, Any] | None, baseline: list[dict[str, Any]] | None, after_seconds: float
) -> str:
    """What the guard did, in one line: ``rolled back by the guard, 7 h 12 min after landing, correctness 0.61
    against 0.88``.

    :param failing: the failed measurement that decided the regression (``None``: unknown).
    :param baseline: the baseline's measurements (the same check's value is said "against"), ``None``: none.
    :param after_seconds: how long after landing the regression was found.
    """
    text = f"rolled back by the guard, {duration_text(after_seconds)} after landing"
    if not failing:
        return text
    check = str(failing.get("check") or "")
    name = check.removeprefix("tracing ").removeprefix("feedback.")
    value = failing.get("value")
    if isinstance(value, int | float) and not isinstance(value, bool):
        text += f", {name} {_short(float(value))}"
        base = next(
            (item.get("value") for item in baseline or [] if item.get("check") == check),
            None,
        )
        if isinstance(base, int | float) and not isinstance(base, bool):
            text += f" against {_short(float(base))}"
        elif isinstance(failing.get("bound"), int | float):
            text += f" against a bound of {_short(float(failing['bound']))}"
        elif failing.get("condition"):
            text += f" (needs {failing['condition']})"
    elif check:
        text += f", {check} failed"
    return text
