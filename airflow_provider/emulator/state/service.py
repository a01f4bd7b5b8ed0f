"""The service side of the state: what the service's endpoints answer (listings, a deployment, its revisions
and their logs) and do (PATCH with the production rules, redeploy a revision, create a deployment)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from airflow_provider.models import (
    DEFAULT_PAGE_SIZE,
    CreateDeploymentRequest,
    Deployment,
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    RevisionStatus,
    Secret,
    SecretReference,
    SourceConfig,
    SourceRevisionConfig,
    canonical_uuid,
)

from ..contract.merge import known_dump, merge_model
from ..contract.rules import Current, refusals
from ..contract.schema import PatchBody, PatchInvalid, limits_below_requests, parse_patch, stored_resource_spec
from ..records import REDEPLOYABLE, SERVICE_SOURCES, DeploymentRecord, RevisionRecord
from ..revision_logs import DEFAULT_LOG_LIMIT, BadCursor, LogFilter, LogOrder, LogType, deployment_log, revision_log
from ..revision_logs import page as log_page
from ..unknown_fields import PatchBodyWithServiceFields, replaced_spec, stored_dump
from .errors import EmulatorError, NotFound
from .store import StateStore, _locked

StatusName = Literal["AWAITING_DATABASE", "READY", "UNUSED", "AWAITING_DELETE", "UNKNOWN"]
"""The deployment statuses, strictly (the response enum maps an unknown value to UNKNOWN instead)."""


@dataclass(frozen=True)
class DeploymentFilters:
    """Filters of ``GET /v2/deployments`` (``None``: no filter).

    :param name_contains: case-insensitive substring of the name.
    :param status: exact status.
    :param remote_reconciled: the remote-reconciled flag.
    :param tag_value_ids: any of these tag value ids.
    :param image_version: exact image version.
    :param deployment_type: exact deployment type.
    :param deployment_ids: any of these ids.
    """

    name_contains: str | None = None
    status: DeploymentStatus | None = None
    remote_reconciled: bool | None = None
    tag_value_ids: frozenset[str] | None = None
    image_version: str | None = None
    deployment_type: DeploymentType | None = None
    deployment_ids: frozenset[str] | None = None

    def match(self, record: DeploymentRecord) -> bool:
        """Whether ``record`` passes every filter."""
        resource = record.resource
        checks = (
            self.name_contains is None or self.name_contains.lower() in resource.name.lower(),
            self.status is None or resource.status is self.status,
            self.remote_reconciled is None or record.remote_reconciled is self.remote_reconciled,
            self.tag_value_ids is None or bool(self.tag_value_ids.intersection(record.tag_value_ids)),
            self.image_version is None or resource.image_version == self.image_version,
            self.deployment_type is None or record.deployment_type == self.deployment_type,
            self.deployment_ids is None or resource.id in self.deployment_ids,
        )
        return all(checks)


class EmulatorCreateRequest(CreateDeploymentRequest):
    """``POST /v2/deployments`` body: the provider's create request plus emulator-only settings.

    The deployment type is production's ``source_config.deployment_type`` (as the service's own command-line client
    sends it); the emulator-only top-level ``deployment_type`` is read when that one is absent; ``dev`` when
    neither is given. Either must be one the service knows (422 otherwise).

    :param deployment_type: deployment type (emulator-only; ``source_config.deployment_type`` wins).
    :param tag_value_ids: tag value ids.
    :param image_version: image version.
    :param remote_reconciled: remote-reconciled flag.
    :param build_seconds: build duration of this deployment's revisions.
    """

    # Built at once (the provider's models build on first use): FastAPI builds its body adapter around it,
    # and pydantic warns about FastAPI's ``alias`` when the model is still deferred.
    model_config = ConfigDict(defer_build=False)

    deployment_type: DeploymentType | None = None
    tag_value_ids: list[str] = []
    image_version: str | None = None
    remote_reconciled: bool = False
    build_seconds: float | None = None


class ServiceSide(StateStore):
    """The service's endpoints, on the state (a part of :class:`~airflow_provider.emulator.state.EmulatorState`)."""

    @_locked
    def list_oauth_providers(self) -> list[dict[str, Any]]:
        """``GET /v2/auth/providers``."""
        return [provider.model_dump(mode="json") for provider in self._oauth_providers]

    @_locked
    def list_repositories(self, integration_id: str) -> list[dict[str, Any]]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        repos = self._integrations.get(canonical_uuid(integration_id))
        if repos is None:
            raise NotFound(f"Integration {integration_id} not found.")
        return [repo.model_dump(mode="json") for repo in repos]

    @_locked
    def list_deployments(
        self,
        filters: DeploymentFilters | None = None,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v2/deployments``: one page, ordered by creation time then id.

        :param filters: filters to apply.
        :param limit: page size.
        :param offset: number of matching deployments to skip.
        :param tenant: only this tenant's deployments (``None``: all).
        """
        filters = filters or DeploymentFilters()
        matching = [
            record
            for record in self._deployments.values()
            if (tenant is None or record.resource.tenant_id == tenant) and filters.match(record)
        ]
        matching.sort(key=lambda record: (record.resource.created_at, record.id))
        page = matching[offset : offset + limit]
        return {"resources": [self._render(record) for record in page], "offset": offset + len(page)}

    @_locked
    def get_deployment(self, deployment_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}``: the deployment resource, secrets in clear."""
        return self._render(self._record(deployment_id, tenant))

    @_locked
    def get_revision(self, deployment_id: str, revision_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}/revisions/{revision_id}``."""
        return self._shown_revision(self._revision(self._record(deployment_id, tenant), revision_id).to_json())

    @_locked
    def list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        statuses: Iterable[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v2/deployments/{deployment_id}/revisions``: one page, newest first.

        :param deployment_id: the deployment.
        :param limit: page size.
        :param offset: number of matching revisions to skip.
        :param statuses: only revisions in one of these statuses (``None``: any).
        :param remote_reconciled: only revisions with this flag (the deployment's when they were created).
        :param tenant: only this tenant's deployment (``None``: any).
        """
        record = self._record(deployment_id, tenant)
        wanted = {RevisionStatus(status) for status in statuses} if statuses is not None else None
        matching = [
            revision
            for revision in reversed(record.revisions)
            if (wanted is None or revision.status in wanted)
            and (remote_reconciled is None or revision.remote_reconciled is remote_reconciled)
        ]
        chunk = matching[offset : offset + limit]
        revisions = [self._shown_revision(revision.to_json()) for revision in chunk]
        return {"resources": revisions, "offset": offset + len(chunk)}

    @_locked
    def revision_logs(
        self,
        deployment_id: str,
        revision_id: str | None,
        *,
        kind: LogType = "build",
        order: LogOrder = "asc",
        limit: int = DEFAULT_LOG_LIMIT,
        offset: str | None = None,
        filters: LogFilter | None = None,
        offset_in: Literal["query", "body"] = "query",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """A page of a revision's log: ``{"logs": [...], "next_offset": cursor | None}``. Serves
        ``GET .../revisions/{revision_id}/logs`` and the older ``POST /v1/projects/...`` routes (which filter).

        See :mod:`airflow_provider.emulator.revision_logs` for the lines and the entry shape.

        :param revision_id: the revision; ``None`` (deploy logs only): the whole deployment's deploy log.
        :param filters: what the older routes filter on.
        :param offset_in: where the request carried ``offset`` (the older routes: its JSON body), for a 422.
        :raises EmulatorError: 422 for an ``offset`` that is not one of this emulator's cursors.
        """
        record = self._record(deployment_id, tenant)
        now = self.clock.now()
        if revision_id is None:
            entries = deployment_log(record, now)
        else:
            entries = revision_log(record, self._revision(record, revision_id), kind, now)
        if filters is not None:
            entries = filters.apply(entries)
        try:
            return log_page(entries, order=order, limit=limit, offset=offset)
        except BadCursor as error:
            problem = {"type": "value_error", "loc": [offset_in, "offset"], "msg": str(error), "input": offset}
            raise EmulatorError(422, [problem]) from None

    @_locked
    def patch_deployment(
        self,
        deployment_id: str,
        patch: PatchBody | BaseModel | Mapping[str, Any],
        *,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``PATCH /v2/deployments/{deployment_id}`` with the production rules; all or nothing.

        ``source_config`` fields merge into the stored ones (a null or missing field keeps its value);
        ``resource_spec`` follows ``resource_spec_mode``; ``secrets`` and ``secret_references``
        replace their lists. A revision is created by a non-null ``source_revision_config`` field,
        non-null ``secrets``, or (``replace`` mode) a non-null ``resource_spec``.

        :param deployment_id: the deployment.
        :param patch: the body: :class:`~airflow_provider.emulator.contract.schema.PatchBody`, the provider's
            request model, or plain JSON.
        :param tenant: the caller's tenant (``None``: any).
        :raises EmulatorError: 404 unknown deployment; 422 schema (see
            :mod:`~airflow_provider.emulator.contract.schema`); 400 rules (see
            :mod:`~airflow_provider.emulator.contract.rules`).
        """
        record = self._record(deployment_id, tenant)
        try:
            body = parse_patch(patch, PatchBodyWithServiceFields if self.unknown_fields else PatchBody)
        except PatchInvalid as error:
            raise EmulatorError(422, error.errors) from None
        shown = self._render(record)
        current = Current(
            source=record.source,
            source_config=shown["source_config"],
            repo_ref=record.resource.source_revision_config.repo_ref,
            custom_url=shown["source_config"].get("custom_url"),
        )
        problems = refusals(body, current)
        if problems:
            raise EmulatorError(400, "; ".join(problems))
        source_config = self._patched_source_config(record, body)
        spec = body.source_config.resource_spec if body.source_config is not None else None
        creates_revision = (
            body.secrets is not None
            or bool(body.revision_fields())
            or (spec is not None and self.resource_spec_mode == "replace")
        )
        # Everything is checked and built: from here on nothing can fail half-way.
        resource = record.resource
        now = self.clock.now()
        changed = False
        if source_config is not None:
            resource.source_config = source_config
            changed = True
        if body.secret_references is not None:
            resource.secret_references = [SecretReference(**ref.model_dump()) for ref in body.secret_references]
            changed = True
        if body.secrets is not None:
            resource.secrets = [Secret(name=item.name, value=SecretStr(item.value)) for item in body.secrets]
        if creates_revision:
            base = known_dump(resource.source_revision_config)
            base.pop("repo_commit_sha", None)
            revision_config = SourceRevisionConfig.model_validate({**base, **body.revision_fields()})
            self._new_revision(record, revision_config, now, source=body.revision_source or record.source)
            changed = True
        if changed:
            record.touch(now)
        return self._render(record)

    def _patched_source_config(self, record: DeploymentRecord, body: PatchBody) -> SourceConfig | None:
        """The ``source_config`` after ``body`` (``None``: the patch leaves it alone)."""
        patch = body.source_config
        if patch is None:
            return None
        stored = (stored_dump if self.unknown_fields else known_dump)(record.resource.source_config)
        stored.pop("deployment_type", None)  # kept on the record; shown by DeploymentRecord.to_json
        given = patch.model_dump(exclude_none=True, exclude={"resource_spec", "listener_config", "deployment_type"})
        given = {name: str(value) if isinstance(value, uuid.UUID) else value for name, value in given.items()}
        if record.source != DeploymentSource.EXTERNAL_DOCKER.value:
            given.pop("custom_url", None)  # the rules let only the value already shown through: the service's
        stored.update(given)
        if patch.listener_config is not None:
            stored["listener_config"] = {
                **stored.get("listener_config", {}),
                **patch.listener_config.model_dump(exclude_none=True),
            }
        if patch.resource_spec is not None:
            if self.resource_spec_mode == "replace":
                stored["resource_spec"] = stored_resource_spec(patch.resource_spec, default_limits=True)
                if self.unknown_fields:
                    stored["resource_spec"] = replaced_spec(stored["resource_spec"])
            else:
                merged = {**stored.get("resource_spec", {})}
                merged.update(stored_resource_spec(patch.resource_spec, default_limits=False))
                stored["resource_spec"] = merged
            below = limits_below_requests(stored["resource_spec"])
            if below:  # Kubernetes refuses a request above its limit: nothing is applied
                raise EmulatorError(422, below)
        return SourceConfig.model_validate(stored)

    @_locked
    def redeploy_revision(self, deployment_id: str, revision_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST .../revisions/{revision_id}/redeploy``: deploy an earlier build again (a rollback).

        Creates a revision whose ``source_revision_config`` (``repo_commit_sha`` included) and ``source``
        copy the old one's; it skips the build (the build exists) and goes ``AWAITING_DEPLOY`` ->
        ``DEPLOYING`` -> ``DEPLOYED``, queueing behind a revision in progress. An unhealthy mark is copied
        too (same build, same bug). ``source_config`` (``resource_spec`` included) is left as it is.
        Returns the deployment.

        With ``redeploy_mode="in_place"`` no revision is created: the old revision goes through the same
        phases again and becomes the active revision, ``latest_revision_id`` stays where it was, and the
        deployment shows the old revision's config. Asking again while it is being deployed changes
        nothing; while another revision is in progress it is refused (400).

        :raises EmulatorError: 404 unknown deployment or revision; 400 when the revision's build did
            not succeed (only ``DEPLOYED`` and ``DEPLOY_FAILED`` revisions have one) or the deployment
            is being deleted.
        """
        record = self._record(deployment_id, tenant)
        old = self._revision(record, revision_id)
        if self.redeploy_mode == "in_place" and old.deployed_again and not old.finished:
            return self._render(record)  # being deployed again already
        if old.status not in REDEPLOYABLE:
            raise EmulatorError(
                400,
                f"Revision {old.id} cannot be redeployed: its status is {old.status.value}; only a revision "
                f"whose build succeeded ({' or '.join(status.value for status in REDEPLOYABLE)}) can be redeployed.",
            )
        if record.resource.status is DeploymentStatus.AWAITING_DELETE:
            raise EmulatorError(400, f"Deployment ID {record.id} is being deleted.")
        now = self.clock.now()
        if self.redeploy_mode == "in_place":
            self._deploy_again(record, old, now)
        else:
            self._new_revision(record, old.source_revision_config.model_copy(), now, source=old.source, redeploy_of=old)
        return self._render(record)

    def _deploy_again(self, record: DeploymentRecord, old: RevisionRecord, now: datetime) -> None:
        """``redeploy_mode="in_place"``: deploy ``old`` itself again (no new revision)."""
        building = record.current_build()
        if building is not None:
            raise EmulatorError(
                400,
                f"Revision {old.id} cannot be redeployed now: revision {building.id} is in progress "
                f"({building.status.value}).",
            )
        old.deploy_again(now)
        record.resource.source_revision_config = old.source_revision_config.model_copy()
        record.touch(now)

    def _new_revision(
        self,
        record: DeploymentRecord,
        config: SourceRevisionConfig,
        now: datetime,
        *,
        source: str,
        redeploy_of: RevisionRecord | None = None,
    ) -> RevisionRecord:
        revision_id = str(uuid.uuid4())
        resource = record.resource
        if redeploy_of is None and source == DeploymentSource.CODEHOST.value and config.repo_ref:
            seed = f"{resource.source_config.repo_url}@{config.repo_ref}@{revision_id}".encode()
            digest = hashlib.sha1(seed, usedforsecurity=False)  # a fake commit sha
            config = config.model_copy(update={"repo_commit_sha": digest.hexdigest()})
        resource.source_revision_config = config
        revision = RevisionRecord(
            id=revision_id,
            deployment_id=resource.id,
            source_revision_config=config,
            created_at=now,
            build_seconds=record.build_seconds if record.build_seconds is not None else self.build_seconds,
            source=source,
            redeploy_of=redeploy_of.id if redeploy_of is not None else None,
            unhealthy=redeploy_of.unhealthy if redeploy_of is not None else False,
            behaviour_changes=[(now, redeploy_of.behaviour)] if redeploy_of and redeploy_of.behaviour else [],
            remote_reconciled=record.remote_reconciled,
        )
        record.add_revision(revision, now)
        return revision

    @_locked
    def create_deployment(self, request: EmulatorCreateRequest, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /v2/deployments`` (emulator-only contract): create a deployment and its first revision.

        :param request: the creation request.
        :param tenant: owning tenant (default: :attr:`default_tenant_id`).
        :raises EmulatorError: 409 if the tenant already has a deployment with that name.
        """
        tenant_id = tenant or self.default_tenant_id
        if request.source.value not in SERVICE_SOURCES:
            accepted = ", ".join(repr(name) for name in SERVICE_SOURCES)
            problem = {"type": "enum", "loc": ["body", "source"], "msg": f"Input should be one of {accepted}"}
            raise EmulatorError(422, [{**problem, "input": request.source.value}])
        if request.source_config.deployment_type is not None:
            where, given = ["body", "source_config", "deployment_type"], request.source_config.deployment_type
        else:
            where, given = ["body", "deployment_type"], request.deployment_type or DeploymentType.DEV
        deployment_type = self.checked_deployment_type(given.value, where)
        resources = [record.resource for record in self._deployments.values()]
        if any(res.name == request.name and res.tenant_id == tenant_id for res in resources):
            raise EmulatorError(409, f"Deployment with name {request.name} already exists.")
        now = self.clock.now()
        source_config = request.source_config.model_copy(update={"deployment_type": None})  # kept on the record
        if request.integration_id is not None:
            source_config = source_config.model_copy(update={"integration_id": request.integration_id})
        resource = Deployment(
            name=request.name,
            source=request.source.value,
            source_config=SourceConfig.model_validate(merge_model(SourceConfig(), source_config)),
            source_revision_config=SourceRevisionConfig.model_validate(
                merge_model(SourceRevisionConfig(), request.source_revision_config)
            ),
            secrets=[secret.model_copy() for secret in request.secrets],
            secret_references=request.secret_references,
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            created_at=now,
            updated_at=now,
            status=DeploymentStatus.AWAITING_DATABASE,
            latest_revision_id=None,
            active_revision_id=None,
            image_version=request.image_version,
        )
        record = DeploymentRecord(
            resource=resource,
            deployment_type=deployment_type,
            tag_value_ids=list(request.tag_value_ids),
            remote_reconciled=request.remote_reconciled,
            build_seconds=request.build_seconds,
        )
        self._deployments[record.id] = record
        self._moving.add(record.id)
        self._new_revision(record, resource.source_revision_config, now, source=record.source)
        return self._render(record)
