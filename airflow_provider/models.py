"""Typed resources, requests and enums of the Deployment Management Service.

This module knows nothing of Airflow or HTTP. Two rules hold throughout:

* **Responses tolerate what they do not know.** Every model keeps unknown fields (``extra="allow"``)
  so the service can add fields without breaking a running DAG.
* **Requests refuse what they do not know.** A request root (:class:`PatchDeploymentRequest`,
  :class:`CreateDeploymentRequest`, :class:`ListDeploymentsQuery`) rejects unknown or misspelled
  fields at every nesting level, naming the full path of the field, before anything is sent.

Secret values are :class:`pydantic.SecretStr`: every ``repr``, ``str`` and ``model_dump`` shows
``**********``. Only :meth:`PatchDeploymentRequest.to_request_body` (and its create twin) reveals
them, for the wire.

Unlike the other modules this one does not use ``from __future__ import annotations``: pydantic would
evaluate every string annotation again (about 220 ``compile`` calls, a quarter of this module's import
time, ``bench/import_cost.py``). The models build their validators on first use (``defer_build``), not
at import.
"""

import copy
import difflib
import functools
import json
import logging
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import Self

log = logging.getLogger(__name__)

REDACTED = "**********"
"""What a secret value looks like wherever it is shown (logs, XCom, reprs)."""

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HYPHENATED_UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def canonical_uuid(value: object, field: str = "value") -> str:
    """Return ``value`` as a canonical lower-case UUID string, or raise ``ValueError`` naming ``field``.

    :param value: a UUID or a string in any form ``uuid.UUID`` accepts.
    :param field: the name to put in the error message.
    """
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value  # the common case (every id the service sends): skip the slow uuid.UUID round trip
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a UUID string, got {type(value).__name__}")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise ValueError(f"{field} must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000), got {value!r}") from None


def error_message(error: Mapping[str, Any]) -> str:
    """pydantic's message for one validation error, with a malformed UUID said in words."""
    context = error.get("ctx") or {}
    if error.get("type") == "string_pattern_mismatch" and context.get("pattern") == _HYPHENATED_UUID_PATTERN:
        return "Value error, value must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000)"
    if error.get("type") == "int_from_float":
        return "must be a whole number (the service takes an integer here), got a number with a fractional part"
    return str(error.get("msg", ""))


UuidStr = Annotated[
    str,
    StringConstraints(strip_whitespace=True, to_lower=True, pattern=_HYPHENATED_UUID_PATTERN),
]
"""A UUID kept as its canonical (lower-case, hyphenated) string, so models dump to JSON without conversion.
Checked inside pydantic-core: parsing a page of deployments stays cheap."""


