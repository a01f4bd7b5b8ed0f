"""The crash-point harness: kill a task at every point where its worker can die, retry it as Airflow does,
and check the deployment's real state in the emulator.

How one scenario is swept (the scenarios are in ``tests/reliability/crash_scenarios.py``):

1. **A clean run records the events.** An event is what a dying worker can fall between: a request to the
   service (seen in httpx's transport, so every request the code makes is one, whichever module sends it),
   a ``task_state_store`` write, an XCom push, a deferral (its trigger then fires inline, rebuilt from its
   ``serialize()`` as the triggerer does) and the end of the try (before Airflow records the result).
   Nothing lists them by hand: a request or a write added to the code is a new crash point.
2. **Every gap between two events is a crash point.** Killing the worker just after one event or just
   before the next leaves the same world behind (a killed worker does nothing more: every later event of
   that try dies too), so ``n`` events make ``n + 1`` points, from "before the first request" to "after the
   try ended, before Airflow recorded it". After a request, the kill lands once the service has processed
   it: the worker never sees the answer. After a deferral, it lands once the trigger fired: the worker dies
   as it resumes. The kill is :class:`WorkerKilled`, a ``BaseException``: no ``except Exception`` of the
   task can catch it.
3. **At each point the task is killed, then retried as Airflow does**: a fresh operator, ``try_number + 1``,
   the earlier try's XComs cleared, the same ``task_state_store`` (or none: Airflow < 3.3); a retryable
   failure is retried again, up to :data:`MAX_TRIES` tries. The retry starts at once: the deployment is as
   the kill left it.
4. **Then every invariant of** :data:`INVARIANTS` **is checked** on the deployment as the emulator's own
   state shows it (``EmulatorState.deployment``: revisions, statuses, ``resource_spec``, secrets), never
   through the provider's client, and on what the task left (its verdict, XComs, asset events, table).

Each scenario is swept on three paths (:data:`PATHS`), each with and without a ``task_state_store``.

Time is virtual and moves only when someone looks: every list request (a look at deployments) moves the
emulator's frozen clock and the clock the provider's modules read (``time.time()``, ``time.monotonic()``)
by :data:`LOOK_SECONDS`. Builds, waits, bakes and deadlines thus take the same number of looks on every
run and nothing sleeps for them; that is what makes a kill run repeat the clean run's events up to the kill
(checked at every event: a difference is a :class:`HarnessError`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import pkgutil
import re
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Literal

import httpx
import httpx._transports.default as httpx_transports
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

import airflow_provider
from airflow_provider.decisions.record import RECORD_KEY, entries_of

MAX_TRIES = 4
"""Tries per run, the first included (Airflow retries a retryable failure; a killed try counts)."""

# ------------------------------------------------------------------------------------------ the rules
INVARIANTS: dict[str, str] = {
    "one revision per change": (
        "the deployment gained at most one revision per intended change (the patch, the rollback)"
    ),
    "landed is true": (
        "a success ('landed') only when the change's revision serves (active, status READY), passed verify "
        "and its analysis, and stayed live for the whole bake"
    ),
    "rolled back is true": (
        "'rolled back' only when the previous build serves again (active, status READY) with its previous "
        "resource_spec and secrets, or the message names what was not undone"
    ),
    "no success on a failed check": (
        "never success when the revision failed verify, its analysis, the bake or its build"
    ),
    "the expected verdict": (
        "the verdict is the one the scenario calls for (landed, rolled back or failed), with or without a crash"
    ),
    "outputs agree": (
        "the asset events, the XComs, the returned value and the fleet table agree with the verdict and "
        "with the deployment"
    ),
    "a verdict within the retries": (
        f"every try ends, and the task reaches a verdict (a success, or a failure Airflow does not retry) "
        f"within {MAX_TRIES} tries"
    ),
    "what the task reports is in its record": (
        "with a task_state_store, a patch or rollback task's verdict is in its record (what the Rollouts view reads): "
        "a landing as the serving revision's 'landed' entry, a rollback as the serving revision's 'rolled_back' entry, "
        "a failure as the verdict that failed it ('rejected', 'timed_out' or 'failed')"
    ),
    "a recorded failed verdict is never followed by a landing": (
        "with a task_state_store, once a try of a patch task reached a failed verdict on its revision (verify, the "
        "analysis, the bake, a timeout: recorded in the store, or said in its log as it started rolling back), no "
        "later try lands it, however the truth changed since"
    ),
}
"""Every invariant, by name: what it promises. :func:`check_run` checks them all after every run."""

PATHS: dict[str, str] = {
    "worker": "not deferrable: waits and bakes on the worker",
    "triggerer": "deferrable, resumed as the triggerer does: the defer kwargs merged into the call",
    "dag.test": "deferrable, resumed as Airflow 3.3.2's dag.test() does: only event=, the defer kwargs dropped",
}
"""How a scenario's task waits, and how it is resumed after a deferral."""

STORE_MODES: dict[str, bool] = {"task_state_store": True, "no store": False}
"""With Airflow 3.3's ``task_state_store``, and without (Airflow < 3.3)."""

LOOK_SECONDS = 2.5
"""Virtual seconds each look at deployments (a list request) takes: a 2 s build ends within one look."""
MAX_REQUESTS_PER_TRY = 400
"""A try that sends more requests than this is a runaway loop (under "a verdict within the retries")."""
TRIGGER_SECONDS = 30.0
"""Real seconds a trigger may run without an event before the try counts as hung."""
SETTLE_YIELDS = 50
"""Event-loop turns a trigger's look waits before it is sent, so that whoever waits on the previous look
has read it (and, when that look decided the wait, left: the look is then never sent). Without this, how
many looks a trigger makes after its decision would depend on real timing, and so would the clock."""
ROLLED_BACK_CLAIM = re.compile(r"\brolled back\b", re.IGNORECASE)
ROLLING_BACK = re.compile(r"; rolling back to revision ")
"""How a patch task's log says it reached a failed verdict and starts its rollback."""
"""How a failure message claims a rollback."""
REASON_UNKNOWN_OUTCOME = "rolled_back_reason_unknown"
"""The fleet row of a deployment a retry found rolled back by an earlier try that left no record of why."""
REASON_UNKNOWN_SAYS = "rolled back by an earlier try; why was not recorded"
"""What such a row must say (TRUST-FOLLOWUP item 6)."""
LIST_PATH = "/v2/deployments"
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class WorkerKilled(BaseException):
    """The worker died (OOM kill, node lost): a ``BaseException``, so no ``except Exception`` catches it."""


class RunawayTry(BaseException):
    """A try sent more than :data:`MAX_REQUESTS_PER_TRY` requests, or its trigger ran too long."""


class HarnessError(BaseException):
    """The harness itself went wrong (a kill run that does not repeat the clean run): a ``BaseException``,
    so the task under test cannot swallow it."""


