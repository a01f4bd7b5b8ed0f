"""What a rollback is given to restore, checked before any request: the revision's non-secret fields as a
caller knows them (:func:`checked_fallback_config`) and the whole ``resource_spec`` that served with it
(:func:`checked_resource_spec`); and what a patch reads of the revision serving before it changes anything
(:func:`revision_config_snapshot`), for its rollback.

The rollback's entry points are in :mod:`airflow_provider.tasks.rollback`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client import REVISION_CONFIG_FIELDS
from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.decisions.spec_changes import likely_typos, resource_spec_json
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import CarriedResourceSpec, Deployment, SourceRevisionConfig
from airflow_provider.tasks.base import MISSING_RENDERS
from airflow_provider.tasks.rollback.revisions import read_revision, revision_fields

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = ["checked_fallback_config", "checked_resource_spec", "revision_config_snapshot"]


def checked_fallback_config(config: Any, field_name: str = "source_revision_config") -> dict[str, str] | None:
    """A fallback config as the non-secret revision fields it sets; :class:`AirflowFailException` naming the
    bad field (before any request).

    :param config: ``None``, a mapping or a model of ``source_revision_config`` fields.
    :param field_name: the argument's name, for messages.
    """
    if config is None or config in ("", {}):
        return None
    if isinstance(config, pydantic.BaseModel):
        config = config.model_dump(mode="json", exclude_none=True)
    if not isinstance(config, Mapping):
        raise AirflowFailException(f"{field_name} must be a mapping, got {type(config).__name__}")
    unknown = sorted(set(config) - set(REVISION_CONFIG_FIELDS))
    if unknown:
        expected = ", ".join(REVISION_CONFIG_FIELDS)
        listed = ", ".join(unknown)
        raise AirflowFailException(f"{field_name} has unknown field(s) {listed}; expected some of {expected}")
    try:
        parsed = SourceRevisionConfig.model_validate(dict(config))
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"invalid {field_name}: {describe_validation_error(err)}") from None
    fields = revision_fields(parsed)
    if not {name: value for name, value in fields.items() if name != "repo_commit_sha"}:
        raise AirflowFailException(
            f"{field_name} sets no revision field: give at least one of repo_ref, graph_config_path, image_uri, "
            "source_tarball_path"
        )
    return fields


def revision_config_snapshot(
    hook: DeploymentServiceHook, deployment: Deployment, log: logging.Logger | Any
) -> dict[str, str]:
    """The non-secret revision fields of the revision ``deployment`` serves: what a rollback restores.

    Read from the revision endpoint for the active revision when the service has it (one GET), else from
    what the deployment shows (its latest revision's config: the active one's unless a rollout is in
    progress, which is then logged). ``{}`` when the deployment serves no revision.

    :param hook: the hook to ask.
    :param deployment: the deployment as read before a patch.
    :param log: where to say which source was used.
    """
    active = deployment.active_revision_id
    if active is None:
        return {}
    try:
        revision = read_revision(hook, deployment.id, active, log)
    except DeploymentServiceError as err:
        log.info("Could not read revision %s (%s); taking its config from the deployment", active, err)
        revision = None
    if revision is not None and revision.source_revision_config is not None:
        return revision_fields(revision.source_revision_config)
    if deployment.is_rolling_out:
        log.warning(
            "The deployment shows the config of revision %s, which is still rolling out, not of the active "
            "revision %s: previous_source_revision_config may not be what serves now",
            deployment.latest_revision_id,
            active,
        )
    return revision_fields(deployment.source_revision_config)


def checked_resource_spec(
    spec: Any, field_name: str = "resource_spec", *, refuse_typos: bool = False
) -> dict[str, Any] | None:
    """The whole ``resource_spec`` to restore, checked as a request would carry it; ``None`` when not given.
    :class:`AirflowFailException` naming the field (before any request) when it cannot be sent. Fields this
    provider does not know are the service's (the spec is what the deployment showed): kept, at any depth.

    :param spec: ``None`` (unknown), a mapping or a model; ``{}`` means the deployment had none.
    :param field_name: the argument's name, for messages.
    :param refuse_typos: refuse a field this provider does not know that is a near-spelling of one it knows
        (``cpus``): a task argument a user may have typed (a spec a task recorded itself is never refused).
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec.strip() in MISSING_RENDERS:
            raise AirflowFailException(
                f"{field_name} rendered to {spec!r}: expected the whole resource_spec that served before (a mapping, "
                "{} when there was none). Is the upstream XCom (the patch task's previous_resource_spec) missing? "
                "Leave it out (None) when it is unknown"
            )
        raise AirflowFailException(
            f"{field_name} must be a mapping, got a string (pass XComArg(task, key='previous_resource_spec'), or "
            "render templates as native objects)"
        )
    if isinstance(spec, pydantic.BaseModel):
        spec = spec.model_dump(mode="json", exclude_none=True)
    if not isinstance(spec, Mapping):
        raise AirflowFailException(f"{field_name} must be a mapping, got {type(spec).__name__}")
    try:
        parsed = CarriedResourceSpec.model_validate(dict(spec))
    except pydantic.ValidationError as err:
        problems = describe_validation_error(err)
        raise AirflowFailException(f"invalid {field_name}: {problems}") from None
    checked = resource_spec_json(parsed)
    typos = likely_typos(checked) if refuse_typos else []
    if typos:
        listed = ", ".join(f"{field} (did you mean {known}?)" for field, known in typos)
        raise AirflowFailException(
            f"{field_name} has field(s) {listed}: a field this provider does not know, spelled like one it knows. "
            "Fields the service added (the ones the deployment shows) are restored as they are; fix the spelling"
        )
    return checked
