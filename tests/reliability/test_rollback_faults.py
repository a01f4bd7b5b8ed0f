"""A rollback request that fails ambiguously never creates two rollback revisions.

Each case injects one fault on ``POST .../revisions/{revision_id}/redeploy`` (once), redeploys through the
provider's client over real HTTP (sync and async twins) and counts the revisions the deployment gained and
the requests sent. A failure that may have reached the service (502, 504, a dropped connection, a read
timeout) is read back before anything is re-sent: the redeploy counts as landed when the latest revision
moved and shows the redeployed revision's config. Then a whole ``RollbackDeploymentOperator`` run under a
drop-after-processing fault, and its retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.client import (
    AsyncDeploymentServiceClient,
    ClientSettings,
    DeploymentServiceClient,
    RetryPolicy,
    SourceRevisionConfig,
)
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import ROLLBACK_STATE_KEY, RollbackDeploymentOperator
from airflow_provider.tasks.rollback import RESOURCE_SPEC_UNKNOWN
from tests.reliability.support import API_KEY, LIST_ROUTE, RecordedSleeps, Report
from tests.tasks.conftest import FakeStore, FakeTI, make_context

TARGET = "76cd9fa7-036e-43e7-8660-ade2b5acb208"  # checkout-api-staging (internal_docker)
REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
REDEPLOY_PATH = "/v2/deployments/*/revisions/*/redeploy"
DELAY_SECONDS = 0.5
READ_TIMEOUT = 0.2

FAULTS: dict[str, dict[str, Any]] = {
    "502": {"kind": "status", "status_code": 502},
    "503": {"kind": "status", "status_code": 503},
    "504": {"kind": "status", "status_code": 504},
    "drop": {"kind": "drop"},
    "drop_after_processing": {"kind": "drop_after_processing"},
    "read timeout (server still processes)": {"kind": "delay", "delay_seconds": DELAY_SECONDS},
}


@pytest.fixture
def emulator(deployment_service_emulator_factory: Any) -> EmulatorServer:
    server: EmulatorServer = deployment_service_emulator_factory(api_key=API_KEY)
    return server


def bad_rollout(emulator: EmulatorServer) -> tuple[str, str]:
    """Roll out a bad image so that there is something to roll back; return (good, bad) revision ids."""
    state = emulator.state
    good = str(state.get_deployment(TARGET)["active_revision_id"])
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "acme/app:broken"}})
    bad = str(state.patch_deployment(TARGET, request)["latest_revision_id"])
    state.advance(2.5)
    return good, bad


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_ambiguous_redeploy_creates_one_rollback_revision(
    emulator: EmulatorServer, report: Report, fault: str, twin: str
) -> None:
    state = emulator.state
    good, bad = bad_rollout(emulator)
    expected = SourceRevisionConfig.model_validate(state.get_revision(TARGET, good)["source_revision_config"])
    before = len(state.deployment(TARGET)["revisions"])
    state.reset_requests()
    delayed = FAULTS[fault]["kind"] == "delay"
    rule = state.add_fault(method="POST", path=REDEPLOY_PATH, count=1, **FAULTS[fault])
    # Backoff 0.5..2 s: with this seed the wait before the read-back (0.65 s) outlasts the server's delay.
    settings = ClientSettings(
        base_url=emulator.base_url,
        read_timeout=READ_TIMEOUT if delayed else 5.0,
        retry=RetryPolicy(max_attempts=3, backoff_initial=2.0, backoff_max=4.0),
    )
    sleeps = RecordedSleeps(requests_so_far=lambda: state.count(REDEPLOY_ROUTE))
    wait: Any = time.sleep if delayed else sleeps
    if twin == "sync":
        with DeploymentServiceClient(settings, API_KEY, sleep=wait, rng=random.Random(7)) as client:
            result = client.redeploy_revision(TARGET, good, previous_latest_revision_id=bad, expected_config=expected)
    else:

        async def run() -> Any:
            async def asleep(seconds: float) -> None:
                await asyncio.sleep(seconds) if delayed else sleeps(seconds)

            client = AsyncDeploymentServiceClient(settings, API_KEY, sleep=asleep, rng=random.Random(7))
            try:
                return await client.redeploy_revision(
                    TARGET, good, previous_latest_revision_id=bad, expected_config=expected
                )
            finally:
                await client.aclose()

        result = asyncio.run(run())
    state.clear_faults()
    if delayed:
        time.sleep(DELAY_SECONDS)  # did a delayed request still apply after the client gave up on it?
    after = state.deployment(TARGET)
    new_revisions = len(after["revisions"]) - before
    report.add("rollback_faults_injected", rule.hits)
    report.add("duplicate_rollback_revisions", max(0, new_revisions - 1))
    report.row(
        "rollback_faults",
        fault=fault,
        twin=twin,
        redeploy_requests=state.count(REDEPLOY_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        rollback_revisions=new_revisions,
        serves_old_config=after["source_revision_config"]["image_uri"] == expected.image_uri,
    )
    assert new_revisions == 1
    assert result.latest_revision_id == after["latest_revision_id"]
    assert after["source_revision_config"]["image_uri"] == expected.image_uri


def test_rollback_task_under_a_dropped_answer_and_its_retry(
    emulator: EmulatorServer, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, connection_json

    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, API_KEY, **FAST_RETRY_EXTRAS))
    state = emulator.state
    good, bad = bad_rollout(emulator)
    before = len(state.deployment(TARGET)["revisions"])
    state.add_fault(method="POST", path=REDEPLOY_PATH, count=1, kind="drop_after_processing")
    store = FakeStore()
    first = FakeTI(try_number=1)
    options = {"task_id": "rollback", "deployment_id": TARGET, "revision_id": good, "rolling_back_from": bad}
    with pytest.raises(Exception, match="timed out"):
        RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=0.2).execute(make_context(first, store))
    state.advance(2.5)
    second = FakeTI(try_number=2)
    RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=5).execute(make_context(second, store))
    after = state.deployment(TARGET)
    new_revisions = len(after["revisions"]) - before
    report.row(
        "rollback_faults",
        fault="drop_after_processing, then the task retried",
        twin="RollbackDeploymentOperator",
        redeploy_requests=state.count(REDEPLOY_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        rollback_revisions=new_revisions,
        serves_old_config=after["active_revision_id"] == second.xcoms["revision_id"],
    )
    report.add("duplicate_rollback_revisions", max(0, new_revisions - 1))
    assert new_revisions == 1
    assert state.count(REDEPLOY_ROUTE) == 1
    assert first.xcoms["revision_id"] == second.xcoms["revision_id"] == after["active_revision_id"]


# ------------------------------------------------------------------------------ retries of the rollback task
DOCKER = "checkout-api-staging"  # internal_docker, no resource_spec
EXTERNAL = "billing-worker-prod"  # external_docker with a resource_spec
SPEC_BEFORE = {"min_scale": 2, "max_scale": 6, "cpu": 1.5, "memory_mb": 2048, "db_storage_gi": 20}
SPEC_BAD = {**SPEC_BEFORE, "cpu": 4, "memory_mb": 4096}
SPEC_RESTORED = {**SPEC_BEFORE, "cpu_limit": 3.0, "memory_limit_mb": 4096}  # production's default limits echoed
PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"


class WorkerKilled(BaseException):
    """The worker dies (SIGKILL, node loss) at a chosen point: nothing in the task catches it."""


def kill_worker(monkeypatch: pytest.MonkeyPatch, method: str, *, after_request: bool) -> None:
    """Make the next call of ``DeploymentServiceHook.<method>`` kill the worker, before its request is sent or
    after it was answered."""
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    original = getattr(DeploymentServiceHook, method)

    def dying(self: Any, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(DeploymentServiceHook, method, original)  # once
        if after_request:
            original(self, *args, **kwargs)
        raise WorkerKilled(f"worker killed {'after' if after_request else 'before'} {method}")

    monkeypatch.setattr(DeploymentServiceHook, method, dying)


@contextlib.contextmanager
def ticking(emulator: EmulatorServer) -> Iterator[None]:
    """Advance the emulator's frozen clock 0.25 s every 20 ms of real time while the block runs."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.02):
            emulator.state.advance(0.25)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def rollback_try(try_number: int, store: FakeStore | None, run_started: datetime) -> tuple[FakeTI, dict[str, Any]]:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    ti = FakeTI(try_number=try_number)
    context = {**make_context(ti, store), "dag_run": SimpleNamespace(start_date=run_started)}
    context["outlet_events"] = OutletEventAccessors()
    return ti, context


