"""FleetRolloutOperator killed at its crash points, then retried as Airflow retries it: a fresh operator with
the same task state store, and again with none (Airflow before 3.3). Each retry must end true: at most one
revision per deployment per intended change (the patch, the rollback), and the table's outcome for each
deployment matches what the emulator serves."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.decisions.fleet_progress import REASON_UNKNOWN, Outcome
from airflow_provider.emulator import FaultRule
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.tasks import rollback as rollback_module
from airflow_provider.tasks.fleet import patching as fleet_patching
from airflow_provider.tasks.fleet import rollback as fleet_rollback
from airflow_provider.tasks.fleet import watching as fleet_watching
from airflow_provider.tasks.fleet.progress import STATE_KEY
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, FakeTI, run_deferred, run_trigger, seed

REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
FAST = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1}


class WorkerDied(BaseException):
    """The worker process died here (not an ``Exception``: nothing in the task may catch it)."""


@pytest.fixture
def fleet(service: Callable[..., Any]) -> Callable[..., Any]:
    """A real-time emulator (builds take 0.3 s) seeded with ``count`` codehost deployments app-0000..."""

    def start(count: int, **options: Any) -> Any:
        return service(data=released(count), **{**FAST, **options})

    return start


@pytest.fixture
def die_at_rollback(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], list[str]]]:
    """Kill the worker around the rollback of one deployment: ``("after", name)`` once the service accepted
    the request (before the task records it), ``("before", name)`` just before it is sent. Returns the
    names rolled back through the real ``start_rollback``, in order."""
    real = rollback_module.start_rollback
    started: list[str] = []

    def arm(when: str, name: str) -> list[str]:
        armed = {"left": 1}

        def start_rollback(hook: Any, deployment: Any, *args: Any, **kwargs: Any) -> Any:
            if deployment.name == name and armed["left"] and when == "before":
                armed["left"] = 0
                raise WorkerDied(f"before the rollback of {name}")
            result = real(hook, deployment, *args, **kwargs)
            started.append(deployment.name)
            if deployment.name == name and armed["left"]:
                armed["left"] = 0
                raise WorkerDied(f"after the rollback of {name}")
            return result

        # Where the fleet finds it (its rollback module), and where the rollback task does (the rollback module).
        monkeypatch.setattr(fleet_rollback, "start_rollback", start_rollback)
        monkeypatch.setattr(rollback_module, "start_rollback", start_rollback)
        return started

    yield arm


def released(count: int) -> dict[str, Any]:
    """``count`` codehost deployments app-0000... serving the tag ``v1`` (a revision a rollback can be
    recognised by: its config)."""
    return seed(count, source_revision_config={"repo_ref": "refs/tags/v1"})


def ids_by_name(emulator: Any) -> dict[str, str]:
    return {item["name"]: item["id"] for item in emulator.state.snapshot()["deployments"]}


def context_for(try_number: int, store: FakeStore | None, run_started: datetime) -> dict[str, Any]:
    """A task context for one try of the same DAG run."""
    context: dict[str, Any] = {
        "ti": FakeTI(try_number=try_number),
        "dag_run": SimpleNamespace(start_date=run_started),
    }
    if store is not None:
        context["task_state_store"] = store
    return context


def requests_to(emulator: Any, route: str, deployment_id: str) -> int:
    return sum(
        1
        for record in emulator.state.request_log
        if record.route == route and record.status_code == 200 and f"/deployments/{deployment_id}" in record.path
    )


def assert_restored(emulator: Any, deployment_id: str, revision_id: str) -> None:
    """One patch and one rollback: three revisions, the newest a redeploy of ``revision_id``, serving."""
    deployment = emulator.state.deployment(deployment_id)
    revisions = deployment["revisions"]
    assert len(revisions) == 3, [(rev["id"], rev["source_revision_config"]["repo_ref"]) for rev in revisions]
    assert revisions[-1]["redeploy_of"] == revision_id, revisions[-1]
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == revisions[-1]["id"]
    assert deployment["status"] == "READY"


def wait_settled(emulator: Any, deployment_id: str, timeout: float = 10) -> None:
    """Wait until the deployment's latest revision is active and it is READY (bounded; says what it saw)."""
    deadline = time.monotonic() + timeout
    while True:
        deployment = emulator.state.deployment(deployment_id)
        settled = deployment["active_revision_id"] == deployment["latest_revision_id"]
        if settled and deployment["status"] == "READY":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled in {timeout} s: {deployment['status']}, {deployment['revisions'][-1]}")
        time.sleep(0.02)


