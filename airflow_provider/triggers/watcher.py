"""Watch deployments and fire an asset event when a revision goes live or fails, or a status changes
(:class:`DeploymentEventTrigger`, an ``AssetWatcher``'s trigger).

Every watcher joins the shared batched poller of :mod:`~airflow_provider.triggers.poller`: the ids of
every watched deployment go into the same ``deployment_ids`` batches as the waiting rollouts. Each watcher
keeps a cursor (what it last reported per deployment) in the asset state store, so each change fires once,
also across a triggerer restart."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any

import pydantic
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider.assets import EVENT_KINDS, deployment_asset_uri, event_payload
from airflow_provider.decisions.judging_marker import JUDGING_KEY
from airflow_provider.decisions.rollout import RevisionCheckSchedule
from airflow_provider.decisions.settling import DEFAULT_SETTLE_TIME, Seen, settle
from airflow_provider.defaults import DEFAULT_CONN_ID, DEFAULT_REVISION_CHECK_INTERVAL, checked_setting_overrides
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import MAX_PAGE_SIZE, Deployment, DeploymentStatus, ListDeploymentsQuery, canonical_uuid
from airflow_provider.triggers import default_store, serialized_classpath
from airflow_provider.triggers.poller import _BatchPoller, _Watch, _WatchUpdate, next_update

__all__ = [
    "CURSOR_COMMIT_DELAY",
    "CURSOR_KEY_PREFIX",
    "CURSOR_LOAD_ATTEMPTS",
    "DEFAULT_EVENT_POLL_INTERVAL",
    "FILTER_NAMES",
    "GONE",
    "PROBE_KEY",
    "DeploymentEventTrigger",
    "JudgingReader",
]

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


PROBE_KEY = "deployment_service_watched"
"""Key a watcher writes once to a deployment's id asset when it finds no judging marker there: the write
succeeds when the asset exists (so "no marker" means no rollout of this provider judged it) and fails when it
does not (judging is unknown)."""


class JudgingReader:
    """Reads deployments' judging markers for one watcher (one read per question; at most one probe write
    per deployment while the watcher lives).

    :param store_of: the asset state store of an asset name (tests give their own).
    :param log: the watcher's logger.
    """

    def __init__(self, store_of: Callable[[str], Any | None], log: Any) -> None:
        self.store_of = store_of
        self.log = log
        self.exists: dict[str, bool] = {}
        """Per deployment: whether its id asset was found (probed) in Airflow."""

    async def marker(self, deployment_id: str) -> Any | None:
        """The deployment's marker, ``{}`` when there is none (no rollout of this provider marked it), ``None``
        when it cannot be known (no asset for the deployment's id, no store, a failing store)."""
        uri = deployment_asset_uri(deployment_id)
        store = self.store_of(uri)
        if store is None:
            return None
        try:
            value = await store.aget(JUDGING_KEY)
        except Exception as err:  # the API server briefly unreachable: unknown this time
            self.log.warning("Could not read the judging marker of deployment %s: %s", deployment_id, err)
            return None
        if value is not None:
            self.exists[deployment_id] = True
            return value
        if deployment_id not in self.exists:
            try:
                await store.aset(PROBE_KEY, {"at": round(time.time(), 3)})
            except Exception as err:  # no such asset in Airflow
                self.exists[deployment_id] = False
                self.log.info(
                    "No Airflow asset %s: the watcher cannot see rollouts judging this deployment (%s)", uri, err
                )
            else:
                self.exists[deployment_id] = True
        return {} if self.exists[deployment_id] else None


class DeploymentEventTrigger(BaseEventTrigger):
    """Watch deployments and fire an event when a revision goes live or fails, or a status changes.

    Meant for an ``AssetWatcher`` (event-driven scheduling). Every watcher in a triggerer with the same
    connection settings and ``poll_interval`` shares one poller with each other and with waiting rollouts:
    W watched deployments cost ``ceil(W / 100)`` list requests per interval. Nothing fires for what is
    already there when the watcher first starts; after that, each change fires once, also across a
    triggerer restart: the watcher keeps a cursor (what it last reported per deployment) in Airflow's
    asset state store of the watched asset, saved :data:`CURSOR_COMMIT_DELAY` seconds after the events it
    includes.

    A new active revision is announced (``revision_live``) only once it has served, ``READY``, for
    ``settle_time`` seconds and no rollout of this provider is judging it any more (the judging marker the
    tasks write to the asset state store of the deployment's id asset); a revision such a rollout rejected is
    never announced. An announced revision that stops serving fires ``revision_rolled_back`` (an older one
    serves again) or ``revision_replaced`` (a newer one serves; its own ``revision_live`` follows once it
    settles). See :mod:`airflow_provider.decisions.settling`.

    Each event's payload (the asset event's ``extra["payload"]``) has ``kind`` (``revision_live``,
    ``revision_failed``, ``status_changed``, ``deleted``, ``revision_rolled_back``, ``revision_replaced``),
    ``event_id``, ``deployment_id``,
    ``deployment_name``, ``status``, ``previous_status``, ``revision_id`` (active now),
    ``previous_revision_id``, ``latest_revision_id``, ``failed_revision_id``, ``failed_revision_status``,
    ``source_revision_config``, ``deployment_url``, ``updated_at``, ``origin`` (``"watcher"``) and
    ``outcome``; ``revision_live`` also ``judging`` (``True``: a rollout of this provider is still judging the
    revision, ``False``: none is, ``None``: unknown), ``verdict``, ``judged_by``, ``judging_stale``,
    ``live_since`` and ``settle_time``; never a secret.

    Give exactly one of ``deployment_ids``, ``deployment_names`` and ``filters``.

    :param deployment_ids: the deployments to watch (UUIDs).
    :param deployment_names: deployments to watch by exact name (resolved to ids once; a name that does
        not exist yet is looked up every interval, one request per missing name).
    :param filters: list filters as on ``ListDeploymentsOperator`` (``name_contains``, ``status``,
        ``remote_reconciled``, ``tag_value_ids``, ``image_version``, ``deployment_type``,
        ``deployment_ids``): every matching deployment is watched, including ones created later.
    :param events: which kinds fire (default: all of ``revision_live``, ``revision_failed``,
        ``status_changed``, ``deleted``, ``revision_rolled_back``, ``revision_replaced``). ``revision_failed``
        needs the service's revision endpoint and stays silent without it.
    :param poll_interval: seconds between two looks.
    :param settle_time: seconds a new active revision must serve (``READY``, at every look) before
        ``revision_live`` fires (default :data:`~airflow_provider.decisions.settling.DEFAULT_SETTLE_TIME`).
        ``0`` announces it at the first look that sees it, as before this existed: only when you ask.
    :param wait_for_verdict: hold ``revision_live`` while a rollout of this provider is still judging the
        revision (until its verdict, or the judging's own deadline); ``False`` announces it after the settle
        time with ``judging: true``. A revision such a rollout rejected is never announced either way.
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
        settle_time: float = DEFAULT_SETTLE_TIME,
        wait_for_verdict: bool = True,
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
            isinstance(settle_time, bool)
            or not isinstance(settle_time, (int, float))
            or not math.isfinite(settle_time)
            or settle_time < 0
        ):
            raise ValueError(f"settle_time must be >= 0 seconds, got {settle_time!r}")
        self.settle_time = float(settle_time)
        if not isinstance(wait_for_verdict, bool):
            raise ValueError(f"wait_for_verdict must be True or False, got {wait_for_verdict!r}")
        self.wait_for_verdict = wait_for_verdict
        self.judging_store: Callable[[str], Any | None] = default_store
        """Where the deployments' judging markers are read (an asset name to its state store; tests swap it)."""
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
        self.hook_overrides = checked_setting_overrides(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_attempts=max_attempts,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            retry_after_max=retry_after_max,
        )

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
            "settle_time": self.settle_time,
            "wait_for_verdict": self.wait_for_verdict,
            "revision_check_interval": self.revision_check_interval,
            "deployment_service_conn_id": self.deployment_service_conn_id,
            **self.hook_overrides,
        }
        return serialized_classpath(self, DeploymentEventTrigger), kwargs

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
            watch.matched = {key for key, value in state.seen.items() if isinstance(value, Seen)}
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
                    update = await next_update(watch.queue, timeout)
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
        self.seen: dict[str, Seen | str] = {}
        self.names: dict[str, str] = {}
        self.started = datetime.now(timezone.utc).isoformat()
        self.baseline = cursor is None
        self.changed = False
        self._last_problem: str | None = None
        self._parts_round = 0
        self._read_in_parts: set[str] = set()
        """The ids read from this round's partial updates (the closing update skips them)."""
        self.reader = JudgingReader(trigger.judging_store, trigger.log)
        self.withheld: set[tuple[str, str]] = set()
        """Candidates a rollout of this provider rejected, said once in the log (not in the cursor)."""
        self.revision_checks: dict[str, RevisionCheckSchedule] = {}
        """Per deployment, when the revision endpoint was last asked (the safety net's clock; not in the cursor)."""
        if cursor is not None:
            self.started = str(cursor.get("started") or self.started)
            for key, value in cursor["deployments"].items():
                seen = GONE if value == GONE else Seen.from_json(value)
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
        part = update.covered
        if self._parts_round != update.round:
            self._parts_round, self._read_in_parts = update.round, set()

        def look(deployment_id: str) -> None:
            if part is not None and deployment_id not in part:
                return  # another part of this round has it
            if part is None and deployment_id in self._read_in_parts:
                return  # read from a part of this round already
            if part is not None:
                self._read_in_parts.add(deployment_id)
            if deployment_id in update.found:
                observed[deployment_id] = update.found[deployment_id]
            elif deployment_id in update.failures:
                problems.append(str(update.failures[deployment_id]))
            else:
                observed[deployment_id] = None

        for deployment_id in watch.ids:
            look(deployment_id)
        if part is not None:  # one list answer of the round: the ids it covers, nothing else yet
            for name in watch.names:
                if name in watch.resolved:
                    look(watch.resolved[name])
            return [payload for key, seen in observed.items() for payload in await self._compare(key, seen, poller)]
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

    def _revision_check_due(self, deployment_id: str, deployment: Deployment, before: Seen, now: Seen) -> bool:
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
            assert isinstance(before, Seen)
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
        now = Seen.of(deployment)
        if before is None or before == GONE:
            # Found after the first look: new (its first live revision is news) when it has no active
            # revision yet or was created after the watcher first started (e.g. while the triggerer was
            # down); otherwise it was already there and only now matches the filters or the name.
            created_since = deployment.created_at >= datetime.fromisoformat(self.started)
            if self.baseline or (deployment.active_revision_id is not None and not created_since):
                self.seen[deployment_id] = now  # already there: nothing to report
                self.changed = True
                return []
            before = Seen(None, None, None, None, None, deployment.name)  # created since: report what it does
        assert isinstance(before, Seen)
        payloads: list[dict[str, Any]] = []
        after = dataclasses.replace(before, status=now.status, latest=now.latest, name=now.name)
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

        async def created_at(revision_id: str) -> Any:
            revision = await poller.revision(deployment_id, revision_id) if poller.revision_endpoint else None
            return revision.created_at if revision is not None else None

        if deployment.status is DeploymentStatus.READY and now.active is not None:
            payloads.extend(
                await settle(
                    self.trigger, self.events, self.reader, self.withheld, deployment, before, after, created_at
                )
            )
        elif now.active is None:
            after.active = after.pending = after.pending_since = after.left = None
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
