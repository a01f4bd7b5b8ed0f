"""The production PATCH rules, checked before sending against the deployment read first (pure, no I/O).

``NOTES.md`` ("PATCH rules the production service documents") lists what production refuses with 400
``{"detail": ...}``. The patch operator reads the deployment anyway, so it checks them first and fails
the task naming the field, the deployment's source and the rule, with nothing sent:

* **cannot change after creation**: ``source_config.integration_id``, ``repo_url``, ``listener_id``,
  ``deployment_type``. The value the deployment already has is not a change: it is accepted and left
  out of the body (:func:`without_unchanged_fixed_fields`), so copying a deployment's ``source_config``
  into a patch works whether or not the server would refuse it;
* **per source** (:data:`REVISION_FIELD_SOURCES`) a ``source_revision_config`` field against the
  revision's source (``revision_source`` when the patch gives one, else the deployment's);
  ``source_config.custom_url`` (unless unchanged), ``secret_references`` and
  ``source_config.resource_spec`` against the deployment's source: ``external_docker`` only;
* ``build_on_push`` cannot be true while the resulting ``repo_ref`` is a tag (``refs/tags/...``), checked
  when the patch sets either.

The ResourceSpec bounds and integer fields are the request models' (:class:`~airflow_provider.models.
ResourceSpecPatch`): refused when the patch is built, before the deployment is read.

A partial ``resource_spec`` would replace the whole one in production; :func:`merge_resource_spec`
completes it from the deployment's current one, the fields this provider does not know (the service's, at any
depth) carried through untouched. A ``*_limit`` below its request is never sent: given so by the user it is
refused before any request (:func:`limits_below_requests`); kept from the current spec (where production had
set it to twice the old request) it is left out, so the service sets it to twice the new request again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from airflow_provider.decisions.spec_changes import LIMIT_OF
from airflow_provider.defaults import RESOURCE_SPEC_MODES
from airflow_provider.models import (
    CarriedResourceSpec,
    Deployment,
    DeploymentSource,
    DeploymentStatus,
    PatchDeploymentRequest,
    ResourceSpecPatch,
    error_message,
)

FIXED_FIELDS = ("integration_id", "repo_url", "listener_id", "deployment_type")
"""``source_config`` fields that cannot change after the deployment is created."""

REVISION_FIELD_SOURCES: dict[str, tuple[str, ...]] = {
    "repo_ref": (DeploymentSource.CODEHOST.value,),
    "image_uri": (DeploymentSource.EXTERNAL_DOCKER.value, DeploymentSource.INTERNAL_DOCKER.value),
    "source_tarball_path": (DeploymentSource.INTERNAL_SOURCE.value,),
    "graph_config_path": (DeploymentSource.CODEHOST.value, DeploymentSource.INTERNAL_SOURCE.value),
}
"""For each ``source_revision_config`` field, the revision sources that accept it."""

GOING_AWAY_STATUSES = (DeploymentStatus.AWAITING_DELETE.value,)
"""Statuses of a deployment being deleted: never patched (a patch would leave a stray revision on it)."""

EXTERNAL_ONLY = DeploymentSource.EXTERNAL_DOCKER.value
TAG_PREFIX = "refs/tags/"


@dataclass(frozen=True)
class LimitBelowRequest:
    """A ``*_limit`` below its request in a resource spec.

    :param request: the request field (``cpu``).
    :param limit: its limit field (``cpu_limit``).
    :param request_value: the request.
    :param limit_value: the limit.
    """

    request: str
    limit: str
    request_value: float
    limit_value: float

    def __str__(self) -> str:
        return (
            f"source_config.resource_spec.{self.limit}={self.limit_value:g} is below "
            f"source_config.resource_spec.{self.request}={self.request_value:g}"
        )


def limits_below_requests(spec: Any) -> list[LimitBelowRequest]:
    """Every ``*_limit`` of ``spec`` set below its request (both set, numbers); empty when none.

    :param spec: a resource spec (model or mapping), e.g. a patch's ``source_config.resource_spec``.
    """
    if spec is None:
        return []
    values = spec.model_dump(exclude_none=True) if isinstance(spec, pydantic.BaseModel) else dict(spec)
    found = []
    for request, limit in LIMIT_OF.items():
        wanted, capped = _number(values.get(request)), _number(values.get(limit))
        if wanted is not None and capped is not None and capped < wanted:
            found.append(LimitBelowRequest(request, limit, wanted, capped))
    return found


def describe_limits_below_requests(found: Sequence[LimitBelowRequest]) -> str:
    """One message for limits given below their requests (refused before sending)."""
    return (
        "; ".join(str(item) for item in found)
        + ": a limit must be at least its request (Kubernetes refuses a request above its limit); raise the "
        "limit, or leave it out and the service sets it to twice the request"
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Refusal:
    """One rule a patch breaks.

    :param field: the dotted field of the patch.
    :param rule: the rule, in words, naming the source it was judged against.
    """

    field: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}"


def _source_of(deployment: Deployment) -> str:
    source = deployment.source
    return source.value if isinstance(source, DeploymentSource) else str(source)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value.value if hasattr(value, "value") else value)


def refusals(request: PatchDeploymentRequest, deployment: Deployment) -> list[Refusal]:
    """Every production PATCH rule ``request`` breaks for ``deployment`` (empty: none).

    :param request: the patch as the user gave it.
    :param deployment: the deployment as read just before.
    """
    found: list[Refusal] = []
    source = _source_of(deployment)
    config = request.source_config
    if config is not None:
        current = deployment.source_config
        for name in FIXED_FIELDS:
            wanted = _text(getattr(config, name))
            have = _text(getattr(current, name))
            if wanted is not None and wanted != have:
                found.append(
                    Refusal(
                        f"source_config.{name}",
                        f"cannot change after the deployment is created (it is {have!r}, the patch gives "
                        f"{wanted!r}; deployment source {source})",
                    )
                )
    revision_source = _text(request.revision_source) or source
    given_by = "the patch's revision_source" if request.revision_source is not None else "the deployment's source"
    revision_config = request.source_revision_config
    for name, allowed in REVISION_FIELD_SOURCES.items():
        if revision_config is None or getattr(revision_config, name) is None or revision_source in allowed:
            continue
        found.append(
            Refusal(
                f"source_revision_config.{name}",
                f"applies to {' and '.join(allowed)} revisions only; this revision's source is {revision_source} "
                f"({given_by})",
            )
        )
    if source != EXTERNAL_ONLY:
        if (
            config is not None
            and config.custom_url is not None
            and config.custom_url != deployment.source_config.custom_url
        ):
            found.append(
                Refusal(
                    "source_config.custom_url",
                    f"can be set for external_docker deployments only; for source {source} the service sets it",
                )
            )
        if config is not None and config.resource_spec is not None:
            found.append(
                Refusal(
                    "source_config.resource_spec",
                    f"applies to external_docker deployments only; this deployment's source is {source}",
                )
            )
        if request.secret_references is not None:
            found.append(
                Refusal(
                    "secret_references",
                    f"applies to external_docker deployments only; this deployment's source is {source}",
                )
            )
    found.extend(_tag_rule(request, deployment, source))
    return found


def _tag_rule(request: PatchDeploymentRequest, deployment: Deployment, source: str) -> list[Refusal]:
    """``build_on_push`` true with a tag ``repo_ref``, when the patch sets either of them."""
    flag = request.source_config.build_on_push if request.source_config is not None else None
    ref = request.source_revision_config.repo_ref if request.source_revision_config is not None else None
    if flag is None and ref is None:
        return []
    if flag is None:
        flag = deployment.source_config.build_on_push
    if ref is None:
        ref = deployment.source_revision_config.repo_ref
    if not (flag is True and ref is not None and ref.startswith(TAG_PREFIX)):
        return []
    field = (
        "source_config.build_on_push"
        if request.source_config is not None and request.source_config.build_on_push
        else "source_revision_config.repo_ref"
    )
    return [
        Refusal(
            field,
            f"build_on_push cannot be true while repo_ref is a tag ({ref!r}); deployment source {source}",
        )
    ]


def unchanged_fixed_fields(request: PatchDeploymentRequest, deployment: Deployment) -> list[str]:
    """The create-time-only ``source_config`` fields ``request`` gives with the value ``deployment`` has."""
    config = request.source_config
    if config is None:
        return []
    return [
        name
        for name in FIXED_FIELDS
        if getattr(config, name) is not None
        and _text(getattr(config, name)) == _text(getattr(deployment.source_config, name))
    ]


def without_unchanged_fixed_fields(request: PatchDeploymentRequest, deployment: Deployment) -> PatchDeploymentRequest:
    """``request`` without the create-time-only fields that would not change (production may refuse their
    mere presence; leaving them out costs nothing). Raises ``ValueError`` when nothing else is left."""
    unchanged = unchanged_fixed_fields(request, deployment)
    if not unchanged or request.source_config is None:
        return request
    config = request.source_config.model_copy(update=dict.fromkeys(unchanged))
    try:
        return PatchDeploymentRequest.model_validate(
            {**_fields_of(request), "source_config": config if _has_values(config) else None}
        )
    except pydantic.ValidationError:
        raise ValueError(
            f"nothing to change: source_config.{', source_config.'.join(unchanged)} already "
            f"{'has' if len(unchanged) == 1 else 'have'} the value given, and the patch sets nothing else"
        ) from None


def _fields_of(request: PatchDeploymentRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in type(request).model_fields}


def _has_values(model: pydantic.BaseModel) -> bool:
    return bool(model.model_dump(exclude_none=True))


@dataclass(frozen=True)
class MergedSpec:
    """What :func:`merge_resource_spec` did.

    :param request: the patch to send.
    :param kept: fields this provider knows, taken from the deployment's current ``resource_spec``.
    :param carried: fields of the current spec this provider does not know (the service's), carried through
        untouched.
    :param dropped: limits of the current spec not kept because they are below the patch's new request (the
        service sets an unset limit to twice its request), each as ``cpu_limit=2 (below the new cpu=4)``.
    """

    request: PatchDeploymentRequest
    kept: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def merge_resource_spec(request: PatchDeploymentRequest, deployment: Deployment) -> MergedSpec:
    """Complete a partial ``source_config.resource_spec`` from ``deployment``'s current one.

    Production replaces the whole ``resource_spec`` with the one a patch sends; this keeps every field the patch
    does not mention, those this provider does not know (the service's, at any depth) untouched (the spec sent
    is a :class:`~airflow_provider.models.CarriedResourceSpec`). Fields are merged one level deep: a field the
    patch gives (``labels``, ``sidecars``...) is sent as given; one it sets to ``None`` explicitly is removed.
    A limit of the current spec below the patch's new request (``cpu_limit`` 2 for a new ``cpu`` 4: production
    had set it to twice the old request) is not kept (listed in ``dropped``): the service sets it to twice the
    new request.
    Raises ``ValueError`` naming the field when a value kept from the current spec is one a request may not
    carry (a fraction where an integer is required, a bound exceeded), and naming both fields when a limit
    the patch gives is below the request it keeps or gives.

    :param request: the patch as the user gave it.
    :param deployment: the deployment as read just before.
    """
    config = request.source_config
    given = config.resource_spec if config is not None else None
    current = deployment.source_config.resource_spec
    if config is None or given is None or current is None:
        return MergedSpec(request)
    known = set(ResourceSpecPatch.model_fields)
    have = current.model_dump(mode="json", exclude_none=True)
    explicit = {name: getattr(given, name) for name in given.model_fields_set}
    kept = tuple(sorted(name for name in have if name in known and name not in explicit))
    carried = tuple(sorted(name for name in have if name not in known))
    merged: dict[str, Any] = {name: have[name] for name in (*kept, *carried)}
    merged.update({name: value for name, value in explicit.items() if value is not None})
    dropped = []
    for below in limits_below_requests(merged):
        if below.limit in kept and below.request in explicit:
            del merged[below.limit]
            dropped.append(
                f"{below.limit}={below.limit_value:g} (below the new {below.request}={below.request_value:g})"
            )
        else:
            origin = "kept from the deployment's current resource_spec" if below.request in kept else "given"
            raise ValueError(
                f"{below} ({below.request} {origin}): a limit must be at least its request (Kubernetes refuses a "
                f"request above its limit); raise {below.limit}, or leave it out and the service sets it to twice "
                f"{below.request}"
            )
    kept = tuple(name for name in kept if name in merged)
    try:
        spec = CarriedResourceSpec.model_validate(merged)
    except pydantic.ValidationError as err:
        problems = []
        for item in err.errors(include_url=False, include_input=False):
            field = ".".join(str(part) for part in item["loc"])
            origin = (
                "kept from the deployment's current resource_spec"
                if item["loc"][:1] and item["loc"][0] in kept
                else "given"
            )
            problems.append(f"source_config.resource_spec.{field} ({origin}): {error_message(item)}")
        raise ValueError(
            "cannot merge the patch's resource_spec with the deployment's current one: "
            + "; ".join(problems)
            + "; give the field in the patch, or pass resource_spec_mode='replace' to send the resource_spec as given"
        ) from None
    merged_config = config.model_copy(update={"resource_spec": spec})
    return MergedSpec(request.model_copy(update={"source_config": merged_config}), kept, carried, tuple(dropped))


def discouraged_fields(request: PatchDeploymentRequest) -> list[str]:
    """Fields of ``request`` production's reference marks "do not use" (``orchestrator_*``, ``executor_*``)."""
    spec = request.source_config.resource_spec if request.source_config is not None else None
    return [f"source_config.resource_spec.{name}" for name in spec.discouraged_fields()] if spec is not None else []