def operator(ids: dict[str, str], **extra: Any) -> FleetRolloutOperator:
    options: dict[str, Any] = {
        "task_id": "fleet",
        "deployment_names": sorted(ids),
        "repo_ref": "v2",
        "verify": lambda deployment: False,
        "rollback_on_failure": True,
        "max_failures": min(3, len(ids)),  # the whole fleet may fail: the budget never stops these rollouts
        "poll_interval": 0.1,
        "timeout": 30,
        **extra,
    }
    return FleetRolloutOperator(**options)


# ------------------------------------------------------------------------------------------ item 5
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no-store"])
def test_a_worker_dying_after_a_rollback_was_sent_is_reattached_to_never_sent_again(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]], with_store: bool, deferrable: bool
) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started = datetime.now(timezone.utc)
    store = FakeStore() if with_store else None
    started = die_at_rollback("after", "app-0001")
    with pytest.raises(WorkerDied):
        run_deferred(lambda: operator(ids, deferrable=deferrable), context_for(1, store, run_started))
    assert started == ["app-0000", "app-0001"]
    if store is not None:  # recorded before any request: every rollback of the wave is about to be sent...
        rows = {row["name"]: row for row in store.data[f"{STATE_KEY}/wave/0"]["rows"]}
        assert all(rows[name]["rollback_requested_after"] for name in ids)
        assert all(rows[name]["rollback_revision"] is None for name in ids)
        # ...then each in its own key: app-0000's as sent, app-0001's as about to be sent (the worker died)
        records = {name: store.data.get(f"{STATE_KEY}/wave/0/rollback/{ids[name]}") for name in ids}
        assert records["app-0000"]["phase"] == "sent" and records["app-0001"]["phase"] == "sending"
        assert records["app-0002"] is None
    context = context_for(2, store, run_started)
    table, _ = run_deferred(lambda: operator(ids, deferrable=deferrable), context)
    rows = {row["name"]: row for row in table}
    # Without a store, the retry finds the rollbacks try 1 sent but cannot know why they were sent: it says so.
    found_rolled_back = set() if with_store else {"app-0000", "app-0001"}
    for name in sorted(ids):
        outcome = Outcome.ROLLED_BACK_REASON_UNKNOWN if name in found_rolled_back else Outcome.ROLLED_BACK
        assert rows[name]["outcome"] == outcome, rows[name]
        assert "refused" not in rows[name]["message"] and "cannot" not in rows[name]["message"]
        assert_restored(emulator, ids[name], before[name])
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1, f"{name} was patched again"
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1, f"{name} was rolled back twice"
    counts = {"rolled_back": 3} if with_store else {"rolled_back": 1, "rolled_back_reason_unknown": 2}
    assert context["ti"].xcoms["fleet_summary"]["counts"] == counts


def test_a_worker_dying_just_before_a_rollback_request_sends_it_on_retry(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]]
) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started, store = datetime.now(timezone.utc), FakeStore()
    die_at_rollback("before", "app-0001")
    with pytest.raises(WorkerDied):
        operator(ids).execute(context_for(1, store, run_started))
    rows = {row["name"]: row for row in store.data[f"{STATE_KEY}/wave/0"]["rows"]}
    assert rows["app-0001"]["rollback_requested_after"] and requests_to(emulator, REDEPLOY_ROUTE, ids["app-0001"]) == 0
    table = {row["name"]: row for row in operator(ids).execute(context_for(2, store, run_started))}
    for name in sorted(ids):
        assert table[name]["outcome"] == Outcome.ROLLED_BACK, table[name]
        assert_restored(emulator, ids[name], before[name])
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1


