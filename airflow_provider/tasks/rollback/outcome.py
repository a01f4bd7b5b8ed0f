"""What a rollback did, or is about to do, as its caller records it: :class:`RollbackStarted` (the path, the
revision to wait for, what it did not restore) and :class:`RollbackIntent` (recorded before the request), both
plain JSON through their ``record()``; and the ``not_restored`` clauses a rollback's verdict is made of.

The rollback's entry points are in :mod:`airflow_provider.tasks.rollback`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_provider.decisions.spec_changes import resource_spec_json, spec_shows
from airflow_provider.models import Deployment, DeploymentSource

__all__ = [
    "RESOURCE_SPEC_NOT_SENT",
    "RESOURCE_SPEC_NOT_SHOWN",
    "RESOURCE_SPEC_UNKNOWN",
    "RESOURCE_SPEC_VERDICTS",
    "RollbackIntent",
    "RollbackPath",
    "RollbackStarted",
    "build_clause",
    "is_branch_ref",
    "recorded_fields",
    "recorded_id",
    "spec_applies",
]

RollbackPath = Literal["redeploy", "patch", "none"]
"""How a rollback returns to a revision: ``redeploy`` (its build again), ``patch`` (its config patched back) or
``none`` (nothing sent)."""
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
        :func:`~airflow_provider.decisions.spec_changes.fields_not_shown`).
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
            recorded_id(record.get("rolled_back_from")),
            deployment,
            dict(record.get("restored_config") or {}),
            exact=bool(record.get("exact", True)),
            not_restored=tuple(str(item) for item in record.get("not_restored") or ()),
            resource_spec=dict(spec) if isinstance(spec, Mapping) else None,
            allowed_latest_revision_id=recorded_id(record.get("allowed_latest_revision_id")),
            previous_latest_revision_id=recorded_id(record.get("previous_latest_revision_id")),
            resource_spec_fields=recorded_fields(record.get("resource_spec_fields")),
        )


def recorded_id(value: Any) -> str | None:
    """A revision id as a record holds it (``None`` when absent or empty).

    :param value: the recorded value.
    """
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


def spec_applies(deployment: Deployment) -> bool:
    """Whether the deployment may have a ``resource_spec`` a change could have set (``external_docker`` only)
    and shows one (a rollback given none then names :data:`RESOURCE_SPEC_UNKNOWN`).

    :param deployment: the deployment as read.
    """
    source = getattr(deployment.source, "value", deployment.source)
    return source == DeploymentSource.EXTERNAL_DOCKER.value and bool(
        resource_spec_json(deployment.source_config.resource_spec)
    )


def build_clause(config: Mapping[str, str], exact: bool) -> tuple[str, ...]:
    """The ``not_restored`` clause of a branch rebuilt from its head (``()`` for an exact rollback).

    :param config: the non-secret revision fields restored.
    :param exact: whether the very build returns.
    """
    if exact:
        return ()
    commit = config.get("repo_commit_sha")
    was = f"commit {commit}" if commit else "the commit it ran"
    return (
        f"build (repo_ref {config.get('repo_ref')!r} is a branch: the service rebuilt its current head, not {was})",
    )
