"""Revision history, redeploy and build logs through the client (sync and async) against the emulator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider.client import AsyncDeploymentServiceClient, ClientSettings, DeploymentServiceClient
from airflow_provider.errors import InvalidRequestError, NotFoundError
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
            client.list_revisions(dep["id"], status=["RUNNING"])

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
        emulator.state.update_settings(disabled_endpoints=["revision_logs", "redeploy"])
        with pytest.raises(NotFoundError):
            client.get_revision_logs(dep["id"], good)
        with pytest.raises(NotFoundError):
            client.redeploy_revision(dep["id"], good)


def test_log_lines_are_read_tolerantly() -> None:
    page = RevisionLogPage.model_validate({"logs": ["plain text", {"message": 3, "level": "ERROR", "x": 1}]})
    assert [line.message for line in page.logs] == ["plain text", "3"]
    assert page.next_offset is None
    assert LogLine.model_validate({}).message == ""
