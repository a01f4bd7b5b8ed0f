"""Guard landed revisions in the triggerer (:class:`DeploymentGuardTrigger`, an ``AssetWatcher``'s trigger): keep
judging each revision a task handed to the guard with its analysis, against the baseline its rollout measured,
until its guarded time is over or another revision serves, and fire ``revision_regressed`` once when it fails.

One trigger per connection guards every guarded deployment of that connection. It joins the shared batched poller
of :mod:`~airflow_provider.triggers.poller` (the guarded ids go into the same ``deployment_ids`` batches as the
waiting rollouts and the watchers: ``ceil(N / 100)`` list requests per interval), and measures each guarded
revision once per ``analysis.interval_seconds`` (a tracing check: one statistics request per deployment and round,
shared by its checks). The guarded revisions are read from Airflow Variables
(:class:`VariableGuardStore`; :class:`MemoryGuardStore` in tests and benchmarks): one key listing per round, a
value read when its key first shows or its deployment serves another revision.

Exactly once: a regression is claimed in a Variable keyed by deployment and revision before it is announced
(:func:`claim`), and the claim is marked announced
:data:`ANNOUNCE_DELAY` seconds after the event was yielded. A second triggerer running the same trigger finds the
claim and stays silent; a restarted triggerer finds the regression announced and stays silent, or finds an
unannounced claim older than its lease (the triggerer died before Airflow stored the event) and announces it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import pydantic
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider.analysis.definitions import Analysis, AnalysisTarget, Measurement
from airflow_provider.analysis.guard import (
    GUARD_KEY_PREFIX,
    GuardRecord,
    claim_key,
    regression_text,
    status_key,
    window_analysis,
    window_of,
    windows_in,
)
from airflow_provider.analysis.judge import Judgement
from airflow_provider.analysis.rounds import RoundJudging
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.defaults import DEFAULT_CONN_ID, checked_setting_overrides
from airflow_provider.models import Deployment, DeploymentStatus
from airflow_provider.triggers import serialized_classpath
from airflow_provider.triggers.poller import _BatchPoller, _Watch, next_update

__all__ = [
    "ANNOUNCE_DELAY",
    "CLAIM_LEASE",
    "CLAIM_SETTLE",
    "DEFAULT_GUARD_POLL_INTERVAL",
    "REGRESSED",
    "DeploymentGuardTrigger",
    "GuardStore",
    "MemoryGuardStore",
    "VariableGuardStore",
    "claim",
    "mark_announced",
]

REGRESSED = "revision_regressed"
"""The kind of the guard's event."""
DEFAULT_GUARD_POLL_INTERVAL = 60.0
"""Seconds between two looks of the guard at its deployments (each revision is measured every
``analysis.interval_seconds``, at the first look after it is due)."""
ANNOUNCE_DELAY = 5.0
"""Seconds between yielding a regression's event and marking its claim announced (the triggerer hands events to
its supervisor about once a second, as for the watcher's cursor)."""
EVENT_MEASUREMENTS = 20
"""Measurements an event keeps (the latest ones)."""
STATUS_EVERY = 300.0
"""Seconds between two writes of a guarded revision's status (what it last measured, for the Rollouts view): 1,000
guarded revisions cost about three Variable writes a second."""


# ---- where the guarded revisions and the claims are kept
CLAIM_SETTLE = 2.0
"""Seconds between writing a claim and reading it back: a trigger announces a regression only when its own claim
is still there after that (the last writer wins), so two copies of the trigger (two triggerers) that find the same
regression in the same round announce it once."""
CLAIM_LEASE = 120.0
"""Seconds after which a claim still not marked announced is taken over (its trigger died between claiming and
announcing: announcing again is better than losing the regression; the guard's DAG de-duplicates)."""


