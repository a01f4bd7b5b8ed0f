"""The ``guarded_rollout`` example (issue 42) under ``dag.test()`` against the emulator, with Airflow's real
Variables: the release lands and is handed to the guard; its guard (the real trigger, run inline on the record the
task wrote) finds it regressed when its error rate rises after landing; the guard's DAG rolls it back to the
revision that served before, records the guard's verdict and, run again on the same regression, rolls nothing back.
Every test asserts what the emulator serves afterwards."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from airflow_provider.analysis.guard import guard_key
from airflow_provider.triggers.deployment_service import DeploymentGuardTrigger
from airflow_provider.triggers.guard import MemoryGuardStore
from tests.dag_runs import DAGS, example_emulator

NAME = "checkout-api-staging"
TRAFFIC = 200.0
KEY_PREFIX = "deployment_service_guard:deployment_service_default:"


@pytest.fixture
def emulator(
    airflow_db: str, deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "0.2")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "0.3")
    monkeypatch.setenv("DEPLOYMENT_SERVICE_EXAMPLE_GUARD_SECONDS", "120")
    return example_emulator(deployment_service_emulator_factory, monkeypatch)


RUNS: list[str] = []
"""The run ids, in turn."""


def run(dag_id: str, **conf: Any) -> tuple[str, dict[str, str]]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "guarded_rollout.py"))
    assert not bag.import_errors, bag.import_errors
    dag_run = bag.get_dag(dag_id).test(run_conf=conf or None)
    RUNS.append(str(dag_run.run_id))
    states = {}
    for ti in dag_run.get_task_instances():
        states[ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"] = str(ti.state)
    return str(dag_run.state), states


def guard_records() -> dict[str, Any]:
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        keys = [row.key for row in session.query(Variable).filter(Variable.key.startswith(KEY_PREFIX))]
    return {key: json.loads(Variable.get(key)) for key in keys}


def recorded(dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
    """The record entries a task wrote to its ``task_state_store``."""
    from airflow._shared.state import TaskScope
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session

    from airflow_provider.decisions.record import RECORD_KEY, entries_of

    scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1)
    with create_session() as session:
        stored = get_state_backend().get(scope, RECORD_KEY, session=session)
    return list(entries_of(json.loads(stored) if isinstance(stored, str) else stored))


def first_regression(store: MemoryGuardStore, timeout: float = 30) -> dict[str, Any]:
    async def watch() -> dict[str, Any]:
        trigger = DeploymentGuardTrigger(poll_interval=0.2)
        trigger.store = store
        trigger.claim_settle = 0.1
        events = trigger.run()
        try:
            event = await asyncio.wait_for(events.__anext__(), timeout)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        return dict(event.payload)

    return asyncio.run(watch())


def test_a_guarded_release_that_regresses_after_landing_is_rolled_back_once_by_the_guard_dag(emulator: Any) -> None:
    before = emulator.admin.find_deployment(NAME)
    emulator.admin.add_behaviour_rule(
        image_uri="*:8.0.0",
        error_rate=0.0,
        requests_per_second=TRAFFIC,
        after_seconds=4.0,
        then={"error_rate": 0.3, "requests_per_second": TRAFFIC},
    )
    for record in guard_records():
        from airflow.models.variable import Variable

        Variable.delete(record)

    state, tasks = run("guarded_rollout", version="8.0.0")

    assert (state, tasks) == ("success", {"roll_out": "success"})
    landed = emulator.admin.find_deployment(NAME)
    assert landed["source_revision_config"]["image_uri"].endswith(":8.0.0")
    records = guard_records()
    assert list(records) == [f"{KEY_PREFIX}{before['id']}"] == [guard_key("deployment_service_default", before["id"])]
    (record,) = records.values()
    assert record["revision_id"] == landed["active_revision_id"]
    assert record["previous_revision_id"] == before["active_revision_id"]

    payload = first_regression(MemoryGuardStore(records))
    assert payload["revision_id"] == landed["active_revision_id"] and payload["failing_check"] == "errors"
    assert (
        payload["message"].startswith("rolled back by the guard, ")
        and " after landing, errors 0." in payload["message"]
    )

    state, tasks = run("deployment_service_guard", regressions=[payload])

    assert (state, tasks) == ("success", {"confirm": "success", "roll_back[0]": "success", "report": "success"})
    after = emulator.admin.find_deployment(NAME)
    assert after["status"] == "READY" and after["active_revision_id"] != landed["active_revision_id"]
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the release and one rollback
    assert guard_records() == {}  # rolled back: its guard is over
    # The guard's verdict in the report task's record, dated at the regression (DORA's time to restore counts from it).
    (verdict,) = [
        item for item in recorded("deployment_service_guard", RUNS[-1], "report") if item["kind"] == "rejected"
    ]
    assert verdict["step"] == "guard" and verdict["revision_id"] == landed["active_revision_id"]
    assert verdict["message"] == payload["message"]
    assert abs(verdict["at"] - datetime.fromisoformat(payload["regressed_at"]).timestamp()) < 1
    # The same regression again (a duplicate event's run): nothing rolled back a second time.
    state, tasks = run("deployment_service_guard", regressions=[payload])
    assert state == "success" and tasks["confirm"] == "success" and tasks.get("roll_back") in ("skipped", None)
    assert len(emulator.admin.find_deployment(NAME)["revisions"]) == len(after["revisions"])
