"""Trigger that waits for a deployment's revision to go live, batching polls across triggers.

Every :class:`DeploymentRolloutTrigger` of one triggerer process (one event loop) with the same hook
settings and poll interval subscribes to one shared :class:`_BatchPoller`. Each interval the poller
asks the list endpoint for up to 100 deployments at once (``deployment_ids``), so N waiting rollouts
cost ``ceil(N / 100)`` list requests per interval instead of N. The optional revision endpoint (fail
fast on a failed build) is asked only for rollouts whose revision is the latest but not yet active:
whenever the deployment changed (a few times per build), and otherwise (first look, and every
``revision_check_interval`` as a safety net) for at most ``ceil(N / 100)`` rollouts per round. A quiet
fleet thus costs at most ``2 * ceil(N / 100)`` requests per interval. A 404/405 from the revision
endpoint switches it off for that poller.
When the last subscriber leaves, the poller task is cancelled and awaited and its client closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider.defaults import DEFAULT_POLL_INTERVAL, DEFAULT_REVISION_CHECK_INTERVAL
from airflow_provider.errors import DeploymentServiceError, InvalidRequestError, TransportError
from airflow_provider.fleet import WaveTracker
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, Revision, canonical_uuid
from airflow_provider.rollout import (
    REVISION_ENDPOINT_MISSING,
    RevisionCheckSchedule,
    RolloutState,
    bake_verdict,
    rollout_verdict,
)

log = logging.getLogger(__name__)

EVENT_STATUSES = ("success", "failed", "timeout", "error")
"""The ``status`` values of a :class:`DeploymentRolloutTrigger` event."""
REVISION_CHECK_CONCURRENCY = 10
"""Revision-endpoint calls one poller makes at the same time."""


# ------------------------------------------------------------------------------------ the poller
@dataclass
class _Update:
    """What one poll round found for one subscriber."""

    round: int
    started: float
    """Wall-clock time the round started (a check made after a deadline counts as the final check)."""
    deployment: Deployment | None = None
    revision: Revision | None = None
    error: Exception | None = None
    """A non-transient failure: the rollout cannot be watched (auth, 4xx, bad connection)."""
    transient: Exception | None = None
    """A transient failure that outlived the client's retries: try again next round."""


@dataclass(eq=False)
class _Subscription:
    """One waiting rollout inside a poller."""

    deployment_id: str
    revision_id: str | None
    schedule: RevisionCheckSchedule
    queue: asyncio.Queue[_Update] = field(default_factory=asyncio.Queue)
    revision: Revision | None = None
    """The awaited revision as the revision endpoint last reported it."""
    final: bool = False
    """The subscriber's deadline passed: its next round is its final check."""


_REGISTRY: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, float], _BatchPoller]] = (
    weakref.WeakKeyDictionary()
)


def active_pollers() -> list[_BatchPoller]:
    """The pollers alive in the running event loop (diagnostics and tests)."""
    return list(_REGISTRY.get(asyncio.get_running_loop(), {}).values())


