"""End to end (issue 42): the guard after landing, on real Airflow (SQLite + LocalExecutor) with two triggerers.

``tests/e2e/guard_dags/guard_rollout.py``: two patch runs hand their landed revisions to the guard; two guard DAGs of
the one connection (two guard triggers, spread over the two triggerers or not) guard them. One revision serves
healthy traffic for 20 s, then half its requests fail: it is rolled back exactly once (one ``revision_regressed``
event over both guard assets, one guard DAG run that rolls back, one rollback revision on the emulator, the old image
serving again), also after both triggerers restarted while it was guarded. The other stays healthy for its whole guard
(20 s): never rolled back, its guard record removed.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_airflow import wait_until
from e2e_scenarios import DagRun, check_run
from e2e_stack import Stack, airflow_stack, record_timing

from airflow_provider.triggers.guard import CLAIM_LEASE

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "guard_dags"
GUARDS = ("deployment_service_guard", "deployment_service_guard_twin")
BAD, GOOD = "checkout-api-staging", "search-staging"
DEGRADES_AFTER = 20.0
TRAFFIC = 50.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("e2e-guard")
    extra_env = {"AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
    with airflow_stack("sqlite-guard", workdir, Path(sys.executable).parent, extra_env=extra_env) as stack:
        yield stack


def variable(stack: Stack, key: str) -> Any:
    assert stack.airflow.api is not None
    response = stack.airflow.api.http.get(f"/api/v2/variables/{key}")
    return None if response.status_code == 404 else response.json()


def test_a_regressed_revision_is_rolled_back_once_with_two_triggerers_and_a_healthy_one_is_left_alone(
    stack: Stack,
) -> None:
    airflow, emulator, api = stack.airflow, stack.emulator, stack.airflow.api
    assert api is not None
    started = time.monotonic()
    airflow.start_triggerer("triggerer-2")
    wait_until(lambda: len(api.alive_triggerer_jobs()) == 2, timeout=60, what="two triggerers heartbeat")
    bad, good = emulator.deployment(BAD), emulator.deployment(GOOD)
    emulator.set_behaviour(
        bad["id"],
        revision_id="next",
        requests_per_second=TRAFFIC,
        after_seconds=DEGRADES_AFTER,
        then={"error_rate": 0.5, "requests_per_second": TRAFFIC},
    )
    emulator.set_behaviour(good["id"], revision_id="next", requests_per_second=TRAFFIC)
    api.wait_for_dags(["guarded_rollout", "guarded_rollout_short", *GUARDS], timeout=120)
    runs = [
        DagRun("guarded_rollout", "guarded-bad", {"deployment_name": BAD, "image_uri": "registry.example.com/c:9"}),
        DagRun(
            "guarded_rollout_short", "guarded-good", {"deployment_name": GOOD, "image_uri": "registry.example.com/s:9"}
        ),
    ]
    for run in runs:
        api.trigger(run.dag_id, run.run_id, run.conf)
    states = api.wait_for_runs([run.key for run in runs], timeout=180)
    for run in runs:
        check_run(stack, run, states[run.key], "success")
    landed = {name: emulator.deployment(name)["active_revision_id"] for name in (BAD, GOOD)}
    assert landed[BAD] != bad["active_revision_id"] and landed[GOOD] != good["active_revision_id"]
    record = variable(stack, f"deployment_service_guard:deployment_service_default:{bad['id']}")
    assert record is not None, "the patch task handed nothing to the guard"
    record_timing("sqlite-guard", **{"landed and handed to the guard": time.monotonic() - started})
    # Both triggerers restart while the revisions are guarded: the guards go on from the records in the Variables.
    restarting = time.monotonic()
    for name in ("triggerer", "triggerer-2"):
        airflow.process(name).signal_all(signal.SIGTERM)
    for name in ("triggerer", "triggerer-2"):
        assert not airflow.process(name).stop(), f"{name} survived SIGKILL"
    wait_until(lambda: not api.alive_triggerer_jobs(), timeout=60, what="the stopped triggerers' jobs end")
    airflow.restart("triggerer")
    airflow.restart("triggerer-2")
    wait_until(lambda: len(api.alive_triggerer_jobs()) == 2, timeout=60, what="two restarted triggerers heartbeat")
    record_timing("sqlite-guard", **{"both triggerers restarted": time.monotonic() - restarting})

    def rolled_back() -> list[dict[str, Any]] | None:
        finished = [run for dag_id in GUARDS for run in api.dag_runs(dag_id) if run["state"] in ("success", "failed")]
        return finished or None

    # A regression announced in the moment the triggerers are killed can die with its triggerer before Airflow
    # stores the event: its claim then stays unannounced, and a successor takes it over once the claim's lease
    # (CLAIM_LEASE, 120 s) ran out. Never lost, never twice; only later: the wait covers the lease.
    guard_runs = wait_until(
        rolled_back, timeout=150 + CLAIM_LEASE, what="a guard DAG run ends", diagnostics=airflow.diagnostics
    )
    record_timing("sqlite-guard", **{"regression rolled back": time.monotonic() - started})
    time.sleep(5)  # a second event, were there one, would have started a second run by now
    every_run = [run for dag_id in GUARDS for run in api.dag_runs(dag_id)]
    assert len(every_run) == 1, f"one regression, one guard DAG run: {every_run}"
    (guard_run,) = guard_runs
    check_run(stack, DagRun(guard_run["dag_id"], guard_run["dag_run_id"]), guard_run["state"], "success")
    events = api.upstream_asset_events(guard_run["dag_id"], guard_run["dag_run_id"])
    payloads = [event["extra"].get("payload", {}) for event in events]
    assert [(p["kind"], p["deployment_name"], p["revision_id"]) for p in payloads] == [
        ("revision_regressed", BAD, landed[BAD])
    ], payloads
    after = emulator.deployment(BAD)
    revision_ids = [revision["id"] for revision in after["revisions"]]
    assert len(revision_ids) == len(bad["revisions"]) + 2, "the guarded revision and exactly one rollback"
    assert after["active_revision_id"] not in (landed[BAD],) and after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == bad["source_revision_config"]["image_uri"]
    claim = variable(stack, f"deployment_service_guard_claim:{bad['id']}:{landed[BAD]}")
    assert claim is not None and "rolled back by the guard" in claim["value"]
    assert json.loads(claim["value"])["state"] == "announced", claim  # a restarted triggerer stays silent
    assert variable(stack, f"deployment_service_guard:deployment_service_default:{bad['id']}") is None  # guard over
    # The healthy one: guarded for 20 s and left alone; its record removed when the guard ended.
    wait_until(
        lambda: variable(stack, f"deployment_service_guard:deployment_service_default:{good['id']}") is None,
        timeout=60,
        what="the healthy revision's guard ends",
    )
    assert emulator.deployment(GOOD)["active_revision_id"] == landed[GOOD]
    # What its guard last measured, written by the trigger through the triggerer's supervisor (the view shows it).
    shown = variable(stack, f"deployment_service_guard_status:deployment_service_default:{good['id']}")
    assert shown is not None, "the guard wrote no status"
    status = json.loads(shown["value"])
    assert status["revision_id"] == landed[GOOD] and status["measurements"], status
    record_timing("sqlite-guard", **{"whole scenario": time.monotonic() - started})
