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

:class:`DeploymentEventTrigger` (an ``AssetWatcher``'s trigger) joins the same poller: the ids of every
watched deployment go into the same ``deployment_ids`` batches as the waiting rollouts, so W watched
deployments cost ``ceil(W / 100)`` list requests per interval however many watchers share them. Names are
resolved to ids once (and again only while missing); each distinct filter set is listed once per round.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pydantic
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_provider.assets import EVENT_KINDS, event_payload
from airflow_provider.client import DeploymentPaginator
from airflow_provider.defaults import (
    DEFAULT_CONN_ID,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    SETTING_OVERRIDES,
)
from airflow_provider.errors import DeploymentServiceError, InvalidRequestError, TransportError
from airflow_provider.fleet import WaveTracker
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    DeploymentStatus,
    ListDeploymentsQuery,
    Revision,
    canonical_uuid,
)
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
        self.watches: dict[_Watch, None] = {}
        self.rounds_started = 0
        self.rounds_completed = 0
        self.list_requests = 0
        self.revision_requests = 0
        self.revision_endpoint = True
        self._wake = asyncio.Event()
        self._revision_limit = asyncio.Semaphore(REVISION_CHECK_CONCURRENCY)
        self._revision_answers: dict[tuple[str, str, int], asyncio.Future[Revision | None]] = {}
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

    def watch(self, watch: _Watch) -> None:
        """Add a watcher; it gets a :class:`_WatchUpdate` from every following round."""
        self.watches[watch] = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"deployment-rollout-poller-{self.poll_interval}s"
            )

    def request_final_check(self, subscription: _Subscription) -> None:
        """Start a round soon; it asks the revision endpoint for ``subscription`` regardless of interval."""
        subscription.final = True
        self._wake.set()

    async def unsubscribe(self, subscription: _Subscription | _Watch) -> None:
        """Remove a rollout or a watcher; the last one out stops the task and closes the client."""
        if isinstance(subscription, _Watch):
            self.watches.pop(subscription, None)
        else:
            self.subscribers.pop(subscription, None)
        if self.subscribers or self.watches:
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
        while self.subscribers or self.watches:
            round_start = loop.time()
            try:
                await self._round()
            except Exception as err:  # a bug must end the waits with an error, not leave them hanging
                log.exception("A rollout poll round failed")
                for sub in list(self.subscribers):
                    sub.queue.put_nowait(_Update(self.rounds_started, time.time(), error=err))
                for watch in list(self.watches):
                    watch.queue.put_nowait(_WatchUpdate(self.rounds_started, time.time(), error=err))
            pause = max(0.0, self.poll_interval - (loop.time() - round_start))  # rounds start every interval
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)
            self._wake.clear()

    async def _round(self) -> None:
        self.rounds_started += 1
        number = self.rounds_started
        started = time.time()
        subscribers = list(self.subscribers)
        watches = list(self.watches)
        setup_error: Exception | None = None
        try:
            # Create the client once, before the concurrent calls (they would each create one otherwise).
            await self.hook.get_async_client()
        except Exception as err:  # every subscriber hears it: final for a missing or bad connection only
            setup_error = err if _is_final_setup_error(err) else _transient_setup_error(err)
        searches = await self._search(watches) if watches and setup_error is None else _Searches()
        ids = list(dict.fromkeys(sub.deployment_id for sub in subscribers))
        for watch in watches:
            ids.extend(watch.ids_to_list(searches))
        ids = list(dict.fromkeys(ids))
        chunks = [ids[start : start + MAX_PAGE_SIZE] for start in range(0, len(ids), MAX_PAGE_SIZE)]
        outcomes: list[list[Deployment] | Exception]
        if setup_error is not None:
            outcomes = [setup_error] * len(chunks)
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
        for watch in watches:
            if setup_error is not None and not getattr(setup_error, "transient", False):
                watch.queue.put_nowait(_WatchUpdate(number, started, error=setup_error))
                continue
            watch.queue.put_nowait(_WatchUpdate(number, started, found=found, failures=failures, searches=searches))
        self.rounds_completed = number

    async def _search(self, watches: list[_Watch]) -> _Searches:
        """List each distinct filter set (all pages) and look up each name not yet resolved."""
        queries = {watch.query_key: watch.query for watch in watches if watch.query is not None}
        names = list(dict.fromkeys(name for watch in watches for name in watch.unresolved_names()))
        searches = _Searches()

        async def run_query(key: str, query: ListDeploymentsQuery) -> None:
            try:
                searches.queries[key] = await self._iterate(query)
            except Exception as err:  # reported to the watchers of this query
                searches.query_errors[key] = err

        async def run_name(name: str) -> None:
            query = ListDeploymentsQuery(name_contains=name, limit=MAX_PAGE_SIZE)
            try:
                matches = [item for item in await self._iterate(query) if item.name == name]
            except Exception as err:
                searches.name_errors[name] = err
                return
            searches.names[name] = matches[0] if len(matches) == 1 else None

        await asyncio.gather(
            *(run_query(key, query) for key, query in queries.items()), *(run_name(name) for name in names)
        )
        return searches

    async def _iterate(self, query: ListDeploymentsQuery) -> list[Deployment]:
        """Every deployment matching ``query`` over all pages (each page counts as a list request), paged by
        the client's :class:`~airflow_provider.client.DeploymentPaginator`: a server that repeats a page
        ends the listing with an :class:`UnexpectedResponseError` instead of looping."""
        found: list[Deployment] = []
        paginator = DeploymentPaginator(query, max_results=None)
        while not paginator.done:
            self.list_requests += 1
            found.extend(paginator.accept(await self.hook.a_list_deployments(paginator.query)))
        return found

    async def revision(self, deployment_id: str, revision_id: str) -> Revision | None:
        """The revision (``None`` when the endpoint is missing, off or failing); one call per pair per round,
        shared by every watcher asking in the same round."""
        key = (deployment_id, revision_id, self.rounds_started)
        pending = self._revision_answers.get(key)
        if pending is None:
            self._revision_answers = {k: v for k, v in self._revision_answers.items() if k[2] == key[2]}
            pending = self._revision_answers[key] = asyncio.ensure_future(self._ask_revision(*key[:2]))
        return await asyncio.shield(pending)

    async def _ask_revision(self, deployment_id: str, revision_id: str) -> Revision | None:
        if not self.revision_endpoint:
            return None
        async with self._revision_limit:
            self.revision_requests += 1
            try:
                return await self.hook.a_get_revision(deployment_id, revision_id)
            except DeploymentServiceError as err:
                self._revision_failed(err)
                if err.transient:
                    raise
                return None

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
    :param seen_key: the ``key`` of the :class:`~airflow_provider.rollout.RolloutVerdict` the deferring task
        last logged: the trigger logs only what changes after it. The outcome itself is not logged here: the
        resumed task logs it (or fails with it), so each waiting line appears once.
    :param allowed_latest_revision_id: a newer revision that may stay the deployment's latest while
        ``revision_id`` goes live (an earlier revision redeployed without a new revision); see
        :func:`~airflow_provider.rollout.rollout_verdict`.
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
            f"{type(self).__module__}.{type(self).__qualname__}",
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
            f"{type(self).__module__}.{type(self).__qualname__}",
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


