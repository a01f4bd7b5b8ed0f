"""Telling people about a rollout: the ``notify={...}`` argument of the patch and fleet tasks, sent through Airflow's
notifiers (:class:`airflow.sdk.BaseNotifier`: Slack, SMTP and the others, from their own providers).

Each lifecycle event (:data:`EVENTS`) is sent to the notifiers given for it, with the task's context and
``rollout_event`` added to it: the event's name, the deployment, the revision, the one before, why, the latest
measurements and a link to the Rollouts view, and ``message``, all of it in one text. A notifier's template fields
are rendered against that context (``SlackNotifier(text="{{ rollout_event.message }}")``), on a copy of the notifier
each time, so one notifier serves every event of a task. A notifier that fails is logged and never fails the rollout.
Nothing secret goes in: the texts are the ones the task shows (already scrubbed), scrubbed again with the task's
secret values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from airflow.sdk import BaseNotifier

from airflow_provider.client.error_text import scrub
from airflow_provider.defaults import DEFAULT_CONN_ID, VIEW_URL_PREFIX
from airflow_provider.tasks.base import DeploymentServiceBaseTask

if TYPE_CHECKING:
    import logging

__all__ = [
    "CONTEXT_KEY",
    "EVENTS",
    "MEASUREMENTS_SHOWN",
    "NotifiedRecord",
    "Notifying",
    "RolloutNotifying",
    "checked_notify",
    "deployment_view_url",
    "rollout_event",
    "send_notifications",
]

EVENTS = (
    "rolled_out",
    "analysis_failed",
    "rolled_back",
    "inconclusive",
    "fleet_aborted",
    "preflight_failed",
    "regressed",
)
"""The events a task can notify (``notify``'s keys):

- ``rolled_out``: the revision is live and passed what judged it;
- ``analysis_failed``: the analysis judged the revision failed (or inconclusive, counted as failed);
- ``rolled_back``: the revision was rolled back, and the one before serves again;
- ``inconclusive``: the analysis was inconclusive and the task asks a person (its ``on_inconclusive`` is
  ``"ask"``; the fleet task sends one per deployment of the wave it asks about);
- ``fleet_aborted``: a fleet rollout stopped before the end (its failure budget spent, a failed canary, or an
  abort from the Rollouts view: ``aborted_by`` names the user);
- ``preflight_failed``: a check before the rollout refused it (the analysis's sources, the fleet's targets):
  nothing was changed;
- ``regressed``: a landed revision's guard found it regressed, and the guard's DAG rolled it back
  (:func:`~airflow_provider.plugins.rollouts.guard_dag.guard_dag`)."""
CONTEXT_KEY = "rollout_event"
"""The key under which a notifier finds the event in its context (``{{ rollout_event.message }}``)."""
MEASUREMENTS_SHOWN = 6
"""Most measurements a notification names (the latest)."""
_HEADLINES = {
    "rolled_out": "rolled out",
    "analysis_failed": "failed its analysis",
    "rolled_back": "rolled back",
    "inconclusive": "analysis inconclusive: waiting for a person",
    "fleet_aborted": "fleet rollout aborted",
    "preflight_failed": "refused before the rollout",
    "regressed": "regressed after landing: rolled back by its guard",
}


def checked_notify(notify: Any) -> dict[str, list[BaseNotifier]]:
    """``notify`` as ``{event: [notifiers]}``, checked when the task is built: every key one of :data:`EVENTS`,
    every value a ``BaseNotifier`` or a list of them.

    :param notify: the task's ``notify`` argument (``None``: no notification).
    """
    if notify is None:
        return {}
    if not isinstance(notify, Mapping):
        raise ValueError(
            f"notify must be a dict of event to notifier(s), e.g. {{'rolled_back': SlackNotifier(...)}}; "
            f"got {type(notify).__name__}"
        )
    checked: dict[str, list[BaseNotifier]] = {}
    for event, given in notify.items():
        if event not in EVENTS:
            raise ValueError(f"notify has an unknown event {event!r}; expected some of {', '.join(EVENTS)}")
        notifiers = list(given) if isinstance(given, (list, tuple)) else [given]
        for notifier in notifiers:
            if not isinstance(notifier, BaseNotifier):
                raise ValueError(
                    f"notify[{event!r}] must be an airflow.sdk.BaseNotifier (or a list of them), "
                    f"got {type(notifier).__name__}"
                )
        checked[event] = notifiers
    return checked


def deployment_view_url(deployment_id: str | None, conn_id: str | None) -> str | None:
    """The absolute URL of the deployment's page in the Rollouts view (``[api] base_url`` and the view's path), or
    ``None`` without a deployment.

    :param deployment_id: the deployment.
    :param conn_id: the task's connection (the view's ``conn_id``).
    """
    if not deployment_id:
        return None
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "http://localhost:8080").rstrip("/")
    url = f"{base}{VIEW_URL_PREFIX}/deployments/{quote(str(deployment_id), safe='')}"
    if conn_id and conn_id != DEFAULT_CONN_ID:
        url += f"?conn_id={quote(conn_id, safe='')}"
    return url


def _measurement_text(item: Mapping[str, Any]) -> str:
    value = item.get("value")
    shown = "no value" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)
    return f"{item.get('check')} = {shown} ({item.get('condition')}: {item.get('verdict')}, round {item.get('round')})"


def rollout_event(
    event: str,
    *,
    deployment_id: str | None,
    revision_id: str | None,
    deployment_name: str | None = None,
    previous_revision_id: str | None = None,
    reason: str | None = None,
    analysis: Mapping[str, Any] | None = None,
    view_url: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The event as notifiers get it (plain JSON): its fields and ``message``, one text naming all of them.

    :param event: one of :data:`EVENTS`.
    :param deployment_id: the deployment (``None`` for a fleet's event about no one deployment).
    :param revision_id: the revision the event is about.
    :param deployment_name: the deployment's name, when known.
    :param previous_revision_id: the revision that served before (for a rollback: the one it returned to).
    :param reason: why (a failure's or the question's reason).
    :param analysis: the analysis result (verdict, failing check, reason, measurements), when one decided.
    :param view_url: the link to the Rollouts view.
    :param extra: more fields (a fleet's counts), shown after the reason.
    """
    measurements = list((analysis or {}).get("measurements") or [])[-MEASUREMENTS_SHOWN:]
    who = f"{deployment_name} ({deployment_id})" if deployment_name else deployment_id or "fleet"
    lines = [f"Deployment {who}: {_HEADLINES[event]}"]
    if revision_id:
        lines[0] += f", revision {revision_id}"
    if previous_revision_id:
        lines.append(f"Previous revision: {previous_revision_id}")
    if reason:
        lines.append(f"Why: {reason}")
    for key, value in (extra or {}).items():
        lines.append(f"{key.replace('_', ' ').capitalize()}: {value}")
    if analysis is not None:
        lines.append(f"Analysis: {analysis.get('verdict')}")
    lines.extend(f"- {_measurement_text(item)}" for item in measurements)
    if view_url:
        lines.append(f"Rollouts view: {view_url}")
    return {
        "event": event,
        "deployment_id": deployment_id,
        "deployment_name": deployment_name,
        "revision_id": revision_id,
        "previous_revision_id": previous_revision_id,
        "reason": reason,
        "verdict": (analysis or {}).get("verdict"),
        "measurements": [dict(item) for item in measurements],
        "view_url": view_url,
        **dict(extra or {}),
        "message": "\n".join(lines),
    }


