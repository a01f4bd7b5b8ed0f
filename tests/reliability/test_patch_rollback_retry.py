"""The patch task's automatic rollback across a dead worker (issue 22, item 5).

Try 1 patches, its verify fails, it rolls back, and its worker dies at one point of that rollback; try 2 is
a fresh operator (as Airflow retries it) with the same ``task_state_store``, or with none (Airflow < 3.3).
Every retry must end true: one revision for the patch and one for the rollback (never a second of either),
the previous build serving again, and a failure saying so; never the bad patch re-applied, never success.
Deferrable runs resume with the ``defer()`` kwargs merged, as the triggerer does. Assertions are on the
emulator's real state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment, PatchDeploymentRequest
from airflow_provider.operators.deployment_service import TASK_STATE_KEY, PatchDeploymentOperator
from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, OPERATOR_SECRET, PATCH_ROUTE, connection_json
from tests.tasks.conftest import FakeStore, FakeTI, run_trigger

NAME = "checkout-api-staging"  # internal_docker, image registry.example.com/acme/checkout-api:0.4.0
OLD_IMAGE = "registry.example.com/acme/checkout-api:0.4.0"
BAD_IMAGE = "registry.example.com/acme/checkout-api:6.6.6"
REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
LIVE = 3.5
"""Seconds of emulated time after which a revision made now serves (build 2 s, ready 1 s)."""


class WorkerKilled(BaseException):
    """Stands for the worker dying (OOM kill, node loss): not an ``Exception``, so nothing catches it."""


@pytest.fixture
def emulator(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., EmulatorServer]:
    def start(**options: Any) -> EmulatorServer:
        server = deployment_service_emulator_factory(**options)
        monkeypatch.setenv(CONN_ENV, connection_json(server.base_url, server.api_key, **FAST_RETRY_EXTRAS))
        return server

    return start


def patch_task(deployment_id: str, verdicts: list[str], **kwargs: Any) -> PatchDeploymentOperator:
    """The patch every try runs: a bad image whose verify fails (each call recorded in ``verdicts``)."""

    def verify(deployment: Deployment) -> bool:
        verdicts.append(str(deployment.active_revision_id))
        return False

    options: dict[str, Any] = {
        "task_id": "patch",
        "image_uri": BAD_IMAGE,
        "secrets": {"TOKEN": OPERATOR_SECRET},
        "wait_for_rollout": True,
        "verify": verify,
        "rollback_on_failure": True,
        "deferrable": True,
        "poll_interval": 0.05,
        "timeout": 30,
        **kwargs,
    }
    return PatchDeploymentOperator(deployment_id=deployment_id, **options)


def context_for(try_number: int, store: FakeStore | None, run_started: datetime) -> dict[str, Any]:
    context: dict[str, Any] = {
        "ti": FakeTI(try_number=try_number),
        "dag_run": SimpleNamespace(start_date=run_started),
        "outlet_events": OutletEventAccessors(),
    }
    if store is not None:
        context["task_state_store"] = store
    return context


def run_try(
    make_task: Callable[[], PatchDeploymentOperator],
    context: dict[str, Any],
    emulator: EmulatorServer,
    *,
    stop_before: str | None = None,
) -> BaseException | dict[str, Any] | None:
    """One try to its end (deferrals resumed on fresh operators, kwargs merged, the emulated builds let
    finish before each trigger): its result, the exception it ended with, or ``None`` when it was left
    deferred before resuming ``stop_before`` (the worker and the triggerer died)."""
    try:
        return make_task().execute(context)
    except TaskDeferred as deferred:
        pending = deferred
    except (Exception, WorkerKilled) as err:
        return err
    while True:
        if pending.method_name == stop_before:
            return None
        emulator.state.advance(LIVE)
        _path, kwargs = pending.trigger.serialize()
        event = run_trigger(type(pending.trigger)(**json.loads(json.dumps(kwargs))))
        try:
            return getattr(make_task(), pending.method_name)(context, event, **(pending.kwargs or {}))
        except TaskDeferred as deferred:
            pending = deferred
        except (Exception, WorkerKilled) as err:
            return err


@pytest.fixture
def kill_redeploy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``kill(when)``: the worker dies in the next redeploy call, ``"before"`` it is sent or ``"after"`` the
    service processed it (before the task hears back)."""
    original = DeploymentServiceHook.redeploy_revision
    armed: list[str] = []

    def redeploy(hook: DeploymentServiceHook, *args: Any, **kwargs: Any) -> Deployment:
        if armed and armed[0] == "before":
            armed.clear()
            raise WorkerKilled("worker killed before the rollback was sent")
        result = original(hook, *args, **kwargs)
        if armed and armed[0] == "after":
            armed.clear()
            raise WorkerKilled("worker killed after the rollback reached the service")
        return result

    monkeypatch.setattr(DeploymentServiceHook, "redeploy_revision", redeploy)
    yield armed.append


KILL_POINTS = {
    "before the rollback is sent": ("before", None),
    "after the rollback reached the service": ("after", None),
    "deferred, waiting for the rollback": (None, "execute_rollback_complete"),
}


