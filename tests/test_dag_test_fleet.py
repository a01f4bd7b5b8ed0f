"""A deferrable fleet rollout run by a real ``dag.test()`` (Airflow 3.3.2 resumes a deferred task with the
trigger's event only: the ``kwargs`` given to ``defer()`` are dropped). Every resume of the fleet, after a
wave's watch with its bake, after a pause between waves, after a wave's rollbacks, must carry on from the
event and the progress alone: ``verify`` runs after the resume, the failing deployment is rolled back,
and the table, ``fleet_summary``, the asset events and the emulator's state per deployment agree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import connection_json

DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import FleetRolloutOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    FleetRolloutOperator(
        task_id="fleet",
        deployment_names={names!r},
        image_uri="registry.example.com/acme/app:2.0",
        source_config={{"resource_spec": {{"cpu": 2.0, "memory_mb": 1024}}}},
        canary=1,
        wave_size=2,
        max_failures={max_failures},
        pause_seconds=0.2,
        bake_seconds=0.3,
        verify=lambda deployment: deployment.name != "{bad}",
        rollback_on_failure=True,
        deferrable=True,
        poll_interval=0.1,
        timeout=30,
        retries=0,
    )
"""
IMAGE = "registry.example.com/acme/app:1.0"
SPEC_BEFORE = {"cpu": 1.0, "memory_mb": 512}
NAMES = ["fleet-0000", "fleet-0001", "fleet-0002", "fleet-0003"]
"""The canary fleet-0000, wave 1 fleet-0001 and fleet-0002 (the bad one), wave 2 fleet-0003."""
BAD = "fleet-0002"


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """A real-time emulator with four external_docker deployments behind the default connection."""
    deployments = [
        {
            "name": name,
            "source": "external_docker",
            "source_revision_config": {"image_uri": IMAGE},
            "source_config": {"resource_spec": dict(SPEC_BEFORE)},
        }
        for name in NAMES
    ]
    server = deployment_service_emulator_factory(
        data={"deployments": deployments}, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT",
        connection_json(server.base_url, server.api_key, backoff_initial=0.05, backoff_max=0.2),
    )
    return server


def run_fleet_dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dag_id: str, max_failures: int) -> Any:
    """Write the DAG into a dags folder of its own and run it with ``dag.test()``; return the run."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    dag_file = tmp_path / f"{dag_id}.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, names=NAMES, max_failures=max_failures, bad=BAD))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))  # dag.test() runs DAGs of the dags folder
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id).test()


def xcom(run: Any, key: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        value = session.scalars(
            select(XComModel.value).where(
                XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id, XComModel.key == key
            )
        ).first()
    return XComModel.deserialize_value(type("Row", (), {"value": value})()) if value is not None else None


def asset_events(run: Any) -> dict[str, dict[str, Any]]:
    """``{deployment_id: extra}`` of the asset events the run's task recorded in the metadata database."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).where(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)
        ).all()
        return {event.extra["deployment_id"]: dict(event.extra) for event in events}


def stored_keys(run: Any) -> set[str]:
    """The task state store keys the run's task wrote (the real store of Airflow 3.3, in the metadata database)."""
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(
            session.scalars(
                select(TaskStateStoreModel.key).where(
                    TaskStateStoreModel.dag_id == run.dag_id, TaskStateStoreModel.run_id == run.run_id
                )
            )
        )


def deployments(emulator: Any) -> dict[str, dict[str, Any]]:
    return {name: emulator.state.find_deployment(name) for name in NAMES}


def spec(deployment: dict[str, Any]) -> dict[str, Any]:
    shown = deployment["source_config"].get("resource_spec") or {}
    return {name: value for name, value in shown.items() if value is not None and "limit" not in name}


def assert_landed(after: dict[str, Any], before: dict[str, Any], row: dict[str, Any]) -> None:
    """One new revision, serving the new image and resource_spec, the one the table names."""
    assert row["outcome"] == "landed", row
    assert len(after["revisions"]) == len(before["revisions"]) + 1
    assert after["active_revision_id"] == after["latest_revision_id"] == row["to_revision"]
    assert after["source_revision_config"]["image_uri"] == "registry.example.com/acme/app:2.0"
    assert spec(after) == {"cpu": 2.0, "memory_mb": 1024}


