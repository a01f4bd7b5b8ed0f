"""A fleet rollout under faults: 429s, 503s and dropped connections (before and after the service
processed the request), seeded random chaos on top, and one deployment deleted while its revision builds.

``FleetRolloutOperator`` rolls a git ref out to 12 codehost deployments in a canary and waves of 4, on a
worker and deferrable. A task that fails on an error that outlived the client's retries is run again with
the same task state store, as Airflow retries it. Every deployment must end with at most one new revision
(no duplicate), every outcome must be in the result table, the deleted deployment must be a failure
within the budget, and every other one must serve the new revision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from tests.dag_runs import WhenRevisionAppears
from tests.reliability.support import PATCH_ROUTE, Report
from tests.tasks.conftest import FakeStore, FakeTI, make_context, run_deferred

SIZE = 12
DELETED = "fleet-0006"
"""Deleted once its patch created a revision (it is in wave 2)."""
MAX_TRIES = 4
SEEDS = (7, 19)


def fleet_data() -> dict[str, Any]:
    return {"deployments": [{"name": f"fleet-{index:04d}", "source": "codehost"} for index in range(SIZE)]}


def fault_kinds(emulator: EmulatorServer) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for record in emulator.state.request_log:
        if record.fault == "status":
            kinds[str(record.status_code)] += 1
        elif record.fault is not None:
            kinds[f"{record.fault} ({record.method})"] += 1
    return kinds


def operator(deferrable: bool) -> FleetRolloutOperator:
    return FleetRolloutOperator(
        task_id="fleet",
        filters={"name_contains": "fleet-"},
        repo_ref="v7",
        canary=1,
        wave_size=4,
        max_failures=1,
        deferrable=deferrable,
        poll_interval=0.1,
        timeout=30,
    )


def one_try(deferrable: bool, context: dict[str, Any]) -> list[dict[str, Any]]:
    """One try of the task to its end; each resume on a fresh operator, as on another worker."""
    table: list[dict[str, Any]] = run_deferred(lambda: operator(deferrable), context, trigger_timeout=60)[0]
    return table


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
@pytest.mark.parametrize("seed", SEEDS, ids=lambda seed: f"seed-{seed}")
def test_fleet_rollout_under_faults_never_duplicates_nor_loses_an_outcome(
    realtime_emulator: Callable[..., EmulatorServer], report: Report, seed: int, deferrable: bool
) -> None:
    emulator = realtime_emulator(data=fleet_data(), extras={"max_attempts": 3})
    state = emulator.state
    before = {f"fleet-{index:04d}": state.find_deployment(f"fleet-{index:04d}") for index in range(SIZE)}
    # Guaranteed faults of each kind, then seeded chaos on everything.
    state.add_fault(kind="status", status_code=429, retry_after="0", method="PATCH", path="/v2/deployments/*", count=2)
    state.add_fault(kind="status", status_code=503, method="GET", path="/v2/deployments", count=2)
    state.add_fault(kind="drop", method="GET", path="/v2/deployments", count=1)
    state.add_fault(kind="drop_after_processing", method="PATCH", path="/v2/deployments/*", count=2)
    state.set_chaos(probability=0.15, seed=seed, kinds=["429", "503", "drop", "drop_after_processing"])

    store, tries, errors = FakeStore(), 0, []
    table: list[dict[str, Any]] | None = None
    deleter = WhenRevisionAppears(
        emulator, DELETED, lambda deployment: state.delete_deployment(deployment["id"]), in_process=True, poll=0.005
    )
    with deleter:
        while table is None and tries < MAX_TRIES:
            tries += 1
            context = make_context(FakeTI(try_number=tries), store)
            try:
                table = one_try(deferrable, context)
            except AirflowFailException:
                raise
            except Exception as err:  # a transient error outlived the retries: Airflow retries the task
                errors.append(f"try {tries}: {type(err).__name__}: {err}")
    state.set_chaos(None)
    state.clear_faults()
    kinds = fault_kinds(emulator)
    assert table is not None, f"no try finished in {MAX_TRIES}: {errors}"
    assert deleter.fired.is_set(), f"{DELETED} was never patched"

    rows = {row["name"]: row for row in table}
    assert sorted(rows) == sorted(before), "a deployment is missing from the result table"
    assert {row["outcome"] for row in table} <= {"landed", "failed"}, table
    assert rows[DELETED]["outcome"] == "failed", rows[DELETED]
    assert any(word in rows[DELETED]["message"] for word in ("disappeared", "deleted", "no longer")), rows[DELETED]
    duplicates = {}
    for name, row in rows.items():
        if name == DELETED:
            continue
        after = state.find_deployment(name)
        new = len(after["revisions"]) - len(before[name]["revisions"])
        if new != 1:
            duplicates[name] = new
        assert row["outcome"] == "landed", row
        assert after["active_revision_id"] == after["latest_revision_id"] == row["to_revision"], (name, after)
        assert after["source_revision_config"]["repo_ref"] == "v7", name
    assert duplicates == {}, f"deployments with other than one new revision: {duplicates}"
    assert kinds["429"] >= 2 and kinds["503"] >= 2, kinds
    assert kinds["drop (GET)"] >= 1 and kinds["drop_after_processing (PATCH)"] >= 2, kinds

    report.row(
        "fleet_faults",
        seed=seed,
        mode="deferrable" if deferrable else "worker",
        faults_injected=sum(kinds.values()),
        by_kind=", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items())),
        tries=tries,
        patch_requests=state.count(PATCH_ROUTE),
        landed=sum(1 for row in table if row["outcome"] == "landed"),
        failed=", ".join(row["name"] for row in table if row["outcome"] == "failed"),
        duplicate_revisions=sum(max(0, count - 1) for count in duplicates.values()),
    )
    report.add("fleet_faults_injected", sum(kinds.values()))
    report.add("fleet_duplicate_revisions", sum(max(0, count - 1) for count in duplicates.values()))
