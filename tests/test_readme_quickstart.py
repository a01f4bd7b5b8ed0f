"""The README's quickstart cannot rot: its commands and its DAG are taken from README.md and run as a new
user would (fresh ``AIRFLOW_HOME``, a shell, ``airflow dags test``), and the guide repeats them exactly."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
GUIDE = REPO_ROOT / "docs" / "guides" / "quickstart.md"
QUICKSTART_PORT = "8900"


def _block_after(text: str, marker: str) -> tuple[str, str]:
    """``(marker line's argument, code)`` of the fenced block that follows ``<!-- marker ...-->``."""
    found = re.search(rf"<!-- {re.escape(marker)}(?P<arg>[^>]*)-->\s*```\w+\n(?P<code>.*?)```", text, re.S)
    assert found, f"README.md has no block marked {marker!r}"
    return found["arg"].strip(), found["code"]


def _fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def quickstart() -> tuple[str, str, str]:
    """``(commands, dag path, dag source)`` as README.md shows them."""
    text = README.read_text()
    _, commands = _block_after(text, "quickstart:commands")
    dag_path, dag = _block_after(text, "quickstart:dag")
    return commands, dag_path, dag


def test_the_quickstart_is_five_commands_and_the_guide_repeats_it() -> None:
    commands, dag_path, dag = quickstart()
    lines = [line for line in commands.splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 4 and dag_path == "dags/my_rollout.py"  # + "save the DAG" = five steps
    guide = GUIDE.read_text()
    assert [line for block in _fenced(guide, "bash") for line in block.splitlines()] == lines
    assert _fenced(guide, "python") == [dag]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_quickstart_runs_verbatim(tmp_path: Path) -> None:
    commands, dag_path, dag = quickstart()
    # The only change: another port, as engineers and CI jobs may share the machine.
    port = str(_free_port())
    script = commands.replace(QUICKSTART_PORT, port)
    (tmp_path / dag_path).parent.mkdir(parents=True)
    (tmp_path / dag_path).write_text(dag)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")  # a new user's empty home
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log_path = tmp_path / "quickstart.log"
    with log_path.open("w") as log:  # a file, not a pipe: the emulator left in the background keeps a pipe open
        shell = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: the emulator it starts in the background goes too
        )
        try:
            shell.wait(timeout=420)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the quickstart did not finish in time:\n{log_path.read_text()[-3000:]}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)
            shell.wait()
    output = log_path.read_text()
    assert shell.returncode == 0, output[-3000:]
    assert "Deployment service emulator listening on" in output, output[-3000:]
    assert "Patching deployment 'search-staging'" in output, output[-3000:]
    assert "source_revision_config.image_uri='registry.example.com/acme/search:1.2.3'" in output
    assert re.search(r"revision \S+ is live \(status READY\)", output), output[-3000:]
    assert re.search(r"state=success|DagRun Finished.*success", output), output[-3000:]
