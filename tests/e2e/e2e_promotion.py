"""The watcher on the real triggerer never lets a downstream DAG promote a revision Airflow rejected (issue 30).

``promote_settled_revision`` is scheduled on the name asset of ``billing-worker-dev``, watched by a
``DeploymentEventTrigger`` (``settle_time`` :data:`~e2e_stack.SETTLE_TIME`), and promotes to
``billing-worker-prod`` only a revision an Airflow rollout passed. ``analysed_rollout`` rolls out to
``billing-worker-dev``: first an image whose error rate fails the analysis (rolled back), then a healthy one
(landed). The settle time is shorter than the time the rejected revision serves, so what keeps it unannounced
is the judging marker the rollout task writes to the asset state store. Checked through Airflow's REST API
(the DAGs' runs, their tasks' states, the asset events that started them, the marker) and the emulator (the
revisions serving on staging and production).
"""

from __future__ import annotations

import json
import time
from typing import Any

from e2e_airflow import TERMINAL_RUN_STATES, wait_until
from e2e_scenarios import DAG_PARSE_TIMEOUT, RUN_TIMEOUT, DagRun, check_run
from e2e_stack import Stack, record_timing

PROMOTE_DAG = "promote_settled_revision"
ROLLOUT_DAG = "analysed_rollout"
STAGING = "billing-worker-dev"
PRODUCTION = "billing-worker-prod"
"""The example DAG's default ``STAGING_ID`` and ``PRODUCTION_ID`` (names here: this process does not import it)."""
IMAGE_REPOSITORY = "registry.example.com/acme/billing-worker"
TRAFFIC = 200.0
"""Requests per second each revision's app serves: enough runs for the tracing check's ``min_run_count``."""
JUDGING_KEY = "deployment_service_judging"
CURSOR_KEY_PREFIX = "deployment_event_cursor:"


def _payload(event: dict[str, Any]) -> dict[str, Any]:
    extra = event.get("extra") or {}
    payload = extra.get("payload") if extra.get("from_trigger") else None
    return payload if isinstance(payload, dict) else {}


class PromotionProbe:
    """What the scenario observes: the promotion DAG's runs and their events, the staging asset's store.

    :param stack: the running stack.
    """

    def __init__(self, stack: Stack) -> None:
        assert stack.airflow.api is not None, "the stack is not up"
        self.stack, self.api, self.emulator = stack, stack.airflow.api, stack.emulator
        self.staging_id = str(self.emulator.deployment(STAGING)["id"])
        self.uri = f"deployment-service://deployments/{self.staging_id}"
        """The id asset: where the rollout tasks mark their judging."""
        self.watched_uri = f"deployment-service://deployment-names/{STAGING}"
        """The name asset the promotion DAG is scheduled on: only the watcher emits there."""
        self.known_runs = {run["dag_run_id"] for run in self.api.dag_runs(PROMOTE_DAG)}

    def runs(self) -> list[dict[str, Any]]:
        """The promotion DAG's runs started during the scenario, oldest first."""
        return [run for run in self.api.dag_runs(PROMOTE_DAG) if run["dag_run_id"] not in self.known_runs]

    def events_of(self, run: dict[str, Any]) -> list[dict[str, Any]]:
        """The watcher events that started ``run``."""
        return [_payload(event) for event in self.api.upstream_asset_events(PROMOTE_DAG, run["dag_run_id"])]

    def task_states(self, run: dict[str, Any]) -> dict[str, str]:
        return {ti["task_id"]: ti["state"] for ti in self.api.task_instances(PROMOTE_DAG, run["dag_run_id"])}

    def store(self, uri: str | None = None) -> dict[str, Any]:
        """An asset's state store, the staging id asset's by default (``{}`` while Airflow has no such asset)."""
        asset = self.api.asset(uri or self.uri)
        return self.api.asset_state_store(int(asset["id"])) if asset is not None else {}

    def finished_run_for(self, revision_id: str) -> dict[str, Any] | None:
        """The finished promotion run started by a ``revision_live`` event of ``revision_id``."""
        for run in self.runs():
            if run["state"] not in TERMINAL_RUN_STATES:
                continue
            if any(
                p.get("kind") == "revision_live" and p.get("revision_id") == revision_id for p in self.events_of(run)
            ):
                return run
        return None

    def describe(self) -> str:
        lines = []
        try:
            for run in self.runs():
                lines.append(
                    f"run {run['dag_run_id']} {run['state']} ({run['run_type']}) tasks {self.task_states(run)} "
                    f"events {json.dumps(self.events_of(run))}"
                )
            lines.append(f"{self.uri} state store: {json.dumps(self.store())}")
            lines.append(f"{self.watched_uri} state store: {json.dumps(self.store(self.watched_uri))}")
        except AssertionError as err:
            lines.append(f"(REST API: {err})")
        for name in (STAGING, PRODUCTION):
            deployment = self.emulator.deployment(name)
            lines.append(
                f"{name}: serving {deployment['active_revision_id']} ({deployment['status']}), "
                f"image {deployment['source_revision_config'].get('image_uri')}, "
                f"{len(deployment['revisions'])} revisions"
            )
        lines.append(self.stack.airflow.diagnostics())
        return "\n".join(lines)

    def wait(self, check: Any, timeout: float, what: str) -> Any:
        def probe() -> Any:
            self.stack.airflow.check_alive()
            return check()

        return wait_until(probe, timeout=timeout, what=what, interval=1.0, diagnostics=self.describe)

    def roll_out(self, run_id: str, version: str, expected: str) -> tuple[str, float]:
        """Run ``analysed_rollout`` on staging for ``version``; check it ended ``expected``; return the revision
        it made and how long it took."""
        started = time.monotonic()
        run = DagRun(
            ROLLOUT_DAG,
            run_id,
            {"deployment_name": STAGING, "image_repository": IMAGE_REPOSITORY, "version": version},
        )
        self.api.trigger(*run.key, run.conf)
        states = self.api.wait_for_runs([run.key], timeout=RUN_TIMEOUT)
        check_run(self.stack, run, states[run.key], expected)
        image = f"{IMAGE_REPOSITORY}:{version}"
        made = [
            r
            for r in self.emulator.deployment(STAGING)["revisions"]
            if r["source_revision_config"].get("image_uri") == image
        ]
        assert len(made) == 1, f"expected one revision of {image} on {STAGING}, found {made}\n{self.describe()}"
        return str(made[0]["id"]), time.monotonic() - started


