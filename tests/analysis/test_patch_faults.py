"""``PatchDeploymentOperator(analysis=...)`` when a measurement breaks in a way nobody foresaw, when the analysis
on the worker overruns, and when an ``HttpCheck`` would GET a ``custom_url`` that is no http(s) URL: the
revision the analysis could not vouch for is rolled back, never left serving unjudged; a ``custom_url`` that
can never be checked is refused before anything is patched.

Against a real-time emulator; each deferrable run is driven as the triggerer and ``dag.test()`` do (the helpers
of ``tests/tasks/test_patch_analysis``). Assertions are on the emulator's own state and on what the user sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.analysis import HttpCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from tests.analysis.raw_server import RawAnswers, RawServer, deeply_nested_json
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json
from tests.tasks.test_patch_analysis import (
    OLD_IMAGE,
    PATHS,
    RESOURCE_SPEC,
    analysis_of,
    context_with_events,
    patch_op,
    run,
    set_next_revision_behaviour,
    svc,
)
from tests.tasks.test_patch_analysis_retries import drive

PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"
SERVICE_URL = "https://svc.example.com"


def _start(factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, custom_url: str | None) -> Any:
    """A real-time emulator holding ``svc`` (external_docker: its custom_url is the user's) behind the default
    connection."""
    source_config: dict[str, Any] = {"resource_spec": dict(RESOURCE_SPEC)}
    if custom_url is not None:
        source_config["custom_url"] = custom_url
    seed = {
        "deployments": [
            {
                "name": "svc",
                "source": "external_docker",
                "source_config": source_config,
                "source_revision_config": {"image_uri": OLD_IMAGE},
            }
        ]
    }
    server = factory(data=seed, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    return server


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    return _start(deployment_service_emulator_factory, monkeypatch, SERVICE_URL)


def _assert_rolled_back(emulator: Any, before: dict[str, Any], bad: str) -> None:
    after = svc(emulator)
    assert after["active_revision_id"] != bad and after["status"] == "READY", after
    assert after["active_revision_id"] == after["revisions"][-1]["id"]  # the rollback's revision serves
    assert after["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert len(after["revisions"]) == len(before["revisions"]) + 2  # the bad revision and the rollback


# ------------------------------------------------------------------------------ a measurement breaks
@PATHS
def test_a_measurement_that_raises_is_inconclusive_and_the_revision_is_rolled_back(emulator: Any, path: str) -> None:
    """The app's health endpoint answers JSON too deep for Python's parser (RecursionError): before, the analysis
    crashed on the worker and in the trigger alike and the new revision kept serving, unjudged."""
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    ti = FakeTI()
    with RawServer(RawAnswers(body=deeply_nested_json())) as app:
        health = HttpCheck(url=f"{app.url}/health", json_field="status", json_equals="ok", name="health")
        outcome, _ = run(
            # The preflight would refuse the rollout (tests/tasks/test_preflight.py): here the rounds meet it.
            lambda: patch_op(
                emulator, deferrable=path != "worker", analysis=analysis_of(health, count=2, preflight=False)
            ),
            context_with_events(ti),
            path,
        )

    bad = ti.xcoms["revision_id"]
    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert f"revision {bad} went live but the analysis was inconclusive (counted as failed): " in message
    assert "RecursionError" in message
    assert f"rolled back to revision {before['active_revision_id']}" in message
    _assert_rolled_back(emulator, before, bad)
    result = ti.xcoms["analysis"]
    assert (result["verdict"], result["failing_check"]) == ("inconclusive", "health")
    assert [m["verdict"] for m in result["measurements"]] == ["inconclusive", "inconclusive"]


def test_a_custom_url_broken_while_the_task_retried_is_inconclusive_and_rolled_back(emulator: Any) -> None:
    """The first try patches and dies while the revision builds; someone sets the deployment's custom_url to
    what httpx cannot parse; the retry reattaches (no pre-check: it goes on with what the first try started):
    every GET raises httpx.InvalidURL, each an inconclusive measurement, and the revision is rolled back."""
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    store = FakeStore()
    # The retry goes on with what the first try started (no preflight then); the first try's preflight is off
    # because svc's custom_url does not resolve on this machine.
    analysis = analysis_of(HttpCheck(name="health"), count=2, preflight=False)

    def make() -> PatchDeploymentOperator:
        return patch_op(emulator, deferrable=True, analysis=analysis, retries=1)

    first = drive(make, context_with_events(FakeTI(1), store), stop_before="execute_complete")
    assert isinstance(first, TaskDeferred), first
    answer = httpx.patch(
        f"{emulator.base_url}/v2/deployments/{before['id']}",
        json={"source_config": {"custom_url": "http://[::1"}},
        headers={"X-Api-Key": emulator.api_key},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert svc(emulator)["source_config"]["custom_url"] == "http://[::1"

    second_ti = FakeTI(2)
    outcome = drive(make, context_with_events(second_ti, store))

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the analysis was inconclusive (counted as failed)" in str(outcome) and "InvalidURL" in str(outcome)
    _assert_rolled_back(emulator, before, second_ti.xcoms["revision_id"])
    assert second_ti.xcoms["analysis"]["verdict"] == "inconclusive"


# ---------------------------------------------------------------------------- the worker's time limit
def test_an_analysis_on_the_worker_past_its_time_limit_is_not_measured_and_rolled_back_on_the_last_try(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker bounds the whole analysis by analysis_seconds, as the trigger does (before, only the trigger
    did: a source that never answered held the worker until Airflow's execution timeout, with no verdict)."""
    from airflow_provider.tasks import analysis as analysis_glue

    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    monkeypatch.setattr(analysis_glue, "analysis_seconds", lambda analysis: 0.2)  # 3 rounds 0.3 s apart: late
    ti = FakeTI(1)
    analysis = analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05"), count=3)

    outcome, _ = run(lambda: patch_op(emulator, deferrable=False, analysis=analysis), context_with_events(ti), "worker")

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis could not be measured on the task's last try" in message
    assert "the analysis did not finish within 0.2 s" in message
    _assert_rolled_back(emulator, before, ti.xcoms["revision_id"])
    assert ti.xcoms["analysis"]["verdict"] == "inconclusive"


# ------------------------------------------------------------------------ refused before patching
@pytest.mark.parametrize(
    "custom_url, problem",
    [
        ("ftp://svc.example.com", "is not an http(s) URL (scheme 'ftp')"),
        ("svc.example.com", "is not an http(s) URL (no scheme)"),
        ("http://[::1", "is not a valid URL (Invalid port: ':1')"),
        ("https://", "is not an http(s) URL (no host)"),
    ],
)
def test_a_custom_url_that_is_no_http_url_is_refused_before_patching(
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    custom_url: str,
    problem: str,
) -> None:
    emulator = _start(deployment_service_emulator_factory, monkeypatch, custom_url)
    before = svc(emulator)
    analysis = analysis_of(HttpCheck(name="health"), count=2)

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis), context_with_events(FakeTI()), "triggerer"
    )

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis can never pass, nothing was patched" in message
    assert f"HttpCheck 'health' GETs '{{custom_url}}/health', but the custom_url of 'svc' ({before['id']})" in message
    assert problem in message
    assert emulator.admin.count(PATCH_ROUTE) == 0
    assert svc(emulator)["revisions"] == before["revisions"]


def test_a_custom_url_the_patch_sets_is_the_one_checked(emulator: Any) -> None:
    before = svc(emulator)
    analysis = analysis_of(HttpCheck(name="health"), count=2)
    source_config = {"custom_url": "ftp://svc.example.com", "resource_spec": {"cpu": 2}}

    outcome, _ = run(
        lambda: patch_op(emulator, deferrable=True, analysis=analysis, source_config=source_config),
        context_with_events(FakeTI()),
        "triggerer",
    )

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert f"the custom_url of 'svc' ({before['id']}) after the patch, 'ftp://svc.example.com'," in message
    assert "is not an http(s) URL (scheme 'ftp')" in message
    assert emulator.admin.count(PATCH_ROUTE) == 0
    assert svc(emulator)["source_config"]["custom_url"] == SERVICE_URL
