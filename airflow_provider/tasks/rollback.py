"""Rolling a deployment back to an earlier revision: the decision and the request, not the wait.

One non-blocking step, :func:`start_rollback`, shared by :class:`RollbackDeploymentOperator`, the patch
operator's automatic rollback and fleet rollouts (one call per deployment). It checks everything it can
before sending anything, sends at most one request, and returns :class:`RollbackStarted`: which path was
used, the revision to wait for, the deployment after the request and what the rollback did not restore
(``RollbackStarted.not_restored``). The caller waits (a task with ``_wait``, a fleet through its
trigger).

What a rollback restores:

- **the build**: the revision's build (``redeploy``, exact, commit included), or its non-secret
  ``source_revision_config`` patched back (an image or a tag is exact; a branch ``repo_ref`` rebuilds the
  branch's current head, named in ``not_restored``);
- **the resource_spec**, when the caller gives the one that served with the revision (``resource_spec=``,
  recorded before the change), and only what the change being rolled back changed in it
  (``resource_spec_fields=``; unknown: every field the deployment no longer shows as it was, those the service
  added aside; see :mod:`airflow_provider.spec_changes`). Production replaces ``resource_spec`` whole and makes
  a revision for it, so when a changed field differs, the rollback patches the config and the whole
  ``resource_spec`` as the deployment shows it now, the changed fields set back, back in **one** PATCH (one
  revision; a redeploy is not known to restore it). Fields this provider does not know (the service's, at any
  depth) go back untouched: never a reason to refuse. A change that left ``resource_spec`` alone sends none.
  When it is not given, the rollback leaves ``resource_spec`` alone and says so in ``not_restored`` unless the
  deployment shows none (``external_docker`` only has one);
- **never the secrets**: their values are not kept. A caller that knows which secrets its change set adds
  its own clause.

Which path:

1. **redeploy** (``POST .../revisions/{revision_id}/redeploy``) where the service has it and no
   ``resource_spec`` needs restoring: the same build, commit included (exact). Never sent twice (see
   ``DeploymentServiceClient.redeploy_revision``). Production does not document whether a redeploy makes a
   revision: when ``latest_revision_id`` did not move, the revision redeployed is the one to wait for
   (active again), with the newer latest allowed to stay (``RollbackStarted.allowed_latest_revision_id``),
   never the latest itself (it serves the bad build).
2. **patch** where the redeploy endpoint answers 404/405, a ``resource_spec`` is to be restored, or secrets
   are given (a redeploy carries no body): ``PATCH`` the revision's non-secret ``source_revision_config``
   back (and ``source_config.resource_spec``), the config read from the revision endpoint, else from the
   caller's ``fallback_config``. Never applied twice (see ``DeploymentServiceClient.patch_deployment``).
3. **none**: the revision asked for already serves and nothing newer exists, or the newer revision's build
   failed (it never went live), or it serves again although a newer revision went live (redeployed without a
   new revision), or it is being deployed again right now; and no ``resource_spec`` needs restoring.

A rollback refuses, naming both revisions, when ``latest_revision_id`` moved past the revision being rolled
back (someone else rolled out meanwhile), unless ``force``.

Retries (never a second rollback, never a claim that did not happen):

- With a ``task_state_store``, the caller records the rollback **before** sending it
  (``before_sending``, a :class:`RollbackIntent`) and again once sent (:meth:`RollbackStarted.record`).
  :func:`reattach_recorded_rollback` then decides a retry: a sent record is waited for; for an intent, the
  deployment's ``latest_revision_id`` still being the one recorded means the request did not land (it is
  sent now) unless the revision is active or being deployed again (a redeploy without a new revision); a
  latest that moved means the first revision after the recorded one is the rollback when it has the
  restored config, else the task fails saying what it saw.
- Without a record (Airflow < 3.3, or a record that could not be written), :func:`find_earlier_rollback`
  reattaches only on positive evidence; see its rule. Where the deployment cannot tell, it fails loudly,
  saying what it saw and what to check, rather than roll back a second time or claim a rollback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.client import REVISION_CONFIG_FIELDS, same_revision_config
from airflow_provider.error_text import describe_validation_error
from airflow_provider.errors import ConflictError, DeploymentServiceError, RequestRejectedError
from airflow_provider.models import (
    CarriedResourceSpec,
    Deployment,
    DeploymentSource,
    PatchDeploymentRequest,
    ResourceSpec,
    Revision,
    RevisionSource,
    RevisionStatus,
    SourceRevisionConfig,
    canonical_uuid,
)
from airflow_provider.rollout import REVISION_ENDPOINT_MISSING
from airflow_provider.spec_changes import (
    fields_not_shown,
    likely_typos,
    resource_spec_json,
    restored_spec,
    spec_shows,
    unknown_fields_of,
)
from airflow_provider.tasks.base import MISSING_RENDERS

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

__all__ = [
    "RESOURCE_SPEC_NOT_SENT",
    "RESOURCE_SPEC_NOT_SHOWN",
    "RESOURCE_SPEC_UNKNOWN",
    "RESOURCE_SPEC_VERDICTS",
    "RollbackIntent",
    "RollbackPath",
    "RollbackStarted",
    "checked_resource_spec",
    "find_earlier_rollback",
    "is_branch_ref",
    "reattach_recorded_rollback",
    "recorded_fields",
    "revision_config_snapshot",
    "start_rollback",
]

RollbackPath = Literal["redeploy", "patch", "none"]
NOT_BUILT = frozenset({RevisionStatus.BUILD_FAILED, RevisionStatus.CREATE_FAILED})
"""Statuses of revisions that have no build to return to."""
RESOURCE_SPEC_UNKNOWN = "resource_spec (unknown: not recorded before the patch; the deployment keeps its current one)"
"""The ``not_restored`` clause of a rollback given no ``resource_spec`` on a deployment that has one."""
RESOURCE_SPEC_NOT_SHOWN = (
    "resource_spec (sent whole, but the deployment shows another one: the service did not replace it)"
)
"""The ``not_restored`` clause when the deployment does not show the ``resource_spec`` the rollback sent."""
RESOURCE_SPEC_NOT_SENT = (
    "resource_spec (the deployment shows another one than the one to restore, and the rollback did not send it: "
    "the revision's source_revision_config is unknown here, so it could not be patched back with it (give "
    "source_revision_config=), or the resource_spec changed while the rollback went live)"
)
"""The ``not_restored`` clause when a rollback that sent no ``resource_spec`` ends without the one to restore."""
RESOURCE_SPEC_VERDICTS = frozenset({RESOURCE_SPEC_NOT_SHOWN, RESOURCE_SPEC_NOT_SENT})
"""The clauses that say the deployment does not show a ``resource_spec`` the caller gave (a failure)."""
_COMMIT_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
_REVISION_NOT_FOUND = re.compile(r"\brevision\b.*\bnot found\b", re.IGNORECASE)
_LISTED_REVISIONS = 100
"""How many of the newest revisions a retry reads to find a revision's neighbours (one page)."""


