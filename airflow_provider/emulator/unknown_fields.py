"""The emulator's ``unknown_fields`` switch: a service whose answers carry fields the provider's models lack.

Production adds fields without notice. With the switch on, the emulator plays a newer service: its schema
has the fields below, which :mod:`airflow_provider.models` does not declare, at every depth the provider
reads (the deployment, ``source_config``, ``resource_spec`` and the containers in it, the revisions and their
``source_revision_config``). It answers them, stores what a PATCH sends of them, and answers that back, as
production would:

* ``resource_spec``: :data:`SPEC_FIELDS`, a number and an object holding an object. Every ``resource_spec``
  the emulator holds shows them with their *initial* values (as if set through the service's own console)
  until a PATCH gives them; a PATCH that replaces the whole ``resource_spec`` (``resource_spec_mode=
  "replace"``, production) without them resets them to the service's *defaults*, which differ, so a client
  that drops them is seen to have dropped them. Sent back whole, they are kept. With ``"merge"`` a PATCH
  changes only the ones it gives.
* each init container and sidecar of a ``resource_spec``: :data:`CONTAINER_FIELDS` (an unknown key inside
  a known nested object), shown with Kubernetes' default until a PATCH gives another value.
* ``source_config``: :data:`CONFIG_FIELDS`, kept until a PATCH gives them, like its other fields.
* values: :data:`DEPLOYMENT_TYPES`, deployment types the provider does not know, accepted on create and by the
  list filter and shown back;
* read-only: :data:`DEPLOYMENT_FIELDS` on the deployment, :data:`REVISION_FIELDS` on each revision and
  :data:`REVISION_CONFIG_FIELDS` in every ``source_revision_config`` (a PATCH cannot set them; they are
  ignored when sent).

A PATCH field the emulated service does not know either is still ignored, as production ignores it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from .contract.schema import ContainerIn, PatchBody, ResourceSpecIn, SourceConfigIn

SPEC_FIELDS: dict[str, tuple[Any, Any]] = {
    "gpu_count": (1, 0),
    "autoscaling": (
        {"metric": "concurrency", "target": 20, "window": {"seconds": 60}},
        {"metric": "cpu", "target": 80, "window": {"seconds": 300}},
    ),
}
"""``resource_spec`` fields only the service knows: ``name: (initial value, default after a replacing PATCH)``."""
CONTAINER_FIELDS: dict[str, Any] = {"terminationMessagePolicy": "File"}
"""Fields of an init container or sidecar only the service knows, and the value shown until a PATCH sets one."""
CONFIG_FIELDS: dict[str, Any] = {"region": "eu-west-1", "network": {"egress": "restricted", "allow": ["10.0.0.0/8"]}}
"""``source_config`` fields only the service knows, and the value shown until a PATCH sets one."""
DEPLOYMENT_FIELDS: dict[str, Any] = {"billing": {"plan": "standard", "meter": {"unit": "vcpu-hour", "rate": 0.05}}}
"""Read-only fields of the deployment only the service knows."""
REVISION_FIELDS: dict[str, Any] = {"build_info": {"builder": "buildkit", "cache": {"hit": True}}}
"""Read-only fields of a revision only the service knows."""
REVISION_CONFIG_FIELDS: dict[str, Any] = {"build_platform": "linux/amd64"}
"""Read-only ``source_revision_config`` fields only the service knows (the deployment's and each revision's)."""
DEPLOYMENT_TYPES: tuple[str, ...] = ("prod_gpu",)
"""Deployment types only the newer service knows (``source_config.deployment_type`` on create, the
``deployment_type`` filter): values of an enum the provider's models do not declare."""


class ContainerWithServiceFields(ContainerIn):
    """An init container or sidecar of the newer service's PATCH schema."""

    terminationMessagePolicy: str | None = None


class ResourceSpecWithServiceFields(ResourceSpecIn):
    """A resource spec of the newer service's PATCH schema."""

    gpu_count: int | None = Field(default=None, ge=0)
    autoscaling: dict[str, Any] | None = None
    init_containers: list[ContainerWithServiceFields] | None = None  # type: ignore[assignment]
    sidecars: list[ContainerWithServiceFields] | None = None  # type: ignore[assignment]


class SourceConfigWithServiceFields(SourceConfigIn):
    """``source_config`` of the newer service's PATCH schema."""

    region: str | None = None
    network: dict[str, Any] | None = None
    resource_spec: ResourceSpecWithServiceFields | None = None


class PatchBodyWithServiceFields(PatchBody):
    """The PATCH body of the newer service: :class:`~airflow_provider.emulator.contract.schema.PatchBody` plus the
    fields of this module (the read-only ones are ignored when sent)."""

    source_config: SourceConfigWithServiceFields | None = None


def stored_dump(model: BaseModel) -> dict[str, Any]:
    """``model`` (a stored ``source_config``) as plain JSON, the service's fields it holds kept (the switch
    off drops them: :func:`~airflow_provider.emulator.contract.merge.known_dump`).

    :param model: the stored model.
    """
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return dumped


def replaced_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The ``resource_spec`` a replacing PATCH stores for ``spec``: the service's fields it does not give set
    to their defaults (production replaces the whole ``resource_spec``).

    :param spec: the spec the PATCH gave, as it is to be stored.
    """
    return {**{name: copy.deepcopy(default) for name, (_initial, default) in SPEC_FIELDS.items()}, **spec}


def shown_deployment(body: dict[str, Any]) -> dict[str, Any]:
    """A deployment's JSON (an answer, or the admin view with its ``revisions``) with the service's fields it
    does not hold shown at their initial values (in place; returned).

    :param body: the deployment as the emulator renders it.
    """
    _fill(body, DEPLOYMENT_FIELDS)
    config = body.get("source_config")
    if isinstance(config, dict):
        _fill(config, CONFIG_FIELDS)
        spec = config.get("resource_spec")
        if isinstance(spec, dict):
            _fill(spec, {name: initial for name, (initial, _default) in SPEC_FIELDS.items()})
            for key in ("init_containers", "sidecars"):
                for container in spec.get(key) or []:
                    if isinstance(container, dict):
                        _fill(container, CONTAINER_FIELDS)
    _fill_revision_config(body)
    for revision in body.get("revisions") or []:
        if isinstance(revision, dict):
            shown_revision(revision)
    return body


def shown_revision(body: dict[str, Any]) -> dict[str, Any]:
    """A revision's JSON with the service's read-only fields (in place; returned).

    :param body: the revision as the emulator renders it.
    """
    _fill(body, REVISION_FIELDS)
    _fill_revision_config(body)
    return body


def _fill_revision_config(body: dict[str, Any]) -> None:
    config = body.get("source_revision_config")
    if isinstance(config, dict):
        _fill(config, REVISION_CONFIG_FIELDS)


def _fill(target: dict[str, Any], values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        if name not in target:
            target[name] = copy.deepcopy(value)


__all__ = [
    "CONFIG_FIELDS",
    "CONTAINER_FIELDS",
    "DEPLOYMENT_FIELDS",
    "DEPLOYMENT_TYPES",
    "REVISION_CONFIG_FIELDS",
    "REVISION_FIELDS",
    "SPEC_FIELDS",
    "PatchBodyWithServiceFields",
    "replaced_spec",
    "shown_deployment",
    "shown_revision",
    "stored_dump",
]
