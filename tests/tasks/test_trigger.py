"""DeploymentRolloutTrigger against the emulator over HTTP: outcomes, batching, cancellation."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any
from urllib.parse import parse_qs

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger, active_pollers
from tests.tasks.conftest import (
    LIST_ROUTE,
    REVISION_ROUTE,
    connection_json,
    deployment_named,
    seed,
    wait_until,
)

HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default", "max_attempts": 2}


def trigger(deployment_id: str, revision_id: str | None = None, **kwargs: Any) -> DeploymentRolloutTrigger:
    options: dict[str, Any] = {"hook_params": HOOK_PARAMS, "poll_interval": 0.05, **kwargs}
    return DeploymentRolloutTrigger(deployment_id=deployment_id, revision_id=revision_id, **options)


async def run(trig: DeploymentRolloutTrigger) -> list[TriggerEvent]:
    return [event async for event in trig.run()]


async def outcome(trig: DeploymentRolloutTrigger, timeout: float = 10.0) -> dict[str, Any]:
    events = await asyncio.wait_for(run(trig), timeout)
    assert len(events) == 1
    payload: dict[str, Any] = events[0].payload
    json.dumps(payload)
    assert set(payload) == {"status", "message", "deployment_id", "revision_id", "deployment"}
    return payload


def patch(emulator: Any, deployment_id: str, image: str = "registry.example.com/app:2") -> str:
    from airflow_provider.models import PatchDeploymentRequest

    body = PatchDeploymentRequest(revision_source="internal_docker", source_revision_config={"image_uri": image})
    return str(emulator.state.patch_deployment(deployment_id, body)["latest_revision_id"])


async def no_tasks_left() -> None:
    await wait_until(lambda: asyncio.all_tasks() == {asyncio.current_task()}, timeout=2)
    assert active_pollers() == []


# ------------------------------------------------------------------------------- serialization
def test_serialize_round_trip() -> None:
    trig = DeploymentRolloutTrigger(
        deployment_id="8d12e254-9195-47ca-94ec-20051ae2fc1b",
        revision_id="e533c6d0-dd3b-5732-b72e-0565518101ef",
        hook_params={"deployment_service_conn_id": "svc", "read_timeout": 5.0, "max_attempts": 3},
        poll_interval=7,
        deadline=1_900_000_000.5,
        revision_check_interval=45,
        allowed_latest_revision_id="0b7c2f4e-9a1d-4c3b-8e5f-6a7b8c9d0e1f",
        carry={"rollback": {"path": "redeploy"}},
    )
    classpath, kwargs = trig.serialize()
    assert classpath == "airflow_provider.triggers.deployment_service.DeploymentRolloutTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert kwargs == {
        "deployment_id": "8d12e254-9195-47ca-94ec-20051ae2fc1b",
        "revision_id": "e533c6d0-dd3b-5732-b72e-0565518101ef",
        "hook_params": {"deployment_service_conn_id": "svc", "read_timeout": 5.0, "max_attempts": 3},
        "poll_interval": 7.0,
        "deadline": 1_900_000_000.5,
        "revision_check_interval": 45.0,
        "seen_key": None,
        "allowed_latest_revision_id": "0b7c2f4e-9a1d-4c3b-8e5f-6a7b8c9d0e1f",
        "carry": {"rollback": {"path": "redeploy"}},
    }
    again = DeploymentRolloutTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)


# ------------------------------------------------------------------------------------ outcomes
async def test_success_only_when_our_revision_is_active(
    emulator: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    listed = emulator.state.count(LIST_ROUTE)
    task = asyncio.create_task(outcome(trigger(dep["id"], revision_id)))
    await wait_until(lambda: emulator.state.count(LIST_ROUTE) >= listed + 3, timeout=20)  # several polls, however busy
    assert not task.done(), "READY with the old revision active must keep waiting"
    emulator.state.advance(2.5)
    event = await task
    assert event["status"] == "success"
    assert event["deployment"]["active_revision_id"] == revision_id
    assert event["deployment"]["secrets"][0]["value"] == "**********"
    out, err = capfd.readouterr()
    # logged once per state change, not once per poll (about 6 polls happened while waiting). Whether a log line
    # reaches stderr, caplog or both depends on which earlier test configured logging, so count where it went.
    assert max((out + err).count("still serves"), caplog.text.count("still serves")) == 1
    await no_tasks_left()


async def test_deleted_deployment_fails(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = asyncio.create_task(outcome(trigger(dep["id"], revision_id)))
    await asyncio.sleep(0.1)
    emulator.state.delete_deployment(dep["id"])
    event = await task
    assert event["status"] == "failed"
    assert "disappeared" in event["message"] and dep["id"] in event["message"]


async def test_awaiting_delete_fails(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.set_status(dep["id"], "AWAITING_DELETE")
    event = await outcome(trigger(dep["id"], None))
    assert event["status"] == "failed" and "AWAITING_DELETE" in event["message"]
    assert event["deployment"]["status"] == "AWAITING_DELETE"


async def test_superseded_fails(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ours = patch(emulator, dep["id"], "app:ours")
    newer = patch(emulator, dep["id"], "app:newer")
    event = await outcome(trigger(dep["id"], ours))
    assert event["status"] == "failed"
    assert f"superseded by {newer}" in event["message"]


async def test_build_failed_seen_through_the_revision_endpoint(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    revision_id = patch(emulator, dep["id"])
    emulator.state.advance(2.5)  # the build has failed; the deployment is still READY on the old revision
    event = await outcome(trigger(dep["id"], revision_id))
    assert event["status"] == "failed"
    assert "BUILD_FAILED" in event["message"] and "npm ci exited with 1" in event["message"]
    assert emulator.state.count(REVISION_ROUTE) == 1


async def test_without_revision_endpoint_falls_back_silently(service: Any) -> None:
    emulator = service(optional_endpoints=False)
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = asyncio.create_task(outcome(trigger(dep["id"], revision_id, revision_check_interval=0)))
    await wait_until(lambda: emulator.state.count(LIST_ROUTE) >= 5)
    assert not task.done()
    emulator.state.advance(2.5)
    event = await task
    assert event["status"] == "success"
    # the endpoint answered 404 once, and was never asked again though the interval is 0
    asked = [r for r in emulator.state.request_log if "/revisions/" in r.path]
    assert [r.status_code for r in asked] == [404]


async def test_one_failed_revision_check_does_not_turn_fail_fast_off(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    revision_id = patch(emulator, dep["id"])
    # a 200 whose body is not JSON: a non-transient error that says nothing about the endpoint existing
    emulator.state.add_fault(kind="not_json", method="GET", path="/v2/deployments/*/revisions/*")
    emulator.state.advance(2.5)
    event = await outcome(trigger(dep["id"], revision_id, revision_check_interval=0, deadline=time.time() + 5))
    assert event["status"] == "failed" and "npm ci exited with 1" in event["message"]
    assert emulator.state.count(REVISION_ROUTE) == 2


async def test_revision_endpoint_asked_only_on_change_or_interval(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = asyncio.create_task(outcome(trigger(dep["id"], revision_id, revision_check_interval=60)))
    await wait_until(lambda: emulator.state.count(LIST_ROUTE) >= 6)
    assert emulator.state.count(REVISION_ROUTE) == 1  # nothing changed: one call for many polls
    emulator.state.advance(0.5)  # AWAITING_BUILD -> BUILDING changes updated_at
    await wait_until(lambda: emulator.state.count(REVISION_ROUTE) == 2)
    emulator.state.advance(2)
    assert (await task)["status"] == "success"


async def test_timeout_after_a_final_check(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    started = time.monotonic()
    event = await outcome(trigger(dep["id"], revision_id, deadline=time.time() + 0.3))
    assert event["status"] == "timeout"
    assert time.monotonic() - started >= 0.3
    assert "timed out" in event["message"] and "still serves" in event["message"]
    assert event["deployment"]["latest_revision_id"] == revision_id


async def test_final_check_sees_a_rollout_that_finished_at_the_deadline(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    emulator.state.advance(2.5)
    # the deadline passed already: the one final check still reports the live revision
    event = await outcome(trigger(dep["id"], revision_id, deadline=time.time() - 5))
    assert event["status"] == "success"
    assert emulator.state.count(LIST_ROUTE) == 1


async def test_transient_errors_are_retried(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    # max_attempts=2: the client gives up on each of the first two rounds; the trigger keeps polling
    emulator.state.add_fault(kind="status", status_code=503, method="GET", path="/v2/deployments", count=4)
    event = await outcome(trigger(dep["id"], None))
    assert event["status"] == "success"
    assert emulator.state.count(LIST_ROUTE) == 5


async def test_auth_error_ends_with_error(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_WRONG_KEY", connection_json(emulator.base_url, "not-the-key"))
    dep = deployment_named(emulator, "checkout-api-dev")
    trig = trigger(dep["id"], None, hook_params={"deployment_service_conn_id": "wrong_key"})
    event = await outcome(trig)
    assert event["status"] == "error"
    assert "401" in event["message"] and "not-the-key" not in event["message"]
    assert emulator.state.count(LIST_ROUTE) == 1
    await no_tasks_left()


async def test_invalid_deployment_id_ends_with_error() -> None:
    event = await outcome(trigger("not-a-uuid", None))
    assert event["status"] == "error" and "deployment_id" in event["message"]


# ------------------------------------------------------------------------------------- batching
@pytest.mark.parametrize("count", [1, 100, 250, 500])
async def test_batched_polling(service: Any, count: int) -> None:
    emulator = service(data=seed(count, status="UNUSED"))
    ids = [item["id"] for item in emulator.state.snapshot()["deployments"]]
    tasks = [asyncio.create_task(outcome(trigger(dep_id, None, poll_interval=0.2), timeout=30)) for dep_id in ids]
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()

    def idle_after(rounds: int) -> bool:
        return poller.rounds_completed >= rounds and poller.rounds_completed == poller.rounds_started

    await wait_until(lambda: idle_after(1), timeout=20)
    before, rounds_before = emulator.state.count(LIST_ROUTE), poller.rounds_completed
    await wait_until(lambda: idle_after(rounds_before + 3), timeout=20)
    after, rounds_after = emulator.state.count(LIST_ROUTE), poller.rounds_completed
    per_round = (after - before) / (rounds_after - rounds_before)
    assert per_round == math.ceil(count / 100)
    with emulator.state._lock:  # flip every deployment in one step, so all finish in the same round
        for dep_id in ids:
            emulator.state.set_status(dep_id, "READY")
    events = await asyncio.gather(*tasks)
    assert {event["status"] for event in events} == {"success"}
    assert sorted(event["deployment_id"] for event in events) == sorted(ids)
    assert emulator.state.count(LIST_ROUTE) == poller.rounds_completed * math.ceil(count / 100)
    assert set(emulator.state.counters) == {LIST_ROUTE}
    for record in emulator.state.request_log:
        asked = parse_qs(record.query)["deployment_ids"][0].split(",")
        assert len(asked) == len(set(asked)) <= 100
    await no_tasks_left()


async def test_same_deployment_is_asked_once_per_round(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    tasks = [asyncio.create_task(outcome(trigger(dep["id"], revision_id))) for _ in range(3)]
    await wait_until(lambda: emulator.state.count(LIST_ROUTE) >= 3)
    emulator.state.advance(2.5)
    assert {event["status"] for event in await asyncio.gather(*tasks)} == {"success"}
    list_queries = [r.query for r in emulator.state.request_log if r.route == LIST_ROUTE]
    assert all(parse_qs(query)["deployment_ids"] == [dep["id"]] for query in list_queries)
    assert emulator.state.count(REVISION_ROUTE) <= 2  # deduplicated too (one per change)


async def test_different_settings_use_different_pollers(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.set_status(dep["id"], "UNUSED")
    tasks = [
        asyncio.create_task(outcome(trigger(dep["id"], None, poll_interval=0.05))),
        asyncio.create_task(outcome(trigger(dep["id"], None, poll_interval=0.07))),
        asyncio.create_task(
            outcome(trigger(dep["id"], None, hook_params={"deployment_service_conn_id": "deployment_service_default"}))
        ),
    ]
    await wait_until(lambda: len(active_pollers()) == 3)
    emulator.state.set_status(dep["id"], "READY")
    assert {event["status"] for event in await asyncio.gather(*tasks)} == {"success"}
    await no_tasks_left()


async def test_a_failing_round_ends_the_waits_with_an_error(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider.triggers.poller import _BatchPoller

    async def broken(self: Any, subscribers: Any, found: Any) -> None:
        raise RuntimeError("bug in a round")

    monkeypatch.setattr(_BatchPoller, "_check_revisions", broken)
    dep = deployment_named(emulator, "checkout-api-dev")
    events = await asyncio.gather(*(outcome(trigger(dep["id"], None)) for _ in range(2)))
    assert [event["status"] for event in events] == ["error", "error"]
    assert "bug in a round" in events[0]["message"]
    await no_tasks_left()


# ---------------------------------------------------------------------------------- cancellation
async def test_cancelled_subscriber_mid_poll_does_not_break_the_others(emulator: Any) -> None:
    deps = [deployment_named(emulator, name)["id"] for name in ("checkout-api-dev", "search-prod")]
    for dep_id in deps:
        emulator.state.set_status(dep_id, "UNUSED")
    # every list request takes 0.3 s: cancel one trigger while the poller waits for the answer
    emulator.state.add_fault(kind="delay", delay_seconds=0.3, method="GET", path="/v2/deployments", count=None)
    doomed = asyncio.create_task(outcome(trigger(deps[0], None)))
    survivor = asyncio.create_task(outcome(trigger(deps[1], None)))
    await wait_until(lambda: bool(active_pollers()) and active_pollers()[0].rounds_started >= 1)
    assert active_pollers()[0].rounds_completed == 0  # the first round is in flight
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    emulator.state.set_status(deps[1], "READY")
    event = await survivor
    assert event["status"] == "success" and event["deployment_id"] == deps[1]
    await no_tasks_left()


async def test_cancelling_every_subscriber_stops_the_poller_and_closes_its_client(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.set_status(dep["id"], "UNUSED")
    tasks = [asyncio.create_task(outcome(trigger(dep["id"], None))) for _ in range(5)]
    await wait_until(lambda: emulator.state.count(LIST_ROUTE) >= 2)
    (poller,) = active_pollers()
    client = poller.hook._async_client
    assert client is not None
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await no_tasks_left()
    assert poller.hook._async_client is None and client._http.is_closed
    calls = emulator.state.count(LIST_ROUTE)
    await asyncio.sleep(0.2)
    assert emulator.state.count(LIST_ROUTE) == calls  # nothing polls any more


async def test_quiet_building_fleet_spends_one_revision_call_per_ten_list_requests(service: Any) -> None:
    # 250 rollouts whose revisions build for a long time and do not change, the safety-net timer always
    # due (interval 0): first looks and timer calls come out of the budget, ceil(N/100) at once and then
    # ceil(N/100)/10 per round, so the fleet costs 1.1 x ceil(N/100) requests per round however many
    # rollouts started together.
    count = 250
    emulator = service(data=seed(count), build_seconds=10_000)
    ids = [item["id"] for item in emulator.state.snapshot()["deployments"]]
    emulator.state.advance(5)  # seeded deployments are READY on their first revision
    revisions = {dep_id: patch(emulator, dep_id) for dep_id in ids}
    emulator.state.reset_requests()
    tasks = [
        asyncio.create_task(outcome(trigger(dep_id, rev, poll_interval=0.05, revision_check_interval=0), timeout=60))
        for dep_id, rev in revisions.items()
    ]
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()
    await wait_until(lambda: poller.rounds_completed >= 25, timeout=30)
    completed = poller.rounds_completed
    asked, listed = emulator.state.count(REVISION_ROUTE), emulator.state.count(LIST_ROUTE)
    started = poller.rounds_started
    lists_per_round = math.ceil(count / 100)
    # full bucket in round 1, then 3 tenths of a call per round
    assert asked <= lists_per_round + lists_per_round * (started - 1) // 10
    assert asked >= lists_per_round + lists_per_round * (completed - 1) // 10  # the budget is used, not idle
    assert listed <= started * lists_per_round
    assert asked + listed <= 1.1 * lists_per_round * started + lists_per_round  # + the first round's looks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await no_tasks_left()


async def test_a_failed_build_in_a_waiting_fleet_is_reported_within_two_intervals(service: Any) -> None:
    # 250 rollouts that arrived together: the last one's first look is hundreds of rounds away in the
    # budget, but its build failing changes its deployment's row, and that is looked at at once.
    count = 250
    emulator = service(data=seed(count), build_seconds=10_000)
    ids = [item["id"] for item in emulator.state.snapshot()["deployments"]]
    emulator.state.advance(5)
    revisions = {dep_id: patch(emulator, dep_id) for dep_id in ids}
    emulator.state.advance(2)  # the builds run (past CREATING); a failure from now on moves the deployment's updated_at
    doomed = ids[-1]
    tasks = {
        dep_id: asyncio.create_task(outcome(trigger(dep_id, rev, poll_interval=0.05), timeout=60))
        for dep_id, rev in revisions.items()
    }
    await wait_until(lambda: len(active_pollers()) == 1)
    (poller,) = active_pollers()
    await wait_until(lambda: poller.rounds_completed >= 5, timeout=30)
    emulator.state.reset_requests()
    decided_in_round: list[int] = []
    tasks[doomed].add_done_callback(lambda _: decided_in_round.append(poller.rounds_completed))
    shown_in_round = poller.rounds_started  # the round in progress may have listed it already
    emulator.state.fail_revision(doomed, revisions[doomed], "BUILD_FAILED", "npm ci exited with 1")
    event = await tasks[doomed]
    assert event["status"] == "failed"
    assert "BUILD_FAILED" in event["message"] and "npm ci exited with 1" in event["message"]
    assert decided_in_round and decided_in_round[0] <= shown_in_round + 2
    asked_doomed = [r for r in emulator.state.request_log if "/revisions/" in r.path and doomed in r.path]
    assert len(asked_doomed) == 1  # the change look; its first look was still waiting for the budget
    assert all(not task.done() for dep_id, task in tasks.items() if dep_id != doomed)
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    await no_tasks_left()


async def test_a_passing_connection_lookup_failure_is_retried(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    dep = deployment_named(emulator, "checkout-api-dev")
    original = DeploymentServiceHook.get_async_client
    calls = []

    async def flaky(self: DeploymentServiceHook) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the API server is briefly unreachable")
        return await original(self)

    monkeypatch.setattr(DeploymentServiceHook, "get_async_client", flaky)
    event = await outcome(trigger(dep["id"], None))
    assert event["status"] == "success" and len(calls) >= 2


async def test_a_missing_connection_ends_the_wait_with_an_error(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    event = await outcome(trigger(dep["id"], None, hook_params={"deployment_service_conn_id": "no_such_conn"}))
    assert event["status"] == "error" and "no_such_conn" in event["message"]


# ------------------------------------------------------------------------------ cancellation
async def test_a_cancellation_that_arrives_with_an_update_always_ends_the_wait() -> None:
    """``asyncio.wait_for`` on Python < 3.12 returns the item instead of raising when the triggerer's
    cancellation arrives as an update does, and the cancelled trigger went on polling (a watcher test hung
    on it). Every interleaving of the two must end the wait."""
    from airflow_provider.triggers.poller import next_update

    for steps in range(5):  # how far the update got before the cancellation: each interleaving
        queue: asyncio.Queue[int] = asyncio.Queue()
        task = asyncio.create_task(next_update(queue, 5.0))
        await asyncio.sleep(0)
        queue.put_nowait(steps)
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.cancel():  # False: the wait had already returned the update, nothing to cancel
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_the_wait_for_an_update_times_out_and_leaves_the_queue_intact() -> None:
    from airflow_provider.triggers.poller import next_update

    queue: asyncio.Queue[str] = asyncio.Queue()
    with pytest.raises(asyncio.TimeoutError):
        await next_update(queue, 0.01)
    queue.put_nowait("later")
    assert await next_update(queue, 1.0) == "later"
    assert queue.empty()