# -------------------------------------------------------------------------------- event trigger
CURSOR_KEY_PREFIX = "deployment_event_cursor"
"""Key prefix of a watcher's cursor in the asset state store (one key per set of watched deployments)."""
CURSOR_COMMIT_DELAY = 5.0
"""Seconds between yielding an event and saving the cursor that includes it. The triggerer hands events
to its supervisor about once a second and stores them right after; a cursor saved sooner could get ahead
of an event that is then lost with the process. A crash inside this window repeats the event instead."""
CURSOR_LOAD_ATTEMPTS = 3
"""Attempts to read the cursor before a watcher starts from what it sees (one second apart)."""
DEFAULT_EVENT_POLL_INTERVAL = 60.0
"""Seconds between two looks of a deployment watcher."""
FILTER_NAMES = tuple(name for name in ListDeploymentsQuery.model_fields if name not in ("limit", "offset"))
"""Keys a watcher's ``filters`` may hold (as on the list operator)."""


@dataclass
class _Searches:
    """What one round's filter listings and name lookups found."""

    queries: dict[str, list[Deployment]] = field(default_factory=dict)
    query_errors: dict[str, Exception] = field(default_factory=dict)
    names: dict[str, Deployment | None] = field(default_factory=dict)
    name_errors: dict[str, Exception] = field(default_factory=dict)


