"""Dry runs of an analysis (``Analysis(dry_run=True)``, Argo Rollouts' ``dryRun``): measured and judged exactly as
usual, but a verdict that is not "passed" never fails the task nor rolls back. The result says what the gate
would have done (``would_have``), in the log, the XCom, the asset event and the record, with its measurements:
a gate can be introduced on production safely and its verdicts read before it acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider.analysis import AnalysisResult

__all__ = ["WOULD_HAVE_FAILED", "WOULD_HAVE_ROLLED_BACK", "dry_run_message", "dry_run_result"]

WOULD_HAVE_ROLLED_BACK = "would have rolled back"
"""What a dry run's result says of a revision the analysis did not pass, with ``rollback_on_failure``."""
WOULD_HAVE_FAILED = "would have failed the task"
"""What it says without a rollback to make (``rollback_on_failure`` off, or a standalone gate)."""


def dry_run_result(
    result: Mapping[str, Any], *, rollback: bool, log: Any, subject: str, then: str = "the task goes on"
) -> AnalysisResult:
    """``result`` marked as a dry run's (``dry_run: true``; ``would_have`` when its verdict is not "passed"),
    logged once: a warning naming the verdict, its reason and the latest measurements when the gate would have
    acted, else one line.

    :param result: the analysis result, its verdict reached as usual.
    :param rollback: whether the gate would have rolled back (else it would have failed the task).
    :param log: the task's logger.
    :param subject: what was judged, for the log (``"revision <id> of 'svc'"``).
    :param then: what happens instead, for the log.
    """
    marked: dict[str, Any] = {**result, "dry_run": True}
    if result.get("verdict") == "passed":
        log.info("Dry run: the analysis passed %s: %s", subject, result.get("reason") or "every check passed")
        return marked  # type: ignore[return-value]
    would_have = WOULD_HAVE_ROLLED_BACK if rollback else WOULD_HAVE_FAILED
    marked["would_have"] = would_have
    latest = [
        f"{m.get('check')} = {'n/a' if m.get('value') is None else format(m.get('value'), '.4g')} "
        f"({m.get('verdict')}, needs {m.get('condition')})"
        for m in list(result.get("measurements") or [])[-5:]
    ]
    log.warning(
        "Dry run: the analysis %s %s (%s); it %s, but dry_run=True: %s. Latest measurements: %s",
        "was inconclusive on" if result.get("verdict") == "inconclusive" else "failed",
        subject,
        result.get("reason"),
        would_have,
        then,
        "; ".join(latest) or "none",
    )
    return marked  # type: ignore[return-value]


def dry_run_message(result: Mapping[str, Any] | None) -> str | None:
    """What a record entry says of a dry run's result that did not pass (``"dry run: would have rolled back:
    <reason>"``); ``None`` for any other result.

    :param result: an analysis result (JSON), or ``None``.
    """
    if not result or not result.get("would_have"):
        return None
    return f"dry run: {result['would_have']}: {result.get('reason')}"
