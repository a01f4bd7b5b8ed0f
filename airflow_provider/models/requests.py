"""The requests: the bodies of ``PATCH /v2/deployments/{id}`` and ``POST /v2/deployments``, and the filters
and paging of ``GET /v2/deployments``. Each refuses a field it does not know at any depth (a typo fails
before anything is sent), and sends no null."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airflow_provider.models.base import RequestModel
from airflow_provider.models.enums import (
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    RevisionSource,
    warn_if_unknown,
)
from airflow_provider.models.fields import UuidStr
from airflow_provider.models.resources import Deployment
from airflow_provider.models.secrets import REDACTED, Secret, SecretReference
from airflow_provider.models.source_config import SourceConfigPatch, SourceRevisionConfigPatch

MAX_PAGE_SIZE = 100
"""The largest page ``GET /v2/deployments`` serves (``limit``)."""
DEFAULT_PAGE_SIZE = 20
"""The page size the service uses when a request gives no ``limit``."""


def _revealed_body(model: BaseModel) -> dict[str, Any]:
    body: dict[str, Any] = model.model_dump(mode="json", exclude_none=True, context={"reveal_secrets": True})
    return body


def _checked_secrets(secrets: list[Secret] | None) -> list[Secret] | None:
    """Secrets of a request: every one with a value, names unique."""
    for index, secret in enumerate(secrets or []):
        if secret.value is None:
            raise ValueError(f"secrets.{index}.value is required (secret {secret.name!r} has none)")
    names = [secret.name for secret in secrets or []]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"secret names must be unique, repeated: {', '.join(duplicates)}")
    return secrets


class PatchDeploymentRequest(RequestModel):
    """Body of ``PATCH /v2/deployments/{id}``. Null fields are never sent (their effect is not shown in
    the spec, and a null could clear a setting); at least one field must be given.

    :param revision_source: source override for the new revision.
    :param source_config: settings that change without a new revision.
    :param source_revision_config: settings that create a new revision (``image_uri``, ``repo_ref``...).
    :param secrets: secret values; any list (even empty) creates a new revision.
    :param secret_references: Kubernetes secret references (``external_docker`` only).
    """

    model_config = ConfigDict(extra="forbid")

    revision_source: RevisionSource | None = None
    source_config: SourceConfigPatch | None = None
    source_revision_config: SourceRevisionConfigPatch | None = None
    secrets: list[Secret] | None = None
    secret_references: list[SecretReference] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> "PatchDeploymentRequest":
        warn_if_unknown("revision_source", self.revision_source)
        if self.source_config is not None:
            warn_if_unknown("source_config.deployment_type", self.source_config.deployment_type)
        if not _prune_empty(_revealed_body(self)):
            raise ValueError(
                "empty patch: set at least one of revision_source, source_config, "
                "source_revision_config, secrets, secret_references"
            )
        return self

    @field_validator("secrets")
    @classmethod
    def _unique_secret_names(cls, secrets: list[Secret] | None) -> list[Secret] | None:
        return _checked_secrets(secrets)

    @property
    def creates_revision(self) -> bool:
        """Whether the service will create a revision for this patch (see NOTES.md)."""
        return self.secrets is not None or (
            self.source_revision_config is not None and self.source_revision_config.changes_revision
        )

    @property
    def may_create_revision(self) -> bool:
        """Whether the service may create a revision for this patch: :attr:`creates_revision`, or a
        ``source_config.resource_spec`` (production creates one; the spec and the emulator's merge switch do
        not). Whether it did is read from the answer (``latest_revision_id`` moved), never from this."""
        return self.creates_revision or (
            self.source_config is not None and self.source_config.resource_spec is not None
        )

    def to_request_body(self) -> dict[str, Any]:
        """The JSON body for the wire, secret values revealed. Never log this."""
        return _revealed_body(self)

    def is_reflected_in(self, deployment: Deployment) -> bool:
        """Whether ``deployment`` already shows every value this patch sets.

        Used to recognise a patch that reached the service although its answer was lost, and a patch
        already applied by an earlier try of the same task. ``revision_source`` is not visible on a
        deployment and is not compared; secret values are compared only where the service echoes them.

        :param deployment: the deployment as the service reports it now.
        """
        if self.source_revision_config is not None:
            wanted = self.source_revision_config.model_dump(mode="json", exclude_none=True)
            current = deployment.source_revision_config.model_dump(mode="json")
            if any(current.get(name) != value for name, value in wanted.items()):
                return False
        if self.source_config is not None:
            wanted = self.source_config.model_dump(mode="json", exclude_none=True)
            if not _is_subset(wanted, deployment.source_config.model_dump(mode="json", exclude_none=True)):
                return False
        if self.secrets is not None:
            shown = {secret.name: secret.revealed for secret in deployment.secrets}
            if set(shown) != {secret.name for secret in self.secrets}:
                return False
            for secret in self.secrets:
                echoed = shown[secret.name]
                if echoed not in ("", REDACTED) and echoed != secret.revealed:
                    return False
        if self.secret_references is not None:
            wanted_refs = [ref.model_dump(mode="json") for ref in self.secret_references]
            current_refs = [ref.model_dump(mode="json") for ref in deployment.secret_references or []]
            if wanted_refs != current_refs:
                return False
        return True


def _prune_empty(value: Any) -> Any:
    """``value`` without empty objects, recursively (``{"a": {}}`` is as empty as ``{}``)."""
    if isinstance(value, dict):
        pruned = {key: _prune_empty(item) for key, item in value.items()}
        return {key: item for key, item in pruned.items() if item != {}}
    return value


def _is_subset(wanted: Any, current: Any) -> bool:
    """Whether every value in ``wanted`` appears, equal, in ``current`` (dicts compared key by key)."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        return all(key in current and _is_subset(value, current[key]) for key, value in wanted.items())
    return bool(wanted == current)


