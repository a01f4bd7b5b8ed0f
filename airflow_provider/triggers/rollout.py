"""Wait for a deployment's revision to go live (:class:`DeploymentRolloutTrigger`, on the shared batched
poller of :mod:`~airflow_provider.triggers.poller`), and watch a live revision through its bake
(:class:`DeploymentBakeTrigger`). Both yield one event of the same shape."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.decisions.rollout import (
    EVENT_STATUSES,
    RevisionCheckSchedule,
    RolloutState,
    bake_verdict,
    rollout_verdict,
)
from airflow_provider.defaults import DEFAULT_POLL_INTERVAL, DEFAULT_REVISION_CHECK_INTERVAL
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, canonical_uuid
from airflow_provider.triggers import serialized_classpath
from airflow_provider.triggers.poller import _BatchPoller, _Subscription, next_update

__all__ = [
    "EVENT_STATUSES",
    "DeploymentBakeTrigger",
    "DeploymentRolloutTrigger",
]


class _DeploymentEvents:
    """The one event shape of the rollout and bake triggers: status, message, ids and the redacted deployment."""

    deployment_id: str
    revision_id: str | None
    carry: dict[str, Any] | None = None
    """Plain JSON echoed in every event (``"carry"``), when given."""

    def _event(self, status: str, message: str, deployment: Deployment | None) -> TriggerEvent:
        payload = {
            "status": status,
            "message": message,
            "deployment_id": self.deployment_id,
            "revision_id": self.revision_id,
            "deployment": deployment.model_dump(mode="json") if deployment is not None else None,
        }
        if self.carry is not None:
            payload["carry"] = self.carry
        return TriggerEvent(payload)


class DeploymentRolloutTrigger(_DeploymentEvents, BaseTrigger):
    """Wait until a deployment's revision is live (``READY`` and active), failing fast when it cannot be.

    Yields exactly one event: ``{"status": "success" | "failed" | "timeout" | "error", "message": ...,
    "deployment_id": ..., "revision_id": ..., "deployment": <redacted deployment JSON or None>}``, plus
    ``"carry"`` when the trigger was given one.

    :param deployment_id: the deployment to watch.
    :param revision_id: the revision that must become active; ``None`` waits only for ``READY``.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param poll_interval: seconds between two looks at the deployment.
    :param deadline: wall-clock deadline (Unix epoch seconds) after which, following one final check,
        the trigger reports ``timeout``; ``None`` waits forever.
    :param revision_check_interval: longest time in seconds between two calls to the revision endpoint
        while the deployment does not change.
    :param seen_key: the ``key`` of the :class:`~airflow_provider.decisions.rollout.RolloutVerdict` the deferring task
        last logged: the trigger logs only what changes after it. The outcome itself is not logged here: the
        resumed task logs it (or fails with it), so each waiting line appears once.
    :param allowed_latest_revision_id: a newer revision that may stay the deployment's latest while
        ``revision_id`` goes live (an earlier revision redeployed without a new revision); see
        :func:`~airflow_provider.decisions.rollout.rollout_verdict`.
    :param carry: plain JSON echoed in the event (what the resumed task needs: ``airflow dags test`` in
        Airflow 3.3 drops the ``kwargs`` given to ``defer()``).
    """

    def __init__(
        self,
        deployment_id: str,
        revision_id: str | None,
        hook_params: dict[str, Any],
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        deadline: float | None = None,
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        seen_key: list[str | None] | None = None,
        allowed_latest_revision_id: str | None = None,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.allowed_latest_revision_id = allowed_latest_revision_id
        self.carry = carry
        self.seen_key = None if seen_key is None else list(seen_key)
        self.deployment_id = deployment_id
        self.revision_id = revision_id
        self.hook_params = dict(hook_params)
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.revision_check_interval = float(revision_check_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret: the API key stays in the connection)."""
        return (
            serialized_classpath(self, DeploymentRolloutTrigger),
            {
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "hook_params": dict(self.hook_params),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "revision_check_interval": self.revision_check_interval,
                "seen_key": self.seen_key,
                "allowed_latest_revision_id": self.allowed_latest_revision_id,
                "carry": self.carry,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Subscribe to the shared poller until the rollout is decided, then yield one event."""
        try:
            self.deployment_id = canonical_uuid(self.deployment_id, "deployment_id")
            if self.revision_id is not None:
                self.revision_id = canonical_uuid(self.revision_id, "revision_id")
            if self.poll_interval <= 0:
                raise ValueError(f"poll_interval must be > 0 seconds, got {self.poll_interval}")
            schedule = RevisionCheckSchedule(self.revision_check_interval)
        except ValueError as err:
            yield self._event("error", f"invalid trigger arguments: {err}", None)
            return
        poller = _BatchPoller.acquire(self.hook_params, self.poll_interval)
        # news_only: a round that shows nothing new for this rollout does not wake it (its verdict cannot
        # change; the deadline is its own timer, which asks the poller for the final check).
        subscription = _Subscription(self.deployment_id, self.revision_id, schedule, news_only=True)
        poller.subscribe(subscription)
        try:
            event = await self._wait(poller, subscription)
        finally:
            # Leave before yielding: the triggerer may never resume the generator after the event.
            await poller.unsubscribe(subscription)
        yield event

    async def _wait(self, poller: _BatchPoller, subscription: _Subscription) -> TriggerEvent:
        started = time.monotonic()
        last_key: tuple[Any, ...] | None = None if self.seen_key is None else tuple(self.seen_key)
        last_deployment: Deployment | None = None
        final_requested = False
        target = f"revision {self.revision_id}" if self.revision_id else "READY"

        def waited() -> str:
            return f"{time.monotonic() - started:.1f} s"

        while True:
            timeout = None
            if self.deadline is not None and not final_requested:
                timeout = max(0.0, self.deadline - time.time())
            try:
                update = await next_update(subscription.queue, timeout)
            except asyncio.TimeoutError:
                poller.request_final_check(subscription)
                final_requested = True
                continue
            final = self.deadline is not None and update.started >= self.deadline
            if update.error is not None:
                message = f"cannot watch deployment {self.deployment_id} ({target}): {update.error}"
                self.log.error("%s", message)
                return self._event("error", message, last_deployment)
            if update.transient is not None:
                key: tuple[Any, ...] = ("transient", type(update.transient).__name__)
                if key != last_key:
                    self.log.warning(
                        "Deployment %s: the service is unavailable (%s); retrying every %.1f s (waited %s)",
                        self.deployment_id,
                        update.transient,
                        self.poll_interval,
                        waited(),
                    )
                last_key = key
                if final:
                    return self._event(
                        "timeout",
                        f"timed out after {waited()} waiting for deployment {self.deployment_id} ({target}); "
                        f"the final check failed: {update.transient}",
                        last_deployment,
                    )
                continue
            last_deployment = update.deployment or last_deployment
            verdict = rollout_verdict(
                update.deployment,
                self.revision_id,
                subscription.revision,
                deployment_id=self.deployment_id,
                allowed_latest_revision_id=self.allowed_latest_revision_id,
            )
            if verdict.key != last_key and not verdict.is_done:  # the outcome is the resumed task's to log
                self.log.info("%s (waited %s)", verdict.message, waited())
                last_key = verdict.key
            if verdict.state is RolloutState.SUCCEEDED:
                return self._event("success", verdict.message, update.deployment)
            if verdict.state is RolloutState.FAILED:
                return self._event("failed", verdict.message, update.deployment)
            if final:
                return self._event("timeout", f"timed out after {waited()}: {verdict.message}", update.deployment)


class DeploymentBakeTrigger(_DeploymentEvents, BaseTrigger):
    """Watch a live revision for a bake period: it must stay active with the deployment ``READY``.

    Looks every ``poll_interval`` seconds (one list request) until the wall-clock ``deadline``, then once
    more. Yields one event: ``{"status": "baked" | "left" | "error", "message": ..., "deployment_id": ...,
    "revision_id": ..., "deployment": <redacted deployment JSON or None>}`` (plus ``"carry"`` when the
    trigger was given one): ``left`` as soon as another revision is active or the status is not ``READY``.
    Transient errors are retried until the deadline.

    :param deployment_id: the deployment.
    :param revision_id: the revision that must stay live.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param poll_interval: seconds between two looks.
    :param deadline: wall-clock end of the bake (Unix epoch seconds).
    :param carry: plain JSON echoed in the event (what the resumed task needs: ``airflow dags test`` in
        Airflow 3.3 drops the ``kwargs`` given to ``defer()``).
    """

    def __init__(
        self,
        deployment_id: str,
        revision_id: str,
        hook_params: dict[str, Any],
        poll_interval: float,
        deadline: float,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.carry = carry
        self.deployment_id = deployment_id
        self.revision_id: str = revision_id
        self.hook_params = dict(hook_params)
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret)."""
        return (
            serialized_classpath(self, DeploymentBakeTrigger),
            {
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "hook_params": dict(self.hook_params),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                **({"carry": self.carry} if self.carry is not None else {}),
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Look until the deadline; yield ``baked``, ``left`` or ``error``."""
        hook = DeploymentServiceHook(**self.hook_params)
        try:
            yield await self._bake(hook)
        finally:
            await hook.aclose()

    async def _bake(self, hook: DeploymentServiceHook) -> TriggerEvent:
        last: Deployment | None = None
        while True:
            final = time.time() >= self.deadline
            try:
                deployment = await hook.a_get_deployment(self.deployment_id)
            except DeploymentServiceError as err:
                if not err.transient:
                    return self._event("error", f"cannot watch deployment {self.deployment_id}: {err}", last)
                if final:
                    return self._event("error", f"the last check of the bake failed: {err}", last)
                self.log.warning("Deployment %s: the service is unavailable (%s)", self.deployment_id, err)
            else:
                last = deployment
                verdict = bake_verdict(deployment, self.revision_id)
                if verdict is not None:
                    return self._event("left", verdict, deployment)
                if final:
                    return self._event(
                        "baked", f"{deployment.summary()}: revision {self.revision_id} stayed live", deployment
                    )
            await asyncio.sleep(max(0.0, min(self.poll_interval, self.deadline - time.time())))
