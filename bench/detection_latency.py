"""Question 5: detection latency, from the moment the emulator activates the awaited revision to the
moment the trigger fires its event, for poll intervals of 1 s and 5 s.

For each interval, K rollouts wait in one event loop (one shared poller) for revisions that the emulator
(in a subprocess, real-time clock) deploys at staggered moments spread over one interval, so the
activations fall at every phase of the poll cycle. The activation moment is the revision's
``updated_at`` when it became ``DEPLOYED`` (the emulator stamps each transition with the time it is due,
not the time a request noticed it); the event moment is when ``trigger.run()`` yields. Both clocks are
this machine's wall clock.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from datetime import datetime

from common import (
    CONN_ENV,
    HOOK_PARAMS,
    Goal,
    bench_data,
    connection_env,
    deployment_id,
    fmt,
    median,
    parse_options,
    publish,
    revision_id,
    start_emulator,
    table,
)

INTERVALS = (1.0, 5.0)
LEAD = 4.0
"""Seconds from the emulator's start to the first activation: the triggers are waiting by then."""
GOAL_FACTOR = 1.1


async def wait_all(count: int, interval: float) -> list[tuple[str, float]]:
    """Run ``count`` rollout triggers to their end; return each event's status and wall-clock time."""
    from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger

    async def wait(index: int) -> tuple[str, float]:
        trigger = DeploymentRolloutTrigger(
            deployment_id(index), revision_id(index, "building"), HOOK_PARAMS, poll_interval=interval
        )
        async for event in trigger.run():
            return str(event.payload["status"]), time.time()
        raise RuntimeError("the trigger ended without an event")

    return list(await asyncio.gather(*(wait(index) for index in range(count))))


def measure(count: int, interval: float, rng: random.Random) -> list[float]:
    """Latencies in seconds of ``count`` rollouts activated at random phases of the poll cycle."""
    builds = [LEAD + interval + (index + rng.random()) * interval / count for index in range(count)]
    emulator = start_emulator(bench_data(count, build_seconds=builds))
    try:
        os.environ[CONN_ENV] = connection_env(emulator.base_url, emulator.api_key)[CONN_ENV]
        outcomes = asyncio.run(wait_all(count, interval))
        latencies = []
        for index, (status, fired) in enumerate(outcomes):
            if status != "success":
                raise RuntimeError(f"rollout {index} ended with {status}")
            wanted = revision_id(index, "building")
            revision = next(
                rev for rev in emulator.admin.deployment(deployment_id(index))["revisions"] if rev["id"] == wanted
            )
            latencies.append(fired - datetime.fromisoformat(revision["updated_at"]).timestamp())
    finally:
        emulator.stop()
    return latencies


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    count = 5 if options.quick else 12
    os.environ.update(connection_env("http://127.0.0.1:9", "not-yet"))  # Airflow home and log level first
    import airflow_provider.triggers.deployment_service  # noqa: F401  (import Airflow before the clock runs)

    rng = random.Random(20250106)
    rows, goals = [], []
    for interval in INTERVALS:
        latencies = measure(count, interval, rng)
        worst = max(latencies)
        rows.append(
            (
                fmt(interval, 0),
                count,
                fmt(median(latencies), 3),
                fmt(min(latencies), 3),
                fmt(worst, 3),
                fmt(worst / interval, 3),
                fmt(interval * GOAL_FACTOR, 2),
            )
        )
        goals.append(
            Goal(
                "latency",
                f"detection within one interval + 10% at {interval:g} s (every sample)",
                f"max {worst:.3f} s = {worst / interval:.2f} x interval",
                worst <= interval * GOAL_FACTOR,
            )
        )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            table(
                ["interval s", "rollouts", "median s", "min s", "max s", "max / interval", "goal: max <= s"],
                rows,
            ),
            "A rollout activated just after a round waits one full interval for the next; the rest is one list "
            "request and the event's delivery.",
        ]
    )
    publish(
        "detection_latency",
        "5. Detection latency",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
