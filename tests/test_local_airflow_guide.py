"""The guide to running Airflow locally (``docs/guides/local-airflow.md``): its commands name only settings
that exist. Every ``AIRFLOW__SECTION__KEY`` is an option of the installed Airflow, every
``DEPLOYMENT_SERVICE_EXAMPLE_*`` variable is one an example DAG reads, every ``AIRFLOW_VAR_*`` a Variable an
example DAG reads, the connection parses as this provider's connection type, and the emulator's flags are
its own."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.docs_snippets import documented_block

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = "\n".join(path.read_text() for path in sorted((ROOT / "example_dags").glob("*.py")))


def guide_exports() -> dict[str, str]:
    commands = documented_block("guides/local-airflow.md", "local-airflow:commands")
    exports = {}
    for line in commands.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            exports[name] = shlex.split(value)[0] if value else ""
    assert exports, "the guide's commands export nothing"
    return exports


def test_every_airflow_setting_in_the_guide_exists() -> None:
    from airflow.configuration import retrieve_configuration_description

    # Every option Airflow documents (an option without a default, such as [api] base_url, included).
    options = {
        (section, option)
        for section, described in retrieve_configuration_description().items()
        for option in described.get("options", {})
    }
    unknown = []
    for name in guide_exports():
        match = re.fullmatch(r"AIRFLOW__([A-Z0-9_]+?)__([A-Z0-9_]+)", name)
        if match and (match.group(1).lower(), match.group(2).lower()) not in options:
            unknown.append(name)
    assert not unknown, f"settings Airflow does not have: {unknown}"


def test_every_example_variable_in_the_guide_is_read_by_an_example_dag() -> None:
    exports = guide_exports()
    unread = [
        name for name in exports if name.startswith("DEPLOYMENT_SERVICE_EXAMPLE_") and f'"{name}"' not in EXAMPLES
    ]
    assert not unread, f"environment variables no example DAG reads: {unread}"
    variables = [name[len("AIRFLOW_VAR_") :].lower() for name in exports if name.startswith("AIRFLOW_VAR_")]
    unused = [key for key in variables if f'"{key}"' not in EXAMPLES]
    assert not unused, f"Variables no example DAG reads: {unused}"


def test_the_guides_connection_is_this_providers() -> None:
    from airflow_provider.hooks.deployment_service import DeploymentServiceHook

    conn = json.loads(guide_exports()["AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"])
    assert conn["conn_type"] == DeploymentServiceHook.conn_type
    assert conn["host"].startswith("http://127.0.0.1:")


def test_the_guides_emulator_flags_are_the_emulators() -> None:
    from airflow_provider.emulator.__main__ import build_parser

    commands = documented_block("guides/local-airflow.md", "local-airflow:commands")
    (line,) = [line for line in commands.splitlines() if "airflow_provider.emulator" in line]
    arguments = shlex.split(line.rstrip("&"))[3:]
    build_parser().parse_args(arguments)  # exits (SystemExit) naming an unknown flag
