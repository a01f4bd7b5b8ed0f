"""Conformance: the service's own clients, written by its authors, run against the emulator.

* ``langgraph-cli`` (pinned in the test lock), driven as users drive it, a subprocess: ``deploy list``, ``deploy
  --image-uri`` (create, then update), following the revision to ``DEPLOYED`` and to ``BUILD_FAILED``, ``deploy
  revisions list``, ``deploy logs`` (build and deploy). Its own client class creates a serverless (``dev_zero``)
  deployment, the body its remote builds send.
* ``langsmith``: finds a project by name and by id, lists projects with their statistics and reads run statistics
  with feedback.

The emulator is organization-scoped (every request must name the workspace) and serves under a path prefix, as a
self-hosted control plane does. Any request a client made that the emulator did not serve fails the test, named.
``langgraph-sdk`` (the CLI's dependency, pinned too) talks to a deployed app's own API, not to this service: it
makes no call here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.emulator.server import EmulatorServer

API_KEY = "conformance-key"
TENANT = "5a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
IMAGE = "registry.example.com/acme/agent@sha256:"
CLI_TIMEOUT = 60  # seconds: one command; a deploy takes about a second here
NAME = "conformance-agent"


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    """One emulator for the module: a real clock with one-second builds, so the CLI's one-second polls see them."""
    with EmulatorServer(
        api_key=API_KEY, tenant_id=TENANT, build_seconds=1.0, ready_seconds=0.5, path_prefix="/api-host"
    ) as server:
        yield server


