"""The fleet operator's arguments, checked when the DAG is parsed: exactly one way to name the targets, a change
to make, callables where callables are expected, and an analysis that can run; each error names the argument
and what was expected (a templated value is checked again once rendered, when the task runs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider.defaults import RESOURCE_SPEC_MODES
from airflow_provider.tasks.base import non_negative_seconds
from airflow_provider.tasks.fleet.plan import check_filters

if TYPE_CHECKING:
    from airflow_provider.analysis import Analysis

__all__ = [
    "CANARY_BASELINES",
    "check_arguments",
    "check_budget_fits",
    "check_canary_baseline",
    "check_targets",
    "known_fleet_size",
]

CANARY_BASELINES = ("previous_revision", "control_group")
"""What the canary's checks on the baseline compare with: the revision each canary deployment served before the
rollout (measured by the preflight), or the control group (the deployments not rolled out yet, same window)."""


def known_fleet_size(targets: Mapping[str, Any]) -> int | None:
    """How many deployments the fleet has when the DAG is parsed: the distinct ids or names given as a literal
    list or comma-separated string; ``None`` when it is known only once the task runs (filters, a template, an
    ``XComArg``).

    :param targets: ``{"deployment_ids": ..., "deployment_names": ..., "filters": ...}`` as given.
    """
    for name in ("deployment_ids", "deployment_names"):
        value = targets.get(name)
        if isinstance(value, str):
            if "{{" in value or "{%" in value:
                return None
            value = [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            if any("{{" in item or "{%" in item for item in value):
                return None
            return len(set(value))
    return None


def check_budget_fits(max_failures: int | float, fleet_size: int) -> None:
    """``ValueError`` when ``max_failures`` (a count) is larger than the fleet: a budget no rollout can spend,
    most often a fraction meant (``0.1``) or the wrong fleet.

    :param max_failures: the checked ``max_failures``.
    :param fleet_size: deployments in the fleet.
    """
    if isinstance(max_failures, int) and max_failures > fleet_size:
        raise ValueError(
            f"max_failures ({max_failures}) is larger than the fleet ({fleet_size} deployment"
            f"{'s' if fleet_size != 1 else ''}): the budget could never stop the rollout; give a count of at most "
            f"{fleet_size}, or a fraction of the fleet (0.1 = 10 %)"
        )


def check_targets(targets: Mapping[str, Any]) -> None:
    """Refuse anything but exactly one non-empty way to name the targets (``ValueError``).

    :param targets: ``{"deployment_ids": ..., "deployment_names": ..., "filters": ...}`` as given.
    """
    named = [name for name, value in targets.items() if value is not None]
    if len(named) != 1:
        problem = "no targets" if not named else f"{' and '.join(named)} given together"
        raise ValueError(f"{problem}: give exactly one of deployment_ids, deployment_names, filters")
    value = targets[named[0]]
    if value in ("", []) or (isinstance(value, (list, tuple)) and not any(value)):
        raise ValueError(f"{named[0]} is empty: no targets")
    filters = targets.get("filters")
    if isinstance(filters, Mapping):
        check_filters(filters)


def check_arguments(
    *,
    targets: Mapping[str, Any],
    change: Mapping[str, Any],
    patch_for: Callable[..., Any] | None,
    verify: Callable[..., Any] | None,
    analysis: Analysis | None,
    bake_seconds: float,
    resource_spec_mode: str,
) -> None:
    """Refuse fleet arguments that cannot make a rollout (``ValueError`` naming the argument), before any request.

    :param targets: ``{"deployment_ids": ..., "deployment_names": ..., "filters": ...}`` as given.
    :param change: the fixed change's arguments that were given (not ``None``).
    :param patch_for: the per-deployment change, or ``None``.
    :param verify: the user's check, or ``None``.
    :param analysis: the analysis, or ``None`` (its ``count=None`` needs ``bake_seconds`` to fill).
    :param bake_seconds: the bake, as given.
    :param resource_spec_mode: ``"merge"`` or ``"replace"``.
    """
    if resource_spec_mode not in RESOURCE_SPEC_MODES:
        raise ValueError(f"resource_spec_mode must be 'merge' or 'replace', got {resource_spec_mode!r}")
    check_targets(targets)
    if patch_for is not None and not callable(patch_for):
        raise ValueError(f"patch_for must be a callable Deployment -> patch arguments, got {patch_for!r}")
    if not change and patch_for is None:
        raise ValueError(
            "no change: give image_uri, repo_ref, source_revision_config, source_config, revision_source, "
            "secrets or secret_references, or patch_for"
        )
    if verify is not None and not callable(verify):
        raise ValueError(f"verify must be a callable given the live Deployment, got {verify!r}")
    if analysis is not None:
        from airflow_provider.analysis import Analysis  # loaded already: the caller built one

        if not isinstance(analysis, Analysis):
            raise ValueError(f"analysis must be an airflow_provider.analysis.Analysis, got {type(analysis).__name__}")
        # count=None fills the bake window: without one there is nothing to fill (names analysis.count).
        analysis.with_count_for(non_negative_seconds(bake_seconds, "bake_seconds") or None)


def check_canary_baseline(canary_baseline: object, analysis: Analysis | None, canary: object) -> None:
    """Refuse a ``canary_baseline`` the rollout cannot use (``ValueError`` naming the argument): another value than
    :data:`CANARY_BASELINES`; ``"control_group"`` without an analysis, without a canary, or without a check it
    applies to (a :class:`~airflow_provider.analysis.TracingProjectCheck` of ``error_rate`` with a ``RateTest``, or
    of a ``feedback.<key>`` on the baseline).

    :param canary_baseline: as given.
    :param analysis: the fleet task's analysis.
    :param canary: the fleet task's ``canary``.
    """
    from airflow_provider.analysis.statistics.control import pooled_checks

    if canary_baseline not in CANARY_BASELINES:
        raise ValueError(
            f"canary_baseline must be one of {', '.join(map(repr, CANARY_BASELINES))}, got {canary_baseline!r}"
        )
    if canary_baseline != "control_group":
        return
    wanted = "canary_baseline='control_group' judges the canary against the deployments not rolled out yet"
    if analysis is None:
        raise ValueError(f"{wanted}: give an analysis")
    if canary is None:
        raise ValueError(f"{wanted}: give a canary (a count or names)")
    if not pooled_checks(analysis):
        raise ValueError(
            f"{wanted}, by its statistical tracing checks: an error_rate with a rate_test, or a feedback.<key> on the "
            "baseline; the analysis has none (give the error-rate check rate_test=RateTest(), or a feedback check a "
            "condition like '>= baseline - 0.05')"
        )
