"""Logs without error text for what the provider handles, and each analysis round in the task's log (issue 39).

A deferred analysis that fails logs each of its rounds in the task's log on resume, as a passing one and one on the
worker do; a deployment with no Airflow asset (or a trigger run inline by ``dag.test()``) is said at debug level,
without the API's error text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.assets import state_store_unavailable
from airflow_provider.decisions.record import Kind
from airflow_provider.tasks import publishing
from tests.tasks.conftest import FakeStore, FakeTI
from tests.tasks.test_patch_analysis import (
    analysis_of,
    context_with_events,
    emulator,  # noqa: F401 (the fixture)
    patch_op,
    run,
    set_next_revision_behaviour,
)

NOT_FOUND = (
    "API_SERVER_ERROR: {'status_code': 404, 'message': 'Server returned error', 'detail': {'detail': {'reason': "
    "'not_found', 'message': 'Asset not found'}}}"
)
"""What Airflow's task supervisor raises for the state store of an asset no DAG declares (measured in 3.3.2)."""


def test_a_failed_deferred_analysis_logs_each_round_in_the_task_log(emulator: Any, task_logs: Any) -> None:  # noqa: F811
    set_next_revision_behaviour(emulator, error_rate=0.5)
    context = context_with_events(FakeTI(), FakeStore())
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3, failure_limit=2)
    outcome, deferrals = run(lambda: patch_op(emulator, deferrable=True, analysis=analysis), context, "triggerer")

    assert isinstance(outcome, AirflowFailException) and "the analysis failed" in str(outcome), outcome
    assert "execute_analysis_complete" in [method for method, _ in deferrals]
    logs = task_logs()
    for round_number in (1, 2):
        said = f"Analysis round {round_number} (measured in the triggerer): tracing error_rate on 'svc' = "
        assert said in logs, logs[-3000:]
    assert "-> failed" in logs and "Analysis of revision" in logs


class RaisingStore:
    """An asset state store whose reads and writes raise ``error`` (as Airflow's does for an unknown asset)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def get(self, key: str, default: Any = None) -> Any:
        raise self.error

    def set(self, key: str, value: Any) -> None:
        raise self.error


class ServerResponseError404(Exception):
    """What the task SDK's in-process client raises under ``dag.test()``: only "Server returned error" in its text,
    the status on its response."""

    def __init__(self) -> None:
        super().__init__("Server returned error")
        self.response = type("Response", (), {"status_code": 404})()


@pytest.mark.parametrize(
    ("error", "quiet"),
    [
        (RuntimeError(NOT_FOUND), True),
        (ServerResponseError404(), True),
        (AttributeError("'InProcessSupervisorComms' object has no attribute 'asend'"), True),
        (RuntimeError("connection reset"), False),
    ],
    ids=["no asset (404)", "no asset (dag.test's client)", "inline trigger (dag.test)", "another error"],
)
def test_a_missing_asset_is_not_said_as_an_error(
    monkeypatch: pytest.MonkeyPatch, task_logs: Callable[[], str], error: Exception, quiet: bool
) -> None:
    assert (state_store_unavailable(error) is not None) is quiet
    monkeypatch.setattr(publishing, "asset_store", lambda uri: RaisingStore(error))
    ti = FakeTI()
    ti.run_id = f"run-{quiet}-{type(error).__name__}"  # publishing says each task instance's failure once
    entry = {
        "kind": Kind.JUDGING,
        "deployment_id": "0b7f4d1e-0000-4000-8000-00000000003a",
        "revision_id": "0b7f4d1e-0000-4000-8000-00000000003b",
        "at": 1.0,
    }
    publishing.publish_judging({"ti": ti}, publishing_logger(), [entry])
    logs = task_logs()
    if quiet:
        assert "Server returned error" not in logs and "asend" not in logs and "cannot see" not in logs, logs
    else:
        assert "Deployment watchers cannot see this task judge" in logs and "connection reset" in logs, logs


def publishing_logger() -> Any:
    import logging

    logger = logging.getLogger("tests.quiet_logs")
    logger.setLevel(logging.INFO)
    return logger
