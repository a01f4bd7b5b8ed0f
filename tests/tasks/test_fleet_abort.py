"""Aborting a running FleetRolloutOperator from the Rollouts view (issue 32): the view writes an abort request in
the task's ``task_state_store``; the task takes it before its next phase, records what it takes it to mean before
acting, and ends failed "aborted by <user> from the Rollouts view". Each test checks what the emulator serves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.tasks import rollback as rollback_module
from airflow_provider.tasks.fleet import rollback as fleet_rollback
from airflow_provider.tasks.fleet.abort import ABORT_KEY, TAKEN_KEY, AbortRequest
from airflow_provider.tasks.fleet.progress import STATE_KEY
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, run_deferred
from tests.tasks.test_fleet_retries import (
    REDEPLOY_ROUTE,
    WorkerDied,
    assert_restored,
    context_for,
    ids_by_name,
    operator,
    released,
    requests_to,
)
from tests.tasks.test_patch_notify import RecordingNotifier

FAST = {"frozen_clock": False, "build_seconds": 0.2, "ready_seconds": 0.05}


@pytest.fixture
def fleet(service: Callable[..., Any]) -> Any:
    """Four deployments app-0000..app-0003 serving ``v1``: a canary of one, then waves of one."""
    return service(data=released(4), **FAST)


def request(mode: str, *, include_earlier: bool = False, request_id: str = "req-00000001") -> dict[str, Any]:
    return AbortRequest(
        request_id=request_id,
        mode=mode,
        include_earlier=include_earlier,
        requested_by="alice",
        requested_at=datetime.now(timezone.utc).isoformat(),
    ).to_json()


def abort_at(store: FakeStore, name: str, value: dict[str, Any]) -> Callable[[Any], bool]:
    """A ``verify`` that passes every deployment and records the abort request (as the view does) when it verifies
    ``name``: the abort arrives while that deployment's wave is in flight."""

    def verify(deployment: Any) -> bool:
        if deployment.name == name:
            store.set(ABORT_KEY, value)
        return True

    return verify


def fleet_task(ids: dict[str, str], verify: Callable[[Any], bool], **extra: Any) -> Any:
    return operator(ids, verify=verify, canary=1, wave_size=1, max_failures=0, **extra)


def serving(emulator: Any, deployment_id: str) -> str:
    deployment = emulator.state.deployment(deployment_id)
    active = next(rev for rev in deployment["revisions"] if rev["id"] == deployment["active_revision_id"])
    return str(active["source_revision_config"]["repo_ref"])


def assert_untouched(emulator: Any, deployment_id: str) -> None:
    deployment = emulator.state.deployment(deployment_id)
    assert len(deployment["revisions"]) == 1 and requests_to(emulator, PATCH_ROUTE, deployment_id) == 0


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_stop_patches_nothing_more_and_lets_the_wave_in_flight_land(fleet: Any, deferrable: bool) -> None:
    ids = ids_by_name(fleet)
    store = FakeStore()
    context = context_for(1, store, datetime.now(timezone.utc))
    notifier = RecordingNotifier()
    task = lambda: fleet_task(  # noqa: E731
        ids, abort_at(store, "app-0001", request("stop")), deferrable=deferrable, notify={"fleet_aborted": notifier}
    )
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view") as failure:
        run_deferred(task, context)
    assert "no deployment patched after it" in str(failure.value)
    for name in ("app-0000", "app-0001"):  # the canary and the wave in flight landed, judged as usual
        assert serving(fleet, ids[name]) == "v2"
        assert requests_to(fleet, REDEPLOY_ROUTE, ids[name]) == 0
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])
    table = {row["name"]: row for row in context["ti"].xcoms["return_value"]}
    assert [table[name]["outcome"] for name in sorted(ids)] == ["landed", "landed", "not_patched", "not_patched"]
    taken = store.data[TAKEN_KEY]
    assert taken["request_id"] == "req-00000001" and taken["rollback_waves"] == []
    assert store.data[STATE_KEY]["stopped"].startswith("aborted by alice from the Rollouts view")
    ((_text, sent),) = notifier.sent
    assert sent["event"] == "fleet_aborted" and sent["aborted_by"] == "alice" and "Aborted by: alice" in sent["message"]


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_rollback_rolls_the_current_wave_back_and_leaves_the_canary(fleet: Any, deferrable: bool) -> None:
    ids = ids_by_name(fleet)
    before = {name: fleet.state.deployment(ids[name])["active_revision_id"] for name in ids}
    store = FakeStore()
    context = context_for(1, store, datetime.now(timezone.utc))
    task = lambda: fleet_task(ids, abort_at(store, "app-0001", request("rollback")), deferrable=deferrable)  # noqa: E731
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        run_deferred(task, context)
    assert serving(fleet, ids["app-0000"]) == "v2"  # the canary stays
    assert_restored(fleet, ids["app-0001"], before["app-0001"])
    assert requests_to(fleet, REDEPLOY_ROUTE, ids["app-0001"]) == 1
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])
    table = {row["name"]: row["outcome"] for row in context["ti"].xcoms["return_value"]}
    assert table == {
        "app-0000": "landed",
        "app-0001": Outcome.ROLLED_BACK_WITH_WAVE,
        "app-0002": "not_patched",
        "app-0003": "not_patched",
    }
    assert store.data[TAKEN_KEY]["rollback_waves"] == [1]


