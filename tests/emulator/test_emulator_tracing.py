"""The tracing service's two endpoints (``GET /tracing/sessions``, ``POST /tracing/runs/stats``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.tracing import tracing_base_url

NAME = "checkout-api-dev"


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=10, ready_seconds=1)


@pytest.fixture
def tracing(server: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.tracing_base_url, headers={"X-Api-Key": server.api_key}, timeout=5) as http:
        yield http


def project(tracing: httpx.Client, name: str = NAME) -> dict[str, Any]:
    answer = tracing.get("/sessions", params={"name": name, "limit": 1})
    assert answer.status_code == 200, answer.text
    projects: list[dict[str, Any]] = answer.json()
    assert len(projects) == 1, projects
    return projects[0]


def test_each_deployment_has_a_project_named_like_it(server: EmulatorServer, tracing: httpx.Client) -> None:
    found = project(tracing)
    assert found["name"] == NAME
    assert found["extra"]["deployment_id"] == server.state.find_deployment(NAME)["id"]
    assert tracing.get("/sessions", params={"name": "no-such-deployment"}).json() == []
    assert tracing.get("/sessions", params={"name": NAME[:-1]}).json() == []  # exact names only
    assert len(tracing.get("/sessions", params={"limit": 7}).json()) == 7
    assert server.tracing_base_url == tracing_base_url(server.base_url) == f"{server.root_url}/tracing"


def test_stats_count_the_runs_since_start_time(server: EmulatorServer, tracing: httpx.Client) -> None:
    session = project(tracing)["id"]
    start = server.state.now()
    server.state.advance(12)
    body = {"session": [session], "start_time": start.isoformat(), "is_root": True}
    stats = tracing.post("/runs/stats", json=body).json()
    assert (stats["run_count"], stats["error_rate"], stats["latency_p50"], stats["latency_p99"]) == (60, 0.0, 0.0, 0.0)
    window = {**body, "end_time": (start + timedelta(seconds=2)).isoformat()}
    assert tracing.post("/runs/stats", json=window).json()["run_count"] == 10
    naive = {**body, "start_time": (start + timedelta(seconds=10)).replace(tzinfo=None).isoformat()}
    assert tracing.post("/runs/stats", json=naive).json()["run_count"] == 10  # a naive time is UTC


def test_stats_without_runs_are_nulls(server: EmulatorServer, tracing: httpx.Client) -> None:
    future = (server.state.now() + timedelta(hours=1)).isoformat()
    stats = tracing.post("/runs/stats", json={"session": [project(tracing)["id"]], "start_time": future}).json()
    assert stats["run_count"] == 0
    assert stats["error_rate"] is None and stats["latency_p50"] is None and stats["latency_p99"] is None


def test_the_error_filter_counts_failed_or_successful_runs(server: EmulatorServer, tracing: httpx.Client) -> None:
    deployment_id = server.state.find_deployment(NAME)["id"]
    server.admin.set_behaviour(deployment_id, error_rate=0.25)
    start = server.state.now().isoformat()
    server.state.advance(8)
    body = {"session": [project(tracing)["id"]], "start_time": start}
    assert tracing.post("/runs/stats", json={**body, "error": True}).json()["run_count"] == 10
    assert tracing.post("/runs/stats", json={**body, "error": False}).json()["run_count"] == 30


def test_several_projects_add_up(server: EmulatorServer, tracing: httpx.Client) -> None:
    sessions = [project(tracing)["id"], project(tracing, "checkout-api-prod")["id"]]
    start = server.state.now().isoformat()
    server.state.advance(4)
    assert tracing.post("/runs/stats", json={"session": sessions, "start_time": start}).json()["run_count"] == 40


def test_the_api_key_is_required(server: EmulatorServer, tracing: httpx.Client) -> None:
    session = project(tracing)["id"]
    with httpx.Client(base_url=server.tracing_base_url, timeout=5) as anonymous:
        assert anonymous.get("/sessions", params={"name": NAME}).status_code == 401
        assert anonymous.post("/runs/stats", json={"session": [session]}).status_code == 401
        wrong = {"X-Api-Key": "not-the-key"}
        assert anonymous.get("/sessions", params={"name": NAME}, headers=wrong).status_code == 401


def test_bad_queries_are_refused(tracing: httpx.Client) -> None:
    assert tracing.post("/runs/stats", json={"session": []}).status_code == 422
    unknown = tracing.post("/runs/stats", json={"session": ["7a0c7c2e-0000-4000-8000-000000000000"]})
    assert unknown.status_code == 404 and "not found" in unknown.json()["detail"]
    filtered = tracing.post("/runs/stats", json={"session": [project(tracing)["id"]], "filter": "eq(name, 'x')"})
    assert filtered.status_code == 422 and filtered.json()["detail"][0]["loc"] == ["body", "filter"]
    grouped = {"session": [project(tracing)["id"]], "group_by": {"attribute": "metadata", "path": "revision"}}
    refused = tracing.post("/runs/stats", json=grouped)
    assert refused.status_code == 422
    assert (
        refused.json()["detail"][0]["loc"] == ["body", "group_by"] and "group_by" in refused.json()["detail"][0]["msg"]
    )


def test_a_tenant_header_limits_the_projects(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
) -> None:
    server = deployment_service_emulator_factory(tenant_id="11111111-1111-4111-8111-111111111111")
    headers = {"X-Api-Key": server.api_key}
    with httpx.Client(base_url=server.tracing_base_url, headers=headers, timeout=5) as tracing:
        assert len(tracing.get("/sessions", params={"name": NAME}).json()) == 1  # the key alone is enough
        other = {"X-Tenant-Id": "22222222-2222-4222-8222-222222222222"}
        assert tracing.get("/sessions", params={"name": NAME}, headers=other).json() == []


def test_tracing_requests_are_counted_logged_and_can_be_faulted(server: EmulatorServer, tracing: httpx.Client) -> None:
    session = project(tracing)["id"]
    server.state.add_fault(kind="status", status_code=503, method="POST", path="/tracing/runs/stats", count=1)
    assert tracing.post("/runs/stats", json={"session": [session]}).status_code == 503
    assert tracing.post("/runs/stats", json={"session": [session]}).status_code == 200
    assert server.state.count("GET /tracing/sessions") == 1
    assert server.state.count("POST /tracing/runs/stats") == 2
    assert [record.status_code for record in server.state.request_log if record.path == "/tracing/runs/stats"] == [
        503,
        200,
    ]


def test_feedback_scores_per_revision_are_the_feedback_stats(server: EmulatorServer, tracing: httpx.Client) -> None:
    deployment_id = server.state.find_deployment(NAME)["id"]
    session = project(tracing)["id"]
    start = server.state.now()
    body = {"session": [session], "start_time": start.isoformat(), "is_root": True}
    server.state.advance(2)
    assert tracing.post("/runs/stats", json=body).json()["feedback_stats"] == {}  # runs, none scored
    # From now on: every run scored for correctness by a 0/1 evaluator (9 in 10 get 1), one run in five rated by users
    # (half of them 1).
    server.admin.set_behaviour(
        deployment_id,
        feedback={"correctness": {"score": 0.9}, "user_rating": {"score": 0.5, "share": 0.2}},
    )
    assert server.admin.behaviour(deployment_id)["feedback"]["user_rating"] == {"score": 0.5, "share": 0.2}
    server.state.advance(10)  # 50 runs at 5 a second
    stats = tracing.post("/runs/stats", json=body).json()
    assert stats["run_count"] == 60
    correctness = stats["feedback_stats"]["correctness"]
    assert (correctness["n"], correctness["avg"]) == (50, pytest.approx(0.9))
    assert correctness["stdev"] == pytest.approx(0.3)  # 0/1 scores: sqrt(0.9 * 0.1), as a real evaluator's spread
    assert (correctness["min"], correctness["max"], correctness["median"]) == (0.0, 1.0, 1.0)
    assert correctness["type"] == "continuous" and correctness["contains_thread_feedback"] is False
    assert (correctness["errors"], correctness["values"]) == (0, {})
    assert stats["feedback_stats"]["user_rating"]["n"] == 10 and stats["feedback_stats"]["user_rating"]["avg"] == 0.5
    # A later change: scores drop; the window's mean weighs both.
    server.admin.set_behaviour(deployment_id, feedback={"correctness": {"score": 0.5}})
    server.state.advance(10)
    correctness = tracing.post("/runs/stats", json=body).json()["feedback_stats"]["correctness"]
    assert correctness["n"] == 100 and correctness["avg"] == pytest.approx(0.7)
    assert (correctness["min"], correctness["max"], correctness["median"]) == (0.0, 1.0, 1.0)  # 0/1 scores
    assert correctness["stdev"] == pytest.approx(math.sqrt(0.7 * 0.3))
    refused = server.admin._call  # the control API validates the scores
    with pytest.raises(Exception, match="share"):
        refused(
            "PUT", f"/deployments/{deployment_id}/behaviour", {"feedback": {"correctness": {"score": 1, "share": 2}}}
        )


def test_projects_filter_by_name_and_id_and_carry_their_stats(server: EmulatorServer, tracing: httpx.Client) -> None:
    found = project(tracing)
    server.state.advance(4)
    listed = tracing.get("/sessions", params={"name_contains": "CHECKOUT-API", "include_stats": "true"}).json()
    assert {item["name"] for item in listed} >= {NAME, "checkout-api-prod"}
    assert all("checkout-api" in item["name"] for item in listed)
    mine = next(item for item in listed if item["id"] == found["id"])
    lifetime = tracing.post("/runs/stats", json={"session": [found["id"]]}).json()  # since the project exists
    assert mine["run_count"] == lifetime["run_count"] > 0
    assert mine["error_rate"] == 0.0 and mine["feedback_stats"] == {} and mine["latency_p50"] == 0.0
    assert "run_count" not in project(tracing)  # only when asked for
    by_id = tracing.get(f"/sessions/{found['id']}", params={"include_stats": "true"})
    assert by_id.status_code == 200 and by_id.json()["run_count"] == lifetime["run_count"]
    assert by_id.json()["name"] == NAME
    assert tracing.get(f"/sessions/{found['id']}").json() == found
    assert tracing.get("/sessions/7a0c7c2e-0000-4000-8000-000000000000").status_code == 404
    other = project(tracing, "checkout-api-prod")["id"]
    assert [item["name"] for item in tracing.get("/sessions", params={"id": [other]}).json()] == ["checkout-api-prod"]


def test_info_answers_without_a_key(server: EmulatorServer) -> None:
    with httpx.Client(base_url=server.tracing_base_url, timeout=5) as anonymous:
        answer = anonymous.get("/info")
    assert answer.status_code == 200 and answer.json()["version"]
