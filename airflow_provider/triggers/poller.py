"""The batched poller every waiting trigger of one triggerer shares.

Every :class:`~airflow_provider.triggers.rollout.DeploymentRolloutTrigger` (and every rollout of a
:class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`) of one triggerer process (one event loop) with
the same hook settings and poll interval subscribes to one shared :class:`_BatchPoller`. Each interval the
poller asks the list endpoint for up to 100 deployments at once (``deployment_ids``), so N waiting rollouts
cost ``ceil(N / 100)`` list requests per interval instead of N. The optional revision endpoint (fail
fast on a failed build; it has no batch form) is asked only for rollouts whose revision is the latest but
not yet active, in two ways:

- at once, in the round that sees the deployment's list row change (``updated_at`` moved since it was
  first seen or last asked about: a revision moving through its statuses touches its deployment), and
  for a final check at a deadline: a failed build is reported by the first round that starts after the
  service shows it, within one interval;
- otherwise (a rollout's first look, and every ``revision_check_interval`` as a safety net for services
  whose revision statuses do not touch the deployment) out of a
  :class:`~airflow_provider.decisions.rollout.RevisionLookBudget`: one call per ten list requests on average
  (``ceil(N / 100) / 10`` per round), never-asked rollouts first, then the longest unasked.

A quiet fleet (builds that show no change) thus costs at most ``1.1 x ceil(N / 100)`` requests per
interval on average. Why this design rather than a look at every rollout every k-th round: a change is
what the list shows cheaply, so spending the revision endpoint where the list saw something catches a
failed build as fast as asking every rollout every round would, while the unhurried looks only guard
against what the list cannot show. Their price: a fleet that arrives at once gets its first looks over
up to ``10 x N / ceil(N / 100)`` rounds (1000 rounds for 1000 rollouts; the first ``ceil(N / 100)`` at
once), and the safety net comes that much later than ``revision_check_interval`` when many rollouts are
due. A 404/405 from the revision endpoint switches it off for that poller.

When the last subscriber leaves, the poller task is cancelled and awaited and its client closed.

:class:`~airflow_provider.triggers.watcher.DeploymentEventTrigger` (an ``AssetWatcher``'s trigger) joins the
same poller: the ids of every watched deployment go into the same ``deployment_ids`` batches as the waiting
rollouts, so W watched deployments cost ``ceil(W / 100)`` list requests per interval however many watchers
share them. Names are resolved to ids once (and again only while missing); each distinct filter set is
listed once per round. A watcher reads each list answer as it arrives (a partial update), before the
round's other list requests are answered and before the rollouts' revision calls, so an event waits at
most one interval plus its own page's answer.

A trigger subscribes with a :class:`_Subscription` (a rollout) or a :class:`_Watch` (a watcher) and reads
:class:`_Update` or :class:`_WatchUpdate` objects from its queue (one per round, or, for a rollout that
asks for ``news_only``, one per round that has news for it): the trigger modules' side of the poller,
private to the triggers package.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider.client.pagination import DeploymentPaginator
from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING, RevisionCheckSchedule, RevisionLookBudget
from airflow_provider.errors import DeploymentServiceError, InvalidRequestError, TransportError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, DeploymentPageReader, ListDeploymentsQuery, Revision

__all__ = [
    "REVISION_CHECK_CONCURRENCY",
    "active_pollers",
]

log = logging.getLogger(__name__)


REVISION_CHECK_CONCURRENCY = 10
"""Revision-endpoint calls one poller makes at the same time."""


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
    news_only: bool = False
    """Send an update only when a round has news for this rollout (see :meth:`changed`); otherwise every
    round (a fleet wave's bake reads the time of every round)."""
    seen: tuple[Any, ...] | None = None
    """What the last update it was sent showed (see :meth:`changed`); ``None`` before the first."""

    def changed(self, deployment: Deployment | None) -> bool:
        """Whether a round that found ``deployment`` has news for this rollout: its first update, a final
        check, or a change in what its verdict reads (the deployment's status, revisions and ``updated_at``,
        the revision's status). A quiet round sends nothing, so 1000 waiting rollouts do not wake 1000
        tasks every interval."""
        shown = None
        if deployment is not None:
            revisions = (deployment.active_revision_id, deployment.latest_revision_id)
            shown = (deployment.updated_at, deployment.status, *revisions)
        revision = self.revision
        seen = (shown, None if revision is None else (revision.id, revision.status, revision.status_message))
        if self.seen == seen and not self.final:
            return False
        self.seen = seen
        return True


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
    covered: frozenset[str] | None = None
    """A part of a round: the ids of the list request(s) just answered (``found`` holds what they listed);
    sent as each answer arrives, so an event never waits for the round's other requests. ``None``: the
    round's closing update (everything: the watcher skips what it already read from the parts)."""


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


_REGISTRY: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, float], _BatchPoller]] = (
    weakref.WeakKeyDictionary()
)


