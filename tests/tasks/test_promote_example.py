"""``promote_settled_revision``: scheduled on a watched staging deployment (by id, with a settle time); its
first task picks only a revision an Airflow rollout passed and that still serves, never a rejected one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider.assets import deployment_asset_uri, event_payload
from airflow_provider.models import Deployment
from airflow_provider.triggers.deployment_service import DeploymentEventTrigger
from tests.dag_runs import load_dag
from tests.tasks.conftest import deployment_named

STAGING = "billing-worker-dev"


def test_the_dag_watches_the_staging_name_asset_with_a_settle_time_and_names_the_id_asset() -> None:
    dag = load_dag("promote_settled_revision")
    (asset,) = dag.timetable.asset_condition.objects
    assert asset.uri == deployment_asset_uri(deployment_name=STAGING)  # tasks never emit there
    (inlet,) = dag.get_task("settled_revision").inlets
    assert inlet.uri == deployment_asset_uri("14c00c00-ebf8-4e83-b5c4-9ee51897fc1a")  # where the marker lives
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, DeploymentEventTrigger) and trigger.deployment_names == [STAGING]
    assert trigger.settle_time == 300 and trigger.wait_for_verdict is True
    assert trigger.events == ["revision_live", "revision_rolled_back"]
    assert dag.get_task("promote").deployment_id == "7253b31a-4338-4b3a-bae5-dcc36f9ccf0b"


def _event(deployment: dict[str, Any], kind: str = "revision_live", **fields: Any) -> SimpleNamespace:
    payload = event_payload(
        kind, Deployment.model_validate(deployment), deployment_id=deployment["id"], origin="watcher", extra=fields
    )
    return SimpleNamespace(extra={"from_trigger": True, "payload": payload})


@pytest.mark.parametrize(
    "fields, promoted",
    [
        ({"judging": False, "verdict": "landed"}, True),
        ({"judging": False, "verdict": "passed"}, True),
        ({"judging": True, "verdict": None}, False),  # still judged (wait_for_verdict=False)
        ({"judging": False, "verdict": "rolled_back"}, False),  # a rollback's revision
        ({"judging": False, "verdict": None}, False),  # rolled out by hand
        ({"judging": None, "verdict": None}, False),  # unknown
    ],
)
def test_only_a_revision_an_airflow_rollout_passed_is_promoted(
    emulator: Any, fields: dict[str, Any], promoted: bool
) -> None:
    staging = deployment_named(emulator, STAGING)
    task = load_dag("promote_settled_revision").get_task("settled_revision")
    chosen = task.python_callable(triggering_asset_events={"a": [_event(staging, **fields)]})
    if promoted:
        assert chosen == {
            "revision_id": staging["active_revision_id"],
            "image_uri": staging["source_revision_config"]["image_uri"],
        }
    else:
        assert chosen is None


def test_a_revision_that_no_longer_serves_is_not_promoted(emulator: Any) -> None:
    staging = deployment_named(emulator, STAGING)
    gone = {**staging, "active_revision_id": "6f1e6c8e-0000-4000-8000-000000000001"}
    task = load_dag("promote_settled_revision").get_task("settled_revision")
    events = [_event(gone, judging=False, verdict="landed"), _event(staging, "revision_rolled_back")]
    assert task.python_callable(triggering_asset_events={"a": events}) is None
