"""Fault injection, seeded chaos, the request log and counters, as a plain httpx client sees them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.admin_client import EmulatorAdminError
from airflow_provider.emulator.faults import FaultKind, FaultRule
from airflow_provider.emulator.server import EmulatorServer

LIST = "GET /v2/deployments"
PATCH = "PATCH /v2/deployments/{deployment_id}"


def some_deployment(http: httpx.Client) -> dict[str, Any]:
    resources: list[dict[str, Any]] = http.get("/v2/deployments", params={"name_contains": "search-dev"}).json()[
        "resources"
    ]
    return next(d for d in resources if d["name"] == "search-dev")


@pytest.mark.parametrize("code", [429, 500, 502, 503, 504, 418])
def test_status_fault_answers_the_next_n_matching_requests(
    emulator: EmulatorServer, client: httpx.Client, code: int
) -> None:
    emulator.admin.add_fault("status", status_code=code, method="GET", path="/v2/deployments", count=2)
    first, second, third = (client.get("/v2/deployments") for _ in range(3))
    assert [first.status_code, second.status_code, third.status_code] == [code, code, 200]
    assert isinstance(first.json()["detail"], str)
    assert emulator.state.count(LIST) == 3
    log = emulator.admin.requests()
    assert [(entry["status_code"], entry["fault"]) for entry in log] == [
        (code, "status"),
        (code, "status"),
        (200, None),
    ]
    assert emulator.admin.faults() == []  # used up


def test_429_with_retry_after_seconds_and_http_date(emulator: EmulatorServer, client: httpx.Client) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    emulator.admin.add_fault("status", status_code=429, retry_after=3, path="/v2/deployments")
    emulator.admin.add_fault("status", status_code=429, retry_after=format_datetime(when, usegmt=True))
    seconds = client.get("/v2/deployments")
    dated = client.get("/v2/auth/providers")
    assert seconds.status_code == dated.status_code == 429
    assert seconds.headers["Retry-After"] == "3"
    assert parsedate_to_datetime(dated.headers["Retry-After"]) == when
    plain = emulator.state.add_fault(kind="status", status_code=503)
    assert "retry-after" not in client.get("/v2/deployments").headers
    assert plain.exhausted


def test_delay_then_normal_answer(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("delay", delay_seconds=0.3, path="/v2/auth/providers")
    started = time.monotonic()
    response = client.get("/v2/auth/providers")
    assert response.status_code == 200 and len(response.json()) >= 2
    assert time.monotonic() - started >= 0.3
    assert emulator.admin.requests()[-1]["fault"] == "delay"


def test_delay_longer_than_the_client_timeout_times_out(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("delay", delay_seconds=0.5, path="/v2/auth/providers")
    with pytest.raises(httpx.ReadTimeout):
        client.get("/v2/auth/providers", timeout=0.1)
    assert client.get("/v2/auth/providers").status_code == 200


def test_drop_without_processing(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    emulator.admin.add_fault("drop", method="PATCH", path="/v2/deployments/*")
    with pytest.raises(httpx.RemoteProtocolError):
        client.patch(f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "dropped"}})
    after = emulator.state.deployment(target["id"])
    assert after["latest_revision_id"] == target["latest_revision_id"]  # not applied
    assert emulator.admin.requests()[-1] | {"at": None} == {
        "method": "PATCH",
        "path": f"/v2/deployments/{target['id']}",
        "query": "",
        "route": PATCH,
        "status_code": None,
        "fault": "drop",
        "at": None,
    }
    # The client's pool recovers: the next request on the same client works.
    assert client.get("/v2/deployments", params={"limit": 1}).status_code == 200


def test_drop_after_processing_applies_the_patch(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    emulator.admin.add_fault("drop_after_processing", method="PATCH", path="/v2/deployments/*")
    with pytest.raises(httpx.RemoteProtocolError):
        client.patch(f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "applied"}})
    after = emulator.state.deployment(target["id"])
    assert after["latest_revision_id"] != target["latest_revision_id"]
    assert after["source_revision_config"]["repo_ref"] == "applied"
    entry = emulator.admin.requests()[-1]
    assert (entry["status_code"], entry["fault"]) == (200, "drop_after_processing")


def wait_for_logged(emulator: EmulatorServer, fault: str, within: float = 5.0) -> dict[str, Any]:
    """The request log's entry of the request faulted with ``fault``, waiting until it is processed."""
    deadline = time.monotonic() + within
    while True:
        entries = [entry for entry in emulator.admin.requests() if entry["fault"] == fault]
        if entries:
            return entries[-1]
        if time.monotonic() > deadline:
            raise AssertionError(f"no {fault!r} request logged within {within} s: {emulator.admin.requests()}")
        time.sleep(0.02)


