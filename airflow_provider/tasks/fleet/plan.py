"""The fleet's targets: resolved from the operator's ``deployment_ids``, ``deployment_names`` or ``filters``
when the task runs (anything that names nothing fails the task before any patch), and deployments read 100 to
a list request."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    ListDeploymentsQuery,
    canonical_uuid,
)

if TYPE_CHECKING:
    pass


TARGET_FILTERS = (
    "name_contains",
    "status",
    "remote_reconciled",
    "tag_value_ids",
    "image_version",
    "deployment_type",
    "deployment_ids",
)
"""The filters of the list endpoint a fleet's ``filters`` may use."""


def check_filters(filters: Any) -> None:
    """Refuse a ``filters`` value that is not a mapping of known, non-empty filters (``ValueError``).

    :param filters: the argument (a literal mapping; a template string is checked after render).
    """
    if not isinstance(filters, Mapping):
        raise ValueError(f"filters must be a mapping of list-endpoint filters, got {type(filters).__name__}")
    unknown = sorted(set(filters) - set(TARGET_FILTERS))
    if unknown:
        raise ValueError(f"filters has unknown filter(s) {', '.join(unknown)}; known: {', '.join(TARGET_FILTERS)}")
    if not any(value not in (None, "", []) for value in filters.values()):
        raise ValueError("filters is empty: it would roll out to every deployment; give at least one filter")


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return [str(item).strip() for item in value]


def chunks(items: Sequence[str], size: int = MAX_PAGE_SIZE) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def read_deployments(hook: DeploymentServiceHook, deployment_ids: Sequence[str]) -> dict[str, Deployment]:
    """The deployments with these ids that exist, one list request per 100.

    :param hook: the hook.
    :param deployment_ids: canonical ids.
    """
    found: dict[str, Deployment] = {}
    for chunk in chunks(list(dict.fromkeys(deployment_ids))):
        page = hook.list_deployments(deployment_ids=list(chunk), limit=MAX_PAGE_SIZE)
        found.update({item.id: item for item in page.resources if item.id in chunk})
    return found


def resolve_targets(
    hook: DeploymentServiceHook,
    *,
    deployment_ids: Any,
    deployment_names: Any,
    filters: Any,
) -> list[Deployment]:
    """The deployments of the fleet, in rollout order (as given; by name for ``filters``).

    Exactly one of the three must be given (checked by the operator); a rendered value that names nothing,
    an unknown id or name, or an invalid filter fails the task before anything is patched.

    :param hook: the hook.
    :param deployment_ids: ids (list, or comma-separated string).
    :param deployment_names: exact names (list, or comma-separated string).
    :param filters: list-endpoint filters (see :data:`TARGET_FILTERS`).
    """
    if deployment_ids is not None:
        try:
            ids = [canonical_uuid(value, "deployment_ids") for value in as_list(deployment_ids)]
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        if not ids:
            raise AirflowFailException(f"deployment_ids rendered to {deployment_ids!r}: no targets")
        found = read_deployments(hook, ids)
        missing = [value for value in dict.fromkeys(ids) if value not in found]
        if missing:
            raise AirflowFailException(f"deployment_ids: no deployment with id {', '.join(missing)}")
        return [found[value] for value in dict.fromkeys(ids)]
    if deployment_names is not None:
        names = list(dict.fromkeys(as_list(deployment_names)))
        if not names:
            raise AirflowFailException(f"deployment_names rendered to {deployment_names!r}: no targets")
        by_name: dict[str, list[Deployment]] = {}
        if len(names) <= 5:  # a few names: one filtered listing each
            for name in names:
                for item in hook.iter_deployments(ListDeploymentsQuery(limit=MAX_PAGE_SIZE, name_contains=name)):
                    by_name.setdefault(item.name, []).append(item)
        else:  # many names: the whole tenant once
            for item in hook.iter_deployments(ListDeploymentsQuery(limit=MAX_PAGE_SIZE)):
                by_name.setdefault(item.name, []).append(item)
        missing = [name for name in names if not by_name.get(name)]
        if missing:
            raise AirflowFailException(f"deployment_names: no deployment named {', '.join(missing)}")
        repeated = [name for name in names if len({item.id for item in by_name[name]}) > 1]
        if repeated:
            raise AirflowFailException(f"deployment_names: more than one deployment named {', '.join(repeated)}")
        return [by_name[name][0] for name in names]
    if isinstance(filters, str):
        try:
            filters = json.loads(filters)
        except ValueError:
            raise AirflowFailException(f"filters rendered to {filters!r}: expected a mapping of filters") from None
    try:
        check_filters(filters)
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    given = {name: value for name, value in filters.items() if value not in (None, "", [])}
    for name in ("tag_value_ids", "deployment_ids"):
        if name in given:
            given[name] = as_list(given[name])
    try:
        query = ListDeploymentsQuery.model_validate({"limit": MAX_PAGE_SIZE, **given})
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"filters: {describe_validation_error(err)}") from None
    deployments = sorted(hook.iter_deployments(query), key=lambda item: (item.name, item.id))
    if not deployments:
        shown = ", ".join(f"{name}={value!r}" for name, value in sorted(given.items()))
        raise AirflowFailException(f"filters matched no deployment ({shown}): no targets")
    return list({item.id: item for item in deployments}.values())
