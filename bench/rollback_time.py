"""Question 6: how long from a failed verification to the previous revision serving again, and how many
requests the rollback spends.

A ``PatchDeploymentOperator`` with ``verify`` (always false) and ``rollback_on_failure`` rolls out a new
image to one deployment of an emulator in a subprocess (real-time clock, builds of ``BUILD`` seconds) and
waits on the worker. The clock starts when ``verify`` returns false and stops when the task fails after
the rollback, i.e. when the previous build serves again. The emulator's own time to make the restored
revision live (a redeploy skips the build: 30 % of a build; a patched-back config is rebuilt: one build)
is read from the restored revision's timestamps; the rest is the task's overhead, which should be at most
one poll interval (plus the few requests' round trips). Requests are the emulator's counters between the
two moments. Both paths: the redeploy endpoint, and the patch fallback when the server has none.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

from common import Goal, bench_data, deployment_id, fmt, median, parse_options, publish, start_emulator, table

BUILD = 3.0
POLL_INTERVALS = (0.5, 2.0)
SLACK = 0.3
"""Seconds allowed beyond one poll interval for the rollback's own requests (read, redeploy, list polls)."""


class _TI:
    try_number = 1

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def one_rollback(emulator: Any, poll: float, run: int) -> dict[str, Any]:
    """Roll out a bad image, fail its verification, and time the rollback."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider.operators.deployment_service import PatchDeploymentOperator

    marks: dict[str, Any] = {}

    def verify(deployment: Any) -> bool:
        marks["counters"] = dict(emulator.admin.counters())
        marks["failed_at"] = time.time()
        return False

    task = PatchDeploymentOperator(
        task_id="bench",
        deployment_id=deployment_id(0),
        image_uri=f"registry.example.com/acme/bench:{run}-{poll}",
        wait_for_rollout=True,
        poll_interval=poll,
        timeout=120,
        verify=verify,
        rollback_on_failure=True,
    )
    try:
        task.execute({"ti": _TI()})  # type: ignore[arg-type]
    except AirflowFailException:
        done = time.time()
    else:
        raise RuntimeError("the task did not fail after its verification failed")
    after = emulator.admin.counters()
    spent = {route: count - marks["counters"].get(route, 0) for route, count in after.items()}
    deployment = emulator.admin.deployment(deployment_id(0))
    restored = next(rev for rev in deployment["revisions"] if rev["id"] == deployment["active_revision_id"])
    live_at = datetime.fromisoformat(restored["updated_at"]).timestamp()
    created_at = datetime.fromisoformat(restored["created_at"]).timestamp()
    return {
        "total": done - marks["failed_at"],
        "service": live_at - created_at,
        "requests": sum(spent.values()),
        "by_route": {route: count for route, count in spent.items() if count},
    }


def measure(path: str, poll: float, runs: int) -> dict[str, Any]:
    options: dict[str, Any] = {"build_seconds": BUILD, "ready_seconds": 0.1}
    if path == "patch":
        options["disabled_endpoints"] = ["redeploy"]
    data = bench_data(2, build_seconds=None)
    data["deployments"] = data["deployments"][1:]  # an internal_docker deployment (image rollouts)
    data["deployments"][0]["id"] = deployment_id(0)
    emulator = start_emulator(data, **options)
    try:
        from common import use_emulator_connection

        use_emulator_connection(emulator)
        samples = [one_rollback(emulator, poll, run) for run in range(runs)]
    finally:
        emulator.stop()
    overheads = [sample["total"] - sample["service"] for sample in samples]
    return {
        "total": median(sample["total"] for sample in samples),
        "service": median(sample["service"] for sample in samples),
        "overhead_max": max(overheads),
        "requests": max(sample["requests"] for sample in samples),
        "by_route": samples[-1]["by_route"],
    }


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    from common import connection_env

    os.environ.update(connection_env("http://127.0.0.1:9", "not-yet"))  # Airflow home and log level first
    import airflow_provider.operators.deployment_service  # noqa: F401  (import Airflow before the clock runs)

    runs = 1 if options.quick else 3
    rows, goals = [], []
    for path in ("redeploy", "patch"):
        for poll in POLL_INTERVALS:
            result = measure(path, poll, runs)
            rows.append(
                (
                    path,
                    fmt(poll, 1),
                    fmt(result["total"], 2),
                    fmt(result["service"], 2),
                    fmt(result["overhead_max"], 2),
                    result["requests"],
                    ", ".join(f"{route}: {count}" for route, count in sorted(result["by_route"].items())),
                )
            )
            goals.append(
                Goal(
                    "rollback",
                    f"{path}, poll {poll:g} s: previous revision serves within the service's time + one poll "
                    f"interval (+{SLACK:g} s for requests), every sample",
                    f"overhead max {result['overhead_max']:.2f} s over the service's {result['service']:.2f} s",
                    result["overhead_max"] <= poll + SLACK,
                )
            )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            table(
                [
                    "path",
                    "poll s",
                    "failed verify -> old serves, median s",
                    "service time s",
                    "overhead max s",
                    "requests (max)",
                    "requests by route (last run)",
                ],
                rows,
            ),
            f"Builds take {BUILD:g} s in this emulator; {runs} run(s) per row. The requests are the rollback's "
            "whole cost: one read of the deployment, revision reads (what to restore, then the restored "
            "revision's status while it builds), the redeploy (on the patch path: the redeploy's 404, then "
            "the PATCH), and one list request per poll until the restored revision is live.",
        ]
    )
    seconds = time.perf_counter() - started
    publish("rollback_time", "7. Rollback time", body, goals, quick=options.quick, seconds=seconds)


if __name__ == "__main__":
    main()