# ------------------------------------------------------------------------------------------ events
EventKind = Literal["request", "store", "xcom", "defer", "end"]


@dataclass(frozen=True)
class Event:
    """One thing a worker does that a crash can fall before or after.

    :param kind: ``request``, ``store`` (a ``task_state_store`` write), ``xcom`` (a push), ``defer`` (the
        task deferred; its trigger then fired) or ``end`` (the try returned or raised).
    :param what: the request's method and route (ids as ``{id}``), the key written or pushed, the trigger
        and the method to resume, or how the try ended.
    """

    kind: EventKind
    what: str

    def __str__(self) -> str:
        shown = {"request": "{}", "store": "store write {}", "xcom": "XCom push {}", "defer": "defer: {}"}
        return shown.get(self.kind, "the try {}").format(self.what)


def point_label(events: list[Event], boundary: int) -> str:
    """What killing the worker at ``boundary`` (once ``boundary`` events are done) means, for a person."""
    if boundary == 0:
        return f"#0 before {events[0]}" if events else "#0 before anything"
    event = events[boundary - 1]
    if event.kind == "request":
        return f"#{boundary} after {event} (processed, answer lost)"
    if event.kind == "defer":
        return f"#{boundary} at resume ({event.what.split(' -> ')[0]} fired)"
    if event.kind == "end":
        return f"#{boundary} after the try {event.what}, before Airflow recorded it"
    return f"#{boundary} after {event}"


class Recorder:
    """The events of one try, and the kill armed at one boundary (``None``: a try that is not killed).

    :param kill_at: the boundary to die at: the number of events done when the worker dies.
    :param expected: the clean run's events; a kill run must repeat them up to the kill.
    """

    def __init__(self, kill_at: int | None = None, expected: list[Event] | None = None) -> None:
        self.kill_at = kill_at
        self.expected = expected
        self.events: list[Event] = []
        self.requests = 0
        self.dead = False
        self._lock = threading.RLock()

    def act(self, event: Event, action: Callable[[], Any]) -> Any:
        """Do ``action`` as ``event``: die before it when the worker is dead already (or the kill is at 0),
        die after it when the kill is due then."""
        with self._lock:
            if self.dead or (self.kill_at == 0 and not self.events):
                self._die(point_label([event], 0))
            if event.kind == "request":
                self.requests += 1
                if self.requests > MAX_REQUESTS_PER_TRY:
                    raise RunawayTry(f"more than {MAX_REQUESTS_PER_TRY} requests in one try (the last: {event})")
        result = action()
        with self._lock:
            self.events.append(event)
            done = len(self.events)
            if self.expected is not None and (done > len(self.expected) or self.expected[done - 1] != event):
                clean = self.expected[done - 1] if done <= len(self.expected) else "(the clean run had ended)"
                raise HarnessError(f"the kill run differs from the clean run at event {done}: {event}; clean: {clean}")
            if self.kill_at == done:
                self._die(point_label(self.events, done))
        return result

    def _die(self, where: str) -> None:
        self.dead = True
        raise WorkerKilled(where)


# ------------------------------------------------------------------------------------- virtual time
class VirtualClock:
    """The clock the provider's modules read during a run; it moves with the emulator's frozen clock.

    Installed (:func:`virtual_time`) as the ``time`` name of every loaded ``airflow_provider`` module that
    imported ``time``, the emulator's excepted, so it follows the code wherever it moves. ``time()`` and
    ``monotonic()`` read it; ``sleep()`` moves it (and the emulator) instead of sleeping; anything else is
    the real ``time`` module's. A sleep bound as a default argument (``sleep=time.sleep``) stays real and
    short: the tasks poll every millisecond of real time.

    It *is* the emulator's frozen clock: what the task stamps (a tracing query's ``end_time``) is on the
    clock the service reads, however the harness moves the emulator between runs.

    :param state: the emulator's state (its frozen clock is this one).
    """

    def __init__(self, state: Any) -> None:
        self.state = state

    @property
    def now(self) -> float:
        """The emulator's frozen clock, in seconds since the epoch."""
        return float(self.state.now().timestamp())

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, float(seconds)))

    def advance(self, seconds: float) -> None:
        """Move the clock (the emulator's) by ``seconds``."""
        if seconds:
            self.state.advance(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


NOT_PRELOADED = ("airflow_provider.emulator", "airflow_provider.plugins")
"""Provider packages :func:`virtual_time` does not import beforehand: the emulator (it *is* the clock, never
patched) and the UI plugin (no task runs it)."""


@contextmanager
def virtual_time(clock: VirtualClock) -> Iterator[list[str]]:
    """Point the ``time`` name of the provider's modules at ``clock``; yield the modules' names.

    Every provider module is imported first: the triggers load only when a task first defers, and one loaded
    after this point would read the real clock (a bake trigger then waited in real time for a deadline the
    virtual clock had set minutes ahead, when this file ran on its own)."""
    for found in pkgutil.walk_packages(airflow_provider.__path__, "airflow_provider."):
        if not found.name.startswith(NOT_PRELOADED):
            importlib.import_module(found.name)
    patched: list[types.ModuleType] = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("airflow_provider.")
        and not name.startswith("airflow_provider.emulator")
        and getattr(module, "time", None) is time
    ]
    for module in patched:
        module.time = clock  # type: ignore[attr-defined]
    try:
        yield [module.__name__ for module in patched]
    finally:
        for module in patched:
            module.time = time  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------- the transport
def route_of(request: httpx.Request) -> str:
    """``METHOD /path`` with every id as ``{id}``."""
    return f"{request.method} {_UUID.sub('{id}', request.url.path)}"


class Transport:
    """Sees every request of the provider's clients (httpx's own transports are patched while installed).

    A worker's request (the sync client) is an :class:`Event` of the current try's :attr:`recorder`; a
    trigger's (the async client) is not a crash point: the triggerer sends it, not the worker. Every look
    at deployments (``GET /v2/deployments``) first moves the clock by :data:`LOOK_SECONDS`, then lets the
    scenario act (:attr:`on_look`: a revision flapping out of READY during its bake).

    :param clock: the run's clock.
    """

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.recorder = Recorder()
        self.on_look: Callable[[], None] = lambda: None
        self.trigger_requests = 0

    @staticmethod
    def is_look(request: httpx.Request) -> bool:
        """Whether ``request`` is a look at deployments (the list endpoint)."""
        return request.method == "GET" and request.url.path.rstrip("/") == LIST_PATH

    def _look(self, request: httpx.Request) -> None:
        if self.is_look(request):
            self.clock.advance(LOOK_SECONDS)
            self.on_look()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Patch httpx's transports (and share its SSL contexts) until the block ends."""
        sync_send = httpx.HTTPTransport.handle_request
        async_send = httpx.AsyncHTTPTransport.handle_async_request
        ssl_context = httpx_transports.create_ssl_context
        transport = self

        def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
            def send() -> httpx.Response:
                transport._look(request)
                response = sync_send(self, request)
                response.read()  # the service has answered: a kill from now on loses the answer
                return response

            response: httpx.Response = transport.recorder.act(Event("request", route_of(request)), send)
            return response

        async def handle_async_request(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
            if transport.is_look(request):
                for _ in range(SETTLE_YIELDS):
                    await asyncio.sleep(0)
            transport.trigger_requests += 1
            transport._look(request)
            return await async_send(self, request)

        httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
        httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign]
        httpx_transports.create_ssl_context = _shared_ssl_context(ssl_context)
        try:
            yield
        finally:
            httpx.HTTPTransport.handle_request = sync_send  # type: ignore[method-assign]
            httpx.AsyncHTTPTransport.handle_async_request = async_send  # type: ignore[method-assign]
            httpx_transports.create_ssl_context = ssl_context


