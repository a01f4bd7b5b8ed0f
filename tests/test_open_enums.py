"""The service's enums are open: a tier, status or source the provider does not know goes to the service as given
and comes back as it was sent, against the emulator (the serverless tier ``dev_zero``, and a tier only a newer
service knows); a value no service knows is the service's 422, named."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider.client import ClientSettings, DeploymentServiceClient
from airflow_provider.errors import RequestRejectedError
from airflow_provider.models import DeploymentType


def client_for(emulator: Any) -> DeploymentServiceClient:
    return DeploymentServiceClient(ClientSettings(base_url=emulator.base_url), emulator.api_key)


def create(client: DeploymentServiceClient, name: str, deployment_type: str) -> Any:
    return client.create_deployment(
        {
            "name": name,
            "source": "internal_docker",
            "source_config": {"deployment_type": deployment_type},
            "source_revision_config": {"image_uri": "registry.example.com/acme/agent@sha256:" + "a" * 64},
        }
    )


def test_a_serverless_deployment_is_created_and_listed_by_its_tier(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    with client_for(emulator) as client:
        created = create(client, "serverless-agent", "dev_zero")
        assert created.source_config.deployment_type == "dev_zero"
        listed = list(client.iter_deployments(deployment_type=DeploymentType.DEV_ZERO))
        assert [item.name for item in listed] == ["serverless-agent"]
        assert client.get_deployment(created.id).source_config.deployment_type == "dev_zero"
    assert emulator.state.deployment(created.id)["deployment_type"] == "dev_zero"


def test_a_tier_only_a_newer_service_knows_goes_there_and_back(
    deployment_service_emulator_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    newer = deployment_service_emulator_factory(unknown_fields=True)
    with client_for(newer) as client:
        created = create(client, "gpu-agent", "prod_gpu")
        assert created.source_config.deployment_type == "prod_gpu"
        assert [item.id for item in client.iter_deployments(deployment_type="prod_gpu")] == [created.id]
        assert client.list_deployments(deployment_type="prod_gpu", limit=5).resources[0].name == "gpu-agent"
    assert any(
        "deployment_type 'prod_gpu' is not a value this provider knows" in r.getMessage() for r in caplog.records
    )


def test_a_tier_no_service_knows_is_the_services_422_naming_the_field(deployment_service_emulator: Any) -> None:
    emulator = deployment_service_emulator
    with client_for(emulator) as client:
        with pytest.raises(RequestRejectedError, match=r"422.*source_config\.deployment_type"):
            create(client, "nowhere", "prod_gpu")
        with pytest.raises(RequestRejectedError, match=r"422.*query\.deployment_type"):
            client.list_deployments(deployment_type="prod_gpu")
    assert emulator.state.count("POST /v2/deployments") == 1  # sent: the service decides