def test_rollback_with_earlier_waves_leaves_no_deployment_on_the_new_revision(fleet: Any) -> None:
    ids = ids_by_name(fleet)
    before = {name: fleet.state.deployment(ids[name])["active_revision_id"] for name in ids}
    store = FakeStore()
    context = context_for(1, store, datetime.now(timezone.utc))
    verify = abort_at(store, "app-0002", request("rollback", include_earlier=True))
    with pytest.raises(AirflowFailException, match="the current wave and every earlier one rolled back"):
        fleet_task(ids, verify).execute(context)
    for name in ("app-0000", "app-0001", "app-0002"):
        assert_restored(fleet, ids[name], before[name])
        assert requests_to(fleet, REDEPLOY_ROUTE, ids[name]) == 1
    assert_untouched(fleet, ids["app-0003"])
    assert store.data[TAKEN_KEY]["rollback_waves"] == [0, 1, 2]


@pytest.fixture
def die_after_rollback_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    real = rollback_module.start_rollback
    armed: dict[str, str] = {}

    def start_rollback(hook: Any, deployment: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(hook, deployment, *args, **kwargs)
        if armed.pop(deployment.name, None):
            raise WorkerDied(f"after the rollback of {deployment.name}")
        return result

    monkeypatch.setattr(fleet_rollback, "start_rollback", start_rollback)

    def arm(name: str) -> None:
        armed[name] = name

    yield arm


def test_a_retry_after_the_worker_died_mid_abort_finishes_it_without_sending_anything_twice(
    fleet: Any, die_after_rollback_of: Callable[[str], None]
) -> None:
    ids = ids_by_name(fleet)
    before = {name: fleet.state.deployment(ids[name])["active_revision_id"] for name in ids}
    store, started = FakeStore(), datetime.now(timezone.utc)
    verify = abort_at(store, "app-0001", request("rollback", include_earlier=True))
    die_after_rollback_of("app-0000")
    with pytest.raises(WorkerDied):
        fleet_task(ids, verify).execute(context_for(1, store, started))
    store.data.pop(ABORT_KEY)  # the retry goes on from what the first try took, not from the request
    context = context_for(2, store, started)
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        fleet_task(ids, lambda deployment: True).execute(context)
    for name in ("app-0000", "app-0001"):
        assert_restored(fleet, ids[name], before[name])
        assert requests_to(fleet, PATCH_ROUTE, ids[name]) == 1
        assert requests_to(fleet, REDEPLOY_ROUTE, ids[name]) == 1, f"{name} was rolled back twice"
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])


