"""Wait for every rollout of one wave of a fleet rollout (:class:`FleetWaveTrigger`), through the shared
batched poller of :mod:`~airflow_provider.triggers.poller`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.decisions.fleet_progress import WaveTracker
from airflow_provider.decisions.rollout import RevisionCheckSchedule
from airflow_provider.defaults import DEFAULT_POLL_INTERVAL, DEFAULT_REVISION_CHECK_INTERVAL
from airflow_provider.models import canonical_uuid
from airflow_provider.triggers import serialized_classpath
from airflow_provider.triggers.poller import _BatchPoller, _Subscription, next_update

__all__ = [
    "FleetWaveTrigger",
]


class FleetWaveTrigger(BaseTrigger):
    """Wait for every rollout of one wave of a fleet rollout, through the shared :class:`_BatchPoller`.

    One trigger per wave, not one per deployment: each rollout of the wave subscribes to the poller that
    every rollout trigger with the same hook settings and poll interval shares, so a wave of N costs
    ``ceil(N / 100)`` list requests per interval (plus the revision endpoint's budget), however many
    waves and other rollouts wait in the same triggerer. A rollout is decided as in
    :class:`~airflow_provider.decisions.fleet_progress.WaveTracker` (live for ``bake_seconds``, or failed). With no
    rollouts the trigger only sleeps until ``resume_at`` (the pause between waves).

    Yields exactly one event: ``{"status": "done", "wave": ..., "outcomes": {deployment_id: [outcome,
    message, decided_at]}, "carry": ...}``; ``{"status": "paused", "wave": ..., "carry": ...}`` after a
    pause; or ``{"status": "error", "wave": ..., "message": ..., "carry": ...}`` when the wave cannot be
    watched (a bad connection, a 4xx from the list endpoint).

    :param wave: index of the wave (echoed in the event).
    :param rollouts: ``[[deployment_id, revision_id or None], ...]``; a third item, when given, is a newer
        revision allowed to stay the deployment's latest while ``revision_id`` goes live (a rollback
        redeployed without a new revision).
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param poll_interval: seconds between two looks.
    :param deadline: wall-clock time (Unix seconds) by which every revision must be live; ``None`` waits
        forever.
    :param bake_seconds: how long a live revision must stay live before it counts as landed.
    :param revision_check_interval: longest time between two revision-endpoint calls while nothing changes.
    :param resume_at: wall-clock time to wait for before anything else (a pause).
    :param carry: plain JSON echoed in the event (the task's progress when it has no task state store).
    """

    def __init__(
        self,
        wave: int,
        rollouts: list[list[str | None]] | list[tuple[str, str | None]],
        hook_params: dict[str, Any],
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        deadline: float | None = None,
        bake_seconds: float = 0.0,
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        resume_at: float | None = None,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.wave = int(wave)
        self.rollouts = [
            [
                str(item[0]),
                None if item[1] is None else str(item[1]),
                *([str(item[2])] if len(item) > 2 and item[2] else []),
            ]
            for item in rollouts
        ]
        self.hook_params = dict(hook_params)
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.bake_seconds = float(bake_seconds)
        self.revision_check_interval = float(revision_check_interval)
        self.resume_at = None if resume_at is None else float(resume_at)
        self.carry = carry

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret: the API key stays in the connection)."""
        return (
            serialized_classpath(self, FleetWaveTrigger),
            {
                "wave": self.wave,
                "rollouts": [list(item) for item in self.rollouts],
                "hook_params": dict(self.hook_params),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "bake_seconds": self.bake_seconds,
                "revision_check_interval": self.revision_check_interval,
                "resume_at": self.resume_at,
                "carry": self.carry,
            },
        )

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "wave": self.wave, **payload, "carry": self.carry})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Pause until ``resume_at``, then watch the wave until every rollout is decided; one event."""
        if self.resume_at is not None:
            await asyncio.sleep(max(0.0, self.resume_at - time.time()))
        if not self.rollouts:
            yield self._event("paused")
            return
        try:
            if self.poll_interval <= 0:
                raise ValueError(f"poll_interval must be > 0 seconds, got {self.poll_interval}")
            rollouts = {
                canonical_uuid(item[0], "deployment_id"): (
                    None if item[1] is None else canonical_uuid(item[1], "revision_id")
                )
                for item in self.rollouts
            }
            allowed_latest = {
                canonical_uuid(item[0], "deployment_id"): canonical_uuid(item[2], "allowed latest revision_id")
                for item in self.rollouts
                if len(item) > 2 and item[2]
            }
            subscriptions = {
                deployment_id: _Subscription(
                    deployment_id, revision_id, RevisionCheckSchedule(self.revision_check_interval)
                )
                for deployment_id, revision_id in rollouts.items()
            }
        except ValueError as err:
            yield self._event("error", message=f"invalid trigger arguments: {err}")
            return
        tracker = WaveTracker(rollouts, self.bake_seconds, self.deadline, allowed_latest)
        poller = _BatchPoller.acquire(self.hook_params, self.poll_interval)
        for subscription in subscriptions.values():
            poller.subscribe(subscription)
        try:
            error = await self._watch(poller, subscriptions, tracker)
        finally:
            # Leave before yielding: the triggerer may never resume the generator after the event.
            for subscription in subscriptions.values():
                await poller.unsubscribe(subscription)
        if error is not None:
            yield self._event("error", message=error)
            return
        outcomes = {deployment_id: list(decision) for deployment_id, decision in tracker.decided.items()}
        yield self._event("done", outcomes=outcomes)

    async def _watch(
        self, poller: _BatchPoller, subscriptions: dict[str, _Subscription], tracker: WaveTracker
    ) -> str | None:
        """Read one update per round for every undecided rollout until all are decided; an error message
        when the wave cannot be watched."""
        final_requested = False
        while not tracker.done:
            waiting = tracker.undecided
            timeout = None
            if self.deadline is not None and not final_requested:
                timeout = max(0.0, self.deadline - time.time())
            try:
                first = await next_update(subscriptions[waiting[0]].queue, timeout)
            except asyncio.TimeoutError:
                for deployment_id in waiting:
                    poller.request_final_check(subscriptions[deployment_id])
                final_requested = True
                continue
            # Every subscriber got this round's update at once: the others are already queued.
            updates = {waiting[0]: first}
            for deployment_id in waiting[1:]:
                updates[deployment_id] = await subscriptions[deployment_id].queue.get()
            for deployment_id, update in updates.items():
                if update.error is not None:
                    return f"cannot watch wave {self.wave} ({len(waiting)} rollout(s) undecided): {update.error}"
                final = self.deadline is not None and update.started >= self.deadline
                if update.transient is not None:
                    if final:
                        tracker.give_up(
                            deployment_id, f"timed out; the final check failed: {update.transient}", update.started
                        )
                    continue
                subscription = subscriptions[deployment_id]
                changed = tracker.observe(
                    deployment_id, update.deployment, subscription.revision, update.started, final=final
                )
                if changed is not None:
                    self.log.info("%s", changed)
                if deployment_id in tracker.decided:
                    await poller.unsubscribe(subscription)
        return None
