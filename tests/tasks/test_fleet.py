"""FleetRolloutOperator against the emulator: the plan, waves, the failure budget, verify and bake,
deferral wave by wave, resuming a retry, and bad input refused before any request."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.decisions.fleet_progress import FleetProgress, FleetRow, Outcome, WaveRecord
from airflow_provider.emulator import FaultRule
from airflow_provider.models import Deployment
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.tasks.fleet.progress import STATE_KEY, stop_reason
from airflow_provider.triggers.deployment_service import FleetWaveTrigger
from tests.tasks.conftest import (
    LIST_ROUTE,
    PATCH_ROUTE,
    SECRET,
    FakeStore,
    FakeTI,
    make_context,
    run_deferred,
    run_trigger,
    scan_for_secret,
    seed,
)

LOGS_ROUTE = "GET /v2/deployments/{deployment_id}/revisions/{revision_id}/logs"
FAST = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1}


@pytest.fixture
def fleet(service: Callable[..., Any]) -> Callable[..., Any]:
    """A real-time emulator (builds take 0.3 s) seeded with ``count`` codehost deployments app-0000..."""

    def start(count: int, **options: Any) -> Any:
        return service(data=seed(count), **{**FAST, **options})

    return start


def fleet_op(**kwargs: Any) -> FleetRolloutOperator:
    options: dict[str, Any] = {"task_id": "fleet", "poll_interval": 0.1, "timeout": 30, "repo_ref": "v2", **kwargs}
    return FleetRolloutOperator(**options)


def ids_by_name(emulator: Any) -> dict[str, str]:
    return {item["name"]: item["id"] for item in emulator.state.snapshot()["deployments"]}


def patched_order(emulator: Any) -> list[str]:
    """Deployment ids in the order their successful PATCH arrived."""
    return [
        record.path.rsplit("/", 1)[1]
        for record in emulator.state.request_log
        if record.route == PATCH_ROUTE and record.status_code == 200
    ]


def revisions(emulator: Any, deployment_id: str) -> list[dict[str, Any]]:
    revisions: list[dict[str, Any]] = emulator.state.deployment(deployment_id)["revisions"]
    return revisions


# ------------------------------------------------------------------------------------------ plan and waves
def test_canary_then_waves_land_and_the_table_says_so(fleet: Any, capfd: pytest.CaptureFixture[str]) -> None:
    emulator = fleet(7)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()
    table = fleet_op(deployment_names=sorted(ids), canary=["app-0004"], wave_size=3).execute(make_context(ti))
    assert [row["wave"] for row in table] == ["canary", *["wave 1"] * 3, *["wave 2"] * 3]
    assert [row["name"] for row in table][:2] == ["app-0004", "app-0000"]
    assert emulator.state.count(PATCH_ROUTE) == 7
    order = patched_order(emulator)
    assert order[0] == ids["app-0004"] and set(order[1:4]) == {ids["app-0000"], ids["app-0001"], ids["app-0002"]}
    for row in table:
        deployment = emulator.state.deployment(row["deployment_id"])
        assert row["outcome"] == Outcome.LANDED, row
        assert row["from_revision"] == before[row["name"]]
        assert (
            row["to_revision"]
            == deployment["active_revision_id"]
            == revisions(emulator, row["deployment_id"])[-1]["id"]
        )
        assert deployment["source_revision_config"]["repo_ref"] == "v2"
        assert row["seconds"] is not None and row["seconds"] >= 0
    assert ti.xcoms["fleet_summary"] == {"counts": {"landed": 7}, "failures": 0, "allowed_failures": 0, "stopped": ""}
    logged = capfd.readouterr().out
    plan_at = logged.index("Fleet rollout plan: 7 deployment(s) in 3 wave(s)")
    assert plan_at < logged.index("patched app-0004") < logged.index("Fleet rollout summary: {'landed': 7}")
    json.dumps(table)


def test_wave_size_as_a_percentage_and_filters_as_targets(fleet: Any) -> None:
    emulator = fleet(10)
    table = fleet_op(filters={"name_contains": "app-"}, wave_size="25%", canary=2).execute(make_context())
    waves = [row["wave"] for row in table]
    assert waves.count("canary") == 2 and waves.count("wave 1") == 3 and waves.count("wave 3") == 2
    assert [row["name"] for row in table] == sorted(row["name"] for row in table)
    assert emulator.state.count(PATCH_ROUTE) == 10


def test_budget_overrun_stops_names_the_failures_and_leaves_later_waves_alone(fleet: Any) -> None:
    emulator = fleet(9)
    ids = ids_by_name(emulator)
    for name in ("app-0002", "app-0003"):
        emulator.state.fail_next_build(ids[name], status="BUILD_FAILED")
    ti = FakeTI()
    with pytest.raises(AirflowFailException) as raised:
        fleet_op(deployment_names=sorted(ids), canary=1, wave_size=4, max_failures=1).execute(make_context(ti))
    message = str(raised.value)
    assert "2 deployment(s) failed, more than max_failures allows (1)" in message
    assert "app-0002" in message and "app-0003" in message and "BUILD_FAILED" in message
    assert "4 deployment(s) in later waves were not patched" in message
    assert emulator.state.count(PATCH_ROUTE) == 5
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    for name in ("app-0005", "app-0006", "app-0007", "app-0008"):
        assert table[name]["outcome"] == Outcome.NOT_PATCHED
        assert len(revisions(emulator, ids[name])) == 1, f"{name} was patched after the stop"
    assert table["app-0002"]["outcome"] == Outcome.FAILED and table["app-0001"]["outcome"] == Outcome.LANDED


def test_failures_within_the_budget_do_not_stop_the_rollout(fleet: Any) -> None:
    emulator = fleet(6)
    ids = ids_by_name(emulator)
    emulator.state.fail_next_build(ids["app-0001"], status="DEPLOY_FAILED")
    table = fleet_op(deployment_names=sorted(ids), wave_size=2, max_failures=0.2).execute(make_context())
    outcomes = {row["name"]: row["outcome"] for row in table}
    assert outcomes.pop("app-0001") == Outcome.FAILED
    assert set(outcomes.values()) == {Outcome.LANDED}
    assert emulator.state.count(PATCH_ROUTE) == 6


def test_a_failed_canary_stops_before_the_fleet(fleet: Any) -> None:
    emulator = fleet(5)
    ids = ids_by_name(emulator)
    emulator.state.fail_next_build(ids["app-0000"], status="BUILD_FAILED")
    with pytest.raises(AirflowFailException, match="app-0000"):
        fleet_op(deployment_names=sorted(ids), canary=1, wave_size=10).execute(make_context())
    assert patched_order(emulator) == [ids["app-0000"]]


def test_a_failed_canary_stops_the_rollout_whatever_the_budget(fleet: Any) -> None:
    emulator = fleet(5)
    ids = ids_by_name(emulator)
    emulator.state.fail_next_build(ids["app-0000"], status="BUILD_FAILED")
    ti = FakeTI()
    with pytest.raises(AirflowFailException, match="the canary failed") as raised:
        fleet_op(deployment_names=sorted(ids), canary=1, wave_size=2, max_failures=0.2).execute(make_context(ti))
    assert "app-0000" in str(raised.value) and "4 deployment(s) in later waves were not patched" in str(raised.value)
    assert patched_order(emulator) == [ids["app-0000"]]
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert [table[f"app-000{index}"]["outcome"] for index in range(1, 5)] == [Outcome.NOT_PATCHED] * 4
    assert ti.xcoms["fleet_summary"]["stopped"].startswith("the canary failed")


def test_a_canary_rolled_back_for_a_reason_not_recorded_stops_the_rollout_without_being_called_failed() -> None:
    """Conservative: a canary deployment an earlier try rolled back (why not recorded) stops the rollout as a
    failed canary would, and the reason says what is known."""
    canary = WaveRecord("canary", [FleetRow("id-a", "a", "canary", "r0", "r1", Outcome.ROLLED_BACK_REASON_UNKNOWN)])
    rest = WaveRecord("wave 1", [FleetRow("id-b", "b", "wave 1", "r2")])
    progress = FleetProgress(waves=[canary, rest], allowed_failures=5, change="x")
    assert progress.canary_failed and not progress.failures and len(progress.counted) == 1
    reason = stop_reason(progress, canary)
    assert reason == (
        "the canary failed or was rolled back by an earlier try for a reason not recorded (0 failed and 1 rolled "
        "back for a reason not recorded, of 1 canary deployment(s)); a failed canary stops the rollout whatever "
        "max_failures allows"
    )


def test_a_failed_canary_rolls_back_the_whole_canary_with_rollback_on_failure(fleet: Any) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    ti = FakeTI()
    task = fleet_op(
        deployment_names=sorted(ids),
        canary=2,
        max_failures=2,
        verify=lambda deployment: deployment.name != "app-0001",
        rollback_on_failure=True,
    )
    with pytest.raises(AirflowFailException, match="the canary failed"):
        task.execute(make_context(ti))
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0000"]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE  # it passed verify
    assert table["app-0001"]["outcome"] == Outcome.ROLLED_BACK
    assert table["app-0002"]["outcome"] == table["app-0003"]["outcome"] == Outcome.NOT_PATCHED
    assert len(revisions(emulator, ids["app-0002"])) == 1


def test_patch_for_gives_each_source_its_field(service: Callable[..., Any]) -> None:
    data = {
        "deployments": [
            {"name": "git-app", "source": "codehost"},
            {"name": "image-app", "source": "external_docker"},
        ]
    }
    emulator = service(data=data, **FAST)

    def patch_for(deployment: Deployment) -> dict[str, Any]:
        if deployment.source == "codehost":
            return {"repo_ref": "v3"}
        return {"image_uri": f"registry.example.com/{deployment.name}:3"}

    table = fleet_op(repo_ref=None, deployment_names="git-app,image-app", patch_for=patch_for).execute(make_context())
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    assert emulator.state.find_deployment("git-app")["source_revision_config"]["repo_ref"] == "v3"
    image = emulator.state.find_deployment("image-app")["source_revision_config"]["image_uri"]
    assert image == "registry.example.com/image-app:3"


def test_verify_failure_and_leaving_ready_during_the_bake_fail_those_deployments(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    seen: list[str] = []

    def verify(deployment: Deployment) -> bool:
        seen.append(deployment.name)
        assert deployment.active_revision_id == deployment.latest_revision_id
        return deployment.name != "app-0001"

    task = fleet_op(deployment_names=sorted(ids), max_failures=2, verify=verify, bake_seconds=0.6)
    stop = threading.Event()

    def platform_breaks_app_0002() -> None:  # once its new revision is live, the deployment leaves READY
        while not stop.is_set():
            deployment = emulator.state.deployment(ids["app-0002"])
            if (
                len(deployment["revisions"]) > 1
                and deployment["active_revision_id"] == deployment["revisions"][-1]["id"]
            ):
                time.sleep(0.15)
                emulator.state.set_status(ids["app-0002"], "UNKNOWN")
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=platform_breaks_app_0002, daemon=True)
    watcher.start()
    try:
        table = {row["name"]: row for row in task.execute(make_context())}
    finally:
        stop.set()
        watcher.join(5)
    assert table["app-0000"]["outcome"] == Outcome.LANDED
    assert table["app-0001"]["outcome"] == Outcome.FAILED
    assert "verify returned False" in table["app-0001"]["message"]
    assert table["app-0002"]["outcome"] == Outcome.FAILED
    assert "left service during the bake" in table["app-0002"]["message"]
    assert sorted(seen) == ["app-0000", "app-0001"]


def test_a_deployment_deleted_mid_rollout_fails_and_the_others_go_on(fleet: Any) -> None:
    emulator = fleet(4, build_seconds=1.0)
    ids = ids_by_name(emulator)
    calls: list[str] = []

    def patch_for(deployment: Deployment) -> dict[str, Any]:
        calls.append(deployment.name)
        if deployment.name == "app-0002":  # deleted between the wave's read and its patch
            emulator.state.delete_deployment(ids["app-0003"])
        return {"repo_ref": "v4"}

    table = {
        row["name"]: row
        for row in fleet_op(deployment_names=sorted(ids), max_failures=1, patch_for=patch_for, repo_ref=None).execute(
            make_context()
        )
    }
    assert table["app-0003"]["outcome"] == Outcome.FAILED and "deleted" in table["app-0003"]["message"]
    assert [table[f"app-000{index}"]["outcome"] for index in range(3)] == [Outcome.LANDED] * 3


# ------------------------------------------------------------------------------------------ deferral


@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "progress-in-trigger"])
def test_deferrable_rollout_waits_one_trigger_per_wave(fleet: Any, with_store: bool) -> None:
    emulator = fleet(7)
    ids = ids_by_name(emulator)
    store = FakeStore() if with_store else None
    secrets = {"TOKEN": SECRET}

    def make() -> FleetRolloutOperator:
        return fleet_op(
            deployment_ids=list(ids.values()),
            canary=1,
            wave_size=3,
            deferrable=True,
            secrets=secrets,
            pause_seconds=0.2,
        )

    table, triggers = run_deferred(make, make_context(store=store))
    assert emulator.state.count(PATCH_ROUTE) == 7
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    waves = [trigger for trigger in triggers if trigger.rollouts]
    pauses = [trigger for trigger in triggers if not trigger.rollouts]
    assert [len(trigger.rollouts) for trigger in waves] == [1, 3, 3]
    assert len(pauses) == 2 and all(trigger.resume_at for trigger in pauses)
    for trigger in triggers:
        scan_for_secret(trigger.serialize()[1])
        assert (trigger.carry is None) == with_store
    if store is not None:
        scan_for_secret(store.data)
        assert store.data[STATE_KEY]["waves"] == 3


def test_a_wave_in_the_triggerer_costs_one_list_request_per_round(fleet: Any) -> None:
    emulator = fleet(150, build_seconds=1.0)
    ids = list(ids_by_name(emulator).values())
    with pytest.raises(TaskDeferred) as deferred:
        fleet_op(deployment_ids=ids, wave_size=150, deferrable=True, poll_interval=0.25).execute(
            make_context(store=FakeStore())
        )
    emulator.state.reset_requests()
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "done" and len(event["outcomes"]) == 150
    # A round's list requests go out together; rounds are poll_interval (0.25 s) apart. Decided rollouts
    # leave the poller, so a round asks for ceil(undecided / 100): two while more than 100 wait, then one.
    rounds: list[list[Any]] = []
    for record in sorted(emulator.state.request_log, key=lambda item: item.at):
        if record.route != LIST_ROUTE:
            continue
        if rounds and (record.at - rounds[-1][0].at).total_seconds() < 0.1:
            rounds[-1].append(record)
        else:
            rounds.append([record])
    assert len(rounds[0]) == 2, "150 rollouts: the first round asks for 100 + 50"
    assert all(len(requests) <= 2 for requests in rounds) and len(rounds) <= 1.0 / 0.25 + 3


# ------------------------------------------------------------------------------------------ retries
def test_a_retry_resumes_without_patching_anything_twice(fleet: Any) -> None:
    emulator = fleet(6)
    ids = ids_by_name(emulator)
    store = FakeStore()
    # The fourth PATCH fails through every client retry: the first try dies mid-wave.
    emulator.state.add_fault(
        FaultRule(kind="status", status_code=503, method="PATCH", path=f"/v2/deployments/{ids['app-0003']}", count=20)
    )
    task_options = {"deployment_names": sorted(ids), "wave_size": 4, "max_attempts": 2}
    with pytest.raises(Exception, match="503"):
        fleet_op(**task_options).execute(make_context(FakeTI(try_number=1), store))
    assert emulator.state.count(PATCH_ROUTE) == 3 + 2
    emulator.state.clear_faults()
    table = fleet_op(**task_options).execute(make_context(FakeTI(try_number=2), store))
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    for deployment_id in ids.values():
        assert len(revisions(emulator, deployment_id)) == 2, "a deployment was patched twice"


def test_a_retry_after_the_record_was_lost_reattaches_instead_of_patching_again(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    fleet_op(deployment_names=sorted(ids)).execute(make_context(FakeTI(try_number=1)))
    emulator.state.reset_requests()
    table = fleet_op(deployment_names=sorted(ids)).execute(make_context(FakeTI(try_number=2)))
    assert emulator.state.count(PATCH_ROUTE) == 0
    assert {row["outcome"] for row in table} == {Outcome.LANDED}


# ------------------------------------------------------------------------------------------ parallel patches
class ThreadRecordingStore(FakeStore):
    """A store that notes which thread wrote, and whether two writes ever overlapped."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()
        self.busy = threading.Lock()
        self.overlapped = False

    def set(self, key: str, value: Any) -> None:
        if not self.busy.acquire(blocking=False):
            self.overlapped = True
            self.busy.acquire()
        try:
            self.threads.add(threading.current_thread().name)
            time.sleep(0.001)
            super().set(key, value)
        finally:
            self.busy.release()


