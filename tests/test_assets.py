"""The deployment-service:// asset scheme: registered with Airflow, validated when a DAG is parsed."""

from __future__ import annotations

import pytest
from airflow.sdk import Asset

from airflow_provider import assets
from airflow_provider.assets import deployment_asset, deployment_asset_uri, deployment_event, event_payload
from airflow_provider.get_provider_info import ASSET_SCHEME, ASSET_URI_NORMALIZER, get_provider_info

DEPLOYMENT_ID = "8d12e254-9195-47ca-94ec-20051ae2fc1b"


def test_provider_info_registers_the_scheme_and_its_normalizer() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ASSET_SCHEME == assets.ASSET_SCHEME
    assert get_provider_info()["asset-uris"] == [{"schemes": [ASSET_SCHEME], "handler": ASSET_URI_NORMALIZER}]
    handler = ProvidersManagerTaskRuntime().asset_uri_handlers[ASSET_SCHEME]
    assert handler is assets.normalize_deployment_uri


def test_airflow_normalizes_a_deployment_uri_written_by_hand() -> None:
    written = Asset(f"Deployment-Service://DEPLOYMENTS/{DEPLOYMENT_ID.upper()}/")
    assert written.uri == deployment_asset_uri(DEPLOYMENT_ID) == f"deployment-service://deployments/{DEPLOYMENT_ID}"
    assert Asset("deployment-service://deployment-names/checkout api").uri == (
        "deployment-service://deployment-names/checkout%20api"
    )


@pytest.mark.parametrize(
    "uri, message",
    [
        ("deployment-service://deployments/not-a-uuid", "deployment id must be a UUID"),
        (
            "deployment-service://deployment/" + DEPLOYMENT_ID,
            "expected deployment-service://deployments/<deployment id>",
        ),
        (f"deployment-service://deployments/{DEPLOYMENT_ID}/revisions", "expected"),
        (f"deployment-service://deployments/{DEPLOYMENT_ID}?tenant=x", "expected"),
        ("deployment-service://deployment-names/", "expected"),
    ],
)
def test_a_wrong_deployment_uri_fails_at_parse_time(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Asset(uri)


def test_helpers_build_the_same_asset_as_the_tasks_emit_on() -> None:
    asset = deployment_asset(DEPLOYMENT_ID.upper())
    assert asset.name == asset.uri == f"deployment-service://deployments/{DEPLOYMENT_ID}"
    assert deployment_asset(deployment_name="checkout").uri == "deployment-service://deployment-names/checkout"
    with pytest.raises(ValueError, match="exactly one of deployment_id and deployment_name"):
        deployment_asset_uri(DEPLOYMENT_ID, deployment_name="checkout")
    with pytest.raises(ValueError, match="deployment_id must be a UUID"):
        deployment_asset("checkout")


def test_deployment_event_reads_task_and_watcher_events_alike() -> None:
    payload = event_payload("deleted", None, deployment_id=DEPLOYMENT_ID, origin="watcher", deployment_name="c")
    assert deployment_event(payload) == payload
    assert deployment_event({"from_trigger": True, "payload": payload}) == payload
    assert deployment_event({"from_trigger": True, "payload": {"anything": 1}}) is None
    assert deployment_event(None) is None
    with pytest.raises(ValueError, match="kind must be one of"):
        event_payload("exploded", None, deployment_id=DEPLOYMENT_ID, origin="task")