@dataclass(frozen=True)
class RollbackStarted:
    """What :func:`start_rollback` did (or what a retry found an earlier try did).

    :param path: ``redeploy`` (the same build again), ``patch`` (the old config patched back) or ``none``
        (the revision already serves and nothing newer will replace it; nothing sent).
    :param to_revision_id: the revision asked to return to.
    :param revision_id: the revision to wait for: the one the rollback created, or ``to_revision_id`` (path
        ``none``, or a redeploy that made no revision).
    :param rolled_back_from: the revision rolled back (the deployment's latest before the rollback).
    :param deployment: the deployment after the request (redacted when dumped).
    :param restored_config: the non-secret revision fields restored (``{}`` when unknown: a redeploy
        without the revision endpoint).
    :param exact: whether the very build returns (redeploy, or an image / tag / commit); ``False`` when a
        branch is rebuilt from its current head.
    :param not_restored: short clauses, each naming a part of the change the rollback did not undo (never a
        secret value), e.g. :data:`RESOURCE_SPEC_UNKNOWN`.
    :param resource_spec: the whole ``resource_spec`` that served with ``to_revision_id``, whose
        ``resource_spec_fields`` the rollback restores (sent, or already shown); ``None`` when it was not given
        (left alone).
    :param allowed_latest_revision_id: a newer revision allowed to stay the deployment's latest while
        ``revision_id`` goes live (a redeploy that made no revision); ``None``: ``revision_id`` is the latest.
    :param previous_latest_revision_id: the deployment's latest revision when the rollback was sent.
    :param resource_spec_fields: the fields of ``resource_spec`` the rollback restores (what the change rolled
        back changed; ``()``: none); ``None``: unknown, every field (see
        :func:`~airflow_provider.spec_changes.fields_not_shown`).
    """

    path: RollbackPath
    to_revision_id: str
    revision_id: str
    rolled_back_from: str | None
    deployment: Deployment
    restored_config: dict[str, str] = field(default_factory=dict)
    exact: bool = True
    not_restored: tuple[str, ...] = ()
    resource_spec: dict[str, Any] | None = None
    allowed_latest_revision_id: str | None = None
    previous_latest_revision_id: str | None = None
    resource_spec_fields: tuple[str, ...] | None = None

    def summary(self) -> str:
        """One line for logs and messages (never a secret)."""
        how = {
            "redeploy": "redeployed its build",
            "patch": "patched its source_revision_config back",
            "none": "it already serves",
        }[self.path]
        if self.path == "patch" and self.resource_spec is not None and self.resource_spec_fields != ():
            how += " with its resource_spec"
        return (
            f"rollback of deployment {self.deployment.name!r} ({self.deployment.id}) from revision "
            f"{self.rolled_back_from} to revision {self.to_revision_id}: {how}; waiting for revision "
            f"{self.revision_id}{self.except_clause()}"
        )

    def except_clause(self) -> str:
        """``" except: <clauses>"`` naming what was not restored, or ``""`` when everything was."""
        return f" except: {'; '.join(self.not_restored)}" if self.not_restored else ""

    def judged_on(self, shown: Deployment) -> RollbackStarted:
        """This rollback as ``shown`` (the deployment after the request, or once live) shows it: when it does
        not show the ``resource_spec`` to restore, ``not_restored`` says so (judged again each time).

        :param shown: the deployment as just read.
        """
        kept = tuple(clause for clause in self.not_restored if clause not in RESOURCE_SPEC_VERDICTS)
        shown_spec = shown.source_config.resource_spec
        if self.resource_spec is not None and not spec_shows(shown_spec, self.resource_spec, self.resource_spec_fields):
            kept += (RESOURCE_SPEC_NOT_SHOWN if self.path == "patch" else RESOURCE_SPEC_NOT_SENT,)
        return self if kept == self.not_restored else replace(self, not_restored=kept)

    def record(self) -> dict[str, Any]:
        """Plain JSON for a task record (``task_state_store``, a trigger's ``carry``); no secret, no deployment."""
        return {
            "phase": "sent",
            "deployment_id": self.deployment.id,
            "to_revision_id": self.to_revision_id,
            "revision_id": self.revision_id,
            "rolled_back_from": self.rolled_back_from,
            "path": self.path,
            "restored_config": dict(self.restored_config),
            "exact": self.exact,
            "not_restored": list(self.not_restored),
            "resource_spec": self.resource_spec,
            "allowed_latest_revision_id": self.allowed_latest_revision_id,
            "previous_latest_revision_id": self.previous_latest_revision_id,
            "resource_spec_fields": _listed(self.resource_spec_fields),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], deployment: Deployment) -> RollbackStarted:
        """The rollback a :meth:`record` describes (records of earlier provider versions included).

        :param record: the record.
        :param deployment: the deployment as now read.
        """
        path = record.get("path")
        spec = record.get("resource_spec")
        return cls(
            path if path in ("redeploy", "patch", "none") else "none",
            str(record["to_revision_id"]),
            str(record["revision_id"]),
            _text(record.get("rolled_back_from")),
            deployment,
            dict(record.get("restored_config") or {}),
            exact=bool(record.get("exact", True)),
            not_restored=tuple(str(item) for item in record.get("not_restored") or ()),
            resource_spec=dict(spec) if isinstance(spec, Mapping) else None,
            allowed_latest_revision_id=_text(record.get("allowed_latest_revision_id")),
            previous_latest_revision_id=_text(record.get("previous_latest_revision_id")),
            resource_spec_fields=recorded_fields(record.get("resource_spec_fields")),
        )


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _listed(fields: tuple[str, ...] | None) -> list[str] | None:
    return list(fields) if fields is not None else None


