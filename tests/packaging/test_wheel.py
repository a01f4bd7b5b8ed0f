"""The wheel installs cleanly into a fresh virtual environment and Airflow there sees the whole provider.

Builds the sdist and the wheel (from the sdist, as ``make dist`` does), installs the wheel with its
dependencies pinned by ``requirements/test.lock`` into a new virtual environment (uv's cache makes that a
matter of seconds), and checks, from outside the repository so nothing is imported from the source tree:
``airflow providers list`` lists the provider, its connection type and extra link are registered, the
Rollouts view's plugin registers with its pages shipped, the emulator finds its seed data, and Airflow's
provider example-DAG lookup finds the example DAGs, which import without errors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_provider import __version__
from airflow_provider.defaults import CONN_TYPE
from airflow_provider.get_provider_info import PACKAGE_NAME
from airflow_provider.plugins.rollouts.app import SCRIPTS

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DAGS = sorted(path.name for path in (REPO / "example_dags").glob("*.py"))
DAG_IDS = {"rollout_after_build", "deploy_fleet_after_build", "onboard_repository"}
EXTRA_LINK = "airflow_provider.operators.deployment_service.DeploymentLink"


def _uv() -> str:
    beside_python = Path(sys.executable).with_name("uv")
    found = str(beside_python) if beside_python.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("uv is needed to build and install the wheel (make installs it into .venv)")
    return found


def _run(command: list[str], *, timeout: float, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``command``; on failure or timeout, fail the test showing the command and all it printed."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        errs = (err.stderr or b"").decode() if isinstance(err.stderr, bytes) else (err.stderr or "")
        pytest.fail(f"timed out after {timeout} s: {' '.join(command)}\n--- stdout\n{out}\n--- stderr\n{errs}")
    if done.returncode != 0:
        pytest.fail(
            f"exit {done.returncode} after {time.monotonic() - started:.1f} s: {' '.join(command)}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(python of a fresh venv with the wheel installed, its environment, a scratch dir outside the repo)."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    uv = _uv()
    _run([uv, "build", "--out-dir", str(dist), str(REPO)], timeout=120, cwd=root)
    wheels = sorted(dist.glob("*.whl"))
    assert [wheel.name for wheel in wheels] == [f"airflow_provider_deployment_service-{__version__}-py3-none-any.whl"]
    assert sorted(dist.glob("*.tar.gz")), f"no sdist in {sorted(p.name for p in dist.iterdir())}"
    venv = root / "venv"
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], timeout=60, cwd=root)
    python = venv / "bin" / "python"
    lock = REPO / "requirements" / "test.lock"
    _run(
        [uv, "pip", "install", "--quiet", "--python", str(python), str(wheels[0]), "--constraint", str(lock)],
        timeout=240,
        cwd=root,
    )
    home = root / "airflow-home"
    home.mkdir()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV", "DEPLOYMENT_SERVICE"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return python, env, root


def test_airflow_lists_the_installed_provider(installed: tuple[Path, dict[str, str], Path]) -> None:
    python, env, root = installed
    airflow = str(python.with_name("airflow"))
    shown = _run([airflow, "providers", "list", "--output", "json"], timeout=90, cwd=root, env=env)
    providers = {row["package_name"]: row for row in json.loads(shown[shown.index("[") :])}
    assert PACKAGE_NAME in providers, f"{PACKAGE_NAME} not in `airflow providers list`: {sorted(providers)}"
    assert providers[PACKAGE_NAME]["version"] == __version__, providers[PACKAGE_NAME]


CHECKS = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    import airflow_provider
    from airflow.providers_manager import ProvidersManager
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag
    from airflow_provider.emulator import EmulatorState, example_data_path

    manager = ProvidersManager()
    hook = manager.hooks.get(sys.argv[1])
    bundles = DagBundlesManager()
    bundles.parse_config()
    name = sys.argv[2] + "-example-dags"
    bundle = bundles.get_bundle(name) if name in {b.name for b in bundles.get_all_dag_bundles()} else None
    folder = Path(bundle.path) if bundle is not None else None
    bag = DagBag(dag_folder=str(folder)) if folder is not None else None
    data = example_data_path()
    from importlib import resources
    from airflow import plugins_manager
    plugins, plugin_errors = plugins_manager._get_plugins()
    static = resources.files("airflow_provider.plugins.rollouts") / "static"
    print(json.dumps({
        "plugins": sorted(plugin.name for plugin in plugins),
        "plugin_errors": plugin_errors,
        "view_files": {path.name: len(path.read_bytes()) for path in static.iterdir()},
        "view_dir": str(static),
        "package_file": airflow_provider.__file__,
        "hook": None if hook is None else [hook.hook_class_name, hook.connection_type, hook.package_name],
        "extra_links": sorted(manager.extra_links_class_names),
        "example_dag_folder": None if folder is None else str(folder),
        "example_dag_files": None if folder is None else sorted(p.name for p in folder.glob("*.py")),
        "dag_ids": None if bag is None else sorted(bag.dag_ids),
        "import_errors": None if bag is None else {k: v[-400:] for k, v in bag.import_errors.items()},
        "data_file": str(data),
        "seed_deployments": len(EmulatorState(api_key="k").snapshot()["deployments"]) if data.is_file() else None,
    }))
    """
)


def test_installed_provider_registers_everything_and_finds_its_files(
    installed: tuple[Path, dict[str, str], Path],
) -> None:
    python, env, root = installed
    script = root / "checks.py"
    script.write_text(CHECKS)
    out = _run([str(python), str(script), CONN_TYPE, PACKAGE_NAME], timeout=120, cwd=root, env=env)
    seen = json.loads(out.strip().splitlines()[-1])
    site = Path(python).parent.parent
    # Imported from the fresh environment, not from the source tree.
    assert Path(seen["package_file"]).is_relative_to(site), seen["package_file"]
    assert seen["hook"] == [
        "airflow_provider.hooks.deployment_service.DeploymentServiceHook",
        CONN_TYPE,
        PACKAGE_NAME,
    ], seen
    assert EXTRA_LINK in seen["extra_links"], seen["extra_links"]
    # The example DAGs are where Airflow's provider example lookup (load_examples) looks for them.
    assert seen["example_dag_folder"] is not None, f"no example-DAG bundle for {PACKAGE_NAME}: {seen}"
    assert Path(seen["example_dag_folder"]).is_relative_to(site), seen["example_dag_folder"]
    assert seen["example_dag_files"] == EXAMPLE_DAGS, seen
    assert seen["import_errors"] == {}, seen["import_errors"]
    assert set(seen["dag_ids"]) >= DAG_IDS, seen["dag_ids"]
    # The emulator's seed data is inside the installed package, where example_data_path() looks.
    assert Path(seen["data_file"]).is_relative_to(site), seen["data_file"]
    assert seen["seed_deployments"], seen
    # The Rollouts view: its plugin registers, and its pages ship in the wheel.
    assert "deployment_service_rollouts" in seen["plugins"] and seen["plugin_errors"] == {}, seen
    assert Path(seen["view_dir"]).is_relative_to(site), seen["view_dir"]
    shipped = {name for name, size in seen["view_files"].items() if size > 0}
    assert shipped >= {"page.html", *SCRIPTS, "rollouts.css", "rollouts.svg"}, seen["view_files"]
