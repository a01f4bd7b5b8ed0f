"""The ``progressive_rollout`` example DAG against the emulator: approve, reject, a failing canary and a
blown failure budget. A thread answers the approval the way a person does through the REST API; every
test asserts what the emulator serves afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.dag_runs import DAGS, HumanResponder, example_emulator, run_dag

CANARY = "checkout-api-dev"
REST_DEV = {"search-staging": "image_uri", "catalog-graph-dev": "source_tarball_path"}
PROD = {"checkout-api-prod": "repo_ref", "support-bot-prod": "repo_ref"}
FLEET = {CANARY: "repo_ref", **REST_DEV, **PROD}
PATCH = "PATCH /v2/deployments/{deployment_id}"


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The examples' emulator (``example_emulator``)."""
    return example_emulator(deployment_service_emulator_factory, monkeypatch)


def expected_value(field: str, version: str) -> str:
    return {
        "repo_ref": f"v{version}",
        "image_uri": f"registry.example.com/acme/acme-release:{version}",
        "source_tarball_path": f"uploads/acme-release/{version}.tar.gz",
    }[field]


def snapshot(emulator: Any) -> dict[str, dict[str, Any]]:
    return {name: emulator.admin.find_deployment(name) for name in FLEET}


def patched_names(emulator: Any, ids: dict[str, str]) -> list[str]:
    """Names of the deployments patched (each PATCH that the emulator accepted), in order."""
    names = {deployment_id: name for name, deployment_id in ids.items()}
    return [
        names.get(record["path"].rsplit("/", 1)[1], record["path"])
        for record in emulator.admin.requests()
        if record["route"] == PATCH and record["status_code"] == 200
    ]


def approval_asked(dag_run_states: dict[str, str]) -> bool:
    return dag_run_states.get("approve_rollout") not in (None, "upstream_failed", "skipped", "None")