class WriteCountingStore(FakeStore):
    """A store that keeps every write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    def set(self, key: str, value: Any) -> None:
        self.writes.append((key, json.dumps(value, sort_keys=True)))
        super().set(key, value)


def test_the_store_gets_each_change_once_and_ends_with_the_whole_outcome(fleet: Any) -> None:
    emulator = fleet(12)
    ids = ids_by_name(emulator)
    store = WriteCountingStore()
    table = fleet_op(deployment_names=sorted(ids), wave_size=6, max_parallel_patches=3).execute(
        make_context(store=store)
    )
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    # No key is written twice in a row with the same value (every write is a round trip on a worker)...
    last: dict[str, str] = {}
    for key, text in store.writes:
        assert last.get(key) != text, f"{key} written again unchanged"
        last[key] = text
    header_writes = [key for key, _ in store.writes if key == STATE_KEY]
    assert len(header_writes) < len(store.writes) // 3
    # ...and what the store holds at the end is the whole outcome: a retry would find every row decided.
    rows = [row for index in range(2) for row in store.data[f"{STATE_KEY}/wave/{index}"]["rows"]]
    assert {row["deployment_id"]: row["outcome"] for row in rows} == {row["deployment_id"]: "landed" for row in table}
    emulator.state.reset_requests()
    again = fleet_op(deployment_names=sorted(ids), wave_size=6, max_parallel_patches=3).execute(
        make_context(FakeTI(try_number=2), store)
    )
    assert emulator.state.count(PATCH_ROUTE) == 0 and again == table


def patch_arrivals(emulator: Any) -> list[float]:
    """When each PATCH reached the emulator (real seconds), in arrival order."""
    return sorted(record.at.timestamp() for record in emulator.state.request_log if record.route == PATCH_ROUTE)


def test_a_waves_patches_overlap_up_to_max_parallel_patches(fleet: Any) -> None:
    delay = 1.0
    emulator = fleet(8)
    ids = ids_by_name(emulator)
    # Every PATCH is answered only after `delay`: one sent before an earlier one's delay ran out overlapped it.
    emulator.state.add_fault(FaultRule(kind="delay", delay_seconds=delay, method="PATCH", count=None))
    store = ThreadRecordingStore()
    table = fleet_op(deployment_names=sorted(ids), wave_size=8, max_parallel_patches=4).execute(
        make_context(store=store)
    )
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    arrivals = patch_arrivals(emulator)
    assert len(arrivals) == 8
    assert arrivals[3] - arrivals[0] < delay, "the first four PATCHes were not in flight together"
    # A fifth is sent only when one of the four was answered: never five within one delay.
    assert all(later - earlier >= delay - 0.01 for earlier, later in zip(arrivals, arrivals[4:], strict=False))
    assert store.threads == {threading.current_thread().name} and not store.overlapped
    for deployment_id in ids.values():
        assert len(revisions(emulator, deployment_id)) == 2


def test_max_parallel_patches_1_sends_them_one_after_the_other(fleet: Any) -> None:
    delay = 0.3
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    emulator.state.add_fault(FaultRule(kind="delay", delay_seconds=delay, method="PATCH", count=None))
    table = fleet_op(deployment_names=sorted(ids), max_parallel_patches=1).execute(make_context())
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    arrivals = patch_arrivals(emulator)
    assert len(arrivals) == 3
    assert all(later - earlier >= delay - 0.01 for earlier, later in itertools.pairwise(arrivals))
    assert patched_order(emulator) == [ids[name] for name in sorted(ids)]


def test_a_transient_failure_mid_wave_records_the_patches_in_flight_and_a_retry_patches_none_twice(
    fleet: Any,
) -> None:
    emulator = fleet(6)
    ids = ids_by_name(emulator)
    emulator.state.add_fault(
        FaultRule(kind="status", status_code=503, method="PATCH", path=f"/v2/deployments/{ids['app-0001']}", count=20)
    )
    store = FakeStore()
    task_options = {"deployment_names": sorted(ids), "wave_size": 6, "max_attempts": 2, "max_parallel_patches": 3}
    with pytest.raises(Exception, match="503"):
        fleet_op(**task_options).execute(make_context(FakeTI(try_number=1), store))
    landed = set(patched_order(emulator))
    assert landed and ids["app-0001"] not in landed
    recorded = {row["deployment_id"] for row in store.data[f"{STATE_KEY}/wave/0"]["rows"] if row["started_at"]}
    assert recorded == landed, "a PATCH the service accepted was not recorded before the task failed"
    emulator.state.clear_faults()
    table = fleet_op(**task_options).execute(make_context(FakeTI(try_number=2), store))
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    assert sorted(patched_order(emulator)) == sorted(ids.values()), "a deployment was patched twice"
    for deployment_id in ids.values():
        assert len(revisions(emulator, deployment_id)) == 2


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "no targets"),
        ({"deployment_ids": ["x"], "filters": {"status": "READY"}}, "deployment_ids and filters given together"),
        ({"deployment_ids": []}, "deployment_ids is empty"),
        ({"filters": {"colour": "blue"}}, "unknown filter.*colour"),
        ({"filters": {}}, "filters is empty"),
        ({"deployment_names": ["a"], "wave_size": 0}, "wave_size"),
        ({"deployment_names": ["a"], "wave_size": "0%"}, "wave_size"),
        ({"deployment_names": ["a"], "max_failures": -1}, "max_failures"),
        ({"deployment_names": ["a"], "max_failures": 1.5}, "max_failures"),
        ({"deployment_names": ["a"], "canary": -1}, "canary"),
        ({"deployment_names": ["a"], "pause_seconds": -1}, "pause_seconds"),
        ({"deployment_names": ["a"], "max_parallel_patches": 0}, "max_parallel_patches"),
        ({"deployment_names": ["a"], "max_parallel_patches": 2.5}, "max_parallel_patches"),
        ({"deployment_names": ["a"], "max_parallel_patches": True}, "max_parallel_patches"),
        ({"deployment_names": ["a"], "repo_ref": None}, "no change"),
        ({"deployment_names": ["a"], "resource_spec_mode": "patch"}, "resource_spec_mode must be 'merge' or"),
    ],
)
def test_bad_arguments_are_refused_at_parse_time(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fleet_op(**arguments)


THREE_IDS = [
    "11111111-1111-4111-8111-111111111111",
    "22222222-2222-4222-8222-222222222222",
    "33333333-3333-4333-8333-333333333333",
]


@pytest.mark.parametrize(
    "targets",
    [{"deployment_ids": THREE_IDS}, {"deployment_ids": ",".join(THREE_IDS)}, {"deployment_names": ["a", "b", "c"]}],
)
def test_a_budget_larger_than_a_known_fleet_is_refused_at_parse_time(targets: dict[str, Any]) -> None:
    """Issue 33: ``max_failures=10`` for 3 deployments was accepted silently."""
    with pytest.raises(ValueError, match=r"max_failures \(10\) is larger than the fleet \(3 deployments\)"):
        fleet_op(max_failures=10, **targets)
    fleet_op(max_failures=3, **targets)  # the whole fleet: allowed
    fleet_op(max_failures=0.5, **targets)  # a fraction never exceeds the fleet
    fleet_op(max_failures=10, deployment_names="{{ params.names }}")  # known only when the task runs


def test_a_budget_larger_than_a_fleet_found_by_filters_is_refused_before_any_patch(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    task = fleet_op(filters={"name_contains": "app-"}, max_failures=10)
    with pytest.raises(AirflowFailException, match=r"max_failures \(10\) is larger than the fleet \(3 deployments\)"):
        task.execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 0
    for deployment_id in ids.values():
        assert len(revisions(emulator, deployment_id)) == 1


def test_an_analysis_interval_longer_than_the_bake_is_refused_at_parse_time() -> None:
    """Issue 33: one 20 s round for an 8 s bake was accepted (it measured past the bake)."""
    from airflow_provider.analysis import Analysis, TracingProjectCheck

    analysis = Analysis(checks=TracingProjectCheck(), interval_seconds=20)
    with pytest.raises(ValueError, match=r"analysis\.interval_seconds \(20 s\).*longer than the bake \(8 s\)"):
        fleet_op(deployment_names=["a"], analysis=analysis, bake_seconds=8)
    fleet_op(deployment_names=["a"], analysis=analysis, bake_seconds=20)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"deployment_ids": "not-a-uuid"}, "deployment_ids"),
        ({"filters": {"status": "ready"}}, "status"),
        ({"filters": '{"colour": "blue"}'}, "colour"),
        (
            {"deployment_names": "app-0000", "source_revision_config": {"repo_ref": "None"}, "repo_ref": None},
            "repo_ref",
        ),
    ],
)
def test_bad_rendered_values_fail_before_any_request(fleet: Any, arguments: dict[str, Any], message: str) -> None:
    emulator = fleet(2)
    with pytest.raises(AirflowFailException, match=message):
        fleet_op(**arguments).execute(make_context())
    assert emulator.state.counters == {}


def test_unknown_names_and_canary_fail_before_any_patch(fleet: Any) -> None:
    emulator = fleet(2)
    with pytest.raises(AirflowFailException, match="no deployment named app-9999"):
        fleet_op(deployment_names="app-0000,app-9999").execute(make_context())
    with pytest.raises(AirflowFailException, match="canary names deployments that are not among the targets: other"):
        fleet_op(deployment_names="app-0000,app-0001", canary=["other"]).execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 0


# ------------------------------------------------------------------------------------------ rollback
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_rollback_on_failure_restores_the_failing_wave(fleet: Any, deferrable: bool) -> None:
    emulator = fleet(5)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}

    def verify(deployment: Deployment) -> bool:
        return deployment.name != "app-0002"

    def make() -> FleetRolloutOperator:
        return fleet_op(
            deployment_names=sorted(ids),
            canary=1,
            wave_size=2,
            verify=verify,
            rollback_on_failure=True,
            deferrable=deferrable,
        )

    ti = FakeTI()
    with pytest.raises(AirflowFailException, match="app-0002") as raised:
        run_deferred(make, make_context(ti, FakeStore()))
    assert "2 deployment(s) in later waves were not patched" in str(raised.value)
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0000"]["outcome"] == Outcome.LANDED  # the canary's wave passed: it stays
    assert table["app-0001"]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE  # it passed verify
    assert table["app-0002"]["outcome"] == Outcome.ROLLED_BACK
    for name in ("app-0001", "app-0002"):  # wave 1 broke the budget: both restored
        deployment = emulator.state.deployment(ids[name])
        restored = next(rev for rev in deployment["revisions"] if rev["id"] == deployment["active_revision_id"])
        old = next(rev for rev in deployment["revisions"] if rev["id"] == before[name])
        assert restored["source_revision_config"]["repo_ref"] == old["source_revision_config"]["repo_ref"]
        assert deployment["status"] == "READY"
    assert table["app-0003"]["outcome"] == table["app-0004"]["outcome"] == Outcome.NOT_PATCHED


def restored_to(emulator: Any, deployment_id: str, revision_id: str) -> dict[str, Any]:
    """The deployment, asserting that it serves a redeploy of ``revision_id`` made by one patch and one
    rollback (three revisions: the seeded one, the patch's, the rollback's), active and latest."""
    deployment = emulator.state.deployment(deployment_id)
    assert len(deployment["revisions"]) == 3, deployment["revisions"]
    active = deployment["revisions"][-1]
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == active["id"]
    assert active["redeploy_of"] == revision_id and deployment["status"] == "READY"
    return dict(deployment)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_one_bad_of_four_is_one_failure_and_three_rolled_back_with_their_wave(
    fleet: Any, deferrable: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}

    def make() -> FleetRolloutOperator:
        return fleet_op(
            deployment_names=sorted(ids),
            verify=lambda deployment: deployment.name != "app-0002",
            rollback_on_failure=True,
            deferrable=deferrable,
        )

    ti = FakeTI()
    with pytest.raises(AirflowFailException) as raised:
        run_deferred(make, make_context(ti, FakeStore()))
    message = str(raised.value)
    assert "fleet rollout stopped: 1 deployment(s) failed, more than max_failures allows (0)" in message
    assert "Failed: app-0002 (verification failed" in message
    assert "3 deployment(s) that landed were rolled back with their wave (not failures): " in message
    assert "app-0000, app-0001, app-0003." in message
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0002"]["outcome"] == Outcome.ROLLED_BACK
    assert "verify returned False" in table["app-0002"]["message"] and "rolled back" in table["app-0002"]["message"]
    for name in ("app-0000", "app-0001", "app-0003"):
        assert table[name]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE, table[name]
        assert "rolled back with its wave (1 deployment(s) failed" in table[name]["message"]
    assert ti.xcoms["fleet_summary"] == {
        "counts": {"rolled_back": 1, "rolled_back_with_wave": 3},
        "failures": 1,
        "allowed_failures": 0,
        "stopped": "1 deployment(s) failed, more than max_failures allows (0)",
    }
    for name in ids:  # every one serves its previous build again, from one patch and one rollback
        restored_to(emulator, ids[name], before[name])
    logged = capfd.readouterr().out
    assert "wave 1 finished: 1 rolled_back, 3 rolled_back_with_wave; 1 failure(s) so far of 0 allowed" in logged
    shown = logged[logged.index("Fleet rollout summary") :]
    lines = [line for line in shown.splitlines() if line.startswith("app-")]
    assert [line.split()[0] for line in lines] == ["app-0002", "app-0000", "app-0001", "app-0003"]
    assert all("rolled back" in line for line in lines), lines


def test_a_failure_within_the_budget_is_rolled_back_alone_and_the_rollout_goes_on(fleet: Any) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()
    table = {
        row["name"]: row
        for row in fleet_op(
            deployment_names=sorted(ids),
            wave_size=2,
            max_failures=1,
            verify=lambda deployment: deployment.name != "app-0000",
            rollback_on_failure=True,
        ).execute(make_context(ti))
    }
    assert table["app-0000"]["outcome"] == Outcome.ROLLED_BACK
    restored_to(emulator, ids["app-0000"], before["app-0000"])
    for name in ("app-0001", "app-0002", "app-0003"):  # neither its wave nor the next was rolled back
        assert table[name]["outcome"] == Outcome.LANDED, table[name]
        deployment = emulator.state.deployment(ids[name])
        assert len(deployment["revisions"]) == 2
        assert deployment["active_revision_id"] == table[name]["to_revision"] == deployment["latest_revision_id"]
    assert ti.xcoms["fleet_summary"] == {
        "counts": {"landed": 3, "rolled_back": 1},
        "failures": 1,
        "allowed_failures": 1,
        "stopped": "",
    }


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_rollback_redeployed_without_a_new_revision_is_waited_for_until_the_old_revision_serves(
    fleet: Any, deferrable: bool
) -> None:
    emulator = fleet(2, redeploy_mode="in_place", build_seconds=0.5)  # a redeploy makes no revision
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()

    def make() -> FleetRolloutOperator:
        return fleet_op(
            deployment_names=sorted(ids),
            verify=lambda deployment: deployment.name != "app-0001",
            rollback_on_failure=True,
            max_failures=1,
            deferrable=deferrable,
        )

    table = {row["name"]: row for row in run_deferred(make, make_context(ti, FakeStore()))[0]}
    bad = table["app-0001"]
    assert bad["outcome"] == Outcome.ROLLED_BACK, bad
    deployment = emulator.state.deployment(ids["app-0001"])
    assert len(deployment["revisions"]) == 2, "the redeploy made no revision"
    assert deployment["latest_revision_id"] == bad["to_revision"]  # the bad one stays the latest...
    assert deployment["active_revision_id"] == before["app-0001"]  # ...and the old one serves again
    assert deployment["status"] == "READY"
    assert f"rolled back (revision {before['app-0001']} serves again (deployed again in place))" in bad["message"]
    assert table["app-0000"]["outcome"] == Outcome.LANDED


# ------------------------------------------------------------------------------------------ what a rollback restores
SPEC_BEFORE = {"cpu": 1.0, "memory_mb": 512, "min_scale": 1}
IMAGE = "registry.example.com/acme/app:1.0"


def docker_fleet(service: Callable[..., Any], count: int, **options: Any) -> Any:
    """``count`` external_docker deployments img-0000... serving IMAGE with SPEC_BEFORE and the secret TOKEN."""
    deployments = [
        {
            "name": f"img-{index:04d}",
            "source": "external_docker",
            "source_revision_config": {"image_uri": IMAGE},
            "source_config": {"resource_spec": dict(SPEC_BEFORE)},
            "secrets": [{"name": "TOKEN", "value": SECRET}],
        }
        for index in range(count)
    ]
    return service(data={"deployments": deployments}, **{**FAST, **options})


def shown_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    """The resource_spec a deployment shows, unset fields and the limits the service defaults left out."""
    spec = {name: value for name, value in (deployment["source_config"].get("resource_spec") or {}).items()}
    return {name: value for name, value in spec.items() if value is not None and "limit" not in name}


def fleet_events(context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{deployment_id: extra}`` of the asset events the task recorded."""
    found: dict[str, dict[str, Any]] = {}
    for accessor in context["outlet_events"]._dict.values():
        for event in accessor.asset_alias_events:
            found[event.dest_asset_key.uri.rsplit("/", 1)[1]] = dict(event.extra)
    return found


