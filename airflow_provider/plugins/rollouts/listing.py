"""What the Rollouts view reads from the service, through the hook, shared by every viewer for a few seconds.

One page load of N deployments costs the batched list (pages of 100: ``N // 100 + 1`` list requests, the
last page being the short one that ends the listing). Every answer is kept for :data:`LISTING_TTL_SECONDS`
and shared by every viewer of the same connection and filters; while one request fetches, the others
asking for the same thing wait for it instead of fetching too (ten people watching cost what one does), at
most :data:`WAIT_SECONDS` (then :class:`StillFetching`: the view answers 503, retry). At most
:data:`MAX_ENTRIES` answers holding :data:`MAX_CACHED_DEPLOYMENTS` deployments in all are kept.
The cache lives in the API server process; each API server worker has its own.

A page never waits long for the service (:class:`PageBoundHook`): one attempt per request (no retry
budget: the viewer's next load is the retry), at most :data:`PAGE_CONNECT_TIMEOUT` s to connect and
:data:`PAGE_READ_TIMEOUT` s for each answer (the connection's own timeouts when shorter), and no more pages
asked for once a listing has taken :data:`FETCH_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from airflow_provider.decisions.rollout import REVISION_ENDPOINT_MISSING
from airflow_provider.errors import DeploymentServiceError, TransportError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, ListDeploymentsQuery, Revision

if TYPE_CHECKING:
    from collections.abc import Iterable

    from airflow.sdk import Connection

    from airflow_provider.client.settings import ClientSettings

LISTING_TTL_SECONDS = 10.0
"""How long one answer of the service serves every viewer."""
MAX_DEPLOYMENTS = 5000
"""Most deployments one listing reads (the page says when there are more)."""
REVISIONS_SHOWN = 50
"""Most revisions of one deployment read (newest first)."""
MAX_ENTRIES = 256
"""Most answers kept (least recently used dropped first)."""
MAX_CACHED_DEPLOYMENTS = 20_000
"""Most deployments (and revisions) kept in all answers together (least recently used answers dropped first;
the newest answer is always kept)."""
WAIT_SECONDS = 20.0
"""Longest a request waits for another request's fetch of the same answer before a 503 asks to retry."""
PAGE_CONNECT_TIMEOUT = 5.0
"""Most seconds a page's request waits to connect to the service (the connection's own when shorter)."""
PAGE_READ_TIMEOUT = 10.0
"""Most seconds a page's request waits for the service's answer (the connection's own when shorter)."""
FETCH_SECONDS = 15.0
"""Once a listing (or a revision history) has taken this long, no further page is asked for: the fetch fails
(shared like any failure) and the view answers 502 saying so."""
LIST_FILTERS = ("name_contains", "tag_value_ids", "status", "deployment_type", "deployment_ids")
"""The list endpoint's filters the view offers."""

T = TypeVar("T")


@dataclass
class DeploymentListing:
    """The deployments of a connection matching some filters, as the service answered.

    :param deployments: the deployments, in the service's order.
    :param fetched_at: wall-clock time of the answer (Unix seconds).
    :param truncated: whether there were more than :data:`MAX_DEPLOYMENTS`.
    """

    deployments: list[Deployment]
    fetched_at: float
    truncated: bool = False


@dataclass
class RevisionHistory:
    """A deployment's revisions, newest first, or why there are none.

    :param revisions: up to :data:`REVISIONS_SHOWN` revisions.
    :param available: ``False`` when the service has no revision endpoint (404/405): history then comes
        from Airflow's records only.
    :param fetched_at: wall-clock time of the answer.
    """

    revisions: list[Revision]
    available: bool
    fetched_at: float


@dataclass
class _Entry(Generic[T]):
    value: T | None
    error: DeploymentServiceError | None
    stored: float
    weight: int = 1


@dataclass
class _Flight(Generic[T]):
    """One fetch under way: the requests asking for the same key wait for ``done``, then read ``entry``."""

    done: threading.Event = field(default_factory=threading.Event)
    entry: _Entry[T] | None = None


class StillFetching(Exception):
    """Another request's fetch of the same answer took longer than this request may wait.

    :param what: what is being fetched (``deployment listing``, ``revision history``).
    :param waited: seconds waited.
    """

    def __init__(self, what: str, waited: float) -> None:
        super().__init__(f"the {what} is taking longer than {waited:g} s; retry")
        self.what = what
        self.waited = waited


