"""Load and validate the emulator's seed data.

The file is JSON::

    {"oauth_providers": [OAuthProvider, ...],
     "integrations": {"<integration uuid>": [Repository, ...]},
     "deployments": [Deployment, ...]}

A deployment entry is a Deployment resource in which everything but ``name`` and ``source`` may be left
out (ids, tenant, timestamps, status and revisions are filled in), plus emulator-only keys:
``deployment_type``, ``tag_value_ids``, ``remote_reconciled``, ``build_seconds`` and ``revisions`` (a
list of Revision resources, oldest first; a revision's ``source`` defaults to the deployment's).
Without ``revisions``, a deployment whose
``active_revision_id``/``latest_revision_id`` are missing gets one deployed revision; a
``latest_revision_id`` different from ``active_revision_id`` names a revision that starts building when
the data is loaded. Every problem is reported with its place, e.g. ``deployments[3].source: ...``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_provider.models import (
    STRICT_READING,
    Deployment,
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    OAuthProvider,
    Repository,
    Revision,
    RevisionStatus,
    canonical_uuid,
    error_message,
)

from .records import DeploymentRecord, RevisionRecord, ServiceDeploymentType

DataSource = str | Path | Mapping[str, Any]
"""A data file path, or its already-parsed content."""

TOP_LEVEL_KEYS = ("oauth_providers", "integrations", "deployments")
_NAMESPACE = uuid.UUID("6f1c2d4e-1b7a-4f0e-9d0c-5a8e3b2c1d00")
_MAX_PROBLEMS = 50
M = TypeVar("M", bound=BaseModel)


class EmulatorDataError(ValueError):
    """The seed data is invalid; the message lists every problem with its place.

    :param origin: where the data came from (file name or ``<data>``).
    :param problems: one ``place: message`` string per problem.
    """

    def __init__(self, origin: str, problems: list[str]) -> None:
        self.origin = origin
        self.problems = problems
        shown = problems[:_MAX_PROBLEMS]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        super().__init__(f"invalid emulator data in {origin}:\n  " + "\n  ".join(shown) + more)


class _DeploymentExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deployment_type: ServiceDeploymentType = "dev"
    tag_value_ids: list[str] = Field(default_factory=list)
    remote_reconciled: bool = False
    build_seconds: float | None = Field(default=None, ge=0)
    revisions: list[dict[str, Any]] | None = None


_EXTRA_KEYS = tuple(_DeploymentExtras.model_fields)


@dataclass
class SeedData:
    """Validated seed data.

    :param oauth_providers: OAuth providers.
    :param integrations: repositories by integration id.
    :param deployments: deployments with their revisions.
    """

    oauth_providers: list[OAuthProvider] = field(default_factory=list)
    integrations: dict[str, list[Repository]] = field(default_factory=dict)
    deployments: list[DeploymentRecord] = field(default_factory=list)


def example_data_path() -> Path:
    """Path of the example data shipped with the package."""
    return Path(str(resources.files("airflow_provider.emulator").joinpath("data", "example.json")))


def read_data(source: DataSource | None) -> tuple[str, Any]:
    """Return ``(origin, parsed JSON)`` of ``source``; ``None`` means the shipped example data."""
    if isinstance(source, Mapping):
        return "<data>", source
    path = Path(source) if source is not None else example_data_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise EmulatorDataError(str(path), [f"cannot read the file: {error}"]) from error
    try:
        return str(path), json.loads(text)
    except json.JSONDecodeError as error:
        raise EmulatorDataError(str(path), [f"not valid JSON: {error}"]) from error


def load_data(
    source: DataSource | None,
    *,
    default_tenant_id: str,
    now: datetime,
    build_seconds: float,
) -> SeedData:
    """Read and validate seed data.

    :param source: a path, parsed content, or ``None`` for the shipped example data.
    :param default_tenant_id: tenant of deployments that name none.
    :param now: load time; revisions still to build start then.
    :param build_seconds: the emulator's build duration, for revisions that build.
    :raises EmulatorDataError: listing every problem found.
    """
    origin, raw = read_data(source)
    problems: list[str] = []
    seed = SeedData()
    if not isinstance(raw, Mapping):
        raise EmulatorDataError(origin, [f"expected a JSON object with keys {', '.join(TOP_LEVEL_KEYS)}"])
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            problems.append(f"{key}: unknown top-level key; expected {', '.join(TOP_LEVEL_KEYS)}")
    for index, entry in enumerate(_as_list(raw.get("oauth_providers", []), "oauth_providers", problems)):
        provider = _validate(OAuthProvider, entry, f"oauth_providers[{index}]", problems)
        if provider is not None:
            seed.oauth_providers.append(provider)
    seed.integrations = _load_integrations(raw.get("integrations", {}), problems)
    seen_ids: set[str] = set()
    seen_names: set[tuple[str, str]] = set()
    for index, entry in enumerate(_as_list(raw.get("deployments", []), "deployments", problems)):
        place = f"deployments[{index}]"
        record = _load_deployment(entry, place, problems, default_tenant_id, now, build_seconds)
        if record is None:
            continue
        if record.id in seen_ids:
            problems.append(f"{place}.id: duplicate deployment id {record.id}")
        key = (record.resource.tenant_id, record.resource.name)
        if key in seen_names:
            problems.append(f"{place}.name: duplicate name {key[1]!r} in tenant {key[0]}")
        seen_ids.add(record.id)
        seen_names.add(key)
        seed.deployments.append(record)
    if problems:
        raise EmulatorDataError(origin, problems)
    return seed


def _as_list(value: Any, place: str, problems: list[str]) -> list[Any]:
    if isinstance(value, list):
        return value
    problems.append(f"{place}: expected a list, got {type(value).__name__}")
    return []


def _validate(model: type[M], entry: Any, place: str, problems: list[str]) -> M | None:
    if not isinstance(entry, Mapping):
        problems.append(f"{place}: expected an object, got {type(entry).__name__}")
        return None
    try:
        result = model.model_validate(entry, context=STRICT_READING)  # seed data must be exactly right
    except ValidationError as error:
        problems.extend(_format_errors(error, place))
        return None
    for path, known in getattr(result, "unknown_fields", lambda: iter(()))():
        problems.append(f"{place}.{path}: unknown field; expected one of {', '.join(known)}")
    for index, secret in enumerate(getattr(result, "secrets", None) or []):
        if secret.value is None:  # the service may hide values in answers, but it stores one for each
            problems.append(f"{place}.secrets[{index}].value: Field required")
    return result


def _format_errors(error: ValidationError, place: str) -> list[str]:
    lines = []
    for item in error.errors():
        loc = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"])
        lines.append(f"{place}{loc}: {error_message(item)}")
    return lines


def _load_integrations(raw: Any, problems: list[str]) -> dict[str, list[Repository]]:
    if not isinstance(raw, Mapping):
        problems.append(f"integrations: expected an object mapping integration ids to lists, got {type(raw).__name__}")
        return {}
    integrations: dict[str, list[Repository]] = {}
    for key, repos in raw.items():
        place = f"integrations[{key!r}]"
        try:
            integration_id = canonical_uuid(key, "integration id")
        except ValueError as error:
            problems.append(f"{place}: {error}")
            continue
        integrations[integration_id] = []
        for index, entry in enumerate(_as_list(repos, place, problems)):
            if isinstance(entry, Mapping):
                entry = {"host_integration_id": integration_id, **entry}
            repo = _validate(Repository, entry, f"{place}[{index}]", problems)
            if repo is None:
                continue
            if repo.host_integration_id != integration_id:
                problems.append(f"{place}[{index}].host_integration_id: must equal the integration id {integration_id}")
            integrations[integration_id].append(repo)
    return integrations


def _load_deployment(
    entry: Any,
    place: str,
    problems: list[str],
    default_tenant_id: str,
    now: datetime,
    build_seconds: float,
) -> DeploymentRecord | None:
    if not isinstance(entry, Mapping):
        problems.append(f"{place}: expected an object, got {type(entry).__name__}")
        return None
    before = len(problems)
    body = {key: value for key, value in entry.items() if key not in _EXTRA_KEYS}
    extras = _validate(_DeploymentExtras, {k: v for k, v in entry.items() if k in _EXTRA_KEYS}, place, problems)
    if "source" in body and body["source"] not in [source.value for source in DeploymentSource]:
        allowed = ", ".join(source.value for source in DeploymentSource)
        problems.append(f"{place}.source: must be one of {allowed}, got {body['source']!r}")
    if "status" in body and body["status"] not in [status.value for status in DeploymentStatus]:
        allowed = ", ".join(status.value for status in DeploymentStatus)
        problems.append(f"{place}.status: must be one of {allowed}, got {body['status']!r}")
    name = body.get("name")
    body.setdefault("id", str(uuid.uuid5(_NAMESPACE, f"{place}/{name}")))
    body.setdefault("tenant_id", default_tenant_id)
    body.setdefault("created_at", now.isoformat())
    body.setdefault("updated_at", body["created_at"])
    body.setdefault("source_config", {})
    body.setdefault("source_revision_config", {})
    body.setdefault("secrets", [])
    given_active, given_latest = "active_revision_id" in body, "latest_revision_id" in body
    given_status = "status" in body
    body.setdefault("active_revision_id", body.get("latest_revision_id"))
    body.setdefault("latest_revision_id", body.get("active_revision_id"))
    if not given_active and not given_latest and not (extras and extras.revisions):
        first = str(uuid.uuid5(_NAMESPACE, f"{body['id']}/revision-1"))
        body["active_revision_id"] = body["latest_revision_id"] = first
    body.setdefault("status", "READY" if body["active_revision_id"] else "AWAITING_DATABASE")
    resource = _validate(Deployment, body, place, problems)
    if resource is None or extras is None or len(problems) > before:
        return None
    record = DeploymentRecord(
        resource=resource,
        deployment_type=DeploymentType(extras.deployment_type),
        tag_value_ids=extras.tag_value_ids,
        remote_reconciled=extras.remote_reconciled,
        build_seconds=extras.build_seconds,
    )
    duration = extras.build_seconds if extras.build_seconds is not None else build_seconds
    if extras.revisions is not None:
        given = (given_active, given_latest, given_status)
        _load_revisions(record, extras.revisions, given, place, problems, now, duration)
    else:
        _make_revisions(record, now, duration)
    return None if len(problems) > before else record


def _make_revisions(record: DeploymentRecord, now: datetime, build_seconds: float) -> None:
    resource = record.resource
    active, latest = resource.active_revision_id, resource.latest_revision_id
    if active is not None:
        deployed = RevisionRecord(
            id=active,
            deployment_id=resource.id,
            source_revision_config=resource.source_revision_config,
            created_at=resource.created_at,
            build_seconds=build_seconds,
            source=record.source,
            remote_reconciled=record.remote_reconciled,
            status=RevisionStatus.DEPLOYED,
            started_at=resource.created_at,
        )
        record.revisions.append(deployed)
        record.active_since = resource.created_at
    if latest is not None and latest != active:
        building = RevisionRecord(
            id=latest,
            deployment_id=resource.id,
            source_revision_config=resource.source_revision_config,
            created_at=min(resource.updated_at, now),
            build_seconds=build_seconds,
            source=record.source,
            remote_reconciled=record.remote_reconciled,
            status=RevisionStatus.QUEUED,  # created before the data was loaded: past its first moments
        )
        record.revisions.append(building)
        building.start(now)


def _load_revisions(
    record: DeploymentRecord,
    entries: list[dict[str, Any]],
    given: tuple[bool, bool, bool],
    place: str,
    problems: list[str],
    now: datetime,
    build_seconds: float,
) -> None:
    resource = record.resource
    given_active, given_latest, given_status = given
    for index, entry in enumerate(entries):
        where = f"{place}.revisions[{index}]"
        entry = {
            "deployment_id": resource.id,
            "source_revision_config": resource.source_revision_config.model_dump(mode="json"),
            "created_at": resource.created_at.isoformat(),
            **entry,
        }
        if "status" in entry and entry["status"] not in [status.value for status in RevisionStatus]:
            problems.append(f"{where}.status: unknown revision status {entry['status']!r}")
            continue
        source = entry.pop("source", record.source)
        if source not in [value.value for value in DeploymentSource]:
            problems.append(f"{where}.source: unknown source {source!r}")
            continue
        revision = _validate(Revision, entry, where, problems)
        if revision is None:
            continue
        if revision.deployment_id != resource.id:
            problems.append(f"{where}.deployment_id: must be the deployment's id {resource.id}")
        assert revision.created_at is not None and revision.source_revision_config is not None
        stored = RevisionRecord(
            id=revision.id,
            deployment_id=resource.id,
            source_revision_config=revision.source_revision_config,
            created_at=revision.created_at,
            build_seconds=build_seconds,
            source=source,
            remote_reconciled=record.remote_reconciled,
            status=revision.status if revision.status.is_terminal else RevisionStatus.QUEUED,
            status_message=revision.status_message,
        )
        stored.updated_at = revision.updated_at or revision.created_at
        if stored.status is RevisionStatus.DEPLOYED:
            stored.started_at = stored.created_at
        record.revisions.append(stored)
    ids = [revision.id for revision in record.revisions]
    deployed = [revision for revision in record.revisions if revision.status is RevisionStatus.DEPLOYED]
    if not given_latest:
        resource.latest_revision_id = ids[-1] if ids else None
    if not given_active:
        resource.active_revision_id = deployed[-1].id if deployed else None
    for name in ("latest_revision_id", "active_revision_id"):
        value = getattr(resource, name)
        if value is not None and value not in ids:
            problems.append(f"{place}.{name}: {value} is not among the deployment's revisions")
    active = record.revision(resource.active_revision_id) if resource.active_revision_id else None
    if active is not None:
        if active.status is not RevisionStatus.DEPLOYED:
            problems.append(f"{place}.active_revision_id: revision {active.id} is {active.status.value}, not DEPLOYED")
        record.active_since = active.updated_at
    if not given_status:
        resource.status = DeploymentStatus.READY if active is not None else DeploymentStatus.AWAITING_DATABASE
    building = record.current_build()
    if building is not None:
        building.start(now)
