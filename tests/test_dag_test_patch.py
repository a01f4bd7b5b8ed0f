"""``dag.test()`` (and so ``airflow dags test``) runs the patch task's verify and rollback (issue 22, item 1).

Airflow 3.3's ``dag.test()`` runs triggers inline and resumes a deferred task with ``{"event": payload}``
only: the kwargs given to ``defer()`` are dropped. The DAG below is the issue's reproduction; the test
asserts the run's verdict, that verify ran, what the emulator serves at the end and that no ``rolled_out``
asset event was recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.assets import deployment_asset_uri
from tests.dag_runs import example_emulator

DEFERRED_VERIFY_DAG = """
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import PatchDeploymentOperator


def verify(deployment):
    Path({marker!r}).write_text(str(deployment.active_revision_id))
    return False


with DAG("deferred_verify_rollback", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(
        task_id="patch",
        deployment_id="{deployment_id}",
        image_uri="registry.example.com/acme/checkout-api:9.9.9",
        wait_for_rollout=True,
        deferrable=True,
        verify=verify,
        rollback_on_failure=True,
        poll_interval=0.2,
        timeout=60,
        retries=0,
    )
"""


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    return example_emulator(deployment_service_emulator_factory, monkeypatch)


def asset_events_of(deployment_id: str) -> list[dict[str, Any]]:
    """The ``extra`` of every asset event Airflow recorded on the deployment's asset."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == deployment_asset_uri(deployment_id))
        )
        return [dict(event.extra or {}) for event in session.scalars(query)]


def test_dag_test_runs_verify_and_rolls_back_a_deferred_patch(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str]
) -> None:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    before = emulator.admin.find_deployment("checkout-api-staging")
    marker = tmp_path / "verify-ran"
    dag_file = tmp_path / "deferred_verify_rollback.py"
    dag_file.write_text(DEFERRED_VERIFY_DAG.format(deployment_id=before["id"], marker=str(marker)))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))  # dag.test() runs DAGs of the dags folder
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors

    run = bag.get_dag("deferred_verify_rollback").test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert (str(run.state), states) == ("failed", {"patch": "failed"})
    after = emulator.admin.find_deployment("checkout-api-staging")
    bad, restored = after["revisions"][-2], after["revisions"][-1]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the patch's revision and the rollback's
    assert marker.read_text() == bad["id"], "verify did not run on the new revision"
    assert after["active_revision_id"] == after["latest_revision_id"] == restored["id"]
    assert after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    # No event of this run (the database outlives a test: other tests' runs may have emitted theirs).
    assert [
        extra for extra in asset_events_of(before["id"]) if extra.get("revision_id") in (bad["id"], restored["id"])
    ] == []
    logs = task_logs()
    assert f"revision {bad['id']} went live but verify returned False" in logs
    assert f"rolled back to revision {before['active_revision_id']}" in logs


DEFERRED_ANALYSIS_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

with DAG("deferred_analysis_rollback", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(
        task_id="patch",
        deployment_id="{deployment_id}",
        image_uri="registry.example.com/acme/checkout-api:9.9.8",
        wait_for_rollout=True,
        deferrable=True,
        analysis=Analysis(
            checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=20)],
            interval_seconds=0.3,
            count=6,
        ),
        rollback_on_failure=True,
        poll_interval=0.2,
        timeout=60,
        retries=0,
    )
