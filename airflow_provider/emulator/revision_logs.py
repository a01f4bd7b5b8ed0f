"""Build and deploy logs of a revision, derived from its timeline (no stored text).

A log entry is ``{"id": "...", "timestamp": "<ISO 8601>", "level": "INFO" | "ERROR", "message": "..."}``; the
``id`` is stable (the same line always has the same one), as the service's own client relies on to skip lines
it printed already when it follows a log. Lines appear
as the emulated clock reaches them, so a client polling the log of a running build sees it grow. A build
log shows the source being fetched (clone and commit for ``codehost``, the upload for
``internal_source``, the image for the docker sources), numbered build steps, then either the built
image or, for a failed build, the failure as the last line at level ``ERROR``. A redeploy's build log
says which build it reuses. A deploy log shows the rollout, then ``... is live`` or the failure.
Secrets never appear in a log.

Pages: ``order`` ``asc`` (oldest first, default) or ``desc``; ``limit`` entries; ``offset`` is an opaque
cursor from ``next_offset`` of the previous page (``null`` when no more lines exist yet). The older routes the
service's command-line client reads (``POST /v1/projects/...``) also filter (:class:`LogFilter`: ``level``,
``query``, ``start_time``, ``end_time``) before paging; a deployment's deploy log without a revision
(:func:`deployment_log`) is every revision's deploy log, in time order.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_provider.models import RevisionStatus

from .records import DeploymentRecord, RevisionRecord

LogType = Literal["build", "deploy"]
LogOrder = Literal["asc", "desc"]
DEFAULT_LOG_LIMIT = 50
MAX_LOG_LIMIT = 1000
BASE_IMAGE = "python:3.11-slim"
_LINE_NAMESPACE = uuid.UUID("0d7f3b5e-58c4-4c1b-9a55-2b8f3f0e9c21")


class BadCursor(ValueError):
    """An ``offset`` that is not a cursor this emulator handed out (for this order)."""


@dataclass(frozen=True)
class LogEntry:
    """One log line.

    :param timestamp: when it was written.
    :param message: the text.
    :param level: ``INFO`` or ``ERROR``.
    :param id: the line's stable id (set by :func:`revision_log`).
    """

    timestamp: datetime
    message: str
    level: str = "INFO"
    id: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{"id", "timestamp", "level", "message"}``."""
        return {"id": self.id, "timestamp": self.timestamp.isoformat(), "level": self.level, "message": self.message}


@dataclass(frozen=True)
class LogFilter:
    """What the older log routes filter on (``None``: no filter).

    :param level: only lines of this level (case-insensitive).
    :param query: only lines whose message contains this text (case-insensitive).
    :param start_time: only lines written at or after this time.
    :param end_time: only lines written at or before this time.
    """

    level: str | None = None
    query: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    def apply(self, entries: list[LogEntry]) -> list[LogEntry]:
        """The entries that pass every filter, in their order."""
        level = self.level.upper() if self.level else None
        query = self.query.lower() if self.query else None
        return [
            entry
            for entry in entries
            if (level is None or entry.level == level)
            and (query is None or query in entry.message.lower())
            and (self.start_time is None or entry.timestamp >= self.start_time)
            and (self.end_time is None or entry.timestamp <= self.end_time)
        ]


def revision_log(record: DeploymentRecord, revision: RevisionRecord, kind: LogType, now: datetime) -> list[LogEntry]:
    """The lines of the ``kind`` log of ``revision`` written by ``now``, oldest first.

    :param record: the deployment.
    :param revision: one of its revisions.
    :param kind: ``build`` or ``deploy``.
    :param now: the emulated time.
    """
    if revision.started_at is None:
        return []
    planned = _build_lines(record, revision) if kind == "build" else _deploy_lines(record, revision)
    return [
        replace(entry, id=str(uuid.uuid5(_LINE_NAMESPACE, f"{revision.id}/{kind}/{index}")))
        for index, entry in enumerate(planned)
        if entry.timestamp <= now
    ]


def deployment_log(record: DeploymentRecord, now: datetime) -> list[LogEntry]:
    """The deploy log of the whole deployment written by ``now``: every revision's, oldest line first.

    :param record: the deployment.
    :param now: the emulated time.
    """
    lines = [entry for revision in record.revisions for entry in revision_log(record, revision, "deploy", now)]
    return sorted(lines, key=lambda entry: entry.timestamp)


def page(entries: list[LogEntry], *, order: LogOrder, limit: int, offset: str | None) -> dict[str, Any]:
    """One page of ``entries`` (oldest first): ``{"logs": [...], "next_offset": cursor | None}``.

    :raises BadCursor: if ``offset`` is not a cursor of this order.
    """
    ordered = entries if order == "asc" else entries[::-1]
    start = _position(offset, order) if offset else 0
    chunk = ordered[start : start + limit]
    end = start + len(chunk)
    next_offset = _cursor(end, order) if end < len(ordered) else None
    return {"logs": [entry.to_json() for entry in chunk], "next_offset": next_offset}


