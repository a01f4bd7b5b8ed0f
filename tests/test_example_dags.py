"""The example DAGs are system tests: each runs with ``dag.test()`` against the emulator, and the test
asserts what the emulator ends up serving, not only that the run succeeded. Each DAG also has failure
scenarios that must fail in the right task with a clear message.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.models import PatchDeploymentRequest
from tests.dag_runs import DAGS, WhenRevisionAppears, example_emulator, run_dag

PAYMENT_TOKEN = "pt-Example-Dag-Token-58d1c0"


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The examples' emulator (``example_emulator``), and the Variable the DAGs read."""
    server = example_emulator(deployment_service_emulator_factory, monkeypatch)
    monkeypatch.setenv("AIRFLOW_VAR_CHECKOUT_API_PAYMENT_TOKEN", PAYMENT_TOKEN)
    return server


def revisions_of(emulator: Any, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    deployment = emulator.admin.find_deployment(name)
    return deployment, deployment["revisions"]


# ------------------------------------------------------------------------------- rollout_after_build
def test_rollout_after_build_serves_the_new_image_as_the_new_revision(emulator: Any) -> None:
    before, old_revisions = revisions_of(emulator, "checkout-api-staging")
    state, tasks = run_dag("rollout_after_build", version="2.3.4")
    assert state == "success", tasks
    after, revisions = revisions_of(emulator, "checkout-api-staging")
    assert len(revisions) == len(old_revisions) + 1
    new = revisions[-1]
    assert after["active_revision_id"] == after["latest_revision_id"] == new["id"] != before["active_revision_id"]
    assert after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == "registry.example.com/acme/checkout-api:2.3.4"
    assert {s["name"]: s["value"] for s in after["secrets"]} == {"PAYMENT_API_TOKEN": PAYMENT_TOKEN}
    assert tasks["wait_for_rollout"] == "success" and tasks["verify_rollout"] == "success"
    assert tasks["smoke_test"] == "success"
    assert tasks["roll_back"] == "skipped" and tasks["report_rollback"] == "skipped"
    assert emulator.admin.count("POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy") == 0


def test_rollout_after_build_rolls_back_a_revision_that_fails_its_smoke_test(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    before, old_revisions = revisions_of(emulator, "checkout-api-staging")
    emulator.admin.add_unhealthy_rule(image_uri="*:6.6.6", deployment_id=before["id"])
    state, tasks = run_dag("rollout_after_build", version="6.6.6")
    assert state == "failed"
    assert tasks["verify_rollout"] == "success" and tasks["smoke_test"] == "failed"
    assert tasks["roll_back"] == "success" and tasks["report_rollback"] == "failed"
    after, revisions = revisions_of(emulator, "checkout-api-staging")
    bad, restored = revisions[-2], revisions[-1]
    assert len(revisions) == len(old_revisions) + 2  # the bad one and the redeploy of the previous build
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    logs = task_logs()
    assert f"smoke test of revision {bad['id']} failed" in logs and "500" in logs
    assert f"revision {bad['id']} failed its smoke test and was rolled back" in logs
    assert PAYMENT_TOKEN not in logs


def test_rollout_after_build_rolls_back_the_resource_spec_with_the_build(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    """On a deployment with a resource_spec (external_docker) the rollback task is given the patch task's
    previous_resource_spec: it restores the previous build with its resource_spec and says "rolled back"
    whole, not "except: resource_spec (unknown ...)"."""
    name = "billing-worker-prod"
    before, old_revisions = revisions_of(emulator, name)
    emulator.admin.add_unhealthy_rule(image_uri="*:6.6.6", deployment_id=before["id"])
    state, tasks = run_dag(
        "rollout_after_build",
        deployment_name=name,
        image_repository="registry.example.com/acme/billing-worker",
        version="6.6.6",
    )
    assert state == "failed" and tasks["smoke_test"] == "failed", tasks
    assert tasks["roll_back"] == "success" and tasks["report_rollback"] == "failed"
    after, revisions = revisions_of(emulator, name)
    assert len(revisions) == len(old_revisions) + 2 and after["active_revision_id"] == revisions[-1]["id"]
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert after["source_config"]["resource_spec"] == before["source_config"]["resource_spec"]
    logs = task_logs()
    assert "Rolled back: deployment 'billing-worker-prod'" in logs and "with its previous resource_spec" in logs
    assert "resource_spec (unknown" not in logs


def test_rollout_after_build_fails_in_the_wait_when_the_build_fails(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    target = emulator.admin.find_deployment("checkout-api-staging")
    emulator.admin.fail_next_build(target["id"], status="BUILD_FAILED")
    state, tasks = run_dag("rollout_after_build", version="2.3.5")
    assert state == "failed"
    assert tasks["patch_deployment"] == "success"
    assert tasks["wait_for_rollout"] == "failed" and tasks["verify_rollout"] == "upstream_failed"
    after = emulator.admin.find_deployment("checkout-api-staging")
    assert after["active_revision_id"] == target["active_revision_id"]
    logs = task_logs()
    assert "BUILD_FAILED" in logs and "checkout-api-staging" in logs
    assert "line(s) of the build log of revision" in logs
    assert tasks["roll_back"] == "success"  # nothing to roll back: the old revision kept serving
    assert "nothing to roll back" in logs and "did not land" in logs
    assert len(after["revisions"]) == len(target["revisions"]) + 1


def test_rollout_after_build_fails_clearly_when_superseded(emulator: Any, task_logs: Callable[[], str]) -> None:
    emulator.admin.update_deployment(emulator.admin.find_deployment("checkout-api-staging")["id"], build_seconds=3)

    def colleague_patches(deployment: dict[str, Any]) -> None:
        hotfix = {"source_revision_config": {"image_uri": "registry.example.com/acme/checkout-api:hotfix"}}
        emulator.state.patch_deployment(deployment["id"], PatchDeploymentRequest.model_validate(hotfix))

    with WhenRevisionAppears(emulator, "checkout-api-staging", colleague_patches) as watcher:
        state, tasks = run_dag("rollout_after_build", version="2.3.6")
    assert watcher.fired.is_set()
    assert state == "failed" and tasks["wait_for_rollout"] == "failed"
    assert "superseded" in task_logs()


def test_rollout_after_build_fails_fast_when_the_deployment_is_being_deleted(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    emulator.admin.update_deployment(emulator.admin.find_deployment("checkout-api-staging")["id"], build_seconds=30)

    def platform_deletes(deployment: dict[str, Any]) -> None:
        emulator.admin.set_status(deployment["id"], "AWAITING_DELETE")

    started = time.monotonic()
    with WhenRevisionAppears(emulator, "checkout-api-staging", platform_deletes):
        state, tasks = run_dag("rollout_after_build", version="2.3.7")
    assert state == "failed" and tasks["wait_for_rollout"] == "failed"
    assert time.monotonic() - started < 25, "the sensor waited for the build instead of failing fast"
    assert "AWAITING_DELETE" in task_logs()


def test_rollout_after_build_fails_before_any_patch_for_an_unknown_deployment(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    state, tasks = run_dag("rollout_after_build", deployment_name="no-such-service")
    assert state == "failed" and tasks["patch_deployment"] == "failed"
    assert emulator.admin.count("PATCH /v2/deployments/{deployment_id}") == 0
    logs = task_logs()
    assert "deployment_name='no-such-service': no deployment is named exactly 'no-such-service'" in logs
    # The extra link's XCom is pushed before anything can fail: no missing deployment_url after the real error.
    assert "key='deployment_url'" not in logs


def test_rollout_after_build_names_near_names_when_the_name_is_not_exact(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    state, tasks = run_dag("rollout_after_build", deployment_name="checkout-api")
    assert state == "failed" and tasks["patch_deployment"] == "failed"
    near = sorted(d["name"] for d in emulator.admin.state()["deployments"] if "checkout-api" in d["name"])
    assert len(near) > 10
    shown = ", ".join(repr(name) for name in near[:10])
    listed = f"names containing it: {shown} (and {len(near) - 10} more)"
    assert f"no deployment is named exactly 'checkout-api'; {listed}" in task_logs()


def test_each_waiting_line_is_logged_once_across_a_deferral(emulator: Any, task_logs: Callable[[], str]) -> None:
    """The sensor logs its own look, the trigger (run inline by ``dag.test()``) only the states after it, and
    the resumed sensor the outcome: no line twice, "is live" once."""
    emulator.admin.update_deployment(emulator.admin.find_deployment("checkout-api-staging")["id"], build_seconds=3)
    state, tasks = run_dag("rollout_after_build", version="2.4.0")
    assert state == "success", tasks
    logs = task_logs()
    assert "running trigger in line" in logs  # the sensor did defer
    said = [
        re.sub(r" \(waited [\d.]+ s\)", "", found.group(0))
        for found in re.finditer(r"deployment 'checkout-api-staging' \([^)]*\)[^\[\n]*", logs)
    ]
    waiting = [line for line in said if "waiting for revision" in line]
    live = [line for line in said if line.rstrip().endswith("is live (status READY)")]
    assert waiting and len(waiting) == len(set(waiting)), "\n".join(said)
    assert len(live) == 1, "\n".join(said)


# -------------------------------------------------------------------------- deploy_fleet_after_build
FLEET_DEV = {"checkout-api-dev": "repo_ref", "search-staging": "image_uri", "catalog-graph-dev": "source_tarball_path"}
FLEET_PROD = {"checkout-api-prod": "repo_ref", "support-bot-prod": "repo_ref"}


def test_fleet_rolls_out_to_every_dev_then_every_prod_deployment(emulator: Any) -> None:
    before = {name: emulator.admin.find_deployment(name) for name in [*FLEET_DEV, *FLEET_PROD]}
    emulator.admin.reset_requests()
    state, tasks = run_dag("deploy_fleet_after_build", version="5.0.0")
    assert state == "success", tasks
    expected = {"repo_ref": "v5.0.0", "source_tarball_path": "uploads/acme-release/5.0.0.tar.gz"}
    for name, field in {**FLEET_DEV, **FLEET_PROD}.items():
        after = emulator.admin.find_deployment(name)
        assert len(after["revisions"]) == len(before[name]["revisions"]) + 1, name
        assert after["active_revision_id"] == after["revisions"][-1]["id"], name
        value = after["source_revision_config"][field]
        assert value == expected.get(field, "registry.example.com/acme/acme-release:5.0.0"), name
    assert sum(1 for name in tasks if name.startswith("roll_out_dev[")) == 3
    assert sum(1 for name in tasks if name.startswith("roll_out_prod[")) == 2
    assert tasks["summary"] == "success"


def test_fleet_failure_fails_that_mapped_rollout_by_name_and_leaves_prod_alone(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    emulator.admin.fail_next_build(emulator.admin.find_deployment("search-staging")["id"], status="DEPLOY_FAILED")
    prod_before = {name: emulator.admin.find_deployment(name) for name in FLEET_PROD}
    state, tasks = run_dag("deploy_fleet_after_build", version="5.0.1")
    assert state == "failed"
    dev_states = sorted(state for name, state in tasks.items() if name.startswith("roll_out_dev["))
    assert dev_states == ["failed", "success", "success"]
    assert tasks["list_prod_deployments"] == "upstream_failed"
    for name, deployment in prod_before.items():
        after = emulator.admin.find_deployment(name)
        assert after["revisions"] == deployment["revisions"], f"{name} was touched although dev failed"
    logs = task_logs()
    assert "search-staging" in logs and "DEPLOY_FAILED" in logs


# ------------------------------------------------------------------------------- onboard_repository
def test_onboarding_builds_creation_values_without_creating_by_default(emulator: Any) -> None:
    count_before = len(emulator.admin.state()["deployments"])
    state, tasks = run_dag("onboard_repository")
    assert state == "success", tasks
    assert tasks["create_deployment"] == "skipped"
    assert len(emulator.admin.state()["deployments"]) == count_before
    assert emulator.admin.count("GET /v2/auth/providers") == 1


def test_onboarding_can_create_the_deployment_from_the_listing(emulator: Any) -> None:
    state, tasks = run_dag("onboard_repository", create_deployment=True, deployment_name="support-bot-preview")
    assert state == "success", tasks
    created = emulator.admin.find_deployment("support-bot-preview")
    assert created["source"] == "codehost"
    assert created["source_config"]["repo_url"].endswith("/acme-corp/support-bot")
    assert created["source_config"]["integration_id"] == "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
    assert created["source_revision_config"]["repo_ref"] == "master"  # support-bot's default branch


def test_onboarding_fails_clearly_when_no_repository_matches(emulator: Any, task_logs: Callable[[], str]) -> None:
    state, tasks = run_dag("onboard_repository", repository_name="not-there")
    assert state == "failed" and tasks["select_repository"] == "failed"
    assert "no repository matches repository_name=acme-corp/not-there" in task_logs()


CONFIG_ONLY_PATCH_DAG = """
from datetime import datetime

from airflow.sdk import DAG, XComArg

from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

with DAG("config_only_patch", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    patch = PatchDeploymentOperator(
        task_id="patch", deployment_id="{deployment_id}", source_config={{"custom_url": "https://checkout.example.com"}}
    )
    DeploymentRolloutSensor(
        task_id="wait",
        deployment_id=XComArg(patch, key="deployment_id"),
        revision_id=XComArg(patch, key="revision_id"),
        poke_interval=0.1,
        timeout=30,
    )
"""


def test_a_patch_without_a_new_revision_still_feeds_the_sensor_through_xcom(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's wiring (``revision_id=XComArg(patch, key="revision_id")``) with a ``source_config``-only
    patch: no revision is created, and the sensor must wait for READY instead of failing on a missing XCom
    (Airflow reads a pushed ``None`` as missing, so the operator pushes ``""``)."""
    from airflow.dag_processing.dagbag import DagBag

    deployment, revisions_before = revisions_of(emulator, "billing-worker-prod")  # custom_url: external_docker only
    dag_file = tmp_path / "config_only_patch.py"
    dag_file.write_text(CONFIG_ONLY_PATCH_DAG.format(deployment_id=deployment["id"]))
    from airflow import settings

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))  # dag.test() runs DAGs of the dags folder
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag("config_only_patch").test()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert (str(run.state), states) == ("success", {"patch": "success", "wait": "success"})
    after, revisions_after = revisions_of(emulator, "billing-worker-prod")
    assert len(revisions_after) == len(revisions_before)
    assert after["source_config"]["custom_url"] == "https://checkout.example.com"


FAILING_PATCH_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.operators.deployment_service import PatchDeploymentOperator

with DAG("failing_patch", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    PatchDeploymentOperator(task_id="patch", deployment_id="{deployment_id}", image_uri="app:2", retries=0)
"""


def test_a_failed_patch_logs_its_error_and_no_missing_xcom(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str]
) -> None:
    """Airflow asks every extra link for its URL when a task ends, failed or not; the Deployment link reads
    the ``deployment_url`` XCom, which the operator pushes before anything can fail."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    missing = "0b9b7c43-3f0e-4d7e-9d7e-5a4c1c2b3a49"
    dag_file = tmp_path / "failing_patch.py"
    dag_file.write_text(FAILING_PATCH_DAG.format(deployment_id=missing))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag("failing_patch").test()
    assert str(run.state) == "failed"
    logs = task_logs()
    assert f"Deployment ID {missing} not found" in logs
    assert "XCom not found" not in logs


# ----------------------------------------------------------------------------- roll_back_to_previous
def test_roll_back_to_previous_restores_the_revision_that_served_before(emulator: Any) -> None:
    before, _ = revisions_of(emulator, "checkout-api-staging")
    change = {"source_revision_config": {"image_uri": "registry.example.com/acme/checkout-api:9.9.9"}}
    patched = emulator.state.patch_deployment(before["id"], PatchDeploymentRequest.model_validate(change))
    deadline = time.monotonic() + 30
    while revisions_of(emulator, "checkout-api-staging")[0]["active_revision_id"] != patched["latest_revision_id"]:
        assert time.monotonic() < deadline, "the new revision never went live"
        time.sleep(0.1)
    state, tasks = run_dag("roll_back_to_previous")
    assert (state, tasks) == ("success", {"list_revisions": "success", "roll_back": "success"})
    after, revisions = revisions_of(emulator, "checkout-api-staging")
    assert after["active_revision_id"] == revisions[-1]["id"] and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]


def test_every_operator_and_the_sensor_appear_in_an_example() -> None:
    text = "\n".join(path.read_text() for path in DAGS.glob("*.py"))
    for name in (
        "ListOAuthProvidersOperator",
        "ListRepositoriesOperator",
        "ListDeploymentsOperator",
        "ListRevisionsOperator",
        "PatchDeploymentOperator",
        "RollbackDeploymentOperator",
        "DeploymentRolloutSensor",
        "FleetRolloutOperator",
    ):
        assert f"{name}(" in text or f"{name}.partial(" in text, name


def test_example_dag_files_import_cleanly(airflow_db: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors
    assert set(bag.dag_ids) == {
        "analysed_rollout",
        "deployment_service_rollback",
        "rollout_after_build",
        "deploy_fleet_after_build",
        "onboard_repository",
        "progressive_rollout",
        "roll_back_to_previous",
        "quality_gated_rollout",
        "smoke_test_on_new_revision",
        "promote_settled_revision",
        "guarded_rollout",
        "deployment_service_guard",
    }