def events_context(ti: FakeTI) -> dict[str, Any]:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    context = make_context(ti)
    context["outlet_events"] = OutletEventAccessors()
    return context


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_resource_spec_only_change_is_rolled_back_whole_build_and_resource_spec(
    service: Callable[..., Any], deferrable: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    emulator = docker_fleet(service, 2)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name]) for name in ids}
    ti = FakeTI()
    context = events_context(ti)

    def make() -> FleetRolloutOperator:
        return fleet_op(
            repo_ref=None,
            deployment_names=sorted(ids),
            source_config={"resource_spec": {"cpu": 2.0, "memory_mb": 1024, "min_scale": 1}},
            verify=lambda deployment: deployment.name != "img-0001",
            rollback_on_failure=True,
            max_failures=1,
            deferrable=deferrable,
        )

    table = {row["name"]: row for row in run_deferred(make, context)[0]}
    bad, good = table["img-0001"], table["img-0000"]
    assert bad["outcome"] == Outcome.ROLLED_BACK, bad
    assert "rolled back (revision" in bad["message"] and "except" not in bad["message"]
    after = emulator.state.deployment(ids["img-0001"])
    assert len(after["revisions"]) == 3, "one patch, and one revision for the rollback (build and spec together)"
    assert after["active_revision_id"] == after["latest_revision_id"] == after["revisions"][-1]["id"]
    assert after["revisions"][-1]["source_revision_config"]["image_uri"] == IMAGE
    assert shown_spec(after) == shown_spec(before["img-0001"]) == SPEC_BEFORE
    landed = emulator.state.deployment(ids["img-0000"])
    assert good["outcome"] == Outcome.LANDED and landed["active_revision_id"] == good["to_revision"]
    assert shown_spec(landed) == {"cpu": 2.0, "memory_mb": 1024, "min_scale": 1}
    events = fleet_events(context)
    assert events[ids["img-0001"]]["outcome"] == "rolled_back" and events[ids["img-0001"]]["not_restored"] == []
    assert events[ids["img-0001"]]["revision_id"] == after["active_revision_id"]
    assert events[ids["img-0001"]]["previous_revision_id"] == bad["to_revision"]
    assert events[ids["img-0000"]]["outcome"] == "rolled_out"
    assert ti.xcoms["fleet_summary"]["counts"] == {"landed": 1, "rolled_back": 1}
    scan_for_secret(capfd.readouterr().out, ti.xcoms, events)


