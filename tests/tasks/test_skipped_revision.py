"""A revision the service skips (a newer PATCH overtook it while it was queued) is reported superseded, with the
revision that replaced it, by the patch task, its record and the fleet: never as a failed build."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.record import RECORD_KEY, Kind, entries_of
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from tests.tasks.conftest import FakeStore, FakeTI, deployment_named, make_context

DOCKER = "checkout-api-staging"
PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"


def someone_overtakes(emulator: Any, deployment_id: str, found: list[str]) -> threading.Thread:
    """Once the task's PATCH landed (queued behind a build in progress), someone patches again: the service skips
    the task's revision. Then the clock ticks, so the newer revision builds."""

    def run() -> None:
        deadline = time.monotonic() + 20
        while emulator.state.count(PATCH_ROUTE) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        emulator.state.advance(1)  # the task's revision is QUEUED now
        body = {"source_revision_config": {"image_uri": "registry.example.com/acme/checkout-api:theirs-2"}}
        found.append(emulator.state.patch_deployment(deployment_id, body)["latest_revision_id"])
        while time.monotonic() < deadline and emulator.state.count(PATCH_ROUTE) < 100:
            emulator.state.advance(0.25)
            time.sleep(0.02)
            if found and emulator.state.get_deployment(deployment_id)["active_revision_id"] == found[0]:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_patch_task_reports_a_skipped_revision_superseded_with_its_successor(
    emulator: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, DOCKER)
    building = {"source_revision_config": {"image_uri": "registry.example.com/acme/checkout-api:theirs-1"}}
    emulator.state.patch_deployment(dep["id"], building)  # someone else's build in progress: ours will queue
    successor: list[str] = []
    overtaking = someone_overtakes(emulator, dep["id"], successor)
    store = FakeStore()
    task = PatchDeploymentOperator(
        task_id="patch",
        deployment_id=dep["id"],
        image_uri="registry.example.com/acme/checkout-api:ours",
        wait_for_rollout=True,
        poll_interval=0.05,
        timeout=30,
    )
    with pytest.raises(AirflowFailException) as failed:
        task.execute(make_context(FakeTI(), store))
    overtaking.join(timeout=30)
    assert successor, "the newer PATCH was never sent"
    ours = next(rev for rev in emulator.state.deployment(dep["id"])["revisions"] if rev["status"] == "SKIPPED")
    message = str(failed.value)
    assert f"revision {ours['id']} was superseded by {successor[0]}" in message
    assert "BUILD_FAILED" not in message and "ended with status" not in message
    out = capfd.readouterr().out
    assert "build log" not in out
    verdict = [item for item in entries_of(store.get(RECORD_KEY)) if item["kind"] == Kind.FAILED]
    assert len(verdict) == 1 and verdict[0]["revision_id"] == ours["id"]
    assert verdict[0]["superseded_by"] == successor[0] and "status" not in verdict[0]