def assert_restored(after: dict[str, Any], before: dict[str, Any], row: dict[str, Any]) -> None:
    """One patch and one rollback: the previous image and resource_spec serve again."""
    assert len(after["revisions"]) == len(before["revisions"]) + 2, (row, after["revisions"])
    assert after["active_revision_id"] == after["latest_revision_id"] == after["revisions"][-1]["id"]
    assert after["revisions"][-2]["id"] == row["to_revision"]
    assert after["revisions"][-1]["source_revision_config"]["image_uri"] == IMAGE
    assert spec(after) == SPEC_BEFORE and after["status"] == "READY"


def test_dag_test_verifies_after_every_resume_and_rolls_the_failure_back(
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    task_logs: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = deployments(emulator)
    run = run_fleet_dag(tmp_path, monkeypatch, "fleet_dag_test_within_budget", max_failures=1)
    assert str(run.state) == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    logs = task_logs()
    # Every wait went through the triggerer and back, resumed with the event only: the canary's watch, the
    # pause, wave 1's watch, its rollback's watch, the pause, wave 2's watch.
    # (A line reaches stderr, caplog or both, depending on which earlier test configured logging: count per source.)
    in_caplog = caplog.text.count("[DAG TEST] running trigger in line")
    in_streams = logs.count("[DAG TEST] running trigger in line") - in_caplog
    assert max(in_caplog, in_streams) == 6, (in_caplog, in_streams)
    assert f"wave 1: {BAD}: verification failed" in logs and f"wave 1: {BAD} rolled back to" in logs
    table = {row["name"]: row for row in xcom(run, "return_value")}
    after = deployments(emulator)
    assert table[BAD]["outcome"] == "rolled_back", table[BAD]
    assert "verification failed" in table[BAD]["message"] and "verify returned False" in table[BAD]["message"]
    assert_restored(after[BAD], before[BAD], table[BAD])
    for name in ("fleet-0000", "fleet-0001", "fleet-0003"):  # the later wave went on: within the budget
        assert_landed(after[name], before[name], table[name])
    assert xcom(run, "fleet_summary") == {
        "counts": {"landed": 3, "rolled_back": 1},
        "failures": 1,
        "allowed_failures": 1,
        "stopped": "",
    }
    events = asset_events(run)
    assert {events[after[name]["id"]]["outcome"] for name in NAMES if name != BAD} == {"rolled_out"}
    restored = events[after[BAD]["id"]]
    assert restored["outcome"] == "rolled_back" and restored["not_restored"] == []
    assert restored["revision_id"] == after[BAD]["active_revision_id"]
    # The progress and the rollback's own record went to Airflow's task state store.
    waves = {f"deployment_service_fleet/wave/{index}" for index in range(3)}
    rollback = f"deployment_service_fleet/wave/1/rollback/{after[BAD]['id']}"
    assert stored_keys(run) == {"deployment_service_fleet", *waves, rollback}


def test_dag_test_a_wave_that_stops_the_rollout_is_rolled_back_whole(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = deployments(emulator)
    run = run_fleet_dag(tmp_path, monkeypatch, "fleet_dag_test_over_budget", max_failures=0)
    assert str(run.state) == "failed"
    table = {row["name"]: row for row in xcom(run, "return_value")}
    after = deployments(emulator)
    assert_landed(after["fleet-0000"], before["fleet-0000"], table["fleet-0000"])  # the canary's wave passed
    assert table[BAD]["outcome"] == "rolled_back"
    assert table["fleet-0001"]["outcome"] == "rolled_back_with_wave"  # healthy: not a failure
    for name in ("fleet-0001", BAD):
        assert_restored(after[name], before[name], table[name])
    assert table["fleet-0003"]["outcome"] == "not_patched"
    assert after["fleet-0003"]["revisions"] == before["fleet-0003"]["revisions"]
    summary = xcom(run, "fleet_summary")
    assert summary["counts"] == {"landed": 1, "rolled_back": 1, "rolled_back_with_wave": 1, "not_patched": 1}
    assert summary["failures"] == 1 and summary["stopped"].startswith("1 deployment(s) failed")
    assert asset_events(run) == {}  # a failed task records none