@pytest.mark.parametrize("died", ["after-the-request", "before-the-request", "request-failed"])
def test_a_rollback_overtaken_by_someone_else_before_the_retry_is_never_sent_again_nor_claimed(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]], died: str
) -> None:
    emulator = fleet(1)
    ids = ids_by_name(emulator)
    run_started, store = datetime.now(timezone.utc), FakeStore()
    if died == "request-failed":  # recorded as about to be sent; the request fails through every retry
        emulator.state.add_fault(
            FaultRule(kind="status", status_code=503, method="POST", path="/v2/deployments/*/redeploy", count=5)
        )
        with pytest.raises(DeploymentServiceError, match="503"):
            operator(ids, max_attempts=1).execute(context_for(1, store, run_started))
        emulator.state.clear_faults()
    else:
        die_at_rollback(died.split("-")[0], "app-0000")
        with pytest.raises(WorkerDied):
            operator(ids).execute(context_for(1, store, run_started))
    sent = requests_to(emulator, REDEPLOY_ROUTE, ids["app-0000"])
    assert sent == (1 if died == "after-the-request" else 0)
    # Before the retry someone else rolls out a hotfix (once what was sent is live): the latest revision is not
    # the rollback, and the hotfix serves.
    wait_settled(emulator, ids["app-0000"])
    hotfix = emulator.state.patch_deployment(ids["app-0000"], {"source_revision_config": {"repo_ref": "hotfix"}})
    wait_settled(emulator, ids["app-0000"])
    assert emulator.state.deployment(ids["app-0000"])["active_revision_id"] == hotfix["latest_revision_id"]
    revisions = len(emulator.state.deployment(ids["app-0000"])["revisions"])
    ti_context = context_for(2, store, run_started)
    row = operator(ids).execute(ti_context)[0]
    assert row["outcome"] == Outcome.FAILED, row
    if died == "after-the-request":  # the rollback's revision is found (the first after the patch's), superseded
        assert "the rollback failed too" in row["message"] and "superseded" in row["message"]
    elif died == "before-the-request":  # nothing was recorded nor sent: the hotfix is someone else's, truly
        assert "the rollback was refused" in row["message"] and "someone rolled out meanwhile" in row["message"]
    else:  # recorded as about to be sent, and the first revision after the patch's is someone else's
        assert "the rollback could not be confirmed" in row["message"]
        assert "Not sending it again" in row["message"] and "not claiming a rollback" in row["message"]
    assert requests_to(emulator, REDEPLOY_ROUTE, ids["app-0000"]) == sent, "the rollback was sent again"
    assert requests_to(emulator, PATCH_ROUTE, ids["app-0000"]) == 1
    deployment = emulator.state.deployment(ids["app-0000"])
    assert len(deployment["revisions"]) == revisions
    assert deployment["source_revision_config"]["repo_ref"] == "hotfix"
    assert ti_context["ti"].xcoms["fleet_summary"]["counts"] == {"failed": 1}


@pytest.mark.parametrize(
    "disabled", [["list_revisions", "get_revision"], []], ids=["no-revision-endpoints", "revision-endpoints"]
)
def test_a_retry_without_a_record_never_patches_again_what_an_earlier_try_rolled_back(
    service: Callable[..., Any], die_at_rollback: Callable[[str, str], list[str]], disabled: list[str]
) -> None:
    emulator = service(data=released(3), disabled_endpoints=disabled, **FAST)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started = datetime.now(timezone.utc)
    die_at_rollback("after", "app-0001")  # wave 1's rollbacks were sent; the task's record died with it
    with pytest.raises(WorkerDied):
        operator(ids, wave_size=2).execute(context_for(1, None, run_started))
    assert requests_to(emulator, PATCH_ROUTE, ids["app-0002"]) == 0  # wave 2 was never reached
    ti_context = context_for(2, None, run_started)
    try:
        table = operator(ids, wave_size=2).execute(ti_context)
    except AirflowFailException:
        table = ti_context["ti"].xcoms["return_value"]
    rows = {row["name"]: row for row in table}
    for name in sorted(ids):
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1, f"{name} was patched again (or never)"
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1, f"{name} was rolled back twice (or never)"
    for name in ("app-0000", "app-0001"):
        if disabled:  # nothing says what happened: it fails, saying so, and nothing is sent
            assert rows[name]["outcome"] == Outcome.FAILED, rows[name]
            assert "cannot tell whether an earlier try patched it and rolled it back" in rows[name]["message"]
            deployment = emulator.state.deployment(ids[name])
            assert len(deployment["revisions"]) == 3
            assert deployment["revisions"][-1]["redeploy_of"] == before[name]
        else:  # found rolled back; why (verify, the bake, its wave) was not recorded: said so, not "failed"
            assert rows[name]["outcome"] == Outcome.ROLLED_BACK_REASON_UNKNOWN, rows[name]
            assert rows[name]["message"].startswith(REASON_UNKNOWN), rows[name]["message"]
            assert rows[name]["from_revision"] == before[name]
            assert_restored(emulator, ids[name], before[name])
    # Untouched during the run: patched (once) by the retry whatever the service can say, then rolled back.
    assert rows["app-0002"]["outcome"] == Outcome.ROLLED_BACK, rows["app-0002"]
    assert_restored(emulator, ids["app-0002"], before["app-0002"])


class DiesAtThePatchRecord(FakeStore):
    """A task state store whose first write of a patched row kills the worker: the PATCH reached the
    service, its record did not reach the store."""

    def set(self, key: str, value: Any) -> None:
        if any(row.get("started_at") for row in value.get("rows", [])) and not getattr(self, "died", False):
            self.died = True
            raise WorkerDied("between the PATCH and its record")
        super().set(key, value)


