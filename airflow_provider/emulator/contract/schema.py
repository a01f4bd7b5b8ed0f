"""The production ``PATCH /v2/deployments/{id}`` body, as the emulator checks it (schema level, 422).

This is the emulator's own reading of the production contract (``NOTES.md``, "PATCH rules the
production service documents"), written independently of the provider's request models so that a test
running the provider's client against the emulator really tests the client's validation.

Schema rules (refused with a FastAPI-style 422 ``{"detail": [{"loc", "msg", "type", ...}]}``):

* ``cpu``, ``queue_cpu``, ``redis_cpu``: 0.1 .. 8; ``cpu_limit``, ``queue_cpu_limit``,
  ``redis_cpu_limit``: 0.1 .. 16 (fractions allowed); the other ``*_cpu*`` fields: >= 0;
* every ``*_memory_mb``, ``*_memory_limit_mb``, ``*_scale``, ``db_storage_gi`` and
  ``db_max_connections``: an integer >= 0, read like pydantic/FastAPI read ``int`` (``512.0`` and
  ``"512"`` are 512; ``512.5`` is refused with ``int_from_float``);
* containers (``init_containers``, ``sidecars``) need a ``name``, and their ``resources.limits`` and
  ``resources.requests`` values are Kubernetes quantity strings (a number is refused with ``string_type``);
  a volume mount needs a ``mountPath``;
  ``labels`` and ``annotations`` values must be strings; volumes and image pull secrets need a name;
* ids (``integration_id``, ``listener_id``) must be UUIDs; ``revision_source`` one of ``codehost``,
  ``internal_docker``, ``internal_source``; ``deployment_type`` a string (it cannot change: see the rules);
* secrets need a name and a value, names unique.

Unknown fields are ignored at every level, as production does; ``repo_commit_sha`` is read-only and
ignored when sent.

Responses (see :func:`render_resource_spec`): integer fields are sent as JSON integers (never
``512.0``) and CPU amounts are rounded to the millicore (3 decimals, half to even, as Python's
``round``). With ``default_limits``, a ``*_limit`` left unset defaults to twice its request (and is echoed).

A resource spec whose ``*_limit`` ends below its request (after that default) is refused with a 422
``value_error`` located at the limit (:func:`limits_below_requests`), as Kubernetes refuses a container
whose request exceeds its limit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CPU_DECIMALS = 3
"""CPU amounts are stored and answered rounded to this many decimals (millicores)."""

CPU_FIELDS: tuple[str, ...] = (
    "cpu",
    "cpu_limit",
    "queue_cpu",
    "queue_cpu_limit",
    "orchestrator_cpu",
    "orchestrator_cpu_limit",
    "executor_cpu",
    "executor_cpu_limit",
    "redis_cpu",
    "redis_cpu_limit",
    "db_cpu",
    "db_cpu_limit",
)
INTEGER_FIELDS: tuple[str, ...] = (
    "min_scale",
    "max_scale",
    "memory_mb",
    "memory_limit_mb",
    "queue_min_scale",
    "queue_max_scale",
    "queue_memory_mb",
    "queue_memory_limit_mb",
    "orchestrator_memory_mb",
    "orchestrator_memory_limit_mb",
    "orchestrator_min_scale",
    "orchestrator_max_scale",
    "executor_memory_mb",
    "executor_memory_limit_mb",
    "redis_memory_mb",
    "redis_memory_limit_mb",
    "db_memory_mb",
    "db_memory_limit_mb",
    "db_storage_gi",
    "db_max_connections",
)
LIMIT_OF: dict[str, str] = {
    request: f"{request.removesuffix('_mb')}_limit_mb" if request.endswith("_mb") else f"{request}_limit"
    for request in (*CPU_FIELDS, *INTEGER_FIELDS)
    if request.endswith(("cpu", "memory_mb"))
}
"""Each request field and its limit field (``cpu`` -> ``cpu_limit``, ``memory_mb`` -> ``memory_limit_mb``)."""

Cpu = Annotated[float, Field(ge=0.1, le=8)]
CpuLimit = Annotated[float, Field(ge=0.1, le=16)]
OtherCpu = Annotated[float, Field(ge=0)]
Whole = Annotated[int, Field(ge=0)]
Uuid = Annotated[uuid.UUID, Field(description="A UUID")]


class _Lenient(BaseModel):
    """Unknown fields are ignored, as production does."""

    model_config = ConfigDict(extra="ignore")


class NamedRef(_Lenient):
    """An image pull secret: a ``name``."""

    name: str


class VolumeIn(_Lenient):
    """A volume: a ``name`` plus free-form source members."""

    name: str
    configMap: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    emptyDir: dict[str, Any] | None = None
    persistentVolumeClaim: dict[str, Any] | None = None
    nfs: dict[str, Any] | None = None
    projected: dict[str, Any] | None = None
    downwardAPI: dict[str, Any] | None = None
    csi: dict[str, Any] | None = None


class VolumeMountIn(_Lenient):
    """A volume mount: ``mountPath`` is required."""

    name: str | None = None
    mountPath: str
    subPath: str | None = None
    mountPropagation: str | None = None
    readOnly: bool | None = None
    subPathExpr: str | None = None


class EnvVarIn(_Lenient):
    """An environment variable of a container."""

    name: str
    value: str | None = None
    valueFrom: dict[str, Any] | None = None


class ContainerResourcesIn(_Lenient):
    """Container ``limits`` and ``requests``: Kubernetes quantities, strings only (``"500m"``, ``"1Gi"``);
    a JSON number is a 422 ``string_type``, as in production's schema."""

    limits: dict[str, str] | None = None
    requests: dict[str, str] | None = None