"""


def test_dag_test_analyses_a_deferred_patch_after_the_resume_and_rolls_back(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str]
) -> None:
    """The analysis trigger's resume gets only ``event=`` under ``dag.test()``: the landing it carries is
    what lets the task roll back a revision whose error rate rose after it went live."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    before = emulator.admin.find_deployment("checkout-api-staging")
    emulator.admin.set_behaviour(
        before["id"],
        revision_id="next",
        requests_per_second=200,
        after_seconds=0.3,
        then={"error_rate": 0.5, "requests_per_second": 200},
    )
    dag_file = tmp_path / "deferred_analysis_rollback.py"
    dag_file.write_text(DEFERRED_ANALYSIS_DAG.replace("{deployment_id}", before["id"]))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors

    run = bag.get_dag("deferred_analysis_rollback").test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert (str(run.state), states) == ("failed", {"patch": "failed"})
    after = emulator.admin.find_deployment("checkout-api-staging")
    bad, restored = after["revisions"][-2], after["revisions"][-1]
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert bad["source_revision_config"]["image_uri"].endswith(":9.9.8")
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert [
        extra for extra in asset_events_of(before["id"]) if extra.get("revision_id") in (bad["id"], restored["id"])
    ] == []
    logs = task_logs()
    assert f"revision {bad['id']} went live but the analysis failed: " in logs
    assert "tracing error_rate" in logs
    assert f"rolled back to revision {before['active_revision_id']}" in logs


RETRIED_ANALYSIS_DAG = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.emulator.admin_client import EmulatorAdmin
from airflow_provider.operators.deployment_service import PatchDeploymentOperator


def retry_delay_passes(context):
    # Airflow's default retry delay (5 minutes) passes on the service while the retry waits.
    with EmulatorAdmin({root_url!r}) as admin:
        admin.advance(300)


with DAG("retried_analysis_rollback", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(
        task_id="patch",
        deployment_id={deployment_id!r},
        image_uri="registry.example.com/acme/checkout-api:9.9.7",
        wait_for_rollout=True,
        deferrable=True,
        analysis=Analysis(
            checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=20)],
            interval_seconds=0.3,
            count=2,
        ),
        rollback_on_failure=True,
        poll_interval=0.2,
        timeout=60,
        retries=1,
        retry_delay=timedelta(0),
        max_attempts=2,
        on_retry_callback=retry_delay_passes,
    )
"""


def test_dag_test_retry_after_a_lost_rollback_rolls_back_the_recorded_failed_verdict(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str]
) -> None:
    """Issue 28, item 2, under ``dag.test()``: the analysis fails on its first round, the read before the rollback
    request fails (503 until the client gives up), the try fails; the retry (after Airflow's retry delay, when the
    bad second is diluted in the tracing statistics) rolls back from the recorded verdict instead of analysing
    again and landing."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider.operators.deployment_service import PatchDeploymentOperator

    before = emulator.admin.find_deployment("checkout-api-staging")
    emulator.admin.set_behaviour(
        before["id"],
        revision_id="next",
        error_rate=0.27,
        requests_per_second=200,
        after_seconds=1.0,
        then={"error_rate": 0.0, "requests_per_second": 200},
    )
    judge = PatchDeploymentOperator._judge_analysis
    armed: list[bool] = []

    def judge_then_fail_the_next_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not armed:  # the read that precedes the rollback request: 503 until the client gives up
            armed.append(True)
            emulator.admin.add_fault(kind="status", method="GET", path="/v2/deployments", status_code=503, count=2)
        return judge(self, *args, **kwargs)

    monkeypatch.setattr(PatchDeploymentOperator, "_judge_analysis", judge_then_fail_the_next_read)
    dag_file = tmp_path / "retried_analysis_rollback.py"
    dag_file.write_text(RETRIED_ANALYSIS_DAG.format(deployment_id=before["id"], root_url=emulator.root_url))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors

    run = bag.get_dag("retried_analysis_rollback").test()

    (ti,) = run.get_task_instances()
    assert (str(run.state), str(ti.state), ti.try_number) == ("failed", "failed", 2)
    after = emulator.admin.find_deployment("checkout-api-staging")
    bad, restored = after["revisions"][-2], after["revisions"][-1]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the patch's revision and one rollback
    assert bad["source_revision_config"]["image_uri"].endswith(":9.9.7")
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert [
        extra for extra in asset_events_of(before["id"]) if extra.get("revision_id") in (bad["id"], restored["id"])
    ] == []
    logs = task_logs()
    assert "The analysis passed" not in logs  # the retry did not analyse again
    assert f"revision {bad['id']} went live but the analysis failed: " in logs
    assert f"rolled back to revision {before['active_revision_id']}" in logs