def _cursor(position: int, order: LogOrder) -> str:
    return base64.urlsafe_b64encode(f"{order}:{position}".encode()).decode().rstrip("=")


def _position(cursor: str, order: LogOrder) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        name, _, number = text.partition(":")
        position = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(f"offset {cursor!r} is not a log cursor") from None
    if name != order or position < 0:
        raise BadCursor(f"offset {cursor!r} is not a cursor for order={order}")
    return position


def _at(revision: RevisionRecord, fraction: float) -> datetime:
    assert revision.started_at is not None
    return revision.started_at + timedelta(seconds=revision.build_seconds * fraction)


def _ended(revision: RevisionRecord, failure: RevisionStatus) -> datetime | None:
    """When ``revision`` ended with ``failure``, or ``None``."""
    return revision.updated_at if revision.status is failure else None


def _build_lines(record: DeploymentRecord, revision: RevisionRecord) -> list[LogEntry]:
    assert revision.started_at is not None
    config = revision.source_revision_config
    if revision.skips_build:
        sha = f" (commit {config.repo_commit_sha})" if config.repo_commit_sha else ""
        return [
            LogEntry(
                revision.started_at,
                f"Reusing the build of revision {revision.redeploy_of or revision.id}{sha}: no build",
            )
        ]
    lines = [LogEntry(revision.started_at, f"Revision {revision.id} is waiting for a builder")]
    messages = [f"Build started for revision {revision.id} (source {revision.source})"]
    messages += _fetch_messages(record, revision)
    steps = _steps(record, revision)
    messages += [f"Step {number}/{len(steps)} : {step}" for number, step in enumerate(steps, start=1)]
    start, end = _at(revision, 0.2), _at(revision, 0.7)
    spacing = (end - start) / (len(messages) + 1)
    failed_at = _ended(revision, RevisionStatus.BUILD_FAILED)
    for index, message in enumerate(messages):
        stamp = start + spacing * index
        if failed_at is not None and stamp >= failed_at:
            break
        lines.append(LogEntry(stamp, message))
    if failed_at is not None:
        lines.append(LogEntry(failed_at, "Build failed", "ERROR"))
        lines.append(LogEntry(failed_at, f"ERROR: {revision.status_message or 'build failed'}", "ERROR"))
        return lines
    image = f"registry.emulator.local/{record.resource.name}:{revision.id[:8]}"
    lines.append(LogEntry(end, f"Successfully built {image}"))
    return lines


def _fetch_messages(record: DeploymentRecord, revision: RevisionRecord) -> list[str]:
    config = revision.source_revision_config
    if revision.source == "codehost":
        messages = [f"Cloning {record.resource.source_config.repo_url or 'the repository'} at {config.repo_ref}"]
        if config.repo_commit_sha:
            messages.append(f"Checked out commit {config.repo_commit_sha}")
        return messages
    if revision.source == "internal_source":
        return [f"Fetching uploaded source {config.source_tarball_path or '(none)'}"]
    if config.image_uri:
        return [f"Pulling image {config.image_uri}", "Image pulled"]
    return []


def _steps(record: DeploymentRecord, revision: RevisionRecord) -> list[str]:
    if revision.source not in ("codehost", "internal_source"):
        return [f"FROM {revision.source_revision_config.image_uri or BASE_IMAGE}", "Verifying the image entrypoint"]
    source_config = record.resource.source_config
    steps = [f"FROM {BASE_IMAGE}", "COPY . /app", f"RUN {source_config.install_command or 'pip install .'}"]
    if source_config.build_command:
        steps.append(f"RUN {source_config.build_command}")
    if revision.source_revision_config.graph_config_path:
        steps.append(f"Loading graph configuration {revision.source_revision_config.graph_config_path}")
    return steps


def _deploy_lines(record: DeploymentRecord, revision: RevisionRecord) -> list[LogEntry]:
    if revision.status in (RevisionStatus.BUILD_FAILED, RevisionStatus.CREATE_FAILED):
        return []
    start = _at(revision, 0.1 if revision.skips_build else 0.7)
    spec = record.resource.source_config.resource_spec
    replicas = spec.min_scale if spec is not None and spec.min_scale else 1
    lines = [
        LogEntry(start, f"Deploying revision {revision.id}"),
        LogEntry(start, f"Rolling out {replicas} replica(s)"),
    ]
    failed_at = _ended(revision, RevisionStatus.DEPLOY_FAILED)
    if failed_at is not None:
        lines.append(LogEntry(failed_at, "Deploy failed", "ERROR"))
        lines.append(LogEntry(failed_at, f"ERROR: {revision.status_message or 'deploy failed'}", "ERROR"))
        return lines
    if revision.status in (RevisionStatus.SKIPPED, RevisionStatus.INTERRUPTED):
        lines.append(LogEntry(revision.updated_at, f"Deploy stopped: revision {revision.status.value}", "ERROR"))
        return lines
    lines.append(LogEntry(_at(revision, 0.3 if revision.skips_build else 1.0), f"Revision {revision.id} is live"))
    return lines