class ContainerIn(_Lenient):
    """An init container or sidecar: ``name`` is required."""

    name: str
    image: str | None = None
    imagePullPolicy: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    workingDir: str | None = None
    env: list[EnvVarIn] | None = None
    envFrom: list[dict[str, Any]] | None = None
    resources: ContainerResourcesIn | None = None
    volumeMounts: list[VolumeMountIn] | None = None
    securityContext: dict[str, Any] | None = None
    restartPolicy: str | None = None


class ResourceSpecIn(_Lenient):
    """A resource spec with the production bounds (see the module docstring)."""

    min_scale: Whole | None = None
    max_scale: Whole | None = None
    cpu: Cpu | None = None
    cpu_limit: CpuLimit | None = None
    memory_mb: Whole | None = None
    memory_limit_mb: Whole | None = None
    queue_min_scale: Whole | None = None
    queue_max_scale: Whole | None = None
    queue_cpu: Cpu | None = None
    queue_cpu_limit: CpuLimit | None = None
    queue_memory_mb: Whole | None = None
    queue_memory_limit_mb: Whole | None = None
    orchestrator_cpu: OtherCpu | None = None
    orchestrator_cpu_limit: OtherCpu | None = None
    orchestrator_memory_mb: Whole | None = None
    orchestrator_memory_limit_mb: Whole | None = None
    orchestrator_min_scale: Whole | None = None
    orchestrator_max_scale: Whole | None = None
    executor_cpu: OtherCpu | None = None
    executor_cpu_limit: OtherCpu | None = None
    executor_memory_mb: Whole | None = None
    executor_memory_limit_mb: Whole | None = None
    redis_cpu: Cpu | None = None
    redis_cpu_limit: CpuLimit | None = None
    redis_memory_mb: Whole | None = None
    redis_memory_limit_mb: Whole | None = None
    db_cpu: OtherCpu | None = None
    db_cpu_limit: OtherCpu | None = None
    db_memory_mb: Whole | None = None
    db_memory_limit_mb: Whole | None = None
    db_storage_gi: Whole | None = None
    db_max_connections: Whole | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    service_account_name: str | None = None
    image_pull_secrets: list[NamedRef] | None = None
    volumes: list[VolumeIn] | None = None
    volume_mounts: list[VolumeMountIn] | None = None
    init_containers: list[ContainerIn] | None = None
    sidecars: list[ContainerIn] | None = None


class ListenerConfigIn(_Lenient):
    """Listener settings."""

    k8s_namespace: str | None = None


class SourceConfigIn(_Lenient):
    """``source_config`` of a PATCH; ``deployment_type`` is a create-time-only field of production's."""

    integration_id: Uuid | None = None
    repo_url: str | None = None
    build_on_push: bool | None = None
    custom_url: str | None = None
    resource_spec: ResourceSpecIn | None = None
    listener_id: Uuid | None = None
    listener_config: ListenerConfigIn | None = None
    install_command: str | None = None
    build_command: str | None = None
    deployment_type: str | None = None  # create-time only: any change is refused (400) by the rules