def test_a_patch_whose_record_died_is_reattached_and_its_rollback_restores_the_recorded_resource_spec(
    service: Callable[..., Any],
) -> None:
    spec_before = {"cpu": 1.0, "memory_mb": 512}
    deployment = {
        "name": "img-0000",
        "source": "external_docker",
        "source_revision_config": {"image_uri": "registry.example.com/acme/app:1.0"},
        "source_config": {"resource_spec": spec_before},
    }
    emulator = service(data={"deployments": [deployment]}, **FAST)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["img-0000"])
    store, run_started = DiesAtThePatchRecord(), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(
            ids,
            repo_ref=None,
            image_uri="registry.example.com/acme/app:2.0",
            source_config={"resource_spec": {"cpu": 2.0, "memory_mb": 1024}},
        )

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, store, run_started))
    [row] = store.data[f"{STATE_KEY}/wave/0"]["rows"]
    assert row["started_at"] is None and row["previous_resource_spec"] == spec_before  # recorded before the PATCH
    assert requests_to(emulator, PATCH_ROUTE, ids["img-0000"]) == 1
    ti_context = context_for(2, store, run_started)
    [row] = make().execute(ti_context)
    assert row["outcome"] == Outcome.ROLLED_BACK, row  # not partially: the resource_spec was known
    after = emulator.state.deployment(ids["img-0000"])
    assert requests_to(emulator, PATCH_ROUTE, ids["img-0000"]) == 2  # the patch, and the rollback (build + spec)
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert after["active_revision_id"] == after["latest_revision_id"] == after["revisions"][-1]["id"]
    assert after["revisions"][-1]["source_revision_config"]["image_uri"] == "registry.example.com/acme/app:1.0"
    shown = {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None}
    assert {key: value for key, value in shown.items() if "limit" not in key} == spec_before


# ------------------------------------------------------------------------------------------ item 1: resumes
def first_deferral(task: FleetRolloutOperator, context: dict[str, Any]) -> Any:
    """Run the task until it defers; the ``TaskDeferred`` it raised."""
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context)
    return deferred.value


def resume(task: FleetRolloutOperator, context: dict[str, Any], deferred: Any, event: dict[str, Any]) -> Any:
    """Resume as ``dag.test()`` in Airflow 3.3 does: the method named by ``defer()``, given the event only."""
    assert deferred.kwargs is None, "the fleet must not rely on defer kwargs"
    return getattr(task, deferred.method_name)(context, event)


class BrokenAfterPatchStore(FakeStore):
    """A task state store whose writes fail once a patch is to be recorded (the API server is unreachable):
    it keeps the plan only."""

    def set(self, key: str, value: Any) -> None:
        if any(row.get("started_at") for row in value.get("rows", [])):
            raise ConnectionError("task_state_store is unreachable")
        super().set(key, value)


@pytest.mark.parametrize("event_only", [True, False], ids=["dag.test-event-only", "triggerer-kwargs"])
def test_a_store_that_fell_behind_never_makes_a_resume_patch_again(fleet: Any, event_only: bool) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    store = BrokenAfterPatchStore()
    run_started = datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(ids, verify=None, rollback_on_failure=False, deferrable=True)

    context = context_for(1, store, run_started)
    table, triggers = run_bounded(make, context, event_only=event_only)
    assert all(trigger.carry for trigger in triggers), "a deferral after a failed save must carry the progress"
    for name in sorted(ids):
        deployment = emulator.state.deployment(ids[name])
        assert len(deployment["revisions"]) == 2, f"{name} was patched again on resume"
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1
    assert {row["outcome"] for row in table} == {Outcome.LANDED}


def test_a_resume_whose_progress_shows_the_wave_unpatched_fails_and_the_retry_reattaches(fleet: Any) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    store, run_started = FakeStore(), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(ids, verify=None, rollback_on_failure=False, deferrable=True)

    planned: dict[str, Any] = {}
    original_set = store.set

    def keep_the_plan(key: str, value: Any) -> None:  # what the store held before the patches
        if key not in planned:
            planned[key] = value
        original_set(key, value)

    store.set = keep_the_plan  # type: ignore[method-assign]
    deferred = first_deferral(make(), context_for(1, store, run_started))
    event = run_trigger_payload(deferred)
    store.data.update(planned)  # the store lost every write after the plan (restored from a backup, say)
    with pytest.raises(AirflowException, match="shows it not patched"):
        resume(make(), context_for(1, store, run_started), deferred, event)
    assert emulator.state.count(PATCH_ROUTE) == 2, "the resume patched again"
    table, _ = run_deferred(make, context_for(2, store, run_started))  # Airflow's retry
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    for name in sorted(ids):
        assert len(emulator.state.deployment(ids[name])["revisions"]) == 2
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1


