"""What the patch task's automatic rollback restores, and says it restored (issue 22, item 3, patch side).

After a ``resource_spec``-only patch the rollback restores the whole previous resource_spec with the previous
build (one revision); after a secrets patch it says, by name, which secrets it could not restore. "Rolled
back ... which serves again" is said only when the previous build serves with its previous resource_spec.
Assertions are on the emulator's real state, the message, the log, the XComs and the (absent) asset events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider.operators.deployment_service import TASK_STATE_KEY, PatchDeploymentOperator
from tests.tasks.conftest import PATCH_ROUTE, SECRET, FakeStore, FakeTI, deployment_named, make_context

EXTERNAL = "billing-worker-prod"
"""external_docker, resource_spec {min_scale 2, max_scale 6, cpu 1.5, memory_mb 2048, db_storage_gi 20}."""
DOCKER = "checkout-api-staging"  # internal_docker, image registry.example.com/acme/checkout-api:0.4.0
REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"


@pytest.fixture
def ticking() -> Iterator[Callable[[Any], None]]:
    """Advance an emulator's clock 0.25 s every 20 ms of real time (builds of 2 s take about 0.2 s)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(emulator: Any) -> None:
        def run() -> None:
            while not stop.wait(0.02):
                emulator.state.advance(0.25)

        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join()


def failing_patch(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    """A patch whose verify fails, with rollback_on_failure."""
    return PatchDeploymentOperator(
        task_id="patch",
        deployment_id=deployment_id,
        wait_for_rollout=True,
        verify=lambda deployment: False,
        rollback_on_failure=True,
        poll_interval=0.05,
        timeout=30,
        **kwargs,
    )


def context_with(ti: FakeTI, store: FakeStore) -> dict[str, Any]:
    context = make_context(ti, store)
    context["outlet_events"] = OutletEventAccessors()
    return context


def test_a_resource_spec_only_patch_is_rolled_back_with_its_previous_resource_spec(
    emulator: Any, ticking: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    good = dep["active_revision_id"]
    spec_before = {key: value for key, value in dep["source_config"]["resource_spec"].items() if value is not None}
    ticking(emulator)
    ti, store = FakeTI(), FakeStore()
    context = context_with(ti, store)
    task = failing_patch(dep["id"], source_config={"resource_spec": {"cpu": 4, "memory_mb": 8192}})
    with pytest.raises(AirflowFailException) as raised:
        task.execute(context)
    bad = ti.xcoms["revision_id"]
    now = deployment_named(emulator, EXTERNAL)
    assert len(now["revisions"]) == len(dep["revisions"]) + 2  # the patch's revision and one for the rollback
    restored = now["revisions"][-1]["id"]
    assert now["active_revision_id"] == now["latest_revision_id"] == restored not in (good, bad)
    assert now["status"] == "READY"
    assert now["source_revision_config"]["image_uri"] == dep["source_revision_config"]["image_uri"]
    shown = {key: value for key, value in now["source_config"]["resource_spec"].items() if value is not None}
    assert {key: shown[key] for key in spec_before} == spec_before  # cpu 1.5, memory 2048... again
    assert (shown["cpu_limit"], shown["memory_limit_mb"]) == (3, 4096)  # production's defaults for them
    assert emulator.state.count(PATCH_ROUTE) == 2 and emulator.state.count(REDEPLOY_ROUTE) == 0
    message = str(raised.value)
    assert f"revision {bad} went live but verify returned False; rolled back to revision {good} (patch)" in message
    assert f"which serves again as revision {restored}" in message and "except" not in message
    assert ti.xcoms["previous_resource_spec"] == spec_before
    assert store.data[TASK_STATE_KEY]["previous_resource_spec"] == spec_before
    assert store.data[TASK_STATE_KEY]["rollback"]["phase"] == "sent"
    assert context["outlet_events"]._dict == {}  # a failed task emits no asset event
    assert message in capfd.readouterr().out  # the verdict is logged too


def test_a_secrets_patch_rollback_names_the_secrets_it_could_not_restore(
    emulator: Any, ticking: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, DOCKER)
    good = dep["active_revision_id"]
    ticking(emulator)
    ti = FakeTI()
    task = failing_patch(dep["id"], secrets={"PAYMENT_TOKEN": SECRET, "DB_URL": SECRET + "-db"})
    with pytest.raises(AirflowFailException) as raised:
        task.execute(context_with(ti, FakeStore()))
    now = deployment_named(emulator, DOCKER)
    assert len(now["revisions"]) == len(dep["revisions"]) + 2
    assert now["active_revision_id"] == now["revisions"][-1]["id"] != good
    assert now["source_revision_config"]["image_uri"] == dep["source_revision_config"]["image_uri"]
    assert {secret["name"] for secret in now["secrets"]} == {"PAYMENT_TOKEN", "DB_URL"}  # the new ones stay
    message = str(raised.value)
    clause = (
        "secrets DB_URL, PAYMENT_TOKEN (the rollback cannot restore secret values; the deployment keeps the new ones)"
    )
    assert f"rolled back to revision {good} (redeploy) as revision {now['active_revision_id']}, except: {clause}" in (
        message
    )
    assert "serves again" not in message
    out = capfd.readouterr().out
    assert f"does not undo: {clause}" in out
    for text in (message, out, ti.xcoms):
        assert SECRET not in str(text)