def describe_refusals(found: Sequence[Refusal], deployment: Deployment) -> str:
    """One message for the refusals ``found``: the deployment, its source, each field and rule."""
    return (
        f"refusing to patch deployment {deployment.name!r} ({deployment.id}, source {_source_of(deployment)}); "
        "production refuses this (nothing was sent): " + "; ".join(str(item) for item in found)
    )


def going_away(deployment: Deployment) -> str | None:
    """Why ``deployment`` must not be patched because it is being deleted (``None``: it is not).

    :param deployment: the deployment as read just before.
    """
    status = str(getattr(deployment.status, "value", deployment.status))
    if status not in GOING_AWAY_STATUSES:
        return None
    return (
        f"refusing to patch deployment {deployment.name!r} ({deployment.id}): its status is {status}, it is being "
        "deleted, and a patch would only leave a stray revision on it (nothing was sent); status expected: any "
        f"other than {', '.join(GOING_AWAY_STATUSES)}"
    )


__all__ = [
    "FIXED_FIELDS",
    "GOING_AWAY_STATUSES",
    "LIMIT_OF",
    "RESOURCE_SPEC_MODES",
    "REVISION_FIELD_SOURCES",
    "LimitBelowRequest",
    "MergedSpec",
    "Refusal",
    "describe_limits_below_requests",
    "describe_refusals",
    "discouraged_fields",
    "going_away",
    "limits_below_requests",
    "merge_resource_spec",
    "refusals",
    "unchanged_fixed_fields",
    "without_unchanged_fixed_fields",
]