def recorded_fields(value: Any) -> tuple[str, ...] | None:
    """``resource_spec`` field names as a record holds them (a list), or ``None`` (unknown: records of earlier
    provider versions included).

    :param value: the recorded value.
    """
    return tuple(str(item) for item in value) if isinstance(value, (list, tuple)) else None


@dataclass(frozen=True)
class RollbackIntent:
    """A rollback about to be sent: what a caller records (``task_state_store``) before the request, so a
    retry can tell whether it landed (see :func:`reattach_recorded_rollback`).

    :param deployment_id: the deployment.
    :param to_revision_id: the revision to return to.
    :param rolled_back_from: the revision rolled back.
    :param previous_latest_revision_id: the deployment's latest revision just before the request.
    :param previous_active_revision_id: its active revision just before the request.
    :param path: ``redeploy`` or ``patch``.
    :param expected_config: the non-secret revision fields the rollback's revision will show (``{}``:
        unknown).
    :param resource_spec: the whole ``resource_spec`` that served with ``to_revision_id`` (``None``: not
        given, left alone); its ``resource_spec_fields`` are sent with the request when the deployment's differ.
    :param exact: whether the very build returns (``False``: a branch rebuilt from its head).
    :param not_restored: what the rollback will not restore (see ``RollbackStarted.not_restored``).
    :param resource_spec_fields: the fields of ``resource_spec`` the rollback restores (``None``: every field).
    """

    deployment_id: str
    to_revision_id: str
    rolled_back_from: str | None
    previous_latest_revision_id: str | None
    previous_active_revision_id: str | None
    path: RollbackPath
    expected_config: dict[str, str]
    resource_spec: dict[str, Any] | None
    exact: bool
    not_restored: tuple[str, ...] = ()
    resource_spec_fields: tuple[str, ...] | None = None

    def record(self) -> dict[str, Any]:
        """Plain JSON for a task record (no secret)."""
        return {
            "phase": "sending",
            "deployment_id": self.deployment_id,
            "to_revision_id": self.to_revision_id,
            "rolled_back_from": self.rolled_back_from,
            "previous_latest_revision_id": self.previous_latest_revision_id,
            "previous_active_revision_id": self.previous_active_revision_id,
            "path": self.path,
            "restored_config": dict(self.expected_config),
            "resource_spec": self.resource_spec,
            "exact": self.exact,
            "not_restored": list(self.not_restored),
            "resource_spec_fields": _listed(self.resource_spec_fields),
        }


def is_branch_ref(repo_ref: str | None) -> bool:
    """Whether ``repo_ref`` names a branch (its head moves), not a tag or a commit.

    :param repo_ref: a ``repo_ref`` value.
    """
    if not repo_ref:
        return False
    return not (repo_ref.startswith("refs/tags/") or _COMMIT_SHA.fullmatch(repo_ref))


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
    fields = _fields(parsed)
    if not {name: value for name, value in fields.items() if name != "repo_commit_sha"}:
        raise AirflowFailException(
            f"{field_name} sets no revision field: give at least one of repo_ref, graph_config_path, image_uri, "
            "source_tarball_path"
        )
    return fields


def _fields(config: SourceRevisionConfig | None) -> dict[str, str]:
    if config is None:
        return {}
    return {name: str(getattr(config, name)) for name in REVISION_CONFIG_FIELDS if getattr(config, name) is not None}


def _read_revision(
    hook: DeploymentServiceHook, deployment_id: str, revision_id: str, log: logging.Logger | Any
) -> Revision | None:
    """The revision from the optional revision endpoint; ``None`` when the server does not have it."""
    try:
        return hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code in REVISION_ENDPOINT_MISSING:
            log.info("The revision endpoint does not know revision %s (%s)", revision_id, err)
            return None
        raise


