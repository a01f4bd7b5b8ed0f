"""What the benchmark scripts share: machine facts, seed data, the emulator, statistics and RESULTS.md.

Every script measures its figure and its comparison in the same run, repeats the measurement and keeps
the median, and publishes one section of ``bench/RESULTS.md`` (``--quick`` runs write
``bench/.work/RESULTS.quick.md`` instead, so a development run never overwrites real figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider.emulator import EmulatorServer

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
WORK_DIR = BENCH_DIR / ".work"
RESULTS = BENCH_DIR / "RESULTS.md"
QUICK_RESULTS = WORK_DIR / "RESULTS.quick.md"
GOALS_DIR = WORK_DIR / "goals"

CONN_ENV = "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"
HOOK_PARAMS = {"deployment_service_conn_id": "deployment_service_default"}
LIST_ROUTE = "GET /v2/deployments"
REVISION_ROUTE = "GET /v2/deployments/{deployment_id}/revisions/{revision_id}"
NEVER_FINISHES = 1e7
"""Build seconds of a revision that stays building for the whole benchmark."""

_NAMESPACE = uuid.UUID("0b7f3c52-4c1e-4d8a-9a51-6d2f0e8b9c10")


# ------------------------------------------------------------------------------------ options
def parse_options(description: str, *, only: bool = False) -> argparse.Namespace:
    """Command-line options every script takes: ``--quick`` for a small development run (and, for
    ``run_all.py``, ``--only``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (development)")
    if only:
        parser.add_argument(
            "--only",
            default="",
            help="comma-separated scripts to run; the other sections and their goals stay as last measured",
        )
    return parser.parse_args()


# ------------------------------------------------------------------------------------ machine
def machine() -> dict[str, str]:
    """Cores, CPU model, OS, Python and package versions, load average: the context of every figure."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " / ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return {
        "cores": f"{os.cpu_count()} ({usable} usable), {model}",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "airflow": metadata.version("apache-airflow"),
        "httpx / pydantic": f"{metadata.version('httpx')} / {metadata.version('pydantic')}",
        "load average (1/5/15 min)": load,
    }


def now_text() -> str:
    """The current UTC time, to the minute."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# --------------------------------------------------------------------------------- statistics
def median(values: Iterable[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(list(values)))


def rss_bytes() -> int:
    """Resident set size of this process."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    """CPU time of this process (all threads, user + system)."""
    return time.process_time()


# ----------------------------------------------------------------------------------- seed data
def deployment_id(index: int) -> str:
    """Id of the ``index``-th benchmark deployment (stable across runs)."""
    return str(uuid.uuid5(_NAMESPACE, f"deployment/{index}"))


def revision_id(index: int, which: str) -> str:
    """Id of a benchmark deployment's ``"active"`` or ``"building"`` revision."""
    return str(uuid.uuid5(_NAMESPACE, f"deployment/{index}/{which}"))


def bench_data(count: int, *, build_seconds: Sequence[float] | float | None = NEVER_FINISHES) -> dict[str, Any]:
    """Seed data of ``count`` deployments shaped like the shipped example data (cycled, renamed, new ids).

    :param build_seconds: ``None``: every deployment is READY with nothing building; else each is READY
        with an active revision and a newer revision that started building when the emulator loaded the
        data and takes this long (one number, or one per deployment).
    """
    from airflow_provider.emulator import example_data_path

    templates = json.loads(example_data_path().read_text())["deployments"]
    deployments = []
    for index in range(count):
        entry = {key: value for key, value in templates[index % len(templates)].items() if key != "tenant_id"}
        entry.update(id=deployment_id(index), name=f"{entry['name']}-bench-{index}", status="READY")
        entry.pop("active_revision_id", None)
        entry.pop("latest_revision_id", None)
        if build_seconds is not None:
            seconds = build_seconds if isinstance(build_seconds, (int, float)) else build_seconds[index]
            entry.update(
                active_revision_id=revision_id(index, "active"),
                latest_revision_id=revision_id(index, "building"),
                build_seconds=float(seconds),
            )
        deployments.append(entry)
    return {"deployments": deployments}


# ------------------------------------------------------------------------------------ emulator
def start_emulator(data: dict[str, Any], **options: Any) -> EmulatorServer:
    """Start the emulator in a subprocess (its CPU is not the client's) serving ``data``."""
    from airflow_provider.emulator import EmulatorServer

    return EmulatorServer(in_subprocess=True, data=data, startup_timeout=120, **options).start()


def connection_env(base_url: str, api_key: str) -> dict[str, str]:
    """Environment that points ``deployment_service_default`` at the emulator, with a throwaway Airflow home."""
    home = WORK_DIR / "airflow_home"
    home.mkdir(parents=True, exist_ok=True)
    conn = {"conn_type": "deployment_service", "host": base_url, "password": api_key}
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        CONN_ENV: json.dumps(conn),
    }


def use_emulator_connection(emulator: EmulatorServer) -> None:
    """Point this process's Airflow connection at ``emulator``.

    The first call must come before Airflow is imported (it also sets the Airflow home and log level);
    later calls re-point the connection, which Airflow reads from the environment at each lookup.
    """
    os.environ.update(connection_env(emulator.base_url, emulator.api_key))


def default_revision_check_interval(poll_interval: float) -> float:
    """The trigger's ``revision_check_interval`` for ``poll_interval``, in the ratio of the product defaults."""
    from airflow_provider import defaults

    return poll_interval * defaults.DEFAULT_REVISION_CHECK_INTERVAL / defaults.DEFAULT_POLL_INTERVAL


# ------------------------------------------------------------------------------------- results
@dataclass
class Goal:
    """One goal of the issue and whether this run met it.

    :param question: the section it belongs to.
    :param goal: the goal, in words.
    :param figure: the measured figure it is judged on.
    :param met: whether it is met.
    """

    question: str
    goal: str
    figure: str
    met: bool


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def goal_lines(goals: Sequence[Goal]) -> str:
    """Goals as a Markdown list with MET / MISSED."""
    return "\n".join(f"- **{'MET' if g.met else 'MISSED'}**: {g.goal} (measured: {g.figure})" for g in goals)


def publish(section: str, title: str, body: str, goals: Sequence[Goal], *, quick: bool, seconds: float) -> None:
    """Print a section and write it into RESULTS.md (between its markers), with machine and date.

    :param section: stable id of the section (the script's name).
    :param title: its heading.
    :param body: tables and notes (Markdown).
    :param goals: the goals it judges.
    :param quick: a development run: write ``bench/.work/RESULTS.quick.md`` instead.
    :param seconds: the script's wall time.
    """
    facts = machine()
    stamp = f"_Measured {now_text()}{' (QUICK development run)' if quick else ''} in {seconds:.0f} s; "
    stamp += f"load average at the end {facts['load average (1/5/15 min)']}._"
    text = f"## {title}\n\n{stamp}\n\n{body.strip()}\n\n{goal_lines(goals)}\n"
    print(text, flush=True)
    target = QUICK_RESULTS if quick else RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    write_section(target, section, text)
    GOALS_DIR.mkdir(parents=True, exist_ok=True)
    (GOALS_DIR / f"{section}{'.quick' if quick else ''}.json").write_text(
        json.dumps([asdict(goal) for goal in goals], indent=1)
    )


def header(started: str | None = None, total_seconds: float | None = None) -> str:
    """The top of RESULTS.md: what was measured where and when."""
    facts = machine()
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`bench/run_all.py`); each section by its own script in `bench/`. Every figure",
        "is a count, or a ratio measured in the same run as its comparison, as the median of repeated runs.",
        "The emulator always runs in a subprocess, so its CPU is not counted as the client's.",
        "",
        table(["machine", ""], [(key, value) for key, value in facts.items() if not key.startswith("load")]),
        "",
        f"Date: {started or now_text()}"
        + (f"; `make bench` wall time: {total_seconds:.0f} s" if total_seconds else ""),
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str, text: str) -> None:
    """Replace (or append) the section between ``<!-- bench:NAME -->`` markers of ``path``."""
    start, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    block = f"{start}\n{text.strip()}\n{end}"
    current = path.read_text() if path.exists() else header()
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(current):
        current = pattern.sub(lambda _: block, current)
    else:
        current = current.rstrip() + "\n\n" + block + "\n"
    path.write_text(current.rstrip() + "\n")


def replace_header(path: Path, new_header: str) -> None:
    """Put ``new_header`` above the first section of ``path``."""
    current = path.read_text() if path.exists() else ""
    first = current.find("<!-- bench:")
    rest = current[first:] if first >= 0 else ""
    path.write_text(new_header.rstrip() + "\n\n" + rest)


def fmt(value: float, digits: int = 2) -> str:
    """A number with ``digits`` decimals, without trailing noise."""
    return f"{value:.{digits}f}"