def test_a_secrets_only_change_rolled_back_names_the_secrets_it_could_not_restore(
    service: Callable[..., Any], capfd: pytest.CaptureFixture[str]
) -> None:
    new_value = "zq-New-S3cret-Value-9b1e77aa"
    emulator = docker_fleet(service, 2)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name]) for name in ids}
    ti = FakeTI()
    context = events_context(ti)
    table = {
        row["name"]: row
        for row in fleet_op(
            repo_ref=None,
            deployment_names=sorted(ids),
            secrets={"TOKEN": new_value},
            verify=lambda deployment: deployment.name != "img-0000",
            rollback_on_failure=True,
            max_failures=1,
        ).execute(context)
    }
    clause = "secrets TOKEN (a rollback cannot restore secret values: the deployment keeps the new ones)"
    bad = table["img-0000"]
    assert bad["outcome"] == Outcome.ROLLED_BACK, bad  # the previous build serves with its resource_spec
    assert bad["message"].endswith(f"'s build again) except: {clause}"), bad["message"]
    after = emulator.state.deployment(ids["img-0000"])
    assert len(after["revisions"]) == 3 and after["active_revision_id"] == after["revisions"][-1]["id"]
    assert after["revisions"][-1]["redeploy_of"] == before["img-0000"]["active_revision_id"]
    assert shown_spec(after) == SPEC_BEFORE
    event = fleet_events(context)[ids["img-0000"]]
    assert event["outcome"] == "rolled_back" and event["not_restored"] == [clause]
    logged = capfd.readouterr().out
    assert f"rolled back to {before['img-0000']['active_revision_id']}" in logged and clause in logged
    for text in (logged, json.dumps(ti.xcoms), json.dumps(event)):
        assert new_value not in text and SECRET not in text