def _utc_when_naive(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


Timestamp = Annotated[datetime, AfterValidator(_utc_when_naive)]
"""A service timestamp. One without a time zone is read as UTC, so it compares with Airflow's aware
datetimes (a naive one would raise ``TypeError`` there)."""


# --------------------------------------------------------------------------------------------- enums
class DeploymentSource(str, Enum):
    """Where a deployment's code comes from. Cannot change after creation."""

    CODEHOST = "codehost"
    EXTERNAL_DOCKER = "external_docker"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"
    INTERNAL_TEMPLATE = "internal_template"


class RevisionSource(str, Enum):
    """The source override a patch may give for one revision."""

    CODEHOST = "codehost"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"


class DeploymentStatus(str, Enum):
    """A deployment's status. An unrecognised value from the service reads as ``UNKNOWN``."""

    AWAITING_DATABASE = "AWAITING_DATABASE"
    READY = "READY"
    UNUSED = "UNUSED"
    AWAITING_DELETE = "AWAITING_DELETE"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def _missing_(cls, value: object) -> "DeploymentStatus":
        return cls.UNKNOWN


class DeploymentType(str, Enum):
    """Deployment tiers accepted by the ``deployment_type`` filter."""

    DEV_FREE = "dev_free"
    DEV = "dev"
    PROD = "prod"


class RevisionStatus(str, Enum):
    """Status of one revision (production endpoint not shown in the spec; see NOTES.md)."""

    CREATING = "CREATING"
    QUEUED = "QUEUED"
    AWAITING_BUILD = "AWAITING_BUILD"
    BUILDING = "BUILDING"
    AWAITING_DEPLOY = "AWAITING_DEPLOY"
    DEPLOYING = "DEPLOYING"
    DEPLOYED = "DEPLOYED"
    CREATE_FAILED = "CREATE_FAILED"
    BUILD_FAILED = "BUILD_FAILED"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    SKIPPED = "SKIPPED"
    INTERRUPTED = "INTERRUPTED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def _missing_(cls, value: object) -> "RevisionStatus":
        return cls.UNKNOWN

    @property
    def is_terminal(self) -> bool:
        """Whether the revision will not change status any more."""
        return self in _TERMINAL_REVISION_STATUSES

    @property
    def is_failed(self) -> bool:
        """Whether the revision ended without being deployed."""
        return self.is_terminal and self is not RevisionStatus.DEPLOYED


_TERMINAL_REVISION_STATUSES = frozenset(
    {
        RevisionStatus.DEPLOYED,
        RevisionStatus.CREATE_FAILED,
        RevisionStatus.BUILD_FAILED,
        RevisionStatus.DEPLOY_FAILED,
        RevisionStatus.SKIPPED,
        RevisionStatus.INTERRUPTED,
    }
)


# ------------------------------------------------------------------------------------------ bases
class ServiceModel(BaseModel):
    """Base of every model: keeps unknown fields, so newer service responses still parse."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    def unknown_fields(self, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
        """Yield ``(dotted path, known field names)`` for every unknown field, nested models included."""
        known = sorted(type(self).model_fields)
        for name in self.model_extra or {}:
            yield f"{prefix}{name}", known
        for name in type(self).model_fields:
            yield from _unknown_in(getattr(self, name), f"{prefix}{name}")


def _unknown_in(value: Any, path: str) -> Iterator[tuple[str, list[str]]]:
    if isinstance(value, ServiceModel):
        yield from value.unknown_fields(f"{path}.")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_in(item, f"{path}[{index}]")


class RequestModel(ServiceModel):
    """Base of request roots: unknown fields anywhere below are refused with their full path."""

    @model_validator(mode="after")
    def _refuse_unknown_fields(self) -> "RequestModel":
        problems = []
        for path, known in self.unknown_fields():
            leaf = path.rsplit(".", 1)[-1]
            close = difflib.get_close_matches(leaf, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(known)}"
            problems.append(f"unknown field {path!r}{hint}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ------------------------------------------------------------------------------- resource spec
class ImagePullSecret(ServiceModel):
    """Name of an image pull secret."""

    name: str


class Volume(ServiceModel):
    """A Kubernetes volume: a name plus one free-form source member."""

    name: str
    configMap: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    emptyDir: dict[str, Any] | None = None
    persistentVolumeClaim: dict[str, Any] | None = None
    nfs: dict[str, Any] | None = None
    projected: dict[str, Any] | None = None
    downwardAPI: dict[str, Any] | None = None
    csi: dict[str, Any] | None = None


class VolumeMount(ServiceModel):
    """Where a volume is mounted in a container."""

    name: str | None = None
    mountPath: str | None = None
    subPath: str | None = None
    mountPropagation: str | None = None
    readOnly: bool | None = None
    subPathExpr: str | None = None


class EnvVar(ServiceModel):
    """One environment variable of a container."""

    name: str
    value: str | None = None
    valueFrom: dict[str, Any] | None = None


class ContainerResources(ServiceModel):
    """Resource ``limits`` and ``requests`` of a container (free-form)."""

    limits: dict[str, Any] | None = None
    requests: dict[str, Any] | None = None


class Container(ServiceModel):
    """An init container or sidecar."""

    name: str | None = None
    image: str | None = None
    imagePullPolicy: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    workingDir: str | None = None
    env: list[EnvVar] | None = None
    envFrom: list[dict[str, Any]] | None = None
    resources: ContainerResources | None = None
    volumeMounts: list[VolumeMount] | None = None
    securityContext: dict[str, Any] | None = None
    restartPolicy: str | None = None


def _one_number_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``int | float`` reports a bad value once (not once per member of the union)."""
    try:
        return handler(value)
    except ValidationError:
        raise PydanticCustomError("number_type", "Input should be a valid number") from None


Number = Annotated[int | float, WrapValidator(_one_number_error)]
"""A number in a response, kept as the service sent it (``3`` stays ``3``, ``2.5`` stays ``2.5``): a response
is read tolerantly, requests are where integers are demanded (see :class:`ResourceSpecPatch`)."""


class ResourceSpec(ServiceModel):
    """Compute resources and Kubernetes extras of a deployment, as the service reports them.

    Every number is kept as sent, fraction or not: one odd value must not make a deployment unreadable.
    What a patch may send is :class:`ResourceSpecPatch` (integers where production demands them, bounds).
    """

    # main service
    min_scale: Number | None = None
    max_scale: Number | None = None
    cpu: Number | None = None
    cpu_limit: Number | None = None
    memory_mb: Number | None = None
    memory_limit_mb: Number | None = None
    # queue
    queue_min_scale: Number | None = None
    queue_max_scale: Number | None = None
    queue_cpu: Number | None = None
    queue_cpu_limit: Number | None = None
    queue_memory_mb: Number | None = None
    queue_memory_limit_mb: Number | None = None
    # orchestrator
    orchestrator_cpu: Number | None = None
    orchestrator_cpu_limit: Number | None = None
    orchestrator_memory_mb: Number | None = None
    orchestrator_memory_limit_mb: Number | None = None
    orchestrator_min_scale: Number | None = None
    orchestrator_max_scale: Number | None = None
    # executor
    executor_cpu: Number | None = None
    executor_cpu_limit: Number | None = None
    executor_memory_mb: Number | None = None
    executor_memory_limit_mb: Number | None = None
    # cache
    redis_cpu: Number | None = None
    redis_cpu_limit: Number | None = None
    redis_memory_mb: Number | None = None
    redis_memory_limit_mb: Number | None = None
    # database
    db_cpu: Number | None = None
    db_cpu_limit: Number | None = None
    db_memory_mb: Number | None = None
    db_memory_limit_mb: Number | None = None
    db_storage_gi: Number | None = None
    db_max_connections: Number | None = None
    # kubernetes extras
    labels: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    service_account_name: str | None = None
    image_pull_secrets: list[ImagePullSecret] | None = None
    volumes: list[Volume] | None = None
    volume_mounts: list[VolumeMount] | None = None
    init_containers: list[Container] | None = None
    sidecars: list[Container] | None = None


def _not_boolean(value: object) -> object:
    """Refuse ``True``/``False`` where a number is expected (pydantic would read them as 1 and 0)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, got {value}")
    return value


WholeNumber = Annotated[int, BeforeValidator(_not_boolean), Field(ge=0)]
"""An integer field of a request: ``512`` and ``512.0`` are sent as ``512``; ``512.5`` is refused."""
Cpu = Annotated[float, BeforeValidator(_not_boolean), Field(ge=0.1, le=8)]
"""``cpu``, ``queue_cpu``, ``redis_cpu``: 0.1 .. 8 (fractions allowed; the service rounds them)."""
CpuLimit = Annotated[float, BeforeValidator(_not_boolean), Field(ge=0.1, le=16)]
"""``cpu_limit``, ``queue_cpu_limit``, ``redis_cpu_limit``: 0.1 .. 16."""
OtherCpu = Annotated[float, BeforeValidator(_not_boolean), Field(ge=0)]
"""The CPU amounts production gives no bounds for (``db_cpu``, ``orchestrator_cpu``...): >= 0."""

DISCOURAGED_RESOURCE_PREFIXES = ("orchestrator_", "executor_")
"""ResourceSpec fields production marks "do not use": accepted and sent, with a warning (see patch_rules)."""


def _kubernetes_quantity(value: object) -> object:
    """Refuse a number where a Kubernetes quantity is expected: production's schema takes strings only."""
    if not isinstance(value, str):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        got = f"the number {value!r}" if number else f"a {type(value).__name__}"
        raise PydanticCustomError(
            "kubernetes_quantity",
            'must be a Kubernetes quantity string such as "500m" or "1Gi", got {got}',
            {"got": got},
        )
    return value


KubernetesQuantity = Annotated[str, BeforeValidator(_kubernetes_quantity)]
"""A container's resource amount in a request (``"500m"``, ``"1Gi"``): a string, never a JSON number."""


class ContainerResourcesPatch(ContainerResources):
    """A container's ``limits`` and ``requests`` in a request: Kubernetes quantity strings (production's
    request schema answers 422 to a number such as ``0.5`` or ``512``)."""

    limits: dict[str, KubernetesQuantity] | None = None
    requests: dict[str, KubernetesQuantity] | None = None


class VolumeMountPatch(VolumeMount):
    """A volume mount in a request: ``mountPath`` is required (production's request schema)."""

    mountPath: str


class ContainerPatch(Container):
    """An init container or sidecar in a request: ``name`` is required and ``resources`` amounts are
    Kubernetes quantity strings (production's request schema)."""

    name: str
    resources: ContainerResourcesPatch | None = None
    volumeMounts: list[VolumeMountPatch] | None = None  # type: ignore[assignment]


class ResourceSpecPatch(ResourceSpec):
    """A resource spec in a request, held to production's request schema: every ``*_memory_mb``,
    ``*_memory_limit_mb``, ``*_scale``, ``db_storage_gi`` and ``db_max_connections`` an integer >= 0 (sent
    as a JSON integer; ``512.0`` is read as 512, ``512.5`` is refused naming the field); ``cpu``,
    ``queue_cpu``, ``redis_cpu`` 0.1..8 and their ``*_limit`` 0.1..16; label and annotation values strings;
    containers named, their ``resources.limits``/``requests`` Kubernetes quantity strings; volume mounts
    with a ``mountPath``."""

    # main service
    min_scale: WholeNumber | None = None
    max_scale: WholeNumber | None = None
    cpu: Cpu | None = None
    cpu_limit: CpuLimit | None = None
    memory_mb: WholeNumber | None = None
    memory_limit_mb: WholeNumber | None = None
    # queue
    queue_min_scale: WholeNumber | None = None
    queue_max_scale: WholeNumber | None = None
    queue_cpu: Cpu | None = None
    queue_cpu_limit: CpuLimit | None = None
    queue_memory_mb: WholeNumber | None = None
    queue_memory_limit_mb: WholeNumber | None = None
    # orchestrator ("do not use" in production's reference)
    orchestrator_cpu: OtherCpu | None = None
    orchestrator_cpu_limit: OtherCpu | None = None
    orchestrator_memory_mb: WholeNumber | None = None
    orchestrator_memory_limit_mb: WholeNumber | None = None
    orchestrator_min_scale: WholeNumber | None = None
    orchestrator_max_scale: WholeNumber | None = None
    # executor ("do not use" in production's reference)
    executor_cpu: OtherCpu | None = None
    executor_cpu_limit: OtherCpu | None = None
    executor_memory_mb: WholeNumber | None = None
    executor_memory_limit_mb: WholeNumber | None = None
    # cache
    redis_cpu: Cpu | None = None
    redis_cpu_limit: CpuLimit | None = None
    redis_memory_mb: WholeNumber | None = None
    redis_memory_limit_mb: WholeNumber | None = None
    # database
    db_cpu: OtherCpu | None = None
    db_cpu_limit: OtherCpu | None = None
    db_memory_mb: WholeNumber | None = None
    db_memory_limit_mb: WholeNumber | None = None
    db_storage_gi: WholeNumber | None = None
    db_max_connections: WholeNumber | None = None
    # kubernetes extras
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    volume_mounts: list[VolumeMountPatch] | None = None  # type: ignore[assignment]
    init_containers: list[ContainerPatch] | None = None  # type: ignore[assignment]
    sidecars: list[ContainerPatch] | None = None  # type: ignore[assignment]

    def discouraged_fields(self) -> list[str]:
        """The fields set here that production marks "do not use" (``orchestrator_*``, ``executor_*``)."""
        return sorted(
            name
            for name in type(self).model_fields
            if name.startswith(DISCOURAGED_RESOURCE_PREFIXES) and getattr(self, name) is not None
        )


class CarriedResourceSpec(ResourceSpecPatch):
    """A resource spec a request carries back from what the deployment showed (a rollback's restore, the fields
    a merge keeps from the current spec): the fields this provider knows are held to the request schema, and
    those it does not know, at any depth, are the service's own, sent back untouched instead of refused as a
    typo. A spec the user gives is a :class:`ResourceSpecPatch`, where they are refused. Build one with
    ``CarriedResourceSpec.model_validate(shown)`` and put the instance itself in the request (pydantic keeps it
    as it is; a plain dict would be read as the user's)."""

    def unknown_fields(self, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
        """Nothing: the fields this provider does not know are the service's (see the class docstring)."""
        return iter(())


class ListenerConfig(ServiceModel):
    """Settings of a self-hosted listener."""

    k8s_namespace: str | None = None


class SourceConfig(ServiceModel):
    """Source settings that need no new revision when changed (or cannot change)."""

    integration_id: UuidStr | None = None
    repo_url: str | None = None
    build_on_push: bool | None = None
    custom_url: str | None = None
    resource_spec: ResourceSpec | None = None
    listener_id: UuidStr | None = None
    listener_config: ListenerConfig | None = None
    install_command: str | None = None
    build_command: str | None = None
    deployment_type: str | None = None


class SourceConfigPatch(SourceConfig):
    """Source settings in a request: ``resource_spec`` held to production's request schema, and
    ``deployment_type`` one of ``dev_free``, ``dev``, ``prod`` (it cannot change after creation)."""

    resource_spec: ResourceSpecPatch | None = None
    deployment_type: DeploymentType | None = None


class SourceRevisionConfigPatch(ServiceModel):
    """Revision settings a patch may set; any non-null field creates a new revision."""

    repo_ref: str | None = None
    graph_config_path: str | None = None
    image_uri: str | None = None
    source_tarball_path: str | None = None

    @property
    def changes_revision(self) -> bool:
        """Whether a patch carrying this config creates a revision (any field is set)."""
        return any(getattr(self, name) is not None for name in type(self).model_fields)


class SourceRevisionConfig(SourceRevisionConfigPatch):
    """Revision settings as the service reports them (adds the resolved commit)."""

    repo_commit_sha: str | None = None


# ----------------------------------------------------------------------------------------- secrets
class Secret(ServiceModel):
    """A named secret value. The value is hidden in every repr and dump except the wire body.

    A request must carry the value; a response may omit it (the service need not echo secrets).
    """

    name: str = Field(min_length=1)
    value: SecretStr | None = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("secret name must not be blank")
        return name

    @field_serializer("value", when_used="always")
    def _serialize_value(self, value: SecretStr | None, info: SerializationInfo) -> str | None:
        if value is None:
            return None
        if isinstance(info.context, dict) and info.context.get("reveal_secrets"):
            return value.get_secret_value()
        return REDACTED

    @property
    def revealed(self) -> str:
        """The value itself (``""`` when the service did not send one). Never log it."""
        return "" if self.value is None else self.value.get_secret_value()


class SecretReference(ServiceModel):
    """Reference to an existing Kubernetes secret (``external_docker`` deployments only)."""

    name: str
    secret_name: str
    secret_key: str


# -------------------------------------------------------------------------------------- resources
class OAuthProvider(ServiceModel):
    """An OAuth provider configured for the organization."""

    id: str
    organization_id: str
    provider_id: str
    name: str
    client_id: str
    auth_url: str
    token_url: str
    uses_pkce: bool
    code_challenge_method: str | None
    created_at: Timestamp
    updated_at: Timestamp
    provider_type: str | None = None
    mcp_server_url: str | None = None
    token_endpoint_auth_method: str = "client_secret_post"
    is_dynamic_client: bool = False


class DeploymentCreationValues(ServiceModel):
    """The three values a repository listing contributes to ``POST /v2/deployments``."""

    integration_id: UuidStr
    source_config: SourceConfig
    source_revision_config: SourceRevisionConfigPatch


class Repository(ServiceModel):
    """A source-host repository an integration makes available for deployment."""

    host_integration_id: UuidStr
    id: int
    name: str
    owner: str
    url: str
    default_branch: str

    @property
    def full_name(self) -> str:
        """``owner/name``."""
        return f"{self.owner}/{self.name}"

    def deployment_creation_values(self) -> DeploymentCreationValues:
        """Map this repository to the fields of a deployment-creation request, as the spec says."""
        return DeploymentCreationValues(
            integration_id=self.host_integration_id,
            source_config=SourceConfig(repo_url=self.url),
            source_revision_config=SourceRevisionConfigPatch(repo_ref=self.default_branch),
        )


_MAX_DROPPED_VALUES = 50
"""How many odd values one resource may lose to the tolerant reader before it is refused after all."""


STRICT_READING = {"strict_reading": True}
"""Validation context that switches the tolerant reader off (``Deployment.model_validate(data,
context=STRICT_READING)``): for data that must be exactly right, such as the emulator's seed files."""


def _strict(options: Mapping[str, Any]) -> bool:
    context = options.get("context")
    return isinstance(context, dict) and bool(context.get("strict_reading"))


class _TolerantReading(ServiceModel):
    """Read in one pass in pydantic-core (no Python code per resource, no intermediate dicts); only data
    that fails that pass is read again, tolerantly (:meth:`_read_again`). Valid data gives the same
    result either way; ``context=STRICT_READING`` raises the first pass's error instead.
    """

    _what: ClassVar[str]
    """What the tolerant reader's warnings call one resource (the pages read each entry as its own resource)."""

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Validate ``obj``, tolerantly when it does not fit as it is (see the class docstring)."""
        try:
            return super().model_validate(obj, **options)
        except ValidationError as err:
            if _strict(options) or not isinstance(obj, dict):
                raise
            error = err
        return cls._read_again(obj, options, error)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Validate a JSON document, tolerantly when it does not fit as it is (see the class docstring)."""
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as err:
            if _strict(options):
                raise
            error = err
        try:
            decoded = json.loads(json_data)
        except ValueError:
            raise error from None
        return cls.model_validate(decoded, **options)

    @classmethod
    def _validate_as_is(cls, obj: Any, **options: Any) -> Self:
        return super().model_validate(obj, **options)

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading: drop the odd values one by one (see :func:`_read_tolerantly`)."""
        result: Self = _read_tolerantly(obj, functools.partial(cls._validate_as_is, **options), cls._what, error)
        return result


def _read_tolerantly(data: dict[str, Any], handler: Callable[[Any], Any], what: str, first: ValidationError) -> Any:
    """Read ``data``, which ``handler`` refused with ``first``: drop the odd value (with a warning naming
    ``what`` and the field) and validate again, so one odd value never makes the whole resource (and the
    page it is on) unreadable.

    A value is dropped as the deepest element of the error's path that exists (a list entry whose
    required member is missing goes as a whole). When nothing can be dropped (a required top-level field)
    the first error is raised.
    """
    error = first
    cleaned = copy.deepcopy(data)
    dropped: dict[tuple[int | str, ...], str] = {}
    for _ in range(_MAX_DROPPED_VALUES):
        item = error.errors(include_url=False)[0]
        path = _drop_value(cleaned, item["loc"])
        if path is None or (len(path) == 1 and path[0] in _REQUIRED_FIELDS.get(what, ())):
            raise first
        # A value whose removal left its parent incomplete goes with the parent: one warning, the parent's.
        reason = next((text for old, text in dropped.items() if old[: len(path)] == path), error_message(item))
        dropped = {old: text for old, text in dropped.items() if old[: len(path)] != path}
        dropped[path] = reason
        try:
            result = handler(cleaned)
        except ValidationError as again:
            error = again
            continue
        name = data.get("name") or data.get("id") or "(unnamed)"
        for where, text in dropped.items():
            field = ".".join(str(part) for part in where)
            log.warning("%s %r: ignoring the value of %s the service sent (%s)", what, name, field, text)
        return result
    raise first


def _drop_value(data: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """Remove from ``data`` the deepest existing element on the path ``loc``; return its path."""
    path: list[int | str] = []
    node: Any = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_dict or in_list):  # a missing member, or a union member's tag: stop at what the data has
            break
        node = node[part]
        path.append(part)
    if not path:
        return None
    parent: Any = data
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return tuple(path)


class Deployment(_TolerantReading):
    """A hosted application deployment, as returned by the service (secret values redacted on dump).

    Read tolerantly: an odd value in an optional field (a secret named ``""``, ``integration_id: ""``,
    a volume without a name...) is dropped with a logged warning naming the deployment and the field,
    instead of failing the deployment and with it the page it came on.
    """

    name: str
    source: DeploymentSource | str = Field(union_mode="left_to_right")
    source_config: SourceConfig
    source_revision_config: SourceRevisionConfig
    secrets: list[Secret]
    id: UuidStr
    tenant_id: UuidStr
    created_at: Timestamp
    updated_at: Timestamp
    status: DeploymentStatus
    latest_revision_id: UuidStr | None
    active_revision_id: UuidStr | None
    secret_references: list[SecretReference] | None = None
    image_version: str | None = None

    _what: ClassVar[str] = "deployment"

    @property
    def is_rolling_out(self) -> bool:
        """Whether a newer revision than the active one exists."""
        return self.latest_revision_id is not None and self.latest_revision_id != self.active_revision_id

    def summary(self) -> str:
        """One line for logs: name, id, status and revisions (never secrets)."""
        return (
            f"deployment {self.name!r} ({self.id}) status={self.status.value} "
            f"active_revision={self.active_revision_id} latest_revision={self.latest_revision_id}"
        )


class DeploymentListPage(_TolerantReading):
    """One page of ``GET /v2/deployments``: the resources and the offset of the next page."""

    resources: list[Deployment]
    offset: int

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading of a page: each deployment on its own, tolerantly; one the tolerant reader cannot
        read either (its id or name is broken) is left out with a warning naming it, so the others are listed.
        """
        if not isinstance(obj.get("resources"), list):
            raise error
        readable = []
        for index, entry in enumerate(obj["resources"]):
            try:
                readable.append(Deployment.model_validate(entry, **options))
            except ValidationError as err:
                shown = (entry.get("name") or entry.get("id")) if isinstance(entry, dict) else None
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in item['loc']) or '(entry)'}: {error_message(item)}"
                    for item in err.errors(include_url=False)
                )
                log.warning(
                    "Leaving out deployment %r (entry %d of the page): %s", shown or "(unnamed)", index, problems
                )
        return cls._validate_as_is({**obj, "resources": readable}, **options)


