"""DeploymentEventTrigger against the emulator over HTTP: event kinds, batching, cursor across restarts."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import pytest
from airflow.sdk import AssetWatcher

from airflow_provider.assets import deployment_asset
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.triggers import watcher as watcher_module
from airflow_provider.triggers.deployment_service import (
    DeploymentEventTrigger,
    DeploymentRolloutTrigger,
    active_pollers,
)
from tests.tasks.conftest import LIST_ROUTE, REVISION_ROUTE, SECRET, deployment_named, scan_for_secret, seed, wait_until

INTERVAL = 0.05


class FakeAccessor:
    """One asset's state store: JSON values, like Airflow's ``AssetStateStoreAccessor``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.writes = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.data[key])) if key in self.data else default

    async def aset(self, key: str, value: Any) -> None:
        self.data[key] = json.loads(json.dumps(value))
        self.writes += 1


class FakeStore:
    """``trigger.asset_state_store`` as the triggerer injects it for a watcher of one asset."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.accessor = FakeAccessor(self.data)
        self._by_name = {"deployment-service://deployments/x": self.accessor}


class Running:
    """A watcher's event loop running in the background, collecting payloads."""

    def __init__(
        self,
        trigger: DeploymentEventTrigger,
        store: FakeStore | None = None,
        witness: Callable[[], Any] | None = None,
    ) -> None:
        self.trigger = trigger
        trigger.asset_state_store = store  # type: ignore[assignment]
        self.payloads: list[dict[str, Any]] = []
        self.witness = witness
        self.witnessed: list[Any] = []
        """What ``witness()`` answered the moment each payload arrived (not when a test got round to look)."""
        self.task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            json.dumps(event.payload)
            self.payloads.append(event.payload)
            if self.witness is not None:
                self.witnessed.append(self.witness())

    def kinds(self) -> list[tuple[str, str]]:
        return [(p["kind"], p["deployment_name"]) for p in self.payloads]

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


FIRST_KINDS = ["revision_live", "revision_failed", "status_changed", "deleted"]
"""The kinds a watcher fired before ``revision_rolled_back``/``revision_replaced`` existed."""


def watcher(**kwargs: Any) -> DeploymentEventTrigger:
    """A fast watcher that announces at once (``settle_time=0``), firing the first four kinds unless told."""
    defaults = {"poll_interval": INTERVAL, "max_attempts": 2, "settle_time": 0, "events": FIRST_KINDS}
    return DeploymentEventTrigger(**{**defaults, **kwargs})


def roll_out(emulator: Any, deployment_id: str, ref: str = "release/2") -> str:
    body = PatchDeploymentRequest(source_revision_config={"repo_ref": ref})
    revision_id = str(emulator.state.patch_deployment(deployment_id, body)["latest_revision_id"])
    emulator.state.advance(3.5)
    return revision_id


async def rounds(count: int = 3) -> None:
    (poller,) = active_pollers()
    target = poller.rounds_completed + count
    try:
        await wait_until(lambda: poller.rounds_completed >= target)
    except AssertionError:
        raise AssertionError(
            f"poll round {target} did not complete: {poller.rounds_completed} completed, {poller.rounds_started} "
            f"started, {poller.list_requests} list requests"
        ) from None


async def no_tasks_left() -> None:
    await wait_until(lambda: asyncio.all_tasks() == {asyncio.current_task()}, timeout=2)
    assert active_pollers() == []


