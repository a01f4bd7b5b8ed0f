"""Question 6: what a fleet rollout costs: requests, task instances, wall time and memory.

One deferrable ``FleetRolloutOperator`` rolls a git ref out to N codehost deployments (N = 10, 100, 1000)
in waves of 100, as Airflow runs it: ``execute`` on a worker patches a wave and defers; the wave's
``FleetWaveTrigger`` waits on the shared batched poller (driven here in one event loop, as in a
triggerer); ``execute_complete`` resumes on a fresh operator, as on another worker, and goes on with the
next wave. The progress goes to an in-memory ``task_state_store`` that JSON-encodes every value. The
emulator (in a subprocess) builds every new revision in ``BUILD_SECONDS``. Requests are counted by the
emulator; the list and revision requests of each poll round are read from its counters whenever the
poller completes a round. Task instances are counted from the DAG structure: the fleet rollout is one
task; the mapped fan-out (``deploy_fleet_after_build``'s shape) is one mapped task per deployment that
patches and waits, or two (a patch, then a sensor) as in ``rollout_after_build``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import tracemalloc
from datetime import datetime
from typing import Any

from common import (
    LIST_ROUTE,
    REVISION_ROUTE,
    Goal,
    fmt,
    median,
    parse_options,
    publish,
    start_emulator,
    table,
    use_emulator_connection,
)

PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"
SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 100)
WAVE_SIZE = 100
BUILD_SECONDS = 4.0
POLL_INTERVAL = 0.5
REPEATS = {10: 3, 100: 3, 1000: 1}
QUICK_REPEATS = {10: 1, 100: 1}


def fleet_data(count: int) -> dict[str, Any]:
    """``count`` READY codehost deployments ``fleet-0000``..., each serving one revision."""
    return {"deployments": [{"name": f"fleet-{index:04d}", "source": "codehost"} for index in range(count)]}


class MemoryStore:
    """``task_state_store`` kept in memory; values are JSON-encoded as the real store does."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.writes = 0

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self.writes += 1
        self.data[key] = json.dumps(value)


class TaskInstance:
    """What the operator uses of a task instance."""

    try_number = 1

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = json.loads(json.dumps(value))


def operator() -> Any:
    from airflow_provider.operators.deployment_service import FleetRolloutOperator

    return FleetRolloutOperator(
        task_id="fleet",
        filters={"name_contains": "fleet-"},
        repo_ref="v2",
        wave_size=WAVE_SIZE,
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        revision_check_interval=10 * POLL_INTERVAL,
        timeout=120,
    )


async def watch(trigger: Any, admin: Any) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """Run one wave's trigger to its event; per poll round: (list requests, revision requests)."""
    from airflow_provider.triggers.deployment_service import active_pollers

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise RuntimeError("the wave's trigger ended without an event")

    task = asyncio.create_task(first_event())
    rounds: list[tuple[int, int]] = []
    before = await asyncio.to_thread(admin.counters)
    seen = 0
    while not task.done():
        pollers = active_pollers()
        if pollers and pollers[0].rounds_completed > seen:
            seen = pollers[0].rounds_completed
            after = await asyncio.to_thread(admin.counters)
            rounds.append(
                (
                    after.get(LIST_ROUTE, 0) - before.get(LIST_ROUTE, 0),
                    after.get(REVISION_ROUTE, 0) - before.get(REVISION_ROUTE, 0),
                )
            )
            before = after
        await asyncio.sleep(0.005)
    return task.result(), rounds


