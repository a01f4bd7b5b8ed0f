"""Revision history, redeploy and build logs through the client (sync and async) against the emulator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider.client import AsyncDeploymentServiceClient, ClientSettings, DeploymentServiceClient
from airflow_provider.errors import ConflictError, InvalidRequestError, NotFoundError
from airflow_provider.models import LogLine, PatchDeploymentRequest, RevisionLogPage

TARGET_NAME = "checkout-api-staging"


def client_for(emulator: Any) -> DeploymentServiceClient:
    return DeploymentServiceClient(ClientSettings(base_url=emulator.base_url), emulator.api_key)


def add_revisions(emulator: Any, deployment_id: str, count: int) -> list[str]:
    made = []
    for index in range(count):
        body = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": f"acme/app:{index}"}})
        made.append(emulator.state.patch_deployment(deployment_id, body)["latest_revision_id"])
        emulator.state.advance(2.5)
    return made


def test_revisions_page_by_page_newest_first(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    made = add_revisions(emulator, dep["id"], 3)
    with client_for(emulator) as client:
        page = client.list_revisions(dep["id"], limit=2)
        assert [revision.id for revision in page.resources] == made[::-1][:2]
        every = list(client.iter_revisions(dep["id"]))
        assert [revision.id for revision in every][:3] == made[::-1]
        assert len(every) == len(emulator.state.deployment(dep["id"])["revisions"])
        assert [r.id for r in client.iter_revisions(dep["id"], max_results=2)] == made[::-1][:2]
        with pytest.raises(InvalidRequestError, match="limit"):
            client.list_revisions(dep["id"], limit=0)
        with pytest.raises(InvalidRequestError, match="status"):
            client.list_revisions(dep["id"], status=["deployed"])

    async def run() -> list[str]:
        aclient = AsyncDeploymentServiceClient(ClientSettings(base_url=emulator.base_url), emulator.api_key)
        try:
            return [revision.id async for revision in aclient.iter_revisions(dep["id"], max_results=3)]
        finally:
            await aclient.aclose()

    assert asyncio.run(run()) == made[::-1]


def test_redeploy_and_build_logs(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    good = dep["active_revision_id"]
    add_revisions(emulator, dep["id"], 1)
    emulator.state.reset_requests()
    with client_for(emulator) as client:
        after = client.redeploy_revision(dep["id"], good)
        assert after.latest_revision_id not in (None, good)
        assert emulator.state.count("GET /v2/deployments") == 1  # the read of the latest revision before
        logs = client.get_revision_logs(dep["id"], good, "build", limit=5, order="desc")
        assert 0 < len(logs.logs) <= 5 and all(line.message for line in logs.logs)
        with pytest.raises(InvalidRequestError, match="type"):
            client.get_revision_logs(dep["id"], good, "runtime")  # type: ignore[arg-type]
        emulator.state.update_settings(disabled_endpoints=["revision_logs", "build_logs", "redeploy"])
        with pytest.raises(NotFoundError, match=r"GET /v2/deployments/.*/logs"):
            client.get_revision_logs(dep["id"], good)  # neither log route: the newer one's answer is shown
        with pytest.raises(NotFoundError):
            client.redeploy_revision(dep["id"], good)


OLDER_BUILD_LOGS = "POST /v1/projects/{deployment_id}/revisions/{revision_id}/build_logs"
NEWER_LOGS = "GET /v2/deployments/{deployment_id}/revisions/{revision_id}/logs"


@pytest.mark.parametrize("missing", [404, 405])
def test_logs_fall_back_to_the_route_the_services_own_client_reads(
    deployment_service_emulator: Any, missing: int
) -> None:
    """A service without the newer logs route (404, or 405) serves the same lines through the older one; the
    client goes there straight away once it answered."""
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    good = dep["active_revision_id"]
    with client_for(emulator) as client:
        newer = client.get_revision_logs(dep["id"], good, "build", limit=4, order="desc")
    if missing == 404:
        emulator.state.update_settings(disabled_endpoints=["revision_logs"])
    else:
        emulator.state.add_fault(
            method="GET", path="/v2/deployments/*/revisions/*/logs", kind="status", status_code=405
        )
    emulator.state.reset_requests()
    with client_for(emulator) as client:
        older = client.get_revision_logs(dep["id"], good, "build", limit=4, order="desc")
        assert [line.message for line in older.logs] == [line.message for line in newer.logs]
        assert all(line.model_extra and line.model_extra.get("id") for line in older.logs)  # passed through
        assert (emulator.state.count(NEWER_LOGS), emulator.state.count(OLDER_BUILD_LOGS)) == (1, 1)
        deploy = client.get_revision_logs(dep["id"], good, "deploy", order="asc")
        assert deploy.logs[-1].message == f"Revision {good} is live"
        assert emulator.state.count(NEWER_LOGS) == 1  # not asked again
        if older.next_offset:
            following = client.get_revision_logs(
                dep["id"], good, "build", limit=4, order="desc", offset=older.next_offset
            )
            assert not {line.message for line in following.logs} & {line.message for line in older.logs}


def test_a_real_error_of_the_newer_log_route_is_not_taken_for_a_missing_route(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    emulator.state.reset_requests()
    with client_for(emulator) as client, pytest.raises(NotFoundError, match="Revision ID"):
        client.get_revision_logs(dep["id"], "00000000-0000-4000-8000-00000000abcd")
    assert emulator.state.count(OLDER_BUILD_LOGS) == 1  # asked, and it did not know the revision either
    with client_for(emulator) as client:
        client.get_revision_logs(dep["id"], dep["active_revision_id"])
    assert emulator.state.count(NEWER_LOGS) == 2  # the newer route is still the one used


def test_the_async_client_falls_back_to_the_older_log_route(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    emulator.state.update_settings(disabled_endpoints=["revision_logs"])

    async def run() -> RevisionLogPage:
        aclient = AsyncDeploymentServiceClient(ClientSettings(base_url=emulator.base_url), emulator.api_key)
        try:
            return await aclient.get_revision_logs(dep["id"], dep["active_revision_id"], "build", limit=3)
        finally:
            await aclient.aclose()

    assert len(asyncio.run(run()).logs) == 3
    assert emulator.state.count(OLDER_BUILD_LOGS) == 1


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_an_unclear_redeploy_without_the_expected_config_is_not_claimed(
    deployment_service_emulator: Any, twin: str
) -> None:
    """An ambiguous redeploy failure (502, not processed) while someone else rolls out: without the redeployed
    revision's config the move of latest_revision_id is not taken for the redeploy, nor is it sent again."""
    emulator = deployment_service_emulator
    dep = emulator.state.find_deployment(TARGET_NAME)
    good = dep["active_revision_id"]
    bad = add_revisions(emulator, dep["id"], 1)[0]
    emulator.state.add_fault(method="POST", path="/v2/deployments/*/revisions/*/redeploy", count=1, kind="html")
    theirs: list[str] = []

    def someone_rolls_out(seconds: float) -> None:  # during the client's wait before it reads back
        if not theirs:
            body = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "acme/app:theirs"}})
            theirs.append(emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"])

    settings = ClientSettings(base_url=emulator.base_url)
    if twin == "sync":
        unclear = pytest.raises(ConflictError, match="the outcome of the redeploy is unknown")
        with DeploymentServiceClient(settings, emulator.api_key, sleep=someone_rolls_out) as client, unclear as raised:
            client.redeploy_revision(dep["id"], good, previous_latest_revision_id=bad)
    else:

        async def asleep(seconds: float) -> None:
            someone_rolls_out(seconds)

        async def run() -> None:
            client = AsyncDeploymentServiceClient(settings, emulator.api_key, sleep=asleep)
            try:
                await client.redeploy_revision(dep["id"], good, previous_latest_revision_id=bad)
            finally:
                await client.aclose()

        with pytest.raises(ConflictError, match="the outcome of the redeploy is unknown") as raised:
            asyncio.run(run())
    assert theirs and theirs[0] in str(raised.value)
    assert emulator.state.count("POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy") == 1
    assert emulator.state.get_deployment(dep["id"])["latest_revision_id"] == theirs[0]


def test_log_lines_are_read_tolerantly() -> None:
    page = RevisionLogPage.model_validate({"logs": ["plain text", {"message": 3, "level": "ERROR", "x": 1}]})
    assert [line.message for line in page.logs] == ["plain text", "3"]
    assert page.next_offset is None
    assert LogLine.model_validate({}).message == ""