def test_a_resource_spec_the_service_does_not_restore_is_rolled_back_partially(
    service: Callable[..., Any],
) -> None:
    emulator = docker_fleet(service, 1, resource_spec_mode="merge")  # fields merge: one the change added stays
    ids = ids_by_name(emulator)
    ti = FakeTI()
    context = events_context(ti)
    table = fleet_op(
        repo_ref=None,
        deployment_names=sorted(ids),
        image_uri="registry.example.com/acme/app:2.0",
        source_config={"resource_spec": {**SPEC_BEFORE, "max_scale": 4}},
        verify=lambda deployment: False,
        rollback_on_failure=True,
        max_failures=1,
    ).execute(context)
    row = table[0]
    assert row["outcome"] == Outcome.ROLLED_BACK_PARTIALLY, row
    assert (
        "rolled back (revision" in row["message"]
        and " except: resource_spec (sent whole, but the deployment" in (row["message"])
    )
    after = emulator.state.deployment(ids["img-0000"])
    assert len(after["revisions"]) == 3 and after["active_revision_id"] == after["revisions"][-1]["id"]
    assert after["revisions"][-1]["source_revision_config"]["image_uri"] == IMAGE  # the build is back...
    assert shown_spec(after) == {**SPEC_BEFORE, "max_scale": 4}  # ...the resource_spec is not
    event = fleet_events(context)[ids["img-0000"]]
    assert event["outcome"] == "rolled_back_partially" and event["not_restored"][0].startswith("resource_spec (sent")
    assert ti.xcoms["fleet_summary"] == {
        "counts": {"rolled_back_partially": 1},
        "failures": 1,
        "allowed_failures": 1,
        "stopped": "",
    }


