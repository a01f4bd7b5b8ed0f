"""The patch task's resumes (issue 22, item 1): whatever ``execute_complete``, ``execute_bake_complete`` and
``execute_rollback_complete`` need survives a resume that drops the ``defer()`` kwargs, as ``dag.test()``
does in Airflow 3.3 (the trigger carries it back in its event); a resume that lacks it fails, never succeeds.

Each deferrable run is driven twice: as the real triggerer resumes (kwargs merged) and as ``dag.test()``
does (``{"event": payload}`` only). Assertions are on the emulator's real state."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider.models import Deployment
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.triggers.deployment_service import DeploymentBakeTrigger, DeploymentRolloutTrigger
from tests.tasks.conftest import (
    SECRET,
    FakeStore,
    FakeTI,
    deployment_named,
    make_context,
    run_trigger,
    scan_for_secret,
)

DOCKER = "checkout-api-staging"  # internal_docker, image registry.example.com/acme/checkout-api:0.4.0
OLD_IMAGE = "registry.example.com/acme/checkout-api:0.4.0"
NEW_IMAGE = "registry.example.com/acme/checkout-api:2"
RESUMES = pytest.mark.parametrize(
    "merged", [True, False], ids=["kwargs merged (triggerer)", "kwargs dropped (dag.test)"]
)


def patch_op(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "image_uri": NEW_IMAGE,
        "secrets": {"TOKEN": SECRET},
        "wait_for_rollout": True,
        "deferrable": True,
        "poll_interval": 0.05,
        "timeout": 30,
        **kwargs,
    }
    return PatchDeploymentOperator(deployment_id=deployment_id, **options)


def drive(
    make_task: Callable[[], PatchDeploymentOperator],
    context: dict[str, Any],
    *,
    merged: bool,
    before_trigger: Callable[[Any], None],
) -> tuple[Any, list[tuple[str, Any]]]:
    """Run a deferrable patch task to its end: each trigger rebuilt from its serialized (JSON) arguments,
    each resume on a fresh operator, with the defer kwargs merged or dropped. Returns the result (or the
    exception raised at the end) and ``(method resumed, trigger)`` of every deferral."""
    deferrals: list[tuple[str, Any]] = []
    try:
        return make_task().execute(context), deferrals
    except TaskDeferred as deferred:
        pending = deferred
    while True:
        _path, trigger_kwargs = pending.trigger.serialize()
        json.dumps(trigger_kwargs)
        scan_for_secret(trigger_kwargs, pending.kwargs or {})
        deferrals.append((pending.method_name, pending.trigger))
        before_trigger(pending.trigger)
        event = run_trigger(type(pending.trigger)(**trigger_kwargs))
        resume_kwargs = dict(pending.kwargs or {}) if merged else {}
        try:
            return getattr(make_task(), pending.method_name)(context, event, **resume_kwargs), deferrals
        except TaskDeferred as deferred:
            pending = deferred
        except Exception as err:  # the task's verdict
            return err, deferrals


def settle(emulator: Any) -> Callable[[Any], None]:
    """Before each trigger runs: let the emulated builds finish (frozen clock)."""
    return lambda trigger: emulator.state.advance(3.5)


@RESUMES
def test_a_failed_verify_rolls_back_whether_or_not_the_kwargs_come_back(emulator: Any, merged: bool) -> None:
    dep = deployment_named(emulator, DOCKER)
    good, revisions_before = dep["active_revision_id"], len(dep["revisions"])
    seen: list[str | None] = []

    def verify(deployment: Deployment) -> bool:
        seen.append(deployment.active_revision_id)
        return False

    ti = FakeTI()
    outcome, deferrals = drive(
        lambda: patch_op(dep["id"], verify=verify, rollback_on_failure=True),
        make_context(ti),
        merged=merged,
        before_trigger=settle(emulator),
    )
    bad = ti.xcoms["revision_id"]
    assert [method for method, _ in deferrals] == ["execute_complete", "execute_rollback_complete"]
    assert isinstance(outcome, AirflowFailException), outcome
    assert f"revision {bad} went live but verify returned False" in str(outcome)
    assert f"rolled back to revision {good} (redeploy)" in str(outcome)
    assert seen == [bad]  # verify ran, on the new revision
    now = deployment_named(emulator, DOCKER)
    assert len(now["revisions"]) == revisions_before + 2  # the bad revision and the rollback's
    assert now["active_revision_id"] == now["latest_revision_id"] == now["revisions"][-1]["id"]
    assert now["source_revision_config"]["image_uri"] == OLD_IMAGE and now["status"] == "READY"
    assert f"as revision {now['active_revision_id']}, except: secrets TOKEN (the rollback cannot restore" in str(
        outcome
    )


@RESUMES
def test_a_bake_the_revision_leaves_rolls_back_whether_or_not_the_kwargs_come_back(emulator: Any, merged: bool) -> None:
    dep = deployment_named(emulator, DOCKER)
    good = dep["active_revision_id"]

    def before_trigger(trigger: Any) -> None:
        emulator.state.advance(3.5)
        if isinstance(trigger, DeploymentBakeTrigger):  # the new revision drops out of READY during its bake
            emulator.state.set_status(dep["id"], "AWAITING_DATABASE")
        elif deployment_named(emulator, DOCKER)["status"] == "AWAITING_DATABASE":  # back for the rollback
            emulator.state.set_status(dep["id"], "READY")

    ti = FakeTI()
    outcome, deferrals = drive(
        lambda: patch_op(dep["id"], bake_seconds=60, rollback_on_failure=True),
        make_context(ti),
        merged=merged,
        before_trigger=before_trigger,
    )
    assert [method for method, _ in deferrals] == [
        "execute_complete",
        "execute_bake_complete",
        "execute_rollback_complete",
    ]
    assert isinstance(outcome, AirflowFailException), outcome
    assert "left READY during the bake" in str(outcome) and f"rolled back to revision {good}" in str(outcome)
    now = deployment_named(emulator, DOCKER)
    assert now["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert now["active_revision_id"] == now["revisions"][-1]["id"] != ti.xcoms["revision_id"]


@RESUMES
def test_a_verified_and_baked_revision_lands_whether_or_not_the_kwargs_come_back(emulator: Any, merged: bool) -> None:
    dep = deployment_named(emulator, DOCKER)
    ti = FakeTI()
    outcome, deferrals = drive(
        lambda: patch_op(dep["id"], verify=lambda d: True, bake_seconds=0.2, rollback_on_failure=True),
        make_context(ti),
        merged=merged,
        before_trigger=settle(emulator),
    )
    assert [type(trigger) for _, trigger in deferrals] == [DeploymentRolloutTrigger, DeploymentBakeTrigger]
    assert isinstance(outcome, dict), outcome
    now = deployment_named(emulator, DOCKER)
    assert outcome["active_revision_id"] == now["active_revision_id"] == ti.xcoms["revision_id"]
    assert now["source_revision_config"]["image_uri"] == NEW_IMAGE
    assert len(now["revisions"]) == len(dep["revisions"]) + 1


def test_the_triggers_carry_what_the_resume_needs_and_no_secret(emulator: Any) -> None:
    dep = deployment_named(emulator, DOCKER)
    with pytest.raises(TaskDeferred) as deferred:
        patch_op(dep["id"], verify=lambda d: False, rollback_on_failure=True).execute(make_context(FakeTI()))
    _path, kwargs = deferred.value.trigger.serialize()
    assert kwargs["carry"] == deferred.value.kwargs and kwargs["carry"]["landing"]["previous_active_revision_id"]
    emulator.state.advance(3.5)
    event = run_trigger(DeploymentRolloutTrigger(**kwargs))
    assert event["status"] == "success" and event["carry"] == deferred.value.kwargs
    scan_for_secret(kwargs, event)


# --------------------------------------------------------------------------------- nothing to go on
def event_without_carry(emulator: Any, deployment_id: str, status: str = "success") -> dict[str, Any]:
    live = emulator.state.deployment(deployment_id)
    return {
        "status": status,
        "message": "live",
        "deployment_id": deployment_id,
        "revision_id": live["latest_revision_id"],
        "deployment": live,
    }


def test_a_resume_without_the_landing_fails_instead_of_skipping_verify(emulator: Any) -> None:
    dep = deployment_named(emulator, DOCKER)
    seen: list[Any] = []
    task = patch_op(dep["id"], verify=lambda d: seen.append(d) or True, rollback_on_failure=True)
    with pytest.raises(TaskDeferred):
        task.execute(make_context(FakeTI()))
    emulator.state.advance(3.5)
    missing = r"resumed without deployment_id, revision_id, previous_active"
    with pytest.raises(AirflowException, match=missing) as raised:
        patch_op(dep["id"], verify=lambda d: seen.append(d) or True).execute_complete(
            make_context(FakeTI()), event_without_carry(emulator, dep["id"])
        )
    assert not isinstance(raised.value, AirflowFailException)  # a retry reattaches and judges the revision
    assert "not declared landed" in str(raised.value) and seen == []


def test_a_resume_without_the_landing_takes_it_from_task_state_store(emulator: Any) -> None:
    """A trigger serialized without the carry (an earlier provider version) resumes with neither: the task's
    own record of the patch says what to judge, and verify runs."""
    dep = deployment_named(emulator, DOCKER)
    store, seen = FakeStore(), []
    ti = FakeTI()
    with pytest.raises(TaskDeferred):
        patch_op(dep["id"], verify=lambda d: False).execute(make_context(ti, store))
    emulator.state.advance(3.5)
    task = patch_op(dep["id"], verify=lambda d: seen.append(d.active_revision_id) or False)
    with pytest.raises(AirflowFailException, match="went live but verify returned False; not rolling back"):
        task.execute_complete(make_context(FakeTI(), store), event_without_carry(emulator, dep["id"]))
    assert seen == [ti.xcoms["revision_id"]]


def test_a_bake_resume_without_the_landing_fails(emulator: Any) -> None:
    dep = deployment_named(emulator, DOCKER)
    event = {**event_without_carry(emulator, dep["id"]), "status": "left", "message": "left READY"}
    with pytest.raises(AirflowException, match="execute_bake_complete resumed without"):
        patch_op(dep["id"], bake_seconds=5, rollback_on_failure=True).execute_bake_complete(
            make_context(FakeTI()), event
        )


def test_a_rollback_resume_without_its_record_still_fails_saying_what_it_lacks(emulator: Any) -> None:
    dep = deployment_named(emulator, DOCKER)
    with pytest.raises(AirflowFailException, match="resumed without landing and rollback"):
        patch_op(dep["id"], verify=lambda d: False, rollback_on_failure=True).execute_rollback_complete(
            make_context(FakeTI()), event_without_carry(emulator, dep["id"])
        )


@RESUMES
def test_a_verify_error_quoting_a_secret_is_scrubbed_after_a_resume(
    emulator: Any, merged: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """verify runs after the task resumed, on a fresh operator that never resolved the secrets: its error text
    quoting a secret value must still be scrubbed from the failure, the log and the rollback's record (before:
    the resume knew no secret values, and the text went out as raised)."""
    dep = deployment_named(emulator, DOCKER)

    def verify(deployment: Deployment) -> bool:
        raise ValueError(f"the smoke test's login with {SECRET} was refused")

    ti, store = FakeTI(), FakeStore()
    outcome, deferrals = drive(
        lambda: patch_op(dep["id"], verify=verify, rollback_on_failure=True),
        make_context(ti, store),
        merged=merged,
        before_trigger=settle(emulator),
    )
    assert [method for method, _ in deferrals] == ["execute_complete", "execute_rollback_complete"]
    assert isinstance(outcome, AirflowFailException), outcome
    assert "verify raised ValueError: the smoke test's login with ********** was refused" in str(outcome)
    scan_for_secret(str(outcome), capfd.readouterr().out, store.data, ti.xcoms)
