"""The guard's DAG: the revisions a guard found regressed rolled back, once each, to the revision that served before.

Scheduled on the guard's asset of a connection, whose ``AssetWatcher`` runs
:class:`~airflow_provider.triggers.guard.DeploymentGuardTrigger` (one trigger guards every revision handed to the guard
through that connection). Each run:

1. ``confirm``: reads the run's ``revision_regressed`` events (and tracing-service alerts posted to the same asset
   through Airflow's asset-events API, de-duplicated by rule and time bucket; and payloads replayed by hand in the
   run's conf, ``{"regressions": [...]}``), keeps each (deployment, revision) once,
   skips one another run handled already (runs go one at a time), re-reads each deployment and keeps only those
   still serving the regressed revision;
2. ``roll_back``: one :class:`~airflow_provider.operators.rollback.RollbackDeploymentOperator` per regression (mapped),
   back to the revision that served before, refused if a newer revision than the regressed one went out meanwhile;
   the rollback is recorded before it is sent and a retry never rolls back twice;
3. ``report``: records the guard's verdict on the regressed revision ("rolled back by the guard, 7 h 12 min after
   landing, correctness 0.61 against 0.88", in the revision's marks in the Rollouts view) and sends the ``regressed``
   notification.

Airflow reads DAGs from its DAG bundles, not from installed packages, so enable it with a file in the DAGs folder::

    from airflow_provider.plugins.rollouts.guard_dag import guard_dag

    guard_dag()  # conn_id="deployment_service_default"
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider.analysis.guard import GUARD_KEY_PREFIX, claim_key, guard_key
from airflow_provider.defaults import DEFAULT_CONN_ID
from airflow_provider.operators.rollback import RollbackDeploymentOperator
from airflow_provider.triggers.deployment_service import REGRESSED, DeploymentGuardTrigger

__all__ = [
    "ALERT_BUCKET_SECONDS",
    "ALERT_KEY_PREFIX",
    "GUARD_DAG_ID",
    "confirmed_regressions",
    "guard_asset",
    "guard_dag",
    "regressions_of",
]

GUARD_DAG_ID = "deployment_service_guard"
"""The guard DAG's id for the default connection (another connection's adds ``__<conn id>``)."""
ALERT_KEY_PREFIX = "deployment_service_guard_alert"
"""Variable key prefix of the tracing-service alerts taken (``<prefix>:<rule>:<bucket>``)."""
ALERT_BUCKET_SECONDS = 3600.0
"""An alert rule starts at most one rollback per deployment per bucket of this many seconds."""


def guard_asset(
    conn_id: str = DEFAULT_CONN_ID, *, poll_interval: float = 60.0, name: str | None = None, **trigger_kwargs: Any
) -> Asset:
    """The guard's asset of ``conn_id``, watched by its :class:`DeploymentGuardTrigger`: the asset its
    ``revision_regressed`` events (and a tracing service's alerts) arrive on.

    :param conn_id: the deployment-service connection.
    :param poll_interval: seconds between two looks of the guard.
    :param name: the asset's name (default ``deployment_service_guard__<conn_id>``).
    :param trigger_kwargs: more trigger arguments (the hook overrides).
    """
    trigger = DeploymentGuardTrigger(deployment_service_conn_id=conn_id, poll_interval=poll_interval, **trigger_kwargs)
    name = name or f"{GUARD_KEY_PREFIX}__{conn_id}"
    return Asset(name=name, uri=name, watchers=[AssetWatcher(name=f"{name}__watcher", trigger=trigger)])


def _payload(event: Any) -> Mapping[str, Any] | None:
    extra = event if isinstance(event, Mapping) else getattr(event, "extra", None)
    if not isinstance(extra, Mapping):
        return None
    if extra.get("from_trigger") and isinstance(extra.get("payload"), Mapping):
        return extra["payload"]
    return extra


def regressions_of(events: Iterable[Any], *, guards: Mapping[str, Any], taken: Any, log: Any) -> list[dict[str, Any]]:
    """The regressions ``events`` announce, each (deployment, revision) once: the guard's ``revision_regressed``
    events, and tracing-service alerts (an asset event posted with ``extra`` ``{"kind": "alert", "rule": ...,
    "deployment_id": ..., "fired_at": ...}``) for a guarded deployment, one per rule and
    :data:`ALERT_BUCKET_SECONDS` bucket (``taken(rule, bucket)`` says whether it is new and takes it).

    :param events: the run's asset events (or their ``extra`` dicts).
    :param guards: the guard records by deployment id (an alert rolls back the revision its guard guards).
    :param taken: ``taken(rule, bucket) -> bool``: ``True`` when the alert's bucket was free (and is now taken).
    :param log: the task's logger.
    """
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        payload = _payload(event)
        if payload is None:
            continue
        if payload.get("kind") == REGRESSED and payload.get("deployment_id") and payload.get("revision_id"):
            found.setdefault((str(payload["deployment_id"]), str(payload["revision_id"])), dict(payload))
        elif payload.get("kind") == "alert" and payload.get("rule") and payload.get("deployment_id"):
            guard = guards.get(str(payload["deployment_id"]))
            if not isinstance(guard, Mapping):
                log.info(
                    "Alert %r about deployment %s: not guarded, ignored", payload["rule"], payload["deployment_id"]
                )
                continue
            fired = _timestamp(payload.get("fired_at"))
            bucket = math.floor(fired / ALERT_BUCKET_SECONDS)
            if not taken(f"{payload['rule']}:{payload['deployment_id']}", bucket):
                log.info("Alert %r already handled in this bucket", payload["rule"])
                continue
            found.setdefault(
                (str(guard["deployment_id"]), str(guard["revision_id"])),
                {
                    "kind": REGRESSED,
                    "origin": "alert",
                    "rule": str(payload["rule"]),
                    "deployment_id": guard["deployment_id"],
                    "deployment_name": guard.get("deployment_name"),
                    "revision_id": guard["revision_id"],
                    "previous_revision_id": guard.get("previous_revision_id"),
                    "landed_at": guard.get("landed_at"),
                    "message": f"rolled back on the tracing service's alert {payload['rule']!r}",
                    "measurements": [],
                },
            )
    return list(found.values())


def _timestamp(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


def confirmed_regressions(
    regressions: Iterable[Mapping[str, Any]], *, read: Any, claims: Any, run_id: str, log: Any
) -> list[dict[str, Any]]:
    """The rollbacks to make: each regression not handled by another run (its claim marked ``handled_by`` here),
    whose deployment still serves the regressed revision and has a revision to return to; as the rollback task's
    arguments.

    :param regressions: :func:`regressions_of`.
    :param read: ``read(deployment_id) -> Deployment`` (the hook's ``get_deployment``).
    :param claims: ``get(key)`` / ``set(key, value)`` of the claims (Airflow's ``Variable`` with JSON).
    :param run_id: this run.
    :param log: the task's logger.
    """
    confirmed = []
    for regression in regressions:
        deployment_id, revision_id = str(regression["deployment_id"]), str(regression["revision_id"])
        key = claim_key(deployment_id, revision_id)
        claim = claims.get(key) or {}
        handled = claim.get("handled_by") if isinstance(claim, Mapping) else None
        if handled and handled != run_id:
            log.info("Regression of revision %s was handled by run %s already", revision_id, handled)
            continue
        previous = regression.get("previous_revision_id")
        if not previous:
            log.warning("Regression of revision %s: no revision served before it, nothing to roll back to", revision_id)
            continue
        deployment = read(deployment_id)
        if deployment.active_revision_id != revision_id:
            log.info(
                "Revision %s of %r regressed but no longer serves (revision %s does): nothing to roll back",
                revision_id,
                deployment.name,
                deployment.active_revision_id,
            )
            continue
        claims.set(key, {**(claim if isinstance(claim, Mapping) else {}), "handled_by": run_id})
        log.warning("Rolling %r back from %s to %s: %s", deployment.name, revision_id, previous, regression["message"])
        confirmed.append(
            {
                "deployment_id": deployment_id,
                "revision_id": str(previous),
                "rolling_back_from": revision_id,
                "requested_by": "the guard",
                "requested_from": str(regression.get("message") or "the guard")[:200],
            }
        )
    return confirmed


class _JsonVariables:
    """Airflow Variables as JSON (the claims and the alert buckets)."""

    @staticmethod
    def get(key: str) -> Any:
        from airflow.sdk import Variable

        return Variable.get(key, default=None, deserialize_json=True)

    @staticmethod
    def set(key: str, value: Any) -> None:
        from airflow.sdk import Variable

        Variable.set(key, value, serialize_json=True)


def guard_dag(
    *,
    conn_id: str = DEFAULT_CONN_ID,
    poll_interval: float = 60.0,
    notify: Mapping[str, Any] | None = None,
    rollback_poll_interval: float = 15.0,
    timeout: float = 1800.0,
    retries: int = 2,
    **dag_kwargs: Any,
) -> DAG:
    """The guard's DAG for ``conn_id``: build it at the top level of a DAG file (see the module).

    :param conn_id: the deployment-service connection whose guarded revisions it rolls back.
    :param poll_interval: seconds between two looks of the guard (its trigger's interval).
    :param notify: ``{"regressed": notifier or [notifiers]}`` (and ``rolled_back``), Airflow ``BaseNotifier`` s.
    :param rollback_poll_interval: seconds between looks while the restored revision goes live.
    :param timeout: longest wait for it to serve, in seconds.
    :param retries: the rollback task's retries (a retry reattaches to the rollback its earlier try sent).
    :param dag_kwargs: more ``DAG`` arguments (``tags``...); ``dag_id`` defaults to ``deployment_service_guard``
        (``deployment_service_guard__<conn_id>`` for another connection; another ``dag_id`` watches an asset of its
        own, ``deployment_service_guard__<dag_id>``). Not paused upon creation by default.
    """
    from airflow_provider.tasks.notify import checked_notify

    notifiers = checked_notify(notify)
    default_id = GUARD_DAG_ID if conn_id == DEFAULT_CONN_ID else f"{GUARD_DAG_ID}__{conn_id}"
    dag_kwargs.setdefault("dag_id", default_id)
    # A second guard DAG of one connection (another dag_id) watches an asset of its own.
    asset_name = None if dag_kwargs["dag_id"] == default_id else f"{GUARD_KEY_PREFIX}__{dag_kwargs['dag_id']}"
    dag_kwargs.setdefault("tags", ["deployment-service", "guard"])
    dag_kwargs.setdefault("is_paused_upon_creation", False)
    with DAG(
        schedule=[guard_asset(conn_id, poll_interval=poll_interval, name=asset_name)],
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # one run at a time: a second run sees the first's rollback and claim
        doc_md=__doc__,
        **dag_kwargs,
    ) as dag:

        @task(task_id="confirm")
        def confirm(**context: Any) -> list[dict[str, Any]]:
            import logging

            from airflow.sdk import Variable

            from airflow_provider.hooks.deployment_service import DeploymentServiceHook

            log = logging.getLogger("airflow.task")
            events = [event for found in context["triggering_asset_events"].values() for event in found]
            # A regression replayed by hand (or by the demo): the run's conf ``{"regressions": [payload...]}``.
            conf = getattr(context.get("dag_run"), "conf", None) or {}
            events.extend(item for item in conf.get("regressions") or [] if isinstance(item, Mapping))
            guards = {}
            for key in Variable.keys(f"{GUARD_KEY_PREFIX}:{conn_id}:"):
                value = _JsonVariables.get(key)
                if isinstance(value, Mapping):
                    guards[str(value.get("deployment_id"))] = value

            def taken(rule: str, bucket: int) -> bool:
                key = f"{ALERT_KEY_PREFIX}:{rule}:{bucket}"
                if _JsonVariables.get(key) is not None:
                    return False
                _JsonVariables.set(key, {"run_id": context["run_id"], "at": round(time.time(), 3)})
                return True

            regressions = regressions_of(events, guards=guards, taken=taken, log=log)
            hook = DeploymentServiceHook(deployment_service_conn_id=conn_id)
            try:
                chosen = confirmed_regressions(
                    regressions, read=hook.get_deployment, claims=_JsonVariables, run_id=context["run_id"], log=log
                )
            finally:
                hook.close()
            context["ti"].xcom_push(key="regressions", value=[r for r in regressions if _chosen(r, chosen)])
            return chosen

        @task(task_id="report", trigger_rule="all_done")
        def report(**context: Any) -> list[dict[str, Any]]:
            import logging

            from airflow.sdk import Variable

            from airflow_provider.decisions.record import Kind, entry
            from airflow_provider.hooks.deployment_service import DeploymentServiceHook
            from airflow_provider.tasks.notify import deployment_view_url, rollout_event, send_notifications
            from airflow_provider.tasks.recording import record_entries

            log = logging.getLogger("airflow.task")
            regressions = context["ti"].xcom_pull(task_ids="confirm", key="regressions") or []
            hook = DeploymentServiceHook(deployment_service_conn_id=conn_id)
            done = []
            try:
                for regression in regressions:
                    deployment = hook.get_deployment(str(regression["deployment_id"]))
                    back = deployment.active_revision_id != regression["revision_id"]
                    verdict = {
                        "verdict": "failed",
                        "failing_check": regression.get("failing_check"),
                        "reason": regression.get("reason") or regression.get("message"),
                        "measurements": list(regression.get("measurements") or []),
                    }
                    message = str(regression.get("message"))
                    if not back:
                        message += " (the rollback did not finish: see the roll_back task)"
                    # Dated at the regression: the DORA time to restore counts from it.
                    found_at = _timestamp(regression.get("regressed_at"))
                    verdict_entry = entry(
                        Kind.REJECTED,
                        regression["deployment_id"],
                        regression["revision_id"],
                        at=found_at,
                        previous_revision_id=regression.get("previous_revision_id"),
                        step="guard",
                        verdict=verdict,
                        message=message,
                    )
                    record_entries(context, log, [verdict_entry])
                    event = rollout_event(
                        "regressed",
                        deployment_id=regression["deployment_id"],
                        revision_id=regression["revision_id"],
                        deployment_name=regression.get("deployment_name"),
                        previous_revision_id=regression.get("previous_revision_id"),
                        reason=message,
                        analysis=verdict,
                        view_url=deployment_view_url(regression["deployment_id"], conn_id),
                    )
                    send_notifications(notifiers, event, context, log)
                    guarded = _JsonVariables.get(guard_key(conn_id, str(regression["deployment_id"])))
                    if (
                        back
                        and isinstance(guarded, Mapping)
                        and guarded.get("revision_id") == regression["revision_id"]
                    ):
                        Variable.delete(guard_key(conn_id, str(regression["deployment_id"])))  # its guard is over
                    done.append({"deployment_id": regression["deployment_id"], "rolled_back": back, "message": message})
            finally:
                hook.close()
            return done

        chosen = confirm()
        rolled = RollbackDeploymentOperator.partial(
            task_id="roll_back",
            deployment_service_conn_id=conn_id,
            poll_interval=rollback_poll_interval,
            timeout=timeout,
            retries=retries,
            retry_delay=timedelta(seconds=10),
        ).expand_kwargs(chosen)
        rolled >> report()
    return dag


def _chosen(regression: Mapping[str, Any], chosen: list[dict[str, Any]]) -> bool:
    return any(
        item["deployment_id"] == str(regression["deployment_id"])
        and item["rolling_back_from"] == str(regression["revision_id"])
        for item in chosen
    )
