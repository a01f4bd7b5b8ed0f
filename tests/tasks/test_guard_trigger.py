"""DeploymentGuardTrigger against the real-time emulator over HTTP (issue 42): a guarded revision whose error rate
rises is announced once (two triggers sharing one store, a restart), a healthy one never; the guard ends when
another revision serves or its time is over; the list requests are batched with the other triggers'."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, AnalysisTarget, TracingProjectCheck
from airflow_provider.analysis.guard import Guard, GuardRecord, claim_key, guard_key
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.reading import tracing_reading
from airflow_provider.analysis.rounds import BASELINE_ROUND, measurement_of
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.triggers.deployment_service import DeploymentGuardTrigger, active_pollers
from airflow_provider.triggers.guard import MemoryGuardStore
from tests.tasks.conftest import CONN_ENV, LIST_ROUTE, SECRET, connection_json, scan_for_secret, wait_until

CONN = "deployment_service_default"
TRAFFIC = 200.0
IMAGE = "registry.example.com/acme/svc:1.0.0"
SEED = {
    "deployments": [
        {
            "name": name,
            "source": "external_docker",
            "source_revision_config": {"image_uri": IMAGE},
            "secrets": [{"name": "TOKEN", "value": SECRET}],
        }
        for name in ("bad", "good")
    ]
}
ERRORS = TracingProjectCheck(rate_test=RateTest(), name="errors")


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def named(emulator: Any, name: str) -> dict[str, Any]:
    return dict(emulator.state.find_deployment(name))


def baseline_of(check: TracingProjectCheck, name: str, runs: int, errors: int) -> list[dict[str, Any]]:
    """The baseline measurement a rollout's preflight would have taken (``runs`` with ``errors``)."""
    now = datetime.now(timezone.utc)
    target = AnalysisTarget(
        deployment_id="00000000-0000-4000-8000-000000000001",
        name=name,
        revision_id="00000000-0000-4000-8000-000000000002",
        live_since=now,
        role="baseline",
    )
    reading = tracing_reading(
        check, target, {"run_count": runs, "error_count": errors, "error_rate": errors / runs}, name
    )
    return [dict(measurement_of(check, check.label(), target, reading, BASELINE_ROUND, now, str))]


def hand(
    store: MemoryGuardStore,
    deployment: dict[str, Any],
    analysis: Analysis,
    *,
    for_seconds: float = 60.0,
    landed_ago: float = 0.0,
    baseline: list[dict[str, Any]] | None = None,
) -> GuardRecord:
    landed = datetime.now(timezone.utc) - timedelta(seconds=landed_ago)
    record = GuardRecord(
        deployment_id=deployment["id"],
        deployment_name=deployment["name"],
        revision_id=deployment["active_revision_id"],
        previous_revision_id="00000000-0000-4000-8000-00000000000f",
        conn_id=CONN,
        landed_at=landed,
        until=landed + timedelta(seconds=for_seconds),
        analysis=analysis.to_json(),
        baseline=baseline,
    )
    store.data[guard_key(CONN, deployment["id"])] = json.loads(record.model_dump_json())
    return record


def guard_trigger(store: MemoryGuardStore, **kwargs: Any) -> DeploymentGuardTrigger:
    trigger = DeploymentGuardTrigger(poll_interval=0.1, max_attempts=2, **kwargs)
    trigger.store = store
    trigger.claim_settle = 0.2
    trigger.announce_delay = 0.2
    return trigger


class Running:
    def __init__(self, trigger: DeploymentGuardTrigger) -> None:
        self.trigger = trigger
        self.payloads: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            json.dumps(event.payload)
            self.payloads.append(event.payload)

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def traffic(emulator: Any, deployment: dict[str, Any], **behaviour: Any) -> None:
    emulator.admin.set_behaviour(deployment["id"], requests_per_second=TRAFFIC, **behaviour)


ANALYSIS = Analysis(checks=[ERRORS], interval_seconds=0.3, count=20)


def test_a_regressed_revision_is_announced_once_by_two_triggers_and_a_healthy_one_never(emulator: Any) -> None:
    bad, good = named(emulator, "bad"), named(emulator, "good")
    traffic(emulator, bad, error_rate=0.01)
    traffic(emulator, good, error_rate=0.01)
    store = MemoryGuardStore()
    baseline = baseline_of(ERRORS, "bad", 20_000, 200)  # 1 % errors before the rollout
    hand(store, bad, ANALYSIS, baseline=baseline)
    hand(store, good, ANALYSIS, baseline=baseline)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        first, second = Running(guard_trigger(store)), Running(guard_trigger(store))
        await wait_until(lambda: len(first.trigger.guarded) == 2 and len(second.trigger.guarded) == 2)
        traffic(emulator, bad, error_rate=0.08)  # the bad one degrades: 8x its baseline
        await wait_until(lambda: (first.payloads or second.payloads) != [], timeout=20)
        await asyncio.sleep(1.0)  # both rounds done, the claim announced
        (poller,) = active_pollers()
        assert poller.list_requests >= 1
        await first.stop()
        await second.stop()
        return first.payloads, second.payloads

    one, two = asyncio.run(scenario())
    payloads = one + two
    assert len(payloads) == 1, payloads
    (payload,) = payloads
    assert payload["kind"] == "revision_regressed" and payload["deployment_name"] == "bad"
    assert payload["revision_id"] == bad["active_revision_id"]
    assert payload["previous_revision_id"] == "00000000-0000-4000-8000-00000000000f"
    assert payload["failing_check"] == "errors"
    assert (
        payload["message"].startswith("rolled back by the guard, ") and "after landing, errors 0." in payload["message"]
    )
    assert payload["message"].endswith("against 0.01")
    assert payload["measurements"][-1]["verdict"] == "failed"
    claim = store.data[claim_key(bad["id"], bad["active_revision_id"])]
    assert claim["state"] == "announced" and claim["payload"]["event_id"] == payload["event_id"]
    assert not any(key.startswith("deployment_service_guard_claim") and good["id"] in key for key in store.data)
    scan_for_secret(payloads, store.data)


