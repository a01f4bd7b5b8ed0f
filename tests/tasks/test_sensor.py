"""DeploymentRolloutSensor against the emulator over HTTP."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout, TaskDeferred

from airflow_provider.client import AuthError
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor
from airflow_provider.tasks.waiting import RolloutCheck
from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger
from tests.tasks.conftest import LIST_ROUTE, REVISION_ROUTE, deployment_named, make_context


def patch(emulator: Any, deployment_id: str, image: str = "registry.example.com/app:2") -> str:
    body = PatchDeploymentRequest(revision_source="internal_docker", source_revision_config={"image_uri": image})
    return str(emulator.state.patch_deployment(deployment_id, body)["latest_revision_id"])


_MADE: list[DeploymentRolloutSensor] = []


def sensor(deployment_id: str, revision_id: str | None = None, **kwargs: Any) -> DeploymentRolloutSensor:
    options: dict[str, Any] = {"task_id": "wait", "poll_interval": 0.05, "timeout": 5, **kwargs}
    task = DeploymentRolloutSensor(deployment_id=deployment_id, revision_id=revision_id, **options)
    _MADE.append(task)
    return task


@pytest.fixture(autouse=True)
def _close_hooks() -> Iterator[None]:
    """Tests that call ``poke`` directly skip ``execute``, which closes the hook: close it here."""
    yield
    while _MADE:
        check = _MADE.pop()._check
        if check is not None:
            check.hook.close()


def test_template_fields_and_defaults() -> None:
    task = DeploymentRolloutSensor(task_id="wait", deployment_id="{{ params.dep }}")
    fields = {"deployment_id", "deployment_name", "revision_id", "deployment_service_conn_id"}
    assert set(task.template_fields) == fields
    assert task.deployment_id == "{{ params.dep }}"
    assert task.deployment_service_conn_id == "deployment_service_default"
    assert task.deferrable is False
    assert task.poll_interval == task.poke_interval == 30
    with pytest.raises(ValueError, match="poll_interval"):
        DeploymentRolloutSensor(task_id="w", deployment_id="{{ params.dep }}", poll_interval=0)
    with pytest.raises(ValueError, match="not both"):
        DeploymentRolloutSensor(task_id="w", deployment_id="{{ params.dep }}", poll_interval=5, poke_interval=5)


def test_stale_ready_does_not_succeed(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = sensor(dep["id"], revision_id)
    context = make_context()
    for _ in range(3):
        assert task.poke(context) is False  # READY, but the old revision still serves
    emulator.state.advance(2.5)
    done = task.poke(context)
    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value["active_revision_id"] == revision_id
    assert done.xcom_value["secrets"][0]["value"] == "**********"


def test_execute_in_poke_mode_returns_the_deployment(emulator: Any, advance_later: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    advance_later(emulator, 2.5, 0.2)
    result = sensor(dep["id"], revision_id).execute(make_context())
    assert result["id"] == dep["id"] and result["active_revision_id"] == revision_id


@pytest.mark.parametrize("case", ["deleted", "awaiting_delete", "superseded", "build_failed"])
def test_fails_fast(emulator: Any, case: str) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    if case == "build_failed":
        emulator.state.fail_next_build(dep["id"], "BUILD_FAILED")
    revision_id = patch(emulator, dep["id"])
    expected = {
        "deleted": "disappeared",
        "awaiting_delete": "AWAITING_DELETE",
        "superseded": "superseded by",
        "build_failed": "BUILD_FAILED",
    }[case]
    if case == "deleted":
        emulator.state.delete_deployment(dep["id"])
    elif case == "awaiting_delete":
        emulator.state.set_status(dep["id"], "AWAITING_DELETE")
    elif case == "superseded":
        patch(emulator, dep["id"], "app:newer")
    else:
        emulator.state.advance(2.5)
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match=expected):
        sensor(dep["id"], revision_id, timeout=30).execute(make_context())
    # Fast means at the first look, not at the 30 s timeout: a bound far below it and far above a loaded
    # machine's scheduling noise (2 s failed once with two other test processes on the two cores).
    assert time.monotonic() - started < 10


def test_build_failure_without_revision_endpoint_falls_back(service: Any, capfd: pytest.CaptureFixture[str]) -> None:
    emulator = service(optional_endpoints=False)
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = sensor(dep["id"], revision_id, revision_check_interval=0)
    context = make_context()
    for _ in range(4):
        assert task.poke(context) is False
    asked = [r for r in emulator.state.request_log if "/revisions/" in r.path]
    assert [r.status_code for r in asked] == [404]  # asked once, then never again
    emulator.state.advance(2.5)
    assert task.poke(context)
    out, err = capfd.readouterr()
    assert (out + err).count("revision endpoint is not available") == 1


def test_one_failed_revision_check_does_not_turn_fail_fast_off(
    emulator: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "npm ci exited with 1")
    revision_id = patch(emulator, dep["id"])
    # a 200 whose body is not JSON: a non-transient error that says nothing about the endpoint existing
    emulator.state.add_fault(kind="not_json", method="GET", path="/v2/deployments/*/revisions/*")
    task = sensor(dep["id"], revision_id, revision_check_interval=0)
    context = make_context()
    assert task.poke(context) is False  # the revision check failed: skipped, not switched off
    emulator.state.advance(2.5)
    with pytest.raises(AirflowFailException, match="BUILD_FAILED: npm ci exited with 1"):
        task.poke(context)
    out, err = capfd.readouterr()
    assert "asking again when the deployment changes" in out + err


def test_transient_errors_are_retried_on_the_next_poke(emulator: Any, capfd: pytest.CaptureFixture[str]) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.add_fault(kind="status", status_code=503, method="GET", path="/v2/deployments", count=2)
    task = sensor(dep["id"], max_attempts=1)
    context = make_context()
    assert task.poke(context) is False
    assert task.poke(context) is False
    assert task.poke(context)
    out, err = capfd.readouterr()
    assert (out + err).count("the service is unavailable") == 1  # once per state change
    assert emulator.state.count(LIST_ROUTE) == 3


def test_auth_errors_are_not_retried(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.add_fault(kind="status", status_code=403, method="GET", path="/v2/deployments", count=1)
    with pytest.raises(AuthError, match="403"):
        sensor(dep["id"]).poke(make_context())
    assert emulator.state.count(LIST_ROUTE) == 1


def test_invalid_ids_fail_before_any_request(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    with pytest.raises(AirflowFailException, match="revision_id"):
        sensor(dep["id"], "not-a-revision").execute(make_context())
    assert emulator.state.counters == {}


def test_revision_rendered_as_none_means_no_revision(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    result = sensor(dep["id"], "None").execute(make_context())  # e.g. an xcom_pull of a missing revision
    assert result["status"] == "READY"


def test_timeout_in_poke_mode(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    with pytest.raises(AirflowSensorTimeout, match="still serves"):
        sensor(dep["id"], revision_id, timeout=0.3).execute(make_context())


def test_final_check_after_the_deadline(emulator: Any) -> None:
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    hook = DeploymentServiceHook()
    check = RolloutCheck(hook, dep["id"], revision_id, 60, logging.getLogger("test"))

    def sleep_then_finish_build(seconds: float) -> None:
        time.sleep(seconds)
        emulator.state.advance(2.5)  # the rollout finishes just as the deadline passes

    # the only look before the deadline sees it building; the final look after it sees it live
    try:
        result = check.wait(poll_interval=10, timeout=0.1, sleep=sleep_then_finish_build)
    finally:
        hook.close()
    assert result["active_revision_id"] == revision_id
    assert emulator.state.count(LIST_ROUTE) == 2


def test_deferrable_succeeds_at_once_when_already_live(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    result = sensor(dep["id"], dep["active_revision_id"], deferrable=True).execute(make_context())
    assert result["id"] == dep["id"]
    assert emulator.state.count(LIST_ROUTE) == 1


def test_deferrable_fails_fast_without_deferring(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.set_status(dep["id"], "AWAITING_DELETE")
    with pytest.raises(AirflowFailException, match="AWAITING_DELETE"):
        sensor(dep["id"], deferrable=True).execute(make_context())


async def test_deferral_carries_every_setting_and_resumes(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = sensor(
        dep["id"].upper(),
        revision_id,
        deferrable=True,
        timeout=600,
        poll_interval=0.05,
        revision_check_interval=15,
        read_timeout=5,
        max_attempts=3,
    )
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(make_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeploymentRolloutTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=660)
    _, kwargs = trigger.serialize()
    deadline = kwargs.pop("deadline")
    assert before + 600 <= deadline <= time.time() + 600
    assert kwargs.pop("seen_key")[0] == "waiting"  # what the sensor's own look logged
    assert kwargs == {
        "deployment_id": dep["id"],
        "revision_id": revision_id,
        "hook_params": {
            "deployment_service_conn_id": "deployment_service_default",
            "read_timeout": 5,
            "max_attempts": 3,
        },
        "poll_interval": 0.05,
        "revision_check_interval": 15.0,
        "allowed_latest_revision_id": None,
        "carry": None,
    }
    emulator.state.advance(2.5)
    events = [event async for event in trigger.run()]
    result = task.execute_complete(make_context(), events[0].payload)
    assert result["active_revision_id"] == revision_id


@pytest.mark.parametrize(
    ("status", "error"),
    [("failed", AirflowFailException), ("timeout", AirflowSensorTimeout), ("error", AirflowException)],
)
def test_execute_complete_raises_what_the_event_says(status: str, error: type[Exception]) -> None:
    dep = "8d12e254-9195-47ca-94ec-20051ae2fc1b"
    event = {"status": status, "message": f"it {status}", "deployment_id": dep, "revision_id": None, "deployment": None}
    with pytest.raises(error, match=f"it {status}") as raised:
        sensor(dep).execute_complete(make_context(), event)
    if status == "error":
        assert not isinstance(raised.value, AirflowFailException)  # may be a passing outage: retries apply
    with pytest.raises(AirflowException, match="unexpected event"):
        sensor(dep).execute_complete(make_context(), {"status": "weird"})


def test_revision_route_is_used_for_fast_failure(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    revision_id = patch(emulator, dep["id"])
    task = sensor(dep["id"], revision_id, revision_check_interval=60)
    context = make_context()
    for _ in range(3):
        assert task.poke(context) is False
    assert emulator.state.count(REVISION_ROUTE) == 1  # nothing changed between pokes: asked once