class CreateDeploymentRequest(RequestModel):
    """Body of ``POST /v2/deployments``. The spec shows this contract only in part (the fields fed by
    the repository listing); the emulator implements it, production may ask for more.

    :param name: deployment name (cannot change later).
    :param source: where the code comes from.
    :param integration_id: source-host integration (``codehost`` deployments).
    :param source_config: source settings.
    :param source_revision_config: settings of the first revision.
    :param secrets: secret values.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    source: DeploymentSource
    integration_id: UuidStr | None = None
    source_config: SourceConfigPatch = Field(default_factory=SourceConfigPatch)
    source_revision_config: SourceRevisionConfigPatch = Field(default_factory=SourceRevisionConfigPatch)
    secrets: list[Secret] = Field(default_factory=list)
    secret_references: list[SecretReference] | None = None

    @field_validator("secrets")
    @classmethod
    def _secrets_have_values(cls, secrets: list[Secret]) -> list[Secret]:
        return _checked_secrets(secrets) or []

    @model_validator(mode="after")
    def _note_unknown_values(self) -> "CreateDeploymentRequest":
        warn_if_unknown("source", self.source)
        warn_if_unknown("source_config.deployment_type", self.source_config.deployment_type)
        return self

    def to_request_body(self) -> dict[str, Any]:
        """The JSON body for the wire, secret values revealed. Never log this."""
        return _revealed_body(self)


def _no_commas(values: list[str] | None, field: str) -> list[str] | None:
    for value in values or []:
        if not value or "," in value:
            raise ValueError(f"{field} entries must be non-empty and contain no comma, got {value!r}")
    return values


class ListDeploymentsQuery(RequestModel):
    """Filters and paging of ``GET /v2/deployments`` under the production parameter names.

    :param limit: page size, 1..100 (server default 20).
    :param offset: offset of the page, >= 0.
    :param name_contains: substring of the deployment name.
    :param status: deployment status.
    :param remote_reconciled: only remote-reconciled (or only not) deployments.
    :param tag_value_ids: tag value ids, any of which matches.
    :param image_version: image version.
    :param deployment_type: ``dev_free``, ``dev``, ``prod``, ``dev_zero``, or a tier the provider does not know
        yet (sent as given, with a warning).
    :param deployment_ids: deployment ids (UUIDs).

    ``status`` and ``deployment_type`` are open: a value the provider does not know is sent as given (with a
    logged warning naming the known ones), for the service to answer; a misspelt *field* is refused.
    """

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, strict=True)
    offset: int = Field(default=0, ge=0, strict=True)
    name_contains: str | None = None
    status: DeploymentStatus | None = None
    remote_reconciled: bool | None = Field(default=None, strict=True)
    tag_value_ids: list[str] | None = Field(default=None, min_length=1)
    image_version: str | None = None
    deployment_type: DeploymentType | None = None
    deployment_ids: list[UuidStr] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _note_unknown_values(self) -> "ListDeploymentsQuery":
        warn_if_unknown("status", self.status)
        warn_if_unknown("deployment_type", self.deployment_type)
        return self

    @field_validator("tag_value_ids")
    @classmethod
    def _check_tags(cls, values: list[str] | None) -> list[str] | None:
        return _no_commas(values, "tag_value_ids")

    def to_query_params(self) -> dict[str, str]:
        """Query parameters as the service expects them: lists comma-joined, booleans lower-case."""
        params: dict[str, str] = {}
        for name, value in self.model_dump(mode="json", exclude_none=True).items():
            if isinstance(value, bool):
                params[name] = "true" if value else "false"
            elif isinstance(value, list):
                params[name] = ",".join(str(item) for item in value)
            else:
                params[name] = str(value)
        return params
