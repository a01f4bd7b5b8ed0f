"""The Rollouts view's data after a real rollout: the ``progressive_rollout`` example DAG runs once against the
emulator (the canary lands, a person approves, both deployments of wave 1 fail their build, the budget is
blown, wave 2 is never patched), then every page's JSON is checked against what the emulator serves and what
the run recorded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import CONN_ENV, connection_json
from tests.dag_runs import HumanResponder, run_dag

CANARY = "checkout-api-dev"
WAVE_1 = ("search-staging", "catalog-graph-dev")
WAVE_2 = ("checkout-api-prod", "support-bot-prod")
API_KEY = "rollouts-view-Distinctive-Key-93c1"
SEEDED_SECRET = "example-secret-value"
"""Prefix of the secret values the example data gives deployments (the emulator echoes them)."""


@dataclass
class BlownBudget:
    """The run and what the emulator served before and after it."""

    emulator: Any
    run_id: str
    state: str
    tasks: dict[str, str]
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def blown_budget(airflow_db: str) -> Iterator[BlownBudget]:
    """One ``progressive_rollout`` run whose wave 1 fails (module-wide: about 25 s)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider.emulator.server import EmulatorServer

    server = EmulatorServer(api_key=API_KEY, frozen_clock=False, build_seconds=1.0, ready_seconds=0.5).start()
    names = (CANARY, *WAVE_1, *WAVE_2)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(CONN_ENV, connection_json(server.base_url, API_KEY, backoff_initial=0.05, backoff_max=0.2))
            before = {name: server.admin.find_deployment(name) for name in names}
            for name in WAVE_1:
                server.admin.fail_next_build(before[name]["id"], status="BUILD_FAILED")
            with HumanResponder("progressive_rollout", "approve_rollout", "Approve") as human:
                state, tasks = run_dag("progressive_rollout", version="7.0.0")
            assert human.answered.is_set(), f"the approval was never answered: {human.seen}; tasks: {tasks}"
            with create_session() as session:
                run = session.scalars(
                    select(DagRun).where(DagRun.dag_id == "progressive_rollout").order_by(DagRun.id.desc()).limit(1)
                ).one()
                run_id = run.run_id
            after = {name: server.admin.find_deployment(name) for name in names}
            yield BlownBudget(server, run_id, state, tasks, before, after)
    finally:
        server.stop()


@pytest.fixture
def admin(view: Callable[..., TestClient], token: Callable[[str], str], blown_budget: BlownBudget) -> TestClient:
    return view(cookie=token("admin"))


def get(client: TestClient, path: str, **params: Any) -> Any:
    answer = client.get(f"/deployment-service/{path}", params=params)
    assert answer.status_code == 200, f"GET {path} {params}: {answer.status_code} {answer.text[:500]}"
    return answer.json()


def test_the_run_went_as_the_scenario_says(blown_budget: BlownBudget) -> None:
    assert blown_budget.state == "failed"
    assert blown_budget.tasks["canary"] == "success" and blown_budget.tasks["roll_out_fleet"] == "failed"


