"""End to end (issue 32): an inconclusive analysis asks a person, who answers through Airflow's REST API.

Real Airflow services (SQLite + LocalExecutor) parse ``tests/e2e/dags/inconclusive_ask.py``; the emulator's tracing
service answers 503 to every stats request, so each patch's analysis is inconclusive and its task parks in
``awaiting_input`` with a HITL question. Three runs at once, each on its own deployment:

- answered "Roll back" with ``PATCH /api/v2/dags/.../taskInstances/roll_out/-1/hitlDetails``: the run fails and
  the revision that served before serves again;
- answered "Promote": the run succeeds and the new revision serves;
- not answered: the scheduler's timeout sweep answers the default after ``response_timeout``: rolled back.

While a question is open, the Rollouts view (the provider's plugin in the real api-server) shows it with the link
to Airflow's "Required actions" page. Every outcome is checked on the emulator's own state.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_airflow import wait_until
from e2e_scenarios import DagRun, check_run
from e2e_stack import Stack, airflow_stack, record_timing

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "dags"
ASK_DAG, TIMEOUT_DAG = "inconclusive_ask", "inconclusive_ask_timeout"
RESPONSE_TIMEOUT = 20.0
THINKING_SECONDS = 8.0
"""How long the "person" looks at the question before answering. Airflow 3.3.2 fails a task answered within a
few seconds of parking: the executor's late "success" of the run that parked it lands after the answer queued
the resume (its stale-success race, apache/airflow#66374 and #72716: "finished with state success, but the task
instance's state attribute is queued"), measured here on an answer 1 s after ``awaiting_input``."""
RUN_TIMEOUT = 300.0
TARGETS = {"roll back": "checkout-api-staging", "promote": "search-staging", "timeout": "ledger-service-staging"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("e2e-inconclusive")
    extra_env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "E2E_RESPONSE_TIMEOUT": str(RESPONSE_TIMEOUT),
        # how often the scheduler answers questions past their response timeout (15 s by default)
        "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
    }
    with airflow_stack("sqlite-inconclusive", workdir, Path(sys.executable).parent, extra_env=extra_env) as stack:
        yield stack


def hitl_path(run: DagRun) -> str:
    return f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/roll_out/-1/hitlDetails"


def wait_asking(stack: Stack, run: DagRun) -> dict[str, Any]:
    """Wait until the run's task parks for an answer; return its HITL detail (through the REST API)."""
    api = stack.airflow.api

    def asking() -> dict[str, Any] | None:
        states = {ti["task_id"]: ti["state"] for ti in api.task_instances(*run.key)}
        if states.get("roll_out") in ("failed", "success"):
            raise AssertionError(f"{run.run_id}: the task ended without asking ({states})")
        if states.get("roll_out") != "awaiting_input":
            return None
        response = api.http.get(hitl_path(run))
        return dict(response.json()) if response.status_code == 200 else None

    detail = wait_until(asking, timeout=180, what=f"{run.run_id} asks a person", interval=1.0)
    time.sleep(THINKING_SECONDS)
    return detail


def test_a_person_answers_an_inconclusive_analysis_through_the_rest_api(stack: Stack) -> None:
    emulator, api = stack.emulator, stack.airflow.api
    stamp = int(time.time())
    before = {case: emulator.deployment(name) for case, name in TARGETS.items()}
    for deployment in before.values():
        emulator.set_behaviour(deployment["id"], revision_id="next", requests_per_second=200, error_rate=0.0)
    # The tracing service is down for stats: every analysis is inconclusive.
    emulator._call(
        "POST",
        "/faults",
        {"kind": "status", "method": "POST", "path": "/tracing/runs/stats", "status_code": 503, "count": None},
    )
    images = {case: f"registry.example.com/acme/{case.replace(' ', '-')}:{stamp}" for case in TARGETS}
    runs = {
        case: DagRun(
            TIMEOUT_DAG if case == "timeout" else ASK_DAG,
            f"{case.replace(' ', '-')}-{stamp}",
            {"deployment_name": TARGETS[case], "image_uri": images[case]},
        )
        for case in TARGETS
    }
    api.wait_for_dags([ASK_DAG, TIMEOUT_DAG], timeout=120)
    started = time.monotonic()
    for run in runs.values():
        api.trigger(run.dag_id, run.run_id, run.conf)

    answered: dict[str, dict[str, Any]] = {}
    views: dict[str, dict[str, Any]] = {}
    for case, choice in (("roll back", "Roll back"), ("promote", "Promote")):
        run = runs[case]
        detail = wait_asking(stack, run)
        assert detail["options"] == ["Promote", "Roll back", "Analyse another interval"], detail
        assert detail["defaults"] == ["Roll back"] and detail["response_received"] is False, detail
        assert "Inconclusive" in detail["subject"] and "tracing error_rate" in detail["body"], detail
        asking = emulator.deployment(TARGETS[case])
        assert asking["source_revision_config"]["image_uri"] == images[case], "the revision serves while asked"
        views[case] = api.request("GET", f"/deployment-service/api/deployments/{asking['id']}")
        answered[case] = api.request("PATCH", hitl_path(run), json={"chosen_options": [choice], "params_input": {}})
    record_timing(stack.name, **{"asked and answered": time.monotonic() - started})

    states = api.wait_for_runs([run.key for run in runs.values()], timeout=RUN_TIMEOUT)
    record_timing(stack.name, **{"three runs": time.monotonic() - started})
    expected = {"roll back": "failed", "promote": "success", "timeout": "failed"}
    for case, run in runs.items():
        check_run(stack, run, states[run.key], expected[case])
    # Each failed for the reason its answer gives (not for Airflow's stale-success race, which also fails a run).
    assert not stack.airflow.stale_success_races(), stack.airflow.stale_success_races()
    rolled_back = api.task_log(*runs["roll back"].key, "roll_out", try_number=1).exception_values()
    assert any("'Roll back', chosen by admin" in error and "rolled back" in error for error in rolled_back), rolled_back
    timed_out = api.task_log(*runs["timeout"].key, "roll_out", try_number=1).exception_values()
    assert any("no answer within the response timeout" in error for error in timed_out), timed_out

    # While asked, the Rollouts view showed the open question and where to answer it.
    for shown in views.values():
        (running,) = shown["running"]
        assert running["outcome"] == "asking" and running["question_path"].endswith(
            "/tasks/roll_out/required_actions?map_index=-1"
        ), running
    assert answered["roll back"]["responded_by"]["name"] == "admin"

    # The emulator's own state after each answer.
    after = {case: emulator.deployment(name) for case, name in TARGETS.items()}
    for case in ("roll back", "timeout"):
        assert (
            after[case]["source_revision_config"]["image_uri"] == before[case]["source_revision_config"]["image_uri"]
        ), f"{case}: not rolled back: {after[case]['source_revision_config']}"
        assert after[case]["status"] == "READY", after[case]
    assert after["promote"]["source_revision_config"]["image_uri"] == images["promote"]
    promoted = next(r for r in after["promote"]["revisions"] if r["id"] == after["promote"]["active_revision_id"])
    assert promoted["source_revision_config"]["image_uri"] == images["promote"] and promoted["status"] == "DEPLOYED"

    timeout_detail = api.request("GET", hitl_path(runs["timeout"]))
    assert timeout_detail["chosen_options"] == ["Roll back"] and timeout_detail["responded_by_user"] is None