def hitl_requests_for_latest_run() -> list[Any]:
    """The HITL request rows of the latest progressive_rollout run (one per asked task)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == "progressive_rollout").order_by(DagRun.id.desc()).limit(1)
        ).one()
        query = (
            select(HITLDetail.subject)
            .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
            .where(TaskInstance.dag_id == "progressive_rollout", TaskInstance.run_id == run.run_id)
        )
        return list(session.scalars(query))


def test_approved_release_reaches_every_deployment_canary_first(emulator: Any, task_logs: Callable[[], str]) -> None:
    before = snapshot(emulator)
    ids = {name: deployment["id"] for name, deployment in before.items()}
    emulator.admin.reset_requests()
    at_approval: dict[str, Any] = {}

    def record_state() -> None:  # what the service serves when the person is asked
        at_approval["patched"] = patched_names(emulator, ids)
        at_approval["canary"] = emulator.admin.find_deployment(CANARY)

    with HumanResponder("progressive_rollout", "approve_rollout", "Approve", before_answer=record_state) as human:
        state, tasks = run_dag("progressive_rollout", version="6.0.0")
    assert human.answered.is_set(), f"the approval was never answered: {human.seen}; tasks: {tasks}"
    assert state == "success", (tasks, task_logs()[-3000:])
    assert tasks["canary"] == tasks["approve_rollout"] == tasks["roll_out_fleet"] == tasks["summary"] == "success"

    # Asked only once the canary served the release, and nothing else had been touched.
    assert at_approval["patched"] == [CANARY]
    canary_then = at_approval["canary"]
    assert (
        canary_then["active_revision_id"] == canary_then["latest_revision_id"] != before[CANARY]["active_revision_id"]
    )
    assert canary_then["source_revision_config"]["repo_ref"] == "v6.0.0"
    assert human.subject == "Roll release 6.0.0 out to the fleet?"
    assert f"**{CANARY}**: landed, revision {canary_then['active_revision_id']}" in (human.body or "")
    assert "search-staging, catalog-graph-dev, checkout-api-prod, support-bot-prod" in (human.body or "")

    # Canary, then dev, then prod; each deployment patched once and serving the field its source needs.
    order = patched_names(emulator, ids)
    assert order[0] == CANARY and set(order[1:3]) == set(REST_DEV) and set(order[3:]) == set(PROD), order
    for name, field in FLEET.items():
        after = emulator.admin.find_deployment(name)
        assert len(after["revisions"]) == len(before[name]["revisions"]) + 1, name
        assert after["active_revision_id"] == after["revisions"][-1]["id"], name
        assert after["source_revision_config"][field] == expected_value(field, "6.0.0"), name
    logs = task_logs()
    assert "Approval: Approve; outcomes: {'landed': 5}" in logs


def test_rejected_release_stays_on_the_canary(emulator: Any, task_logs: Callable[[], str]) -> None:
    before = snapshot(emulator)
    ids = {name: deployment["id"] for name, deployment in before.items()}
    emulator.admin.reset_requests()
    with HumanResponder("progressive_rollout", "approve_rollout", "Reject") as human:
        state, tasks = run_dag("progressive_rollout", version="6.0.1")
    assert human.answered.is_set(), f"the approval was never answered: {human.seen}; tasks: {tasks}"
    assert state == "success", tasks  # a rejection is a decision, not a failure
    assert tasks["canary"] == "success" and tasks["approve_rollout"] == "success"
    assert tasks["roll_out_fleet"] == "skipped" and tasks["summary"] == "success"
    assert patched_names(emulator, ids) == [CANARY]
    assert emulator.admin.find_deployment(CANARY)["source_revision_config"]["repo_ref"] == "v6.0.1"
    for name in [*REST_DEV, *PROD]:
        assert emulator.admin.find_deployment(name)["revisions"] == before[name]["revisions"], name
    logs = task_logs()
    assert "Approval: Reject; outcomes: {'landed': 1}" in logs


def test_failing_canary_asks_nobody_and_touches_nothing_else(emulator: Any, task_logs: Callable[[], str]) -> None:
    before = snapshot(emulator)
    ids = {name: deployment["id"] for name, deployment in before.items()}
    emulator.admin.fail_next_build(ids[CANARY], status="BUILD_FAILED")
    emulator.admin.reset_requests()
    with HumanResponder("progressive_rollout", "approve_rollout", "Approve", timeout=5) as human:
        state, tasks = run_dag("progressive_rollout", version="6.0.2")
    assert not human.answered.is_set() and not approval_asked(tasks), tasks
    assert hitl_requests_for_latest_run() == []
    assert state == "failed"
    assert tasks["canary"] == "failed"
    assert tasks["approve_rollout"] == tasks["roll_out_fleet"] == "upstream_failed"
    assert tasks["summary"] == "failed"  # it ran (all_done) and reports the failure
    assert patched_names(emulator, ids) == [CANARY]
    assert emulator.admin.find_deployment(CANARY)["active_revision_id"] == before[CANARY]["active_revision_id"]
    for name in [*REST_DEV, *PROD]:
        assert emulator.admin.find_deployment(name)["revisions"] == before[name]["revisions"], name
    logs = task_logs()
    assert f"fleet rollout stopped: 1 deployment(s) failed, more than max_failures allows (0). Failed: {CANARY}" in logs
    assert "BUILD_FAILED" in logs
    assert f"the release did not roll out everywhere: failed: {CANARY}" in logs


def test_blown_failure_budget_names_the_failures_and_leaves_prod_alone(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    before = snapshot(emulator)
    ids = {name: deployment["id"] for name, deployment in before.items()}
    for name in REST_DEV:  # both of wave 1 fail: 2 > floor(0.25 * 4) = 1
        emulator.admin.fail_next_build(ids[name], status="BUILD_FAILED")
    emulator.admin.reset_requests()
    with HumanResponder("progressive_rollout", "approve_rollout", "Approve") as human:
        state, tasks = run_dag("progressive_rollout", version="6.0.3")
    assert human.answered.is_set(), f"the approval was never answered: {human.seen}; tasks: {tasks}"
    assert state == "failed"
    assert tasks["canary"] == tasks["approve_rollout"] == "success"
    assert tasks["roll_out_fleet"] == "failed" and tasks["summary"] == "failed"
    order = patched_names(emulator, ids)
    assert order[0] == CANARY and sorted(order[1:]) == sorted(REST_DEV), order
    for name in PROD:
        assert emulator.admin.find_deployment(name)["revisions"] == before[name]["revisions"], name
    for name in REST_DEV:
        after = emulator.admin.find_deployment(name)
        assert after["active_revision_id"] == before[name]["active_revision_id"], name
    logs = task_logs()
    assert "fleet rollout stopped: 2 deployment(s) failed, more than max_failures allows (1)" in logs
    assert "2 deployment(s) in later waves were not patched" in logs
    stopped = logs[logs.index("fleet rollout stopped") :]
    assert all(name in stopped for name in REST_DEV), stopped[:500]
    assert "not_patched" in logs and "Approval: Approve" in logs


def test_the_rollout_section_the_guide_includes_is_marked() -> None:
    text = (DAGS / "progressive_rollout.py").read_text()
    start, end = text.index("# [START fleet_rollout]"), text.index("# [END fleet_rollout]")
    section = text[start:end]
    assert "FleetRolloutOperator(" in section and "ApprovalOperator(" in section and "def summary" in section