@dataclass
class _WatchUpdate:
    """What one poll round found for one watcher (``found`` and ``searches`` are shared, read-only)."""

    round: int
    started: float
    found: dict[str, Deployment] = field(default_factory=dict)
    failures: dict[str, Exception] = field(default_factory=dict)
    searches: _Searches = field(default_factory=_Searches)
    error: Exception | None = None


@dataclass(eq=False)
class _Watch:
    """One watcher inside a poller: what it asks the poller to list each round."""

    ids: list[str]
    names: list[str]
    query: ListDeploymentsQuery | None
    resolved: dict[str, str] = field(default_factory=dict)
    """Name -> id of the deployments found by name."""
    matched: set[str] = field(default_factory=set)
    """Ids the filters matched last round."""
    queue: asyncio.Queue[_WatchUpdate] = field(default_factory=asyncio.Queue)

    @property
    def query_key(self) -> str:
        return "" if self.query is None else json.dumps(self.query.model_dump(mode="json"), sort_keys=True)

    def unresolved_names(self) -> list[str]:
        return [name for name in self.names if name not in self.resolved]

    def ids_to_list(self, searches: _Searches) -> list[str]:
        """Ids for this round's ``deployment_ids`` batches: the given ones, those found by name, and those
        the filters matched before but no longer list (changed or deleted: the batch tells which)."""
        ids = [*self.ids, *self.resolved.values()]
        if self.query is not None and self.query_key in searches.queries:
            listed = {item.id for item in searches.queries[self.query_key]}
            ids.extend(sorted(self.matched - listed))
        return ids


@dataclass
class _Seen:
    """What a watcher last reported of one deployment (one cursor entry)."""

    active: str | None
    status: str | None
    latest: str | None
    updated_at: str | None
    failed: str | None
    name: str | None = None

    def to_json(self) -> list[str | None]:
        return [self.active, self.status, self.latest, self.updated_at, self.failed, self.name]

    @classmethod
    def from_json(cls, value: Any) -> _Seen | None:
        if not isinstance(value, list) or len(value) != 6 or not all(v is None or isinstance(v, str) for v in value):
            return None
        return cls(*value)

    @classmethod
    def of(cls, deployment: Deployment) -> _Seen:
        return cls(
            deployment.active_revision_id,
            deployment.status.value,
            deployment.latest_revision_id,
            deployment.updated_at.isoformat(),
            None,
            deployment.name,
        )


GONE = "gone"
"""Cursor value of a deployment seen deleted (or never found)."""


def _as_names(value: Any, name: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name} must be a non-empty list, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{name} entries must be non-empty strings, got {item!r}")
    return list(dict.fromkeys(item.strip() for item in value))