def test_a_resume_whose_event_leaves_a_rollout_undecided_watches_it_again_never_succeeds_early(fleet: Any) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    context = context_for(1, None, datetime.now(timezone.utc))

    def make() -> FleetRolloutOperator:
        return operator(ids, rollback_on_failure=False, verify=lambda deployment: True, deferrable=True)

    deferred = first_deferral(make(), context)
    event = run_trigger_payload(deferred)
    event["outcomes"].pop(ids["app-0001"])  # an event that decided only one of the wave's two rollouts
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as again:  # not "done": the undecided one is watched again
        resume(make(), context, deferred, event)
    assert [item[0] for item in again.value.trigger.rollouts] == [ids["app-0001"]]
    table = resume(make(), context, again.value, run_trigger_payload(again.value))
    assert {row["outcome"] for row in table} == {Outcome.LANDED}
    for name in sorted(ids):
        deployment = emulator.state.deployment(ids[name])
        assert (
            len(deployment["revisions"]) == 2 and deployment["active_revision_id"] == deployment["revisions"][-1]["id"]
        )


def test_a_resume_with_neither_a_store_record_nor_a_carry_fails_loudly(fleet: Any) -> None:
    emulator = fleet(1)
    ids = ids_by_name(emulator)
    store, run_started = FakeStore(), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(ids, deferrable=True)

    deferred = first_deferral(make(), context_for(1, store, run_started))
    event = run_trigger_payload(deferred)
    with pytest.raises(AirflowException, match="progress was lost"):
        resume(make(), context_for(1, FakeStore(), run_started), deferred, event)  # a store without the record
    with pytest.raises(AirflowException, match="progress was lost"):
        resume(make(), context_for(1, None, run_started), deferred, {**event, "carry": None})
    assert emulator.state.count(PATCH_ROUTE) == 1