def test_deployments_list_shows_what_serves_and_the_last_rollout_of_each(
    admin: TestClient, blown_budget: BlownBudget
) -> None:
    listing = get(admin, "api/deployments", tag_value_ids="13947cbe-457c-441f-a7e0-7c554c9fae02")
    rows = {row["name"]: row for row in listing["deployments"]}
    after, run_id = blown_budget.after, blown_budget.run_id

    canary = rows[CANARY]
    assert canary["active_revision_id"] == after[CANARY]["active_revision_id"] == after[CANARY]["latest_revision_id"]
    assert canary["serving"]["repo_ref"] == after[CANARY]["source_revision_config"]["repo_ref"] == "v7.0.0"
    assert canary["revisions_differ"] is False
    last = canary["last_rollout"]
    assert (last["source"], last["outcome"], last["dag_id"], last["run_id"], last["task_id"]) == (
        "fleet",  # the canary task's row: its record (its asset event tells the same rollout)
        "landed",
        "progressive_rollout",
        run_id,
        "canary",
    )
    assert last["revision_id"] == after[CANARY]["active_revision_id"]
    assert last["previous_revision_id"] == blown_budget.before[CANARY]["active_revision_id"]
    assert last["ti_path"] == f"/dags/progressive_rollout/runs/{quote(run_id, safe='')}/tasks/canary"

    for name in WAVE_1:  # the failed build is the latest revision; the old one still serves
        row, served = rows[name], after[name]
        assert (
            served["active_revision_id"]
            == blown_budget.before[name]["active_revision_id"]
            != served["latest_revision_id"]
        )
        assert row["active_revision_id"] == served["active_revision_id"]
        assert row["latest_revision_id"] == served["latest_revision_id"]
        assert row["revisions_differ"] is True
        last = row["last_rollout"]
        assert (last["source"], last["outcome"], last["task_id"], last["wave"]) == (
            "fleet",
            "failed",
            "roll_out_fleet",
            "wave 1",
        )
        assert last["revision_id"] == served["latest_revision_id"] and "BUILD_FAILED" in last["message"]
        assert last["tab_path"].endswith("/tasks/roll_out_fleet/plugin/fleet-rollout")
        assert last["running"] is False
    for name in WAVE_2:  # never patched by this run: it did not touch them
        last = rows[name]["last_rollout"]
        assert last is None or last["run_id"] != run_id, last


def test_filters_go_to_the_service(admin: TestClient, blown_budget: BlownBudget) -> None:
    names = [row["name"] for row in get(admin, "api/deployments", name_contains="checkout-api-")["deployments"]]
    assert CANARY in names and all("checkout-api-" in name for name in names)
    prod = get(admin, "api/deployments", deployment_type="prod", status="READY")["deployments"]
    served = {item["name"]: item for item in blown_budget.emulator.admin.state()["deployments"]}
    assert {row["name"] for row in prod} == {
        name for name, item in served.items() if item["deployment_type"] == "prod" and item["status"] == "READY"
    }


def test_a_deployment_page_marks_each_revision_with_the_run_that_rolled_it_out_or_failed_it(
    admin: TestClient, blown_budget: BlownBudget
) -> None:
    name = WAVE_1[0]
    served = blown_budget.after[name]
    page = get(admin, f"api/deployments/{served['id']}")
    assert page["revisions_available"] is True
    revisions = {revision["id"]: revision for revision in page["revisions"]}
    assert set(revisions) == {revision["id"] for revision in served["revisions"]}
    failed = revisions[served["latest_revision_id"]]
    assert failed["status"] == "BUILD_FAILED" and failed["latest"] and not failed["active"]
    assert [(mark["role"], mark["label"], mark["run_id"], mark["task_id"]) for mark in failed["rollouts"]] == [
        ("failed", "failed (BUILD_FAILED)", blown_budget.run_id, "roll_out_fleet")
    ]
    assert revisions[served["active_revision_id"]]["active"] is True
    assert page["deployment"]["revisions_differ"] is True and page["running"] == []

    canary = blown_budget.after[CANARY]
    canary_page = get(admin, f"api/deployments/{canary['id']}")
    live = next(revision for revision in canary_page["revisions"] if revision["id"] == canary["active_revision_id"])
    # The canary task's asset event and its fleet row tell one rollout: one mark, from the row, with the wave.
    marks = [mark for mark in live["rollouts"] if mark["run_id"] == blown_budget.run_id]
    assert [(mark["role"], mark["source"], mark["task_id"], mark["wave"]) for mark in marks] == [
        ("landed", "fleet", "canary", "wave 1")
    ]
    assert live["status"] == "DEPLOYED" and live["build"]["repo_ref"] == "v7.0.0"
    assert canary_page["deployment"]["serving"]["repo_ref"] == "v7.0.0"