class GuardStore(Protocol):
    """What the guard trigger needs of a key-value store of JSON values."""

    async def keys(self, prefix: str) -> list[str]:
        """The keys starting with ``prefix``."""

    async def get(self, key: str) -> Any | None:
        """The value, ``None`` when there is none."""

    async def set(self, key: str, value: Any) -> None:
        """Write (or overwrite) the value."""

    async def delete(self, key: str) -> None:
        """Remove the key (no error when it is not there)."""


class VariableGuardStore:
    """Airflow Variables, reached through the supervisor (the triggerer's, or a task's) in a worker thread: the
    SDK's Variable calls block, the event loop must not."""

    async def keys(self, prefix: str) -> list[str]:
        """The Variable keys starting with ``prefix`` (paged by the SDK).

        :param prefix: the key prefix.
        """
        from airflow.sdk import Variable

        return await asyncio.to_thread(lambda: list(Variable.keys(prefix)))

    async def get(self, key: str) -> Any | None:
        """The Variable's JSON value, ``None`` when it is not there.

        :param key: the Variable key.
        """
        from airflow.sdk import Variable

        return await asyncio.to_thread(Variable.get, key, None, True)

    async def set(self, key: str, value: Any) -> None:
        """Write the Variable as JSON.

        :param key: the Variable key.
        :param value: a JSON value.
        """
        from airflow.sdk import Variable

        await asyncio.to_thread(Variable.set, key, value, None, True)

    async def delete(self, key: str) -> None:
        """Delete the Variable.

        :param key: the Variable key.
        """
        from airflow.sdk import Variable

        await asyncio.to_thread(Variable.delete, key)


class MemoryGuardStore:
    """An in-memory store (JSON round-tripped, as Variables are), counting its calls.

    :param data: the initial values.
    """

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = copy.deepcopy(data or {})
        self.calls: dict[str, int] = {"keys": 0, "get": 0, "set": 0, "delete": 0}

    async def keys(self, prefix: str) -> list[str]:
        """The keys starting with ``prefix``.

        :param prefix: the key prefix.
        """
        self.calls["keys"] += 1
        return [key for key in self.data if key.startswith(prefix)]

    async def get(self, key: str) -> Any | None:
        """The value, ``None`` when there is none.

        :param key: the key.
        """
        self.calls["get"] += 1
        return json.loads(json.dumps(self.data[key])) if key in self.data else None

    async def set(self, key: str, value: Any) -> None:
        """Write the value.

        :param key: the key.
        :param value: a JSON value.
        """
        self.calls["set"] += 1
        self.data[key] = json.loads(json.dumps(value))

    async def delete(self, key: str) -> None:
        """Remove the key.

        :param key: the key.
        """
        self.calls["delete"] += 1
        self.data.pop(key, None)