_Item = TypeVar("_Item")


async def next_update(queue: asyncio.Queue[_Item], timeout: float | None) -> _Item:
    """The next update of a subscription's ``queue``, waiting at most ``timeout`` seconds (``None``: as long
    as it takes); :class:`asyncio.TimeoutError` after that.

    Not ``asyncio.wait_for``: on Python < 3.12 it swallows a cancellation that arrives as the item does
    (it returns the item instead), and a trigger the triggerer cancelled would go on running, polling
    and firing. Here a cancellation always ends the wait (the item, if one was taken, goes with the
    subscription being torn down).

    :param queue: the subscription's queue.
    :param timeout: seconds to wait at most, or ``None``.
    """
    if timeout is None:
        return await queue.get()  # a plain await: a cancellation is never lost
    getter = asyncio.ensure_future(queue.get())
    try:
        done, _ = await asyncio.wait({getter}, timeout=timeout)
    finally:
        if not getter.done():
            getter.cancel()  # Queue.get is cancellation-safe: no item is taken from the queue
    if getter in done:
        return getter.result()
    raise asyncio.TimeoutError


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
        self._look_budget = RevisionLookBudget()
        self._rows = DeploymentPageReader()
        """Reuses the Deployment read last round for every row that did not change (CPU per round)."""
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

        async def list_chunk(chunk: list[str]) -> list[Deployment] | Exception:
            outcome = await self._list(chunk)
            if watches and not isinstance(outcome, Exception):
                # Each watcher reads this answer at once: a change in the first page is not held back until
                # the last page of the round is answered.
                part = {item.id: item for item in outcome}
                for watch in watches:
                    watch.queue.put_nowait(_WatchUpdate(number, started, found=part, covered=frozenset(chunk)))
            return outcome

        if setup_error is not None:
            outcomes = [setup_error] * len(chunks)
        else:
            outcomes = list(await asyncio.gather(*(list_chunk(chunk) for chunk in chunks)))
        found: dict[str, Deployment] = {}
        failures: dict[str, Exception] = {}
        for chunk, outcome in zip(chunks, outcomes, strict=True):
            if isinstance(outcome, Exception):
                failures.update(dict.fromkeys(chunk, outcome))
            else:
                found.update({item.id: item for item in outcome if item.id in chunk})
        self._rows.retain(ids)
        # The watchers first: they need no revision call of the rollouts', which would only delay their events.
        for watch in watches:
            if setup_error is not None and not getattr(setup_error, "transient", False):
                watch.queue.put_nowait(_WatchUpdate(number, started, error=setup_error))
                continue
            watch.queue.put_nowait(_WatchUpdate(number, started, found=found, failures=failures, searches=searches))
        await self._check_revisions(subscribers, found)
        for sub in subscribers:
            deployment = found.get(sub.deployment_id)
            error = failures.get(sub.deployment_id)
            if error is None and not sub.changed(deployment) and sub.news_only:
                continue
            update = _Update(number, started, deployment=deployment, revision=sub.revision)
            if error is not None and getattr(error, "transient", False):
                update.transient = error
            elif error is not None:
                update.error = error
            if error is not None:
                sub.seen = None  # the round after a failure is news again
            sub.queue.put_nowait(update)
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
        the client's :class:`~airflow_provider.client.pagination.DeploymentPaginator`: a server that repeats a page
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
            page = await self.hook.a_list_deployments(deployment_ids=chunk, limit=MAX_PAGE_SIZE, reader=self._rows)
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
            sub.schedule.seen(deployment)  # a later change is urgent even before the first look
            if reason in ("first", "timer"):
                unhurried.setdefault((sub.deployment_id, sub.revision_id), []).append(sub)
            elif reason is not None:  # the deployment changed, or a final check
                wanted.setdefault((sub.deployment_id, sub.revision_id), []).append(sub)
        # First looks and safety-net calls come out of the budget (one call per ten list requests on
        # average, see RevisionLookBudget), never asked first, then longest unasked.
        allowed = self._look_budget.grant(-(-len(subscribers) // MAX_PAGE_SIZE))
        if unhurried and allowed:
            by_age = sorted(unhurried.items(), key=lambda item: min(sub.schedule.last_asked for sub in item[1]))
            for pair, subs in by_age[:allowed]:
                wanted.setdefault(pair, []).extend(subs)
            self._look_budget.spend(min(allowed, len(by_age)))
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
