"""Question 10: what an analysis costs and how fast it detects a bad revision: requests per interval for a
wave of 100 deployments under a ``TracingProjectCheck`` and under a vector ``MetricQueryCheck``, the
triggerer CPU per measurement round, and the time from an error-rate rise to the analysis failing.

The emulator runs in a subprocess with a real-time clock (its apps serve 5 requests per second each);
Prometheus is ``bench/promql_stub.py``, another process answering the error-rate query from the emulator's
``/metrics`` over the window since its previous scrape. ``run_analysis`` (what the triggerer runs) measures
the wave of 100 deployments in this process for several rounds; requests are counted by the emulator (the
tracing and list routes) and by the stub (queries), CPU is this process's (``time.process_time``) per round
after a warm-up run, beside the CPU of the same requests sent bare. Detection: one deployment's error rate
is raised from 0 to 0.5 through the emulator's control API at a random moment while its analysis runs; the
time is from that call to ``run_analysis`` returning the verdict ``failed``. To the rollback request: a
``PatchDeploymentOperator`` (on the worker, ``rollback_on_failure``) patches one deployment's image (builds
of 1 s), its analysis judges the new revision, whose error rate rises the same way; the time is from that
call to the emulator's logged arrival of the rollback request (``POST .../redeploy``). A deferred task
sends it only once it resumes from the trigger's event, after the triggerer's and scheduler's latency,
which this does not include.
Request sharing is per ``run_analysis`` call (one trigger or one task): the figures are for one analysis
of the whole wave, as a fleet rollout runs it; N patch tasks analysing one deployment each send N times
the vector queries and project lookups, nothing being shared between analyses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from common import (
    BENCH_DIR,
    CONN_ENV,
    HOOK_PARAMS,
    LIST_ROUTE,
    Goal,
    bench_data,
    connection_env,
    fmt,
    median,
    parse_options,
    publish,
    start_emulator,
    table,
)

WAVE = 100
COST_INTERVAL = 1.0
"""Seconds between rounds while counting requests (the count per round does not depend on it)."""
DETECT_INTERVAL = 2.0
"""The analysis interval of the detection runs."""
PATCH_BUILD = 1.0
"""Seconds a patched revision builds (the patch-task runs)."""
POLL_INTERVAL = 1.0
"""The poll interval the detection goal allows on top of one analysis interval."""
ERROR_RATE = 0.5
SESSIONS_ROUTE = "GET /tracing/sessions"
STATS_ROUTE = "POST /tracing/runs/stats"
PROMETHEUS_CONN_ENV = "AIRFLOW_CONN_PROMETHEUS_DEFAULT"
ERROR_RATE_QUERY = (
    "sum by (name) (rate(deployment_request_errors_total[1m])) / sum by (name) (rate(deployment_requests_total[1m]))"
)
CPU_GOAL_RATIO = 1.5
"""Goal: an analysis round's CPU at most this many times the CPU of the bare requests it needs (the same
100 stats requests sent with one plain httpx client and their JSON parsed, in the same process)."""

LOG = logging.getLogger("bench.analysis_cost")


def point_connections(emulator: Any, stub_url: str) -> None:
    """The deployment-service connection at the emulator (its tracing endpoints in ``tracing_base_url``), and
    ``prometheus_default`` at the stub."""
    conn = json.loads(connection_env(emulator.base_url, emulator.api_key)[CONN_ENV])
    conn["extra"] = {"tracing_base_url": emulator.tracing_base_url}
    os.environ[CONN_ENV] = json.dumps(conn)
    os.environ[PROMETHEUS_CONN_ENV] = json.dumps({"conn_type": "http", "host": stub_url})


def start_stub(metrics_url: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``promql_stub.py`` in its own process; return it and its base URL."""
    process = subprocess.Popen(
        [sys.executable, str(BENCH_DIR / "promql_stub.py"), metrics_url], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def stub_queries(stub_url: str) -> int:
    import httpx

    return int(httpx.get(f"{stub_url}/count", timeout=10).json()["queries"])


def targets(emulator: Any, live_since: datetime, count: int = WAVE) -> list[Any]:
    from airflow_provider.analysis import AnalysisTarget

    return [
        AnalysisTarget(
            deployment_id=d["id"],
            name=d["name"],
            revision_id=d["active_revision_id"],
            live_since=live_since,
            custom_url=d["source_config"].get("custom_url"),
        )
        for d in emulator.admin.state()["deployments"][:count]
    ]


def run(analysis: Any, wave: list[Any]) -> dict[str, Any]:
    from airflow_provider.analysis import run_analysis

    return asyncio.run(run_analysis(analysis, wave, hook_params=HOOK_PARAMS, log=LOG))


def cost(emulator: Any, stub_url: str, check: Any, rounds: int) -> dict[str, Any]:
    """Requests and CPU of ``rounds`` rounds of ``check`` over the wave (after a one-round warm-up run)."""
    from airflow_provider.analysis import Analysis

    wave = targets(emulator, datetime.now(timezone.utc) - timedelta(seconds=60))
    run(Analysis(checks=[check], count=1, interval_seconds=0.01), wave)  # warm-up: imports, pools, caches
    emulator.admin.reset_requests()
    queries_before = stub_queries(stub_url)
    analysis = Analysis(checks=[check], count=rounds, interval_seconds=COST_INTERVAL, inconclusive_limit=rounds)
    cpu_before = time.process_time()
    results = run(analysis, wave)
    cpu = time.process_time() - cpu_before
    verdicts = sorted({result["verdict"] for result in results.values()})
    return {
        "rounds": rounds,
        "sessions": emulator.admin.count(SESSIONS_ROUTE),
        "stats": emulator.admin.count(STATS_ROUTE),
        "lists": emulator.admin.count(LIST_ROUTE),
        "queries": stub_queries(stub_url) - queries_before,
        "cpu_per_round": cpu / rounds,
        "verdicts": verdicts,
    }


async def bare_requests(emulator: Any, wave: list[Any]) -> None:
    """The requests a tracing round needs and nothing else: one stats POST per deployment (20 at a time, one
    pooled client), JSON parsed; the baseline of the CPU figures."""
    import httpx

    headers = {"X-Api-Key": emulator.api_key}
    limit = asyncio.Semaphore(20)
    async with httpx.AsyncClient(base_url=emulator.tracing_base_url, headers=headers, timeout=30) as client:
        projects = (await client.get("/sessions", params={"limit": 100})).json()
        ids = {project["name"]: project["id"] for project in projects}

        async def one(target: Any) -> None:
            async with limit:
                body = {"session": [ids[target.name]], "start_time": target.live_since.isoformat(), "is_root": True}
                (await client.post("/runs/stats", json=body)).json()

        await asyncio.gather(*(one(target) for target in wave))


def baseline_cpu(emulator: Any, rounds: int) -> float:
    """CPU seconds per round of :func:`bare_requests` over the wave (after a warm-up round)."""
    wave = targets(emulator, datetime.now(timezone.utc) - timedelta(seconds=60))
    asyncio.run(bare_requests(emulator, wave))
    started = time.process_time()
    for _ in range(rounds):
        asyncio.run(bare_requests(emulator, wave))
    return (time.process_time() - started) / rounds


def detection(emulator: Any, stub_url: str, check: Any, seed: int) -> float:
    """Seconds from the error-rate rise (one deployment, at a random moment) to the analysis failing."""
    from airflow_provider.analysis import Analysis

    target = targets(emulator, datetime.now(timezone.utc))[seed % WAVE]  # a deployment no earlier run raised
    emulator.admin.set_behaviour(target.deployment_id, error_rate=0.0)
    stub_queries(stub_url)
    import httpx

    httpx.get(
        f"{stub_url}/api/v1/query", params={"query": ERROR_RATE_QUERY}, timeout=30
    )  # the stub's window starts now
    rng = random.Random(seed)
    delay = DETECT_INTERVAL + rng.uniform(0.5, 2.5) * DETECT_INTERVAL
    risen: list[float] = []

    def rise() -> None:
        time.sleep(delay)
        risen.append(time.time())  # before the call: the figure can only be too long
        emulator.admin.set_behaviour(target.deployment_id, error_rate=ERROR_RATE)

    thread = threading.Thread(target=rise, daemon=True)
    analysis = Analysis(checks=[check], count=30, interval_seconds=DETECT_INTERVAL, inconclusive_limit=30)
    thread.start()
    result = run(analysis, [target])[target.deployment_id]
    failed_at = time.time()
    thread.join()
    emulator.admin.set_behaviour(target.deployment_id, error_rate=0.0)
    assert result["verdict"] == "failed", result
    return failed_at - risen[0]


class _TaskInstance:
    """What ``PatchDeploymentOperator.execute`` reads of its task instance on the worker."""

    try_number = 1

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def patchable(emulator: Any, runs: int) -> list[dict[str, Any]]:
    """Docker deployments of the wave's second half (no detection run raised them), one per patch run."""
    deployments = emulator.admin.state()["deployments"][WAVE // 2 :]
    return [d for d in deployments if d["source"] in ("internal_docker", "external_docker")][:runs]


def detection_to_rollback(emulator: Any, check: Any, deployment: dict[str, Any], seed: int) -> float:
    """Seconds from the error-rate rise to the rollback request, through a ``PatchDeploymentOperator``.

    The task (on the worker, ``rollback_on_failure``) patches ``deployment``'s image; once the new revision
    is live its analysis runs; the error rate of that revision rises at a random moment; the clock stops at
    the emulator's logged time of the first rollback request (``POST .../redeploy``, or the ``PATCH`` back).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider.analysis import Analysis
    from airflow_provider.operators.deployment_service import PatchDeploymentOperator

    emulator.admin.set_behaviour(deployment["id"], revision_id="next", error_rate=0.0)
    rng = random.Random(seed)
    delay = DETECT_INTERVAL + rng.uniform(0.5, 2.5) * DETECT_INTERVAL
    risen: list[float] = []

    def rise() -> None:
        time.sleep(delay)
        risen.append(time.time())  # before the call: the figure can only be too long
        emulator.admin.set_behaviour(deployment["id"], error_rate=ERROR_RATE)  # the latest (patched) revision

    def verify(live: Any) -> bool:  # runs once the new revision is live, just before the analysis
        threading.Thread(target=rise, daemon=True).start()
        return True

    task = PatchDeploymentOperator(
        task_id="bench_patch",
        deployment_id=deployment["id"],
        image_uri=f"registry.example.com/acme/bench:rise-{seed}",
        wait_for_rollout=True,
        poll_interval=POLL_INTERVAL,
        timeout=300,
        verify=verify,
        analysis=Analysis(checks=[check], count=30, interval_seconds=DETECT_INTERVAL, inconclusive_limit=30),
        rollback_on_failure=True,
    )
    emulator.admin.reset_requests()
    try:
        task.execute({"ti": _TaskInstance()})  # type: ignore[arg-type]
    except AirflowFailException:
        pass
    else:
        raise RuntimeError("the patch task did not fail after its analysis failed")
    rollback = [
        datetime.fromisoformat(item["at"]).timestamp()
        for item in emulator.admin.requests()
        if item["path"].startswith(f"/v2/deployments/{deployment['id']}")
        and (item["method"] == "PATCH" or (item["method"] == "POST" and item["path"].endswith("/redeploy")))
    ]
    after_rise = [at for at in rollback if at > risen[0]]  # the patch itself came before the rise
    assert risen and after_rise, (risen, rollback)
    return min(after_rise) - risen[0]


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    os.environ.update(connection_env("http://127.0.0.1:9", "not-yet"))
    import airflow_provider.analysis  # noqa: F401  (import Airflow before measuring)
    from airflow_provider.analysis import MetricQueryCheck, TracingProjectCheck

    rounds = 2 if options.quick else 5
    repeats = 2 if options.quick else 5
    # Builds of PATCH_BUILD seconds for the patch runs (the wave itself has nothing building).
    emulator = start_emulator(
        bench_data(WAVE, build_seconds=None), frozen_clock=False, build_seconds=PATCH_BUILD, ready_seconds=0.1
    )
    stub, stub_url = start_stub(emulator.metrics_url)
    try:
        point_connections(emulator, stub_url)
        tracing_check = TracingProjectCheck(min_run_count=5)
        metric_check = MetricQueryCheck(query=ERROR_RATE_QUERY, condition="< 0.05")
        tracing = cost(emulator, stub_url, tracing_check, rounds)
        metric = cost(emulator, stub_url, metric_check, rounds)
        baseline = baseline_cpu(emulator, rounds)
        detections = {
            "TracingProjectCheck": [detection(emulator, stub_url, tracing_check, seed) for seed in range(repeats)],
            "MetricQueryCheck (vector)": [
                detection(emulator, stub_url, metric_check, 50 + seed) for seed in range(repeats)
            ],
        }
        to_patch = iter(patchable(emulator, 2 * repeats))
        rollbacks = {
            "TracingProjectCheck": [
                detection_to_rollback(emulator, tracing_check, next(to_patch), 100 + seed) for seed in range(repeats)
            ],
            "MetricQueryCheck (vector)": [
                detection_to_rollback(emulator, metric_check, next(to_patch), 150 + seed) for seed in range(repeats)
            ],
        }
    finally:
        stub.terminate()
        stub.wait(timeout=10)
        emulator.stop()

    per_round = {
        "TracingProjectCheck": (tracing["stats"] / tracing["rounds"], tracing["sessions"], tracing["lists"]),
        "MetricQueryCheck (vector)": (metric["queries"] / metric["rounds"], metric["sessions"], metric["lists"]),
    }
    rows = [
        (
            "TracingProjectCheck",
            fmt(tracing["stats"] / tracing["rounds"], 2) + " stats",
            f"{tracing['sessions']} (once per project)",
            fmt(tracing["lists"] / tracing["rounds"], 2),
            fmt(tracing["cpu_per_round"] * 1000, 1),
            ", ".join(tracing["verdicts"]),
        ),
        (
            "MetricQueryCheck (vector)",
            fmt(metric["queries"] / metric["rounds"], 2) + " queries",
            str(metric["sessions"]),
            fmt(metric["lists"] / metric["rounds"], 2),
            fmt(metric["cpu_per_round"] * 1000, 1),
            ", ".join(metric["verdicts"]),
        ),
    ]
    detection_rows = [
        (
            name,
            len(values),
            fmt(median(values), 2),
            fmt(max(values), 2),
            fmt(max(values) / DETECT_INTERVAL, 2),
            fmt(median(rollbacks[name]), 2),
            fmt(max(rollbacks[name]), 2),
        )
        for name, values in detections.items()
    ]
    assert all(value > 0 for values in [*detections.values(), *rollbacks.values()] for value in values), detections
    bound = math.ceil(WAVE / 100)
    limit = DETECT_INTERVAL + POLL_INTERVAL
    goals = [
        Goal(
            "analysis",
            f"vector MetricQueryCheck, wave of {WAVE}: metric queries per interval = ceil({WAVE}/100) = {bound}",
            fmt(per_round["MetricQueryCheck (vector)"][0], 2),
            per_round["MetricQueryCheck (vector)"][0] == bound,
        ),
        Goal(
            "analysis",
            f"TracingProjectCheck, wave of {WAVE}: at most 1 stats request per deployment per round ({WAVE}) and "
            f"1 project lookup per project for the whole analysis ({WAVE})",
            f"{fmt(per_round['TracingProjectCheck'][0], 2)} stats per round, {tracing['sessions']} lookups in "
            f"{tracing['rounds']} rounds",
            per_round["TracingProjectCheck"][0] <= WAVE and tracing["sessions"] <= WAVE,
        ),
        Goal(
            "analysis",
            f"still-serving check: ceil({WAVE}/100) = {bound} list request per round",
            f"{fmt(tracing['lists'] / tracing['rounds'], 2)} (tracing), {fmt(metric['lists'] / metric['rounds'], 2)} "
            "(metric)",
            tracing["lists"] / tracing["rounds"] <= bound and metric["lists"] / metric["rounds"] <= bound,
        ),
    ]
    for name, values in detections.items():
        goals.append(
            Goal(
                "analysis",
                f"{name}: error-rate rise to analysis failed <= one analysis interval + one poll interval "
                f"({DETECT_INTERVAL:g} + {POLL_INTERVAL:g} s), max over {len(values)} runs",
                f"max {max(values):.2f} s",
                max(values) <= limit,
            )
        )
    for name, values in rollbacks.items():
        goals.append(
            Goal(
                "analysis",
                f"{name}, PatchDeploymentOperator on the worker: error-rate rise to the rollback request <= one "
                f"analysis interval + one poll interval ({DETECT_INTERVAL:g} + {POLL_INTERVAL:g} s), max over "
                f"{len(values)} runs",
                f"max {max(values):.2f} s",
                max(values) <= limit,
            )
        )
    goals.append(
        Goal(
            "analysis",
            f"TracingProjectCheck: triggerer CPU per round <= {CPU_GOAL_RATIO:g} x the CPU of its {WAVE} bare stats "
            "requests (plain httpx, same process)",
            f"{tracing['cpu_per_round'] * 1000:.0f} ms vs {baseline * 1000:.0f} ms = "
            f"{tracing['cpu_per_round'] / baseline:.2f} x",
            tracing["cpu_per_round"] <= CPU_GOAL_RATIO * baseline,
        )
    )
    goals.append(
        Goal(
            "analysis",
            f"vector MetricQueryCheck: triggerer CPU per round below that of {WAVE} bare per-deployment requests",
            f"{metric['cpu_per_round'] * 1000:.0f} ms vs {baseline * 1000:.0f} ms = "
            f"{metric['cpu_per_round'] / baseline:.2f} x",
            metric["cpu_per_round"] < baseline,
        )
    )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            f"Requests and CPU per round, wave of {WAVE} deployments, {tracing['rounds']} rounds:",
            table(
                [
                    "check",
                    "source requests / round",
                    "project lookups (whole analysis)",
                    "still-serving lists / round",
                    "CPU ms / round",
                    "verdicts",
                ],
                rows,
            ),
            f"Baseline, same process: {WAVE} bare stats requests (one pooled httpx client, 20 at a time, JSON "
            f"parsed) cost {baseline * 1000:.1f} ms CPU per round. A round of the analysis adds the still-serving "
            "list (100 deployments parsed into models), the verdicts and one log line per measurement.",
            f"Detection (analysis interval {DETECT_INTERVAL:g} s, error rate 0 -> {ERROR_RATE:g} at a random moment):",
            table(
                [
                    "check",
                    "runs",
                    "to verdict: median s",
                    "max s",
                    "max / interval",
                    "to rollback request: median s",
                    "max s",
                ],
                detection_rows,
            ),
            "The tracing check reads statistics since the revision went live, so a rise is diluted by the runs "
            "before it: the first round after the rise fails when the errors since then already exceed the "
            "threshold (here, a rise to 0.5 against < 0.05). The stub's rate covers one interval (since its "
            "previous scrape); with real Prometheus choose the rate() window at least one analysis interval "
            "long. The revisions here had been live for seconds; after a long bake the tracing statistics "
            "since going live dilute a rise much more (see the analysis guide). After the verdict the patch "
            "and fleet tasks start the rollback at once (on the worker) or when the task resumes from the "
            "trigger's event.",
        ]
    )
    publish(
        "analysis_cost",
        "10. Analysis cost and detection time",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
