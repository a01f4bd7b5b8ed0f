"""The patch task's verdict on its revision: recorded before anything acts on it, and where a retry starts.

:class:`~airflow_provider.operators.patch.PatchDeploymentOperator` judges the revision its patch made (``verify``,
the analysis, the bake) and, with ``rollback_on_failure``, rolls it back when it fails, or when it did not go live
within ``timeout``. What judging and rolling back need travels as the **landing** (:func:`landing_of`: the
deployment, the revision, what served before; JSON, no secret), carried across deferrals and kept in the patch's
``task_state_store`` record (:data:`~airflow_provider.tasks.patch.retry.TASK_STATE_KEY`).

A failed verdict is a fact a later try must not lose: the moment one is reached, before any other request,
:func:`record_verdict` writes it into the record (the step, the reason, and for the analysis its whole result with
the measurements). A retry that finds it (:func:`recorded_failed_verdict`) goes straight to the rollback: it never
judges the revision again, so a revision whose bad spell is over (its tracing statistics since going live diluted
by the healthy traffic that followed) is never landed by a retry. The rollback itself is recorded next, before its
request (:func:`~airflow_provider.tasks.patch.retry.record_rollback`).

Without a ``task_state_store`` (Airflow < 3.3) nothing is recorded: a try that dies between its verdict and its
rollback request leaves the retry to judge the revision again, from the start (the limit of that setup).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk.exceptions import AirflowException

from airflow_provider.client.error_text import scrub
from airflow_provider.models import Deployment
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY

if TYPE_CHECKING:
    import logging

    from airflow_provider.analysis import AnalysisResult

__all__ = [
    "VERDICT_STEPS",
    "XCOM_ANALYSIS",
    "VerdictStep",
    "checked_landing",
    "failed_revision",
    "failed_verdict",
    "judged_not_restored",
    "landing_of",
    "may_still_go_live",
    "own_xcom",
    "read_record",
    "record_verdict",
    "recorded_failed_verdict",
    "recorded_landing",
    "rollback_not_live_message",
    "rollback_resumed_unknown",
    "rolled_back_message",
    "verify_failure",
]

VerdictStep = Literal["verify", "analysis", "bake", "timeout", "unjudged"]
VERDICT_STEPS: tuple[VerdictStep, ...] = ("verify", "analysis", "bake", "timeout", "unjudged")
"""What reached a failed verdict: ``verify``, the analysis (failed, inconclusive or not measurable on the last try),
the bake, the rollout's ``timeout`` (the revision did not go live in time), or nothing (``unjudged``: Airflow's
deferral timeout ended the judging on the last try)."""
XCOM_ANALYSIS = "analysis"
"""The XCom key of the analysis result (an ``AnalysisResult``: verdict, failing check, reason, measurements)."""


# ------------------------------------------------------------------------------------------ the landing
def landing_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The landing stored in (or built from) a record: every key present.

    :param record: the patch's ``task_state_store`` record, or a landing.
    """
    return {
        "deployment_id": record.get("deployment_id"),
        "revision_id": record.get("revision_id"),
        "previous_active_revision_id": record.get("previous_active_revision_id"),
        "previous_source_revision_config": dict(record.get("previous_source_revision_config") or {}),
        "previous_resource_spec": record.get("previous_resource_spec"),
        # the resource_spec fields the patch changed, which its rollback restores ([]: none; None: unknown, all)
        "resource_spec_changes": record.get("resource_spec_changes"),
        "not_restorable": list(record.get("not_restorable") or []),
        # the analysis's preflight measurements of the revision serving before the patch (None: no preflight)
        "baseline": record.get("baseline"),
    }


def checked_landing(landing: Any, event: Any, method: str) -> dict[str, Any]:
    """``landing`` when it has what verify, the bake and the rollback need; else :class:`AirflowException` (a
    retry reattaches to the revision and judges it again) naming what is missing.

    :param landing: what the resume got (kwargs, the event's carry, or the record).
    :param event: the trigger's event (named in the message).
    :param method: the resume method (named in the message).
    """
    needed = ("deployment_id", "revision_id", "previous_active_revision_id")
    missing = [key for key in needed if not isinstance(landing, dict) or key not in landing]
    if not missing:
        return dict(landing)
    seen = event if isinstance(event, dict) else {}
    raise AirflowException(
        f"deployment {seen.get('deployment_id')}: revision {seen.get('revision_id')} is live, but {method} "
        f"resumed without {', '.join(missing)} of 'landing' (neither in the resume kwargs nor in the "
        "trigger's event): without them verify, the analysis, the bake and the rollback cannot run, so the "
        "revision is not declared landed. A retry reattaches to it and judges it again"
    )


def read_record(store: Any, log: logging.Logger | Any) -> dict[str, Any] | None:
    """The patch's ``task_state_store`` record as stored (``None``: no store, none, or unreadable).

    :param store: ``context["task_state_store"]``.
    :param log: where to say the store failed.
    """
    if store is None:
        return None
    try:
        record = store.get(TASK_STATE_KEY)
    except Exception as err:  # the store is a fallback where this is used
        log.warning("Could not read task_state_store (%s)", err)
        return None
    return record if isinstance(record, dict) else None


