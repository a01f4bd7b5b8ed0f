"""What the PostgreSQL and Celery scenarios need beyond the main virtual environment.

* ``.e2e/venv``: a separate environment with ``requirements/test.lock``, the Celery provider and a
  PostgreSQL driver (``requirements-e2e.txt``) and this package (editable); built once with ``uv`` and
  rebuilt only when one of its inputs (or :data:`BUILD_RECIPE`) changes. The main ``.venv`` never gets these
  packages. Its packages are compiled to bytecode at install time, as the Makefile installs ``.venv``.
* A throwaway PostgreSQL database per scenario (created and dropped through that environment's driver), a copy
  of a database migrated once (:func:`migrated_template`).
* Reachability checks for PostgreSQL and Redis, so the scenarios can skip with a clear reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from e2e_airflow import REPO_ROOT, airflow_db_migrate, child_env, port_open

E2E_DIR = REPO_ROOT / ".e2e"
VENV = E2E_DIR / "venv"
REQUIREMENTS = (REPO_ROOT / "requirements" / "test.lock", Path(__file__).with_name("requirements-e2e.txt"))
PG_HOST, PG_PORT = "127.0.0.1", 5432
PG_USERS = ("postgres", "root")
PG_MAINTENANCE_DATABASES = ("test", "postgres")
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379

BUILD_RECIPE = "uv pip install --compile-bytecode"
"""How the environment is installed; part of its inputs, so that a change rebuilds it.