# ------------------------------------------------------------------------------------------ resource_spec_mode
def sized_fleet(service: Callable[..., Any]) -> Any:
    """Three external_docker deployments, each with its own resource_spec (production echoes the limits)."""
    specs = {
        "img-0000": {"cpu": 1.0, "cpu_limit": 2.0, "memory_mb": 512, "memory_limit_mb": 1024, "min_scale": 1},
        "img-0001": {"cpu": 4.0, "cpu_limit": 8.0, "memory_mb": 1024, "memory_limit_mb": 2048, "max_scale": 6},
        "img-0002": {"cpu": 0.5, "cpu_limit": 1.0, "memory_mb": 256, "memory_limit_mb": 4096},
    }
    deployments = [
        {
            "name": name,
            "source": "external_docker",
            "source_revision_config": {"image_uri": IMAGE},
            "source_config": {"resource_spec": spec},
        }
        for name, spec in specs.items()
    ]
    return service(data={"deployments": deployments}, **FAST)


def test_a_partial_resource_spec_is_completed_per_deployment_from_its_own(
    service: Callable[..., Any], capfd: pytest.CaptureFixture[str]
) -> None:
    """Production replaces the whole resource_spec: ``{"memory_mb": 2048}`` sent as given would drop every
    deployment's cpu and scale settings. Merged per deployment (the default), each keeps its own; a kept
    memory limit below the new request is left out, so the service sets it to twice the request; one at or
    above it is kept."""
    emulator = sized_fleet(service)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name]) for name in ids}
    table = fleet_op(
        repo_ref=None, deployment_names=sorted(ids), source_config={"resource_spec": {"memory_mb": 2048}}
    ).execute(make_context())
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    for name in ids:
        spec = {
            key: value for key, value in before[name]["source_config"]["resource_spec"].items() if value is not None
        }
        after = emulator.state.deployment(ids[name])
        shown = {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None}
        kept_limit = spec["memory_limit_mb"] if spec["memory_limit_mb"] >= 2048 else 4096  # twice the request
        assert shown == {**spec, "memory_mb": 2048, "memory_limit_mb": kept_limit}, name
        assert len(after["revisions"]) == 2 and emulator.state.count(PATCH_ROUTE) == 3
    logged = capfd.readouterr().out
    assert "img-0001: sending the whole source_config.resource_spec (production replaces it): kept cpu" in logged
    assert "img-0000: not keeping memory_limit_mb=1024 (below the new memory_mb=2048)" in logged