def recorded_landing(store: Any, subject: Any, log: logging.Logger | Any) -> dict[str, Any] | None:
    """The landing of the patch's record when it is the one of the revision ``subject`` is about (a resume that
    got the landing neither in its kwargs nor in the trigger's event: a trigger serialized by an earlier provider
    version); ``None`` otherwise.

    :param store: ``context["task_state_store"]``.
    :param subject: ``{"deployment_id", "revision_id"}`` (a rollout or bake event, or what an analysis event is about).
    :param log: the task's logger.
    """
    if not isinstance(subject, dict):
        return None
    record = read_record(store, log)
    if record is None or record.get("deployment_id") != subject.get("deployment_id"):
        return None
    if record.get("revision_id") != subject.get("revision_id"):
        return None
    log.info("Resumed without the landing in the kwargs or the event: taking it from task_state_store")
    return landing_of(record)


def own_xcom(context: Mapping[str, Any], key: str, log: logging.Logger | Any) -> str | None:
    """A string this task pushed under ``key`` earlier in this try (``None`` when absent or unreadable).

    :param context: the task context.
    :param key: the XCom key.
    :param log: where to say it could not be read.
    """
    ti = context["ti"]
    try:
        value = ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)
    except Exception as err:  # what needs it goes on without it
        log.warning("Could not read the XCom %r back (%s)", key, err)
        return None
    return value if isinstance(value, str) and value else None


# ------------------------------------------------------------------------------------------ the verdict
def verify_failure(
    verify: Callable[[Deployment], Any] | None,
    live: Mapping[str, Any],
    secret_values: Callable[[], tuple[str, ...] | None],
    log: logging.Logger | Any,
) -> str | None:
    """Why ``verify`` says the live revision is bad, or ``None`` (also when there is no ``verify``): it raised, or
    returned a false value other than ``None`` (an assert-style check returns nothing when good).

    :param verify: the task's ``verify``.
    :param live: the live deployment's JSON.
    :param secret_values: the task's secret values, to scrub what ``verify`` raised (``None``: they could not be
        resolved; the message is then not shown).
    :param log: the task's logger.
    """
    if verify is None:
        return None
    deployment = Deployment.model_validate(live)
    try:
        verdict = verify(deployment)
    except Exception as err:  # any failure of the user's check means the revision is bad
        secrets = secret_values()
        if secrets is None:  # cannot scrub the text: say what raised, not what it said
            return (
                f"verify raised {type(err).__name__} (its message is not shown: this task's secret values "
                "could not be resolved again to scrub it)"
            )
        return f"verify raised {scrub(f'{type(err).__name__}: {err}', secrets)}"
    if verdict is not None and not verdict:
        return f"verify returned {verdict!r}"
    log.info("verify accepted revision %s", deployment.active_revision_id)
    return None


def failed_verdict(
    step: str, reason: str, revision_id: str | None, analysis: AnalysisResult | None = None
) -> dict[str, Any]:
    """A failed verdict as recorded (JSON, no secret: ``reason`` and ``analysis`` are already scrubbed).

    :param step: what reached it (see :data:`VERDICT_STEPS`).
    :param reason: why the revision failed, as the failure message says it after "went live but".
    :param revision_id: the revision judged.
    :param analysis: the analysis's result (verdict, failing check, reason, measurements) when it decided.
    """
    return {
        "step": step,
        "passed": False,
        "reason": reason,
        "revision_id": revision_id,
        "analysis": dict(analysis) if analysis is not None else None,
    }


def record_verdict(
    store: Any, landing: Mapping[str, Any], verdict: Mapping[str, Any], log: logging.Logger | Any
) -> None:
    """Write ``verdict`` into the patch's record, before anything acts on it (not fatal when the store fails: a
    retry then judges the revision again). A record already holding it is not written again.

    :param store: ``context["task_state_store"]`` (``None``: nothing is recorded).
    :param landing: the patch's landing (its deployment and revision must be the record's).
    :param verdict: :func:`failed_verdict`.
    :param log: where to say the store failed.
    """
    if store is None:
        return
    recorded = read_record(store, log)
    if (
        recorded is None
        or recorded.get("deployment_id") != landing.get("deployment_id")
        or recorded.get("revision_id") != landing.get("revision_id")
    ):
        log.warning("No task_state_store record of the patch to add the verdict to; not recording it")
        return
    if recorded.get("verdict") == dict(verdict):
        return
    try:
        store.set(TASK_STATE_KEY, {**recorded, "verdict": dict(verdict)})
    except Exception as err:
        log.warning("Could not record the verdict in task_state_store (%s)", err)