Compiled at install time: where ``PYTHONDONTWRITEBYTECODE`` is set (as on the suite's machines) nothing is cached
at import, and every Airflow component then compiled Airflow from source at start-up, about 2.5 s of CPU more per
process (measured: ``import airflow.jobs.scheduler_job_runner, airflow.api_fastapi.app`` 4.9 s instead of 2.4 s),
with five or six processes starting at once on two cores."""

_NOT_LOGGED_IN = 3
"""Exit code of the database script when no user could log in (the tests skip then)."""

_NOT_FOUND = 4
"""Exit code of the database script's ``exists`` when there is no such database."""

_DATABASE_SCRIPT = """
import sys
import psycopg2

action, name, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
users, databases, other = sys.argv[5].split(","), sys.argv[6].split(","), sys.argv[7]
errors = []
for user in users:
    for database in databases:
        try:
            connection = psycopg2.connect(host=host, port=port, user=user, dbname=database, connect_timeout=5)
        except psycopg2.OperationalError as err:
            errors.append(f"{user}@{database}: {str(err).strip()}")
            continue
        connection.autocommit = True
        found = True
        with connection.cursor() as cursor:
            if action == "create":
                cursor.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{other}"' if other else ""))
            elif action == "rename":
                cursor.execute(f'ALTER DATABASE "{name}" RENAME TO "{other}"')
            elif action == "exists":
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                found = cursor.fetchone() is not None
            else:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.close()
        print(user)
        sys.exit(0 if found else 4)
print("; ".join(errors), file=sys.stderr)
sys.exit(3)
"""


class BackendUnavailable(Exception):
    """PostgreSQL or Redis cannot be used here (the test skips with this reason)."""


def _run(command: list[str], what: str, timeout: float) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise AssertionError(f"{what} failed with exit code {result.returncode}:\n{tail}")
    return result.stdout


def _uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        raise AssertionError(f"uv is needed to build {VENV} (the Makefile installs it into .venv)")
    return found


def environment_key() -> str:
    """A digest of everything ``.e2e/venv`` is built from (its inputs, this checkout, the Python, the recipe)."""
    digest = hashlib.sha256()
    for path in (*REQUIREMENTS, REPO_ROOT / "pyproject.toml"):
        digest.update(path.read_bytes())
    digest.update(f"{REPO_ROOT}|{sys.version}|{BUILD_RECIPE}".encode())
    return digest.hexdigest()


def e2e_environment(timeout: float = 900.0) -> Path:
    """The ``bin`` folder of ``.e2e/venv``, built first if missing or stale (under a file lock)."""
    key = environment_key()
    bin_dir = VENV / "bin"
    stamp = VENV / ".e2e-inputs"
    E2E_DIR.mkdir(exist_ok=True)
    with (E2E_DIR / "venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == key and (bin_dir / "airflow").exists():
            return bin_dir
        shutil.rmtree(VENV, ignore_errors=True)
        uv = _uv()
        python = str(bin_dir / "python")
        _run([uv, "venv", "--quiet", "--python", sys.executable, str(VENV)], "uv venv", timeout)
        install = [uv, "pip", "install", "--quiet", "--python", python]
        requirements = (arg for path in REQUIREMENTS for arg in ("-r", str(path)))
        _run([*install, "--compile-bytecode", *requirements], "uv pip install", timeout)
        _run([*install, "--no-deps", "-e", str(REPO_ROOT)], "uv pip install -e .", timeout)
        stamp.write_text(key)
    return bin_dir


def require_postgres() -> None:
    """:class:`BackendUnavailable` unless something listens on 127.0.0.1:5432."""
    if not port_open(PG_HOST, PG_PORT):
        raise BackendUnavailable(f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT}")


def require_redis() -> None:
    """:class:`BackendUnavailable` unless Redis answers PING on 127.0.0.1:6379."""
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as err:
        raise BackendUnavailable(f"Redis is not reachable on {REDIS_HOST}:{REDIS_PORT}: {err}") from None
    if not answer.startswith(b"+PONG"):
        raise BackendUnavailable(f"Redis on {REDIS_HOST}:{REDIS_PORT} answered PING with {answer!r}")


@dataclass
class PostgresDatabase:
    """A database this test run created (and drops).

    :param python: the interpreter with ``psycopg2`` that creates and drops it.
    :param name: database name.
    :param user: the user that could log in (trust authentication).
    """

    python: Path
    name: str
    user: str = ""

    def url(self, scheme: str = "postgresql+psycopg2") -> str:
        """SQLAlchemy URL of the database (``db+postgresql`` for a Celery result backend)."""
        return f"{scheme}://{self.user}@{PG_HOST}:{PG_PORT}/{self.name}"

    def _call(self, action: str, other: str = "") -> str:
        command = [str(self.python), "-c", _DATABASE_SCRIPT, action, self.name, PG_HOST, str(PG_PORT)]
        command += [",".join(PG_USERS), ",".join(PG_MAINTENANCE_DATABASES), other]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if result.returncode == _NOT_LOGGED_IN:
            raise BackendUnavailable(f"cannot log in to PostgreSQL on {PG_HOST}:{PG_PORT}: {result.stderr.strip()}")
        if result.returncode == _NOT_FOUND and action == "exists":
            return ""
        if result.returncode != 0:
            raise AssertionError(f"{action} database {self.name} failed:\n{result.stderr[-3000:]}")
        return result.stdout.strip()

    def create(self, template: str = "") -> PostgresDatabase:
        """``CREATE DATABASE`` (a copy of ``template`` when given); remembers the user that could do it."""
        self.user = self._call("create", template)
        return self

    def exists(self) -> bool:
        """Whether the database exists (remembers the user that could look)."""
        self.user = self._call("exists")
        return bool(self.user)

    def rename(self, new_name: str) -> None:
        """``ALTER DATABASE ... RENAME TO new_name``."""
        self._call("rename", new_name)
        self.name = new_name

    def drop(self) -> None:
        """``DROP DATABASE ... WITH (FORCE)`` (ends connections left behind)."""
        self._call("drop")


def new_database(python: Path, template: str = "") -> PostgresDatabase:
    """A freshly created ``airflow_e2e_<random>`` database (a copy of ``template`` when given)."""
    return PostgresDatabase(python, f"airflow_e2e_{secrets.token_hex(4)}").create(template)


def migrated_template(bin_dir: Path) -> str:
    """The name of a PostgreSQL database that ``airflow db migrate`` of ``bin_dir``'s Airflow made and nothing
    used since: the template each scenario's database is created from (``CREATE DATABASE ... TEMPLATE``, well
    under a second) instead of migrating its own (6 to 10 s measured here).

    Made once per :func:`environment_key` (the Airflow installed, so the same migrations) and kept for the next
    sessions: it is migrated under a temporary name and renamed only once the migration succeeded, so a template
    under its final name is always complete; nothing ever connects to it but ``CREATE DATABASE``.
    """
    python = bin_dir / "python"
    template = PostgresDatabase(python, f"airflow_e2e_template_{environment_key()[:16]}")
    if template.exists():
        return template.name
    building = new_database(python)
    try:
        with tempfile.TemporaryDirectory(prefix="airflow-e2e-template-") as home:
            env = child_env(bin_dir)
            env.update(
                {
                    "AIRFLOW_HOME": home,
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": building.url(),
                }
            )
            airflow_db_migrate(bin_dir, env, home, " of the template")
        if template.exists():  # another session finished one meanwhile
            building.drop()
        else:
            building.rename(template.name)
    except BaseException:
        building.drop()
        raise
    return template.name


def delete_redis_keys(python: Path, pattern: str) -> None:
    """Delete the Redis keys (database 0) matching ``pattern`` (what a test's Celery queue left)."""
    script = (
        "import sys, redis\n"
        "client = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), db=0)\n"
        "keys = list(client.scan_iter(match=sys.argv[3]))\n"
        "if keys:\n"
        "    client.delete(*keys)\n"
    )
    subprocess.run([str(python), "-c", script, REDIS_HOST, str(REDIS_PORT), pattern], timeout=30, check=False)
