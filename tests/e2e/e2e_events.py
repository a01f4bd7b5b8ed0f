"""The deployment watcher on the real triggerer: revisions rolled out outside Airflow start its DAG once each.

``smoke_test_on_new_revision`` is scheduled on the name asset of ``checkout-api-staging``, watched by an
``AssetWatcher`` running ``DeploymentEventTrigger`` in the triggerer. The scenario rolls revisions out
through the emulator's own API (as the service's UI or command-line client would) and checks, through
Airflow's REST API, the DAG's runs, the asset events that started them and the watcher's cursor in the
asset state store; across a triggerer restart with a revision going live while no triggerer runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from e2e_airflow import TERMINAL_RUN_STATES, wait_until
from e2e_scenarios import DAG_PARSE_TIMEOUT, RUN_TIMEOUT
from e2e_stack import WATCH_INTERVAL, Stack, record_timing

WATCH_DAG = "smoke_test_on_new_revision"
WATCHED_NAME = "checkout-api-staging"
"""The example DAG's default ``DEPLOYMENT_SERVICE_EXAMPLE_WATCHED_NAME``."""
NAME_ASSET_URI = f"deployment-service://deployment-names/{WATCHED_NAME}"
CURSOR_KEY_PREFIX = "deployment_event_cursor:"
"""``CURSOR_KEY_PREFIX`` of the triggers module plus ``:`` (not imported: this process does not import
Airflow)."""
CURSOR_SAVE_TIMEOUT = 60.0
"""The watcher saves its cursor 5 s (``CURSOR_COMMIT_DELAY``) after the events it includes; room for a busy
machine."""
WATCH_BUILD_SECONDS = 2.0
"""Builds of the watched deployment here: short, nothing waits on them in Airflow."""
QUIET_POLLS = 5
"""Polls the restarted watcher must make after the second run before the run count is final."""


def _payload(event: dict[str, Any]) -> dict[str, Any]:
    """The deployment event a watcher's asset event carries (``extra["payload"]``)."""
    extra = event.get("extra") or {}
    payload = extra.get("payload") if extra.get("from_trigger") else None
    return payload if isinstance(payload, dict) else {}