@pytest.mark.parametrize("redeploy_mode", ["new_revision", "in_place"])
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_a_retry_after_the_automatic_rollback_ends_rolled_back_with_one_rollback(
    emulator: Callable[..., EmulatorServer],
    kill_redeploy: Callable[[str], None],
    kill_point: str,
    with_store: bool,
    redeploy_mode: str,
) -> None:
    """``redeploy_mode="in_place"``: a redeploy that makes no revision (production does not say which)."""
    server = emulator(redeploy_mode=redeploy_mode)
    state = server.state
    before = state.find_deployment(NAME)
    good, revisions_before = before["active_revision_id"], len(before["revisions"])
    store = FakeStore() if with_store else None
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    verdicts: list[str] = []
    kill, stop_before = KILL_POINTS[kill_point]
    if kill is not None:
        kill_redeploy(kill)

    first = run_try(
        lambda: patch_task(before["id"], verdicts), context_for(1, store, run_started), server, stop_before=stop_before
    )
    assert first is None or isinstance(first, WorkerKilled), first
    bad = state.find_deployment(NAME)["revisions"][revisions_before]["id"]
    assert verdicts == [bad]
    if store is not None:
        recorded = store.data[TASK_STATE_KEY]["rollback"]  # recorded before it was sent
        assert (recorded["rolled_back_from"], recorded["to_revision_id"]) == (bad, good)
        assert recorded["phase"] == ("sent" if kill_point == "deferred, waiting for the rollback" else "sending")

    context = context_for(2, store, run_started)
    second = run_try(lambda: patch_task(before["id"], verdicts), context, server)

    after = state.find_deployment(NAME)
    made = 2 if redeploy_mode == "new_revision" else 1  # the patch's revision, and the rollback's if it makes one
    assert len(after["revisions"]) == revisions_before + made, f"a second patch or rollback, or none: {second!r}"
    assert state.count(PATCH_ROUTE) == 1 and state.count(REDEPLOY_ROUTE) == 1
    restored = after["revisions"][-1] if redeploy_mode == "new_revision" else before["revisions"][-1]
    assert after["active_revision_id"] == restored["id"] != bad
    assert after["latest_revision_id"] == (restored["id"] if redeploy_mode == "new_revision" else bad)
    assert after["status"] == "READY" and after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"revision {bad} went live but" in message
    assert f"rolled back to revision {good} (" in message and f"as revision {restored['id']}" in message
    assert "secrets TOKEN (the rollback cannot restore secret values" in message
    assert OPERATOR_SECRET not in message
    # try 1 never saw the rollback land: when it died before sending, only try 2 sent it (after verifying again)
    assert verdicts == ([bad, bad] if kill_point == "before the rollback is sent" and store is None else [bad])
    ti = context["ti"]
    assert (ti.xcoms["revision_id"], ti.xcoms["previous_active_revision_id"]) == (bad, good)
    assert ti.xcoms["previous_source_revision_config"] == {"image_uri": OLD_IMAGE}
    assert context["outlet_events"]._dict == {}  # no asset event: nothing landed
    if store is not None:
        assert store.data[TASK_STATE_KEY]["rollback"]["phase"] == "sent"


def test_without_a_store_a_rollback_someone_else_followed_fails_loudly_without_patching(
    emulator: Callable[..., EmulatorServer], kill_redeploy: Callable[[str], None]
) -> None:
    """Try 1 patched and rolled back, then a colleague rolled out: try 2 cannot prove what happened and must
    neither re-apply the bad patch nor claim anything."""
    server = emulator()
    state = server.state
    before = state.find_deployment(NAME)
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    verdicts: list[str] = []
    kill_redeploy("after")
    run_try(lambda: patch_task(before["id"], verdicts), context_for(1, None, run_started), server)
    colleague = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "app:colleague"}})
    state.patch_deployment(before["id"], colleague)
    state.advance(2 * LIVE)
    revisions = len(state.find_deployment(NAME)["revisions"])

    second = run_try(lambda: patch_task(before["id"], verdicts), context_for(2, None, run_started), server)

    assert isinstance(second, AirflowFailException), second
    assert "not patching on this retry" in str(second) and "does not copy the revision before it" in str(second)
    after = state.find_deployment(NAME)
    assert len(after["revisions"]) == revisions and state.count(PATCH_ROUTE) == 1
    assert after["source_revision_config"]["image_uri"] == "app:colleague"


def test_without_a_store_or_a_revision_list_a_changed_deployment_fails_loudly(
    emulator: Callable[..., EmulatorServer], kill_redeploy: Callable[[str], None]
) -> None:
    server = emulator(disabled_endpoints=["list_revisions"])
    state = server.state
    before = state.find_deployment(NAME)
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    verdicts: list[str] = []
    kill_redeploy("after")
    run_try(lambda: patch_task(before["id"], verdicts), context_for(1, None, run_started), server)
    state.advance(LIVE)

    second = run_try(lambda: patch_task(before["id"], verdicts), context_for(2, None, run_started), server)

    assert isinstance(second, AirflowFailException), second
    assert "no revision list endpoint" in str(second)
    after = state.find_deployment(NAME)
    assert len(after["revisions"]) == len(before["revisions"]) + 2 and state.count(PATCH_ROUTE) == 1
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE  # the bad patch was not re-applied


def test_a_retry_sees_a_recorded_rollback_that_lost_to_a_newer_rollout_and_fails_without_rolling_back(
    emulator: Callable[..., EmulatorServer], kill_redeploy: Callable[[str], None]
) -> None:
    """Recorded before sending, never sent, and meanwhile someone rolled out: rolling back now would undo
    their rollout; the task fails saying so."""
    server = emulator()
    state = server.state
    before = state.find_deployment(NAME)
    store = FakeStore()
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    kill_redeploy("before")
    run_try(lambda: patch_task(before["id"], []), context_for(1, store, run_started), server)
    colleague = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "app:colleague"}})
    newer = state.patch_deployment(before["id"], colleague)["latest_revision_id"]
    state.advance(LIVE)

    second = run_try(lambda: patch_task(before["id"], []), context_for(2, store, run_started), server)

    assert isinstance(second, AirflowFailException), second
    assert f"the latest is now {newer}" in str(second) and "Not sending it again" in str(second)
    assert state.count(REDEPLOY_ROUTE) == 0
    assert state.find_deployment(NAME)["active_revision_id"] == newer
