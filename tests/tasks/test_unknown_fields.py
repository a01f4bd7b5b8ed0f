"""Fields the provider does not know never stop a rollback (issue 28, item 1).

The emulator plays a newer service (``unknown_fields=True``): its deployments' ``resource_spec`` carries fields
the provider's models lack (``gpu_count``, ``autoscaling``, and ``terminationMessagePolicy`` inside a sidecar),
so do ``source_config``, the deployment and the revisions. A rollback restores what the rollout changed, no more:
an image rollout's rollback sends no ``resource_spec``; a ``resource_spec`` rollout's sends the whole current one
with the changed fields set back, the unknown ones passed through untouched; a ``"merge"`` rollout carries them
too. A field the user typed that the provider does not know is still refused before any request. Assertions are
on the emulator's own state (``EmulatorState.deployment``), the message, the XComs and the requests it got.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import Analysis, HttpCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.emulator.unknown_fields import CONFIG_FIELDS, SPEC_FIELDS
from airflow_provider.operators.deployment_service import (
    FleetRolloutOperator,
    PatchDeploymentOperator,
    RollbackDeploymentOperator,
)
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, FakeTI, make_context, run_deferred

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
SIDECAR = {"name": "proxy", "image": "envoy:1.30", "terminationMessagePolicy": "FallbackToLogsOnError"}
"""A sidecar with a field the provider's Container model lacks (one the service knows)."""
AUTOSCALING = {"metric": "rps", "target": 7, "window": {"seconds": 15}}
SPEC = {
    "cpu": 1,
    "cpu_limit": 2,
    "memory_mb": 512,
    "memory_limit_mb": 1024,
    "gpu_count": 2,
    "autoscaling": AUTOSCALING,
    "sidecars": [SIDECAR],
}
"""What each deployment serves with when a test starts, set through the service (its seed data takes only the
fields the provider knows): the service's fields neither at their initial values nor at their defaults."""
NAMES = ("svc", "fleet-0", "fleet-1")
SEED = {
    "deployments": [
        {
            "name": name,
            "source": "external_docker",
            "source_config": {"resource_spec": {"cpu": 1}},
            "source_revision_config": {"image_uri": OLD_IMAGE},
            "secrets": [{"name": "TOKEN", "value": "sv-Unknown-Fields-5d1a"}],
        }
        for name in NAMES
    ]
}
REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
DEFERRABLE = pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])


@pytest.fixture
def newer(service: Callable[..., Any]) -> Callable[..., Any]:
    """A real-time emulator of a newer service (``unknown_fields=True``) holding :data:`SEED`."""

    def start(**options: Any) -> Any:
        settings = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1, **options}
        emulator = service(data=SEED, unknown_fields=True, **settings)
        for name in NAMES:
            emulator.state.patch_deployment(view(emulator, name)["id"], {"source_config": {"resource_spec": SPEC}})
        emulator.state.advance(5)  # live
        emulator.state.reset_requests()
        return emulator

    return start


def view(emulator: Any, name: str = "svc") -> dict[str, Any]:
    """The deployment as the emulator's own state shows it (never through the provider's client)."""
    return dict(emulator.state.find_deployment(name))


def unknown_of(deployment: dict[str, Any]) -> dict[str, Any]:
    """The fields only the service knows, as a deployment shows them."""
    config = deployment["source_config"]
    spec = config["resource_spec"]
    return {
        **{name: spec.get(name) for name in SPEC_FIELDS},
        "sidecars": [item.get("terminationMessagePolicy") for item in spec.get("sidecars") or []],
        **{name: config.get(name) for name in CONFIG_FIELDS},
    }


def spec_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in deployment["source_config"]["resource_spec"].items() if value is not None}


def serving_image(deployment: dict[str, Any]) -> str:
    active = next(item for item in deployment["revisions"] if item["id"] == deployment["active_revision_id"])
    return str(active["source_revision_config"]["image_uri"])


