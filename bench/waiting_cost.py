"""Question 2: memory and CPU of 1000 waiting rollout triggers in one process, beside the worker-slot
cost of the poke-mode alternative.

Each repetition is a fresh process (one event loop, as a triggerer): one warm-up trigger runs first, so
imports, the shared poller and its connection pool are already paid for; then 1000 triggers arrive at
once and wait for revisions that stay building. Memory per rollout: RSS growth / N, and (in a second
pass, with ``tracemalloc`` on) Python-heap growth / N, plus the Revision model each rollout keeps once
its first revision check is done (first looks come out of the revision budget, ceil(N/100) at once and
then a tenth of that per round, so only a few are done within the run). CPU per poll cycle: process CPU
time between two completed rounds; a cycle is ceil(N/100) list calls plus the revision budget's calls
(about ceil(N/100)/10).
``revision_check_interval`` keeps the ratio of the defaults to ``poll_interval``. Beside it, in the same
process: the CPU per poll cycle of per-rollout polling (one ``httpx`` GET and ``json`` parse per rollout
per interval, as a hand-written deferrable ``HttpSensor`` loop would do), so the figure is also a ratio
measured in the same run. Poke mode: RSS of a fresh process that imported ``airflow.sdk`` and our
sensor and pokes one rollout; each waiting sensor holds one worker slot and at least one such process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from common import (
    CONN_ENV,
    HOOK_PARAMS,
    Goal,
    bench_data,
    connection_env,
    cpu_seconds,
    default_revision_check_interval,
    deployment_id,
    fmt,
    median,
    parse_options,
    publish,
    revision_id,
    rss_bytes,
    start_emulator,
    table,
)

COUNT = 1000
INTERVAL = 2.0
GOAL_KIB = 25
GOAL_CPU = 0.1
STALL_SECONDS = 120


async def measure(count: int, steady_rounds: int) -> dict[str, Any]:
    """In this process: memory and per-round CPU of ``count`` waiting triggers (after one warm-up trigger)."""
    from airflow_provider.models import Revision
    from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger, active_pollers

    async def wait(index: int) -> None:
        trigger = DeploymentRolloutTrigger(
            deployment_id(index),
            revision_id(index, "building"),
            HOOK_PARAMS,
            poll_interval=INTERVAL,
            revision_check_interval=default_revision_check_interval(INTERVAL),
        )
        async for event in trigger.run():
            raise RuntimeError(f"a waiting rollout ended: {event.payload['message']}")

    tasks: list[asyncio.Task[None]] = []

    async def until(ready: Callable[[], bool], what: str) -> None:
        """Wait for ``ready()``; fail with the poller's state instead of hanging."""
        deadline = time.monotonic() + STALL_SECONDS
        while not ready():
            ended = [task for task in [*warm, *tasks] if task.done()]
            if ended or time.monotonic() > deadline:
                pollers = active_pollers()
                names = (
                    "rounds_started",
                    "rounds_completed",
                    "list_requests",
                    "revision_requests",
                    "revision_endpoint",
                )
                state = {name: getattr(pollers[0], name, None) for name in names} if pollers else "no poller"
                reason = ended[0].exception() if ended and not ended[0].cancelled() else "timeout"
                raise RuntimeError(f"stalled waiting for {what} ({reason}); poller: {state}")
            await asyncio.sleep(0.005)

    async def round_done(number: int) -> None:
        await until(lambda: poller.rounds_completed >= number, f"round {number}")

    async def arrive() -> tuple[list[asyncio.Task[None]], int]:
        """Start ``count`` triggers; return their tasks and the number of the first round that sees them."""
        started = [asyncio.create_task(wait(index)) for index in range(count)]
        await until(lambda: len(poller.subscribers) == count + 1, "the triggers to subscribe")
        return started, poller.rounds_started + 1

    warm = [asyncio.create_task(wait(count))]
    await until(lambda: bool(active_pollers()), "the poller")
    (poller,) = active_pollers()
    await round_done(2)
    gc.collect()
    rss_before = rss_bytes()
    cpu_before = cpu_seconds()
    tasks, first = await arrive()
    await round_done(first)
    first_round_cpu = cpu_seconds() - cpu_before
    rounds: list[tuple[float, int]] = []
    for number in range(first + 1, first + 1 + steady_rounds):
        cpu, revisions = cpu_seconds(), poller.revision_requests
        await round_done(number)
        rounds.append((cpu_seconds() - cpu, poller.revision_requests - revisions))
    gc.collect()
    rss_growth = rss_bytes() - rss_before

    for task in tasks:  # second pass: Python-heap growth with tracemalloc (which slows everything down)
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks = []
    gc.collect()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    tasks, first = await arrive()
    await round_done(first)
    tracemalloc.reset_peak()
    await round_done(first + 1)
    gc.collect()
    traced, peak = tracemalloc.get_traced_memory()
    revision = next(sub.revision for sub in poller.subscribers if sub.revision is not None)
    data, before = revision.model_dump(mode="json"), tracemalloc.get_traced_memory()[0]
    kept = [Revision.model_validate(data) for _ in range(100)]
    revision_bytes = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    tracemalloc.stop()
    for task in [*tasks, *warm]:
        task.cancel()
    await asyncio.gather(*tasks, *warm, return_exceptions=True)
    per_rollout_cpu, per_rollout_errors = await per_rollout_polling_cpu(count, steady_rounds)
    return {
        "rss_per_rollout": rss_growth / count,
        "traced_per_rollout": (traced - traced_before) / count,
        "revision_bytes": revision_bytes,
        "round_peak": peak - traced,
        "first_round_cpu": first_round_cpu,
        "round_cpu": [cpu for cpu, _ in rounds],
        "round_revision_calls": [calls for _, calls in rounds],
        "per_rollout_round_cpu": per_rollout_cpu,
        "per_rollout_errors": per_rollout_errors,
    }


