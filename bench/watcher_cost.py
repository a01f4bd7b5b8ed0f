"""Question 6: what a deployment watcher costs: list requests per interval, event latency and memory
for W watched deployments, side by side with one ``HttpEventTrigger``-style watcher per deployment.

One ``DeploymentEventTrigger`` watches W deployments (ids); the emulator (in a subprocess, real-time
clock) makes each deployment's building revision live at a staggered moment over one interval, after a
quiet phase. Requests per interval are counted in the quiet phase (emulator request counter / poll
rounds); latency is from the revision's ``updated_at`` at ``DEPLOYED`` to the moment the watcher yields
its ``revision_live`` event (max over every deployment); memory is Python heap held while watching
(``tracemalloc``), as the marginal cost per deployment between W = 1 and the largest W. The comparison
runs W independent pollers in the same process, each with its own hook and HTTP client asking for its
one deployment every interval (the shape of one ``HttpEventTrigger`` per deployment).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import tracemalloc
from datetime import datetime
from typing import Any

from common import (
    CONN_ENV,
    LIST_ROUTE,
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

INTERVAL = 2.0
QUIET_ROUNDS = 3
LEAD = 8.0
"""Seconds from the emulator's start to the first activation (watchers are polling by then)."""
GOAL_FACTOR = 1.1
"""Latency goal: one interval plus the list request that sees the change (as in question 5)."""


async def warm_up() -> None:
    """Create and use one hook and client, so one-time costs (imports, TLS context) stay out of the figures."""
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    hook = DeploymentServiceHook()
    await hook.a_list_deployments(deployment_ids=[deployment_id(0)], limit=1)
    await hook.aclose()


async def ours(count: int) -> dict[str, Any]:
    """One watcher over ``count`` deployments: requests per round, memory held, events with their time."""
    from airflow_provider.triggers.deployment_service import DeploymentEventTrigger, active_pollers

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    trigger = DeploymentEventTrigger(
        deployment_ids=[deployment_id(index) for index in range(count)],
        poll_interval=INTERVAL,
        events=["revision_live"],
        settle_time=0,  # the cost of looking, not of waiting: announced at the first look that sees it
    )
    fired: dict[str, float] = {}

    async def collect() -> None:
        async for event in trigger.run():
            fired[event.payload["deployment_id"]] = time.time()

    task = asyncio.create_task(collect())
    while not active_pollers() or active_pollers()[0].rounds_completed < 1:
        await asyncio.sleep(0.01)
    (poller,) = active_pollers()
    requests, rounds = poller.list_requests, poller.rounds_completed
    while poller.rounds_completed < rounds + QUIET_ROUNDS:
        await asyncio.sleep(0.01)
    per_round = (poller.list_requests - requests) / (poller.rounds_completed - rounds)
    await asyncio.sleep(INTERVAL / 2)  # between two rounds: what the watcher keeps, not one round's answer
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    while len(fired) < count:
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"per_round": per_round, "held": held, "fired": fired}


async def per_deployment(count: int) -> dict[str, Any]:
    """``count`` independent pollers, one hook and client each: requests per interval and memory held."""
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    requests = 0
    hooks = [DeploymentServiceHook() for _ in range(count)]

    answered: set[int] = set()
    errors = 0

    async def poll(index: int) -> None:
        nonlocal requests, errors
        while True:
            try:
                await hooks[index].a_list_deployments(deployment_ids=[deployment_id(index)], limit=1)
            except Exception:  # counted; a watcher keeps polling
                errors += 1
            else:
                requests += 1
                answered.add(index)
            await asyncio.sleep(INTERVAL)

    tasks = [asyncio.create_task(poll(index)) for index in range(count)]
    deadline = time.monotonic() + 120
    while len(answered) < count and time.monotonic() < deadline:  # every poller has its client and an answer
        await asyncio.sleep(0.05)
    before, started, errors_before = requests, time.monotonic(), errors
    await asyncio.sleep(INTERVAL * QUIET_ROUNDS)
    per_interval = (requests - before) / ((time.monotonic() - started) / INTERVAL)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for hook in hooks:
        await hook.aclose()
    return {"per_round": per_interval, "held": held, "errors": errors - errors_before, "answered": len(answered)}


