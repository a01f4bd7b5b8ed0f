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
from collections.abc import Callable
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
from airflow_provider.triggers.deployment_service import DeploymentBakeTrigger
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
        if DIE_IN_VERIFY in verdicts:
            verdicts.remove(DIE_IN_VERIFY)
            raise WorkerKilled("worker killed while verify ran")
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
    before_trigger: Callable[[Any], None] | None = None,
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
        if before_trigger is not None:
            before_trigger(pending.trigger)
        _path, kwargs = pending.trigger.serialize()
        event = run_trigger(type(pending.trigger)(**json.loads(json.dumps(kwargs))))
        try:
            return getattr(make_task(), pending.method_name)(context, event, **(pending.kwargs or {}))
        except TaskDeferred as deferred:
            pending = deferred
        except (Exception, WorkerKilled) as err:
            return err


DIE_IN_VERIFY = "die in verify"
"""Put in ``verdicts`` to make the next verify call kill the worker (after recording the call)."""


@pytest.fixture
def kill_in(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], None]:
    """``kill(method, when)``: the worker dies in the next call of the hook's ``method`` (``patch_deployment``,
    ``redeploy_revision``), ``"before"`` it is sent or ``"after"`` the service processed it (before the task
    hears back)."""

    def arm(method: str, when: str) -> None:
        original = getattr(DeploymentServiceHook, method)
        armed = [when]

        def dying(hook: DeploymentServiceHook, *args: Any, **kwargs: Any) -> Deployment:
            if armed == ["before"]:
                armed.clear()
                raise WorkerKilled(f"worker killed before {method} was sent")
            result: Deployment = original(hook, *args, **kwargs)
            if armed == ["after"]:
                armed.clear()
                raise WorkerKilled(f"worker killed after {method} reached the service")
            return result

        monkeypatch.setattr(DeploymentServiceHook, method, dying)

    return arm


@pytest.fixture
def kill_redeploy(kill_in: Callable[[str, str], None]) -> Callable[[str], None]:
    """``kill(when)``: the worker dies in the next redeploy (see :func:`kill_in`)."""
    return lambda when: kill_in("redeploy_revision", when)


KILL_POINTS: dict[str, tuple[tuple[str, str] | None, str | None, bool]] = {
    # name: ((hook method, before/after) to die in, resume method the try is left deferred before, die in verify)
    "after the patch reached the service": (("patch_deployment", "after"), None, False),
    "deferred, waiting for the patch's revision": (None, "execute_complete", False),
    "while verify ran": (None, None, True),
    "before the rollback is sent": (("redeploy_revision", "before"), None, False),
    "after the rollback reached the service": (("redeploy_revision", "after"), None, False),
    "deferred, waiting for the rollback": (None, "execute_rollback_complete", False),
}
NOT_JUDGED_IN_TRY_1 = {"after the patch reached the service", "deferred, waiting for the patch's revision"}
"""Kill points before verify ran in try 1."""
VERIFIED_AGAIN = {"while verify ran"}
"""Kill points whose retry runs verify again (always: try 1 never finished judging the revision)."""
VERIFIED_AGAIN_WITHOUT_STORE = {"before the rollback is sent"}
"""Kill points whose retry runs verify again without a store (nothing says a rollback was about to go out)."""