def test_a_late_patch_is_applied_after_the_client_gave_up(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    revisions_before = len(emulator.state.deployment(target["id"])["revisions"])
    emulator.admin.add_fault("late", delay_seconds=0.4, method="PATCH", path="/v2/deployments/*")
    with pytest.raises(httpx.ReadTimeout):
        client.patch(
            f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "late"}}, timeout=0.1
        )
    assert emulator.state.deployment(target["id"])["latest_revision_id"] == target["latest_revision_id"]  # not yet
    entry = wait_for_logged(emulator, "late")
    assert (entry["method"], entry["status_code"]) == ("PATCH", 200)
    after = emulator.state.deployment(target["id"])
    assert after["latest_revision_id"] != target["latest_revision_id"]
    assert after["source_revision_config"]["repo_ref"] == "late"
    assert len(after["revisions"]) == revisions_before + 1


def test_a_late_answer_reaches_a_client_that_still_waits(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    emulator.admin.add_fault("late", delay_seconds=0.2, method="PATCH", path="/v2/deployments/*")
    response = client.patch(f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "v9"}})
    assert response.status_code == 200 and response.json()["source_revision_config"]["repo_ref"] == "v9"
    assert emulator.admin.requests()[-1]["fault"] == "late"


def test_a_delayed_patch_is_not_applied_once_the_client_gave_up(emulator: EmulatorServer, client: httpx.Client) -> None:
    """Unlike ``late``, ``delay`` holds the request before reading it: the body is gone with the client."""
    target = some_deployment(client)
    emulator.admin.add_fault("delay", delay_seconds=0.3, method="PATCH", path="/v2/deployments/*")
    with pytest.raises(httpx.ReadTimeout):
        client.patch(
            f"/v2/deployments/{target['id']}", json={"source_revision_config": {"repo_ref": "gone"}}, timeout=0.1
        )
    wait_for_logged(emulator, "delay")
    assert emulator.state.deployment(target["id"])["latest_revision_id"] == target["latest_revision_id"]


