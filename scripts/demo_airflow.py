"""The demo's Airflow: one process that runs Airflow CLI commands (``db migrate``, ``dags test ...``) one after
the other, as ``airflow <command>`` would, without starting Airflow again for each.

Every ``airflow`` process pays Airflow's import and, for ``dags test``, the warm-up of the in-process task
runner (about 20 s on a busy two-core machine); a demo of several rollouts paid it for each. Run as a script,
this module reads one command per line on stdin (a JSON list of the CLI's arguments), runs it through
Airflow's own CLI parser (``airflow.__main__`` does the same), and prints :data:`DONE` and the command's exit
code after its output; :class:`AirflowProcess` is the demo's side of that conversation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

DONE = "@@demo-airflow-command-done"
"""The line that ends a command's output, followed by its exit code."""


class AirflowProcess:
    """One Python process with Airflow imported, running the demo's Airflow commands in turn.

    :param env: the environment of the process (Airflow home, database, connection, ...).
    :param step_timeout: seconds one command may take; past it the process is stopped.
    """

    def __init__(self, env: dict[str, str], step_timeout: float) -> None:
        self.step_timeout = step_timeout
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(Path(__file__).resolve())],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def run(self, log_path: Path, args: list[str], echo: Callable[[str], None]) -> int:
        """Run ``airflow <args>`` in the process; its output to ``log_path``, each line also to ``echo``;
        return its exit code.

        :param log_path: the command's log file.
        :param args: the CLI's arguments, e.g. ``["dags", "test", "analysed_rollout", "-c", "{}"]``.
        :param echo: called with every line of output (the caller picks what to show).
        """
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(args) + "\n")
        stdin.flush()
        deadline = time.monotonic() + self.step_timeout
        with log_path.open("w") as log:
            for line in stdout:
                if line.startswith(DONE):
                    return int(line.split()[-1])
                log.write(line)
                echo(line)
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"`airflow {' '.join(args)}` took more than {self.step_timeout} s; see {log_path}")
        raise SystemExit(f"the demo's Airflow process ended during `airflow {' '.join(args)}`; see {log_path}")

    def stop(self) -> None:
        """Stop the process group (TERM, then KILL after 10 s)."""
        if self.process.poll() is None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                pass
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _run_command(args: list[str]) -> int:
    """Run one Airflow CLI command in this process as ``airflow.__main__.main`` does; its exit code."""
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()
    parsed = cli_parser.get_parser().parse_args(args)
    try:
        parsed.func(parsed)
    except SystemExit as exit_:  # `dags test` of a failed run ends with SystemExit("DagRun failed")
        if exit_.code not in (None, 0):
            if not isinstance(exit_.code, int):
                print(exit_.code, flush=True)
            return exit_.code if isinstance(exit_.code, int) else 1
    except Exception as error:  # what `airflow` would print before exiting 1
        print(f"{type(error).__name__}: {error}", flush=True)
        return 1
    return 0


def serve(commands: TextIO) -> None:
    """Run each command read from ``commands`` (a JSON list of arguments per line) until end of input."""
    from airflow import configuration  # first, as airflow.__main__ does (import cycles otherwise)

    del configuration
    for line in commands:
        if not line.strip():
            continue
        code = _run_command(json.loads(line))
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"{DONE} {code}", flush=True)


if __name__ == "__main__":
    serve(sys.stdin)
