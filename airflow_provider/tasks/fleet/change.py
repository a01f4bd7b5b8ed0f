"""What a fleet rollout sends: the change as each deployment's patch (the patch operator's arguments, or
``patch_for``'s), its digest (what the progress record is recorded for) and each patch's fingerprint (what a
retry recognises it by); no secret value in either. Completing a patch against its deployment is the patch
task's own (:func:`~airflow_provider.tasks.request.complete_request`), logged per deployment here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.models import Deployment, PatchDeploymentRequest
from airflow_provider.tasks.request import (
    build_patch_request,
    complete_request,
    log_completion,
    resolve_secrets,
)

if TYPE_CHECKING:
    import logging

PATCH_FIELDS = (
    "revision_source",
    "source_config",
    "source_revision_config",
    "secrets",
    "secret_references",
    "image_uri",
    "repo_ref",
)
"""What a fleet's change (or its ``patch_for`` callable) may set: the patch operator's arguments."""


class FleetChange(NamedTuple):
    """A fleet's change, ready for its deployments.

    :param request_for: the patch for a deployment (raises ``AirflowFailException`` for that one alone).
    :param digest: :func:`change_digest` of the whole request (no secret values).
    :param secrets: the secrets it sets, their values resolved (``None``: none given).
    """

    request_for: Callable[[Deployment], PatchDeploymentRequest]
    digest: str
    secrets: list[dict[str, str]] | None


def fleet_change(
    arguments: Mapping[str, Any],
    patch_for: Callable[[Deployment], Mapping[str, Any]] | None,
    *,
    targets: list[Any],
    plan: list[Any],
    completed: list[Any],
) -> FleetChange:
    """The patch for each deployment, and a digest of the whole request (no secret values); the secrets are
    resolved once per run, not once per deployment.

    :param arguments: the fixed change, ``{name: value}`` of :data:`PATCH_FIELDS` (rendered).
    :param patch_for: the user's ``Deployment -> {argument: value}``, over the fixed change, or ``None``.
    :param targets: ``[deployment_ids, deployment_names, filters]`` (part of the digest).
    :param plan: ``[canary, wave_size, max_failures]`` (part of the digest).
    :param completed: ``[resource_spec_mode, check_source_rules]`` (part of the digest).
    """
    values = {name: arguments.get(name) for name in PATCH_FIELDS}
    secrets = values["secrets"] = resolve_secrets(values["secrets"])
    fixed = {name: value for name, value in values.items() if value is not None}
    digest_parts: dict[str, Any] = {
        "targets": targets,
        "plan": plan,
        "patch_for": getattr(patch_for, "__qualname__", None),
        "completed": completed,
    }
    if patch_for is None:
        request = build_patch_request("patch for the fleet", **fixed)
        digest_parts["request"] = request.model_dump(mode="json", exclude_none=True)
        return FleetChange(lambda deployment: request, change_digest(digest_parts), secrets)
    digest_parts["fixed"] = {
        name: value if name != "secrets" else sorted(item["name"] for item in value) for name, value in fixed.items()
    }
    given_for = patch_for

    def request_for(deployment: Deployment) -> PatchDeploymentRequest:
        given = given_for(deployment)
        if not isinstance(given, Mapping):
            raise AirflowFailException(f"patch_for returned {type(given).__name__}, expected a mapping")
        unknown = sorted(set(given) - set(PATCH_FIELDS))
        if unknown:
            raise AirflowFailException(
                f"patch_for returned unknown argument(s) {', '.join(unknown)}; known: {', '.join(PATCH_FIELDS)}"
            )
        merged = {**fixed, **{name: value for name, value in given.items() if value is not None}}
        return build_patch_request(f"patch for deployment {deployment.name!r} ({deployment.id})", **merged)

    return FleetChange(request_for, change_digest(digest_parts), secrets)


def completed_for(
    request: PatchDeploymentRequest,
    deployment: Deployment,
    *,
    resource_spec_mode: str,
    check_source_rules: bool,
    log: logging.Logger | Any,
) -> PatchDeploymentRequest:
    """The patch to send to one deployment of the fleet
    (:func:`~airflow_provider.tasks.request.complete_request`); what completing it did is logged, each line
    naming the deployment.

    :param request: the deployment's patch as the change gives it.
    :param deployment: the deployment as just read.
    :param resource_spec_mode: ``"merge"`` or ``"replace"``.
    :param check_source_rules: whether to refuse locally what production refuses.
    :param log: the task's logger.
    :raises AirflowFailException: for this deployment alone; nothing is sent to it.
    """
    completed = complete_request(
        request, deployment, resource_spec_mode=resource_spec_mode, check_source_rules=check_source_rules
    )
    log_completion(completed, log, deployment_name=deployment.name)
    return completed.request


def change_digest(parts: Mapping[str, Any]) -> str:
    """A digest of what a fleet rollout was asked to do (no secret values: callers give secret names).

    :param parts: JSON-able description of the change and the plan.
    """
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def request_fingerprint(deployment_id: str, request: PatchDeploymentRequest) -> str:
    """Digest of what one patch sets; secret values are left out (names only)."""
    shown = json.dumps(request.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(f"{deployment_id}:{shown}".encode()).hexdigest()
