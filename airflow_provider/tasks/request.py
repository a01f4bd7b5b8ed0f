"""A patch request built from a task's arguments, before any request: secret values resolved (never
templated) and registered with Airflow's masker, rendered values checked, the request validated; then
completed against the deployment as read (:func:`complete_request`; the patch task's :func:`against_current`).

The patch and fleet operators build and complete their patches here, so both apply the same rules; the rollback
operator resolves the secrets it re-sends here too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pydantic
from airflow.sdk import BaseHook, Variable
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.log import mask_secret

from airflow_provider.models import Deployment, PatchDeploymentRequest
from airflow_provider.tasks.base import REVISION_VALUE_FIELDS, check_rendered_value, validation_failure

if TYPE_CHECKING:
    import logging

__all__ = [
    "CompletedPatch",
    "SecretValue",
    "against_current",
    "build_patch_request",
    "complete_request",
    "describe_patch",
    "log_completion",
    "resolve_secrets",
]

SecretValue = str | Callable[[], str] | Mapping[str, str]
"""A secret value: the value itself, a callable returning it, ``{"variable": "<key>"}`` or
``{"connection": "<conn_id>", "field": "password"}`` (resolved when the task runs)."""


def _resolve_secret_value(value: Any, where: str) -> str:
    if callable(value):
        value = value()
    elif isinstance(value, Mapping):
        if set(value) == {"variable"}:
            value = Variable.get(str(value["variable"]))
        elif "connection" in value and set(value) <= {"connection", "field"}:
            conn = BaseHook.get_connection(str(value["connection"]))
            field = str(value.get("field", "password"))
            if field not in ("password", "login", "host", "schema"):
                raise AirflowFailException(f"{where}: field must be password, login, host or schema, got {field!r}")
            value = getattr(conn, field)
        else:
            raise AirflowFailException(
                f"{where}: a reference must be {{'variable': key}} or {{'connection': conn_id, 'field': 'password'}},"
                f" got keys {sorted(value)}"
            )
    if not isinstance(value, str) or not value:
        raise AirflowFailException(f"{where}: the secret value must be a non-empty string")
    if "{{" in value and "}}" in value:  # not shown: the value may be a real secret
        raise AirflowFailException(
            f"{where}: the value looks like a Jinja template, but secrets are never templated (rendered "
            "values are stored in the rendered-fields table); use {'variable': key} or "
            "{'connection': conn_id, 'field': 'password'} instead"
        )
    return value


def resolve_secrets(secrets: Any) -> list[dict[str, str]] | None:
    """Secrets as ``[{"name", "value"}]`` with every value resolved and registered with the masker.

    :param secrets: ``None``, a mapping name -> value, or a list of ``{"name", "value"}`` mappings; a value
        is a string, a callable, ``{"variable": key}`` or ``{"connection": conn_id, "field": ...}``.
    """
    if secrets is None:
        return None
    if isinstance(secrets, Mapping):
        items = [(str(name), value, f"secrets[{name!r}]") for name, value in secrets.items()]
    elif isinstance(secrets, Sequence) and not isinstance(secrets, (str, bytes)):
        items = []
        for index, entry in enumerate(secrets):
            if not isinstance(entry, Mapping) or set(entry) != {"name", "value"}:
                keys = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
                raise AirflowFailException(f"secrets[{index}] must be a mapping with keys name and value, got {keys}")
            items.append((str(entry["name"]), entry["value"], f"secrets[{index}] ({entry['name']!r})"))
    else:
        raise AirflowFailException(
            f"secrets must be a mapping name -> value or a list of {{name, value}}, got {type(secrets).__name__}"
        )
    resolved = []
    for name, value, where in items:
        text = _resolve_secret_value(value, where)
        mask_secret(text)
        resolved.append({"name": name, "value": text})
    return resolved


def describe_patch(request: PatchDeploymentRequest) -> str:
    """The values a patch sends, for the log: ``source_revision_config.image_uri='...'``, secrets by name only.

    :param request: the validated patch.
    """
    shown = request.model_dump(mode="json", exclude_none=True)  # secret values are masked here already
    parts = []
    for field, value in shown.items():
        if field == "secrets":
            names = ", ".join(secret["name"] for secret in value) or "none"
            parts.append(f"secrets={len(value)} (names: {names}; values not shown)")
        elif isinstance(value, dict):
            parts.extend(f"{field}.{key}={item!r}" for key, item in value.items())
        else:
            parts.append(f"{field}={value!r}")
    return ", ".join(parts)


def _plain(value: Any) -> Any:
    """A pydantic model given for a nested config becomes the dict it stands for."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def build_patch_request(
    what: str,
    *,
    revision_source: str | None = None,
    source_config: Any = None,
    source_revision_config: Any = None,
    secrets: Any = None,
    secret_references: Any = None,
    image_uri: str | None = None,
    repo_ref: str | None = None,
) -> PatchDeploymentRequest:
    """A validated patch built from a patch task's arguments (secret values resolved and masked); nothing
    is sent. Shared by :class:`PatchDeploymentOperator` and :class:`FleetRolloutOperator`, so both apply
    the same rules.

    :param what: names the patch in error messages (``"patch for deployment <id>"``).
    :param revision_source: see :class:`PatchDeploymentOperator`; so are the other arguments.
    :param source_config: settings that change without a new revision.
    :param source_revision_config: settings that create a new revision.
    :param secrets: secret values (see :func:`resolve_secrets`).
    :param secret_references: Kubernetes secret references.
    :param image_uri: shortcut for ``source_revision_config["image_uri"]``.
    :param repo_ref: shortcut for ``source_revision_config["repo_ref"]``.
    """
    from airflow_provider.decisions.patch_rules import describe_limits_below_requests, limits_below_requests

    revision_config = _plain(source_revision_config)
    if revision_config is not None and not isinstance(revision_config, Mapping):
        raise AirflowFailException(f"source_revision_config must be a mapping, got {type(revision_config).__name__}")
    revision_config = dict(revision_config or {})
    for name, value in revision_config.items():
        check_rendered_value(f"source_revision_config.{name}", value, segments=name in REVISION_VALUE_FIELDS)
    for name, value in (("image_uri", image_uri), ("repo_ref", repo_ref)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise AirflowFailException(
                f"{name} rendered to {value!r}: expected an image URI or git ref; pass None to leave it out"
            )
        check_rendered_value(name, value)
        if revision_config.get(name) not in (None, value):
            raise AirflowFailException(
                f"{name}={value!r} conflicts with source_revision_config.{name}={revision_config[name]!r}; "
                "give one of them"
            )
        revision_config[name] = value
    body = {
        "revision_source": revision_source or None,
        "source_config": _plain(source_config),
        "source_revision_config": revision_config or None,
        "secrets": resolve_secrets(secrets),
        "secret_references": secret_references,
    }
    try:
        request = PatchDeploymentRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except pydantic.ValidationError as err:
        raise validation_failure(what, err) from None
    below = limits_below_requests(request.source_config.resource_spec if request.source_config else None)
    if below:
        raise AirflowFailException(f"invalid {what}: {describe_limits_below_requests(below)}")
    return request


class CompletedPatch(NamedTuple):
    """The patch to send to one deployment, and what completing it did (see :func:`complete_request`).

    :param request: the patch to send.
    :param unchanged_fixed: create-time-only ``source_config`` fields given with the value the deployment has
        (left out).
    :param kept: ``resource_spec`` fields taken from the deployment's current one.
    :param dropped: limits of the current ``resource_spec`` not kept, being below the new request.
    :param carried: fields of the current ``resource_spec`` this provider does not know (the service's), carried
        through untouched.
    :param discouraged: fields production's reference marks "do not use".
    """

    request: PatchDeploymentRequest
    unchanged_fixed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()
    discouraged: tuple[str, ...] = ()


def complete_request(
    request: PatchDeploymentRequest, deployment: Deployment, *, resource_spec_mode: str, check_source_rules: bool
) -> CompletedPatch:
    """The patch to send to ``deployment`` (``airflow_provider.decisions.patch_rules``): production's PATCH rules
    checked against the deployment (unless ``check_source_rules`` is off), create-time fields that would not change left
    out, and with ``resource_spec_mode="merge"`` a partial ``source_config.resource_spec`` completed from the
    deployment's current one (production replaces it whole), a kept limit below its new request left out (the
    service sets it to twice the request). The patch task and each deployment of a fleet complete theirs here.

    :param request: the patch as built from the task's arguments (:func:`build_patch_request`).
    :param deployment: the deployment as read just before.
    :param resource_spec_mode: ``"merge"`` or ``"replace"`` (sent as given).
    :param check_source_rules: whether to refuse locally what production refuses.
    :raises AirflowFailException: naming the deployment, the field and the rule (or its status, for a deployment
        being deleted); nothing is sent.
    """
    from airflow_provider.decisions.patch_rules import (
        MergedSpec,
        describe_refusals,
        discouraged_fields,
        going_away,
        merge_resource_spec,
        refusals,
        unchanged_fixed_fields,
        without_unchanged_fixed_fields,
    )

    deleting = going_away(deployment)  # whatever check_source_rules says
    if deleting is not None:
        raise AirflowFailException(deleting)
    if check_source_rules:
        found = refusals(request, deployment)
        if found:
            raise AirflowFailException(
                f"{describe_refusals(found, deployment)}; pass check_source_rules=False to send it anyway"
            )
    try:
        unchanged = tuple(unchanged_fixed_fields(request, deployment))
        to_send = without_unchanged_fixed_fields(request, deployment)
        merged = merge_resource_spec(to_send, deployment) if resource_spec_mode == "merge" else MergedSpec(to_send)
    except ValueError as err:
        raise AirflowFailException(f"deployment {deployment.name!r} ({deployment.id}): {err}") from None
    return CompletedPatch(
        merged.request,
        unchanged,
        merged.kept,
        merged.dropped,
        merged.carried,
        tuple(discouraged_fields(merged.request)),
    )


def log_completion(completed: CompletedPatch, log: logging.Logger | Any, *, deployment_name: str | None = None) -> None:
    """Log what completing a patch did: create-time fields left out, ``resource_spec`` fields kept, limits
    dropped, the service's fields carried through, fields production marks "do not use".

    :param completed: from :func:`complete_request`.
    :param log: the task's logger.
    :param deployment_name: prefixes each line (a fleet's many deployments); ``None`` for a task of one.
    """

    def say(level: str, text: str, *args: Any) -> None:
        if deployment_name is None:
            getattr(log, level)(text, *args)
        else:
            getattr(log, level)("%s: " + text[0].lower() + text[1:], deployment_name, *args)

    if completed.unchanged_fixed:
        say(
            "info",
            "Not sending source_config.%s: unchanged, and it cannot change after creation",
            ", source_config.".join(completed.unchanged_fixed),
        )
    if completed.kept:
        say(
            "info",
            "Sending the whole source_config.resource_spec (production replaces it): kept %s from the "
            "deployment's current one (resource_spec_mode='replace' sends only what you gave)",
            ", ".join(completed.kept),
        )
    if completed.dropped:
        say(
            "warning",
            "Not keeping %s from the deployment's current resource_spec: a limit below its new request "
            "(production set it to twice the old request); left out, so the service sets it to twice "
            "the new request",
            ", ".join(completed.dropped),
        )
    if completed.carried:
        say(
            "info",
            "Carried through untouched the fields of the deployment's current resource_spec this "
            "provider does not know (the service's): %s",
            ", ".join(completed.carried),
        )
    if completed.discouraged:
        say(
            "warning",
            "%s: production's reference marks these fields 'do not use'; they are sent, but may be ignored",
            ", ".join(completed.discouraged),
        )


def against_current(
    request: PatchDeploymentRequest,
    current: Deployment,
    *,
    check_source_rules: bool,
    resource_spec_mode: str,
    log: logging.Logger | Any,
) -> PatchDeploymentRequest:
    """The patch to send to ``current`` (:func:`complete_request`), what completing it did logged
    (:func:`log_completion`). :class:`AirflowFailException` naming the deployment, the field and the rule when it
    cannot be sent; nothing is sent.

    :param request: the patch as built from the task's arguments (:func:`build_patch_request`).
    :param current: the deployment as just read.
    :param check_source_rules: whether to refuse locally what production refuses.
    :param resource_spec_mode: ``"merge"`` or ``"replace"`` (sent as given).
    :param log: the task's logger.
    """
    completed = complete_request(
        request, current, resource_spec_mode=resource_spec_mode, check_source_rules=check_source_rules
    )
    log_completion(completed, log)
    return completed.request