class DeploymentEventTrigger(BaseEventTrigger):
    """Watch deployments and fire an event when a revision goes live or fails, or a status changes.

    Meant for an ``AssetWatcher`` (event-driven scheduling). Every watcher in a triggerer with the same
    connection settings and ``poll_interval`` shares one poller with each other and with waiting rollouts:
    W watched deployments cost ``ceil(W / 100)`` list requests per interval. Nothing fires for what is
    already there when the watcher first starts; after that, each change fires once, also across a
    triggerer restart: the watcher keeps a cursor (what it last reported per deployment) in Airflow's
    asset state store of the watched asset, saved :data:`CURSOR_COMMIT_DELAY` seconds after the events it
    includes.

    Each event's payload (the asset event's ``extra["payload"]``) has ``kind`` (``revision_live``,
    ``revision_failed``, ``status_changed``, ``deleted``), ``event_id``, ``deployment_id``,
    ``deployment_name``, ``status``, ``previous_status``, ``revision_id`` (active now),
    ``previous_revision_id``, ``latest_revision_id``, ``failed_revision_id``, ``failed_revision_status``,
    ``source_revision_config``, ``deployment_url``, ``updated_at``, ``origin`` (``"watcher"``) and
    ``outcome``; never a secret.

    Give exactly one of ``deployment_ids``, ``deployment_names`` and ``filters``.

    :param deployment_ids: the deployments to watch (UUIDs).
    :param deployment_names: deployments to watch by exact name (resolved to ids once; a name that does
        not exist yet is looked up every interval, one request per missing name).
    :param filters: list filters as on ``ListDeploymentsOperator`` (``name_contains``, ``status``,
        ``remote_reconciled``, ``tag_value_ids``, ``image_version``, ``deployment_type``,
        ``deployment_ids``): every matching deployment is watched, including ones created later.
    :param events: which kinds fire (default: all of ``revision_live``, ``revision_failed``,
        ``status_changed``, ``deleted``). ``revision_failed`` needs the service's revision endpoint and
        stays silent without it.
    :param poll_interval: seconds between two looks.
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls about a
        deployment whose newest revision is not live yet while the deployment record does not change (a
        safety net: a build that fails without touching the deployment is still reported).
    :param deployment_service_conn_id: the Airflow connection.
    :param connect_timeout: overrides the connection's connect timeout (seconds).
    :param read_timeout: overrides the connection's read timeout (seconds).
    :param max_attempts: overrides attempts per API call.
    :param backoff_initial: overrides the first retry backoff (seconds).
    :param backoff_max: overrides the longest retry backoff (seconds).
    :param retry_after_max: overrides the longest ``Retry-After`` honoured (seconds).
    """

    def __init__(
        self,
        *,
        deployment_ids: list[str] | str | None = None,
        deployment_names: list[str] | str | None = None,
        filters: dict[str, Any] | None = None,
        events: list[str] | tuple[str, ...] | str = EVENT_KINDS,
        poll_interval: float = DEFAULT_EVENT_POLL_INTERVAL,
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        deployment_service_conn_id: str = DEFAULT_CONN_ID,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        retry_after_max: float | None = None,
    ) -> None:
        super().__init__()
        given = [
            name
            for name, value in (
                ("deployment_ids", deployment_ids),
                ("deployment_names", deployment_names),
                ("filters", filters),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of deployment_ids, deployment_names and filters"
                + (f" (got {', '.join(given)})" if given else "")
            )
        ids = _as_names(deployment_ids, "deployment_ids")
        self.deployment_ids = (
            None if ids is None else list(dict.fromkeys(canonical_uuid(item, "deployment_ids") for item in ids))
        )
        self.deployment_names = _as_names(deployment_names, "deployment_names")
        self.filters: dict[str, Any] | None = None
        if filters is not None:
            if not isinstance(filters, dict) or not filters:
                raise ValueError(f"filters must be a non-empty mapping, got {filters!r}")
            unknown = sorted(set(filters) - set(FILTER_NAMES))
            if unknown:
                raise ValueError(f"filters: unknown key(s) {', '.join(unknown)}; known: {', '.join(FILTER_NAMES)}")
            try:
                query = ListDeploymentsQuery.model_validate({**filters, "limit": MAX_PAGE_SIZE})
            except pydantic.ValidationError as err:
                problems = "; ".join(
                    f"filters.{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in err.errors()
                )
                raise ValueError(problems) from None
            self.filters = query.model_dump(mode="json", exclude_none=True, exclude={"limit", "offset"})
        kinds = [events] if isinstance(events, str) else list(events)
        wrong = [kind for kind in kinds if kind not in EVENT_KINDS]
        if not kinds or wrong:
            raise ValueError(f"events must be a non-empty list of {', '.join(EVENT_KINDS)}, got {events!r}")
        self.events = [kind for kind in EVENT_KINDS if kind in kinds]
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or poll_interval <= 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        if (
            isinstance(revision_check_interval, bool)
            or not isinstance(revision_check_interval, (int, float))
            or revision_check_interval < 0
        ):
            raise ValueError(f"revision_check_interval must be >= 0 seconds, got {revision_check_interval!r}")
        self.revision_check_interval = float(revision_check_interval)
        if not isinstance(deployment_service_conn_id, str) or not deployment_service_conn_id.strip():
            raise ValueError(f"deployment_service_conn_id must be a connection id, got {deployment_service_conn_id!r}")
        self.deployment_service_conn_id = deployment_service_conn_id
        overrides = {
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "max_attempts": max_attempts,
            "backoff_initial": backoff_initial,
            "backoff_max": backoff_max,
            "retry_after_max": retry_after_max,
        }
        for name, value in overrides.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        self.hook_overrides = {name: value for name, value in overrides.items() if value is not None}
        assert set(self.hook_overrides) <= set(SETTING_OVERRIDES)

    # ---- identity
    @property
    def hook_params(self) -> dict[str, Any]:
        """The arguments recreating the hook (connection id and overrides; no secret)."""
        return {"deployment_service_conn_id": self.deployment_service_conn_id, **self.hook_overrides}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret: the API key stays in the connection)."""
        kwargs: dict[str, Any] = {
            "deployment_ids": self.deployment_ids,
            "deployment_names": self.deployment_names,
            "filters": self.filters,
            "events": list(self.events),
            "poll_interval": self.poll_interval,
            "revision_check_interval": self.revision_check_interval,
            "deployment_service_conn_id": self.deployment_service_conn_id,
            **self.hook_overrides,
        }
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @property
    def cursor_key(self) -> str:
        """The asset-state-store key of this watcher's cursor: the same for the same deployments watched
        (poll interval, event kinds and connection settings may change without losing it)."""
        what = {"ids": self.deployment_ids, "names": self.deployment_names, "filters": self.filters}
        digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        return f"{CURSOR_KEY_PREFIX}:{digest}"

    def _describe(self) -> str:
        if self.deployment_ids is not None:
            return f"{len(self.deployment_ids)} deployment(s) by id"
        if self.deployment_names is not None:
            return f"deployment(s) named {', '.join(self.deployment_names)}"
        return f"deployments matching {self.filters}"

    # ---- cursor
    def _accessors(self) -> list[Any]:
        store = self.asset_state_store
        if store is None:
            return []
        accessors = [*getattr(store, "_by_name", {}).values(), *getattr(store, "_by_uri", {}).values()]
        return accessors or [store]

    async def _load_cursor(self) -> dict[str, Any] | None:
        accessors = self._accessors()
        if not accessors:
            self.log.warning(
                "No asset state store (not run by a triggerer for an asset): the cursor is kept in memory only"
            )
            return None
        for attempt in range(1, CURSOR_LOAD_ATTEMPTS + 1):
            try:
                for accessor in accessors:
                    value = await accessor.aget(self.cursor_key)
                    if isinstance(value, dict) and isinstance(value.get("deployments"), dict):
                        return value
                return None
            except Exception as err:  # the store's API may be briefly unreachable
                self.log.warning("Reading the watcher's cursor failed (attempt %d): %s", attempt, err)
                if attempt < CURSOR_LOAD_ATTEMPTS:
                    await asyncio.sleep(1.0)
        self.log.error("Could not read the watcher's cursor; starting from what the service shows now")
        return None

    async def _save_cursor(self, snapshot: dict[str, Any]) -> bool:
        try:
            for accessor in self._accessors():
                await accessor.aset(self.cursor_key, snapshot)
        except Exception as err:  # tried again with the next snapshot
            self.log.warning("Saving the watcher's cursor failed: %s", err)
            return False
        return True

    # ---- run
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Join the shared poller and yield an event for every change, for as long as the watcher lives."""
        cursor = await self._load_cursor()
        state = _WatchState(self, cursor)
        if cursor is None:
            self.log.info(
                "Watching %s every %g s; nothing fires for what is there now", self._describe(), self.poll_interval
            )
        else:
            self.log.info(
                "Watching %s every %g s from the saved cursor (%d deployment(s))",
                self._describe(),
                self.poll_interval,
                len(state.seen),
            )
        query = None
        if self.filters is not None:
            query = ListDeploymentsQuery.model_validate({**self.filters, "limit": MAX_PAGE_SIZE})
        watch = _Watch(ids=list(self.deployment_ids or []), names=list(self.deployment_names or []), query=query)
        for name, seen_id in state.names.items():
            if name in watch.names:
                watch.resolved[name] = seen_id
        if query is not None:
            watch.matched = {key for key, value in state.seen.items() if isinstance(value, _Seen)}
        poller = _BatchPoller.acquire(self.hook_params, self.poll_interval)
        poller.watch(watch)
        pending: list[tuple[float | None, dict[str, Any]]] = []
        last_event_at: float | None = None
        try:
            while True:
                timeout = None
                if pending and last_event_at is not None:
                    timeout = max(0.0, CURSOR_COMMIT_DELAY - (time.monotonic() - last_event_at))
                try:
                    update = await asyncio.wait_for(watch.queue.get(), timeout)
                except asyncio.TimeoutError:
                    pending = await self._commit(pending)
                    continue
                payloads = await state.apply(update, watch, poller)
                for payload in payloads:
                    self.log.info("%s: %s (%s)", payload["kind"], payload["deployment_name"], payload["deployment_id"])
                    yield TriggerEvent(payload)
                if payloads:
                    last_event_at = time.monotonic()
                if state.changed:
                    state.changed = False
                    pending.append((last_event_at if payloads else None, state.snapshot()))
                    if payloads:
                        # Every earlier snapshot now waits for these events too.
                        pending = [(last_event_at, snap) for _, snap in pending]
                pending = await self._commit(pending)
                del update, payloads  # the round's deployments are not kept between rounds
        finally:
            await poller.unsubscribe(watch)

    async def _commit(
        self, pending: list[tuple[float | None, dict[str, Any]]]
    ) -> list[tuple[float | None, dict[str, Any]]]:
        """Save the newest snapshot whose events the triggerer has had time to store; keep the rest."""
        now = time.monotonic()
        safe = [index for index, (at, _) in enumerate(pending) if at is None or now - at >= CURSOR_COMMIT_DELAY]
        if not safe or not self._accessors():
            return pending if self._accessors() else []
        newest = safe[-1]
        if await self._save_cursor(pending[newest][1]):
            return pending[newest + 1 :]
        return pending


