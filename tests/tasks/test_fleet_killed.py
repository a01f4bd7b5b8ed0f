"""The fleet task killed on the worker mid-wave (issue 39): ``on_kill`` (through Airflow's own
``_run_execute_callable``, which calls it when ``execution_timeout`` runs out) gives the wave up, stops the rollout and
rolls the wave back; the retry waits for those rollbacks and fails naming the kill, never patching the next wave.
Asserted on the emulator's deployments."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout
from airflow.sdk.execution_time.task_runner import _run_execute_callable

from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.tasks.fleet.killed import KILLED_WHILE_ROLLING_OUT
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, FakeTI, make_context
from tests.tasks.test_fleet_analysis import fleet, fleet_op, ids_by_name, revisions, tracing_analysis  # noqa: F401
from tests.tasks.test_fleet_retries import REDEPLOY_ROUTE


def settled_on(emulator: Any, deployment_id: str, repo_ref: str, timeout: float = 15.0) -> dict[str, Any]:
    """The deployment once ``repo_ref`` serves (active, latest, READY), or fail saying what serves."""
    deadline = time.monotonic() + timeout
    while True:
        shown = emulator.state.deployment(deployment_id)
        settled = shown["active_revision_id"] == shown["latest_revision_id"] and shown["status"] == "READY"
        if settled and shown["source_revision_config"]["repo_ref"] == repo_ref:
            return dict(shown)
        if time.monotonic() > deadline:
            raise AssertionError(f"{shown['name']} does not serve {repo_ref}: {shown['source_revision_config']}")
        time.sleep(0.05)


def test_a_fleet_killed_by_execution_timeout_mid_canary_rolls_the_canary_back(fleet: Callable[..., Any]) -> None:  # noqa: F811
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["source_revision_config"]["repo_ref"] for name in ids}
    store = FakeStore()
    make = fleet_op(
        False,
        deployment_names=sorted(ids),
        canary=1,
        wave_size=2,
        retries=1,
        analysis=tracing_analysis(count=15),  # 4.5 s of rounds that would pass: only the kill stops it
    )
    task = make()
    task.execution_timeout = timedelta(seconds=3)  # the kill that still comes
    with pytest.raises(AirflowTaskTimeout):
        _run_execute_callable(make_context(FakeTI(1), store), task.execute, task)

    canary = ids["app-0000"]
    settled_on(emulator, canary, before["app-0000"])  # the old build serves the canary again
    assert len(revisions(emulator, canary)) == 3  # the patch and its rollback
    assert all(len(revisions(emulator, ids[name])) == 1 for name in ("app-0001", "app-0002"))  # never patched

    planned = make()  # a plan-only run over the killed run's progress plans; it resumes nothing, sends nothing
    planned.plan_only = True
    writes = emulator.state.count(PATCH_ROUTE) + emulator.state.count(REDEPLOY_ROUTE)
    plan = planned.execute(make_context(FakeTI(2), store))
    assert plan["plan_only"] is True and [wave["name"] for wave in plan["waves"]] == ["canary", "wave 1"], plan
    assert emulator.state.count(PATCH_ROUTE) + emulator.state.count(REDEPLOY_ROUTE) == writes

    ti = FakeTI(2)
    with pytest.raises(AirflowFailException) as retried:  # the retry waits for the rollback, patches nothing more
        make().execute(make_context(ti, store))
    assert KILLED_WHILE_ROLLING_OUT in str(retried.value) and "execution_timeout of 3 s" in str(retried.value)
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    assert table["app-0000"]["outcome"] == Outcome.ROLLED_BACK_WITH_WAVE, table["app-0000"]
    assert [table[name]["outcome"] for name in ("app-0001", "app-0002")] == [Outcome.NOT_PATCHED] * 2
    assert emulator.state.count(PATCH_ROUTE) + emulator.state.count(REDEPLOY_ROUTE) == 2  # one patch, one rollback