def run_bounded(
    make: Callable[[], FleetRolloutOperator], context: dict[str, Any], *, event_only: bool, deferrals: int = 8
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Run a deferrable task to its end, each resume on a fresh operator, given the event only
    (``dag.test()``) or with the defer kwargs too (the triggerer); fails after ``deferrals`` deferrals."""
    from airflow.sdk.exceptions import TaskDeferred

    triggers: list[Any] = []
    try:
        return make().execute(context), triggers
    except TaskDeferred as first:
        pending = first
    while len(triggers) < deferrals:
        triggers.append(pending.trigger)
        event = run_trigger_payload(pending)
        kwargs = {} if event_only else dict(pending.kwargs or {})
        try:
            return getattr(make(), pending.method_name)(context, event, **kwargs), triggers
        except TaskDeferred as again:
            pending = again
    raise AssertionError(f"still deferring after {deferrals} deferrals: {[t.rollouts for t in triggers]}")


def run_trigger_payload(deferred: Any) -> dict[str, Any]:
    """The event of the deferral's trigger, rebuilt from its serialized form as the triggerer does."""
    trigger = deferred.trigger
    return run_trigger(type(trigger)(**trigger.serialize()[1]))


# ------------------------------------------------------------------------------------------ item 5: the stop
class DiesAfterWriting(FakeStore):
    """A task state store whose first write of ``key`` in phase ``done`` kills the worker just after it
    landed: the store holds that key's new value and the older values of the keys written after it."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key, self.died = key, False

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        if key == self.key and value.get("phase") == "done" and not self.died:
            self.died = True
            raise WorkerDied(f"after writing {key}")


@pytest.mark.parametrize("key", ["wave/1", "wave/2"], ids=["after-the-stopping-wave", "after-the-later-wave"])
def test_a_retry_never_goes_on_past_a_stop_decided_before_the_worker_died(fleet: Any, key: str) -> None:
    """The wave that exceeds the budget is recorded done, then the later wave as not patched, then the header
    with the stop: a worker dying between those writes leaves a store whose header says nothing of the stop.
    The retry still stops there: it patches nothing more and fails (it does not patch app-0003, nor succeed)."""
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    store, run_started = DiesAfterWriting(f"{STATE_KEY}/{key}"), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(
            ids, canary=1, wave_size=2, max_failures=0, verify=lambda deployment: deployment.name != "app-0001"
        )

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, store, run_started))
    assert store.data[STATE_KEY]["stopped"] == "", "the header was written before the kill: nothing to test"
    context = context_for(2, store, run_started)
    with pytest.raises(AirflowFailException, match=r"fleet rollout stopped: 1 deployment\(s\) failed"):
        make().execute(context)
    rows = {row["name"]: row for row in context["ti"].xcoms["return_value"]}
    assert rows["app-0003"]["outcome"] == Outcome.NOT_PATCHED, rows["app-0003"]
    assert requests_to(emulator, PATCH_ROUTE, ids["app-0003"]) == 0, "the retry went on past the stop"
    assert len(emulator.state.deployment(ids["app-0003"])["revisions"]) == 1
    assert rows["app-0001"]["outcome"] == Outcome.ROLLED_BACK and rows["app-0002"]["outcome"] == (
        Outcome.ROLLED_BACK_WITH_WAVE
    )
    assert context["ti"].xcoms["fleet_summary"]["stopped"].startswith("1 deployment(s) failed")


# ------------------------------------------------------------------------------------------ item 3: not undone
def docker_fleet(service: Callable[..., Any], count: int) -> Any:
    """``count`` external_docker deployments img-0000... serving image 1.0 with a resource_spec."""
    deployments = [
        {
            "name": f"img-{index:04d}",
            "source": "external_docker",
            "source_revision_config": {"image_uri": "registry.example.com/acme/app:1.0"},
            "source_config": {"resource_spec": {"cpu": 1.0, "memory_mb": 512}},
        }
        for index in range(count)
    ]
    return service(data={"deployments": deployments}, **FAST)


@pytest.fixture
def die_after_the_first_patch_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kill the worker once, just after the service answered the first PATCH, before the task recorded it."""
    real = fleet_patching._record_patch
    armed = {"left": 1}

    def record_patch(*args: Any, **kwargs: Any) -> None:
        if armed["left"]:
            armed["left"] = 0
            raise WorkerDied("between the PATCH's answer and its record")
        real(*args, **kwargs)

    monkeypatch.setattr(fleet_patching, "_record_patch", record_patch)


@pytest.mark.parametrize("change", ["image-only", "image-and-resource_spec"])
def test_a_retry_without_a_record_rolls_an_image_change_back_whole_and_names_only_what_the_change_set(
    service: Callable[..., Any], die_after_the_first_patch_answer: None, change: str
) -> None:
    """No task state store, the PATCH answered but not recorded: the retry reattaches, verify refuses, the
    rollback restores the build. An image-only change never touched resource_spec, so nothing of it is left
    undone: ``rolled_back``, with no resource_spec clause. A change that set resource_spec, whose previous
    value the retry cannot know, stays honestly ``rolled_back_partially``."""
    emulator = docker_fleet(service, 1)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["img-0000"])
    run_started = datetime.now(timezone.utc)
    extra = {"source_config": {"resource_spec": {"cpu": 2.0}}} if change != "image-only" else {}

    def make() -> FleetRolloutOperator:
        return operator(ids, repo_ref=None, image_uri="registry.example.com/acme/app:2.0", **extra)

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, None, run_started))
    context = context_for(2, None, run_started)
    [row] = make().execute(context)
    after = emulator.state.deployment(ids["img-0000"])
    assert requests_to(emulator, PATCH_ROUTE, ids["img-0000"]) == 1  # the rollback redeploys
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the patch and its rollback
    assert after["active_revision_id"] == after["latest_revision_id"] and after["status"] == "READY"
    assert after["revisions"][-1]["source_revision_config"]["image_uri"] == "registry.example.com/acme/app:1.0"
    if change == "image-only":
        assert row["outcome"] == Outcome.ROLLED_BACK, row
        assert "resource_spec" not in row["message"] and "except" not in row["message"]
        assert after["source_config"]["resource_spec"] == before["source_config"]["resource_spec"]
    else:
        assert row["outcome"] == Outcome.ROLLED_BACK_PARTIALLY, row
        assert "except: resource_spec (unknown: not recorded before the patch" in row["message"]


