"""End to end with a real Prometheus: a revision whose error rate rises after it went live is rolled back.

The stack: the emulator, Debian's ``prometheus`` scraping its ``/metrics`` every second, and real Airflow
services (SQLite + LocalExecutor) parsing ``tests/e2e/dags``. The DAG patches a deployment with an analysis
of one ``MetricQueryCheck`` (a PromQL error rate over ``rate()``), deferrable, so the measurements run in the
real triggerer against the real Prometheus. The new revision serves without errors for
:data:`AFTER_SECONDS` after it goes live, then fails half of its requests: the analysis must see it, and the
task must roll back to the revision that served before.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_airflow import Emulator, wait_until
from e2e_prometheus import Prometheus, PrometheusUnavailable
from e2e_scenarios import DEFERRED, DagRun, check_run
from e2e_stack import Stack, airflow_stack, record_timing

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "dags"
DAG_ID = "prometheus_analysed_rollout"
CHECK_NAME = "prometheus error rate"
TARGET = "checkout-api-staging"
AFTER_SECONDS = 15.0
"""How long the new revision serves without errors after going live: longer than the worker takes to resume
and start the analysis on a busy machine, so that some measurements pass before the errors start."""
BAD_ERROR_RATE = 0.5
INTERVAL = 2.0
ROUNDS = 20
RUN_TIMEOUT = 240.0
PROMETHEUS_CONN_ENV = "AIRFLOW_CONN_PROMETHEUS_E2E"


@pytest.fixture(scope="module")
def prometheus_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Prometheus]]:
    """The emulator, a real Prometheus scraping it, and Airflow services that know both."""
    workdir = tmp_path_factory.mktemp("e2e-prometheus")
    started: list[Prometheus] = []

    @contextlib.contextmanager
    def prometheus(emulator: Emulator) -> Iterator[dict[str, str]]:
        try:
            server = Prometheus(workdir / "prometheus", emulator.metrics_url)
        except PrometheusUnavailable as reason:  # a failure, not a skip: "passes three runs in a row" means run
            pytest.fail(f"the real Prometheus this test needs could not be set up: {reason}")
        # Not waited for here: it starts (and scrapes) while the Airflow services start; waited for below.
        server.start()
        try:
            started.append(server)
            yield {PROMETHEUS_CONN_ENV: server.connection_json()}
        finally:
            server.stop()

    extra_env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "E2E_ANALYSIS_INTERVAL": str(INTERVAL),
        "E2E_ANALYSIS_ROUNDS": str(ROUNDS),
    }
    bin_dir = Path(sys.executable).parent
    with airflow_stack("sqlite-prometheus", workdir, bin_dir, extra_env=extra_env, sidecar=prometheus) as stack:
        waiting = time.monotonic()
        started[0].wait_target_up(timeout=60)
        record_timing(stack.name, **{"prometheus scraping after stack ready": time.monotonic() - waiting})
        yield stack, started[0]


def xcom(stack: Stack, run: DagRun, task_id: str, key: str) -> Any:
    """An XCom value of a task, through the REST API (``None`` when there is none)."""
    path = f"/api/v2/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/{task_id}/xcomEntries/{key}"
    response = stack.airflow.api.http.get(path, params={"deserialize": "true", "stringify": "false"})
    if response.status_code == 404:
        return None
    assert response.status_code == 200, f"GET {path} answered {response.status_code}: {response.text[:500]}"
    value = response.json()["value"]
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def test_a_real_prometheus_error_rate_rolls_back_a_revision_that_degrades_after_going_live(
    prometheus_stack: tuple[Stack, Prometheus],
) -> None:
    stack, prometheus = prometheus_stack
    emulator, api = stack.emulator, stack.airflow.api
    before = emulator.deployment(TARGET)
    previous = before["active_revision_id"]
    known = {revision["id"] for revision in before["revisions"]}
    image = f"registry.example.com/acme/checkout-api:degrading-{int(time.time())}"
    emulator.set_behaviour(
        before["id"],
        revision_id="next",
        error_rate=0.0,
        after_seconds=AFTER_SECONDS,
        then={"error_rate": BAD_ERROR_RATE},
    )

    def scraped() -> dict[str, float] | None:
        rates = prometheus.value_by_label("sum by (name) (rate(deployment_requests_total[10s]))", "name")
        return rates if rates.get(TARGET, 0) > 0 else None

    wait_until(scraped, timeout=60, what=f"prometheus has a request rate for {TARGET}", interval=1.0)

    api.wait_for_dags([DAG_ID], timeout=120)
    run = DagRun(DAG_ID, f"degrading-{int(time.time())}", {"deployment_name": TARGET, "image_uri": image})
    started = time.monotonic()
    api.trigger(run.dag_id, run.run_id, run.conf)
    state = api.wait_for_runs([run.key], timeout=RUN_TIMEOUT)[run.key]
    record_timing(stack.name, **{"degrading rollout run": time.monotonic() - started})
    check_run(stack, run, state, "failed")
    log = api.task_log(run.dag_id, run.run_id, "roll_out")
    errors = log.exception_values()
    task_failure = "\n".join(errors) or "\n".join(log.messages()[-30:])

    # The emulator's real state: the bad revision went live and is no longer active; the build that served
    # before serves again; nothing else was created.
    after = emulator.deployment(TARGET)
    new = [revision for revision in after["revisions"] if revision["id"] not in known]
    bad = [revision for revision in new if revision["source_revision_config"]["image_uri"] == image]
    assert len(bad) == 1, f"expected one revision of {image}, got {new}"
    bad_revision = bad[0]
    assert bad_revision["behaviour"]["then"]["error_rate"] == BAD_ERROR_RATE, bad_revision
    assert bad_revision["status"] == "DEPLOYED", f"the bad revision never went live: {bad_revision}"
    assert after["active_revision_id"] != bad_revision["id"], (
        f"the bad revision is still active; the task failed with:\n{task_failure}"
    )
    assert len(new) <= 2, f"expected the bad revision and at most one rollback revision, got {new}"
    active = next(revision for revision in after["revisions"] if revision["id"] == after["active_revision_id"])
    assert active["id"] == previous or active["redeploy_of"] == previous, (
        f"the active revision {active['id']} is neither {previous} nor a redeploy of it: {active}"
    )
    assert active["status"] == "DEPLOYED" and after["status"] == "READY", after
    assert after["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]

    # What the user sees: the task failed naming the check, the value and the condition; the XCom holds the
    # verdict and the measurements: passing ones while the revision was good, then the failing one.
    task_states = {ti["task_id"]: ti["state"] for ti in api.task_instances(*run.key)}
    assert task_states == {"roll_out": "failed"}, task_states
    assert any(CHECK_NAME in error and "< 0.05" in error and "rolled back" in error for error in errors), (
        f"the task did not fail naming the check, its condition and the rollback:\n{task_failure}"
    )
    assert log.count(DEFERRED) >= 2, f"expected the rollout wait and the analysis to defer: {log.count(DEFERRED)}"
    assert log.triggerer_job_ids(), "no triggerer ran the task's triggers"
    result = xcom(stack, run, "roll_out", "analysis")
    assert isinstance(result, dict), f"no analysis XCom: {result!r}"
    assert result["verdict"] == "failed" and result["failing_check"] == CHECK_NAME, result
    assert result["revision_id"] == bad_revision["id"], result
    measurements = result["measurements"]
    verdicts = [measurement["verdict"] for measurement in measurements]
    assert verdicts[-1] == "failed" and "passed" in verdicts, f"measurements: {measurements}"
    failed = measurements[-1]
    assert failed["value"] is not None and failed["value"] >= 0.05, failed
    live_since = datetime.fromisoformat(bad_revision["updated_at"])
    for measurement in measurements:
        if measurement["verdict"] == "passed":
            assert datetime.fromisoformat(measurement["at"]) < datetime.fromisoformat(failed["at"]), measurements
    detected = (datetime.fromisoformat(failed["at"]) - live_since).total_seconds()
    assert AFTER_SECONDS <= detected <= AFTER_SECONDS + 10 + 2 * INTERVAL, (
        f"the failure was measured {detected:.1f} s after going live; the errors started at {AFTER_SECONDS} s"
    )

    # And Prometheus itself saw the bad revision's errors.
    errors_seen = prometheus.value_by_label(
        f'deployment_request_errors_total{{revision_id="{bad_revision["id"]}"}}', "revision_id"
    )
    assert errors_seen.get(bad_revision["id"], 0) > 0, f"prometheus has no errors of the bad revision: {errors_seen}"
    record_timing(stack.name, **{"failure detected after live (s)": detected, "measurements": len(measurements)})
