"""The end-to-end scenarios and their checks: the example rollout DAGs on real Airflow services.

Each scenario triggers DAG runs through Airflow's REST API and checks what really happened: run and task
states; each waiting task's log (the REST API merges the worker's part, with "Pausing task as DEFERRED",
and the triggerer's part, written to ``<log>.trigger.<triggerer job id>.log``); the emulator's revisions
(one new revision per rollout) and its request log (the shared poller asks for several deployments in
one list request).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from e2e_airflow import Emulator, TaskLog
from e2e_stack import PAYMENT_TOKEN, Stack, record_timing

FLEET_DAG = "deploy_fleet_after_build"
ROLLOUT_DAG = "rollout_after_build"
DAG_IDS = (FLEET_DAG, ROLLOUT_DAG)
RELEASE_TAG_VALUE_ID = "13947cbe-457c-441f-a7e0-7c554c9fae02"
"""The fleet DAG's default ``tag_value_id`` (``RELEASE_TAG_VALUE_ID`` in the DAG file)."""
STAGES = ("dev", "prod")
DAG_PARSE_TIMEOUT = 120.0
RUN_TIMEOUT = 300.0
SENSOR_BUILD_SECONDS = 20.0
"""Builds watched by the sensor: it looks once on the worker before deferring, so the build must still run
then, also on a busy machine where the sensor starts many seconds after the patch."""
HANDOVER_BUILD_SECONDS = 20.0
"""Builds in the two-triggerer scenario: long enough to stop a triggerer while it holds a rollout."""

DEFERRED = "Pausing task as DEFERRED"
TRIGGER_STARTED = ") starting"
"""End of the triggerer's ``trigger <dag>/<run>/<task>/<map>/<try> (ID n) starting`` line."""
TRIGGER_FIRED = "Trigger fired event"
TRIGGER_LOGGER = "DeploymentRolloutTrigger"
LIVE = "is live (status READY)"


@dataclass(frozen=True)
class DagRun:
    """One DAG run a scenario starts.

    :param dag_id: the DAG.
    :param run_id: the run id.
    :param conf: the run's params.
    """

    dag_id: str
    run_id: str
    conf: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.dag_id, self.run_id


# --------------------------------------------------------------------------------------------- helpers
def fleet_targets(emulator: Emulator) -> dict[str, list[dict[str, Any]]]:
    """The deployments the fleet DAG rolls out to, by stage: READY and tagged with the release's tag."""
    targets: dict[str, list[dict[str, Any]]] = {stage: [] for stage in STAGES}
    for deployment in emulator.deployments():
        stage = deployment["deployment_type"]
        if stage in targets and deployment["status"] == "READY" and RELEASE_TAG_VALUE_ID in deployment["tag_value_ids"]:
            targets[stage].append(deployment)
    assert len(targets["dev"]) >= 2 and targets["prod"], f"the emulator's example data changed: {targets}"
    return targets


def revisions(emulator: Emulator) -> dict[str, list[dict[str, Any]]]:
    """Every deployment's revisions, by deployment name."""
    return {deployment["name"]: deployment["revisions"] for deployment in emulator.deployments()}


def start_runs(stack: Stack, runs: Iterable[DagRun]) -> float:
    """Wait for the DAGs to be parsed, trigger ``runs``; return when they were triggered."""
    stack.airflow.api.wait_for_dags(DAG_IDS, timeout=DAG_PARSE_TIMEOUT)
    started = time.monotonic()
    for run in runs:
        stack.airflow.api.trigger(run.dag_id, run.run_id, run.conf)
    return started


def check_run(stack: Stack, run: DagRun, state: str, expected: str) -> None:
    """Fail with the task states, the failed tasks' log tails and any known Airflow race if ``state`` is not
    ``expected``."""
    if state == expected:
        return
    api = stack.airflow.api
    lines = [f"{run.dag_id}/{run.run_id} ended {state!r}, expected {expected!r}", api.describe_run(*run.key)]
    for ti in api.task_instances(*run.key):
        if ti["state"] == "failed":
            log = api.task_log(run.dag_id, run.run_id, ti["task_id"], ti["map_index"], max(ti["try_number"], 1))
            lines.append(f"--- log tail of {ti['task_id']}[{ti['map_index']}]:")
            lines.extend(log.messages()[-15:])
    races = stack.airflow.stale_success_races()
    if races:
        lines.append("Airflow's stale-success race failed a resumed deferred task (apache/airflow#66374, #72716):")
        lines.extend(races)
    raise AssertionError("\n".join(lines))