def test_the_fleet_tab_shows_waves_outcomes_the_budget_and_the_approval(
    admin: TestClient, blown_budget: BlownBudget
) -> None:
    fleet = get(admin, "api/fleet", dag_id="progressive_rollout", run_id=blown_budget.run_id, task_id="roll_out_fleet")
    assert fleet["is_fleet"] and fleet["source"] == "task_state_store"
    assert fleet["task"]["state"] == "failed" and fleet["task"]["running"] is False
    assert [(wave["name"], wave["state"]) for wave in fleet["waves"]] == [
        ("wave 1", "done"),
        ("wave 2", "not started: the rollout stopped"),
    ]
    wave_1 = {row["name"]: row for row in fleet["waves"][0]["rows"]}
    assert set(wave_1) == set(WAVE_1)
    for name, row in wave_1.items():
        served = blown_budget.after[name]
        assert row["outcome"] == "failed" and "BUILD_FAILED" in row["message"]
        assert (
            row["from_revision"] == served["active_revision_id"] and row["to_revision"] == served["latest_revision_id"]
        )
    assert {row["name"]: row["outcome"] for row in fleet["waves"][1]["rows"]} == dict.fromkeys(WAVE_2, "not_patched")
    assert fleet["budget"] == {"allowed_failures": 1, "failures": 2, "reason_unknown": 0, "exceeded": True}
    assert fleet["counts"] == {"failed": 2, "not_patched": 2}
    assert fleet["stopped"] == "2 deployment(s) failed, more than max_failures allows (1)"
    [approval] = fleet["approvals"]
    assert approval["task_id"] == "approve_rollout" and approval["chosen_options"] == ["Approve"]
    assert (
        approval["responded_by"] == "release-manager" and approval["subject"] == "Roll release 7.0.0 out to the fleet?"
    )

    canary = get(admin, "api/fleet", dag_id="progressive_rollout", run_id=blown_budget.run_id, task_id="canary")
    [row] = [row for wave in canary["waves"] for row in wave["rows"]]
    assert (row["name"], row["outcome"], row["to_revision"]) == (
        CANARY,
        "landed",
        blown_budget.after[CANARY]["active_revision_id"],
    )
    assert canary["budget"]["exceeded"] is False and canary["stopped"] == ""
    assert canary["conn_id"] == fleet["conn_id"] == "deployment_service_default"  # the tasks' rendered field


def test_the_fleet_tab_of_another_task_says_it_is_not_a_fleet_rollout(
    admin: TestClient, blown_budget: BlownBudget
) -> None:
    other = get(admin, "api/fleet", dag_id="progressive_rollout", run_id=blown_budget.run_id, task_id="build_release")
    assert other["is_fleet"] is False and other["waves"] == [] and other["task"]["operator"] == "@task"
    unmapped = get(
        admin,
        "api/fleet",
        dag_id="progressive_rollout",
        run_id=blown_budget.run_id,
        task_id="canary",
        map_index="{MAP_INDEX}",
    )
    assert unmapped["task"]["map_index"] == -1  # the UI leaves {MAP_INDEX} as is for an unmapped task


def test_no_page_and_no_answer_carries_the_api_key_or_a_secret_value(
    admin: TestClient, blown_budget: BlownBudget, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    ids = [deployment["id"] for deployment in blown_budget.after.values()]
    texts = [
        admin.get(f"/deployment-service/{page}").text for page in ("deployments", f"deployments/{ids[0]}", "fleet")
    ]
    texts.append(json.dumps(get(admin, "api/deployments")))
    texts.append(json.dumps(get(admin, "api/connections")))
    texts += [json.dumps(get(admin, f"api/deployments/{deployment_id}")) for deployment_id in ids]
    for task_id in ("canary", "roll_out_fleet"):
        texts.append(
            json.dumps(
                get(admin, "api/fleet", dag_id="progressive_rollout", run_id=blown_budget.run_id, task_id=task_id)
            )
        )
    out, err = capfd.readouterr()
    for text in [*texts, out, err, caplog.text]:
        assert API_KEY not in text
        assert SEEDED_SECRET not in text
    raw = httpx.get(f"{blown_budget.emulator.base_url}/v2/deployments", headers={"X-Api-Key": API_KEY}, timeout=10)
    assert SEEDED_SECRET in raw.text  # the service echoes secret values: the view must leave them out