@dataclass
class _Cache(Generic[T]):
    """Answers by key for ``ttl`` seconds; one fetch at a time per key (the others wait for its answer, at most
    ``wait_seconds``). At most ``max_entries`` answers weighing ``max_weight`` in all are kept (expired ones
    dropped first, then the least recently used); only fetches under way are tracked per key."""

    what: str
    ttl: float
    max_entries: int
    max_weight: int
    wait_seconds: float
    clock: Callable[[], float]
    weigh: Callable[[T], int]
    entries: OrderedDict[tuple[Any, ...], _Entry[T]] = field(default_factory=OrderedDict)
    fetching: dict[tuple[Any, ...], _Flight[T]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _fresh(self, key: tuple[Any, ...]) -> _Entry[T] | None:
        entry = self.entries.get(key)
        if entry is None or self.clock() - entry.stored >= self.ttl:
            return None
        self.entries.move_to_end(key)
        return entry

    def get(self, key: tuple[Any, ...], fetch: Callable[[], T]) -> T:
        with self.lock:
            entry = self._fresh(key)
            flight = self.fetching.get(key) if entry is None else None
            fetches = entry is None and flight is None
            if fetches:
                flight = self.fetching[key] = _Flight()
        if fetches:
            assert flight is not None
            try:
                entry = self._fetch(fetch)
                with self.lock:
                    self._store(key, entry)
            finally:  # whatever happened, the key is no longer being fetched and nobody waits for it in vain
                flight.entry = entry
                with self.lock:
                    self.fetching.pop(key, None)
                flight.done.set()
        elif entry is None:
            assert flight is not None
            if not flight.done.wait(self.wait_seconds):
                raise StillFetching(self.what, self.wait_seconds)
            entry = flight.entry if flight.entry is not None else self._fetch(fetch)  # theirs failed unexpectedly
        assert entry is not None
        if entry.error is not None:
            raise entry.error
        assert entry.value is not None
        return entry.value

    def _store(self, key: tuple[Any, ...], entry: _Entry[T]) -> None:
        self.entries[key] = entry
        self.entries.move_to_end(key)
        now = self.clock()
        for stale in [other for other, kept in self.entries.items() if now - kept.stored >= self.ttl]:
            del self.entries[stale]
        total = sum(kept.weight for kept in self.entries.values())
        while len(self.entries) > 1 and (len(self.entries) > self.max_entries or total > self.max_weight):
            total -= self.entries.popitem(last=False)[1].weight

    def _fetch(self, fetch: Callable[[], T]) -> _Entry[T]:
        try:
            value = fetch()
        except DeploymentServiceError as err:  # shared too: a failing service is not asked once per viewer
            return _Entry(None, err, self.clock())
        return _Entry(value, None, self.clock(), max(1, self.weigh(value)))

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


class PageBoundHook(DeploymentServiceHook):
    """The hook the view reads the service through: the connection's settings, with one attempt per request
    and timeouts of at most :data:`PAGE_CONNECT_TIMEOUT` and :data:`PAGE_READ_TIMEOUT` seconds.

    :param deployment_service_conn_id: the Airflow connection to use.
    """

    def settings_from_connection(self, conn: Connection) -> tuple[ClientSettings, str]:
        """The connection's settings (and API key), bounded for a page (see the class)."""
        settings, api_key = super().settings_from_connection(conn)
        bounded = replace(
            settings,
            connect_timeout=min(settings.connect_timeout, PAGE_CONNECT_TIMEOUT),
            read_timeout=min(settings.read_timeout, PAGE_READ_TIMEOUT),
        ).with_retry(max_attempts=1)
        return bounded, api_key


class ServiceReader:
    """Deployments and revisions of the service for the view, through :class:`DeploymentServiceHook`, cached.

    :param ttl: seconds an answer is shared (:data:`LISTING_TTL_SECONDS`).
    :param hook_factory: makes the hook of a connection id (tests and benchmarks may pass their own).
    :param clock: monotonic seconds (tests may pass their own).
    :param max_entries: most answers kept (of listings, and of histories).
    :param max_cached_deployments: most deployments kept in all listings together (and revisions in all
        histories).
    :param wait_seconds: longest a request waits for another's fetch of the same answer
        (:class:`StillFetching` then).
    :param fetch_seconds: longest one fetch keeps asking for pages (:data:`FETCH_SECONDS`).
    """

    def __init__(
        self,
        *,
        ttl: float = LISTING_TTL_SECONDS,
        hook_factory: Callable[[str], DeploymentServiceHook] = PageBoundHook,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
        max_cached_deployments: int = MAX_CACHED_DEPLOYMENTS,
        wait_seconds: float = WAIT_SECONDS,
        fetch_seconds: float = FETCH_SECONDS,
    ) -> None:
        self.hook_factory = hook_factory
        self.fetch_seconds = fetch_seconds
        self._clock = clock
        self._listings: _Cache[DeploymentListing] = _Cache(
            "deployment listing",
            ttl,
            max_entries,
            max_cached_deployments,
            wait_seconds,
            clock,
            weigh=lambda listing: len(listing.deployments),
        )
        self._histories: _Cache[RevisionHistory] = _Cache(
            "revision history",
            ttl,
            max_entries,
            max_cached_deployments,
            wait_seconds,
            clock,
            weigh=lambda history: len(history.revisions),
        )

    def deployments(self, conn_id: str, query: ListDeploymentsQuery) -> DeploymentListing:
        """Every deployment of connection ``conn_id`` matching ``query``'s filters (its paging is ignored).

        :param conn_id: the connection.
        :param query: the filters (see :func:`list_query`).
        """
        filters = query.model_dump(mode="json", exclude_none=True, exclude={"limit", "offset"})
        key = (conn_id, tuple(sorted((name, str(value)) for name, value in filters.items())))
        return self._listings.get(key, lambda: self._list(conn_id, query))

    def deployment(self, conn_id: str, deployment_id: str) -> Deployment | None:
        """One deployment (through the batched list's ``deployment_ids`` filter), or ``None``.

        :param conn_id: the connection.
        :param deployment_id: the deployment's id (canonical UUID).
        """
        listing = self.deployments(conn_id, list_query({"deployment_ids": deployment_id}))
        return next((item for item in listing.deployments if item.id == deployment_id), None)

    def revisions(self, conn_id: str, deployment_id: str) -> RevisionHistory:
        """The deployment's newest revisions (:data:`REVISIONS_SHOWN`) from the revision endpoint.

        :param conn_id: the connection.
        :param deployment_id: the deployment's id (canonical UUID).
        """
        return self._histories.get((conn_id, deployment_id), lambda: self._history(conn_id, deployment_id))

    def clear(self) -> None:
        """Forget every answer (the next page load asks the service again)."""
        self._listings.clear()
        self._histories.clear()

    def _list(self, conn_id: str, query: ListDeploymentsQuery) -> DeploymentListing:
        query = query.model_copy(update={"limit": MAX_PAGE_SIZE, "offset": 0})
        with self.hook_factory(conn_id) as hook:
            found = self._within_time(
                hook.iter_deployments(query, max_results=MAX_DEPLOYMENTS + 1),
                "the deployments",
                "narrow the filters, or retry",
            )
        return DeploymentListing(found[:MAX_DEPLOYMENTS], time.time(), truncated=len(found) > MAX_DEPLOYMENTS)

    def _history(self, conn_id: str, deployment_id: str) -> RevisionHistory:
        with self.hook_factory(conn_id) as hook:
            try:
                revisions = self._within_time(
                    hook.iter_revisions(deployment_id, max_results=REVISIONS_SHOWN),
                    "the deployment's revisions",
                    "retry",
                )
            except DeploymentServiceError as err:
                if err.transient or err.status_code not in REVISION_ENDPOINT_MISSING:
                    raise
                return RevisionHistory([], False, time.time())
        return RevisionHistory(revisions, True, time.time())

    def _within_time(self, items: Iterable[T], what: str, hint: str) -> list[T]:
        """Every item of a paged listing, unless it takes longer than ``fetch_seconds`` (a ``TransportError``
        then: no further page is asked for)."""
        deadline = self._clock() + self.fetch_seconds
        found: list[T] = []
        for item in items:
            found.append(item)
            if self._clock() > deadline:
                raise TransportError(
                    f"listing {what} took longer than {self.fetch_seconds:g} s: no further page was asked for; {hint}"
                )
        return found


def list_query(filters: Mapping[str, Any]) -> ListDeploymentsQuery:
    """The list query of the view's filters (empty values ignored; ``tag_value_ids`` and ``deployment_ids``
    comma-separated); raises ``pydantic.ValidationError`` naming a bad one.

    :param filters: ``name_contains``, ``tag_value_ids``, ``status``, ``deployment_type``, ``deployment_ids``.
    """
    given: dict[str, Any] = {}
    for name in LIST_FILTERS:
        value = filters.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if name in ("tag_value_ids", "deployment_ids"):
            value = [item.strip() for item in str(value).split(",") if item.strip()]
        given[name] = value.strip() if isinstance(value, str) else value
    return ListDeploymentsQuery.model_validate({"limit": MAX_PAGE_SIZE, **given})


__all__ = [
    "FETCH_SECONDS",
    "LISTING_TTL_SECONDS",
    "LIST_FILTERS",
    "MAX_CACHED_DEPLOYMENTS",
    "MAX_DEPLOYMENTS",
    "MAX_ENTRIES",
    "PAGE_CONNECT_TIMEOUT",
    "PAGE_READ_TIMEOUT",
    "REVISIONS_SHOWN",
    "WAIT_SECONDS",
    "DeploymentListing",
    "PageBoundHook",
    "RevisionHistory",
    "ServiceReader",
    "StillFetching",
    "list_query",
]