class WatcherProbe:
    """What the scenario observes of the watcher: the DAG's runs, the cursor, the emulator's requests.

    :param stack: the running stack.
    :param known_runs: run ids of the DAG that existed before the scenario (not counted).
    """

    def __init__(self, stack: Stack, known_runs: set[str]) -> None:
        assert stack.airflow.api is not None, "the stack is not up"
        self.stack = stack
        self.api = stack.airflow.api
        self.known_runs = known_runs
        self.deployment_id = str(stack.emulator.deployment(WATCHED_NAME)["id"])
        self.asset_id: int | None = None

    def runs(self) -> list[dict[str, Any]]:
        """The DAG's runs started during the scenario, oldest first."""
        return [run for run in self.api.dag_runs(WATCH_DAG) if run["dag_run_id"] not in self.known_runs]

    def revisions_of(self, run: dict[str, Any]) -> list[str]:
        """The revision each ``revision_live`` asset event that started ``run`` reports."""
        events = self.api.upstream_asset_events(WATCH_DAG, run["dag_run_id"])
        return [str(_payload(event).get("revision_id")) for event in events]

    def cursor_active(self) -> str | None:
        """The active revision the watcher's saved cursor records for the deployment (``None``: no cursor)."""
        if self.asset_id is None:
            asset = self.api.asset(NAME_ASSET_URI)
            if asset is None:
                return None
            self.asset_id = int(asset["id"])
        for key, value in self.api.asset_state_store(self.asset_id).items():
            if key.startswith(CURSOR_KEY_PREFIX) and isinstance(value, dict):
                seen = (value.get("deployments") or {}).get(self.deployment_id)
                if isinstance(seen, list) and seen:
                    return str(seen[0])
        return None

    def polls(self) -> int:
        """List requests the emulator answered that asked for the watched deployment by id."""
        return sum(self.deployment_id in batch for batch in self.stack.emulator.list_requests_by_ids())

    def describe(self) -> str:
        """Runs with their state, type and asset events; the cursor; request counts; component log tails."""
        lines = []
        try:
            for run in self.runs():
                events = self.api.upstream_asset_events(WATCH_DAG, run["dag_run_id"])
                lines.append(
                    f"run {run['dag_run_id']} {run['state']} ({run['run_type']}), conf {run.get('conf')}, "
                    f"asset events {json.dumps([_payload(event) or event.get('extra') for event in events])}"
                )
            asset = self.api.asset(NAME_ASSET_URI)
            lines.append(f"asset {NAME_ASSET_URI}: {asset and {'id': asset['id'], 'watchers': asset['watchers']}}")
            if asset is not None:
                lines.append(f"state store: {json.dumps(self.api.asset_state_store(int(asset['id'])))}")
            lines.append(f"alive triggerer jobs: {sorted(self.api.alive_triggerer_jobs())}")
        except AssertionError as err:
            lines.append(f"(REST API: {err})")
        routes: dict[str, int] = {}
        for request in self.stack.emulator.requests():
            routes[request["route"]] = routes.get(request["route"], 0) + 1
        lines.append(f"emulator requests by route: {routes}; list requests asking for {WATCHED_NAME}: {self.polls()}")
        lines.append(self.stack.airflow.diagnostics())
        return "\n".join(lines)

    def wait(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """:func:`wait_until` failing with :meth:`describe` (and at once if a component died)."""

        def probe() -> Any:
            self.stack.airflow.check_alive()
            return check()

        return wait_until(probe, timeout=timeout, what=what, interval=0.5, diagnostics=self.describe)

    def roll_out_until_live(self, image_uri: str) -> tuple[str, float]:
        """Roll out ``image_uri`` through the emulator's API; wait until it serves; return the revision id and
        when it was seen live."""
        emulator = self.stack.emulator
        revision = str(emulator.roll_out(self.deployment_id, image_uri)["latest_revision_id"])

        def live() -> bool:
            deployment = emulator.deployment(WATCHED_NAME)
            return bool(deployment["active_revision_id"] == revision and deployment["status"] == "READY")

        self.wait(live, timeout=60, what=f"revision {revision} ({image_uri}) of {WATCHED_NAME} goes live")
        return revision, time.monotonic()

    def wait_for_runs(self, count: int, timeout: float, what: str) -> list[dict[str, Any]]:
        """Wait until ``count`` runs exist and all are finished; return them."""

        def finished() -> list[dict[str, Any]] | None:
            runs = self.runs()
            return runs if len(runs) >= count and all(run["state"] in TERMINAL_RUN_STATES for run in runs) else None

        result: list[dict[str, Any]] = self.wait(finished, timeout=timeout, what=what)
        return result

    def check_runs(self, runs: list[dict[str, Any]], revisions: list[str]) -> None:
        """Exactly one successful asset-triggered run per revision, in order, each started by the event of
        its revision alone."""
        seen = [(run["run_type"], run["state"], self.revisions_of(run)) for run in runs]
        expected = [("asset_triggered", "success", [revision]) for revision in revisions]
        assert seen == expected, (
            f"expected one successful asset-triggered run per revision {revisions}, got (type, state, "
            f"revisions of its asset events) {seen}\n{self.describe()}"
        )


def watcher_scenario(stack: Stack) -> None:
    """Two revisions go live outside Airflow, the second while the triggerer is down: two runs, one each.

    1. The DAG is parsed and its watcher's trigger runs in the triggerer: observed as the baseline cursor
       (the deployment's current active revision) in the name asset's state store.
    2. Revision 1 is rolled out through the emulator's API and goes live: exactly one asset-triggered run
       of the DAG starts and succeeds, its asset event names revision 1; the cursor then records it.
    3. The triggerer is stopped; revision 2 is rolled out and goes live while no triggerer runs; a
       triggerer starts again: exactly one more run, for revision 2 (nothing lost), and none for
       revision 1 (nothing repeated); still two after the restarted watcher polled :data:`QUIET_POLLS`
       more times.
    """
    airflow, api = stack.airflow, stack.airflow.api
    assert api is not None, "the stack is not up"
    started = time.monotonic()
    api.wait_for_dags([WATCH_DAG], timeout=DAG_PARSE_TIMEOUT)
    probe = WatcherProbe(stack, {run["dag_run_id"] for run in api.dag_runs(WATCH_DAG)})
    stack.emulator.set_build_seconds(probe.deployment_id, WATCH_BUILD_SECONDS)
    serving = str(stack.emulator.deployment(WATCHED_NAME)["active_revision_id"])

    what = f"the watcher runs in the triggerer and saves its baseline cursor ({WATCHED_NAME} serving {serving})"
    probe.wait(lambda: probe.cursor_active() == serving, timeout=DAG_PARSE_TIMEOUT, what=what)
    watching = time.monotonic()
    assert not probe.runs(), f"the watcher fired for what was already there:\n{probe.describe()}"

    first, first_live = probe.roll_out_until_live("registry.example.com/acme/checkout-api:watch-1")
    what = f"one run of {WATCH_DAG} for revision {first} finishes"
    runs = probe.wait_for_runs(1, timeout=RUN_TIMEOUT, what=what)
    first_run = time.monotonic()
    probe.check_runs(runs, [first])
    # The watcher saves its cursor 5 s after the event (a stop before that repeats the event, by design).
    what = f"the watcher's cursor records revision {first}"
    probe.wait(lambda: probe.cursor_active() == first, timeout=CURSOR_SAVE_TIMEOUT, what=what)

    old_jobs = api.alive_triggerer_jobs()
    stopping = time.monotonic()
    survivors = airflow.process("triggerer").stop()
    assert not survivors, f"triggerer processes survived SIGKILL: {survivors}"
    what = f"the stopped triggerer's jobs {sorted(old_jobs)} are no longer alive"
    probe.wait(lambda: not (api.alive_triggerer_jobs() & old_jobs), timeout=60, what=what)
    second, _ = probe.roll_out_until_live("registry.example.com/acme/checkout-api:watch-2")
    assert not api.alive_triggerer_jobs(), f"a triggerer ran while revision {second} went live"
    airflow.restart("triggerer")
    restarted = time.monotonic()
    what = f"a second run of {WATCH_DAG}, for revision {second}, finishes after the triggerer restarts"
    runs = probe.wait_for_runs(2, timeout=RUN_TIMEOUT, what=what)
    second_run = time.monotonic()
    polls = probe.polls()
    what = f"the restarted watcher polls {QUIET_POLLS} more times"
    probe.wait(lambda: probe.polls() >= polls + QUIET_POLLS, timeout=60 + QUIET_POLLS * WATCH_INTERVAL, what=what)
    probe.check_runs(probe.runs(), [first, second])
    what = f"the watcher's cursor records revision {second}"
    probe.wait(lambda: probe.cursor_active() == second, timeout=CURSOR_SAVE_TIMEOUT, what=what)

    record_timing(
        "sqlite-watcher",
        **{
            "watching after parse": watching - started,
            "live -> run 1 done": first_run - first_live,
            "triggerer down": restarted - stopping,
            "restart -> run 2 done": second_run - restarted,
            "whole scenario": time.monotonic() - started,
        },
    )