# ------------------------------------------------------------------------------------------ item 6: why unknown
@pytest.mark.parametrize("max_failures", [0, 1], ids=["over-the-budget", "within-the-budget"])
def test_a_retry_without_a_record_never_calls_a_deployment_rolled_back_by_an_earlier_try_failed(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]], max_failures: int
) -> None:
    """No task state store. Wave 1 (app-0000, app-0001): verify refuses app-0001. Over the budget the whole
    wave is rolled back (app-0000 with its wave: healthy); within it, app-0001 alone. The worker dies once
    the rollbacks were sent. The retry finds them rolled back and cannot know why: it says so
    (``rolled_back_reason_unknown``), never ``failed``/``rolled_back`` for the healthy one, and counts them
    against the budget (conservatively) apart from the failures."""
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started = datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(
            ids, wave_size=2, max_failures=max_failures, verify=lambda deployment: deployment.name != "app-0001"
        )

    die_at_rollback("after", "app-0001")
    with pytest.raises(WorkerDied):
        make().execute(context_for(1, None, run_started))
    context = context_for(2, None, run_started)
    rolled_back = ["app-0000", "app-0001"] if max_failures == 0 else ["app-0001"]
    if max_failures == 0:
        with pytest.raises(AirflowFailException) as raised:
            make().execute(context)
        message = str(raised.value)
        assert "0 deployment(s) failed and 2 were rolled back by an earlier try for a reason not recorded" in message
        assert "Failed: none." in message
        assert f"2 deployment(s) were {REASON_UNKNOWN} (counted against the budget, not as failures)" in message
        table = context["ti"].xcoms["return_value"]
    else:
        table = make().execute(context)
    rows = {row["name"]: row for row in table}
    for name in rolled_back:
        assert rows[name]["outcome"] == Outcome.ROLLED_BACK_REASON_UNKNOWN, rows[name]
        assert rows[name]["message"].startswith(REASON_UNKNOWN), rows[name]["message"]
        assert "counts as failed" not in rows[name]["message"] and "(not as a failure)" in rows[name]["message"]
        assert "rolled back (revision" in rows[name]["message"] and "except" not in rows[name]["message"]
        assert_restored(emulator, ids[name], before[name])
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1
    summary = context["ti"].xcoms["fleet_summary"]
    assert summary["failures"] == 0
    if max_failures == 0:
        assert summary["counts"] == {"rolled_back_reason_unknown": 2, "not_patched": 2}
        assert all(requests_to(emulator, PATCH_ROUTE, ids[name]) == 0 for name in ("app-0002", "app-0003"))
    else:  # one counted against a budget of one: the rollout went on
        assert summary["counts"] == {"landed": 3, "rolled_back_reason_unknown": 1}
        assert summary["stopped"] == ""


# ------------------------------------------------------------------------------------------ item 1: failed builds
@pytest.fixture
def die_after_the_first_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kill the worker once, just after the watch decided the wave's rollouts, before the task recorded them."""
    real = fleet_watching.explain_failed_builds
    armed = {"left": 1}

    def explain_failed_builds(*args: Any, **kwargs: Any) -> list[str]:
        if armed["left"]:
            armed["left"] = 0
            raise WorkerDied("between the watch's verdict and its record")
        return real(*args, **kwargs)

    monkeypatch.setattr(fleet_watching, "explain_failed_builds", explain_failed_builds)


@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no-store"])
@pytest.mark.parametrize("died", ["after-the-patch", "after-the-watch"])
def test_a_retry_after_a_failed_build_reports_it_again_and_never_builds_again(
    fleet: Any, request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str], with_store: bool, died: str
) -> None:
    """The earlier try's revision failed its build; the worker died before that was recorded (or before the
    patch itself was). The retry recognises the revision, reports the failed build again (its row and its
    build log) and never patches the deployment a second time: one BUILD_FAILED revision for one change, the
    old revision serving. The row says a retry does not build again, and what does."""
    emulator = fleet(1)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["app-0000"])
    emulator.state.fail_next_build(ids["app-0000"], "BUILD_FAILED", "compile error in agent.py line 12")
    request.getfixturevalue(
        "die_after_the_first_patch_answer" if died == "after-the-patch" else "die_after_the_first_watch"
    )
    store, run_started = (FakeStore() if with_store else None), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(ids, verify=None, max_failures=1)

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, store, run_started))
    capfd.readouterr()
    [row] = make().execute(context_for(2, store, run_started))
    after = emulator.state.deployment(ids["app-0000"])
    assert requests_to(emulator, PATCH_ROUTE, ids["app-0000"]) == 1, "the retry built again"
    assert [revision["status"] for revision in after["revisions"]] == ["DEPLOYED", "BUILD_FAILED"]
    assert after["active_revision_id"] == before["active_revision_id"] and after["status"] == "READY"
    assert row["outcome"] == Outcome.FAILED and row["to_revision"] == after["revisions"][-1]["id"], row
    assert "status BUILD_FAILED" in row["message"]
    assert "a retry of this task does not build it again: a new DAG run, or a changed patch, does" in row["message"]
    out = capfd.readouterr().out
    assert "ERROR: compile error in agent.py line 12" in out  # the build log's tail, shown again


# ------------------------------------------------------------------------------------------ item 8b: merged
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no-store"])
def test_a_merged_resource_spec_patch_whose_answer_was_lost_is_recognised_never_sent_again(
    service: Callable[..., Any], die_after_the_first_patch_answer: None, with_store: bool
) -> None:
    """What is sent is the resource_spec completed from the deployment's; the retry recognises it by the change
    as given (which the deployment then shows), so it reattaches instead of merging and sending again."""
    emulator = docker_fleet(service, 1)
    ids = ids_by_name(emulator)
    store, run_started = (FakeStore() if with_store else None), datetime.now(timezone.utc)

    def make() -> FleetRolloutOperator:
        return operator(ids, repo_ref=None, source_config={"resource_spec": {"memory_mb": 1024}}, verify=None)

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, store, run_started))
    [row] = make().execute(context_for(2, store, run_started))
    after = emulator.state.deployment(ids["img-0000"])
    assert row["outcome"] == Outcome.LANDED, row
    assert requests_to(emulator, PATCH_ROUTE, ids["img-0000"]) == 1 and len(after["revisions"]) == 2
    shown = {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None}
    assert (shown["cpu"], shown["memory_mb"]) == (1.0, 1024)  # the cpu was kept, not dropped


