"""A rollback request that fails ambiguously never creates two rollback revisions.

Each case injects one fault on ``POST .../revisions/{revision_id}/redeploy`` (once), redeploys through the
provider's client over real HTTP (sync and async twins) and counts the revisions the deployment gained and
the requests sent. A failure that may have reached the service (502, 504, a dropped connection, a read
timeout) is read back before anything is re-sent: the redeploy counts as landed when the latest revision
moved and shows the redeployed revision's config. Then a whole ``RollbackDeploymentOperator`` run under a
drop-after-processing fault, and its retry.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from airflow_provider.client import (
    AsyncDeploymentServiceClient,
    ClientSettings,
    DeploymentServiceClient,
    RetryPolicy,
    SourceRevisionConfig,
)
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import RollbackDeploymentOperator
from tests.reliability.support import API_KEY, LIST_ROUTE, RecordedSleeps, Report, wait_for_faulted_request
from tests.tasks.conftest import FakeStore, FakeTI, make_context

TARGET = "76cd9fa7-036e-43e7-8660-ade2b5acb208"  # checkout-api-staging (internal_docker)
REDEPLOY_ROUTE = "POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy"
REDEPLOY_PATH = "/v2/deployments/*/revisions/*/redeploy"
READ_TIMEOUT = 0.4
LATE_SECONDS = 1.6 * READ_TIMEOUT
"""The late redeploy is processed 0.6 read timeouts after the client gave up, within the read-back's
window (its last look comes one backoff plus one read timeout after the failure)."""

FAULTS: dict[str, dict[str, Any]] = {
    "502": {"kind": "status", "status_code": 502},
    "503": {"kind": "status", "status_code": 503},
    "504": {"kind": "status", "status_code": 504},
    "drop": {"kind": "drop"},
    "drop_after_processing": {"kind": "drop_after_processing"},
    "read timeout (server still processes)": {"kind": "late", "delay_seconds": LATE_SECONDS},
}


@pytest.fixture
def emulator(deployment_service_emulator_factory: Any) -> EmulatorServer:
    server: EmulatorServer = deployment_service_emulator_factory(api_key=API_KEY)
    return server


def bad_rollout(emulator: EmulatorServer) -> tuple[str, str]:
    """Roll out a bad image so that there is something to roll back; return (good, bad) revision ids."""
    state = emulator.state
    good = str(state.get_deployment(TARGET)["active_revision_id"])
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "acme/app:broken"}})
    bad = str(state.patch_deployment(TARGET, request)["latest_revision_id"])
    state.advance(2.5)
    return good, bad


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_ambiguous_redeploy_creates_one_rollback_revision(
    emulator: EmulatorServer, report: Report, fault: str, twin: str
) -> None:
    state = emulator.state
    good, bad = bad_rollout(emulator)
    expected = SourceRevisionConfig.model_validate(state.get_revision(TARGET, good)["source_revision_config"])
    before = len(state.deployment(TARGET)["revisions"])
    state.reset_requests()
    delayed = FAULTS[fault]["kind"] == "late"
    rule = state.add_fault(method="POST", path=REDEPLOY_PATH, count=1, **FAULTS[fault])
    # A late redeploy is found by the read-back's looks, which really wait (over one read timeout).
    settings = ClientSettings(
        base_url=emulator.base_url,
        read_timeout=READ_TIMEOUT if delayed else 5.0,
        retry=RetryPolicy(max_attempts=3, backoff_initial=2.0, backoff_max=4.0),
    )
    sleeps = RecordedSleeps(requests_so_far=lambda: state.count(REDEPLOY_ROUTE))
    wait: Any = time.sleep if delayed else sleeps
    if twin == "sync":
        with DeploymentServiceClient(settings, API_KEY, sleep=wait, rng=random.Random(7)) as client:
            result = client.redeploy_revision(TARGET, good, previous_latest_revision_id=bad, expected_config=expected)
    else:

        async def run() -> Any:
            async def asleep(seconds: float) -> None:
                await asyncio.sleep(seconds) if delayed else sleeps(seconds)

            client = AsyncDeploymentServiceClient(settings, API_KEY, sleep=asleep, rng=random.Random(7))
            try:
                return await client.redeploy_revision(
                    TARGET, good, previous_latest_revision_id=bad, expected_config=expected
                )
            finally:
                await client.aclose()

        result = asyncio.run(run())
    state.clear_faults()
    if delayed:  # the late request was processed (and found), not still on its way to a second revision
        assert wait_for_faulted_request(state, "late")["status_code"] == 200
    after = state.deployment(TARGET)
    new_revisions = len(after["revisions"]) - before
    report.add("rollback_faults_injected", rule.hits)
    report.add("duplicate_rollback_revisions", max(0, new_revisions - 1))
    report.row(
        "rollback_faults",
        fault=fault,
        twin=twin,
        redeploy_requests=state.count(REDEPLOY_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        rollback_revisions=new_revisions,
        serves_old_config=after["source_revision_config"]["image_uri"] == expected.image_uri,
    )
    assert new_revisions == 1
    assert result.latest_revision_id == after["latest_revision_id"]
    assert after["source_revision_config"]["image_uri"] == expected.image_uri


def test_rollback_task_under_a_dropped_answer_and_its_retry(
    emulator: EmulatorServer, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.reliability.support import CONN_ENV, FAST_RETRY_EXTRAS, connection_json

    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, API_KEY, **FAST_RETRY_EXTRAS))
    state = emulator.state
    good, bad = bad_rollout(emulator)
    before = len(state.deployment(TARGET)["revisions"])
    state.add_fault(method="POST", path=REDEPLOY_PATH, count=1, kind="drop_after_processing")
    store = FakeStore()
    first = FakeTI(try_number=1)
    options = {"task_id": "rollback", "deployment_id": TARGET, "revision_id": good, "rolling_back_from": bad}
    with pytest.raises(Exception, match="timed out"):
        RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=0.2).execute(make_context(first, store))
    state.advance(2.5)
    second = FakeTI(try_number=2)
    RollbackDeploymentOperator(**options, poll_interval=0.05, timeout=5).execute(make_context(second, store))
    after = state.deployment(TARGET)
    new_revisions = len(after["revisions"]) - before
    report.row(
        "rollback_faults",
        fault="drop_after_processing, then the task retried",
        twin="RollbackDeploymentOperator",
        redeploy_requests=state.count(REDEPLOY_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        rollback_revisions=new_revisions,
        serves_old_config=after["active_revision_id"] == second.xcoms["revision_id"],
    )
    report.add("duplicate_rollback_revisions", max(0, new_revisions - 1))
    assert new_revisions == 1
    assert state.count(REDEPLOY_ROUTE) == 1
    assert first.xcoms["revision_id"] == second.xcoms["revision_id"] == after["active_revision_id"]
