"""Operators against the emulator over HTTP: return values, XComs, validation, retries, secrets."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, TaskDeferred

from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import (
    TASK_STATE_KEY,
    DeploymentLink,
    ListDeploymentsOperator,
    ListOAuthProvidersOperator,
    ListRepositoriesOperator,
    PatchDeploymentOperator,
)
from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger
from tests.tasks.conftest import (
    LIST_ROUTE,
    PATCH_ROUTE,
    SECRET,
    FakeStore,
    FakeTI,
    deployment_named,
    make_context,
    scan_for_secret,
    seed,
)

INTEGRATION = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
REPOS_ROUTE = "GET /v1/integrations/forge/codehost/{integration_id}/repos"


def patch_op(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {"task_id": "patch", "poll_interval": 0.05, **kwargs}
    if "image_uri" in kwargs:  # production takes image_uri for an internal_docker (or external_docker) revision only
        options.setdefault("revision_source", "internal_docker")
    options.setdefault("wait_for_rollout", False)  # these tests look at the patch itself; waiting is tested apart
    return PatchDeploymentOperator(deployment_id=deployment_id, **options)


def revisions_of(emulator: Any, deployment_id: str) -> list[str]:
    return [revision["id"] for revision in emulator.state.deployment(deployment_id)["revisions"]]


# ------------------------------------------------------------------------------------------ lists
def test_list_oauth_providers(emulator: Any) -> None:
    result = ListOAuthProvidersOperator(task_id="providers").execute(make_context())
    assert result == emulator.state.list_oauth_providers()
    json.dumps(result)


def test_list_repositories(emulator: Any) -> None:
    result = ListRepositoriesOperator(task_id="repos", integration_id=INTEGRATION).execute(make_context())
    assert [repo["name"] for repo in result] == ["checkout-api", "search", "billing-worker", "support-bot"]


def test_pick_one_repository(emulator: Any) -> None:
    task = ListRepositoriesOperator(
        task_id="repos", integration_id=INTEGRATION, repository_owner="ACME-corp", repository_name="Search"
    )
    result = task.execute(make_context())
    assert result["repository"]["name"] == "search"
    assert result["deployment_creation_values"] == {
        "integration_id": INTEGRATION,
        "source_config": {"repo_url": "https://codehost.example.com/acme-corp/search"},
        "source_revision_config": {"repo_ref": "master"},
    }


@pytest.mark.parametrize(("owner", "name"), [(None, "nope"), ("someone-else", "search")])
def test_repository_filter_without_a_match_names_filter_and_candidates(
    emulator: Any, owner: str | None, name: str
) -> None:
    task = ListRepositoriesOperator(
        task_id="repos", integration_id=INTEGRATION, repository_owner=owner, repository_name=name
    )
    with pytest.raises(AirflowFailException, match=f"no repository matches repository_name=.*{name}") as raised:
        task.execute(make_context())
    if owner is None:
        assert "acme-corp/checkout-api" in str(raised.value)


def test_invalid_integration_id_fails_before_any_request(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="integration_id"):
        ListRepositoriesOperator(task_id="repos", integration_id="forty-two").execute(make_context())
    assert emulator.state.counters == {}


def test_list_deployments_all_pages_capped(emulator: Any, capfd: pytest.CaptureFixture[str]) -> None:
    result = ListDeploymentsOperator(task_id="list", page_size=7, max_results=20).execute(make_context())
    assert len(result) == 20 and len({item["id"] for item in result}) == 20
    assert emulator.state.count(LIST_ROUTE) == 3
    assert "More than max_results=20 deployments match" in capfd.readouterr().out
    every = ListDeploymentsOperator(task_id="list").execute(make_context())
    assert len(every) == 250
    assert all(secret["value"] == "**********" for item in every for secret in item["secrets"])


def test_list_deployments_filters(emulator: Any) -> None:
    wanted = [deployment_named(emulator, name)["id"] for name in ("search-dev", "search-prod", "checkout-api-dev")]
    result = ListDeploymentsOperator(
        task_id="list", name_contains="search", deployment_ids=",".join(wanted), status="READY"
    ).execute(make_context())
    assert sorted(item["name"] for item in result) == ["search-dev", "search-prod"]


def test_list_deployments_invalid_filter_fails_before_any_request(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="status"):
        ListDeploymentsOperator(task_id="list", status="ready").execute(make_context())  # READY in the wrong case
    with pytest.raises(AirflowFailException, match="deployment_ids"):
        ListDeploymentsOperator(task_id="list", deployment_ids="x,y").execute(make_context())
    assert emulator.state.counters == {}


def test_list_deployments_feeds_expand() -> None:
    with DAG("expand_demo", schedule=None):
        listed = ListDeploymentsOperator(task_id="list", name_contains="search")
        ids = listed.output.map(lambda item: item["id"])
        mapped = PatchDeploymentOperator.partial(task_id="patch", image_uri="app:2").expand(deployment_id=ids)
    assert mapped.upstream_task_ids == {"list"}
    assert "deployment_id" in mapped.expand_input.value


# ------------------------------------------------------------------------------------------ patch
def test_patch_returns_deployment_and_pushes_xcoms(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ti = FakeTI()
    task = patch_op(dep["id"], repo_ref="release", source_revision_config={"graph_config_path": "agent/graph.json"})
    result = task.execute(make_context(ti))
    new = result["latest_revision_id"]
    assert new not in (None, dep["latest_revision_id"])
    assert result["source_revision_config"]["graph_config_path"] == "agent/graph.json"
    assert result["source_revision_config"]["repo_ref"] == "release"
    assert ti.xcoms == {
        "deployment_id": dep["id"],
        "revision_id": new,
        "previous_active_revision_id": dep["active_revision_id"],
        "deployment_url": dep["source_config"]["custom_url"],  # the service sets it for codehost deployments
        # What served before, for a rollback: the non-secret fields of the previously active revision.
        "previous_source_revision_config": {
            name: value for name, value in dep["source_revision_config"].items() if value is not None
        },
        "previous_resource_spec": {},  # the whole resource_spec before the patch (this deployment has none)
    }
    assert emulator.state.count(PATCH_ROUTE) == 1


def test_patch_without_new_revision_pushes_an_empty_revision_and_the_link(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment_named(emulator, "billing-worker-prod")  # custom_url is settable for external_docker only
    ti = FakeTI()
    url = "https://checkout.example.com"
    task = patch_op(dep["id"], source_config={"custom_url": url})
    result = task.execute(make_context(ti))
    assert result["latest_revision_id"] == dep["latest_revision_id"]
    assert ti.xcoms["revision_id"] == ""  # not None: Airflow would read that as a missing XCom
    assert ti.xcoms["deployment_url"] == url

    from airflow.sdk.execution_time.xcom import XCom
    from airflow.sdk.types import TaskInstanceKey

    monkeypatch.setattr(XCom, "get_value", classmethod(lambda cls, *, ti_key, key: ti.xcoms.get(key)))
    monkeypatch.setattr(XCom, "get_all", classmethod(lambda cls, *, key, **where: [ti.xcoms[key]]))
    link = DeploymentLink()
    assert link.name == "Deployment"
    for map_index in (-1, 3):
        key = TaskInstanceKey(dag_id="d", task_id="patch", run_id="r", try_number=1, map_index=map_index)
        assert link.get_link(task, ti_key=key) == url
    assert any(isinstance(item, DeploymentLink) for item in task.operator_extra_links)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_config": {"repo_ulr": "https://x"}}, "source_config.repo_ulr.*did you mean 'repo_url'"),
        ({"source_revision_config": {"image": "x"}}, "source_revision_config.image"),
        ({"image_uri": "a", "source_revision_config": {"image_uri": "b"}}, "image_uri='a' conflicts"),
        ({"revision_source": "CODEHOST"}, "revision_source"),
        ({}, "empty patch"),
        ({"secrets": [{"name": "A"}]}, r"secrets\[0\] must be a mapping with keys name and value"),
        ({"secrets": {"A": {"vault": "x"}}}, "a reference must be"),
        ({"secrets": [{"name": "A", "value": "x"}, {"name": "A", "value": "y"}]}, "secret names must be unique"),
        ({"image_uri": "None"}, "image_uri rendered to 'None'"),
        ({"repo_ref": "", "secrets": {"A": "x"}}, "repo_ref rendered to ''"),
        ({"source_revision_config": {"image_uri": "None"}}, "source_revision_config.image_uri rendered to 'None'"),
        ({"source_revision_config": {"repo_ref": " "}}, "source_revision_config.repo_ref rendered to ' '"),
        ({"secrets": {"TOKEN": "{{ var.value.token }}"}}, r"secrets\['TOKEN'\]: the value looks like a Jinja template"),
    ],
)
def test_patch_is_validated_before_any_request(emulator: Any, kwargs: dict[str, Any], message: str) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    with pytest.raises(AirflowFailException, match=message):
        patch_op(dep["id"], **kwargs).execute(make_context())
    assert emulator.state.counters == {}


def test_invalid_deployment_id_fails_before_any_request(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="deployment_id"):
        patch_op("{{ params.dep }}", image_uri="x").execute(make_context())  # rendered to itself: not a UUID
    assert emulator.state.counters == {}


def test_unknown_deployment_fails(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="not found"):
        patch_op(str(uuid.uuid4()), image_uri="x").execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 0


def test_patch_and_wait(emulator: Any, advance_later: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    advance_later(emulator, 2.5, 0.2)
    ti = FakeTI()
    result = patch_op(dep["id"], image_uri="app:2", wait_for_rollout=True).execute(make_context(ti))
    assert result["active_revision_id"] == ti.xcoms["revision_id"] == result["latest_revision_id"]
    assert result["status"] == "READY"


def test_patch_and_wait_fails_fast_on_a_failed_build(emulator: Any, advance_later: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "compile error")
    advance_later(emulator, 2.5, 0.1)
    with pytest.raises(AirflowFailException, match="BUILD_FAILED: compile error"):
        patch_op(dep["id"], image_uri="app:2", wait_for_rollout=True, timeout=30).execute(make_context())


def test_patch_waits_by_default_and_fails_on_a_failed_build(emulator: Any, advance_later: Any) -> None:
    """Issue 33: without ``wait_for_rollout`` the task waits (as dbt Cloud's ``wait_for_termination``), so a
    failed build fails the task instead of a success in seconds; the old revision keeps serving."""
    dep = deployment_named(emulator, "checkout-api-dev")
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "compile error")
    advance_later(emulator, 2.5, 0.1)
    task = PatchDeploymentOperator(
        task_id="patch", deployment_id=dep["id"], revision_source="internal_docker", image_uri="app:2", timeout=30
    )
    assert task.wait_for_rollout is True
    with pytest.raises(AirflowFailException, match="BUILD_FAILED: compile error"):
        task.execute(make_context())
    after = deployment_named(emulator, "checkout-api-dev")
    assert after["active_revision_id"] == dep["active_revision_id"]
    failed = next(r for r in after["revisions"] if r["id"] == after["latest_revision_id"])
    assert failed["status"] == "BUILD_FAILED"


def test_patch_without_waiting_warns_that_it_does_not_know_the_outcome(emulator: Any, task_logs: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ti = FakeTI()
    result = patch_op(dep["id"], image_uri="app:2", wait_for_rollout=False).execute(make_context(ti))
    new = ti.xcoms["revision_id"]
    assert new and result["latest_revision_id"] == new
    after = deployment_named(emulator, "checkout-api-dev")
    assert after["active_revision_id"] == dep["active_revision_id"] != new  # not live yet: nobody waited
    assert f"does not know whether revision {new}" in task_logs()


async def test_patch_and_defer(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    ti = FakeTI()
    task = patch_op(
        dep["id"],
        image_uri="app:2",
        secrets={"TOKEN": SECRET},
        wait_for_rollout=True,
        deferrable=True,
        timeout=120,
        max_attempts=4,
        backoff_max=1.5,
    )
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(make_context(ti))
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeploymentRolloutTrigger)
    assert deferred.value.method_name == "execute_complete"
    _, kwargs = trigger.serialize()
    assert kwargs["deployment_id"] == dep["id"]
    assert kwargs["revision_id"] == ti.xcoms["revision_id"]
    assert kwargs["hook_params"] == {
        "deployment_service_conn_id": "deployment_service_default",
        "max_attempts": 4,
        "backoff_max": 1.5,
    }
    assert kwargs["poll_interval"] == 0.05
    assert time.time() + 110 < kwargs["deadline"] <= time.time() + 120
    scan_for_secret(kwargs, repr(deferred.value), ti.xcoms)
    emulator.state.advance(2.5)
    events = [event async for event in trigger.run()]
    result = task.execute_complete(make_context(ti), events[0].payload)
    assert result["active_revision_id"] == ti.xcoms["revision_id"]
    scan_for_secret(result, events[0].payload)


# ------------------------------------------------------------------------------------------ retries
@pytest.mark.parametrize("with_store", [True, False])
def test_retried_patch_creates_no_second_revision(emulator: Any, with_store: bool) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore() if with_store else None
    first = FakeTI(try_number=1)
    kwargs = {"image_uri": "app:2", "secrets": {"TOKEN": SECRET}, "wait_for_rollout": True, "timeout": 0.2}
    with pytest.raises(AirflowSensorTimeout):
        patch_op(dep["id"], **kwargs).execute(make_context(first, store))
    assert emulator.state.count(PATCH_ROUTE) == 1
    if store is not None:
        assert store.data[TASK_STATE_KEY]["revision_id"] == first.xcoms["revision_id"]
    revisions = revisions_of(emulator, dep["id"])

    emulator.state.advance(2.5)
    second = FakeTI(try_number=2)
    result = patch_op(dep["id"], **kwargs).execute(make_context(second, store))
    assert emulator.state.count(PATCH_ROUTE) == 1  # reattached, not patched again
    assert revisions_of(emulator, dep["id"]) == revisions
    assert second.xcoms["revision_id"] == first.xcoms["revision_id"] == result["active_revision_id"]
    # without a store the revision active before the patch is no longer known
    assert second.xcoms["previous_active_revision_id"] == (dep["active_revision_id"] if with_store else "")


def test_retry_with_a_changed_patch_patches_anew(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore()
    patch_op(dep["id"], image_uri="app:2").execute(make_context(FakeTI(), store))
    ti = FakeTI(try_number=2)
    result = patch_op(dep["id"], image_uri="app:3").execute(make_context(ti, store))
    assert emulator.state.count(PATCH_ROUTE) == 2
    assert result["source_revision_config"]["image_uri"] == "app:3"
    assert store.data[TASK_STATE_KEY]["revision_id"] == ti.xcoms["revision_id"] == result["latest_revision_id"]


def test_retry_without_an_earlier_patch_patches(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    # try 1 failed before patching (nothing recorded, the deployment does not show the change)
    result = patch_op(dep["id"], image_uri="app:3").execute(make_context(FakeTI(try_number=2), FakeStore()))
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert result["source_revision_config"]["image_uri"] == "app:3"


def test_retry_after_a_failed_build_does_not_build_the_same_change_again(emulator: Any) -> None:
    """The earlier try's revision failed its build: a retry reattaches to it (its verdict stands), never
    patches a second time. Without waiting it returns as the first try did; waiting, it fails."""
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore()
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED")
    patch_op(dep["id"], image_uri="app:2").execute(make_context(FakeTI(), store))
    emulator.state.advance(2.5)
    failed = store.data[TASK_STATE_KEY]["revision_id"]
    ti = FakeTI(try_number=2)
    patch_op(dep["id"], image_uri="app:2").execute(make_context(ti, store))
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert ti.xcoms["revision_id"] == failed == deployment_named(emulator, "checkout-api-dev")["latest_revision_id"]
    with pytest.raises(AirflowFailException, match=f"not patching again on this retry: .*{failed} ended with status"):
        patch_op(dep["id"], image_uri="app:2", wait_for_rollout=True).execute(make_context(FakeTI(try_number=3), store))
    assert emulator.state.count(PATCH_ROUTE) == 1


def test_retry_after_being_superseded_does_not_roll_back_the_newer_revision(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    store = FakeStore()
    patch_op(dep["id"], image_uri="app:ours").execute(make_context(FakeTI(), store))
    emulator.state.advance(2.5)
    colleague = PatchDeploymentRequest(
        revision_source="internal_docker",  # type: ignore[arg-type]
        source_revision_config={"image_uri": "app:colleague"},  # type: ignore[arg-type]
    )
    newer = emulator.state.patch_deployment(dep["id"], colleague)["latest_revision_id"]
    emulator.state.advance(2.5)
    with pytest.raises(AirflowFailException, match=f"not patching again.*superseded by {newer}"):
        patch_op(dep["id"], image_uri="app:ours").execute(make_context(FakeTI(try_number=2), store))
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert deployment_named(emulator, "checkout-api-dev")["source_revision_config"]["image_uri"] == "app:colleague"


# ------------------------------------------------------------------------------------------ secrets
def test_secrets_reach_the_service_and_nothing_else(
    service: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    emulator = service(data=seed(1))
    dep_id = emulator.state.snapshot()["deployments"][0]["id"]
    from_variable = f"dbpw-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_VAR_DB_PASSWORD", from_variable)
    assert redact(from_variable) == from_variable
    ti = FakeTI()
    task = patch_op(
        dep_id,
        image_uri="{{ params.image }}",
        secrets=[{"name": "TOKEN", "value": SECRET}, {"name": "DB_PASSWORD", "value": {"variable": "DB_PASSWORD"}}],
        params={"image": "app:9"},
    )
    context = make_context(ti)
    context["params"] = {"image": "app:9"}
    task.render_template_fields(context)
    assert task.image_uri == "app:9"
    result = task.execute(context)
    stored = {item["name"]: item["value"] for item in emulator.state.deployment(dep_id)["secrets"]}
    assert stored == {"TOKEN": SECRET, "DB_PASSWORD": from_variable}  # the service got the real values
    assert redact(f"x {from_variable} y") == "x *** y"  # registered with the secret masker
    assert "secrets" not in task.template_fields
    rendered = {name: getattr(task, name) for name in task.template_fields}
    out, err = capfd.readouterr()
    for text in (result, ti.xcoms, rendered, out, err, caplog.text):
        scan_for_secret(text)
        assert from_variable not in (text if isinstance(text, str) else json.dumps(text, default=str))
    assert {item["value"] for item in result["secrets"]} == {"**********"}


def test_list_operators_never_return_echoed_secrets(service: Any, capfd: pytest.CaptureFixture[str]) -> None:
    service(data=seed(3))
    result = ListDeploymentsOperator(task_id="list").execute(make_context())
    assert len(result) == 3
    out, err = capfd.readouterr()
    scan_for_secret(result, out, err)


# ------------------------------------------------------------------------------------------ misspelt arguments
@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: patch_op(str(uuid.uuid4()), image=SECRET), "got unknown argument: image (did you mean image_uri?)"),
        (
            lambda: ListDeploymentsOperator(task_id="list", name_contain="search"),
            "name_contain (did you mean name_contains?)",
        ),
        (
            lambda: PatchDeploymentOperator(task_id="p", deployment_name="a", wait_for_rolout=True),
            "wait_for_rolout (did you mean wait_for_rollout",
        ),
        (
            lambda: PatchDeploymentOperator(task_id="p", deployment_name="a", zzz=1),
            "zzz (its own arguments are ",
        ),
    ],
)
def test_a_misspelt_task_argument_names_the_closest_valid_one(emulator: Any, make: Any, words: str) -> None:
    """Issue 33: ``image=`` got Airflow's generic "Invalid arguments were passed"; the value (which may be a
    secret) is never shown."""
    with pytest.raises(TypeError) as raised:
        make()
    message = str(raised.value)
    assert words in message
    assert SECRET not in message and "Invalid arguments" not in message
    assert emulator.state.counters == {}