def recorded_failed_verdict(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The failed verdict an earlier try recorded on the record's own revision, or ``None``.

    :param record: the patch's record (:func:`~airflow_provider.tasks.patch.retry.recorded_patch`), or ``None``.
    """
    verdict = record.get("verdict") if record is not None else None
    if not isinstance(verdict, dict) or verdict.get("passed") is not False:
        return None
    if verdict.get("step") not in VERDICT_STEPS or not isinstance(verdict.get("reason"), str):
        return None
    assert record is not None
    return verdict if verdict.get("revision_id") == record.get("revision_id") else None


def failed_revision(landing: Mapping[str, Any], step: Any, reason: str) -> str:
    """How a failure message names the failed revision: ``deployment D: revision R went live but <reason>``, or,
    for a rollout that timed out, ``... did not go live within the timeout: <reason>``.

    :param landing: the patch's landing.
    :param step: the verdict's step (``None`` for records of earlier provider versions: went live).
    :param reason: why.
    """
    head = f"deployment {landing.get('deployment_id')}: revision {landing.get('revision_id')}"
    if step == "timeout":
        return f"{head} did not go live within the timeout ({reason})"
    return f"{head} went live but {reason}"


# ------------------------------------------------------------------------------------------ what the task says
def rolled_back_message(landing: Mapping[str, Any], rollback: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """The failure message of a rolled-back patch: "rolled back" only when the previous build serves again with its
    previous resource_spec (judged again on the live deployment); otherwise "rolled back ... except: <what the
    rollback did not undo>". A rollback of a rollout that timed out says it keeps the revision from serving.

    :param landing: the patch's landing.
    :param rollback: the rollback's record (:func:`~airflow_provider.tasks.patch.retry.rollback_record`).
    :param live: the deployment JSON with the rollback's revision live (``{}``: not known).
    """
    not_restored = judged_not_restored(rollback, live)
    how = rollback.get("path")
    if rollback.get("origin"):
        how = f"{how}, {rollback['origin']}"
    head = (
        f"{failed_revision(landing, rollback.get('step'), str(rollback.get('reason')))}; rolled back to revision "
        f"{landing.get('previous_active_revision_id')} ({how})"
    )
    if rollback.get("step") == "timeout":
        head += f" so that revision {landing.get('revision_id')} does not end up serving"
    if not not_restored:
        return f"{head}, which serves again as revision {rollback.get('revision_id')}"
    return f"{head} as revision {rollback.get('revision_id')}, except: {'; '.join(not_restored)}"


def judged_not_restored(rollback: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """What the rollback did not undo, judged again on the live deployment (its ``resource_spec``); the record's
    clauses when the deployment is not known.

    :param rollback: the rollback's record.
    :param live: the deployment JSON with the rollback's revision live (``{}``: not known).
    """
    from airflow_provider.tasks.rollback.outcome import RollbackStarted

    if not live:
        return list(rollback.get("not_restored") or [])
    shown = Deployment.model_validate(live)
    return list(RollbackStarted.from_record(rollback, shown).judged_on(shown).not_restored)


def rollback_not_live_message(landing: Mapping[str, Any], rollback: Mapping[str, Any], why: Any) -> str:
    """The failure message when the rollback's revision had not gone live when the wait for it ended (its own
    ``timeout``, or Airflow's deferral timeout): what was sent (recorded: a retry waits for it) and that the service
    still deploys it, after what it builds first (one build at a time).

    :param landing: the patch's landing.
    :param rollback: the rollback's record.
    :param why: how the wait ended.
    """
    return (
        f"{failed_revision(landing, rollback.get('step'), str(rollback.get('reason')))}; the rollback to revision "
        f"{landing.get('previous_active_revision_id')} was sent ({rollback.get('path')}) as revision "
        f"{rollback.get('revision_id')}, which had not gone live when the wait for it ended: {why}. The service "
        f"still deploys it after what it builds first (revision {landing.get('revision_id')} may serve until then)"
    )


def may_still_go_live(err: Any, revision_id: str, previous: str | None, why: str) -> str:
    """The failure message of a rollout that timed out and was not rolled back: the revision may still go live,
    nothing was sent to stop it.

    :param err: the timeout (its message says what the task last saw).
    :param revision_id: the revision rolling out.
    :param previous: the revision that served before the patch.
    :param why: why nothing was sent (``rollback_on_failure is off``).
    """
    return (
        f"{err}. Revision {revision_id} may still go live: the service goes on deploying it and nothing was sent to "
        f"stop it ({why}; revision {previous} served before the patch)"
    )


def rollback_resumed_unknown(event: Any, landing: Any, rollback: Any) -> str:
    """The failure message of a rollback's resume that got neither the landing nor the rollback's record.

    :param event: the trigger's event.
    :param landing: the landing the resume found (``None``: none).
    :param rollback: the rollback record it found (``None``: none).
    """
    seen = event if isinstance(event, dict) else {}
    missing = [name for name, value in (("landing", landing), ("rollback", rollback)) if value is None]
    return (
        f"deployment {seen.get('deployment_id')}: the automatic rollback's revision {seen.get('revision_id')} is "
        f"live, but execute_rollback_complete resumed without {' and '.join(missing) or 'a valid record'} (neither "
        "in the resume kwargs nor in the trigger's event): which revision was rolled back, why, and what the "
        "rollback restored are unknown"
    )