# ----------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one of deployment_ids, deployment_names and filters"),
        ({"deployment_ids": ["x"], "deployment_names": ["a"]}, r"got deployment_ids, deployment_names"),
        ({"deployment_ids": ["not-a-uuid"]}, "deployment_ids must be a UUID"),
        ({"deployment_ids": []}, "deployment_ids must be a non-empty list"),
        ({"deployment_names": ["ok", " "]}, "deployment_names entries must be non-empty"),
        ({"filters": {"status": "Ready"}}, "filters.status"),  # READY in the wrong case: a typo
        ({"filters": {"stauts": "READY"}}, "unknown key.*stauts"),
        ({"filters": {"deployment_type": "prod"}, "events": ["revision_live", "typo"]}, "events must be"),
        ({"deployment_names": ["a"], "poll_interval": 0}, "poll_interval must be a positive"),
        ({"deployment_names": ["a"], "max_attempts": -1}, "max_attempts must be a positive"),
        ({"deployment_names": ["a"], "revision_check_interval": -1}, "revision_check_interval must be >= 0"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DeploymentEventTrigger(**kwargs)


def test_serialize_round_trip_and_use_in_an_asset_watcher() -> None:
    trig = DeploymentEventTrigger(
        deployment_ids="8D12E254-9195-47CA-94EC-20051AE2FC1B, 8d12e254-9195-47ca-94ec-20051ae2fc1b",
        events=["status_changed", "revision_live"],
        poll_interval=15,
        revision_check_interval=120,
        deployment_service_conn_id="svc",
        read_timeout=5.0,
    )
    classpath, kwargs = trig.serialize()
    assert classpath == "airflow_provider.triggers.deployment_service.DeploymentEventTrigger"
    assert kwargs == {
        "deployment_ids": ["8d12e254-9195-47ca-94ec-20051ae2fc1b"],
        "deployment_names": None,
        "filters": None,
        "events": ["revision_live", "status_changed"],
        "poll_interval": 15.0,
        "settle_time": 300.0,
        "wait_for_verdict": True,
        "revision_check_interval": 120.0,
        "deployment_service_conn_id": "svc",
        "read_timeout": 5.0,
    }
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert DeploymentEventTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert DeploymentEventTrigger(**kwargs).cursor_key == trig.cursor_key
    asset = deployment_asset("8d12e254-9195-47ca-94ec-20051ae2fc1b", watchers=[AssetWatcher(name="w", trigger=trig)])
    assert asset.watchers[0].trigger is trig


# ------------------------------------------------------------------------------------ event kinds
async def test_nothing_at_start_then_one_event_per_revision_rolled_out_outside_airflow(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(deployment_ids=[dep["id"]]))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(5)
    assert run.payloads == [], "what is already there must not fire"
    revision_id = roll_out(emulator, dep["id"])
    await wait_until(lambda: len(run.payloads) == 1)
    await rounds(5)
    (payload,) = run.payloads
    assert payload["kind"] == "revision_live" and payload["origin"] == "watcher"
    assert payload["deployment_id"] == dep["id"] and payload["deployment_name"] == "checkout-api-dev"
    assert payload["revision_id"] == revision_id
    assert payload["previous_revision_id"] == dep["active_revision_id"]
    assert payload["source_revision_config"]["repo_ref"] == "release/2"
    assert payload["status"] == "READY"
    scan_for_secret(payload)
    second = roll_out(emulator, dep["id"], "release/3")
    await wait_until(lambda: len(run.payloads) == 2)
    assert run.payloads[1]["revision_id"] == second and run.payloads[1]["previous_revision_id"] == revision_id
    await run.stop()
    await no_tasks_left()


async def test_status_change_and_deletion(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(deployment_ids=[dep["id"]]))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    emulator.state.set_status(dep["id"], "UNUSED")
    await wait_until(lambda: len(run.payloads) == 1)
    assert run.payloads[0]["kind"] == "status_changed"
    assert (run.payloads[0]["previous_status"], run.payloads[0]["status"]) == ("READY", "UNUSED")
    emulator.state.delete_deployment(dep["id"])
    await wait_until(lambda: len(run.payloads) == 2)
    await rounds(3)
    assert run.kinds() == [("status_changed", "checkout-api-dev"), ("deleted", "checkout-api-dev")]
    assert run.payloads[1]["status"] is None and run.payloads[1]["previous_status"] == "UNUSED"
    await run.stop()


async def test_failed_revision_through_the_revision_endpoint(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(deployment_ids=[dep["id"]], events=["revision_failed", "revision_live"]))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    body = PatchDeploymentRequest(source_revision_config={"repo_ref": "release/bad"})
    failed = str(emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"])
    await rounds(3)
    emulator.state.advance(3.5)
    await wait_until(lambda: len(run.payloads) == 1)
    await rounds(5)
    (payload,) = run.payloads
    assert payload["kind"] == "revision_failed" and payload["failed_revision_id"] == failed
    assert payload["failed_revision_status"] == "BUILD_FAILED"
    assert payload["revision_id"] == dep["active_revision_id"]  # the old revision still serves
    assert payload["source_revision_config"]["repo_ref"] == "release/bad"
    assert emulator.state.count(REVISION_ROUTE) <= 3  # asked when the deployment changed, not every round
    await run.stop()


async def test_a_failed_build_is_reported_when_the_deployment_record_does_not_change(emulator: Any) -> None:
    # The service need not touch the deployment when a build fails: the watcher's safety net asks the
    # revision endpoint at most every revision_check_interval while nothing changes, and so reports it.
    check_interval = 0.3
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(
        watcher(deployment_ids=[dep["id"]], events=["revision_failed"], revision_check_interval=check_interval)
    )
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    body = PatchDeploymentRequest(source_revision_config={"repo_ref": "release/bad"})
    failed = str(emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"])
    await rounds(3)  # the new latest revision was seen (the deployment changed) and asked about once
    emulator.state.update_settings(revision_status_touches_deployment=False)
    touched = emulator.state.get_deployment(dep["id"])["updated_at"]
    asked_before, started = emulator.state.count(REVISION_ROUTE), time.monotonic()
    emulator.state.advance(3.5)  # the build fails; the deployment record does not change
    assert emulator.state.get_revision(dep["id"], failed)["status"] == "BUILD_FAILED"
    assert emulator.state.get_deployment(dep["id"])["updated_at"] == touched
    try:
        await wait_until(lambda: len(run.payloads) == 1)
    except AssertionError:
        calls = emulator.state.count(REVISION_ROUTE) - asked_before
        raise AssertionError(f"no revision_failed event; {calls} revision calls since the build failed") from None
    waited = time.monotonic() - started
    (payload,) = run.payloads
    assert payload["kind"] == "revision_failed" and payload["failed_revision_id"] == failed
    assert payload["failed_revision_status"] == "BUILD_FAILED"
    # asked at most once per interval while nothing changed, not once per round (every 0.05 s)
    asked = emulator.state.count(REVISION_ROUTE) - asked_before
    assert 1 <= asked <= 1 + math.ceil(waited / check_interval), f"{asked} revision calls in {waited:.2f} s"
    await rounds(int(2 * check_interval / INTERVAL))
    assert emulator.state.count(REVISION_ROUTE) - asked_before == asked, "asked again after reporting the failure"
    await run.stop()


async def test_without_the_revision_endpoint_failures_stay_silent(service: Any) -> None:
    emulator = service(optional_endpoints=False)
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(deployment_ids=[dep["id"]]))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    roll_out(emulator, dep["id"], "release/bad")
    await rounds(5)
    revision_id = roll_out(emulator, dep["id"], "release/good")
    await wait_until(lambda: len(run.payloads) == 1)
    assert run.payloads[0]["kind"] == "revision_live" and run.payloads[0]["revision_id"] == revision_id
    await run.stop()


async def test_by_name_follows_a_deployment_deleted_and_created_again(emulator: Any) -> None:
    from airflow_provider.emulator.state import EmulatorCreateRequest

    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(deployment_names=["checkout-api-dev", "not-created-yet"]))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    emulator.state.delete_deployment(dep["id"])
    await wait_until(lambda: len(run.payloads) == 1)
    created = emulator.state.create_deployment(
        EmulatorCreateRequest(name="checkout-api-dev", source="codehost", source_revision_config={"repo_ref": "main"})
    )
    await rounds(3)
    emulator.state.advance(5)
    await wait_until(lambda: len(run.payloads) >= 3)
    assert [p["kind"] for p in run.payloads] == ["deleted", "status_changed", "revision_live"]
    assert run.payloads[2]["deployment_id"] == created["id"]
    assert run.payloads[2]["previous_revision_id"] is None
    await run.stop()


async def test_filters_watch_every_match_and_notice_it_leaving(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    run = Running(watcher(filters={"name_contains": "checkout", "status": "READY"}))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    revision_id = roll_out(emulator, dep["id"])
    await wait_until(lambda: len(run.payloads) == 1)
    assert run.payloads[0]["kind"] == "revision_live" and run.payloads[0]["revision_id"] == revision_id
    emulator.state.set_status(dep["id"], "AWAITING_DELETE")  # no longer matches status=READY
    await wait_until(lambda: len(run.payloads) == 2)
    await rounds(3)
    assert run.payloads[1]["kind"] == "status_changed" and run.payloads[1]["status"] == "AWAITING_DELETE"
    await run.stop()


# ---------------------------------------------------------------------------------------- batching
@pytest.mark.parametrize("count", [1, 100, 250])
async def test_watchers_share_one_batched_poll_with_rollouts(service: Any, count: int) -> None:
    emulator = service(data=seed(count, status="READY"))
    deployments = emulator.state.snapshot()["deployments"]
    ids = [item["id"] for item in deployments]
    # Three watchers over overlapping sets, and a waiting rollout: one poller, ceil(W / 100) lists per round.
    runs = [
        Running(watcher(deployment_ids=ids)),
        Running(watcher(deployment_ids=ids[: max(1, count // 2)])),
        Running(watcher(deployment_ids=ids[::-1], events=["deleted"])),
    ]
    emulator.state.set_status(ids[0], "UNUSED")
    rollout = asyncio.create_task(
        _drain(DeploymentRolloutTrigger(ids[0], None, runs[0].trigger.hook_params, poll_interval=INTERVAL))
    )
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()
    await rounds(2)

    def between_rounds() -> bool:  # read the emulator's counter only while no round is in flight
        return poller.rounds_started == poller.rounds_completed

    await wait_until(between_rounds)
    before, rounds_before = emulator.state.count(LIST_ROUTE), poller.rounds_completed
    await rounds(8)
    await wait_until(between_rounds)
    per_round = (emulator.state.count(LIST_ROUTE) - before) / (poller.rounds_completed - rounds_before)
    # Both ends of the window are read between rounds (a loaded machine may start the next round at once,
    # and a round in flight would count half its pages): the figure is exact.
    assert per_round == math.ceil(count / 100), per_round
    emulator.state.set_status(ids[0], "READY")
    await asyncio.wait_for(rollout, 10)
    await wait_until(lambda: len(runs[0].payloads) == 1)
    assert runs[0].kinds() == [("status_changed", deployments[0]["name"])]
    assert runs[2].payloads == []
    for run in runs:
        await run.stop()
    await no_tasks_left()


async def test_an_event_does_not_wait_for_the_rounds_other_list_requests(service: Any) -> None:
    # 150 watched deployments: two list requests per round. One of them is answered late; the change in the
    # other one's page fires at once, while the round is still waiting, and nothing is lost or repeated.
    emulator = service(data=seed(150, status="READY"))
    emulator.state.advance(5)
    deployments = emulator.state.snapshot()["deployments"]
    ids = [item["id"] for item in deployments]

    def late_page_answered() -> bool:  # the emulator logs a request once it answered it
        return any(record.fault == "delay" for record in emulator.state.request_log)

    run = Running(watcher(deployment_ids=ids, events=["revision_live", "deleted"]), witness=late_page_answered)
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()
    await rounds(3)
    completed = poller.rounds_completed
    await wait_until(lambda: poller.rounds_completed > completed)
    # No await from here until the changes are made: the next round sees both, and one page comes late.
    seen_by = poller.rounds_completed + 1
    first, last = (chunk[0] for chunk in list_request_chunks(emulator, 2))  # one in each list request
    change = PatchDeploymentRequest(source_revision_config={"repo_ref": "r2"})
    for deployment_id in (first, last):
        emulator.state.patch_deployment(deployment_id, change)
    emulator.state.advance(3.5)
    # Late by far more than a loaded machine delays an event (the test looks when the event arrives).
    emulator.state.add_fault(kind="delay", delay_seconds=3, method="GET", path="/v2/deployments", count=1)

    await wait_until(lambda: len(run.payloads) >= 1, timeout=10)
    assert run.witnessed[0] is False, "the first page's event waited for the late page"
    await wait_until(lambda: poller.rounds_completed >= seen_by + 2, timeout=20)
    assert late_page_answered(), "no list request was answered late: the test proved nothing"
    assert sorted(payload["deployment_id"] for payload in run.payloads) == sorted([first, last])
    assert {payload["kind"] for payload in run.payloads} == {"revision_live"}
    await run.stop()
    await no_tasks_left()


def list_request_chunks(emulator: Any, count: int) -> list[list[str]]:
    """The ids each of the last ``count`` list requests asked for (the watcher's chunks: their order varies)."""
    listed = [record for record in emulator.state.request_log if record.path == "/v2/deployments"][-count:]
    chunks = [parse_qs(record.query)["deployment_ids"][0].split(",") for record in listed]
    assert len({id_ for chunk in chunks for id_ in chunk}) == sum(map(len, chunks)), chunks
    return chunks


async def _drain(trig: DeploymentRolloutTrigger) -> list[Any]:
    return [event async for event in trig.run()]


def page_bug(emulator: Any, monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    """Make the emulator's listing misbehave: ignore the ``offset`` asked for, or answer with it unchanged."""
    honest = emulator.state.list_deployments

    def listing(filters: Any = None, *, limit: int = 20, offset: int = 0, tenant: str | None = None) -> Any:
        if bug == "ignores offset":  # the first page again, its offset moved on as if it were the next
            page = honest(filters, limit=limit, offset=0, tenant=tenant)
            page["offset"] = offset + len(page["resources"])
            return page
        page = honest(filters, limit=limit, offset=offset, tenant=tenant)
        page["offset"] = offset  # the right page, but the offset it was asked for, not the next one
        return page

    monkeypatch.setattr(emulator.state, "list_deployments", listing)


async def test_a_listing_that_repeats_a_page_ends_with_a_clear_error_instead_of_looping(
    service: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # One pagination, one guard: the watcher's filter listing pages like the client. A server that ignores
    # the offset returns the first page forever; the round ends with an error naming it, and the poller
    # goes on (its rollouts and other watchers are served).
    emulator = service(data=seed(150, status="READY"))
    page_bug(emulator, monkeypatch, "ignores offset")
    run = Running(watcher(filters={"name_contains": "app-"}))
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()
    await rounds(3)
    logged = "".join(capfd.readouterr())
    assert "GET /v2/deployments returned the same page again for offset 100" in logged
    assert "stopping instead of looping" in logged
    assert logged.count("returned the same page again") == 1, "logged once, not once per round"
    assert poller.list_requests <= 2 * poller.rounds_started, "more than two pages a round: it looped"
    assert run.payloads == []
    await run.stop()
    await no_tasks_left()


async def test_a_listing_that_echoes_the_offset_asked_for_still_reads_every_page(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = service(data=seed(150, status="READY"))
    page_bug(emulator, monkeypatch, "echoes the offset")
    run = Running(watcher(filters={"name_contains": "app-"}))
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(2)
    deployment_id = deployment_named(emulator, "app-0120")["id"]  # on the second page
    revision_id = roll_out(emulator, deployment_id)
    await wait_until(lambda: len(run.payloads) == 1)
    assert run.payloads[0]["kind"] == "revision_live" and run.payloads[0]["revision_id"] == revision_id
    await run.stop()
    await no_tasks_left()


# ------------------------------------------------------------------------------------------ cursor
async def test_no_lost_and_no_duplicate_event_across_restarts(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watcher_module, "CURSOR_COMMIT_DELAY", 0.3)
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore()
    first = Running(watcher(deployment_ids=[dep["id"]]), store)
    await wait_until(lambda: store.accessor.writes >= 1)  # the baseline is saved at once
    await first.stop()
    revision_id = roll_out(emulator, dep["id"])  # while no triggerer runs
    second = Running(watcher(deployment_ids=[dep["id"]]), store)
    await wait_until(lambda: len(second.payloads) == 1)
    assert second.payloads[0]["revision_id"] == revision_id
    writes = store.accessor.writes
    await wait_until(lambda: store.accessor.writes > writes)  # saved once the event had time to be stored
    await second.stop()
    third = Running(watcher(deployment_ids=[dep["id"]], poll_interval=0.07), store)  # interval may change
    await wait_until(lambda: len(active_pollers()) == 1)
    await rounds(5)
    assert third.payloads == []
    await third.stop()
    scan_for_secret(store.data)
    assert SECRET not in json.dumps(store.data)
    await no_tasks_left()


async def test_a_restart_right_after_an_event_repeats_it_rather_than_losing_it(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watcher_module, "CURSOR_COMMIT_DELAY", 30.0)
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore()
    first = Running(watcher(deployment_ids=[dep["id"]]), store)
    await wait_until(lambda: store.accessor.writes >= 1)
    roll_out(emulator, dep["id"])
    await wait_until(lambda: len(first.payloads) == 1)
    await first.stop()  # before the triggerer could have stored the event: the cursor is not ahead of it
    second = Running(watcher(deployment_ids=[dep["id"]]), store)
    await wait_until(lambda: len(second.payloads) == 1)
    assert second.payloads[0]["event_id"] == first.payloads[0]["event_id"]
    await second.stop()
