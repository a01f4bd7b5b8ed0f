"""Run real Airflow services and the emulator as child processes, and drive them through their HTTP APIs.

Every process is started in its own session with its output in a log file, and stopped by killing exactly
the process groups of that session (the process and everything it started). Every wait has a deadline and,
when it passes, fails with what did not happen plus the tail of each component's log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import parse_qs

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO_ROOT / "example_dags"
CONN_ENV = "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"
PAYMENT_TOKEN_ENV = "AIRFLOW_VAR_CHECKOUT_API_PAYMENT_TOKEN"
TERMINAL_RUN_STATES = ("success", "failed")
_LISTENING_RE = re.compile(r"Deployment service emulator listening on (?P<url>http://\S+)")

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """Something the test waited for did not happen before its deadline."""


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something other than ``None``/``False``; return that.

    :param check: the probe; exceptions it raises propagate.
    :param timeout: seconds before giving up.
    :param what: what should have happened, for the failure message.
    :param interval: seconds between two probes.
    :param diagnostics: text appended to the failure message (e.g. component log tails).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            extra = f"\n{diagnostics()}" if diagnostics is not None else ""
            raise WaitTimeout(f"{what}: did not happen within {timeout:.0f} s{extra}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def airflow_db_migrate(bin_dir: Path, env: Mapping[str, str], home: Path | str, what: str = "") -> None:
    """Run ``airflow db migrate`` of ``bin_dir``'s Airflow with ``env`` in ``home``; fail with its output's tail.

    :param what: what is migrated, for the failure (``" of the template"``...).
    """
    migrate = subprocess.run(
        [str(bin_dir / "airflow"), "db", "migrate"],
        env=dict(env),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    if migrate.returncode != 0:
        tail = "\n".join((migrate.stdout + migrate.stderr).splitlines()[-40:])
        raise AssertionError(f"`airflow db migrate`{what} failed with {migrate.returncode}:\n{tail}")


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _session_groups(sid: int) -> dict[int, list[int]]:
    """Live (non-zombie) processes of session ``sid``, by process group.

    A component is started as a session leader; Airflow's task supervisor puts each task process in a
    process group of its own, but everything the component starts stays in its session.
    """
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: the leader's group is the best we know
        try:
            os.killpg(sid, 0)
        except ProcessLookupError:
            return {}
        return {sid: [sid]}
    groups: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            groups.setdefault(int(fields[2]), []).append(int(entry.name))
    return groups


class ManagedProcess:
    """One child process in its own session, output to ``log_path``, stopped by killing that session.

    :param name: short name for messages (``scheduler``, ``triggerer-2``...).
    :param command: the command line.
    :param env: its complete environment.
    :param log_path: file that receives its stdout and stderr.
    :param cwd: working directory.
    """

    def __init__(self, name: str, command: list[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.command = command
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def start(self) -> ManagedProcess:
        """Start the process (new session, stdin closed)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen is not None and self.popen.poll() is None

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its output, headed with its name and state."""
        state = "running" if self.alive else f"exited with {self.popen.returncode if self.popen else None}"
        text = "\n".join(self.log_text().splitlines()[-lines:])
        return f"----- {self.name} (pid {self.popen.pid if self.popen else '-'}, {state}): {self.log_path}\n{text}"

    def signal_all(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every process group of the process's session."""
        if self.popen is None:
            return
        for pgid in _session_groups(self.popen.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)

    def wait_gone(self, timeout: float) -> list[int]:
        """Wait up to ``timeout`` seconds for the whole session to exit; return the pids still alive."""
        if self.popen is None:
            return []
        deadline = time.monotonic() + timeout
        while True:
            self.popen.poll()  # reaps the leader as soon as it exits
            left = [pid for pids in _session_groups(self.popen.pid).values() for pid in pids]
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def stop(self, grace: float = 15.0) -> list[int]:
        """SIGTERM the process and everything it started, wait up to ``grace`` seconds, then SIGKILL what is
        left; return the pids that survived even that (none, unless something is badly stuck)."""
        self.stopped = True
        self.signal_all(signal.SIGTERM)
        if self.wait_gone(grace):
            self.signal_all(signal.SIGKILL)
        return self.wait_gone(10.0)


