"""The patch task's verdict is recorded before anything acts on it, and a retry starts from it (issue 28, item 2).

The issue's story: ``PatchDeploymentOperator`` with an analysis and ``retries=1``; the new revision's error rate is
0.27 for its first second live (then its app recovers), so round 1 fails; the read that precedes the rollback
request fails (503 until the client gives up), the try fails. Airflow retries after its retry delay (the emulator's
clock is moved five minutes): by then the tracing statistics since go-live are diluted, so a retry that analyses
again passes the revision and lands it. The verdict, recorded in ``task_state_store`` the moment it is reached,
sends the retry straight to the rollback instead.

Assertions are on the emulator's own state (what serves, how many revisions, which requests it answered) and on
what the user sees (the failure's text, the XComs, the asset events).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.patch.retry import TASK_STATE_KEY
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json
from tests.tasks.test_patch_analysis import (
    OLD_IMAGE,
    PATHS,
    RESOURCE_SPEC,
    SEED,
    TRAFFIC,
    analysis_of,
    context_with_events,
    emitted,
    patch_op,
    run,
    set_next_revision_behaviour,
    svc,
)

PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"
STATS_ROUTE = "POST /tracing/runs/stats"
RETRY_DELAY = 300.0
"""Seconds between the two tries (Airflow's default ``retry_delay``): the emulator's clock is moved by it."""
MAX_ATTEMPTS = 2
"""Attempts per request the task's client makes (then it gives up)."""


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real-time emulator holding ``svc`` behind the default connection (its tracing base URL in the extra)."""
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


def fail_the_read_after_the_analysis(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first time the task has the analysis's verdict, the service starts answering the next looks at
    deployments (``GET /v2/deployments``: the read before the rollback request) 503 until the client gives up."""
    judge = PatchDeploymentOperator._judge_analysis
    armed: list[bool] = []

    def judge_then_fail_the_next_read(self: PatchDeploymentOperator, *args: Any, **kwargs: Any) -> Any:
        if not armed:
            armed.append(True)
            emulator.admin.add_fault(
                kind="status", method="GET", path="/v2/deployments", status_code=503, count=MAX_ATTEMPTS
            )
        return judge(self, *args, **kwargs)

    monkeypatch.setattr(PatchDeploymentOperator, "_judge_analysis", judge_then_fail_the_next_read)


@PATHS
def test_a_failed_verdict_survives_the_try_and_the_retry_rolls_back_instead_of_landing(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    before = svc(emulator)
    # Bad for its first second live (27 % of its runs fail), healthy after: round 1 fails.
    set_next_revision_behaviour(
        emulator, error_rate=0.27, after_seconds=1.0, then={"error_rate": 0.0, "requests_per_second": TRAFFIC}
    )
    store = FakeStore()
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=2)
    fail_the_read_after_the_analysis(emulator, monkeypatch)

    def make() -> Any:
        return patch_op(
            emulator,
            deferrable=path != "worker",
            analysis=analysis,
            retries=1,
            max_attempts=MAX_ATTEMPTS,
        )

    first_ti = FakeTI(1)
    first, _ = run(make, context_with_events(first_ti, store), path)

    bad = first_ti.xcoms["revision_id"]
    assert isinstance(first, Exception) and not isinstance(first, AirflowFailException), first  # retryable
    assert "503" in str(first), first
    assert svc(emulator)["active_revision_id"] == bad  # the try died before its rollback request
    assert emulator.admin.count(PATCH_ROUTE) == 1

    emulator.state.advance(RETRY_DELAY)  # Airflow's retry delay: the bad second is now diluted
    stats_before_retry = emulator.admin.count(STATS_ROUTE)
    second_ti = FakeTI(2)
    second_context = context_with_events(second_ti, store)
    second, _ = run(make, second_context, path)

    assert isinstance(second, AirflowFailException), second
    message = str(second)
    assert f"revision {bad} went live but the analysis failed: " in message
    assert "tracing error_rate" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    assert emitted(second_context) == []  # no rolled_out: the bad revision never landed
    assert emulator.admin.count(STATS_ROUTE) == stats_before_retry  # the retry did not analyse again
    after = svc(emulator)
    assert emulator.admin.count(PATCH_ROUTE) == 2  # the patch and the one rollback
    assert len(after["revisions"]) == len(before["revisions"]) + 2
    assert after["active_revision_id"] == after["revisions"][-1]["id"] != bad
    assert after["status"] == "READY"
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    spec = {key: value for key, value in after["source_config"]["resource_spec"].items() if value is not None}
    assert spec == RESOURCE_SPEC
    # The retry reports the verdict the first try reached, with its measurements.
    result = second_ti.xcoms["analysis"]
    assert result["verdict"] == "failed" and result["revision_id"] == bad
    assert any(m["verdict"] == "failed" and m["value"] > 0.05 for m in result["measurements"])
    verdict = store.data[TASK_STATE_KEY]["verdict"]
    assert verdict["revision_id"] == bad and verdict["step"] == "analysis" and verdict["passed"] is False
    assert verdict["analysis"]["measurements"] == result["measurements"]
