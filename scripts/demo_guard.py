"""The demo's guard after landing: a release lands and is handed to its guard, regresses a few seconds later, and
the guard's DAG rolls it back to the revision that served before.

``airflow dags test`` runs no triggerer, so, as for the deployment watcher (``demo_watch.py``), the demo runs the
guard's trigger itself: the real :class:`~airflow_provider.triggers.guard.DeploymentGuardTrigger`, against the
emulator, on the guard record the patch task wrote to Airflow's Variables (exported with ``airflow variables
export``). Its ``revision_regressed`` event is then handed to ``deployment_service_guard`` as the run's conf (what
its asset event carries in a real deployment).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demo_airflow import AirflowProcess

from airflow_provider.emulator.admin_client import EmulatorAdmin

GUARDED = "search-sandbox"
"""The deployment whose release regresses after landing."""
IMAGE_REPOSITORY = "registry.example.com/acme/search"
VERSION = "0.5.0"
DEGRADES_AFTER = 12.0
"""Seconds after going live at which 30 % of the release's requests start failing (its own analysis is over)."""
TRAFFIC = 50.0


def first_regression(connection_json: str, records: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """The guard trigger's first ``revision_regressed`` payload over ``records``, or ``None`` after ``timeout``."""
    from airflow_provider.triggers.deployment_service import DeploymentGuardTrigger
    from airflow_provider.triggers.guard import MemoryGuardStore

    os.environ["AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"] = connection_json

    async def watch() -> dict[str, Any] | None:
        trigger = DeploymentGuardTrigger(poll_interval=1.0)
        trigger.store = MemoryGuardStore(records)
        trigger.claim_settle = 0.5  # one trigger here: nobody to race
        events = trigger.run()
        try:
            event = await asyncio.wait_for(events.__anext__(), timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        return dict(event.payload)

    return asyncio.run(watch())


def guard_step(
    airflow: AirflowProcess,
    admin: EmulatorAdmin,
    logs: Path,
    dag_file: Path,
    step: int,
    say: Callable[[str], None],
    echo: Callable[[str], None],
) -> list[str]:
    """Run the guard's part of the demo; return the summary's lines (``!!`` in the first when it did not go as
    expected)."""
    admin.add_behaviour_rule(
        image_uri=f"*/search:{VERSION}",
        requests_per_second=TRAFFIC,
        after_seconds=DEGRADES_AFTER,
        then={"error_rate": 0.3, "requests_per_second": TRAFFIC},
    )
    before = admin.find_deployment(GUARDED)
    say(
        f"{step}. guarded_rollout {GUARDED} {VERSION}: the release serves well, then {DEGRADES_AFTER:g} s after going "
        "live 30 % of its requests fail (after its own analysis passed)"
    )
    conf = {"deployment_name": GUARDED, "image_repository": IMAGE_REPOSITORY, "version": VERSION}
    started = time.monotonic()
    code = airflow.run(
        logs / "guarded_rollout.log",
        ["dags", "test", "guarded_rollout", "-c", json.dumps(conf), "-f", str(dag_file)],
        echo,
    )
    if code != 0:
        return [f"!! {GUARDED}: the guarded rollout did not land (see {logs / 'guarded_rollout.log'})"]
    landed = admin.find_deployment(GUARDED)
    exported = logs / "variables.json"
    airflow.run(logs / "variables-export.log", ["variables", "export", str(exported)], echo)
    records = {
        key: json.loads(value) if isinstance(value, str) else value
        for key, value in json.loads(exported.read_text()).items()
        if key.startswith("deployment_service_guard:")
    }
    say(
        f"   landed revision {landed['active_revision_id'][:8]} in {time.monotonic() - started:.1f} s and handed it "
        f"to the guard ({len(records)} guarded revision(s)); the guard measures it in the triggerer (here: inline)"
    )
    connection = os.environ.get("DEMO_CONNECTION_JSON", "")
    payload = first_regression(connection, records, timeout=60)
    if payload is None:
        return [f"!! {GUARDED}: the guard found no regression within 60 s"]
    say(f"   guard: {payload['kind']} {GUARDED} revision {payload['revision_id'][:8]}: {payload['reason']}")
    say(f"{step}. airflow dags test deployment_service_guard (the guard's event as its conf)")
    regressions = json.dumps({"regressions": [payload]})
    command = ["dags", "test", "deployment_service_guard", "-c", regressions, "-f", str(dag_file)]
    code = airflow.run(logs / "deployment_service_guard.log", command, echo)
    after = admin.find_deployment(GUARDED)
    image = after["source_revision_config"].get("image_uri")
    created = len(after["revisions"]) - len(before["revisions"])
    back = code == 0 and image == before["source_revision_config"].get("image_uri") and created == 2
    mark = "ok " if back else "!! "
    return [
        f"{mark}{GUARDED}: {VERSION} landed, then regressed: {payload['message']}; {created} new revisions; at the "
        f"end it serves {image} (revision {after['active_revision_id'][:8]}, status {after['status']})",
    ]