def roll_out(count: int, admin: Any) -> dict[str, Any]:
    """One deferrable fleet rollout to the end; what it cost."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider.triggers.deployment_service import FleetWaveTrigger

    store, ti = MemoryStore(), TaskInstance()
    context = {"ti": ti, "task_state_store": store}
    admin.reset_requests()
    waves: list[dict[str, Any]] = []
    started = time.perf_counter()
    pending: Any = None
    result: Any = None
    try:
        result = operator().execute(context)
    except TaskDeferred as deferred:
        pending = deferred
    while pending is not None:
        _path, kwargs = pending.trigger.serialize()
        in_flight = len(kwargs["rollouts"])
        wave_started = time.perf_counter()
        event, rounds = asyncio.run(watch(FleetWaveTrigger(**kwargs), admin))
        waves.append({"in_flight": in_flight, "rounds": rounds, "seconds": time.perf_counter() - wave_started})
        try:
            result = getattr(operator(), pending.method_name)(context, event)
            pending = None
        except TaskDeferred as deferred:
            pending = deferred
    wall = time.perf_counter() - started
    counters = admin.counters()
    stamps = [
        datetime.fromisoformat(record["at"]).timestamp()
        for record in admin.requests()
        if record["route"] == PATCH_ROUTE
    ]
    patching = [
        stamps[start : start + WAVE_SIZE][-1] - stamps[start : start + WAVE_SIZE][0]
        for start in range(0, len(stamps), WAVE_SIZE)
    ]
    outcomes = ti.xcoms["fleet_summary"]["counts"]
    if outcomes != {"landed": count}:
        raise RuntimeError(f"the fleet rollout did not land everywhere: {outcomes}")
    return {
        "wall": wall,
        "patches": counters.get(PATCH_ROUTE, 0),
        "lists": counters.get(LIST_ROUTE, 0),
        "revisions": counters.get(REVISION_ROUTE, 0),
        "waves": waves,
        "patching": patching,
        "store": store,
        "table": result,
    }


def memory_per_deployment(store: MemoryStore, count: int) -> tuple[float, float]:
    """Bytes per deployment of the progress as stored (JSON) and as held in memory (rows + result table)."""
    from airflow_provider.decisions.fleet_progress import FleetProgress
    from airflow_provider.tasks.fleet.progress import STATE_KEY

    stored = sum(len(value.encode()) for value in store.data.values())
    header = store.get(STATE_KEY)
    raw = [store.data[f"{STATE_KEY}/wave/{index}"] for index in range(int(header["waves"]))]
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    progress = FleetProgress.from_json(header, [json.loads(text) for text in raw])
    rows = progress.table()
    held = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    del progress, rows
    return stored / count, held / count


def task_instances(count: int) -> tuple[int, int, int]:
    """Task instances of the rollout step for ``count`` deployments, from the DAG structure: the fleet
    operator, one mapped patch-and-wait per deployment, a mapped patch then a mapped sensor."""
    from airflow.sdk import DAG

    from airflow_provider.operators.deployment_service import FleetRolloutOperator, PatchDeploymentOperator
    from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

    ids = [f"00000000-0000-4000-8000-{index:012d}" for index in range(count)]
    with DAG("fleet_shapes", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        FleetRolloutOperator(task_id="fleet", deployment_ids=ids, repo_ref="v2")
        PatchDeploymentOperator.partial(task_id="patch_and_wait", wait_for_rollout=True).expand_kwargs(
            [{"deployment_id": value, "repo_ref": "v2"} for value in ids]
        )
        PatchDeploymentOperator.partial(task_id="patch").expand_kwargs(
            [{"deployment_id": value, "repo_ref": "v2"} for value in ids]
        )
        DeploymentRolloutSensor.partial(task_id="wait").expand_kwargs(
            [{"deployment_id": value, "revision_id": value} for value in ids]
        )

    def instances(task_id: str) -> int:
        """One for a plain task; for a mapped one, one per entry of its literal ``expand_kwargs`` list."""
        task = dag.get_task(task_id)
        if not task.is_mapped:
            return 1
        return len(task.expand_input.value)

    return instances("fleet"), instances("patch_and_wait"), instances("patch") + instances("wait")


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    sizes = QUICK_SIZES if options.quick else SIZES
    repeats = QUICK_REPEATS if options.quick else REPEATS
    rows, wall_rows, goals_patch, goals_list, goals_wall, goals_memory, goals_tis = [], [], [], [], [], [], []
    goals_revision = []
    for count in sizes:
        emulator = start_emulator(fleet_data(count), frozen_clock=False, build_seconds=BUILD_SECONDS, ready_seconds=0.1)
        runs = []
        try:
            use_emulator_connection(emulator)
            for _ in range(repeats[count]):
                runs.append(roll_out(count, emulator.admin))
        finally:
            emulator.stop()
        run = sorted(runs, key=lambda item: item["wall"])[len(runs) // 2]  # the median run
        waves = len(run["waves"])
        rounds = [item for wave in run["waves"] for item in wave["rounds"]]
        in_flight = max(wave["in_flight"] for wave in run["waves"])
        per_round_goal = math.ceil(in_flight / 100)
        list_max = max(item[0] for item in rounds)
        revision_mean = sum(item[1] for item in rounds) / len(rounds)
        revision_max = max(item[1] for item in rounds)
        waiting_lists = sum(item[0] for item in rounds)
        stored, held = memory_per_deployment(run["store"], count)
        fleet_tis, mapped_one, mapped_two = task_instances(count)
        bound = 1.1 * waves * (BUILD_SECONDS + POLL_INTERVAL)
        wall = median(item["wall"] for item in runs)
        wave_seconds = median(wave["seconds"] for wave in run["waves"])
        on_worker = (wall - sum(wave["seconds"] for wave in run["waves"])) / waves
        patching = median(run["patching"])
        rows.append(
            (
                count,
                waves,
                f"{run['patches']} (goal {count})",
                f"{list_max} (goal {per_round_goal})",
                f"{waiting_lists} in {len(rounds)} rounds",
                f"{fmt(revision_mean, 1)} (max {revision_max})",
                run["revisions"],
                f"{fleet_tis} vs {mapped_one} / {mapped_two}",
                fmt((stored + held) / 1024, 2),
            )
        )
        wall_rows.append(
            (
                count,
                waves,
                fmt(wall, 1),
                fmt(bound, 1),
                fmt(wall / bound * 1.1, 2),
                fmt(wave_seconds, 2),
                fmt(on_worker, 2),
                fmt(patching, 2),
                fmt(run["store"].writes / waves, 0),
            )
        )
        # RevisionLookBudget: each wave's poller starts with a full bucket (one round's list requests), then
        # earns a tenth of a call per list request; the looks a change triggers are not drawn from it.
        revision_budget = waves * per_round_goal + math.ceil(len(rounds) * per_round_goal / 10) + 2 * count
        goals_revision.append((count, run["revisions"], revision_budget, run["revisions"] <= revision_budget))
        goals_patch.append((count, run["patches"], run["patches"] == count))
        goals_list.append((count, list_max, list_max <= per_round_goal))
        goals_wall.append((count, wall, bound, wall <= bound))
        goals_memory.append((count, (stored + held) / 1024, (stored + held) / 1024 < 50))
        goals_tis.append((count, fleet_tis, mapped_two, fleet_tis == 1 and mapped_two == 2 * count))
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            f"Waves of {WAVE_SIZE}, emulator build time {BUILD_SECONDS:g} s, poll interval {POLL_INTERVAL:g} s, "
            f"revision-endpoint safety-net timer {10 * POLL_INTERVAL:g} s. Median of "
            + ", ".join(f"{repeats[count]} run(s) for N={count}" for count in sizes)
            + ". Memory: the progress as stored (JSON, every wave) plus the same progress and result table "
            "held in memory (tracemalloc), per deployment.",
            table(
                [
                    "N",
                    "waves",
                    "PATCH requests",
                    "list requests per poll round, max",
                    "list requests while waiting",
                    "revision requests per round, mean",
                    "revision requests in all",
                    "task instances: fleet vs mapped (patch+wait / patch, sensor)",
                    "KiB per deployment",
                ],
                rows,
            ),
            table(
                [
                    "N",
                    "waves",
                    "wall s",
                    "1.1 x waves x (build + interval) s",
                    "ratio to waves x (build + interval)",
                    "median wave wait s",
                    "per wave on the worker s (plan, patches, resume)",
                    "first to last PATCH of a wave s",
                    "task state store writes per wave",
                ],
                wall_rows,
            ),
        ]
    )
    misses = [f"N={count}: {wall:.2f} s > {bound:.2f} s" for count, wall, bound, met in goals_wall if not met]
    body += "\n\n" + WALL_NOTE + "\n\n" + REVISION_NOTE
    if misses:
        body += f" Missed in this run: {'; '.join(misses)}."
    goals = [
        Goal(
            "fleet",
            "PATCH requests = N",
            "; ".join(f"N={count}: {value}" for count, value, _ in goals_patch),
            all(met for *_, met in goals_patch),
        ),
        Goal(
            "fleet",
            "list requests while waiting = ceil(in-flight/100) per interval",
            "; ".join(f"N={count}: max {value} per round" for count, value, _ in goals_list),
            all(met for *_, met in goals_list),
        ),
        Goal(
            "fleet",
            "revision requests within the revision budget: for first looks and the timer ceil(in-flight/100) "
            "at once, then a tenth of that per round; plus the looks a change triggers (at most 2 per rollout "
            "per build)",
            "; ".join(f"N={count}: {value} of {bound}" for count, value, bound, _ in goals_revision),
            all(met for *_, met in goals_revision),
        ),
        Goal(
            "fleet",
            "task instances 1 (vs 2N for the mapped fan-out)",
            "; ".join(f"N={count}: {fleet} vs {mapped}" for count, fleet, mapped, _ in goals_tis),
            all(met for *_, met in goals_tis),
        ),
        Goal(
            "fleet",
            "wall time within 1.1 x waves x (build time + one interval)",
            "; ".join(f"N={count}: {wall:.2f} s of {bound:.2f} s" for count, wall, bound, _ in goals_wall),
            not misses,
        ),
        Goal(
            "fleet",
            "memory per deployment under 50 KiB",
            "; ".join(f"N={count}: {value:.2f} KiB" for count, value, _ in goals_memory),
            all(met for *_, met in goals_memory),
        ),
    ]
    publish(
        "fleet_rollout", "8. Fleet rollout", body, goals, quick=options.quick, seconds=time.perf_counter() - started
    )


REVISION_NOTE = """**Revision requests.** Every rollout's builds move its deployment's row (to ``BUILDING``, to
``DEPLOYING``), and each such change is looked at in the round that sees it, so a failed build is reported
within one interval: about two revision calls per rollout per build, the figure above. Until 2026-11-24 a
rollout whose first look was still waiting in the budget had no record of its row to compare with, so its
changes waited for that turn (N=100: 16 revision calls in all): the calls were fewer, but a failed build in a
wave of 100 could go unreported for up to about 100 rounds (N / ceil(N/100)). First looks and the safety net
now cost a tenth of the list requests; the change looks are the price of reporting every failed build within
one interval."""
WALL_NOTE = """**The worker's share of a wave.** A wave's revisions build in parallel; its PATCH requests go
out ``max_parallel_patches`` at a time (the default, 10, here), each recorded in the task state store as
it is answered (the wave is written after each batch that finishes together, a key only when its value
changed; ``patch_wave`` says why a retry still never patches a deployment twice). The column "first to
last PATCH" is the time from a wave's first PATCH to its last; the column before it is everything the
worker does per wave (plan, patches, records, resume). The bound leaves 10 % of (build + interval) for
that: 0.45 s per wave with builds of 4 s.

How it got there (this machine, 2026-11-23). Sent one at a time, a wave's PATCHes took 1.8 to 2.0 s and
the goal was missed by far (N=100: 6.8 s of 5.0 s; N=1000: 63.2 s of 49.5 s). Ten at a time they took 0.7
to 1.3 s on a machine loaded 4 to 8, still 1.11 to 1.24 times the bound's base. Profiling then found two
costs that were not the network: the emulator settled every deployment of the fleet before answering any
request (4 ms per request with 1000 deployments; it now visits only the deployments that time can still
change, pinned by ``tests/emulator/test_emulator_settle.py``), and the worker serialised a wave's rows with
``dataclasses.asdict``, which deep-copies every value, after each batch of answers (a flat dict now), and
wrote the unchanged header with every batch (now skipped: half the store writes, each a round trip to the
API server on a real worker). With those, a wave's PATCHes take 0.2 s on an idle machine. With two
CPU-bound processes running beside the benchmark they took 0.36 to 0.45 s and the goal still held (N=100:
4.62 s of 4.95 s; N=1000: 47.1 s of 49.5 s). The worker's share does not depend on the build time: with
real builds (minutes) it is a fraction of a per cent of the bound."""


if __name__ == "__main__":
    main()
