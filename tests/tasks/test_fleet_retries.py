"""FleetRolloutOperator killed at its crash points, then retried as Airflow retries it: a fresh operator with
the same task state store, and again with none (Airflow before 3.3). Each retry must end true: at most one
revision per deployment per intended change (the patch, the rollback), and the table's outcome for each
deployment matches what the emulator serves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.fleet import Outcome
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.tasks import rollback as rollback_module
from airflow_provider.tasks.fleet import STATE_KEY
from tests.tasks.conftest import PATCH_ROUTE, FakeStore, FakeTI, run_deferred, seed

REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
FAST = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1}


class WorkerDied(BaseException):
    """The worker process died here (not an ``Exception``: nothing in the task may catch it)."""


@pytest.fixture
def fleet(service: Callable[..., Any]) -> Callable[..., Any]:
    """A real-time emulator (builds take 0.3 s) seeded with ``count`` codehost deployments app-0000..."""

    def start(count: int, **options: Any) -> Any:
        return service(data=seed(count), **{**FAST, **options})

    return start


@pytest.fixture
def die_at_rollback(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], list[str]]]:
    """Kill the worker around the rollback of one deployment: ``("after", name)`` once the service accepted
    the request (before the task records it), ``("before", name)`` just before it is sent. Returns the
    names rolled back through the real ``start_rollback``, in order."""
    real = rollback_module.start_rollback
    started: list[str] = []

    def arm(when: str, name: str) -> list[str]:
        armed = {"left": 1}

        def start_rollback(hook: Any, deployment: Any, *args: Any, **kwargs: Any) -> Any:
            if deployment.name == name and armed["left"] and when == "before":
                armed["left"] = 0
                raise WorkerDied(f"before the rollback of {name}")
            result = real(hook, deployment, *args, **kwargs)
            started.append(deployment.name)
            if deployment.name == name and armed["left"]:
                armed["left"] = 0
                raise WorkerDied(f"after the rollback of {name}")
            return result

        monkeypatch.setattr(rollback_module, "start_rollback", start_rollback)
        return started

    yield arm
    monkeypatch.setattr(rollback_module, "start_rollback", real)


def ids_by_name(emulator: Any) -> dict[str, str]:
    return {item["name"]: item["id"] for item in emulator.state.snapshot()["deployments"]}


def context_for(try_number: int, store: FakeStore | None, run_started: datetime) -> dict[str, Any]:
    """A task context for one try of the same DAG run."""
    context: dict[str, Any] = {
        "ti": FakeTI(try_number=try_number),
        "dag_run": SimpleNamespace(start_date=run_started),
    }
    if store is not None:
        context["task_state_store"] = store
    return context


def requests_to(emulator: Any, route: str, deployment_id: str) -> int:
    return sum(
        1
        for record in emulator.state.request_log
        if record.route == route and record.status_code == 200 and f"/deployments/{deployment_id}" in record.path
    )


def assert_restored(emulator: Any, deployment_id: str, revision_id: str) -> None:
    """One patch and one rollback: three revisions, the newest a redeploy of ``revision_id``, serving."""
    deployment = emulator.state.deployment(deployment_id)
    revisions = deployment["revisions"]
    assert len(revisions) == 3, [(rev["id"], rev["source_revision_config"]["repo_ref"]) for rev in revisions]
    assert revisions[-1]["redeploy_of"] == revision_id, revisions[-1]
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == revisions[-1]["id"]
    assert deployment["status"] == "READY"


def operator(ids: dict[str, str], **extra: Any) -> FleetRolloutOperator:
    options: dict[str, Any] = {
        "task_id": "fleet",
        "deployment_names": sorted(ids),
        "repo_ref": "v2",
        "verify": lambda deployment: False,
        "rollback_on_failure": True,
        "max_failures": 3,
        "poll_interval": 0.1,
        "timeout": 30,
        **extra,
    }
    return FleetRolloutOperator(**options)


# ------------------------------------------------------------------------------------------ item 5
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
@pytest.mark.parametrize("with_store", [True, False], ids=["task_state_store", "no-store"])
def test_a_worker_dying_after_a_rollback_was_sent_is_reattached_to_never_sent_again(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]], with_store: bool, deferrable: bool
) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started = datetime.now(timezone.utc)
    store = FakeStore() if with_store else None
    started = die_at_rollback("after", "app-0001")
    with pytest.raises(WorkerDied):
        run_deferred(lambda: operator(ids, deferrable=deferrable), context_for(1, store, run_started))
    assert started == ["app-0000", "app-0001"]
    if store is not None:  # what the task recorded: app-0001's rollback as requested, not as accepted
        rows = {row["name"]: row for row in store.data[f"{STATE_KEY}/wave/0"]["rows"]}
        assert rows["app-0000"]["rollback_revision"] and rows["app-0001"]["rollback_requested_after"]
        assert rows["app-0001"]["rollback_revision"] is None
    context = context_for(2, store, run_started)
    table, _ = run_deferred(lambda: operator(ids, deferrable=deferrable), context)
    rows = {row["name"]: row for row in table}
    for name in sorted(ids):
        assert rows[name]["outcome"] == Outcome.ROLLED_BACK, rows[name]
        assert "refused" not in rows[name]["message"] and "cannot" not in rows[name]["message"]
        assert_restored(emulator, ids[name], before[name])
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1, f"{name} was patched again"
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1, f"{name} was rolled back twice"
    assert context["ti"].xcoms["fleet_summary"]["counts"] == {"rolled_back": 3}


def test_a_worker_dying_just_before_a_rollback_request_sends_it_on_retry(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]]
) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started, store = datetime.now(timezone.utc), FakeStore()
    die_at_rollback("before", "app-0001")
    with pytest.raises(WorkerDied):
        operator(ids).execute(context_for(1, store, run_started))
    rows = {row["name"]: row for row in store.data[f"{STATE_KEY}/wave/0"]["rows"]}
    assert rows["app-0001"]["rollback_requested_after"] and requests_to(emulator, REDEPLOY_ROUTE, ids["app-0001"]) == 0
    table = {row["name"]: row for row in operator(ids).execute(context_for(2, store, run_started))}
    for name in sorted(ids):
        assert table[name]["outcome"] == Outcome.ROLLED_BACK, table[name]
        assert_restored(emulator, ids[name], before[name])
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1


def test_a_requested_rollback_that_cannot_be_confirmed_is_not_sent_again_nor_claimed(
    fleet: Any, die_at_rollback: Callable[[str, str], list[str]]
) -> None:
    emulator = fleet(1)
    ids = ids_by_name(emulator)
    run_started, store = datetime.now(timezone.utc), FakeStore()
    die_at_rollback("after", "app-0000")
    with pytest.raises(WorkerDied):
        operator(ids).execute(context_for(1, store, run_started))
    # Before the retry someone else rolls out over the rollback: the latest revision is not a copy any more.
    emulator.state.patch_deployment(ids["app-0000"], {"source_revision_config": {"repo_ref": "hotfix"}})
    revisions = len(emulator.state.deployment(ids["app-0000"])["revisions"])
    emulator.state.reset_requests()
    ti_context = context_for(2, store, run_started)
    table = operator(ids).execute(ti_context)
    row = table[0]
    assert row["outcome"] == Outcome.FAILED, row
    assert "cannot be confirmed as that rollback" in row["message"] and "not rolling back again" in row["message"]
    assert emulator.state.count(REDEPLOY_ROUTE) == emulator.state.count(PATCH_ROUTE) == 0
    assert len(emulator.state.deployment(ids["app-0000"])["revisions"]) == revisions
    assert ti_context["ti"].xcoms["fleet_summary"]["counts"] == {"failed": 1}


@pytest.mark.parametrize("disabled", [["list_revisions"], []], ids=["no-revisions-endpoint", "revisions-endpoint"])
def test_a_retry_without_a_record_never_patches_again_what_an_earlier_try_rolled_back(
    service: Callable[..., Any], die_at_rollback: Callable[[str, str], list[str]], disabled: list[str]
) -> None:
    emulator = service(data=seed(2), disabled_endpoints=disabled, **FAST)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    run_started = datetime.now(timezone.utc)
    die_at_rollback("after", "app-0001")  # both rollbacks were sent; the task's record died with it
    with pytest.raises(WorkerDied):
        operator(ids).execute(context_for(1, None, run_started))
    ti_context = context_for(2, None, run_started)
    try:
        table = operator(ids).execute(ti_context)
    except AirflowFailException:
        table = ti_context["ti"].xcoms["return_value"]
    rows = {row["name"]: row for row in table}
    for name in sorted(ids):
        assert requests_to(emulator, PATCH_ROUTE, ids[name]) == 1, f"{name} was patched again"
        assert requests_to(emulator, REDEPLOY_ROUTE, ids[name]) == 1, f"{name} was rolled back twice"
        if disabled:  # nothing says what happened: it fails, saying so, and nothing is sent
            assert rows[name]["outcome"] == Outcome.FAILED, rows[name]
            assert "cannot tell whether an earlier try patched it and rolled it back" in rows[name]["message"]
            deployment = emulator.state.deployment(ids[name])
            assert len(deployment["revisions"]) == 3
            assert deployment["revisions"][-1]["redeploy_of"] == before[name]
        else:
            assert rows[name]["outcome"] == Outcome.ROLLED_BACK, rows[name]
            assert "an earlier try of this task patched it" in rows[name]["message"]
            assert rows[name]["from_revision"] == before[name]
            assert_restored(emulator, ids[name], before[name])