def test_resource_spec_mode_replace_sends_the_resource_spec_as_given(service: Callable[..., Any]) -> None:
    emulator = sized_fleet(service)
    ids = ids_by_name(emulator)
    fleet_op(
        repo_ref=None,
        deployment_names=["img-0001"],
        source_config={"resource_spec": {"memory_mb": 2048}},
        resource_spec_mode="replace",
    ).execute(make_context())
    shown = emulator.state.deployment(ids["img-0001"])["source_config"]["resource_spec"]
    assert {key: value for key, value in shown.items() if value is not None} == {
        "memory_mb": 2048,
        "memory_limit_mb": 4096,
    }


def test_a_partial_resource_spec_change_rolled_back_restores_each_whole_previous_one(
    service: Callable[..., Any],
) -> None:
    emulator = sized_fleet(service)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name]) for name in ids}
    table = fleet_op(
        repo_ref=None,
        deployment_names=sorted(ids),
        source_config={"resource_spec": {"cpu": 2.0}},
        verify=lambda deployment: deployment.name != "img-0001",
        rollback_on_failure=True,
        max_failures=1,
    ).execute(make_context())
    rows = {row["name"]: row for row in table}
    assert rows["img-0001"]["outcome"] == Outcome.ROLLED_BACK, rows["img-0001"]
    after = emulator.state.deployment(ids["img-0001"])
    assert after["source_config"]["resource_spec"] == before["img-0001"]["source_config"]["resource_spec"]
    assert len(after["revisions"]) == 3 and after["active_revision_id"] == after["revisions"][-1]["id"]
    landed = emulator.state.deployment(ids["img-0002"])["source_config"]["resource_spec"]
    assert (landed["cpu"], landed["memory_mb"], landed["memory_limit_mb"]) == (2.0, 256, 4096)


def test_a_patch_production_refuses_for_one_deployment_fails_it_alone_and_sends_it_nothing(fleet: Any) -> None:
    """A resource_spec for a codehost deployment (external_docker only) is refused before any request, naming
    the field and the rule; the other deployments, whose patch production accepts, go on."""
    emulator = fleet(2)
    ids = ids_by_name(emulator)

    def patch_for(deployment: Deployment) -> dict[str, Any]:
        if deployment.name == "app-0001":
            return {"source_config": {"resource_spec": {"cpu": 2.0}}}
        return {}

    table = {
        row["name"]: row
        for row in fleet_op(deployment_names=sorted(ids), patch_for=patch_for, max_failures=1).execute(make_context())
    }
    refused = table["app-0001"]
    assert refused["outcome"] == Outcome.FAILED, refused
    assert "production refuses this (nothing was sent): source_config.resource_spec" in refused["message"]
    assert "external_docker deployments only" in refused["message"]
    assert patched_order(emulator) == [ids["app-0000"]], "a refused patch was sent"
    assert table["app-0000"]["outcome"] == Outcome.LANDED


def test_a_kept_resource_spec_value_a_request_cannot_carry_fails_that_deployment_naming_the_field(
    service: Callable[..., Any],
) -> None:
    """Given a limit below the request it keeps from the deployment, the patch is refused naming both fields."""
    emulator = sized_fleet(service)
    [row] = fleet_op(
        repo_ref=None,
        deployment_names=["img-0001"],
        source_config={"resource_spec": {"cpu_limit": 2.0}},
        max_failures=1,
    ).execute(make_context())
    assert row["outcome"] == Outcome.FAILED, row
    assert "source_config.resource_spec.cpu_limit=2 is below source_config.resource_spec.cpu=4" in row["message"]
    assert "(cpu kept from the deployment's current resource_spec)" in row["message"]
    assert emulator.state.count(PATCH_ROUTE) == 0