async def per_rollout_polling_cpu(count: int, rounds: int) -> tuple[list[float], int]:
    """CPU per interval of ``count`` independent polling loops (one GET + ``json`` parse per rollout per
    interval, started at spread moments), measured over ``rounds`` intervals once all are polling; and how
    many of their requests failed."""
    import httpx

    conn = json.loads(os.environ[CONN_ENV])
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    headers = {"X-Api-Key": conn["password"]}
    errors: list[int] = []  # indexes of the pollers whose request failed, once per failure
    async with httpx.AsyncClient(base_url=conn["host"], headers=headers, limits=limits, timeout=60) as http:

        async def poll(index: int) -> None:
            await asyncio.sleep(INTERVAL * index / count)
            wanted, awaited = deployment_id(index), revision_id(index, "building")
            while True:
                try:
                    response = await http.get("/v2/deployments", params={"deployment_ids": wanted, "limit": 1})
                    response.raise_for_status()
                except httpx.HTTPError:  # 1000 concurrent pollers can overrun the server: try next interval
                    errors.append(index)
                else:
                    deployment = json.loads(response.content)["resources"][0]
                    if deployment["status"] == "READY" and deployment["active_revision_id"] == awaited:
                        return
                await asyncio.sleep(INTERVAL)

        tasks = [asyncio.create_task(poll(index)) for index in range(count)]
        await asyncio.sleep(INTERVAL * 1.5)
        per_round = []
        for _ in range(rounds):
            cpu = cpu_seconds()
            await asyncio.sleep(INTERVAL)
            per_round.append(cpu_seconds() - cpu)
        failed = [task for task in tasks if task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if failed:
            raise RuntimeError(f"a per-rollout poller ended early: {failed[0].exception()!r}")
    return per_round, len(errors)


def poke_process() -> dict[str, Any]:
    """In this process: import ``airflow.sdk`` and our sensor, poke one waiting rollout, report RSS."""
    import airflow.sdk  # noqa: F401  (what a task process has loaded)

    from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

    sensor = DeploymentRolloutSensor(
        task_id="wait", deployment_id=deployment_id(0), revision_id=revision_id(0, "building"), poll_interval=0.2
    )
    for _ in range(3):
        if sensor.poke({}):
            raise RuntimeError("the rollout should still be waiting")
        time.sleep(0.2)
    return {"rss": rss_bytes()}


def child(mode: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    """Run one measurement in a fresh process and return its JSON answer."""
    command = [sys.executable, __file__, "--child", mode, *args]
    out = subprocess.run(command, check=False, capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode != 0:
        raise RuntimeError(f"the {mode} measurement failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        mode = sys.argv[2]
        result = asyncio.run(measure(int(sys.argv[3]), int(sys.argv[4]))) if mode == "triggers" else poke_process()
        print(json.dumps(result))
        return
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    repetitions, steady_rounds = (1, 3) if options.quick else (3, 3)
    count = 200 if options.quick else COUNT
    emulator = start_emulator(bench_data(count + 1))
    try:
        env = connection_env(emulator.base_url, emulator.api_key)
        runs, pokes = [], []
        for _ in range(repetitions):
            runs.append(child("triggers", env, str(count), str(steady_rounds)))
            pokes.append(child("poke", env)["rss"])
    finally:
        emulator.stop()

    rss_kib = median(run["rss_per_rollout"] for run in runs) / 1024
    traced_kib = median(run["traced_per_rollout"] for run in runs) / 1024
    revision_kib = median(run["revision_bytes"] for run in runs) / 1024
    per_rollout = max(rss_kib, traced_kib) + revision_kib
    cycle_cpu = median(cpu for run in runs for cpu in run["round_cpu"])
    naive_cpu = median(cpu for run in runs for cpu in run["per_rollout_round_cpu"])
    naive_errors = median(run["per_rollout_errors"] for run in runs)
    revision_calls = median(calls for run in runs for calls in run["round_revision_calls"])
    first_cpu = median(run["first_round_cpu"] for run in runs)
    peak_mib = median(run["round_peak"] for run in runs) / 2**20
    poke_mib = median(pokes) / 2**20
    rows = [
        ("memory per waiting rollout: RSS growth / N", f"{rss_kib:.1f} KiB"),
        ("memory per waiting rollout: Python heap growth / N (tracemalloc)", f"{traced_kib:.1f} KiB"),
        ("plus the Revision model kept once its first check is done (tracemalloc)", f"{revision_kib:.1f} KiB"),
        (f"memory for all {count}: RSS growth", f"{rss_kib * count / 1024:.1f} MiB"),
        ("transient Python heap during one round (tracemalloc peak above the live heap)", f"{peak_mib:.1f} MiB"),
        (
            f"CPU per poll cycle, all {count} ({math.ceil(count / 100)} list + {revision_calls:g} revision calls)",
            f"{cycle_cpu:.3f} s",
        ),
        (f"per-rollout polling, same process: CPU per poll cycle, all {count} ({count} GETs)", f"{naive_cpu:.3f} s"),
        ("per-rollout polling: requests that failed (connection errors, 5xx) during its run", f"{naive_errors:g}"),
        ("ratio: CPU per cycle, batched triggers / per-rollout polling", fmt(cycle_cpu / naive_cpu)),
        (f"CPU to start {count} triggers and run their first round", f"{first_cpu:.3f} s"),
        ("poke mode: RSS of one task process (airflow.sdk + our sensor, poking)", f"{poke_mib:.0f} MiB"),
        (
            f"poke mode for {count} rollouts: worker slots / processes / RSS",
            f"{count} / >= {count} / >= {poke_mib * count / 1024:.1f} GiB",
        ),
        ("ratio: RSS of one poke-mode task / memory per waiting trigger", f"{poke_mib * 1024 / per_rollout:,.0f}"),
    ]
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            f"N = {count}, poll interval {INTERVAL:g} s; medians over {repetitions} fresh processes "
            f"({steady_rounds} rounds each after the first).",
            table(["figure", "value"], rows),
            "The poke-mode figure is a lower bound: a real Airflow 3 task also has its supervisor process and the "
            "DAG file's imports, and occupies a worker slot for the whole wait.",
            "**Where a quiet round's CPU went, and where it goes now.** Before (0.196 s per cycle on "
            "2026-11-23): every page was read into 100 Deployment models, up to ceil(N/100) revision calls were "
            "made per round for first looks, and every one of the 1000 triggers was woken to judge an unchanged "
            "deployment. Now the poller's ``DeploymentPageReader`` reads each page's row keys in pydantic-core "
            "and builds a model only for a row whose ``updated_at``, status or revisions changed (none here), "
            "first looks come out of the revision budget (a tenth of the list requests), and a trigger is woken "
            "only for a round with news for it.",
        ]
    )
    if cycle_cpu >= GOAL_CPU:
        body += "\n\n" + (
            f"**Why CPU per cycle misses the goal.** {cycle_cpu:.3f} s per cycle: {math.ceil(count / 100)} list "
            f"requests whose pages are decoded, {revision_calls:g} revision calls, and the rollouts with news. "
            "The goal is absolute CPU time, so it moves with this machine's speed at the moment of the "
            f"run; the ratio measured beside it ({fmt(cycle_cpu / naive_cpu)} of per-rollout polling's CPU) is "
            "the stable comparison."
        )
    if per_rollout >= GOAL_KIB:
        body += "\n\n" + (
            "**Why memory per rollout misses the goal.** Each waiting trigger keeps its last Deployment model, "
            "its Revision model, its queue and its task; the tracemalloc figure is the Python-heap part."
        )
    goals = [
        Goal(
            "waiting",
            f"under {GOAL_KIB} KiB per waiting rollout",
            f"{per_rollout:.1f} KiB (RSS {rss_kib:.1f} / heap {traced_kib:.1f}, + Revision {revision_kib:.1f})",
            per_rollout < GOAL_KIB,
        ),
        Goal("waiting", f"under 0.1 s of CPU per poll cycle for {count}", f"{cycle_cpu:.3f} s", cycle_cpu < GOAL_CPU),
    ]
    publish(
        "waiting_cost",
        "2. Memory and CPU of waiting",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