class _WatchState:
    """A watcher's memory: what it last reported per deployment, and how it turns a round into events."""

    def __init__(self, trigger: DeploymentEventTrigger, cursor: dict[str, Any] | None) -> None:
        self.trigger = trigger
        self.events = set(trigger.events)
        self.seen: dict[str, _Seen | str] = {}
        self.names: dict[str, str] = {}
        self.started = datetime.now(timezone.utc).isoformat()
        self.baseline = cursor is None
        self.changed = False
        self._last_problem: str | None = None
        self.revision_checks: dict[str, RevisionCheckSchedule] = {}
        """Per deployment, when the revision endpoint was last asked (the safety net's clock; not in the cursor)."""
        if cursor is not None:
            self.started = str(cursor.get("started") or self.started)
            for key, value in cursor["deployments"].items():
                seen = GONE if value == GONE else _Seen.from_json(value)
                if seen is not None:
                    self.seen[key] = seen
            names = cursor.get("names")
            if isinstance(names, dict):
                self.names = {str(k): str(v) for k, v in names.items()}

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": 1,
            "started": self.started,
            "names": dict(self.names),
            "deployments": {
                key: value if isinstance(value, str) else value.to_json() for key, value in self.seen.items()
            },
        }

    def _problem(self, text: str | None) -> None:
        if text != self._last_problem and text is not None:
            self.trigger.log.warning("%s", text)
        elif text is None and self._last_problem is not None:
            self.trigger.log.info("Watching works again")
        self._last_problem = text

    async def apply(self, update: _WatchUpdate, watch: _Watch, poller: _BatchPoller) -> list[dict[str, Any]]:
        """Compare one round with what was reported before; return the payloads to fire."""
        if update.error is not None:
            self._problem(f"cannot watch {self.trigger._describe()}: {update.error}")
            return []
        observed: dict[str, Deployment | None] = {}
        problems: list[str] = []

        def look(deployment_id: str) -> None:
            if deployment_id in update.found:
                observed[deployment_id] = update.found[deployment_id]
            elif deployment_id in update.failures:
                problems.append(str(update.failures[deployment_id]))
            else:
                observed[deployment_id] = None

        for deployment_id in watch.ids:
            look(deployment_id)
        for name in watch.names:
            if name in watch.resolved:
                look(watch.resolved[name])
                continue
            if name in update.searches.name_errors:
                problems.append(str(update.searches.name_errors[name]))
            elif update.searches.names.get(name) is not None:
                found = update.searches.names[name]
                assert found is not None
                watch.resolved[name] = self.names[name] = found.id
                self.changed = True
                observed[found.id] = found
        if watch.query is not None:
            key = watch.query_key
            if key in update.searches.query_errors:
                problems.append(str(update.searches.query_errors[key]))
            elif key in update.searches.queries:
                listed = update.searches.queries[key]
                for item in listed:
                    observed[item.id] = item
                for gone in watch.matched - {item.id for item in listed}:
                    look(gone)
                watch.matched = {item.id for item in listed}
        self._problem("; ".join(dict.fromkeys(problems)) or None)
        payloads: list[dict[str, Any]] = []
        for deployment_id, deployment in observed.items():
            payloads.extend(await self._compare(deployment_id, deployment, poller))
        if watch.query is not None:  # forget deployments the filters no longer match
            for key in [k for k in self.seen if k not in watch.matched and k in observed]:
                del self.seen[key]
                self.changed = True
        for name, seen_id in list(watch.resolved.items()):
            if self.seen.get(seen_id) == GONE:  # deleted: look the name up again (it may be created anew)
                del watch.resolved[name]
                self.names.pop(name, None)
                self.seen.pop(seen_id, None)
                self.changed = True
        if self.baseline:
            self.baseline = False
            self.changed = True
        return payloads

    def _revision_check_due(self, deployment_id: str, deployment: Deployment, before: _Seen, now: _Seen) -> bool:
        """Whether to ask the revision endpoint about ``deployment``'s newest revision (not live, not yet
        reported failed): when the deployment changed since the last round (a build moving through its
        statuses usually touches it), or ``revision_check_interval`` seconds passed without a call (a build
        can fail without the deployment record changing). The safety net's clock starts at the first look."""
        schedule = self.revision_checks.get(deployment_id)
        if schedule is None:
            schedule = self.revision_checks[deployment_id] = RevisionCheckSchedule(self.trigger.revision_check_interval)
            schedule.mark(deployment)
        changed = now.updated_at != before.updated_at or now.latest != before.latest
        return changed or schedule.due(deployment, deployment.latest_revision_id)

    async def _compare(
        self, deployment_id: str, deployment: Deployment | None, poller: _BatchPoller
    ) -> list[dict[str, Any]]:
        before = self.seen.get(deployment_id)
        trigger = self.trigger
        if deployment is None:
            self.revision_checks.pop(deployment_id, None)
            if before is None or before == GONE:
                if before is None:
                    self.seen[deployment_id] = GONE
                    self.changed = True
                return []
            assert isinstance(before, _Seen)
            self.seen[deployment_id] = GONE
            self.changed = True
            if "deleted" not in self.events:
                return []
            payload = event_payload(
                "deleted",
                None,
                deployment_id=deployment_id,
                origin="watcher",
                previous_revision_id=before.active,
                previous_status=before.status,
                deployment_name=before.name,
            )
            return [payload]
        now = _Seen.of(deployment)
        if before is None or before == GONE:
            # Found after the first look: new (its first live revision is news) when it has no active
            # revision yet or was created after the watcher first started (e.g. while the triggerer was
            # down); otherwise it was already there and only now matches the filters or the name.
            created_since = deployment.created_at >= datetime.fromisoformat(self.started)
            if self.baseline or (deployment.active_revision_id is not None and not created_since):
                self.seen[deployment_id] = now  # already there: nothing to report
                self.changed = True
                return []
            before = _Seen(None, None, None, None, None, deployment.name)  # created since: report what it does
        assert isinstance(before, _Seen)
        payloads: list[dict[str, Any]] = []
        after = _Seen(before.active, now.status, now.latest, before.updated_at, before.failed, now.name)
        if before.status is not None and now.status != before.status and "status_changed" in self.events:
            payloads.append(
                event_payload(
                    "status_changed",
                    deployment,
                    deployment_id=deployment_id,
                    origin="watcher",
                    previous_revision_id=before.active,
                    previous_status=before.status,
                )
            )
        if deployment.status is DeploymentStatus.READY and now.active != before.active:
            after.active = now.active
            if now.active is not None and "revision_live" in self.events:
                payloads.append(
                    event_payload(
                        "revision_live",
                        deployment,
                        deployment_id=deployment_id,
                        origin="watcher",
                        previous_revision_id=before.active,
                        previous_status=before.status,
                    )
                )
        elif now.active is None:
            after.active = None
        checked = True
        latest = deployment.latest_revision_id
        if (
            "revision_failed" in self.events
            and latest is not None
            and latest != deployment.active_revision_id
            and latest != before.failed
            and poller.revision_endpoint
            and self._revision_check_due(deployment_id, deployment, before, now)
        ):
            try:
                revision = await poller.revision(deployment_id, latest)
            except DeploymentServiceError:  # transient: ask again next round
                revision, checked = None, False
            else:
                self.revision_checks[deployment_id].mark(deployment)
            if revision is not None and revision.status.is_failed:
                after.failed = latest
                config = revision.source_revision_config
                payloads.append(
                    event_payload(
                        "revision_failed",
                        deployment,
                        deployment_id=deployment_id,
                        origin="watcher",
                        previous_revision_id=before.active,
                        previous_status=before.status,
                        failed_revision_id=latest,
                        failed_revision_status=revision.status.value,
                        source_revision_config=config.model_dump(mode="json") if config is not None else None,
                    )
                )
        if checked:
            after.updated_at = now.updated_at
        if after != before:
            self.seen[deployment_id] = after
            self.changed = True
        del trigger
        return payloads