def _shared_ssl_context(create: Callable[..., Any]) -> Callable[..., Any]:
    """httpx builds an SSL context for every client (about 30 ms: it reads the CA bundle), even for one that
    speaks plain HTTP, and a run makes several clients (each operator its hook's): share one per setting."""
    made: dict[tuple[Any, ...], Any] = {}

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if not isinstance(verify, (bool, str)) or cert is not None:
            return create(verify=verify, cert=cert, trust_env=trust_env)
        if (verify, trust_env) not in made:
            made[verify, trust_env] = create(verify=verify, cert=cert, trust_env=trust_env)
        return made[verify, trust_env]

    return shared


# ------------------------------------------------------------------------- Airflow, as a task sees it
class HarnessTI:
    """A task instance: ``try_number``, ``xcom_push`` (an event; JSON only) and ``xcom_pull`` of its own.

    :param try_number: the try.
    :param transport: whose recorder sees the pushes.
    """

    task_id = "task"
    dag_id = "crash_points"
    run_id = "run"
    map_index = -1

    def __init__(self, try_number: int, transport: Transport) -> None:
        self.try_number = try_number
        self.xcoms: dict[str, Any] = {}
        self._transport = transport

    def xcom_push(self, key: str, value: Any) -> None:
        stored = json.loads(json.dumps(value))
        self._transport.recorder.act(Event("xcom", key), lambda: self.xcoms.__setitem__(key, stored))

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", map_indexes: Any = None, **_: Any) -> Any:
        return self.xcoms.get(key) if task_ids in (None, self.task_id) else None


class HarnessStore:
    """``context["task_state_store"]``: it outlives the tries; every write is an event. Remembers every failed
    verdict a write recorded (a record's ``verdict`` with ``passed`` false), whatever later writes hold.

    :param transport: whose recorder sees the writes.
    """

    def __init__(self, transport: Transport) -> None:
        self.data: dict[str, Any] = {}
        self.failed_verdicts: list[dict[str, Any]] = []
        self._transport = transport

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.data[key])) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        stored = json.loads(json.dumps(value))
        self._transport.recorder.act(Event("store", key), lambda: self.data.__setitem__(key, stored))
        verdict = stored.get("verdict") if isinstance(stored, dict) else None
        if isinstance(verdict, dict) and verdict.get("passed") is False and verdict not in self.failed_verdicts:
            self.failed_verdicts.append(verdict)


class TaskLog:
    """Stands in for a task's logger: keeps the warnings and errors (what a person reads when something went
    wrong), prints nothing (there are thousands of runs)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _keep(self, msg: Any, *args: Any, **_: Any) -> None:
        try:
            self.lines.append(str(msg) % args if args else str(msg))
        except (TypeError, ValueError):
            self.lines.append(" ".join(str(part) for part in (msg, *args)))

    warning = error = exception = critical = _keep

    def _drop(self, *args: Any, **kwargs: Any) -> None:
        return None

    debug = info = _drop

    def __getattr__(self, name: str) -> Any:
        return self._drop


def emitted_events(outlet_events: OutletEventAccessors) -> list[dict[str, Any]]:
    """The asset events a task emitted: ``{"uri", **extra}`` each (direct outlets and through aliases)."""
    found = []
    for key, accessor in outlet_events._dict.items():
        if hasattr(key, "uri") and accessor.extra:
            found.append({"uri": key.uri, **accessor.extra})
        for event in accessor.asset_alias_events:
            found.append({"uri": event.dest_asset_key.uri, **event.extra})
    return found


def rebuild_trigger(trigger: Any) -> Any:
    """The trigger as the triggerer builds it: its class from the path ``serialize()`` gives, and the
    JSON-checked keyword arguments."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