def sent_patches(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every PATCH body the emulator gets from now on, as sent."""
    bodies: list[dict[str, Any]] = []
    patch = emulator.state.patch_deployment

    def spy(deployment_id: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        bodies.append(copy.deepcopy(body))
        result: dict[str, Any] = patch(deployment_id, body, **kwargs)
        return result

    monkeypatch.setattr(emulator.state, "patch_deployment", spy)
    return bodies


def patch_op(emulator: Any, *, deferrable: bool = False, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "deployment_id": view(emulator)["id"],
        "wait_for_rollout": True,
        "rollback_on_failure": True,
        "deferrable": deferrable,
        "poll_interval": 0.05,
        "timeout": 30,
        **kwargs,
    }
    return PatchDeploymentOperator(**options)


# ------------------------------------------------------------------------------------ the patch task
@DEFERRABLE
def test_an_image_rollout_verify_rejects_is_rolled_back_without_sending_resource_spec(
    newer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, deferrable: bool
) -> None:
    emulator = newer(disabled_endpoints=["redeploy"])  # the rollback patches the image back: its body is seen
    before = view(emulator)
    bodies = sent_patches(emulator, monkeypatch)
    ti = FakeTI()

    with pytest.raises(AirflowFailException) as raised:
        run_deferred(
            lambda: patch_op(emulator, deferrable=deferrable, image_uri=NEW_IMAGE, verify=lambda deployment: False),
            make_context(ti, FakeStore()),
        )

    after = view(emulator)
    bad = ti.xcoms["revision_id"]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the patch's revision and the rollback's
    assert after["active_revision_id"] == after["latest_revision_id"] not in (bad, before["active_revision_id"])
    assert after["status"] == "READY" and serving_image(after) == OLD_IMAGE
    assert spec_of(after) == spec_of(before)  # every field, the unknown ones included
    assert (
        unknown_of(after)
        == unknown_of(before)
        == {
            "gpu_count": 2,
            "autoscaling": AUTOSCALING,
            "sidecars": ["FallbackToLogsOnError"],
            **CONFIG_FIELDS,
        }
    )
    assert [body.get("source_config") for body in bodies] == [None, None]  # nor the rollout nor its rollback
    assert bodies[1]["source_revision_config"] == {"image_uri": OLD_IMAGE}
    message = str(raised.value)
    assert f"rolled back to revision {before['active_revision_id']} (patch)" in message
    assert "which serves again" in message and "except" not in message and "cannot carry" not in message


def test_an_image_rollout_failing_its_analysis_is_rolled_back_with_the_unknown_fields_intact(
    newer: Callable[..., Any],
) -> None:
    emulator = newer()
    before = view(emulator)
    emulator.state.mark_next_revision_unhealthy(before["id"])  # its app answers 500 once live
    health = HttpCheck(url=f"{emulator.root_url}/apps/{{deployment_id}}/health", name="app health")
    analysis = Analysis(checks=[health], interval_seconds=0.05, count=2)
    ti = FakeTI()

    with pytest.raises(AirflowFailException) as raised:
        run_deferred(
            lambda: patch_op(emulator, deferrable=True, image_uri=NEW_IMAGE, analysis=analysis),
            make_context(ti, FakeStore()),
        )

    after = view(emulator)
    assert after["status"] == "READY" and serving_image(after) == OLD_IMAGE
    assert after["active_revision_id"] == after["latest_revision_id"] != ti.xcoms["revision_id"]
    assert after["revisions"][-1]["redeploy_of"] == before["active_revision_id"]
    assert spec_of(after) == spec_of(before) and unknown_of(after) == unknown_of(before)
    assert emulator.state.count(PATCH_ROUTE) == 1 and emulator.state.count(REDEPLOY_ROUTE) == 1
    message = str(raised.value)
    assert "app health" in message and "(redeploy), which serves again" in message and "except" not in message


@DEFERRABLE
def test_a_resource_spec_rollout_is_rolled_back_restoring_what_it_changed(
    newer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, deferrable: bool
) -> None:
    emulator = newer()
    before = view(emulator)
    bodies = sent_patches(emulator, monkeypatch)
    ti, store = FakeTI(), FakeStore()

    with pytest.raises(AirflowFailException) as raised:
        run_deferred(
            lambda: patch_op(
                emulator,
                deferrable=deferrable,
                source_config={"resource_spec": {"cpu": 4, "memory_mb": 2048}},
                verify=lambda deployment: False,
            ),
            make_context(ti, store),
        )

    after = view(emulator)
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert after["active_revision_id"] == after["latest_revision_id"] == after["revisions"][-1]["id"]
    assert after["status"] == "READY" and serving_image(after) == OLD_IMAGE
    assert spec_of(after) == spec_of(before)  # cpu 1, memory 512 and their limits again, the unknown ones intact
    rollout, rollback = (body["source_config"]["resource_spec"] for body in bodies)
    assert (rollout["cpu"], rollout["memory_mb"], rollout["gpu_count"]) == (4, 2048, 2)  # merged, carried
    assert rollout["sidecars"] == [SIDECAR] and "cpu_limit" not in rollout  # below the new cpu: left out
    assert {key: rollback[key] for key in ("cpu", "cpu_limit", "memory_mb", "memory_limit_mb")} == {
        "cpu": 1,
        "cpu_limit": 2,
        "memory_mb": 512,
        "memory_limit_mb": 1024,
    }
    assert (rollback["gpu_count"], rollback["autoscaling"], rollback["sidecars"]) == (
        2,
        AUTOSCALING,
        [SIDECAR],
    )
    assert ti.xcoms["previous_resource_spec"]["gpu_count"] == 2  # what served before, as shown
    message = str(raised.value)
    assert "which serves again" in message and "except" not in message


def test_a_replacing_rollout_is_rolled_back_with_the_unknown_fields_it_dropped(newer: Callable[..., Any]) -> None:
    emulator = newer()
    before = view(emulator)
    ti = FakeTI()

    with pytest.raises(AirflowFailException) as raised:
        patch_op(
            emulator,
            source_config={"resource_spec": {"cpu": 4, "memory_mb": 2048}},
            resource_spec_mode="replace",
            verify=lambda deployment: False,
        ).execute(make_context(ti, FakeStore()))

    patched = next(
        item for item in emulator.state.find_deployment("svc")["revisions"] if item["id"] == ti.xcoms["revision_id"]
    )
    assert patched["status"] == "DEPLOYED"
    after = view(emulator)
    assert spec_of(after) == spec_of(before)  # gpu_count 2 and the sidecar back, not the service's defaults
    assert "which serves again" in str(raised.value) and "except" not in str(raised.value)


def test_a_merge_mode_rollout_carries_the_unknown_fields(
    newer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str]
) -> None:
    emulator = newer()
    before = view(emulator)
    bodies = sent_patches(emulator, monkeypatch)

    landed = patch_op(emulator, source_config={"resource_spec": {"cpu": 4}}).execute(make_context(FakeTI()))

    after = view(emulator)
    assert landed["active_revision_id"] == after["active_revision_id"] == after["latest_revision_id"]
    assert spec_of(after)["cpu"] == 4 and unknown_of(after) == unknown_of(before)
    (sent,) = (body["source_config"]["resource_spec"] for body in bodies)
    assert sent["gpu_count"] == 2 and sent["autoscaling"] == AUTOSCALING
    assert sent["sidecars"] == [SIDECAR]
    assert "autoscaling, gpu_count" in task_logs()  # named as carried through


def test_a_field_the_user_typed_is_still_refused_naming_it(newer: Callable[..., Any]) -> None:
    emulator = newer()
    typed = [
        ({"resource_spec": {"cpu": 2, "gpu_count": 2}}, "'source_config.resource_spec.gpu_count'"),
        (
            {"resource_spec": {"sidecars": [SIDECAR]}},
            "'source_config.resource_spec.sidecars[0].terminationMessagePolicy'",
        ),
        ({"region": "us-east-2"}, "'source_config.region'"),
    ]
    for source_config, named in typed:
        with pytest.raises(AirflowFailException, match="unknown field") as raised:
            patch_op(emulator, source_config=source_config).execute(make_context(FakeTI()))
        assert named in str(raised.value)
    with pytest.raises(AirflowFailException, match=r"'source_config\.resource_spec\.gpu_count'"):
        FleetRolloutOperator(
            task_id="fleet",
            deployment_names=["fleet-0"],
            source_config={"resource_spec": {"gpu_count": 1}},
            poll_interval=0.05,
            timeout=30,
        ).execute(make_context(FakeTI()))
    assert emulator.state.count(PATCH_ROUTE) == 0


# ------------------------------------------------------------------------------------ the rollback task
def rollback_op(emulator: Any, **kwargs: Any) -> RollbackDeploymentOperator:
    return RollbackDeploymentOperator(task_id="rollback", poll_interval=0.05, timeout=30, **kwargs)


def test_the_rollback_operator_restores_the_previous_resource_spec_it_is_given_whole(
    newer: Callable[..., Any],
) -> None:
    emulator = newer()
    before = view(emulator)
    previous = copy.deepcopy(before["source_config"]["resource_spec"])  # the patch task's XCom, as shown
    # Someone's patch replaced the resource_spec without the service's fields (reset to its defaults).
    patched = emulator.state.patch_deployment(before["id"], {"source_config": {"resource_spec": {"cpu": 4}}})
    emulator.state.advance(1)
    assert view(emulator)["source_config"]["resource_spec"]["gpu_count"] == 0
    ti = FakeTI()

    rollback_op(
        emulator,
        deployment_id=before["id"],
        revision_id=before["active_revision_id"],
        rolling_back_from=patched["latest_revision_id"],
        resource_spec=previous,
    ).execute(make_context(ti, FakeStore()))

    after = view(emulator)
    assert after["status"] == "READY" and after["active_revision_id"] == after["latest_revision_id"]
    assert spec_of(after) == spec_of(before) and unknown_of(after) == unknown_of(before)
    assert ti.xcoms["rollback_path"] == "patch" and ti.xcoms["not_restored"] == []


def test_fields_the_service_added_are_not_said_to_be_unrestored(newer: Callable[..., Any]) -> None:
    emulator = newer()
    before = view(emulator)
    patched = emulator.state.patch_deployment(before["id"], {"source_revision_config": {"image_uri": NEW_IMAGE}})
    emulator.state.advance(1)
    known = {key: value for key, value in SPEC.items() if key not in SPEC_FIELDS and key != "sidecars"}
    known["sidecars"] = [{"name": "proxy", "image": "envoy:1.30"}]  # as a user wrote it, without the service's key
    ti = FakeTI()

    rollback_op(
        emulator,
        deployment_id=before["id"],
        revision_id=before["active_revision_id"],
        rolling_back_from=patched["latest_revision_id"],
        resource_spec=known,
    ).execute(make_context(ti, FakeStore()))

    after = view(emulator)
    assert serving_image(after) == OLD_IMAGE and unknown_of(after) == unknown_of(before)
    assert ti.xcoms["rollback_path"] == "redeploy" and ti.xcoms["not_restored"] == []


# ------------------------------------------------------------------------------------ the fleet
@DEFERRABLE
def test_the_fleet_rolls_back_a_failing_deployment_with_the_unknown_fields_intact(
    newer: Callable[..., Any], deferrable: bool
) -> None:
    emulator = newer()
    before = {name: view(emulator, name) for name in ("fleet-0", "fleet-1")}
    ti = FakeTI()

    table = run_deferred(
        lambda: FleetRolloutOperator(
            task_id="fleet",
            deployment_names=["fleet-0", "fleet-1"],
            image_uri=NEW_IMAGE,
            source_config={"resource_spec": {"cpu": 2}},
            verify=lambda deployment: deployment.name != "fleet-1",
            rollback_on_failure=True,
            max_failures=1,
            deferrable=deferrable,
            poll_interval=0.05,
            timeout=30,
        ),
        make_context(ti, FakeStore()),
    )[0]

    rows = {row["name"]: row for row in table}
    assert rows["fleet-1"]["outcome"] == Outcome.ROLLED_BACK, rows["fleet-1"]
    assert "except" not in rows["fleet-1"]["message"]
    rolled_back = view(emulator, "fleet-1")
    assert rolled_back["status"] == "READY" and serving_image(rolled_back) == OLD_IMAGE
    assert spec_of(rolled_back) == spec_of(before["fleet-1"])
    assert rows["fleet-0"]["outcome"] == Outcome.LANDED
    landed = view(emulator, "fleet-0")
    assert serving_image(landed) == NEW_IMAGE and spec_of(landed)["cpu"] == 2
    assert unknown_of(landed) == unknown_of(before["fleet-0"])  # the merge carried them through