def child_env(bin_dir: Path) -> dict[str, str]:
    """The test's environment without any Airflow or example settings, with ``bin_dir`` first on PATH."""
    dropped = ("AIRFLOW", "DEPLOYMENT_SERVICE_", "PYTEST_", "VIRTUAL_ENV")
    env = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Emulator:
    """The deployment-service emulator as a child process (``python -m airflow_provider.emulator``).

    :param python: interpreter to run it with.
    :param workdir: where its log goes.
    :param build_seconds: revision build duration.
    :param ready_seconds: delay before a new deployment is ``READY``.
    """

    def __init__(self, python: Path, workdir: Path, *, build_seconds: float, ready_seconds: float = 1.0) -> None:
        self.api_key = secrets.token_urlsafe(16)
        command = [str(python), "-m", "airflow_provider.emulator", "--host", "127.0.0.1", "--port", "0"]
        command += ["--build-seconds", str(build_seconds), "--ready-seconds", str(ready_seconds)]
        env = child_env(python.parent)
        env["DEPLOYMENT_SERVICE_EMULATOR_API_KEY"] = self.api_key  # not on the command line
        self.process = ManagedProcess("emulator", command, env, workdir / "emulator.log", REPO_ROOT)
        self.url = ""
        self._http: httpx.Client | None = None

    def __enter__(self) -> Emulator:
        self.process.start()

        def listening() -> str | None:
            if not self.process.alive:
                raise AssertionError(f"the emulator exited at start-up\n{self.process.tail()}")
            match = _LISTENING_RE.search(self.process.log_text())
            return match.group("url") if match else None

        self.url = wait_until(listening, timeout=30, what="the emulator prints its URL", interval=0.1)
        self._http = httpx.Client(base_url=f"{self.url}/_emulator", timeout=10)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._http is not None:
            self._http.close()
        self.process.stop()

    def connection_json(self) -> str:
        """``deployment_service_default`` as an ``AIRFLOW_CONN_*`` value (with the emulator's tracing endpoints)."""
        extra = {"tracing_base_url": f"{self.url}/tracing"}
        return json.dumps(
            {"conn_type": "deployment_service", "host": self.url, "password": self.api_key, "extra": extra}
        )

    @property
    def metrics_url(self) -> str:
        """The emulator's Prometheus exposition."""
        return f"{self.url}/metrics"

    def set_behaviour(self, deployment_id: str, **behaviour: Any) -> dict[str, Any]:
        """Set what a revision's app does (``revision_id``: ``None`` the latest, ``"next"`` the next one
        created; then ``error_rate``, ``latency_ms``, ``health_status``, ``requests_per_second``,
        ``after_seconds``, ``then``)."""
        return dict(self._call("PUT", f"/deployments/{deployment_id}/behaviour", behaviour))

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._http is not None, "the emulator is not running"
        response = self._http.request(method, path, json=body)
        response.raise_for_status()
        return response.json() if response.content else None

    def deployment(self, name: str) -> dict[str, Any]:
        """Admin view of the deployment named ``name`` (with its ``revisions``)."""
        for deployment in self._call("GET", "/state")["deployments"]:
            if deployment["name"] == name:
                return dict(deployment)
        raise AssertionError(f"the emulator has no deployment named {name!r}")

    def deployments(self) -> list[dict[str, Any]]:
        """Admin view of every deployment."""
        return list(self._call("GET", "/state")["deployments"])

    def fail_next_build(self, deployment_id: str, message: str) -> None:
        """Make the next build of ``deployment_id`` end in ``BUILD_FAILED`` with ``message``."""
        self._call(
            "POST", f"/deployments/{deployment_id}/fail-next-build", {"status": "BUILD_FAILED", "message": message}
        )

    def set_build_seconds(self, deployment_id: str, seconds: float) -> None:
        """Make the builds of one deployment take ``seconds``."""
        self._call("PATCH", f"/deployments/{deployment_id}", {"build_seconds": seconds})

    def roll_out(self, deployment_id: str, image_uri: str) -> dict[str, Any]:
        """Patch ``image_uri`` through the service's own API (as its UI or command-line client would, not
        through Airflow); return the deployment it answers (``latest_revision_id`` is the new revision)."""
        assert self._http is not None, "the emulator is not running"
        response = httpx.patch(
            f"{self.url}/v2/deployments/{deployment_id}",
            json={"source_revision_config": {"image_uri": image_uri}},
            headers={"X-Api-Key": self.api_key},
            timeout=10,
        )
        if response.is_error:
            answer = f"{response.status_code}: {response.text}"
            raise AssertionError(f"PATCH /v2/deployments/{deployment_id} answered {answer}")
        return dict(response.json())

    def requests(self) -> list[dict[str, Any]]:
        """The service requests answered so far (``method``, ``path``, ``query``, ``route``...)."""
        return list(self._call("GET", "/requests"))

    def list_requests_by_ids(self) -> list[list[str]]:
        """For every ``GET /v2/deployments`` with a ``deployment_ids`` filter, the ids it asked for."""
        batches = []
        for request in self.requests():
            if request["route"] == "GET /v2/deployments":
                ids = parse_qs(request["query"]).get("deployment_ids")
                if ids:
                    batches.append(ids[0].split(","))
        return batches