# ------------------------------------------------------------------------------------------ build logs
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_failed_build_in_a_wave_shows_its_build_log(
    fleet: Any, deferrable: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    emulator.state.fail_next_build(ids["app-0001"], "BUILD_FAILED", "compile error in agent.py line 12")
    emulator.state.fail_next_build(ids["app-0002"], "DEPLOY_FAILED", "pod crash loop")
    options = {"deployment_names": sorted(ids), "wave_size": 2, "max_failures": 2, "secrets": {"TOKEN": SECRET}}
    if deferrable:
        table, _triggers = run_deferred(lambda: fleet_op(deferrable=True, **options), make_context())
    else:
        table = fleet_op(**options).execute(make_context())
    rows = {row["name"]: row for row in table}
    assert [rows[name]["outcome"] for name in sorted(rows)] == ["landed", "failed", "failed", "landed"]
    out = capfd.readouterr().out
    revision = rows["app-0001"]["to_revision"]
    assert f"wave 1: the build of app-0001's revision {revision} failed" in out
    tail = out[out.index(f"line(s) of the build log of revision {revision}") :]
    assert "ERROR: compile error in agent.py line 12" in tail.split("\n\n")[0]
    assert out.count("line(s) of the build log of revision") == 1  # a failed deploy has no build log to show
    assert "app-0002" in out and "pod crash loop" in out
    scan_for_secret(out)


def test_build_logs_are_shown_for_at_most_five_failed_builds_per_wave(
    fleet: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    emulator = fleet(7)
    ids = ids_by_name(emulator)
    for name in ids:
        emulator.state.fail_next_build(ids[name], "BUILD_FAILED", f"broken {name}")
    table = fleet_op(deployment_names=sorted(ids), wave_size=7, max_failures=7).execute(make_context())
    assert {row["outcome"] for row in table} == {"failed"}
    out = capfd.readouterr().out
    assert out.count("line(s) of the build log of revision") == 5
    assert "wave 1: 2 more failed build(s), build logs not shown: app-0005, app-0006" in out
    assert emulator.state.count(LOGS_ROUTE) == 5


def test_a_rollback_interrupted_mid_wave_is_recorded_and_a_retry_watches_it_instead_of_refusing(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    store = FakeStore()
    redeploy = f"/v2/deployments/{ids['app-0001']}/revisions/*/redeploy"
    emulator.state.add_fault(
        FaultRule(kind="status", status_code=429, retry_after="0", method="POST", path=redeploy, count=None)
    )
    options = {
        "deployment_names": sorted(ids),
        "verify": lambda deployment: False,
        "rollback_on_failure": True,
        "max_failures": 3,
        "max_attempts": 2,
    }
    with pytest.raises(Exception, match="429"):
        fleet_op(**options).execute(make_context(FakeTI(try_number=1), store))
    rows = {row["name"]: row for row in store.data[f"{STATE_KEY}/wave/0"]["rows"]}
    assert rows["app-0000"]["rollback_revision"], "the rollback the service accepted was not recorded"
    emulator.state.clear_faults()
    ti = FakeTI(try_number=2)
    table = {row["name"]: row for row in fleet_op(**options).execute(make_context(ti, store))}
    for name in sorted(ids):
        assert table[name]["outcome"] == Outcome.ROLLED_BACK, table[name]
        assert "refused" not in table[name]["message"]
        deployment = emulator.state.deployment(ids[name])
        # one patch, one rollback: the first try's rollback of app-0000 was not sent again
        assert len(deployment["revisions"]) == 3, name
        restored = deployment["revisions"][-1]
        assert deployment["active_revision_id"] == restored["id"]
        assert restored["redeploy_of"] == before[name]


def test_a_rollback_the_service_refuses_fails_that_deployment_and_the_others_are_rolled_back(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    redeploy = f"/v2/deployments/{ids['app-0001']}/revisions/*/redeploy"
    emulator.state.add_fault(FaultRule(kind="status", status_code=409, method="POST", path=redeploy, count=None))
    options = {"deployment_names": sorted(ids), "verify": lambda deployment: False, "rollback_on_failure": True}
    ti = FakeTI()
    with pytest.raises(AirflowFailException):
        fleet_op(max_failures=0, **options).execute(make_context(ti))
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0001"]["outcome"] == Outcome.FAILED
    assert "the rollback could not be started" in table["app-0001"]["message"]
    assert "409" in table["app-0001"]["message"]
    assert table["app-0000"]["outcome"] == table["app-0002"]["outcome"] == Outcome.ROLLED_BACK


def test_a_landed_deployment_whose_rollback_with_its_wave_is_refused_stays_landed_not_failed(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    redeploy = f"/v2/deployments/{ids['app-0001']}/revisions/*/redeploy"
    emulator.state.add_fault(FaultRule(kind="status", status_code=409, method="POST", path=redeploy, count=None))
    ti = FakeTI()
    with pytest.raises(AirflowFailException, match=r"1 deployment\(s\) failed, more than max_failures allows"):
        fleet_op(
            deployment_names=sorted(ids),
            verify=lambda deployment: deployment.name != "app-0000",
            rollback_on_failure=True,
        ).execute(make_context(ti))
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    kept = table["app-0001"]
    assert kept["outcome"] == Outcome.LANDED, kept  # its new revision still serves: not a failure
    assert "rolling it back with its wave could not be started" in kept["message"] and "409" in kept["message"]
    deployment = emulator.state.deployment(ids["app-0001"])
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == kept["to_revision"]
    assert len(deployment["revisions"]) == 2
    assert table["app-0000"]["outcome"] == Outcome.ROLLED_BACK
    assert table["app-0002"]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE
    assert ti.xcoms["fleet_summary"]["failures"] == 1


def test_a_secret_in_a_verify_error_never_reaches_xcom_the_failure_nor_the_trigger(
    fleet: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)

    def verify(deployment: Deployment) -> bool:
        if deployment.name == "app-0002":
            return True
        raise RuntimeError(f"GET https://{deployment.name}.example.com/health?token={SECRET} answered 503")

    def make() -> FleetRolloutOperator:
        return fleet_op(
            deployment_names=sorted(ids),
            wave_size=1,
            max_failures=1,
            verify=verify,
            secrets={"TOKEN": SECRET},
            deferrable=True,
        )

    ti = FakeTI()
    triggers: list[Any] = []
    with pytest.raises(AirflowFailException) as raised:
        try:
            make().execute(make_context(ti))
        except TaskDeferred as deferred:
            pending = deferred
            while True:
                triggers.append(pending.trigger)
                event = run_trigger(FleetWaveTrigger(**pending.trigger.serialize()[1]))
                try:
                    getattr(make(), pending.method_name)(make_context(ti), event)
                    break
                except TaskDeferred as again:
                    pending = again
    message = str(raised.value)
    assert "verify raised RuntimeError" in message and "token=**********" in message
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0000"]["outcome"] == Outcome.FAILED and "token=**********" in table["app-0000"]["message"]
    carried = [trigger.serialize()[1] for trigger in triggers if trigger.carry]
    assert any("verify raised" in json.dumps(kwargs) for kwargs in carried), "no trigger carried the failure"
    scan_for_secret(message, ti.xcoms, *carried, capfd.readouterr().out)


def test_a_rollout_still_building_at_the_timeout_is_rolled_back_with_its_wave(fleet: Any) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    emulator.state.update_deployment_options(ids["app-0001"], build_seconds=4.0)  # outlives the 3 s timeout
    ti = FakeTI()
    task = fleet_op(deployment_names=sorted(ids), rollback_on_failure=True, timeout=3)
    with pytest.raises(AirflowFailException, match="app-0001"):
        task.execute(make_context(ti))
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    slow = table["app-0001"]
    assert slow["outcome"] == Outcome.ROLLED_BACK, slow
    assert slow["message"].startswith("timed out") and "rolled back" in slow["message"]
    for name in ("app-0000", "app-0002"):  # they landed: rolled back with the wave, not failures
        assert table[name]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE, table[name]
    for name in sorted(ids):  # the whole wave, the slow one included, serves its old build again
        deployment = emulator.state.deployment(ids[name])
        active = next(rev for rev in deployment["revisions"] if rev["id"] == deployment["active_revision_id"])
        assert active["redeploy_of"] == before[name], name
        assert deployment["latest_revision_id"] == active["id"], "a revision went live after the rollback"


def test_a_rollout_still_building_at_the_timeout_says_it_may_yet_go_live(fleet: Any) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    emulator.state.update_deployment_options(ids["app-0001"], build_seconds=3.0)
    table = {
        row["name"]: row
        for row in fleet_op(deployment_names=sorted(ids), max_failures=1, timeout=1).execute(make_context())
    }
    assert table["app-0001"]["outcome"] == Outcome.FAILED
    assert "timed out" in table["app-0001"]["message"]
    assert "still rolling out when the task stopped watching it" in table["app-0001"]["message"]