def check_deferred_once(log: TaskLog, what: str, outcome: str) -> set[int]:
    """Check that a task deferred once, that a triggerer ran its trigger, which logged ``outcome``, and that
    the trigger never fired twice; return the ids of the triggerer jobs that ran it.

    The triggerer's own "Trigger fired event" line is not required: Airflow sometimes closes the trigger's
    log file before writing it, losing the trigger's last lines (seen on PostgreSQL).
    """
    problems = []
    if log.count(DEFERRED) != 1:
        problems.append(f"{log.count(DEFERRED)} '{DEFERRED}' lines, expected 1")
    if log.count(TRIGGER_STARTED) < 1 or not log.triggerer_job_ids():
        problems.append("no triggerer started its trigger")
    if not log.messages(logger=TRIGGER_LOGGER):
        problems.append("the trigger logged nothing from the triggerer")
    # The outcome is logged by the trigger and again by the resumed task (as a message when it succeeds,
    # as the raised exception's value when it fails); the trigger's last lines are sometimes cut off with
    # its log file (see above), so either counts.
    if not log.mentions(outcome):
        problems.append(f"neither the trigger nor the resumed task logged {outcome!r}")
    if log.count(TRIGGER_FIRED) > 1:
        problems.append(f"the trigger fired {log.count(TRIGGER_FIRED)} times")
    if problems:
        tail = "\n".join(log.messages()[-30:])
        raise AssertionError(f"{what}: {'; '.join(problems)}\n--- log tail:\n{tail}")
    return log.triggerer_job_ids()


def check_one_new_revision(
    before: Mapping[str, list[dict[str, Any]]], emulator: Emulator, name: str, status: str = "DEPLOYED"
) -> dict[str, Any]:
    """Check that deployment ``name`` got exactly one new revision, ended with ``status`` (and active when
    deployed); return the deployment."""
    deployment = emulator.deployment(name)
    known = {revision["id"] for revision in before[name]}
    new = [revision for revision in deployment["revisions"] if revision["id"] not in known]
    assert len(new) == 1, f"{name}: expected exactly one new revision, got {len(new)}: {new}"
    assert new[0]["status"] == status, f"{name}: new revision {new[0]['id']} is {new[0]['status']}, expected {status}"
    if status == "DEPLOYED":
        assert deployment["active_revision_id"] == new[0]["id"], f"{name}: the new revision is not active"
    else:
        assert deployment["active_revision_id"] != new[0]["id"], f"{name}: a failed revision became active"
    return deployment


def task_key(run_id: str, task_id: str, map_index: int = -1) -> str:
    """How the scenarios name one task instance: ``run:task`` or, when mapped, ``run:task[i]``."""
    return f"{run_id}:{task_id}" if map_index < 0 else f"{run_id}:{task_id}[{map_index}]"


def rollout_task_logs(stack: Stack, fleet: DagRun, rollouts: Iterable[DagRun]) -> dict[str, TaskLog]:
    """The logs of every task that waited for a rollout: the fleet's mapped patches and the sensors."""
    api = stack.airflow.api
    logs = {}
    for ti in api.task_instances(*fleet.key):
        if ti["task_id"].startswith("roll_out_"):
            logs[task_key(fleet.run_id, ti["task_id"], ti["map_index"])] = api.task_log(
                fleet.dag_id, fleet.run_id, ti["task_id"], ti["map_index"]
            )
    for run in rollouts:
        logs[task_key(run.run_id, "wait_for_rollout")] = api.task_log(run.dag_id, run.run_id, "wait_for_rollout")
    return logs


