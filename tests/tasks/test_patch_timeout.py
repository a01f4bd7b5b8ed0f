"""A patch whose revision does not go live within ``timeout`` (issue 28, item 3).

The build is slower than the task's ``timeout``: the task gives up waiting while the service still builds the new
revision, which goes live later. With ``rollback_on_failure`` the task restores the previous configuration
(recorded before the request, the same rollback as for a failed verify) so that the new revision does not end up
serving, and its failure says so; without it, the failure names the revision that may still go live.

The emulator's clock is frozen, so the build never ends while the task waits (in real time); after the task
failed the test moves the emulator's clock past the build and looks at what serves. The service builds one
revision at a time: the rollback's revision is deployed after the new one, which serves in between (for the
rollback's deploy time); what the tests pin is where the deployment ends up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout

from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json
from tests.tasks.test_patch_analysis import PATHS, context_with_events, emitted, run

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
BUILD_SECONDS = 60.0
"""The emulator's build time (emulated seconds): far longer than the task's timeout."""
SEED = {
    "deployments": [
        {"name": "svc", "source": "external_docker", "source_revision_config": {"image_uri": OLD_IMAGE}},
    ]
}


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A frozen-clock emulator holding ``svc`` (serving OLD_IMAGE) whose builds take a minute."""
    server = deployment_service_emulator_factory(data=SEED, build_seconds=BUILD_SECONDS, ready_seconds=0.0)
    server.state.advance(1)  # the seeded revision is live
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def svc(emulator: Any) -> dict[str, Any]:
    return dict(emulator.state.find_deployment("svc"))


def patch_op(*, deferrable: bool, rollback_on_failure: bool, emulator: Any) -> PatchDeploymentOperator:
    return PatchDeploymentOperator(
        task_id="patch",
        deployment_id=svc(emulator)["id"],
        image_uri=NEW_IMAGE,
        wait_for_rollout=True,
        rollback_on_failure=rollback_on_failure,
        deferrable=deferrable,
        poll_interval=0.05,
        timeout=0.5,
    )


@PATHS
def test_a_timeout_with_rollback_on_failure_rolls_back_so_the_new_revision_does_not_end_up_serving(
    emulator: Any, path: str
) -> None:
    before = svc(emulator)
    ti, store = FakeTI(), FakeStore()
    context = context_with_events(ti, store)

    outcome, _ = run(
        lambda: patch_op(deferrable=path != "worker", rollback_on_failure=True, emulator=emulator), context, path
    )

    new = ti.xcoms["revision_id"]
    assert isinstance(outcome, AirflowSensorTimeout), outcome
    message = str(outcome)
    assert f"revision {new} did not go live within the timeout" in message
    assert f"the rollback to revision {before['active_revision_id']} was sent" in message
    assert emitted(context) == []
    # What the service was asked: the patch, then the rollback (a redeploy of the previous build), recorded first.
    building = svc(emulator)
    # Both made at the same (frozen) moment: the patch's started (CREATING inside its build), the rollback waits.
    assert [revision["status"] for revision in building["revisions"][-2:]] == ["CREATING", "CREATING"]
    assert [revision["started_at"] is None for revision in building["revisions"][-2:]] == [False, True]
    rollback = building["revisions"][-1]
    assert rollback["source_revision_config"]["image_uri"] == OLD_IMAGE
    record = store.data[TASK_STATE_KEY]
    assert record["verdict"]["step"] == "timeout" and record["verdict"]["revision_id"] == new
    assert record["rollback"]["phase"] == "sent" and record["rollback"]["revision_id"] == rollback["id"]

    emulator.state.advance(2 * BUILD_SECONDS)  # the slow build ends, then the rollback's deploy

    after = svc(emulator)
    assert after["active_revision_id"] == rollback["id"] != new
    assert after["latest_revision_id"] == rollback["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the patch's and the one rollback's


@PATHS
def test_a_timeout_without_rollback_names_the_revision_that_may_still_go_live(emulator: Any, path: str) -> None:
    before = svc(emulator)
    ti = FakeTI()

    outcome, _ = run(
        lambda: patch_op(deferrable=path != "worker", rollback_on_failure=False, emulator=emulator),
        context_with_events(ti),
        path,
    )

    new = ti.xcoms["revision_id"]
    assert isinstance(outcome, AirflowSensorTimeout), outcome
    message = str(outcome)
    assert f"Revision {new} may still go live" in message
    assert "rollback_on_failure is off" in message and before["active_revision_id"] in message
    assert len(svc(emulator)["revisions"]) == len(before["revisions"]) + 1  # nothing sent after the patch

    emulator.state.advance(2 * BUILD_SECONDS)

    after = svc(emulator)  # what the message warned of
    assert after["active_revision_id"] == new and after["source_revision_config"]["image_uri"] == NEW_IMAGE