def events_of(context: dict[str, Any]) -> list[dict[str, Any]]:
    accessors = context["outlet_events"]._dict.values()
    return [dict(event.extra) for accessor in accessors for event in accessor.asset_alias_events]


def revisions_of(state: Any, deployment_id: str) -> list[dict[str, Any]]:
    revisions: list[dict[str, Any]] = state.deployment(deployment_id)["revisions"]
    return revisions


def spec_of(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = deployment["source_config"].get("resource_spec") or {}
    return {name: value for name, value in spec.items() if value is not None}


def spec_only_change(state: Any, deployment_id: str) -> tuple[str, str]:
    """A resource_spec-only change (same image) that went live; return (good, bad) revision ids."""
    good = str(state.get_deployment(deployment_id)["active_revision_id"])
    body = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": SPEC_BAD}})
    bad = str(state.patch_deployment(deployment_id, body)["latest_revision_id"])
    state.advance(2.5)
    return good, bad


@pytest.mark.parametrize("spec_given", [True, False], ids=["resource_spec given", "resource_spec unknown"])
@pytest.mark.parametrize("named", ["rolling_back_from", "revision list"])
def test_a_retry_without_a_record_never_takes_the_bad_revision_for_its_rollback(
    frozen_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, named: str, spec_given: bool
) -> None:
    """Issue 22 item 2: try 1 died before sending its rollback; try 2 has no task_state_store record. The bad
    revision of a resource_spec-only change is newer than the target, made since the run started and has the
    target's source_revision_config: it is still never taken for a rollback (it is rolling_back_from, or the
    revision list shows it right after the target). Try 2 rolls back once, and says what it did."""
    state = frozen_emulator.state
    dep = state.find_deployment(EXTERNAL)
    run_started = state.now()
    good, bad = spec_only_change(state, dep["id"])
    before = len(revisions_of(state, dep["id"]))
    options: dict[str, Any] = {"task_id": "rollback", "deployment_id": dep["id"], "revision_id": good}
    if named == "rolling_back_from":
        options["rolling_back_from"] = bad
    if spec_given:
        options["resource_spec"] = SPEC_BEFORE
    kill_worker(monkeypatch, "patch_deployment" if spec_given else "redeploy_revision", after_request=False)
    _ti, context = rollback_try(1, None, run_started)
    with pytest.raises(WorkerKilled):
        RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10).execute(context)
    assert len(revisions_of(state, dep["id"])) == before  # try 1 sent nothing
    second, context = rollback_try(2, None, run_started)
    with ticking(frozen_emulator):
        RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10).execute(context)
    now = state.get_deployment(dep["id"])
    assert state.count(PATCH_ROUTE) + state.count(REDEPLOY_ROUTE) == 1  # one rollback, sent by try 2
    assert len(revisions_of(state, dep["id"])) == before + 1
    assert now["active_revision_id"] == second.xcoms["revision_id"] not in (good, bad)
    [event] = events_of(context)
    if spec_given:
        assert spec_of(now) == SPEC_RESTORED and second.xcoms["not_restored"] == []
        assert event["outcome"] == "rolled_back"
    else:
        assert spec_of(now)["cpu"] == 4 and second.xcoms["not_restored"] == [RESOURCE_SPEC_UNKNOWN]
        assert event["outcome"] == "rolled_back_partially" and event["not_restored"] == [RESOURCE_SPEC_UNKNOWN]