def _read_target_revision(
    hook: DeploymentServiceHook, deployment: Deployment, revision_id: str, name: str, log: logging.Logger | Any
) -> Revision | None:
    """The revision to return to from the optional revision endpoint; ``None`` when the server does not have
    the endpoint; :class:`AirflowFailException` when it has it but not this revision (before anything is sent).

    A 404 alone cannot tell a missing endpoint from a revision the deployment never had (a typo, or another
    deployment's revision): the deployment's latest revision is asked for too, and an answer means the
    endpoint exists.
    """
    try:
        return hook.get_revision(deployment.id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code not in REVISION_ENDPOINT_MISSING:
            raise
        missing = err
    latest = deployment.latest_revision_id
    if missing.status_code == 404 and latest is not None and latest != revision_id:
        try:
            hook.get_revision(deployment.id, latest)
        except DeploymentServiceError as err:
            if err.status_code not in REVISION_ENDPOINT_MISSING:
                raise
        else:
            raise AirflowFailException(
                f"revision {revision_id} is not a revision of {name}: the revision endpoint knows the "
                f"deployment's latest revision {latest} but not this one; check revision_id"
            )
    log.info("The revision endpoint does not know revision %s (%s)", revision_id, missing)
    return None


def _says_revision_not_found(err: DeploymentServiceError) -> bool:
    """Whether a 404 names a missing revision (``Revision ID ... not found.``), not a missing route."""
    return err.status_code == 404 and isinstance(err.detail, str) and bool(_REVISION_NOT_FOUND.search(err.detail))


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
        revision = _read_revision(hook, deployment.id, active, log)
    except DeploymentServiceError as err:
        log.info("Could not read revision %s (%s); taking its config from the deployment", active, err)
        revision = None
    if revision is not None and revision.source_revision_config is not None:
        return _fields(revision.source_revision_config)
    if deployment.is_rolling_out:
        log.warning(
            "The deployment shows the config of revision %s, which is still rolling out, not of the active "
            "revision %s: previous_source_revision_config may not be what serves now",
            deployment.latest_revision_id,
            active,
        )
    return _fields(deployment.source_revision_config)


def _revision_if_shown(hook: DeploymentServiceHook, deployment_id: str, revision_id: str) -> Revision | None:
    """The revision from the optional revision endpoint; ``None`` when it cannot say (transient errors
    propagate: guessing would risk a second rollback)."""
    try:
        return hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.transient:
            raise
        return None


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


def _warn_unshown_unknown_fields(spec: Mapping[str, Any], current: Mapping[str, Any], name: str, log: Any) -> None:
    """Say so when the spec to restore has fields this provider does not know that the deployment does not show
    now: they are restored as given (the service's, when the spec was recorded), never refused; a typo among
    them would not be shown by the service, and the verdict would say so."""
    unshown = [field for field in unknown_fields_of(spec) if field not in current]
    if unshown:
        log.warning(
            "%s: the resource_spec to restore has field(s) %s that this provider does not know and the deployment "
            "does not show now: restoring them as given (the service's own when it was recorded; if one is a typo, "
            "the deployment will not show it and the rollback says so)",
            name,
            ", ".join(unshown),
        )


def _spec_applies(deployment: Deployment) -> bool:
    """Whether the deployment may have a ``resource_spec`` a change could have set (``external_docker`` only)
    and shows one."""
    source = getattr(deployment.source, "value", deployment.source)
    return source == DeploymentSource.EXTERNAL_DOCKER.value and bool(
        resource_spec_json(deployment.source_config.resource_spec)
    )


def _build_clause(config: Mapping[str, str], exact: bool) -> tuple[str, ...]:
    """The ``not_restored`` clause of a branch rebuilt from its head (``()`` for an exact rollback)."""
    if exact:
        return ()
    commit = config.get("repo_commit_sha")
    was = f"commit {commit}" if commit else "the commit it ran"
    return (
        f"build (repo_ref {config.get('repo_ref')!r} is a branch: the service rebuilt its current head, not {was})",
    )


def _same_build(shown: SourceRevisionConfig | None, expected: Mapping[str, str], *, exact: bool) -> bool:
    """Whether ``shown`` is the config a rollback to ``expected`` makes (the commit ignored when a branch was
    rebuilt: its head has a new one)."""
    if shown is None or not expected:
        return False
    wanted = dict(expected) if exact else {key: value for key, value in expected.items() if key != "repo_commit_sha"}
    return same_revision_config(shown, SourceRevisionConfig.model_validate(wanted))


def _neighbours(
    hook: DeploymentServiceHook, deployment_id: str, revision_id: str
) -> tuple[Revision | None, Revision | None] | None:
    """``(the revision made just after revision_id, the one just before)`` from the revision list (newest
    first); ``None`` when the service has no list endpoint or does not list the revision among its newest
    (transient errors propagate: guessing would risk a second rollback)."""
    try:
        revisions = list(hook.iter_revisions(deployment_id, max_results=_LISTED_REVISIONS))
    except DeploymentServiceError as err:
        if err.transient:
            raise
        return None
    for index, revision in enumerate(revisions):
        if revision.id == revision_id:
            newer = revisions[index - 1] if index > 0 else None
            older = revisions[index + 1] if index + 1 < len(revisions) else None
            return newer, older
    return None


def _changed_since(revision: Revision | None, deployment: Deployment) -> bool:
    """Whether ``revision`` changed after ``deployment`` was read (then the deployment is stale: read it again)."""
    return revision is not None and revision.updated_at is not None and revision.updated_at > deployment.updated_at


def _in_progress(revision: Revision | None) -> bool:
    return revision is not None and not revision.status.is_terminal and revision.status is not RevisionStatus.UNKNOWN


def _cannot_tell(name: str, latest: str, to_revision_id: str, seen: str, why: str) -> AirflowFailException:
    """The failure of a retry that cannot tell an earlier try's rollback from the change being rolled back."""
    return AirflowFailException(
        f"{name}: cannot tell whether revision {latest} is the rollback to revision {to_revision_id} that an earlier "
        f"try sent (no task_state_store record): {seen}; {why}. Not rolling back again (that could make a second "
        f"rollback revision) and not claiming a rollback. Check revision {latest}: if it is this task's rollback, it "
        f"serves revision {to_revision_id}'s build once live (then mark this task success); if it is the change to "
        f"roll back, give rolling_back_from={latest!r} (the patch task's revision_id XCom) and resource_spec= (its "
        "previous_resource_spec XCom), then clear this task"
    )


def find_earlier_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    to_revision_id: str,
    *,
    since: datetime | None,
    rolling_back_from: str | None = None,
    fallback_config: Mapping[str, str] | None = None,
    resource_spec: Mapping[str, Any] | None = None,
    resource_spec_fields: Collection[str] | None = None,
    secrets_given: bool = False,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback to ``to_revision_id`` an earlier try sent, recognised on the deployment when it left no
    record; ``None`` when the deployment shows that no earlier rollback made a revision (then roll back);
    :class:`AirflowFailException` when it cannot tell.

    The deployment's latest revision ``L`` is taken for an earlier try's rollback only on positive evidence,
    all of:

    1. ``L`` is neither ``to_revision_id`` nor ``rolling_back_from`` (never the revision being rolled back);
    2. ``L`` has ``to_revision_id``'s ``source_revision_config`` (read from the revision endpoint, else
       ``fallback_config``; the commit compared unless the ref is a branch, whose rebuild has a new one);
    3. ``L`` was made since the DAG run started (its ``created_at``, else the deployment's ``updated_at``; when
       the start is known) and after ``to_revision_id`` (when the revision endpoint shows both);
    4. ``L`` was made after the revision rolled back: with ``rolling_back_from``, ``L`` is newer than it (it is
       the latest and not it); without it, the revision list (``GET .../revisions``) shows the revision made
       just before ``L``, which must not be ``to_revision_id`` (``L`` would be the change itself) and must have
       another build than ``to_revision_id`` (``L`` undoes it), unless the deployment shows ``resource_spec``
       (a change of ``resource_spec`` or secrets only, which a revision does not show);
    5. with ``resource_spec``: the deployment shows it (its ``resource_spec_fields``: the earlier try's rollback
       restored them).

    No earlier rollback (``None``): no latest revision, ``L`` is ``to_revision_id`` or ``rolling_back_from``,
    another config, made before the run or before ``to_revision_id``, or made right after
    ``to_revision_id``. Anything else cannot be told apart: the message names ``L``, what was seen and what
    to check.

    :param hook: the hook to ask (the optional revision and revision-list endpoints).
    :param deployment: the deployment as just read.
    :param to_revision_id: the canonical revision to return to.
    :param since: when the DAG run started (a revision made before it is not this task's); ``None``: unknown.
    :param rolling_back_from: the revision the task rolls back, when given.
    :param fallback_config: the revision's non-secret fields as the user gave them.
    :param resource_spec: the whole resource_spec the rollback restores (checked), when given.
    :param resource_spec_fields: the fields of ``resource_spec`` it restores (``None``: every field).
    :param secrets_given: whether the task sends secrets (an earlier try then took the patch path).
    :param log: where to say what was recognised.
    """
    latest = deployment.latest_revision_id
    if latest is None or latest == to_revision_id:
        return None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    if latest == rolling_back_from:
        log.info(
            "%s: the latest revision is still %s, the one being rolled back: no earlier rollback made one", name, latest
        )
        return None
    target = _revision_if_shown(hook, deployment.id, to_revision_id)
    newest = _revision_if_shown(hook, deployment.id, latest)
    expected = _fields(target.source_revision_config) if target is not None else {}
    if not expected and fallback_config:
        expected = dict(fallback_config)
    made = newest.created_at if newest is not None and newest.created_at else deployment.updated_at
    if since is not None and made < since:
        return None
    exact = not is_branch_ref(expected.get("repo_ref")) or bool(expected.get("image_uri"))
    when = "made" if newest is not None and newest.created_at else "the deployment last changed"
    since_run = " (after this DAG run started)" if since is not None else ""
    seen = f"revision {latest}, the latest ({when} {made.isoformat()}{since_run})"
    if not expected:
        raise _cannot_tell(
            name,
            latest,
            to_revision_id,
            seen,
            f"revision {to_revision_id}'s source_revision_config is unknown (no revision endpoint; give "
            f"source_revision_config=), so whether revision {latest} copies it cannot be told",
        )
    shown = newest.source_revision_config if newest is not None and newest.source_revision_config else None
    if not _same_build(shown or deployment.source_revision_config, expected, exact=exact):
        return None
    target_made = target.created_at if target is not None else None
    if target_made is not None and newest is not None and newest.created_at and newest.created_at <= target_made:
        return None  # not newer than the revision returned to
    seen += f" has revision {to_revision_id}'s source_revision_config"
    fields = tuple(resource_spec_fields) if resource_spec_fields is not None else None
    shown_spec = deployment.source_config.resource_spec
    spec_matches = resource_spec is not None and spec_shows(shown_spec, resource_spec, fields)
    if rolling_back_from is not None:
        evidence = f"it is newer than revision {rolling_back_from}, the revision rolled back"
    else:
        around = _neighbours(hook, deployment.id, latest)
        before = around[1] if around is not None else None
        if before is None:
            why = (
                "the service does not list the deployment's revisions (GET .../revisions)"
                if around is None
                else "no revision is listed before it"
            )
            raise _cannot_tell(
                name,
                latest,
                to_revision_id,
                seen,
                f"{why}, so whether it is the change being rolled back cannot be told",
            )
        if before.id == to_revision_id:
            log.info(
                "%s: revision %s was made right after revision %s: it is the change to roll back",
                name,
                latest,
                before.id,
            )
            return None
        if not _same_build(before.source_revision_config, expected, exact=exact):
            evidence = f"it undoes the change of build of revision {before.id}, made just before it"
        elif spec_matches:
            evidence = (
                f"revision {before.id}, made just before it, has the same build (a resource_spec or secrets change) "
                "and the deployment shows resource_spec= again"
            )
        else:
            spec = "" if resource_spec is None else " and the deployment does not show resource_spec="
            raise _cannot_tell(
                name,
                latest,
                to_revision_id,
                seen,
                f"revision {before.id}, made just before it, has the same build too: a change of resource_spec or "
                f"secrets only, which a revision does not show{spec}",
            )
    if resource_spec is not None and not spec_matches:
        raise _cannot_tell(
            name,
            latest,
            to_revision_id,
            f"{seen}, and {evidence}",
            "but the deployment does not show resource_spec= (a rollback by this task would have restored it)",
        )
    restores_spec = resource_spec is not None and fields != ()
    path: RollbackPath = "patch" if secrets_given or restores_spec else "redeploy"
    log.warning(
        "%s: %s, and %s: it is the rollback to revision %s an earlier try sent (no task_state_store record). "
        "Reattaching to it instead of rolling back again",
        name,
        seen,
        evidence,
        to_revision_id,
    )
    not_restored = _build_clause(expected, exact or path == "redeploy")
    if resource_spec is None and _spec_applies(deployment):
        not_restored += (RESOURCE_SPEC_UNKNOWN,)
    return RollbackStarted(
        path,
        to_revision_id,
        latest,
        rolling_back_from,
        deployment,
        expected,
        exact=exact or path == "redeploy",
        not_restored=not_restored,
        resource_spec=dict(resource_spec) if resource_spec is not None else None,
        resource_spec_fields=fields,
    )


def reattach_recorded_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    record: Mapping[str, Any],
    *,
    log: logging.Logger | Any,
) -> RollbackStarted | None:
    """The rollback an earlier try recorded (:meth:`RollbackStarted.record` or :meth:`RollbackIntent.record`),
    as the deployment shows it now; ``None`` when it was recorded as about to be sent but did not land (send it
    now); :class:`AirflowFailException` when whether it landed cannot be told.

    An intent landed when the deployment's latest revision moved on from the one recorded and the first
    revision made after it (revision list, else the latest) has the restored config; or, with the latest
    unchanged, when the revision returned to is active again or being deployed again (a redeploy that made no
    revision).

    :param hook: the hook to ask (the optional revision and revision-list endpoints).
    :param deployment: the deployment as just read.
    :param record: the record (matching the deployment and the revision returned to).
    :param log: where to say what was decided.
    """
    if record.get("phase", "sent") != "sending":
        return RollbackStarted.from_record(record, deployment) if record.get("revision_id") else None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    target = str(record["to_revision_id"])
    previous = _text(record.get("previous_latest_revision_id"))
    config = {str(key): str(value) for key, value in dict(record.get("restored_config") or {}).items()}
    exact = bool(record.get("exact", True))
    path: RollbackPath = "patch" if record.get("path") == "patch" else "redeploy"
    spec = record.get("resource_spec")

    def found(revision_id: str, allowed_latest: str | None = None) -> RollbackStarted:
        return RollbackStarted(
            path,
            target,
            revision_id,
            _text(record.get("rolled_back_from")),
            deployment,
            config,
            exact=exact,
            not_restored=tuple(str(item) for item in record.get("not_restored") or ()),
            resource_spec=dict(spec) if isinstance(spec, Mapping) else None,
            allowed_latest_revision_id=allowed_latest,
            previous_latest_revision_id=previous,
            resource_spec_fields=recorded_fields(record.get("resource_spec_fields")),
        ).judged_on(deployment)

    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    if latest == previous:
        if latest != target and active == target:
            log.warning(
                "%s: revision %s serves again (latest still %s): the recorded rollback landed without a new revision",
                name,
                target,
                latest,
            )
            return found(target, latest)
        revision = _revision_if_shown(hook, deployment.id, target) if latest != target and path == "redeploy" else None
        if _in_progress(revision):
            log.warning(
                "%s: revision %s is being deployed again (latest still %s): the recorded redeploy is under way",
                name,
                target,
                latest,
            )
            return found(target, latest)
        if _changed_since(revision, deployment):  # deployed again since the deployment was read?
            fresh = hook.get_deployment(deployment.id)
            if fresh.latest_revision_id == latest and fresh.active_revision_id == target:
                log.warning(
                    "%s: revision %s serves again: the recorded redeploy landed without a new revision", name, target
                )
                return replace(found(target, latest), deployment=fresh)
        log.info(
            "%s: the rollback an earlier try was about to send did not land (the latest revision is still %s): "
            "sending it now",
            name,
            latest,
        )
        return None
    around = _neighbours(hook, deployment.id, previous) if previous else None
    after = around[0] if around is not None else None
    candidate = after.id if after is not None else latest
    assert candidate is not None
    if after is not None:
        shown = after.source_revision_config
    else:
        newest = _revision_if_shown(hook, deployment.id, candidate)
        shown = newest.source_revision_config if newest is not None and newest.source_revision_config else None
        shown = shown or deployment.source_revision_config
    if _same_build(shown, config, exact=exact):
        log.warning(
            "%s: reattaching to the rollback an earlier try recorded before sending it: revision %s, the first "
            "after revision %s, has revision %s's config",
            name,
            candidate,
            previous,
            target,
        )
        return found(candidate)
    what = "its config is unknown" if not config else f"revision {candidate} does not have revision {target}'s config"
    raise AirflowFailException(
        f"{name}: an earlier try recorded a rollback to revision {target} about to be sent while the latest revision "
        f"was {previous}; the latest is now {latest}, and {what}: whether that rollback landed cannot be told. Not "
        f"sending it again (that could make a second rollback revision) and not claiming a rollback. Check revision "
        f"{candidate} (someone else's rollout?) and what the deployment serves, then clear this task"
    )


def start_rollback(
    hook: DeploymentServiceHook,
    deployment: Deployment,
    to_revision_id: str,
    *,
    rolling_back_from: str | None = None,
    fallback_config: Mapping[str, Any] | SourceRevisionConfig | None = None,
    resource_spec: Mapping[str, Any] | ResourceSpec | None = None,
    resource_spec_fields: Collection[str] | None = None,
    secrets: list[dict[str, str]] | None = None,
    force: bool = False,
    before_sending: Callable[[RollbackIntent], None] | None = None,
    log: logging.Logger | Any,
) -> RollbackStarted:
    """Start rolling ``deployment`` back to ``to_revision_id``; do not wait.

    Refuses (:class:`AirflowFailException`) before sending anything when: the revision is the one being
    rolled back; the deployment's latest revision is newer than ``rolling_back_from`` and not ``force``;
    the revision never built; the revision is not the deployment's (the revision endpoint knows the
    deployment's latest revision but not this one, or the redeploy endpoint says it is not found); neither
    the redeploy endpoint, nor the revision endpoint, nor ``fallback_config`` can say what to restore; or
    ``resource_spec`` cannot be sent. Transient service errors propagate (a task retry is safe: both
    requests are never applied twice).

    :param hook: the hook to send through.
    :param deployment: the deployment as just read (its ``latest_revision_id`` is the revision before the
        rollback request; the never-twice read-back compares with it).
    :param to_revision_id: the revision to return to.
    :param rolling_back_from: the revision being rolled back (e.g. the one a patch created); ``None`` takes
        the deployment's latest revision and skips the superseded check.
    :param fallback_config: the revision's non-secret ``source_revision_config`` fields, used for the patch
        path when the revision endpoint is missing (``previous_source_revision_config``).
    :param resource_spec: the whole ``source_config.resource_spec`` that served with ``to_revision_id``
        (recorded before the change, as the deployment showed it; ``{}`` when there was none). When a field of
        ``resource_spec_fields`` differs from it, the rollback sends, with the config, in one PATCH, the whole
        ``resource_spec`` as the deployment shows it now with those fields set back (the fields this provider
        does not know go back untouched). ``None``: unknown; left alone, and named in ``not_restored`` when the
        deployment has one.
    :param resource_spec_fields: the fields of ``resource_spec`` the change being rolled back changed
        (:func:`~airflow_provider.spec_changes.changed_fields`; ``()``: it left ``resource_spec`` alone, nothing
        is sent for it). ``None`` (default): unknown; every field the deployment does not show as
        ``resource_spec`` has it is restored, except one the service added that ``resource_spec`` lacks.
    :param secrets: secret values to send with the restore (``[{"name", "value"}]``, already resolved); forces
        the patch path. ``None`` (default) sends none: the deployment keeps its current secrets.
    :param force: roll back even when a newer revision than ``rolling_back_from`` exists.
    :param before_sending: called with the :class:`RollbackIntent` just before each request (record it, so a
        retry can tell whether it landed).
    :param log: where to report (the task's logger).
    """
    try:
        target = canonical_uuid(to_revision_id, "revision_id")
        source_revision = canonical_uuid(rolling_back_from, "rolling_back_from") if rolling_back_from else None
    except ValueError as err:
        raise AirflowFailException(str(err)) from None
    fallback = checked_fallback_config(fallback_config)
    spec = checked_resource_spec(resource_spec)
    fields = tuple(sorted(resource_spec_fields)) if resource_spec_fields is not None and spec is not None else None
    name = f"deployment {deployment.name!r} ({deployment.id})"
    latest, active = deployment.latest_revision_id, deployment.active_revision_id
    rolled_back_from = source_revision or latest
    if rolled_back_from == target:
        raise AirflowFailException(f"{name}: cannot roll revision {target} back to itself; give an earlier revision")
    if source_revision is not None and latest not in (source_revision, target):
        message = (
            f"{name}: revision {source_revision} was to be rolled back to {target}, but the latest revision is now "
            f"{latest} (someone rolled out meanwhile; active {active})"
        )
        if not force:
            raise AirflowFailException(f"{message}; not rolling back over it. Pass force=True to roll back anyway")
        log.warning("%s; rolling back anyway (force=True)", message)
    current_spec = resource_spec_json(deployment.source_config.resource_spec)
    to_restore = fields_not_shown(current_spec, spec, fields) if spec is not None else ()
    spec_differs = bool(to_restore)
    if spec is not None and fields is None:
        _warn_unshown_unknown_fields(spec, current_spec, name, log)
    unknown_spec = (RESOURCE_SPEC_UNKNOWN,) if spec is None and _spec_applies(deployment) else ()

    def started(
        path: RollbackPath,
        revision_id: str,
        after: Deployment,
        config: dict[str, str],
        *,
        exact: bool = True,
        allowed_latest: str | None = None,
    ) -> RollbackStarted:
        return RollbackStarted(
            path,
            target,
            revision_id,
            rolled_back_from,
            after,
            config,
            exact=exact,
            not_restored=(*_build_clause(config, exact), *unknown_spec),
            resource_spec=spec,
            allowed_latest_revision_id=allowed_latest if allowed_latest != revision_id else None,
            previous_latest_revision_id=latest,
            resource_spec_fields=fields,
        ).judged_on(after)

    def intent(path: RollbackPath, config: dict[str, str], exact: bool) -> None:
        if before_sending is not None:
            before_sending(
                RollbackIntent(
                    deployment.id,
                    target,
                    rolled_back_from,
                    latest,
                    active,
                    path,
                    config,
                    spec,
                    exact,
                    (*_build_clause(config, exact), *unknown_spec),
                    fields,
                )
            )

    if not spec_differs and active == target and latest is not None:
        newest = None if latest == target else _read_revision(hook, deployment.id, latest, log)
        if latest == target:
            log.info("%s already serves revision %s; nothing to roll back", name, target)
            return started("none", target, deployment, {})
        if newest is not None and newest.status.is_failed:
            log.info(
                "%s: revision %s never went live (status %s) and revision %s still serves; nothing to roll back",
                name,
                latest,
                newest.status.value,
                target,
            )
            return started("none", target, deployment, {}, allowed_latest=latest)
        if newest is not None and newest.status is RevisionStatus.DEPLOYED:
            log.warning(
                "%s serves revision %s again although revision %s, newer, went live: it was redeployed without a new "
                "revision (by an earlier try or someone else); nothing to send",
                name,
                target,
                latest,
            )
            return started("none", target, deployment, {}, allowed_latest=latest)

    revision = _read_target_revision(hook, deployment, target, name, log)
    if revision is not None and revision.status in NOT_BUILT:
        raise AirflowFailException(
            f"{name}: revision {target} has no build to return to (status {revision.status.value}); "
            "roll back to a revision that was live"
        )
    if not spec_differs and active != target and latest not in (None, target) and _changed_since(revision, deployment):
        fresh = hook.get_deployment(deployment.id)  # the revision moved since the deployment was read
        if fresh.latest_revision_id == latest and fresh.active_revision_id == target:
            log.warning(
                "%s serves revision %s again: it was redeployed without a new revision (by an earlier try or someone "
                "else) while this task looked; nothing to send",
                name,
                target,
            )
            return started("none", target, fresh, {}, allowed_latest=latest)
    config = _fields(revision.source_revision_config) if revision is not None else {}
    if not config and fallback:
        config = fallback
    restorable = {key: value for key, value in config.items() if key != "repo_commit_sha"}
    if not spec_differs and latest not in (None, target) and active != target and _in_progress(revision):
        assert revision is not None
        log.warning(
            "%s: revision %s is being deployed again (status %s) although revision %s is newer: a redeploy without "
            "a new revision is under way; waiting for it instead of sending another",
            name,
            target,
            revision.status.value,
            latest,
        )
        return started("redeploy", target, deployment, config, allowed_latest=latest)

    if secrets is None and not (spec_differs and restorable):
        if spec_differs:
            log.warning(
                "%s: the resource_spec to restore differs from the current one, but revision %s's config is unknown "
                "here, so it cannot be patched back with it: redeploying the build only",
                name,
                target,
            )
        intent("redeploy", config, True)
        after = _redeploy(hook, deployment, target, config, name, log)
        if after is not None:
            moved = after.latest_revision_id is not None and after.latest_revision_id != latest
            new = after.latest_revision_id if moved else target
            assert new is not None
            if moved:
                log.warning(
                    "Rolling %s back from revision %s to revision %s: redeployed its build (exact, commit included) "
                    "as revision %s",
                    name,
                    rolled_back_from,
                    target,
                    new,
                )
            else:
                log.warning(
                    "Rolling %s back from revision %s to revision %s: redeployed its build, which made no new "
                    "revision (the latest is still %s): waiting for revision %s itself to be active again",
                    name,
                    rolled_back_from,
                    target,
                    latest,
                    target,
                )
            return started("redeploy", new, after, config, allowed_latest=None if moved else latest)
    elif secrets is not None:
        log.info("Secrets were given: patching the revision's config back (a redeploy carries no secrets)")

    if not restorable:
        raise AirflowFailException(
            f"{name}: cannot roll back to revision {target}: the service has no redeploy endpoint and does not "
            "show the revision's config (no revision endpoint). Give source_revision_config= with its image_uri "
            "or repo_ref (the patch task pushes it as the XCom previous_source_revision_config)"
        )
    body: dict[str, Any] = {"source_revision_config": restorable}
    revision_source = (revision.model_extra or {}).get("source") if revision is not None else None
    if revision_source in {item.value for item in RevisionSource} and revision_source != str(
        getattr(deployment.source, "value", deployment.source)
    ):
        body["revision_source"] = revision_source
    if secrets is not None:
        body["secrets"] = secrets
    try:
        if spec_differs:
            assert spec is not None
            carried = CarriedResourceSpec.model_validate(restored_spec(current_spec, spec, to_restore))
            body["source_config"] = {"resource_spec": carried}  # the instance: carried, not read as the user's
        request = PatchDeploymentRequest.model_validate(body)
    except pydantic.ValidationError as err:
        raise AirflowFailException(f"{name}: invalid restore patch: {describe_validation_error(err)}") from None
    exact = not is_branch_ref(restorable.get("repo_ref")) or bool(restorable.get("image_uri"))
    if not exact:
        commit = config.get("repo_commit_sha")
        log.warning(
            "Restoring repo_ref %r, a branch: the service rebuilds the branch's current head, not %s that "
            "revision %s ran. Roll back to an image (digest or tag) or a tag ref for an exact rollback",
            restorable["repo_ref"],
            f"commit {commit}" if commit else "the commit",
            target,
        )
    intent("patch", config, exact)
    after = hook.patch_deployment(deployment.id, request, previous_latest_revision_id=latest)
    if after.latest_revision_id in (None, latest):
        raise AirflowFailException(
            f"{name}: patched revision {target}'s config back, but the service made no new revision (the latest is "
            f"still {latest}, active {after.active_revision_id}): nothing will deploy it, so nothing was rolled back. "
            "Check the deployment"
        )
    new = after.latest_revision_id
    restored = ", ".join(f"{key}={value}" for key, value in sorted(restorable.items()))
    log.warning(
        "Rolling %s back from revision %s to revision %s: patched its config back (%s)%s as revision %s",
        name,
        rolled_back_from,
        target,
        restored,
        f" with resource_spec's {', '.join(to_restore)} set back (the rest as shown)" if spec_differs else "",
        new,
    )
    return started("patch", new, after, config, exact=exact)


def _redeploy(
    hook: DeploymentServiceHook, deployment: Deployment, target: str, config: dict[str, str], name: str, log: Any
) -> Deployment | None:
    """Redeploy ``target``; the deployment after it, or ``None`` when the service has no redeploy endpoint."""
    expected = SourceRevisionConfig.model_validate(config) if config else None
    try:
        return hook.redeploy_revision(
            deployment.id, target, previous_latest_revision_id=deployment.latest_revision_id, expected_config=expected
        )
    except RequestRejectedError as err:
        raise AirflowFailException(f"{name}: the service refused to redeploy revision {target}: {err}") from None
    except DeploymentServiceError as err:
        if isinstance(err, ConflictError) and err.status_code is None:  # the read-back's verdict, not a 4xx
            raise AirflowFailException(f"{name}: redeploying revision {target}: {err}") from None
        if err.status_code not in REVISION_ENDPOINT_MISSING:
            raise
        if _says_revision_not_found(err):
            raise AirflowFailException(
                f"revision {target} is not a revision of {name}: the redeploy endpoint answered {err}; "
                "check revision_id"
            ) from None
        log.info("The redeploy endpoint is not available (%s); patching the revision's config back", err)
        return None
