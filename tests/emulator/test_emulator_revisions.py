"""The revision state machine and deployment statuses over (frozen) time."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.admin_client import EmulatorAdminError
from airflow_provider.emulator.clock import Clock
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import EmulatorError

BUILD = 10.0  # AWAITING_BUILD [0, 2), BUILDING [2, 7), DEPLOYING [7, 10), DEPLOYED at 10


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=5)


@pytest.fixture
def http(server: EmulatorServer, make_client: Callable[..., httpx.Client]) -> httpx.Client:
    return make_client(server)


def named(http: httpx.Client, name: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"name_contains": name, "limit": 100}).json()["resources"]
    return next(d for d in resources if d["name"] == name)


def deployment(http: httpx.Client, deployment_id: str) -> dict[str, Any]:
    listed = http.get("/v2/deployments", params={"deployment_ids": deployment_id}).json()["resources"]
    assert len(listed) == 1
    return listed[0]


def revision(http: httpx.Client, deployment_id: str, revision_id: str) -> dict[str, Any]:
    response = http.get(f"/v2/deployments/{deployment_id}/revisions/{revision_id}")
    assert response.status_code == 200
    return response.json()


def patch_ref(http: httpx.Client, deployment_id: str, ref: str) -> dict[str, Any]:
    response = http.patch(f"/v2/deployments/{deployment_id}", json={"source_revision_config": {"repo_ref": ref}})
    assert response.status_code == 200
    return response.json()


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_statuses_over_time_and_the_ready_trap(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    old_active = target["active_revision_id"]
    t0 = server.state.now()
    patched = patch_ref(http, target["id"], "release-2")
    new = patched["latest_revision_id"]
    timeline = [
        (0.0, "CREATING"),  # CREATING precedes the rest, inside the build's first 20 %: 5 % of 10 s
        (0.49, "CREATING"),
        (0.5, "AWAITING_BUILD"),
        (1.9, "AWAITING_BUILD"),
        (2.0, "BUILDING"),
        (6.9, "BUILDING"),
        (7.0, "DEPLOYING"),
        (9.9, "DEPLOYING"),
        (10.0, "DEPLOYED"),
    ]
    for offset, expected in timeline:
        server.state.advance((t0 + timedelta(seconds=offset) - server.state.now()).total_seconds())
        assert revision(http, target["id"], new)["status"] == expected, offset
        current = deployment(http, target["id"])
        # The old revision keeps the deployment READY during the whole build.
        assert current["status"] == "READY"
        assert current["latest_revision_id"] == new
        assert current["active_revision_id"] == (new if expected == "DEPLOYED" else old_active)


def test_transitions_are_stamped_with_their_computed_time(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    t0 = server.state.now()
    new = patch_ref(http, target["id"], "main")["latest_revision_id"]
    server.state.advance(60)  # nobody looked in between
    body = revision(http, target["id"], new)
    assert body["status"] == "DEPLOYED"
    assert at(body["created_at"]) == t0
    assert at(body["updated_at"]) == t0 + timedelta(seconds=BUILD)
    assert at(deployment(http, target["id"])["updated_at"]) == t0 + timedelta(seconds=BUILD)


def test_second_patch_queues_behind_the_first(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-prod")
    first = patch_ref(http, target["id"], "one")["latest_revision_id"]
    server.state.advance(3)
    second = patch_ref(http, target["id"], "two")["latest_revision_id"]
    assert deployment(http, target["id"])["latest_revision_id"] == second
    assert revision(http, target["id"], first)["status"] == "BUILDING"
    assert revision(http, target["id"], second)["status"] == "CREATING"
    server.state.advance(0.5)
    assert revision(http, target["id"], second)["status"] == "QUEUED"
    server.state.advance(6.5)  # t=10: first deployed, second starts
    assert revision(http, target["id"], first)["status"] == "DEPLOYED"
    assert revision(http, target["id"], second)["status"] == "AWAITING_BUILD"
    assert deployment(http, target["id"])["active_revision_id"] == first
    server.state.advance(9.9)
    assert revision(http, target["id"], second)["status"] == "DEPLOYING"
    server.state.advance(0.1)  # t=20
    assert revision(http, target["id"], second)["status"] == "DEPLOYED"
    assert deployment(http, target["id"])["active_revision_id"] == second


@pytest.mark.parametrize(("failure", "fails_at"), [("BUILD_FAILED", 7.0), ("DEPLOY_FAILED", 10.0)])
def test_fail_the_next_build(server: EmulatorServer, http: httpx.Client, failure: str, fails_at: float) -> None:
    target = named(http, "checkout-api-dev")
    old_active = target["active_revision_id"]
    assert server.admin.fail_next_build(target["id"], failure, "tests said so") is None  # armed for the next one
    new = patch_ref(http, target["id"], "broken")["latest_revision_id"]
    server.state.advance(fails_at - 0.1)
    assert not revision(http, target["id"], new)["status"].endswith("FAILED")
    server.state.advance(0.1)
    failed = revision(http, target["id"], new)
    assert failed["status"] == failure and failed["status_message"] == "tests said so"
    server.state.advance(30)
    current = deployment(http, target["id"])
    assert current["active_revision_id"] == old_active and current["status"] == "READY"
    # Only one build was failed: the next one deploys.
    fixed = patch_ref(http, target["id"], "fixed")["latest_revision_id"]
    server.state.advance(BUILD)
    assert revision(http, target["id"], fixed)["status"] == "DEPLOYED"


def test_revision_status_changes_can_leave_the_deployment_untouched(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"], "BUILD_FAILED")
    created = patch_ref(http, target["id"], "broken")
    assert (
        server.admin.update_settings(revision_status_touches_deployment=False)["revision_status_touches_deployment"]
        is False
    )
    server.state.advance(BUILD)
    assert revision(http, target["id"], created["latest_revision_id"])["status"] == "BUILD_FAILED"
    after = deployment(http, target["id"])
    assert after["updated_at"] == created["updated_at"], "the failed build moved the deployment's updated_at"
    # what the deployment itself shows still moves it: a new revision, and one going live
    fixed = patch_ref(http, target["id"], "fixed")
    assert at(fixed["updated_at"]) > at(created["updated_at"])
    server.state.advance(BUILD)
    live = deployment(http, target["id"])
    assert live["active_revision_id"] == fixed["latest_revision_id"]
    assert at(live["updated_at"]) > at(fixed["updated_at"])


def test_by_default_a_failed_build_moves_the_deployment(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"], "BUILD_FAILED")
    created = patch_ref(http, target["id"], "broken")
    server.state.advance(BUILD)
    assert at(deployment(http, target["id"])["updated_at"]) > at(created["updated_at"])


@pytest.mark.parametrize("how", ["fixture option", "control API"])
def test_updated_at_can_move_on_requests_only(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
    make_client: Callable[..., httpx.Client],
    how: str,
) -> None:
    """A service that stamps ``updated_at`` on writes only: a revision going live leaves the deployment's
    ``updated_at`` at the PATCH; the revision's own ``updated_at`` says when it went live."""
    server = deployment_service_emulator_factory(
        build_seconds=BUILD, ready_seconds=5, updated_at_on_requests_only=how == "fixture option"
    )
    if how == "control API":
        assert server.admin.update_settings(updated_at_on_requests_only=True)["updated_at_on_requests_only"] is True
    http = make_client(server)
    target = named(http, "checkout-api-dev")
    patched = patch_ref(http, target["id"], "v2")
    assert at(patched["updated_at"]) == server.state.now()  # the PATCH moves it
    server.state.advance(BUILD + 1)

    live = deployment(http, target["id"])
    went_live = revision(http, target["id"], patched["latest_revision_id"])
    assert live["active_revision_id"] == patched["latest_revision_id"] and live["status"] == "READY"
    assert live["updated_at"] == patched["updated_at"], "going live moved the deployment's updated_at"
    assert went_live["status"] == "DEPLOYED"
    assert at(went_live["updated_at"]) == at(patched["updated_at"]) + timedelta(seconds=BUILD)


