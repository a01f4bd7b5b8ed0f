"""The emulator's switches (see :mod:`airflow_provider.emulator.state`): the values each takes, and the checks
that name the accepted ones when a constructor argument or an admin request gives another."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

ResourceSpecMode = Literal["replace", "merge"]
"""How a PATCH's ``source_config.resource_spec`` applies (see :mod:`airflow_provider.emulator.state`)."""

RedeployMode = Literal["new_revision", "in_place"]
"""Whether ``POST .../redeploy`` creates a revision (see :mod:`airflow_provider.emulator.state`)."""

OptionalEndpoint = Literal[
    "get_deployment", "list_revisions", "get_revision", "redeploy", "revision_logs", "build_logs", "deploy_logs"
]
OPTIONAL_ENDPOINTS: tuple[str, ...] = get_args(OptionalEndpoint)
"""Names of the production-only endpoints, for ``disabled_endpoints``: ``GET /v2/deployments/{id}``,
``GET .../revisions``, ``GET .../revisions/{revision_id}``, ``POST .../revisions/{revision_id}/redeploy``,
``GET .../revisions/{revision_id}/logs``, and the older log routes the service's command-line client reads,
``POST /v1/projects/{id}/revisions/{revision_id}/build_logs`` and ``POST /v1/projects/{id}[/revisions/
{revision_id}]/deploy_logs``."""


def checked_spec_mode(value: str) -> ResourceSpecMode:
    """``value`` as a :data:`ResourceSpecMode`, or ``ValueError`` naming the accepted ones."""
    if value == "replace":
        return "replace"
    if value == "merge":
        return "merge"
    raise ValueError(f"resource_spec_mode must be 'replace' or 'merge', got {value!r}")


def checked_redeploy_mode(value: str) -> RedeployMode:
    """``value`` as a :data:`RedeployMode`, or ``ValueError`` naming the accepted ones."""
    if value == "new_revision":
        return "new_revision"
    if value == "in_place":
        return "in_place"
    raise ValueError(f"redeploy_mode must be 'new_revision' or 'in_place', got {value!r}")


def checked_endpoint_names(names: Iterable[str]) -> frozenset[str]:
    """``names`` (one name, or several) as a set of :data:`OPTIONAL_ENDPOINTS`, or ``ValueError`` naming the
    unknown ones and the accepted ones."""
    if isinstance(names, str):
        names = [names]
    chosen = frozenset(names)
    unknown = sorted(chosen.difference(OPTIONAL_ENDPOINTS))
    if unknown:
        raise ValueError(f"unknown endpoint names {unknown}; expected some of {list(OPTIONAL_ENDPOINTS)}")
    return chosen
