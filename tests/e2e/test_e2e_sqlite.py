"""End-to-end on SQLite + LocalExecutor (main virtual environment): one stack shared by the tests.

See :mod:`e2e_scenarios` and :mod:`e2e_events` for what is checked.
"""

from __future__ import annotations

import time

import pytest
from e2e_airflow import wait_until
from e2e_events import watcher_scenario
from e2e_promotion import promotion_scenario
from e2e_scenarios import (
    FLEET_DAG,
    HANDOVER_BUILD_SECONDS,
    LIVE,
    ROLLOUT_DAG,
    RUN_TIMEOUT,
    DagRun,
    check_deferred_once,
    check_one_new_revision,
    check_run,
    fleet_targets,
    revisions,
    rollout_scenario,
    rollout_task_logs,
    start_runs,
    task_key,
)
from e2e_stack import Stack, record_timing

pytestmark = pytest.mark.e2e


def test_watcher_starts_its_dag_once_per_revision_across_a_triggerer_restart(sqlite_stack: Stack) -> None:
    """Revisions rolled out outside Airflow start ``smoke_test_on_new_revision`` once each, also when one goes
    live while the triggerer is down (see :func:`watcher_scenario`).

    First in the module: the later tests roll ``checkout-api-staging`` out too (which starts the DAG again).
    """
    watcher_scenario(sqlite_stack)


def test_the_watcher_never_lets_a_downstream_dag_promote_a_revision_airflow_rejected(sqlite_stack: Stack) -> None:
    """A rollout whose analysis fails and rolls back, watched with a settle time shorter than its judging: the
    promotion DAG never sees the rejected revision; a landed one is promoted (see :func:`promotion_scenario`)."""
    promotion_scenario(sqlite_stack)


def test_rollouts_defer_and_share_one_poller_sqlite_local(sqlite_stack: Stack) -> None:
    """SQLite + LocalExecutor: fleet, rollout and failing rollout at once (see :func:`rollout_scenario`)."""
    rollout_scenario(sqlite_stack, "2.0.0")


def test_two_triggerers_complete_every_rollout_exactly_once(sqlite_stack: Stack) -> None:
    """A second triggerer joins; the one holding the first deferred rollout is stopped mid-rollout.

    Every rollout (fleet plus two single rollouts on other deployments) still completes exactly once:
    each deployment gets exactly one new revision, each trigger fires once, and the stopped triggerer's
    rollout is finished by the other one.
    """
    airflow, emulator, api = sqlite_stack.airflow, sqlite_stack.emulator, sqlite_stack.airflow.api
    first = api.alive_triggerer_jobs()
    assert len(first) == 1, f"expected the stack's one triggerer job, found {first}"
    started = time.monotonic()
    second = airflow.start_triggerer("triggerer-2")

    def both_alive() -> set[int] | None:
        alive = api.alive_triggerer_jobs()
        return alive if len(alive) == 2 else None

    jobs = wait_until(both_alive, timeout=60, what="the second triggerer heartbeats", diagnostics=airflow.diagnostics)
    processes = {next(iter(first)): airflow.process("triggerer"), next(iter(jobs - first)): second}

    targets = fleet_targets(emulator)
    singles = [emulator.deployment("ledger-service-staging"), emulator.deployment("onboarding-flow-staging")]
    for deployment in [*targets["dev"], *targets["prod"], *singles]:
        emulator.set_build_seconds(deployment["id"], HANDOVER_BUILD_SECONDS)
    before = revisions(emulator)
    fleet = DagRun(FLEET_DAG, "fleet-3.0.0", {"version": "3.0.0"})
    rollouts = [
        DagRun(ROLLOUT_DAG, f"rollout-3.0.0-{index}", {"deployment_name": deployment["name"], "version": "3.0.0"})
        for index, deployment in enumerate(singles)
    ]
    runs = [fleet, *rollouts]
    triggered = start_runs(sqlite_stack, runs)

    def running_in_a_triggerer() -> tuple[int, str] | None:
        """The first deferred task whose trigger already runs (and logs) in the triggerer holding it."""
        for run in runs:
            for ti in api.task_instances(*run.key):
                job = (ti.get("triggerer_job") or {}).get("id")
                if ti["state"] != "deferred" or job not in processes:
                    continue
                if job in api.task_log(run.dag_id, run.run_id, ti["task_id"], ti["map_index"]).triggerer_job_ids():
                    return int(job), task_key(run.run_id, ti["task_id"], ti["map_index"])
        return None

    what = "a deferred rollout task's trigger runs in a triggerer"
    stopped_job, held_by_stopped = wait_until(running_in_a_triggerer, timeout=120, what=what, interval=0.3)
    survivor_job = next(job for job in processes if job != stopped_job)
    processes[stopped_job].stop()
    what = f"the stopped triggerer's job {stopped_job} ends, {survivor_job} stays alive"
    wait_until(lambda: api.alive_triggerer_jobs() == {survivor_job}, timeout=30, what=what)
    states = api.wait_for_runs([run.key for run in runs], timeout=RUN_TIMEOUT)
    record_timing("sqlite-two-triggerers", **{"second triggerer + 3 runs": time.monotonic() - started})
    record_timing("sqlite-two-triggerers", **{"3 concurrent runs": time.monotonic() - triggered})

    for run in runs:
        check_run(sqlite_stack, run, states[run.key], "success")
    for deployment in [*targets["dev"], *targets["prod"], *singles]:
        check_one_new_revision(before, emulator, deployment["name"])
    ran_on = {
        name: check_deferred_once(log, name, LIVE)
        for name, log in rollout_task_logs(sqlite_stack, fleet, rollouts).items()
    }
    assert all(jobs_of_task <= set(processes) for jobs_of_task in ran_on.values()), ran_on
    handed_over = [name for name, jobs_of_task in ran_on.items() if jobs_of_task == set(processes)]
    assert held_by_stopped in handed_over, (
        f"{held_by_stopped} was held by the stopped triggerer {stopped_job} but its log shows triggerers "
        f"{ran_on[held_by_stopped]}; all: {ran_on}"
    )
    record_timing("sqlite-two-triggerers", **{"rollouts handed over": len(handed_over)})