def test_without_a_record_or_a_revision_list_a_lookalike_fails_loudly(
    deployment_service_emulator_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without rolling_back_from, a record or the revision list, the bad revision of a resource_spec-only change
    cannot be told from an earlier try's rollback: try 2 sends nothing, claims nothing, and says what to check."""
    from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, connection_json

    server = deployment_service_emulator_factory(disabled_endpoints=["list_revisions"])
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, server.api_key, **FAST_RETRY_EXTRAS))
    state = server.state
    dep = state.find_deployment(EXTERNAL)
    run_started = state.now()
    good, bad = spec_only_change(state, dep["id"])
    second, context = rollback_try(2, None, run_started)
    task = RollbackDeploymentOperator(task_id="rollback", deployment_id=dep["id"], revision_id=good, poll_interval=0.05)
    with pytest.raises(AirflowFailException, match=f"cannot tell whether revision {bad} is the rollback") as raised:
        task.execute(context)
    assert f"rolling_back_from={bad!r}" in str(raised.value)
    assert state.count(PATCH_ROUTE) + state.count(REDEPLOY_ROUTE) == 0
    assert state.get_deployment(dep["id"])["active_revision_id"] == bad
    assert "revision_id" not in second.xcoms and events_of(context) == []


@pytest.mark.parametrize(
    ("named", "spec_given", "reattaches"),
    [
        ("rolling_back_from", True, True),
        ("rolling_back_from", False, True),
        ("revision list", True, True),
        ("revision list", False, False),
    ],
)
def test_a_retry_without_a_record_reattaches_only_on_positive_evidence(
    frozen_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, named: str, spec_given: bool, reattaches: bool
) -> None:
    """Try 1 sent its rollback of a resource_spec-only change and died; try 2 has no record. It reattaches when
    it knows the revision rolled back (rolling_back_from) or sees the resource_spec given restored; with
    neither, both revisions look alike and it fails loudly. It never sends a second rollback."""
    state = frozen_emulator.state
    dep = state.find_deployment(EXTERNAL)
    run_started = state.now()
    good, bad = spec_only_change(state, dep["id"])
    before = len(revisions_of(state, dep["id"]))
    options: dict[str, Any] = {"task_id": "rollback", "deployment_id": dep["id"], "revision_id": good}
    if named == "rolling_back_from":
        options["rolling_back_from"] = bad
    if spec_given:
        options["resource_spec"] = SPEC_BEFORE
    kill_worker(monkeypatch, "patch_deployment" if spec_given else "redeploy_revision", after_request=True)
    _ti, context = rollback_try(1, None, run_started)
    with pytest.raises(WorkerKilled):
        RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10).execute(context)
    rollback = state.get_deployment(dep["id"])["latest_revision_id"]
    assert len(revisions_of(state, dep["id"])) == before + 1 and rollback != bad
    second, context = rollback_try(2, None, run_started)
    task = RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10)
    with ticking(frozen_emulator):
        if reattaches:
            task.execute(context)
        else:
            with pytest.raises(AirflowFailException, match=f"cannot tell whether revision {rollback} is the rollback"):
                task.execute(context)
    assert state.count(PATCH_ROUTE) + state.count(REDEPLOY_ROUTE) == 1  # try 1's only
    assert len(revisions_of(state, dep["id"])) == before + 1
    if reattaches:
        now = state.get_deployment(dep["id"])
        assert now["active_revision_id"] == rollback == second.xcoms["revision_id"]
        [event] = events_of(context)
        assert event["outcome"] == ("rolled_back" if spec_given else "rolled_back_partially")
    else:
        assert "revision_id" not in second.xcoms and events_of(context) == []


