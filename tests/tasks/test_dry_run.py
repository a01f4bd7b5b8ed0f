"""Dry runs of an analysis (issue 31, ``Analysis(dry_run=True)``): measured and judged exactly as usual, but a
verdict that is not "passed" never fails the task nor rolls back; the log, the XCom, the asset event and the
record say "would have rolled back" (or "would have failed the task") with the measurements.

Against the real-time emulator of ``test_patch_analysis``: the deployment's real state shows the revision kept.
"""

# ruff: noqa: F811 - the emulator fixture is imported from the module that defines it

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.decisions.record import RECORD_KEY
from airflow_provider.operators.analysis import DeploymentAnalysisOperator
from tests.tasks.conftest import FakeStore, FakeTI, make_context, run_deferred
from tests.tasks.test_patch_analysis import (  # noqa: F401 - emulator is a fixture
    PATHS,
    TRAFFIC,
    analysis_of,
    context_with_events,
    emitted,
    emulator,
    patch_op,
    run,
    set_next_revision_behaviour,
    svc,
)


def entries(store: FakeStore) -> list[dict[str, Any]]:
    record = store.get(RECORD_KEY) or {}
    found: list[dict[str, Any]] = record.get("entries") or []
    return found


@PATHS
def test_a_dry_run_keeps_a_failing_revision_and_says_it_would_have_rolled_back(
    emulator: Any, path: str, task_logs: Callable[[], str]
) -> None:
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.6)  # 60 % of the new revision's runs fail
    ti, store = FakeTI(), FakeStore()
    context = context_with_events(ti, store)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2, dry_run=True)

    outcome, _ = run(lambda: patch_op(emulator, deferrable=path != "worker", analysis=analysis), context, path)

    assert isinstance(outcome, dict), outcome  # the task succeeds
    new = ti.xcoms["revision_id"]
    after = svc(emulator)
    assert after["active_revision_id"] == new != before["active_revision_id"]  # never rolled back
    assert len(after["revisions"]) == len(before["revisions"]) + 1  # no rollback revision either
    result = ti.xcoms["analysis"]
    assert result["verdict"] == "failed" and result["dry_run"] is True
    assert result["would_have"] == "would have rolled back"
    assert result["measurements"] and result["measurements"][0]["value"] >= 0.5
    (event,) = emitted(context)
    assert event["outcome"] == "rolled_out" and event["revision_id"] == new
    assert event["analysis"]["would_have"] == "would have rolled back" and event["analysis"]["dry_run"] is True
    assert event["analysis"]["measurements"]
    (landed,) = [item for item in entries(store) if item["kind"] == "landed"]
    assert landed["revision_id"] == new
    assert landed["message"].startswith("dry run: would have rolled back: check 'tracing error_rate' failed")
    assert landed["verdict"]["would_have"] == "would have rolled back"
    assert not [item for item in entries(store) if item["kind"] in ("rejected", "rolling_back", "rolled_back")]
    logs = task_logs()
    assert "Dry run: the analysis failed revision" in logs and "it would have rolled back, but dry_run=True" in logs
    assert re.search(r"Latest measurements: tracing error_rate = 0\.[56]\d* \(failed, needs < 0\.05\)", logs)


def test_a_dry_run_that_passes_says_so_and_lands(emulator: Any) -> None:
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=1, dry_run=True)

    outcome, _ = run(lambda: patch_op(emulator, deferrable=False, analysis=analysis), context_with_events(ti), "worker")

    assert isinstance(outcome, dict), outcome
    assert ti.xcoms["analysis"]["verdict"] == "passed" and ti.xcoms["analysis"]["dry_run"] is True
    assert "would_have" not in ti.xcoms["analysis"]


def test_a_dry_run_gate_never_fails_the_task(emulator: Any, task_logs: Callable[[], str]) -> None:
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.3, requests_per_second=TRAFFIC)
    analysis = Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")],
        count=1,
        interval_seconds=0.2,
        preflight=False,  # the window starts when the task does
        dry_run=True,
    )
    ti, store = FakeTI(), FakeStore()
    result, triggers = run_deferred(
        lambda: DeploymentAnalysisOperator(
            task_id="gate", analysis=analysis, deployment_ids=deployment_id, deferrable=True
        ),
        make_context(ti, store),
    )

    assert len(triggers) == 1
    judged = result["svc"]
    assert judged["verdict"] == "failed" and judged["would_have"] == "would have failed the task"
    assert ti.xcoms["analysis"]["svc"]["would_have"] == "would have failed the task"
    (verdict,) = [item for item in entries(store) if item["kind"] in ("passed", "rejected")]
    assert verdict["kind"] == "passed"  # a dry run rejects nothing (no failed change)
    assert verdict["message"].startswith("dry run: would have failed the task: ")
    assert "Dry run: the analysis failed 'svc'" in task_logs()


def test_the_rollouts_view_labels_a_dry_run_by_what_it_would_have_done() -> None:
    from airflow_provider.decisions.record import Kind, entry
    from airflow_provider.plugins.rollouts.credits import revision_roles
    from airflow_provider.tasks.dry_run import dry_run_message

    verdict = {
        "verdict": "failed",
        "reason": "check 'errors' failed",
        "dry_run": True,
        "would_have": "would have rolled back",
    }
    landed = entry(Kind.LANDED, "d", "r2", at=1.0, verdict=verdict, message=dry_run_message(verdict))
    passed = entry(Kind.PASSED, "d", "r3", at=2.0, verdict={"verdict": "passed", "dry_run": True})
    roles = revision_roles([landed, passed])
    assert roles["r2"][:2] == ("landed", "landed (dry run: would have rolled back)")
    assert roles["r3"][:2] == ("passed", "passed analysis")
    assert landed["message"] == "dry run: would have rolled back: check 'errors' failed"
