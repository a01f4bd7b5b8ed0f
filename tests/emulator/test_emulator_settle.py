"""The emulator settles only the deployments time can still change, and that gives the same answers as
settling every deployment on every request.

A fleet of 1000 deployments at rest must not make each request 1000 times dearer (``bench/fleet_rollout.py``
measures that). These tests pin the other half: whatever mix of requests and clock moves comes, no
deployment is left behind, checked after every step by settling all of them and seeing nothing change.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider.emulator.state import DeploymentFilters, EmulatorCreateRequest, EmulatorError, EmulatorState

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def fleet_state(count: int) -> EmulatorState:
    data = {"deployments": [{"name": f"d{index}", "source": "codehost"} for index in range(count)]}
    return EmulatorState(api_key="k", data=data, frozen_clock=True, start_time=START, build_seconds=4, ready_seconds=1)


def settled_everywhere(state: EmulatorState) -> dict[str, Any]:
    """The snapshot after settling every deployment to now, the way the emulator once did per request."""
    with state._lock:
        now = state.clock.now()
        for record in state._deployments.values():
            record.settle(now, state.ready_seconds)
    return state.snapshot()


def random_step(state: EmulatorState, chooser: random.Random, step: int) -> str:
    """One request or clock move, chosen at random among those that change deployments."""
    ids = [item["id"] for item in state.snapshot()["deployments"]]
    target = chooser.choice(ids) if ids else None
    action = chooser.choice(
        ["advance", "advance", "patch", "patch", "fail", "status", "redeploy", "create", "delete", "unhealthy", "read"]
    )
    try:
        if action == "advance" or target is None:
            state.advance(chooser.choice([0.5, 1, 2, 3.5, 5]))
            return "advance"
        if action == "patch":
            state.patch_deployment(target, {"source_revision_config": {"repo_ref": f"ref-{step}"}})
        elif action == "fail":
            state.fail_next_build(target, chooser.choice(["BUILD_FAILED", "DEPLOY_FAILED"]))
        elif action == "status":
            state.set_status(target, chooser.choice(["READY", "AWAITING_DATABASE", "UNUSED"]))
        elif action == "redeploy":
            revisions = state.deployment(target)["revisions"]
            state.redeploy_revision(target, chooser.choice(revisions)["id"])
        elif action == "create":
            state.create_deployment(
                EmulatorCreateRequest(
                    name=f"new-{step}", source="codehost", source_revision_config={"repo_ref": "main"}
                )
            )
        elif action == "delete":
            state.delete_deployment(target)
        elif action == "unhealthy":
            state.mark_next_revision_unhealthy(target)
        else:
            state.get_deployment(target)
    except EmulatorError:
        pass  # a refused request (e.g. a redeploy the rules forbid) is a step like any other
    return action


@pytest.mark.parametrize("seed", range(6))
def test_no_deployment_is_left_unsettled_whatever_the_requests(seed: int) -> None:
    state = fleet_state(8)
    chooser = random.Random(seed)
    actions: list[str] = []
    statuses: set[str] = set()
    for step in range(120):
        actions.append(random_step(state, chooser, step))
        seen = state.snapshot()
        assert settled_everywhere(state) == seen, f"seed {seed}, after steps {actions}"
        statuses |= {rev["status"] for item in seen["deployments"] for rev in item["revisions"]}
    # The mix reached the interesting states: builds in progress, finished and failed.
    assert {"BUILDING", "DEPLOYED"} <= statuses and statuses & {"BUILD_FAILED", "DEPLOY_FAILED"}, statuses


def test_a_patched_deployment_at_rest_goes_live_as_the_clock_moves() -> None:
    state = fleet_state(300)
    state.advance(60)  # every seeded deployment is at rest now
    target = state.find_deployment("d137")["id"]
    created = state.patch_deployment(target, {"source_revision_config": {"repo_ref": "v2"}})["latest_revision_id"]
    state.advance(2)
    assert state.get_deployment(target)["active_revision_id"] != created
    state.advance(2)
    assert state.get_deployment(target)["active_revision_id"] == created
    listed = state.list_deployments(DeploymentFilters(name_contains="d137"), limit=100)["resources"]
    assert [item["active_revision_id"] for item in listed if item["name"] == "d137"] == [created]