@dataclass
class AirflowConfig:
    """How to run one set of Airflow services.

    :param bin_dir: the virtual environment's ``bin`` (``airflow``, ``python``).
    :param home: a fresh, empty ``AIRFLOW_HOME``.
    :param sql_alchemy_conn: metadata database URL (``None``: SQLite in ``home``).
    :param executor: ``LocalExecutor`` or ``CeleryExecutor``.
    :param env: further environment (connection, variables, example knobs, Celery settings).
    :param celery_queue: with ``CeleryExecutor``: the queue every task goes to and one worker consumes.
    :param migrated_database: with SQLite: a database that ``airflow db migrate`` of this very Airflow made and
        nothing used since; copied instead of migrating (the same tables, without the migration's seconds).
    :param database_migrated: with ``sql_alchemy_conn``: that database is already migrated by this very Airflow
        and unused (a copy of a migrated template), so it is not migrated again.
    """

    bin_dir: Path
    home: Path
    sql_alchemy_conn: str | None = None
    executor: str = "LocalExecutor"
    env: dict[str, str] = field(default_factory=dict)
    celery_queue: str | None = None
    migrated_database: Path | None = None
    database_migrated: bool = False


class AirflowServices:
    """api-server, scheduler, dag-processor and triggerer(s) as separate processes on one fresh database.

    Use as a context manager: entering migrates the database, starts the components, waits until the API
    reports them healthy and logs in; leaving stops every process it started (also after a failure).

    :param config: see :class:`AirflowConfig`.
    """

    def __init__(self, config: AirflowConfig) -> None:
        self.config = config
        self.home = config.home
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: list[ManagedProcess] = []
        self.timings: dict[str, float] = {}
        self.api: AirflowApi | None = None
        self.env = self._environment()

    # ------------------------------------------------------------------------------ set-up
    def _environment(self) -> dict[str, str]:
        config = self.config
        env = child_env(config.bin_dir)
        sql = config.sql_alchemy_conn or f"sqlite:///{config.home / 'airflow.db'}"
        env.update(
            {
                "AIRFLOW_HOME": str(config.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": config.executor,
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql,
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(24),
                # Every component signs or checks task tokens with this secret: it must be the same for all.
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                # The task supervisor often notices its task's exit only after its heartbeat wait (default
                # 5 s): every task holds its executor slot that much longer, and a trigger that fires within
                # it races the late "success" of the deferring run, which makes Airflow 3.3.2 fail the resumed
                # task (measured here with 3 s builds; apache/airflow#66374, #72716).
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
                # Fixed defaults (8793/8794) would collide with any other Airflow on this machine.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            }
        )
        if config.celery_queue is not None:
            env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"] = config.celery_queue
        env.update(config.env)
        return env

    def _start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> ManagedProcess:
        command = [str(self.config.bin_dir / "airflow"), *args]
        logs = self.home / "component-logs"
        process = ManagedProcess(name, command, env or self.env, logs / f"{name}.log", self.home)
        self.processes.append(process.start())
        return process

    def __enter__(self) -> AirflowServices:
        try:
            self._bring_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _bring_up(self) -> None:
        started = time.monotonic()
        config = self.config
        pristine = config.migrated_database if config.sql_alchemy_conn is None else None
        if pristine is not None or (config.database_migrated and config.sql_alchemy_conn is not None):
            if pristine is not None:
                shutil.copyfile(pristine, self.home / "airflow.db")
            # Each component writes a default airflow.cfg when there is none (``db migrate`` did, before any
            # started): four starting at once could read one another's half-written file. An empty one means the
            # defaults, which is what that file holds (the environment sets every value these services use).
            (self.home / "airflow.cfg").touch()
            self.timings["db copied"] = time.monotonic() - started
        else:
            self._migrate()
        self._start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1")
        self._start("scheduler", "scheduler")
        self._start("dag-processor", "dag-processor")
        self.start_triggerer("triggerer")
        worker = self.start_celery_worker(self.config.celery_queue) if self.config.celery_queue else None
        self.api = AirflowApi(self.base_url, self.home, self.diagnostics, self.check_alive)
        self.api.wait_healthy(timeout=120)
        if worker is not None:

            def worker_ready() -> bool:
                self.check_alive()
                return " ready." in worker.log_text()

            what = "the Celery worker reports ready"
            wait_until(worker_ready, timeout=60, what=what, diagnostics=self.diagnostics)
        self.timings["migrated and healthy"] = time.monotonic() - started

    def _migrate(self) -> None:
        """``airflow db migrate`` on the configured database (fails with the command's output tail)."""
        started = time.monotonic()
        airflow_db_migrate(self.config.bin_dir, self.env, self.home)
        self.timings["db migrate"] = time.monotonic() - started

    def start_triggerer(self, name: str) -> ManagedProcess:
        """Start one more triggerer (its own log-server port, so several can run side by side)."""
        env = dict(self.env)
        env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
        return self._start(name, "triggerer", env=env)

    def start_celery_worker(self, queue: str, concurrency: int = 2) -> ManagedProcess:
        """Start one Celery worker consuming ``queue`` (named after it, so it meets no other worker)."""
        args = ["celery", "worker", "--queues", queue, "--concurrency", str(concurrency)]
        return self._start("celery-worker", *args, "--celery-hostname", f"{queue}@%h", "--without-gossip")

    def process(self, name: str) -> ManagedProcess:
        """The process called ``name`` started last (a restarted component's current process)."""
        for process in reversed(self.processes):
            if process.name == name:
                return process
        raise KeyError(name)

    def restart(self, name: str) -> ManagedProcess:
        """Start component ``name`` again (same command and environment, next log file ``<name>.<n>.log``)
        after it was stopped; the stopped process stays listed for :meth:`diagnostics`."""
        old = self.process(name)
        assert old.stopped and not old.alive, f"{name} is still running"
        count = sum(process.name == name for process in self.processes)
        log_path = old.log_path.with_name(f"{name}.{count}.log")
        process = ManagedProcess(name, old.command, old.env, log_path, old.cwd)
        self.processes.append(process.start())
        return process

    # ------------------------------------------------------------------------------ tear-down
    def stop(self, grace: float = 15.0) -> dict[str, list[int]]:
        """Stop every process started, all at once (SIGTERM, ``grace`` seconds, SIGKILL); return the pids that
        survived, by component."""
        if self.api is not None:
            self.api.close()
        for process in self.processes:
            process.stopped = True
            process.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes:
            if process.wait_gone(max(0.0, deadline - time.monotonic())):
                process.signal_all(signal.SIGKILL)
        survivors = {process.name: process.wait_gone(10.0) for process in self.processes}
        return {name: pids for name, pids in survivors.items() if pids}

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        survivors = self.stop(grace=TEARDOWN_GRACE)
        if survivors and exc_type is None:
            raise AssertionError(f"processes of these components survived SIGKILL: {survivors}")

    def diagnostics(self, lines: int = 40) -> str:
        """The tail of every component's log (for failure messages)."""
        return "\n".join(process.tail(lines) for process in self.processes)

    def check_alive(self) -> None:
        """Fail at once, with its log tail, if a component exited without being stopped."""
        for process in self.processes:
            if not process.stopped and not process.alive:
                raise AssertionError(f"{process.name} exited unexpectedly\n{process.tail(60)}")

    def stale_success_races(self) -> list[str]:
        """Scheduler log lines showing Airflow's stale-"success" race failing a resumed deferred task."""
        return [line for line in self.process("scheduler").log_text().splitlines() if STALE_SUCCESS_RACE in line]


TEARDOWN_GRACE = 5.0
"""Seconds the stack's processes get to exit on SIGTERM when it is torn down, before SIGKILL. Each component is done
within a second, except that the triggerer, some of the time, waits out its trigger runner's full 10 s escalation
delay (``kill(escalation_delay=10)`` in ``triggerer_job_runner``) for a runner our SIGTERM already ended: 10 s of
nothing, seen on 2 of 10 stacks here."""
STALE_SUCCESS_RACE = "finished with state success, but the task instance's state attribute is"
"""What the scheduler logs when the executor's late "success" of a deferring run fails the resumed task
(an Airflow race: apache/airflow#66374, #72716)."""
_TRIGGER_LOG_RE = re.compile(r"\.trigger\.(?P<job>\d+)\.log$")


@dataclass
class TaskLog:
    """One try of a task instance's log as the REST API serves it (worker and triggerer parts merged).

    :param events: the structured log events, oldest first.
    """

    events: list[dict[str, Any]]

    def messages(self, logger: str = "") -> list[str]:
        """Each event's message (only of loggers whose name contains ``logger``, when given)."""
        return [str(event.get("event", "")) for event in self.events if logger in str(event.get("logger", ""))]

    def exception_values(self) -> list[str]:
        """The value (message) of every exception in the log's error details, chained ones included.

        A task that raises logs "Task failed with exception" with the exception under ``error_detail``
        (structlog's dict form: a list of ``{exc_type, exc_value, frames, ...}``), not in the message.
        """
        values = []
        for event in self.events:
            details = event.get("error_detail")
            for detail in details if isinstance(details, list) else []:
                if isinstance(detail, dict) and detail.get("exc_value"):
                    values.append(str(detail["exc_value"]))
        return values

    def mentions(self, fragment: str) -> bool:
        """Whether any message or any logged exception's value contains ``fragment``."""
        return any(fragment in text for text in [*self.messages(), *self.exception_values()])

    def count(self, fragment: str) -> int:
        """How many messages contain ``fragment``."""
        return sum(fragment in message for message in self.messages())

    def text(self) -> str:
        """Every event as one JSON line (messages, levels and error details)."""
        return "\n".join(json.dumps(event) for event in self.events)

    def triggerer_job_ids(self) -> set[int]:
        """Ids of the triggerer jobs that wrote to this log (files ``<log>.trigger.<job id>.log``)."""
        return {int(match.group("job")) for text in self.messages() if (match := _TRIGGER_LOG_RE.search(text))}


class AirflowApi:
    """The Airflow REST API as the simple auth manager's admin.

    :param base_url: ``http://127.0.0.1:PORT``.
    :param home: ``AIRFLOW_HOME`` (holds the generated admin password).
    :param diagnostics: text for failure messages.
    :param check_alive: raises when a component died (every wait asks it, to fail fast).
    """

    def __init__(
        self, base_url: str, home: Path, diagnostics: Callable[[], str], check_alive: Callable[[], None]
    ) -> None:
        self.base_url = base_url
        self.home = home
        self.diagnostics = diagnostics
        self.check_alive = check_alive
        self.http = httpx.Client(base_url=base_url, timeout=30)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def wait_healthy(self, timeout: float) -> None:
        """Wait until the API reports the metadatabase, scheduler, triggerer and dag-processor healthy;
        then log in."""

        def healthy() -> bool:
            self.check_alive()
            try:
                response = self.http.get("/api/v2/monitor/health")
            except httpx.HTTPError:
                return False
            if response.status_code != 200:
                return False
            health = response.json()
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

        what = "Airflow reports all components healthy"
        wait_until(healthy, timeout=timeout, what=what, diagnostics=self.diagnostics)
        self.login()

    def login(self) -> None:
        """Get a bearer token for ``admin`` with the generated password."""
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        response = self.http.post("/auth/token", json={"username": "admin", "password": passwords["admin"]})
        if response.status_code != 201:
            raise AssertionError(f"POST /auth/token answered {response.status_code}: {response.text}")
        self.http.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call; a non-2xx answer fails with the method, path and answer."""
        response = self.http.request(method, path, **kwargs)
        if response.is_error:
            raise AssertionError(f"{method} {path} answered {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float) -> None:
        """Wait until the dag-processor has serialized every DAG in ``dag_ids``; make sure none is paused."""
        wanted = set(dag_ids)

        def parsed() -> bool:
            self.check_alive()
            dags = self.request("GET", "/api/v2/dags", params={"limit": 100})["dags"]
            return wanted <= {dag["dag_id"] for dag in dags}

        def diagnostics() -> str:
            return f"import errors: {self.import_errors()}\n{self.diagnostics()}"

        what = f"the dag-processor serializes {sorted(wanted)}"
        wait_until(parsed, timeout=timeout, what=what, interval=1.0, diagnostics=diagnostics)
        for dag_id in sorted(wanted):
            self.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def import_errors(self) -> list[dict[str, Any]]:
        """DAG import errors the dag-processor recorded."""
        return list(self.request("GET", "/api/v2/importErrors")["import_errors"])

    def trigger(self, dag_id: str, run_id: str, conf: Mapping[str, Any] | None = None) -> None:
        """Start a manual DAG run."""
        body = {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf or {})}
        self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", json=body)

    def run_state(self, dag_id: str, run_id: str) -> str:
        """State of one DAG run."""
        return str(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a run (mapped ones included)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        return list(self.request("GET", path, params={"limit": 100})["task_instances"])

    def describe_run(self, dag_id: str, run_id: str) -> str:
        """One line per task instance: ``task[map_index]=state``."""
        states = []
        for ti in sorted(self.task_instances(dag_id, run_id), key=lambda ti: (ti["task_id"], ti["map_index"])):
            index = f"[{ti['map_index']}]" if ti["map_index"] >= 0 else ""
            states.append(f"{ti['task_id']}{index}={ti['state']}")
        return f"{dag_id}/{run_id}: {', '.join(states)}"

    def wait_for_runs(self, runs: Iterable[tuple[str, str]], timeout: float) -> dict[tuple[str, str], str]:
        """Wait until every ``(dag_id, run_id)`` is ``success`` or ``failed``; return their states."""
        pending = list(runs)
        states: dict[tuple[str, str], str] = {}

        def finished() -> bool:
            self.check_alive()
            for key in [key for key in pending if key not in states]:
                state = self.run_state(*key)
                if state in TERMINAL_RUN_STATES:
                    states[key] = state
            return len(states) == len(pending)

        def diagnostics() -> str:
            unfinished = [self.describe_run(*key) for key in pending if key not in states]
            return "\n".join([*unfinished, self.diagnostics()])

        names = ", ".join(f"{dag_id}/{run_id}" for dag_id, run_id in pending)
        wait_until(finished, timeout=timeout, what=f"DAG runs {names} finish", interval=1.0, diagnostics=diagnostics)
        return states

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int = 1) -> TaskLog:
        """The full log of one try of a task instance."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        params = {"full_content": "true", "map_index": map_index}
        answer = self.request("GET", path, params=params, headers={"Accept": "application/json"})
        content = answer.get("content") or []
        return TaskLog([item if isinstance(item, dict) else {"event": str(item)} for item in content])

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id``, oldest first."""
        params = {"limit": 100, "order_by": "id"}
        return list(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns", params=params)["dag_runs"])

    def upstream_asset_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The asset events that triggered a run."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents"
        return list(self.request("GET", path)["asset_events"])

    def asset(self, uri: str) -> dict[str, Any] | None:
        """The asset with exactly this URI (with its ``watchers``), or ``None`` while there is none."""
        assets = self.request("GET", "/api/v2/assets", params={"uri_pattern": uri, "limit": 100})["assets"]
        return next((asset for asset in assets if asset["uri"] == uri), None)

    def asset_state_store(self, asset_id: int) -> dict[str, Any]:
        """An asset's state store (Airflow 3.3): ``{key: value}``."""
        answer = self.request("GET", f"/api/v2/assets/{asset_id}/state-store", params={"limit": 100})
        return {entry["key"]: entry["value"] for entry in answer["asset_state_store"]}

    def alive_triggerer_jobs(self) -> set[int]:
        """Ids of the triggerer jobs that are running and heartbeating."""
        params = {"job_type": "TriggererJob", "is_alive": "true", "limit": 100}
        return {int(job["id"]) for job in self.request("GET", "/api/v2/jobs", params=params)["jobs"]}
