"""Run the reliability suite and render ``docs/RELIABILITY.md`` from what it recorded.

    python scripts/reliability_report.py                 # run pytest tests/reliability, write the report
    python scripts/reliability_report.py --from-json F   # render an earlier run's JSON only
    python scripts/reliability_report.py -- -k chaos     # extra pytest arguments after --

The tests record their figures through the session fixture ``report`` (``tests/reliability/conftest.py``)
into the JSON file named by ``RELIABILITY_REPORT_JSON``; nothing in the rendered file is typed by hand
except the section introductions below. Exits with pytest's exit status (the report is written anyway,
listing the failing tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "docs" / "RELIABILITY.md"
REPORT_ENV = "RELIABILITY_REPORT_JSON"

ENDPOINT_COLUMNS = (
    ("list providers", "sync"),
    ("list repos", "sync"),
    ("list deployments", "sync"),
    ("list deployments", "async"),
    ("get deployment (via list)", "sync"),
    ("patch", "sync"),
    ("patch", "async"),
)


# ----------------------------------------------------------------------------------------- running
def run_suite(pytest_args: list[str]) -> tuple[dict[str, Any], int, float]:
    """Run ``pytest tests/reliability`` recording into a temporary JSON file; return (data, exit, seconds)."""
    with tempfile.TemporaryDirectory(prefix="reliability-") as workdir:
        target = Path(workdir) / "report.json"
        env = {**os.environ, REPORT_ENV: str(target)}
        command = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider", *pytest_args]
        print("$", " ".join(command), flush=True)
        started = time.monotonic()
        exit_status = subprocess.call(command, cwd=REPO_ROOT, env=env)
        seconds = time.monotonic() - started
        if not target.exists():
            raise SystemExit(f"pytest wrote no report (exit status {exit_status})")
        data: dict[str, Any] = json.loads(target.read_text())
    return data, exit_status, seconds


# --------------------------------------------------------------------------------------- rendering
def cell(value: Any) -> str:
    """One Markdown table cell."""
    if value is None:
        return "-"
    if isinstance(value, list):
        value = ", ".join(str(item) for item in value) or "none"
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def table(rows: list[dict[str, Any]], columns: list[str] | None = None, headers: dict[str, str] | None = None) -> str:
    """A Markdown table of ``rows`` (columns in first-seen order unless given)."""
    if not rows:
        return "_(no rows recorded: the tests of this section did not run)_\n"
    if columns is None:
        columns = []
        for row in rows:
            columns += [key for key in row if key != "table" and key not in columns]
    names = [(headers or {}).get(column, column.replace("_", " ")) for column in columns]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def short(text: str, limit: int = 170) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def matrix_cell(row: dict[str, Any]) -> str:
    """``ok, 2 req, 1 wait (+1 rev)`` or ``ServerError, 3 req, 2 waits``."""
    outcome = row["outcome"]
    verdict = "ok" if outcome == "ok" else outcome.split(":", 1)[0]
    waits = row["waits"] or []
    parts = [f"**{verdict}**" if verdict == "ok" else verdict, f"{row['requests']} req"]
    if row.get("read_backs"):
        parts.append(f"{row['read_backs']} read-back")
    if waits:
        shown = f"{waits[0]:g} s" if len(waits) == 1 else f"{len(waits)} waits"
        parts.append(f"wait {shown}" if len(waits) == 1 else shown)
    if row.get("new_revisions") is not None:
        parts.append(f"+{row['new_revisions']} rev")
    return ", ".join(parts)


def fault_matrix(rows: list[dict[str, Any]]) -> str:
    by_mode: dict[str, dict[str, dict[tuple[str, str], dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    faults: list[str] = []
    for row in rows:
        by_mode[row["mode"]][row["fault"]][(row["endpoint"], row["twin"])] = row
        if row["fault"] not in faults:
            faults.append(row["fault"])
    columns = [column for column in ENDPOINT_COLUMNS if any(column in f for m in by_mode.values() for f in m.values())]
    out = []
    for mode, title in (("once", "Fault injected once"), ("every request", "Fault on every request")):
        if mode not in by_mode:
            continue
        header = ["fault"] + [f"{name}{' (async)' if twin == 'async' else ''}" for name, twin in columns]
        lines = [f"**{title}**\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for fault in faults:
            cells = [by_mode[mode][fault].get(column) for column in columns]
            lines.append("| " + " | ".join([fault] + [matrix_cell(c) if c else "-" for c in cells]) + " |")
        out.append("\n".join(lines) + "\n")
    samples = [
        {"fault": row["fault"], "endpoint": row["endpoint"], "error": short(row["outcome"], 230)}
        for row in rows
        if row["mode"] == "every request"
        and row["twin"] == "sync"
        and row["endpoint"] in ("list deployments", "patch")
        and row["outcome"] != "ok"
    ]
    out.append("**The errors (fault on every request, sync client)**\n\n" + table(samples))
    return "\n".join(out)


def headline(data: dict[str, Any], rows: dict[str, list[dict[str, Any]]], wall: float | None) -> str:
    counters = data.get("headline", {})
    tests = data.get("tests", {})
    failed = sorted(node for node, result in tests.items() if result["outcome"] != "passed")
    matrix = rows.get("fault_matrix", [])
    chaos = [row for row in rows.get("chaos", []) if row["seed"] != "fault-free"]
    scans = rows.get("leak_scan", [])
    bad = rows.get("bad_input", [])
    duplicates = counters.get("chaos_duplicate_revisions", 0) + counters.get("duplicate_revisions_retries", 0)
    figures = [
        (
            "Faults injected (fault matrix)",
            f"{counters.get('faults_injected', 0)} faulted requests in {len(matrix)} cases "
            f"({len({row['fault'] for row in matrix})} fault kinds x {len({row['endpoint'] for row in matrix})} "
            "endpoints, injected once and on every request, sync and async clients)",
        ),
        (
            "Chaos rollouts landed",
            f"{counters.get('chaos_rollouts_landed', 0)} of {counters.get('chaos_rollouts_attempted', 0)} over "
            f"{len(chaos)} seeds; {counters.get('chaos_faults_injected', 0)} faults injected, "
            f"{counters.get('chaos_extra_requests', 0)} extra requests against the fault-free run",
        ),
        (
            "Duplicate revisions",
            f"{duplicates} (chaos rollouts, plus {counters.get('retried_tasks', 0)} retried patch tasks)",
        ),
        (
            "Secret and API key occurrences",
            f"{counters.get('secret_occurrences', 0)} in "
            + "; ".join(f"{row['scanned']}: {row['extent']}" for row in scans)
            + f" ({counters.get('leak_scan_dag_runs', 0)} DAG runs)",
        ),
        (
            "Bad inputs refused",
            f"{counters.get('bad_inputs_refused', 0)} of {len(bad)}, naming the field, 0 requests sent",
        ),
        ("Transport checks", f"{counters.get('transport_checks', 0)} (TLS, plain http, redirects)"),
        (
            "Duplicate rollback revisions",
            f"{counters.get('duplicate_rollback_revisions', 0)} after "
            f"{counters.get('rollback_faults_injected', 0)} faults on the rollback request "
            f"({len(rows.get('rollback_faults', []))} cases)",
        ),
        ("Crash points", crash_headline(rows)),
        (
            "Tests",
            f"{sum(1 for r in tests.values() if r['outcome'] == 'passed')} passed, {len(failed)} not passed; "
            f"suite wall time {wall if wall is not None else data.get('wall_seconds')} s on this machine",
        ),
    ]
    text = table([{"figure": name, "value": value} for name, value in figures])
    if failed:
        text += (
            "\n**Tests that did not pass in this run** (each is a product gap with a fix proposed in its "
            "docstring or the review; the figures above are what the code does today):\n\n"
        )
        text += "\n".join(f"- `{node}` ({tests[node]['outcome']})" for node in failed) + "\n"
    return text


def crash_headline(rows: dict[str, list[dict[str, Any]]]) -> str:
    """``N crash points of 3 tasks ... V violations`` (or that the harness did not run)."""
    sweeps = rows.get("crash_sweeps", [])
    if not sweeps:
        return "not run"
    scenarios = {(row["task"], row["scenario"]) for row in sweeps}
    violations, points = sum(row["violations"] for row in sweeps), sum(row["crash_points"] for row in sweeps)
    tasks, paths = len({task for task, _ in scenarios}), len({row["path"] for row in sweeps})
    wall, cpu = sum(row["seconds"] for row in sweeps), sum(row.get("cpu_seconds", 0) for row in sweeps)
    return (
        f"{violations} invariant violations at {points} crash points of {tasks} tasks ({len(scenarios)} scenarios "
        f"x {paths} paths x 2 store modes; {sum(row['runs'] for row in sweeps)} runs in {wall:.1f} s, "
        f"{cpu:.1f} s of CPU)"
    )


def point_ranges(points: list[str]) -> str:
    """``#0-#3, #7`` from point labels (``#<n> ...``)."""
    numbers = sorted({int(label.split()[0].lstrip("#")) for label in points if label.startswith("#")})
    ranges: list[list[int]] = []
    for number in numbers:
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    shown = [f"#{low}" if low == high else f"#{low}-#{high}" for low, high in ranges]
    if any(not label.startswith("#") for label in points):
        shown.insert(0, "the clean run")
    return ", ".join(shown)