def promotion_scenario(stack: Stack) -> None:
    """A rejected revision is never promoted; a landed one is, once, saying which run judged it.

    1. Both DAGs are parsed and the watcher runs in the triggerer: its baseline cursor is in the staging name
       asset's state store.
    2. ``analysed_rollout`` rolls out an image whose app fails 60 % of its runs: the analysis fails and the
       task rolls it back (the run fails). The rejected revision serves for longer than the settle time (the
       analysis' initial delay and first round alone take twice as long), so the judging marker is what holds
       it back. The watcher announces the rollback's revision (``verdict`` ``rolled_back``) and never the
       rejected one; the promotion run it started skips ``promote``; production still serves what it served;
       the marker says ``rejected``.
    3. ``analysed_rollout`` rolls out a healthy image: it lands; the watcher announces it after the verdict
       (``judging`` false, ``verdict`` ``landed``, ``judged_by`` that run); the promotion run patches
       production to that image.
    """
    api, emulator = stack.airflow.api, stack.emulator
    assert api is not None, "the stack is not up"
    started = time.monotonic()
    api.wait_for_dags([PROMOTE_DAG, ROLLOUT_DAG], timeout=DAG_PARSE_TIMEOUT)
    probe = PromotionProbe(stack)
    production_before = emulator.deployment(PRODUCTION)
    staging_before = emulator.deployment(STAGING)

    def baseline() -> bool:
        return any(key.startswith(CURSOR_KEY_PREFIX) for key in probe.store(probe.watched_uri))

    what = f"the watcher saves its baseline cursor in {probe.watched_uri}"
    probe.wait(baseline, timeout=DAG_PARSE_TIMEOUT, what=what)
    watching = time.monotonic()

    # 2. A revision the analysis rejects.
    emulator.set_behaviour(probe.staging_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.set_behaviour(probe.staging_id, revision_id="next", error_rate=0.6, requests_per_second=TRAFFIC)
    bad, bad_took = probe.roll_out("promote-rejected", "6.6.6-bad", "failed")
    staging = emulator.deployment(STAGING)
    restored = str(staging["active_revision_id"])
    assert restored != bad and staging["status"] == "READY", probe.describe()
    assert staging["source_revision_config"]["image_uri"] == staging_before["source_revision_config"]["image_uri"]
    run = probe.wait(
        lambda: probe.finished_run_for(restored),
        timeout=RUN_TIMEOUT,
        what=f"a promotion run for the rollback's revision {restored} finishes",
    )
    (announced,) = [p for p in probe.events_of(run) if p.get("kind") == "revision_live"]
    assert announced["verdict"] == "rolled_back" and announced["judging"] is False, probe.describe()
    assert probe.task_states(run) == {"settled_revision": "success", "promote": "skipped"}, probe.describe()
    every_event = [p for r in probe.runs() for p in probe.events_of(r)]
    assert not [p for p in every_event if p.get("kind") == "revision_live" and p.get("revision_id") == bad], (
        f"the rejected revision {bad} was announced\n{probe.describe()}"
    )
    production = emulator.deployment(PRODUCTION)
    assert production["active_revision_id"] == production_before["active_revision_id"], probe.describe()
    assert production["source_revision_config"] == production_before["source_revision_config"], probe.describe()
    marks = (probe.store().get(JUDGING_KEY) or {}).get("revisions") or {}
    assert marks.get(bad, {}).get("state") == "rejected", f"marker {marks}\n{probe.describe()}"
    assert marks[bad]["by"]["run_id"] == "promote-rejected", marks

    # 3. A healthy revision.
    emulator.set_behaviour(probe.staging_id, revision_id="next", error_rate=0.0, requests_per_second=TRAFFIC)
    good, good_took = probe.roll_out("promote-landed", "7.0.0", "success")
    run = probe.wait(
        lambda: probe.finished_run_for(good), timeout=RUN_TIMEOUT, what=f"a promotion run for revision {good} finishes"
    )
    (announced,) = [p for p in probe.events_of(run) if p.get("kind") == "revision_live"]
    assert announced["verdict"] == "landed" and announced["judging"] is False, probe.describe()
    assert announced["judged_by"]["run_id"] == "promote-landed" and announced["judged_by"]["task_id"] == "roll_out"
    assert run["state"] == "success" and probe.task_states(run) == {
        "settled_revision": "success",
        "promote": "success",
    }, probe.describe()
    production = emulator.deployment(PRODUCTION)
    assert production["source_revision_config"]["image_uri"] == f"{IMAGE_REPOSITORY}:7.0.0", probe.describe()
    promoted = [p for r in probe.runs() if probe.task_states(r).get("promote") == "success" for p in probe.events_of(r)]
    assert {p["revision_id"] for p in promoted if p.get("kind") == "revision_live"} == {good}, probe.describe()

    record_timing(
        "sqlite-promotion",
        **{
            "watching after parse": watching - started,
            "rejected rollout": bad_took,
            "landed rollout": good_took,
            "whole scenario": time.monotonic() - started,
        },
    )
