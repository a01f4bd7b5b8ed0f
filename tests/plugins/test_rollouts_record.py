"""The record in the Rollouts view after real rollouts (issue 30): real tasks run with ``dag.test()`` against the
emulator, and the view's JSON names the DAG run for every revision a task made or rejected, failed tasks included,
with labels that read the right way round, checked against what the emulator itself serves.

One run of each, module-wide:

- ``record_rejected``: a patch whose analysis fails (the error rate rises once live), rolled back automatically
  (deferrable: under ``dag.test()`` the defer kwargs are dropped);
- ``record_landed``: a patch verified and baked;
- ``record_timeout``: a patch whose revision is not live within its ``timeout`` (its build takes an hour; no
  rollback);
- ``record_fleet``: a fleet wave of two, one rejected by its analysis, both rolled back (the budget is 0);
- ``record_rollback``: a rollback by hand while the deployment's latest revision is a failed build.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.models import PatchDeploymentRequest
from tests.conftest import CONN_ENV, connection_json

API_KEY = "rollouts-record-Distinctive-Key-51d2"
# deployments no other test in this process touches: the DORA figures count every record of a deployment
REJECTED, LANDED, TIMEOUT = "pricing-engine-dev", "recommendation-agent-prod", "catalog-graph-staging"
FLEET = ("fraud-detector-dev", "fraud-detector-staging")
FLEET_BAD = FLEET[0]
ROLLBACK = "ledger-service-prod"

DAGS = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import (
    FleetRolloutOperator,
    PatchDeploymentOperator,
    RollbackDeploymentOperator,
)


def analysis():
    return Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=20)],
        interval_seconds=0.3,
        count=4,
    )


def dag(dag_id):
    return DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)


with dag("record_rejected"):
    PatchDeploymentOperator(
        task_id="patch", deployment_id={rejected!r}, image_uri="registry.example.com/acme/checkout-api:9.1.0",
        wait_for_rollout=True, deferrable=True, analysis=analysis(), rollback_on_failure=True,
        poll_interval=0.2, timeout=60, retries=0,
    )

with dag("record_landed"):
    PatchDeploymentOperator(
        task_id="patch", deployment_id={landed!r}, image_uri="registry.example.com/acme/search:9.2.0",
        wait_for_rollout=True, verify=lambda deployment: True, bake_seconds=0.5, poll_interval=0.2, timeout=60,
        retries=0,
    )

with dag("record_timeout"):
    PatchDeploymentOperator(
        task_id="patch", deployment_id={timeout!r}, image_uri="registry.example.com/acme/billing-worker:9.3.0",
        wait_for_rollout=True, poll_interval=0.1, timeout=1, retries=0,
    )

with dag("record_fleet"):
    FleetRolloutOperator(
        task_id="roll_out", deployment_names={fleet!r}, repo_ref="v9.4.0", wave_size=2, max_failures=0,
        analysis=analysis(), rollback_on_failure=True, poll_interval=0.2, timeout=60, deferrable=False, retries=0,
    )

with dag("record_rollback"):
    RollbackDeploymentOperator(
        task_id="roll_back", deployment_id={rollback!r}, revision_id={rollback_to!r}, poll_interval=0.2,
        timeout=60, retries=0,
    )
"""


@dataclass
class Runs:
    """The runs, and what the emulator served before and after them."""

    emulator: Any
    run_ids: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    before: dict[str, dict[str, Any]] = field(default_factory=dict)
    after: dict[str, dict[str, Any]] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)
    """Revisions the setup made, by what they are (``serving``, ``failed_build``)."""


def roll_out(state: Any, deployment_id: str, image: str) -> str:
    """Roll a revision out directly on the emulator (as someone else would)."""
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": image}})
    return str(state.patch_deployment(deployment_id, request)["latest_revision_id"])


