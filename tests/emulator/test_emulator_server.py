"""Starting and stopping the emulator: thread server, subprocess server, CLI, loopback rule, fixtures."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from airflow_provider.emulator.__main__ import main
from airflow_provider.emulator.server import API_KEY_ENV, EmulatorServer, is_loopback
from airflow_provider.emulator.state import EmulatorState

REPO_ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^Deployment service emulator listening on http://127\.0\.0\.1:(\d+)$")


def test_thread_server_starts_and_stops_fast_without_leaking_threads() -> None:
    threads_before = set(threading.enumerate())
    started = time.monotonic()
    server = EmulatorServer(api_key="k", data={}).start()
    start_time = time.monotonic() - started
    port = int(server.base_url.rsplit(":", 1)[1])
    assert port > 0 and server.base_url == f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=server.base_url, headers={"X-Api-Key": "k"}) as http:
        assert http.get("/v2/deployments").json() == {"resources": [], "offset": 0}  # keep-alive connection open
        started = time.monotonic()
        server.stop()
        stop_time = time.monotonic() - started
    # Not a speed claim (that is bench/'s job): a hang detector. A server that waited for the open
    # keep-alive connection to time out (uvicorn: 5 s) or polled for start-up slowly would take longer.
    assert start_time < 3 and stop_time < 3, (start_time, stop_time)
    leaked = set(threading.enumerate()) - threads_before  # (an earlier test's pool thread may end meanwhile)
    assert not leaked, leaked
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v2/deployments")
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
    server.stop()  # idempotent


def test_context_manager_fixed_port_and_shared_state() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = EmulatorState(api_key="shared", data={}, frozen_clock=True)
    with EmulatorServer(state, port=port) as server:
        assert server.base_url == f"http://127.0.0.1:{port}" and server.state is state
        assert server.api_key == "shared" and server.headers == {"X-Api-Key": "shared"}
        created = httpx.post(
            f"{server.base_url}/v2/deployments", headers=server.headers, json={"name": "a", "source": "codehost"}
        )
        assert created.status_code == 201
        assert state.find_deployment("a")["id"] == created.json()["id"]
    assert not server.running


def test_random_api_key_by_default() -> None:
    first, second = EmulatorServer(data={}), EmulatorServer(data={})
    assert first.api_key and first.api_key != second.api_key


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", "::"])
def test_non_loopback_host_is_refused(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ValueError, match="non-loopback"):
        EmulatorServer(host=host, data={})
    EmulatorServer(host=host, data={}, allow_non_loopback=True)  # allowed explicitly (not started)
    with pytest.raises(SystemExit) as raised:
        main(["--host", host, "--api-key", "k"])
    assert raised.value.code == 2


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert is_loopback(host)


def test_ipv6_loopback_server() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        server = EmulatorServer(host="::1", api_key="k", data={}).start()
    except OSError:
        pytest.skip("IPv6 loopback unavailable")
    try:
        assert server.base_url.startswith("http://[::1]:")
        assert httpx.get(server.base_url + "/v2/auth/providers", headers={"X-Api-Key": "k"}).status_code == 200
    finally:
        server.stop()


def test_cli_prints_one_line_serves_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), API_KEY_ENV: ""}
    command = [sys.executable, "-m", "airflow_provider.emulator", "--host", "127.0.0.1", "--port", "0"]
    command += ["--api-key", "cli-key", "--tenant-id", "7d4c1a2b-3e5f-4a6b-8c7d-9e0f1a2b3c4d"]
    command += ["--frozen-clock", "--build-seconds", "4", "--no-optional-endpoints"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = LINE.match(line.rstrip("\n"))
        assert match, line
        base = f"http://127.0.0.1:{match.group(1)}"
        headers = {"X-Api-Key": "cli-key", "X-Tenant-Id": "7d4c1a2b-3e5f-4a6b-8c7d-9e0f1a2b3c4d"}
        page = httpx.get(f"{base}/v2/deployments", headers=headers, params={"limit": 2})
        assert page.status_code == 200 and len(page.json()["resources"]) == 2
        assert httpx.get(f"{base}/v2/deployments", headers={"X-Api-Key": "cli-key"}).status_code == 403
        some = page.json()["resources"][0]["id"]
        assert httpx.get(f"{base}/v2/deployments/{some}", headers=headers).status_code == 405
        clock = httpx.get(f"{base}/_emulator/clock").json()
        assert clock["frozen"] is True
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert out == ""  # nothing after the one line
    assert "Traceback" not in err


def test_cli_sigint_and_api_key_from_environment() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), API_KEY_ENV: "env-key"}
    command = [sys.executable, "-m", "airflow_provider.emulator", "--data", str(REPO_ROOT / "nope.json")]
    failed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=20)
    assert failed.returncode == 2 and "cannot read the file" in failed.stderr and failed.stdout == ""
    process = subprocess.Popen(command[:3], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        match = LINE.match(process.stdout.readline().rstrip("\n"))
        assert match
        response = httpx.get(f"http://127.0.0.1:{match.group(1)}/v2/auth/providers", headers={"X-Api-Key": "env-key"})
        assert response.status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err


def test_cli_requires_an_api_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(SystemExit) as raised:
        main(["--port", "0"])
    assert raised.value.code == 2 and "API key is required" in capsys.readouterr().err


def test_subprocess_server_is_driven_through_the_admin_api(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
) -> None:
    data = {"deployments": [{"name": "only", "source": "internal_docker"}]}
    server = deployment_service_emulator_factory(in_subprocess=True, data=data, path_prefix="/api-host")
    assert server.base_url.endswith("/api-host")
    with pytest.raises(RuntimeError, match="no in-process state"):
        _ = server.state
    headers = server.headers
    listed = httpx.get(f"{server.base_url}/v2/deployments", headers=headers).json()["resources"]
    assert [d["name"] for d in listed] == ["only"]
    patched = httpx.patch(
        f"{server.base_url}/v2/deployments/{listed[0]['id']}",
        headers=headers,
        json={"source_revision_config": {"image_uri": "registry.example.com/x:2"}},
    ).json()
    server.admin.advance(2)  # the fixture's build_seconds
    assert server.admin.find_deployment("only")["active_revision_id"] == patched["latest_revision_id"]
    assert server.admin.counters() == {"GET /v2/deployments": 1, "PATCH /v2/deployments/{deployment_id}": 1}
    server.stop()
    assert not server.running


def test_fixture_defaults(deployment_service_emulator: EmulatorServer) -> None:
    emulator = deployment_service_emulator
    assert emulator.api_key == "test-api-key" and emulator.state.clock.frozen
    assert emulator.state.build_seconds == 2.0
    before = emulator.state.now()
    time.sleep(0.01)
    assert emulator.state.now() == before


def test_factory_passes_options(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> None:
    server = deployment_service_emulator_factory(api_key="other", frozen_clock=False, data={})
    assert server.api_key == "other" and not server.state.clock.frozen
    assert httpx.get(server.base_url + "/v2/deployments", headers={"X-Api-Key": "other"}).status_code == 200