class _BatchPoller:
    """One polling task shared by every rollout trigger with the same hook settings and poll interval.

    :param key: the registry key (hook settings as JSON, poll interval).
    :param hook_params: arguments recreating the hook.
    :param poll_interval: seconds between rounds.
    """

    def __init__(self, key: tuple[str, float], hook_params: dict[str, Any], poll_interval: float) -> None:
        self.key = key
        self.poll_interval = poll_interval
        self.hook = DeploymentServiceHook(**hook_params)
        self.subscribers: dict[_Subscription, None] = {}
        self.rounds_started = 0
        self.rounds_completed = 0
        self.list_requests = 0
        self.revision_requests = 0
        self.revision_endpoint = True
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._list_failing = False

    @classmethod
    def acquire(cls, hook_params: dict[str, Any], poll_interval: float) -> _BatchPoller:
        """The poller of the running loop for these settings, created if needed."""
        pollers = _REGISTRY.setdefault(asyncio.get_running_loop(), {})
        key = (json.dumps(hook_params, sort_keys=True), float(poll_interval))
        poller = pollers.get(key)
        if poller is None:
            poller = pollers[key] = cls(key, hook_params, poll_interval)
        return poller

    def subscribe(self, subscription: _Subscription) -> None:
        """Add a rollout; it gets an :class:`_Update` from every following round."""
        self.subscribers[subscription] = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"deployment-rollout-poller-{self.poll_interval}s"
            )

    def request_final_check(self, subscription: _Subscription) -> None:
        """Start a round soon; it asks the revision endpoint for ``subscription`` regardless of interval."""
        subscription.final = True
        self._wake.set()

    async def unsubscribe(self, subscription: _Subscription) -> None:
        """Remove a rollout; the last one out stops the task and closes the client."""
        self.subscribers.pop(subscription, None)
        if self.subscribers:
            return
        pollers = _REGISTRY.get(asyncio.get_running_loop(), {})
        if pollers.get(self.key) is self:
            del pollers[self.key]
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.hook.aclose()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.subscribers:
            round_start = loop.time()
            try:
                await self._round()
            except Exception as err:  # a bug must end the waits with an error, not leave them hanging
                log.exception("A rollout poll round failed")
                for sub in list(self.subscribers):
                    sub.queue.put_nowait(_Update(self.rounds_started, time.time(), error=err))
            pause = max(0.0, self.poll_interval - (loop.time() - round_start))  # rounds start every interval
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)
            self._wake.clear()

    async def _round(self) -> None:
        self.rounds_started += 1
        number = self.rounds_started
        started = time.time()
        subscribers = list(self.subscribers)
        ids = list(dict.fromkeys(sub.deployment_id for sub in subscribers))
        chunks = [ids[start : start + MAX_PAGE_SIZE] for start in range(0, len(ids), MAX_PAGE_SIZE)]
        outcomes: list[list[Deployment] | Exception]
        try:
            # Create the client once, before the concurrent calls (they would each create one otherwise).
            await self.hook.get_async_client()
        except Exception as err:  # every subscriber hears it: final for a missing or bad connection only
            outcomes = [err if _is_final_setup_error(err) else _transient_setup_error(err)] * len(chunks)
        else:
            outcomes = list(await asyncio.gather(*(self._list(chunk) for chunk in chunks)))
        found: dict[str, Deployment] = {}
        failures: dict[str, Exception] = {}
        for chunk, outcome in zip(chunks, outcomes, strict=True):
            if isinstance(outcome, Exception):
                failures.update(dict.fromkeys(chunk, outcome))
            else:
                found.update({item.id: item for item in outcome if item.id in chunk})
        await self._check_revisions(subscribers, found)
        for sub in subscribers:
            update = _Update(number, started, deployment=found.get(sub.deployment_id), revision=sub.revision)
            error = failures.get(sub.deployment_id)
            if error is not None and getattr(error, "transient", False):
                update.transient = error
            elif error is not None:
                update.error = error
            sub.queue.put_nowait(update)
        self.rounds_completed = number

    async def _list(self, chunk: list[str]) -> list[Deployment] | Exception:
        self.list_requests += 1
        try:
            page = await self.hook.a_list_deployments(deployment_ids=chunk, limit=MAX_PAGE_SIZE)
        except Exception as err:  # every failure goes to the subscribers; the poller must live on
            if not self._list_failing:
                log.warning("Listing %d deployment(s) failed: %s", len(chunk), err)
            self._list_failing = True
            return err
        if self._list_failing:
            log.info("Listing deployments works again")
        self._list_failing = False
        return page.resources

    async def _check_revisions(self, subscribers: list[_Subscription], found: dict[str, Deployment]) -> None:
        if not self.revision_endpoint:
            return
        wanted: dict[tuple[str, str], list[_Subscription]] = {}
        unhurried: dict[tuple[str, str], list[_Subscription]] = {}
        for sub in subscribers:
            deployment = found.get(sub.deployment_id)
            if deployment is None or not sub.revision_id:
                continue
            reason = sub.schedule.reason(deployment, sub.revision_id, force=sub.final)
            if reason in ("first", "timer"):
                unhurried.setdefault((sub.deployment_id, sub.revision_id), []).append(sub)
            elif reason is not None:  # the deployment changed, or a final check
                wanted.setdefault((sub.deployment_id, sub.revision_id), []).append(sub)
        # First-sight and safety-net calls are spread out: at most one per 100 rollouts per round, never
        # asked first, then longest unasked, so a quiet fleet costs at most as many revision calls per
        # interval as list calls, however many rollouts start at once.
        budget = -(-len(subscribers) // MAX_PAGE_SIZE)
        by_age = sorted(unhurried.items(), key=lambda item: min(sub.schedule.last_asked for sub in item[1]))
        for pair, subs in by_age[:budget]:
            wanted.setdefault(pair, []).extend(subs)
        for subs in wanted.values():
            for sub in subs:
                sub.schedule.mark(found[sub.deployment_id])
        if not wanted:
            return
        limit = asyncio.Semaphore(REVISION_CHECK_CONCURRENCY)

        async def ask(deployment_id: str, revision_id: str) -> Revision | None:
            async with limit:
                if not self.revision_endpoint:
                    return None
                self.revision_requests += 1
                try:
                    return await self.hook.a_get_revision(deployment_id, revision_id)
                except DeploymentServiceError as err:
                    self._revision_failed(err)
                    return None

        results = await asyncio.gather(*(ask(*pair) for pair in wanted))
        for subs, revision in zip(wanted.values(), results, strict=True):
            for sub in subs:
                if revision is not None:
                    sub.revision = revision

    def _revision_failed(self, err: DeploymentServiceError) -> None:
        """Stop asking the revision endpoint only when it is missing (404 for the deployment's own latest
        revision, or 405); any other failure skips this check and leaves fail-fast on for the next."""
        if err.transient or not self.revision_endpoint:
            return
        if err.status_code in REVISION_ENDPOINT_MISSING:
            self.revision_endpoint = False
            log.info("The revision endpoint is not available (%s); watching rollouts through the list only", err)
        else:
            log.warning("The revision endpoint failed (%s); asking again when the deployment changes", err)


def _is_final_setup_error(err: Exception) -> bool:
    """A connection that does not exist or cannot work (waiting will not fix it)."""
    return isinstance(err, (InvalidRequestError, AirflowNotFoundException))


def _transient_setup_error(err: Exception) -> TransportError:
    """Any other failure to resolve the connection (e.g. the API server briefly unreachable)."""
    return TransportError(f"could not resolve the connection yet ({type(err).__name__}: {err}); trying again")


# ---------------------------------------------------------------------------------------- trigger
class DeploymentRolloutTrigger(BaseTrigger):
    """Wait until a deployment's revision is live (``READY`` and active), failing fast when it cannot be.

    Yields exactly one event: ``{"status": "success" | "failed" | "timeout" | "error", "message": ...,
    "deployment_id": ..., "revision_id": ..., "deployment": <redacted deployment JSON or None>}``.

    :param deployment_id: the deployment to watch.
    :param revision_id: the revision that must become active; ``None`` waits only for ``READY``.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param poll_interval: seconds between two looks at the deployment.
    :param deadline: wall-clock deadline (Unix epoch seconds) after which, following one final check,
        the trigger reports ``timeout``; ``None`` waits forever.
    :param revision_check_interval: longest time in seconds between two calls to the revision endpoint
        while the deployment does not change.
    :param seen_key: the ``key`` of the :class:`~airflow_provider.rollout.RolloutVerdict` the deferring task
        last logged: the trigger logs only what changes after it. The outcome itself is not logged here: the
        resumed task logs it (or fails with it), so each waiting line appears once.
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
    ) -> None:
        super().__init__()
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
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "hook_params": dict(self.hook_params),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "revision_check_interval": self.revision_check_interval,
                "seen_key": self.seen_key,
            },
        )

    def _event(self, status: str, message: str, deployment: Deployment | None) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "message": message,
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "deployment": deployment.model_dump(mode="json") if deployment is not None else None,
            }
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
        subscription = _Subscription(self.deployment_id, self.revision_id, schedule)
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
                update = await asyncio.wait_for(subscription.queue.get(), timeout)
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
                update.deployment, self.revision_id, subscription.revision, deployment_id=self.deployment_id
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


class DeploymentBakeTrigger(BaseTrigger):
    """Watch a live revision for a bake period: it must stay active with the deployment ``READY``.

    Looks every ``poll_interval`` seconds (one list request) until the wall-clock ``deadline``, then once
    more. Yields one event: ``{"status": "baked" | "left" | "error", "message": ..., "deployment_id": ...,
    "revision_id": ..., "deployment": <redacted deployment JSON or None>}``: ``left`` as soon as another
    revision is active or the status is not ``READY``. Transient errors are retried until the deadline.

    :param deployment_id: the deployment.
    :param revision_id: the revision that must stay live.
    :param hook_params: :attr:`DeploymentServiceHook.hook_params` (connection id and numeric overrides).
    :param poll_interval: seconds between two looks.
    :param deadline: wall-clock end of the bake (Unix epoch seconds).
    """

    def __init__(
        self,
        deployment_id: str,
        revision_id: str,
        hook_params: dict[str, Any],
        poll_interval: float,
        deadline: float,
    ) -> None:
        super().__init__()
        self.deployment_id = deployment_id
        self.revision_id = revision_id
        self.hook_params = dict(hook_params)
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "hook_params": dict(self.hook_params),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
            },
        )

    def _event(self, status: str, message: str, deployment: Deployment | None) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "message": message,
                "deployment_id": self.deployment_id,
                "revision_id": self.revision_id,
                "deployment": deployment.model_dump(mode="json") if deployment is not None else None,
            }
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


# ------------------------------------------------------------------------------------ fleet wave
class FleetWaveTrigger(BaseTrigger):
    """Wait for every rollout of one wave of a fleet rollout, through the shared :class:`_BatchPoller`.

    One trigger per wave, not one per deployment: each rollout of the wave subscribes to the poller that
    every rollout trigger with the same hook settings and poll interval shares, so a wave of N costs
    ``ceil(N / 100)`` list requests per interval (plus the revision endpoint's budget), however many
    waves and other rollouts wait in the same triggerer. A rollout is decided as in
    :class:`~airflow_provider.fleet.WaveTracker` (live for ``bake_seconds``, or failed). With no rollouts
    the trigger only sleeps until ``resume_at`` (the pause between waves).

    Yields exactly one event: ``{"status": "done", "wave": ..., "outcomes": {deployment_id: [outcome,
    message, decided_at]}, "carry": ...}``; ``{"status": "paused", "wave": ..., "carry": ...}`` after a
    pause; or ``{"status": "error", "wave": ..., "message": ..., "carry": ...}`` when the wave cannot be
    watched (a bad connection, a 4xx from the list endpoint).

    :param wave: index of the wave (echoed in the event).
    :param rollouts: ``[[deployment_id, revision_id or None], ...]``.
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
        self.rollouts = [[str(item[0]), None if item[1] is None else str(item[1])] for item in rollouts]
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
            f"{type(self).__module__}.{type(self).__qualname__}",
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
                canonical_uuid(deployment_id, "deployment_id"): (
                    None if revision_id is None else canonical_uuid(revision_id, "revision_id")
                )
                for deployment_id, revision_id in self.rollouts
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
        tracker = WaveTracker(rollouts, self.bake_seconds, self.deadline)
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
                first = await asyncio.wait_for(subscriptions[waiting[0]].queue.get(), timeout)
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
