"""Question 11: how soon a fleet wave acts on a failed verdict: the time from the failed measurement to that
deployment's rollback request, in a wave of 100 deployments with one bad one.

One ``FleetRolloutOperator`` rolls an image out to 100 ``external_docker`` deployments in one wave (builds of
1 s, ``poll_interval`` 1 s, ``rollback_on_failure``), then analyses the wave: each deployment's tracing error
rate every second for 8 rounds (``TracingProjectCheck``, ``condition="< 0.05"``; the emulator's apps serve
20 requests a second). One deployment's new revision fails half its requests. The emulator runs in a
subprocess with a real-time clock and logs every request it answers; the figures come from that log and from
the bad deployment's analysis result, both on this machine's clock:

- **failed measurement to rollback request**: from the moment the bad deployment's failing statistics
  answer reached the task (noted by a tap on this process's ``httpx`` transport, which sees the request's
  tracing project) to the emulator's logged arrival of its rollback request (``POST .../redeploy``). The
  verdict is acted on once the round's other measurements are in (the wave's 100 statistics requests are
  sent 20 at a time), so this includes the rest of that round;
- **from the round's start** (the measurement's ``at``, taken just before the round's requests are sent: an
  upper bound) and **from the round's last answer** (the last statistics request of the round in the
  emulator's log: what acting on the verdict takes, recording it in the task state store, the rollback's
  read and request) to the same rollback request.

On the worker (not deferrable), and deferrable with each trigger run in this process and the task resumed on
a fresh operator with the event only, as ``dag.test()`` resumes it: the triggerer's and the scheduler's
latency in handing the event to a worker (outside the provider) is not included. Within the budget
(``max_failures=1``) the other 99 deployments go on with their rounds; over it (``max_failures=0``) they are
not analysed further and are rolled back with the wave at once: counted, the statistics requests after the
rollback request (none) and the time to the wave's last rollback request. Before this change the rollback
waited for the wave's remaining rounds: ``(8 - failing round) x 1 s`` more (computed, not measured).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from common import (
    CONN_ENV,
    Goal,
    fmt,
    median,
    parse_options,
    publish,
    start_emulator,
    table,
    use_emulator_connection,
)
from fleet_rollout import MemoryStore, TaskInstance

WAVE = 100
INTERVAL = 1.0
COUNT = 8
POLL_INTERVAL = 1.0
BUILD_SECONDS = 1.0
REQUESTS_PER_SECOND = 20.0
ERROR_RATE = 0.5
OLD_IMAGE = "registry.example.com/acme/bench:1.0"
STATS_ROUTE = "POST /tracing/runs/stats"
GOAL_RATIO = 1.1
"""Goal: the failed measurement to the rollback request within one poll interval + 10%."""


def wave_data() -> dict[str, Any]:
    """``WAVE`` READY ``external_docker`` deployments ``abort-000``..., each serving ``OLD_IMAGE``."""
    return {
        "deployments": [
            {
                "name": f"abort-{index:03d}",
                "source": "external_docker",
                "source_revision_config": {"image_uri": OLD_IMAGE},
            }
            for index in range(WAVE)
        ]
    }


def first_event(trigger: Any) -> dict[str, Any]:
    """The trigger's first event, the trigger rebuilt from its JSON arguments (as the triggerer does)."""
    _path, kwargs = trigger.serialize()
    rebuilt = type(trigger)(**json.loads(json.dumps(kwargs)))

    async def run() -> dict[str, Any]:
        async for event in rebuilt.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise RuntimeError(f"{type(trigger).__name__} ended without an event")

    return asyncio.run(run())


class StatsTap:
    """Notes when the statistics answers of one tracing project reach this process (the provider's async
    clients send them through ``httpx.AsyncHTTPTransport``): the moment that deployment's measurement is taken.

    :param project_id: the tracing project whose answers are noted.
    """

    def __init__(self, project_id: str) -> None:
        self.project_id = project_id
        self.answered: list[float] = []

    @contextmanager
    def installed(self) -> Iterator[None]:
        import httpx

        send = httpx.AsyncHTTPTransport.handle_async_request
        tap = self

        async def handle_async_request(transport: Any, request: Any) -> Any:
            response = await send(transport, request)
            if request.url.path.endswith("/runs/stats") and tap.project_id.encode() in request.content:
                tap.answered.append(time.time())
            return response

        httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign]
        try:
            yield
        finally:
            httpx.AsyncHTTPTransport.handle_async_request = send  # type: ignore[method-assign]