def wait_for(check: Callable[[], bool], what: str, seconds: float = 20) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:g} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def runs(airflow_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider.emulator.server import EmulatorServer

    server = EmulatorServer(api_key=API_KEY, frozen_clock=False, build_seconds=1.0, ready_seconds=0.5).start()
    admin, state = server.admin, server.state
    names = (REJECTED, LANDED, TIMEOUT, *FLEET, ROLLBACK)
    found = Runs(server)
    try:
        ids = {name: admin.find_deployment(name)["id"] for name in names}
        bad_later = {"error_rate": 0.5, "requests_per_second": 200}
        admin.set_behaviour(
            ids[REJECTED], revision_id="next", requests_per_second=200, after_seconds=0.3, then=bad_later
        )
        admin.set_behaviour(ids[FLEET_BAD], revision_id="next", requests_per_second=200, error_rate=0.5)
        admin.set_behaviour(ids[FLEET[1]], revision_id="next", requests_per_second=200)
        state.update_deployment_options(ids[TIMEOUT], build_seconds=3600)  # never live within its timeout
        # The rollback's deployment: a revision rolled out and serving, then a patch whose build failed on top.
        good = admin.find_deployment(ROLLBACK)["active_revision_id"]
        serving = roll_out(state, ids[ROLLBACK], "registry.example.com/acme/ledger-service:bad-but-live")
        wait_for(lambda: admin.find_deployment(ROLLBACK)["active_revision_id"] == serving, "the setup's rollout")
        state.fail_next_build(ids[ROLLBACK], status="BUILD_FAILED")
        failed_build = roll_out(state, ids[ROLLBACK], "registry.example.com/acme/ledger-service:never-built")
        wait_for(
            lambda: admin.find_deployment(ROLLBACK)["revisions"][-1]["status"] == "BUILD_FAILED", "the failed build"
        )
        found.named = {"good": good, "serving": serving, "failed_build": failed_build}
        found.before = {name: admin.find_deployment(name) for name in names}
        folder = tmp_path_factory.mktemp("record-dags")
        dag_file = folder / "record_dags.py"
        dag_file.write_text(
            textwrap.dedent(DAGS).format(
                rejected=ids[REJECTED],
                landed=ids[LANDED],
                timeout=ids[TIMEOUT],
                fleet=list(FLEET),
                rollback=ids[ROLLBACK],
                rollback_to=good,
            )
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(CONN_ENV, connection_json(server.base_url, API_KEY, backoff_initial=0.05, backoff_max=0.2))
            patch.setattr(settings, "DAGS_FOLDER", str(folder))
            bag = DagBag(dag_folder=str(dag_file))
            assert not bag.import_errors, bag.import_errors
            for dag_id in ("record_rejected", "record_landed", "record_timeout", "record_fleet", "record_rollback"):
                run = bag.get_dag(dag_id).test()
                found.run_ids[dag_id], found.states[dag_id] = run.run_id, str(run.state)
            found.after = {name: admin.find_deployment(name) for name in names}
            yield found  # the view reads the service through the same connection
    finally:
        server.stop()


@pytest.fixture
def admin_view(view: Callable[..., TestClient], token: Callable[[str], str], runs: Runs) -> TestClient:
    return view(cookie=token("admin"))


def page(client: TestClient, name: str, runs: Runs) -> dict[str, Any]:
    deployment_id = runs.after[name]["id"]
    answer = client.get(f"/deployment-service/api/deployments/{deployment_id}")
    assert answer.status_code == 200, answer.text[:500]
    return dict(answer.json())


def marks(shown: dict[str, Any], run_id: str) -> dict[str, list[tuple[str, str]]]:
    """``{revision: [(role, label)]}`` of the marks the run left on the deployment's revisions."""
    found: dict[str, list[tuple[str, str]]] = {}
    for revision in shown["revisions"]:
        for mark in revision["rollouts"]:
            if mark["run_id"] == run_id:
                found.setdefault(revision["id"], []).append((mark["role"], mark["label"]))
    return found


def new_revisions(runs: Runs, name: str) -> list[dict[str, Any]]:
    """The revisions the run made, as the emulator itself shows them (oldest first)."""
    before = {revision["id"] for revision in runs.before[name]["revisions"]}
    return [revision for revision in runs.after[name]["revisions"] if revision["id"] not in before]


def test_the_runs_went_as_their_scenarios_say(runs: Runs) -> None:
    assert runs.states == {
        "record_rejected": "failed",
        "record_landed": "success",
        "record_timeout": "failed",
        "record_fleet": "failed",
        "record_rollback": "success",
    }


def test_a_rejected_rollout_and_its_automatic_rollback_are_credited_to_the_failed_run(
    admin_view: TestClient, runs: Runs
) -> None:
    run_id, after = runs.run_ids["record_rejected"], runs.after[REJECTED]
    bad, restored = new_revisions(runs, REJECTED)
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"  # the emulator's own state
    previous = runs.before[REJECTED]["active_revision_id"]
    shown = page(admin_view, REJECTED, runs)
    assert marks(shown, run_id) == {
        bad["id"]: [("rejected", "rejected (analysis failed)")],
        restored["id"]: [("rollback_revision", "rollback revision")],
        previous: [("rolled_back_to", "rolled back to")],
    }
    [rejected] = [mark for r in shown["revisions"] if r["id"] == bad["id"] for mark in r["rollouts"]]
    assert rejected["analysis"]["verdict"] == "failed" and rejected["analysis"]["measurements"]
    assert (rejected["dag_id"], rejected["task_id"], rejected["try_number"]) == ("record_rejected", "patch", 1)
    figures = shown["dora"]
    assert (figures["rollouts"], figures["failed"], figures["change_failure_rate"]) == (1, 1, 1.0)
    assert figures["time_to_restore"]["count"] == 1 and figures["time_to_restore"]["median_seconds"] > 0
    listing = admin_view.get("/deployment-service/api/deployments", params={"name_contains": REJECTED}).json()
    [row] = [row for row in listing["deployments"] if row["name"] == REJECTED]
    last = row["last_rollout"]  # the newest record: the failed run
    assert (last["run_id"], last["outcome"], last["source"]) == (run_id, "rolled_back", "record")


def test_a_landed_rollout_is_credited_to_its_run(admin_view: TestClient, runs: Runs) -> None:
    run_id, after = runs.run_ids["record_landed"], runs.after[LANDED]
    [revision] = new_revisions(runs, LANDED)
    assert after["active_revision_id"] == revision["id"] and after["status"] == "READY"
    shown = page(admin_view, LANDED, runs)
    assert marks(shown, run_id) == {revision["id"]: [("landed", "landed")]}
    assert shown["dora"]["landed"] == 1 and shown["dora"]["patch_to_live"]["count"] == 1


def test_a_timed_out_rollout_is_credited_to_its_run(admin_view: TestClient, runs: Runs) -> None:
    run_id = runs.run_ids["record_timeout"]
    [revision] = new_revisions(runs, TIMEOUT)
    shown = page(admin_view, TIMEOUT, runs)
    assert marks(shown, run_id) == {revision["id"]: [("timed_out", "timed out")]}
    assert shown["dora"]["failed"] == 1


def test_a_fleet_wave_rolled_back_reads_the_right_way_round(admin_view: TestClient, runs: Runs) -> None:
    run_id = runs.run_ids["record_fleet"]
    for name, rejected_role in ((FLEET_BAD, ("rejected", "rejected (analysis failed)")), (FLEET[1], None)):
        after, previous = runs.after[name], runs.before[name]["active_revision_id"]
        rolled_out, restored = new_revisions(runs, name)
        assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
        assert restored["source_revision_config"]["repo_ref"] == runs.before[name]["source_revision_config"]["repo_ref"]
        expected = rejected_role or ("rolled_back_with_wave", "rolled back with its wave")
        assert marks(page(admin_view, name, runs), run_id) == {
            rolled_out["id"]: [expected],
            restored["id"]: [("rollback_revision", "rollback revision")],
            previous: [("rolled_back_to", "rolled back to")],
        }, name


def test_a_rollback_past_a_failed_build_names_the_revision_that_served(admin_view: TestClient, runs: Runs) -> None:
    run_id, named = runs.run_ids["record_rollback"], runs.named
    [restored] = new_revisions(runs, ROLLBACK)
    after = runs.after[ROLLBACK]
    assert after["active_revision_id"] == restored["id"] and after["status"] == "READY"
    assert marks(page(admin_view, ROLLBACK, runs), run_id) == {
        named["serving"]: [("rolled_back_from", "rolled back from")],
        restored["id"]: [("rollback_revision", "rollback revision")],
        named["good"]: [("rolled_back_to", "rolled back to")],
    }  # the failed build, made outside Airflow, is not credited to the rollback


def test_every_revision_a_task_made_or_rejected_names_its_dag_run(admin_view: TestClient, runs: Runs) -> None:
    """No revision a task of the provider made (or rejected) shows "not by Airflow": each has a mark naming its run."""
    for name in (REJECTED, LANDED, TIMEOUT, *FLEET, ROLLBACK):
        shown = {revision["id"]: revision for revision in page(admin_view, name, runs)["revisions"]}
        for revision in new_revisions(runs, name):
            marked = shown[revision["id"]]["rollouts"]
            assert marked and all(mark["run_id"] in runs.run_ids.values() for mark in marked), (name, revision)
            assert all(mark["run_path"].startswith("/dags/record_") for mark in marked)


def test_the_deployments_page_shows_the_connections_figures(admin_view: TestClient, runs: Runs) -> None:
    listing = admin_view.get("/deployment-service/api/deployments", params={"days": "7"}).json()
    figures = listing["dora"]
    assert figures["window"]["days"] == 7.0
    # this module's rollouts at least (the database is shared with other tests): 1 landed, 4 failed
    assert figures["rollouts"] >= 5 and figures["failed"] >= 4 and figures["landed"] >= 1
    assert 0 < figures["change_failure_rate"] < 1
    wrong = admin_view.get("/deployment-service/api/deployments", params={"days": "0"})
    assert wrong.status_code == 422 and "days must be from 1 to 365" in wrong.json()["detail"]