# -------------------------------------------------------------------------------------------- scenarios
def rollout_scenario(stack: Stack, version: str) -> None:
    """The fleet DAG, one rollout and one failing rollout at once, on one triggerer.

    Checks: the fleet and the good rollout succeed and the failing one fails at ``wait_for_rollout`` with
    the service's failure message in the task log; every waiting task deferred once and the stack's
    triggerer ran its trigger, which decided the outcome and never fired twice; every deployment got
    exactly one new revision; the poller listed all of a stage's deployments in one request; the payment
    token is not in the patch task's log.
    """
    emulator, api = stack.emulator, stack.airflow.api
    targets = fleet_targets(emulator)
    good, bad = emulator.deployment("checkout-api-staging"), emulator.deployment("billing-worker-dev")
    for deployment in (good, bad):
        emulator.set_build_seconds(deployment["id"], SENSOR_BUILD_SECONDS)
    failure = f"e2e injected build failure {version}"
    emulator.fail_next_build(bad["id"], failure)
    before = revisions(emulator)
    fleet = DagRun(FLEET_DAG, f"fleet-{version}", {"version": version})
    rollout = DagRun(ROLLOUT_DAG, f"rollout-{version}", {"deployment_name": good["name"], "version": version})
    failing = DagRun(ROLLOUT_DAG, f"failing-{version}", {"deployment_name": bad["name"], "version": version})

    started = start_runs(stack, [fleet, rollout, failing])
    states = api.wait_for_runs([fleet.key, rollout.key, failing.key], timeout=RUN_TIMEOUT)
    record_timing(stack.name, **{"3 concurrent runs": time.monotonic() - started})

    check_run(stack, fleet, states[fleet.key], "success")
    check_run(stack, rollout, states[rollout.key], "success")
    check_run(stack, failing, states[failing.key], "failed")
    failing_states = {ti["task_id"]: ti["state"] for ti in api.task_instances(*failing.key)}
    assert failing_states["patch_deployment"] == "success", failing_states
    assert failing_states["wait_for_rollout"] == "failed", failing_states
    assert failing_states["verify_rollout"] == "upstream_failed", failing_states

    logs = rollout_task_logs(stack, fleet, [rollout])
    mapped = [name for name in logs if name.startswith(fleet.run_id)]
    assert len(mapped) == sum(len(targets[stage]) for stage in STAGES), f"mapped rollout tasks: {mapped}"
    triggerers = set()
    for name, log in logs.items():
        triggerers |= check_deferred_once(log, name, LIVE)
    failing_log = api.task_log(failing.dag_id, failing.run_id, "wait_for_rollout")
    triggerers |= check_deferred_once(failing_log, f"{failing.run_id}:wait_for_rollout", failure)
    assert any(failure in error and "BUILD_FAILED" in error for error in failing_log.exception_values()), (
        f"the task did not fail with the service's message {failure!r}:\n" + "\n".join(failing_log.messages()[-20:])
    )
    assert triggerers == api.alive_triggerer_jobs(), f"triggers ran on {triggerers}, not the stack's one triggerer"

    for deployment in [*targets["dev"], *targets["prod"], good]:
        check_one_new_revision(before, emulator, deployment["name"])
    check_one_new_revision(before, emulator, bad["name"], status="BUILD_FAILED")
    serving = emulator.deployment(good["name"])["source_revision_config"]["image_uri"]
    assert serving.endswith(f":{version}"), serving

    batches = emulator.list_requests_by_ids()
    for stage in STAGES:
        ids = {deployment["id"] for deployment in targets[stage]}
        assert any(ids <= set(batch) for batch in batches), (
            f"no list request asked for all {len(ids)} {stage} deployments at once; "
            f"ids per request: {[len(batch) for batch in batches]}"
        )
    patch_log = api.task_log(rollout.dag_id, rollout.run_id, "patch_deployment")
    assert PAYMENT_TOKEN not in patch_log.text()
    polled = [batch for batch in batches if len(batch) > 1]
    record_timing(stack.name, **{"list requests with >1 id": len(polled), "most ids in one": max(map(len, polled))})