# ------------------------------------------------------------------------------------------ item 8c: in place
def test_a_retry_without_a_record_never_patches_again_what_an_earlier_try_rolled_back_in_place(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]]
) -> None:
    """A service whose redeploy makes no revision deploys the old revision again: the patch's revision stays
    the latest, but no longer serves and the deployment shows the old build. A retry without a record must
    read that as the earlier try's rollback (never patch again), not as a patch still to be watched."""
    emulator = fleet(1, redeploy_mode="in_place")
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["app-0000"])
    run_started = datetime.now(timezone.utc)
    die_at_rollback("after", "app-0000")
    with pytest.raises(WorkerDied):
        operator(ids, max_failures=1).execute(context_for(1, None, run_started))
    [row] = operator(ids, max_failures=1).execute(context_for(2, None, run_started))
    after = emulator.state.deployment(ids["app-0000"])
    assert requests_to(emulator, PATCH_ROUTE, ids["app-0000"]) == 1, "the retry patched again"
    assert requests_to(emulator, REDEPLOY_ROUTE, ids["app-0000"]) == 1, "the retry rolled back again"
    assert len(after["revisions"]) == 2 and after["latest_revision_id"] == after["revisions"][-1]["id"]
    assert after["active_revision_id"] == before["active_revision_id"] and after["status"] == "READY"
    assert after["source_revision_config"]["repo_ref"] == "refs/tags/v1"
    assert row["outcome"] == Outcome.ROLLED_BACK_REASON_UNKNOWN, row
    assert row["from_revision"] == before["active_revision_id"] and row["to_revision"] == after["latest_revision_id"]
    assert f"revision {before['active_revision_id']} serves again (deployed again in place)" in row["message"]


# ------------------------------------------------------------------------------------------ resource_spec only
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no-store"])
def test_a_resource_spec_only_patch_live_before_the_retry_is_verified_not_taken_as_unchanged(
    service: Callable[..., Any], die_after_the_first_patch_answer: None, with_store: bool
) -> None:
    """A resource_spec-only patch makes a revision in production. Its answer was lost, and the revision went
    live before the retry looked. The retry must reattach to that revision (the one revision made since the
    run started, or the one after the latest recorded before the PATCH), verify it and roll it back when
    verify refuses; it used to call the deployment 'unchanged' and succeed, verify never run."""
    emulator = docker_fleet(service, 1)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["img-0000"])
    store, run_started = (FakeStore() if with_store else None), datetime.now(timezone.utc)
    verified: list[str] = []

    def refuse(deployment: Any) -> bool:
        verified.append(deployment.active_revision_id)
        return False

    def make() -> FleetRolloutOperator:
        return operator(ids, repo_ref=None, source_config={"resource_spec": {"cpu": 2.0}}, verify=refuse)

    with pytest.raises(WorkerDied):
        make().execute(context_for(1, store, run_started))
    wait_settled(emulator, ids["img-0000"])  # the patch's revision is live before the retry looks
    patched = emulator.state.deployment(ids["img-0000"])["latest_revision_id"]
    [row] = make().execute(context_for(2, store, run_started))
    after = emulator.state.deployment(ids["img-0000"])
    assert verified == [patched], "verify did not judge the patch's revision"
    assert row["to_revision"] == patched and row["from_revision"] == before["active_revision_id"], row
    assert requests_to(emulator, PATCH_ROUTE, ids["img-0000"]) == (2 if with_store else 1)  # + the spec rollback
    assert len(after["revisions"]) == 3 and after["active_revision_id"] == after["revisions"][-1]["id"]
    if with_store:  # the previous resource_spec was recorded before the PATCH: restored whole
        assert row["outcome"] == Outcome.ROLLED_BACK, row
        shown = {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None}
        assert {key: value for key, value in shown.items() if "limit" not in key} == {"cpu": 1.0, "memory_mb": 512}
    else:  # not recorded: the build is back, and the row says the resource_spec is not known
        assert row["outcome"] == Outcome.ROLLED_BACK_PARTIALLY, row
        assert "except: resource_spec (unknown: not recorded before the patch" in row["message"]
