"""Question 9: what a page of the Rollouts view costs the service, for N = 10, 100 and 1000 deployments, with
one viewer and with ten.

The view's FastAPI app runs in this process as the API server mounts it, behind Airflow's real auth
dependency (the simple auth manager; a JWT per viewer); the emulator runs in a subprocess with N ``READY``
deployments and counts the requests it answers. A page load is what the Deployments page's script asks:
``GET api/connections`` (no service request) and ``GET api/deployments`` (the batched list, pages of 100).
Ten viewers load the page at once (a thread each) sharing the app's cache (10 s), then again with the
cache's lifetime set to 0 (every viewer fetches for itself), the baseline. "Ten people watching for a
minute" replays ten viewers reloading every 5 s for 60 s on a simulated clock (no real waiting).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common import (
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
    use_emulator_connection,
)

SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 100)
VIEWERS = 10
WATCH_SECONDS = 60.0
RELOAD_EVERY = 5.0


class Clock:
    """A monotonic clock the benchmark moves (the cache's notion of time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def expected_lists(count: int) -> int:
    """List requests of one listing of ``count`` deployments: pages of 100, the last one short (the service
    has no total, so a listing of exactly 100 needs a second, empty page)."""
    return count // 100 + 1


def prepare_airflow() -> None:
    """A migrated metadata database and the simple auth manager with one user per viewer: before anything
    imports Airflow (a process that opened the database before its migration keeps missing its tables)."""
    os.environ.update(connection_env("http://127.0.0.1:9", "not-used-yet"))  # the home; each size re-points it
    home = os.environ["AIRFLOW_HOME"]
    os.environ.update(
        {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"viewer{i}:op" for i in range(VIEWERS)),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
    )
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=300)


def clients(reader: Any) -> list[Any]:
    """One test client per viewer (each with its own JWT), all on one app: the API server's one process."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_provider.plugins.rollouts.app import create_app
    from airflow_provider.plugins.rollouts.plugin import URL_PREFIX

    manager = init_auth_manager()
    app = FastAPI()
    app.mount(URL_PREFIX, create_app(reader))
    made = []
    for index in range(VIEWERS):
        client = TestClient(app, base_url="http://airflow.local")
        client.cookies.set("_token", manager.generate_jwt(SimpleAuthManagerUser(username=f"viewer{index}", role="op")))
        made.append(client)
    return made


def page_load(client: Any) -> float:
    """What the Deployments page asks when it opens; returns its wall time."""
    started = time.perf_counter()
    for path in ("api/connections", "api/deployments"):
        answer = client.get(f"/deployment-service/{path}")
        if answer.status_code != 200:
            raise SystemExit(f"GET {path} answered {answer.status_code}: {answer.text[:300]}")
    return time.perf_counter() - started


def lists(emulator: Any) -> int:
    return int(emulator.admin.count(LIST_ROUTE))


def measure(count: int, repetitions: int) -> dict[str, Any]:
    """Requests and times of one viewer, ten at once (cache, no cache), and ten watching for a minute."""
    from airflow_provider.plugins.rollouts.listing import LISTING_TTL_SECONDS, ServiceReader

    emulator = start_emulator(bench_data(count, build_seconds=None))
    try:
        use_emulator_connection(emulator)
        result: dict[str, Any] = {"count": count}
        cold, warm = [], []
        for _ in range(repetitions):
            viewer = clients(ServiceReader())[0]
            emulator.admin.reset_requests()
            cold.append(page_load(viewer))
            result["one"] = lists(emulator)
            warm.append(page_load(viewer))
            result["one_again"] = lists(emulator)
        result["cold_s"], result["warm_s"] = median(cold), median(warm)

        for name, ttl in (("ten_cached", LISTING_TTL_SECONDS), ("ten_uncached", 0.0)):
            viewers = clients(ServiceReader(ttl=ttl))
            emulator.admin.reset_requests()
            with ThreadPoolExecutor(max_workers=VIEWERS) as pool:
                times = list(pool.map(page_load, viewers))
            result[name] = lists(emulator)
            result[f"{name}_s"] = max(times)

        clock = Clock()
        viewers = clients(ServiceReader(clock=clock))
        emulator.admin.reset_requests()
        loads = 0
        while clock.now < WATCH_SECONDS:
            for viewer in viewers:
                page_load(viewer)
                loads += 1
            clock.now += RELOAD_EVERY
        result["watch_loads"], result["watch_lists"] = loads, lists(emulator)
        return result
    finally:
        emulator.stop()


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    sizes = QUICK_SIZES if options.quick else SIZES
    repetitions = 2 if options.quick else 5
    prepare_airflow()
    results = [measure(count, repetitions) for count in sizes]
    from airflow_provider.plugins.rollouts.listing import LISTING_TTL_SECONDS

    rows = []
    for r in results:
        rows.append(
            (
                r["count"],
                f"{r['one']} (goal {expected_lists(r['count'])})",
                r["one_again"],
                f"{r['ten_cached']} (one viewer's: {r['one']})",
                r["ten_uncached"],
                f"{r['watch_lists']} for {r['watch_loads']} page loads",
                fmt(r["cold_s"], 3),
                fmt(r["warm_s"], 3),
                fmt(r["ten_cached_s"], 3),
            )
        )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            f"Cache lifetime {LISTING_TTL_SECONDS:g} s. Times: median of {repetitions} page loads (the app in this "
            "process, the emulator in a subprocess, loopback), the slowest of the ten concurrent ones.",
            table(
                [
                    "N",
                    "list requests, one page load",
                    "in all after the same viewer reloads within 10 s",
                    "ten viewers at once, shared cache",
                    "ten viewers at once, no cache",
                    f"ten viewers reloading every {RELOAD_EVERY:g} s for {WATCH_SECONDS:g} s",
                    "page load s (cold)",
                    "page load s (cached)",
                    "slowest of ten at once s",
                ],
                rows,
            ),
            "The list endpoint has no total count and no end flag: a listing ends at a page shorter than 100, so "
            "N deployments cost N // 100 + 1 requests (ceil(N/100), plus one when N is a multiple of 100). The "
            "cache is per API server process: with several API server workers each has its own.",
        ]
    )
    goals = [
        Goal(
            "rollouts_view",
            "list requests per page load = N // 100 + 1 (ceil(N/100) pages of 100; +1 at a multiple of 100)",
            "; ".join(f"N={r['count']}: {r['one']}" for r in results),
            all(r["one"] == expected_lists(r["count"]) for r in results),
        ),
        Goal(
            "rollouts_view",
            "ten viewers at once cost one viewer's list requests (shared cache)",
            "; ".join(f"N={r['count']}: {r['ten_cached']} vs {r['ten_uncached']} without the cache" for r in results),
            all(r["ten_cached"] == r["one"] for r in results),
        ),
        Goal(
            "rollouts_view",
            f"ten viewers watching for {WATCH_SECONDS:g} s cost one listing per cache lifetime",
            "; ".join(f"N={r['count']}: {r['watch_lists']} requests for {r['watch_loads']} loads" for r in results),
            all(
                r["watch_lists"] == expected_lists(r["count"]) * round(WATCH_SECONDS / LISTING_TTL_SECONDS)
                for r in results
            ),
        ),
    ]
    publish(
        "rollouts_view",
        "9. Rollouts view: requests per page load",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
