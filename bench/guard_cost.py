"""Question 13: what the guard after landing costs, and how fast it finds a regression.

Cost: one ``DeploymentGuardTrigger`` guards G landed revisions (the emulator in a subprocess, real-time clock; the
guard records in an in-memory store, as the Variables hold them), each judged by a tracing check every interval.
After the first measuring round, for a few rounds: list requests per look of the poller, statistics requests per
round the trigger judged (the emulator's counters), the trigger's CPU per round (this process's CPU time, the
emulator's not counted) and the Python heap it holds per guarded revision (``tracemalloc``, between G = 10 and the
largest G), beside what the deployment watcher costs (section 6: the same batched list, without the measuring).

Detection: a guarded revision whose error rate doubled after it landed (against a baseline of 20,000 runs at the
same rate as before), judged by ``RateTest()`` with the code the guard runs
(:func:`~airflow_provider.analysis.replay.replay`: the judge's own bench does the same) at 10 runs a second and a
round a minute, in windows of 60 rounds: how long after the regression the guard fails it (median and the 95th
percentile over the trials; one window's sequential tests).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from typing import Any

from common import (
    CONN_ENV,
    LIST_ROUTE,
    Goal,
    bench_data,
    connection_env,
    fmt,
    parse_options,
    publish,
    start_emulator,
    table,
)

INTERVAL = 15.0
"""Seconds between two looks, and between two measuring rounds of each guarded revision."""
MEASURED_ROUNDS = 3
STATS_ROUTE = "POST /tracing/runs/stats"
TRAFFIC = 10.0
"""Runs a second a guarded revision serves (detection)."""
ROUND_SECONDS = 60.0
WINDOW_ROUNDS = 60
BASELINE_RUNS = 20_000
RATES = (0.005, 0.03, 0.08)


def records_for(emulator: Any, count: int) -> dict[str, Any]:
    """A guard record (Variable key -> JSON) for each of the emulator's deployments, landed now, for an hour."""
    from airflow_provider.analysis import Analysis, TracingProjectCheck
    from airflow_provider.analysis.guard import GuardRecord, guard_key

    analysis = Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.5", min_run_count=1, name="errors")],
        interval_seconds=INTERVAL,
        count=1000,
    )
    now = datetime.now(timezone.utc) - timedelta(seconds=1)
    records = {}
    for item in emulator.admin.state()["deployments"][:count]:
        if not item.get("active_revision_id"):
            continue
        record = GuardRecord(
            deployment_id=item["id"],
            deployment_name=item["name"],
            revision_id=item["active_revision_id"],
            previous_revision_id=None,
            conn_id="deployment_service_default",
            landed_at=now,
            until=now + timedelta(hours=1),
            analysis=analysis.to_json(),
        )
        records[guard_key("deployment_service_default", item["id"])] = json.loads(record.model_dump_json())
    return records


async def guard(emulator: Any, records: dict[str, Any]) -> dict[str, Any]:
    """Run one guard over ``records``; its requests, CPU and heap per round once every revision is measured."""
    from airflow_provider.triggers.deployment_service import DeploymentGuardTrigger, active_pollers
    from airflow_provider.triggers.guard import MemoryGuardStore

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    trigger = DeploymentGuardTrigger(poll_interval=INTERVAL)
    trigger.store = MemoryGuardStore(records)

    async def run() -> None:
        async for _event in trigger.run():
            pass

    task = asyncio.create_task(run())
    deadline = time.monotonic() + 600
    while trigger.stats["measured"] < len(records) and time.monotonic() < deadline:  # every one measured once
        await asyncio.sleep(0.05)
    (poller,) = active_pollers()
    # Rounds the trigger finished judging (the poller's own count runs ahead of the measuring it starts).
    rounds, lists, polled = trigger.stats["rounds"], poller.list_requests, poller.rounds_completed
    measured, cpu = trigger.stats["measured"], time.process_time()
    stats_before = emulator.admin.count(STATS_ROUTE)
    while trigger.stats["rounds"] < rounds + MEASURED_ROUNDS:
        await asyncio.sleep(0.05)
    done = trigger.stats["rounds"] - rounds
    result = {
        "lists": (poller.list_requests - lists) / max(1, poller.rounds_completed - polled),  # per look
        "stats": (emulator.admin.count(STATS_ROUTE) - stats_before) / done,
        "measured": (trigger.stats["measured"] - measured) / done,
        "cpu": (time.process_time() - cpu) / done,
    }
    await asyncio.sleep(INTERVAL / 2)
    result["held"] = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return result


def measure(count: int) -> dict[str, Any]:
    emulator = start_emulator(bench_data(count, build_seconds=None))
    try:
        env = connection_env(emulator.base_url, emulator.api_key)
        conn = json.loads(env[CONN_ENV])
        conn["extra"] = {"tracing_base_url": f"{emulator.base_url.rstrip('/')}/tracing"}
        os.environ[CONN_ENV] = json.dumps(conn)
        records = records_for(emulator, count)
        result = asyncio.run(guard(emulator, records))
        result["guarded"] = len(records)
        result["emulator_lists"] = emulator.admin.count(LIST_ROUTE)
    finally:
        emulator.stop()
    return result