def measure(count: int) -> dict[str, Any]:
    builds = [LEAD + INTERVAL * QUIET_ROUNDS + (index + 0.5) * INTERVAL / count for index in range(count)]
    emulator = start_emulator(bench_data(count, build_seconds=builds))
    try:
        os.environ[CONN_ENV] = connection_env(emulator.base_url, emulator.api_key)[CONN_ENV]
        asyncio.run(warm_up())
        result = asyncio.run(ours(count))
        counted = emulator.admin.count(LIST_ROUTE)
        latencies = []
        for index in range(count):
            wanted = revision_id(index, "building")
            revision = next(
                rev for rev in emulator.admin.deployment(deployment_id(index))["revisions"] if rev["id"] == wanted
            )
            latencies.append(
                result["fired"][deployment_id(index)] - datetime.fromisoformat(revision["updated_at"]).timestamp()
            )
        result.update(latencies=latencies, emulator_lists=counted)
    finally:
        emulator.stop()
    emulator = start_emulator(bench_data(count, build_seconds=None))
    try:
        os.environ[CONN_ENV] = connection_env(emulator.base_url, emulator.api_key)[CONN_ENV]
        result["theirs"] = asyncio.run(per_deployment(count))
    finally:
        emulator.stop()
    return result


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    sizes = (1, 100) if options.quick else (1, 100, 1000)
    os.environ.update(connection_env("http://127.0.0.1:9", "not-yet"))
    import airflow_provider.triggers.deployment_service  # noqa: F401  (import Airflow before measuring)

    results = {count: measure(count) for count in sizes}
    rows, goals = [], []
    for count, result in results.items():
        worst = max(result["latencies"])
        rows.append(
            (
                count,
                fmt(result["per_round"], 2),
                math.ceil(count / 100),
                fmt(result["theirs"]["per_round"], 1),
                fmt(median(result["latencies"]), 3),
                fmt(worst, 3),
                fmt(result["held"] / 1024, 1),
                fmt(result["theirs"]["held"] / 1024, 1),
            )
        )
        goals.append(
            Goal(
                "watcher",
                f"W = {count}: list requests per interval = ceil(W/100) = {math.ceil(count / 100)}",
                f"{result['per_round']:.2f} (one watcher per deployment: {result['theirs']['per_round']:.1f}, "
                f"{result['theirs']['errors']} failed requests while measured)",
                result["per_round"] == math.ceil(count / 100),
            )
        )
        goals.append(
            Goal(
                "watcher",
                f"W = {count}: event latency <= one interval + 10% ({INTERVAL * GOAL_FACTOR:g} s), max over all",
                f"max {worst:.3f} s = {worst / INTERVAL:.2f} x interval",
                worst <= INTERVAL * GOAL_FACTOR,
            )
        )
    small, large = min(sizes), max(sizes)
    marginal = (results[large]["held"] - results[small]["held"]) / (large - small)
    theirs = (results[large]["theirs"]["held"] - results[small]["theirs"]["held"]) / (large - small)
    goals.append(
        Goal(
            "watcher",
            "memory per watched deployment < 5 KiB",
            f"{marginal / 1024:.2f} KiB (one watcher per deployment: {theirs / 1024:.1f} KiB)",
            marginal < 5 * 1024,
        )
    )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            table(
                [
                    "W",
                    "lists / interval",
                    "ceil(W/100)",
                    "per-deployment watchers: requests / interval",
                    "latency median s",
                    "latency max s",
                    "heap held KiB",
                    "per-deployment watchers: heap KiB",
                ],
                rows,
            ),
            f"Marginal memory per watched deployment (W = {small} to {large}): {marginal / 1024:.2f} KiB with the "
            f"shared watcher, {theirs / 1024:.1f} KiB with one watcher per deployment. Poll interval {INTERVAL:g} s. "
            "A revision that goes live just after a round waits one full interval for the next, plus the list "
            "request that sees it: the latency goal is one interval + 10%, as for the rollout trigger.",
        ]
    )
    publish(
        "watcher_cost",
        "6. Deployment watcher cost",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
