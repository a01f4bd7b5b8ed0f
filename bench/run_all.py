"""Run every benchmark script (each in its own process) and assemble ``bench/RESULTS.md``.

``python bench/run_all.py [--quick] [--only NAME,NAME]``; ``make bench`` runs it without options. A script
that fails is reported and makes the exit status non-zero; a missed goal does not (it is a result). With
``--only`` just those scripts run; the Goals table takes every other script's goals from its section as
last measured (each section carries its own date), and the header says which sections this run re-measured.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from common import BENCH_DIR, GOALS_DIR, QUICK_RESULTS, RESULTS, header, now_text, parse_options, table

SCRIPTS = (
    "requests_while_waiting",
    "waiting_cost",
    "listing_throughput",
    "import_cost",
    "detection_latency",
    "watcher_cost",
    "rollback_time",
    "fleet_rollout",
    "rollouts_view",
    "analysis_cost",
    "fleet_abort",
    "judge_power",
    "guard_cost",
)


def section_block(text: str, name: str) -> str | None:
    """The marked block of section ``name`` in ``text``, markers included."""
    found = re.search(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", text, re.DOTALL)
    return found.group(0) if found else None


GOAL_LINE = re.compile(r"^- \*\*(MET|MISSED)\*\*: (.*) \(measured: (.*)\)$", re.MULTILINE)


def summary(quick: bool, current: str = "", ran: tuple[str, ...] = SCRIPTS) -> str:
    """A table of every goal: question, goal, measured figure, met or missed (a script that did not run
    this time: the goal lines of its section in ``current``)."""
    rows = []
    for name in SCRIPTS:
        path = GOALS_DIR / f"{name}{'.quick' if quick else ''}.json"
        block = section_block(current, name)
        if name not in ran and block is not None:
            for met, goal, figure in GOAL_LINE.findall(block):
                rows.append((name, goal, figure, "MET" if met == "MET" else "**MISSED**"))
            continue
        if not path.exists():
            rows.append((name, "(no result: the script failed)", "", "FAILED"))
            continue
        for goal in json.loads(path.read_text()):
            rows.append((name, goal["goal"], goal["figure"], "MET" if goal["met"] else "**MISSED**"))
    return "## Goals\n\n" + table(["script", "goal", "measured", ""], rows) + "\n"


def main() -> int:
    options = parse_options(__doc__ or "", only=True)
    started_at, started = now_text(), time.perf_counter()
    ran = tuple(name for name in options.only.split(",") if name) or SCRIPTS
    unknown = [name for name in ran if name not in SCRIPTS]
    if unknown:
        print(f"unknown script(s): {', '.join(unknown)}; known: {', '.join(SCRIPTS)}", file=sys.stderr)
        return 2
    failed = []
    for name in ran:
        path = GOALS_DIR / f"{name}{'.quick' if options.quick else ''}.json"
        path.unlink(missing_ok=True)
        print(f"\n=== {name} ===", flush=True)
        command = [sys.executable, str(BENCH_DIR / f"{name}.py"), *(["--quick"] if options.quick else [])]
        if subprocess.run(command, check=False).returncode != 0:
            failed.append(name)
    total = time.perf_counter() - started
    target = QUICK_RESULTS if options.quick else RESULTS
    current = target.read_text() if target.exists() else ""
    blocks = [block for block in (section_block(current, name) for name in SCRIPTS) if block]
    top = header(started_at, total if ran == SCRIPTS else None)
    if ran != SCRIPTS:
        top = top.rstrip() + f"; this run re-measured {', '.join(ran)} ({total:.0f} s), the rest as dated\n"
    target.write_text("\n\n".join([top, summary(options.quick, current, ran), *blocks]).rstrip() + "\n")
    print(f"\nwrote {target} in {total:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
