"""Question 4: extra time and memory to import our operators, sensor and hook on top of ``airflow.sdk``,
beside the same figure for the HTTP provider's operator, sensor and hook.

Both are measured with the same interpreter and Airflow, in a separate environment
(``bench/.work/venv``: the pinned test set, ``apache-airflow-providers-http`` and this package), created
once and reused while its inputs do not change. Each repetition is a fresh process that imports
``airflow.sdk`` first, then times the imports and takes the RSS growth; the two candidates alternate.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import ROOT, WORK_DIR, Goal, connection_env, fmt, median, parse_options, publish, table

VENV = WORK_DIR / "venv"
HTTP_PROVIDER = "apache-airflow-providers-http"
CANDIDATES = {
    "this provider": [
        "airflow_provider.operators.deployment_service",
        "airflow_provider.sensors.deployment_service",
        "airflow_provider.hooks.deployment_service",
    ],
    "HTTP provider": [
        "airflow.providers.http.operators.http",
        "airflow.providers.http.sensors.http",
        "airflow.providers.http.hooks.http",
    ],
}
GOAL_SECONDS = 0.050
HOW_NOTE = """**What the import does not pay for.** What only a running task needs is imported by the method that
uses it, not by the operator and sensor modules: the analysis gates (their definitions come with the ``Analysis``
a DAG file builds; the measuring side when a task measures), the preflight, waiting and judging a live revision,
the rollback machinery, the fleet's waves, rows and progress (``airflow_provider.decisions.fleet_progress``; the
strategy arguments a constructor checks are the small ``airflow_provider.decisions.fleet_strategy``), the record, the
PATCH rules, the notifications' and questions' work, and the triggers (imported by a task only when it defers).
``tests/test_import_cost.py`` fails when one of them is imported with the operators, sensor and hook again. The
pydantic models build their validators on first use (``defer_build``), and the modules of
``airflow_provider/models/`` do without ``from __future__ import annotations``, whose string annotations pydantic
evaluated again one by one (about 220 ``compile`` calls). The same measurement gave 55.5 ms on 2026-11-23 and
91.7 ms on 2026-11-27 (88 provider modules) before the late imports."""

PROBE = """
import gc, importlib, json, os, sys, time
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import airflow.sdk
gc.collect()
before_modules, before_rss = set(sys.modules), rss()
started, cpu = time.perf_counter(), time.process_time()
for name in sys.argv[1:]:
    importlib.import_module(name)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
gc.collect()
new = sorted(set(sys.modules) - before_modules)
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss": rss() - before_rss, "modules": new}))
"""


def bench_python() -> Path:
    """The bench environment's interpreter, created (or refreshed) when its inputs changed."""
    python = VENV / "bin" / "python"
    inputs = [ROOT / "requirements" / "test.lock", ROOT / "pyproject.toml"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in inputs) + HTTP_PROVIDER.encode()).hexdigest()
    stamp = VENV / ".bench-stamp"
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    uv = Path(sys.executable).parent / "uv"
    print(f"creating {VENV.relative_to(ROOT)} (pinned test set + {HTTP_PROVIDER}); reused afterwards", flush=True)
    subprocess.run([str(uv), "venv", "--quiet", "--clear", "--python", sys.executable, str(VENV)], check=True)
    install = [str(uv), "pip", "install", "--quiet", "--python", str(python)]
    subprocess.run([*install, "-r", str(ROOT / "requirements" / "test.lock"), HTTP_PROVIDER], check=True)
    subprocess.run([*install, "--no-deps", "-e", str(ROOT)], check=True)
    stamp.write_text(digest)
    return python


