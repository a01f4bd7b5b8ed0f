"""The production PATCH contract from the operator's side, end to end against the emulator: a partial
resource_spec keeps the rest, revisions are read from the answer, production's rules are refused before
anything is sent, and a rule skipped locally comes back as the server's clear 400."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.errors import RequestRejectedError
from tests.tasks.conftest import PATCH_ROUTE, FakeTI, deployment_named, make_context
from tests.tasks.test_operators import patch_op, revisions_of

EXTERNAL = "billing-worker-prod"
"""external_docker, resource_spec {min_scale 2, max_scale 6, cpu 1.5, memory_mb 2048, db_storage_gi 20}."""
CODEHOST = "checkout-api-dev"
"""codehost, build_on_push true, repo_ref main."""
INTERNAL_DOCKER = "billing-worker-dev"
INTERNAL_SOURCE = "billing-worker-staging"
LIST_ROUTE = "GET /v2/deployments"


def spec_of(emulator: Any, name: str) -> dict[str, Any]:
    return dict(deployment_named(emulator, name)["source_config"]["resource_spec"] or {})


# ---------------------------------------------------------------------------------- resource_spec
def test_a_partial_resource_spec_keeps_the_rest_and_its_revision_is_waited_for(
    emulator: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    ti = FakeTI()
    task = patch_op(
        dep["id"], source_config={"resource_spec": {"min_scale": 3}}, wait_for_rollout=True, deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(make_context(ti))
    spec = spec_of(emulator, EXTERNAL)
    assert {key: spec[key] for key in ("min_scale", "max_scale", "cpu", "memory_mb", "db_storage_gi")} == {
        "min_scale": 3,
        "max_scale": 6,
        "cpu": 1.5,
        "memory_mb": 2048,
        "db_storage_gi": 20,
    }
    # production creates a revision for a resource_spec: read from the answer, pushed and waited for
    new = deployment_named(emulator, EXTERNAL)["latest_revision_id"]
    assert new != dep["latest_revision_id"]
    assert ti.xcoms["revision_id"] == new
    assert deferred.value.trigger.serialize()[1]["revision_id"] == new
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert "kept cpu, db_storage_gi, max_scale, memory_mb from the deployment's current one" in capfd.readouterr().out


def test_replace_mode_sends_the_resource_spec_as_given(emulator: Any) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    patch_op(dep["id"], source_config={"resource_spec": {"min_scale": 3}}, resource_spec_mode="replace").execute(
        make_context()
    )
    spec = spec_of(emulator, EXTERNAL)
    assert spec["min_scale"] == 3
    assert spec.get("max_scale") is None and spec.get("memory_mb") is None


def test_a_field_given_as_none_is_removed_from_the_merged_spec(emulator: Any) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    patch_op(dep["id"], source_config={"resource_spec": {"max_scale": None, "min_scale": 1}}).execute(make_context())
    spec = spec_of(emulator, EXTERNAL)
    assert spec["min_scale"] == 1 and spec["memory_mb"] == 2048
    assert spec.get("max_scale") is None


def test_under_the_emulators_merge_switch_no_revision_is_reported_or_waited_for(service: Any) -> None:
    emulator = service(resource_spec_mode="merge")
    dep = deployment_named(emulator, EXTERNAL)
    ti = FakeTI()
    result = patch_op(
        dep["id"], source_config={"resource_spec": {"min_scale": 3}}, wait_for_rollout=True, deferrable=True
    ).execute(make_context(ti))  # no TaskDeferred: nothing to wait for
    assert ti.xcoms["revision_id"] == ""
    assert result["latest_revision_id"] == dep["latest_revision_id"]
    assert spec_of(emulator, EXTERNAL)["max_scale"] == 6


@pytest.mark.parametrize(
    ("mode", "cpu", "new_revisions"),
    [
        # production rounds cpu: the values alone would not show the patch, the moved revision does
        ("replace", 0.12345, 1),
        ("merge", 2, 0),
    ],
)
def test_a_resource_spec_patch_whose_answer_is_lost_is_not_applied_twice(
    service: Any, mode: str, cpu: float, new_revisions: int
) -> None:
    emulator = service(resource_spec_mode=mode)
    dep = deployment_named(emulator, EXTERNAL)
    before = revisions_of(emulator, dep["id"])
    emulator.state.add_fault(kind="drop_after_processing", method="PATCH", path="/v2/deployments/*")
    ti = FakeTI()
    patch_op(dep["id"], source_config={"resource_spec": {"cpu": cpu}}).execute(make_context(ti))
    assert emulator.state.count(PATCH_ROUTE) == 1  # read back, found applied, not sent again
    assert len(revisions_of(emulator, dep["id"])) == len(before) + new_revisions
    assert ti.xcoms["revision_id"] == ("" if new_revisions == 0 else revisions_of(emulator, dep["id"])[-1])


# ------------------------------------------------------------------------------ limits under merge
def at_cpu_1_and_512_mb(emulator: Any) -> dict[str, Any]:
    """Put the external deployment at cpu 1 / memory 512 with the limits production defaults (2 / 1024)."""
    dep = deployment_named(emulator, EXTERNAL)
    whole = {**dep["source_config"]["resource_spec"], "cpu": 1, "memory_mb": 512}
    emulator.state.patch_deployment(dep["id"], {"source_config": {"resource_spec": whole}})
    emulator.state.advance(5)
    spec = spec_of(emulator, EXTERNAL)
    assert (spec["cpu"], spec["cpu_limit"], spec["memory_mb"], spec["memory_limit_mb"]) == (1, 2, 512, 1024)
    return deployment_named(emulator, EXTERNAL)


def test_merge_leaves_out_a_kept_limit_below_the_new_request(emulator: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """The issue's case: {cpu: 4, memory_mb: 4096} on cpu 1 / cpu_limit 2, memory 512 / 1024. The old limits
    (production's defaults for the old requests) are not re-sent, so the service defaults them again."""
    dep = at_cpu_1_and_512_mb(emulator)
    ti = FakeTI()
    patch_op(dep["id"], source_config={"resource_spec": {"cpu": 4, "memory_mb": 4096}}).execute(make_context(ti))
    spec = spec_of(emulator, EXTERNAL)
    assert (spec["cpu"], spec["cpu_limit"], spec["memory_mb"], spec["memory_limit_mb"]) == (4, 8, 4096, 8192)
    assert (spec["max_scale"], spec["db_storage_gi"]) == (6, 20)  # the rest is still kept
    assert emulator.state.count(PATCH_ROUTE) == 1  # the task sent one PATCH (the set-up went to the state)
    assert revisions_of(emulator, dep["id"])[-1] == ti.xcoms["revision_id"] != dep["latest_revision_id"]
    out = capfd.readouterr().out
    assert "Not keeping cpu_limit=2 (below the new cpu=4), memory_limit_mb=1024 (below the new memory_mb=4096)" in out


def test_merge_keeps_a_limit_still_above_the_new_request(emulator: Any) -> None:
    dep = at_cpu_1_and_512_mb(emulator)
    patch_op(dep["id"], source_config={"resource_spec": {"cpu": 1.5}}).execute(make_context())
    spec = spec_of(emulator, EXTERNAL)
    assert (spec["cpu"], spec["cpu_limit"], spec["memory_limit_mb"]) == (1.5, 2, 1024)


@pytest.mark.parametrize("mode", ["merge", "replace"])
def test_a_limit_given_below_the_request_given_is_refused_before_sending(emulator: Any, mode: str) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    spec = {"cpu": 4, "cpu_limit": 2}
    task = patch_op(dep["id"], source_config={"resource_spec": spec}, resource_spec_mode=mode)
    with pytest.raises(
        AirflowFailException,
        match=r"source_config\.resource_spec\.cpu_limit=2 is below source_config\.resource_spec\.cpu=4",
    ):
        task.execute(make_context())
    assert emulator.state.counters == {}  # nothing read, nothing sent
    assert spec_of(emulator, EXTERNAL) == dict(dep["source_config"]["resource_spec"])


def test_a_limit_given_below_the_request_kept_is_refused_naming_both(emulator: Any) -> None:
    dep = at_cpu_1_and_512_mb(emulator)
    patches = emulator.state.count(PATCH_ROUTE)
    with pytest.raises(AirflowFailException, match=r"memory_limit_mb=256 is below .*memory_mb=512 \(memory_mb kept"):
        patch_op(dep["id"], source_config={"resource_spec": {"memory_limit_mb": 256}}).execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == patches
    assert spec_of(emulator, EXTERNAL)["memory_limit_mb"] == 1024


# ----------------------------------------------------------------------------- rules, before sending
OTHER_UUID = "0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (CODEHOST, {"source_config": {"integration_id": OTHER_UUID}}, r"source_config\.integration_id: cannot change"),
        (CODEHOST, {"source_config": {"repo_url": "https://codehost.example.com/x/y"}}, r"source_config\.repo_url"),
        (EXTERNAL, {"source_config": {"listener_id": OTHER_UUID}}, r"source_config\.listener_id: cannot change"),
        (EXTERNAL, {"source_config": {"deployment_type": "dev"}}, r"source_config\.deployment_type: cannot change"),
        (EXTERNAL, {"repo_ref": "main"}, r"repo_ref: applies to codehost revisions only; .*external_docker"),
        (
            CODEHOST,
            {"image_uri": "app:2", "revision_source": None},
            r"image_uri: applies to external_docker and internal_docker",
        ),
        (
            INTERNAL_DOCKER,
            {"image_uri": "app:2", "revision_source": "codehost"},
            r"revision's source is codehost \(the patch's revision_source\)",
        ),
        (CODEHOST, {"source_revision_config": {"source_tarball_path": "uploads/x.tgz"}}, r"source_tarball_path"),
        (INTERNAL_DOCKER, {"source_revision_config": {"graph_config_path": "g.json"}}, r"graph_config_path"),
        (CODEHOST, {"source_config": {"custom_url": "https://x.example.com"}}, r"custom_url: can be set for external"),
        (
            CODEHOST,
            {"secret_references": [{"name": "A", "secret_name": "s", "secret_key": "k"}]},
            r"secret_references: applies to external_docker",
        ),
        (CODEHOST, {"repo_ref": "refs/tags/v1.0.0"}, r"build_on_push cannot be true while repo_ref is a tag"),
        (
            INTERNAL_SOURCE,
            {"source_config": {"resource_spec": {"min_scale": 1}}},
            r"resource_spec: applies to external",
        ),
    ],
)
def test_production_rules_are_refused_before_sending(
    emulator: Any, name: str, kwargs: dict[str, Any], message: str
) -> None:
    dep = deployment_named(emulator, name)
    with pytest.raises(AirflowFailException, match=message) as caught:
        patch_op(dep["id"], **kwargs).execute(make_context())
    text = str(caught.value)
    assert f"deployment {name!r}" in text and f"source {dep['source']}" in text
    assert "check_source_rules=False" in text
    assert emulator.state.counters == {LIST_ROUTE: 1}  # the deployment was read; nothing was sent


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"memory_mb": 512.5}, r"source_config\.resource_spec\.memory_mb: must be a whole number"),
        ({"db_max_connections": 10.5}, r"resource_spec\.db_max_connections: must be a whole number"),
        ({"min_scale": True}, r"resource_spec\.min_scale: Value error, must be a number"),
        ({"cpu": 100}, r"resource_spec\.cpu: Input should be less than or equal to 8"),
        ({"redis_cpu_limit": 16.5}, r"resource_spec\.redis_cpu_limit: Input should be less than or equal to 16"),
        ({"queue_cpu": 0.05}, r"resource_spec\.queue_cpu: Input should be greater than or equal to 0\.1"),
        ({"sidecars": [{"image": "envoy"}]}, r"resource_spec\.sidecars\.0\.name: Field required"),
        ({"labels": {"team": 7}}, r"resource_spec\.labels\.team: Input should be a valid string"),
        ({"volume_mounts": [{"name": "cfg", "mountPath": None}]}, r"volume_mounts\.0\.mountPath"),
    ],
)
def test_request_schema_is_refused_before_any_request(emulator: Any, spec: dict[str, Any], message: str) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    with pytest.raises(AirflowFailException, match=message):
        patch_op(dep["id"], source_config={"resource_spec": spec}).execute(make_context())
    assert emulator.state.counters == {}