@pytest.fixture
def served(emulator: EmulatorServer) -> Iterator[EmulatorServer]:
    """The emulator, with a check afterwards that it served every request the clients made."""
    emulator.state.reset_requests()
    yield emulator
    unserved = [
        f"{record.method} {record.path}{'?' + record.query if record.query else ''} -> {record.status_code}"
        for record in emulator.state.request_log
        if record.status_code is None or record.status_code >= 400
    ]
    assert not unserved, "requests of the real clients the emulator did not serve:\n  " + "\n  ".join(unserved)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A minimal project directory (``langgraph.json`` names one graph), where users run the CLI."""
    root = tmp_path_factory.mktemp("agent")
    (root / "langgraph.json").write_text(json.dumps({"dependencies": ["."], "graphs": {"agent": "./agent.py:graph"}}))
    (root / "agent.py").write_text("graph = None\n")
    return root


def cli(emulator: EmulatorServer, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``langgraph ARGS`` in ``project`` against the emulator (key, workspace and control-plane URL from the
    environment, as users set them; no analytics)."""
    env = {
        **os.environ,
        "LANGGRAPH_HOST_API_KEY": API_KEY,
        "LANGGRAPH_HOST_URL": emulator.base_url,
        "LANGSMITH_TENANT_ID": TENANT,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "langgraph_cli", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def said(run: subprocess.CompletedProcess[str]) -> str:
    return f"exit {run.returncode}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"


def result_of(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The ``result`` event of a ``deploy --json`` run."""
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    found = [event for event in events if event.get("event") == "result"]
    assert found, said(run)
    result: dict[str, Any] = found[-1]
    return result


def deploy(emulator: EmulatorServer, project: Path, digest_char: str) -> subprocess.CompletedProcess[str]:
    image = IMAGE + digest_char * 64
    return cli(emulator, project, "deploy", "--image-uri", image, "--name", NAME, "--no-input", "--json")


# ------------------------------------------------------------------------------------------ the CLI
def test_the_cli_lists_deployments_in_its_workspace(served: EmulatorServer, project: Path) -> None:
    run = cli(served, project, "deploy", "list", "--json", "--name-contains", "checkout-api")
    assert run.returncode == 0, said(run)
    listed = {item["name"] for item in json.loads(run.stdout)}
    assert {"checkout-api-dev", "checkout-api-staging", "checkout-api-prod"} <= listed
    assert all("checkout-api" in name for name in listed)


def test_the_cli_deploys_an_image_follows_it_and_reads_its_logs(served: EmulatorServer, project: Path) -> None:
    created = deploy(served, project, "a")
    assert created.returncode == 0 and result_of(created)["status"] == "succeeded", said(created)
    deployment = served.state.find_deployment(NAME)
    assert deployment["source"] == "external_docker" and deployment["tenant_id"] == TENANT
    assert deployment["source_revision_config"]["image_uri"] == IMAGE + "a" * 64

    updated = deploy(served, project, "b")
    assert updated.returncode == 0 and result_of(updated)["status"] == "succeeded", said(updated)
    live = served.state.get_deployment(deployment["id"])
    assert live["source_revision_config"]["image_uri"] == IMAGE + "b" * 64
    assert live["active_revision_id"] == live["latest_revision_id"] != deployment["active_revision_id"]

    served.state.fail_next_build(deployment["id"], "BUILD_FAILED", "pip: no matching distribution for agentkit==9")
    failed = deploy(served, project, "c")
    assert failed.returncode == 1 and result_of(failed)["status"] == "failed", said(failed)
    broken = served.state.get_deployment(deployment["id"])["latest_revision_id"]
    assert served.state.get_revision(deployment["id"], broken)["status"] == "BUILD_FAILED"

    revisions = cli(served, project, "deploy", "revisions", "list", deployment["id"])
    assert revisions.returncode == 0, said(revisions)
    rows = [line.split()[:2] for line in revisions.stdout.splitlines()[2:] if line.strip()]
    assert rows == [[broken, "BUILD_FAILED"], [live["active_revision_id"], "DEPLOYED"], [rows[2][0], "REPLACED"]]

    build = cli(served, project, "deploy", "logs", "--deployment-id", deployment["id"], "--type", "build")
    assert build.returncode == 0, said(build)
    assert f"Using latest revision: {broken}" in build.stdout
    assert build.stdout.rstrip().endswith("[ERROR] ERROR: pip: no matching distribution for agentkit==9")

    runtime = cli(served, project, "deploy", "logs", "--deployment-id", deployment["id"], "--type", "deploy")
    assert runtime.returncode == 0, said(runtime)
    assert f"Revision {live['active_revision_id']} is live" in runtime.stdout

    routes = {record.route for record in served.state.request_log}
    assert "POST /v1/projects/{deployment_id}/revisions/{revision_id}/build_logs" in routes
    assert "POST /v1/projects/{deployment_id}/deploy_logs" in routes


def test_the_cli_client_creates_a_serverless_deployment(served: EmulatorServer) -> None:
    """What ``langgraph deploy`` sends to create a deployment it builds itself (``--deployment-type`` serverless,
    its default): ``source_config.deployment_type`` ``dev_zero``."""
    from langgraph_cli.host_backend import HostBackendClient

    client = HostBackendClient(served.base_url, API_KEY, tenant_id=TENANT)
    created = client.create_deployment(
        name="serverless-agent",
        source="internal_source",
        source_config={"deployment_type": "dev_zero"},
        source_revision_config={},
    )
    assert created["source_config"]["deployment_type"] == "dev_zero"
    found = client.list_deployments(name="serverless-agent", name_contains="serverless-agent")
    assert [item["id"] for item in found] == [created["id"]]
    assert client.get_deployment(created["id"])["source_config"]["deployment_type"] == "dev_zero"


# -------------------------------------------------------------------------------------- langsmith
def test_langsmith_finds_projects_and_reads_their_run_statistics(
    served: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    import langsmith

    deployment = served.state.find_deployment("checkout-api-dev")
    served.admin.set_behaviour(deployment["id"], feedback={"correctness": {"score": 0.8, "share": 0.5}})
    start = served.state.now()
    served.state.advance(10)  # 50 runs at 5 a second, one in two scored
    client = langsmith.Client(api_url=served.tracing_base_url, api_key=API_KEY, workspace_id=TENANT)

    by_name = client.read_project(project_name="checkout-api-dev")
    by_id = client.read_project(project_id=str(by_name.id), include_stats=True)
    assert by_id.name == by_name.name == "checkout-api-dev" and str(by_id.tenant_id) == TENANT
    assert by_id.run_count is not None and by_id.run_count >= 50

    listed = list(client.list_projects(name_contains="checkout-api", include_stats=True))
    assert {project.name for project in listed} >= {"checkout-api-dev", "checkout-api-prod"}
    assert all(project.run_count is not None for project in listed)

    window = {"start_time": start.isoformat(), "end_time": (start + timedelta(seconds=10)).isoformat()}  # a real clock
    stats = client.get_run_stats(project_ids=[by_name.id], **window, is_root=True)
    assert (stats["run_count"], stats["error_rate"]) == (50, 0.0)
    correctness = stats["feedback_stats"]["correctness"]
    # A 0/1 evaluator's scores, 8 in 10 good: their mean, spread and extremes as the service reports them.
    assert (correctness["n"], correctness["avg"]) == (25, pytest.approx(0.8))
    assert correctness["stdev"] == pytest.approx(0.4)
    assert (correctness["min"], correctness["max"], correctness["median"], correctness["type"]) == (
        0.0,
        1.0,
        1.0,
        "continuous",
    )
    by_names = client.get_run_stats(project_names=["checkout-api-dev"], **window)
    assert by_names["run_count"] == 50
    assert client.info.version