class _RowKey(BaseModel):
    """What :class:`DeploymentPageReader` compares of one row; every other field is skipped unread."""

    model_config = ConfigDict(extra="ignore")

    id: Any = None
    updated_at: Any = None
    status: Any = None
    active_revision_id: Any = None
    latest_revision_id: Any = None


class _PageKeys(BaseModel):
    """The rows' keys of one list page (the nested settings are parsed in pydantic-core, never built)."""

    model_config = ConfigDict(extra="ignore")

    resources: list[_RowKey]
    offset: int


class DeploymentPageReader:
    """Read ``GET /v2/deployments`` pages, building a :class:`Deployment` only for rows that changed since
    this reader last read them (the shared poller reads the same rows every interval).

    A row counts as unchanged when its ``id``, ``updated_at``, ``status``, ``active_revision_id`` and
    ``latest_revision_id`` are what they were: the service moves ``updated_at`` whenever it changes a
    deployment, and the fields a rollout's verdict reads are compared themselves, so a verdict never rests
    on a stale row. An unchanged row gives the very :class:`Deployment` object read before (do not modify
    it). A page is first read for these keys only (in pydantic-core: no Python object for the rest of a
    row, so a quiet round allocates little and wakes the garbage collector seldom); only a page with a
    changed row is read whole, as ``DeploymentListPage.model_validate_json`` reads it (tolerantly),
    and so is a body whose keys cannot be read, so it fails as it would without the reader. The reader
    keeps one small key per deployment, only for the ids of the last :meth:`retain`, and only a weak
    reference to the model: a model nobody else holds (a watched deployment between two rounds) is not
    kept alive by the reader, so watching costs no more memory than before; it is read again instead.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[_RowKey, weakref.ReferenceType[Deployment]]] = {}

    def _alive(self, raw_id: Any, key: _RowKey) -> Deployment | None:
        """The model read before for this unchanged row, if something still holds it."""
        known = self._known.get(raw_id) if isinstance(raw_id, str) else None
        return known[1]() if known is not None and known[0] == key else None

    def read(self, body: bytes | str) -> DeploymentListPage:
        """One page, from the body of a ``GET /v2/deployments`` answer.

        :param body: the raw JSON body.
        """
        try:
            outline: _PageKeys | None = _PageKeys.model_validate_json(body)
        except ValidationError:
            outline = None
        keys = outline.resources if outline is not None else None
        if outline is not None and keys is not None:
            reused = [self._alive(key.id, key) for key in keys]
            if all(item is not None for item in reused):
                return DeploymentListPage.model_construct(
                    resources=[item for item in reused if item is not None], offset=outline.offset
                )
        page = DeploymentListPage.model_validate_json(body)
        if keys is None:
            return page
        by_id = {item.id: item for item in page.resources}
        resources: list[Deployment] = []
        for key in keys:
            try:
                wanted = canonical_uuid(key.id, "id")
            except ValueError:
                continue  # the page's reading left it out, with a warning
            read = by_id.get(wanted)
            if read is None:
                continue
            alive = self._alive(key.id, key)
            if alive is not None:
                read = alive  # the same row as before: the same object (a round with no news for it)
            elif isinstance(key.id, str):
                self._known[key.id] = (key, weakref.ref(read))
            resources.append(read)
        return page.model_copy(update={"resources": resources})

    def retain(self, ids: Iterable[str]) -> None:
        """Forget every deployment but ``ids`` (the ones still being read).

        :param ids: deployment ids as the service sends them.
        """
        keep = set(ids)
        self._known = {key: value for key, value in self._known.items() if key in keep}


class Revision(_TolerantReading):
    """One revision of a deployment (production-only endpoint; only ``id`` and ``status`` are relied on)."""

    id: UuidStr
    status: RevisionStatus = RevisionStatus.UNKNOWN
    deployment_id: UuidStr | None = None
    source_revision_config: SourceRevisionConfig | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    status_message: str | None = None

    _what: ClassVar[str] = "revision"


_REQUIRED_FIELDS: dict[str, frozenset[str]] = {
    "deployment": frozenset(name for name, info in Deployment.model_fields.items() if info.is_required()),
    "revision": frozenset(name for name, info in Revision.model_fields.items() if info.is_required()),
}
"""Fields without which a resource is not itself: never dropped by the tolerant reader."""


class RevisionListPage(_TolerantReading):
    """One page of ``GET /v2/deployments/{id}/revisions`` (newest first): the revisions and the next offset."""

    resources: list[Revision]
    offset: int

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading of a page: each revision on its own, tolerantly."""
        if not isinstance(obj.get("resources"), list):
            raise error
        revisions = [Revision.model_validate(entry, **options) for entry in obj["resources"]]
        return cls._validate_as_is({**obj, "resources": revisions}, **options)


