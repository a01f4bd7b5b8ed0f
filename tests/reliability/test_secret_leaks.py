"""Secret leak scan: run every example DAG, in success and failure scenarios, with distinctive secret values
and API key; then search everything Airflow persisted or printed for them.

Scanned: every column of every table of the metadata database (XCom, rendered fields, trigger kwargs,
dag run conf, task instances and their history, the audit log...), every file under AIRFLOW_HOME (the
SQLite database and its WAL byte for byte, task log files, config), the captured stdout/stderr and log
records of all runs, and the failure scenarios' exception texts (found in that output).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog

from airflow_provider.client import ClientSettings, DeploymentServiceClient, RequestRejectedError, RetryPolicy
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from tests.dag_runs import run_dag
from tests.reliability.support import (
    API_KEY,
    CONN_ENV,
    FAST_RETRY_EXTRAS,
    OPERATOR_SECRET,
    PAYMENT_TOKEN,
    SEEDED_SECRET_PREFIX,
    VARIABLE_SECRET,
    WRONG_API_KEY,
    RecordedSleeps,
    Report,
    StubResponse,
    StubServer,
    connection_json,
    example_data_with_secrets,
    scan_database,
    scan_files,
    scan_texts,
)
from tests.tasks.conftest import FakeTI

NEEDLES = {
    "API key": API_KEY,
    "wrong API key": WRONG_API_KEY,
    "payment token (Variable -> patch secret)": PAYMENT_TOKEN,
    "seeded deployment secrets (echoed by the service)": SEEDED_SECRET_PREFIX,
    "literal patch secret": OPERATOR_SECRET,
    "patch secret from a Variable": VARIABLE_SECRET,
}
STAGING = "checkout-api-staging"


@dataclass(frozen=True)
class Scenario:
    dag_id: str
    label: str
    conf: dict[str, Any]
    expect: str
    """Run state the scenario must end in."""
    says: str = ""
    """Text the failure must show in the output (the exception text that was scanned)."""
    setup: Callable[[EmulatorServer, pytest.MonkeyPatch], None] | None = None


def fail_next_build(name: str, status: str) -> Callable[[EmulatorServer, pytest.MonkeyPatch], None]:
    def setup(emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> None:
        emulator.state.fail_next_build(emulator.state.find_deployment(name)["id"], status)

    return setup


def patch_refused(emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> None:
    emulator.state.add_fault(kind="status", status_code=500, method="PATCH", path="/v2/deployments/*", count=None)


def wrong_api_key(emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, WRONG_API_KEY, **FAST_RETRY_EXTRAS))


SCENARIOS = (
    Scenario("rollout_after_build", "success", {"version": "8.0.0"}, "success"),
    Scenario(
        "rollout_after_build",
        "build fails",
        {"version": "8.0.1"},
        "failed",
        "BUILD_FAILED",
        fail_next_build(STAGING, "BUILD_FAILED"),
    ),
    Scenario(
        "rollout_after_build",
        "unknown deployment",
        {"deployment_name": "no-such-service"},
        "failed",
        "no deployment is named exactly 'no-such-service'",
    ),
    Scenario(
        "rollout_after_build",
        "service refuses the PATCH (500)",
        {"version": "8.0.2"},
        "failed",
        "failed with 500 Internal Server Error",
        patch_refused,
    ),
    Scenario(
        "rollout_after_build",
        "wrong API key (401)",
        {"version": "8.0.3"},
        "failed",
        "failed with 401 Unauthorized",
        wrong_api_key,
    ),
    Scenario("deploy_fleet_after_build", "success", {"version": "8.1.0"}, "success"),
    Scenario(
        "deploy_fleet_after_build",
        "one deploy fails",
        {"version": "8.1.1"},
        "failed",
        "DEPLOY_FAILED",
        fail_next_build("search-staging", "DEPLOY_FAILED"),
    ),
    Scenario(
        "onboard_repository",
        "creates the deployment",
        {"create_deployment": True, "deployment_name": "reliability-preview"},
        "success",
    ),
    Scenario(
        "onboard_repository",
        "no repository matches",
        {"repository_name": "not-there"},
        "failed",
        "no repository matches repository_name=acme-corp/not-there",
    ),
)


def task_log_lines(relative: str, lines: list[str]) -> Path:
    """Write ``lines`` to a task log file under AIRFLOW_HOME the way the task supervisor writes task logs
    (``init_log_file`` + structlog with Airflow's log processors, secret masker included)."""
    from airflow.sdk.log import init_log_file, logging_processors

    path = init_log_file(relative)
    with path.open("ab") as handle:
        logger = structlog.wrap_logger(
            structlog.BytesLogger(handle), processors=logging_processors(json_output=True), logger_name="task"
        )
        for line in lines:
            logger.info(line)
    return path


def test_no_secret_or_api_key_in_anything_airflow_persisted_or_printed(
    realtime_emulator: Callable[..., EmulatorServer],
    airflow_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    report: Report,
) -> None:
    from airflow.configuration import conf

    emulator = realtime_emulator(api_key=API_KEY, data=example_data_with_secrets())
    monkeypatch.setenv("AIRFLOW_VAR_CHECKOUT_API_PAYMENT_TOKEN", PAYMENT_TOKEN)
    good_connection = os.environ[CONN_ENV]
    outputs: dict[str, str] = {}
    for scenario in SCENARIOS:
        monkeypatch.setenv(CONN_ENV, good_connection)
        emulator.state.clear_faults()
        if scenario.setup is not None:
            scenario.setup(emulator, monkeypatch)
        run_state, tasks = run_dag(scenario.dag_id, **scenario.conf)
        out, err = capfd.readouterr()
        name = f"{scenario.dag_id} / {scenario.label}"
        outputs[f"stdout+stderr: {name}"] = out + err
        failed = sorted(task for task, task_state in tasks.items() if task_state == "failed")
        report.row(
            "leak_scenarios",
            dag=scenario.dag_id,
            scenario=scenario.label,
            run_state=run_state,
            failed_tasks=", ".join(failed) or "-",
            failure_shown=f"'{scenario.says}'" if scenario.says else "-",
        )
        assert run_state == scenario.expect, (name, tasks)
        assert scenario.says in out + err, f"{name}: the failure text is not in the captured output"
        if scenario.label == "success" and scenario.dag_id == "rollout_after_build":
            served = emulator.state.find_deployment(STAGING)["secrets"]
            assert {item["name"]: item["value"] for item in served} == {"PAYMENT_API_TOKEN": PAYMENT_TOKEN}
            # A task log line mentioning the patched secret, written like the supervisor writes task logs.
            log_file = task_log_lines(
                "dag_id=rollout_after_build/reliability/masker.log", [f"token in use: {PAYMENT_TOKEN}"]
            )
            assert "token in use: ***" in log_file.read_text()
    emulator.state.clear_faults()
    outputs["log records (caplog)"] = caplog.text

    # ---- positive controls: the scanners do find what is there
    control = {"control": "registry.example.com/acme/checkout-api:8.0.0"}
    assert {hit.where for hit in scan_database(control).hits} >= {"xcom.value"}
    assert scan_texts(outputs, {"control": "checkout-api-staging"}).hits

    # ---- the scans
    homes = {Path(airflow_db), Path(os.environ["AIRFLOW_HOME"]), Path(conf.get("logging", "base_log_folder"))}
    database = scan_database(NEEDLES)
    files = scan_files(sorted(homes), NEEDLES)
    printed = scan_texts(outputs, NEEDLES)
    log_files = [name for name in files.per_place if name.endswith(".log")]
    interesting = (
        "xcom",
        "rendered_task_instance_fields",
        "trigger",
        "dag_run",
        "task_instance",
        "task_instance_history",
        "log",
        "serialized_dag",
        "variable",
        "connection",
    )
    report.row(
        "leak_scan",
        scanned="metadata database",
        extent=f"{database.places} tables, {database.rows} rows, {database.cells} cells",
        detail=", ".join(f"{table} ({database.per_place.get(table, 0)} cells)" for table in interesting),
        occurrences=len(database.hits),
    )
    report.row(
        "leak_scan",
        scanned="files under AIRFLOW_HOME",
        extent=f"{files.places} files, {files.bytes} bytes",
        detail=f"database + WAL byte for byte, {len(log_files)} task log file(s), airflow.cfg",
        occurrences=len(files.hits),
    )
    report.row(
        "leak_scan",
        scanned="captured stdout/stderr and log records",
        extent=f"{printed.places} captures, {printed.bytes} characters",
        detail=f"{len(SCENARIOS)} DAG runs, {sum(1 for s in SCENARIOS if s.says)} failure texts found in them",
        occurrences=len(printed.hits),
    )
    hits = database.hits + files.hits + printed.hits
    report.add("secret_occurrences", len(hits))
    report.add("leak_scan_dag_runs", len(SCENARIOS))
    report.note("secret_values", ", ".join(NEEDLES))
    assert hits == [], [f"{hit.needle} in {hit.where}" for hit in hits]


def test_patch_secrets_are_registered_with_the_secret_masker_whatever_their_name(
    frozen_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, report: Report
) -> None:
    """Every value given in ``secrets`` is secret, whatever the deployment calls it: a task log line that
    contains one must show ``***``. (Airflow's masker ignores a value registered under a name that does
    not look sensitive, such as ``DATABASE_URL``, unless it is registered without a name.)"""
    from airflow.sdk.log import logging_processors

    # Fresh values: the masker is process-wide, so values another test registered would prove nothing.
    values = {name: f"ms-{name.lower()}-{uuid.uuid4().hex}" for name in ("API_TOKEN", "DATABASE_URL", "SIGNING_SEED")}
    monkeypatch.setenv("AIRFLOW_VAR_RELIABILITY_PLAIN_SETTING", values["SIGNING_SEED"])
    deployment = frozen_emulator.state.find_deployment("checkout-api-dev")
    secrets = {
        "API_TOKEN": values["API_TOKEN"],
        "DATABASE_URL": values["DATABASE_URL"],
        "SIGNING_SEED": {"variable": "reliability_plain_setting"},
    }
    PatchDeploymentOperator(
        task_id="patch",
        deployment_id=deployment["id"],
        revision_source="internal_docker",
        image_uri="app:3",
        secrets=secrets,
        wait_for_rollout=False,
    ).execute({"ti": FakeTI()})
    stored = {item["name"]: item["value"] for item in frozen_emulator.state.deployment(deployment["id"])["secrets"]}
    assert stored == values

    log_file = tmp_path / "task.log"
    with log_file.open("ab") as handle:
        logger = structlog.wrap_logger(structlog.BytesLogger(handle), processors=logging_processors(json_output=True))
        for name, value in values.items():
            logger.info(f"{name} is {value}")
    events = [json.loads(line)["event"] for line in log_file.read_text().splitlines()]
    for (name, value), event in zip(values.items(), events, strict=True):
        source = "Variable" if name == "SIGNING_SEED" else "literal"
        report.row(
            "masker",
            secret=f"{name} ({source})",
            log_line_in_file=event.replace(value, "<the value, NOT masked>"),
            masked="yes" if event == f"{name} is ***" else "no",
        )
    assert events == [f"{name} is ***" for name in values]


def test_error_details_echoing_a_secret_do_not_carry_it(report: Report) -> None:
    """A service error that echoes the request (422 ``input``, a 400 message) must not bring a secret value
    into the exception: neither its message nor its ``detail`` (which a task may log)."""
    detail_list = {
        "detail": [
            {
                "loc": ["body", "secrets", 0, "value"],
                "msg": f"value {OPERATOR_SECRET} is too weak",
                "type": "value_error",
                "input": OPERATOR_SECRET,
            }
        ]
    }
    answers = {
        422: json.dumps(detail_list).encode(),
        400: json.dumps({"detail": f"secret TOKEN={OPERATOR_SECRET} rejected"}).encode(),
    }
    deployment_id = "8d12e254-9195-47ca-94ec-20051ae2fc1b"
    leaks: dict[int, list[str]] = {}
    for status, body in answers.items():

        def answer(_method: str, _path: str, status: int = status, body: bytes = body) -> StubResponse:
            return StubResponse(status, {"Content-Type": "application/json"}, body)

        with StubServer(answer) as stub:
            settings = ClientSettings(base_url=stub.base_url, retry=RetryPolicy(max_attempts=1))
            with (
                DeploymentServiceClient(settings, API_KEY, sleep=RecordedSleeps(), rng=random.Random(1)) as client,
                pytest.raises(RequestRejectedError) as raised,
            ):
                client.patch_deployment(deployment_id, {"secrets": [{"name": "TOKEN", "value": OPERATOR_SECRET}]})
        error = raised.value
        shown = {"str": str(error), "repr": repr(error), "detail": repr(error.detail), "args": repr(error.args)}
        leaks[status] = sorted(where for where, text in shown.items() if OPERATOR_SECRET in text)
        report.row(
            "error_echo",
            service_answer=f"{status} echoing the secret",
            message=str(error),
            secret_found_in=", ".join(f"exception .{where}" for where in leaks[status]) or "nowhere",
        )
    assert leaks == {422: [], 400: []}, f"the secret is in these parts of the exception: {leaks}"