@pytest.mark.parametrize("store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize("redeploy_mode", ["new_revision", "in_place"])
@pytest.mark.parametrize("crash", ["before the redeploy", "after the redeploy", "after deferring"])
def test_a_retried_rollback_sends_one_redeploy_and_claims_what_serves(
    frozen_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, crash: str, redeploy_mode: str, store: bool
) -> None:
    """Try 1 dies before its redeploy (after recording it), after it, or after deferring its wait; try 2 runs as
    Airflow retries: with the same task_state_store, or none (Airflow < 3.3). Whether the redeploy makes a
    revision or deploys the old one again, exactly one redeploy reaches the service and try 2 says "rolled
    back" only once the old build serves."""
    state = frozen_emulator.state
    state.update_settings(redeploy_mode=redeploy_mode)
    dep = state.find_deployment(DOCKER)
    run_started = state.now()
    good, bad = bad_rollout(frozen_emulator)
    before = len(revisions_of(state, dep["id"]))
    saved = FakeStore() if store else None
    options = {"task_id": "rollback", "deployment_id": dep["id"], "revision_id": good, "rolling_back_from": bad}
    _first, context = rollback_try(1, saved, run_started)
    if crash == "after deferring":
        with pytest.raises(TaskDeferred):
            RollbackDeploymentOperator(**options, deferrable=True, poll_interval=0.05).execute(context)
    else:
        kill_worker(monkeypatch, "redeploy_revision", after_request=crash == "after the redeploy")
        with pytest.raises(WorkerKilled):
            RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10).execute(context)
    if saved is not None:
        assert saved.data[ROLLBACK_STATE_KEY]["phase"] == ("sending" if crash != "after deferring" else "sent")
    second, context = rollback_try(2, saved, run_started)
    with ticking(frozen_emulator):
        result = RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=10).execute(context)
    now = state.get_deployment(dep["id"])
    assert state.count(REDEPLOY_ROUTE) == 1 and state.count(PATCH_ROUTE) == 0
    made = 1 if redeploy_mode == "new_revision" else 0
    assert len(revisions_of(state, dep["id"])) == before + made
    expected = now["latest_revision_id"] if made else good
    assert result["active_revision_id"] == now["active_revision_id"] == expected == second.xcoms["revision_id"]
    assert (
        now["status"] == "READY"
        and now["source_revision_config"]["image_uri"]
        == state.get_revision(dep["id"], good)["source_revision_config"]["image_uri"]
    )
    assert second.xcoms["rolled_back_from"] == bad and second.xcoms["not_restored"] == []
    [event] = events_of(context)
    assert event["outcome"] == "rolled_back" and event["revision_id"] == expected