@pytest.mark.parametrize("redeploy_mode", ["new_revision", "in_place"])
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_a_retry_after_the_automatic_rollback_ends_rolled_back_with_one_rollback(
    emulator: Callable[..., EmulatorServer],
    kill_in: Callable[[str, str], None],
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
    kill, stop_before, in_verify = KILL_POINTS[kill_point]
    if kill is not None:
        kill_in(*kill)
    if in_verify:
        verdicts.append(DIE_IN_VERIFY)

    first = run_try(
        lambda: patch_task(before["id"], verdicts), context_for(1, store, run_started), server, stop_before=stop_before
    )
    assert first is None or isinstance(first, WorkerKilled), first
    bad = state.find_deployment(NAME)["revisions"][revisions_before]["id"]
    judged_in_try_1 = kill_point not in NOT_JUDGED_IN_TRY_1
    assert verdicts == ([bad] if judged_in_try_1 else [])
    if store is not None and "rollback" in kill_point:
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
    # verify runs again on a retry only where try 1 left nothing saying it had judged the revision
    again = kill_point in VERIFIED_AGAIN or (kill_point in VERIFIED_AGAIN_WITHOUT_STORE and store is None)
    tries_verified = 2 if again else 1
    assert verdicts == [bad] * tries_verified
    ti = context["ti"]
    assert (ti.xcoms["revision_id"], ti.xcoms["previous_active_revision_id"]) == (bad, good)
    assert ti.xcoms["previous_source_revision_config"] == {"image_uri": OLD_IMAGE}
    assert context["outlet_events"]._dict == {}  # no asset event: nothing landed
    if store is not None:
        assert store.data[TASK_STATE_KEY]["rollback"]["phase"] == "sent"


@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
def test_a_retry_after_dying_in_the_bake_verifies_and_bakes_again_then_rolls_back_once(
    emulator: Callable[..., EmulatorServer], with_store: bool
) -> None:
    """Try 1's worker dies while its bake is deferred; try 2 reattaches, verifies and bakes again; the revision
    leaves READY during that bake: one rollback, and the task fails rolled back."""
    server = emulator()
    state = server.state
    before = state.find_deployment(NAME)
    store = FakeStore() if with_store else None
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    passed: list[str] = []

    def task() -> PatchDeploymentOperator:
        return patch_task(
            before["id"], [], verify=lambda d: passed.append(str(d.active_revision_id)) or True, bake_seconds=60
        )

    def leave_ready_in_the_bake(trigger: Any) -> None:
        if isinstance(trigger, DeploymentBakeTrigger):
            state.set_status(before["id"], "AWAITING_DATABASE")
        elif state.find_deployment(NAME)["status"] == "AWAITING_DATABASE":
            state.set_status(before["id"], "READY")

    first = run_try(task, context_for(1, store, run_started), server, stop_before="execute_bake_complete")
    assert first is None
    bad = state.find_deployment(NAME)["latest_revision_id"]
    context = context_for(2, store, run_started)
    second = run_try(task, context, server, before_trigger=leave_ready_in_the_bake)

    assert isinstance(second, AirflowFailException), second
    assert "left READY during the bake" in str(second)
    assert f"rolled back to revision {before['active_revision_id']} (" in str(second)
    assert passed == [bad, bad]  # verified in both tries
    after = state.find_deployment(NAME)
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert state.count(PATCH_ROUTE) == 1 and state.count(REDEPLOY_ROUTE) == 1
    assert after["active_revision_id"] == after["revisions"][-1]["id"] != bad
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE and after["status"] == "READY"
    assert context["outlet_events"]._dict == {}


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


@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize(
    "kill_point", ["after the patch reached the service", "deferred, waiting for the patch's revision"]
)
def test_a_retry_after_the_build_failed_reports_it_again_without_patching_again(
    emulator: Callable[..., EmulatorServer],
    kill_in: Callable[[str, str], None],
    capfd: pytest.CaptureFixture[str],
    kill_point: str,
    with_store: bool,
) -> None:
    """Try 1 patches and dies; its revision fails its build. Try 2 must not build the same change a second
    time: it fails as try 1 would have (the build log's tail in the log), saying the earlier try's revision
    failed and what builds again."""
    server = emulator()
    state = server.state
    before = state.find_deployment(NAME)
    store = FakeStore() if with_store else None
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    state.fail_next_build(before["id"], message="no such image: registry.example.com/acme/checkout-api:6.6.6")
    kill, stop_before, _ = KILL_POINTS[kill_point]
    if kill is not None:
        kill_in(*kill)
    first = run_try(
        lambda: patch_task(before["id"], []), context_for(1, store, run_started), server, stop_before=stop_before
    )
    assert first is None or isinstance(first, WorkerKilled), first
    state.advance(LIVE)
    failed = state.find_deployment(NAME)["latest_revision_id"]
    capfd.readouterr()

    context = context_for(2, store, run_started)
    second = run_try(lambda: patch_task(before["id"], []), context, server)

    after = state.find_deployment(NAME)
    assert len(after["revisions"]) == len(before["revisions"]) + 1 and state.count(PATCH_ROUTE) == 1
    assert [revision["status"] for revision in after["revisions"]][-1] == "BUILD_FAILED"
    assert after["active_revision_id"] == before["active_revision_id"] and after["status"] == "READY"
    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"not patching again on this retry: deployment {NAME!r}" in message
    assert f"revision {failed} ended with status BUILD_FAILED" in message
    assert "an earlier try of this task" in message and "A new DAG run (or a changed patch) builds again" in message
    out = capfd.readouterr().out
    assert f"line(s) of the build log of revision {failed}" in out and "no such image" in out
    ti = context["ti"]
    assert (ti.xcoms["revision_id"], ti.xcoms["previous_active_revision_id"]) == (failed, before["active_revision_id"])
    assert OPERATOR_SECRET not in message + out


EXTERNAL = "billing-worker-prod"
"""external_docker, resource_spec {min_scale 2, max_scale 6, cpu 1.5, memory_mb 2048, db_storage_gi 20}."""
FIELDLESS_CHANGES: dict[str, dict[str, Any]] = {
    "resource_spec": {"source_config": {"resource_spec": {"cpu": 4, "memory_mb": 8192}}},
    "secrets": {"secrets": {"TOKEN": OPERATOR_SECRET}},
}
"""Patches that set no revision field: their revision shows the same build as the one before it."""


def fieldless_patch(deployment_id: str, change: str, verdicts: list[str]) -> PatchDeploymentOperator:
    """A patch of only ``resource_spec`` or only secrets whose verify fails."""
    return patch_task(deployment_id, verdicts, **{"image_uri": None, "secrets": None, **FIELDLESS_CHANGES[change]})


@pytest.mark.parametrize("unknown_fields", [False, True], ids=["known fields", "newer service"])
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no store"])
@pytest.mark.parametrize("change", list(FIELDLESS_CHANGES))
def test_a_retry_finds_the_revision_of_a_patch_whose_answer_was_lost_and_rolls_it_back(
    emulator: Callable[..., EmulatorServer],
    kill_in: Callable[[str, str], None],
    change: str,
    with_store: bool,
    unknown_fields: bool,
) -> None:
    """Try 1 dies right after its PATCH reached the service, before recording it (or with no store): the
    revision list shows one revision made since the DAG run started, which shows this patch, and the revision
    made before the run served. Try 2 (the revision serves by then) judges that revision, rolls it back to the
    one that served (once) and fails rolled back; before, it took the patch for one that made no revision
    (resource_spec) or found no revision that served before it (secrets), and could not roll back. Against a
    newer service (fields the provider does not know in each ``source_revision_config``) the config it restores
    holds only the fields a patch can name (before: refused, "source_revision_config has unknown field(s)
    build_platform")."""
    server = emulator(unknown_fields=unknown_fields)
    state = server.state
    before = state.find_deployment(EXTERNAL)
    good = before["active_revision_id"]
    store = FakeStore() if with_store else None
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    verdicts: list[str] = []
    kill_in("patch_deployment", "after")
    first = run_try(lambda: fieldless_patch(before["id"], change, verdicts), context_for(1, store, run_started), server)
    assert isinstance(first, WorkerKilled), first
    assert store is None or TASK_STATE_KEY not in store.data  # it died before recording the patch
    patched = state.find_deployment(EXTERNAL)["latest_revision_id"]
    state.advance(LIVE)  # Airflow's retry delay: the patch's revision serves by the time try 2 starts

    context = context_for(2, store, run_started)
    second = run_try(lambda: fieldless_patch(before["id"], change, verdicts), context, server)

    after = state.find_deployment(EXTERNAL)
    assert len(after["revisions"]) == len(before["revisions"]) + 2, second
    assert state.count(PATCH_ROUTE) == 1 and state.count(REDEPLOY_ROUTE) == 1
    assert verdicts == [patched]  # try 2 judged the patch's revision
    assert after["active_revision_id"] == after["latest_revision_id"] == after["revisions"][-1]["id"] != patched
    assert after["status"] == "READY" and after["source_revision_config"] == before["source_revision_config"]
    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"revision {patched} went live but verify returned False; rolled back to revision {good} (redeploy)" in (
        message
    )
    ti = context["ti"]
    assert (ti.xcoms["revision_id"], ti.xcoms["previous_active_revision_id"]) == (patched, good)
    if change == "resource_spec":  # its previous value was never recorded: the rollback says so
        assert "except: resource_spec (unknown: not recorded before the patch" in message
    else:  # the patch did not touch resource_spec: nothing of it to restore, nor to call unknown
        assert message.endswith(
            "except: secrets TOKEN (the rollback cannot restore secret values; the deployment keeps the new ones)"
        ), message
        assert ti.xcoms["previous_resource_spec"] == _spec(before)
    assert OPERATOR_SECRET not in message


def _spec(deployment: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in deployment["source_config"]["resource_spec"].items() if value is not None}


@pytest.mark.parametrize("redeploy_mode", ["new_revision", "in_place"])
def test_without_a_store_an_image_patch_found_rolled_back_is_rolled_back_whole(
    emulator: Callable[..., EmulatorServer], kill_in: Callable[[str, str], None], redeploy_mode: str
) -> None:
    """An image-only patch does not touch resource_spec: when a retry without a record finds the earlier try's
    rollback, the previous build serves with the resource_spec it had, and the task says "rolled back" with
    nothing left undone (before: "except: resource_spec (unknown: not recorded ...)")."""
    server = emulator(redeploy_mode=redeploy_mode)
    state = server.state
    before = state.find_deployment(EXTERNAL)
    good = before["active_revision_id"]
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    kill_in("redeploy_revision", "after")
    first = run_try(lambda: patch_task(before["id"], [], secrets=None), context_for(1, None, run_started), server)
    assert isinstance(first, WorkerKilled), first
    state.advance(LIVE)

    context = context_for(2, None, run_started)
    second = run_try(lambda: patch_task(before["id"], [], secrets=None), context, server)

    after = state.find_deployment(EXTERNAL)
    made = 2 if redeploy_mode == "new_revision" else 1
    assert len(after["revisions"]) == len(before["revisions"]) + made and state.count(REDEPLOY_ROUTE) == 1
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert _spec(after) == _spec(before) and after["status"] == "READY"
    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"rolled back to revision {good} (redeploy, an earlier try's, found on the service)" in message
    assert f"which serves again as revision {after['active_revision_id']}" in message and "except" not in message
    assert context["ti"].xcoms["previous_resource_spec"] == _spec(before)


def test_without_a_store_a_secrets_patch_that_cannot_be_told_names_the_secrets_the_deployment_may_keep(
    emulator: Callable[..., EmulatorServer], kill_in: Callable[[str, str], None]
) -> None:
    """Try 1 patched secrets only, verify failed, its rollback reached the service and the worker died: two
    revisions of the same build since the run started, which no evidence tells apart (the patch's and the
    rollback's, or someone else's). Try 2 fails loudly without patching, and says the deployment may still
    carry the patch's secrets (by name), which no rollback restores."""
    server = emulator()
    state = server.state
    before = state.find_deployment(NAME)
    run_started = datetime.now(timezone.utc) - timedelta(minutes=1)
    kill_in("redeploy_revision", "after")
    first = run_try(lambda: fieldless_patch(before["id"], "secrets", []), context_for(1, None, run_started), server)
    assert isinstance(first, WorkerKilled), first
    state.advance(LIVE)

    second = run_try(lambda: fieldless_patch(before["id"], "secrets", []), context_for(2, None, run_started), server)

    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert "not patching on this retry" in message
    assert "The deployment may still carry this patch's secrets TOKEN (the values it sent" in message
    assert OPERATOR_SECRET not in message
    after = state.find_deployment(NAME)
    assert len(after["revisions"]) == len(before["revisions"]) + 2 and state.count(PATCH_ROUTE) == 1
    assert [secret["name"] for secret in after["secrets"]] == ["TOKEN"]  # what the message warns about