def test_a_kept_value_the_request_schema_refuses_is_named_as_kept(service: Any) -> None:
    from tests.tasks.conftest import seed

    data = seed(1, source="external_docker", source_config={"resource_spec": {"min_scale": 1, "cpu": 12}})
    data["deployments"][0]["source_revision_config"] = {"image_uri": "app:1"}
    emulator = service(data=data)
    dep_id = emulator.state.snapshot()["deployments"][0]["id"]
    with pytest.raises(AirflowFailException, match=r"resource_spec\.cpu \(kept from the deployment's current"):
        patch_op(dep_id, source_config={"resource_spec": {"min_scale": 2}}).execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 0


def test_a_create_time_field_with_its_current_value_is_accepted_and_not_sent(
    emulator: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dep = deployment_named(emulator, CODEHOST)
    same = {"repo_url": dep["source_config"]["repo_url"], "integration_id": dep["source_config"]["integration_id"]}
    result = patch_op(dep["id"], source_config={**same, "build_on_push": False}).execute(make_context())
    assert result["source_config"]["build_on_push"] is False
    assert "Not sending source_config.integration_id, source_config.repo_url: unchanged" in capfd.readouterr().out
    with pytest.raises(AirflowFailException, match=r"nothing to change: source_config\.repo_url already has"):
        patch_op(dep["id"], source_config={"repo_url": same["repo_url"]}).execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 1


def test_do_not_use_fields_are_sent_with_a_warning(emulator: Any, capfd: pytest.CaptureFixture[str]) -> None:
    dep = deployment_named(emulator, EXTERNAL)
    patch_op(dep["id"], source_config={"resource_spec": {"executor_memory_mb": 256}}).execute(make_context())
    assert spec_of(emulator, EXTERNAL)["executor_memory_mb"] == 256
    assert "source_config.resource_spec.executor_memory_mb: production's reference marks" in capfd.readouterr().out


def test_a_rule_skipped_locally_gets_the_servers_400_as_a_clear_failure(emulator: Any) -> None:
    dep = deployment_named(emulator, CODEHOST)
    task = patch_op(dep["id"], source_config={"repo_url": "https://codehost.example.com/x/y"}, check_source_rules=False)
    with pytest.raises(RequestRejectedError, match=r"PATCH /v2/deployments/.* failed with 400 .*repo_url") as caught:
        task.execute(make_context())
    assert caught.value.status_code == 400
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert deployment_named(emulator, CODEHOST)["source_config"]["repo_url"] == dep["source_config"]["repo_url"]


def test_resource_spec_mode_is_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="resource_spec_mode must be 'merge' or 'replace', got 'merged'"):
        patch_op(str(uuid.uuid4()), image_uri="app:2", resource_spec_mode="merged")
