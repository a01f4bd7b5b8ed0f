"""Why a build failed, in the task log: the last lines of a revision's build log, secrets scrubbed.

Shared by every task that waits for a revision (the patch and rollback operators, fleet rollouts). The
logs endpoint is a production endpoint outside the spec: where the server lacks it (404/405) the tail is
skipped quietly, and any other failure to read it never hides the rollout's own error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow_provider.client.error_text import scrub
from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import Revision

if TYPE_CHECKING:
    import logging

    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

BUILD_LOG_TAIL_LINES = 20
"""How many of the last build-log lines a failed rollout shows."""

_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Z0-9_.-]*(?:secret|token|password|passwd|api[_-]?key|credential)[A-Z0-9_.-]*)(\s*[=:]\s*)(\S+)"
)
"""``NAME=value`` / ``name: value`` where the name says it holds a secret (as the service's own client scrubs)."""


def scrub_log_line(line: str, secrets: Iterable[str] = ()) -> str:
    """``line`` with every known secret value and every ``*TOKEN*=value``-like assignment replaced.

    :param line: one log line.
    :param secrets: secret values the task knows (they are replaced wherever they appear).
    """
    line = scrub(line, tuple(secret for secret in secrets if secret))
    return _SECRET_ASSIGNMENT.sub(lambda match: f"{match.group(1)}{match.group(2)}**********", line)


def build_log_tail(
    hook: DeploymentServiceHook,
    deployment_id: str,
    revision_id: str,
    *,
    lines: int = BUILD_LOG_TAIL_LINES,
    secrets: Iterable[str] = (),
) -> list[str] | None:
    """The last ``lines`` lines of a revision's build log, oldest first, scrubbed; ``None`` when the
    server has no logs endpoint or reading it failed.

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the revision whose build failed.
    :param lines: how many lines, 1..1000.
    :param secrets: secret values to scrub besides the ``NAME=value`` assignments.
    """
    try:
        page = hook.get_revision_logs(deployment_id, revision_id, "build", limit=lines, order="desc")
    except DeploymentServiceError:
        return None
    known = tuple(secrets)
    shown = []
    for entry in reversed(page.logs):
        stamp = f"{entry.timestamp} " if entry.timestamp else ""
        level = f"{entry.level} " if entry.level else ""
        shown.append(scrub_log_line(f"{stamp}{level}{entry.message}", known))
    return shown


def log_failed_build(
    hook: DeploymentServiceHook,
    deployment_id: str | None,
    revision_id: str | None,
    log: logging.Logger | Any,
    *,
    secrets: Iterable[str] = (),
    lines: int = BUILD_LOG_TAIL_LINES,
) -> Revision | None:
    """After a failed rollout: when the revision's build failed, log its build log's last lines.

    Asks the revision endpoint for the revision's status (skipped quietly when it is missing), and the
    logs endpoint only for a revision whose build failed (``BUILD_FAILED``, ``CREATE_FAILED``). Never
    raises: the rollout's own error is what the task reports.

    :param hook: the hook to ask.
    :param deployment_id: the deployment.
    :param revision_id: the revision that did not go live (nothing is done when ``None``).
    :param log: the task's logger.
    :param secrets: secret values to scrub from the lines.
    :param lines: how many lines to show.
    :return: the revision as the revision endpoint reports it, or ``None`` when unknown.
    """
    if not deployment_id or not revision_id:
        return None
    try:
        revision = hook.get_revision(deployment_id, revision_id)
    except DeploymentServiceError as err:
        if err.status_code not in REVISION_ENDPOINT_MISSING:
            log.info("Could not read revision %s to explain the failure (%s)", revision_id, err)
        return None
    if revision.status.value not in ("BUILD_FAILED", "CREATE_FAILED"):
        return revision
    tail = build_log_tail(hook, deployment_id, revision_id, lines=lines, secrets=secrets)
    if tail:
        log.error(
            "Last %d line(s) of the build log of revision %s:\n%s",
            len(tail),
            revision_id,
            "\n".join(f"    {line}" for line in tail),
        )
    return revision
