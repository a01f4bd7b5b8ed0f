"""Plan-only runs (``plan_only=True`` on the patch and fleet tasks): everything a rollout checks before its first
write, then the plan, returned and logged, and nothing sent.

A plan-only run resolves the targets (names, filters), builds and checks every patch (the request schema, and the
production PATCH rules against each deployment as read), runs the analysis's checks and its preflight (what the
gate measures now on the revision each deployment serves), and returns the plan: the waves, each deployment with
what serves now (``from``) and what the patch would set (``to``), and the gate's measurements. The service only
gets reads (and the analysis's sources their queries); no patch, no rollback, no ``task_state_store`` record, no
notification. ``Analysis(dry_run=True)`` is another thing: the rollout happens, only the gate's verdict is not
acted on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider.tasks.request import describe_patch

if TYPE_CHECKING:
    import logging

    from airflow_provider.analysis import Analysis, Measurement
    from airflow_provider.models import Deployment, PatchDeploymentRequest
    from airflow_provider.tasks.analysis import AnalysingTask

__all__ = [
    "NOTHING_SENT",
    "check_condition",
    "deployment_plan",
    "describe_gate",
    "fleet_plan",
    "patch_plan",
    "refused_plan",
    "report_plan",
]

NOTHING_SENT = "plan only: nothing was sent (no patch, no rollback, nothing recorded)"
"""What a plan-only run says it did."""


def deployment_plan(
    current: Deployment, request: PatchDeploymentRequest, baseline: Sequence[Measurement] | None
) -> dict[str, Any]:
    """One deployment's line of the plan (JSON, no secret value: secrets by name only).

    :param current: the deployment as read.
    :param request: the patch it would be sent, completed against it and checked.
    :param baseline: what the analysis's preflight measured on the revision it serves now (``None``: no analysis,
        or ``preflight=False``).
    """
    return {
        **refused_plan(current),
        "to": request.model_dump(mode="json", exclude_none=True),
        "to_text": describe_patch(request),
        "gate_now": [dict(measurement) for measurement in baseline] if baseline is not None else None,
    }


def report_plan(
    waves: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], log: logging.Logger | Any, *, gate: str | None
) -> dict[str, Any]:
    """Log the plan, wave by wave and deployment by deployment, and return it (the task's return value).

    :param waves: each wave's name and its deployments' :func:`deployment_plan`.
    :param log: the task's logger.
    :param gate: what the analysis judges, in words (``None``: no analysis).
    """
    total = sum(len(deployments) for _, deployments in waves)
    log.info("Plan only: %d deployment(s) in %d wave(s); %s", total, len(waves), NOTHING_SENT)
    for name, deployments in waves:
        log.info("  %s (%d):", name, len(deployments))
        for line in deployments:
            shown = line["from"]["source_revision_config"]
            before = shown.get("image_uri") or shown.get("repo_ref") or "(no image or ref)"
            log.info(
                "    %r (%s, %s): serves revision %s (%s) -> would patch %s",
                line["name"],
                line["deployment_id"],
                line["status"],
                line["from"]["active_revision_id"],
                before,
                line["to_text"],
            )
            for measurement in line["gate_now"] or []:
                log.info(
                    "      the gate now: %s = %s, needs %s -> %s (%s)",
                    measurement.get("check"),
                    measurement.get("value"),
                    measurement.get("condition"),
                    measurement.get("verdict"),
                    measurement.get("detail"),
                )
    if gate is not None:
        log.info("The gate: %s", gate)
    return {
        "plan_only": True,
        "sent": NOTHING_SENT,
        "gate": gate,
        "waves": [{"name": name, "deployments": [dict(line) for line in deployments]} for name, deployments in waves],
    }


def describe_gate(analysis: Analysis | None) -> str | None:
    """What the analysis judges, in words: each check and its condition, the rounds (``None``: no analysis).

    :param analysis: the task's analysis.
    """
    if analysis is None:
        return None
    checks = "; ".join(f"{check.label()} {check_condition(check)}".strip() for check in analysis.checks)
    rounds = f"{analysis.count} round(s)" if analysis.count is not None else "rounds filling bake_seconds"
    dry = " (dry run: its verdict is not acted on)" if analysis.dry_run else ""
    return f"{checks}; {rounds} every {analysis.interval_seconds:g} s{dry}"


def check_condition(check: Any) -> str:
    """What passes a check, in words (an HTTP check's status and fields; another's ``condition``).

    :param check: one check of the analysis.
    """
    describe = getattr(check, "describe_condition", None)
    if callable(describe):
        return str(describe())
    return str(getattr(check, "condition", None) or "")


def patch_plan(task: AnalysingTask, current: Deployment, to_send: PatchDeploymentRequest) -> dict[str, Any]:
    """The patch task's plan (``plan_only``): its analysis's sources, URLs and preflight checked as before a patch
    (what refuses a rollout refuses the plan), then the plan logged and returned.

    :param task: the patch task (its hook, logger and ``analysis``).
    :param current: the deployment as read.
    :param to_send: the patch, completed against it and checked.
    """
    from airflow_provider.tasks.analysis import check_analysis_sources, check_custom_urls
    from airflow_provider.tasks.preflight import preflight_on_worker

    analysis: Analysis | None = getattr(task, "analysis", None)
    baseline = None
    if analysis is not None:
        check_analysis_sources(task.hook, analysis, unchanged=NOTHING_SENT)
        check_custom_urls(analysis, [current], unchanged=NOTHING_SENT, request_for=lambda _deployment: to_send)
        baseline = preflight_on_worker(task, analysis, [current], unchanged=NOTHING_SENT).get(current.id)
    line = deployment_plan(current, to_send, baseline)
    return report_plan([("the deployment", [line])], task.log, gate=describe_gate(analysis))


def fleet_plan(
    task: Any,
    waves: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    targets: Sequence[Deployment],
    request_for: Callable[[Deployment], PatchDeploymentRequest],
    baselines: Mapping[str, Sequence[Measurement]],
) -> dict[str, Any]:
    """The fleet task's plan (``plan_only``): each deployment's patch built and completed against it (the PATCH
    rules, as its wave would), the preflight's measurements (already taken); a deployment whose patch would be
    refused shows why (``refused``), as its row would fail in the rollout.

    :param task: the fleet task (its ``check_source_rules``, ``resource_spec_mode``, ``analysis`` and logger).
    :param waves: the waves (``fleet_strategy.plan_waves``).
    :param targets: the deployments as read.
    :param request_for: each deployment's patch, as the change gives it.
    :param baselines: the preflight's measurements by deployment id (``{}``: none).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider.tasks.request import against_current

    by_id = {deployment.id: deployment for deployment in targets}
    planned: list[tuple[str, list[dict[str, Any]]]] = []
    for name, members in waves:
        lines = []
        for deployment_id, _name in members:
            current = by_id[deployment_id]
            try:
                to_send = against_current(
                    request_for(current),
                    current,
                    check_source_rules=task.check_source_rules,
                    resource_spec_mode=task.resource_spec_mode,
                    log=task.log,
                )
            except AirflowFailException as err:
                task.log.warning("Plan only: %r would not be patched: %s", current.name, err)
                lines.append({**refused_plan(current), "refused": str(err)})
                continue
            lines.append(deployment_plan(current, to_send, baselines.get(deployment_id)))
        planned.append((name, lines))
    return report_plan(planned, task.log, gate=describe_gate(task.analysis))


def refused_plan(current: Deployment) -> dict[str, Any]:
    """The plan's line of a deployment whose patch would be refused (``to`` is ``None``).

    :param current: the deployment as read.
    """
    revision_config = current.source_revision_config.model_dump(mode="json", exclude_none=True)
    return {
        "deployment_id": current.id,
        "name": current.name,
        "status": getattr(current.status, "value", str(current.status)),
        "from": {"active_revision_id": current.active_revision_id, "source_revision_config": revision_config},
        "to": None,
        "to_text": "nothing (refused)",
        "gate_now": None,
    }