def project_id(emulator: Any, name: str) -> str:
    """The id of the tracing project the emulator keeps for deployment ``name``."""
    import httpx

    answer = httpx.get(
        f"{emulator.tracing_base_url}/sessions",
        params={"name": name, "limit": 1},
        headers={"X-Api-Key": emulator.api_key},
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()[0]["id"])


def roll_out(
    emulator: Any, ids: list[str], bad: str, *, deferrable: bool, max_failures: int, tag: str
) -> dict[str, Any]:
    """One fleet rollout to its end (each resume on a fresh operator given the event only); its figures."""
    from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

    from airflow_provider.analysis import Analysis, TracingProjectCheck
    from airflow_provider.operators.deployment_service import FleetRolloutOperator

    def operator() -> Any:
        return FleetRolloutOperator(
            task_id="fleet",
            deployment_ids=ids,
            image_uri=f"registry.example.com/acme/bench:{tag}",
            wave_size=WAVE,
            max_failures=max_failures,
            max_parallel_patches=20,
            poll_interval=POLL_INTERVAL,
            timeout=120,
            rollback_on_failure=True,
            deferrable=deferrable,
            analysis=Analysis(
                checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)],
                interval_seconds=INTERVAL,
                count=COUNT,
                preflight=False,  # the bench times the abort; the serving revisions have no traffic history
            ),
        )

    emulator.admin.set_behaviour(
        bad, revision_id="next", error_rate=ERROR_RATE, requests_per_second=REQUESTS_PER_SECOND
    )
    tap = StatsTap(project_id(emulator, emulator.admin.deployment(bad)["name"]))
    emulator.admin.reset_requests()
    ti = TaskInstance()
    context = {"ti": ti, "task_state_store": MemoryStore()}
    method, event = "execute", None
    with tap.installed():
        while True:
            try:
                task = operator()
                result = task.execute(context) if event is None else getattr(task, method)(context, event)
                break
            except TaskDeferred as deferred:
                event, method = first_event(deferred.trigger), deferred.method_name
            except AirflowFailException as err:
                result = err
                break
    table_rows = result if isinstance(result, list) else ti.xcoms["return_value"]
    rows = {row["deployment_id"]: row for row in table_rows}
    failed = ti.xcoms["fleet_analysis"][rows[bad]["name"]]
    if rows[bad]["outcome"] != "rolled_back" or failed["verdict"] != "failed":
        raise RuntimeError(f"the bad deployment was not failed and rolled back: {rows[bad]}")
    measured = datetime.fromisoformat(failed["measurements"][-1]["at"]).timestamp()
    failing_round = int(failed["measurements"][-1]["round"])
    log = [(datetime.fromisoformat(item["at"]).timestamp(), item) for item in emulator.admin.requests()]

    def changes(deployment_id: str) -> list[float]:
        return [
            at
            for at, item in log
            if item["path"].startswith(f"/v2/deployments/{deployment_id}") and item["method"] in ("PATCH", "POST")
        ]

    rollback = changes(bad)[1]  # its rollout's PATCH, then its rollback
    round_answers = [at for at, item in log if item["route"] == STATS_ROUTE and measured <= at <= rollback]
    answered = max(at for at in tap.answered if at <= rollback)  # the failing answer: its last before the rollback
    with_wave = [
        changes(deployment_id)[1] for deployment_id in ids if deployment_id != bad and len(changes(deployment_id)) > 1
    ]
    return {
        "to_rollback": rollback - answered,
        "from_round_start": rollback - measured,
        "from_round_end": rollback - max(round_answers),
        "failing_round": failing_round,
        "stats_after": sum(1 for at, item in log if item["route"] == STATS_ROUTE and at > rollback),
        "with_wave": len(with_wave),
        "to_last_rollback": (max(with_wave) - measured) if with_wave else None,
        "counts": ti.xcoms["fleet_summary"]["counts"],
    }


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    emulator = start_emulator(wave_data(), frozen_clock=False, build_seconds=BUILD_SECONDS, ready_seconds=0.1)
    use_emulator_connection(emulator)
    conn = json.loads(os.environ[CONN_ENV])
    conn["extra"] = {"tracing_base_url": emulator.tracing_base_url}  # the emulator's tracing endpoints
    os.environ[CONN_ENV] = json.dumps(conn)
    repeats = 1 if options.quick else 3
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        emulator.admin.add_behaviour_rule(image_uri="*", requests_per_second=REQUESTS_PER_SECOND)
        ids = [item["id"] for item in emulator.admin.state()["deployments"]]
        number = 0
        for budget, max_failures in (("within the budget (max_failures=1)", 1), ("over it (max_failures=0)", 0)):
            for path, deferrable in (("worker", False), ("deferrable", True)):
                for _ in range(repeats):
                    bad = ids[(37 * number + 11) % WAVE]
                    figures = roll_out(
                        emulator, ids, bad, deferrable=deferrable, max_failures=max_failures, tag=f"run-{number}"
                    )
                    runs.setdefault((budget, path), []).append(figures)
                    number += 1
    finally:
        emulator.stop()

    rows = []
    goals = []
    limit = GOAL_RATIO * POLL_INTERVAL
    for (budget, path), taken in runs.items():
        to_rollback = [item["to_rollback"] for item in taken]
        rows.append(
            (
                budget,
                path,
                len(taken),
                ", ".join(str(item["failing_round"]) for item in taken),
                fmt(median(to_rollback), 2),
                fmt(max(to_rollback), 2),
                fmt(max(item["from_round_start"] for item in taken), 2),
                fmt(max(item["from_round_end"] for item in taken), 2),
                fmt(max((COUNT - item["failing_round"]) * INTERVAL for item in taken), 0),
                ", ".join(str(item["stats_after"]) for item in taken),
                ", ".join(
                    f"{item['with_wave']} in {fmt(item['to_last_rollback'], 1)} s" if item["with_wave"] else "-"
                    for item in taken
                ),
            )
        )
        goals.append(
            Goal(
                "fleet_abort",
                f"wave of {WAVE}, one bad, {budget}, {path}: failed measurement to its rollback request <= one poll "
                f"interval + 10% ({limit:g} s), max over {len(taken)} runs",
                f"max {max(to_rollback):.2f} s",
                max(to_rollback) <= limit,
            )
        )
        if budget.startswith("over"):
            goals.append(
                Goal(
                    "fleet_abort",
                    f"wave of {WAVE}, one bad, {budget}, {path}: the rest of the wave not analysed after the bad "
                    f"one's rollback (0 statistics requests) and all {WAVE - 1} rolled back with it",
                    f"{', '.join(str(item['stats_after']) for item in taken)} requests; "
                    f"{', '.join(str(item['with_wave']) for item in taken)} rolled back",
                    all(item["stats_after"] == 0 and item["with_wave"] == WAVE - 1 for item in taken),
                )
            )
    body = "\n\n".join(
        [
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            table(
                [
                    "budget",
                    "path",
                    "runs",
                    "failing round",
                    "failed measurement to rollback request: median s",
                    "max s",
                    "from the round's start: max s",
                    "from the round's last answer: max s",
                    "before: waited a further s (computed)",
                    "statistics requests after it",
                    "rolled back with the wave (to the last request)",
                ],
                rows,
            ),
            "The round that fails the bad deployment measures the other 99 too (100 statistics requests, 20 at a "
            "time): its verdict is acted on once that round's answers are in, so the figure follows the round's "
            "length and the machine's load (in development runs at a load average of 7.5 on these 2 cores, with "
            "other jobs running, a round took 2 to 3.6 s and the figure reached 3.3 s; acting on the verdict "
            "stayed under 0.3 s). Deferrable, add the time Airflow takes to resume the task on a worker after "
            "the trigger's event (the triggerer's and the scheduler's latency); the rest of the wave then goes "
            "on in a new trigger from the next round.",
        ]
    )
    publish(
        "fleet_abort",
        "11. Fleet: failed verdict to rollback",
        body,
        goals,
        quick=options.quick,
        seconds=time.perf_counter() - started,
    )


if __name__ == "__main__":
    main()