def fire(trigger: Any) -> dict[str, Any]:
    """Run a trigger until its first event; the event's payload."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise RuntimeError(f"{type(trigger).__name__} ended without an event")

    try:
        return asyncio.run(asyncio.wait_for(first(), TRIGGER_SECONDS))
    except asyncio.TimeoutError:
        raise RunawayTry(f"{type(trigger).__name__} ran {TRIGGER_SECONDS:g} s without an event") from None


@dataclass
class TryOutcome:
    """How one try ended.

    :param try_number: the try.
    :param killed: where the worker died (``""``: it did not).
    :param value: what the task returned.
    :param error: what it raised.
    :param xcoms: its XComs (the next try starts without them).
    :param asset_events: the asset events of the call that returned (Airflow drops those of a failed try).
    :param log: its warnings and errors.
    :param gave_kwargs: whether a deferral gave ``kwargs`` (the deferrable paths then resume differently).
    """

    try_number: int
    killed: str = ""
    value: Any = None
    error: BaseException | None = None
    xcoms: dict[str, Any] = field(default_factory=dict)
    asset_events: list[dict[str, Any]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    gave_kwargs: bool = False

    @property
    def succeeded(self) -> bool:
        return not self.killed and self.error is None

    @property
    def retryable(self) -> bool:
        """Whether Airflow tries again: after a kill and most errors, not after a fail or a sensor timeout."""
        if self.killed:
            return True
        return self.error is not None and not isinstance(self.error, (AirflowFailException, AirflowSensorTimeout))

    @property
    def message(self) -> str:
        return "" if self.error is None else f"{type(self.error).__name__}: {self.error}"


def run_try(
    make_task: Callable[[], Any],
    ti: HarnessTI,
    store: HarnessStore | None,
    run_started: datetime,
    path: str,
    transport: Transport,
) -> TryOutcome:
    """One try of a task, as Airflow runs it: ``execute``; after each deferral the trigger (rebuilt from its
    ``serialize()``), then the resume on a fresh operator (as on another worker), called as ``path`` says;
    until the task returns or raises. A kill ends the try where it lands."""
    outcome = TryOutcome(ti.try_number)
    log = TaskLog()
    method, arguments = "execute", dict[str, Any]()
    try:
        while True:
            task = make_task()
            task._cached_logger = log  # what self.log returns (Airflow caches the logger there)
            context: dict[str, Any] = {
                "ti": ti,
                "dag_run": SimpleNamespace(start_date=run_started, run_id=ti.run_id),
                "outlet_events": OutletEventAccessors(),
            }
            if store is not None:
                context["task_state_store"] = store
            try:
                outcome.value = getattr(task, method)(context, **arguments)
            except TaskDeferred as deferred:
                pending = deferred
            except Exception as err:
                outcome.error = err
                transport.recorder.act(Event("end", "raised"), lambda: None)
                break
            else:
                transport.recorder.act(Event("end", "returned"), lambda: None)
                outcome.asset_events = emitted_events(context["outlet_events"])
                break
            trigger = rebuild_trigger(pending.trigger)
            what = f"{type(trigger).__name__} -> {pending.method_name}"
            try:
                payload = transport.recorder.act(Event("defer", what), functools.partial(fire, trigger))
            except Exception as err:  # the trigger failed: Airflow fails the try
                outcome.error = err
                transport.recorder.act(Event("end", "raised"), lambda: None)
                break
            given = dict(pending.kwargs or {})
            outcome.gave_kwargs = outcome.gave_kwargs or bool(given)
            method = pending.method_name
            arguments = {"event": payload, **(given if path == "triggerer" else {})}
    except WorkerKilled as killed:
        outcome.killed = str(killed)
        outcome.value, outcome.error, outcome.asset_events = None, None, []
    outcome.xcoms = dict(ti.xcoms)
    outcome.log = log.lines
    return outcome


# ------------------------------------------------------------------------------------- scenarios
TaskKind = Literal["patch", "rollback", "fleet"]
Verdict = Literal["landed", "rolled back", "failed"]


@dataclass
class World:
    """What a scenario's task is built from: the deployments by name and the revisions its setup named.

    :param state: the emulator's :class:`~airflow_provider.emulator.state.EmulatorState`.
    :param ids: deployment ids by name.
    :param revisions: revision ids by the setup's names (``R0``: the first deployment's active revision
        before the setup).
    :param specs: the ``resource_spec`` the first deployment showed with a named revision, as a task records it
        (the setup's).
    """

    state: Any
    ids: dict[str, str]
    revisions: dict[str, str] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Verifier:
    """The ``verify`` callable a task is given: refuses a new revision of the named deployments, accepts
    anything else, and remembers what it accepted.

    :param refused: names of the deployments whose new revision is bad.
    :param known: revision ids that existed before the task (never refused).
    """

    refused: frozenset[str]
    known: frozenset[str]
    accepted: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, deployment: Any) -> bool:
        if deployment.name in self.refused and deployment.active_revision_id not in self.known:
            return False
        self.accepted.add((deployment.id, deployment.active_revision_id))
        return True


FLAKY = "-flaky"
"""The image tag ending of a revision that leaves READY during its bake (see :class:`Flapping`)."""


class Flapping:
    """Revisions that leave READY during their bake: while a named deployment serves an image ending in
    :data:`FLAKY`, every second look finds it ``AWAITING_DATABASE``; once it serves anything else, READY.

    :param state: the emulator's state.
    :param deployment_ids: the deployments that flap.
    """

    def __init__(self, state: Any, deployment_ids: list[str]) -> None:
        self.state, self.deployment_ids = state, deployment_ids
        self.looks: dict[str, int] = {}

    def __call__(self) -> None:
        for deployment_id in self.deployment_ids:
            view = self.state.deployment(deployment_id)
            if _image(_serving_facts(view)[0]).endswith(FLAKY):
                self.looks[deployment_id] = self.looks.get(deployment_id, 0) + 1
                status = "AWAITING_DATABASE" if self.looks[deployment_id] % 2 == 0 else "READY"
            else:
                status = "READY"
            if view["status"] != status:
                self.state.set_status(deployment_id, status)


@dataclass(frozen=True)
class Scenario:
    """One thing a task is asked to do, the truth about it, and what must come of it.

    :param task: ``patch``, ``rollback`` or ``fleet``.
    :param name: what happens, for a person.
    :param make_task: ``(world, verify, deferrable) -> operator``, called for every execute and resume (a
        fresh operator each time, as on another worker); ``verify`` is ``None`` unless ``verify``.
    :param verdict: what the task must conclude: ``landed`` (a success; for a fleet, it did not stop),
        ``rolled back`` or ``failed``.
    :param changes: how many revisions each deployment the task touches may gain (the patch, the rollback).
    :param setup: runs after the DAG run started, before the task (an earlier task's patch).
    :param verify: whether the task is given ``verify``.
    :param refused: deployments whose new revision ``verify`` refuses.
    :param flapping: deployments whose new revision leaves READY during its bake (its image ends in
        :data:`FLAKY`).
    :param failing_builds: deployments whose every build fails.
    :param unhealthy: deployments whose new revision's app answers its health check with 500 once live (the
        emulator's mark on the next revision to go live; a rollback's revision is healthy): an analysis
        with an ``HttpCheck`` on it fails.
    :param bake_seconds: the bake the task asks for (a landed revision must have served that long).
    :param rollback_to: the setup's name of the revision a rollback must restore (``None``: the one serving
        when the task started).
    :param fleet_outcomes: for a fleet, the outcomes a deployment's row may show, by name (absent: any that
        the other invariants accept).
    :param outcome: for a patch or rollback task that succeeds, the ``outcome`` of the one asset event it must
        emit (``None``: ``rolled_out`` for a patch, ``rolled_back`` for a rollback); ``rolled_back_partially``
        must name what was not restored (its extra ``not_restored``).
    :param redeploy_mode: the emulator's ``redeploy_mode`` for the scenario's runs: ``new_revision`` (a
        redeploy makes a revision) or ``in_place`` (it makes none: the old revision is deployed again).
    :param analysed: whether the task judges its revisions with an analysis (a landed row must then show a
        passed one, and ``fleet_analysis`` must agree with the table).
    :param failing_analysis: deployments whose new revision serves but fails its analysis (its error rate is
        high: the setup gives the next revision that behaviour).
    :param also: other verdicts the task may reach than ``verdict`` (the clean run's), for a scenario whose truth
        changes over time (the setup gives the next revision a behaviour that changes some seconds after it goes
        live): a retry that judges the revision again after a crash judges a later truth. A recorded failed verdict
        still never lands (see :data:`INVARIANTS`).
    """

    task: TaskKind
    name: str
    make_task: Callable[[World, Verifier | None, bool], Any]
    verdict: Verdict
    changes: Mapping[str, int]
    setup: Callable[[World], None] = lambda world: None
    verify: bool = True
    refused: tuple[str, ...] = ()
    flapping: tuple[str, ...] = ()
    failing_builds: tuple[str, ...] = ()
    unhealthy: tuple[str, ...] = ()
    bake_seconds: float = 0.0
    rollback_to: str | None = None
    fleet_outcomes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    outcome: str | None = None
    redeploy_mode: str = "new_revision"
    analysed: bool = False
    failing_analysis: tuple[str, ...] = ()
    also: tuple[Verdict, ...] = ()

    @property
    def deployments(self) -> list[str]:
        """The deployments the task touches."""
        return list(self.changes)

    @property
    def bad(self) -> frozenset[str]:
        """The deployments whose change fails a check (verify, the analysis, the bake or the build)."""
        return frozenset((*self.refused, *self.flapping, *self.failing_builds, *self.unhealthy, *self.failing_analysis))


# ----------------------------------------------------------------------------------------- one run
@dataclass
class Baseline:
    """One deployment as the task found it.

    :param revisions: its revision ids.
    :param active: the revision serving.
    :param serving: revision id -> what serving it meant: (its ``source_revision_config``, the deployment's
        ``resource_spec`` and secrets then); what a rollback to it must restore.
    """

    revisions: list[str]
    active: str
    serving: dict[str, tuple[dict[str, Any], Any, Any]]


@dataclass
class RunResult:
    """One run of a scenario: every try, and the world before and after them."""

    scenario: Scenario
    path: str
    store_mode: str
    point: str
    tries: list[TryOutcome]
    world: World
    baseline: dict[str, Baseline]
    final: dict[str, dict[str, Any]]
    final_now: datetime
    verifier: Verifier
    events: list[Event]
    failed_verdicts: list[dict[str, Any]] = field(default_factory=list)
    """Every failed verdict a try recorded in ``task_state_store`` (none without a store)."""
    record: list[dict[str, Any]] = field(default_factory=list)
    """The task's record (:data:`~airflow_provider.decisions.record.RECORD_KEY`) once the tries ended (none without a
    store)."""

    @property
    def last(self) -> TryOutcome:
        return self.tries[-1]


def _serving_facts(view: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """(the serving revision's ``source_revision_config``, ``resource_spec``, secrets) of a deployment."""
    active = _revision(view, view["active_revision_id"])
    return (
        dict(active.get("source_revision_config") or {}),
        (view.get("source_config") or {}).get("resource_spec"),
        sorted((item["name"], item.get("value")) for item in view.get("secrets") or []),
    )


class Harness:
    """Runs scenarios against one emulator, reset before every run.

    :param state: the emulator's state (its clock frozen).
    """

    def __init__(self, state: Any) -> None:
        self.state = state
        self.clock = VirtualClock(state)
        self.transport = Transport(self.clock)
        self.ids = {item["name"]: item["id"] for item in state.snapshot()["deployments"]}
        self.triggerer_runs: dict[tuple[str, str, str, int | None], _Done] = {}
        """Runs of the ``triggerer`` path, kept for their ``dag.test`` twins (see :func:`sweep`)."""

    @contextmanager
    def active(self) -> Iterator[None]:
        """Install the virtual clock and the transport for a series of runs."""
        with virtual_time(self.clock), self.transport.installed():
            yield

    def run(
        self,
        scenario: Scenario,
        path: str,
        store_mode: str,
        kill_at: int | None = None,
        clean: list[Event] | None = None,
    ) -> RunResult:
        """One run: reset, the DAG run starts, the setup, try 1 (killed at boundary ``kill_at``; ``None``:
        not killed), the retries; the world after them."""
        state = self.state
        state.reset()
        state.update_settings(redeploy_mode=scenario.redeploy_mode)  # type: ignore[arg-type]
        state.advance(1)
        world = World(state, dict(self.ids))
        run_started = state.now()
        state.advance(1)
        before = {}
        for name in scenario.deployments:
            view = state.deployment(world.ids[name])
            before[name] = {view["active_revision_id"]: _serving_facts(view)}
        world.revisions["R0"] = next(iter(before[scenario.deployments[0]]))
        scenario.setup(world)
        for name in scenario.unhealthy:
            state.mark_next_revision_unhealthy(world.ids[name])
        baseline = {}
        for name in scenario.deployments:
            view = state.deployment(world.ids[name])
            serving = {**before[name], view["active_revision_id"]: _serving_facts(view)}
            revisions = [revision["id"] for revision in view["revisions"]]
            baseline[name] = Baseline(revisions, view["active_revision_id"], serving)
        verifier = Verifier(frozenset(scenario.refused), frozenset(r for b in baseline.values() for r in b.revisions))
        self.transport.on_look = Flapping(state, [world.ids[name] for name in scenario.flapping])
        store = HarnessStore(self.transport) if STORE_MODES[store_mode] else None
        tries: list[TryOutcome] = []
        events: list[Event] = []
        try:
            for try_number in range(1, MAX_TRIES + 1):
                for name in scenario.failing_builds:
                    state.fail_next_build(world.ids[name])
                first = try_number == 1
                self.transport.recorder = Recorder(kill_at if first else None, clean if first else None)
                try:
                    outcome = run_try(
                        lambda: scenario.make_task(world, verifier if scenario.verify else None, path != "worker"),
                        HarnessTI(try_number, self.transport),
                        store,
                        run_started,
                        path,
                        self.transport,
                    )
                except RunawayTry as runaway:
                    tries.append(TryOutcome(try_number, error=runaway))
                    break
                if first:
                    events = list(self.transport.recorder.events)
                    if kill_at is not None and not outcome.killed:
                        raise HarnessError(f"the kill run ended before boundary {kill_at} ({len(events)} events)")
                tries.append(outcome)
                if not outcome.retryable:
                    break
        finally:
            self.transport.on_look = lambda: None
            self.transport.recorder = Recorder()
        final = {name: state.deployment(world.ids[name]) for name in scenario.deployments}
        point = "clean run" if kill_at is None else point_label(clean or [], kill_at)
        return RunResult(
            scenario,
            path,
            store_mode,
            point,
            tries,
            world,
            baseline,
            final,
            state.now(),
            verifier,
            events,
            list(store.failed_verdicts) if store is not None else [],
            entries_of(store.data.get(RECORD_KEY)) if store is not None else [],
        )


# ------------------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class Violation:
    """One invariant broken in one run.

    :param invariant: a key of :data:`INVARIANTS`.
    :param seen: what the emulator (or the task's output) showed; revisions by :func:`revision_names`.
    """

    invariant: str
    seen: str


def _revision(view: dict[str, Any], revision_id: str | None) -> dict[str, Any]:
    return next((revision for revision in view["revisions"] if revision["id"] == revision_id), {})


def _image(config: dict[str, Any]) -> str:
    return str(config.get("image_uri") or config.get("repo_ref") or "")


def _spec(spec: Any) -> Any:
    """A ``resource_spec`` without its unset fields."""
    return {key: value for key, value in spec.items() if value is not None} if isinstance(spec, dict) else spec


def _short(value: Any, limit: int = 400) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def revision_names(run: RunResult) -> dict[str, str]:
    """A readable name for every id a run's messages may show: deployments by name; revisions as the setup
    named them (``R0``, ``R1``), else ``old`` (there before) or ``new1``, ``new2``... in creation order (with
    the deployment's name in a fleet)."""
    names = {deployment_id: name for name, deployment_id in run.world.ids.items()}
    named = {revision: name for name, revision in run.world.revisions.items()}
    fleet = run.scenario.task == "fleet"
    for name, view in run.final.items():
        new = 0
        for revision in view["revisions"]:
            label = named.get(revision["id"])
            if label is None and revision["id"] in run.baseline[name].revisions:
                label = "old" if revision["id"] != run.baseline[name].active else "R0"
            if label is None:
                new += 1
                label = f"new{new}"
            names[revision["id"]] = f"{name}:{label}" if fleet else label
    return names


def readable(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every id (whole, or its first 8 characters) replaced by its name."""

    def name_of(match: re.Match[str]) -> str:
        return names.get(match.group(0).lower(), match.group(0))

    text = _UUID.sub(name_of, text)
    short = {key[:8]: value for key, value in names.items()}
    return re.sub(r"\b[0-9a-f]{8}\b(?!-)", lambda match: short.get(match.group(0), match.group(0)), text)


def describe(view: dict[str, Any]) -> str:
    """One line on a deployment: status, the serving revision and its image, revisions, ``resource_spec``."""
    config, spec, _ = _serving_facts(view)
    return (
        f"{view['name']} {view['status']}, serving {view['active_revision_id']} ({_image(config) or '?'}), "
        f"{len(view['revisions'])} revisions, resource_spec {_spec(spec)}"
    )


def verdict_of(run: RunResult) -> Verdict:
    """What the last try claims: ``landed`` (a patch or fleet success), ``rolled back`` (a rollback task's
    success, or a failure message that says so) or ``failed``."""
    last = run.last
    if last.succeeded:
        return "rolled back" if run.scenario.task == "rollback" else "landed"
    if run.scenario.task != "fleet" and ROLLED_BACK_CLAIM.search(str(last.error)):
        return "rolled back"
    return "failed"


def check_run(run: RunResult) -> list[Violation]:
    """Every invariant of :data:`INVARIANTS` that ``run`` broke (revisions named by :func:`revision_names`)."""
    scenario, last = run.scenario, run.last
    if last.killed or isinstance(last.error, RunawayTry) or (not last.succeeded and last.retryable):
        found = [
            Violation("a verdict within the retries", f"try {last.try_number} ended: {last.killed or last.message}")
        ]
    else:
        found = []
        for name, allowed in scenario.changes.items():
            baseline = run.baseline[name].revisions
            new = [revision for revision in run.final[name]["revisions"] if revision["id"] not in baseline]
            if len(new) > allowed:
                shown = ", ".join(f"{rev['id']} {rev['status']} {_image(rev['source_revision_config'])}" for rev in new)
                found.append(
                    Violation("one revision per change", f"{name}: {len(new)} new revisions for {allowed}: {shown}")
                )
        found += _check_fleet(run) if scenario.task == "fleet" else _check_single(run)
    names = revision_names(run)
    return [Violation(violation.invariant, _short(readable(violation.seen, names))) for violation in found]


def _landed_problems(run: RunResult, view: dict[str, Any], revision: str | None) -> list[str]:
    """Why ``revision`` has not landed on ``view``'s deployment (``[]``: it serves, passed verify and the bake)."""
    problems = []
    if view["active_revision_id"] != revision or view["status"] != "READY":
        problems.append(f"{revision} was said to serve")
    if revision in run.baseline[view["name"]].revisions:
        problems.append(f"{revision} is not the change's revision")
    if run.scenario.verify and (view["id"], revision) not in run.verifier.accepted:
        problems.append("verify never accepted it")
    deployed = _revision(view, view["active_revision_id"]).get("updated_at")
    served = (run.final_now - datetime.fromisoformat(deployed)).total_seconds() if deployed else 0.0
    if run.scenario.bake_seconds and served < run.scenario.bake_seconds:
        problems.append(f"it had served {served:g} s of the {run.scenario.bake_seconds:g} s bake")
    return problems


def _restored_problems(run: RunResult, name: str, target: str, text: str) -> list[str]:
    """Why ``name`` does not serve ``target``'s build again with the settings it had then, where ``text``
    (what the task said) does not name what was not undone (``[]``: all restored, or said)."""
    view = run.final[name]
    config, spec, secrets = run.baseline[name].serving[target]
    now = _serving_facts(view)
    serving = view["active_revision_id"]
    problems = []
    if view["status"] != "READY":
        problems.append(f"status {view['status']}")
    if serving != target and serving in run.baseline[name].revisions:
        problems.append(f"{serving}, there before the task, still serves")
    if now[0] != config:
        problems.append(f"the serving revision runs {_image(now[0]) or now[0]}, not {_image(config) or config}")
    if _spec(now[1]) != _spec(spec) and "resource_spec" not in text:
        problems.append(f"resource_spec is {_spec(now[1])}, was {_spec(spec)}, and the task does not say so")
    if now[2] != secrets and "secret" not in text.lower():
        problems.append("the secrets are still the patch's, and the task does not say so")
    return problems


def _check_single(run: RunResult) -> list[Violation]:
    """The invariants of a patch or rollback task (one deployment)."""
    scenario, last = run.scenario, run.last
    name = scenario.deployments[0]
    view = run.final[name]
    verdict = verdict_of(run)
    told = f"{last.message or 'success'}; deployment: {describe(view)}"
    found: list[Violation] = []
    if verdict == "landed":
        problems = _landed_problems(run, view, view["active_revision_id"])
        if problems:
            found.append(Violation("landed is true", f"{'; '.join(problems)} ({told})"))
    if verdict == "rolled back":
        text = last.message if not last.succeeded else "\n".join([*last.log, json.dumps(last.asset_events)])
        target = run.world.revisions[scenario.rollback_to] if scenario.rollback_to else run.baseline[name].active
        problems = _restored_problems(run, name, target, text)
        if problems:
            found.append(Violation("rolled back is true", f"{'; '.join(problems)} ({told})"))
    said = [line for try_ in run.tries[:-1] for line in try_.log if ROLLING_BACK.search(line)]
    if verdict == "landed" and (run.failed_verdicts or (said and STORE_MODES[run.store_mode])):
        recorded = "; ".join(f"{item.get('step')}: {item.get('reason')}" for item in run.failed_verdicts)
        recorded = recorded or f"not recorded, but said: {said[0]}"
        found.append(
            Violation(
                "a recorded failed verdict is never followed by a landing",
                f"recorded failed ({recorded}), then try {last.try_number} landed ({told})",
            )
        )
    if verdict == "landed" and "landed" not in (scenario.verdict, *scenario.also):
        bad = ", ".join(sorted(scenario.bad))
        found.append(Violation("no success on a failed check", f"{bad} failed a check; the task succeeded ({told})"))
    elif verdict not in (scenario.verdict, *scenario.also):
        expected = " or ".join((scenario.verdict, *scenario.also))
        found.append(Violation("the expected verdict", f"expected {expected}, got {verdict} ({told})"))
    if last.succeeded:
        found += _single_outputs(run)
    if STORE_MODES[run.store_mode]:
        found += _record_problems(run, verdict, view["active_revision_id"])
    return found


RECORDED_FAILURES = frozenset({"rejected", "timed_out", "failed"})
"""The record's kinds of a verdict that failed a revision."""


def _record_problems(run: RunResult, verdict: Verdict, serving: str) -> list[Violation]:
    """What a patch or rollback task reported that its record does not say (with a store: the record is what the
    Rollouts view shows of the run)."""
    kinds = {(item.get("kind"), item.get("revision_id")) for item in run.record}
    told = f"record: {sorted((str(kind), str(revision)) for kind, revision in kinds)}"
    if verdict == "landed" and ("landed", serving) not in kinds:
        return [Violation("what the task reports is in its record", f"landed {serving}, not in its {told}")]
    if verdict == "rolled back" and ("rolled_back", serving) not in kinds:
        return [Violation("what the task reports is in its record", f"rolled back to {serving}, not in its {told}")]
    if verdict == "failed" and run.scenario.task == "patch" and not any(kind in RECORDED_FAILURES for kind, _ in kinds):
        return [Violation("what the task reports is in its record", f"failed ({run.last.message}), not in its {told}")]
    return []


def _single_outputs(run: RunResult) -> list[Violation]:
    """A successful patch or rollback task's returned value, XCom and asset event against the deployment."""
    last, scenario = run.last, run.scenario
    active = run.final[scenario.deployments[0]]["active_revision_id"]
    problems = []
    returned = last.value if isinstance(last.value, dict) else {}
    if returned.get("active_revision_id") != active:
        problems.append(f"returned active_revision_id {returned.get('active_revision_id')}, serving {active}")
    if last.xcoms.get("revision_id") != active:
        problems.append(f"XCom revision_id {last.xcoms.get('revision_id')!r}, serving {active}")
    outcome = scenario.outcome or ("rolled_back" if scenario.task == "rollback" else "rolled_out")
    events = [(event.get("revision_id"), event.get("outcome")) for event in last.asset_events]
    if events != [(active, outcome)]:
        problems.append(f"asset events {events}, expected one {outcome} of {active}")
    elif outcome == "rolled_back_partially" and not last.asset_events[0].get("not_restored"):
        problems.append("a rolled_back_partially asset event that names nothing as not restored")
    return [Violation("outputs agree", "; ".join(problems))] if problems else []


def _check_fleet(run: RunResult) -> list[Violation]:
    """The invariants of a fleet rollout: its verdict, each row against its deployment, the counts and the
    asset events."""
    scenario, last = run.scenario, run.last
    table = last.value if last.succeeded else last.xcoms.get("return_value")
    told = "success" if last.succeeded else last.message
    if not isinstance(table, list):
        return [Violation("outputs agree", f"no result table ({told})")]
    found: list[Violation] = []
    should_succeed = scenario.verdict == "landed"
    if last.succeeded and not should_succeed:
        found.append(Violation("no success on a failed check", "the rollout should have stopped; it succeeded"))
    elif last.succeeded != should_succeed:
        found.append(
            Violation("the expected verdict", f"expected {'success' if should_succeed else 'failure'}, got {told}")
        )
    rows = {row["name"]: row for row in table}
    disagreements = []
    for name in scenario.deployments:
        row, view = rows.get(name), run.final[name]
        if row is None:
            disagreements.append(f"{name} has no row")
            continue
        outcome, said = row["outcome"], f"{name}: row {row['outcome']!r} ({_short(row['message'], 260)})"
        accepted = scenario.fleet_outcomes.get(name, ())
        if outcome == REASON_UNKNOWN_OUTCOME:
            problem = _reason_unknown_problem(run, row, accepted)
            if problem:
                found.append(Violation("the expected verdict", f"{said}: {problem}; deployment: {describe(view)}"))
            accepted = ()
        if accepted and outcome not in accepted:
            invariant = "no success on a failed check" if outcome == "landed" else "the expected verdict"
            found.append(
                Violation(invariant, f"{said}, expected {' or '.join(accepted)}; deployment: {describe(view)}")
            )
        if outcome == "landed":
            problems = _landed_problems(run, view, row["to_revision"])
            verdict = (row.get("analysis") or {}).get("verdict")
            if scenario.analysed and verdict != "passed":
                problems.append(f"its analysis was {verdict or 'never made'}, not passed")
            if problems:
                found.append(
                    Violation("landed is true", f"{said}: {'; '.join(problems)}; deployment: {describe(view)}")
                )
        if outcome == "rolled_back" or ROLLED_BACK_CLAIM.search(row["message"]):
            problems = _restored_problems(run, name, run.baseline[name].active, row["message"])
            if problems:
                found.append(Violation("rolled back is true", f"{said}: {'; '.join(problems)}"))
        if outcome != "not_patched" and row["from_revision"] != run.baseline[name].active:
            disagreements.append(
                f"{name}: from_revision {row['from_revision']}, but {run.baseline[name].active} served"
            )
        if outcome in ("failed", "rolled_back") and name not in scenario.bad:
            disagreements.append(f"{name} passed every check, its row counts it as a failure ({outcome})")
    counts: dict[str, int] = {}
    for row in table:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    summary = (last.xcoms.get("fleet_summary") or {}).get("counts")
    if summary != counts:
        disagreements.append(f"fleet_summary counts {summary}, the table {counts}")
    if scenario.analysed:
        disagreements += _fleet_analysis_problems(run, table)
    if last.succeeded:
        disagreements += _fleet_event_problems(run, table)
    if disagreements:
        found.append(Violation("outputs agree", "; ".join(disagreements)))
    return found


def _fleet_analysis_problems(run: RunResult, table: list[dict[str, Any]]) -> list[str]:
    """The XCom ``fleet_analysis`` and the summary's analysis counts against the table's ``analysis`` column:
    the same verdict, failing check and reason per deployment, and a row judged ``failed`` or
    ``inconclusive`` never landed."""
    last = run.last
    analysed = last.xcoms.get("fleet_analysis") or {}
    problems = []
    for row in table:
        shown, result = row.get("analysis"), analysed.get(row["name"])
        if shown is None and result is None:
            continue
        if shown is None or result is None:
            problems.append(f"{row['name']}: the table's analysis {shown}, fleet_analysis {result}")
            continue
        if any(shown.get(key) != result.get(key) for key in ("verdict", "failing_check", "reason")):
            problems.append(f"{row['name']}: the table's analysis {shown} disagrees with fleet_analysis {result}")
        if shown.get("verdict") != "passed" and row["outcome"] == "landed":
            problems.append(f"{row['name']}: landed with an analysis {shown.get('verdict')}")
    failed = sum(1 for result in analysed.values() if result.get("verdict") in ("failed", "inconclusive"))
    summary = last.xcoms.get("fleet_summary") or {}
    if summary.get("analysis_failures") != failed:
        problems.append(f"fleet_summary analysis_failures {summary.get('analysis_failures')}, fleet_analysis {failed}")
    return problems


def _reason_unknown_problem(run: RunResult, row: dict[str, Any], accepted: tuple[str, ...]) -> str:
    """Why a ``rolled_back_reason_unknown`` row is not acceptable (``""``: it is). Only a retry without a
    ``task_state_store`` may not know why an earlier try rolled a deployment back; it must say so, and only of
    a deployment the scenario may roll back (a bad one, or a healthy one rolled back with its wave)."""
    if STORE_MODES[run.store_mode]:
        return "with a task_state_store, why a deployment was rolled back is recorded"
    if REASON_UNKNOWN_SAYS not in row["message"]:
        return f"its message does not say {REASON_UNKNOWN_SAYS!r}"
    if accepted and not any(outcome.startswith("rolled_back") for outcome in accepted):
        return f"expected {' or '.join(accepted)}: it should not have been rolled back"
    return ""


FLEET_EVENT_OUTCOMES: dict[str, tuple[str, ...]] = {
    "landed": ("rolled_out",),
    "rolled_back": ("rolled_back",),
    "rolled_back_with_wave": ("rolled_back",),
    "rolled_back_partially": ("rolled_back_partially",),
    "rolled_back_with_wave_partially": ("rolled_back_partially",),
    REASON_UNKNOWN_OUTCOME: ("rolled_back", "rolled_back_partially"),
}
"""The asset event a successful fleet task may emit for a row, by the row's outcome: ``rolled_out`` for a
deployment it landed, ``rolled_back`` or ``rolled_back_partially`` for one it rolled back (none for the
others). A rollback whose reason is not known may be either: the event's content is checked instead."""


def _fleet_event_problems(run: RunResult, table: list[dict[str, Any]]) -> list[str]:
    """A successful fleet task's asset events against its rows and the deployments: one event per row that
    landed (of its ``to_revision``) or was rolled back (of the revision serving now, ``rolled_back`` or
    ``rolled_back_partially`` as the row's outcome says), and none for the others. A ``rolled_back`` event
    claims the deployment is back where it was (besides what its ``not_restored`` names); a
    ``rolled_back_partially`` one names what was not undone."""
    expected: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for row in table:
        outcomes = FLEET_EVENT_OUTCOMES.get(row["outcome"])
        if outcomes is not None:
            serving = run.final[row["name"]]["active_revision_id"]
            expected[row["deployment_id"]] = (row["to_revision"] if outcomes == ("rolled_out",) else serving, outcomes)
    names = {row["deployment_id"]: row["name"] for row in table}
    problems = []
    seen: list[str] = []
    for event in run.last.asset_events:
        deployment_id, revision, outcome = event.get("deployment_id"), event.get("revision_id"), event.get("outcome")
        seen.append(str(deployment_id))
        wanted = expected.get(str(deployment_id))
        if wanted is None or (revision, outcome) not in [(wanted[0], allowed) for allowed in wanted[1]]:
            called = f"{' or '.join(wanted[1])} of {wanted[0]}" if wanted else "none"
            problems.append(f"asset event {outcome} of {revision} for {deployment_id}, its row calls for {called}")
        elif outcome == "rolled_back_partially" and not event.get("not_restored"):
            problems.append(f"a rolled_back_partially event of {deployment_id} names nothing not undone")
        elif outcome == "rolled_back":
            name = names[str(deployment_id)]
            not_restored = json.dumps(event.get("not_restored") or [])
            wrong = _restored_problems(run, name, run.baseline[name].active, not_restored)
            if wrong:
                problems.append(f"a rolled_back event of {name}, but {'; '.join(wrong)}")
    for deployment_id in expected:
        if seen.count(deployment_id) != 1:
            problems.append(f"{seen.count(deployment_id)} asset event(s) for {deployment_id}, its row calls for one")
    return problems


# -------------------------------------------------------------------------------- a whole sweep
@dataclass
class Sweep:
    """Every crash point of one scenario on one path, with and without a store: what ran, what broke.

    :param scenario: the scenario.
    :param path: a key of :data:`PATHS`.
    """

    scenario: Scenario
    path: str
    points: int = 0
    labels: dict[str, list[str]] = field(default_factory=dict)
    """The crash points of each store mode, as :func:`point_label` names them."""
    runs: int = 0
    same_as_triggerer: int = 0
    """Runs not repeated: on the ``dag.test`` path, a run whose deferrals all gave no kwargs makes the very
    calls the ``triggerer`` path made, and its result is taken from there."""
    seconds: float = 0.0
    """Wall-clock seconds the sweep took."""
    cpu_seconds: float = 0.0
    """CPU seconds it took (every thread of the process: the task's, the emulator's); unlike the wall
    clock, this does not grow when other processes share the machine."""
    violations: list[tuple[str, str, Violation]] = field(default_factory=list)
    """``(store mode, crash point, violation)``."""


@dataclass(frozen=True)
class _Done:
    """A run's point, events and violations; a ``triggerer`` run is kept for its ``dag.test`` twin."""

    point: str
    events: list[Event]
    violations: list[Violation]
    gave_kwargs: bool


def sweep(harness: Harness, scenario: Scenario, path: str) -> Sweep:
    """Run ``scenario`` on ``path`` cleanly, then killed at each of its crash points, with and without a
    ``task_state_store``."""
    result = Sweep(scenario, path)
    started, cpu_started = time.monotonic(), time.process_time()
    for store_mode in STORE_MODES:
        clean = _run_once(harness, result, store_mode, None, None)
        result.points += len(clean.events) + 1
        result.labels[store_mode] = [point_label(clean.events, boundary) for boundary in range(len(clean.events) + 1)]
        for boundary in range(len(clean.events) + 1):
            _run_once(harness, result, store_mode, boundary, clean.events)
    result.seconds = time.monotonic() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result


def _run_once(
    harness: Harness, result: Sweep, store_mode: str, kill_at: int | None, clean: list[Event] | None
) -> _Done:
    scenario, path = result.scenario, result.path
    key = (scenario.task, scenario.name, store_mode, kill_at)
    twin = harness.triggerer_runs.get(key) if path == "dag.test" else None
    if twin is not None and not twin.gave_kwargs:
        done = twin
        result.same_as_triggerer += 1
    else:
        run = harness.run(scenario, path, store_mode, kill_at, clean)
        done = _Done(run.point, run.events, check_run(run), any(try_.gave_kwargs for try_ in run.tries))
        result.runs += 1
        if path == "triggerer":
            harness.triggerer_runs[key] = done
    result.violations += [(store_mode, done.point, violation) for violation in done.violations]
    return done