def _scrubbed(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        return scrub(value, tuple(secrets))
    if isinstance(value, Mapping):
        return {key: _scrubbed(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item, secrets) for item in value]
    return value


def send_notifications(
    notifiers: Mapping[str, Sequence[BaseNotifier]],
    event: Mapping[str, Any],
    context: Mapping[str, Any],
    log: logging.Logger | Any,
    secret_values: Callable[[], Sequence[str] | None] = lambda: (),
) -> int:
    """Send ``event`` to the notifiers given for it; a notifier that fails is logged (its error's type and
    scrubbed text), never raised. Returns how many notifiers were called without error.

    :param notifiers: the task's ``notify`` (:func:`checked_notify`).
    :param event: :func:`rollout_event`.
    :param context: the task's context (each notifier gets a copy, with ``rollout_event``).
    :param log: the task's logger.
    :param secret_values: the task's secret values, scrubbed from the event and from a notifier's error.
    """
    given = notifiers.get(str(event.get("event"))) or []
    if not given:
        return 0
    secrets = [value for value in (secret_values() or ()) if value]
    shown = _scrubbed(dict(event), secrets)
    sent = 0
    for notifier in given:
        try:
            _send(copy.copy(notifier), {**dict(context), CONTEXT_KEY: shown})
        except Exception as err:  # a notification never fails the rollout
            log.warning(
                "Could not send the %r notification through %s (%s: %s); the rollout goes on",
                shown["event"],
                type(notifier).__name__,
                type(err).__name__,
                scrub(str(err), tuple(secrets)),
            )
            continue
        sent += 1
    if sent:
        log.info("Sent the %r notification to %d notifier(s)", shown["event"], sent)
    return sent


def _send(notifier: BaseNotifier, context: dict[str, Any]) -> None:
    """What ``notifier(context)`` does (its template fields rendered against ``context``, then ``notify``), without
    ``BaseNotifier.__call__``'s own log of a failure: that one shows the error unscrubbed."""
    update = getattr(notifier, "_update_context", None)
    if callable(update):
        update(context)
    notifier.render_template_fields(context)  # type: ignore[arg-type]
    notifier.notify(context)  # type: ignore[arg-type]


class Notifying(Protocol):
    """A task that notifies (:class:`RolloutNotifying`)."""

    def _notify(
        self,
        context: Mapping[str, Any],
        event: str,
        *,
        deployment_id: str | None,
        revision_id: str | None,
        **fields: Any,
    ) -> None: ...


class NotifiedRecord:
    """A task's notifications sent, across tries, in ``task_state_store`` under ``key`` (in memory only without a
    store): each event is recorded before it is sent, so a retry never sends it again (a try that dies between the
    two loses it rather than sending it twice).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param log: the task's logger.
    :param key: the key in ``task_state_store`` (``{"sent": [event key, ...]}``).
    """

    def __init__(self, store: Any, log: logging.Logger | Any, *, key: str) -> None:
        self.store, self.log, self.key = store, log, key
        self.sent: set[str] = set()
        if store is not None:
            try:
                value = store.get(self.key)
            except Exception as err:  # sent again rather than never
                self.log.warning("Could not read the notifications sent from task_state_store (%s)", err)
                value = None
            if isinstance(value, Mapping):
                self.sent = {str(key) for key in value.get("sent") or []}

    def claim(self, keys: list[str]) -> list[str]:
        """Of ``keys`` (one per event), those not sent yet, recorded as sent (one write) before they are sent.

        :param keys: the events about to be sent.
        """
        new = [key for key in dict.fromkeys(keys) if key not in self.sent]
        if not new:
            return []
        self.sent.update(new)
        if self.store is not None:
            try:
                self.store.set(self.key, {"sent": sorted(self.sent)})
            except Exception as err:  # a retry may send them again
                self.log.warning("Could not record the notifications sent in task_state_store (%s)", err)
        return new

    def notify_once(self, task: Notifying, context: Mapping[str, Any], key: str, event: str, **fields: Any) -> None:
        """Send ``event`` (``task._notify``'s fields) unless the event ``key`` names was sent by this or an earlier try.

        :param task: the task.
        :param context: its context.
        :param key: the event's identity across tries.
        :param event: one of :data:`~airflow_provider.tasks.notify.EVENTS`.
        :param fields: ``deployment_id``, ``revision_id`` and the others.
        """
        if self.claim([key]):
            task._notify(context, event, **fields)
        else:
            self.log.info("The %r notification (%s) was sent by an earlier try: not sent again", event, key)


class RolloutNotifying(DeploymentServiceBaseTask):
    """What a task that notifies shares: :meth:`_notify` sends one event to the notifiers its ``notify`` names
    (the task sets ``self.notify = checked_notify(notify)`` when built)."""

    notify: dict[str, list[BaseNotifier]]
    notified_state_key: str | None = None
    """Where in ``task_state_store`` :meth:`_notify` records the events it sent
    (:class:`~airflow_provider.tasks.notify.NotifiedRecord`), so that each (event, deployment, revision, question)
    is sent at most once across tries; ``None``: the task keeps its own record (the fleet task's
    :mod:`~airflow_provider.tasks.fleet.notify`)."""

    def _notify(
        self,
        context: Mapping[str, Any],
        event: str,
        *,
        deployment_id: str | None,
        revision_id: str | None,
        **fields: Any,
    ) -> None:
        """Send ``event`` (see :func:`rollout_event` for ``fields``) to its notifiers, if any; never raises.

        :param context: the task's context.
        :param event: one of :data:`EVENTS`.
        :param deployment_id: the deployment.
        :param revision_id: the revision.
        :param fields: the event's other fields.
        """
        notifiers = getattr(self, "notify", None) or {}
        if not notifiers.get(event):
            return
        if self.notified_state_key is not None:
            extra = fields.get("extra")
            question = extra.get("question_url") if isinstance(extra, Mapping) else None
            about = "/".join(str(part) for part in (event, deployment_id, revision_id, question) if part is not None)
            record = NotifiedRecord(context.get("task_state_store"), self.log, key=self.notified_state_key)
            if not record.claim([about]):
                self.log.info("The %r notification (%s) was sent by an earlier try: not sent again", event, about)
                return
        try:
            payload = rollout_event(
                event,
                deployment_id=deployment_id,
                revision_id=revision_id,
                view_url=deployment_view_url(deployment_id, self.deployment_service_conn_id),
                **fields,
            )
        except Exception as err:  # a notification never fails the rollout
            self.log.warning("Could not build the %r notification (%s: %s)", event, type(err).__name__, err)
            return
        send_notifications(notifiers, payload, context, self.log, self._notified_secrets)

    def _notified_secrets(self) -> Sequence[str]:
        """The task's secret values (scrubbed from notifications); none for a task that sends none."""
        known = getattr(self, "_known_secret_values", None) or getattr(self, "_secret_values", None)
        return (known() if callable(known) else None) or ()
