"""The watcher never announces a revision Airflow rejects (issue 30): ``DeploymentEventTrigger`` runs next to a
real ``PatchDeploymentOperator`` whose analysis fails and rolls back, against the emulator; the judging marker the
task writes to the deployment's asset state store is what the watcher reads (both through one fake store, as
Airflow's supervisor would relay them). Then the settle time alone, the verdict fields of an announced
revision, and ``revision_rolled_back`` / ``revision_replaced``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider.assets import deployment_asset_uri
from airflow_provider.decisions.judging_marker import JUDGING_KEY, judging_of, with_marker
from airflow_provider.decisions.settling import Seen
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.tasks import publishing
from airflow_provider.triggers.deployment_service import DeploymentEventTrigger, active_pollers
from airflow_provider.triggers.watcher import PROBE_KEY, JudgingReader
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json, wait_until
from tests.tasks.test_patch_analysis import (
    SEED,
    TRAFFIC,
    analysis_of,
    context_with_events,
    health_check,
    patch_op,
    set_next_revision_behaviour,
)

POLL = 0.05


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


class AssetStore:
    """One asset's state store as both sides reach it: ``get``/``set`` (a task), ``aget``/``aset`` (a trigger).

    :param exists: ``False``: the asset is not in Airflow: a read gives the default (Airflow's client turns the
        API server's 404 into "not found"), a write fails.
    """

    def __init__(self, exists: bool = True) -> None:
        self.data: dict[str, Any] = {}
        self.exists = exists
        self.history: list[Any] = []

    def _check(self) -> None:
        if not self.exists:
            raise RuntimeError("Asset not found")

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.data[key])) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self._check()
        self.data[key] = json.loads(json.dumps(value))
        if key == JUDGING_KEY:
            self.history.append((time.time(), self.data[key]))

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.set(key, value)


def shared_store(monkeypatch: pytest.MonkeyPatch, deployment_id: str, store: AssetStore | None) -> AssetStore | None:
    """The deployment's id asset store, for the task's writes (the watcher's reads are wired by ``watch``)."""
    uri = deployment_asset_uri(deployment_id)
    monkeypatch.setattr(publishing, "asset_store", lambda name: store if name == uri else None)
    return store


class Watching:
    """A watcher of one deployment running in the background, each payload stamped with when it fired."""

    def __init__(self, deployment_id: str, store: AssetStore | None, **kwargs: Any) -> None:
        options: dict[str, Any] = {"deployment_ids": [deployment_id], "poll_interval": POLL, "max_attempts": 2}
        self.trigger = DeploymentEventTrigger(**{**options, **kwargs})
        uri = deployment_asset_uri(deployment_id)
        self.trigger.judging_store = lambda name: store if name == uri else None
        self.fired: list[tuple[float, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            json.dumps(event.payload)
            self.fired.append((time.time(), event.payload))

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [payload for _, payload in self.fired]

    def live_fired(self) -> list[tuple[float, dict[str, Any]]]:
        return [(at, payload) for at, payload in self.fired if payload["kind"] == "revision_live"]

    def live(self) -> list[str]:
        return [p["revision_id"] for p in self.payloads if p["kind"] == "revision_live"]

    async def started(self) -> None:
        await wait_until(lambda: any(p.rounds_completed >= 2 for p in active_pollers()))

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task
        await wait_until(lambda: active_pollers() == [], timeout=5)


def svc(emulator: Any) -> dict[str, Any]:
    return dict(emulator.state.find_deployment("svc"))


async def patch_with_failing_analysis(emulator: Any, ti: FakeTI) -> Any:
    """The patch task (on the worker, in a thread) rolls out a revision whose error rate rises once live: its
    analysis fails and it rolls back. Returns what the task raised."""
    set_next_revision_behaviour(emulator, error_rate=0.0, after_seconds=0.2, then={"error_rate": 0.6})
    analysis = analysis_of(health_check(emulator), _tracing(), count=6)
    task = patch_op(emulator, deferrable=False, analysis=analysis)
    try:
        await asyncio.to_thread(task.execute, context_with_events(ti, FakeStore()))
    except Exception as err:
        return err
    raise AssertionError("the analysis was expected to fail the task")


def _tracing() -> Any:
    from airflow_provider.analysis import TracingProjectCheck

    return TracingProjectCheck(metric="error_rate", condition="< 0.05")


# ------------------------------------------------------------------------------- a rejected revision
async def test_a_revision_whose_analysis_fails_is_never_announced_even_without_a_settle_time(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    store = shared_store(monkeypatch, before["id"], AssetStore())
    watching = Watching(before["id"], store, settle_time=0)
    await watching.started()
    ti = FakeTI()

    outcome = await patch_with_failing_analysis(emulator, ti)

    bad = ti.xcoms["revision_id"]
    assert "the analysis failed" in str(outcome), outcome
    after = svc(emulator)
    assert after["active_revision_id"] not in (bad, None) and after["status"] == "READY", after
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    restored = after["active_revision_id"]
    await wait_until(lambda: restored in watching.live(), timeout=10)  # the rollback's revision, once it serves
    await watching.stop()
    assert bad not in watching.live(), f"the rejected revision {bad} was announced: {watching.payloads}"
    assert watching.live() == [restored], watching.payloads
    (announced,) = [p for p in watching.payloads if p["kind"] == "revision_live"]
    assert announced["verdict"] == "rolled_back" and announced["judging"] is False, announced
    assert announced["previous_revision_id"] == before["active_revision_id"]
    assert announced["judged_by"] == {
        "dag_id": "dag",
        "run_id": "run",
        "task_id": "task",
        "map_index": -1,
        "try_number": 1,
    }
    marks = store.data[JUDGING_KEY]["revisions"] if store else {}
    assert marks[bad]["state"] == "rejected" and marks[restored]["state"] == "rolled_back"
    assert marks[restored]["rolled_back_from"] == bad
    states = [value["revisions"].get(bad, {}).get("state") for _, value in (store.history if store else [])]
    assert states[0] == "rolled_out" and "judging" in states, states  # marked before it ever served


async def test_without_a_marker_the_settle_time_outlasts_the_rejection(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    shared_store(monkeypatch, before["id"], None)  # no asset state store: the watcher cannot see the task
    watching = Watching(before["id"], None, settle_time=6)
    await watching.started()
    ti = FakeTI()

    await patch_with_failing_analysis(emulator, ti)

    bad, restored = ti.xcoms["revision_id"], svc(emulator)["active_revision_id"]
    assert restored != bad
    await wait_until(lambda: restored in watching.live(), timeout=15)
    await watching.stop()
    assert watching.live() == [restored], watching.payloads
    (announced,) = [p for p in watching.payloads if p["kind"] == "revision_live"]
    assert announced["judging"] is None and announced["verdict"] is None  # unknown: no marker to read
    assert announced["settle_time"] == 6 and watching.live_fired()[0][0] - announced["live_since"] >= 6


# ------------------------------------------------------------------------------- a landed revision
async def test_a_revision_being_judged_is_held_until_its_verdict_then_announced_saying_who_judged_it(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = svc(emulator)
    store = shared_store(monkeypatch, before["id"], AssetStore())
    watching = Watching(before["id"], store, settle_time=0)
    await watching.started()
    emulator.admin.set_behaviour(before["id"], error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(before["id"], revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    ti = FakeTI()
    task = patch_op(emulator, deferrable=False, analysis=analysis_of(health_check(emulator), count=4))

    await asyncio.to_thread(task.execute, context_with_events(ti, FakeStore()))

    good = ti.xcoms["revision_id"]
    await wait_until(lambda: good in watching.live(), timeout=10)
    await watching.stop()
    (at, announced), *_ = watching.live_fired()
    assert announced["revision_id"] == good and announced["judging"] is False and announced["verdict"] == "landed"
    assert announced["judged_by"]["run_id"] == "run"
    landed_at = next(when for when, value in store.history if value["revisions"][good]["state"] == "landed")
    assert at >= landed_at, "announced before the verdict was recorded"
    assert at - announced["live_since"] >= 4 * 0.3 - 0.3, "announced before the analysis could have finished"


# ------------------------------------------------------------------------------- after an announcement
async def test_an_announced_revision_that_stops_serving_fires_replaced_then_rolled_back(emulator: Any) -> None:
    dep = svc(emulator)
    watching = Watching(dep["id"], AssetStore(), settle_time=0.3)
    await watching.started()
    state = emulator.state
    first = state.patch_deployment(
        dep["id"], PatchDeploymentRequest(source_revision_config={"image_uri": "registry.example.com/acme/svc:a"})
    )
    first_id = first["latest_revision_id"]
    await wait_until(lambda: first_id in watching.live(), timeout=10)
    second = state.patch_deployment(
        dep["id"], PatchDeploymentRequest(source_revision_config={"image_uri": "registry.example.com/acme/svc:b"})
    )
    second_id = second["latest_revision_id"]
    await wait_until(lambda: second_id in watching.live(), timeout=10)
    # The first build again (the service makes a new revision of it): an older build serves.
    again = state.redeploy_revision(dep["id"], first_id)["latest_revision_id"]
    await wait_until(lambda: again in watching.live(), timeout=10)
    await watching.stop()
    kinds = [(p["kind"], p["previous_revision_id"], p["revision_id"]) for p in watching.payloads]
    assert kinds == [
        ("revision_replaced", dep["active_revision_id"], first_id),
        ("revision_live", dep["active_revision_id"], first_id),
        ("revision_replaced", first_id, second_id),
        ("revision_live", first_id, second_id),
        ("revision_rolled_back", second_id, again),
        ("revision_live", second_id, again),
    ], kinds


async def test_a_candidate_is_not_announced_before_its_settle_time(emulator: Any) -> None:
    dep = svc(emulator)
    watching = Watching(dep["id"], AssetStore(), settle_time=1.5, events=["revision_live"])
    await watching.started()
    made = emulator.state.patch_deployment(
        dep["id"], PatchDeploymentRequest(source_revision_config={"image_uri": "registry.example.com/acme/svc:x"})
    )
    revision_id = made["latest_revision_id"]
    await wait_until(lambda: svc(emulator)["active_revision_id"] == revision_id, timeout=10)
    served = time.time()
    await wait_until(lambda: revision_id in watching.live(), timeout=10)
    await watching.stop()
    assert watching.live_fired()[0][0] - served >= 1.5 - POLL * 2, watching.fired


# ------------------------------------------------------------------------------- the marker
async def test_a_deployment_without_an_airflow_asset_reads_as_unknown_and_is_probed_once() -> None:
    missing, present = AssetStore(exists=False), AssetStore()
    stores = {
        deployment_asset_uri("8d12e254-9195-47ca-94ec-20051ae2fc1b"): missing,
        deployment_asset_uri("76cd9fa7-036e-43e7-8660-ade2b5acb208"): present,
    }
    reader = JudgingReader(stores.get, DeploymentEventTrigger(deployment_names=["a"]).log)
    assert await reader.marker("8d12e254-9195-47ca-94ec-20051ae2fc1b") is None
    assert await reader.marker("76cd9fa7-036e-43e7-8660-ade2b5acb208") == {}
    assert PROBE_KEY in present.data and reader.exists == {
        "8d12e254-9195-47ca-94ec-20051ae2fc1b": False,
        "76cd9fa7-036e-43e7-8660-ade2b5acb208": True,
    }


def test_the_marker_says_judging_until_its_deadline_and_keeps_the_newest_revisions() -> None:
    by = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 2}
    value = with_marker(None, revision_id="r1", state="judging", at=100.0, until=200.0, by=by)
    assert judging_of(value, "r1", 150.0) == {"judging": True, "verdict": None, "judged_by": by, "stale": False}
    assert judging_of(value, "r1", 201.0)["stale"] is True and judging_of(value, "r1", 201.0)["judging"] is False
    assert judging_of(value, "other", 150.0)["judging"] is False
    assert judging_of(None, "r1", 150.0)["judging"] is None
    value = with_marker(
        value, revision_id="r0", state="rolling_back", at=160.0, until=300.0, by=by, rolled_back_from="r1"
    )
    assert judging_of(value, "r1", 161.0)["verdict"] == "rejected"
    for index in range(20):
        value = with_marker(value, revision_id=f"n{index}", state="landed", at=200.0 + index, until=None, by=by)
    assert len(value["revisions"]) == 10 and "n19" in value["revisions"] and "r1" not in value["revisions"]


def test_a_cursor_saved_before_settling_existed_still_loads() -> None:
    old = ["a", "READY", "a", "2026-01-01T00:00:00+00:00", None, "svc"]
    seen = Seen.from_json(old)
    assert seen is not None and seen.active == "a" and seen.pending is None and seen.served_list() == []
    assert Seen.from_json(seen.to_json()) == seen


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"settle_time": -1}, "settle_time must be >= 0 seconds"),
        ({"settle_time": "5"}, "settle_time must be >= 0 seconds"),
        ({"settle_time": float("inf")}, "settle_time must be >= 0 seconds"),
        ({"wait_for_verdict": "yes"}, "wait_for_verdict must be True or False"),
    ],
)
def test_bad_settle_arguments_are_refused_naming_them(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DeploymentEventTrigger(deployment_names=["a"], **kwargs)


def test_the_judging_window_covers_the_rollout_the_analysis_and_the_bake() -> None:
    task = patch_op_like(timeout=30, bake_seconds=10, analysis=analysis_of(_tracing(), count=4))
    assert publishing.judging_window(task) == publishing.JUDGING_MARGIN + 30 + 10 + 4 * 0.3


def patch_op_like(**attributes: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**attributes)


class NoMarker:
    """A marker reader for a deployment no rollout of this provider touches."""

    async def marker(self, deployment_id: str) -> Any | None:
        return {}


@pytest.mark.parametrize("now", [1795743138.2646, 1795743138.9999, 1795743138.0])
async def test_without_a_settle_time_a_revision_is_announced_the_first_time_it_is_seen_serving(
    monkeypatch: pytest.MonkeyPatch, now: float
) -> None:
    # The time the candidate was first seen is kept to the millisecond: rounded up (.2646 -> .265) it lay in
    # the future and a watcher with settle_time=0 announced one round late (half the time, by the clock).
    from airflow_provider.decisions import settling
    from airflow_provider.models import Deployment
    from tests.test_models import REV_NEW, REV_OLD, deployment_json

    monkeypatch.setattr(settling.time, "time", lambda: now)
    trigger = DeploymentEventTrigger(deployment_names=["checkout-api"], settle_time=0)
    deployment = Deployment.model_validate(deployment_json(active_revision_id=REV_NEW, latest_revision_id=REV_NEW))
    before = Seen(REV_OLD, "READY", REV_OLD, "2026-11-27T00:00:00Z", None, "checkout-api")
    after = Seen(REV_OLD, "READY", REV_NEW, "2026-11-27T00:00:01Z", None, "checkout-api")

    async def created_at(revision_id: str) -> Any:
        return None

    payloads = await settling.settle(
        trigger, {"revision_live"}, NoMarker(), set(), deployment, before, after, created_at
    )
    assert [payload["kind"] for payload in payloads] == ["revision_live"]
    assert float(payloads[0]["live_since"]) <= now and after.active == REV_NEW and after.pending is None
