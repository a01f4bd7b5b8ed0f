"""``python scripts/demo.py --serve``: after the demo, an Airflow API server on the demo's database, with the
Rollouts view, and a progressive fleet rollout to look at.

The API server (and the emulator, which the demo leaves running in this mode) stay up until Ctrl-C (or
``--serve-seconds``). Before that, ``progressive_rollout`` runs with ``airflow dags test``: its canary, an
approval the demo gives through Airflow's REST API as a person would in *Required Actions*, then the rest of
the fleet in waves, so the view has a fleet rollout, its approval and its asset events to show.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

APPROVAL_TIMEOUT = 120.0
STARTUP_TIMEOUT = 90.0
FLEET_DAG = "progressive_rollout"


def say(text: str = "") -> None:
    print(text, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[Any]) -> None:
    """Stop a process group we started (TERM, then KILL after 10 s)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class ViewServer:
    """An ``airflow api-server`` on the demo's Airflow home, with a known admin password.

    :param env: the demo's environment (Airflow home, database, connection).
    :param logs: where its log goes.
    :param port: its port (``0``: a free one).
    """

    def __init__(self, env: dict[str, str], logs: Path, port: int = 0) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(10)
        home = Path(env["AIRFLOW_HOME"])
        (home / "demo-passwords.json").write_text(json.dumps({"admin": self.password}))
        self.env = {
            **env,
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(24),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "demo-passwords.json"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            # progressive_rollout's production pacing (10-minute bake, 5-minute pauses) shortened for the demo
            "DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS": "3",
            "DEPLOYMENT_SERVICE_EXAMPLE_PAUSE_SECONDS": "5",
        }
        self.log_path = logs / "api-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.base_url, timeout=10)

    def start(self) -> None:
        """Start it and wait (bounded) until it answers; then log in through the REST API."""
        command = [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the API server exited; see {self.log_path}")
            try:
                if self.http.get("/api/v2/monitor/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the API server did not answer within {STARTUP_TIMEOUT:.0f} s; see {self.log_path}")
            time.sleep(0.5)
        token = self.http.post("/auth/token", json={"username": "admin", "password": self.password})
        token.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def stop(self) -> None:
        self.http.close()
        if self.process is not None:
            stop(self.process)

    def approve_when_asked(self, run_started: float, timeout: float = APPROVAL_TIMEOUT) -> str | None:
        """Approve ``progressive_rollout``'s pending approval through the REST API; return the run id."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.http.get(f"/api/v2/dags/{FLEET_DAG}/dagRuns", params={"order_by": "-id", "limit": 1})
            for run in runs.json().get("dag_runs", []) if runs.status_code == 200 else []:
                path = f"/api/v2/dags/{FLEET_DAG}/dagRuns/{run['dag_run_id']}/taskInstances/approve_rollout/-1"
                if self.http.get(path.rsplit("/", 1)[0]).json().get("state") in ("deferred", "awaiting_input"):
                    answer = self.http.patch(f"{path}/hitlDetails", json={"chosen_options": ["Approve"]})
                    if answer.status_code == 200:
                        return str(run["dag_run_id"])
            time.sleep(1)
        return None


def serve(env: dict[str, str], logs: Path, *, port: int, seconds: float | None) -> int:
    """Start the API server, run a progressive fleet rollout through it, print where to look, and wait."""
    server = ViewServer(env, logs, port)
    say()
    say("== The Rollouts view ==")
    say(f" starting an Airflow API server on {server.base_url} (log: {server.log_path})")
    try:
        server.start()
        say(f" {FLEET_DAG}: a canary, an approval, then the rest of the fleet in waves (airflow dags test)")
        started = time.monotonic()
        with (logs / f"{FLEET_DAG}.log").open("w") as log:
            run = subprocess.Popen(
                [sys.executable, "-m", "airflow", "dags", "test", FLEET_DAG, "-c", json.dumps({"version": "3.0.0"})],
                env=server.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            run_id = server.approve_when_asked(started)
            if run_id is None:
                stop(run)
                say(f" !! nobody was asked to approve within {APPROVAL_TIMEOUT:.0f} s; see {logs / FLEET_DAG}.log")
            else:
                say(" approved through Airflow's REST API (a person does it in Required Actions)")
                try:
                    run.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    stop(run)
                outcome = "finished" if run.returncode == 0 else "FAILED"
                say(f" -> {FLEET_DAG} {outcome} in {time.monotonic() - started:.0f} s")
        say()
        say(f" Open {server.base_url}/plugin/rollouts and log in as admin / {server.password}")
        if run_id is not None:
            tab = f"/dags/{FLEET_DAG}/runs/{quote(run_id, safe='')}/tasks/roll_out_fleet/plugin/fleet-rollout"
            say(f" The fleet rollout's tab: {server.base_url}{tab}")
        say(" Press Ctrl-C to stop the API server and the emulator." if seconds is None else "")
        try:
            if seconds is None:
                signal.pause()
            else:
                time.sleep(seconds)
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        server.stop()
