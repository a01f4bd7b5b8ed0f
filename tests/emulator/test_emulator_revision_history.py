"""Revision history, redeploy (rollback), revision logs, and switching each production-only endpoint off."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_provider.emulator.__main__ import build_parser
from airflow_provider.emulator.admin_client import EmulatorAdminError
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import OPTIONAL_ENDPOINTS, EmulatorError
from airflow_provider.models import Deployment, Revision

BUILD = 10.0  # AWAITING_BUILD [0, 2), BUILDING [2, 7), DEPLOYING [7, 10)
# a redeploy skips the build: AWAITING_DEPLOY [0, 1), DEPLOYING [1, 3), DEPLOYED at 3
UNKNOWN_ID = "0b7c6d2e-0000-4000-8000-00000000abcd"


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=1)


@pytest.fixture
def http(server: EmulatorServer, make_client: Callable[..., httpx.Client]) -> httpx.Client:
    return make_client(server)


def named(http: httpx.Client, name: str) -> dict[str, Any]:
    resources = http.get("/v2/deployments", params={"name_contains": name, "limit": 100}).json()["resources"]
    return next(d for d in resources if d["name"] == name)


def patch_ref(http: httpx.Client, deployment_id: str, ref: str) -> str:
    response = http.patch(f"/v2/deployments/{deployment_id}", json={"source_revision_config": {"repo_ref": ref}})
    assert response.status_code == 200, response.text
    return str(response.json()["latest_revision_id"])


def revisions(http: httpx.Client, deployment_id: str, **params: Any) -> httpx.Response:
    return http.get(f"/v2/deployments/{deployment_id}/revisions", params=params)


def revision(http: httpx.Client, deployment_id: str, revision_id: str) -> dict[str, Any]:
    response = http.get(f"/v2/deployments/{deployment_id}/revisions/{revision_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def logs(http: httpx.Client, deployment_id: str, revision_id: str, **params: Any) -> httpx.Response:
    return http.get(f"/v2/deployments/{deployment_id}/revisions/{revision_id}/logs", params=params)


def messages(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [entry["message"] for entry in response.json()["logs"]]


# ------------------------------------------------------------------------------ history
def test_revisions_are_listed_newest_first_with_offset_pages(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    created = [target["active_revision_id"]]
    for ref in ("r1", "r2", "r3"):
        server.state.advance(BUILD)
        created.append(patch_ref(http, target["id"], ref))
    first = revisions(http, target["id"], limit=3).json()
    assert [item["id"] for item in first["resources"]] == created[::-1][:3]
    assert first["offset"] == 3
    rest = revisions(http, target["id"], limit=3, offset=first["offset"]).json()
    assert [item["id"] for item in rest["resources"]] == [created[0]] and rest["offset"] == 4
    for item in first["resources"]:
        parsed = Revision.model_validate(item)
        assert item["source"] == "codehost" and parsed.deployment_id == target["id"]
        assert item["source_revision_config"]["repo_commit_sha"]  # codehost builds carry their commit
    assert [item["source_revision_config"]["repo_ref"] for item in first["resources"]] == ["r3", "r2", "r1"]


def test_revisions_default_page_size_and_bounds(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "search-dev")
    for index in range(21):
        patch_ref(http, target["id"], f"ref-{index}")
    assert len(revisions(http, target["id"]).json()["resources"]) == 20
    for bad in ({"limit": 0}, {"limit": 101}, {"offset": -1}):
        assert revisions(http, target["id"], **bad).status_code == 422
    assert revisions(http, UNKNOWN_ID).status_code == 404


def test_revisions_filter_by_status_and_remote_reconciled(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"])
    failed = patch_ref(http, target["id"], "broken")
    server.state.advance(BUILD)
    building = patch_ref(http, target["id"], "next")
    server.state.advance(1)  # past CREATING
    by_status = revisions(http, target["id"], status="BUILD_FAILED,AWAITING_BUILD").json()["resources"]
    assert [item["id"] for item in by_status] == [building, failed]
    deployed = revisions(http, target["id"], status="DEPLOYED").json()["resources"]
    assert [item["id"] for item in deployed] == [target["active_revision_id"]]
    assert revisions(http, target["id"], status="DEPLOYED,NOPE").status_code == 422
    assert revisions(http, target["id"], remote_reconciled="true").json()["resources"] == []
    assert len(revisions(http, target["id"], remote_reconciled="false").json()["resources"]) == 3


# ------------------------------------------------------------------------------ redeploy
def test_redeploy_rolls_back_to_the_same_build_without_building(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    good = target["active_revision_id"]
    good_config = revision(http, target["id"], good)["source_revision_config"]
    patch_ref(http, target["id"], "bad-release")
    server.state.advance(BUILD)
    t0 = server.state.now()
    response = http.post(f"/v2/deployments/{target['id']}/revisions/{good}/redeploy")
    assert response.status_code == 200, response.text
    after = Deployment.model_validate(response.json())
    rollback = after.latest_revision_id
    assert rollback not in (None, good)
    assert rollback is not None
    assert response.json()["source_revision_config"] == good_config  # commit included
    assert revision(http, target["id"], rollback)["source_revision_config"] == good_config
    timeline = [(0.0, "CREATING"), (0.5, "AWAITING_DEPLOY"), (1.0, "DEPLOYING"), (2.9, "DEPLOYING"), (3.0, "DEPLOYED")]
    for offset, expected in timeline:
        server.state.advance((t0 - server.state.now()).total_seconds() + offset)
        assert revision(http, target["id"], rollback)["status"] == expected, offset
    assert named(http, "checkout-api-dev")["active_revision_id"] == rollback
    build_log = messages(logs(http, target["id"], rollback))
    assert build_log == [f"Reusing the build of revision {good} (commit {good_config['repo_commit_sha']}): no build"]


def test_redeploy_queues_behind_a_build_in_progress(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    building = patch_ref(http, target["id"], "slow")
    rollback = http.post(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}/redeploy").json()
    assert revision(http, target["id"], rollback["latest_revision_id"])["status"] == "CREATING"
    server.state.advance(0.5)
    assert revision(http, target["id"], rollback["latest_revision_id"])["status"] == "QUEUED"
    server.state.advance(BUILD - 0.5)
    assert revision(http, target["id"], building)["status"] == "DEPLOYED"
    assert revision(http, target["id"], rollback["latest_revision_id"])["status"] == "AWAITING_DEPLOY"


def test_redeploy_refusals(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"], "BUILD_FAILED")
    failed = patch_ref(http, target["id"], "broken")
    in_progress_check = http.post(f"/v2/deployments/{target['id']}/revisions/{failed}/redeploy")
    assert in_progress_check.status_code == 400 and "CREATING" in in_progress_check.json()["detail"]
    server.state.advance(BUILD)
    refused = http.post(f"/v2/deployments/{target['id']}/revisions/{failed}/redeploy")
    assert refused.status_code == 400
    assert "BUILD_FAILED" in refused.json()["detail"] and "cannot be redeployed" in refused.json()["detail"]
    assert named(http, "checkout-api-dev")["latest_revision_id"] == failed  # nothing created
    assert http.post(f"/v2/deployments/{UNKNOWN_ID}/revisions/{failed}/redeploy").status_code == 404
    assert http.post(f"/v2/deployments/{target['id']}/revisions/{UNKNOWN_ID}/redeploy").status_code == 404
    assert http.post(f"/v2/deployments/{target['id']}/revisions/not-a-uuid/redeploy").status_code == 422


def test_a_deployment_going_away_cannot_redeploy(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.set_status(target["id"], "AWAITING_DELETE")
    refused = http.post(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}/redeploy")
    assert refused.status_code == 400 and "being deleted" in refused.json()["detail"]
    assert named(http, "checkout-api-dev")["latest_revision_id"] == target["latest_revision_id"]


def test_a_failing_deploy_can_still_fail_a_redeploy(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"], "DEPLOY_FAILED", "pods crash")
    rollback = http.post(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}/redeploy")
    server.state.advance(BUILD)
    assert revision(http, target["id"], rollback.json()["latest_revision_id"])["status"] == "DEPLOY_FAILED"


def test_in_place_redeploy_makes_no_revision_and_deploys_the_old_one_again(
    server: EmulatorServer, http: httpx.Client
) -> None:
    """redeploy_mode="in_place" (production does not say whether a redeploy makes a revision): latest stays the
    bad revision, which keeps serving until the old one is deployed again and becomes active."""
    target = named(http, "checkout-api-dev")
    good = target["active_revision_id"]
    good_config = revision(http, target["id"], good)["source_revision_config"]
    bad = patch_ref(http, target["id"], "bad-release")
    server.state.advance(BUILD)
    assert server.admin.update_settings(redeploy_mode="in_place")["redeploy_mode"] == "in_place"
    count = len(revisions(http, target["id"]).json()["resources"])
    t0 = server.state.now()
    response = http.post(f"/v2/deployments/{target['id']}/revisions/{good}/redeploy")
    assert response.status_code == 200, response.text
    after = response.json()
    assert after["latest_revision_id"] == bad and after["active_revision_id"] == bad  # the bad one still serves
    assert after["source_revision_config"] == good_config
    assert len(revisions(http, target["id"]).json()["resources"]) == count
    again = http.post(f"/v2/deployments/{target['id']}/revisions/{good}/redeploy")  # while deploying: no change
    assert again.status_code == 200 and revision(http, target["id"], good)["status"] == "AWAITING_DEPLOY"
    timeline = [(0.0, "AWAITING_DEPLOY", bad), (1.0, "DEPLOYING", bad), (3.0, "DEPLOYED", good)]
    for offset, status, active in timeline:
        server.state.advance((t0 - server.state.now()).total_seconds() + offset)
        assert revision(http, target["id"], good)["status"] == status, offset
        assert named(http, "checkout-api-dev")["active_revision_id"] == active, offset
    now = named(http, "checkout-api-dev")
    assert now["latest_revision_id"] == bad and now["status"] == "READY"
    assert len(revisions(http, target["id"]).json()["resources"]) == count
    assert messages(logs(http, target["id"], good))[0].startswith(f"Reusing the build of revision {good}")


def test_in_place_redeploy_is_refused_while_another_revision_builds(server: EmulatorServer, http: httpx.Client) -> None:
    server.state.update_settings(redeploy_mode="in_place")
    target = named(http, "checkout-api-dev")
    building = patch_ref(http, target["id"], "slow")
    refused = http.post(f"/v2/deployments/{target['id']}/revisions/{target['active_revision_id']}/redeploy")
    assert refused.status_code == 400 and building in refused.json()["detail"]
    assert named(http, "checkout-api-dev")["latest_revision_id"] == building


# ------------------------------------------------------------------------------ logs
def test_build_log_grows_with_the_build_and_names_the_commit(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    new = patch_ref(http, target["id"], "feature")
    assert messages(logs(http, target["id"], new)) == [f"Revision {new} is waiting for a builder"]
    server.state.advance(BUILD)
    lines = messages(logs(http, target["id"], new))
    sha = revision(http, target["id"], new)["source_revision_config"]["repo_commit_sha"]
    assert lines[1] == f"Build started for revision {new} (source codehost)"
    assert "Cloning https://codehost.example.com/acme-corp/checkout-api at feature" in lines
    assert f"Checked out commit {sha}" in lines
    assert any(line.startswith("Step 1/") for line in lines)
    assert lines[-1].startswith("Successfully built ")
    entry = logs(http, target["id"], new).json()["logs"][0]
    assert set(entry) == {"id", "timestamp", "level", "message"} and entry["level"] == "INFO"
    deploy = messages(logs(http, target["id"], new, type="deploy"))
    assert deploy[0] == f"Deploying revision {new}" and deploy[-1] == f"Revision {new} is live"


def test_failed_build_log_ends_with_the_error(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    server.admin.fail_next_build(target["id"], "BUILD_FAILED", "pip: no matching distribution for agentkit==9")
    failed = patch_ref(http, target["id"], "broken")
    server.state.advance(BUILD)
    entries = logs(http, target["id"], failed).json()["logs"]
    assert entries[-1] == {
        "id": entries[-1]["id"],
        "timestamp": entries[-1]["timestamp"],
        "level": "ERROR",
        "message": "ERROR: pip: no matching distribution for agentkit==9",
    }
    newest = logs(http, target["id"], failed, order="desc", limit=1).json()["logs"]
    assert newest == [entries[-1]]
    assert logs(http, target["id"], failed, type="deploy").json() == {"logs": [], "next_offset": None}


def test_log_pages_follow_the_cursor(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    new = patch_ref(http, target["id"], "paged")
    server.state.advance(BUILD)
    everything = messages(logs(http, target["id"], new, limit=1000))
    collected: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"offset": cursor} if cursor else {})
        body = logs(http, target["id"], new, **params).json()
        collected += [entry["message"] for entry in body["logs"]]
        cursor = body["next_offset"]
        if cursor is None:
            break
    assert collected == everything and len(everything) > 3
    backwards = messages(logs(http, target["id"], new, order="desc", limit=1000))
    assert backwards == everything[::-1]


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"type": "runtime"}, {"order": "sideways"}, {"offset": "not a cursor!"}],
)
def test_log_parameters_are_checked(http: httpx.Client, params: dict[str, Any]) -> None:
    target = named(http, "checkout-api-dev")
    assert logs(http, target["id"], target["active_revision_id"], **params).status_code == 422


def test_a_cursor_of_the_other_order_is_refused(http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    asc = logs(http, target["id"], target["active_revision_id"], limit=1).json()["next_offset"]
    assert asc is not None
    assert base64.urlsafe_b64decode(asc + "==")  # opaque but well-formed
    wrong = logs(http, target["id"], target["active_revision_id"], order="desc", offset=asc)
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["query", "offset"]


def test_logs_never_contain_secret_values(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    secret = "very-secret-value-123"
    body = {"secrets": [{"name": "TOKEN", "value": secret}], "source_config": {"install_command": "pip install ."}}
    new = http.patch(f"/v2/deployments/{target['id']}", json=body).json()["latest_revision_id"]
    server.state.advance(BUILD)
    for kind in ("build", "deploy"):
        assert secret not in logs(http, target["id"], new, type=kind).text


# ------------------------------------------------------------------------------ switches
DISABLED_ANSWERS = {
    "get_deployment": ("GET", "/v2/deployments/{d}", 405),
    "list_revisions": ("GET", "/v2/deployments/{d}/revisions", 404),
    "get_revision": ("GET", "/v2/deployments/{d}/revisions/{r}", 404),
    "redeploy": ("POST", "/v2/deployments/{d}/revisions/{r}/redeploy", 404),
    "revision_logs": ("GET", "/v2/deployments/{d}/revisions/{r}/logs", 404),
    "build_logs": ("POST", "/v1/projects/{d}/revisions/{r}/build_logs", 404),
    "deploy_logs": ("POST", "/v1/projects/{d}/revisions/{r}/deploy_logs", 404),
}


def test_switch_names_cover_every_production_only_endpoint() -> None:
    assert set(DISABLED_ANSWERS) == set(OPTIONAL_ENDPOINTS)


@pytest.mark.parametrize("name", sorted(DISABLED_ANSWERS))
def test_each_endpoint_can_be_switched_off_alone(
    deployment_service_emulator_factory: Callable[..., EmulatorServer],
    make_client: Callable[..., httpx.Client],
    name: str,
) -> None:
    server = deployment_service_emulator_factory(disabled_endpoints=[name])
    http = make_client(server)
    target = named(http, "checkout-api-dev")
    for other, (method, template, off_status) in DISABLED_ANSWERS.items():
        path = template.format(d=target["id"], r=target["active_revision_id"])
        status = http.request(method, path).status_code
        if other == name:
            assert status == off_status, other
        else:
            assert status == 200, other


def test_endpoints_switch_at_run_time_through_the_admin_api(server: EmulatorServer, http: httpx.Client) -> None:
    target = named(http, "checkout-api-dev")
    path = f"/v2/deployments/{target['id']}/revisions"
    settings = server.admin.update_settings(disabled_endpoints=["list_revisions", "redeploy"])
    assert settings["disabled_endpoints"] == ["list_revisions", "redeploy"]
    assert http.get(path).status_code == 404 and http.get(path).json() == {"detail": "Not Found"}
    server.admin.update_settings(disabled_endpoints=[])
    assert http.get(path).status_code == 200
    assert server.admin.settings() == {
        "resource_spec_mode": "replace",
        "redeploy_mode": "new_revision",
        "optional_endpoints": True,
        "disabled_endpoints": [],
        "revision_status_touches_deployment": True,
        "updated_at_on_requests_only": False,
        "unknown_fields": False,
    }


def test_settings_refuse_unknown_names(server: EmulatorServer) -> None:
    with pytest.raises(EmulatorAdminError) as error:
        server.admin.update_settings(disabled_endpoints=["get_everything"])
    assert error.value.status_code == 422
    with pytest.raises(EmulatorAdminError):
        server.admin.update_settings(resource_spec_mode="append")
    with pytest.raises(EmulatorError, match="resource_spec_mode"):
        server.state.update_settings(resource_spec_mode="append")  # type: ignore[arg-type]
    with pytest.raises(EmulatorAdminError):
        server.admin.update_settings(redeploy_mode="sometimes")
    with pytest.raises(EmulatorError, match="redeploy_mode"):
        server.state.update_settings(redeploy_mode="sometimes")  # type: ignore[arg-type]


def test_optional_endpoints_off_leaves_all_of_them_out(
    deployment_service_emulator_factory: Callable[..., EmulatorServer], make_client: Callable[..., httpx.Client]
) -> None:
    server = deployment_service_emulator_factory(optional_endpoints=False)
    http = make_client(server)
    target = named(http, "checkout-api-dev")
    for method, template, off_status in DISABLED_ANSWERS.values():
        path = template.format(d=target["id"], r=target["active_revision_id"])
        assert http.request(method, path).status_code == off_status


def test_cli_flags_for_the_switches() -> None:
    args = build_parser().parse_args(
        ["--resource-spec-mode", "merge", "--disable-endpoint", "redeploy", "--disable-endpoint", "revision_logs"]
    )
    assert args.resource_spec_mode == "merge" and args.disable_endpoint == ["redeploy", "revision_logs"]
    assert build_parser().parse_args([]).resource_spec_mode == "replace"
    assert build_parser().parse_args([]).redeploy_mode == "new_revision"
    assert build_parser().parse_args(["--redeploy-mode", "in_place"]).redeploy_mode == "in_place"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--disable-endpoint", "everything"])