class LogLine(ServiceModel):
    """One line of a revision's build or deploy log. Tolerant: a bare string reads as the message."""

    message: str = ""
    timestamp: str | None = None
    level: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"message": value}
        if isinstance(value, dict) and not isinstance(value.get("message", ""), str):
            return {**value, "message": str(value["message"])}
        return value


class RevisionLogPage(ServiceModel):
    """One page of ``GET /v2/deployments/{id}/revisions/{rid}/logs``; ``next_offset`` is an opaque cursor."""

    logs: list[LogLine] = Field(default_factory=list)
    next_offset: str | None = None


# ---------------------------------------------------------------------------------------- requests
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
    :param deployment_type: ``dev_free``, ``dev`` or ``prod``.
    :param deployment_ids: deployment ids (UUIDs).
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

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: object) -> object:
        # The response enum maps unknown values to UNKNOWN; a filter must refuse them instead.
        allowed = [status.value for status in DeploymentStatus]
        if value is not None and not isinstance(value, DeploymentStatus) and value not in allowed:
            raise ValueError(f"status must be one of {', '.join(allowed)}, got {value!r}")
        return value

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


class ErrorDetail(ServiceModel):
    """One entry of a 422 ``detail`` list."""

    loc: list[str | int] = Field(default_factory=list)
    msg: str = ""
    type: str = ""