def test_a_restarted_trigger_never_announces_again_but_takes_over_a_claim_its_predecessor_left(emulator: Any) -> None:
    bad = named(emulator, "bad")
    traffic(emulator, bad, error_rate=0.3)
    store = MemoryGuardStore()
    hand(
        store,
        bad,
        Analysis(checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")], interval_seconds=0.3, count=5),
    )
    key = claim_key(bad["id"], bad["active_revision_id"])

    async def run_for(seconds: float, **options: Any) -> list[dict[str, Any]]:
        running = Running(guard_trigger(store, **options))
        await asyncio.sleep(seconds)
        await running.stop()
        return running.payloads

    first = asyncio.run(run_for(3.0))
    assert [p["kind"] for p in first] == ["revision_regressed"] and store.data[key]["state"] == "announced"
    assert asyncio.run(run_for(2.0)) == []  # announced: a restart stays silent

    # A triggerer that died after claiming, before Airflow stored its event: fresh, its claim is left alone...
    store.data[key] = {"token": "dead", "state": "claimed", "at": time.time(), "payload": first[0]}
    assert asyncio.run(run_for(2.0)) == []
    # ...once its lease ran out, the regression is announced (late rather than lost).
    store.data[key] = {"token": "dead", "state": "claimed", "at": time.time() - 600, "payload": first[0]}
    again = asyncio.run(run_for(3.0))
    assert [p["revision_id"] for p in again] == [bad["active_revision_id"]]


def test_the_guard_ends_when_another_revision_serves_its_time_is_over_or_its_deployment_is_gone(emulator: Any) -> None:
    bad, good = named(emulator, "bad"), named(emulator, "good")
    traffic(emulator, bad)
    traffic(emulator, good)
    store = MemoryGuardStore()
    hand(store, bad, ANALYSIS, for_seconds=3600)
    hand(store, good, ANALYSIS, for_seconds=1.5)
    gone = {**good, "id": "00000000-0000-4000-8000-0000000000dd", "name": "deleted"}  # no such deployment
    hand(store, gone, ANALYSIS, for_seconds=3600)

    async def scenario() -> DeploymentGuardTrigger:
        running = Running(guard_trigger(store))
        await wait_until(lambda: len(running.trigger.guarded) == 3)
        emulator.state.patch_deployment(
            bad["id"], PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": IMAGE + "-2"}})
        )
        await wait_until(lambda: running.trigger.guarded == {}, timeout=15)
        await running.stop()
        return running.trigger

    trigger = asyncio.run(scenario())
    assert trigger.stats["ended"] == 3 and trigger.stats["regressions"] == 0
    assert not any(key.startswith("deployment_service_guard:") for key in store.data)


def test_a_thousand_guarded_deployments_cost_ten_list_requests_a_round(emulator: Any) -> None:
    """The guarded ids go into the poller's batches of 100 (nothing measured yet: the first round is due later)."""
    store = MemoryGuardStore()
    deployment = named(emulator, "good")
    analysis = Analysis(checks=[ERRORS], interval_seconds=3600, count=1)
    for index in range(250):
        fake = {**deployment, "id": f"00000000-0000-4000-8000-{index:012d}"}
        hand(store, fake, analysis, for_seconds=7200)

    async def scenario() -> tuple[int, int]:
        running = Running(guard_trigger(store))
        await wait_until(lambda: len(running.trigger.guarded) == 250)
        emulator.admin.reset_requests()
        (poller,) = active_pollers()
        start = poller.rounds_completed
        await wait_until(lambda: poller.rounds_completed >= start + 3)
        rounds = poller.rounds_completed - start
        await running.stop()
        return rounds, emulator.admin.count(LIST_ROUTE)

    rounds, lists = asyncio.run(scenario())
    assert lists <= (rounds + 1) * 3  # ceil(250 / 100) per round


def test_guard_arguments_are_checked_and_the_trigger_serializes_no_secret(emulator: Any) -> None:
    from airflow_provider.analysis import CallableCheck

    with pytest.raises(ValueError, match="for_seconds"):
        Guard(analysis=ANALYSIS, for_seconds=0)
    with pytest.raises(ValueError, match="CallableCheck cannot run"):
        Guard(analysis=Analysis(checks=[CallableCheck(func=lambda d: True, name="c")]), for_seconds=60)
    with pytest.raises(ValueError, match="Analysis"):
        Guard(analysis="errors < 0.05", for_seconds=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_interval"):
        DeploymentGuardTrigger(poll_interval=0)
    path, kwargs = DeploymentGuardTrigger(poll_interval=5, max_attempts=3).serialize()
    assert path == "airflow_provider.triggers.deployment_service.DeploymentGuardTrigger"
    assert kwargs == {"deployment_service_conn_id": CONN, "poll_interval": 5.0, "max_attempts": 3}
    scan_for_secret(kwargs)