def test_fail_next_build_marks_a_build_in_progress(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    new = patch_ref(http, target["id"], "x")["latest_revision_id"]
    server.state.advance(3)  # BUILDING
    assert server.admin.fail_next_build(target["id"]) == new
    server.state.advance(4)
    failed = revision(http, target["id"], new)
    assert failed["status"] == "BUILD_FAILED" and failed["status_message"]


def test_fail_revision_now_starts_the_queued_one(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-prod")
    first = patch_ref(http, target["id"], "one")["latest_revision_id"]
    second = patch_ref(http, target["id"], "two")["latest_revision_id"]
    server.state.advance(1)
    failed = server.admin.fail_revision(target["id"], first, "DEPLOY_FAILED")
    assert failed["status"] == "DEPLOY_FAILED"
    assert revision(http, target["id"], second)["status"] == "AWAITING_BUILD"
    server.state.advance(BUILD)
    assert deployment(http, target["id"])["active_revision_id"] == second
    with pytest.raises(EmulatorError) as raised:
        server.state.fail_revision(target["id"], second)
    assert raised.value.status_code == 409


def test_invalid_failure_status_is_refused(server: EmulatorServer, http: httpx.Client, web: httpx.Client) -> None:
    target = named(http, "search-dev")
    with pytest.raises(EmulatorError):
        server.state.fail_next_build(target["id"], "DEPLOYED")
    response = web.post(
        f"{server.root_url}/_emulator/deployments/{target['id']}/fail-next-build", json={"status": "OOPS"}
    )
    assert response.status_code == 422


def test_new_deployment_becomes_ready_after_ready_seconds_and_first_deploy(
    server: EmulatorServer, http: httpx.Client
) -> None:
    t0 = server.state.now()
    created = http.post("/v2/deployments", json={"name": "fresh", "source": "internal_docker", "build_seconds": 2})
    assert created.status_code == 201
    body = created.json()
    first = body["latest_revision_id"]
    server.state.advance(2)  # deployed, but the database is not ready yet (ready_seconds=5)
    current = deployment(http, body["id"])
    assert current["status"] == "AWAITING_DATABASE" and current["active_revision_id"] == first
    server.state.advance(3)
    current = deployment(http, body["id"])
    assert current["status"] == "READY" and at(current["updated_at"]) == t0 + timedelta(seconds=5)


def test_new_deployment_waits_for_a_slow_first_build(server: EmulatorServer, http: httpx.Client) -> None:
    t0 = server.state.now()
    body = http.post("/v2/deployments", json={"name": "slow", "source": "internal_docker"}).json()
    server.state.advance(6)
    assert deployment(http, body["id"])["status"] == "AWAITING_DATABASE"
    server.state.advance(4)
    current = deployment(http, body["id"])
    assert current["status"] == "READY" and at(current["updated_at"]) == t0 + timedelta(seconds=BUILD)


def test_seeded_rollout_in_progress_finishes(server: EmulatorServer, http: httpx.Client) -> None:
    rolling = [d for d in server.state.snapshot()["deployments"] if d["latest_revision_id"] != d["active_revision_id"]]
    assert rolling
    server.state.advance(BUILD)
    for seeded in rolling:
        current = server.state.deployment(seeded["id"])
        assert current["active_revision_id"] == seeded["latest_revision_id"]
        if seeded["status"] == "AWAITING_DATABASE":
            assert current["status"] == "READY"


def test_admin_status_change_is_visible_and_sticky(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    before = len(http.get("/v2/deployments", params={"status": "AWAITING_DELETE", "limit": 100}).json()["resources"])
    server.admin.set_status(target["id"], "AWAITING_DELETE")
    new = patch_ref(http, target["id"], "late")["latest_revision_id"]
    server.state.advance(BUILD)
    current = deployment(http, target["id"])
    assert current["status"] == "AWAITING_DELETE" and current["active_revision_id"] == new
    listed = http.get("/v2/deployments", params={"status": "AWAITING_DELETE", "limit": 100}).json()["resources"]
    assert len(listed) == before + 1 and target["id"] in [d["id"] for d in listed]
    with pytest.raises(EmulatorAdminError, match="answered 422"):
        server.admin.set_status(target["id"], "GONE")


def test_delete_makes_it_404(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    server.admin.delete_deployment(target["id"])
    assert http.get(f"/v2/deployments/{target['id']}").status_code == 404
    assert http.patch(f"/v2/deployments/{target['id']}", json={"secrets": []}).status_code == 404
    assert http.get("/v2/deployments", params={"deployment_ids": target["id"]}).json()["resources"] == []


def test_per_deployment_build_seconds(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    server.admin.update_deployment(target["id"], build_seconds=100)
    new = patch_ref(http, target["id"], "slow")["latest_revision_id"]
    server.state.advance(BUILD)  # the emulator's default would be DEPLOYED by now
    assert revision(http, target["id"], new)["status"] == "AWAITING_BUILD"
    server.state.advance(89.9)
    assert revision(http, target["id"], new)["status"] == "DEPLOYING"
    server.state.advance(0.1)
    assert revision(http, target["id"], new)["status"] == "DEPLOYED"


def test_admin_clock_advance(server: EmulatorServer) -> None:
    before = server.admin.now()
    after = server.admin.advance(12.5)
    assert after - before == timedelta(seconds=12.5)
    assert server.state.now() == after
    with pytest.raises(EmulatorAdminError, match="answered 422"):
        server.admin.advance(-1)


# ----------------------------------------------------------------------------------- clock
def test_frozen_clock_moves_only_when_advanced() -> None:
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    clock = Clock(frozen=True, start=start)
    time.sleep(0.01)
    assert clock.now() == start
    assert clock.advance(1.5) == start + timedelta(seconds=1.5)
    assert clock.now().tzinfo is not None and clock.now().utcoffset() == timedelta(0)
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        Clock(start=datetime(2030, 1, 1))


def test_running_clock_is_real_time_plus_offset() -> None:
    clock = Clock()
    real = datetime.now(timezone.utc)
    clock.advance(3600)
    assert timedelta(seconds=3599) < clock.now() - real < timedelta(seconds=3605)
    first = clock.now()
    time.sleep(0.01)
    assert clock.now() > first


def test_a_queued_revision_a_newer_patch_overtakes_is_skipped(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-prod")
    first = patch_ref(http, target["id"], "one")["latest_revision_id"]
    server.state.advance(1)
    second = patch_ref(http, target["id"], "two")["latest_revision_id"]
    assert server.state.mark_next_revision_unhealthy(target["id"]) == first
    assert server.state.mark_next_revision_unhealthy(target["id"]) == second  # meant for the queued one
    server.state.advance(1)
    assert revision(http, target["id"], second)["status"] == "QUEUED"
    third = patch_ref(http, target["id"], "three")["latest_revision_id"]
    skipped = revision(http, target["id"], second)
    assert (
        skipped["status"] == "SKIPPED"
        and skipped["status_message"] == f"Skipped: revision {third} overtook it before it was built"
    )
    assert revision(http, target["id"], first)["status"] == "BUILDING"  # a build in progress is not skipped
    server.state.advance(BUILD - 2)  # t=10: the first is live, the newest builds next, the skipped one never
    assert revision(http, target["id"], first)["status"] == "DEPLOYED"
    assert revision(http, target["id"], third)["status"] == "AWAITING_BUILD"
    shown = {rev["id"]: rev for rev in server.state.deployment(target["id"])["revisions"]}
    assert shown[third]["unhealthy"] and not shown[second]["unhealthy"]  # the mark passed to the revision built
    server.state.advance(BUILD)
    assert revision(http, target["id"], third)["status"] == "DEPLOYED"
    assert revision(http, target["id"], second)["status"] == "SKIPPED"
    assert http.get(f"/v2/deployments/{target['id']}/revisions/{second}/logs").json()["logs"] == []  # never built


def test_a_deployment_going_away_interrupts_its_unfinished_revisions(
    server: EmulatorServer, http: httpx.Client
) -> None:
    target = named(http, "checkout-api-prod")
    building = patch_ref(http, target["id"], "one")["latest_revision_id"]
    server.state.advance(3)
    server.admin.set_status(target["id"], "AWAITING_DELETE")
    interrupted = revision(http, target["id"], building)
    assert interrupted["status"] == "INTERRUPTED"
    assert interrupted["status_message"] == "Interrupted: the deployment is being deleted"
    server.state.advance(BUILD)
    assert revision(http, target["id"], building)["status"] == "INTERRUPTED"