class SourceRevisionConfigIn(_Lenient):
    """``source_revision_config`` of a PATCH (``repo_commit_sha`` is read-only and ignored)."""

    repo_ref: str | None = None
    graph_config_path: str | None = None
    image_uri: str | None = None
    source_tarball_path: str | None = None

    def given(self) -> dict[str, str]:
        """The non-null fields."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class SecretIn(_Lenient):
    """A secret to store: name and value (the value is never logged)."""

    name: str = Field(min_length=1)
    value: str


class SecretReferenceIn(_Lenient):
    """A reference to an orchestrator secret."""

    name: str
    secret_name: str
    secret_key: str


class PatchBody(_Lenient):
    """The body of ``PATCH /v2/deployments/{deployment_id}`` as production validates it.

    :param revision_source: source of the new revision (default: the deployment's).
    :param source_config: settings that need no revision (except ``resource_spec``, which does).
    :param source_revision_config: settings that create a revision when non-null.
    :param secrets: secrets to store; non-null creates a revision.
    :param secret_references: orchestrator secret references (``external_docker`` only).
    """

    revision_source: Literal["codehost", "internal_docker", "internal_source"] | None = None
    source_config: SourceConfigIn | None = None
    source_revision_config: SourceRevisionConfigIn | None = None
    secrets: list[SecretIn] | None = None
    secret_references: list[SecretReferenceIn] | None = None

    @model_validator(mode="after")
    def _unique_secret_names(self) -> PatchBody:
        names = [secret.name for secret in self.secrets or []]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"secret names must be unique, repeated: {', '.join(repeated)}")
        return self

    def revision_fields(self) -> dict[str, str]:
        """The non-null ``source_revision_config`` fields."""
        return self.source_revision_config.given() if self.source_revision_config is not None else {}


class PatchInvalid(ValueError):
    """A PATCH body that fails the schema; ``errors`` is the FastAPI-style ``detail`` list.

    :param errors: ``{"type", "loc", "msg", "input"...}`` items, ``loc`` starting with ``"body"``.
    """

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation error(s)")
        self.errors = errors


def parse_patch(body: PatchBody | BaseModel | Mapping[str, Any], schema: type[PatchBody] = PatchBody) -> PatchBody:
    """Read a PATCH body given as :class:`PatchBody`, the provider's request model or plain JSON.

    :param body: the body.
    :param schema: the body's model (a newer service's: :mod:`~airflow_provider.emulator.unknown_fields`).
    :raises PatchInvalid: with FastAPI-style errors when the body breaks the schema.
    """
    if isinstance(body, schema):
        return body
    if isinstance(body, BaseModel):
        to_wire = getattr(body, "to_request_body", None)
        raw = to_wire() if callable(to_wire) else body.model_dump(mode="json", exclude_none=True)
    else:
        raw = dict(body)
    try:
        return schema.model_validate(raw)
    except ValidationError as error:
        errors = json.loads(error.json(include_url=False, include_input=False))
        raise PatchInvalid([{**item, "loc": ["body", *item["loc"]]} for item in errors]) from None


def stored_resource_spec(spec: ResourceSpecIn, *, default_limits: bool) -> dict[str, Any]:
    """The resource spec to store for ``spec``: nulls dropped, CPU amounts rounded, and (production)
    each unset ``*_limit`` set to twice its (rounded) request.

    :param spec: the validated spec of a PATCH.
    :param default_limits: fill unset limits from their requests.
    """
    stored = render_resource_spec(spec.model_dump(exclude_none=True))
    if default_limits:
        for request, limit in LIMIT_OF.items():
            if request in stored and limit not in stored:
                stored[limit] = stored[request] * 2
    return render_resource_spec(stored)


def render_resource_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` as production answers it: integer fields as integers, CPU amounts rounded.

    :param spec: a stored resource spec (plain JSON).
    """
    rendered = dict(spec)
    for name in INTEGER_FIELDS:
        value = rendered.get(name)
        if isinstance(value, float) and value.is_integer():
            rendered[name] = int(value)
    for name in CPU_FIELDS:
        value = rendered.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rounded = round(float(value), CPU_DECIMALS)
            rendered[name] = int(rounded) if rounded.is_integer() and isinstance(value, int) else rounded
    return rendered


def limits_below_requests(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """FastAPI-style 422 errors for each ``*_limit`` of a stored resource spec below its request (empty: none).

    :param spec: the resource spec as it would be stored (limits defaulted).
    """
    errors = []
    for request, limit in LIMIT_OF.items():
        wanted, capped = spec.get(request), spec.get(limit)
        if isinstance(wanted, (int, float)) and isinstance(capped, (int, float)) and capped < wanted:
            errors.append(
                {
                    "type": "value_error",
                    "loc": ["body", "source_config", "resource_spec", limit],
                    "msg": f"Value error, {limit} ({capped}) must be at least {request} ({wanted})",
                    "input": capped,
                }
            )
    return errors