def probe(python: Path, modules: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One fresh process: time and RSS growth of importing ``modules`` after ``airflow.sdk``."""
    out = subprocess.run(
        [str(python), "-c", PROBE, *modules], check=True, capture_output=True, text=True, env=env, cwd=WORK_DIR
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def heaviest_imports(python: Path, modules: list[str], env: dict[str, str], count: int = 6) -> list[tuple[str, int]]:
    """The modules with the largest own import time (``-X importtime``) among those ``modules`` pull in."""
    code = "import airflow.sdk, sys; print('---', file=sys.stderr); import " + ", ".join(modules)
    out = subprocess.run(
        [str(python), "-X", "importtime", "-c", code], check=True, capture_output=True, text=True, env=env, cwd=WORK_DIR
    )
    after = out.stderr.split("---", 1)[-1]
    own = []
    for line in after.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            own.append((match.group(2), int(match.group(1))))
    return sorted(own, key=lambda item: -item[1])[:count]


def top_packages(modules: list[str]) -> str:
    """``package: count`` of newly imported modules, largest first."""
    counts = Counter(
        ".".join(name.split(".")[:2]) if name.startswith("airflow.") else name.split(".")[0] for name in modules
    )
    return ", ".join(f"{name} {number}" for name, number in counts.most_common(5))


def main() -> None:
    options = parse_options(__doc__ or "")
    started = time.perf_counter()
    repetitions = 3 if options.quick else 7
    python = bench_python()
    env = {**os.environ, **connection_env("http://127.0.0.1:9", "unused")}
    env.pop("PYTHONPATH", None)
    # Measure what an installed provider costs: with byte-code, as ``pip install`` leaves it. A machine
    # that sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile every module of both
    # candidates, Airflow's included, in every repetition, and time the compiler instead of the import.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CANDIDATES}
    probe(python, CANDIDATES["this provider"], env)  # warm the file cache and byte-code of both
    probe(python, CANDIDATES["HTTP provider"], env)
    for _ in range(repetitions):
        for name, modules in CANDIDATES.items():
            results[name].append(probe(python, modules, env))

    seconds = {name: median(run["seconds"] for run in runs) for name, runs in results.items()}
    cpu = {name: median(run["cpu"] for run in runs) for name, runs in results.items()}
    memory = {name: median(run["rss"] for run in runs) for name, runs in results.items()}
    ours, http = "this provider", "HTTP provider"
    rows = [
        (
            name,
            fmt(seconds[name] * 1000, 1),
            fmt(min(run["seconds"] for run in results[name]) * 1000, 1),
            fmt(cpu[name] * 1000, 1),
            fmt(memory[name] / 2**20, 2),
            len(results[name][0]["modules"]),
            top_packages(results[name][0]["modules"]),
        )
        for name in CANDIDATES
    ]
    heavy = heaviest_imports(python, CANDIDATES[ours], env)
    body = "\n\n".join(
        [
            f"Fresh process per repetition ({repetitions} each, alternating), after `import airflow.sdk`; "
            f"modules: {', '.join(f'`{m}`' for m in CANDIDATES[ours])} vs "
            f"{', '.join(f'`{m}`' for m in CANDIDATES[http])}.",
            table(
                [
                    "imports",
                    "median ms",
                    "min ms",
                    "median CPU ms",
                    "median RSS MiB",
                    "new modules",
                    "new modules by package",
                ],
                rows,
            ),
            f"Ratio this provider / HTTP provider: time {fmt(seconds[ours] / seconds[http])}, "
            f"memory {fmt(memory[ours] / memory[http]) if memory[http] else 'n/a'}.",
            "Largest own import times among the modules ours pulls in (`-X importtime`, one run): "
            + ", ".join(f"`{name}` {us / 1000:.1f} ms" for name, us in heavy)
            + ".",
        ]
    )
    body += "\n\n" + HOW_NOTE
    if seconds[ours] >= GOAL_SECONDS:
        body += "\n\n" + (
            f"**Why the 50 ms goal is missed.** {seconds[ours] * 1000:.1f} ms wall ({cpu[ours] * 1000:.1f} ms CPU). "
            "What is left is what defining and constructing the tasks needs: the service's schema "
            "(`airflow_provider.models`, about 40 % of the rest, imported by the hook's client, which reads every "
            "answer into it), the hook and its client, and the task bases. The goal is absolute time, so it moves "
            "with this machine's load (a wall figure well above the CPU figure means the machine was busy); the "
            "ratio to the HTTP "
            f"provider measured beside it ({fmt(seconds[ours] / seconds[http])}) is the stable comparison."
        )
    goals = [
        Goal(
            "import",
            "importing our operators, sensor and hook adds under 50 ms",
            f"{seconds[ours] * 1000:.1f} ms",
            seconds[ours] < GOAL_SECONDS,
        ),
        Goal(
            "import",
            "and less time and memory than the HTTP provider's operator, sensor and hook",
            f"{seconds[ours] * 1000:.1f} vs {seconds[http] * 1000:.1f} ms, "
            f"{memory[ours] / 2**20:.2f} vs {memory[http] / 2**20:.2f} MiB",
            seconds[ours] < seconds[http] and memory[ours] < memory[http],
        ),
    ]
    publish("import_cost", "4. Import cost", body, goals, quick=options.quick, seconds=time.perf_counter() - started)


if __name__ == "__main__":
    main()