@pytest.mark.parametrize("store", [True, False], ids=["task_state_store", "no store"])
def test_the_rollback_recorded_before_sending_decides_what_the_deployment_cannot(
    deployment_service_emulator_factory: Any, monkeypatch: pytest.MonkeyPatch, store: bool
) -> None:
    """The record written before the request is what tells a retry that the lookalike revision is its own
    rollback when the deployment cannot (no rolling_back_from, no revision list, a resource_spec-only change):
    with it try 2 reattaches; without it try 2 fails loudly. Neither sends a second rollback."""
    from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, connection_json

    server = deployment_service_emulator_factory(disabled_endpoints=["list_revisions"])
    monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, server.api_key, **FAST_RETRY_EXTRAS))
    state = server.state
    dep = state.find_deployment(EXTERNAL)
    run_started = state.now()
    good, bad = spec_only_change(state, dep["id"])
    saved = FakeStore() if store else None
    options = {"task_id": "rollback", "deployment_id": dep["id"], "revision_id": good, "poll_interval": 0.05}
    kill_worker(monkeypatch, "redeploy_revision", after_request=True)
    _first, context = rollback_try(1, saved, run_started)
    with pytest.raises(WorkerKilled):
        RollbackDeploymentOperator(**options).execute(context)
    rollback = state.get_deployment(dep["id"])["latest_revision_id"]
    second, context = rollback_try(2, saved, run_started)
    task = RollbackDeploymentOperator(**options, timeout=10)
    with ticking(server):
        if store:
            task.execute(context)
        else:
            with pytest.raises(AirflowFailException, match="the service does not list the deployment's revisions"):
                task.execute(context)
    assert state.count(REDEPLOY_ROUTE) == 1 and state.count(PATCH_ROUTE) == 0
    if store:
        assert state.get_deployment(dep["id"])["active_revision_id"] == rollback == second.xcoms["revision_id"]
        assert second.xcoms["rolled_back_from"] == bad
        [event] = events_of(context)
        assert event["outcome"] == "rolled_back_partially" and event["not_restored"] == [RESOURCE_SPEC_UNKNOWN]
    else:
        assert events_of(context) == [] and "revision_id" not in second.xcoms
