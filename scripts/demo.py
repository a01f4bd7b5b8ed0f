"""``make demo``: roll out a new revision through Airflow against the local emulator, then summarise.

Starts the emulator on a free loopback port with the shipped example data, sets up a throwaway
AIRFLOW_HOME with SQLite and the connection, runs ``rollout_after_build`` twice with ``airflow dags test``
(a release that lands, then one that goes live unhealthy and is rolled back), then ``analysed_rollout``
with a release that goes live READY but fails 20 % of its requests: its tracing project's error rate fails
the analysis and it is rolled back, each measurement in the log, then ``quality_gated_rollout`` with an LLM
application's release that serves without a single error but whose answers an online evaluator scores
worse (``correctness`` 0.55 against the 0.9 of the revision before, the preflight's baseline): the quality
gate rolls it back (the mapped fleet DAG too with ``--with-fleet``); then ``guarded_rollout``: a release that
lands, is handed to its guard and regresses seconds later; the guard finds it and ``deployment_service_guard`` rolls
it back (``scripts/demo_guard.py``). Every ``airflow`` command runs in one
Airflow process, in turn (``scripts/demo_airflow.py``: Airflow starts once, not once per command). It
prints what happened, the scores measured, and stops everything it started. It ends by saying where the
Rollouts view is: ``python scripts/demo.py --serve`` then keeps the emulator and an Airflow API server up
(``scripts/demo_serve.py``), with a progressive fleet rollout to look at, until Ctrl-C.
A deployment watcher (the trigger of ``smoke_test_on_new_revision``) runs inline meanwhile and reports
the event the rollout fires.
Exits non-zero when a rollout did not land. Safe to run again: every run starts from scratch.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from demo_airflow import AirflowProcess
from demo_guard import guard_step
from demo_serve import serve
from demo_watch import InlineWatcher

from airflow_provider.emulator.admin_client import EmulatorAdmin

REPO = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("DEMO_WORK_DIR", REPO / ".demo")).resolve()
API_KEY = "demo-api-key-not-a-real-secret"
PAYMENT_TOKEN = "demo-payment-token-masked-in-logs"
BUILD_SECONDS = 4.0
POLL_INTERVAL = 1.0
ANALYSIS_INTERVAL = 3.0
BAKE_SECONDS = 9.0
STEP_TIMEOUT = 300


SCORED_DEPLOYMENT = "support-bot-dev"
"""The LLM application whose answers an online evaluator scores (``quality_gated_rollout``)."""
BOT_TRAFFIC = 1000.0
"""Requests a second the LLM application answers: its sequential tests decide on thousands of runs."""


@dataclass
class DemoRun:
    """One DAG run of the demo: what to run, which deployments it should move, and how it should end.

    :param unhealthy_image: a glob of images whose app the emulator makes answer 500 (the smoke test fails).
    :param rolled_back: the run is expected to fail its smoke test and roll back (the DAG run fails).
    :param label: name of the run's log file (default: the DAG id).
    :param behaviour: an emulator behaviour rule (``image_uri`` glob and the app's behaviour) set before the run.
    :param story: how the summary tells a rolled-back run.
    :param failure: what made a rolled-back run fail, as the step's outcome says it.
    :param gate: what the run's analysis needs, as the summary says it next to what the tracing project recorded.
    :param evidence: what a rolled-back run's log must say (the check that failed it), else it failed otherwise.
    """

    dag_id: str
    conf: dict[str, Any]
    deployments: list[str]
    unhealthy_image: str | None = None
    rolled_back: bool = False
    label: str | None = None
    behaviour: dict[str, Any] | None = None
    story: str = "went live unhealthy, failed its smoke test and was rolled back"
    failure: str = "smoke test failed"
    gate: str = ""
    evidence: str = "failed its smoke test"


RUNS = [
    DemoRun(
        "rollout_after_build", {"deployment_name": "checkout-api-staging", "version": "2.0.0"}, ["checkout-api-staging"]
    ),
    DemoRun(
        "rollout_after_build",
        {"deployment_name": "checkout-api-staging", "version": "2.1.0"},
        ["checkout-api-staging"],
        unhealthy_image="*:2.1.0",
        rolled_back=True,
        label="rollout_after_build-unhealthy",
    ),
    DemoRun(
        "analysed_rollout",
        {"deployment_name": "checkout-api-staging", "version": "2.2.0"},
        ["checkout-api-staging"],
        behaviour={"image_uri": "*:2.2.0", "error_rate": 0.2, "latency_ms": 120, "requests_per_second": 10},
        rolled_back=True,
        story="went live READY but failed 20% of its runs: its tracing project failed the analysis and it was "
        "rolled back",
        failure="its tracing project's error rate failed the analysis",
        evidence="check 'tracing error_rate' failed",
        gate="the analysis needs < 0.05 over at least 20 runs",
    ),
    DemoRun(
        "quality_gated_rollout",
        {
            "deployment_name": SCORED_DEPLOYMENT,
            "image_repository": "registry.example.com/acme/support-bot",
            "version": "0.5.0",
        },
        [SCORED_DEPLOYMENT],
        behaviour={
            "image_uri": "*/support-bot:0.5.0",
            "error_rate": 0.0,
            "requests_per_second": BOT_TRAFFIC,
            "feedback": {"correctness": {"score": 0.55, "share": 0.5}},
        },
        rolled_back=True,
        story="went live READY and answered every run without an error, but the online evaluator's correctness "
        "score of its answers dropped: the quality gate rolled it back",
        failure="its correctness score failed the quality gate",
        evidence="check 'correctness' failed",
        gate="the gate fails it once its correctness is shown more than 0.05 below the baseline's, or its error rate "
        "above it (sequential tests: at most 1 % of good releases rolled back over the whole analysis)",
    ),
    DemoRun(
        "deploy_fleet_after_build",
        {"version": "2.0.0"},
        ["checkout-api-dev", "search-staging", "catalog-graph-dev", "checkout-api-prod", "support-bot-prod"],
    ),
]


def say(text: str = "") -> None:
    print(text, flush=True)


def start_emulator(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the emulator in its own process group; return it and its base URL."""
    command = [
        sys.executable,
        "-m",
        "airflow_provider.emulator",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--build-seconds",
        str(BUILD_SECONDS),
        "--ready-seconds",
        "1",
    ]
    process = subprocess.Popen(
        command,
        env={**env, "DEPLOYMENT_SERVICE_EMULATOR_API_KEY": API_KEY},
        stdout=subprocess.PIPE,
        stderr=log_path.open("w"),
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if "listening on " not in line:
        stop(process)
        raise SystemExit(f"the emulator did not start: {line or log_path.read_text()[-2000:]}")
    return process, line.rsplit(" ", 1)[-1]


def stop(process: subprocess.Popen[str]) -> None:
    """Stop a process group we started (TERM, then KILL after 10 s)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def echo(line: str) -> None:
    """Show a line of Airflow's output when it is one of the provider's own, or the reason a task failed."""
    if _worth_showing(line):
        say("   " + _short(line))


def _worth_showing(line: str) -> bool:
    """The provider's own log lines and the reason a task failed; Airflow's chatter stays in the file."""
    ours = "airflow_provider" in line and any(level in line for level in ("[info", "[warning", "[error"))
    return ours or "AirflowFailException:" in line or "AirflowSensorTimeout:" in line


def _short(line: str) -> str:
    """Drop the timestamp and the logger suffix of a structlog line."""
    text = line.strip()
    if "] " in text:
        text = text.split("] ", 1)[1]
    return text.split(" [airflow", 1)[0].strip()


def revision_times(deployment: dict[str, Any], revision_id: str) -> float | None:
    """Seconds from the revision's creation to it being deployed, as the emulator recorded it."""
    for revision in deployment["revisions"]:
        if revision["id"] == revision_id and revision["status"] == "DEPLOYED":
            created = datetime.fromisoformat(revision["created_at"].replace("Z", "+00:00"))
            done = datetime.fromisoformat(revision["updated_at"].replace("Z", "+00:00"))
            return (done - created).total_seconds()
    return None


def tracing_stats(base_url: str, project_name: str, start: str, end: str | None = None) -> dict[str, Any]:
    """The run statistics of a tracing project in a window (the tracing service's ``POST /runs/stats``, as the
    analysis reads it)."""
    headers = {"X-Api-Key": API_KEY}
    project = httpx.get(f"{base_url}/tracing/sessions", params={"name": project_name}, headers=headers).json()[0]
    window = {"session": [project["id"]], "start_time": start, "end_time": end, "is_root": True}
    stats: dict[str, Any] = httpx.post(f"{base_url}/tracing/runs/stats", json=window, headers=headers).json()
    return stats


def _runs(stats: dict[str, Any]) -> str:
    """A window's error rate, latency and feedback scores, in a few words."""
    text = f"error_rate {stats['error_rate']:.3f} over {stats['run_count']} runs"
    if stats["latency_p50"]:
        text += f", latency p50 {stats['latency_p50']:.3f} s"
    for key, scores in sorted((stats.get("feedback_stats") or {}).items()):
        text += f", {key} mean {scores['avg']:.3f} over {scores['n']} scored runs"
    return text


def served_while_live(base_url: str, run: DemoRun, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What the deployment's tracing project recorded while the run's first new revision was live, and, for a
    revision judged by its feedback scores, in the minute before it (the demo's baseline window) and since the
    rollback."""
    known = {revision["id"] for revision in before["revisions"]}
    new = [revision for revision in after["revisions"] if revision["id"] not in known]
    if len(new) < 2 or new[0]["status"] != "DEPLOYED":
        return ["its tracing project: the revision never went live"]
    name = after["name"]
    stats = tracing_stats(base_url, name, new[0]["updated_at"], new[1]["updated_at"])
    lines = [f"its tracing project while it served: {_runs(stats)} ({run.gate})"]
    if stats.get("feedback_stats"):
        patched = datetime.fromisoformat(new[0]["created_at"].replace("Z", "+00:00"))
        minute_before = (patched - timedelta(minutes=1)).isoformat()
        lines.append(
            f"the revision serving before, in the minute up to the patch (the baseline): "
            f"{_runs(tracing_stats(base_url, name, minute_before, patched.isoformat()))}"
        )
        lines.append(
            f"since the rollback (revision {new[1]['id'][:8]} serving again): "
            f"{_runs(tracing_stats(base_url, name, new[1]['updated_at']))}"
        )
    return lines


def _behaving(behaviour: dict[str, Any]) -> str:
    """What an app given ``behaviour`` does, in a few words."""
    text = f"go live READY and fail {behaviour['error_rate']:.0%} of their requests"
    for key, given in behaviour.get("feedback", {}).items():
        text += f"; an online evaluator scores {given['share']:.0%} of their answers {given['score']} for {key}"
    return text + " (their tracing project shows it)"


def serving_state(admin: EmulatorAdmin, runs: list[DemoRun]) -> dict[str, Any]:
    """What the deployments the runs moved serve at the end, as the emulator holds it (no secret values): for a
    look afterwards, and for the demo's test."""
    names = {name for run in runs for name in run.deployments}
    kept = ("id", "status", "source_revision_config", "created_at", "updated_at")
    return {
        "deployments": [
            {
                "name": deployment["name"],
                "status": deployment["status"],
                "active_revision_id": deployment["active_revision_id"],
                "latest_revision_id": deployment["latest_revision_id"],
                "source_revision_config": deployment["source_revision_config"],
                "revisions": [{key: revision.get(key) for key in kept} for revision in deployment["revisions"]],
            }
            for deployment in admin.state()["deployments"]
            if deployment["name"] in names
        ]
    }


def prepare_traffic(admin: EmulatorAdmin) -> None:
    """The traffic of the apps serving before the rollouts, so their preflights have a baseline to measure:
    ``checkout-api`` 2.0.0 answers 20 requests a second; ``support-bot-dev``'s serving revision :data:`BOT_TRAFFIC`,
    and an online evaluator scores the ``correctness`` of half of its answers, 9 in 10 good (per revision, from the
    control API): by its rollout the baseline holds thousands of scored runs, what the sequential tests need."""
    admin.add_behaviour_rule(image_uri=f"*/checkout-api:{RUNS[0].conf['version']}", requests_per_second=20)
    bot = admin.find_deployment(SCORED_DEPLOYMENT)
    admin.set_behaviour(
        bot["id"],
        revision_id=bot["active_revision_id"],
        requests_per_second=BOT_TRAFFIC,
        feedback={"correctness": {"score": 0.9, "share": 0.5}},
    )
    say(
        f"   the emulator's apps serve 20 requests a second ({SCORED_DEPLOYMENT}: {BOT_TRAFFIC:g}); an online "
        f"evaluator scores half of the answers of {SCORED_DEPLOYMENT}'s serving revision "
        f"{bot['active_revision_id'][:8]}: correctness 0.9"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--with-fleet", action="store_true", help="also run deploy_fleet_after_build (one task per deployment)"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="then keep the emulator and an Airflow API server with the Rollouts view up (until Ctrl-C)",
    )
    parser.add_argument("--port", type=int, default=0, help="the API server's port with --serve (default: a free one)")
    parser.add_argument("--serve-seconds", type=float, help="with --serve: stop after this many seconds")
    args = parser.parse_args()
    runs = RUNS if args.with_fleet else [run for run in RUNS if run.dag_id != "deploy_fleet_after_build"]

    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    home = WORK / "airflow-home"
    logs = WORK / "logs"
    home.mkdir(parents=True)
    logs.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW_VAR_CHECKOUT_API_PAYMENT_TOKEN": PAYMENT_TOKEN,
        "DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL": str(POLL_INTERVAL),
        "DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT": "120",
        # analysed_rollout: a measurement every 3 s (the first one 3 s after going live: 30 runs at 10/s) for 9 s.
        "DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL": str(ANALYSIS_INTERVAL),
        "DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS": str(BAKE_SECONDS),
        # The apps have served the demo's traffic since it started: the last minute is the baseline.
        "DEPLOYMENT_SERVICE_EXAMPLE_BASELINE_WINDOW": "60",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }

    say("== Deployment Management Service provider: demo (local emulator, no network, SQLite) ==")
    emulator, base_url = start_emulator(env, logs / "emulator.log")
    atexit.register(stop, emulator)  # whatever happens (with --serve it outlives the runs)
    admin = EmulatorAdmin(base_url)
    failures: list[str] = []
    try:
        say(f"1. emulator listening on {base_url} (builds take {BUILD_SECONDS:.0f} s)")
        env["AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"] = os.environ["DEMO_CONNECTION_JSON"] = json.dumps(
            {
                "conn_type": "deployment_service",
                "host": base_url,
                "password": API_KEY,
                "extra": {"tracing_base_url": f"{base_url}/tracing"},
            }
        )
        prepare_traffic(admin)
        say(f"2. throwaway Airflow home {home} (SQLite); migrating the database")
        airflow = AirflowProcess(env, STEP_TIMEOUT)  # one Airflow process runs every command below, in turn
        atexit.register(airflow.stop)
        if airflow.run(logs / "db-migrate.log", ["db", "migrate"], echo) != 0:
            raise SystemExit(f"`airflow db migrate` failed; see {logs / 'db-migrate.log'}")
        snapshots: list[tuple[dict[str, Any], dict[str, Any]]] = []
        notes: dict[int, list[list[str]]] = {}
        watcher = InlineWatcher(env["AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"], RUNS[0].deployments[0], POLL_INTERVAL)
        say(f"   watching {watcher.deployment_name} for new revisions (smoke_test_on_new_revision's AssetWatcher)")
        watcher.start()
        for step, run in enumerate(runs, start=3):
            before = {d["name"]: d for d in admin.state()["deployments"]}
            if run.unhealthy_image:
                admin.add_unhealthy_rule(image_uri=run.unhealthy_image)
                say(f"{step}. the emulator will serve images {run.unhealthy_image} unhealthy (their app answers 500)")
            if run.behaviour:
                admin.add_behaviour_rule(**run.behaviour)
                images = run.behaviour["image_uri"]
                say(f"{step}. the emulator's apps of images {images} will {_behaving(run.behaviour)}")
            say(f"{step}. airflow dags test {run.dag_id} {json.dumps(run.conf)}")
            run_started = time.monotonic()
            log_path = logs / f"{run.label or run.dag_id}.log"
            # -f: the CLI parses only the DAG's own file to find it (dag.test() then syncs the whole folder).
            dag_file = str(REPO / "example_dags" / f"{run.dag_id}.py")
            command = ["dags", "test", run.dag_id, "-c", json.dumps(run.conf), "-f", dag_file]
            code = airflow.run(log_path, command, echo)
            took = time.monotonic() - run_started
            outcome = "succeeded" if code == 0 else "FAILED"
            as_expected = (code != 0) == run.rolled_back
            if run.rolled_back:
                as_expected = as_expected and run.evidence in log_path.read_text()
                expected = f"failed as expected ({run.failure}, rolled back)"
                outcome = expected if as_expected else f"FAILED otherwise ({run.evidence!r} is not in the log)"
                outcome = outcome if code != 0 else "SUCCEEDED unexpectedly"
            say(f"   -> {outcome} in {took:.1f} s (full log: {log_path})")
            if not as_expected:
                failures.append(run.label or run.dag_id)
            snapshots.append((before, {d["name"]: d for d in admin.state()["deployments"]}))
            if run.behaviour:  # what the tracing project recorded, read while the emulator still runs
                notes[len(snapshots) - 1] = [
                    served_while_live(base_url, run, before[name], snapshots[-1][1][name]) for name in run.deployments
                ]
        guarded = guard_step(
            airflow, admin, logs, REPO / "example_dags" / "guarded_rollout.py", len(runs) + 3, say, echo
        )
        if guarded[0].startswith("!!"):
            failures.append("guarded_rollout")
        event = watcher.wait(timeout=10 * POLL_INTERVAL)
        if event is None:
            failures.append("the deployment watcher (no revision_live event)")
        else:
            say(
                f"   watcher fired {event['kind']}: {event['deployment_name']} now serves revision "
                f"{event['revision_id'][:8]} (was {str(event['previous_revision_id'])[:8]}); in Airflow this "
                "starts smoke_test_on_new_revision"
            )
        counters = admin.counters()
        (logs / "emulator-state.json").write_text(json.dumps(serving_state(admin, runs), indent=1))
        airflow.stop()
    except BaseException:
        stop(emulator)
        raise
    finally:
        admin.close()
    if not args.serve:
        stop(emulator)

    say()
    say("== Summary ==")
    landed = True
    for index, (run, (before, after)) in enumerate(zip(runs, snapshots, strict=True)):
        if run.rolled_back:
            for position, name in enumerate(run.deployments):
                old, new = before[name], after[name]
                created = len(new["revisions"]) - len(old["revisions"])
                active = new["active_revision_id"]
                image = new["source_revision_config"].get("image_uri")
                restored = image == old["source_revision_config"].get("image_uri") and new["status"] == "READY"
                back = restored and active == new["latest_revision_id"] and created == 2
                landed = landed and back
                say(
                    f" {'ok ' if back else '!! '}{name}: {run.conf.get('version')} {run.story}; {created} new "
                    f"revisions; at the end it serves {image} (revision {active[:8]}, status {new['status']})"
                )
                for note in notes.get(index, [[]] * len(run.deployments))[position]:
                    say(f"    {note}")
            continue
        for name in run.deployments:
            old, new = before[name], after[name]
            created = len(new["revisions"]) - len(old["revisions"])
            active = new["active_revision_id"]
            live = active != old["active_revision_id"] and active == new["latest_revision_id"]
            waited = revision_times(new, active) if live else None
            serving = {k: v for k, v in new["source_revision_config"].items() if v and k != "repo_commit_sha"}
            mark = "ok " if live and created == 1 else "!! "
            landed = landed and live and created == 1
            timing = f", built and live {waited:.1f} s after the patch" if waited is not None else ""
            say(f" {mark}{name}: {created} new revision, now serving {serving} (revision {active[:8]}{timing})")
    for line in guarded:
        say(f" {line}")
    total = sum(counters.values())
    say(f" API calls the emulator answered: {total} ({', '.join(f'{k}: {v}' for k, v in sorted(counters.items()))})")
    say(f" Task logs and Airflow output: {logs}")
    say(f" Wall time: {time.monotonic() - started:.0f} s")
    result = 0
    if failures or not landed:
        say(f" RESULT: a rollout did not land ({', '.join(failures) or 'see above'})")
        result = 1
    else:
        say(
            " RESULT: every rollout landed or was rolled back as expected; the sensor waited for the new revision, "
            "not just READY, the unhealthy one was rolled back to the build that served before, and so were the "
            "READY one its tracing project showed failing and the one whose answers scored worse; a landed one that "
            "regressed later was rolled back by its guard."
        )
    if not args.serve:
        say(
            " The Rollouts view (every deployment, its revisions and the rollouts that put them there) is in the "
            "Airflow UI at <airflow>/plugin/rollouts: `python scripts/demo.py --serve` keeps this emulator and an "
            "Airflow API server up to open it (see docs/rollouts-view.md)."
        )
        return result
    try:
        return serve(env, logs, port=args.port, seconds=args.serve_seconds) or result
    finally:
        stop(emulator)


if __name__ == "__main__":
    raise SystemExit(main())
