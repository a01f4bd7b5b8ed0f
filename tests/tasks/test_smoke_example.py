"""``smoke_test_on_new_revision``: scheduled on a watched deployment asset; its task checks what the
watcher reported (the watcher's real event, from a rollout done outside Airflow)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.triggers.deployment_service import DeploymentEventTrigger, active_pollers
from tests.dag_runs import load_dag
from tests.tasks.conftest import deployment_named, wait_until


def test_the_dag_is_scheduled_on_the_watched_asset() -> None:
    dag = load_dag("smoke_test_on_new_revision")
    (asset,) = dag.timetable.asset_condition.objects
    assert asset.uri == "deployment-service://deployment-names/checkout-api-staging"
    (watcher,) = asset.watchers
    assert isinstance(watcher.trigger, DeploymentEventTrigger)
    assert watcher.trigger.deployment_names == ["checkout-api-staging"] and watcher.trigger.events == ["revision_live"]


async def test_the_task_checks_the_revision_the_watcher_reported(
    emulator: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, "checkout-api-staging")
    trigger = DeploymentEventTrigger(
        deployment_names=["checkout-api-staging"], events=["revision_live"], poll_interval=0.05, settle_time=0
    )
    events = trigger.run()
    first = asyncio.ensure_future(events.__anext__())
    await wait_until(lambda: any(p.rounds_completed for p in active_pollers()))  # first look: nothing fires
    body = PatchDeploymentRequest(source_revision_config={"image_uri": "registry.example.com/acme/checkout-api:9"})
    revision_id = emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"]
    emulator.state.advance(5)
    event = await asyncio.wait_for(first, 10)
    await events.aclose()
    smoke_test = load_dag("smoke_test_on_new_revision").get_task("smoke_test")
    asset_event = SimpleNamespace(extra={"from_trigger": True, "payload": event.payload})
    checked = await asyncio.to_thread(smoke_test.python_callable, triggering_asset_events={"a": [asset_event]})
    [result] = checked
    assert (result["deployment"], result["revision_id"]) == ("checkout-api-staging", revision_id)
    url = event.payload["deployment_url"]
    assert url and result["check"] == f"GET {url} -> 200"  # the emulator serves each deployment's app
    assert "registry.example.com/acme/checkout-api:9" in capfd.readouterr().out
    with pytest.raises(AirflowFailException, match="without a revision_live event"):
        smoke_test.python_callable(triggering_asset_events={})