async def claim(
    store: GuardStore,
    key: str,
    token: str,
    payload: dict[str, Any],
    *,
    settle: float = CLAIM_SETTLE,
    lease: float = CLAIM_LEASE,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Claim the announcement of a regression; ``True`` when this trigger (``token``) may announce it.

    Refused when the regression was announced already, claimed by this trigger already, or claimed by another
    trigger less than ``lease`` seconds ago. Otherwise the claim is written, and read back ``settle`` seconds
    later: it is this trigger's when its token is still there (of two triggers that claim at once, the later
    writer announces). Variables have no insert-if-absent through the supervisor; the read-back makes two
    announcements need one trigger to stall more than ``settle`` seconds between its read and its write, and
    the guard's DAG de-duplicates what is left.

    :param store: the store.
    :param key: :func:`~airflow_provider.analysis.guard.claim_key` of the regressed revision.
    :param token: this trigger's token (unique per trigger run).
    :param payload: the regression's event payload (kept with the claim: the view and the DAG read it).
    :param settle: seconds before the read-back.
    :param lease: seconds after which an unannounced claim of another trigger is taken over.
    :param sleep: awaits seconds (tests pass a fast one).
    :param clock: wall-clock seconds.
    """
    existing = await store.get(key)
    if isinstance(existing, dict):
        if existing.get("state") == "announced" or existing.get("token") == token:
            return False  # announced, or being announced by this very trigger
        at = existing.get("at")
        fresh = isinstance(at, int | float) and clock() - at < lease
        if existing.get("token") != token and fresh:
            return False
    await store.set(key, {"token": token, "state": "claimed", "at": round(clock(), 3), "payload": payload})
    await sleep(settle)
    back = await store.get(key)
    return isinstance(back, dict) and back.get("token") == token


async def mark_announced(store: GuardStore, key: str, token: str) -> None:
    """Mark this trigger's claim announced (its event was handed to Airflow a while ago): never announced again.

    :param store: the store.
    :param key: the claim's key.
    :param token: this trigger's token (another trigger's claim is left alone).
    """
    existing = await store.get(key)
    if isinstance(existing, dict) and existing.get("token") == token and existing.get("state") != "announced":
        await store.set(key, {**existing, "state": "announced", "announced_at": round(time.time(), 3)})


# ---- the trigger
@dataclass
class _Guarded:
    """One guarded revision, as this trigger judges it."""

    key: str
    record: GuardRecord
    analysis: Analysis
    window_start: datetime
    window: Analysis
    judgement: Judgement
    judging: RoundJudging
    target: AnalysisTarget
    rounds: int = 0
    next_due: float = 0.0
    last_measured: str | None = None
    measurements: list[Measurement] = field(default_factory=list)
    status_written: float = 0.0
    missing: int = 0


class DeploymentGuardTrigger(BaseEventTrigger):
    """Guard every revision handed to the guard through one connection, and fire ``revision_regressed`` once per
    regressed revision.

    Meant for the ``AssetWatcher`` of :func:`~airflow_provider.plugins.rollouts.guard_dag.guard_dag`. The event's
    payload (the asset event's ``extra["payload"]``) has ``kind`` (``revision_regressed``), ``event_id``,
    ``origin`` (``"guard"``), ``deployment_id``, ``deployment_name``, ``revision_id`` (the regressed revision),
    ``previous_revision_id`` (the one that served before: what to roll back to), ``conn_id``, ``landed_at``,
    ``regressed_at``, ``after_seconds``, ``failing_check``, ``reason``, ``message`` ("rolled back by the guard, 7 h
    12 min after landing, correctness 0.61 against 0.88"), ``measurements`` (the latest), ``baseline`` and
    ``handed_by``; never a secret.

    :param deployment_service_conn_id: the Airflow connection (the guarded revisions handed through it).
    :param poll_interval: seconds between two looks (the list of the guarded deployments).
    :param connect_timeout: overrides the connection's connect timeout (seconds).
    :param read_timeout: overrides the connection's read timeout (seconds).
    :param max_attempts: overrides attempts per API call.
    :param backoff_initial: overrides the first retry backoff (seconds).
    :param backoff_max: overrides the longest retry backoff (seconds).
    :param retry_after_max: overrides the longest ``Retry-After`` honoured (seconds).
    """

    claim_settle: float = CLAIM_SETTLE
    """Seconds between a claim and its read-back (tests shorten it)."""
    claim_lease: float = CLAIM_LEASE
    """Seconds after which another trigger's unannounced claim is taken over."""
    announce_delay: float = ANNOUNCE_DELAY
    """Seconds between an event and its claim marked announced."""
    status_every: float = STATUS_EVERY
    """Seconds between two writes of a guarded revision's status."""

    def __init__(
        self,
        *,
        deployment_service_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = DEFAULT_GUARD_POLL_INTERVAL,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        retry_after_max: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(deployment_service_conn_id, str) or not deployment_service_conn_id.strip():
            raise ValueError(f"deployment_service_conn_id must be a connection id, got {deployment_service_conn_id!r}")
        self.deployment_service_conn_id = deployment_service_conn_id
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or poll_interval <= 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        self.hook_overrides = checked_setting_overrides(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_attempts=max_attempts,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            retry_after_max=retry_after_max,
        )
        self.store: GuardStore = VariableGuardStore()
        """Where the guarded revisions and the claims are (tests and benchmarks swap it)."""
        self.token = uuid.uuid4().hex
        """This trigger run's token in the claims it writes."""
        self.guarded: dict[str, _Guarded] = {}
        """The revisions guarded now, by deployment id (diagnostics, tests and benchmarks)."""
        self.regressed: set[tuple[str, str]] = set()
        """The (deployment, revision) pairs this trigger found regressed (never judged again by it)."""
        self.stats: dict[str, int] = {"rounds": 0, "measured": 0, "regressions": 0, "ended": 0}

    @property
    def hook_params(self) -> dict[str, Any]:
        """The arguments recreating the hook (connection id and overrides; no secret)."""
        return {"deployment_service_conn_id": self.deployment_service_conn_id, **self.hook_overrides}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-only keyword arguments (no secret: the API key stays in the connection)."""
        kwargs: dict[str, Any] = {
            "deployment_service_conn_id": self.deployment_service_conn_id,
            "poll_interval": self.poll_interval,
            **self.hook_overrides,
        }
        return serialized_classpath(self, DeploymentGuardTrigger), kwargs

    @property
    def key_prefix(self) -> str:
        """The Variable key prefix of this connection's guarded revisions."""
        return f"{GUARD_KEY_PREFIX}:{self.deployment_service_conn_id}:"

    # ---- run
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Join the shared poller; each round, judge the guarded revisions that are due and yield a regression's
        event once it is claimed."""
        from airflow_provider.analysis.measuring.run import MeasuringSources
        from airflow_provider.hooks.deployment_service import DeploymentServiceHook

        self.log.info(
            "Guarding the revisions handed to the guard through connection %r, looking every %g s",
            self.deployment_service_conn_id,
            self.poll_interval,
        )
        poller = _BatchPoller.acquire(self.hook_params, self.poll_interval)
        watch = _Watch(ids=[], names=[], query=None)
        poller.watch(watch)
        hook = DeploymentServiceHook(**self.hook_params)
        scrubber = Scrubber()
        sources: dict[str, MeasuringSources] = {}
        announcing: list[tuple[float, str]] = []
        try:
            while True:
                due = [key for at, key in announcing if at <= time.monotonic()]
                announcing = [item for item in announcing if item[1] not in due]
                for key in due:
                    with contextlib.suppress(Exception):  # left claimed: its lease runs out, then announced
                        await mark_announced(self.store, key, self.token)
                timeout = max(0.0, announcing[0][0] - time.monotonic()) if announcing else None
                try:
                    update = await next_update(watch.queue, timeout)
                except asyncio.TimeoutError:
                    continue
                if update.covered is not None:  # a part of a round: the closing update has it all
                    continue
                while not watch.queue.empty():  # behind the poller (a long round): judge the newest look only
                    newer = watch.queue.get_nowait()
                    update = newer if newer.covered is None else update
                if update.error is not None:
                    self.log.warning("The guard cannot look at its deployments: %s", update.error)
                    continue
                await self._refresh(update.found)
                payloads = await self._round(update.found, update.failures, hook, scrubber, sources)
                self.stats["rounds"] += 1  # a round judged (diagnostics, benchmarks)
                watch.ids = sorted(self.guarded)
                for payload in payloads:
                    self.log.warning(
                        "%s: revision %s of %r (%s): %s",
                        REGRESSED,
                        payload["revision_id"],
                        payload["deployment_name"],
                        payload["deployment_id"],
                        payload["message"],
                    )
                    yield TriggerEvent(payload)
                    announcing.append(
                        (
                            time.monotonic() + self.announce_delay,
                            claim_key(payload["deployment_id"], payload["revision_id"]),
                        )
                    )
        finally:
            await poller.unsubscribe(watch)
            for source in sources.values():
                with contextlib.suppress(Exception):
                    await source.aclose()
            with contextlib.suppress(Exception):
                await hook.aclose()

    async def _refresh(self, found: dict[str, Deployment]) -> None:
        """Read the guarded revisions' keys; load the new ones, and those whose deployment serves another revision
        than the one guarded (handed a newer one since); forget those whose key is gone (ended early)."""
        try:
            keys = set(await self.store.keys(self.key_prefix))
        except Exception as err:  # the API server briefly unreachable: the known guards go on
            self.log.warning("Could not list the guarded revisions: %s", err)
            return
        for deployment_id in [key for key, guarded in self.guarded.items() if guarded.key not in keys]:
            self.log.info("Guard of deployment %s ended (its record was removed)", deployment_id)
            del self.guarded[deployment_id]
        for key in keys:
            deployment_id = key.removeprefix(self.key_prefix)
            known = self.guarded.get(deployment_id)
            shown = found.get(deployment_id)
            if known is not None and (shown is None or shown.active_revision_id == known.record.revision_id):
                continue
            try:
                value = await self.store.get(key)
                record = GuardRecord.model_validate(value)
            except (pydantic.ValidationError, TypeError, ValueError) as err:
                self.log.warning("Guard record %s cannot be read (%s); ignoring it", key, err)
                continue
            except Exception as err:
                self.log.warning("Could not read guard record %s: %s", key, err)
                continue
            if known is not None and known.record.revision_id == record.revision_id:
                continue
            if (record.deployment_id, record.revision_id) in self.regressed or await self._announced(record):
                continue
            self.guarded[record.deployment_id] = self._start(key, record)

    async def _announced(self, record: GuardRecord) -> bool:
        """Whether this revision's regression was announced already (a restart after it: never judged again); a
        claim not yet announced is judged again, and :func:`claim` decides who announces it."""
        try:
            existing = await self.store.get(claim_key(record.deployment_id, record.revision_id))
        except Exception:
            return False
        return isinstance(existing, dict) and existing.get("state") == "announced"

    def _start(self, key: str, record: GuardRecord, now: datetime | None = None) -> _Guarded:
        """Start (or restart) guarding ``record``: the window running now."""
        analysis = record.the_analysis()
        now = now or datetime.now(timezone.utc)
        start, window = window_of(analysis, record, now)
        self.log.info(
            "Guarding revision %s of %r until %s (%d round(s) of %g s per window)",
            record.revision_id,
            record.deployment_name,
            record.until.isoformat(),
            window.rounds(),
            analysis.interval_seconds,
        )
        return self._window(key, record, analysis, start, window)

    def _window(self, key: str, record: GuardRecord, analysis: Analysis, start: datetime, window: Analysis) -> _Guarded:
        target = AnalysisTarget(
            deployment_id=record.deployment_id,
            name=record.deployment_name,
            revision_id=record.revision_id,
            live_since=start,
            custom_url=record.custom_url,
            baseline=record.baseline,
        )
        labels = [check.label() for check in window.checks]
        judgement = Judgement(window, record.revision_id, labels)
        first = start.timestamp() + window.initial_delay_seconds + window.interval_seconds
        return _Guarded(
            key=key,
            record=record,
            analysis=analysis,
            window_start=start,
            window=window,
            judgement=judgement,
            judging=RoundJudging({record.deployment_id: judgement}, str),
            target=target,
            next_due=first,
        )

    async def _end(self, guarded: _Guarded, why: str) -> None:
        """Stop guarding and remove the record (unless it names another revision by now)."""
        self.guarded.pop(guarded.record.deployment_id, None)
        self.stats["ended"] += 1
        self.log.info(
            "Guard of revision %s of %r ended: %s", guarded.record.revision_id, guarded.record.deployment_name, why
        )
        try:
            value = await self.store.get(guarded.key)
            if isinstance(value, dict) and value.get("revision_id") == guarded.record.revision_id:
                await self.store.delete(guarded.key)
        except Exception as err:
            self.log.warning("Could not remove guard record %s: %s", guarded.key, err)

    async def _round(
        self,
        found: dict[str, Deployment],
        failures: dict[str, Exception],
        hook: Any,
        scrubber: Scrubber,
        sources: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """Judge the guarded revisions that are due; the regressions claimed by this trigger, as payloads."""
        now = datetime.now(timezone.utc)
        due: dict[str, list[_Guarded]] = {}
        for guarded in list(self.guarded.values()):
            record = guarded.record
            if now >= record.until:
                await self._end(guarded, "its guarded time is over with no regression")
                continue
            if record.deployment_id in failures:
                continue  # not seen this round: next round
            deployment = found.get(record.deployment_id)
            if deployment is None:  # listed from the next round on (just handed), or gone: three looks tell
                guarded.missing += 1
                if guarded.missing >= 3:
                    await self._end(guarded, "its deployment was not found")
                continue
            guarded.missing = 0
            if deployment.active_revision_id != record.revision_id:
                await self._end(guarded, f"revision {deployment.active_revision_id} serves now")
                continue
            # Due at the look nearest its time: a round a little early still measures it (else each revision would
            # skip every other look whenever its rounds and the poller's drift apart).
            if (
                deployment.status != DeploymentStatus.READY
                or now.timestamp() + self.poll_interval / 2 < guarded.next_due
            ):
                continue
            key = json.dumps(record.analysis, sort_keys=True)
            due.setdefault(key, []).append(guarded)
        payloads: list[dict[str, Any]] = []
        for key, group in due.items():
            measuring = await self._sources(key, group[0].analysis, hook, scrubber, sources)
            if measuring is None:
                continue
            targets = [guarded.target for guarded in group]
            deployments = {guarded.record.deployment_id: found[guarded.record.deployment_id] for guarded in group}
            checks = group[0].window.checks
            readings = await asyncio.gather(*(measuring.measure(check, targets, now, deployments) for check in checks))
            for guarded in group:
                payload = self._judge(guarded, checks, readings, now)
                if payload is not None:
                    payloads.append(payload)
        claimed = await asyncio.gather(*(self._claim(payload) for payload in payloads))
        await self._write_statuses(now)
        return [payload for payload, mine in zip(payloads, claimed, strict=True) if mine]

    async def _write_statuses(self, now: datetime) -> None:
        """Write what the guarded revisions last measured (each at most every :attr:`status_every` seconds)."""
        due = [
            guarded
            for guarded in self.guarded.values()
            if guarded.last_measured and time.monotonic() - guarded.status_written >= self.status_every
        ]
        for guarded in due:
            guarded.status_written = time.monotonic()
            status = {
                "revision_id": guarded.record.revision_id,
                "last_measured": guarded.last_measured,
                "window_start": guarded.window_start.isoformat(),
                "rounds": guarded.rounds,
                "measurements": [dict(item) for item in guarded.measurements],
                "written_at": now.isoformat(),
            }
            try:
                await self.store.set(status_key(self.deployment_service_conn_id, guarded.record.deployment_id), status)
            except Exception as err:  # for people only: tried again at the next write
                self.log.warning("Could not write the guard status of %s: %s", guarded.record.deployment_id, err)

    async def _claim(self, payload: dict[str, Any]) -> bool:
        """Whether this trigger announces ``payload`` (see :func:`claim`)."""
        key = claim_key(payload["deployment_id"], payload["revision_id"])
        try:
            mine = await claim(self.store, key, self.token, payload, settle=self.claim_settle, lease=self.claim_lease)
        except Exception as err:  # not claimed: the record is still there, judged again next round
            self.log.warning("Could not claim the regression of revision %s: %s", payload["revision_id"], err)
            return False
        if mine:
            self.stats["regressions"] += 1
        else:
            self.log.info("Regression of revision %s announced by another triggerer", payload["revision_id"])
        return mine

    async def _sources(
        self, key: str, analysis: Analysis, hook: Any, scrubber: Scrubber, sources: dict[str, Any]
    ) -> Any:
        from airflow_provider.analysis.measuring.run import MeasuringSources

        if key not in sources:
            try:
                sources[key] = await MeasuringSources.open(analysis, hook, scrubber)
            except Exception as err:  # a connection missing: said once per round, tried again next round
                self.log.warning("The guard's analysis cannot be measured: %s", scrubber(str(err)))
                return None
        return sources[key]

    def _judge(
        self, guarded: _Guarded, checks: list[Any], readings: list[dict[str, Any]], now: datetime
    ) -> dict[str, Any] | None:
        """Record one round of ``guarded``; its regression's payload when it failed."""
        record = guarded.record
        guarded.rounds += 1
        self.stats["measured"] += 1
        for check, by_target in zip(checks, readings, strict=True):
            measurement = guarded.judging.record(
                check, check.label(), guarded.target, by_target[record.deployment_id], guarded.rounds, now
            )
            guarded.measurements = [*guarded.measurements, measurement][-EVENT_MEASUREMENTS:]
        guarded.last_measured = now.isoformat()
        guarded.next_due = (
            guarded.window_start.timestamp()
            + guarded.window.initial_delay_seconds
            + (guarded.rounds + 1) * guarded.window.interval_seconds
        )
        judgement = guarded.judgement
        if judgement.verdict == "failed":
            result = judgement.finish(guarded.rounds)
            self.guarded.pop(record.deployment_id, None)
            self.regressed.add((record.deployment_id, record.revision_id))
            return self._payload(guarded, result, now)
        if judgement.decided or guarded.rounds >= guarded.window.rounds():
            # The window is over (passed, or inconclusive: never a rollback); the next one measures from now.
            left = (record.until - now).total_seconds() - guarded.analysis.initial_delay_seconds
            count = guarded.analysis.count or guarded.window.rounds()
            rounds = max(1, min(count, int(left // guarded.analysis.interval_seconds)))
            self.log.info(
                "Guard window of revision %s of %r: %s (%s); the next window starts",
                record.revision_id,
                record.deployment_name,
                judgement.verdict or "passed",
                judgement.reason or "no regression",
            )
            window = window_analysis(guarded.analysis, rounds, windows_in(guarded.analysis, record))
            self.guarded[record.deployment_id] = self._window(guarded.key, record, guarded.analysis, now, window)
        return None

    def _payload(self, guarded: _Guarded, result: dict[str, Any] | Any, now: datetime) -> dict[str, Any]:
        record = guarded.record
        failing = next(
            (
                item
                for item in reversed(guarded.judgement.measurements)
                if item["verdict"] == "failed" and item["check"] == result["failing_check"]
            ),
            None,
        )
        after = (now - record.landed_at).total_seconds()
        return {
            "kind": REGRESSED,
            "event_id": f"{record.deployment_id}:{REGRESSED}:{record.revision_id}",
            "origin": "guard",
            "outcome": REGRESSED,
            "deployment_id": record.deployment_id,
            "deployment_name": record.deployment_name,
            "revision_id": record.revision_id,
            "previous_revision_id": record.previous_revision_id,
            "conn_id": record.conn_id,
            "landed_at": record.landed_at.isoformat(),
            "regressed_at": now.isoformat(),
            "after_seconds": round(after, 3),
            "window_start": guarded.window_start.isoformat(),
            "failing_check": result["failing_check"],
            "reason": result["reason"],
            "message": regression_text(failing, record.baseline, after),
            "measurements": [dict(item) for item in guarded.judgement.measurements[-EVENT_MEASUREMENTS:]],
            "baseline": record.baseline,
            "handed_by": record.handed_by,
        }