def detection(rate: float, trials: int, seed: int) -> tuple[list[float], int]:
    """Minutes from a doubled error rate to the guard's failed verdict, per detected trial, and how many trials."""
    from airflow_provider.analysis import Analysis, TracingProjectCheck
    from airflow_provider.analysis.rate_test import RateTest
    from airflow_provider.analysis.replay import replay

    rng = random.Random(seed)
    analysis = Analysis(
        checks=[TracingProjectCheck(rate_test=RateTest(), name="errors")],
        interval_seconds=ROUND_SECONDS,
        count=WINDOW_ROUNDS,
    )
    per_round = int(TRAFFIC * ROUND_SECONDS)
    found = []
    for _ in range(trials):
        base_errors = sum(rng.random() < rate for _ in range(BASELINE_RUNS))
        runs = errors = 0
        rounds = []
        for _round in range(WINDOW_ROUNDS):
            runs += per_round
            errors += sum(rng.random() < 2 * rate for _ in range(per_round))
            rounds.append({"run_count": runs, "error_count": errors})
        result = replay(analysis, baseline={"run_count": BASELINE_RUNS, "error_count": base_errors}, rounds=rounds)
        if result.verdict == "failed" and result.decided_round is not None:
            found.append(result.decided_round * ROUND_SECONDS / 60)
    return found, trials


def quantile(values: list[float], share: float, trials: int) -> str:
    """The ``share`` quantile over ``trials`` (undetected trials never come), or "not within the window"."""
    index = math.ceil(share * trials) - 1
    ordered = sorted(values)
    return f"{ordered[index]:.0f} min" if index < len(ordered) else f"not within {WINDOW_ROUNDS} min"


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    sizes = (10, 100) if options.quick else (10, 1000)
    os.environ.update(connection_env("http://127.0.0.1:9", "not-yet"))
    import airflow_provider.triggers.deployment_service  # noqa: F401  (import Airflow before measuring)

    results = {count: measure(count) for count in sizes}
    rows, goals = [], []
    for result in results.values():
        guarded = result["guarded"]
        rows.append(
            (
                guarded,
                fmt(result["lists"], 2),
                math.ceil(guarded / 100),
                fmt(result["stats"], 1),
                fmt(result["measured"], 1),
                fmt(result["cpu"] * 1000, 1),
                fmt(result["held"] / 1024, 1),
            )
        )
        goals.append(
            Goal(
                "guard",
                f"G = {guarded}: list requests per interval <= ceil(G/100) = {math.ceil(guarded / 100)}",
                f"{result['lists']:.2f}",
                result["lists"] <= math.ceil(guarded / 100) + 1e-9,
            )
        )
        goals.append(
            Goal(
                "guard",
                f"G = {guarded}: statistics requests per interval <= G",
                f"{result['stats']:.1f} ({result['measured']:.1f} revisions measured a round)",
                result["stats"] <= guarded + 1e-9,
            )
        )
    small, large = min(results), max(results)
    guarded_small, guarded_large = results[small]["guarded"], results[large]["guarded"]
    marginal = (results[large]["held"] - results[small]["held"]) / max(1, guarded_large - guarded_small)
    cpu_each = results[large]["cpu"] / max(1, results[large]["measured"])
    goals.append(
        Goal(
            "guard",
            "memory per guarded revision < 50 KiB",
            f"{marginal / 1024:.1f} KiB",
            marginal < 50 * 1024,
        )
    )
    trials = 20 if options.quick else 100
    detect_rows = []
    for index, rate in enumerate(RATES):
        found, total = detection(rate, trials, seed=42 + index)
        median_text = f"{statistics.median(found):.0f} min" if found else "-"
        detect_rows.append(
            (
                f"{rate:.1%} -> {2 * rate:.1%}",
                f"{len(found)}/{total}",
                median_text,
                quantile(found, 0.95, total),
            )
        )
        if rate >= 0.03:
            goals.append(
                Goal(
                    "guard",
                    f"a doubled error rate from {rate:.0%} found within one {WINDOW_ROUNDS}-round window in >= 95 % of "
                    "trials",
                    f"{len(found)}/{total}",
                    len(found) >= 0.95 * total,
                )
            )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            table(
                [
                    "G guarded",
                    "lists / interval",
                    "ceil(G/100)",
                    "stats requests / interval",
                    "measured / interval",
                    "CPU ms / interval",
                    "heap held KiB",
                ],
                rows,
            ),
            f"Marginal heap per guarded revision (G = {guarded_small} to {guarded_large}): {marginal / 1024:.1f} KiB "
            "(beside the deployment watcher's memory per watched deployment, section 6: the guard adds each "
            "revision's judge, its target and its latest measurements). CPU per measured revision: "
            f"{cpu_each * 1000:.2f} ms a "
            f"round (the statistics request, its JSON, the judge: not profiled apart). Poll interval {INTERVAL:g} s; "
            "the list requests are the shared batched poller's, the same as the rollout triggers' and the watchers'.",
            f"Detection ({trials} trials each; {TRAFFIC:g} runs/s, a round every {ROUND_SECONDS:g} s, windows of "
            f"{WINDOW_ROUNDS} rounds, `RateTest()` at its defaults):\n\n"
            + table(["error rate", "detected", "median", "95 % detected by"], detect_rows),
        ]
    )
    publish(
        "guard_cost",
        "13. Guard after landing: cost and detection",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