def test_not_json(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("not_json", path="/v2/deployments")
    response = client.get("/v2/deployments")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_html_error_page(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("html", path="/v2/deployments")
    emulator.admin.add_fault("html", status_code=504, path="/v2/deployments")
    bad_gateway, timeout = client.get("/v2/deployments"), client.get("/v2/deployments")
    assert bad_gateway.status_code == 502 and timeout.status_code == 504
    assert bad_gateway.headers["content-type"].startswith("text/html")
    assert "<html>" in bad_gateway.text and "502 Bad Gateway" in bad_gateway.text
    with pytest.raises(json.JSONDecodeError):
        bad_gateway.json()


def test_empty_body(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("empty", path="/v2/deployments")
    response = client.get("/v2/deployments")
    assert response.status_code == 200 and response.content == b""


def test_rules_match_method_and_path(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    emulator.admin.add_fault("status", status_code=503, method="patch", path="/v2/deployments/*", count=None)
    assert client.get("/v2/deployments").status_code == 200
    assert client.get(f"/v2/deployments/{target['id']}").status_code == 200  # GET is not PATCH
    for _ in range(3):
        assert client.patch(f"/v2/deployments/{target['id']}", json={}).status_code == 503
    emulator.admin.clear_faults()
    assert client.patch(f"/v2/deployments/{target['id']}", json={}).status_code == 200


def test_path_glob_and_regex(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    emulator.admin.add_fault("status", status_code=500, path="/v2/deployments*", count=None)
    assert client.get("/v2/deployments").status_code == 500
    assert client.get(f"/v2/deployments/{target['id']}").status_code == 500
    assert client.get("/v2/auth/providers").status_code == 200
    emulator.admin.clear_faults()
    emulator.admin.add_fault(
        "status", status_code=502, path_regex=r"/v2/deployments/[0-9a-f-]+/revisions/.*", count=None
    )
    assert client.get(f"/v2/deployments/{target['id']}").status_code == 200
    revision = f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}"
    assert client.get(revision).status_code == 502


def test_first_matching_rule_wins_then_the_next(emulator: EmulatorServer, client: httpx.Client) -> None:
    emulator.admin.add_fault("status", status_code=503)
    emulator.admin.add_fault("status", status_code=429, retry_after=1)
    codes = [client.get("/v2/deployments").status_code for _ in range(3)]
    assert codes == [503, 429, 200]


def test_admin_and_docs_requests_are_never_faulted_nor_counted(
    emulator: EmulatorServer, client: httpx.Client, web: httpx.Client
) -> None:
    emulator.admin.add_fault("status", status_code=500, count=None)  # every service request
    assert emulator.admin.state()["now"]
    assert web.get(emulator.root_url + "/openapi.json").status_code == 200
    assert client.get("/v2/deployments").status_code == 500
    assert emulator.admin.counters() == {LIST: 1}
    assert [entry["route"] for entry in emulator.admin.requests()] == [LIST]


def test_counters_use_path_templates_and_reset(emulator: EmulatorServer, client: httpx.Client) -> None:
    target = some_deployment(client)
    client.get(f"/v2/deployments/{target['id']}")
    client.patch(f"/v2/deployments/{target['id']}", json={})
    client.patch(f"/v2/deployments/{target['id']}", json={})
    client.get("/v2/nowhere")
    assert emulator.admin.counters() == {
        LIST: 1,
        "GET /v2/deployments/{deployment_id}": 1,
        PATCH: 2,
        "GET /v2/nowhere (no route)": 1,
    }
    assert emulator.admin.count(PATCH) == emulator.state.count(PATCH) == 2
    assert emulator.admin.requests()[0]["query"] == "name_contains=search-dev"
    emulator.admin.reset_requests()
    assert emulator.admin.counters() == {} and emulator.admin.requests() == []


def test_invalid_fault_rules_are_refused(emulator: EmulatorServer) -> None:
    with pytest.raises(EmulatorAdminError, match="status_code"):
        emulator.admin.add_fault("status")
    with pytest.raises(EmulatorAdminError, match="422"):
        emulator.admin.add_fault("explode")
    with pytest.raises(EmulatorAdminError, match="regular expression"):
        emulator.admin.add_fault("drop", path_regex="(")
    with pytest.raises(ValueError):
        FaultRule(kind=FaultKind.DELAY)  # a delay needs delay_seconds


# ------------------------------------------------------------------------------------ chaos
def outcomes(server: EmulatorServer, make_client: Callable[..., httpx.Client], n: int = 60) -> list[str]:
    http = make_client(server)
    results = []
    for _ in range(n):
        try:
            results.append(str(http.get("/v2/deployments", params={"limit": 1}).status_code))
        except httpx.TransportError as error:
            results.append(type(error).__name__)
    return results


def test_chaos_is_deterministic_by_seed(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    runs = []
    for seed in (7, 7, 8):
        server = deployment_service_emulator_factory()
        server.admin.set_chaos(0.5, seed=seed, path="/v2/deployments", retry_after=1)
        runs.append((outcomes(server, make_client), [entry["fault"] for entry in server.admin.requests()]))
    (first, faults), (again, faults_again), (other, _) = runs
    assert first == again and faults == faults_again
    assert first != other
    assert {"200", "429", "502", "503", "504", "RemoteProtocolError"} <= set(first)
    assert {"drop", "drop_after_processing"} <= set(faults)
    assert 15 < first.count("200") < 45


def test_chaos_probability_kinds_and_scope(emulator: EmulatorServer, make_client: Callable[..., httpx.Client]) -> None:
    emulator.admin.set_chaos(1.0, seed=1, kinds=["503"], method="GET", path="/v2/deployments")
    assert set(outcomes(emulator, make_client, 10)) == {"503"}
    assert make_client(emulator).get("/v2/auth/providers").status_code == 200
    emulator.admin.set_chaos(0.0, seed=1)
    assert set(outcomes(emulator, make_client, 10)) == {"200"}
    emulator.admin.set_chaos(1.0, seed=1)
    emulator.admin.clear_chaos()
    assert set(outcomes(emulator, make_client, 5)) == {"200"}
    with pytest.raises(EmulatorAdminError, match="unknown chaos kinds"):
        emulator.admin.set_chaos(0.5, kinds=["418"])
    with pytest.raises(EmulatorAdminError):
        emulator.admin.set_chaos(1.5)