def test_a_retry_honours_an_abort_requested_while_no_try_ran(fleet: Any) -> None:
    """The first try failed after the canary; the abort was asked for before the retry started."""
    ids = ids_by_name(fleet)
    store, started = FakeStore(), datetime.now(timezone.utc)

    def verify(deployment: Any) -> bool:
        if deployment.name == "app-0001":
            raise WorkerDied("the worker died while wave 1 was verified")
        return True

    with pytest.raises(WorkerDied):
        fleet_task(ids, verify).execute(context_for(1, store, started))
    store.set(ABORT_KEY, request("stop"))
    with pytest.raises(AirflowFailException, match="aborted by alice"):
        fleet_task(ids, lambda deployment: True).execute(context_for(2, store, started))
    assert serving(fleet, ids["app-0001"]) == "v2"
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])


def test_an_abort_requested_before_the_task_ran_patches_nothing(fleet: Any) -> None:
    ids = ids_by_name(fleet)
    store = FakeStore()
    store.set(ABORT_KEY, request("rollback", include_earlier=True))
    with pytest.raises(AirflowFailException, match="aborted by alice"):
        fleet_task(ids, lambda deployment: True).execute(context_for(1, store, datetime.now(timezone.utc)))
    for name in ids:
        assert_untouched(fleet, ids[name])


def test_a_malformed_request_is_not_an_abort(fleet: Any) -> None:
    ids = ids_by_name(fleet)
    store = FakeStore()
    store.set(ABORT_KEY, {"mode": "explode", "requested_by": "mallory", "request_id": "x"})
    table = fleet_task(ids, lambda deployment: True).execute(context_for(1, store, datetime.now(timezone.utc)))
    assert {row["outcome"] for row in table} == {"landed"}
    assert TAKEN_KEY not in store.data


def test_a_clear_after_an_abort_ends_at_once_sending_nothing_and_says_how_to_roll_out_again(fleet: Any) -> None:
    """Issue 40: the abort belongs to the DAG run's rollout. The try that carried it out records that it ended it;
    a clear (a later try) fails at once, before any request, saying that a new DAG run rolls the change out."""
    ids = ids_by_name(fleet)
    store = FakeStore()
    started = datetime.now(timezone.utc)
    with pytest.raises(AirflowFailException, match="aborted by alice"):
        fleet_task(ids, abort_at(store, "app-0001", request("stop"))).execute(context_for(1, store, started))
    assert store.data[TAKEN_KEY]["ended_try"] == 1
    requests_before = len(fleet.state.request_log)
    progress_before = store.data[STATE_KEY]
    with pytest.raises(AirflowFailException) as cleared:
        fleet_task(ids, abort_at(store, "app-0003", request("stop"))).execute(context_for(2, store, started))
    said = str(cleared.value)
    assert "aborted by alice from the Rollouts view" in said and "which ended try 1" in said
    assert "A clear does not lift an abort" in said and "trigger a new DAG run" in said
    assert len(fleet.state.request_log) == requests_before  # not one request: nothing read, nothing sent
    assert store.data[STATE_KEY] == progress_before and store.data[TAKEN_KEY]["ended_try"] == 1
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])


def test_a_retry_of_a_try_that_had_not_finished_the_abort_carries_it_out(fleet: Any) -> None:
    """A try that took the abort and died before it ended (no ``ended_try``) is retried as usual: the retry goes on
    with the abort, is not refused as a clear, and records that it ended it."""
    ids = ids_by_name(fleet)
    store = FakeStore()
    started = datetime.now(timezone.utc)
    with pytest.raises(AirflowFailException, match="aborted by alice"):
        fleet_task(ids, abort_at(store, "app-0001", request("stop"))).execute(context_for(1, store, started))
    store.data[TAKEN_KEY]["ended_try"] = None  # as if the worker died after taking it, before failing
    with pytest.raises(AirflowFailException) as retried:
        fleet_task(ids, lambda deployment: True).execute(context_for(2, store, started))
    assert "aborted by alice from the Rollouts view" in str(retried.value)
    assert "A clear does not lift an abort" not in str(retried.value)
    assert store.data[TAKEN_KEY]["ended_try"] == 2
    for name in ("app-0002", "app-0003"):
        assert_untouched(fleet, ids[name])
