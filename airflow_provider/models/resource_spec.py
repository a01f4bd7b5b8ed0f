"""A deployment's resource spec (compute resources and Kubernetes extras), as the service shows it
(:class:`ResourceSpec`, every number kept as sent), as a request may send it (:class:`ResourceSpecPatch`,
held to production's request schema), and as a request carries it back from what the service showed
(:class:`CarriedResourceSpec`, the fields this provider does not know passed through untouched)."""

from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

from airflow_provider.models.base import ServiceModel


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
