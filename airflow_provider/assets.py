"""Airflow assets for deployments: the ``deployment-service://`` URI scheme and helpers to build them.

A deployment's asset is identified by its **id**, which users know at DAG-parse time and which never
changes or moves between hosts: ``deployment-service://deployments/<deployment id>``. The host of the
service is not part of the URI (it lives in the Airflow connection): one deployment id names one
deployment whichever region or base URL serves it. A deployment can also be watched under its **name**
(``deployment-service://deployment-names/<name>``): names are unique only within a workspace and a
name is reused when a deployment is deleted and created again, so name assets are produced only by a
watcher the user attaches to them; tasks always emit on the id asset.

The scheme is registered with Airflow through the provider info (``asset-uris``) with
:func:`normalize_deployment_uri` as its normalizer, so ``Asset("deployment-service://...")`` is checked
when the DAG is parsed: an id that is not a UUID, or any other shape, fails there.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset, AssetAlias, AssetWatcher

from airflow_provider.models import Deployment, canonical_uuid

ASSET_SCHEME = "deployment-service"
"""URI scheme of deployment assets."""
ID_HOST = "deployments"
"""URI host of assets naming a deployment by id."""
NAME_HOST = "deployment-names"
"""URI host of assets naming a deployment by name."""
REVISIONS_ALIAS_NAME = "deployment-service-revisions"
"""Name of the asset alias through which tasks emit events on the deployment they rolled out."""

EVENT_KINDS = (
    "revision_live",
    "revision_failed",
    "status_changed",
    "deleted",
    "revision_rolled_back",
    "revision_replaced",
)
"""What an event reports: a revision became active and ``READY`` (for a watcher: and settled, its judging
over); a revision failed to build or deploy; the deployment's status changed (e.g. to ``UNUSED`` or
``AWAITING_DELETE``); it disappeared; a revision a watcher announced stopped serving because an older one
serves again (``revision_rolled_back``) or a newer one does (``revision_replaced``)."""


def normalize_deployment_uri(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """Normalize a ``deployment-service://`` URI (Airflow's asset URI normalizer for the scheme).

    ``deployment-service://deployments/<uuid>``: the id is made canonical (lower case, hyphens);
    ``deployment-service://deployment-names/<name>``: the name is kept, percent-encoded once.

    :param parts: the split URI (scheme already lower case).
    :raises ValueError: for any other shape, naming what was expected.
    """
    host = parts.netloc.lower()
    segments = [urllib.parse.unquote(segment) for segment in parts.path.split("/") if segment]
    expected = f"expected {ASSET_SCHEME}://{ID_HOST}/<deployment id> or {ASSET_SCHEME}://{NAME_HOST}/<deployment name>"
    if parts.query or len(segments) != 1 or host not in (ID_HOST, NAME_HOST):
        raise ValueError(f"invalid deployment asset URI {urllib.parse.urlunsplit(parts)!r}: {expected}")
    if host == ID_HOST:
        try:
            value = canonical_uuid(segments[0], "deployment id")
        except ValueError as err:
            raise ValueError(f"invalid deployment asset URI {urllib.parse.urlunsplit(parts)!r}: {err}") from None
    else:
        value = segments[0].strip()
        if not value:
            raise ValueError(f"invalid deployment asset URI {urllib.parse.urlunsplit(parts)!r}: {expected}")
    return parts._replace(netloc=host, path="/" + urllib.parse.quote(value, safe=""), query="", fragment="")


def deployment_asset_uri(deployment_id: str | None = None, *, deployment_name: str | None = None) -> str:
    """The asset URI of a deployment, by id (canonical) or by name; give exactly one.

    :param deployment_id: the deployment's id (UUID).
    :param deployment_name: the deployment's name (see the module docs on names).
    """
    if (deployment_id is None) == (deployment_name is None):
        raise ValueError("give exactly one of deployment_id and deployment_name")
    if deployment_id is not None:
        return f"{ASSET_SCHEME}://{ID_HOST}/{canonical_uuid(deployment_id, 'deployment_id')}"
    assert deployment_name is not None
    if not isinstance(deployment_name, str) or not deployment_name.strip():
        raise ValueError(f"deployment_name must be a non-empty string, got {deployment_name!r}")
    return f"{ASSET_SCHEME}://{NAME_HOST}/{urllib.parse.quote(deployment_name.strip(), safe='')}"


def deployment_asset(
    deployment_id: str | None = None,
    *,
    deployment_name: str | None = None,
    watchers: list[AssetWatcher] | None = None,
    **asset_kwargs: Any,
) -> Asset:
    """The Airflow asset of a deployment (name and URI equal, so every DAG and task names it alike).

    :param deployment_id: the deployment's id (UUID); the asset tasks emit on.
    :param deployment_name: the deployment's name instead (watchers only; see the module docs).
    :param watchers: ``AssetWatcher`` objects, e.g. one running a
        :class:`~airflow_provider.triggers.watcher.DeploymentEventTrigger`.
    :param asset_kwargs: further ``Asset`` arguments (``group``, ``extra``).
    """
    uri = deployment_asset_uri(deployment_id, deployment_name=deployment_name)
    return Asset(name=uri, uri=uri, watchers=list(watchers or []), **asset_kwargs)


def revisions_alias() -> AssetAlias:
    """The asset alias through which tasks of this provider emit an event on the deployment they rolled
    out (added to their outlets automatically)."""
    return AssetAlias(name=REVISIONS_ALIAS_NAME)


def deployment_event(asset_event: Any) -> dict[str, Any] | None:
    """The deployment event carried by an Airflow asset event, from a task or from a watcher.

    A task puts the event in the asset event's ``extra``; a watcher's trigger event arrives as
    ``extra == {"from_trigger": True, "payload": <event>}``. Returns ``None`` for anything else.

    :param asset_event: an asset event (e.g. from ``triggering_asset_events``) or its ``extra`` dict.
    """
    extra = asset_event if isinstance(asset_event, dict) else getattr(asset_event, "extra", None)
    if not isinstance(extra, dict):
        return None
    if extra.get("from_trigger") and isinstance(extra.get("payload"), dict):
        extra = extra["payload"]
    return extra if extra.get("kind") in EVENT_KINDS and extra.get("deployment_id") else None


def event_payload(
    kind: str,
    deployment: Deployment | None,
    *,
    deployment_id: str,
    origin: str,
    previous_revision_id: str | None = None,
    previous_status: str | None = None,
    failed_revision_id: str | None = None,
    failed_revision_status: str | None = None,
    source_revision_config: dict[str, Any] | None = None,
    outcome: str | None = None,
    deployment_name: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON of one deployment event, the same for tasks (asset event ``extra``) and watchers.

    Never carries secrets: only ids, name, statuses, the revision settings (``repo_ref``, ``image_uri``,
    ``graph_config_path``, ``source_tarball_path``, ``repo_commit_sha``) and the deployment's URL.

    :param kind: one of :data:`EVENT_KINDS`.
    :param deployment: the deployment as last seen (``None`` once deleted).
    :param deployment_id: its id (also when deleted).
    :param origin: ``"task"`` or ``"watcher"``.
    :param previous_revision_id: the revision active before this one.
    :param previous_status: the status before (``status_changed``).
    :param failed_revision_id: the revision that failed (``revision_failed``).
    :param failed_revision_status: its status (``BUILD_FAILED``...).
    :param source_revision_config: the revision settings of the revision reported; by default the
        deployment's when its active revision is its latest (the spec's fields refer to the latest).
    :param outcome: what the task did (``rolled_out``, ``rolled_back``); defaults to ``kind``.
    :param deployment_name: the name when no deployment is given (deleted).
    :param extra: further plain-JSON fields (a watcher's ``judging``, ``verdict``, ``judged_by``...).
    """
    if kind not in EVENT_KINDS:
        raise ValueError(f"kind must be one of {', '.join(EVENT_KINDS)}, got {kind!r}")
    revision_id = deployment.active_revision_id if deployment is not None else None
    settled = deployment is not None and deployment.latest_revision_id == deployment.active_revision_id
    if source_revision_config is None and deployment is not None and kind != "revision_failed" and settled:
        source_revision_config = deployment.source_revision_config.model_dump(mode="json")
    url = deployment.source_config.custom_url if deployment is not None else None
    subject = {
        "revision_live": revision_id,
        "revision_failed": failed_revision_id,
        "status_changed": deployment.status.value if deployment is not None else None,
        "deleted": None,
        "revision_rolled_back": previous_revision_id,
        "revision_replaced": previous_revision_id,
    }[kind]
    payload = {
        "kind": kind,
        "event_id": f"{deployment_id}:{kind}:{subject or ''}",
        "origin": origin,
        "outcome": outcome or kind,
        "deployment_id": deployment_id,
        "deployment_name": deployment.name if deployment is not None else deployment_name,
        "status": deployment.status.value if deployment is not None else None,
        "previous_status": previous_status,
        "revision_id": revision_id,
        "previous_revision_id": previous_revision_id,
        "latest_revision_id": deployment.latest_revision_id if deployment is not None else None,
        "failed_revision_id": failed_revision_id,
        "failed_revision_status": failed_revision_status,
        "source_revision_config": source_revision_config,
        "deployment_url": url if url and url.startswith(("https://", "http://")) else None,
        "updated_at": deployment.updated_at.isoformat() if deployment is not None else None,
    }
    payload.update(extra or {})
    return payload


def state_store_unavailable(err: BaseException) -> str | None:
    """Why a deployment asset's state store could not be used, when that is a condition the provider expects (said
    without error text), else ``None`` (an error worth showing): the deployment has no asset in Airflow (no DAG
    names ``deployment_asset(<id>)``; the API answers 404), or the code runs where Airflow gives no async channel to
    the store (a trigger run inline by ``dag.test()``).

    :param err: what reading or writing the store raised.
    """
    text = str(err)
    if isinstance(err, AttributeError) and "asend" in text:
        return "no asset state store where this runs (a trigger run inline by dag.test())"
    status = getattr(getattr(err, "response", None), "status_code", None)  # the task SDK's client error (dag.test)
    if status == 404 or "404" in text or "not found" in text.lower():
        return "the deployment has no asset in Airflow (no DAG names deployment_asset(<id>))"
    return None


__all__ = [
    "ASSET_SCHEME",
    "EVENT_KINDS",
    "deployment_asset",
    "deployment_asset_uri",
    "deployment_event",
    "event_payload",
    "normalize_deployment_uri",
    "revisions_alias",
    "state_store_unavailable",
]