def crash_points(data: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> str:
    """The invariants, a table per task and per sweep, an example of crash points, and every violation."""
    sweeps = rows.get("crash_sweeps", [])
    if not sweeps:
        return "_(the crash-point tests did not run)_\n"
    notes = data.get("notes", {})
    invariants: dict[str, str] = json.loads(notes.get("crash_invariants", "{}"))
    paths: dict[str, str] = json.loads(notes.get("crash_paths", "{}"))
    out = ["**The invariants** (checked after every run):\n"]
    out.append("\n".join(f"- **{name}**: {text}." for name, text in invariants.items()) + "\n")
    out.append("**The paths** (each with and without a `task_state_store`):\n")
    out.append("\n".join(f"- `{name}`: {text}." for name, text in paths.items()) + "\n")

    out.append("### Per task\n")
    per_task = []
    for task in dict.fromkeys(row["task"] for row in sweeps):
        mine = [row for row in sweeps if row["task"] == task]
        per_task.append(
            {
                "task": task,
                "scenarios": len({row["scenario"] for row in mine}),
                "crash_points": sum(row["crash_points"] for row in mine),
                "runs": sum(row["runs"] for row in mine),
                "violations": sum(row["violations"] for row in mine),
                "seconds": round(sum(row["seconds"] for row in mine), 1),
                "cpu_seconds": round(sum(row.get("cpu_seconds", 0) for row in mine), 1),
            }
        )
    out.append(table(per_task))
    out.append(
        "`crash points`: summed over the scenarios, the paths and both store modes (a clean run of each, then "
        "one run killed at each point). `runs`: the runs made; a `dag.test` run whose deferrals gave no kwargs "
        "makes the very calls of its `triggerer` twin, so its result is taken from there "
        f"({sum(row['runs_same_as_triggerer'] for row in sweeps)} runs). `seconds`: wall-clock time on this "
        "machine, which grows when other processes share it; `cpu seconds`: the CPU time of the test process "
        "(the task's threads and the emulator's), which does not.\n"
    )
    out.append("### Per scenario and path\n")
    columns = ["task", "scenario", "path", "crash_points", "runs", "violations", "seconds", "cpu_seconds"]
    out.append(table(sweeps, columns))

    examples = [
        row for row in rows.get("crash_points", []) if row["path"] == "worker" and row["store"] == "task_state_store"
    ]
    shown: dict[str, dict[str, Any]] = {}
    for row in examples:
        shown.setdefault(row["task"], row)
    if shown:
        out.append("### What the crash points look like\n")
        out.append("The points of one scenario per task, not deferrable, with a `task_state_store`:\n")
        for row in shown.values():
            out.append(
                f"**{row['task']}: {row['scenario']}** ({len(row['points'])} points): "
                + "; ".join(row["points"])
                + "\n"
            )

    violations = rows.get("crash_violations", [])
    out.append(f"### Violations ({len(violations)})\n")
    if not violations:
        out.append("None: every invariant held at every crash point.\n")
        return "\n".join(out)
    out.append(
        "Grouped where the same thing was seen (revisions by name: `R0` served before the task, `R1` is an "
        "earlier task's, `new1`, `new2`... were made during the run, in order). `where`: the path, the store "
        "mode and the crash points (`#n`: killed after the n-th event; the points are listed above and in the "
        "test's failure message).\n"
    )
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in violations:
        groups[(row["task"], row["scenario"], row["invariant"], row["seen"])].append(row)
    listed = []
    for (task, scenario, invariant, seen), found in groups.items():
        where: dict[tuple[str, str], list[str]] = defaultdict(list)
        for row in found:
            where[(row["path"], row["store"])].append(row["point"])
        listed.append(
            {
                "task": task,
                "scenario": scenario,
                "invariant": invariant,
                "runs": len(found),
                "where": "; ".join(
                    f"{path}, {store}: {point_ranges(points)}" for (path, store), points in where.items()
                ),
                "seen": seen,
            }
        )
    out.append(table(listed))
    return "\n".join(out)


SECTIONS: list[tuple[str, str, list[str]]] = [
    (
        "1. Fault matrix",
        "Every endpoint against every fault the emulator injects, through the provider's client over real "
        "HTTP. Retry policy: {fault_matrix_settings}. Request counts come from the emulator's counters; waits "
        "are the client's recorded `sleep=` calls (nothing really sleeps, except after the late fault, which "
        "the emulator times in real seconds). A PATCH whose failure may have reached the service (502, 503, "
        "504, timeout, dropped connection) is never re-sent blindly: the client reads the deployment back "
        "(`read-back`) three times, one backoff after the failure and then over as long again as the service "
        "had the request (a whole read timeout after a timeout), and re-sends only if no look shows the patch "
        "landed. The late fault is a PATCH the service processes after the client gave up on it (PATCH only: "
        "for a GET it is the delay fault). `+N rev` is the number of revisions the PATCH created.",
        ["fault_matrix", "patch_resend_backoff", "late_patch", "patch_exhausted"],
    ),
    (
        "2. Chaos rollout",
        "`deploy_fleet_after_build` (5 deployments, mapped deferrable rollouts) with `dag.test()` against a "
        "real-time emulator: {chaos_settings}; plus one guaranteed drop-after-processing on the first PATCH. "
        "Extra requests are counted against the fault-free run.",
        ["chaos"],
    ),
    (
        "3. Retried and resumed tasks",
        "A patch task killed after its patch reached the service, then retried (with and without a "
        "`task_state_store`); a deferred rollout whose trigger is cancelled mid-poll and rebuilt from its "
        "stored form (`Trigger.from_object(...)`, class path + kwargs, as after a triggerer restart).",
        ["retried_tasks", "resumed_trigger"],
    ),
    (
        "4. Secret leak scan",
        "Every example DAG in success and failure scenarios with distinctive values: the API key (and a wrong "
        "one), the payment token patched from a Variable, a secret seeded into every emulator deployment (the "
        "service echoes secrets), plus literal and Variable-sourced patch secrets. Then every table and column "
        "of the metadata database, every file under AIRFLOW_HOME (the SQLite database and WAL byte for byte) and "
        "all captured output are searched. `dag.test()` runs tasks in-process and prints task logs to stdout, "
        "so the task log lines are in the captured output; the task log file is written the way the task "
        "supervisor writes them (Airflow's log processors, secret masker included).",
        ["leak_scenarios", "leak_scan", "masker", "error_echo"],
    ),
    (
        "5. Bad input",
        "Each bad input must fail with an error naming the field, and the emulator must have received nothing.",
        ["bad_input"],
    ),
    (
        "6. Transport security",
        "The emulator served over HTTPS with a certificate from a throwaway CA generated by the test.",
        ["transport", "redirects"],
    ),
    (
        "7. Rollback requests",
        "One fault injected on `POST .../revisions/{{revision_id}}/redeploy` (the rollback), through the sync and "
        "async clients over real HTTP, then a whole `RollbackDeploymentOperator` run whose redeploy answer is "
        "dropped after processing, and its retry. A rollback that may have reached the service is read back "
        "(up to three looks, as for a PATCH) before anything is re-sent: it landed when the latest revision "
        "moved and shows the redeployed revision's config (another config at every look is someone else's "
        "rollout: refused). The read-timeout case is processed by the service after the client gave up on "
        "it. `rollback_revisions` is the "
        "number of revisions the deployment gained; the retry reattaches to the recorded rollback.",
        ["rollback_faults"],
    ),
    (
        "8. Crash points",
        "The patch task (patch, verify, bake, automatic rollback), the rollback task and the fleet task, killed "
        "at every point where a worker can die, then retried as Airflow does, and the deployment's real state "
        "checked in the emulator (the scenarios in `tests/reliability/crash_scenarios.py`, swept by "
        "`tests/reliability/test_crash_points_*.py`; the machinery and the invariants in "
        "`tests/reliability/crash_points.py`). The crash points are not listed by hand: a clean run of each "
        "scenario records its events (each request to the service, `task_state_store` write, XCom push, "
        "deferral, and the end of the try), and the worker is killed in every gap between two of them: after "
        "a request the service has processed it and the worker never sees the answer; after a deferral the "
        "trigger has fired and the worker dies as it resumes. The kill is a `BaseException` the task cannot "
        "catch. The retry is a fresh operator with `try_number + 1`, the earlier try's XComs cleared, with the "
        "same `task_state_store` and again with none (Airflow < 3.3); retryable failures are retried again. "
        "Time is virtual (every look at the deployments moves the emulator's frozen clock), so nothing sleeps "
        "and every run repeats the clean run's events up to its kill. How it works and how to run it: "
        "[the crash-point harness](guides/crash-points.md).",
        ["crash_points"],
    ),
]

TITLES = {
    "patch_resend_backoff": "Waits before re-sending an ambiguous PATCH",
    "late_patch": "A PATCH the service processes after the client gave up on it",
    "patch_exhausted": "The error after every PATCH attempt failed",
    "retried_tasks": "Retried patch tasks",
    "resumed_trigger": "Trigger torn down and rebuilt",
    "leak_scenarios": "DAG runs",
    "leak_scan": "What was scanned",
    "masker": "Secret masker in task log files",
    "error_echo": "Service errors that echo a secret",
    "redirects": "Redirects",
}

VERIFY_FALSE_RISK = (
    "**About `verify=false`.** It turns certificate checking off: anyone who can intercept the connection "
    "(a proxy, a compromised network, DNS spoofing) can pose as the service and read the API key from "
    "`X-Api-Key` and every secret value in the PATCH bodies. Use it only against a throwaway local service; "
    "for a private CA set the connection extra `ca_bundle` to the CA's PEM file instead."
)


def render(data: dict[str, Any], wall: float | None) -> str:
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in data.get("rows", []):
        rows[row["table"]].append(row)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Reliability\n",
        f"Generated by `scripts/reliability_report.py` from a run of `pytest tests/reliability` ({when}). "
        "Do not edit by hand: run `python scripts/reliability_report.py` again.\n",
        "## Headline\n",
        headline(data, rows, wall),
    ]
    for title, intro, tables in SECTIONS:
        notes = defaultdict(lambda: "(not recorded)", data.get("notes", {}))
        parts += [f"## {title}\n", intro.format_map(notes) + "\n"]
        for name in tables:
            if name in TITLES:
                parts.append(f"### {TITLES[name]}\n")
            if name == "fault_matrix":
                parts.append(fault_matrix(rows[name]))
            elif name == "crash_points":
                parts.append(crash_points(data, rows))
            elif name == "bad_input":
                shown = [{**row, "error": short(row["error"])} for row in rows[name]]
                parts.append(table(shown))
            else:
                parts.append(table(rows[name]))
        if title.startswith("6."):
            parts.append(VERIFY_FALSE_RISK + "\n")
    return "\n".join(parts)


def secret_values() -> dict[str, str]:
    """The distinctive secret values the suite uses (the report must never show one)."""
    sys.path.insert(0, str(REPO_ROOT))
    from tests.reliability import support

    names = ("API_KEY", "WRONG_API_KEY", "PAYMENT_TOKEN", "SEEDED_SECRET_PREFIX", "OPERATOR_SECRET", "VARIABLE_SECRET")
    return {name: str(getattr(support, name)) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-json", type=Path, help="render this recorded run instead of running the suite")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the Markdown")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.from_json:
        data, exit_status, wall = json.loads(args.from_json.read_text()), 0, None
    else:
        data, exit_status, seconds = run_suite(args.pytest_args)
        wall = round(seconds, 1)
    text = render(data, wall)
    leaked = [name for name, value in secret_values().items() if value in text]
    if leaked:
        raise SystemExit(f"refusing to write {args.output}: the rendered report contains {', '.join(leaked)}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(data.get('rows', []))} rows; pytest exit status {exit_status})")
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
